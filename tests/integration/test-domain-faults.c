/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, comm domains when members go away: a member's daemon killed while an
 * operation waits on it, a member process killed mid-operation, a member that finalizes; and
 * domains across separate hosts: four network namespaces on a bridge, the rank table naming each
 * host by its address alone (the default peer port), where the seed's ring exchange and the
 * collectives run byte-exact. The namespace tests need root and `ip netns`; they skip with the
 * reason otherwise.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define HOSTS 4

typedef struct Net {
        Node nodes[HOSTS];
        unsigned n_nodes;
        DomMember m[HOSTS];
        unsigned n;
        char table[RANK_TABLE_MAX];
} Net;

/* @n members on @n daemons (in @netns[i] listening on @listen[i] when given). */
static void net_start(Net *w, unsigned n, char (*netns)[32], char (*listen)[48], bool ip_only)
{
        memset(w, 0, sizeof(*w));
        w->n = w->n_nodes = n;
        for (unsigned i = 0; i < n; i++) {
                node_start_full(&w->nodes[i], netns ? netns[i] : NULL, listen ? listen[i] : NULL,
                                NULL, NULL);
                w->m[i] = (DomMember){&w->nodes[i], 1001 * (i + 1), 0, NULL, 0};
                dom_member_attach(&w->m[i]);
        }
        rank_table_build(w->table, sizeof(w->table), w->m, n, ip_only);
}

static void net_stop(Net *w)
{
        for (unsigned i = 0; i < w->n; i++)
                if (w->m[i].client)
                        expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned i = 0; i < w->n_nodes; i++)
                node_stop(&w->nodes[i]);
}

/* Batch calls of some members, each in its own thread. */
typedef struct Batch {
        Net *w;
        kvd_send_recv_item items[HOSTS][2];
        size_t n_items[HOSTS];
        int timeout_ms;
        int ret[HOSTS];
        char detail[HOSTS][256];
        pthread_t threads[HOSTS];
        struct BatchArg {
                struct Batch *b;
                unsigned i;
        } args[HOSTS];
} Batch;

static void *batch_main(void *p)
{
        struct BatchArg *a = p;
        Batch *b = a->b;
        DomMember *m = &b->w->m[a->i];

        b->ret[a->i] = kvd_domain_batch_send_recv(m->client, m->comm_id, b->items[a->i],
                                                  b->n_items[a->i], b->timeout_ms);
        (void)snprintf(b->detail[a->i], sizeof(b->detail[a->i]), "%s", kvd_last_error(m->client));
        return NULL;
}

static void batch_start(Batch *b, unsigned i)
{
        b->args[i] = (struct BatchArg){b, i};
        ck_assert_int_eq(pthread_create(&b->threads[i], NULL, batch_main, &b->args[i]), 0);
}

/* Waits until member @i's daemon has @n operations of the domain in flight. */
static void wait_in_flight(Net *w, unsigned i, int64_t n)
{
        while (dom_status_int(w->m[i].node, "domains/0/calls_in_flight") != n)
                harness_sleep_ms(5);
}

/* The daemon of rank 2 dies while ranks 0 and 1 wait in an operation with it: they fail with
 * PEER_LOST (not the TIMEOUT of their 60 s), and the domain fails saying whose daemon went. */
