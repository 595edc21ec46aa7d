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
#include <inttypes.h>
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

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"

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
        return daemon_status_json(&daemon_);
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
        uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

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
        FrameHeader h = {FRAME_MAGIC, version, type, 0, n_fds, length, 77};
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
        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        if (r <= 0)
                return r == 0 ? -ECONNRESET : r;
        r = harness_frame_status(&f, &code, NULL, 0);
        harness_frame_deinit(&f);
        if (r < 0)
                return r;
        return code == KVD_OK ? 0 : -EPROTO;
}

/*
 * Many small requests in one write: the daemon reads them in one go and answers every one,
 * also those past the frames it takes in one pass of its loop, though the socket has nothing
 * more to wake it with.
 */
START_TEST(test_pipelined_requests_one_write)
{
        enum { N = 40 };
        uint8_t buf[N * FRAME_HEADER_SIZE];
        int fd, r, code;

        start_daemon(NULL);
        fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(raw_attach(fd, 601), 0);
        for (int i = 0; i < N; i++) {
                FrameHeader h = {FRAME_MAGIC,
                                 FRAME_VERSION,
                                 KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS,
                                 0,
                                 0,
                                 0,
                                 1000 + (uint64_t)i};

                frame_header_encode(&h, buf + (size_t)i * FRAME_HEADER_SIZE);
        }
        r = harness_raw_send(fd, buf, sizeof(buf), NULL, 0);
        ck_assert_msg(r == 0, "send: %s", strerror(-r));
        for (int i = 0; i < N; i++) {
                HarnessFrame f;

                r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
                ck_assert_msg(r == 1, "reply %d of %d: %s", i, N, r == 0 ? "none" : strerror(-r));
                ck_assert_uint_eq(f.h.request_id, 1000 + (uint64_t)i);
                ck_assert_int_eq(harness_frame_status(&f, &code, NULL, 0), 0);
                ck_assert_int_eq(code, KVD_OK);
                harness_frame_deinit(&f);
        }
        close(fd);
        stop_daemon();
}
END_TEST

/* A pull of @n blocks into a cache nobody registered, as one frame (malloc()ed) in *@ret. */
static size_t transfer_frame(size_t n, uint64_t request_id, uint8_t **ret)
{
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        Kvdist__V1__BlocksKey blocks = KVDIST__V1__BLOCKS_KEY__INIT;
        uint64_t *ids = calloc(n, sizeof(uint64_t));
        size_t len;

        ck_assert_ptr_nonnull(ids);
        for (size_t i = 0; i < n; i++)
                ids[i] = (i * 7919) % (n + 100000);
        blocks.cluster_id = 602;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &blocks;
        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t.remote_key = &key;
        t.local_cache_id = 424242;
        t.n_src_blocks = t.n_dst_blocks = n;
        t.src_blocks = t.dst_blocks = ids;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, request_id, 0, &t.base,
                                    UINT32_MAX, ret, &len),
                         0);
        free(ids);
        return len;
}

/* Reads the reply to @request_id: its status code, its detail in @detail. */
static int read_reply_code(int fd, uint64_t request_id, char *detail, size_t size)
{
        HarnessFrame f;
        int r, code;

        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        ck_assert_msg(r == 1, "reply to %" PRIu64 ": %s", request_id,
                      r == 0 ? "none" : strerror(-r));
        ck_assert_uint_eq(f.h.request_id, request_id);
        ck_assert_int_eq(harness_frame_status(&f, &code, detail, size), 0);
        harness_frame_deinit(&f);
        return code;
}

/*
 * A request of 100,000 block ids (600 KB) is decoded off the daemon's loop: its answer is the
 * one the same request with 10 ids gets, the requests the client sent behind it in the same
 * write are answered after it and in order, a big payload that does not decode closes the
 * connection as a small one does, and a client that goes while its request is being decoded
 * leaves a daemon that serves the next.
 */
