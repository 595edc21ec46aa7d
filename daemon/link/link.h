/* SPDX-License-Identifier: MIT */
/*
 * Link: a connection a local cluster made to a remote cluster (kvd_link_clusters). It names the
 * transport that carries its transfers and the moment it was made: a cache is reachable through
 * a link only if it was registered before the link (or comes from the pool) and is
 * remote-accessible. The remote cluster lives on this daemon (shm) or behind a peer daemon
 * (tcp); in the second case the peer keeps an InLink for it, the record against which every
 * request of ours is checked there.
 *
 * A link is two-way, as in LLM-DataDist: the cluster linked to pulls and pushes over it too,
 * reaching the caches of the linking cluster registered before the link. On this daemon its
 * transfers ride the same Link (found on remote->links_in); behind a peer they start from the
 * InLink and are checked here against the Link (Link.served).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/error.h"
#include "common/sockaddr-util.h"
#include "common/time-util.h"
#include "daemon/memory/cache.h"
#include "daemon/transport/transport.h"

typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct Peer Peer;
typedef struct TransportChannel TransportChannel;
typedef struct InLink InLink;
typedef struct Transport Transport;
typedef struct Link Link;
typedef struct PeerCall PeerCall;
typedef struct PeerWaiter PeerWaiter;
typedef struct PeerChannelWaiter PeerChannelWaiter;

/* One cache a remote cluster exposed to a link made to it: what the peer told of it. */
typedef struct LinkExposedCache {
        uint64_t cache_id;
        bool blocks; /* a blocks cache (kvd_register_blocks_cache) */
        uint64_t tensor_size;
        uint32_t num_tensors;
        uint32_t data_type; /* kvd_dtype */
        size_t n_shape;
        int64_t *shape;
        size_t n_keys;
        CacheKey *keys;      /* the keys that name it, */
        uint32_t *key_slots; /* each with the index it names */
        /*
         * Reachable for peers' one-sided access: per tensor, its descriptor as the owner's
         * transport packed it (transport_cache_desc()); opaque here, unpacked only by the
         * transport of the side that reaches the memory (transport_desc_unpack()).
         */
        size_t n_descs;
        TransportDesc *descs;
} LinkExposedCache;

/*
 * What the linked side grants a link (PeerLinkReply, decoded): its id of the inbound link, its
 * cluster's role, the caches the link reaches, and the cluster's device for a channel when it
 * has one that works (else why not). The peer codec builds it from the wire and encodes ours to
 * it.
 */
typedef struct LinkGrant {
        uint64_t link_id;
        int role; /* ClusterRole */
        size_t n_caches;
        LinkExposedCache *caches;
        bool has_device;
        TransportDeviceInfo device; /* the channel transport's, unpacked */
        char *device_reason;        /* when !has_device: why, or NULL when the peer did not say */
} LinkGrant;

/* A request for a link, as one daemon asks another (PeerLink). */
typedef struct LinkPeerAsk {
        uint64_t src_cluster_id;
        int src_role; /* ClusterRole */
        uint64_t dst_cluster_id;
        bool channel; /* the asking side would run the link over a channel */
        bool domain;  /* a comm domain's pair link: the linked cluster needs no listen_ip_info */
        bool has_src_device;
        /* channel: the asking cluster's device (links are two-way) */
        TransportDeviceInfo src_device;
} LinkPeerAsk;

/* A link between two daemons' clusters is gone (PeerUnlink). */
typedef struct LinkPeerUnlink {
        uint64_t src_cluster_id; /* the sender's cluster */
        uint64_t dst_cluster_id; /* the receiver's */
        uint64_t link_id;        /* the linked side's id of its inbound link */
        bool from_linked;        /* the sender is the side that was linked to */
} LinkPeerUnlink;

/* @p reached READY (@status STATUS_OK) or was lost first (@status and @err say why). */
typedef void (*link_peer_ready_fn)(Peer *p, int status, const Error *err, void *userdata);

/*
 * The answer to a LinkPeerAsk: @grant (the callee's to free with link_grant_free()) when
 * @status is STATUS_OK, else NULL with @err saying why.
 */
typedef void (*link_grant_fn)(Peer *p, int status, const Error *err, LinkGrant *grant,
                              void *userdata);

