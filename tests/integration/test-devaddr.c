/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, one comm domain per device pair on one node: each configured device has its
 * own address (devices[].address, HCCL's device_ip) on which its daemon listens for peers. With
 * tensor parallelism 2 and 4 the prefill daemon P and the decode daemon D each serve devices
 * 0..n-1; rank i of P and rank i of D form a domain named as vllm-ascend's llm_datadist
 * connector names it (pd_comm_<prefill device_ip>_<decode device_ip>), from a rank table that
 * gives each NPU its own device_ip, and the decode rank pulls the prefill rank's blocks,
 * byte-exact, every other byte of both caches untouched. link_clusters reaches a device's
 * address too. Refused: two devices at one address, an address the daemon cannot bind, a
 * device address without listen_ip_info, a rank table that names the wrong device address.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define TP_MAX 4
#define PREFILL_ID(i) (100 + (uint64_t)(i))
#define DECODE_ID(i) (200 + (uint64_t)(i))

/* P and D with devices 0..n-1, each at an address of its own; one member cluster each. */
typedef struct Pd {
        Node nodes[2]; /* P, D */
        char cfg[2][64];
        char ip[2][TP_MAX][32]; /* device i of node k: "127.a.b.c", port 7400 (the default) */
        DomMember m[TP_MAX][2]; /* pair i: prefill rank 0, decode rank 1 */
        unsigned n;
} Pd;

/*
 * Loopback addresses of this process: 127.a.b.c from the pid, so that suites running at once
 * (and other checkouts on the machine) do not share a device's port 7400. All of 127.0.0.0/8 is
 * local on Linux.
 */
static void device_ip(char *buf, size_t size, unsigned node, unsigned dev)
{
        unsigned pid = (unsigned)getpid();

        (void)snprintf(buf, size, "127.%u.%u.%u", 100 + pid % 100, (pid / 100) % 250,
                       1 + node * 8 + dev);
}

/* Writes a config file at @path (a mkstemp() template) with the NUL-terminated @json. */
static void write_config(char *path, const char *json)
{
        int fd;

        fd = mkstemp(path);
        ck_assert_msg(fd >= 0, "mkstemp: %m");
        ck_assert_int_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
        close(fd);
}

/* A devices map of @n devices 0.., device i at @ips[i] ("ip" alone: port 7400). */
static void devices_config(char *path, char ips[][32], unsigned n)
{
        char json[1024];
        size_t len = 0;

        len += (size_t)snprintf(json + len, sizeof(json) - len, "{\"devices\": [");
        for (unsigned i = 0; i < n; i++)
                len += (size_t)snprintf(json + len, sizeof(json) - len,
                                        "%s{\"device_id\": %u, \"address\": \"%s\"}", i ? ", " : "",
                                        i, ips[i]);
        (void)snprintf(json + len, sizeof(json) - len, "]}");
        (void)snprintf(path, 64, "/tmp/kvdist-devaddr-XXXXXX");
        write_config(path, json);
}

static void pd_start(Pd *w, unsigned n)
{
        memset(w, 0, sizeof(*w));
        w->n = n;
        for (unsigned k = 0; k < 2; k++) {
                const char *extra[] = {"--config", w->cfg[k], NULL};

                for (unsigned i = 0; i < n; i++)
                        device_ip(w->ip[k][i], sizeof(w->ip[k][i]), k, i);
                devices_config(w->cfg[k], w->ip[k], n);
                node_start_full(&w->nodes[k], NULL, NULL, NULL, extra);
        }
        for (unsigned i = 0; i < n; i++) {
                w->m[i][0] = (DomMember){&w->nodes[0], PREFILL_ID(i), (int32_t)i, NULL, 0};
                w->m[i][1] = (DomMember){&w->nodes[1], DECODE_ID(i), (int32_t)i, NULL, 0};
                dom_member_attach(&w->m[i][0]);
                dom_member_attach(&w->m[i][1]);
        }
}

static void pd_stop(Pd *w)
{
        for (unsigned i = 0; i < w->n; i++)
                for (unsigned k = 0; k < 2; k++)
                        if (w->m[i][k].client)
                                expect_ok(w->m[i][k].client,
                                          kvd_client_finalize(w->m[i][k].client));
        for (unsigned k = 0; k < 2; k++) {
                node_stop(&w->nodes[k]);
                (void)unlink(w->cfg[k]);
        }
}

/* The connector's name for pair @i: its two device_ips. */
static void pair_name(const Pd *w, unsigned i, char *buf, size_t size)
{
        (void)snprintf(buf, size, "pd_comm_%s_%s", w->ip[0][i], w->ip[1][i]);
}

/*
 * Pair @i's rank table, each NPU's own device_ip. @v12: the connector's "1.2" form (server ids,
 * super_device_id, no host_ip), else "1.0". @p_ip overrides the prefill device_ip (NULL: its own).
 */
static void pair_table(const Pd *w, unsigned i, bool v12, const char *p_ip, char *buf, size_t size)
{
        const char *sdev = v12 ? "\"super_device_id\": \"0\", " : "";

        (void)snprintf(buf, size,
                       "{\"version\": \"%s\", \"server_count\": \"2\", \"status\": \"completed\", "
                       "\"server_list\": ["
                       "{\"device\": [{\"device_id\": \"%u\", \"device_ip\": \"%s\", %s"
                       "\"rank_id\": \"0\"}], \"server_id\": \"prefill-host\"}, "
                       "{\"device\": [{\"device_id\": \"%u\", \"device_ip\": \"%s\", %s"
                       "\"rank_id\": \"1\"}], \"server_id\": \"decode-host\"}]}",
                       v12 ? "1.2" : "1.0", i, p_ip ? p_ip : w->ip[0][i], sdev, i, w->ip[1][i],
                       sdev);
}

/* The domain named @name in @n's status: its index, asserting there is one. */
static size_t domain_index(const Node *n, const char *name)
{
        size_t count = dom_status_len(n, "domains");

        for (size_t k = 0; k < count; k++) {
                char path[64];
                char *s;
                bool same;

                (void)snprintf(path, sizeof(path), "domains/%zu/comm_name", k);
                s = dom_status_str(n, path);
                same = strcmp(s, name) == 0;
                free(s);
                if (same)
                        return k;
        }
        ck_abort_msg("no domain %s on the daemon", name);
        return 0;
}

/*
 * TP @n, the table form @v12: every pair forms its own domain, each member reached at its own
 * device address, and each decode rank pulls its prefill rank's blocks byte-exact.
 */
static void tp_pull(unsigned n, bool v12)
{
        static const uint64_t sb[] = {5, 0, 9, 3}, db[] = {2, 11, 6, 7};
        char names[TP_MAX][96], table[RANK_TABLE_MAX];
        TCache ca[TP_MAX], cb[TP_MAX];
        Pd w;

        pd_start(&w, n);
        for (unsigned i = 0; i < n; i++) {
                kvd_cache_key key = kvd_key_blocks(PREFILL_ID(i), 0);

                /* A seed per pair: bytes of another pair would not match. */
                expect_ok(w.m[i][0].client,
                          tcache_register(&ca[i], w.m[i][0].client, true, 2, 12, 1024, 10 + i, &key,
                                          1, KVD_REMOTE_DEFAULT));
                expect_ok(w.m[i][1].client,
                          tcache_register(&cb[i], w.m[i][1].client, true, 2, 12, 1024, 20 + i, NULL,
                                          0, KVD_REMOTE_DEFAULT));
        }
        /* Every rank links before any domain forms: the names must not collide. */
        for (unsigned i = 0; i < n; i++) {
                pair_name(&w, i, names[i], sizeof(names[i]));
                pair_table(&w, i, v12, NULL, table, sizeof(table));
                dom_link_all(w.m[i], 2, names[i], table);
        }
        for (unsigned i = 0; i < n; i++)
                dom_wait_ok(w.m[i], 2);
        for (unsigned k = 0; k < 2; k++) {
                ck_assert_uint_eq(dom_status_len(&w.nodes[k], "domains"), n);
                for (unsigned i = 0; i < n; i++) {
                        size_t d = domain_index(&w.nodes[k], names[i]);
                        char path[96], want[64];
                        char *s;

                        ck_assert_int_eq(
                                dom_status_int(&w.nodes[k], (snprintf(path, sizeof(path),
                                                                      "domains/%zu/ranks", d),
                                                             path)),
                                2);
                        /* Each rank at its device's own address. */
                        for (unsigned r = 0; r < 2; r++) {
                                (void)snprintf(path, sizeof(path), "domains/%zu/members/%u/address",
                                               d, r);
                                s = dom_status_str(&w.nodes[k], path);
                                (void)snprintf(want, sizeof(want), "%s:7400", w.ip[r][i]);
                                ck_assert_str_eq(s, want);
                                free(s);
                        }
                }
        }
        for (unsigned i = 0; i < n; i++) {
                kvd_cache_key key = kvd_key_blocks(PREFILL_ID(i), 0);
                kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
                TCopies cp = {};

                expect_ok(w.m[i][1].client,
                          kvd_pull_blocks(w.m[i][1].client, &key, cb[i].id, sb, 4, db, 4, &o));
                tcopies_blocks(&cp, &ca[i], &cb[i], ALL, ALL, 2, sb, db, 4);
                tcache_verify(&cb[i], &cp);
                tcopies_free(&cp);
        }
        /* Nothing moved into a prefill cache, nor into another pair's. */
        for (unsigned i = 0; i < n; i++)
                tcache_verify_untouched(&ca[i]);
        pd_stop(&w);
}

START_TEST(test_tp2_v12)
{
        tp_pull(2, true);
}
END_TEST

START_TEST(test_tp2_v10)
{
        tp_pull(2, false);
}
END_TEST

START_TEST(test_tp4_v12)
{
        tp_pull(4, true);
}
END_TEST

START_TEST(test_tp4_v10)
{
        tp_pull(4, false);
}
END_TEST

/*
 * A prompt cluster whose listen_ip_info is its device's address is reached there by
 * link_clusters (no port of its own: the device's listener serves it); the link carries a pull.
 */
START_TEST(test_link_clusters_device_address)
{
        static const uint64_t sb[] = {1, 4}, db[] = {5, 0};
        kvd_cache_key key = kvd_key_blocks(500, 0);
        kvd_transfer_opts o = opts_layers(ALL, ALL, 2);
        char addr[48];
        kvd_option opts[3];
        kvd_client *p = NULL, *d;
        TCache ca, cb;
        TCopies cp = {};
        int ret;
        Pd w;

        pd_start(&w, 2);
        (void)snprintf(addr, sizeof(addr), "%s:7400", w.ip[0][1]);
        opts[0] = (kvd_option){"socket_path", w.nodes[0].d.socket_path};
        opts[1] = (kvd_option){"device_id", "1"};
        opts[2] = (kvd_option){"listen_ip_info", addr};
        ck_assert_msg(kvd_client_init(500, KVD_ROLE_PROMPT, opts, 3, &p) == KVD_OK, "%s",
                      kvd_last_error(NULL));
        d = node_client(&w.nodes[1], 600, KVD_ROLE_DECODER);
        expect_ok(p, tcache_register(&ca, p, true, 2, 6, 512, 31, &key, 1, KVD_REMOTE_DEFAULT));
        expect_ok(d, tcache_register(&cb, d, true, 2, 6, 512, 32, NULL, 0, KVD_REMOTE_DEFAULT));
        ck_assert_int_eq(link_at(d, 500, addr, 20000, &ret), KVD_OK);
        ck_assert_msg(ret == KVD_OK, "link to %s: %s: %s", addr, kvd_strerror(ret),
                      kvd_last_error(d));
        expect_ok(d, kvd_pull_blocks(d, &key, cb.id, sb, 2, db, 2, &o));
        tcopies_blocks(&cp, &ca, &cb, ALL, ALL, 2, sb, db, 2);
        tcache_verify(&cb, &cp);
        tcache_verify_untouched(&ca);
        tcopies_free(&cp);
        expect_ok(d, kvd_client_finalize(d));
        expect_ok(p, kvd_client_finalize(p));
        pd_stop(&w);
}
END_TEST

/* A rank's device_ip must be its own device's address; nothing forms, the caller is told why. */
START_TEST(test_table_refusals)
{
        char name[96], table[RANK_TABLE_MAX], other[48];
        kvd_cluster_rank info[2] = {{PREFILL_ID(0), 0}, {DECODE_ID(0), 1}};
        kvd_client *c;
        uint64_t id;
        Pd w;

        pd_start(&w, 2);
        c = w.m[0][0].client;
        pair_name(&w, 0, name, sizeof(name));
        /* An address no device of P has. */
        device_ip(other, sizeof(other), 0, 7);
        pair_table(&w, 0, true, other, table, sizeof(table));
        expect_status(c, kvd_domain_link(c, name, info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "is not the address of device 0 on this kvdistd");
        pair_table(&w, 0, false, other, table, sizeof(table));
        expect_status(c, kvd_domain_link(c, name, info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "is not the address of device 0 on this kvdistd");
        /* Device 1's address for device 0: P's, but another device's. */
        pair_table(&w, 0, true, w.ip[0][1], table, sizeof(table));
        expect_status(c, kvd_domain_link(c, name, info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "is not the address of device 0 on this kvdistd");
        /* The daemon's listen_ip_info for a device that has an address of its own. */
        pair_table(&w, 0, false, w.nodes[0].peer_addr, table, sizeof(table));
        expect_status(c, kvd_domain_link(c, name, info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "a device with an address is named by it");
        /* "1.2" with a host_ip naming P's kvdistd: device_ip is the device's own, checked. */
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.2\", \"server_count\": \"2\", \"server_list\": ["
                       "{\"server_id\": \"p\", \"host_ip\": \"%s\", \"device\": [{\"device_id\": "
                       "\"0\", \"device_ip\": \"%s\", \"rank_id\": \"0\"}]}, "
                       "{\"server_id\": \"d\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.ip[0][1], w.ip[1][0]);
        expect_status(c, kvd_domain_link(c, name, info, 2, table, &id), KVD_E_PARAM_INVALID,
                      "rank 0's device_ip");
        ck_assert_uint_eq(dom_status_len(&w.nodes[0], "domains"), 0);

        /* The same "1.2" table with the right device_ip forms (and D's rank by its address). */
        (void)snprintf(table, sizeof(table),
                       "{\"version\": \"1.2\", \"server_count\": \"2\", \"server_list\": ["
                       "{\"server_id\": \"p\", \"host_ip\": \"%s\", \"device\": [{\"device_id\": "
                       "\"0\", \"device_ip\": \"%s\", \"rank_id\": \"0\"}]}, "
                       "{\"server_id\": \"d\", \"device\": [{\"device_id\": \"0\", "
                       "\"device_ip\": \"%s\", \"rank_id\": \"1\"}]}]}",
                       w.nodes[0].peer_addr, w.ip[0][0], w.ip[1][0]);
        dom_link_all(w.m[0], 2, name, table);
        dom_wait_ok(w.m[0], 2);
        pd_stop(&w);
}
END_TEST

/* Starts kvdistd with @json as its config (and @listen unless NULL); asserts it refuses to start
 * and its log says @why. */
static void start_refused(const char *json, const char *listen, const char *why)
{
        char path[64] = "/tmp/kvdist-devaddr-XXXXXX", *log = NULL;
        const char *argv[] = {"--config", path, listen ? "--listen" : NULL, listen, NULL};
        HarnessDaemon d = {};
        size_t len = 0;
        FILE *f;
        int r;

        write_config(path, json);
        r = harness_daemon_startv(&d, argv);
        if (r == 0)
                (void)harness_daemon_kill(&d);
        ck_assert_msg(r == -ECHILD, "kvdistd started with %s: %d", json, r);
        f = fopen(d.log_path, "re");
        ck_assert_msg(f, "%s: %m", d.log_path);
        log = calloc(1, 65537);
        ck_assert_ptr_nonnull(log);
        len = fread(log, 1, 65536, f);
        fclose(f);
        log[len] = '\0';
        ck_assert_msg(strstr(log, why), "wanted \"%s\" in the log:\n%s", why, log);
        free(log);
        harness_daemon_cleanup(&d);
        (void)unlink(path);
}

START_TEST(test_start_refusals)
{
        char a[32], b[32], json[512];

        device_ip(a, sizeof(a), 0, 0);
        device_ip(b, sizeof(b), 0, 1);
        /* Two devices at one address (the default port spelt out or not). */
        (void)snprintf(json, sizeof(json),
                       "{\"devices\": [{\"device_id\": 0, \"address\": \"%s\"}, "
                       "{\"device_id\": 1, \"address\": \"%s:7400\"}]}",
                       a, a);
        start_refused(json, "127.0.0.1:0", "duplicate address");
        /* An address of no interface of this host. */
        (void)snprintf(json, sizeof(json),
                       "{\"devices\": [{\"device_id\": 0, \"address\": \"%s\"}, "
                       "{\"device_id\": 1, \"address\": \"192.0.2.1:7400\"}]}",
                       a);
        start_refused(json, "127.0.0.1:0", "cannot listen for peers on its address 192.0.2.1:7400");
        /* A device address and no listen_ip_info. */
        (void)snprintf(json, sizeof(json),
                       "{\"devices\": [{\"device_id\": 0, \"address\": \"%s\"}]}", b);
        start_refused(json, NULL, "set listen_ip_info too");
}
END_TEST

/* Devices without an address change nothing: a domain named by listen_ip_info forms as before. */
START_TEST(test_no_address_unchanged)
{
        char path[64] = "/tmp/kvdist-devaddr-XXXXXX", table[RANK_TABLE_MAX];
        const char *extra[] = {"--config", path, NULL};
        Node nodes[2];
        DomMember m[2];

        write_config(path, "{\"devices\": [{\"device_id\": 0}, {\"device_id\": 1}]}");
        for (unsigned k = 0; k < 2; k++) {
                node_start_full(&nodes[k], NULL, NULL, NULL, extra);
                m[k] = (DomMember){&nodes[k], 1001 * (k + 1), 1, NULL, 0};
                dom_member_attach(&m[k]);
        }
        rank_table_build(table, sizeof(table), m, 2, false);
        dom_link_all(m, 2, "plain", table);
        dom_wait_ok(m, 2);
        for (unsigned k = 0; k < 2; k++) {
                expect_ok(m[k].client, kvd_client_finalize(m[k].client));
                node_stop(&nodes[k]);
        }
        (void)unlink(path);
}
END_TEST

static Suite *devaddr_suite(void)
{
        Suite *s = suite_create("devaddr");
        TCase *tc = tcase_create("tp");

        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_tp2_v12);
        tcase_add_test(tc, test_tp2_v10);
        tcase_add_test(tc, test_tp4_v12);
        tcase_add_test(tc, test_tp4_v10);
        tcase_add_test(tc, test_link_clusters_device_address);
        suite_add_tcase(s, tc);

        tc = tcase_create("rules");
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_table_refusals);
        tcase_add_test(tc, test_start_refusals);
        tcase_add_test(tc, test_no_address_unchanged);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(devaddr_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
