/* SPDX-License-Identifier: MIT */
/* Transport: the generic wrappers over a transport's ops table. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/memory/cache.h"
#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/macro.h"
#include "common/status.h"

/*
 * A job's prepare step run off the loop for a transport that does not prepare itself: laid (and
 * staged, where the transport stages) on a copy thread, handed to the transport from the loop.
 */
typedef struct Staging {
        Transport *t;
        TransportJob *job;
        EngineTask *task;
        bool cancelled; /* transport_cancel() came while it was laid: the job is not handed on */
        void *priv;     /* what the transport's stage() built */
} Staging;

/* Lays @job as one share into the job itself. */
static int transport_lay(TransportJob *job)
{
        TransportPart p;
        int r;

        r = job->prepare(job, 0, 1, &p);
        if (r < 0)
                return r;
        job->segs = p.segs;
        job->n_segs = p.n_segs;
        job->local_step = p.local_step;
        job->remote_step = p.remote_step;
        return 0;
}

/* On a copy thread: the job's segments, and the transport's own list of them. No copies. */
static int transport_stage_step(void *userdata, size_t part, size_t n_parts,
                                EngineCopy **ret_copies, size_t *ret_n)
{
        Staging *st = userdata;
        int r;

        *ret_copies = NULL;
        *ret_n = 0;
        r = transport_lay(st->job);
        if (r < 0)
                return r;
        return st->t->ops->stage ? st->t->ops->stage(st->t, st->job, &st->priv) : 0;
}

/* On the loop: the job is laid (or failed, or was cancelled); the transport takes it now. */
static void transport_on_staged(EngineTask *task, int status, void *userdata)
{
        Staging *st = userdata;
        TransportJob *job = st->job;
        Transport *t = st->t;
        int r = st->cancelled ? -ECANCELED : status;

        job->staging = NULL;
        job->prepare = NULL;
        if (r >= 0) {
                job->priv = TAKE_PTR(st->priv);
                r = t->ops->submit(t, job);
                job->submitted = r >= 0;
        }
        free(st->priv);
        free(st);
        if (r < 0)
                transport_job_done(job, r);
        else if (job->handed)
                job->handed(job);
}

int transport_submit(Transport *t, TransportJob *job)
{
        Engine *engine = t->set ? t->set->engine : NULL;
        Staging *st;
        int r;

        if (!t->ops->submit)
                return -EOPNOTSUPP;
        job->error = 0;
        job->priv = NULL;
        job->staging = NULL;
        job->submitted = false;
        if (job->prepare && !t->ops->prepares && engine) {
                st = calloc(1, sizeof(*st));
                if (!st)
                        return -ENOMEM;
                *st = (Staging){.t = t, .job = job};
                r = engine_submit_prepare(engine, transport_stage_step, st, 1, transport_on_staged,
                                          st, &st->task);
                if (r < 0) {
                        free(st);
                        return r;
                }
                job->staging = st;
                return 0;
        }
        if (job->prepare && !t->ops->prepares) {
                r = transport_lay(job);
                if (r < 0)
                        return r;
                job->prepare = NULL;
        }
        r = t->ops->submit(t, job);
        job->submitted = r >= 0;
        return r;
}

int transport_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        if (!t || !t->ops->progress)
                return -EOPNOTSUPP;
        return t->ops->progress(t, job, ret);
}

void transport_cancel(Transport *t, TransportJob *job)
{
        Staging *st = job->staging;

        if (st) {
                /* Its completion may be on its way already: it must not hand the job on. */
                st->cancelled = true;
                engine_cancel(st->task);
                return;
        }
        if (t->ops->cancel)
                t->ops->cancel(t, job);
}

int transport_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes)
{
        if (!t->ops->abandon)
                return -EOPNOTSUPP;
        return t->ops->abandon(t, channel, dir, id, bytes);
}

Transport *transport_free(Transport *t)
{
        if (!t)
                return NULL;
        if (t->ops->destroy)
                t->ops->destroy(t);
        else
                free(t);
        return NULL;
}

const char *transport_name(const Transport *t)
{
        return t ? t->ops->name : "none";
}

const TransportMetric *transport_metrics(const Transport *t, size_t *ret_n)
{
        *ret_n = t ? t->ops->n_metrics : 0;
        return t ? t->ops->metrics : NULL;
}

const TransportCaps *transport_caps(const Transport *t)
{
        static const TransportCaps none = {0};

        return t ? &t->ops->caps : &none;
}

