/* SPDX-License-Identifier: MIT */
/*
 * Transfer: one pull or push in flight. It resolves the caches on both sides, holds references
 * on every region it touches, turns the request into a plan, hands the plan to the link's
 * transport and answers the client when the transport reports the last byte landed, when the
 * deadline passes (STATUS_TIMEOUT) or when an end goes away (STATUS_PEER_LOST). The reply to a
 * pull is only sent after the transport has stopped writing into the caller's memory, so nothing
 * lands after it. A push only reads the caller's memory: one that fails is answered at once, and
 * the transfer lives on (holding its regions) until the transport let go of the source.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon/memory/cache.h"
#include "common/clist.h"
#include "common/completion.h"
#include "common/error.h"
#include "common/time-util.h"
#include "daemon/transport/transport.h"

struct Kvdist__V1__Transfer;

struct event;
typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct TransferRoot TransferRoot;
typedef struct Link Link;
typedef struct Peer Peer;
struct ProtobufCMessage;
typedef struct PeerCall PeerCall;
typedef struct Plan Plan;
typedef struct Region Region;
typedef struct Transfer Transfer;

typedef enum TransferKind {
        TRANSFER_PULL_CACHE = 1,
        TRANSFER_PULL_BLOCKS = 2,
        TRANSFER_PUSH_CACHE = 3,
        TRANSFER_PUSH_BLOCKS = 4,
} TransferKind;

typedef enum TransferState {
        TRANSFER_RUNNING,  /* the transport moves bytes */
        TRANSFER_STOPPING, /* failed or cancelled; waiting for the transport to let go */
        TRANSFER_DONE,
        _TRANSFER_STATE_MAX,
        _TRANSFER_STATE_INVALID = -22,
} TransferState;

#define TRANSFER_MAX_REGIONS (2 * 240)
#define TRANSFER_NOTIFY_MAX 256

/* Where a transfer to or from a peer daemon stands. */
typedef enum RemotePhase {
        REMOTE_NONE,      /* a local transfer */
        REMOTE_REQUESTED, /* PeerTransfer sent, waiting for the peer's answer */
        REMOTE_DATA,      /* the data plane moves the bytes */
        REMOTE_FINISHED,  /* the data plane let go; a push may wait for the peer's word */
} RemotePhase;

struct Transfer {
        TransferRoot *root;
        uint64_t id;
        TransferKind kind;
        TransferState state;
        bool started;     /* accounted on its cluster, link, caches and the daemon */
        Completion *done; /* answers the client; NULL once answered or the client is gone */
        const struct Kvdist__V1__Transfer *msg; /* the request, kept by @done; NULL with it */
        Cluster *cluster;                       /* the requesting cluster; NULL once it is gone */
        uint64_t cluster_id;
        Link *link; /* NULL once the link is gone */
        uint64_t remote_cluster_id;
        Transport *transport;
        Cache *caches[2]; /* source and destination (NULL: the peer's); n_busy counts us */
        Region *regions[TRANSFER_MAX_REGIONS]; /* referenced; plan segments index these */
        uint32_t n_regions;
        Plan *plan;
        TransportSegment *segs; /* our side of the plan, resolved */
        TransportJob job;       /* the data job, once submitted */
        int status;             /* the first failure, STATUS_OK while fine */
        Error err;
        bool consume_key; /* a local pull by ReqKey of a pool cache ends the key when it
                           * succeeds (a peer's: the peer ends it, served.c) */
        CacheKey key;
        uint8_t notify[TRANSFER_NOTIFY_MAX]; /* push: for the destination cluster */
        size_t notify_len;
        bool has_notify;

        /* transfers to and from a peer daemon (transfer-remote.c) */
        RemotePhase phase;
        Peer *peer;       /* the peer, while on its list of transfers */
        PeerCall *call;   /* REMOTE_REQUESTED: our PeerTransfer */
        bool remote_done; /* push: the peer said every byte landed (or failed) */
        int remote_status;
        bool one_sided; /* over RDMA: we read or write the peer's memory ourselves */
        CList link_peer;
        usec_t start_usec;
        usec_t deadline_usec;
        struct event *timer;
        CList link_daemon;
        CList link_cluster;
        CList link_link;
};

/*
 * Validates and starts in @root the transfer @m asks for (a kvdist.v1.Transfer from @cluster,
 * kept by @done until it is answered). On success the transfer holds @done and answers it later. On
 * failure returns a STATUS_* status with @err filled; @done is still the caller's.
 */
int transfer_start(TransferRoot *root, Cluster *cluster, const struct Kvdist__V1__Transfer *m,
                   Completion *done, Error *err);

/*
 * Called once nothing moves @x's bytes any more: @status is STATUS_OK when every byte landed.
 * Answers the client, updates counters and frees @x.
 */
void transfer_complete(Transfer *x, int status);

/*
 * Fails @x with @status (STATUS_TIMEOUT, STATUS_PEER_LOST, ...): the transport is asked to stop.
 * A pull is answered once the transport stopped, a push at once.
 */
void transfer_fail(Transfer *x, int status, const char *fmt, ...) _printf_(3, 4);

/* The client that asked for @x went away: no answer will be sent; @x stops as transfer_fail. */
void transfer_detach_cluster(Transfer *x);

/* The link of @x is going away. */
void transfer_detach_link(Transfer *x, int status);

/*
 * Makes transfer/ listen to link/'s events: a cluster going away, a link going down, a peer's
 * link to our cluster going away, a peer lost fail the transfers over them. Registers the
 * handlers of the peer messages about transfers. Once, at start, after domain/ (whose members
 * hear of a cluster going away first).
 */
void transfer_listen(TransferRoot *root);

const char *transfer_kind_to_string(TransferKind k);

/* Whether a successful @kind transfer by @key of @cache ends that key: a pull by CacheKey of a
 * pool cache (LLM-DataDist's pull releases what it pulled). */
bool transfer_pull_ends_key(TransferKind kind, const CacheKey *key, const Cache *cache);

/*
 * Ends @key (and its hold) after a pull by it read @read successfully; nothing when the key is
 * gone or names another cache by now. A cache nothing holds any more is released.
 */
void transfer_end_key(LinkRoot *link, const CacheKey *key, const Cache *read);

/* transfer-remote.c: the parts of a transfer whose other end is behind a peer daemon. */

/*
 * Continues transfer_start() for a link over a peer: asks the peer, which resolves the key and
 * checks the request against what it has now. A STATUS_* status on failure.
 */
int transfer_remote_start(Transfer *x, const struct Kvdist__V1__Transfer *m, Error *err);

/* A peer says one of our transfers it served is over (transfer_listen() registers it). */
void transfer_remote_handle_done(void *userdata, Peer *p, uint64_t request_id,
                                 const struct ProtobufCMessage *msg);

/* Stops a remote transfer (transfer_fail() calls it instead of the transport's cancel). */
void transfer_remote_cancel(Transfer *x);
