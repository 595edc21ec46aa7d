/* SPDX-License-Identifier: MIT */
/*
 * Comm domains on the wire: the one place where the domain peer messages (PeerDomainJoin,
 * PeerDomainLinked, PeerDomainReady, PeerDomainLeave, PeerDomainXfer) and the answers to the
 * pair links' PeerLink meet protobuf. Frames that come in are decoded into the plain messages of
 * domain-internal.h and handed to the state machines; what the state machines send goes out
 * through domain_codec_ops, which a unit test replaces with a recorder.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/macro.h"
#include "common/status.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer.h"
#include "proto/frame.h"
#include "proto/kvdist.pb-c.h"
#include "proto/status-wire.h"

/* A peer's grant of a pair link, kept until the link is made from it. */
struct DomainLinkOffer {
        LinkGrant *grant;
};

/* ---- what comes in ---- */

static void codec_on_join(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainJoin *m = (const Kvdist__V1__PeerDomainJoin *)msg;
        DomainJoinMsg j = {
                .comm_name = m->comm_name,
                .digest = m->digest.data,
                .digest_len = m->digest.len,
                .n_members = m->n_members,
                .src_rank = m->src_rank,
                .dst_rank = m->dst_rank,
                .src_domain_id = m->src_domain_id,
        };

        /* More members than a domain has only ever count (the member lists differ). */
        for (size_t i = 0; i < MIN(m->n_members, (size_t)DOMAIN_MAX_RANKS); i++)
                j.members[i] = (DomainMemberMsg){
                        .rank = m->members[i]->rank,
                        .cluster_id = m->members[i]->cluster_id,
                        .address = m->members[i]->address,
                        .device_id = m->members[i]->device_id,
                        .server_id = m->members[i]->server_id,
                };
        domain_peer_on_join(userdata, p, request_id, &j);
}

static void codec_on_linked(void *userdata, Peer *p, uint64_t request_id,
                            const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainLinked *m = (const Kvdist__V1__PeerDomainLinked *)msg;

        domain_peer_on_linked(userdata, p,
                              &(DomainLinkedMsg){
                                      .dst_domain_id = m->dst_domain_id,
                                      .src_domain_id = m->src_domain_id,
                                      .src_rank = m->src_rank,
                                      .dst_rank = m->dst_rank,
                                      .direct = m->direct,
                              });
}

static void codec_on_ready(void *userdata, Peer *p, uint64_t request_id,
                           const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainReady *m = (const Kvdist__V1__PeerDomainReady *)msg;

        domain_peer_on_ready(userdata, p,
                             &(DomainReadyMsg){
                                     .dst_domain_id = m->dst_domain_id,
                                     .src_domain_id = m->src_domain_id,
                                     .rank = m->rank,
                             });
}

/* The status a peer's message carries; one without says nothing of why: FAILED. */
static int codec_status(const Kvdist__V1__Status *st)
{
        return st ? status_wire_decode(st->code) : STATUS_FAILED;
}

static const char *codec_detail(const Kvdist__V1__Status *st)
{
        return st && st->detail ? st->detail : "";
}

static void codec_on_leave(void *userdata, Peer *p, uint64_t request_id,
                           const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainLeave *m = (const Kvdist__V1__PeerDomainLeave *)msg;

        domain_peer_on_leave(userdata, p,
                             &(DomainLeaveMsg){
                                     .dst_domain_id = m->dst_domain_id,
                                     .src_domain_id = m->src_domain_id,
                                     .rank = m->rank,
                                     .status = codec_status(m->status),
                                     .detail = codec_detail(m->status),
                             });
}

static void codec_on_xfer(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerDomainXfer *m = (const Kvdist__V1__PeerDomainXfer *)msg;
        size_t n = m->n_descs;
        OpDesc desc;
        DomainXferMsg x = {
                .dst_domain_id = m->dst_domain_id,
                .src_domain_id = m->src_domain_id,
                .kind = m->kind,
                .src_rank = m->src_rank,
                .dst_rank = m->dst_rank,
                .seq = m->seq,
                .status = codec_status(m->status),
                .detail = codec_detail(m->status),
        };

        if (m->desc) {
                desc = (OpDesc){
                        .op = m->desc->op,
                        .bytes = m->desc->bytes,
                        .count = m->desc->count,
                        .dtype = m->desc->dtype,
                        .algorithm = m->desc->algorithm,
                        .root = m->desc->root,
                        .part = m->desc->part,
                        .chunk = m->desc->chunk,
                        .n_chunks = m->desc->n_chunks,
                        .num_tensors = m->desc->num_tensors,
                        .block_bytes = m->desc->block_bytes,
                        .n_blocks = m->desc->n_blocks,
                };
                x.desc = &desc;
        }
        if (n > 0) {
                /* Only a READY names where writes land, one descriptor per segment: opaque
                 * here, unpacked by the sender's transport (a longer one than any descriptor
                 * keeps only its length, and is refused there). */
                if (m->kind != XFER_READY || n > LANE_DIRECT_MAX_SEGS)
                        goto refuse;
                x.descs = calloc(n, sizeof(*x.descs));
                if (!x.descs)
                        goto refuse;
                for (size_t i = 0; i < n; i++) {
                        x.descs[i].len = m->descs[i].len;
                        if (m->descs[i].len <= sizeof(x.descs[i].bytes) && m->descs[i].len > 0)
                                memcpy(x.descs[i].bytes, m->descs[i].data, m->descs[i].len);
                }
                x.n_descs = n;
                x.direct = true;
        }
        domain_lane_on_xfer(userdata, p, &x);
        return;
refuse:
        p->root->counters.peer_requests_refused++;
}

