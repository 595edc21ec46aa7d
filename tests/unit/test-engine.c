/* SPDX-License-Identifier: MIT */
/* Unit tests for the copy engine: real threads, a real event_base, every byte checked. */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/transport/copy-stream.h"
#include "daemon/transport/engine.h"
#include "tests/unit/engine-fixture.h"

/* ---- tests ---- */

START_TEST(test_new_arguments)
{
        struct event_base *base = event_base_new();
        Engine *e = NULL;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 0, &e), -EINVAL);
        ck_assert_int_eq(engine_new(base, 65, &e), -EINVAL);
        ck_assert_int_eq(engine_new(NULL, 2, &e), -EINVAL);
        ck_assert_ptr_null(e);
        ck_assert_int_eq(engine_new(base, 3, &e), 0);
        ck_assert_uint_eq(engine_n_threads(e), 3);
        ck_assert_int_eq(engine_submit(e, NULL, 1, 0, on_done, NULL, NULL), -EINVAL);
        {
                EngineCopy c = {NULL, "x", 1};
                Done d = {};

                ck_assert_int_eq(engine_submit(e, &c, 1, 0, on_done, &d, NULL), -EINVAL);
                c.dst = &d;
                ck_assert_int_eq(engine_submit(e, &c, 1, 0, NULL, NULL, NULL), -EINVAL);
        }
        ck_assert_ptr_null(engine_free(e));
        ck_assert_ptr_null(engine_free(NULL));
        event_base_free(base);
}
END_TEST

START_TEST(test_big_and_small_tasks)
{
        enum { N_SMALL = 40, BIG = 24 << 20 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        Buf big_dst, small_dst[N_SMALL];
        uint8_t *big_src, *small_src[N_SMALL];
        size_t small_size[N_SMALL];
        Done big_done = {}, small_done[N_SMALL] = {};
        unsigned counter = 0;
        EngineCopy copies[4];

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 4, &e), 0);

        /* big: three pieces, moved around, with an empty copy in the middle */
        big_src = pattern_new(BIG, 1);
        buf_init(&big_dst, BIG);
        copies[0] = (EngineCopy){buf_data(&big_dst) + 16 * (1 << 20), big_src, 8 << 20};
        copies[1] = (EngineCopy){NULL, NULL, 0};
        copies[2] = (EngineCopy){buf_data(&big_dst), big_src + (8 << 20), 16 << 20};
        copies[3] = (EngineCopy){buf_data(&big_dst) + (24 << 20) - 1, big_src, 0};
        big_done.counter = &counter;
        ck_assert_int_eq(engine_submit(e, copies, 4, 64 << 10, on_done, &big_done, &big_done.task),
                         0);
        ck_assert_ptr_nonnull(big_done.task);
        /* the engine keeps its own copy of the array */
        memset(copies, 0xff, sizeof(copies));

        for (int i = 0; i < N_SMALL; i++) {
                EngineCopy c;

                small_size[i] = 1 + (size_t)i * 997 + (i % 7 == 0 ? 300000 : 0);
                small_src[i] = pattern_new(small_size[i], 100 + i);
                buf_init(&small_dst[i], small_size[i]);
                c = (EngineCopy){buf_data(&small_dst[i]), small_src[i], small_size[i]};
                small_done[i].counter = &counter;
                ck_assert_int_eq(
                        engine_submit(e, &c, 1, 0, on_done, &small_done[i], &small_done[i].task),
                        0);
        }

        run_until(base, &counter, N_SMALL + 1);

        ck_assert_uint_eq(big_done.calls, 1);
        ck_assert_int_eq(big_done.status, 0);
        ck_assert_int_eq(memcmp(buf_data(&big_dst) + (16 << 20), big_src, 8 << 20), 0);
        ck_assert_int_eq(memcmp(buf_data(&big_dst), big_src + (8 << 20), 16 << 20), 0);
        assert_guards(&big_dst);
        for (int i = 0; i < N_SMALL; i++) {
                ck_assert_uint_eq(small_done[i].calls, 1);
                ck_assert_int_eq(small_done[i].status, 0);
                ck_assert_int_eq(memcmp(buf_data(&small_dst[i]), small_src[i], small_size[i]), 0);
                assert_guards(&small_dst[i]);
                buf_deinit(&small_dst[i]);
                free(small_src[i]);
        }

        /* no callback runs twice */
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        ck_assert_uint_eq(counter, N_SMALL + 1);

        engine_free(e);
        ck_assert_uint_eq(counter, N_SMALL + 1);
        buf_deinit(&big_dst);
        free(big_src);
        event_base_free(base);
}
END_TEST

