/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, faults: clients and source owners killed mid-transfer, the daemon stopped
 * or killed under waiting clients, and malformed or hostile frames on the raw socket. The daemon
 * answers with a status, never hangs, never writes garbage, and keeps serving everyone else.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "proto/kvdist.pb-c.h"

#define A_ID 1001
#define B_ID 2002
#define C_ID 3003

#define ALL ((kvd_layer_range){0, 0})

/* Big transfers: 2 tensors x 8192 blocks x 4 KiB = 64 MiB, scattered. */
#define BIG_BLOCKS 8192
#define BIG_BLOCK_BYTES 4096
#define SCATTER 7919

static HarnessDaemon daemon_;

static void start_daemon(const char *const *extra)
{
        int r = harness_daemon_startv(&daemon_, extra);

        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
}

/* Attaches @id; a prompt cluster is a server (a port of its own) that the others link to. */
static kvd_client *client(uint64_t id, kvd_role role)
{
        kvd_client *c = NULL;
        int r = role == KVD_ROLE_PROMPT ? harness_server_init(&daemon_, id, role, "127.0.0.1:0", &c)
                                        : harness_client_init(&daemon_, id, role, &c);

        ck_assert_msg(r == KVD_OK, "kvd_client_init(%llu) = %s: %s", (unsigned long long)id,
                      kvd_strerror(r), kvd_last_error(NULL));
        return c;
}

static void link_to(kvd_client *c, uint64_t remote)
{
        kvd_cluster_info info = {remote, KVD_ROLE_PROMPT, NULL, NULL};

        expect_ok(c, kvd_link_clusters(c, &info, 1, 0, NULL));
}

static void scatter_lists(uint64_t **sb, uint64_t **db)
{
        *sb = calloc(BIG_BLOCKS, sizeof(uint64_t));
        *db = calloc(BIG_BLOCKS, sizeof(uint64_t));
        ck_assert(*sb && *db);
        for (uint64_t i = 0; i < BIG_BLOCKS; i++) {
                (*sb)[i] = i;
                (*db)[i] = (i * SCATTER) % BIG_BLOCKS;
        }
}

/* The status JSON of the daemon (through a fresh connection), parsed. */
static json_t *status_json(void)
{
        return daemon_status_json(&daemon_);
}

static bool status_has_cluster(json_t *root, uint64_t id)
{
        json_t *clusters = json_object_get(root, "clusters"), *c;
        size_t i;

        json_array_foreach(clusters, i, c) if ((uint64_t)json_integer_value(json_object_get(
                                                       c, "cluster_id")) == id) return true;
        return false;
}

/* Polls the status until cluster @id is gone and no transfer is in flight. */
static bool wait_cluster_gone(uint64_t id, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                json_t *root = status_json();
                bool gone = !status_has_cluster(root, id) &&
                            json_integer_value(json_object_get(root, "transfers_in_flight")) == 0;

                json_decref(root);
                if (gone)
                        return true;
                if (harness_now_ms() >= deadline)
                        return false;
                harness_sleep_ms(20);
        }
}

/* The forked puller: attaches as B, links to A and pulls all of A's blocks until killed. */
static int puller_main(void *arg)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_cache_desc desc = {.num_tensors = 2,
                               .n_dims = 2,
                               .shape = {BIG_BLOCKS, BIG_BLOCK_BYTES / 2},
                               .data_type = KVD_DT_FLOAT16};
        size_t tensor = (size_t)BIG_BLOCKS * BIG_BLOCK_BYTES;
        uint64_t *sb = calloc(BIG_BLOCKS, sizeof(*sb)), *db = calloc(BIG_BLOCKS, sizeof(*db));
        kvd_client *c = NULL;
        void *addrs[2];
        uint8_t *mem = NULL;
        uint64_t id;
        unsigned n = 0;

        if (!sb || !db)
                return 10;
        for (uint64_t i = 0; i < BIG_BLOCKS; i++) {
                sb[i] = i;
                db[i] = (i * SCATTER) % BIG_BLOCKS;
        }
        if (harness_client_init(&daemon_, B_ID, KVD_ROLE_DECODER, &c) != KVD_OK)
                return 11;
        if (kvd_mem_alloc(c, 2 * tensor, (void **)&mem) != KVD_OK)
                return 12;
        addrs[0] = mem;
        addrs[1] = mem + tensor;
        if (kvd_register_blocks_cache(c, &desc, addrs, 2, NULL, 0, &id) != KVD_OK)
                return 13;
        if (kvd_link_clusters(c, &info, 1, 0, NULL) != KVD_OK)
                return 14;
        o.timeout_ms = 30000;
        for (;;) {
                int r = kvd_pull_blocks(c, &key, id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o);

                if (r != KVD_OK)
                        return 15;
                if (++n == 1)
                        harness_child_ready(n);
        }
}