START_TEST(test_member_daemon_killed)
{
        void *buf[2];
        Batch b = {0};
        Net w;

        net_start(&w, 3, NULL, NULL, false);
        dom_link_all(w.m, 3, "doomed", w.table);
        dom_wait_ok(w.m, 3);
        for (unsigned i = 0; i < 3; i++)
                dom_check_channels(&w.nodes[i], false);
        b.w = &w;
        b.timeout_ms = 60000;
        /* Both send to rank 2, whose client does not call: the sends wait for it. */
        for (unsigned i = 0; i < 2; i++) {
                expect_ok(w.m[i].client, kvd_mem_alloc(w.m[i].client, 1 << 20, &buf[i]));
                b.items[i][0] = (kvd_send_recv_item){KVD_SEND, buf[i], 1 << 18, KVD_DT_FLOAT, 2};
                b.n_items[i] = 1;
                batch_start(&b, i);
        }
        wait_in_flight(&w, 0, 1);
        wait_in_flight(&w, 1, 1);
        ck_assert_int_eq(harness_daemon_kill(&w.nodes[2].d), 0);
        for (unsigned i = 0; i < 2; i++) {
                pthread_join(b.threads[i], NULL);
                ck_assert_msg(b.ret[i] == KVD_E_PEER_LOST, "rank %u: %s: %s", i,
                              kvd_strerror(b.ret[i]), b.detail[i]);
        }
        ck_assert_int_eq(dom_wait_failed(&w.m[0], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "rank 2"), "%s",
                      kvd_last_error(w.m[0].client));
        /* Its client sees its daemon gone. */
        ck_assert_int_eq(kvd_client_finalize(w.m[2].client), KVD_E_DAEMON_UNAVAILABLE);
        w.m[2].client = NULL;
        harness_daemon_cleanup(&w.nodes[2].d);
        w.n_nodes = 2;
        net_stop(&w);
}
END_TEST

typedef struct ChildArg {
        Net *w;
        unsigned rank;
} ChildArg;

/* A member in its own process: it joins, waits for OK, says so, then blocks in a receive from
 * rank 0 (which never sends) until it is killed. */
static int member_child(void *p)
{
        ChildArg *a = p;
        DomMember *m = &a->w->m[a->rank];
        kvd_cluster_rank info[HOSTS];
        kvd_option opts[2] = {{"socket_path", m->node->d.socket_path}, {"device_id", "0"}};
        kvd_send_recv_item it;
        kvd_mem_status st = KVD_MEM_STATUS_PREPARING;
        void *buf;

        if (kvd_client_init(m->cluster_id, KVD_ROLE_MIX, opts, 2, &m->client) < 0)
                return 10;
        for (unsigned r = 0; r < a->w->n; r++)
                info[r] = (kvd_cluster_rank){a->w->m[r].cluster_id, r};
        if (kvd_domain_link(m->client, "crash", info, a->w->n, a->w->table, &m->comm_id) < 0)
                return 11;
        while (st == KVD_MEM_STATUS_PREPARING) {
                if (kvd_domain_status(m->client, m->comm_id, &st) < 0)
                        return 12;
                harness_sleep_ms(5);
        }
        if (st != KVD_MEM_STATUS_OK || kvd_mem_alloc(m->client, 1 << 20, &buf) < 0)
                return 13;
        harness_child_ready(0);
        it = (kvd_send_recv_item){KVD_RECV, buf, 1 << 18, KVD_DT_FLOAT, 0};
        (void)kvd_domain_batch_send_recv(m->client, m->comm_id, &it, 1, 60000);
        return 14;
}

/* A member process dies mid-operation: rank 2, waiting to receive from it, fails at once with
 * PEER_LOST, nothing lands in its buffer, and the domain fails on the other members. */
