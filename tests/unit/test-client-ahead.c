/* SPDX-License-Identifier: MIT */
/*
 * libkvdist against a fake kvdistd (fake-daemon.c), reading replies ahead: several answers that
 * arrive in one read are all filed before the reader leaves (a task's fd polls the socket, which
 * no longer shows them), a reply read together with a stray frame and the daemon's farewell, a
 * reply longer than the read-ahead buffer followed by another, an fd
 * that comes with a reply behind another reply, and a daemon that closes in the middle of a
 * frame.
 */
#include <check.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/macro.h"
#include "tests/unit/fake-daemon.h"
#include <kvdist/kvdist.h>

#define LONG_JSON_BYTES 300000

/* Whether @fd polls readable within @timeout_ms. */
static bool readable(int fd, int timeout_ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};

        return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* Appends @n bytes of @p to the malloc()ed *@buf of *@len bytes; 0 or -1. */
static int append(uint8_t **buf, size_t *len, const uint8_t *p, size_t n)
{
        uint8_t *b = realloc(*buf, *len + n);

        if (!b)
                return -1;
        memcpy(b + *len, p, n);
        *buf = b;
        *len += n;
        return 0;
}

/* Appends the TransferReply to @req with @code, @detail and @bytes. 0 or -1. */
static int append_transfer_reply(uint8_t **buf, size_t *len, const FakeFrame *req, int code,
                                 const char *detail, uint64_t bytes)
{
        Kvdist__V1__TransferReply tr = KVDIST__V1__TRANSFER_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ uint8_t *one = NULL;
        size_t n;

        st.code = code;
        st.detail = (char *)detail;
        tr.status = &st;
        tr.bytes = bytes;
        if (fake_pack_reply(req, &tr.base, 0, &one, &n) < 0)
                return -1;
        return append(buf, len, one, n);
}

static char json_char(size_t i)
{
        return (char)('a' + (i * 7 + i / 26) % 26);
}

/* --- several answers in one read --------------------------------------------------------- */

static void script_three_at_once(FakeDaemon *d, int fd)
{
        _cleanup_free_ uint8_t *buf = NULL;
        FakeFrame f[3];
        size_t len = 0;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        for (size_t i = 0; i < 3; i++) {
                EXPECT(d, fake_recv(d, fd, &f[i]) == 1);
                EXPECT(d, f[i].h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        }
        /* One write: the client's first read takes all three. */
        EXPECT(d, append_transfer_reply(&buf, &len, &f[1], KVD_E_CACHE_NOT_EXIST, "no cache 5",
                                        0) == 0);
        EXPECT(d, append_transfer_reply(&buf, &len, &f[0], KVD_OK, NULL, 64) == 0);
        EXPECT(d, append_transfer_reply(&buf, &len, &f[2], KVD_OK, NULL, 128) == 0);
        EXPECT(d, len < 2048);
        EXPECT(d, fake_send_all(fd, buf, len, NULL, 0) == 0);
        for (size_t i = 0; i < 3; i++)
                fake_frame_done(&f[i]);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_answers_in_one_read)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *t[3] = {};
        int tfd[3];
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_three_at_once);
        c = fake_client_init(&d);
        for (size_t i = 0; i < 3; i++) {
                ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){i}, 1,
                                                       (uint64_t[]){i + 10}, 1, NULL, &t[i]),
                                 KVD_OK);
                ck_assert_int_eq(kvd_task_fd(t[i], &tfd[i]), KVD_OK);
        }

        /* The second answer came first; waiting for the first reads all three. */
        ck_assert_int_eq(kvd_task_wait(t[0], -1), KVD_OK);
        /*
         * That read emptied the socket, so the task fds (the socket and the task's eventfd)
         * are readable only if the other two answers were filed before the reader left.
         */
        ck_assert(readable(tfd[1], 0));
        ck_assert(readable(tfd[2], 0));
        ck_assert_int_eq(kvd_task_wait(t[1], 0), KVD_E_CACHE_NOT_EXIST);
        ck_assert_str_eq(kvd_last_error(c), "no cache 5");
        ck_assert_int_eq(kvd_task_wait(t[2], 0), KVD_OK);
        for (size_t i = 0; i < 3; i++)
                kvd_task_free(t[i]);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- the answer to ClientFinalize, and a late answer behind it ------------------------ */

