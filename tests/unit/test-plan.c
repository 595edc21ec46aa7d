/* SPDX-License-Identifier: MIT */
/* Unit tests for the transfer planner: validation, merging and layer mapping, case by case. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/plan-fixture.h"
#include "daemon/transfer/plan.h"

static PlanRequest blocks_request(const TestCache *src, const TestCache *dst, const uint64_t *sb,
                                  size_t n_sb, const uint64_t *db, size_t n_db)
{
        return (PlanRequest){
                .mode = PLAN_BLOCKS,
                .src = &src->c,
                .dst = &dst->c,
                .src_blocks = sb,
                .n_src_blocks = n_sb,
                .dst_blocks = db,
                .n_dst_blocks = n_db,
                .size = -1,
                .src_layers = {PLAN_LAYERS_ALL, 0},
                .dst_layers = {PLAN_LAYERS_ALL, 0},
        };
}

static PlanRequest item_request(const TestCache *src, const TestCache *dst, uint64_t si,
                                uint64_t di, int64_t size)
{
        return (PlanRequest){
                .mode = PLAN_ITEM,
                .src = &src->c,
                .dst = &dst->c,
                .src_index = si,
                .dst_index = di,
                .size = size,
                .src_layers = {PLAN_LAYERS_ALL, 0},
                .dst_layers = {PLAN_LAYERS_ALL, 0},
        };
}

static PlanRequest item_to_blocks_request(const TestCache *src, const TestCache *dst, uint64_t si,
                                          const uint64_t *db, size_t n_db, int64_t size)
{
        return (PlanRequest){
                .mode = PLAN_ITEM_TO_BLOCKS,
                .src = &src->c,
                .dst = &dst->c,
                .src_index = si,
                .dst_blocks = db,
                .n_dst_blocks = n_db,
                .size = size,
                .src_layers = {PLAN_LAYERS_ALL, 0},
                .dst_layers = {PLAN_LAYERS_ALL, 0},
        };
}

#define SENTINEL ((Plan *)(uintptr_t)0x5a5a)

/* plan_build must fail with @code, a message holding @substr, and leave *ret alone. */
#define assert_plan_error(req, want_code, substr)                                                  \
        do {                                                                                       \
                Error _err = ERROR_INIT;                                                           \
                Plan *_p = SENTINEL;                                                               \
                int _r = plan_build((req), &_p, &_err);                                            \
                ck_assert_int_eq(_r, (want_code));                                                 \
                ck_assert_int_eq(_err.code, (want_code));                                          \
                ck_assert_ptr_eq(_p, SENTINEL);                                                    \
                ck_assert_msg(strstr(_err.msg, (substr)) != NULL, "message \"%s\" lacks \"%s\"",   \
                              _err.msg, (substr));                                                 \
        } while (0)

/* Segment @i of @p is @count pieces of @len bytes from @sr:@so to @dr:@dof. */
static void assert_pieces(const Plan *p, size_t i, uint32_t sr, uint64_t so, uint32_t dr,
                          uint64_t dof, uint64_t len, uint64_t count)
{
        const PlanSegment *s;

        ck_assert_uint_lt(i, p->n_segments);
        s = &p->segments[i];
        ck_assert_uint_eq(s->src_region, sr);
        ck_assert_uint_eq(s->src_offset, so);
        ck_assert_uint_eq(s->dst_region, dr);
        ck_assert_uint_eq(s->dst_offset, dof);
        ck_assert_uint_eq(s->len, len);
        ck_assert_uint_eq(s->count, count);
}

/* Segment @i of @p is one copy of @len bytes from @sr:@so to @dr:@dof. */
static void assert_segment(const Plan *p, size_t i, uint32_t sr, uint64_t so, uint32_t dr,
                           uint64_t dof, uint64_t len)
{
        assert_pieces(p, i, sr, so, dr, dof, len, 1);
}

/* ---- validation ---- */

START_TEST(test_blocks_list_lengths)
{
        TestCache src, dst;
        uint64_t sb[5] = {0, 1, 2, 3, 4}, db[5] = {0, 1, 2, 3, 4};
        PlanRequest req;

        cache_init(&src, true, 4, 512, 4096, 0, 0, 0);
        cache_init(&dst, true, 4, 512, 4096, 1, 0, 0);

        req = blocks_request(&src, &dst, sb, 4, db, 5);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_blocks has 4 entries but dst_blocks has 5");
        req = blocks_request(&src, &dst, sb, 0, db, 0);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "src_blocks is empty");
        req = blocks_request(&src, &dst, NULL, 2, NULL, 2);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "src_blocks is missing");
}
END_TEST

START_TEST(test_blocks_out_of_range)
{
        TestCache src, dst;
        uint64_t sb[4] = {0, 512, 2, 3}, db[4] = {0, 1, 2, 900};
        PlanRequest req;

        cache_init(&src, true, 4, 512, 4096, 0, 0, 0);
        cache_init(&dst, true, 4, 512, 4096, 1, 0, 0);

        req = blocks_request(&src, &dst, sb, 4, db, 4);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_blocks[1]=512 is out of range, cache has 512 blocks");
        sb[1] = 511;
        req = blocks_request(&src, &dst, sb, 4, db, 4);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_blocks[3]=900 is out of range, cache has 512 blocks");
        db[3] = 511;
        Plan *p = build_ok(&req);
        plan_free(p);
}
END_TEST

