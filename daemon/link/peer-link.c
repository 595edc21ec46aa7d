/* SPDX-License-Identifier: MIT */
/*
 * The peer codec of links: PeerLink (a peer's cluster linking to one of ours, and our asking
 * for the same), PeerUnlink and PeerClusterGone between their wire form and link/'s plain
 * structs (LinkPeerAsk, LinkGrant, LinkPeerUnlink). What they do is in link.c and
 * link-request.c; this file only decodes, encodes and sends (peer_link_ops).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer-cache-key.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer-link.h"
#include "daemon/link/peer.h"
#include "common/status.h"
#include "daemon/transport/transport-set.h"

/* A grant as wire messages, with the storage they point into. */
typedef struct GrantWire {
        Kvdist__V1__PeerLinkReply reply;
        Kvdist__V1__Status status;
        uint8_t device[TRANSPORT_PACKED_MAX];
        Kvdist__V1__RemoteCache *caches;
        Kvdist__V1__RemoteCache **ptrs;
        Kvdist__V1__CacheDesc *descs;
        Kvdist__V1__CacheKey ***keys;      /* per cache: pointers into key_storage */
        PeerCacheKeyStorage **key_storage; /* per cache */
        ProtobufCBinaryData **descs_bytes; /* per cache: its tensors' descriptors */
} GrantWire;

static void grant_wire_free(GrantWire *w, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(w->keys ? w->keys[i] : NULL);
                free(w->key_storage ? w->key_storage[i] : NULL);
                free(w->descs_bytes ? w->descs_bytes[i] : NULL);
        }
        free(w->descs_bytes);
        free(w->caches);
        free(w->ptrs);
        free(w->descs);
        free(w->keys);
        free(w->key_storage);
}

/*
 * Encodes @g into @w (pointing into @g, which must outlive it), our device packed by @t, the
 * transport of channels; -ENOMEM.
 */
static int grant_wire_build(Transport *t, const LinkGrant *g, GrantWire *w)
{
        size_t n = g->n_caches;
        int r;

        *w = (GrantWire){0};
        kvdist__v1__peer_link_reply__init(&w->reply);
        kvdist__v1__status__init(&w->status);
        w->reply.status = &w->status;
        w->reply.link_id = g->link_id;
        w->reply.dst_role = (Kvdist__V1__Role)g->role;
        r = g->has_device ? transport_device_pack(t, &g->device, w->device, sizeof(w->device))
                          : -ENODEV;
        if (r >= 0) {
                w->reply.channel.data = w->device;
                w->reply.channel.len = (size_t)r;
        } else
                /* A device that cannot be packed is one the peer cannot open a channel to. */
                w->reply.channel_reason =
                        g->has_device ? (char *)"cannot describe the device" : g->device_reason;
        if (n == 0)
                return 0;
        w->caches = calloc(n, sizeof(*w->caches));
        w->ptrs = calloc(n, sizeof(*w->ptrs));
        w->descs = calloc(n, sizeof(*w->descs));
        w->keys = calloc(n, sizeof(*w->keys));
        w->key_storage = calloc(n, sizeof(*w->key_storage));
        w->descs_bytes = calloc(n, sizeof(*w->descs_bytes));
        if (!w->caches || !w->ptrs || !w->descs || !w->keys || !w->key_storage || !w->descs_bytes)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const LinkExposedCache *e = &g->caches[i];
                Kvdist__V1__RemoteCache *rc = &w->caches[i];

                kvdist__v1__remote_cache__init(rc);
                kvdist__v1__cache_desc__init(&w->descs[i]);
                w->ptrs[i] = rc;
                rc->cache_id = e->cache_id;
                rc->blocks = e->blocks;
                rc->tensor_size = e->tensor_size;
                rc->desc = &w->descs[i];
                w->descs[i].num_tensors = e->num_tensors;
                w->descs[i].n_shape = e->n_shape;
                w->descs[i].shape = e->shape;
                w->descs[i].data_type = e->data_type;
                if (e->n_descs > 0) {
                        w->descs_bytes[i] = calloc(e->n_descs, sizeof(*w->descs_bytes[i]));
                        if (!w->descs_bytes[i])
                                return -ENOMEM;
                        for (size_t k = 0; k < e->n_descs; k++)
                                w->descs_bytes[i][k] = (ProtobufCBinaryData){
                                        .len = e->descs[k].len,
                                        .data = (uint8_t *)e->descs[k].bytes,
                                };
                        rc->descs = w->descs_bytes[i];
                        rc->n_descs = e->n_descs;
                }
                if (e->n_keys == 0)
                        continue;
                w->keys[i] = calloc(e->n_keys, sizeof(*w->keys[i]));
                w->key_storage[i] = calloc(e->n_keys, sizeof(*w->key_storage[i]));
                if (!w->keys[i] || !w->key_storage[i])
                        return -ENOMEM;
                for (size_t k = 0; k < e->n_keys; k++)
                        w->keys[i][k] = peer_cache_key_to_proto(&e->keys[k], &w->key_storage[i][k]);
                rc->keys = w->keys[i];
                rc->n_keys = e->n_keys;
                rc->key_slots = e->key_slots;
                rc->n_key_slots = e->n_keys;
        }
        w->reply.caches = w->ptrs;
        w->reply.n_caches = n;
        return 0;
}

