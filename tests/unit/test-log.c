/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the daemon's logging (log.c, log-journal.c: formats, the journal's native
 * protocol, the rate limit) and service-manager notifications (sd.c).
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvdist-config.h"
#include "common/log.h"
#include "common/macro.h"
#include "daemon/sd.h"

/*
 * stderr redirected into a pipe between capture_begin() and capture_end(), as under a service
 * manager; a thread drains it so that writers never block.
 */
typedef struct Capture {
        int pipe[2];
        int saved;
        pthread_t reader;
        char *buf;
        size_t len;
} Capture;

static void *capture_reader(void *arg)
{
        Capture *cap = arg;
        FILE *f = open_memstream(&cap->buf, &cap->len);
        char chunk[4096];
        ssize_t n;

        if (!f)
                abort();
        while ((n = read(cap->pipe[0], chunk, sizeof(chunk))) != 0) {
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        abort();
                }
                if (fwrite(chunk, 1, (size_t)n, f) != (size_t)n)
                        abort();
        }
        if (fclose(f) != 0)
                abort();
        return NULL;
}

static void capture_begin(Capture *cap)
{
        *cap = (Capture){.buf = NULL};
        ck_assert_int_eq(pipe2(cap->pipe, O_CLOEXEC), 0);
        ck_assert_int_eq(pthread_create(&cap->reader, NULL, capture_reader, cap), 0);
        fflush(stderr);
        cap->saved = dup(STDERR_FILENO);
        ck_assert_int_ge(cap->saved, 0);
        ck_assert_int_ge(dup2(cap->pipe[1], STDERR_FILENO), 0);
}

/* Restores stderr and returns what was written (malloc()ed, NUL-terminated). */
static char *capture_end(Capture *cap)
{
        ck_assert_int_ge(dup2(cap->saved, STDERR_FILENO), 0);
        close(cap->saved);
        close(cap->pipe[1]);
        ck_assert_int_eq(pthread_join(cap->reader, NULL), 0);
        close(cap->pipe[0]);
        ck_assert_ptr_nonnull(cap->buf);
        return cap->buf;
}

/* The console prefix of this process at @level_name. */
static char *console_prefix(const char *level_name)
{
        char *p;

        ck_assert_int_ge(asprintf(&p, "kvdistd[%ld]: %s: ", (long)getpid(), level_name), 0);
        return p;
}

static void setup_console(void)
{
        ck_assert_int_eq(unsetenv("JOURNAL_STREAM"), 0);
        log_open();
        log_set_max_level(LOG_INFO);
}

START_TEST(test_console_format)
{
        _cleanup_free_ char *out = NULL, *expect = NULL;
        Capture cap;

        setup_console();
        capture_begin(&cap);
        ck_assert_int_eq(log_error("hello %d", 42), 0);
        ck_assert_int_eq(log_notice("%s", "second"), 0);
        out = capture_end(&cap);

        ck_assert_int_ge(asprintf(&expect,
                                  "kvdistd[%ld]: error: hello 42\n"
                                  "kvdistd[%ld]: notice: second\n",
                                  (long)getpid(), (long)getpid()),
                         0);
        ck_assert_str_eq(out, expect);
}
END_TEST

START_TEST(test_max_level)
{
        _cleanup_free_ char *out = NULL, *expect = NULL;
        Capture cap;

        setup_console();
        ck_assert_int_eq(log_get_max_level(), LOG_INFO);
        capture_begin(&cap);
        log_debug("not shown");
        log_info("info shown");
        log_set_max_level(LOG_WARNING);
        ck_assert_int_eq(log_get_max_level(), LOG_WARNING);
        log_notice("not shown");
        log_info("not shown");
        log_warning("warning shown");
        log_set_max_level(LOG_DEBUG);
        log_debug("debug shown");
        log_set_max_level(LOG_ERR);
        log_warning("not shown");
        log_error("error shown");
        out = capture_end(&cap);

        ck_assert_int_ge(asprintf(&expect,
                                  "kvdistd[%1$ld]: info: info shown\n"
                                  "kvdistd[%1$ld]: warning: warning shown\n"
                                  "kvdistd[%1$ld]: debug: debug shown\n"
                                  "kvdistd[%1$ld]: error: error shown\n",
                                  (long)getpid()),
                         0);
        ck_assert_str_eq(out, expect);
}
END_TEST

