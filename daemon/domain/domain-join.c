/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, forming. For each pair of a local member and a member behind another daemon:
 *
 *   joined     a set-up in progress asks the other daemon (PeerDomainJoin) until that member has
 *              called link with the same table; the other daemon answers whether or not it holds
 *              a slot, and a question answered yes has joined the pair on both ends
 *   out_done   our cluster's PeerLink to theirs was answered: we hold what their cluster exposes
 *   in_done    their daemon says (PeerDomainLinked) it holds what ours exposes
 *
 * A member whose pairs are all done is ready, and says so to every other member's daemon
 * (PeerDomainReady); the domain is OK where every member is ready, and only then are the links
 * made from what the pairs hold (until then no transfer can use them: NOT_YET_LINK).
 * Pairs of two local members join as soon as both called link.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "proto/status-wire.h"
#include "common/status.h"

#define NEVER UINT64_MAX

/* ---- pair links ---- */

PairLink *domain_pair_link_find(DomainRegistry *reg, uint64_t local, uint64_t remote)
{
        PairLink *pl;

        /* A failed one stays while its domains do; a new attempt is another. */
        CLIST_FOREACH (pl, &reg->pair_links, link_reg)
                if (pl->local_cluster_id == local && pl->remote_cluster_id == remote &&
                    pl->state != PAIR_LINK_FAILED)
                        return pl;
        return NULL;
}

/* Every domain whose pairs use @pl looks again. */
static void pair_link_changed(PairLink *pl)
{
        Domain *dom, *tmp;

        CLIST_FOREACH_SAFE (dom, tmp, &pl->reg->domains, link_reg) {
                bool uses = false;

                for (uint32_t m = 0; m < dom->n_ranks && !uses; m++)
                        for (uint32_t o = 0; o < dom->n_ranks; o++)
                                uses = uses || dom->ranks[m].pairs[o].pl == pl;
                if (uses)
                        domain_join_progress(dom);
        }
}

void domain_pair_link_on_transport(LinkTransport *t, TransportChannel *ch, const Error *err,
                                   void *userdata)
{
        PairLink *pl = userdata;

        if (!pl->peer || pl->peer->state != PEER_READY) {
                /* domain_on_peer_lost() fails the domains with the reason. */
                error_set(&pl->err, STATUS_PEER_LOST, "the daemon of cluster %" PRIu64 " was lost",
                          pl->remote_cluster_id);
                pl->state = PAIR_LINK_FAILED;
                pl->peer = NULL;
                return;
        }
        if (err) {
                pl->reg->peer->link_give_back(pl);
                pl->err = *err;
                pl->state = PAIR_LINK_FAILED;
                pl->peer = NULL;
        } else {
                pl->channel = ch;
                pl->state = PAIR_LINK_HELD;
        }
        pair_link_changed(pl);
}

void domain_pair_link_on_reply(PairLink *pl, Peer *p, int status, const Error *err,
                               DomainLinkOffer *offer)
{
        pl->call = NULL;
        if (status != STATUS_OK && p->state == PEER_CLOSED) {
                /* domain_on_peer_lost() fails the domains with the reason. */
                error_set(&pl->err, STATUS_PEER_LOST, "the daemon of cluster %" PRIu64 " was lost",
                          pl->remote_cluster_id);
                pl->state = PAIR_LINK_FAILED;
                pl->peer = NULL;
                return;
        }
        if (status == STATUS_OK && offer) {
                pl->exposed = offer;
                pl->state = PAIR_LINK_CONNECTING;
                /* The transport both ends can (or must) use, as for kvd_link_clusters(). */
                pl->reg->peer->link_connect(pl, p);
                return;
        }
        error_set(&pl->err, status == STATUS_OK ? STATUS_OUT_OF_MEMORY : STATUS_LINK_FAILED,
                  "cannot link cluster %" PRIu64 " to cluster %" PRIu64 ": %s",
                  pl->local_cluster_id, pl->remote_cluster_id,
                  status == STATUS_OK  ? "out of memory"
                  : err && err->msg[0] ? err->msg
                                       : status_wire_name(status));
        pl->state = PAIR_LINK_FAILED;
        pl->peer = NULL;
        pair_link_changed(pl);
}