START_TEST(test_client_killed_mid_transfer)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb, *db, deadline;
        kvd_client *a, *c;
        TCache src, dst;
        TCopies cp = {};
        HarnessChild child;
        bool in_flight = false;
        int r;

        start_daemon(NULL);
        a = client(A_ID, KVD_ROLE_PROMPT);
        expect_ok(a,
                  tcache_register(&src, a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 0xa1, &key, 1, 0));
        ck_assert_int_eq(harness_fork_client(puller_main, NULL, &child), 0);
        r = harness_child_wait_ready(&child, harness_wait_ms(), NULL);
        ck_assert_msg(r == 0, "the puller never finished a pull: %s (exit %d)", strerror(-r),
                      harness_child_wait(&child, 0));

        /* Kill it while one of its pulls is in flight. */
        deadline = harness_now_ms() + 10000;
        while (!in_flight && harness_now_ms() < deadline) {
                json_t *root = status_json();

                in_flight = json_integer_value(json_object_get(root, "transfers_in_flight")) > 0;
                json_decref(root);
        }
        ck_assert_msg(in_flight, "never saw the puller's transfer in flight");
        ck_assert_int_eq(harness_child_kill(&child, SIGKILL), 128 + SIGKILL);

        ck_assert_msg(harness_daemon_alive(&daemon_), "kvdistd died with its client");
        ck_assert_msg(wait_cluster_gone(B_ID, harness_wait_ms()),
                      "cluster %d (killed) still listed, or transfers in flight, after 5 s", B_ID);
        {
                json_t *root = status_json();

                ck_assert_int_eq(json_array_size(json_object_get(root, "links")), 0);
                json_decref(root);
        }

        /* A's memory is intact and another cluster can pull from it. */
        tcache_verify_untouched(&src);
        c = client(C_ID, KVD_ROLE_DECODER);
        expect_ok(c,
                  tcache_register(&dst, c, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 0xc1, NULL, 0, 0));
        link_to(c, A_ID);
        scatter_lists(&sb, &db);
        o.timeout_ms = 30000;
        expect_ok(c, kvd_pull_blocks(c, &key, dst.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, BIG_BLOCKS);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        /* The killed cluster's id is free again. */
        {
                kvd_client *b = client(B_ID, KVD_ROLE_DECODER);

                expect_ok(b, kvd_client_finalize(b));
        }

        expect_ok(c, kvd_client_finalize(c));
        expect_ok(a, kvd_client_finalize(a));
        ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);
        harness_daemon_cleanup(&daemon_);
        tcopies_free(&cp);
        free(sb);
        free(db);
}
END_TEST

#define OWNER_SEED 0x0123
#define N_PULLS 4

/* The forked source owner: registers A's blocks and waits to be killed. */
static int owner_main(void *arg)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_client *a = NULL;
        TCache src;

        if (harness_server_init(&daemon_, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &a) != KVD_OK)
                return 11;
        if (tcache_register(&src, a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, OWNER_SEED, &key, 1,
                            0) != KVD_OK)
                return 12;
        harness_child_ready(src.id);
        for (;;)
                pause();
}

