/* SPDX-License-Identifier: MIT */
/* Link: a connection a local cluster made to a remote cluster, used both ways. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"

/* A new UP link of @local to @remote_cluster_id, on every list but the remote end's. */
static Link *link_alloc(LinkRoot *root, Cluster *local, uint64_t remote_cluster_id,
                        Transport *transport)
{
        Link *l;

        l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->root = root;
        l->id = id_source_next(root->ids);
        l->seq = id_source_next_seq(root->ids);
        l->state = LINK_UP;
        l->local = local;
        l->remote_cluster_id = remote_cluster_id;
        l->transport = transport;
        l->created_usec = now_usec(CLOCK_MONOTONIC);
        clist_init(&l->transfers);
        clist_init(&l->served);
        clist_init(&l->link_remote);
        clist_init(&l->link_peer);
        clist_link_tail(&local->links, &l->link_local);
        local->n_links++;
        clist_link_tail(&root->links, &l->link_daemon);
        root->n_links++;
        return l;
}

Transport *link_channel_transport(const LinkRoot *root)
{
        return transport_set_get(root->transports, TRANSPORT_ROLE_DIRECT);
}

int link_new_local(LinkRoot *root, Cluster *local, Cluster *remote, Transport *transport,
                   Link **ret)
{
        Link *l;

        l = link_alloc(root, local, remote->id, transport);
        if (!l)
                return -ENOMEM;
        l->remote = remote;
        l->remote_role = remote->role;
        clist_link_tail(&remote->links_in, &l->link_remote);
        remote->n_links_in++;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): up over %s", l->id,
                 local->id, remote->id, transport_name(transport));
        link_root_changed(root);
        *ret = l;
        return 0;
}

int link_new_remote(LinkRoot *root, Cluster *local, Peer *peer, uint64_t remote_cluster_id,
                    LinkGrant *exposed, Transport *transport, Link **ret)
{
        Link *l;

        l = link_alloc(root, local, remote_cluster_id, transport);
        if (!l)
                return -ENOMEM;
        l->peer = peer;
        l->remote_link_id = exposed->link_id;
        l->remote_role = exposed->role;
        l->exposed = exposed;
        (void)snprintf(l->peer_address, sizeof(l->peer_address), "%s",
                       peer->address[0] ? peer->address : peer->remote);
        clist_link_tail(&peer->links, &l->link_peer);
        peer->n_links++;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 " at %s): up over %s, %zu "
                 "caches exposed",
                 l->id, local->id, remote_cluster_id, l->peer_address, transport_name(transport),
                 exposed->n_caches);
        link_root_changed(root);
        *ret = l;
        return 0;
}

/* Tells the listeners (transfer/ fails every transfer in flight on @l) that @l is down. */
static void link_fail_transfers(Link *l, int status)
{
        hook_list_emit(&l->root->events, LinkEvents, link_down, l, status);
}

void link_events_listen(LinkRoot *root, Hook *h, const LinkEvents *events, void *userdata)
{
        hook_list_append(&root->events, h, events, userdata);
}