/*
 * How link/'s state machines reach other daemons: the peer codec (peer-link.c) fills it for
 * the daemon (peer_link_ops), a unit test with a recorder. LinkRoot.peer_ops points at it.
 */
typedef struct LinkPeerOps {
        /* The peer at @address, dialed when needed (peer_get()). */
        int (*get)(LinkRoot *root, const char *address, Peer **ret, Error *err);
        /* Calls @fn once @p is READY or lost (peer_when_ready()); -ENOMEM. */
        int (*when_ready)(Peer *p, link_peer_ready_fn fn, void *userdata, PeerWaiter **ret_waiter);
        /* Forgets a waiter; its callback will not run. Accepts NULL. */
        void (*waiter_cancel)(PeerWaiter *w);
        /* Asks READY @p for a link: @fn gets the grant or the failure. A negative errno (not
         * READY: -ENOTCONN) and @fn not called when it cannot be asked. */
        int (*link)(Peer *p, const LinkPeerAsk *ask, link_grant_fn fn, void *userdata,
                    PeerCall **ret_call);
        /* Points the answer to @call at @fn instead (its asker went away). */
        void (*redirect)(PeerCall *call, link_grant_fn fn, void *userdata);
        /* Tells @p a link is gone (a notice, no answer). */
        int (*unlink)(Peer *p, const LinkPeerUnlink *u);
        /* Tells @p that our cluster @cluster_id went away (a notice). */
        int (*cluster_gone)(Peer *p, uint64_t cluster_id);
} LinkPeerOps;

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
        int down_status; /* DOWN: why (STATUS_NOT_YET_LINK: the other side unlinked) */
        Cluster *local;  /* the cluster that made the link */
        uint64_t remote_cluster_id;
        Cluster *remote;         /* the remote cluster when it lives on this daemon */
        Peer *peer;              /* or the peer daemon it lives behind (NULL once lost) */
        uint64_t remote_link_id; /* the peer's InLink id */
        int remote_role;         /* ClusterRole the peer reported */
        char peer_address[SOCKADDR_STR_MAX]; /* remote links: the peer, kept after a loss */
        LinkGrant *exposed; /* remote links: what the peer granted, the caches the remote
                             * cluster exposed when the link was made among it */
        Transport *transport;
        char transport_reason[128]; /* why this transport, for status */
        TransportChannel *channel;  /* links over a channel: the one to the peer's device */
        usec_t created_usec;
        uint64_t n_transfers; /* completed */
        uint64_t bytes;
        CList transfers; /* Transfer.link_link, in flight (both ways on a local link) */
        unsigned n_inflight;
        CList served; /* Served.link_link: the remote cluster's transfers of ours over it */
        unsigned n_served_inflight;
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
        bool over_channel; /* the peer asked for a channel and we offered our device */
        bool domain;       /* a comm domain's pair link asked for it (domain/ makes no other use
                            * of it: the asking domain holds it until it is OK) */
        /* Links are two-way: our cluster's own transfers over it go over a channel of ours to
         * the linking cluster's device, once connected (link_inlink_connect()), else over TCP. */
        bool has_peer_device;
        TransportDeviceInfo peer_device; /* the linking cluster's device */
        char device[64];                 /* ours */
        TransportChannel *channel;       /* connected; the peer's (freed when it is lost) */
        PeerChannelWaiter *channel_waiter;
        usec_t created_usec;
        uint64_t n_served; /* transfers served, completed */
        uint64_t bytes;
        CList served; /* Served.link_inlink, in flight */
        unsigned n_inflight;
        CList transfers; /* Transfer.link_link: our cluster's transfers over it, in flight */
        unsigned n_outgoing;
        CList link_peer;    /* on peer->inlinks */
        CList link_cluster; /* on local->inlinks */
        CList link_daemon;
};

/*
 * The transport whose channels links open to peers with an exchange of their own
 * (peer-channel.c), NULL in a daemon without one: links run over it when both ends have a
 * device for it, else over TCP.
 */
Transport *link_channel_transport(const LinkRoot *root);

/* Creates an UP link from @local to the cluster @remote of this daemon over @transport. */
int link_new_local(LinkRoot *root, Cluster *local, Cluster *remote, Transport *transport,
                   Link **ret);

