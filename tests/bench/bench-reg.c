/* SPDX-License-Identifier: MIT */
/*
 * bench-reg: what registering memory for RDMA costs kvdistd, per GiB, against a bare
 * ibv_reg_mr() of the same memory, in one process on one device. The baseline opens the device
 * itself and calls ibv_reg_mr() once over the whole range (local write, remote read and write);
 * kvdist's paths are the daemon's own functions from its static library:
 *
 *   cache   a client's memfd as kvdistd takes it (region_new_from_fd() maps it anew), carved into
 *           --tensors tensors, registered with rdma_cache_register() as kvd_register_cache() does
 *           (one memory region per tensor, remote-accessible), deregistered by cache_free();
 *   pool    the daemon's memory pool (pool_new(), 4 KiB pages), registered whole by
 *           rdma_context_new() as kvdistd does at start; the figure is the time the daemon
 *           itself counts in ibv_reg_mr (its registration_us_total), the device open excluded.
 *
 * Memory is a memfd with 4 KiB pages, or MFD_HUGETLB with the default huge page size when the
 * host has enough free huge pages (else that part is skipped and said so). Each measurement
 * gets a fresh memfd, in one of three states: "cold" (no page exists yet: registering allocates
 * and zeroes every page, as for a pool at start or a cache registered before it was written),
 * "filled" (every page written through another mapping, the one registered is fresh: a client's
 * memory the daemon has just mapped), "faulted" (the registered mapping itself was written).
 * Paths alternate within each run and every run is reported; the summary gives min, median and
 * max per GiB and the ratio of the medians. No thresholds: it reports, it does not judge. This
 * file includes <infiniband/verbs.h> for the baseline only, which must not go through kvdist.
 *
 *   bench-reg [--device NAME] [--sizes 64M,1G,...] [--runs N] [--tensors N]
 *             [--pages 4k|huge|both] [--states cold,filled,faulted]
 *
 * The device defaults to $KVDIST_RDMA_DEVICE (then $RXE_DEV); without one it exits 77 (skip).
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <unistd.h>

#include <event2/event.h>
#include <infiniband/verbs.h>
#include <kvdist/kvdist.h>

#include "common/log.h"
#include "common/macro.h"
#include "common/time-util.h"
#include "daemon/memory/cache.h"
#include "daemon/memory/pool.h"
#include "daemon/memory/region.h"
#include "daemon/transport/rdma.h"
#include "daemon/transport/transport-set.h"

#define MAX_RUNS 32
#define MAX_SIZES 8
#define GIB ((double)(UINT64_C(1) << 30))

enum { STATE_COLD, STATE_FILLED, STATE_FAULTED, N_STATES };
enum { PATH_BARE, PATH_CACHE, PATH_POOL, N_PATHS };

static const char *const state_names[N_STATES] = {"cold", "filled", "faulted"};
static const char *const path_names[N_PATHS] = {"bare ibv_reg_mr", "kvdist cache", "kvdist pool"};

typedef struct Opts {
        const char *device;
        uint64_t sizes[MAX_SIZES];
        unsigned n_sizes;
        unsigned runs;
        uint32_t tensors;
        bool pages_4k, pages_huge;
        bool states[N_STATES];
} Opts;

/* One (size, pages, state) cell: per path, per run, registration and deregistration µs. */
typedef struct Cell {
        usec_t reg[N_PATHS][MAX_RUNS];
        usec_t dereg[N_PATHS][MAX_RUNS];
        unsigned n[N_PATHS];
} Cell;

typedef struct Bench {
        const Opts *o;
        struct ibv_context *ibv;
        struct ibv_pd *pd;
        struct event_base *base;
        DeviceConfig dc;
        TransportSet ts;
        RdmaContext *ctx; /* without a pool: the device the cache path registers on */
        RdmaDevice *dev;
} Bench;

static void die(const char *what, int err)
{
        fprintf(stderr, "bench-reg: %s: %s\n", what, strerror(err));
        exit(EXIT_FAILURE);
}

