/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, one daemon: clusters on one kvdistd moving blocks and caches over the
 * shared-memory transport, every byte of every destination checked; pool caches and their
 * holds; memory that outlives its client; and what happens to a transfer when its deadline
 * passes or its source, link or client goes away while it runs. What the daemon refuses is in
 * test-validation.c.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-world.h"

START_TEST(test_pull_blocks)
{
        static const uint64_t sb1[] = {3, 17, 5, 31, 0, 30};
        static const uint64_t db1[] = {39, 1, 22, 7, 8, 23};
        static const uint64_t sb2[] = {8, 9, 10, 11, 12, 13, 14, 15};
        static const uint64_t db2[] = {24, 25, 26, 27, 28, 29, 30, 31};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 4, 32, 256, 11, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 4, 40, 256, 22, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* Scattered: no two blocks adjacent on both sides. */
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb1, 6, db1, 6, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb1, db1, 6);
        tcache_verify(&dst, &cp);

        /* Contiguous on both sides: merged into one copy per tensor, same bytes. */
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb2, 8, db2, 8, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb2, db2, 8);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_pull_blocks_layers)
{
        static const uint64_t sb[] = {2, 9, 4, 5};
        static const uint64_t db[] = {0, 11, 6, 7};
        kvd_cache_key key = kvd_key_blocks(A_ID, 3);
        TCache src, dst, dst3;
        TCopies cp = {}, cp3 = {};
        kvd_transfer_opts o;
        World w;

        world_start(&w);
        /* Source: 3 layers of K,V; destination: 2 layers. */
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 6, 10, 512, 33, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 4, 12, 512, 44, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst3, w.b, true, 3, 12, 512, 45, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* Layers 1..2 of the source into layers 0..1 of the destination. */
        o = opts_layers(LAYERS(1, 2), LAYERS(0, 1), 2);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 4, db, 4, &o));
        tcopies_blocks(&cp, &src, &dst, LAYERS(1, 2), LAYERS(0, 1), 2, sb, db, 4);
        tcache_verify(&dst, &cp);

        /* Source layer 2 (tensors 4, 5) into destination layer 1 (tensors 2, 3), other blocks. */
        {
                static const uint64_t sb2[] = {0}, db2[] = {1};

                o = opts_layers(LAYERS(2, 2), LAYERS(1, 1), 2);
                expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb2, 1, db2, 1, &o));
                tcopies_blocks(&cp, &src, &dst, LAYERS(2, 2), LAYERS(1, 1), 2, sb2, db2, 1);
                tcache_verify(&dst, &cp);
        }

        /* Three tensors per layer: source layer 1 (tensors 3..5) is the whole destination. */
        o = opts_layers(LAYERS(1, 1), ALL, 3);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst3.id, sb, 4, db, 4, &o));
        tcopies_blocks(&cp3, &src, &dst3, LAYERS(1, 1), ALL, 3, sb, db, 4);
        tcache_verify(&dst3, &cp3);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        tcopies_free(&cp3);
        world_stop(&w);
}
END_TEST

/*
 * Option structs: zero is the default in every field, so {.timeout_ms = N} moves every layer
 * (it once moved layer 0 only); the size field lets a struct grow, and fields this library does
 * not know are refused unless zero.
 */
/*
 * A pull of 16 MiB or more is copied with streaming stores where the daemon's CPU has them
 * (status: copy_streaming, counters.bytes_streamed), a smaller one not; every byte lands the
 * same either way, and nothing else in the caches changes.
 */
