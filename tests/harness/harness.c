/* SPDX-License-Identifier: MIT */
/* Integration test harness: real kvdistd processes, forked clients, patterns and raw frames. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"
#include "common/time-util.h"

#define HARNESS_MAX_ARGS 64
#define HARNESS_LOG_TAIL 16384

/* In a forked child: the write end of its readiness pipe. */
static int child_ready_fd = -1;

uint64_t harness_now_ms(void)
{
        return now_usec(CLOCK_MONOTONIC) / USEC_PER_MSEC;
}

int harness_wait_scaled(int ms)
{
        static const char *const vars[] = {"KVDIST_TEST_TIMEOUT_MULTIPLIER",
                                           "CK_TIMEOUT_MULTIPLIER"};
        double k = 1;

        for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
                const char *v = getenv(vars[i]);
                char *end;
                double x;

                if (!v || !v[0])
                        continue;
                errno = 0;
                x = strtod(v, &end);
                if (errno == 0 && *end == '\0' && x >= 1 && x < 1e6)
                        k = x;
                break;
        }
        return (int)MIN((double)ms * k, (double)INT32_MAX);
}

int harness_wait_ms(void)
{
        return harness_wait_scaled(HARNESS_WAIT_MS);
}

void harness_sleep_ms(unsigned ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Converts a wait status into an exit code, or 128 + the signal. */
static int wait_status_to_code(int status)
{
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        return -ECHILD;
}

/* Waits up to @timeout_ms (< 0: forever) for @pid; 0 with *@ret_status, or -ETIMEDOUT. */
static int wait_pid(pid_t pid, int timeout_ms, int *ret_status)
{
        uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : harness_now_ms() + (uint64_t)timeout_ms;
        unsigned nap = 1;

        for (;;) {
                int status;
                pid_t r = waitpid(pid, &status, timeout_ms < 0 ? 0 : WNOHANG);

                if (r == pid) {
                        *ret_status = status;
                        return 0;
                }
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (harness_now_ms() >= deadline)
                        return -ETIMEDOUT;
                if (r == 0) {
                        harness_sleep_ms(nap);
                        nap = MIN(nap * 2, 20u);
                }
        }
}

/*
 * The watcher: a small process per daemon that waits on a pipe only the test holds. A test
 * that ends without stopping its daemon (a failed Check assertion _exit()s, a Check timeout
 * kills) leaves the pipe at EOF without a word: the watcher prints the tail of the daemon's log,
 * kills it and removes its directory. An orderly stop writes a byte first and the watcher leaves
 * quietly.
 */
static _Noreturn void watcher_run(int fd, pid_t daemon_pid, HarnessDaemon *d)
{
        ssize_t n;
        int lock;
        char c;

        /* Hold nothing of the test's: a copy of a client socket would hide its close. */
        if (fd != 3) {
                if (dup2(fd, 3) < 0)
                        _exit(1);
                fd = 3;
        }
        (void)close_range(4, ~0U, 0);
        (void)prctl(PR_SET_NAME, "kvdist-watch");
        do
                n = read(fd, &c, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1)
                _exit(0);

        (void)kill(daemon_pid, SIGKILL);
        /* The watchers of a test's daemons all wake at once: one log at a time, whole. */
        lock = open("/tmp/kvdist-harness-watchers.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lock >= 0)
                (void)flock(lock, LOCK_EX);
        fprintf(stderr, "harness: the test ended while kvdistd (pid %d) ran; its log (%s):\n",
                (int)daemon_pid, d->log_path);
        harness_daemon_dump_log(d, HARNESS_LOG_TAIL);
        fprintf(stderr, "harness: end of the kvdistd log\n");
        fflush(stderr);
        if (lock >= 0)
                (void)close(lock);
        (void)unlink(d->socket_path);
        if (!getenv("KVDIST_TEST_KEEP_LOGS")) {
                (void)unlink(d->log_path);
                (void)rmdir(d->dir);
        }
        _exit(0);
}

static int watcher_start(HarnessDaemon *d)
{
        int pipefd[2];
        pid_t pid;

        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                int r = -errno;

                safe_close(pipefd[0]);
                safe_close(pipefd[1]);
                return r;
        }
        if (pid == 0) {
                safe_close(pipefd[1]);
                watcher_run(pipefd[0], d->pid, d);
        }
        safe_close(pipefd[0]);
        d->watcher_pid = pid;
        d->watcher_fd = pipefd[1];
        return 0;
}

/* The daemon is gone in an orderly way: the watcher leaves quietly. */
static void watcher_stop(HarnessDaemon *d)
{
        if (d->watcher_pid <= 0)
                return;
        if (write(d->watcher_fd, "x", 1) != 1)
                (void)kill(d->watcher_pid, SIGKILL);
        d->watcher_fd = safe_close(d->watcher_fd);
        (void)waitpid(d->watcher_pid, NULL, 0);
        d->watcher_pid = 0;
}

/* Whether something accepts connections on @path. */
static bool socket_accepts(const char *path)
{
        _cleanup_close_ int fd = harness_raw_connect(path);

        return fd >= 0;
}

/* In the forked child: becomes kvdistd (or its launcher) with stdout and stderr in the log, in
 * network namespace @netns when it is not NULL. */
static _Noreturn void exec_daemon(const char *bin, char **argv, const char *log_path, pid_t parent,
                                  const char *const *env, const char *netns)
{
        int fd;

        for (size_t i = 0; env && env[i]; i++)
                if (putenv((char *)env[i]) != 0)
                        _exit(127);
        /* The daemon must not outlive a test that was killed (Check's timeout). */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(127);
        if (netns) {
                char path[128];

                (void)snprintf(path, sizeof(path), "/run/netns/%s", netns);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
                        fprintf(stderr, "harness: cannot enter network namespace %s: %s\n", netns,
                                strerror(errno));
                        _exit(127);
                }
                safe_close(fd);
        }
        fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
                (void)dup2(fd, STDOUT_FILENO);
                (void)dup2(fd, STDERR_FILENO);
        }
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
                (void)dup2(fd, STDIN_FILENO);
        execvp(bin, argv);
        fprintf(stderr, "harness: cannot execute %s: %s\n", bin, strerror(errno));
        _exit(127);
}

