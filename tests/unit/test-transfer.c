/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the transfer state machine (transfer.c, transfer-remote.c) on a TransferRoot
 * built by hand: a same-node pull lands every byte (and nothing around it) when the fake
 * transport completes; a remote pull or push asks the peer for exactly the decoded request and
 * finishes on the peer's answer and DONE with their status; the deadline, the client going away
 * and the link going down each stop a transfer with the documented status, without a byte
 * landing. No sockets, threads or sleeps: the fakes complete jobs and deadlines are run from the
 * event loop at once.
 */
/* Before check.h, whose fail() macro would rename CompletionOps.fail. */
#include "tests/unit/transfer-fixture.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/status.h"
#include "daemon/link/notify.h"
#include "tests/harness/harness.h"

#define SRC_SEED 0x5eed0001u
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
}

static void teardown(void)
{
        transfer_fixture_done(&fx);
}

/* A *_CACHE request of item @key to or from slot @local_index of our cache @local_cache_id. */
static TransferRequest item_request(TransferKind kind, CacheKey key, uint64_t local_cache_id,
                                    uint32_t local_index)
{
        return (TransferRequest){
                .args = transfer_fixture_item_args(kind, local_index),
                .key = key,
                .local_cache_id = local_cache_id,
        };
}

/* Slot @slot of every tensor of @cache in @image becomes bytes of the stream @seed from @off. */
static void image_put_item(uint8_t *image, const Cache *cache, uint32_t slot, uint64_t seed,
                           const uint64_t *stream_offsets)
{
        for (uint32_t t = 0; t < cache->desc.num_tensors; t++)
                harness_fill_pattern_at(image + cache->tensors[t].offset + slot * FIXTURE_STRIDE,
                                        FIXTURE_STRIDE, seed, stream_offsets[t]);
}

/* Where slot @slot of each tensor of a fixture cache lies in its region's pattern stream. */
static void item_offsets(const Cache *cache, uint32_t slot, uint64_t *ret)
{
        for (uint32_t t = 0; t < cache->desc.num_tensors; t++)
                ret[t] = cache->tensors[t].offset + slot * FIXTURE_STRIDE;
}

typedef struct LocalPull {
        Cluster *a, *b;
        Cache *dst, *src;
        Link *link;
        Transfer *x;
        TransportJob *job;
        ClientAnswer answer;
} LocalPull;

/*
 * Cluster 1 pulls slot 1 of cluster 2's cache into slot 2 of its own, over the same-node fake,
 * with the notification @notify (NULL: none) for cluster 2.
 */
static void local_pull_start_notify(LocalPull *t, const char *notify)
{
        TransferRequest req;
        Error err = ERROR_INIT;

        t->a = transfer_fixture_cluster(&fx, 1);
        t->b = transfer_fixture_cluster(&fx, 2);
        t->dst =
                transfer_fixture_cache(&fx, t->a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        t->src =
                transfer_fixture_cache(&fx, t->b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, SRC_SEED);
        ck_assert_int_eq(link_new_local(&fx.link, t->a, t->b, &fx.shm->transport, &t->link), 0);

        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, t->src->id, 1),
                           t->dst->id, 2);
        if (notify) {
                req.notify = (uint8_t *)strdup(notify);
                ck_assert_ptr_nonnull(req.notify);
                req.notify_len = strlen(notify);
        }
        transfer_fixture_answer_init(&t->answer);
        ck_assert_int_eq(
                transfer_start(&fx.root, t->a, &req, &t->answer.cpl, &t->answer.result, &err), 0);
        ck_assert_ptr_null(req.src_blocks); /* taken */
        ck_assert_ptr_null(req.dst_blocks);
        ck_assert_ptr_null(req.notify);
        t->x = transfer_fixture_last(&fx);
        ck_assert_ptr_nonnull(t->x);
        ck_assert_uint_eq(fx.root.n_transfers, 1);
        ck_assert_uint_eq(t->src->n_busy, 1);
        ck_assert_uint_eq(t->dst->n_busy, 1);
        ck_assert_uint_eq(fx.shm->n_jobs, 1);
        t->job = fake_transport_job(fx.shm, 0);
        ck_assert_int_eq(t->job->dir, TRANSPORT_READ);
        ck_assert_uint_eq(fake_transport_job_bytes(t->job), ITEM_BYTES);
}

static void local_pull_start(LocalPull *t)
{
        local_pull_start_notify(t, NULL);
}

/* Nothing landed in the destination, and nothing is held any more. */
static void local_pull_check_untouched(LocalPull *t)
{
        _cleanup_free_ uint8_t *image = transfer_fixture_image(t->dst, DST_SEED);

        transfer_fixture_check_image(t->dst, image);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(t->src->n_busy, 0);
        ck_assert_uint_eq(t->dst->n_busy, 0);
}

START_TEST(test_local_pull_lands_every_byte)
{
        _cleanup_free_ uint8_t *dst_image = NULL, *src_image = NULL;
        uint64_t offsets[TENSORS];
        LocalPull t;

        local_pull_start(&t);
        /* Nothing moves before the transport says so. */
        dst_image = transfer_fixture_image(t.dst, DST_SEED);
        transfer_fixture_check_image(t.dst, dst_image);

        fake_transport_complete(fx.shm, t.job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        ck_assert_uint_eq(t.answer.result.bytes, ITEM_BYTES);
        ck_assert_uint_eq(t.answer.result.segments, TENSORS);

        item_offsets(t.src, 1, offsets);
        image_put_item(dst_image, t.dst, 2, SRC_SEED, offsets);
        transfer_fixture_check_image(t.dst, dst_image);
        src_image = transfer_fixture_image(t.src, SRC_SEED);
        transfer_fixture_check_image(t.src, src_image);

        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_ok, 1);
        ck_assert_uint_eq(fx.root.counters.bytes_pulled, ITEM_BYTES);
        ck_assert_uint_eq(t.link->bytes, ITEM_BYTES);
        ck_assert_uint_eq(t.src->n_busy, 0);
        ck_assert_uint_eq(t.dst->n_busy, 0);
}
END_TEST