START_TEST(test_pull_big_streams)
{
        enum { BLOCKS = 4200, BLOCK = 4096 };
        static const size_t pulls[] = {2100, 600}; /* 17.2 MB and 4.9 MB over two tensors */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        uint64_t sb[2100], db[2100];
        TCache src, dst;
        TCopies cp = {};
        json_t *root;
        bool streaming;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, BLOCKS, BLOCK, 51, &key, 1,
                                       KVD_REMOTE_DEFAULT));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, BLOCKS, BLOCK, 52, NULL, 0,
                                       KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        root = daemon_status_json(&w.d);
        ck_assert(json_is_boolean(json_object_get(root, "copy_streaming")));
        streaming = json_is_true(json_object_get(root, "copy_streaming"));
        json_decref(root);

        for (size_t k = 0; k < 2; k++) {
                int64_t before = client_status_int(w.b, "counters/bytes_streamed"), streamed;
                uint64_t bytes = (uint64_t)pulls[k] * BLOCK * 2;

                /* scattered, no id twice: 4200 has no factor in common with 7919 or 4099 */
                for (size_t i = 0; i < pulls[k]; i++) {
                        sb[i] = (i * 7919 + k) % BLOCKS;
                        db[i] = (i * 4099 + 13 * k) % BLOCKS;
                }
                expect_ok(w.b,
                          kvd_pull_blocks(w.b, &key, dst.id, sb, pulls[k], db, pulls[k], NULL));
                tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, pulls[k]);
                tcache_verify(&dst, &cp);
                streamed = client_status_int(w.b, "counters/bytes_streamed") - before;
                if (streaming && bytes >= (16u << 20)) {
                        ck_assert_int_gt(streamed, (int64_t)(bytes * 9 / 10));
                        ck_assert_int_le(streamed, (int64_t)bytes);
                } else
                        ck_assert_int_eq(streamed, 0);
        }
        tcache_verify_untouched(&src);
        if (!streaming)
                fprintf(stderr, "test_pull_big_streams: the daemon's CPU has no streaming copy "
                                "(AVX2): its memcpy() path only\n");

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_opts_zero_and_size)
{
        static const uint64_t sb[] = {1, 6, 3}, db[] = {4, 0, 9}, sb_more = 7, db_more = 2;
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        struct {
                kvd_transfer_opts o;
                uint64_t later_field;
        } grown = {};
        kvd_transfer_opts o = {.timeout_ms = 10000};
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 6, 8, 256, 51, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 6, 10, 256, 52, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* Only a timeout set: all 6 tensors of the 3 blocks move, nothing else. */
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dst, &cp);

        /* A size below the first version's layout. */
        o.size = 4;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, &o),
                      KVD_E_PARAM_INVALID, "opts->size is 4");
        /* A struct from a newer header: accepted while its unknown fields are zero. */
        grown.o = (kvd_transfer_opts)KVD_TRANSFER_OPTS_INIT;
        grown.o.size = sizeof(grown);
        grown.o.src_layers = grown.o.dst_layers = LAYERS(2, 2);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, &sb_more, 1, &db_more, 1, &grown.o));
        tcopies_blocks(&cp, &src, &dst, LAYERS(2, 2), LAYERS(2, 2), 2, &sb_more, &db_more, 1);
        tcache_verify(&dst, &cp);
        grown.later_field = 1;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, &grown.o),
                      KVD_E_PARAM_INVALID, "sets fields past the");
        /* A range past what the wire carries. */
        o = (kvd_transfer_opts){.src_layers = {UINT32_MAX, 1}, .dst_layers = {0, 1}};
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, &o),
                      KVD_E_PARAM_INVALID, "goes past layer");
        /* Nothing the refused calls named was written. */
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_push_blocks)
{
        static const uint64_t sb1[] = {0, 7, 3, 12};
        static const uint64_t db1[] = {15, 2, 9, 4};
        static const uint64_t sb2[] = {4, 5, 6};
        static const uint64_t db2[] = {10, 11, 12};
        kvd_cache_key key = kvd_key_blocks(A_ID, 1);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 0);
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        /* A owns the destination; B pushes into it. */
        expect_ok(w.a,
                  tcache_register(&dst, w.a, true, 4, 16, 1024, 55, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&src, w.b, true, 4, 13, 1024, 66, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb1, 4, db1, 4, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb1, db1, 4);
        tcache_verify(&dst, &cp);

        /* Contiguous run into layer 1 only. */
        o = opts_layers(LAYERS(1, 1), LAYERS(1, 1), 2);
        expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb2, 3, db2, 3, &o));
        tcopies_blocks(&cp, &src, &dst, LAYERS(1, 1), LAYERS(1, 1), 2, sb2, db2, 3);
        tcache_verify(&dst, &cp);

        /* One tensor per layer: source tensor 3 into destination tensor 0, other blocks. */
        {
                static const uint64_t sb3[] = {1}, db3[] = {0};

                o = opts_layers(LAYERS(3, 3), LAYERS(0, 0), 1);
                expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb3, 1, db3, 1, &o));
                tcopies_blocks(&cp, &src, &dst, LAYERS(3, 3), LAYERS(0, 0), 1, sb3, db3, 1);
                tcache_verify(&dst, &cp);
        }
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_pull_cache)
{
        kvd_cache_key keys[4] = {
                kvd_key_req(A_ID, 100, 0),
                kvd_key_req(A_ID, 101, 0),
                kvd_key_req(A_ID, KVD_ID_NONE, 0), /* an empty slot */
                kvd_key_prefix(A_ID, 7, 0),
        };
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        kvd_cache_key k;
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, false, 4, 4, 1024, 77, keys, 4, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, false, 4, 5, 1024, 88, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* By CacheKey (req_id): slot 1 -> slot 2, whole item. */
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[1], dst.id, 2, -1, &o));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 1, 2, -1);
        tcache_verify(&dst, &cp);

        /* By CacheKeyByIdAndIndex: slot 2 (the keyless one) -> slot 0. */
        k = kvd_key_id_index(A_ID, src.id, 2);
        expect_ok(w.b, kvd_pull_cache(w.b, &k, dst.id, 0, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 2, 0, -1);
        tcache_verify(&dst, &cp);

        /* By prefix key, 600 of the 1024 bytes of each tensor, into slot 4. */
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[3], dst.id, 4, 600, &o));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 3, 4, 600);
        tcache_verify(&dst, &cp);

        /* Layer 0 of slot 0 into layer 1 of slot 1. */
        o = opts_layers(LAYERS(0, 0), LAYERS(1, 1), 2);
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[0], dst.id, 1, -1, &o));
        tcopies_item(&cp, &src, &dst, LAYERS(0, 0), LAYERS(1, 1), 2, 0, 1, -1);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_push_cache)
{
        kvd_cache_key keys[2] = {kvd_key_req(A_ID, 500, 9), kvd_key_req(A_ID, 501, 9)};
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        kvd_cache_key k;
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&dst, w.a, false, 2, 3, 2048, 99, keys, 2, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&src, w.b, false, 2, 2, 2048, 111, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* Slot 1 into the item CacheKeyByIdAndIndex names (slot 2, which has no key). */
        k = kvd_key_id_index(A_ID, dst.id, 2);
        expect_ok(w.b, kvd_push_cache(w.b, &k, src.id, 1, -1, &o));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 1, 2, -1);
        tcache_verify(&dst, &cp);

        /* Slot 0, first 1000 bytes, into the item named by req 500 (slot 0). */
        expect_ok(w.b, kvd_push_cache(w.b, &keys[0], src.id, 0, 1000, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 0, 0, 1000);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_pull_blocks_from_item)
{
        kvd_cache_key keys[2] = {kvd_key_req(A_ID, 1, 0), kvd_key_req(A_ID, 2, 0)};
        static const uint64_t db[] = {9, 2, 14, 5};
        static const uint64_t db2[] = {0, 1, 3, 4};
        TCache src, dst;
        TCopies cp = {};
        kvd_cache_key k;
        World w;

        world_start(&w);
        /* Items of 1000 bytes fill 4 blocks of 256: the last holds 232 bytes. */
        expect_ok(w.a,
                  tcache_register(&src, w.a, false, 2, 2, 1000, 123, keys, 2, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, 16, 256, 321, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_blocks(w.b, &keys[1], dst.id, NULL, 0, db, 4, NULL));
        tcopies_item_to_blocks(&cp, &src, &dst, ALL, ALL, 2, 1, db, 4);
        tcache_verify(&dst, &cp);

        k = kvd_key_id_index(A_ID, src.id, 0);
        expect_ok(w.b, kvd_pull_blocks(w.b, &k, dst.id, NULL, 0, db2, 4, NULL));
        tcopies_item_to_blocks(&cp, &src, &dst, ALL, ALL, 2, 0, db2, 4);
        tcache_verify(&dst, &cp);

        /* Three blocks cannot hold the item. */
        expect_status(w.b, kvd_pull_blocks(w.b, &k, dst.id, NULL, 0, db, 3, NULL),
                      KVD_E_PARAM_INVALID, "fills 4");
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_pool_cache_holds)
{
        kvd_cache_key keys[2] = {kvd_key_req(A_ID, 40, 0), kvd_key_req(A_ID, 41, 0)};
        kvd_cache_key k3 = kvd_key_req(A_ID, 42, 0);
        int64_t used0, used;
        TCache src, dst, src2;
        TCopies cp = {};
        World w;

        world_start(&w);
        used0 = client_status_int(w.a, "pool/used");
        expect_ok(w.a, tcache_allocate(&src, w.a, 2, 2, 4096, 0xabc, keys, 2));
        used = client_status_int(w.a, "pool/used");
        ck_assert_msg(used >= used0 + 2 * 2 * 4096,
                      "pool used %lld after allocating 16 KiB, "
                      "%lld before",
                      (long long)used, (long long)used0);
        expect_ok(w.b, tcache_register(&dst, w.b, false, 2, 2, 4096, 0xdef, NULL, 0,
                                       KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_cache(w.b, &keys[0], dst.id, 1, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 0, 1, -1);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        /* The pull ended the key's hold: the key names nothing any more. */
        expect_status(w.b, kvd_pull_cache(w.b, &keys[0], dst.id, 0, -1, NULL),
                      KVD_E_CACHE_NOT_EXIST, "no cache under");
        tcache_verify(&dst, &cp);

        /* The id and keys[1] still hold the cache. */
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used);
        expect_ok(w.a, kvd_deallocate_cache(w.a, src.id));
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used);
        /* ... and keys[1] alone still reaches it. */
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[1], dst.id, 0, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&dst, &cp);
        /* That pull ended the last hold. */
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used0);

        /* Without a pull, kvd_remove_cache_key() ends a key's hold. */
        expect_ok(w.a, tcache_allocate(&src2, w.a, 2, 1, 4096, 0x123, &k3, 1));
        ck_assert_int_gt(client_status_int(w.a, "pool/used"), used0);
        expect_ok(w.a, kvd_deallocate_cache(w.a, src2.id));
        ck_assert_int_gt(client_status_int(w.a, "pool/used"), used0);
        expect_ok(w.a, kvd_remove_cache_key(w.a, &k3));
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used0);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/*
 * Each cluster numbers its caches from 1, as LLM-DataDist numbers an instance's (the samples
 * push to CacheKeyByIdAndIndex(cluster, 1, 0)): on one daemon A's cache 1 and B's cache 1 are
 * different caches, and a key by id reaches the named cluster's, never the caller's own.
 */
