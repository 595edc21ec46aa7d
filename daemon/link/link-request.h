/* SPDX-License-Identifier: MIT */
/*
 * LinkRequest: one kvd_link_clusters() call in progress. Clusters of this daemon are linked at
 * once (shm); each cluster behind a peer daemon gets a set-up that reaches the peer (dialing it
 * if needed), waits for it to be READY and asks it for the link (PeerLink). The client is
 * answered when every set-up is done or when the call's timeout passes (TIMEOUT for those still
 * running; a link the peer grants later is undone at once).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/completion.h"
#include "common/error.h"
#include "common/sockaddr-util.h"
#include "daemon/link/link.h"

typedef struct Cluster Cluster;
typedef struct Link Link;
typedef struct LinkTransport LinkTransport;
typedef struct PeerChannelWaiter PeerChannelWaiter;
typedef struct TransportChannel TransportChannel;

/* One cluster a kvd_link_clusters() call links to: its id, and the daemon it is on ("ip:port";
 * NULL or "" when it is on this one). */
typedef struct LinkTarget {
        uint64_t remote_cluster_id;
        const char *remote_ip_info;
} LinkTarget;

/*
 * Answers a (Un)LinkClusters request @done: one status per cluster (@n of @rets), @first the
 * overall failure (code 0 when none). control/ encodes it; returns what completion_reply() does.
 */
typedef int (*link_reply_fn)(Completion *done, const int32_t *rets, size_t n, const Error *first);

/* The link runs over the channel @ch, or over TCP when @ch is NULL (@t->reason says why), or
 * cannot be made at all (@err). */
typedef void (*link_transport_fn)(LinkTransport *t, TransportChannel *ch, const Error *err,
                                  void *userdata);

/*
 * The transport of one link to another daemon being set up, by kvd_link_clusters() or by a comm
 * domain: both decide the same way. The device map's choice for the cluster's device says rdma
 * (RDMA or no link), auto (RDMA when both ends have a working device, else TCP) or tcp;
 * @reason says what was decided and why, so nothing falls back silently.
 */
struct LinkTransport {
        bool channel;                   /* a channel is wanted (the device map's transport) */
        char device[64];                /* ours, when it is */
        bool required;                  /* the device map says so: no TCP instead */
        char reason[128];               /* for the link's transport_reason */
        char address[SOCKADDR_STR_MAX]; /* the peer's, for messages */
        Peer *peer;                     /* link_transport_connect()'s */
        PeerChannelWaiter *waiter;      /* the channel connects */
        link_transport_fn fn;
        void *userdata;
};

/*
 * Serves kvd_link_clusters() of @c to the @n clusters @targets (read during the call only)
 * within @timeout_ms (0: the default, 3 s), answered through @reply on @done. Returns 0 when it
 * answered, COMPLETION_PENDING when it keeps @done and answers later, or a STATUS_* status with
 * @err for a request refused as a whole (@done is still the caller's). An entry behind a peer
 * answers OK once linked; the peer's status when it refuses (LINK_FAILED for a client cluster),
 * LINK_FAILED when the peer is lost or cannot be reached first (PERMISSION_DENIED when it
 * refused our cluster key), TIMEOUT when the deadline passes first. When @c goes away
 * meanwhile, @done fails with PEER_LOST (link_requests_abort()).
 */
int link_request_start(Cluster *c, const LinkTarget *targets, size_t n, uint32_t timeout_ms,
                       Completion *done, link_reply_fn reply, Error *err);

/* PARAM_INVALID for an empty list, CLUSTER_NUM_EXCEED_LIMIT above KVD_MAX_LINK_CLUSTERS. */
int link_check_cluster_list(size_t n, Error *err);

/* Whether a set-up of a link from @c to @remote_cluster_id is under way. */
bool link_request_in_progress(const Cluster *c, uint64_t remote_cluster_id);

/* @c is going away: its link requests are answered with PEER_LOST (or dropped) and freed. */
void link_requests_abort(Cluster *c);

/*
 * Decides, before asking the peer at @address, what a link of @c may use: fills @t (RDMA wanted
 * or not, and why). FEATURE_NOT_ENABLED with @err when the device map says rdma and our device
 * cannot do it.
 */
int link_transport_choose(LinkTransport *t, const Cluster *c, const char *address, Error *err);

/*
 * Takes the peer's grant @g to link_peer_request() (asked for a channel when @t->channel):
 * connects the channel when both ends can, and calls @fn with it, with NULL for TCP, or with an
 * error when the channel was required and cannot be had. @fn may run from inside this call.
 */
void link_transport_connect(LinkTransport *t, Peer *p, uint64_t remote_cluster_id,
                            const LinkGrant *g, link_transport_fn fn, void *userdata);

/* Stops waiting for the channel; @t's callback will not run. */
void link_transport_cancel(LinkTransport *t);

/*
 * Asks READY @p for a comm domain's pair link of @c to its cluster @remote_cluster_id (a
 * LinkPeerAsk marked as a domain's: every member called kvd_link, so the cluster needs no
 * listen_ip_info for it), with our device for a channel when @channel. @fn gets the grant (its
 * own) or the failure; a negative errno and @fn not called when @p cannot be asked.
 */
int link_peer_request(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool channel,
                      link_grant_fn fn, void *userdata, PeerCall **ret_call);

/*
 * Stops waiting for the answer to the link @call asked for our cluster @cluster_id to
 * @remote_cluster_id: when the peer grants it after all, the link is given back, unless
 * @keep_if_linked and a link of the same pair was made meanwhile (the peer's inbound link is
 * that one's then).
 */
void link_peer_abandon(LinkRoot *root, PeerCall *call, uint64_t cluster_id,
                       uint64_t remote_cluster_id, bool keep_if_linked);

/*
 * Makes the link of @c to @remote_cluster_id behind @p from the peer's grant @g to
 * link_peer_request() (taken on success, still the caller's on failure), over the channel @ep
 * or over TCP when @ep is NULL, replacing a link that is down. *@ret (may be NULL) gets it.
 * OUT_OF_MEMORY with @err.
 */
int link_make_remote(Cluster *c, Peer *p, uint64_t remote_cluster_id, LinkGrant *g,
                     TransportChannel *ep, const char *transport_reason, Link **ret, Error *err);
