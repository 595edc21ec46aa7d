/* SPDX-License-Identifier: MIT */
/* Served: a peer's transfer of one of our caches, checked, planned and moved by the data plane. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/notify.h"
#include "daemon/link/peer.h"
#include "daemon/transfer/plan.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/remote-plan.h"
#include "daemon/transfer/served.h"
#include "daemon/transfer/transfer-codec.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"

/* How long past the peer's own deadline a served pull or one-sided push may take. */
#define SERVED_GRACE_MS 5000
#define SERVED_TIMEOUT_MAX_MS 3600000u

/* What a peer's request is served over: an inbound link, or a link our cluster made to it. */
typedef struct ServedOver {
        InLink *inlink;
        Link *link;
        Cluster *local; /* our cluster at its end */
        uint64_t seq;   /* our caches registered later are out of its reach */
        uint64_t id;
        unsigned n_inflight;
} ServedOver;

/* Our cluster at the end of the link @s is served over; NULL once that link is gone. */
static Cluster *served_local(const Served *s)
{
        return s->inlink ? s->inlink->local : s->link ? s->link->local : NULL;
}

static void served_set_state(Served *s, ServedState state)
{
        assert(state >= 0 && state < _SERVED_STATE_MAX);
        assert(state > s->state);
        s->state = state;
}

static Served *served_free(Served *s)
{
        TransferRoot *root = s->root;

        if (s->timer)
                event_free(s->timer);
        if (s->cache) {
                s->cache->n_busy--;
                if (s->cache->released && s->cache->n_busy == 0)
                        memory_release_cache(root->memory, s->cache);
        }
        if (s->peer) {
                clist_unlink(&s->link_peer);
                s->peer->n_served--;
        }
        if (s->inlink) {
                clist_unlink(&s->link_inlink);
                s->inlink->n_inflight--;
        }
        if (s->link) {
                clist_unlink(&s->link_inlink);
                s->link->n_served_inflight--;
        }
        if (clist_is_linked(&s->link_daemon)) {
                clist_unlink(&s->link_daemon);
                root->n_served--;
        }
        for (uint32_t i = 0; i < s->n_regions; i++)
                region_unref(s->regions[i]);
        plan_free(s->plan);
        free(s->segs);
        free(s->prep_tensors);
        free(s->prep_blocks[0]);
        free(s->prep_blocks[1]);
        free(s);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Served, served_free);

/*
 * The peer's request of @s was not answered yet (its data job stopped before it reached the data
 * plane): it is refused now, with why.
 */
static void served_refuse_late(Served *s, int status)
{
        Error err = ERROR_INIT;

        if (!s->peer || s->peer->state != PEER_READY)
                return;
        if (s->lay_err.code != 0)
                err = s->lay_err;
        else
                error_set(&err, status, "transfer %" PRIu64 " stopped before its bytes moved: %s",
                          s->initiator_id, status_wire_name(status));
        (void)s->root->peer_ops->refuse(s->peer, s->request_id, &err);
}

/*
 * The data plane let go of our memory (and, for a pull over TCP that awaits it, the initiator's
 * word came): account, notify, tell the peer (push), free. A request not answered yet is
 * refused instead.
 */
