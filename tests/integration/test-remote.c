/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, several daemons on loopback: clusters on different kvdistd processes link
 * through the daemons' peer connections and move blocks and caches over the TCP transport. Every
 * destination byte is checked against its seeded pattern, and the bytes around it too. Faults
 * (killed daemons, timeouts, hostile peers) are in test-remote-faults.c.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"
#include "common/macro.h"

/* Multiplier that scatters block ids: no two neighbours stay neighbours. */
#define SCATTER 7919

/* Two nodes: P with the prompt cluster A, D with the decoder cluster B. */
typedef struct Pair {
        Node p, d;
        kvd_client *a, *b;
} Pair;

static void pair_start(Pair *w, const char *const *extra)
{
        memset(w, 0, sizeof(*w));
        node_start_full(&w->p, NULL, NULL, NULL, extra);
        node_start_full(&w->d, NULL, NULL, NULL, extra);
        w->a = node_server(&w->p, A_ID, KVD_ROLE_PROMPT);
        w->b = node_client(&w->d, B_ID, KVD_ROLE_DECODER);
}

static void pair_stop(Pair *w)
{
        if (w->a)
                expect_ok(w->a, kvd_client_finalize(w->a));
        if (w->b)
                expect_ok(w->b, kvd_client_finalize(w->b));
        node_stop(&w->d);
        node_stop(&w->p);
}

/* @n's status number at @path once it reaches @want, or what it is after harness_wait_ms(). */
static int64_t wait_status_at_least(const Node *n, const char *path, int64_t want)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();
        int64_t v = node_status_int(n, path);

        while (v < want && harness_now_ms() < deadline) {
                (void)poll(NULL, 0, 10);
                v = node_status_int(n, path);
        }
        return v;
}

START_TEST(test_pull_blocks)
{
        static const uint64_t sb1[] = {3, 17, 5, 31, 0, 30};
        static const uint64_t db1[] = {39, 1, 22, 7, 8, 23};
        static const uint64_t sb2[] = {8, 9, 10, 11, 12, 13, 14, 15};
        static const uint64_t db2[] = {24, 25, 26, 27, 28, 29, 30, 31};
        static const uint64_t db3[] = {32, 33, 34, 35, 36, 37};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        TCache src, dst;
        TCopies cp = {};
        Pair w;

        pair_start(&w, NULL);
        expect_ok(w.a,
                  tcache_register(&src, w.a, true, 4, 32, 4096, 11, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, true, 4, 40, 4096, 22, NULL, 0, KVD_REMOTE_DEFAULT));
        link_node(w.b, A_ID, &w.p);
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 1);
        ck_assert_int_eq(node_status_len(&w.d, "peers"), 1);

        /* Scattered blocks, then a run that is contiguous on both sides. */
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb1, 6, db1, 6, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb1, db1, 6);
        tcache_verify(&dst, &cp);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb2, 8, db2, 8, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb2, db2, 8);
        tcache_verify(&dst, &cp);

        /* Layer 1 of the source into layer 0 of blocks not written yet. */
        o = opts_layers(LAYERS(1, 1), LAYERS(0, 0), 2);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb1, 6, db3, 6, &o));
        tcopies_blocks(&cp, &src, &dst, LAYERS(1, 1), LAYERS(0, 0), 2, sb1, db3, 6);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        /* The serving daemon counts a pull once its send job let go of the memory, which may
         * come just after the last byte landed here: wait for it. */
        ck_assert_int_ge(wait_status_at_least(&w.p, "counters/transfers_served", 3), 3);
        ck_assert_int_eq(client_status_int(w.b, "counters/transfers_ok"), 3);
        {
                char *text = NULL, want[160];

                expect_ok(w.b, kvd_daemon_metrics(w.b, &text));
                ck_assert_ptr_nonnull(strstr(text, "kvdist_peers{state=\"ready\"} 1\n"));
                ck_assert_ptr_nonnull(strstr(text, "kvdist_peer_heartbeat_rtt_seconds{peer=\""));
                (void)snprintf(want, sizeof(want),
                               "kvdist_transfers_total{direction=\"pull\","
                               "transport=\"%s\",status=\"KVD_OK\"} 3\n",
                               it_transport());
                ck_assert_ptr_nonnull(strstr(text, want));
                free(text);
                expect_ok(w.a, kvd_daemon_metrics(w.a, &text));
                ck_assert_ptr_nonnull(strstr(text, "kvdist_served_total 3\n"));
                ck_assert_ptr_nonnull(strstr(text, "kvdist_inbound_links 1\n"));
                free(text);
        }
        if (strcmp(it_transport(), "rdma") == 0) {
                const char *ctl = getenv("KVDISTCTL");
                const char *argv[] = {ctl, "--socket", w.d.d.socket_path, "devices", NULL};
                char *out = NULL, *json = NULL, want[128];

                /* The device, its port and registrations, as operators see them. */
                ck_assert_ptr_nonnull(ctl);
                ck_assert_int_eq(harness_run(argv, &out, NULL), 0);
                ck_assert_msg(strstr(out, getenv("KVDIST_RDMA_DEVICE")) && strstr(out, "active") &&
                                      strstr(out, "Ethernet"),
                              "kvdistctl devices:\n%s", out);
                free(out);
                ck_assert_int_eq(harness_daemon_status(&w.d.d, &json), KVD_OK);
                ck_assert_ptr_nonnull(strstr(json, "\"queue_pairs_ready\":"));
                free(json);
                /* Both caches' tensors registered, the pool as a whole, and the time it took
                 * counted. */
                ck_assert_int_eq(node_status_int(&w.d, "rdma_devices/0/memory_regions"), 5);
                ck_assert_int_gt(node_status_int(&w.d, "rdma_devices/0/registration_us_total"), 0);
                expect_ok(w.b, kvd_daemon_metrics(w.b, &out));
                (void)snprintf(want, sizeof(want), "kvdist_rdma_device_up{device=\"%s\"} 1\n",
                               getenv("KVDIST_RDMA_DEVICE"));
                ck_assert_ptr_nonnull(strstr(out, want));
                free(out);
        }
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

