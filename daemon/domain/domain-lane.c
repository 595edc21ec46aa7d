/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, lanes: every message of an operation goes from one rank to another, the seq-th
 * on the lane [src][dst]; both ends count the messages of the lane in the order their calls
 * issue them, so the n-th send of rank a to rank b meets the n-th receive of rank b from rank a.
 *
 * Between daemons the receiver readies its side first and says READY with its description of
 * the message; the sender compares the descriptions and either moves the bytes or answers
 * MISMATCH, so a mismatch moves no byte and fails both ends. A lane moves its bytes over the
 * transport of the sender's link to the receiver, in one of two ways its capabilities decide
 * (transport_caps()->remote_access):
 *
 *   stream  the receiver registers a data job (under an id both ends derive from the receiver's
 *           domain id, the ranks and the seq) before its READY; the sender sends the bytes on
 *           the data connections of the peer the READY came on, or aborts the job; the receiver
 *           says DONE once every byte landed.
 *   direct  the receiver registers its destination for remote write and names it in its READY
 *           by the transport's descriptors (domain-lane-direct.c); the sender writes there
 *           one-sided and says WRITTEN once every write completed; the receiver deregisters and
 *           says DONE.
 *
 * A send completes on DONE. An end that gives up (its deadline, its call failing) says so
 * (RECV_CANCEL, SEND_CANCEL), and a READY that comes for a send that is already over is answered
 * (its stream job aborted, its direct registration told SEND_CANCEL): a readied receive always
 * ends. A direct receiver deregisters before its op completes, whatever ends it, so a write still
 * on its way fails at the sender (a remote access error, which fails that message only) and
 * nothing lands in the caller's buffers afterwards. On one daemon the two ops meet in the lane
 * and the copy engine moves the bytes. No op completes while a byte of it may still move.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "common/status.h"
#include "proto/status-wire.h"

static const char *const dtype_names[] = {
        [KVD_DT_FLOAT] = "float",   [KVD_DT_FLOAT16] = "float16", [KVD_DT_BF16] = "bf16",
        [KVD_DT_INT8] = "int8",     [KVD_DT_INT16] = "int16",     [KVD_DT_UINT16] = "uint16",
        [KVD_DT_UINT8] = "uint8",   [KVD_DT_INT32] = "int32",     [KVD_DT_INT64] = "int64",
        [KVD_DT_UINT32] = "uint32", [KVD_DT_UINT64] = "uint64",   [KVD_DT_BOOL] = "bool",
        [KVD_DT_DOUBLE] = "double",
};

static const char *dtype_name(uint32_t t)
{
        return t < ARRAY_SIZE(dtype_names) ? dtype_names[t] : "unknown";
}

static const char *op_name(uint32_t op)
{
        switch (op) {
        case OP_BATCH:
                return "batch_send_recv";
        case OP_BROADCAST:
                return "broadcast";
        case OP_ALL_GATHER:
                return "all_gather";
        }
        return "unknown operation";
}

int domain_lanes_new(Domain *dom)
{
        for (uint32_t s = 0; s < dom->n_ranks; s++)
                for (uint32_t t = 0; t < dom->n_ranks; t++) {
                        Lane *l;

                        if (!dom->ranks[s].local && !dom->ranks[t].local)
                                continue;
                        l = calloc(1, sizeof(*l));
                        if (!l)
                                return -ENOMEM;
                        l->dom = dom;
                        l->src = s;
                        l->dst = t;
                        l->local = dom->ranks[s].local && dom->ranks[t].local;
                        if (l->local)
                                l->transport = transport_set_get(dom->reg->roots.transports,
                                                                 TRANSPORT_ROLE_LOCAL);
                        clist_init(&l->ops);
                        clist_init(&l->words);
                        dom->lanes[s][t] = l;
                }
        return 0;
}

static LaneWord *lane_word_free(LaneWord *w)
{
        free(w->descs);
        free(w);
        return NULL;
}

/* The word of @kind about @seq that waits on @l, or NULL. */
static LaneWord *lane_word_find(Lane *l, XferKind kind, uint64_t seq)
{
        LaneWord *w;

        CLIST_FOREACH (w, &l->words, link)
                if (w->kind == kind && w->seq == seq)
                        return w;
        return NULL;
}

/* Takes @w off @l's words it waits with. */
static void lane_word_unlink(Lane *l, LaneWord *w)
{
        clist_unlink(&w->link);
        l->n_words--;
        l->n_word_descs -= w->n_descs;
}

void domain_lanes_free(Domain *dom)
{
        for (uint32_t s = 0; s < DOMAIN_MAX_RANKS; s++)
                for (uint32_t t = 0; t < DOMAIN_MAX_RANKS; t++) {
                        Lane *l = dom->lanes[s][t];
                        LaneWord *w, *tmp;

                        if (!l)
                                continue;
                        assert(clist_is_empty(&l->ops));
                        CLIST_FOREACH_SAFE (w, tmp, &l->words, link) {
                                clist_unlink(&w->link);
                                lane_word_free(w);
                        }
                        free(l);
                        dom->lanes[s][t] = NULL;
                }
}

