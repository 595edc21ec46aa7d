/* SPDX-License-Identifier: MIT */
/* CRC32C: portable slicing-by-8, or the SSE4.2 crc32 instruction on x86-64 CPUs that have it. */

#include <pthread.h>
#include <string.h>

#include "common/crc32c-internal.h"
#include "common/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

/* The Castagnoli polynomial 0x1EDC6F41 with its bits reversed, for a right-shifting register. */
#define CRC32C_POLY_REFLECTED 0x82F63B78u

/*
 * table[0][b]: the register after shifting in byte b (over a zero register).
 * table[k][b]: the same followed by k zero bytes, which lets the loop below fold 8 input bytes
 * with 8 independent look-ups.
 */
static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void)
{
        for (unsigned b = 0; b < 256; b++) {
                uint32_t r = b;

                for (unsigned bit = 0; bit < 8; bit++)
                        r = (r >> 1) ^ (CRC32C_POLY_REFLECTED & (0u - (r & 1)));
                table[0][b] = r;
        }
        for (unsigned k = 1; k < 8; k++)
                for (unsigned b = 0; b < 256; b++)
                        table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xff];
}

static inline uint32_t load_le32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len)
{
        const uint8_t *p = data;
        uint32_t r = ~crc;

        (void)pthread_once(&table_once, table_build);

        for (; len >= 8; len -= 8, p += 8) {
                uint32_t lo = load_le32(p) ^ r;
                uint32_t hi = load_le32(p + 4);

                r = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
                    table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
                    table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        }
        for (; len > 0; len--, p++)
                r = (r >> 8) ^ table[0][(r ^ *p) & 0xff];

        return ~r;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len)
{
        const uint8_t *p = data;
        uint64_t r = ~crc;

        /* Byte steps up to an 8-byte boundary, then whole words. */
        for (; len > 0 && ((uintptr_t)p & 7) != 0; len--, p++)
                r = _mm_crc32_u8((uint32_t)r, *p);
        for (; len >= 8; len -= 8, p += 8) {
                uint64_t w;

                memcpy(&w, p, sizeof(w));
                r = _mm_crc32_u64(r, w);
        }
        for (; len > 0; len--, p++)
                r = _mm_crc32_u8((uint32_t)r, *p);

        return ~(uint32_t)r;
}

bool crc32c_hw_available(void)
{
        __builtin_cpu_init();
        return __builtin_cpu_supports("sse4.2");
}

#else

uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len)
{
        return crc32c_sw(crc, data, len);
}

bool crc32c_hw_available(void)
{
        return false;
}

#endif

typedef uint32_t (*crc32c_fn)(uint32_t crc, const void *data, size_t len);

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
        static crc32c_fn impl;
        crc32c_fn f = __atomic_load_n(&impl, __ATOMIC_RELAXED);

        /* Threads racing here all pick the same function; the code it points to never changes. */
        if (!f) {
                f = crc32c_hw_available() ? crc32c_hw : crc32c_sw;
                __atomic_store_n(&impl, f, __ATOMIC_RELAXED);
        }
        return f(crc, data, len);
}
