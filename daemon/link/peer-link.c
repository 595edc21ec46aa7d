/* SPDX-License-Identifier: MIT */
/*
 * Links between clusters of two daemons, as the peers see them: a peer's cluster linking to one
 * of ours (PeerLink: an InLink and the caches it may reach), either side tearing a link down
 * (PeerUnlink), clusters going away (PeerClusterGone) and the peer itself being lost.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/memory/cache-proto.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer-link.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

/* The exposed caches of one cluster as wire messages, with the storage they point into. */
typedef struct Exposed {
        size_t n;
        Kvdist__V1__RemoteCache *caches;
        Kvdist__V1__RemoteCache **ptrs;
        Kvdist__V1__CacheDesc *descs;
        Kvdist__V1__CacheKey ***keys;  /* per cache: pointers into key_storage */
        CacheKeyStorage **key_storage; /* per cache */
        uint32_t **slots;              /* per cache */
        uint64_t **rdma_addrs;         /* per cache, when registered for RDMA */
        uint32_t **rdma_rkeys;
} Exposed;

static void exposed_free(Exposed *e)
{
        for (size_t i = 0; i < e->n; i++) {
                free(e->keys ? e->keys[i] : NULL);
                free(e->key_storage ? e->key_storage[i] : NULL);
                free(e->slots ? e->slots[i] : NULL);
                free(e->rdma_addrs ? e->rdma_addrs[i] : NULL);
                free(e->rdma_rkeys ? e->rdma_rkeys[i] : NULL);
        }
        free(e->rdma_addrs);
        free(e->rdma_rkeys);
        free(e->caches);
        free(e->ptrs);
        free(e->descs);
        free(e->keys);
        free(e->key_storage);
        free(e->slots);
}

typedef struct KeyCollect {
        Kvdist__V1__RemoteCache *rc;
        CacheKeyStorage *storage;
        Kvdist__V1__CacheKey **keys;
        uint32_t *slots;
} KeyCollect;

static void exposed_add_key(const CacheKey *key, uint32_t index, void *userdata)
{
        KeyCollect *kc = userdata;
        size_t k = kc->rc->n_keys++;

        kc->keys[k] = cache_key_to_proto(key, &kc->storage[k]);
        kc->slots[k] = index;
        kc->rc->n_key_slots = kc->rc->n_keys;
}

/* Describes the caches of @c that a link made at @seq reaches. */
static int exposed_build(const Cluster *c, uint64_t seq, Exposed *e)
{
        Transport *rdma = c->root->transports->rdma_transport;
        const CacheTable *t = &c->caches;
        Cache *cache;
        size_t n = 0;

        *e = (Exposed){0};
        CLIST_FOREACH (cache, &t->caches, link_table)
                if (cache->seq <= seq && cache->remote_accessible)
                        n++;
        if (n == 0)
                return 0;
        e->caches = calloc(n, sizeof(*e->caches));
        e->ptrs = calloc(n, sizeof(*e->ptrs));
        e->descs = calloc(n, sizeof(*e->descs));
        e->keys = calloc(n, sizeof(*e->keys));
        e->key_storage = calloc(n, sizeof(*e->key_storage));
        e->slots = calloc(n, sizeof(*e->slots));
        e->rdma_addrs = calloc(n, sizeof(*e->rdma_addrs));
        e->rdma_rkeys = calloc(n, sizeof(*e->rdma_rkeys));
        if (!e->caches || !e->ptrs || !e->descs || !e->keys || !e->key_storage || !e->slots ||
            !e->rdma_addrs || !e->rdma_rkeys)
                return -ENOMEM;

        CLIST_FOREACH (cache, &t->caches, link_table) {
                Kvdist__V1__RemoteCache *rc;
                unsigned n_keys;
                KeyCollect kc;
                size_t i;

                if (cache->seq > seq || !cache->remote_accessible)
                        continue;
                i = e->n++;
                rc = &e->caches[i];
                kvdist__v1__remote_cache__init(rc);
                kvdist__v1__cache_desc__init(&e->descs[i]);
                e->ptrs[i] = rc;
                rc->cache_id = cache->id;
                rc->blocks = cache->kind == CACHE_BLOCKS;
                rc->tensor_size = cache->tensor_size;
                rc->desc = &e->descs[i];
                e->descs[i].num_tensors = cache->desc.num_tensors;
                e->descs[i].n_shape = cache->desc.n_dims;
                e->descs[i].shape = (int64_t *)cache->desc.shape;
                e->descs[i].data_type = cache->desc.data_type;

                if (transport_cache_registered(rdma, cache, true)) {
                        uint32_t nt = cache->desc.num_tensors;

                        e->rdma_addrs[i] = calloc(nt, sizeof(uint64_t));
                        e->rdma_rkeys[i] = calloc(nt, sizeof(uint32_t));
                        if (!e->rdma_addrs[i] || !e->rdma_rkeys[i])
                                return -ENOMEM;
                        for (uint32_t k = 0; k < nt; k++) {
                                TransportKey key = {0};

                                (void)transport_cache_key(rdma, cache, k, true,
                                                          &e->rdma_addrs[i][k], &key);
                                e->rdma_rkeys[i][k] = key.rkey;
                        }
                        rc->rdma_addrs = e->rdma_addrs[i];
                        rc->n_rdma_addrs = nt;
                        rc->rdma_rkeys = e->rdma_rkeys[i];
                        rc->n_rdma_rkeys = nt;
                }

                n_keys = cache_table_count_keys(t, cache);
                if (n_keys == 0)
                        continue;
                e->keys[i] = calloc(n_keys, sizeof(*e->keys[i]));
                e->key_storage[i] = calloc(n_keys, sizeof(*e->key_storage[i]));
                e->slots[i] = calloc(n_keys, sizeof(*e->slots[i]));
                if (!e->keys[i] || !e->key_storage[i] || !e->slots[i])
                        return -ENOMEM;
                kc = (KeyCollect){rc, e->key_storage[i], e->keys[i], e->slots[i]};
                rc->keys = e->keys[i];
                rc->key_slots = e->slots[i];
                cache_table_foreach_key(t, cache, exposed_add_key, &kc);
        }
        return 0;
}

