/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the transport ops table and its job: the shared-memory transport on a real copy
 * engine moves READ and WRITE jobs (every byte and the guards around it checked), a cancelled
 * job reports its errno and the mapped status, and the one errno-to-status mapping holds. The
 * ops beyond jobs: registering memory is "not needed" for shm and TCP and refused with a reason
 * by an RDMA transport without a working device (or built without RDMA); a TCP channel opened on
 * a socket pair moves a job and describes itself; the RDMA transport describes the devices of its
 * device map.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "kvdist-config.h"
#include "common/status.h"
#include "daemon/memory/cache.h"
#include "daemon/memory/region.h"
#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

#define GUARD 512
#define GUARD_BYTE 0xa5
#define FRESH_BYTE 0x5a
#define SIZE (3 * 4096 + 123)

typedef struct Fixture {
        struct event_base *base;
        TransportSet set;
        Transport *shm;
        uint8_t *src;                  /* the seeded pattern */
        uint8_t *expect;               /* a copy of it that no job touches */
        uint8_t *mem;                  /* GUARD, SIZE destination bytes, GUARD */
        Region src_region, mem_region; /* over @src and all of @mem, for the segments */
        TransportSegment segs[3];
        TransportJob job;
        unsigned calls;
        int status;
} Fixture;

static uint8_t *fixture_dst(Fixture *f)
{
        return f->mem + GUARD;
}

static void fixture_init(Fixture *f)
{
        uint32_t x = 2654435761u;

        *f = (Fixture){0};
        f->base = event_base_new();
        ck_assert_ptr_nonnull(f->base);
        f->set.base = f->base;
        ck_assert_int_eq(engine_new(f->base, 2, &f->set.engine), 0);
        ck_assert_int_eq(transport_shm_new(&f->set, &f->shm), 0);
        f->src = malloc(SIZE);
        f->expect = malloc(SIZE);
        f->mem = malloc(SIZE + 2 * GUARD);
        ck_assert_ptr_nonnull(f->src);
        ck_assert_ptr_nonnull(f->expect);
        ck_assert_ptr_nonnull(f->mem);
        for (size_t i = 0; i < SIZE; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                f->src[i] = (uint8_t)x == FRESH_BYTE ? 0 : (uint8_t)x;
        }
        memcpy(f->expect, f->src, SIZE);
        memset(f->mem, GUARD_BYTE, GUARD);
        memset(f->mem + GUARD, FRESH_BYTE, SIZE);
        memset(f->mem + GUARD + SIZE, GUARD_BYTE, GUARD);
        f->src_region = (Region){.data = f->src, .size = SIZE};
        f->mem_region = (Region){.data = f->mem, .size = SIZE + 2 * GUARD};
}

static void fixture_deinit(Fixture *f)
{
        transport_free(f->shm);
        engine_free(f->set.engine);
        event_base_free(f->base);
        free(f->src);
        free(f->expect);
        free(f->mem);
}

static void on_done(TransportJob *job, int status)
{
        Fixture *f = job->userdata;

        ck_assert_ptr_eq(job, &f->job);
        ck_assert_ptr_null(job->priv);
        f->calls++;
        f->status = status;
}

static void run_until_done(Fixture *f)
{
        while (f->calls == 0)
                ck_assert_int_ge(event_base_loop(f->base, EVLOOP_ONCE), 0);
}

static void assert_guards(const Fixture *f)
{
        for (size_t i = 0; i < GUARD; i++)
                if (f->mem[i] != GUARD_BYTE || f->mem[GUARD + SIZE + i] != GUARD_BYTE)
                        ck_abort_msg("guard byte %zu was written", i);
}

/*
 * Three segments that move the pattern's thirds out of order: the destination's first third
 * takes the source's last, and so on. @dir decides which side the local addresses name.
 */