int harness_daemon_startv(HarnessDaemon *d, const char *const *extra_args)
{
        return harness_daemon_start_opts(d, &(HarnessStartOptions){.extra_args = extra_args});
}

int harness_daemon_start_opts(HarnessDaemon *d, const HarnessStartOptions *o)
{
        const char *const *extra_args = o->extra_args;
        const char *bin = getenv("KVDISTD");
        char *argv[HARNESS_MAX_ARGS];
        size_t n = 0;
        uint64_t deadline;
        pid_t parent = getpid(), pid;
        int r;

        memset(d, 0, sizeof(*d));
        if (!bin || !bin[0]) {
                fprintf(stderr, "harness: $KVDISTD is not set (run the tests with meson test)\n");
                return -ENOENT;
        }
        (void)snprintf(d->dir, sizeof(d->dir), "/tmp/kvdist-it-XXXXXX");
        if (!mkdtemp(d->dir))
                return -errno;
        (void)snprintf(d->socket_path, sizeof(d->socket_path), "%s/kvdist.sock", d->dir);
        (void)snprintf(d->log_path, sizeof(d->log_path), "%s/kvdistd.log", d->dir);
        d->options[0] = (kvd_option){"socket_path", d->socket_path};
        d->options[1] = (kvd_option){"device_id", "0"};
        d->n_options = 2;

        for (size_t i = 0; o->launcher && o->launcher[i]; i++) {
                if (n + 1 >= HARNESS_MAX_ARGS)
                        return -E2BIG;
                argv[n++] = strcmp(o->launcher[i], "@SOCKET@") == 0 ? d->socket_path
                                                                    : (char *)o->launcher[i];
        }
        argv[n++] = (char *)bin;
        argv[n++] = (char *)"--socket";
        argv[n++] = d->socket_path;
        argv[n++] = (char *)"--log-level";
        argv[n++] = (char *)"debug";
        for (size_t i = 0; extra_args && extra_args[i]; i++) {
                if (n + 1 >= HARNESS_MAX_ARGS)
                        return -E2BIG;
                argv[n++] = (char *)extra_args[i];
        }
        argv[n] = NULL;

        fflush(NULL);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0)
                exec_daemon(argv[0], argv, d->log_path, parent, o->env, o->netns);
        d->pid = pid;
        d->watcher_fd = -1;
        r = watcher_start(d);
        if (r < 0) {
                (void)harness_daemon_kill(d);
                return r;
        }

        /* As long as it takes the daemon to come up, however loaded the machine. */
        deadline = harness_now_ms() + (uint64_t)harness_wait_ms();
        for (;;) {
                int status;

                if (socket_accepts(d->socket_path))
                        return 0;
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        fprintf(stderr, "harness: kvdistd exited during start-up (%d); its log:\n",
                                wait_status_to_code(status));
                        d->pid = 0;
                        watcher_stop(d);
                        harness_daemon_dump_log(d, HARNESS_LOG_TAIL);
                        return -ECHILD;
                }
                if (harness_now_ms() >= deadline) {
                        fprintf(stderr, "harness: kvdistd did not accept on %s within %d ms\n",
                                d->socket_path, harness_wait_ms());
                        harness_daemon_dump_log(d, HARNESS_LOG_TAIL);
                        (void)harness_daemon_kill(d);
                        return -ETIMEDOUT;
                }
                harness_sleep_ms(10);
        }
}