/*
 * Decodes one cache of a peer's grant into @e; its descriptors are checked with the grant's
 * (link_grant_check()). -ENOMEM, or -EBADMSG for more descriptors than any cache has tensors
 * (refused before they cost memory), with @err set.
 */
static int exposed_cache_from_wire(const Kvdist__V1__RemoteCache *rc, LinkExposedCache *e,
                                   Error *err)
{
        size_t n_keys = MIN(rc->n_keys, rc->n_key_slots);
        size_t n_shape = rc->desc ? rc->desc->n_shape : 0;
        int r;

        if (rc->n_descs > KVD_MAX_TENSORS) {
                error_set(err, STATUS_PROTOCOL_MISMATCH,
                          "the peer sent %zu descriptors for its cache %" PRIu64
                          ", more than a cache has tensors",
                          rc->n_descs, rc->cache_id);
                return -EBADMSG;
        }
        r = link_exposed_cache_alloc(e, n_shape, rc->n_descs, n_keys);
        if (r < 0) {
                error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                return r;
        }
        e->cache_id = rc->cache_id;
        e->blocks = rc->blocks;
        e->tensor_size = rc->tensor_size;
        if (rc->desc) {
                e->num_tensors = rc->desc->num_tensors;
                e->data_type = rc->desc->data_type;
        }
        if (n_shape > 0)
                memcpy(e->shape, rc->desc->shape, n_shape * sizeof(*e->shape));
        for (size_t k = 0; k < e->n_descs; k++) {
                /* Longer than any descriptor: kept empty, which link_grant_check() refuses. */
                if (rc->descs[k].len > TRANSPORT_DESC_MAX)
                        continue;
                e->descs[k].len = rc->descs[k].len;
                if (rc->descs[k].len > 0)
                        memcpy(e->descs[k].bytes, rc->descs[k].data, rc->descs[k].len);
        }
        for (size_t k = 0; k < n_keys; k++) {
                /* A key of no kind names nothing: it is left out, as a lookup would ignore it. */
                if (peer_cache_key_from_proto(rc->keys[k], &e->keys[e->n_keys], NULL) < 0)
                        continue;
                e->key_slots[e->n_keys++] = rc->key_slots[k];
        }
        return 0;
}

/*
 * Decodes the peer's PeerLinkReply @m into a new grant, its device unpacked by @t (a device it
 * cannot unpack is none): -ENOMEM, or -EBADMSG for what no grant holds, with @err set.
 */
