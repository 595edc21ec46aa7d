/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, daemons as separate hosts: two network namespaces joined by a veth pair,
 * one kvdistd in each (10.77.x.1 and 10.77.x.2), the clients in this namespace reaching them
 * through their Unix sockets. Blocks move byte-exact across the "wire"; then the wire is cut
 * mid-transfer and the transfers fail within the heartbeat window instead of hanging, and the
 * clusters link again once it is back. Needs root and `ip netns`; skipped with a message
 * otherwise.
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

static char ns_a[32], ns_b[32], veth_a[16], veth_b[16], addr_a[32], addr_b[32];
static const char *skip_reason;

/* Runs `ip ARGS...` (NULL-terminated), quietly; returns its exit code. */
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
                fprintf(stderr, "test-netns: ip %s ...: exit %d: %s", first, r, err ? err : "");
        free(out);
        free(err);
        return r;
}

static void netns_teardown(void)
{
        if (!ns_a[0])
                return;
        (void)ip("netns", "del", ns_a, NULL);
        (void)ip("netns", "del", ns_b, NULL);
}

/* Two namespaces, a veth pair between them, 10.77.<k>.1/24 and .2/24, loopback up. */
static void netns_setup(void)
{
        unsigned k = (unsigned)getpid() % 250 + 1;
        char cidr_a[40], cidr_b[40];

        skip_reason = NULL;
        if (geteuid() != 0) {
                skip_reason = "not root: network namespaces need CAP_SYS_ADMIN";
                return;
        }
        (void)snprintf(ns_a, sizeof(ns_a), "kvd-a-%d", (int)getpid());
        (void)snprintf(ns_b, sizeof(ns_b), "kvd-b-%d", (int)getpid());
        (void)snprintf(veth_a, sizeof(veth_a), "kva%d", (int)getpid() % 100000);
        (void)snprintf(veth_b, sizeof(veth_b), "kvb%d", (int)getpid() % 100000);
        (void)snprintf(addr_a, sizeof(addr_a), "10.77.%u.1", k);
        (void)snprintf(addr_b, sizeof(addr_b), "10.77.%u.2", k);
        (void)snprintf(cidr_a, sizeof(cidr_a), "%s/24", addr_a);
        (void)snprintf(cidr_b, sizeof(cidr_b), "%s/24", addr_b);
        if (ip("netns", "add", ns_a, NULL) != 0) {
                ns_a[0] = '\0';
                skip_reason = "`ip netns add` failed: no network namespaces here";
                return;
        }
        if (ip("netns", "add", ns_b, NULL) != 0 ||
            ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b, NULL) != 0 ||
            ip("link", "set", veth_a, "netns", ns_a, NULL) != 0 ||
            ip("link", "set", veth_b, "netns", ns_b, NULL) != 0 ||
            ip("-n", ns_a, "addr", "add", cidr_a, "dev", veth_a, NULL) != 0 ||
            ip("-n", ns_b, "addr", "add", cidr_b, "dev", veth_b, NULL) != 0 ||
            ip("-n", ns_a, "link", "set", "lo", "up", NULL) != 0 ||
            ip("-n", ns_b, "link", "set", "lo", "up", NULL) != 0 ||
            ip("-n", ns_a, "link", "set", veth_a, "up", NULL) != 0 ||
            ip("-n", ns_b, "link", "set", veth_b, "up", NULL) != 0) {
                netns_teardown();
                ns_a[0] = '\0';
                skip_reason = "cannot build the veth pair between two namespaces";
        }
}

/* Starts the two daemons: P in namespace A, D in namespace B. */
static void hosts_start(Node *p, Node *d)
{
        char listen_a[48], listen_b[48];

        (void)snprintf(listen_a, sizeof(listen_a), "%s:7400", addr_a);
        (void)snprintf(listen_b, sizeof(listen_b), "%s:7400", addr_b);
        node_start_full(p, ns_a, listen_a, NULL, NULL);
        node_start_full(d, ns_b, listen_b, NULL, NULL);
        ck_assert_str_eq(p->peer_addr, listen_a);
}

