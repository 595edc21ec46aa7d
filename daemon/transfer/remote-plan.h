/* SPDX-License-Identifier: MIT */
/*
 * Remote plans: how two daemons agree on the byte stream of a transfer between them. Each end
 * knows its own cache and learns the other's shape (RemoteDesc: kind, tensors, sizes; never an
 * address). Both build the *canonical* plan, in which every tensor of either cache is its own
 * region starting at offset 0 (source tensors are regions 0..S-1, destination tensors S..S+D-1),
 * so the two ends compute the same segments in the same order from the same request; then each
 * maps its own side of every segment onto its real memory, bounds-checked.
 *
 * TransferArgs (transfer.h) are the request fields that shape a plan, whether they came from a
 * client or from a peer.
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

typedef struct RemoteDesc {
        bool blocks;
        uint32_t num_tensors;
        uint64_t tensor_size;
        uint64_t units;
} RemoteDesc;

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
 * Takes a peer's description @desc of its cache (NULL: the peer sent none) into @ret.
 * PARAM_INVALID for a missing one or a shape no cache of ours could have (no tensors or more
 * than KVD_MAX_TENSORS, no units, a tensor size the units do not divide).
 */
int remote_desc_check(const RemoteDesc *desc, RemoteDesc *ret, Error *err);

/*
 * plan_check() of @pr between caches shaped @src and @dst, described to the planner in @caches
 * (source, destination) and @tensors (room for both caches' tensors, source first), which @pr
 * points at: plan_make() of @pr needs them unchanged.
 */
int remote_plan_check(PlanRequest *pr, const RemoteDesc *src, const RemoteDesc *dst,
                      PlanTensor *tensors, PlanCache caches[2], PlanChecked *ret, Error *err);

/*
 * References every region @cache's tensors lie in that @regions (room for KVD_MAX_TENSORS;
 * *@n_regions counts) does not hold yet: what a plan on @cache may touch. -E2BIG past the room.
 */
int remote_plan_regions(const Cache *cache, Region **regions, uint32_t *n_regions);

/*
 * Maps one side of canonical @plan onto @cache: the source side when @cache_is_src, else the
 * destination side (whose tensors follow the @n_src_tensors source tensors). Writes
 * plan->n_segments entries to @ret_segs (the daemon's mapping of each segment: local, len and
 * count; the steps between its spans come from remote_plan_job_steps()). Reads only @plan and
 * the cache's tensor table, so it may run off the loop while the cache stays (busy).
 * -EFAULT when a segment falls outside its tensor's region (a planner bug, never a byte moved).
 */
int remote_plan_map(const Plan *plan, const Cache *cache, bool cache_is_src, uint32_t n_src_tensors,
                    TransportSegment *ret_segs);

/* remote_plan_lay()'s @want_segments when the count is not known to compare with. */
#define REMOTE_PLAN_ANY_SEGMENTS UINT64_MAX

/*
 * Lays the plan of @pr, checked into @checked by remote_plan_check() (which @pr's caches came
 * from), and maps our side of it onto @cache (remote_plan_map()): the plan and its segments,
 * malloc()ed, in *@ret_plan and *@ret_segs. A plan of other than @want_segments segments is the
 * peer's mistake (PROTOCOL_MISMATCH). Reads only @pr, @checked and the cache's tensor table, so
 * it may run on a copy thread while they stay unchanged.
 */
int remote_plan_lay(const PlanRequest *pr, const PlanChecked *checked, const Cache *cache,
                    bool cache_is_src, uint64_t want_segments, Plan **ret_plan,
                    TransportSegment **ret_segs, Error *err);

/* The errno a job's prepare step returns for remote_plan_lay()'s status @r (the Error says why). */
int remote_plan_prepared(int r);

/* @plan and its @segs as the share a job's prepare step returns, for the side remote_plan_map()
 * mapped. */
void remote_plan_part(const Plan *plan, const TransportSegment *segs, bool cache_is_src,
                      TransportPart *ret);

/* Sets @job's steps between the spans of a segment for the side remote_plan_map() mapped. */
void remote_plan_job_steps(const Plan *plan, bool cache_is_src, TransportJob *job);
