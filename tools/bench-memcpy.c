/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's same-node baselines: a plain multi-threaded memcpy of one request's bytes, in
 * one sequential run or in the request's own scattered segments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench-memcpy.h"

static double now_ns(void)
{
        struct timespec ts;

        (void)clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One thread's share: @bytes bytes of the segment list, from segment @seg at @offset. */
typedef struct CopyPart {
        BenchMemcpy *baseline;
        pthread_t thread;
        size_t seg;
        uint64_t offset;
        uint64_t bytes;
} CopyPart;

/* Woken for each round as the daemon's copy threads are (a mutex and a condition variable). */
struct BenchMemcpy {
        pthread_mutex_t lock;
        pthread_cond_t wake, done;
        uint64_t round;   /* bumped to start a round */
        unsigned copying; /* parts of the round not finished yet */
        bool stop;
        uint8_t *src, *dst;
        uint64_t src_bytes, dst_bytes;
        BenchSegment *segs;
        size_t n_segs;
        unsigned n_threads, n_started;
        CopyPart parts[BENCH_MEMCPY_MAX_THREADS];
};

/* Memory of the kind kvd_mem_alloc() hands out (shared memfd pages), so the two compare. */
static void *shared_alloc(size_t size)
{
        _cleanup_close_ int fd = memfd_create("kvdist-bench", MFD_CLOEXEC);
        void *p;

        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
                return NULL;
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        return p == MAP_FAILED ? NULL : p;
}

static void part_copy(const BenchMemcpy *b, const CopyPart *p)
{
        size_t s = p->seg;
        uint64_t off = p->offset, left = p->bytes;

        while (left > 0) {
                const BenchSegment *seg = &b->segs[s];
                uint64_t n = MIN(seg->len - off, left);

                memcpy(b->dst + seg->dst_offset + off, b->src + seg->src_offset + off, n);
                left -= n;
                s++;
                off = 0;
        }
}

static void *copy_thread(void *userdata)
{
        CopyPart *p = userdata;
        BenchMemcpy *b = p->baseline;
        uint64_t seen = 0;

        pthread_mutex_lock(&b->lock);
        for (;;) {
                while (!b->stop && b->round == seen)
                        pthread_cond_wait(&b->wake, &b->lock);
                if (b->stop)
                        break;
                seen = b->round;
                pthread_mutex_unlock(&b->lock);
                part_copy(b, p);
                pthread_mutex_lock(&b->lock);
                if (--b->copying == 0)
                        pthread_cond_signal(&b->done);
        }
        pthread_mutex_unlock(&b->lock);
        return NULL;
}

BenchMemcpy *bench_memcpy_free(BenchMemcpy *b)
{
        if (!b)
                return NULL;
        pthread_mutex_lock(&b->lock);
        b->stop = true;
        pthread_cond_broadcast(&b->wake);
        pthread_mutex_unlock(&b->lock);
        for (unsigned k = 0; k < b->n_started; k++)
                (void)pthread_join(b->parts[k].thread, NULL);
        pthread_cond_destroy(&b->done);
        pthread_cond_destroy(&b->wake);
        pthread_mutex_destroy(&b->lock);
        if (b->src)
                (void)munmap(b->src, b->src_bytes);
        if (b->dst)
                (void)munmap(b->dst, b->dst_bytes);
        free(b->segs);
        free(b);
        return NULL;
}

int bench_memcpy_new_segments(uint64_t src_bytes, uint64_t dst_bytes, const BenchSegment *segs,
                              size_t n_segs, unsigned n_threads, BenchMemcpy **ret)
{
        _cleanup_(bench_memcpy_freep) BenchMemcpy *b = calloc(1, sizeof(*b));
        uint64_t total = 0, part, start = 0, before = 0;
        size_t s = 0;
        int r;

        if (!b)
                return -ENOMEM;
        if (n_threads < 1 || n_threads > BENCH_MEMCPY_MAX_THREADS || n_segs == 0)
                return -EINVAL;
        for (size_t i = 0; i < n_segs; i++) {
                if (segs[i].len == 0 || segs[i].src_offset + segs[i].len > src_bytes ||
                    segs[i].dst_offset + segs[i].len > dst_bytes)
                        return -EINVAL;
                total += segs[i].len;
        }
        pthread_mutex_init(&b->lock, NULL);
        pthread_cond_init(&b->wake, NULL);
        pthread_cond_init(&b->done, NULL);
        b->src_bytes = src_bytes;
        b->dst_bytes = dst_bytes;
        b->n_threads = n_threads;
        b->segs = calloc(n_segs, sizeof(*segs));
        if (!b->segs)
                return -ENOMEM;
        memcpy(b->segs, segs, n_segs * sizeof(*segs));
        b->n_segs = n_segs;
        b->src = shared_alloc(src_bytes);
        b->dst = shared_alloc(dst_bytes);
        if (!b->src || !b->dst)
                return -ENOMEM;
        memset(b->src, 0x5a, src_bytes);
        memset(b->dst, 0, dst_bytes);

        /* Equal shares of the bytes, a segment cut where a share ends, as the engine's jobs. */
        part = total / n_threads;
        for (; b->n_started < n_threads; b->n_started++) {
                unsigned k = b->n_started;
                uint64_t want = k + 1 == n_threads ? total - start : part;

                /* skip the segments that end before this share starts */
                while (s < n_segs && before + b->segs[s].len <= start) {
                        before += b->segs[s].len;
                        s++;
                }
                b->parts[k] = (CopyPart){b, 0, s, start - before, want};
                start += want;
                r = -pthread_create(&b->parts[k].thread, NULL, copy_thread, &b->parts[k]);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(b);
        return 0;
}

int bench_memcpy_new(uint64_t bytes, unsigned n_threads, BenchMemcpy **ret)
{
        BenchSegment one = {0, 0, bytes};

        return bench_memcpy_new_segments(bytes, bytes, &one, 1, n_threads, ret);
}

double bench_memcpy_round(BenchMemcpy *b)
{
        double t0 = now_ns();

        pthread_mutex_lock(&b->lock);
        b->round++;
        b->copying = b->n_threads;
        pthread_cond_broadcast(&b->wake);
        while (b->copying > 0)
                pthread_cond_wait(&b->done, &b->lock);
        pthread_mutex_unlock(&b->lock);
        return now_ns() - t0;
}