/*
 * Scattered copies of odd lengths at odd alignments, @n of them over slots of SLOT bytes, copy i
 * from slot i of @src to slot n-1-i of @dst; each tenth is short (below the streaming minimum).
 * Returns their bytes; @ref, if given, gets the same copies by memcpy().
 */
#define SLOT 4160
static size_t odd_copies(EngineCopy *c, size_t n, uint8_t *dst, const uint8_t *src, uint8_t *ref)
{
        size_t total = 0;

        for (size_t i = 0; i < n; i++) {
                size_t len = i % 10 == 9 ? 100 : 4096 - i % 9;
                size_t to = (n - 1 - i) * SLOT + i % 32, from = i * SLOT + i % 5;

                c[i] = (EngineCopy){dst + to, src + from, len};
                if (ref)
                        memcpy(ref + to, src + from, len);
                total += len;
        }
        return total;
}

/*
 * A task of 16 MiB or more is copied with streaming stores where the CPU has them (AVX2), a
 * smaller one with memcpy(); either way every byte lands, and nothing between or around them.
 * The big task's last copy is streamed too: nothing is fetched ahead past the list's end.
 */
START_TEST(test_big_task_streams)
{
        static const struct {
                size_t n;
                bool streams;
        } cases[] = {{4601, true}, {2000, false}};
        struct event_base *base = event_base_new();
        bool can = copy_stream_available();
        Engine *e = NULL;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        ck_assert_uint_eq(engine_bytes_streamed(e), 0);
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                size_t n = cases[k].n, size = n * SLOT, total, before = engine_bytes_streamed(e);
                uint8_t *src = pattern_new(size, 40 + (uint32_t)k), *ref = malloc(size);
                EngineCopy *c = malloc(n * sizeof(*c));
                unsigned counter = 0;
                Done d = {.counter = &counter};
                Buf dst;

                ck_assert_ptr_nonnull(ref);
                ck_assert_ptr_nonnull(c);
                buf_init(&dst, size);
                memset(ref, FRESH_BYTE, size);
                total = odd_copies(c, n, buf_data(&dst), src, ref);
                ck_assert(cases[k].streams == (total >= (16u << 20)));
                ck_assert_int_eq(engine_submit_take(e, c, n, 0, on_done, &d, &d.task), 0);
                run_until(base, &counter, 1);
                ck_assert_int_eq(d.status, 0);
                if (memcmp(buf_data(&dst), ref, size) != 0)
                        ck_abort_msg("case %zu: a byte landed wrong, or between the copies", k);
                assert_guards(&dst);
                /* the short copies, and the short ends of copies cut between jobs, not */
                assert_streamed(e, before, total, cases[k].streams);
                buf_deinit(&dst);
                free(ref);
                free(src);
        }
        if (!can)
                fprintf(stderr, "test_big_task_streams: this CPU has no streaming copy (AVX2): "
                                "the memcpy() path only\n");
        engine_free(e);
        event_base_free(base);
}
END_TEST

