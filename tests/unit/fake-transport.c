/* SPDX-License-Identifier: MIT */
/* A fake transport that records jobs and lets the test complete them (fake-transport.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/memory/cache.h"
#include "daemon/memory/region.h"
#include "tests/unit/fake-transport.h"

static FakeTransport *fake_of(Transport *t)
{
        return (FakeTransport *)t;
}

static int fake_submit(Transport *t, TransportJob *job)
{
        FakeTransport *f = fake_of(t);

        if (f->submit_error != 0)
                return f->submit_error;
        if (f->n_jobs >= FAKE_TRANSPORT_MAX_JOBS)
                return -EBUSY;
        f->jobs[f->n_jobs++] = job;
        f->n_submitted++;
        job->priv = f;
        return 0;
}

static void fake_cancel(Transport *t, TransportJob *job)
{
        FakeTransport *f = fake_of(t);

        f->n_cancelled++;
        f->last_cancelled = job;
}

static int fake_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes)
{
        FakeTransport *f = fake_of(t);

        f->n_abandoned++;
        f->abandon_channel = channel;
        f->abandon_dir = dir;
        f->abandon_id = id;
        f->abandon_bytes = bytes;
        return 0;
}

static int fake_device_info(Transport *t, int32_t device_id, const char *name,
                            TransportDeviceInfo *ret, const char **ret_reason)
{
        FakeTransport *f = fake_of(t);

        f->n_device_info++;
        f->device_info_id = device_id;
        if (f->no_device) {
                if (ret_reason)
                        *ret_reason = f->no_device;
                return -ENODEV;
        }
        if (ret)
                *ret = f->device;
        return 0;
}

static int fake_region_register(Transport *t, int32_t device_id, TransportChannel *channel,
                                void *addr, uint64_t len, bool remote_write, TransportRegion *r)
{
        FakeTransport *f = fake_of(t);
        size_t i = f->n_regions;

        if (f->register_error != 0)
                return f->register_error;
        if (len == 0)
                return -EINVAL;
        if (i >= FAKE_TRANSPORT_MAX_REGIONS)
                return -ENOMEM;
        f->regions[i] = (FakeRegion){
                .live = true,
                .addr = addr,
                .len = len,
                .device_id = device_id,
                .channel = channel,
                .remote_write = remote_write,
                .key = {.lkey = FAKE_TRANSPORT_LKEY + (uint32_t)i,
                        .rkey = remote_write ? FAKE_TRANSPORT_RKEY + (uint32_t)i : 0},
        };
        f->n_regions++;
        r->key = f->regions[i].key;
        r->priv = &f->regions[i];
        return 0;
}

static void fake_region_deregister(Transport *t, TransportRegion *r)
{
        FakeRegion *fr = r->priv;

        if (!fr || !fr->live)
                abort(); /* freed twice: a bug in the layer under test */
        fr->live = false;
}

/* The live registration of @f that holds [@addr, +@len), one for peers when @remote. */
static const FakeRegion *fake_region_holding(const FakeTransport *f, uint64_t addr, uint64_t len,
                                             bool remote)
{
        for (size_t i = 0; i < f->n_regions; i++) {
                const FakeRegion *fr = &f->regions[i];
                uint64_t base = (uint64_t)(uintptr_t)fr->addr;

                if (fr->live && (!remote || fr->remote_write) && addr >= base && len <= fr->len &&
                    addr - base <= fr->len - len)
                        return fr;
        }
        return NULL;
}

static int fake_cache_key(Transport *t, const Cache *cache, uint32_t tensor, bool remote,
                          uint64_t *ret_addr, TransportKey *ret_key)
{
        const FakeRegion *fr;
        uint64_t addr;

        if (tensor >= cache->desc.num_tensors)
                return -ENOENT;
        addr = (uint64_t)(uintptr_t)(cache->tensors[tensor].region->data +
                                     cache->tensors[tensor].offset);
        fr = fake_region_holding(fake_of(t), addr, cache->tensor_size, remote);
        if (!fr)
                return -ENOENT;
        *ret_addr = addr;
        *ret_key = fr->key;
        return 0;
}

