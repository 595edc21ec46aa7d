/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the transfer/ unit suites: a TransferRoot built by hand over an event base, a
 * LinkRoot, a Memory without a pool and a TransportSet whose same-node and TCP transports are
 * fakes (fake-transport.h), with clusters, caches in memfd regions seeded with patterns, a READY
 * peer that has no connection, and the transfer root's peer ops filled with a recorder. Nothing
 * here opens a socket or starts a thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/completion.h"
#include "common/error.h"
#include "common/id-source.h"
#include "common/limits.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "daemon/link/peer.h"
#include "daemon/memory/cache.h"
#include "daemon/memory/memory.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/served.h"
#include "daemon/transfer/transfer-codec.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport-set.h"
#include "tests/unit/fake-transport.h"

/* Bytes before, between and after the tensors of a fixture cache: they must stay untouched. */
#define FIXTURE_GUARD 64
/* Bytes of one batch slot or block of one tensor of a fixture cache (8 x 8 float16). */
#define FIXTURE_STRIDE 128

/* What transfer/ said to peers through TransferRoot.peer_ops. */
typedef struct PeerRecorder {
        int request_error; /* != 0: the request op fails with it */
        unsigned n_requests;
        TransferPeerRequest request; /* the last; its pointers are the transfer's */
        RemoteDesc request_local;
        Transfer *request_transfer;
        unsigned n_orphans;
        unsigned orphan_flags;
        unsigned n_cancels;
        uint64_t cancel_id;
        unsigned n_data_done;
        uint64_t data_done_id;
        int data_done_status;
        unsigned n_push_done;
        uint64_t push_done_id;
        int push_done_status;
        unsigned n_answers;
        uint64_t answer_request_id;
        TransferPeerAnswer answer; /* remote points at answer_remote; no RDMA arrays kept */
        RemoteDesc answer_remote;
        unsigned n_refusals;
        uint64_t refuse_request_id;
        Error refusal;
} PeerRecorder;

/* A client's Completion that records how transfer/ answered it. */
typedef struct ClientAnswer {
        Completion cpl;
        TransferResult result;
        unsigned n_replies;
        unsigned n_fails;
        unsigned n_drops;
        int status; /* of the fail */
        Error err;
} ClientAnswer;

typedef struct TransferFixture {
        struct event_base *base;
        IdSource ids;
        Limits limits;
        uint32_t sync_kv_timeout_ms;
        LinkRoot link;
        Memory memory;
        TransportSet transports;
        TransferRoot root;
        FakeTransport *shm; /* same-node transfers; copies */
        FakeTransport *tcp; /* transfers to and from the peer */
        Peer *peer;         /* READY, no connection; on no list of the link root */
        PeerRecorder rec;
} TransferFixture;

/* Builds @f: roots, fake transports, the peer, the recorder. */
void transfer_fixture_init(TransferFixture *f);

/* Frees everything @f built (the clusters with their links, caches and regions). */
void transfer_fixture_done(TransferFixture *f);

/* A client cluster @id of @f. */
Cluster *transfer_fixture_cluster(TransferFixture *f, uint64_t id);

/*
 * A remote-accessible cache of @c registered now: @num_tensors tensors of @units slots (or
 * blocks) of FIXTURE_STRIDE bytes, each tensor in one memfd region with FIXTURE_GUARD bytes
 * before, between and after them; the whole region holds the pattern @seed. A blocks cache is
 * named by @key (NULL: by its id only).
 */
Cache *transfer_fixture_cache(TransferFixture *f, Cluster *c, CacheKind kind, uint32_t num_tensors,
                              uint32_t units, const CacheKey *key, uint64_t seed);

/*
 * The expected image of @cache's region: the pattern @seed of the whole region (allocated; the
 * caller frees it), to which the test applies the spans a transfer moved.
 */
uint8_t *transfer_fixture_image(const Cache *cache, uint64_t seed);

/* Checks every byte of @cache's region against @image; fails the test at the first difference. */
void transfer_fixture_check_image(const Cache *cache, const uint8_t *image);

/* A link from @local over the fake peer to its cluster @remote_cluster_id, over f->tcp. */
Link *transfer_fixture_remote_link(TransferFixture *f, Cluster *local, uint64_t remote_cluster_id);

/* Prepares @a to be handed to transfer_start(). */
void transfer_fixture_answer_init(ClientAnswer *a);

/* The transfer that started last (the tail of the root's list); NULL when none is in flight. */
Transfer *transfer_fixture_last(TransferFixture *f);

/* The key of slot @index of cache @cache_id of cluster @cluster_id. */
CacheKey transfer_fixture_id_index(uint64_t cluster_id, uint64_t cache_id, uint32_t index);

/* The arguments of a whole-item *_CACHE transfer whose initiator's slot is @local_index. */
TransferArgs transfer_fixture_item_args(TransferKind kind, uint32_t local_index);

/* The served transfer that started last; NULL when none is in flight. */
Served *transfer_fixture_last_served(TransferFixture *f);

/* Runs @timer's callback now, from the event loop, as if its time had passed. */
void transfer_fixture_expire(TransferFixture *f, struct event *timer);