START_TEST(test_many_small_copies)
{
        enum { N = 10000, LEN = 512 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        EngineCopy *copies = calloc(N, sizeof(EngineCopy));
        uint8_t *src = pattern_new((size_t)N * LEN, 7);
        Buf dst;
        Done d = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_ptr_nonnull(copies);
        ck_assert_int_eq(engine_new(base, 4, &e), 0);
        buf_init(&dst, (size_t)N * LEN);

        /* block i goes to slot N-1-i: every copy scattered, no two adjacent in order */
        for (size_t i = 0; i < N; i++)
                copies[i] = (EngineCopy){buf_data(&dst) + (N - 1 - i) * LEN, src + i * LEN, LEN};
        d.counter = &counter;
        ck_assert_int_eq(engine_submit(e, copies, N, 0, on_done, &d, &d.task), 0);
        free(copies);
        run_until(base, &counter, 1);

        ck_assert_uint_eq(d.calls, 1);
        ck_assert_int_eq(d.status, 0);
        /* copy threads report progress a batch at a time: every byte counted once by the end */
        ck_assert_uint_eq(d.progress, (size_t)N * LEN);
        for (size_t i = 0; i < N; i++)
                if (memcmp(buf_data(&dst) + (N - 1 - i) * LEN, src + i * LEN, LEN) != 0)
                        ck_abort_msg("copy %zu landed wrong", i);
        assert_guards(&dst);

        engine_free(e);
        buf_deinit(&dst);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_many_tasks)
{
        enum { N = 300 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(1 << 20, 9);
        Buf dst[N];
        Done d[N] = {};
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        for (int i = 0; i < N; i++) {
                size_t len = 1 + ((size_t)i * 7919) % (1 << 20);
                size_t off = ((size_t)i * 104729) % ((1 << 20) - len + 1);
                EngineCopy c[2];

                buf_init(&dst[i], len);
                c[0] = (EngineCopy){buf_data(&dst[i]), src + off, len / 2};
                c[1] = (EngineCopy){buf_data(&dst[i]) + len / 2, src + off + len / 2,
                                    len - len / 2};
                d[i].counter = &counter;
                ck_assert_int_eq(engine_submit(e, c, 2, 4096, on_done, &d[i], &d[i].task), 0);
                /* drain now and then so completions interleave with submissions */
                if (i % 50 == 49)
                        ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        }
        run_until(base, &counter, N);
        for (int i = 0; i < N; i++) {
                size_t len = dst[i].size;
                size_t off = ((size_t)i * 104729) % ((1 << 20) - len + 1);

                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, 0);
                ck_assert_int_eq(memcmp(buf_data(&dst[i]), src + off, len), 0);
                assert_guards(&dst[i]);
                buf_deinit(&dst[i]);
        }
        engine_free(e);
        free(src);
        event_base_free(base);
}
END_TEST

/*
 * Tasks of at most 64 KiB are copied on the submitting thread; their callbacks still come from
 * the loop, once, and a cancel after the submit finds them finished. Sizes around the threshold,
 * a task split over copies, and one left for engine_free() to call back.
 */
START_TEST(test_small_tasks_inline)
{
        enum { N = 5 };
        static const size_t sizes[N] = {1, 4096, (64 << 10) - 8, 64 << 10, (64 << 10) + 1};
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src[N];
        Buf dst[N];
        Done d[N] = {}, last = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        for (int i = 0; i < N; i++) {
                size_t len = sizes[i], third = len / 3;
                EngineCopy c[3];

                src[i] = pattern_new(len, 300 + i);
                buf_init(&dst[i], len);
                /* three copies landing in reverse order: the destination's thirds swapped */
                c[0] = (EngineCopy){buf_data(&dst[i]) + len - third, src[i], third};
                c[1] = (EngineCopy){buf_data(&dst[i]) + third, src[i] + third, len - 2 * third};
                c[2] = (EngineCopy){buf_data(&dst[i]), src[i] + len - third, third};
                d[i].counter = &counter;
                ck_assert_int_eq(engine_submit(e, c, 3, 0, on_done, &d[i], &d[i].task), 0);
                /* never called back from submit itself */
                ck_assert_uint_eq(d[i].calls, 0);
        }
        /* finished (or at least started) before the cancel: the inline ones report success */
        engine_cancel(d[0].task);
        run_until(base, &counter, N);
        for (int i = 0; i < N; i++) {
                size_t len = sizes[i], third = len / 3;
                const uint8_t *got = buf_data(&dst[i]);

                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, 0);
                ck_assert_int_eq(memcmp(got + len - third, src[i], third), 0);
                ck_assert_int_eq(memcmp(got + third, src[i] + third, len - 2 * third), 0);
                ck_assert_int_eq(memcmp(got, src[i] + len - third, third), 0);
                assert_guards(&dst[i]);
        }
        /* no callback runs twice */
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        ck_assert_uint_eq(counter, N);

        /* one more, never dispatched by the loop: engine_free() calls it back */
        {
                EngineCopy c = {buf_data(&dst[1]), src[2], sizes[1]};

                last.counter = &counter;
                ck_assert_int_eq(engine_submit(e, &c, 1, 0, on_done, &last, &last.task), 0);
                ck_assert_uint_eq(last.calls, 0);
        }
        engine_free(e);
        ck_assert_uint_eq(last.calls, 1);
        ck_assert_int_eq(last.status, 0);
        ck_assert_int_eq(memcmp(buf_data(&dst[1]), src[2], sizes[1]), 0);
        assert_guards(&dst[1]);
        for (int i = 0; i < N; i++) {
                buf_deinit(&dst[i]);
                free(src[i]);
        }
        event_base_free(base);
}
END_TEST

