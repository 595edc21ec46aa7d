/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, faults across daemons: a peer daemon killed mid-transfer (and re-linked
 * after it restarts), a remote cluster that finalizes or crashes, a transfer past its deadline
 * (nothing lands after the call returned; it returns on time even from a stalled peer), and
 * daemons with different cluster keys.
 */
#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"
#include "common/macro.h"

#define SCATTER 7919
#define KEY_1 "kvdist-test-key-one-0123456789"
#define KEY_2 "kvdist-test-key-two-9876543210"

/* Waits up to @ms for @c's link to @remote to report @want. */
static int wait_link_status(kvd_client *c, uint64_t remote, int want, unsigned ms)
{
        int r = kvd_check_link_status(c, remote);

        for (unsigned waited = 0; r != want && waited < ms; waited += 20) {
                harness_sleep_ms(20);
                r = kvd_check_link_status(c, remote);
        }
        return r;
}

/* Fills @sb/@db with @n scattered source blocks into the first @n destination blocks. */
static void scatter(uint64_t *sb, uint64_t *db, uint64_t n)
{
        for (uint64_t i = 0; i < n; i++) {
                sb[i] = (i * SCATTER) % n;
                db[i] = i;
        }
}

START_TEST(test_peer_killed)
{
        enum { TASKS = 12 };
        const uint64_t n = 512; /* 2 x 512 x 32 KiB = 32 MiB per pull */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        kvd_task *tasks[TASKS];
        kvd_client *a, *b;
        TCache src, dst;
        TCopies cp = {};
        unsigned lost = 0;
        uint64_t t0;
        Node p, d;
        int r;

        ck_assert(sb && db);
        scatter(sb, db, n);
        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0x51, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, n, 32768, 0x52, NULL, 0, 0));
        link_node(b, A_ID, &p);

        o.timeout_ms = 60000;
        for (int i = 0; i < TASKS; i++)
                expect_ok(b, kvd_pull_blocks_async(b, &key, dst.id, sb, n, db, n, &o, &tasks[i]));
        harness_sleep_ms(30);
        t0 = harness_now_ms();
        ck_assert_int_eq(harness_daemon_kill(&p.d), 0);
        for (int i = 0; i < TASKS; i++) {
                /* Long before the 60 s deadline: the peer is known to be gone at once. */
                r = kvd_task_wait(tasks[i], 20000);
                ck_assert_msg(r == KVD_OK || r == KVD_E_PEER_LOST, "pull %d ended with %s", i,
                              kvd_strerror(r));
                lost += r == KVD_E_PEER_LOST;
                kvd_task_free(tasks[i]);
        }
        ck_assert_uint_lt(harness_now_ms() - t0, (uint64_t)harness_wait_scaled(15000));
        ck_assert_uint_ge(lost, 1);
        /* What landed is source bytes or the old ones, nothing else. */
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify_old_or_new(&dst, &cp);

        /* The link is down and says so; calls on it fail at once. */
        ck_assert_int_eq(wait_link_status(b, A_ID, KVD_E_PEER_LOST, harness_wait_ms()),
                         KVD_E_PEER_LOST);
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, sb, 1, db, 1, &o), KVD_E_PEER_LOST,
                      "down");

        /* The prompt node comes back (a new daemon, a new port): linking again works. */
        kvd_client_finalize(a);
        node_stop(&p);
        node_start(&p);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0x53, &key, 1, 0));
        link_node(b, A_ID, &p);
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o));
        tcopies_free(&cp);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        free(sb);
        free(db);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

