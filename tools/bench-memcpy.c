/* SPDX-License-Identifier: MIT */
/* kvdist-bench's same-node baseline: a plain multi-threaded memcpy of one request's bytes. */
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

typedef struct CopyPart {
        BenchMemcpy *baseline;
        pthread_t thread;
        uint8_t *dst;
        const uint8_t *src;
        size_t len;
} CopyPart;

/* Woken for each round as the daemon's copy threads are (a mutex and a condition variable). */
struct BenchMemcpy {
        pthread_mutex_t lock;
        pthread_cond_t wake, done;
        uint64_t round;   /* bumped to start a round */
        unsigned copying; /* parts of the round not finished yet */
        bool stop;
        uint8_t *src, *dst;
        uint64_t bytes;
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
                memcpy(p->dst, p->src, p->len);
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
                (void)munmap(b->src, b->bytes);
        if (b->dst)
                (void)munmap(b->dst, b->bytes);
        free(b);
        return NULL;
}

int bench_memcpy_new(uint64_t bytes, unsigned n_threads, BenchMemcpy **ret)
{
        _cleanup_(bench_memcpy_freep) BenchMemcpy *b = calloc(1, sizeof(*b));
        size_t part = bytes / n_threads;
        int r;

        if (!b)
                return -ENOMEM;
        pthread_mutex_init(&b->lock, NULL);
        pthread_cond_init(&b->wake, NULL);
        pthread_cond_init(&b->done, NULL);
        b->bytes = bytes;
        b->n_threads = n_threads;
        b->src = shared_alloc(bytes);
        b->dst = shared_alloc(bytes);
        if (!b->src || !b->dst)
                return -ENOMEM;
        memset(b->src, 0x5a, bytes);
        for (; b->n_started < n_threads; b->n_started++) {
                unsigned k = b->n_started;

                b->parts[k] = (CopyPart){b, 0, b->dst + k * part, b->src + k * part,
                                         k + 1 == n_threads ? bytes - k * part : part};
                r = -pthread_create(&b->parts[k].thread, NULL, copy_thread, &b->parts[k]);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(b);
        return 0;
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