START_TEST(test_local_pull_refused_before_moving)
{
        Cluster *a = transfer_fixture_cluster(&fx, 1), *b = transfer_fixture_cluster(&fx, 2);
        Cache *dst = transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 1);
        Cache *src = transfer_fixture_cache(&fx, b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 2);
        TransferRequest req;
        ClientAnswer answer;
        Link *l;
        Error err = ERROR_INIT;

        ck_assert_int_eq(link_new_local(&fx.link, a, b, &fx.shm->transport, &l), 0);
        transfer_fixture_answer_init(&answer);

        /* No such local cache. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, src->id, 1), 999, 0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_CACHE_NOT_EXIST);
        /* A slot out of range. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, src->id, SLOTS),
                           dst->id, 0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PARAM_INVALID);
        /* The key did not decode at the edge: refused in its turn. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, src->id, 0), dst->id,
                           0);
        error_set(&req.key_err, STATUS_PARAM_INVALID, "a cache key has no kind");
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PARAM_INVALID);
        ck_assert_str_eq(err.msg, "a cache key has no kind");
        /* A notification too long (and what the request owned is freed either way). */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, src->id, 0), dst->id,
                           0);
        req.notify = calloc(1, TRANSFER_NOTIFY_MAX + 1);
        ck_assert_ptr_nonnull(req.notify);
        req.notify_len = TRANSFER_NOTIFY_MAX + 1;
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PARAM_INVALID);
        ck_assert_ptr_null(req.notify);
        ck_assert_uint_eq(b->n_notifies, 0);

        ck_assert_uint_eq(fx.shm->n_submitted, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(answer.n_replies + answer.n_fails + answer.n_drops, 0);
        ck_assert_uint_eq(src->n_busy + dst->n_busy, 0);
}
END_TEST

/* A pull's notification reaches the source cluster once the copy completed, a pull's kind. */
START_TEST(test_local_pull_notify)
{
        NotifyEvent *e;
        LocalPull t;

        local_pull_start_notify(&t, "slot 1 read");
        ck_assert_uint_eq(t.b->n_notifies, 0);
        fake_transport_complete(fx.shm, t.job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(t.a->n_notifies, 0);
        ck_assert_uint_eq(t.b->n_notifies, 1);
        e = clist_first_entry(&t.b->notifies, NotifyEvent, link);
        ck_assert(e->pull);
        ck_assert_uint_eq(e->src_cluster_id, t.a->id);
        ck_assert_uint_eq(e->len, 11);
        ck_assert_mem_eq(e->data, "slot 1 read", 11);
}
END_TEST

/* A pull past its deadline tells nothing, even when the copy completes after all. */
START_TEST(test_local_pull_notify_deadline)
{
        LocalPull t;

        local_pull_start_notify(&t, "never");
        transfer_fixture_expire(&fx, t.x->timer);
        fake_transport_complete(fx.shm, t.job, 0);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(t.b->n_notifies, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
}
END_TEST

START_TEST(test_local_pull_deadline)
{
        LocalPull t;

        local_pull_start(&t);
        transfer_fixture_expire(&fx, t.x->timer);
        /* A pull is answered only once the transport let go of the caller's memory. */
        ck_assert_uint_eq(fx.shm->n_cancelled, 1);
        ck_assert_ptr_eq(fx.shm->last_cancelled, t.job);
        ck_assert_uint_eq(t.answer.n_fails, 0);

        fake_transport_complete(fx.shm, t.job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_replies, 0);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.root.counters.transfers_failed, 1);
        local_pull_check_untouched(&t);
}
END_TEST

START_TEST(test_local_pull_client_gone)
{
        LocalPull t;

        local_pull_start(&t);
        /* What control/ does when the connection goes first. */
        t.answer.cpl.cancel(&t.answer.cpl, t.answer.cpl.userdata);
        ck_assert_uint_eq(fx.shm->n_cancelled, 1);
        fake_transport_complete(fx.shm, t.job, -ECANCELED);
        /* Nobody is left to answer, and the Completion is not touched any more. */
        ck_assert_uint_eq(t.answer.n_replies + t.answer.n_fails + t.answer.n_drops, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_failed, 1);
        local_pull_check_untouched(&t);
}
END_TEST

START_TEST(test_local_pull_link_down)
{
        LocalPull t;

        local_pull_start(&t);
        link_set_state(t.link, LINK_DOWN, STATUS_PEER_LOST);
        ck_assert_uint_eq(fx.shm->n_cancelled, 1);
        ck_assert_uint_eq(t.link->n_inflight, 0);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        fake_transport_complete(fx.shm, t.job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PEER_LOST);
        local_pull_check_untouched(&t);
}
END_TEST

START_TEST(test_local_push_notifies)
{
        _cleanup_free_ uint8_t *image = NULL;
        Cluster *a = transfer_fixture_cluster(&fx, 1), *b = transfer_fixture_cluster(&fx, 2);
        Cache *src =
                transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, SRC_SEED);
        Cache *dst =
                transfer_fixture_cache(&fx, b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        uint64_t offsets[TENSORS];
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        Link *l;

        ck_assert_int_eq(link_new_local(&fx.link, a, b, &fx.shm->transport, &l), 0);
        /* Our slot 0 into slot 3 of cluster 2's cache, telling cluster 2 once it landed. */
        req = item_request(TRANSFER_PUSH_CACHE, transfer_fixture_id_index(2, dst->id, 3), src->id,
                           0);
        req.notify = (uint8_t *)strdup("ready");
        req.notify_len = 5;
        transfer_fixture_answer_init(&answer);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err), 0);
        ck_assert_uint_eq(b->n_notifies, 0);
        fake_transport_complete(fx.shm, fake_transport_job(fx.shm, 0), 0);
        ck_assert_uint_eq(answer.n_replies, 1);
        ck_assert_uint_eq(b->n_notifies, 1);
        ck_assert_uint_eq(fx.root.counters.bytes_pushed, ITEM_BYTES);

        image = transfer_fixture_image(dst, DST_SEED);
        item_offsets(src, 0, offsets);
        image_put_item(image, dst, 3, SRC_SEED, offsets);
        transfer_fixture_check_image(dst, image);
}
END_TEST

typedef struct RemoteTransfer {
        Cluster *a;
        Cache *cache; /* ours: the destination of a pull, the source of a push */
        Link *link;
        Transfer *x;
        ClientAnswer answer;
} RemoteTransfer;