/* engine_submit_take() keeps the caller's array: big and small tasks, and the failures free it. */
START_TEST(test_submit_take)
{
        enum { N = 512, LEN = 1024 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new((size_t)N * LEN, 11);
        EngineCopy *big = malloc(N * sizeof(EngineCopy)), *small = malloc(sizeof(EngineCopy));
        EngineCopy *bad = malloc(sizeof(EngineCopy));
        Buf dst;
        Done d1 = {}, d2 = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_ptr_nonnull(big);
        ck_assert_ptr_nonnull(small);
        ck_assert_ptr_nonnull(bad);
        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        buf_init(&dst, (size_t)N * LEN + 100);

        /* 512 KiB, every block reversed: the threads' path */
        for (size_t i = 0; i < N; i++)
                big[i] = (EngineCopy){buf_data(&dst) + (N - 1 - i) * LEN, src + i * LEN, LEN};
        d1.counter = d2.counter = &counter;
        ck_assert_int_eq(engine_submit_take(e, big, N, 0, on_done, &d1, &d1.task), 0);
        /* 100 bytes past the blocks: the inline path */
        *small = (EngineCopy){buf_data(&dst) + (size_t)N * LEN, src + 7, 100};
        ck_assert_int_eq(engine_submit_take(e, small, 1, 0, on_done, &d2, &d2.task), 0);
        /* a copy without a source: refused, and the array freed all the same (ASan sees it) */
        *bad = (EngineCopy){buf_data(&dst), NULL, 8};
        ck_assert_int_eq(engine_submit_take(e, bad, 1, 0, on_done, &d2, NULL), -EINVAL);
        ck_assert_int_eq(engine_submit_take(e, NULL, 1, 0, on_done, &d2, NULL), -EINVAL);

        run_until(base, &counter, 2);
        ck_assert_uint_eq(d1.calls, 1);
        ck_assert_int_eq(d1.status, 0);
        ck_assert_uint_eq(d2.calls, 1);
        ck_assert_int_eq(d2.status, 0);
        for (size_t i = 0; i < N; i++)
                if (memcmp(buf_data(&dst) + (N - 1 - i) * LEN, src + i * LEN, LEN) != 0)
                        ck_abort_msg("block %zu landed wrong", i);
        ck_assert_int_eq(memcmp(buf_data(&dst) + (size_t)N * LEN, src + 7, 100), 0);
        assert_guards(&dst);

        engine_free(e);
        buf_deinit(&dst);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_empty_task)
{
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        Done d1 = {}, d2 = {};
        unsigned counter = 0;
        EngineCopy none = {NULL, NULL, 0};

        ck_assert_int_eq(engine_new(base, 1, &e), 0);
        d1.counter = d2.counter = &counter;
        ck_assert_int_eq(engine_submit(e, NULL, 0, 0, on_done, &d1, &d1.task), 0);
        ck_assert_int_eq(engine_submit(e, &none, 1, 0, on_done, &d2, &d2.task), 0);
        /* never called from submit itself */
        ck_assert_uint_eq(counter, 0);
        /* finished before the cancel: it reports success */
        engine_cancel(d2.task);
        run_until(base, &counter, 2);
        ck_assert_uint_eq(d1.calls, 1);
        ck_assert_int_eq(d1.status, 0);
        ck_assert_uint_eq(d2.calls, 1);
        ck_assert_int_eq(d2.status, 0);
        engine_free(e);
        event_base_free(base);
}
END_TEST

START_TEST(test_cancel_before_start)
{
        enum { LEN = 4 << 20 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(LEN, 3);
        Buf a, b;
        Done da = {}, db = {};
        unsigned counter = 0;
        EngineCopy ca, cb;

        ck_assert_int_eq(engine_new(base, 1, &e), 0);
        buf_init(&a, LEN);
        buf_init(&b, LEN);
        ca = (EngineCopy){buf_data(&a), src, LEN};
        cb = (EngineCopy){buf_data(&b), src, LEN};
        da.counter = db.counter = &counter;

        /* held: neither task can have started when b is cancelled */
        engine_hold(e, true);
        ck_assert_int_eq(engine_submit(e, &ca, 1, 4096, on_done, &da, &da.task), 0);
        ck_assert_int_eq(engine_submit(e, &cb, 1, 4096, on_done, &db, &db.task), 0);
        engine_cancel(db.task);
        /* the cancelled task completes at once, though a is still queued ahead of it */
        run_until(base, &counter, 1);
        ck_assert_uint_eq(db.calls, 1);
        ck_assert_int_eq(db.status, -ECANCELED);
        ck_assert_uint_eq(da.calls, 0);
        engine_hold(e, false);
        run_until(base, &counter, 2);

        ck_assert_uint_eq(da.calls, 1);
        ck_assert_int_eq(da.status, 0);
        ck_assert_int_eq(memcmp(buf_data(&a), src, LEN), 0);
        ck_assert_uint_eq(db.calls, 1);
        ck_assert(buf_untouched(&b));
        assert_guards(&a);
        assert_guards(&b);

        engine_free(e);
        ck_assert_uint_eq(counter, 2);
        buf_deinit(&a);
        buf_deinit(&b);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_cancel_running)
{
        enum { LEN = 32 << 20, SLICE = 4096 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(LEN, 5);
        Buf dst;
        Done d = {};
        unsigned counter = 0;
        EngineCopy c;

        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        buf_init(&dst, LEN);
        c = (EngineCopy){buf_data(&dst), src, LEN};
        d.counter = &counter;
        ck_assert_int_eq(engine_submit(e, &c, 1, SLICE, on_done, &d, &d.task), 0);
        engine_cancel(d.task);
        engine_cancel(d.task); /* twice is harmless */
        run_until(base, &counter, 1);
        ck_assert_uint_eq(d.calls, 1);
        /* 0 only if every byte was copied before the cancel took effect */
        ck_assert(d.status == -ECANCELED || d.status == 0);
        if (d.status == 0)
                ck_assert_int_eq(memcmp(buf_data(&dst), src, LEN), 0);
        /* whatever was written is the source's bytes, never anything else */
        for (size_t i = 0; i < LEN; i++)
                if (buf_data(&dst)[i] != FRESH_BYTE && buf_data(&dst)[i] != src[i])
                        ck_abort_msg("byte %zu is neither old nor copied", i);
        assert_guards(&dst);

        /* nothing is written after the callback */
        {
                uint8_t *snap = malloc(LEN);

                ck_assert_ptr_nonnull(snap);
                memcpy(snap, buf_data(&dst), LEN);
                engine_free(e);
                ck_assert_int_eq(memcmp(snap, buf_data(&dst), LEN), 0);
                free(snap);
        }
        ck_assert_uint_eq(d.calls, 1);
        buf_deinit(&dst);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_free_with_queued_tasks)
{
        enum { N = 5, LEN = 1 << 20 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(LEN, 11);
        Buf dst[N];
        Done d[N] = {};
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 2, &e), 0);
        engine_hold(e, true);
        for (int i = 0; i < N; i++) {
                EngineCopy c;

                buf_init(&dst[i], LEN);
                c = (EngineCopy){buf_data(&dst[i]), src, LEN};
                d[i].counter = &counter;
                d[i].engine = e; /* the callback tries to submit: the engine is stopping */
                d[i].submit_r = 1;
                ck_assert_int_eq(engine_submit(e, &c, 1, 0, on_done, &d[i], &d[i].task), 0);
        }
        engine_free(e);
        /* every callback ran inside engine_free, once, with nothing copied */
        ck_assert_uint_eq(counter, N);
        for (int i = 0; i < N; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, -ECANCELED);
                ck_assert_int_eq(d[i].submit_r, -ESHUTDOWN);
                ck_assert(buf_untouched(&dst[i]));
                assert_guards(&dst[i]);
                buf_deinit(&dst[i]);
        }
        /* and the loop has nothing left to run for them */
        ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        ck_assert_uint_eq(counter, N);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_free_with_running_tasks)
{
        enum { N = 8, LEN = 3 << 20 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(LEN, 13);
        Buf dst[N];
        Done d[N] = {};
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 3, &e), 0);
        for (int i = 0; i < N; i++) {
                EngineCopy c;

                buf_init(&dst[i], LEN);
                c = (EngineCopy){buf_data(&dst[i]), src, LEN};
                d[i].counter = &counter;
                ck_assert_int_eq(engine_submit(e, &c, 1, 8192, on_done, &d[i], &d[i].task), 0);
        }
        engine_free(e);
        ck_assert_uint_eq(counter, N);
        for (int i = 0; i < N; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert(d[i].status == 0 || d[i].status == -ECANCELED);
                if (d[i].status == 0)
                        ck_assert_int_eq(memcmp(buf_data(&dst[i]), src, LEN), 0);
                assert_guards(&dst[i]);
                buf_deinit(&dst[i]);
        }
        free(src);
        event_base_free(base);
}
END_TEST