START_TEST(test_owner_killed_mid_transfer)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        TCache dst[N_PULLS], src = {};
        kvd_task *tasks[N_PULLS];
        uint64_t *sb, *db, t0;
        unsigned n_ok = 0, n_lost = 0;
        HarnessChild child;
        kvd_client *b;
        int r;

        start_daemon(NULL);
        ck_assert_int_eq(harness_fork_client(owner_main, NULL, &child), 0);
        r = harness_child_wait_ready(&child, harness_wait_ms(), &src.id);
        ck_assert_msg(r == 0, "the owner did not get ready: %s (exit %d)", strerror(-r),
                      harness_child_wait(&child, 0));
        /* The owner's cache as the checks see it: the same geometry and pattern stream. */
        src.num_tensors = 2;
        src.blocks = true;
        src.units = BIG_BLOCKS;
        src.stride = BIG_BLOCK_BYTES;
        src.tensor_size = (uint64_t)BIG_BLOCKS * BIG_BLOCK_BYTES;
        src.seed = OWNER_SEED;

        b = client(B_ID, KVD_ROLE_DECODER);
        for (int i = 0; i < N_PULLS; i++)
                expect_ok(b, tcache_register(&dst[i], b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES,
                                             0xb0 + (uint64_t)i, NULL, 0, 0));
        link_to(b, A_ID);
        scatter_lists(&sb, &db);

        o.timeout_ms = 60000;
        for (int i = 0; i < N_PULLS; i++)
                expect_ok(b, kvd_pull_blocks_async(b, &key, dst[i].id, sb, BIG_BLOCKS, db,
                                                   BIG_BLOCKS, &o, &tasks[i]));
        harness_sleep_ms(5);
        ck_assert_int_eq(harness_child_kill(&child, SIGKILL), 128 + SIGKILL);

        t0 = harness_now_ms();
        for (int i = 0; i < N_PULLS; i++) {
                TCopies cp = {};

                /* Never a hang: the daemon answers long before the transfer's own deadline. */
                r = kvd_task_wait(tasks[i], 20000);
                kvd_task_free(tasks[i]);
                ck_assert_msg(r == KVD_OK || r == KVD_E_PEER_LOST,
                              "pull %d after the owner died: %s (%s)", i, kvd_strerror(r),
                              kvd_last_error(b));
                tcopies_blocks(&cp, &src, &dst[i], ALL, ALL, 2, sb, db, BIG_BLOCKS);
                if (r == KVD_OK) {
                        tcache_verify(&dst[i], &cp);
                        n_ok++;
                } else {
                        tcache_verify_old_or_new(&dst[i], &cp);
                        n_lost++;
                }
                tcopies_free(&cp);
        }
        fprintf(stderr, "owner killed mid-transfer: %u pulls OK, %u PEER_LOST\n", n_ok, n_lost);
        ck_assert_msg(harness_now_ms() - t0 < 10000, "the pulls took %llu ms to fail",
                      (unsigned long long)(harness_now_ms() - t0));
        ck_assert_msg(n_lost > 0,
                      "all %u pulls finished before the owner died: the test did not "
                      "kill it mid-transfer (%u OK)",
                      N_PULLS, n_ok);

        /* The link is down and says so; new transfers fail at once. */
        {
                uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

                while ((r = kvd_check_link_status(b, A_ID)) == KVD_OK &&
                       harness_now_ms() < deadline)
                        harness_sleep_ms(20);
        }
        expect_status(b, r, KVD_E_PEER_LOST, "went away");
        expect_status(b, kvd_pull_blocks(b, &key, dst[0].id, sb, 1, db, 1, NULL), KVD_E_PEER_LOST,
                      "is down");
        {
                json_t *root = status_json();
                json_t *links = json_object_get(root, "links");

                ck_assert(!status_has_cluster(root, A_ID));
                ck_assert_int_eq(json_array_size(links), 1);
                ck_assert_str_eq(
                        json_string_value(json_object_get(json_array_get(links, 0), "state")),
                        "down");
                json_decref(root);
        }

        /* The owner comes back under the same id: linking again replaces the dead link. */
        ck_assert_int_eq(harness_fork_client(owner_main, NULL, &child), 0);
        r = harness_child_wait_ready(&child, harness_wait_ms(), &src.id);
        ck_assert_msg(r == 0, "the new owner did not get ready: %s", strerror(-r));
        link_to(b, A_ID);
        expect_ok(b, kvd_check_link_status(b, A_ID));
        {
                TCopies cp = {};

                expect_ok(b,
                          kvd_pull_blocks(b, &key, dst[0].id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o));
                tcopies_blocks(&cp, &src, &dst[0], ALL, ALL, 2, sb, db, BIG_BLOCKS);
                tcache_verify(&dst[0], &cp);
                tcopies_free(&cp);
        }
        {
                kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};

                expect_ok(b, kvd_unlink_clusters(b, &info, 1, 0, false, NULL));
                expect_status(b, kvd_check_link_status(b, A_ID), KVD_E_NOT_YET_LINK, NULL);
        }
        ck_assert_int_eq(harness_child_kill(&child, SIGKILL), 128 + SIGKILL);

        expect_ok(b, kvd_client_finalize(b));
        ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);
        harness_daemon_cleanup(&daemon_);
        free(sb);
        free(db);
}
END_TEST

