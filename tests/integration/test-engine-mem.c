/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of memory the engine owns: a memfd the test allocates, seals and maps
 * itself, registered with kvd_mem_register() at an offset into the file, caches in it moving
 * byte-exact on one daemon (shared memory) and across two (TCP); huge pages from
 * kvd_mem_alloc_huge(); and what is refused: bad fds, unsealed files, ranges past the file,
 * unaligned offsets, dma-bufs, overlaps, unregistering memory a cache lies in.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define PAGE 4096u

/* An engine's KV memory: a sealed memfd of @size bytes, mapped whole. */
typedef struct EngineMem {
        int fd;
        uint8_t *map;
        size_t size;
} EngineMem;

static void engine_mem_new(EngineMem *m, size_t size, bool seal)
{
        m->size = size;
        m->fd = memfd_create("engine-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(m->fd, 0);
        ck_assert_int_eq(ftruncate(m->fd, (off_t)size), 0);
        if (seal)
                ck_assert_int_eq(fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
        m->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        ck_assert_ptr_ne(m->map, MAP_FAILED);
}

static void engine_mem_free(EngineMem *m)
{
        ck_assert_int_eq(munmap(m->map, m->size), 0);
        close(m->fd);
}

/* Registers [@offset, @offset + @length) of @m as mapped at m->map + @offset. */
static int engine_register(kvd_client *c, const EngineMem *m, uint64_t offset, uint64_t length,
                           uint64_t *ret_id)
{
        kvd_mem_desc d = {.size = sizeof(d),
                          .fd = m->fd,
                          .offset = offset,
                          .length = length,
                          .addr = m->map + offset};

        return kvd_mem_register(c, &d, ret_id);
}

/*
 * Caches in engine memory on one daemon, registered one page into the file: a pull and a push
 * byte-exact, the bytes around the caches untouched; the mapping is still the engine's after
 * unregister and after finalize.
 */
START_TEST(test_engine_mem_local)
{
        static const uint64_t sb[] = {5, 0, 7, 2}, db[] = {1, 6, 3, 4}, pb[] = {0}, pd[] = {0};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), kin = kvd_key_blocks(A_ID, 1);
        size_t span = tcache_mem_size(4, 8, 1024);
        uint64_t ida, idb, idx;
        TCache src, into, dst;
        TCopies cp = {}, cpi = {};
        EngineMem ma, mb;
        World w;

        world_start(&w);
        engine_mem_new(&ma, 4 * PAGE + 2 * span, true);
        engine_mem_new(&mb, 4 * PAGE + span, true);
        /* The engine's own bytes before the registered range: kvdist must not touch them. */
        harness_fill_pattern(ma.map, PAGE, 91);
        harness_fill_pattern(mb.map, PAGE, 92);
        expect_ok(w.a, engine_register(w.a, &ma, PAGE, 3 * PAGE + 2 * span, &ida));
        expect_ok(w.b, engine_register(w.b, &mb, PAGE, 3 * PAGE + span, &idb));
        ck_assert_uint_ne(ida, idb);
        expect_ok(w.a, tcache_register_at(&src, w.a, ma.map + PAGE, true, 4, 8, 1024, 93, &key, 1,
                                          KVD_REMOTE_YES));
        expect_ok(w.a, tcache_register_at(&into, w.a, ma.map + PAGE + span, true, 4, 8, 1024, 94,
                                          &kin, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register_at(&dst, w.b, mb.map + PAGE, true, 4, 8, 1024, 95, NULL, 0,
                                          KVD_REMOTE_YES));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 4, db, 4, NULL));
        expect_ok(w.b, kvd_push_blocks(w.b, &kin, dst.id, pb, 1, pd, 1, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 4);
        tcopies_blocks(&cpi, &dst, &into, ALL, ALL, 2, pb, pd, 1);
        tcache_verify(&dst, &cp);
        tcache_verify(&into, &cpi);
        tcache_verify_untouched(&src);
        ck_assert_int_eq(harness_check_pattern(ma.map, PAGE, 91), -1);
        ck_assert_int_eq(harness_check_pattern(mb.map, PAGE, 92), -1);

        /* A cache outside every registered range. */
        {
                kvd_cache_desc desc = {.num_tensors = 1,
                                       .n_dims = 2,
                                       .shape = {4, 512},
                                       .data_type = KVD_DT_FLOAT16};
                void *addrs[1] = {mb.map};
                char want[64];
                uint64_t id;

                (void)snprintf(want, sizeof(want), "addrs[0]=%p", (void *)mb.map);
                expect_status(w.b,
                              kvd_register_blocks_cache(w.b, &desc, addrs, 1, NULL,
                                                        KVD_REMOTE_DEFAULT, &id),
                              KVD_E_PARAM_INVALID, want);
        }
        /* A cache lies in it: BUSY; kvd_mem_free() is not for it; an unknown id. */
        expect_status(w.a, kvd_mem_unregister(w.a, ida), KVD_E_BUSY, NULL);
        expect_status(w.a, kvd_mem_free(w.a, ma.map + PAGE), KVD_E_PARAM_INVALID,
                      "not memory from kvd_mem_alloc()");
        expect_status(w.a, kvd_mem_unregister(w.a, 987654), KVD_E_PARAM_INVALID,
                      "memory 987654 is not from kvd_mem_register()");
        expect_ok(w.a, kvd_unregister_cache(w.a, into.id));
        expect_ok(w.a, kvd_unregister_cache(w.a, src.id));
        expect_ok(w.a, kvd_mem_unregister(w.a, ida));
        /* Registered again after it was let go: the same bytes, a new id. */
        expect_ok(w.a, engine_register(w.a, &ma, PAGE, PAGE, &idx));
        ck_assert_uint_ne(idx, ida);

        /* The engine's mappings outlive kvdist's hold on them. */
        expect_ok(w.a, kvd_client_finalize(w.a));
        expect_ok(w.b, kvd_client_finalize(w.b));
        w.a = w.b = NULL;
        tcache_verify(&dst, &cp);
        ck_assert_int_eq(harness_check_pattern(ma.map, PAGE, 91), -1);
        tcopies_free(&cp);
        tcopies_free(&cpi);
        engine_mem_free(&ma);
        engine_mem_free(&mb);
        world_stop(&w);
}
END_TEST

/* What kvd_mem_register() refuses; nothing is registered by any of them. */
START_TEST(test_engine_mem_refusals)
{
        EngineMem m, loose;
        kvd_mem_desc d;
        uint64_t id;
        int p[2];
        World w;

        world_start(&w);
        engine_mem_new(&m, 8 * PAGE, true);
        engine_mem_new(&loose, 2 * PAGE, false);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);

        expect_status(NULL, kvd_mem_register(NULL, &d, &id), KVD_E_PARAM_INVALID, "client is NULL");
        expect_status(w.a, kvd_mem_register(w.a, NULL, &id), KVD_E_PARAM_INVALID, "desc is NULL");
        d = (kvd_mem_desc){.fd = m.fd, .length = PAGE, .addr = m.map};
        expect_status(w.a, kvd_mem_register(w.a, &d, NULL), KVD_E_PARAM_INVALID,
                      "ret_mem_id is NULL");
        d.fd = -1;
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID,
                      "is not an open file");
        d.fd = p[0];
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID, "not a memfd");
        d.fd = loose.fd;
        d.addr = loose.map;
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID,
                      "sealed against shrinking");
        d = (kvd_mem_desc){.fd = m.fd, .offset = 4 * PAGE, .length = 5 * PAGE, .addr = m.map};
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID,
                      "smaller than the 20480 bytes announced from offset 16384");
        d = (kvd_mem_desc){.fd = m.fd, .offset = 100, .length = PAGE, .addr = m.map};
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID,
                      "is not a multiple of its page size");
        d = (kvd_mem_desc){.fd = m.fd, .length = 0, .addr = m.map};
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID, "length");
        d = (kvd_mem_desc){.fd = m.fd, .length = PAGE, .addr = m.map, .flags = 1};
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_PARAM_INVALID, "flags");
        d = (kvd_mem_desc){.kind = KVD_MEM_DMABUF, .fd = m.fd, .length = PAGE, .addr = m.map};
        expect_status(w.a, kvd_mem_register(w.a, &d, &id), KVD_E_FEATURE_NOT_ENABLED, "dma-buf");
        /* Overlapping what is registered already. */
        expect_ok(w.a, engine_register(w.a, &m, 0, 2 * PAGE, &id));
        expect_status(w.a, engine_register(w.a, &m, PAGE, 2 * PAGE, &id), KVD_E_PARAM_INVALID,
                      "overlaps region");
        /* Only the first of them was registered (cluster A is the daemon's first). */
        ck_assert_int_eq(client_status_int(w.a, "clusters/0/regions"), 1);
        ck_assert_int_eq(client_status_int(w.a, "clusters/0/cluster_id"), A_ID);

        close(p[0]);
        close(p[1]);
        engine_mem_free(&m);
        engine_mem_free(&loose);
        world_stop(&w);
}
END_TEST