START_TEST(test_big_frames_decoded_away)
{
        enum { N_SMALL = 10, N_BIG = 100000, N_AFTER = 8 };
        char small_detail[256], big_detail[256];
        uint8_t *small = NULL, *big = NULL, *buf;
        size_t small_len, big_len, len;
        int fd, code, r;
        int64_t away0, malformed0;

        start_daemon(NULL);
        fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(raw_attach(fd, 601), 0);
        away0 = counter("frames_decoded_away");
        malformed0 = counter("frames_malformed");

        small_len = transfer_frame(N_SMALL, 10, &small);
        ck_assert_int_eq(harness_raw_send(fd, small, small_len, NULL, 0), 0);
        code = read_reply_code(fd, 10, small_detail, sizeof(small_detail));
        ck_assert_int_ne(code, KVD_OK);
        ck_assert_int_eq(counter("frames_decoded_away"), away0);

        /* the big request, then status requests, in one write */
        big_len = transfer_frame(N_BIG, 11, &big);
        ck_assert_uint_ge(big_len, (size_t)256 << 10);
        len = big_len + N_AFTER * FRAME_HEADER_SIZE;
        buf = malloc(len);
        ck_assert_ptr_nonnull(buf);
        memcpy(buf, big, big_len);
        for (int i = 0; i < N_AFTER; i++) {
                FrameHeader h = {FRAME_MAGIC,
                                 FRAME_VERSION,
                                 KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS,
                                 0,
                                 0,
                                 0,
                                 100 + (uint64_t)i};

                frame_header_encode(&h, buf + big_len + (size_t)i * FRAME_HEADER_SIZE);
        }
        ck_assert_int_eq(harness_raw_send(fd, buf, len, NULL, 0), 0);
        free(buf);
        ck_assert_int_eq(read_reply_code(fd, 11, big_detail, sizeof(big_detail)), code);
        ck_assert_str_eq(big_detail, small_detail);
        for (int i = 0; i < N_AFTER; i++)
                ck_assert_int_eq(read_reply_code(fd, 100 + (uint64_t)i, NULL, 0), KVD_OK);
        ck_assert_int_eq(counter("frames_decoded_away") - away0, 1);

        /* 300,000 bytes of a packed list whose varints never end */
        {
                size_t body = 300000, plen = 1 + 3 + body;
                FrameHeader h = {FRAME_MAGIC,
                                 FRAME_VERSION,
                                 KVDIST__V1__MSG_TYPE__MSG_TRANSFER,
                                 0,
                                 0,
                                 (uint32_t)plen,
                                 12};

                buf = malloc(FRAME_HEADER_SIZE + plen);
                ck_assert_ptr_nonnull(buf);
                frame_header_encode(&h, buf);
                buf[FRAME_HEADER_SIZE] = 4 << 3 | 2; /* src_blocks, length-delimited */
                buf[FRAME_HEADER_SIZE + 1] = (uint8_t)(body & 0x7f) | 0x80;
                buf[FRAME_HEADER_SIZE + 2] = (uint8_t)(body >> 7 & 0x7f) | 0x80;
                buf[FRAME_HEADER_SIZE + 3] = (uint8_t)(body >> 14);
                memset(buf + FRAME_HEADER_SIZE + 4, 0xff, body);
                ck_assert_int_eq(harness_raw_send(fd, buf, FRAME_HEADER_SIZE + plen, NULL, 0), 0);
                free(buf);
        }
        ck_assert_int_eq(harness_raw_wait_closed(fd, harness_wait_ms()), 1);
        close(fd);
        ck_assert_int_eq(counter("frames_malformed") - malformed0, 1);
        ck_assert_int_eq(counter("frames_decoded_away") - away0, 2);

        /*
         * Clients gone before their big request is decoded, or just after. A connection reads
         * nothing while its request decodes, so it learns of the close, and its cluster goes,
         * once the decoding is over: each is waited for, or a slow (sanitized) decoder would
         * leave the uid more clusters than limits.per_user.max_clusters allows.
         */
        for (int i = 0; i < 20; i++) {
                fd = harness_raw_connect(daemon_.socket_path);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(raw_attach(fd, 700 + (uint64_t)i), 0);
                ck_assert_int_eq(harness_raw_send(fd, big, big_len, NULL, 0), 0);
                close(fd);
                ck_assert_msg(wait_clusters(0, harness_wait_ms()),
                              "cluster %d outlived its connection", 700 + i);
        }
        fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(raw_attach(fd, 603), 0);
        ck_assert_int_eq(harness_raw_send(fd, small, small_len, NULL, 0), 0);
        ck_assert_int_eq(read_reply_code(fd, 10, NULL, 0), code);
        close(fd);
        r = counter("frames_decoded_away") - away0;
        ck_assert_int_ge(r, 2);
        ck_assert_int_le(r, 22);
        free(small);
        free(big);
        stop_daemon();
}
END_TEST

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
                        ck_assert_int_eq(harness_raw_wait_closed(fd, harness_wait_ms()), 1);
                close(fd);
        }
        /* Still serving, every bad frame counted, and no sanitizer report at the stop. */
        ck_assert(harness_daemon_alive(&daemon_));
        ck_assert_int_eq(counter("frames_malformed") - malformed0, 40);
        stop_daemon();
}
END_TEST

