/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the copy engine's prepared tasks: copy lists made on the copy threads, in
 * shares side by side, each copied as soon as it is made; real threads, every byte checked.
 */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/time-util.h"
#include "daemon/transport/engine.h"
#include "tests/unit/engine-fixture.h"

/* The most any wait in these tests lasts before it gives up: readiness ends it long before. */
#define CEILING_MS 10000

/*
 * What a prepare step makes: @n copies of @len bytes in all, copy i from src + i*len to slot
 * n-1-i, share k of K being copies [n*k/K, n*(k+1)/K).
 */
typedef struct Prep {
        uint8_t *dst;
        const uint8_t *src;
        size_t n;
        size_t len;
        int fail; /* returned instead by share @fail_part, when negative */
        size_t fail_part;
        atomic_uint called;    /* steps run */
        atomic_uint parts;     /* bit k: share k was asked for */
        atomic_size_t n_parts; /* the n_parts of the last call */
        /* side by side: each step waits (up to CEILING_MS) until @meet steps are in at once */
        unsigned meet;
        atomic_uint in;
        atomic_uint most; /* the most steps that were in at once */
        /* pipelined: share 1 waits (up to CEILING_MS) for share 0's bytes to land */
        bool wait_for_first;
        bool saw_first; /* written by share 1's step only */
} Prep;

/* Whether copies [lo, hi) of @p landed. */
static bool prep_landed(const Prep *p, size_t lo, size_t hi)
{
        for (size_t i = lo; i < hi; i++)
                if (memcmp(p->dst + (p->n - 1 - i) * p->len, p->src + i * p->len, p->len) != 0)
                        return false;
        return true;
}

static void prep_meet(Prep *p)
{
        unsigned in = atomic_fetch_add(&p->in, 1) + 1, most = atomic_load(&p->most);
        usec_t until = now_usec(CLOCK_MONOTONIC) + CEILING_MS * USEC_PER_MSEC;

        while (in > most && !atomic_compare_exchange_weak(&p->most, &most, in))
                ;
        while (atomic_load(&p->most) < p->meet && now_usec(CLOCK_MONOTONIC) < until)
                (void)usleep(100);
        atomic_fetch_sub(&p->in, 1);
}

static int prep_make(void *userdata, size_t part, size_t n_parts, EngineCopy **ret_copies,
                     size_t *ret_n)
{
        Prep *p = userdata;

        atomic_fetch_add(&p->called, 1);
        atomic_fetch_or(&p->parts, 1u << part);
        atomic_store(&p->n_parts, n_parts);
        if (p->meet > 0)
                prep_meet(p);
        if (p->wait_for_first && part == 1) {
                usec_t until = now_usec(CLOCK_MONOTONIC) + CEILING_MS * USEC_PER_MSEC;

                while (!prep_landed(p, 0, p->n / n_parts) && now_usec(CLOCK_MONOTONIC) < until)
                        (void)usleep(100);
                p->saw_first = prep_landed(p, 0, p->n / n_parts);
        }
        if (p->fail < 0 && part == p->fail_part)
                return p->fail;
        return reversed_share(p->dst, p->src, p->n, p->len, part, n_parts, ret_copies, ret_n);
}

/* @p over a fresh guarded @dst of @n copies of @len bytes from @src, nothing else set. */
static void prep_init(Prep *p, Buf *dst, const uint8_t *src, size_t n, size_t len)
{
        buf_init(dst, n * len);
        *p = (Prep){.dst = buf_data(dst), .src = src, .n = n, .len = len};
}

/* Every copy of @p landed in @dst, nothing around it was written; then @dst goes. */
static void prep_assert_landed(const Prep *p, Buf *dst)
{
        if (!prep_landed(p, 0, p->n))
                ck_abort_msg("a copy landed wrong");
        assert_guards(dst);
        buf_deinit(dst);
}

/* Runs one prepared task of @p on a new engine of @n_threads threads; its status. */
static int run_prepared(unsigned n_threads, Prep *p, size_t max_parts)
{
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        Done d = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, n_threads, &e), 0);
        d.counter = &counter;
        /* a task first, and a pause, so that the threads are asleep on the queue when the test's
         * task comes, as in a daemon between requests, not just starting */
        {
                Prep none = {};

                ck_assert_int_eq(
                        engine_submit_prepare(e, prep_make, &none, n_threads, on_done, &d, NULL),
                        0);
                run_until(base, &counter, 1);
                (void)usleep(20000);
        }
        d = (Done){.counter = &counter};
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, p, max_parts, on_done, &d, &d.task),
                         0);
        run_until(base, &counter, 2);
        ck_assert_uint_eq(d.calls, 1);
        engine_free(e);
        event_base_free(base);
        return d.status;
}