int harness_daemon_start(HarnessDaemon *d, ...)
{
        const char *args[HARNESS_MAX_ARGS];
        size_t n = 0;
        const char *a;
        va_list ap;

        va_start(ap, d);
        while ((a = va_arg(ap, const char *)) && n + 1 < HARNESS_MAX_ARGS)
                args[n++] = a;
        va_end(ap);
        args[n] = NULL;
        return harness_daemon_startv(d, args);
}

/* A sanitizer report in the log fails the run even when the daemon exited 0. */
static int check_log_clean(const HarnessDaemon *d)
{
        if (!harness_daemon_log_contains(d, "Sanitizer") &&
            !harness_daemon_log_contains(d, "runtime error:"))
                return 0;
        fprintf(stderr, "harness: kvdistd (%s) reported a sanitizer error; its log:\n",
                d->socket_path);
        harness_daemon_dump_log(d, HARNESS_LOG_TAIL);
        return -EUCLEAN;
}

int harness_daemon_stop(HarnessDaemon *d)
{
        int status, r;

        if (d->pid <= 0)
                return -ESRCH;
        if (kill(d->pid, SIGTERM) < 0)
                return -errno;
        r = wait_pid(d->pid, harness_wait_ms(), &status);
        if (r == -ETIMEDOUT) {
                fprintf(stderr, "harness: kvdistd (pid %d) ignored SIGTERM for %d ms, killing\n",
                        (int)d->pid, harness_wait_ms());
                (void)kill(d->pid, SIGKILL);
                r = wait_pid(d->pid, -1, &status);
        }
        if (r < 0)
                return r;
        d->pid = 0;
        watcher_stop(d);
        r = check_log_clean(d);
        if (r < 0)
                return r;
        return wait_status_to_code(status);
}

int harness_daemon_kill(HarnessDaemon *d)
{
        int status, r;

        if (d->pid <= 0)
                return -ESRCH;
        if (kill(d->pid, SIGKILL) < 0)
                return -errno;
        r = wait_pid(d->pid, -1, &status);
        if (r < 0)
                return r;
        d->pid = 0;
        watcher_stop(d);
        return check_log_clean(d);
}

bool harness_daemon_alive(HarnessDaemon *d)
{
        int status;

        if (d->pid <= 0)
                return false;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                fprintf(stderr, "harness: kvdistd (pid %d) exited (%d)\n", (int)d->pid,
                        wait_status_to_code(status));
                d->pid = 0;
                watcher_stop(d);
                return false;
        }
        return true;
}

void harness_daemon_cleanup(HarnessDaemon *d)
{
        if (d->pid > 0)
                (void)harness_daemon_kill(d);
        watcher_stop(d);
        /* KVDIST_TEST_KEEP_LOGS=1 keeps every daemon's log, for reading after the test. */
        if (d->dir[0]) {
                (void)unlink(d->socket_path);
                if (!getenv("KVDIST_TEST_KEEP_LOGS")) {
                        (void)unlink(d->log_path);
                        (void)rmdir(d->dir);
                }
        }
        memset(d, 0, sizeof(*d));
}

void harness_daemon_dump_log(const HarnessDaemon *d, size_t max_bytes)
{
        _cleanup_close_ int fd = -1;
        char buf[4096];
        struct stat st;
        ssize_t n;

        if (!d->log_path[0])
                return;
        fd = open(d->log_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0)
                return;
        if (max_bytes > 0 && (size_t)st.st_size > max_bytes) {
                (void)lseek(fd, st.st_size - (off_t)max_bytes, SEEK_SET);
                fprintf(stderr, "[... %lld bytes of %s left out ...]\n",
                        (long long)st.st_size - (long long)max_bytes, d->log_path);
        }
        fflush(stderr);
        while ((n = read(fd, buf, sizeof(buf))) > 0)
                if (write(STDERR_FILENO, buf, (size_t)n) < 0)
                        break;
}

