/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), written from the specification: section 6.2 with the notation of 4.1.2. */

#include <string.h>

#include "common/sha256.h"

/* FIPS 180-4 4.2.2: the fractional parts of the cube roots of the first 64 primes, 32 bits. */
static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
};

/* FIPS 180-4 5.3.3: the fractional parts of the square roots of the first 8 primes, 32 bits. */
static const uint32_t H0[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
        return (x >> n) | (x << (32 - n));
}

static inline uint32_t load_be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define BSIG0(x) (rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22))
#define BSIG1(x) (rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25))
#define SSIG0(x) (rotr(x, 7) ^ rotr(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (rotr(x, 17) ^ rotr(x, 19) ^ ((x) >> 10))

/* FIPS 180-4 6.2.2: folds @n whole 64-byte blocks at @p into the chaining value @h. */
static void sha256_blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
        uint32_t w[64];

        for (; n > 0; n--, p += SHA256_BLOCK_SIZE) {
                uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
                uint32_t e = h[4], f = h[5], g = h[6], k = h[7];

                for (unsigned t = 0; t < 16; t++)
                        w[t] = load_be32(p + 4 * t);
                for (unsigned t = 16; t < 64; t++)
                        w[t] = SSIG1(w[t - 2]) + w[t - 7] + SSIG0(w[t - 15]) + w[t - 16];

                for (unsigned t = 0; t < 64; t++) {
                        uint32_t t1 = k + BSIG1(e) + CH(e, f, g) + K[t] + w[t];
                        uint32_t t2 = BSIG0(a) + MAJ(a, b, c);

                        k = g;
                        g = f;
                        f = e;
                        e = d + t1;
                        d = c;
                        c = b;
                        b = a;
                        a = t1 + t2;
                }

                h[0] += a;
                h[1] += b;
                h[2] += c;
                h[3] += d;
                h[4] += e;
                h[5] += f;
                h[6] += g;
                h[7] += k;
        }

        /* The schedule may hold key material (HMAC). */
        explicit_bzero(w, sizeof(w));
}

void sha256_init(Sha256 *ctx)
{
        *ctx = (Sha256){.total = 0};
        memcpy(ctx->h, H0, sizeof(H0));
}

void sha256_update(Sha256 *ctx, const void *data, size_t len)
{
        const uint8_t *p = data;

        if (len == 0)
                return;
        ctx->total += len;

        if (ctx->buf_len > 0) {
                size_t take = SHA256_BLOCK_SIZE - ctx->buf_len;

                if (take > len)
                        take = len;
                memcpy(ctx->buf + ctx->buf_len, p, take);
                ctx->buf_len += take;
                p += take;
                len -= take;
                if (ctx->buf_len < SHA256_BLOCK_SIZE)
                        return;
                sha256_blocks(ctx->h, ctx->buf, 1);
                ctx->buf_len = 0;
        }

        if (len >= SHA256_BLOCK_SIZE) {
                size_t n = len / SHA256_BLOCK_SIZE;

                sha256_blocks(ctx->h, p, n);
                p += n * SHA256_BLOCK_SIZE;
                len -= n * SHA256_BLOCK_SIZE;
        }

        if (len > 0) {
                memcpy(ctx->buf, p, len);
                ctx->buf_len = len;
        }
}

void sha256_final(Sha256 *ctx, uint8_t out[SHA256_DIGEST_SIZE])
{
        uint64_t bits = ctx->total * 8;

        /* 5.1.1: a single 1 bit, zeros up to 56 mod 64 bytes, then the length in bits. */
        ctx->buf[ctx->buf_len++] = 0x80;
        if (ctx->buf_len > SHA256_BLOCK_SIZE - 8) {
                memset(ctx->buf + ctx->buf_len, 0, SHA256_BLOCK_SIZE - ctx->buf_len);
                sha256_blocks(ctx->h, ctx->buf, 1);
                ctx->buf_len = 0;
        }
        memset(ctx->buf + ctx->buf_len, 0, SHA256_BLOCK_SIZE - 8 - ctx->buf_len);
        store_be32(ctx->buf + SHA256_BLOCK_SIZE - 8, (uint32_t)(bits >> 32));
        store_be32(ctx->buf + SHA256_BLOCK_SIZE - 4, (uint32_t)bits);
        sha256_blocks(ctx->h, ctx->buf, 1);

        for (unsigned i = 0; i < 8; i++)
                store_be32(out + 4 * i, ctx->h[i]);

        /* The state may derive from a key (HMAC); leave nothing of it behind. */
        explicit_bzero(ctx, sizeof(*ctx));
}

void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE])
{
        Sha256 ctx;

        sha256_init(&ctx);
        sha256_update(&ctx, data, len);
        sha256_final(&ctx, out);
}
