/* SPDX-License-Identifier: MIT */
/* Random bytes from the kernel (getrandom(2)), for nonces, tokens and node ids. */
#pragma once

#include <stddef.h>

/* Fills @buf with @n (at most 256) random bytes. Returns 0, -EINVAL for @n > 256, or -errno. */
int random_bytes(void *buf, size_t n);