int link_explain_no_link(Cluster *c, uint64_t remote_cluster_id, Error *err)
{
        Hook *h;

        CLIST_FOREACH (h, &c->root->events.hooks, link) {
                const LinkEvents *e = h->events;
                int r;

                if (!e->explain_no_link)
                        continue;
                r = e->explain_no_link(h->userdata, c, remote_cluster_id, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

bool link_linking_elsewhere(const Cluster *c, uint64_t remote_cluster_id)
{
        Hook *h;

        CLIST_FOREACH (h, &c->root->events.hooks, link) {
                const LinkEvents *e = h->events;

                if (e->linking && e->linking(h->userdata, c, remote_cluster_id))
                        return true;
        }
        return false;
}

/* Leaves the remote cluster's list of incoming links, or the peer's list of links. */
static void link_detach_remote(Link *l)
{
        if (l->remote) {
                clist_unlink(&l->link_remote);
                l->remote->n_links_in--;
                l->remote = NULL;
        }
        if (l->peer) {
                clist_unlink(&l->link_peer);
                l->peer->n_links--;
                l->peer = NULL;
        }
}

static void link_set_state_full(Link *l, LinkState state, int status, const char *why)
{
        assert(state >= 0 && state < _LINK_STATE_MAX);
        /* A down link never comes back: re-linking replaces it. */
        assert(!(l->state == LINK_DOWN && state == LINK_UP));

        if (l->state == state)
                return;
        l->state = state;
        if (state == LINK_DOWN) {
                l->down_status = status;
                log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "%s%s): down (%s)",
                         l->id, l->local->id, l->remote_cluster_id, l->peer ? " at " : "",
                         l->peer ? l->peer_address : "", why ?: status_wire_name(status));
                link_fail_transfers(l, status);
                link_detach_remote(l);
        }
}

void link_set_state(Link *l, LinkState state, int status)
{
        link_set_state_full(l, state, status, NULL);
}

void link_set_down(Link *l, int status, const char *why)
{
        link_set_state_full(l, LINK_DOWN, status, why);
}

Link *link_free_full(Link *l, int status, bool notify_peer)
{
        if (!l)
                return NULL;
        link_fail_transfers(l, status);
        if (notify_peer && l->peer && l->state == LINK_UP) {
                LinkPeerUnlink u = {
                        .src_cluster_id = l->local->id,
                        .dst_cluster_id = l->remote_cluster_id,
                        .link_id = l->remote_link_id, /* the peer's id of its inbound link */
                };

                (void)l->root->peer_ops->unlink(l->peer, &u);
        }
        link_detach_remote(l);
        clist_unlink(&l->link_local);
        l->local->n_links--;
        clist_unlink(&l->link_daemon);
        l->root->n_links--;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): removed", l->id,
                 l->local->id, l->remote_cluster_id);
        link_root_changed(l->root);
        link_grant_free(l->exposed);
        free(l);
        return NULL;
}

Link *link_free(Link *l, int status)
{
        return link_free_full(l, status, true);
}

int link_inlink_new(LinkRoot *root, Peer *peer, Cluster *local, uint64_t remote_cluster_id,
                    int remote_role, InLink **ret)
{
        InLink *il;

        il = calloc(1, sizeof(*il));
        if (!il)
                return -ENOMEM;
        il->root = root;
        il->id = id_source_next(root->ids);
        il->seq = id_source_next_seq(root->ids);
        il->peer = peer;
        il->local = local;
        il->remote_cluster_id = remote_cluster_id;
        il->remote_role = remote_role;
        il->created_usec = now_usec(CLOCK_MONOTONIC);
        clist_init(&il->served);
        clist_init(&il->transfers);
        clist_link_tail(&peer->inlinks, &il->link_peer);
        peer->n_inlinks++;
        clist_link_tail(&local->inlinks, &il->link_cluster);
        local->n_inlinks++;
        clist_link_tail(&root->inlinks, &il->link_daemon);
        root->n_inlinks++;
        log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " at %s -> %" PRIu64 "): up", il->id,
                 remote_cluster_id, peer->address[0] ? peer->address : peer->remote, local->id);
        link_root_changed(root);
        *ret = il;
        return 0;
}

InLink *link_inlink_free(InLink *il, int status, const char *why)
{
        if (!il)
                return NULL;
        peer_channel_waiter_cancel(il->channel_waiter);
        /* transfer/ fails the peer's transfers it serves over @il. */
        hook_list_emit(&il->root->events, LinkEvents, inlink_gone, il, status);
        clist_unlink(&il->link_peer);
        il->peer->n_inlinks--;
        clist_unlink(&il->link_cluster);
        il->local->n_inlinks--;
        clist_unlink(&il->link_daemon);
        il->root->n_inlinks--;
        log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): removed (%s)",
                 il->id, il->remote_cluster_id, il->local->id, why ?: status_wire_name(status));
        link_root_changed(il->root);
        free(il);
        return NULL;
}

InLink *link_inlink_find(Peer *peer, uint64_t remote_cluster_id, const Cluster *local)
{
        InLink *il;

        CLIST_FOREACH (il, &peer->inlinks, link_peer)
                if (il->remote_cluster_id == remote_cluster_id && il->local == local)
                        return il;
        return NULL;
}

