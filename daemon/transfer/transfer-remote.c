/* SPDX-License-Identifier: MIT */
/*
 * Transfer, remote part: a pull or push whose other end is a cluster behind a peer daemon.
 *
 *   REQUESTED   PeerTransfer sent with our cache's shape; the peer checks everything against its
 *               own state and answers with the shape of the cache the key names now.
 *   DATA        both ends built the same canonical plan; the TCP transport moves the bytes
 *               (pull: the peer sends job `id`; push: we send the job id the peer chose).
 *   FINISHED    the data plane let go of our memory; a push still waits for the peer's
 *               PeerTransferDone, which says every byte landed there.
 *
 * A transfer that fails while REQUESTED answers its client at once (no byte of ours is touched
 * yet) and leaves its call to an orphan handler that keeps the data streams in step when the
 * peer's answer comes later: a receive job that drops the bytes, or a send that aborts.
 *
 * A push over the streams that fails later is answered only once nothing of it can land over
 * there any more. Bytes we sent may still sit in socket buffers and queues on the way, so our
 * sender stopping proves nothing: the peer's PeerTransferDone does (it is sent once its receive
 * job let go of the destination). The peer enforces a deadline of its own, in its I/O threads,
 * on its clock: the budget we gave it (PeerTransfer.timeout_ms, what was left of ours) less the
 * round trip it measured, counted from when our request reached it. That request reached it
 * before its answer reached us, so its deadline is over by the time we got the answer plus the
 * budget: the fence. A peer whose word does not come by then (stopped, or its control
 * connection slow) is answered for anyway: its receiver writes nothing after its deadline.
 */
#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "daemon/transfer/plan.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/remote-plan.h"
#include "daemon/transfer/transfer-codec.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"

/* Past the peer's own deadline, for the timer and its I/O threads to notice it. */
#define TRANSFER_FENCE_SLACK_MS 200

/* The local cache of @x and whether it is the source. */
static const Cache *transfer_local_cache(const Transfer *x, bool *ret_is_src)
{
        *ret_is_src = !remote_plan_kind_is_pull(x->kind);
        return *ret_is_src ? x->caches[0] : x->caches[1];
}

/* What an orphaned request needs to know of its transfer. */
static unsigned orphan_flags(const Transfer *x)
{
        return (remote_plan_kind_is_pull(x->kind) ? TRANSFER_ORPHAN_PULL : 0) |
               (x->remote_access ? TRANSFER_ORPHAN_REMOTE_ACCESS : 0);
}

/*
 * Keeps the data streams in step for a transfer that gave up before the peer answered. A one-
 * sided transfer moved nothing through the streams, and the cancel notice already let the peer
 * release its cache.
 */
static void transfer_remote_abandon(Peer *p, unsigned flags, uint64_t job_id, uint64_t bytes)
{
        bool pull = flags & TRANSFER_ORPHAN_PULL;

        if (!p->data || bytes == 0 || (flags & TRANSFER_ORPHAN_REMOTE_ACCESS))
                return;
        (void)transport_abandon(transport_set_get(p->root->transports, TRANSPORT_ROLE_STREAM),
                                p->data, pull ? TRANSPORT_READ : TRANSPORT_WRITE, job_id, bytes);
}

void transfer_remote_on_orphan_answer(Peer *p, int status, const TransferPeerAnswer *answer,
                                      unsigned flags)
{
        if (status == STATUS_OK)
                transfer_remote_abandon(p, flags, answer->job_id, answer->total_bytes);
}

