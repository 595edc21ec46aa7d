/* SPDX-License-Identifier: MIT */
/*
 * libkvdist against a fake kvdistd (fake-daemon.c), waiting: replies that come out of order,
 * several threads waiting on one connection, tasks waited on with a timeout and freed before
 * their answer, tasks polled until done, and a daemon that closes the connection or sends
 * garbage while calls wait.
 */
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/fake-daemon.h"
#include <kvdist/kvdist.h>

/* --- transfers and waiting ------------------------------------------------------------- */

static void script_out_of_order(FakeDaemon *d, int fd)
{
        const Kvdist__V1__Transfer *a, *b;
        FakeFrame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);

        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        EXPECT(d, fa.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        EXPECT(d, fb.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        EXPECT(d, fb.h.request_id > fa.h.request_id);
        a = (const Kvdist__V1__Transfer *)fa.msg;
        b = (const Kvdist__V1__Transfer *)fb.msg;

        d->u[0] = (uint64_t)a->kind;
        EXPECT(d, a->remote_key && a->remote_key->kind_case == KVDIST__V1__CACHE_KEY__KIND_REQ);
        d->u[1] = a->remote_key->req->req_id;
        d->u[2] = a->remote_key->req->prefix_id;
        d->u[3] = a->local_cache_id;
        d->u[4] = a->local_batch_index;
        d->s[0] = a->size;
        d->u[5] = a->timeout_ms;
        d->u[6] = a->src_layers != NULL;
        d->s[1] = a->dst_layers ? a->dst_layers->first : -100;
        d->s[2] = a->dst_layers ? a->dst_layers->last : -100;
        d->u[7] = a->tensor_num_per_layer;

        d->u[8] = (uint64_t)b->kind;
        EXPECT(d, b->remote_key && b->remote_key->kind_case == KVDIST__V1__CACHE_KEY__KIND_BLOCKS);
        d->u[9] = b->remote_key->blocks->model_id;
        EXPECT(d, b->n_src_blocks == 3 && b->n_dst_blocks == 3);
        d->u[10] = b->src_blocks[2];
        d->u[11] = b->dst_blocks[2];
        d->u[12] = b->timeout_ms;

        /* The later request is answered first. */
        EXPECT(d, fake_transfer_reply(fd, &fb, KVD_E_CACHE_NOT_EXIST, "cache 8 is gone", 0) == 0);
        EXPECT(d, fake_transfer_reply(fd, &fa, KVD_OK, NULL, 4096) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fb);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_out_of_order_replies)
{
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        kvd_cache_key src = kvd_key_req(2, 900, 0), dst = kvd_key_blocks(2, 5);
        uint64_t src_blocks[3] = {1, 2, 3}, dst_blocks[3] = {7, 8, 9};
        kvd_task *ta = NULL, *tb = NULL;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_out_of_order);
        c = fake_client_init(&d);

        opts.timeout_ms = 800;
        opts.dst_layers = (kvd_layer_range){2, 4};
        ck_assert_int_eq(kvd_pull_cache_async(c, &src, 4, 3, 1024, &opts, &ta), KVD_OK);
        ck_assert_int_eq(kvd_push_blocks_async(c, &dst, 6, src_blocks, 3, dst_blocks, 3, NULL, &tb),
                         KVD_OK);
        /* The arrays were copied into the request. */
        src_blocks[2] = dst_blocks[2] = 0;

        ck_assert_int_eq(kvd_task_wait(ta, -1), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(tb, -1), KVD_E_CACHE_NOT_EXIST);
        ck_assert_str_eq(kvd_last_error(c), "cache 8 is gone");
        /* A completed task keeps its status. */
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_CACHE_NOT_EXIST);
        ck_assert_int_eq(kvd_task_wait(ta, 0), KVD_OK);
        kvd_task_free(ta);
        kvd_task_free(tb);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_CACHE);
        ck_assert_uint_eq(d.u[1], 900);
        ck_assert_uint_eq(d.u[2], KVD_ID_NONE);
        ck_assert_uint_eq(d.u[3], 4);
        ck_assert_uint_eq(d.u[4], 3);
        ck_assert_int_eq(d.s[0], 1024);
        ck_assert_uint_eq(d.u[5], 800);
        ck_assert_uint_eq(d.u[6], 0); /* first == -1: the range is left out */
        ck_assert_int_eq(d.s[1], 2);
        ck_assert_int_eq(d.s[2], 5);
        ck_assert_uint_eq(d.u[7], 2);
        ck_assert_uint_eq(d.u[8], KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS);
        ck_assert_uint_eq(d.u[9], 5);
        ck_assert_uint_eq(d.u[10], 3);
        ck_assert_uint_eq(d.u[11], 9);
        ck_assert_uint_eq(d.u[12], 0); /* no opts: the daemon's sync_kv_timeout */
}
END_TEST

