/* SPDX-License-Identifier: MIT */
/*
 * The copy engine wakes the event loop only once the thread that finished a task has let go of
 * the engine's lock (wake-fixture.h: each wake-up waits for another thread to take the lock,
 * through engine_hold()). Real threads; every byte of every copy is checked.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/transport/engine.h"
#include "tests/unit/engine-fixture.h"
#include "tests/unit/wake-fixture.h"

/* wake_watch()'s @take: engine_hold(false) takes the lock, changes nothing and lets go. */
static void take_engine_lock(void *userdata)
{
        engine_hold(userdata, false);
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
        wake_watch(take_engine_lock, e, UINT_MAX);
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
        wake_unwatch();
        engine_free(e);
        event_base_free(base);
        free(src);

        /* at least one wake-up a round, none with the lock held */
        ck_assert_msg(wake_blocked() == 0,
                      "the loop was woken while a thread held the engine's lock");
        ck_assert_uint_ge(wake_looked(), ROUNDS);
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