static void script_finalize_then_late_reply(FakeDaemon *d, int fd)
{
        Kvdist__V1__ClientFinalizeReply fr = KVDIST__V1__CLIENT_FINALIZE_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ uint8_t *buf = NULL, *one = NULL;
        FakeFrame ft, ff;
        size_t len = 0, n;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &ft) == 1);
        EXPECT(d, ft.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        EXPECT(d, fake_recv(d, fd, &ff) == 1);
        EXPECT(d, ff.h.type == KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE);
        /* One write: the finalize answer, then the transfer's failure, sent after it. */
        fr.status = &st;
        EXPECT(d, fake_pack_reply(&ff, &fr.base, 0, &one, &n) == 0);
        EXPECT(d, append(&buf, &len, one, n) == 0);
        EXPECT(d, append_transfer_reply(&buf, &len, &ft, KVD_E_PEER_LOST, "the link went", 0) == 0);
        EXPECT(d, fake_send_all(fd, buf, len, NULL, 0) == 0);
        fake_frame_done(&ft);
        fake_frame_done(&ff);
}

/*
 * kvd_client_finalize() with a transfer in flight: the daemon's answer to the transfer that came
 * after the one to ClientFinalize, in the same read, is not filed; the task fails with
 * DAEMON_UNAVAILABLE, as kvd_client_finalize() says.
 */
START_TEST(test_finalize_then_late_reply)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *t = NULL;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_finalize_then_late_reply);
        c = fake_client_init(&d);
        ck_assert_int_eq(
                kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){1}, 1, (uint64_t[]){2}, 1, NULL, &t),
                KVD_OK);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_E_DAEMON_UNAVAILABLE);
        kvd_task_free(t);
        fake_stop(&d);
}
END_TEST

/* --- a reply, a frame that answers nothing and a farewell, in one read ------------------ */

static void script_reply_then_farewell(FakeDaemon *d, int fd)
{
        Kvdist__V1__TransferReply tr = KVDIST__V1__TRANSFER_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ uint8_t *buf = NULL, *stray = NULL, *bye = NULL;
        size_t len = 0, n;
        FakeFrame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        EXPECT(d, append_transfer_reply(&buf, &len, &fa, KVD_OK, NULL, 64) == 0);
        /* Not a reply (no REPLY flag), though it names b's request id: dropped. */
        tr.status = &st;
        EXPECT(d, frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, fb.h.request_id, 0, &tr.base,
                             FRAME_MAX_PAYLOAD_DEFAULT, &stray, &n) == 0);
        EXPECT(d, append(&buf, &len, stray, n) == 0);
        EXPECT(d, frame_pack_error(0, FRAME_CONNECTION_REQUEST_ID, KVD_E_LIMIT_EXCEEDED,
                                   "kvdistd is shutting down", FRAME_MAX_PAYLOAD_DEFAULT, &bye,
                                   &n) == 0);
        EXPECT(d, append(&buf, &len, bye, n) == 0);
        EXPECT(d, len < 2048);
        EXPECT(d, fake_send_all(fd, buf, len, NULL, 0) == 0);
        fake_frame_done(&fa);
        fake_frame_done(&fb);
        /* Returning closes the connection. */
}

START_TEST(test_reply_then_farewell)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *ta = NULL, *tb = NULL;
        FakeDaemon d;
        kvd_client *c;
        int tfd = -1;

        fake_start(&d, script_reply_then_farewell);
        c = fake_client_init(&d);
        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1,
                                               NULL, &ta),
                         KVD_OK);
        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){2}, 1, (uint64_t[]){3}, 1,
                                               NULL, &tb),
                         KVD_OK);
        ck_assert_int_eq(kvd_task_fd(tb, &tfd), KVD_OK);

        /* The answer that came before the farewell is an answer. */
        ck_assert_int_eq(kvd_task_wait(ta, -1), KVD_OK);
        /* The farewell was read with it: b's fd says its wait is over. */
        ck_assert(readable(tfd, 0));
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_LIMIT_EXCEEDED);
        ck_assert_str_eq(kvd_last_error(c), "kvdistd is shutting down");
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_LIMIT_EXCEEDED);
        ck_assert_str_eq(kvd_last_error(c), "kvdistd is shutting down");
        kvd_task_free(ta);
        kvd_task_free(tb);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- a reply longer than the buffer, then another ---------------------------------------- */

