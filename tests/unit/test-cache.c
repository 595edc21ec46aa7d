/* SPDX-License-Identifier: MIT */
/* Unit tests for caches: descriptor validation, keys, and the cache table's key and hold rules. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/memory/cache.h"
#include <kvdist/kvdist.h>

#define OWNER 7

static Region *test_region;

static void setup(void)
{
        ck_assert_int_eq(region_new_memfd("test-cache", 1 << 20, 1, &test_region), 0);
}

static void teardown(void)
{
        /* Every cache dropped its references by now. */
        ck_assert_uint_eq(test_region->n_ref, 1);
        test_region = region_unref(test_region);
}

static CacheDesc desc_of(uint32_t num_tensors, int64_t units)
{
        CacheDesc d = {
                .num_tensors = num_tensors,
                .n_dims = 3,
                .shape = {units, 16, 8},
                .data_type = KVD_DT_FLOAT16,
        };
        return d;
}

/* A cache of @num_tensors tensors with @units blocks or slots, all in test_region. */
static Cache *make_cache(CacheKind kind, uint64_t id, uint32_t num_tensors, int64_t units,
                         bool pool_backed)
{
        CacheTensor tensors[KVD_MAX_TENSORS];
        CacheDesc d = desc_of(num_tensors, units);
        Cache *c = NULL;

        for (uint32_t i = 0; i < num_tensors; i++)
                tensors[i] = (CacheTensor){test_region, i * 4096};
        ck_assert_int_eq(cache_new(kind, &d, tensors, &c), 0);
        c->id = id;
        c->owner_cluster_id = OWNER;
        c->pool_backed = pool_backed;
        return c;
}

static CacheKey req(uint64_t req_id)
{
        return (CacheKey){CACHE_KEY_REQ, OWNER, req_id, CACHE_ID_NONE, 0, 0, 0};
}

static CacheKey prefix(uint64_t prefix_id)
{
        return (CacheKey){CACHE_KEY_REQ, OWNER, CACHE_ID_NONE, prefix_id, 0, 0, 0};
}

static CacheKey empty_slot(void)
{
        return (CacheKey){CACHE_KEY_REQ, OWNER, CACHE_ID_NONE, CACHE_ID_NONE, 0, 0, 0};
}

static CacheKey blocks(uint64_t model_id)
{
        return (CacheKey){CACHE_KEY_BLOCKS, OWNER, CACHE_ID_NONE, CACHE_ID_NONE, model_id, 0, 0};
}

static CacheKey id_index(uint64_t cache_id, uint32_t index)
{
        return (CacheKey){CACHE_KEY_ID_INDEX, OWNER, CACHE_ID_NONE, CACHE_ID_NONE, 0,
                          cache_id,           index};
}

/* Asserts the table has what the counters say, then returns nothing. */
static void check_counts(const CacheTable *t, unsigned n_caches, unsigned n_keys, unsigned n_addrs)
{
        ck_assert_uint_eq(t->n_caches, n_caches);
        ck_assert_uint_eq(clist_length(&t->caches), n_caches);
        ck_assert_uint_eq(t->n_keys, n_keys);
        ck_assert_uint_eq(clist_length(&t->keys), n_keys);
        ck_assert_uint_eq(t->n_addrs, n_addrs);
}

/* Looks @key up and asserts it names @want at @want_index. */
static void check_lookup(const CacheTable *t, CacheKey key, const Cache *want, uint32_t want_index)
{
        Error err = ERROR_INIT;
        Cache *c = NULL;
        uint32_t index = 12345;

        ck_assert_int_eq(cache_table_lookup(t, &key, &c, &index, &err), STATUS_OK);
        ck_assert_ptr_eq(c, want);
        ck_assert_uint_eq(index, want_index);
        ck_assert_int_eq(err.code, 0);
}

static void check_lookup_fails(const CacheTable *t, CacheKey key, int code)
{
        Error err = ERROR_INIT;
        Cache *c = NULL;
        uint32_t index = 12345;

        ck_assert_int_eq(cache_table_lookup(t, &key, &c, &index, &err), code);
        ck_assert_int_eq(err.code, code);
        ck_assert_ptr_null(c);
        ck_assert_uint_eq(index, 12345);
}