/* Cluster 1 pulls (or pushes) slot @remote_slot of the peer's cache from (into) our slot 2. */
static void remote_start(RemoteTransfer *t, TransferKind kind, uint32_t remote_slot,
                         const char *notify)
{
        TransferRequest req;
        Error err = ERROR_INIT;

        t->a = transfer_fixture_cluster(&fx, 1);
        t->cache =
                transfer_fixture_cache(&fx, t->a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        t->link = transfer_fixture_remote_link(&fx, t->a, REMOTE_CLUSTER);
        req = item_request(kind,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, remote_slot),
                           t->cache->id, 2);
        if (notify) {
                req.notify = (uint8_t *)strdup(notify);
                req.notify_len = strlen(notify);
        }
        transfer_fixture_answer_init(&t->answer);
        ck_assert_int_eq(
                transfer_start(&fx.root, t->a, &req, &t->answer.cpl, &t->answer.result, &err), 0);
        t->x = transfer_fixture_last(&fx);
        ck_assert_ptr_nonnull(t->x);
        ck_assert_uint_eq(fx.rec.n_requests, 1);
        ck_assert_ptr_eq(fx.rec.request_transfer, t->x);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0); /* no byte before the peer's answer */
}

/* The peer's answer to a transfer of one item of a cache shaped like ours. */
static TransferPeerAnswer remote_answer(RemoteDesc *remote, uint32_t remote_index)
{
        *remote = (RemoteDesc){
                .blocks = false,
                .num_tensors = TENSORS,
                .tensor_size = SLOTS * FIXTURE_STRIDE,
                .units = SLOTS,
        };
        return (TransferPeerAnswer){
                .remote = remote,
                .remote_index = remote_index,
                .total_bytes = ITEM_BYTES,
                .segments = TENSORS,
                .job_id = PEER_JOB,
        };
}

START_TEST(test_remote_pull)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        uint64_t offsets[TENSORS] = {0, FIXTURE_STRIDE};
        const TransferPeerRequest *r = &fx.rec.request;
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        RemoteTransfer t;

        remote_start(&t, TRANSFER_PULL_CACHE, 3, NULL);
        /* What the peer is asked: the decoded request, our cache's shape, our link's names. */
        ck_assert_uint_eq(r->job_id, t.x->id);
        ck_assert_uint_eq(r->link_id, 4242);
        ck_assert_uint_eq(r->initiator_link_id, t.link->id);
        ck_assert_int_eq(r->key.kind, CACHE_KEY_ID_INDEX);
        ck_assert_uint_eq(r->key.cluster_id, REMOTE_CLUSTER);
        ck_assert_uint_eq(r->key.cache_id, REMOTE_CACHE);
        ck_assert_uint_eq(r->key.batch_index, 3);
        ck_assert_int_eq(r->args.kind, TRANSFER_PULL_CACHE);
        ck_assert_uint_eq(r->args.local_batch_index, 2);
        ck_assert_int_eq(r->args.size, -1);
        ck_assert(!r->src_layers_set && !r->dst_layers_set);
        /* what is left of the deadline when asked: a loaded machine may have taken a few ms */
        ck_assert_uint_le(r->timeout_ms, fx.sync_kv_timeout_ms);
        ck_assert_uint_ge(r->timeout_ms, fx.sync_kv_timeout_ms / 2);
        ck_assert_uint_eq(r->notify_len, 0);
        ck_assert(!r->remote_access);
        ck_assert_ptr_nonnull(r->local);
        ck_assert(!r->local->blocks);
        ck_assert_uint_eq(r->local->num_tensors, TENSORS);
        ck_assert_uint_eq(r->local->units, SLOTS);
        ck_assert_uint_eq(r->local->tensor_size, SLOTS * FIXTURE_STRIDE);
        ck_assert(!clist_is_empty(&fx.peer->transfers));

        ans = remote_answer(&remote, 3);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_uint_eq(job->id, PEER_JOB);
        ck_assert_ptr_eq(job->channel, fx.peer->data);
        ck_assert_uint_eq(job->n_segs, TENSORS);

        harness_fill_pattern(stream, sizeof(stream), PEER_SEED);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(t.answer.result.bytes, ITEM_BYTES);
        /* A pull by id over TCP has nothing more to tell the peer. */
        ck_assert_uint_eq(fx.rec.n_data_done, 0);

        image = transfer_fixture_image(t.cache, DST_SEED);
        image_put_item(image, t.cache, 2, PEER_SEED, offsets);
        transfer_fixture_check_image(t.cache, image);
        ck_assert(clist_is_empty(&fx.peer->transfers));
        ck_assert_uint_eq(t.cache->n_busy, 0);
}
END_TEST

/* A push over TCP: sends our slot 2, then waits for the peer's DONE, which gives the status. */
static void remote_push(int done_status, const char *detail)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        RemoteTransfer t;

        remote_start(&t, TRANSFER_PUSH_CACHE, 0, "hi");
        ck_assert_int_eq(fx.rec.request.args.kind, TRANSFER_PUSH_CACHE);
        ck_assert_uint_eq(fx.rec.request.notify_len, 2);
        ck_assert_mem_eq(fx.rec.request.notify, "hi", 2);

        ans = remote_answer(&remote, 0);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_uint_eq(job->id, PEER_JOB);
        ck_assert_int_eq(fake_transport_gather(job, stream, sizeof(stream)), 0);
        for (uint32_t tn = 0; tn < TENSORS; tn++)
                ck_assert_int_eq(harness_check_pattern_at(
                                         stream + tn * FIXTURE_STRIDE, FIXTURE_STRIDE, DST_SEED,
                                         t.cache->tensors[tn].offset + 2 * FIXTURE_STRIDE),
                                 -1);

        fake_transport_complete(fx.tcp, job, 0);
        /* Sent is not landed: the peer's word decides. */
        ck_assert_uint_eq(t.answer.n_replies + t.answer.n_fails, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 1);

        transfer_remote_handle_done(&fx.root, fx.peer, t.x->id, done_status, detail);
        if (done_status == STATUS_OK) {
                ck_assert_uint_eq(t.answer.n_replies, 1);
                ck_assert_uint_eq(t.answer.result.bytes, ITEM_BYTES);
                ck_assert_uint_eq(fx.root.counters.bytes_pushed, ITEM_BYTES);
        } else {
                ck_assert_uint_eq(t.answer.n_fails, 1);
                ck_assert_int_eq(t.answer.status, done_status);
                ck_assert_ptr_nonnull(strstr(t.answer.err.msg, detail));
        }
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        /* A push only reads our memory. */
        image = transfer_fixture_image(t.cache, DST_SEED);
        transfer_fixture_check_image(t.cache, image);
}

