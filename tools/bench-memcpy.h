/* SPDX-License-Identifier: MIT */
/* kvdist-bench's same-node baseline: a plain multi-threaded memcpy of one request's bytes. */
#pragma once

#include <stdint.h>

#include "common/macro.h"

#define BENCH_MEMCPY_MAX_THREADS 64

/*
 * Two buffers of one request's bytes, in shared memfd pages as kvd_mem_alloc() hands out, and a
 * thread per contiguous part of them.
 */
typedef struct BenchMemcpy BenchMemcpy;

/*
 * Allocates the buffers (@bytes each) and starts @n_threads (1..BENCH_MEMCPY_MAX_THREADS)
 * threads. On success *@ret owns them. -ENOMEM, or the error of creating a thread.
 */
int bench_memcpy_new(uint64_t bytes, unsigned n_threads, BenchMemcpy **ret);

/* Runs one round, every thread copying its part; returns the round's wall time in ns. */
double bench_memcpy_round(BenchMemcpy *b);

/* Stops and joins the threads and unmaps the buffers. Accepts NULL; returns NULL. */
BenchMemcpy *bench_memcpy_free(BenchMemcpy *b);

DEFINE_TRIVIAL_CLEANUP_FUNC(BenchMemcpy, bench_memcpy_free);