/* The pair link of member @m's cluster to member @o's, referenced. NULL when out of memory. */
static PairLink *pair_link_get(Domain *dom, uint32_t m, uint32_t o)
{
        DomainRegistry *reg = dom->reg;
        Cluster *c = dom->ranks[m].cluster;
        uint64_t remote = dom->ranks[o].cluster_id;
        PairLink *pl;
        InLink *il;
        Link *l;
        Peer *p;
        int r;

        pl = domain_pair_link_find(reg, c->id, remote);
        if (pl) {
                pl->n_refs++;
                return pl;
        }
        pl = calloc(1, sizeof(*pl));
        if (!pl)
                return NULL;
        pl->reg = reg;
        pl->local_cluster_id = c->id;
        pl->remote_cluster_id = remote;
        pl->n_refs = 1;
        clist_link_tail(&reg->pair_links, &pl->link_reg);
        if (dom->ranks[o].local) {
                /* Made when the domain is OK; nothing to ask anyone. */
                pl->state = PAIR_LINK_HELD;
                return pl;
        }
        l = link_find(c, remote);
        if (l && l->state == LINK_UP) {
                /* Already linked (link_clusters or an older domain): the domain uses it. */
                pl->state = PAIR_LINK_MADE;
                pl->link_id = l->id;
                return pl;
        }
        il = link_inlink_find_cluster(c, remote);
        if (il && !il->domain) {
                /* The remote cluster linked to ours (links are two-way): the domain uses that
                 * link and opens no other. One a domain of theirs asked for is not made yet. */
                pl->state = PAIR_LINK_MADE;
                pl->link_id = il->id;
                pl->reverse = true;
                return pl;
        }
        pl->state = PAIR_LINK_FAILED;
        if (link_request_in_progress(c, remote)) {
                error_set(&pl->err, STATUS_PROCESSING_LINK,
                          "cluster %" PRIu64 " is linking to %" PRIu64
                          " with kvd_link_clusters() right now",
                          c->id, remote);
                return pl;
        }
        p = domain_rank_peer(dom, o);
        if (!p) {
                error_set(&pl->err, STATUS_PEER_LOST,
                          "the daemon of cluster %" PRIu64 " is not "
                          "connected",
                          remote);
                return pl;
        }
        r = link_transport_choose(&pl->transport, c, dom->ranks[o].address, &pl->err);
        if (r < 0)
                return pl;
        r = reg->peer->link_ask(pl, c, p, &pl->call);
        if (r < 0) {
                error_set(&pl->err, STATUS_LINK_FAILED,
                          "cannot ask for a link of cluster %" PRIu64 " to %" PRIu64 ": %s", c->id,
                          remote, strerror(-r));
                return pl;
        }
        pl->state = PAIR_LINK_REQUESTING;
        pl->peer = p;
        return pl;
}

void domain_pair_link_unref(PairLink *pl)
{
        Cluster *c;
        Link *l;

        if (--pl->n_refs > 0)
                return;
        c = link_root_find_cluster(pl->reg->roots.link, pl->local_cluster_id);
        switch (pl->state) {
        case PAIR_LINK_REQUESTING:
                pl->reg->peer->link_forget(pl);
                break;
        case PAIR_LINK_CONNECTING:
        case PAIR_LINK_HELD:
                link_transport_cancel(&pl->transport);
                if (!c || !link_find(c, pl->remote_cluster_id))
                        pl->reg->peer->link_give_back(pl);
                break;
        case PAIR_LINK_MADE:
                l = c ? link_find(c, pl->remote_cluster_id) : NULL;
                if (pl->owned && l && l->id == pl->link_id) {
                        /* Not the domains' any more: its going fails none of them. */
                        pl->state = PAIR_LINK_FAILED;
                        link_free(l, STATUS_NOT_YET_LINK);
                }
                break;
        case PAIR_LINK_FAILED:
                break;
        }
        if (pl->exposed)
                pl->reg->peer->offer_free(pl->exposed);
        clist_unlink(&pl->link_reg);
        free(pl);
}

/* Whether a domain made link @link_id (a pair link of ours owns it). */
static bool link_is_domains(DomainRegistry *reg, uint64_t link_id)
{
        PairLink *pl;

        CLIST_FOREACH (pl, &reg->pair_links, link_reg)
                if (pl->state == PAIR_LINK_MADE && pl->owned && pl->link_id == link_id)
                        return true;
        return false;
}

/* The link MADE @pl of our cluster @c uses, when it is still there and up: its own (*@ret_l) or
 * the one the remote cluster made, on this daemon (*@ret_l) or as the peer's (*@ret_il). */
