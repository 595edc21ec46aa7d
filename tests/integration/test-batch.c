/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of batches (kvd_transfer_batch): many transfers as one request and one
 * task, on one daemon and across two, every destination byte checked; a status per entry and
 * the local blocks of the entries that failed; 100,000 block ids in one submit; bad input; a
 * client that goes away with its batch running.
 */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

/* A permutation of 0..n-1 from @seed, so that no two neighbours stay neighbours. */
static uint64_t *shuffled(size_t n, uint64_t seed)
{
        uint64_t *v = malloc(n * sizeof(*v));

        ck_assert_ptr_nonnull(v);
        for (size_t i = 0; i < n; i++)
                v[i] = i;
        for (size_t i = n - 1; i > 0; i--) {
                size_t j;
                uint64_t t;

                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                j = (size_t)((seed >> 33) % (i + 1));
                t = v[i];
                v[i] = v[j];
                v[j] = t;
        }
        return v;
}

static int wait_batch(kvd_task *t)
{
        return kvd_task_wait(t, -1);
}

static void expect_entries(kvd_task *t, const int *want, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                int st = 1;

                ck_assert_int_eq(kvd_task_entry_status(t, i, &st), KVD_OK);
                ck_assert_msg(st == want[i], "entry %zu: %s, want %s", i, kvd_strerror(st),
                              kvd_strerror(want[i]));
        }
}

/*
 * One batch of mixed entries: pulls from A's K/V cache and from its second cache under another
 * model id (an MLA rope cache: one tensor per layer, another block size), a pull of a contiguous
 * item, and a push into A, all byte-exact; and the same batch with one bad entry, which fails
 * alone.
 */
