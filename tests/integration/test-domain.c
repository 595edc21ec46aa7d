/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, comm domains forming: two, three and four daemons on loopback; the domain
 * becomes OK on every member, its links carry pulls and pushes like link_clusters links; members
 * that never call link, rank tables that disagree, the limits (512 domains, 16 set-ups with the
 * rest queued in order), and many domains formed concurrently in every order.
 */
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

static const char *const short_link_time[] = {"--link-total-time", "1500", NULL};

/* Nodes P, D (and E, F) with one member cluster each: 1001, 2002, 3003, 4004. */
typedef struct Net {
        Node nodes[4];
        DomMember m[4];
        unsigned n;
        char table[RANK_TABLE_MAX];
} Net;

static void net_start(Net *w, unsigned n, const char *const *extra)
{
        memset(w, 0, sizeof(*w));
        w->n = n;
        for (unsigned i = 0; i < n; i++) {
                node_start_full(&w->nodes[i], NULL, NULL, NULL, extra);
                w->m[i] = (DomMember){&w->nodes[i], 1001 * (i + 1), 0, NULL, 0};
                dom_member_attach(&w->m[i]);
        }
        rank_table_build(w->table, sizeof(w->table), w->m, n, false);
}

static void net_stop(Net *w)
{
        for (unsigned i = 0; i < w->n; i++)
                if (w->m[i].client)
                        expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned i = 0; i < w->n; i++)
                node_stop(&w->nodes[i]);
}

/* Two daemons form a domain; its links carry a pull and a push, byte-exact. */
START_TEST(test_form_two)
{
        static const uint64_t sb[] = {3, 9, 4, 0}, db[] = {7, 1, 2, 30};
        kvd_cache_key key_a = kvd_key_blocks(1001, 0), key_b = kvd_key_blocks(2002, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        TCache ca, cb;
        TCopies cp = {}, cpa = {};
        kvd_mem_status st;
        char *s;
        Net w;

        net_start(&w, 2, NULL);
        /* Memory is registered before the link that exposes it. */
        expect_ok(w.m[0].client, tcache_register(&ca, w.m[0].client, true, 4, 32, 2048, 11, &key_a,
                                                 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cb, w.m[1].client, true, 4, 32, 2048, 22, &key_b,
                                                 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[0].client, dom_link(w.m, 2, 0, "prefill-decode", w.table));
        expect_ok(w.m[0].client, kvd_domain_status(w.m[0].client, w.m[0].comm_id, &st));
        ck_assert_int_eq(st, KVD_MEM_STATUS_PREPARING);
        /* Before OK nothing goes through, and the detail says the domain is not ready. */
        expect_status(w.m[0].client,
                      kvd_pull_blocks(w.m[0].client, &key_b, ca.id, sb, 4, db, 4, &o),
                      KVD_E_NOT_YET_LINK, "(prefill-decode) is not ready (PREPARING)");
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "kvd_domain_status()") &&
                              !strstr(kvd_last_error(w.m[0].client), "kvd_link_clusters"),
                      "%s", kvd_last_error(w.m[0].client));
        expect_status(w.m[0].client,
                      kvd_push_blocks(w.m[0].client, &key_b, ca.id, sb, 4, db, 4, &o),
                      KVD_E_NOT_YET_LINK, "(prefill-decode) is not ready (PREPARING)");
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "prefill-decode", w.table));
        dom_wait_ok(w.m, 2);

        s = dom_status_str(&w.nodes[0], "domains/0/state");
        ck_assert_str_eq(s, "ok");
        free(s);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/ring/threads"), 2);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/ring/notifies"), 4);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/resources/mesh/channels"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "inbound_links"), 1);
        /* The domain's links run over the transport kvd_link_clusters() would pick (RDMA in the
         * soft-RoCE VM), and so do its channels. */
        for (unsigned i = 0; i < 2; i++) {
                s = dom_status_str(&w.nodes[i], "links/0/transport");
                ck_assert_str_eq(s, it_transport());
                free(s);
                s = dom_status_str(&w.nodes[i], "links/0/transport_reason");
                ck_assert_msg(strstr(s, "comm domain, "), "%s", s);
                free(s);
                dom_check_channels(&w.nodes[i], false);
        }

        /* B pulls A's blocks, A pushes into B's: the ordinary paths over the domain's links. */
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 4, db, 4, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, db, 4);
        tcache_verify(&cb, &cp);
        expect_ok(w.m[0].client, kvd_push_blocks(w.m[0].client, &key_b, ca.id, db, 4, sb, 4, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, db, sb, 4);
        tcache_verify(&cb, &cp);
        tcache_verify(&ca, &cpa);

        /* Memory registered after the link is not exposed by it. */
        {
                kvd_cache_key late_key = kvd_key_blocks(2002, 9);
                TCache late;

                expect_ok(w.m[1].client, tcache_register(&late, w.m[1].client, true, 4, 32, 2048,
                                                         33, &late_key, 1, KVD_REMOTE_DEFAULT));
                expect_status(w.m[0].client,
                              kvd_pull_blocks(w.m[0].client, &late_key, ca.id, sb, 4, db, 4, &o),
                              KVD_E_PERMISSION_DENIED, "was registered after link");
                expect_status(w.m[1].client,
                              tcache_register(&late, w.m[1].client, true, 4, 32, 2048, 34, NULL, 0,
                                              KVD_REMOTE_YES),
                              KVD_E_PARAM_INVALID, "after a link exists");
        }

        /* kvdistctl shows the domain, its members and resources. */
        {
                const char *argv[] = {getenv("KVDISTCTL"), "--socket", w.nodes[0].d.socket_path,
                                      "domains", NULL};
                char *out = NULL, chan[16];

                ck_assert_ptr_nonnull(argv[0]);
                ck_assert_int_eq(harness_run(argv, &out, NULL), 0);
                (void)snprintf(chan, sizeof(chan), "1:%s", it_transport());
                ck_assert_msg(strstr(out, "prefill-decode") && strstr(out, " ok ") &&
                                      strstr(out, "ring 2/4/2 mesh 1/2/1") &&
                                      strstr(out, "0:1001 1:2002@") && strstr(out, chan) &&
                                      strstr(out, "CHANNELS"),
                              "%s", out);
                free(out);
        }

        /* Unlinking one member fails the domain on the other. */
        expect_ok(w.m[0].client, kvd_domain_unlink(w.m[0].client, w.m[0].comm_id));
        ck_assert_int_eq(dom_wait_failed(&w.m[1], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "rank 0"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "unlinked"));
        expect_status(w.m[1].client,
                      kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 4, db, 4, &o),
                      KVD_E_NOT_YET_LINK, "(prefill-decode) failed (rank 0");
        expect_ok(w.m[1].client, kvd_domain_unlink(w.m[1].client, w.m[1].comm_id));
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 0);

        /* And it forms again under the same name. */
        dom_link_all(w.m, 2, "prefill-decode", w.table);
        dom_wait_ok(w.m, 2);
        tcopies_free(&cp);
        net_stop(&w);
}
END_TEST

