/* SPDX-License-Identifier: MIT */
/*
 * Requests the socket-level fuzz targets and their seed generator both build: the caches every
 * scripted cluster registers in its one region. A region is one FUZZ_MEMFD_SIZE memfd at
 * FUZZ_REGION_ADDR holding four tensors of FUZZ_TENSOR_BYTES: a blocks cache in the first two,
 * a contiguous cache in the last two. Each builder fills the storage it is given; the message
 * points into it.
 */
#pragma once

#include <stdint.h>

#include "tests/fuzz/fuzz-script.h"
#include "proto/kvdist.pb-c.h"

#define FUZZ_REGION_ADDR UINT64_C(0x100000)
#define FUZZ_CACHE_BLOCKS 8
#define FUZZ_CACHE_BLOCK_BYTES 2048
#define FUZZ_TENSOR_BYTES (FUZZ_CACHE_BLOCKS * FUZZ_CACHE_BLOCK_BYTES)
#define FUZZ_BATCH_SLOTS 2

_Static_assert(4 * FUZZ_TENSOR_BYTES == FUZZ_MEMFD_SIZE, "four tensors fill a region");

typedef struct FuzzBlocksCache {
        Kvdist__V1__RegisterCache msg;
        Kvdist__V1__CacheDesc desc;
        Kvdist__V1__BlocksKey blocks_key;
        Kvdist__V1__CacheKey key;
        Kvdist__V1__CacheKey *keys[1];
        int64_t shape[2];
        uint64_t addrs[2];
} FuzzBlocksCache;

typedef struct FuzzContiguousCache {
        Kvdist__V1__RegisterCache msg;
        Kvdist__V1__CacheDesc desc;
        Kvdist__V1__ReqKey req_keys[FUZZ_BATCH_SLOTS];
        Kvdist__V1__CacheKey key[FUZZ_BATCH_SLOTS];
        Kvdist__V1__CacheKey *keys[FUZZ_BATCH_SLOTS];
        int64_t shape[2];
        uint64_t addrs[2];
} FuzzContiguousCache;

/*
 * A remote-accessible blocks cache of 2 FLOAT16 tensors of FUZZ_CACHE_BLOCKS blocks in the first
 * half of the region, named BlocksKey {@cluster, @model}.
 */
void fuzz_blocks_cache_init(FuzzBlocksCache *c, uint64_t cluster, uint64_t model);

/*
 * A remote-accessible contiguous cache of 2 FLOAT16 tensors of FUZZ_BATCH_SLOTS slots in the
 * second half of the region, named by request keys {@cluster, req 1, 2, ..., no prefix, @model}.
 */
void fuzz_contiguous_cache_init(FuzzContiguousCache *c, uint64_t cluster, uint64_t model);
