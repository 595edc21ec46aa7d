/* SPDX-License-Identifier: MIT */
/* kvdist-bench's command line: its options, their defaults and checks, and the standard suites. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench-args.h"
#include "tools/bench-memcpy.h"
#include "tools/bench-unix.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"

#define KIB UINT64_C(1024)
#define BLOCK_TOKENS 16  /* tokens per paged-attention block */
#define PROMPT_BLOCKS 32 /* one 512-token prompt */
#define MAX_COPY_THREADS BENCH_MEMCPY_MAX_THREADS
#define MAX_TCP_STREAMS 16 /* the daemon's limit for --tcp-streams */

typedef struct Model {
        const char *name;
        uint32_t layers, kv_heads, head_dim;
        uint64_t blocks; /* cache depth that keeps one side near 512 MiB */
} Model;

static const Model models[] = {
        {"llama3-8b", 32, 8, 128, 256},
        {"llama3-70b", 80, 8, 128, 128},
        {"qwen2.5-7b", 28, 4, 128, 512},
        {"mistral-7b", 32, 8, 128, 256},
};

static void help(void)
{
        printf("Usage: kvdist-bench [OPTIONS]\n"
               "\n"
               "Moves KV blocks from a prefill cluster (1) to a decode cluster (2) on one\n"
               "kvdistd, times it next to a plain memcpy of the same bytes, and checks every\n"
               "byte. With --remote the clusters are on two kvdistd linked over TCP on loopback,\n"
               "and the baseline is iperf3's rate over the same loopback. Under each case, the\n"
               "CPU time a request took on the control loop of each daemon it started (its\n"
               "main thread's, from /proc; a --daemon wrapper must exec kvdistd).\n"
               "Exit status: 0 ok, 1 a call failed, bytes landed wrong or kvdistd crashed,\n"
               "2 usage, 3 iperf3 missing or failed (nothing to compare with).\n"
               "\n"
               "  --daemon PATH      kvdistd to start (default: $KVDISTD, then ../daemon/kvdistd\n"
               "                     beside this program's directory, then kvdistd on $PATH)\n"
               "  --socket PATH      use a running daemon instead of starting one\n"
               "  --remote           start two daemons listening on 127.0.0.1 (one per cluster)\n"
               "                     and link the clusters across them\n"
               "  --tcp-streams N    --remote: data connections per peer, 1..%d (4)\n"
               "  --tcp-crc on|off   --remote: CRC32C over every data chunk (off)\n"
               "  --rdma-device DEV  --remote: both daemons move the blocks by RDMA READ/WRITE\n"
               "                     over DEV (device_id 0 mapped to it, transport rdma)\n"
               "  --baseline B       memcpy (default on one node; after each timed request a\n"
               "                     sequential copy of its bytes and a scattered one of its\n"
               "                     segments), iperf3 (default with --remote), unix (a\n"
               "                     %d-byte Unix socket round trip after each request: for\n"
               "                     small calls, the latencies compared), ucx (ucx_perftest\n"
               "                     tag_bw, with --remote) or none\n"
               "  --iperf3 PATH      the iperf3 to run (default: iperf3 on $PATH)\n"
               "  --ucx-perftest PATH  --baseline ucx: the ucx_perftest to run (default:\n"
               "                     ucx_perftest on $PATH; Debian package ucx-utils); its\n"
               "                     tag_bw over TCP on loopback, messages of the request's\n"
               "                     segments up to 1 MiB, %d tests per case\n"
               "  --iperf3-streams N parallel iperf3 streams, -P (1)\n"
               "  --iperf3-time S    seconds of each iperf3 test, -t (1); %d tests per case,\n"
               "                     spread over its timed requests\n"
               "  --copy-threads N   copy threads of the started daemons and of memcpy (2)\n"
               "  --timeout MS       transfer timeout (10000)\n"
               "  --model NAME       llama3-8b (default), llama3-70b, qwen2.5-7b, mistral-7b:\n"
               "                     16-token fp16 blocks, K and V per layer, 32 blocks a request\n"
               "  --block-size SIZE  bytes per block per tensor, a multiple of 8 (K, M suffixes)\n"
               "  --tensors N        tensors per cache (1..%d)\n"
               "  --blocks N         blocks per tensor in each cache\n"
               "  --pull-blocks N    blocks one request moves\n"
               "  --pattern P        scattered (default) or contiguous\n"
               "  --push             the prefill side pushes instead of the decode side pulling\n"
               "  --iterations N     timed requests (20)\n"
               "  --warmup N         untimed requests first (2)\n"
               "  --seed N           seed of the data and of the scattered ids (1)\n"
               "  --layer-compute-us US  play a prefill that computes each layer for US\n"
               "                     microseconds and sends it (--push: pushes it) while the\n"
               "                     next computes; reports the exposed time (last layer\n"
               "                     computed -> all landed) next to one layer's transfer and\n"
               "                     the whole transfer after prefill, measured in turn\n"
               "  --probe-status     call for the daemon's status on another connection, one\n"
               "                     call after the other, while the timed requests run, and\n"
               "                     report how long those calls took (the loop's delay)\n"
               "  --batch N          send each request as one kvd_transfer_batch() of N\n"
               "                     entries (its blocks split evenly) and report how long\n"
               "                     posting it took next to the whole request's latency\n"
               "  --inflight N       keep N requests in flight (1..%d, 1): each sent without\n"
               "                     waiting for the one before, the oldest waited for first;\n"
               "                     kvdist's rate is then the stream's (bytes over the time\n"
               "                     from its first request sent to its last answered, in\n"
               "                     streams of %d requests or more, the baselines' rounds\n"
               "                     after each), latencies include the wait in the stream\n"
               "  --suite            run the standard cases and print one table (with\n"
               "                     --remote: the cross-node cases)\n"
               "  --json             machine-readable output\n"
               "  -h, --help         show this help\n",
               MAX_TCP_STREAMS, BENCH_UNIX_MSG_BYTES, IPERF3_RUNS, IPERF3_RUNS, KVD_MAX_TENSORS,
               BENCH_MAX_INFLIGHT, BENCH_STREAM_CHUNK);
}

