/* SPDX-License-Identifier: MIT */
/* kvdist-bench's output: the table a person reads, or one JSON document. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "tools/bench-report.h"
#include "tools/bench-unix.h"
#include "common/macro.h"

const char *const baseline_names[_BASELINE_MAX] = {
        [BASELINE_MEMCPY] = "memcpy", [BASELINE_IPERF3] = "iperf3", [BASELINE_UNIX] = "unix",
        [BASELINE_UCX] = "ucx",       [BASELINE_NONE] = "none",
};

static const char *fmt_bytes(uint64_t v, char buf[static 32])
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double d = (double)v;
        size_t u = 0;

        for (; d >= 1024 && u + 1 < ARRAY_SIZE(units); u++)
                d /= 1024;
        (void)snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", d, units[u]);
        return buf;
}

/* "memcpy by 2 threads", "iperf3 -P 1 on loopback", "no baseline" */
static const char *baseline_desc(const Args *a, char buf[static 64])
{
        if (a->baseline == BASELINE_MEMCPY)
                (void)snprintf(buf, 64, "memcpy by %" PRIu64 " threads", a->copy_threads);
        else if (a->baseline == BASELINE_UNIX)
                (void)snprintf(buf, 64, "a %d-byte Unix socket round trip", BENCH_UNIX_MSG_BYTES);
        else if (a->baseline == BASELINE_UCX)
                (void)snprintf(buf, 64, "ucx_perftest tag_bw over TCP on loopback");
        else if (a->baseline == BASELINE_IPERF3)
                (void)snprintf(buf, 64, "iperf3 -t %" PRIu64 " -P %" PRIu64 " on loopback",
                               a->iperf3_time, a->iperf3_streams);
        else
                (void)snprintf(buf, 64, "no baseline");
        return buf;
}

/*
 * The rates the table shows. Across daemons, the median request: one slow request on a shared
 * machine (a neighbour's burst, a TCP hiccup) moves a mean far more than the median. On one node
 * the rate over all requests, as this table has always shown.
 */
static void shown_rates(const Args *a, const Result *r, double *ret_kvdist, double *ret_base)
{
        *ret_kvdist = a->remote ? r->kvdist_gbps_median : r->kvdist_gbps;
        *ret_base = a->remote ? r->baseline_gbps_median : r->baseline_gbps;
}

void bench_report_header(const Args *a)
{
        char b1[32], b2[32], desc[64], col[32];

        if (a->remote)
                printf("kvdist %s across two kvdistd over TCP (%" PRIu64 " streams, CRC %s) vs "
                       "%s, median of %" PRIu64 " iterations after %" PRIu64 " warm-up, "
                       "GB/s = 1e9 bytes/s\n",
                       a->push ? "push" : "pull", a->tcp_streams, a->tcp_crc ? "on" : "off",
                       baseline_desc(a, desc), a->iterations, a->warmup);
        else
                printf("kvdist %s vs %s, %" PRIu64 " iterations after %" PRIu64 " warm-up, "
                       "GB/s = 1e9 bytes/s\n",
                       a->push ? "push" : "pull", baseline_desc(a, desc), a->iterations, a->warmup);
        if (a->inflight > 1)
                printf("%" PRIu64 " requests in flight: kvdist's rate is its streams' (first "
                       "request sent -> last answered), latencies include the wait\n",
                       a->inflight);
        if (!a->suite)
                printf("%s: %" PRIu64 " tensors x %" PRIu64 " blocks x %s (%s per side), %" PRIu64
                       " %s blocks per request\n",
                       a->w.name, a->w.tensors, a->w.blocks, fmt_bytes(a->w.block_size, b1),
                       fmt_bytes(a->w.tensors * a->w.blocks * a->w.block_size, b2),
                       a->w.pull_blocks, a->w.scattered ? "scattered" : "contiguous");
        if (a->layer_compute_us > 0) {
                printf("layer by layer: each layer computes %" PRIu64 " us, then is sent while "
                       "the next computes; ms\n",
                       a->layer_compute_us);
                printf("%-16s %10s %6s %9s %9s %9s %9s %9s %8s %8s\n", "case", "bytes/req",
                       "layers", "whole p50", "layer p50", "exp. p50", "exp. p99", "layer p99",
                       "exp/lay", "exp/whl");
                return;
        }
        if (a->baseline == BASELINE_UNIX) {
                /* small calls: latencies, and the request's p50 over the round trip's */
                printf("%-16s %10s %8s %11s %9s %9s %9s %9s %6s\n", "case", "bytes/req", "segments",
                       "kvdist GB/s", "p50 us", "p99 us", "unix p50", "unix p99", "x p50");
                return;
        }
        (void)snprintf(col, sizeof(col), "%s GB/s",
                       a->baseline == BASELINE_NONE ? "base" : baseline_names[a->baseline]);
        printf("%-16s %10s %8s %11s %11s %6s", "case", "bytes/req", "segments", "kvdist GB/s", col,
               "ratio");
        if (a->baseline == BASELINE_MEMCPY)
                printf(" %11s %6s", "scat GB/s", "ratio");
        printf(" %9s %8s %8s\n", "req/s", "p50 ms", "p99 ms");
}

