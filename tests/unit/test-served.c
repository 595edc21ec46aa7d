/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for served transfers (served.c), a peer's pull from or push into one of our caches,
 * driven with decoded peer requests on a TransferRoot built by hand: a request that names no
 * cache of the linked cluster, blocks out of range, an unknown inbound link or a key that did not
 * decode is refused with its documented status and holds nothing; a pull sends exactly the
 * segments of the named slot and a push lands every byte there (and nothing around it) and tells
 * the peer; the peer's cancel, the deadline and the peer's loss stop a served transfer and let go
 * of the cache. No sockets, threads or sleeps.
 */
/* Before check.h, whose fail() macro would rename CompletionOps.fail. */
#include "tests/unit/transfer-fixture.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "daemon/link/notify.h"
#include "tests/harness/harness.h"

#define CACHE_SEED 0x5eed0101u
#define PEER_SEED 0x5eed0102u
#define TENSORS 2
#define SLOTS 4
#define BLOCKS 8
#define ITEM_BYTES (TENSORS * FIXTURE_STRIDE)
#define OURS 2       /* our cluster */
#define THEIRS 9     /* the peer's cluster */
#define THEIR_ID 500 /* the initiator's transfer id */
#define REQUEST_ID 31

static TransferFixture fx;
static Cluster *ours;
static Cache *cache;
static InLink *inlink;

static void setup(void)
{
        transfer_fixture_init(&fx);
        ours = transfer_fixture_cluster(&fx, OURS);
        cache = transfer_fixture_cache(&fx, ours, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL,
                                       CACHE_SEED);
        /* Made after the cache was registered: it reaches it. */
        ck_assert_int_eq(
                link_inlink_new(&fx.link, fx.peer, ours, THEIRS, CLUSTER_ROLE_MIX, &inlink), 0);
}

static void teardown(void)
{
        transfer_fixture_done(&fx);
}

/* The peer's request for slot @slot of our cache; its cache is shaped like ours. */
static TransferPeerRequest item_request(TransferKind kind, uint32_t slot, RemoteDesc *theirs)
{
        *theirs = (RemoteDesc){
                .num_tensors = TENSORS,
                .tensor_size = SLOTS * FIXTURE_STRIDE,
                .units = SLOTS,
        };
        return (TransferPeerRequest){
                .job_id = THEIR_ID,
                .link_id = inlink->id,
                .initiator_link_id = 12,
                .key = transfer_fixture_id_index(OURS, cache->id, slot),
                .local = theirs,
                .args = transfer_fixture_item_args(kind, 0),
                .timeout_ms = 1000,
        };
}

/* Nothing is held or listed after a refusal or the end of a served transfer. */
static void check_let_go(void)
{
        ck_assert_uint_eq(fx.root.n_served, 0);
        ck_assert_uint_eq(inlink->n_inflight, 0);
        ck_assert_uint_eq(fx.peer->n_served, 0);
        ck_assert_uint_eq(cache->n_busy, 0);
}

static void check_refused(int status)
{
        ck_assert_uint_eq(fx.rec.n_answers, 0);
        ck_assert_uint_eq(fx.rec.n_refusals, 1);
        ck_assert_uint_eq(fx.rec.refuse_request_id, REQUEST_ID);
        ck_assert_int_eq(fx.rec.refusal.code, status);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        check_let_go();
}

START_TEST(test_refuse_unknown_cache)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        req.key.cache_id = cache->id + 1000;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_CACHE_NOT_EXIST);
}
END_TEST

START_TEST(test_refuse_other_cluster)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        /* The key names a cluster the inbound link does not reach. */
        req.key.cluster_id = OURS + 1;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_CACHE_NOT_EXIST);
}
END_TEST

START_TEST(test_refuse_slot_out_of_range)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, SLOTS, &theirs);

        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_PARAM_INVALID);
}
END_TEST

