/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, what peers ask: whether a member joined (PeerDomainJoin), that a member's link
 * is held (PeerDomainLinked), that a member is ready (PeerDomainReady), that a member left
 * (PeerDomainLeave). Everything a peer sends is checked: ranks in range and on the right side,
 * the domain ids it learned at the join.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "common/status.h"

/* Names the first difference between our members and the peer's, into @buf. */
static void members_diff(const Domain *dom, const DomainJoinMsg *m, char *buf, size_t size)
{
        (void)snprintf(buf, size, "the rank tables or cluster ranks differ");
        if (m->n_members != dom->n_ranks) {
                (void)snprintf(buf, size, "%u members here, %zu at the daemon of rank %" PRIu32,
                               dom->n_ranks, m->n_members, m->src_rank);
                return;
        }
        for (size_t i = 0; i < m->n_members; i++) {
                const DomainMemberMsg *x = &m->members[i];
                const DomainRank *r;

                if (x->rank >= dom->n_ranks)
                        continue;
                r = &dom->ranks[x->rank];
                if (x->cluster_id == r->cluster_id && x->device_id == r->device_id &&
                    strcmp(x->address ?: "", r->address) == 0 &&
                    strcmp(x->server_id ?: "", r->server_id) == 0)
                        continue;
                (void)snprintf(buf, size,
                               "rank %" PRIu32 " is cluster %" PRIu64 " at %s (server %s, "
                               "device %" PRId32 ") here, cluster %" PRIu64 " at %.64s (server "
                               "%.64s, device %" PRId32 ") at the daemon of rank %" PRIu32,
                               x->rank, r->cluster_id, r->address, r->server_id, r->device_id,
                               x->cluster_id, x->address ?: "", x->server_id ?: "", x->device_id,
                               m->src_rank);
                return;
        }
}

/*
 * Whether @m comes from a domain of its member that is not the one failed @dom knew: one that
 * never joined ours (another domain id), or whose daemon is another (it restarted). Its
 * own failure then says nothing about the asker's domain.
 */
static bool join_is_new_incarnation(const Domain *dom, const Peer *p, const DomainJoinMsg *m)
{
        const DomainRank *src;

        if (m->src_rank >= dom->n_ranks || dom->ranks[m->src_rank].local)
                return false;
        src = &dom->ranks[m->src_rank];
        return src->domain_id != m->src_domain_id ||
               (src->node_id && p->node_id && src->node_id != p->node_id);
}

void domain_peer_on_join(DomainRegistry *reg, Peer *p, uint64_t request_id, const DomainJoinMsg *m)
{
        DomainJoinAnswer answer = {0};
        Error err = ERROR_INIT;
        char diff[ERROR_MSG_MAX];
        DomainRank *src;
        Domain *dom;

        if (!m->comm_name || strlen(m->comm_name) == 0 || strlen(m->comm_name) > DOMAIN_NAME_MAX ||
            m->src_rank >= DOMAIN_MAX_RANKS || m->dst_rank >= DOMAIN_MAX_RANKS ||
            m->src_rank == m->dst_rank || m->src_domain_id == 0) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH, "a malformed PeerDomainJoin");
                goto refuse;
        }
        dom = domain_find_name(reg, m->comm_name);
        if (!dom) {
                /* Nobody here called link for it yet: the asker asks again. */
                reg->peer->join_answer(p, request_id, &answer);
                return;
        }
        if (dom->state == DOMAIN_FAILED) {
                if (join_is_new_incarnation(dom, p, m)) {
                        /* The asking member linked again (restarted, or unlinked and linked):
                         * ours failed and is replaced when a member here links again. Until
                         * then, or link_total_time, the asker waits (PREPARING). */
                        log_debug("%s: failed; rank %" PRIu32 " linked again (its domain %" PRIu64
                                  " at %s): not yet, until a member here links %s again",
                                  DOMAIN_NAME(dom), m->src_rank, m->src_domain_id,
                                  peer_name(p, (char[96]){0}, 96), dom->name);
                        reg->peer->join_answer(p, request_id, &answer);
                        return;
                }
                error_set(&err, dom->fail_code, "comm domain %s failed at %s: %s", dom->name,
                          link_root_peer_address(p->root), dom->reason);
                goto refuse;
        }
        if (m->digest_len != sizeof(dom->digest) ||
            memcmp(m->digest, dom->digest, sizeof(dom->digest)) != 0) {
                members_diff(dom, m, diff, sizeof(diff));
                domain_fail(dom, STATUS_PARAM_INVALID, false, "the rank tables disagree: %s", diff);
                error_set(&err, STATUS_PARAM_INVALID, "the rank tables disagree: %s", diff);
                goto refuse;
        }
        if (m->dst_rank >= dom->n_ranks || m->src_rank >= dom->n_ranks ||
            !dom->ranks[m->dst_rank].local || dom->ranks[m->src_rank].local) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH,
                          "rank %" PRIu32 " is not a member here "
                          "or rank %" PRIu32 " is",
                          m->dst_rank, m->src_rank);
                goto refuse;
        }
        src = &dom->ranks[m->src_rank];
        if (src->domain_id && src->node_id && p->node_id && src->node_id != p->node_id) {
                /* The member's daemon restarted and it linked again before we noticed the old
                 * one's loss, which fails ours: the asker waits for our member to link again. */
                log_debug("%s: rank %" PRIu32 " linked again behind a restarted daemon (%s): "
                          "not yet",
                          DOMAIN_NAME(dom), m->src_rank, peer_name(p, (char[96]){0}, 96));
                reg->peer->join_answer(p, request_id, &answer);
                return;
        }
        if (src->domain_id && src->domain_id != m->src_domain_id) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH,
                          "rank %" PRIu32 " joined as another "
                          "incarnation of the domain",
                          m->src_rank);
                goto refuse;
        }
        if (!dom->ranks[m->dst_rank].joined) {
                reg->peer->join_answer(p, request_id, &answer);
                return;
        }
        src->domain_id = m->src_domain_id;
        src->node_id = p->node_id;
        src->ever_joined = true;
        if (!src->peer || src->peer->state != PEER_READY)
                src->peer = p;
        answer.joined = true;
        answer.dst_domain_id = dom->id;
        /* The answer goes first: what progress sends next names our domain id. */
        reg->peer->join_answer(p, request_id, &answer);
        if (!dom->ranks[m->dst_rank].pairs[m->src_rank].joined) {
                dom->ranks[m->dst_rank].pairs[m->src_rank].joined = true;
                log_debug("%s: rank %" PRIu32 " and rank %" PRIu32 " joined (asked by %s)",
                          DOMAIN_NAME(dom), m->dst_rank, m->src_rank,
                          peer_name(p, (char[96]){0}, 96));
                domain_join_progress(dom);
        }
        return;