/* A pull larger than a data chunk and split over every data connection. */
/*
 * Looks at the transfers in @n's status: each one's bytes_done is null (the transport cannot
 * tell at this moment) or a number no larger than its bytes. Returns how many had a number.
 */
static unsigned transfers_with_progress(const Node *n)
{
        char *text = NULL;
        json_t *root, *xs, *x;
        json_error_t jerr;
        unsigned seen = 0;
        size_t i;

        ck_assert_int_eq(harness_daemon_status(&n->d, &text), KVD_OK);
        root = json_loads(text, 0, &jerr);
        ck_assert_msg(root, "status is not JSON: %s", jerr.text);
        xs = json_object_get(root, "transfers");
        ck_assert(json_is_array(xs));
        json_array_foreach(xs, i, x)
        {
                json_t *done = json_object_get(x, "bytes_done");

                if (json_is_null(done))
                        continue;
                ck_assert_msg(json_is_integer(done), "bytes_done is neither null nor a number");
                ck_assert_int_le(json_integer_value(done),
                                 json_integer_value(json_object_get(x, "bytes")));
                seen++;
        }
        json_decref(root);
        free(text);
        return seen;
}

START_TEST(test_pull_large)
{
        const uint64_t n = 1024; /* 2 tensors x 1024 x 16 KiB = 32 MiB */
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        uint64_t *sb = calloc(n, sizeof(*sb)), *db = calloc(n, sizeof(*db));
        kvd_task *tasks[8];
        unsigned with_progress = 0, running;
        uint64_t t0;
        TCache src, dst;
        TCopies cp = {};
        Pair w;

        ck_assert(sb && db);
        pair_start(&w, NULL);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, n, 16384, 0x1a, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, n, 16384, 0x2b, NULL, 0, 0));
        link_node(w.b, A_ID, &w.p);
        for (uint64_t i = 0; i < n; i++) {
                sb[i] = (i * SCATTER) % n;
                db[i] = i;
        }
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, n, db, n, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        /*
         * The same pull eight times at once, watched: the transfers report their progress. They
         * queue behind each other where the link is slow (over RDMA in the soft-RoCE VM, 256 MiB
         * take 3-10 s), so each has a minute. kvd_task_wait(t, 0) says IN_PROGRESS while one
         * runs; the watch ends with the deadline at the latest, and the waits below say why.
         */
        o.timeout_ms = 60000;
        t0 = harness_now_ms();
        for (int i = 0; i < 8; i++)
                expect_ok(w.b,
                          kvd_pull_blocks_async(w.b, &key, dst.id, sb, n, db, n, &o, &tasks[i]));
        do {
                with_progress += transfers_with_progress(&w.d);
                running = 0;
                for (int i = 0; i < 8; i++)
                        running += kvd_task_wait(tasks[i], 0) == KVD_E_IN_PROGRESS;
        } while (running > 0 && harness_now_ms() - t0 < (uint64_t)o.timeout_ms + 5000);
        for (int i = 0; i < 8; i++) {
                expect_ok(w.b, kvd_task_wait(tasks[i], -1));
                kvd_task_free(tasks[i]);
        }
        ck_assert_msg(with_progress > 0, "no transfer in flight showed its bytes_done");
        tcache_verify(&dst, &cp);

        free(sb);
        free(db);
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

/*
 * 100,000 scattered blocks in one pull: the peer request's 200,000 ids (about 580 KB) are
 * decoded on the serving daemon's decoder thread, not its loop; every byte checked.
 */
START_TEST(test_pull_100k_blocks)
{
        enum { N = 100000 };
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        uint64_t *sb = calloc(N, sizeof(*sb)), *db = calloc(N, sizeof(*db));
        int64_t served0, pulling0;
        TCache src, dst;
        TCopies cp = {};
        Pair w;

        ck_assert(sb && db);
        pair_start(&w, NULL);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, N, 64, 0x3c, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, N + 8, 64, 0x4d, NULL, 0, 0));
        link_node(w.b, A_ID, &w.p);
        for (uint64_t i = 0; i < N; i++) {
                sb[i] = (i * SCATTER) % N;
                db[i] = (i * 7) % N + 4;
        }
        served0 = node_status_int(&w.p, "counters/peer_frames_decoded_away");
        pulling0 = node_status_int(&w.d, "counters/peer_frames_decoded_away");
        o.timeout_ms = 120000;
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, N, db, N, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, N);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        ck_assert_int_eq(node_status_int(&w.p, "counters/peer_frames_decoded_away") - served0, 1);
        /* the answer is short: decoded on the pulling daemon's loop */
        ck_assert_int_eq(node_status_int(&w.d, "counters/peer_frames_decoded_away") - pulling0, 0);

        free(sb);
        free(db);
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

