/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4): a one-shot digest and a streaming context that lives on the stack. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32
#define SHA256_BLOCK_SIZE 64

/* Streaming state; treat as opaque. Needs no deinit; sha256_final() wipes it. */
typedef struct Sha256 {
        uint32_t h[8];                  /* chaining value */
        uint64_t total;                 /* bytes hashed so far */
        uint8_t buf[SHA256_BLOCK_SIZE]; /* a partial block waiting for more input */
        size_t buf_len;
} Sha256;

/* Starts a new digest in @ctx. */
void sha256_init(Sha256 *ctx);

/* Adds @len bytes at @data (may be NULL when @len is 0) to the digest in @ctx. */
void sha256_update(Sha256 *ctx, const void *data, size_t len);

/*
 * Writes the digest of everything added to @ctx into @out and wipes @ctx; call sha256_init()
 * before using @ctx again.
 */
void sha256_final(Sha256 *ctx, uint8_t out[SHA256_DIGEST_SIZE]);

/* Writes the SHA-256 digest of @len bytes at @data (may be NULL when @len is 0) into @out. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]);
