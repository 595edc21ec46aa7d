/* SPDX-License-Identifier: MIT */
/*
 * Pool: the daemon's memory pool of memory_size bytes, one memfd region carved into
 * page-aligned extents for kvd_allocate_cache(). First fit over an address-ordered free list;
 * freed extents coalesce with their neighbours.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon/memory/region.h"

typedef struct Pool Pool;

/*
 * Creates a pool of @size bytes (rounded up to the page size 1 << @page_shift, page_shift in
 * [12, 30]) backed by a new memfd region with id @region_id. -EINVAL bad size or shift.
 */
int pool_new(uint64_t size, unsigned page_shift, uint64_t region_id, Pool **ret);

/* Frees the pool; extents still allocated are forgotten (callers free them first). NULL ok. */
Pool *pool_free(Pool *pool);

/* The pool's region (borrowed; region_ref() it to keep it). */
Region *pool_region(const Pool *pool);

/*
 * Allocates @size bytes (rounded up to the page size) and returns the offset of the extent.
 * -EINVAL size 0, -ENOMEM no free extent large enough.
 */
int pool_alloc(Pool *pool, uint64_t size, uint64_t *ret_offset);

/* Returns the extent at @offset. -ENOENT when no extent starts there (nothing changes). */
int pool_release(Pool *pool, uint64_t offset);

/*
 * Zeroes [@offset, +@len) of the pool, for a freed extent before it is carved again (the next
 * cache may belong to another cluster): the pages are punched out of the memfd and go back to
 * the system, or, in a pinned pool, zeroed in place.
 */
void pool_scrub(Pool *pool, uint64_t offset, uint64_t len);

/*
 * Marks the pool pinned: a registration (RDMA) now holds every page of it as it is, so a page
 * must never be replaced under it; pool_scrub() zeroes in place from now on.
 */
void pool_pin(Pool *pool);
bool pool_pinned(const Pool *pool);

uint64_t pool_size(const Pool *pool);
uint64_t pool_used(const Pool *pool);
unsigned pool_page_shift(const Pool *pool);
/* Number of allocated extents and of free extents (for status and tests). */
unsigned pool_n_allocated(const Pool *pool);
unsigned pool_n_free_extents(const Pool *pool);
/* Size of the largest free extent: the biggest allocation that can succeed now. */
uint64_t pool_largest_free(const Pool *pool);
