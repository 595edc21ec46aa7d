/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the configuration as operations use it: metrics_listen (config-listen.c),
 * what a reload changes (config-diff.c) and the effective configuration as JSON
 * (config-json.c).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "daemon/config-diff.h"
#include "daemon/config-json.h"
#include "daemon/config.h"
#include "common/macro.h"

static Config *load(const char *json)
{
        Config *c = NULL;
        char *error = NULL;

        ck_assert_int_eq(config_new(&c), 0);
        ck_assert_msg(config_load_string(c, json, &error) == 0, "%s: %s", json, error);
        return c;
}

static uint16_t port_of(const struct sockaddr_storage *sa)
{
        return ntohs(sa->ss_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port
                                              : ((const struct sockaddr_in6 *)sa)->sin6_port);
}

START_TEST(test_metrics_listen_values)
{
        struct sockaddr_storage sa;
        socklen_t len;

        ck_assert_int_eq(config_parse_metrics_listen("127.0.0.1:9100", &sa, &len), 0);
        ck_assert_int_eq(sa.ss_family, AF_INET);
        ck_assert_uint_eq(port_of(&sa), 9100);
        ck_assert_int_eq(config_parse_metrics_listen("127.0.0.1", &sa, &len), 0);
        ck_assert_uint_eq(port_of(&sa), CONFIG_METRICS_DEFAULT_PORT);
        ck_assert_int_eq(config_parse_metrics_listen("127.0.0.1:0", &sa, &len), 0);
        ck_assert_uint_eq(port_of(&sa), 0);
        ck_assert_int_eq(config_parse_metrics_listen("[::1]:0", &sa, &len), 0);
        ck_assert_int_eq(sa.ss_family, AF_INET6);
        ck_assert_uint_eq(port_of(&sa), 0);
        /* A bare IPv6 address is taken whole: ::1:0 is an address, on the default port. */
        ck_assert_int_eq(config_parse_metrics_listen("::1:0", &sa, &len), 0);
        ck_assert_uint_eq(port_of(&sa), CONFIG_METRICS_DEFAULT_PORT);

        ck_assert_int_lt(config_parse_metrics_listen("localhost:9100", &sa, &len), 0);
        ck_assert_int_lt(config_parse_metrics_listen("127.0.0.1:65536", &sa, &len), 0);
        ck_assert_int_lt(config_parse_metrics_listen(":0", &sa, &len), 0);
        ck_assert_int_lt(config_parse_metrics_listen("", &sa, &len), 0);
}
END_TEST

START_TEST(test_metrics_listen_key)
{
        _cleanup_(config_freep) Config *c = load("{\"metrics_listen\": \"127.0.0.1:9100\"}");
        _cleanup_free_ char *error = NULL;
        char *argv[] = {(char *)"kvdistd", (char *)"--metrics-listen", (char *)"", NULL};

        ck_assert_str_eq(c->metrics_listen, "127.0.0.1:9100");
        /* "" turns it off again. */
        ck_assert_int_eq(config_load_string(c, "{\"metrics_listen\": \"\"}", NULL), 0);
        ck_assert_ptr_null(c->metrics_listen);
        ck_assert_int_eq(config_load_string(c, "{\"metrics_listen\": \"example.com:80\"}", &error),
                         -EINVAL);
        ck_assert_msg(strstr(error, "metrics_listen: expected"), "%s", error);
        ck_assert_int_eq(config_load_string(c, "{\"metrics_listen\": 9100}", NULL), -EINVAL);

        argv[2] = (char *)"[::1]:9101";
        ck_assert_int_eq(config_parse_argv(c, 3, argv, NULL), 0);
        ck_assert_str_eq(c->metrics_listen, "[::1]:9101");
        argv[2] = (char *)"no.such.host";
        free(error);
        error = NULL;
        ck_assert_int_eq(config_parse_argv(c, 3, argv, &error), -EINVAL);
        ck_assert_msg(strstr(error, "--metrics-listen"), "%s", error);
}
END_TEST

