/* SPDX-License-Identifier: MIT */
/*
 * A transfer with a peer daemon whose plan is laid off the loop: the fixture's transport set has
 * copy threads, so the data job's prepare step runs on one of them and the job reaches the
 * (fake) stream transport from the loop afterwards. A plan that differs from the peer's, and a
 * deadline that passes while the plan is being laid, fail the transfer with the peer's stream
 * kept in step (its job abandoned) and none of our bytes touched. Served the other way (the peer
 * pulls from us), the peer is answered only once our job reached the transport, and a cancel
 * that comes while the plan is being laid refuses it with nothing sent (a peer lost meanwhile is
 * told nothing).
 */
#include "tests/unit/transfer-fixture.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "common/status.h"
#include "daemon/link/link.h"
#include "daemon/transfer/served.h"
#include "daemon/transport/engine.h"
#include "tests/harness/harness.h"

#define DST_SEED 0x5eed0002u
#define PEER_SEED 0x5eed0003u
#define TENSORS 2
#define SLOTS 4
#define ITEM_BYTES (TENSORS * FIXTURE_STRIDE)
#define REMOTE_CLUSTER 9
#define REMOTE_CACHE 77
#define PEER_JOB 555

static TransferFixture fx;

static void setup(void)
{
        transfer_fixture_init(&fx);
        ck_assert_int_eq(engine_new(fx.base, 2, &fx.transports.engine), 0);
}

static void teardown(void)
{
        fx.transports.engine = engine_free(fx.transports.engine);
        transfer_fixture_done(&fx);
}

typedef struct Pull {
        Cluster *a;
        Cache *cache;
        Transfer *x;
        ClientAnswer answer;
        RemoteDesc remote;
        TransferPeerAnswer ans;
} Pull;

/* Cluster 1 pulls slot 3 of the peer's cache into its slot 2; the peer answers with @ans. */
static void pull_start(Pull *t)
{
        TransferRequest req;
        Error err = ERROR_INIT;

        t->a = transfer_fixture_cluster(&fx, 1);
        t->cache =
                transfer_fixture_cache(&fx, t->a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        (void)transfer_fixture_remote_link(&fx, t->a, REMOTE_CLUSTER);
        req = (TransferRequest){
                .args = transfer_fixture_item_args(TRANSFER_PULL_CACHE, 2),
                .key = transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 3),
                .local_cache_id = t->cache->id,
        };
        transfer_fixture_answer_init(&t->answer);
        ck_assert_int_eq(
                transfer_start(&fx.root, t->a, &req, &t->answer.cpl, &t->answer.result, &err), 0);
        t->x = transfer_fixture_last(&fx);
        ck_assert_ptr_nonnull(t->x);
        t->remote = (RemoteDesc){
                .num_tensors = TENSORS,
                .tensor_size = SLOTS * FIXTURE_STRIDE,
                .units = SLOTS,
        };
        t->ans = (TransferPeerAnswer){
                .remote = &t->remote,
                .remote_index = 3,
                .total_bytes = ITEM_BYTES,
                .segments = TENSORS,
                .job_id = PEER_JOB,
        };
}

