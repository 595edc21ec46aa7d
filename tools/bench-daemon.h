/* SPDX-License-Identifier: MIT */
/* kvdist-bench daemons: a kvdistd the benchmark starts on a private socket, and stops. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* A kvdistd this process started, in its own temporary directory. */
typedef struct BenchDaemon {
        pid_t pid;
        char dir[PATH_MAX - 32];
        char socket[PATH_MAX];
        char key_path[PATH_MAX];    /* "" when it has no cluster key */
        char config_path[PATH_MAX]; /* "" when it has no config file (RDMA device map) */
        char log_path[PATH_MAX];    /* its stdout and stderr */
        char peer_listen[64];       /* "127.0.0.1:40123"; "" when it does not listen */
} BenchDaemon;

typedef struct BenchDaemonOptions {
        const char *path; /* the kvdistd to run */
        uint64_t copy_threads;
        const char *listen;      /* --listen, e.g. "127.0.0.1:0"; NULL: no peers */
        const char *cluster_key; /* written to a 0600 file for --cluster-key-file; NULL */
        uint64_t tcp_streams;    /* 0: the daemon's default */
        int tcp_crc;             /* -1: the daemon's default, else off (0) or on (1) */
        const char *rdma_device; /* device_id 0 on this RDMA device (transport rdma) */
} BenchDaemonOptions;

/*
 * The kvdistd to start: @arg, else $KVDISTD, else the build tree's daemon/kvdistd beside this
 * program's tools/ directory, else "kvdistd" on $PATH. Returns a malloc()ed path, NULL without
 * memory.
 */
char *bench_daemon_find(const char *arg);

/*
 * Starts a kvdistd on a socket in a new temporary directory and waits until it answers; with
 * @o->listen, reads the address it accepts peers on. On failure @d holds what must still be
 * removed: call bench_daemon_stop() either way. -ECHILD when the daemon exited, -ETIMEDOUT when
 * it never answered, -EPROTO when its status names no peer address, or a negative errno.
 */
int bench_daemon_start(const BenchDaemonOptions *o, BenchDaemon *d);

/*
 * Stops the daemon (SIGTERM, SIGKILL after a grace period) and removes its directory. Its log
 * goes to stderr when @show_log, or when it did not exit with status 0; that returns -ECHILD: a
 * crash is a finding too. Safe on a zeroed or partly started @d.
 */
int bench_daemon_stop(BenchDaemon *d, bool show_log);
