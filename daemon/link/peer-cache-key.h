/* SPDX-License-Identifier: MIT */
/*
 * Cache keys between their wire form (kvdist.v1.CacheKey) and memory/'s CacheKey: the one
 * conversion both edges use, the client dispatch (control/) and the peer codec (link/peer*.c,
 * transfer-codec.c), so that memory/ itself knows nothing of the wire.
 */
#pragma once

#include "daemon/memory/cache.h"
#include "common/error.h"
#include "proto/kvdist.pb-c.h"

/* Room for one wire CacheKey and whichever key message its oneof points at. */
typedef struct PeerCacheKeyStorage {
        Kvdist__V1__CacheKey key;
        Kvdist__V1__ReqKey req;
        Kvdist__V1__IdIndexKey id_index;
        Kvdist__V1__BlocksKey blocks;
} PeerCacheKeyStorage;

/* Converts a wire CacheKey; PARAM_INVALID when it is missing or has no kind. */
int peer_cache_key_from_proto(const Kvdist__V1__CacheKey *k, CacheKey *ret, Error *err);

/* Fills @s from @key and returns &s->key, which points into @s. */
Kvdist__V1__CacheKey *peer_cache_key_to_proto(const CacheKey *key, PeerCacheKeyStorage *s);
