/* SPDX-License-Identifier: MIT */
/*
 * Integration test caches: a cache whose whole region is one seeded pattern stream (tensors with
 * guard bytes around each), the list of copies a transfer is expected to make, and a check of
 * every byte of a destination region against it. Failures are Check assertions.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <kvdist/kvdist.h>

#include "tests/harness/harness.h"

/* Bytes before, between and after the tensors of a registered cache. */
#define TC_GUARD 320

typedef struct TCache {
        kvd_client *client;
        uint64_t id;
        bool blocks;
        bool pool; /* allocated from the daemon's pool */
        uint32_t num_tensors;
        uint64_t units;  /* blocks, or batch slots */
        uint64_t stride; /* bytes per block or item */
        uint64_t tensor_size;
        uint64_t seed; /* the region is one stream of this seed */
        uint8_t *mem;  /* kvd_mem_alloc() region; NULL for pool caches */
        size_t mem_size;
        void *addrs[KVD_MAX_TENSORS];
} TCache;

/*
 * Allocates and fills a region with kvd_mem_alloc() and registers a cache of @num_tensors
 * tensors, each @units x @unit_bytes bytes (shape {units, unit_bytes / 2}, float16) in it.
 * @keys: ReqKeys for a contiguous cache, at most one BlocksKey for a blocks cache.
 * Returns the status of the registration (the region is allocated either way).
 */
int tcache_register(TCache *tc, kvd_client *c, bool blocks, uint32_t num_tensors, uint64_t units,
                    uint64_t unit_bytes, uint64_t seed, const kvd_cache_key *keys, size_t n_keys,
                    kvd_remote_access access);

/* The bytes a TCache of that shape spans: its tensors and the guards around them. */
size_t tcache_mem_size(uint32_t num_tensors, uint64_t units, uint64_t unit_bytes);

/*
 * As tcache_register(), in @mem (tcache_mem_size() bytes the caller registered, e.g. with
 * kvd_mem_register()); NULL: kvd_mem_alloc() memory.
 */
int tcache_register_at(TCache *tc, kvd_client *c, uint8_t *mem, bool blocks, uint32_t num_tensors,
                       uint64_t units, uint64_t unit_bytes, uint64_t seed,
                       const kvd_cache_key *keys, size_t n_keys, kvd_remote_access access);

/* As tcache_register() from the daemon's pool (kvd_allocate_cache, contiguous). */
int tcache_allocate(TCache *tc, kvd_client *c, uint32_t num_tensors, uint64_t batch,
                    uint64_t unit_bytes, uint64_t seed, const kvd_cache_key *keys, size_t n_keys);

/* A blocks cache from the pool (kvd_allocate_blocks_cache), named by @blocks_key (may be NULL). */
int tcache_allocate_blocks(TCache *tc, kvd_client *c, uint32_t num_tensors, uint64_t num_blocks,
                           uint64_t block_bytes, uint64_t seed, const kvd_cache_key *blocks_key);

/* Where tensor @t starts in the cache's pattern stream. */
uint64_t tcache_tensor_off(const TCache *tc, uint32_t t);

/* One expected copy: @len bytes of stream @seed at @src land at offset @dst of the region. */
typedef struct TCopy {
        uint64_t dst;
        uint64_t src;
        uint64_t len;
        uint64_t seed;
} TCopy;

typedef struct TCopies {
        TCopy *v;
        size_t n;
        size_t cap;
} TCopies;

/* Frees the list and leaves it empty. */
void tcopies_free(TCopies *cp);

/* The tensors a layer range selects: *@first tensor and *@n tensors. */
void tcache_layers(const TCache *tc, kvd_layer_range l, uint32_t tpl, uint32_t *first, uint32_t *n);

/* src_blocks[i] -> dst_blocks[i] for the selected tensors. */
void tcopies_blocks(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                    kvd_layer_range dl, uint32_t tpl, const uint64_t *sb, const uint64_t *db,
                    size_t n);

/* Slice @ss of block sb[i] -> slice @ds of block db[i], every tensor (as many on both sides). */
void tcopies_blocks_sliced(TCopies *cp, const TCache *src, const TCache *dst, kvd_slice ss,
                           kvd_slice ds, const uint64_t *sb, const uint64_t *db, size_t n);

/* Item @si of @src -> item @di of @dst, @size bytes per tensor (-1: the whole item). */
void tcopies_item(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                  kvd_layer_range dl, uint32_t tpl, uint64_t si, uint64_t di, int64_t size);

/* Item @si of @src fills dst_blocks in order (the last one possibly in part). */
void tcopies_item_to_blocks(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                            kvd_layer_range dl, uint32_t tpl, uint64_t si, const uint64_t *db,
                            size_t n);

/*
 * Checks every byte of @tc's region (every tensor of a pool cache): inside the copies the
 * source stream, everywhere else (guards, untouched blocks) the cache's own pattern.
 */
void tcache_verify(const TCache *tc, const TCopies *cp);

/* tcache_verify() with no copies: nothing changed. */
void tcache_verify_untouched(const TCache *tc);

/*
 * Checks that each byte of @tc is either what tcache_verify() expects or its own old pattern
 * (a transfer that failed midway may have written part of its copies, never anything else).
 */
void tcache_verify_old_or_new(const TCache *tc, const TCopies *cp);

/* Asserts @r is @want and, when @substr is not NULL, that kvd_last_error(@c) contains it. */
#define expect_status(c, r, want, substr)                                                          \
        expect_status_at((c), (r), (want), (substr), #r, __FILE__, __LINE__)
void expect_status_at(kvd_client *c, int r, int want, const char *substr, const char *what,
                      const char *file, int line);

/* Asserts @r is KVD_OK. */
#define expect_ok(c, r) expect_status((c), (r), KVD_OK, NULL)

/* An integer at a '/'-separated path ("pool/used", "clusters/0/regions") of a status document. */
int64_t status_json_int(const char *json, const char *path);

/* The status document of @d through a fresh connection, parsed; json_decref() it. */
json_t *daemon_status_json(const HarnessDaemon *d);

/* kvd_daemon_status() through @c and status_json_int() of it. */
int64_t client_status_int(kvd_client *c, const char *path);