int transport_status_from_errno(int error)
{
        switch (error) {
        case 0:
                return STATUS_OK;
        case -EILSEQ:
                return STATUS_FAILED;
        case -ETIMEDOUT:
                return STATUS_TIMEOUT;
        default:
                return STATUS_PEER_LOST;
        }
}

void transport_job_done(TransportJob *job, int error)
{
        job->priv = NULL;
        job->error = error;
        job->done(job, transport_status_from_errno(error));
}

int transport_job_spans(const TransportJob *job, size_t *ret)
{
        size_t n = 0;

        for (size_t i = 0; i < job->n_segs; i++)
                if (ADD_OVERFLOW(n, transport_segment_pieces(&job->segs[i]), &n))
                        return -E2BIG;
        *ret = n;
        return 0;
}

int transport_device_info(Transport *t, int32_t device_id, const char *name,
                          TransportDeviceInfo *ret, const char **ret_reason)
{
        if (!t) {
                if (ret_reason)
                        *ret_reason = "this daemon has no such transport";
                return -ENODEV;
        }
        if (!t->ops->device_info) {
                if (ret)
                        *ret = (TransportDeviceInfo){0};
                return 0;
        }
        return t->ops->device_info(t, device_id, name, ret, ret_reason);
}

int transport_region_register(Transport *t, int32_t device_id, TransportChannel *channel,
                              void *addr, uint64_t len, bool remote_write, TransportRegion **ret)
{
        _cleanup_free_ TransportRegion *r = NULL;
        int k;

        if (!t)
                return -ENODEV;
        if (!t->ops->region_register) {
                *ret = NULL;
                return 0;
        }
        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (TransportRegion){.transport = t, .addr = addr, .len = len};
        k = t->ops->region_register(t, device_id, channel, addr, len, remote_write, r);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

TransportRegion *transport_region_free(TransportRegion *r)
{
        if (!r)
                return NULL;
        r->transport->ops->region_deregister(r->transport, r);
        free(r);
        return NULL;
}

int transport_cache_register(Transport *t, int32_t device_id, Cache *cache, bool remote)
{
        if (!t)
                return -ENODEV;
        if (!t->ops->cache_register)
                return 0;
        return t->ops->cache_register(t, device_id, cache, remote);
}

int transport_cache_key(Transport *t, const Cache *cache, uint32_t tensor, bool remote,
                        uint64_t *ret_addr, TransportKey *ret_key)
{
        uint64_t addr;
        TransportKey key = {0};
        int r;

        if (!t)
                return -ENOENT;
        if (t->ops->cache_key) {
                r = t->ops->cache_key(t, cache, tensor, remote, &addr, &key);
                if (r < 0)
                        return r;
        } else {
                if (tensor >= cache->desc.num_tensors)
                        return -ENOENT;
                addr = (uint64_t)(uintptr_t)(cache->tensors[tensor].region->data +
                                             cache->tensors[tensor].offset);
        }
        if (ret_addr)
                *ret_addr = addr;
        if (ret_key)
                *ret_key = key;
        return 0;
}

bool transport_cache_registered(Transport *t, const Cache *cache, bool remote)
{
        /* A cache without tensors has nothing to reach. */
        return transport_cache_key(t, cache, 0, remote, NULL, NULL) >= 0;
}

int transport_channel_open(Transport *t, const TransportChannelSpec *spec, TransportChannel **ret)
{
        if (!t || !t->ops->channel_open)
                return -EOPNOTSUPP;
        return t->ops->channel_open(t, spec, ret);
}

TransportChannel *transport_channel_close(Transport *t, TransportChannel *ch)
{
        if (ch && t && t->ops->channel_close)
                t->ops->channel_close(t, ch);
        return NULL;
}

void transport_channel_info(Transport *t, const TransportChannel *ch, TransportChannelInfo *ret)
{
        *ret = (TransportChannelInfo){0};
        if (ch && t && t->ops->channel_info)
                t->ops->channel_info(t, ch, ret);
}

bool transport_channel_ready(Transport *t, const TransportChannel *ch)
{
        TransportChannelInfo info;

        transport_channel_info(t, ch, &info);
        return info.ready;
}

int transport_path_local(Transport *t, TransportChannel *ch, unsigned path, TransportPathInfo *ret)
{
        if (!t || !t->ops->path_local)
                return -EOPNOTSUPP;
        return t->ops->path_local(t, ch, path, ret);
}

int transport_path_connect(Transport *t, TransportChannel *ch, unsigned path,
                           const TransportPathInfo *remote)
{
        if (!t || !t->ops->path_connect)
                return -EOPNOTSUPP;
        return t->ops->path_connect(t, ch, path, remote);
}

int transport_device_pack(Transport *t, const TransportDeviceInfo *info, uint8_t *buf, size_t size)
{
        if (!t || !t->ops->device_pack)
                return -EOPNOTSUPP;
        return t->ops->device_pack(t, info, buf, size);
}

int transport_device_unpack(Transport *t, const uint8_t *buf, size_t len, TransportDeviceInfo *ret)
{
        if (!t || !t->ops->device_unpack)
                return -EOPNOTSUPP;
        if (!buf && len > 0)
                return -EBADMSG;
        return t->ops->device_unpack(t, buf, len, ret);
}

int transport_path_pack(Transport *t, const TransportPathInfo *info, uint8_t *buf, size_t size)
{
        if (!t || !t->ops->path_pack)
                return -EOPNOTSUPP;
        return t->ops->path_pack(t, info, buf, size);
}

int transport_path_unpack(Transport *t, const uint8_t *buf, size_t len, TransportPathInfo *ret)
{
        if (!t || !t->ops->path_unpack)
                return -EOPNOTSUPP;
        if (!buf && len > 0)
                return -EBADMSG;
        return t->ops->path_unpack(t, buf, len, ret);
}

void transport_describe(Transport *t, transport_describe_fn fn, void *userdata)
{
        if (t && t->ops->describe)
                t->ops->describe(t, fn, userdata);
}

void transport_describe_channel(Transport *t, const TransportChannel *ch, TransportFacts *ret)
{
        ret->n = 0;
        if (ch && t && t->ops->describe_channel)
                t->ops->describe_channel(t, ch, ret);
}

static TransportFact *transport_facts_next(TransportFacts *f, const char *key,
                                           TransportFactType type)
{
        TransportFact *fact;

        assert(f->n < TRANSPORT_FACTS_MAX);
        if (f->n >= TRANSPORT_FACTS_MAX)
                return NULL;
        fact = &f->f[f->n++];
        *fact = (TransportFact){.key = key, .type = type};
        return fact;
}

void transport_facts_add_string(TransportFacts *f, const char *key, const char *value)
{
        TransportFact *fact = transport_facts_next(f, key, TRANSPORT_FACT_STRING);

        if (fact)
                fact->s = value ? value : "";
}

void transport_facts_add_u64(TransportFacts *f, const char *key, uint64_t value)
{
        TransportFact *fact = transport_facts_next(f, key, TRANSPORT_FACT_U64);

        if (fact)
                fact->u = value;
}

void transport_facts_add_int(TransportFacts *f, const char *key, int64_t value)
{
        TransportFact *fact = transport_facts_next(f, key, TRANSPORT_FACT_INT);

        if (fact)
                fact->i = value;
}

void transport_facts_add_bool(TransportFacts *f, const char *key, bool value)
{
        TransportFact *fact = transport_facts_next(f, key, TRANSPORT_FACT_BOOL);

        if (fact)
                fact->b = value;
}

const TransportFact *transport_facts_find(const TransportFacts *f, const char *key)
{
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->f[i].key, key) == 0)
                        return &f->f[i];
        return NULL;
}

