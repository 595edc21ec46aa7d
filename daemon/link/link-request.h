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

#include <protobuf-c/protobuf-c.h>

#include "error.h"
#include "peer.h"

typedef struct Cluster Cluster;
typedef struct Link Link;
typedef struct Request Request;

/*
 * Serves a LinkClusters request of @c. Returns 0 when it answered, HANDLER_PENDING when it keeps
 * @req and answers later, or a KVD_E_* status with @err for a request refused as a whole.
 */
int link_request_start(Cluster *c, Request *req, Error *err);

/* PARAM_INVALID for an empty list, CLUSTER_NUM_EXCEED_LIMIT above KVD_MAX_LINK_CLUSTERS. */
int link_check_cluster_list(size_t n, Error *err);

/* Answers a (Un)LinkClusters request: one status per cluster, @first the overall failure. */
int link_reply_send(Request *req, const int32_t *rets, size_t n, const Error *first);

/* Whether a set-up of a link from @c to @remote_cluster_id is under way. */
bool link_request_in_progress(const Cluster *c, uint64_t remote_cluster_id);

/* @c is going away: its link requests are answered with PEER_LOST (or dropped) and freed. */
void link_requests_abort(Cluster *c);

/*
 * Whether @c may have comm domain links, which use TCP whatever the device map says: not when
 * its device is configured for transport rdma (FEATURE_NOT_ENABLED; nothing falls back without
 * saying so).
 */
int link_check_domain_transport(const Cluster *c, Error *err);

/*
 * Asks READY @p for a link of @c to its cluster @remote_cluster_id (PeerLink), with its RDMA
 * endpoint details when @rdma; as peer_call().
 */
int link_peer_request(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool rdma,
                      peer_reply_fn fn, void *userdata, PeerCall **ret_call);

/*
 * Makes the link of @c to @remote_cluster_id behind @p from the peer's answer @reply to
 * link_peer_request() (copied), replacing a link that is down. *@ret (may be NULL) gets it.
 * OUT_OF_MEMORY with @err.
 */
int link_make_remote(Cluster *c, Peer *p, uint64_t remote_cluster_id,
                     const ProtobufCMessage *reply, const char *transport_reason, Link **ret,
                     Error *err);
