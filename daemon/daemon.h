/* SPDX-License-Identifier: MIT */
/*
 * Daemon: the one object that owns everything kvdistd runs: the control event loop and the root
 * object of each layer (memory, transports, links, transfers, comm domains, control), which it
 * builds, points at the layers below and wires to each other; signals, reload, the service
 * manager and metrics.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/hook.h"
#include "common/id-source.h"
#include "daemon/control/control-root.h"
#include "daemon/memory/memory.h"
#include "daemon/transport/transport-set.h"
#include "daemon/link/link-root.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/config.h"
#include "common/time-util.h"
#include "common/status.h"

struct event_base;
struct event;
typedef struct Cache Cache;
typedef struct Cluster Cluster;
typedef struct DomainRegistry DomainRegistry;
typedef struct Engine Engine;
typedef struct PeerListener PeerListener;
typedef struct Metrics Metrics;
typedef struct MetricsServer MetricsServer;
typedef struct Pool Pool;
typedef struct Service Service;
typedef struct Transport Transport;

typedef struct Daemon {
        struct event_base *base;
        Config *config;
        IdSource ids;            /* ids of everything, registration sequence numbers */
        Memory memory;           /* the pool; releasing caches */
        TransportSet transports; /* the copy engine, the transports, the RDMA devices */

        LinkRoot link;           /* node id, peers, clusters, links (daemon/link/) */
        TransferRoot transfer;   /* transfers, served transfers (daemon/transfer/) */
        DomainRegistry *domains; /* comm domains (daemon/domain/) */
        ControlRoot control;     /* client listener, connections (daemon/control/) */

        usec_t start_usec; /* CLOCK_MONOTONIC */

        Service *service;              /* READY/STATUS/WATCHDOG/STOPPING for the service manager */
        Metrics *metrics;              /* transfer outcomes for /metrics and kvdistctl metrics */
        MetricsServer *metrics_server; /* NULL unless metrics_listen is set */
        int argc;                      /* the command line, read again on SIGHUP (see reload.h) */
        char **argv;

        struct event *sig_term;
        struct event *sig_int;
        struct event *sig_hup;
        bool stopping;
        int exit_code;
} Daemon;

/*
 * Creates the daemon for @config (ownership passes to the daemon): the event loop, the pool,
 * the copy engine, the transports and the listening socket. Logs what failed.
 */
int daemon_new(Config *config, Daemon **ret);

/* Runs the control loop until SIGTERM/SIGINT or daemon_stop(); returns the exit code. */
int daemon_run(Daemon *d);

/*
 * Begins an orderly stop: no new connections, in-flight transfers fail with
 * STATUS_DAEMON_UNAVAILABLE, then the loop exits.
 */
void daemon_stop(Daemon *d, int exit_code);

/* When stopping and nothing is in flight any more: flushes replies and leaves the loop. */
void daemon_check_stopped(Daemon *d);

/* Tears everything down (the socket file is unlinked). Accepts NULL; returns NULL. */
Daemon *daemon_free(Daemon *d);

/* Where peers reach this daemon ("ip:port"), "" when it does not listen for them. */
const char *daemon_peer_address(const Daemon *d);

/*
 * The one-line summary (clusters, links, transfers) changed: the service manager hears of it
 * within its status interval (see service.h).
 */
void daemon_update_status(Daemon *d);

/* Writes the one-line summary into @buf of @size bytes. */
void daemon_format_status(Daemon *d, char *buf, size_t size);
