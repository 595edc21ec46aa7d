/* SPDX-License-Identifier: MIT */
/* Unit tests for the configuration of peers: listener, cluster key, heartbeats, TCP and RDMA. */
#include <check.h>
#include <stdlib.h>

#include "tests/unit/config-fixture.h"
#include "daemon/config.h"
#include "common/macro.h"

START_TEST(test_peer_keys)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *error = NULL;

        ck_assert_ptr_null(c->listen_ip_info);
        ck_assert_ptr_null(c->cluster_key_file);
        ck_assert_uint_eq(c->heartbeat_interval_ms, 1000);
        ck_assert_uint_eq(c->heartbeat_timeout_ms, 5000);
        ck_assert_uint_eq(c->tcp.streams, 4);
        ck_assert(!c->tcp.crc);
        ck_assert_uint_eq(c->tcp.chunk_size, MIB);
        /* A cluster without listen_ip_info is a client that refuses links, as in the seed. */
        ck_assert(!c->client_clusters_accept_links);
        load_ok(c, "{\"client_clusters_accept_links\": true}");
        ck_assert(c->client_clusters_accept_links);
        load_fails("{\"client_clusters_accept_links\": \"yes\"}",
                   "client_clusters_accept_links: expected true or false");

        load_ok(c, "{\"listen_ip_info\": \"10.0.0.2:7000\", \"cluster_key_file\": \"/etc/k\","
                   " \"tcp\": {\"streams\": 16, \"crc\": true, \"chunk_size\": \"64K\"},"
                   " \"heartbeat_interval_ms\": 100, \"heartbeat_timeout_ms\": 200}");
        ck_assert_str_eq(c->listen_ip_info, "10.0.0.2:7000");
        ck_assert_str_eq(c->cluster_key_file, "/etc/k");
        ck_assert_uint_eq(c->tcp.streams, 16);
        ck_assert(c->tcp.crc);
        ck_assert_uint_eq(c->tcp.chunk_size, 64 * KIB);
        /* Port 0 picks any port; IPv6 in brackets; "" turns the listener and the key off. */
        load_ok(c, "{\"listen_ip_info\": \"[::1]:0\", \"cluster_key_file\": \"\"}");
        ck_assert_str_eq(c->listen_ip_info, "[::1]:0");
        ck_assert_ptr_null(c->cluster_key_file);
        load_ok(c, "{\"listen_ip_info\": \"\"}");
        ck_assert_ptr_null(c->listen_ip_info);

        load_fails("{\"listen_ip_info\": \"10.0.0.2\"}",
                   "listen_ip_info: \"10.0.0.2\" is not \"ip:port\" or \"[ipv6]:port\" (numeric, "
                   "with a port), or \"\" for none");
        load_fails_with("{\"listen_ip_info\": \"node-a:7000\"}", "is not \"ip:port\"");
        load_fails_with("{\"listen_ip_info\": \"1.2.3.4:5:0\"}", "is not \"ip:port\"");
        load_fails_with("{\"listen_ip_info\": 7000}", "listen_ip_info: expected a string");
        load_fails("{\"tcp\": {\"streams\": 17}}", "tcp.streams: must be an integer in [1, 16]");
        load_fails("{\"tcp\": {\"crc\": 1}}", "tcp.crc: expected true or false");
        load_fails("{\"tcp\": {\"chunk_size\": \"1K\"}}", "tcp.chunk_size: must be in [4K, 64M]");
        load_fails("{\"tcp\": {\"window\": 1}}", "tcp.window: unknown key");
        load_fails("{\"tcp\": []}", "tcp: expected an object");
        load_fails("{\"rdma\": {\"qps\": 9}}", "rdma.qps: must be an integer in [1, 8]");
        load_fails("{\"rdma\": {\"sq\": 9}}", "rdma.sq: unknown key");
        ck_assert_uint_eq(c->rdma.qps, 4);
        load_ok(c, "{\"rdma\": {\"qps\": 2}}");
        ck_assert_uint_eq(c->rdma.qps, 2);
        load_fails("{\"heartbeat_interval_ms\": 1000, \"heartbeat_timeout_ms\": 1500}",
                   "heartbeat_timeout_ms: 1500 ms must be at least twice heartbeat_interval_ms "
                   "(1000 ms), or one late heartbeat loses the peer");

        ck_assert_int_eq(parse(c, &error, "--listen", "127.0.0.1:0", "--cluster-key-file", "/k2",
                               "--tcp-streams", "2", "--tcp-crc", "off", "--heartbeat-interval",
                               "50", "--heartbeat-timeout", "100", NULL),
                         0);
        ck_assert_str_eq(c->listen_ip_info, "127.0.0.1:0");
        ck_assert_str_eq(c->cluster_key_file, "/k2");
        ck_assert_uint_eq(c->tcp.streams, 2);
        ck_assert(!c->tcp.crc);
        ck_assert_uint_eq(c->heartbeat_timeout_ms, 100);
        parse_fails("--tcp-crc: expected on or off", "--tcp-crc", "yes", NULL);
        ck_assert_int_eq(parse(c, &error, "--client-clusters-accept-links", "off", NULL), 0);
        ck_assert(!c->client_clusters_accept_links);
        parse_fails("--client-clusters-accept-links: expected on or off",
                    "--client-clusters-accept-links", "1", NULL);
        parse_fails("--listen: \"x\" is not ip:port or [ipv6]:port (numeric, with a port), or "
                    "\"\" for none",
                    "--listen", "x", NULL);
        parse_fails("heartbeat_timeout_ms: 100 ms must be at least twice heartbeat_interval_ms "
                    "(1000 ms), or one late heartbeat loses the peer",
                    "--heartbeat-timeout", "100", NULL);
}
END_TEST

static Suite *config_peers_suite(void)
{
        Suite *s = suite_create("config-peers");
        TCase *tc = tcase_create("peers");

        tcase_add_test(tc, test_peer_keys);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(config_peers_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