START_TEST(test_error_suffix)
{
        _cleanup_free_ char *out = NULL, *expect = NULL;
        Capture cap;

        setup_console();
        capture_begin(&cap);
        ck_assert_int_eq(log_error_errno(-ENOENT, "open %s", "/x"), -ENOENT);
        /* A positive errno is named the same way and returned as given. */
        ck_assert_int_eq(log_warning_errno(EACCES, "connect"), EACCES);
        /* %m names @error, so no second suffix. */
        ck_assert_int_eq(log_error_errno(-EPIPE, "write: %m"), -EPIPE);
        /* A filtered message still returns its error. */
        ck_assert_int_eq(log_debug_errno(-EIO, "hidden"), -EIO);
        out = capture_end(&cap);

        ck_assert_int_ge(asprintf(&expect,
                                  "kvdistd[%1$ld]: error: open /x: No such file or directory\n"
                                  "kvdistd[%1$ld]: warning: connect: Permission denied\n"
                                  "kvdistd[%1$ld]: error: write: Broken pipe\n",
                                  (long)getpid()),
                         0);
        ck_assert_str_eq(out, expect);
}
END_TEST

START_TEST(test_errno_preserved)
{
        _cleanup_free_ char *out = NULL;
        Capture cap;

        setup_console();
        capture_begin(&cap);
        errno = EBADF;
        log_info("shown");
        ck_assert_int_eq(errno, EBADF);
        log_debug("filtered");
        ck_assert_int_eq(errno, EBADF);
        log_error_errno(-ENOMEM, "with error");
        ck_assert_int_eq(errno, EBADF);
        /* Without an error, %m still names the caller's errno. */
        log_info("errno: %m");
        ck_assert_int_eq(errno, EBADF);
        out = capture_end(&cap);
        ck_assert_ptr_nonnull(strstr(out, "errno: Bad file descriptor\n"));
}
END_TEST

START_TEST(test_journal_prefix)
{
        _cleanup_free_ char *out = NULL, *env = NULL, *wrong = NULL, *pfx = NULL, *expect = NULL;
        struct stat st;
        Capture cap;

        log_set_max_level(LOG_DEBUG);
        /* No journal socket to send to (even where journald runs): the stream takes it all. */
        log_journal_set_socket("/nonexistent/journal-socket");
        capture_begin(&cap);
        ck_assert_int_eq(fstat(STDERR_FILENO, &st), 0);
        ck_assert_int_ge(asprintf(&env, "%llu:%llu", (unsigned long long)st.st_dev,
                                  (unsigned long long)st.st_ino),
                         0);
        ck_assert_int_ge(asprintf(&wrong, "%llu:%llu", (unsigned long long)st.st_dev,
                                  (unsigned long long)st.st_ino + 1),
                         0);

        ck_assert_int_eq(setenv("JOURNAL_STREAM", env, 1), 0);
        log_open();
        log_error("e");
        log_warning("w");
        log_notice("n");
        log_info("i");
        log_debug_errno(-EINVAL, "d");

        /* Another stream than stderr, or a malformed variable: the console format. */
        ck_assert_int_eq(setenv("JOURNAL_STREAM", wrong, 1), 0);
        log_open();
        log_info("console 1");
        ck_assert_int_eq(setenv("JOURNAL_STREAM", "garbage", 1), 0);
        log_open();
        log_info("console 2");
        out = capture_end(&cap);

        pfx = console_prefix("info");
        ck_assert_int_ge(asprintf(&expect,
                                  "<3>kvdistd: e\n"
                                  "<4>kvdistd: w\n"
                                  "<5>kvdistd: n\n"
                                  "<6>kvdistd: i\n"
                                  "<7>kvdistd: d: Invalid argument\n"
                                  "%1$sconsole 1\n"
                                  "%1$sconsole 2\n",
                                  pfx),
                         0);
        ck_assert_str_eq(out, expect);
        log_journal_set_socket(NULL);
}
END_TEST