/* Two threads wait at once; the daemon answers the later request first. */
static void script_two_threads(FakeDaemon *d, int fd)
{
        FakeFrame f[2];

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f[0]) == 1);
        EXPECT(d, fake_recv(d, fd, &f[1]) == 1);
        for (int i = 1; i >= 0; i--) {
                uint64_t remote =
                        ((const Kvdist__V1__CheckLinkStatus *)f[i].msg)->remote_cluster_id;

                /* Cluster 100 + k is answered with status -k. */
                EXPECT(d, fake_status(fd, &f[i], -(int)(remote - 100), "per-cluster") == 0);
                fake_frame_done(&f[i]);
        }
        EXPECT(d, fake_finalize(d, fd) == 0);
}

typedef struct Checker {
        kvd_client *c;
        uint64_t remote;
        int r;
} Checker;

static void *checker_thread(void *userdata)
{
        Checker *k = userdata;

        k->r = kvd_check_link_status(k->c, k->remote);
        return NULL;
}

START_TEST(test_two_threads_waiting)
{
        Checker k[2];
        pthread_t t[2];
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_two_threads);
        c = fake_client_init(&d);

        k[0] = (Checker){.c = c, .remote = 100 - KVD_E_NOT_YET_LINK};
        k[1] = (Checker){.c = c, .remote = 100 - KVD_E_LINK_BUSY};
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, checker_thread, &k[i]), 0);
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(k[0].r, KVD_E_NOT_YET_LINK);
        ck_assert_int_eq(k[1].r, KVD_E_LINK_BUSY);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/*
 * Expects @f's task to be cancelled: a TransferCancel naming it, answered with @stopping, then
 * the transfer answered with @code.
 */
static void expect_cancel(FakeDaemon *d, int fd, const FakeFrame *f, bool stopping, int code)
{
        Kvdist__V1__TransferCancelReply reply = KVDIST__V1__TRANSFER_CANCEL_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        FakeFrame fc;

        EXPECT(d, fake_recv(d, fd, &fc) == 1);
        EXPECT(d, fc.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL);
        EXPECT(d, ((const Kvdist__V1__TransferCancel *)fc.msg)->request_id == f->h.request_id);
        reply.status = &st;
        reply.stopping = stopping;
        EXPECT(d, fake_reply(fd, &fc, &reply.base, NULL, 0) == 0);
        fake_frame_done(&fc);
        EXPECT(d,
               fake_transfer_reply(fd, f, code, "transfer 9 (pull_blocks) was cancelled", 0) == 0);
}

