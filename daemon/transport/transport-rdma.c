/* SPDX-License-Identifier: MIT */
/* RDMA transport: devices, per-tensor memory registrations, RC queue pairs, READ/WRITE jobs. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <infiniband/verbs.h>

#include "cache.h"
#include "clist.h"
#include "config.h"
#include "daemon.h"
#include "log.h"
#include "random-util.h"
#include "rdma.h"
#include "region.h"
#include "time-util.h"

#define RDMA_CQ_SIZE 4096
#define RDMA_SQ_DEPTH 256               /* work requests queued per queue pair */
#define RDMA_MAX_SGE 4                  /* scatter-gather entries per work request we use */
#define RDMA_BATCH 16                   /* work requests chained per ibv_post_send */
#define RDMA_POLL_BATCH 32
#define RDMA_ACK_BATCH 64               /* CQ events acknowledged together */
#define RDMA_FIFO (RDMA_SQ_DEPTH / 1 + 1)

typedef struct RdmaQp RdmaQp;
typedef struct RdmaSlot RdmaSlot;

struct RdmaContext {
        Daemon *daemon;
        RdmaDevice **devs;
        size_t n_devs;
};

struct RdmaDevice {
        RdmaContext *ctx;
        char name[64];
        char error[160];                /* why it cannot be used; "" when it can */
        struct ibv_context *ibv;
        struct ibv_pd *pd;
        struct ibv_comp_channel *chan;
        struct ibv_cq *cq;
        struct event *ev_cq;
        struct event *ev_async;
        uint8_t port;
        int gid_index;
        union ibv_gid gid;
        struct ibv_port_attr port_attr;
        struct ibv_device_attr attr;
        unsigned unacked;               /* CQ events not acknowledged yet */
        struct ibv_wc *stash;           /* completions polled while flushing another QP */
        size_t n_stash, cap_stash;
        CList endpoints;                /* RdmaEndpoint.link_dev */
        uint64_t mrs, mr_bytes, reg_usec, reg_count, wc_errors, async_events;
        const char *last_wc_error;
        const char *last_async_event;
};

/* One queue pair's life: freed after it was destroyed and its completions were consumed. */
struct RdmaQp {
        RdmaSlot *slot;
        struct ibv_qp *qp;
        /* Per chained batch in the send queue, oldest first: work requests and segments. */
        struct {
                uint16_t wrs;
                uint16_t segs;
        } fifo[RDMA_FIFO];
        unsigned fifo_head, fifo_len;
        unsigned outstanding;           /* work requests posted, not known complete */
};

struct RdmaSlot {
        RdmaEndpoint *ep;
        unsigned index;
        RdmaQp *qp;                     /* NULL when none exists */
        uint32_t psn;
        bool connected;
        RdmaJob *job;                   /* the job using this slot */
};

struct RdmaEndpoint {
        RdmaDevice *dev;
        uint64_t id;
        bool initiator;
        RdmaDeviceInfo remote;
        enum ibv_mtu mtu;
        unsigned n_slots;
        RdmaSlot slots[RDMA_MAX_SLOTS];
        CList waiting;                  /* RdmaJob.link_wait: jobs waiting for slots */
        CList link_dev;
        RdmaEndpointStats stats;
};

struct RdmaJob {
        RdmaEndpoint *ep;
        bool read;
        const RdmaSegment *segs;
        size_t n;
        size_t next;                    /* next segment to post, shared by the job's slots */
        size_t completed;               /* segments known complete */
        uint32_t slots;                 /* mask of slots held */
        int status;
        bool stopping;
        rdma_done_fn done;
        void *userdata;
        CList link_wait;
};

static void rdma_job_finish(RdmaJob *job);
static void rdma_job_pump(RdmaJob *job);
static void rdma_slot_flush(RdmaSlot *slot);
static void rdma_dispatch_wc(RdmaDevice *dev, const struct ibv_wc *wc);

static uint32_t mtu_bytes(enum ibv_mtu m)
{
        return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static enum ibv_mtu mtu_enum(uint32_t bytes)
{
        for (enum ibv_mtu m = IBV_MTU_4096; m > IBV_MTU_256; m--)
                if (mtu_bytes(m) <= bytes)
                        return m;
        return IBV_MTU_256;
}

/* ---- devices ---- */

static bool gid_is_roce_v2_ipv4(const struct ibv_gid_entry *e)
{
        static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

        return e->gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e->gid.raw, prefix, 12) == 0;
}

