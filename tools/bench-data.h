/* SPDX-License-Identifier: MIT */
/* kvdist-bench's data: seeded patterns, block ids, their segments, and the check of every byte. */
#pragma once

#include <stdint.h>

#include "tools/bench-memcpy.h"
#include "tools/bench.h"

/* splitmix64: a seed's well-mixed successor, the pattern's words and the ids' draws. */
uint64_t bench_splitmix64(uint64_t x);

/*
 * Writes bytes [@pos, @pos + @len) of the seeded stream whose word i is splitmix64(seed + i),
 * little-endian; @pos and @len are multiples of 8 (block sizes are).
 */
void bench_pattern_fill(uint8_t *p, uint64_t pos, uint64_t len, uint64_t seed);

/* Fills @ids with @n distinct block ids below @blocks, in a seeded random order. */
int bench_random_ids(uint64_t *ids, uint64_t n, uint64_t blocks, uint64_t seed);

/*
 * The copies the daemon's planner makes of a request: tensors lie back to back in one region on
 * each side, and a block that follows the previous one on both sides extends its segment. Fills
 * @ret_segs (when not NULL, room for tensors x pull_blocks) and returns how many there are.
 */
uint64_t bench_plan_segments(const Workload *w, const uint64_t *src, const uint64_t *dst,
                             BenchSegment *ret_segs);

/*
 * The scattered baseline of a request: the same copies between two buffers of the caches' size,
 * by the same number of threads.
 */
int bench_scattered_baseline(const Args *a, const Workload *w, const uint64_t *src,
                             const uint64_t *dst, BenchMemcpy **ret);

/*
 * Checks both caches after the run, every byte: the destination's blocks hold their sources or
 * zeros, the source is unchanged. 0, -ENOMEM, or -EBADMSG (the first bad block named on stderr).
 */
int bench_verify(const Args *a, const Workload *w, const uint8_t *src_mem, const uint8_t *dst_mem,
                 const uint64_t *src_ids, const uint64_t *dst_ids);
