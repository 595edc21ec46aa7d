/* SPDX-License-Identifier: MIT */
/* Cache: descriptor validation, construction and cache keys. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/memory/cache.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"
#include "common/status.h"

static const unsigned dtype_sizes[_KVD_DT_MAX] = {
        [KVD_DT_FLOAT] = 4,  [KVD_DT_FLOAT16] = 2, [KVD_DT_BF16] = 2,   [KVD_DT_INT8] = 1,
        [KVD_DT_INT16] = 2,  [KVD_DT_UINT16] = 2,  [KVD_DT_UINT8] = 1,  [KVD_DT_INT32] = 4,
        [KVD_DT_INT64] = 8,  [KVD_DT_UINT32] = 4,  [KVD_DT_UINT64] = 8, [KVD_DT_BOOL] = 1,
        [KVD_DT_DOUBLE] = 8,
};

unsigned cache_dtype_size(uint32_t data_type)
{
        if (data_type >= ARRAY_SIZE(dtype_sizes))
                return 0;
        return dtype_sizes[data_type];
}

int cache_desc_validate(const CacheDesc *desc, uint64_t *ret_tensor_size, Error *err)
{
        uint64_t size, total;
        unsigned elem;

        assert(desc);

        if (desc->num_tensors == 0)
                return error_set(err, STATUS_PARAM_INVALID, "desc.num_tensors=0 must be positive");
        if (desc->num_tensors > KVD_MAX_TENSORS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "desc.num_tensors=%" PRIu32 " exceeds %d", desc->num_tensors,
                                 KVD_MAX_TENSORS);
        if (desc->n_dims == 0 || desc->n_dims > CACHE_MAX_DIMS)
                return error_set(err, STATUS_PARAM_INVALID, "desc.n_dims=%" PRIu32 " must be 1..%d",
                                 desc->n_dims, CACHE_MAX_DIMS);

        elem = cache_dtype_size(desc->data_type);
        if (elem == 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "desc.data_type=%" PRIu32 " is not a known data type",
                                 desc->data_type);

        size = elem;
        for (uint32_t i = 0; i < desc->n_dims; i++) {
                if (desc->shape[i] <= 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "desc.shape[%" PRIu32 "]=%" PRId64 " must be positive", i,
                                         desc->shape[i]);
                if (MUL_OVERFLOW(size, (uint64_t)desc->shape[i], &size))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "desc.shape[%" PRIu32 "]=%" PRId64
                                         " makes the tensor size overflow",
                                         i, desc->shape[i]);
        }

        /* Callers size pool allocations as num_tensors * tensor size. */
        if (MUL_OVERFLOW(size, (uint64_t)desc->num_tensors, &total))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "desc.num_tensors=%" PRIu32 " of %" PRIu64 " bytes each overflows",
                                 desc->num_tensors, size);

        /* Always true while the size is the product of the shape; kept as the contract says. */
        if (size % (uint64_t)desc->shape[0] != 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "desc.shape[0]=%" PRId64
                                 " does not divide the tensor size %" PRIu64,
                                 desc->shape[0], size);

        if (ret_tensor_size)
                *ret_tensor_size = size;
        return STATUS_OK;
}

int cache_new(CacheKind kind, const CacheDesc *desc, const CacheTensor *tensors, Cache **ret)
{
        Cache *cache;
        uint64_t tensor_size;

        assert(desc);
        assert(tensors);
        assert(ret);

        if (kind != CACHE_CONTIGUOUS && kind != CACHE_BLOCKS)
                return -EINVAL;
        if (cache_desc_validate(desc, &tensor_size, NULL) != STATUS_OK)
                return -EINVAL;

        cache = calloc(1, offsetof(Cache, tensors) + desc->num_tensors * sizeof(CacheTensor));
        if (!cache)
                return -ENOMEM;

        cache->kind = kind;
        cache->desc = *desc;
        cache->tensor_size = tensor_size;
        cache->units = (uint64_t)desc->shape[0];
        cache->stride = tensor_size / cache->units;
        clist_init(&cache->link_table);
        for (uint32_t i = 0; i < desc->num_tensors; i++) {
                cache->tensors[i].region = region_ref(tensors[i].region);
                cache->tensors[i].offset = tensors[i].offset;
        }

        *ret = cache;
        return 0;
}

Cache *cache_free(Cache *cache)
{
        if (!cache)
                return NULL;
        /* Registrations before the mappings they cover can go. */
        if (cache->regs_free)
                cache->regs_free(cache->regs);
        for (uint32_t i = 0; i < cache->desc.num_tensors; i++)
                region_unref(cache->tensors[i].region);
        free(cache);
        return NULL;
}

