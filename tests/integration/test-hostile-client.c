/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, hostile local clients: a process that may open the socket must not be able
 * to crash kvdistd, pin a connection and its cluster forever, or hold a slot without talking;
 * a refused process hears why; the per-user socket folder and the --socket path cannot be turned
 * against the daemon or its clients. Several tests run processes under other uids and need root.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvdist.pb-c.h"
#include "macro.h"

/* An unprivileged uid and gid every system has. */
#define NOBODY 65534
#define ALLOWED_UID 4242
#define ALLOWED_GID 4343
/* CONN_FRAME_TIMEOUT_SEC: a frame, or Hello, that takes longer closes the connection. */
#define FRAME_TIMEOUT_SEC 10

static HarnessDaemon daemon_;

static void start_daemon(const char *const *extra)
{
        int r = harness_daemon_startv(&daemon_, extra);

        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
}

static void stop_daemon(void)
{
        ck_assert_msg(harness_daemon_alive(&daemon_), "kvdistd died");
        ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);
        harness_daemon_cleanup(&daemon_);
}

static json_t *status_json(void)
{
        char *text = NULL;
        json_error_t jerr;
        json_t *root;
        int r;

        r = harness_daemon_status(&daemon_, &text);
        ck_assert_msg(r == KVD_OK, "kvd_daemon_status: %s", kvd_strerror(r));
        root = json_loads(text, 0, &jerr);
        ck_assert_msg(root, "status JSON: %s", jerr.text);
        free(text);
        return root;
}

static int64_t counter(const char *name)
{
        json_t *root = status_json();
        int64_t v = json_integer_value(json_object_get(json_object_get(root, "counters"), name));

        json_decref(root);
        return v;
}

static size_t n_clusters(void)
{
        json_t *root = status_json();
        size_t n = json_array_size(json_object_get(root, "clusters"));

        json_decref(root);
        return n;
}

static bool wait_clusters(size_t n, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        while (n_clusters() != n) {
                if (harness_now_ms() >= deadline)
                        return false;
                harness_sleep_ms(20);
        }
        return true;
}

static void wait_log(const char *needle)
{
        uint64_t deadline = harness_now_ms() + 10000;

        while (!harness_daemon_log_contains(&daemon_, needle)) {
                if (harness_now_ms() >= deadline) {
                        harness_daemon_dump_log(&daemon_, 4096);
                        ck_abort_msg("kvdistd's log lacks \"%s\"", needle);
                }
                harness_sleep_ms(20);
        }
}

/* Raw frames. */

static void send_header(int fd, uint16_t version, uint16_t type, uint16_t n_fds, uint32_t length,
                        size_t send_bytes, const int *fds, size_t n_send_fds)
{
        FrameHeader h = { FRAME_MAGIC, version, type, 0, n_fds, length, 77 };
        uint8_t buf[FRAME_HEADER_SIZE];
        int r;

        frame_header_encode(&h, buf);
        r = harness_raw_send(fd, buf, send_bytes, fds, n_send_fds);
        ck_assert_msg(r == 0, "send: %s", strerror(-r));
}

/* Hello and ClientInit as @cluster_id on a raw connection; returns 0 or a negative errno. */
static int raw_attach(int fd, uint64_t cluster_id)
{
        Kvdist__V1__ClientInit init = KVDIST__V1__CLIENT_INIT__INIT;
        HarnessFrame f;
        int r, code;

        r = harness_raw_hello(fd);
        if (r < 0)
                return r;
        init.cluster_id = cluster_id;
        init.role = KVDIST__V1__ROLE__ROLE_MIX;
        r = harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, 0, 2, &init.base,
                                   NULL, 0);
        if (r < 0)
                return r;
        r = harness_raw_read_frame(fd, 5000, &f);
        if (r <= 0)
                return r == 0 ? -ECONNRESET : r;
        r = harness_frame_status(&f, &code, NULL, 0);
        harness_frame_deinit(&f);
        if (r < 0)
                return r;
        return code == KVD_OK ? 0 : -EPROTO;
}

/* An error reply that cannot be written (the client stopped reading) frees nothing twice. */

START_TEST(test_error_reply_to_closed_reader)
{
        long malformed0;

        start_daemon(NULL);
        malformed0 = counter("frames_malformed");
        for (int i = 0; i < 40; i++) {
                int fd = harness_raw_connect(daemon_.socket_path);

                ck_assert_int_ge(fd, 0);
                /* The daemon's error reply fails with EPIPE: half of them cannot be read, the
                 * other half find the connection gone. */
                if (i % 2 == 0)
                        ck_assert_int_eq(shutdown(fd, SHUT_RD), 0);
                send_header(fd, FRAME_VERSION + 1, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 0,
                            FRAME_HEADER_SIZE, NULL, 0);
                if (i % 2 == 0)
                        ck_assert_int_eq(harness_raw_wait_closed(fd, 5000), 1);
                close(fd);
        }
        /* Still serving, every bad frame counted, and no sanitizer report at the stop. */
        ck_assert(harness_daemon_alive(&daemon_));
        ck_assert_int_eq(counter("frames_malformed") - malformed0, 40);
        stop_daemon();
}
END_TEST

/* Fds that would keep a connection alive after its client exits. */

typedef struct Attacker {
        uint64_t cluster_id;
        bool split_header;      /* the fd rides on a header that never completes */
        int kind;               /* 0: a dup of its own socket, 1: a pipe, 2: an eventfd */
} Attacker;