/* Background work: a task's steps, what they saw, and how many ran at once. */
typedef struct Steps {
        unsigned limit;       /* steps before the task says it is done; 0: never done */
        int fail_at;          /* step number that fails with -EIO; 0: none */
        atomic_uint ran;      /* steps run so far */
        atomic_uint *running; /* steps of every task running now */
        atomic_uint *most;    /* the most that ever ran at once */
        const uint8_t *watch; /* with @want: whether the first step found these bytes copied */
        const uint8_t *want;
        size_t watch_len;
        bool first_saw_copy;
        useconds_t sleep_us;
} Steps;

static int step_run(void *userdata)
{
        Steps *st = userdata;
        unsigned n = atomic_fetch_add(&st->ran, 1) + 1, now = 0;

        if (st->running) {
                now = atomic_fetch_add(st->running, 1) + 1;
                for (unsigned m = atomic_load(st->most); now > m;)
                        if (atomic_compare_exchange_weak(st->most, &m, now))
                                break;
        }
        if (n == 1 && st->watch)
                st->first_saw_copy = memcmp(st->watch, st->want, st->watch_len) == 0;
        if (st->sleep_us > 0)
                (void)usleep(st->sleep_us);
        if (st->running)
                atomic_fetch_sub(st->running, 1);
        if (st->fail_at > 0 && n == (unsigned)st->fail_at)
                return -EIO;
        return st->limit == 0 || n < st->limit;
}

