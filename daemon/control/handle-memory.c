/* SPDX-License-Identifier: MIT */
/* Handlers: shared regions, the pool, caches and cache keys. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "daemon/domain/domain.h"
#include "daemon/link/peer-cache-key.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/memory/pool.h"
#include "daemon/memory/region.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

static int cache_desc_from_proto(const Kvdist__V1__CacheDesc *m, CacheDesc *ret,
                                 uint64_t *ret_tensor_size, Error *err)
{
        CacheDesc desc = {0};
        int r;

        if (!m)
                return error_set(err, STATUS_PARAM_INVALID, "the cache descriptor is missing");
        if (m->n_shape == 0 || m->n_shape > CACHE_MAX_DIMS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "desc.shape has %zu dimensions, it takes 1 to %d", m->n_shape,
                                 CACHE_MAX_DIMS);
        desc.num_tensors = m->num_tensors;
        desc.n_dims = (uint32_t)m->n_shape;
        for (size_t i = 0; i < m->n_shape; i++)
                desc.shape[i] = m->shape[i];
        desc.data_type = m->data_type;
        r = cache_desc_validate(&desc, ret_tensor_size, err);
        if (r < 0)
                return r;
        *ret = desc;
        return 0;
}

/* Converts and checks the keys of a registration: REQ keys for contiguous caches, at most
 * one BLOCKS key for blocks caches. *@ret_keys is malloc()ed. */
static int cache_keys_from_proto(Cluster *c, Kvdist__V1__CacheKey *const *keys, size_t n,
                                 bool blocks, CacheKey **ret_keys, Error *err)
{
        _cleanup_free_ CacheKey *out = NULL;
        const Limits *lim = c->root->options.limits;
        int r;

        if (blocks && n > 1)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "a blocks cache takes at most one BlocksCacheKey, got %zu", n);
        if (c->caches.n_keys + n > lim->max_keys_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u cache keys, %zu more exceed "
                                 "limits.max_keys_per_client",
                                 c->id, c->caches.n_keys, n);
        out = calloc(n ? n : 1, sizeof(*out));
        if (!out)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
                r = peer_cache_key_from_proto(keys[i], &out[i], err);
                if (r < 0)
                        return r;
                if (blocks && out[i].kind != CACHE_KEY_BLOCKS)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "a blocks cache is named by a BlocksCacheKey");
                if (!blocks && out[i].kind != CACHE_KEY_REQ)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "keys[%zu]: a contiguous cache is named by CacheKeys "
                                         "(req_id or prefix_id)",
                                         i);
        }
        *ret_keys = TAKE_PTR(out);
        return 0;
}

/* Whether @c may add a cache of @num_tensors tensors (LLM-DataDist's 240-address limit). */
static int cluster_check_cache_quota(const Cluster *c, uint32_t num_tensors, Error *err)
{
        const Limits *lim = c->root->options.limits;

        if (c->caches.n_caches >= lim->max_caches_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u caches (limits.max_caches_per_"
                                 "client)",
                                 c->id, c->caches.n_caches);
        if (c->caches.n_addrs + num_tensors > lim->max_tensor_addrs)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "cluster %" PRIu64 " has %u tensor addresses registered, %" PRIu32
                                 " more exceed the limit of %" PRIu32,
                                 c->id, c->caches.n_addrs, num_tensors, lim->max_tensor_addrs);
        return 0;
}

static bool cluster_has_links(ControlRoot *root, const Cluster *c)
{
        return c->n_links > 0 || c->n_links_in > 0 || c->n_inlinks > 0 ||
               domain_cluster_has_domains(root->domains, c);
}