static bool pair_link_lookup(const PairLink *pl, Cluster *c, Link **ret_l, InLink **ret_il)
{
        Link *l = NULL;
        InLink *il = NULL;

        if (pl->state == PAIR_LINK_MADE && c && !pl->reverse)
                l = link_find(c, pl->remote_cluster_id);
        else if (pl->state == PAIR_LINK_MADE && c) {
                l = link_find_in(c, pl->remote_cluster_id);
                if (!l)
                        il = link_inlink_find_cluster(c, pl->remote_cluster_id);
        }
        if (l && (l->id != pl->link_id || l->state != LINK_UP))
                l = NULL;
        if (il && il->id != pl->link_id)
                il = NULL;
        if (ret_l)
                *ret_l = l;
        if (ret_il)
                *ret_il = il;
        return l || il;
}

static bool pair_link_alive(const PairLink *pl, Cluster *c)
{
        return pair_link_lookup(pl, c, NULL, NULL);
}

/*
 * The transport of a link that runs on channel @ch: a channel of the link's own is the direct
 * transport's (the one that opens channels); without one the link streams on the peer's data
 * connections.
 */
static Transport *pair_channel_transport(const Domain *dom, const TransportChannel *ch)
{
        return transport_set_get(dom->reg->roots.transports,
                                 ch ? TRANSPORT_ROLE_DIRECT : TRANSPORT_ROLE_STREAM);
}

/* Whether a link on channel @ch reaches the peer's memory: its transport has remote access. */
static bool pair_channel_direct(const Domain *dom, const TransportChannel *ch)
{
        return ch && transport_caps(pair_channel_transport(dom, ch))->remote_access;
}

TransportChannel *domain_pair_direct(Domain *dom, uint32_t m, uint32_t o, Peer **ret_peer,
                                     const char **ret_why)
{
        const PairLink *pl = dom->ranks[m].pairs[o].pl;
        Cluster *c = dom->ranks[m].cluster;
        TransportChannel *ch = NULL;
        InLink *il = NULL;
        Link *l = NULL;
        Peer *p = NULL;

        *ret_peer = NULL;
        *ret_why = "is gone";
        if (!pl || !c)
                return NULL;
        if (!pl->reverse) {
                /* Our cluster's own link, as before two-way links. */
                l = link_find(c, pl->remote_cluster_id);
                if (!l)
                        return NULL;
                if (l->state != LINK_UP) {
                        *ret_why = "is down";
                        return NULL;
                }
                ch = l->channel;
                p = l->peer;
        } else if (pair_link_lookup(pl, c, &l, &il) && il) {
                /* The peer's link to us: our channel to its device, once connected. */
                ch = il->channel;
                p = il->peer;
        } else if (l) {
                *ret_why = "is on this daemon";
                return NULL;
        } else
                return NULL;
        if (!pair_channel_direct(dom, ch)) {
                *ret_why = "streams on the peer connection (its transport has no remote access)";
                return NULL;
        }
        if (!p || p->state != PEER_READY) {
                *ret_why = "lost its daemon";
                return NULL;
        }
        *ret_peer = p;
        return ch;
}

const char *domain_pair_reason(const Domain *dom, uint32_t m, uint32_t o, char *buf, size_t size)
{
        const PairLink *pl = dom->ranks[m].pairs[o].pl;
        Cluster *c = dom->ranks[m].cluster;
        InLink *il = NULL;
        Link *l = NULL;

        buf[0] = '\0';
        if (!pl || !c)
                return buf;
        if (!pl->reverse) {
                l = link_find(c, pl->remote_cluster_id);
                (void)snprintf(buf, size, "%s", l ? l->transport_reason : "");
        } else if (pair_link_lookup(pl, c, &l, &il) && il)
                (void)snprintf(buf, size,
                               "the link cluster %" PRIu64 " made (inbound link %" PRIu64
                               "), both ways: %s",
                               il->remote_cluster_id, il->id,
                               il->channel ? "RDMA queue pairs of ours to its device" : "TCP");
        else if (l)
                (void)snprintf(buf, size, "the link cluster %" PRIu64 " made, both ways: %s",
                               l->local->id, l->transport_reason);
        return buf;
}

