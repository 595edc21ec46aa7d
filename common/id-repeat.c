/* SPDX-License-Identifier: MIT */
/* Finding an id listed twice with a bitmap over the ids. */
#include <errno.h>
#include <stdlib.h>

#include "common/id-repeat.h"
#include "common/macro.h"

bool id_repeat_bitmap_fits(size_t n, uint64_t bound)
{
        uint64_t bits;

        if (MUL_OVERFLOW((uint64_t)n, (uint64_t)ID_REPEAT_BITS_PER_ID, &bits))
                bits = UINT64_MAX;
        return bound <= MAX(bits, ID_REPEAT_MIN_BITS);
}

int id_repeat_first(const uint64_t *ids, size_t n, uint64_t bound, size_t *ret)
{
        _cleanup_free_ uint64_t *bits = calloc((size_t)((bound + 63) / 64), sizeof(uint64_t));

        if (!bits)
                return -ENOMEM;
        for (size_t j = 0; j < n; j++) {
                uint64_t b = ids[j], mask = UINT64_C(1) << (b % 64);

                if (bits[b / 64] & mask) {
                        *ret = j;
                        return 0;
                }
                bits[b / 64] |= mask;
        }
        *ret = SIZE_MAX;
        return 0;
}