START_TEST(test_dtype_size)
{
        static const struct {
                uint32_t dtype;
                unsigned size;
        } table[] = {
                {KVD_DT_FLOAT, 4},  {KVD_DT_FLOAT16, 2}, {KVD_DT_BF16, 2},   {KVD_DT_INT8, 1},
                {KVD_DT_INT16, 2},  {KVD_DT_UINT16, 2},  {KVD_DT_UINT8, 1},  {KVD_DT_INT32, 4},
                {KVD_DT_INT64, 8},  {KVD_DT_UINT32, 4},  {KVD_DT_UINT64, 8}, {KVD_DT_BOOL, 1},
                {KVD_DT_DOUBLE, 8},
        };

        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
                ck_assert_uint_eq(cache_dtype_size(table[i].dtype), table[i].size);
        ck_assert_uint_eq(cache_dtype_size(_KVD_DT_MAX), 0);
        ck_assert_uint_eq(cache_dtype_size(UINT32_MAX), 0);
}
END_TEST

/* Validates @d and asserts it fails with PARAM_INVALID and a message containing @field. */
static void check_desc_invalid(const CacheDesc *d, const char *field)
{
        Error err = ERROR_INIT;
        uint64_t size = 999;

        ck_assert_int_eq(cache_desc_validate(d, &size, &err), STATUS_PARAM_INVALID);
        ck_assert_int_eq(err.code, STATUS_PARAM_INVALID);
        ck_assert_msg(strstr(err.msg, field), "message \"%s\" does not name %s", err.msg, field);
        ck_assert_uint_eq(size, 999);
}

START_TEST(test_desc_validate)
{
        Error err = ERROR_INIT;
        CacheDesc d;
        uint64_t size = 0;

        d = desc_of(4, 32);
        ck_assert_int_eq(cache_desc_validate(&d, &size, &err), STATUS_OK);
        ck_assert_uint_eq(size, 32 * 16 * 8 * 2);
        ck_assert_int_eq(err.code, 0);

        d.n_dims = 1;
        d.shape[0] = 5;
        d.data_type = KVD_DT_DOUBLE;
        ck_assert_int_eq(cache_desc_validate(&d, &size, NULL), STATUS_OK);
        ck_assert_uint_eq(size, 40);

        d = desc_of(KVD_MAX_TENSORS, 1);
        ck_assert_int_eq(cache_desc_validate(&d, NULL, NULL), STATUS_OK);

        d = desc_of(0, 32);
        check_desc_invalid(&d, "desc.num_tensors=0");
        d = desc_of(300, 32);
        check_desc_invalid(&d, "desc.num_tensors=300 exceeds 240");
        d = desc_of(KVD_MAX_TENSORS + 1, 32);
        check_desc_invalid(&d, "desc.num_tensors=241");

        d = desc_of(2, 32);
        d.n_dims = 0;
        check_desc_invalid(&d, "desc.n_dims=0");
        d.n_dims = CACHE_MAX_DIMS + 1;
        check_desc_invalid(&d, "desc.n_dims=9");

        d = desc_of(2, 32);
        d.shape[1] = 0;
        check_desc_invalid(&d, "desc.shape[1]=0 must be positive");
        d = desc_of(2, -1);
        check_desc_invalid(&d, "desc.shape[0]=-1");
        d = desc_of(2, 32);
        d.n_dims = 4;
        d.shape[3] = 0;
        check_desc_invalid(&d, "desc.shape[3]=0");
        /* Entries past n_dims are not looked at. */
        d.n_dims = 3;
        ck_assert_int_eq(cache_desc_validate(&d, NULL, NULL), STATUS_OK);

        d = desc_of(2, 32);
        d.data_type = _KVD_DT_MAX;
        check_desc_invalid(&d, "desc.data_type=13");

        /* The product overflows 64 bits. */
        d = desc_of(2, INT64_MAX);
        check_desc_invalid(&d, "desc.shape[");
        d = desc_of(2, INT64_MAX / 2);
        d.n_dims = 1;
        d.data_type = KVD_DT_UINT8;
        ck_assert_int_eq(cache_desc_validate(&d, &size, NULL), STATUS_OK);
        /* ... or only once multiplied by the tensor count. */
        d.num_tensors = 5;
        check_desc_invalid(&d, "desc.num_tensors=5");

        /* The first failure is the one reported. */
        error_clear(&err);
        d = desc_of(0, 0);
        ck_assert_int_eq(cache_desc_validate(&d, NULL, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "desc.num_tensors"));
}
END_TEST

