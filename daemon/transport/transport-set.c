/* SPDX-License-Identifier: MIT */
/* TransportSet: the transport layer's root: the transports and the RDMA devices. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/macro.h"
#include "daemon/memory/cache.h"
#include "daemon/memory/region.h"
#include "daemon/transport/engine.h"
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

/* Bytes of a region mapped in one step: 512 pages, about 0.1-0.2 ms of a copy thread. */
#define WARM_STEP_BYTES ((uint64_t)2 << 20)

typedef struct RegionWarm {
        Region *region;  /* referenced */
        uint64_t offset; /* mapped up to here */
        int error;
} RegionWarm;

/* On a copy thread: maps the next step's pages of the region. */
static int warm_step(void *userdata)
{
        RegionWarm *w = userdata;
        Region *r = w->region;
        uint64_t len = MIN(WARM_STEP_BYTES, r->size - w->offset);
        int k;

        if (atomic_load(&r->released))
                return 0;
        k = region_map_resident(r, w->offset, len);
        if (k < 0) {
                w->error = k;
                return k;
        }
        w->offset += len;
        return w->offset < r->size;
}

/* On the loop: the last step is over; drops the region. */
static void warm_done(EngineTask *task, int status, void *userdata)
{
        RegionWarm *w = userdata;

        /* a kernel before 5.14 has no MADV_POPULATE_READ: the copies fault as they go */
        if (w->error < 0 && w->error != -EOPNOTSUPP)
                log_debug_errno(w->error, "region %" PRIu64 ": cannot map its pages ahead: %m",
                                w->region->id);
        else if (status == 0)
                log_debug("region %" PRIu64 ": %" PRIu64 " bytes looked at, held pages mapped",
                          w->region->id, w->offset);
        region_unref(w->region);
        free(w);
}

int transport_set_warm_region(TransportSet *ts, Region *r)
{
        RegionWarm *w;
        int k;

        assert(ts && r);
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->region = region_ref(r);
        k = engine_submit_background(ts->engine, warm_step, w, warm_done, w, NULL);
        if (k < 0) {
                region_unref(w->region);
                free(w);
        }
        return k;
}
