/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's network baselines over loopback: one iperf3 test, its JSON report parsed, or
 * one ucx_perftest tag_bw test, its final line parsed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench-iperf3.h"
#include "common/macro.h"
#include "common/time-util.h"

#define SERVER_START_MS 5000
#define SERVER_EXIT_MS 5000
#define PORT_TRIES 3
#define REPORT_MAX (4u << 20)

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE, fclose);

int bench_iperf3_find(const char *name, char **ret_path)
{
        const char *path = getenv("PATH");
        _cleanup_free_ char *dirs = NULL;
        char *save = NULL;

        if (strchr(name, '/')) {
                if (access(name, X_OK) < 0)
                        return -ENOENT;
                *ret_path = strdup(name);
                return *ret_path ? 0 : -ENOMEM;
        }
        dirs = strdup(path && path[0] ? path : "/usr/local/bin:/usr/bin:/bin");
        if (!dirs)
                return -ENOMEM;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                char *p = NULL;

                if (asprintf(&p, "%s/%s", d, name) < 0)
                        return -ENOMEM;
                if (access(p, X_OK) == 0) {
                        *ret_path = p;
                        return 0;
                }
                free(p);
        }
        return -ENOENT;
}

/* A port on 127.0.0.1 that nothing holds right now (the kernel's choice of an ephemeral one). */
static int free_port(uint16_t *ret)
{
        struct sockaddr_in sa = {
                .sin_family = AF_INET,
                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
        };
        socklen_t len = sizeof(sa);
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                return -errno;
        *ret = ntohs(sa.sin_port);
        return 0;
}

/* Whether a TCP socket listens on 127.0.0.1:@port (/proc/net/tcp; connecting would be a test). */
static bool port_listening(uint16_t port)
{
        _cleanup_(fclosep) FILE *f = fopen("/proc/net/tcp", "re");
        char line[256];
        unsigned addr, p, state;

        if (!f)
                return false;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, " %*u: %x:%x %*x:%*x %x", &addr, &p, &state) == 3 && p == port &&
                    state == 0x0A && (addr == htonl(INADDR_LOOPBACK) || addr == 0))
                        return true;
        return false;
}