START_TEST(test_cache_ids_per_cluster)
{
        kvd_cache_key ka = kvd_key_req(A_ID, 7, 0), k;
        TCache a1, a2, a3, b1, b2, b3, dup;
        TCopies cpa = {}, cpb = {};
        int64_t used0;
        World w;

        world_start(&w);
        used0 = client_status_int(w.a, "pool/used");
        /* Registered or allocated, in each cluster's own order. */
        expect_ok(w.a, tcache_allocate(&a1, w.a, 2, 2, 4096, 0xa1, &ka, 1));
        expect_ok(w.b,
                  tcache_register(&b1, w.b, false, 2, 2, 4096, 0xb1, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b, tcache_allocate(&b2, w.b, 2, 2, 4096, 0xb2, NULL, 0));
        /* A refused allocation takes no id. */
        expect_status(w.a, tcache_allocate(&dup, w.a, 2, 2, 4096, 0xd0, &ka, 1),
                      KVD_E_CACHE_KEY_ALREADY_EXIST, "names cache 1 already");
        expect_ok(w.a,
                  tcache_register(&a2, w.a, false, 2, 2, 4096, 0xa2, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&b3, w.b, false, 2, 2, 4096, 0xb3, NULL, 0, KVD_REMOTE_DEFAULT));
        ck_assert_uint_eq(a1.id, 1);
        ck_assert_uint_eq(a2.id, 2);
        ck_assert_uint_eq(b1.id, 1);
        ck_assert_uint_eq(b2.id, 2);
        ck_assert_uint_eq(b3.id, 3);
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* B pulls A's cache 1 (item 1) into its own cache 1 (slot 0). */
        k = kvd_key_id_index(A_ID, 1, 1);
        expect_ok(w.b, kvd_pull_cache(w.b, &k, 1, 0, -1, NULL));
        tcopies_item(&cpb, &a1, &b1, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&b1, &cpb);
        tcache_verify_untouched(&a1);

        /* B pushes its cache 3 (slot 1) into A's cache 2 (slot 0); B's own cache 2 stays. */
        k = kvd_key_id_index(A_ID, 2, 0);
        expect_ok(w.b, kvd_push_cache(w.b, &k, 3, 1, -1, NULL));
        tcopies_item(&cpa, &b3, &a2, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&a2, &cpa);
        tcache_verify_untouched(&b2);
        tcache_verify_untouched(&b3);

        /* A has no cache 3, whatever B has. */
        k = kvd_key_id_index(A_ID, 3, 0);
        expect_status(w.b, kvd_pull_cache(w.b, &k, 1, 1, -1, NULL), KVD_E_CACHE_NOT_EXIST,
                      "no cache under");
        expect_status(w.b, kvd_push_cache(w.b, &k, 3, 0, -1, NULL), KVD_E_CACHE_NOT_EXIST,
                      "no cache under");
        tcache_verify(&b1, &cpb);
        tcache_verify(&a2, &cpa);
        tcache_verify_untouched(&b3);

        /* Unregistering cache 2 does not give its id to the next cache. */
        expect_ok(w.a, kvd_unregister_cache(w.a, 2));
        expect_ok(w.a, tcache_register(&a3, w.a, false, 2, 2, 4096, 0xa3, NULL, 0, KVD_REMOTE_NO));
        ck_assert_uint_eq(a3.id, 3);

        tcopies_free(&cpa);
        tcopies_free(&cpb);
        expect_ok(w.a, kvd_deallocate_cache(w.a, a1.id));
        expect_ok(w.a, kvd_remove_cache_key(w.a, &ka));
        expect_ok(w.b, kvd_deallocate_cache(w.b, b2.id));
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used0);
        world_stop(&w);
}
END_TEST

