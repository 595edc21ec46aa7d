/* SPDX-License-Identifier: MIT */
/* Transfer: one pull or push in flight, from validation to the client's answer. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include "daemon/link/cluster.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/notify.h"
#include "daemon/link/peer.h"
#include "daemon/transfer/plan.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/remote-plan.h"
#include "daemon/transfer/served.h"
#include "daemon/transfer/transfer-codec.h"
#include "daemon/transfer/transfer-events.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

/*
 * A local transfer of at least this many copies (blocks times tensors, before merging) is
 * planned on a copy thread: planning 100,000 blocks of two tensors costs tens of millions of
 * instructions, which would keep the control loop from every other client meanwhile.
 */
#define TRANSFER_PLAN_OFF_LOOP 4096
/*
 * Such a transfer is planned in shares of at least this many copies (blocks times tensors), on
 * as many copy threads side by side, each share copied as soon as it is planned: a thread that
 * would have waited for the plan plans and copies a share of its own meanwhile.
 */
#define TRANSFER_PLAN_PART_COPIES 2048
/* and in at most this many shares (copy_threads is 4 by default) */
#define TRANSFER_PLAN_MAX_PARTS 16

const char *transfer_kind_to_string(TransferKind k)
{
        switch (k) {
        case TRANSFER_PULL_CACHE:
                return "pull_cache";
        case TRANSFER_PULL_BLOCKS:
                return "pull_blocks";
        case TRANSFER_PUSH_CACHE:
                return "push_cache";
        case TRANSFER_PUSH_BLOCKS:
                return "push_blocks";
        }
        return "invalid";
}

static void transfer_set_state(Transfer *x, TransferState state)
{
        assert(state >= 0 && state < _TRANSFER_STATE_MAX);
        /* RUNNING -> STOPPING -> DONE, or RUNNING -> DONE; never back. */
        assert(state > x->state);
        x->state = state;
}

/* The index of @r in the transfer's region table, adding it (with a reference) if new. */
static int transfer_region_index(Transfer *x, Region *r, uint32_t *ret)
{
        for (uint32_t i = 0; i < x->n_regions; i++)
                if (x->regions[i] == r) {
                        *ret = i;
                        return 0;
                }
        if (x->n_regions >= TRANSFER_MAX_REGIONS)
                return -E2BIG;
        x->regions[x->n_regions] = region_ref(r);
        *ret = x->n_regions++;
        return 0;
}

/* Describes @cache to the planner; tensors land in @tensors (num_tensors entries). */
static int transfer_plan_cache(Transfer *x, const Cache *cache, PlanTensor *tensors, PlanCache *ret)
{
        int r;

        for (uint32_t t = 0; t < cache->desc.num_tensors; t++) {
                r = transfer_region_index(x, cache->tensors[t].region, &tensors[t].region);
                if (r < 0)
                        return r;
                tensors[t].offset = cache->tensors[t].offset;
        }
        *ret = (PlanCache){
                .blocks = cache->kind == CACHE_BLOCKS,
                .num_tensors = cache->desc.num_tensors,
                .tensor_size = cache->tensor_size,
                .units = cache->units,
                .stride = cache->stride,
                .tensors = tensors,
        };
        return 0;
}

static void transfer_on_deadline(evutil_socket_t fd, short what, void *userdata)
{
        Transfer *x = userdata;

        transfer_fail(x, STATUS_TIMEOUT,
                      "transfer %" PRIu64 " (%s) did not finish within %" PRIu64 " ms", x->id,
                      transfer_kind_to_string(x->kind),
                      (x->deadline_usec - x->start_usec) / USEC_PER_MSEC);
}

static void transfer_on_request_cancel(Completion *done, void *userdata)
{
        Transfer *x = userdata;

        x->done = NULL;
        transfer_fail(x, STATUS_PEER_LOST, "the client went away");
}

bool transfer_cancel_held(Completion *done)
{
        Transfer *x;

        /* transfer_start() left its mark on the completion it holds. */
        if (done->cancel != transfer_on_request_cancel)
                return false;
        x = done->userdata;
        if (x->state != TRANSFER_RUNNING)
                return false;
        transfer_fail(x, STATUS_CANCELLED, "transfer %" PRIu64 " (%s) was cancelled by the client",
                      x->id, transfer_kind_to_string(x->kind));
        return true;
}

