/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of kvdistd as a service: the notification protocol against a fake service
 * manager (READY, paced STATUS, WATCHDOG at half WATCHDOG_USEC, RELOADING, STOPPING), SIGHUP
 * reload, and the Prometheus endpoint (checked by check-prometheus.py, and by promtool when it
 * is installed).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-world.h"
#include "common/macro.h"
#include "common/sockaddr-util.h"

#define A_ID 1001
#define B_ID 2002
#define C_ID 3003

/* The manager's side of NOTIFY_SOCKET: a datagram socket in a temporary directory. */
typedef struct Manager {
        char dir[64];
        char path[128];
        char env[160];
        int fd;
} Manager;

static void manager_start(Manager *m)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        strcpy(m->dir, "/tmp/kvdist-it-notify-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(m->dir));
        (void)snprintf(m->path, sizeof(m->path), "%s/notify", m->dir);
        (void)snprintf(m->env, sizeof(m->env), "NOTIFY_SOCKET=%s", m->path);
        m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(m->fd, 0);
        strcpy(sa.sun_path, m->path);
        ck_assert_int_eq(bind(m->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static void manager_stop(Manager *m)
{
        close(m->fd);
        unlink(m->path);
        rmdir(m->dir);
}

/* The next message within @timeout_ms, malloc()ed; NULL when none came. */
static char *manager_recv(Manager *m, int timeout_ms)
{
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        char buf[4096];
        ssize_t n;

        ck_assert_int_eq(setsockopt(m->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        n = recv(m->fd, buf, sizeof(buf) - 1, 0);
        if (n < 0)
                return NULL;
        buf[n] = '\0';
        return strdup(buf);
}

/* Counts of what the manager heard while waiting for something. */
typedef struct Heard {
        unsigned watchdog;
        unsigned status;
        uint64_t last_watchdog_ms;
        char last_status[256];
} Heard;

static void heard_add(Heard *h, const char *msg)
{
        const char *st = strstr(msg, "STATUS=");

        if (strcmp(msg, "WATCHDOG=1") == 0) {
                h->watchdog++;
                h->last_watchdog_ms = harness_now_ms();
        }
        if (st) {
                h->status++;
                (void)snprintf(h->last_status, sizeof(h->last_status), "%s", st + 7);
        }
}

/*
 * Counts the messages already waiting in the socket, without waiting for more: whatever is read
 * after this was sent after it.
 */
static void manager_drain(Manager *m, Heard *h)
{
        char buf[4096];
        ssize_t n;

        while ((n = recv(m->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) >= 0) {
                buf[n] = '\0';
                heard_add(h, buf);
        }
}

/*
 * Reads messages for up to @timeout_ms until one contains @needle (NULL: until the time is
 * up); every message is counted in @h. Returns whether @needle came.
 */
static bool manager_wait_for(Manager *m, Heard *h, const char *needle, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        for (;;) {
                uint64_t now = harness_now_ms();
                char *msg;
                bool hit;

                if (now >= deadline)
                        return false;
                msg = manager_recv(m, (int)(deadline - now));
                if (!msg)
                        continue;
                heard_add(h, msg);
                hit = needle && strstr(msg, needle);
                free(msg);
                if (hit)
                        return true;
        }
}

static bool manager_wait_status(Manager *m, Heard *h, const char *needle, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;

        while (harness_now_ms() < deadline) {
                if (!manager_wait_for(m, h, "STATUS=", (int)(deadline - harness_now_ms())))
                        return false;
                if (strstr(h->last_status, needle))
                        return true;
        }
        return false;
}

/* The interval the test asks for; the daemon pings at half of it. */
#define WATCHDOG_USEC 200000
#define PING_MS (WATCHDOG_USEC / 2000)

START_TEST(test_notify)
{
        const char *env[3] = {NULL, "WATCHDOG_USEC=200000", NULL};
        HarnessDaemon d;
        kvd_client *a = NULL, *c = NULL;
        Heard h = {}, burst = {};
        uint64_t t0, elapsed;
        Manager m;
        int r;

        manager_start(&m);
        env[0] = m.env;
        r = harness_daemon_start_opts(&d, &(HarnessStartOptions){.env = env});
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));

        /* READY=1 comes with the first summary, once the socket accepts (the harness saw it). */
        ck_assert_msg(manager_wait_for(&m, &h, "READY=1", harness_wait_ms()), "no READY=1");
        ck_assert_msg(strstr(h.last_status, "0 clusters"), "READY without a summary: %s",
                      h.last_status);
        ck_assert(harness_daemon_log_contains(&d, "watchdog: pinging the service manager every "
                                                  "100 ms"));

        /* The summary follows the clusters. */
        expect_ok(NULL, harness_client_init(&d, A_ID, KVD_ROLE_PROMPT, &a));
        ck_assert_msg(manager_wait_status(&m, &h, "1 clusters", harness_wait_ms()),
                      "no STATUS= with 1 cluster; last: %s", h.last_status);

        /*
         * Watchdog pings keep coming from the loop, never faster than every PING_MS (a timer
         * does not fire early). The test sees when a ping is read, not when it was sent: pings
         * that waited in the socket are counted before the clock starts, so the 6 read after it
         * were sent after it too. They span 5 intervals, less at most one: a ping the loop ran
         * late is followed by the next on its schedule.
         */
        manager_drain(&m, &h);
        h.watchdog = 0;
        t0 = harness_now_ms();
        while (h.watchdog < 6)
                ck_assert_msg(manager_wait_for(&m, &h, "WATCHDOG=1", harness_wait_ms()),
                              "the watchdog pings stopped after %u", h.watchdog);
        elapsed = h.last_watchdog_ms - t0;
        ck_assert_msg(elapsed >= 4 * PING_MS,
                      "6 pings in %llu ms: faster than every "
                      "%d ms",
                      (unsigned long long)elapsed, PING_MS);

        /*
         * Fifty attach/detach cycles, then one more attach: STATUS= at most once a second, not
         * once per change, and the last one tells the final state.
         */
        t0 = harness_now_ms();
        for (int i = 0; i < 50; i++) {
                expect_ok(NULL, harness_client_init(&d, C_ID, KVD_ROLE_DECODER, &c));
                expect_ok(c, kvd_client_finalize(c));
        }
        expect_ok(NULL, harness_client_init(&d, C_ID, KVD_ROLE_DECODER, &c));
        /* The trailing update arrives within a second after the last change. */
        (void)manager_wait_for(&m, &burst, NULL, 1500);
        elapsed = harness_now_ms() - t0;
        ck_assert_msg(burst.status <= elapsed / 1000 + 2,
                      "%u STATUS= messages in %llu ms for 100 changes", burst.status,
                      (unsigned long long)elapsed);
        ck_assert_msg(burst.status >= 1 && strstr(burst.last_status, "2 clusters"),
                      "the last summary (%u sent) is \"%s\", not the final state", burst.status,
                      burst.last_status);

        /* SIGHUP: RELOADING=1, then READY=1 again. */
        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        ck_assert_msg(manager_wait_for(&m, &h, "RELOADING=1", harness_wait_ms()), "no RELOADING=1");
        ck_assert_msg(manager_wait_for(&m, &h, "READY=1", harness_wait_ms()),
                      "no READY=1 after reload");

        /* SIGTERM: STOPPING=1, then a clean exit. */
        expect_ok(c, kvd_client_finalize(c));
        expect_ok(a, kvd_client_finalize(a));
        ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
        ck_assert_msg(manager_wait_for(&m, &h, "STOPPING=1", harness_wait_ms()), "no STOPPING=1");
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
        manager_stop(&m);
}
END_TEST

/* Without WATCHDOG_USEC there is no watchdog timer and no ping. */
START_TEST(test_no_watchdog)
{
        const char *env[2] = {NULL, NULL};
        HarnessDaemon d;
        Heard h = {};
        Manager m;

        manager_start(&m);
        env[0] = m.env;
        ck_assert_int_eq(harness_daemon_start_opts(&d, &(HarnessStartOptions){.env = env}), 0);
        ck_assert(manager_wait_for(&m, &h, "READY=1", harness_wait_ms()));
        (void)manager_wait_for(&m, &h, NULL, 3 * PING_MS);
        ck_assert_uint_eq(h.watchdog, 0);
        ck_assert(!harness_daemon_log_contains(&d, "watchdog:"));
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
        manager_stop(&m);
}
END_TEST

static void write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "we");

        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs(text, f), 0);
        ck_assert_int_eq(fclose(f), 0);
}

/* A config file of @text, kvdistd.json in a new directory from the template @dir: in @path. */
static void config_file_new(char *dir, char *path, size_t size, const char *text)
{
        ck_assert_ptr_nonnull(mkdtemp(dir));
        (void)snprintf(path, size, "%s/kvdistd.json", dir);
        write_file(path, text);
}

/* Removes what config_file_new() made. */
static void config_file_remove(const char *dir, const char *path)
{
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}

/* Waits up to 10 s for @needle in the daemon's log. */
static void wait_log(const HarnessDaemon *d, const char *needle)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

        while (!harness_daemon_log_contains(d, needle)) {
                if (harness_now_ms() >= deadline) {
                        harness_daemon_dump_log(d, 4096);
                        ck_abort_msg("no \"%s\" in the log", needle);
                }
                harness_sleep_ms(20);
        }
}