static void fixture_job(Fixture *f, TransportDir dir)
{
        uint64_t third = SIZE / 3, last = SIZE - 2 * third;
        uint64_t dst = GUARD; /* offsets into f->mem_region and f->src_region */
        struct {
                uint64_t dst;
                uint64_t src;
                uint64_t len;
        } pieces[3] = {
                {dst, 2 * third, last},
                {dst + last, third, third},
                {dst + last + third, 0, third},
        };

        for (size_t i = 0; i < 3; i++) {
                bool read = dir == TRANSPORT_READ;

                f->segs[i] = (TransportSegment){
                        .region = read ? &f->mem_region : &f->src_region,
                        .offset = read ? pieces[i].dst : pieces[i].src,
                        .len = pieces[i].len,
                        .remote_region = read ? &f->src_region : &f->mem_region,
                        .remote = read ? pieces[i].src : pieces[i].dst,
                };
        }
        f->job = (TransportJob){
                .dir = dir, .segs = f->segs, .n_segs = 3, .done = on_done, .userdata = f};
}

static void assert_moved(Fixture *f)
{
        uint64_t third = SIZE / 3, last = SIZE - 2 * third;
        const uint8_t *dst = fixture_dst(f);

        ck_assert_int_eq(memcmp(dst, f->expect + 2 * third, last), 0);
        ck_assert_int_eq(memcmp(dst + last, f->expect + third, third), 0);
        ck_assert_int_eq(memcmp(dst + last + third, f->expect, third), 0);
        /* The source is only read. */
        ck_assert_int_eq(memcmp(f->src, f->expect, SIZE), 0);
        assert_guards(f);
}

START_TEST(test_status_from_errno)
{
        ck_assert_int_eq(transport_status_from_errno(0), STATUS_OK);
        ck_assert_int_eq(transport_status_from_errno(-EILSEQ), STATUS_FAILED);
        ck_assert_int_eq(transport_status_from_errno(-ECANCELED), STATUS_PEER_LOST);
        ck_assert_int_eq(transport_status_from_errno(-ECONNRESET), STATUS_PEER_LOST);
        ck_assert_int_eq(transport_status_from_errno(-EACCES), STATUS_PEER_LOST);
}
END_TEST

START_TEST(test_shm_read_and_write)
{
        static const TransportDir dirs[] = {TRANSPORT_READ, TRANSPORT_WRITE};
        Fixture f;

        for (size_t d = 0; d < 2; d++) {
                uint64_t done = 1;

                fixture_init(&f);
                ck_assert_str_eq(transport_name(f.shm), "shm");
                fixture_job(&f, dirs[d]);
                ck_assert_int_eq(transport_submit(f.shm, &f.job), 0);
                ck_assert_uint_eq(f.calls, 0);
                run_until_done(&f);
                ck_assert_uint_eq(f.calls, 1);
                ck_assert_int_eq(f.status, STATUS_OK);
                ck_assert_int_eq(f.job.error, 0);
                assert_moved(&f);
                /* Over: nothing in flight, nothing to report. */
                ck_assert_int_eq(transport_progress(f.shm, &f.job, &done), 0);
                ck_assert_uint_eq(done, 0);
                fixture_deinit(&f);
        }
}
END_TEST

START_TEST(test_shm_cancel)
{
        Fixture f;

        fixture_init(&f);
        /* Held, the threads take nothing: the job is certainly cancelled before a byte moves. */
        engine_hold(f.set.engine, true);
        fixture_job(&f, TRANSPORT_READ);
        ck_assert_int_eq(transport_submit(f.shm, &f.job), 0);
        transport_cancel(f.shm, &f.job);
        engine_hold(f.set.engine, false);
        run_until_done(&f);
        ck_assert_uint_eq(f.calls, 1);
        ck_assert_int_eq(f.job.error, -ECANCELED);
        ck_assert_int_eq(f.status, STATUS_PEER_LOST);
        for (size_t i = 0; i < SIZE; i++)
                if (fixture_dst(&f)[i] != FRESH_BYTE)
                        ck_abort_msg("byte %zu landed after the cancel", i);
        assert_guards(&f);
        fixture_deinit(&f);
}
END_TEST

