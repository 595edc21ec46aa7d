/* SPDX-License-Identifier: MIT */
/*
 * Cluster: one inference worker attached to the daemon through a client connection
 * (LLM-DataDist's cluster_id with a role and a device). It owns its regions and caches and is
 * the local end of its links. Destroying it (finalize or a dropped connection) tears all of
 * that down the same way.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/memory/cache.h"
#include "daemon/memory/user.h"
#include "common/clist.h"
#include "common/error.h"

struct ucred;
typedef struct LinkRoot LinkRoot;
typedef struct Cluster Cluster;
typedef struct PeerListener PeerListener;

typedef enum ClusterRole {
        CLUSTER_ROLE_PROMPT = 1,
        CLUSTER_ROLE_DECODER = 2,
        CLUSTER_ROLE_MIX = 3,
} ClusterRole;

struct Cluster {
        LinkRoot *root;
        uint64_t id;
        ClusterRole role;
        int32_t device_id;
        uint32_t sync_kv_timeout_ms;
        char *listen_ip_info;   /* a server reachable here ("ip:port" as bound); NULL: a client */
        PeerListener *listener; /* its own, or NULL when the daemon's listener serves the address */
        pid_t pid;
        uid_t uid;
        User *user; /* what its uid holds (one cluster, its regions); NULL: not accounted */

        CList regions; /* Region.link_owner */
        unsigned n_regions;
        uint64_t region_bytes;
        CacheTable caches;
        CList links;    /* Link.link_local: links this cluster made */
        CList links_in; /* Link.link_remote: links other clusters made to this one */
        unsigned n_links;
        unsigned n_links_in;
        CList inlinks; /* InLink.link_cluster: links peers' clusters made to this one */
        unsigned n_inlinks;
        CList link_requests; /* LinkRequest.link_cluster: kvd_link_clusters() in progress */
        CList notifies;      /* Notify.link: push notifications not yet taken */
        unsigned n_notifies;
        int notify_fd;   /* eventfd readable while @notifies is not empty; -1 = none */
        CList transfers; /* Transfer.link_cluster: transfers this cluster asked for */
        unsigned n_transfers;
        CList link_daemon;
};

/*
 * Creates a cluster and attaches it to @root (the caller checked id uniqueness and limits), owned
 * by the process @cred names (NULL: unknown). It is a client until cluster_set_listen() makes it
 * a server.
 */
int cluster_new(LinkRoot *root, const struct ucred *cred, uint64_t id, ClusterRole role,
                int32_t device_id, uint32_t sync_kv_timeout_ms, Cluster **ret);

/*
 * Makes @c a server reachable at @listen_ip_info (LLM-DataDist's option: "ip:port" or
 * "[v6]:port", numeric; port 0 takes any free port), or a client when it is NULL or "". Peers
 * reach the address through a peer listener that @c owns from now on (one port per cluster,
 * closed when it moves, is dropped or @c goes), or through the daemon's own listener when that
 * one is bound there already. On failure @c keeps what it had: PARAM_INVALID for an address that
 * does not parse, LINK_FAILED when another cluster of this daemon listens there or the address
 * cannot be bound (in use, not an address of this host); @err says which.
 */
int cluster_set_listen(Cluster *c, const char *listen_ip_info, Error *err);

/*
 * Charges @c to @u (one of limits.per_user.max_clusters; its regions from now on) and keeps a
 * reference until cluster_free() releases both. Returns 0, or LIMIT_EXCEEDED (@err says so)
 * with @c unchanged.
 */
int cluster_set_user(Cluster *c, User *u, Error *err);

/*
 * Whether others may link to @c with kvd_link_clusters(): a server does, a client only where
 * the daemon keeps client_clusters_accept_links.
 */
bool cluster_accepts_links(const Cluster *c);

/*
 * Detaches and frees the cluster: fails its transfers and the transfers of others that touch
 * it, tears down every link to and from it, frees its caches (returning pool extents) and drops
 * its regions. Accepts NULL; returns NULL.
 */
Cluster *cluster_free(Cluster *c);

const char *cluster_role_to_string(ClusterRole role);

/* Frees a cache that left @c's table: its pool extent goes back to the pool first. */
void cluster_release_cache(Cluster *c, Cache *cache);

/* The region with id @region_id among @c's regions, or NULL. */
struct Region *cluster_find_region(Cluster *c, uint64_t region_id);