int transfer_remote_start(Transfer *x, Error *err)
{
        const TransferRequest *m = &x->req;
        TransferPeerRequest req;
        RemoteDesc local;
        Link *l = x->link;
        InLink *il = x->inlink;
        Peer *p = l ? l->peer : il->peer;
        bool local_is_src;
        usec_t now = now_usec(CLOCK_MONOTONIC);
        int r;

        if (p->state != PEER_READY)
                return error_set(err, STATUS_PEER_LOST,
                                 "the daemon of cluster %" PRIu64 " is not connected",
                                 x->remote_cluster_id);

        /* The peer resolves the key and checks the request against what it has now. What the
         * remote cluster exposed when the link was made cannot decide it: pool caches allocated
         * since are reachable, and a key may name another cache by now. */
        remote_desc_from_cache(transfer_local_cache(x, &local_is_src), &local);
        /* Over the peer's link to us: queue pairs of ours to its device, once connected
         * (link_inlink_connect()), else the data connection. */
        x->channel = l ? l->channel : il->channel;
        if (!l && x->channel)
                x->transport = transport_set_get(x->root->transports, TRANSPORT_ROLE_DIRECT);
        x->remote_access = transport_caps(x->transport)->remote_access;
        /* What is left of our deadline: the peer stops by then, on its own clock. */
        x->budget_ms =
                x->deadline_usec > now
                        ? (uint32_t)((x->deadline_usec - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC)
                        : 1;
        req = (TransferPeerRequest){
                .job_id = x->id,
                /* Over the peer's link to us: 0, which no inbound link has, and our id of it. */
                .link_id = l ? l->remote_link_id : 0,
                .linked_link_id = l ? 0 : il->id,
                .initiator_link_id = l ? l->id : il->id,
                .key = m->key,
                .local = &local,
                .args = m->args,
                .src_layers_set = m->src_layers_set,
                .dst_layers_set = m->dst_layers_set,
                .timeout_ms = x->budget_ms,
                .notify = m->notify,
                .notify_len = m->notify_len,
                .remote_access = x->remote_access,
        };
        /* Queue pairs flushed by an earlier timeout or error connect again before they serve. */
        if (x->remote_access && !transport_channel_ready(x->transport, x->channel))
                x->root->peer_ops->channel_repair(p, x->channel);
        r = x->root->peer_ops->request(p, &req, x, &x->call);
        if (r < 0)
                return error_set(err, r == -EMSGSIZE ? STATUS_LIMIT_EXCEEDED : STATUS_PEER_LOST,
                                 "cannot ask the daemon of cluster %" PRIu64 ": %s",
                                 x->remote_cluster_id, strerror(-r));
        x->phase = REMOTE_REQUESTED;
        x->peer = p;
        clist_link_tail(&p->transfers, &x->link_peer);
        return 0;
}

/* Leaves the peer's list (the transfer no longer waits for anything from it but data). */
static void transfer_remote_leave_peer(Transfer *x)
{
        if (!x->peer)
                return;
        clist_unlink(&x->link_peer);
        x->peer = NULL;
}

/* A push over the peer's data streams: what lands over there is the peer's receiver's doing. */
static bool transfer_remote_stream_push(const Transfer *x)
{
        return !x->remote_access && !remote_plan_kind_is_pull(x->kind);
}

/* Whether the failed push @x still waits for the peer's word that its receiver stopped. */
static bool transfer_remote_awaits_word(const Transfer *x)
{
        return transfer_remote_stream_push(x) && !x->remote_done && !x->fenced && x->peer &&
               x->peer->state == PEER_READY;
}

/* The fence of a failed push passed without the peer's word: its own deadline is over. */
static void transfer_remote_on_fence(evutil_socket_t fd, short what, void *userdata)
{
        Transfer *x = userdata;

        log_debug("transfer %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): no word from the "
                  "peer that its receiver stopped; its deadline for the push is over",
                  x->id, x->cluster_id, x->remote_cluster_id);
        x->fenced = true;
        if (x->phase == REMOTE_FINISHED) {
                transfer_remote_leave_peer(x);
                transfer_complete(x, x->status);
                return;
        }
        /* Our sender still holds the source (a stalled peer takes no abort markers). */
        transfer_answer_settled(x);
}

/*
 * Bounds the wait of the failed push @x for the peer's word: the peer's own deadline for it is
 * over by the time its answer came plus the budget we gave it.
 */
static void transfer_remote_arm_fence(Transfer *x)
{
        usec_t now = now_usec(CLOCK_MONOTONIC), end, delay;
        struct timeval tv;

        if (x->fence || x->remote_done)
                return;
        end = (x->answered_usec ? x->answered_usec : now) +
              (usec_t)(x->budget_ms + TRANSFER_FENCE_SLACK_MS) * USEC_PER_MSEC;
        delay = end > now ? end - now : 0;
        tv = (struct timeval){.tv_sec = (time_t)(delay / USEC_PER_SEC),
                              .tv_usec = (suseconds_t)(delay % USEC_PER_SEC)};
        x->fence = evtimer_new(x->root->link->base, transfer_remote_on_fence, x);
        if (!x->fence || evtimer_add(x->fence, &tv) < 0) {
                log_error("transfer %" PRIu64 ": cannot arm the fence of a failed push, "
                          "answering without the peer's word",
                          x->id);
                x->fenced = true;
                transfer_answer_settled(x);
        }
}

/*
 * Whether every piece of a segment at @off of @len bytes, @count pieces @step apart (count 0 is
 * one piece), lies in the first @size bytes of what a descriptor names.
 */
static bool transfer_remote_span_within(uint64_t off, uint64_t len, uint64_t count, uint64_t step,
                                        uint64_t size)
{
        uint64_t last, end;

        if (count > 1 && __builtin_mul_overflow(count - 1, step, &last))
                return false;
        if (count <= 1)
                last = 0;
        return !__builtin_add_overflow(off, last, &end) &&
               !__builtin_add_overflow(end, len, &end) && end <= size;
}

/*
 * Adds the peer's end of every planned segment of a one-sided transfer: our keys from the local
 * cache's registrations, the peer's memory from the descriptors it sent for its tensors, each
 * unpacked by our transport and required to hold every span we address in it, so that a peer
 * cannot make us read or write past what it described. No byte moves before this passed.
 */
static int transfer_remote_descs(Transfer *x, const Cache *cache, bool local_is_src,
                                 uint32_t n_src_tensors, uint32_t n_remote,
                                 const TransferPeerAnswer *m, Error *err)
{
        TransportRemote remote[KVD_MAX_TENSORS];
        const Plan *plan = x->parts[0].plan;
        TransportSegment *segs = x->parts[0].segs;
        uint64_t remote_step = local_is_src ? plan->dst_step : plan->src_step;

        if (!transport_cache_registered(x->transport, cache, false))
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "cache %" PRIu64 " is not registered with transport %s", cache->id,
                                 transport_name(x->transport));
        if (m->n_descs != n_remote || !m->descs)
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "the peer sent %zu descriptors for %" PRIu32 " tensors",
                                 m->n_descs, n_remote);
        for (uint32_t t = 0; t < n_remote; t++)
                if (transport_desc_unpack(x->transport, m->descs[t].bytes, m->descs[t].len,
                                          &remote[t]) < 0)
                        return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                         "the peer's descriptor of its tensor %" PRIu32
                                         " (%zu bytes) is not one transport %s reads",
                                         t, m->descs[t].len, transport_name(x->transport));
        for (size_t i = 0; i < plan->n_segments; i++) {
                const PlanSegment *s = &plan->segments[i];
                uint32_t lt = local_is_src ? s->src_region : s->dst_region - n_src_tensors;
                uint32_t rt = local_is_src ? s->dst_region - n_src_tensors : s->src_region;
                uint64_t roff = local_is_src ? s->dst_offset : s->src_offset;
                TransportKey key;

                if (rt >= n_remote ||
                    transport_cache_key(x->transport, cache, lt, false, NULL, &key) < 0)
                        return error_set(err, STATUS_FAILED, "segment %zu names no tensor", i);
                if (!transfer_remote_span_within(roff, s->len, s->count, remote_step,
                                                 remote[rt].len))
                        return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                         "segment %zu reaches past the %" PRIu64
                                         " bytes the peer described of its tensor %" PRIu32,
                                         i, remote[rt].len, rt);
                segs[i].lkey = key.lkey;
                transport_segment_set_remote(&segs[i], &remote[rt], roff);
        }
        return 0;
}

