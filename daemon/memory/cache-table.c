/* SPDX-License-Identifier: MIT */
/*
 * CacheTable: one cluster's caches and the keys that name them. Tables are small (bounded by
 * the per-cluster limits), so every lookup walks a list.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>

#include "daemon/memory/cache.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"
#include "common/status.h"

#define KEY_STR_MAX 128

typedef struct CacheKeyEntry {
        CacheKey key;
        Cache *cache;
        uint32_t index;   /* REQ: the batch slot it names; BLOCKS: 0 */
        bool holds;       /* counted in cache->n_key_holds */
        CList link_table; /* on CacheTable.keys */
} CacheKeyEntry;

static CacheKeyEntry *cache_key_entry_free(CacheKeyEntry *e)
{
        if (!e)
                return NULL;
        clist_unlink(&e->link_table);
        free(e);
        return NULL;
}

void cache_table_init(CacheTable *t)
{
        assert(t);
        *t = (CacheTable){0};
        clist_init(&t->caches);
        clist_init(&t->keys);
}

void cache_table_deinit(CacheTable *t)
{
        CacheKeyEntry *e, *etmp;
        Cache *c, *ctmp;

        assert(t);

        CLIST_FOREACH_SAFE (e, etmp, &t->keys, link_table)
                cache_key_entry_free(e);
        CLIST_FOREACH_SAFE (c, ctmp, &t->caches, link_table) {
                clist_unlink(&c->link_table);
                cache_free(c);
        }
        t->n_caches = 0;
        t->n_keys = 0;
        t->n_addrs = 0;
}

uint64_t cache_table_next_id(const CacheTable *t)
{
        assert(t);
        return t->last_id + 1;
}

Cache *cache_table_find(const CacheTable *t, uint64_t cache_id)
{
        Cache *c;

        assert(t);

        CLIST_FOREACH (c, &t->caches, link_table)
                if (c->id == cache_id)
                        return c;
        return NULL;
}

void cache_table_foreach_key(const CacheTable *t, const Cache *cache,
                             void (*fn)(const CacheKey *key, uint32_t index, void *userdata),
                             void *userdata)
{
        CacheKeyEntry *e;

        CLIST_FOREACH (e, &t->keys, link_table)
                if (e->cache == cache)
                        fn(&e->key, e->index, userdata);
}

static CacheKeyEntry *cache_table_find_key(const CacheTable *t, const CacheKey *key)
{
        CacheKeyEntry *e;

        CLIST_FOREACH (e, &t->keys, link_table)
                if (cache_key_equal(&e->key, key))
                        return e;
        return NULL;
}

static bool req_key_is_empty(const CacheKey *key)
{
        return key->req_id == CACHE_ID_NONE && key->prefix_id == CACHE_ID_NONE;
}

static bool req_key_is_valid(const CacheKey *key)
{
        /* Exactly one of req_id and prefix_id. */
        return (key->req_id == CACHE_ID_NONE) != (key->prefix_id == CACHE_ID_NONE);
}

/* Unlinks every key of @cache, then the cache itself; the caller owns it afterwards. */
static Cache *cache_table_unlink_cache(CacheTable *t, Cache *cache)
{
        CacheKeyEntry *e, *tmp;

        CLIST_FOREACH_SAFE (e, tmp, &t->keys, link_table) {
                if (e->cache != cache)
                        continue;
                if (e->holds)
                        cache->n_key_holds--;
                cache_key_entry_free(e);
                t->n_keys--;
        }
        clist_unlink(&cache->link_table);
        t->n_caches--;
        t->n_addrs -= cache->desc.num_tensors;
        return cache;
}

/* A pool cache dies when neither its id nor any key holds it. */
static bool cache_is_dead(const Cache *cache)
{
        return cache->pool_backed && !cache->id_held && cache->n_key_holds == 0;
}

