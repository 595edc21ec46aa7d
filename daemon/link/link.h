/* SPDX-License-Identifier: MIT */
/*
 * Link: a one-sided connection from a local cluster to a remote cluster (kvd_link_clusters).
 * It names the transport that carries its transfers and the moment it was made: a remote cache
 * is reachable through a link only if it was registered before the link and is
 * remote-accessible.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "clist.h"
#include "time-util.h"

typedef struct Cluster Cluster;
typedef struct Daemon Daemon;
typedef struct Transport Transport;
typedef struct Link Link;

typedef enum LinkState {
        LINK_UP,
        LINK_DOWN,      /* the remote end went away; transfers fail, unlink to clear */
        _LINK_STATE_MAX,
        _LINK_STATE_INVALID = -22,
} LinkState;

struct Link {
        Daemon *daemon;
        uint64_t id;
        uint64_t seq;           /* caches registered later (higher seq) are not reachable */
        LinkState state;
        Cluster *local;         /* the cluster that made the link */
        uint64_t remote_cluster_id;
        Cluster *remote;        /* the remote cluster when it lives on this daemon */
        Transport *transport;
        usec_t created_usec;
        uint64_t n_transfers;   /* completed */
        uint64_t bytes;
        CList transfers;        /* Transfer.link_link, in flight */
        unsigned n_inflight;
        CList link_local;       /* on local->links */
        CList link_remote;      /* on remote->links_in */
        CList link_daemon;
};

/* Creates an UP link from @local to the cluster @remote of this daemon over @transport. */
int link_new_local(Daemon *d, Cluster *local, Cluster *remote, Transport *transport,
                   Link **ret);

/*
 * Tears the link down: transfers in flight on it are failed with @status, and it leaves both
 * clusters. Accepts NULL; returns NULL.
 */
Link *link_free(Link *l, int status);

/* Marks the link down (its remote end is gone) and fails its transfers with @status. */
void link_set_state(Link *l, LinkState state, int status);

/* The link @local made to @remote_cluster_id, or NULL. */
Link *link_find(Cluster *local, uint64_t remote_cluster_id);

const char *link_state_to_string(LinkState s);