void domain_lanes_set_transport(Domain *dom)
{
        for (uint32_t s = 0; s < dom->n_ranks; s++)
                for (uint32_t t = 0; t < dom->n_ranks; t++) {
                        Lane *l = dom->lanes[s][t];
                        TransportSet *ts = dom->reg->roots.transports;

                        if (!l || l->local)
                                continue;
                        if (dom->ranks[s].local) {
                                const char *why;
                                Peer *p;

                                l->direct = domain_pair_direct(dom, s, t, &p, &why) != NULL;
                        } else
                                l->direct = dom->ranks[t].pairs[s].in_direct;
                        l->transport = l->direct ? domain_lane_direct_transport(l)
                                                 : transport_set_get(ts, TRANSPORT_ROLE_STREAM);
                }
}

uint64_t domain_lane_job_id(uint64_t recv_domain_id, uint32_t src, uint32_t dst, uint64_t seq)
{
        /* The top bit keeps these apart from transfer ids (id_source_next() never gets there). */
        return UINT64_C(1) << 63 | (recv_domain_id & ((UINT64_C(1) << 37) - 1)) << 26 |
               (uint64_t)(src & 3) << 24 | (uint64_t)(dst & 3) << 22 |
               (seq & ((UINT64_C(1) << 22) - 1));
}

/*
 * Compares what the sender (rank @src) and the receiver (@dst) say of one message; 0 when they
 * agree, else a status and, in @buf, what differs.
 */
static int desc_compare(const OpDesc *s, const OpDesc *r, uint32_t src, uint32_t dst, char *buf,
                        size_t size)
{
        if (s->op != r->op)
                return snprintf(buf, size, "rank %" PRIu32 " is in %s, rank %" PRIu32 " in %s", src,
                                op_name(s->op), dst, op_name(r->op)),
                       STATUS_PARAM_INVALID;
        if (s->op == OP_BATCH) {
                if (s->count == r->count && s->dtype == r->dtype && s->bytes == r->bytes)
                        return 0;
                (void)snprintf(buf, size,
                               "rank %" PRIu32 " sends %" PRIu64 " x %s (%" PRIu64
                               " bytes), rank %" PRIu32 " receives %" PRIu64 " x %s (%" PRIu64
                               " bytes)",
                               src, s->count, dtype_name(s->dtype), s->bytes, dst, r->count,
                               dtype_name(r->dtype), r->bytes);
                return STATUS_PARAM_INVALID;
        }
        if (s->algorithm != r->algorithm || s->root != r->root || s->part != r->part ||
            s->chunk != r->chunk || s->n_chunks != r->n_chunks) {
                (void)snprintf(buf, size,
                               "rank %" PRIu32 " runs %s with %s, root %" PRIu32 ", chunk %" PRIu32
                               "/%" PRIu32 "; rank %" PRIu32 " with %s, root %" PRIu32
                               ", chunk %" PRIu32 "/%" PRIu32 " (every member must pass "
                               "the same root, algorithm, chunk size and blocks)",
                               src, op_name(s->op), s->algorithm == 1 ? "ring" : "mesh", s->root,
                               s->chunk, s->n_chunks, dst, r->algorithm == 1 ? "ring" : "mesh",
                               r->root, r->chunk, r->n_chunks);
                return STATUS_PARAM_INVALID;
        }
        if (s->num_tensors != r->num_tensors || s->block_bytes != r->block_bytes ||
            s->n_blocks != r->n_blocks || s->dtype != r->dtype || s->bytes != r->bytes) {
                (void)snprintf(buf, size,
                               "rank %" PRIu32 "'s cache has %" PRIu32 " tensors of %s"
                               " with %" PRIu64 "-byte blocks, %" PRIu64
                               " blocks given; rank %" PRIu32 "'s %" PRIu32
                               " tensors of %s with %" PRIu64 "-byte blocks, %" PRIu64 " blocks",
                               src, s->num_tensors, dtype_name(s->dtype), s->block_bytes,
                               s->n_blocks, dst, r->num_tensors, dtype_name(r->dtype),
                               r->block_bytes, r->n_blocks);
                return STATUS_CACHE_INCOMPATIBLE;
        }
        return 0;
}

/*
 * Sends one word about message @seq of @l to the remote end's daemon over @p (NULL: whichever
 * connection reaches it); a READY of direct receive @ready_op carries its descriptors.
 * Returns what peer_notice() does, -ENOTCONN without a connection.
 */
static int lane_word_send_full(Lane *l, Peer *p, XferKind kind, uint64_t seq, const OpDesc *desc,
                               int status, const char *msg, const DomainOp *ready_op)
{
        Domain *dom = l->dom;
        uint32_t remote = kind <= XFER_RECV_CANCEL ? l->src : l->dst;
        DomainXferMsg m = {
                .src_domain_id = dom->id,
                .kind = kind,
                .src_rank = l->src,
                .dst_rank = l->dst,
                .seq = seq,
                .desc = desc,
                .status = status,
                .detail = msg ?: "",
        };

        if (!p)
                p = domain_rank_peer(dom, remote);
        if (!p || p->state != PEER_READY)
                return -ENOTCONN;
        m.dst_domain_id = dom->ranks[remote].domain_id;
        if (ready_op)
                domain_lane_direct_ready_fill(ready_op, &m);
        return dom->reg->peer->xfer(p, &m);
}