bool harness_daemon_log_contains(const HarnessDaemon *d, const char *needle)
{
        _cleanup_free_ char *text = NULL;
        FILE *f;
        size_t n;
        struct stat st;
        bool found;

        f = fopen(d->log_path, "re");
        if (!f)
                return false;
        if (fstat(fileno(f), &st) < 0 || !(text = malloc((size_t)st.st_size + 1))) {
                fclose(f);
                return false;
        }
        n = fread(text, 1, (size_t)st.st_size, f);
        fclose(f);
        text[n] = '\0';
        found = strstr(text, needle) != NULL;
        return found;
}

int harness_client_init(const HarnessDaemon *d, uint64_t cluster_id, kvd_role role,
                        kvd_client **ret)
{
        return kvd_client_init(cluster_id, role, d->options, d->n_options, ret);
}

int harness_server_init(const HarnessDaemon *d, uint64_t cluster_id, kvd_role role,
                        const char *listen_ip_info, kvd_client **ret)
{
        kvd_option options[ARRAY_SIZE(d->options) + 1];

        memcpy(options, d->options, d->n_options * sizeof(options[0]));
        options[d->n_options] = (kvd_option){"listen_ip_info", listen_ip_info};
        return kvd_client_init(cluster_id, role, options, d->n_options + 1, ret);
}

int harness_daemon_status(const HarnessDaemon *d, char **ret_json)
{
        kvd_client *c = NULL;
        int r;

        r = kvd_client_connect(d->options, 1, &c);
        if (r < 0)
                return r;
        r = kvd_daemon_status(c, ret_json);
        (void)kvd_client_finalize(c);
        return r;
}

/* Patterns. */

static uint64_t pattern_word(uint64_t seed, uint64_t index)
{
        uint64_t x = seed ^ ((index + 1) * UINT64_C(0x9e3779b97f4a7c15));

        /* xorshift64*, twice, so neighbouring words of one stream share no visible structure */
        for (int i = 0; i < 2; i++) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                x *= UINT64_C(0x2545f4914f6cdd1d);
        }
        return x;
}

