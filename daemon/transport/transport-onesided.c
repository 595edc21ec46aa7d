/* SPDX-License-Identifier: MIT */
/*
 * One-sided transport: the ops table of jobs over RDMA. By the time a job is submitted both
 * daemons agreed on its plan and the peer named its memory's addresses and remote keys; this
 * cuts the segments to what a work request can carry and hands them to the link's RDMA endpoint
 * (the job's channel) as one job of READs (pull) or WRITEs (push). Built with or without
 * libibverbs: without, the endpoint calls report -EOPNOTSUPP and no link ever chooses this
 * transport.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvdist-config.h"
#include "daemon/transport/rdma.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/macro.h"

/* The transport's channels are its endpoints. */
static RdmaEndpoint *onesided_ep(const TransportChannel *ch)
{
        return (RdmaEndpoint *)ch;
}

/* A running job: the endpoint borrows its segments until the job's callback. */
typedef struct OnesidedJob {
        RdmaJob *job;
        size_t n_segs;
        RdmaSegment segs[];
} OnesidedJob;

static void onesided_on_done(void *userdata, int status)
{
        TransportJob *job = userdata;

        free(job->priv);
        transport_job_done(job, status);
}

static int onesided_submit(Transport *t, TransportJob *job)
{
        OnesidedJob *oj;
        TransportSpan sp;
        size_t n = 0;
        int r;

        if (!job->channel || !job->segs)
                return -ENOTCONN;
        for (size_t i = 0; i < job->n_segs; i++) {
                const TransportSegment *s = &job->segs[i];
                uint64_t per_span = (s->len + RDMA_SEGMENT_MAX - 1) / RDMA_SEGMENT_MAX, spans;

                if (MUL_OVERFLOW(per_span, transport_segment_pieces(s), &spans) ||
                    ADD_OVERFLOW(n, spans, &n))
                        return -ENOMEM;
        }
        oj = calloc(1, sizeof(*oj) + MAX(n, (size_t)1) * sizeof(oj->segs[0]));
        if (!oj)
                return -ENOMEM;
        /* Spans whose far ends continue one another share a work request (rdma_job_submit()). */
        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);)
                for (uint64_t done = 0; done < sp.len;) {
                        uint32_t len = (uint32_t)MIN(sp.len - done, (uint64_t)RDMA_SEGMENT_MAX);

                        oj->segs[oj->n_segs++] = (RdmaSegment){
                                .local_addr = (uint64_t)(uintptr_t)sp.local + done,
                                .lkey = sp.seg->lkey,
                                .remote_addr = sp.remote + done,
                                .rkey = sp.seg->rkey,
                                .len = len,
                        };
                        done += len;
                }
        job->priv = oj;
        r = rdma_job_submit(job->channel, job->dir == TRANSPORT_READ, oj->segs, oj->n_segs,
                            onesided_on_done, job, &oj->job);
        if (r < 0) {
                job->priv = NULL;
                free(oj);
        }
        return r;
}

static void onesided_cancel(Transport *t, TransportJob *job)
{
        OnesidedJob *oj = job->priv;

        /* The job's queue pairs are flushed; its callback runs before this returns. */
        if (oj && oj->job)
                rdma_job_cancel(oj->job);
}

/* Unknown (-ENOENT) before the job is posted and once it completed. */
static int onesided_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        const OnesidedJob *oj = job->priv;

        if (!oj || !oj->job)
                return -ENOENT;
        *ret = rdma_job_bytes_done(oj->job);
        return 0;
}

/* The working device @name names, or the one the device map gives @device_id. */
static RdmaDevice *onesided_device(Transport *t, int32_t device_id, const char *name,
                                   const char **ret_reason)
{
        RdmaDevice *dev;

        if (!name)
                return rdma_device_for(t->set->rdma, device_id, ret_reason);
        dev = rdma_device_find(t->set->rdma, name);
        if (!rdma_device_usable(dev)) {
                *ret_reason = "no working RDMA device of that name";
                return NULL;
        }
        return dev;
}

static int onesided_device_info(Transport *t, int32_t device_id, const char *name,
                                TransportDeviceInfo *ret, const char **ret_reason)
{
        const char *why = NULL;
        RdmaDevice *dev = onesided_device(t, device_id, name, &why);

        if (!dev) {
                if (ret_reason)
                        *ret_reason = why;
                return HAVE_RDMA ? -ENODEV : -EOPNOTSUPP;
        }
        if (ret)
                rdma_device_get_info(dev, ret);
        return 0;
}

