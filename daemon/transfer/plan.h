/* SPDX-License-Identifier: MIT */
/*
 * Transfer planner: turns a pull/push request (two caches, block lists or batch slots, layer
 * ranges) into the list of byte copies it means, validated against both caches and with runs
 * that are contiguous on both sides merged into one segment. It knows nothing of transports:
 * a segment names its regions by small indices into the request's region table, so the same
 * plan drives a local copy, a TCP stream or RDMA work requests.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/macro.h"

#define PLAN_LAYERS_ALL (-1)

/* One tensor of a cache as the planner sees it: region index and offset of its first byte. */
typedef struct PlanTensor {
        uint32_t region;
        uint64_t offset;
} PlanTensor;

typedef struct PlanCache {
        bool blocks; /* blocks cache (else contiguous) */
        uint32_t num_tensors;
        uint64_t tensor_size;      /* bytes per tensor */
        uint64_t units;            /* num_blocks or batch size */
        uint64_t stride;           /* tensor_size / units */
        const PlanTensor *tensors; /* num_tensors entries */
} PlanCache;

typedef struct PlanLayers {
        int32_t first; /* PLAN_LAYERS_ALL or a layer index */
        int32_t last;  /* inclusive; ignored when first is PLAN_LAYERS_ALL */
} PlanLayers;

/* Bytes [offset, offset + length) of each block; length 0 (and offset 0): the whole block. */
typedef struct PlanSlice {
        uint64_t offset;
        uint64_t length;
} PlanSlice;

/*
 * What is known of a block list without walking it (its decoding found out, off the loop):
 * @known, its largest id; @unique_known, whether an id repeats. The checks skip the passes these
 * answer; a list that fails one is walked as before, for the same status and message.
 */
typedef struct PlanListFacts {
        bool known;
        uint64_t max;
        bool unique_known;
        bool unique;
} PlanListFacts;

typedef enum PlanMode {
        PLAN_BLOCKS,         /* blocks cache -> blocks cache: src_blocks[i] -> dst_blocks[i] */
        PLAN_ITEM,           /* contiguous item -> contiguous item (pull_cache / push_cache) */
        PLAN_ITEM_TO_BLOCKS, /* contiguous item -> dst_blocks in order (pull_blocks) */
        _PLAN_MODE_MAX,
        _PLAN_MODE_INVALID = -22,
} PlanMode;

typedef struct PlanRequest {
        PlanMode mode;
        const PlanCache *src;
        const PlanCache *dst;
        const uint64_t *src_blocks; /* PLAN_BLOCKS */
        size_t n_src_blocks;
        const uint64_t *dst_blocks; /* PLAN_BLOCKS, PLAN_ITEM_TO_BLOCKS */
        size_t n_dst_blocks;
        uint64_t src_index; /* PLAN_ITEM*: source batch slot */
        uint64_t dst_index; /* PLAN_ITEM: destination batch slot */
        int64_t size;       /* PLAN_ITEM*: bytes per tensor, -1 = whole item */
        PlanLayers src_layers;
        PlanLayers dst_layers;
        uint32_t tensor_num_per_layer; /* 0 = 2; matters only with a layer range */
        PlanSlice src_slice;           /* PLAN_BLOCKS: of each source block */
        PlanSlice dst_slice;           /* PLAN_BLOCKS: of each destination block */
        PlanListFacts src_facts;       /* of src_blocks, when known */
        PlanListFacts dst_facts;       /* of dst_blocks, when known */
} PlanRequest;

/*
 * @count pieces of @len bytes: the k-th from src_offset + k * Plan.src_step to dst_offset + k *
 * Plan.dst_step. One piece (count 1) is a plain copy; more are the same slice of neighbouring
 * blocks, so a run of N blocks is one segment, not N.
 */
typedef struct PlanSegment {
        uint32_t src_region;
        uint32_t dst_region;
        uint64_t src_offset;
        uint64_t dst_offset;
        uint64_t len;
        uint64_t count;
} PlanSegment;

typedef struct Plan {
        uint64_t total_bytes;
        uint64_t src_step; /* between the pieces of a segment, on each side */
        uint64_t dst_step;
        size_t n_segments;
        PlanSegment segments[];
} Plan;

/*
 * The end of the last piece of a segment of @count pieces of @len bytes from @offset, @step
 * apart; false when it passes 2^64.
 */
static inline bool plan_pieces_end(uint64_t offset, uint64_t len, uint64_t count, uint64_t step,
                                   uint64_t *ret)
{
        uint64_t span = 0;

        if (count > 1 && MUL_OVERFLOW(count - 1, step, &span))
                return false;
        return !ADD_OVERFLOW(offset, span, &span) && !ADD_OVERFLOW(span, len, ret);
}

/*
 * Validates @req and builds its plan. Every rule gives PARAM_INVALID (or CACHE_INCOMPATIBLE for
 * shapes that cannot match) with a message naming the argument, e.g.
 * "dst_blocks[3]=900 is out of range, cache has 512 blocks": list lengths, block ids in range,
 * no destination block twice, equal block or item sizes, batch slots in range, size in
 * (0, item]. Without a layer range on either side every tensor moves and the caches must have
 * as many (CACHE_INCOMPATIBLE); with one, tensor_num_per_layer must divide both caches and the
 * ranges must lie inside them and be of equal length. Between blocks caches, slices (offset and
 * length of each block, on each side) must lie inside the blocks and be of equal length; the
 * block sizes may then differ. Segments contiguous on both sides are merged; slices of a run of
 * neighbouring blocks on both sides are one segment of as many pieces. On success *@ret is
 * malloc()ed.
 */
int plan_build(const PlanRequest *req, Plan **ret, Error *err);

/* What plan_check() resolved: the tensor ranges, the item size and the bytes the plan moves. */
typedef struct PlanChecked {
        PlanSlice src_slice; /* PLAN_BLOCKS: the slices resolved (length set) */
        PlanSlice dst_slice;
        uint32_t src_first; /* first tensor of each range */
        uint32_t dst_first;
        uint32_t n_tensors; /* tensors in each range */
        uint64_t size;      /* item modes: bytes per tensor */
        uint64_t total_bytes;
} PlanChecked;

/*
 * plan_build() in two halves. plan_check() applies every rule of plan_build() (the same
 * statuses and messages) and says in *@ret what a plan of @req will move; O(blocks), no copy
 * list. plan_make() then lays the copies; it reads only @req, the caches it names and @checked,
 * so it may run on another thread while they stay unchanged. It fails only for memory (or with
 * an overflow plan_check() cannot let through). On success *@ret is malloc()ed.
 */
int plan_check(const PlanRequest *req, PlanChecked *ret, Error *err);
int plan_make(const PlanRequest *req, const PlanChecked *checked, Plan **ret, Error *err);

/*
 * plan_make() of share @part of @n_parts of the request: its block list (or its one item) cut
 * into @n_parts runs of entries as even as can be, some empty when there are fewer entries than
 * parts. The parts' plans, in order, copy what plan_make()'s does, each byte once; only copies
 * that would merge across the cut between two parts stay apart. Parts may be made at once on
 * several threads.
 */
int plan_make_part(const PlanRequest *req, const PlanChecked *checked, size_t part, size_t n_parts,
                   Plan **ret, Error *err);

/* free() with a name; accepts NULL; returns NULL. */
Plan *plan_free(Plan *plan);
DEFINE_TRIVIAL_CLEANUP_FUNC(Plan, plan_free);