/* A decimal number with an optional K, M, G or T (binary) suffix, within [@min, @max]. */
static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
        const char *units = "KMGT", *u;
        unsigned long long v;
        unsigned shift = 0;
        char *end;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || end == s || s[0] == '-')
                return -EINVAL;
        u = end[0] && !end[1] ? strchr(units, end[0] & ~0x20) : NULL;
        if (u) {
                shift = 10 * (unsigned)(u - units + 1);
                end++;
        }
        if (end[0] || v > (max >> shift) || (v << shift) < min)
                return -EINVAL;
        *ret = (uint64_t)v << shift;
        return 0;
}

static void workload_from_model(const Model *m, Workload *w)
{
        (void)snprintf(w->name, sizeof(w->name), "%s", m->name);
        w->block_size = (uint64_t)BLOCK_TOKENS * m->kv_heads * m->head_dim * 2;
        w->tensors = 2 * m->layers;
        w->blocks = m->blocks;
        w->pull_blocks = PROMPT_BLOCKS;
        w->scattered = true;
}

enum {
        ARG_DAEMON = 0x100,
        ARG_SOCKET,
        ARG_COPY_THREADS,
        ARG_TIMEOUT,
        ARG_MODEL,
        ARG_BLOCK_SIZE,
        ARG_TENSORS,
        ARG_BLOCKS,
        ARG_PULL_BLOCKS,
        ARG_PATTERN,
        ARG_PUSH,
        ARG_ITERATIONS,
        ARG_WARMUP,
        ARG_SEED,
        ARG_SUITE,
        ARG_JSON,
        ARG_REMOTE,
        ARG_TCP_STREAMS,
        ARG_TCP_CRC,
        ARG_RDMA_DEVICE,
        ARG_BASELINE,
        ARG_IPERF3,
        ARG_UCX_PERFTEST,
        ARG_IPERF3_STREAMS,
        ARG_IPERF3_TIME,
        ARG_LAYER_COMPUTE_US,
        ARG_PROBE_STATUS,
        ARG_BATCH,
        ARG_INFLIGHT,
};