START_TEST(test_remote_push_done)
{
        remote_push(STATUS_OK, "");
}
END_TEST

START_TEST(test_remote_push_done_error)
{
        remote_push(STATUS_CACHE_NOT_EXIST, "the cache went away");
}
END_TEST

/*
 * A one-sided pull: cluster 1 reads slot @remote_slot of "the peer's" cache (cluster 2's here,
 * registered for remote write on a fake with remote access, which plays both devices) into slot
 * 2 of its own, over a link whose transport reaches the peer's memory.
 */
typedef struct OneSided {
        FakeTransport *direct;
        Cluster *a, *b;
        Cache *dst, *peer_cache;
        Link *link;
        Transfer *x;
        ClientAnswer answer;
        TransportDesc descs[TENSORS];
} OneSided;

/* Stands for the link's channel to the peer's device. */
static int fake_direct_channel;

static void onesided_start(OneSided *t, uint32_t remote_slot)
{
        LinkGrant *exposed = calloc(1, sizeof(*exposed));
        TransferRequest req;
        Error err = ERROR_INIT;

        ck_assert_ptr_nonnull(exposed);
        t->direct = fake_transport_new_remote(&fx.transports);
        ck_assert_ptr_nonnull(t->direct);
        t->direct->copy = true;
        t->a = transfer_fixture_cluster(&fx, 1);
        t->b = transfer_fixture_cluster(&fx, 2);
        t->dst =
                transfer_fixture_cache(&fx, t->a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        t->peer_cache = transfer_fixture_cache(&fx, t->b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL,
                                               PEER_SEED);
        ck_assert_int_eq(fake_transport_register_cache(t->direct, t->dst, false), 0);
        ck_assert_int_eq(fake_transport_register_cache(t->direct, t->peer_cache, true), 0);
        for (uint32_t tn = 0; tn < TENSORS; tn++)
                ck_assert_int_eq(transport_cache_desc(&t->direct->transport, t->peer_cache, tn,
                                                      &t->descs[tn]),
                                 0);
        exposed->link_id = 4242;
        exposed->role = CLUSTER_ROLE_MIX;
        ck_assert_int_eq(link_new_remote(&fx.link, t->a, fx.peer, REMOTE_CLUSTER, exposed,
                                         &t->direct->transport, &t->link),
                         0);
        t->link->channel = (TransportChannel *)&fake_direct_channel;

        req = item_request(TRANSFER_PULL_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, remote_slot),
                           t->dst->id, 2);
        transfer_fixture_answer_init(&t->answer);
        ck_assert_int_eq(
                transfer_start(&fx.root, t->a, &req, &t->answer.cpl, &t->answer.result, &err), 0);
        t->x = transfer_fixture_last(&fx);
        ck_assert_ptr_nonnull(t->x);
        /* The decision is the transport's: it reaches the peer's memory itself. */
        ck_assert(fx.rec.request.remote_access);
        ck_assert_uint_eq(t->direct->n_submitted, 0);
}

/* Neither cache changed: no byte moved. */
static void onesided_check_untouched(const OneSided *t)
{
        _cleanup_free_ uint8_t *ours = transfer_fixture_image(t->dst, DST_SEED);
        _cleanup_free_ uint8_t *theirs = transfer_fixture_image(t->peer_cache, PEER_SEED);

        transfer_fixture_check_image(t->dst, ours);
        transfer_fixture_check_image(t->peer_cache, theirs);
}

static void onesided_done(OneSided *t)
{
        ck_assert_uint_eq(t->direct->n_jobs, 0);
        t->direct = fake_transport_free(t->direct);
}