uint8_t harness_pattern_byte(uint64_t seed, uint64_t offset)
{
        return (uint8_t)(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

void harness_fill_pattern_at(void *buf, size_t len, uint64_t seed, uint64_t offset)
{
        uint8_t *p = buf;
        size_t i = 0;

        while (i < len && (offset + i) % 8 != 0) {
                p[i] = harness_pattern_byte(seed, offset + i);
                i++;
        }
        for (; i + 8 <= len; i += 8) {
                uint64_t w = pattern_word(seed, (offset + i) / 8);

                /* Little-endian byte order, whatever the host's, to match pattern_byte(). */
                for (int b = 0; b < 8; b++)
                        p[i + (size_t)b] = (uint8_t)(w >> (8 * b));
        }
        for (; i < len; i++)
                p[i] = harness_pattern_byte(seed, offset + i);
}

void harness_fill_pattern(void *buf, size_t len, uint64_t seed)
{
        harness_fill_pattern_at(buf, len, seed, 0);
}

ssize_t harness_check_pattern_at(const void *buf, size_t len, uint64_t seed, uint64_t offset)
{
        const uint8_t *p = buf;
        size_t i = 0;

        while (i < len && (offset + i) % 8 != 0) {
                if (p[i] != harness_pattern_byte(seed, offset + i))
                        return (ssize_t)i;
                i++;
        }
        for (; i + 8 <= len; i += 8) {
                uint64_t w = pattern_word(seed, (offset + i) / 8);

                for (int b = 0; b < 8; b++)
                        if (p[i + (size_t)b] != (uint8_t)(w >> (8 * b)))
                                return (ssize_t)(i + (size_t)b);
        }
        for (; i < len; i++)
                if (p[i] != harness_pattern_byte(seed, offset + i))
                        return (ssize_t)i;
        return -1;
}

ssize_t harness_check_pattern(const void *buf, size_t len, uint64_t seed)
{
        return harness_check_pattern_at(buf, len, seed, 0);
}

/* Forked clients. */

int harness_fork_client(harness_child_fn fn, void *arg, HarnessChild *ret)
{
        int pipefd[2];
        pid_t pid;

        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                int r = -errno;

                safe_close(pipefd[0]);
                safe_close(pipefd[1]);
                return r;
        }
        if (pid == 0) {
                safe_close(pipefd[0]);
                child_ready_fd = pipefd[1];
                /* A child must not outlive its test either. */
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                _exit(fn(arg) & 0xff);
        }
        safe_close(pipefd[1]);
        *ret = (HarnessChild){.pid = pid, .ready_fd = pipefd[0], .status = -1};
        return 0;
}

void harness_child_ready(uint64_t value)
{
        if (child_ready_fd < 0)
                return;
        if (write(child_ready_fd, &value, sizeof(value)) != (ssize_t)sizeof(value))
                _exit(126);
}

int harness_child_wait_ready(HarnessChild *c, int timeout_ms, uint64_t *ret_value)
{
        struct pollfd pfd = {.fd = c->ready_fd, .events = POLLIN};
        uint64_t value;
        ssize_t n;
        int r;

        do
                r = poll(&pfd, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        if (r == 0)
                return -ETIMEDOUT;
        n = read(c->ready_fd, &value, sizeof(value));
        if (n == 0)
                return -EPIPE;
        if (n != (ssize_t)sizeof(value))
                return n < 0 ? -errno : -EBADMSG;
        if (ret_value)
                *ret_value = value;
        return 0;
}

int harness_child_wait(HarnessChild *c, int timeout_ms)
{
        int status, r;

        if (c->pid <= 0)
                return c->status;
        r = wait_pid(c->pid, timeout_ms, &status);
        if (r < 0)
                return r;
        c->pid = 0;
        c->ready_fd = safe_close(c->ready_fd);
        c->status = wait_status_to_code(status);
        return c->status;
}

int harness_child_kill(HarnessChild *c, int sig)
{
        if (c->pid > 0 && kill(c->pid, sig) < 0)
                return -errno;
        return harness_child_wait(c, -1);
}

/* Raw frames. */

int harness_raw_connect(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;

                safe_close(fd);
                return r;
        }
        return fd;
}

int harness_raw_send(int fd, const void *buf, size_t len, const int *fds, size_t n_fds)
{
        const uint8_t *p = buf;
        size_t off = 0;

        while (off < len) {
                ssize_t n = frame_sendmsg(fd, p + off, len - off, off == 0 ? fds : NULL,
                                          off == 0 ? n_fds : 0);

                if (n == -EINTR)
                        continue;
                if (n < 0)
                        return (int)n;
                off += (size_t)n;
        }
        return 0;
}

int harness_raw_send_frame(int fd, uint16_t type, uint16_t flags, uint64_t request_id,
                           const ProtobufCMessage *msg, const int *fds, size_t n_fds)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r;

        r = frame_pack(type, flags, request_id, (uint16_t)n_fds, msg, UINT32_MAX, &buf, &len);
        if (r < 0)
                return r;
        return harness_raw_send(fd, buf, len, fds, n_fds);
}

void harness_frame_deinit(HarnessFrame *f)
{
        free(f->payload);
        f->payload = NULL;
        for (size_t i = 0; i < f->n_fds; i++)
                safe_close(f->fds[i]);
        f->n_fds = 0;
}

/* Reads exactly @len bytes by @deadline: 1, 0 at EOF/reset, -ETIMEDOUT. */
static int read_full(int fd, uint8_t *buf, size_t len, uint64_t deadline, int *fds, size_t max_fds,
                     size_t *n_fds)
{
        size_t off = 0;

        while (off < len) {
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                uint64_t now = harness_now_ms();
                size_t got = 0;
                ssize_t n;
                int r;

                if (now >= deadline)
                        return -ETIMEDOUT;
                r = poll(&pfd, 1, (int)MIN(deadline - now, (uint64_t)INT32_MAX));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        return -ETIMEDOUT;
                n = frame_recvmsg(fd, buf + off, len - off, fds ? fds + *n_fds : NULL,
                                  fds ? max_fds - *n_fds : 0, &got);
                if (n == -EINTR || n == -EAGAIN)
                        continue;
                if (n == 0 || n == -ECONNRESET)
                        return 0;
                if (n < 0)
                        return (int)n;
                if (fds)
                        *n_fds += got;
                off += (size_t)n;
        }
        return 1;
}

