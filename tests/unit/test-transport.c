/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the transport ops table and its job: the shared-memory transport on a real copy
 * engine moves READ and WRITE jobs (every byte and the guards around it checked), a cancelled
 * job reports its errno and the mapped status, and the one errno-to-status mapping holds.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/status.h"
#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

#define GUARD 512
#define GUARD_BYTE 0xa5
#define FRESH_BYTE 0x5a
#define SIZE (3 * 4096 + 123)

typedef struct Fixture {
        struct event_base *base;
        TransportSet set;
        Transport *shm;
        uint8_t *src;    /* the seeded pattern */
        uint8_t *expect; /* a copy of it that no job touches */
        uint8_t *mem;    /* GUARD, SIZE destination bytes, GUARD */
        TransportSegment segs[3];
        TransportJob job;
        unsigned calls;
        int status;
} Fixture;

static uint8_t *fixture_dst(Fixture *f)
{
        return f->mem + GUARD;
}

static void fixture_init(Fixture *f)
{
        uint32_t x = 2654435761u;

        *f = (Fixture){0};
        f->base = event_base_new();
        ck_assert_ptr_nonnull(f->base);
        f->set.base = f->base;
        ck_assert_int_eq(engine_new(f->base, 2, &f->set.engine), 0);
        ck_assert_int_eq(transport_shm_new(&f->set, &f->shm), 0);
        f->src = malloc(SIZE);
        f->expect = malloc(SIZE);
        f->mem = malloc(SIZE + 2 * GUARD);
        ck_assert_ptr_nonnull(f->src);
        ck_assert_ptr_nonnull(f->expect);
        ck_assert_ptr_nonnull(f->mem);
        for (size_t i = 0; i < SIZE; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                f->src[i] = (uint8_t)x == FRESH_BYTE ? 0 : (uint8_t)x;
        }
        memcpy(f->expect, f->src, SIZE);
        memset(f->mem, GUARD_BYTE, GUARD);
        memset(f->mem + GUARD, FRESH_BYTE, SIZE);
        memset(f->mem + GUARD + SIZE, GUARD_BYTE, GUARD);
}

static void fixture_deinit(Fixture *f)
{
        transport_free(f->shm);
        engine_free(f->set.engine);
        event_base_free(f->base);
        free(f->src);
        free(f->expect);
        free(f->mem);
}

static void on_done(TransportJob *job, int status)
{
        Fixture *f = job->userdata;

        ck_assert_ptr_eq(job, &f->job);
        ck_assert_ptr_null(job->priv);
        f->calls++;
        f->status = status;
}

static void run_until_done(Fixture *f)
{
        while (f->calls == 0)
                ck_assert_int_ge(event_base_loop(f->base, EVLOOP_ONCE), 0);
}

static void assert_guards(const Fixture *f)
{
        for (size_t i = 0; i < GUARD; i++)
                if (f->mem[i] != GUARD_BYTE || f->mem[GUARD + SIZE + i] != GUARD_BYTE)
                        ck_abort_msg("guard byte %zu was written", i);
}

/*
 * Three segments that move the pattern's thirds out of order: the destination's first third
 * takes the source's last, and so on. @dir decides which side the local addresses name.
 */
static void fixture_job(Fixture *f, TransportDir dir)
{
        uint64_t third = SIZE / 3, last = SIZE - 2 * third;
        uint8_t *dst = fixture_dst(f);
        struct {
                uint8_t *dst;
                const uint8_t *src;
                uint64_t len;
        } pieces[3] = {
                {dst, f->src + 2 * third, last},
                {dst + last, f->src + third, third},
                {dst + last + third, f->src, third},
        };

        for (size_t i = 0; i < 3; i++) {
                uint8_t *local = dir == TRANSPORT_READ ? pieces[i].dst : (uint8_t *)pieces[i].src;
                const uint8_t *other = dir == TRANSPORT_READ ? pieces[i].src : pieces[i].dst;

                f->segs[i] = (TransportSegment){
                        .local = local, .len = pieces[i].len, .remote = (uint64_t)(uintptr_t)other};
        }
        f->job = (TransportJob){
                .dir = dir, .segs = f->segs, .n_segs = 3, .done = on_done, .userdata = f};
}