/* A member that never calls link: FAILED after link_total_time, naming it. */
START_TEST(test_member_never_links)
{
        kvd_mem_status st;
        uint64_t old;
        Net w;

        net_start(&w, 3, short_link_time);
        expect_ok(w.m[0].client, dom_link(w.m, 3, 0, "lonely", w.table));
        expect_ok(w.m[1].client, dom_link(w.m, 3, 1, "lonely", w.table));
        st = dom_wait(&w.m[0], harness_wait_ms());
        ck_assert_int_eq(st, KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client), "link_total_time"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client), "rank 2 (cluster 3003"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[0].client), "did not call link"));
        ck_assert_int_eq(dom_wait(&w.m[1], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        /* Linking the name again makes a new domain; the failed one stays FAILED under its
         * comm_id until it is unlinked. The other daemons' failed domains answer the new one
         * "not yet" (their members did not link again): it waits, and fails only when
         * link_total_time passes, naming them, never refused by their failure. */
        old = w.m[0].comm_id;
        expect_ok(w.m[0].client, dom_link(w.m, 3, 0, "lonely", w.table));
        ck_assert_uint_ne(w.m[0].comm_id, old);
        expect_ok(w.m[0].client, kvd_domain_status(w.m[0].client, old, &st));
        ck_assert_int_eq(st, KVD_MEM_STATUS_FAILED);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 2);
        ck_assert_int_eq(dom_wait(&w.m[0], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "link_total_time") &&
                              strstr(kvd_last_error(w.m[0].client), "rank 1 (cluster 2002") &&
                              !strstr(kvd_last_error(w.m[0].client), "refused"),
                      "%s", kvd_last_error(w.m[0].client));
        expect_ok(w.m[0].client, kvd_domain_unlink(w.m[0].client, w.m[0].comm_id));
        expect_ok(w.m[0].client, kvd_domain_unlink(w.m[0].client, old));
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 0);
        net_stop(&w);
}
END_TEST

/* Members whose rank tables differ: both FAILED, the message says what differs. */
START_TEST(test_rank_tables_disagree)
{
        char other[RANK_TABLE_MAX];
        DomMember swapped[2];
        Net w;

        net_start(&w, 2, NULL);
        /* The same daemons, but B's table gives rank 0 device 7. */
        swapped[0] = w.m[0];
        swapped[1] = w.m[1];
        swapped[0].device_id = 7;
        rank_table_build(other, sizeof(other), swapped, 2, false);
        expect_ok(w.m[0].client, dom_link(w.m, 2, 0, "disagree", w.table));
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "disagree", other));
        /* kvd_last_error() is per thread: look right after each query. */
        ck_assert_int_eq(dom_wait(&w.m[0], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "rank tables disagree"), "%s",
                      kvd_last_error(w.m[0].client));
        ck_assert_int_eq(dom_wait(&w.m[1], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "rank tables disagree"));
        ck_assert_ptr_nonnull(strstr(kvd_last_error(w.m[1].client), "device 7"));
        net_stop(&w);
}
END_TEST