START_TEST(test_tcp_without_channel)
{
        TransportSet set = {0};
        uint8_t byte = 0;
        Region region = {.data = &byte, .size = 1};
        TransportSegment seg = {.region = &region, .len = 1};
        TransportJob job = {.dir = TRANSPORT_WRITE, .segs = &seg, .n_segs = 1};
        Transport *t = NULL;
        uint64_t done;

        ck_assert_int_eq(transport_tcp_new(&set, &t), 0);
        ck_assert_str_eq(transport_name(t), "tcp");
        ck_assert_int_eq(transport_submit(t, &job), -ENOTCONN);
        ck_assert_int_eq(transport_progress(t, &job, &done), -ENOENT);
        ck_assert_int_eq(transport_abandon(t, NULL, TRANSPORT_READ, 7, 100), -ENOTCONN);
        /* Nothing runs: a cancel is a no-op. */
        transport_cancel(t, &job);
        ck_assert_str_eq(transport_name(NULL), "none");
        ck_assert_ptr_null(transport_free(t));
}
END_TEST

/* A cache of two tensors of 4 KiB in @region, at offsets 0 and 8 KiB. */
static Cache *make_cache(Region *region)
{
        CacheDesc d = {.num_tensors = 2, .n_dims = 2, .shape = {4, 512}, .data_type = 1};
        CacheTensor tensors[2] = {{region, 0}, {region, 8192}};
        Cache *c = NULL;

        ck_assert_int_eq(cache_new(CACHE_CONTIGUOUS, &d, tensors, &c), 0);
        return c;
}

/* shm and TCP reach memory as it is: registering is "not needed", keys are 0. */
static void assert_no_registration(Transport *t, Cache *cache)
{
        TransportDeviceInfo info = {.port = 9};
        TransportRegion *r = (TransportRegion *)&info;
        const char *why = NULL;
        TransportKey key = {1, 2};
        uint64_t addr = 0;
        uint8_t buf[64];

        ck_assert_int_eq(transport_device_info(t, 3, NULL, &info, &why), 0);
        ck_assert_uint_eq(info.port, 0);
        ck_assert_str_eq(info.device, "");
        ck_assert_int_eq(transport_region_register(t, 3, NULL, buf, sizeof(buf), true, &r), 0);
        ck_assert_ptr_null(r);
        ck_assert_ptr_null(transport_region_free(r));
        ck_assert_int_eq(transport_cache_register(t, 3, cache, true), 0);
        ck_assert(transport_cache_registered(t, cache, true));
        ck_assert_int_eq(transport_cache_key(t, cache, 1, true, &addr, &key), 0);
        ck_assert_uint_eq(addr, (uint64_t)(uintptr_t)(cache->tensors[1].region->data + 8192));
        ck_assert_uint_eq(key.lkey, 0);
        ck_assert_uint_eq(key.rkey, 0);
        ck_assert_int_eq(transport_cache_key(t, cache, 2, false, &addr, &key), -ENOENT);
}

static void count_description(const TransportFacts *f, void *userdata)
{
        (*(unsigned *)userdata)++;
}