InLink *link_inlink_find_id(Peer *peer, uint64_t id)
{
        InLink *il;

        CLIST_FOREACH (il, &peer->inlinks, link_peer)
                if (il->id == id)
                        return il;
        return NULL;
}

int link_check_target(const Cluster *target, Error *err)
{
        if (cluster_accepts_links(target))
                return 0;
        return error_set(err, STATUS_LINK_FAILED,
                         "cluster %" PRIu64 " is a client: it attached without listen_ip_info, "
                         "so it accepts no links (kvd_switch_role() with listen_ip_info makes "
                         "it a server)",
                         target->id);
}

Link *link_find(Cluster *local, uint64_t remote_cluster_id)
{
        Link *l;

        CLIST_FOREACH (l, &local->links, link_local)
                if (l->remote_cluster_id == remote_cluster_id)
                        return l;
        return NULL;
}

Link *link_find_in(Cluster *c, uint64_t linking_cluster_id)
{
        Link *l;

        CLIST_FOREACH (l, &c->links_in, link_remote)
                if (l->local->id == linking_cluster_id && l->state == LINK_UP)
                        return l;
        return NULL;
}

InLink *link_inlink_find_cluster(Cluster *c, uint64_t remote_cluster_id)
{
        InLink *il;

        CLIST_FOREACH (il, &c->inlinks, link_cluster)
                if (il->remote_cluster_id == remote_cluster_id)
                        return il;
        return NULL;
}

Link *link_find_granted(Peer *p, uint64_t remote_link_id)
{
        Link *l;

        CLIST_FOREACH (l, &p->links, link_peer)
                if (l->remote_link_id == remote_link_id && l->state == LINK_UP)
                        return l;
        return NULL;
}

const char *link_state_to_string(LinkState s)
{
        switch (s) {
        case LINK_UP:
                return "up";
        case LINK_DOWN:
                return "down";
        default:
                return "invalid";
        }
}

LinkGrant *link_grant_free(LinkGrant *g)
{
        if (!g)
                return NULL;
        for (size_t i = 0; i < g->n_caches; i++) {
                LinkExposedCache *e = &g->caches[i];

                free(e->shape);
                free(e->keys);
                free(e->key_slots);
                free(e->descs);
        }
        free(g->caches);
        free(g->device_reason);
        free(g);
        return NULL;
}

int link_grant_check(Transport *direct, const LinkGrant *g, Error *err)
{
        bool unpack = transport_caps(direct)->remote_access;

        for (size_t i = 0; i < g->n_caches; i++) {
                const LinkExposedCache *e = &g->caches[i];

                if (e->n_descs != 0 && e->n_descs != e->num_tensors)
                        return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                         "the peer sent %zu descriptors for its cache %" PRIu64
                                         " of %" PRIu32 " tensors",
                                         e->n_descs, e->cache_id, e->num_tensors);
                for (size_t k = 0; k < e->n_descs; k++) {
                        TransportRemote m;

                        if (e->descs[k].len == 0 ||
                            (unpack && (transport_desc_unpack(direct, e->descs[k].bytes,
                                                              e->descs[k].len, &m) < 0 ||
                                        m.len < e->tensor_size)))
                                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                                 "the peer's descriptor of tensor %zu of its "
                                                 "cache %" PRIu64 " (%zu bytes) does not describe "
                                                 "the tensor to transport %s",
                                                 k, e->cache_id, e->descs[k].len,
                                                 transport_name(direct));
                }
        }
        return 0;
}

void link_give_back(LinkRoot *root, Peer *p, uint64_t src_cluster_id, uint64_t dst_cluster_id,
                    uint64_t link_id)
{
        LinkPeerUnlink u = {
                .src_cluster_id = src_cluster_id,
                .dst_cluster_id = dst_cluster_id,
                .link_id = link_id,
        };

        if (p && p->state == PEER_READY)
                (void)root->peer_ops->unlink(p, &u);
}

static void link_exposed_add_key(const CacheKey *key, uint32_t index, void *userdata)
{
        LinkExposedCache *e = userdata;

        e->keys[e->n_keys] = *key;
        e->key_slots[e->n_keys] = index;
        e->n_keys++;
}