static void transfer_remote_on_data_done(TransportJob *job, int status);

/*
 * Lays the plan the loop checked (x->prep_req) into x->parts[0]: the plan, required to be the
 * peer's (as many segments as it said; the bytes were compared on the loop), and our side of it.
 * Reads only what stays unchanged while the transfer runs (the request, the planner's view of
 * both caches, the local cache's tensor table: the cache is busy); writes only x->parts[0]. On a
 * copy thread, or on the loop for a one-sided transfer.
 */
static int transfer_remote_lay(Transfer *x, Error *err)
{
        bool local_is_src;
        const Cache *cache = transfer_local_cache(x, &local_is_src);

        return remote_plan_lay(&x->prep_req, &x->prep_checked, cache, local_is_src,
                               x->remote_segments, &x->parts[0].plan, &x->parts[0].segs, err);
}

/* The data job's prepare step, on a copy thread. */
static int transfer_remote_prepare(const TransportJob *job, size_t part, size_t n_parts,
                                   TransportPart *ret)
{
        Transfer *x = job->userdata;
        int r;

        r = transfer_remote_lay(x, &x->parts[0].err);
        if (r < 0)
                return remote_plan_prepared(r);
        remote_plan_part(x->parts[0].plan, x->parts[0].segs, !remote_plan_kind_is_pull(x->kind),
                         ret);
        return 0;
}