static Transfer *transfer_free(Transfer *x)
{
        TransferRoot *root = x->root;

        if (x->timer)
                event_free(x->timer);
        if (x->fence)
                event_free(x->fence);
        if (x->peer)
                clist_unlink(&x->link_peer);
        if (x->started) {
                for (size_t i = 0; i < ARRAY_SIZE(x->caches); i++) {
                        if (!x->caches[i])
                                continue;
                        x->caches[i]->n_busy--;
                        if (x->caches[i]->released && x->caches[i]->n_busy == 0)
                                memory_release_cache(root->memory, x->caches[i]);
                }
                if (x->cluster) {
                        clist_unlink(&x->link_cluster);
                        x->cluster->n_transfers--;
                }
                user_uncharge(x->user, USER_SLOT_INFLIGHT, 1);
                if (x->link) {
                        clist_unlink(&x->link_link);
                        x->link->n_inflight--;
                }
                if (x->inlink) {
                        clist_unlink(&x->link_link);
                        x->inlink->n_outgoing--;
                }
                clist_unlink(&x->link_daemon);
                root->n_transfers--;
        }
        x->user = user_unref(x->user);
        for (uint32_t i = 0; i < x->n_regions; i++)
                region_unref(x->regions[i]);
        plan_free(x->plan);
        free(x->segs);
        for (size_t k = 0; k < x->n_parts; k++) {
                plan_free(x->parts[k].plan);
                free(x->parts[k].segs);
        }
        free(x->parts);
        free(x->prep_tensors);
        transfer_request_done(&x->req);
        completion_drop(x->done);
        free(x);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Transfer, transfer_free);

void transfer_request_done(TransferRequest *req)
{
        free(req->src_blocks);
        free(req->dst_blocks);
        free(req->notify);
        *req = (TransferRequest){};
}

bool transfer_pull_ends_key(TransferKind kind, const CacheKey *key, const Cache *cache)
{
        return remote_plan_kind_is_pull(kind) && key->kind == CACHE_KEY_REQ && cache->pool_backed;
}

void transfer_end_key(LinkRoot *link, const CacheKey *key, const Cache *read)
{
        Cluster *owner;
        Cache *cache, *dead = NULL;
        uint32_t index;

        /* The key may have been removed, even given to another cache, while the bytes moved:
         * only the hold on the cache this transfer read ends. */
        owner = link_root_find_cluster(link, key->cluster_id);
        if (!owner || cache_table_lookup(&owner->caches, key, &cache, &index, NULL) < 0 ||
            cache != read)
                return;
        if (cache_table_remove_key(&owner->caches, key, &dead, NULL) == 0)
                cluster_release_cache(owner, dead);
}

/*
 * A local push that landed tells its destination cluster, a local pull whose bytes were all read
 * tells its source cluster: the key's cluster either way (a peer's cluster is told by its peer).
 */
static void transfer_deliver_notify(Transfer *x)
{
        bool pull = remote_plan_kind_is_pull(x->kind);
        Cluster *other;

        if (x->req.notify_len == 0 || x->phase != REMOTE_NONE)
                return;
        other = link_root_find_cluster(x->root->link, x->remote_cluster_id);
        if (other && notify_deliver(other, x->cluster_id, pull, x->req.notify, x->req.notify_len,
                                    x->user) < 0)
                log_error("transfer %" PRIu64 ": cannot queue the %s notification for cluster "
                          "%" PRIu64 ", ignoring",
                          x->id, pull ? "pull" : "push", x->remote_cluster_id);
}

/* The bytes @x's plan moves and in how many segments: its one plan's, or its shares' together. */
static uint64_t transfer_planned(const Transfer *x, size_t *ret_segments)
{
        uint64_t bytes = 0;
        size_t n = 0;

        if (x->plan) {
                *ret_segments = x->plan->n_segments;
                return x->plan->total_bytes;
        }
        for (size_t k = 0; k < x->n_parts; k++)
                if (x->parts[k].plan) {
                        bytes += x->parts[k].plan->total_bytes;
                        n += x->parts[k].plan->n_segments;
                }
        *ret_segments = n;
        return bytes;
}