int link_exposed_cache_alloc(LinkExposedCache *e, size_t n_shape, size_t n_descs, size_t n_keys)
{
        if (n_shape > 0) {
                e->shape = calloc(n_shape, sizeof(*e->shape));
                if (!e->shape)
                        return -ENOMEM;
                e->n_shape = n_shape;
        }
        if (n_descs > 0) {
                e->descs = calloc(n_descs, sizeof(*e->descs));
                if (!e->descs)
                        return -ENOMEM;
                e->n_descs = n_descs;
        }
        if (n_keys > 0) {
                e->keys = calloc(n_keys, sizeof(*e->keys));
                e->key_slots = calloc(n_keys, sizeof(*e->key_slots));
                if (!e->keys || !e->key_slots)
                        return -ENOMEM;
        }
        return 0;
}

/*
 * Describes one cache that a link reaches into @e: with the descriptors of its tensors when
 * @direct (the transport of peers' one-sided access, NULL when none) reaches it.
 */
static int link_exposed_fill(Transport *direct, const CacheTable *t, const Cache *cache,
                             LinkExposedCache *e)
{
        bool reachable = transport_caps(direct)->remote_access &&
                         transport_cache_registered(direct, cache, true);
        int r;

        r = link_exposed_cache_alloc(e, cache->desc.n_dims, reachable ? cache->desc.num_tensors : 0,
                                     cache_table_count_keys(t, cache));
        if (r < 0)
                return r;
        e->cache_id = cache->id;
        e->blocks = cache->kind == CACHE_BLOCKS;
        e->tensor_size = cache->tensor_size;
        e->num_tensors = cache->desc.num_tensors;
        e->data_type = cache->desc.data_type;
        if (e->n_shape > 0)
                memcpy(e->shape, cache->desc.shape, e->n_shape * sizeof(*e->shape));
        for (size_t k = 0; k < e->n_descs; k++)
                if (transport_cache_desc(direct, cache, (uint32_t)k, &e->descs[k]) < 0) {
                        /* Not reachable after all: described without descriptors. */
                        free(e->descs);
                        e->descs = NULL;
                        e->n_descs = 0;
                        break;
                }
        if (e->keys)
                cache_table_foreach_key(t, cache, link_exposed_add_key, e);
        return 0;
}

/* The caches of @c that a link made at @seq reaches: registered before it, remote-accessible. */
static int link_exposed_build(const Cluster *c, uint64_t seq, LinkGrant *g)
{
        const CacheTable *t = &c->caches;
        Cache *cache;
        size_t n = 0;
        int r;

        CLIST_FOREACH (cache, &t->caches, link_table)
                if (cache->seq <= seq && cache->remote_accessible)
                        n++;
        if (n == 0)
                return 0;
        g->caches = calloc(n, sizeof(*g->caches));
        if (!g->caches)
                return -ENOMEM;
        CLIST_FOREACH (cache, &t->caches, link_table) {
                if (cache->seq > seq || !cache->remote_accessible)
                        continue;
                r = link_exposed_fill(transport_set_get(c->root->transports, TRANSPORT_ROLE_DIRECT),
                                      t, cache, &g->caches[g->n_caches++]);
                if (r < 0)
                        return r;
        }
        return 0;
}