/*
 * A header that does not decode, after a request that did, is logged as a broken header: the
 * previous request's header (a status call's) is not named for it.
 */
START_TEST(test_broken_header_after_a_request)
{
        long malformed0;
        int fd;

        start_daemon(NULL);
        malformed0 = counter("frames_malformed");
        fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(raw_attach(fd, 603), 0);
        send_header(fd, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 0,
                    FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_int_eq(read_reply_code(fd, 77, NULL, 0), KVD_OK);
        /* more payload than kvdistd takes in a frame: -EMSGSIZE from the header alone */
        send_header(fd, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, UINT32_MAX,
                    FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_int_eq(harness_raw_wait_closed(fd, harness_wait_ms()), 1);
        wait_log("broken frame header, closing");
        ck_assert(!harness_daemon_log_contains(&daemon_, "broken frame (type"));
        ck_assert_int_eq(counter("frames_malformed") - malformed0, 1);
        close(fd);
        stop_daemon();
}
END_TEST

/* Fds that would keep a connection alive after its client exits. */

typedef struct Attacker {
        uint64_t cluster_id;
        bool split_header; /* the fd rides on a header that never completes */
        int kind;          /* 0: a dup of its own socket, 1: a pipe, 2: an eventfd */
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
        static const char *const args[] = {"--max-clients", "4", NULL};
        static const Attacker attackers[] = {
                {101, false, 0},
                {102, true, 0},
                {103, false, 1},
                {104, true, 2},
        };
        HarnessChild kids[ARRAY_SIZE(attackers)];
        kvd_client *worker = NULL;
        int64_t malformed0;
        int r;

        start_daemon(args);
        malformed0 = counter("frames_malformed");
        for (size_t i = 0; i < ARRAY_SIZE(attackers); i++)
                ck_assert_int_eq(
                        harness_fork_client(attacker_main, (void *)&attackers[i], &kids[i]), 0);
        for (size_t i = 0; i < ARRAY_SIZE(attackers); i++)
                ck_assert_int_eq(harness_child_wait(&kids[i], harness_wait_ms()), 0);

        /* Every attacker's connection is closed as its fd arrives: no deadline needed. */
        ck_assert_msg(wait_clusters(0, harness_wait_ms()), "%zu clusters outlived their processes",
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
        static const char *const args[] = {"--max-clients", "4", NULL};
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

        ck_assert_msg(harness_raw_wait_closed(half, harness_wait_ms()) == 1,
                      "half a header held on");
        ck_assert_msg(harness_raw_wait_closed(with_fd, harness_wait_ms()) == 1,
                      "a partial frame held on");
        ck_assert_msg(harness_raw_wait_closed(silent, harness_wait_ms()) == 1,
                      "a silent client held on");
        /* Load only makes it later; the connections were made up to a moment before t0. */
        ck_assert_msg(harness_now_ms() - t0 >= (FRAME_TIMEOUT_SEC - 2) * 1000,
                      "closed after %llu ms, before the limit",
                      (unsigned long long)(harness_now_ms() - t0));
        close(half);
        close(with_fd);
        close(silent);
        wait_log("did not complete within 10 s, closing");
        wait_log("no Hello within 10 s, closing");

        ck_assert(wait_clusters(1, harness_wait_ms()));
        ck_assert_int_eq(kvd_daemon_status(idle, &json), KVD_OK);
        free(json);
        ck_assert_int_eq(kvd_client_finalize(idle), KVD_OK);
        r = harness_client_init(&daemon_, 504, KVD_ROLE_MIX, &worker);
        ck_assert_msg(r == KVD_OK, "kvd_client_init: %s", kvd_strerror(r));
        ck_assert_int_eq(kvd_client_finalize(worker), KVD_OK);
        stop_daemon();
}
END_TEST

/* Processes under other uids. */

static bool need_root(void)
{
        if (geteuid() == 0)
                return true;
        fprintf(stderr, "skipped: switching to other uids needs root\n");
        return false;
}

/* Writes @text to @path. */
static void write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");

        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        ck_assert_int_ge(fputs(text, f), 0);
        ck_assert_int_eq(fclose(f), 0);
}

typedef struct AsUser {
        uid_t uid;
        gid_t gid;
        const gid_t *groups;
        size_t n_groups;
        harness_child_fn fn;
        void *arg;
} AsUser;

static int drop_privileges(uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups)
{
        if (setgroups(n_groups, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                return -errno;
        return 0;
}

static int as_user_main(void *arg)
{
        const AsUser *u = arg;

        if (drop_privileges(u->uid, u->gid, u->groups, u->n_groups) < 0) {
                fprintf(stderr, "cannot become uid %u: %s\n", (unsigned)u->uid, strerror(errno));
                return 120;
        }
        /* Only the default rule for this uid: the fallback folder under /tmp. */
        unsetenv("XDG_RUNTIME_DIR");
        unsetenv("KVDIST_SOCKET");
        return u->fn(u->arg);
}

/* Runs @fn(@arg) in a child as @uid/@gid with @groups; returns its exit code. */
static int run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups, harness_child_fn fn,
                  void *arg)
{
        AsUser u = {uid, gid, groups, n_groups, fn, arg};
        HarnessChild c;
        int r;

        ck_assert_int_eq(harness_fork_client(as_user_main, &u, &c), 0);
        r = harness_child_wait(&c, harness_wait_ms());
        if (r == -ETIMEDOUT)
                r = harness_child_kill(&c, SIGKILL);
        return r;
}

/* An allow-list refusal says so. */

static const char *const allow_config =
        "{ \"socket_mode\": \"0666\", \"allow_uids\": [4242], \"allow_gids\": [4343] }\n";

/* Starts a daemon with the allow-lists above whose socket every uid can reach. */
static void start_allow_daemon(char *config_dir)
{
        char path[128];
        const char *args[] = {"--config", path, NULL};

        ck_assert_ptr_nonnull(mkdtemp(config_dir));
        ck_assert_int_eq(chmod(config_dir, 0755), 0);
        snprintf(path, sizeof(path), "%s/kvdistd.json", config_dir);
        write_file(path, allow_config);
        start_daemon(args);
        ck_assert_int_eq(chmod(daemon_.dir, 0755), 0);
}

static void remove_config_dir(const char *config_dir)
{
        char path[128];

        snprintf(path, sizeof(path), "%s/kvdistd.json", config_dir);
        unlink(path);
        rmdir(config_dir);
}

#define CHILD_CHECK(cond, code, ...)                                                               \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fputc('\n', stderr);                                                       \
                        return (code);                                                             \
                }                                                                                  \
        } while (0)

static int denied_main(void *arg)
{
        const char *ctl = getenv("KVDISTCTL");
        const char *argv[] = {ctl, "--socket", daemon_.socket_path, "status", NULL};
        char *out = NULL, *err = NULL;
        kvd_client *c = NULL;
        int r;

        /* Often enough that the refusal comes both before and after Hello went out. */
        for (int i = 0; i < 20; i++) {
                r = kvd_client_connect(daemon_.options, 1, &c);
                CHILD_CHECK(r == KVD_E_PERMISSION_DENIED, 10, "kvd_client_connect: %s (%s)",
                            kvd_strerror(r), kvd_last_error(NULL));
                CHILD_CHECK(strstr(kvd_last_error(NULL), "allow_uids"), 11, "detail: %s",
                            kvd_last_error(NULL));
        }
        r = kvd_client_init(7, KVD_ROLE_MIX, daemon_.options, 2, &c);
        CHILD_CHECK(r == KVD_E_PERMISSION_DENIED, 12, "kvd_client_init: %s (%s)", kvd_strerror(r),
                    kvd_last_error(NULL));
        CHILD_CHECK(strstr(kvd_last_error(NULL), "uid 65534"), 13, "detail: %s",
                    kvd_last_error(NULL));

        r = harness_run(argv, &out, &err);
        CHILD_CHECK(r == 4, 14, "kvdistctl exited %d: %s", r, err);
        CHILD_CHECK(strstr(err, "not allowed") && strstr(err, "allow_uids"), 15, "kvdistctl: %s",
                    err);
        free(out);
        free(err);
        return 0;
}

static int allowed_main(void *arg)
{
        kvd_client *c = NULL;
        int r;

        r = kvd_client_init((uint64_t)(uintptr_t)arg, KVD_ROLE_MIX, daemon_.options, 2, &c);
        CHILD_CHECK(r == KVD_OK, 10, "kvd_client_init: %s (%s)", kvd_strerror(r),
                    kvd_last_error(NULL));
        r = kvd_client_finalize(c);
        CHILD_CHECK(r == KVD_OK, 11, "kvd_client_finalize: %s", kvd_strerror(r));
        return 0;
}

START_TEST(test_allow_list_denied)
{
        char config_dir[] = "/tmp/kvdist-it-cfg-XXXXXX";
        int64_t refused0;

        if (!need_root())
                return;
        start_allow_daemon(config_dir);
        refused0 = counter("connections_refused");

        ck_assert_int_eq(run_as(NOBODY, NOBODY, NULL, 0, denied_main, NULL), 0);
        ck_assert_int_ge(counter("connections_refused") - refused0, 22);
        wait_log("uid 65534 gid 65534 is not in the allow-list, refusing");
        /* The listed uid, and a listed primary gid, still get in. */
        ck_assert_int_eq(run_as(ALLOWED_UID, NOBODY, NULL, 0, allowed_main, (void *)11), 0);
        ck_assert_int_eq(run_as(NOBODY, ALLOWED_GID, NULL, 0, allowed_main, (void *)12), 0);
        stop_daemon();
        remove_config_dir(config_dir);
}
END_TEST

/* allow_gids counts supplementary groups. */

START_TEST(test_allow_gids_supplementary)
{
        static const gid_t groups[] = {100, ALLOWED_GID};
        char config_dir[] = "/tmp/kvdist-it-cfg-XXXXXX";

        if (!need_root())
                return;
        start_allow_daemon(config_dir);
        /* Primary group not listed, a supplementary one is. */
        ck_assert_int_eq(
                run_as(NOBODY, NOBODY, groups, ARRAY_SIZE(groups), allowed_main, (void *)21), 0);
        /* Supplementary groups that are not listed do not help. */
        ck_assert_int_eq(run_as(NOBODY, NOBODY, groups, 1, denied_main, NULL), 0);
        stop_daemon();
        remove_config_dir(config_dir);
}
END_TEST

/* The per-user fallback folder /tmp/kvdist-UID. */

/* Starts kvdistd as @uid (0: as we are) with @extra arguments, its output in @log_path. */
static pid_t spawn_daemon_as(uid_t uid, const char *log_path, const char *const *extra)
{
        const char *bin = getenv("KVDISTD");
        const char *argv[16] = {bin, "--memory-size", "0", "--log-level", "debug"};
        size_t n = 5;
        pid_t pid;

        ck_assert_msg(bin && bin[0], "$KVDISTD is not set");
        for (size_t i = 0; extra && extra[i]; i++) {
                ck_assert(n + 1 < ARRAY_SIZE(argv));
                argv[n++] = extra[i];
        }
        argv[n] = NULL;
        fflush(NULL);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(126);
                unsetenv("XDG_RUNTIME_DIR");
                if (uid != 0 && drop_privileges(uid, uid, NULL, 0) < 0)
                        _exit(125);
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        return pid;
}

/* Waits up to @timeout_ms for @pid; its exit code, or -ETIMEDOUT after killing it. */
static int wait_exit(pid_t pid, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        int status;

        for (;;) {
                pid_t r = waitpid(pid, &status, WNOHANG);

                ck_assert_int_ge(r, 0);
                if (r == pid)
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (harness_now_ms() >= deadline) {
                        (void)kill(pid, SIGKILL);
                        (void)waitpid(pid, &status, 0);
                        return -ETIMEDOUT;
                }
                harness_sleep_ms(20);
        }
}

static bool socket_accepts(const char *path, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                int fd = harness_raw_connect(path);

                if (fd >= 0) {
                        close(fd);
                        return true;
                }
                if (harness_now_ms() >= deadline)
                        return false;
                harness_sleep_ms(20);
        }
}