/* The peer's descriptors reach its tensors: every byte of its slot lands, and only there. */
START_TEST(test_onesided_pull_by_descriptors)
{
        _cleanup_free_ uint8_t *image = NULL, *theirs = NULL;
        uint64_t offsets[TENSORS];
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        OneSided t;

        onesided_start(&t, 3);
        ans = remote_answer(&remote, 3);
        ans.descs = t.descs;
        ans.n_descs = TENSORS;
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        ck_assert_uint_eq(t.direct->n_jobs, 1);
        job = fake_transport_job(t.direct, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_ptr_eq(job->channel, &fake_direct_channel);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        fake_transport_complete(t.direct, job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(t.answer.result.bytes, ITEM_BYTES);
        /* One-sided: the peer hears that we are done with its memory. */
        ck_assert_uint_eq(fx.rec.n_data_done, 1);
        ck_assert_int_eq(fx.rec.data_done_status, STATUS_OK);

        image = transfer_fixture_image(t.dst, DST_SEED);
        item_offsets(t.peer_cache, 3, offsets);
        image_put_item(image, t.dst, 2, PEER_SEED, offsets);
        transfer_fixture_check_image(t.dst, image);
        theirs = transfer_fixture_image(t.peer_cache, PEER_SEED);
        transfer_fixture_check_image(t.peer_cache, theirs);
        onesided_done(&t);
}
END_TEST

/*
 * A peer's descriptors that are not ones (another kind, cut short, missing, one too few) or
 * that describe less than the spans the plan reads: refused with PROTOCOL_MISMATCH before any
 * byte moves, whatever the bytes would have reached.
 */
static void onesided_refused(void (*spoil)(TransportDesc *descs, size_t *n), const char *why)
{
        TransferPeerAnswer ans;
        RemoteDesc remote;
        OneSided t;
        size_t n = TENSORS;

        onesided_start(&t, 1);
        spoil(t.descs, &n);
        ans = remote_answer(&remote, 1);
        ans.descs = t.descs;
        ans.n_descs = n;
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PROTOCOL_MISMATCH);
        ck_assert_msg(strstr(t.answer.err.msg, why), "%s", t.answer.err.msg);
        ck_assert_uint_eq(t.direct->n_submitted, 0);
        /* One-sided: nothing went through the streams, so nothing there to keep in step. */
        ck_assert_uint_eq(fx.tcp->n_abandoned, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        onesided_check_untouched(&t);
        onesided_done(&t);
}

static void spoil_tag(TransportDesc *d, size_t *n)
{
        d[1].bytes[0] ^= 0xff;
}

static void spoil_truncate(TransportDesc *d, size_t *n)
{
        d[0].len = FAKE_TRANSPORT_DESC_SIZE - 1;
}

static void spoil_empty(TransportDesc *d, size_t *n)
{
        d[1].len = 0;
}

static void spoil_count(TransportDesc *d, size_t *n)
{
        *n = TENSORS - 1;
}

/* The length the descriptor names ends one byte before slot 1's end: too short for the read. */
static void spoil_short(TransportDesc *d, size_t *n)
{
        TransportDesc *x = &d[1];

        for (size_t i = 0; i < 8; i++)
                x->bytes[9 + i] = (uint8_t)((uint64_t)(2 * FIXTURE_STRIDE - 1) >> (8 * i));
}

/* An address near the top: the span the plan reads would wrap. */
static void spoil_wrap(TransportDesc *d, size_t *n)
{
        for (size_t i = 0; i < 8; i++) {
                d[0].bytes[1 + i] = 0xff;
                d[0].bytes[9 + i] = 0;
        }
}

START_TEST(test_onesided_descriptor_other_kind)
{
        onesided_refused(spoil_tag, "descriptor of its tensor 1 (21 bytes) is not one transport "
                                    "fake-remote reads");
}
END_TEST

START_TEST(test_onesided_descriptor_truncated)
{
        onesided_refused(spoil_truncate, "descriptor of its tensor 0 (20 bytes) is not one");
}
END_TEST

START_TEST(test_onesided_descriptor_empty)
{
        onesided_refused(spoil_empty, "descriptor of its tensor 1 (0 bytes) is not one");
}
END_TEST

START_TEST(test_onesided_descriptor_missing)
{
        onesided_refused(spoil_count, "the peer sent 1 descriptors for 2 tensors");
}
END_TEST

START_TEST(test_onesided_descriptor_too_short)
{
        onesided_refused(spoil_short, "reaches past the 255 bytes the peer described of its "
                                      "tensor 1");
}
END_TEST

START_TEST(test_onesided_descriptor_wraps)
{
        onesided_refused(spoil_wrap, "reaches past the 0 bytes the peer described of its tensor 0");
}
END_TEST

START_TEST(test_remote_answer_error)
{
        _cleanup_free_ uint8_t *image = NULL;
        RemoteTransfer t;
        Error err = ERROR_INIT;

        remote_start(&t, TRANSFER_PULL_CACHE, 1, NULL);
        error_set(&err, STATUS_PERMISSION_DENIED, "cache 77 was registered after the link");
        transfer_remote_on_answer(t.x, fx.peer, STATUS_PERMISSION_DENIED, &err, NULL);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PERMISSION_DENIED);
        ck_assert_str_eq(t.answer.err.msg, "cache 77 was registered after the link");
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        image = transfer_fixture_image(t.cache, DST_SEED);
        transfer_fixture_check_image(t.cache, image);
}
END_TEST

START_TEST(test_remote_answer_mismatch)
{
        RemoteTransfer t;
        TransferPeerAnswer ans;
        RemoteDesc remote;

        /* The peer planned otherwise: the transfer fails and its stream is kept in step. */
        remote_start(&t, TRANSFER_PULL_CACHE, 1, NULL);
        ans = remote_answer(&remote, 1);
        ans.total_bytes += 1;
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PROTOCOL_MISMATCH);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.tcp->n_abandoned, 1);
        ck_assert_int_eq(fx.tcp->abandon_dir, TRANSPORT_READ);
        ck_assert_uint_eq(fx.tcp->abandon_id, PEER_JOB);
        ck_assert_uint_eq(fx.tcp->abandon_bytes, ITEM_BYTES + 1);
}
END_TEST

START_TEST(test_remote_deadline_before_answer)
{
        TransferPeerAnswer ans;
        RemoteDesc remote;
        RemoteTransfer t;
        uint64_t id;

        remote_start(&t, TRANSFER_PULL_CACHE, 1, NULL);
        id = t.x->id;
        transfer_fixture_expire(&fx, t.x->timer);
        /* No byte of ours moves before the answer: the client hears at once. */
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.rec.n_cancels, 1);
        ck_assert_uint_eq(fx.rec.cancel_id, id);
        ck_assert_uint_eq(fx.rec.n_orphans, 1);
        ck_assert_uint_eq(fx.rec.orphan_flags, TRANSFER_ORPHAN_PULL);
        ck_assert_uint_eq(fx.root.n_transfers, 0);

        /* The answer that comes later keeps the data stream in step. */
        ans = remote_answer(&remote, 1);
        transfer_remote_on_orphan_answer(fx.peer, STATUS_OK, &ans, fx.rec.orphan_flags);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(fx.tcp->n_abandoned, 1);
        ck_assert_ptr_eq(fx.tcp->abandon_channel, fx.peer->data);
        ck_assert_int_eq(fx.tcp->abandon_dir, TRANSPORT_READ);
        ck_assert_uint_eq(fx.tcp->abandon_id, PEER_JOB);
        ck_assert_uint_eq(fx.tcp->abandon_bytes, ITEM_BYTES);
}
END_TEST

START_TEST(test_remote_link_down_while_moving)
{
        _cleanup_free_ uint8_t *image = NULL;
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        RemoteTransfer t;

        remote_start(&t, TRANSFER_PULL_CACHE, 1, NULL);
        ans = remote_answer(&remote, 1);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);

        link_set_state(t.link, LINK_DOWN, STATUS_PEER_LOST);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        /* A pull by id left the peer's list once its data moved: the stream tells the peer. */
        ck_assert_uint_eq(fx.rec.n_cancels, 0);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_PEER_LOST);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        image = transfer_fixture_image(t.cache, DST_SEED);
        transfer_fixture_check_image(t.cache, image);
}
END_TEST