/* Every argument rule of link, each refused with a status and a message that names it. */
START_TEST(test_link_rules)
{
        char table[RANK_TABLE_MAX], name[200];
        kvd_cluster_rank info[5];
        kvd_client *a;
        uint64_t id;
        Net w;

        net_start(&w, 2, NULL);
        a = w.m[0].client;
        for (unsigned r = 0; r < 5; r++)
                info[r] = (kvd_cluster_rank){1001 * (r + 1), r};
        expect_status(a, kvd_domain_link(a, "", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "comm_name is empty");
        memset(name, 'n', 128);
        name[128] = '\0';
        expect_status(a, kvd_domain_link(a, name, info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "at most 127");
        name[127] = '\0';
        expect_status(a, kvd_domain_link(a, "one", info, 1, w.table, &id), KVD_E_PARAM_INVALID,
                      "2..4");
        expect_status(a, kvd_domain_link(a, "five", info, 5, w.table, &id), KVD_E_PARAM_INVALID,
                      "2..4");
        info[1].cluster_id = 1001;
        expect_status(a, kvd_domain_link(a, "dup", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "cluster 1001 appears twice");
        /* Any order of ranks (the seed passes a dict), but each rank once and no gap. */
        info[0] = (kvd_cluster_rank){1001, 0};
        info[1] = (kvd_cluster_rank){2002, 0};
        expect_status(a, kvd_domain_link(a, "dup-rank", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "rank 0 appears twice in cluster_rank_info (clusters 1001 and 2002)");
        info[1] = (kvd_cluster_rank){2002, 2};
        expect_status(a, kvd_domain_link(a, "gap", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "gives cluster 2002 rank 2; the ranks of 2 members are 0..1, each once");
        info[0] = (kvd_cluster_rank){2002, 1};
        info[1] = (kvd_cluster_rank){1001, 7};
        expect_status(a, kvd_domain_link(a, "gap", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "gives cluster 1001 rank 7");
        info[0] = (kvd_cluster_rank){5005, 0};
        info[1] = (kvd_cluster_rank){2002, 1};
        expect_status(a, kvd_domain_link(a, "who", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "calling cluster 1001 is not in cluster_rank_info");
        info[0] = (kvd_cluster_rank){1001, 0};

        /* The rank table. */
        expect_status(a, kvd_domain_link(a, "t", info, 2, "{\"server_count\": \"1\"", &id),
                      KVD_E_PARAM_INVALID, "rank_table: line 1");
        expect_status(a,
                      kvd_domain_link(a, "t", info, 2,
                                      "{\"server_count\": \"1\", \"server_list\": []}", &id),
                      KVD_E_PARAM_INVALID, "\"version\" is missing");
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"3\", \"server_list\": "
                       "[{\"server_id\": \"a\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"0\"}]}]}",
                       w.nodes[0].peer_addr);
        expect_status(a, kvd_domain_link(a, "t", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "server_count: 3, but server_list has 1 entries");
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": "
                       "[{\"server_id\": \"a\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"0\"}]}, {\"server_id\": \"b\", "
                       "\"device\": [{\"device_id\": \"0\", \"device_ip\": \"x.x.x.x\", "
                       "\"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr);
        expect_status(a, kvd_domain_link(a, "t", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "server_list[1].device[0].device_ip: \"x.x.x.x\" is not a numeric address");
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": "
                       "[{\"server_id\": \"a\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"1\"}]}, {\"server_id\": \"b\", "
                       "\"device\": [{\"device_id\": \"0\", \"device_ip\": \"%s\", "
                       "\"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        expect_status(a, kvd_domain_link(a, "t", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "rank_id 1 appears twice");
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": "
                       "[{\"server_id\": \"a\", \"device\": [{\"device_id\": \"3\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"0\"}]}, {\"server_id\": \"b\", "
                       "\"device\": [{\"device_id\": \"0\", \"device_ip\": \"%s\", "
                       "\"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        expect_status(a, kvd_domain_link(a, "t", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "initialised with device_id 0");
        /* Rank 0 must be this daemon: swap the addresses. */
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": "
                       "[{\"server_id\": \"a\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"1\"}]}, {\"server_id\": \"b\", "
                       "\"device\": [{\"device_id\": \"0\", \"device_ip\": \"%s\", "
                       "\"rank_id\": \"0\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        expect_status(a, kvd_domain_link(a, "t", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "is not where this kvdistd accepts peers");

        /* One name, one table per daemon; and once per member. */
        expect_ok(a, kvd_domain_link(a, "named", info, 2, w.table, &id));
        info[1].cluster_id = 7007;
        expect_status(a, kvd_domain_link(a, "named", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "is in use on this daemon");
        info[1].cluster_id = 2002;
        expect_status(a, kvd_domain_link(a, "named", info, 2, w.table, &id), KVD_E_ALREADY_LINK,
                      "rank 0 of comm domain");
        expect_status(a, kvd_domain_unlink(a, id + 1000), KVD_E_PARAM_INVALID, "no comm domain");
        expect_status(w.m[1].client, kvd_domain_unlink(w.m[1].client, id), KVD_E_PARAM_INVALID,
                      "no comm domain");
        expect_ok(a, kvd_domain_unlink(a, id));

        /* Members that list the ranks in different orders form one domain, ranks as given. */
        info[0] = (kvd_cluster_rank){2002, 1};
        info[1] = (kvd_cluster_rank){1001, 0};
        expect_ok(a, kvd_domain_link(a, "any-order", info, 2, w.table, &w.m[0].comm_id));
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "any-order", w.table));
        dom_wait_ok(w.m, 2);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/members/0/cluster_id"), 1001);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/0/members/1/cluster_id"), 2002);
        ck_assert_int_eq(dom_status_int(&w.nodes[1], "domains/0/members/0/cluster_id"), 1001);
        net_stop(&w);
}
END_TEST

/* Writes a config file with @json into @path (a mkstemp() template). */
static void write_config(char *path, const char *json)
{
        int fd = mkstemp(path);

        ck_assert_msg(fd >= 0, "mkstemp: %m");
        ck_assert_int_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
        close(fd);
}

/* The detail names why the device cannot do RDMA: it does not exist (or RDMA is not built). */
static bool names_missing_device(const char *s)
{
        return strstr(s, "kvdist-test-none") || strstr(s, "without libibverbs");
}

/*
 * A domain chooses its transport as kvd_link_clusters() does, without RDMA hardware: a device
 * configured for rdma whose RDMA device does not exist refuses kvd_domain_link() at once, saying
 * why; configured for auto, the domain forms over TCP and its links and channels say why.
 */
START_TEST(test_rdma_device_missing)
{
        static const char rdma_cfg[] = "{\"devices\": [{\"device_id\": 0, \"transport\": "
                                       "\"rdma\", \"rdma_device\": \"kvdist-test-none\"}]}\n";
        static const char auto_cfg[] = "{\"devices\": [{\"device_id\": 0, \"transport\": "
                                       "\"auto\", \"rdma_device\": \"kvdist-test-none\"}]}\n";
        static const char null_cfg[] = "{\"devices\": [{\"device_id\": 0, \"transport\": "
                                       "\"null\"}]}\n";
        char path[] = "/tmp/kvdist-it-domain-cfg-XXXXXX";
        const char *extra[] = {"--config", path, NULL};
        kvd_cluster_rank info[2] = {{1001, 0}, {2002, 1}};
        uint64_t id = 0;
        int ret;
        char *s;
        Net w;

        write_config(path, rdma_cfg);
        net_start(&w, 2, extra);
        ck_assert_int_eq(kvd_domain_link(w.m[0].client, "rdma", info, 2, w.table, &id),
                         KVD_E_FEATURE_NOT_ENABLED);
        s = (char *)kvd_last_error(w.m[0].client);
        ck_assert_msg(strstr(s, "configured for transport rdma") && names_missing_device(s), "%s",
                      s);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 0);
        net_stop(&w);
        ck_assert_int_eq(unlink(path), 0);

        /* The null transport keeps a device off the network: no link, no domain, and why. */
        (void)snprintf(path, sizeof(path), "/tmp/kvdist-it-domain-cfg-XXXXXX");
        write_config(path, null_cfg);
        net_start(&w, 2, extra);
        ck_assert_int_eq(kvd_domain_link(w.m[0].client, "null", info, 2, w.table, &id),
                         KVD_E_FEATURE_NOT_ENABLED);
        s = (char *)kvd_last_error(w.m[0].client);
        ck_assert_msg(strstr(s, "configured for transport null, but: the null transport moves "
                                "nothing"),
                      "%s", s);
        expect_ok(w.m[1].client,
                  kvd_switch_role(w.m[1].client, KVD_ROLE_MIX,
                                  &(kvd_option){"listen_ip_info", w.nodes[1].peer_addr}, 1));
        ck_assert_int_ne(link_at(w.m[0].client, 2002, w.nodes[1].peer_addr, 0, &ret), KVD_OK);
        ck_assert_int_eq(ret, KVD_E_FEATURE_NOT_ENABLED);
        ck_assert_msg(strstr(kvd_last_error(w.m[0].client), "transport null"), "%s",
                      kvd_last_error(w.m[0].client));
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "links"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 0);
        net_stop(&w);
        ck_assert_int_eq(unlink(path), 0);

        (void)snprintf(path, sizeof(path), "/tmp/kvdist-it-domain-cfg-XXXXXX");
        write_config(path, auto_cfg);
        net_start(&w, 2, extra);
        dom_link_all(w.m, 2, "auto", w.table);
        dom_wait_ok(w.m, 2);
        for (unsigned i = 0; i < 2; i++) {
                s = dom_status_str(&w.nodes[i], "links/0/transport");
                ck_assert_str_eq(s, "tcp");
                free(s);
                s = dom_status_str(&w.nodes[i], "links/0/transport_reason");
                ck_assert_msg(strstr(s, "comm domain, auto: ") && names_missing_device(s), "%s", s);
                free(s);
                s = dom_status_str(&w.nodes[i], "domains/0/channels/0/transport");
                ck_assert_str_eq(s, "tcp");
                free(s);
                s = dom_status_str(&w.nodes[i], "domains/0/channels/0/transport_reason");
                ck_assert_msg(names_missing_device(s), "%s", s);
                free(s);
        }
        net_stop(&w);
        ck_assert_int_eq(unlink(path), 0);
}
END_TEST

/* local_comm_res: checked at init against the client's device and this daemon; kvd_link's
 * table must agree with it. */
START_TEST(test_local_comm_res)
{
        char res[512], table[RANK_TABLE_MAX];
        kvd_option opts[3];
        kvd_cluster_rank info[2] = {{1001, 0}, {2002, 1}};
        kvd_client *c = NULL;
        uint64_t id;
        Net w;

        net_start(&w, 2, NULL);
        expect_ok(w.m[0].client, kvd_client_finalize(w.m[0].client));
        w.m[0].client = NULL;
        opts[0] = (kvd_option){"socket_path", w.nodes[0].d.socket_path};
        opts[1] = (kvd_option){"device_id", "0"};
        opts[2] = (kvd_option){"local_comm_res", res};
        (void)snprintf(res, sizeof(res),
                       "{\"server_list\": [{\"server_id\": \"mine\", \"device\": "
                       "[{\"device_id\": \"1\", \"device_ip\": \"%s\"}]}]}",
                       w.nodes[0].peer_addr);
        ck_assert_int_eq(kvd_client_init(1001, KVD_ROLE_MIX, opts, 3, &c), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "device_id 1"));
        (void)snprintf(res, sizeof(res),
                       "{\"server_list\": [{\"server_id\": \"mine\", \"device\": "
                       "[{\"device_id\": \"0\", \"device_ip\": \"10.9.9.9\"}]}]}");
        ck_assert_int_eq(kvd_client_init(1001, KVD_ROLE_MIX, opts, 3, &c), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "is not where this kvdistd"));
        (void)snprintf(res, sizeof(res),
                       "{\"server_list\": [{\"server_id\": \"mine\", \"device\": "
                       "[{\"device_id\": \"0\", \"device_ip\": \"%s\", \"rank_id\": \"0\"}]}]}",
                       w.nodes[0].peer_addr);
        ck_assert_int_eq(kvd_client_init(1001, KVD_ROLE_MIX, opts, 3, &c), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "not in local_comm_res"));
        (void)snprintf(res, sizeof(res),
                       "{\"server_list\": [{\"server_id\": \"mine\", \"device\": "
                       "[{\"device_id\": \"0\", \"device_ip\": \"%s\"}]}]}",
                       w.nodes[0].peer_addr);
        ck_assert_int_eq(kvd_client_init(1001, KVD_ROLE_MIX, opts, 3, &c), KVD_OK);
        w.m[0].client = c;
        /* The generated table names server "node-ADDR", not "mine". */
        expect_status(c, kvd_domain_link(c, "res", info, 2, w.table, &id), KVD_E_PARAM_INVALID,
                      "local_comm_res says server mine");
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": "
                       "[{\"server_id\": \"mine\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"0\"}]}, {\"server_id\": \"b\", "
                       "\"device\": [{\"device_id\": \"0\", \"device_ip\": \"%s\", "
                       "\"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        expect_ok(c, kvd_domain_link(c, "res", info, 2, table, &w.m[0].comm_id));
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "res", table));
        dom_wait_ok(w.m, 2);
        net_stop(&w);
}
END_TEST