/* Blocks from 4 KiB to 4 MiB, scattered and contiguous, pulled and pushed. */
START_TEST(test_block_sizes)
{
        static const uint64_t sizes[] = {4096, 65536, 1 << 20, 4 << 20};
        static const uint64_t scattered[] = {5, 0, 7, 2}, contiguous[] = {3, 4, 5, 6};
        static const uint64_t dst_a[] = {1, 6, 3, 4}, dst_b[] = {0, 2, 5, 7};
        Pair w;

        pair_start(&w, NULL);
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                kvd_cache_key k = kvd_key_blocks(A_ID, 10 + i), kb = kvd_key_blocks(A_ID, 20 + i);
                TCache src, dst, inbox;
                TCopies cp = {}, cpi = {};

                expect_ok(w.a,
                          tcache_register(&src, w.a, true, 2, 8, sizes[i], 0x100 + i, &k, 1, 0));
                expect_ok(w.a,
                          tcache_register(&inbox, w.a, true, 2, 8, sizes[i], 0x200 + i, &kb, 1, 0));
                expect_ok(w.b,
                          tcache_register(&dst, w.b, true, 2, 8, sizes[i], 0x300 + i, NULL, 0, 0));
                /* Caches registered before the link: link once per size. */
                link_node(w.b, A_ID, &w.p);
                expect_ok(w.b, kvd_pull_blocks(w.b, &k, dst.id, scattered, 4, dst_a, 4, NULL));
                expect_ok(w.b, kvd_pull_blocks(w.b, &k, dst.id, contiguous, 2, dst_b, 2, NULL));
                tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, scattered, dst_a, 4);
                tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, contiguous, dst_b, 2);
                tcache_verify(&dst, &cp);
                expect_ok(w.b, kvd_push_blocks(w.b, &kb, dst.id, dst_a, 4, contiguous, 4, NULL));
                tcopies_blocks(&cpi, &src, &inbox, ALL, ALL, 2, scattered, contiguous, 4);
                tcache_verify(&inbox, &cpi);
                tcache_verify_untouched(&src);
                expect_ok(w.b, kvd_unlink_clusters(w.b,
                                                   &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT,
                                                                       w.p.peer_addr, NULL},
                                                   1, 1000, false, NULL));
                tcopies_free(&cp);
                tcopies_free(&cpi);
                expect_ok(w.a, kvd_unregister_cache(w.a, src.id));
                expect_ok(w.a, kvd_unregister_cache(w.a, inbox.id));
                expect_ok(w.b, kvd_unregister_cache(w.b, dst.id));
                expect_ok(w.a, kvd_mem_free(w.a, src.mem));
                expect_ok(w.a, kvd_mem_free(w.a, inbox.mem));
                expect_ok(w.b, kvd_mem_free(w.b, dst.mem));
        }
        pair_stop(&w);
}
END_TEST