int transport_cache_desc(Transport *t, const Cache *cache, uint32_t tensor, TransportDesc *ret)
{
        TransportKey key;
        uint64_t addr;
        int r;

        if (!t || !t->ops->caps.remote_access || !t->ops->desc_pack)
                return -EOPNOTSUPP;
        if (tensor >= cache->desc.num_tensors)
                return -EINVAL;
        r = transport_cache_key(t, cache, tensor, true, &addr, &key);
        if (r < 0)
                return r;
        return t->ops->desc_pack(t, addr, cache->tensor_size, &key, ret);
}

int transport_region_desc(const TransportRegion *r, const void *addr, uint64_t len,
                          TransportDesc *ret)
{
        uintptr_t a = (uintptr_t)addr, start = (uintptr_t)r->addr;
        Transport *t = r->transport;

        if (!t->ops->caps.remote_access || !t->ops->desc_pack)
                return -EOPNOTSUPP;
        if (a < start || a - start > r->len || len > r->len - (a - start))
                return -EINVAL;
        return t->ops->desc_pack(t, a, len, &r->key, ret);
}

int transport_desc_unpack(Transport *t, const void *bytes, size_t len, TransportRemote *ret)
{
        if (!t || !t->ops->caps.remote_access || !t->ops->desc_unpack)
                return -EOPNOTSUPP;
        if (!bytes || len == 0 || len > TRANSPORT_DESC_MAX)
                return -EBADMSG;
        return t->ops->desc_unpack(t, bytes, len, ret);
}