/* Sends the client its answer, once: @status and, on failure, x->err (which is set). */
static void transfer_answer(Transfer *x, int status)
{
        Completion *done = TAKE_PTR(x->done);
        size_t n_segments;

        if (!done)
                return;
        if (status == STATUS_OK) {
                *x->result = (TransferResult){
                        .bytes = transfer_planned(x, &n_segments),
                        .segments = (uint32_t)n_segments,
                };
                (void)completion_reply_ok(done, -1);
        } else
                (void)completion_fail(done, status, &x->err);
}

/* The copy of a transfer between two clusters of this daemon is over. */
static void transfer_on_copied(TransportJob *job, int status)
{
        Transfer *x = job->userdata;

        /* a copy thread's planning failed: its reason, unless a failure came first */
        for (size_t k = 0; k < x->n_parts && status != STATUS_OK; k++)
                if (x->parts[k].err.code != 0 && x->status == STATUS_OK) {
                        x->status = x->parts[k].err.code;
                        x->err = x->parts[k].err;
                }
        transfer_complete(x, status);
}

/*
 * Resolves @plan, of a transfer between two clusters of this daemon, into *@ret (malloc()ed, the
 * plan's steps between pieces). Every segment is checked against its regions once more, so a
 * planner bug can fail a transfer but never move a byte outside a region. Reads only the plan
 * and the region table.
 */
static int transfer_local_segments(const Transfer *x, const Plan *plan, TransportSegment **ret)
{
        _cleanup_free_ TransportSegment *segs = NULL;

        /* every entry is written below before the job starts (no zeroing of a big array) */
        segs = malloc((plan->n_segments ? plan->n_segments : 1) * sizeof(*segs));
        if (!segs)
                return -ENOMEM;
        for (size_t i = 0; i < plan->n_segments; i++) {
                const PlanSegment *s = &plan->segments[i];
                Region *src, *dst;
                uint64_t end;

                if (s->src_region >= x->n_regions || s->dst_region >= x->n_regions)
                        return -EFAULT;
                src = x->regions[s->src_region];
                dst = x->regions[s->dst_region];
                if (!plan_pieces_end(s->src_offset, s->len, s->count, plan->src_step, &end) ||
                    end > src->size ||
                    !plan_pieces_end(s->dst_offset, s->len, s->count, plan->dst_step, &end) ||
                    end > dst->size)
                        return -EFAULT;
                segs[i] = (TransportSegment){
                        .region = dst,
                        .offset = s->dst_offset,
                        .len = s->len,
                        .remote_region = src,
                        .remote = s->src_offset,
                        .count = s->count,
                };
        }
        *ret = TAKE_PTR(segs);
        return 0;
}

/*
 * The prepare step of a big local transfer's job, on a copy thread, maybe beside the steps of
 * the other shares: lays share @part of the plan the loop checked and resolves it into that
 * share's segments. What it reads (the request, the planner's view of both caches, the region
 * table) stays unchanged until the job is done: the caches are busy and the regions referenced;
 * it writes only x->parts[@part]. Its failure says why in that part's err.
 */
static int transfer_prepare(const TransportJob *job, size_t part, size_t n_parts,
                            TransportPart *ret)
{
        Transfer *x = job->userdata;
        TransferPart *p = &x->parts[part];
        int r;

        r = plan_make_part(&x->prep_req, &x->prep_checked, part, n_parts, &p->plan, &p->err);
        if (r < 0)
                return -ENOMEM;
        r = transfer_local_segments(x, p->plan, &p->segs);
        if (r < 0) {
                error_set(&p->err, r == -ENOMEM ? STATUS_OUT_OF_MEMORY : STATUS_FAILED,
                          "transfer %" PRIu64 ": %s", x->id,
                          r == -ENOMEM ? "out of memory for its copy list"
                                       : "its plan does not fit its regions");
                return r;
        }
        *ret = (TransportPart){
                .segs = p->segs,
                .n_segs = p->plan->n_segments,
                .local_step = p->plan->dst_step,
                .remote_step = p->plan->src_step,
        };
        return 0;
}

/*
 * Starts the copies of a transfer between two clusters of this daemon: from its plan, or, when
 * the plan is left to copy threads (no x->plan yet), from transfer_prepare() there, in shares of
 * TRANSFER_PLAN_PART_COPIES copies or more.
 */
