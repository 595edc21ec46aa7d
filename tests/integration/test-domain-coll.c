/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, collectives in comm domains: broadcast and all-gather of blocks with the
 * ring and the mesh algorithm on two, three and four daemons (and with two members on one
 * daemon), every byte of every member's cache checked against the seeded patterns (blocks not
 * named and guard bytes untouched); auto's choice; members that disagree on the shape or the
 * algorithm. Run by rdma-vm, every channel across daemons must have moved its messages over
 * RDMA.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define TENSORS 4
#define BLOCKS 64
#define BLOCK_BYTES 3072

typedef struct Net {
        Node nodes[4];
        unsigned n_nodes;
        DomMember m[4];
        unsigned n;
        TCache cache[4];
        char table[RANK_TABLE_MAX];
} Net;

/* @n members, member i on node @on[i] (NULL: each on its own), each with a blocks cache. */
static void net_start(Net *w, unsigned n, const unsigned *on, uint64_t block_bytes)
{
        memset(w, 0, sizeof(*w));
        w->n = n;
        for (unsigned i = 0; i < n; i++)
                w->n_nodes = (on ? on[i] : i) + 1 > w->n_nodes ? (on ? on[i] : i) + 1 : w->n_nodes;
        for (unsigned k = 0; k < w->n_nodes; k++)
                node_start(&w->nodes[k]);
        for (unsigned i = 0; i < n; i++) {
                w->m[i] =
                        (DomMember){&w->nodes[on ? on[i] : i], 1001 * (i + 1), (int32_t)i, NULL, 0};
                dom_member_attach(&w->m[i]);
                expect_ok(w->m[i].client,
                          tcache_register(&w->cache[i], w->m[i].client, true, TENSORS, BLOCKS,
                                          block_bytes, 50 + i, NULL, 0, KVD_REMOTE_DEFAULT));
        }
        rank_table_build(w->table, sizeof(w->table), w->m, n, false);
        dom_link_all(w->m, n, "coll", w->table);
        dom_wait_ok(w->m, n);
}

/* Every node's channels to other nodes ran over it_transport() (RDMA in the soft-RoCE VM). */
static void net_check_channels(const Net *w)
{
        for (unsigned k = 0; k < w->n_nodes; k++)
                dom_check_channels(&w->nodes[k], w->n_nodes > 1);
}

static void net_stop(Net *w)
{
        for (unsigned i = 0; i < w->n; i++)
                expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned k = 0; k < w->n_nodes; k++)
                node_stop(&w->nodes[k]);
}

/* What every member calls with, and what it got back. */
typedef struct Coll {
        Net *w;
        bool gather;
        uint32_t root;
        uint64_t blocks[4][4 * BLOCKS];
        size_t n_blocks;
        size_t per_rank;
        kvd_collective_opts opts[4];
        int ret[4];
        kvd_algorithm algo[4];
        char detail[4][256];
} Coll;

static int coll_member(unsigned i, void *arg)
{
        Coll *c = arg;
        DomMember *m = &c->w->m[i];

        if (c->gather)
                c->ret[i] = kvd_domain_all_gather(m->client, m->comm_id, c->w->cache[i].id,
                                                  c->blocks[i], c->n_blocks, c->per_rank,
                                                  &c->opts[i], &c->algo[i]);
        else
                c->ret[i] =
                        kvd_domain_broadcast(m->client, m->comm_id, c->root, c->w->cache[i].id,
                                             c->blocks[i], c->n_blocks, &c->opts[i], &c->algo[i]);
        (void)snprintf(c->detail[i], sizeof(c->detail[i]), "%s", kvd_last_error(m->client));
        return c->ret[i];
}

/* Distinct scattered block ids for member @i: a permutation of a part of 0..BLOCKS-1. */
static void scattered(uint64_t *v, size_t n, unsigned i)
{
        for (size_t k = 0; k < n; k++)
                v[k] = (k * 37 + 11 * i + 5) % BLOCKS;
}

/* Every cache holds its own pattern again, so the next check starts from there. */
static void coll_init(Coll *c, Net *w, kvd_algorithm algo, uint64_t chunk)
{
        memset(c, 0, sizeof(*c));
        c->w = w;
        for (unsigned i = 0; i < w->n; i++) {
                c->opts[i] = (kvd_collective_opts){
                        .algorithm = algo, .timeout_ms = 20000, .chunk_bytes = chunk};
                harness_fill_pattern(w->cache[i].mem, w->cache[i].mem_size, w->cache[i].seed);
        }
}