/* Makes (or finds) the link of a pair of OK @dom; fails the domain when it cannot. */
static void pair_make_link(Domain *dom, uint32_t m, uint32_t o)
{
        LinkRoot *link = dom->reg->roots.link;
        PairLink *pl = dom->ranks[m].pairs[o].pl;
        Cluster *c = dom->ranks[m].cluster;
        Cluster *remote;
        Error e = ERROR_INIT;
        Link *l, *in;
        int r;

        l = link_find(c, pl->remote_cluster_id);
        switch (pl->state) {
        case PAIR_LINK_MADE:
                if (pair_link_alive(pl, c))
                        return;
                domain_fail(dom, STATUS_PEER_LOST, false,
                            "the link of cluster %" PRIu64 " to %" PRIu64 " went away", c->id,
                            pl->remote_cluster_id);
                return;
        case PAIR_LINK_HELD:
                break;
        default:
                domain_fail(dom, pl->err.code ?: STATUS_LINK_FAILED, false, "%s", pl->err.msg);
                return;
        }
        if (l && l->state == LINK_UP) {
                /* A link of the same pair was made meanwhile: the domain uses it. */
                pl->state = PAIR_LINK_MADE;
                pl->link_id = l->id;
                return;
        }
        if (dom->ranks[o].local) {
                remote = dom->ranks[o].cluster;
                in = link_find_in(c, remote->id);
                if (in && !link_is_domains(dom->reg, in->id)) {
                        /* The other member linked to ours with kvd_link_clusters() (links are
                         * two-way): the domain uses that link and opens no other. */
                        pl->state = PAIR_LINK_MADE;
                        pl->link_id = in->id;
                        pl->reverse = true;
                        return;
                }
                if (l)
                        link_free(l, STATUS_PEER_LOST);
                r = link_new_local(
                        link, c, remote,
                        transport_set_get(dom->reg->roots.transports, TRANSPORT_ROLE_LOCAL), &l);
                if (r < 0) {
                        domain_fail(dom, STATUS_OUT_OF_MEMORY, false, "cannot create a link");
                        return;
                }
                (void)snprintf(l->transport_reason, sizeof(l->transport_reason), "same node");
                /* It reaches what the other member registered before it called link. */
                l->seq = dom->ranks[o].seq;
        } else {
                char reason[sizeof(pl->transport.reason) + 16];

                (void)snprintf(reason, sizeof(reason), "comm domain, %s", pl->transport.reason);
                r = dom->reg->peer->link_make(pl, c, reason, &l, &e);
                if (r < 0) {
                        domain_fail(dom, e.code, false, "%s", e.msg);
                        return;
                }
                dom->reg->peer->offer_free(pl->exposed);
                pl->exposed = NULL;
                pl->peer = NULL;
                pl->channel = NULL;
        }
        pl->state = PAIR_LINK_MADE;
        pl->link_id = l->id;
        pl->owned = true;
}

void domain_make_links(Domain *dom)
{
        for (uint32_t m = 0; m < dom->n_ranks; m++) {
                if (!dom->ranks[m].local || !dom->ranks[m].joined)
                        continue;
                for (uint32_t o = 0; o < dom->n_ranks && dom->state == DOMAIN_PREPARING; o++)
                        if (o != m)
                                pair_make_link(dom, m, o);
        }
}

/* ---- messages ---- */

/* Whether an earlier remote rank than @o lives on the same daemon (one notice per daemon). */
static bool rank_daemon_seen(const Domain *dom, uint32_t o)
{
        for (uint32_t k = 0; k < o; k++)
                if (!dom->ranks[k].local && dom->ranks[k].domain_id &&
                    strcmp(dom->ranks[k].address, dom->ranks[o].address) == 0)
                        return true;
        return false;
}

void domain_send_leave(Domain *dom, uint32_t rank, int code, const char *reason)
{
        DomainLeaveMsg m = {
                .src_domain_id = dom->id, .rank = rank, .status = code, .detail = reason};

        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                Peer *p;

                if (dom->ranks[o].local || !dom->ranks[o].domain_id || rank_daemon_seen(dom, o))
                        continue;
                m.dst_domain_id = dom->ranks[o].domain_id;
                /* Quietly nothing when it is not connected. */
                p = domain_rank_peer(dom, o);
                if (p)
                        (void)dom->reg->peer->leave(p, &m);
        }
}