static const struct option options[] = {
        {"daemon", required_argument, NULL, ARG_DAEMON},
        {"socket", required_argument, NULL, ARG_SOCKET},
        {"copy-threads", required_argument, NULL, ARG_COPY_THREADS},
        {"timeout", required_argument, NULL, ARG_TIMEOUT},
        {"model", required_argument, NULL, ARG_MODEL},
        {"block-size", required_argument, NULL, ARG_BLOCK_SIZE},
        {"tensors", required_argument, NULL, ARG_TENSORS},
        {"blocks", required_argument, NULL, ARG_BLOCKS},
        {"pull-blocks", required_argument, NULL, ARG_PULL_BLOCKS},
        {"pattern", required_argument, NULL, ARG_PATTERN},
        {"push", no_argument, NULL, ARG_PUSH},
        {"iterations", required_argument, NULL, ARG_ITERATIONS},
        {"warmup", required_argument, NULL, ARG_WARMUP},
        {"seed", required_argument, NULL, ARG_SEED},
        {"suite", no_argument, NULL, ARG_SUITE},
        {"json", no_argument, NULL, ARG_JSON},
        {"remote", no_argument, NULL, ARG_REMOTE},
        {"tcp-streams", required_argument, NULL, ARG_TCP_STREAMS},
        {"tcp-crc", required_argument, NULL, ARG_TCP_CRC},
        {"rdma-device", required_argument, NULL, ARG_RDMA_DEVICE},
        {"baseline", required_argument, NULL, ARG_BASELINE},
        {"iperf3", required_argument, NULL, ARG_IPERF3},
        {"ucx-perftest", required_argument, NULL, ARG_UCX_PERFTEST},
        {"iperf3-streams", required_argument, NULL, ARG_IPERF3_STREAMS},
        {"iperf3-time", required_argument, NULL, ARG_IPERF3_TIME},
        {"layer-compute-us", required_argument, NULL, ARG_LAYER_COMPUTE_US},
        {"probe-status", no_argument, NULL, ARG_PROBE_STATUS},
        {"batch", required_argument, NULL, ARG_BATCH},
        {"inflight", required_argument, NULL, ARG_INFLIGHT},
        {"help", no_argument, NULL, 'h'},
        {}};

static int usage_error(const char *msg, const char *arg)
{
        fprintf(stderr, "kvdist-bench: %s%s (see --help)\n", msg, arg);
        return -EINVAL;
}