int harness_raw_read_frame(int fd, int timeout_ms, HarnessFrame *ret)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)MAX(timeout_ms, 0);
        uint8_t header[FRAME_HEADER_SIZE];
        HarnessFrame f = {};
        int r;

        r = read_full(fd, header, sizeof(header), deadline, f.fds, FRAME_MAX_FDS, &f.n_fds);
        if (r <= 0) {
                harness_frame_deinit(&f);
                return r;
        }
        r = frame_header_decode(header, UINT32_MAX, &f.h);
        if (r < 0) {
                harness_frame_deinit(&f);
                return r;
        }
        if (f.h.length > 0) {
                f.payload = malloc(f.h.length);
                if (!f.payload) {
                        harness_frame_deinit(&f);
                        return -ENOMEM;
                }
                r = read_full(fd, f.payload, f.h.length, deadline, NULL, 0, NULL);
                if (r <= 0) {
                        harness_frame_deinit(&f);
                        return r;
                }
        }
        *ret = f;
        return 1;
}

/* Every reply message starts with its Status (field 1). */
typedef struct AnyReply {
        ProtobufCMessage base;
        Kvdist__V1__Status *status;
} AnyReply;

int harness_frame_unpack_reply(const HarnessFrame *f, ProtobufCMessage **ret)
{
        const FrameType *ft = frame_type_lookup(f->h.type);

        if (!ft || !ft->reply)
                return -EBADMSG;
        return frame_unpack(ft->reply, f->payload, f->h.length, ret);
}

int harness_frame_status(const HarnessFrame *f, int *ret_code, char *detail, size_t size)
{
        ProtobufCMessage *msg = NULL;
        const Kvdist__V1__Status *st;
        int r;

        if (f->h.flags & FRAME_FLAG_ERROR) {
                r = frame_unpack(&kvdist__v1__status__descriptor, f->payload, f->h.length, &msg);
                if (r < 0)
                        return r;
                st = (const Kvdist__V1__Status *)msg;
        } else {
                r = harness_frame_unpack_reply(f, &msg);
                if (r < 0)
                        return r;
                st = ((const AnyReply *)msg)->status;
        }
        *ret_code = st ? st->code : 0;
        if (detail && size > 0)
                (void)snprintf(detail, size, "%s", st && st->detail ? st->detail : "");
        protobuf_c_message_free_unpacked(msg, NULL);
        return 0;
}

int harness_raw_hello(int fd)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        HarnessFrame f;
        int code, r;

        hello.protocol_version = FRAME_VERSION;
        hello.identity = (char *)"kvdist-harness";
        r = harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, &hello.base, NULL, 0);
        if (r < 0)
                return r;
        r = harness_raw_read_frame(fd, harness_wait_ms(), &f);
        if (r == 0)
                return -ECONNRESET;
        if (r < 0)
                return r;
        if (f.h.type != KVDIST__V1__MSG_TYPE__MSG_HELLO || !(f.h.flags & FRAME_FLAG_REPLY))
                r = -EBADMSG;
        else
                r = harness_frame_status(&f, &code, NULL, 0);
        harness_frame_deinit(&f);
        if (r < 0)
                return r;
        return code == KVD_OK ? 0 : -EPROTO;
}

int harness_raw_wait_closed(int fd, int timeout_ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)MAX(timeout_ms, 0);

        for (;;) {
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                uint64_t now = harness_now_ms();
                uint8_t buf[4096];
                ssize_t n;
                int r;

                if (now >= deadline)
                        return 0;
                r = poll(&pfd, 1, (int)(deadline - now));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return 0;
                n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return 1;
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return 1;
        }
}

/* Commands. */

/* Appends what @fd has to @buf; 0 at EOF, 1 when more may come. */
static int drain(int fd, char **buf, size_t *len)
{
        char chunk[4096];
        ssize_t n;
        char *nb;

        n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return 1;
        if (n <= 0)
                return 0;
        nb = realloc(*buf, *len + (size_t)n + 1);
        if (!nb)
                return 0;
        memcpy(nb + *len, chunk, (size_t)n);
        *len += (size_t)n;
        nb[*len] = '\0';
        *buf = nb;
        return 1;
}