/* Engine memory on both ends of a link across two daemons (TCP): a pull and a push, exact. */
START_TEST(test_engine_mem_remote)
{
        static const uint64_t sb[] = {2, 9, 4}, db[] = {7, 0, 5};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), kin = kvd_key_blocks(A_ID, 1);
        size_t span = tcache_mem_size(2, 10, 2048);
        TCache src, into, dst;
        TCopies cp = {}, cpi = {};
        kvd_client *a, *b;
        EngineMem ma, mb;
        uint64_t id;
        Node n[2];

        node_start(&n[0]);
        node_start(&n[1]);
        a = node_server(&n[0], A_ID, KVD_ROLE_PROMPT);
        b = node_client(&n[1], B_ID, KVD_ROLE_DECODER);
        engine_mem_new(&ma, 2 * span + PAGE, true);
        engine_mem_new(&mb, span + PAGE, true);
        expect_ok(a, engine_register(a, &ma, 0, ma.size, &id));
        expect_ok(b, engine_register(b, &mb, 0, mb.size, &id));
        expect_ok(a, tcache_register_at(&src, a, ma.map, true, 2, 10, 2048, 101, &key, 1,
                                        KVD_REMOTE_YES));
        expect_ok(a, tcache_register_at(&into, a, ma.map + span, true, 2, 10, 2048, 102, &kin, 1,
                                        KVD_REMOTE_YES));
        expect_ok(b, tcache_register_at(&dst, b, mb.map, true, 2, 10, 2048, 103, NULL, 0,
                                        KVD_REMOTE_YES));
        link_node(b, A_ID, &n[0]);
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 3, db, 3, NULL));
        expect_ok(b, kvd_push_blocks(b, &kin, dst.id, db, 3, sb, 3, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dst, &cp);
        /* What was pushed is what had just been pulled: the source's blocks, now at @into. */
        tcopies_blocks(&cpi, &src, &into, ALL, ALL, 2, sb, sb, 3);
        tcache_verify(&into, &cpi);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        tcopies_free(&cpi);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&n[1]);
        node_stop(&n[0]);
        engine_mem_free(&ma);
        engine_mem_free(&mb);
}
END_TEST