START_TEST(test_remote_pull_by_req_key_tells_peer)
{
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        RemoteTransfer t;
        uint8_t stream[ITEM_BYTES] = {0};
        TransferRequest req;
        Error err = ERROR_INIT;
        CacheKey key = {CACHE_KEY_REQ, REMOTE_CLUSTER, 12, CACHE_ID_NONE, 0, 0, 0};

        /* A pull by CacheKey may end the key over there: the peer hears how it ended. */
        t.a = transfer_fixture_cluster(&fx, 1);
        t.cache =
                transfer_fixture_cache(&fx, t.a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        t.link = transfer_fixture_remote_link(&fx, t.a, REMOTE_CLUSTER);
        req = item_request(TRANSFER_PULL_CACHE, key, t.cache->id, 0);
        transfer_fixture_answer_init(&t.answer);
        ck_assert_int_eq(transfer_start(&fx.root, t.a, &req, &t.answer.cpl, &t.answer.result, &err),
                         0);
        t.x = transfer_fixture_last(&fx);
        ck_assert_int_eq(fx.rec.request.key.kind, CACHE_KEY_REQ);
        ck_assert_uint_eq(fx.rec.request.key.req_id, 12);

        ans = remote_answer(&remote, 0);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(t.answer.n_replies, 1);
        ck_assert_uint_eq(fx.rec.n_data_done, 1);
        ck_assert_uint_eq(fx.rec.data_done_id, fx.rec.request.job_id);
        ck_assert_int_eq(fx.rec.data_done_status, STATUS_OK);
        ck_assert(clist_is_empty(&fx.peer->transfers));
}
END_TEST

START_TEST(test_remote_push_client_gone)
{
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        RemoteTransfer t;
        uint64_t id;

        remote_start(&t, TRANSFER_PUSH_CACHE, 0, NULL);
        id = t.x->id;
        ans = remote_answer(&remote, 0);
        transfer_remote_on_answer(t.x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);

        t.answer.cpl.cancel(&t.answer.cpl, t.answer.cpl.userdata);
        /* A push waits on the peer's list for its word: the peer hears of the cancel. */
        ck_assert_uint_eq(fx.rec.n_cancels, 1);
        ck_assert_uint_eq(fx.rec.cancel_id, id);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        /* Bytes sent may still land over there: it waits for the word that they stopped. */
        ck_assert_uint_eq(fx.root.n_transfers, 1);
        transfer_remote_handle_done(&fx.root, fx.peer, id, STATUS_TIMEOUT, "");
        ck_assert_uint_eq(t.answer.n_replies + t.answer.n_fails + t.answer.n_drops, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(fx.root.counters.transfers_failed, 1);
}
END_TEST

/* A push past its deadline over TCP, its bytes sent and more on their way. */
static TransportJob *remote_push_past_deadline(RemoteTransfer *t)
{
        TransferPeerAnswer ans;
        TransportJob *job;
        RemoteDesc remote;
        uint64_t id;

        remote_start(t, TRANSFER_PUSH_CACHE, 0, NULL);
        id = t->x->id;
        /* The peer gets what is left of our deadline, which it holds on its own. */
        ck_assert_uint_gt(fx.rec.request.timeout_ms, 0);
        ck_assert_uint_le(fx.rec.request.timeout_ms,
                          (t->x->deadline_usec - t->x->start_usec) / USEC_PER_MSEC);
        ans = remote_answer(&remote, 0);
        transfer_remote_on_answer(t->x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);

        transfer_fixture_expire(&fx, t->x->timer);
        /* The peer is told to stop, our sender stops; the client waits for the peer's word. */
        ck_assert_uint_eq(fx.rec.n_cancels, 1);
        ck_assert_uint_eq(fx.rec.cancel_id, id);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        ck_assert_ptr_nonnull(t->x->fence);
        ck_assert_uint_eq(t->answer.n_replies + t->answer.n_fails, 0);
        return job;
}

/*
 * A push past its deadline is answered once the peer said its receiver stopped, not when our
 * sender stopped: bytes on their way would still land.
 */
START_TEST(test_remote_push_deadline_waits_for_word)
{
        _cleanup_free_ uint8_t *image = NULL;
        RemoteTransfer t;
        TransportJob *job = remote_push_past_deadline(&t);
        uint64_t id = t.x->id;

        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_replies + t.answer.n_fails, 0);
        ck_assert_uint_eq(fx.root.n_transfers, 1);
        transfer_remote_handle_done(&fx.root, fx.peer, id, STATUS_TIMEOUT, "");
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(t.answer.err.msg, "did not finish within"));
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        image = transfer_fixture_image(t.cache, DST_SEED);
        transfer_fixture_check_image(t.cache, image);
}
END_TEST

/*
 * The peer's word that its receiver stopped comes while our sender still holds the source (a
 * slow link takes the abort markers late): the client is answered, the transfer lives on.
 */
START_TEST(test_remote_push_word_before_sender)
{
        RemoteTransfer t;
        TransportJob *job = remote_push_past_deadline(&t);

        transfer_remote_handle_done(&fx.root, fx.peer, t.x->id, STATUS_TIMEOUT, "");
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.root.n_transfers, 1);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
}
END_TEST

/*
 * No word comes (the peer is stopped): the fence answers, since the peer's own deadline for the
 * push is over by then; a word that comes later finds nothing.
 */
START_TEST(test_remote_push_fence)
{
        RemoteTransfer t;
        TransportJob *job = remote_push_past_deadline(&t);
        uint64_t id = t.x->id;

        /* The sender still holds the source: answered, alive until it lets go. */
        transfer_fixture_expire(&fx, t.x->fence);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.root.n_transfers, 1);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        transfer_remote_handle_done(&fx.root, fx.peer, id, STATUS_TIMEOUT, "");
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert(clist_is_empty(&fx.peer->transfers));
}
END_TEST

