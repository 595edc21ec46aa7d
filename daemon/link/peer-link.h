/* SPDX-License-Identifier: MIT */
/* What clusters do to their links with peers' clusters (the peer handlers are in peer-handlers.h).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct Cluster Cluster;

/* @c is going away: tells every peer its clusters linked with it (PeerClusterGone). */
void peer_link_cluster_gone(Cluster *c);

/*
 * Removes the inbound links of the peer's cluster @remote_cluster_id to @c (kvd_unlink_clusters
 * called on the side that was linked to); unless @force the peer is told, so its link goes down
 * too. Returns how many there were.
 */
int peer_link_unlink_inbound(Cluster *c, uint64_t remote_cluster_id, bool force);
