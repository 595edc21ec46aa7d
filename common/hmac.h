/* SPDX-License-Identifier: MIT */
/* HMAC-SHA256 (RFC 2104) and a constant-time comparison for checking the tags it produces. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sha256.h"

#define HMAC_SHA256_SIZE SHA256_DIGEST_SIZE

/* Streaming state, keyed; treat as opaque. Needs no deinit; hmac_sha256_final() wipes it. */
typedef struct HmacSha256 {
        Sha256 inner; /* H((K0 ^ ipad) || text...) in progress */
        Sha256 outer; /* H((K0 ^ opad) || ...) waiting for the inner digest */
} HmacSha256;

/*
 * Starts a MAC in @ctx under the @key_len bytes at @key (any length; one longer than the 64-byte
 * block is hashed first, as RFC 2104 says). @ctx keeps no pointer to @key.
 */
void hmac_sha256_init(HmacSha256 *ctx, const void *key, size_t key_len);

/* Adds @len bytes at @data (may be NULL when @len is 0) to the MAC in @ctx. */
void hmac_sha256_update(HmacSha256 *ctx, const void *data, size_t len);

/*
 * Writes the 32-byte tag of everything added to @ctx into @out and wipes @ctx; call
 * hmac_sha256_init() before using @ctx again.
 */
void hmac_sha256_final(HmacSha256 *ctx, uint8_t out[HMAC_SHA256_SIZE]);

/* Writes the HMAC-SHA256 tag of @len bytes at @data under @key into @out. */
void hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                 uint8_t out[HMAC_SHA256_SIZE]);

/*
 * Whether the @n bytes at @a and @b are equal, taking the same time whatever they hold (it depends
 * on @n only), so that checking a received tag tells an attacker nothing about the expected one.
 */
bool hmac_memeq(const void *a, const void *b, size_t n);
