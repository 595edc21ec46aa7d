/* SPDX-License-Identifier: MIT */
/* RDMA transport, built without libibverbs: no devices, and every operation says so. */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/rdma.h"

struct RdmaContext {
        TransportSet *set;
};

int rdma_context_new(TransportSet *ts, Pool *pool, RdmaContext **ret)
{
        RdmaContext *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        c->set = ts;
        *ret = c;
        return 0;
}

RdmaContext *rdma_context_free(RdmaContext *c)
{
        free(c);
        return NULL;
}

RdmaDevice *rdma_device_for(RdmaContext *c, int32_t device_id, const char **ret_reason)
{
        *ret_reason = "this kvdistd was built without libibverbs";
        return NULL;
}

RdmaDevice *rdma_device_find(RdmaContext *c, const char *name)
{
        return NULL;
}

bool rdma_device_usable(const RdmaDevice *dev)
{
        return false;
}

void rdma_device_get_info(const RdmaDevice *dev, RdmaDeviceInfo *ret)
{
        *ret = (RdmaDeviceInfo){0};
}

void rdma_context_foreach_device(RdmaContext *c, void (*fn)(const RdmaDevice *dev, void *ud),
                                 void *userdata)
{
}

void rdma_device_get_status(const RdmaDevice *dev, RdmaDeviceStatus *ret)
{
        *ret = (RdmaDeviceStatus){0};
}

int rdma_cache_register(RdmaDevice *dev, Cache *cache, bool remote)
{
        return -EOPNOTSUPP;
}

bool rdma_cache_registered(const Cache *cache, bool remote)
{
        return false;
}

int rdma_cache_tensor(const Cache *cache, uint32_t t, uint64_t *ret_addr, uint32_t *ret_lkey,
                      uint32_t *ret_rkey)
{
        return -EOPNOTSUPP;
}

int rdma_mr_register(RdmaDevice *dev, void *addr, size_t len, bool remote_write, RdmaMr **ret)
{
        return -EOPNOTSUPP;
}

RdmaMr *rdma_mr_free(RdmaMr *mr)
{
        return NULL;
}

uint32_t rdma_mr_lkey(const RdmaMr *mr)
{
        return 0;
}

uint32_t rdma_mr_rkey(const RdmaMr *mr)
{
        return 0;
}

int rdma_endpoint_new(RdmaDevice *dev, uint64_t id, bool initiator, const RdmaDeviceInfo *remote,
                      unsigned n_slots, RdmaEndpoint **ret)
{
        return -EOPNOTSUPP;
}

RdmaEndpoint *rdma_endpoint_free(RdmaEndpoint *ep)
{
        return NULL;
}

int rdma_endpoint_slot_local(RdmaEndpoint *ep, unsigned slot, uint32_t *ret_qpn, uint32_t *ret_psn)
{
        return -EOPNOTSUPP;
}

int rdma_endpoint_slot_connect(RdmaEndpoint *ep, unsigned slot, uint32_t qpn, uint32_t psn)
{
        return -EOPNOTSUPP;
}

uint64_t rdma_endpoint_id(const RdmaEndpoint *ep)
{
        return 0;
}

bool rdma_endpoint_initiator(const RdmaEndpoint *ep)
{
        return false;
}

RdmaDevice *rdma_endpoint_device(const RdmaEndpoint *ep)
{
        return NULL;
}

const char *rdma_endpoint_remote_device(const RdmaEndpoint *ep)
{
        return "";
}

unsigned rdma_endpoint_n_slots(const RdmaEndpoint *ep)
{
        return 0;
}

bool rdma_endpoint_ready(const RdmaEndpoint *ep)
{
        return false;
}

uint32_t rdma_endpoint_broken_slots(const RdmaEndpoint *ep)
{
        return 0;
}

int rdma_job_submit(RdmaEndpoint *ep, bool read, const RdmaSegment *segs, size_t n,
                    rdma_done_fn done, void *userdata, RdmaJob **ret)
{
        return -EOPNOTSUPP;
}

void rdma_job_cancel(RdmaJob *job)
{
}

uint64_t rdma_job_bytes_done(const RdmaJob *job)
{
        return 0;
}

void rdma_endpoint_get_stats(const RdmaEndpoint *ep, RdmaEndpointStats *ret)
{
        *ret = (RdmaEndpointStats){0};
}
