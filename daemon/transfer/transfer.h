/* SPDX-License-Identifier: MIT */
/*
 * Transfer: one pull or push in flight. It resolves the caches on both sides, holds references
 * on every region it touches, turns the request into a plan, hands the plan to the link's
 * transport and answers the client when the transport reports the last byte landed, when the
 * deadline passes (STATUS_TIMEOUT) or when an end goes away (STATUS_PEER_LOST). The reply to a
 * pull is only sent after the transport has stopped writing into the caller's memory, so nothing
 * lands after it. A push that fails is answered once nothing of it can land at the destination
 * any more: the transport let go (same node, RDMA: its queue pairs are flushed), or, over the
 * peer's data streams, the receiving daemon said its receive job stopped (PeerTransferDone) or
 * the fence passed (the receiving daemon's own deadline for the job, which its I/O threads
 * enforce, is over by then). Such a push may be answered before its sender let go of the
 * source: it only reads it, and the transfer lives on (holding its regions) until then.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon/memory/cache.h"
#include "common/clist.h"
#include "common/completion.h"
#include "common/error.h"
#include "common/time-util.h"
#include "daemon/transfer/plan.h"
#include "daemon/transport/transport.h"

struct event;
typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct TransferRoot TransferRoot;
typedef struct Link Link;
typedef struct InLink InLink;
typedef struct Peer Peer;
typedef struct PeerCall PeerCall;
typedef struct Region Region;
typedef struct Transfer Transfer;
typedef struct TransportChannel TransportChannel;
typedef struct User User;

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

/* The fields of a request that shape its plan, whether a client or a peer asked (borrowed). */
typedef struct TransferArgs {
        TransferKind kind;
        const uint64_t *src_blocks;
        size_t n_src_blocks;
        const uint64_t *dst_blocks;
        size_t n_dst_blocks;
        uint32_t local_batch_index; /* *_CACHE: the initiator's batch slot */
        int64_t size;
        PlanLayers src_layers;
        PlanLayers dst_layers;
        uint32_t tensor_num_per_layer;
        PlanSlice src_slice; /* *_BLOCKS: of each block; length 0: whole blocks */
        PlanSlice dst_slice;
        PlanListFacts src_facts; /* of the lists, when their decoding found out */
        PlanListFacts dst_facts;
} TransferArgs;

/*
 * A client's pull or push as control/ decoded it, once: the transfer keeps it to the end.
 * Nothing in it is checked yet (transfer_start() does); it owns its block lists and
 * notification (transfer_request_done() frees them).
 */
typedef struct TransferRequest {
        TransferArgs args; /* the block lists are @src_blocks and @dst_blocks */
        CacheKey key;      /* the remote cache: pull the source, push the destination */
        Error key_err;     /* code != 0: the key did not decode, and why */
        uint64_t local_cache_id;
        bool src_layers_set; /* the client named the layer ranges (a peer is told as much) */
        bool dst_layers_set;
        uint32_t timeout_ms; /* 0: the cluster's sync_kv_timeout */
        uint8_t *notify;     /* for the key's cluster: a push's destination, a pull's source */
        size_t notify_len;
        uint64_t *src_blocks; /* owned (malloc()ed), the lists of @args */
        uint64_t *dst_blocks;
} TransferRequest;

/* What a transfer that succeeded moved: the client's answer says it. */
typedef struct TransferResult {
        uint64_t bytes;
        uint32_t segments; /* copy operations after merging */
} TransferResult;

/* Frees what @req owns and clears it. */
void transfer_request_done(TransferRequest *req);

/* Where a transfer to or from a peer daemon stands. */
typedef enum RemotePhase {
        REMOTE_NONE,      /* a local transfer */
        REMOTE_REQUESTED, /* PeerTransfer sent, waiting for the peer's answer */
        REMOTE_DATA,      /* the data plane moves the bytes */
        REMOTE_FINISHED,  /* the data plane let go; a push may wait for the peer's word */
} RemotePhase;

/* A share of a transfer planned on a copy thread: its plan, resolved, or why it failed. */
typedef struct TransferPart {
        Plan *plan;
        TransportSegment *segs;
        Error err;
} TransferPart;

