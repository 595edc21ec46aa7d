/* SPDX-License-Identifier: MIT */
/* Integration test world: one daemon, clusters A and B, links and transfer options. */
#include <check.h>
#include <string.h>

#include "it-cache.h"
#include "it-world.h"

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
        kvd_cluster_info info = { remote, role, NULL, NULL };
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
