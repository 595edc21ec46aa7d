/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, tasks an event loop drives: kvd_task_wait(t, 0) says IN_PROGRESS while a
 * transfer runs, the task's fd wakes a poller once the answer came, kvd_task_cancel() stops a
 * pull or a push so that nothing of it lands afterwards (snapshots taken when it returned stay as
 * they were), a cancel after completion changes nothing, and a task freed while running is
 * cancelled while the daemons go on serving others. A transfer is held running by stopping
 * (SIGSTOP) the daemon of the other end, so no timing decides what the test sees.
 */
#include <check.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define SCATTER 7919
#define BLOCKS 2048 /* 2 x 2048 x 32 KiB = 128 MiB per transfer */
#define BLOCK_BYTES 32768u
#define LONG_MS 60000 /* the transfers' own deadline: far beyond anything the tests wait */

/* Two daemons: A (the prefill, a server on @p) and B (the decode, a client on @d) linked. */
typedef struct Pair {
        Node p, d;
        kvd_client *a, *b;
        TCache src;    /* A: blocks cache 0, the pulls' source */
        TCache target; /* A: blocks cache 1, the pushes' destination */
        TCache dst;    /* B: the pulls' destination, the pushes' source */
        TCache spare;  /* B: where pull_after() lands, apart from every other cache */
        uint64_t sb[BLOCKS], db[BLOCKS];
} Pair;

static void pair_start(Pair *x)
{
        kvd_cache_key k0 = kvd_key_blocks(A_ID, 0), k1 = kvd_key_blocks(A_ID, 1);

        for (uint64_t i = 0; i < BLOCKS; i++) {
                x->sb[i] = (i * SCATTER) % BLOCKS;
                x->db[i] = i;
        }
        node_start(&x->p);
        node_start(&x->d);
        x->a = node_server(&x->p, A_ID, KVD_ROLE_PROMPT);
        x->b = node_client(&x->d, B_ID, KVD_ROLE_DECODER);
        expect_ok(x->a,
                  tcache_register(&x->src, x->a, true, 2, BLOCKS, BLOCK_BYTES, 0x61, &k0, 1, 0));
        expect_ok(x->a,
                  tcache_register(&x->target, x->a, true, 2, BLOCKS, BLOCK_BYTES, 0x62, &k1, 1, 0));
        expect_ok(x->b,
                  tcache_register(&x->dst, x->b, true, 2, BLOCKS, BLOCK_BYTES, 0x63, NULL, 0, 0));
        expect_ok(x->b,
                  tcache_register(&x->spare, x->b, true, 2, 8, BLOCK_BYTES, 0x65, NULL, 0, 0));
        link_node(x->b, A_ID, &x->p);
}

static void pair_stop(Pair *x)
{
        expect_ok(x->a, kvd_client_finalize(x->a));
        expect_ok(x->b, kvd_client_finalize(x->b));
        node_stop(&x->p);
        node_stop(&x->d);
}

static kvd_transfer_opts long_opts(void)
{
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;

        o.timeout_ms = LONG_MS;
        return o;
}

static int pull_async(Pair *x, kvd_task **ret)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = long_opts();

        return kvd_pull_blocks_async(x->b, &key, x->dst.id, x->sb, BLOCKS, x->db, BLOCKS, &o, ret);
}

static int push_async(Pair *x, kvd_task **ret)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 1);
        kvd_transfer_opts o = long_opts();

        /* Block i of B lands in block sb[i] of A's target. */
        return kvd_push_blocks_async(x->b, &key, x->dst.id, x->db, BLOCKS, x->sb, BLOCKS, &o, ret);
}

static void peer_stop(Pair *x)
{
        ck_assert_int_eq(kill(x->p.d.pid, SIGSTOP), 0);
}

static void peer_cont(Pair *x)
{
        ck_assert_int_eq(kill(x->p.d.pid, SIGCONT), 0);
}