static void served_finish(Served *s, int status)
{
        TransferRoot *root = s->root;
        int final = s->status != STATUS_OK ? s->status : status;

        if (final == STATUS_OK) {
                if (s->end_key)
                        transfer_end_key(root->link, &s->key, s->cache);
                root->counters.transfers_served++;
                root->counters.bytes_served += s->prep_checked.total_bytes;
                if (s->inlink) {
                        s->inlink->n_served++;
                        s->inlink->bytes += s->prep_checked.total_bytes;
                }
                if (s->link) {
                        s->link->n_transfers++;
                        s->link->bytes += s->prep_checked.total_bytes;
                }
                if (s->has_notify && served_local(s) &&
                    notify_deliver(served_local(s), s->remote_cluster_id, s->pull, s->notify,
                                   s->notify_len, NULL) < 0)
                        log_error("served %" PRIu64 ": cannot queue the %s notification for "
                                  "cluster %" PRIu64 ", ignoring",
                                  s->id, s->pull ? "pull" : "push", s->cluster_id);
        } else
                log_debug("served %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 ", %s): %s", s->id,
                          s->remote_cluster_id, s->cluster_id, s->pull ? "pull" : "push",
                          status_wire_name(final));

        if (!s->answered)
                served_refuse_late(s, final);
        else if (!s->pull && !s->remote_access && s->peer && s->peer->state == PEER_READY)
                (void)root->peer_ops->push_done(s->peer, s->initiator_id, final);
        served_free(s);
        transfer_root_ended(root);
}

static void served_on_data_done(TransportJob *job, int st)
{
        Served *s = job->userdata;

        s->moving = false;
        if (!job->submitted && s->lay_err.code != 0 && s->status == STATUS_OK)
                /* its plan could not be laid: why goes to the peer (served_refuse_late()) */
                s->status = s->lay_err.code;
        if (st == STATUS_OK && s->await_word && s->state == SERVED_RUNNING) {
                /* Sent is not landed: the initiator's word decides (the timer bounds the wait). */
                if (!s->word)
                        return;
                st = s->word_status;
        }
        served_finish(s, st);
}

static void served_fail(Served *s, int status)
{
        if (s->state != SERVED_RUNNING)
                return;
        served_set_state(s, SERVED_STOPPING);
        s->status = status;
        if (s->timer)
                event_del(s->timer);
        /* One-sided: nothing of ours moves bytes; once the cache is let go, its registrations
         * can go with it and refuse whatever the peer still sends. */
        if (s->remote_access) {
                served_finish(s, status);
                return;
        }
        /* Our bytes are out and we waited for the initiator's word: nothing moves any more. */
        if (!s->moving) {
                served_finish(s, status);
                return;
        }
        transport_cancel(transport_set_get(s->root->transports, TRANSPORT_ROLE_STREAM), &s->job);
}

static void served_on_deadline(evutil_socket_t fd, short what, void *userdata)
{
        Served *s = userdata;

        log_info("served %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): the peer's bytes did "
                 "not come in time, giving up",
                 s->id, s->remote_cluster_id, s->cluster_id);
        served_fail(s, STATUS_TIMEOUT);
}

void served_detach_inlink(Served *s, int status)
{
        clist_unlink(&s->link_inlink);
        s->inlink->n_inflight--;
        s->inlink = NULL;
        served_fail(s, status);
}

void served_detach_link(Served *s, int status)
{
        clist_unlink(&s->link_inlink);
        s->link->n_served_inflight--;
        s->link = NULL;
        served_fail(s, status);
}

void served_on_peer_lost(Peer *p)
{
        Served *s, *tmp;

        CLIST_FOREACH_SAFE (s, tmp, &p->served, link_peer) {
                clist_unlink(&s->link_peer);
                p->n_served--;
                s->peer = NULL;
                served_fail(s, STATUS_PEER_LOST);
        }
}

void served_stop_all(TransferRoot *root, int status)
{
        Served *s, *tmp;

        CLIST_FOREACH_SAFE (s, tmp, &root->served, link_daemon)
                served_fail(s, status);
}