START_TEST(test_across_hosts)
{
        const uint64_t n = 256;
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), inbox_key = kvd_key_blocks(B_ID, 0);
        uint64_t sb[256], db[256];
        kvd_client *a, *b;
        TCache src, dst, inbox;
        TCopies cp = {}, cpi = {};
        Node p, d;

        if (skip_reason) {
                fprintf(stderr, "SKIP test_across_hosts: %s\n", skip_reason);
                return;
        }
        hosts_start(&p, &d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_server(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 4, n, 16384, 0xe1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 4, n, 16384, 0xe2, NULL, 0, 0));
        expect_ok(b, tcache_register(&inbox, b, true, 4, n, 16384, 0xe3, &inbox_key, 1, 0));
        link_node(b, A_ID, &p);
        link_node(a, B_ID, &d);
        ck_assert_int_eq(node_status_len(&p, "peers"), 1);
        for (uint64_t i = 0; i < n; i++) {
                sb[i] = (i * 7919) % n;
                db[i] = i;
        }
        /* B pulls from A, and A pushes into B over the link A made: one peer connection. */
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);
        expect_ok(a, kvd_push_blocks(a, &inbox_key, src.id, db, n / 2, sb, n / 2, NULL));
        tcopies_blocks(&cpi, &src, &inbox, ALL, ALL, 2, db, sb, n / 2);
        tcache_verify(&inbox, &cpi);
        tcache_verify_untouched(&src);
        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        tcopies_free(&cpi);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

START_TEST(test_wire_cut)
{
        enum { TASKS = 16 };
        const uint64_t n = 512;
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t sb[512], db[512];
        kvd_task *tasks[TASKS];
        kvd_client *a, *b;
        TCache src, dst;
        TCopies cp = {};
        uint64_t t0;
        Node p, d;
        int r;

        if (skip_reason) {
                fprintf(stderr, "SKIP test_wire_cut: %s\n", skip_reason);
                return;
        }
        hosts_start(&p, &d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0xf1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, n, 32768, 0xf2, NULL, 0, 0));
        link_node(b, A_ID, &p);
        for (uint64_t i = 0; i < n; i++) {
                sb[i] = (i * 7919) % n;
                db[i] = i;
        }
        o.timeout_ms = 60000;
        for (int i = 0; i < TASKS; i++)
                expect_ok(b, kvd_pull_blocks_async(b, &key, dst.id, sb, n, db, n, &o, &tasks[i]));
        harness_sleep_ms(20);
        /* Pull the cable: no RST, no FIN, only silence. */
        ck_assert_int_eq(ip("-n", ns_a, "link", "set", veth_a, "down", NULL), 0);
        t0 = harness_now_ms();
        for (int i = 0; i < TASKS; i++) {
                r = kvd_task_wait(tasks[i], 30000);
                ck_assert_msg(r == KVD_OK || r == KVD_E_PEER_LOST, "pull %d ended with %s", i,
                              kvd_strerror(r));
                kvd_task_free(tasks[i]);
        }
        /* Within the heartbeat timeout (2 s here), far before the transfers' 60 s. */
        ck_assert_uint_lt(harness_now_ms() - t0, (uint64_t)harness_wait_scaled(20000));
        ck_assert_int_eq(kvd_check_link_status(b, A_ID), KVD_E_PEER_LOST);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify_old_or_new(&dst, &cp);

        /* The cable is back: link again, and the bytes are exact. */
        ck_assert_int_eq(ip("-n", ns_a, "link", "set", veth_a, "up", NULL), 0);
        for (int i = 0; i < 100; i++) {
                int ret;

                if (link_at(b, A_ID, p.peer_addr, 2000, &ret) == KVD_OK)
                        break;
                harness_sleep_ms(100);
        }
        expect_ok(b, kvd_check_link_status(b, A_ID));
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o));
        tcache_verify(&dst, &cp);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

static Suite *netns_suite(void)
{
        Suite *s = suite_create("integration-netns");
        TCase *tc;

        tc = tcase_create("hosts");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, netns_setup, netns_teardown);
        tcase_add_test(tc, test_across_hosts);
        tcase_add_test(tc, test_wire_cut);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(netns_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        if (skip_reason) {
                printf("SKIP: %s\n", skip_reason);
                return failed == 0 ? 77 : EXIT_FAILURE;
        }
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
