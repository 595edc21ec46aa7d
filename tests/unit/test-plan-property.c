/* SPDX-License-Identifier: MIT */
/*
 * Property test of the transfer planner: random caches, layouts and requests of every mode,
 * the plan applied to real buffers compared with a naive per-block (per-item, per-chunk) copy,
 * its segments checked to stay inside their regions and to be merged as far as they can be.
 */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/plan-fixture.h"
#include "daemon/transfer/plan.h"

/* ---- property test: the plan applied to real buffers equals a naive per-block copy ---- */

static uint64_t rng_state;

static uint64_t rng(void)
{
        /* xorshift64* */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t rng_range(uint64_t lo, uint64_t hi) /* inclusive */
{
        return lo + rng() % (hi - lo + 1);
}

typedef struct Layout {
        TestCache tc;
        uint8_t *regions[2];
        size_t region_size[2];
        uint32_t region_base; /* region ids region_base, region_base + 1 */
} Layout;

/* Tensors split over two regions, each with random gaps (often none, so tensors can merge). */
static void layout_init(Layout *l, bool blocks, uint32_t n_tensors, uint64_t units, uint64_t stride,
                        uint32_t region_base)
{
        uint64_t off[2] = {rng_range(0, 3) * stride, rng_range(0, 3) * stride};

        cache_init(&l->tc, blocks, n_tensors, units, stride, 0, 0, 0);
        l->region_base = region_base;
        for (uint32_t t = 0; t < n_tensors; t++) {
                uint32_t r = t < n_tensors / 2 ? 0 : 1;

                if (rng() % 3 == 0)
                        off[r] += rng_range(1, 2 * stride + 1);
                l->tc.t[t] = (PlanTensor){region_base + r, off[r]};
                off[r] += l->tc.c.tensor_size;
        }
        for (int r = 0; r < 2; r++) {
                l->region_size[r] = off[r] + rng_range(0, 16);
                l->regions[r] = malloc(l->region_size[r] + 1);
                ck_assert_ptr_nonnull(l->regions[r]);
                for (size_t i = 0; i < l->region_size[r]; i++)
                        l->regions[r][i] = (uint8_t)rng();
        }
}

static void layout_deinit(Layout *l)
{
        free(l->regions[0]);
        free(l->regions[1]);
}

static uint8_t *layout_tensor(Layout *l, uint32_t t)
{
        return l->regions[l->tc.t[t].region - l->region_base] + l->tc.t[t].offset;
}

/* @n distinct values below @units, made of runs of consecutive values in random order. */
static void random_blocks(uint64_t *out, size_t n, uint64_t units, bool distinct)
{
        bool *used = calloc(units, sizeof(bool));
        size_t i = 0;

        ck_assert_ptr_nonnull(used);
        while (i < n) {
                uint64_t start = rng() % units, run = rng_range(1, 6);

                if (rng() % 4 == 0) { /* a descending run now and then */
                        for (uint64_t k = 0; k < run && i < n; k++) {
                                uint64_t b = (start + units - k) % units;

                                if (distinct && used[b])
                                        break;
                                used[b] = true;
                                out[i++] = b;
                        }
                        continue;
                }
                for (uint64_t k = 0; k < run && i < n; k++) {
                        uint64_t b = (start + k) % units;

                        if (distinct && used[b])
                                break;
                        used[b] = true;
                        out[i++] = b;
                }
        }
        free(used);
}

static PlanLayers random_layers(uint32_t n_layers, uint32_t len, bool all)
{
        int32_t first;

        if (all)
                return (PlanLayers){PLAN_LAYERS_ALL, (int32_t)rng_range(0, 5) - 1};
        first = (int32_t)rng_range(0, n_layers - len);
        return (PlanLayers){first, first + (int32_t)len - 1};
}

/*
 * Applies @p from @src to @dst: each segment's pieces, the plan's steps apart, each checked to lie
 * inside its regions, and no two neighbouring copies that could have been one.
 */
static void apply_plan(const Plan *p, Layout *src, Layout *dst, unsigned round)
{
        for (size_t i = 0; i < p->n_segments; i++) {
                const PlanSegment *seg = &p->segments[i];
                uint64_t src_end = UINT64_MAX, dst_end = UINT64_MAX;

                /* plain checks: a ck_assert per segment would record thousands of locations */
                if (seg->src_region > 1 || seg->dst_region < 2 || seg->dst_region > 3 ||
                    seg->len == 0 || seg->count == 0 ||
                    !plan_pieces_end(seg->src_offset, seg->len, seg->count, p->src_step,
                                     &src_end) ||
                    !plan_pieces_end(seg->dst_offset, seg->len, seg->count, p->dst_step,
                                     &dst_end) ||
                    src_end > src->region_size[seg->src_region] ||
                    dst_end > dst->region_size[seg->dst_region - 2])
                        ck_abort_msg("round %u: segment %zu (%u:%" PRIu64 " -> %u:%" PRIu64
                                     ", %" PRIu64 " x %" PRIu64 ") is outside its regions",
                                     round, i, seg->src_region, seg->src_offset, seg->dst_region,
                                     seg->dst_offset, seg->count, seg->len);
                for (uint64_t k = 0; k < seg->count; k++)
                        memcpy(dst->regions[seg->dst_region - 2] + seg->dst_offset +
                                       k * p->dst_step,
                               src->regions[seg->src_region] + seg->src_offset + k * p->src_step,
                               seg->len);

                /* merging is maximal: no two neighbouring copies could have been one */
                if (i > 0) {
                        const PlanSegment *prev = &p->segments[i - 1];

                        if (prev->count == 1 && seg->count == 1 &&
                            prev->src_region == seg->src_region &&
                            prev->dst_region == seg->dst_region &&
                            prev->src_offset + prev->len == seg->src_offset &&
                            prev->dst_offset + prev->len == seg->dst_offset)
                                ck_abort_msg("round %u: segments %zu and %zu were not merged",
                                             round, i - 1, i);
                }
        }
}

/* Whether @dst's regions hold what @ref does; aborts naming the first byte that differs. */
static void assert_regions(Layout *dst, uint8_t *const ref[2], unsigned round, PlanMode mode,
                           const char *what)
{
        for (int r = 0; r < 2; r++) {
                if (memcmp(dst->regions[r], ref[r], dst->region_size[r]) != 0) {
                        size_t i = 0;

                        while (dst->regions[r][i] == ref[r][i])
                                i++;
                        ck_abort_msg("round %u mode %d (%s): region %d byte %zu differs", round,
                                     (int)mode, what, r, i);
                }
        }
}

static void property_round(unsigned round)
{
        Layout src, dst;
        uint32_t tpl = (uint32_t)rng_range(1, 3);
        uint32_t src_layers = (uint32_t)rng_range(1, 5), dst_layers = (uint32_t)rng_range(1, 5);
        uint32_t len = (uint32_t)rng_range(1, MIN(src_layers, dst_layers));
        bool all = src_layers == dst_layers && rng() % 2 == 0;
        PlanMode mode = (PlanMode)(rng() % 3);
        uint64_t src_units, dst_units, src_stride, dst_stride, size = 0, chunks = 0;
        uint64_t s_off = 0, d_off = 0, slice_len;
        uint64_t sb[64], db[256], si = 0, di = 0;
        size_t n = 0;
        PlanRequest req = {};
        uint8_t *ref[2], *orig[2];
        uint64_t naive_bytes = 0;
        size_t naive_segments = 0;
        uint32_t s_first, d_first;
        Plan *p;

        if (all)
                len = src_layers;

        src_stride = rng_range(1, 48);
        dst_stride = src_stride;
        switch (mode) {
        case PLAN_BLOCKS:
                src_units = rng_range(1, 40);
                dst_units = rng_range(1, 40);
                n = rng_range(1, MIN(dst_units, 32));
                /* a third of the time a slice of each block, the block sizes may differ */
                if (rng() % 3 == 0) {
                        dst_stride = rng_range(1, 48);
                        slice_len = rng_range(1, MIN(src_stride, dst_stride));
                        s_off = rng_range(0, src_stride - slice_len);
                        d_off = rng_range(0, dst_stride - slice_len);
                        req.src_slice = (PlanSlice){s_off, slice_len};
                        /* length 0: to the end of the block, when that is the same */
                        req.dst_slice = (PlanSlice){
                                d_off,
                                d_off + slice_len == dst_stride && rng() % 2 ? 0 : slice_len};
                }
                layout_init(&src, true, src_layers * tpl, src_units, src_stride, 0);
                layout_init(&dst, true, dst_layers * tpl, dst_units, dst_stride, 2);
                random_blocks(sb, n, src_units, n <= src_units && rng() % 2 == 0);
                random_blocks(db, n, dst_units, true);
                break;
        case PLAN_ITEM:
                src_units = rng_range(1, 5);
                dst_units = rng_range(1, 5);
                if (rng() % 2)
                        dst_stride = rng_range(1, 48);
                layout_init(&src, false, src_layers * tpl, src_units, src_stride, 0);
                layout_init(&dst, false, dst_layers * tpl, dst_units, dst_stride, 2);
                si = rng() % src_units;
                di = rng() % dst_units;
                break;
        default:
                mode = PLAN_ITEM_TO_BLOCKS;
                src_stride = rng_range(1, 200);
                dst_stride = rng_range(1, 48);
                src_units = rng_range(1, 4);
                layout_init(&src, false, src_layers * tpl, src_units, src_stride, 0);
                si = rng() % src_units;
                break;
        }

        if (mode == PLAN_ITEM || mode == PLAN_ITEM_TO_BLOCKS) {
                uint64_t max = mode == PLAN_ITEM ? MIN(src_stride, dst_stride) : src_stride;

                if (rng() % 2 == 0 && (mode == PLAN_ITEM_TO_BLOCKS || src_stride == dst_stride)) {
                        req.size = -1;
                        size = src_stride;
                } else {
                        size = rng_range(1, max);
                        req.size = (int64_t)size;
                }
        }
        if (mode == PLAN_ITEM_TO_BLOCKS) {
                chunks = (size + dst_stride - 1) / dst_stride;
                n = chunks;
                ck_assert_uint_le(n, 256);
                dst_units = chunks + rng_range(0, 10);
                layout_init(&dst, true, dst_layers * tpl, dst_units, dst_stride, 2);
                random_blocks(db, n, dst_units, true);
        }

        req.mode = mode;
        req.src = &src.tc.c;
        req.dst = &dst.tc.c;
        req.src_index = si;
        req.dst_index = di;
        if (mode == PLAN_BLOCKS) {
                req.src_blocks = sb;
                req.n_src_blocks = n;
        }
        if (mode != PLAN_ITEM) {
                req.dst_blocks = db;
                req.n_dst_blocks = n;
        }
        req.tensor_num_per_layer = tpl == 2 && rng() % 2 ? 0 : tpl;
        req.src_layers = random_layers(src_layers, len, all);
        req.dst_layers = random_layers(dst_layers, len, all);
        s_first = all ? 0 : (uint32_t)req.src_layers.first * tpl;
        d_first = all ? 0 : (uint32_t)req.dst_layers.first * tpl;

        p = build_ok(&req);

        /* plan_build() in two halves (the copy thread's way) gives the same plan; the check
         * alone already knows its bytes */
        {
                PlanChecked checked;
                Plan *q = NULL;
                Error e = ERROR_INIT;

                ck_assert_int_eq(plan_check(&req, &checked, &e), 0);
                ck_assert_uint_eq(checked.total_bytes, p->total_bytes);
                ck_assert_int_eq(plan_make(&req, &checked, &q, &e), 0);
                ck_assert_uint_eq(q->n_segments, p->n_segments);
                ck_assert_uint_eq(q->total_bytes, p->total_bytes);
                if (memcmp(q->segments, p->segments, p->n_segments * sizeof(PlanSegment)) != 0)
                        ck_abort_msg("round %u: plan_make() differs from plan_build()", round);
                plan_free(q);
        }

        /* reference: the naive copy, one block / item / chunk at a time */
        for (int r = 0; r < 2; r++) {
                ref[r] = malloc(dst.region_size[r] + 1);
                orig[r] = malloc(dst.region_size[r] + 1);
                ck_assert_ptr_nonnull(ref[r]);
                ck_assert_ptr_nonnull(orig[r]);
                memcpy(ref[r], dst.regions[r], dst.region_size[r]);
                memcpy(orig[r], dst.regions[r], dst.region_size[r]);
        }
        for (uint32_t k = 0; k < len * tpl; k++) {
                uint32_t st = s_first + k, dt = d_first + k;
                const uint8_t *s = layout_tensor(&src, st);
                uint8_t *d = ref[dst.tc.t[dt].region - 2] + dst.tc.t[dt].offset;

                switch (mode) {
                case PLAN_BLOCKS:
                        slice_len = req.src_slice.length ? req.src_slice.length : src_stride;
                        for (size_t i = 0; i < n; i++)
                                for (uint64_t b = 0; b < slice_len; b++)
                                        d[db[i] * dst_stride + d_off + b] =
                                                s[sb[i] * src_stride + s_off + b];
                        naive_bytes += n * slice_len;
                        naive_segments += n;
                        break;
                case PLAN_ITEM:
                        for (uint64_t b = 0; b < size; b++)
                                d[di * dst_stride + b] = s[si * src_stride + b];
                        naive_bytes += size;
                        naive_segments += 1;
                        break;
                default:
                        for (uint64_t b = 0; b < size; b++)
                                d[db[b / dst_stride] * dst_stride + b % dst_stride] =
                                        s[si * src_stride + b];
                        naive_bytes += size;
                        naive_segments += chunks;
                        break;
                }
        }

        /* apply the plan */
        apply_plan(p, &src, &dst, round);
        assert_regions(&dst, ref, round, mode, "whole");

        /* and its shares, as copy threads plan them side by side, onto the first contents:
         * every byte lands once, whatever share it is in */
        {
                size_t n_parts = (size_t)rng_range(2, 5);
                PlanChecked checked;
                uint64_t bytes = 0;
                Error e = ERROR_INIT;

                for (int r = 0; r < 2; r++)
                        memcpy(dst.regions[r], orig[r], dst.region_size[r]);
                ck_assert_int_eq(plan_check(&req, &checked, &e), 0);
                for (size_t k = 0; k < n_parts; k++) {
                        Plan *q = NULL;

                        ck_assert_int_eq(plan_make_part(&req, &checked, k, n_parts, &q, &e), 0);
                        ck_assert_uint_eq(q->src_step, p->src_step);
                        ck_assert_uint_eq(q->dst_step, p->dst_step);
                        apply_plan(q, &src, &dst, round);
                        bytes += q->total_bytes;
                        plan_free(q);
                }
                ck_assert_uint_eq(bytes, p->total_bytes);
                assert_regions(&dst, ref, round, mode, "in shares");
                /* a share past the last is refused */
                {
                        Plan *none = NULL;

                        ck_assert_int_eq(
                                plan_make_part(&req, &checked, n_parts, n_parts, &none, &e),
                                STATUS_FAILED);
                        ck_assert_ptr_null(none);
                }
        }
        for (int r = 0; r < 2; r++) {
                free(ref[r]);
                free(orig[r]);
        }
        ck_assert_uint_eq(p->total_bytes, naive_bytes);
        ck_assert_uint_le(p->n_segments, naive_segments);

        plan_free(p);
        layout_deinit(&src);
        layout_deinit(&dst);
}

START_TEST(test_property_against_naive_copy)
{
        rng_state = UINT64_C(0x9e3779b97f4a7c15);
        for (unsigned round = 0; round < 2000; round++)
                property_round(round);
}
END_TEST

static Suite *plan_property_suite(void)
{
        Suite *s = suite_create("plan-property");
        TCase *tc;

        tc = tcase_create("property");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_property_against_naive_copy);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(plan_property_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