START_TEST(test_refuse_blocks_out_of_range)
{
        CacheKey key = {CACHE_KEY_BLOCKS, OURS, CACHE_ID_NONE, CACHE_ID_NONE, 5, 0, 0};
        const uint64_t src_blocks[] = {1, BLOCKS}, dst_blocks[] = {0, 1};
        Cache *blocks;
        InLink *il;
        RemoteDesc theirs = {
                .blocks = true,
                .num_tensors = TENSORS,
                .tensor_size = BLOCKS * FIXTURE_STRIDE,
                .units = BLOCKS,
        };
        TransferPeerRequest req;

        blocks = transfer_fixture_cache(&fx, ours, CACHE_BLOCKS, TENSORS, BLOCKS, &key, CACHE_SEED);
        ck_assert_int_eq(
                link_inlink_new(&fx.link, fx.peer, ours, THEIRS + 1, CLUSTER_ROLE_MIX, &il), 0);
        req = (TransferPeerRequest){
                .job_id = THEIR_ID,
                .link_id = il->id,
                .key = key,
                .local = &theirs,
                .args = transfer_fixture_item_args(TRANSFER_PULL_BLOCKS, 0),
                .timeout_ms = 1000,
        };
        req.args.src_blocks = src_blocks;
        req.args.n_src_blocks = 2;
        req.args.dst_blocks = dst_blocks;
        req.args.n_dst_blocks = 2;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(fx.rec.refusal.msg, "out of range"));
        ck_assert_uint_eq(blocks->n_busy, 0);

        /* In range, the same request is served. */
        req.args.src_blocks = dst_blocks;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID + 1, &req);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        ck_assert_uint_eq(fx.rec.answer.total_bytes, 2 * TENSORS * FIXTURE_STRIDE);
        ck_assert_uint_eq(blocks->n_busy, 1);
        fake_transport_complete(fx.tcp, fake_transport_job(fx.tcp, 0), 0);
        ck_assert_uint_eq(blocks->n_busy, 0);
}
END_TEST

START_TEST(test_refuse_unknown_inlink)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        req.link_id = inlink->id + 1000;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_NOT_YET_LINK);
}
END_TEST

START_TEST(test_refuse_undecoded_key)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        error_set(&req.key_err, STATUS_PARAM_INVALID, "a cache key is missing");
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_PARAM_INVALID);
        ck_assert_str_eq(fx.rec.refusal.msg, "a cache key is missing");
}
END_TEST

START_TEST(test_refuse_missing_shape)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        req.local = NULL;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        check_refused(STATUS_PARAM_INVALID);
        ck_assert_str_eq(fx.rec.refusal.msg, "the peer's cache shape is missing");
}
END_TEST

START_TEST(test_notice_is_not_served)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 0, &theirs);

        /* A PeerTransfer sent as a notice has nobody to answer: counted and dropped. */
        served_handle_transfer(&fx.root, fx.peer, 0, &req);
        ck_assert_uint_eq(fx.link.counters.peer_requests_refused, 1);
        ck_assert_uint_eq(fx.rec.n_answers + fx.rec.n_refusals, 0);
        check_let_go();
}
END_TEST