static const ConfigChange *find_change(const ConfigChange *changes, size_t n, const char *key)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(changes[i].key, key) == 0)
                        return &changes[i];
        return NULL;
}

START_TEST(test_diff)
{
        static const char *const restart_keys[] = {"copy_threads",   "socket_path",
                                                   "metrics_listen", "devices",
                                                   "control_nice",   "copy_streaming"};
        _cleanup_(config_freep) Config *old = load("{}");
        _cleanup_(config_freep) Config *new =
                load("{\"log_level\": \"debug\", \"memory_size\": \"128M\", \"allow_uids\": [7, 8],"
                     " \"copy_threads\": 3, \"socket_path\": \"/tmp/other.sock\","
                     " \"metrics_listen\": \"127.0.0.1:1\", \"devices\": [{\"device_id\": 1}],"
                     " \"sync_kv_timeout_ms\": 2000, \"control_nice\": \"off\","
                     " \"copy_streaming\": false,"
                     " \"limits\": {\"max_clients\": 2, \"max_frame_size\": \"8M\"}}");
        _cleanup_free_ ConfigChange *changes = NULL;
        const ConfigChange *ch;
        size_t n = 0;

        ck_assert_int_eq(config_diff(old, old, &changes, &n), 0);
        ck_assert_uint_eq(n, 0);

        ck_assert_int_eq(config_diff(old, new, &changes, &n), 0);
        ck_assert_uint_eq(n, 12);
        ch = find_change(changes, n, "copy_streaming");
        ck_assert(ch && !ch->runtime);
        ck_assert_str_eq(ch->old_value, "true");
        ck_assert_str_eq(ch->new_value, "false");
        ch = find_change(changes, n, "control_nice");
        ck_assert(ch);
        ck_assert_str_eq(ch->old_value, "-10");
        ck_assert_str_eq(ch->new_value, "off");
        ch = find_change(changes, n, "log_level");
        ck_assert(ch && ch->runtime);
        ck_assert_str_eq(ch->old_value, "info");
        ck_assert_str_eq(ch->new_value, "debug");
        ch = find_change(changes, n, "limits.max_clients");
        ck_assert(ch && ch->runtime);
        ck_assert_str_eq(ch->new_value, "2");
        ch = find_change(changes, n, "allow_uids");
        ck_assert(ch && ch->runtime);
        ck_assert_str_eq(ch->old_value, "[]");
        ck_assert_str_eq(ch->new_value, "[7, 8]");
        ch = find_change(changes, n, "sync_kv_timeout_ms");
        ck_assert(ch && ch->runtime);
        ch = find_change(changes, n, "memory_size");
        ck_assert(ch && !ch->runtime);
        ck_assert_str_eq(ch->old_value, "256M");
        ck_assert_str_eq(ch->new_value, "128M");
        ch = find_change(changes, n, "limits.max_frame_size");
        ck_assert(ch && !ch->runtime);
        ck_assert_str_eq(ch->new_value, "8M");
        for (size_t i = 0; i < ARRAY_SIZE(restart_keys); i++) {
                ch = find_change(changes, n, restart_keys[i]);
                ck_assert_msg(ch && !ch->runtime, "%s should need a restart", restart_keys[i]);
        }
}
END_TEST

