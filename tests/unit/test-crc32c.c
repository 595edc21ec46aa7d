/* SPDX-License-Identifier: MIT */
/* Unit tests for CRC32C (crc32c.c): known values, chaining, and software against hardware. */

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c-internal.h"
#include "common/crc32c.h"
#include "common/macro.h"

typedef uint32_t (*crc_fn)(uint32_t crc, const void *data, size_t len);

/* The implementations a test runs: the dispatcher, software, and hardware where the CPU has it. */
static size_t impls(crc_fn out[3], const char *names[3])
{
        size_t n = 0;

        out[n] = crc32c;
        names[n++] = "crc32c";
        out[n] = crc32c_sw;
        names[n++] = "crc32c_sw";
        if (crc32c_hw_available()) {
                out[n] = crc32c_hw;
                names[n++] = "crc32c_hw";
        }
        return n;
}

/* One bit at a time, straight from the definition; shares nothing with crc32c.c. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
        crc = ~crc;
        while (len--) {
                crc ^= *p++;
                for (unsigned i = 0; i < 8; i++)
                        crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        }
        return ~crc;
}

static uint64_t rnd_next(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static void rnd_fill(uint64_t *s, uint8_t *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)rnd_next(s);
}

START_TEST(test_known_values)
{
        /* RFC 3720 B.4: a SCSI Read (10) command PDU. */
        static const uint8_t pdu[48] = {
                0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        };
        uint8_t zeros[32], ones[32], inc[32], dec[32];
        crc_fn f[3];
        const char *name[3];
        size_t n = impls(f, name);

        memset(zeros, 0, sizeof(zeros));
        memset(ones, 0xff, sizeof(ones));
        for (unsigned i = 0; i < 32; i++) {
                inc[i] = (uint8_t)i;
                dec[i] = (uint8_t)(31 - i);
        }

        for (size_t i = 0; i < n; i++) {
                /* The "check" value of the CRC catalogues. */
                ck_assert_msg(f[i](0, "123456789", 9) == 0xE3069283u, "%s", name[i]);
                ck_assert_msg(f[i](0, zeros, 32) == 0x8A9136AAu, "%s", name[i]);
                ck_assert_msg(f[i](0, ones, 32) == 0x62A8AB43u, "%s", name[i]);
                ck_assert_msg(f[i](0, inc, 32) == 0x46DD794Eu, "%s", name[i]);
                ck_assert_msg(f[i](0, dec, 32) == 0x113FDB5Cu, "%s", name[i]);
                ck_assert_msg(f[i](0, pdu, sizeof(pdu)) == 0xD9963A56u, "%s", name[i]);
                ck_assert_msg(f[i](0, NULL, 0) == 0, "%s", name[i]);
                ck_assert_msg(f[i](0x12345678u, NULL, 0) == 0x12345678u, "%s", name[i]);
                ck_assert_msg(f[i](0, "a", 1) == 0xC1D04330u, "%s", name[i]);
        }
}
END_TEST

START_TEST(test_reference)
{
        static uint8_t buf[4096 + 16];
        uint64_t seed = 0x243f6a8885a308d3u;
        crc_fn f[3];
        const char *name[3];
        size_t n = impls(f, name);

        rnd_fill(&seed, buf, sizeof(buf));
        /* Every length up to a few words, then random ones, at every alignment. */
        for (unsigned round = 0; round < 600; round++) {
                size_t off = round % 16;
                size_t len = round < 80 ? round : (size_t)(rnd_next(&seed) % 4097);
                uint32_t start = round % 3 == 0 ? 0 : (uint32_t)rnd_next(&seed);
                uint32_t want = crc_bitwise(start, buf + off, len);

                for (size_t i = 0; i < n; i++)
                        ck_assert_msg(f[i](start, buf + off, len) == want,
                                      "%s: offset %zu, %zu bytes, from 0x%08x", name[i], off, len,
                                      start);
        }
}
END_TEST