int handle_region_add(Request *req, Error *err)
{
        const Kvdist__V1__RegionAdd *m = (const Kvdist__V1__RegionAdd *)req->msg;
        Kvdist__V1__RegionAddReply reply = KVDIST__V1__REGION_ADD_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        ControlRoot *root = req->conn->root;
        Cluster *c = req->conn->cluster;
        const Limits *lim = root->options.limits;
        _cleanup_close_ int fd = -1;
        uint64_t end;
        Region *r, *other;
        int k;

        fd = conn_request_take_fd(req, 0);
        if (m->source == KVDIST__V1__REGION_SOURCE__REGION_SOURCE_DMABUF)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "dma-buf memory needs a transport that registers dma-bufs "
                                 "(ibv_reg_dmabuf_mr); this kvdistd has none");
        if (m->source != KVDIST__V1__REGION_SOURCE__REGION_SOURCE_LIBKVDIST &&
            m->source != KVDIST__V1__REGION_SOURCE__REGION_SOURCE_ENGINE)
                return error_set(err, STATUS_PARAM_INVALID, "region source %d is unknown",
                                 (int)m->source);
        if (fd < 0)
                return error_set(err, STATUS_PARAM_INVALID, "RegionAdd carries no memfd");
        if (m->size == 0 || m->size > lim->max_region_size)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "region size %" PRIu64 " is outside [1, %" PRIu64 "] "
                                 "(limits.max_region_size)",
                                 m->size, lim->max_region_size);
        if (m->client_addr == 0 || ADD_OVERFLOW(m->client_addr, m->size, &end))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "region address 0x%" PRIx64 " + %" PRIu64 " is not valid",
                                 m->client_addr, m->size);
        if (c->n_regions >= lim->max_regions_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u regions (limits.max_regions_per_"
                                 "client)",
                                 c->id, c->n_regions);
        CLIST_FOREACH (other, &c->regions, link_owner)
                if (m->client_addr < other->client_addr + other->size && other->client_addr < end)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "region 0x%" PRIx64 "+%" PRIu64
                                         " overlaps region %" PRIu64,
                                         m->client_addr, m->size, other->id);

        /* What the cluster's uid registered, all its clusters together. */
        k = user_check(c->user, USER_SLOT_REGIONS, 1, err);
        if (k >= 0)
                k = user_check(c->user, USER_SLOT_REGION_BYTES, m->size, err);
        if (k < 0)
                return k;

        k = region_new_from_fd(fd, m->file_offset, m->size, m->client_addr,
                               id_source_next(root->ids), &r);
        switch (k) {
        case 0:
                fd = -1; /* the region owns it */
                break;
        case -EPERM:
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the memfd must be sealed against shrinking (F_SEAL_SHRINK) "
                                 "and writable (no F_SEAL_WRITE)");
        case -EBADF:
                return error_set(err, STATUS_PARAM_INVALID, "the fd is not a memfd");
        case -EINVAL:
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the memfd is smaller than the %" PRIu64
                                 " bytes announced from offset %" PRIu64,
                                 m->size, m->file_offset);
        case -EDOM:
                return error_set(err, STATUS_PARAM_INVALID,
                                 "offset %" PRIu64 " into the memfd is not a multiple of "
                                 "its page size",
                                 m->file_offset);
        default:
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot map the region: %s",
                                 strerror(-k));
        }
        clist_link_tail(&c->regions, &r->link_owner);
        c->n_regions++;
        c->region_bytes += r->size;
        /* Checked above; cluster_free() releases what the cluster still holds. */
        user_charge_force(c->user, USER_SLOT_REGIONS, 1);
        user_charge_force(c->user, USER_SLOT_REGION_BYTES, r->size);
        log_debug("cluster %" PRIu64 ": region %" PRIu64 " of %" PRIu64 " bytes at 0x%" PRIx64,
                  c->id, r->id, r->size, r->client_addr);
        /* the first transfers then find its pages mapped; without, they fault on them */
        k = transport_set_warm_region(c->root->transports, r);
        if (k < 0)
                log_debug_errno(k, "region %" PRIu64 ": not mapped ahead: %m", r->id);

        reply.status = &status;
        reply.region_id = r->id;
        return conn_request_reply(req, &reply.base, -1), 0;
}

