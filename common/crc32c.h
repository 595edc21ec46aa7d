/* SPDX-License-Identifier: MIT */
/* CRC32C (Castagnoli), the checksum of iSCSI, SCTP and ext4 metadata, for framing integrity. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * Extends @crc, the CRC32C of some earlier bytes (0 for none), over the @len bytes at @data (may
 * be NULL when @len is 0), and returns the CRC32C of both together, so that
 * crc32c(crc32c(0, a, na), b, nb) == crc32c(0, a || b, na + nb). Reflected polynomial
 * 0x82F63B78, register preset to ~0 and inverted at the end: crc32c(0, "123456789", 9) is
 * 0xE3069283. Uses the CPU's crc32 instruction when it has one (chosen at run time); safe to
 * call from any thread.
 */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
