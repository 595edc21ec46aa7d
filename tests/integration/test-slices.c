/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of head slices: transfers that move a byte slice of each block, so that
 * caches of different block sizes meet (a decode rank with twice the tensor parallelism reads
 * its half of each prefill block; one decode rank gathers two prefill ranks' blocks into the
 * halves of its own), on one daemon and across two, every byte checked; and the slices refused.
 */
#include <check.h>
#include <stdlib.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define HALF 1024u

/* Pulls with @opts and records the sliced copies it means. */
static void pull_sliced(kvd_client *c, const kvd_cache_key *key, TCache *src, TCache *dst,
                        kvd_slice ss, kvd_slice ds, const uint64_t *sb, const uint64_t *db,
                        size_t n, TCopies *cp)
{
        kvd_transfer_opts o = {.timeout_ms = 20000, .src_slice = ss, .dst_slice = ds};

        expect_ok(c, kvd_pull_blocks(c, key, dst->id, sb, n, db, n, &o));
        tcopies_blocks_sliced(cp, src, dst, ss, ds, sb, db, n);
}

/*
 * TP 1 -> TP 2 and back on one daemon: two decode caches of half-size blocks each read their
 * half of the prefill blocks (neighbouring blocks included); then a cache of full-size blocks
 * gathers both halves back from the two.
 */
START_TEST(test_slices_local)
{
        static const uint64_t sb[] = {6, 7, 2, 3, 0}, db[] = {1, 2, 3, 4, 7};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cache_key kh0 = kvd_key_blocks(B_ID, 10), kh1 = kvd_key_blocks(B_ID, 11);
        TCache src, half0, half1, whole;
        TCopies c0 = {}, c1 = {};
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 4, 8, 2 * HALF, 121, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&half0, w.b, true, 4, 8, HALF, 122, &kh0, 1, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&half1, w.b, true, 4, 8, HALF, 123, &kh1, 1, KVD_REMOTE_YES));
        expect_ok(w.a,
                  tcache_register(&whole, w.a, true, 4, 8, 2 * HALF, 124, NULL, 0, KVD_REMOTE_YES));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        pull_sliced(w.b, &key, &src, &half0, (kvd_slice){0, HALF}, (kvd_slice){}, sb, db, 5, &c0);
        /* length 0: the rest of the block from the offset */
        pull_sliced(w.b, &key, &src, &half1, (kvd_slice){HALF, 0}, (kvd_slice){}, sb, db, 5, &c1);
        tcache_verify(&half0, &c0);
        tcache_verify(&half1, &c1);
        tcache_verify_untouched(&src);

        /* Gather: each half-size cache's blocks land in their half of A's full-size blocks. */
        {
                static const uint64_t gb[] = {1, 2}, gd[] = {5, 6};
                TCopies x0 = {}, x1 = {};

                pull_sliced(w.a, &kh0, &half0, &whole, (kvd_slice){}, (kvd_slice){0, HALF}, gb, gd,
                            2, &x0);
                pull_sliced(w.a, &kh1, &half1, &whole, (kvd_slice){}, (kvd_slice){HALF, HALF}, gb,
                            gd, 2, &x1);
                /* Both halves of blocks 5 and 6 now hold what src's blocks 6 and 7 held. */
                for (size_t t = 0; t < 4; t++)
                        for (size_t i = 0; i < 2; i++) {
                                uint64_t d = tcache_tensor_off(&whole, (uint32_t)t) +
                                             gd[i] * whole.stride;
                                uint64_t s =
                                        tcache_tensor_off(&src, (uint32_t)t) + sb[i] * src.stride;

                                ck_assert_int_eq(harness_check_pattern_at(whole.mem + d, 2 * HALF,
                                                                          src.seed, s),
                                                 -1);
                        }
                tcopies_free(&x0);
                tcopies_free(&x1);
        }
        tcopies_free(&c0);
        tcopies_free(&c1);
        world_stop(&w);
}
END_TEST

/* What slices may not be; nothing moves for any of them. */
START_TEST(test_slices_refusals)
{
        static const uint64_t sb[] = {1}, db[] = {2};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), kreq = kvd_key_req(A_ID, 9, 0);
        TCache src, half, item, dst_item;
        kvd_transfer_opts o;
        World w;

        world_start(&w);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 2, 4, 2 * HALF, 131, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.a,
                  tcache_register(&item, w.a, false, 2, 1, HALF, 132, &kreq, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&half, w.b, true, 2, 4, HALF, 133, NULL, 0, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&dst_item, w.b, false, 2, 1, HALF, 134, NULL, 0, KVD_REMOTE_YES));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        /* Block sizes differ and no slice is named. */
        expect_status(w.b, kvd_pull_blocks(w.b, &key, half.id, sb, 1, db, 1, NULL),
                      KVD_E_CACHE_INCOMPATIBLE, "name slices of the blocks");
        o = (kvd_transfer_opts){.src_slice = {HALF, HALF + 1}};
        expect_status(w.b, kvd_pull_blocks(w.b, &key, half.id, sb, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "src_slice [1024, 2049) goes past the block of 2048");
        o = (kvd_transfer_opts){.src_slice = {2 * HALF, 0}};
        expect_status(w.b, kvd_pull_blocks(w.b, &key, half.id, sb, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "src_slice offset 2048 is not inside a block");
        o = (kvd_transfer_opts){.src_slice = {0, HALF}, .dst_slice = {8, 0}};
        expect_status(w.b, kvd_pull_blocks(w.b, &key, half.id, sb, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "they move the same bytes");
        o = (kvd_transfer_opts){.src_slice = {0, 16}};
        expect_status(w.b, kvd_pull_cache(w.b, &kreq, dst_item.id, 0, -1, &o), KVD_E_PARAM_INVALID,
                      "slices are of blocks");
        tcache_verify_untouched(&half);
        tcache_verify_untouched(&dst_item);
        world_stop(&w);
}
END_TEST

/* Across two daemons (TCP): each decode rank of TP 2 pulls its half of the prefill blocks. */
START_TEST(test_slices_remote)
{
        static const uint64_t sb[] = {3, 4, 5, 0}, db[] = {0, 1, 2, 6};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        TCache src, h0, h1;
        TCopies c0 = {}, c1 = {};
        kvd_client *a, *b;
        Node n[2];

        node_start(&n[0]);
        node_start(&n[1]);
        a = node_server(&n[0], A_ID, KVD_ROLE_PROMPT);
        b = node_client(&n[1], B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 4, 8, 2 * HALF, 141, &key, 1, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&h0, b, true, 4, 8, HALF, 142, NULL, 0, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&h1, b, true, 4, 8, HALF, 143, NULL, 0, KVD_REMOTE_YES));
        link_node(b, A_ID, &n[0]);
        pull_sliced(b, &key, &src, &h0, (kvd_slice){0, HALF}, (kvd_slice){}, sb, db, 4, &c0);
        pull_sliced(b, &key, &src, &h1, (kvd_slice){HALF, HALF}, (kvd_slice){0, HALF}, sb, db, 4,
                    &c1);
        tcache_verify(&h0, &c0);
        tcache_verify(&h1, &c1);
        tcache_verify_untouched(&src);
        tcopies_free(&c0);
        tcopies_free(&c1);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&n[1]);
        node_stop(&n[0]);
}
END_TEST

static Suite *slices_suite(void)
{
        Suite *s = suite_create("slices");
        TCase *tc = tcase_create("slices");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_slices_local);
        tcase_add_test(tc, test_slices_refusals);
        tcase_add_test(tc, test_slices_remote);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(slices_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