static void domain_send_ready(Domain *dom, uint32_t rank)
{
        DomainReadyMsg m = {.src_domain_id = dom->id, .rank = rank};

        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                Peer *p;

                if (dom->ranks[o].local || rank_daemon_seen(dom, o))
                        continue;
                m.dst_domain_id = dom->ranks[o].domain_id;
                p = domain_rank_peer(dom, o);
                if (p)
                        (void)dom->reg->peer->ready(p, &m);
        }
}

/* Whether the link of pair @pl reaches (or will reach) the peer's memory: direct lanes. */
static bool pair_link_direct(const Domain *dom, const PairLink *pl, Cluster *c)
{
        InLink *il = NULL;
        Link *l = NULL;

        if (pl->state == PAIR_LINK_HELD)
                return pair_channel_direct(dom, pl->channel);
        if (!pair_link_lookup(pl, c, &l, &il))
                return false;
        /* The peer's link to us: direct once our channel to its device connected (the
         * messages' route is decided here, so a later connection changes nothing). */
        return pair_channel_direct(dom, l ? l->channel : il->channel);
}

static void domain_send_linked(Domain *dom, uint32_t m, uint32_t o)
{
        DomainLinkedMsg msg = {
                .dst_domain_id = dom->ranks[o].domain_id,
                .src_domain_id = dom->id,
                .src_rank = m,
                .dst_rank = o,
                /* Our member's messages to theirs go one-sided over this link: their
                 * receives register for them. */
                .direct = pair_link_direct(dom, dom->ranks[m].pairs[o].pl, dom->ranks[m].cluster),
        };
        Peer *p = domain_rank_peer(dom, o);

        if (p)
                (void)dom->reg->peer->linked(p, &msg);
}

/* ---- progress ---- */

/* Looks at one pair; returns whether it is done both ways. */
static bool pair_progress(Domain *dom, uint32_t m, uint32_t o)
{
        DomainRank *o_rank = &dom->ranks[o];
        DomainPair *pair = &dom->ranks[m].pairs[o];

        if (o_rank->local) {
                pair->joined = pair->out_done = pair->in_done = o_rank->joined;
        }
        if (!pair->joined)
                return false;
        if (!pair->pl) {
                PairLink *pl = pair_link_get(dom, m, o);

                if (!pl) {
                        domain_fail(dom, STATUS_OUT_OF_MEMORY, false, "out of memory");
                        return false;
                }
                /* Asking may have lost a peer, and the domain with it. */
                if (dom->state != DOMAIN_PREPARING) {
                        domain_pair_link_unref(pl);
                        return false;
                }
                pair->pl = pl;
        }
        if (pair->pl->state == PAIR_LINK_FAILED) {
                domain_fail(dom, pair->pl->err.code ?: STATUS_LINK_FAILED, false, "%s",
                            pair->pl->err.msg);
                return false;
        }
        if (o_rank->local)
                return true;
        if (pair->pl->state == PAIR_LINK_HELD || pair->pl->state == PAIR_LINK_MADE)
                pair->out_done = true;
        if (pair->out_done && !pair->linked_sent) {
                pair->linked_sent = true;
                domain_send_linked(dom, m, o);
        }
        return pair->out_done && pair->in_done;
}

void domain_join_progress(Domain *dom)
{
        for (uint32_t m = 0; m < dom->n_ranks; m++) {
                DomainRank *r = &dom->ranks[m];
                bool done = true;

                if (!r->local || !r->joined)
                        continue;
                for (uint32_t o = 0; o < dom->n_ranks; o++) {
                        if (o == m)
                                continue;
                        done = pair_progress(dom, m, o) && done;
                        if (dom->state != DOMAIN_PREPARING)
                                return;
                }
                if (done && !r->ready) {
                        r->ready = true;
                        log_debug("%s: rank %" PRIu32 " is linked both ways with every member",
                                  DOMAIN_NAME(dom), m);
                        domain_send_ready(dom, m);
                }
        }
        if (dom->setup == SETUP_ACTIVE)
                domain_join_tick(dom);
        domain_check_ok(dom);
}

/* ---- reaching out (a set-up in progress) ---- */

static unsigned backoff_next(unsigned ms, unsigned max)
{
        return ms == 0 ? DOMAIN_RETRY_MIN_MS : MIN(ms * 2, max);
}