START_TEST(test_register_not_needed)
{
        TransportSet set = {0};
        Transport *shm = NULL, *tcp = NULL;
        TransportChannelInfo info;
        TransportFacts facts = {.n = 3};
        TransportChannel *ch = NULL;
        TransportPathInfo path;
        TransportRegion *r = NULL;
        Region *region = NULL;
        unsigned described = 0;
        const char *why = NULL;
        Cache *cache;

        ck_assert_int_eq(region_new_memfd("test-transport", 1 << 16, 1, &region), 0);
        cache = make_cache(region);
        ck_assert_int_eq(transport_shm_new(&set, &shm), 0);
        ck_assert_int_eq(transport_tcp_new(&set, &tcp), 0);
        assert_no_registration(shm, cache);
        assert_no_registration(tcp, cache);

        /* Same-node jobs need no channel; TCP's has no paths to connect. */
        ck_assert_int_eq(transport_channel_open(shm, &(TransportChannelSpec){0}, &ch), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_local(tcp, NULL, 0, &path), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_connect(tcp, NULL, 0, &path), -EOPNOTSUPP);
        transport_channel_info(shm, NULL, &info);
        ck_assert(!info.ready);
        ck_assert_uint_eq(info.n_paths, 0);
        ck_assert_ptr_null(transport_channel_close(tcp, NULL));

        /* Nothing to describe: no devices, no channel. */
        transport_describe(shm, count_description, &described);
        transport_describe(tcp, count_description, &described);
        ck_assert_uint_eq(described, 0);
        transport_describe_channel(tcp, NULL, &facts);
        ck_assert_uint_eq(facts.n, 0);

        /* A set without the transport: nothing there, and no crash. */
        ck_assert_int_eq(transport_device_info(NULL, 0, NULL, NULL, &why), -ENODEV);
        ck_assert_str_eq(why, "this daemon has no such transport");
        ck_assert_int_eq(transport_region_register(NULL, 0, NULL, &set, 1, false, &r), -ENODEV);
        ck_assert_int_eq(transport_cache_register(NULL, 0, cache, false), -ENODEV);
        ck_assert(!transport_cache_registered(NULL, cache, false));
        ck_assert_int_eq(transport_channel_open(NULL, &(TransportChannelSpec){0}, &ch),
                         -EOPNOTSUPP);
        ck_assert(!transport_channel_ready(NULL, (TransportChannel *)&set));
        ck_assert_int_eq(transport_path_local(NULL, NULL, 0, &path), -EOPNOTSUPP);
        transport_describe(NULL, count_description, &described);
        ck_assert_uint_eq(described, 0);
        transport_describe_channel(NULL, (TransportChannel *)&set, &facts);
        ck_assert_uint_eq(facts.n, 0);
        ck_assert_ptr_null(transport_channel_close(NULL, (TransportChannel *)&set));

        shm = transport_free(shm);
        tcp = transport_free(tcp);
        cache_free(cache);
        region_unref(region);
}
END_TEST

typedef struct Described {
        unsigned n;
        TransportFacts last;
} Described;

static void keep_description(const TransportFacts *f, void *userdata)
{
        Described *d = userdata;

        d->n++;
        d->last = *f;
}

static void assert_fact_string(const TransportFacts *f, const char *key, const char *value)
{
        const TransportFact *fact = transport_facts_find(f, key);

        ck_assert_ptr_nonnull(fact);
        ck_assert_int_eq(fact->type, TRANSPORT_FACT_STRING);
        ck_assert_str_eq(fact->s, value);
}

static void assert_fact_number(const TransportFacts *f, const char *key, uint64_t value)
{
        const TransportFact *fact = transport_facts_find(f, key);

        ck_assert_ptr_nonnull(fact);
        if (fact->type == TRANSPORT_FACT_U64)
                ck_assert_uint_eq(fact->u, value);
        else {
                ck_assert_int_eq(fact->type, TRANSPORT_FACT_INT);
                ck_assert_int_eq(fact->i, (int64_t)value);
        }
}

/*
 * An RDMA transport whose device map names a device this machine does not have (none here has
 * any): every memory and channel op is refused with a reason, "not supported" when built without
 * libibverbs, and the device is described as broken.
 */
