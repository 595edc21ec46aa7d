/* SPDX-License-Identifier: MIT */
/* Integration test world: one daemon, clusters A and B, links and transfer options. */
#include <check.h>
#include <poll.h>
#include <string.h>

#include "tests/integration/it-cache.h"
#include "tests/integration/it-world.h"

void world_start(World *w)
{
        int r;

        memset(w, 0, sizeof(*w));
        r = harness_daemon_start(&w->d, NULL);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        /* A is a server (a listener of its own, any port): B links to it. */
        r = harness_server_init(&w->d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &w->a);
        ck_assert_msg(r == KVD_OK, "kvd_client_init(A) = %s: %s", kvd_strerror(r),
                      kvd_last_error(NULL));
        r = harness_client_init(&w->d, B_ID, KVD_ROLE_DECODER, &w->b);
        ck_assert_msg(r == KVD_OK, "kvd_client_init(B) = %s: %s", kvd_strerror(r),
                      kvd_last_error(NULL));
}

void world_stop(World *w)
{
        int r;

        if (w->a)
                expect_ok(w->a, kvd_client_finalize(w->a));
        if (w->b)
                expect_ok(w->b, kvd_client_finalize(w->b));
        w->a = w->b = NULL;
        r = harness_daemon_stop(&w->d);
        ck_assert_msg(r == 0, "kvdistd exited with %d", r);
        harness_daemon_cleanup(&w->d);
}

void link_to(kvd_client *c, uint64_t remote, kvd_role role)
{
        kvd_cluster_info info = {remote, role, NULL, NULL};
        int ret = 1;

        expect_ok(c, kvd_link_clusters(c, &info, 1, 0, &ret));
        ck_assert_int_eq(ret, KVD_OK);
}

kvd_transfer_opts opts_layers(kvd_layer_range sl, kvd_layer_range dl, uint32_t tpl)
{
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;

        o.src_layers = sl;
        o.dst_layers = dl;
        o.tensor_num_per_layer = tpl;
        o.timeout_ms = 10000;
        return o;
}

void notifies_take(kvd_client *c, int fd, kvd_notify *got, size_t want)
{
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t t0 = harness_now_ms();
        size_t have = 0, n;
        kvd_notify extra;

        while (have < want) {
                ck_assert_msg(poll(&pfd, 1, harness_wait_ms()) == 1 &&
                                      harness_now_ms() - t0 < (uint64_t)harness_wait_ms(),
                              "%zu of %zu notifications came", have, want);
                expect_ok(c, kvd_get_notifies(c, got + have, want - have, &n));
                have += n;
        }
        ck_assert_int_eq(poll(&pfd, 1, 0), 0);
        expect_ok(c, kvd_get_notifies(c, &extra, 1, &n));
        ck_assert_uint_eq(n, 0);
}

void notify_check(const kvd_notify *n, kvd_notify_kind kind, uint64_t from, const char *msg)
{
        ck_assert_int_eq(n->kind, kind);
        ck_assert_uint_eq(n->src_cluster_id, from);
        ck_assert_uint_eq(n->len, strlen(msg));
        ck_assert_mem_eq(n->data, msg, strlen(msg));
}