/* The daemon's effective config as JSON. */
static json_t *daemon_config(const HarnessDaemon *d)
{
        char *text = NULL;
        json_t *root, *config;

        expect_ok(NULL, harness_daemon_status(d, &text));
        root = json_loads(text, 0, NULL);
        free(text);
        ck_assert_ptr_nonnull(root);
        config = json_incref(json_object_get(root, "config"));
        json_decref(root);
        ck_assert(json_is_object(config));
        return config;
}

static json_int_t config_int(json_t *config, const char *a, const char *b)
{
        json_t *v = json_object_get(config, a);

        return json_integer_value(b ? json_object_get(v, b) : v);
}

START_TEST(test_reload)
{
        char dir[] = "/tmp/kvdist-it-reload-XXXXXX", path[128];
        const char *args[] = {"--config", path, NULL};
        kvd_client *a = NULL, *b = NULL;
        HarnessDaemon d;
        json_t *config;

        config_file_new(dir, path, sizeof(path), "{ \"limits\": { \"max_clients\": 64 } }\n");
        ck_assert_int_eq(harness_daemon_startv(&d, args), 0);

        /* Unchanged: nothing to apply. */
        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        wait_log(&d, "reload: the configuration is unchanged");

        write_file(path, "{ \"limits\": { \"max_clients\": 1, \"max_frame_size\": \"8M\" },\n"
                         "  \"memory_size\": \"128M\", \"sync_kv_timeout_ms\": 1500 }\n");
        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        wait_log(&d, "reload: 2 changes applied, 2 need a restart");
        ck_assert(harness_daemon_log_contains(&d, "reload: limits.max_clients: 64 -> 1"));
        ck_assert(harness_daemon_log_contains(&d, "reload: sync_kv_timeout_ms: 1000 -> 1500"));
        ck_assert(harness_daemon_log_contains(
                &d, "reload: memory_size: 256M -> 128M needs a restart; keeping 256M"));
        ck_assert(harness_daemon_log_contains(
                &d, "reload: limits.max_frame_size: 16M -> 8M needs a restart"));

        config = daemon_config(&d);
        ck_assert_int_eq(config_int(config, "limits", "max_clients"), 1);
        ck_assert_int_eq(config_int(config, "limits", "max_frame_size"), 16 << 20);
        ck_assert_int_eq(config_int(config, "memory_size", NULL), 256 << 20);
        ck_assert_int_eq(config_int(config, "sync_kv_timeout_ms", NULL), 1500);
        json_decref(config);

        /* The new limit holds: one cluster, not two. */
        expect_ok(NULL, harness_client_init(&d, A_ID, KVD_ROLE_PROMPT, &a));
        ck_assert_int_eq(harness_client_init(&d, B_ID, KVD_ROLE_DECODER, &b), KVD_E_LIMIT_EXCEEDED);
        expect_ok(a, kvd_client_finalize(a));

        /* A broken file changes nothing and the daemon goes on. */
        write_file(path, "{ \"limits\": { \"max_clients\": 0 } }\n");
        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        wait_log(&d, "keeping the running configuration");
        ck_assert(harness_daemon_log_contains(&d, "limits.max_clients: must be"));
        ck_assert(harness_daemon_alive(&d));
        config = daemon_config(&d);
        ck_assert_int_eq(config_int(config, "limits", "max_clients"), 1);
        json_decref(config);

        /* Allow-lists apply to connections made after the reload. */
        write_file(path, "{ \"allow_gids\": [4242], \"limits\": { \"max_clients\": 1 } }\n");
        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        wait_log(&d, "reload: allow_gids: [] -> [4242] (for new connections)");
        config = daemon_config(&d);
        ck_assert_int_eq(
                json_integer_value(json_array_get(json_object_get(config, "allow_gids"), 0)), 4242);
        json_decref(config);

        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
        config_file_remove(dir, path);
}
END_TEST

