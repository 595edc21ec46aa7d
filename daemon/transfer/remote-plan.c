/* SPDX-License-Identifier: MIT */
/* Remote plans: the canonical plan both ends of a cross-node transfer build, and its mapping. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include <kvdist/kvdist.h>

#include "common/macro.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/remote-plan.h"
#include "common/status.h"

bool remote_plan_kind_is_pull(TransferKind k)
{
        return k == TRANSFER_PULL_CACHE || k == TRANSFER_PULL_BLOCKS;
}

int remote_plan_args_check(const TransferArgs *a, CacheKeyKind key_kind, Error *err)
{
        switch (a->kind) {
        case TRANSFER_PULL_CACHE:
        case TRANSFER_PUSH_CACHE:
                if (key_kind == CACHE_KEY_BLOCKS)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "a cache transfer names its item with a CacheKey or a "
                                         "CacheKeyByIdAndIndex, not a BlocksCacheKey");
                if (a->n_src_blocks > 0 || a->n_dst_blocks > 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "a cache transfer takes no block lists");
                return 0;
        case TRANSFER_PULL_BLOCKS:
                if (key_kind != CACHE_KEY_BLOCKS && a->n_src_blocks > 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "src_blocks must be empty when the source is a "
                                         "contiguous cache item");
                return 0;
        case TRANSFER_PUSH_BLOCKS:
                if (key_kind != CACHE_KEY_BLOCKS)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "push_blocks writes into a cache named by a "
                                         "BlocksCacheKey");
                return 0;
        }
        return error_set(err, STATUS_PARAM_INVALID, "transfer kind %d is not valid", a->kind);
}

void remote_plan_args_plan_request(const TransferArgs *a, CacheKeyKind key_kind,
                                   uint32_t remote_index, PlanRequest *pr)
{
        bool pull = remote_plan_kind_is_pull(a->kind);

        *pr = (PlanRequest){
                .src_layers = a->src_layers,
                .dst_layers = a->dst_layers,
                .tensor_num_per_layer = a->tensor_num_per_layer,
                .size = a->size,
                .src_slice = a->src_slice,
                .dst_slice = a->dst_slice,
        };
        switch (a->kind) {
        case TRANSFER_PULL_BLOCKS:
        case TRANSFER_PUSH_BLOCKS:
                pr->dst_blocks = a->dst_blocks;
                pr->n_dst_blocks = a->n_dst_blocks;
                pr->dst_facts = a->dst_facts;
                if (key_kind == CACHE_KEY_BLOCKS) {
                        pr->mode = PLAN_BLOCKS;
                        pr->src_blocks = a->src_blocks;
                        pr->n_src_blocks = a->n_src_blocks;
                        pr->src_facts = a->src_facts;
                } else {
                        pr->mode = PLAN_ITEM_TO_BLOCKS;
                        pr->src_index = remote_index;
                        pr->size = -1;
                }
                break;
        case TRANSFER_PULL_CACHE:
        case TRANSFER_PUSH_CACHE:
                pr->mode = PLAN_ITEM;
                pr->src_index = pull ? remote_index : a->local_batch_index;
                pr->dst_index = pull ? a->local_batch_index : remote_index;
                break;
        }
}

void remote_desc_from_cache(const Cache *cache, RemoteDesc *ret)
{
        *ret = (RemoteDesc){
                .blocks = cache->kind == CACHE_BLOCKS,
                .num_tensors = cache->desc.num_tensors,
                .tensor_size = cache->tensor_size,
                .units = cache->units,
        };
}

int remote_desc_check(const RemoteDesc *m, RemoteDesc *ret, Error *err)
{
        if (!m)
                return error_set(err, STATUS_PARAM_INVALID, "the peer's cache shape is missing");
        if (m->num_tensors == 0 || m->num_tensors > KVD_MAX_TENSORS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the peer's cache has %" PRIu32 " tensors, 1..%d are possible",
                                 m->num_tensors, KVD_MAX_TENSORS);
        if (m->units == 0 || m->tensor_size == 0 || m->tensor_size % m->units != 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the peer's cache has %" PRIu64 " units in %" PRIu64
                                 " bytes per tensor",
                                 m->units, m->tensor_size);
        *ret = *m;
        return 0;
}

/* Describes a cache shape to the planner with its tensors as regions @base, @base + 1, ... */
static void remote_plan_cache(const RemoteDesc *desc, uint32_t base, PlanTensor *tensors,
                              PlanCache *ret)
{
        for (uint32_t t = 0; t < desc->num_tensors; t++)
                tensors[t] = (PlanTensor){.region = base + t, .offset = 0};
        *ret = (PlanCache){
                .blocks = desc->blocks,
                .num_tensors = desc->num_tensors,
                .tensor_size = desc->tensor_size,
                .units = desc->units,
                .stride = desc->tensor_size / desc->units,
                .tensors = tensors,
        };
}