/*
 * kvd_remove_cache_key() of a key that is gone (ended by a successful pull, or removed already)
 * or that never named anything is a no-op, as in LLM-DataDist: pull_cache_sample.py removes its
 * keys after the decoder pulled them. Another cluster's key and keys one does not register are
 * refused.
 */
START_TEST(test_remove_gone_key)
{
        kvd_cache_key keys[2] = {kvd_key_req(A_ID, 0, 0), kvd_key_req(A_ID, 1, 0)};
        kvd_cache_key never = kvd_key_req(A_ID, 99, 0), never_blocks = kvd_key_blocks(A_ID, 5);
        kvd_cache_key theirs = kvd_key_req(B_ID, 0, 0), by_id;
        TCache src, dst;
        TCopies cp = {};
        int64_t used0;
        World w;

        world_start(&w);
        used0 = client_status_int(w.a, "pool/used");
        expect_ok(w.a, tcache_allocate(&src, w.a, 2, 2, 4096, 0x5a, keys, 2));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, false, 2, 2, 4096, 0x5b, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[0], dst.id, 0, -1, NULL));
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[1], dst.id, 1, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 0, 0, -1);
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 1, 1, -1);
        tcache_verify(&dst, &cp);

        /* Both keys ended with their pulls: removing them, twice, is success. */
        for (unsigned i = 0; i < 2; i++) {
                expect_ok(w.a, kvd_remove_cache_key(w.a, &keys[0]));
                expect_ok(w.a, kvd_remove_cache_key(w.a, &keys[1]));
        }
        expect_ok(w.a, kvd_remove_cache_key(w.a, &never));
        expect_ok(w.a, kvd_remove_cache_key(w.a, &never_blocks));
        /* None of it ended the id's hold. */
        ck_assert_int_gt(client_status_int(w.a, "pool/used"), used0);
        tcache_verify_untouched(&src);

        expect_status(w.a, kvd_remove_cache_key(w.a, &theirs), KVD_E_PARAM_INVALID,
                      "can remove only its own keys");
        by_id = kvd_key_id_index(A_ID, src.id, 0);
        expect_status(w.a, kvd_remove_cache_key(w.a, &by_id), KVD_E_PARAM_INVALID,
                      "cannot be removed");
        expect_ok(w.a, kvd_deallocate_cache(w.a, src.id));
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used0);
        /* A key of a cache that is gone altogether: still a no-op. */
        expect_ok(w.a, kvd_remove_cache_key(w.a, &keys[0]));
        tcache_verify(&dst, &cp);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_pool_cache_dealloc_after_pull)
{
        kvd_cache_key key = kvd_key_req(A_ID, 77, 0);
        int64_t used0;
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        used0 = client_status_int(w.a, "pool/used");
        expect_ok(w.a, tcache_allocate(&src, w.a, 4, 1, 8192, 0x77, &key, 1));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, false, 4, 1, 8192, 0x78, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, kvd_pull_cache(w.b, &key, dst.id, 0, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 0, 0, -1);
        tcache_verify(&dst, &cp);
        ck_assert_int_gt(client_status_int(w.a, "pool/used"), used0);
        expect_ok(w.a, kvd_deallocate_cache(w.a, src.id));
        ck_assert_int_eq(client_status_int(w.a, "pool/used"), used0);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

START_TEST(test_async)
{
        kvd_cache_key ka = kvd_key_blocks(A_ID, 0), kd = kvd_key_blocks(A_ID, 1);
        kvd_cache_key rk[2] = {kvd_key_req(A_ID, 10, 0), kvd_key_req(A_ID, 11, 0)};
        kvd_cache_key dk[2] = {kvd_key_req(A_ID, 20, 0), kvd_key_req(A_ID, 21, 0)};
        static const uint64_t sb[] = {1, 3, 5, 7}, db[] = {6, 4, 2, 0};
        TCache a_src_b, a_src_c, a_dst_b, a_dst_c, b_dst_b, b_dst_c, b_src_b, b_src_c;
        TCopies c1 = {}, c2 = {}, c3 = {}, c4 = {};
        kvd_task *t[4] = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&a_src_b, w.a, true, 2, 8, 512, 1, &ka, 1, 0));
        expect_ok(w.a, tcache_register(&a_src_c, w.a, false, 2, 2, 512, 2, rk, 2, 0));
        expect_ok(w.a, tcache_register(&a_dst_b, w.a, true, 2, 8, 512, 3, &kd, 1, 0));
        expect_ok(w.a, tcache_register(&a_dst_c, w.a, false, 2, 2, 512, 4, dk, 2, 0));
        expect_ok(w.b, tcache_register(&b_dst_b, w.b, true, 2, 8, 512, 5, NULL, 0, 0));
        expect_ok(w.b, tcache_register(&b_dst_c, w.b, false, 2, 2, 512, 6, NULL, 0, 0));
        expect_ok(w.b, tcache_register(&b_src_b, w.b, true, 2, 8, 512, 7, NULL, 0, 0));
        expect_ok(w.b, tcache_register(&b_src_c, w.b, false, 2, 2, 512, 8, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_blocks_async(w.b, &ka, b_dst_b.id, sb, 4, db, 4, NULL, &t[0]));
        expect_ok(w.b, kvd_pull_cache_async(w.b, &rk[1], b_dst_c.id, 0, -1, NULL, &t[1]));
        expect_ok(w.b, kvd_push_blocks_async(w.b, &kd, b_src_b.id, sb, 4, db, 4, NULL, &t[2]));
        expect_ok(w.b, kvd_push_cache_async(w.b, &dk[0], b_src_c.id, 1, -1, NULL, &t[3]));
        for (int i = 3; i >= 0; i--) {
                int r = kvd_task_wait(t[i], 10000);

                ck_assert_msg(r == KVD_OK, "task %d: %s: %s", i, kvd_strerror(r),
                              kvd_last_error(w.b));
                /* A completed task keeps its status. */
                ck_assert_int_eq(kvd_task_wait(t[i], 0), KVD_OK);
                kvd_task_free(t[i]);
        }

        tcopies_blocks(&c1, &a_src_b, &b_dst_b, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&b_dst_b, &c1);
        tcopies_item(&c2, &a_src_c, &b_dst_c, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&b_dst_c, &c2);
        tcopies_blocks(&c3, &b_src_b, &a_dst_b, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&a_dst_b, &c3);
        tcopies_item(&c4, &b_src_c, &a_dst_c, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&a_dst_c, &c4);
        tcache_verify_untouched(&a_src_b);
        tcache_verify_untouched(&a_src_c);
        tcache_verify_untouched(&b_src_b);
        tcache_verify_untouched(&b_src_c);

        /* An async request the daemon refuses reports the refusal through its task. */
        {
                static const uint64_t bad[] = {99};
                kvd_task *bt = NULL;
                int r;

                r = kvd_pull_blocks_async(w.b, &ka, b_dst_b.id, bad, 1, db, 1, NULL, &bt);
                if (r == KVD_OK) {
                        r = kvd_task_wait(bt, 10000);
                        kvd_task_free(bt);
                }
                expect_status(w.b, r, KVD_E_PARAM_INVALID, "src_blocks[0]=99 is out of range");
                tcache_verify(&b_dst_b, &c1);
        }

        tcopies_free(&c1);
        tcopies_free(&c2);
        tcopies_free(&c3);
        tcopies_free(&c4);
        world_stop(&w);
}
END_TEST

