/* SPDX-License-Identifier: MIT */
/*
 * ControlRoot: what the control layer (the client edge) owns and reads: the client listener, the
 * connections and what it counts of them. The daemon builds it, points it at the layers below it
 * (ids, memory, transports, links, transfers, comm domains, metrics) and at the configuration
 * values control/ reads (ControlOptions), and gives it callbacks for what only the daemon knows:
 * that the one-line status changed, and the status document.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/clist.h"
#include "common/id-source.h"
#include "common/limits.h"
#include "daemon/link/link-root.h"
#include "daemon/memory/memory.h"
#include "daemon/metrics/metrics.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/transport/transport-set.h"

struct event_base;
typedef struct Decoder Decoder;
typedef struct DomainRegistry DomainRegistry;
typedef struct Listener Listener;

/*
 * The configuration values control/ reads. They point into the daemon's configuration, which a
 * reload changes in place (the allow-lists are reallocated, hence the pointers to them), so
 * control/ sees what the running configuration says.
 */
typedef struct ControlOptions {
        const Limits *limits;               /* frame size, clients, regions per client */
        const uint32_t *sync_kv_timeout_ms; /* a cluster's default transfer timeout */
        const char *socket_path;            /* where to listen without socket activation */
        const uint32_t *socket_mode;        /* permission bits of that socket */
        uid_t *const *allow_uids;           /* empty = any uid that can open the socket */
        const size_t *n_allow_uids;
        gid_t *const *allow_gids;
        const size_t *n_allow_gids;
} ControlOptions;

typedef struct ControlRoot {
        struct event_base *base;
        ControlOptions options;
        IdSource *ids;            /* ids of connections, regions, caches; cache sequence numbers */
        Memory *memory;           /* the pool caches are allocated from */
        TransportSet *transports; /* the device map, the RDMA devices caches register with */
        LinkRoot *link;           /* clusters are made and found here */
        TransferRoot *transfer;   /* Transfer requests start transfers here */
        DomainRegistry *domains;  /* domain requests join and run operations here */
        const Metrics *metrics;   /* DaemonMetrics renders it */

        Listener *listener;
        Decoder *decoder; /* big payloads are decoded on its thread; NULL: on the loop */
        CList conns;      /* Conn.link_root */
        ClientCounters counters;
        bool stopping; /* the daemon is stopping: no new clusters */

        /* Called when the count of connections or clusters changed (the daemon's status line
         * says them). */
        void (*changed)(void *userdata);
        /* Builds the daemon's status document (DaemonStatus) into *@ret (malloc()ed); 0 or
         * -ENOMEM. */
        int (*status_json)(void *userdata, char **ret);
        void *userdata;
} ControlRoot;

/* Sets up an empty root: no listener, no connections, counters at zero. */
void control_root_init(ControlRoot *root);

/* Counts a client request answered with @status (STATUS_*) under its public code. */
void control_root_count_error(ControlRoot *root, int status);

/* Tells the daemon that the count of connections or clusters changed (ControlRoot.changed). */
void control_root_changed(ControlRoot *root);
