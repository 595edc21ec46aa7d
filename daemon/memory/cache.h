/* SPDX-License-Identifier: MIT */
/*
 * Caches and cache keys (LLM-DataDist semantics). A Cache is num_tensors tensors of one shape,
 * each at (region, offset); a blocks cache has shape[0] = num_blocks, a contiguous cache
 * shape[0] = batch size. A CacheTable holds one cluster's caches and the keys that name them:
 * ReqKeys per batch slot, BlocksKeys (last registration wins), and the holds that keep pool
 * caches alive (the id's hold until deallocate, each key's until pulled or removed).
 *
 * Functions that validate client input take an Error and return a STATUS_* status.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/error.h"
#include "daemon/memory/region.h"

#define CACHE_MAX_DIMS 8

typedef enum CacheKind {
        CACHE_CONTIGUOUS,
        CACHE_BLOCKS,
        _CACHE_KIND_MAX,
        _CACHE_KIND_INVALID = -22,
} CacheKind;

typedef enum CacheKeyKind {
        CACHE_KEY_REQ = 1,
        CACHE_KEY_ID_INDEX = 2,
        CACHE_KEY_BLOCKS = 3,
} CacheKeyKind;

#define CACHE_ID_NONE UINT64_MAX

/* What the owner asked for when it registered a cache (kvd_remote_access). */
typedef enum CacheAccess {
        CACHE_ACCESS_DEFAULT, /* remote-accessible when the owner had no links then */
        CACHE_ACCESS_YES,
        CACHE_ACCESS_NO,
        _CACHE_ACCESS_MAX,
        _CACHE_ACCESS_INVALID = -22,
} CacheAccess;

typedef struct CacheKey {
        CacheKeyKind kind;
        uint64_t cluster_id;
        uint64_t req_id;      /* REQ: request id or CACHE_ID_NONE */
        uint64_t prefix_id;   /* REQ: prefix id or CACHE_ID_NONE */
        uint64_t model_id;    /* REQ, BLOCKS */
        uint64_t cache_id;    /* ID_INDEX */
        uint32_t batch_index; /* ID_INDEX */
} CacheKey;

typedef struct CacheDesc {
        uint32_t num_tensors;
        uint32_t n_dims;
        int64_t shape[CACHE_MAX_DIMS];
        uint32_t data_type; /* kvd_dtype */
} CacheDesc;

typedef struct CacheTensor {
        Region *region; /* holds a reference */
        uint64_t offset;
} CacheTensor;

typedef struct Cache Cache;
struct Cache {
        uint64_t id;
        uint64_t owner_cluster_id;
        CacheKind kind;
        CacheDesc desc;
        uint64_t tensor_size; /* bytes per tensor */
        uint64_t units;       /* shape[0]: blocks or batch slots */
        uint64_t stride;      /* tensor_size / units: bytes per block or batch item */
        bool remote_accessible;
        CacheAccess access; /* as registered: says why a peer is refused */
        uint64_t seq;       /* registration order; links made before it cannot reach it */
        bool pool_backed;   /* allocated from the pool (tensors consecutive from pool_offset);
                             * reachable through every link, whenever it was made */
        uint64_t pool_offset;
        bool id_held;         /* pool caches: until deallocate */
        unsigned n_key_holds; /* pool caches: keys still holding it */
        unsigned n_busy;      /* transfers in flight that use it */
        bool released;        /* left its table while busy: freed when n_busy drops to 0 */
        /* A transport's registrations of the tensors, of its own type; regs_free(regs) frees
         * them before the pages they pin go. */
        void *regs;
        void (*regs_free)(void *regs);
        CList link_table;      /* on CacheTable.caches */
        CacheTensor tensors[]; /* desc.num_tensors */
};

/* Bytes per element of @data_type, 0 for an unknown type. */
unsigned cache_dtype_size(uint32_t data_type);

/*
 * Checks a descriptor (1..KVD_MAX_TENSORS tensors, 1..8 dims, every dim > 0, known dtype, no
 * overflow, shape[0] dividing the tensor evenly) and returns bytes per tensor in
 * *@ret_tensor_size. PARAM_INVALID with a message naming the field.
 */
int cache_desc_validate(const CacheDesc *desc, uint64_t *ret_tensor_size, Error *err);

/*
 * Creates a cache from a validated @desc with tensors at @tensors (references are taken).
 * The caller fills id, owner, seq, access and pool fields. -ENOMEM.
 */
int cache_new(CacheKind kind, const CacheDesc *desc, const CacheTensor *tensors, Cache **ret);
/* Drops the tensors' region references and frees. Accepts NULL; returns NULL. */
Cache *cache_free(Cache *cache);

/*
 * Whether a link made at @link_seq (named @link_id in messages, as its maker knows it) reaches
 * @cache: a pool cache always (the pool is configured before any link); a registered cache when
 * it is remote-accessible and was registered before the link. PERMISSION_DENIED otherwise, with
 * a detail saying why (registered with KVD_REMOTE_NO, registered after the link, or registered
 * with the default access while its cluster had links).
 */