int link_inlink_accept(LinkRoot *root, Peer *p, const LinkPeerAsk *ask, InLink **ret_il,
                       LinkGrant **ret_grant, Error *err)
{
        LinkGrant *g = NULL;
        const char *why = NULL;
        TransportDeviceInfo dev;
        InLink *il;
        Cluster *c;
        int r;

        c = link_root_find_cluster(root, ask->dst_cluster_id);
        if (!c)
                return error_set(err, STATUS_LINK_FAILED,
                                 "no cluster %" PRIu64 " is attached to the daemon at %s",
                                 ask->dst_cluster_id, link_root_peer_address(root));
        /* A comm domain's pair link needs no server: every member called kvd_link. */
        if (!ask->domain) {
                r = link_check_target(c, err);
                if (r < 0)
                        return r;
        }
        if (link_root_find_cluster(root, ask->src_cluster_id))
                return error_set(err, STATUS_LINK_FAILED,
                                 "cluster id %" PRIu64 " is attached to both daemons; cluster "
                                 "ids must be unique",
                                 ask->src_cluster_id);
        /* A link made again replaces the old one (the peer forgot it: a restart, a force). */
        il = link_inlink_find(p, ask->src_cluster_id, c);
        if (il)
                link_inlink_free(il, STATUS_PEER_LOST, "replaced by a new link");
        if (c->n_inlinks >= root->options.limits->max_links_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u inbound links "
                                 "(limits.max_links_per_client)",
                                 c->id, c->n_inlinks);
        r = link_inlink_new(root, p, c, ask->src_cluster_id, ask->src_role, &il);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        g = calloc(1, sizeof(*g));
        if (!g || link_exposed_build(c, il->seq, g) < 0) {
                link_grant_free(g);
                link_inlink_free(il, STATUS_OUT_OF_MEMORY, NULL);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        g->link_id = il->id;
        g->role = c->role;
        il->domain = ask->domain;
        /* The linked cluster's device, for the peer to open a channel to. */
        if (transport_device_info(link_channel_transport(root), c->device_id, NULL, &dev, &why) >=
            0) {
                g->device = dev;
                g->has_device = true;
                /* What the link runs over unless the channel fails to connect. */
                il->over_channel = ask->channel;
                /* Our own transfers over it: a channel of ours to the asking device. */
                if (il->over_channel && ask->has_src_device) {
                        il->has_peer_device = true;
                        il->peer_device = ask->src_device;
                        (void)snprintf(il->device, sizeof(il->device), "%s",
                                       transport_device_name(&dev));
                }
        } else if (why) {
                g->device_reason = strdup(why);
                if (!g->device_reason) {
                        link_grant_free(g);
                        link_inlink_free(il, STATUS_OUT_OF_MEMORY, NULL);
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                }
        }
        *ret_il = il;
        *ret_grant = g;
        return 0;
}

static void link_inlink_on_channel(TransportChannel *ch, int status, const char *reason,
                                   void *userdata)
{
        InLink *il = userdata;
        const char *name = transport_name(link_channel_transport(il->root));

        il->channel_waiter = NULL;
        il->channel = status < 0 ? NULL : ch;
        if (il->channel)
                log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64
                         "): cluster %" PRIu64 "'s own transfers over it go over %s (%s)",
                         il->id, il->remote_cluster_id, il->local->id, il->local->id, name,
                         il->device);
        else
                log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64
                         "): cluster %" PRIu64 "'s own transfers over it go over TCP: the %s "
                         "channel did not connect: %s",
                         il->id, il->remote_cluster_id, il->local->id, il->local->id, name,
                         reason ?: strerror(-status));
}

/*
 * Channels to one peer past which the linked side's own transfers stay on TCP: the peer names
 * the device they connect to, and channels live as long as the peer.
 */
#define LINK_PEER_CHANNELS_MAX 32

void link_inlink_connect(InLink *il)
{
        const char *name = transport_name(link_channel_transport(il->root));
        int r;

        if (!il->over_channel)
                return;
        if (clist_length(&il->peer->channels) >= LINK_PEER_CHANNELS_MAX) {
                log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64
                         "): cluster %" PRIu64 "'s own transfers over it go over TCP: %zu %s "
                         "channels to this peer already",
                         il->id, il->remote_cluster_id, il->local->id, il->local->id,
                         clist_length(&il->peer->channels), name);
                return;
        }
        if (!il->has_peer_device) {
                log_info("inbound link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64
                         "): cluster %" PRIu64 "'s own transfers over it go over TCP: the peer "
                         "did not say its %s device",
                         il->id, il->remote_cluster_id, il->local->id, il->local->id, name);
                return;
        }
        r = peer_channel_get(il->peer, il->device, &il->peer_device, link_inlink_on_channel, il,
                             &il->channel_waiter);
        if (r < 0)
                link_inlink_on_channel(NULL, r, NULL, il);
}