START_TEST(test_prepare)
{
        enum { N = 20000, LEN = 256 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new((size_t)N * LEN, 11);
        Buf dst, empty;
        Prep p, p0 = {};
        Done d = {}, d0 = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        ck_assert_int_eq(engine_submit_prepare(e, NULL, NULL, 1, on_done, NULL, NULL), -EINVAL);
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, NULL, 1, NULL, NULL, NULL), -EINVAL);
        prep_init(&p, &dst, src, N, LEN);
        buf_init(&empty, 64);
        p0.dst = buf_data(&empty);
        p0.src = src;
        d.counter = d0.counter = &counter;

        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &p, 1, on_done, &d, &d.task), 0);
        /* a prepared task of no copies completes all the same, through the loop */
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &p0, 0, on_done, &d0, &d0.task), 0);
        ck_assert_uint_eq(d.calls + d0.calls, 0);
        run_until(base, &counter, 2);

        ck_assert_uint_eq(d.calls, 1);
        ck_assert_int_eq(d.status, 0);
        ck_assert_uint_eq(atomic_load(&p.called), 1);
        ck_assert_uint_eq(atomic_load(&p.n_parts), 1);
        prep_assert_landed(&p, &dst);
        ck_assert_uint_eq(d0.calls, 1);
        ck_assert_int_eq(d0.status, 0);
        ck_assert_uint_eq(atomic_load(&p0.called), 1);
        ck_assert(buf_untouched(&empty));
        assert_guards(&empty);

        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        ck_assert_uint_eq(counter, 2);
        engine_free(e);
        buf_deinit(&empty);
        free(src);
        event_base_free(base);
}
END_TEST

/* A list made in shares: one per thread at most, each asked for once, every byte copied once. */
START_TEST(test_prepare_parts)
{
        enum { N = 30001, LEN = 128 };
        static const struct {
                unsigned threads;
                size_t max_parts, want;
        } cases[] = {{3, 8, 3}, {3, 2, 2}, {4, 4, 4}, {2, 1, 1}};
        uint8_t *src = pattern_new((size_t)N * LEN, 14);

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                Buf dst;
                Prep p;

                prep_init(&p, &dst, src, N, LEN);
                ck_assert_int_eq(run_prepared(cases[c].threads, &p, cases[c].max_parts), 0);
                ck_assert_uint_eq(atomic_load(&p.called), cases[c].want);
                ck_assert_uint_eq(atomic_load(&p.n_parts), cases[c].want);
                ck_assert_uint_eq(atomic_load(&p.parts), (1u << cases[c].want) - 1);
                prep_assert_landed(&p, &dst);
        }
        free(src);
}
END_TEST

/* The shares are made at the same time on different threads, not one after the other. */
START_TEST(test_prepare_parts_side_by_side)
{
        enum { N = 4096, LEN = 64 };
        uint8_t *src = pattern_new((size_t)N * LEN, 15);
        Buf dst;
        Prep p;

        prep_init(&p, &dst, src, N, LEN);
        p.meet = 2;
        ck_assert_int_eq(run_prepared(2, &p, 2), 0);
        ck_assert_uint_eq(atomic_load(&p.called), 2);
        ck_assert_uint_eq(atomic_load(&p.most), 2);
        prep_assert_landed(&p, &dst);
        free(src);
}
END_TEST

/* A share's copies start while the next share is still being made. */
START_TEST(test_prepare_parts_pipelined)
{
        enum { N = 4096, LEN = 1024 };
        uint8_t *src = pattern_new((size_t)N * LEN, 16);
        Buf dst;
        Prep p;

        prep_init(&p, &dst, src, N, LEN);
        p.wait_for_first = true;
        ck_assert_int_eq(run_prepared(2, &p, 2), 0);
        ck_assert(p.saw_first);
        prep_assert_landed(&p, &dst);
        free(src);
}
END_TEST

/*
 * A prepared task streams its copies (copy-stream.h) by its whole size: two shares of 8.2 MiB
 * make a task of 16 MiB or more; two of 6 MiB do not.
 */
START_TEST(test_prepare_streams_by_task)
{
        enum { LEN = 4096 };
        static const struct {
                size_t n;
                bool streams;
        } cases[] = {{4200, true}, {3000, false}};
        struct event_base *base = event_base_new();
        Engine *e = NULL;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                uint8_t *src = pattern_new(cases[k].n * LEN, 17 + (uint32_t)k);
                size_t before = engine_bytes_streamed(e), total = cases[k].n * LEN;
                unsigned counter = 0;
                Done d = {.counter = &counter};
                Buf dst;
                Prep p;

                prep_init(&p, &dst, src, cases[k].n, LEN);
                ck_assert_int_eq(engine_submit_prepare(e, prep_make, &p, 2, on_done, &d, &d.task),
                                 0);
                run_until(base, &counter, 1);
                ck_assert_int_eq(d.status, 0);
                ck_assert_uint_eq(atomic_load(&p.n_parts), 2);
                prep_assert_landed(&p, &dst);
                assert_streamed(e, before, total, cases[k].streams);
                free(src);
        }
        engine_free(e);
        event_base_free(base);
}
END_TEST