START_TEST(test_push_blocks_notify)
{
        static const uint64_t sb[] = {0, 7, 3, 12, 4, 5, 6};
        static const uint64_t db[] = {15, 2, 9, 4, 10, 11, 12};
        static const char msg[] = "request 42: blocks 15 2 9 4 10 11 12";
        kvd_cache_key key = kvd_key_blocks(A_ID, 1);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        kvd_notify got[4];
        struct pollfd pfd;
        TCache src, dst;
        TCopies cp = {};
        size_t n = 9;
        int fd = -1;
        Pair w;

        pair_start(&w, NULL);
        /* A owns the destination; B pushes into it and tells A. */
        expect_ok(w.a,
                  tcache_register(&dst, w.a, true, 4, 16, 2048, 55, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&src, w.b, true, 4, 13, 2048, 66, NULL, 0, KVD_REMOTE_DEFAULT));
        link_node(w.b, A_ID, &w.p);
        expect_ok(w.a, kvd_notify_fd(w.a, &fd));
        pfd = (struct pollfd){.fd = fd, .events = POLLIN};
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);

        o.notify = msg;
        o.notify_len = sizeof(msg);
        expect_ok(w.b, kvd_push_blocks(w.b, &key, src.id, sb, 7, db, 7, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 7);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);

        /* The notification is there once the push returned: it follows the last byte. */
        ck_assert_int_eq(poll(&pfd, 1, harness_wait_ms()), 1);
        expect_ok(w.a, kvd_get_notifies(w.a, got, 4, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(got[0].kind, KVD_NOTIFY_PUSH);
        ck_assert_uint_eq(got[0].src_cluster_id, B_ID);
        ck_assert_uint_eq(got[0].len, sizeof(msg));
        ck_assert_mem_eq(got[0].data, msg, sizeof(msg));
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);
        expect_ok(w.a, kvd_get_notifies(w.a, got, 4, &n));
        ck_assert_uint_eq(n, 0);
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

/*
 * A pull across daemons tells the cluster it read from (kind PULL, from the puller) once every
 * byte landed at the puller: the puller's daemon says so (PeerRemoteDone) after its receive job
 * (TCP) or its READs (RDMA) completed. Pushes' and pulls' share one queue; a pull that fails
 * tells nothing.
 */
START_TEST(test_pull_blocks_notify)
{
        static const uint64_t sb[] = {0, 7, 3, 12, 4, 5, 6};
        static const uint64_t db[] = {15, 2, 9, 4, 10, 11, 12};
        static const uint64_t psb[] = {1, 6}, pdb[] = {13, 14};
        static const uint64_t far = 99;
        static const char msg[] = "request 43: blocks 0 7 3 12 4 5 6 read";
        static uint8_t big[KVD_NOTIFY_MAX + 1];
        kvd_cache_key key = kvd_key_blocks(A_ID, 1);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        kvd_notify got[4];
        TCache asrc, bdst, bsrc;
        TCopies cpa = {}, cpb = {};
        size_t n = 9;
        int fd = -1;
        Pair w;

        pair_start(&w, NULL);
        expect_ok(w.a,
                  tcache_register(&asrc, w.a, true, 4, 16, 2048, 55, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&bdst, w.b, true, 4, 16, 2048, 66, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&bsrc, w.b, true, 4, 8, 2048, 77, NULL, 0, KVD_REMOTE_DEFAULT));
        link_node(w.b, A_ID, &w.p);
        expect_ok(w.a, kvd_notify_fd(w.a, &fd));

        /* Bad notifications, refused before anything moves; a block the source lacks. */
        o.notify = NULL;
        o.notify_len = 3;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 7, db, 7, &o),
                      KVD_E_PARAM_INVALID, "opts.notify is NULL");
        o.notify = big;
        o.notify_len = sizeof(big);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 7, db, 7, &o),
                      KVD_E_PARAM_INVALID, "notify_len");
        o.notify = "lost";
        o.notify_len = 4;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, bdst.id, &far, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID, "out of range");
        tcache_verify_untouched(&bdst);

        /* Byte-exact, then told: the one notification is the pull's (the failed one's never). */
        o.notify = msg;
        o.notify_len = sizeof(msg);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb, 7, db, 7, &o));
        tcopies_blocks(&cpb, &asrc, &bdst, ALL, ALL, 2, sb, db, 7);
        tcache_verify(&bdst, &cpb);
        tcache_verify_untouched(&asrc);
        notifies_take(w.a, fd, got, 1);
        ck_assert_int_eq(got[0].kind, KVD_NOTIFY_PULL);
        ck_assert_uint_eq(got[0].src_cluster_id, B_ID);
        ck_assert_uint_eq(got[0].len, sizeof(msg));
        ck_assert_mem_eq(got[0].data, msg, sizeof(msg));

        /* Push, pull, push: one queue. A pull's notification follows the puller's word, which
         * may come after the call returned: the second push waits for it. */
        o.notify = "push 1";
        o.notify_len = 6;
        expect_ok(w.b, kvd_push_blocks(w.b, &key, bsrc.id, psb, 1, pdb, 1, &o));
        o.notify = "pull 1";
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, bdst.id, sb + 1, 2, db + 1, 2, &o));
        notifies_take(w.a, fd, got, 2);
        notify_check(&got[0], KVD_NOTIFY_PUSH, B_ID, "push 1");
        notify_check(&got[1], KVD_NOTIFY_PULL, B_ID, "pull 1");
        o.notify = "push 2";
        expect_ok(w.b, kvd_push_blocks(w.b, &key, bsrc.id, psb + 1, 1, pdb + 1, 1, &o));
        notifies_take(w.a, fd, got, 1);
        notify_check(&got[0], KVD_NOTIFY_PUSH, B_ID, "push 2");
        tcopies_blocks(&cpa, &bsrc, &asrc, ALL, ALL, 2, psb, pdb, 2);
        tcache_verify(&asrc, &cpa);
        tcache_verify(&bdst, &cpb);

        /* The puller is told nothing; the source's daemon delivered four. */
        expect_ok(w.b, kvd_get_notifies(w.b, got, 4, &n));
        ck_assert_uint_eq(n, 0);
        ck_assert_int_eq(node_status_int(&w.p, "counters/notifies_delivered"), 4);
        tcopies_free(&cpa);
        tcopies_free(&cpb);
        pair_stop(&w);
}
END_TEST

START_TEST(test_caches)
{
        kvd_cache_key keys[3] = {
                kvd_key_req(A_ID, 100, 0),
                kvd_key_req(A_ID, 101, 0),
                kvd_key_prefix(A_ID, 7, 0),
        };
        static const uint64_t db[] = {5, 1, 6};
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        kvd_cache_key k;
        TCache src, dst, blocks, pushed;
        TCopies cp = {}, cpb = {}, cpp = {};
        Pair w;

        pair_start(&w, NULL);
        expect_ok(w.a,
                  tcache_register(&src, w.a, false, 4, 3, 1024, 77, keys, 3, KVD_REMOTE_DEFAULT));
        expect_ok(w.a, tcache_register(&pushed, w.a, false, 4, 2, 1024, 78, NULL, 0,
                                       KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&dst, w.b, false, 4, 5, 1024, 88, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(w.b,
                  tcache_register(&blocks, w.b, true, 4, 8, 512, 89, NULL, 0, KVD_REMOTE_DEFAULT));
        link_node(w.b, A_ID, &w.p);

        /* By CacheKey, whole item; by id and index; by prefix, part of each tensor. */
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[1], dst.id, 2, -1, &o));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 1, 2, -1);
        k = kvd_key_id_index(A_ID, src.id, 0);
        expect_ok(w.b, kvd_pull_cache(w.b, &k, dst.id, 0, -1, NULL));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 0, 0, -1);
        expect_ok(w.b, kvd_pull_cache(w.b, &keys[2], dst.id, 4, 600, &o));
        tcopies_item(&cp, &src, &dst, ALL, ALL, 2, 2, 4, 600);
        tcache_verify(&dst, &cp);

        /* A contiguous item into blocks, in order. */
        expect_ok(w.b, kvd_pull_blocks(w.b, &keys[0], blocks.id, NULL, 0, db, 2, &o));
        tcopies_item_to_blocks(&cpb, &src, &blocks, ALL, ALL, 2, 0, db, 2);
        tcache_verify(&blocks, &cpb);

        /* Push B's slot 2 into slot 1 of A's second cache, named by id and index. B's slot 2
         * holds A's slot 1 (pulled above), so that is what must land. */
        k = kvd_key_id_index(A_ID, pushed.id, 1);
        expect_ok(w.b, kvd_push_cache(w.b, &k, dst.id, 2, -1, &o));
        tcopies_item(&cpp, &src, &pushed, ALL, ALL, 2, 1, 1, -1);
        tcache_verify(&pushed, &cpp);
        tcache_verify_untouched(&src);

        tcopies_free(&cp);
        tcopies_free(&cpb);
        tcopies_free(&cpp);
        pair_stop(&w);
}
END_TEST

