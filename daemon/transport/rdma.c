/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport, devices half: opening devices, memory registrations (the pool as a whole,
 * the tensors of client memory one by one, one message's ad hoc), async events.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/memory/cache.h"
#include "common/clist.h"
#include "common/log.h"
#include "daemon/memory/pool.h"
#include "daemon/transport/rdma-internal.h"
#include "daemon/transport/transport-set.h"
#include "daemon/memory/region.h"
#include "common/time-util.h"

/* ---- devices ---- */

static bool gid_is_roce_v2_ipv4(const struct ibv_gid_entry *e)
{
        static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

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

static void rdma_on_async(evutil_socket_t fd, short what, void *userdata);

static void rdma_device_close(RdmaDevice *dev)
{
        /* Before the verbs objects: the thread may post until it stops. */
        rdma_poster_stop(dev);
        if (dev->pool_mr) {
                dev->mrs--;
                dev->mr_bytes -= dev->pool_mr->length;
                (void)ibv_dereg_mr(dev->pool_mr);
        }
        if (dev->ev_cq)
                event_free(dev->ev_cq);
        if (dev->ev_kick)
                event_free(dev->ev_kick);
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
                (void)snprintf(dev->error, sizeof(dev->error),
                               "no RDMA device %s on this host "
                               "(ibv_get_device_list found %d)",
                               cfg->rdma_device, n_list);
                return;
        }
        dev->ibv = ibv_open_device(found);
        if (!dev->ibv) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_open_device: %m");
                return;
        }
        r = ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
        if (r != 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_query_port %u: %s", dev->port,
                               strerror(r));
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
                (void)snprintf(dev->error, sizeof(dev->error), "ibv_query_device: %s", strerror(r));
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
        dev->ev_kick = evtimer_new(base, rdma_on_cq, dev);
        dev->ev_async =
                event_new(base, dev->ibv->async_fd, EV_READ | EV_PERSIST, rdma_on_async, dev);
        if (!dev->ev_cq || !dev->ev_kick || !dev->ev_async || event_add(dev->ev_cq, NULL) < 0 ||
            event_add(dev->ev_async, NULL) < 0) {
                (void)snprintf(dev->error, sizeof(dev->error), "cannot watch the CQ");
                return;
        }
        r = rdma_poster_start(dev, base);
        if (r < 0)
                (void)snprintf(dev->error, sizeof(dev->error),
                               "cannot start the posting thread: %s", strerror(-r));
}

/*
 * Registers the whole memory pool on @dev once, for remote read and write: pool caches are
 * carved per request, long after the links that reach them, and registering each would pin and
 * unpin pages on every request. A peer's key for a pool cache is this one, with the cache's own
 * addresses; every transfer is checked against the cache before its addresses are handed out.
 */
static void rdma_device_register_pool(RdmaDevice *dev, Pool *pool)
{
        Region *region = pool_region(pool);
        usec_t t0 = now_usec(CLOCK_MONOTONIC);

        dev->pool_mr = ibv_reg_mr(dev->pd, region->data, region->size,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_WRITE);
        if (!dev->pool_mr) {
                dev->pool_error = errno ? -errno : -EIO;
                log_warning("RDMA device %s: cannot register the memory pool (%" PRIu64 " bytes): "
                            "%s (is LimitMEMLOCK high enough?); pool caches of its clusters "
                            "cannot use RDMA",
                            dev->name, region->size, strerror(-dev->pool_error));
                return;
        }
        dev->pool_region = region;
        dev->mrs++;
        dev->mr_bytes += region->size;
        dev->reg_usec += now_usec(CLOCK_MONOTONIC) - t0;
        dev->reg_count++;
        /* The registration holds the pool's pages: they must stay the ones mapped. */
        pool_pin(pool);
        log_info("RDMA device %s: memory pool of %" PRIu64 " bytes registered in %" PRIu64 " ms",
                 dev->name, region->size, (now_usec(CLOCK_MONOTONIC) - t0) / USEC_PER_MSEC);
}