START_TEST(test_pull_sends_the_slot)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 1, &theirs);
        TransportJob *job;

        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        ck_assert_uint_eq(fx.rec.answer_request_id, REQUEST_ID);
        ck_assert_ptr_nonnull(fx.rec.answer.remote);
        ck_assert_uint_eq(fx.rec.answer.remote->num_tensors, TENSORS);
        ck_assert_uint_eq(fx.rec.answer.remote->units, SLOTS);
        ck_assert_uint_eq(fx.rec.answer.remote_index, 1);
        ck_assert_uint_eq(fx.rec.answer.total_bytes, ITEM_BYTES);
        ck_assert_uint_eq(fx.rec.answer.segments, TENSORS);
        ck_assert_uint_eq(fx.rec.answer.job_id, THEIR_ID); /* a pull goes as the peer's job */
        ck_assert_uint_eq(fx.rec.answer.n_descs, 0);
        ck_assert_uint_eq(fx.root.n_served, 1);
        ck_assert_uint_eq(cache->n_busy, 1);

        /* The data job existed before the answer: our slot 1, tensor by tensor. */
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_uint_eq(job->id, THEIR_ID);
        ck_assert_ptr_eq(job->channel, fx.peer->data);
        ck_assert_uint_eq(job->n_segs, TENSORS);
        for (uint32_t t = 0; t < TENSORS; t++) {
                ck_assert_ptr_eq(job->segs[t].region, cache->tensors[t].region);
                ck_assert_uint_eq(job->segs[t].offset, cache->tensors[t].offset + FIXTURE_STRIDE);
                ck_assert_uint_eq(job->segs[t].len, FIXTURE_STRIDE);
        }
        ck_assert_int_eq(fake_transport_gather(job, stream, sizeof(stream)), 0);
        for (uint32_t t = 0; t < TENSORS; t++)
                ck_assert_int_eq(harness_check_pattern_at(
                                         stream + t * FIXTURE_STRIDE, FIXTURE_STRIDE, CACHE_SEED,
                                         cache->tensors[t].offset + FIXTURE_STRIDE),
                                 -1);

        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 1);
        ck_assert_uint_eq(fx.root.counters.bytes_served, ITEM_BYTES);
        ck_assert_uint_eq(inlink->n_served, 1);
        ck_assert_uint_eq(fx.rec.n_push_done, 0); /* a pull's end is the peer's to see */
        check_let_go();
        image = transfer_fixture_image(cache, CACHE_SEED);
        transfer_fixture_check_image(cache, image);
}
END_TEST

/*
 * A pull with a notification over TCP: sent is not read. Our cluster is told (a pull's, from the
 * peer's cluster) only on the initiator's word that every byte landed; a word that says the pull
 * failed tells nothing.
 */
static void pull_notify(int word)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 1, &theirs);
        TransportJob *job;
        NotifyEvent *e;

        req.notify = (const uint8_t *)"read";
        req.notify_len = 4;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.root.n_served, 1);
        ck_assert_uint_eq(cache->n_busy, 1);
        ck_assert_uint_eq(ours->n_notifies, 0);
        /* A word for another transfer changes nothing. */
        served_handle_remote_done(&fx.root, fx.peer, THEIR_ID + 1, STATUS_OK);
        ck_assert_uint_eq(fx.root.n_served, 1);

        served_handle_remote_done(&fx.root, fx.peer, THEIR_ID, word);
        ck_assert_uint_eq(fx.rec.n_push_done, 0);
        check_let_go();
        if (word != STATUS_OK) {
                ck_assert_uint_eq(ours->n_notifies, 0);
                return;
        }
        ck_assert_uint_eq(fx.root.counters.transfers_served, 1);
        ck_assert_uint_eq(ours->n_notifies, 1);
        e = clist_first_entry(&ours->notifies, NotifyEvent, link);
        ck_assert(e->pull);
        ck_assert_uint_eq(e->src_cluster_id, THEIRS);
        ck_assert_uint_eq(e->len, 4);
        ck_assert_mem_eq(e->data, "read", 4);
}

START_TEST(test_pull_notify_on_word)
{
        pull_notify(STATUS_OK);
}
END_TEST

START_TEST(test_pull_notify_failed_word)
{
        pull_notify(STATUS_TIMEOUT);
}
END_TEST

/* The peer pushes into our slot 3: a receive job under our id, answered before any byte. */
static TransportJob *push_start(void)
{
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PUSH_CACHE, 3, &theirs);
        Served *s;
        TransportJob *job;

        req.notify = (const uint8_t *)"yo";
        req.notify_len = 2;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        s = transfer_fixture_last_served(&fx);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(fx.rec.answer.job_id, s->id);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_uint_eq(job->id, s->id);
        return job;
}