/* The GID index to use: the configured one, else the RoCE v2 IPv4 one (Ethernet), else 0. */
static int rdma_pick_gid(RdmaDevice *dev, int wanted)
{
        struct ibv_gid_entry e;

        if (wanted >= 0)
                return wanted;
        if (dev->port_attr.link_layer != IBV_LINK_LAYER_ETHERNET)
                return 0;
        for (int i = 0; i < dev->port_attr.gid_tbl_len; i++)
                if (ibv_query_gid_ex(dev->ibv, dev->port, (uint32_t)i, &e, 0) == 0 &&
                    gid_is_roce_v2_ipv4(&e))
                        return i;
        return -ENOENT;
}

static void rdma_on_cq(evutil_socket_t fd, short what, void *userdata);
static void rdma_on_async(evutil_socket_t fd, short what, void *userdata);

static void rdma_device_close(RdmaDevice *dev)
{
        if (dev->ev_cq)
                event_free(dev->ev_cq);
        if (dev->ev_async)
                event_free(dev->ev_async);
        if (dev->cq) {
                if (dev->unacked)
                        ibv_ack_cq_events(dev->cq, dev->unacked);
                ibv_destroy_cq(dev->cq);
        }
        if (dev->chan)
                ibv_destroy_comp_channel(dev->chan);
        if (dev->pd)
                ibv_dealloc_pd(dev->pd);
        if (dev->ibv)
                ibv_close_device(dev->ibv);
        free(dev->stash);
        free(dev);
}

static int set_nonblock(int fd)
{
        int flags = fcntl(fd, F_GETFL);

        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

/* Opens @cfg's device; on failure the device stays with dev->error set. */
static void rdma_device_open(RdmaDevice *dev, const DeviceConfig *cfg, struct ibv_device **list,
                             int n_list, struct event_base *base)
{
        struct ibv_device *found = NULL;
        int r;

        for (int i = 0; i < n_list && !found; i++)
                if (strcmp(ibv_get_device_name(list[i]), cfg->rdma_device) == 0)
                        found = list[i];
        if (!found) {
                (void)snprintf(dev->error, sizeof(dev->error), "no RDMA device %s on this host "
                               "(ibv_get_device_list found %d)", cfg->rdma_device, n_list);
                return;
        }
        dev->ibv = ibv_open_device(found);
        if (!dev->ibv) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_open_device: %m");
                return;
        }
        r = ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
        if (r != 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_query_port %u: %s",
                               dev->port, strerror(r));
                return;
        }
        if (dev->port_attr.state != IBV_PORT_ACTIVE)
                (void)snprintf(dev->error, sizeof(dev->error), "port %u is %s", dev->port,
                               ibv_port_state_str(dev->port_attr.state));
        dev->gid_index = rdma_pick_gid(dev, cfg->gid_index);
        if (dev->gid_index < 0) {
                (void)snprintf(dev->error, sizeof(dev->error),
                               "no RoCE v2 IPv4 GID on port %u; set gid_index", dev->port);
                return;
        }
        r = ibv_query_gid(dev->ibv, dev->port, dev->gid_index, &dev->gid);
        if (r != 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_query_gid %d: %s",
                               dev->gid_index, strerror(r));
                return;
        }
        r = ibv_query_device(dev->ibv, &dev->attr);
        if (r != 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_query_device: %s",
                               strerror(r));
                return;
        }
        dev->pd = ibv_alloc_pd(dev->ibv);
        dev->chan = dev->pd ? ibv_create_comp_channel(dev->ibv) : NULL;
        dev->cq = dev->chan ? ibv_create_cq(dev->ibv, RDMA_CQ_SIZE, dev, dev->chan, 0) : NULL;
        if (!dev->cq) {
                (void)snprintf(dev->error, sizeof(dev->error),
                               "cannot create a protection domain, channel and CQ: %m");
                return;
        }
        r = ibv_req_notify_cq(dev->cq, 0);
        if (r == 0)
                r = -set_nonblock(dev->chan->fd);
        if (r == 0)
                r = -set_nonblock(dev->ibv->async_fd);
        if (r != 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "cannot arm the CQ: %s",
                               strerror(abs(r)));
                return;
        }
        dev->ev_cq = event_new(base, dev->chan->fd, EV_READ | EV_PERSIST, rdma_on_cq, dev);
        dev->ev_async = event_new(base, dev->ibv->async_fd, EV_READ | EV_PERSIST,
                                  rdma_on_async, dev);
        if (!dev->ev_cq || !dev->ev_async || event_add(dev->ev_cq, NULL) < 0 ||
            event_add(dev->ev_async, NULL) < 0)
                (void)snprintf(dev->error, sizeof(dev->error), "cannot watch the CQ");
}

