/* SPDX-License-Identifier: MIT */
/* TransportSet: the transport layer's root: the transports and the RDMA devices. */
#include "common/log.h"
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