static void check_repeats(uint64_t dst_units)
{
        TestCache src, dst;
        uint64_t sb[8] = {1, 1, 1, 1, 1, 1, 1, 1}; /* a source block twice is fine */
        uint64_t db[8] = {40, 41, 12, 43, 44, 45, 46, 12};
        uint64_t db2[5] = {5, 7, 5, 7, 5};
        uint64_t db3[4] = {7, 5, 5, 7};
        PlanRequest req;
        Plan *p;

        cache_init(&src, true, 2, 64, 1, 0, 0, 0);
        cache_init(&dst, true, 2, dst_units, 1, 1, 0, 0);

        req = blocks_request(&src, &dst, sb, 8, db, 8);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks[7]=12 repeats dst_blocks[2]");
        req = blocks_request(&src, &dst, sb, 5, db2, 5);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks[2]=5 repeats dst_blocks[0]");
        req = blocks_request(&src, &dst, sb, 4, db3, 4);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks[2]=5 repeats dst_blocks[1]");

        db[7] = 13;
        req = blocks_request(&src, &dst, sb, 8, db, 8);
        p = build_ok(&req);
        ck_assert_uint_eq(p->total_bytes, 16);
        plan_free(p);
}

START_TEST(test_blocks_repeat_bitmap)
{
        check_repeats(100);
}
END_TEST

START_TEST(test_blocks_repeat_sorted)
{
        /* a cache far larger than the list takes the sorting path */
        check_repeats(UINT64_C(1) << 40);
}
END_TEST

/* The facts a decoder would give of @b: its largest id, whether one repeats. */
static PlanListFacts true_facts(const uint64_t *b, size_t n)
{
        PlanListFacts f = {.known = true, .unique_known = true, .unique = true};

        for (size_t i = 0; i < n; i++) {
                f.max = MAX(f.max, b[i]);
                for (size_t j = 0; j < i; j++)
                        if (b[j] == b[i])
                                f.unique = false;
        }
        return f;
}

/* plan_check() of @req as it is and with @sf / @df: the same status, the same message. */
static void assert_same_check(const PlanRequest *req, PlanListFacts sf, PlanListFacts df)
{
        PlanRequest with = *req;
        PlanChecked a, b;
        Error ea = ERROR_INIT, eb = ERROR_INIT;
        int ra, rb;

        with.src_facts = sf;
        with.dst_facts = df;
        ra = plan_check(req, &a, &ea);
        rb = plan_check(&with, &b, &eb);
        ck_assert_int_eq(ra, rb);
        ck_assert_int_eq(ea.code, eb.code);
        ck_assert_str_eq(ea.msg, eb.msg);
        if (ra == 0)
                ck_assert_uint_eq(a.total_bytes, b.total_bytes);
}

/*
 * Lists whose facts are known (their decoding off the loop found them) are checked without a
 * pass where the facts clear them, and walked where they do not: every list, in range or not,
 * with a repeat or not, and facts partly or not known, gets the status and message it gets
 * without facts.
 */
START_TEST(test_blocks_list_facts)
{
        enum { N = 64 };
        TestCache src, dst;
        uint64_t sb[N], db[N];
        unsigned seed = 12345;

        cache_init(&src, true, 2, 100, 8, 0, 0, 0);
        cache_init(&dst, true, 2, 100, 8, 1, 0, 0);
        for (int round = 0; round < 2000; round++) {
                size_t n = 1 + (size_t)(rand_r(&seed) % N);
                PlanListFacts sf, df;
                PlanRequest req;

                for (size_t i = 0; i < n; i++) {
                        sb[i] = (uint64_t)(rand_r(&seed) % 100);
                        db[i] = (uint64_t)((i * 37 + (unsigned)round) % 100);
                }
                if (n <= 100 && rand_r(&seed) % 2 == 0) /* distinct destinations */
                        for (size_t i = 0; i < n; i++)
                                db[i] = (uint64_t)((i + (unsigned)round) % 100);
                if (rand_r(&seed) % 4 == 0)
                        sb[rand_r(&seed) % n] = 100 + (uint64_t)(rand_r(&seed) % 3);
                if (rand_r(&seed) % 4 == 0)
                        db[rand_r(&seed) % n] = 100 + (uint64_t)(rand_r(&seed) % 3);
                if (n > 1 && rand_r(&seed) % 4 == 0)
                        db[n - 1] = db[rand_r(&seed) % (n - 1)];
                req = blocks_request(&src, &dst, sb, n, db, n);
                sf = true_facts(sb, n);
                df = true_facts(db, n);
                assert_same_check(&req, sf, df);
                /* uniqueness not found out (a sparse list), or nothing known */
                df.unique_known = false;
                assert_same_check(&req, sf, df);
                assert_same_check(&req, (PlanListFacts){}, (PlanListFacts){});
        }
}
END_TEST

