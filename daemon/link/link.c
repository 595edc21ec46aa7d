/* SPDX-License-Identifier: MIT */
/* Link: a one-sided connection from a local cluster to a remote cluster. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include <kvdist/kvdist.h>

#include "cluster.h"
#include "daemon.h"
#include "link.h"
#include "log.h"
#include "transfer.h"
#include "transport.h"

int link_new_local(Daemon *d, Cluster *local, Cluster *remote, Transport *transport, Link **ret)
{
        Link *l;

        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->daemon = d;
        l->id = daemon_next_id(d);
        l->seq = daemon_next_seq(d);
        l->state = LINK_UP;
        l->local = local;
        l->remote_cluster_id = remote->id;
        l->remote = remote;
        l->transport = transport;
        l->created_usec = now_usec(CLOCK_MONOTONIC);
        clist_init(&l->transfers);
        clist_link_tail(&local->links, &l->link_local);
        local->n_links++;
        clist_link_tail(&remote->links_in, &l->link_remote);
        remote->n_links_in++;
        clist_link_tail(&d->links, &l->link_daemon);
        d->n_links++;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): up over %s", l->id,
                 local->id, remote->id, transport_name(transport));
        daemon_update_status(d);
        *ret = l;
        return 0;
}

/* Fails every transfer in flight on @l with @status and forgets them. */
static void link_fail_transfers(Link *l, int status)
{
        Transfer *x, *tmp;

        CLIST_FOREACH_SAFE(x, tmp, &l->transfers, link_link)
                transfer_detach_link(x, status);
}

/* Leaves the remote cluster's list of incoming links. */
static void link_detach_remote(Link *l)
{
        if (!l->remote)
                return;
        clist_unlink(&l->link_remote);
        l->remote->n_links_in--;
        l->remote = NULL;
}

void link_set_state(Link *l, LinkState state, int status)
{
        assert(state >= 0 && state < _LINK_STATE_MAX);
        /* A down link never comes back: re-linking replaces it. */
        assert(!(l->state == LINK_DOWN && state == LINK_UP));

        if (l->state == state)
                return;
        l->state = state;
        if (state == LINK_DOWN) {
                log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): down (%s)",
                         l->id, l->local->id, l->remote_cluster_id, kvd_strerror(status));
                link_fail_transfers(l, status);
                link_detach_remote(l);
        }
}

Link *link_free(Link *l, int status)
{
        if (!l)
                return NULL;
        link_fail_transfers(l, status);
        link_detach_remote(l);
        clist_unlink(&l->link_local);
        l->local->n_links--;
        clist_unlink(&l->link_daemon);
        l->daemon->n_links--;
        log_info("link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 "): removed", l->id,
                 l->local->id, l->remote_cluster_id);
        daemon_update_status(l->daemon);
        free(l);
        return NULL;
}

Link *link_find(Cluster *local, uint64_t remote_cluster_id)
{
        Link *l;

        CLIST_FOREACH(l, &local->links, link_local)
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