static void lane_word_send(Lane *l, Peer *p, XferKind kind, uint64_t seq, const OpDesc *desc,
                           int status, const char *msg)
{
        (void)lane_word_send_full(l, p, kind, seq, desc, status, msg, NULL);
}

/*
 * A readied receive that no bytes of ours will feed: abort its stream job, or tell its direct
 * registration (SEND_CANCEL) so that the receiver lets go of it.
 */
static void lane_abort_job(Lane *l, Peer *p, uint64_t seq, uint64_t bytes, bool direct, int status,
                           const char *msg)
{
        uint64_t id = domain_lane_job_id(l->dom->ranks[l->dst].domain_id, l->src, l->dst, seq);

        if (direct)
                lane_word_send(l, p, XFER_SEND_CANCEL, seq, NULL, status, msg);
        else if (p && p->state == PEER_READY && p->data && bytes > 0)
                (void)transport_abandon(
                        transport_set_get(l->dom->reg->roots.transports, TRANSPORT_ROLE_STREAM),
                        p->data, TRANSPORT_WRITE, id, bytes);
}

/* Starts @op's side of its message's stream on @p's data connections, as job @id. */
static int lane_data_job_submit(DomainOp *op, Peer *p, TransportDir dir, uint64_t id,
                                transport_done_fn done)
{
        int r;

        op->data_job = (TransportJob){
                .dir = dir,
                .segs = op->segs,
                .n_segs = op->n_segs,
                .channel = p->data,
                .id = id,
                .deadline_usec = op->call->deadline_usec,
                .done = done,
                .userdata = op,
        };
        r = transport_submit(
                transport_set_get(op->lane->dom->reg->roots.transports, TRANSPORT_ROLE_STREAM),
                &op->data_job);
        if (r >= 0)
                op->job = true;
        return r;
}

static void op_complete(DomainOp *op, int status, const char *fmt, ...) _printf_(3, 4);
static void op_complete(DomainOp *op, int status, const char *fmt, ...)
{
        Lane *l = op->lane;
        bool abort_ready;
        va_list ap;

        if (op->state == OP_DONE)
                return;
        assert(!op->job && !op->copying && !op->writing && !op->channel_waiter);
        /* A receive's registration goes before anything else: no write lands after this. */
        domain_lane_direct_release(op);
        if (op->status == STATUS_OK && status != STATUS_OK) {
                op->status = status;
                va_start(ap, fmt);
                error_setv(&op->err, status, fmt, ap);
                va_end(ap);
        }
        /* Done and off its lane before a word goes out: a send that loses its peer runs
         * domain_on_peer_lost() right there, which must find this op over. */
        op->state = OP_DONE;
        clist_unlink(&op->link_lane);
        /* Each message counts once per lane: at the send on one daemon, else at our end. */
        if (op->status == STATUS_OK && (op->send || !l->local)) {
                l->n_msgs++;
                l->bytes += op->desc.bytes;
                l->n_direct_msgs += op->direct;
        }
        abort_ready = op->send && op->have_ready && !op->ready_spent;
        if (abort_ready) {
                /* The receiver readied itself for bytes that will never come. */
                op->ready_spent = true;
                lane_abort_job(l, op->ready_peer, op->seq, op->ready.bytes, op->ready_direct,
                               op->status ?: STATUS_FAILED, op->err.msg);
        }
        domain_call_op_done(op);
}

/*
 * Completes @op, whose bytes no longer move, with what ended it already: our own failure (a
 * cancel), else the other end's final word. Returns false, and leaves @op alone, when neither
 * came yet.
 */
static bool op_complete_told(DomainOp *op)
{
        if (op->status != STATUS_OK)
                op_complete(op, op->status, "%s", op->err.msg);
        else if (op->have_word)
                op_complete(op, op->word_status, "%s", op->word_msg);
        else
                return false;
        return true;
}

static void op_on_send_done(TransportJob *job, int status)
{
        DomainOp *op = job->userdata;
        int error = job->error;

        op->job = false;
        if (error == 0) {
                op->data_ok = true;
                if (!op_complete_told(op))
                        op->state = OP_WAIT_WORD;
                return;
        }
        if (!op_complete_told(op))
                op_complete(op, status, "sending to rank %" PRIu32 " failed: %s", op->lane->dst,
                            strerror(-error));
}

static void op_on_recv_done(TransportJob *job, int status)
{
        DomainOp *op = job->userdata;
        Lane *l = op->lane;
        int error = job->error;

        op->job = false;
        if (error == 0) {
                lane_word_send(l, op->peer, XFER_DONE, op->seq, NULL, STATUS_OK, NULL);
                op_complete(op, op->status, "%s", op->err.msg);
                return;
        }
        if (op_complete_told(op))
                return;
        if (error == -ECANCELED) {
                /* The sender aborted; its word says why. */
                op->state = OP_WAIT_WORD;
                return;
        }
        lane_word_send(l, op->peer, XFER_DONE, op->seq, NULL, status, "the bytes did not land");
        op_complete(op, status, "receiving from rank %" PRIu32 " failed: %s", l->src,
                    error == -EILSEQ ? "a chunk failed its CRC32C check" : strerror(-error));
}

/* ---- direct: one-sided writes ---- */