/* Finds and checks the cache the peer names: ours, linked, reachable. */
static int served_resolve(Served *s, const ServedOver *over, const TransferPeerRequest *m,
                          uint32_t *ret_index, Error *err)
{
        const CacheKey key = m->key;
        Cluster *c = over->local;
        Cache *cache;
        int r;

        if (key.cluster_id != c->id)
                return error_set(err, STATUS_CACHE_NOT_EXIST,
                                 "the key names cluster %" PRIu64 ", link %" PRIu64
                                 " reaches cluster %" PRIu64,
                                 key.cluster_id, m->initiator_link_id, c->id);
        r = cache_table_lookup(&c->caches, &key, &cache, ret_index, err);
        if (r < 0)
                return r;
        /* The link's moment decides, whichever side made it; named as the peer's cluster
         * knows its link. */
        r = cache_check_reachable(cache, over->seq, m->initiator_link_id, err);
        if (r < 0)
                return r;
        s->cache = cache;
        s->cache->n_busy++;
        s->key = key;
        s->end_key = transfer_pull_ends_key(s->pull ? TRANSFER_PULL_CACHE : TRANSFER_PUSH_CACHE,
                                            &key, cache);
        /* Over TCP, sent is not read: a key that ends and a pull's notification wait for the
         * initiator's word that every byte landed (PeerRemoteDone). */
        s->await_word = (s->end_key || (s->pull && s->has_notify)) && !s->remote_access;
        return 0;
}

/*
 * Keeps the block lists of the peer's request for @s->prep_req (the message is gone once the
 * request is handled, the plan may be laid later).
 */
static int served_keep_list(const uint64_t **list, size_t n, uint64_t **ret, Error *err)
{
        if (n == 0)
                return 0;
        /* n is at most max_blocks_per_transfer (checked): no overflow */
        *ret = malloc(n * sizeof(uint64_t));
        if (!*ret)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        memcpy(*ret, *list, n * sizeof(uint64_t));
        *list = *ret;
        return 0;
}

static int served_keep_lists(Served *s, Error *err)
{
        PlanRequest *pr = &s->prep_req;
        int r;

        r = served_keep_list(&pr->src_blocks, pr->n_src_blocks, &s->prep_blocks[0], err);
        if (r < 0)
                return r;
        return served_keep_list(&pr->dst_blocks, pr->n_dst_blocks, &s->prep_blocks[1], err);
}

/*
 * Lays the plan the loop checked into @s->plan and our side of it into @s->segs. Reads only what
 * stays unchanged while @s runs (its request and the cache's tensor table: the cache is busy).
 */
static int served_lay(Served *s, Error *err)
{
        return remote_plan_lay(&s->prep_req, &s->prep_checked, s->cache, s->pull,
                               REMOTE_PLAN_ANY_SEGMENTS, &s->plan, &s->segs, err);
}

/* The data job's prepare step, on a copy thread. */
static int served_prepare_job(const TransportJob *job, size_t part, size_t n_parts,
                              TransportPart *ret)
{
        Served *s = job->userdata;
        int r;

        r = served_lay(s, &s->lay_err);
        if (r < 0)
                return remote_plan_prepared(r);
        remote_plan_part(s->plan, s->segs, s->pull, ret);
        return 0;
}

/* Tells the peer OK: our cache's shape and slot, the plan's size, the job id (and descriptors). */
static void served_answer(Served *s, const TransportDesc *descs)
{
        TransferPeerAnswer answer;
        RemoteDesc ours;

        remote_desc_from_cache(s->cache, &ours);
        answer = (TransferPeerAnswer){
                .remote = &ours,
                .remote_index = s->remote_index,
                .total_bytes = s->plan->total_bytes,
                .segments = s->plan->n_segments,
                .job_id = s->pull ? s->initiator_id : s->id,
        };
        if (descs) {
                answer.descs = descs;
                answer.n_descs = s->cache->desc.num_tensors;
        }
        log_debug("served %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 ", %s): %" PRIu64
                  " bytes in %zu segments",
                  s->id, s->remote_cluster_id, s->cluster_id, s->pull ? "pull" : "push",
                  s->plan->total_bytes, s->plan->n_segments);
        s->answered = true;
        (void)s->root->peer_ops->answer(s->peer, s->request_id, &answer);
}

/* The data job, laid off the loop, reached the data plane: the peer may send or expect bytes. */
static void served_on_handed(TransportJob *job)
{
        Served *s = job->userdata;

        if (s->peer && s->peer->state == PEER_READY)
                served_answer(s, NULL);
}