int rdma_context_new(Daemon *d, RdmaContext **ret)
{
        const Config *cfg = d->config;
        struct ibv_device **list = NULL;
        RdmaContext *c;
        int n_list = 0;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->daemon = d;
        for (size_t i = 0; i < cfg->n_devices; i++) {
                const DeviceConfig *dc = &cfg->devices[i];
                RdmaDevice *dev, **devs;

                if (!dc->rdma_device || dc->transport == TRANSPORT_KIND_TCP ||
                    rdma_device_find(c, dc->rdma_device))
                        continue;
                if (!list)
                        list = ibv_get_device_list(&n_list);
                dev = calloc(1, sizeof(*dev));
                devs = realloc(c->devs, (c->n_devs + 1) * sizeof(*devs));
                if (!dev || !devs) {
                        free(dev);
                        if (devs)
                                c->devs = devs;
                        if (list)
                                ibv_free_device_list(list);
                        rdma_context_free(c);
                        return -ENOMEM;
                }
                c->devs = devs;
                c->devs[c->n_devs++] = dev;
                dev->ctx = c;
                clist_init(&dev->endpoints);
                (void)snprintf(dev->name, sizeof(dev->name), "%s", dc->rdma_device);
                dev->port = dc->port;
                dev->last_wc_error = dev->last_async_event = "";
                rdma_device_open(dev, dc, list, n_list, d->base);
                if (dev->error[0])
                        log_warning("RDMA device %s: %s; links of device_id %" PRId32 " cannot "
                                    "use it", dev->name, dev->error, dc->device_id);
                else
                        log_info("RDMA device %s port %u: %s, MTU %u, GID index %d",
                                 dev->name, dev->port,
                                 dev->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                                         ? "RoCE" : "InfiniBand",
                                 mtu_bytes(dev->port_attr.active_mtu), dev->gid_index);
        }
        if (list)
                ibv_free_device_list(list);
        *ret = c;
        return 0;
}

RdmaContext *rdma_context_free(RdmaContext *c)
{
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_devs; i++) {
                assert(clist_is_empty(&c->devs[i]->endpoints));
                rdma_device_close(c->devs[i]);
        }
        free(c->devs);
        free(c);
        return NULL;
}

RdmaDevice *rdma_device_find(RdmaContext *c, const char *name)
{
        for (size_t i = 0; c && i < c->n_devs; i++)
                if (strcmp(c->devs[i]->name, name) == 0)
                        return c->devs[i];
        return NULL;
}

bool rdma_device_usable(const RdmaDevice *dev)
{
        return dev && !dev->error[0] && dev->port_attr.state == IBV_PORT_ACTIVE;
}

RdmaDevice *rdma_device_for(RdmaContext *c, int32_t device_id, const char **ret_reason)
{
        const DeviceConfig *dc = c ? config_find_device(c->daemon->config, device_id) : NULL;
        RdmaDevice *dev;

        if (!dc || !dc->rdma_device) {
                *ret_reason = "the device map names no RDMA device for this device_id";
                return NULL;
        }
        if (dc->transport == TRANSPORT_KIND_TCP) {
                *ret_reason = "the device map says tcp for this device_id";
                return NULL;
        }
        dev = rdma_device_find(c, dc->rdma_device);
        if (!rdma_device_usable(dev)) {
                *ret_reason = dev && dev->error[0] ? dev->error : "the RDMA port is not active";
                return NULL;
        }
        return dev;
}

void rdma_device_get_info(const RdmaDevice *dev, RdmaDeviceInfo *ret)
{
        *ret = (RdmaDeviceInfo){
                .port = dev->port,
                .mtu = mtu_bytes(dev->port_attr.active_mtu),
                .lid = dev->port_attr.lid,
        };
        (void)snprintf(ret->device, sizeof(ret->device), "%s", dev->name);
        memcpy(ret->gid, dev->gid.raw, RDMA_GID_SIZE);
}

void rdma_context_foreach_device(RdmaContext *c, void (*fn)(const RdmaDevice *dev, void *ud),
                                 void *userdata)
{
        for (size_t i = 0; c && i < c->n_devs; i++)
                fn(c->devs[i], userdata);
}

void rdma_device_get_status(const RdmaDevice *dev, RdmaDeviceStatus *ret)
{
        *ret = (RdmaDeviceStatus){
                .name = dev->name,
                .state = dev->error[0] ? "error"
                         : dev->port_attr.state == IBV_PORT_ACTIVE ? "active" : "down",
                .link_layer = dev->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                                      ? "Ethernet" : "InfiniBand",
                .error = dev->error,
                .port = dev->port,
                .mtu = mtu_bytes(dev->port_attr.active_mtu),
                .gid_index = dev->gid_index,
                .mrs = dev->mrs,
                .mr_bytes = dev->mr_bytes,
                .reg_usec_total = dev->reg_usec,
                .reg_count = dev->reg_count,
                .wc_errors = dev->wc_errors,
                .last_wc_error = dev->last_wc_error,
                .async_events = dev->async_events,
                .last_async_event = dev->last_async_event,
        };
        if (dev->ibv)
                (void)inet_ntop(AF_INET6, dev->gid.raw, ret->gid, sizeof(ret->gid));
}