static int transfer_local_submit(Transfer *x)
{
        uint64_t copies;
        int r;

        x->job = (TransportJob){
                .dir = TRANSPORT_READ,
                .deadline_usec = x->deadline_usec,
                .done = transfer_on_copied,
                .userdata = x,
        };
        if (!x->plan) {
                copies = (uint64_t)MAX(x->prep_req.n_dst_blocks, (size_t)1) *
                         x->prep_checked.n_tensors;
                x->n_parts = (size_t)MAX(copies / TRANSFER_PLAN_PART_COPIES, (uint64_t)1);
                x->n_parts = MIN(x->n_parts, (size_t)TRANSFER_PLAN_MAX_PARTS);
                x->parts = calloc(x->n_parts, sizeof(TransferPart));
                if (!x->parts)
                        return -ENOMEM;
                x->job.prepare = transfer_prepare;
                x->job.prepare_parts = x->n_parts;
        } else {
                r = transfer_local_segments(x, x->plan, &x->segs);
                if (r < 0)
                        return r;
                x->job.segs = x->segs;
                x->job.n_segs = x->plan->n_segments;
                x->job.local_step = x->plan->dst_step;
                x->job.remote_step = x->plan->src_step;
        }
        return transport_submit(x->transport, &x->job);
}

void transfer_complete(Transfer *x, int status)
{
        TransferRoot *root = x->root;
        /* A failure recorded first (timeout, a lost end) wins over what the transport says. */
        int final = x->status != STATUS_OK ? x->status : status;

        transfer_set_state(x, TRANSFER_DONE);
        hook_list_emit(&root->events, TransferEvents, transfer_done, x, final);

        if (final == STATUS_OK) {
                size_t n_segments;
                uint64_t bytes = transfer_planned(x, &n_segments);

                root->counters.transfers_ok++;
                if (remote_plan_kind_is_pull(x->kind))
                        root->counters.bytes_pulled += bytes;
                else
                        root->counters.bytes_pushed += bytes;
                if (x->transport) {
                        x->transport->bytes += bytes;
                        x->transport->n_transfers++;
                }
                if (x->link) {
                        x->link->bytes += bytes;
                        x->link->n_transfers++;
                }
                if (x->consume_key)
                        transfer_end_key(root->link, &x->req.key, x->caches[0]);
                transfer_deliver_notify(x);
        } else {
                root->counters.transfers_failed++;
                if (x->err.code == 0)
                        error_set(&x->err, final, "transfer %" PRIu64 " failed", x->id);
                log_debug("transfer %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 ", %s): %s",
                          x->id, x->cluster_id, x->remote_cluster_id,
                          transfer_kind_to_string(x->kind), x->err.msg);
        }

        transfer_answer(x, final);
        transfer_free(x);
        transfer_root_changed(root);
        transfer_root_ended(root);
}

void transfer_fail(Transfer *x, int status, const char *fmt, ...)
{
        va_list ap;

        if (x->state != TRANSFER_RUNNING)
                return;
        transfer_set_state(x, TRANSFER_STOPPING);
        x->status = status;
        va_start(ap, fmt);
        error_setv(&x->err, status, fmt, ap);
        va_end(ap);
        if (x->timer)
                event_del(x->timer);
        /* No answer yet, for a push either: until the transport let go (or, over the peer's
         * streams, its receiver stopped) bytes of it may still land. */
        if (x->phase != REMOTE_NONE)
                transfer_remote_cancel(x);
        else
                transport_cancel(x->transport, &x->job);
}

void transfer_answer_settled(Transfer *x)
{
        if (x->state == TRANSFER_STOPPING)
                transfer_answer(x, x->status);
}

void transfer_detach_cluster(Transfer *x)
{
        Cluster *c = TAKE_PTR(x->cluster);

        clist_unlink(&x->link_cluster);
        c->n_transfers--;
        transfer_fail(x, STATUS_PEER_LOST,
                      "cluster %" PRIu64 " detached while transfer %" PRIu64 " ran", c->id, x->id);
}