/* Validates the peer's request into @s: key, link, sizes, plan, our memory. */
static int served_prepare(Served *s, const ServedOver *over, const TransferPeerRequest *m,
                          uint32_t *ret_index, Error *err)
{
        const Limits *lim = s->root->options.limits;
        const TransferArgs *args = &m->args;
        RemoteDesc ours, theirs;
        int r;

        if (m->key_err.code != 0) {
                *err = m->key_err;
                return err->code;
        }
        r = remote_plan_args_check(args, m->key.kind, err);
        if (r < 0)
                return r;
        if (args->n_src_blocks > lim->max_blocks_per_transfer ||
            args->n_dst_blocks > lim->max_blocks_per_transfer)
                return error_set(
                        err, STATUS_LIMIT_EXCEEDED, "%zu blocks in one transfer, at most %" PRIu32,
                        MAX(args->n_src_blocks, args->n_dst_blocks), lim->max_blocks_per_transfer);
        if (over->n_inflight >= lim->max_inflight_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "link %" PRIu64 " has %u transfers in flight", over->id,
                                 over->n_inflight);
        if (m->notify_len > 0) {
                if (m->notify_len > NOTIFY_MAX_BYTES)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "a notification of %zu bytes, at most %d", m->notify_len,
                                         NOTIFY_MAX_BYTES);
                r = notify_check_room(over->local, NULL, err);
                if (r < 0)
                        return r;
                memcpy(s->notify, m->notify, m->notify_len);
                s->notify_len = m->notify_len;
                s->has_notify = true;
        }
        r = remote_desc_check(m->local, &theirs, err);
        if (r < 0)
                return r;
        r = served_resolve(s, over, m, ret_index, err);
        if (r < 0)
                return r;
        remote_desc_from_cache(s->cache, &ours);
        remote_plan_args_plan_request(args, m->key.kind, *ret_index, &s->prep_req);
        r = served_keep_lists(s, err);
        if (r < 0)
                return r;
        s->prep_tensors = calloc((size_t)ours.num_tensors + theirs.num_tensors, sizeof(PlanTensor));
        if (!s->prep_tensors)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        r = remote_plan_check(&s->prep_req, s->pull ? &ours : &theirs, s->pull ? &theirs : &ours,
                              s->prep_tensors, s->prep_caches, &s->prep_checked, err);
        if (r < 0)
                return r;
        if (s->prep_checked.total_bytes == 0)
                return error_set(err, STATUS_PARAM_INVALID, "the transfer moves no bytes");

        if (s->remote_access) {
                Transport *direct = transport_set_get(s->root->transports, TRANSPORT_ROLE_DIRECT);

                if (!transport_caps(direct)->remote_access ||
                    !transport_cache_registered(direct, s->cache, true))
                        return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                         "cache %" PRIu64 " is not reachable for peers' "
                                         "one-sided access here (%s)",
                                         s->cache->id, transport_name(direct));
        }
        if (remote_plan_regions(s->cache, s->regions, &s->n_regions) < 0)
                return error_set(err, STATUS_FAILED, "cache %" PRIu64 " has too many regions",
                                 s->cache->id);
        /* One-sided, the answer names the plan's segments at once: laid here. */
        if (s->remote_access)
                return served_lay(s, err);
        return 0;
}

/* The descriptor of every tensor of the served cache, for the peer's one-sided reads/writes. */
static int served_descs(Served *s, TransportDesc *descs)
{
        Transport *direct = transport_set_get(s->root->transports, TRANSPORT_ROLE_DIRECT);

        for (uint32_t t = 0; t < s->cache->desc.num_tensors; t++) {
                int r = transport_cache_desc(direct, s->cache, t, &descs[t]);

                if (r < 0)
                        return r;
        }
        return 0;
}

