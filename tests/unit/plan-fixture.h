/* SPDX-License-Identifier: MIT */
/*
 * Transfer planner test fixture, shared by the plan unit tests: a PlanCache with room for its
 * tensors, and plan_build() asserted to succeed. Failures are Check assertions.
 */
#pragma once

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "daemon/transfer/plan.h"

#define MAX_TENSORS 64

typedef struct TestCache {
        PlanCache c;
        PlanTensor t[MAX_TENSORS];
} TestCache;

/* Tensor i at region @region, offset base + i * (tensor_size + gap). */
static inline void cache_init(TestCache *tc, bool blocks, uint32_t n_tensors, uint64_t units,
                              uint64_t stride, uint32_t region, uint64_t base, uint64_t gap)
{
        ck_assert_uint_le(n_tensors, MAX_TENSORS);
        memset(tc, 0, sizeof(*tc));
        tc->c.blocks = blocks;
        tc->c.num_tensors = n_tensors;
        tc->c.units = units;
        tc->c.stride = stride;
        tc->c.tensor_size = units * stride;
        tc->c.tensors = tc->t;
        for (uint32_t i = 0; i < n_tensors; i++)
                tc->t[i] = (PlanTensor){region, base + i * (tc->c.tensor_size + gap)};
}

/* plan_build() of @req, asserted to succeed; the caller frees the plan. */
static inline Plan *build_ok(const PlanRequest *req)
{
        Error err = ERROR_INIT;
        Plan *p = NULL;
        int r = plan_build(req, &p, &err);

        ck_assert_msg(r == 0, "plan_build failed: %d %s", r, err.msg);
        ck_assert_int_eq(err.code, 0);
        ck_assert_ptr_nonnull(p);
        return p;
}