void check_unexposed_caches(kvd_client *a, kvd_client *b, link_fn link, void *userdata)
{
        static const uint64_t sb[] = {3, 0}, db[] = {1, 2};
        kvd_cache_key kopen = kvd_key_blocks(A_ID, 1), khidden = kvd_key_blocks(A_ID, 2);
        kvd_cache_key klate = kvd_key_blocks(A_ID, 3);
        TCache open, hidden, late, dst;
        TCopies cp = {};

        expect_ok(a,
                  tcache_register(&open, a, true, 2, 4, 1024, 0x11, &kopen, 1, KVD_REMOTE_DEFAULT));
        expect_ok(a,
                  tcache_register(&hidden, a, true, 2, 4, 1024, 0x12, &khidden, 1, KVD_REMOTE_NO));
        expect_ok(b, tcache_register(&dst, b, true, 2, 4, 1024, 0x13, NULL, 0, KVD_REMOTE_DEFAULT));
        link(userdata);
        expect_ok(a,
                  tcache_register(&late, a, true, 2, 4, 1024, 0x14, &klate, 1, KVD_REMOTE_DEFAULT));

        /* Both exist: not "no cache" (which reads as "not registered yet, retry"). */
        expect_status(b, kvd_pull_blocks(b, &khidden, dst.id, sb, 2, db, 2, NULL),
                      KVD_E_PERMISSION_DENIED,
                      "is not remote-accessible (registered with "
                      "KVD_REMOTE_NO)");
        expect_status(b, kvd_push_blocks(b, &khidden, dst.id, db, 2, sb, 2, NULL),
                      KVD_E_PERMISSION_DENIED, "(registered with KVD_REMOTE_NO)");
        expect_status(b, kvd_pull_blocks(b, &klate, dst.id, sb, 2, db, 2, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        expect_status(b, kvd_push_blocks(b, &klate, dst.id, db, 2, sb, 2, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        tcache_verify_untouched(&dst);
        tcache_verify_untouched(&hidden);
        tcache_verify_untouched(&late);

        /* What the link does reach moves. */
        expect_ok(b, kvd_pull_blocks(b, &kopen, dst.id, sb, 2, db, 2, NULL));
        tcopies_blocks(&cp, &open, &dst, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&dst, &cp);
        tcopies_free(&cp);
}

void check_pool_caches_after_link(kvd_client *a, kvd_client *b, link_fn link, void *userdata)
{
        static const uint64_t sb[] = {6, 1, 2}, db[] = {0, 5, 3};
        static const uint64_t pb[] = {7, 4}, ptb[] = {2, 6};
        kvd_cache_key kreq = kvd_key_req(A_ID, 4242, 0), kblk = kvd_key_blocks(A_ID, 42);
        kvd_cache_key kid;
        TCache dcon, dblk, bsrc, guard0, creq, cid, blk, guard1;
        TCopies cpc = {}, cpb = {}, cpp = {};
        int64_t used0;

        expect_ok(b,
                  tcache_register(&dcon, b, false, 2, 2, 4096, 0x21, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(b,
                  tcache_register(&dblk, b, true, 2, 8, 4096, 0x22, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(b,
                  tcache_register(&bsrc, b, true, 2, 8, 4096, 0x23, NULL, 0, KVD_REMOTE_DEFAULT));
        used0 = client_status_int(a, "pool/used");
        link(userdata);

        /* LLM-DataDist's flow: link once, then allocate per request and pull by key. */
        expect_ok(a, tcache_allocate(&guard0, a, 1, 1, 4096, 0x24, NULL, 0));
        expect_ok(a, tcache_allocate(&creq, a, 2, 1, 4096, 0x25, &kreq, 1));
        expect_ok(a, tcache_allocate(&cid, a, 2, 2, 4096, 0x26, NULL, 0));
        expect_ok(a, tcache_allocate_blocks(&blk, a, 2, 8, 4096, 0x27, &kblk));
        expect_ok(a, tcache_allocate(&guard1, a, 1, 1, 4096, 0x28, NULL, 0));

        expect_ok(b, kvd_pull_cache(b, &kreq, dcon.id, 1, -1, NULL));
        tcopies_item(&cpc, &creq, &dcon, ALL, ALL, 2, 0, 1, -1);
        tcache_verify(&dcon, &cpc);
        /* The pull ended the key: a second pull by it finds nothing... */
        expect_status(b, kvd_pull_cache(b, &kreq, dcon.id, 0, -1, NULL), KVD_E_CACHE_NOT_EXIST,
                      NULL);
        tcache_verify(&dcon, &cpc);
        /* ... while the id still holds the cache, and releases it. */
        ck_assert_int_gt(client_status_int(a, "pool/used"), used0);
        expect_ok(a, kvd_deallocate_cache(a, creq.id));

        kid = kvd_key_id_index(A_ID, cid.id, 1);
        expect_ok(b, kvd_pull_cache(b, &kid, dcon.id, 0, -1, NULL));
        tcopies_item(&cpc, &cid, &dcon, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&dcon, &cpc);

        expect_ok(b, kvd_pull_blocks(b, &kblk, dblk.id, sb, 3, db, 3, NULL));
        tcopies_blocks(&cpb, &blk, &dblk, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&dblk, &cpb);
        expect_ok(b, kvd_push_blocks(b, &kblk, bsrc.id, pb, 2, ptb, 2, NULL));
        tcopies_blocks(&cpp, &bsrc, &blk, ALL, ALL, 2, pb, ptb, 2);
        tcache_verify(&blk, &cpp);
        tcache_verify_untouched(&guard0);
        tcache_verify_untouched(&guard1);
        tcache_verify_untouched(&cid);
        tcache_verify_untouched(&bsrc);

        expect_ok(a, kvd_deallocate_cache(a, guard0.id));
        expect_ok(a, kvd_deallocate_cache(a, cid.id));
        expect_ok(a, kvd_deallocate_cache(a, blk.id));
        expect_ok(a, kvd_deallocate_cache(a, guard1.id));
        ck_assert_int_eq(client_status_int(a, "pool/used"), used0);

        /* Pages handed back and carved again: what the owner writes now is what moves (the
         * pool's pages stay the ones its RDMA registration covers). */
        {
                static const uint64_t rb[] = {0, 7}, rdb[] = {1, 2};
                kvd_cache_key kagain = kvd_key_blocks(A_ID, 43);
                TCache again;

                expect_ok(a, tcache_allocate_blocks(&again, a, 2, 8, 4096, 0x29, &kagain));
                expect_ok(b, kvd_pull_blocks(b, &kagain, dblk.id, rb, 2, rdb, 2, NULL));
                tcopies_blocks(&cpb, &again, &dblk, ALL, ALL, 2, rb, rdb, 2);
                tcache_verify(&dblk, &cpb);
                expect_ok(a, kvd_deallocate_cache(a, again.id));
        }
        tcopies_free(&cpc);
        tcopies_free(&cpb);
        tcopies_free(&cpp);
}

void check_odd_tensor_counts(kvd_client *a, kvd_client *b, link_fn link, void *userdata)
{
        static const uint32_t counts[] = {1, 3};
        static const uint64_t sb[] = {5, 0, 3}, db[] = {1, 6, 2}, ib[] = {4, 7};
        kvd_transfer_opts init = KVD_TRANSFER_OPTS_INIT, o;
        TCache sblk[2], tblk[2], scon[2], tcon[2], dblk[2], dcon[2];
        kvd_cache_key kblk[2], ktblk[2], kcon[2];

        for (int i = 0; i < 2; i++) {
                uint32_t n = counts[i];

                kblk[i] = kvd_key_blocks(A_ID, 100 + n);
                ktblk[i] = kvd_key_blocks(A_ID, 200 + n);
                kcon[i] = kvd_key_req(A_ID, 300 + n, 0);
                expect_ok(a, tcache_register(&sblk[i], a, true, n, 8, 512, 0x30 + n, &kblk[i], 1,
                                             KVD_REMOTE_DEFAULT));
                expect_ok(a, tcache_register(&tblk[i], a, true, n, 8, 512, 0x40 + n, &ktblk[i], 1,
                                             KVD_REMOTE_DEFAULT));
                expect_ok(a, tcache_register(&scon[i], a, false, n, 2, 1024, 0x50 + n, &kcon[i], 1,
                                             KVD_REMOTE_DEFAULT));
                expect_ok(a, tcache_register(&tcon[i], a, false, n, 2, 1024, 0x60 + n, NULL, 0,
                                             KVD_REMOTE_DEFAULT));
                expect_ok(b, tcache_register(&dblk[i], b, true, n, 8, 512, 0x70 + n, NULL, 0,
                                             KVD_REMOTE_DEFAULT));
                expect_ok(b, tcache_register(&dcon[i], b, false, n, 2, 1024, 0x80 + n, NULL, 0,
                                             KVD_REMOTE_DEFAULT));
        }
        link(userdata);

        for (int i = 0; i < 2; i++) {
                kvd_cache_key kid = kvd_key_id_index(A_ID, tcon[i].id, 1);
                TCopies cpt = {}, cptc = {}, cpd = {}, cpdc = {};

                /* Pushes first, from B's caches while they hold their own pattern. */
                expect_ok(b, kvd_push_blocks(b, &ktblk[i], dblk[i].id, db, 3, sb, 3, NULL));
                tcopies_blocks(&cpt, &dblk[i], &tblk[i], ALL, ALL, 2, db, sb, 3);
                tcache_verify(&tblk[i], &cpt);
                expect_ok(b, kvd_push_cache(b, &kid, dcon[i].id, 0, -1, &init));
                tcopies_item(&cptc, &dcon[i], &tcon[i], ALL, ALL, 2, 0, 1, -1);
                tcache_verify(&tcon[i], &cptc);

                expect_ok(b, kvd_pull_blocks(b, &kblk[i], dblk[i].id, sb, 3, db, 3, &init));
                tcopies_blocks(&cpd, &sblk[i], &dblk[i], ALL, ALL, 2, sb, db, 3);
                expect_ok(b, kvd_pull_blocks(b, &kcon[i], dblk[i].id, NULL, 0, ib, 2, NULL));
                tcopies_item_to_blocks(&cpd, &scon[i], &dblk[i], ALL, ALL, 2, 0, ib, 2);
                tcache_verify(&dblk[i], &cpd);
                expect_ok(b, kvd_pull_cache(b, &kcon[i], dcon[i].id, 1, -1, NULL));
                tcopies_item(&cpdc, &scon[i], &dcon[i], ALL, ALL, 2, 0, 1, -1);
                tcache_verify(&dcon[i], &cpdc);
                tcache_verify_untouched(&sblk[i]);
                tcache_verify_untouched(&scon[i]);

                tcopies_free(&cpt);
                tcopies_free(&cptc);
                tcopies_free(&cpd);
                tcopies_free(&cpdc);
        }

        /* A layer range counts layers: 2 tensors each do not make a 3-tensor cache... */
        o = opts_layers(LAYERS(1, 1), LAYERS(1, 1), 0);
        expect_status(b, kvd_pull_blocks(b, &kblk[1], dblk[1].id, sb, 1, db, 1, &o),
                      KVD_E_PARAM_INVALID,
                      "tensor_num_per_layer=2 does not divide "
                      "num_tensors=3");
        /* ... one tensor each does: layers 1 and 2 of the source into 0 and 1. */
        {
                static const uint64_t s1[] = {2, 7}, d1[] = {0, 3};
                TCopies cp = {};
                TCache lr;

                expect_ok(b, tcache_register(&lr, b, true, 3, 8, 512, 0x90, NULL, 0,
                                             KVD_REMOTE_DEFAULT));
                o = opts_layers(LAYERS(1, 2), LAYERS(0, 1), 1);
                expect_ok(b, kvd_pull_blocks(b, &kblk[1], lr.id, s1, 2, d1, 2, &o));
                tcopies_blocks(&cp, &sblk[1], &lr, LAYERS(1, 2), LAYERS(0, 1), 1, s1, d1, 2);
                tcache_verify(&lr, &cp);
                tcopies_free(&cp);
        }
}

void check_two_way(kvd_client *a, kvd_client *b, link_fn link, void *userdata)
{
        static const uint64_t sb[] = {5, 0, 7, 6}, db[] = {1, 6, 2, 3};
        static const uint64_t psb[] = {2, 3, 4}, pdb[] = {0, 1, 7};
        static const char msg[] = "blocks 0 1 7 are in";
        kvd_cache_key kbsrc = kvd_key_blocks(B_ID, 7), kbdst = kvd_key_blocks(B_ID, 8);
        kvd_cache_key khidden = kvd_key_blocks(B_ID, 9), klate = kvd_key_blocks(B_ID, 10);
        kvd_cache_key kpool = kvd_key_req(B_ID, 4343, 0), kid;
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        TCache bsrc, bdst, bhidden, blate, bpool, asrc, adst, acon;
        TCopies cpa = {}, cpb = {}, cpc = {};
        kvd_notify got[2];
        size_t n = 0;
        uint64_t b8 = 8, b0 = 0;

        /* B exposes what it registered before it linked; A's caches are its own. */
        expect_ok(b,
                  tcache_register(&bsrc, b, true, 2, 8, 4096, 0x41, &kbsrc, 1, KVD_REMOTE_DEFAULT));
        expect_ok(b,
                  tcache_register(&bdst, b, true, 2, 8, 4096, 0x42, &kbdst, 1, KVD_REMOTE_DEFAULT));
        expect_ok(b,
                  tcache_register(&bhidden, b, true, 2, 8, 4096, 0x43, &khidden, 1, KVD_REMOTE_NO));
        expect_ok(a,
                  tcache_register(&asrc, a, true, 2, 8, 4096, 0x44, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(a,
                  tcache_register(&adst, a, true, 2, 8, 4096, 0x45, NULL, 0, KVD_REMOTE_DEFAULT));
        expect_ok(a,
                  tcache_register(&acon, a, false, 2, 2, 4096, 0x46, NULL, 0, KVD_REMOTE_DEFAULT));
        /* B links to A; A made no link and has none of its own. */
        link(userdata);
        expect_ok(b, tcache_register(&blate, b, true, 2, 8, 4096, 0x47, &klate, 1,
                                     KVD_REMOTE_DEFAULT));
        expect_ok(b, tcache_allocate(&bpool, b, 2, 2, 4096, 0x48, &kpool, 1));
        expect_ok(a, kvd_check_link_status(a, B_ID));

        /* The side that was linked to pulls and pushes over the link. */
        expect_ok(a, kvd_pull_blocks(a, &kbsrc, adst.id, sb, 4, db, 4, NULL));
        tcopies_blocks(&cpa, &bsrc, &adst, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&adst, &cpa);
        o.notify = msg;
        o.notify_len = sizeof(msg);
        expect_ok(a, kvd_push_blocks(a, &kbdst, asrc.id, psb, 3, pdb, 3, &o));
        tcopies_blocks(&cpb, &asrc, &bdst, ALL, ALL, 2, psb, pdb, 3);
        tcache_verify(&bdst, &cpb);
        /* The notification follows the last byte, from A. */
        expect_ok(b, kvd_get_notifies(b, got, 2, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(got[0].src_cluster_id, A_ID);
        ck_assert_uint_eq(got[0].len, sizeof(msg));
        ck_assert_mem_eq(got[0].data, msg, sizeof(msg));

        /* Pool caches are reachable through every link, both ways. */
        kid = kvd_key_id_index(B_ID, bpool.id, 1);
        expect_ok(a, kvd_pull_cache(a, &kid, acon.id, 0, -1, NULL));
        tcopies_item(&cpc, &bpool, &acon, ALL, ALL, 2, 1, 0, -1);
        tcache_verify(&acon, &cpc);

        /* What B did not expose at link time is refused, pull and push, and nothing moves. */
        expect_status(a, kvd_pull_blocks(a, &khidden, adst.id, sb, 4, db, 4, NULL),
                      KVD_E_PERMISSION_DENIED, "(registered with KVD_REMOTE_NO)");
        expect_status(a, kvd_push_blocks(a, &khidden, asrc.id, sb, 4, db, 4, NULL),
                      KVD_E_PERMISSION_DENIED, "(registered with KVD_REMOTE_NO)");
        expect_status(a, kvd_pull_blocks(a, &klate, adst.id, sb, 4, db, 4, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        expect_status(a, kvd_push_blocks(a, &klate, asrc.id, sb, 4, db, 4, NULL),
                      KVD_E_PERMISSION_DENIED, "was registered after link");
        /* Blocks past the end of B's cache, either way, are refused before a byte moves. */
        expect_status(a, kvd_pull_blocks(a, &kbsrc, adst.id, &b8, 1, &b0, 1, NULL),
                      KVD_E_PARAM_INVALID, "out of range");
        expect_status(a, kvd_push_blocks(a, &kbdst, asrc.id, &b0, 1, &b8, 1, NULL),
                      KVD_E_PARAM_INVALID, "out of range");
        /* A key naming a cluster that is not at the link's other end. */
        kid = kvd_key_blocks(C_ID, 7);
        expect_status(a, kvd_pull_blocks(a, &kid, adst.id, sb, 1, db, 1, NULL), KVD_E_NOT_YET_LINK,
                      NULL);
        tcache_verify_untouched(&bhidden);
        tcache_verify_untouched(&blate);
        tcache_verify_untouched(&bsrc);
        tcache_verify(&bdst, &cpb);
        tcache_verify(&adst, &cpa);
        tcache_verify_untouched(&asrc);
        tcopies_free(&cpa);
        tcopies_free(&cpb);
        tcopies_free(&cpc);
}

/*
 * Waits (with a generous ceiling) until neither daemon serves a transfer: a pull's serving side
 * lets go when the initiator's word that the bytes landed comes, which may be after the initiator
 * answered its client; an unlink without force is refused as busy until then.
 */
static void wait_served_done(kvd_client *a, kvd_client *b)
{
        for (int i = 0; i < 1000; i++) {
                if (client_status_int(a, "transfers_served_in_flight") == 0 &&
                    client_status_int(b, "transfers_served_in_flight") == 0)
                        return;
                harness_sleep_ms(20);
        }
        ck_abort_msg("a served transfer was still in flight 20 s after its initiator's answer");
}

/* Both directions move one block each (round @round: block round into 7 - round), checked
 * byte for byte. */
static void two_way_moves(kvd_client *a, kvd_client *b, TCache *asrc, TCache *adst, TCache *bsrc,
                          TCache *bdst, TCopies *cpa, TCopies *cpb, uint64_t round)
{
        const uint64_t s[] = {round}, d[] = {7 - round};
        kvd_cache_key ka = kvd_key_blocks(A_ID, 61), kb = kvd_key_blocks(B_ID, 62);

        expect_ok(b, kvd_pull_blocks(b, &ka, bdst->id, s, 1, d, 1, NULL));
        tcopies_blocks(cpb, asrc, bdst, ALL, ALL, 2, s, d, 1);
        tcache_verify(bdst, cpb);
        expect_ok(a, kvd_pull_blocks(a, &kb, adst->id, s, 1, d, 1, NULL));
        tcopies_blocks(cpa, bsrc, adst, ALL, ALL, 2, s, d, 1);
        tcache_verify(adst, cpa);
        wait_served_done(a, b);
}

/* Pulls and pushes either way fail with NOT_YET_LINK. */
static void two_way_refused(kvd_client *a, kvd_client *b, const TCache *asrc, const TCache *adst,
                            const TCache *bsrc, const TCache *bdst)
{
        static const uint64_t s[] = {2}, d[] = {4};
        kvd_cache_key ka = kvd_key_blocks(A_ID, 61), kb = kvd_key_blocks(B_ID, 62);

        expect_status(b, kvd_pull_blocks(b, &ka, bdst->id, s, 1, d, 1, NULL), KVD_E_NOT_YET_LINK,
                      NULL);
        expect_status(b, kvd_push_blocks(b, &ka, bsrc->id, s, 1, d, 1, NULL), KVD_E_NOT_YET_LINK,
                      NULL);
        expect_status(a, kvd_pull_blocks(a, &kb, adst->id, s, 1, d, 1, NULL), KVD_E_NOT_YET_LINK,
                      NULL);
        expect_status(a, kvd_push_blocks(a, &kb, asrc->id, s, 1, d, 1, NULL), KVD_E_NOT_YET_LINK,
                      NULL);
}

/* Waits (with a generous ceiling) until @c no longer sees a working link to @remote. */
static int wait_link_gone(kvd_client *c, uint64_t remote)
{
        int r = KVD_OK;

        for (int i = 0; i < 1000 && (r = kvd_check_link_status(c, remote)) == KVD_OK; i++)
                harness_sleep_ms(20);
        return r;
}

static int unlink_one(kvd_client *c, uint64_t remote, kvd_role role, bool force)
{
        return kvd_unlink_clusters(c, &(kvd_cluster_info){remote, role, NULL, NULL}, 1, 5000, force,
                                   NULL);
}

void check_two_way_unlink(kvd_client *a, kvd_client *b, link_fn link, void *userdata,
                          bool one_daemon)
{
        kvd_cache_key ka = kvd_key_blocks(A_ID, 61), kb = kvd_key_blocks(B_ID, 62);
        TCache asrc, adst, bsrc, bdst;
        TCopies cpa = {}, cpb = {};

        expect_ok(a, tcache_register(&asrc, a, true, 2, 8, 4096, 0x51, &ka, 1, KVD_REMOTE_YES));
        expect_ok(a, tcache_register(&adst, a, true, 2, 8, 4096, 0x52, NULL, 0, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&bsrc, b, true, 2, 8, 4096, 0x53, &kb, 1, KVD_REMOTE_YES));
        expect_ok(b, tcache_register(&bdst, b, true, 2, 8, 4096, 0x54, NULL, 0, KVD_REMOTE_YES));

        /* The linking side unlinks: both directions end, on both sides. */
        link(userdata);
        two_way_moves(a, b, &asrc, &adst, &bsrc, &bdst, &cpa, &cpb, 0);
        expect_ok(b, unlink_one(b, A_ID, KVD_ROLE_PROMPT, false));
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);
        ck_assert_int_eq(kvd_check_link_status(b, A_ID), KVD_E_NOT_YET_LINK);
        ck_assert_int_eq(wait_link_gone(a, B_ID), KVD_E_NOT_YET_LINK);

        /* Linked again; the side that was linked to unlinks. */
        link(userdata);
        two_way_moves(a, b, &asrc, &adst, &bsrc, &bdst, &cpa, &cpb, 1);
        expect_ok(a, unlink_one(a, B_ID, KVD_ROLE_DECODER, false));
        ck_assert_int_eq(kvd_check_link_status(a, B_ID), KVD_E_NOT_YET_LINK);
        ck_assert_int_eq(wait_link_gone(b, A_ID), KVD_E_NOT_YET_LINK);
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);

        /* Linked again (replacing B's end the unlink took down); B unlinks with force. Across
         * daemons only B's end goes, and A's then refuses too: its transfers reach nothing. */
        link(userdata);
        two_way_moves(a, b, &asrc, &adst, &bsrc, &bdst, &cpa, &cpb, 2);
        expect_ok(b, unlink_one(b, A_ID, KVD_ROLE_PROMPT, true));
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);
        /* After a fault both sides call it: A's end, where it is one of its own. */
        expect_status(a, unlink_one(a, B_ID, KVD_ROLE_DECODER, true),
                      one_daemon ? KVD_E_NOT_YET_LINK : KVD_OK, NULL);
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);

        /* Linked again; A unlinks with force. */
        link(userdata);
        two_way_moves(a, b, &asrc, &adst, &bsrc, &bdst, &cpa, &cpb, 3);
        expect_ok(a, unlink_one(a, B_ID, KVD_ROLE_DECODER, true));
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);
        expect_status(b, unlink_one(b, A_ID, KVD_ROLE_PROMPT, true),
                      one_daemon ? KVD_E_NOT_YET_LINK : KVD_OK, NULL);
        two_way_refused(a, b, &asrc, &adst, &bsrc, &bdst);

        /* And once more: a fresh link works both ways. */
        link(userdata);
        two_way_moves(a, b, &asrc, &adst, &bsrc, &bdst, &cpa, &cpb, 4);
        tcache_verify_untouched(&asrc);
        tcache_verify_untouched(&bsrc);
        tcopies_free(&cpa);
        tcopies_free(&cpb);
}
