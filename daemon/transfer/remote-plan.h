/* SPDX-License-Identifier: MIT */
/*
 * Remote plans: how two daemons agree on the byte stream of a transfer between them. Each end
 * knows its own cache and learns the other's shape (RemoteDesc: kind, tensors, sizes; never an
 * address). Both build the *canonical* plan, in which every tensor of either cache is its own
 * region starting at offset 0 (source tensors are regions 0..S-1, destination tensors S..S+D-1),
 * so the two ends compute the same segments in the same order from the same request; then each
 * maps its own side of every segment onto its real memory, bounds-checked.
 *
 * TransferArgs are the request fields that shape a plan, whether they came from a client
 * (kvdist.v1.Transfer) or from a peer (kvdist.v1.PeerTransfer).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/memory/cache.h"
#include "common/error.h"
#include "daemon/transfer/plan.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport.h"

struct Kvdist__V1__Transfer;
struct Kvdist__V1__PeerTransfer;
struct Kvdist__V1__PlanCacheDesc;

typedef struct RemoteDesc {
        bool blocks;
        uint32_t num_tensors;
        uint64_t tensor_size;
        uint64_t units;
} RemoteDesc;

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
} TransferArgs;

/* The plan-shaping fields of a client's Transfer (borrowed). */
void remote_plan_args_from_transfer(const struct Kvdist__V1__Transfer *m, TransferArgs *ret);

/* The plan-shaping fields of a peer's PeerTransfer (borrowed). */
void remote_plan_args_from_peer(const struct Kvdist__V1__PeerTransfer *m, TransferArgs *ret);

/* Whether the initiator reads from the remote cache (pull) or writes into it (push). */
bool remote_plan_kind_is_pull(TransferKind k);

/*
 * Checks the request against the key kinds each kind of transfer takes; PARAM_INVALID with a
 * message. -1 from @kind is already excluded by the caller's decoding.
 */
int remote_plan_args_check(const TransferArgs *a, CacheKeyKind key_kind, Error *err);

/*
 * Fills @pr (caches not set) for a transfer whose remote item was resolved to batch slot
 * @remote_index; @key_kind is the kind of the key naming the remote cache.
 */
void remote_plan_args_plan_request(const TransferArgs *a, CacheKeyKind key_kind,
                                   uint32_t remote_index, PlanRequest *pr);

/* Describes a local cache's shape. */
void remote_desc_from_cache(const Cache *cache, RemoteDesc *ret);

/*
 * Takes a peer's description of its cache. PARAM_INVALID for a shape no cache of ours could
 * have (no tensors or more than KVD_MAX_TENSORS, no units, a tensor size the units do not
 * divide).
 */
int remote_desc_from_proto(const struct Kvdist__V1__PlanCacheDesc *m, RemoteDesc *ret, Error *err);

/* Writes @desc into @m (which the caller initialised). */
void remote_desc_to_proto(const RemoteDesc *desc, struct Kvdist__V1__PlanCacheDesc *m);

/* Builds the canonical plan of @pr between caches shaped @src and @dst (plan_build()'s rules). */
int remote_plan_build(PlanRequest *pr, const RemoteDesc *src, const RemoteDesc *dst, Plan **ret,
                      Error *err);

/*
 * Maps one side of canonical @plan onto @cache: the source side when @cache_is_src, else the
 * destination side (whose tensors follow the @n_src_tensors source tensors). Writes
 * plan->n_segments entries to @ret_segs (the daemon's mapping of each segment: local and len) and
 * adds every region it touches, referenced, to @regions (room for KVD_MAX_TENSORS; *@n_regions
 * counts). -EFAULT when a segment falls outside its tensor's region (a planner bug, never a byte
 * moved).
 */
int remote_plan_map(const Plan *plan, const Cache *cache, bool cache_is_src, uint32_t n_src_tensors,
                    TransportSegment *ret_segs, Region **regions, uint32_t *n_regions);
