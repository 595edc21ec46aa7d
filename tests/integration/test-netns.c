/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, daemons as separate hosts: two network namespaces joined by a veth pair,
 * one kvdistd in each (10.77.x.1 and 10.77.x.2), the clients in this namespace reaching them
 * through their Unix sockets. Blocks move byte-exact across the "wire"; then the wire is cut
 * mid-transfer and the transfers fail within the heartbeat window instead of hanging, and the
 * clusters link again once it is back. Then the wire is shaped to 1 Gbit/s with a deep queue and
 * large transfers run past short deadlines, round after round: each returns TIMEOUT promptly and
 * nothing of it lands afterwards, in a pull's destination or a push's. Needs root, `ip netns` and
 * `tc` (tbf); skipped with a message otherwise.
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

/* Shapes both ends of the veth to 1 Gbit/s with a queue of up to 400 ms (about 50 MB). */
static void netns_setup_shaped(void)
{
        netns_setup();
        if (skip_reason)
                return;
        if (access("/usr/sbin/tc", X_OK) < 0 && access("/sbin/tc", X_OK) < 0) {
                skip_reason = "no tc (iproute2) to shape the veth";
                return;
        }
        for (int i = 0; i < 2 && !skip_reason; i++) {
                const char *tc = access("/usr/sbin/tc", X_OK) == 0 ? "/usr/sbin/tc" : "/sbin/tc";
                const char *argv[] = {"/usr/sbin/ip",  "netns", "exec",
                                      i ? ns_b : ns_a, tc,      "qdisc",
                                      "add",           "dev",   i ? veth_b : veth_a,
                                      "root",          "tbf",   "rate",
                                      "1gbit",         "burst", "32kbit",
                                      "latency",       "400ms", NULL};
                char *out = NULL, *err = NULL;

                if (access(argv[0], X_OK) < 0)
                        argv[0] = "/sbin/ip";
                if (harness_run(argv, &out, &err) != 0) {
                        fprintf(stderr, "test-netns: tc qdisc add ... tbf: %s", err ? err : "");
                        skip_reason = "cannot shape the veth with tc tbf (sch_tbf missing?)";
                }
                free(out);
                free(err);
        }
}

enum {
        DL_ROUNDS = 20, /* each way; $KVDIST_DEADLINE_ROUNDS overrides it (1..1000) */
        DL_TENSORS = 2,
        DL_BLOCKS = 1024,
        DL_BLOCK = 128 * 1024, /* 2 x 1024 x 128 KiB = 256 MiB a cache */
        DL_TIMEOUT_MS = 400,
        DL_SETTLE_MS = 1500, /* the report saw bytes land up to 1.5 s after the return */
};

/*
 * A 256 MiB transfer with a 400 ms deadline over the shaped wire (which takes about 2.2 s for
 * it): TIMEOUT, returned promptly; then the destination, guards included, does not change for
 * DL_SETTLE_MS, and holds only old bytes or the source's. (The source is checked after the
 * series.)
 */
static void deadline_round(kvd_client *b, bool push, const kvd_cache_key *key, const TCache *src,
                           const TCache *dst, const uint64_t *blocks, uint8_t *snap,
                           const TCopies *cp, int round)
{
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        const char *what = push ? "push" : "pull";
        uint64_t t0, ms;
        int r;

        o.timeout_ms = DL_TIMEOUT_MS;
        t0 = harness_now_ms();
        if (push)
                r = kvd_push_blocks(b, key, src->id, blocks, DL_BLOCKS, blocks, DL_BLOCKS, &o);
        else
                r = kvd_pull_blocks(b, key, dst->id, blocks, DL_BLOCKS, blocks, DL_BLOCKS, &o);
        ms = harness_now_ms() - t0;
        memcpy(snap, dst->mem, dst->mem_size);
        fprintf(stderr, "%s round %d: %s after %llu ms\n", what, round, kvd_strerror(r),
                (unsigned long long)ms);
        expect_status(b, r, KVD_E_TIMEOUT, NULL);
        /* Promptly: within the deadline and a generous allowance for the fence, not after the
         * 2 s the whole transfer needs plus the queue. */
        ck_assert_msg(ms < (uint64_t)DL_TIMEOUT_MS + (uint64_t)harness_wait_scaled(3000),
                      "the %s returned after %llu ms", what, (unsigned long long)ms);
        harness_sleep_ms(DL_SETTLE_MS);
        if (memcmp(snap, dst->mem, dst->mem_size) != 0) {
                size_t i = 0, n = 0;

                while (snap[i] == dst->mem[i])
                        i++;
                for (size_t k = i; k < dst->mem_size; k++)
                        n += snap[k] != dst->mem[k];
                ck_abort_msg("round %d: %zu bytes of the %s's destination, from byte %zu, changed "
                             "after the call returned TIMEOUT",
                             round, n, what, i);
        }
        tcache_verify_old_or_new(dst, cp);
}