START_TEST(test_link_rules)
{
        kvd_cluster_info many[KVD_MAX_LINK_CLUSTERS + 1];
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), late_key = kvd_key_blocks(A_ID, 5);
        kvd_cache_key hidden_key = kvd_key_blocks(A_ID, 6);
        uint64_t b0 = 0;
        TCache src, late, hidden, dst;
        int ret = 1;
        Pair w;

        pair_start(&w, NULL);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 4, 1024, 1, &key, 1, 0));
        expect_ok(w.a, tcache_register(&hidden, w.a, true, 2, 4, 1024, 2, &hidden_key, 1,
                                       KVD_REMOTE_NO));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 4, 1024, 3, NULL, 0, 0));

        /* Nobody by that id over there; nothing at that address; not an address. */
        expect_status(w.b, link_at(w.b, 777, w.p.peer_addr, 5000, &ret), KVD_E_LINK_FAILED,
                      "no cluster 777");
        ck_assert_int_eq(ret, KVD_E_LINK_FAILED);
        expect_status(w.b, link_at(w.b, A_ID, "127.0.0.1:1", 5000, &ret), KVD_E_LINK_FAILED, NULL);
        expect_status(w.b, link_at(w.b, A_ID, "peer.example:7000", 5000, &ret), KVD_E_PARAM_INVALID,
                      "not ip:port");
        ck_assert_int_eq(kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK);

        /* At most 16 clusters per call. */
        for (size_t i = 0; i < ARRAY_SIZE(many); i++)
                many[i] = (kvd_cluster_info){5000 + i, KVD_ROLE_PROMPT, w.p.peer_addr, NULL};
        expect_status(w.b, kvd_link_clusters(w.b, many, ARRAY_SIZE(many), 1000, NULL),
                      KVD_E_CLUSTER_NUM_EXCEED_LIMIT, NULL);

        link_node(w.b, A_ID, &w.p);
        expect_ok(w.b, kvd_check_link_status(w.b, A_ID));
        expect_status(w.b, link_at(w.b, A_ID, w.p.peer_addr, 5000, &ret), KVD_E_ALREADY_LINK, NULL);
        ck_assert_int_eq(ret, KVD_E_ALREADY_LINK);

        /* Registered after the link: not reachable through it; a private cache neither. */
        expect_ok(w.a, tcache_register(&late, w.a, true, 2, 4, 1024, 4, &late_key, 1, 0));
        expect_status(w.b, kvd_pull_blocks(w.b, &late_key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        expect_status(w.b, kvd_pull_blocks(w.b, &hidden_key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_PERMISSION_DENIED, "(registered with KVD_REMOTE_NO)");
        /* A block past the end is refused before anything moves. */
        b0 = 4;
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_PARAM_INVALID, "out of range");
        tcache_verify_untouched(&dst);

        /* The prompt side cannot change role while a peer's cluster is linked to it. */
        expect_status(w.a, kvd_switch_role(w.a, KVD_ROLE_MIX, NULL, 0), KVD_E_EXIST_LINK, NULL);

        /* Unlink tears down both ends. */
        expect_ok(w.b, kvd_unlink_clusters(
                               w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, w.p.peer_addr, NULL},
                               1, 1000, false, NULL));
        ck_assert_int_eq(kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK);
        for (int i = 0; i < 100 && node_status_len(&w.p, "inbound_links") > 0; i++)
                harness_sleep_ms(20);
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 0);
        /* The serving side says who ended the link (not a status that reads like an error). */
        ck_assert(harness_daemon_log_contains(&w.p.d, "): removed (unlinked by cluster 2002)"));
        ck_assert(!harness_daemon_log_contains(&w.p.d, "removed (KVD_E_NOT_YET_LINK)"));
        /* A new role; still a server at its daemon's address. */
        expect_ok(w.a, kvd_switch_role(w.a, KVD_ROLE_MIX,
                                       &(kvd_option){"listen_ip_info", w.p.peer_addr}, 1));

        /* A cache registered while a link existed defaults to private: a new link does not
         * reach it either; the caches registered before any link still are. */
        link_node(w.b, A_ID, &w.p);
        b0 = 1;
        expect_status(w.b, kvd_pull_blocks(w.b, &late_key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_PERMISSION_DENIED,
                      "(registered with KVD_REMOTE_DEFAULT while "
                      "cluster 1001 had links)");
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b0, 1, &b0, 1, NULL));

        /* An unlink on the linked-to side takes B's end down too, and both logs say who. */
        expect_ok(w.a,
                  kvd_unlink_clusters(w.a, &(kvd_cluster_info){B_ID, KVD_ROLE_DECODER, NULL, NULL},
                                      1, 1000, false, NULL));
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 0);
        for (int i = 0; i < 100 && kvd_check_link_status(w.b, A_ID) == KVD_OK; i++)
                harness_sleep_ms(20);
        expect_status(w.b, kvd_check_link_status(w.b, A_ID), KVD_E_NOT_YET_LINK,
                      "was unlinked by cluster 1001");
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_NOT_YET_LINK, "was unlinked by cluster 1001");
        ck_assert(harness_daemon_log_contains(&w.p.d, "): removed (unlinked by cluster 1001)"));
        ck_assert(harness_daemon_log_contains(&w.d.d, "): down (unlinked by cluster 1001)"));
        expect_ok(w.b,
                  kvd_unlink_clusters(w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, NULL, NULL},
                                      1, 1000, false, NULL));
        link_node(w.b, A_ID, &w.p);

        /* A forced unlink on the linked-to side drops only its end; B then re-links. */
        expect_ok(w.a,
                  kvd_unlink_clusters(w.a, &(kvd_cluster_info){B_ID, KVD_ROLE_DECODER, NULL, NULL},
                                      1, 1000, true, NULL));
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 0);
        expect_status(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b0, 1, &b0, 1, NULL),
                      KVD_E_NOT_YET_LINK, NULL);
        expect_ok(w.b,
                  kvd_unlink_clusters(w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, NULL, NULL},
                                      1, 1000, true, NULL));
        link_node(w.b, A_ID, &w.p);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, &b0, 1, &b0, 1, NULL));

        pair_stop(&w);
}
END_TEST