/*
 * Finds what @p's request is served over: the inbound link it names, or (links are two-way) the
 * UP link one of our clusters made to the peer's, named by the id the peer granted it.
 */
static int served_find_link(Peer *p, const TransferPeerRequest *m, ServedOver *ret, Error *err)
{
        InLink *il;
        Link *l;

        if (m->link_id == 0 && m->linked_link_id != 0) {
                l = link_find_granted(p, m->linked_link_id);
                if (!l)
                        return error_set(err, STATUS_NOT_YET_LINK,
                                         "no link to this peer's inbound link %" PRIu64
                                         "; link again",
                                         m->linked_link_id);
                *ret = (ServedOver){
                        .link = l,
                        .local = l->local,
                        .seq = l->seq,
                        .id = l->id,
                        .n_inflight = l->n_served_inflight,
                };
                return 0;
        }
        il = link_inlink_find_id(p, m->link_id);
        if (!il)
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "no inbound link %" PRIu64 " from this peer; "
                                 "link again",
                                 m->link_id);
        *ret = (ServedOver){
                .inlink = il,
                .local = il->local,
                .seq = il->seq,
                .id = il->id,
                .n_inflight = il->n_inflight,
        };
        return 0;
}

/* Puts @s on the lists of @p, the link it is served over and the daemon, counted there. */
static void served_attach(Served *s, Peer *p, const ServedOver *over)
{
        TransferRoot *root = s->root;

        clist_link_tail(&p->served, &s->link_peer);
        p->n_served++;
        s->peer = p;
        if (over->inlink) {
                clist_link_tail(&over->inlink->served, &s->link_inlink);
                over->inlink->n_inflight++;
                s->inlink = over->inlink;
        } else {
                clist_link_tail(&over->link->served, &s->link_inlink);
                over->link->n_served_inflight++;
                s->link = over->link;
        }
        clist_link_tail(&root->served, &s->link_daemon);
        root->n_served++;
}