int cache_check_reachable(const Cache *cache, uint64_t link_seq, uint64_t link_id, Error *err);

/* Whether two keys name the same thing (kind and every field that kind uses). */
bool cache_key_equal(const CacheKey *a, const CacheKey *b);

/* "CacheKey{cluster 7, req 12, model 0}" into @buf. */
const char *cache_key_to_string(const CacheKey *key, char *buf, size_t size);

typedef struct CacheTable {
        CList caches;
        CList keys; /* CacheKeyEntry */
        unsigned n_caches;
        unsigned n_keys;
        unsigned n_addrs; /* tensor addresses over all caches (LLM-DataDist's 240) */
        uint64_t last_id; /* the highest cache id added; ids are never reused */
} CacheTable;

/* Initialises an empty table. */
void cache_table_init(CacheTable *t);
/*
 * Frees every cache and key. Pool extents are the caller's: take pool caches out with
 * cache_table_remove() first to release them.
 */
void cache_table_deinit(CacheTable *t);

/*
 * Adds @cache with @keys (REQ keys, one per batch slot, for contiguous caches: at most `units`
 * of them, an empty slot when req_id and prefix_id are both CACHE_ID_NONE; at most one BLOCKS
 * key for blocks caches). Each key's cluster_id must be cache->owner_cluster_id (except an
 * empty slot's). A REQ key already present is CACHE_KEY_ALREADY_EXIST; a BLOCKS key already
 * present moves to the new cache (last wins). With @hold_keys (pool caches) every REQ key holds
 * the cache; BLOCKS keys never hold (they can move away on a later add). A pool_backed cache
 * starts with its id held. More than KVD_MAX_TENSORS tensor addresses in the table is
 * PARAM_INVALID, an id already present CACHE_ID_ALREADY_EXIST. On failure nothing changed; on
 * success the table owns @cache and cache_table_next_id() moves past its id.
 */
int cache_table_add(CacheTable *t, Cache *cache, const CacheKey *keys, size_t n_keys,
                    bool hold_keys, Error *err);

/*
 * The id the next cache added to @t gets: a cluster's caches are numbered from 1 in the order
 * they were added (registered or allocated), as LLM-DataDist numbers an instance's caches, so
 * cache 1 of one cluster and cache 1 of another are different caches. An id is taken only when
 * cache_table_add() succeeds, and never handed out again while the table lives.
 */
uint64_t cache_table_next_id(const CacheTable *t);

/* The cache with id @cache_id, or NULL (borrowed). */
Cache *cache_table_find(const CacheTable *t, uint64_t cache_id);

/* Calls @fn for every key of @t that names @cache, with the batch slot it names. */
void cache_table_foreach_key(const CacheTable *t, const Cache *cache,
                             void (*fn)(const CacheKey *key, uint32_t index, void *userdata),
                             void *userdata);

/* How many keys of @t name @cache (for status). */
unsigned cache_table_count_keys(const CacheTable *t, const Cache *cache);

/*
 * Resolves a key to the cache and batch slot it names. REQ: the slot the key was registered
 * at; ID_INDEX: that cache and index (index checked against units for contiguous caches);
 * BLOCKS: the cache currently under the key (slot 0). CACHE_NOT_EXIST when nothing matches;
 * PARAM_INVALID for an index out of range, a REQ key without exactly one of req_id/prefix_id,
 * or an unknown kind.
 */
int cache_table_lookup(const CacheTable *t, const CacheKey *key, Cache **ret_cache,
                       uint32_t *ret_index, Error *err);

/*
 * Removes @key. If it held a pool cache that nothing else holds, the cache is unlinked from the
 * table and returned in *@ret_dead for the caller to release (pool extent, then cache_free());
 * otherwise *@ret_dead is NULL. A key that names nothing (removed already, ended by a pull, or
 * never added) is success and changes nothing, as LLM-DataDist's RemoveCacheKey; PARAM_INVALID
 * for a kind that is never registered (ID_INDEX) and for a request key without exactly one of
 * req_id and prefix_id.
 */
int cache_table_remove_key(CacheTable *t, const CacheKey *key, Cache **ret_dead, Error *err);

/*
 * Ends the id's hold on pool cache @cache_id (kvd_deallocate_cache): as remove_key for a
 * dead cache. CACHE_NOT_EXIST unknown id or an id already released, PARAM_INVALID a
 * registered (not pool) cache.
 */
int cache_table_release_id(CacheTable *t, uint64_t cache_id, Cache **ret_dead, Error *err);

/*
 * Removes cache @cache_id and every key naming it (kvd_unregister_cache); the cache is returned
 * in *@ret_dead (NULL if the id is unknown, which is success).
 */
int cache_table_remove(CacheTable *t, uint64_t cache_id, Cache **ret_dead, Error *err);
