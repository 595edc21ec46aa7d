/* SPDX-License-Identifier: MIT */
/*
 * libkvdist caches: registering caches that live in kvd_mem_alloc() memory, allocating them
 * from the daemon's pool, and the keys that name them.
 */
#include <stdint.h>
#include <stdlib.h>

#include "client-lib/client.h"

int cache_key_to_pb(const kvd_cache_key *key, KeyStorage *s, const char *what, Error *err)
{
        kvdist__v1__cache_key__init(&s->key);

        switch (key->kind) {
        case KVD_KEY_REQ:
                kvdist__v1__req_key__init(&s->req);
                s->req.cluster_id = key->cluster_id;
                s->req.req_id = key->req_id;
                s->req.prefix_id = key->prefix_id;
                s->req.model_id = key->model_id;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
                s->key.req = &s->req;
                break;
        case KVD_KEY_ID_INDEX:
                kvdist__v1__id_index_key__init(&s->id_index);
                s->id_index.cluster_id = key->cluster_id;
                s->id_index.cache_id = key->cache_id;
                s->id_index.batch_index = key->batch_index;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_ID_INDEX;
                s->key.id_index = &s->id_index;
                break;
        case KVD_KEY_BLOCKS:
                kvdist__v1__blocks_key__init(&s->blocks);
                s->blocks.cluster_id = key->cluster_id;
                s->blocks.model_id = key->model_id;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
                s->key.blocks = &s->blocks;
                break;
        default:
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%s has kind %d, not KVD_KEY_REQ, KVD_KEY_ID_INDEX or "
                                 "KVD_KEY_BLOCKS",
                                 what, (int)key->kind);
        }
        return KVD_OK;
}

static const uint8_t dtype_size[_KVD_DT_MAX] = {
        [KVD_DT_FLOAT] = 4,  [KVD_DT_FLOAT16] = 2, [KVD_DT_BF16] = 2,   [KVD_DT_INT8] = 1,
        [KVD_DT_INT16] = 2,  [KVD_DT_UINT16] = 2,  [KVD_DT_UINT8] = 1,  [KVD_DT_INT32] = 4,
        [KVD_DT_INT64] = 8,  [KVD_DT_UINT32] = 4,  [KVD_DT_UINT64] = 8, [KVD_DT_BOOL] = 1,
        [KVD_DT_DOUBLE] = 8,
};

/*
 * Checks what is obviously wrong with @desc and points @out at it (@out borrows desc->shape).
 * *@ret_tensor_size (may be NULL) receives the bytes of one tensor.
 */
static int desc_to_pb(const kvd_cache_desc *desc, Kvdist__V1__CacheDesc *out,
                      uint64_t *ret_tensor_size, Error *err)
{
        uint64_t size;

        if (!desc)
                return error_set(err, KVD_E_PARAM_INVALID, "desc is NULL");
        if (desc->num_tensors == 0 || desc->num_tensors > KVD_MAX_TENSORS)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "desc->num_tensors is %u, not in [1, %d]", desc->num_tensors,
                                 KVD_MAX_TENSORS);
        if (desc->n_dims == 0 || desc->n_dims > KVD_MAX_DIMS)
                return error_set(err, KVD_E_PARAM_INVALID, "desc->n_dims is %u, not in [1, %d]",
                                 desc->n_dims, KVD_MAX_DIMS);
        if ((int)desc->data_type < 0 || desc->data_type >= _KVD_DT_MAX)
                return error_set(err, KVD_E_PARAM_INVALID, "desc->data_type %d is unknown",
                                 (int)desc->data_type);

        size = dtype_size[desc->data_type];
        for (uint32_t i = 0; i < desc->n_dims; i++) {
                if (desc->shape[i] <= 0)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "desc->shape[%u] is %lld, not positive", i,
                                         (long long)desc->shape[i]);
                if (MUL_OVERFLOW(size, (uint64_t)desc->shape[i], &size))
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "desc->shape describes more than 2^64 bytes");
        }

        kvdist__v1__cache_desc__init(out);
        out->num_tensors = desc->num_tensors;
        out->n_shape = desc->n_dims;
        out->shape = (int64_t *)desc->shape;
        out->data_type = (uint32_t)desc->data_type;
        if (ret_tensor_size)
                *ret_tensor_size = size;
        return KVD_OK;
}

/* The keys of one request, converted; freed with keys_free(). */
typedef struct Keys {
        KeyStorage *storage;
        Kvdist__V1__CacheKey **ptrs;
        size_t n;
} Keys;

static void keys_free(Keys *k)
{
        free(k->storage);
        free(k->ptrs);
}