static void fake_put_le(uint8_t *p, uint64_t v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t fake_get_le(const uint8_t *p, size_t n)
{
        uint64_t v = 0;

        for (size_t i = 0; i < n; i++)
                v |= (uint64_t)p[i] << (8 * i);
        return v;
}

static int fake_desc_pack(Transport *t, uint64_t addr, uint64_t len, const TransportKey *key,
                          TransportDesc *ret)
{
        *ret = (TransportDesc){.len = FAKE_TRANSPORT_DESC_SIZE};
        ret->bytes[0] = FAKE_TRANSPORT_DESC_TAG;
        fake_put_le(ret->bytes + 1, addr, 8);
        fake_put_le(ret->bytes + 9, len, 8);
        fake_put_le(ret->bytes + 17, key->rkey, 4);
        return 0;
}

static int fake_desc_unpack(Transport *t, const void *bytes, size_t len, TransportRemote *ret)
{
        const uint8_t *p = bytes;
        TransportRemote m;

        if (len != FAKE_TRANSPORT_DESC_SIZE || p[0] != FAKE_TRANSPORT_DESC_TAG)
                return -EBADMSG;
        m = (TransportRemote){
                .addr = fake_get_le(p + 1, 8),
                .len = fake_get_le(p + 9, 8),
                .key = (uint32_t)fake_get_le(p + 17, 4),
        };
        if (m.len > UINT64_MAX - m.addr) /* as transport-onesided.c: a span that wraps */
                return -EBADMSG;
        *ret = m;
        return 0;
}

static const transport_ops fake_ops = {
        .name = "fake",
        .submit = fake_submit,
        .cancel = fake_cancel,
        .abandon = fake_abandon,
};

static const transport_ops fake_rdma_ops = {
        .name = "fake-rdma",
        .caps = {.remote_access = true, .registers = true, .max_segment = TRANSPORT_SEGMENT_MAX},
        .submit = fake_submit,
        .cancel = fake_cancel,
        .abandon = fake_abandon,
        .device_info = fake_device_info,
        .region_register = fake_region_register,
        .region_deregister = fake_region_deregister,
        .desc_pack = fake_desc_pack,
        .desc_unpack = fake_desc_unpack,
};

/* The fake's channels are always connected: a one-sided job needs no repair first. */
static void fake_channel_info(Transport *t, const TransportChannel *ch, TransportChannelInfo *ret)
{
        ret->ready = true;
        ret->n_paths = 1;
}

static const transport_ops fake_remote_ops = {
        .name = "fake-remote",
        .caps = {.remote_access = true, .registers = true, .max_segment = TRANSPORT_SEGMENT_MAX},
        .submit = fake_submit,
        .cancel = fake_cancel,
        .abandon = fake_abandon,
        .device_info = fake_device_info,
        .region_register = fake_region_register,
        .region_deregister = fake_region_deregister,
        .cache_key = fake_cache_key,
        .desc_pack = fake_desc_pack,
        .desc_unpack = fake_desc_unpack,
        .channel_info = fake_channel_info,
};

static FakeTransport *fake_new(TransportSet *set, const transport_ops *ops)
{
        FakeTransport *f = calloc(1, sizeof(*f));

        if (!f)
                return NULL;
        f->transport.ops = ops;
        f->transport.set = set;
        return f;
}

FakeTransport *fake_transport_new(TransportSet *set)
{
        return fake_new(set, &fake_ops);
}

FakeTransport *fake_transport_new_rdma(TransportSet *set)
{
        FakeTransport *f = fake_new(set, &fake_rdma_ops);

        if (f)
                (void)snprintf(f->device.device, sizeof(f->device.device), "fake0");
        return f;
}

FakeTransport *fake_transport_new_remote(TransportSet *set)
{
        FakeTransport *f = fake_new(set, &fake_remote_ops);

        if (f)
                (void)snprintf(f->device.device, sizeof(f->device.device), "fake0");
        return f;
}

int fake_transport_register_cache(FakeTransport *f, const Cache *cache, bool remote_write)
{
        for (uint32_t t = 0; t < cache->desc.num_tensors; t++) {
                TransportRegion r = {0};
                int e = fake_region_register(&f->transport, 0, NULL,
                                             cache->tensors[t].region->data +
                                                     cache->tensors[t].offset,
                                             cache->tensor_size, remote_write, &r);

                if (e < 0)
                        return e;
        }
        return 0;
}

size_t fake_transport_live_regions(const FakeTransport *f)
{
        size_t n = 0;

        for (size_t i = 0; i < f->n_regions; i++)
                n += f->regions[i].live;
        return n;
}

const FakeRegion *fake_transport_region_by_key(const FakeTransport *f, uint32_t key, bool remote)
{
        for (size_t i = 0; i < f->n_regions; i++)
                if ((remote ? f->regions[i].key.rkey : f->regions[i].key.lkey) == key && key != 0)
                        return &f->regions[i];
        return NULL;
}

/*
 * Whether [@addr, +@len) lies in the live registration @key names: its rkey when @remote (only
 * registrations for remote write have one), else its lkey.
 */
static bool fake_key_covers(const FakeTransport *f, uint32_t key, bool remote, uint64_t addr,
                            uint64_t len)
{
        const FakeRegion *fr = fake_transport_region_by_key(f, key, remote);
        uint64_t base;

        if (!fr || !fr->live)
                return false;
        base = (uint64_t)(uintptr_t)fr->addr;
        return addr >= base && len <= fr->len && addr - base <= fr->len - len;
}

/* Whether every segment of @job lies in the registrations its keys name (RDMA-like fakes). */
static bool fake_job_keys_ok(const FakeTransport *f, const TransportJob *job)
{
        if (f->transport.ops != &fake_rdma_ops && f->transport.ops != &fake_remote_ops)
                return true;
        TransportSpan sp;

        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);)
                if (!fake_key_covers(f, sp.seg->lkey, false, (uint64_t)(uintptr_t)sp.local,
                                     sp.len) ||
                    !fake_key_covers(f, sp.seg->rkey, true, sp.remote, sp.len))
                        return false;
        return true;
}