void transfer_detach_link(Transfer *x, int status)
{
        Link *l = TAKE_PTR(x->link);

        clist_unlink(&x->link_link);
        l->n_inflight--;
        transfer_fail(x, status,
                      "link %" PRIu64 " of cluster %" PRIu64 " and %" PRIu64 " went down while "
                      "transfer %" PRIu64 " ran",
                      l->id, x->cluster_id, x->remote_cluster_id, x->id);
}

void transfer_detach_inlink(Transfer *x, int status)
{
        InLink *il = TAKE_PTR(x->inlink);

        clist_unlink(&x->link_link);
        il->n_outgoing--;
        transfer_fail(x, status,
                      "the link cluster %" PRIu64 " made to cluster %" PRIu64 " went down while "
                      "transfer %" PRIu64 " ran",
                      x->remote_cluster_id, x->cluster_id, x->id);
}

static void transfer_on_cluster_gone(void *userdata, Cluster *c)
{
        Transfer *x, *tmp;

        CLIST_FOREACH_SAFE (x, tmp, &c->transfers, link_cluster)
                transfer_detach_cluster(x);
}

static void transfer_on_link_down(void *userdata, Link *l, int status)
{
        Transfer *x, *tmp;
        Served *s, *stmp;

        CLIST_FOREACH_SAFE (x, tmp, &l->transfers, link_link)
                transfer_detach_link(x, status);
        CLIST_FOREACH_SAFE (s, stmp, &l->served, link_inlink)
                served_detach_link(s, status);
}

static void transfer_on_inlink_gone(void *userdata, InLink *il, int status)
{
        Served *s, *tmp;
        Transfer *x, *xtmp;

        CLIST_FOREACH_SAFE (s, tmp, &il->served, link_inlink)
                served_detach_inlink(s, status);
        CLIST_FOREACH_SAFE (x, xtmp, &il->transfers, link_link)
                transfer_detach_inlink(x, status);
}

static void transfer_on_peer_lost(void *userdata, Peer *p, int status)
{
        Transfer *x, *tmp;

        served_on_peer_lost(p);
        CLIST_FOREACH_SAFE (x, tmp, &p->transfers, link_peer)
                transfer_remote_on_peer_lost(x);
}

static const LinkEvents transfer_link_events = {
        .cluster_gone = transfer_on_cluster_gone,
        .link_down = transfer_on_link_down,
        .inlink_gone = transfer_on_inlink_gone,
        .peer_lost = transfer_on_peer_lost,
};

void transfer_listen(TransferRoot *root)
{
        link_events_listen(root->link, &root->link_hook, &transfer_link_events, root);
        transfer_codec_listen(root);
}

void transfer_events_listen(TransferRoot *root, Hook *h, const TransferEvents *events,
                            void *userdata)
{
        hook_list_append(&root->events, h, events, userdata);
}

/* The cluster of this daemon at the other end of @x's link; NULL when it is behind a peer. */
static Cluster *transfer_other_cluster(const Transfer *x)
{
        if (!x->link)
                return NULL;
        return x->reverse ? x->link->local : x->link->remote;
}

/*
 * Finds what @x moves bytes over (links are two-way): the UP link @c made to the key's cluster,
 * else the link that cluster made to @c on this daemon, else its inbound link from a peer.
 */
static int transfer_find_link(Transfer *x, Cluster *c, Error *err)
{
        uint64_t id = x->req.key.cluster_id;
        Link *l, *in;
        int r;

        l = link_find(c, id);
        if (l && l->state == LINK_UP && (l->remote || l->peer)) {
                x->link = l;
                return 0;
        }
        in = link_find_in(c, id);
        if (in) {
                x->link = in;
                x->reverse = true;
                return 0;
        }
        x->inlink = link_inlink_find_cluster(c, id);
        if (x->inlink)
                return 0;
        if (l && l->down_status == STATUS_NOT_YET_LINK)
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "link %" PRIu64 " to cluster %" PRIu64 " was unlinked by cluster "
                                 "%" PRIu64 "; call kvd_link_clusters() again",
                                 l->id, id, id);
        if (l)
                return error_set(err, STATUS_PEER_LOST,
                                 "link %" PRIu64 " to cluster %" PRIu64 " is down", l->id, id);
        /* A comm domain of both that is not OK (yet) says why, not link_clusters. */
        r = link_explain_no_link(c, id, err);
        if (r < 0)
                return r;
        return error_set(err, STATUS_NOT_YET_LINK,
                         "cluster %" PRIu64 " has no link to cluster %" PRIu64
                         "; call kvd_link_clusters() first",
                         c->id, id);
}