START_TEST(test_blocks_key_last_wins)
{
        static const uint64_t sb[] = {0, 1, 2, 3}, db[] = {3, 2, 1, 0};
        kvd_cache_key key = kvd_key_blocks(A_ID, 5);
        TCache first, second, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&first, w.a, true, 2, 4, 256, 0x1111, &key, 1, 0));
        expect_ok(w.a, tcache_register(&second, w.a, true, 2, 4, 256, 0x2222, &key, 1, 0));
        ck_assert_uint_ne(first.id, second.id);
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 4, 256, 0x3333, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 4, db, 4, NULL));
        tcopies_blocks(&cp, &second, &dst, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&dst, &cp);

        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* Pseudo-random permutation step: scattered on both sides, nothing to merge. */
#define SCATTER 7919

START_TEST(test_timeout)
{
        const uint64_t n_blocks = 24576; /* 2 tensors x 24576 x 4 KiB = 192 MiB */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb, *db;
        uint8_t *snap;
        TCache src, dst;
        TCopies cp = {};
        World w;
        int r;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, n_blocks, 4096, 0x5151, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, n_blocks, 4096, 0x6161, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        sb = calloc(n_blocks, sizeof(*sb));
        db = calloc(n_blocks, sizeof(*db));
        ck_assert(sb && db);
        for (uint64_t i = 0; i < n_blocks; i++) {
                sb[i] = i;
                db[i] = (i * SCATTER) % n_blocks;
        }

        o.timeout_ms = 1;
        r = kvd_pull_blocks(w.b, &key, dst.id, sb, n_blocks, db, n_blocks, &o);
        snap = malloc(dst.mem_size);
        ck_assert_ptr_nonnull(snap);
        memcpy(snap, dst.mem, dst.mem_size);
        expect_status(w.b, r, KVD_E_TIMEOUT, "did not finish within 1 ms");
        harness_sleep_ms(300);
        ck_assert_msg(memcmp(snap, dst.mem, dst.mem_size) == 0,
                      "the destination changed after the transfer timed out");
        /* What landed before the deadline is source bytes; nothing else changed. */
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n_blocks);
        tcache_verify_old_or_new(&dst, &cp);

        /* The same transfer with time to finish is exact. */
        o.timeout_ms = 60000;
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, n_blocks, db, n_blocks, &o));
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        ck_assert_int_ge(client_status_int(w.b, "counters/transfers_failed"), 1);

        free(snap);
        free(sb);
        free(db);
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* Big transfers for the tests that act while one runs: 2 x 8192 x 4 KiB = 64 MiB. */
#define BIG_BLOCKS 8192
#define BIG_BLOCK_BYTES 4096

static void big_lists(uint64_t **sb, uint64_t **db)
{
        *sb = calloc(BIG_BLOCKS, sizeof(uint64_t));
        *db = calloc(BIG_BLOCKS, sizeof(uint64_t));
        ck_assert(*sb && *db);
        for (uint64_t i = 0; i < BIG_BLOCKS; i++) {
                (*sb)[i] = i;
                (*db)[i] = (i * SCATTER) % BIG_BLOCKS;
        }
}