static void op_on_written(TransportJob *job, int status)
{
        DomainOp *op = job->userdata;
        Lane *l = op->lane;
        int error = job->error;

        op->writing = false;
        /* Our source registrations: nothing reads through them any more. */
        domain_lane_direct_release(op);
        if (error < 0 && op->channel_peer && op->channel_peer->state == PEER_READY)
                /* A failed or stopped job may have broken paths of the channel: connect them
                 * again for whatever uses it next (as after a transfer's timeout). */
                l->dom->reg->peer->channel_repair(op->channel_peer, op->channel);
        if (error == 0 && op->status == STATUS_OK) {
                op->data_ok = true;
                op->ready_spent = true;
                lane_word_send(l, op->peer, XFER_WRITTEN, op->seq, NULL, STATUS_OK, NULL);
                if (!op_complete_told(op))
                        op->state = OP_WAIT_WORD; /* the receiver's DONE completes it */
                return;
        }
        if (op_complete_told(op))
                return;
        if (error == -EACCES) {
                /* The receiver took its buffer back, which it does when it gives up: its word
                 * says why. Should it not have, SEND_CANCEL ends its wait. Only this message
                 * fails; the link and the channel stay. */
                op->ready_spent = true;
                lane_word_send(l, op->peer, XFER_SEND_CANCEL, op->seq, NULL, STATUS_FAILED,
                               "its one-sided writes were refused (remote access error)");
                op->state = OP_WAIT_WORD;
                return;
        }
        op_complete(op, STATUS_PEER_LOST, "writing to rank %" PRIu32 " over %s failed: %s", l->dst,
                    transport_name(domain_lane_direct_transport(l)), strerror(-error));
}

static void op_on_channel_ready(TransportChannel *ch, int status, const char *reason,
                                void *userdata)
{
        DomainOp *op = userdata;
        int r;

        op->channel_waiter = NULL;
        if (status < 0) {
                op_complete(op, STATUS_PEER_LOST,
                            "the %s channel to rank %" PRIu32 " did not connect: %s",
                            transport_name(domain_lane_direct_transport(op->lane)), op->lane->dst,
                            reason ? reason : strerror(-status));
                return;
        }
        op->data_job = (TransportJob){
                .dir = TRANSPORT_WRITE,
                .segs = op->write_segs,
                .n_segs = op->n_write_segs,
                .channel = ch,
                .deadline_usec = op->call->deadline_usec,
                .done = op_on_written,
                .userdata = op,
        };
        op->writing = true;
        r = transport_submit(domain_lane_direct_transport(op->lane), &op->data_job);
        if (r < 0) {
                op->writing = false;
                op_complete(op, STATUS_PEER_LOST, "cannot write to rank %" PRIu32 ": %s",
                            op->lane->dst, strerror(-r));
        }
        /* Nothing of @op past this point: the job may have ended and completed it. */
}

/* A send whose READY asks for one-sided writes: unpack, register, pair up, write over the
 * channel of the link the pair uses (ours, or the receiver's cluster's link to ours). */
static void op_direct_send_start(DomainOp *op)
{
        Lane *l = op->lane;
        Domain *dom = l->dom;
        Error e = ERROR_INIT;
        const char *why = NULL;
        TransportChannel *ch;
        Peer *p = NULL;
        int r;

        ch = domain_pair_direct(dom, l->src, l->dst, &p, &why);
        if (!ch) {
                op_complete(op, STATUS_LINK_FAILED,
                            "rank %" PRIu32 " waits for one-sided writes, but "
                            "the link of cluster %" PRIu64 " to %" PRIu64 " %s",
                            l->dst, dom->ranks[l->src].cluster_id, dom->ranks[l->dst].cluster_id,
                            why);
                return;
        }
        op->direct = true;
        op->peer = op->ready_peer;
        op->channel_peer = p;
        op->channel = ch;
        op->state = OP_DATA;
        r = domain_lane_direct_send_prepare(op, ch, &e);
        if (r < 0) {
                op_complete(op, e.code, "%s", e.msg);
                return;
        }
        /* Paths an earlier timeout or error broke connect again first. */
        r = dom->reg->peer->channel_ready(p, ch, op_on_channel_ready, op, &op->channel_waiter);
        if (r < 0) {
                op->channel_waiter = NULL;
                op_complete(op, STATUS_PEER_LOST, "no %s channel to rank %" PRIu32 ": %s",
                            transport_name(domain_lane_direct_transport(l)), l->dst, strerror(-r));
        }
}

/* A direct receive: register the destination, then READY with its descriptors. */
static void op_direct_recv_post(DomainOp *op, Peer *p)
{
        Lane *l = op->lane;
        Error e = ERROR_INIT;
        int r;

        op->direct = true;
        op->peer = p;
        r = domain_lane_direct_recv_register(op, &e);
        if (r >= 0) {
                op->state = OP_DATA;
                r = lane_word_send_full(l, p, XFER_READY, op->seq, &op->desc, STATUS_OK, NULL, op);
                if (r < 0)
                        error_set(&e, r == -EMSGSIZE ? STATUS_LIMIT_EXCEEDED : STATUS_PEER_LOST,
                                  "cannot tell rank %" PRIu32 " where to write: %s%s", l->src,
                                  strerror(-r),
                                  r == -EMSGSIZE ? " (too many segments for one "
                                                   "frame; see limits.max_frame_size)"
                                                 : "");
        }
        if (r < 0) {
                /* The sender hears that this message will not come, and fails it too. */
                lane_word_send(l, p, XFER_RECV_CANCEL, op->seq, NULL, e.code, e.msg);
                op_complete(op, e.code, "%s", e.msg);
        }
}

