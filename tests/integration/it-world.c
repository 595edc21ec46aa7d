/* SPDX-License-Identifier: MIT */
/* Integration test world: one daemon, clusters A and B, links and transfer options. */
#include <check.h>
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