START_TEST(test_block_size_mismatch)
{
        TestCache src, dst;
        uint64_t b[1] = {0};
        PlanRequest req;

        cache_init(&src, true, 4, 16, 4096, 0, 0, 0);
        cache_init(&dst, true, 4, 16, 8192, 1, 0, 0);
        req = blocks_request(&src, &dst, b, 1, b, 1);
        assert_plan_error(&req, STATUS_CACHE_INCOMPATIBLE,
                          "block size differs: source 4096 bytes, destination 8192");
}
END_TEST

START_TEST(test_tensor_num_per_layer)
{
        TestCache src, dst;
        uint64_t b[1] = {0};
        PlanRequest req;

        cache_init(&src, true, 16, 8, 64, 0, 0, 0);
        cache_init(&dst, true, 16, 8, 64, 1, 0, 0);
        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.tensor_num_per_layer = 3;
        req.src_layers = (PlanLayers){0, 2};
        req.dst_layers = (PlanLayers){0, 2};
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "tensor_num_per_layer=3 does not divide num_tensors=16 of the source "
                          "cache");

        cache_init(&src, true, 12, 8, 64, 0, 0, 0);
        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.tensor_num_per_layer = 3;
        req.src_layers = (PlanLayers){0, 2};
        req.dst_layers = (PlanLayers){0, 2};
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "tensor_num_per_layer=3 does not divide num_tensors=16 of the "
                          "destination cache");

        /* A range on one side counts layers on both: 0 means 2, and 3 tensors are not whole
         * layers. */
        cache_init(&src, true, 3, 8, 64, 0, 0, 0);
        cache_init(&dst, true, 3, 8, 64, 1, 0, 0);
        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.src_layers = (PlanLayers){0, 0};
        assert_plan_error(&req, STATUS_PARAM_INVALID, "tensor_num_per_layer=2 does not divide");
}
END_TEST

/* Without a layer range every tensor moves, whatever tensor_num_per_layer says. */
START_TEST(test_no_layer_range_moves_every_tensor)
{
        static const uint32_t counts[] = {1, 3, 5};
        static const uint32_t tpls[] = {0, 2, 4};
        TestCache src, dst;
        uint64_t sb[2] = {2, 5}, db[2] = {0, 7};
        PlanRequest req;
        Plan *p;

        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (size_t t = 0; t < sizeof(tpls) / sizeof(tpls[0]); t++) {
                        uint32_t n = counts[c];

                        /* blocks: every tensor, its two blocks; gaps keep tensors apart */
                        cache_init(&src, true, n, 8, 64, 0, 0, 64);
                        cache_init(&dst, true, n, 8, 64, 1, 0, 64);
                        req = blocks_request(&src, &dst, sb, 2, db, 2);
                        req.tensor_num_per_layer = tpls[t];
                        p = build_ok(&req);
                        ck_assert_uint_eq(p->n_segments, 2 * n);
                        ck_assert_uint_eq(p->total_bytes, 2 * n * 64);
                        for (uint32_t k = 0; k < n; k++) {
                                assert_segment(p, 2 * k, 0, src.t[k].offset + 2 * 64, 1,
                                               dst.t[k].offset, 64);
                                assert_segment(p, 2 * k + 1, 0, src.t[k].offset + 5 * 64, 1,
                                               dst.t[k].offset + 7 * 64, 64);
                        }
                        plan_free(p);

                        /* an item: one segment per tensor */
                        cache_init(&src, false, n, 2, 128, 0, 0, 64);
                        cache_init(&dst, false, n, 3, 128, 1, 0, 64);
                        req = item_request(&src, &dst, 1, 2, -1);
                        req.tensor_num_per_layer = tpls[t];
                        p = build_ok(&req);
                        ck_assert_uint_eq(p->n_segments, n);
                        ck_assert_uint_eq(p->total_bytes, n * 128);
                        for (uint32_t k = 0; k < n; k++)
                                assert_segment(p, k, 0, src.t[k].offset + 128, 1,
                                               dst.t[k].offset + 256, 128);
                        plan_free(p);
                }

        /* Every tensor of one against every tensor of the other: the counts must agree. */
        cache_init(&src, true, 3, 8, 64, 0, 0, 0);
        cache_init(&dst, true, 2, 8, 64, 1, 0, 0);
        req = blocks_request(&src, &dst, sb, 2, db, 2);
        assert_plan_error(&req, STATUS_CACHE_INCOMPATIBLE,
                          "the source cache has 3 tensors, the destination 2");
}
END_TEST