FakeTransport *fake_transport_free(FakeTransport *f)
{
        free(f);
        return NULL;
}

TransportJob *fake_transport_job(FakeTransport *f, size_t i)
{
        return i < f->n_jobs ? f->jobs[i] : NULL;
}

void fake_transport_complete(FakeTransport *f, TransportJob *job, int error)
{
        TransportSpan sp;
        size_t i;

        for (i = 0; i < f->n_jobs && f->jobs[i] != job; i++)
                ;
        if (i == f->n_jobs)
                abort(); /* not ours, or completed twice: a test bug */
        memmove(&f->jobs[i], &f->jobs[i + 1], (f->n_jobs - i - 1) * sizeof(f->jobs[0]));
        f->n_jobs--;
        if (f->copy && error == 0 && !fake_job_keys_ok(f, job))
                error = -EACCES; /* a remote access error: nothing moves */
        if (f->copy && error == 0)
                for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);) {
                        void *remote = (void *)(uintptr_t)sp.remote;

                        if (job->dir == TRANSPORT_READ)
                                memcpy(sp.local, remote, sp.len);
                        else
                                memcpy(remote, sp.local, sp.len);
                }
        transport_job_done(job, error);
}

uint64_t fake_transport_job_bytes(const TransportJob *job)
{
        TransportSpan sp;
        uint64_t n = 0;

        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);)
                n += sp.len;
        return n;
}

int fake_transport_feed(const TransportJob *job, const void *stream, size_t len)
{
        const uint8_t *p = stream;
        TransportSpan sp;

        if (fake_transport_job_bytes(job) != len)
                return -EINVAL;
        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);) {
                memcpy(sp.local, p, sp.len);
                p += sp.len;
        }
        return 0;
}

int fake_transport_gather(const TransportJob *job, void *stream, size_t len)
{
        uint8_t *p = stream;
        TransportSpan sp;

        if (fake_transport_job_bytes(job) != len)
                return -EINVAL;
        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);) {
                memcpy(p, sp.local, sp.len);
                p += sp.len;
        }
        return 0;
}