/*
 * The peer's answer: check the request against both caches and compare its bytes with the
 * peer's, then start the data job. Its plan is laid by the job's prepare step, off the loop
 * where the transport set has copy threads: 200,000 segments take milliseconds. A one-sided
 * transfer lays it here, as it checks the peer's descriptors against every segment.
 */
static int transfer_remote_begin_data(Transfer *x, Peer *p, const TransferPeerAnswer *m, Error *err)
{
        RemoteDesc local, remote;
        bool local_is_src;
        const Cache *cache = transfer_local_cache(x, &local_is_src);
        int r;

        remote_desc_from_cache(cache, &local);
        r = remote_desc_check(m->remote, &remote, err);
        if (r < 0)
                return r;
        remote_plan_args_plan_request(&x->req.args, x->req.key.kind, m->remote_index, &x->prep_req);
        x->prep_tensors =
                calloc((size_t)local.num_tensors + remote.num_tensors, sizeof(PlanTensor));
        x->parts = calloc(1, sizeof(TransferPart));
        if (!x->prep_tensors || !x->parts)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        x->n_parts = 1;
        r = remote_plan_check(&x->prep_req, local_is_src ? &local : &remote,
                              local_is_src ? &remote : &local, x->prep_tensors, x->prep_caches,
                              &x->prep_checked, err);
        if (r < 0)
                return r;
        x->total_bytes = x->prep_checked.total_bytes;
        x->remote_segments = m->segments;
        if (x->total_bytes != m->total_bytes)
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "the peer planned %" PRIu64 " bytes in %" PRIu64 " segments, we "
                                 "planned %" PRIu64,
                                 m->total_bytes, m->segments, x->total_bytes);
        if (remote_plan_regions(cache, x->regions, &x->n_regions) < 0)
                return error_set(err, STATUS_FAILED, "cache %" PRIu64 " has too many regions",
                                 cache->id);

        x->job = (TransportJob){
                .dir = local_is_src ? TRANSPORT_WRITE : TRANSPORT_READ,
                .channel = x->remote_access ? (void *)x->channel : (void *)p->data,
                .id = m->job_id,
                .deadline_usec = x->deadline_usec,
                /* A pull: nothing lands in the caller's memory after its deadline. */
                .hard_deadline = true,
                .done = transfer_remote_on_data_done,
                .userdata = x,
        };
        if (x->remote_access) {
                r = transfer_remote_lay(x, err);
                if (r < 0)
                        return r;
                r = transfer_remote_descs(x, cache, local_is_src,
                                          local_is_src ? local.num_tensors : remote.num_tensors,
                                          remote.num_tensors, m, err);
                if (r < 0)
                        return r;
                x->job.segs = x->parts[0].segs;
                x->job.n_segs = x->parts[0].plan->n_segments;
                remote_plan_job_steps(x->parts[0].plan, local_is_src, &x->job);
        } else
                x->job.prepare = transfer_remote_prepare;
        r = transport_submit(x->transport, &x->job);
        if (r < 0 && x->parts[0].err.code != 0) {
                /* laid here (no copy threads), and that failed */
                *err = x->parts[0].err;
                return err->code;
        }
        if (r < 0)
                return error_set(err, STATUS_PEER_LOST, "cannot start data job %" PRIu64 ": %s",
                                 x->job.id, strerror(-r));
        x->phase = REMOTE_DATA;
        return 0;
}

/*
 * Whether the peer hears from us (PeerRemoteDone) how the transfer ended, once its data moved: a
 * pull over TCP only when the peer waits for that word (a key that may end, a notification it
 * delivers once every byte landed here).
 */