/* Whether the device map lets RDMA have @dc's device ("auto" or "rdma"). */
static bool rdma_device_wanted(const DeviceConfig *dc)
{
        return dc->transport == TRANSPORT_KIND_AUTO || dc->transport == TRANSPORT_KIND_RDMA;
}

int rdma_context_new(TransportSet *ts, Pool *pool, RdmaContext **ret)
{
        struct ibv_device **list = NULL;
        RdmaContext *c;
        int n_list = 0;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->set = ts;
        for (size_t i = 0; i < ts->n_devices; i++) {
                const DeviceConfig *dc = &ts->devices[i];
                RdmaDevice *dev, **devs;

                if (!dc->rdma_device || !rdma_device_wanted(dc) ||
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
                dev->poster.efd = -1;
                clist_init(&dev->endpoints);
                (void)snprintf(dev->name, sizeof(dev->name), "%s", dc->rdma_device);
                dev->port = dc->port;
                dev->last_wc_error = dev->last_async_event = "";
                rdma_device_open(dev, dc, list, n_list, ts->base);
                if (dev->error[0])
                        log_warning("RDMA device %s: %s; links of device_id %" PRId32 " cannot "
                                    "use it",
                                    dev->name, dev->error, dc->device_id);
                else {
                        log_info("RDMA device %s port %u: %s, MTU %u, GID index %d", dev->name,
                                 dev->port,
                                 dev->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                                         ? "RoCE"
                                         : "InfiniBand",
                                 rdma_mtu_bytes(dev->port_attr.active_mtu), dev->gid_index);
                        if (pool)
                                rdma_device_register_pool(dev, pool);
                }
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
        const DeviceConfig *dc = c ? transport_set_find_device(c->set, device_id) : NULL;
        RdmaDevice *dev;

        if (!dc || !dc->rdma_device) {
                *ret_reason = "the device map names no RDMA device for this device_id";
                return NULL;
        }
        if (!rdma_device_wanted(dc)) {
                *ret_reason = dc->transport == TRANSPORT_KIND_TCP
                                      ? "the device map says tcp for this device_id"
                                      : "the device map gives this device_id another transport";
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
                .mtu = rdma_mtu_bytes(dev->port_attr.active_mtu),
                .lid = dev->port_attr.lid,
        };
        (void)snprintf(ret->device, sizeof(ret->device), "%s", dev->name);
        memcpy(ret->address, dev->gid.raw, RDMA_GID_SIZE);
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
                .state = dev->error[0]                             ? "error"
                         : dev->port_attr.state == IBV_PORT_ACTIVE ? "active"
                                                                   : "down",
                /* A device that is not there, or whose port never answered, has none. */
                .link_layer = !dev->ibv                                              ? "missing"
                              : dev->port_attr.state == IBV_PORT_NOP                 ? "unknown"
                              : dev->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
                                                                                     : "InfiniBand",
                .error = dev->error,
                .port = dev->port,
                .mtu = rdma_mtu_bytes(dev->port_attr.active_mtu),
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
        bool pool; /* mrs[] are the device's pool registration (shared) */
        uint32_t n;
        struct ibv_mr *mrs[];
} RdmaCacheReg;

static void rdma_cache_reg_free(void *p)
{
        RdmaCacheReg *reg = p;

        for (uint32_t t = 0; t < reg->n && !reg->pool; t++)
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

        assert(!cache->regs);
        reg = calloc(1, sizeof(*reg) + n * sizeof(reg->mrs[0]));
        if (!reg)
                return -ENOMEM;
        reg->dev = dev;
        reg->remote = remote;
        reg->n = n;
        if (cache->pool_backed) {
                /* Registered with the pool, at start. */
                if (!dev->pool_mr || cache->tensors[0].region != dev->pool_region) {
                        free(reg);
                        return dev->pool_error < 0 ? dev->pool_error : -ENODEV;
                }
                reg->pool = true;
                for (uint32_t t = 0; t < n; t++)
                        reg->mrs[t] = dev->pool_mr;
                cache->regs = reg;
                cache->regs_free = rdma_cache_reg_free;
                return 0;
        }
        for (uint32_t t = 0; t < n; t++) {
                const CacheTensor *ct = &cache->tensors[t];

                reg->mrs[t] = ibv_reg_mr(dev->pd, ct->region->data + ct->offset, cache->tensor_size,
                                         access);
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
        cache->regs = reg;
        cache->regs_free = rdma_cache_reg_free;
        return 0;
}

bool rdma_cache_registered(const Cache *cache, bool remote)
{
        const RdmaCacheReg *reg = cache->regs;

        return reg && (!remote || reg->remote);
}

int rdma_cache_tensor(const Cache *cache, uint32_t t, uint64_t *ret_addr, uint32_t *ret_lkey,
                      uint32_t *ret_rkey)
{
        const RdmaCacheReg *reg = cache->regs;

        if (!reg || t >= reg->n)
                return -ENOENT;
        /* The tensor's own bytes, also where a registration covers more (the pool). */
        *ret_addr =
                (uint64_t)(uintptr_t)(cache->tensors[t].region->data + cache->tensors[t].offset);
        if (ret_lkey)
                *ret_lkey = reg->mrs[t]->lkey;
        if (ret_rkey)
                *ret_rkey = reg->remote ? reg->mrs[t]->rkey : 0;
        return 0;
}

struct RdmaMr {
        RdmaDevice *dev;
        struct ibv_mr *mr;
};

int rdma_mr_register(RdmaDevice *dev, void *addr, size_t len, bool remote_write, RdmaMr **ret)
{
        /* Remote write needs local write; a WRITE's source needs neither. */
        int access = remote_write ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
        usec_t t0 = now_usec(CLOCK_MONOTONIC);
        RdmaMr *mr;

        if (!rdma_device_usable(dev) || len == 0)
                return -EINVAL;
        mr = calloc(1, sizeof(*mr));
        if (!mr)
                return -ENOMEM;
        mr->dev = dev;
        mr->mr = ibv_reg_mr(dev->pd, addr, len, access);
        if (!mr->mr) {
                int r = errno ? -errno : -EIO;

                free(mr);
                return r;
        }
        dev->mrs++;
        dev->mr_bytes += len;
        dev->reg_usec += now_usec(CLOCK_MONOTONIC) - t0;
        dev->reg_count++;
        *ret = mr;
        return 0;
}

RdmaMr *rdma_mr_free(RdmaMr *mr)
{
        int r;

        if (!mr)
                return NULL;
        mr->dev->mrs--;
        mr->dev->mr_bytes -= mr->mr->length;
        r = ibv_dereg_mr(mr->mr);
        if (r != 0)
                log_error("RDMA device %s: ibv_dereg_mr: %s, ignoring", mr->dev->name, strerror(r));
        free(mr);
        return NULL;
}

uint32_t rdma_mr_lkey(const RdmaMr *mr)
{
        return mr->mr->lkey;
}

uint32_t rdma_mr_rkey(const RdmaMr *mr)
{
        return mr->mr->rkey;
}

static void rdma_on_async(evutil_socket_t fd, short what, void *userdata)
{
        RdmaDevice *dev = userdata;
        struct ibv_async_event ev;

        while (ibv_get_async_event(dev->ibv, &ev) == 0) {
                enum ibv_event_type type = ev.event_type;

                ibv_ack_async_event(&ev);
                dev->async_events++;
                dev->last_async_event = ibv_event_type_str(type);
                log_warning("RDMA device %s: async event %s", dev->name, ibv_event_type_str(type));
                if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_DEVICE_FATAL) {
                        (void)ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
                        /* Every transfer on this device fails; the queue pairs go. */
                        rdma_device_fail_endpoints(dev, -ENETDOWN);
                } else if (type == IBV_EVENT_PORT_ACTIVE)
                        (void)ibv_query_port(dev->ibv, dev->port, &dev->port_attr);
        }
}