/* Fills @a from the command line; 1 after --help, -EINVAL (explained) on a usage error. */
int bench_parse_args(int argc, char **argv, Args *a)
{
        Workload given = {};
        const struct {
                int val;
                uint64_t *dst, min, max;
        } numbers[] = {
                {ARG_COPY_THREADS, &a->copy_threads, 1, MAX_COPY_THREADS},
                {ARG_TIMEOUT, &a->timeout_ms, 1, INT32_MAX},
                {ARG_BLOCK_SIZE, &given.block_size, 8, UINT32_MAX},
                {ARG_TENSORS, &given.tensors, 1, KVD_MAX_TENSORS},
                {ARG_BLOCKS, &given.blocks, 1, UINT32_MAX},
                {ARG_PULL_BLOCKS, &given.pull_blocks, 1, UINT32_MAX},
                {ARG_ITERATIONS, &a->iterations, 1, 1000000},
                {ARG_WARMUP, &a->warmup, 0, 1000000},
                {ARG_SEED, &a->seed, 0, UINT64_MAX},
                {ARG_TCP_STREAMS, &a->tcp_streams, 1, MAX_TCP_STREAMS},
                {ARG_IPERF3_STREAMS, &a->iperf3_streams, 1, 128},
                {ARG_IPERF3_TIME, &a->iperf3_time, 1, 60},
                {ARG_LAYER_COMPUTE_US, &a->layer_compute_us, 1, 10000000},
                {ARG_BATCH, &a->batch, 1, KVD_BATCH_MAX_ENTRIES},
                {ARG_INFLIGHT, &a->inflight, 1, BENCH_MAX_INFLIGHT},
        };
        const char *pattern = NULL;
        bool model = false, tcp_set = false;
        int c, baseline = _BASELINE_INVALID;

        *a = (Args){.copy_threads = 2,
                    .iterations = 20,
                    .warmup = 2,
                    .seed = 1,
                    .timeout_ms = 10000,
                    .tcp_streams = 4,
                    .tcp_crc = 0,
                    .iperf3 = "iperf3",
                    .ucx = "ucx_perftest",
                    .iperf3_streams = 1,
                    .iperf3_time = 1,
                    .inflight = 1};
        workload_from_model(&models[0], &a->w);
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
                size_t i;

                switch (c) {
                case 'h':
                        help();
                        return 1;
                case ARG_DAEMON:
                        a->daemon_path = optarg;
                        continue;
                case ARG_SOCKET:
                        a->socket_path = optarg;
                        continue;
                case ARG_MODEL:
                        for (i = 0; i < ARRAY_SIZE(models); i++)
                                if (strcmp(optarg, models[i].name) == 0)
                                        break;
                        if (i == ARRAY_SIZE(models))
                                return usage_error("unknown --model ", optarg);
                        workload_from_model(&models[i], &a->w);
                        model = true;
                        continue;
                case ARG_PATTERN:
                        if (strcmp(optarg, "scattered") != 0 && strcmp(optarg, "contiguous") != 0)
                                return usage_error("unknown --pattern ", optarg);
                        pattern = optarg;
                        continue;
                case ARG_PUSH:
                        a->push = true;
                        continue;
                case ARG_SUITE:
                        a->suite = true;
                        continue;
                case ARG_JSON:
                        a->json = true;
                        continue;
                case ARG_PROBE_STATUS:
                        a->probe_status = true;
                        continue;
                case ARG_REMOTE:
                        a->remote = true;
                        continue;
                case ARG_RDMA_DEVICE:
                        a->rdma_device = optarg;
                        tcp_set = true;
                        continue;
                case ARG_TCP_CRC:
                        if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
                                return usage_error("--tcp-crc takes on or off, not ", optarg);
                        a->tcp_crc = strcmp(optarg, "on") == 0;
                        tcp_set = true;
                        continue;
                case ARG_BASELINE:
                        for (baseline = 0; baseline < _BASELINE_MAX; baseline++)
                                if (strcmp(optarg, baseline_names[baseline]) == 0)
                                        break;
                        if (baseline == _BASELINE_MAX)
                                return usage_error("unknown --baseline ", optarg);
                        continue;
                case ARG_IPERF3:
                        a->iperf3 = optarg;
                        continue;
                case ARG_UCX_PERFTEST:
                        a->ucx = optarg;
                        continue;
                case ARG_TCP_STREAMS:
                        tcp_set = true;
                        break;
                }
                for (i = 0; i < ARRAY_SIZE(numbers); i++)
                        if (numbers[i].val == c)
                                break;
                if (i == ARRAY_SIZE(numbers))
                        return -EINVAL; /* getopt_long() said why */
                if (parse_u64(optarg, numbers[i].min, numbers[i].max, numbers[i].dst) < 0)
                        return usage_error("value out of range: ", optarg);
        }
        if (optind < argc)
                return usage_error("unexpected argument ", argv[optind]);

        if (a->remote && a->socket_path)
                return usage_error("--remote starts its own two daemons, without --socket", "");
        if (!a->remote && tcp_set)
                return usage_error("--tcp-streams, --tcp-crc and --rdma-device are for --remote",
                                   "");
        if (a->batch > 0 && a->layer_compute_us > 0)
                return usage_error("--batch and --layer-compute-us are separate modes", "");
        if (a->inflight > 1 && (a->batch > 0 || a->layer_compute_us > 0))
                return usage_error("--inflight streams whole requests, without --batch or "
                                   "--layer-compute-us",
                                   "");
        if (a->batch > 0 && a->suite)
                return usage_error("--batch runs one workload, not --suite", "");
        if (a->layer_compute_us > 0) {
                /* its baselines are its own: one layer's transfer and the whole one */
                if (baseline >= 0 && baseline != BASELINE_NONE)
                        return usage_error("--layer-compute-us compares with its own one-layer "
                                           "and whole transfers, without --baseline",
                                           "");
                if (a->suite)
                        return usage_error("--layer-compute-us runs one workload, not --suite", "");
                baseline = BASELINE_NONE;
        }
        a->baseline = baseline >= 0 ? (BaselineKind)baseline
                      : a->remote   ? BASELINE_IPERF3
                                    : BASELINE_MEMCPY;

        if (a->suite && (model || pattern || given.block_size || given.tensors || given.blocks ||
                         given.pull_blocks))
                return usage_error("--suite runs its own workloads, without --model, "
                                   "--pattern or sizes",
                                   "");
        if (given.block_size || given.tensors)
                (void)snprintf(a->w.name, sizeof(a->w.name), "custom");
        a->w.block_size = given.block_size ?: a->w.block_size;
        a->w.tensors = given.tensors ?: a->w.tensors;
        a->w.blocks = given.blocks ?: a->w.blocks;
        a->w.pull_blocks = given.pull_blocks ?: MIN(a->w.pull_blocks, a->w.blocks);
        if (pattern)
                a->w.scattered = strcmp(pattern, "scattered") == 0;
        if (a->w.block_size % 8)
                return usage_error("--block-size must be a multiple of 8", "");
        if (a->w.pull_blocks > a->w.blocks)
                return usage_error("--pull-blocks is more than the blocks of the cache", "");
        if (a->batch > a->w.pull_blocks)
                return usage_error("--batch has more entries than a request has blocks", "");
        if (a->w.blocks > SIZE_MAX / a->w.block_size / a->w.tensors)
                return usage_error("the cache would be larger than memory", "");
        return 0;
}