/* A big pull in flight, then the daemon goes away by @sig: the waiter hears promptly. */
static void daemon_gone_under_waiter(int sig)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        uint64_t *sb, *db, t0, dt;
        kvd_client *a, *b, *late = NULL;
        kvd_task *task = NULL;
        TCache src, dst;
        char *json = NULL;
        int r;

        start_daemon(NULL);
        a = client(A_ID, KVD_ROLE_PROMPT);
        b = client(B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, BIG_BLOCKS, BIG_BLOCK_BYTES, 2, NULL, 0, 0));
        link_to(b, A_ID);
        scatter_lists(&sb, &db);

        o.timeout_ms = 60000;
        expect_ok(b, kvd_pull_blocks_async(b, &key, dst.id, sb, BIG_BLOCKS, db, BIG_BLOCKS, &o,
                                           &task));
        t0 = harness_now_ms();
        if (sig == SIGTERM)
                ck_assert_int_eq(kill(daemon_.pid, SIGTERM), 0);
        else
                ck_assert_int_eq(harness_daemon_kill(&daemon_), 0);
        r = kvd_task_wait(task, -1);
        dt = harness_now_ms() - t0;
        kvd_task_free(task);
        expect_status(b, r, KVD_E_DAEMON_UNAVAILABLE, NULL);
        ck_assert_msg(dt < 5000, "the waiting client heard of the daemon's end after %llu ms",
                      (unsigned long long)dt);
        if (sig == SIGTERM)
                ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);

        /* Later calls, on both clients, fail fast. */
        t0 = harness_now_ms();
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, sb, 1, db, 1, NULL),
                      KVD_E_DAEMON_UNAVAILABLE, NULL);
        expect_status(b, kvd_check_link_status(b, A_ID), KVD_E_DAEMON_UNAVAILABLE, NULL);
        expect_status(a, kvd_check_link_status(a, B_ID), KVD_E_DAEMON_UNAVAILABLE, NULL);
        expect_status(a, kvd_daemon_status(a, &json), KVD_E_DAEMON_UNAVAILABLE, NULL);
        {
                void *p = NULL;

                expect_status(a, kvd_mem_alloc(a, 4096, &p), KVD_E_DAEMON_UNAVAILABLE, NULL);
        }
        ck_assert_msg(harness_now_ms() - t0 < 2000, "calls on a dead connection took %llu ms",
                      (unsigned long long)(harness_now_ms() - t0));
        /* Nobody listens any more. */
        r = harness_client_init(&daemon_, C_ID, KVD_ROLE_MIX, &late);
        expect_status(NULL, r, KVD_E_DAEMON_UNAVAILABLE, NULL);

        /* The memory stays the caller's and mapped. */
        tcache_verify_untouched(&src);
        (void)kvd_client_finalize(a);
        (void)kvd_client_finalize(b);
        harness_daemon_cleanup(&daemon_);
        free(sb);
        free(db);
}

START_TEST(test_daemon_sigterm_under_waiter)
{
        daemon_gone_under_waiter(SIGTERM);
}
END_TEST

START_TEST(test_daemon_sigkill_under_waiter)
{
        daemon_gone_under_waiter(SIGKILL);
}
END_TEST

/* Raw frames. */