/* The value of journal field @name in the native-protocol datagram @d of @len bytes. */
static char *journal_field(const char *d, size_t len, const char *name)
{
        size_t nl = strlen(name);

        for (size_t off = 0; off < len;) {
                const char *line = d + off, *end = memchr(line, '\n', len - off);
                size_t ll;

                ck_assert_ptr_nonnull(end);
                ll = (size_t)(end - line);
                if (memchr(line, '=', ll)) {
                        if (ll > nl && strncmp(line, name, nl) == 0 && line[nl] == '=')
                                return strndup(line + nl + 1, ll - nl - 1);
                        off += ll + 1;
                        continue;
                }
                /* NAME\n, a 64-bit little-endian length, the value, \n */
                {
                        uint64_t vlen = 0;

                        ck_assert_uint_ge(len - off, ll + 1 + 8);
                        for (int i = 7; i >= 0; i--)
                                vlen = vlen << 8 | (uint8_t)line[ll + 1 + (size_t)i];
                        ck_assert_uint_ge(len - off, ll + 1 + 8 + vlen + 1);
                        ck_assert_int_eq(line[ll + 1 + 8 + vlen], '\n');
                        if (ll == nl && strncmp(line, name, nl) == 0)
                                return strndup(line + ll + 1 + 8, vlen);
                        off += ll + 1 + 8 + vlen + 1;
                }
        }
        return NULL;
}

/* Asserts field @name of the datagram is @want (NULL: absent). */
static void expect_field(const char *d, ssize_t len, const char *name, const char *want)
{
        _cleanup_free_ char *got = journal_field(d, (size_t)len, name);

        if (!want)
                ck_assert_msg(!got, "%s=%s, want none", name, got);
        else
                ck_assert_msg(got && strcmp(got, want) == 0, "%s=%s, want %s", name,
                              got ? got : "(none)", want);
}

START_TEST(test_journal_fields)
{
        _cleanup_free_ char *env = NULL;
        char dir[] = "/tmp/kvdist-test-journal-XXXXXX", path[128], d[4096];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = 5};
        struct stat st;
        Capture cap;
        ssize_t n;
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        (void)snprintf(path, sizeof(path), "%s/socket", dir);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        strcpy(sa.sun_path, path);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        log_journal_set_socket(path);
        log_set_max_level(LOG_DEBUG);

        capture_begin(&cap);
        ck_assert_int_eq(fstat(STDERR_FILENO, &st), 0);
        ck_assert_int_ge(asprintf(&env, "%llu:%llu", (unsigned long long)st.st_dev,
                                  (unsigned long long)st.st_ino),
                         0);
        ck_assert_int_eq(setenv("JOURNAL_STREAM", env, 1), 0);
        log_open();
        ck_assert_int_eq(
                log_fields(LOG_WARNING, -ENOENT, LOG_LINK(3, 7), "link %d: gone\nreally", 3),
                -ENOENT);
        log_fields(LOG_INFO, 0, LOG_PEER("10.0.0.2:26001"), "peer up");
        log_info("plain");
        free(capture_end(&cap));
        setup_console();

        n = recv(fd, d, sizeof(d), 0);
        ck_assert_int_gt(n, 0);
        expect_field(d, n, "PRIORITY", "4");
        expect_field(d, n, "SYSLOG_IDENTIFIER", "kvdistd");
        expect_field(d, n, "KVDIST_CLUSTER", "7");
        expect_field(d, n, "KVDIST_LINK", "3");
        expect_field(d, n, "ERRNO", "2");
        expect_field(d, n, "KVDIST_PEER", NULL);
        /* A newline in the message survives in the binary-safe form. */
        expect_field(d, n, "MESSAGE", "link 3: gone\nreally: No such file or directory");

        n = recv(fd, d, sizeof(d), 0);
        ck_assert_int_gt(n, 0);
        expect_field(d, n, "PRIORITY", "6");
        expect_field(d, n, "KVDIST_PEER", "10.0.0.2:26001");
        expect_field(d, n, "KVDIST_CLUSTER", NULL);
        expect_field(d, n, "MESSAGE", "peer up");

        n = recv(fd, d, sizeof(d), 0);
        ck_assert_int_gt(n, 0);
        expect_field(d, n, "MESSAGE", "plain");
        expect_field(d, n, "KVDIST_LINK", NULL);

        log_journal_set_socket(NULL);
        close(fd);
        unlink(path);
        rmdir(dir);
}
END_TEST

static void warn_from_one_place(int i)
{
        log_warning("repeated %d", i);
}