START_TEST(test_batch_mixed)
{
        static const uint64_t kv_src[] = {3, 17, 5, 31, 0}, kv_dst[] = {39, 1, 22, 7, 8};
        static const uint64_t rope_src[] = {2, 3, 4, 9}, rope_dst[] = {10, 11, 12, 0};
        static const uint64_t push_src[] = {6, 7}, push_dst[] = {20, 21};
        static const uint64_t bad_src[] = {1, 99}, bad_dst[] = {30, 31};
        kvd_cache_key kkv = kvd_key_blocks(A_ID, 0), krope = kvd_key_blocks(A_ID, 1);
        kvd_cache_key kreq = kvd_key_req(A_ID, 42, 0), kin = kvd_key_blocks(A_ID, 2);
        TCache kv, rope, item, in, dkv, drope, ditem, src_push;
        TCopies ckv = {}, crope = {}, citem = {}, cin = {};
        kvd_transfer_opts o = {.timeout_ms = 20000};
        uint64_t failed[8] = {};
        size_t n_failed = 99;
        kvd_task *t = NULL;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&kv, w.a, true, 4, 32, 256, 11, &kkv, 1, KVD_REMOTE_YES));
        expect_ok(w.a, tcache_register(&rope, w.a, true, 2, 16, 64, 12, &krope, 1, KVD_REMOTE_YES));
        expect_ok(w.a,
                  tcache_register(&item, w.a, false, 4, 1, 1024, 13, &kreq, 1, KVD_REMOTE_YES));
        expect_ok(w.a, tcache_register(&in, w.a, true, 4, 24, 256, 14, &kin, 1, KVD_REMOTE_YES));
        expect_ok(w.b,
                  tcache_register(&dkv, w.b, true, 4, 40, 256, 21, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&drope, w.b, true, 2, 16, 64, 22, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&ditem, w.b, false, 4, 2, 1024, 23, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b, tcache_register(&src_push, w.b, true, 4, 8, 256, 24, NULL, 0,
                                       KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);

        {
                kvd_batch_entry e[] = {
                        {.kind = KVD_PULL_BLOCKS,
                         .key = kkv,
                         .cache_id = dkv.id,
                         .src_blocks = kv_src,
                         .n_src = 5,
                         .dst_blocks = kv_dst,
                         .n_dst = 5},
                        {.kind = KVD_PULL_BLOCKS,
                         .key = krope,
                         .cache_id = drope.id,
                         .src_blocks = rope_src,
                         .n_src = 4,
                         .dst_blocks = rope_dst,
                         .n_dst = 4},
                        {.kind = KVD_PULL_CACHE,
                         .key = kreq,
                         .cache_id = ditem.id,
                         .batch_index = 1},
                        {.kind = KVD_PUSH_BLOCKS,
                         .key = kin,
                         .cache_id = src_push.id,
                         .src_blocks = push_src,
                         .n_src = 2,
                         .dst_blocks = push_dst,
                         .n_dst = 2},
                };
                static const int ok[] = {KVD_OK, KVD_OK, KVD_OK, KVD_OK};

                expect_ok(w.b, kvd_transfer_batch(w.b, e, 4, &o, &t));
                /* Not waited for yet: no entry has a status. */
                expect_status(w.b, kvd_task_entry_status(t, 0, &(int){0}), KVD_E_IN_PROGRESS,
                              "still running");
                expect_ok(w.b, wait_batch(t));
                expect_entries(t, ok, 4);
                expect_ok(w.b, kvd_task_failed_blocks(t, failed, 8, &n_failed));
                ck_assert_uint_eq(n_failed, 0);
                expect_status(w.b, kvd_task_entry_status(t, 4, &(int){0}), KVD_E_PARAM_INVALID,
                              "index 4 is past the 4 entries");
                kvd_task_free(t);
        }
        tcopies_blocks(&ckv, &kv, &dkv, ALL, ALL, 2, kv_src, kv_dst, 5);
        tcopies_blocks(&crope, &rope, &drope, ALL, ALL, 2, rope_src, rope_dst, 4);
        tcopies_item(&citem, &item, &ditem, ALL, ALL, 2, 0, 1, -1);
        tcopies_blocks(&cin, &src_push, &in, ALL, ALL, 2, push_src, push_dst, 2);
        tcache_verify(&dkv, &ckv);
        tcache_verify(&drope, &crope);
        tcache_verify(&ditem, &citem);
        tcache_verify(&in, &cin);

        /* One entry names a block past A's cache: it fails alone, and says which blocks. */
        {
                static const uint64_t more_src[] = {20, 21}, more_dst[] = {24, 25};
                kvd_batch_entry e[] = {
                        {.kind = KVD_PULL_BLOCKS,
                         .key = kkv,
                         .cache_id = dkv.id,
                         .src_blocks = bad_src,
                         .n_src = 2,
                         .dst_blocks = bad_dst,
                         .n_dst = 2},
                        {.kind = KVD_PULL_BLOCKS,
                         .key = kkv,
                         .cache_id = dkv.id,
                         .src_blocks = more_src,
                         .n_src = 2,
                         .dst_blocks = more_dst,
                         .n_dst = 2},
                        {.kind = KVD_PULL_BLOCKS,
                         .key = kvd_key_blocks(A_ID, 77),
                         .cache_id = drope.id,
                         .src_blocks = rope_src,
                         .n_src = 1,
                         .dst_blocks = rope_dst + 3,
                         .n_dst = 1},
                };
                static const int want[] = {KVD_E_PARAM_INVALID, KVD_OK, KVD_E_CACHE_NOT_EXIST};

                expect_ok(w.b, kvd_transfer_batch(w.b, e, 3, &o, &t));
                expect_status(w.b, wait_batch(t), KVD_E_PARAM_INVALID,
                              "entries[0]: src_blocks[1]=99 is out of range");
                expect_entries(t, want, 3);
                /* Asked for fewer than there are: the count is still the whole. */
                expect_ok(w.b, kvd_task_failed_blocks(t, failed, 2, &n_failed));
                ck_assert_uint_eq(n_failed, 3);
                ck_assert_uint_eq(failed[0], 30);
                ck_assert_uint_eq(failed[1], 31);
                expect_ok(w.b, kvd_task_failed_blocks(t, failed, 8, &n_failed));
                ck_assert_uint_eq(n_failed, 3);
                ck_assert_uint_eq(failed[2], 0);
                kvd_task_free(t);
                tcopies_blocks(&ckv, &kv, &dkv, ALL, ALL, 2, more_src, more_dst, 2);
        }
        /* The good entry landed; the failed ones wrote nothing. */
        tcache_verify(&dkv, &ckv);
        tcache_verify(&drope, &crope);
        tcache_verify_untouched(&kv);
        tcache_verify_untouched(&rope);

        tcopies_free(&ckv);
        tcopies_free(&crope);
        tcopies_free(&citem);
        tcopies_free(&cin);
        world_stop(&w);
}
END_TEST

/* 100,000 scattered block ids in one submit (four entries), every byte checked. */
START_TEST(test_batch_100k_blocks)
{
        enum { N = 100000, PER = N / 4 };
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = {.timeout_ms = 120000};
        uint64_t *src_ids = shuffled(N, 7), *dst_ids = shuffled(N, 8);
        static const int ok[] = {KVD_OK, KVD_OK, KVD_OK, KVD_OK};
        kvd_batch_entry e[4];
        TCache src, dst;
        TCopies cp = {};
        size_t n_failed = 1;
        int64_t away0;
        kvd_task *t;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, N, 64, 31, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, N, 64, 32, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        away0 = client_status_int(w.b, "counters/frames_decoded_away");
        for (size_t i = 0; i < 4; i++)
                e[i] = (kvd_batch_entry){
                        .kind = KVD_PULL_BLOCKS,
                        .key = key,
                        .cache_id = dst.id,
                        .src_blocks = src_ids + i * PER,
                        .n_src = PER,
                        .dst_blocks = dst_ids + i * PER,
                        .n_dst = PER,
                };
        expect_ok(w.b, kvd_transfer_batch(w.b, e, 4, &o, &t));
        expect_ok(w.b, wait_batch(t));
        expect_entries(t, ok, 4);
        expect_ok(w.b, kvd_task_failed_blocks(t, NULL, 0, &n_failed));
        ck_assert_uint_eq(n_failed, 0);
        kvd_task_free(t);
        /* its 600 KB of block ids were decoded off the daemon's loop, the status calls' not */
        ck_assert_int_eq(client_status_int(w.b, "counters/frames_decoded_away") - away0, 1);

        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, src_ids, dst_ids, N);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        tcopies_free(&cp);
        free(src_ids);
        free(dst_ids);
        world_stop(&w);
}
END_TEST