static int raw_connect(void)
{
        int fd = harness_raw_connect(daemon_.socket_path);

        ck_assert_msg(fd >= 0, "connect: %s", strerror(-fd));
        return fd;
}

static int raw_ready(void)
{
        int fd = raw_connect(), r;

        r = harness_raw_hello(fd);
        ck_assert_msg(r == 0, "Hello: %s", strerror(-r));
        return fd;
}

static void send_header(int fd, uint32_t magic, uint16_t version, uint16_t type, uint16_t flags,
                        uint16_t n_fds, uint32_t length, const void *payload, size_t payload_len,
                        const int *fds, size_t n_send_fds)
{
        FrameHeader h = {magic, version, type, flags, n_fds, length, 77};
        uint8_t buf[FRAME_HEADER_SIZE + 256];
        int r;

        ck_assert(payload_len <= 256);
        frame_header_encode(&h, buf);
        if (payload_len)
                memcpy(buf + FRAME_HEADER_SIZE, payload, payload_len);
        r = harness_raw_send(fd, buf, FRAME_HEADER_SIZE + payload_len, fds, n_send_fds);
        ck_assert_msg(r == 0, "send: %s", strerror(-r));
}

/* Reads one reply and checks its flags, type and status. */
static void expect_reply(int fd, uint16_t type, bool error, int code, const char *substr)
{
        char detail[512];
        HarnessFrame f;
        int r, got;

        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        ck_assert_msg(r == 1, "no reply to type %u: %s", type,
                      r == 0 ? "connection closed" : strerror(-r));
        ck_assert_uint_eq(f.h.type, type);
        ck_assert_msg(f.h.flags & FRAME_FLAG_REPLY, "flags 0x%x lack REPLY", f.h.flags);
        ck_assert_msg(!!(f.h.flags & FRAME_FLAG_ERROR) == error, "flags 0x%x, want ERROR %s",
                      f.h.flags, error ? "set" : "clear");
        ck_assert_int_eq(harness_frame_status(&f, &got, detail, sizeof(detail)), 0);
        ck_assert_msg(got == code, "type %u answered %s (%s), want %s", type, kvd_strerror(got),
                      detail, kvd_strerror(code));
        if (substr)
                ck_assert_msg(strstr(detail, substr), "detail \"%s\" lacks \"%s\"", detail, substr);
        harness_frame_deinit(&f);
}

/* Sends DaemonStatus and checks the daemon still answers on @fd. */
static void expect_still_works(int fd)
{
        int r = harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 5, NULL,
                                       NULL, 0);

        ck_assert_int_eq(r, 0);
        expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, false, KVD_OK, NULL);
}

static void expect_closed(int fd, const char *what)
{
        ck_assert_msg(harness_raw_wait_closed(fd, harness_wait_ms()) == 1,
                      "%s: the daemon kept the connection open", what);
        close(fd);
}

