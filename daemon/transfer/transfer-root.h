/* SPDX-License-Identifier: MIT */
/*
 * TransferRoot: what the transfer layer owns and reads: the clients' transfers in flight, the
 * peers' transfers served here, the counters of their outcomes and the listeners of transfer
 * events. The daemon builds it and points it at the link layer (clusters, peers, the event loop,
 * ids), the memory root and the transports; the configuration values it reads come in
 * TransferOptions.
 */
#pragma once

#include <stdint.h>

#include "common/clist.h"
#include "common/hook.h"
#include "common/limits.h"
#include "daemon/link/link-root.h"
#include "daemon/memory/memory.h"
#include "daemon/transport/transport-set.h"

typedef struct TransferPeerOps TransferPeerOps;

/*
 * The configuration values transfer/ reads. They point into the daemon's configuration, which a
 * reload changes in place.
 */
typedef struct TransferOptions {
        const Limits *limits;
        const uint32_t *sync_kv_timeout_ms; /* a transfer's timeout when its request has none */
} TransferOptions;

/* What transfer/ counts; status and metrics read them. */
typedef struct TransferCounters {
        uint64_t transfers_ok;
        uint64_t transfers_failed;
        uint64_t bytes_pulled;
        uint64_t bytes_pushed;
        uint64_t transfers_served; /* peers' transfers of our clusters' caches */
        uint64_t bytes_served;
} TransferCounters;

typedef struct TransferRoot {
        LinkRoot *link; /* clusters, peers, the event loop, ids; its stopping */
        Memory *memory; /* releases the caches a transfer held the last ref of */
        TransportSet *transports;
        TransferOptions options;
        /* How transfer/ speaks to peers: the codec's (transfer_codec_listen()), or a test's. */
        const TransferPeerOps *peer_ops;

        CList transfers; /* Transfer.link_daemon, in flight */
        unsigned n_transfers;
        CList served; /* Served.link_daemon: peers' transfers in flight here */
        unsigned n_served;
        HookList events; /* listeners of transfer/'s events (transfer/transfer-events.h) */
        Hook link_hook;  /* transfer/'s listener on the link root's events */
        TransferCounters counters;

        /* Called when the count of transfers in flight changed (the daemon's status line says
         * it), and when a transfer or a served one ended (a stopping daemon may now exit). */
        void (*changed)(void *userdata);
        void (*ended)(void *userdata);
        void *userdata;
} TransferRoot;

/* Initializes the lists of @root; the daemon fills in the rest. */
void transfer_root_init(TransferRoot *root);

/* Tells the daemon that the count of transfers in flight changed (TransferRoot.changed). */
void transfer_root_changed(TransferRoot *root);

/* Tells the daemon that a transfer or a served one ended (TransferRoot.ended). */
void transfer_root_ended(TransferRoot *root);
