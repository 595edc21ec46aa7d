/* SPDX-License-Identifier: MIT */
/* TransportSet: the transport layer's root: the transports and the RDMA devices. */
#include <string.h>

#include "common/log.h"
#include "daemon/memory/cache.h"
#include "daemon/transport/rdma.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

int transport_set_init(TransportSet *ts, Pool *pool)
{
        int r;

        r = transport_shm_new(ts, &ts->table[TRANSPORT_ROLE_LOCAL]);
        if (r < 0)
                return log_error_errno(r, "cannot set up the shared-memory transport");
        r = transport_tcp_new(ts, &ts->table[TRANSPORT_ROLE_STREAM]);
        if (r < 0)
                return log_error_errno(r, "cannot set up the TCP transport");
        r = rdma_context_new(ts, pool, &ts->rdma);
        if (r >= 0)
                r = transport_rdma_new(ts, &ts->table[TRANSPORT_ROLE_DIRECT]);
        if (r < 0)
                return log_error_errno(r, "cannot set up the RDMA transport");
        return 0;
}

void transport_set_deinit(TransportSet *ts)
{
        for (size_t i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                ts->table[i] = transport_free(ts->table[i]);
        ts->rdma = rdma_context_free(ts->rdma);
}

const DeviceConfig *transport_set_find_device(const TransportSet *ts, int32_t device_id)
{
        return transport_config_find_device(ts->devices, ts->n_devices, device_id);
}

Transport *transport_set_configured(const TransportSet *ts, int32_t device_id)
{
        const DeviceConfig *cfg = transport_set_find_device(ts, device_id);

        if (!cfg || cfg->transport == TRANSPORT_KIND_AUTO)
                return NULL;
        for (size_t i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                if (ts->table[i] && strcmp(transport_name(ts->table[i]),
                                           transport_kind_to_string(cfg->transport)) == 0)
                        return ts->table[i];
        return NULL;
}

int transport_set_register_cache(TransportSet *ts, int32_t device_id, Cache *cache,
                                 const char **ret_name, bool *ret_required)
{
        for (size_t i = 0; i < _TRANSPORT_ROLE_MAX; i++) {
                Transport *t = ts->table[i];
                int r;

                /* Only a transport that moves nothing but memory registered with it needs the
                 * cache; the others read and write through the daemon's mappings. */
                if (!t || !transport_caps(t)->registers ||
                    transport_device_info(t, device_id, NULL, NULL, NULL) < 0)
                        continue;
                r = transport_cache_register(t, device_id, cache, cache->remote_accessible);
                if (r >= 0)
                        continue;
                *ret_name = transport_name(t);
                *ret_required = transport_set_configured(ts, device_id) == t;
                return r;
        }
        return 0;
}