static bool transfer_remote_tells_done(const Transfer *x)
{
        return x->remote_access || !remote_plan_kind_is_pull(x->kind) ||
               x->req.key.kind == CACHE_KEY_REQ || x->req.notify_len > 0;
}

void transfer_remote_on_answer(Transfer *x, Peer *p, int status, const Error *err,
                               const TransferPeerAnswer *m)
{
        Error e = ERROR_INIT;
        int r;

        x->call = NULL;
        x->answered_usec = now_usec(CLOCK_MONOTONIC);
        if (status != STATUS_OK) {
                transfer_remote_leave_peer(x);
                x->phase = REMOTE_FINISHED;
                if (x->status == STATUS_OK) {
                        x->status = status;
                        error_set(&x->err, status, "%s", err ? err->msg : status_wire_name(status));
                }
                transfer_complete(x, status);
                return;
        }
        r = transfer_remote_begin_data(x, p, m, &e);
        if (r < 0) {
                /* The peer is sending (pull) or waiting (push): keep its stream in step. */
                transfer_remote_on_orphan_answer(p, STATUS_OK, m, orphan_flags(x));
                transfer_remote_leave_peer(x);
                x->phase = REMOTE_FINISHED;
                x->status = r;
                x->err = e;
                transfer_complete(x, r);
                return;
        }
        /* A pull needs nothing more from the peer's control connection once its job reached
         * the data plane (until then the stream may need settling); a push waits for the
         * peer's PeerTransferDone on it; a one-sided transfer, a pull by CacheKey (which may
         * end the key) and a pull with a notification tell the peer when they are done. */
        if (!transfer_remote_tells_done(x) && x->job.submitted)
                transfer_remote_leave_peer(x);
}

void transfer_remote_cancel(Transfer *x)
{
        const TransferPeerOps *ops = x->root->peer_ops;

        switch (x->phase) {
        case REMOTE_REQUESTED:
                /* No byte of ours moves until the answer: answer the client now. */
                assert(x->call);
                ops->orphan(x->call, orphan_flags(x));
                x->call = NULL;
                if (x->peer && x->peer->state == PEER_READY)
                        (void)ops->cancel(x->peer, x->id);
                transfer_remote_leave_peer(x);
                x->phase = REMOTE_FINISHED;
                transfer_complete(x, x->status);
                return;
        case REMOTE_DATA:
                if (x->peer && x->peer->state == PEER_READY)
                        (void)ops->cancel(x->peer, x->id);
                if (transfer_remote_awaits_word(x))
                        transfer_remote_arm_fence(x);
                transport_cancel(x->transport, &x->job);
                return;
        case REMOTE_FINISHED:
                /* A push whose bytes are all sent, not all landed: bytes on their way would
                 * still land. Ask the peer to stop and wait for its word (or the fence). */
                if (transfer_remote_awaits_word(x)) {
                        (void)ops->cancel(x->peer, x->id);
                        transfer_remote_arm_fence(x);
                        return;
                }
                transfer_remote_leave_peer(x);
                transfer_complete(x, x->status);
                return;
        case REMOTE_NONE:
                break;
        }
}

/*
 * The data of @x stopped moving: the peer may let go of its cache (and notify, for a one-sided
 * push; end the key of a pull by CacheKey that landed).
 */
static void transfer_remote_tell_done(Transfer *x, int status)
{
        if (!x->peer || x->peer->state != PEER_READY)
                return;
        (void)x->root->peer_ops->data_done(x->peer, x->id, status);
}