static int sealed_memfd(size_t size, bool seal)
{
        int fd = memfd_create("it-raw", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
        if (seal)
                ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
        return fd;
}

START_TEST(test_malformed_frames)
{
        static const char *const args[] = {"--max-frame-size", "64K", NULL};
        static const uint8_t garbage[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        int64_t malformed0;
        long peak0, peak1;
        int fd;

        start_daemon(args);
        {
                json_t *root = status_json();

                malformed0 = json_integer_value(
                        json_object_get(json_object_get(root, "counters"), "frames_malformed"));
                json_decref(root);
        }

        /* Bad magic. */
        fd = raw_connect();
        send_header(fd, 0xdeadbeef, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 0, 0, NULL,
                    0, NULL, 0);
        expect_closed(fd, "bad magic");

        /* A length above max_frame_size: closed before anything is allocated for it. */
        peak0 = harness_proc_status_kib(daemon_.pid, "VmPeak");
        ck_assert_int_gt(peak0, 0);
        fd = raw_connect();
        send_header(fd, FRAME_MAGIC, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 0, 1u << 30,
                    NULL, 0, NULL, 0);
        expect_closed(fd, "1 GiB frame before Hello");
        fd = raw_ready();
        send_header(fd, FRAME_MAGIC, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 0,
                    1u << 30, NULL, 0, NULL, 0);
        expect_closed(fd, "1 GiB frame after Hello");
        fd = raw_ready();
        send_header(fd, FRAME_MAGIC, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 0,
                    (64u << 10) + 1, NULL, 0, NULL, 0);
        expect_closed(fd, "frame one byte above --max-frame-size");
        peak1 = harness_proc_status_kib(daemon_.pid, "VmPeak");
        ck_assert_msg(peak1 - peak0 < 256 * 1024,
                      "kvdistd's VmPeak grew by %ld KiB on a frame "
                      "that claimed 1 GiB",
                      peak1 - peak0);

        /* A request before Hello: an error reply, then the close. */
        fd = raw_connect();
        ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 3,
                                                NULL, NULL, 0),
                         0);
        expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, true, KVD_E_PROTOCOL_MISMATCH,
                     "must be Hello");
        expect_closed(fd, "request before Hello");

        /* A Hello of another protocol version. */
        {
                Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;

                fd = raw_connect();
                hello.protocol_version = 99;
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1,
                                                        &hello.base, NULL, 0),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_HELLO, false, KVD_E_PROTOCOL_MISMATCH,
                             "99");
                expect_closed(fd, "Hello with protocol 99");
        }

        /* A frame header of another version. */
        fd = raw_connect();
        send_header(fd, FRAME_MAGIC, FRAME_VERSION + 1, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 0, 0,
                    NULL, 0, NULL, 0);
        expect_reply(fd, 0, true, KVD_E_PROTOCOL_MISMATCH, "frame version");
        expect_closed(fd, "frame version 2");

        /* An unknown type after Hello: an error reply, and the connection stays. */
        fd = raw_ready();
        ck_assert_int_eq(harness_raw_send_frame(fd, 999, 0, 9, NULL, NULL, 0), 0);
        expect_reply(fd, 999, true, KVD_E_UNSUPPORTED, "999");
        expect_still_works(fd);

        /* Fds where the request takes none: PARAM_INVALID, and the connection stays. */
        {
                int mfd = sealed_memfd(4096, true);

                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS,
                                                        0, 10, NULL, &mfd, 1),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, true, KVD_E_PARAM_INVALID,
                             "fds");
                expect_still_works(fd);
                close(mfd);
        }

        /* A cluster request on a connection that is no cluster. */
        {
                Kvdist__V1__CheckLinkStatus m = KVDIST__V1__CHECK_LINK_STATUS__INIT;

                ck_assert_int_eq(harness_raw_send_frame(fd,
                                                        KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS,
                                                        0, 11, &m.base, NULL, 0),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS, true,
                             KVD_E_NOT_INITIALIZED, "kvd_client_init");
                expect_still_works(fd);
        }

        /* Garbage where a protobuf message belongs: closed. */
        send_header(fd, FRAME_MAGIC, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 0,
                    sizeof(garbage), garbage, sizeof(garbage), NULL, 0);
        expect_closed(fd, "garbage payload");

        /* A client that sends a reply frame: closed. */
        fd = raw_ready();
        ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS,
                                                FRAME_FLAG_REPLY, 12, NULL, NULL, 0),
                         0);
        expect_closed(fd, "reply frame from a client");

        /* A header announcing an fd that does not come: closed. */
        fd = raw_ready();
        send_header(fd, FRAME_MAGIC, FRAME_VERSION, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, 0, 1,
                    0, NULL, 0, NULL, 0);
        expect_closed(fd, "n_fds = 1 without an fd");

        /* RegionAdd with an unsealed memfd, a file that is no memfd, or nothing: PARAM_INVALID.
         * (Fds that are no files at all close the connection: test-hostile-client.c.) */
        {
                Kvdist__V1__ClientInit init = KVDIST__V1__CLIENT_INIT__INIT;
                Kvdist__V1__RegionAdd add = KVDIST__V1__REGION_ADD__INIT;
                int mfd = sealed_memfd(4096, false), tfd;

                fd = raw_ready();
                init.cluster_id = 7777;
                init.role = KVDIST__V1__ROLE__ROLE_MIX;
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT,
                                                        0, 20, &init.base, NULL, 0),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, false, KVD_OK, NULL);

                add.size = 4096;
                add.client_addr = 0x100000;
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 0,
                                                        21, &add.base, &mfd, 1),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, true, KVD_E_PARAM_INVALID,
                             "sealed against shrinking");
                close(mfd);

                tfd = open(daemon_.dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
                ck_assert_int_ge(tfd, 0);
                ck_assert_int_eq(ftruncate(tfd, 4096), 0);
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 0,
                                                        22, &add.base, &tfd, 1),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, true, KVD_E_PARAM_INVALID,
                             "not a memfd");
                close(tfd);

                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 0,
                                                        23, &add.base, NULL, 0),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, true, KVD_E_PARAM_INVALID,
                             "no memfd");

                /* A sealed memfd smaller than announced. */
                mfd = sealed_memfd(4096, true);
                add.size = 8192;
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 0,
                                                        24, &add.base, &mfd, 1),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, true, KVD_E_PARAM_INVALID,
                             "smaller");
                /* The right size works, on the same connection. */
                add.size = 4096;
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 0,
                                                        25, &add.base, &mfd, 1),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, false, KVD_OK, NULL);
                close(mfd);
                /* A second ClientInit on a cluster connection. */
                ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT,
                                                        0, 26, &init.base, NULL, 0),
                                 0);
                expect_reply(fd, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, true, KVD_E_PARAM_INVALID,
                             "already");
                close(fd);
        }

        ck_assert(harness_daemon_alive(&daemon_));
        {
                json_t *root = status_json();
                int64_t malformed = json_integer_value(
                        json_object_get(json_object_get(root, "counters"), "frames_malformed"));

                /* bad magic, 3 oversized, garbage, reply frame, missing fd */
                ck_assert_msg(malformed - malformed0 >= 7,
                              "frames_malformed went from %lld to "
                              "%lld",
                              (long long)malformed0, (long long)malformed);
                /* The raw cluster went away with its connection. */
                ck_assert(wait_cluster_gone(7777, harness_wait_ms()));
                json_decref(root);
        }

        /* After all that, a normal client works end to end, and kvdistctl does too. */
        {
                static const uint64_t sb[] = {0, 2}, db[] = {3, 1};
                kvd_cache_key key = kvd_key_blocks(A_ID, 0);
                const char *ctl = getenv("KVDISTCTL");
                const char *argv[] = {ctl, "--socket", daemon_.socket_path, "clusters", NULL};
                char *out = NULL, *err = NULL;
                kvd_client *a = client(A_ID, KVD_ROLE_PROMPT), *b = client(B_ID, KVD_ROLE_DECODER);
                TCache src, dst;
                TCopies cp = {};

                expect_ok(a, tcache_register(&src, a, true, 2, 4, 256, 1, &key, 1, 0));
                expect_ok(b, tcache_register(&dst, b, true, 2, 4, 256, 2, NULL, 0, 0));
                link_to(b, A_ID);
                expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 2, db, 2, NULL));
                tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 2);
                tcache_verify(&dst, &cp);
                tcopies_free(&cp);

                ck_assert_msg(ctl && ctl[0], "$KVDISTCTL is not set");
                ck_assert_int_eq(harness_run(argv, &out, &err), 0);
                ck_assert_msg(strstr(out, "1001") && strstr(out, "2002"),
                              "kvdistctl clusters does not list them:\n%s", out);
                free(out);
                free(err);
                expect_ok(a, kvd_client_finalize(a));
                expect_ok(b, kvd_client_finalize(b));
        }

        ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);
        harness_daemon_cleanup(&daemon_);
}
END_TEST

static Suite *faults_suite(void)
{
        Suite *s = suite_create("integration-faults");
        TCase *tc;

        tc = tcase_create("clients");
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_client_killed_mid_transfer);
        tcase_add_test(tc, test_owner_killed_mid_transfer);
        suite_add_tcase(s, tc);

        tc = tcase_create("daemon");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_daemon_sigterm_under_waiter);
        tcase_add_test(tc, test_daemon_sigkill_under_waiter);
        suite_add_tcase(s, tc);

        tc = tcase_create("frames");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_malformed_frames);
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