START_TEST(test_layer_ranges)
{
        TestCache src, dst;
        uint64_t b[1] = {0};
        PlanRequest req;

        cache_init(&src, true, 16, 8, 64, 0, 0, 0); /* 8 layers */
        cache_init(&dst, true, 8, 8, 64, 1, 0, 0);  /* 4 layers */

        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.src_layers = (PlanLayers){2, 9};
        req.dst_layers = (PlanLayers){0, 3};
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_layers [2, 9] is outside the 8 layers of the source cache");

        req.src_layers = (PlanLayers){2, 5};
        req.dst_layers = (PlanLayers){1, 4};
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_layers [1, 4] is outside the 4 layers of the destination cache");

        req.src_layers = (PlanLayers){5, 2};
        assert_plan_error(&req, STATUS_PARAM_INVALID, "src_layers [5, 2] is not a layer range");
        req.src_layers = (PlanLayers){-2, 3};
        assert_plan_error(&req, STATUS_PARAM_INVALID, "src_layers [-2, 3] is not a layer range");

        req.src_layers = (PlanLayers){0, 2};
        req.dst_layers = (PlanLayers){2, 3};
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_layers has 3 layers but dst_layers has 2");

        /* all layers of both: 16 tensors against 8 */
        req.src_layers = (PlanLayers){PLAN_LAYERS_ALL, 0};
        req.dst_layers = (PlanLayers){PLAN_LAYERS_ALL, 0};
        assert_plan_error(&req, STATUS_CACHE_INCOMPATIBLE,
                          "the source cache has 16 tensors, the destination 8");

        /* all layers of a 4-layer destination against 4 source layers; last is ignored */
        req.src_layers = (PlanLayers){4, 7};
        req.dst_layers = (PlanLayers){PLAN_LAYERS_ALL, 99};
        Plan *p = build_ok(&req);
        ck_assert_uint_eq(p->total_bytes, 8 * 64);
        plan_free(p);
}
END_TEST

START_TEST(test_cache_kinds)
{
        TestCache blk, cont;
        uint64_t b[1] = {0};
        PlanRequest req;

        cache_init(&blk, true, 2, 4, 64, 0, 0, 0);
        cache_init(&cont, false, 2, 4, 64, 1, 0, 0);

        req = blocks_request(&cont, &blk, b, 1, b, 1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the source cache is contiguous but this transfer needs a blocks cache");
        req = blocks_request(&blk, &cont, b, 1, b, 1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the destination cache is contiguous but this transfer needs a blocks "
                          "cache");
        req = item_request(&blk, &cont, 0, 0, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the source cache is a blocks cache but this transfer needs a "
                          "contiguous cache");
        req = item_request(&cont, &blk, 0, 0, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the destination cache is a blocks cache but this transfer needs a "
                          "contiguous cache");
        req = item_to_blocks_request(&blk, &blk, 0, b, 1, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the source cache is a blocks cache but this transfer needs a "
                          "contiguous cache");
        req = item_to_blocks_request(&cont, &cont, 0, b, 1, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the destination cache is contiguous but this transfer needs a blocks "
                          "cache");
}
END_TEST

START_TEST(test_item_validation)
{
        TestCache src, dst, dst_small;
        uint64_t b[2] = {0, 1};
        PlanRequest req;

        cache_init(&src, false, 2, 4, 4096, 0, 0, 0);
        cache_init(&dst, false, 2, 4, 4096, 1, 0, 0);
        cache_init(&dst_small, false, 2, 4, 2048, 1, 0, 0);

        req = item_request(&src, &dst, 4, 0, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_index=4 is out of range, the source cache has batch size 4");
        req = item_request(&src, &dst, 0, 7, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_index=7 is out of range, the destination cache has batch size 4");
        req = item_request(&src, &dst, 0, 0, 0);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "size=0 is invalid");
        req = item_request(&src, &dst, 0, 0, -5);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "size=-5 is invalid");
        req = item_request(&src, &dst, 0, 0, 5000);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "size=5000 is larger than the source item (4096 bytes)");
        req = item_request(&src, &dst_small, 0, 0, 3000);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "size=3000 is larger than the destination item (2048 bytes)");
        req = item_request(&src, &dst_small, 0, 0, -1);
        assert_plan_error(&req, STATUS_CACHE_INCOMPATIBLE,
                          "item size differs: source 4096 bytes, destination 2048");
        req = item_request(&src, &dst, 0, 0, -1);
        req.src_blocks = b;
        req.n_src_blocks = 2;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "src_blocks has 2 entries but must be empty");
        req = item_request(&src, &dst, 0, 0, -1);
        req.dst_blocks = b;
        req.n_dst_blocks = 1;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks has 1 entries but must be empty");

        /* a smaller size fits a smaller destination item */
        req = item_request(&src, &dst_small, 3, 1, 2048);
        Plan *p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 2);
        assert_segment(p, 0, 0, 3 * 4096, 1, 2048, 2048);
        assert_segment(p, 1, 0, 4 * 4096 + 3 * 4096, 1, 4 * 2048 + 2048, 2048);
        ck_assert_uint_eq(p->total_bytes, 4096);
        plan_free(p);
}
END_TEST