/* Whether @fd polls readable within @timeout_ms. */
static bool readable(int fd, int timeout_ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};

        return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/*
 * A small pull over the same link that must succeed: once it answered, the peer has served what
 * it had queued before it (the streams are ordered), so a late byte of a cancelled transfer would
 * have landed by now. It lands in B's spare cache, which is checked byte for byte.
 */
static void pull_after(Pair *x)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = long_opts();
        uint64_t sb[4] = {7, 3, 11, 5}, db[4] = {0, 1, 2, 3};
        TCopies cp = {};

        expect_ok(x->b, kvd_pull_blocks(x->b, &key, x->spare.id, sb, 4, db, 4, &o));
        tcopies_blocks(&cp, &x->src, &x->spare, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&x->spare, &cp);
        tcopies_free(&cp);
}

/* The bytes the first transfer in flight on @n moved so far; -1 when none is known. */
static int64_t bytes_done(const Node *n)
{
        char *text = NULL;
        json_t *root, *v;
        int64_t done = -1;

        ck_assert_int_eq(harness_daemon_status(&n->d, &text), KVD_OK);
        root = json_loads(text, 0, NULL);
        ck_assert_ptr_nonnull(root);
        v = json_object_get(json_array_get(json_object_get(root, "transfers"), 0), "bytes_done");
        if (json_is_integer(v))
                done = json_integer_value(v);
        json_decref(root);
        free(text);
        return done;
}

/* Waits (ceiling harness_wait_ms()) until @n has no transfer in flight. */
static void wait_no_transfers(const Node *n)
{
        uint64_t t0 = harness_now_ms();

        while (node_status_len(n, "transfers") > 0) {
                ck_assert_msg(harness_now_ms() - t0 < (uint64_t)harness_wait_ms(),
                              "transfers still in flight on the daemon");
                harness_sleep_ms(5);
        }
}

/*
 * A pull held before its first byte (the source's daemon is stopped): IN_PROGRESS, an fd that
 * does not wake, then a cancel that returns CANCELLED with the destination untouched, and stays
 * so once the source's daemon runs again.
 */
START_TEST(test_cancel_held_pull)
{
        Pair x;
        uint8_t *snap;
        kvd_task *t = NULL;
        int fd = -1;

        pair_start(&x);
        peer_stop(&x);
        expect_ok(x.b, pull_async(&x, &t));
        expect_status(x.b, kvd_task_wait(t, 0), KVD_E_IN_PROGRESS, "is still running");
        expect_status(x.b, kvd_task_wait(t, 10), KVD_E_IN_PROGRESS, NULL);
        expect_ok(x.b, kvd_task_fd(t, &fd));
        ck_assert(!readable(fd, 0));

        expect_status(x.b, kvd_task_cancel(t), KVD_E_CANCELLED, "cancelled by the client");
        ck_assert(readable(fd, 0));
        snap = malloc(x.dst.mem_size);
        ck_assert_ptr_nonnull(snap);
        memcpy(snap, x.dst.mem, x.dst.mem_size);
        tcache_verify_untouched(&x.dst);

        peer_cont(&x);
        /* After cancel returned: its status for every later wait, and a cancel changes nothing. */
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_CANCELLED);
        ck_assert_int_eq(kvd_task_cancel(t), KVD_E_CANCELLED);
        kvd_task_free(t);
        pull_after(&x);
        wait_no_transfers(&x.d);
        wait_no_transfers(&x.p);
        ck_assert_int_eq(memcmp(snap, x.dst.mem, x.dst.mem_size), 0);
        tcache_verify_untouched(&x.dst);
        tcache_verify_untouched(&x.src);

        free(snap);
        pair_stop(&x);
}
END_TEST

/*
 * A pull or push cancelled while its bytes flow. The daemon's guarantee: the call returns
 * CANCELLED (or OK when the transfer finished before the cancel reached it); each destination
 * byte is then either untouched or the source's (every byte the source's with OK), nothing
 * outside the destination blocks changed, and nothing changes after the call returned.
 */
