/* SPDX-License-Identifier: MIT */
/* Link: a one-sided connection from a local cluster to a remote cluster. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link.h"
#include "common/log.h"
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
        clist_init(&l->link_remote);
        clist_init(&l->link_peer);
        clist_link_tail(&local->links, &l->link_local);
        local->n_links++;
        clist_link_tail(&root->links, &l->link_daemon);
        root->n_links++;
        return l;
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
                    Kvdist__V1__PeerLinkReply *exposed, Transport *transport, Link **ret)
{
        Link *l;

        l = link_alloc(root, local, remote_cluster_id, transport);
        if (!l)
                return -ENOMEM;
        l->peer = peer;
        l->remote_link_id = exposed->link_id;
        l->remote_role = exposed->dst_role;
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
                Kvdist__V1__PeerUnlink m = KVDIST__V1__PEER_UNLINK__INIT;

                m.src_cluster_id = l->local->id;
                m.dst_cluster_id = l->remote_cluster_id;
                m.link_id = l->remote_link_id; /* the peer's id of its inbound link */
                (void)peer_notice(l->peer, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, &m.base);
        }
        link_detach_remote(l);
        clist_unlink(&l->link_local);
        l->local->n_links--;
        clist_unlink(&l->link_daemon);
        l->root->n_links--;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): removed", l->id,
                 l->local->id, l->remote_cluster_id);
        link_root_changed(l->root);
        if (l->exposed)
                protobuf_c_message_free_unpacked(&l->exposed->base, NULL);
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