START_TEST(test_background)
{
        enum { LEN = 256 << 10 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        uint8_t *src = pattern_new(LEN, 21);
        EngineCopy c;
        Buf dst;
        Steps sa = {.limit = 5}, sb = {.limit = 4, .fail_at = 2};
        Done da = {}, db = {}, dc = {};
        unsigned counter = 0;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(engine_new(base, 1, &e), 0);
        ck_assert_int_eq(engine_submit_background(e, NULL, &sa, on_done, &da, NULL), -EINVAL);
        ck_assert_int_eq(engine_submit_background(e, step_run, &sa, NULL, NULL, NULL), -EINVAL);
        buf_init(&dst, LEN);
        c = (EngineCopy){buf_data(&dst), src, LEN};
        sa.watch = buf_data(&dst);
        sa.want = src;
        sa.watch_len = LEN;
        da.counter = db.counter = dc.counter = &counter;

        /* held: the background task is queued before the copy, which still goes first */
        engine_hold(e, true);
        ck_assert_int_eq(engine_submit_background(e, step_run, &sa, on_done, &da, &da.task), 0);
        ck_assert_int_eq(engine_submit_background(e, step_run, &sb, on_done, &db, &db.task), 0);
        ck_assert_int_eq(engine_submit(e, &c, 1, 0, on_done, &dc, &dc.task), 0);
        engine_hold(e, false);
        run_until(base, &counter, 3);

        ck_assert_uint_eq(dc.calls, 1);
        ck_assert_int_eq(dc.status, 0);
        ck_assert_mem_eq(buf_data(&dst), src, LEN);
        assert_guards(&dst);
        ck_assert(sa.first_saw_copy);
        ck_assert_uint_eq(da.calls, 1);
        ck_assert_int_eq(da.status, 0);
        ck_assert_uint_eq(atomic_load(&sa.ran), 5);
        /* a failed step ends its task there */
        ck_assert_uint_eq(db.calls, 1);
        ck_assert_int_eq(db.status, -ECANCELED);
        ck_assert_uint_eq(atomic_load(&sb.ran), 2);

        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        ck_assert_uint_eq(counter, 3);
        engine_free(e);
        buf_deinit(&dst);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_background_one_thread_at_a_time)
{
        enum { TASKS = 3, LEN = 1 << 20 };
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        atomic_uint running = 0, most = 0;
        Steps st[TASKS];
        Done d[TASKS], dc = {};
        uint8_t *src = pattern_new(LEN, 22);
        EngineCopy c;
        Buf dst;
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 4, &e), 0);
        for (size_t i = 0; i < TASKS; i++) {
                st[i] = (Steps){.limit = 8, .running = &running, .most = &most, .sleep_us = 500};
                d[i] = (Done){.counter = &counter};
                ck_assert_int_eq(
                        engine_submit_background(e, step_run, &st[i], on_done, &d[i], &d[i].task),
                        0);
        }
        /* copies run beside the steps on the other threads */
        buf_init(&dst, LEN);
        c = (EngineCopy){buf_data(&dst), src, LEN};
        dc.counter = &counter;
        ck_assert_int_eq(engine_submit(e, &c, 1, 0, on_done, &dc, &dc.task), 0);
        run_until(base, &counter, TASKS + 1);

        ck_assert_int_eq(dc.status, 0);
        ck_assert_mem_eq(buf_data(&dst), src, LEN);
        assert_guards(&dst);
        for (size_t i = 0; i < TASKS; i++) {
                ck_assert_int_eq(d[i].status, 0);
                ck_assert_uint_eq(atomic_load(&st[i].ran), 8);
        }
        {
                unsigned at_once = atomic_load(&most);

                ck_assert_uint_eq(at_once, 1);
        }

        engine_free(e);
        buf_deinit(&dst);
        free(src);
        event_base_free(base);
}
END_TEST