/* The "control_nice" of the daemon's status: its control loop's nice value. */
static json_int_t status_control_nice(const HarnessDaemon *d)
{
        char *text = NULL;
        json_t *root;
        json_int_t v;

        expect_ok(NULL, harness_daemon_status(d, &text));
        root = json_loads(text, 0, NULL);
        free(text);
        ck_assert_ptr_nonnull(root);
        ck_assert(json_is_integer(json_object_get(root, "control_nice")));
        v = json_integer_value(json_object_get(root, "control_nice"));
        json_decref(root);
        return v;
}

/*
 * A daemon that may not raise its control loop (no CAP_SYS_NICE, RLIMIT_NICE 0) serves on at
 * its own nice and says why; one started above control_nice keeps its nice on every thread;
 * control_nice "off" leaves the loop alone and says nothing; RLIMIT_NICE alone lets it raise
 * the loop (kvdistd.service's LimitNICE=).
 */
START_TEST(test_control_nice)
{
        /* root keeps CAP_SYS_NICE through exec unless the bounding set drops it */
        static const char *const unprivileged_root[] = {"prlimit", "--nice=0:0", "setpriv",
                                                        "--bounding-set=-sys_nice", NULL};
        static const char *const unprivileged[] = {"prlimit", "--nice=0:0", NULL};
        static const char *const no_sys_nice[] = {"setpriv", "--bounding-set=-sys_nice", NULL};
        char dir[] = "/tmp/kvdist-it-nice-XXXXXX", path[128], want[96];
        const char *args[] = {"--config", path, NULL};
        int base = getpriority(PRIO_PROCESS, 0);
        HarnessDaemon d;
        HarnessStartOptions o = {.launcher = geteuid() == 0 ? unprivileged_root : unprivileged};

        ck_assert_int_eq(harness_daemon_start_opts(&d, &o), 0);
        (void)snprintf(want, sizeof(want), "control loop left at nice %d, not -10", base);
        wait_log(&d, want);
        ck_assert_int_eq(status_control_nice(&d), base);
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);

        /* started at nice -15, above control_nice -10: the loop is not moved down to it */
        if (geteuid() == 0 && base - 15 >= -20) {
                static const char *const above[] = {"nice", "-n", "-15", NULL};
                HarnessThread t[64];
                int k;

                o.launcher = above;
                ck_assert_int_eq(harness_daemon_start_opts(&d, &o), 0);
                ck_assert_int_eq(status_control_nice(&d), base - 15);
                k = harness_proc_threads(d.pid, t, ARRAY_SIZE(t));
                ck_assert_int_gt(k, 1);
                for (int i = 0; i < k; i++)
                        ck_assert_msg(t[i].nice == base - 15, "thread %s at nice %d", t[i].comm,
                                      t[i].nice);
                ck_assert_int_eq(harness_daemon_stop(&d), 0);
                ck_assert(!harness_daemon_log_contains(&d, "control loop left at nice -15, not"));
                harness_daemon_cleanup(&d);
        }

        config_file_new(dir, path, sizeof(path), "{ \"control_nice\": \"off\" }\n");
        ck_assert_int_eq(harness_daemon_startv(&d, args), 0);
        ck_assert_int_eq(status_control_nice(&d), base);
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        ck_assert(!harness_daemon_log_contains(&d, "control loop left"));
        harness_daemon_cleanup(&d);
        config_file_remove(dir, path);

        /*
         * What kvdistd.service grants: no capability, an RLIMIT_NICE that reaches -10 (20 - -10 =
         * 30). The daemon inherits this (forked) test's limit; raising it takes CAP_SYS_RESOURCE.
         */
        if (geteuid() != 0 || setrlimit(RLIMIT_NICE, &(struct rlimit){30, 30}) < 0) {
                fprintf(stderr, "test_control_nice: RLIMIT_NICE cannot be raised here "
                                "(no CAP_SYS_RESOURCE): the LimitNICE= case is not run\n");
                return;
        }
        o.launcher = no_sys_nice;
        ck_assert_int_eq(harness_daemon_start_opts(&d, &o), 0);
        ck_assert_int_eq(status_control_nice(&d), -10);
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        ck_assert(!harness_daemon_log_contains(&d, "control loop left"));
        harness_daemon_cleanup(&d);
}
END_TEST