START_TEST(test_apply_runtime)
{
        _cleanup_(config_freep) Config *running = load("{}");
        _cleanup_(config_freep) Config *new =
                load("{\"log_level\": \"error\", \"memory_size\": \"128M\", \"allow_gids\": [5],"
                     " \"heartbeat_interval_ms\": 700, \"heartbeat_timeout_ms\": 9000,"
                     " \"link_total_time_ms\": 3000, \"tcp\": {\"streams\": 2, \"crc\": true},"
                     " \"rdma\": {\"qps\": 2}, \"client_clusters_accept_links\": true,"
                     " \"limits\": {\"max_clients\": 2, \"max_frame_size\": \"8M\"}}");
        _cleanup_free_ ConfigChange *changes = NULL;
        size_t n = 0;

        ck_assert_int_eq(config_apply_runtime(running, new), 0);
        ck_assert_int_eq(running->log_level, LOG_ERR);
        ck_assert_uint_eq(running->limits.max_clients, 2);
        ck_assert_uint_eq(running->n_allow_gids, 1);
        ck_assert_uint_eq(running->allow_gids[0], 5);
        ck_assert_uint_eq(running->heartbeat_interval_ms, 700);
        ck_assert_uint_eq(running->heartbeat_timeout_ms, 9000);
        ck_assert_uint_eq(running->link_total_time_ms, 3000);
        /* Peers that connect from now on are offered these. */
        ck_assert_uint_eq(running->tcp.streams, 2);
        ck_assert(running->tcp.crc);
        ck_assert_uint_eq(running->rdma.qps, 2);
        /* Links asked for from now on follow it. */
        ck_assert(running->client_clusters_accept_links);
        /* What needs a restart stays. */
        ck_assert_uint_eq(running->memory_size, 256u << 20);
        ck_assert_uint_eq(running->limits.max_frame_size, 16u << 20);

        /* What is left differing is exactly what config_diff() says needs a restart. */
        ck_assert_int_eq(config_diff(running, new, &changes, &n), 0);
        ck_assert_uint_eq(n, 2);
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(!changes[i].runtime, "%s was not applied", changes[i].key);
}
END_TEST

START_TEST(test_json_round_trip)
{
        _cleanup_(config_freep) Config *c =
                load("{\"socket_path\": \"/tmp/k.sock\", \"socket_mode\": \"0600\","
                     " \"memory_size\": \"1G\", \"allow_uids\": [1, 2], \"log_level\": \"notice\","
                     " \"metrics_listen\": \"[::1]:9100\", \"copy_threads\": 3,"
                     " \"control_nice\": \"off\", \"copy_streaming\": false,"
                     " \"devices\": [{\"device_id\": 4, \"transport\": \"rdma\","
                     " \"rdma_device\": \"mlx5_0\", \"port\": 2, \"netdev\": \"eth1\","
                     " \"address\": \"10.0.0.4\"}],"
                     " \"limits\": {\"max_clients\": 9, \"max_region_size\": \"2G\"}}");
        _cleanup_(config_freep) Config *back = NULL;
        _cleanup_free_ ConfigChange *changes = NULL;
        _cleanup_free_ char *text = NULL, *error = NULL;
        json_t *j;
        size_t n = 0;

        j = config_to_json(c);
        ck_assert_ptr_nonnull(j);
        ck_assert_str_eq(json_string_value(json_object_get(j, "socket_mode")), "0600");
        ck_assert_int_eq(json_integer_value(json_object_get(j, "memory_size")), 1 << 30);
        ck_assert_str_eq(json_string_value(json_object_get(j, "control_nice")), "off");
        ck_assert(json_is_false(json_object_get(j, "copy_streaming")));
        ck_assert_int_eq(
                json_integer_value(json_object_get(json_object_get(j, "limits"), "max_clients")),
                9);
        text = json_dumps(j, 0);
        json_decref(j);
        ck_assert_ptr_nonnull(text);

        /* The effective configuration is itself a config file that means the same. */
        ck_assert_int_eq(config_new(&back), 0);
        ck_assert_msg(config_load_string(back, text, &error) == 0, "%s: %s", text, error);
        ck_assert_int_eq(config_diff(c, back, &changes, &n), 0);
        ck_assert_msg(n == 0, "%zu keys differ after the round trip, first %s", n,
                      n ? changes[0].key : "");
}
END_TEST

static Suite *config_ops_suite(void)
{
        Suite *s = suite_create("config-ops");
        TCase *tc = tcase_create("metrics_listen");

        tcase_add_test(tc, test_metrics_listen_values);
        tcase_add_test(tc, test_metrics_listen_key);
        suite_add_tcase(s, tc);
        tc = tcase_create("reload");
        tcase_add_test(tc, test_diff);
        tcase_add_test(tc, test_apply_runtime);
        tcase_add_test(tc, test_json_round_trip);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(config_ops_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