/* What kvdistd has mapped of memfds named @name; fails the test when it cannot be read. */
static long daemon_mapped_kib(const World *w, const char *name)
{
        long kib = harness_proc_mapped_kib(w->d.pid, name);

        ck_assert_int_ge(kib, 0);
        return kib;
}

/* Waits until kvdistd maps @kib KiB of the memfds named @name; returns what it maps. */
static long wait_daemon_mapped(const World *w, const char *name, long kib)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();
        long now;

        while ((now = daemon_mapped_kib(w, name)) < kib && harness_now_ms() < deadline)
                (void)usleep(10 * 1000);
        ck_assert_msg(now >= kib,
                      "kvdistd maps %ld KiB of %s, not %ld, with no transfer to make it", now, name,
                      kib);
        return now;
}

/*
 * Registered memory is mapped into kvdistd ahead of the first transfer: the pages the engine has
 * written, and only those, show up in kvdistd's mapping of the file without any transfer, and
 * the pages it has not are not allocated by kvdistd (the file's block count stays). Its bytes
 * stay the engine's. kvd_mem_alloc() memory, whose pages are all allocated, is mapped whole.
 */
START_TEST(test_engine_mem_mapped_ahead)
{
        enum { SIZE = 64 << 20, WRITTEN = 24 << 20, ALLOC = 16 << 20 };
        struct stat st0, st1;
        void *mem;
        uint64_t id;
        EngineMem m;
        World w;

        world_start(&w);
        engine_mem_new(&m, SIZE, true);
        if (madvise(m.map, PAGE, MADV_POPULATE_READ) < 0 && errno == EINVAL) {
                printf("SKIP: this kernel has no MADV_POPULATE_READ (Linux 5.14): kvdistd maps "
                       "registered memory as transfers touch it\n");
                engine_mem_free(&m);
                world_stop(&w);
                return;
        }
        harness_fill_pattern(m.map, WRITTEN, 121);
        ck_assert_int_eq(fstat(m.fd, &st0), 0);
        ck_assert_int_eq(daemon_mapped_kib(&w, "memfd:engine-kv"), 0);

        expect_ok(w.a, engine_register(w.a, &m, 0, SIZE, &id));
        /* the untouched 40 MiB: neither mapped nor allocated */
        ck_assert_int_eq(wait_daemon_mapped(&w, "memfd:engine-kv", WRITTEN / 1024), WRITTEN / 1024);
        ck_assert_int_eq(fstat(m.fd, &st1), 0);
        ck_assert_int_eq(st1.st_blocks, st0.st_blocks);
        ck_assert_int_eq(harness_check_pattern(m.map, WRITTEN, 121), -1);
        for (size_t i = WRITTEN; i < SIZE; i += PAGE)
                if (m.map[i] != 0)
                        ck_abort_msg("byte %zu of the untouched part is %u", i, m.map[i]);

        expect_ok(w.a, kvd_mem_unregister(w.a, id));

        expect_ok(w.b, kvd_mem_alloc(w.b, ALLOC, &mem));
        ck_assert_int_eq(wait_daemon_mapped(&w, "memfd:kvdist-region", ALLOC / 1024), ALLOC / 1024);
        expect_ok(w.b, kvd_mem_free(w.b, mem));
        engine_mem_free(&m);
        world_stop(&w);
}
END_TEST