/* Runs the loop until the job reached the transport or the client was answered (20 s at most). */
static void run_until_settled(const Pull *t)
{
        time_t end = time(NULL) + 20;

        while (fx.tcp->n_submitted == 0 && t->answer.n_replies + t->answer.n_fails == 0) {
                ck_assert_int_ge(event_base_loop(fx.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                ck_assert_msg(time(NULL) < end, "the data job was neither submitted nor failed");
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
}

/* Our cache is as it was: nothing landed. */
static void assert_untouched(const Pull *t)
{
        _cleanup_free_ uint8_t *image = transfer_fixture_image(t->cache, DST_SEED);

        transfer_fixture_check_image(t->cache, image);
}

/* The peer's stream was settled: its job's bytes are dropped as they come. */
static void assert_abandoned(void)
{
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.tcp->n_abandoned, 1);
        ck_assert_ptr_eq(fx.tcp->abandon_channel, fx.peer->data);
        ck_assert_int_eq(fx.tcp->abandon_dir, TRANSPORT_READ);
        ck_assert_uint_eq(fx.tcp->abandon_id, PEER_JOB);
        ck_assert_uint_eq(fx.tcp->abandon_bytes, ITEM_BYTES);
}

START_TEST(test_staged_pull_lands_every_byte)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        TransportJob *job;
        Pull t;

        pull_start(&t);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &t.ans);
        /* laid on a copy thread: nothing reached the transport from inside the answer */
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        run_until_settled(&t);
        ck_assert_uint_eq(fx.tcp->n_submitted, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_uint_eq(job->id, PEER_JOB);
        ck_assert_uint_eq(job->n_segs, TENSORS);
        ck_assert(job->submitted);

        harness_fill_pattern(stream, sizeof(stream), PEER_SEED);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(t.answer.result.bytes, ITEM_BYTES);
        ck_assert_uint_eq(t.answer.result.segments, TENSORS);

        image = transfer_fixture_image(t.cache, DST_SEED);
        for (uint32_t k = 0; k < TENSORS; k++)
                harness_fill_pattern_at(image + t.cache->tensors[k].offset + 2 * FIXTURE_STRIDE,
                                        FIXTURE_STRIDE, PEER_SEED, (uint64_t)k * FIXTURE_STRIDE);
        transfer_fixture_check_image(t.cache, image);
        ck_assert(clist_is_empty(&fx.peer->transfers));
        ck_assert_uint_eq(t.cache->n_busy, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
}
END_TEST

START_TEST(test_staged_pull_other_segments)
{
        char want[128];
        Pull t;

        /* The bytes agree, the segments do not: found only once the plan is laid. */
        pull_start(&t);
        t.ans.segments = TENSORS + 1;
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &t.ans);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        run_until_settled(&t);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PROTOCOL_MISMATCH);
        snprintf(want, sizeof(want),
                 "the peer planned %d bytes in %d segments, we planned %d in %d", ITEM_BYTES,
                 TENSORS + 1, ITEM_BYTES, TENSORS);
        ck_assert_str_eq(t.answer.err.msg, want);
        assert_abandoned();
        assert_untouched(&t);
        ck_assert(clist_is_empty(&fx.peer->transfers));
        ck_assert_uint_eq(t.cache->n_busy, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
}
END_TEST

START_TEST(test_staged_pull_deadline)
{
        Pull t;

        /* The deadline passes while the plan waits for a copy thread. */
        pull_start(&t);
        engine_hold(fx.transports.engine, true);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &t.ans);
        transfer_fixture_expire(&fx, t.x->timer);
        /* the peer is told to stop: the pull stays on its list until its job is handed on */
        ck_assert_uint_eq(fx.rec.n_cancels, 1);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        engine_hold(fx.transports.engine, false);
        run_until_settled(&t);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        assert_abandoned();
        assert_untouched(&t);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
}
END_TEST

#define SERVED_SEED 0x5eed0004u
#define OURS 2       /* our cluster, served */
#define THEIR_ID 500 /* the initiator's transfer id */
#define REQUEST_ID 31

static Cluster *ours;
static Cache *served_cache;
static InLink *inlink;

static void setup_served(void)
{
        setup();
        ours = transfer_fixture_cluster(&fx, OURS);
        served_cache = transfer_fixture_cache(&fx, ours, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL,
                                              SERVED_SEED);
        ck_assert_int_eq(
                link_inlink_new(&fx.link, fx.peer, ours, REMOTE_CLUSTER, CLUSTER_ROLE_MIX, &inlink),
                0);
}

/* The peer pulls slot 1 of our cache; its cache is shaped like ours. */
static void served_pull(RemoteDesc *theirs)
{
        TransferPeerRequest req;

        *theirs = (RemoteDesc){
                .num_tensors = TENSORS,
                .tensor_size = SLOTS * FIXTURE_STRIDE,
                .units = SLOTS,
        };
        req = (TransferPeerRequest){
                .job_id = THEIR_ID,
                .link_id = inlink->id,
                .initiator_link_id = 12,
                .key = transfer_fixture_id_index(OURS, served_cache->id, 1),
                .local = theirs,
                .args = transfer_fixture_item_args(TRANSFER_PULL_CACHE, 0),
                .timeout_ms = 1000,
        };
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
}

