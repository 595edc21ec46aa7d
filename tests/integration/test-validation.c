/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, one daemon, what it refuses: every validation of a transfer, a link, a
 * client, a memory region or a pool cache answered with its status and a detail that names the
 * problem, with nothing moved; which caches a link reaches (remote-accessible ones registered
 * before it, and every pool cache) and PERMISSION_DENIED for the others; caches of any tensor
 * count moved whole with default options; and a request above the frame limit refused by the
 * library while the session goes on.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-world.h"

/* A cache registered after the link that would reach it is not reachable through it: it
 * exists, so the answer is PERMISSION_DENIED, not CACHE_NOT_EXIST. */
START_TEST(test_registered_after_link)
{
        static const uint64_t sb[] = {0}, db[] = {0};
        kvd_cache_key before = kvd_key_blocks(A_ID, 1), after = kvd_key_blocks(A_ID, 2);
        TCache c_before, c_after, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&c_before, w.a, true, 2, 2, 256, 1, &before, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 2, 256, 2, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.a, tcache_register(&c_after, w.a, true, 2, 2, 256, 3, &after, 1,
                                       KVD_REMOTE_DEFAULT));

        expect_status(w.b, kvd_pull_blocks(w.b, &after, dst.id, sb, 1, db, 1, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        expect_status(w.b, kvd_push_blocks(w.b, &after, dst.id, db, 1, sb, 1, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        tcache_verify_untouched(&dst);
        tcache_verify_untouched(&c_after);
        expect_ok(w.b, kvd_pull_blocks(w.b, &before, dst.id, sb, 1, db, 1, NULL));
        tcopies_blocks(&cp, &c_before, &dst, ALL, ALL, 2, sb, db, 1);
        tcache_verify(&dst, &cp);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* The rule is about the remote side: the puller's own caches may come after its link. */
START_TEST(test_local_cache_after_link)
{
        static const uint64_t sb[] = {1, 0}, db[] = {0, 1};
        kvd_cache_key key = kvd_key_blocks(A_ID, 1);
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 2, 256, 1, &key, 1, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 2, 256, 2, NULL, 0, 0));
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 2, db, 2, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&dst, &cp);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

static void link_b_to_a(void *userdata)
{
        link_to(userdata, A_ID, KVD_ROLE_PROMPT);
}

/* Runs one of the shared checks between A and B on one daemon. */
static void world_check(void (*check)(kvd_client *a, kvd_client *b, link_fn link, void *userdata))
{
        World w;

        world_start(&w);
        check(w.a, w.b, link_b_to_a, w.b);
        world_stop(&w);
}

/* The pool is configured at start: its caches are reachable through links made before them. */
START_TEST(test_pool_allocated_after_link)
{
        world_check(check_pool_caches_after_link);
}
END_TEST

START_TEST(test_unexposed_caches)
{
        world_check(check_unexposed_caches);
}
END_TEST

START_TEST(test_odd_tensor_counts)
{
        world_check(check_odd_tensor_counts);
}
END_TEST

/* Links are two-way: the side linked to pulls and pushes what the linking side exposed. */
START_TEST(test_two_way)
{
        world_check(check_two_way);
}
END_TEST

/* An unlink by either side, plain or forced, ends both directions; linking again works. */
START_TEST(test_two_way_unlink)
{
        World w;

        world_start(&w);
        check_two_way_unlink(w.a, w.b, link_b_to_a, w.b, true);
        world_stop(&w);
}
END_TEST

START_TEST(test_remote_access)
{
        static const uint64_t sb[] = {1}, db[] = {1};
        kvd_cache_key kno = kvd_key_blocks(A_ID, 1), kyes = kvd_key_blocks(A_ID, 2);
        kvd_cache_key kquiet = kvd_key_blocks(A_ID, 3);
        TCache no, yes, late, quiet, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&no, w.a, true, 2, 2, 256, 1, &kno, 1, KVD_REMOTE_NO));
        expect_ok(w.a, tcache_register(&yes, w.a, true, 2, 2, 256, 2, &kyes, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 2, 256, 3, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_status(w.b, kvd_pull_blocks(w.b, &kno, dst.id, sb, 1, db, 1, NULL),
                      KVD_E_PERMISSION_DENIED,
                      "not remote-accessible (registered with "
                      "KVD_REMOTE_NO)");
        tcache_verify_untouched(&dst);
        expect_ok(w.b, kvd_pull_blocks(w.b, &kyes, dst.id, sb, 1, db, 1, NULL));
        tcopies_blocks(&cp, &yes, &dst, ALL, ALL, 2, sb, db, 1);
        tcache_verify(&dst, &cp);

        /* Asking for remote access once a link exists is an error. */
        expect_status(w.a, tcache_register(&late, w.a, true, 2, 2, 256, 4, NULL, 0, KVD_REMOTE_YES),
                      KVD_E_PARAM_INVALID, "after a link exists");

        /* The default while a link exists is private: a link made later does not reach it. */
        expect_ok(w.a,
                  tcache_register(&quiet, w.a, true, 2, 2, 256, 5, &kquiet, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  kvd_unlink_clusters(w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, NULL, NULL},
                                      1, 1000, false, NULL));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_status(w.b, kvd_pull_blocks(w.b, &kquiet, dst.id, sb, 1, db, 1, NULL),
                      KVD_E_PERMISSION_DENIED,
                      "(registered with KVD_REMOTE_DEFAULT while "
                      "cluster 1001 had links)");
        tcache_verify(&dst, &cp);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_transfer_validation)
{
        static const uint64_t s3[] = {0, 1, 2}, d3[] = {0, 1, 2}, d2[] = {0, 1};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cache_key rkey = kvd_key_req(A_ID, 5, 0);
        kvd_cache_key unknown = kvd_key_blocks(A_ID, 99);
        kvd_transfer_opts o;
        TCache src, dst, csrc, cdst;
        kvd_client *c = NULL;
        uint64_t b;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 4, 32, 256, 1, &key, 1, 0));
        expect_ok(w.a, tcache_register(&csrc, w.a, false, 4, 2, 512, 2, &rkey, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 4, 40, 256, 3, NULL, 0, 0));
        expect_ok(w.b, tcache_register(&cdst, w.b, false, 4, 2, 512, 4, NULL, 0, 0));

        /* Nothing linked yet. */
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, NULL),
                      KVD_E_NOT_YET_LINK, "kvd_link_clusters");
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* A cluster that exists but is not linked. */
        expect_ok(NULL, harness_client_init(&w.d, C_ID, KVD_ROLE_PROMPT, &c));
        {
                kvd_cache_key kc = kvd_key_blocks(C_ID, 0);

                expect_status(w.b, kvd_pull_blocks(w.b, &kc, dst.id, s3, 3, d3, 3, NULL),
                              KVD_E_NOT_YET_LINK, "has no link to cluster 3003");
        }

        b = 32;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b, 1, d3, 1, NULL),
                      KVD_E_PARAM_INVALID, "src_blocks[0]=32 is out of range");
        b = 40;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 1, &b, 1, NULL),
                      KVD_E_PARAM_INVALID, "dst_blocks[0]=40 is out of range");
        /* A, linked to by B, reaches B (links are two-way), but not C. */
        {
                kvd_cache_key kc = kvd_key_blocks(C_ID, 0);

                expect_status(w.a, kvd_push_blocks(w.a, &kc, src.id, s3, 1, d3, 1, NULL),
                              KVD_E_NOT_YET_LINK, "has no link to cluster 3003");
        }
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d2, 2, NULL),
                      KVD_E_PARAM_INVALID, "src_blocks has 3 entries but dst_blocks has 2");
        {
                static const uint64_t dup[] = {5, 6, 5};

                expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, dup, 3, NULL),
                              KVD_E_PARAM_INVALID, "dst_blocks[2]=5 repeats dst_blocks[0]");
        }
        o = opts_layers(LAYERS(0, 1), LAYERS(0, 0), 2);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, &o),
                      KVD_E_PARAM_INVALID, "src_layers has 2 layers but dst_layers has 1");
        o = opts_layers(LAYERS(1, 2), LAYERS(0, 1), 2);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, &o),
                      KVD_E_PARAM_INVALID, "src_layers [1, 2] is outside the 2 layers");
        o = opts_layers(LAYERS(0, 1), LAYERS(1, 2), 2);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, &o),
                      KVD_E_PARAM_INVALID, "dst_layers [1, 2] is outside the 2 layers");
        o = opts_layers((kvd_layer_range){INT32_MAX, 2}, LAYERS(0, 1), 2);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, &o),
                      KVD_E_PARAM_INVALID, "goes past layer 2147483647");
        o = opts_layers(LAYERS(0, 0), LAYERS(0, 0), 3);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s3, 3, d3, 3, &o),
                      KVD_E_PARAM_INVALID, "tensor_num_per_layer=3 does not divide");
        expect_status(w.b, kvd_pull_blocks(w.b, &key, 987654, s3, 3, d3, 3, NULL),
                      KVD_E_CACHE_NOT_EXIST, "has no cache 987654");
        expect_status(w.b, kvd_pull_blocks(w.b, &unknown, dst.id, s3, 3, d3, 3, NULL),
                      KVD_E_CACHE_NOT_EXIST, "no cache under");
        {
                kvd_cache_key k = kvd_key_req(A_ID, 6, 0);

                expect_status(w.b, kvd_pull_cache(w.b, &k, cdst.id, 0, -1, NULL),
                              KVD_E_CACHE_NOT_EXIST, "no cache under");
                k = kvd_key_id_index(A_ID, 424242, 0);
                expect_status(w.b, kvd_pull_cache(w.b, &k, cdst.id, 0, -1, NULL),
                              KVD_E_CACHE_NOT_EXIST, NULL);
                k = kvd_key_id_index(A_ID, csrc.id, 2);
                expect_status(w.b, kvd_pull_cache(w.b, &k, cdst.id, 0, -1, NULL),
                              KVD_E_PARAM_INVALID, "batch_index 2 is out of range");
        }
        expect_status(w.b, kvd_pull_cache(w.b, &rkey, cdst.id, 2, -1, NULL), KVD_E_PARAM_INVALID,
                      "dst_index=2 is out of range");
        expect_status(w.b, kvd_pull_cache(w.b, &rkey, cdst.id, 0, 513, NULL), KVD_E_PARAM_INVALID,
                      "larger than the source item");
        expect_status(w.b, kvd_pull_cache(w.b, &rkey, cdst.id, 0, 0, NULL), KVD_E_PARAM_INVALID,
                      "size=0 is invalid");
        expect_status(w.b, kvd_pull_cache(w.b, &rkey, cdst.id, 0, -2, NULL), KVD_E_PARAM_INVALID,
                      "size");
        expect_status(w.b, kvd_pull_cache(w.b, &key, cdst.id, 0, -1, NULL), KVD_E_PARAM_INVALID,
                      "not a BlocksCacheKey");
        expect_status(w.b, kvd_pull_blocks(w.b, &rkey, dst.id, s3, 3, d3, 3, NULL),
                      KVD_E_PARAM_INVALID, "src_blocks must be empty");
        expect_status(w.b, kvd_push_blocks(w.b, &rkey, dst.id, s3, 3, d3, 3, NULL),
                      KVD_E_PARAM_INVALID, "BlocksCacheKey");
        /* A blocks cache where a contiguous one is needed, and the reverse. */
        expect_status(w.b, kvd_pull_cache(w.b, &rkey, dst.id, 0, -1, NULL), KVD_E_PARAM_INVALID,
                      "destination cache is a blocks cache");
        expect_status(w.b, kvd_pull_blocks(w.b, &key, cdst.id, s3, 3, d3, 3, NULL),
                      KVD_E_PARAM_INVALID, "destination cache is contiguous");

        /* Nothing moved. */
        tcache_verify_untouched(&dst);
        tcache_verify_untouched(&cdst);
        tcache_verify_untouched(&src);
        tcache_verify_untouched(&csrc);

        expect_ok(c, kvd_client_finalize(c));
        world_stop(&w);
}
END_TEST