START_TEST(test_background_cancelled)
{
        struct event_base *base = event_base_new();
        Engine *e = NULL;
        Steps queued = {.limit = 3}, endless = {.limit = 0, .sleep_us = 200}, left = {.limit = 3};
        Done dq = {}, de = {}, dl = {};
        unsigned counter = 0;

        ck_assert_int_eq(engine_new(base, 1, &e), 0);
        dq.counter = de.counter = dl.counter = &counter;

        /* cancelled while queued: its first step never runs */
        engine_hold(e, true);
        ck_assert_int_eq(engine_submit_background(e, step_run, &queued, on_done, &dq, &dq.task), 0);
        engine_cancel(dq.task);
        run_until(base, &counter, 1);
        ck_assert_int_eq(dq.status, -ECANCELED);
        ck_assert_uint_eq(atomic_load(&queued.ran), 0);
        engine_hold(e, false);

        /* cancelled between its steps: it would never say it is done */
        ck_assert_int_eq(engine_submit_background(e, step_run, &endless, on_done, &de, &de.task),
                         0);
        while (atomic_load(&endless.ran) < 3)
                (void)usleep(1000);
        engine_cancel(de.task);
        run_until(base, &counter, 2);
        ck_assert_uint_eq(de.calls, 1);
        ck_assert_int_eq(de.status, -ECANCELED);

        /* still queued when the engine stops: cancelled, never run */
        engine_hold(e, true);
        ck_assert_int_eq(engine_submit_background(e, step_run, &left, on_done, &dl, &dl.task), 0);
        engine_free(e);
        ck_assert_uint_eq(counter, 3);
        ck_assert_int_eq(dl.status, -ECANCELED);
        ck_assert_uint_eq(atomic_load(&left.ran), 0);
        event_base_free(base);
}
END_TEST

static Suite *engine_suite(void)
{
        Suite *s = suite_create("engine");
        TCase *tc;

        tc = tcase_create("copy");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_new_arguments);
        tcase_add_test(tc, test_big_and_small_tasks);
        tcase_add_test(tc, test_big_task_streams);
        tcase_add_test(tc, test_many_small_copies);
        tcase_add_test(tc, test_many_tasks);
        tcase_add_test(tc, test_empty_task);
        tcase_add_test(tc, test_small_tasks_inline);
        tcase_add_test(tc, test_submit_take);
        tcase_add_test(tc, test_background);
        tcase_add_test(tc, test_background_one_thread_at_a_time);
        suite_add_tcase(s, tc);

        tc = tcase_create("cancel");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_cancel_before_start);
        tcase_add_test(tc, test_cancel_running);
        tcase_add_test(tc, test_free_with_queued_tasks);
        tcase_add_test(tc, test_free_with_running_tasks);
        tcase_add_test(tc, test_background_cancelled);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(engine_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