/* ---- memory registrations ---- */

typedef struct RdmaCacheReg {
        RdmaDevice *dev;
        bool remote;
        uint32_t n;
        struct ibv_mr *mrs[];
} RdmaCacheReg;

static void rdma_cache_reg_free(void *p)
{
        RdmaCacheReg *reg = p;

        for (uint32_t t = 0; t < reg->n; t++)
                if (reg->mrs[t]) {
                        reg->dev->mrs--;
                        reg->dev->mr_bytes -= reg->mrs[t]->length;
                        (void)ibv_dereg_mr(reg->mrs[t]);
                }
        free(reg);
}

int rdma_cache_register(RdmaDevice *dev, Cache *cache, bool remote)
{
        int access = IBV_ACCESS_LOCAL_WRITE |
                     (remote ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE : 0);
        uint32_t n = cache->desc.num_tensors;
        RdmaCacheReg *reg;
        usec_t t0 = now_usec(CLOCK_MONOTONIC);

        assert(!cache->rdma);
        reg = calloc(1, sizeof(*reg) + n * sizeof(reg->mrs[0]));
        if (!reg)
                return -ENOMEM;
        reg->dev = dev;
        reg->remote = remote;
        reg->n = n;
        for (uint32_t t = 0; t < n; t++) {
                const CacheTensor *ct = &cache->tensors[t];

                reg->mrs[t] = ibv_reg_mr(dev->pd, ct->region->data + ct->offset,
                                         cache->tensor_size, access);
                if (!reg->mrs[t]) {
                        int r = -errno;

                        rdma_cache_reg_free(reg);
                        return r ? r : -EIO;
                }
                dev->mrs++;
                dev->mr_bytes += cache->tensor_size;
        }
        dev->reg_usec += now_usec(CLOCK_MONOTONIC) - t0;
        dev->reg_count += n;
        cache->rdma = reg;
        cache->rdma_free = rdma_cache_reg_free;
        return 0;
}

bool rdma_cache_registered(const Cache *cache, bool remote)
{
        const RdmaCacheReg *reg = cache->rdma;

        return reg && (!remote || reg->remote);
}

int rdma_cache_tensor(const Cache *cache, uint32_t t, uint64_t *ret_addr, uint32_t *ret_lkey,
                      uint32_t *ret_rkey)
{
        const RdmaCacheReg *reg = cache->rdma;

        if (!reg || t >= reg->n)
                return -ENOENT;
        *ret_addr = (uint64_t)(uintptr_t)reg->mrs[t]->addr;
        if (ret_lkey)
                *ret_lkey = reg->mrs[t]->lkey;
        if (ret_rkey)
                *ret_rkey = reg->remote ? reg->mrs[t]->rkey : 0;
        return 0;
}

/* ---- queue pairs ---- */

static RdmaQp *rdma_qp_new(RdmaSlot *slot)
{
        RdmaEndpoint *ep = slot->ep;
        struct ibv_qp_init_attr init = {
                .send_cq = ep->dev->cq,
                .recv_cq = ep->dev->cq,
                .cap = { .max_send_wr = RDMA_SQ_DEPTH, .max_recv_wr = 1,
                         .max_send_sge = RDMA_MAX_SGE, .max_recv_sge = 1 },
                .qp_type = IBV_QPT_RC,
                .sq_sig_all = 0,
        };
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_INIT,
                .pkey_index = 0,
                .port_num = ep->dev->port,
                .qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
        };
        RdmaQp *q;
        int r;

        q = calloc(1, sizeof(*q));
        if (!q)
                return NULL;
        q->slot = slot;
        q->qp = ibv_create_qp(ep->dev->pd, &init);
        if (!q->qp) {
                free(q);
                return NULL;
        }
        r = ibv_modify_qp(q->qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (r != 0) {
                (void)ibv_destroy_qp(q->qp);
                free(q);
                errno = r;
                return NULL;
        }
        return q;
}

/* INIT -> RTR toward the peer's QP. */
static int rdma_qp_to_rtr(RdmaEndpoint *ep, RdmaQp *q, uint32_t qpn, uint32_t psn)
{
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_RTR,
                .path_mtu = ep->mtu,
                .dest_qp_num = qpn,
                .rq_psn = psn,
                .max_dest_rd_atomic = (uint8_t)MIN(16, ep->dev->attr.max_qp_rd_atom),
                .min_rnr_timer = 12,
                .ah_attr = {
                        .is_global = 1,
                        .dlid = ep->remote.lid,
                        .port_num = ep->dev->port,
                        .grh = { .hop_limit = 64, .sgid_index = (uint8_t)ep->dev->gid_index },
                },
        };

        memcpy(attr.ah_attr.grh.dgid.raw, ep->remote.gid, RDMA_GID_SIZE);
        return -ibv_modify_qp(q->qp, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER);
}