/*
 * One pull of 100,000 scattered blocks, not a batch: the daemon decodes it off its loop, with
 * what the decoding learnt of the lists (the largest id, no id twice), every byte checked. With
 * one id out of range, or a destination twice, it is refused with the message a short request
 * gets, naming the first entry at fault, and nothing lands.
 */
START_TEST(test_pull_100k_blocks_one_request)
{
        enum { N = 100000 };
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = {.timeout_ms = 120000};
        uint64_t *src_ids = shuffled(N, 9), *dst_ids = shuffled(N, 10), saved;
        char want[160];
        TCache src, dst;
        TCopies cp = {};
        int64_t away0;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, N, 64, 33, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, N, 64, 34, NULL, 0, KVD_REMOTE_DEFAULT));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        away0 = client_status_int(w.b, "counters/frames_decoded_away");

        saved = src_ids[70000];
        src_ids[70000] = N + 5;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, src_ids, N, dst_ids, N, &o),
                      KVD_E_PARAM_INVALID,
                      "src_blocks[70000]=100005 is out of range, cache has 100000 blocks");
        src_ids[70000] = saved;
        saved = dst_ids[N - 1];
        dst_ids[N - 1] = dst_ids[12];
        (void)snprintf(want, sizeof(want), "dst_blocks[%d]=%" PRIu64 " repeats dst_blocks[12]",
                       N - 1, dst_ids[12]);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, src_ids, N, dst_ids, N, &o),
                      KVD_E_PARAM_INVALID, want);
        dst_ids[N - 1] = saved;
        tcache_verify_untouched(&dst);

        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, src_ids, N, dst_ids, N, &o));
        ck_assert_int_eq(client_status_int(w.b, "counters/frames_decoded_away") - away0, 3);
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, src_ids, dst_ids, N);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        tcopies_free(&cp);
        free(src_ids);
        free(dst_ids);
        world_stop(&w);
}
END_TEST