/* The standard set on one node: large runs, large scattered, small scattered, two models. */
static void suite_workloads(Workload *w)
{
        w[0] = (Workload){"large", 64 * KIB, 8, 1024, 512, false};
        w[1] = (Workload){"large-scattered", 64 * KIB, 8, 1024, 512, true};
        w[2] = (Workload){"small-scattered", 4 * KIB, 2, 16384, 10000, true};
        workload_from_model(&models[0], &w[3]);
        workload_from_model(&models[1], &w[4]);
}

/*
 * The standard set across daemons: a 256 MiB pull of 64 KiB blocks, as one run and scattered
 * (every block its own segment), 8192 scattered 4 KiB blocks, and two models' prompt hand-offs.
 */
static void remote_suite_workloads(Workload *w)
{
        w[0] = (Workload){"large", 64 * KIB, 2, 2048, 2048, false};
        w[1] = (Workload){"large-scattered", 64 * KIB, 2, 2048, 2048, true};
        w[2] = (Workload){"small-scattered", 4 * KIB, 2, 16384, 8192, true};
        workload_from_model(&models[0], &w[3]);
        workload_from_model(&models[1], &w[4]);
}

void bench_suite_workloads(bool remote, Workload w[static BENCH_SUITE_CASES])
{
        if (remote)
                remote_suite_workloads(w);
        else
                suite_workloads(w);
}