static void cancel_mid_flight(bool push, bool stop_peer)
{
        Pair x;
        TCopies cp = {};
        const TCache *dst;
        uint8_t *snap;
        kvd_task *t = NULL;
        uint64_t t0;
        int r;

        pair_start(&x);
        dst = push ? &x.target : &x.dst;
        expect_ok(x.b, push ? push_async(&x, &t) : pull_async(&x, &t));
        /* Once bytes flow (or it is over already). */
        t0 = harness_now_ms();
        while (bytes_done(&x.d) <= 0 && kvd_task_wait(t, 0) == KVD_E_IN_PROGRESS)
                ck_assert_msg(harness_now_ms() - t0 < (uint64_t)harness_wait_ms(),
                              "the transfer never moved a byte");
        if (stop_peer)
                peer_stop(&x);

        r = kvd_task_cancel(t);
        snap = malloc(dst->mem_size);
        ck_assert_ptr_nonnull(snap);
        memcpy(snap, dst->mem, dst->mem_size);
        if (stop_peer)
                peer_cont(&x);
        ck_assert_msg(r == KVD_E_CANCELLED || r == KVD_OK, "the cancelled %s: %s (%s)",
                      push ? "push" : "pull", kvd_strerror(r), kvd_last_error(x.b));
        ck_assert_int_eq(kvd_task_wait(t, 0), r);
        kvd_task_free(t);

        if (push)
                tcopies_blocks(&cp, &x.dst, &x.target, ALL, ALL, 2, x.db, x.sb, BLOCKS);
        else
                tcopies_blocks(&cp, &x.src, &x.dst, ALL, ALL, 2, x.sb, x.db, BLOCKS);
        if (r == KVD_OK)
                tcache_verify(dst, &cp);
        else
                tcache_verify_old_or_new(dst, &cp);

        /* Nothing lands after the cancel returned: the link serves another transfer, then the
         * destination is what the snapshot holds. */
        pull_after(&x);
        wait_no_transfers(&x.d);
        wait_no_transfers(&x.p);
        ck_assert_int_eq(memcmp(snap, dst->mem, dst->mem_size), 0);
        fprintf(stderr, "%s cancelled mid-flight%s: %s\n", push ? "push" : "pull",
                stop_peer ? " (peer stopped)" : "", kvd_strerror(r));

        free(snap);
        tcopies_free(&cp);
        pair_stop(&x);
}

START_TEST(test_cancel_pull_mid_flight)
{
        cancel_mid_flight(false, true);
}
END_TEST

START_TEST(test_cancel_push_mid_flight)
{
        cancel_mid_flight(true, false);
}
END_TEST

/* A push held before its first byte: cancelled at once, nothing lands at the destination. */
START_TEST(test_cancel_held_push)
{
        Pair x;
        kvd_task *t = NULL;

        pair_start(&x);
        peer_stop(&x);
        expect_ok(x.b, push_async(&x, &t));
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_IN_PROGRESS);
        expect_status(x.b, kvd_task_cancel(t), KVD_E_CANCELLED, NULL);
        peer_cont(&x);
        kvd_task_free(t);
        pull_after(&x);
        wait_no_transfers(&x.d);
        wait_no_transfers(&x.p);
        tcache_verify_untouched(&x.target);
        tcache_verify_untouched(&x.dst);
        pair_stop(&x);
}
END_TEST

/*
 * The fd of a held task wakes once its daemon runs again and the answer came; waits driven by
 * poll() alone bring the transfer home byte for byte.
 */
