/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, comm domains forming: two, three and four daemons on loopback; the domain
 * becomes OK on every member, its links carry pulls and pushes like link_clusters links; members
 * that never call link, rank tables that disagree, the limits (512 domains, 16 set-ups with the
 * rest queued in order), and many domains formed concurrently in every order.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "it-cache.h"
#include "it-domain.h"
#include "it-peers.h"
#include "it-world.h"

static const char *const short_link_time[] = { "--link-total-time", "1500", NULL };

/* Nodes P, D (and E, F) with one member cluster each: 1001, 2002, 3003, 4004. */
typedef struct Net {
        Node nodes[4];
        DomMember m[4];
        unsigned n;
        char table[RANK_TABLE_MAX];
} Net;

static void net_start(Net *w, unsigned n, const char *const *extra)
{
        memset(w, 0, sizeof(*w));
        w->n = n;
        for (unsigned i = 0; i < n; i++) {
                node_start_full(&w->nodes[i], NULL, NULL, NULL, extra);
                w->m[i] = (DomMember){ &w->nodes[i], 1001 * (i + 1), 0, NULL, 0 };
                dom_member_attach(&w->m[i]);
        }
        rank_table_build(w->table, sizeof(w->table), w->m, n, false);
}

static void net_stop(Net *w)
{
        for (unsigned i = 0; i < w->n; i++)
                if (w->m[i].client)
                        expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned i = 0; i < w->n; i++)
                node_stop(&w->nodes[i]);
}

/* Two daemons form a domain; its links carry a pull and a push, byte-exact. */
START_TEST(test_form_two)
{
        static const uint64_t sb[] = { 3, 9, 4, 0 }, db[] = { 7, 1, 2, 30 };
        kvd_cache_key key_a = kvd_key_blocks(1001, 0), key_b = kvd_key_blocks(2002, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        TCache ca, cb;
        TCopies cp = {}, cpa = {};
        kvd_mem_status st;
        char *s;
        Net w;

        net_start(&w, 2, NULL);
        /* Memory is registered before the link that exposes it. */
        expect_ok(w.m[0].client, tcache_register(&ca, w.m[0].client, true, 4, 32, 2048, 11,
                                                 &key_a, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cb, w.m[1].client, true, 4, 32, 2048, 22,
                                                 &key_b, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[0].client, dom_link(w.m, 2, 0, "prefill-decode", w.table));
        expect_ok(w.m[0].client, kvd_query_register_mem_status(w.m[0].client, w.m[0].comm_id,
                                                               &st));
        ck_assert_int_eq(st, KVD_MEM_STATUS_PREPARING);
        /* Before OK nothing goes through. */
        expect_status(w.m[0].client, kvd_pull_blocks(w.m[0].client, &key_b, ca.id, sb, 4, db, 4,
                                                     &o),
                      KVD_E_NOT_YET_LINK, NULL);
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "prefill-decode", w.table));
        dom_wait_ok(w.m, 2);

        s = dom_status_str(&w.nodes[0], "domains/0/state");
        ck_assert_str_eq(s, "ok");
        free(s);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/ring/threads"), 2);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/ring/notifies"), 4);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/mesh/channels"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "inbound_links"), 1);

        /* B pulls A's blocks, A pushes into B's: the ordinary paths over the domain's links. */
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 4, db, 4, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&cb, &cp);
        expect_ok(w.m[0].client, kvd_push_blocks(w.m[0].client, &key_b, ca.id, db, 4, sb, 4, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, db, sb, 4);
        tcache_verify(&cb, &cp);
        tcache_verify(&ca, &cpa);

        /* Unlinking one member fails the domain on the other. */
        expect_ok(w.m[0].client, kvd_unlink(w.m[0].client, w.m[0].comm_id));
        ck_assert_int_eq(dom_wait(&w.m[1], 10000), KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "rank 0"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "unlinked"));
        expect_ok(w.m[1].client, kvd_unlink(w.m[1].client, w.m[1].comm_id));
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 0);

        /* And it forms again under the same name. */
        dom_link_all(w.m, 2, "prefill-decode", w.table);
        dom_wait_ok(w.m, 2);
        tcopies_free(&cp);
        net_stop(&w);
}
END_TEST

/* A member that never calls link: FAILED after link_total_time, naming it. */
START_TEST(test_member_never_links)
{
        kvd_mem_status st;
        Net w;

        net_start(&w, 3, short_link_time);
        expect_ok(w.m[0].client, dom_link(w.m, 3, 0, "lonely", w.table));
        expect_ok(w.m[1].client, dom_link(w.m, 3, 1, "lonely", w.table));
        st = dom_wait(&w.m[0], 20000);
        ck_assert_int_eq(st, KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client), "link_total_time"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client),
                                     "rank 2 (cluster 3003"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client), "did not call link"));
        ck_assert_int_eq(dom_wait(&w.m[1], 20000), KVD_MEM_STATUS_FAILED);
        /* Failed domains stay until their members unlink them. */
        expect_status(w.m[0].client, dom_link(w.m, 3, 0, "lonely", w.table), KVD_E_ALREADY_LINK,
                      NULL);
        expect_ok(w.m[0].client, kvd_unlink(w.m[0].client, w.m[0].comm_id));
        net_stop(&w);
}
END_TEST

/* Members whose rank tables differ: both FAILED, the message says what differs. */
START_TEST(test_rank_tables_disagree)
{
        char other[RANK_TABLE_MAX];
        DomMember swapped[2];
        Net w;

        net_start(&w, 2, NULL);
        /* The same daemons, but B's table gives rank 0 device 7. */
        swapped[0] = w.m[0];
        swapped[1] = w.m[1];
        swapped[0].device_id = 7;
        rank_table_build(other, sizeof(other), swapped, 2, false);
        expect_ok(w.m[0].client, dom_link(w.m, 2, 0, "disagree", w.table));
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "disagree", other));
        /* kvd_last_error() is per thread: look right after each query. */
        ck_assert_int_eq(dom_wait(&w.m[0], 20000), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "rank tables disagree"), "%s",
                      kvd_last_error(w.m[0].client));
        ck_assert_int_eq(dom_wait(&w.m[1], 20000), KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "rank tables disagree"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "device 7"));
        net_stop(&w);
}
END_TEST

static Suite *domain_suite(void)
{
        Suite *s = suite_create("domain");
        TCase *tc = tcase_create("form");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_form_two);
        tcase_add_test(tc, test_member_never_links);
        tcase_add_test(tc, test_rank_tables_disagree);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(domain_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