static void link_pair(void *userdata)
{
        Pair *w = userdata;

        link_node(w->b, A_ID, &w->p);
}

/* Runs one of the shared checks between A on P and B on D. */
static void pair_check(void (*check)(kvd_client *a, kvd_client *b, link_fn link, void *userdata))
{
        Pair w;

        pair_start(&w, NULL);
        check(w.a, w.b, link_pair, &w);
        pair_stop(&w);
}

/* The cache exists over there: PERMISSION_DENIED, with the reason, for pull and push. */
START_TEST(test_unexposed_caches)
{
        pair_check(check_unexposed_caches);
}
END_TEST

/* Links are two-way: A, linked to, pulls and pushes what B exposed when it linked. */
START_TEST(test_two_way)
{
        pair_check(check_two_way);
}
END_TEST

/* An unlink from either daemon's side, plain or forced, ends both directions; re-link works. */
START_TEST(test_two_way_unlink)
{
        Pair w;

        pair_start(&w, NULL);
        check_two_way_unlink(w.a, w.b, link_pair, &w, false);
        pair_stop(&w);
}
END_TEST

/* What @n's first inbound link says its own cluster's transfers go over ("" when none). */
static char *inlink_transport_out(const Node *n)
{
        json_t *root = daemon_status_json(&n->d);
        json_t *v = json_object_get(json_array_get(json_object_get(root, "inbound_links"), 0),
                                    "transport_out");
        char *s = strdup(json_is_string(v) ? json_string_value(v) : "");

        ck_assert_ptr_nonnull(s);
        json_decref(root);
        return s;
}

/*
 * The linked-to side's transfers go over the link's transport: over RDMA on queue pairs of its
 * daemon's own to the linking cluster's device, connected once the link is granted.
 */
START_TEST(test_two_way_transport)
{
        static const uint64_t sb[] = {2, 5}, db[] = {7, 0}, psb[] = {1}, pdb[] = {6};
        kvd_cache_key kb = kvd_key_blocks(B_ID, 3);
        const char *want = it_transport();
        char *got = NULL, *text = NULL, line[160];
        TCache bdst, adst;
        TCopies cpa = {}, cpb = {};
        Pair w;

        pair_start(&w, NULL);
        expect_ok(w.b,
                  tcache_register(&bdst, w.b, true, 2, 8, 4096, 0x61, &kb, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.a,
                  tcache_register(&adst, w.a, true, 2, 8, 4096, 0x62, NULL, 0, KVD_REMOTE_DEFAULT));
        link_node(w.b, A_ID, &w.p);
        for (int i = 0; i < 1000; i++) {
                free(got);
                got = inlink_transport_out(&w.p);
                if (strcmp(got, want) == 0)
                        break;
                harness_sleep_ms(20);
        }
        ck_assert_str_eq(got, want);
        free(got);

        expect_ok(w.a, kvd_pull_blocks(w.a, &kb, adst.id, sb, 2, db, 2, NULL));
        tcopies_blocks(&cpa, &bdst, &adst, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&adst, &cpa);
        expect_ok(w.a, kvd_push_blocks(w.a, &kb, adst.id, psb, 1, pdb, 1, NULL));
        tcopies_blocks(&cpb, &adst, &bdst, ALL, ALL, 2, psb, pdb, 1);
        tcache_verify(&bdst, &cpb);
        /* Counted on A's daemon under the transport they used. */
        expect_ok(w.a, kvd_daemon_metrics(w.a, &text));
        (void)snprintf(line, sizeof(line),
                       "kvdist_transfers_total{direction=\"pull\",transport=\"%s\","
                       "status=\"KVD_OK\"} 1\n",
                       want);
        ck_assert_msg(strstr(text, line), "no %s in:\n%s", line, text);
        (void)snprintf(line, sizeof(line),
                       "kvdist_transfers_total{direction=\"push\",transport=\"%s\","
                       "status=\"KVD_OK\"} 1\n",
                       want);
        ck_assert_msg(strstr(text, line), "no %s in:\n%s", line, text);
        free(text);
        tcopies_free(&cpa);
        tcopies_free(&cpb);
        pair_stop(&w);
}
END_TEST

/* Link once, then allocate per request and pull by key. */
START_TEST(test_pool_caches_after_link)
{
        pair_check(check_pool_caches_after_link);
}
END_TEST

START_TEST(test_odd_tensor_counts)
{
        pair_check(check_odd_tensor_counts);
}
END_TEST

/* A listener that accepts and never says a word: the link times out. */
START_TEST(test_link_timeout)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
        socklen_t len = sizeof(sa);
        char addr[64];
        int lfd, ret = 1;
        uint64_t t0;
        Pair w;

        lfd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(lfd, 0);
        ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(lfd, 4), 0);
        ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
        (void)snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));

        pair_start(&w, NULL);
        t0 = harness_now_ms();
        expect_status(w.b, link_at(w.b, A_ID, addr, 300, &ret), KVD_E_TIMEOUT, NULL);
        ck_assert_int_eq(ret, KVD_E_TIMEOUT);
        /* A call's timeout bounds it (the limit is generous: this is not a speed test). */
        ck_assert_uint_lt(harness_now_ms() - t0, (uint64_t)harness_wait_scaled(4000));
        /* The same cluster links for real afterwards. */
        link_node(w.b, A_ID, &w.p);
        close(lfd);
        pair_stop(&w);
}
END_TEST