int handle_region_remove(Request *req, Error *err)
{
        const Kvdist__V1__RegionRemove *m = (const Kvdist__V1__RegionRemove *)req->msg;
        Cluster *c = req->conn->cluster;
        Cache *cache;
        Region *r;

        r = cluster_find_region(c, m->region_id);
        if (!r)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "region %" PRIu64 " is not one of "
                                 "cluster %" PRIu64 "'s",
                                 m->region_id, c->id);
        CLIST_FOREACH (cache, &c->caches.caches, link_table)
                for (uint32_t t = 0; t < cache->desc.num_tensors; t++)
                        if (cache->tensors[t].region == r)
                                return error_set(err, STATUS_BUSY,
                                                 "cache %" PRIu64 " lies in region %" PRIu64
                                                 "; unregister it first",
                                                 cache->id, r->id);
        c->n_regions--;
        c->region_bytes -= r->size;
        user_uncharge(c->user, USER_SLOT_REGIONS, 1);
        user_uncharge(c->user, USER_SLOT_REGION_BYTES, r->size);
        region_release(r);

        return conn_request_reply_ok(req), 0;
}

int handle_pool_map(Request *req, Error *err)
{
        Kvdist__V1__PoolMapReply reply = KVDIST__V1__POOL_MAP_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Pool *pool = req->conn->root->memory->pool;

        if (!pool)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "kvdistd runs without a memory pool (memory_size is 0)");
        reply.status = &status;
        reply.size = pool_size(pool);
        reply.page_shift = pool_page_shift(pool);
        return conn_request_reply(req, &reply.base, pool_region(pool)->fd), 0;
}

/*
 * Registers @cache's tensors with the transports that move only registered memory, for @c's
 * device. A failure refuses the cache when the device map asks for that transport, and is logged
 * otherwise (the others need no registration).
 */
static int cluster_register_cache(Cluster *c, Cache *cache, Error *err)
{
        const char *name = NULL;
        bool required = false;
        int r;

        r = transport_set_register_cache(c->root->transports, c->device_id, cache, &name,
                                         &required);
        if (r >= 0)
                return 0;
        if (required)
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "cannot register cache %" PRIu64 " for %s: %s (is "
                                 "LimitMEMLOCK high enough?)",
                                 cache->id, name, strerror(-r));
        log_warning("cluster %" PRIu64 ": cannot register cache %" PRIu64 " for %s: %s; it "
                    "moves by the other transports only",
                    c->id, cache->id, name, strerror(-r));
        return 0;
}

/* Adds a new cache to @c's table; on failure the cache is freed. */
static int cluster_add_cache(Cluster *c, Cache *cache, const CacheKey *keys, size_t n_keys,
                             bool hold_keys, Error *err)
{
        int r;

        r = cluster_register_cache(c, cache, err);
        if (r < 0) {
                cache_free(cache);
                return r;
        }
        r = cache_table_add(&c->caches, cache, keys, n_keys, hold_keys, err);
        if (r < 0) {
                cache_free(cache);
                return r;
        }
        log_debug("cluster %" PRIu64 ": cache %" PRIu64 " (%s, %" PRIu32 " tensors of %" PRIu64
                  " bytes, %zu keys)",
                  c->id, cache->id, cache->kind == CACHE_BLOCKS ? "blocks" : "contiguous",
                  cache->desc.num_tensors, cache->tensor_size, n_keys);
        return 0;
}