START_TEST(test_link_errors)
{
        kvd_cluster_info infos[17];
        int rets[17];
        kvd_cluster_info self = {B_ID, KVD_ROLE_DECODER, NULL, NULL};
        kvd_cluster_info a = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        kvd_cluster_info nobody = {4242, KVD_ROLE_PROMPT, NULL, NULL};
        World w;

        world_start(&w);
        for (size_t i = 0; i < 17; i++)
                infos[i] = (kvd_cluster_info){5000 + i, KVD_ROLE_PROMPT, NULL, NULL};

        expect_status(w.b, kvd_link_clusters(w.b, infos, 17, 0, rets),
                      KVD_E_CLUSTER_NUM_EXCEED_LIMIT, "at most 16");
        for (size_t i = 0; i < 17; i++)
                ck_assert_int_eq(rets[i], KVD_E_CLUSTER_NUM_EXCEED_LIMIT);
        expect_status(w.b, kvd_unlink_clusters(w.b, infos, 17, 0, false, rets),
                      KVD_E_CLUSTER_NUM_EXCEED_LIMIT, "at most 16");
        expect_status(w.b, kvd_link_clusters(w.b, &self, 1, 0, rets), KVD_E_PARAM_INVALID,
                      "cannot link to itself");
        ck_assert_int_eq(rets[0], KVD_E_PARAM_INVALID);
        expect_status(w.b, kvd_link_clusters(w.b, &nobody, 1, 0, rets), KVD_E_LINK_FAILED, "4242");
        ck_assert_int_eq(rets[0], KVD_E_LINK_FAILED);

        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK, "has no link");
        expect_status(w.b, kvd_unlink_clusters(w.b, &a, 1, 0, false, rets), KVD_E_NOT_YET_LINK,
                      NULL);
        ck_assert_int_eq(rets[0], KVD_E_NOT_YET_LINK);

        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, kvd_check_link_status(w.b, A_ID));
        expect_status(w.b, kvd_link_clusters(w.b, &a, 1, 0, rets), KVD_E_ALREADY_LINK, "already");
        ck_assert_int_eq(rets[0], KVD_E_ALREADY_LINK);
        /* One call with a good and a bad cluster: per-cluster statuses. */
        {
                kvd_cluster_info two[2] = {a, nobody};

                expect_status(w.b, kvd_link_clusters(w.b, two, 2, 0, rets), KVD_E_ALREADY_LINK,
                              NULL);
                ck_assert_int_eq(rets[0], KVD_E_ALREADY_LINK);
                ck_assert_int_eq(rets[1], KVD_E_LINK_FAILED);
        }

        /* Links pin the role, on both ends. */
        expect_status(w.b, kvd_switch_role(w.b, KVD_ROLE_MIX, NULL, 0), KVD_E_EXIST_LINK,
                      "unlink them first");
        expect_status(w.a, kvd_switch_role(w.a, KVD_ROLE_MIX, NULL, 0), KVD_E_EXIST_LINK,
                      "unlink them first");

        expect_ok(w.b, kvd_unlink_clusters(w.b, &a, 1, 0, false, rets));
        ck_assert_int_eq(rets[0], KVD_OK);
        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK, NULL);
        expect_status(w.b, kvd_unlink_clusters(w.b, &a, 1, 0, true, rets), KVD_E_NOT_YET_LINK,
                      NULL);
        expect_ok(w.b, kvd_switch_role(w.b, KVD_ROLE_MIX, NULL, 0));
        {
                kvd_option o = {"listen_ip_info", "127.0.0.1:0"};

                expect_ok(w.a, kvd_switch_role(w.a, KVD_ROLE_PROMPT, &o, 1));
        }
        /* Relinking after an unlink works. */
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, kvd_check_link_status(w.b, A_ID));
        world_stop(&w);
}
END_TEST