/* Checks @keys against @cache and the table; changes nothing. */
static int cache_table_check_keys(const CacheTable *t, const Cache *cache, const CacheKey *keys,
                                  size_t n_keys, Error *err)
{
        char buf[KEY_STR_MAX];

        if (cache->kind == CACHE_CONTIGUOUS && n_keys > cache->units)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%zu keys for a cache of %" PRIu64 " batch slots", n_keys,
                                 cache->units);
        if (cache->kind == CACHE_BLOCKS && n_keys > 1)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%zu keys for a blocks cache, which takes at most one", n_keys);

        for (size_t i = 0; i < n_keys; i++) {
                const CacheKey *k = &keys[i];
                CacheKeyEntry *e;

                if (cache->kind == CACHE_CONTIGUOUS && k->kind != CACHE_KEY_REQ)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "keys[%zu]: kind %d is not a CacheKey (a contiguous "
                                         "cache is named by request keys)",
                                         i, (int)k->kind);
                if (cache->kind == CACHE_BLOCKS && k->kind != CACHE_KEY_BLOCKS)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "keys[%zu]: kind %d is not a BlocksCacheKey (a blocks "
                                         "cache is named by a blocks key)",
                                         i, (int)k->kind);
                /* An empty slot names nothing, so its other fields do not matter. */
                if (k->kind == CACHE_KEY_REQ && req_key_is_empty(k))
                        continue;
                if (k->cluster_id != cache->owner_cluster_id)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "keys[%zu]: key cluster_id %" PRIu64
                                         " is not this cluster (%" PRIu64 ")",
                                         i, k->cluster_id, cache->owner_cluster_id);
                if (k->kind != CACHE_KEY_REQ)
                        continue;
                if (!req_key_is_valid(k))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "keys[%zu]: %s sets both req_id and prefix_id", i,
                                         cache_key_to_string(k, buf, sizeof(buf)));

                e = cache_table_find_key(t, k);
                if (e)
                        return error_set(err, STATUS_CACHE_KEY_ALREADY_EXIST,
                                         "keys[%zu]: %s names cache %" PRIu64 " already", i,
                                         cache_key_to_string(k, buf, sizeof(buf)), e->cache->id);
                for (size_t j = 0; j < i; j++)
                        if (cache_key_equal(&keys[j], k))
                                return error_set(err, STATUS_CACHE_KEY_ALREADY_EXIST,
                                                 "keys[%zu]: %s repeats keys[%zu]", i,
                                                 cache_key_to_string(k, buf, sizeof(buf)), j);
        }
        return STATUS_OK;
}

int cache_table_add(CacheTable *t, Cache *cache, const CacheKey *keys, size_t n_keys,
                    bool hold_keys, Error *err)
{
        CList pending = CLIST_INIT(pending);
        CacheKeyEntry *e, *tmp, *old;
        unsigned n_holds = 0;
        int r;

        assert(t);
        assert(cache);
        assert(keys || n_keys == 0);
        assert(!clist_is_linked(&cache->link_table));

        if (cache->kind != CACHE_CONTIGUOUS && cache->kind != CACHE_BLOCKS)
                return error_set(err, STATUS_PARAM_INVALID, "cache kind %d is not known",
                                 (int)cache->kind);
        if (cache_table_find(t, cache->id))
                return error_set(err, STATUS_CACHE_ID_ALREADY_EXIST,
                                 "cache id %" PRIu64 " is registered already", cache->id);
        if (t->n_addrs + cache->desc.num_tensors > KVD_MAX_TENSORS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%u tensor addresses are registered already, %" PRIu32
                                 " more exceed the limit of %d",
                                 t->n_addrs, cache->desc.num_tensors, KVD_MAX_TENSORS);

        r = cache_table_check_keys(t, cache, keys, n_keys, err);
        if (r != STATUS_OK)
                return r;

        /* Allocate every entry before the table changes, so that failing leaves it as it was. */
        for (size_t i = 0; i < n_keys; i++) {
                if (keys[i].kind == CACHE_KEY_REQ && req_key_is_empty(&keys[i]))
                        continue;
                e = calloc(1, sizeof(*e));
                if (!e) {
                        CLIST_FOREACH_SAFE (e, tmp, &pending, link_table)
                                cache_key_entry_free(e);
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory for cache keys");
                }
                e->key = keys[i];
                e->cache = cache;
                e->index = keys[i].kind == CACHE_KEY_REQ ? (uint32_t)i : 0;
                e->holds = hold_keys && keys[i].kind == CACHE_KEY_REQ;
                clist_link_tail(&pending, &e->link_table);
        }

        clist_link_tail(&t->caches, &cache->link_table);
        t->n_caches++;
        t->n_addrs += cache->desc.num_tensors;

        CLIST_FOREACH_SAFE (e, tmp, &pending, link_table) {
                /* Last wins: a blocks key moves from whichever cache held it. */
                old = cache_table_find_key(t, &e->key);
                if (old) {
                        assert(old->key.kind == CACHE_KEY_BLOCKS && !old->holds);
                        cache_key_entry_free(old);
                        t->n_keys--;
                }
                clist_unlink(&e->link_table);
                clist_link_tail(&t->keys, &e->link_table);
                t->n_keys++;
                if (e->holds)
                        n_holds++;
        }

        cache->id_held = cache->pool_backed;
        cache->n_key_holds = n_holds;
        t->last_id = MAX(t->last_id, cache->id);
        return STATUS_OK;
}