START_TEST(test_remote_cluster_finalizes)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        uint64_t b0 = 0;
        kvd_client *a, *b;
        TCache src, dst;
        Node p, d;

        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, 4, 4096, 1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 4, 4096, 2, NULL, 0, 0));
        link_node(b, A_ID, &p);
        ck_assert_int_eq(node_status_len(&p, "inbound_links"), 1);

        /* The prompt cluster leaves: both daemons drop the link. */
        expect_ok(a, kvd_client_finalize(a));
        ck_assert_int_eq(wait_link_status(b, A_ID, KVD_E_PEER_LOST, harness_wait_ms()),
                         KVD_E_PEER_LOST);
        ck_assert_int_eq(node_status_len(&p, "inbound_links"), 0);
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, &b0, 1, &b0, 1, NULL), KVD_E_PEER_LOST,
                      NULL);
        tcache_verify_untouched(&dst);

        /* It comes back under the same id: the decoder links again over the same peer. */
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        expect_ok(a, tcache_register(&src, a, true, 2, 4, 4096, 3, &key, 1, 0));
        link_node(b, A_ID, &p);
        ck_assert_int_eq(node_status_len(&d, "peers"), 1);
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, &b0, 1, &b0, 1, NULL));

        /* The decoder leaves: the prompt daemon forgets the inbound link. */
        expect_ok(b, kvd_client_finalize(b));
        for (int i = 0; i < 250 && node_status_len(&p, "inbound_links") > 0; i++)
                harness_sleep_ms(20);
        ck_assert_int_eq(node_status_len(&p, "inbound_links"), 0);
        expect_ok(a, kvd_switch_role(a, KVD_ROLE_MIX, NULL, 0));

        expect_ok(a, kvd_client_finalize(a));
        node_stop(&d);
        node_stop(&p);
}
END_TEST

typedef struct Victim {
        const Node *n;
} Victim;

/* A prompt cluster in its own process: registers a destination cache and waits to be killed. */
static int victim_main(void *arg)
{
        Victim *v = arg;
        kvd_cache_key key = kvd_key_blocks(C_ID, 0);
        kvd_client *c = NULL;
        TCache dst;

        if (harness_server_init(&v->n->d, C_ID, KVD_ROLE_PROMPT, v->n->peer_addr, &c) != KVD_OK)
                return 1;
        if (tcache_register(&dst, c, true, 2, 512, 32768, 0x77, &key, 1, 0) != KVD_OK)
                return 2;
        harness_child_ready(0);
        for (;;)
                pause();
}

/* The cluster a push writes into dies mid-push: the push fails, nothing else is hurt. */
START_TEST(test_remote_cluster_crashes)
{
        enum { TASKS = 8 };
        const uint64_t n = 512;
        kvd_cache_key key = kvd_key_blocks(C_ID, 0), akey = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        kvd_task *tasks[TASKS];
        HarnessChild child;
        kvd_client *a, *b;
        TCache src, other, dst;
        TCopies cp = {};
        Victim v;
        Node p, d;
        int r;

        ck_assert(sb && db);
        scatter(sb, db, n);
        node_start(&p);
        node_start(&d);
        v.n = &p;
        ck_assert_int_eq(harness_fork_client(victim_main, &v, &child), 0);
        ck_assert_int_eq(harness_child_wait_ready(&child, harness_wait_ms(), NULL), 0);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&other, a, true, 2, 8, 4096, 0x78, &akey, 1, 0));
        expect_ok(b, tcache_register(&src, b, true, 2, n, 32768, 0x79, NULL, 0, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 8, 4096, 0x7a, NULL, 0, 0));
        link_node(b, C_ID, &p);
        link_node(b, A_ID, &p);

        o.timeout_ms = 60000;
        for (int i = 0; i < TASKS; i++)
                expect_ok(b, kvd_push_blocks_async(b, &key, src.id, sb, n, db, n, &o, &tasks[i]));
        harness_sleep_ms(20);
        ck_assert_int_eq(harness_child_kill(&child, SIGKILL), 128 + SIGKILL);
        for (int i = 0; i < TASKS; i++) {
                r = kvd_task_wait(tasks[i], 30000);
                ck_assert_msg(r == KVD_OK || r == KVD_E_PEER_LOST, "push %d ended with %s", i,
                              kvd_strerror(r));
                kvd_task_free(tasks[i]);
        }
        ck_assert_int_eq(wait_link_status(b, C_ID, KVD_E_PEER_LOST, harness_wait_ms()),
                         KVD_E_PEER_LOST);

        /* The other cluster on that daemon is untouched and still serves. */
        expect_ok(b, kvd_check_link_status(b, A_ID));
        {
                uint64_t s8[8], d8[8];

                for (int i = 0; i < 8; i++) {
                        s8[i] = sb[i] % 8;
                        d8[i] = db[i];
                }
                expect_ok(b, kvd_pull_blocks(b, &akey, dst.id, s8, 8, d8, 8, NULL));
                tcopies_blocks(&cp, &other, &dst, ALL, ALL, 2, s8, d8, 8);
                tcache_verify(&dst, &cp);
        }
        tcache_verify_untouched(&other);
        tcache_verify_untouched(&src);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        free(sb);
        free(db);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/* A pull past its deadline: nothing lands in the caller's memory once the call returned. */
