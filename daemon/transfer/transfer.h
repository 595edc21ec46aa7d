/* SPDX-License-Identifier: MIT */
/*
 * Transfer: one pull or push in flight. It resolves the caches on both sides, holds references
 * on every region it touches, turns the request into a plan, hands the plan to the link's
 * transport and answers the client when the transport reports the last byte landed, when the
 * deadline passes (KVD_E_TIMEOUT) or when an end goes away (KVD_E_PEER_LOST). The reply is only
 * sent after the transport has stopped touching memory, so nothing lands after it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "clist.h"
#include "error.h"
#include "time-util.h"

struct event;
typedef struct Cluster Cluster;
typedef struct Daemon Daemon;
typedef struct Link Link;
typedef struct Plan Plan;
typedef struct Region Region;
typedef struct Request Request;
typedef struct Transfer Transfer;
typedef struct Transport Transport;

typedef enum TransferKind {
        TRANSFER_PULL_CACHE = 1,
        TRANSFER_PULL_BLOCKS = 2,
        TRANSFER_PUSH_CACHE = 3,
        TRANSFER_PUSH_BLOCKS = 4,
} TransferKind;

typedef enum TransferState {
        TRANSFER_RUNNING,       /* the transport moves bytes */
        TRANSFER_STOPPING,      /* failed or cancelled; waiting for the transport to let go */
        TRANSFER_DONE,
        _TRANSFER_STATE_MAX,
        _TRANSFER_STATE_INVALID = -22,
} TransferState;

#define TRANSFER_MAX_REGIONS (2 * 240)

struct Transfer {
        Daemon *daemon;
        uint64_t id;
        TransferKind kind;
        TransferState state;
        bool started;           /* accounted on its cluster, link, caches and the daemon */
        Request *req;           /* the client's request; NULL once the client is gone */
        Cluster *cluster;       /* the requesting cluster; NULL once it is gone */
        uint64_t cluster_id;
        Link *link;             /* NULL once the link is gone */
        uint64_t remote_cluster_id;
        Transport *transport;
        Cache *caches[2];       /* source and destination; their n_busy counts this transfer */
        Region *regions[TRANSFER_MAX_REGIONS]; /* referenced; plan segments index these */
        uint32_t n_regions;
        Plan *plan;
        void *transport_data;   /* the transport's per-transfer state */
        int status;             /* the first failure, KVD_OK while fine */
        Error err;
        bool consume_key;       /* a pull by ReqKey ends that key's hold when it succeeds */
        CacheKey key;
        usec_t start_usec;
        usec_t deadline_usec;
        struct event *timer;
        CList link_daemon;
        CList link_cluster;
        CList link_link;
};

/*
 * Validates and starts the transfer @req asks for (a kvdist.v1.Transfer from @cluster). On
 * success the transfer owns @req and answers it later. On failure returns a KVD_E_* status with
 * @err filled; @req is still the caller's.
 */
int transfer_start(Cluster *cluster, Request *req, Error *err);

/*
 * Called by a transport when it has stopped touching @x's memory: @status is 0 when every byte
 * landed. Answers the client, updates counters and frees @x.
 */
void transfer_complete(Transfer *x, int status);

/*
 * Fails @x with @status (KVD_E_TIMEOUT, KVD_E_PEER_LOST, ...): the transport is asked to stop
 * and the answer follows its completion.
 */
void transfer_fail(Transfer *x, int status, const char *fmt, ...) _printf_(3, 4);

/* The client that asked for @x went away: no answer will be sent; @x stops as transfer_fail. */
void transfer_detach_cluster(Transfer *x);

/* The link of @x is going away. */
void transfer_detach_link(Transfer *x, int status);

const char *transfer_kind_to_string(TransferKind k);
