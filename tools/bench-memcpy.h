/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's same-node baselines: a plain multi-threaded memcpy of one request's bytes, in
 * one sequential run or in the request's own scattered segments.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/macro.h"

#define BENCH_MEMCPY_MAX_THREADS 64

/* One copy of the baseline: @len bytes from @src_offset of the source buffer to @dst_offset. */
typedef struct BenchSegment {
        uint64_t src_offset;
        uint64_t dst_offset;
        uint64_t len;
} BenchSegment;

/*
 * Two buffers, in shared memfd pages as kvd_mem_alloc() hands out, the copies between them and a
 * thread per equal share of their bytes.
 */
typedef struct BenchMemcpy BenchMemcpy;

/*
 * Allocates a source of @src_bytes and a destination of @dst_bytes and starts @n_threads
 * (1..BENCH_MEMCPY_MAX_THREADS) threads that copy the @n_segs segments @segs (copied; each
 * non-empty and inside both buffers), each thread an equal share of their bytes in list order,
 * as the daemon's copy engine cuts a request. On success *@ret owns them. -EINVAL, -ENOMEM, or
 * the error of creating a thread.
 */
int bench_memcpy_new_segments(uint64_t src_bytes, uint64_t dst_bytes, const BenchSegment *segs,
                              size_t n_segs, unsigned n_threads, BenchMemcpy **ret);

/*
 * The sequential baseline: @bytes copied as one run between two buffers of @bytes, in
 * @n_threads contiguous parts. As bench_memcpy_new_segments().
 */
int bench_memcpy_new(uint64_t bytes, unsigned n_threads, BenchMemcpy **ret);

/* Runs one round, every thread copying its part; returns the round's wall time in ns. */
double bench_memcpy_round(BenchMemcpy *b);

/* Stops and joins the threads and unmaps the buffers. Accepts NULL; returns NULL. */
BenchMemcpy *bench_memcpy_free(BenchMemcpy *b);

DEFINE_TRIVIAL_CLEANUP_FUNC(BenchMemcpy, bench_memcpy_free);