/*
 * copy_streaming false: a 17.2 MB same-node pull is copied with memcpy() alone, every byte the
 * same; the status says so (copy_streaming false, nothing streamed), the config echoes it.
 */
START_TEST(test_copy_streaming_off)
{
        enum { BLOCKS = 4200, N = 2100, BLOCK = 4096 };
        char dir[] = "/tmp/kvdist-it-stream-XXXXXX", path[128];
        const char *args[] = {"--config", path, NULL};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        kvd_client *a = NULL, *b = NULL;
        uint64_t sb[N], db[N];
        TCache src, dst;
        TCopies cp = {};
        HarnessDaemon d;
        json_t *root;

        config_file_new(dir, path, sizeof(path), "{ \"copy_streaming\": false }\n");
        ck_assert_int_eq(harness_daemon_startv(&d, args), 0);
        expect_ok(NULL, harness_server_init(&d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &a));
        expect_ok(NULL, harness_client_init(&d, B_ID, KVD_ROLE_DECODER, &b));
        expect_ok(a, tcache_register(&src, a, true, 2, BLOCKS, BLOCK, 61, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, BLOCKS, BLOCK, 62, NULL, 0, 0));
        expect_ok(b, kvd_link_clusters(b, &info, 1, 0, NULL));
        /* scattered, no id twice: 4200 has no factor in common with 7919 or 4099 */
        for (size_t i = 0; i < N; i++) {
                sb[i] = i * 7919 % BLOCKS;
                db[i] = (i * 4099 + 5) % BLOCKS;
        }
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, N, db, N, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, N);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        root = daemon_status_json(&d);
        ck_assert(json_is_false(json_object_get(root, "copy_streaming")));
        ck_assert(
                json_is_false(json_object_get(json_object_get(root, "config"), "copy_streaming")));
        ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "counters"),
                                                            "bytes_streamed")),
                         0);
        json_decref(root);

        tcopies_free(&cp);
        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
        config_file_remove(dir, path);
}
END_TEST

