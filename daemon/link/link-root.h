/* SPDX-License-Identifier: MIT */
/*
 * LinkRoot: what the link layer owns and reads: this node's name towards peers (node id,
 * identity, cluster key), the peer listener and peers, the clients' clusters, links and peers'
 * links to them, the listeners of link events and the counters of what link/ counts. The daemon
 * builds it, points it at the layers below (ids, memory, transports) and at the configuration
 * values link/ reads (LinkOptions), and hands it to the layers above.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/hook.h"
#include "common/id-source.h"
#include "common/limits.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/memory/memory.h"
#include "daemon/transport/transport-config.h"
#include "daemon/transport/transport-set.h"

struct event_base;
typedef struct Cluster Cluster;
typedef struct PeerListener PeerListener;

/*
 * The configuration values link/ reads. They point into the daemon's configuration, which a
 * reload changes in place, so link/ sees what the running configuration says.
 */
typedef struct LinkOptions {
        const Limits *limits;
        const uint32_t *heartbeat_interval_ms;    /* a peer heartbeat every so often */
        const uint32_t *heartbeat_timeout_ms;     /* a peer silent this long is lost */
        const bool *client_clusters_accept_links; /* clusters without listen_ip_info do too */
        const char *listen_ip_info;               /* "ip:port" for peers; NULL = none */
        const char *cluster_key_file;             /* NULL = no key (warned) */
} LinkOptions;

/* What link/ counts (and the layers above it for their peer requests); status reads them. */
typedef struct LinkCounters {
        uint64_t frames_malformed;      /* peers' frames that did not decode */
        uint64_t peers_lost;            /* READY peers that went away */
        uint64_t peers_refused;         /* connections refused: key, token, limits */
        uint64_t peer_requests_refused; /* peer requests answered with an error */
        uint64_t notifies_delivered;
        uint64_t frames_decoded_away; /* peers' requests decoded off the control loop */
} LinkCounters;

typedef struct LinkRoot {
        struct event_base *base;
        LinkOptions options;
        IdSource *ids;            /* ids of peers, links, endpoints; link sequence numbers */
        Memory *memory;           /* releases the caches of a cluster that goes */
        TransportSet *transports; /* the transports links run over, the RDMA devices */
        LinkDecoder decoder;      /* peers' long requests are decoded on its thread */

        uint64_t node_id;     /* random, never 0: how peers tell daemons apart */
        char identity[96];    /* "kvdistd/0.1.0 hostname" */
        uint8_t *cluster_key; /* pre-shared peer key; NULL when none */
        size_t cluster_key_len;
        PeerListener *peer_listener;     /* NULL when listen_ip_info is not set */
        PeerListener **device_listeners; /* one per device address the peer listener does not
                                          * serve (devices[].address) */
        size_t n_device_listeners;
        CList peers; /* Peer.link_daemon */
        unsigned n_peers;
        CList inlinks; /* InLink.link_daemon: peers' clusters linked to ours */
        unsigned n_inlinks;
        CList clusters; /* Cluster.link_daemon */
        unsigned n_clusters;
        CList links; /* Link.link_daemon */
        unsigned n_links;
        HookList events;                    /* listeners of link/'s events (link/link-events.h) */
        PeerHandlers handlers;              /* what handles each message a READY peer sends */
        const struct LinkPeerOps *peer_ops; /* how links reach peers (peer_link_ops) */

        LinkCounters counters;
        bool stopping; /* the daemon is stopping: no new peers */

        /* Called when the count of clusters, links or ready peers changed (the daemon's status
         * line says them). */
        void (*changed)(void *userdata);
        void *changed_userdata;
} LinkRoot;

/* Initializes the lists of @root and its peer ops (the peer codec's); the daemon fills in the
 * rest. */
void link_root_init(LinkRoot *root);

/* Frees what @root owns itself (the cluster key); its objects are freed by their layers. */
void link_root_done(LinkRoot *root);

/* Tells the daemon that counts of @root changed (see LinkRoot.changed). */
void link_root_changed(LinkRoot *root);

/* The cluster @cluster_id of this daemon; NULL when none. */
Cluster *link_root_find_cluster(LinkRoot *root, uint64_t cluster_id);

/*
 * Whether peers that dial @address (canonical "ip:port") reach this daemon through a listener it
 * opened at start: the peer listener or a device's address.
 */
bool link_root_listens_at(const LinkRoot *root, const char *address);

/* The device map's entry for @device_id, or NULL. */
const DeviceConfig *link_root_find_device(const LinkRoot *root, int32_t device_id);

/* The device map's entry whose address is @address (canonical "ip:port"), or NULL. */
const DeviceConfig *link_root_find_device_address(const LinkRoot *root, const char *address);

/* Where peers reach this daemon ("ip:port"), "" when it does not listen for them. */
const char *link_root_peer_address(const LinkRoot *root);