/* RTR -> RTS with our PSN. */
static int rdma_qp_to_rts(RdmaEndpoint *ep, RdmaQp *q, uint32_t psn)
{
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_RTS,
                .timeout = 14,
                .retry_cnt = 7,
                .rnr_retry = 7,
                .sq_psn = psn,
                .max_rd_atomic = (uint8_t)MIN(16, ep->dev->attr.max_qp_init_rd_atom),
        };

        return -ibv_modify_qp(q->qp, &attr,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                      IBV_QP_MAX_QP_RD_ATOMIC);
}

/*
 * Destroys a queue pair so that the device touches none of our memory through it any more, then
 * consumes whatever completions it left in the CQ (others are kept for the next dispatch).
 */
static void rdma_qp_destroy(RdmaQp *q)
{
        RdmaDevice *dev = q->slot->ep->dev;
        struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
        struct ibv_wc wc[RDMA_POLL_BATCH];
        int n;

        size_t k = 0;

        (void)ibv_modify_qp(q->qp, &attr, IBV_QP_STATE);
        (void)ibv_destroy_qp(q->qp);
        /* Completions stashed earlier may name @q too: they go with it. */
        for (size_t i = 0; i < dev->n_stash; i++)
                if ((RdmaQp *)(uintptr_t)dev->stash[i].wr_id != q)
                        dev->stash[k++] = dev->stash[i];
        dev->n_stash = k;
        while ((n = ibv_poll_cq(dev->cq, RDMA_POLL_BATCH, wc)) > 0)
                for (int i = 0; i < n; i++) {
                        if ((RdmaQp *)(uintptr_t)wc[i].wr_id == q)
                                continue;
                        if (dev->n_stash == dev->cap_stash) {
                                size_t cap = dev->cap_stash ? dev->cap_stash * 2 : 64;
                                struct ibv_wc *s = realloc(dev->stash, cap * sizeof(*s));

                                if (!s) {
                                        log_error("RDMA device %s: out of memory keeping a "
                                                  "completion, dropping it", dev->name);
                                        continue;
                                }
                                dev->stash = s;
                                dev->cap_stash = cap;
                        }
                        dev->stash[dev->n_stash++] = wc[i];
                }
        if (dev->n_stash > 0)
                event_active(dev->ev_cq, EV_READ, 0);
        free(q);
}

/* ---- endpoints ---- */

int rdma_endpoint_new(RdmaDevice *dev, uint64_t id, bool initiator, const RdmaDeviceInfo *remote,
                      unsigned n_slots, RdmaEndpoint **ret)
{
        RdmaEndpoint *ep;

        if (!rdma_device_usable(dev) || n_slots == 0 || n_slots > RDMA_MAX_SLOTS)
                return -EINVAL;
        ep = calloc(1, sizeof(*ep));
        if (!ep)
                return -ENOMEM;
        ep->dev = dev;
        ep->id = id;
        ep->initiator = initiator;
        ep->remote = *remote;
        ep->remote.device[sizeof(ep->remote.device) - 1] = '\0';
        ep->mtu = mtu_enum(MIN(remote->mtu, mtu_bytes(dev->port_attr.active_mtu)));
        ep->n_slots = n_slots;
        for (unsigned i = 0; i < n_slots; i++)
                ep->slots[i] = (RdmaSlot){ .ep = ep, .index = i };
        clist_init(&ep->waiting);
        clist_link_tail(&dev->endpoints, &ep->link_dev);
        *ret = ep;
        return 0;
}

RdmaEndpoint *rdma_endpoint_free(RdmaEndpoint *ep)
{
        RdmaJob *job, *tmp;

        if (!ep)
                return NULL;
        /* Jobs that never started: nothing to flush. */
        CLIST_FOREACH_SAFE(job, tmp, &ep->waiting, link_wait) {
                clist_unlink(&job->link_wait);
                job->status = -ECONNRESET;
                rdma_job_finish(job);
        }
        for (unsigned i = 0; i < ep->n_slots; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job && slot->job->status == 0)
                        slot->job->status = -ECONNRESET;
                rdma_slot_flush(slot);
        }
        clist_unlink(&ep->link_dev);
        free(ep);
        return NULL;
}

int rdma_endpoint_slot_local(RdmaEndpoint *ep, unsigned slot_index, uint32_t *ret_qpn,
                             uint32_t *ret_psn)
{
        RdmaSlot *slot;
        uint32_t psn;
        int r;

        if (slot_index >= ep->n_slots)
                return -EINVAL;
        slot = &ep->slots[slot_index];
        if (slot->job)
                return -EBUSY;
        if (slot->qp)
                rdma_slot_flush(slot);
        r = random_bytes(&psn, sizeof(psn));
        if (r < 0)
                return r;
        slot->qp = rdma_qp_new(slot);
        if (!slot->qp)
                return errno ? -errno : -EIO;
        slot->psn = psn & 0xffffff;
        slot->connected = false;
        *ret_qpn = slot->qp->qp->qp_num;
        *ret_psn = slot->psn;
        return 0;
}