START_TEST(test_member_process_killed)
{
        ChildArg arg;
        HarnessChild child;
        Batch b = {0};
        void *recv_buf;
        Net w;

        memset(&w, 0, sizeof(w));
        w.n = w.n_nodes = 3;
        for (unsigned i = 0; i < 3; i++) {
                node_start(&w.nodes[i]);
                w.m[i] = (DomMember){&w.nodes[i], 1001 * (i + 1), 0, NULL, 0};
        }
        rank_table_build(w.table, sizeof(w.table), w.m, 3, false);
        arg = (ChildArg){&w, 1};
        ck_assert_int_eq(harness_fork_client(member_child, &arg, &child), 0);
        for (unsigned i = 0; i < 3; i += 2) {
                dom_member_attach(&w.m[i]);
                expect_ok(w.m[i].client, dom_link(w.m, 3, i, "crash", w.table));
        }
        if (harness_child_wait_ready(&child, harness_wait_ms(), NULL) != 0) {
                for (unsigned i = 0; i < 3; i++)
                        harness_daemon_dump_log(&w.nodes[i].d, 0);
                ck_abort_msg("the member process did not see the domain OK");
        }
        dom_wait_ok(&w.m[0], 1);
        dom_wait_ok(&w.m[2], 1);
        wait_in_flight(&w, 1, 1);
        dom_check_channels(&w.nodes[2], false);

        expect_ok(w.m[2].client, kvd_mem_alloc(w.m[2].client, 1 << 20, &recv_buf));
        harness_fill_pattern(recv_buf, 1 << 20, 99);
        b.w = &w;
        b.timeout_ms = 60000;
        b.items[2][0] = (kvd_send_recv_item){KVD_RECV, recv_buf, 1 << 18, KVD_DT_FLOAT, 1};
        b.n_items[2] = 1;
        batch_start(&b, 2);
        wait_in_flight(&w, 2, 1);
        ck_assert_int_eq(harness_child_kill(&child, SIGKILL), 128 + SIGKILL);
        pthread_join(b.threads[2], NULL);
        ck_assert_msg(b.ret[2] == KVD_E_PEER_LOST, "%s: %s", kvd_strerror(b.ret[2]), b.detail[2]);
        ck_assert_int_lt(harness_check_pattern(recv_buf, 1 << 20, 99), 0);
        ck_assert_int_eq(dom_wait_failed(&w.m[0], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "rank 1 (cluster 2002") &&
                              strstr(kvd_last_error(w.m[0].client), "detached"),
                      "%s", kvd_last_error(w.m[0].client));
        /* Its daemon dropped the member: nothing of the domain is left there. */
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 0);
        net_stop(&w);
}
END_TEST

/* A member that finalizes fails the domain everywhere else. */
START_TEST(test_member_finalizes)
{
        Net w;

        net_start(&w, 2, NULL, NULL, false);
        dom_link_all(w.m, 2, "bye", w.table);
        dom_wait_ok(w.m, 2);
        expect_ok(w.m[1].client, kvd_client_finalize(w.m[1].client));
        w.m[1].client = NULL;
        ck_assert_int_eq(dom_wait_failed(&w.m[0], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "detached"), "%s",
                      kvd_last_error(w.m[0].client));
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 0);
        net_stop(&w);
}
END_TEST

/* ---- separate hosts: network namespaces on a bridge ---- */

static char ns_sw[32], ns_host[HOSTS][32], listen_at[HOSTS][48];
static const char *skip_reason;

static int ip(const char *first, ...)
{
        const char *argv[24] = {"/usr/sbin/ip", first};
        char *out = NULL, *err = NULL;
        size_t n = 2;
        va_list ap;
        int r;

        va_start(ap, first);
        while (n < 23 && (argv[n] = va_arg(ap, const char *)))
                n++;
        va_end(ap);
        argv[n] = NULL;
        if (access(argv[0], X_OK) < 0)
                argv[0] = "/sbin/ip";
        r = harness_run(argv, &out, &err);
        if (r != 0)
                fprintf(stderr, "test-domain-faults: ip %s ...: exit %d: %s", first, r,
                        err ? err : "");
        free(out);
        free(err);
        return r;
}

static void hosts_teardown(void)
{
        if (!ns_sw[0])
                return;
        for (unsigned i = 0; i < HOSTS; i++)
                if (ns_host[i][0])
                        (void)ip("netns", "del", ns_host[i], NULL);
        (void)ip("netns", "del", ns_sw, NULL);
        ns_sw[0] = '\0';
}

/* A switch namespace with a bridge, and HOSTS host namespaces each on a veth to it, addresses
 * 10.78.<k>.<1..HOSTS>/24. */