/* Whether the loops' CPU per request is known: both daemons' with --remote, else the one's. */
static bool loop_cpu_known(const Args *a, const Result *r)
{
        return r->loop_cpu_decode_us >= 0 && (!a->remote || r->loop_cpu_prefill_us >= 0);
}

/* The lines under a case's row: the daemons' loop CPU, the status probe's and the batch's figures.
 */
static void report_extras(const Args *a, const Result *r)
{
        if (loop_cpu_known(a, r) && a->remote)
                printf("%-16s control loop CPU a request: prefill side's daemon %.1f us, decode "
                       "side's %.1f us%s\n",
                       "", r->loop_cpu_prefill_us, r->loop_cpu_decode_us,
                       a->probe_status ? " (the status calls' included)" : "");
        else if (loop_cpu_known(a, r))
                printf("%-16s control loop CPU a request: %.1f us%s\n", "", r->loop_cpu_decode_us,
                       a->probe_status ? " (the status calls' included)" : "");
        if (a->probe_status)
                printf("%-16s status calls meanwhile: %" PRIu64 ", p50 %.1f us, p99 %.1f us, "
                       "max %.1f us\n",
                       "", r->status_calls, r->status_p50_us, r->status_p99_us, r->status_max_us);
        if (a->batch > 0)
                printf("%-16s one batch of %" PRIu64 " entries a request (%" PRIu64
                       " round trips saved): posted in p50 %.1f us, p99 %.1f us\n",
                       "", a->batch, a->batch - 1, r->post_p50_us, r->post_p99_us);
        (void)fflush(stdout);
}

void bench_report_row(const Args *a, const Result *r)
{
        double kvdist, base;
        char b[32];

        shown_rates(a, r, &kvdist, &base);
        if (a->layer_compute_us > 0) {
                printf("%-16s %10s %6" PRIu64 " %9.3f %9.3f %9.3f %9.3f %9.3f %8.2f %8.2f\n",
                       r->w.name, fmt_bytes(r->bytes, b), r->layers, r->whole_p50_us / 1e3,
                       r->layer_p50_us / 1e3, r->exposed_p50_us / 1e3, r->exposed_p99_us / 1e3,
                       r->layer_p99_us / 1e3, r->exposed_p50_us / r->layer_p50_us,
                       r->exposed_p50_us / r->whole_p50_us);
                (void)fflush(stdout);
                return;
        }
        if (a->baseline == BASELINE_UNIX) {
                printf("%-16s %10s %8" PRIu64 " %11.2f %9.1f %9.1f %9.1f %9.1f %6.2f\n", r->w.name,
                       fmt_bytes(r->bytes, b), r->segments, kvdist, r->lat_p50_us, r->lat_p99_us,
                       r->base_p50_us, r->base_p99_us, r->lat_p50_us / r->base_p50_us);
                report_extras(a, r);
                return;
        }
        printf("%-16s %10s %8" PRIu64 " %11.2f ", r->w.name, fmt_bytes(r->bytes, b), r->segments,
               kvdist);
        if (a->baseline == BASELINE_NONE)
                printf("%11s %6s", "-", "-");
        else
                printf("%11.2f %6.2f", base, kvdist / base);
        if (a->baseline == BASELINE_MEMCPY)
                printf(" %11.2f %6.2f", r->scattered_gbps, r->kvdist_gbps / r->scattered_gbps);
        printf(" %9.1f %8.2f %8.2f\n", r->requests_per_s, r->lat_p50_us / 1e3, r->lat_p99_us / 1e3);
        report_extras(a, r);
}

/* The baseline's figures of one case, for its JSON object ("" without a baseline). */
static void json_baseline(const Args *a, const Result *r)
{
        const char *name = baseline_names[a->baseline];

        if (a->baseline == BASELINE_NONE) {
                printf(", \"ratio\": null, \"ratio_median\": null");
                return;
        }
        if (a->baseline == BASELINE_UNIX) {
                printf(", \"unix_rtt_us\": {\"p50\": %.2f, \"p99\": %.2f}, \"ratio_p50\": %.4f, "
                       "\"ratio_p99\": %.4f",
                       r->base_p50_us, r->base_p99_us, r->lat_p50_us / r->base_p50_us,
                       r->lat_p99_us / r->base_p99_us);
                return;
        }
        printf(", \"%s_gbps\": %.4f, \"%s_gbps_median\": %.4f, \"ratio\": %.4f, "
               "\"ratio_median\": %.4f",
               name, r->baseline_gbps, name, r->baseline_gbps_median,
               r->kvdist_gbps / r->baseline_gbps, r->kvdist_gbps_median / r->baseline_gbps_median);
        if (a->baseline == BASELINE_MEMCPY && r->scattered_gbps > 0)
                printf(", \"memcpy_scattered_gbps\": %.4f, \"memcpy_scattered_gbps_median\": %.4f, "
                       "\"ratio_scattered\": %.4f, \"ratio_scattered_median\": %.4f",
                       r->scattered_gbps, r->scattered_gbps_median,
                       r->kvdist_gbps / r->scattered_gbps,
                       r->kvdist_gbps_median / r->scattered_gbps_median);
}