START_TEST(test_rdma_without_device)
{
        DeviceConfig devices[] = {
                {.device_id = 0,
                 .rdma_device = (char *)"kvdist_no_such_dev",
                 .port = 1,
                 .gid_index = -1,
                 .transport = TRANSPORT_KIND_AUTO},
                {.device_id = 1, .transport = TRANSPORT_KIND_AUTO},
        };
        TransportSet set = {.devices = devices, .n_devices = 2};
        TransportDeviceInfo remote = {.device = "theirs", .mtu = 1024};
        TransportChannelSpec spec = {
                .device = "kvdist_no_such_dev",
                .id = 1,
                .initiator = true,
                .remote = &remote,
                .n_paths = 1,
        };
        TransportRegion *r = NULL;
        TransportChannel *ch = NULL;
        Region *region = NULL;
        Described d = {0};
        const char *why = NULL;
        uint8_t buf[64];
        Transport *direct;
        Cache *cache;

        set.base = event_base_new();
        ck_assert_ptr_nonnull(set.base);
        ck_assert_int_eq(region_new_memfd("test-transport", 1 << 16, 1, &region), 0);
        cache = make_cache(region);
        ck_assert_int_eq(transport_set_init(&set, NULL), 0);
        direct = transport_set_get(&set, TRANSPORT_ROLE_DIRECT);
        ck_assert_str_eq(transport_name(direct), "rdma");

        for (int32_t id = 0; id < 3; id++) {
                why = NULL;
                ck_assert_int_eq(transport_device_info(direct, id, NULL, NULL, &why),
                                 HAVE_RDMA ? -ENODEV : -EOPNOTSUPP);
                ck_assert_ptr_nonnull(why);
                if (!HAVE_RDMA)
                        ck_assert_str_eq(why, "this kvdistd was built without libibverbs");
                else if (id != 0)
                        ck_assert_str_eq(why,
                                         "the device map names no RDMA device for this device_id");
        }
        ck_assert_int_eq(transport_device_info(direct, 0, "kvdist_no_such_dev", NULL, &why),
                         HAVE_RDMA ? -ENODEV : -EOPNOTSUPP);
        ck_assert_int_eq(transport_region_register(direct, 0, NULL, buf, sizeof(buf), true, &r),
                         HAVE_RDMA ? -ENODEV : -EOPNOTSUPP);
        ck_assert_ptr_null(r);
        ck_assert_int_eq(transport_cache_register(direct, 0, cache, true),
                         HAVE_RDMA ? -ENODEV : -EOPNOTSUPP);
        ck_assert(!transport_cache_registered(direct, cache, false));
        ck_assert_int_eq(transport_cache_key(direct, cache, 0, false, NULL, NULL), -ENOENT);
        ck_assert_int_eq(transport_channel_open(direct, &spec, &ch),
                         HAVE_RDMA ? -EINVAL : -EOPNOTSUPP);
        ck_assert_ptr_null(ch);

        transport_describe(direct, keep_description, &d);
        if (HAVE_RDMA) {
                /* The one device the map names, kept with what went wrong. */
                ck_assert_uint_eq(d.n, 1);
                assert_fact_string(&d.last, "name", "kvdist_no_such_dev");
                assert_fact_string(&d.last, "state", "error");
                assert_fact_string(&d.last, "link_layer", "missing");
                assert_fact_number(&d.last, "memory_regions", 0);
                assert_fact_number(&d.last, "port", 1);
                ck_assert_str_ne(transport_facts_find(&d.last, "error")->s, "");
        } else
                ck_assert_uint_eq(d.n, 0);

        transport_set_deinit(&set);
        cache_free(cache);
        region_unref(region);
        event_base_free(set.base);
}
END_TEST

typedef struct ChannelEnd {
        TransportJob job;
        unsigned calls;
        int status;
        TransportChannel *broken;
        int broken_error;
} ChannelEnd;

static void channel_job_done(TransportJob *job, int status)
{
        ChannelEnd *e = job->userdata;

        e->calls++;
        e->status = status;
}

static void channel_on_broken(TransportChannel *ch, int error, void *userdata)
{
        ChannelEnd *e = userdata;

        e->broken = ch;
        e->broken_error = error;
}

/* A TCP channel on the one data connection @fd, telling @e when it breaks. */
static TransportChannel *channel_end_open(Transport *t, int fd, const char *name, ChannelEnd *e)
{
        TransportChannelSpec spec = {
                .fds = &fd,
                .n_fds = 1,
                .name = name,
                .broken = channel_on_broken,
                .userdata = e,
        };
        TransportChannel *ch = NULL;

        ck_assert_int_eq(transport_channel_open(t, &spec, &ch), 0);
        ck_assert_ptr_nonnull(ch);
        return ch;
}

/*
 * Two TCP channels on the ends of a socket pair: a WRITE job on one lands in the READ job of the
 * other (every byte and the guards checked), both describe their counters, and the end whose
 * peer closed reports itself broken.
 */
