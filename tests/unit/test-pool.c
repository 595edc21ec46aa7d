/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the pool allocator: rounding, first fit, coalescing, scrubbing freed extents,
 * a randomised model check.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/memory/pool.h"

#define PAGE UINT64_C(4096)

static Pool *make_pool(uint64_t size)
{
        Pool *pool = NULL;

        ck_assert_int_eq(pool_new(size, 12, 1, &pool), 0);
        ck_assert_ptr_nonnull(pool);
        return pool;
}

START_TEST(test_new_invalid)
{
        Pool *pool = NULL;

        ck_assert_int_eq(pool_new(0, 12, 1, &pool), -EINVAL);
        ck_assert_int_eq(pool_new(PAGE, 11, 1, &pool), -EINVAL);
        ck_assert_int_eq(pool_new(PAGE, 31, 1, &pool), -EINVAL);
        ck_assert_int_eq(pool_new(UINT64_MAX, 12, 1, &pool), -EINVAL);
        ck_assert_ptr_null(pool);
}
END_TEST

START_TEST(test_new_rounds)
{
        Pool *pool = NULL;
        Region *r;

        ck_assert_int_eq(pool_new(1, 12, 5, &pool), 0);
        ck_assert_uint_eq(pool_size(pool), PAGE);
        ck_assert_uint_eq(pool_used(pool), 0);
        ck_assert_uint_eq(pool_page_shift(pool), 12);
        ck_assert_uint_eq(pool_n_allocated(pool), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), PAGE);
        r = pool_region(pool);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->id, 5);
        ck_assert_uint_eq(r->size, PAGE);
        ck_assert_int_eq(r->kind, REGION_POOL);
        pool = pool_free(pool);
        ck_assert_ptr_null(pool);

        /* A 64 KiB page: 100 KiB becomes two pages. */
        ck_assert_int_eq(pool_new(100 * 1024, 16, 1, &pool), 0);
        ck_assert_uint_eq(pool_size(pool), 128 * 1024);
        ck_assert_int_eq(pool_alloc(pool, 1, &(uint64_t){0}), 0);
        ck_assert_uint_eq(pool_used(pool), 64 * 1024);
        pool_free(pool);

        ck_assert_ptr_null(pool_free(NULL));
}
END_TEST

START_TEST(test_alloc_release)
{
        Pool *pool = make_pool(16 * PAGE);
        uint64_t a, b, c;

        ck_assert_int_eq(pool_alloc(pool, 1, &a), 0);
        ck_assert_uint_eq(a, 0);
        ck_assert_int_eq(pool_alloc(pool, PAGE + 1, &b), 0);
        ck_assert_uint_eq(b, PAGE);
        ck_assert_int_eq(pool_alloc(pool, 3 * PAGE, &c), 0);
        ck_assert_uint_eq(c, 3 * PAGE);
        ck_assert_uint_eq(pool_used(pool), 6 * PAGE);
        ck_assert_uint_eq(pool_n_allocated(pool), 3);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), 10 * PAGE);

        /* The extents are real memory of the pool's region. */
        memset(pool_region(pool)->data + c, 0x5a, 3 * PAGE);

        ck_assert_int_eq(pool_release(pool, b), 0);
        ck_assert_uint_eq(pool_used(pool), 4 * PAGE);
        ck_assert_uint_eq(pool_n_allocated(pool), 2);
        ck_assert_uint_eq(pool_n_free_extents(pool), 2);

        /* First fit: a one-page request goes to the hole b left, a three-page one past c. */
        ck_assert_int_eq(pool_alloc(pool, PAGE, &b), 0);
        ck_assert_uint_eq(b, PAGE);
        ck_assert_int_eq(pool_alloc(pool, 3 * PAGE, &b), 0);
        ck_assert_uint_eq(b, 6 * PAGE);
        ck_assert_int_eq(pool_alloc(pool, PAGE, &b), 0);
        ck_assert_uint_eq(b, 2 * PAGE);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);

        ck_assert_int_eq(pool_alloc(pool, 0, &b), -EINVAL);
        pool_free(pool);
}
END_TEST

