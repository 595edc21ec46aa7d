/* SPDX-License-Identifier: MIT */
/* Transfer planner: validates a pull/push request against both caches and lists its copies. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/transfer/plan.h"
#include "common/id-repeat.h"
#include "common/status.h"

/*
 * Collects segments, merging each with the one before when both sides continue it, into an
 * array sized for the pattern laid on every tensor (merging only ever makes fewer): one pass
 * over the copies, which for 100,000 blocks is most of the planner's time.
 */
typedef struct Builder {
        Plan *plan;
        size_t cap; /* entries in plan->segments */
        size_t n;
        uint64_t total;
        PlanSegment last; /* the newest segment, when n > 0 */
} Builder;

typedef struct Side {
        const char *name;       /* "source" */
        const char *blocks_arg; /* "src_blocks" */
        const char *layers_arg; /* "src_layers" */
        const char *index_arg;  /* "src_index" */
} Side;

static const Side side_src = {"source", "src_blocks", "src_layers", "src_index"};
static const Side side_dst = {"destination", "dst_blocks", "dst_layers", "dst_index"};

/* A validated request, resolved to tensor ranges and a size. */
typedef struct Ctx {
        const PlanRequest *req;
        const PlanCache *src;
        const PlanCache *dst;
        uint32_t src_first; /* first tensor of each range */
        uint32_t dst_first;
        uint32_t n_tensors;  /* tensors in each range */
        uint64_t size;       /* item modes: bytes per tensor */
        PlanSlice src_slice; /* PLAN_BLOCKS: resolved, length set */
        PlanSlice dst_slice;
        const Plan *pattern; /* copies relative to the start of a tensor, the same for all */
} Ctx;

Plan *plan_free(Plan *plan)
{
        free(plan);
        return NULL;
}

/* Adds @count pieces of @len bytes (count > 1: the pattern's steps apart) to the plan. */
static int builder_add(Builder *b, uint32_t src_region, uint32_t dst_region, uint64_t src_offset,
                       uint64_t dst_offset, uint64_t len, uint64_t count, Error *err)
{
        uint64_t src_end, dst_end, bytes, total;
        PlanSegment seg;

        if (!plan_pieces_end(src_offset, len, count, b->plan->src_step, &src_end) ||
            !plan_pieces_end(dst_offset, len, count, b->plan->dst_step, &dst_end))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "a copy of %" PRIu64 " x %" PRIu64 " bytes at offset %" PRIu64
                                 " -> %" PRIu64 " overflows",
                                 count, len, src_offset, dst_offset);
        if (MUL_OVERFLOW(len, count, &bytes) || ADD_OVERFLOW(b->total, bytes, &total))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the transfer is larger than 2^64 bytes");
        b->total = total;

        /* The last segment's ends were checked when it was added or grown: these cannot wrap.
         * Only plain copies merge; pieces keep their own. */
        if (b->n > 0 && count == 1 && b->last.count == 1 && b->last.src_region == src_region &&
            b->last.dst_region == dst_region && b->last.src_offset + b->last.len == src_offset &&
            b->last.dst_offset + b->last.len == dst_offset) {
                b->last.len += len;
                b->plan->segments[b->n - 1].len = b->last.len;
                return 0;
        }

        seg = (PlanSegment){
                .src_region = src_region,
                .dst_region = dst_region,
                .src_offset = src_offset,
                .dst_offset = dst_offset,
                .len = len,
                .count = count,
        };
        /* the pattern laid on each tensor bounds the copies */
        if (b->n >= b->cap)
                return error_set(err, STATUS_FAILED, "transfer plan miscounted");
        b->plan->segments[b->n] = seg;
        b->last = seg;
        b->n++;
        return 0;
}

static int emit_plan(const Ctx *ctx, Builder *b, Error *err);

/*
 * Runs emit_plan() into an array of the pattern's copies times the tensors, and gives back the
 * slack when merges across tensors left much of it (a contiguous run over every tensor).
 */