static void script_long_then_short(FakeDaemon *d, int fd)
{
        Kvdist__V1__DaemonStatusReply sr = KVDIST__V1__DAEMON_STATUS_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ char *json = NULL;
        FakeFrame ft, fs;
        size_t len = 0;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &ft) == 1);
        EXPECT(d, fake_recv(d, fd, &fs) == 1);
        EXPECT(d, fs.h.type == KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS);

        json = malloc(LONG_JSON_BYTES + 1);
        EXPECT(d, json != NULL);
        for (size_t i = 0; i < LONG_JSON_BYTES; i++)
                json[i] = json_char(i);
        json[LONG_JSON_BYTES] = 0;
        sr.status = &st;
        sr.json = json;
        EXPECT(d, fake_pack_reply(&fs, &sr.base, 0, &buf, &len) == 0);
        /* The transfer's answer right behind it, in the same write. */
        EXPECT(d, append_transfer_reply(&buf, &len, &ft, KVD_OK, NULL, 4096) == 0);
        EXPECT(d, fake_send_all(fd, buf, len, NULL, 0) == 0);
        fake_frame_done(&ft);
        fake_frame_done(&fs);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_long_reply_then_short)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *t = NULL;
        char *json = NULL;
        FakeDaemon d;
        kvd_client *c;
        int tfd = -1;

        fake_start(&d, script_long_then_short);
        c = fake_client_init(&d);
        ck_assert_int_eq(
                kvd_push_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1, NULL, &t),
                KVD_OK);
        ck_assert_int_eq(kvd_task_fd(t, &tfd), KVD_OK);

        ck_assert_int_eq(kvd_daemon_status(c, &json), KVD_OK);
        ck_assert_uint_eq(strlen(json), LONG_JSON_BYTES);
        for (size_t i = 0; i < LONG_JSON_BYTES; i++)
                if (json[i] != json_char(i))
                        ck_abort_msg("json[%zu] is '%c', not '%c'", i, json[i], json_char(i));
        free(json);

        /* The answer behind it is filed or still in the socket: either way the fd wakes. */
        ck_assert(readable(tfd, 60000));
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_OK);
        kvd_task_free(t);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- an fd with the reply behind another ------------------------------------------------- */

static void script_fd_behind(FakeDaemon *d, int fd)
{
        Kvdist__V1__NotifyFdReply nr = KVDIST__V1__NOTIFY_FD_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        FakeFrame ft, fn;
        int efd;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &ft) == 1);
        EXPECT(d, fake_recv(d, fd, &fn) == 1);
        EXPECT(d, fn.h.type == KVDIST__V1__MSG_TYPE__MSG_NOTIFY_FD);
        efd = eventfd(42, EFD_CLOEXEC);
        EXPECT(d, efd >= 0);
        /* Two writes back to back: most often one read, ending after the fd. */
        EXPECT(d, fake_transfer_reply(fd, &ft, KVD_OK, NULL, 64) == 0);
        nr.status = &st;
        EXPECT(d, fake_reply(fd, &fn, &nr.base, &efd, 1) == 0);
        close(efd);
        fake_frame_done(&ft);
        fake_frame_done(&fn);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_fd_behind_another_reply)
{
        kvd_cache_key key = kvd_key_blocks(2, 0);
        kvd_task *t = NULL;
        eventfd_t v = 0;
        FakeDaemon d;
        kvd_client *c;
        int nfd = -1;

        fake_start(&d, script_fd_behind);
        c = fake_client_init(&d);
        ck_assert_int_eq(
                kvd_pull_blocks_async(c, &key, 1, (uint64_t[]){0}, 1, (uint64_t[]){1}, 1, NULL, &t),
                KVD_OK);
        ck_assert_int_eq(kvd_notify_fd(c, &nfd), KVD_OK);
        ck_assert_int_ge(nfd, 0);
        /* the daemon's eventfd, not some other fd */
        ck_assert_int_eq(eventfd_read(nfd, &v), 0);
        ck_assert_uint_eq(v, 42);
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_OK);
        kvd_task_free(t);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- a daemon that closes in the middle of a frame --------------------------------------- */