static int onesided_region_register(Transport *t, int32_t device_id, TransportChannel *channel,
                                    void *addr, uint64_t len, bool remote_write,
                                    TransportRegion *region)
{
        const char *why;
        RdmaDevice *dev = channel ? rdma_endpoint_device(onesided_ep(channel))
                                  : rdma_device_for(t->set->rdma, device_id, &why);
        RdmaMr *mr;
        int r;

        if (!HAVE_RDMA)
                return -EOPNOTSUPP;
        if (!dev)
                return -ENODEV;
        if (len > SIZE_MAX)
                return -EINVAL;
        r = rdma_mr_register(dev, addr, (size_t)len, remote_write, &mr);
        if (r < 0)
                return r;
        region->priv = mr;
        region->key = (TransportKey){
                .lkey = rdma_mr_lkey(mr),
                .rkey = remote_write ? rdma_mr_rkey(mr) : 0,
        };
        return 0;
}

static void onesided_region_deregister(Transport *t, TransportRegion *region)
{
        region->priv = rdma_mr_free(region->priv);
}

static int onesided_cache_register(Transport *t, int32_t device_id, Cache *cache, bool remote)
{
        const char *why;
        RdmaDevice *dev = rdma_device_for(t->set->rdma, device_id, &why);

        if (!dev)
                return HAVE_RDMA ? -ENODEV : -EOPNOTSUPP;
        return rdma_cache_register(dev, cache, remote);
}

static int onesided_cache_key(Transport *t, const Cache *cache, uint32_t tensor, bool remote,
                              uint64_t *ret_addr, TransportKey *ret_key)
{
        if (!rdma_cache_registered(cache, remote))
                return -ENOENT;
        return rdma_cache_tensor(cache, tensor, ret_addr, &ret_key->lkey, &ret_key->rkey);
}

static int onesided_desc_pack(Transport *t, uint64_t addr, uint64_t len, const TransportKey *key,
                              TransportDesc *ret)
{
        TransportDesc d = {0};
        int r;

        r = rdma_desc_pack(addr, len, key->rkey, d.bytes, sizeof(d.bytes));
        if (r < 0)
                return r;
        d.len = (size_t)r;
        *ret = d;
        return 0;
}

static int onesided_desc_unpack(Transport *t, const void *bytes, size_t len, TransportRemote *ret)
{
        return rdma_desc_unpack(bytes, len, &ret->addr, &ret->len, &ret->key);
}

static int onesided_channel_open(Transport *t, const TransportChannelSpec *spec,
                                 TransportChannel **ret)
{
        RdmaDevice *dev = rdma_device_find(t->set->rdma, spec->device);
        unsigned n = spec->n_paths;
        RdmaEndpoint *ep;
        int r;

        /* The initiator leaves the number of queue pairs to our config; the responder has the
         * initiator's. */
        if (n == 0 && t->set->rdma_config)
                n = t->set->rdma_config->qps;
        /* A device that is missing or does not work: -EINVAL. */
        r = rdma_endpoint_new(dev, spec->id, spec->initiator, spec->remote, n, &ep);
        if (r < 0)
                return r;
        *ret = (TransportChannel *)ep;
        return 0;
}

static void onesided_channel_close(Transport *t, TransportChannel *ch)
{
        rdma_endpoint_free(onesided_ep(ch));
}

static void onesided_channel_info(Transport *t, const TransportChannel *ch,
                                  TransportChannelInfo *ret)
{
        const RdmaEndpoint *ep = onesided_ep(ch);

        *ret = (TransportChannelInfo){
                .id = rdma_endpoint_id(ep),
                .initiator = rdma_endpoint_initiator(ep),
                .ready = rdma_endpoint_ready(ep),
                .n_paths = rdma_endpoint_n_slots(ep),
                .broken_paths = rdma_endpoint_broken_slots(ep),
                .remote = rdma_endpoint_remote_device(ep),
        };
        rdma_device_get_info(rdma_endpoint_device(ep), &ret->local);
}

static int onesided_path_local(Transport *t, TransportChannel *ch, unsigned path,
                               TransportPathInfo *ret)
{
        return rdma_endpoint_slot_local(onesided_ep(ch), path, &ret->qpn, &ret->psn);
}

static int onesided_path_connect(Transport *t, TransportChannel *ch, unsigned path,
                                 const TransportPathInfo *remote)
{
        return rdma_endpoint_slot_connect(onesided_ep(ch), path, remote->qpn, remote->psn);
}

static int onesided_device_pack(Transport *t, const TransportDeviceInfo *info, uint8_t *buf,
                                size_t size)
{
        return rdma_device_pack(info, buf, size);
}

static int onesided_device_unpack(Transport *t, const uint8_t *buf, size_t len,
                                  TransportDeviceInfo *ret)
{
        return rdma_device_unpack(buf, len, ret);
}

static int onesided_path_pack(Transport *t, const TransportPathInfo *info, uint8_t *buf,
                              size_t size)
{
        return rdma_path_pack(info, buf, size);
}

static int onesided_path_unpack(Transport *t, const uint8_t *buf, size_t len,
                                TransportPathInfo *ret)
{
        return rdma_path_unpack(buf, len, ret);
}

typedef struct DescribeCtx {
        transport_describe_fn fn;
        void *userdata;
} DescribeCtx;