START_TEST(test_fd_wakes_on_answer)
{
        Pair x;
        TCopies cp = {};
        kvd_task *t = NULL;
        int fd = -1, r, wakes = 0;

        pair_start(&x);
        peer_stop(&x);
        expect_ok(x.b, pull_async(&x, &t));
        expect_ok(x.b, kvd_task_fd(t, &fd));
        ck_assert(!readable(fd, 0));
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_IN_PROGRESS);
        peer_cont(&x);

        /* An event loop: poll, then a zero wait; a wake-up may be early (part of a frame). */
        while ((r = kvd_task_wait(t, 0)) == KVD_E_IN_PROGRESS) {
                ck_assert_msg(readable(fd, harness_wait_ms()), "the task fd never woke");
                wakes++;
        }
        expect_ok(x.b, r);
        ck_assert_int_ge(wakes, 1);
        ck_assert(readable(fd, 0));
        ck_assert_int_eq(kvd_task_cancel(t), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_OK);
        kvd_task_free(t);
        tcopies_blocks(&cp, &x.src, &x.dst, ALL, ALL, 2, x.sb, x.db, BLOCKS);
        tcache_verify(&x.dst, &cp);
        tcache_verify_untouched(&x.src);
        tcopies_free(&cp);
        pair_stop(&x);
}
END_TEST

/*
 * A task freed while it runs is cancelled: the daemons drop it, another cluster's transfer on the
 * same daemons (held at the same time) completes byte for byte, and the freeing client goes on.
 */
START_TEST(test_free_running)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = long_opts();
        Pair x;
        TCache other;
        TCopies ocp = {};
        kvd_task *t = NULL, *ot = NULL;
        kvd_client *c;

        pair_start(&x);
        c = node_client(&x.d, C_ID, KVD_ROLE_DECODER);
        expect_ok(c, tcache_register(&other, c, true, 2, BLOCKS, BLOCK_BYTES, 0x64, NULL, 0, 0));
        link_node(c, A_ID, &x.p);

        peer_stop(&x);
        expect_ok(x.b, pull_async(&x, &t));
        expect_ok(c, kvd_pull_blocks_async(c, &key, other.id, x.sb, BLOCKS, x.db, BLOCKS, &o, &ot));
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_IN_PROGRESS);
        kvd_task_free(t);
        tcache_verify_untouched(&x.dst);
        peer_cont(&x);

        expect_ok(c, kvd_task_wait(ot, -1));
        kvd_task_free(ot);
        tcopies_blocks(&ocp, &x.src, &other, ALL, ALL, 2, x.sb, x.db, BLOCKS);
        tcache_verify(&other, &ocp);

        pull_after(&x);
        wait_no_transfers(&x.d);
        wait_no_transfers(&x.p);
        tcache_verify_untouched(&x.dst);

        expect_ok(c, kvd_client_finalize(c));
        tcopies_free(&ocp);
        pair_stop(&x);
}
END_TEST

/*
 * On one daemon: a cancel after completion returns the status and changes nothing, a task freed
 * at once is gone from the daemon, and bad arguments get PARAM_INVALID.
 */
/*
 * A batch held before its first byte: IN_PROGRESS for the task and its entries, then a cancel
 * that ends every entry CANCELLED, reports all their blocks as not loaded, and leaves the
 * destination untouched once the source's daemon runs again.
 */