/* What kvd_transfer_batch() and the entry calls refuse, with nothing sent or written. */
START_TEST(test_batch_refusals)
{
        static const uint64_t s[] = {1}, d[] = {2};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_batch_entry e = {.kind = KVD_PULL_BLOCKS,
                             .key = key,
                             .src_blocks = s,
                             .n_src = 1,
                             .dst_blocks = d,
                             .n_dst = 1};
        kvd_batch_entry many[KVD_BATCH_MAX_ENTRIES + 1];
        kvd_transfer_opts o = {};
        kvd_task *t = NULL;
        TCache src, dst;
        size_t n = 0;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 4, 128, 41, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 4, 128, 42, NULL, 0, KVD_REMOTE_YES));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        e.cache_id = dst.id;

        expect_status(NULL, kvd_transfer_batch(NULL, &e, 1, NULL, &t), KVD_E_PARAM_INVALID,
                      "client is NULL");
        expect_status(w.b, kvd_transfer_batch(w.b, &e, 1, NULL, NULL), KVD_E_PARAM_INVALID,
                      "ret_task is NULL");
        expect_status(w.b, kvd_transfer_batch(w.b, &e, 0, NULL, &t), KVD_E_PARAM_INVALID,
                      "1 to 1024 entries, not 0");
        for (size_t i = 0; i < KVD_BATCH_MAX_ENTRIES + 1; i++)
                many[i] = e;
        expect_status(w.b, kvd_transfer_batch(w.b, many, KVD_BATCH_MAX_ENTRIES + 1, NULL, &t),
                      KVD_E_PARAM_INVALID, "not 1025");
        expect_status(w.b, kvd_transfer_batch(w.b, NULL, 1, NULL, &t), KVD_E_PARAM_INVALID,
                      "entries is NULL");
        o.src_layers = LAYERS(0, 0);
        expect_status(w.b, kvd_transfer_batch(w.b, &e, 1, &o, &t), KVD_E_PARAM_INVALID,
                      "each entry has its own");
        o = (kvd_transfer_opts){.notify = "x", .notify_len = 1};
        expect_status(w.b, kvd_transfer_batch(w.b, &e, 1, &o, &t), KVD_E_PARAM_INVALID,
                      "carries no notification");
        many[0] = e;
        many[1] = e;
        many[1].kind = 9;
        expect_status(w.b, kvd_transfer_batch(w.b, many, 2, NULL, &t), KVD_E_PARAM_INVALID,
                      "entries[1].kind 9 is not a transfer kind");
        many[1] = e;
        many[1].n_src = 3;
        many[1].src_blocks = NULL;
        expect_status(w.b, kvd_transfer_batch(w.b, many, 2, NULL, &t), KVD_E_PARAM_INVALID,
                      "entries[1].src_blocks is NULL");
        many[1] = e;
        many[1].src_layers = (kvd_layer_range){INT32_MAX, 5};
        expect_status(w.b, kvd_transfer_batch(w.b, many, 2, NULL, &t), KVD_E_PARAM_INVALID,
                      "entries[1].src_layers");
        tcache_verify_untouched(&dst);

        /* A task of one transfer is not a batch's. */
        expect_ok(w.b, kvd_pull_blocks_async(w.b, &key, dst.id, s, 1, d, 1, NULL, &t));
        expect_ok(w.b, kvd_task_wait(t, -1));
        expect_status(w.b, kvd_task_entry_status(t, 0, &(int){0}), KVD_E_PARAM_INVALID,
                      "not a batch");
        expect_status(w.b, kvd_task_failed_blocks(t, NULL, 0, &n), KVD_E_PARAM_INVALID,
                      "not a batch");
        kvd_task_free(t);
        expect_status(NULL, kvd_task_entry_status(NULL, 0, &(int){0}), KVD_E_PARAM_INVALID,
                      "task is NULL");
        world_stop(&w);
}
END_TEST

/*
 * A client that finalizes with a batch of large transfers still running: the daemon drops
 * every entry, nothing leaks (ASan's leak check at the daemon's exit), and the other cluster
 * goes on.
 */