/* What domain/ handles of what peers send: members joining, linking, leaving; lane words. */
static const PeerHandler codec_handlers[] = {
        {KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, codec_on_join},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LINKED, codec_on_linked},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_READY, codec_on_ready},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LEAVE, codec_on_leave},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_XFER, codec_on_xfer},
};

void domain_codec_register(DomainRegistry *reg)
{
        peer_handlers_register(reg->roots.link, codec_handlers, ARRAY_SIZE(codec_handlers), reg);
}

/* ---- what goes out ---- */

static void codec_join_on_reply(Peer *p, int status, const Error *err,
                                const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerDomainJoinReply *m = (const Kvdist__V1__PeerDomainJoinReply *)reply;
        DomainJoinAnswer a = {0};

        if (status == STATUS_OK)
                a = (DomainJoinAnswer){.joined = m->joined, .dst_domain_id = m->dst_domain_id};
        domain_join_on_reply(userdata, p, status, err, status == STATUS_OK ? &a : NULL);
}

static int codec_join_ask(Peer *p, const DomainJoinMsg *j, DomainPair *pair, PeerCall **ret_call)
{
        Kvdist__V1__PeerDomainJoin m = KVDIST__V1__PEER_DOMAIN_JOIN__INIT;
        Kvdist__V1__DomainMember mem[DOMAIN_MAX_RANKS], *ptrs[DOMAIN_MAX_RANKS];

        assert(j->n_members <= DOMAIN_MAX_RANKS);
        for (size_t i = 0; i < j->n_members; i++) {
                kvdist__v1__domain_member__init(&mem[i]);
                mem[i].rank = j->members[i].rank;
                mem[i].cluster_id = j->members[i].cluster_id;
                mem[i].address = (char *)j->members[i].address;
                mem[i].device_id = j->members[i].device_id;
                mem[i].server_id = (char *)j->members[i].server_id;
                ptrs[i] = &mem[i];
        }
        m.comm_name = (char *)j->comm_name;
        m.digest.data = (uint8_t *)j->digest;
        m.digest.len = j->digest_len;
        m.n_members = j->n_members;
        m.members = ptrs;
        m.src_rank = j->src_rank;
        m.dst_rank = j->dst_rank;
        m.src_domain_id = j->src_domain_id;
        return peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, &m.base,
                         codec_join_on_reply, pair, ret_call);
}

static void codec_join_on_orphan_reply(Peer *p, int status, const Error *err,
                                       const ProtobufCMessage *reply, void *userdata)
{
}

static void codec_join_forget(PeerCall *call)
{
        peer_call_redirect(call, codec_join_on_orphan_reply, NULL);
}

static void codec_join_answer(Peer *p, uint64_t request_id, const DomainJoinAnswer *a)
{
        Kvdist__V1__PeerDomainJoinReply reply = KVDIST__V1__PEER_DOMAIN_JOIN_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;

        reply.status = &status;
        reply.joined = a->joined;
        reply.dst_domain_id = a->dst_domain_id;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id, &reply.base);
}

static void codec_join_refuse(Peer *p, uint64_t request_id, const Error *err)
{
        (void)peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, request_id, err->code,
                               err);
}

static int codec_linked(Peer *p, const DomainLinkedMsg *l)
{
        Kvdist__V1__PeerDomainLinked m = KVDIST__V1__PEER_DOMAIN_LINKED__INIT;

        m.dst_domain_id = l->dst_domain_id;
        m.src_domain_id = l->src_domain_id;
        m.src_rank = l->src_rank;
        m.dst_rank = l->dst_rank;
        m.direct = l->direct;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LINKED, &m.base);
}

static int codec_ready(Peer *p, const DomainReadyMsg *r)
{
        Kvdist__V1__PeerDomainReady m = KVDIST__V1__PEER_DOMAIN_READY__INIT;

        m.dst_domain_id = r->dst_domain_id;
        m.src_domain_id = r->src_domain_id;
        m.rank = r->rank;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_READY, &m.base);
}

static int codec_leave(Peer *p, const DomainLeaveMsg *l)
{
        Kvdist__V1__PeerDomainLeave m = KVDIST__V1__PEER_DOMAIN_LEAVE__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        st.code = status_wire_encode(l->status);
        st.detail = (char *)l->detail;
        m.dst_domain_id = l->dst_domain_id;
        m.src_domain_id = l->src_domain_id;
        m.rank = l->rank;
        m.status = &st;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LEAVE, &m.base);
}