/* Three clusters on each of two daemons, every pair linked, pulls in flight at once. */
START_TEST(test_many_clusters)
{
        enum { N = 3, BLOCKS = 16 };
        kvd_client *pc[N], *dc[N];
        TCache src[N], dst[N];
        kvd_task *tasks[N][N];
        uint64_t sb[BLOCKS], db[N][BLOCKS];
        Node p, d;

        node_start(&p);
        node_start(&d);
        for (int i = 0; i < N; i++) {
                kvd_cache_key key = kvd_key_blocks(100 + i, 0);

                pc[i] = node_server(&p, 100 + i, KVD_ROLE_PROMPT);
                dc[i] = node_client(&d, 200 + i, KVD_ROLE_DECODER);
                expect_ok(pc[i], tcache_register(&src[i], pc[i], true, 2, BLOCKS, 4096, 10 + i,
                                                 &key, 1, 0));
                expect_ok(dc[i], tcache_register(&dst[i], dc[i], true, 2, N * BLOCKS, 4096, 20 + i,
                                                 NULL, 0, 0));
        }
        for (int i = 0; i < N; i++) {
                kvd_cluster_info infos[N];
                int rets[N];

                for (int j = 0; j < N; j++)
                        infos[j] = (kvd_cluster_info){100 + j, KVD_ROLE_PROMPT, p.peer_addr, NULL};
                expect_ok(dc[i], kvd_link_clusters(dc[i], infos, N, 5000, rets));
                for (int j = 0; j < N; j++)
                        ck_assert_int_eq(rets[j], KVD_OK);
        }
        /* One control connection carries every pair. */
        ck_assert_int_eq(node_status_len(&d, "peers"), 1);
        ck_assert_int_eq(node_status_len(&p, "inbound_links"), N * N);

        for (int b = 0; b < BLOCKS; b++)
                sb[b] = (uint64_t)(b * 5) % BLOCKS;
        for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                        kvd_cache_key key = kvd_key_blocks(100 + j, 0);

                        for (int b = 0; b < BLOCKS; b++)
                                db[j][b] = (uint64_t)(j * BLOCKS + b);
                        expect_ok(dc[i], kvd_pull_blocks_async(dc[i], &key, dst[i].id, sb, BLOCKS,
                                                               db[j], BLOCKS, NULL, &tasks[i][j]));
                }
        for (int i = 0; i < N; i++) {
                TCopies cp = {};

                for (int j = 0; j < N; j++) {
                        expect_ok(dc[i], kvd_task_wait(tasks[i][j], 30000));
                        kvd_task_free(tasks[i][j]);
                        tcopies_blocks(&cp, &src[j], &dst[i], ALL, ALL, 2, sb, db[j], BLOCKS);
                }
                tcache_verify(&dst[i], &cp);
                tcopies_free(&cp);
        }
        for (int i = 0; i < N; i++) {
                tcache_verify_untouched(&src[i]);
                expect_ok(pc[i], kvd_client_finalize(pc[i]));
                expect_ok(dc[i], kvd_client_finalize(dc[i]));
        }
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/* A decode cluster on a third daemon pulls from two prompt daemons. */
START_TEST(test_three_daemons)
{
        static const uint64_t sb[] = {1, 0, 3}, db1[] = {0, 1, 2}, db2[] = {5, 4, 3};
        kvd_cache_key k1 = kvd_key_blocks(A_ID, 0), k2 = kvd_key_blocks(C_ID, 0);
        kvd_client *a, *c, *b;
        TCache s1, s2, dst;
        TCopies cp = {};
        Node n1, n2, n3;

        node_start(&n1);
        node_start(&n2);
        node_start(&n3);
        a = node_server(&n1, A_ID, KVD_ROLE_PROMPT);
        c = node_server(&n2, C_ID, KVD_ROLE_PROMPT);
        b = node_client(&n3, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&s1, a, true, 2, 4, 8192, 31, &k1, 1, 0));
        expect_ok(c, tcache_register(&s2, c, true, 2, 4, 8192, 32, &k2, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 8, 8192, 33, NULL, 0, 0));
        link_node(b, A_ID, &n1);
        link_node(b, C_ID, &n2);
        ck_assert_int_eq(node_status_len(&n3, "peers"), 2);
        expect_ok(b, kvd_pull_blocks(b, &k1, dst.id, sb, 3, db1, 3, NULL));
        expect_ok(b, kvd_pull_blocks(b, &k2, dst.id, sb, 3, db2, 3, NULL));
        tcopies_blocks(&cp, &s1, &dst, ALL, ALL, 2, sb, db1, 3);
        tcopies_blocks(&cp, &s2, &dst, ALL, ALL, 2, sb, db2, 3);
        tcache_verify(&dst, &cp);
        expect_ok(a, kvd_client_finalize(a));
        expect_ok(c, kvd_client_finalize(c));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        node_stop(&n3);
        node_stop(&n2);
        node_stop(&n1);
}
END_TEST

