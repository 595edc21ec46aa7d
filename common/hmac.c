/* SPDX-License-Identifier: MIT */
/* HMAC-SHA256, written from RFC 2104 section 2, with B = 64 and L = 32. */

#include <string.h>

#include "common/hmac.h"

#define IPAD 0x36
#define OPAD 0x5c

void hmac_sha256_init(HmacSha256 *ctx, const void *key, size_t key_len)
{
        uint8_t k0[SHA256_BLOCK_SIZE] = {0};
        uint8_t pad[SHA256_BLOCK_SIZE];

        /* K0: the key, or its digest when it is longer than a block, zero-padded to a block. */
        if (key_len > SHA256_BLOCK_SIZE)
                sha256(key, key_len, k0);
        else if (key_len > 0)
                memcpy(k0, key, key_len);

        for (size_t i = 0; i < SHA256_BLOCK_SIZE; i++)
                pad[i] = k0[i] ^ IPAD;
        sha256_init(&ctx->inner);
        sha256_update(&ctx->inner, pad, sizeof(pad));

        for (size_t i = 0; i < SHA256_BLOCK_SIZE; i++)
                pad[i] = k0[i] ^ OPAD;
        sha256_init(&ctx->outer);
        sha256_update(&ctx->outer, pad, sizeof(pad));

        explicit_bzero(k0, sizeof(k0));
        explicit_bzero(pad, sizeof(pad));
}

void hmac_sha256_update(HmacSha256 *ctx, const void *data, size_t len)
{
        sha256_update(&ctx->inner, data, len);
}

void hmac_sha256_final(HmacSha256 *ctx, uint8_t out[HMAC_SHA256_SIZE])
{
        uint8_t inner[SHA256_DIGEST_SIZE];

        sha256_final(&ctx->inner, inner);
        sha256_update(&ctx->outer, inner, sizeof(inner));
        sha256_final(&ctx->outer, out);
        explicit_bzero(inner, sizeof(inner));
}

void hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                 uint8_t out[HMAC_SHA256_SIZE])
{
        HmacSha256 ctx;

        hmac_sha256_init(&ctx, key, key_len);
        hmac_sha256_update(&ctx, data, len);
        hmac_sha256_final(&ctx, out);
}

bool hmac_memeq(const void *a, const void *b, size_t n)
{
        const volatile uint8_t *x = a, *y = b;
        uint8_t diff = 0;

        /* volatile reads: the compiler may not stop at the first difference. */
        for (size_t i = 0; i < n; i++)
                diff |= x[i] ^ y[i];
        return diff == 0;
}