void served_handle_transfer(TransferRoot *root, Peer *p, uint64_t request_id,
                            const TransferPeerRequest *m)
{
        _cleanup_(served_freep) Served *s = NULL;
        Error err = ERROR_INIT;
        uint32_t timeout_ms;
        TransportDesc descs[KVD_MAX_TENSORS];
        ServedOver over = {};
        struct timeval tv;
        int r;

        if (request_id == 0) {
                root->link->counters.peer_requests_refused++;
                return;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                error_set(&err, STATUS_OUT_OF_MEMORY, "out of memory");
                goto refuse;
        }
        s->root = root;
        s->id = id_source_next(root->link->ids);
        s->state = SERVED_RUNNING;
        s->pull = remote_plan_kind_is_pull(m->args.kind);
        s->remote_access = m->remote_access;
        s->initiator_id = m->job_id;
        s->request_id = request_id;
        s->start_usec = now_usec(CLOCK_MONOTONIC);
        clist_init(&s->link_peer);
        clist_init(&s->link_inlink);
        clist_init(&s->link_daemon);

        if (root->link->stopping) {
                error_set(&err, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
                goto refuse;
        }
        r = served_find_link(p, m, &over, &err);
        if (r < 0)
                goto refuse;
        s->cluster_id = over.local->id;
        s->remote_cluster_id =
                over.inlink ? over.inlink->remote_cluster_id : over.link->remote_cluster_id;
        r = served_prepare(s, &over, m, &s->remote_index, &err);
        if (r < 0)
                goto refuse;

        timeout_ms = MIN(m->timeout_ms ? m->timeout_ms : *root->options.sync_kv_timeout_ms,
                         SERVED_TIMEOUT_MAX_MS);
        if (!s->pull && !s->remote_access) {
                /* A push into our memory over the streams: the initiator answers its client
                 * once we said our receiver stopped (or its fence passed), so our receiver
                 * stops before the initiator's deadline, on our clock: the budget it gave us less
                 * the round trip, counted from now (its request took part of that trip). Our I/O
                 * threads hold this deadline even when the loop is late. */
                uint32_t rtt_ms = (uint32_t)MIN((p->rtt_usec + USEC_PER_MSEC - 1) / USEC_PER_MSEC,
                                                (uint64_t)timeout_ms / 2);

                timeout_ms = MAX(timeout_ms - rtt_ms, 1u);
        } else
                timeout_ms += SERVED_GRACE_MS;
        tv = (struct timeval){.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        s->timer = evtimer_new(root->link->base, served_on_deadline, s);
        if (!s->timer || evtimer_add(s->timer, &tv) < 0) {
                error_set(&err, STATUS_OUT_OF_MEMORY, "cannot arm a deadline");
                goto refuse;
        }

        /* The data job exists before the answer: a peer told OK always gets its bytes (or an
         * abort), and bytes it sends always find their job. Over TCP its plan is laid by its
         * prepare step, on a copy thread, and the answer waits for it (served_on_handed()). */
        if (s->remote_access)
                r = served_descs(s, descs);
        else {
                s->job = (TransportJob){
                        .dir = s->pull ? TRANSPORT_WRITE : TRANSPORT_READ,
                        .channel = p->data,
                        .id = s->pull ? s->initiator_id : s->id,
                        .deadline_usec = s->start_usec + (usec_t)timeout_ms * USEC_PER_MSEC,
                        /* A push lands nothing here past it (see above). */
                        .hard_deadline = true,
                        .done = served_on_data_done,
                        .userdata = s,
                        .prepare = served_prepare_job,
                        .handed = served_on_handed,
                };
                s->moving = true;
                r = transport_submit(transport_set_get(root->transports, TRANSPORT_ROLE_STREAM),
                                     &s->job);
        }
        if (r < 0) {
                s->moving = false;
                if (s->lay_err.code != 0)
                        err = s->lay_err;
                else
                        error_set(&err, r == -EEXIST ? STATUS_PARAM_INVALID : STATUS_PEER_LOST,
                                  "cannot start data job %" PRIu64 ": %s",
                                  s->pull ? s->initiator_id : s->id, strerror(-r));
                goto refuse;
        }
        served_attach(s, p, &over);
        /* Laid here (one-sided, or a set without copy threads): answered at once. */
        if (s->remote_access || s->job.submitted)
                served_answer(s, s->remote_access ? descs : NULL);
        TAKE_PTR(s);
        return;

refuse:
        log_debug("%s: transfer %" PRIu64 " refused: %s", peer_name(p, (char[96]){0}, 96),
                  m->job_id, err.msg);
        (void)root->peer_ops->refuse(p, request_id, &err);
}

void served_handle_remote_done(TransferRoot *root, Peer *p, uint64_t transfer_id, int status)
{
        Served *s;

        CLIST_FOREACH (s, &p->served, link_peer) {
                if (s->initiator_id != transfer_id || !(s->remote_access || s->await_word))
                        continue;
                if (!s->remote_access) {
                        /* A pull over TCP: every byte landed over there, so the key ends now,
                         * before the peer's next request can name it, even if the completion
                         * of our send job has not been seen yet. */
                        s->word = true;
                        s->word_status = status;
                        if (status == STATUS_OK && s->end_key && s->state == SERVED_RUNNING) {
                                transfer_end_key(root->link, &s->key, s->cache);
                                s->end_key = false;
                        }
                        if (s->moving)
                                return;
                }
                if (s->timer)
                        event_del(s->timer);
                /* A push's notification goes out now: every WRITE completed. */
                served_finish(s, status);
                return;
        }
}

void served_handle_transfer_cancel(TransferRoot *root, Peer *p, uint64_t transfer_id)
{
        Served *s;

        CLIST_FOREACH (s, &p->served, link_peer)
                if (s->initiator_id == transfer_id) {
                        served_fail(s, STATUS_TIMEOUT);
                        return;
                }
}