/* kvd_mem_alloc_huge(): huge pages where the host has free ones, base pages said otherwise. */
START_TEST(test_mem_alloc_huge)
{
        static const uint64_t sb[] = {1, 3}, db[] = {2, 0};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        size_t page = 0, base = (size_t)sysconf(_SC_PAGESIZE);
        TCache src, dst;
        TCopies cp = {};
        uint8_t *mem = NULL;
        World w;

        world_start(&w);
        expect_ok(w.b, kvd_mem_alloc_huge(w.b, tcache_mem_size(2, 4, 4096), (void **)&mem, &page));
        ck_assert_msg(page == base || (page > base && page % base == 0), "page size %zu", page);
        ck_assert_uint_eq((uintptr_t)mem % page, 0);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 4, 4096, 111, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register_at(&dst, w.b, mem, true, 2, 4, 4096, 112, NULL, 0,
                                          KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 2, db, 2, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&dst, &cp);
        expect_ok(w.b, kvd_unregister_cache(w.b, dst.id));
        expect_ok(w.b, kvd_mem_free(w.b, mem));
        expect_status(w.b, kvd_mem_alloc_huge(w.b, 0, (void **)&mem, &page), KVD_E_PARAM_INVALID,
                      "size is 0");
        tcopies_free(&cp);
        world_stop(&w);
}
END_TEST

static Suite *engine_mem_suite(void)
{
        Suite *s = suite_create("engine-mem");
        TCase *tc = tcase_create("engine-mem");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_engine_mem_local);
        tcase_add_test(tc, test_engine_mem_refusals);
        tcase_add_test(tc, test_engine_mem_remote);
        tcase_add_test(tc, test_engine_mem_mapped_ahead);
        tcase_add_test(tc, test_mem_alloc_huge);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(engine_mem_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