refuse:
        reg->peer->join_refuse(p, request_id, &err);
}

/* The domain of @reg @dst_id names, if remote rank @rank of it is the peer's domain @src_id. */
static Domain *domain_for_notice(DomainRegistry *reg, Peer *p, uint64_t dst_id, uint64_t src_id,
                                 uint32_t rank)
{
        Domain *dom = domain_find_id(reg, dst_id);
        DomainRank *r;

        if (!dom || rank >= dom->n_ranks)
                return NULL;
        r = &dom->ranks[rank];
        if (r->local || src_id == 0 || (r->domain_id && r->domain_id != src_id))
                return NULL;
        r->domain_id = src_id;
        return dom;
}

void domain_peer_on_linked(DomainRegistry *reg, Peer *p, const DomainLinkedMsg *m)
{
        Domain *dom = domain_for_notice(reg, p, m->dst_domain_id, m->src_domain_id, m->src_rank);

        if (!dom || dom->state != DOMAIN_PREPARING || m->dst_rank >= dom->n_ranks ||
            !dom->ranks[m->dst_rank].local) {
                p->root->counters.peer_requests_refused++;
                return;
        }
        dom->ranks[m->dst_rank].pairs[m->src_rank].in_done = true;
        dom->ranks[m->dst_rank].pairs[m->src_rank].in_direct = m->direct;
        domain_join_progress(dom);
}

void domain_peer_on_ready(DomainRegistry *reg, Peer *p, const DomainReadyMsg *m)
{
        Domain *dom = domain_for_notice(reg, p, m->dst_domain_id, m->src_domain_id, m->rank);

        if (!dom) {
                p->root->counters.peer_requests_refused++;
                return;
        }
        if (dom->state != DOMAIN_PREPARING)
                return;
        dom->ranks[m->rank].ready = true;
        log_debug("%s: rank %" PRIu32 " is ready", DOMAIN_NAME(dom), m->rank);
        domain_check_ok(dom);
}

void domain_peer_on_leave(DomainRegistry *reg, Peer *p, const DomainLeaveMsg *m)
{
        Domain *dom = domain_for_notice(reg, p, m->dst_domain_id, m->src_domain_id, m->rank);
        const DomainRank *r;

        if (!dom) {
                p->root->counters.peer_requests_refused++;
                return;
        }
        r = &dom->ranks[m->rank];
        domain_fail(dom, m->status, false,
                    "rank %" PRIu32 " (cluster %" PRIu64 " at %s) left: %.160s", m->rank,
                    r->cluster_id, r->address, m->detail);
}
