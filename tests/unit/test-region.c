/* SPDX-License-Identifier: MIT */
/* Unit tests for regions: memfd checks, shared mappings, span lookup at the boundaries. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/macro.h"
#include "daemon/memory/region.h"

#define PAGE 4096u

/* A memfd of @size bytes with @seals added (0 for none). */
static int make_memfd(uint64_t size, int seals)
{
        int fd;

        fd = memfd_create("test-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
        if (seals)
                ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
        return fd;
}

static bool fd_is_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(test_from_fd_sealed)
{
        Region *r = NULL;
        int fd;

        fd = make_memfd(4 * PAGE, F_SEAL_SHRINK);
        ck_assert_int_eq(region_new_from_fd(fd, 0, 3 * PAGE, 0x100000, 42, &r), 0);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->n_ref, 1);
        ck_assert_uint_eq(r->id, 42);
        ck_assert_int_eq(r->kind, REGION_CLIENT);
        ck_assert_int_eq(r->fd, fd);
        ck_assert_uint_eq(r->size, 3 * PAGE);
        ck_assert_uint_eq(r->client_addr, 0x100000);
        ck_assert_ptr_nonnull(r->data);
        ck_assert(!clist_is_linked(&r->link_owner));

        /* The region owns the fd: the last unref closes it. */
        region_unref(r);
        ck_assert(!fd_is_open(fd));
}
END_TEST

START_TEST(test_from_fd_whole_file_with_all_seals)
{
        Region *r = NULL;
        int fd;

        fd = make_memfd(PAGE, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        ck_assert_int_eq(region_new_from_fd(fd, 0, PAGE, 0, 1, &r), 0);
        ck_assert_uint_eq(r->size, PAGE);
        region_unref(r);
}
END_TEST

START_TEST(test_from_fd_unsealed)
{
        Region *r = NULL;
        int fd;

        fd = make_memfd(PAGE, 0);
        ck_assert_int_eq(region_new_from_fd(fd, 0, PAGE, 0, 1, &r), -EPERM);
        ck_assert_ptr_null(r);
        /* Sealed against growing only is not enough either. */
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
        ck_assert_int_eq(region_new_from_fd(fd, 0, PAGE, 0, 1, &r), -EPERM);
        ck_assert_ptr_null(r);
        /* On failure the caller keeps the fd. */
        ck_assert(fd_is_open(fd));
        close(fd);
}
END_TEST

START_TEST(test_from_fd_pipe)
{
        Region *r = NULL;
        int p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(region_new_from_fd(p[0], 0, PAGE, 0, 1, &r), -EBADF);
        ck_assert_ptr_null(r);
        ck_assert(fd_is_open(p[0]));
        close(p[0]);
        close(p[1]);
}
END_TEST

START_TEST(test_from_fd_regular_file)
{
        struct statfs sfs;
        Region *r = NULL;
        int fd;

        /* A file on a disk file system knows no seals: fcntl(F_GET_SEALS) fails with EINVAL. */
        fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstatfs(fd, &sfs), 0);
        if (sfs.f_type == TMPFS_MAGIC) {
                fprintf(stderr, "test_from_fd_regular_file: skipped, the test binary lives on "
                                "tmpfs, which knows seals\n");
                close(fd);
                return;
        }
        ck_assert_int_eq(region_new_from_fd(fd, 0, 1, 0, 1, &r), -EBADF);
        ck_assert_ptr_null(r);
        close(fd);
}
END_TEST

START_TEST(test_from_fd_bad_size)
{
        Region *r = NULL;
        int fd;

        fd = make_memfd(2 * PAGE, F_SEAL_SHRINK);
        ck_assert_int_eq(region_new_from_fd(fd, 0, 0, 0, 1, &r), -EINVAL);
        ck_assert_int_eq(region_new_from_fd(fd, 0, 2 * PAGE + 1, 0, 1, &r), -EINVAL);
        ck_assert_int_eq(region_new_from_fd(fd, 0, UINT64_MAX, 0, 1, &r), -EINVAL);
        /* A span that would wrap past the top of the address space. */
        ck_assert_int_eq(region_new_from_fd(fd, 0, PAGE, UINT64_MAX - PAGE + 1, 1, &r), -EINVAL);
        ck_assert_ptr_null(r);
        ck_assert(fd_is_open(fd));

        /* The boundary cases that fit. */
        ck_assert_int_eq(region_new_from_fd(fd, 0, 2 * PAGE, UINT64_MAX - 2 * PAGE, 1, &r), 0);
        region_unref(r);
}
END_TEST