void domain_join_on_reply(DomainPair *pair, Peer *p, int status, const Error *err,
                          const DomainJoinAnswer *m)
{
        Domain *dom = pair->dom;
        DomainRank *o = &dom->ranks[pair->o];
        usec_t now = now_usec(CLOCK_MONOTONIC);

        pair->join_call = NULL;
        if (status != STATUS_OK && p->state == PEER_CLOSED) {
                /* The connection went: dial again later (the loss itself is handled there). */
                pair->join_backoff_ms = backoff_next(pair->join_backoff_ms, DOMAIN_RETRY_MAX_MS);
                pair->next_join_usec = now + (usec_t)pair->join_backoff_ms * USEC_PER_MSEC;
                domain_join_progress(dom);
                return;
        }
        if (status != STATUS_OK) {
                domain_fail(dom, status, false, "the daemon of rank %" PRIu32 " (%s) refused: %s",
                            pair->o, o->address,
                            err && err->msg[0] ? err->msg : status_wire_name(status));
                return;
        }
        if (!m->joined) {
                pair->join_backoff_ms = backoff_next(pair->join_backoff_ms, DOMAIN_RETRY_MAX_MS);
                pair->next_join_usec = now + (usec_t)pair->join_backoff_ms * USEC_PER_MSEC;
                domain_join_progress(dom);
                return;
        }
        if (m->dst_domain_id == 0 || (o->domain_id && o->domain_id != m->dst_domain_id)) {
                domain_fail(dom, STATUS_PROTOCOL_MISMATCH, false,
                            "the daemon of rank %" PRIu32
                            " answered for another incarnation of the domain",
                            pair->o);
                return;
        }
        o->domain_id = m->dst_domain_id;
        o->node_id = p->node_id;
        o->ever_joined = true;
        if (!o->peer || o->peer->state != PEER_READY)
                o->peer = p;
        pair->joined = true;
        log_debug("%s: rank %" PRIu32 " and rank %" PRIu32 " joined", DOMAIN_NAME(dom), pair->m,
                  pair->o);
        domain_join_progress(dom);
}

static void join_send(Domain *dom, uint32_t m, uint32_t o, Peer *p)
{
        DomainJoinMsg msg = {
                .comm_name = dom->name,
                .digest = dom->digest,
                .digest_len = sizeof(dom->digest),
                .n_members = dom->n_ranks,
                .src_rank = m,
                .dst_rank = o,
                .src_domain_id = dom->id,
        };
        DomainPair *pair = &dom->ranks[m].pairs[o];
        int r;

        for (uint32_t k = 0; k < dom->n_ranks; k++)
                msg.members[k] = (DomainMemberMsg){
                        .rank = k,
                        .cluster_id = dom->ranks[k].cluster_id,
                        .address = dom->ranks[k].address,
                        .device_id = dom->ranks[k].device_id,
                        .server_id = dom->ranks[k].server_id,
                };
        r = dom->reg->peer->join_ask(p, &msg, pair, &pair->join_call);
        if (r < 0) {
                pair->join_call = NULL;
                pair->join_backoff_ms = backoff_next(pair->join_backoff_ms, DOMAIN_RETRY_MAX_MS);
                pair->next_join_usec =
                        now_usec(CLOCK_MONOTONIC) + (usec_t)pair->join_backoff_ms * USEC_PER_MSEC;
        }
}

static void rank_on_ready(Peer *p, int status, const Error *err, void *userdata)
{
        DomainRank *r = userdata;
        Domain *dom = r->dom;

        r->waiter = NULL;
        if (status != STATUS_OK) {
                log_debug("%s: cannot reach the daemon of rank %" PRIu32 " at %s yet: %s",
                          DOMAIN_NAME(dom), r->rank, r->address, err ? err->msg : "");
                r->peer = NULL;
                r->dial_backoff_ms = backoff_next(r->dial_backoff_ms, DOMAIN_DIAL_MAX_MS);
                r->next_dial_usec =
                        now_usec(CLOCK_MONOTONIC) + (usec_t)r->dial_backoff_ms * USEC_PER_MSEC;
        } else {
                r->peer = p;
                r->node_id = p->node_id;
                r->dial_backoff_ms = 0;
        }
        domain_join_progress(dom);
}