START_TEST(test_ratelimit)
{
        _cleanup_free_ char *out = NULL, *pfx_w = NULL, *pfx_i = NULL;
        unsigned warnings = 0, infos = 0, suppressed = 0, other = 0;
        char *line, *save;
        Capture cap;

        setup_console();
        /* Three per 200 ms from one place; the test sleeps past the window, never races it. */
        log_set_ratelimit(200000, 3);
        capture_begin(&cap);
        for (int i = 0; i < 10; i++) {
                warn_from_one_place(i);
                log_info("info %d", i);
        }
        log_warning("another place");
        usleep(300000);
        warn_from_one_place(10);
        out = capture_end(&cap);
        log_set_ratelimit(LOG_RATELIMIT_INTERVAL, LOG_RATELIMIT_BURST);

        pfx_w = console_prefix("warning");
        pfx_i = console_prefix("info");
        for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (strncmp(line, pfx_i, strlen(pfx_i)) == 0)
                        infos++;
                else if (strstr(line, "7 similar messages from") && strstr(line, "suppressed"))
                        suppressed++;
                else if (strncmp(line, pfx_w, strlen(pfx_w)) == 0 && strstr(line, "repeated"))
                        warnings++;
                else if (strstr(line, "another place"))
                        other++;
        }
        /* 3 in the first window, the one after it; info is never limited. */
        ck_assert_uint_eq(warnings, 4);
        ck_assert_uint_eq(suppressed, 1);
        ck_assert_uint_eq(infos, 10);
        ck_assert_msg(other == 1, "a second call site was limited too");
}
END_TEST

START_TEST(test_long_line)
{
        _cleanup_free_ char *out = NULL, *big = NULL, *pfx = NULL;
        Capture cap;
        size_t len;

        setup_console();
        big = malloc(5001);
        ck_assert_ptr_nonnull(big);
        memset(big, 'x', 5000);
        big[5000] = '\0';

        capture_begin(&cap);
        log_error_errno(-ENOENT, "%s", big);
        log_info("after");
        out = capture_end(&cap);

        /* Cut, but still one line with its newline, and the next line intact. */
        pfx = console_prefix("info");
        len = strlen(out);
        ck_assert_ptr_nonnull(strchr(out, '\n'));
        ck_assert_uint_eq((size_t)(strchr(out, '\n') - out), 2047);
        ck_assert_str_eq(strchr(out, '\n') + 1 + strlen(pfx), "after\n");
        ck_assert_uint_eq(len, 2048 + strlen(pfx) + strlen("after\n"));
}
END_TEST

#define N_THREADS 8
#define N_LINES 400

static void *log_thread(void *arg)
{
        long id = (long)arg;

        for (int i = 0; i < N_LINES; i++)
                log_info("thread %ld line %d %0200d", id, i, 0);
        return NULL;
}

START_TEST(test_threads)
{
        _cleanup_free_ char *out = NULL, *pfx = NULL;
        static bool seen[N_THREADS][N_LINES];
        pthread_t threads[N_THREADS];
        size_t n_lines = 0;
        char *line, *save;
        Capture cap;

        setup_console();
        pfx = console_prefix("info");
        capture_begin(&cap);
        for (long i = 0; i < N_THREADS; i++)
                ck_assert_int_eq(pthread_create(&threads[i], NULL, log_thread, (void *)i), 0);
        for (int i = 0; i < N_THREADS; i++)
                ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
        out = capture_end(&cap);

        /* Every line whole: the prefix, one message, nothing interleaved. */
        for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                long id;
                int i, end = 0;

                ck_assert_msg(strncmp(line, pfx, strlen(pfx)) == 0, "bad line: %s", line);
                ck_assert_int_eq(
                        sscanf(line + strlen(pfx), "thread %ld line %d %*200[0]%n", &id, &i, &end),
                        2);
                ck_assert_msg(line[strlen(pfx) + (size_t)end] == '\0', "bad line: %s", line);
                ck_assert(id >= 0 && id < N_THREADS && i >= 0 && i < N_LINES);
                ck_assert(!seen[id][i]);
                seen[id][i] = true;
                n_lines++;
        }
        ck_assert_uint_eq(n_lines, N_THREADS * N_LINES);
}
END_TEST

static Suite *log_suite(void)
{
        Suite *s = suite_create("log");
        TCase *tc = tcase_create("format");

        tcase_add_test(tc, test_console_format);
        tcase_add_test(tc, test_max_level);
        tcase_add_test(tc, test_error_suffix);
        tcase_add_test(tc, test_errno_preserved);
        tcase_add_test(tc, test_journal_prefix);
        tcase_add_test(tc, test_journal_fields);
        tcase_add_test(tc, test_ratelimit);
        tcase_add_test(tc, test_long_line);
        tcase_add_test(tc, test_threads);
        suite_add_tcase(s, tc);
        return s;
}

/* A datagram socket standing in for the service manager's notification socket. */
typedef struct FakeManager {
        char dir[64];
        char path[128];
        int fd;
} FakeManager;