START_TEST(test_exhaustion)
{
        Pool *pool = make_pool(4 * PAGE);
        uint64_t off[4], x = 777;

        for (unsigned i = 0; i < 4; i++) {
                ck_assert_int_eq(pool_alloc(pool, PAGE, &off[i]), 0);
                ck_assert_uint_eq(off[i], i * PAGE);
        }
        ck_assert_uint_eq(pool_used(pool), 4 * PAGE);
        ck_assert_uint_eq(pool_n_free_extents(pool), 0);
        ck_assert_uint_eq(pool_largest_free(pool), 0);
        ck_assert_int_eq(pool_alloc(pool, 1, &x), -ENOMEM);
        ck_assert_uint_eq(x, 777);

        /* Two free pages that are not adjacent do not make room for two pages. */
        ck_assert_int_eq(pool_release(pool, off[0]), 0);
        ck_assert_int_eq(pool_release(pool, off[2]), 0);
        ck_assert_uint_eq(pool_largest_free(pool), PAGE);
        ck_assert_int_eq(pool_alloc(pool, PAGE + 1, &x), -ENOMEM);
        ck_assert_int_eq(pool_alloc(pool, UINT64_MAX, &x), -ENOMEM);
        ck_assert_int_eq(pool_alloc(pool, UINT64_MAX - PAGE, &x), -ENOMEM);
        ck_assert_int_eq(pool_alloc(pool, 5 * PAGE, &x), -ENOMEM);
        ck_assert_uint_eq(x, 777);
        ck_assert_uint_eq(pool_used(pool), 2 * PAGE);
        ck_assert_uint_eq(pool_n_allocated(pool), 2);
        pool_free(pool);
}
END_TEST

START_TEST(test_coalesce)
{
        Pool *pool = make_pool(8 * PAGE);
        uint64_t off[4], big;

        for (unsigned i = 0; i < 4; i++)
                ck_assert_int_eq(pool_alloc(pool, 2 * PAGE, &off[i]), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 0);

        /* Middle first, then its neighbours: one extent the size of the pool again. */
        ck_assert_int_eq(pool_release(pool, off[1]), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_int_eq(pool_release(pool, off[2]), 0); /* merges with its left neighbour */
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), 4 * PAGE);
        ck_assert_int_eq(pool_release(pool, off[0]), 0); /* merges with its right neighbour */
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), 6 * PAGE);
        ck_assert_int_eq(pool_release(pool, off[3]), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), 8 * PAGE);
        ck_assert_uint_eq(pool_used(pool), 0);

        /* A hole between two free extents joins both. */
        for (unsigned i = 0; i < 4; i++)
                ck_assert_int_eq(pool_alloc(pool, 2 * PAGE, &off[i]), 0);
        ck_assert_int_eq(pool_release(pool, off[0]), 0);
        ck_assert_int_eq(pool_release(pool, off[2]), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 2);
        ck_assert_int_eq(pool_release(pool, off[1]), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), 6 * PAGE);
        ck_assert_int_eq(pool_release(pool, off[3]), 0);

        ck_assert_int_eq(pool_alloc(pool, 8 * PAGE, &big), 0);
        ck_assert_uint_eq(big, 0);
        pool_free(pool);
}
END_TEST

