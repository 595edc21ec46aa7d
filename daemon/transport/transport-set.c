/* SPDX-License-Identifier: MIT */
/* TransportSet: the transport layer's root: the transports and the RDMA devices. */
#include <assert.h>
#include <string.h>

#include "common/log.h"
#include "common/macro.h"
#include "daemon/memory/cache.h"
#include "daemon/transport/rdma.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

/* Builds a transport with @new into @ts, and into its table as @role unless @role is < 0. */
static int transport_set_add(TransportSet *ts, int (*new)(TransportSet *, Transport **), int role)
{
        Transport *t;
        int r;

        assert(ts->n_all < ARRAY_SIZE(ts->all));
        r = new (ts, &t);
        if (r < 0)
                return r;
        ts->all[ts->n_all++] = t;
        if (role >= 0)
                ts->table[role] = t;
        return 0;
}

int transport_set_init(TransportSet *ts, Pool *pool)
{
        int r;

        r = transport_set_add(ts, transport_shm_new, TRANSPORT_ROLE_LOCAL);
        if (r < 0)
                return log_error_errno(r, "cannot set up the shared-memory transport");
        r = transport_set_add(ts, transport_tcp_new, TRANSPORT_ROLE_STREAM);
        if (r < 0)
                return log_error_errno(r, "cannot set up the TCP transport");
        r = rdma_context_new(ts, pool, &ts->rdma);
        if (r >= 0)
                r = transport_set_add(ts, transport_rdma_new, TRANSPORT_ROLE_DIRECT);
        if (r < 0)
                return log_error_errno(r, "cannot set up the RDMA transport");
        r = transport_set_add(ts, transport_null_new, -1);
        if (r < 0)
                return log_error_errno(r, "cannot set up the null transport");
        return 0;
}

void transport_set_deinit(TransportSet *ts)
{
        while (ts->n_all > 0) {
                Transport *t = ts->all[--ts->n_all];

                for (size_t i = 0; i < _TRANSPORT_ROLE_MAX; i++)
                        if (ts->table[i] == t)
                                ts->table[i] = NULL;
                ts->all[ts->n_all] = transport_free(t);
        }
        ts->rdma = rdma_context_free(ts->rdma);
}

const DeviceConfig *transport_set_find_device(const TransportSet *ts, int32_t device_id)
{
        return transport_config_find_device(ts->devices, ts->n_devices, device_id);
}

TransportStreamTerms transport_set_stream_terms(const TransportSet *ts)
{
        return (TransportStreamTerms){
                .conns = ts->tcp_config->streams,
                .crc = ts->tcp_config->crc,
                .chunk_size = ts->tcp_config->chunk_size,
        };
}

Transport *transport_set_configured(const TransportSet *ts, int32_t device_id)
{
        const DeviceConfig *cfg = transport_set_find_device(ts, device_id);

        if (!cfg || cfg->transport == TRANSPORT_KIND_AUTO)
                return NULL;
        for (size_t i = 0; i < ts->n_all; i++)
                if (strcmp(transport_name(ts->all[i]), transport_kind_to_string(cfg->transport)) ==
                    0)
                        return ts->all[i];
        return NULL;
}

int transport_set_register_cache(TransportSet *ts, int32_t device_id, Cache *cache,
                                 const char **ret_name, bool *ret_required)
{
        for (size_t i = 0; i < ts->n_all; i++) {
                Transport *t = ts->all[i];
                int r;

                /* Only a transport that moves nothing but memory registered with it needs the
                 * cache; the others read and write through the daemon's mappings. */
                if (!transport_caps(t)->registers ||
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