START_TEST(test_timeout_no_late_write)
{
        const uint64_t n = 2048; /* 2 x 2048 x 32 KiB = 128 MiB */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        kvd_client *a, *b;
        TCache src, dst;
        TCopies cp = {};
        uint8_t *snap;
        Node p, d;
        int r;

        ck_assert(sb && db);
        scatter(sb, db, n);
        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0x61, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, n, 32768, 0x62, NULL, 0, 0));
        link_node(b, A_ID, &p);

        o.timeout_ms = 2;
        r = kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o);
        snap = malloc(dst.mem_size);
        ck_assert_ptr_nonnull(snap);
        memcpy(snap, dst.mem, dst.mem_size);
        expect_status(b, r, KVD_E_TIMEOUT, "did not finish within 2 ms");
        harness_sleep_ms(500);
        ck_assert_msg(memcmp(snap, dst.mem, dst.mem_size) == 0,
                      "the destination changed after the transfer timed out");
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify_old_or_new(&dst, &cp);

        /* The link survives a timeout; with time to finish the same pull is exact. */
        expect_ok(b, kvd_check_link_status(b, A_ID));
        o.timeout_ms = 60000;
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o));
        tcache_verify(&dst, &cp);

        /* A push past its deadline: the caller gets TIMEOUT, the link stays usable. */
        o.timeout_ms = 2;
        expect_status(b, kvd_push_blocks(b, &key, dst.id, sb, n, db, n, &o), KVD_E_TIMEOUT, NULL);
        o.timeout_ms = 60000;
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 4, db, 4, &o));

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        free(snap);
        free(sb);
        free(db);
        tcopies_free(&cp);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/*
 * A pull past its deadline tells its source nothing, whatever it read: the next pull that lands
 * is the only notification the source gets.
 */
START_TEST(test_timeout_pull_no_notify)
{
        const uint64_t n = 2048; /* 2 x 2048 x 32 KiB = 128 MiB */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        kvd_client *a, *b;
        kvd_notify got[2];
        TCache src, dst;
        TCopies cp = {};
        Node p, d;
        int fd = -1;

        ck_assert(sb && db);
        scatter(sb, db, n);
        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0x71, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, n, 32768, 0x72, NULL, 0, 0));
        link_node(b, A_ID, &p);
        expect_ok(a, kvd_notify_fd(a, &fd));

        o.timeout_ms = 2;
        o.notify = "late";
        o.notify_len = 4;
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o), KVD_E_TIMEOUT,
                      "did not finish within 2 ms");
        /* Whatever the source still ends of it (its word, its own deadline), it tells nothing. */
        harness_sleep_ms(500);
        o.timeout_ms = 60000;
        o.notify = "after";
        o.notify_len = 5;
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        notifies_take(a, fd, got, 1);
        notify_check(&got[0], KVD_NOTIFY_PULL, B_ID, "after");
        ck_assert_int_eq(node_status_int(&p, "counters/notifies_delivered"), 1);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        free(sb);
        free(db);
        tcopies_free(&cp);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/* The bytes the first transfer in flight on @c's daemon moved so far; -1 when none is known. */
static int64_t first_transfer_bytes_done(kvd_client *c)
{
        json_t *root, *v;
        char *json = NULL;
        int64_t done = -1;

        expect_ok(c, kvd_daemon_status(c, &json));
        root = json_loads(json, 0, NULL);
        ck_assert_ptr_nonnull(root);
        v = json_object_get(json_array_get(json_object_get(root, "transfers"), 0), "bytes_done");
        if (json_is_integer(v))
                done = json_integer_value(v);
        json_decref(root);
        free(json);
        return done;
}

/*
 * Runs a pull from A's blocks cache 0 (@push false) or a push into A's blocks cache 1 of @n
 * blocks of @dst, whose peer daemon @p stops taking bytes
 * (SIGSTOP) once they flow, for STALL_MS, far longer than the transfer's deadline. Returns how
 * long after its deadline the call came back; *@ret_exercised says whether the transfer was
 * still running when the peer stopped (else it proves nothing).
 */
#define STALL_MS 2000
#define STALL_DEADLINE_MS 300