static int cmp_usec(const void *a, const void *b)
{
        usec_t x = *(const usec_t *)a, y = *(const usec_t *)b;

        return x < y ? -1 : x > y;
}

static double ms_per_gib(usec_t us, uint64_t size)
{
        return (double)us / 1000.0 / ((double)size / GIB);
}

/* ---- memory ---- */

/* A sealed memfd of @size bytes, as libkvdist makes one (hugetlb with @huge). */
static int memfd_sized(uint64_t size, bool huge)
{
        int fd = memfd_create("bench-reg",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));

        if (fd < 0)
                die("memfd_create", errno);
        if (ftruncate(fd, (off_t)size) < 0)
                die("ftruncate", errno);
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                die("F_ADD_SEALS", errno);
        return fd;
}

/* Writes one byte in every 4 KiB of @p (every page, whatever their size). */
static void touch(uint8_t *p, uint64_t size)
{
        for (uint64_t off = 0; off < size; off += 4096)
                p[off] = (uint8_t)(off >> 12);
}

/* Brings @fd to @state before its registration: "filled" writes it through a mapping of its own. */
static void prepare_file(int fd, uint64_t size, int state)
{
        uint8_t *p;

        if (state != STATE_FILLED)
                return;
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
                die("mmap (fill)", errno);
        touch(p, size);
        (void)munmap(p, size);
}

/* ---- the three paths ---- */

