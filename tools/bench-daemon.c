/* SPDX-License-Identifier: MIT */
/* kvdist-bench daemons: a kvdistd the benchmark starts on a private socket, and stops. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench-daemon.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"

#define DAEMON_START_MS 10000
#define DAEMON_STOP_MS 5000
#define DAEMON_MAX_ARGS 24

DEFINE_TRIVIAL_CLEANUP_FUNC(kvd_client, kvd_client_finalize);
DEFINE_TRIVIAL_CLEANUP_FUNC(FILE, fclose);

char *bench_daemon_find(const char *arg)
{
        const char *env = getenv("KVDISTD");
        char exe[PATH_MAX], *slash, *path = NULL;
        ssize_t n;

        if (arg || (env && env[0]))
                return strdup(arg ?: env);
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return strdup("kvdistd");
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash && asprintf(&path, "%.*s/../daemon/kvdistd", (int)(slash - exe), exe) >= 0 &&
            access(path, X_OK) == 0)
                return path;
        free(path);
        return strdup("kvdistd");
}

/* Writes @key (or any short text) to a new file only we can read. */
static int write_key(const char *path, const char *key)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        size_t len = strlen(key);

        if (fd < 0)
                return -errno;
        if (write(fd, key, len) != (ssize_t)len)
                return errno ? -errno : -EIO;
        return 0;
}

/* Reads "peer_listen" from the daemon's status document. */
static int read_peer_listen(kvd_client *c, BenchDaemon *d)
{
        _cleanup_free_ char *text = NULL;
        json_t *root, *v;
        int r = -EPROTO;

        if (kvd_daemon_status(c, &text) != KVD_OK)
                return -EIO;
        root = json_loads(text, 0, NULL);
        v = json_object_get(root, "peer_listen");
        if (json_is_string(v) && json_string_value(v)[0] &&
            strlen(json_string_value(v)) < sizeof(d->peer_listen)) {
                (void)snprintf(d->peer_listen, sizeof(d->peer_listen), "%s", json_string_value(v));
                r = 0;
        }
        json_decref(root);
        return r;
}

static _Noreturn void exec_daemon(const BenchDaemonOptions *o, const BenchDaemon *d)
{
        char threads[24], streams[24];
        const char *argv[DAEMON_MAX_ARGS];
        size_t k = 0;
        int fd;

        (void)snprintf(threads, sizeof(threads), "%" PRIu64, o->copy_threads);
        (void)snprintf(streams, sizeof(streams), "%" PRIu64, o->tcp_streams);
        argv[k++] = o->path;
        argv[k++] = "--socket";
        argv[k++] = d->socket;
        argv[k++] = "--memory-size";
        argv[k++] = "0";
        argv[k++] = "--copy-threads";
        argv[k++] = threads;
        argv[k++] = "--log-level";
        argv[k++] = "warning";
        if (o->listen) {
                argv[k++] = "--listen";
                argv[k++] = o->listen;
        }
        if (d->key_path[0]) {
                argv[k++] = "--cluster-key-file";
                argv[k++] = d->key_path;
        }
        if (o->tcp_streams > 0) {
                argv[k++] = "--tcp-streams";
                argv[k++] = streams;
        }
        if (o->tcp_crc >= 0) {
                argv[k++] = "--tcp-crc";
                argv[k++] = o->tcp_crc ? "on" : "off";
        }
        if (d->config_path[0]) {
                argv[k++] = "--config";
                argv[k++] = d->config_path;
        }
        argv[k] = NULL;

        /* Do not outlive a benchmark that dies. Its log is kept aside until it is wanted: the
         * warnings of a daemon stopped at the end (peers lost) are no news. */
        (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
        fd = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
                _exit(127);
        execvp(o->path, (char *const *)argv);
        fprintf(stderr, "kvdist-bench: cannot run %s: %s\n", o->path, strerror(errno));
        _exit(127);
}

int bench_daemon_start(const BenchDaemonOptions *o, BenchDaemon *d)
{
        const char *tmp = getenv("TMPDIR");
        kvd_option opt = {"socket_path", d->socket};
        int r;

        *d = (BenchDaemon){};
        (void)snprintf(d->dir, sizeof(d->dir), "%s/kvdist-bench.XXXXXX",
                       tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(d->dir)) {
                r = -errno;
                d->dir[0] = '\0';
                return r;
        }
        (void)snprintf(d->socket, sizeof(d->socket), "%s/kvdist.sock", d->dir);
        (void)snprintf(d->log_path, sizeof(d->log_path), "%s/kvdistd.log", d->dir);
        if (o->cluster_key) {
                (void)snprintf(d->key_path, sizeof(d->key_path), "%s/cluster.key", d->dir);
                r = write_key(d->key_path, o->cluster_key);
                if (r < 0)
                        return r;
        }
        if (o->rdma_device) {
                char cfg[256];

                (void)snprintf(cfg, sizeof(cfg),
                               "{\"devices\": [{\"device_id\": 0, \"transport\": \"rdma\", "
                               "\"rdma_device\": \"%.64s\"}]}\n",
                               o->rdma_device);
                (void)snprintf(d->config_path, sizeof(d->config_path), "%s/kvdistd.json", d->dir);
                r = write_key(d->config_path, cfg);
                if (r < 0)
                        return r;
        }
        (void)fflush(NULL);
        d->pid = fork();
        if (d->pid < 0) {
                r = -errno;
                d->pid = 0;
                return r;
        }
        if (d->pid == 0)
                exec_daemon(o, d);

        for (unsigned waited = 0; waited < DAEMON_START_MS; waited += 10) {
                _cleanup_(kvd_client_finalizep) kvd_client *c = NULL;

                if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
                        d->pid = 0;
                        return -ECHILD;
                }
                if (kvd_client_connect(&opt, 1, &c) == KVD_OK)
                        return o->listen ? read_peer_listen(c, d) : 0;
                (void)usleep(10 * 1000);
        }
        return -ETIMEDOUT;
}

static void show_log(const BenchDaemon *d)
{
        _cleanup_(fclosep) FILE *f = fopen(d->log_path, "re");
        char line[1024];

        if (!f)
                return;
        fprintf(stderr, "kvdist-bench: log of kvdistd on %s:\n", d->socket);
        while (fgets(line, sizeof(line), f))
                fprintf(stderr, "  | %s%s", line, strchr(line, '\n') ? "" : "\n");
}

int bench_daemon_stop(BenchDaemon *d, bool want_log)
{
        int status = 0, r = 0;

        if (d->pid > 0) {
                (void)kill(d->pid, SIGTERM);
                for (unsigned waited = 0; waitpid(d->pid, &status, WNOHANG) == 0; waited += 10) {
                        if (waited == DAEMON_STOP_MS)
                                (void)kill(d->pid, SIGKILL);
                        (void)usleep(10 * 1000);
                }
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        fprintf(stderr,
                                "kvdist-bench: kvdistd on %s did not exit cleanly "
                                "(%s %d)\n",
                                d->socket, WIFEXITED(status) ? "status" : "signal",
                                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                        r = -ECHILD;
                }
                d->pid = 0;
        }
        if (d->dir[0]) {
                if (want_log || r < 0)
                        show_log(d);
                (void)unlink(d->log_path);
                (void)unlink(d->socket);
                if (d->key_path[0])
                        (void)unlink(d->key_path);
                if (d->config_path[0])
                        (void)unlink(d->config_path);
                (void)rmdir(d->dir);
                d->dir[0] = '\0';
        }
        return r;
}