START_TEST(test_push_lands_and_tells)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        TransportJob *job = push_start();

        harness_fill_pattern(stream, sizeof(stream), PEER_SEED);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.rec.n_push_done, 1);
        ck_assert_uint_eq(fx.rec.push_done_id, THEIR_ID);
        ck_assert_int_eq(fx.rec.push_done_status, STATUS_OK);
        ck_assert_uint_eq(ours->n_notifies, 1);
        check_let_go();

        image = transfer_fixture_image(cache, CACHE_SEED);
        for (uint32_t t = 0; t < TENSORS; t++)
                harness_fill_pattern_at(image + cache->tensors[t].offset + 3 * FIXTURE_STRIDE,
                                        FIXTURE_STRIDE, PEER_SEED, t * FIXTURE_STRIDE);
        transfer_fixture_check_image(cache, image);
}
END_TEST

START_TEST(test_push_cancelled_by_peer)
{
        TransportJob *job = push_start();

        served_handle_transfer_cancel(&fx.root, fx.peer, THEIR_ID + 1); /* not ours */
        ck_assert_uint_eq(fx.tcp->n_cancelled, 0);
        served_handle_transfer_cancel(&fx.root, fx.peer, THEIR_ID);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        ck_assert_ptr_eq(fx.tcp->last_cancelled, job);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(fx.rec.n_push_done, 1);
        ck_assert_int_eq(fx.rec.push_done_status, STATUS_TIMEOUT);
        ck_assert_uint_eq(ours->n_notifies, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 0);
        check_let_go();
}
END_TEST

START_TEST(test_push_deadline)
{
        TransportJob *job = push_start();

        transfer_fixture_expire(&fx, transfer_fixture_last_served(&fx)->timer);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(fx.rec.n_push_done, 1);
        ck_assert_int_eq(fx.rec.push_done_status, STATUS_TIMEOUT);
        check_let_go();
}
END_TEST

START_TEST(test_peer_lost_while_serving)
{
        _cleanup_free_ uint8_t *image = NULL;
        TransportJob *job = push_start();

        served_on_peer_lost(fx.peer);
        ck_assert_uint_eq(fx.peer->n_served, 0);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        ck_assert_ptr_eq(fx.tcp->last_cancelled, job);
        fake_transport_complete(fx.tcp, job, -ECONNRESET);
        /* Nobody is left to tell, nothing is delivered, the cache is let go. */
        ck_assert_uint_eq(fx.rec.n_push_done, 0);
        ck_assert_uint_eq(ours->n_notifies, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 0);
        check_let_go();
        image = transfer_fixture_image(cache, CACHE_SEED);
        transfer_fixture_check_image(cache, image);
}
END_TEST

START_TEST(test_inlink_gone_while_serving)
{
        TransportJob *job;
        RemoteDesc theirs;
        TransferPeerRequest req = item_request(TRANSFER_PULL_CACHE, 2, &theirs);

        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        inlink = link_inlink_free(inlink, STATUS_PEER_LOST, "unlinked by the test");
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(fx.root.n_served, 0);
        ck_assert_uint_eq(cache->n_busy, 0);
}
END_TEST

/*
 * Links are two-way: the peer's cluster we linked to moves bytes over our link, named by the id
 * the peer granted it (link_id 0, linked_link_id), checked as over an inbound link.
 */
#define GRANTED 4242 /* transfer_fixture_remote_link()'s grant */

static Link *ourlink;

static void setup_two_way(void)
{
        setup();
        /* Our cluster linked to THEIRS after the cache was registered: the link exposes it. */
        ourlink = transfer_fixture_remote_link(&fx, ours, THEIRS);
}