/* Attaches, then leaves a partial RegionAdd that carries a forbidden fd, and exits. */
static int attacker_main(void *arg)
{
        const Attacker *a = arg;
        int fd = harness_raw_connect(daemon_.socket_path), extra = -1, pfd[2];

        if (fd < 0)
                return 10;
        if (raw_attach(fd, a->cluster_id) < 0)
                return 11;
        switch (a->kind) {
        case 0:
                extra = dup(fd);
                break;
        case 1:
                if (pipe(pfd) < 0)
                        return 12;
                extra = pfd[0];
                break;
        default:
                extra = eventfd(0, 0);
                break;
        }
        if (extra < 0)
                return 13;
        send_header(fd, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 1, 64,
                    a->split_header ? 10 : FRAME_HEADER_SIZE, &extra, 1);
        /* The process exits: only the daemon may still hold its socket. */
        return 0;
}

START_TEST(test_socket_fd_cycle)
{
        static const char *const args[] = { "--max-clients", "4", NULL };
        static const Attacker attackers[] = {
                { 101, false, 0 }, { 102, true, 0 }, { 103, false, 1 }, { 104, true, 2 },
        };
        HarnessChild kids[ARRAY_SIZE(attackers)];
        kvd_client *worker = NULL;
        int64_t malformed0;
        int r;

        start_daemon(args);
        malformed0 = counter("frames_malformed");
        for (size_t i = 0; i < ARRAY_SIZE(attackers); i++)
                ck_assert_int_eq(harness_fork_client(attacker_main, (void *)&attackers[i],
                                                     &kids[i]), 0);
        for (size_t i = 0; i < ARRAY_SIZE(attackers); i++)
                ck_assert_int_eq(harness_child_wait(&kids[i], 10000), 0);

        /* Every attacker's connection is closed as its fd arrives: no deadline needed. */
        ck_assert_msg(wait_clusters(0, 5000), "%zu clusters outlived their processes",
                      n_clusters());
        r = harness_client_init(&daemon_, 999, KVD_ROLE_MIX, &worker);
        ck_assert_msg(r == KVD_OK, "a worker cannot attach after the attack: %s (%s)",
                      kvd_strerror(r), kvd_last_error(NULL));
        ck_assert_int_eq(kvd_client_finalize(worker), KVD_OK);

        wait_log("sent a socket as fd 0 of a frame; clients may pass memfds only, closing");
        wait_log("sent a pipe as fd 0");
        wait_log("sent an anonymous inode as fd 0");
        ck_assert_int_eq(counter("frames_malformed") - malformed0, 4);
        stop_daemon();
}
END_TEST

/* A frame, or Hello, that never completes holds a slot only for a bounded time. */

START_TEST(test_partial_frame_deadline)
{
        static const char *const args[] = { "--max-clients", "4", NULL };
        int half, with_fd, silent, mfd;
        kvd_client *idle = NULL, *worker = NULL;
        uint64_t t0;
        char *json = NULL;
        int r;

        start_daemon(args);
        /* Half a header, after attaching. */
        half = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(half, 0);
        ck_assert_int_eq(raw_attach(half, 501), 0);
        send_header(half, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 0, 10, NULL,
                    0);
        /* A whole header with a memfd, and a payload that never comes. */
        with_fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(with_fd, 0);
        ck_assert_int_eq(raw_attach(with_fd, 502), 0);
        mfd = memfd_create("it-partial", MFD_CLOEXEC);
        ck_assert_int_ge(mfd, 0);
        send_header(with_fd, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 1, 64,
                    FRAME_HEADER_SIZE, &mfd, 1);
        close(mfd);
        /* Nothing at all: not even Hello. */
        silent = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(silent, 0);
        t0 = harness_now_ms();

        /* A client that said Hello and then idles is never timed out. */
        r = harness_client_init(&daemon_, 503, KVD_ROLE_MIX, &idle);
        ck_assert_msg(r == KVD_OK, "kvd_client_init: %s", kvd_strerror(r));

        ck_assert_msg(harness_raw_wait_closed(half, 30000) == 1, "half a header held on");
        ck_assert_msg(harness_raw_wait_closed(with_fd, 30000) == 1, "a partial frame held on");
        ck_assert_msg(harness_raw_wait_closed(silent, 30000) == 1, "a silent client held on");
        /* Load only makes it later; the connections were made up to a moment before t0. */
        ck_assert_msg(harness_now_ms() - t0 >= (FRAME_TIMEOUT_SEC - 2) * 1000,
                      "closed after %llu ms, before the limit",
                      (unsigned long long)(harness_now_ms() - t0));
        close(half);
        close(with_fd);
        close(silent);
        wait_log("did not complete within 10 s, closing");
        wait_log("no Hello within 10 s, closing");

        ck_assert(wait_clusters(1, 5000));
        ck_assert_int_eq(kvd_daemon_status(idle, &json), KVD_OK);
        free(json);
        ck_assert_int_eq(kvd_client_finalize(idle), KVD_OK);
        r = harness_client_init(&daemon_, 504, KVD_ROLE_MIX, &worker);
        ck_assert_msg(r == KVD_OK, "kvd_client_init: %s", kvd_strerror(r));
        ck_assert_int_eq(kvd_client_finalize(worker), KVD_OK);
        stop_daemon();
}
END_TEST

static Suite *hostile_client_suite(void)
{
        Suite *s = suite_create("integration-hostile-client");
        TCase *tc;

        tc = tcase_create("frames");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_error_reply_to_closed_reader);
        tcase_add_test(tc, test_socket_fd_cycle);
        tcase_add_test(tc, test_partial_frame_deadline);
        suite_add_tcase(s, tc);


        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(hostile_client_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