/* Converts @keys, each of which must be of @kind. */
static int keys_to_pb(const kvd_cache_key *keys, size_t n, kvd_key_kind kind, const char *name,
                      Keys *ret, Error *err)
{
        Keys k = {.n = n};
        int r;

        if (n == 0)
                goto done;
        if (!keys)
                return error_set(err, KVD_E_PARAM_INVALID, "%s is NULL but %zu keys are given",
                                 name, n);

        k.storage = calloc(n, sizeof(*k.storage));
        k.ptrs = calloc(n, sizeof(*k.ptrs));
        if (!k.storage || !k.ptrs) {
                keys_free(&k);
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        }

        for (size_t i = 0; i < n; i++) {
                if (keys[i].kind != kind) {
                        keys_free(&k);
                        if (kind == KVD_KEY_BLOCKS)
                                return error_set(err, KVD_E_PARAM_INVALID,
                                                 "%s is not a KVD_KEY_BLOCKS key", name);
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "%s[%zu] is not a KVD_KEY_REQ key", name, i);
                }
                r = cache_key_to_pb(&keys[i], &k.storage[i], name, err);
                if (r < 0) {
                        keys_free(&k);
                        return r;
                }
                k.ptrs[i] = &k.storage[i].key;
        }

done:
        *ret = k;
        return KVD_OK;
}

static int register_cache(kvd_client *c, const kvd_cache_desc *desc, void *const *addrs,
                          size_t n_addrs, const kvd_cache_key *keys, size_t n_keys, bool blocks,
                          kvd_remote_access access, uint64_t *ret_cache_id, Error *err)
{
        Kvdist__V1__RegisterCache reg = KVDIST__V1__REGISTER_CACHE__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        _cleanup_free_ uint64_t *a = NULL;
        Kvdist__V1__CacheDesc d;
        Keys k = {};
        int r;

        r = desc_to_pb(desc, &d, NULL, err);
        if (r < 0)
                return r;
        if (!addrs)
                return error_set(err, KVD_E_PARAM_INVALID, "addrs is NULL");
        if (n_addrs != desc->num_tensors)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "n_addrs is %zu but desc->num_tensors is %u", n_addrs,
                                 desc->num_tensors);
        for (size_t i = 0; i < n_addrs; i++)
                if (!addrs[i])
                        return error_set(err, KVD_E_PARAM_INVALID, "addrs[%zu] is NULL", i);
        if (!blocks && n_keys > (uint64_t)desc->shape[0])
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%zu keys for a batch of %lld (one key per batch slot)", n_keys,
                                 (long long)desc->shape[0]);
        if ((int)access < KVD_REMOTE_DEFAULT || access > KVD_REMOTE_NO)
                return error_set(err, KVD_E_PARAM_INVALID, "access %d is unknown", (int)access);
        if (!ret_cache_id)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_cache_id is NULL");

        a = calloc(n_addrs, sizeof(*a));
        if (!a)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n_addrs; i++)
                a[i] = (uint64_t)(uintptr_t)addrs[i];

        r = keys_to_pb(keys, n_keys, blocks ? KVD_KEY_BLOCKS : KVD_KEY_REQ,
                       blocks ? "blocks_key" : "keys", &k, err);
        if (r < 0)
                return r;

        reg.desc = &d;
        reg.n_addrs = n_addrs;
        reg.addrs = a;
        reg.blocks = blocks;
        reg.n_keys = k.n;
        reg.keys = k.ptrs;
        reg.remote_access = (Kvdist__V1__RemoteAccess)access;

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_REGISTER_CACHE, &reg.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        keys_free(&k);
        if (r < 0)
                return r;

        *ret_cache_id = ((const Kvdist__V1__RegisterCacheReply *)reply)->cache_id;
        return KVD_OK;
}

_public_ int kvd_register_cache(kvd_client *client, const kvd_cache_desc *desc, void *const *addrs,
                                size_t n_addrs, const kvd_cache_key *keys, size_t n_keys,
                                kvd_remote_access access, uint64_t *ret_cache_id)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = register_cache(client, desc, addrs, n_addrs, keys, n_keys, false, access,
                                   ret_cache_id, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_register_blocks_cache(kvd_client *client, const kvd_cache_desc *desc,
                                       void *const *addrs, size_t n_addrs,
                                       const kvd_cache_key *blocks_key, kvd_remote_access access,
                                       uint64_t *ret_cache_id)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = register_cache(client, desc, addrs, n_addrs, blocks_key, blocks_key ? 1 : 0,
                                   true, access, ret_cache_id, &err);
        return client_return(client, &err, r);
}

/* Best effort, for a reply this library cannot use: the daemon must not keep the cache. */
static void cache_deallocate_quietly(kvd_client *c, uint64_t cache_id)
{
        Kvdist__V1__DeallocateCache dealloc = KVDIST__V1__DEALLOCATE_CACHE__INIT;
        Error ignored = ERROR_INIT;

        dealloc.cache_id = cache_id;
        (void)conn_call(c, KVDIST__V1__MSG_TYPE__MSG_DEALLOCATE_CACHE, &dealloc.base, NULL, 0,
                        CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &ignored);
}