int handle_register_cache(Request *req, Error *err)
{
        const Kvdist__V1__RegisterCache *m = (const Kvdist__V1__RegisterCache *)req->msg;
        Kvdist__V1__RegisterCacheReply reply = KVDIST__V1__REGISTER_CACHE_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        ControlRoot *root = req->conn->root;
        Cluster *c = req->conn->cluster;
        _cleanup_free_ CacheTensor *tensors = NULL;
        _cleanup_free_ CacheKey *keys = NULL;
        uint64_t tensor_size;
        CacheAccess access;
        bool remote;
        CacheDesc desc;
        Cache *cache;
        int r;

        r = cache_desc_from_proto(m->desc, &desc, &tensor_size, err);
        if (r < 0)
                return r;
        if (m->n_addrs != desc.num_tensors)
                return error_set(err, STATUS_PARAM_INVALID, "%zu addresses for %" PRIu32 " tensors",
                                 m->n_addrs, desc.num_tensors);
        r = cluster_check_cache_quota(c, desc.num_tensors, err);
        if (r < 0)
                return r;

        switch (m->remote_access) {
        case KVDIST__V1__REMOTE_ACCESS__REMOTE_YES:
                if (cluster_has_links(root, c))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "remote_accessible cannot be set after a link exists: "
                                         "register caches before linking");
                access = CACHE_ACCESS_YES;
                remote = true;
                break;
        case KVDIST__V1__REMOTE_ACCESS__REMOTE_NO:
                access = CACHE_ACCESS_NO;
                remote = false;
                break;
        default:
                access = CACHE_ACCESS_DEFAULT;
                remote = !cluster_has_links(root, c);
                break;
        }

        tensors = calloc(desc.num_tensors, sizeof(*tensors));
        if (!tensors)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        for (uint32_t t = 0; t < desc.num_tensors; t++) {
                if (m->addrs[t] == 0)
                        return error_set(err, STATUS_PARAM_INVALID, "addrs[%" PRIu32 "] is 0", t);
                tensors[t].region =
                        region_find(&c->regions, m->addrs[t], tensor_size, &tensors[t].offset);
                if (!tensors[t].region)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "addrs[%" PRIu32 "]=0x%" PRIx64 ": its %" PRIu64
                                         " bytes are not inside memory shared with kvdistd; "
                                         "allocate it with kvd_mem_alloc(), register the "
                                         "memory with kvd_mem_register() or use "
                                         "kvd_allocate_cache()",
                                         t, m->addrs[t], tensor_size);
        }

        r = cache_keys_from_proto(c, m->keys, m->n_keys, m->blocks, &keys, err);
        if (r < 0)
                return r;
        r = cache_new(m->blocks ? CACHE_BLOCKS : CACHE_CONTIGUOUS, &desc, tensors, &cache);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        cache->id = cache_table_next_id(&c->caches);
        cache->owner_cluster_id = c->id;
        cache->remote_accessible = remote;
        cache->access = access;
        cache->seq = id_source_next_seq(root->ids);
        r = cluster_add_cache(c, cache, keys, m->n_keys, false, err);
        if (r < 0)
                return r;

        reply.status = &status;
        reply.cache_id = cache->id;
        return conn_request_reply(req, &reply.base, -1), 0;
}

int handle_unregister_cache(Request *req, Error *err)
{
        const Kvdist__V1__UnregisterCache *m = (const Kvdist__V1__UnregisterCache *)req->msg;
        Cluster *c = req->conn->cluster;
        Cache *dead = NULL;
        int r;

        r = cache_table_remove(&c->caches, m->cache_id, &dead, err);
        if (r < 0)
                return r;
        cluster_release_cache(c, dead);
        return conn_request_reply_ok(req), 0;
}