/* The sender says every write completed: the bytes are in place. */
static void op_direct_landed(DomainOp *op)
{
        /* Deregistered before anyone hears of it. */
        domain_lane_direct_release(op);
        lane_word_send(op->lane, op->peer, XFER_DONE, op->seq, NULL, STATUS_OK, NULL);
        op_complete(op, STATUS_OK, "%s", "");
}

/* Stops the writes of direct send @op; its completion follows (at once, or from the job's
 * end). */
static void op_direct_send_stop(DomainOp *op)
{
        if (op->channel_waiter) {
                op->lane->dom->reg->peer->channel_waiter_cancel(op->channel_waiter);
                op->channel_waiter = NULL;
                (void)op_complete_told(op);
        } else if (op->writing) {
                /* Stops the job on its channel: the callback runs before this returns. */
                transport_cancel(domain_lane_direct_transport(op->lane), &op->data_job);
        }
}

/* A send op that has the receiver's READY: compare, then send or refuse. */
static void op_remote_match(DomainOp *op)
{
        Lane *l = op->lane;
        Domain *dom = l->dom;
        char buf[ERROR_MSG_MAX];
        Peer *p = op->ready_peer;
        int r;

        r = desc_compare(&op->desc, &op->ready, l->src, l->dst, buf, sizeof(buf));
        if (r < 0) {
                lane_word_send(l, p, XFER_MISMATCH, op->seq, &op->desc, r, buf);
                /* That is all a registration needs to hear; a stream job still needs its
                 * abort. */
                op->ready_spent = op->ready_direct;
                op_complete(op, r, "%s", buf);
                return;
        }
        if (op->ready_direct) {
                op_direct_send_start(op);
                return;
        }
        if (!p || p->state != PEER_READY || !p->data) {
                op_complete(op, STATUS_PEER_LOST, "the daemon of rank %" PRIu32 " is gone", l->dst);
                return;
        }
        r = lane_data_job_submit(
                op, p, TRANSPORT_WRITE,
                domain_lane_job_id(dom->ranks[l->dst].domain_id, l->src, l->dst, op->seq),
                op_on_send_done);
        if (r < 0) {
                op_complete(op, STATUS_PEER_LOST, "cannot send to rank %" PRIu32 ": %s", l->dst,
                            strerror(-r));
                return;
        }
        op->ready_spent = true;
        op->peer = p;
        op->state = OP_DATA;
}

/* ---- ops on one daemon ---- */

static DomainOp *lane_find(Lane *l, uint64_t seq, bool send)
{
        DomainOp *op;

        CLIST_FOREACH (op, &l->ops, link_lane)
                if (op->seq == seq && op->send == send)
                        return op;
        return NULL;
}

static void local_on_copied(TransportJob *job, int status)
{
        DomainOp *s = job->userdata, *r = s->partner;
        /* A cancel (of either end) stopped the copy: each end says what stopped it. */
        const DomainOp *why = s->status ? s : r;
        int code = status == STATUS_OK ? STATUS_OK : why->status ?: STATUS_FAILED;
        const char *msg = why->status ? why->err.msg : "the copy stopped";

        s->copying = false;
        free(s->copy_segs);
        s->copy_segs = NULL;
        s->partner = r->partner = NULL;
        /* Completing an op never ends its call here (domain_call_op_done() queues it), so both ends
         * stay valid across both completions. */
        op_complete(s, code, "%s", msg);
        op_complete(r, code, "%s", msg);
}

/*
 * Builds the copies of two segment lists that add up to the same bytes, as the segments of a job
 * that reads @s's bytes into @r's.
 */
static int local_copies(const DomainOp *s, const DomainOp *r, TransportSegment **ret, size_t *ret_n)
{
        size_t cap = s->n_segs + r->n_segs, n = 0;
        TransportSegment *c = calloc(cap ? cap : 1, sizeof(*c));
        SegZip z = {0};

        if (!c)
                return -ENOMEM;
        while (z.i < s->n_segs && z.j < r->n_segs) {
                size_t i = z.i, j = z.j;
                uint64_t oi = z.oi, oj = z.oj;
                uint64_t len = seg_zip_step(&z, s->segs[i].len, r->segs[j].len, UINT64_MAX);

                if (len == 0)
                        continue;
                assert(n < cap);
                c[n++] = (TransportSegment){
                        .region = r->segs[j].region,
                        .offset = r->segs[j].offset + oj,
                        .len = len,
                        .remote_region = s->segs[i].region,
                        .remote = s->segs[i].offset + oi,
                };
        }
        *ret = c;
        *ret_n = n;
        return 0;
}