/* The sender let go first, then the fence passes without a word: the transfer ends. */
START_TEST(test_remote_push_fence_after_sender)
{
        RemoteTransfer t;
        TransportJob *job = remote_push_past_deadline(&t);

        fake_transport_complete(fx.tcp, job, -ECANCELED);
        ck_assert_uint_eq(t.answer.n_fails, 0);
        transfer_fixture_expire(&fx, t.x->fence);
        ck_assert_uint_eq(t.answer.n_fails, 1);
        ck_assert_int_eq(t.answer.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert(clist_is_empty(&fx.peer->transfers));
}
END_TEST

START_TEST(test_remote_request_fails)
{
        Cluster *a = transfer_fixture_cluster(&fx, 1);
        Cache *cache = transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 1);
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;

        (void)transfer_fixture_remote_link(&fx, a, REMOTE_CLUSTER);
        transfer_fixture_answer_init(&answer);
        fx.rec.request_error = -EMSGSIZE;
        req = item_request(TRANSFER_PULL_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 0), cache->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_LIMIT_EXCEEDED);
        fx.rec.request_error = -ENOTCONN;
        req = item_request(TRANSFER_PULL_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 0), cache->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PEER_LOST);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(cache->n_busy, 0);
        ck_assert(clist_is_empty(&fx.peer->transfers));
}
END_TEST

/*
 * Links are two-way: cluster 2, linked to by cluster 1 on this daemon, pulls slot 1 of 1's
 * cache (registered before the link) into slot 2 of its own over the same Link.
 */
START_TEST(test_reverse_local_pull)
{
        _cleanup_free_ uint8_t *image = NULL, *src_image = NULL;
        Cluster *a = transfer_fixture_cluster(&fx, 1), *b = transfer_fixture_cluster(&fx, 2);
        Cache *src =
                transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, SRC_SEED);
        Cache *dst =
                transfer_fixture_cache(&fx, b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        Cache *late;
        uint64_t offsets[TENSORS];
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        Transfer *x;
        Link *l;

        ck_assert_int_eq(link_new_local(&fx.link, a, b, &fx.shm->transport, &l), 0);
        late = transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 3);
        transfer_fixture_answer_init(&answer);

        /* What 1 registered after it linked is not exposed to 2. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(1, late->id, 0), dst->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PERMISSION_DENIED);
        ck_assert_ptr_nonnull(strstr(err.msg, "was registered after link"));
        req = item_request(TRANSFER_PUSH_CACHE, transfer_fixture_id_index(1, late->id, 0), dst->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PERMISSION_DENIED);
        /* A slot past the end of 1's cache. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(1, src->id, SLOTS),
                           dst->id, 0);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err),
                         STATUS_PARAM_INVALID);
        ck_assert_uint_eq(fx.shm->n_submitted, 0);

        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(1, src->id, 1), dst->id,
                           2);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err), 0);
        x = transfer_fixture_last(&fx);
        ck_assert_ptr_eq(x->link, l);
        ck_assert(x->reverse);
        ck_assert_uint_eq(l->n_inflight, 1);
        fake_transport_complete(fx.shm, fake_transport_job(fx.shm, 0), 0);
        ck_assert_uint_eq(answer.n_replies, 1);
        ck_assert_uint_eq(answer.result.bytes, ITEM_BYTES);
        ck_assert_uint_eq(l->n_inflight, 0);

        image = transfer_fixture_image(dst, DST_SEED);
        item_offsets(src, 1, offsets);
        image_put_item(image, dst, 2, SRC_SEED, offsets);
        transfer_fixture_check_image(dst, image);
        src_image = transfer_fixture_image(src, SRC_SEED);
        transfer_fixture_check_image(src, src_image);
        ck_assert_uint_eq(late->n_busy + src->n_busy + dst->n_busy, 0);
}
END_TEST

/* Cluster 2 unlinks the link 1 made to it while its pull over it runs: both directions end. */
START_TEST(test_reverse_local_unlink)
{
        _cleanup_free_ uint8_t *image = NULL;
        Cluster *a = transfer_fixture_cluster(&fx, 1), *b = transfer_fixture_cluster(&fx, 2);
        Cache *src =
                transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, SRC_SEED);
        Cache *dst =
                transfer_fixture_cache(&fx, b, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        TransportJob *job;
        Link *l;

        ck_assert_int_eq(link_new_local(&fx.link, a, b, &fx.shm->transport, &l), 0);
        transfer_fixture_answer_init(&answer);
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(1, src->id, 1), dst->id,
                           2);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err), 0);
        job = fake_transport_job(fx.shm, 0);

        ck_assert_int_eq(link_unlink_inbound(b, 1, false), 1);
        ck_assert_uint_eq(a->n_links, 0);
        ck_assert_uint_eq(b->n_links_in, 0);
        ck_assert_uint_eq(fx.shm->n_cancelled, 1);
        fake_transport_complete(fx.shm, job, -ECANCELED);
        ck_assert_uint_eq(answer.n_fails, 1);
        ck_assert_int_eq(answer.status, STATUS_NOT_YET_LINK);
        image = transfer_fixture_image(dst, DST_SEED);
        transfer_fixture_check_image(dst, image);
        ck_assert_uint_eq(src->n_busy + dst->n_busy, 0);

        /* Neither side reaches the other any more. */
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(1, src->id, 1), dst->id,
                           2);
        ck_assert_int_eq(transfer_start(&fx.root, b, &req, &answer.cpl, &answer.result, &err),
                         STATUS_NOT_YET_LINK);
        req = item_request(TRANSFER_PULL_CACHE, transfer_fixture_id_index(2, dst->id, 1), src->id,
                           2);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_NOT_YET_LINK);
        ck_assert_uint_eq(fx.shm->n_submitted, 1);
}
END_TEST

/*
 * Cluster 1, linked to by the peer's cluster, pulls over that inbound link: the peer is asked
 * with link_id 0 and the id it was granted, the bytes come over the peer's data connection.
 */