/* A broadcast from @root of @nb blocks, then every member's cache checked. */
static void broadcast_check(Net *w, uint32_t root, size_t nb, kvd_algorithm algo, uint64_t chunk)
{
        int rets[4];
        Coll c;

        coll_init(&c, w, algo, chunk);
        c.root = root;
        c.n_blocks = nb;
        for (unsigned i = 0; i < w->n; i++)
                scattered(c.blocks[i], nb, i);
        dom_parallel(w->n, coll_member, &c, rets);
        for (unsigned i = 0; i < w->n; i++) {
                TCopies cp = {};

                ck_assert_msg(c.ret[i] == KVD_OK, "rank %u: %s: %s", i, kvd_strerror(c.ret[i]),
                              c.detail[i]);
                if (algo != KVD_ALGO_AUTO)
                        ck_assert_int_eq(c.algo[i], algo);
                if (i != root)
                        tcopies_blocks(&cp, &w->cache[root], &w->cache[i], ALL, ALL, 2,
                                       c.blocks[root], c.blocks[i], nb);
                tcache_verify(&w->cache[i], &cp);
                tcopies_free(&cp);
        }
        net_check_channels(w);
}

/* An all-gather of @k blocks per rank, then every member's cache checked. */
static void all_gather_check(Net *w, size_t k, kvd_algorithm algo, uint64_t chunk)
{
        int rets[4];
        Coll c;

        coll_init(&c, w, algo, chunk);
        c.gather = true;
        c.n_blocks = k * w->n;
        c.per_rank = k;
        for (unsigned i = 0; i < w->n; i++)
                scattered(c.blocks[i], c.n_blocks, i);
        dom_parallel(w->n, coll_member, &c, rets);
        for (unsigned i = 0; i < w->n; i++) {
                TCopies cp = {};

                ck_assert_msg(c.ret[i] == KVD_OK, "rank %u: %s: %s", i, kvd_strerror(c.ret[i]),
                              c.detail[i]);
                ck_assert_int_eq(c.algo[i], algo);
                for (unsigned q = 0; q < w->n; q++)
                        if (q != i)
                                tcopies_blocks(&cp, &w->cache[q], &w->cache[i], ALL, ALL, 2,
                                               c.blocks[q] + q * k, c.blocks[i] + q * k, k);
                tcache_verify(&w->cache[i], &cp);
                tcopies_free(&cp);
        }
        net_check_channels(w);
}

START_TEST(test_broadcast_two)
{
        Net w;

        net_start(&w, 2, NULL, BLOCK_BYTES);
        broadcast_check(&w, 1, 20, KVD_ALGO_MESH, 0);
        net_stop(&w);
}
END_TEST

/* Ring with small chunks (a block is cut across chunks) and mesh, roots 0 and 2. */
START_TEST(test_broadcast_three)
{
        Net w;

        net_start(&w, 3, NULL, BLOCK_BYTES);
        broadcast_check(&w, 0, 48, KVD_ALGO_RING, 8192);
        broadcast_check(&w, 2, 16, KVD_ALGO_MESH, 0);
        broadcast_check(&w, 2, 33, KVD_ALGO_RING, 4096);
        net_stop(&w);
}
END_TEST

START_TEST(test_broadcast_four)
{
        Net w;

        net_start(&w, 4, NULL, BLOCK_BYTES);
        broadcast_check(&w, 1, 64, KVD_ALGO_RING, 16384);
        broadcast_check(&w, 3, 64, KVD_ALGO_MESH, 0);
        net_stop(&w);
}
END_TEST

/* Two of three members on one daemon: the ring passes through a copy between them. */
START_TEST(test_broadcast_members_on_one_daemon)
{
        static const unsigned on[] = {0, 0, 1};
        Net w;

        net_start(&w, 3, on, BLOCK_BYTES);
        broadcast_check(&w, 2, 40, KVD_ALGO_RING, 8192);
        broadcast_check(&w, 0, 40, KVD_ALGO_RING, 8192);
        broadcast_check(&w, 1, 40, KVD_ALGO_MESH, 0);
        net_stop(&w);
}
END_TEST

START_TEST(test_all_gather_three)
{
        Net w;

        net_start(&w, 3, NULL, BLOCK_BYTES);
        all_gather_check(&w, 7, KVD_ALGO_RING, 4096);
        all_gather_check(&w, 16, KVD_ALGO_MESH, 0);
        net_stop(&w);
}
END_TEST

START_TEST(test_all_gather_four)
{
        static const unsigned on[] = {0, 1, 1, 2};
        Net w;

        net_start(&w, 4, on, BLOCK_BYTES);
        all_gather_check(&w, 16, KVD_ALGO_RING, 8192);
        all_gather_check(&w, 5, KVD_ALGO_MESH, 0);
        net_stop(&w);
}
END_TEST