/*
 * Creates an UP link from @local to cluster @remote_cluster_id behind @peer, which granted our
 * ask with @exposed (taken on success).
 */
int link_new_remote(LinkRoot *root, Cluster *local, Peer *peer, uint64_t remote_cluster_id,
                    LinkGrant *exposed, Transport *transport, Link **ret);

/*
 * Allocates @e's arrays: a shape of @n_shape dimensions and @n_descs tensors' descriptors (their
 * counts set), room for @n_keys keys and slots (n_keys stays 0 for the caller to fill). -ENOMEM;
 * what was allocated is freed with the grant.
 */
int link_exposed_cache_alloc(LinkExposedCache *e, size_t n_shape, size_t n_descs, size_t n_keys);

/*
 * Checks the descriptors of the caches a peer granted in @g: none or one per tensor of a cache,
 * none empty, and where @direct (our transport that reaches peers' memory, or NULL) has remote
 * access, each one it unpacks (transport_desc_unpack()) into a span that holds the whole tensor.
 * Returns 0, or STATUS_PROTOCOL_MISMATCH with @err saying which.
 */
int link_grant_check(Transport *direct, const LinkGrant *g, Error *err);

/* Frees a grant and what it holds. Accepts NULL; returns NULL. */
LinkGrant *link_grant_free(LinkGrant *g);

/*
 * Gives back to @p the link @link_id it granted to our @src_cluster_id for its @dst_cluster_id,
 * which we will not make after all (a PeerUnlink notice, when @p is READY).
 */
void link_give_back(LinkRoot *root, Peer *p, uint64_t src_cluster_id, uint64_t dst_cluster_id,
                    uint64_t link_id);

/*
 * @p's cluster asks to link to one of ours (@ask): checks that it may, creates the InLink and
 * describes what it reaches in *@ret_grant (with our device for a channel). *@ret_il and
 * *@ret_grant are the caller's; a STATUS_* status with @err when refused.
 */
int link_inlink_accept(LinkRoot *root, Peer *p, const LinkPeerAsk *ask, InLink **ret_il,
                       LinkGrant **ret_grant, Error *err);

/*
 * Connects a channel from our cluster's device to the linking cluster's for @il, when the
 * link runs over a channel and the peer said its device: our cluster's own transfers over @il use
 * them once connected (TCP until then, or when they fail; the log says which). Once, after the
 * grant went out.
 */
void link_inlink_connect(InLink *il);

/* @p tells us a link between our clusters and its own is gone (@u, from its side). */
void link_peer_unlinked(Peer *p, const LinkPeerUnlink *u);

/* @p tells us its cluster @cluster_id went away: links to it go down, its links to us go. */
void link_peer_cluster_gone(Peer *p, uint64_t cluster_id);

/* @p is lost with @status: our links over it go down, its links to us go. */
void link_peer_lost(Peer *p, int status);

/* @c is going away: tells every peer its clusters linked with it, once per peer. */
void link_tell_cluster_gone(Cluster *c);

/*
 * Removes the links cluster @remote_cluster_id made to @c (kvd_unlink_clusters called on the
 * side that was linked to): its link when it lives on this daemon, else the inbound links of the
 * peer's cluster, and unless @force the peer is told, so its link goes down too (transfers over
 * it then fail with NOT_YET_LINK). Transfers in flight either way fail with NOT_YET_LINK.
 * Returns how many there were.
 */
int link_unlink_inbound(Cluster *c, uint64_t remote_cluster_id, bool force);

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

/* The UP link that cluster @linking_cluster_id of this daemon made to @c, or NULL. */
Link *link_find_in(Cluster *c, uint64_t linking_cluster_id);

/* The inbound link of a peer's cluster @remote_cluster_id to @c, or NULL. */
InLink *link_inlink_find_cluster(Cluster *c, uint64_t remote_cluster_id);

/*
 * The UP link one of our clusters made over @p to which the peer granted its inbound link
 * @remote_link_id (the peer's cluster moves bytes over it the other way), or NULL.
 */
Link *link_find_granted(Peer *p, uint64_t remote_link_id);

const char *link_state_to_string(LinkState s);