START_TEST(test_chaining)
{
        static uint8_t buf[10000];
        uint64_t seed = 7;
        crc_fn f[3];
        const char *name[3];
        size_t n = impls(f, name);

        rnd_fill(&seed, buf, sizeof(buf));
        for (size_t i = 0; i < n; i++) {
                uint32_t whole = f[i](0, buf, sizeof(buf));

                for (unsigned round = 0; round < 100; round++) {
                        uint32_t crc = 0;
                        size_t off = 0;

                        /* Random splits: a few large pieces, or many small ones. */
                        while (off < sizeof(buf)) {
                                size_t piece = (size_t)(rnd_next(&seed) %
                                                        (round % 2 ? 33 : sizeof(buf) / 3));

                                piece = MIN(piece, sizeof(buf) - off);
                                crc = f[i](crc, buf + off, piece);
                                off += piece;
                        }
                        ck_assert_msg(crc == whole, "%s: round %u", name[i], round);
                }
        }

        /* Software and hardware continue each other's work. */
        if (crc32c_hw_available()) {
                uint32_t whole = crc32c_sw(0, buf, sizeof(buf));

                ck_assert(crc32c_hw(crc32c_sw(0, buf, 1001), buf + 1001, sizeof(buf) - 1001) ==
                          whole);
                ck_assert(crc32c_sw(crc32c_hw(0, buf, 4093), buf + 4093, sizeof(buf) - 4093) ==
                          whole);
        }
}
END_TEST

START_TEST(test_sw_hw_agree)
{
        const size_t size = (1u << 20) + 64;
        _cleanup_free_ uint8_t *buf = malloc(size);
        uint64_t seed = 0xb7e151628aed2a6bu;

        if (!crc32c_hw_available()) {
                fprintf(stderr, "crc32c: no SSE4.2 crc32 instruction here; software path only\n");
                return;
        }

        ck_assert_ptr_nonnull(buf);
        rnd_fill(&seed, buf, size);
        for (unsigned round = 0; round < 300; round++) {
                size_t off = (size_t)(rnd_next(&seed) % 64);
                size_t len = round == 0 ? size - 64 : (size_t)(rnd_next(&seed) % 70000);
                uint32_t start = (uint32_t)rnd_next(&seed);

                ck_assert_msg(crc32c_sw(start, buf + off, len) == crc32c_hw(start, buf + off, len),
                              "offset %zu, %zu bytes, from 0x%08x", off, len, start);
        }
        /* The dispatcher took the hardware path and says the same. */
        ck_assert(crc32c(0, buf, size) == crc32c_sw(0, buf, size));
}
END_TEST

START_TEST(test_detects_change)
{
        uint8_t buf[256];
        uint32_t crc;

        for (size_t i = 0; i < sizeof(buf); i++)
                buf[i] = (uint8_t)(i * 13);
        crc = crc32c(0, buf, sizeof(buf));

        /* A CRC catches every single-bit error. */
        for (size_t i = 0; i < sizeof(buf); i++) {
                for (unsigned bit = 0; bit < 8; bit++) {
                        buf[i] ^= (uint8_t)(1u << bit);
                        ck_assert_msg(crc32c(0, buf, sizeof(buf)) != crc, "byte %zu bit %u", i,
                                      bit);
                        buf[i] ^= (uint8_t)(1u << bit);
                }
        }
        ck_assert(crc32c(0, buf, sizeof(buf)) == crc);
}
END_TEST

static Suite *crc32c_suite(void)
{
        Suite *s = suite_create("crc32c");
        TCase *tc = tcase_create("checksum");

        tcase_add_test(tc, test_known_values);
        tcase_add_test(tc, test_reference);
        tcase_add_test(tc, test_chaining);
        tcase_add_test(tc, test_sw_hw_agree);
        tcase_add_test(tc, test_detects_change);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(crc32c_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
