/* SPDX-License-Identifier: MIT */
/*
 * Served: a peer daemon's pull from or push into one of our clusters' caches, over an inbound
 * link, or, links being two-way, over a link our cluster made to the peer's (the request names
 * it by the id the peer granted, PeerTransfer.linked_link_id). The peer's request is checked
 * here as untrusted input: the link must exist, the key must name a cache of our cluster at its
 * end that was registered before the link (or comes from the pool) and is remote-accessible, and
 * the plan is built from our own cache (the peer only describes its side's shape), so no byte
 * outside that cache moves whatever the peer sends. The cache is held busy and its regions
 * referenced until the data plane has let go of them.
 *
 * Pull: we answer with our cache's shape and send the bytes as the peer's data job. Push: we
 * register a receive job, answer with its id, and once every byte landed deliver the push's
 * notification and tell the peer (PeerTransferDone). One-sided (remote_access) we answer with the
 * descriptors of the cache's tensors, packed by the transport that reaches peers' memory, and
 * hold the cache until the peer says its reads or writes completed (PeerRemoteDone); a push's
 * notification is delivered then.
 *
 * A pull by CacheKey of a pool cache ends that key once every byte landed, which only the
 * initiator knows: over TCP too it sends PeerRemoteDone when its receive job finished, and we end
 * the key when that word says OK. A pull's notification waits for the same word (one-sided,
 * the word that its reads completed): it tells our cluster that every byte was read.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon/memory/cache.h"
#include "common/clist.h"
#include "common/error.h"
#include "daemon/transfer/plan.h"
#include "common/time-util.h"
#include "daemon/transport/transport.h"

#include <kvdist/kvdist.h>

struct event;
typedef struct TransferRoot TransferRoot;
typedef struct InLink InLink;
typedef struct Link Link;
typedef struct Peer Peer;
typedef struct Region Region;
typedef struct Served Served;

#define NOTIFY_MAX_BYTES 256

typedef enum ServedState {
        SERVED_RUNNING,  /* the data plane moves the bytes */
        SERVED_STOPPING, /* failed; waiting for the data plane to let go */
        _SERVED_STATE_MAX,
        _SERVED_STATE_INVALID = -22,
} ServedState;

struct Served {
        TransferRoot *root;
        uint64_t id; /* push: the data job id the peer sends under */
        ServedState state;
        bool pull;             /* the peer pulls: we send */
        bool remote_access;    /* one-sided: the peer reads or writes the cache itself */
        Peer *peer;            /* NULL once lost */
        InLink *inlink;        /* NULL once gone */
        Link *link;            /* or our cluster's link to the peer's, NULL once gone */
        bool moving;           /* the data job runs: its callback is still to come */
        uint64_t initiator_id; /* the peer's transfer id (pull: also its receive job) */
        uint64_t cluster_id;   /* ours */
        uint64_t remote_cluster_id;
        Cache *cache; /* n_busy counts this */
        Region *regions[KVD_MAX_TENSORS];
        uint32_t n_regions;
        /* The plan checked on the loop; over TCP the data job's prepare step lays it on a copy
         * thread from these (unchanged until the job is done), and the peer is answered once the
         * job reached the data plane. */
        PlanRequest prep_req;
        PlanCache prep_caches[2]; /* source, destination */
        PlanTensor *prep_tensors; /* both caches' tensors, source first */
        PlanChecked prep_checked;
        uint64_t *prep_blocks[2]; /* the request's block lists, ours (source, destination) */
        Error lay_err;            /* why laying the plan failed */
        Plan *plan;               /* until laid: the copy thread's */
        TransportSegment *segs;   /* our side of the plan in our memory */
        uint64_t request_id;      /* the peer's request */
        uint32_t remote_index;    /* the batch slot its key resolved to */
        bool answered;            /* the peer was told OK */
        TransportJob job;         /* over TCP: sends (pull) or receives (push) our side */
        int status;               /* first failure */
        CacheKey key;             /* the peer's key for our cache */
        bool end_key;             /* a pull by CacheKey of a pool cache: the key ends with it */
        bool await_word;          /* end_key or a pull's notification over TCP: once our bytes
                                   * are sent, wait for the initiator's word (PeerRemoteDone) that
                                   * they all landed */
        bool word;                /* that word came */
        int word_status;
        uint8_t notify[NOTIFY_MAX_BYTES];
        size_t notify_len;
        bool has_notify;
        usec_t start_usec;
        struct event *timer; /* a bound on how long the peer may take */
        CList link_peer;
        CList link_inlink; /* on inlink->served or link->served */
        CList link_daemon;
};

/* The inbound link of @s is going away: the transfer stops with @status. */
void served_detach_inlink(Served *s, int status);

/* The link @s is served over (our cluster made it to the peer's) is going away: as above. */
void served_detach_link(Served *s, int status);

/* Stops every served transfer (daemon shutdown). */
void served_stop_all(TransferRoot *root, int status);

/* @p is lost (LinkEvents.peer_lost): the transfers it asked of us fail, before its RDMA
 * endpoints are flushed. */
void served_on_peer_lost(Peer *p);

/* The peer messages served transfers handle (a peer's transfer, its cancel, the end of an RDMA
 * transfer the peer ran on our memory) are declared in transfer-codec.h, whose codec calls them. */
