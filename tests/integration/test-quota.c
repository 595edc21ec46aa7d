/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, fair shares (limits.per_user): a hostile local uid that holds connections,
 * registers regions or floods notifications is held at its limit, told which limit and which uid
 * in the reply, the log and the metrics, while another uid still attaches, links and moves bytes
 * and `kvdistctl status` answers; a connection that attaches no cluster is closed; the read-only
 * reserve lets kvdistctl in when every connection is taken. The hostile processes run as uid
 * 65534 (nobody) and need root; those tests say so and skip elsewhere.
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-world.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"

#define NOBODY 65534
#define MAX_HELD 64

static HarnessDaemon daemon_;
static char config_dir[64];
/* The hostile child holds what it took until the parent closes the write end. */
static int release_pipe[2] = {-1, -1};

/* Starts a daemon with @json as its config file, its socket reachable by every uid. */
static void start_daemon_with(const char *json)
{
        char path[128];
        const char *args[] = {"--config", path, NULL};
        FILE *f;
        int r;

        (void)snprintf(config_dir, sizeof(config_dir), "/tmp/kvdist-it-quota-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(config_dir));
        ck_assert_int_eq(chmod(config_dir, 0755), 0);
        (void)snprintf(path, sizeof(path), "%s/kvdistd.json", config_dir);
        f = fopen(path, "w");
        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        ck_assert_int_ge(fputs(json, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        r = harness_daemon_startv(&daemon_, args);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        ck_assert_int_eq(chmod(daemon_.dir, 0755), 0);
}

static void stop_daemon(void)
{
        char path[128];

        ck_assert_msg(harness_daemon_alive(&daemon_), "kvdistd died");
        ck_assert_int_eq(harness_daemon_stop(&daemon_), 0);
        harness_daemon_cleanup(&daemon_);
        (void)snprintf(path, sizeof(path), "%s/kvdistd.json", config_dir);
        (void)unlink(path);
        (void)rmdir(config_dir);
}

static bool need_root(void)
{
        if (geteuid() == 0)
                return true;
        fprintf(stderr, "skipped: playing a second local uid (setresuid to %d) needs root\n",
                NOBODY);
        return false;
}

#define CHILD_CHECK(cond, code, ...)                                                               \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fputc('\n', stderr);                                                       \
                        return (code);                                                             \
                }                                                                                  \
        } while (0)

typedef struct Hostile {
        HarnessChild child;
} Hostile;

static int as_nobody_main(void *arg)
{
        harness_child_fn fn = (harness_child_fn)arg;
        gid_t none[1] = {NOBODY};

        (void)signal(SIGPIPE, SIG_IGN);
        close(release_pipe[1]);
        if (setgroups(1, none) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) < 0) {
                fprintf(stderr, "cannot become uid %d: %s\n", NOBODY, strerror(errno));
                return 120;
        }
        return fn(NULL);
}

/* In the hostile child: says it holds what it took, and holds it until released. */
static int hold(uint64_t value)
{
        char c;

        harness_child_ready(value);
        while (read(release_pipe[0], &c, 1) < 0 && errno == EINTR)
                ;
        return 0;
}

/* Forks @fn as uid 65534 and waits until it holds what it took at its limit. */
static void hostile_start(Hostile *h, harness_child_fn fn)
{
        int r;

        ck_assert_int_eq(pipe(release_pipe), 0);
        ck_assert_int_eq(harness_fork_client(as_nobody_main, (void *)fn, &h->child), 0);
        close(release_pipe[0]);
        release_pipe[0] = -1;
        r = harness_child_wait_ready(&h->child, harness_wait_ms(), NULL);
        ck_assert_msg(r == 0, "the hostile child did not get to its limit: %s (exit %d)",
                      strerror(-r), harness_child_wait(&h->child, 0));
}

/* Lets the hostile child go and checks that it did all it meant to. */
static void hostile_stop(Hostile *h)
{
        close(release_pipe[1]);
        release_pipe[1] = -1;
        ck_assert_int_eq(harness_child_wait(&h->child, harness_wait_ms()), 0);
}