/* The peer's request over our link for slot @slot of our cache. */
static TransferPeerRequest linked_request(TransferKind kind, uint32_t slot, RemoteDesc *theirs)
{
        TransferPeerRequest req = item_request(kind, slot, theirs);

        req.link_id = 0;
        req.linked_link_id = GRANTED;
        return req;
}

static void check_link_let_go(void)
{
        check_let_go();
        ck_assert_uint_eq(ourlink->n_served_inflight, 0);
        ck_assert(clist_is_empty(&ourlink->served));
}

START_TEST(test_linked_pull_sends_the_slot)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        RemoteDesc theirs;
        TransferPeerRequest req = linked_request(TRANSFER_PULL_CACHE, 1, &theirs);
        TransportJob *job;

        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_refusals, 0);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        ck_assert_uint_eq(fx.rec.answer.remote_index, 1);
        ck_assert_uint_eq(fx.rec.answer.total_bytes, ITEM_BYTES);
        ck_assert_uint_eq(ourlink->n_served_inflight, 1);
        ck_assert_uint_eq(inlink->n_inflight, 0);
        ck_assert_uint_eq(cache->n_busy, 1);

        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_uint_eq(job->id, THEIR_ID);
        ck_assert_ptr_eq(job->channel, fx.peer->data);
        ck_assert_uint_eq(job->n_segs, TENSORS);
        ck_assert_int_eq(fake_transport_gather(job, stream, sizeof(stream)), 0);
        for (uint32_t t = 0; t < TENSORS; t++)
                ck_assert_int_eq(harness_check_pattern_at(
                                         stream + t * FIXTURE_STRIDE, FIXTURE_STRIDE, CACHE_SEED,
                                         cache->tensors[t].offset + FIXTURE_STRIDE),
                                 -1);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_served, 1);
        ck_assert_uint_eq(ourlink->n_transfers, 1);
        ck_assert_uint_eq(ourlink->bytes, ITEM_BYTES);
        check_link_let_go();
        image = transfer_fixture_image(cache, CACHE_SEED);
        transfer_fixture_check_image(cache, image);
}
END_TEST

START_TEST(test_linked_push_lands_and_notifies)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        RemoteDesc theirs;
        TransferPeerRequest req = linked_request(TRANSFER_PUSH_CACHE, 3, &theirs);
        TransportJob *job;

        req.notify = (const uint8_t *)"in";
        req.notify_len = 2;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        harness_fill_pattern(stream, sizeof(stream), PEER_SEED);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(fx.rec.n_push_done, 1);
        ck_assert_int_eq(fx.rec.push_done_status, STATUS_OK);
        /* The notification goes to our cluster at the link's end, from the peer's. */
        ck_assert_uint_eq(ours->n_notifies, 1);
        check_link_let_go();

        image = transfer_fixture_image(cache, CACHE_SEED);
        for (uint32_t t = 0; t < TENSORS; t++)
                harness_fill_pattern_at(image + cache->tensors[t].offset + 3 * FIXTURE_STRIDE,
                                        FIXTURE_STRIDE, PEER_SEED, t * FIXTURE_STRIDE);
        transfer_fixture_check_image(cache, image);
}
END_TEST