START_TEST(test_client_errors)
{
        kvd_option no_device[1];
        kvd_client *c = NULL;
        World w;
        int r;

        world_start(&w);
        r = harness_client_init(&w.d, A_ID, KVD_ROLE_MIX, &c);
        expect_status(NULL, r, KVD_E_CLUSTER_EXISTS, "1001 is attached to this daemon already");
        ck_assert_ptr_null(c);

        no_device[0] = w.d.options[0];
        r = kvd_client_init(77, KVD_ROLE_MIX, no_device, 1, &c);
        expect_status(NULL, r, KVD_E_PARAM_INVALID, "\"device_id\" is required");
        ck_assert_ptr_null(c);
        world_stop(&w);
}
END_TEST

START_TEST(test_memory_errors)
{
        kvd_cache_desc desc = {
                .num_tensors = 1, .n_dims = 2, .shape = {4, 64}, .data_type = KVD_DT_FLOAT16};
        void *addrs[KVD_MAX_TENSORS];
        uint64_t id, ids[3];
        uint8_t *mem = NULL, *heap;
        TCache tc;
        World w;

        world_start(&w);

        /* Memory not from kvd_mem_alloc(). */
        heap = malloc(4096);
        ck_assert_ptr_nonnull(heap);
        addrs[0] = heap;
        expect_status(w.a, kvd_register_cache(w.a, &desc, addrs, 1, NULL, 0, 0, &id),
                      KVD_E_PARAM_INVALID, "kvd_mem_alloc");
        expect_status(w.a, kvd_register_blocks_cache(w.a, &desc, addrs, 1, NULL, 0, &id),
                      KVD_E_PARAM_INVALID, "kvd_mem_alloc");
        free(heap);

        /* A tensor that runs past the end of its region. */
        expect_ok(w.a, kvd_mem_alloc(w.a, 4096, (void **)&mem));
        addrs[0] = mem + 4096 - 256;
        expect_status(w.a, kvd_register_cache(w.a, &desc, addrs, 1, NULL, 0, 0, &id),
                      KVD_E_PARAM_INVALID, "kvd_mem_alloc");

        /* kvd_mem_free() refuses while a cache lies in the region. */
        addrs[0] = mem;
        expect_ok(w.a, kvd_register_cache(w.a, &desc, addrs, 1, NULL, 0, 0, &id));
        expect_status(w.a, kvd_mem_free(w.a, mem), KVD_E_BUSY, "unregister it first");
        mem[0] = 1; /* still mapped */
        expect_ok(w.a, kvd_unregister_cache(w.a, id));
        expect_ok(w.a, kvd_unregister_cache(w.a, id)); /* unknown id: success */
        expect_ok(w.a, kvd_mem_free(w.a, mem));
        expect_status(w.a, kvd_mem_free(w.a, mem), KVD_E_PARAM_INVALID, "kvd_mem_alloc");

        /* 240 tensor addresses per cluster. */
        for (int i = 0; i < 3; i++) {
                expect_ok(w.b, tcache_register(&tc, w.b, true, 80, 2, 64, (uint64_t)i, NULL, 0, 0));
                ids[i] = tc.id;
        }
        expect_status(w.b, tcache_register(&tc, w.b, true, 1, 2, 64, 9, NULL, 0, 0),
                      KVD_E_PARAM_INVALID, "240");
        /* Freeing some makes room again. */
        expect_ok(w.b, kvd_unregister_cache(w.b, ids[0]));
        expect_ok(w.b, tcache_register(&tc, w.b, true, 80, 2, 64, 10, NULL, 0, 0));
        expect_status(w.b, tcache_register(&tc, w.b, true, 1, 2, 64, 11, NULL, 0, 0),
                      KVD_E_PARAM_INVALID, "240");
        world_stop(&w);
}
END_TEST

