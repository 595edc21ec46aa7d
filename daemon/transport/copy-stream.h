/* SPDX-License-Identifier: MIT */
/*
 * Copies that write around the CPU caches (non-temporal stores), for the copy engine's big
 * tasks: their destination does not stay in the cache anyway, and an ordinary store first reads
 * each destination line it writes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Whether this CPU has the streaming copy (x86-64 with AVX2); else copy_stream() is memcpy(). */
bool copy_stream_available(void);

/*
 * Copies @n bytes from @src to @dst (not overlapping), the 64-byte runs from the first 32-byte
 * aligned byte of @dst with non-temporal stores, the bytes before and after with memcpy().
 * Another thread sees them only after copy_stream_fence() on this one.
 */
void copy_stream(void *dst, const void *src, size_t n);

/*
 * Starts loading the line at @src, with its page's translation, ahead of a copy from it: the
 * next of scattered blocks, while this one's stores stream (they do not wait, its loads do).
 * Never faults, whatever @src is.
 */
static inline void copy_stream_prefetch(const void *src)
{
        __builtin_prefetch(src, 0, 3);
}

/* Orders every streaming store of this thread before its later stores (a lock's release). */
void copy_stream_fence(void);