static int codec_xfer(Peer *p, const DomainXferMsg *x)
{
        Kvdist__V1__PeerDomainXfer m = KVDIST__V1__PEER_DOMAIN_XFER__INIT;
        Kvdist__V1__DomainOpDesc d = KVDIST__V1__DOMAIN_OP_DESC__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ ProtobufCBinaryData *descs = NULL;

        m.dst_domain_id = x->dst_domain_id;
        m.src_domain_id = x->src_domain_id;
        m.kind = x->kind;
        m.src_rank = x->src_rank;
        m.dst_rank = x->dst_rank;
        m.seq = x->seq;
        if (x->desc) {
                d.op = x->desc->op;
                d.bytes = x->desc->bytes;
                d.count = x->desc->count;
                d.dtype = x->desc->dtype;
                d.algorithm = x->desc->algorithm;
                d.root = x->desc->root;
                d.part = x->desc->part;
                d.chunk = x->desc->chunk;
                d.n_chunks = x->desc->n_chunks;
                d.num_tensors = x->desc->num_tensors;
                d.block_bytes = x->desc->block_bytes;
                d.n_blocks = x->desc->n_blocks;
                m.desc = &d;
        }
        st.code = status_wire_encode(x->status);
        st.detail = (char *)x->detail;
        m.status = &st;
        if (x->direct) {
                size_t n = x->n_descs;

                descs = calloc(n ? n : 1, sizeof(*descs));
                if (!descs)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++)
                        descs[i] = (ProtobufCBinaryData){
                                .len = MIN(x->descs[i].len, sizeof(x->descs[i].bytes)),
                                .data = (uint8_t *)x->descs[i].bytes,
                        };
                m.descs = descs;
                m.n_descs = n;
        }
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_XFER, &m.base);
}

/* ---- pair links ---- */

static void codec_offer_free(DomainLinkOffer *o)
{
        if (!o)
                return;
        link_grant_free(o->grant);
        free(o);
}

static void codec_link_on_reply(Peer *p, int status, const Error *err, LinkGrant *g, void *userdata)
{
        DomainLinkOffer *o = NULL;

        if (status == STATUS_OK) {
                o = malloc(sizeof(*o));
                if (o)
                        o->grant = g;
                else
                        link_grant_free(g);
        }
        domain_pair_link_on_reply(userdata, p, status, err, o);
}

static int codec_link_ask(PairLink *pl, Cluster *c, Peer *p, PeerCall **ret_call)
{
        return link_peer_request(c, p, pl->remote_cluster_id, pl->transport.channel,
                                 codec_link_on_reply, pl, ret_call);
}

/* The peer may grant the link after its last domain went: it goes back then, unless a link of
 * the same pair was made meanwhile (the peer's inbound link is that one's now). */
static void codec_link_forget(PairLink *pl)
{
        link_peer_abandon(pl->reg->roots.link, pl->call, pl->local_cluster_id,
                          pl->remote_cluster_id, true);
}

static void codec_link_connect(PairLink *pl, Peer *p)
{
        link_transport_connect(&pl->transport, p, pl->remote_cluster_id, pl->exposed->grant,
                               domain_pair_link_on_transport, pl);
}

/* Gives back the link the peer granted (and we will not make). */
static void codec_link_give_back(PairLink *pl)
{
        if (!pl->exposed)
                return;
        link_give_back(pl->reg->roots.link, pl->peer, pl->local_cluster_id, pl->remote_cluster_id,
                       pl->exposed->grant->link_id);
}

static int codec_link_make(PairLink *pl, Cluster *c, const char *reason, Link **ret, Error *err)
{
        int r;

        r = link_make_remote(c, pl->peer, pl->remote_cluster_id, pl->exposed->grant, pl->channel,
                             reason, ret, err);
        if (r >= 0)
                pl->exposed->grant = NULL; /* the link's now */
        return r;
}

const DomainPeerOps domain_codec_ops = {
        .dial = peer_get,
        .when_ready = peer_when_ready,
        .waiter_cancel = peer_waiter_cancel,
        .join_ask = codec_join_ask,
        .join_forget = codec_join_forget,
        .join_answer = codec_join_answer,
        .join_refuse = codec_join_refuse,
        .linked = codec_linked,
        .ready = codec_ready,
        .leave = codec_leave,
        .xfer = codec_xfer,
        .channel_ready = peer_channel_when_ready,
        .channel_waiter_cancel = peer_channel_waiter_cancel,
        .channel_repair = peer_channel_repair,
        .link_ask = codec_link_ask,
        .link_forget = codec_link_forget,
        .link_connect = codec_link_connect,
        .link_give_back = codec_link_give_back,
        .link_make = codec_link_make,
        .offer_free = codec_offer_free,
};