START_TEST(test_batch_client_goes_away)
{
        enum { N = 2048 };
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = {.timeout_ms = 60000};
        uint64_t *ids = shuffled(N, 3);
        kvd_batch_entry e[8];
        TCache src, dst;
        kvd_task *t;
        World w;

        world_start(&w);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, N, 16384, 51, &key, 1, KVD_REMOTE_YES));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, N, 16384, 52, NULL, 0, KVD_REMOTE_YES));
        link_to(w.b, A_ID, KVD_ROLE_PROMPT);
        for (size_t i = 0; i < 8; i++)
                e[i] = (kvd_batch_entry){.kind = KVD_PULL_BLOCKS,
                                         .key = key,
                                         .cache_id = dst.id,
                                         .src_blocks = ids + i * (N / 8),
                                         .n_src = N / 8,
                                         .dst_blocks = ids + i * (N / 8),
                                         .n_dst = N / 8};
        expect_ok(w.b, kvd_transfer_batch(w.b, e, 8, &o, &t));
        kvd_task_free(t);
        expect_ok(w.b, kvd_client_finalize(w.b));
        w.b = NULL;

        /* A still works with its daemon: its own cache is intact. */
        tcache_verify_untouched(&src);
        ck_assert_int_eq(harness_client_init(&w.d, C_ID, KVD_ROLE_DECODER, &w.b), KVD_OK);
        {
                static const uint64_t s[] = {5, 6}, d[] = {0, 1};
                TCache d2;
                TCopies cp = {};

                expect_ok(w.b, tcache_register(&d2, w.b, true, 2, 4, 16384, 53, NULL, 0,
                                               KVD_REMOTE_DEFAULT));
                link_to(w.b, A_ID, KVD_ROLE_PROMPT);
                expect_ok(w.b, kvd_pull_blocks(w.b, &key, d2.id, s, 2, d, 2, NULL));
                tcopies_blocks(&cp, &src, &d2, ALL, ALL, 2, s, d, 2);
                tcache_verify(&d2, &cp);
                tcopies_free(&cp);
        }
        free(ids);
        world_stop(&w);
}
END_TEST

/* Across two daemons over the peer transport: a pull and a push in one batch, byte-exact. */
START_TEST(test_batch_remote)
{
        static const uint64_t ps[] = {9, 2, 7}, pd[] = {0, 5, 1}, us[] = {3, 4}, ud[] = {6, 7};
        kvd_cache_key kp = kvd_key_blocks(A_ID, 0), ku = kvd_key_blocks(A_ID, 1);
        static const int ok[] = {KVD_OK, KVD_OK};
        kvd_transfer_opts o = {.timeout_ms = 30000};
        TCache src, into, dst, out;
        TCopies c1 = {}, c2 = {};
        kvd_client *a, *b;
        Node n[2];
        kvd_task *t;

        node_start(&n[0]);
        node_start(&n[1]);
        a = node_server(&n[0], A_ID, KVD_ROLE_PROMPT);
        b = node_client(&n[1], B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 4, 12, 512, 61, &kp, 1, KVD_REMOTE_YES));
        expect_ok(a, tcache_register(&into, a, true, 4, 12, 512, 62, &ku, 1, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&dst, b, true, 4, 12, 512, 63, NULL, 0, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&out, b, true, 4, 12, 512, 64, NULL, 0, KVD_REMOTE_YES));
        link_node(b, A_ID, &n[0]);
        {
                kvd_batch_entry e[] = {
                        {.kind = KVD_PULL_BLOCKS,
                         .key = kp,
                         .cache_id = dst.id,
                         .src_blocks = ps,
                         .n_src = 3,
                         .dst_blocks = pd,
                         .n_dst = 3},
                        {.kind = KVD_PUSH_BLOCKS,
                         .key = ku,
                         .cache_id = out.id,
                         .src_blocks = us,
                         .n_src = 2,
                         .dst_blocks = ud,
                         .n_dst = 2},
                };

                expect_ok(b, kvd_transfer_batch(b, e, 2, &o, &t));
                expect_ok(b, wait_batch(t));
                expect_entries(t, ok, 2);
                kvd_task_free(t);
        }
        tcopies_blocks(&c1, &src, &dst, ALL, ALL, 2, ps, pd, 3);
        tcopies_blocks(&c2, &out, &into, ALL, ALL, 2, us, ud, 2);
        tcache_verify(&dst, &c1);
        tcache_verify(&into, &c2);
        tcache_verify_untouched(&src);
        tcache_verify_untouched(&out);
        tcopies_free(&c1);
        tcopies_free(&c2);
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&n[1]);
        node_stop(&n[0]);
}
END_TEST

static Suite *batch_suite(void)
{
        Suite *s = suite_create("batch");
        TCase *tc = tcase_create("batch");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_batch_mixed);
        tcase_add_test(tc, test_batch_100k_blocks);
        tcase_add_test(tc, test_pull_100k_blocks_one_request);
        tcase_add_test(tc, test_batch_refusals);
        tcase_add_test(tc, test_batch_client_goes_away);
        tcase_add_test(tc, test_batch_remote);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(batch_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
