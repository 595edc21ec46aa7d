/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's data: the seeded pattern both caches are filled with, the block ids a request
 * moves, the segments the daemon's planner makes of them (the scattered baseline copies the
 * same), and the check of every byte of both caches after a run.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench-data.h"
#include "common/macro.h"

uint64_t bench_splitmix64(uint64_t x)
{
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

/*
 * Writes bytes [@pos, @pos + @len) of the seeded stream whose word i is splitmix64(seed + i),
 * little-endian; @pos and @len are multiples of 8 (block sizes are).
 */
void bench_pattern_fill(uint8_t *p, uint64_t pos, uint64_t len, uint64_t seed)
{
        for (uint64_t i = 0; i < len / 8; i++) {
                uint64_t v = htole64(bench_splitmix64(seed + pos / 8 + i));

                memcpy(p + 8 * i, &v, sizeof(v));
        }
}

/* Fills @ids with @n distinct block ids below @blocks, in a seeded random order. */
int bench_random_ids(uint64_t *ids, uint64_t n, uint64_t blocks, uint64_t seed)
{
        _cleanup_free_ uint64_t *perm = calloc(blocks, sizeof(*perm));

        if (!perm)
                return -ENOMEM;
        for (uint64_t i = 0; i < blocks; i++)
                perm[i] = i;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t j = i + bench_splitmix64(seed + i) % (blocks - i), t = perm[i];

                perm[i] = perm[j];
                perm[j] = t;
        }
        memcpy(ids, perm, n * sizeof(*ids));
        return 0;
}

/*
 * The copies the daemon's planner makes of a request: tensors lie back to back in one region on
 * each side, and a block that follows the previous one on both sides extends its segment. Fills
 * @ret_segs (when not NULL, room for tensors x pull_blocks) and returns how many there are.
 */
uint64_t bench_plan_segments(const Workload *w, const uint64_t *src, const uint64_t *dst,
                             BenchSegment *ret_segs)
{
        uint64_t n = 0, src_end = UINT64_MAX, dst_end = UINT64_MAX;
        uint64_t tensor_bytes = w->blocks * w->block_size;

        for (uint64_t t = 0; t < w->tensors; t++)
                for (uint64_t i = 0; i < w->pull_blocks; i++) {
                        uint64_t so = t * tensor_bytes + src[i] * w->block_size;
                        uint64_t dof = t * tensor_bytes + dst[i] * w->block_size;

                        if (so != src_end || dof != dst_end) {
                                if (ret_segs)
                                        ret_segs[n] = (BenchSegment){so, dof, 0};
                                n++;
                        }
                        if (ret_segs)
                                ret_segs[n - 1].len += w->block_size;
                        src_end = so + w->block_size;
                        dst_end = dof + w->block_size;
                }
        return n;
}

/*
 * The scattered baseline of a request: the same copies between two buffers of the caches' size,
 * by the same number of threads.
 */
int bench_scattered_baseline(const Args *a, const Workload *w, const uint64_t *src,
                             const uint64_t *dst, BenchMemcpy **ret)
{
        _cleanup_free_ BenchSegment *segs = calloc(w->tensors * w->pull_blocks, sizeof(*segs));
        uint64_t cache_bytes = w->tensors * w->blocks * w->block_size, n;

        if (!segs)
                return -ENOMEM;
        n = bench_plan_segments(w, src, dst, segs);
        return bench_memcpy_new_segments(cache_bytes, cache_bytes, segs, n,
                                         (unsigned)a->copy_threads, ret);
}

/*
 * Checks every block of a cache of @w's shape at @mem: block b of tensor t must hold source block
 * from[b] of tensor t, or zeros where from[b] is UINT64_MAX. Returns the number of bad blocks.
 */
static uint64_t verify_cache(const Workload *w, const uint8_t *mem, const uint64_t *from,
                             uint64_t seed, const char *side)
{
        _cleanup_free_ uint8_t *expect = malloc(w->block_size), *zero = calloc(1, w->block_size);
        uint64_t bad = 0;

        if (!expect || !zero) {
                fprintf(stderr, "kvdist-bench: out of memory while checking %s\n", side);
                return 1;
        }
        for (uint64_t t = 0; t < w->tensors; t++)
                for (uint64_t b = 0; b < w->blocks; b++) {
                        const uint8_t *want = zero;

                        if (from[b] != UINT64_MAX) {
                                bench_pattern_fill(expect,
                                                   (t * w->blocks + from[b]) * w->block_size,
                                                   w->block_size, seed);
                                want = expect;
                        }
                        if (memcmp(mem + (t * w->blocks + b) * w->block_size, want,
                                   w->block_size) == 0)
                                continue;
                        if (bad++ == 0)
                                fprintf(stderr,
                                        "kvdist-bench: %s: %s tensor %" PRIu64 " block %" PRIu64
                                        " should hold %s\n",
                                        w->name, side, t, b,
                                        want == zero ? "zeros (it is no destination)"
                                                     : "its source block");
                }
        return bad;
}

/* Checks both caches after the run; a benchmark that moved wrong bytes measured nothing. */
int bench_verify(const Args *a, const Workload *w, const uint8_t *src_mem, const uint8_t *dst_mem,
                 const uint64_t *src_ids, const uint64_t *dst_ids)
{
        _cleanup_free_ uint64_t *from = malloc(w->blocks * sizeof(uint64_t));
        uint64_t bad;

        if (!from)
                return -ENOMEM;
        for (uint64_t b = 0; b < w->blocks; b++)
                from[b] = UINT64_MAX;
        for (uint64_t i = 0; i < w->pull_blocks; i++)
                from[dst_ids[i]] = src_ids[i];
        bad = verify_cache(w, dst_mem, from, a->seed, "destination");
        for (uint64_t b = 0; b < w->blocks; b++)
                from[b] = b;
        bad += verify_cache(w, src_mem, from, a->seed, "source");
        if (bad == 0)
                return 0;
        fprintf(stderr, "kvdist-bench: %s: %" PRIu64 " blocks hold wrong bytes\n", w->name, bad);
        return -EBADMSG;
}
