/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of local info and lazy links: kvd_local_info() lines, kvd_link_remote(),
 * transfers and batch entries that link first (kvd_transfer_opts.remote_info), on one daemon
 * and across two, every destination byte checked; and the lines and uses that are refused.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

static char *local_info(kvd_client *c)
{
        char *s = NULL;

        expect_ok(c, kvd_local_info(c, &s));
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_lt(strlen(s), KVD_LOCAL_INFO_MAX);
        return s;
}

/* The lines of a server and of a client cluster, and a link made from one. */
START_TEST(test_local_info_link)
{
        static const uint64_t sb[] = {4, 1, 6}, db[] = {0, 7, 2};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        char *ia, *ib, want[64];
        const char *addr;
        TCache src, dst;
        TCopies cp = {};
        World w;

        world_start(&w);
        ia = local_info(w.a);
        ib = local_info(w.b);
        ck_assert_msg(strncmp(ia, "kvdist1;compat=", 15) == 0, "%s", ia);
        (void)snprintf(want, sizeof(want), ";cluster=%d;role=prompt;addr=127.0.0.1:", A_ID);
        ck_assert_msg(strstr(ia, want), "%s lacks %s", ia, want);
        /* A attached with port 0: the line has the port it was given. */
        addr = strstr(ia, ";addr=") + strlen(";addr=127.0.0.1:");
        ck_assert_int_gt(atoi(addr), 0);
        (void)snprintf(want, sizeof(want), ";cluster=%d;role=decoder", B_ID);
        ck_assert_msg(strstr(ib, want) && !strstr(ib, "addr="), "%s", ib);

        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 8, 512, 71, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, 8, 512, 72, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK, NULL);
        expect_ok(w.b, kvd_link_remote(w.b, ia, 0));
        expect_ok(w.b, kvd_check_link_status(w.b, A_ID));
        expect_status(w.b, kvd_link_remote(w.b, ia, 0), KVD_E_ALREADY_LINK, NULL);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dst, &cp);

        /* B is a client: nobody links to it. */
        expect_status(w.a, kvd_link_remote(w.a, ib, 0), KVD_E_LINK_FAILED, "accepts no links");
        tcopies_free(&cp);
        free(ia);
        free(ib);
        world_stop(&w);
}
END_TEST

/* Lines that are not what kvd_local_info() writes, or from another protocol. */
START_TEST(test_local_info_refusals)
{
        static const uint64_t s1[] = {1}, d1[] = {2};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = {};
        char *ia, bad[KVD_LOCAL_INFO_MAX + 8];
        TCache src, dst;
        World w;

        world_start(&w);
        ia = local_info(w.a);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 4, 256, 73, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 2, 4, 256, 74, NULL, 0, KVD_REMOTE_DEFAULT));

        expect_status(NULL, kvd_local_info(NULL, &ia), KVD_E_PARAM_INVALID, "client is NULL");
        expect_status(w.a, kvd_local_info(w.a, NULL), KVD_E_PARAM_INVALID, "ret_info is NULL");
        expect_status(w.b, kvd_link_remote(w.b, NULL, 0), KVD_E_PARAM_INVALID, "NULL");
        expect_status(w.b, kvd_link_remote(w.b, "127.0.0.1:7400", 0), KVD_E_PARAM_INVALID,
                      "is not what kvd_local_info() writes");
        /* Another compat hash: the first hex digit changed. */
        (void)snprintf(bad, sizeof(bad), "%s", ia);
        bad[15] = bad[15] == '0' ? '1' : '0';
        expect_status(w.b, kvd_link_remote(w.b, bad, 0), KVD_E_PROTOCOL_MISMATCH,
                      "speaks another protocol");
        (void)snprintf(bad, sizeof(bad), "%.23s;cluster=x;role=prompt", ia);
        expect_status(w.b, kvd_link_remote(w.b, bad, 0), KVD_E_PARAM_INVALID, "no cluster=<id>");
        (void)snprintf(bad, sizeof(bad), "%.23s;cluster=5;role=leader;addr=1.2.3.4:5", ia);
        expect_status(w.b, kvd_link_remote(w.b, bad, 0), KVD_E_PARAM_INVALID,
                      "role is not prompt, decoder or mix");
        (void)snprintf(bad, sizeof(bad), "%s;more=1", ia);
        expect_status(w.b, kvd_link_remote(w.b, bad, 0), KVD_E_PARAM_INVALID,
                      "is not ;addr=<ip:port>");
        memset(bad, 'k', sizeof(bad) - 1);
        bad[sizeof(bad) - 1] = '\0';
        expect_status(w.b, kvd_link_remote(w.b, bad, 0), KVD_E_PARAM_INVALID,
                      "longer than KVD_LOCAL_INFO_MAX");
        /* A line of another cluster than the transfer's key names. */
        (void)snprintf(bad, sizeof(bad), "%.23s;cluster=%d;role=prompt;addr=127.0.0.1:1", ia, C_ID);
        o.remote_info = bad;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, s1, 1, d1, 1, &o),
                      KVD_E_PARAM_INVALID, "the transfer's key cluster 1001");
        /* Nothing was linked or moved by any of them. */
        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK, NULL);
        tcache_verify_untouched(&dst);
        free(ia);
        world_stop(&w);
}
END_TEST

/*
 * Across two daemons, nothing linked beforehand: a pull that links first, then a batch whose
 * entries name two clusters of the other node by their lines; all byte-exact.
 */