START_TEST(test_prepare_fails)
{
        enum { N = 64, LEN = 4096 };
        uint8_t *src = pattern_new((size_t)N * LEN, 12);
        Buf dst;
        Prep p;

        prep_init(&p, &dst, src, N, LEN);
        p.fail = -ENOMEM;
        ck_assert_int_eq(run_prepared(2, &p, 1), -ENOMEM);
        ck_assert_uint_eq(atomic_load(&p.called), 1);
        ck_assert(buf_untouched(&dst));
        assert_guards(&dst);

        /* one share of two fails: the task reports its error; the other share's copies may
         * have landed, each whole, and nothing else */
        buf_deinit(&dst);
        prep_init(&p, &dst, src, N, LEN);
        p.fail = -EFAULT;
        p.fail_part = 1;
        ck_assert_int_eq(run_prepared(2, &p, 2), -EFAULT);
        ck_assert_uint_eq(atomic_load(&p.called), 2);
        for (size_t i = 0; i < N; i++) {
                const uint8_t *slot = buf_data(&dst) + (N - 1 - i) * LEN;
                bool fresh = true;

                for (size_t b = 0; b < LEN; b++)
                        fresh = fresh && slot[b] == FRESH_BYTE;
                if (i >= N / 2 && !fresh)
                        ck_abort_msg("copy %zu of the failed share was made", i);
                if (!fresh && !prep_landed(&p, i, i + 1))
                        ck_abort_msg("copy %zu landed wrong", i);
        }
        assert_guards(&dst);
        buf_deinit(&dst);
        free(src);
}
END_TEST

START_TEST(test_prepare_cancelled)
{
        enum { N = 64, LEN = 4096 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new((size_t)N * LEN, 13);
        Buf a, b;
        Prep pa = {}, pb = {}, pc = {};
        Done da = {}, db = {}, dc = {};
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        buf_init(&a, (size_t)N * LEN);
        buf_init(&b, (size_t)N * LEN);
        pa.dst = buf_data(&a);
        pb.dst = pc.dst = buf_data(&b);
        pa.src = pb.src = pc.src = src;
        pa.n = pb.n = pc.n = N;
        pa.len = pb.len = pc.len = LEN;
        da.counter = db.counter = dc.counter = &counter;

        /* held: no step can have run when b and c are cancelled; theirs never run (c is in
         * two shares: the engine has two threads) */
        engine_hold(e, true);
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &pa, 1, on_done, &da, &da.task), 0);
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &pb, 1, on_done, &db, &db.task), 0);
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &pc, 2, on_done, &dc, &dc.task), 0);
        engine_cancel(db.task);
        engine_cancel(dc.task);
        run_until(base, &counter, 2);
        ck_assert_uint_eq(db.calls, 1);
        ck_assert_int_eq(db.status, -ECANCELED);
        ck_assert_uint_eq(dc.calls, 1);
        ck_assert_int_eq(dc.status, -ECANCELED);
        ck_assert_uint_eq(da.calls, 0);
        engine_hold(e, false);
        run_until(base, &counter, 3);

        ck_assert_uint_eq(da.calls, 1);
        ck_assert_int_eq(da.status, 0);
        ck_assert_uint_eq(atomic_load(&pa.called), 1);
        ck_assert_uint_eq(atomic_load(&pb.called), 0);
        ck_assert_uint_eq(atomic_load(&pc.called), 0);
        if (!prep_landed(&pa, 0, N))
                ck_abort_msg("a copy landed wrong");
        ck_assert(buf_untouched(&b));
        assert_guards(&a);
        assert_guards(&b);

        /* a prepared task still queued when the engine stops: cancelled, its step never run */
        engine_hold(e, true);
        atomic_store(&pb.called, 0);
        db = (Done){.counter = &counter};
        dc = (Done){.counter = &counter};
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &pb, 1, on_done, &db, &db.task), 0);
        ck_assert_int_eq(engine_submit_prepare(e, prep_make, &pc, 2, on_done, &dc, &dc.task), 0);
        engine_free(e);
        ck_assert_uint_eq(counter, 5);
        ck_assert_uint_eq(dc.calls, 1);
        ck_assert_int_eq(dc.status, -ECANCELED);
        ck_assert_uint_eq(atomic_load(&pc.called), 0);
        ck_assert_uint_eq(db.calls, 1);
        ck_assert_int_eq(db.status, -ECANCELED);
        ck_assert_uint_eq(atomic_load(&pb.called), 0);
        ck_assert(buf_untouched(&b));

        buf_deinit(&a);
        buf_deinit(&b);
        free(src);
        event_base_free(base);
}
END_TEST

static Suite *engine_prepare_suite(void)
{
        Suite *s = suite_create("engine-prepare");
        TCase *tc;

        tc = tcase_create("prepare");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_prepare);
        tcase_add_test(tc, test_prepare_parts);
        tcase_add_test(tc, test_prepare_parts_side_by_side);
        tcase_add_test(tc, test_prepare_parts_pipelined);
        tcase_add_test(tc, test_prepare_streams_by_task);
        tcase_add_test(tc, test_prepare_fails);
        tcase_add_test(tc, test_prepare_cancelled);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(engine_prepare_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