/*
 * Finds the link and, for a cluster of this daemon, the remote cache, which must be reachable
 * through it: the link's moment decides, whichever of the two clusters made it.
 */
static int transfer_resolve(Transfer *x, Cluster *c, uint32_t *ret_remote_index, Error *err)
{
        Cache *remote = NULL, *local;
        Cluster *other;
        int r;

        r = transfer_find_link(x, c, err);
        if (r < 0)
                return r;
        other = transfer_other_cluster(x);
        local = cache_table_find(&c->caches, x->req.local_cache_id);
        if (!local)
                return error_set(err, STATUS_CACHE_NOT_EXIST,
                                 "cluster %" PRIu64 " has no cache %" PRIu64, c->id,
                                 x->req.local_cache_id);
        if (other) {
                r = cache_table_lookup(&other->caches, &x->req.key, &remote, ret_remote_index, err);
                if (r < 0)
                        return r;
                r = cache_check_reachable(remote, x->link->seq, x->link->id, err);
                if (r < 0)
                        return r;
        }
        /* Over a peer's link to us: the data connection, or our queue pairs to the peer
         * (transfer_remote_start() decides). */
        x->transport = x->link ? x->link->transport
                               : transport_set_get(x->root->transports, TRANSPORT_ROLE_STREAM);
        x->caches[0] = remote_plan_kind_is_pull(x->kind) ? remote : local;
        x->caches[1] = remote_plan_kind_is_pull(x->kind) ? local : remote;
        /* A peer's cache is the peer's to let go (served.c). */
        x->consume_key = remote && transfer_pull_ends_key(x->kind, &x->req.key, remote);
        return 0;
}

/*
 * Checks a local request against both caches, over the transfer's region table, and plans it
 * here when it is small; a big one (TRANSFER_PLAN_OFF_LOOP copies or more before merging) is
 * left without x->plan, for a copy thread to lay (transfer_prepare()).
 */
static int transfer_build_plan(Transfer *x, uint32_t remote_index, Error *err)
{
        const Cache *src = x->caches[0], *dst = x->caches[1];
        uint64_t copies;
        int r;

        x->prep_tensors =
                calloc((size_t)src->desc.num_tensors + dst->desc.num_tensors, sizeof(PlanTensor));
        if (!x->prep_tensors)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        if (transfer_plan_cache(x, src, x->prep_tensors, &x->prep_caches[0]) < 0 ||
            transfer_plan_cache(x, dst, x->prep_tensors + src->desc.num_tensors,
                                &x->prep_caches[1]) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "too many regions in one transfer");

        remote_plan_args_plan_request(&x->req.args, x->req.key.kind, remote_index, &x->prep_req);
        x->prep_req.src = &x->prep_caches[0];
        x->prep_req.dst = &x->prep_caches[1];
        r = plan_check(&x->prep_req, &x->prep_checked, err);
        if (r < 0)
                return r;
        x->total_bytes = x->prep_checked.total_bytes;

        copies = (uint64_t)MAX(x->prep_req.n_dst_blocks, (size_t)1) * x->prep_checked.n_tensors;
        if (copies >= TRANSFER_PLAN_OFF_LOOP)
                return 0;
        return plan_make(&x->prep_req, &x->prep_checked, &x->plan, err);
}