static void op_local_match(DomainOp *s, DomainOp *r)
{
        Lane *l = s->lane;
        char buf[ERROR_MSG_MAX];
        TransportSegment *copies = NULL;
        size_t n = 0;
        int k;

        k = desc_compare(&s->desc, &r->desc, l->src, l->dst, buf, sizeof(buf));
        if (k < 0) {
                op_complete(s, k, "%s", buf);
                op_complete(r, k, "%s", buf);
                return;
        }
        k = local_copies(s, r, &copies, &n);
        if (k >= 0) {
                s->copy = (TransportJob){
                        .dir = TRANSPORT_READ,
                        .segs = copies,
                        .n_segs = n,
                        .deadline_usec = s->call->deadline_usec,
                        .done = local_on_copied,
                        .userdata = s,
                };
                k = transport_submit(
                        transport_set_get(l->dom->reg->roots.transports, TRANSPORT_ROLE_LOCAL),
                        &s->copy);
        }
        if (k < 0) {
                free(copies);
                op_complete(s, STATUS_OUT_OF_MEMORY, "cannot start the copy: %s", strerror(-k));
                op_complete(r, STATUS_OUT_OF_MEMORY, "cannot start the copy: %s", strerror(-k));
                return;
        }
        s->copying = true;
        s->copy_segs = copies;
        s->partner = r;
        r->partner = s;
        s->state = r->state = OP_DATA;
}

/* ---- posting and cancelling ---- */

static void op_take_word(DomainOp *op, LaneWord *w);

/*
 * @op, of a lane on this daemon, gave up before it met the other end of its message: that end
 * fails with @op's status and reason, as it would hear them from another daemon (a receive that
 * timed out fails its sender with TIMEOUT, wherever the two are). An end not assigned yet finds
 * them among the lane's words, as words from a peer wait.
 */
static void local_give_up(const DomainOp *op)
{
        Lane *l = op->lane;
        LaneWord w = {.kind = op->send ? XFER_SEND_CANCEL : XFER_RECV_CANCEL,
                      .seq = op->seq,
                      .status = op->status};
        DomainOp *partner = lane_find(l, op->seq, !op->send);
        LaneWord *copy;

        (void)snprintf(w.msg, sizeof(w.msg), "%s", op->err.msg);
        if (partner) {
                if (partner->state == OP_ASSIGNED || partner->state == OP_POSTED)
                        op_take_word(partner, &w);
                return;
        }
        if (op->seq < (op->send ? l->next_recv_seq : l->next_send_seq) ||
            l->n_words >= LANE_MAX_WORDS)
                return;
        copy = malloc(sizeof(*copy));
        if (!copy)
                return;
        *copy = w;
        clist_link_tail(&l->words, &copy->link);
        l->n_words++;
}

void domain_op_assign(DomainOp *op, Lane *lane, bool send)
{
        LaneWord *w, *tmp;

        op->lane = lane;
        op->send = send;
        op->seq = send ? lane->next_send_seq++ : lane->next_recv_seq++;
        op->state = OP_ASSIGNED;
        clist_link_tail(&lane->ops, &op->link_lane);
        CLIST_FOREACH_SAFE (w, tmp, &lane->words, link)
                if (w->seq == op->seq) {
                        lane_word_unlink(lane, w);
                        op_take_word(op, w);
                        lane_word_free(w);
                }
}

void domain_op_post(DomainOp *op)
{
        Lane *l = op->lane;
        Domain *dom = l->dom;
        DomainOp *partner;
        Peer *p;
        int r;

        if (op->state != OP_ASSIGNED)
                return;
        op->state = OP_POSTED;
        if (op->have_word) {
                /* The other end gave up on this message already. */
                op_complete(op, op->word_status, "%s", op->word_msg);
                return;
        }
        if (l->local) {
                partner = lane_find(l, op->seq, !op->send);
                if (partner && partner->state == OP_POSTED)
                        op_local_match(op->send ? op : partner, op->send ? partner : op);
                else if (!partner && op->seq < (op->send ? l->next_recv_seq : l->next_send_seq))
                        /* Gave up while more than LANE_MAX_WORDS others waited (or no memory
                         * to keep why): only that it did is known. */
                        op_complete(op, STATUS_FAILED, "rank %" PRIu32 " gave up on this message",
                                    op->send ? l->dst : l->src);
                return;
        }
        if (op->send) {
                if (op->have_ready)
                        op_remote_match(op);
                return;
        }
        p = domain_rank_peer(dom, l->src);
        if (p && l->direct) {
                op_direct_recv_post(op, p);
                return;
        }
        if (!p || !p->data) {
                op_complete(op, STATUS_PEER_LOST,
                            "the daemon of rank %" PRIu32 " is not "
                            "connected",
                            l->src);
                return;
        }
        r = lane_data_job_submit(op, p, TRANSPORT_READ,
                                 domain_lane_job_id(dom->id, l->src, l->dst, op->seq),
                                 op_on_recv_done);
        if (r < 0) {
                op_complete(op, STATUS_PEER_LOST, "cannot receive from rank %" PRIu32 ": %s",
                            l->src, strerror(-r));
                return;
        }
        op->peer = p;
        op->state = OP_DATA;
        lane_word_send(l, p, XFER_READY, op->seq, &op->desc, STATUS_OK, NULL);
}