unsigned cache_table_count_keys(const CacheTable *t, const Cache *cache)
{
        const CacheKeyEntry *e;
        unsigned n = 0;

        CLIST_FOREACH (e, &t->keys, link_table)
                if (e->cache == cache)
                        n++;
        return n;
}

int cache_table_lookup(const CacheTable *t, const CacheKey *key, Cache **ret_cache,
                       uint32_t *ret_index, Error *err)
{
        char buf[KEY_STR_MAX];
        CacheKeyEntry *e;
        Cache *c;

        assert(t);
        assert(key);

        switch (key->kind) {
        case CACHE_KEY_REQ:
        case CACHE_KEY_BLOCKS:
                if (key->kind == CACHE_KEY_REQ && !req_key_is_valid(key))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "%s must set exactly one of req_id and prefix_id",
                                         cache_key_to_string(key, buf, sizeof(buf)));
                e = cache_table_find_key(t, key);
                if (!e)
                        return error_set(err, STATUS_CACHE_NOT_EXIST, "no cache under %s",
                                         cache_key_to_string(key, buf, sizeof(buf)));
                c = e->cache;
                if (ret_cache)
                        *ret_cache = c;
                if (ret_index)
                        *ret_index = e->index;
                return STATUS_OK;
        case CACHE_KEY_ID_INDEX:
                c = cache_table_find(t, key->cache_id);
                if (!c || c->owner_cluster_id != key->cluster_id)
                        return error_set(err, STATUS_CACHE_NOT_EXIST, "no cache under %s",
                                         cache_key_to_string(key, buf, sizeof(buf)));
                if (c->kind == CACHE_CONTIGUOUS && key->batch_index >= c->units)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "batch_index %" PRIu32 " is out of range, cache %" PRIu64
                                         " has %" PRIu64 " batch slots",
                                         key->batch_index, c->id, c->units);
                if (ret_cache)
                        *ret_cache = c;
                if (ret_index)
                        *ret_index = c->kind == CACHE_CONTIGUOUS ? key->batch_index : 0;
                return STATUS_OK;
        }
        return error_set(err, STATUS_PARAM_INVALID, "key kind %d is not known", (int)key->kind);
}

int cache_table_remove_key(CacheTable *t, const CacheKey *key, Cache **ret_dead, Error *err)
{
        char buf[KEY_STR_MAX];
        CacheKeyEntry *e;
        Cache *c;

        assert(t);
        assert(key);
        assert(ret_dead);

        if (key->kind != CACHE_KEY_REQ && key->kind != CACHE_KEY_BLOCKS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s cannot be removed: only request and blocks keys are "
                                 "registered",
                                 cache_key_to_string(key, buf, sizeof(buf)));

        if (key->kind == CACHE_KEY_REQ && !req_key_is_valid(key))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s must set exactly one of req_id and prefix_id",
                                 cache_key_to_string(key, buf, sizeof(buf)));

        *ret_dead = NULL;
        e = cache_table_find_key(t, key);
        if (!e)
                return STATUS_OK;

        c = e->cache;
        if (e->holds) {
                assert(c->n_key_holds > 0);
                c->n_key_holds--;
        }
        cache_key_entry_free(e);
        t->n_keys--;

        *ret_dead = cache_is_dead(c) ? cache_table_unlink_cache(t, c) : NULL;
        return STATUS_OK;
}

int cache_table_release_id(CacheTable *t, uint64_t cache_id, Cache **ret_dead, Error *err)
{
        Cache *c;

        assert(t);
        assert(ret_dead);

        c = cache_table_find(t, cache_id);
        if (!c)
                return error_set(err, STATUS_CACHE_NOT_EXIST, "no cache %" PRIu64, cache_id);
        if (!c->pool_backed)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "cache %" PRIu64 " was registered, not allocated from the pool",
                                 cache_id);
        if (!c->id_held)
                return error_set(err, STATUS_CACHE_NOT_EXIST,
                                 "cache %" PRIu64 " was deallocated already", cache_id);

        c->id_held = false;
        *ret_dead = cache_is_dead(c) ? cache_table_unlink_cache(t, c) : NULL;
        return STATUS_OK;
}

int cache_table_remove(CacheTable *t, uint64_t cache_id, Cache **ret_dead, Error *err)
{
        Cache *c;

        assert(t);
        assert(ret_dead);

        c = cache_table_find(t, cache_id);
        *ret_dead = c ? cache_table_unlink_cache(t, c) : NULL;
        return STATUS_OK;
}