void peer_handle_link(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerLink *m = (const Kvdist__V1__PeerLink *)msg;
        Kvdist__V1__PeerLinkReply reply = KVDIST__V1__PEER_LINK_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Kvdist__V1__RdmaDeviceInfo rdma = KVDIST__V1__RDMA_DEVICE_INFO__INIT;
        TransportDeviceInfo rinfo;
        LinkRoot *root = p->root;
        Exposed e = {0};
        Error err = ERROR_INIT;
        InLink *il;
        Cluster *c;
        int r;

        c = link_root_find_cluster(root, m->dst_cluster_id);
        if (!c) {
                error_set(&err, STATUS_LINK_FAILED,
                          "no cluster %" PRIu64 " is attached to the "
                          "daemon at %s",
                          m->dst_cluster_id, link_root_peer_address(root));
                goto refuse;
        }
        /* A comm domain's pair link needs no server: every member called kvd_link. */
        if (!m->domain && link_check_target(c, &err) < 0)
                goto refuse;
        if (link_root_find_cluster(root, m->src_cluster_id)) {
                error_set(&err, STATUS_LINK_FAILED,
                          "cluster id %" PRIu64 " is attached to both "
                          "daemons; cluster ids must be unique",
                          m->src_cluster_id);
                goto refuse;
        }
        /* A link made again replaces the old one (the peer forgot it: a restart, a force). */
        il = link_inlink_find(p, m->src_cluster_id, c);
        if (il)
                link_inlink_free(il, STATUS_PEER_LOST, "replaced by a new link");
        if (c->n_inlinks >= root->options.limits->max_links_per_client) {
                error_set(&err, STATUS_LIMIT_EXCEEDED,
                          "cluster %" PRIu64 " has %u inbound links "
                          "(limits.max_links_per_client)",
                          c->id, c->n_inlinks);
                goto refuse;
        }
        r = link_inlink_new(root, p, c, m->src_cluster_id, m->src_role, &il);
        if (r < 0) {
                error_set(&err, STATUS_OUT_OF_MEMORY, "out of memory");
                goto refuse;
        }
        r = exposed_build(c, il->seq, &e);
        if (r < 0) {
                link_inlink_free(il, STATUS_OUT_OF_MEMORY, NULL);
                exposed_free(&e);
                error_set(&err, STATUS_OUT_OF_MEMORY, "out of memory");
                goto refuse;
        }
        reply.status = &status;
        reply.link_id = il->id;
        reply.dst_role = (Kvdist__V1__Role)c->role;
        reply.n_caches = e.n;
        reply.caches = e.ptrs;
        /* The linked cluster's RDMA device, for the peer to connect queue pairs to. */
        {
                const char *why = NULL;

                if (transport_device_info(root->transports->rdma_transport, c->device_id, NULL,
                                          &rinfo, &why) >= 0) {
                        rdma.device = rinfo.device;
                        rdma.gid.data = rinfo.address;
                        rdma.gid.len = TRANSPORT_ADDRESS_SIZE;
                        rdma.port = rinfo.port;
                        rdma.mtu = rinfo.mtu;
                        rdma.lid = rinfo.lid;
                        reply.rdma = &rdma;
                        /* What the link runs over unless the queue pairs fail to connect. */
                        il->rdma = m->rdma;
                } else
                        reply.rdma_reason = (char *)why;
        }
        r = peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, request_id, &reply.base);
        exposed_free(&e);
        if (r == -EMSGSIZE) {
                /* Thousands of caches: too many to describe in one frame. */
                link_inlink_free(il, STATUS_LIMIT_EXCEEDED, NULL);
                error_set(&err, STATUS_LIMIT_EXCEEDED,
                          "cluster %" PRIu64 " exposes more caches "
                          "than one frame describes",
                          c->id);
                goto refuse;
        }
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
        InLink *il = NULL;
        Link *l = NULL;
        char why[64];

        (void)snprintf(why, sizeof(why), "unlinked by cluster %" PRIu64, m->src_cluster_id);
        if (m->from_linked) {
                /* The cluster we linked to dropped our link (kvd_unlink_clusters on its side). */
                CLIST_FOREACH (l, &p->links, link_peer)
                        if (l->remote_link_id == m->link_id &&
                            l->remote_cluster_id == m->src_cluster_id &&
                            l->local->id == m->dst_cluster_id)
                                break;
                if (l)
                        link_set_down(l, STATUS_NOT_YET_LINK, why);
        } else {
                il = link_inlink_find_id(p, m->link_id);
                if (il && (il->remote_cluster_id != m->src_cluster_id ||
                           il->local->id != m->dst_cluster_id))
                        il = NULL;
                if (il)
                        link_inlink_free(il, STATUS_NOT_YET_LINK, why);
        }
        if (!l && !il)
                log_debug("%s: unlink of cluster %" PRIu64 " and %" PRIu64 " names no link "
                          "(id %" PRIu64 "), ignoring",
                          peer_name(p, (char[96]){0}, 96), m->src_cluster_id, m->dst_cluster_id,
                          m->link_id);
        reply.status = &status;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, request_id, &reply.base);
}