static int allocate_cache(kvd_client *c, const kvd_cache_desc *desc, const kvd_cache_key *keys,
                          size_t n_keys, bool blocks, uint64_t *ret_cache_id, void **ret_addrs,
                          Error *err)
{
        Kvdist__V1__AllocateCache alloc = KVDIST__V1__ALLOCATE_CACHE__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const Kvdist__V1__AllocateCacheReply *ar;
        Kvdist__V1__CacheDesc d;
        uint64_t tensor_size;
        Keys k = {};
        int r;

        r = desc_to_pb(desc, &d, &tensor_size, err);
        if (r < 0)
                return r;
        if (!blocks && n_keys > (uint64_t)desc->shape[0])
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%zu keys for a batch of %lld (one key per batch slot)", n_keys,
                                 (long long)desc->shape[0]);
        if (!ret_cache_id)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_cache_id is NULL");

        /* Mapped first, so that a pool we cannot map leaves no cache behind. */
        r = memory_map_pool(c, err);
        if (r < 0)
                return r;

        r = keys_to_pb(keys, n_keys, blocks ? KVD_KEY_BLOCKS : KVD_KEY_REQ,
                       blocks ? "blocks_key" : "keys", &k, err);
        if (r < 0)
                return r;

        alloc.desc = &d;
        alloc.blocks = blocks;
        alloc.n_keys = k.n;
        alloc.keys = k.ptrs;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_ALLOCATE_CACHE, &alloc.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        keys_free(&k);
        if (r < 0)
                return r;

        ar = (const Kvdist__V1__AllocateCacheReply *)reply;
        if (ar->n_pool_offsets != desc->num_tensors) {
                cache_deallocate_quietly(c, ar->cache_id);
                return error_set(err, KVD_E_FAILED,
                                 "kvdistd returned %zu pool offsets for %u tensors",
                                 ar->n_pool_offsets, desc->num_tensors);
        }
        for (size_t i = 0; i < ar->n_pool_offsets; i++)
                if (ar->pool_offsets[i] > c->pool_size ||
                    tensor_size > c->pool_size - ar->pool_offsets[i]) {
                        cache_deallocate_quietly(c, ar->cache_id);
                        return error_set(err, KVD_E_FAILED,
                                         "kvdistd placed tensor %zu at pool offset %llu, outside "
                                         "the %zu byte pool",
                                         i, (unsigned long long)ar->pool_offsets[i], c->pool_size);
                }

        if (ret_addrs)
                for (size_t i = 0; i < ar->n_pool_offsets; i++)
                        ret_addrs[i] = (uint8_t *)c->pool_base + ar->pool_offsets[i];
        *ret_cache_id = ar->cache_id;
        return KVD_OK;
}

_public_ int kvd_allocate_cache(kvd_client *client, const kvd_cache_desc *desc,
                                const kvd_cache_key *keys, size_t n_keys, uint64_t *ret_cache_id,
                                void **ret_addrs)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = allocate_cache(client, desc, keys, n_keys, false, ret_cache_id, ret_addrs,
                                   &err);
        return client_return(client, &err, r);
}

_public_ int kvd_allocate_blocks_cache(kvd_client *client, const kvd_cache_desc *desc,
                                       const kvd_cache_key *blocks_key, uint64_t *ret_cache_id,
                                       void **ret_addrs)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = allocate_cache(client, desc, blocks_key, blocks_key ? 1 : 0, true, ret_cache_id,
                                   ret_addrs, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_unregister_cache(kvd_client *client, uint64_t cache_id)
{
        Kvdist__V1__UnregisterCache unreg = KVDIST__V1__UNREGISTER_CACHE__INIT;
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else {
                unreg.cache_id = cache_id;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_UNREGISTER_CACHE, &unreg.base, NULL,
                              0, CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
        }
        return client_return(client, &err, r);
}

_public_ int kvd_deallocate_cache(kvd_client *client, uint64_t cache_id)
{
        Kvdist__V1__DeallocateCache dealloc = KVDIST__V1__DEALLOCATE_CACHE__INIT;
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else {
                dealloc.cache_id = cache_id;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_DEALLOCATE_CACHE, &dealloc.base,
                              NULL, 0, CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
        }
        return client_return(client, &err, r);
}

_public_ int kvd_remove_cache_key(kvd_client *client, const kvd_cache_key *key)
{
        Kvdist__V1__RemoveCacheKey rm = KVDIST__V1__REMOVE_CACHE_KEY__INIT;
        Error err = ERROR_INIT;
        KeyStorage ks;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else if (!key)
                r = error_set(&err, KVD_E_PARAM_INVALID, "key is NULL");
        else {
                r = cache_key_to_pb(key, &ks, "key", &err);
                if (r == KVD_OK) {
                        rm.key = &ks.key;
                        r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_REMOVE_CACHE_KEY, &rm.base,
                                      NULL, 0, CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
                }
        }
        return client_return(client, &err, r);
}
