/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench: measures how fast kvdistd moves KV blocks between two clusters, on one node next
 * to a plain multi-threaded memcpy of the same bytes, or across two daemons over TCP next to
 * iperf3 on the same loopback, in the same run, and checks every byte.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench-args.h"
#include "tools/bench-data.h"
#include "tools/bench-daemon.h"
#include "tools/bench-iperf3.h"
#include "tools/bench-memcpy.h"
#include "tools/bench-report.h"
#include "tools/bench-unix.h"
#include "tools/bench.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"

#define PREFILL_CLUSTER 1
#define DECODE_CLUSTER 2
#define IPERF3_SLACK_MS 10000           /* an iperf3 test may take this much longer than asked */
#define UCX_MAX_MSG (UINT64_C(1) << 20) /* kvdist's TCP chunk */
#define UCX_TIMEOUT_MS 60000            /* one ucx_perftest test */

enum {
        EXIT_BENCH_FAILED = 1, /* a call failed, bytes landed wrong, or the daemon crashed */
        EXIT_USAGE = 2,
        EXIT_NO_BASELINE = 3, /* iperf3 or ucx_perftest is missing or failed */
};

static double now_ns(void)
{
        struct timespec ts;

        (void)clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(kvd_client, kvd_client_finalize);

static int fail(kvd_client *c, const char *what, int status)
{
        const char *detail = c ? kvd_last_error(c) : "";

        fprintf(stderr, "kvdist-bench: %s: %s%s%s\n", what, kvd_strerror(status),
                detail[0] ? ": " : "", detail);
        return -EIO;
}

/*
 * Attaches @cluster to the daemon on @socket, a server reachable at @listen (the side that is
 * linked to) or a client when it is NULL, and gives it a blocks cache of @w's shape in
 * kvd_mem_alloc() memory.
 */
static int side_open(const Args *a, const Workload *w, const char *socket, uint64_t cluster,
                     kvd_role role, const char *listen, kvd_client **ret_client, uint8_t **ret_mem,
                     uint64_t *ret_cache_id)
{
        char timeout[24];
        kvd_option opts[] = {
                {"device_id", "0"},
                {"sync_kv_timeout_ms", timeout},
                {"socket_path", socket},
                {"listen_ip_info", listen},
        };
        kvd_cache_desc desc = {
                .num_tensors = (uint32_t)w->tensors,
                .n_dims = 2,
                .shape = {(int64_t)w->blocks, (int64_t)w->block_size},
                .data_type = KVD_DT_UINT8,
        };
        kvd_cache_key key = kvd_key_blocks(cluster, 0);
        uint64_t tensor_bytes = w->blocks * w->block_size;
        void *addrs[KVD_MAX_TENSORS], *mem;
        int r;

        (void)snprintf(timeout, sizeof(timeout), "%" PRIu64, a->timeout_ms);
        r = kvd_client_init(cluster, role, opts, ARRAY_SIZE(opts) - !listen, ret_client);
        if (r < 0)
                return fail(NULL, "cannot attach a cluster to kvdistd", r);
        r = kvd_mem_alloc(*ret_client, tensor_bytes * w->tensors, &mem);
        if (r < 0)
                return fail(*ret_client, "kvd_mem_alloc", r);
        for (uint64_t t = 0; t < w->tensors; t++)
                addrs[t] = (uint8_t *)mem + t * tensor_bytes;
        *ret_mem = mem;
        r = kvd_register_blocks_cache(*ret_client, &desc, addrs, w->tensors, &key, KVD_REMOTE_YES,
                                      ret_cache_id);
        return r < 0 ? fail(*ret_client, "kvd_register_blocks_cache", r) : 0;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

/* Sorts @v and returns its median. */
static double median(double *v, uint64_t n)
{
        qsort(v, n, sizeof(double), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double sum(const double *v, uint64_t n)
{
        double total = 0;

        for (uint64_t i = 0; i < n; i++)
                total += v[i];
        return total;
}

/*
 * Sets the figures of @res from the request latencies @lat and the baseline's @n_base times
 * @base (ns for one request's bytes), and the scattered memcpy's @scat (NULL when none ran).
 * Sorts them.
 */
static void result_stats(Result *res, const Args *a, double *lat, double *base, double *scat,
                         uint64_t n_base)
{
        uint64_t iterations = a->iterations;
        double total = sum(lat, iterations);

        res->kvdist_gbps = (double)res->bytes * iterations / total;
        res->kvdist_gbps_median = (double)res->bytes / median(lat, iterations);
        if (n_base > 0) {
                res->baseline_gbps = (double)res->bytes * n_base / sum(base, n_base);
                res->baseline_gbps_median = (double)res->bytes / median(base, n_base);
        }
        if (n_base > 0 && scat) {
                res->scattered_gbps = (double)res->bytes * n_base / sum(scat, n_base);
                res->scattered_gbps_median = (double)res->bytes / median(scat, n_base);
        }
        res->requests_per_s = iterations / (total / 1e9);
        res->lat_mean_us = total / iterations / 1e3;
        /* nearest rank */
        res->lat_p50_us = lat[(iterations * 50 + 99) / 100 - 1] / 1e3;
        res->lat_p99_us = lat[(iterations * 99 + 99) / 100 - 1] / 1e3;
        if (n_base > 0) {
                res->base_p50_us = base[(n_base * 50 + 99) / 100 - 1] / 1e3;
                res->base_p99_us = base[(n_base * 99 + 99) / 100 - 1] / 1e3;
        }
}

/*
 * One round of the baseline: *@ret_ns is the time memcpy took for @bytes, a Unix socket round
 * trip took, or the time the rate
 * of an iperf3 test of --iperf3-time seconds gives for @bytes. -EPIPE (said on stderr) when
 * iperf3 failed.
 */
static int baseline_round(const Args *a, BenchMemcpy *base, BenchUnix *unix_rtt, uint64_t bytes,
                          uint64_t segments, double *ret_ns)
{
        uint64_t msg;
        double gbps;
        int r;

        switch (a->baseline) {
        case BASELINE_MEMCPY:
                *ret_ns = bench_memcpy_round(base);
                return 0;
        case BASELINE_UCX:
                /* messages of the request's segments (at most a 1 MiB chunk), about as many
                 * bytes as the request, 200 to 10,000 messages */
                msg = MIN(bytes / MAX(segments, 1), UCX_MAX_MSG);
                r = bench_ucx_run(a->ucx_path, msg, MIN(MAX(bytes / msg, 200), 10000),
                                  UCX_TIMEOUT_MS, &gbps);
                if (r < 0) {
                        if (r != -EIO)
                                fprintf(stderr, "kvdist-bench: ucx_perftest: %s\n", strerror(-r));
                        return -EPIPE;
                }
                *ret_ns = (double)bytes / gbps;
                return 0;
        case BASELINE_UNIX:
                *ret_ns = bench_unix_round(unix_rtt);
                if (*ret_ns < 0) {
                        fprintf(stderr, "kvdist-bench: the Unix socket round trip failed\n");
                        return -EPIPE;
                }
                return 0;
        case BASELINE_IPERF3:
                r = bench_iperf3_run(a->iperf3_path, (unsigned)a->iperf3_time,
                                     (unsigned)a->iperf3_streams,
                                     (unsigned)a->iperf3_time * 1000 + IPERF3_SLACK_MS, &gbps);
                if (r < 0) {
                        if (r != -EIO)
                                fprintf(stderr, "kvdist-bench: iperf3: %s\n", strerror(-r));
                        return -EPIPE;
                }
                /* bytes / (1e9 bytes/s) is ns */
                *ret_ns = (double)bytes / gbps;
                return 0;
        default:
                *ret_ns = 0;
                return 0;
        }
}

#define PROBE_MAX_CALLS 200000

/*
 * --probe-status: a thread that calls kvd_daemon_status() on a connection of its own, one call
 * after the other, while the timed requests run; how long the control loop keeps a read-only
 * caller waiting while it plans and starts big transfers.
 */
typedef struct StatusProbe {
        pthread_t thread;
        kvd_client *client;
        atomic_bool stop;
        int status; /* the first failure, else 0 */
        uint64_t n;
        double *ns; /* PROBE_MAX_CALLS */
} StatusProbe;

static void *probe_thread(void *userdata)
{
        StatusProbe *p = userdata;

        while (!atomic_load(&p->stop) && p->n < PROBE_MAX_CALLS) {
                char *json = NULL;
                double t0 = now_ns();
                int r = kvd_daemon_status(p->client, &json);

                p->ns[p->n++] = now_ns() - t0;
                free(json);
                if (r < 0) {
                        p->status = r;
                        break;
                }
        }
        return NULL;
}

static int probe_start(const char *socket, StatusProbe *p)
{
        kvd_option opt = {"socket_path", socket};
        int r;

        *p = (StatusProbe){.ns = calloc(PROBE_MAX_CALLS, sizeof(double))};
        if (!p->ns)
                return -ENOMEM;
        r = kvd_client_connect(&opt, 1, &p->client);
        if (r < 0)
                return fail(NULL, "cannot connect the status probe", r);
        atomic_init(&p->stop, false);
        r = pthread_create(&p->thread, NULL, probe_thread, p);
        if (r != 0) {
                kvd_client_finalize(p->client);
                p->client = NULL;
                return -r;
        }
        return 0;
}

static void percentiles_us(double *v, uint64_t n, double *ret_p50, double *ret_p99);

/* Stops the probe and puts its figures into @res; -EIO (said) when a status call failed. */
static int probe_stop(StatusProbe *p, Result *res)
{
        int r = 0;

        if (!p->client) {
                free(p->ns);
                return 0;
        }
        atomic_store(&p->stop, true);
        (void)pthread_join(p->thread, NULL);
        if (p->status < 0)
                r = fail(p->client, "kvd_daemon_status", p->status);
        kvd_client_finalize(p->client);
        p->client = NULL;
        if (r == 0 && p->n > 0) {
                res->status_calls = p->n;
                percentiles_us(p->ns, p->n, &res->status_p50_us, &res->status_p99_us);
                res->status_max_us = p->ns[p->n - 1] / 1e3;
        }
        free(p->ns);
        p->ns = NULL;
        return r;
}

/* For a return on a failure: stops the probe, its figures unused. */
static void probe_stopp(StatusProbe *p)
{
        Result unused;

        (void)probe_stop(p, &unused);
}

/* Sorts @v (@n entries, ns) and sets its nearest-rank p50 and p99 in us. */
static void percentiles_us(double *v, uint64_t n, double *ret_p50, double *ret_p99)
{
        qsort(v, n, sizeof(double), cmp_double);
        *ret_p50 = v[(n * 50 + 99) / 100 - 1] / 1e3;
        *ret_p99 = v[(n * 99 + 99) / 100 - 1] / 1e3;
}

/* Moves @layers of the request (count 0: all) and waits for it; the wall time in ns. */
static int move_layers(const Args *a, const Workload *w, kvd_client *mover,
                       const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                       const uint64_t *dst_ids, kvd_layer_range layers, double *ret_ns)
{
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        double t0 = now_ns();
        int r;

        opts.tensor_num_per_layer = w->tensors % 2 ? 1 : 2;
        opts.timeout_ms = (int32_t)a->timeout_ms;
        opts.src_layers = opts.dst_layers = layers;
        if (a->push)
                r = kvd_push_blocks(mover, key, cache, src_ids, w->pull_blocks, dst_ids,
                                    w->pull_blocks, &opts);
        else
                r = kvd_pull_blocks(mover, key, cache, src_ids, w->pull_blocks, dst_ids,
                                    w->pull_blocks, &opts);
        *ret_ns = now_ns() - t0;
        return r < 0 ? fail(mover, a->push ? "kvd_push_blocks" : "kvd_pull_blocks", r) : 0;
}

/*
 * One request as a batch of a->batch entries, the blocks split evenly (the last takes the
 * rest): posts it, records how long posting took in *@ret_post_ns, and waits for it.
 */
static int batch_request(const Args *a, const Workload *w, kvd_client *mover,
                         const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                         const uint64_t *dst_ids, const kvd_transfer_opts *opts,
                         double *ret_post_ns)
{
        kvd_batch_entry e[KVD_BATCH_MAX_ENTRIES];
        uint64_t per = w->pull_blocks / a->batch;
        kvd_task *task = NULL;
        double t0;
        int r;

        for (uint64_t i = 0; i < a->batch; i++) {
                uint64_t first = i * per, n = i + 1 == a->batch ? w->pull_blocks - first : per;

                e[i] = (kvd_batch_entry){
                        .kind = a->push ? KVD_PUSH_BLOCKS : KVD_PULL_BLOCKS,
                        .key = *key,
                        .cache_id = cache,
                        .src_blocks = src_ids + first,
                        .n_src = n,
                        .dst_blocks = dst_ids + first,
                        .n_dst = n,
                        .tensor_num_per_layer = opts->tensor_num_per_layer,
                };
        }
        t0 = now_ns();
        r = kvd_transfer_batch(mover, e, a->batch,
                               &(kvd_transfer_opts){.timeout_ms = opts->timeout_ms}, &task);
        *ret_post_ns = now_ns() - t0;
        if (r < 0)
                return fail(mover, "kvd_transfer_batch", r);
        r = kvd_task_wait(task, -1);
        if (r < 0)
                r = fail(mover, "kvd_task_wait (batch)", r);
        kvd_task_free(task);
        return r;
}

/*
 * One prefill played layer by layer: layer l is computed by --layer-compute-us of sleep (the
 * accelerator computes, not this CPU) ending at start + (l + 1) x compute, then its transfer
 * is sent without waiting, and the next layer computes meanwhile. *@ret_exposed_ns is the time
 * from the last layer's end of compute until every layer has landed.
 */
static int layered_round(const Args *a, const Workload *w, kvd_client *mover,
                         const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                         const uint64_t *dst_ids, uint64_t layers, kvd_task **tasks,
                         double *ret_exposed_ns)
{
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        struct timespec start, until;
        double last_done = 0;
        int r = 0, st;

        opts.tensor_num_per_layer = w->tensors % 2 ? 1 : 2;
        opts.timeout_ms = (int32_t)a->timeout_ms;
        (void)clock_gettime(CLOCK_MONOTONIC, &start);
        for (uint64_t l = 0; l < layers; l++) {
                uint64_t ns = (l + 1) * a->layer_compute_us * 1000;

                until.tv_sec = start.tv_sec + (time_t)((start.tv_nsec + ns) / 1000000000);
                until.tv_nsec = (long)((start.tv_nsec + ns) % 1000000000);
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
                        ;
                if (l + 1 == layers)
                        last_done = now_ns();
                opts.src_layers = opts.dst_layers = (kvd_layer_range){(uint32_t)l, 1};
                if (a->push)
                        r = kvd_push_blocks_async(mover, key, cache, src_ids, w->pull_blocks,
                                                  dst_ids, w->pull_blocks, &opts, &tasks[l]);
                else
                        r = kvd_pull_blocks_async(mover, key, cache, src_ids, w->pull_blocks,
                                                  dst_ids, w->pull_blocks, &opts, &tasks[l]);
                if (r < 0) {
                        r = fail(mover, "sending a layer's transfer", r);
                        break;
                }
        }
        /* every task sent is waited for, so none is left running into the next round */
        for (uint64_t l = 0; l < layers && tasks[l]; l++) {
                st = kvd_task_wait(tasks[l], -1);
                if (st < 0 && r >= 0)
                        r = fail(mover, "a layer's transfer", st);
                kvd_task_free(tasks[l]);
                tasks[l] = NULL;
        }
        *ret_exposed_ns = now_ns() - last_done;
        return r;
}

/*
 * --layer-compute-us: in every iteration the whole transfer after prefill, one layer's transfer
 * alone (layer i mod layers) and the layered prefill, in turn, so all three see the same moments
 * of a noisy machine.
 */
static int run_layered(const Args *a, const Workload *w, kvd_client *mover,
                       const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                       const uint64_t *dst_ids, Result *res)
{
        uint64_t layers = w->tensors / (w->tensors % 2 ? 1 : 2), n = a->iterations;
        _cleanup_free_ kvd_task **tasks = calloc(layers, sizeof(kvd_task *));
        _cleanup_free_ double *exposed = calloc(n, sizeof(double));
        _cleanup_free_ double *one = calloc(n, sizeof(double));
        _cleanup_free_ double *whole = calloc(n, sizeof(double));
        int r;

        if (!tasks || !exposed || !one || !whole)
                return -ENOMEM;
        for (uint64_t i = 0; i < a->warmup + n; i++) {
                uint64_t k = i < a->warmup ? 0 : i - a->warmup;
                uint32_t l = (uint32_t)(i % layers);

                r = move_layers(a, w, mover, key, cache, src_ids, dst_ids, (kvd_layer_range){},
                                &whole[k]);
                if (r < 0)
                        return r;
                r = move_layers(a, w, mover, key, cache, src_ids, dst_ids, (kvd_layer_range){l, 1},
                                &one[k]);
                if (r < 0)
                        return r;
                r = layered_round(a, w, mover, key, cache, src_ids, dst_ids, layers, tasks,
                                  &exposed[k]);
                if (r < 0)
                        return r;
        }
        res->layers = layers;
        percentiles_us(exposed, n, &res->exposed_p50_us, &res->exposed_p99_us);
        percentiles_us(one, n, &res->layer_p50_us, &res->layer_p99_us);
        percentiles_us(whole, n, &res->whole_p50_us, &res->whole_p99_us);
        /* the rate and latencies of the whole transfer after prefill */
        res->kvdist_gbps_median = res->kvdist_gbps = (double)res->bytes / (res->whole_p50_us * 1e3);
        res->lat_p50_us = res->lat_mean_us = res->whole_p50_us;
        res->lat_p99_us = res->whole_p99_us;
        res->requests_per_s = 1e6 / res->whole_p50_us;
        return 0;
}

/*
 * CPU time so far of @pid's main thread, the daemon's control loop, in ns: the first field of
 * /proc/PID/task/PID/schedstat (user and kernel time together). -1 when unknown.
 */
static int64_t loop_cpu_ns(pid_t pid)
{
        char path[64];
        long long ns;
        FILE *f;
        int n;

        if (pid <= 0)
                return -1;
        (void)snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        n = fscanf(f, "%lld", &ns);
        fclose(f);
        return n == 1 && ns >= 0 ? ns : -1;
}

/* Each daemon's loop CPU per request over @iterations since @t0 (loop_cpu_ns() values). */
static void loop_cpu_result(const Args *a, const int64_t t0[2], Result *res)
{
        int64_t t1[2] = {loop_cpu_ns(a->prefill_pid), loop_cpu_ns(a->decode_pid)};
        double *out[2] = {&res->loop_cpu_prefill_us, &res->loop_cpu_decode_us};

        for (unsigned k = 0; k < 2; k++)
                *out[k] = t0[k] >= 0 && t1[k] >= t0[k]
                                  ? (double)(t1[k] - t0[k]) / 1e3 / (double)a->iterations
                                  : -1;
}

/*
 * --inflight: @n requests as one stream, up to a->inflight of them in flight at once (each sent
 * with the async call, the oldest waited for before another is sent), as an engine that does
 * not wait for one request before it sends the next. @lat, when not NULL, takes each request's
 * time from its sending to its answer (its wait behind the ones before it included).
 */
static int stream_requests(const Args *a, const Workload *w, kvd_client *mover,
                           const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                           const uint64_t *dst_ids, const kvd_transfer_opts *opts, uint64_t n,
                           double *lat)
{
        kvd_task *tasks[BENCH_MAX_INFLIGHT] = {};
        double sent_at[BENCH_MAX_INFLIGHT];
        uint64_t sent = 0, done = 0;
        int r = 0;

        while (done < n) {
                size_t oldest = done % a->inflight;

                for (; sent < n && sent - done < a->inflight; sent++) {
                        size_t k = sent % a->inflight;

                        sent_at[k] = now_ns();
                        if (a->push)
                                r = kvd_push_blocks_async(mover, key, cache, src_ids,
                                                          w->pull_blocks, dst_ids, w->pull_blocks,
                                                          opts, &tasks[k]);
                        else
                                r = kvd_pull_blocks_async(mover, key, cache, src_ids,
                                                          w->pull_blocks, dst_ids, w->pull_blocks,
                                                          opts, &tasks[k]);
                        if (r < 0) {
                                r = fail(mover,
                                         a->push ? "kvd_push_blocks_async"
                                                 : "kvd_pull_blocks_async",
                                         r);
                                break;
                        }
                }
                if (r < 0)
                        break;
                r = kvd_task_wait(tasks[oldest], -1);
                if (r < 0) {
                        r = fail(mover, "kvd_task_wait", r);
                        break;
                }
                if (lat)
                        lat[done] = now_ns() - sent_at[oldest];
                kvd_task_free(tasks[oldest]);
                tasks[oldest] = NULL;
                done++;
        }
        /* after a failure: the others are cancelled and waited for (nothing lands later) */
        for (size_t k = 0; k < ARRAY_SIZE(tasks); k++)
                kvd_task_free(tasks[k]);
        return r < 0 ? r : 0;
}

/* The baselines of a case and the rounds they have run. */
typedef struct Baselines {
        BenchMemcpy *base, *scat; /* --baseline memcpy: sequential and scattered */
        BenchUnix *unix_rtt;      /* --baseline unix */
        double *base_ns, *scat_ns;
        uint64_t n, runs; /* rounds run, and to run */
} Baselines;

/* After a warm-up request: one untimed round of the baselines that run after every request. */
static void baselines_warm(Baselines *b)
{
        if (b->base)
                (void)bench_memcpy_round(b->base);
        if (b->scat)
                (void)bench_memcpy_round(b->scat);
        if (b->unix_rtt)
                (void)bench_unix_round(b->unix_rtt);
}

/* After timed request @i: the baselines' next round, when one is due (spread over the runs). */
static int baselines_after(const Args *a, const Result *res, Baselines *b, uint64_t i)
{
        /* The k-th of b->runs rounds follows timed request (k + 1) * n / runs - 1. */
        if (b->n >= b->runs || i + 1 != (b->n + 1) * a->iterations / b->runs)
                return 0;
        if (b->scat)
                b->scat_ns[b->n] = bench_memcpy_round(b->scat);
        return baseline_round(a, b->base, b->unix_rtt, res->bytes, res->segments,
                              &b->base_ns[b->n++]);
}

/* As the timed requests start: the status probe, and each daemon's loop CPU so far. */
static int timed_start(const Args *a, StatusProbe *probe, int64_t loop_t0[static 2])
{
        int r;

        if (a->probe_status) {
                r = probe_start(a->push ? a->prefill_socket : a->decode_socket, probe);
                if (r < 0)
                        return r;
        }
        loop_t0[0] = loop_cpu_ns(a->prefill_pid);
        loop_t0[1] = loop_cpu_ns(a->decode_pid);
        return 0;
}

/*
 * The warm-up and timed requests one after the other, each sent once the one before is
 * answered (as one kvd_transfer_batch() of a->batch entries with --batch, its posting time in
 * @post_ns), each timed one followed by the baselines' rounds due.
 */
static int run_one_by_one(const Args *a, const Workload *w, kvd_client *mover,
                          const kvd_cache_key *key, uint64_t cache, const uint64_t *src_ids,
                          const uint64_t *dst_ids, const kvd_transfer_opts *opts, Baselines *bl,
                          Result *res, double *lat, double *post_ns, StatusProbe *probe,
                          int64_t loop_t0[static 2])
{
        int r;

        for (uint64_t i = 0; i < a->warmup + a->iterations; i++) {
                double t0, ns;

                if (i == a->warmup) {
                        r = timed_start(a, probe, loop_t0);
                        if (r < 0)
                                return r;
                }
                t0 = now_ns();

                if (a->batch > 0) {
                        r = batch_request(a, w, mover, key, cache, src_ids, dst_ids, opts,
                                          &post_ns[i < a->warmup ? 0 : i - a->warmup]);
                        if (r < 0)
                                return r;
                } else if (a->push)
                        r = kvd_push_blocks(mover, key, cache, src_ids, w->pull_blocks, dst_ids,
                                            w->pull_blocks, opts);
                else
                        r = kvd_pull_blocks(mover, key, cache, src_ids, w->pull_blocks, dst_ids,
                                            w->pull_blocks, opts);
                ns = now_ns() - t0;
                if (r < 0)
                        return fail(mover, a->push ? "kvd_push_blocks" : "kvd_pull_blocks", r);
                if (i < a->warmup) {
                        baselines_warm(bl);
                        continue;
                }
                lat[i - a->warmup] = ns;
                r = baselines_after(a, res, bl, i - a->warmup);
                if (r < 0)
                        return r;
        }
        return 0;
}

/*
 * --inflight: the warm-up requests as one stream, then the timed ones in streams of
 * BENCH_STREAM_CHUNK requests or more, each stream followed by the baselines' rounds of its
 * requests (so the two take turns as in the plain loop). Sets res->stream_ns, the streams' time,
 * and res->stream_gbps_median, the median of their rates.
 */
static int run_stream(const Args *a, const Workload *w, kvd_client *mover, const kvd_cache_key *key,
                      uint64_t cache, const uint64_t *src_ids, const uint64_t *dst_ids,
                      const kvd_transfer_opts *opts, Baselines *bl, Result *res, double *lat,
                      StatusProbe *probe, int64_t loop_t0[static 2])
{
        uint64_t chunk = MAX(BENCH_STREAM_CHUNK, 4 * a->inflight), n_chunks = 0, k;
        _cleanup_free_ double *rates = calloc(a->iterations / chunk + 1, sizeof(double));
        int r;

        if (!rates)
                return -ENOMEM;
        r = stream_requests(a, w, mover, key, cache, src_ids, dst_ids, opts, a->warmup, NULL);
        if (r < 0)
                return r;
        for (uint64_t i = 0; i < a->warmup; i++)
                baselines_warm(bl);
        r = timed_start(a, probe, loop_t0);
        if (r < 0)
                return r;
        res->stream_ns = 0;
        for (uint64_t done = 0; done < a->iterations; done += k) {
                double t0 = now_ns(), ns;

                k = MIN(chunk, a->iterations - done);
                r = stream_requests(a, w, mover, key, cache, src_ids, dst_ids, opts, k, lat + done);
                if (r < 0)
                        return r;
                ns = now_ns() - t0;
                res->stream_ns += ns;
                rates[n_chunks++] = (double)res->bytes * (double)k / ns;
                for (uint64_t i = done; i < done + k; i++) {
                        r = baselines_after(a, res, bl, i);
                        if (r < 0)
                                return r;
                }
        }
        res->stream_gbps_median = median(rates, n_chunks);
        return 0;
}

/*
 * --inflight: kvdist's rates are the streams' (bytes over the time from a stream's first
 * request sent to its last answered), not those of requests one at a time; the latencies stay
 * each request's own, its wait behind the others included.
 */
static void stream_stats(Result *res, const Args *a)
{
        res->kvdist_gbps = (double)res->bytes * (double)a->iterations / res->stream_ns;
        res->kvdist_gbps_median = res->stream_gbps_median;
        res->requests_per_s = (double)a->iterations / (res->stream_ns / 1e9);
}

/*
 * Runs one workload with the block ids @src_ids -> @dst_ids. Each kvdist request is followed by
 * one round of each memcpy baseline (sequential, then the request's scattered segments), so that
 * all see the same moments of a noisy machine (with --inflight, each stream by the rounds of its
 * requests). iperf3 runs for whole seconds, so it runs IPERF3_RUNS times per case, spread evenly
 * over the timed requests (after the last one of each stretch).
 */
static int run_case(const Args *a, const Workload *w, const uint64_t *src_ids,
                    const uint64_t *dst_ids, Result *res)
{
        _cleanup_(kvd_client_finalizep) kvd_client *pre = NULL, *dec = NULL;
        _cleanup_(bench_memcpy_freep) BenchMemcpy *base = NULL, *scat = NULL;
        _cleanup_(bench_unix_freep) BenchUnix *unix_rtt = NULL;
        _cleanup_(probe_stopp) StatusProbe probe = {};
        _cleanup_free_ double *lat = calloc(a->iterations, sizeof(double));
        _cleanup_free_ double *base_ns = calloc(a->iterations, sizeof(double));
        _cleanup_free_ double *scat_ns = calloc(a->iterations, sizeof(double));
        _cleanup_free_ double *post_ns = calloc(a->iterations, sizeof(double));
        Baselines bl = {
                .base_ns = base_ns,
                .scat_ns = scat_ns,
                .runs = a->baseline == BASELINE_IPERF3 || a->baseline == BASELINE_UCX
                                ? MIN(a->iterations, IPERF3_RUNS)
                        : a->baseline == BASELINE_MEMCPY || a->baseline == BASELINE_UNIX
                                ? a->iterations
                                : 0,
        };
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        kvd_cluster_info peer = {a->push ? DECODE_CLUSTER : PREFILL_CLUSTER,
                                 a->push ? KVD_ROLE_DECODER : KVD_ROLE_PROMPT,
                                 a->push ? a->decode_addr : a->prefill_addr, NULL};
        kvd_cache_key key = kvd_key_blocks(peer.remote_cluster_id, 0);
        uint64_t pre_cache, dec_cache, cache;
        uint8_t *pre_mem, *dec_mem;
        int64_t loop_t0[2] = {-1, -1};
        kvd_client *mover;
        int r;

        res->loop_cpu_prefill_us = res->loop_cpu_decode_us = -1;
        if (!lat || !base_ns || !scat_ns || !post_ns)
                return -ENOMEM;
        /* The side the other links to is a server: at its daemon's peer address when that is
         * another daemon, else on a port of its own. */
        r = side_open(a, w, a->prefill_socket, PREFILL_CLUSTER, KVD_ROLE_PROMPT,
                      a->push ? NULL : peer.remote_ip_info ?: "127.0.0.1:0", &pre, &pre_mem,
                      &pre_cache);
        if (r < 0)
                return r;
        r = side_open(a, w, a->decode_socket, DECODE_CLUSTER, KVD_ROLE_DECODER,
                      a->push ? peer.remote_ip_info ?: "127.0.0.1:0" : NULL, &dec, &dec_mem,
                      &dec_cache);
        if (r < 0)
                return r;
        bench_pattern_fill(pre_mem, 0, w->tensors * w->blocks * w->block_size, a->seed);
        if (a->baseline == BASELINE_MEMCPY) {
                r = bench_memcpy_new(res->bytes, (unsigned)a->copy_threads, &base);
                if (r < 0)
                        return r;
                r = bench_scattered_baseline(a, w, src_ids, dst_ids, &scat);
                if (r < 0)
                        return r;
        }
        if (a->baseline == BASELINE_UNIX) {
                r = bench_unix_new(BENCH_UNIX_MSG_BYTES, &unix_rtt);
                if (r < 0)
                        return r;
        }

        bl.base = base;
        bl.scat = scat;
        bl.unix_rtt = unix_rtt;

        /* Links are one-sided: the cluster that starts the transfers links to the other (on
         * another daemon: at that daemon's peer address). */
        mover = a->push ? pre : dec;
        cache = a->push ? pre_cache : dec_cache;
        r = kvd_link_clusters(mover, &peer, 1, (int)a->timeout_ms, NULL);
        if (r < 0)
                return fail(mover, "kvd_link_clusters", r);

        if (a->layer_compute_us > 0) {
                r = run_layered(a, w, mover, &key, cache, src_ids, dst_ids, res);
                if (r < 0)
                        return r;
                return bench_verify(a, w, pre_mem, dec_mem, src_ids, dst_ids);
        }

        opts.tensor_num_per_layer = w->tensors % 2 ? 1 : 2;
        opts.timeout_ms = (int32_t)a->timeout_ms;
        if (a->inflight > 1)
                r = run_stream(a, w, mover, &key, cache, src_ids, dst_ids, &opts, &bl, res, lat,
                               &probe, loop_t0);
        else
                r = run_one_by_one(a, w, mover, &key, cache, src_ids, dst_ids, &opts, &bl, res, lat,
                                   post_ns, &probe, loop_t0);
        if (r < 0)
                return r;
        /* before the probe stops: its calls are the loop's work too, and are said beside it */
        loop_cpu_result(a, loop_t0, res);
        r = probe_stop(&probe, res);
        if (r < 0)
                return r;
        r = bench_verify(a, w, pre_mem, dec_mem, src_ids, dst_ids);
        if (r < 0)
                return r;
        result_stats(res, a, lat, base_ns, scat ? scat_ns : NULL, bl.n);
        if (a->inflight > 1)
                stream_stats(res, a);
        if (a->batch > 0)
                percentiles_us(post_ns, a->iterations, &res->post_p50_us, &res->post_p99_us);
        return 0;
}

/* Picks the block ids of @w's requests and runs it. */
static int run_workload(const Args *a, const Workload *w, Result *res)
{
        _cleanup_free_ uint64_t *src = calloc(w->pull_blocks, sizeof(uint64_t));
        _cleanup_free_ uint64_t *dst = calloc(w->pull_blocks, sizeof(uint64_t));
        int r = -ENOMEM;

        if (src && dst && w->scattered)
                r = MIN(bench_random_ids(src, w->pull_blocks, w->blocks,
                                         bench_splitmix64(a->seed + 1)),
                        bench_random_ids(dst, w->pull_blocks, w->blocks,
                                         bench_splitmix64(a->seed + 2)));
        else if (src && dst) {
                for (uint64_t i = 0; i < w->pull_blocks; i++)
                        src[i] = dst[i] = i;
                r = 0;
        }
        if (r == 0) {
                *res = (Result){
                        .w = *w,
                        .bytes = w->tensors * w->pull_blocks * w->block_size,
                        .segments = bench_plan_segments(w, src, dst, NULL),
                };
                r = run_case(a, w, src, dst, res);
        }
        /* -EIO, -EBADMSG and -EPIPE were explained where they arose. */
        if (r < 0 && r != -EIO && r != -EBADMSG && r != -EPIPE)
                fprintf(stderr, "kvdist-bench: %s: %s\n", w->name, strerror(-r));
        return r;
}

/* A random key for the benchmark's daemons, so that they prove it to each other as in use. */
static int make_cluster_key(char key[static 65])
{
        uint8_t raw[32];

        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        for (size_t i = 0; i < sizeof(raw); i++)
                (void)snprintf(key + 2 * i, 3, "%02x", raw[i]);
        return 0;
}

/*
 * Starts the daemons the run needs: one, or with --remote two that listen for peers on
 * loopback, the prefill cluster's first. Sets where each side attaches and links to.
 */
static int start_daemons(Args *a, BenchDaemon d[static 2])
{
        _cleanup_free_ char *path = bench_daemon_find(a->daemon_path);
        char key[65];
        BenchDaemonOptions o = {
                .path = path,
                .copy_threads = a->copy_threads,
                .tcp_crc = -1,
        };
        int r;

        if (!path)
                return -ENOMEM;
        if (a->remote) {
                r = make_cluster_key(key);
                if (r < 0)
                        return r;
                o.listen = "127.0.0.1:0";
                o.cluster_key = key;
                o.tcp_streams = a->tcp_streams;
                o.tcp_crc = a->tcp_crc;
                o.rdma_device = a->rdma_device;
        }
        for (unsigned i = 0; i < (a->remote ? 2u : 1u); i++) {
                r = bench_daemon_start(&o, &d[i]);
                if (r < 0) {
                        fprintf(stderr, "kvdist-bench: cannot start %s: %s\n", path,
                                r == -ECHILD   ? "it exited"
                                : r == -EPROTO ? "its status names no peer address"
                                               : strerror(-r));
                        return r;
                }
        }
        a->prefill_socket = d[0].socket;
        a->decode_socket = a->remote ? d[1].socket : d[0].socket;
        a->prefill_pid = d[0].pid;
        a->decode_pid = a->remote ? d[1].pid : d[0].pid;
        if (a->remote) {
                a->prefill_addr = d[0].peer_listen;
                a->decode_addr = d[1].peer_listen;
        }
        return 0;
}

int main(int argc, char **argv)
{
        Workload workloads[BENCH_SUITE_CASES];
        Result results[BENCH_SUITE_CASES];
        BenchDaemon d[2] = {};
        size_t n, done = 0;
        bool failed;
        Args a;
        int r;

        r = bench_parse_args(argc, argv, &a);
        if (r != 0)
                return r > 0 ? EXIT_SUCCESS : EXIT_USAGE;
        if (a.suite)
                bench_suite_workloads(a.remote, workloads);
        else
                workloads[0] = a.w;
        n = a.suite ? BENCH_SUITE_CASES : 1;

        /* Without the baseline there is nothing to compare with: say so before any work. */
        if (a.baseline == BASELINE_IPERF3) {
                r = bench_iperf3_find(a.iperf3, &a.iperf3_path);
                if (r < 0) {
                        fprintf(stderr,
                                "kvdist-bench: %s: iperf3 not found%s; the %s baseline "
                                "needs it (Debian package iperf3, which scripts/setup-deps "
                                "installs), or run with --baseline none\n",
                                a.iperf3, strchr(a.iperf3, '/') ? "" : " on $PATH",
                                baseline_names[a.baseline]);
                        return r == -ENOENT ? EXIT_NO_BASELINE : EXIT_BENCH_FAILED;
                }
        }
        if (a.baseline == BASELINE_UCX) {
                r = bench_iperf3_find(a.ucx, &a.ucx_path);
                if (r < 0) {
                        fprintf(stderr,
                                "kvdist-bench: %s: ucx_perftest not found%s; the ucx baseline "
                                "needs it (Debian package ucx-utils, which scripts/setup-deps "
                                "installs), or run with --baseline none\n",
                                a.ucx, strchr(a.ucx, '/') ? "" : " on $PATH");
                        return r == -ENOENT ? EXIT_NO_BASELINE : EXIT_BENCH_FAILED;
                }
        }

        if (a.socket_path)
                a.prefill_socket = a.decode_socket = a.socket_path;
        else
                r = start_daemons(&a, d);
        if (r >= 0) {
                if (!a.json)
                        bench_report_header(&a);
                for (; done < n; done++) {
                        r = run_workload(&a, &workloads[done], &results[done]);
                        if (r < 0)
                                break;
                        if (!a.json)
                                bench_report_row(&a, &results[done]);
                }
                if (a.json)
                        bench_report_json(&a, results, done);
        }
        /* Both stop either way: a crash of either is a failure of the run. After a failure
         * their logs may say why. */
        failed = r < 0;
        if (bench_daemon_stop(&d[1], failed) < 0 && r >= 0)
                r = -ECHILD;
        if (bench_daemon_stop(&d[0], failed) < 0 && r >= 0)
                r = -ECHILD;
        free(a.iperf3_path);
        free(a.ucx_path);
        if (r == -EPIPE)
                return EXIT_NO_BASELINE;
        return r < 0 ? EXIT_BENCH_FAILED : EXIT_SUCCESS;
}