void bench_report_json(const Args *a, const Result *res, size_t n)
{
        printf("{\"mode\": \"%s\", \"remote\": %s, \"baseline\": \"%s\", \"copy_threads\": "
               "%" PRIu64,
               a->push ? "push" : "pull", a->remote ? "true" : "false", baseline_names[a->baseline],
               a->copy_threads);
        if (a->remote)
                printf(", \"tcp_streams\": %" PRIu64 ", \"tcp_crc\": %s", a->tcp_streams,
                       a->tcp_crc ? "true" : "false");
        if (a->baseline == BASELINE_IPERF3)
                printf(", \"iperf3_streams\": %" PRIu64 ", \"iperf3_seconds\": %" PRIu64
                       ", \"iperf3_runs\": %" PRIu64,
                       a->iperf3_streams, a->iperf3_time, MIN(a->iterations, IPERF3_RUNS));
        printf(", \"iterations\": %" PRIu64 ", \"warmup\": %" PRIu64 ", \"inflight\": %" PRIu64
               ", \"seed\": %" PRIu64 ", \"cases\": [",
               a->iterations, a->warmup, a->inflight, a->seed);
        for (size_t i = 0; i < n; i++) {
                const Result *r = &res[i];

                printf("%s\n  {\"case\": \"%s\", \"block_size\": %" PRIu64 ", \"tensors\": %" PRIu64
                       ", \"blocks\": %" PRIu64 ", \"pull_blocks\": %" PRIu64
                       ", \"pattern\": \"%s\", \"bytes_per_request\": %" PRIu64
                       ", \"segments\": %" PRIu64 ", \"kvdist_gbps\": %.4f, "
                       "\"kvdist_gbps_median\": %.4f",
                       i ? "," : "", r->w.name, r->w.block_size, r->w.tensors, r->w.blocks,
                       r->w.pull_blocks, r->w.scattered ? "scattered" : "contiguous", r->bytes,
                       r->segments, r->kvdist_gbps, r->kvdist_gbps_median);
                json_baseline(a, r);
                if (a->layer_compute_us > 0)
                        printf(", \"layers\": {\"count\": %" PRIu64 ", \"compute_us\": %" PRIu64
                               ", \"exposed_us\": {\"p50\": %.1f, \"p99\": %.1f}, "
                               "\"one_layer_us\": {\"p50\": %.1f, \"p99\": %.1f}, "
                               "\"whole_us\": {\"p50\": %.1f, \"p99\": %.1f}, "
                               "\"exposed_over_layer\": %.4f}",
                               r->layers, a->layer_compute_us, r->exposed_p50_us, r->exposed_p99_us,
                               r->layer_p50_us, r->layer_p99_us, r->whole_p50_us, r->whole_p99_us,
                               r->exposed_p50_us / r->layer_p50_us);
                if (loop_cpu_known(a, r) && a->remote)
                        printf(", \"loop_cpu_us\": {\"prefill\": %.1f, \"decode\": %.1f}",
                               r->loop_cpu_prefill_us, r->loop_cpu_decode_us);
                else if (loop_cpu_known(a, r))
                        printf(", \"loop_cpu_us\": {\"daemon\": %.1f}", r->loop_cpu_decode_us);
                if (a->probe_status)
                        printf(", \"status_us\": {\"calls\": %" PRIu64
                               ", \"p50\": %.1f, \"p99\": %.1f, \"max\": %.1f}",
                               r->status_calls, r->status_p50_us, r->status_p99_us,
                               r->status_max_us);
                if (a->batch > 0)
                        printf(", \"batch\": {\"entries\": %" PRIu64
                               ", \"post_us\": {\"p50\": %.1f, \"p99\": %.1f}}",
                               a->batch, r->post_p50_us, r->post_p99_us);
                printf(", \"requests_per_s\": %.3f, \"latency_us\": {\"mean\": %.1f, \"p50\": "
                       "%.1f, \"p99\": %.1f}, \"verified\": true}",
                       r->requests_per_s, r->lat_mean_us, r->lat_p50_us, r->lat_p99_us);
        }
        printf("\n]}\n");
}