START_TEST(test_tcp_channel)
{
        struct event_base *base = event_base_new();
        TransportSet set = {.base = base};
        ChannelEnd a = {0}, b = {0};
        TransportChannel *cha, *chb;
        TransportSegment src_seg, dst_seg;
        Region src_region, mem_region;
        TransportFacts facts;
        Transport *t = NULL;
        uint8_t *src, *mem;
        int fds[2];

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(transport_tcp_new(&set, &t), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        cha = channel_end_open(t, fds[0], "a", &a);
        chb = channel_end_open(t, fds[1], "b", &b);

        src = malloc(SIZE);
        mem = malloc(SIZE + 2 * GUARD);
        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(mem);
        for (size_t i = 0; i < SIZE; i++)
                src[i] = (uint8_t)(i * 7 + 3);
        memset(mem, GUARD_BYTE, SIZE + 2 * GUARD);
        src_region = (Region){.data = src, .size = SIZE};
        mem_region = (Region){.data = mem, .size = SIZE + 2 * GUARD};
        src_seg = (TransportSegment){.region = &src_region, .len = SIZE};
        dst_seg = (TransportSegment){.region = &mem_region, .offset = GUARD, .len = SIZE};
        b.job = (TransportJob){.dir = TRANSPORT_READ,
                               .segs = &dst_seg,
                               .n_segs = 1,
                               .channel = chb,
                               .id = 42,
                               .done = channel_job_done,
                               .userdata = &b};
        a.job = (TransportJob){.dir = TRANSPORT_WRITE,
                               .segs = &src_seg,
                               .n_segs = 1,
                               .channel = cha,
                               .id = 42,
                               .done = channel_job_done,
                               .userdata = &a};
        ck_assert_int_eq(transport_submit(t, &b.job), 0);
        ck_assert_int_eq(transport_submit(t, &a.job), 0);
        while (a.calls == 0 || b.calls == 0)
                ck_assert_int_ge(event_base_loop(base, EVLOOP_ONCE), 0);
        ck_assert_int_eq(a.status, STATUS_OK);
        ck_assert_int_eq(b.status, STATUS_OK);
        ck_assert_int_eq(memcmp(mem + GUARD, src, SIZE), 0);
        for (size_t i = 0; i < GUARD; i++) {
                ck_assert_uint_eq(mem[i], GUARD_BYTE);
                ck_assert_uint_eq(mem[GUARD + SIZE + i], GUARD_BYTE);
        }

        transport_describe_channel(t, cha, &facts);
        assert_fact_number(&facts, "connections", 1);
        assert_fact_number(&facts, "bytes_sent", SIZE);
        assert_fact_number(&facts, "jobs_sent", 1);
        assert_fact_number(&facts, "jobs_in_flight", 0);
        transport_describe_channel(t, chb, &facts);
        assert_fact_number(&facts, "bytes_received", SIZE);
        assert_fact_number(&facts, "jobs_received", 1);

        /* b's peer goes away: b learns it as a broken channel, named as it was opened. */
        cha = transport_channel_close(t, cha);
        while (!b.broken)
                ck_assert_int_ge(event_base_loop(base, EVLOOP_ONCE), 0);
        ck_assert_ptr_eq(b.broken, chb);
        ck_assert_int_lt(b.broken_error, 0);
        ck_assert_ptr_null(a.broken);
        chb = transport_channel_close(t, chb);

        free(src);
        free(mem);
        transport_free(t);
        event_base_free(base);
}
END_TEST

/*
 * The table: one transport per role, each saying what it can do, and the device map's choice of
 * transport answered by name.
 */
START_TEST(test_table)
{
        DeviceConfig devices[] = {
                {.device_id = 0, .transport = TRANSPORT_KIND_AUTO},
                {.device_id = 1, .transport = TRANSPORT_KIND_TCP},
                {.device_id = 2, .transport = TRANSPORT_KIND_RDMA},
                {.device_id = 4, .transport = TRANSPORT_KIND_NULL},
        };
        TransportSet set = {.devices = devices, .n_devices = 4};
        TransportJob job = {.dir = TRANSPORT_READ};
        Transport *local, *stream, *direct, *null;
        TransportRegion *r = NULL;
        TransportChannel *ch = NULL;
        const char *why = NULL;
        uint8_t buf[16];

        set.base = event_base_new();
        ck_assert_ptr_nonnull(set.base);
        ck_assert_int_eq(transport_set_init(&set, NULL), 0);
        local = transport_set_get(&set, TRANSPORT_ROLE_LOCAL);
        stream = transport_set_get(&set, TRANSPORT_ROLE_STREAM);
        direct = transport_set_get(&set, TRANSPORT_ROLE_DIRECT);
        ck_assert_str_eq(transport_name(local), "shm");
        ck_assert_str_eq(transport_name(stream), "tcp");
        ck_assert_str_eq(transport_name(direct), "rdma");

        ck_assert(!transport_caps(local)->remote_access && !transport_caps(local)->registers);
        ck_assert(transport_caps(local)->mapped_only);
        ck_assert(!transport_caps(stream)->remote_access && !transport_caps(stream)->registers);
        ck_assert(transport_caps(stream)->mapped_only);
        ck_assert(transport_caps(direct)->remote_access && transport_caps(direct)->registers);
        ck_assert(!transport_caps(direct)->mapped_only);
        for (int i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                ck_assert_uint_eq(transport_caps(set.table[i])->max_segment, TRANSPORT_SEGMENT_MAX);
        ck_assert(!transport_caps(NULL)->remote_access);
        ck_assert_uint_eq(transport_caps(NULL)->max_segment, 0);

        ck_assert_ptr_null(transport_set_configured(&set, 0)); /* auto */
        ck_assert_ptr_eq(transport_set_configured(&set, 1), stream);
        ck_assert_ptr_eq(transport_set_configured(&set, 2), direct);
        ck_assert_ptr_null(transport_set_configured(&set, 3)); /* not in the map */

        /* The null transport: in the set for the map to name, in no role, and refusing all. */
        null = transport_set_configured(&set, 4);
        ck_assert_ptr_nonnull(null);
        ck_assert_str_eq(transport_name(null), "null");
        for (int i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                ck_assert_ptr_ne(set.table[i], null);
        ck_assert(!transport_caps(null)->remote_access && !transport_caps(null)->registers);
        ck_assert_uint_eq(transport_caps(null)->max_segment, 0);
        ck_assert_int_eq(transport_device_info(null, 4, NULL, NULL, &why), -ENODEV);
        ck_assert_str_eq(why, "the null transport moves nothing");
        ck_assert_int_eq(transport_submit(null, &job), -EOPNOTSUPP);
        ck_assert_int_eq(transport_region_register(null, 4, NULL, buf, sizeof(buf), true, &r),
                         -ENODEV);
        ck_assert_ptr_null(r);
        ck_assert_int_eq(transport_channel_open(null, &(TransportChannelSpec){.n_paths = 1}, &ch),
                         -EOPNOTSUPP);
        ck_assert_ptr_null(ch);
        ck_assert_int_eq(transport_desc_unpack(null, buf, sizeof(buf), &(TransportRemote){0}),
                         -EOPNOTSUPP);

        transport_set_deinit(&set);
        for (int i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                ck_assert_ptr_null(set.table[i]);
        event_base_free(set.base);
}
END_TEST

/*
 * Descriptors: a span of a registration packs into opaque bytes that the same kind of transport
 * unpacks to the same address, length and remote key; bytes a peer could send that are not such
 * a descriptor (short, long, another tag, a span that wraps) are refused whole, and transports
 * without remote access have none.
 */
START_TEST(test_descriptors)
{
        TransportSet set = {0};
        Transport *direct;
        uint8_t buf[256];
        TransportRegion region;
        TransportRemote m;
        TransportDesc d, bad;

        set.base = event_base_new();
        ck_assert_ptr_nonnull(set.base);
        ck_assert_int_eq(transport_set_init(&set, NULL), 0);
        direct = transport_set_get(&set, TRANSPORT_ROLE_DIRECT);
        region = (TransportRegion){
                .transport = direct,
                .addr = buf + 64,
                .len = 128,
                .key = {.lkey = 0x1111, .rkey = 0xa1b2c3d4},
        };

        ck_assert_int_eq(transport_region_desc(&region, buf + 80, 100, &d), 0);
        ck_assert_uint_gt(d.len, 0);
        ck_assert_uint_le(d.len, TRANSPORT_DESC_MAX);
        memset(&m, 0xee, sizeof(m));
        ck_assert_int_eq(transport_desc_unpack(direct, d.bytes, d.len, &m), 0);
        ck_assert_uint_eq(m.addr, (uintptr_t)(buf + 80));
        ck_assert_uint_eq(m.len, 100);
        ck_assert_uint_eq(m.key, 0xa1b2c3d4); /* the peer's key, never ours */

        /* The whole registration, and nothing past it. */
        ck_assert_int_eq(transport_region_desc(&region, buf + 64, 128, &d), 0);
        ck_assert_int_eq(transport_region_desc(&region, buf + 192, 0, &d), 0);
        ck_assert_int_eq(transport_region_desc(&region, buf + 65, 128, &d), -EINVAL);
        ck_assert_int_eq(transport_region_desc(&region, buf + 193, 0, &d), -EINVAL);
        ck_assert_int_eq(transport_region_desc(&region, buf + 63, 1, &d), -EINVAL);
        ck_assert_int_eq(transport_region_desc(&region, buf + 64, UINT64_MAX, &d), -EINVAL);

        ck_assert_int_eq(transport_region_desc(&region, buf + 64, 8, &d), 0);
        for (size_t n = 0; n < d.len; n++)
                ck_assert_int_eq(transport_desc_unpack(direct, d.bytes, n, &m), -EBADMSG);
        bad = d;
        bad.bytes[d.len] = 0;
        ck_assert_int_eq(transport_desc_unpack(direct, bad.bytes, d.len + 1, &m), -EBADMSG);
        ck_assert_int_eq(transport_desc_unpack(direct, bad.bytes, SIZE_MAX, &m), -EBADMSG);
        ck_assert_int_eq(transport_desc_unpack(direct, NULL, d.len, &m), -EBADMSG);
        bad.bytes[0] ^= 0xff;
        ck_assert_int_eq(transport_desc_unpack(direct, bad.bytes, d.len, &m), -EBADMSG);
        /* A span that wraps around the address space. */
        region.addr = (void *)(UINTPTR_MAX - 7);
        region.len = 8;
        ck_assert_int_eq(transport_region_desc(&region, region.addr, 8, &bad), 0);
        memset(bad.bytes + 9, 0xff, 8); /* its length, as a hostile peer would say it */
        ck_assert_int_eq(transport_desc_unpack(direct, bad.bytes, bad.len, &m), -EBADMSG);

        /* Transports that reach memory through mappings hand out no descriptors. */
        region.transport = transport_set_get(&set, TRANSPORT_ROLE_STREAM);
        ck_assert_int_eq(transport_region_desc(&region, region.addr, 8, &d), -EOPNOTSUPP);
        ck_assert_int_eq(transport_desc_unpack(transport_set_get(&set, TRANSPORT_ROLE_LOCAL),
                                               d.bytes, d.len, &m),
                         -EOPNOTSUPP);
        ck_assert_int_eq(transport_desc_unpack(NULL, d.bytes, d.len, &m), -EOPNOTSUPP);

        transport_set_deinit(&set);
        event_base_free(set.base);
}
END_TEST

static Suite *transport_suite(void)
{
        Suite *s = suite_create("transport");
        TCase *tc = tcase_create("jobs");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_status_from_errno);
        tcase_add_test(tc, test_shm_read_and_write);
        tcase_add_test(tc, test_shm_cancel);
        tcase_add_test(tc, test_tcp_without_channel);
        suite_add_tcase(s, tc);

        tc = tcase_create("ops");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_register_not_needed);
        tcase_add_test(tc, test_rdma_without_device);
        tcase_add_test(tc, test_table);
        tcase_add_test(tc, test_descriptors);
        tcase_add_test(tc, test_tcp_channel);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transport_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