int remote_plan_check(PlanRequest *pr, const RemoteDesc *src, const RemoteDesc *dst,
                      PlanTensor *tensors, PlanCache caches[2], PlanChecked *ret, Error *err)
{
        if (src->num_tensors > KVD_MAX_TENSORS || dst->num_tensors > KVD_MAX_TENSORS ||
            src->units == 0 || dst->units == 0)
                return error_set(err, STATUS_PARAM_INVALID, "a cache shape is not valid");
        remote_plan_cache(src, 0, tensors, &caches[0]);
        remote_plan_cache(dst, src->num_tensors, tensors + src->num_tensors, &caches[1]);
        pr->src = &caches[0];
        pr->dst = &caches[1];
        return plan_check(pr, ret, err);
}

int remote_plan_regions(const Cache *cache, Region **regions, uint32_t *n_regions)
{
        for (uint32_t t = 0; t < cache->desc.num_tensors; t++) {
                Region *region = cache->tensors[t].region;
                bool known = false;

                for (uint32_t k = 0; k < *n_regions && !known; k++)
                        known = regions[k] == region;
                if (known)
                        continue;
                if (*n_regions >= KVD_MAX_TENSORS)
                        return -E2BIG;
                regions[(*n_regions)++] = region_ref(region);
        }
        return 0;
}

int remote_plan_map(const Plan *plan, const Cache *cache, bool cache_is_src, uint32_t n_src_tensors,
                    TransportSegment *ret_segs)
{
        uint64_t step = cache_is_src ? plan->src_step : plan->dst_step;

        for (size_t i = 0; i < plan->n_segments; i++) {
                const PlanSegment *s = &plan->segments[i];
                uint32_t t = cache_is_src ? s->src_region : s->dst_region - n_src_tensors;
                uint64_t off = cache_is_src ? s->src_offset : s->dst_offset, start, end, last;
                const CacheTensor *ct;

                if (t >= cache->desc.num_tensors)
                        return -EFAULT;
                ct = &cache->tensors[t];
                if (!plan_pieces_end(off, s->len, s->count, step, &last) ||
                    last > cache->tensor_size || ADD_OVERFLOW(ct->offset, off, &start) ||
                    ADD_OVERFLOW(ct->offset, last, &end) || end > ct->region->size)
                        return -EFAULT;
                ret_segs[i] = (TransportSegment){
                        .region = ct->region,
                        .offset = start,
                        .len = s->len,
                        .count = s->count,
                };
        }
        return 0;
}

int remote_plan_lay(const PlanRequest *pr, const PlanChecked *checked, const Cache *cache,
                    bool cache_is_src, uint64_t want_segments, Plan **ret_plan,
                    TransportSegment **ret_segs, Error *err)
{
        _cleanup_(plan_freep) Plan *plan = NULL;
        _cleanup_free_ TransportSegment *segs = NULL;
        int r;

        r = plan_make(pr, checked, &plan, err);
        if (r < 0)
                return r;
        if (want_segments != REMOTE_PLAN_ANY_SEGMENTS && plan->n_segments != want_segments)
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "the peer planned %" PRIu64 " bytes in %" PRIu64 " segments, we "
                                 "planned %" PRIu64 " in %zu",
                                 checked->total_bytes, want_segments, plan->total_bytes,
                                 plan->n_segments);
        /* every entry is written by remote_plan_map() (no zeroing of 11 MB for 100,000 blocks) */
        segs = malloc(MAX(plan->n_segments, (size_t)1) * sizeof(TransportSegment));
        if (!segs)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        r = remote_plan_map(plan, cache, cache_is_src, pr->src->num_tensors, segs);
        if (r < 0)
                return error_set(err, STATUS_FAILED, "the plan does not fit cache %" PRIu64,
                                 cache->id);
        *ret_plan = TAKE_PTR(plan);
        *ret_segs = TAKE_PTR(segs);
        return 0;
}

int remote_plan_prepared(int r)
{
        return r == STATUS_OUT_OF_MEMORY ? -ENOMEM : -EPROTO;
}

void remote_plan_part(const Plan *plan, const TransportSegment *segs, bool cache_is_src,
                      TransportPart *ret)
{
        *ret = (TransportPart){
                .segs = segs,
                .n_segs = plan->n_segments,
                .local_step = cache_is_src ? plan->src_step : plan->dst_step,
                .remote_step = cache_is_src ? plan->dst_step : plan->src_step,
        };
}

void remote_plan_job_steps(const Plan *plan, bool cache_is_src, TransportJob *job)
{
        job->local_step = cache_is_src ? plan->src_step : plan->dst_step;
        job->remote_step = cache_is_src ? plan->dst_step : plan->src_step;
}