static int build_plan(const Ctx *ctx, Plan **ret, Error *err)
{
        Builder b = {};
        Plan *p, *shrunk;
        size_t bytes, cap;
        int r;

        if (MUL_OVERFLOW(ctx->pattern->n_segments, (size_t)ctx->n_tensors, &cap) ||
            MUL_OVERFLOW(cap, sizeof(PlanSegment), &bytes) ||
            ADD_OVERFLOW(bytes, sizeof(Plan), &bytes))
                return error_set(err, STATUS_OUT_OF_MEMORY, "transfer plan too large");
        p = malloc(bytes);
        if (!p)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory for a transfer plan");

        p->src_step = ctx->pattern->src_step;
        p->dst_step = ctx->pattern->dst_step;
        b = (Builder){.plan = p, .cap = cap};
        r = emit_plan(ctx, &b, err);
        if (r < 0) {
                free(p);
                return r;
        }
        p->n_segments = b.n;
        p->total_bytes = b.total;
        if (b.n < cap / 2) {
                shrunk = realloc(p, sizeof(Plan) + b.n * sizeof(PlanSegment));
                if (shrunk)
                        p = shrunk;
        }
        *ret = p;
        return 0;
}

static int check_cache(const PlanCache *c, const Side *side, Error *err)
{
        uint64_t span;

        if (!c)
                return error_set(err, STATUS_PARAM_INVALID, "no %s cache", side->name);
        if (c->num_tensors == 0 || !c->tensors)
                return error_set(err, STATUS_PARAM_INVALID, "the %s cache has no tensors",
                                 side->name);
        if (c->units == 0 || c->stride == 0)
                return error_set(err, STATUS_PARAM_INVALID, "the %s cache has no %s", side->name,
                                 c->blocks ? "blocks" : "batch items");
        if (MUL_OVERFLOW(c->units, c->stride, &span) || span > c->tensor_size)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the %s cache has %" PRIu64 " units of %" PRIu64
                                 " bytes, more than its tensor size of %" PRIu64 " bytes",
                                 side->name, c->units, c->stride, c->tensor_size);
        for (uint32_t t = 0; t < c->num_tensors; t++) {
                uint64_t end;

                if (ADD_OVERFLOW(c->tensors[t].offset, c->tensor_size, &end))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "tensor %" PRIu32 " of the %s cache ends past 2^64", t,
                                         side->name);
        }
        return 0;
}

static int check_kind(const PlanCache *c, bool want_blocks, const Side *side, Error *err)
{
        if (c->blocks == want_blocks)
                return 0;
        return error_set(err, STATUS_PARAM_INVALID, "the %s cache is %s but this transfer needs %s",
                         side->name, c->blocks ? "a blocks cache" : "contiguous",
                         want_blocks ? "a blocks cache" : "a contiguous cache");
}

/* Resolves a layer range to its first tensor and its number of layers. */
static int resolve_layers(const PlanLayers *l, const PlanCache *c, uint32_t tpl, const Side *side,
                          uint32_t *ret_first_tensor, uint32_t *ret_n_layers, Error *err)
{
        uint32_t n_layers = c->num_tensors / tpl;

        if (l->first == PLAN_LAYERS_ALL) {
                *ret_first_tensor = 0;
                *ret_n_layers = n_layers;
                return 0;
        }
        if (l->first < 0 || l->last < l->first)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s [%" PRId32 ", %" PRId32 "] is not a layer range: give "
                                 "0 <= first <= last, or first = -1 for all layers",
                                 side->layers_arg, l->first, l->last);
        if ((uint32_t)l->last >= n_layers)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s [%" PRId32 ", %" PRId32 "] is outside the %" PRIu32
                                 " layers of the %s cache",
                                 side->layers_arg, l->first, l->last, n_layers, side->name);
        *ret_first_tensor = (uint32_t)l->first * tpl;
        *ret_n_layers = (uint32_t)(l->last - l->first) + 1;
        return 0;
}

static int check_blocks_empty(size_t n, const Side *side, Error *err)
{
        if (n == 0)
                return 0;
        return error_set(err, STATUS_PARAM_INVALID,
                         "%s has %zu entries but must be empty when the %s cache is contiguous",
                         side->blocks_arg, n, side->name);
}

static int check_index(uint64_t index, const PlanCache *c, const Side *side, Error *err)
{
        if (index < c->units)
                return 0;
        return error_set(err, STATUS_PARAM_INVALID,
                         "%s=%" PRIu64 " is out of range, the %s cache has batch size %" PRIu64,
                         side->index_arg, index, side->name, c->units);
}