START_TEST(test_item_to_blocks_validation)
{
        TestCache src, dst;
        uint64_t b[5] = {0, 1, 2, 3, 4};
        PlanRequest req;

        cache_init(&src, false, 2, 2, 16384, 0, 0, 0);
        cache_init(&dst, true, 2, 16, 4096, 1, 0, 0);

        req = item_to_blocks_request(&src, &dst, 0, b, 3, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_blocks has 3 blocks of 4096 bytes but the source item is 16384 "
                          "bytes, which fills 4");
        req = item_to_blocks_request(&src, &dst, 0, b, 5, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_blocks has 5 blocks of 4096 bytes but the source item is 16384 "
                          "bytes, which fills 4");
        req = item_to_blocks_request(&src, &dst, 0, b, 1, 4097);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "which fills 2");
        req = item_to_blocks_request(&src, &dst, 0, b, 0, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks is empty");
        req = item_to_blocks_request(&src, &dst, 2, b, 4, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_index=2 is out of range, the source cache has batch size 2");
        req = item_to_blocks_request(&src, &dst, 0, b, 4, 16385);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "size=16385 is larger than the source item (16384 bytes)");
        req = item_to_blocks_request(&src, &dst, 0, b, 4, 0);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "size=0 is invalid");
        req = item_to_blocks_request(&src, &dst, 0, b, 4, -1);
        req.src_blocks = b;
        req.n_src_blocks = 1;
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "src_blocks has 1 entries but must be empty when the source cache is "
                          "contiguous");
        b[3] = 16;
        req = item_to_blocks_request(&src, &dst, 0, b, 4, -1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "dst_blocks[3]=16 is out of range, cache has 16 blocks");
        b[3] = 1;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks[3]=1 repeats dst_blocks[1]");
}
END_TEST

START_TEST(test_malformed_request)
{
        TestCache src, dst;
        uint64_t b[1] = {0};
        PlanRequest req;
        Error err = ERROR_INIT;
        Plan *p = SENTINEL;

        cache_init(&src, true, 2, 4, 64, 0, 0, 0);
        cache_init(&dst, true, 2, 4, 64, 1, 0, 0);

        ck_assert_int_eq(plan_build(NULL, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_eq(p, SENTINEL);

        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.mode = _PLAN_MODE_MAX;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "unknown transfer mode 3");
        req.mode = _PLAN_MODE_INVALID;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "unknown transfer mode -22");

        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.src = NULL;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "no source cache");
        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.dst = NULL;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "no destination cache");

        dst.c.tensor_size = 100; /* 4 blocks of 64 do not fit */
        req = blocks_request(&src, &dst, b, 1, b, 1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "the destination cache has 4 units of 64 bytes, more than its tensor "
                          "size of 100 bytes");
        cache_init(&dst, true, 2, 4, 64, 1, 0, 0);
        dst.t[1].offset = UINT64_MAX - 100;
        req = blocks_request(&src, &dst, b, 1, b, 1);
        assert_plan_error(&req, STATUS_PARAM_INVALID,
                          "tensor 1 of the destination cache ends past 2^64");
        cache_init(&dst, true, 2, 4, 64, 1, 0, 0);
        dst.c.stride = 0;
        assert_plan_error(&req, STATUS_PARAM_INVALID, "the destination cache has no blocks");
        cache_init(&dst, true, 0, 4, 64, 1, 0, 0);
        assert_plan_error(&req, STATUS_PARAM_INVALID, "the destination cache has no tensors");
}
END_TEST

START_TEST(test_null_error)
{
        TestCache src, dst;
        uint64_t b[1] = {9};
        PlanRequest req;
        Error err = ERROR_INIT;
        Plan *p = NULL;

        cache_init(&src, true, 2, 4, 64, 0, 0, 0);
        cache_init(&dst, true, 2, 4, 64, 1, 0, 0);
        req = blocks_request(&src, &dst, b, 1, b, 1);
        /* a NULL Error is allowed */
        ck_assert_int_eq(plan_build(&req, &p, NULL), STATUS_PARAM_INVALID);
        ck_assert_ptr_null(p);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "src_blocks[0]=9"));
}
END_TEST

/* ---- merging and mapping ---- */

START_TEST(test_merge_contiguous_run)
{
        TestCache src, dst;
        uint64_t sb[10], db[10];
        PlanRequest req;
        Plan *p;

        /* 1 layer, tensors 1000 bytes apart (not adjacent) */
        cache_init(&src, true, 2, 64, 16, 3, 0, 1000);
        cache_init(&dst, true, 2, 128, 16, 4, 500, 1000);
        for (int i = 0; i < 10; i++) {
                sb[i] = 10 + i;
                db[i] = 100 + i;
        }
        req = blocks_request(&src, &dst, sb, 10, db, 10);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 2);
        assert_segment(p, 0, 3, 10 * 16, 4, 500 + 100 * 16, 160);
        assert_segment(p, 1, 3, 64 * 16 + 1000 + 10 * 16, 4, 500 + 128 * 16 + 1000 + 100 * 16, 160);
        ck_assert_uint_eq(p->total_bytes, 320);
        plan_free(p);
}
END_TEST

/*
 * Slices: half of each 32-byte source block into 16-byte destination blocks. A run of
 * neighbouring blocks is one copy a block (the halves are 16 bytes apart); slices that are whole
 * blocks on both sides merge as before; and the checks.
 */