static int grant_from_wire(Transport *t, const Kvdist__V1__PeerLinkReply *m, LinkGrant **ret,
                           Error *err)
{
        LinkGrant *g;
        int r = -ENOMEM;

        g = calloc(1, sizeof(*g));
        if (!g)
                goto oom;
        g->link_id = m->link_id;
        g->role = m->dst_role;
        if (m->channel.len > 0 &&
            transport_device_unpack(t, m->channel.data, m->channel.len, &g->device) >= 0)
                g->has_device = true;
        if (m->channel_reason && m->channel_reason[0]) {
                g->device_reason = strdup(m->channel_reason);
                if (!g->device_reason)
                        goto oom;
        }
        if (m->n_caches > 0) {
                g->caches = calloc(m->n_caches, sizeof(*g->caches));
                if (!g->caches)
                        goto oom;
                for (size_t i = 0; i < m->n_caches; i++) {
                        g->n_caches++;
                        r = exposed_cache_from_wire(m->caches[i], &g->caches[i], err);
                        if (r < 0)
                                goto fail;
                }
        }
        *ret = g;
        return 0;
oom:
        error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
fail:
        link_grant_free(g);
        return r;
}

/* Who waits for the answer to a PeerLink we sent. */
typedef struct LinkCall {
        link_grant_fn fn;
        void *userdata;
} LinkCall;

static void peer_link_on_reply(Peer *p, int status, const Error *err, const ProtobufCMessage *reply,
                               void *userdata)
{
        LinkCall *lc = userdata;
        link_grant_fn fn = lc->fn;
        void *fn_userdata = lc->userdata;
        LinkGrant *g = NULL;
        Error e = ERROR_INIT;

        free(lc);
        /* A grant whose descriptors our transport does not read is the peer's fault: the link
         * fails with PROTOCOL_MISMATCH, before anything uses them. */
        if (status == STATUS_OK &&
            (grant_from_wire(link_channel_transport(p->root),
                             (const Kvdist__V1__PeerLinkReply *)reply, &g, &e) < 0 ||
             link_grant_check(link_channel_transport(p->root), g, &e) < 0)) {
                g = link_grant_free(g);
                status = e.code;
                err = &e;
        }
        fn(p, status, err, g, fn_userdata);
}

static int peer_link_call(Peer *p, const LinkPeerAsk *ask, link_grant_fn fn, void *userdata,
                          PeerCall **ret_call)
{
        Kvdist__V1__PeerLink m = KVDIST__V1__PEER_LINK__INIT;
        uint8_t device[TRANSPORT_PACKED_MAX];
        LinkCall *lc;
        int r;

        lc = malloc(sizeof(*lc));
        if (!lc)
                return -ENOMEM;
        *lc = (LinkCall){fn, userdata};
        m.src_cluster_id = ask->src_cluster_id;
        m.src_role = (Kvdist__V1__Role)ask->src_role;
        m.dst_cluster_id = ask->dst_cluster_id;
        m.channel = ask->channel;
        m.domain = ask->domain;
        if (ask->has_src_device) {
                r = transport_device_pack(link_channel_transport(p->root), &ask->src_device, device,
                                          sizeof(device));
                /* Not packed: the peer hears of no device, as when we have none. */
                if (r >= 0) {
                        m.src_channel.data = device;
                        m.src_channel.len = (size_t)r;
                }
        }
        r = peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, &m.base, peer_link_on_reply, lc,
                      ret_call);
        if (r < 0)
                free(lc);
        return r;
}

static void peer_link_redirect(PeerCall *call, link_grant_fn fn, void *userdata)
{
        LinkCall *lc = peer_call_userdata(call);

        *lc = (LinkCall){fn, userdata};
}

static int peer_link_unlink(Peer *p, const LinkPeerUnlink *u)
{
        Kvdist__V1__PeerUnlink m = KVDIST__V1__PEER_UNLINK__INIT;

        m.src_cluster_id = u->src_cluster_id;
        m.dst_cluster_id = u->dst_cluster_id;
        m.link_id = u->link_id;
        m.from_linked = u->from_linked;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, &m.base);
}