int handle_allocate_cache(Request *req, Error *err)
{
        const Kvdist__V1__AllocateCache *m = (const Kvdist__V1__AllocateCache *)req->msg;
        Kvdist__V1__AllocateCacheReply reply = KVDIST__V1__ALLOCATE_CACHE_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        ControlRoot *root = req->conn->root;
        Cluster *c = req->conn->cluster;
        Pool *pool = root->memory->pool;
        _cleanup_free_ CacheTensor *tensors = NULL;
        _cleanup_free_ CacheKey *keys = NULL;
        _cleanup_free_ uint64_t *offsets = NULL;
        uint64_t tensor_size, total, base;
        CacheDesc desc;
        Cache *cache;
        int r;

        if (!pool)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "kvdistd runs without a memory pool (memory_size is 0)");
        r = cache_desc_from_proto(m->desc, &desc, &tensor_size, err);
        if (r < 0)
                return r;
        r = cluster_check_cache_quota(c, desc.num_tensors, err);
        if (r < 0)
                return r;
        if (MUL_OVERFLOW(tensor_size, (uint64_t)desc.num_tensors, &total))
                return error_set(err, STATUS_PARAM_INVALID, "the cache size overflows");
        r = cache_keys_from_proto(c, m->keys, m->n_keys, m->blocks, &keys, err);
        if (r < 0)
                return r;

        r = pool_alloc(pool, total, &base);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "the pool cannot hold %" PRIu64 " bytes: %" PRIu64 " of %" PRIu64
                                 " used, largest free extent %" PRIu64,
                                 total, pool_used(pool), pool_size(pool), pool_largest_free(pool));

        tensors = calloc(desc.num_tensors, sizeof(*tensors));
        offsets = calloc(desc.num_tensors, sizeof(*offsets));
        if (!tensors || !offsets) {
                (void)pool_release(pool, base);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        for (uint32_t t = 0; t < desc.num_tensors; t++) {
                tensors[t].region = pool_region(pool);
                tensors[t].offset = offsets[t] = base + t * tensor_size;
        }
        r = cache_new(m->blocks ? CACHE_BLOCKS : CACHE_CONTIGUOUS, &desc, tensors, &cache);
        if (r < 0) {
                (void)pool_release(pool, base);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        cache->id = cache_table_next_id(&c->caches);
        cache->owner_cluster_id = c->id;
        cache->remote_accessible = true;
        cache->access = CACHE_ACCESS_YES;
        cache->seq = id_source_next_seq(root->ids);
        cache->pool_backed = true;
        cache->pool_offset = base;
        cache->id_held = true;
        r = cluster_add_cache(c, cache, keys, m->n_keys, true, err);
        if (r < 0) {
                (void)pool_release(pool, base);
                return r;
        }

        reply.status = &status;
        reply.cache_id = cache->id;
        reply.pool_offsets = offsets;
        reply.n_pool_offsets = desc.num_tensors;
        return conn_request_reply(req, &reply.base, -1), 0;
}

int handle_deallocate_cache(Request *req, Error *err)
{
        const Kvdist__V1__DeallocateCache *m = (const Kvdist__V1__DeallocateCache *)req->msg;
        Cluster *c = req->conn->cluster;
        Cache *dead = NULL;
        int r;

        r = cache_table_release_id(&c->caches, m->cache_id, &dead, err);
        if (r < 0)
                return r;
        cluster_release_cache(c, dead);
        return conn_request_reply_ok(req), 0;
}

int handle_remove_cache_key(Request *req, Error *err)
{
        const Kvdist__V1__RemoveCacheKey *m = (const Kvdist__V1__RemoveCacheKey *)req->msg;
        Cluster *c = req->conn->cluster;
        Cache *dead = NULL;
        CacheKey key;
        int r;

        r = peer_cache_key_from_proto(m->key, &key, err);
        if (r < 0)
                return r;
        /* Another cluster's key is never in this table: a mistake, not a key that is gone. */
        if (key.cluster_id != c->id && (key.kind == CACHE_KEY_REQ || key.kind == CACHE_KEY_BLOCKS))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the key names cluster %" PRIu64 "; cluster %" PRIu64
                                 " can remove only its own keys",
                                 key.cluster_id, c->id);
        r = cache_table_remove_key(&c->caches, &key, &dead, err);
        if (r < 0)
                return r;
        cluster_release_cache(c, dead);
        return conn_request_reply_ok(req), 0;
}