int rdma_endpoint_slot_connect(RdmaEndpoint *ep, unsigned slot_index, uint32_t qpn, uint32_t psn)
{
        RdmaSlot *slot;
        int r;

        if (slot_index >= ep->n_slots || !ep->slots[slot_index].qp)
                return -EINVAL;
        slot = &ep->slots[slot_index];
        r = rdma_qp_to_rtr(ep, slot->qp, qpn, psn & 0xffffff);
        if (r == 0)
                r = rdma_qp_to_rts(ep, slot->qp, slot->psn);
        if (r < 0) {
                rdma_slot_flush(slot);
                return r;
        }
        slot->connected = true;
        /* A job may have waited for this slot. */
        if (!clist_is_empty(&ep->waiting))
                rdma_job_pump(clist_first_entry(&ep->waiting, RdmaJob, link_wait));
        return 0;
}

uint64_t rdma_endpoint_id(const RdmaEndpoint *ep)
{
        return ep->id;
}

bool rdma_endpoint_initiator(const RdmaEndpoint *ep)
{
        return ep->initiator;
}

RdmaDevice *rdma_endpoint_device(const RdmaEndpoint *ep)
{
        return ep->dev;
}

const char *rdma_endpoint_remote_device(const RdmaEndpoint *ep)
{
        return ep->remote.device;
}

unsigned rdma_endpoint_n_slots(const RdmaEndpoint *ep)
{
        return ep->n_slots;
}

bool rdma_endpoint_ready(const RdmaEndpoint *ep)
{
        return rdma_endpoint_broken_slots(ep) == 0;
}

uint32_t rdma_endpoint_broken_slots(const RdmaEndpoint *ep)
{
        uint32_t mask = 0;

        for (unsigned i = 0; i < ep->n_slots; i++)
                if (!ep->slots[i].connected)
                        mask |= UINT32_C(1) << i;
        return mask;
}

void rdma_endpoint_get_stats(const RdmaEndpoint *ep, RdmaEndpointStats *ret)
{
        *ret = ep->stats;
        ret->slots_ready = 0;
        for (unsigned i = 0; i < ep->n_slots; i++)
                ret->slots_ready += ep->slots[i].connected;
}

/* ---- jobs ---- */

/* Takes @slot out of service: its queue pair goes, so it needs connecting again. */
static void rdma_slot_flush(RdmaSlot *slot)
{
        RdmaJob *job = slot->job;

        slot->connected = false;
        if (slot->qp) {
                rdma_qp_destroy(slot->qp);
                slot->qp = NULL;
        }
        if (job) {
                slot->job = NULL;
                job->slots &= ~(UINT32_C(1) << slot->index);
                if (job->slots == 0)
                        rdma_job_finish(job);
        }
}

static void rdma_job_finish(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        rdma_done_fn done = job->done;
        void *userdata = job->userdata;
        int status = job->status;

        if (status == 0 && job->completed < job->n)
                status = -EIO;
        ep->stats.jobs_in_flight--;
        if (status == 0)
                ep->stats.jobs_done++;
        else
                ep->stats.jobs_failed++;
        free(job);
        /* Slots came free: the next waiting job starts from the CQ handler, not from inside
         * whatever loop finished this one. */
        if (!clist_is_empty(&ep->waiting))
                event_active(ep->dev->ev_cq, EV_READ, 0);
        done(userdata, status);
}

/* Flushes every slot of @job; the last one finishes it. */
static void rdma_job_flush_slots(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        uint32_t mask = job->slots;

        for (unsigned i = 0; i < ep->n_slots; i++)
                if (mask & (UINT32_C(1) << i))
                        rdma_slot_flush(&ep->slots[i]);
}