static void onesided_describe_device(const RdmaDevice *dev, void *userdata)
{
        DescribeCtx *ctx = userdata;
        TransportFacts f = {0};
        RdmaDeviceStatus st;

        rdma_device_get_status(dev, &st);
        transport_facts_add_string(&f, "name", st.name);
        transport_facts_add_string(&f, "state", st.state);
        transport_facts_add_string(&f, "error", st.error);
        transport_facts_add_string(&f, "link_layer", st.link_layer);
        transport_facts_add_int(&f, "port", st.port);
        transport_facts_add_int(&f, "mtu", st.mtu);
        transport_facts_add_int(&f, "gid_index", st.gid_index);
        transport_facts_add_string(&f, "gid", st.gid);
        transport_facts_add_u64(&f, "memory_regions", st.mrs);
        transport_facts_add_u64(&f, "registered_bytes", st.mr_bytes);
        transport_facts_add_u64(&f, "registrations", st.reg_count);
        transport_facts_add_u64(&f, "registration_us_total", st.reg_usec_total);
        transport_facts_add_u64(&f, "completion_errors", st.wc_errors);
        transport_facts_add_string(&f, "last_completion_error", st.last_wc_error);
        transport_facts_add_u64(&f, "async_events", st.async_events);
        transport_facts_add_string(&f, "last_async_event", st.last_async_event);
        ctx->fn(&f, ctx->userdata);
}

/* One set of facts per RDMA device of the device map, working or not. */
static void onesided_describe(Transport *t, transport_describe_fn fn, void *userdata)
{
        DescribeCtx ctx = {fn, userdata};

        rdma_context_foreach_device(t->set->rdma, onesided_describe_device, &ctx);
}

static void onesided_describe_channel(Transport *t, const TransportChannel *ch, TransportFacts *ret)
{
        const RdmaEndpoint *ep = onesided_ep(ch);
        RdmaEndpointStats st;

        rdma_endpoint_get_stats(ep, &st);
        transport_facts_add_u64(ret, "endpoint_id", rdma_endpoint_id(ep));
        transport_facts_add_bool(ret, "initiator", rdma_endpoint_initiator(ep));
        transport_facts_add_string(ret, "remote_device", rdma_endpoint_remote_device(ep));
        transport_facts_add_int(ret, "queue_pairs", rdma_endpoint_n_slots(ep));
        transport_facts_add_int(ret, "queue_pairs_ready", st.slots_ready);
        transport_facts_add_u64(ret, "jobs_done", st.jobs_done);
        transport_facts_add_u64(ret, "jobs_failed", st.jobs_failed);
        transport_facts_add_int(ret, "jobs_in_flight", st.jobs_in_flight);
        transport_facts_add_u64(ret, "work_requests", st.wrs_posted);
        transport_facts_add_u64(ret, "bytes", st.bytes);
}

/* What metrics export of each RDMA device (onesided_describe_device()'s facts). */
static const TransportMetric onesided_metrics[] = {
        {"kvdist_rdma_device_up", "gauge",
         "RDMA devices of the device map: 1 when open with an active port", "state", 1},
        {"kvdist_rdma_memory_regions", "gauge", "Memory regions registered on the device now",
         "memory_regions", 1},
        {"kvdist_rdma_registered_bytes", "gauge", "Bytes registered on the device now",
         "registered_bytes", 1},
        {"kvdist_rdma_registration_seconds_total", "counter",
         "Time spent registering memory (ibv_reg_mr)", "registration_us_total", USEC_PER_SEC},
        {"kvdist_rdma_registrations_total", "counter", "Memory regions registered since start",
         "registrations", 1},
        {"kvdist_rdma_completion_errors_total", "counter", "Work completions with an error status",
         "completion_errors", 1},
        {"kvdist_rdma_async_events_total", "counter",
         "Asynchronous device events (port down, fatal errors)", "async_events", 1},
};

static const transport_ops onesided_ops = {
        .name = "rdma",
        .caps = {.remote_access = true, .registers = true, .max_segment = TRANSPORT_SEGMENT_MAX},
        .submit = onesided_submit,
        .cancel = onesided_cancel,
        .progress = onesided_progress,
        .device_info = onesided_device_info,
        .region_register = onesided_region_register,
        .region_deregister = onesided_region_deregister,
        .cache_register = onesided_cache_register,
        .cache_key = onesided_cache_key,
        .desc_pack = onesided_desc_pack,
        .desc_unpack = onesided_desc_unpack,
        .channel_open = onesided_channel_open,
        .channel_close = onesided_channel_close,
        .channel_info = onesided_channel_info,
        .path_local = onesided_path_local,
        .path_connect = onesided_path_connect,
        .device_pack = onesided_device_pack,
        .device_unpack = onesided_device_unpack,
        .path_pack = onesided_path_pack,
        .path_unpack = onesided_path_unpack,
        .describe = onesided_describe,
        .describe_channel = onesided_describe_channel,
        .metrics = onesided_metrics,
        .n_metrics = ARRAY_SIZE(onesided_metrics),
};

int transport_rdma_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &onesided_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
