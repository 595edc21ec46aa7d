/* SPDX-License-Identifier: MIT */
/*
 * Pool: first-fit allocator over one memfd region. Free and allocated extents are kept in two
 * arrays sorted by offset; the pool holds at most a few thousand extents, so linear scans and
 * memmove are cheap and easy to check.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>

#include "common/macro.h"
#include "daemon/memory/pool.h"

typedef struct Extent {
        uint64_t offset;
        uint64_t size;
} Extent;

typedef struct ExtentArray {
        Extent *items;
        size_t n;
        size_t allocated;
} ExtentArray;

struct Pool {
        Region *region;
        uint64_t size;
        uint64_t used;
        unsigned page_shift;
        ExtentArray free;  /* disjoint, never adjacent (coalesced), by offset */
        ExtentArray alloc; /* by offset */
        bool pinned;       /* a registration holds the pages: never punch them out */
};

/* Makes room for one more extent, so that a later insert cannot fail. */
static int extent_array_reserve(ExtentArray *a)
{
        Extent *items;
        size_t n;

        if (a->n < a->allocated)
                return 0;
        n = a->allocated ? a->allocated * 2 : 16;
        items = reallocarray(a->items, n, sizeof(*items));
        if (!items)
                return -ENOMEM;
        a->items = items;
        a->allocated = n;
        return 0;
}

static void extent_array_insert(ExtentArray *a, size_t i, Extent e)
{
        assert(a->n < a->allocated);
        assert(i <= a->n);
        memmove(a->items + i + 1, a->items + i, (a->n - i) * sizeof(*a->items));
        a->items[i] = e;
        a->n++;
}

static void extent_array_remove(ExtentArray *a, size_t i)
{
        assert(i < a->n);
        memmove(a->items + i, a->items + i + 1, (a->n - i - 1) * sizeof(*a->items));
        a->n--;
}

/* Index of the first extent whose offset is >= @offset (a->n when none is). */
static size_t extent_array_lower_bound(const ExtentArray *a, uint64_t offset)
{
        size_t lo = 0, hi = a->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (a->items[mid].offset < offset)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* Rounds @size up to a page; false when that overflows. */
static bool pool_round(unsigned page_shift, uint64_t size, uint64_t *ret)
{
        uint64_t page = UINT64_C(1) << page_shift;

        if (size > UINT64_MAX - (page - 1))
                return false;
        *ret = ALIGN_POW2(size, page);
        return true;
}

Pool *pool_free(Pool *pool)
{
        if (!pool)
                return NULL;
        region_unref(pool->region);
        free(pool->free.items);
        free(pool->alloc.items);
        free(pool);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Pool, pool_free)

int pool_new(uint64_t size, unsigned page_shift, uint64_t region_id, Pool **ret)
{
        _cleanup_(pool_freep) Pool *pool = NULL;
        uint64_t rounded;
        int r;

        assert(ret);

        if (page_shift < 12 || page_shift > 30)
                return -EINVAL;
        if (size == 0 || !pool_round(page_shift, size, &rounded))
                return -EINVAL;

        pool = calloc(1, sizeof(*pool));
        if (!pool)
                return -ENOMEM;
        pool->size = rounded;
        pool->page_shift = page_shift;

        r = extent_array_reserve(&pool->free);
        if (r < 0)
                return r;
        extent_array_insert(&pool->free, 0, (Extent){.offset = 0, .size = rounded});

        r = region_new_memfd("kvdist-pool", rounded, region_id, &pool->region);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(pool);
        return 0;
}

Region *pool_region(const Pool *pool)
{
        assert(pool);
        return pool->region;
}

int pool_alloc(Pool *pool, uint64_t size, uint64_t *ret_offset)
{
        uint64_t rounded;
        Extent e;
        size_t i, j;
        int r;

        assert(pool);
        assert(ret_offset);

        if (size == 0)
                return -EINVAL;
        if (!pool_round(pool->page_shift, size, &rounded))
                return -ENOMEM;

        for (i = 0; i < pool->free.n; i++)
                if (pool->free.items[i].size >= rounded)
                        break;
        if (i == pool->free.n)
                return -ENOMEM;

        r = extent_array_reserve(&pool->alloc);
        if (r < 0)
                return r;

        e = (Extent){.offset = pool->free.items[i].offset, .size = rounded};
        if (pool->free.items[i].size == rounded) {
                extent_array_remove(&pool->free, i);
        } else {
                pool->free.items[i].offset += rounded;
                pool->free.items[i].size -= rounded;
        }

        j = extent_array_lower_bound(&pool->alloc, e.offset);
        extent_array_insert(&pool->alloc, j, e);
        pool->used += rounded;

        *ret_offset = e.offset;
        return 0;
}

int pool_release(Pool *pool, uint64_t offset)
{
        Extent e;
        size_t i, j;
        bool merge_prev, merge_next;
        int r;

        assert(pool);

        i = extent_array_lower_bound(&pool->alloc, offset);
        if (i == pool->alloc.n || pool->alloc.items[i].offset != offset)
                return -ENOENT;
        e = pool->alloc.items[i];

        /* Reserve first: past this point nothing can fail. */
        r = extent_array_reserve(&pool->free);
        if (r < 0)
                return r;
        extent_array_remove(&pool->alloc, i);
        pool->used -= e.size;

        j = extent_array_lower_bound(&pool->free, e.offset);
        merge_prev =
                j > 0 && pool->free.items[j - 1].offset + pool->free.items[j - 1].size == e.offset;
        merge_next = j < pool->free.n && e.offset + e.size == pool->free.items[j].offset;

        if (merge_prev && merge_next) {
                pool->free.items[j - 1].size += e.size + pool->free.items[j].size;
                extent_array_remove(&pool->free, j);
        } else if (merge_prev) {
                pool->free.items[j - 1].size += e.size;
        } else if (merge_next) {
                pool->free.items[j].offset = e.offset;
                pool->free.items[j].size += e.size;
        } else {
                extent_array_insert(&pool->free, j, e);
        }
        return 0;
}

void pool_pin(Pool *pool)
{
        assert(pool);
        pool->pinned = true;
}

bool pool_pinned(const Pool *pool)
{
        assert(pool);
        return pool->pinned;
}

void pool_scrub(Pool *pool, uint64_t offset, uint64_t len)
{
        Region *r;

        assert(pool);
        assert(offset <= pool->size && len <= pool->size - offset);

        r = pool->region;
        /* A punched-out page is replaced by a fresh one on the next touch, under the mappings
         * but not under a registration, which keeps the old page: a pinned pool zeroes in
         * place. Otherwise the pages go back to the system until the next cache needs them. */
        if (pool->pinned || fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                      (off_t)offset, (off_t)len) < 0)
                memset(r->data + offset, 0, len);
}

uint64_t pool_size(const Pool *pool)
{
        assert(pool);
        return pool->size;
}

uint64_t pool_used(const Pool *pool)
{
        assert(pool);
        return pool->used;
}

unsigned pool_page_shift(const Pool *pool)
{
        assert(pool);
        return pool->page_shift;
}

unsigned pool_n_allocated(const Pool *pool)
{
        assert(pool);
        return (unsigned)pool->alloc.n;
}

unsigned pool_n_free_extents(const Pool *pool)
{
        assert(pool);
        return (unsigned)pool->free.n;
}

uint64_t pool_largest_free(const Pool *pool)
{
        uint64_t largest = 0;

        assert(pool);

        for (size_t i = 0; i < pool->free.n; i++)
                largest = MAX(largest, pool->free.items[i].size);
        return largest;
}