START_TEST(test_slices)
{
        TestCache src, dst, same;
        uint64_t sb[4] = {4, 5, 6, 7}, db[4] = {0, 1, 2, 3};
        Error err = ERROR_INIT;
        PlanRequest req;
        Plan *p;

        cache_init(&src, true, 1, 8, 32, 1, 0, 0);
        cache_init(&dst, true, 1, 8, 16, 2, 1000, 0);
        cache_init(&same, true, 1, 8, 32, 3, 2000, 0);
        /* The second half of 4 neighbouring blocks into 4 whole half-size ones: one segment of
         * 4 pieces, a source block (32) and a destination block (16) apart. */
        req = blocks_request(&src, &dst, sb, 4, db, 4);
        req.src_slice = (PlanSlice){16, 16};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_pieces(p, 0, 1, 4 * 32 + 16, 2, 1000, 16, 4);
        ck_assert_uint_eq(p->src_step, 32);
        ck_assert_uint_eq(p->dst_step, 16);
        ck_assert_uint_eq(p->total_bytes, 64);
        plan_free(p);

        /* Runs break where either list does: {0,1}->{0,1}, {3,4}->{2,3}, {5}->{7}. */
        {
                uint64_t rs[5] = {0, 1, 3, 4, 5}, rd[5] = {0, 1, 2, 3, 7};

                req = blocks_request(&src, &dst, rs, 5, rd, 5);
                req.src_slice = (PlanSlice){8, 16};
                p = build_ok(&req);
                ck_assert_uint_eq(p->n_segments, 3);
                assert_pieces(p, 0, 1, 8, 2, 1000, 16, 2);
                assert_pieces(p, 1, 1, 3 * 32 + 8, 2, 1000 + 2 * 16, 16, 2);
                assert_pieces(p, 2, 1, 5 * 32 + 8, 2, 1000 + 7 * 16, 16, 1);
                ck_assert_uint_eq(p->total_bytes, 5 * 16);
                plan_free(p);
        }

        /* Whole blocks named as slices: still one merged copy. */
        req = blocks_request(&src, &same, sb, 4, db, 4);
        req.src_slice = (PlanSlice){0, 32};
        req.dst_slice = (PlanSlice){0, 0};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_segment(p, 0, 1, 4 * 32, 3, 2000, 128);
        plan_free(p);

        req = blocks_request(&src, &dst, sb, 4, db, 4);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_CACHE_INCOMPATIBLE);
        req.src_slice = (PlanSlice){8, 16};
        req.dst_slice = (PlanSlice){4, 0};
        error_clear(&err);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "they move the same bytes"));
        req.dst_slice = (PlanSlice){4, 16};
        error_clear(&err);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "dst_slice [4, 20) goes past the block of 16"));
        req.src_slice = (PlanSlice){UINT64_MAX, 2};
        error_clear(&err);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "is not inside a block"));
        req.src_slice = (PlanSlice){16, UINT64_MAX};
        req.dst_slice = (PlanSlice){};
        error_clear(&err);
        ck_assert_int_eq(plan_build(&req, &p, &err), STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "goes past the block of 32"));
}
END_TEST

START_TEST(test_merge_scattered_and_reversed)
{
        TestCache src, dst;
        uint64_t sb[4] = {1, 3, 5, 7}, db[4] = {2, 4, 6, 8};
        uint64_t rev[3] = {5, 4, 3};
        uint64_t mix_s[5] = {1, 2, 3, 10, 11}, mix_d[5] = {20, 21, 22, 5, 6};
        uint64_t half_s[2] = {1, 2}, half_d[2] = {5, 7};
        PlanRequest req;
        Plan *p;

        cache_init(&src, true, 2, 32, 8, 0, 0, 64);
        cache_init(&dst, true, 2, 32, 8, 1, 0, 64);

        req = blocks_request(&src, &dst, sb, 4, db, 4);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 8);
        for (size_t i = 0; i < 4; i++)
                assert_segment(p, i, 0, sb[i] * 8, 1, db[i] * 8, 8);
        ck_assert_uint_eq(p->total_bytes, 64);
        plan_free(p);

        req = blocks_request(&src, &dst, rev, 3, rev, 3);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 6);
        assert_segment(p, 0, 0, 40, 1, 40, 8);
        assert_segment(p, 1, 0, 32, 1, 32, 8);
        assert_segment(p, 2, 0, 24, 1, 24, 8);
        plan_free(p);

        req = blocks_request(&src, &dst, mix_s, 5, mix_d, 5);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        assert_segment(p, 0, 0, 8, 1, 160, 24);
        assert_segment(p, 1, 0, 80, 1, 40, 16);
        plan_free(p);

        /* contiguous on one side only */
        req = blocks_request(&src, &dst, half_s, 2, half_d, 2);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        plan_free(p);
        req = blocks_request(&src, &dst, half_d, 2, half_s, 2);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        plan_free(p);
}
END_TEST