/* The source's owner unregisters it while a pull reads it: the pull still lands exact bytes. */
START_TEST(test_unregister_during_transfer)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_task *task = NULL;
        uint64_t *sb, *db;
        TCache src, dst;
        TCopies cp = {};
        World w;
        int r;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 1, &key, 1, 0));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 2, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        big_lists(&sb, &db);
        o.timeout_ms = 60000;
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o,
                                             &task));
        r = kvd_unregister_cache(w.a, src.id);
        fprintf(stderr, "unregister during a pull: %s\n", kvd_strerror(r));
        ck_assert_msg(r == KVD_OK || r == KVD_E_BUSY, "unregister mid-transfer: %s (%s)",
                      kvd_strerror(r), kvd_last_error(w.a));
        expect_ok(w.b, kvd_task_wait(task, 30000));
        kvd_task_free(task);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, BIG_BLOCKS);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        if (r == KVD_E_BUSY)
                expect_ok(w.a, kvd_unregister_cache(w.a, src.id));
        /* Gone now. */
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 1, db, 1, NULL),
                      KVD_E_CACHE_NOT_EXIST, NULL);
        ck_assert_int_eq(client_status_int(w.a, "transfers_in_flight"), 0);
        expect_ok(w.a, kvd_mem_free(w.a, src.mem));

        free(sb);
        free(db);
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* Unlinking under a running pull: refused with LINK_BUSY, or with force the pull stops. */
START_TEST(test_unlink_during_transfer)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_task *task = NULL;
        uint64_t *sb, *db;
        TCache src, dst, dst2;
        TCopies cp = {};
        World w;
        int r, ru;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 1, &key, 1, 0));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 2, NULL, 0, 0));
        expect_ok(w.b,
                  tcache_register(&dst2, w.b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 3, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        big_lists(&sb, &db);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, BIG_BLOCKS);
        o.timeout_ms = 60000;

        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o,
                                             &task));
        ru = kvd_unlink_clusters(w.b, &info, 1, 0, false, NULL);
        r = kvd_task_wait(task, 30000);
        kvd_task_free(task);
        fprintf(stderr, "unlink during a pull: %s\n", kvd_strerror(ru));
        expect_ok(w.b, r);
        tcache_verify(&dst, &cp);
        if (ru == KVD_OK) {
                /* The pull finished before the unlink arrived. */
                link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        } else
                expect_status(w.b, ru, KVD_E_LINK_BUSY, "transfers in flight");
        expect_ok(w.b, kvd_check_link_status(w.b, A_ID));

        /* With force the link goes at once; the pull fails or had finished, never garbage. */
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst2.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o,
                                             &task));
        expect_ok(w.b, kvd_unlink_clusters(w.b, &info, 1, 0, true, NULL));
        r = kvd_task_wait(task, 30000);
        kvd_task_free(task);
        fprintf(stderr, "pull under a forced unlink: %s\n", kvd_strerror(r));
        ck_assert_msg(r != KVD_E_TIMEOUT, "the pull hung after a forced unlink");
        tcopies_free(&cp);
        tcopies_blocks(&cp, &src, &dst2, ALL, ALL, 2, sb, db, BIG_BLOCKS);
        if (r == KVD_OK)
                tcache_verify(&dst2, &cp);
        else
                tcache_verify_old_or_new(&dst2, &cp);
        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK, NULL);
        ck_assert_int_eq(client_status_int(w.b, "transfers_in_flight"), 0);
        tcache_verify_untouched(&src);

        free(sb);
        free(db);
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* A client that finalizes with a transfer in flight: its task fails, the daemon goes on. */
START_TEST(test_finalize_during_transfer)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_task *task = NULL;
        uint64_t *sb, *db;
        TCache src, dst;
        World w;
        int r;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 1, &key, 1, 0));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 2, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        big_lists(&sb, &db);
        o.timeout_ms = 60000;
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o,
                                             &task));
        expect_ok(NULL, kvd_client_finalize(w.b));
        w.b = NULL;
        r = kvd_task_wait(task, 10000);
        ck_assert_msg(r == KVD_OK || r == KVD_E_DAEMON_UNAVAILABLE,
                      "a task of a finalized client: %s", kvd_strerror(r));
        kvd_task_free(task);

        /* The daemon dropped B and serves A as before. */
        {
                char *json = NULL;
                uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

                for (;;) {
                        expect_ok(w.a, kvd_daemon_status(w.a, &json));
                        if (status_json_int(json, "transfers_in_flight") == 0 &&
                            !strstr(json, "\"cluster_id\":2002"))
                                break;
                        ck_assert_msg(harness_now_ms() < deadline, "B lingers: %s", json);
                        free(json);
                        harness_sleep_ms(20);
                }
                free(json);
        }
        tcache_verify_untouched(&src);
        /* B's id can attach again. */
        expect_ok(NULL, harness_client_init(&w.d, B_ID, KVD_ROLE_DECODER, &w.b));

        free(sb);
        free(db);
        world_stop(&w);
}
END_TEST

/*
 * kvd_client_finalize_keep_memory() detaches the cluster like kvd_client_finalize() but leaves
 * kvd_mem_alloc() memory mapped, bytes intact, for the caller to unmap; kvd_client_finalize()
 * unmaps it.
 */