/* The users[] entry of @uid in a status document, or NULL. */
static json_t *find_user(json_t *root, uid_t uid)
{
        json_t *users = json_object_get(root, "users"), *u;
        size_t i;

        json_array_foreach(users, i, u)
        {
                if (json_integer_value(json_object_get(u, "uid")) == (json_int_t)uid)
                        return u;
        }
        return NULL;
}

static int64_t user_field(json_t *u, const char *what, const char *slot)
{
        return json_integer_value(json_object_get(json_object_get(u, what), slot));
}

/* Checks that uid 65534 holds exactly its limit of @slot and was refused more of it. */
static void expect_held_at_limit(const char *slot)
{
        json_t *root = daemon_status_json(&daemon_);
        json_t *u = find_user(root, NOBODY);

        ck_assert_msg(u, "no users[] entry for uid %d", NOBODY);
        ck_assert_int_eq(user_field(u, "used", slot), user_field(u, "limit", slot));
        ck_assert_int_ge(user_field(u, "refused", slot), 1);
        json_decref(root);
}

/* The metrics count the refusal under the limit's name. */
static void expect_refusal_metric(const char *limit)
{
        kvd_client *c = NULL;
        char *text = NULL, line[128];

        expect_ok(NULL, kvd_client_connect(daemon_.options, 1, &c));
        expect_ok(c, kvd_daemon_metrics(c, &text));
        (void)snprintf(line, sizeof(line), "kvdist_user_quota_refused_total{limit=\"%s\"} 0",
                       limit);
        ck_assert_msg(strstr(text, "kvdist_user_quota_refused_total{limit=\"") &&
                              !strstr(text, line),
                      "no refusal of %s counted", limit);
        free(text);
        (void)kvd_client_finalize(c);
}

/* `kvdistctl status` answers, and its users table shows uid 65534 held at a limit ("!"). */
static void expect_kvdistctl_answers(void)
{
        const char *argv[] = {getenv("KVDISTCTL"), "--socket", daemon_.socket_path, "status", NULL};
        char *out = NULL, *err = NULL;
        int r;

        ck_assert_ptr_nonnull(argv[0]);
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl status exited %d: %s", r, err);
        ck_assert_msg(strstr(out, "users (used/limit of limits.per_user)") &&
                              strstr(out, "65534") && strstr(out, " !"),
                      "kvdistctl status:\n%s", out);
        free(out);
        free(err);
}

/* Waits until uid 65534 holds nothing (its processes are gone, the daemon noticed). */
static void wait_user_gone(void)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

        for (;;) {
                json_t *root = daemon_status_json(&daemon_);
                bool gone = !find_user(root, NOBODY);

                json_decref(root);
                if (gone)
                        return;
                ck_assert_msg(harness_now_ms() < deadline, "uid %d still holds something", NOBODY);
                harness_sleep_ms(20);
        }
}

/*
 * What another uid (root, here) does while the hostile one is held: attaches two clusters,
 * links them, pushes blocks with a notification and pulls them back, every byte checked, and
 * takes the notification.
 */