START_TEST(test_inlink_pull)
{
        _cleanup_free_ uint8_t *image = NULL;
        uint8_t stream[ITEM_BYTES];
        uint64_t offsets[TENSORS] = {0, FIXTURE_STRIDE};
        const TransferPeerRequest *r = &fx.rec.request;
        Cluster *a = transfer_fixture_cluster(&fx, 1);
        Cache *cache =
                transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, DST_SEED);
        TransferPeerAnswer ans;
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        RemoteDesc remote;
        TransportJob *job;
        Transfer *x;
        InLink *il;

        ck_assert_int_eq(
                link_inlink_new(&fx.link, fx.peer, a, REMOTE_CLUSTER, CLUSTER_ROLE_PROMPT, &il), 0);
        transfer_fixture_answer_init(&answer);
        req = item_request(TRANSFER_PULL_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 3), cache->id,
                           2);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err), 0);
        x = transfer_fixture_last(&fx);
        ck_assert_ptr_eq(x->inlink, il);
        ck_assert_ptr_null(x->link);
        ck_assert_uint_eq(il->n_outgoing, 1);
        ck_assert_uint_eq(fx.rec.n_requests, 1);
        ck_assert_uint_eq(r->link_id, 0);
        ck_assert_uint_eq(r->linked_link_id, il->id);
        ck_assert_uint_eq(r->initiator_link_id, il->id);
        ck_assert_uint_eq(r->key.cluster_id, REMOTE_CLUSTER);
        ck_assert(!r->remote_access);

        ans = remote_answer(&remote, 3);
        transfer_remote_on_answer(x, fx.peer, STATUS_OK, NULL, &ans);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_ptr_nonnull(job);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_ptr_eq(job->channel, fx.peer->data);
        harness_fill_pattern(stream, sizeof(stream), PEER_SEED);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        ck_assert_uint_eq(answer.n_replies, 1);
        ck_assert_uint_eq(il->n_outgoing, 0);
        image = transfer_fixture_image(cache, DST_SEED);
        image_put_item(image, cache, 2, PEER_SEED, offsets);
        transfer_fixture_check_image(cache, image);
        ck_assert_uint_eq(cache->n_busy, 0);
}
END_TEST

/* The inbound link goes (the peer's cluster unlinked) while our push over it waits. */
START_TEST(test_inlink_gone_while_asking)
{
        Cluster *a = transfer_fixture_cluster(&fx, 1);
        Cache *cache = transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 1);
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        InLink *il;

        ck_assert_int_eq(
                link_inlink_new(&fx.link, fx.peer, a, REMOTE_CLUSTER, CLUSTER_ROLE_PROMPT, &il), 0);
        transfer_fixture_answer_init(&answer);
        req = item_request(TRANSFER_PUSH_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 0), cache->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err), 0);
        link_inlink_free(il, STATUS_NOT_YET_LINK, "unlinked by the test");
        ck_assert_uint_eq(answer.n_fails, 1);
        ck_assert_int_eq(answer.status, STATUS_NOT_YET_LINK);
        ck_assert_uint_eq(fx.rec.n_cancels, 1);
        ck_assert_uint_eq(fx.root.n_transfers, 0);
        ck_assert_uint_eq(cache->n_busy, 0);

        /* Nothing links the two any more. */
        req = item_request(TRANSFER_PUSH_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 0), cache->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_NOT_YET_LINK);
        ck_assert_uint_eq(fx.rec.n_requests, 1);
}
END_TEST

/* Our link the peer's cluster unlinked answers NOT_YET_LINK, not PEER_LOST. */
START_TEST(test_link_unlinked_by_peer)
{
        Cluster *a = transfer_fixture_cluster(&fx, 1);
        Cache *cache = transfer_fixture_cache(&fx, a, CACHE_CONTIGUOUS, TENSORS, SLOTS, NULL, 1);
        TransferRequest req;
        ClientAnswer answer;
        Error err = ERROR_INIT;
        Link *l = transfer_fixture_remote_link(&fx, a, REMOTE_CLUSTER);

        transfer_fixture_answer_init(&answer);
        link_set_down(l, STATUS_NOT_YET_LINK, "unlinked by cluster 9");
        req = item_request(TRANSFER_PULL_CACHE,
                           transfer_fixture_id_index(REMOTE_CLUSTER, REMOTE_CACHE, 0), cache->id,
                           0);
        ck_assert_int_eq(transfer_start(&fx.root, a, &req, &answer.cpl, &answer.result, &err),
                         STATUS_NOT_YET_LINK);
        ck_assert_ptr_nonnull(strstr(err.msg, "was unlinked by cluster 9"));
        ck_assert_uint_eq(fx.rec.n_requests, 0);
}
END_TEST

static Suite *transfer_suite(void)
{
        Suite *s = suite_create("transfer");
        TCase *tc = tcase_create("local");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_local_pull_lands_every_byte);
        tcase_add_test(tc, test_local_pull_refused_before_moving);
        tcase_add_test(tc, test_local_pull_deadline);
        tcase_add_test(tc, test_local_pull_notify);
        tcase_add_test(tc, test_local_pull_notify_deadline);
        tcase_add_test(tc, test_local_pull_client_gone);
        tcase_add_test(tc, test_local_pull_link_down);
        tcase_add_test(tc, test_local_push_notifies);
        suite_add_tcase(s, tc);

        tc = tcase_create("remote");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_remote_pull);
        tcase_add_test(tc, test_remote_push_done);
        tcase_add_test(tc, test_remote_push_done_error);
        tcase_add_test(tc, test_remote_answer_error);
        tcase_add_test(tc, test_remote_answer_mismatch);
        tcase_add_test(tc, test_remote_deadline_before_answer);
        tcase_add_test(tc, test_remote_link_down_while_moving);
        tcase_add_test(tc, test_remote_pull_by_req_key_tells_peer);
        tcase_add_test(tc, test_remote_push_client_gone);
        tcase_add_test(tc, test_remote_push_deadline_waits_for_word);
        tcase_add_test(tc, test_remote_push_word_before_sender);
        tcase_add_test(tc, test_remote_push_fence);
        tcase_add_test(tc, test_remote_push_fence_after_sender);
        tcase_add_test(tc, test_remote_request_fails);
        tcase_add_test(tc, test_onesided_pull_by_descriptors);
        tcase_add_test(tc, test_onesided_descriptor_other_kind);
        tcase_add_test(tc, test_onesided_descriptor_truncated);
        tcase_add_test(tc, test_onesided_descriptor_empty);
        tcase_add_test(tc, test_onesided_descriptor_missing);
        tcase_add_test(tc, test_onesided_descriptor_too_short);
        tcase_add_test(tc, test_onesided_descriptor_wraps);
        suite_add_tcase(s, tc);

        tc = tcase_create("two-way");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_reverse_local_pull);
        tcase_add_test(tc, test_reverse_local_unlink);
        tcase_add_test(tc, test_inlink_pull);
        tcase_add_test(tc, test_inlink_gone_while_asking);
        tcase_add_test(tc, test_link_unlinked_by_peer);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transfer_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
