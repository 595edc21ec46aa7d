/* SPDX-License-Identifier: MIT */
/* The two CRC32C implementations behind crc32c(), exposed so that tests can compare them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* crc32c() in portable C (slicing-by-8 tables, built on first use). */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);

/*
 * crc32c() with the SSE4.2 crc32 instruction; call it only when crc32c_hw_available() says so.
 * On CPUs other than x86-64 it is crc32c_sw().
 */
uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len);

/* Whether this CPU can run crc32c_hw(). */
bool crc32c_hw_available(void);
