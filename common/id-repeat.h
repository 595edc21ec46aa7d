/* SPDX-License-Identifier: MIT */
/*
 * Finding an id listed twice (a destination block named twice) with a bitmap over the ids,
 * when that bitmap is small next to the list: the planner's check and the decoder's facts of a
 * block list use the same bound and the same walk.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A bitmap may take this many bits per listed id, or this many in all, whichever is more. */
#define ID_REPEAT_BITS_PER_ID 64
#define ID_REPEAT_MIN_BITS (UINT64_C(1) << 20)

/* Whether a bitmap over the ids below @bound is small enough for a list of @n ids. */
bool id_repeat_bitmap_fits(size_t n, uint64_t bound);

/*
 * With every one of the @n @ids below @bound: the index of the first id that repeats an
 * earlier one in *@ret, SIZE_MAX when none does. 0, or -ENOMEM for the bitmap.
 */
int id_repeat_first(const uint64_t *ids, size_t n, uint64_t bound, size_t *ret);