struct Transfer {
        TransferRoot *root;
        uint64_t id;
        TransferKind kind;
        TransferState state;
        bool started;           /* accounted on its cluster, link, caches and the daemon */
        Completion *done;       /* answers the client; NULL once answered or the client is gone */
        TransferRequest req;    /* as the client asked it, decoded */
        TransferResult *result; /* filled before @done is answered OK */
        Cluster *cluster;       /* the requesting cluster; NULL once it is gone */
        User *user;             /* its uid, charged one transfer in flight; for its notify */
        uint64_t cluster_id;
        Link *link;     /* NULL once the link is gone */
        bool reverse;   /* @link was made by the remote cluster to ours (links are two-way) */
        InLink *inlink; /* or the peer's cluster linked to ours: we move bytes over it */
        uint64_t remote_cluster_id;
        Transport *transport;
        Cache *caches[2]; /* source and destination (NULL: the peer's); n_busy counts us */
        Region *regions[TRANSFER_MAX_REGIONS]; /* referenced; plan segments index these */
        uint32_t n_regions;
        Plan *plan;
        uint64_t total_bytes;   /* what the plan moves, known once the request is checked */
        TransportSegment *segs; /* our side of the plan, resolved */
        /* A big transfer between two clusters of this daemon, and every transfer with a peer
         * daemon, is planned on a copy thread (transfer_prepare(), transfer_remote_prepare())
         * from these, set on the loop before and unchanged until its job is done; until then
         * @parts are that thread's. */
        PlanRequest prep_req;
        PlanCache prep_caches[2]; /* source, destination */
        PlanTensor *prep_tensors; /* both caches' tensors, source first */
        PlanChecked prep_checked;
        TransferPart *parts; /* the shares it is planned in, each that thread's alone */
        size_t n_parts;
        TransportJob job; /* the data job, once submitted */
        int status;       /* the first failure, STATUS_OK while fine */
        Error err;
        bool consume_key; /* a local pull by ReqKey of a pool cache ends the key when it
                           * succeeds (a peer's: the peer ends it, served.c) */

        /* transfers to and from a peer daemon (transfer-remote.c) */
        RemotePhase phase;
        uint64_t remote_segments; /* the segments the peer planned (its answer) */
        Peer *peer;               /* the peer, while on its list of transfers */
        PeerCall *call;           /* REMOTE_REQUESTED: our PeerTransfer */
        bool remote_done;         /* push: the peer said every byte landed (or failed) */
        int remote_status;
        uint32_t budget_ms;   /* the time the peer was given for the transfer (PeerTransfer) */
        usec_t answered_usec; /* when the peer's answer came: its deadline ends by then + budget */
        struct event *fence;  /* a failed push over the streams: the latest it waits for the
                               * peer's word that its receiver stopped */
        bool fenced;          /* that fence passed */
        bool remote_access;   /* one-sided: our transport reads or writes the peer's memory
                               * itself (transport_caps(transport)->remote_access) */
        TransportChannel *channel; /* remote_access: the link's or inlink's channel to the peer */
        CList link_peer;
        usec_t start_usec;
        usec_t deadline_usec;
        struct event *timer;
        CList link_daemon;
        CList link_cluster;
        CList link_link; /* on link->transfers or inlink->transfers */
};

/*
 * Validates and starts in @root the transfer @req asks for (from @cluster), taking what @req owns
 * either way (it is left empty). On success the transfer holds @done and answers it later: on
 * success with completion_reply_ok() once *@ret_result (which the caller keeps as long as @done)
 * says what moved. On failure returns a STATUS_* status with @err filled; @done is still the
 * caller's.
 */
int transfer_start(TransferRoot *root, Cluster *cluster, TransferRequest *req, Completion *done,
                   TransferResult *ret_result, Error *err);

/*
 * Called once nothing moves @x's bytes any more: @status is STATUS_OK when every byte landed.
 * Answers the client, updates counters and frees @x.
 */
void transfer_complete(Transfer *x, int status);

/*
 * Fails @x with @status (STATUS_TIMEOUT, STATUS_PEER_LOST, ...): the transport is asked to stop.
 * The client is answered once nothing of @x can land any more (see the top of this file).
 */
void transfer_fail(Transfer *x, int status, const char *fmt, ...) _printf_(3, 4);

/*
 * Cancels the transfer that holds @done (the completion given to transfer_start()): it stops as
 * at its deadline and answers @done with STATUS_CANCELLED once nothing of it can land any more.
 * Returns whether it was running and now stops; false when @done is not a transfer's or its
 * transfer stops already (it answers as it would have).
 */
bool transfer_cancel_held(Completion *done);

/*
 * @x failed and nothing of it can land anywhere any more, though its transport may still hold
 * its (only read) source: the client is answered now. A no-op for a transfer that is running.
 */
void transfer_answer_settled(Transfer *x);

/* The client that asked for @x went away: no answer will be sent; @x stops as transfer_fail. */
void transfer_detach_cluster(Transfer *x);

/* The link of @x is going away. */
void transfer_detach_link(Transfer *x, int status);

/* The inbound link @x runs over (the peer's cluster linked to ours) is going away. */
void transfer_detach_inlink(Transfer *x, int status);

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
int transfer_remote_start(Transfer *x, Error *err);

/* Stops a remote transfer (transfer_fail() calls it instead of the transport's cancel). */
void transfer_remote_cancel(Transfer *x);

/* The peer of @x is lost (@x is on its list of transfers): @x leaves it and fails, or, when it
 * only waited for the peer's word, ends. */
void transfer_remote_on_peer_lost(Transfer *x);
