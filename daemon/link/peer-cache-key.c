/* SPDX-License-Identifier: MIT */
/* Cache keys between their wire form and memory/'s CacheKey (see peer-cache-key.h). */
#include "daemon/link/peer-cache-key.h"
#include "common/status.h"

int peer_cache_key_from_proto(const Kvdist__V1__CacheKey *k, CacheKey *ret, Error *err)
{
        CacheKey key = {0};

        if (!k)
                return error_set(err, STATUS_PARAM_INVALID, "a cache key is missing");
        switch (k->kind_case) {
        case KVDIST__V1__CACHE_KEY__KIND_REQ:
                key.kind = CACHE_KEY_REQ;
                key.cluster_id = k->req->cluster_id;
                key.req_id = k->req->req_id;
                key.prefix_id = k->req->prefix_id;
                key.model_id = k->req->model_id;
                break;
        case KVDIST__V1__CACHE_KEY__KIND_ID_INDEX:
                key.kind = CACHE_KEY_ID_INDEX;
                key.cluster_id = k->id_index->cluster_id;
                key.cache_id = k->id_index->cache_id;
                key.batch_index = k->id_index->batch_index;
                break;
        case KVDIST__V1__CACHE_KEY__KIND_BLOCKS:
                key.kind = CACHE_KEY_BLOCKS;
                key.cluster_id = k->blocks->cluster_id;
                key.model_id = k->blocks->model_id;
                break;
        default:
                return error_set(err, STATUS_PARAM_INVALID, "a cache key has no kind");
        }
        *ret = key;
        return 0;
}

Kvdist__V1__CacheKey *peer_cache_key_to_proto(const CacheKey *key, PeerCacheKeyStorage *s)
{
        kvdist__v1__cache_key__init(&s->key);
        switch (key->kind) {
        case CACHE_KEY_REQ:
                kvdist__v1__req_key__init(&s->req);
                s->req.cluster_id = key->cluster_id;
                s->req.req_id = key->req_id;
                s->req.prefix_id = key->prefix_id;
                s->req.model_id = key->model_id;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
                s->key.req = &s->req;
                break;
        case CACHE_KEY_ID_INDEX:
                kvdist__v1__id_index_key__init(&s->id_index);
                s->id_index.cluster_id = key->cluster_id;
                s->id_index.cache_id = key->cache_id;
                s->id_index.batch_index = key->batch_index;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_ID_INDEX;
                s->key.id_index = &s->id_index;
                break;
        case CACHE_KEY_BLOCKS:
                kvdist__v1__blocks_key__init(&s->blocks);
                s->blocks.cluster_id = key->cluster_id;
                s->blocks.model_id = key->model_id;
                s->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
                s->key.blocks = &s->blocks;
                break;
        }
        return &s->key;
}
