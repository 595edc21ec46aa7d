/* SPDX-License-Identifier: MIT */
/* kvdist-bench: what a run is asked to do (Args, Workload) and what it measured (Result). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define IPERF3_RUNS 3         /* iperf3 tests per case, spread over its timed requests */
#define BENCH_MAX_INFLIGHT 16 /* --inflight */
/* --inflight: the timed requests of a stream at least, between the baselines' rounds */
#define BENCH_STREAM_CHUNK 10

typedef enum BaselineKind {
        BASELINE_MEMCPY, /* the bytes of a request copied by --copy-threads threads */
        BASELINE_IPERF3, /* iperf3 tests of whole seconds over loopback TCP */
        BASELINE_UNIX,   /* a small message's round trip over a Unix socket, after each request */
        BASELINE_UCX,    /* ucx_perftest tag_bw over TCP on loopback, the engine NIXL runs on */
        BASELINE_NONE,
        _BASELINE_MAX,
        _BASELINE_INVALID = -EINVAL,
} BaselineKind;

/* "memcpy", "iperf3", "unix", "ucx", "none" */
extern const char *const baseline_names[_BASELINE_MAX];

typedef struct Workload {
        char name[32];
        uint64_t block_size; /* bytes of one block of one tensor */
        uint64_t tensors;
        uint64_t blocks;      /* blocks per tensor in each cache */
        uint64_t pull_blocks; /* block ids in one request */
        bool scattered;
} Workload;

typedef struct Args {
        const char *daemon_path;
        const char *socket_path;
        const char *iperf3; /* --iperf3: a name on $PATH or a path */
        const char *ucx;    /* --ucx-perftest: a name on $PATH or a path */
        uint64_t copy_threads, iterations, warmup, seed, timeout_ms;
        uint64_t tcp_streams; /* --remote: data connections per peer */
        uint64_t iperf3_streams, iperf3_time;
        /* --layer-compute-us: a prefill computing layer after layer, each layer pushed (or
         * pulled) while the next computes; 0 without. */
        uint64_t layer_compute_us;
        bool probe_status; /* --probe-status: status calls on another connection meanwhile */
        uint64_t batch; /* --batch: each request is one kvd_transfer_batch() of this many entries */
        uint64_t inflight; /* --inflight: requests in flight at once (1: one after the other) */
        int tcp_crc;       /* --remote: CRC32C on data chunks (0 or 1) */
        const char *rdma_device; /* --remote: both daemons move blocks over this device */
        bool push, json, suite, remote;
        BaselineKind baseline;
        Workload w;
        /* Set up by main(): where each side attaches, and (remote) where its daemon listens. */
        const char *prefill_socket, *decode_socket;
        const char *prefill_addr, *decode_addr;
        /* The daemons this process started (the same one on one node); 0 with --socket. */
        pid_t prefill_pid, decode_pid;
        char *iperf3_path;
        char *ucx_path;
} Args;

typedef struct Result {
        Workload w;
        uint64_t bytes;    /* per request */
        uint64_t segments; /* copies after merging runs, as the daemon's planner counts */
        /* Rates over all timed iterations (total bytes / total time) and their medians. */
        double kvdist_gbps, kvdist_gbps_median;
        double baseline_gbps, baseline_gbps_median;
        /* The memcpy baseline's scattered twin: the request's own segments; 0 when not run. */
        double scattered_gbps, scattered_gbps_median;
        double requests_per_s;
        double lat_mean_us, lat_p50_us, lat_p99_us;
        /* The baseline's rounds (--baseline unix: its round trips). */
        double base_p50_us, base_p99_us;
        /* --layer-compute-us: layers, and p50/p99 of the exposed time (the last layer computed
         * -> every layer landed), of one layer's transfer alone and of the whole transfer
         * after prefill, each measured in every iteration. */
        uint64_t layers;
        double exposed_p50_us, exposed_p99_us;
        double layer_p50_us, layer_p99_us;
        double whole_p50_us, whole_p99_us;
        /* --probe-status: status calls answered while the timed requests ran */
        uint64_t status_calls;
        double status_p50_us, status_p99_us, status_max_us;
        /*
         * CPU time of each daemon's control loop (its main thread) per timed request, in us;
         * negative when unknown (a daemon not started here, no schedstat, --layer-compute-us).
         */
        double loop_cpu_prefill_us, loop_cpu_decode_us;
        /* --inflight: the timed streams' time in ns, and the median of their rates */
        double stream_ns, stream_gbps_median;
        /* --batch: how long kvd_transfer_batch() took to post the request (it returns once sent) */
        double post_p50_us, post_p99_us;
} Result;