START_TEST(test_cache_new)
{
        CacheTensor tensors[3] = {{test_region, 0}, {test_region, 8192}, {test_region, 65536}};
        CacheDesc d = desc_of(3, 4);
        Cache *c = NULL;

        ck_assert_int_eq(cache_new(CACHE_CONTIGUOUS, &d, tensors, &c), 0);
        ck_assert_int_eq(c->kind, CACHE_CONTIGUOUS);
        ck_assert_uint_eq(c->tensor_size, 4 * 16 * 8 * 2);
        ck_assert_uint_eq(c->units, 4);
        ck_assert_uint_eq(c->stride, 16 * 8 * 2);
        ck_assert_uint_eq(c->desc.num_tensors, 3);
        ck_assert_uint_eq(c->tensors[2].offset, 65536);
        ck_assert_ptr_eq(c->tensors[1].region, test_region);
        ck_assert_uint_eq(test_region->n_ref, 4);
        ck_assert(!c->pool_backed);
        ck_assert(!c->id_held);
        ck_assert(!clist_is_linked(&c->link_table));
        ck_assert_ptr_null(cache_free(c));
        ck_assert_uint_eq(test_region->n_ref, 1);
        ck_assert_ptr_null(cache_free(NULL));

        d.shape[1] = 0;
        c = NULL;
        ck_assert_int_eq(cache_new(CACHE_BLOCKS, &d, tensors, &c), -EINVAL);
        ck_assert_int_eq(cache_new(_CACHE_KIND_MAX, &d, tensors, &c), -EINVAL);
        ck_assert_ptr_null(c);
        ck_assert_uint_eq(test_region->n_ref, 1);
}
END_TEST

START_TEST(test_key_equal_and_string)
{
        CacheKey a = req(12), b = req(12);
        char buf[128];

        ck_assert(cache_key_equal(&a, &b));
        b.model_id = 1;
        ck_assert(!cache_key_equal(&a, &b));
        b = req(13);
        ck_assert(!cache_key_equal(&a, &b));
        b = prefix(12);
        ck_assert(!cache_key_equal(&a, &b));
        b = req(12);
        b.cluster_id = 8;
        ck_assert(!cache_key_equal(&a, &b));
        /* Fields a kind does not use do not count. */
        b = req(12);
        b.cache_id = 99;
        b.batch_index = 3;
        ck_assert(cache_key_equal(&a, &b));

        a = blocks(1);
        b = blocks(1);
        b.req_id = 5;
        ck_assert(cache_key_equal(&a, &b));
        b = blocks(2);
        ck_assert(!cache_key_equal(&a, &b));

        a = id_index(3, 1);
        b = id_index(3, 1);
        b.model_id = 4;
        ck_assert(cache_key_equal(&a, &b));
        b = id_index(3, 2);
        ck_assert(!cache_key_equal(&a, &b));
        b = req(12);
        ck_assert(!cache_key_equal(&a, &b));

        a = req(12);
        ck_assert_str_eq(cache_key_to_string(&a, buf, sizeof(buf)),
                         "CacheKey{cluster 7, req 12, model 0}");
        a = prefix(4);
        ck_assert_str_eq(cache_key_to_string(&a, buf, sizeof(buf)),
                         "CacheKey{cluster 7, prefix 4, model 0}");
        a = blocks(2);
        ck_assert_str_eq(cache_key_to_string(&a, buf, sizeof(buf)),
                         "BlocksCacheKey{cluster 7, model 2}");
        a = id_index(3, 1);
        ck_assert_str_eq(cache_key_to_string(&a, buf, sizeof(buf)),
                         "CacheKeyByIdAndIndex{cluster 7, cache 3, index 1}");
        a = empty_slot();
        ck_assert_ptr_nonnull(strstr(cache_key_to_string(&a, buf, sizeof(buf)), "empty"));
        /* Truncated, still terminated. */
        a = req(12);
        ck_assert_str_eq(cache_key_to_string(&a, buf, 9), "CacheKey");
}
END_TEST

START_TEST(test_contiguous_keys)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[4] = {req(100), empty_slot(), prefix(200), req(101)};
        Cache *c;

        cache_table_init(&t);
        check_counts(&t, 0, 0, 0);

        c = make_cache(CACHE_CONTIGUOUS, 1, 2, 4, false);
        ck_assert_int_eq(cache_table_add(&t, c, keys, 4, false, &err), STATUS_OK);
        ck_assert_int_eq(err.code, 0);
        ck_assert_ptr_eq(cache_table_find(&t, 1), c);
        ck_assert_ptr_null(cache_table_find(&t, 2));
        /* The empty slot is not stored. */
        check_counts(&t, 1, 3, 2);
        ck_assert(!c->id_held);
        ck_assert_uint_eq(c->n_key_holds, 0);

        /* Key i names batch slot i. */
        check_lookup(&t, req(100), c, 0);
        check_lookup(&t, prefix(200), c, 2);
        check_lookup(&t, req(101), c, 3);
        check_lookup_fails(&t, req(102), STATUS_CACHE_NOT_EXIST);
        check_lookup_fails(&t, prefix(100), STATUS_CACHE_NOT_EXIST);
        check_lookup_fails(&t, empty_slot(), STATUS_PARAM_INVALID);
        {
                CacheKey other_model = req(100), other_cluster = req(100);

                other_model.model_id = 1;
                other_cluster.cluster_id = 8;
                check_lookup_fails(&t, other_model, STATUS_CACHE_NOT_EXIST);
                check_lookup_fails(&t, other_cluster, STATUS_CACHE_NOT_EXIST);
        }

        /* By id and index: the index is checked against the batch size. */
        check_lookup(&t, id_index(1, 0), c, 0);
        check_lookup(&t, id_index(1, 3), c, 3);
        check_lookup_fails(&t, id_index(1, 4), STATUS_PARAM_INVALID);
        check_lookup_fails(&t, id_index(2, 0), STATUS_CACHE_NOT_EXIST);
        {
                CacheKey k = id_index(1, 0);

                k.cluster_id = 8;
                check_lookup_fails(&t, k, STATUS_CACHE_NOT_EXIST);
                k = req(100);
                k.kind = 9;
                check_lookup_fails(&t, k, STATUS_PARAM_INVALID);
        }

        cache_table_deinit(&t);
        check_counts(&t, 0, 0, 0);
}
END_TEST

