/* SPDX-License-Identifier: MIT */
/*
 * Memory: the root of the memory layer, what the daemon hands the layers above for memory: the
 * pool (none when memory_size is 0), the id source regions take their ids from (caches are
 * numbered per cluster by their CacheTable), and the release of a cache that left its cluster's
 * table.
 */
#pragma once

#include <stdint.h>

#include "common/id-source.h"
#include "daemon/memory/user.h"

typedef struct Cache Cache;
typedef struct Pool Pool;

typedef struct Memory {
        IdSource *ids;
        Pool *pool;         /* NULL when memory_size is 0 */
        UserRegistry users; /* what each local uid holds; the daemon sets it up */
} Memory;

/*
 * Prepares @m with ids from @ids and, when @pool_size is not 0, a pool of @pool_size bytes in
 * pages of 1 << @page_shift. Returns 0 or pool_new()'s error (@m holds no pool then).
 */
int memory_init(Memory *m, IdSource *ids, uint64_t pool_size, unsigned page_shift);

/* Frees the pool and forgets the users. */
void memory_deinit(Memory *m);

/*
 * Frees a cache that left its cluster's table. Its pool extent (zeroed) goes back to the pool,
 * but only once no transfer uses it any more: until then the cache is marked released and the
 * last transfer frees it, so nothing can land in memory that was handed to someone else.
 * Accepts NULL.
 */
void memory_release_cache(Memory *m, Cache *cache);