void peer_handle_cluster_gone(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerClusterGone *m = (const Kvdist__V1__PeerClusterGone *)msg;
        InLink *il, *iltmp;
        Link *l, *ltmp;

        for (size_t i = 0; i < m->n_cluster_ids; i++) {
                CLIST_FOREACH_SAFE (il, iltmp, &p->inlinks, link_peer)
                        if (il->remote_cluster_id == m->cluster_ids[i])
                                link_inlink_free(il, STATUS_PEER_LOST,
                                                 "the linking cluster went "
                                                 "away");
                CLIST_FOREACH_SAFE (l, ltmp, &p->links, link_peer)
                        if (l->remote_cluster_id == m->cluster_ids[i])
                                link_set_state(l, LINK_DOWN, STATUS_PEER_LOST);
        }
}

void peer_link_on_lost(Peer *p, int status)
{
        InLink *il, *iltmp;
        Link *l, *ltmp;

        CLIST_FOREACH_SAFE (l, ltmp, &p->links, link_peer)
                link_set_state(l, LINK_DOWN,
                               status == STATUS_DAEMON_UNAVAILABLE ? status : STATUS_PEER_LOST);
        CLIST_FOREACH_SAFE (il, iltmp, &p->inlinks, link_peer)
                link_inlink_free(il, STATUS_PEER_LOST, "its daemon was lost");
}

void peer_link_cluster_gone(Cluster *c)
{
        LinkRoot *root = c->root;
        Kvdist__V1__PeerClusterGone m = KVDIST__V1__PEER_CLUSTER_GONE__INIT;
        uint64_t id = c->id;
        InLink *il;
        Link *l;
        Peer *p;

        m.cluster_ids = &id;
        m.n_cluster_ids = 1;
        CLIST_FOREACH (p, &root->peers, link_daemon) {
                bool involved = false;

                if (p->state != PEER_READY)
                        continue;
                CLIST_FOREACH (l, &p->links, link_peer)
                        involved = involved || l->local == c;
                CLIST_FOREACH (il, &p->inlinks, link_peer)
                        involved = involved || il->local == c;
                if (involved)
                        (void)peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_CLUSTER_GONE, &m.base);
        }
}

int peer_link_unlink_inbound(Cluster *c, uint64_t remote_cluster_id, bool force)
{
        Kvdist__V1__PeerUnlink m = KVDIST__V1__PEER_UNLINK__INIT;
        InLink *il, *tmp;
        char why[64];
        int n = 0;

        (void)snprintf(why, sizeof(why), "unlinked by cluster %" PRIu64 "%s", c->id,
                       force ? " with force" : "");
        CLIST_FOREACH_SAFE (il, tmp, &c->inlinks, link_cluster) {
                if (il->remote_cluster_id != remote_cluster_id)
                        continue;
                if (!force && il->peer->state == PEER_READY) {
                        m.src_cluster_id = c->id;
                        m.dst_cluster_id = remote_cluster_id;
                        m.link_id = il->id;
                        m.from_linked = true;
                        (void)peer_notice(il->peer, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, &m.base);
                }
                link_inlink_free(il, STATUS_NOT_YET_LINK, why);
                n++;
        }
        return n;
}