/* GET or another @method of @path over HTTP/1.0; returns the whole response, malloc()ed. */
static char *http_request(const char *addr, const char *method, const char *path)
{
        struct sockaddr_storage sa;
        socklen_t len;
        char req[256], *resp = NULL;
        size_t size = 0;
        FILE *f;
        int fd;

        ck_assert_int_eq(sockaddr_parse(addr, 0, &sa, &len), 0);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, len), 0);
        (void)snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: %s\r\n\r\n", method, path, addr);
        ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
        f = open_memstream(&resp, &size);
        ck_assert_ptr_nonnull(f);
        for (;;) {
                char buf[4096];
                ssize_t n = read(fd, buf, sizeof(buf));

                if (n < 0 && errno == EINTR)
                        continue;
                ck_assert_int_ge(n, 0);
                if (n == 0)
                        break;
                fwrite(buf, 1, (size_t)n, f);
        }
        fclose(f);
        close(fd);
        return resp;
}

/* The status code of an HTTP response ("HTTP/1.x NNN ..."), -1 when it is not one. */
static int http_status(const char *resp)
{
        int code = -1;

        if (strncmp(resp, "HTTP/1.", 7) != 0 || sscanf(resp + 8, " %d", &code) != 1)
                return -1;
        return code;
}

/* Runs check-prometheus.py (and promtool, when there is one) on @text. */
static void check_prometheus(const char *text)
{
        const char *checker = getenv("KVDIST_CHECK_PROMETHEUS"), *promtool = getenv("PROMTOOL");
        char path[] = "/tmp/kvdist-it-metrics-XXXXXX";
        char *out = NULL, *err = NULL;
        int fd, r;

        ck_assert_msg(checker && checker[0], "$KVDIST_CHECK_PROMETHEUS is not set");
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        {
                const char *argv[] = {"/usr/bin/env",
                                      "python3",
                                      checker,
                                      "--expect",
                                      "kvdist_transfers_total",
                                      "--expect",
                                      "kvdist_transfer_duration_seconds",
                                      "--expect",
                                      "kvdist_transfers_in_flight",
                                      "--expect",
                                      "kvdist_request_errors_total",
                                      "--expect",
                                      "kvdist_pool_used_bytes",
                                      "--expect",
                                      "kvdist_region_bytes",
                                      "--expect",
                                      "kvdist_clusters",
                                      "--expect",
                                      "kvdist_links",
                                      "--expect",
                                      "kvdist_copy_bytes_streamed_total",
                                      path,
                                      NULL};

                r = harness_run(argv, &out, &err);
                ck_assert_msg(r == 0, "check-prometheus rejected the metrics: %s%s", out, err);
                free(out);
                free(err);
        }
        if (promtool && promtool[0]) {
                char cmd[512];
                const char *argv[] = {"/bin/sh", "-c", cmd, NULL};

                (void)snprintf(cmd, sizeof(cmd), "'%s' check metrics < '%s'", promtool, path);
                r = harness_run(argv, &out, &err);
                ck_assert_msg(r == 0, "promtool check metrics failed (%d): %s%s", r, out, err);
                free(out);
                free(err);
        } else
                fprintf(stderr, "test-service: promtool is not installed (Debian package "
                                "prometheus), checked with check-prometheus.py only\n");
        unlink(path);
}