START_TEST(test_pool_limits)
{
        kvd_cache_desc desc = {
                .num_tensors = 2, .n_dims = 2, .shape = {1, 64 << 20}, .data_type = KVD_DT_FLOAT};
        kvd_cache_key k1 = kvd_key_req(A_ID, 1, 0);
        HarnessDaemon nopool;
        kvd_client *c = NULL;
        TCache tc, tc2;
        uint64_t id;
        World w;
        int r;

        world_start(&w);
        /* 2 x 256 MiB does not fit the default 256 MiB pool. */
        expect_status(w.a, kvd_allocate_cache(w.a, &desc, NULL, 0, &id, NULL), KVD_E_OUT_OF_MEMORY,
                      "the pool cannot hold");
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), 0);
        /* A key names one cache. */
        expect_ok(w.a, tcache_allocate(&tc, w.a, 2, 1, 4096, 1, &k1, 1));
        expect_status(w.a, tcache_allocate(&tc2, w.a, 2, 1, 4096, 2, &k1, 1),
                      KVD_E_CACHE_KEY_ALREADY_EXIST, "already");
        expect_status(w.a, tcache_register(&tc2, w.a, false, 2, 1, 4096, 2, &k1, 1, 0),
                      KVD_E_CACHE_KEY_ALREADY_EXIST, "already");
        world_stop(&w);

        r = harness_daemon_start(&nopool, "--memory-size", "0", NULL);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        expect_ok(NULL, harness_client_init(&nopool, A_ID, KVD_ROLE_PROMPT, &c));
        desc.shape[1] = 1024;
        expect_status(c, kvd_allocate_cache(c, &desc, NULL, 0, &id, NULL),
                      KVD_E_FEATURE_NOT_ENABLED, "memory_size");
        expect_ok(c, kvd_client_finalize(c));
        ck_assert_int_eq(harness_daemon_stop(&nopool), 0);
        harness_daemon_cleanup(&nopool);
}
END_TEST