START_TEST(test_shared_mapping)
{
        Region *r = NULL;
        uint8_t *mine;
        int fd, dup_fd;

        fd = make_memfd(4 * PAGE, F_SEAL_SHRINK | F_SEAL_GROW);
        mine = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(mine, MAP_FAILED);

        /* The region owns the fd it gets; keep our own for the mapping's sake only. */
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        ck_assert_int_ge(dup_fd, 0);
        ck_assert_int_eq(region_new_from_fd(dup_fd, 0, 4 * PAGE, (uint64_t)(uintptr_t)mine, 7, &r),
                         0);

        for (unsigned i = 0; i < 4 * PAGE; i++)
                mine[i] = (uint8_t)(i * 31 + 7);
        for (unsigned i = 0; i < 4 * PAGE; i++)
                ck_assert_uint_eq(r->data[i], (uint8_t)(i * 31 + 7));

        memset(r->data + PAGE, 0xa5, PAGE);
        ck_assert_uint_eq(mine[PAGE - 1], (uint8_t)((PAGE - 1) * 31 + 7));
        for (unsigned i = PAGE; i < 2 * PAGE; i++)
                ck_assert_uint_eq(mine[i], 0xa5);
        ck_assert_uint_eq(mine[2 * PAGE], (uint8_t)(2 * PAGE * 31 + 7));

        /* The region's mapping outlives our own. */
        ck_assert_int_eq(munmap(mine, 4 * PAGE), 0);
        close(fd);
        ck_assert_uint_eq(r->data[0], 7);
        region_unref(r);
}
END_TEST

START_TEST(test_memfd)
{
        Region *r = NULL;
        int seals;

        ck_assert_int_eq(region_new_memfd("test-pool", 0, 1, &r), -EINVAL);
        ck_assert_ptr_null(r);

        ck_assert_int_eq(region_new_memfd("test-pool", 3 * PAGE, 9, &r), 0);
        ck_assert_uint_eq(r->id, 9);
        ck_assert_int_eq(r->kind, REGION_POOL);
        ck_assert_uint_eq(r->size, 3 * PAGE);
        ck_assert_uint_eq(r->client_addr, 0);

        seals = fcntl(r->fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        ck_assert_int_ne(ftruncate(r->fd, PAGE), 0);
        ck_assert_int_ne(ftruncate(r->fd, 4 * PAGE), 0);
        ck_assert_int_ne(fcntl(r->fd, F_GETFD) & FD_CLOEXEC, 0);

        /* Zero-filled and writable end to end. */
        for (unsigned i = 0; i < 3 * PAGE; i++)
                ck_assert_uint_eq(r->data[i], 0);
        r->data[3 * PAGE - 1] = 1;

        /* The fd is acceptable to region_new_from_fd() as a client's would be. */
        {
                Region *r2 = NULL;
                int fd2 = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);

                ck_assert_int_ge(fd2, 0);
                ck_assert_int_eq(region_new_from_fd(fd2, 0, 3 * PAGE, 0, 10, &r2), 0);
                ck_assert_uint_eq(r2->data[3 * PAGE - 1], 1);
                region_unref(r2);
        }
        region_unref(r);
}
END_TEST

START_TEST(test_ref_unref)
{
        Region *r = NULL;
        int fd;

        ck_assert_ptr_null(region_ref(NULL));
        ck_assert_ptr_null(region_unref(NULL));

        ck_assert_int_eq(region_new_memfd("test-ref", PAGE, 1, &r), 0);
        fd = r->fd;
        ck_assert_ptr_eq(region_ref(r), r);
        ck_assert_uint_eq(r->n_ref, 2);
        ck_assert_ptr_null(region_unref(r));
        ck_assert_uint_eq(r->n_ref, 1);
        /* Still mapped and open with one reference left. */
        r->data[PAGE - 1] = 3;
        ck_assert(fd_is_open(fd));
        region_unref(r);
        ck_assert(!fd_is_open(fd));
}
END_TEST

/* A region at @client_addr of @size bytes, for lookup tests (the address need not be real). */
static Region *make_region_at(uint64_t client_addr, uint64_t size, uint64_t id)
{
        Region *r = NULL;
        int fd;

        fd = make_memfd(size, F_SEAL_SHRINK);
        ck_assert_int_eq(region_new_from_fd(fd, 0, size, client_addr, id, &r), 0);
        return r;
}

START_TEST(test_contains)
{
        Region *r;
        uint64_t off = 12345;

        r = make_region_at(0x10000, 2 * PAGE, 1);

        ck_assert(region_contains(r, 0x10000, 1, &off));
        ck_assert_uint_eq(off, 0);
        ck_assert(region_contains(r, 0x10000, 2 * PAGE, &off));
        ck_assert_uint_eq(off, 0);
        ck_assert(region_contains(r, 0x10000 + 2 * PAGE - 1, 1, &off));
        ck_assert_uint_eq(off, 2 * PAGE - 1);
        ck_assert(region_contains(r, 0x10000 + 100, 0, &off));
        ck_assert_uint_eq(off, 100);
        ck_assert(region_contains(r, 0x10000, 1, NULL));

        off = 12345;
        ck_assert(!region_contains(r, 0x10000 - 1, 1, &off));
        ck_assert(!region_contains(r, 0x10000 - 1, 2, &off));
        ck_assert(!region_contains(r, 0x10000, 2 * PAGE + 1, &off));
        ck_assert(!region_contains(r, 0x10000 + 2 * PAGE, 1, &off));
        ck_assert(!region_contains(r, 0x10000 + 2 * PAGE, 0, &off));
        ck_assert(!region_contains(r, 0x10000 + 1, UINT64_MAX, &off));
        ck_assert(!region_contains(r, UINT64_MAX, 1, &off));
        /* Written only on success. */
        ck_assert_uint_eq(off, 12345);

        region_unref(r);
}
END_TEST