/* DL_ROUNDS, or $KVDIST_DEADLINE_ROUNDS: scripts/test runs fewer in the sanitizer build, where
 * each round's checks of 256 MiB cost several times more. */
static int deadline_rounds(void)
{
        const char *v = getenv("KVDIST_DEADLINE_ROUNDS");
        char *end;
        long n;

        if (!v || !v[0])
                return DL_ROUNDS;
        n = strtol(v, &end, 10);
        ck_assert_msg(*end == '\0' && n >= 1 && n <= 1000,
                      "KVDIST_DEADLINE_ROUNDS=%s: a number of rounds, 1..1000", v);
        return (int)n;
}

/*
 * Over a 1 Gbit/s wire with a deep queue: 20 pulls of 256 MiB with a 400 ms deadline, then 20
 * pushes, each TIMEOUT and settled at its return; after each series the same transfer with time
 * enough is byte-exact (the link survived). A is the server: B pulls from and pushes into
 * A's cache.
 */
START_TEST(test_deadline_nothing_lands)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        static uint64_t blocks[DL_BLOCKS];
        TCache asrc, bsrc, bdst;
        TCopies cpl = {}, cpp = {};
        kvd_client *a, *b;
        uint8_t *snap;
        Node p, d;

        if (skip_reason) {
                fprintf(stderr, "SKIP test_deadline_nothing_lands: %s\n", skip_reason);
                return;
        }
        hosts_start(&p, &d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&asrc, a, true, DL_TENSORS, DL_BLOCKS, DL_BLOCK, 0xd1, &key, 1,
                                     0));
        expect_ok(b, tcache_register(&bsrc, b, true, DL_TENSORS, DL_BLOCKS, DL_BLOCK, 0xd2, NULL, 0,
                                     0));
        expect_ok(b, tcache_register(&bdst, b, true, DL_TENSORS, DL_BLOCKS, DL_BLOCK, 0xd3, NULL, 0,
                                     0));
        link_node(b, A_ID, &p);
        for (uint64_t i = 0; i < DL_BLOCKS; i++)
                blocks[i] = i;
        snap = malloc(asrc.mem_size);
        ck_assert_ptr_nonnull(snap);
        o.timeout_ms = 120000;

        /* Pulls first, while A's cache still holds its own pattern. */
        tcopies_blocks(&cpl, &asrc, &bdst, ALL, ALL, 2, blocks, blocks, DL_BLOCKS);
        for (int i = 0; i < deadline_rounds(); i++)
                deadline_round(b, false, &key, &asrc, &bdst, blocks, snap, &cpl, i);
        expect_ok(b, kvd_check_link_status(b, A_ID));
        expect_ok(b, kvd_pull_blocks(b, &key, bdst.id, blocks, DL_BLOCKS, blocks, DL_BLOCKS, &o));
        tcache_verify(&bdst, &cpl);
        tcache_verify_untouched(&asrc);

        tcopies_blocks(&cpp, &bsrc, &asrc, ALL, ALL, 2, blocks, blocks, DL_BLOCKS);
        for (int i = 0; i < deadline_rounds(); i++)
                deadline_round(b, true, &key, &bsrc, &asrc, blocks, snap, &cpp, i);
        expect_ok(b, kvd_check_link_status(b, A_ID));
        expect_ok(b, kvd_push_blocks(b, &key, bsrc.id, blocks, DL_BLOCKS, blocks, DL_BLOCKS, &o));
        tcache_verify(&asrc, &cpp);
        tcache_verify_untouched(&bsrc);

        free(snap);
        tcopies_free(&cpl);
        tcopies_free(&cpp);
        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
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

        tc = tcase_create("deadline");
        tcase_set_timeout(tc, 400);
        tcase_add_unchecked_fixture(tc, netns_setup_shaped, netns_teardown);
        tcase_add_test(tc, test_deadline_nothing_lands);
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