static char *read_text(const char *path)
{
        FILE *f = fopen(path, "r");
        char *buf = calloc(1, 65536);
        size_t n;

        ck_assert(f && buf);
        n = fread(buf, 1, 65535, f);
        buf[n] = '\0';
        fclose(f);
        return buf;
}

static void expect_text(const char *text, const char *needle, const char *what)
{
        ck_assert_msg(strstr(text, needle), "%s lacks \"%s\":\n%s", what, needle, text);
}

/* Attaches through the default socket path of this uid. */
static int default_client_main(void *arg)
{
        static const kvd_option device = {"device_id", "0"};
        kvd_client *c = NULL;
        int r;

        r = kvd_client_init((uint64_t)(uintptr_t)arg, KVD_ROLE_MIX, &device, 1, &c);
        CHILD_CHECK(r == KVD_OK, 10, "kvd_client_init: %s (%s)", kvd_strerror(r),
                    kvd_last_error(NULL));
        r = kvd_client_finalize(c);
        CHILD_CHECK(r == KVD_OK, 11, "kvd_client_finalize: %s", kvd_strerror(r));
        return 0;
}

/* A uid no account has, per test process: several checkouts may run their tests at once. */
static uid_t folder_uid(void)
{
        return (uid_t)(2000000000u + (unsigned)getpid() % 100000000u);
}

