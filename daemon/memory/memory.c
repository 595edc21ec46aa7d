/* SPDX-License-Identifier: MIT */
/* Memory: the memory layer's root: the pool, the id source, releasing caches. */
#include <inttypes.h>

#include "common/log.h"
#include "daemon/memory/cache.h"
#include "daemon/memory/memory.h"
#include "daemon/memory/pool.h"

int memory_init(Memory *m, IdSource *ids, uint64_t pool_size, unsigned page_shift)
{
        *m = (Memory){.ids = ids};
        if (pool_size == 0)
                return 0;
        return pool_new(pool_size, page_shift, id_source_next(ids), &m->pool);
}

void memory_deinit(Memory *m)
{
        m->pool = pool_free(m->pool);
        user_registry_deinit(&m->users);
}

void memory_release_cache(Memory *m, Cache *cache)
{
        uint64_t bytes;
        int r;

        if (!cache)
                return;
        if (cache->n_busy > 0) {
                cache->released = true;
                return;
        }
        bytes = cache->tensor_size * cache->desc.num_tensors;
        /* Registrations go before the pages they pin are handed back. */
        if (cache->regs_free) {
                cache->regs_free(cache->regs);
                cache->regs_free = NULL;
                cache->regs = NULL;
        }
        if (cache->pool_backed && m->pool) {
                /* Hand the pages back zeroed: the next cache carved here may belong to another
                 * cluster and must not see these bytes. */
                pool_scrub(m->pool, cache->pool_offset, bytes);
                r = pool_release(m->pool, cache->pool_offset);
                if (r < 0)
                        log_error_errno(
                                r, "cache %" PRIu64 ": no pool extent at %" PRIu64 ", ignoring",
                                cache->id, cache->pool_offset);
        }
        cache_free(cache);
}
