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
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "common/status.h"
#include "proto/status-wire.h"

/* Names the first difference between our members and the peer's, into @buf. */
static void members_diff(const Domain *dom, const Kvdist__V1__PeerDomainJoin *m, char *buf,
                         size_t size)
{
        (void)snprintf(buf, size, "the rank tables or cluster ranks differ");
        if (m->n_members != dom->n_ranks) {
                (void)snprintf(buf, size, "%u members here, %zu at the daemon of rank %" PRIu32,
                               dom->n_ranks, m->n_members, m->src_rank);
                return;
        }
        for (size_t i = 0; i < m->n_members; i++) {
                const Kvdist__V1__DomainMember *x = m->members[i];
                const DomainRank *r;

                if (!x || x->rank >= dom->n_ranks)
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

void domain_peer_handle_join(void *userdata, Peer *p, uint64_t request_id,
                             const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainJoin *m = (const Kvdist__V1__PeerDomainJoin *)msg;
        Kvdist__V1__PeerDomainJoinReply reply = KVDIST__V1__PEER_DOMAIN_JOIN_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        DomainRegistry *reg = userdata;
        Error err = ERROR_INIT;
        char diff[ERROR_MSG_MAX];
        DomainRank *src;
        Domain *dom;

        reply.status = &status;
        if (!m->comm_name || strlen(m->comm_name) == 0 || strlen(m->comm_name) > DOMAIN_NAME_MAX ||
            m->src_rank >= DOMAIN_MAX_RANKS || m->dst_rank >= DOMAIN_MAX_RANKS ||
            m->src_rank == m->dst_rank || m->src_domain_id == 0) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH, "a malformed PeerDomainJoin");
                goto refuse;
        }
        dom = reg ? domain_find_name(reg, m->comm_name) : NULL;
        if (!dom) {
                /* Nobody here called link for it yet: the asker asks again. */
                (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id,
                                 &reply.base);
                return;
        }
        if (dom->state == DOMAIN_FAILED) {
                error_set(&err, dom->fail_code, "comm domain %s failed at %s: %s", dom->name,
                          link_root_peer_address(p->root), dom->reason);
                goto refuse;
        }
        if (m->digest.len != sizeof(dom->digest) ||
            memcmp(m->digest.data, dom->digest, sizeof(dom->digest)) != 0) {
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
        if (src->domain_id && src->domain_id != m->src_domain_id) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH,
                          "rank %" PRIu32 " joined as another "
                          "incarnation of the domain",
                          m->src_rank);
                goto refuse;
        }
        if (!dom->ranks[m->dst_rank].joined) {
                (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id,
                                 &reply.base);
                return;
        }
        src->domain_id = m->src_domain_id;
        src->node_id = p->node_id;
        src->ever_joined = true;
        if (!src->peer || src->peer->state != PEER_READY)
                src->peer = p;
        reply.joined = true;
        reply.dst_domain_id = dom->id;
        /* The answer goes first: what progress sends next names our domain id. */
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id, &reply.base);
        if (!dom->ranks[m->dst_rank].pairs[m->src_rank].joined) {
                dom->ranks[m->dst_rank].pairs[m->src_rank].joined = true;
                log_debug("%s: rank %" PRIu32 " and rank %" PRIu32 " joined (asked by %s)",
                          DOMAIN_NAME(dom), m->dst_rank, m->src_rank,
                          peer_name(p, (char[96]){0}, 96));
                domain_join_progress(dom);
        }
        return;
refuse:
        (void)peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id, err.code,
                               &err);
}

/* The domain of @reg @dst_id names, if remote rank @rank of it is the peer's domain @src_id. */
static Domain *domain_for_notice(DomainRegistry *reg, Peer *p, uint64_t dst_id, uint64_t src_id,
                                 uint32_t rank)
{
        Domain *dom = reg ? domain_find_id(reg, dst_id) : NULL;
        DomainRank *r;

        if (!dom || rank >= dom->n_ranks)
                return NULL;
        r = &dom->ranks[rank];
        if (r->local || src_id == 0 || (r->domain_id && r->domain_id != src_id))
                return NULL;
        r->domain_id = src_id;
        return dom;
}

void domain_peer_handle_linked(void *userdata, Peer *p, uint64_t request_id,
                               const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainLinked *m = (const Kvdist__V1__PeerDomainLinked *)msg;
        Domain *dom =
                domain_for_notice(userdata, p, m->dst_domain_id, m->src_domain_id, m->src_rank);

        if (!dom || dom->state != DOMAIN_PREPARING || m->dst_rank >= dom->n_ranks ||
            !dom->ranks[m->dst_rank].local) {
                p->root->counters.peer_requests_refused++;
                return;
        }
        dom->ranks[m->dst_rank].pairs[m->src_rank].in_done = true;
        dom->ranks[m->dst_rank].pairs[m->src_rank].in_rdma = m->rdma;
        domain_join_progress(dom);
}

void domain_peer_handle_ready(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainReady *m = (const Kvdist__V1__PeerDomainReady *)msg;
        Domain *dom = domain_for_notice(userdata, p, m->dst_domain_id, m->src_domain_id, m->rank);

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

void domain_peer_handle_leave(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainLeave *m = (const Kvdist__V1__PeerDomainLeave *)msg;
        Domain *dom = domain_for_notice(userdata, p, m->dst_domain_id, m->src_domain_id, m->rank);
        const DomainRank *r;

        if (!dom) {
                p->root->counters.peer_requests_refused++;
                return;
        }
        r = &dom->ranks[m->rank];
        domain_fail(dom, m->status ? status_wire_decode(m->status->code) : STATUS_FAILED, false,
                    "rank %" PRIu32 " (cluster %" PRIu64 " at %s) left: %.160s", m->rank,
                    r->cluster_id, r->address,
                    m->status && m->status->detail ? m->status->detail : "");
}