static int64_t transfer_past_stalled_peer(kvd_client *b, Node *p, bool push, const TCache *dst,
                                          const uint64_t *sb, const uint64_t *db, uint64_t n,
                                          bool *ret_exercised)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, push ? 1 : 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t t0, elapsed;
        kvd_task *t;
        int r;

        o.timeout_ms = STALL_DEADLINE_MS;
        t0 = harness_now_ms();
        if (push)
                r = kvd_push_blocks_async(b, &key, dst->id, db, n, sb, n, &o, &t);
        else
                r = kvd_pull_blocks_async(b, &key, dst->id, sb, n, db, n, &o, &t);
        expect_ok(b, r);
        /* Stop the peer once the bytes flow: the transfer is past its handshake. */
        while (first_transfer_bytes_done(b) <= 0 && harness_now_ms() - t0 < STALL_DEADLINE_MS &&
               kvd_task_wait(t, 0) == KVD_E_IN_PROGRESS)
                harness_sleep_ms(1);
        ck_assert_int_eq(kill(p->d.pid, SIGSTOP), 0);
        /* Still running before its deadline: the stop caught it mid-way. */
        *ret_exercised = kvd_task_wait(t, 0) == KVD_E_IN_PROGRESS &&
                         harness_now_ms() - t0 < STALL_DEADLINE_MS;
        r = kvd_task_wait(t, STALL_MS);
        elapsed = harness_now_ms() - t0;
        ck_assert_int_eq(kill(p->d.pid, SIGCONT), 0);
        /* Once it answers, its overdue heartbeats are out: stops add up to no peer loss. */
        (void)node_status_len(p, "peers");
        ck_assert_msg(elapsed < STALL_MS,
                      "the %s came back only after the peer ran again "
                      "(%llu ms for a %d ms deadline)",
                      push ? "push" : "pull", (unsigned long long)elapsed, STALL_DEADLINE_MS);
        ck_assert_msg(r == KVD_E_TIMEOUT, "the %s ended with %s", push ? "push" : "pull",
                      kvd_strerror(r));
        kvd_task_free(t);
        return (int64_t)elapsed - STALL_DEADLINE_MS;
}

/*
 * A transfer past its deadline comes back on time even when the peer stops taking its bytes.
 * A pull stops writing and answers; a push used to wait until the peer took the rest of the
 * chunk in progress and the abort markers, which a stopped peer (or a slow link, ~100 ms on a
 * shaped veth) delays: it must answer within the same bound as a pull.
 */
START_TEST(test_deadline_peer_stalled)
{
        enum { RUNS = 3 };
        const uint64_t n = 2048; /* 2 x 2048 x 32 KiB = 128 MiB */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), target_key = kvd_key_blocks(A_ID, 1);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        int64_t late[2] = {0, 0};
        unsigned exercised[2] = {0, 0};
        kvd_client *a, *b;
        TCache src, target, dst;
        TCopies cp = {};
        Node p, d;

        /* A stopped daemon does not stop its RDMA device, which keeps serving READs and WRITEs:
         * the stall is one of the TCP data plane, whose sender needs the peer to read. */
        if (strcmp(it_transport(), "rdma") == 0) {
                fprintf(stderr, "SKIP test_deadline_peer_stalled: over RDMA a stopped peer "
                                "daemon still moves bytes\n");
                free(sb);
                free(db);
                return;
        }
        ck_assert(sb && db);
        scatter(sb, db, n);
        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, n, 32768, 0x71, &key, 1, 0));
        expect_ok(a, tcache_register(&target, a, true, 2, n, 32768, 0x73, &target_key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, n, 32768, 0x72, NULL, 0, 0));
        link_node(b, A_ID, &p);

        for (int i = 0; i < 2 * RUNS; i++) {
                bool push = i % 2, ran;
                int64_t l = transfer_past_stalled_peer(b, &p, push, &dst, sb, db, n, &ran);

                late[push] = MAX(late[push], l);
                exercised[push] += ran;
        }
        fprintf(stderr,
                "deadline %d ms, peer stopped for %d ms: latest pull %lld ms late, "
                "latest push %lld ms late (%u and %u runs stalled)\n",
                STALL_DEADLINE_MS, STALL_MS, (long long)late[0], (long long)late[1], exercised[0],
                exercised[1]);
        ck_assert_uint_gt(exercised[0], 0);
        ck_assert_uint_gt(exercised[1], 0);
        /* Generous for two loaded cores; the old push came back only after STALL_MS. */
        ck_assert_int_lt(late[0], 1500);
        ck_assert_int_lt(late[1], 1500);
        tcache_verify_untouched(&src);

        /* The streams stayed in step: both ways work again, byte for byte. The push sends back
         * what the pull brought: block sb[i] of the source lands in block sb[i] of the target. */
        o.timeout_ms = 60000;
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, n, db, n, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);
        expect_ok(b, kvd_push_blocks(b, &target_key, dst.id, db, n, sb, n, &o));
        tcopies_free(&cp);
        tcopies_blocks(&cp, &src, &target, ALL, ALL, 2, sb, sb, n);
        tcache_verify(&target, &cp);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        free(sb);
        free(db);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

