/* SPDX-License-Identifier: MIT */
/* TransportSet: the transport layer's root: the transports and the RDMA devices. */
#include "common/log.h"
#include "daemon/memory/cache.h"
#include "daemon/transport/rdma.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

int transport_set_init(TransportSet *ts, Pool *pool)
{
        int r;

        r = transport_shm_new(ts, &ts->shm);
        if (r < 0)
                return log_error_errno(r, "cannot set up the shared-memory transport");
        r = transport_tcp_new(ts, &ts->tcp);
        if (r < 0)
                return log_error_errno(r, "cannot set up the TCP transport");
        r = rdma_context_new(ts, pool, &ts->rdma);
        if (r >= 0)
                r = transport_rdma_new(ts, &ts->rdma_transport);
        if (r < 0)
                return log_error_errno(r, "cannot set up the RDMA transport");
        return 0;
}

void transport_set_deinit(TransportSet *ts)
{
        ts->shm = transport_free(ts->shm);
        ts->tcp = transport_free(ts->tcp);
        ts->rdma_transport = transport_free(ts->rdma_transport);
        ts->rdma = rdma_context_free(ts->rdma);
}

const DeviceConfig *transport_set_find_device(const TransportSet *ts, int32_t device_id)
{
        return transport_config_find_device(ts->devices, ts->n_devices, device_id);
}

int transport_set_register_cache(TransportSet *ts, int32_t device_id, Cache *cache,
                                 const char **ret_name, bool *ret_required)
{
        const DeviceConfig *cfg = transport_set_find_device(ts, device_id);
        int r;

        /* Only the one-sided transport moves nothing but registered memory; shm and TCP read
         * and write through the daemon's mappings. */
        if (transport_device_info(ts->rdma_transport, device_id, NULL, NULL, NULL) < 0)
                return 0;
        r = transport_cache_register(ts->rdma_transport, device_id, cache,
                                     cache->remote_accessible);
        if (r >= 0)
                return 0;
        *ret_name = transport_name(ts->rdma_transport);
        *ret_required = cfg && cfg->transport == TRANSPORT_KIND_RDMA;
        return r;
}