START_TEST(test_merge_adjacent_tensors)
{
        TestCache src, dst;
        uint64_t all[16];
        PlanRequest req;
        Plan *p;

        for (int i = 0; i < 16; i++)
                all[i] = i;

        /* 8 tensors back to back in one region each side: one segment for everything */
        cache_init(&src, true, 8, 16, 32, 0, 0, 0);
        cache_init(&dst, true, 8, 16, 32, 1, 4096, 0);
        req = blocks_request(&src, &dst, all, 16, all, 16);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_segment(p, 0, 0, 0, 1, 4096, 8 * 16 * 32);
        ck_assert_uint_eq(p->total_bytes, 8 * 16 * 32);
        plan_free(p);

        /* the same with a layer range: layers 1..2 of both */
        req.src_layers = (PlanLayers){1, 2};
        req.dst_layers = (PlanLayers){1, 2};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_segment(p, 0, 0, 2 * 512, 1, 4096 + 2 * 512, 4 * 512);
        plan_free(p);

        /* adjacent in memory but every other tensor in another region: no merging across */
        cache_init(&src, true, 4, 16, 32, 0, 0, 0);
        src.t[1].region = 7;
        src.t[3].region = 7;
        cache_init(&dst, true, 4, 16, 32, 1, 0, 0);
        req = blocks_request(&src, &dst, all, 16, all, 16);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        assert_segment(p, 1, 7, 512, 1, 512, 512);
        plan_free(p);

        /* not all blocks: the tail of tensor t and the head of t+1 are not adjacent */
        cache_init(&src, true, 4, 16, 32, 0, 0, 0);
        req = blocks_request(&src, &dst, all, 15, all, 15);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        plan_free(p);
}
END_TEST

START_TEST(test_layer_mapping)
{
        TestCache src, dst;
        uint64_t b[1] = {3};
        PlanRequest req;
        Plan *p;

        /* every tensor in its own region so the pairing is visible */
        cache_init(&src, true, 16, 8, 64, 0, 0, 0);
        for (uint32_t i = 0; i < 16; i++)
                src.t[i] = (PlanTensor){100 + i, 1000 * i};
        cache_init(&dst, true, 8, 4, 64, 0, 0, 0);
        for (uint32_t i = 0; i < 8; i++)
                dst.t[i] = (PlanTensor){200 + i, 300 * i};

        req = blocks_request(&src, &dst, b, 1, b, 1);
        req.src_layers = (PlanLayers){4, 6};
        req.dst_layers = (PlanLayers){1, 3};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 6);
        for (uint32_t k = 0; k < 6; k++)
                assert_segment(p, k, 108 + k, 1000 * (8 + k) + 3 * 64, 202 + k,
                               300 * (2 + k) + 3 * 64, 64);
        plan_free(p);

        /* tensor_num_per_layer=4: layer 1 of the source is tensors 4..7 */
        req.tensor_num_per_layer = 4;
        req.src_layers = (PlanLayers){1, 1};
        req.dst_layers = (PlanLayers){0, 0};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        for (uint32_t k = 0; k < 4; k++)
                assert_segment(p, k, 104 + k, 1000 * (4 + k) + 192, 200 + k, 300 * k + 192, 64);
        plan_free(p);

        /* tensor_num_per_layer=1 */
        req.tensor_num_per_layer = 1;
        req.src_layers = (PlanLayers){15, 15};
        req.dst_layers = (PlanLayers){0, 0};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_segment(p, 0, 115, 15000 + 192, 200, 192, 64);
        plan_free(p);
}
END_TEST

START_TEST(test_item_to_blocks_chunks)
{
        TestCache src, dst;
        uint64_t db[3] = {7, 2, 3};
        uint64_t one[1] = {5};
        PlanRequest req;
        Plan *p;

        /* a 10000-byte item into 4096-byte blocks: 4096 + 4096 + 1808 */
        cache_init(&src, false, 2, 3, 10000, 0, 0, 0);
        cache_init(&dst, true, 2, 8, 4096, 1, 0, 0);
        req = item_to_blocks_request(&src, &dst, 1, db, 3, -1);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        assert_segment(p, 0, 0, 10000, 1, 7 * 4096, 4096);
        /* blocks 2 and 3 are adjacent: the second and the partial third chunk merge */
        assert_segment(p, 1, 0, 10000 + 4096, 1, 2 * 4096, 4096 + 1808);
        assert_segment(p, 2, 0, 30000 + 10000, 1, 8 * 4096 + 7 * 4096, 4096);
        assert_segment(p, 3, 0, 30000 + 10000 + 4096, 1, 8 * 4096 + 2 * 4096, 5904);
        ck_assert_uint_eq(p->total_bytes, 20000);
        plan_free(p);

        /* exact multiple: the last chunk is whole */
        req = item_to_blocks_request(&src, &dst, 2, db, 2, 8192);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4);
        assert_segment(p, 1, 0, 20000 + 4096, 1, 2 * 4096, 4096);
        ck_assert_uint_eq(p->total_bytes, 2 * 8192);
        plan_free(p);

        /* a small size fits one partial block */
        req = item_to_blocks_request(&src, &dst, 0, one, 1, 100);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 2);
        assert_segment(p, 0, 0, 0, 1, 5 * 4096, 100);
        ck_assert_uint_eq(p->total_bytes, 200);
        plan_free(p);
}
END_TEST