/* Forks and runs @argv with stdout on @out_fd (/dev/null when -1); stderr stays ours. */
static int spawn(char *const *argv, int out_fd, pid_t *ret_pid)
{
        pid_t pid;

        (void)fflush(NULL);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int fd = out_fd >= 0 ? out_fd : open("/dev/null", O_WRONLY | O_CLOEXEC);

                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
                        _exit(127);
                execv(argv[0], argv);
                fprintf(stderr, "kvdist-bench: cannot run %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        *ret_pid = pid;
        return 0;
}

/* Waits up to @ms for @pid, then kills it. Returns its wait status, or -1 if it was killed. */
static int reap(pid_t pid, unsigned ms)
{
        int status = 0;

        for (unsigned waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited++) {
                if (waited >= ms) {
                        (void)kill(pid, SIGKILL);
                        (void)waitpid(pid, NULL, 0);
                        return -1;
                }
                (void)usleep(1000);
        }
        return status;
}

/*
 * Starts the one-test server on a free port; tries other ports if one was taken meanwhile.
 * iperf3's, or with @ucx ucx_perftest's.
 */
static int server_start(const char *path, bool ucx, pid_t *ret_pid, uint16_t *ret_port)
{
        for (unsigned attempt = 0; attempt < PORT_TRIES; attempt++) {
                char port_s[8];
                char *iperf3_argv[] = {(char *)path, "-s", "-1",   "-B",
                                       "127.0.0.1",  "-p", port_s, NULL};
                char *ucx_argv[] = {(char *)path, "-p", port_s, NULL};
                char **argv = ucx ? ucx_argv : iperf3_argv;
                uint16_t port = 0;
                pid_t pid;
                int r;

                r = free_port(&port);
                if (r < 0)
                        return r;
                (void)snprintf(port_s, sizeof(port_s), "%u", port);
                r = spawn(argv, -1, &pid);
                if (r < 0)
                        return r;
                for (unsigned waited = 0; waited < SERVER_START_MS; waited++) {
                        if (port_listening(port)) {
                                *ret_pid = pid;
                                *ret_port = port;
                                return 0;
                        }
                        if (waitpid(pid, NULL, WNOHANG) == pid) {
                                pid = 0;
                                break;
                        }
                        (void)usleep(1000);
                }
                if (pid > 0) {
                        (void)kill(pid, SIGKILL);
                        (void)waitpid(pid, NULL, 0);
                        return -ETIMEDOUT;
                }
        }
        fprintf(stderr, "kvdist-bench: %s server exited %u times before it listened\n",
                ucx ? "ucx_perftest" : "iperf3 -s", PORT_TRIES);
        return -EIO;
}

/* Reads the client's report until EOF, or until @deadline (CLOCK_MONOTONIC usec). */
static int read_report(int fd, usec_t deadline, char **ret)
{
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, size = 0;

        for (;;) {
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                usec_t now = now_usec(CLOCK_MONOTONIC);
                ssize_t n;

                if (now >= deadline)
                        return -ETIMEDOUT;
                if (poll(&pfd, 1, (int)((deadline - now) / 1000 + 1)) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (len + 1 >= size) {
                        char *p;

                        if (size >= REPORT_MAX)
                                return -EMSGSIZE;
                        size = size ? size * 2 : 16384;
                        p = realloc(buf, size);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                }
                n = read(fd, buf + len, size - len - 1);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        if (!buf)
                return -EIO;
        buf[len] = '\0';
        *ret = TAKE_PTR(buf);
        return 0;
}

/* end.sum_received.bits_per_second of a client's --json report, in GB/s. */
static int parse_report(const char *text, double *ret_gbps)
{
        json_error_t jerr;
        json_t *root = json_loads(text, 0, &jerr), *err, *bps;
        int r = -EIO;

        if (!root) {
                fprintf(stderr, "kvdist-bench: iperf3's report is not JSON: %s (line %d)\n",
                        jerr.text, jerr.line);
                return -EIO;
        }
        err = json_object_get(root, "error");
        bps = json_object_get(json_object_get(json_object_get(root, "end"), "sum_received"),
                              "bits_per_second");
        if (json_is_string(err))
                fprintf(stderr, "kvdist-bench: iperf3: %s\n", json_string_value(err));
        else if (!json_is_number(bps) || json_number_value(bps) <= 0)
                fprintf(stderr, "kvdist-bench: iperf3's report has no "
                                "end.sum_received.bits_per_second\n");
        else {
                *ret_gbps = json_number_value(bps) / 8e9;
                r = 0;
        }
        json_decref(root);
        return r;
}

/*
 * Runs the client @argv against @server, a server started for one test, and reads what the
 * client prints until it exits or @deadline passes; reaps both in every case. On success
 * *ret_report is the client's output (the caller frees it) and *ret_ok whether the client
 * exited 0.
 */
static int client_run(char **argv, pid_t server, usec_t deadline, char **ret_report, bool *ret_ok)
{
        _cleanup_free_ char *report = NULL;
        _cleanup_close_ int out = -1;
        int pipefd[2], status, r;
        pid_t client;
        bool ok;

        if (pipe2(pipefd, O_CLOEXEC) < 0) {
                r = -errno;
                (void)reap(server, 0);
                return r;
        }
        out = pipefd[0];
        r = spawn(argv, pipefd[1], &client);
        (void)close(pipefd[1]);
        if (r < 0) {
                (void)reap(server, 0);
                return r;
        }
        r = read_report(out, deadline, &report);
        status = reap(client, r == -ETIMEDOUT ? 0 : SERVER_EXIT_MS);
        ok = r == 0 && status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        /* The server exits after its one test; after a failed test it may wait on. */
        (void)reap(server, ok ? SERVER_EXIT_MS : 0);
        if (r < 0)
                return r;
        *ret_report = TAKE_PTR(report);
        *ret_ok = ok;
        return 0;
}

int bench_iperf3_run(const char *path, unsigned seconds, unsigned streams, unsigned timeout_ms,
                     double *ret_gbps)
{
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + (usec_t)timeout_ms * USEC_PER_MSEC;
        char port_s[8], seconds_s[12], streams_s[12];
        char *argv[] = {(char *)path, "-c", "127.0.0.1", "-p",     port_s, "-t",
                        seconds_s,    "-P", streams_s,   "--json", NULL};
        _cleanup_free_ char *report = NULL;
        pid_t server;
        uint16_t port;
        bool ok;
        int r;

        if (seconds == 0)
                return -EINVAL;
        r = server_start(path, false, &server, &port);
        if (r < 0)
                return r;
        (void)snprintf(port_s, sizeof(port_s), "%u", port);
        (void)snprintf(seconds_s, sizeof(seconds_s), "%u", seconds);
        (void)snprintf(streams_s, sizeof(streams_s), "%u", streams);
        r = client_run(argv, server, deadline, &report, &ok);
        if (r < 0)
                return r;
        r = parse_report(report, ret_gbps);
        if (r == 0 && !ok) {
                fprintf(stderr, "kvdist-bench: iperf3 -c reported a rate but failed\n");
                r = -EIO;
        }
        return r;
}

/* The overall bandwidth (MB/s, 2^20 bytes) of ucx_perftest's "Final:" line, in GB/s. */
static int parse_ucx_report(const char *text, double *ret_gbps)
{
        const char *line = strstr(text, "Final:");
        double lat50, lat_avg, lat_all, bw_avg, bw_all;
        unsigned long long n;

        if (!line ||
            sscanf(line, "Final: %llu %lf %lf %lf %lf %lf", &n, &lat50, &lat_avg, &lat_all, &bw_avg,
                   &bw_all) != 6 ||
            bw_all <= 0) {
                fprintf(stderr, "kvdist-bench: ucx_perftest printed no final bandwidth\n");
                return -EIO;
        }
        *ret_gbps = bw_all * 1048576.0 / 1e9;
        return 0;
}

int bench_ucx_run(const char *path, uint64_t msg_bytes, uint64_t messages, unsigned timeout_ms,
                  double *ret_gbps)
{
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + (usec_t)timeout_ms * USEC_PER_MSEC;
        char port_s[8], size_s[24], n_s[24];
        char *argv[] = {(char *)path, "127.0.0.1", "-p", port_s, "-t", "tag_bw",
                        "-s",         size_s,      "-n", n_s,    NULL};
        _cleanup_free_ char *report = NULL;
        pid_t server;
        uint16_t port;
        bool ok;
        int r;

        if (msg_bytes == 0 || messages == 0)
                return -EINVAL;
        /* TCP on loopback, as kvdist's TCP transport in the same suite; inherited by both */
        if (setenv("UCX_TLS", "tcp", 1) < 0 || setenv("UCX_NET_DEVICES", "lo", 1) < 0)
                return -errno;
        r = server_start(path, true, &server, &port);
        if (r < 0)
                return r;
        (void)snprintf(port_s, sizeof(port_s), "%u", port);
        (void)snprintf(size_s, sizeof(size_s), "%llu", (unsigned long long)msg_bytes);
        (void)snprintf(n_s, sizeof(n_s), "%llu", (unsigned long long)messages);
        r = client_run(argv, server, deadline, &report, &ok);
        if (r < 0)
                return r;
        r = parse_ucx_report(report, ret_gbps);
        if (r == 0 && !ok) {
                fprintf(stderr, "kvdist-bench: ucx_perftest reported a rate but failed\n");
                r = -EIO;
        }
        return r;
}