/* Starts a connection to the daemon of remote rank @o unless one is there or coming. */
static void rank_dial(Domain *dom, uint32_t o, usec_t now, usec_t *next)
{
        DomainRank *r = &dom->ranks[o];
        Error e = ERROR_INIT;
        Peer *p;
        int k;

        if (domain_rank_peer(dom, o) || r->waiter)
                return;
        if (now < r->next_dial_usec) {
                *next = MIN(*next, r->next_dial_usec);
                return;
        }
        k = dom->reg->peer->dial(dom->reg->roots.link, r->address, &p, &e);
        if (k == 0) {
                r->peer = p;
                /* A READY peer answers from inside, and progress runs from there. */
                if (dom->reg->peer->when_ready(p, rank_on_ready, r, &r->waiter) == 0)
                        return;
                error_set(&e, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        log_debug("%s: cannot dial rank %" PRIu32 " at %s: %s", DOMAIN_NAME(dom), o, r->address,
                  e.msg);
        r->peer = NULL;
        r->dial_backoff_ms = backoff_next(r->dial_backoff_ms, DOMAIN_DIAL_MAX_MS);
        r->next_dial_usec = now + (usec_t)r->dial_backoff_ms * USEC_PER_MSEC;
        *next = MIN(*next, r->next_dial_usec);
}

void domain_join_tick(Domain *dom)
{
        usec_t now = now_usec(CLOCK_MONOTONIC), next = NEVER;
        struct timeval tv;

        if (dom->setup != SETUP_ACTIVE || dom->state != DOMAIN_PREPARING)
                return;
        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                bool wanted = false;
                Peer *p;

                if (dom->ranks[o].local)
                        continue;
                for (uint32_t m = 0; m < dom->n_ranks; m++)
                        wanted = wanted || (dom->ranks[m].local && dom->ranks[m].joined &&
                                            !dom->ranks[m].pairs[o].joined);
                if (!wanted)
                        continue;
                rank_dial(dom, o, now, &next);
                if (dom->state != DOMAIN_PREPARING || dom->setup != SETUP_ACTIVE)
                        return;
                p = domain_rank_peer(dom, o);
                if (!p)
                        continue;
                for (uint32_t m = 0; m < dom->n_ranks; m++) {
                        DomainPair *pair = &dom->ranks[m].pairs[o];

                        if (!dom->ranks[m].local || !dom->ranks[m].joined || pair->joined ||
                            pair->join_call)
                                continue;
                        if (now < pair->next_join_usec) {
                                next = MIN(next, pair->next_join_usec);
                                continue;
                        }
                        join_send(dom, m, o, p);
                        if (!pair->join_call)
                                next = MIN(next, pair->next_join_usec);
                }
        }
        event_del(dom->tick);
        if (next == NEVER)
                return;
        next = next > now ? next - now : 0;
        tv = (struct timeval){.tv_sec = (time_t)(next / USEC_PER_SEC),
                              .tv_usec = (suseconds_t)(next % USEC_PER_SEC)};
        (void)evtimer_add(dom->tick, &tv);
}

void domain_join_release(Domain *dom, uint32_t m)
{
        DomainRank *r = &dom->ranks[m];

        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                DomainPair *pair = &r->pairs[o];

                if (pair->join_call) {
                        /* The reply finds nobody; free its reference to us. */
                        dom->reg->peer->join_forget(pair->join_call);
                        pair->join_call = NULL;
                }
                if (pair->pl) {
                        domain_pair_link_unref(pair->pl);
                        pair->pl = NULL;
                }
        }
        if (dom->state == DOMAIN_PREPARING && !dom->removed)
                return;
        for (uint32_t o = 0; o < dom->n_ranks; o++)
                if (dom->ranks[o].waiter) {
                        dom->reg->peer->waiter_cancel(dom->ranks[o].waiter);
                        dom->ranks[o].waiter = NULL;
                }
}

void domain_join_peer_lost(Domain *dom, Peer *p, int status, const char *why)
{
        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                DomainRank *r = &dom->ranks[o];

                if (r->local || r->peer != p)
                        continue;
                r->peer = NULL;
                r->waiter = NULL;
                if (domain_rank_peer(dom, o))
                        continue;
                if (r->ever_joined && dom->state != DOMAIN_FAILED) {
                        domain_fail(dom,
                                    status == STATUS_DAEMON_UNAVAILABLE ? status : STATUS_PEER_LOST,
                                    false,
                                    "the daemon of rank %" PRIu32 " (cluster %" PRIu64
                                    " at %s) is gone: %s",
                                    o, r->cluster_id, r->address, why);
                        return;
                }
        }
        if (dom->setup == SETUP_ACTIVE)
                domain_join_tick(dom);
}