static void hosts_setup(void)
{
        unsigned k = (unsigned)getpid() % 250 + 1;
        int pid = (int)getpid() % 10000;

        skip_reason = NULL;
        if (geteuid() != 0) {
                skip_reason = "not root: network namespaces need CAP_SYS_ADMIN";
                return;
        }
        (void)snprintf(ns_sw, sizeof(ns_sw), "kvd-sw-%d", (int)getpid());
        if (ip("netns", "add", ns_sw, NULL) != 0) {
                ns_sw[0] = '\0';
                skip_reason = "`ip netns add` failed: no network namespaces here";
                return;
        }
        if (ip("-n", ns_sw, "link", "add", "br0", "type", "bridge", NULL) != 0 ||
            ip("-n", ns_sw, "link", "set", "br0", "up", NULL) != 0)
                goto fail;
        for (unsigned i = 0; i < HOSTS; i++) {
                char vh[16], vs[16], cidr[40];

                (void)snprintf(ns_host[i], sizeof(ns_host[i]), "kvd-h%u-%d", i, (int)getpid());
                (void)snprintf(vh, sizeof(vh), "kdh%u-%d", i, pid);
                (void)snprintf(vs, sizeof(vs), "kds%u-%d", i, pid);
                (void)snprintf(cidr, sizeof(cidr), "10.78.%u.%u/24", k, i + 1);
                (void)snprintf(listen_at[i], sizeof(listen_at[i]), "10.78.%u.%u:7400", k, i + 1);
                if (ip("netns", "add", ns_host[i], NULL) != 0) {
                        ns_host[i][0] = '\0';
                        goto fail;
                }
                if (ip("link", "add", vh, "type", "veth", "peer", "name", vs, NULL) != 0 ||
                    ip("link", "set", vh, "netns", ns_host[i], NULL) != 0 ||
                    ip("link", "set", vs, "netns", ns_sw, NULL) != 0 ||
                    ip("-n", ns_sw, "link", "set", vs, "master", "br0", "up", NULL) != 0 ||
                    ip("-n", ns_host[i], "addr", "add", cidr, "dev", vh, NULL) != 0 ||
                    ip("-n", ns_host[i], "link", "set", vh, "up", NULL) != 0 ||
                    ip("-n", ns_host[i], "link", "set", "lo", "up", NULL) != 0)
                        goto fail;
        }
        return;
fail:
        hosts_teardown();
        skip_reason = "cannot build a bridge between network namespaces";
}

/* Four hosts; their rank table gives each host's address alone, meaning port 7400. */
START_TEST(test_hosts_ring_exchange)
{
        void *send[HOSTS], *recv[HOSTS];
        const size_t len = 4 << 20;
        Batch b = {0};
        Net w;

        if (skip_reason) {
                fprintf(stderr, "SKIP test_hosts_ring_exchange: %s\n", skip_reason);
                return;
        }
        net_start(&w, HOSTS, ns_host, listen_at, true);
        ck_assert_ptr_null(strstr(w.table, ":7400\", \"rank_id"));
        dom_link_all(w.m, HOSTS, "hosts", w.table);
        dom_wait_ok(w.m, HOSTS);
        b.w = &w;
        b.timeout_ms = 30000;
        for (unsigned i = 0; i < HOSTS; i++) {
                expect_ok(w.m[i].client, kvd_mem_alloc(w.m[i].client, len, &send[i]));
                expect_ok(w.m[i].client, kvd_mem_alloc(w.m[i].client, len, &recv[i]));
                harness_fill_pattern(send[i], len, 300 + i);
                harness_fill_pattern(recv[i], len, 400 + i);
                b.items[i][0] = (kvd_send_recv_item){KVD_SEND, send[i], len / 2, KVD_DT_BF16,
                                                     (i + 1) % HOSTS};
                b.items[i][1] = (kvd_send_recv_item){KVD_RECV, recv[i], len / 2, KVD_DT_BF16,
                                                     (i + HOSTS - 1) % HOSTS};
                b.n_items[i] = 2;
                batch_start(&b, i);
        }
        for (unsigned i = 0; i < HOSTS; i++) {
                pthread_join(b.threads[i], NULL);
                ck_assert_msg(b.ret[i] == KVD_OK, "rank %u: %s", i, b.detail[i]);
                ck_assert_int_lt(harness_check_pattern(recv[i], len, 300 + (i + HOSTS - 1) % HOSTS),
                                 0);
        }
        for (unsigned i = 0; i < HOSTS; i++)
                dom_check_channels(&w.nodes[i], true);
        net_stop(&w);
}
END_TEST