static void root_moves_bytes(uint64_t a_id, uint64_t b_id)
{
        static const uint64_t sb[] = {1, 6, 2}, db[] = {7, 0, 3};
        kvd_cache_key key = kvd_key_blocks(a_id, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_client *a = NULL, *b = NULL;
        TCache src, dst, back;
        TCopies cp = {}, cpb = {};
        kvd_notify got[2];
        size_t n = 0;
        int r;

        r = harness_server_init(&daemon_, a_id, KVD_ROLE_PROMPT, "127.0.0.1:0", &a);
        ck_assert_msg(r == KVD_OK, "root's kvd_client_init(A): %s: %s", kvd_strerror(r),
                      kvd_last_error(NULL));
        r = harness_client_init(&daemon_, b_id, KVD_ROLE_DECODER, &b);
        ck_assert_msg(r == KVD_OK, "root's kvd_client_init(B): %s: %s", kvd_strerror(r),
                      kvd_last_error(NULL));
        expect_ok(a, tcache_register(&dst, a, true, 2, 8, 1024, 31, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(b, tcache_register(&src, b, true, 2, 8, 1024, 32, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(b, tcache_register(&back, b, true, 2, 8, 1024, 33, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(b, a_id, KVD_ROLE_PROMPT);

        o.notify = "root";
        o.notify_len = 4;
        expect_ok(b, kvd_push_blocks(b, &key, src.id, sb, 3, db, 3, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        /* Pulled back into a third cache: block db[i] of A holds block sb[i] of the source now,
         * and lands in block sb[i]. */
        expect_ok(b, kvd_pull_blocks(b, &key, back.id, db, 3, sb, 3, NULL));
        tcopies_blocks(&cpb, &src, &back, ALL, ALL, 2, sb, sb, 3);
        tcache_verify(&back, &cpb);
        tcache_verify(&dst, &cp);

        expect_ok(a, kvd_get_notifies(a, got, 2, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(got[0].src_cluster_id, b_id);
        ck_assert_mem_eq(got[0].data, "root", 4);

        tcopies_free(&cp);
        tcopies_free(&cpb);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
}

/*
 * Connects and says Hello: 1 when the daemon took the connection (*@ret_fd holds it), 0 when
 * it refused it with LIMIT_EXCEEDED and a detail that names @needle and uid 65534, negative
 * (a child exit code) for anything else.
 */
static int hello_or_refusal(const char *needle, int *ret_fd)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        char detail[256] = "";
        HarnessFrame f;
        int fd, r, code;

        fd = harness_raw_connect(daemon_.socket_path);
        CHILD_CHECK(fd >= 0, -20, "connect: %s", strerror(-fd));
        hello.protocol_version = FRAME_VERSION;
        /* A refused connection may be closed already: its error frame is still there to read. */
        (void)harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, &hello.base, NULL,
                                     0);
        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        CHILD_CHECK(r == 1, -21, "no answer to Hello: %d", r);
        r = harness_frame_status(&f, &code, detail, sizeof(detail));
        harness_frame_deinit(&f);
        CHILD_CHECK(r == 0, -22, "undecodable answer");
        if (code == KVD_OK) {
                *ret_fd = fd;
                return 1;
        }
        close(fd);
        CHILD_CHECK(code == KVD_E_LIMIT_EXCEEDED, -23, "refused with %s: %s", kvd_strerror(code),
                    detail);
        CHILD_CHECK(strstr(detail, needle) && strstr(detail, "uid 65534"), -24, "detail: %s",
                    detail);
        return 0;
}

/* The holder: as many connections as it gets, each with Hello and nothing more. */
static int holder_main(void *arg)
{
        int fds[MAX_HELD], n = 0, r, fd = -1;

        for (;;) {
                r = hello_or_refusal("limits.per_user.max_connections", &fd);
                if (r < 0)
                        return -r;
                if (r == 0)
                        break;
                CHILD_CHECK(n < MAX_HELD, 30, "%d connections and no refusal", n);
                fds[n++] = fd;
        }
        /* Refused again and again while it holds them. */
        for (int i = 0; i < 3; i++) {
                r = hello_or_refusal("limits.per_user.max_connections", &fd);
                CHILD_CHECK(r == 0, 31, "a connection beyond the limit: %d", r);
        }
        r = hold((uint64_t)n);
        for (int i = 0; i < n; i++)
                close(fds[i]);
        return r;
}

/* limits.per_user for the tests: small, so a hostile uid reaches them at once. */
#define QUOTA_CONFIG(extra)                                                                        \
        "{ \"socket_mode\": \"0666\", \"client_clusters_accept_links\": true,"                     \
        " \"limits\": { \"max_clients\": 16, \"attach_timeout_ms\": 3600000," extra                \
        " \"per_user\": { \"max_connections\": 6, \"max_clusters\": 2, \"max_regions\": 5,"        \
        " \"max_region_bytes\": \"4M\", \"max_inflight\": 16, \"max_notifies\": 3 } } }\n"

START_TEST(test_connection_holder)
{
        Hostile h;

        if (!need_root())
                return;
        start_daemon_with(QUOTA_CONFIG(""));
        hostile_start(&h, holder_main);
        expect_held_at_limit("connections");
        ck_assert(harness_daemon_log_contains(&daemon_, "uid 65534: refused"));
        expect_refusal_metric("max_connections");

        root_moves_bytes(1001, 2002);
        expect_kvdistctl_answers();
        expect_held_at_limit("connections");

        hostile_stop(&h);
        wait_user_gone();
        /* What it held is free again: the same uid gets a connection. */
        root_moves_bytes(1003, 2004);
        stop_daemon();
}
END_TEST

/* The many-regions user: two clusters, regions until its bytes and then its count run out. */
static int regions_main(void *arg)
{
        kvd_option opts[2] = {daemon_.options[0], daemon_.options[1]};
        kvd_client *c[3] = {};
        void *p[8];
        int r;

        r = kvd_client_init(9001, KVD_ROLE_MIX, opts, 2, &c[0]);
        CHILD_CHECK(r == KVD_OK, 40, "init 9001: %s %s", kvd_strerror(r), kvd_last_error(NULL));
        r = kvd_client_init(9002, KVD_ROLE_MIX, opts, 2, &c[1]);
        CHILD_CHECK(r == KVD_OK, 41, "init 9002: %s %s", kvd_strerror(r), kvd_last_error(NULL));
        /* A third cluster is past limits.per_user.max_clusters. */
        r = kvd_client_init(9003, KVD_ROLE_MIX, opts, 2, &c[2]);
        CHILD_CHECK(r == KVD_E_LIMIT_EXCEEDED && strstr(kvd_last_error(NULL), "max_clusters") &&
                            strstr(kvd_last_error(NULL), "uid 65534"),
                    42, "third cluster: %s %s", kvd_strerror(r), kvd_last_error(NULL));

        /* 3 MiB over two clusters; one more MiB and a half is past max_region_bytes (4M). */
        CHILD_CHECK(kvd_mem_alloc(c[0], 2 << 20, &p[0]) == KVD_OK, 43, "%s", kvd_last_error(c[0]));
        CHILD_CHECK(kvd_mem_alloc(c[1], 1 << 20, &p[1]) == KVD_OK, 44, "%s", kvd_last_error(c[1]));
        r = kvd_mem_alloc(c[1], 3 << 19, &p[2]);
        CHILD_CHECK(r == KVD_E_LIMIT_EXCEEDED &&
                            strstr(kvd_last_error(c[1]), "limits.per_user.max_region_bytes") &&
                            strstr(kvd_last_error(c[1]), "uid 65534"),
                    45, "bytes: %s %s", kvd_strerror(r), kvd_last_error(c[1]));
        /* Small ones up to max_regions (5), then one more is refused. */
        for (int i = 2; i < 5; i++)
                CHILD_CHECK(kvd_mem_alloc(c[i % 2], 4096, &p[i]) == KVD_OK, 46, "region %d: %s", i,
                            kvd_last_error(c[i % 2]));
        r = kvd_mem_alloc(c[0], 4096, &p[5]);
        CHILD_CHECK(r == KVD_E_LIMIT_EXCEEDED &&
                            strstr(kvd_last_error(c[0]), "limits.per_user.max_regions") &&
                            strstr(kvd_last_error(c[0]), "uid 65534"),
                    47, "count: %s %s", kvd_strerror(r), kvd_last_error(c[0]));
        r = hold(0);
        (void)kvd_client_finalize(c[0]);
        (void)kvd_client_finalize(c[1]);
        return r;
}

START_TEST(test_many_regions)
{
        Hostile h;

        if (!need_root())
                return;
        start_daemon_with(QUOTA_CONFIG(""));
        hostile_start(&h, regions_main);
        expect_held_at_limit("regions");
        expect_held_at_limit("clusters");
        expect_refusal_metric("max_region_bytes");
        expect_refusal_metric("max_regions");
        expect_refusal_metric("max_clusters");

        /* Root registers regions and caches, links and moves bytes all the same. */
        root_moves_bytes(1001, 2002);
        expect_kvdistctl_answers();
        hostile_stop(&h);
        wait_user_gone();
        stop_daemon();
}
END_TEST

/* The notification flooder: pushes to its own cluster with a notification nobody takes. */
static int flooder_main(void *arg)
{
        static const uint64_t blocks[] = {0};
        kvd_option opts[3] = {
                daemon_.options[0], daemon_.options[1], {"listen_ip_info", "127.0.0.1:0"}};
        kvd_cache_key key = kvd_key_blocks(9101, 0);
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        kvd_cluster_info info = {9101, KVD_ROLE_PROMPT, NULL, NULL};
        kvd_client *dst = NULL, *src = NULL;
        TCache sc, dc;
        int r, ret = 1, n = 0;

        /* The destination is a server (a port of its own), as LLM-DataDist's prompt side. */
        r = kvd_client_init(9101, KVD_ROLE_PROMPT, opts, 3, &dst);
        CHILD_CHECK(r == KVD_OK, 50, "init: %s %s", kvd_strerror(r), kvd_last_error(NULL));
        r = kvd_client_init(9102, KVD_ROLE_DECODER, opts, 2, &src);
        CHILD_CHECK(r == KVD_OK, 51, "init: %s %s", kvd_strerror(r), kvd_last_error(NULL));
        r = tcache_register(&dc, dst, true, 2, 4, 1024, 7, &key, 1, KVD_REMOTE_DEFAULT);
        CHILD_CHECK(r == KVD_OK, 52, "%s", kvd_last_error(dst));
        r = tcache_register(&sc, src, true, 2, 4, 1024, 8, NULL, 0, KVD_REMOTE_DEFAULT);
        CHILD_CHECK(r == KVD_OK, 53, "%s", kvd_last_error(src));
        r = kvd_link_clusters(src, &info, 1, 0, &ret);
        CHILD_CHECK(r == KVD_OK && ret == KVD_OK, 54, "link: %s %s", kvd_strerror(r),
                    kvd_last_error(src));

        o.notify = "flood";
        o.notify_len = 5;
        for (;;) {
                r = kvd_push_blocks(src, &key, sc.id, blocks, 1, blocks, 1, &o);
                if (r != KVD_OK)
                        break;
                CHILD_CHECK(++n <= 16, 55, "%d notifications queued and no refusal", n);
        }
        CHILD_CHECK(r == KVD_E_LIMIT_EXCEEDED &&
                            strstr(kvd_last_error(src), "limits.per_user.max_notifies") &&
                            strstr(kvd_last_error(src), "uid 65534"),
                    56, "push %d: %s %s", n, kvd_strerror(r), kvd_last_error(src));
        CHILD_CHECK(n == 3, 57, "%d notifications queued, the limit is 3", n);
        /* A push without a notification still moves. */
        r = kvd_push_blocks(src, &key, sc.id, blocks, 1, blocks, 1, NULL);
        CHILD_CHECK(r == KVD_OK, 58, "push without a notification: %s", kvd_last_error(src));
        r = hold((uint64_t)n);
        (void)kvd_client_finalize(src);
        (void)kvd_client_finalize(dst);
        return r;
}

START_TEST(test_notification_flooder)
{
        Hostile h;

        if (!need_root())
                return;
        start_daemon_with(QUOTA_CONFIG(""));
        hostile_start(&h, flooder_main);
        expect_held_at_limit("notifies");
        expect_refusal_metric("max_notifies");

        /* Root's own push still carries its notification, and it is taken. */
        root_moves_bytes(1001, 2002);
        expect_kvdistctl_answers();
        hostile_stop(&h);
        wait_user_gone();
        stop_daemon();
}
END_TEST

/*
 * Every connection taken (max_clients 3: six connections, the hostile uid's own limit): a
 * client of another uid is refused a cluster on the reserve, but kvdistctl status gets in (two
 * reserved: the refused client's connection may not be gone yet when kvdistctl connects).
 */
START_TEST(test_reserve_for_status)
{
        const char *argv[] = {getenv("KVDISTCTL"), "--socket", NULL, "status", NULL};
        char *out = NULL, *err = NULL;
        kvd_client *c = NULL;
        Hostile h;
        int r;

        if (!need_root())
                return;
        start_daemon_with("{ \"socket_mode\": \"0666\", \"limits\": { \"max_clients\": 3,"
                          " \"reserved_connections\": 2, \"attach_timeout_ms\": 3600000,"
                          " \"per_user\": { \"max_connections\": 6 } } }\n");
        hostile_start(&h, holder_main);

        r = harness_client_init(&daemon_, 1001, KVD_ROLE_MIX, &c);
        ck_assert_msg(
                r == KVD_E_LIMIT_EXCEEDED && strstr(kvd_last_error(NULL), "reserved_connections"),
                "kvd_client_init on the reserve: %s: %s", kvd_strerror(r), kvd_last_error(NULL));
        argv[2] = daemon_.socket_path;
        ck_assert_ptr_nonnull(argv[0]);
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl status exited %d: %s", r, err);
        ck_assert_msg(strstr(out, "65534"), "kvdistctl status:\n%s", out);
        free(out);
        free(err);

        hostile_stop(&h);
        wait_user_gone();
        root_moves_bytes(1001, 2002);
        stop_daemon();
}
END_TEST

/* A connection that says Hello and attaches no cluster is closed, with a word why. */
START_TEST(test_unattached_closed)
{
        kvd_client *a = NULL;
        char detail[256] = "", *json = NULL;
        HarnessFrame f;
        int fd, r, code;

        start_daemon_with("{ \"limits\": { \"attach_timeout_ms\": 500 } }\n");
        /* Attached first: it waits as long as it likes. */
        r = harness_client_init(&daemon_, 1001, KVD_ROLE_MIX, &a);
        ck_assert_msg(r == KVD_OK, "kvd_client_init: %s", kvd_strerror(r));

        fd = harness_raw_connect(daemon_.socket_path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(harness_raw_hello(fd), 0);
        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        ck_assert_int_eq(r, 1);
        ck_assert(f.h.flags & FRAME_FLAG_ERROR);
        ck_assert_uint_eq(f.h.request_id, FRAME_CONNECTION_REQUEST_ID);
        ck_assert_int_eq(harness_frame_status(&f, &code, detail, sizeof(detail)), 0);
        harness_frame_deinit(&f);
        ck_assert_int_eq(code, KVD_E_TIMEOUT);
        ck_assert_msg(strstr(detail, "limits.attach_timeout_ms"), "%s", detail);
        ck_assert_int_eq(harness_raw_wait_closed(fd, harness_wait_ms()), 1);
        close(fd);

        /* Its time ran out after the attached client's last request: that one still answers. */
        expect_ok(a, kvd_daemon_status(a, &json));
        ck_assert_int_eq(status_json_int(json, "counters/connections_idle_closed"), 1);
        free(json);
        ck_assert(harness_daemon_log_contains(&daemon_, "no cluster attached"));
        expect_ok(a, kvd_client_finalize(a));
        stop_daemon();
}
END_TEST

static Suite *quota_suite(void)
{
        Suite *s = suite_create("quota");
        TCase *tc;

        tc = tcase_create("hostile");
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_connection_holder);
        tcase_add_test(tc, test_many_regions);
        tcase_add_test(tc, test_notification_flooder);
        tcase_add_test(tc, test_reserve_for_status);
        suite_add_tcase(s, tc);

        tc = tcase_create("attach");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_unattached_closed);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(quota_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
