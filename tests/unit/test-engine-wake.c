/* SPDX-License-Identifier: MIT */
/*
 * The copy engine wakes the event loop only once the thread that finished a task has let go of
 * the engine's lock: a loop woken earlier would only wait for the lock, and, raised above the
 * copy threads (control_nice), take the core of the thread that holds it first.
 *
 * Linked with -Wl,--wrap=write: every write of 1 to an eventfd (the engine's wake-up) asks
 * another thread to take the engine's lock (engine_hold() takes it) and waits for that thread,
 * up to CEILING_MS. A wake-up written with the lock held makes that thread wait past the ceiling
 * and is counted (after the first such, wake-ups are no longer looked at). Real threads; every
 * byte of every copy is checked.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/transport/engine.h"
#include "tests/unit/engine-fixture.h"

/* The most a wake-up waits for the other thread to take the lock; readiness ends it at once. */
#define CEILING_MS 10000

static _Atomic(Engine *) watched; /* the engine whose lock a wake-up must not hold */
static atomic_uint wakes, wakes_locked;

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);

typedef struct Taker {
        Engine *engine;
        atomic_bool took;
} Taker;

static void *take_lock(void *userdata)
{
        Taker *t = userdata;

        /* not held: engine_hold(false) takes the lock, changes nothing and lets go */
        engine_hold(t->engine, false);
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

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
        Engine *e = atomic_load(&watched);
        uint64_t v = 0;

        if (e && n == sizeof(v))
                memcpy(&v, buf, sizeof(v));
        /* one wake-up found with the lock held is enough: the others are not waited on */
        if (v == 1 && atomic_load(&wakes_locked) == 0 && is_eventfd(fd)) {
                Taker *t = calloc(1, sizeof(*t));
                pthread_t thread;
                long until = fixture_now_ms() + CEILING_MS;

                ck_assert_ptr_nonnull(t);
                t->engine = e;
                ck_assert_int_eq(pthread_create(&thread, NULL, take_lock, t), 0);
                while (!atomic_load(&t->took) && fixture_now_ms() < until)
                        (void)usleep(100);
                atomic_fetch_add(&wakes, 1);
                if (atomic_load(&t->took)) {
                        ck_assert_int_eq(pthread_join(thread, NULL), 0);
                        free(t);
                } else {
                        /* it waits for the lock this thread may hold: left to end on its own
                         * (and @t with it, on the way to the test's failure) */
                        atomic_fetch_add(&wakes_locked, 1);
                        ck_assert_int_eq(pthread_detach(thread), 0);
                }
        }
        return __real_write(fd, buf, n);
}

/* Copies i of @n, @len bytes each, from @src + i*len to @dst slot n-1-i; share k of K. */
typedef struct Prep {
        uint8_t *dst;
        const uint8_t *src;
        size_t n, len;
} Prep;

static int prep_make(void *userdata, size_t part, size_t n_parts, EngineCopy **ret_copies,
                     size_t *ret_n)
{
        Prep *p = userdata;

        return reversed_share(p->dst, p->src, p->n, p->len, part, n_parts, ret_copies, ret_n);
}

START_TEST(test_wake_without_lock)
{
        enum { N = 64, LEN = 64 * 1024, ROUNDS = 4 };
        struct event_base *base = event_base_new();
        uint8_t *src = pattern_new(N * LEN, 7);
        unsigned finished = 0, want = 0;
        Done plain = {.counter = &finished}, prepared = {.counter = &finished},
             empty = {.counter = &finished};
        EngineCopy copies[N];
        Buf a, b;
        Prep p;
        Engine *e;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        atomic_store(&watched, e);
        for (unsigned round = 0; round < ROUNDS; round++) {
                buf_init(&a, N * LEN);
                buf_init(&b, N * LEN);
                p = (Prep){.dst = buf_data(&b), .src = src, .n = N, .len = LEN};
                for (size_t i = 0; i < N; i++)
                        copies[i] = (EngineCopy){buf_data(&a) + i * LEN, src + i * LEN, LEN};

                /* copied by the threads (above the inline size), made by the threads in four
                 * shares, and nothing to copy (finished on the loop's side) */
                ck_assert_int_eq(engine_submit(e, copies, N, 0, on_done, &plain, NULL), 0);
                ck_assert_int_eq(
                        engine_submit_prepare(e, prep_make, &p, 4, on_done, &prepared, NULL), 0);
                ck_assert_int_eq(engine_submit(e, NULL, 0, 0, on_done, &empty, NULL), 0);
                want += 3;
                run_until(base, &finished, want);

                ck_assert_int_eq(plain.status, 0);
                ck_assert_int_eq(prepared.status, 0);
                ck_assert_int_eq(empty.status, 0);
                ck_assert_mem_eq(buf_data(&a), src, N * LEN);
                for (size_t i = 0; i < N; i++)
                        ck_assert_mem_eq(buf_data(&b) + (N - 1 - i) * LEN, src + i * LEN, LEN);
                assert_guards(&a);
                assert_guards(&b);
                buf_deinit(&a);
                buf_deinit(&b);
        }
        atomic_store(&watched, NULL);
        engine_free(e);
        event_base_free(base);
        free(src);

        /* at least one wake-up a round, none with the lock held */
        ck_assert_msg(atomic_load(&wakes_locked) == 0,
                      "the loop was woken while a thread held the engine's lock");
        ck_assert_uint_ge(atomic_load(&wakes), ROUNDS);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("engine-wake");
        TCase *tc = tcase_create("wake");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 100);
        tcase_add_test(tc, test_wake_without_lock);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