/* Holds the answers until the test says go; the first task is freed, so cancelled, by then. */
static void script_late_replies(FakeDaemon *d, int fd)
{
        FakeFrame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        expect_cancel(d, fd, &fa, true, KVD_E_CANCELLED);
        if (d->fail_line)
                return;
        fake_wait_go(d);
        EXPECT(d, fake_transfer_reply(fd, &fb, KVD_OK, NULL, 1) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fb);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_task_wait_in_progress)
{
        kvd_cache_key key = kvd_key_id_index(2, 3, 4);
        kvd_task *ta = NULL, *tb = NULL;
        int r = KVD_E_IN_PROGRESS;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_late_replies);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, NULL, 0, (uint64_t[]){1}, 1, NULL, &ta),
                         KVD_OK);
        ck_assert_int_eq(kvd_push_cache_async(c, &key, 1, 0, -1, NULL, &tb), KVD_OK);

        /* Running is not a failure of its own: IN_PROGRESS, never TIMEOUT. */
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_IN_PROGRESS);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "still running"));
        ck_assert_int_eq(kvd_task_wait(tb, 1), KVD_E_IN_PROGRESS);
        ck_assert_str_eq(kvd_strerror(KVD_E_IN_PROGRESS), "KVD_E_IN_PROGRESS");
        /* Freeing a running task cancels it and returns once the daemon answered it. */
        kvd_task_free(ta);
        fake_go(&d);

        /* Polling with a zero timeout reads what arrived: the answer comes through. */
        for (int i = 0; i < 60000 && r == KVD_E_IN_PROGRESS; i++) {
                r = kvd_task_wait(tb, 0);
                if (r == KVD_E_IN_PROGRESS)
                        (void)usleep(1000);
        }
        ck_assert_int_eq(r, KVD_OK);
        ck_assert_int_eq(kvd_task_wait(tb, -1), KVD_OK);
        kvd_task_free(tb);
        kvd_task_free(NULL);
        ck_assert_int_eq(kvd_task_wait(NULL, 0), KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* The first transfer ran past its deadline (TIMEOUT), the second succeeds; after go. */
static void script_timeout_answer(FakeDaemon *d, int fd)
{
        FakeFrame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        fake_wait_go(d);
        EXPECT(d, fake_transfer_reply(fd, &fa, KVD_E_TIMEOUT, "past its deadline", 0) == 0);
        EXPECT(d, fake_transfer_reply(fd, &fb, KVD_OK, NULL, 1) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fb);
        /* Cancelling or freeing answered tasks sends nothing: the next frame is the finalize. */
        EXPECT(d, fake_finalize(d, fd) == 0);
}

/* Polls @t with zero timeouts until kvd_task_done() says it has its status; returns that. */
static int poll_until_done(kvd_task *t)
{
        bool done = false;
        int r = KVD_E_IN_PROGRESS;

        for (int i = 0; i < 60000 && !done; i++) {
                r = kvd_task_wait(t, 0);
                ck_assert_int_eq(kvd_task_done(t, &done), KVD_OK);
                if (!done) {
                        ck_assert_int_eq(r, KVD_E_IN_PROGRESS);
                        (void)usleep(1000);
                }
        }
        ck_assert_msg(done, "the task never completed");
        return r;
}

/*
 * A transfer that ran past its deadline answers TIMEOUT, a running one IN_PROGRESS; done agrees.
 * Cancelling a task that completed returns its status and sends nothing.
 */
START_TEST(test_task_done)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *ta = NULL, *tb = NULL;
        bool done = true;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_timeout_answer);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_push_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1,
                                               NULL, &ta),
                         KVD_OK);
        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1,
                                               NULL, &tb),
                         KVD_OK);
        ck_assert_int_eq(kvd_task_wait(ta, 0), KVD_E_IN_PROGRESS);
        ck_assert_int_eq(kvd_task_done(ta, &done), KVD_OK);
        ck_assert(!done);
        fake_go(&d);

        ck_assert_int_eq(poll_until_done(ta), KVD_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "past its deadline"));
        ck_assert_int_eq(poll_until_done(tb), KVD_OK);
        /* Done stays done, with the same status; a cancel now changes nothing. */
        ck_assert_int_eq(kvd_task_wait(ta, 0), KVD_E_TIMEOUT);
        ck_assert_int_eq(kvd_task_cancel(ta), KVD_E_TIMEOUT);
        ck_assert_int_eq(kvd_task_cancel(tb), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_OK);
        ck_assert_int_eq(kvd_task_done(ta, &done), KVD_OK);
        ck_assert(done);

        ck_assert_int_eq(kvd_task_done(NULL, &done), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_task_done(ta, NULL), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_task_cancel(NULL), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "task is NULL"));
        kvd_task_free(ta);
        kvd_task_free(tb);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* Whether @fd polls readable within @timeout_ms. */
static bool readable(int fd, int timeout_ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};

        return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/*
 * Transfer a is answered while the client waits for another call (CheckLinkStatus), which reads
 * the answer from the socket; transfer b is answered after go, with nobody reading.
 */
static void script_fd(FakeDaemon *d, int fd)
{
        FakeFrame fa, fb, fc;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        EXPECT(d, fake_recv(d, fd, &fc) == 1);
        EXPECT(d, fc.h.type == KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS);
        EXPECT(d, fake_transfer_reply(fd, &fa, KVD_OK, NULL, 64) == 0);
        EXPECT(d, fake_status(fd, &fc, KVD_E_NOT_YET_LINK, "no link") == 0);
        fake_wait_go(d);
        EXPECT(d, fake_transfer_reply(fd, &fb, KVD_E_CACHE_NOT_EXIST, "no cache 5", 0) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fb);
        fake_frame_done(&fc);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

/* The task fd: never misses an answer another call read, readable once done, bad input. */
START_TEST(test_task_fd)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *ta = NULL, *tb = NULL;
        int fda = -1, fdb = -1, again = -1;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_fd);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1,
                                               NULL, &ta),
                         KVD_OK);
        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){2}, 1, (uint64_t[]){3}, 1,
                                               NULL, &tb),
                         KVD_OK);
        ck_assert_int_eq(kvd_task_fd(ta, &fda), KVD_OK);
        ck_assert_int_ge(fda, 0);
        ck_assert_int_eq(kvd_task_fd(ta, &again), KVD_OK);
        ck_assert_int_eq(again, fda);
        ck_assert_int_eq(kvd_task_fd(tb, &fdb), KVD_OK);
        ck_assert_int_ne(fdb, fda);
        ck_assert(!readable(fda, 0));
        ck_assert(!readable(fdb, 0));

        /* This call reads a's answer off the socket on its way to its own. */
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_NOT_YET_LINK);
        ck_assert_msg(readable(fda, 0), "a's answer was read by another call: its fd must say so");
        ck_assert(!readable(fdb, 0));
        ck_assert_int_eq(kvd_task_wait(ta, 0), KVD_OK);
        /* Done stays readable. */
        ck_assert(readable(fda, 0));

        fake_go(&d);
        /* Nobody reads: the socket itself wakes the poller. */
        ck_assert(readable(fdb, 60000));
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_CACHE_NOT_EXIST);
        ck_assert(readable(fdb, 0));

        ck_assert_int_eq(kvd_task_fd(NULL, &again), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_task_fd(ta, NULL), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "ret_fd is NULL"));

        kvd_task_free(ta);
        kvd_task_free(tb);
        /* The fds went with their tasks. */
        ck_assert_int_eq(fcntl(fda, F_GETFD), -1);
        ck_assert_int_eq(fcntl(fdb, F_GETFD), -1);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* An older daemon refuses the cancel as an unknown request; the transfer goes on. */