START_TEST(test_item_whole)
{
        TestCache src, dst;
        PlanRequest req;
        Plan *p;

        /* batch 1, tensors back to back: whole-item copies of all tensors merge into one */
        cache_init(&src, false, 6, 1, 256, 0, 0, 0);
        cache_init(&dst, false, 6, 1, 256, 1, 64, 0);
        req = item_request(&src, &dst, 0, 0, -1);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 1);
        assert_segment(p, 0, 0, 0, 1, 64, 6 * 256);
        plan_free(p);

        /* batch 4: slot 2 -> slot 0 per tensor */
        cache_init(&src, false, 2, 4, 256, 0, 0, 0);
        cache_init(&dst, false, 2, 4, 256, 1, 0, 0);
        req = item_request(&src, &dst, 2, 0, -1);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 2);
        assert_segment(p, 0, 0, 512, 1, 0, 256);
        assert_segment(p, 1, 0, 1024 + 512, 1, 1024, 256);
        ck_assert_uint_eq(p->total_bytes, 512);
        plan_free(p);
}
END_TEST

START_TEST(test_large_request)
{
        TestCache src, dst, half;
        const size_t n = 10000;
        uint64_t *sb = calloc(n, sizeof(uint64_t)), *db = calloc(n, sizeof(uint64_t));
        PlanRequest req;
        Plan *p;

        ck_assert_ptr_nonnull(sb);
        ck_assert_ptr_nonnull(db);
        cache_init(&src, true, 4, 20000, 4096, 0, 0, 0);
        cache_init(&dst, true, 4, 20000, 4096, 1, 0, 0);

        /* sorted runs of 100 blocks: one segment per run per tensor */
        for (size_t i = 0; i < n; i++) {
                sb[i] = i + (i / 100) * 7;
                db[i] = 2 * n - 1 - (i / 100) * 100 - 99 + i % 100;
        }
        req = blocks_request(&src, &dst, sb, n, db, n);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4 * 100);
        ck_assert_uint_eq(p->total_bytes, 4 * n * 4096);
        plan_free(p);

        /* The same runs, the second half of every source block into half-size blocks (a decode
         * rank with twice the tensor parallelism): still one segment per run per tensor, of
         * 100 pieces each, not one per block. */
        cache_init(&half, true, 4, 20000, 2048, 1, 0, 0);
        req = blocks_request(&src, &half, sb, n, db, n);
        req.src_slice = (PlanSlice){2048, 2048};
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4 * 100);
        for (size_t i = 0; i < p->n_segments; i++) {
                ck_assert_uint_eq(p->segments[i].count, 100);
                ck_assert_uint_eq(p->segments[i].len, 2048);
        }
        ck_assert_uint_eq(p->total_bytes, 4 * n * 2048);
        plan_free(p);

        /* scattered: every other block */
        for (size_t i = 0; i < n; i++)
                sb[i] = db[i] = 2 * i;
        req = blocks_request(&src, &dst, sb, n, db, n);
        p = build_ok(&req);
        ck_assert_uint_eq(p->n_segments, 4 * n);
        plan_free(p);

        db[n - 1] = db[0];
        assert_plan_error(&req, STATUS_PARAM_INVALID, "dst_blocks[9999]=0 repeats dst_blocks[0]");
        free(sb);
        free(db);
}
END_TEST

static Suite *plan_suite(void)
{
        Suite *s = suite_create("plan");
        TCase *tc;

        tc = tcase_create("validation");
        tcase_add_test(tc, test_blocks_list_lengths);
        tcase_add_test(tc, test_blocks_out_of_range);
        tcase_add_test(tc, test_blocks_repeat_bitmap);
        tcase_add_test(tc, test_blocks_list_facts);
        tcase_add_test(tc, test_blocks_repeat_sorted);
        tcase_add_test(tc, test_block_size_mismatch);
        tcase_add_test(tc, test_tensor_num_per_layer);
        tcase_add_test(tc, test_no_layer_range_moves_every_tensor);
        tcase_add_test(tc, test_layer_ranges);
        tcase_add_test(tc, test_cache_kinds);
        tcase_add_test(tc, test_item_validation);
        tcase_add_test(tc, test_item_to_blocks_validation);
        tcase_add_test(tc, test_malformed_request);
        tcase_add_test(tc, test_null_error);
        suite_add_tcase(s, tc);

        tc = tcase_create("segments");
        tcase_add_test(tc, test_merge_contiguous_run);
        tcase_add_test(tc, test_slices);
        tcase_add_test(tc, test_merge_scattered_and_reversed);
        tcase_add_test(tc, test_merge_adjacent_tensors);
        tcase_add_test(tc, test_layer_mapping);
        tcase_add_test(tc, test_item_to_blocks_chunks);
        tcase_add_test(tc, test_item_whole);
        tcase_add_test(tc, test_large_request);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(plan_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