/* Adds a cache that must be refused with @code and a message containing @what. */
static void check_add_fails(CacheTable *t, Cache *c, const CacheKey *keys, size_t n_keys, int code,
                            const char *what)
{
        unsigned n_caches = t->n_caches, n_keys_before = t->n_keys, n_addrs = t->n_addrs;
        Error err = ERROR_INIT;

        ck_assert_int_eq(cache_table_add(t, c, keys, n_keys, true, &err), code);
        ck_assert_int_eq(err.code, code);
        ck_assert_msg(strstr(err.msg, what), "message \"%s\" does not say %s", err.msg, what);
        ck_assert(!clist_is_linked(&c->link_table));
        check_counts(t, n_caches, n_keys_before, n_addrs);
        cache_free(c);
}

/* Adds a cache with the table's next id; returns it. */
static Cache *add_next(CacheTable *t, uint64_t owner, const CacheKey *keys, size_t n_keys)
{
        Cache *c = make_cache(CACHE_CONTIGUOUS, cache_table_next_id(t), 1, 2, true);
        Error err = ERROR_INIT;

        c->owner_cluster_id = owner;
        ck_assert_int_eq(cache_table_add(t, c, keys, n_keys, true, &err), STATUS_OK);
        return c;
}

/* Each table (one cluster's) numbers its caches from 1; failures take no id; none is reused. */
START_TEST(test_ids_per_table)
{
        CacheTable t, u;
        CacheKey k = req(1), other = id_index(1, 0);
        Error err = ERROR_INIT;
        Cache *a, *b, *ua, *dead = NULL, *got = NULL;
        uint32_t index;

        cache_table_init(&t);
        cache_table_init(&u);
        ck_assert_uint_eq(cache_table_next_id(&t), 1);
        /* Asking does not take an id. */
        ck_assert_uint_eq(cache_table_next_id(&t), 1);
        a = add_next(&t, OWNER, &k, 1);
        ck_assert_uint_eq(a->id, 1);
        ck_assert_uint_eq(cache_table_next_id(&t), 2);

        /* A refused add (the key names cache 1 already) leaves the next id as it was. */
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, cache_table_next_id(&t), 1, 2, true), &k,
                        1, STATUS_CACHE_KEY_ALREADY_EXIST, "names cache 1 already");
        ck_assert_uint_eq(cache_table_next_id(&t), 2);
        b = add_next(&t, OWNER, NULL, 0);
        ck_assert_uint_eq(b->id, 2);

        /* Another cluster's table starts at 1 too: its cache 1 is its own. */
        ua = add_next(&u, OWNER + 1, NULL, 0);
        ck_assert_uint_eq(ua->id, 1);
        ck_assert_ptr_eq(cache_table_find(&t, 1), a);
        ck_assert_ptr_eq(cache_table_find(&u, 1), ua);
        other.cluster_id = OWNER + 1;
        ck_assert_int_eq(cache_table_lookup(&u, &other, &got, &index, &err), STATUS_OK);
        ck_assert_ptr_eq(got, ua);
        /* A key by id names a cluster: cluster 8's cache 1 is not in cluster 7's table. */
        ck_assert_int_eq(cache_table_lookup(&t, &other, &got, &index, &err),
                         STATUS_CACHE_NOT_EXIST);
        error_clear(&err);
        other.cluster_id = OWNER;
        ck_assert_int_eq(cache_table_lookup(&t, &other, &got, &index, &err), STATUS_OK);
        ck_assert_ptr_eq(got, a);

        /* Ids are not reused: after cache 2 goes, the next is 3. */
        ck_assert_int_eq(cache_table_remove(&t, 2, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, b);
        cache_free(dead);
        ck_assert_uint_eq(cache_table_next_id(&t), 3);
        ck_assert_uint_eq(add_next(&t, OWNER, NULL, 0)->id, 3);

        cache_table_deinit(&t);
        cache_table_deinit(&u);
}
END_TEST