START_TEST(test_cancel_held_batch)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = long_opts();
        kvd_batch_entry e[2];
        uint64_t *failed;
        size_t n_failed = 0;
        kvd_task *t = NULL;
        int st = 0;
        Pair x;

        pair_start(&x);
        for (size_t i = 0; i < 2; i++)
                e[i] = (kvd_batch_entry){.kind = KVD_PULL_BLOCKS,
                                         .key = key,
                                         .cache_id = x.dst.id,
                                         .src_blocks = x.sb + i * BLOCKS / 2,
                                         .n_src = BLOCKS / 2,
                                         .dst_blocks = x.db + i * BLOCKS / 2,
                                         .n_dst = BLOCKS / 2};
        peer_stop(&x);
        expect_ok(x.b, kvd_transfer_batch(x.b, e, 2, &o, &t));
        expect_status(x.b, kvd_task_wait(t, 0), KVD_E_IN_PROGRESS, "is still running");
        expect_status(x.b, kvd_task_entry_status(t, 1, &st), KVD_E_IN_PROGRESS, NULL);

        expect_status(x.b, kvd_task_cancel(t), KVD_E_CANCELLED, "entries[0]");
        for (size_t i = 0; i < 2; i++) {
                expect_ok(x.b, kvd_task_entry_status(t, i, &st));
                ck_assert_int_eq(st, KVD_E_CANCELLED);
        }
        failed = calloc(BLOCKS, sizeof(*failed));
        ck_assert_ptr_nonnull(failed);
        expect_ok(x.b, kvd_task_failed_blocks(t, failed, BLOCKS, &n_failed));
        ck_assert_uint_eq(n_failed, BLOCKS);
        for (size_t i = 0; i < BLOCKS; i++)
                ck_assert_uint_eq(failed[i], x.db[i]);
        tcache_verify_untouched(&x.dst);

        peer_cont(&x);
        kvd_task_free(t);
        pull_after(&x);
        wait_no_transfers(&x.d);
        wait_no_transfers(&x.p);
        tcache_verify_untouched(&x.dst);
        tcache_verify_untouched(&x.src);
        free(failed);
        pair_stop(&x);
}
END_TEST

START_TEST(test_local_and_bad_input)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        uint64_t sb[3] = {5, 1, 9}, db[3] = {2, 8, 4};
        TCache src, dst;
        TCopies cp = {};
        kvd_task *t = NULL;
        World w;
        int fd = -1;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 16, 4096, 0x71, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 16, 4096, 0x72, NULL, 0, 0));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, 3, db, 3, NULL, &t));
        expect_ok(w.b, kvd_task_wait(t, -1));
        expect_ok(w.b, kvd_task_cancel(t));
        expect_ok(w.b, kvd_task_wait(t, 0));
        expect_ok(w.b, kvd_task_fd(t, &fd));
        ck_assert(readable(fd, 0));
        kvd_task_free(t);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dst, &cp);

        /* Freed straight away: whether it ran or not, it is gone, and the link works. */
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, 3, db, 3, NULL, &t));
        kvd_task_free(t);
        tcache_verify_old_or_new(&dst, &cp);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 3, db, 3, NULL));
        tcache_verify(&dst, &cp);

        expect_status(NULL, kvd_task_cancel(NULL), KVD_E_PARAM_INVALID, NULL);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "task is NULL"));
        expect_status(NULL, kvd_task_fd(NULL, &fd), KVD_E_PARAM_INVALID, NULL);
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, sb, 3, db, 3, NULL, &t));
        expect_status(w.b, kvd_task_fd(t, NULL), KVD_E_PARAM_INVALID, "ret_fd is NULL");
        expect_ok(w.b, kvd_task_wait(t, -1));
        kvd_task_free(t);
        kvd_task_free(NULL);
        ck_assert_str_eq(kvd_strerror(KVD_E_CANCELLED), "KVD_E_CANCELLED");
        ck_assert_str_eq(kvd_strerror(KVD_E_IN_PROGRESS), "KVD_E_IN_PROGRESS");

        tcache_verify_untouched(&src);
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

static Suite *task_suite(void)
{
        Suite *s = suite_create("task");
        TCase *tc = tcase_create("task");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_local_and_bad_input);
        tcase_add_test(tc, test_cancel_held_pull);
        tcase_add_test(tc, test_cancel_held_push);
        tcase_add_test(tc, test_cancel_held_batch);
        tcase_add_test(tc, test_fd_wakes_on_answer);
        tcase_add_test(tc, test_cancel_pull_mid_flight);
        tcase_add_test(tc, test_cancel_push_mid_flight);
        tcase_add_test(tc, test_free_running);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(task_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