static int check_blocks_in_range(const uint64_t *blocks, size_t n, const PlanCache *c,
                                 const Side *side, Error *err)
{
        for (size_t i = 0; i < n; i++)
                if (blocks[i] >= c->units)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "%s[%zu]=%" PRIu64 " is out of range, cache has %" PRIu64
                                         " blocks",
                                         side->blocks_arg, i, blocks[i], c->units);
        return 0;
}

static int report_repeat(const uint64_t *blocks, size_t j, const Side *side, Error *err)
{
        size_t i = 0;

        while (blocks[i] != blocks[j])
                i++;
        return error_set(err, STATUS_PARAM_INVALID, "%s[%zu]=%" PRIu64 " repeats %s[%zu]",
                         side->blocks_arg, j, blocks[j], side->blocks_arg, i);
}

typedef struct IndexedBlock {
        uint64_t block;
        size_t index;
} IndexedBlock;

static int indexed_block_cmp(const void *a, const void *b)
{
        const IndexedBlock *x = a, *y = b;

        if (x->block != y->block)
                return x->block < y->block ? -1 : 1;
        return x->index < y->index ? -1 : (x->index > y->index);
}

/*
 * A destination block listed twice would make the result depend on copy order. Blocks are in
 * range already; a bitmap over the cache's blocks is O(n) when the cache is not much larger than
 * the list, otherwise a sorted copy finds the same first repeat.
 */
static int check_blocks_unique(const uint64_t *blocks, size_t n, const PlanCache *c,
                               const Side *side, Error *err)
{
        if (id_repeat_bitmap_fits(n, c->units)) {
                size_t j;

                if (id_repeat_first(blocks, n, c->units, &j) < 0)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory checking %s",
                                         side->blocks_arg);
                if (j != SIZE_MAX)
                        return report_repeat(blocks, j, side, err);
        } else {
                _cleanup_free_ IndexedBlock *sorted = NULL;
                size_t first_repeat = SIZE_MAX;

                sorted = calloc(n, sizeof(IndexedBlock));
                if (!sorted)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory checking %s",
                                         side->blocks_arg);
                for (size_t i = 0; i < n; i++)
                        sorted[i] = (IndexedBlock){blocks[i], i};
                qsort(sorted, n, sizeof(IndexedBlock), indexed_block_cmp);
                /* The repeat reported is the earliest entry that repeats an earlier one. */
                for (size_t i = 1; i < n; i++)
                        if (sorted[i].block == sorted[i - 1].block)
                                first_repeat = MIN(first_repeat, sorted[i].index);
                if (first_repeat != SIZE_MAX)
                        return report_repeat(blocks, first_repeat, side, err);
        }
        return 0;
}

/*
 * Every id in range and, when @unique, none twice. What @facts know answers without a pass over
 * the list; a list they do not clear is walked, and the first entry at fault named.
 */
static int check_block_list(const uint64_t *blocks, size_t n, const PlanCache *c, bool unique,
                            const PlanListFacts *facts, const Side *side, Error *err)
{
        int r;

        if (n == 0)
                return error_set(err, STATUS_PARAM_INVALID, "%s is empty", side->blocks_arg);
        if (!blocks)
                return error_set(err, STATUS_PARAM_INVALID, "%s is missing", side->blocks_arg);
        if (!facts->known || facts->max >= c->units) {
                r = check_blocks_in_range(blocks, n, c, side, err);
                if (r < 0)
                        return r;
        }
        if (unique && !(facts->known && facts->unique_known && facts->unique))
                return check_blocks_unique(blocks, n, c, side, err);
        return 0;
}

/* Bytes per tensor for the item modes: @size, or the whole source item for -1. */
static int resolve_size(int64_t size, const PlanCache *src, const PlanCache *dst, uint64_t *ret,
                        Error *err)
{
        if (size == -1) {
                if (dst && src->stride != dst->stride)
                        return error_set(err, STATUS_CACHE_INCOMPATIBLE,
                                         "item size differs: source %" PRIu64
                                         " bytes, destination %" PRIu64,
                                         src->stride, dst->stride);
                *ret = src->stride;
                return 0;
        }
        if (size <= 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "size=%" PRId64 " is invalid: give the bytes to copy per tensor, "
                                 "or -1 for the whole item",
                                 size);
        if ((uint64_t)size > src->stride)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "size=%" PRId64 " is larger than the source item (%" PRIu64
                                 " bytes)",
                                 size, src->stride);
        if (dst && (uint64_t)size > dst->stride)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "size=%" PRId64 " is larger than the destination item (%" PRIu64
                                 " bytes)",
                                 size, dst->stride);
        *ret = (uint64_t)size;
        return 0;
}