/* Runs the loop until the peer was answered or refused (20 s at most). */
static void run_until_told(void)
{
        time_t end = time(NULL) + 20;

        while (fx.rec.n_answers + fx.rec.n_refusals == 0) {
                ck_assert_int_ge(event_base_loop(fx.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                ck_assert_msg(time(NULL) < end, "the peer was neither answered nor refused");
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
}

/* Nothing is held or listed, and our cache is as it was: serving only reads it. */
static void check_served_let_go(void)
{
        _cleanup_free_ uint8_t *image = transfer_fixture_image(served_cache, SERVED_SEED);

        ck_assert_uint_eq(fx.root.n_served, 0);
        ck_assert_uint_eq(inlink->n_inflight, 0);
        ck_assert_uint_eq(fx.peer->n_served, 0);
        ck_assert_uint_eq(served_cache->n_busy, 0);
        transfer_fixture_check_image(served_cache, image);
}

START_TEST(test_staged_served_answers_once_handed)
{
        uint8_t stream[ITEM_BYTES];
        RemoteDesc theirs;
        TransportJob *job;

        served_pull(&theirs);
        /* the plan is laid on a copy thread: no answer, and no job at the transport, yet */
        ck_assert_uint_eq(fx.rec.n_answers, 0);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.root.n_served, 1);
        ck_assert_uint_eq(served_cache->n_busy, 1);
        run_until_told();
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        ck_assert_uint_eq(fx.rec.answer_request_id, REQUEST_ID);
        ck_assert_uint_eq(fx.rec.answer.remote_index, 1);
        ck_assert_uint_eq(fx.rec.answer.total_bytes, ITEM_BYTES);
        ck_assert_uint_eq(fx.rec.answer.segments, TENSORS);
        ck_assert_uint_eq(fx.rec.answer.job_id, THEIR_ID);
        /* told once its job was at the transport, whose bytes are our slot 1 */
        ck_assert_uint_eq(fx.tcp->n_submitted, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert(job->submitted);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_uint_eq(job->id, THEIR_ID);
        ck_assert_uint_eq(job->n_segs, TENSORS);
        ck_assert_int_eq(fake_transport_gather(job, stream, sizeof(stream)), 0);
        for (uint32_t t = 0; t < TENSORS; t++)
                ck_assert_int_eq(harness_check_pattern_at(
                                         stream + t * FIXTURE_STRIDE, FIXTURE_STRIDE, SERVED_SEED,
                                         served_cache->tensors[t].offset + FIXTURE_STRIDE),
                                 -1);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 1);
        ck_assert_uint_eq(fx.root.counters.bytes_served, ITEM_BYTES);
        check_served_let_go();
}
END_TEST

START_TEST(test_staged_served_cancelled_while_laid)
{
        RemoteDesc theirs;

        /* The peer gives up before its plan was laid: it is refused, nothing was sent. */
        engine_hold(fx.transports.engine, true);
        served_pull(&theirs);
        served_handle_transfer_cancel(&fx.root, fx.peer, THEIR_ID);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        engine_hold(fx.transports.engine, false);
        run_until_told();
        ck_assert_uint_eq(fx.rec.n_answers, 0);
        ck_assert_uint_eq(fx.rec.n_refusals, 1);
        ck_assert_uint_eq(fx.rec.refuse_request_id, REQUEST_ID);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(fx.rec.refusal.msg, "stopped before its bytes moved"));
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 0);
        check_served_let_go();
}
END_TEST

START_TEST(test_staged_served_peer_lost_while_laid)
{
        RemoteDesc theirs;
        time_t end;

        /* The peer goes while its plan is being laid: nobody is told, nothing is sent. */
        engine_hold(fx.transports.engine, true);
        served_pull(&theirs);
        served_on_peer_lost(fx.peer);
        ck_assert_uint_eq(fx.peer->n_served, 0);
        engine_hold(fx.transports.engine, false);
        end = time(NULL) + 20;
        while (fx.root.n_served > 0) {
                ck_assert_int_ge(event_base_loop(fx.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                ck_assert_msg(time(NULL) < end, "the served transfer did not end");
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
        ck_assert_uint_eq(fx.rec.n_answers, 0);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 0);
        check_served_let_go();
}
END_TEST

static Suite *transfer_staged_suite(void)
{
        Suite *s = suite_create("transfer-staged");
        TCase *tc = tcase_create("staged");

        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_staged_pull_lands_every_byte);
        tcase_add_test(tc, test_staged_pull_other_segments);
        tcase_add_test(tc, test_staged_pull_deadline);
        suite_add_tcase(s, tc);

        tc = tcase_create("served");
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setup_served, teardown);
        tcase_add_test(tc, test_staged_served_answers_once_handed);
        tcase_add_test(tc, test_staged_served_cancelled_while_laid);
        tcase_add_test(tc, test_staged_served_peer_lost_while_laid);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transfer_staged_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