/* Builds and posts one chain of work requests on @slot from the job's cursor. */
static int rdma_slot_post(RdmaSlot *slot, RdmaJob *job)
{
        struct ibv_send_wr wrs[RDMA_BATCH], *bad = NULL;
        struct ibv_sge sges[RDMA_BATCH][RDMA_MAX_SGE];
        RdmaQp *q = slot->qp;
        unsigned n_wr = 0, n_seg = 0, room;
        int r;

        room = RDMA_SQ_DEPTH - q->outstanding;
        if (q->fifo_len == RDMA_FIFO)
                return 0;
        while (n_wr < RDMA_BATCH && n_wr < room && job->next < job->n) {
                const RdmaSegment *s = &job->segs[job->next];
                struct ibv_send_wr *wr = &wrs[n_wr];
                unsigned k = 0;

                *wr = (struct ibv_send_wr){
                        .opcode = job->read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
                        .sg_list = sges[n_wr],
                        .wr.rdma = { .remote_addr = s->remote_addr, .rkey = s->rkey },
                };
                /* Segments that continue one another on the peer's side share a request. */
                do {
                        s = &job->segs[job->next];
                        sges[n_wr][k++] = (struct ibv_sge){ .addr = s->local_addr,
                                                            .length = s->len,
                                                            .lkey = s->lkey };
                        job->next++;
                        n_seg++;
                } while (k < RDMA_MAX_SGE && job->next < job->n &&
                         job->segs[job->next].rkey == s->rkey &&
                         job->segs[job->next].remote_addr == s->remote_addr + s->len);
                wr->num_sge = (int)k;
                if (n_wr > 0)
                        wrs[n_wr - 1].next = wr;
                n_wr++;
        }
        if (n_wr == 0)
                return 0;
        /* Only the last request of a chain asks for a completion; it accounts for the chain. */
        wrs[n_wr - 1].send_flags = IBV_SEND_SIGNALED;
        wrs[n_wr - 1].wr_id = (uint64_t)(uintptr_t)q;
        r = ibv_post_send(q->qp, wrs, &bad);
        if (r != 0) {
                /* Nothing of a refused chain counts; the slot is flushed by the caller. */
                job->next -= n_seg;
                return -r;
        }
        q->fifo[(q->fifo_head + q->fifo_len) % RDMA_FIFO].wrs = (uint16_t)n_wr;
        q->fifo[(q->fifo_head + q->fifo_len) % RDMA_FIFO].segs = (uint16_t)n_seg;
        q->fifo_len++;
        q->outstanding += n_wr;
        slot->ep->stats.wrs_posted += n_wr;
        return (int)n_wr;
}

/* Keeps every slot of @job busy as far as its send queue allows; ends a finished job. */
static void rdma_job_fill(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;

        for (unsigned i = 0; i < ep->n_slots; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job != job)
                        continue;
                for (;;) {
                        int r = rdma_slot_post(slot, job);

                        if (r == 0)
                                break;
                        if (r < 0) {
                                log_warning("RDMA device %s: ibv_post_send: %s, flushing slot %u",
                                            ep->dev->name, strerror(-r), i);
                                job->status = r;
                                job->stopping = true;
                                break;
                        }
                }
        }
        if (job->stopping)
                rdma_job_flush_slots(job);
}

/* Gives @job (the first waiting one) the free connected slots and starts it. */
static void rdma_job_pump(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        unsigned wanted;

        /* One slot per 64 segments, at least one, at most all. */
        wanted = (unsigned)MIN((job->n + 63) / 64, (size_t)ep->n_slots);
        wanted = MAX(wanted, 1u);
        for (unsigned i = 0; i < ep->n_slots && __builtin_popcount(job->slots) < (int)wanted; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job || !slot->connected || !slot->qp)
                        continue;
                slot->job = job;
                job->slots |= UINT32_C(1) << i;
        }
        if (job->slots == 0)
                return;
        clist_unlink(&job->link_wait);
        rdma_job_fill(job);
}

int rdma_job_submit(RdmaEndpoint *ep, bool read, const RdmaSegment *segs, size_t n,
                    rdma_done_fn done, void *userdata, RdmaJob **ret)
{
        RdmaJob *job;
        bool any = false;

        if (n == 0 || !segs || !done)
                return -EINVAL;
        for (unsigned i = 0; i < ep->n_slots; i++)
                any = any || ep->slots[i].connected;
        if (!any)
                return -ENOTCONN;
        job = calloc(1, sizeof(*job));
        if (!job)
                return -ENOMEM;
        job->ep = ep;
        job->read = read;
        job->segs = segs;
        job->n = n;
        job->done = done;
        job->userdata = userdata;
        ep->stats.jobs_in_flight++;
        clist_link_tail(&ep->waiting, &job->link_wait);
        *ret = job;
        if (clist_first_entry(&ep->waiting, RdmaJob, link_wait) == job)
                rdma_job_pump(job);
        return 0;
}

void rdma_job_cancel(RdmaJob *job)
{
        if (job->status == 0)
                job->status = -ECANCELED;
        job->stopping = true;
        if (job->slots == 0) {
                clist_unlink(&job->link_wait);
                rdma_job_finish(job);
                return;
        }
        /* Flushing destroys the queue pairs: no request of this job runs afterwards. */
        rdma_job_flush_slots(job);
}

/* ---- completions ---- */