static void script_old_daemon(FakeDaemon *d, int fd)
{
        FakeFrame fa, fc;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fc) == 1);
        EXPECT(d, fc.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL);
        EXPECT(d, fake_error(fd, &fc, KVD_E_UNSUPPORTED, "request type 31 is not supported") == 0);
        fake_wait_go(d);
        EXPECT(d, fake_transfer_reply(fd, &fa, KVD_OK, NULL, 64) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fc);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_task_cancel_old_daemon)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *t = NULL;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_old_daemon);
        c = fake_client_init(&d);
        ck_assert_int_eq(
                kvd_push_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1, NULL, &t),
                KVD_OK);
        ck_assert_int_eq(kvd_task_cancel(t), KVD_E_UNSUPPORTED);
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_IN_PROGRESS);
        fake_go(&d);
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_OK);
        kvd_task_free(t);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- a daemon that goes away ----------------------------------------------------------- */

static void script_close_mid_wait(FakeDaemon *d, int fd)
{
        FakeFrame f[2];

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f[0]) == 1);
        EXPECT(d, fake_recv(d, fd, &f[1]) == 1);
        fake_frame_done(&f[0]);
        fake_frame_done(&f[1]);
        /* Returning closes the connection with both transfers unanswered. */
}

START_TEST(test_daemon_closes)
{
        kvd_cache_key key = kvd_key_req(2, 1, 0);
        kvd_task *t = NULL;
        FakeDaemon d;
        kvd_client *c;
        void *p = NULL;
        int tfd = -1;

        fake_start(&d, script_close_mid_wait);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_pull_cache_async(c, &key, 1, 0, -1, NULL, &t), KVD_OK);
        ck_assert_int_eq(kvd_task_fd(t, &tfd), KVD_OK);
        ck_assert(!readable(tfd, 0));
        ck_assert_int_eq(kvd_pull_cache(c, &key, 1, 1, -1, NULL), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "kvdistd closed the connection"));
        fake_stop(&d);

        /* A dead connection is an answer: the task's fd says so. */
        ck_assert(readable(tfd, 0));
        /* Every waiter and every later call fails the same way. */
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "kvdistd closed the connection"));
        ck_assert_int_eq(kvd_mem_alloc(c, 4096, &p), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_push_cache(c, &key, 1, 0, -1, NULL), KVD_E_DAEMON_UNAVAILABLE);

        /* The task outlives the client; it only sees a dead connection. */
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_DAEMON_UNAVAILABLE);
        kvd_task_free(t);
}
END_TEST

static void script_bad_frame(FakeDaemon *d, int fd)
{
        static const uint8_t garbage[FRAME_HEADER_SIZE] = "this is not a frame!!!!";
        FakeFrame f;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        fake_frame_done(&f);
        EXPECT(d, fake_send_all(fd, garbage, sizeof(garbage), NULL, 0) == 0);
        /* The client must hang up on us. */
        EXPECT(d, fake_recv(d, fd, &f) == 0);
}

START_TEST(test_malformed_frame)
{
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_bad_frame);
        c = fake_client_init(&d);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "malformed"));
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

static Suite *client_wait_suite(void)
{
        Suite *s = suite_create("client-wait");
        TCase *tc;

        tc = tcase_create("wait");
        tcase_add_test(tc, test_out_of_order_replies);
        tcase_add_test(tc, test_two_threads_waiting);
        tcase_add_test(tc, test_task_wait_in_progress);
        tcase_add_test(tc, test_task_done);
        tcase_add_test(tc, test_task_fd);
        tcase_add_test(tc, test_task_cancel_old_daemon);
        tcase_add_test(tc, test_daemon_closes);
        tcase_add_test(tc, test_malformed_frame);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(client_wait_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