/* The data plane is done with @x's memory. */
static void transfer_remote_on_data_done(TransportJob *job, int status)
{
        Transfer *x = job->userdata;
        int error = job->error;

        if (!job->submitted) {
                /* It never reached the data plane (its plan failed, or it was cancelled while
                 * being laid): the peer's end of the stream is settled as for a late answer. */
                if (x->peer)
                        transfer_remote_abandon(x->peer, orphan_flags(x), job->id, x->total_bytes);
                if (x->n_parts > 0 && x->parts[0].err.code != 0 && x->status == STATUS_OK) {
                        x->status = x->parts[0].err.code;
                        x->err = x->parts[0].err;
                }
        }
        x->phase = REMOTE_FINISHED;
        if (x->remote_access) {
                /* Every read or write completed (or was flushed): nothing more moves. A
                 * transport error takes the link down; a cancel (our timeout) does not. */
                Link *l = x->link;
                bool link_down = error != 0 && error != -ECANCELED;

                if (status != STATUS_OK && x->status == STATUS_OK)
                        error_set(&x->err, status, "%s %s failed: %s", transport_name(x->transport),
                                  remote_plan_kind_is_pull(x->kind) ? "read" : "write",
                                  strerror(-error));
                transfer_remote_tell_done(x, status == STATUS_OK ? x->status : status);
                transfer_remote_leave_peer(x);
                transfer_complete(x, status);
                if (link_down && l && l->state == LINK_UP)
                        link_set_state(l, LINK_DOWN, STATUS_PEER_LOST);
                return;
        }
        if (status != STATUS_OK && x->status == STATUS_OK) {
                if (error == -ETIMEDOUT)
                        /* A pull's own deadline, seen by the data plane before the timer. */
                        error_set(&x->err, status,
                                  "transfer %" PRIu64 " (%s) did not finish within %" PRIu64 " ms",
                                  x->id, transfer_kind_to_string(x->kind),
                                  (x->deadline_usec - x->start_usec) / USEC_PER_MSEC);
                else
                        error_set(&x->err, status, "%s",
                                  error == -EILSEQ      ? "a data chunk failed its CRC32C check"
                                  : error == -ECANCELED ? "the peer aborted the transfer"
                                                        : "the data connection to the peer failed");
                /* A push: the answer waits (below), with this status. */
                if (!remote_plan_kind_is_pull(x->kind))
                        x->status = status;
        }
        if ((status != STATUS_OK || x->state != TRANSFER_RUNNING) &&
            transfer_remote_awaits_word(x)) {
                /* A failed push is over only when the peer's receiver stopped: its word, or the
                 * fence, ends it. */
                transfer_remote_arm_fence(x);
                return;
        }
        if (status != STATUS_OK || x->state != TRANSFER_RUNNING ||
            remote_plan_kind_is_pull(x->kind) || x->remote_done || x->fenced || !x->peer ||
            x->peer->state != PEER_READY) {
                if (remote_plan_kind_is_pull(x->kind))
                        transfer_remote_tell_done(x, status == STATUS_OK ? x->status : status);
                transfer_remote_leave_peer(x);
                transfer_complete(x, status != STATUS_OK ? status : x->remote_status);
        }
        /* Else a push whose bytes are all sent: the peer's PeerTransferDone completes it. */
}

void transfer_remote_handle_done(TransferRoot *root, Peer *p, uint64_t transfer_id, int status,
                                 const char *detail)
{
        Transfer *x;

        CLIST_FOREACH (x, &p->transfers, link_peer) {
                if (x->id != transfer_id || remote_plan_kind_is_pull(x->kind) ||
                    x->phase == REMOTE_REQUESTED)
                        continue;
                x->remote_done = true;
                x->remote_status = status;
                if (status != STATUS_OK && x->status == STATUS_OK)
                        error_set(&x->err, status, "the peer could not land the bytes: %s", detail);
                if (x->phase == REMOTE_FINISHED) {
                        transfer_remote_leave_peer(x);
                        transfer_complete(x, status);
                        return;
                }
                if (status == STATUS_TIMEOUT)
                        transfer_fail(x, status,
                                      "transfer %" PRIu64 " (%s) did not finish within %" PRIu64
                                      " ms (the receiving daemon's deadline for it passed)",
                                      x->id, transfer_kind_to_string(x->kind),
                                      (x->deadline_usec - x->start_usec) / USEC_PER_MSEC);
                else if (status != STATUS_OK)
                        transfer_fail(x, status, "the peer could not land the bytes: %s", detail);
                /* The peer's receiver stopped: nothing of the push lands any more, though our
                 * sender may still hold the source. */
                transfer_answer_settled(x);
                return;
        }
}

void transfer_remote_on_peer_lost(Transfer *x)
{
        transfer_remote_leave_peer(x);
        if (x->state == TRANSFER_RUNNING)
                transfer_fail(x, STATUS_PEER_LOST,
                              "the daemon of cluster %" PRIu64 " was lost while transfer %" PRIu64
                              " ran",
                              x->remote_cluster_id, x->id);
        else if (x->phase == REMOTE_FINISHED)
                /* A push that only waited for the peer's word: none will come. */
                transfer_complete(x, x->status);
}
