/* SPDX-License-Identifier: MIT */
/* Random bytes from the kernel. */
#include <errno.h>
#include <sys/random.h>

#include "common/random-util.h"

int random_bytes(void *buf, size_t n)
{
        ssize_t k;

        if (n > 256)
                return -EINVAL;
        /* Up to 256 bytes getrandom() fills the whole buffer or fails; EINTR only before the
         * entropy pool is ready. */
        do
                k = getrandom(buf, n, 0);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        return (size_t)k == n ? 0 : -EIO;
}