void domain_op_cancel(DomainOp *op, int status, const char *fmt, ...)
{
        Lane *l = op->lane;
        va_list ap;

        /* Stopped once: a collective cancels the rest of its ops on every failure of one, and
         * an op whose bytes are still being stopped must not tell the other end again each
         * time (its words would pile up there). Its end completes it with this status. */
        if (op->state == OP_DONE || op->status != STATUS_OK)
                return;
        op->status = status;
        va_start(ap, fmt);
        error_setv(&op->err, status, fmt, ap);
        va_end(ap);
        if (l->local) {
                if (op->state == OP_DATA) {
                        DomainOp *s = op->send ? op : op->partner;

                        /* The copy's end completes both (local_on_copied()). */
                        if (s)
                                transport_cancel(transport_set_get(l->dom->reg->roots.transports,
                                                                   TRANSPORT_ROLE_LOCAL),
                                                 &s->copy);
                        return;
                }
                op_complete(op, op->status, "%s", op->err.msg);
                local_give_up(op);
                return;
        }
        switch (op->state) {
        case OP_ASSIGNED:
        case OP_POSTED:
                if (op->send) {
                        lane_word_send(l, op->have_ready ? op->ready_peer : NULL, XFER_SEND_CANCEL,
                                       op->seq, NULL, op->status, op->err.msg);
                        /* All a registration needs to hear; a stream job still needs its
                         * abort. */
                        op->ready_spent = op->have_ready && op->ready_direct;
                } else
                        lane_word_send(l, NULL, XFER_RECV_CANCEL, op->seq, NULL, op->status,
                                       op->err.msg);
                op_complete(op, op->status, "%s", op->err.msg);
                return;
        case OP_DATA:
                if (op->send && op->direct) {
                        op->ready_spent = true;
                        lane_word_send(l, op->peer, XFER_SEND_CANCEL, op->seq, NULL, op->status,
                                       op->err.msg);
                        op_direct_send_stop(op);
                } else if (op->send) {
                        lane_word_send(l, op->peer, XFER_SEND_CANCEL, op->seq, NULL, op->status,
                                       op->err.msg);
                        transport_cancel(transport_set_get(l->dom->reg->roots.transports,
                                                           TRANSPORT_ROLE_STREAM),
                                         &op->data_job);
                } else if (op->direct) {
                        /* Deregistered first: from here on a write fails at the sender. */
                        domain_lane_direct_release(op);
                        lane_word_send(l, op->peer, XFER_RECV_CANCEL, op->seq, NULL, op->status,
                                       op->err.msg);
                        op_complete(op, op->status, "%s", op->err.msg);
                } else {
                        lane_word_send(l, op->peer, XFER_RECV_CANCEL, op->seq, NULL, op->status,
                                       op->err.msg);
                        transport_cancel(transport_set_get(l->dom->reg->roots.transports,
                                                           TRANSPORT_ROLE_STREAM),
                                         &op->data_job);
                }
                return;
        case OP_WAIT_WORD:
                op_complete(op, op->status, "%s", op->err.msg);
                return;
        case OP_DONE:
                break;
        }
}

/* ---- words from the other end ---- */

/* Takes the other end's word @w about @op (a READY's descriptors are moved out of it). */
static void op_take_word(DomainOp *op, LaneWord *w)
{
        Lane *l = op->lane;
        const char *who = op->send ? "the receiver" : "the sender";

        if (w->kind == XFER_READY) {
                if (!op->send || op->have_ready)
                        return;
                op->have_ready = true;
                op->ready = w->desc;
                op->ready_peer = w->peer;
                op->ready_direct = w->direct;
                op->ready_descs = TAKE_PTR(w->descs);
                op->n_ready_descs = w->n_descs;
                if (op->state == OP_POSTED)
                        op_remote_match(op);
                return;
        }
        if (w->kind == XFER_WRITTEN) {
                if (!op->send && op->direct && op->state == OP_DATA && !op->have_word)
                        op_direct_landed(op);
                return;
        }
        if (op->have_word)
                return;
        op->have_word = true;
        op->word_status = w->kind == XFER_DONE ? w->status
                          : w->status < 0      ? w->status
                                               : STATUS_FAILED;
        if (w->kind == XFER_DONE && w->status == STATUS_OK)
                op->word_msg[0] = '\0';
        else
                (void)snprintf(op->word_msg, sizeof(op->word_msg),
                               "%s (rank %" PRIu32 ") %s: %.160s", who, op->send ? l->dst : l->src,
                               w->kind == XFER_MISMATCH ? "describes the message differently"
                               : w->kind == XFER_DONE   ? "could not land the bytes"
                                                        : "gave up",
                               w->msg);
        switch (op->state) {
        case OP_ASSIGNED:
                return; /* fails when it is posted */
        case OP_POSTED:
                op_complete(op, op->word_status, "%s", op->word_msg);
                return;
        case OP_DATA:
                if (op->direct && op->send) {
                        /* Our writes stop; the job's end completes the op with the word. */
                        if (w->kind != XFER_DONE)
                                op_direct_send_stop(op);
                } else if (op->direct) {
                        op_complete(op, op->word_status, "%s", op->word_msg);
                } else if (!op->send || w->kind != XFER_DONE)
                        transport_cancel(transport_set_get(op->lane->dom->reg->roots.transports,
                                                           TRANSPORT_ROLE_STREAM),
                                         &op->data_job);
                return;
        case OP_WAIT_WORD:
                op_complete(op, op->word_status, "%s", op->word_msg);
                return;
        case OP_DONE:
                return;
        }
}