typedef struct Bcast {
        Net *w;
        TCache cache[HOSTS];
        uint64_t blocks[64];
        kvd_algorithm algo;
        int ret[HOSTS];
} Bcast;

static int bcast_member(unsigned i, void *arg)
{
        Bcast *c = arg;
        kvd_collective_opts o = {.algorithm = c->algo, .timeout_ms = 30000, .chunk_bytes = 65536};

        c->ret[i] = kvd_domain_broadcast(c->w->m[i].client, c->w->m[i].comm_id, 0, c->cache[i].id,
                                         c->blocks, 64, &o, NULL);
        return c->ret[i];
}

/* Three hosts: broadcasts with both algorithms, every byte checked. */
START_TEST(test_hosts_broadcast)
{
        int rets[HOSTS];
        Bcast c = {0};
        Net w;

        if (skip_reason) {
                fprintf(stderr, "SKIP test_hosts_broadcast: %s\n", skip_reason);
                return;
        }
        net_start(&w, 3, ns_host, listen_at, true);
        c.w = &w;
        for (unsigned i = 0; i < 3; i++)
                expect_ok(w.m[i].client,
                          tcache_register(&c.cache[i], w.m[i].client, true, 4, 128, 16384, 500 + i,
                                          NULL, 0, KVD_REMOTE_DEFAULT));
        dom_link_all(w.m, 3, "hosts-bcast", w.table);
        dom_wait_ok(w.m, 3);
        for (unsigned k = 0; k < 64; k++)
                c.blocks[k] = (k * 53 + 7) % 128;
        for (int a = KVD_ALGO_RING; a <= KVD_ALGO_MESH; a++) {
                c.algo = (kvd_algorithm)a;
                for (unsigned i = 0; i < 3; i++)
                        harness_fill_pattern(c.cache[i].mem, c.cache[i].mem_size, c.cache[i].seed);
                dom_parallel(3, bcast_member, &c, rets);
                for (unsigned i = 0; i < 3; i++) {
                        TCopies cp = {};

                        ck_assert_msg(c.ret[i] == KVD_OK, "%s rank %u: %s",
                                      a == KVD_ALGO_RING ? "ring" : "mesh", i,
                                      kvd_strerror(c.ret[i]));
                        if (i > 0)
                                tcopies_blocks(&cp, &c.cache[0], &c.cache[i], ALL, ALL, 2, c.blocks,
                                               c.blocks, 64);
                        tcache_verify(&c.cache[i], &cp);
                        tcopies_free(&cp);
                }
        }
        for (unsigned i = 0; i < 3; i++)
                dom_check_channels(&w.nodes[i], true);
        net_stop(&w);
}
END_TEST

static Suite *faults_suite(void)
{
        Suite *s = suite_create("domain-faults");
        TCase *tc = tcase_create("members");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_member_daemon_killed);
        tcase_add_test(tc, test_member_process_killed);
        tcase_add_test(tc, test_member_finalizes);
        suite_add_tcase(s, tc);

        tc = tcase_create("hosts");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, hosts_setup, hosts_teardown);
        tcase_add_test(tc, test_hosts_ring_exchange);
        tcase_add_test(tc, test_hosts_broadcast);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(faults_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        if (skip_reason)
                printf("SKIP (hosts): %s\n", skip_reason);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