static void run_bare(Bench *b, uint64_t size, bool huge, int state, usec_t *ret_reg,
                     usec_t *ret_dereg)
{
        int fd = memfd_sized(size, huge);
        struct ibv_mr *mr;
        uint8_t *p;
        usec_t t0;
        int r;

        prepare_file(fd, size, state);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
                die("mmap", errno);
        if (state == STATE_FAULTED)
                touch(p, size);
        t0 = now_usec(CLOCK_MONOTONIC);
        mr = ibv_reg_mr(b->pd, p, size,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        *ret_reg = now_usec(CLOCK_MONOTONIC) - t0;
        if (!mr)
                die("ibv_reg_mr", errno);
        t0 = now_usec(CLOCK_MONOTONIC);
        r = ibv_dereg_mr(mr);
        *ret_dereg = now_usec(CLOCK_MONOTONIC) - t0;
        if (r != 0)
                die("ibv_dereg_mr", r);
        (void)munmap(p, size);
        close(fd);
}

static void run_cache(Bench *b, uint64_t size, bool huge, int state, usec_t *ret_reg,
                      usec_t *ret_dereg)
{
        uint64_t tensor_size = size / b->o->tensors;
        CacheTensor tensors[KVD_MAX_TENSORS];
        CacheDesc desc = {
                .num_tensors = b->o->tensors,
                .n_dims = 2,
                .shape = {(int64_t)(tensor_size / 4096), 4096},
                .data_type = KVD_DT_UINT8,
        };
        Region *region;
        Cache *cache;
        usec_t t0;
        int fd, r;

        fd = memfd_sized(size, huge);
        prepare_file(fd, size, state);
        /* As handle_region_add(): the daemon maps the client's memfd; the region owns the fd. */
        r = region_new_from_fd(fd, 0, size, 0x10000000, 1, &region);
        if (r < 0)
                die("region_new_from_fd", -r);
        if (state == STATE_FAULTED)
                touch(region->data, size);
        for (uint32_t t = 0; t < b->o->tensors; t++)
                tensors[t] = (CacheTensor){.region = region, .offset = t * tensor_size};
        r = cache_new(CACHE_BLOCKS, &desc, tensors, &cache);
        if (r < 0)
                die("cache_new", -r);
        cache->remote_accessible = true;
        t0 = now_usec(CLOCK_MONOTONIC);
        r = rdma_cache_register(b->dev, cache, true);
        *ret_reg = now_usec(CLOCK_MONOTONIC) - t0;
        if (r < 0)
                die("rdma_cache_register", -r);
        t0 = now_usec(CLOCK_MONOTONIC);
        cache_free(cache);
        *ret_dereg = now_usec(CLOCK_MONOTONIC) - t0;
        region_unref(region);
}

static void run_pool(Bench *b, uint64_t size, int state, usec_t *ret_reg, usec_t *ret_dereg)
{
        RdmaDeviceStatus st;
        RdmaContext *ctx;
        TransportSet ts = b->ts;
        RdmaDevice *dev;
        const char *why;
        Pool *pool;
        usec_t t0;
        int r;

        r = pool_new(size, 12, 1, &pool);
        if (r < 0)
                die("pool_new", -r);
        if (state == STATE_FAULTED)
                touch(pool_region(pool)->data, size);
        r = rdma_context_new(&ts, pool, &ctx);
        if (r < 0)
                die("rdma_context_new", -r);
        dev = rdma_device_for(ctx, 0, &why);
        if (!dev) {
                fprintf(stderr, "bench-reg: device %s: %s\n", b->o->device, why);
                exit(EXIT_FAILURE);
        }
        rdma_device_get_status(dev, &st);
        if (st.reg_count != 1 || st.mr_bytes != size) {
                fprintf(stderr,
                        "bench-reg: the pool of %" PRIu64 " bytes was not registered "
                        "(%" PRIu64 " regions, %" PRIu64 " bytes); see the log above\n",
                        size, st.reg_count, st.mr_bytes);
                exit(EXIT_FAILURE);
        }
        *ret_reg = st.reg_usec_total;
        /* Closing the device deregisters the pool; the rest of the close is small next to it. */
        t0 = now_usec(CLOCK_MONOTONIC);
        rdma_context_free(ctx);
        *ret_dereg = now_usec(CLOCK_MONOTONIC) - t0;
        pool_free(pool);
}

/* ---- setup and report ---- */

static void bench_init(Bench *b, const Opts *o)
{
        struct ibv_device **list;
        const char *why;
        int n, r;

        *b = (Bench){.o = o};
        list = ibv_get_device_list(&n);
        for (int i = 0; list && i < n && !b->ibv; i++)
                if (strcmp(ibv_get_device_name(list[i]), o->device) == 0)
                        b->ibv = ibv_open_device(list[i]);
        if (list)
                ibv_free_device_list(list);
        if (!b->ibv) {
                fprintf(stderr, "bench-reg: cannot open RDMA device %s\n", o->device);
                exit(EXIT_FAILURE);
        }
        b->pd = ibv_alloc_pd(b->ibv);
        if (!b->pd)
                die("ibv_alloc_pd", errno);

        b->base = event_base_new();
        if (!b->base)
                die("event_base_new", ENOMEM);
        b->dc = (DeviceConfig){
                .device_id = 0,
                .rdma_device = (char *)o->device,
                .port = 1,
                .gid_index = -1,
                .transport = TRANSPORT_KIND_RDMA,
        };
        b->ts = (TransportSet){.base = b->base, .devices = &b->dc, .n_devices = 1};
        r = rdma_context_new(&b->ts, NULL, &b->ctx);
        if (r < 0)
                die("rdma_context_new", -r);
        b->dev = rdma_device_for(b->ctx, 0, &why);
        if (!b->dev) {
                fprintf(stderr, "bench-reg: device %s: %s\n", o->device, why);
                exit(EXIT_FAILURE);
        }
}

static void bench_deinit(Bench *b)
{
        rdma_context_free(b->ctx);
        event_base_free(b->base);
        ibv_dealloc_pd(b->pd);
        ibv_close_device(b->ibv);
}

/* Free huge pages of the default size, and that size, from /proc/meminfo (0 when none). */
static uint64_t huge_free_bytes(uint64_t *ret_page)
{
        unsigned long long n_free = 0, kb = 0;
        char line[256];
        FILE *f = fopen("/proc/meminfo", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                (void)sscanf(line, "HugePages_Free: %llu", &n_free);
                (void)sscanf(line, "Hugepagesize: %llu kB", &kb);
        }
        fclose(f);
        *ret_page = kb * 1024;
        return n_free * kb * 1024;
}

static void report_cell(const Opts *o, uint64_t size, const char *pages, int state, Cell *c)
{
        double med[N_PATHS] = {0};

        for (int p = 0; p < N_PATHS; p++) {
                usec_t reg[MAX_RUNS], dereg[MAX_RUNS];
                unsigned n = c->n[p];

                if (n == 0)
                        continue;
                memcpy(reg, c->reg[p], n * sizeof(*reg));
                memcpy(dereg, c->dereg[p], n * sizeof(*dereg));
                qsort(reg, n, sizeof(*reg), cmp_usec);
                qsort(dereg, n, sizeof(*dereg), cmp_usec);
                med[p] = ms_per_gib(reg[n / 2], size);
                printf("RESULT size=%" PRIu64 "M pages=%s state=%s path=\"%s\" runs=%u "
                       "reg_ms_per_gib min=%.1f median=%.1f max=%.1f "
                       "dereg_ms_per_gib median=%.1f",
                       size >> 20, pages, state_names[state], path_names[p], n,
                       ms_per_gib(reg[0], size), med[p], ms_per_gib(reg[n - 1], size),
                       ms_per_gib(dereg[n / 2], size));
                if (p != PATH_BARE && med[PATH_BARE] > 0)
                        printf(" ratio_to_bare=%.2f", med[p] / med[PATH_BARE]);
                if (p == PATH_CACHE)
                        printf(" tensors=%" PRIu32, o->tensors);
                printf("\n");
        }
        fflush(stdout);
}

static void measure(Bench *b, uint64_t size, bool huge, int state)
{
        const char *pages = huge ? "huge" : "4k";
        Cell cell = {0};

        for (unsigned run = 0; run < b->o->runs; run++) {
                /* Alternate who goes first, so neither always finds the allocator warm. */
                for (int k = 0; k < N_PATHS; k++) {
                        int p = (int)((k + run) % N_PATHS);
                        usec_t reg, dereg;

                        if (p == PATH_POOL && (huge || state == STATE_FILLED))
                                continue; /* the pool is 4 KiB pages the daemon never fills */
                        if (p == PATH_BARE)
                                run_bare(b, size, huge, state, &reg, &dereg);
                        else if (p == PATH_CACHE)
                                run_cache(b, size, huge, state, &reg, &dereg);
                        else
                                run_pool(b, size, state, &reg, &dereg);
                        cell.reg[p][cell.n[p]] = reg;
                        cell.dereg[p][cell.n[p]] = dereg;
                        cell.n[p]++;
                        printf("run size=%" PRIu64 "M pages=%s state=%s run=%u path=\"%s\" "
                               "reg_ms=%.1f dereg_ms=%.1f reg_ms_per_gib=%.1f\n",
                               size >> 20, pages, state_names[state], run + 1, path_names[p],
                               (double)reg / 1000.0, (double)dereg / 1000.0, ms_per_gib(reg, size));
                        fflush(stdout);
                }
        }
        report_cell(b->o, size, pages, state, &cell);
}

static uint64_t parse_size(const char *s)
{
        char *end;
        unsigned long long v = strtoull(s, &end, 10);

        if (end == s)
                return 0;
        if (*end == 'G' || *end == 'g')
                return (uint64_t)v << 30;
        if (*end == 'M' || *end == 'm')
                return (uint64_t)v << 20;
        return *end ? 0 : v;
}

static void usage(void)
{
        fprintf(stderr, "usage: bench-reg [--device NAME] [--sizes 64M,1G,...] [--runs N] "
                        "[--tensors N] [--pages 4k|huge|both] [--states cold,filled,faulted]\n");
        exit(2);
}

static void parse_opts(int argc, char **argv, Opts *o)
{
        static const struct option longopts[] = {
                {"device", required_argument, NULL, 'd'},
                {"sizes", required_argument, NULL, 's'},
                {"runs", required_argument, NULL, 'r'},
                {"tensors", required_argument, NULL, 't'},
                {"pages", required_argument, NULL, 'p'},
                {"states", required_argument, NULL, 'S'},
                {},
        };
        char *list = NULL, *states = NULL, *tok, *save;
        int c;

        *o = (Opts){.runs = 1, .tensors = 64, .pages_4k = true, .pages_huge = true};
        o->device = getenv("KVDIST_RDMA_DEVICE");
        if (!o->device || !o->device[0])
                o->device = getenv("RXE_DEV");
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0)
                switch (c) {
                case 'd':
                        o->device = optarg;
                        break;
                case 's':
                        list = optarg;
                        break;
                case 'r':
                        o->runs = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                case 't':
                        o->tensors = (uint32_t)strtoul(optarg, NULL, 10);
                        break;
                case 'p':
                        o->pages_4k = strcmp(optarg, "huge") != 0;
                        o->pages_huge = strcmp(optarg, "4k") != 0;
                        if (strcmp(optarg, "4k") && strcmp(optarg, "huge") &&
                            strcmp(optarg, "both"))
                                usage();
                        break;
                case 'S':
                        states = optarg;
                        break;
                default:
                        usage();
                }
        if (optind != argc || o->runs == 0 || o->runs > MAX_RUNS || o->tensors == 0 ||
            o->tensors > KVD_MAX_TENSORS)
                usage();
        for (tok = strtok_r(list ? list : (char[]){"64M"}, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
                uint64_t v = parse_size(tok);

                /* Every tensor a whole number of 4 KiB rows, every size whole huge pages. */
                if (o->n_sizes == MAX_SIZES || v == 0 || v % (UINT64_C(2) << 20) != 0 ||
                    v % ((uint64_t)o->tensors * 4096) != 0)
                        usage();
                o->sizes[o->n_sizes++] = v;
        }
        for (tok = strtok_r(states ? states : (char[]){"cold,filled,faulted"}, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
                int s;

                for (s = 0; s < N_STATES && strcmp(tok, state_names[s]) != 0; s++)
                        ;
                if (s == N_STATES)
                        usage();
                o->states[s] = true;
        }
}

int main(int argc, char **argv)
{
        uint64_t huge_page = 0, huge_free;
        Opts o;
        Bench b;

        parse_opts(argc, argv, &o);
        if (!o.device || !o.device[0]) {
                printf("SKIP: no RDMA device named (--device, $KVDIST_RDMA_DEVICE or $RXE_DEV); "
                       "this bench registers memory with a real verbs device\n");
                return 77;
        }
        log_set_max_level(LOG_WARNING);
        bench_init(&b, &o);
        printf("bench-reg: device %s, %u run(s), %" PRIu32 " tensors per cache, page size %ld\n",
               o.device, o.runs, o.tensors, sysconf(_SC_PAGESIZE));
        for (unsigned i = 0; i < o.n_sizes; i++) {
                uint64_t size = o.sizes[i];

                for (int h = 0; h < 2; h++) {
                        if (h ? !o.pages_huge : !o.pages_4k)
                                continue;
                        huge_free = huge_free_bytes(&huge_page);
                        if (h && huge_free < size) {
                                printf("SKIP size=%" PRIu64 "M pages=huge: %" PRIu64
                                       " MiB of free huge pages (page size %" PRIu64
                                       " KiB), %" PRIu64 " MiB needed; reserve them with "
                                       "/proc/sys/vm/nr_hugepages\n",
                                       size >> 20, huge_free >> 20, huge_page >> 10, size >> 20);
                                continue;
                        }
                        if (h)
                                printf("bench-reg: huge pages of %" PRIu64 " KiB, %" PRIu64
                                       " MiB free\n",
                                       huge_page >> 10, huge_free >> 20);
                        for (int s = 0; s < N_STATES; s++)
                                if (o.states[s])
                                        measure(&b, size, h, s);
                }
        }
        bench_deinit(&b);
        return 0;
}
