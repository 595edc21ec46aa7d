/* SPDX-License-Identifier: MIT */
/* write(2) wrapped to look at the event loop's wake-ups (wake-fixture.h). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/time-util.h"
#include "tests/unit/wake-fixture.h"

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);

typedef struct Taker {
        void (*take)(void *userdata);
        void *userdata;
        atomic_bool took;
} Taker;

static _Atomic(void (*)(void *)) watch_take;
static void *_Atomic watch_userdata;
static atomic_uint watch_left, looked, blocked;

void wake_watch(void (*take)(void *userdata), void *userdata, unsigned max)
{
        atomic_store(&watch_userdata, userdata);
        atomic_store(&watch_left, max);
        atomic_store(&watch_take, take);
}

void wake_unwatch(void)
{
        atomic_store(&watch_take, NULL);
}

unsigned wake_looked(void)
{
        return atomic_load(&looked);
}

unsigned wake_blocked(void)
{
        return atomic_load(&blocked);
}

static void *taker_run(void *userdata)
{
        Taker *t = userdata;

        t->take(t->userdata);
        atomic_store(&t->took, true);
        return NULL;
}

static bool is_eventfd(int fd)
{
        char path[64], target[64];
        ssize_t n;

        (void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
                return false;
        target[n] = '\0';
        return strcmp(target, "anon_inode:[eventfd]") == 0;
}

/* Whether this wake-up is one to look at: one of the @max, and none found blocked before. */
static bool take_one(void)
{
        unsigned left = atomic_load(&watch_left);

        while (left > 0 && !atomic_compare_exchange_weak(&watch_left, &left, left - 1))
                ;
        return left > 0 && atomic_load(&blocked) == 0;
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
        void (*take)(void *) = atomic_load(&watch_take);
        uint64_t v = 0;

        if (take && n == sizeof(v))
                memcpy(&v, buf, sizeof(v));
        if (v == 1 && is_eventfd(fd) && take_one()) {
                Taker *t = calloc(1, sizeof(*t));
                usec_t until = now_usec(CLOCK_MONOTONIC) + WAKE_CEILING_MS * USEC_PER_MSEC;
                pthread_t thread;

                ck_assert_ptr_nonnull(t);
                t->take = take;
                t->userdata = atomic_load(&watch_userdata);
                ck_assert_int_eq(pthread_create(&thread, NULL, taker_run, t), 0);
                while (!atomic_load(&t->took) && now_usec(CLOCK_MONOTONIC) < until)
                        (void)usleep(100);
                atomic_fetch_add(&looked, 1);
                if (atomic_load(&t->took)) {
                        ck_assert_int_eq(pthread_join(thread, NULL), 0);
                        free(t);
                } else {
                        /* it waits for the lock this thread may hold: left to end on its own
                         * (and @t with it, on the way to the test's failure) */
                        atomic_fetch_add(&blocked, 1);
                        ck_assert_int_eq(pthread_detach(thread), 0);
                }
        }
        return __real_write(fd, buf, n);
}
