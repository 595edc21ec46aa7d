/* SPDX-License-Identifier: MIT */
/*
 * transport_submit() of a job whose segments a prepare step lays, for a transport that does not
 * prepare itself: laid (and staged by the transport's stage op) on a copy thread, handed to the
 * transport's submit from the loop; failures and cancels on the way hand nothing on.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include <event2/event.h>

#include "common/status.h"
#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

#define N_SEGS 3
#define STAGE_TAG 0x5354u

/* What the test transport and the job's steps saw. */
typedef struct Seen {
        int prepare_error; /* what the prepare step returns */
        atomic_uint n_prepares;
        atomic_uint n_stages;
        atomic_bool staged; /* the stage op returned */
        pthread_t prepare_thread;
        pthread_t stage_thread;
        unsigned n_submits;
        unsigned stage_tag; /* the block submit found in job->priv */
        size_t staged_n_segs;
        size_t submit_n_segs;
        unsigned n_done;
        int done_status;
        int done_error;
        bool done_submitted;
} Seen;

static Seen seen;
static TransportSegment segs[N_SEGS];

typedef struct Staged {
        unsigned tag;
        size_t n_segs;
} Staged;

static int test_stage(Transport *t, const TransportJob *job, void **ret_priv)
{
        Staged *st = malloc(sizeof(*st));

        if (!st)
                return -ENOMEM;
        *st = (Staged){.tag = STAGE_TAG, .n_segs = job->n_segs};
        seen.stage_thread = pthread_self();
        atomic_fetch_add(&seen.n_stages, 1);
        *ret_priv = st;
        atomic_store(&seen.staged, true);
        return 0;
}

static int test_submit(Transport *t, TransportJob *job)
{
        Staged *st = job->priv;

        seen.n_submits++;
        seen.stage_tag = st ? st->tag : 0;
        seen.staged_n_segs = st ? st->n_segs : 0;
        seen.submit_n_segs = job->n_segs;
        free(st);
        job->priv = NULL;
        return 0;
}

static const transport_ops stage_ops = {
        .name = "stage-test",
        .submit = test_submit,
        .stage = test_stage,
};

static const transport_ops plain_ops = {
        .name = "plain-test",
        .submit = test_submit,
};

static int lay(const TransportJob *job, size_t part, size_t n_parts, TransportPart *ret)
{
        seen.prepare_thread = pthread_self();
        atomic_fetch_add(&seen.n_prepares, 1);
        if (seen.prepare_error != 0)
                return seen.prepare_error;
        for (size_t i = 0; i < N_SEGS; i++)
                segs[i] = (TransportSegment){.offset = 4096 * i, .len = 512, .count = 1};
        *ret = (TransportPart){.segs = segs, .n_segs = N_SEGS, .local_step = 7, .remote_step = 9};
        return 0;
}

static void on_job_done(TransportJob *job, int status)
{
        seen.n_done++;
        seen.done_status = status;
        seen.done_error = job->error;
        seen.done_submitted = job->submitted;
}

typedef struct Env {
        struct event_base *base;
        TransportSet set;
        Transport t;
        TransportJob job;
} Env;

static void env_init(Env *env, const transport_ops *ops, bool engine)
{
        seen = (Seen){};
        *env = (Env){.base = event_base_new()};
        ck_assert_ptr_nonnull(env->base);
        env->set.base = env->base;
        if (engine)
                ck_assert_int_eq(engine_new(env->base, 2, &env->set.engine), 0);
        env->t = (Transport){.ops = ops, .set = &env->set};
        env->job = (TransportJob){
                .dir = TRANSPORT_READ,
                .done = on_job_done,
                .prepare = lay,
        };
}

static void env_deinit(Env *env)
{
        env->set.engine = engine_free(env->set.engine);
        event_base_free(env->base);
}