START_TEST(test_finalize_keep_memory)
{
        kvd_cache_desc desc = {
                .num_tensors = 1, .n_dims = 2, .shape = {4, 1024}, .data_type = KVD_DT_UINT8};
        size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 3 * page + 5;
        size_t mapped = (size + page - 1) / page * page;
        void *kept = NULL, *gone = NULL;
        uint8_t *bytes;
        uint64_t id;
        char *json = NULL;
        World w;

        world_start(&w);
        expect_ok(w.b, kvd_mem_alloc(w.b, size, &kept));
        harness_fill_pattern(kept, mapped, 0x6b);
        /* A cache still registered in it: finalizing unregisters it; the memory stays. */
        expect_ok(w.b,
                  kvd_register_blocks_cache(w.b, &desc, &kept, 1, NULL, KVD_REMOTE_DEFAULT, &id));
        expect_ok(w.a, kvd_mem_alloc(w.a, size, &gone));

        expect_ok(NULL, kvd_client_finalize_keep_memory(w.b));
        w.b = NULL;
        bytes = kept;
        for (size_t i = 0; i < mapped; i++)
                ck_assert_uint_eq(bytes[i], harness_pattern_byte(0x6b, i));
        bytes[mapped - 1] ^= 0xff; /* still writable */
        ck_assert_int_eq(msync(kept, mapped, MS_ASYNC), 0);
        expect_ok(w.a, kvd_daemon_status(w.a, &json));
        ck_assert_msg(!strstr(json, "\"cluster_id\":2002"), "B is still attached: %s", json);
        free(json);
        ck_assert_int_eq(munmap(kept, mapped), 0);

        expect_ok(NULL, kvd_client_finalize(w.a));
        w.a = NULL;
        ck_assert_int_eq(msync(gone, mapped, MS_ASYNC), -1);
        ck_assert_int_eq(errno, ENOMEM);
        world_stop(&w);
}
END_TEST

/* A pull by ReqKey ends the hold of the cache it read, not of one the key names later. */
START_TEST(test_key_moved_during_pull)
{
        enum { ITEM = 96u << 20 };
        kvd_cache_key k = kvd_key_req(A_ID, 77, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_task *task = NULL;
        TCache a1, a2, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_allocate(&a1, w.a, 2, 1, ITEM, 5, &k, 1));
        expect_ok(w.b, tcache_register(&dst, w.b, false, 2, 1, ITEM, 6, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        o.timeout_ms = 60000;
        expect_ok(w.b, kvd_pull_cache_async(w.b, &k, dst.id, 0, -1, &o, &task));

        /* While 192 MiB move, A takes the key off the first cache and gives it to a second. */
        ck_assert_msg(kvd_remove_cache_key(w.a, &k) == KVD_OK,
                      "the pull finished before A could move its key: %s", kvd_last_error(w.a));
        expect_ok(w.a, tcache_allocate(&a2, w.a, 2, 1, 4096, 7, &k, 1));
        expect_ok(w.b, kvd_task_wait(task, 30000));
        kvd_task_free(task);
        tcopies_item(&cp, &a1, &dst, ALL, ALL, 2, 0, 0, -1);
        tcache_verify(&dst, &cp);

        /* The key still names the second cache. */
        expect_ok(w.a, kvd_remove_cache_key(w.a, &k));
        expect_ok(w.a, kvd_deallocate_cache(w.a, a1.id));
        expect_ok(w.a, kvd_deallocate_cache(w.a, a2.id));
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/* A push's notification reaches its destination cluster once the bytes landed, in order. */
START_TEST(test_push_notify)
{
        static const uint64_t sb[] = {1, 2}, db[] = {5, 0};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_notify got[3];
        struct pollfd pfd;
        TCache src, dst;
        TCopies cp = {};
        size_t n = 7;
        int fd = -1, fd2 = -1;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&dst, w.a, true, 2, 8, 1024, 3, &key, 1, 0));
        expect_ok(w.b, tcache_register(&src, w.b, true, 2, 8, 1024, 4, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.a, kvd_notify_fd(w.a, &fd));
        expect_ok(w.a, kvd_notify_fd(w.a, &fd2));
        ck_assert_int_eq(fd, fd2);
        pfd = (struct pollfd){.fd = fd, .events = POLLIN};
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);

        o.notify = "first";
        o.notify_len = 5;
        expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb, 1, db, 1, &o));
        o.notify = "second";
        o.notify_len = 6;
        expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb + 1, 1, db + 1, 1, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&dst, &cp);

        ck_assert_int_eq(poll(&pfd, 1, 0), 1);
        expect_ok(w.a, kvd_get_notifies(w.a, got, 1, &n));
        ck_assert_uint_eq(n, 1);
        notify_check(&got[0], KVD_NOTIFY_PUSH, B_ID, "first");
        /* One is still there: the fd stays readable. */
        ck_assert_int_eq(poll(&pfd, 1, 0), 1);
        expect_ok(w.a, kvd_get_notifies(w.a, got, 3, &n));
        ck_assert_uint_eq(n, 1);
        notify_check(&got[0], KVD_NOTIFY_PUSH, B_ID, "second");
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);

        /* Too long: refused by the library before anything moves. */
        o.notify_len = KVD_NOTIFY_MAX + 1;
        expect_status(w.b, kvd_push_blocks(w.b, &key, src.id, sb, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "notify_len");
        /* The pushing cluster gets none; a client that is no cluster cannot ask. */
        expect_ok(w.b, kvd_get_notifies(w.b, got, 3, &n));
        ck_assert_uint_eq(n, 0);
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

/*
 * A pull's notification reaches the cluster it read from (kind PULL, from the puller) once every
 * byte was read; on one daemon before the puller's call returns. Pushes' and pulls' share one
 * queue, in order. A pull that fails tells nothing.
 */
START_TEST(test_pull_notify)
{
        static const uint64_t sb[] = {6, 1, 3}, db[] = {0, 7, 4};
        static const uint64_t psb[] = {2, 5}, pdb[] = {2, 5};
        static const uint64_t far = 99;
        static uint8_t big[KVD_NOTIFY_MAX + 1];
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_notify got[4];
        struct pollfd pfd;
        TCache asrc, bdst, bsrc;
        TCopies cpa = {}, cpb = {};
        size_t n = 7;
        int fd = -1;
        World w;

        world_start(&w);
        /* A owns the blocks B pulls from and pushes into. */
        expect_ok(w.a, tcache_register(&asrc, w.a, true, 2, 8, 1024, 0x31, &key, 1, 0));
        expect_ok(w.b, tcache_register(&bdst, w.b, true, 2, 8, 1024, 0x32, NULL, 0, 0));
        expect_ok(w.b, tcache_register(&bsrc, w.b, true, 2, 8, 1024, 0x33, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.a, kvd_notify_fd(w.a, &fd));
        pfd = (struct pollfd){.fd = fd, .events = POLLIN};

        /* Bad notifications and a pull that fails: nothing moves, nothing is told. */
        o.notify = NULL;
        o.notify_len = 3;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 3, db, 3, &o),
                      KVD_E_PARAM_INVALID, "opts.notify is NULL");
        o.notify = big;
        o.notify_len = sizeof(big);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 3, db, 3, &o),
                      KVD_E_PARAM_INVALID, "notify_len");
        o.notify = "lost";
        o.notify_len = 4;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, &far, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "out of range");
        tcache_verify_untouched(&bdst);
        tcache_verify_untouched(&asrc);
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);

        /* Every byte was read when the puller's call returns: the notification waits already. */
        o.notify = "blocks 6 1 3 read";
        o.notify_len = sizeof("blocks 6 1 3 read") - 1;
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 3, db, 3, &o));
        tcopies_blocks(&cpb, &asrc, &bdst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&bdst, &cpb);
        ck_assert_int_eq(poll(&pfd, 1, 0), 1);
        notifies_take(w.a, fd, got, 1);
        notify_check(&got[0], KVD_NOTIFY_PULL, B_ID, "blocks 6 1 3 read");

        /* Push, pull, push: one queue, in the order the transfers ended. */
        o.notify = "push 1";
        o.notify_len = 6;
        expect_ok(w.b, kvd_push_blocks(w.b, &key, bsrc.id, psb, 1, pdb, 1, &o));
        o.notify = "pull 1";
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 1, db, 1, &o));
        o.notify = "push 2";
        expect_ok(w.b, kvd_push_blocks(w.b, &key, bsrc.id, psb + 1, 1, pdb + 1, 1, &o));
        tcopies_blocks(&cpa, &bsrc, &asrc, ALL, ALL, 2, psb, pdb, 2);
        tcache_verify(&asrc, &cpa);
        tcache_verify(&bdst, &cpb);
        notifies_take(w.a, fd, got, 3);
        notify_check(&got[0], KVD_NOTIFY_PUSH, B_ID, "push 1");
        notify_check(&got[1], KVD_NOTIFY_PULL, B_ID, "pull 1");
        notify_check(&got[2], KVD_NOTIFY_PUSH, B_ID, "push 2");

        /* The puller is told nothing. */
        expect_ok(w.b, kvd_get_notifies(w.b, got, 4, &n));
        ck_assert_uint_eq(n, 0);
        tcopies_free(&cpa);
        tcopies_free(&cpb);
        world_stop(&w);
}
END_TEST