static void rdma_dispatch_wc(RdmaDevice *dev, const struct ibv_wc *wc)
{
        RdmaQp *q = (RdmaQp *)(uintptr_t)wc->wr_id;
        RdmaSlot *slot;
        RdmaJob *job;
        unsigned segs;

        if (!q)
                return;
        slot = q->slot;
        job = slot->job;
        if (wc->status != IBV_WC_SUCCESS) {
                dev->wc_errors++;
                dev->last_wc_error = ibv_wc_status_str(wc->status);
                log_warning("RDMA device %s: %s completion failed: %s (QP %u), flushing the "
                            "transfer's queue pairs", dev->name,
                            wc->opcode == IBV_WC_RDMA_READ ? "READ" : "WRITE",
                            ibv_wc_status_str(wc->status), wc->qp_num);
                if (job) {
                        if (job->status == 0)
                                job->status = wc->status == IBV_WC_REM_ACCESS_ERR ? -EACCES
                                                                                  : -EIO;
                        job->stopping = true;
                        rdma_job_flush_slots(job);
                } else
                        rdma_slot_flush(slot);
                return;
        }
        if (q->fifo_len == 0)
                return;
        segs = q->fifo[q->fifo_head].segs;
        q->outstanding -= q->fifo[q->fifo_head].wrs;
        q->fifo_head = (q->fifo_head + 1) % RDMA_FIFO;
        q->fifo_len--;
        if (!job)
                return;
        job->completed += segs;
        if (job->completed == job->n) {
                for (size_t i = 0; i < job->n; i++)
                        slot->ep->stats.bytes += job->segs[i].len;
                /* Every request of the job completed: its slots are free again. */
                for (unsigned i = 0; i < slot->ep->n_slots; i++)
                        if (slot->ep->slots[i].job == job) {
                                slot->ep->slots[i].job = NULL;
                                job->slots &= ~(UINT32_C(1) << i);
                        }
                rdma_job_finish(job);
                return;
        }
        if (!job->stopping)
                rdma_job_fill(job);
}

static void rdma_on_cq(evutil_socket_t fd, short what, void *userdata)
{
        RdmaDevice *dev = userdata;
        RdmaEndpoint *ep, *tmp;
        struct ibv_wc wc[RDMA_POLL_BATCH];
        struct ibv_cq *cq;
        void *ctx;
        int n;

        /* A real event, or one raised for stashed completions. */
        if (ibv_get_cq_event(dev->chan, &cq, &ctx) == 0) {
                if (++dev->unacked >= RDMA_ACK_BATCH) {
                        ibv_ack_cq_events(dev->cq, dev->unacked);
                        dev->unacked = 0;
                }
                /* Re-arm before draining, so no completion slips between the two. */
                (void)ibv_req_notify_cq(dev->cq, 0);
        }
        /* Stashed ones first, oldest first: a queue pair's completions come in order. */
        while (dev->n_stash > 0) {
                struct ibv_wc w = dev->stash[0];

                memmove(dev->stash, dev->stash + 1, --dev->n_stash * sizeof(w));
                rdma_dispatch_wc(dev, &w);
        }
        while ((n = ibv_poll_cq(dev->cq, RDMA_POLL_BATCH, wc)) > 0)
                for (int i = 0; i < n; i++)
                        rdma_dispatch_wc(dev, &wc[i]);
        if (n < 0)
                log_error("RDMA device %s: ibv_poll_cq failed, ignoring", dev->name);
        /* Jobs that wait for slots freed meanwhile. */
        CLIST_FOREACH_SAFE(ep, tmp, &dev->endpoints, link_dev)
                if (!clist_is_empty(&ep->waiting))
                        rdma_job_pump(clist_first_entry(&ep->waiting, RdmaJob, link_wait));
}

static void rdma_on_async(evutil_socket_t fd, short what, void *userdata)
{
        RdmaDevice *dev = userdata;
        struct ibv_async_event ev;
        RdmaEndpoint *ep, *tmp;

        while (ibv_get_async_event(dev->ibv, &ev) == 0) {
                enum ibv_event_type type = ev.event_type;

                ibv_ack_async_event(&ev);
                dev->async_events++;
                dev->last_async_event = ibv_event_type_str(type);
                log_warning("RDMA device %s: async event %s", dev->name,
                            ibv_event_type_str(type));
                if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_DEVICE_FATAL) {
                        (void)ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
                        /* Every transfer on this device fails; the queue pairs go. */
                        CLIST_FOREACH_SAFE(ep, tmp, &dev->endpoints, link_dev)
                                for (unsigned i = 0; i < ep->n_slots; i++) {
                                        RdmaSlot *slot = &ep->slots[i];

                                        if (slot->job && slot->job->status == 0)
                                                slot->job->status = -ENETDOWN;
                                        rdma_slot_flush(slot);
                                }
                } else if (type == IBV_EVENT_PORT_ACTIVE)
                        (void)ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
        }
}