int harness_run(const char *const *argv, char **ret_stdout, char **ret_stderr)
{
        int out[2], err[2], status, r;
        char *obuf = NULL, *ebuf = NULL;
        size_t olen = 0, elen = 0;
        bool o_open = true, e_open = true;
        pid_t pid;

        if (pipe2(out, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(err, O_CLOEXEC) < 0) {
                r = -errno;
                safe_close(out[0]);
                safe_close(out[1]);
                return r;
        }
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                r = -errno;
                safe_close(out[0]);
                safe_close(out[1]);
                safe_close(err[0]);
                safe_close(err[1]);
                return r;
        }
        if (pid == 0) {
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                (void)dup2(out[1], STDOUT_FILENO);
                (void)dup2(err[1], STDERR_FILENO);
                execv(argv[0], (char *const *)argv);
                fprintf(stderr, "harness: cannot execute %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        safe_close(out[1]);
        safe_close(err[1]);
        obuf = strdup("");
        ebuf = strdup("");
        while (o_open || e_open) {
                struct pollfd pfd[2] = {
                        {.fd = o_open ? out[0] : -1, .events = POLLIN},
                        {.fd = e_open ? err[0] : -1, .events = POLLIN},
                };

                if (poll(pfd, 2, -1) < 0 && errno != EINTR)
                        break;
                if (o_open && pfd[0].revents)
                        o_open = drain(out[0], &obuf, &olen);
                if (e_open && pfd[1].revents)
                        e_open = drain(err[0], &ebuf, &elen);
        }
        safe_close(out[0]);
        safe_close(err[0]);
        r = wait_pid(pid, -1, &status);
        if (r < 0 || !obuf || !ebuf) {
                free(obuf);
                free(ebuf);
                return r < 0 ? r : -ENOMEM;
        }
        if (ret_stdout)
                *ret_stdout = obuf;
        else
                free(obuf);
        if (ret_stderr)
                *ret_stderr = ebuf;
        else
                free(ebuf);
        return wait_status_to_code(status);
}

long harness_proc_mapped_kib(pid_t pid, const char *name)
{
        char path[64], line[512];
        bool matching = false;
        long sum = 0;
        FILE *f;

        (void)snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                unsigned long start, end;

                /* a mapping's first line: "start-end perms offset dev inode [path]" */
                if (sscanf(line, "%lx-%lx ", &start, &end) == 2)
                        matching = strstr(line, name) != NULL;
                else if (matching && strncmp(line, "Rss:", 4) == 0)
                        sum += strtol(line + 4, NULL, 10);
        }
        fclose(f);
        return sum;
}

/* Reads the name and the nice value (field 19) of /proc/@pid/task/@tid/stat. */
static int proc_thread_read(pid_t pid, pid_t tid, HarnessThread *t)
{
        char path[96], buf[512], *open_paren, *close_paren, *p;
        ssize_t n;
        int fd, r;

        (void)snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        r = n < 0 ? -errno : n == 0 ? -EIO : 0;
        close(fd);
        if (r < 0)
                return r;
        buf[n] = '\0';
        /* "TID (COMM) STATE ...": COMM may hold blanks and parentheses, the last ')' ends it */
        open_paren = strchr(buf, '(');
        close_paren = strrchr(buf, ')');
        if (!open_paren || !close_paren || close_paren < open_paren)
                return -EIO;
        t->tid = tid;
        (void)snprintf(t->comm, sizeof(t->comm), "%.*s", (int)(close_paren - open_paren - 1),
                       open_paren + 1);
        /* p at the blank before field 3 (state); each step to the blank before the next field */
        p = close_paren + 1;
        for (int field = 3; field < 19; field++) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return -EIO;
        }
        t->nice = (int)strtol(p + 1, NULL, 10);
        return 0;
}

int harness_proc_threads(pid_t pid, HarnessThread *ret, size_t max)
{
        char path[64];
        struct dirent *de;
        size_t n = 0;
        DIR *dir;

        (void)snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        dir = opendir(path);
        if (!dir)
                return -errno;
        while (n < max && (de = readdir(dir)))
                if (de->d_name[0] != '.' &&
                    proc_thread_read(pid, (pid_t)strtol(de->d_name, NULL, 10), &ret[n]) == 0)
                        n++;
        closedir(dir);
        return (int)n;
}

long harness_proc_status_kib(pid_t pid, const char *field)
{
        char path[64], line[256];
        size_t flen = strlen(field);
        long v = -ENOENT;
        FILE *f;

        (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
                        v = strtol(line + flen + 1, NULL, 10);
                        break;
                }
        fclose(f);
        return v;
}
