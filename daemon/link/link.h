/* SPDX-License-Identifier: MIT */
/*
 * Link: a one-sided connection from a local cluster to a remote cluster (kvd_link_clusters).
 * It names the transport that carries its transfers and the moment it was made: a remote cache
 * is reachable through a link only if it was registered before the link and is
 * remote-accessible. The remote cluster lives on this daemon (shm) or behind a peer daemon
 * (tcp); in the second case the peer keeps an InLink for it, the record against which every
 * request of ours is checked there.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/error.h"
#include "common/sockaddr-util.h"
#include "common/time-util.h"

typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct Peer Peer;
typedef struct TransportChannel TransportChannel;
typedef struct InLink InLink;
struct Kvdist__V1__PeerLinkReply;
typedef struct Transport Transport;
typedef struct Link Link;

typedef enum LinkState {
        LINK_UP,
        LINK_DOWN, /* the remote end went away; transfers fail, unlink to clear */
        _LINK_STATE_MAX,
        _LINK_STATE_INVALID = -22,
} LinkState;

struct Link {
        LinkRoot *root;
        uint64_t id;
        uint64_t seq; /* caches registered later (higher seq) are not reachable */
        LinkState state;
        Cluster *local; /* the cluster that made the link */
        uint64_t remote_cluster_id;
        Cluster *remote;         /* the remote cluster when it lives on this daemon */
        Peer *peer;              /* or the peer daemon it lives behind (NULL once lost) */
        uint64_t remote_link_id; /* the peer's InLink id */
        int remote_role;         /* ClusterRole the peer reported */
        char peer_address[SOCKADDR_STR_MAX];       /* remote links: the peer, kept after a loss */
        struct Kvdist__V1__PeerLinkReply *exposed; /* remote links: the caches the remote
                                                    * cluster exposed when the link was made */
        Transport *transport;
        char transport_reason[128]; /* why this transport, for status */
        TransportChannel *rdma_ep;  /* RDMA links: the queue pairs to the peer's device */
        usec_t created_usec;
        uint64_t n_transfers; /* completed */
        uint64_t bytes;
        CList transfers; /* Transfer.link_link, in flight */
        unsigned n_inflight;
        CList link_local;  /* on local->links */
        CList link_remote; /* on remote->links_in */
        CList link_peer;   /* on peer->links */
        CList link_daemon;
};

/* A peer's cluster linked to one of ours: what that peer may reach, and since when. */
struct InLink {
        LinkRoot *root;
        uint64_t id;
        uint64_t seq; /* our caches registered later are out of its reach */
        Peer *peer;
        Cluster *local; /* the cluster linked to */
        uint64_t remote_cluster_id;
        int remote_role;
        bool rdma; /* the peer asked for RDMA and we offered our device */
        usec_t created_usec;
        uint64_t n_served; /* transfers served, completed */
        uint64_t bytes;
        CList served; /* Served.link_inlink, in flight */
        unsigned n_inflight;
        CList link_peer;    /* on peer->inlinks */
        CList link_cluster; /* on local->inlinks */
        CList link_daemon;
};

/* Creates an UP link from @local to the cluster @remote of this daemon over @transport. */
int link_new_local(LinkRoot *root, Cluster *local, Cluster *remote, Transport *transport,
                   Link **ret);

/*
 * Creates an UP link from @local to cluster @remote_cluster_id behind @peer, which answered our
 * PeerLink with @exposed (taken; freed with protobuf_c_message_free_unpacked()).
 */
int link_new_remote(LinkRoot *root, Cluster *local, Peer *peer, uint64_t remote_cluster_id,
                    struct Kvdist__V1__PeerLinkReply *exposed, Transport *transport, Link **ret);

/*
 * Tears the link down: transfers in flight on it are failed with @status, and it leaves both
 * clusters. A remote link tells the peer when @notify_peer. Accepts NULL; returns NULL.
 */
Link *link_free_full(Link *l, int status, bool notify_peer);

/* link_free_full() telling the peer. */
Link *link_free(Link *l, int status);

/* Creates the record of @peer's cluster @remote_cluster_id linking to our @local. */
int link_inlink_new(LinkRoot *root, Peer *peer, Cluster *local, uint64_t remote_cluster_id,
                    int remote_role, InLink **ret);

/*
 * Removes an inbound link; the transfers it serves fail with @status. @why says in the log what
 * ended it ("unlinked by cluster 7"; NULL: @status's name). NULL ok; returns NULL.
 */
InLink *link_inlink_free(InLink *il, int status, const char *why);

/* The inbound link of @peer's cluster @remote_cluster_id to our @local, or NULL. */
InLink *link_inlink_find(Peer *peer, uint64_t remote_cluster_id, const Cluster *local);

/* The inbound link with id @id that came over @peer, or NULL. */
InLink *link_inlink_find_id(Peer *peer, uint64_t id);

/* Marks the link down (its remote end is gone) and fails its transfers with @status. */
void link_set_state(Link *l, LinkState state, int status);

/* link_set_state() to DOWN saying in the log what took it down (NULL: @status's name). */
void link_set_down(Link *l, int status, const char *why);

/*
 * 0 when @target takes a kvd_link_clusters() link (cluster_accepts_links()), else LINK_FAILED
 * with @err saying it is a client.
 */
int link_check_target(const Cluster *target, Error *err);

/* The link @local made to @remote_cluster_id, or NULL. */
Link *link_find(Cluster *local, uint64_t remote_cluster_id);

const char *link_state_to_string(LinkState s);