START_TEST(test_release_unknown)
{
        Pool *pool = make_pool(8 * PAGE);
        uint64_t a, b;

        ck_assert_int_eq(pool_release(pool, 0), -ENOENT);
        ck_assert_int_eq(pool_alloc(pool, 2 * PAGE, &a), 0);
        ck_assert_int_eq(pool_alloc(pool, 2 * PAGE, &b), 0);

        /* Not the start of an extent: inside one, in free space, past the end. */
        ck_assert_int_eq(pool_release(pool, a + PAGE), -ENOENT);
        ck_assert_int_eq(pool_release(pool, a + 1), -ENOENT);
        ck_assert_int_eq(pool_release(pool, 6 * PAGE), -ENOENT);
        ck_assert_int_eq(pool_release(pool, UINT64_MAX), -ENOENT);
        ck_assert_uint_eq(pool_used(pool), 4 * PAGE);
        ck_assert_uint_eq(pool_n_allocated(pool), 2);

        ck_assert_int_eq(pool_release(pool, a), 0);
        ck_assert_int_eq(pool_release(pool, a), -ENOENT);
        ck_assert_uint_eq(pool_used(pool), 2 * PAGE);
        ck_assert_uint_eq(pool_n_allocated(pool), 1);
        ck_assert_uint_eq(pool_n_free_extents(pool), 2);
        ck_assert_int_eq(pool_release(pool, b), 0);
        ck_assert_int_eq(pool_release(pool, b), -ENOENT);
        ck_assert_uint_eq(pool_used(pool), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        pool_free(pool);
}
END_TEST

/* The reference model: live extents by offset, and what first fit must do with them. */
#define MODEL_PAGES 256
#define MODEL_MAX 512

typedef struct Live {
        uint64_t offset;
        uint64_t size;
} Live;

static int live_cmp(const void *a, const void *b)
{
        const Live *x = a, *y = b;

        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static uint64_t xorshift64(uint64_t *s)
{
        uint64_t x = *s;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        return x;
}

/* Walks the gaps between the sorted live extents of a pool of @total bytes. */
static void model_gaps(const Live *live, size_t n, uint64_t total, uint64_t want,
                       uint64_t *ret_first_fit, uint64_t *ret_largest, unsigned *ret_n_gaps)
{
        uint64_t pos = 0, largest = 0, first_fit = UINT64_MAX;
        unsigned n_gaps = 0;

        for (size_t i = 0; i <= n; i++) {
                uint64_t end = i < n ? live[i].offset : total;
                uint64_t gap;

                ck_assert_uint_ge(end, pos); /* no two live extents overlap */
                gap = end - pos;
                if (gap > 0)
                        n_gaps++;
                if (gap > largest)
                        largest = gap;
                if (first_fit == UINT64_MAX && want > 0 && gap >= want)
                        first_fit = pos;
                if (i < n)
                        pos = live[i].offset + live[i].size;
        }
        *ret_first_fit = first_fit;
        *ret_largest = largest;
        *ret_n_gaps = n_gaps;
}

static void model_check(const Pool *pool, Live *live, size_t n)
{
        uint64_t sum = 0, first_fit, largest;
        unsigned n_gaps;

        qsort(live, n, sizeof(*live), live_cmp);
        for (size_t i = 0; i < n; i++)
                sum += live[i].size;
        model_gaps(live, n, pool_size(pool), 0, &first_fit, &largest, &n_gaps);
        ck_assert_uint_eq(pool_used(pool), sum);
        ck_assert_uint_eq(pool_n_allocated(pool), n);
        ck_assert_uint_eq(pool_largest_free(pool), largest);
        ck_assert_uint_eq(pool_n_free_extents(pool), n_gaps);
}

/* Bytes of the pool's memfd backed by pages now. */
static uint64_t pool_resident(const Pool *pool)
{
        struct stat st;

        ck_assert_int_eq(fstat(pool_region(pool)->fd, &st), 0);
        return (uint64_t)st.st_blocks * 512;
}

/* A freed extent reads zero; its pages go back to the system unless a registration pins them. */
START_TEST(test_scrub)
{
        Pool *pool = make_pool(16 * PAGE);
        uint8_t *data = pool_region(pool)->data;
        uint64_t resident;

        memset(data, 0xa5, 16 * PAGE);
        resident = pool_resident(pool);
        ck_assert_uint_ge(resident, 16 * PAGE);
        ck_assert(!pool_pinned(pool));
        pool_scrub(pool, 4 * PAGE, 8 * PAGE);
        /* Before reading them: a read brings the pages back. */
        ck_assert_uint_le(pool_resident(pool), resident - 8 * PAGE);
        for (uint64_t i = 0; i < 16 * PAGE; i++)
                if (data[i] != ((i >= 4 * PAGE && i < 12 * PAGE) ? 0 : 0xa5))
                        ck_abort_msg("byte %llu is 0x%02x after scrubbing pages 4..11",
                                     (unsigned long long)i, data[i]);

        /* Pinned: the same pages stay, zeroed where they are. */
        memset(data, 0x5a, 16 * PAGE);
        pool_pin(pool);
        ck_assert(pool_pinned(pool));
        resident = pool_resident(pool);
        pool_scrub(pool, 0, 3 * PAGE);
        ck_assert_uint_eq(pool_resident(pool), resident);
        for (uint64_t i = 0; i < 16 * PAGE; i++)
                if (data[i] != (i < 3 * PAGE ? 0 : 0x5a))
                        ck_abort_msg("byte %llu is 0x%02x after scrubbing pinned pages 0..2",
                                     (unsigned long long)i, data[i]);
        pool_free(pool);
}
END_TEST

START_TEST(test_random_model)
{
        static Live live[MODEL_MAX];
        const uint64_t total = MODEL_PAGES * PAGE;
        uint64_t seed = UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)_i;
        Pool *pool = make_pool(total);
        size_t n = 0;
        unsigned n_ok = 0, n_nomem = 0, n_freed = 0;

        for (unsigned step = 0; step < 20000; step++) {
                uint64_t rnd = xorshift64(&seed);

                if (n > 0 && rnd % 100 < 45) {
                        size_t i = (size_t)(xorshift64(&seed) % n);

                        ck_assert_int_eq(pool_release(pool, live[i].offset), 0);
                        ck_assert_int_eq(pool_release(pool, live[i].offset), -ENOENT);
                        live[i] = live[--n];
                        n_freed++;
                } else if (rnd % 100 < 50) {
                        /* An offset no live extent starts at. */
                        uint64_t off = xorshift64(&seed) % (total + PAGE);
                        bool starts = false;

                        for (size_t i = 0; i < n; i++)
                                starts = starts || live[i].offset == off;
                        if (!starts)
                                ck_assert_int_eq(pool_release(pool, off), -ENOENT);
                } else {
                        uint64_t size = 1 + xorshift64(&seed) % (16 * PAGE);
                        uint64_t rounded = (size + PAGE - 1) / PAGE * PAGE;
                        uint64_t first_fit, largest, off = UINT64_MAX;
                        unsigned n_gaps;
                        int r;

                        qsort(live, n, sizeof(*live), live_cmp);
                        model_gaps(live, n, total, rounded, &first_fit, &largest, &n_gaps);
                        r = pool_alloc(pool, size, &off);
                        if (first_fit == UINT64_MAX) {
                                ck_assert_int_eq(r, -ENOMEM);
                                n_nomem++;
                        } else {
                                ck_assert_int_eq(r, 0);
                                ck_assert_uint_eq(off, first_fit);
                                ck_assert_uint_eq(off % PAGE, 0);
                                ck_assert_uint_le(off + rounded, total);
                                ck_assert_uint_lt(n, MODEL_MAX);
                                live[n++] = (Live){off, rounded};
                                n_ok++;
                        }
                }
                model_check(pool, live, n);
        }

        /* The sequence must have exercised every path. */
        ck_assert_uint_gt(n_ok, 1000);
        ck_assert_uint_gt(n_nomem, 10);
        ck_assert_uint_gt(n_freed, 1000);

        while (n > 0)
                ck_assert_int_eq(pool_release(pool, live[--n].offset), 0);
        ck_assert_uint_eq(pool_used(pool), 0);
        ck_assert_uint_eq(pool_n_free_extents(pool), 1);
        ck_assert_uint_eq(pool_largest_free(pool), total);
        pool_free(pool);
}
END_TEST

static Suite *pool_suite(void)
{
        Suite *s = suite_create("pool");
        TCase *tc;

        tc = tcase_create("basic");
        tcase_add_test(tc, test_new_invalid);
        tcase_add_test(tc, test_new_rounds);
        tcase_add_test(tc, test_alloc_release);
        tcase_add_test(tc, test_exhaustion);
        tcase_add_test(tc, test_coalesce);
        tcase_add_test(tc, test_release_unknown);
        tcase_add_test(tc, test_scrub);
        suite_add_tcase(s, tc);

        tc = tcase_create("model");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_random_model, 0, 4);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(pool_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