/* Pool pages come back zeroed: a cache never sees what an earlier one held. */
START_TEST(test_pool_reuse_zeroed)
{
        kvd_cache_desc desc = {
                .num_tensors = 2, .n_dims = 2, .shape = {2, 32768}, .data_type = KVD_DT_UINT8};
        void *addrs[2];
        uint64_t id;
        TCache tc;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_allocate(&tc, w.a, 2, 2, 32768, 0x5eed, NULL, 0));
        expect_ok(w.a, kvd_deallocate_cache(w.a, tc.id));
        expect_ok(w.b, kvd_allocate_cache(w.b, &desc, NULL, 0, &id, addrs));
        for (int t = 0; t < 2; t++) {
                const uint8_t *p = addrs[t];

                for (size_t i = 0; i < 2 * 32768; i++)
                        if (p[i] != 0)
                                ck_abort_msg("byte %zu of tensor %d of a fresh pool cache is "
                                             "0x%02x, not 0",
                                             i, t, p[i]);
        }
        expect_ok(w.b, kvd_deallocate_cache(w.b, id));
        world_stop(&w);
}
END_TEST

static Suite *local_suite(void)
{
        Suite *s = suite_create("integration-local");
        TCase *tc;

        tc = tcase_create("transfers");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_pull_blocks);
        tcase_add_test(tc, test_pull_blocks_layers);
        tcase_add_test(tc, test_pull_big_streams);
        tcase_add_test(tc, test_opts_zero_and_size);
        tcase_add_test(tc, test_push_blocks);
        tcase_add_test(tc, test_pull_cache);
        tcase_add_test(tc, test_push_cache);
        tcase_add_test(tc, test_pull_blocks_from_item);
        tcase_add_test(tc, test_async);
        tcase_add_test(tc, test_blocks_key_last_wins);
        tcase_add_test(tc, test_push_notify);
        tcase_add_test(tc, test_pull_notify);
        suite_add_tcase(s, tc);

        tc = tcase_create("pool");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_pool_cache_holds);
        tcase_add_test(tc, test_pool_cache_dealloc_after_pull);
        tcase_add_test(tc, test_cache_ids_per_cluster);
        tcase_add_test(tc, test_remove_gone_key);
        tcase_add_test(tc, test_pool_reuse_zeroed);
        tcase_add_test(tc, test_finalize_keep_memory);
        suite_add_tcase(s, tc);

        tc = tcase_create("in-flight");
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_timeout);
        tcase_add_test(tc, test_unregister_during_transfer);
        tcase_add_test(tc, test_unlink_during_transfer);
        tcase_add_test(tc, test_finalize_during_transfer);
        tcase_add_test(tc, test_key_moved_during_pull);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(local_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