START_TEST(test_lazy_links_remote)
{
        static const uint64_t sb[] = {3, 0, 5}, db[] = {1, 2, 9}, sb2[] = {7, 6}, db2[] = {4, 5};
        kvd_cache_key k1 = kvd_key_blocks(A_ID, 0), k2 = kvd_key_blocks(C_ID, 0);
        static const int ok[] = {KVD_OK, KVD_OK};
        kvd_transfer_opts o = {.timeout_ms = 30000};
        TCache s1, s2, d1, d2;
        TCopies c1 = {}, c2 = {};
        kvd_client *a, *c, *b;
        char *ia, *ic;
        kvd_task *t;
        Node n[2];

        node_start(&n[0]);
        node_start(&n[1]);
        a = node_server(&n[0], A_ID, KVD_ROLE_PROMPT);
        c = node_server(&n[0], C_ID, KVD_ROLE_PROMPT);
        b = node_client(&n[1], B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&s1, a, true, 4, 10, 512, 81, &k1, 1, KVD_REMOTE_YES));
        expect_ok(c, tcache_register(&s2, c, true, 4, 10, 512, 82, &k2, 1, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&d1, b, true, 4, 10, 512, 83, NULL, 0, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&d2, b, true, 4, 10, 512, 84, NULL, 0, KVD_REMOTE_YES));
        ia = local_info(a);
        ic = local_info(c);

        o.remote_info = ia;
        expect_ok(b, kvd_pull_blocks(b, &k1, d1.id, sb, 3, db, 3, &o));
        expect_ok(b, kvd_check_link_status(b, A_ID));
        tcopies_blocks(&c1, &s1, &d1, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&d1, &c1);

        /* A is linked by now, C is not: the batch links to C alone, then moves both. */
        {
                kvd_batch_entry e[] = {
                        {.kind = KVD_PULL_BLOCKS,
                         .key = k1,
                         .cache_id = d1.id,
                         .src_blocks = sb2,
                         .n_src = 2,
                         .dst_blocks = db2,
                         .n_dst = 2,
                         .remote_info = ia},
                        {.kind = KVD_PULL_BLOCKS,
                         .key = k2,
                         .cache_id = d2.id,
                         .src_blocks = sb2,
                         .n_src = 2,
                         .dst_blocks = db2,
                         .n_dst = 2,
                         .remote_info = ic},
                };

                expect_ok(b, kvd_transfer_batch(b, e, 2, &(kvd_transfer_opts){.timeout_ms = 30000},
                                                &t));
                expect_ok(b, kvd_task_wait(t, -1));
                for (size_t i = 0; i < 2; i++) {
                        int st = 1;

                        expect_ok(b, kvd_task_entry_status(t, i, &st));
                        ck_assert_int_eq(st, ok[i]);
                }
                kvd_task_free(t);
        }
        expect_ok(b, kvd_check_link_status(b, C_ID));

        /* A peer that cannot be reached fails its own entry; the other lands. */
        {
                static const uint64_t sb3[] = {9}, db3[] = {8}, lost_db[] = {3, 7};
                char lost[KVD_LOCAL_INFO_MAX];
                kvd_cache_key klost = kvd_key_blocks(4004, 0);
                kvd_batch_entry e[] = {
                        {.kind = KVD_PULL_BLOCKS,
                         .key = k1,
                         .cache_id = d1.id,
                         .src_blocks = sb3,
                         .n_src = 1,
                         .dst_blocks = db3,
                         .n_dst = 1,
                         .remote_info = ia},
                        {.kind = KVD_PULL_BLOCKS,
                         .key = klost,
                         .cache_id = d2.id,
                         .src_blocks = sb2,
                         .n_src = 2,
                         .dst_blocks = lost_db,
                         .n_dst = 2,
                         .remote_info = lost},
                };
                uint64_t failed[4];
                size_t n_failed = 0;
                int st = 0;

                /* Port 1 of loopback: nothing listens there. */
                (void)snprintf(lost, sizeof(lost),
                               "%.23s;cluster=4004;role=prompt;"
                               "addr=127.0.0.1:1",
                               ia);
                expect_ok(b, kvd_transfer_batch(b, e, 2, &(kvd_transfer_opts){.timeout_ms = 30000},
                                                &t));
                expect_status(b, kvd_task_wait(t, -1), KVD_E_LINK_FAILED, "entries[1]");
                expect_ok(b, kvd_task_entry_status(t, 0, &st));
                ck_assert_int_eq(st, KVD_OK);
                expect_ok(b, kvd_task_entry_status(t, 1, &st));
                ck_assert_int_eq(st, KVD_E_LINK_FAILED);
                expect_ok(b, kvd_task_failed_blocks(t, failed, 4, &n_failed));
                ck_assert_uint_eq(n_failed, 2);
                ck_assert_uint_eq(failed[0], 3);
                ck_assert_uint_eq(failed[1], 7);
                kvd_task_free(t);
                tcopies_blocks(&c1, &s1, &d1, ALL, ALL, 2, sb3, db3, 1);
        }
        tcopies_blocks(&c1, &s1, &d1, ALL, ALL, 2, sb2, db2, 2);
        tcopies_blocks(&c2, &s2, &d2, ALL, ALL, 2, sb2, db2, 2);
        tcache_verify(&d1, &c1);
        tcache_verify(&d2, &c2);
        tcache_verify_untouched(&s1);
        tcache_verify_untouched(&s2);

        tcopies_free(&c1);
        tcopies_free(&c2);
        free(ia);
        free(ic);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(c, kvd_client_finalize(c));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&n[1]);
        node_stop(&n[0]);
}
END_TEST

static Suite *local_info_suite(void)
{
        Suite *s = suite_create("local-info");
        TCase *tc = tcase_create("local-info");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_local_info_link);
        tcase_add_test(tc, test_local_info_refusals);
        tcase_add_test(tc, test_lazy_links_remote);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(local_info_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