static void *try_raise(void *userdata)
{
        int *nice = userdata;

        *nice = setpriority(PRIO_PROCESS, (id_t)gettid(), *nice) == 0;
        return NULL;
}

/* Whether a thread of this process may go to @nice: what a daemon started from here may do. */
static bool may_raise_to(int nice)
{
        pthread_t t;

        ck_assert_int_eq(pthread_create(&t, NULL, try_raise, &nice), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        return nice == 1;
}

/* @n's control loop (its main thread) is at @loop; every other thread at @base. */
static void check_thread_nices(const Node *n, int loop, int base)
{
        HarnessThread t[256];
        bool copy = false, tcp = false;
        int k = harness_proc_threads(n->d.pid, t, ARRAY_SIZE(t));

        ck_assert_int_gt(k, 1);
        for (int i = 0; i < k; i++) {
                if (t[i].tid == n->d.pid) {
                        ck_assert_int_eq(t[i].nice, loop);
                        continue;
                }
                ck_assert_msg(t[i].nice == base,
                              "thread %d (%s) at nice %d, the daemon's own is %d", (int)t[i].tid,
                              t[i].comm, t[i].nice, base);
                copy |= strncmp(t[i].comm, "kvd-copy/", 9) == 0;
                tcp |= strncmp(t[i].comm, "kvd-tcp/", 8) == 0;
        }
        ck_assert(copy);
        /* the data streams' threads start when the link does, from the raised loop */
        if (strcmp(it_transport(), "tcp") == 0)
                ck_assert(tcp);
        ck_assert_int_eq(node_status_int(n, "control_nice"), loop);
}

/*
 * Each daemon raises its control loop to control_nice (-10 by default) so that it does not wait
 * behind its own copies for a core; every other thread, those started from the loop when a link
 * came up included, stays at the nice the daemon was started with.
 */
START_TEST(test_control_loop_priority)
{
        static const uint64_t sb[] = {9, 2, 14, 0, 7, 11};
        static const uint64_t db[] = {1, 15, 4, 8, 12, 3};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        int base = getpriority(PRIO_PROCESS, (id_t)gettid());
        int loop = may_raise_to(-10) ? -10 : base;
        TCache src, dst;
        TCopies cp = {};
        Pair w;

        if (loop == base)
                fprintf(stderr,
                        "test_control_loop_priority: this process may not raise a thread "
                        "to nice -10 (no CAP_SYS_NICE or RLIMIT_NICE): the daemons' loops "
                        "are checked to stay at %d\n",
                        base);
        pair_start(&w, NULL);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, 16, 4096, 0x51, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, 16, 4096, 0x52, NULL, 0, 0));
        link_node(w.b, A_ID, &w.p);
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, 6, db, 6, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 6);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        check_thread_nices(&w.p, loop, base);
        check_thread_nices(&w.d, loop, base);
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

/* Both daemons ask for CRC32C on the data streams: the same bytes land. */
START_TEST(test_crc)
{
        static const char *const extra[] = {"--tcp-crc", "on", "--tcp-streams", "2", NULL};
        const uint64_t n = 256;
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        /* 32 MiB through CRC32C on both ends: more than the default second on a busy host. */
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        uint64_t sb[256], db[256];
        TCache src, dst;
        TCopies cp = {};
        char *json = NULL;
        Pair w;

        pair_start(&w, extra);
        expect_ok(w.a, tcache_register(&src, w.a, true, 2, n, 65536, 0xc1, &key, 1, 0));
        expect_ok(w.b, tcache_register(&dst, w.b, true, 2, n, 65536, 0xc2, NULL, 0, 0));
        link_node(w.b, A_ID, &w.p);
        ck_assert_int_eq(harness_daemon_status(&w.d.d, &json), KVD_OK);
        ck_assert_ptr_nonnull(strstr(json, "\"crc\":true"));
        ck_assert_ptr_nonnull(strstr(json, "\"data_conns\":2"));
        free(json);
        for (uint64_t i = 0; i < n; i++) {
                sb[i] = i;
                db[i] = n - 1 - i;
        }
        expect_ok(w.b, kvd_pull_blocks(w.b, &key, dst.id, sb, n, db, n, &o));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, n);
        tcache_verify(&dst, &cp);
        tcopies_free(&cp);
        pair_stop(&w);
}
END_TEST

static Suite *remote_suite(void)
{
        Suite *s = suite_create("integration-remote");
        TCase *tc;

        tc = tcase_create("transfers");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_pull_blocks);
        tcase_add_test(tc, test_pull_large);
        tcase_add_test(tc, test_pull_100k_blocks);
        tcase_add_test(tc, test_block_sizes);
        tcase_add_test(tc, test_push_blocks_notify);
        tcase_add_test(tc, test_pull_blocks_notify);
        tcase_add_test(tc, test_caches);
        tcase_add_test(tc, test_crc);
        suite_add_tcase(s, tc);

        tc = tcase_create("links");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_link_rules);
        tcase_add_test(tc, test_unexposed_caches);
        tcase_add_test(tc, test_two_way);
        tcase_add_test(tc, test_two_way_unlink);
        tcase_add_test(tc, test_two_way_transport);
        tcase_add_test(tc, test_pool_caches_after_link);
        tcase_add_test(tc, test_odd_tensor_counts);
        tcase_add_test(tc, test_link_timeout);
        tcase_add_test(tc, test_many_clusters);
        tcase_add_test(tc, test_three_daemons);
        tcase_add_test(tc, test_control_loop_priority);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(remote_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
