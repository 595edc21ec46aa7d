/* SPDX-License-Identifier: MIT */
/*
 * LinkEvents: what link/ announces to the layers above it (transfer/, domain/), which add their
 * Hook to LinkRoot.events at start (common/hook.h). link/ never names them.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "common/hook.h"

typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct InLink InLink;
typedef struct Link Link;
typedef struct Peer Peer;

typedef struct LinkEvents {
        /* @c is being destroyed (finalize or a dropped connection), before its links go: what
         * a layer holds of it is released. */
        void (*cluster_gone)(void *userdata, Cluster *c);
        /* @l went down or is freed with @status: what runs over it stops using it. */
        void (*link_down)(void *userdata, Link *l, int status);
        /* @il, a peer's link to one of our clusters, is freed with @status. */
        void (*inlink_gone)(void *userdata, InLink *il, int status);
        /* There is no link from @c to @remote_cluster_id: a listener that knows why (a comm
         * domain still being set up) fills @err and returns its status, others return 0. */
        int (*explain_no_link)(void *userdata, Cluster *c, uint64_t remote_cluster_id, Error *err);
        /* Whether the listener is setting up a link from @c to @remote_cluster_id itself (a
         * comm domain's pair): link_clusters() for it then answers PROCESSING_LINK. */
        bool (*linking)(void *userdata, const Cluster *c, uint64_t remote_cluster_id);
        /* @p is being lost with @status: its links are down, its RDMA endpoints still up.
         * What runs on them stops before they are flushed (transfer/ ends the transfers it
         * serves for @p). */
        void (*peer_lost)(void *userdata, Peer *p, int status);
        /* Then @p's RDMA endpoints are flushed and freed: what else needs @p gives up
         * (domain/ fails the domains with a member behind it). */
        void (*peer_flushed)(void *userdata, Peer *p, int status);
} LinkEvents;

/* Adds @h with @events (and @userdata) to @root's listeners of link events. */
void link_events_listen(LinkRoot *root, Hook *h, const LinkEvents *events, void *userdata);

/*
 * Why @c has no link to @remote_cluster_id: the first listener's explanation (its status, @err
 * filled), or 0 when none knows more than that the link is missing.
 */
int link_explain_no_link(Cluster *c, uint64_t remote_cluster_id, Error *err);

/* Whether a listener is setting up a link from @c to @remote_cluster_id (LinkEvents.linking). */
bool link_linking_elsewhere(const Cluster *c, uint64_t remote_cluster_id);