void domain_lane_on_xfer(DomainRegistry *reg, Peer *p, DomainXferMsg *m)
{
        bool from_receiver =
                m->kind == XFER_READY || m->kind == XFER_DONE || m->kind == XFER_RECV_CANCEL;
        uint32_t remote;
        LaneWord w = {.kind = (XferKind)m->kind, .seq = m->seq, .peer = p};
        Domain *dom;
        DomainOp *op;
        Lane *l;

        dom = domain_find_id(reg, m->dst_domain_id);
        if (!dom || m->kind < XFER_READY || m->kind > XFER_WRITTEN || m->src_rank >= dom->n_ranks ||
            m->dst_rank >= dom->n_ranks)
                goto refuse;
        remote = from_receiver ? m->dst_rank : m->src_rank;
        l = dom->lanes[m->src_rank][m->dst_rank];
        if (!l || l->local || dom->ranks[remote].local ||
            dom->ranks[remote].domain_id != m->src_domain_id)
                goto refuse;
        if (m->desc)
                w.desc = *m->desc;
        w.status = m->status;
        (void)snprintf(w.msg, sizeof(w.msg), "%.200s", m->detail);
        w.direct = m->direct;
        w.descs = TAKE_PTR(m->descs);
        w.n_descs = m->n_descs;

        op = lane_find(l, m->seq, from_receiver);
        if (op) {
                op_take_word(op, &w);
                free(w.descs);
                return;
        }
        if (m->seq < (from_receiver ? l->next_send_seq : l->next_recv_seq)) {
                /* About a message already over here; a READY still needs its job aborted or
                 * its registration let go. */
                if (m->kind == XFER_READY)
                        lane_abort_job(l, p, m->seq, w.desc.bytes, w.direct, STATUS_FAILED,
                                       "the sender gave up on this message");
                free(w.descs);
                return;
        }
        if (m->kind == XFER_DONE || m->kind == XFER_WRITTEN)
                goto refuse;
        if (m->kind == XFER_RECV_CANCEL) {
                /* The receiver gave up before our send was even assigned: its job needs no
                 * wait for that send. A seq has one READY; it leaves the list before the abort
                 * goes out, which may lose a peer and drop that peer's words. */
                LaneWord *r = lane_word_find(l, XFER_READY, m->seq);

                if (r) {
                        lane_word_unlink(l, r);
                        /* A registration is let go by the receiver itself. */
                        if (!r->direct)
                                lane_abort_job(l, r->peer, r->seq, r->desc.bytes, false, STATUS_OK,
                                               NULL);
                        lane_word_free(r);
                }
        }
        if (l->n_words >= LANE_MAX_WORDS || l->n_word_descs + w.n_descs > LANE_MAX_WORD_SEGS) {
                free(w.descs);
                domain_fail(dom, STATUS_PROTOCOL_MISMATCH, false,
                            "rank %" PRIu32 " sent more "
                            "than %d messages (or %d segment descriptors) ahead",
                            remote, LANE_MAX_WORDS, LANE_MAX_WORD_SEGS);
                return;
        }
        {
                LaneWord *copy = malloc(sizeof(*copy));

                if (!copy) {
                        free(w.descs);
                        domain_fail(dom, STATUS_OUT_OF_MEMORY, false, "out of memory");
                        return;
                }
                *copy = w;
                clist_link_tail(&l->words, &copy->link);
                l->n_words++;
                l->n_word_descs += copy->n_descs;
        }
        return;
refuse:
        free(m->descs);
        m->descs = NULL;
        p->root->counters.peer_requests_refused++;
}

void domain_lanes_peer_lost(Domain *dom, Peer *p)
{
        for (uint32_t s = 0; s < dom->n_ranks; s++)
                for (uint32_t t = 0; t < dom->n_ranks; t++) {
                        Lane *l = dom->lanes[s][t];
                        LaneWord *w, *wtmp;
                        DomainOp *op, *tmp;

                        if (!l || l->local)
                                continue;
                        CLIST_FOREACH_SAFE (w, wtmp, &l->words, link)
                                if (w->peer == p) {
                                        lane_word_unlink(l, w);
                                        lane_word_free(w);
                                }
                        /* Completing an op frees nothing (its call hears of it from the
                         * drain), but the word it may send can lose another peer, whose ops
                         * leave this lane: the saved next op is stale then. Start over after
                         * each; ops done or cut off do not match again. */
                restart:
                        CLIST_FOREACH_SAFE (op, tmp, &l->ops, link_lane) {
                                if (op->ready_peer == p) {
                                        op->ready_peer = NULL;
                                        op->have_ready = false;
                                        /* Paired up already if it was used. */
                                        free(op->ready_descs);
                                        op->ready_descs = NULL;
                                        op->n_ready_descs = 0;
                                }
                                if (op->peer != p)
                                        continue;
                                /* A job's callback comes with the data plane's end (a direct
                                 * job's came with the channels'); a direct receive waits for
                                 * nothing but words. */
                                op->peer = NULL;
                                if (!op->job &&
                                    (op->state == OP_WAIT_WORD ||
                                     (op->direct && !op->send && op->state == OP_DATA))) {
                                        op_complete(op, STATUS_PEER_LOST,
                                                    "the daemon of rank %" PRIu32 " was lost",
                                                    op->send ? t : s);
                                        goto restart;
                                }
                        }
                }
}