START_TEST(test_cluster_keys)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        uint64_t b0 = 2;
        kvd_client *a, *b, *b2, *b3;
        TCache src, dst;
        char *json = NULL;
        Node p, d_wrong, d_none, d_right;
        int ret;

        node_start_full(&p, NULL, NULL, KEY_1, NULL);
        node_start_full(&d_wrong, NULL, NULL, KEY_2, NULL);
        node_start_full(&d_none, NULL, NULL, NULL, NULL);
        node_start_full(&d_right, NULL, NULL, KEY_1 "\n", NULL);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d_wrong, B_ID, KVD_ROLE_DECODER);
        b2 = node_client(&d_none, B_ID + 1, KVD_ROLE_DECODER);
        b3 = node_client(&d_right, B_ID + 2, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, 4, 4096, 1, &key, 1, 0));

        /* Another key: the dialer checks the listener's proof first and refuses it; it tells
         * the listener, which logs and counts the peer too. */
        expect_status(b, link_at(b, A_ID, p.peer_addr, 5000, &ret), KVD_E_PERMISSION_DENIED,
                      "cluster key");
        ck_assert_int_eq(ret, KVD_E_PERMISSION_DENIED);
        ck_assert_int_eq(node_status_int(&d_wrong, "counters/peers_refused"), 1);
        ck_assert(harness_daemon_log_contains(&d_wrong.d, "does not hold our cluster key"));
        for (int i = 0; i < 250 && node_status_int(&p, "counters/peers_refused") < 1; i++)
                harness_sleep_ms(20);
        ck_assert_int_eq(node_status_int(&p, "counters/peers_refused"), 1);
        ck_assert(harness_daemon_log_contains(&p.d, "refused: it holds another cluster key"));
        /* No key against a key: the listener refuses the dialer and logs it. */
        expect_status(b2, link_at(b2, A_ID, p.peer_addr, 5000, &ret), KVD_E_PERMISSION_DENIED,
                      "cluster key");
        ck_assert_int_eq(node_status_int(&p, "counters/peers_refused"), 2);
        ck_assert(harness_daemon_log_contains(&p.d, "refused: cluster key configured"));
        ck_assert_int_eq(node_status_len(&p, "inbound_links"), 0);
        ck_assert_int_eq(node_status_len(&p, "peers"), 0);

        /* The same key (a trailing newline is not part of it): authenticated both ways. */
        expect_ok(b3, tcache_register(&dst, b3, true, 2, 4, 4096, 2, NULL, 0, 0));
        link_node(b3, A_ID, &p);
        ck_assert_int_eq(harness_daemon_status(&d_right.d, &json), KVD_OK);
        ck_assert_ptr_nonnull(strstr(json, "\"authenticated\":true"));
        free(json);
        expect_ok(b3, kvd_pull_blocks(b3, &key, dst.id, &b0, 1, &b0, 1, NULL));

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(b2, kvd_client_finalize(b2));
        expect_ok(b3, kvd_client_finalize(b3));
        node_stop(&d_right);
        node_stop(&d_none);
        node_stop(&d_wrong);
        node_stop(&p);
}
END_TEST

static Suite *faults_suite(void)
{
        Suite *s = suite_create("integration-remote-faults");
        TCase *tc;

        tc = tcase_create("peers");
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_peer_killed);
        tcase_add_test(tc, test_remote_cluster_finalizes);
        tcase_add_test(tc, test_remote_cluster_crashes);
        tcase_add_test(tc, test_timeout_no_late_write);
        tcase_add_test(tc, test_timeout_pull_no_notify);
        tcase_add_test(tc, test_deadline_peer_stalled);
        tcase_add_test(tc, test_cluster_keys);
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
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