/*
 * Resolves @s against blocks of @stride bytes into @ret: a length of 0 is the rest of the block
 * from the offset. The slice must lie inside the block.
 */
static int resolve_slice(const PlanSlice *s, uint64_t stride, const char *name, PlanSlice *ret,
                         Error *err)
{
        uint64_t end;

        if (s->offset >= stride || (s->length == 0 && s->offset == 0 && stride == 0))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s offset %" PRIu64 " is not inside a block of %" PRIu64 " bytes",
                                 name, s->offset, stride);
        *ret = (PlanSlice){s->offset, s->length ?: stride - s->offset};
        if (ADD_OVERFLOW(ret->offset, ret->length, &end) || end > stride)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%s [%" PRIu64 ", %" PRIu64 ") goes past the block of %" PRIu64
                                 " bytes",
                                 name, s->offset, s->offset + s->length, stride);
        return 0;
}

static int validate_blocks(Ctx *ctx, Error *err)
{
        const PlanRequest *req = ctx->req;
        const PlanCache *src = ctx->src, *dst = ctx->dst;
        bool sliced = req->src_slice.offset || req->src_slice.length || req->dst_slice.offset ||
                      req->dst_slice.length;
        int r;

        if (req->n_src_blocks != req->n_dst_blocks)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "src_blocks has %zu entries but dst_blocks has %zu",
                                 req->n_src_blocks, req->n_dst_blocks);
        if (!sliced && src->stride != dst->stride)
                return error_set(err, STATUS_CACHE_INCOMPATIBLE,
                                 "block size differs: source %" PRIu64
                                 " bytes, destination %" PRIu64 "; name slices of the blocks to "
                                 "move part of one",
                                 src->stride, dst->stride);
        r = resolve_slice(&req->src_slice, src->stride, "src_slice", &ctx->src_slice, err);
        if (r < 0)
                return r;
        r = resolve_slice(&req->dst_slice, dst->stride, "dst_slice", &ctx->dst_slice, err);
        if (r < 0)
                return r;
        if (ctx->src_slice.length != ctx->dst_slice.length)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "src_slice is %" PRIu64 " bytes of each block, dst_slice %" PRIu64
                                 ": they move the same bytes",
                                 ctx->src_slice.length, ctx->dst_slice.length);
        r = check_block_list(req->src_blocks, req->n_src_blocks, src, false, &req->src_facts,
                             &side_src, err);
        if (r < 0)
                return r;
        return check_block_list(req->dst_blocks, req->n_dst_blocks, dst, true, &req->dst_facts,
                                &side_dst, err);
}

/* Slices are of blocks, between two blocks caches. */
static int check_no_slice(const PlanRequest *req, Error *err)
{
        if (req->src_slice.offset || req->src_slice.length || req->dst_slice.offset ||
            req->dst_slice.length)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "slices are of blocks, for a transfer between two blocks caches");
        return 0;
}

static int validate_item(Ctx *ctx, Error *err)
{
        const PlanRequest *req = ctx->req;
        int r;

        r = check_no_slice(req, err);
        if (r < 0)
                return r;
        r = check_blocks_empty(req->n_src_blocks, &side_src, err);
        if (r < 0)
                return r;
        r = check_blocks_empty(req->n_dst_blocks, &side_dst, err);
        if (r < 0)
                return r;
        r = check_index(req->src_index, ctx->src, &side_src, err);
        if (r < 0)
                return r;
        r = check_index(req->dst_index, ctx->dst, &side_dst, err);
        if (r < 0)
                return r;
        return resolve_size(req->size, ctx->src, ctx->dst, &ctx->size, err);
}

