/* SPDX-License-Identifier: MIT */
/*
 * Metrics: what kvdistd shows to Prometheus. Gauges are read from the daemon's state when the
 * document is built; transfer outcomes (by direction, transport and status), bytes and latency
 * histograms are recorded as transfers complete. Each metric family is one small function in
 * metrics.c's family table: adding a family is adding a function and a line.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <kvdist/kvdist.h>

#include "common/status.h"
#include "common/time-util.h"

typedef struct DomainRegistry DomainRegistry;
typedef struct LinkRoot LinkRoot;
typedef struct Memory Memory;
typedef struct Metrics Metrics;
typedef struct TransferRoot TransferRoot;
typedef struct TransportSet TransportSet;

/*
 * What the client edge (control/, a layer above) counts of its connections: it owns and writes
 * them, metrics and the status document read them.
 */
typedef struct ClientCounters {
        unsigned conns_open;
        uint64_t conns_accepted;
        uint64_t conns_refused;
        uint64_t conns_idle_closed;       /* closed without a cluster (limits.attach_timeout_ms) */
        unsigned conns_reserved;          /* open on limits.reserved_connections */
        uint64_t frames_malformed;        /* clients' frames (peers' in LinkCounters) */
        uint64_t frames_decoded_away;     /* clients' frames decoded off the control loop */
        uint64_t errors[-_KVD_E_MIN + 1]; /* requests answered with an error, by -public code */
} ClientCounters;

/* Where the gauges and counters are read when the document is built. */
typedef struct MetricsSources {
        usec_t start_usec; /* CLOCK_MONOTONIC, when the daemon started */
        const LinkRoot *link;
        TransferRoot *transfer; /* its transfer events are listened to */
        DomainRegistry *domains;
        const Memory *memory;
        const TransportSet *transports;
        const ClientCounters *clients;
} MetricsSources;

/*
 * Creates the recorder reading @sources and records the transfers of @sources->transfer as they
 * complete (transfer/transfer-events.h): their count by status, and for a success their bytes
 * and latency. Returns 0 or -ENOMEM.
 */
int metrics_new(const MetricsSources *sources, Metrics **ret);

/* Accepts NULL; returns NULL. */
Metrics *metrics_free(Metrics *m);

/*
 * Builds the Prometheus text document into *@ret (malloc()ed, NUL-terminated) and *@ret_len.
 * Returns 0 or -ENOMEM.
 */
int metrics_render(const Metrics *m, char **ret, size_t *ret_len);