/* A request above the daemon's frame limit is refused by the library; the session goes on. */
START_TEST(test_request_above_frame_limit)
{
        enum { N_BIG = 30000 };
        static const uint64_t sb[] = {5, 6, 7, 100};
        static const uint64_t db[] = {9, 1, 2, 3};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        uint64_t *ids;
        kvd_client *a = NULL, *b = NULL;
        HarnessDaemon d;
        TCache src, dst;
        TCopies cp = {};
        int r;

        r = harness_daemon_start(&d, "--max-frame-size", "64K", NULL);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        expect_ok(NULL, harness_server_init(&d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &a));
        expect_ok(NULL, harness_client_init(&d, B_ID, KVD_ROLE_DECODER, &b));
        expect_ok(a, tcache_register(&src, a, true, 2, N_BIG, 8, 31, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(b, tcache_register(&dst, b, true, 2, N_BIG, 8, 32, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(b, A_ID, KVD_ROLE_PROMPT);

        ids = calloc(N_BIG, sizeof(*ids));
        ck_assert_ptr_nonnull(ids);
        for (size_t i = 0; i < N_BIG; i++)
                ids[i] = i;
        /* Two lists of 30,000 varints are well above 64 KiB. */
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, ids, N_BIG, ids, N_BIG, NULL),
                      KVD_E_LIMIT_EXCEEDED, "max_frame_size");

        /* Nothing moved, and the cluster, its link and caches are still there. */
        tcache_verify(&dst, &cp);
        expect_ok(b, kvd_check_link_status(b, A_ID));
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 4, db, 4, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&dst, &cp);

        free(ids);
        tcopies_free(&cp);
        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
}
END_TEST

static Suite *validation_suite(void)
{
        Suite *s = suite_create("integration-validation");
        TCase *tc;

        tc = tcase_create("reachability");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_registered_after_link);
        tcase_add_test(tc, test_local_cache_after_link);
        tcase_add_test(tc, test_pool_allocated_after_link);
        tcase_add_test(tc, test_unexposed_caches);
        tcase_add_test(tc, test_remote_access);
        tcase_add_test(tc, test_two_way);
        tcase_add_test(tc, test_two_way_unlink);
        suite_add_tcase(s, tc);

        tc = tcase_create("validation");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_transfer_validation);
        tcase_add_test(tc, test_odd_tensor_counts);
        tcase_add_test(tc, test_link_errors);
        tcase_add_test(tc, test_client_errors);
        tcase_add_test(tc, test_memory_errors);
        tcase_add_test(tc, test_pool_limits);
        tcase_add_test(tc, test_request_above_frame_limit);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(validation_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