START_TEST(test_metrics)
{
        const char *args[] = {"--metrics-listen", "127.0.0.1:0", NULL};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        uint64_t sb[] = {3, 1}, db[] = {0, 2};
        kvd_client *a = NULL, *b = NULL;
        char *text = NULL, *resp, *body, want[256];
        const char *addr;
        json_t *root;
        TCache src, dst;
        HarnessDaemon d;

        ck_assert_int_eq(harness_daemon_startv(&d, args), 0);
        expect_ok(NULL, harness_daemon_status(&d, &text));
        root = json_loads(text, 0, NULL);
        free(text);
        addr = json_string_value(json_object_get(root, "metrics_address"));
        ck_assert_msg(addr && strncmp(addr, "127.0.0.1:", 10) == 0 && strcmp(addr, "127.0.0.1:0"),
                      "metrics_address %s", addr ? addr : "(none)");

        expect_ok(NULL, harness_server_init(&d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &a));
        expect_ok(NULL, harness_client_init(&d, B_ID, KVD_ROLE_DECODER, &b));
        expect_ok(a, tcache_register(&src, a, true, 2, 4, 4096, 1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 4, 4096, 2, NULL, 0, 0));
        expect_ok(b, kvd_link_clusters(b, &info, 1, 0, NULL));
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 2, db, 2, NULL));
        /* One failure, counted by status: block 9 is out of range. */
        sb[0] = 9;
        expect_status(b, kvd_pull_blocks(b, &key, dst.id, sb, 2, db, 2, NULL), KVD_E_PARAM_INVALID,
                      NULL);

        resp = http_request(addr, "GET", "/metrics");
        ck_assert_msg(http_status(resp) == 200, "response:\n%.400s", resp);
        ck_assert_msg(strstr(resp, "Content-Type: text/plain; version=0.0.4"), "%.400s", resp);
        body = strstr(resp, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        body += 4;
        check_prometheus(body);
        ck_assert(strstr(body, "\nkvdist_transfers_total{direction=\"pull\",transport=\"shm\","
                               "status=\"KVD_OK\"} 1\n"));
        /* 2 tensors x 2 blocks of 4096 bytes */
        ck_assert(strstr(body, "\nkvdist_transfer_bytes_total{direction=\"pull\","
                               "transport=\"shm\"} 16384\n"));
        ck_assert(strstr(body, "\nkvdist_transfer_duration_seconds_count{direction=\"pull\","
                               "transport=\"shm\"} 1\n"));
        ck_assert(strstr(body, "\nkvdist_request_errors_total{status=\"KVD_E_PARAM_INVALID\"} "
                               "1\n"));
        ck_assert(strstr(body, "\nkvdist_clusters 2\n"));
        ck_assert(strstr(body, "\nkvdist_links{transport=\"shm\",state=\"up\"} 1\n"));
        /* The region bytes the status document reports for both clusters. */
        (void)snprintf(want, sizeof(want), "\nkvdist_region_bytes %lld\n",
                       (long long)(client_status_int(b, "clusters/0/region_bytes") +
                                   client_status_int(b, "clusters/1/region_bytes")));
        ck_assert_msg(strstr(body, want), "no%s in:\n%s", want, body);
        /* The bytes streamed, as the status document counts them (none for 16 KiB). */
        (void)snprintf(want, sizeof(want), "\nkvdist_copy_bytes_streamed_total %lld\n",
                       (long long)client_status_int(b, "counters/bytes_streamed"));
        ck_assert_msg(strstr(body, want), "no%s in:\n%s", want, body);
        free(resp);

        resp = http_request(addr, "GET", "/");
        ck_assert_msg(http_status(resp) == 404, "GET /:\n%.300s", resp);
        free(resp);
        resp = http_request(addr, "POST", "/metrics");
        ck_assert_msg(http_status(resp) >= 400, "POST was served:\n%.300s", resp);
        free(resp);

        /* The same document over the control socket. */
        expect_ok(b, kvd_daemon_metrics(b, &text));
        ck_assert(strstr(text, "# TYPE kvdist_transfer_duration_seconds histogram\n"));
        check_prometheus(text);
        free(text);

        json_decref(root);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
}
END_TEST

START_TEST(test_metrics_bad_address)
{
        const char *argv[] = {getenv("KVDISTD"), "--metrics-listen", "localhost:9477", NULL};
        char *out = NULL, *err = NULL;

        ck_assert_int_eq(harness_run(argv, &out, &err), 2);
        ck_assert_msg(strstr(err, "--metrics-listen"), "stderr: %s", err);
        free(out);
        free(err);
}
END_TEST

static Suite *service_suite(void)
{
        Suite *s = suite_create("integration-service");
        TCase *tc = tcase_create("service");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_notify);
        tcase_add_test(tc, test_no_watchdog);
        tcase_add_test(tc, test_reload);
        tcase_add_test(tc, test_control_nice);
        tcase_add_test(tc, test_metrics);
        tcase_add_test(tc, test_copy_streaming_off);
        tcase_add_test(tc, test_metrics_bad_address);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(service_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