/*
 * The "1.2" form the LLM-DataDist samples build (pull_cache_sample.py): each server's host_ip
 * names its kvdistd and each device_ip is the NPU's own address (here addresses of no host,
 * which kvdist must not dial); super_pod_list is checked and ignored. The domain forms and
 * carries a pull, and a local_comm_res in the same form agrees with the table.
 */
START_TEST(test_form_v12)
{
        static const uint64_t sb[] = {1, 3, 0}, db[] = {6, 2, 7};
        kvd_cache_key key_a = kvd_key_blocks(1001, 0);
        kvd_cluster_rank info[2] = {{1001, 0}, {2002, 1}};
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        char table[RANK_TABLE_MAX], res[512];
        kvd_option opts[3];
        kvd_client *c = NULL;
        TCache ca, cb;
        TCopies cp = {};
        uint64_t id;
        Net w;

        net_start(&w, 2, NULL);
        expect_ok(w.m[0].client, kvd_client_finalize(w.m[0].client));
        w.m[0].client = NULL;
        opts[0] = (kvd_option){"socket_path", w.nodes[0].d.socket_path};
        opts[1] = (kvd_option){"device_id", "0"};
        opts[2] = (kvd_option){"local_comm_res", res};
        (void)snprintf(res, sizeof(res),
                       "{\"version\": \"1.2\", \"server_list\": [{\"server_id\": \"1\", "
                       "\"host_ip\": \"%s\", \"device\": [{\"device_id\": \"0\", "
                       "\"super_device_id\": \"0\", \"device_ip\": \"192.0.2.1\"}]}]}",
                       w.nodes[0].peer_addr);
        ck_assert_msg(kvd_client_init(1001, KVD_ROLE_MIX, opts, 3, &c) == KVD_OK, "%s",
                      kvd_last_error(NULL));
        w.m[0].client = c;
        expect_ok(c, tcache_register(&ca, c, true, 2, 8, 1024, 41, &key_a, 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cb, w.m[1].client, true, 2, 8, 1024, 42, NULL, 0,
                                                 KVD_REMOTE_DEFAULT));

        /* "1.0" has no host_ip: refused at once, the key and the version named. */
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": ["
                       "{\"server_id\": \"1\", \"host_ip\": \"%s\", \"device\": [{\"device_id\": "
                       "\"0\", \"device_ip\": \"192.0.2.1\", \"rank_id\": \"0\"}]}, "
                       "{\"server_id\": \"2\", \"host_ip\": \"%s\", \"device\": [{\"device_id\": "
                       "\"0\", \"device_ip\": \"198.51.100.1\", \"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        expect_status(c, kvd_domain_link(c, "v12", info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "unknown key \"host_ip\" (a \"1.2\" key");

        (void)snprintf(table, sizeof(table),
                       "{\"server_count\": \"2\", \"status\": \"completed\", \"version\": \"1.2\", "
                       "\"server_list\": ["
                       "{\"device\": [{\"device_id\": \"0\", \"device_ip\": \"192.0.2.1\", "
                       "\"rank_id\": \"0\"}], \"host_ip\": \"%s\", \"server_id\": \"1\"}, "
                       "{\"device\": [{\"device_id\": \"0\", \"device_ip\": \"198.51.100.1\", "
                       "\"rank_id\": \"1\"}], \"host_ip\": \"%s\", \"server_id\": \"2\"}], "
                       "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                       "[{\"server_id\": \"1\"}, {\"server_id\": \"2\"}]}]}",
                       w.nodes[0].peer_addr, w.nodes[1].peer_addr);
        dom_link_all(w.m, 2, "v12", table);
        dom_wait_ok(w.m, 2);
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 3, db, 3, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&cb, &cp);
        tcache_verify_untouched(&ca);
        tcopies_free(&cp);
        net_stop(&w);
}
END_TEST

/* A domain over clusters already linked uses their link, and leaves it when it goes; two
 * domains between the same clusters share theirs. */
START_TEST(test_shared_links)
{
        static const uint64_t sb[] = {1, 2}, db[] = {5, 6};
        kvd_cache_key key_b = kvd_key_blocks(2002, 0);
        DomMember second[2];
        TCache ca, cb;
        TCopies cp = {};
        Net w;

        net_start(&w, 2, NULL);
        expect_ok(w.m[0].client, tcache_register(&ca, w.m[0].client, true, 2, 8, 1024, 1, NULL, 0,
                                                 KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cb, w.m[1].client, true, 2, 8, 1024, 2, &key_b, 1,
                                                 KVD_REMOTE_DEFAULT));
        /* 2002 becomes a server (it attached as a client) for the one-sided link to it. */
        expect_ok(w.m[1].client,
                  kvd_switch_role(w.m[1].client, KVD_ROLE_MIX,
                                  &(kvd_option){"listen_ip_info", w.nodes[1].peer_addr}, 1));
        link_node(w.m[0].client, 2002, &w.nodes[1]);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "links"), 1);
        dom_link_all(w.m, 2, "first", w.table);
        dom_wait_ok(w.m, 2);
        memcpy(second, w.m, sizeof(second));
        dom_link_all(second, 2, "second", w.table);
        dom_wait_ok(second, 2);
        /* Links are two-way: B's end uses A's link too, and neither domain opens another. */
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "links"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 0);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "inbound_links"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 2);

        /* The first domain goes: the link kvd_link_clusters() made stays. */
        expect_ok(w.m[0].client, kvd_domain_unlink(w.m[0].client, w.m[0].comm_id));
        expect_ok(w.m[1].client, kvd_domain_unlink(w.m[1].client, w.m[1].comm_id));
        ck_assert_int_eq(dom_wait(&second[0], harness_wait_ms()), KVD_MEM_STATUS_OK);
        expect_ok(w.m[0].client, kvd_check_link_status(w.m[0].client, 2002));
        expect_ok(w.m[1].client, kvd_check_link_status(w.m[1].client, 1001));
        expect_ok(w.m[0].client, kvd_pull_blocks(w.m[0].client, &key_b, ca.id, sb, 2, db, 2, NULL));
        tcopies_blocks(&cp, &cb, &ca, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&ca, &cp);
        /* The second goes too: A's link is still the user's. */
        expect_ok(second[0].client, kvd_domain_unlink(second[0].client, second[0].comm_id));
        expect_ok(second[1].client, kvd_domain_unlink(second[1].client, second[1].comm_id));
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "links"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "links"), 0);
        expect_ok(w.m[1].client, kvd_check_link_status(w.m[1].client, 1001));
        tcopies_free(&cp);
        net_stop(&w);
}
END_TEST