/* Runs the loop until something happened to the job: handed on or done (20 s at most). */
static void run_until_settled(Env *env)
{
        time_t end = time(NULL) + 20;

        while (seen.n_submits == 0 && seen.n_done == 0) {
                ck_assert_int_ge(event_base_loop(env->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                ck_assert_msg(time(NULL) < end, "the job was neither handed on nor done");
                if (seen.n_submits == 0 && seen.n_done == 0)
                        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
}

/* The job ended cancelled, once, never handed to the transport. */
static void assert_cancelled_unsubmitted(void)
{
        ck_assert_uint_eq(seen.n_done, 1);
        ck_assert_uint_eq(seen.n_submits, 0);
        ck_assert_int_eq(seen.done_error, -ECANCELED);
        ck_assert(!seen.done_submitted);
}

START_TEST(test_laid_off_the_loop)
{
        Env env;

        env_init(&env, &stage_ops, true);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        /* handed on only from the loop, never from inside transport_submit() */
        ck_assert_uint_eq(seen.n_submits, 0);
        ck_assert_ptr_nonnull(env.job.staging);
        run_until_settled(&env);

        ck_assert_uint_eq(seen.n_submits, 1);
        ck_assert_uint_eq(seen.n_done, 0);
        ck_assert_uint_eq(atomic_load(&seen.n_prepares), 1);
        ck_assert_uint_eq(atomic_load(&seen.n_stages), 1);
        ck_assert(!pthread_equal(seen.prepare_thread, pthread_self()));
        ck_assert(pthread_equal(seen.stage_thread, seen.prepare_thread));
        /* the transport found what its stage op built, and the job laid */
        ck_assert_uint_eq(seen.stage_tag, STAGE_TAG);
        ck_assert_uint_eq(seen.staged_n_segs, N_SEGS);
        ck_assert_uint_eq(seen.submit_n_segs, N_SEGS);
        ck_assert_ptr_eq(env.job.segs, segs);
        ck_assert_uint_eq(env.job.local_step, 7);
        ck_assert_uint_eq(env.job.remote_step, 9);
        ck_assert(env.job.submitted);
        ck_assert_ptr_null(env.job.staging);
        ck_assert_ptr_null(env.job.prepare);
        env_deinit(&env);
}
END_TEST

START_TEST(test_laid_without_stage_op)
{
        Env env;

        env_init(&env, &plain_ops, true);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        run_until_settled(&env);
        ck_assert_uint_eq(seen.n_submits, 1);
        ck_assert(!pthread_equal(seen.prepare_thread, pthread_self()));
        ck_assert_uint_eq(seen.stage_tag, 0);
        ck_assert_uint_eq(seen.submit_n_segs, N_SEGS);
        ck_assert(env.job.submitted);
        env_deinit(&env);
}
END_TEST

START_TEST(test_laid_here_without_engine)
{
        Env env;

        /* No copy threads: laid on the calling thread, handed on at once, no stage op. */
        env_init(&env, &stage_ops, false);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        ck_assert_uint_eq(seen.n_submits, 1);
        ck_assert(pthread_equal(seen.prepare_thread, pthread_self()));
        ck_assert_uint_eq(atomic_load(&seen.n_stages), 0);
        ck_assert_uint_eq(seen.submit_n_segs, N_SEGS);
        ck_assert(env.job.submitted);
        ck_assert_ptr_null(env.job.staging);

        /* and a failing prepare step fails the submit itself */
        seen = (Seen){.prepare_error = -EPROTO};
        env.job.prepare = lay;
        ck_assert_int_eq(transport_submit(&env.t, &env.job), -EPROTO);
        ck_assert_uint_eq(seen.n_submits, 0);
        ck_assert(!env.job.submitted);
        env_deinit(&env);
}
END_TEST

START_TEST(test_prepare_fails)
{
        Env env;

        env_init(&env, &stage_ops, true);
        seen.prepare_error = -EPROTO;
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        run_until_settled(&env);
        ck_assert_uint_eq(seen.n_done, 1);
        ck_assert_uint_eq(seen.n_submits, 0);
        ck_assert_uint_eq(atomic_load(&seen.n_stages), 0);
        ck_assert_int_eq(seen.done_error, -EPROTO);
        ck_assert_int_eq(seen.done_status, transport_status_from_errno(-EPROTO));
        ck_assert(!seen.done_submitted);
        env_deinit(&env);
}
END_TEST

START_TEST(test_cancelled_before_laid)
{
        Env env;

        env_init(&env, &stage_ops, true);
        engine_hold(env.set.engine, true);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        transport_cancel(&env.t, &env.job);
        engine_hold(env.set.engine, false);
        run_until_settled(&env);
        assert_cancelled_unsubmitted();
        ck_assert_uint_eq(atomic_load(&seen.n_prepares), 0);
        env_deinit(&env);
}
END_TEST

START_TEST(test_cancelled_once_laid)
{
        time_t end;
        Env env;

        /* The step finished and its completion may be queued for the loop already: the cancel
         * still wins, and what the stage op built is freed (ASan would see it leak). */
        env_init(&env, &stage_ops, true);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        end = time(NULL) + 20;
        while (!atomic_load(&seen.staged)) {
                ck_assert_msg(time(NULL) < end, "the stage step did not run");
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
        transport_cancel(&env.t, &env.job);
        run_until_settled(&env);
        assert_cancelled_unsubmitted();
        ck_assert_uint_eq(atomic_load(&seen.n_stages), 1);
        env_deinit(&env);
}
END_TEST

START_TEST(test_cancelled_at_engine_free)
{
        Env env;

        /* A daemon that stops: the held job completes from engine_free(), handed on to nobody. */
        env_init(&env, &stage_ops, true);
        engine_hold(env.set.engine, true);
        ck_assert_int_eq(transport_submit(&env.t, &env.job), 0);
        env.set.engine = engine_free(env.set.engine);
        assert_cancelled_unsubmitted();
        env_deinit(&env);
}
END_TEST

static Suite *transport_stage_suite(void)
{
        Suite *s = suite_create("transport-stage");
        TCase *tc = tcase_create("stage");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_laid_off_the_loop);
        tcase_add_test(tc, test_laid_without_stage_op);
        tcase_add_test(tc, test_laid_here_without_engine);
        tcase_add_test(tc, test_prepare_fails);
        tcase_add_test(tc, test_cancelled_before_laid);
        tcase_add_test(tc, test_cancelled_once_laid);
        tcase_add_test(tc, test_cancelled_at_engine_free);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transport_stage_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