void link_peer_unlinked(Peer *p, const LinkPeerUnlink *u)
{
        InLink *il = NULL;
        Link *l = NULL;
        char why[64];

        (void)snprintf(why, sizeof(why), "unlinked by cluster %" PRIu64, u->src_cluster_id);
        if (u->from_linked) {
                Link *i;

                /* The cluster we linked to dropped our link (kvd_unlink_clusters on its side).
                 * A loop that ends without a match leaves its cursor on the list head, not
                 * NULL: only a match is taken down. */
                CLIST_FOREACH (i, &p->links, link_peer)
                        if (i->remote_link_id == u->link_id &&
                            i->remote_cluster_id == u->src_cluster_id &&
                            i->local->id == u->dst_cluster_id) {
                                l = i;
                                break;
                        }
                if (l)
                        link_set_down(l, STATUS_NOT_YET_LINK, why);
        } else {
                il = link_inlink_find_id(p, u->link_id);
                if (il && (il->remote_cluster_id != u->src_cluster_id ||
                           il->local->id != u->dst_cluster_id))
                        il = NULL;
                if (il)
                        link_inlink_free(il, STATUS_NOT_YET_LINK, why);
        }
        if (!l && !il)
                log_debug("%s: unlink of cluster %" PRIu64 " and %" PRIu64 " names no link "
                          "(id %" PRIu64 "), ignoring",
                          peer_name(p, (char[96]){0}, 96), u->src_cluster_id, u->dst_cluster_id,
                          u->link_id);
}

void link_peer_cluster_gone(Peer *p, uint64_t cluster_id)
{
        InLink *il, *iltmp;
        Link *l, *ltmp;

        CLIST_FOREACH_SAFE (il, iltmp, &p->inlinks, link_peer)
                if (il->remote_cluster_id == cluster_id)
                        link_inlink_free(il, STATUS_PEER_LOST, "the linking cluster went away");
        CLIST_FOREACH_SAFE (l, ltmp, &p->links, link_peer)
                if (l->remote_cluster_id == cluster_id)
                        link_set_state(l, LINK_DOWN, STATUS_PEER_LOST);
}

void link_peer_lost(Peer *p, int status)
{
        InLink *il, *iltmp;
        Link *l, *ltmp;

        CLIST_FOREACH_SAFE (l, ltmp, &p->links, link_peer)
                link_set_state(l, LINK_DOWN,
                               status == STATUS_DAEMON_UNAVAILABLE ? status : STATUS_PEER_LOST);
        CLIST_FOREACH_SAFE (il, iltmp, &p->inlinks, link_peer)
                link_inlink_free(il, STATUS_PEER_LOST, "its daemon was lost");
}

void link_tell_cluster_gone(Cluster *c)
{
        LinkRoot *root = c->root;
        InLink *il;
        Link *l;
        Peer *p;

        CLIST_FOREACH (p, &root->peers, link_daemon) {
                bool involved = false;

                if (p->state != PEER_READY)
                        continue;
                CLIST_FOREACH (l, &p->links, link_peer)
                        involved = involved || l->local == c;
                CLIST_FOREACH (il, &p->inlinks, link_peer)
                        involved = involved || il->local == c;
                if (involved)
                        (void)root->peer_ops->cluster_gone(p, c->id);
        }
}

int link_unlink_inbound(Cluster *c, uint64_t remote_cluster_id, bool force)
{
        InLink *il, *tmp;
        Link *l, *ltmp;
        char why[64];
        int n = 0;

        (void)snprintf(why, sizeof(why), "unlinked by cluster %" PRIu64 "%s", c->id,
                       force ? " with force" : "");
        /* A link of this daemon has one record for both ends: it goes, with or without force. */
        CLIST_FOREACH_SAFE (l, ltmp, &c->links_in, link_remote) {
                if (l->local->id != remote_cluster_id)
                        continue;
                log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): %s", l->id,
                         l->local->id, c->id, why);
                link_free_full(l, STATUS_NOT_YET_LINK, false);
                n++;
        }
        CLIST_FOREACH_SAFE (il, tmp, &c->inlinks, link_cluster) {
                if (il->remote_cluster_id != remote_cluster_id)
                        continue;
                if (!force && il->peer->state == PEER_READY) {
                        LinkPeerUnlink u = {
                                .src_cluster_id = c->id,
                                .dst_cluster_id = remote_cluster_id,
                                .link_id = il->id,
                                .from_linked = true,
                        };

                        (void)c->root->peer_ops->unlink(il->peer, &u);
                }
                link_inlink_free(il, STATUS_NOT_YET_LINK, why);
                n++;
        }
        return n;
}