/* Both members of a two-member domain send each other @len bytes at once (batch send/recv) and
 * each receives exactly what the other sent, its own buffers and every guard untouched. */
typedef struct Exchange {
        DomMember *m;
        Buf send[2], recv[2];
        int ret[2];
        char detail[2][256];
} Exchange;

static int exchange_member(unsigned i, void *arg)
{
        Exchange *x = arg;
        kvd_send_recv_item items[2] = {
                {KVD_SEND, x->send[i].p, x->send[i].len, KVD_DT_UINT8, !i},
                {KVD_RECV, x->recv[i].p, x->recv[i].len, KVD_DT_UINT8, !i},
        };

        x->ret[i] = kvd_domain_batch_send_recv(x->m[i].client, x->m[i].comm_id, items, 2,
                                               harness_wait_ms());
        (void)snprintf(x->detail[i], sizeof(x->detail[i]), "%s", kvd_last_error(x->m[i].client));
        return x->ret[i];
}

static void exchange_check(DomMember *m, size_t len, uint64_t seed)
{
        Exchange x = {.m = m};
        int rets[2];

        for (unsigned i = 0; i < 2; i++) {
                buf_alloc(&x.send[i], m[i].client, len, seed + i);
                buf_alloc(&x.recv[i], m[i].client, len, seed + 10 + i);
        }
        dom_parallel(2, exchange_member, &x, rets);
        for (unsigned i = 0; i < 2; i++) {
                ck_assert_msg(x.ret[i] == KVD_OK, "rank %u: %s: %s", i, kvd_strerror(x.ret[i]),
                              x.detail[i]);
                buf_expect(&x.recv[i], seed + !i);
                buf_untouched(&x.send[i]);
        }
}

/* Links on @nodes nodes: those the clusters made (status "links"), and inbound ones. */
static size_t count_links(Net *w, unsigned nodes, const char *key)
{
        size_t n = 0;

        for (unsigned i = 0; i < nodes; i++)
                n += dom_status_len(&w->nodes[i], key);
        return n;
}

/*
 * Two members, on one daemon (loop bit 1) or two, where one of them (bit 2: rank 1, else rank
 * 0) linked to the other with kvd_link_clusters() before the domain. Links are two-way, so the
 * domain uses that link from both ends and opens no other; pulls both ways and a batch
 * send/recv move the right bytes over it. When both unlink (bit 0: which goes first) the link
 * stays: it is the cluster's that made it, and carries a pull, byte-exact.
 */
static void over_user_link_start(Net *w, bool one_daemon)
{
        unsigned nodes = one_daemon ? 1 : 2;

        memset(w, 0, sizeof(*w));
        w->n = 2;
        for (unsigned i = 0; i < nodes; i++)
                node_start(&w->nodes[i]);
        for (unsigned i = 0; i < 2; i++) {
                w->m[i] = (DomMember){&w->nodes[one_daemon ? 0 : i], 1001 * (i + 1),
                                      one_daemon ? (int32_t)i : 0, NULL, 0};
                dom_member_attach(&w->m[i]);
        }
        rank_table_build(w->table, sizeof(w->table), w->m, 2, false);
}

static void over_user_link_make(Net *w, bool one_daemon, unsigned maker)
{
        DomMember *to = &w->m[!maker];

        /* The cluster linked to becomes a server for it (it attached as a client). */
        expect_ok(to->client,
                  kvd_switch_role(to->client, KVD_ROLE_MIX,
                                  &(kvd_option){"listen_ip_info", to->node->peer_addr}, 1));
        if (one_daemon)
                link_to(w->m[maker].client, to->cluster_id, KVD_ROLE_MIX);
        else
                link_node(w->m[maker].client, to->cluster_id, to->node);
}

static void over_user_link_stop(Net *w, bool one_daemon)
{
        for (unsigned i = 0; i < 2; i++)
                expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned i = 0; i < (one_daemon ? 1u : 2u); i++)
                node_stop(&w->nodes[i]);
}

START_TEST(test_unlink_leaves_user_link)
{
        /* A's blocks sb go to B's db, B's untouched ub to A's vb, and at the end A's sb again
         * to B's ub. */
        static const uint64_t sb[] = {6, 0, 3}, db[] = {1, 7, 4}, ub[] = {0, 2, 5},
                              vb[] = {1, 4, 7};
        bool one_daemon = _i & 2;
        unsigned first = _i & 1, maker = (_i & 4) ? 1 : 0, nodes = one_daemon ? 1 : 2;
        kvd_cache_key key_a = kvd_key_blocks(1001, 0), key_b = kvd_key_blocks(2002, 0);
        TCache ca, cb;
        TCopies cp = {}, cpa = {};
        Net w;

        over_user_link_start(&w, one_daemon);
        expect_ok(w.m[0].client, tcache_register(&ca, w.m[0].client, true, 2, 8, 1024, 31, &key_a,
                                                 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cb, w.m[1].client, true, 2, 8, 1024, 32, &key_b,
                                                 1, KVD_REMOTE_DEFAULT));
        over_user_link_make(&w, one_daemon, maker);
        ck_assert_int_eq(count_links(&w, nodes, "links"), 1);
        dom_link_all(w.m, 2, "over-a-link", w.table);
        dom_wait_ok(w.m, 2);
        /* One link, the user's: the domain opened none of its own, in either direction. */
        ck_assert_int_eq(count_links(&w, nodes, "links"), 1);
        if (!one_daemon) {
                ck_assert_int_eq(dom_status_len(&w.nodes[maker], "links"), 1);
                ck_assert_int_eq(count_links(&w, nodes, "inbound_links"), 1);
                ck_assert_int_eq(dom_status_len(&w.nodes[!maker], "inbound_links"), 1);
        }
        /* Both ways over it: pulls, byte-exact, and a batch send/recv. */
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 3, db, 3, NULL));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&cb, &cp);
        expect_ok(w.m[0].client, kvd_pull_blocks(w.m[0].client, &key_b, ca.id, ub, 3, vb, 3, NULL));
        tcopies_blocks(&cpa, &cb, &ca, ALL, ALL, 2, ub, vb, 3);
        tcache_verify(&ca, &cpa);
        exchange_check(w.m, 3 * 4096 + 5, 700);

        expect_ok(w.m[first].client, kvd_domain_unlink(w.m[first].client, w.m[first].comm_id));
        ck_assert_int_eq(dom_wait_failed(&w.m[!first], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        expect_ok(w.m[!first].client, kvd_domain_unlink(w.m[!first].client, w.m[!first].comm_id));
        for (unsigned i = 0; i < nodes; i++)
                ck_assert_int_eq(dom_status_len(&w.nodes[i], "domains"), 0);
        /* The user's link is left, as it was (links are two-way: both see it). */
        ck_assert_int_eq(count_links(&w, nodes, "links"), 1);
        expect_ok(w.m[1].client, kvd_check_link_status(w.m[1].client, 1001));
        expect_ok(w.m[0].client, kvd_check_link_status(w.m[0].client, 2002));
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_a, cb.id, sb, 3, ub, 3, NULL));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, ub, 3);
        tcache_verify(&cb, &cp);
        tcache_verify(&ca, &cpa);
        tcopies_free(&cp);
        tcopies_free(&cpa);
        over_user_link_stop(&w, one_daemon);
}
END_TEST