static int peer_link_cluster_gone(Peer *p, uint64_t cluster_id)
{
        Kvdist__V1__PeerClusterGone m = KVDIST__V1__PEER_CLUSTER_GONE__INIT;

        m.cluster_ids = &cluster_id;
        m.n_cluster_ids = 1;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_CLUSTER_GONE, &m.base);
}

const LinkPeerOps peer_link_ops = {
        .get = peer_get,
        .when_ready = peer_when_ready,
        .waiter_cancel = peer_waiter_cancel,
        .link = peer_link_call,
        .redirect = peer_link_redirect,
        .unlink = peer_link_unlink,
        .cluster_gone = peer_link_cluster_gone,
};

void peer_handle_link(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerLink *m = (const Kvdist__V1__PeerLink *)msg;
        LinkPeerAsk ask = {
                .src_cluster_id = m->src_cluster_id,
                .src_role = m->src_role,
                .dst_cluster_id = m->dst_cluster_id,
                .channel = m->channel,
                .domain = m->domain,
        };
        Transport *t = link_channel_transport(p->root);
        LinkGrant *g = NULL;
        Error err = ERROR_INIT;
        GrantWire w;
        InLink *il;
        int r;

        /* A device we cannot unpack is none: our cluster's own transfers stay on TCP. */
        if (m->channel && m->src_channel.len > 0 &&
            transport_device_unpack(t, m->src_channel.data, m->src_channel.len, &ask.src_device) >=
                    0)
                ask.has_src_device = true;
        r = link_inlink_accept(p->root, p, &ask, &il, &g, &err);
        if (r < 0)
                goto refuse;
        r = grant_wire_build(t, g, &w);
        if (r < 0) {
                grant_wire_free(&w, g->n_caches);
                link_grant_free(g);
                link_inlink_free(il, STATUS_OUT_OF_MEMORY, NULL);
                error_set(&err, STATUS_OUT_OF_MEMORY, "out of memory");
                goto refuse;
        }
        r = peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, request_id, &w.reply.base);
        grant_wire_free(&w, g->n_caches);
        link_grant_free(g);
        if (r == -EMSGSIZE) {
                /* Thousands of caches: too many to describe in one frame. */
                uint64_t cluster_id = il->local->id;

                link_inlink_free(il, STATUS_LIMIT_EXCEEDED, NULL);
                error_set(&err, STATUS_LIMIT_EXCEEDED,
                          "cluster %" PRIu64 " exposes more caches than one frame describes",
                          cluster_id);
                goto refuse;
        }
        /* Granted: our cluster's own transfers over the link get a channel of ours. */
        if (r >= 0)
                link_inlink_connect(il);
        return;
refuse:
        log_info("%s: link from cluster %" PRIu64 " to %" PRIu64 " refused: %s",
                 peer_name(p, (char[96]){0}, 96), m->src_cluster_id, m->dst_cluster_id, err.msg);
        (void)peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, request_id, err.code, &err);
}

/*
 * The peer's cluster @m->src_cluster_id tore down its link with our @m->dst_cluster_id: the one
 * named by the id the linked side gave it, so that a late notice about a link that is gone
 * (one whose set-up was abandoned) cannot take down a newer link of the same pair.
 */
void peer_handle_unlink(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerUnlink *m = (const Kvdist__V1__PeerUnlink *)msg;
        Kvdist__V1__PeerUnlinkReply reply = KVDIST__V1__PEER_UNLINK_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        LinkPeerUnlink u = {
                .src_cluster_id = m->src_cluster_id,
                .dst_cluster_id = m->dst_cluster_id,
                .link_id = m->link_id,
                .from_linked = m->from_linked,
        };

        link_peer_unlinked(p, &u);
        reply.status = &status;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, request_id, &reply.base);
}

void peer_handle_cluster_gone(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerClusterGone *m = (const Kvdist__V1__PeerClusterGone *)msg;

        for (size_t i = 0; i < m->n_cluster_ids; i++)
                link_peer_cluster_gone(p, m->cluster_ids[i]);
}