int transfer_start(TransferRoot *root, Cluster *c, TransferRequest *req, Completion *done,
                   TransferResult *ret_result, Error *err)
{
        const Limits *lim = root->options.limits;
        _cleanup_(transfer_freep) Transfer *x = NULL;
        uint32_t remote_index = 0, timeout_ms;
        const TransferArgs *args;
        size_t n_segments;
        struct timeval tv;
        int r;

        x = calloc(1, sizeof(*x));
        if (!x) {
                transfer_request_done(req);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        x->req = *req;
        *req = (TransferRequest){};
        args = &x->req.args;
        x->root = root;
        x->state = TRANSFER_RUNNING;
        x->kind = args->kind;
        x->cluster_id = c->id;
        x->result = ret_result;
        clist_init(&x->link_daemon);
        clist_init(&x->link_cluster);
        clist_init(&x->link_link);
        clist_init(&x->link_peer);

        if (root->link->stopping)
                return error_set(err, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
        if (c->n_transfers >= lim->max_inflight_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u transfers in flight "
                                 "(limits.max_inflight_per_client)",
                                 c->id, c->n_transfers);
        if (args->n_src_blocks > lim->max_blocks_per_transfer ||
            args->n_dst_blocks > lim->max_blocks_per_transfer)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "%zu blocks in one transfer, at most %" PRIu32
                                 " (limits.max_blocks_per_transfer)",
                                 MAX(args->n_src_blocks, args->n_dst_blocks),
                                 lim->max_blocks_per_transfer);

        if (x->req.key_err.code != 0) {
                *err = x->req.key_err;
                return err->code;
        }
        r = remote_plan_args_check(args, x->req.key.kind, err);
        if (r < 0)
                return r;
        if (x->req.notify_len > TRANSFER_NOTIFY_MAX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "a notification of %zu bytes, at most %d", x->req.notify_len,
                                 TRANSFER_NOTIFY_MAX);
        x->remote_cluster_id = x->req.key.cluster_id;
        r = transfer_resolve(x, c, &remote_index, err);
        if (r < 0)
                return r;
        if (transfer_other_cluster(x)) {
                if (x->req.notify_len > 0) {
                        r = notify_check_room(transfer_other_cluster(x), c->user, err);
                        if (r < 0)
                                return r;
                }
                r = transfer_build_plan(x, remote_index, err);
                if (r < 0)
                        return r;
        }

        /* What the cluster's uid has in flight, all its clusters together; the last check. */
        r = user_charge(c->user, USER_SLOT_INFLIGHT, 1, err);
        if (r < 0)
                return r;
        x->user = user_ref(c->user);

        /* From here on the transfer is accounted everywhere it is listed. */
        x->id = id_source_next(root->link->ids);
        x->started = true;
        for (size_t i = 0; i < ARRAY_SIZE(x->caches); i++)
                if (x->caches[i])
                        x->caches[i]->n_busy++;
        x->cluster = c;
        clist_link_tail(&c->transfers, &x->link_cluster);
        c->n_transfers++;
        if (x->link) {
                clist_link_tail(&x->link->transfers, &x->link_link);
                x->link->n_inflight++;
        } else {
                clist_link_tail(&x->inlink->transfers, &x->link_link);
                x->inlink->n_outgoing++;
        }
        clist_link_tail(&root->transfers, &x->link_daemon);
        root->n_transfers++;

        timeout_ms = x->req.timeout_ms ? x->req.timeout_ms : c->sync_kv_timeout_ms;
        x->start_usec = now_usec(CLOCK_MONOTONIC);
        x->deadline_usec = x->start_usec + (usec_t)timeout_ms * USEC_PER_MSEC;
        x->timer = evtimer_new(root->link->base, transfer_on_deadline, x);
        tv.tv_sec = timeout_ms / 1000;
        tv.tv_usec = (timeout_ms % 1000) * 1000;
        if (!x->timer || evtimer_add(x->timer, &tv) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot arm the transfer's deadline");

        /* once submitted, a plan left to a copy thread is that thread's until the job is done */
        n_segments = x->plan ? x->plan->n_segments : 0;
        if (!transfer_other_cluster(x)) {
                r = transfer_remote_start(x, err);
                if (r < 0)
                        return r;
        } else {
                r = transfer_local_submit(x);
                if (r < 0)
                        return error_set(err, STATUS_FAILED,
                                         "transport %s refused transfer %" PRIu64 ": %s",
                                         transport_name(x->transport), x->id, strerror(-r));
        }

        x->done = done;
        completion_set_cancel(done, transfer_on_request_cancel, x);
        log_debug("transfer %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 ", %s): %" PRIu64
                  " bytes in %zu segments over %s",
                  x->id, c->id, x->remote_cluster_id, transfer_kind_to_string(x->kind),
                  x->total_bytes, n_segments, transport_name(x->transport));
        transfer_root_changed(root);
        TAKE_PTR(x);
        return 0;
}