/*
 * A domain over a kvd_link_clusters() link fails on both members when that link is unlinked,
 * by the cluster that made it or by the other (loop bit 0), on one daemon or across two (bit
 * 1), as it does when a member unlinks; once both unlinked it forms again, over a new link of
 * its own.
 */
START_TEST(test_user_link_unlinked)
{
        bool one_daemon = _i & 2;
        unsigned who = (_i & 1) ? 1 : 0, nodes = one_daemon ? 1 : 2;
        int ret = 1;
        Net w;

        over_user_link_start(&w, one_daemon);
        over_user_link_make(&w, one_daemon, 0);
        dom_link_all(w.m, 2, "over-a-link", w.table);
        dom_wait_ok(w.m, 2);
        ck_assert_int_eq(count_links(&w, nodes, "links"), 1);

        expect_ok(w.m[who].client,
                  kvd_unlink_clusters(
                          w.m[who].client,
                          &(kvd_cluster_info){w.m[!who].cluster_id, KVD_ROLE_MIX, NULL, NULL}, 1,
                          5000, false, &ret));
        ck_assert_int_eq(ret, KVD_OK);
        for (unsigned i = 0; i < 2; i++) {
                ck_assert_int_eq(dom_wait_failed(&w.m[i], harness_wait_ms()),
                                 KVD_MEM_STATUS_FAILED);
                ck_assert_msg(strstr(kvd_last_error(w.m[i].client), "was unlinked"), "rank %u: %s",
                              i, kvd_last_error(w.m[i].client));
        }
        /* Gone both ways (across daemons, a link the other side unlinked stays listed, down,
         * on the side that made it until it unlinks or links again). */
        for (unsigned i = 0; i < 2; i++)
                expect_status(w.m[i].client,
                              kvd_check_link_status(w.m[i].client, w.m[!i].cluster_id),
                              KVD_E_NOT_YET_LINK, "");
        if (one_daemon || who == 0)
                ck_assert_int_eq(count_links(&w, nodes, "links"), 0);
        for (unsigned i = 0; i < 2; i++)
                expect_ok(w.m[i].client, kvd_domain_unlink(w.m[i].client, w.m[i].comm_id));
        for (unsigned i = 0; i < nodes; i++)
                ck_assert_int_eq(dom_status_len(&w.nodes[i], "domains"), 0);
        /* Linked again, it makes links of its own, and they carry a batch send/recv. */
        dom_link_all(w.m, 2, "over-a-link", w.table);
        dom_wait_ok(w.m, 2);
        exchange_check(w.m, 65536 + 3, 800);
        over_user_link_stop(&w, one_daemon);
}
END_TEST

/* Polls @n's daemon log for @needle until it shows up or the wait ceiling passes. */
static bool log_wait(const Node *n, const char *needle)
{
        for (int waited = 0; waited < harness_wait_ms(); waited += 10) {
                if (harness_daemon_log_contains(&n->d, needle))
                        return true;
                (void)usleep(10000);
        }
        return harness_daemon_log_contains(&n->d, needle);
}

/*
 * What vllm-ascend's llm_datadist connector does when a prefill restarts: it never unlinks, so the
 * decode side keeps its domain, FAILED when the prefill left; the restarted prefill links the
 * same comm_name again at once and waits (PREPARING: the decode daemon answers "not yet" for its
 * failed domain, no refusal); the decode side then unlinks and links again (loop bit 0: or links
 * again while it still holds the failed domain, which stays FAILED until it unlinks it). Both
 * reach OK, and pulls both ways and a batch send/recv move the right bytes.
 */