static int validate_item_to_blocks(Ctx *ctx, Error *err)
{
        const PlanRequest *req = ctx->req;
        const PlanCache *dst = ctx->dst;
        uint64_t n = req->n_dst_blocks, need;
        int r;

        r = check_no_slice(req, err);
        if (r < 0)
                return r;
        r = check_blocks_empty(req->n_src_blocks, &side_src, err);
        if (r < 0)
                return r;
        r = check_index(req->src_index, ctx->src, &side_src, err);
        if (r < 0)
                return r;
        r = resolve_size(req->size, ctx->src, NULL, &ctx->size, err);
        if (r < 0)
                return r;
        r = check_block_list(req->dst_blocks, req->n_dst_blocks, dst, true, &req->dst_facts,
                             &side_dst, err);
        if (r < 0)
                return r;

        /* (n-1)*stride < size <= n*stride, i.e. n = ceil(size / stride); the last may be partial */
        need = ctx->size / dst->stride + (ctx->size % dst->stride != 0);
        if (n != need)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "dst_blocks has %" PRIu64 " blocks of %" PRIu64
                                 " bytes but the source item is %" PRIu64
                                 " bytes, which fills %" PRIu64,
                                 n, dst->stride, ctx->size, need);
        return 0;
}

/* Whether entry @i of @list continues entry i-1 by one (values are below units: no wrap). */
static inline bool list_continues(const uint64_t *list, size_t i)
{
        return !list || list[i] == list[i - 1] + 1;
}

/*
 * The per-tensor pattern of entries [@lo, @hi) of the request (its block list, or the one item):
 * copies with offsets relative to the start of a tensor, the same for every tensor pair, so the
 * block list is walked once, not once per tensor. A run of entries
 * where both sides go up by one block is one segment: one copy when it is whole blocks (the item
 * to blocks source is contiguous by construction, and only its last chunk can be partial), else
 * one piece per block, a block stride apart on each side.
 */
static int build_pattern(const Ctx *ctx, size_t lo, size_t hi, Plan **ret, Error *err)
{
        const PlanRequest *req = ctx->req;
        const PlanCache *src = ctx->src, *dst = ctx->dst;
        const uint64_t *src_list = NULL, *dst_list = NULL;
        size_t n_runs = 1, start = lo, k = 0, bytes;
        bool whole = true;
        uint64_t total = 0;
        Plan *p;

        if (req->mode == PLAN_BLOCKS) {
                src_list = req->src_blocks;
                dst_list = req->dst_blocks;
                /* A slice of each block: neighbours are apart by the rest of the block. */
                whole = ctx->src_slice.length == src->stride &&
                        ctx->dst_slice.length == dst->stride;
        } else if (req->mode == PLAN_ITEM_TO_BLOCKS)
                dst_list = req->dst_blocks;
        if (dst_list)
                for (size_t i = lo + 1; i < hi; i++)
                        if (!list_continues(dst_list, i) || !list_continues(src_list, i))
                                n_runs++;

        if (MUL_OVERFLOW(n_runs, sizeof(PlanSegment), &bytes) ||
            ADD_OVERFLOW(bytes, sizeof(Plan), &bytes))
                return error_set(err, STATUS_OUT_OF_MEMORY, "transfer plan too large");
        p = malloc(bytes);
        if (!p)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory for a transfer plan");
        p->src_step = src->stride;
        p->dst_step = dst->stride;

        for (size_t i = lo + 1; i <= hi; i++) {
                uint64_t so, dof, len, end, count = 1, bytes_run;
                bool ok;

                if (i < hi && list_continues(dst_list, i) && list_continues(src_list, i))
                        continue;
                switch (req->mode) {
                case PLAN_BLOCKS:
                        if (whole)
                                ok = !MUL_OVERFLOW((uint64_t)(i - start), ctx->src_slice.length,
                                                   &len);
                        else {
                                len = ctx->src_slice.length;
                                count = i - start;
                                ok = true;
                        }
                        ok = ok && !MUL_OVERFLOW(src_list[start], src->stride, &so) &&
                             !ADD_OVERFLOW(so, ctx->src_slice.offset, &so) &&
                             !MUL_OVERFLOW(dst_list[start], dst->stride, &dof) &&
                             !ADD_OVERFLOW(dof, ctx->dst_slice.offset, &dof);
                        break;
                case PLAN_ITEM:
                        ok = !MUL_OVERFLOW(req->src_index, src->stride, &so) &&
                             !MUL_OVERFLOW(req->dst_index, dst->stride, &dof);
                        len = ctx->size;
                        break;
                default:
                        /* chunks start..i-1 of the item, the last one cut at size */
                        ok = !MUL_OVERFLOW(req->src_index, src->stride, &so) &&
                             !MUL_OVERFLOW((uint64_t)start, dst->stride, &len) &&
                             !ADD_OVERFLOW(so, len, &so) &&
                             !MUL_OVERFLOW(dst_list[start], dst->stride, &dof) &&
                             !MUL_OVERFLOW((uint64_t)i, dst->stride, &end);
                        if (ok)
                                len = MIN(end, ctx->size) - len;
                        break;
                }
                if (!ok || MUL_OVERFLOW(len, count, &bytes_run) ||
                    ADD_OVERFLOW(total, bytes_run, &total)) {
                        free(p);
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "entry %zu of the transfer overflows", start);
                }
                p->segments[k++] = (PlanSegment){
                        .src_offset = so,
                        .dst_offset = dof,
                        .len = len,
                        .count = count,
                };
                start = i;
        }
        p->n_segments = k;
        p->total_bytes = total;
        *ret = p;
        return 0;
}