typedef struct Folder {
        uid_t uid;
        char dir[64];    /* /tmp/kvdist-UID */
        char sock[96];   /* its kvdist.sock */
        char tmp[64];    /* the test's own scratch folder */
        char target[96]; /* where a symlink points */
        char log[96];
} Folder;

/* Removes /tmp/kvdist-UID (a folder with a socket in it, or a symlink) and the target. */
static void folder_clear(Folder *f)
{
        char path[128];

        unlink(f->sock);
        if (unlink(f->dir) < 0)
                rmdir(f->dir);
        snprintf(path, sizeof(path), "%s/kvdist.sock", f->target);
        unlink(path);
        rmdir(f->target);
}

static void folder_init(Folder *f)
{
        f->uid = folder_uid();
        snprintf(f->dir, sizeof(f->dir), "/tmp/kvdist-%u", (unsigned)f->uid);
        snprintf(f->sock, sizeof(f->sock), "%s/kvdist.sock", f->dir);
        snprintf(f->tmp, sizeof(f->tmp), "/tmp/kvdist-it-folder-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->tmp));
        snprintf(f->target, sizeof(f->target), "%s/target", f->tmp);
        snprintf(f->log, sizeof(f->log), "%s/kvdistd.log", f->tmp);
        folder_clear(f);
}

static void folder_done(Folder *f)
{
        folder_clear(f);
        unlink(f->log);
        rmdir(f->tmp);
}

static void make_dir(const char *path, uid_t uid, mode_t mode)
{
        ck_assert_msg(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
        ck_assert_int_eq(chown(path, uid, uid), 0);
        ck_assert_int_eq(chmod(path, mode), 0);
}

/* The three ways /tmp/kvdist-UID can be someone else's; returns false after the last. */
static bool folder_make_hostile(Folder *f, int how, const char **ret_why)
{
        folder_clear(f);
        switch (how) {
        case 0:
                make_dir(f->dir, 0, 0777);
                *ret_why = "owned by uid 0";
                return true;
        case 1:
                make_dir(f->dir, f->uid, 0777);
                *ret_why = "writable by group or others";
                return true;
        case 2:
                make_dir(f->target, f->uid, 0700);
                ck_assert_int_eq(symlink(f->target, f->dir), 0);
                *ret_why = "is a symbolic link";
                return true;
        default:
                return false;
        }
}

START_TEST(test_socket_folder_daemon)
{
        const char *why;
        struct stat st;
        Folder f;
        pid_t pid;

        if (!need_root())
                return;
        folder_init(&f);

        for (int how = 0; folder_make_hostile(&f, how, &why); how++) {
                char *log;
                int r;

                pid = spawn_daemon_as(f.uid, f.log, NULL);
                r = wait_exit(pid, harness_wait_ms());
                log = read_text(f.log);
                ck_assert_msg(r == 1, "kvdistd exited %d with %s %s:\n%s", r, f.dir, why, log);
                expect_text(log, f.dir, "kvdistd's log");
                expect_text(log, why, "kvdistd's log");
                ck_assert_msg(lstat(f.sock, &st) < 0 && errno == ENOENT,
                              "kvdistd made a socket in %s", f.dir);
                free(log);
        }

        /* Missing: made 0700 and served. */
        folder_clear(&f);
        pid = spawn_daemon_as(f.uid, f.log, NULL);
        ck_assert_msg(socket_accepts(f.sock, harness_wait_ms()), "kvdistd does not listen on %s",
                      f.sock);
        ck_assert_int_eq(lstat(f.dir, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_uint_eq(st.st_uid, f.uid);
        ck_assert_uint_eq(st.st_mode & 07777, 0700);
        ck_assert_int_eq(run_as(f.uid, f.uid, NULL, 0, default_client_main, (void *)31), 0);
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        ck_assert_int_eq(wait_exit(pid, harness_wait_ms()), 0);
        folder_done(&f);
}
END_TEST

typedef struct FolderClient {
        const Folder *f;
        const char *why;
} FolderClient;

static int folder_client_main(void *arg)
{
        const FolderClient *fc = arg;
        const char *ctl = getenv("KVDISTCTL");
        const char *argv[] = {ctl, "status", NULL};
        char *out = NULL, *err = NULL;
        kvd_client *c = NULL;
        int r;

        r = kvd_client_connect(NULL, 0, &c);
        CHILD_CHECK(r == KVD_E_PERMISSION_DENIED, 10, "kvd_client_connect: %s (%s)",
                    kvd_strerror(r), kvd_last_error(NULL));
        CHILD_CHECK(strstr(kvd_last_error(NULL), fc->f->dir) &&
                            strstr(kvd_last_error(NULL), fc->why),
                    11, "detail: %s", kvd_last_error(NULL));
        r = harness_run(argv, &out, &err);
        CHILD_CHECK(r == 4 && strstr(err, fc->why), 12, "kvdistctl exited %d: %s", r, err);
        free(out);
        free(err);
        return 0;
}

START_TEST(test_socket_folder_client)
{
        const char *why;
        Folder f;

        if (!need_root())
                return;
        folder_init(&f);

        for (int how = 0; folder_make_hostile(&f, how, &why); how++) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                FolderClient fc = {&f, why};
                int lfd, cfd, r;

                /* Someone else's socket waits for the client's Hello and memfds. */
                lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                ck_assert_int_ge(lfd, 0);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.sock);
                ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
                ck_assert_int_eq(chmod(f.sock, 0777), 0);
                ck_assert_int_eq(listen(lfd, 16), 0);

                r = run_as(f.uid, f.uid, NULL, 0, folder_client_main, &fc);
                cfd = accept(lfd, NULL, NULL);
                ck_assert_msg(cfd < 0, "a client connected to a socket in %s (%s)", f.dir, why);
                ck_assert_msg(r == 0, "the client as uid %u with %s %s exited %d", (unsigned)f.uid,
                              f.dir, why, r);
                close(lfd);
        }
        folder_done(&f);
}
END_TEST

/* --socket replaces a stale socket and nothing else. */

START_TEST(test_socket_path_not_a_socket)
{
        static const char precious[] = "precious data\n";
        char tmp[] = "/tmp/kvdist-it-path-XXXXXX", file[96], dir[96], link[96], stale[96], log[96];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *const targets[] = {file, dir, link};
        pid_t pid;
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(tmp));
        snprintf(file, sizeof(file), "%s/file", tmp);
        snprintf(dir, sizeof(dir), "%s/dir", tmp);
        snprintf(link, sizeof(link), "%s/link", tmp);
        snprintf(stale, sizeof(stale), "%s/stale.sock", tmp);
        snprintf(log, sizeof(log), "%s/kvdistd.log", tmp);
        write_file(file, precious);
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        ck_assert_int_eq(symlink(file, link), 0);

        for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
                const char *const args[] = {"--socket", targets[i], NULL};
                char *text;
                int r;

                pid = spawn_daemon_as(0, log, args);
                r = wait_exit(pid, harness_wait_ms());
                text = read_text(log);
                ck_assert_msg(r == 1, "kvdistd --socket %s exited %d:\n%s", targets[i], r, text);
                expect_text(text, "is not a socket, refusing to replace it", "kvdistd's log");
                free(text);
        }
        {
                char *got = read_text(file);
                struct stat st;

                ck_assert_str_eq(got, precious);
                free(got);
                ck_assert_int_eq(lstat(dir, &st), 0);
                ck_assert(S_ISDIR(st.st_mode));
                ck_assert_int_eq(lstat(link, &st), 0);
                ck_assert(S_ISLNK(st.st_mode));
        }

        /* A socket nobody answers on is replaced, and removed at the stop. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", stale);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
        {
                const char *const args[] = {"--socket", stale, NULL};
                struct stat st;

                pid = spawn_daemon_as(0, log, args);
                ck_assert_msg(socket_accepts(stale, harness_wait_ms()),
                              "kvdistd did not replace %s", stale);
                ck_assert_int_eq(kill(pid, SIGTERM), 0);
                ck_assert_int_eq(wait_exit(pid, harness_wait_ms()), 0);
                ck_assert(lstat(stale, &st) < 0 && errno == ENOENT);
        }

        /* A socket a daemon answers on is not taken over. */
        start_daemon(NULL);
        {
                const char *const args[] = {"--socket", daemon_.socket_path, NULL};
                char *text;

                pid = spawn_daemon_as(0, log, args);
                ck_assert_int_eq(wait_exit(pid, harness_wait_ms()), 1);
                text = read_text(log);
                expect_text(text, "another kvdistd is listening", "kvdistd's log");
                free(text);
        }
        ck_assert(socket_accepts(daemon_.socket_path, harness_wait_ms()));
        stop_daemon();

        unlink(log);
        unlink(link);
        unlink(file);
        rmdir(dir);
        rmdir(tmp);
}
END_TEST

static Suite *hostile_client_suite(void)
{
        Suite *s = suite_create("integration-hostile-client");
        TCase *tc;

        tc = tcase_create("frames");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_error_reply_to_closed_reader);
        tcase_add_test(tc, test_broken_header_after_a_request);
        tcase_add_test(tc, test_pipelined_requests_one_write);
        tcase_add_test(tc, test_big_frames_decoded_away);
        tcase_add_test(tc, test_socket_fd_cycle);
        tcase_add_test(tc, test_partial_frame_deadline);
        suite_add_tcase(s, tc);

        tc = tcase_create("access");
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_allow_list_denied);
        tcase_add_test(tc, test_allow_gids_supplementary);
        suite_add_tcase(s, tc);

        tc = tcase_create("paths");
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_socket_folder_daemon);
        tcase_add_test(tc, test_socket_folder_client);
        tcase_add_test(tc, test_socket_path_not_a_socket);
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