START_TEST(test_find_boundaries)
{
        CList regions = CLIST_INIT(regions);
        Region *a, *b, *top;
        uint64_t off;
        const uint64_t a_addr = 0x10000, a_size = PAGE;
        const uint64_t b_addr = 0x11000, b_size = 2 * PAGE; /* right after a */
        const uint64_t top_addr = UINT64_MAX - 2 * PAGE, top_size = PAGE;

        a = make_region_at(a_addr, a_size, 1);
        b = make_region_at(b_addr, b_size, 2);
        top = make_region_at(top_addr, top_size, 3);
        clist_link_tail(&regions, &a->link_owner);
        clist_link_tail(&regions, &b->link_owner);
        clist_link_tail(&regions, &top->link_owner);

        ck_assert_ptr_null(region_find(&regions, a_addr - 1, 1, &off));
        ck_assert_ptr_eq(region_find(&regions, a_addr, 1, &off), a);
        ck_assert_uint_eq(off, 0);
        ck_assert_ptr_eq(region_find(&regions, a_addr + a_size - 1, 1, &off), a);
        ck_assert_uint_eq(off, a_size - 1);
        ck_assert_ptr_eq(region_find(&regions, a_addr, a_size, &off), a);

        /* One past a is b's first byte. */
        ck_assert_ptr_eq(region_find(&regions, a_addr + a_size, 1, &off), b);
        ck_assert_uint_eq(off, 0);
        ck_assert_ptr_eq(region_find(&regions, b_addr + b_size - 1, 1, &off), b);
        ck_assert_uint_eq(off, b_size - 1);
        ck_assert_ptr_eq(region_find(&regions, b_addr + 10, b_size - 10, &off), b);
        ck_assert_uint_eq(off, 10);
        ck_assert_ptr_null(region_find(&regions, b_addr + b_size, 1, &off));
        ck_assert_ptr_null(region_find(&regions, b_addr + 10, b_size - 9, &off));

        /* Adjacent regions are still two: a span across them is outside shareable memory. */
        ck_assert_ptr_null(region_find(&regions, a_addr + a_size - 1, 2, &off));
        ck_assert_ptr_null(region_find(&regions, a_addr, a_size + b_size, &off));

        /* Near the top of the address space. */
        ck_assert_ptr_eq(region_find(&regions, top_addr, top_size, &off), top);
        ck_assert_ptr_eq(region_find(&regions, top_addr + top_size - 1, 1, &off), top);
        ck_assert_uint_eq(off, top_size - 1);
        ck_assert_ptr_null(region_find(&regions, top_addr + top_size, 1, &off));
        ck_assert_ptr_null(region_find(&regions, UINT64_MAX, 1, &off));
        ck_assert_ptr_null(region_find(&regions, UINT64_MAX - 1, 16, &off));
        /* Lengths whose end wraps to inside a region are never contained. */
        ck_assert_ptr_null(region_find(&regions, top_addr + 1, UINT64_MAX, &off));
        ck_assert_ptr_null(region_find(&regions, a_addr + 1, UINT64_MAX, &off));
        ck_assert_ptr_null(
                region_find(&regions, top_addr, UINT64_MAX - top_addr + a_addr + 2, &off));

        clist_unlink(&a->link_owner);
        ck_assert_ptr_null(region_find(&regions, a_addr, 1, &off));
        ck_assert_ptr_eq(region_find(&regions, b_addr, 1, &off), b);

        clist_unlink(&b->link_owner);
        clist_unlink(&top->link_owner);
        ck_assert_ptr_null(region_find(&regions, b_addr, 1, &off));
        region_unref(a);
        region_unref(b);
        region_unref(top);
}
END_TEST

static Suite *region_suite(void)
{
        Suite *s = suite_create("region");
        TCase *tc;

        tc = tcase_create("from-fd");
        tcase_add_test(tc, test_from_fd_sealed);
        tcase_add_test(tc, test_from_fd_whole_file_with_all_seals);
        tcase_add_test(tc, test_from_fd_unsealed);
        tcase_add_test(tc, test_from_fd_pipe);
        tcase_add_test(tc, test_from_fd_regular_file);
        tcase_add_test(tc, test_from_fd_bad_size);
        tcase_add_test(tc, test_shared_mapping);
        suite_add_tcase(s, tc);

        tc = tcase_create("memfd");
        tcase_add_test(tc, test_memfd);
        tcase_add_test(tc, test_ref_unref);
        suite_add_tcase(s, tc);

        tc = tcase_create("lookup");
        tcase_add_test(tc, test_contains);
        tcase_add_test(tc, test_find_boundaries);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(region_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
