/* SPDX-License-Identifier: MIT */
/* Streaming copies: AVX2 loads and non-temporal stores, where the CPU has them. */
#include <stdint.h>
#include <string.h>

#include "daemon/transport/copy-stream.h"

#if defined(__x86_64__)
#include <immintrin.h>

bool copy_stream_available(void)
{
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2");
}

__attribute__((target("avx2"))) static void copy_stream_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
        /* up to the first 32-byte boundary of the destination: a streaming store needs it */
        size_t head = (size_t)(-(uintptr_t)d & 31);

        if (head > n)
                head = n;
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
                __m256i lo = _mm256_loadu_si256((const __m256i *)s);
                __m256i hi = _mm256_loadu_si256((const __m256i *)(s + 32));

                _mm256_stream_si256((__m256i *)d, lo);
                _mm256_stream_si256((__m256i *)(d + 32), hi);
        }
        memcpy(d, s, n);
}

void copy_stream(void *dst, const void *src, size_t n)
{
        /* libgcc's constructor has read the CPU's features by now: a load and a test */
        if (__builtin_cpu_supports("avx2"))
                copy_stream_avx2(dst, src, n);
        else
                memcpy(dst, src, n);
}

void copy_stream_fence(void)
{
        _mm_sfence();
}

#else

bool copy_stream_available(void)
{
        return false;
}

void copy_stream(void *dst, const void *src, size_t n)
{
        memcpy(dst, src, n);
}

void copy_stream_fence(void)
{
}

#endif