START_TEST(test_contiguous_invalid_keys)
{
        CacheTable t;
        CacheKey keys[5] = {req(1), req(2), req(3), req(4), req(5)};
        CacheKey k[2];

        cache_table_init(&t);

        /* More keys than batch slots. */
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), keys, 5,
                        STATUS_PARAM_INVALID, "5 keys");

        k[0] = req(1);
        k[1] = blocks(0);
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), k, 2, STATUS_PARAM_INVALID,
                        "keys[1]");
        k[1] = id_index(1, 0);
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), k, 2, STATUS_PARAM_INVALID,
                        "keys[1]");
        k[1] = req(2);
        k[1].prefix_id = 3;
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), k, 2, STATUS_PARAM_INVALID,
                        "keys[1]");
        k[1] = req(2);
        k[1].cluster_id = 9;
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), k, 2, STATUS_PARAM_INVALID,
                        "key cluster_id 9 is not this cluster (7)");

        /* An empty slot names nothing, whatever its other fields say. */
        k[1] = empty_slot();
        k[1].cluster_id = 9;
        {
                Error err = ERROR_INIT;
                Cache *c = make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true);

                ck_assert_int_eq(cache_table_add(&t, c, k, 2, true, &err), STATUS_OK);
                check_counts(&t, 1, 1, 2);
                ck_assert_uint_eq(c->n_key_holds, 1);
        }

        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_duplicate_req_key)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey first[2] = {req(1), prefix(2)};
        CacheKey second[3] = {req(10), empty_slot(), prefix(2)};
        CacheKey twice[2] = {req(20), req(20)};
        CacheKey other_model[1] = {req(1)};
        Cache *a, *b;

        cache_table_init(&t);
        a = make_cache(CACHE_CONTIGUOUS, 1, 2, 2, true);
        ck_assert_int_eq(cache_table_add(&t, a, first, 2, true, &err), STATUS_OK);

        /* prefix(2) names cache 1 already: none of the second cache is added, not even req 10. */
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 2, 2, 4, true), second, 3,
                        STATUS_CACHE_KEY_ALREADY_EXIST, "names cache 1 already");
        check_lookup_fails(&t, req(10), STATUS_CACHE_NOT_EXIST);
        check_lookup(&t, prefix(2), a, 1);
        ck_assert_uint_eq(a->n_key_holds, 2);

        /* The same key twice in one call. */
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 2, 2, 4, true), twice, 2,
                        STATUS_CACHE_KEY_ALREADY_EXIST, "keys[1]");
        check_lookup_fails(&t, req(20), STATUS_CACHE_NOT_EXIST);

        /* A cache id that is in the table already. */
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 1, 2, 4, true), NULL, 0,
                        STATUS_CACHE_ID_ALREADY_EXIST, "cache id 1");

        /* Same request, another model: a different key. */
        other_model[0].model_id = 1;
        b = make_cache(CACHE_CONTIGUOUS, 2, 2, 1, false);
        error_clear(&err);
        ck_assert_int_eq(cache_table_add(&t, b, other_model, 1, false, &err), STATUS_OK);
        check_lookup(&t, req(1), a, 0);
        check_lookup(&t, other_model[0], b, 0);
        check_counts(&t, 2, 3, 4);

        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_blocks_keys)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey k0 = blocks(0), k1 = blocks(1);
        CacheKey two[2] = {blocks(2), blocks(3)};
        Cache *a, *b, *c, *dead = (Cache *)&err;

        cache_table_init(&t);
        a = make_cache(CACHE_BLOCKS, 1, 2, 64, false);
        ck_assert_int_eq(cache_table_add(&t, a, &k0, 1, false, &err), STATUS_OK);
        check_lookup(&t, k0, a, 0);
        check_lookup_fails(&t, k1, STATUS_CACHE_NOT_EXIST);

        /* Last wins: the key moves to b; a stays registered, reachable by id. */
        b = make_cache(CACHE_BLOCKS, 2, 2, 64, false);
        ck_assert_int_eq(cache_table_add(&t, b, &k0, 1, false, &err), STATUS_OK);
        check_lookup(&t, k0, b, 0);
        check_counts(&t, 2, 1, 4);
        ck_assert_ptr_eq(cache_table_find(&t, 1), a);

        /* A blocks cache ignores the index of an id key. */
        check_lookup(&t, id_index(1, 0), a, 0);
        check_lookup(&t, id_index(1, 1000), a, 0);

        /* Another model's key is another key. */
        c = make_cache(CACHE_BLOCKS, 3, 2, 64, true);
        ck_assert_int_eq(cache_table_add(&t, c, &k1, 1, true, &err), STATUS_OK);
        check_lookup(&t, k0, b, 0);
        check_lookup(&t, k1, c, 0);
        check_counts(&t, 3, 2, 6);
        /* Blocks keys do not hold a pool cache; only the id does. */
        ck_assert(c->id_held);
        ck_assert_uint_eq(c->n_key_holds, 0);

        /* At most one key, and only a blocks key. */
        check_add_fails(&t, make_cache(CACHE_BLOCKS, 4, 2, 64, false), two, 2, STATUS_PARAM_INVALID,
                        "2 keys");
        two[0] = req(5);
        check_add_fails(&t, make_cache(CACHE_BLOCKS, 4, 2, 64, false), two, 1, STATUS_PARAM_INVALID,
                        "keys[0]");
        two[0] = id_index(1, 0);
        check_add_fails(&t, make_cache(CACHE_BLOCKS, 4, 2, 64, false), two, 1, STATUS_PARAM_INVALID,
                        "keys[0]");
        two[0] = blocks(0);
        two[0].cluster_id = 9;
        check_add_fails(&t, make_cache(CACHE_BLOCKS, 4, 2, 64, false), two, 1, STATUS_PARAM_INVALID,
                        "key cluster_id 9 is not this cluster (7)");
        check_lookup(&t, k0, b, 0);

        /* Removing the key leaves the registered cache. */
        error_clear(&err);
        ck_assert_int_eq(cache_table_remove_key(&t, &k0, &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        check_lookup_fails(&t, k0, STATUS_CACHE_NOT_EXIST);
        ck_assert_ptr_eq(cache_table_find(&t, 2), b);
        /* A key that is gone: removing it again is a no-op, as in LLM-DataDist. */
        dead = b;
        ck_assert_int_eq(cache_table_remove_key(&t, &k0, &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        ck_assert_ptr_eq(cache_table_find(&t, 2), b);

        /* The pool cache dies with its id hold, taking its key along. */
        error_clear(&err);
        ck_assert_int_eq(cache_table_release_id(&t, 3, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, c);
        check_lookup_fails(&t, k1, STATUS_CACHE_NOT_EXIST);
        check_counts(&t, 2, 0, 4);
        cache_free(dead);

        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_tensor_limit)
{
        CacheTable t;
        Error err = ERROR_INIT;
        Cache *a, *b, *dead = NULL;

        cache_table_init(&t);
        a = make_cache(CACHE_CONTIGUOUS, 1, 100, 1, false);
        ck_assert_int_eq(cache_table_add(&t, a, NULL, 0, false, &err), STATUS_OK);
        b = make_cache(CACHE_BLOCKS, 2, 100, 8, false);
        ck_assert_int_eq(cache_table_add(&t, b, NULL, 0, false, &err), STATUS_OK);
        check_counts(&t, 2, 0, 200);

        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 3, 41, 1, false), NULL, 0,
                        STATUS_PARAM_INVALID, "200 tensor addresses are registered already");
        ck_assert_int_eq(cache_table_add(&t, make_cache(CACHE_CONTIGUOUS, 3, 40, 1, false), NULL, 0,
                                         false, &err),
                         STATUS_OK);
        check_counts(&t, 3, 0, 240);
        check_add_fails(&t, make_cache(CACHE_CONTIGUOUS, 4, 1, 1, false), NULL, 0,
                        STATUS_PARAM_INVALID, "240 tensor addresses");

        /* Removing a cache gives its addresses back. */
        ck_assert_int_eq(cache_table_remove(&t, 1, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, a);
        cache_free(dead);
        check_counts(&t, 2, 0, 140);
        ck_assert_int_eq(cache_table_add(&t, make_cache(CACHE_CONTIGUOUS, 4, 100, 1, false), NULL,
                                         0, false, &err),
                         STATUS_OK);
        check_counts(&t, 3, 0, 240);

        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_pool_holds_keys_last)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[4] = {req(1), empty_slot(), req(2), prefix(3)};
        Cache *c, *dead = NULL;

        cache_table_init(&t);
        c = make_cache(CACHE_CONTIGUOUS, 5, 2, 4, true);
        ck_assert_int_eq(cache_table_add(&t, c, keys, 4, true, &err), STATUS_OK);
        ck_assert(c->id_held);
        ck_assert_uint_eq(c->n_key_holds, 3);

        /* The id's hold ends first: the keys keep it alive. */
        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        ck_assert(!c->id_held);
        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_CACHE_NOT_EXIST);
        ck_assert_ptr_nonnull(strstr(err.msg, "cache 5"));
        error_clear(&err);
        check_lookup(&t, req(2), c, 2);

        dead = c;
        ck_assert_int_eq(cache_table_remove_key(&t, &keys[2], &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        ck_assert_uint_eq(c->n_key_holds, 2);
        check_lookup_fails(&t, req(2), STATUS_CACHE_NOT_EXIST);
        /* Gone: success, and no second hold ends with it. */
        dead = c;
        ck_assert_int_eq(cache_table_remove_key(&t, &keys[2], &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        ck_assert_uint_eq(c->n_key_holds, 2);
        /* A key that never named anything: the same no-op. */
        {
                CacheKey never = req(99), never_blocks = blocks(4);

                ck_assert_int_eq(cache_table_remove_key(&t, &never, &dead, &err), STATUS_OK);
                ck_assert_int_eq(cache_table_remove_key(&t, &never_blocks, &dead, &err), STATUS_OK);
                ck_assert_ptr_null(dead);
                ck_assert_uint_eq(c->n_key_holds, 2);
                check_counts(&t, 1, 2, 2);
        }

        /* An empty slot (neither req_id nor prefix_id) or an id key is not a key one removes. */
        ck_assert_int_eq(cache_table_remove_key(&t, &keys[1], &dead, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "exactly one of req_id and prefix_id"));
        error_clear(&err);
        {
                CacheKey k = id_index(5, 0), both = req(1);

                ck_assert_int_eq(cache_table_remove_key(&t, &k, &dead, &err), STATUS_PARAM_INVALID);
                error_clear(&err);
                both.prefix_id = 3;
                ck_assert_int_eq(cache_table_remove_key(&t, &both, &dead, &err),
                                 STATUS_PARAM_INVALID);
                error_clear(&err);
                ck_assert_uint_eq(c->n_key_holds, 2);
        }

        dead = c;
        ck_assert_int_eq(cache_table_remove_key(&t, &keys[3], &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);
        ck_assert_uint_eq(c->n_key_holds, 1);
        check_counts(&t, 1, 1, 2);

        /* The last hold goes: the cache is handed back, unlinked, keys and all. */
        ck_assert_int_eq(cache_table_remove_key(&t, &keys[0], &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, c);
        ck_assert(!clist_is_linked(&c->link_table));
        ck_assert_uint_eq(c->n_key_holds, 0);
        check_counts(&t, 0, 0, 0);
        ck_assert_ptr_null(cache_table_find(&t, 5));
        check_lookup_fails(&t, id_index(5, 0), STATUS_CACHE_NOT_EXIST);
        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_CACHE_NOT_EXIST);
        cache_free(c);

        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_pool_holds_id_last)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[2] = {req(1), req(2)};
        Cache *c, *other, *dead = NULL;

        cache_table_init(&t);
        c = make_cache(CACHE_CONTIGUOUS, 5, 2, 2, true);
        ck_assert_int_eq(cache_table_add(&t, c, keys, 2, true, &err), STATUS_OK);
        other = make_cache(CACHE_CONTIGUOUS, 6, 2, 1, true);
        ck_assert_int_eq(cache_table_add(&t, other, NULL, 0, true, &err), STATUS_OK);

        for (unsigned i = 0; i < 2; i++) {
                dead = c;
                ck_assert_int_eq(cache_table_remove_key(&t, &keys[i], &dead, &err), STATUS_OK);
                ck_assert_ptr_null(dead);
        }
        ck_assert_uint_eq(c->n_key_holds, 0);
        ck_assert_ptr_eq(cache_table_find(&t, 5), c);
        check_lookup(&t, id_index(5, 1), c, 1);

        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, c);
        check_counts(&t, 1, 0, 2);
        cache_free(dead);

        /* A pool cache without keys dies with its id. */
        ck_assert_int_eq(cache_table_release_id(&t, 6, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, other);
        check_counts(&t, 0, 0, 0);
        cache_free(dead);

        ck_assert_int_eq(cache_table_release_id(&t, 6, &dead, &err), STATUS_CACHE_NOT_EXIST);
        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_pool_without_key_holds)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[2] = {req(1), req(2)};
        Cache *c, *dead = NULL;

        /* Keys that do not hold: the id's release ends the cache and its keys go with it. */
        cache_table_init(&t);
        c = make_cache(CACHE_CONTIGUOUS, 5, 2, 2, true);
        ck_assert_int_eq(cache_table_add(&t, c, keys, 2, false, &err), STATUS_OK);
        ck_assert_uint_eq(c->n_key_holds, 0);
        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, c);
        check_counts(&t, 0, 0, 0);
        check_lookup_fails(&t, req(1), STATUS_CACHE_NOT_EXIST);
        cache_free(dead);
        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_registered_cache)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[2] = {req(1), req(2)};
        Cache *c, *dead = NULL;

        cache_table_init(&t);
        c = make_cache(CACHE_CONTIGUOUS, 5, 2, 2, false);
        ck_assert_int_eq(cache_table_add(&t, c, keys, 2, false, &err), STATUS_OK);
        ck_assert(!c->id_held);

        /* Not from the pool: there is no id hold to release. */
        ck_assert_int_eq(cache_table_release_id(&t, 5, &dead, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_null(dead);
        error_clear(&err);
        ck_assert_int_eq(cache_table_release_id(&t, 99, &dead, &err), STATUS_CACHE_NOT_EXIST);
        error_clear(&err);

        /* Losing every key does not end a registered cache. */
        for (unsigned i = 0; i < 2; i++) {
                dead = c;
                ck_assert_int_eq(cache_table_remove_key(&t, &keys[i], &dead, &err), STATUS_OK);
                ck_assert_ptr_null(dead);
        }
        ck_assert_ptr_eq(cache_table_find(&t, 5), c);
        check_counts(&t, 1, 0, 2);
        cache_table_deinit(&t);
}
END_TEST

START_TEST(test_remove)
{
        CacheTable t;
        Error err = ERROR_INIT;
        CacheKey keys[2] = {req(1), req(2)};
        CacheKey bk = blocks(0);
        Cache *a, *b, *dead = (Cache *)&err;

        cache_table_init(&t);
        a = make_cache(CACHE_CONTIGUOUS, 1, 2, 2, true);
        ck_assert_int_eq(cache_table_add(&t, a, keys, 2, true, &err), STATUS_OK);
        b = make_cache(CACHE_BLOCKS, 2, 3, 16, false);
        ck_assert_int_eq(cache_table_add(&t, b, &bk, 1, false, &err), STATUS_OK);
        check_counts(&t, 2, 3, 5);

        /* Unknown id: success, nothing returned. */
        ck_assert_int_eq(cache_table_remove(&t, 42, &dead, &err), STATUS_OK);
        ck_assert_ptr_null(dead);

        /* A held pool cache goes anyway, with its keys. */
        ck_assert_int_eq(cache_table_remove(&t, 1, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, a);
        ck_assert(!clist_is_linked(&a->link_table));
        check_counts(&t, 1, 1, 3);
        check_lookup_fails(&t, req(1), STATUS_CACHE_NOT_EXIST);
        check_lookup_fails(&t, req(2), STATUS_CACHE_NOT_EXIST);
        check_lookup(&t, bk, b, 0);
        cache_free(dead);

        /* The key is free for a new cache. */
        a = make_cache(CACHE_CONTIGUOUS, 1, 2, 2, true);
        ck_assert_int_eq(cache_table_add(&t, a, keys, 2, true, &err), STATUS_OK);
        check_lookup(&t, req(2), a, 1);

        ck_assert_int_eq(cache_table_remove(&t, 2, &dead, &err), STATUS_OK);
        ck_assert_ptr_eq(dead, b);
        check_lookup_fails(&t, bk, STATUS_CACHE_NOT_EXIST);
        check_counts(&t, 1, 2, 2);
        cache_free(dead);

        /* deinit frees what is left (the region's count is checked in teardown). */
        cache_table_deinit(&t);
        check_counts(&t, 0, 0, 0);
}
END_TEST

static Suite *cache_suite(void)
{
        Suite *s = suite_create("cache");
        TCase *tc;

        tc = tcase_create("desc");
        tcase_add_test(tc, test_dtype_size);
        tcase_add_test(tc, test_desc_validate);
        tcase_add_test(tc, test_key_equal_and_string);
        suite_add_tcase(s, tc);

        tc = tcase_create("cache");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_cache_new);
        suite_add_tcase(s, tc);

        tc = tcase_create("table");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_contiguous_keys);
        tcase_add_test(tc, test_contiguous_invalid_keys);
        tcase_add_test(tc, test_ids_per_table);
        tcase_add_test(tc, test_duplicate_req_key);
        tcase_add_test(tc, test_blocks_keys);
        tcase_add_test(tc, test_tensor_limit);
        tcase_add_test(tc, test_pool_holds_keys_last);
        tcase_add_test(tc, test_pool_holds_id_last);
        tcase_add_test(tc, test_pool_without_key_holds);
        tcase_add_test(tc, test_registered_cache);
        tcase_add_test(tc, test_remove);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(cache_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