/* The pattern laid on every tensor pair; neighbours in memory merge across tensors too. */
static int emit_plan(const Ctx *ctx, Builder *b, Error *err)
{
        const Plan *pat = ctx->pattern;

        for (uint32_t k = 0; k < ctx->n_tensors; k++) {
                const PlanTensor *st = &ctx->src->tensors[ctx->src_first + k];
                const PlanTensor *dt = &ctx->dst->tensors[ctx->dst_first + k];

                for (size_t i = 0; i < pat->n_segments; i++) {
                        const PlanSegment *s = &pat->segments[i];
                        uint64_t so, dof;
                        int r;

                        if (ADD_OVERFLOW(st->offset, s->src_offset, &so) ||
                            ADD_OVERFLOW(dt->offset, s->dst_offset, &dof))
                                return error_set(err, STATUS_PARAM_INVALID,
                                                 "tensor %" PRIu32 " of the transfer overflows", k);
                        r = builder_add(b, st->region, dt->region, so, dof, s->len, s->count, err);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* The bytes a plan of the checked request moves, all tensors together; an error past 2^64. */
static int checked_total(const Ctx *ctx, uint64_t *ret, Error *err)
{
        const PlanRequest *req = ctx->req;
        uint64_t per_tensor, total;

        if (req->mode == PLAN_BLOCKS) {
                if (MUL_OVERFLOW((uint64_t)req->n_dst_blocks, ctx->src_slice.length, &per_tensor))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "the transfer is larger than 2^64 bytes");
        } else
                per_tensor = ctx->size;
        if (MUL_OVERFLOW(per_tensor, (uint64_t)ctx->n_tensors, &total))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the transfer is larger than 2^64 bytes");
        *ret = total;
        return 0;
}

int plan_check(const PlanRequest *req, PlanChecked *ret, Error *err)
{
        Ctx ctx = {};
        const PlanCache *src, *dst;
        uint32_t tpl, src_layers = 0, dst_layers = 0;
        uint64_t total = 0;
        int r;

        if (!req || !ret)
                return error_set(err, STATUS_PARAM_INVALID, "no transfer request");
        if (req->mode < 0 || req->mode >= _PLAN_MODE_MAX)
                return error_set(err, STATUS_PARAM_INVALID, "unknown transfer mode %d",
                                 (int)req->mode);
        src = req->src;
        dst = req->dst;
        r = check_cache(src, &side_src, err);
        if (r < 0)
                return r;
        r = check_cache(dst, &side_dst, err);
        if (r < 0)
                return r;
        r = check_kind(src, req->mode == PLAN_BLOCKS, &side_src, err);
        if (r < 0)
                return r;
        r = check_kind(dst, req->mode != PLAN_ITEM, &side_dst, err);
        if (r < 0)
                return r;

        ctx = (Ctx){.req = req, .src = src, .dst = dst};
        if (req->src_layers.first == PLAN_LAYERS_ALL && req->dst_layers.first == PLAN_LAYERS_ALL) {
                /* No layer range: every tensor moves, whatever makes a layer (one tensor per
                 * layer in MLA caches, K only, ...). */
                if (src->num_tensors != dst->num_tensors)
                        return error_set(err, STATUS_CACHE_INCOMPATIBLE,
                                         "the source cache has %" PRIu32 " tensors, the "
                                         "destination %" PRIu32 "; give layer ranges to move "
                                         "part of a cache",
                                         src->num_tensors, dst->num_tensors);
                ctx.n_tensors = src->num_tensors;
        } else {
                /* Layers are what a range counts: they must be whole on both sides. */
                tpl = req->tensor_num_per_layer ? req->tensor_num_per_layer : 2;
                if (src->num_tensors % tpl != 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "tensor_num_per_layer=%" PRIu32 " does not divide "
                                         "num_tensors=%" PRIu32 " of the source cache",
                                         tpl, src->num_tensors);
                if (dst->num_tensors % tpl != 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "tensor_num_per_layer=%" PRIu32 " does not divide "
                                         "num_tensors=%" PRIu32 " of the destination cache",
                                         tpl, dst->num_tensors);
                r = resolve_layers(&req->src_layers, src, tpl, &side_src, &ctx.src_first,
                                   &src_layers, err);
                if (r < 0)
                        return r;
                r = resolve_layers(&req->dst_layers, dst, tpl, &side_dst, &ctx.dst_first,
                                   &dst_layers, err);
                if (r < 0)
                        return r;
                if (src_layers != dst_layers)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "src_layers has %" PRIu32
                                         " layers but dst_layers has %" PRIu32,
                                         src_layers, dst_layers);
                ctx.n_tensors = src_layers * tpl; /* <= num_tensors */
        }

        switch (req->mode) {
        case PLAN_BLOCKS:
                r = validate_blocks(&ctx, err);
                break;
        case PLAN_ITEM:
                r = validate_item(&ctx, err);
                break;
        default:
                r = validate_item_to_blocks(&ctx, err);
                break;
        }
        if (r < 0)
                return r;

        r = checked_total(&ctx, &total, err);
        if (r < 0)
                return r;
        *ret = (PlanChecked){
                .src_slice = ctx.src_slice,
                .dst_slice = ctx.dst_slice,
                .src_first = ctx.src_first,
                .dst_first = ctx.dst_first,
                .n_tensors = ctx.n_tensors,
                .size = ctx.size,
                .total_bytes = total,
        };
        return 0;
}

int plan_make_part(const PlanRequest *req, const PlanChecked *checked, size_t part, size_t n_parts,
                   Plan **ret, Error *err)
{
        _cleanup_(plan_freep) Plan *pattern = NULL;
        Ctx ctx = {
                .req = req,
                .src = req->src,
                .dst = req->dst,
                .src_first = checked->src_first,
                .dst_first = checked->dst_first,
                .n_tensors = checked->n_tensors,
                .size = checked->size,
                .src_slice = checked->src_slice,
                .dst_slice = checked->dst_slice,
        };
        size_t n = req->mode == PLAN_ITEM ? 1 : req->n_dst_blocks;
        int r;

        if (n_parts == 0 || part >= n_parts)
                return error_set(err, STATUS_FAILED, "a transfer plan has no part %zu of %zu", part,
                                 n_parts);
        /* n is at most a transfer's blocks, far from SIZE_MAX / n_parts */
        r = build_pattern(&ctx, n * part / n_parts, n * (part + 1) / n_parts, &pattern, err);
        if (r < 0)
                return r;
        ctx.pattern = pattern;
        return build_plan(&ctx, ret, err);
}

int plan_make(const PlanRequest *req, const PlanChecked *checked, Plan **ret, Error *err)
{
        return plan_make_part(req, checked, 0, 1, ret, err);
}

int plan_build(const PlanRequest *req, Plan **ret, Error *err)
{
        PlanChecked checked;
        int r;

        if (!ret)
                return error_set(err, STATUS_PARAM_INVALID, "no transfer request");
        r = plan_check(req, &checked, err);
        if (r < 0)
                return r;
        return plan_make(req, &checked, ret, err);
}