int cache_check_reachable(const Cache *cache, uint64_t link_seq, uint64_t link_id, Error *err)
{
        assert(cache);

        /* Pool caches are allocated per request, long after the links that will read them: the
         * pool is configured before any link, so that is what a link is made after. */
        if (cache->pool_backed) {
                assert(cache->remote_accessible);
                return STATUS_OK;
        }
        if (cache->access == CACHE_ACCESS_NO)
                return error_set(err, STATUS_PERMISSION_DENIED,
                                 "cache %" PRIu64 " of cluster %" PRIu64 " is not remote-"
                                 "accessible (registered with KVD_REMOTE_NO)",
                                 cache->id, cache->owner_cluster_id);
        if (cache->seq > link_seq)
                return error_set(err, STATUS_PERMISSION_DENIED,
                                 "cache %" PRIu64 " of cluster %" PRIu64 " was registered after "
                                 "link %" PRIu64 " was made; memory must be registered before "
                                 "the link that reaches it (or allocated from the pool)",
                                 cache->id, cache->owner_cluster_id, link_id);
        if (!cache->remote_accessible)
                return error_set(
                        err, STATUS_PERMISSION_DENIED,
                        "cache %" PRIu64 " of cluster %" PRIu64 " is not remote-"
                        "accessible (registered with KVD_REMOTE_DEFAULT while cluster %" PRIu64
                        " had links)",
                        cache->id, cache->owner_cluster_id, cache->owner_cluster_id);
        return STATUS_OK;
}

bool cache_key_equal(const CacheKey *a, const CacheKey *b)
{
        assert(a);
        assert(b);

        if (a->kind != b->kind || a->cluster_id != b->cluster_id)
                return false;

        switch (a->kind) {
        case CACHE_KEY_REQ:
                return a->req_id == b->req_id && a->prefix_id == b->prefix_id &&
                       a->model_id == b->model_id;
        case CACHE_KEY_ID_INDEX:
                return a->cache_id == b->cache_id && a->batch_index == b->batch_index;
        case CACHE_KEY_BLOCKS:
                return a->model_id == b->model_id;
        }
        /* An unknown kind: equal only when every field is. */
        return a->req_id == b->req_id && a->prefix_id == b->prefix_id &&
               a->model_id == b->model_id && a->cache_id == b->cache_id &&
               a->batch_index == b->batch_index;
}

const char *cache_key_to_string(const CacheKey *key, char *buf, size_t size)
{
        assert(key);
        assert(buf);
        assert(size > 0);

        switch (key->kind) {
        case CACHE_KEY_REQ:
                if (key->req_id != CACHE_ID_NONE && key->prefix_id != CACHE_ID_NONE)
                        (void)snprintf(buf, size,
                                       "CacheKey{cluster %" PRIu64 ", req %" PRIu64
                                       ", prefix %" PRIu64 ", model %" PRIu64 "}",
                                       key->cluster_id, key->req_id, key->prefix_id, key->model_id);
                else if (key->req_id != CACHE_ID_NONE)
                        (void)snprintf(buf, size,
                                       "CacheKey{cluster %" PRIu64 ", req %" PRIu64
                                       ", model %" PRIu64 "}",
                                       key->cluster_id, key->req_id, key->model_id);
                else if (key->prefix_id != CACHE_ID_NONE)
                        (void)snprintf(buf, size,
                                       "CacheKey{cluster %" PRIu64 ", prefix %" PRIu64
                                       ", model %" PRIu64 "}",
                                       key->cluster_id, key->prefix_id, key->model_id);
                else
                        (void)snprintf(buf, size,
                                       "CacheKey{cluster %" PRIu64 ", empty, model %" PRIu64 "}",
                                       key->cluster_id, key->model_id);
                break;
        case CACHE_KEY_ID_INDEX:
                (void)snprintf(buf, size,
                               "CacheKeyByIdAndIndex{cluster %" PRIu64 ", cache %" PRIu64
                               ", index %" PRIu32 "}",
                               key->cluster_id, key->cache_id, key->batch_index);
                break;
        case CACHE_KEY_BLOCKS:
                (void)snprintf(buf, size, "BlocksCacheKey{cluster %" PRIu64 ", model %" PRIu64 "}",
                               key->cluster_id, key->model_id);
                break;
        default:
                (void)snprintf(buf, size, "CacheKey{kind %d}", (int)key->kind);
                break;
        }
        return buf;
}