/* Answers CheckLinkStatus with the first @u[0] bytes of its reply, then closes. */
static void script_cut_reply(FakeDaemon *d, int fd)
{
        _cleanup_free_ uint8_t *buf = NULL;
        Kvdist__V1__CheckLinkStatusReply r = KVDIST__V1__CHECK_LINK_STATUS_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        FakeFrame f;
        size_t len;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS);
        st.code = KVD_E_NOT_YET_LINK;
        st.detail = (char *)"no link to cluster 2 yet, and this detail makes the payload longer";
        r.status = &st;
        EXPECT(d, fake_pack_reply(&f, &r.base, 0, &buf, &len) == 0);
        d->u[1] = len;
        EXPECT(d, fake_send_all(fd, buf, d->u[0], NULL, 0) == 0);
        fake_frame_done(&f);
        /* Returning closes the connection. */
}

static void check_cut_reply(size_t cut, const char *want)
{
        FakeDaemon d;
        kvd_client *c;
        void *p = NULL;

        fake_start(&d, script_cut_reply);
        d.u[0] = cut;
        c = fake_client_init(&d);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_str_eq(kvd_last_error(c), want);
        /* Final: later calls fail at once the same way. */
        ck_assert_int_eq(kvd_mem_alloc(c, 4096, &p), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_str_eq(kvd_last_error(c), want);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
        ck_assert_uint_gt(d.u[1], cut);
}

START_TEST(test_daemon_closes_mid_frame)
{
        check_cut_reply(10, "kvdistd closed the connection in the middle of a frame (10 of 24 "
                            "header bytes)");
        check_cut_reply(24 + 20, "kvdistd closed the connection in the middle of a frame (20 of 72 "
                                 "payload bytes)");
        check_cut_reply(0, "kvdistd closed the connection");
}
END_TEST

/* --- a daemon that sends a malformed frame ---------------------------------------------- */

enum {
        BAD_FD_MISSING,   /* the header says 1 fd, none came */
        BAD_FD_UNCLAIMED, /* 1 fd came, the header says none */
        BAD_MAGIC,
};

/* Answers CheckLinkStatus with the reply broken as @u[0] says, then closes. */
static void script_bad_reply(FakeDaemon *d, int fd)
{
        _cleanup_free_ uint8_t *buf = NULL;
        Kvdist__V1__CheckLinkStatusReply r = KVDIST__V1__CHECK_LINK_STATUS_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        int efd = -1;
        FakeFrame f;
        size_t len;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS);
        r.status = &st;
        EXPECT(d, fake_pack_reply(&f, &r.base, d->u[0] == BAD_FD_MISSING ? 1 : 0, &buf, &len) == 0);
        if (d->u[0] == BAD_MAGIC)
                buf[0] ^= 0xff;
        if (d->u[0] == BAD_FD_UNCLAIMED) {
                efd = eventfd(0, EFD_CLOEXEC);
                EXPECT(d, efd >= 0);
        }
        EXPECT(d, fake_send_all(fd, buf, len, efd >= 0 ? &efd : NULL, efd >= 0 ? 1 : 0) == 0);
        safe_close(efd);
        fake_frame_done(&f);
        /* Returning closes the connection. */
}

static void check_bad_reply(uint64_t how, const char *want)
{
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_bad_reply);
        d.u[0] = how;
        c = fake_client_init(&d);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_str_eq(kvd_last_error(c), want);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}

/* The detail says what was wrong with the frame. */
START_TEST(test_daemon_sends_malformed_frame)
{
        check_bad_reply(BAD_FD_MISSING,
                        "kvdistd sent a malformed frame (0 fds for a header saying 1)");
        check_bad_reply(BAD_FD_UNCLAIMED,
                        "kvdistd sent a malformed frame (1 fds for a header saying 0)");
        check_bad_reply(BAD_MAGIC, "kvdistd sent a malformed frame header (Bad message)");
}
END_TEST

static Suite *client_ahead_suite(void)
{
        Suite *s = suite_create("client-ahead");
        TCase *tc = tcase_create("ahead");

        tcase_add_test(tc, test_answers_in_one_read);
        tcase_add_test(tc, test_reply_then_farewell);
        tcase_add_test(tc, test_finalize_then_late_reply);
        tcase_add_test(tc, test_long_reply_then_short);
        tcase_add_test(tc, test_fd_behind_another_reply);
        tcase_add_test(tc, test_daemon_closes_mid_frame);
        tcase_add_test(tc, test_daemon_sends_malformed_frame);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(client_ahead_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
