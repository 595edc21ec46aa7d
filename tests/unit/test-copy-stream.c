/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the streaming copy: every length and alignment around its 32-byte stores and
 * 64-byte runs, every destination byte checked and the bytes around it untouched.
 */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/transport/copy-stream.h"

#define GUARD 128
#define GUARD_BYTE 0xa5
#define MAX_LEN (64 * 1024 + 200)

/* A seeded byte pattern without GUARD_BYTE, so a byte written where none should be shows. */
static void pattern(uint8_t *p, size_t n, uint32_t seed)
{
        uint32_t x = seed * 2654435761u + 1;

        for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                p[i] = (uint8_t)x == GUARD_BYTE ? 0 : (uint8_t)x;
        }
}

/* Whether @n bytes at @p are all GUARD_BYTE. */
static bool guard_intact(const uint8_t *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (p[i] != GUARD_BYTE)
                        return false;
        return true;
}

/* @len bytes from @src + @src_off to a guarded buffer at @dst_off from a 64-byte boundary. */
static void check_copy(const uint8_t *src, size_t src_off, size_t dst_off, size_t len)
{
        static _Alignas(64) uint8_t buf[GUARD + 64 + MAX_LEN + GUARD];
        uint8_t *dst = buf + GUARD + dst_off;

        memset(buf, GUARD_BYTE, GUARD + dst_off + len + GUARD);
        copy_stream(dst, src + src_off, len);
        copy_stream_fence();
        if (memcmp(dst, src + src_off, len) != 0)
                ck_abort_msg("%zu bytes from offset %zu to offset %zu: a byte landed wrong", len,
                             src_off, dst_off);
        if (!guard_intact(buf, GUARD + dst_off) || !guard_intact(dst + len, GUARD))
                ck_abort_msg("%zu bytes from offset %zu to offset %zu: a byte around the "
                             "destination was written",
                             len, src_off, dst_off);
}

START_TEST(test_lengths_and_alignments)
{
        static const size_t lens[] = {0,    1,    31,   32,   33,   63,    64,    65,
                                      95,   96,   127,  128,  129,  255,   256,   257,
                                      4095, 4096, 4097, 4160, 8191, 65536, 65537, MAX_LEN - 64};
        static const size_t src_offs[] = {0, 1, 7, 31, 32, 63};
        uint8_t *src = malloc(MAX_LEN + 64);

        ck_assert_ptr_nonnull(src);
        pattern(src, MAX_LEN + 64, 3);
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
                for (size_t s = 0; s < sizeof(src_offs) / sizeof(src_offs[0]); s++)
                        for (size_t d = 0; d < 64; d++)
                                /* every alignment of the short ones, some of the long */
                                if (lens[l] <= 4160 || d % 16 == 0 || d % 16 == 1 || d == 63)
                                        check_copy(src, src_offs[s], d, lens[l]);
        free(src);
}
END_TEST

/* The copies of another thread's streaming stores are seen after its fence: a thread's join. */
static void *copy_thread(void *userdata)
{
        uint8_t **bufs = userdata;

        copy_stream(bufs[0], bufs[1], 1 << 20);
        copy_stream_fence();
        return NULL;
}

START_TEST(test_other_thread)
{
        uint8_t *src = malloc(1 << 20), *dst = malloc(1 << 20), *bufs[2] = {dst, src};
        pthread_t t;

        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(dst);
        pattern(src, 1 << 20, 5);
        memset(dst, GUARD_BYTE, 1 << 20);
        ck_assert_int_eq(pthread_create(&t, NULL, copy_thread, bufs), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(memcmp(dst, src, 1 << 20), 0);
        free(dst);
        free(src);
}
END_TEST

/*
 * A fetch ahead is a hint, made before the next copy's own turn: it must never fault, whatever
 * the address. Check forks the test: a fault fails it.
 */
START_TEST(test_prefetch_never_faults)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        uint8_t *none = mmap(NULL, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint8_t *gone = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        ck_assert_ptr_ne(none, MAP_FAILED);
        ck_assert_ptr_ne(gone, MAP_FAILED);
        ck_assert_int_eq(munmap(gone, page), 0);
        copy_stream_prefetch(NULL);
        copy_stream_prefetch(none);
        copy_stream_prefetch(none + page + 63);
        copy_stream_prefetch(gone);
        copy_stream_prefetch((const void *)UINTPTR_MAX);
        ck_assert_int_eq(munmap(none, 2 * page), 0);
}
END_TEST

static Suite *copy_stream_suite(void)
{
        Suite *s = suite_create("copy-stream");
        TCase *tc = tcase_create("copy");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_lengths_and_alignments);
        tcase_add_test(tc, test_other_thread);
        tcase_add_test(tc, test_prefetch_never_faults);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(copy_stream_suite());
        int failed;

        if (!copy_stream_available())
                fprintf(stderr, "copy-stream: this CPU has no streaming copy (AVX2); the tests "
                                "check the memcpy() it falls back to\n");
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