static void assert_moved(Fixture *f)
{
        uint64_t third = SIZE / 3, last = SIZE - 2 * third;
        const uint8_t *dst = fixture_dst(f);

        ck_assert_int_eq(memcmp(dst, f->expect + 2 * third, last), 0);
        ck_assert_int_eq(memcmp(dst + last, f->expect + third, third), 0);
        ck_assert_int_eq(memcmp(dst + last + third, f->expect, third), 0);
        /* The source is only read. */
        ck_assert_int_eq(memcmp(f->src, f->expect, SIZE), 0);
        assert_guards(f);
}

START_TEST(test_status_from_errno)
{
        ck_assert_int_eq(transport_status_from_errno(0), STATUS_OK);
        ck_assert_int_eq(transport_status_from_errno(-EILSEQ), STATUS_FAILED);
        ck_assert_int_eq(transport_status_from_errno(-ECANCELED), STATUS_PEER_LOST);
        ck_assert_int_eq(transport_status_from_errno(-ECONNRESET), STATUS_PEER_LOST);
        ck_assert_int_eq(transport_status_from_errno(-EACCES), STATUS_PEER_LOST);
}
END_TEST

START_TEST(test_shm_read_and_write)
{
        static const TransportDir dirs[] = {TRANSPORT_READ, TRANSPORT_WRITE};
        Fixture f;

        for (size_t d = 0; d < 2; d++) {
                uint64_t done = 1;

                fixture_init(&f);
                ck_assert_str_eq(transport_name(f.shm), "shm");
                fixture_job(&f, dirs[d]);
                ck_assert_int_eq(transport_submit(f.shm, &f.job), 0);
                ck_assert_uint_eq(f.calls, 0);
                run_until_done(&f);
                ck_assert_uint_eq(f.calls, 1);
                ck_assert_int_eq(f.status, STATUS_OK);
                ck_assert_int_eq(f.job.error, 0);
                assert_moved(&f);
                /* Over: nothing in flight, nothing to report. */
                ck_assert_int_eq(transport_progress(f.shm, &f.job, &done), 0);
                ck_assert_uint_eq(done, 0);
                fixture_deinit(&f);
        }
}
END_TEST

START_TEST(test_shm_cancel)
{
        Fixture f;

        fixture_init(&f);
        /* Held, the threads take nothing: the job is certainly cancelled before a byte moves. */
        engine_hold(f.set.engine, true);
        fixture_job(&f, TRANSPORT_READ);
        ck_assert_int_eq(transport_submit(f.shm, &f.job), 0);
        transport_cancel(f.shm, &f.job);
        engine_hold(f.set.engine, false);
        run_until_done(&f);
        ck_assert_uint_eq(f.calls, 1);
        ck_assert_int_eq(f.job.error, -ECANCELED);
        ck_assert_int_eq(f.status, STATUS_PEER_LOST);
        for (size_t i = 0; i < SIZE; i++)
                if (fixture_dst(&f)[i] != FRESH_BYTE)
                        ck_abort_msg("byte %zu landed after the cancel", i);
        assert_guards(&f);
        fixture_deinit(&f);
}
END_TEST

START_TEST(test_tcp_without_channel)
{
        TransportSet set = {0};
        TransportSegment seg = {.local = &set, .len = 1};
        TransportJob job = {.dir = TRANSPORT_WRITE, .segs = &seg, .n_segs = 1};
        Transport *t = NULL;
        uint64_t done;

        ck_assert_int_eq(transport_tcp_new(&set, &t), 0);
        ck_assert_str_eq(transport_name(t), "tcp");
        ck_assert_int_eq(transport_submit(t, &job), -ENOTCONN);
        ck_assert_int_eq(transport_progress(t, &job, &done), -ENOENT);
        ck_assert_int_eq(transport_abandon(t, NULL, TRANSPORT_READ, 7, 100), -ENOTCONN);
        /* Nothing runs: a cancel is a no-op. */
        transport_cancel(t, &job);
        ck_assert_str_eq(transport_name(NULL), "none");
        ck_assert_ptr_null(transport_free(t));
}
END_TEST

static Suite *transport_suite(void)
{
        Suite *s = suite_create("transport");
        TCase *tc = tcase_create("jobs");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_status_from_errno);
        tcase_add_test(tc, test_shm_read_and_write);
        tcase_add_test(tc, test_shm_cancel);
        tcase_add_test(tc, test_tcp_without_channel);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transport_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