START_TEST(test_linked_refused)
{
        _cleanup_free_ uint8_t *image = NULL;
        RemoteDesc theirs;
        TransferPeerRequest req;
        Cache *late;
        unsigned n = 0;

        /* A cache registered after our link is not exposed through it. */
        late = transfer_fixture_cache(&fx, ours, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 77);

        /* A link the peer never granted us; neither id at all. */
        req = linked_request(TRANSFER_PULL_CACHE, 0, &theirs);
        req.linked_link_id = GRANTED + 1;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_NOT_YET_LINK);
        n++;
        req.linked_link_id = 0;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_NOT_YET_LINK);
        n++;
        /* A key of a cluster not at our end of the link. */
        req = linked_request(TRANSFER_PUSH_CACHE, 0, &theirs);
        req.key.cluster_id = OURS + 1;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_CACHE_NOT_EXIST);
        n++;
        /* Registered after the link: pull and push. */
        req = linked_request(TRANSFER_PULL_CACHE, 0, &theirs);
        req.key = transfer_fixture_id_index(OURS, late->id, 0);
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_PERMISSION_DENIED);
        ck_assert_ptr_nonnull(strstr(fx.rec.refusal.msg, "was registered after link"));
        n++;
        req.args.kind = TRANSFER_PUSH_CACHE;
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_PERMISSION_DENIED);
        n++;
        /* A slot past the end, pushed into. */
        req = linked_request(TRANSFER_PUSH_CACHE, SLOTS, &theirs);
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_PARAM_INVALID);
        n++;
        /* Our link went down (the peer's cluster unlinked it): nothing over it. */
        link_set_down(ourlink, STATUS_NOT_YET_LINK, "unlinked by the test");
        req = linked_request(TRANSFER_PULL_CACHE, 0, &theirs);
        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_int_eq(fx.rec.refusal.code, STATUS_NOT_YET_LINK);
        n++;

        ck_assert_uint_eq(fx.rec.n_refusals, n);
        ck_assert_uint_eq(fx.rec.n_answers, 0);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(late->n_busy, 0);
        check_link_let_go();
        image = transfer_fixture_image(cache, CACHE_SEED);
        transfer_fixture_check_image(cache, image);
}
END_TEST

START_TEST(test_linked_link_gone_while_serving)
{
        RemoteDesc theirs;
        TransferPeerRequest req = linked_request(TRANSFER_PUSH_CACHE, 2, &theirs);
        TransportJob *job;

        served_handle_transfer(&fx.root, fx.peer, REQUEST_ID, &req);
        ck_assert_uint_eq(fx.rec.n_answers, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        /* Our cluster unlinks: the peer's push over the link stops, nothing is delivered. */
        ourlink = link_free_full(ourlink, STATUS_NOT_YET_LINK, false);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        ck_assert_ptr_eq(fx.tcp->last_cancelled, job);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(fx.rec.n_push_done, 1);
        ck_assert_int_eq(fx.rec.push_done_status, STATUS_NOT_YET_LINK);
        ck_assert_uint_eq(ours->n_notifies, 0);
        check_let_go();
}
END_TEST

static Suite *served_suite(void)
{
        Suite *s = suite_create("served");
        TCase *tc = tcase_create("refused");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_refuse_unknown_cache);
        tcase_add_test(tc, test_refuse_other_cluster);
        tcase_add_test(tc, test_refuse_slot_out_of_range);
        tcase_add_test(tc, test_refuse_blocks_out_of_range);
        tcase_add_test(tc, test_refuse_unknown_inlink);
        tcase_add_test(tc, test_refuse_undecoded_key);
        tcase_add_test(tc, test_refuse_missing_shape);
        tcase_add_test(tc, test_notice_is_not_served);
        suite_add_tcase(s, tc);

        tc = tcase_create("served");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_pull_sends_the_slot);
        tcase_add_test(tc, test_pull_notify_on_word);
        tcase_add_test(tc, test_pull_notify_failed_word);
        tcase_add_test(tc, test_push_lands_and_tells);
        tcase_add_test(tc, test_push_cancelled_by_peer);
        tcase_add_test(tc, test_push_deadline);
        tcase_add_test(tc, test_peer_lost_while_serving);
        tcase_add_test(tc, test_inlink_gone_while_serving);
        suite_add_tcase(s, tc);

        tc = tcase_create("two-way");
        tcase_add_checked_fixture(tc, setup_two_way, teardown);
        tcase_add_test(tc, test_linked_pull_sends_the_slot);
        tcase_add_test(tc, test_linked_push_lands_and_notifies);
        tcase_add_test(tc, test_linked_refused);
        tcase_add_test(tc, test_linked_link_gone_while_serving);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(served_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