/* auto: mesh for two members and for small broadcasts, ring for large ones among three. */
START_TEST(test_auto)
{
        Net w;
        Coll c;
        int rets[4];

        net_start(&w, 3, NULL, 65536);
        coll_init(&c, &w, KVD_ALGO_AUTO, 0);
        c.n_blocks = 2; /* 4 tensors x 2 x 64 KiB = 512 KiB */
        for (unsigned i = 0; i < 3; i++)
                scattered(c.blocks[i], c.n_blocks, i);
        dom_parallel(3, coll_member, &c, rets);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_msg(c.ret[i] == KVD_OK, "%s", c.detail[i]);
                ck_assert_int_eq(c.algo[i], KVD_ALGO_MESH);
        }
        c.n_blocks = 32; /* 8 MiB */
        for (unsigned i = 0; i < 3; i++)
                scattered(c.blocks[i], c.n_blocks, i);
        dom_parallel(3, coll_member, &c, rets);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_msg(c.ret[i] == KVD_OK, "%s", c.detail[i]);
                ck_assert_int_eq(c.algo[i], KVD_ALGO_RING);
        }
        broadcast_check(&w, 1, 32, KVD_ALGO_AUTO, 0);
        net_stop(&w);
}
END_TEST

/* Members that disagree fail where they meet, and nothing lands there. */
START_TEST(test_disagree)
{
        TCopies cp = {};
        Net w;
        Coll c;
        int rets[4];

        net_start(&w, 3, NULL, BLOCK_BYTES);
        /* Rank 1 names fewer blocks than the root: both fail, and the root's failure stops its
         * send to rank 2 (which may have landed already, in part or whole). */
        coll_init(&c, &w, KVD_ALGO_MESH, 0);
        c.n_blocks = 12;
        for (unsigned i = 0; i < 3; i++)
                scattered(c.blocks[i], 12, i);
        c.root = 0;
        /* A different length for rank 1 only: coll_member() passes c.n_blocks to all, so give
         * rank 1 a cache of another block size instead. */
        expect_ok(w.m[1].client, kvd_unregister_cache(w.m[1].client, w.cache[1].id));
        expect_ok(w.m[1].client, tcache_register(&w.cache[1], w.m[1].client, true, TENSORS, BLOCKS,
                                                 BLOCK_BYTES / 2, 77, NULL, 0, KVD_REMOTE_DEFAULT));
        dom_parallel(3, coll_member, &c, rets);
        ck_assert_msg(c.ret[0] == KVD_E_CACHE_INCOMPATIBLE, "%s", c.detail[0]);
        ck_assert_msg(c.ret[1] == KVD_E_CACHE_INCOMPATIBLE, "%s", c.detail[1]);
        ck_assert_msg(strstr(c.detail[1], "3072-byte blocks") &&
                              strstr(c.detail[1], "1536-byte blocks"),
                      "%s", c.detail[1]);
        tcache_verify_untouched(&w.cache[1]);
        tcopies_blocks(&cp, &w.cache[0], &w.cache[2], ALL, ALL, 2, c.blocks[0], c.blocks[2], 12);
        tcache_verify_old_or_new(&w.cache[2], &cp);
        tcopies_free(&cp);

        /* Rank 0 runs a ring, the others a mesh: 0 and 1 meet and fail; 2 waits for a message
         * from 0 that the ring never sends, until its timeout. */
        coll_init(&c, &w, KVD_ALGO_MESH, 0);
        c.opts[0].algorithm = KVD_ALGO_RING;
        c.opts[2].timeout_ms = 1000;
        c.n_blocks = 8;
        for (unsigned i = 0; i < 3; i++)
                scattered(c.blocks[i], 8, i + 5);
        dom_parallel(3, coll_member, &c, rets);
        ck_assert_msg(c.ret[0] == KVD_E_PARAM_INVALID, "%s", c.detail[0]);
        ck_assert_msg(c.ret[1] == KVD_E_PARAM_INVALID, "%s", c.detail[1]);
        ck_assert_msg(strstr(c.detail[1], "ring") && strstr(c.detail[1], "mesh"), "%s",
                      c.detail[1]);
        ck_assert_msg(c.ret[2] == KVD_E_TIMEOUT, "%s", c.detail[2]);
        tcache_verify_untouched(&w.cache[1]);
        net_stop(&w);
}
END_TEST

static Suite *coll_suite(void)
{
        Suite *s = suite_create("domain-coll");
        TCase *tc = tcase_create("broadcast");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_broadcast_two);
        tcase_add_test(tc, test_broadcast_three);
        tcase_add_test(tc, test_broadcast_four);
        tcase_add_test(tc, test_broadcast_members_on_one_daemon);
        tcase_add_test(tc, test_auto);
        suite_add_tcase(s, tc);

        tc = tcase_create("all-gather");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_all_gather_three);
        tcase_add_test(tc, test_all_gather_four);
        suite_add_tcase(s, tc);

        tc = tcase_create("disagree");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_disagree);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(coll_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