static void manager_start(FakeManager *m)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = 5};

        strcpy(m->dir, "/tmp/kvdist-test-sd-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(m->dir));
        snprintf(m->path, sizeof(m->path), "%s/notify", m->dir);
        m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(m->fd, 0);
        strcpy(sa.sun_path, m->path);
        ck_assert_int_eq(bind(m->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(setsockopt(m->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        ck_assert_int_eq(setenv("NOTIFY_SOCKET", m->path, 1), 0);
}

static void manager_stop(FakeManager *m)
{
        close(m->fd);
        unlink(m->path);
        rmdir(m->dir);
}

/* The next message the manager got, or NULL when there is none. */
static char *manager_recv(FakeManager *m, bool wait)
{
        char buf[4096];
        ssize_t n;

        n = recv(m->fd, buf, sizeof(buf) - 1, wait ? 0 : MSG_DONTWAIT);
        if (n < 0)
                return NULL;
        buf[n] = '\0';
        return strdup(buf);
}

static void expect_message(FakeManager *m, const char *expect)
{
        _cleanup_free_ char *got = NULL;

        if (!HAVE_LIBSYSTEMD) {
                /* Built without libsystemd: nothing is sent. */
                ck_assert_ptr_null(manager_recv(m, false));
                return;
        }
        got = manager_recv(m, true);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, expect);
}

START_TEST(test_notify_messages)
{
        FakeManager m;

        manager_start(&m);
        ck_assert_int_eq(sd_service_ready("serving on /run/kvdist/kvdist.sock"), 0);
        expect_message(&m, "READY=1\nSTATUS=serving on /run/kvdist/kvdist.sock");
        ck_assert_int_eq(sd_service_ready(NULL), 0);
        expect_message(&m, "READY=1");
        ck_assert_int_eq(sd_service_status("3 clients"), 0);
        expect_message(&m, "STATUS=3 clients");
        /* A newline in a status must not smuggle in another assignment. */
        ck_assert_int_eq(sd_service_status("x\nREADY=1"), 0);
        expect_message(&m, "STATUS=x READY=1");
        ck_assert_int_eq(sd_service_ready("a\nb"), 0);
        expect_message(&m, "READY=1\nSTATUS=a b");
        ck_assert_int_eq(sd_service_watchdog(), 0);
        expect_message(&m, "WATCHDOG=1");
        ck_assert_int_eq(sd_service_stopping(), 0);
        expect_message(&m, "STOPPING=1");
        manager_stop(&m);
}
END_TEST

START_TEST(test_notify_without_manager)
{
        ck_assert_int_eq(unsetenv("NOTIFY_SOCKET"), 0);
        ck_assert_int_eq(sd_service_ready("x"), 0);
        ck_assert_int_eq(sd_service_status("x"), 0);
        ck_assert_int_eq(sd_service_watchdog(), 0);
        ck_assert_int_eq(sd_service_stopping(), 0);

        /* A socket that is gone is an error the caller hears about. */
        ck_assert_int_eq(setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1), 0);
        if (HAVE_LIBSYSTEMD)
                ck_assert_int_lt(sd_service_ready("x"), 0);
        else
                ck_assert_int_eq(sd_service_ready("x"), 0);
}
END_TEST

START_TEST(test_watchdog)
{
        char pid[32];

        ck_assert_int_eq(unsetenv("WATCHDOG_USEC"), 0);
        ck_assert_int_eq(unsetenv("WATCHDOG_PID"), 0);
        ck_assert_uint_eq(sd_service_watchdog_usec(), 0);

        snprintf(pid, sizeof(pid), "%ld", (long)getpid());
        ck_assert_int_eq(setenv("WATCHDOG_USEC", "3000000", 1), 0);
        ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
        ck_assert_uint_eq(sd_service_watchdog_usec(), HAVE_LIBSYSTEMD ? 3000000 : 0);

        /* The watchdog is some other process's. */
        snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
        ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
        ck_assert_uint_eq(sd_service_watchdog_usec(), 0);
}
END_TEST

static Suite *sd_suite(void)
{
        Suite *s = suite_create("sd");
        TCase *tc = tcase_create("notify");

        tcase_add_test(tc, test_notify_messages);
        tcase_add_test(tc, test_notify_without_manager);
        tcase_add_test(tc, test_watchdog);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(log_suite());
        int failed;

        srunner_add_suite(sr, sd_suite());
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