START_TEST(test_relink_after_restart)
{
        static const uint64_t sb[] = {2, 5, 0}, db[] = {3, 1, 6}, ub[] = {4, 7}, vb[] = {0, 2};
        bool keep_old = _i & 1;
        kvd_cache_key key_p = kvd_key_blocks(1001, 0), key_d = kvd_key_blocks(2002, 0);
        TCopies cpd = {}, cpp = {};
        kvd_mem_status st;
        TCache cp, cd;
        uint64_t old;
        char *s;
        Net w;

        net_start(&w, 2, NULL);
        expect_ok(w.m[0].client, tcache_register(&cp, w.m[0].client, true, 2, 8, 1024, 41, &key_p,
                                                 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[1].client, tcache_register(&cd, w.m[1].client, true, 2, 8, 1024, 42, &key_d,
                                                 1, KVD_REMOTE_DEFAULT));
        dom_link_all(w.m, 2, "pd", w.table);
        dom_wait_ok(w.m, 2);

        /* The prefill's process goes; the decode side's domain fails and it keeps it. */
        expect_ok(w.m[0].client, kvd_client_finalize(w.m[0].client));
        ck_assert_int_eq(dom_wait_failed(&w.m[1], harness_wait_ms()), KVD_MEM_STATUS_FAILED);
        ck_assert_msg(strstr(kvd_last_error(w.m[1].client), "rank 0"), "%s",
                      kvd_last_error(w.m[1].client));
        old = w.m[1].comm_id;

        /* The restarted prefill (same cluster id, new memory) links the same name again. */
        w.m[0].client = NULL;
        w.m[0].comm_id = 0;
        dom_member_attach(&w.m[0]);
        expect_ok(w.m[0].client, tcache_register(&cp, w.m[0].client, true, 2, 8, 1024, 43, &key_p,
                                                 1, KVD_REMOTE_DEFAULT));
        expect_ok(w.m[0].client, dom_link(w.m, 2, 0, "pd", w.table));
        /* The decode daemon answered it "not yet" (its domain failed): it waits, PREPARING. */
        ck_assert(log_wait(&w.nodes[1], "rank 0 linked again"));
        expect_ok(w.m[0].client, kvd_domain_status(w.m[0].client, w.m[0].comm_id, &st));
        ck_assert_msg(st == KVD_MEM_STATUS_PREPARING, "%d: %s", st, kvd_last_error(w.m[0].client));
        expect_ok(w.m[1].client, kvd_domain_status(w.m[1].client, old, &st));
        ck_assert_int_eq(st, KVD_MEM_STATUS_FAILED);

        /* The decode side links again, after unlinking or while it holds the failed one. */
        if (!keep_old)
                expect_ok(w.m[1].client, kvd_domain_unlink(w.m[1].client, old));
        expect_ok(w.m[1].client, dom_link(w.m, 2, 1, "pd", w.table));
        ck_assert_uint_ne(w.m[1].comm_id, old);
        dom_wait_ok(w.m, 2);
        if (keep_old) {
                expect_ok(w.m[1].client, kvd_domain_status(w.m[1].client, old, &st));
                ck_assert_int_eq(st, KVD_MEM_STATUS_FAILED);
                ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 2);
                s = dom_status_str(&w.nodes[1], "domains/0/state");
                ck_assert_str_eq(s, "failed");
                free(s);
                s = dom_status_str(&w.nodes[1], "domains/1/state");
                ck_assert_str_eq(s, "ok");
                free(s);
                expect_ok(w.m[1].client, kvd_domain_unlink(w.m[1].client, old));
                ck_assert_int_eq(dom_wait(&w.m[1], harness_wait_ms()), KVD_MEM_STATUS_OK);
        }
        ck_assert_int_eq(dom_status_len(&w.nodes[1], "domains"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 1);

        /* The decode pulls the new prefill's blocks, the prefill the decode's, byte-exact. */
        expect_ok(w.m[1].client, kvd_pull_blocks(w.m[1].client, &key_p, cd.id, sb, 3, db, 3, NULL));
        tcopies_blocks(&cpd, &cp, &cd, ALL, ALL, 2, sb, db, 3);
        tcache_verify(&cd, &cpd);
        expect_ok(w.m[0].client, kvd_pull_blocks(w.m[0].client, &key_d, cp.id, ub, 2, vb, 2, NULL));
        tcopies_blocks(&cpp, &cd, &cp, ALL, ALL, 2, ub, vb, 2);
        tcache_verify(&cp, &cpp);
        exchange_check(w.m, 40000 + 7, 900);
        tcopies_free(&cpd);
        tcopies_free(&cpp);
        net_stop(&w);
}
END_TEST

/* 512 domains per daemon (a warning above 16), then LIMIT_EXCEEDED. */
START_TEST(test_domain_limit)
{
        DomMember m[2];
        char table[RANK_TABLE_MAX], name[32];
        kvd_cluster_rank info[2] = {{1001, 0}, {2002, 1}};
        uint64_t ids[513];
        Node n;

        node_start(&n);
        /* Two members on one node (devices 0 and 1); the second never calls link. */
        m[0] = (DomMember){&n, 1001, 0, NULL, 0};
        m[1] = (DomMember){&n, 2002, 1, NULL, 0};
        dom_member_attach(&m[0]);
        dom_member_attach(&m[1]);
        rank_table_build(table, sizeof(table), m, 2, false);
        for (unsigned i = 0; i < 512; i++) {
                (void)snprintf(name, sizeof(name), "d%u", i);
                expect_ok(m[0].client, kvd_domain_link(m[0].client, name, info, 2, table, &ids[i]));
        }
        expect_status(m[0].client, kvd_domain_link(m[0].client, "d512", info, 2, table, &ids[512]),
                      KVD_E_LIMIT_EXCEEDED, "512 comm domains on this daemon, at most 512");
        ck_assert(
                harness_daemon_log_contains(&n.d, "17 comm domains on this daemon; more than 16"));
        ck_assert_int_eq(dom_status_len(&n, "domains"), 512);
        expect_ok(m[0].client, kvd_domain_unlink(m[0].client, ids[100]));
        expect_ok(m[0].client, kvd_domain_link(m[0].client, "d512", info, 2, table, &ids[512]));
        expect_ok(m[0].client, kvd_client_finalize(m[0].client));
        ck_assert_int_eq(dom_status_len(&n, "domains"), 0);
        expect_ok(m[1].client, kvd_client_finalize(m[1].client));
        node_stop(&n);
}
END_TEST

/* At most 16 set-ups reach out at once; the rest wait in a queue, in the order they came. */
START_TEST(test_setup_queue)
{
        char name[32], *s;
        uint64_t ids[20];
        kvd_cluster_rank info[2] = {{1001, 0}, {2002, 1}};
        Net w;

        net_start(&w, 2, NULL);
        for (unsigned i = 0; i < 20; i++) {
                (void)snprintf(name, sizeof(name), "q%u", i);
                expect_ok(w.m[0].client,
                          kvd_domain_link(w.m[0].client, name, info, 2, w.table, &ids[i]));
        }
        for (unsigned i = 0; i < 20; i++) {
                char path[64];

                (void)snprintf(path, sizeof(path), "domains/%u/setup", i);
                s = dom_status_str(&w.nodes[0], path);
                ck_assert_str_eq(s, i < 16 ? "in_progress" : "queued");
                free(s);
                if (i >= 16) {
                        (void)snprintf(path, sizeof(path), "domains/%u/queue_position", i);
                        ck_assert_int_eq(dom_status_int(&w.nodes[0], path), i - 15);
                }
        }
        /* A set-up in progress goes: the oldest queued one takes its slot. */
        expect_ok(w.m[0].client, kvd_domain_unlink(w.m[0].client, ids[3]));
        s = dom_status_str(&w.nodes[0], "domains/15/comm_name");
        ck_assert_str_eq(s, "q16");
        free(s);
        s = dom_status_str(&w.nodes[0], "domains/15/setup");
        ck_assert_str_eq(s, "in_progress");
        free(s);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/16/queue_position"), 1);
        ck_assert_int_eq(dom_status_int(&w.nodes[0], "domains/18/queue_position"), 3);
        /* The member that was missing arrives for a queued domain: answering needs no slot. */
        w.m[1].comm_id = 0;
        expect_ok(w.m[1].client,
                  kvd_domain_link(w.m[1].client, "q19", info, 2, w.table, &w.m[1].comm_id));
        w.m[0].comm_id = ids[19];
        dom_wait_ok(w.m, 2);
        net_stop(&w);
}
END_TEST

/* ---- many domains, many clients, every order, all at once ---- */

#define CONC_CLUSTERS 6
#define CONC_DOMAINS 30
/*
 * The cluster that links last, once the others have linked all theirs: 20 domains of node 0
 * and 20 of node 1 then wait for it, more than a daemon's 16 set-up slots, so set-ups queue
 * there whatever the machine's speed (without it, a slow machine could form the domains one
 * by one as they came).
 */
#define CONC_LATE 5

typedef struct Conc {
        Node nodes[3];
        DomMember all[CONC_CLUSTERS];
        unsigned members[CONC_DOMAINS][4];
        unsigned n_members[CONC_DOMAINS];
        char tables[CONC_DOMAINS][RANK_TABLE_MAX];
        unsigned who;
        int linked[2]; /* a pipe: a byte from each other cluster once it linked all its domains */
} Conc;

/* CONC_LATE's wait for the other clusters' bytes on the pipe, up to harness_wait_ms(). */
static bool conc_others_linked(const Conc *c)
{
        struct pollfd pfd = {.fd = c->linked[0], .events = POLLIN};
        unsigned got = 0;
        char b;

        while (got < CONC_CLUSTERS - 1 && poll(&pfd, 1, harness_wait_ms()) == 1 &&
               read(c->linked[0], &b, 1) == 1)
                got++;
        return got == CONC_CLUSTERS - 1;
}

/* One cluster's process: links each of its domains in its own order, waits for all, tells the
 * test how that went (0: every one OK) and stays until it is killed, so that no member leaves a
 * domain another still waits for. */
static int conc_child(void *p)
{
        Conc *c = p;
        DomMember *me = &c->all[c->who];
        char dev[8], name[32];
        kvd_option opts[2] = {{"socket_path", me->node->d.socket_path}, {"device_id", dev}};
        uint64_t ids[CONC_DOMAINS];
        unsigned order[CONC_DOMAINS], n = 0;
        uint64_t verdict = 0;

        (void)snprintf(dev, sizeof(dev), "%d", me->device_id);
        if (kvd_client_init(me->cluster_id, KVD_ROLE_MIX, opts, 2, &me->client) < 0)
                verdict = 10;
        if (c->who == CONC_LATE && !verdict && !conc_others_linked(c))
                verdict = 14;
        for (unsigned k = 0; k < CONC_DOMAINS; k++) {
                unsigned d = c->who % 3 == 0   ? k
                             : c->who % 3 == 1 ? CONC_DOMAINS - 1 - k
                                               : (k * 7) % CONC_DOMAINS;

                for (unsigned j = 0; j < c->n_members[d]; j++)
                        if (c->members[d][j] == c->who)
                                order[n++] = d;
        }
        for (unsigned i = 0; i < n && !verdict; i++) {
                unsigned d = order[i];
                kvd_cluster_rank info[4];

                for (unsigned j = 0; j < c->n_members[d]; j++)
                        info[j] = (kvd_cluster_rank){c->all[c->members[d][j]].cluster_id, j};
                (void)snprintf(name, sizeof(name), "conc-%u", d);
                if (kvd_domain_link(me->client, name, info, c->n_members[d], c->tables[d],
                                    &ids[i]) < 0) {
                        fprintf(stderr, "conc: cluster %llu: link %s: %s\n",
                                (unsigned long long)me->cluster_id, name,
                                kvd_last_error(me->client));
                        verdict = 11;
                }
        }
        /* also after a failure: the late cluster is not kept waiting for it */
        if (c->who != CONC_LATE && write(c->linked[1], "", 1) != 1)
                verdict = verdict ?: 15;
        for (unsigned i = 0; i < n && !verdict; i++) {
                kvd_mem_status st = KVD_MEM_STATUS_PREPARING;

                while (st == KVD_MEM_STATUS_PREPARING && !verdict) {
                        if (kvd_domain_status(me->client, ids[i], &st) < 0)
                                verdict = 12;
                        else if (st == KVD_MEM_STATUS_PREPARING)
                                harness_sleep_ms(5);
                }
                if (!verdict && st != KVD_MEM_STATUS_OK) {
                        fprintf(stderr, "conc: cluster %llu domain %u: %s\n",
                                (unsigned long long)me->cluster_id, order[i],
                                kvd_last_error(me->client));
                        verdict = 13;
                }
        }
        harness_child_ready(verdict);
        for (;;)
                pause();
        return 0;
}

START_TEST(test_concurrent_any_order)
{
        HarnessChild kids[CONC_CLUSTERS];
        Conc *c = calloc(1, sizeof(*c));

        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(pipe2(c->linked, O_CLOEXEC), 0);
        for (unsigned i = 0; i < 3; i++)
                node_start_full(&c->nodes[i], NULL, NULL, NULL, NULL);
        for (unsigned i = 0; i < CONC_CLUSTERS; i++)
                c->all[i] = (DomMember){&c->nodes[i % 3], 100 + i, (int32_t)(i / 3), NULL, 0};
        /* Domains of 2, 3 and 4 members drawn from the six clusters, some with both clusters of
         * one node. */
        for (unsigned d = 0; d < CONC_DOMAINS; d++) {
                DomMember m[4];

                c->n_members[d] = 2 + d % 3;
                for (unsigned j = 0; j < c->n_members[d]; j++) {
                        /* Steps coprime with 6: distinct clusters. */
                        c->members[d][j] = (d + j * (d % 2 ? 5 : 1)) % CONC_CLUSTERS;
                        m[j] = c->all[c->members[d][j]];
                }
                rank_table_build(c->tables[d], sizeof(c->tables[d]), m, c->n_members[d], false);
        }
        for (unsigned i = 0; i < CONC_CLUSTERS; i++) {
                c->who = i;
                ck_assert_int_eq(harness_fork_client(conc_child, c, &kids[i]), 0);
        }
        for (unsigned i = 0; i < CONC_CLUSTERS; i++) {
                uint64_t verdict = 99;
                int r = harness_child_wait_ready(&kids[i], harness_wait_ms(), &verdict);

                if (r != 0 || verdict != 0)
                        for (unsigned k = 0; k < 3; k++)
                                harness_daemon_dump_log(&c->nodes[k].d, 20000);
                ck_assert_msg(r == 0 && verdict == 0, "cluster %u: %d, verdict %llu", 100 + i, r,
                              (unsigned long long)verdict);
        }
        /* Every daemon formed every domain it has a member of, and had set-ups queued. */
        for (unsigned i = 0; i < 3; i++) {
                size_t n = dom_status_len(&c->nodes[i], "domains");

                for (size_t k = 0; k < n; k++) {
                        char path[64], *st;

                        (void)snprintf(path, sizeof(path), "domains/%zu/state", k);
                        st = dom_status_str(&c->nodes[i], path);
                        ck_assert_str_eq(st, "ok");
                        free(st);
                }
                ck_assert_uint_gt(n, 16);
        }
        /* the late cluster's nodes had more set-ups waiting for it than slots (CONC_LATE) */
        ck_assert(harness_daemon_log_contains(&c->nodes[0].d, "set-up queued at position"));
        ck_assert(harness_daemon_log_contains(&c->nodes[1].d, "set-up queued at position"));
        for (unsigned i = 0; i < CONC_CLUSTERS; i++)
                ck_assert_int_eq(harness_child_kill(&kids[i], SIGKILL), 128 + SIGKILL);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_int_eq(dom_status_len(&c->nodes[i], "domains"), 0);
                node_stop(&c->nodes[i]);
        }
        close(c->linked[0]);
        close(c->linked[1]);
        free(c);
}
END_TEST

static Suite *domain_suite(void)
{
        Suite *s = suite_create("domain");
        TCase *tc = tcase_create("form");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_form_two);
        tcase_add_test(tc, test_member_never_links);
        tcase_add_test(tc, test_rank_tables_disagree);
        tcase_add_test(tc, test_shared_links);
        tcase_add_loop_test(tc, test_unlink_leaves_user_link, 0, 8);
        tcase_add_loop_test(tc, test_user_link_unlinked, 0, 4);
        tcase_add_loop_test(tc, test_relink_after_restart, 0, 2);
        suite_add_tcase(s, tc);

        tc = tcase_create("rules");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_link_rules);
        tcase_add_test(tc, test_local_comm_res);
        tcase_add_test(tc, test_form_v12);
        tcase_add_test(tc, test_rdma_device_missing);
        tcase_add_test(tc, test_domain_limit);
        tcase_add_test(tc, test_setup_queue);
        suite_add_tcase(s, tc);

        tc = tcase_create("concurrent");
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_concurrent_any_order);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(domain_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
