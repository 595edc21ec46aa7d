/* SPDX-License-Identifier: MIT */
/* Unit tests for the daemon configuration: defaults, the JSON file, size strings and flags. */

#include <check.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <unistd.h>

#include "tests/unit/config-fixture.h"
#include "daemon/config-internal.h"
#include "daemon/config.h"
#include "common/log.h"
#include <kvdist/kvdist-version.h>
#include "kvdist-config.h"
#include "common/macro.h"

START_TEST(test_defaults)
{
        _cleanup_(config_freep) Config *c = new_config();
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

        ck_assert_uint_eq(c->socket_mode, 0660);
        ck_assert_uint_eq(c->n_allow_uids, 0);
        ck_assert_uint_eq(c->n_allow_gids, 0);
        ck_assert_uint_eq(c->memory_size, 256 * MIB);
        ck_assert_uint_eq(c->page_shift, 16);
        ck_assert_uint_eq(c->sync_kv_timeout_ms, 1000);
        ck_assert_uint_eq(c->copy_threads, MIN(4, MAX(1, ncpu)));
        ck_assert_int_eq(c->log_level, LOG_INFO);
        ck_assert_int_eq(c->control_nice, -10);
        ck_assert(c->copy_streaming);
        ck_assert_uint_eq(c->n_devices, 0);
        ck_assert_ptr_null(c->devices);
        ck_assert_ptr_null(config_find_device(c, 0));
        ck_assert_uint_eq(c->limits.max_clients, 64);
        ck_assert_uint_eq(c->limits.max_regions_per_client, 256);
        ck_assert_uint_eq(c->limits.max_region_size, 64 * GIB);
        ck_assert_uint_eq(c->limits.max_caches_per_client, 4096);
        ck_assert_uint_eq(c->limits.max_keys_per_client, 65536);
        ck_assert_uint_eq(c->limits.max_tensor_addrs, 240);
        ck_assert_uint_eq(c->limits.max_inflight_per_client, 256);
        ck_assert_uint_eq(c->limits.max_frame_size, 16 * MIB);
        ck_assert_uint_eq(c->limits.max_blocks_per_transfer, 1048576);

        if (geteuid() == 0)
                ck_assert_str_eq(c->socket_path, "/run/kvdist/kvdist.sock");
}
END_TEST

START_TEST(test_default_socket_path)
{
        _cleanup_free_ char *with_xdg = NULL, *without = NULL, *expect = NULL;

        ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
        with_xdg = config_default_socket_path();
        ck_assert_int_eq(unsetenv("XDG_RUNTIME_DIR"), 0);
        without = config_default_socket_path();
        ck_assert_ptr_nonnull(with_xdg);
        ck_assert_ptr_nonnull(without);

        if (geteuid() == 0) {
                ck_assert_str_eq(with_xdg, "/run/kvdist/kvdist.sock");
                ck_assert_str_eq(without, "/run/kvdist/kvdist.sock");
        } else {
                ck_assert_str_eq(with_xdg, "/run/user/4242/kvdist/kvdist.sock");
                ck_assert_int_ge(
                        asprintf(&expect, "/tmp/kvdist-%u/kvdist.sock", (unsigned)geteuid()), 0);
                ck_assert_str_eq(without, expect);
        }
}
END_TEST

START_TEST(test_round_trip_top_level)
{
        _cleanup_(config_freep) Config *c = new_config();

        load_ok(c, "{\"socket_path\": \"/tmp/kvd-test/x.sock\"}");
        ck_assert_str_eq(c->socket_path, "/tmp/kvd-test/x.sock");

        load_ok(c, "{\"socket_mode\": \"0600\"}");
        ck_assert_uint_eq(c->socket_mode, 0600);
        load_ok(c, "{\"socket_mode\": \"777\"}");
        ck_assert_uint_eq(c->socket_mode, 0777);
        load_ok(c, "{\"socket_mode\": \"0\"}");
        ck_assert_uint_eq(c->socket_mode, 0);

        load_ok(c, "{\"allow_uids\": [0, 1000, 4294967294]}");
        ck_assert_uint_eq(c->n_allow_uids, 3);
        ck_assert_uint_eq(c->allow_uids[0], 0);
        ck_assert_uint_eq(c->allow_uids[1], 1000);
        ck_assert_uint_eq(c->allow_uids[2], 4294967294u);
        load_ok(c, "{\"allow_gids\": [27, 100]}");
        ck_assert_uint_eq(c->n_allow_gids, 2);
        ck_assert_uint_eq(c->allow_gids[0], 27);
        ck_assert_uint_eq(c->allow_gids[1], 100);
        /* A file that sets a list replaces it; an empty one means "any" again. */
        load_ok(c, "{\"allow_uids\": [], \"allow_gids\": [5]}");
        ck_assert_uint_eq(c->n_allow_uids, 0);
        ck_assert_uint_eq(c->n_allow_gids, 1);
        ck_assert_uint_eq(c->allow_gids[0], 5);

        load_ok(c, "{\"memory_size\": 0}");
        ck_assert_uint_eq(c->memory_size, 0);
        load_ok(c, "{\"memory_size\": 1073741824}");
        ck_assert_uint_eq(c->memory_size, GIB);
        load_ok(c, "{\"memory_size\": \"1T\"}");
        ck_assert_uint_eq(c->memory_size, TIB);

        load_ok(c, "{\"page_shift\": 12}");
        ck_assert_uint_eq(c->page_shift, 12);
        load_ok(c, "{\"page_shift\": 30}");
        ck_assert_uint_eq(c->page_shift, 30);

        load_ok(c, "{\"sync_kv_timeout_ms\": 1}");
        ck_assert_uint_eq(c->sync_kv_timeout_ms, 1);
        load_ok(c, "{\"sync_kv_timeout_ms\": 2147483647}");
        ck_assert_uint_eq(c->sync_kv_timeout_ms, INT32_MAX);

        load_ok(c, "{\"copy_threads\": 1}");
        ck_assert_uint_eq(c->copy_threads, 1);
        load_ok(c, "{\"copy_threads\": \"auto\"}");
        ck_assert_uint_eq(c->copy_threads, MIN(4, MAX(1, sysconf(_SC_NPROCESSORS_ONLN))));
        load_ok(c, "{\"copy_threads\": 64}");
        ck_assert_uint_eq(c->copy_threads, 64);

        load_ok(c, "{\"control_nice\": -20}");
        ck_assert_int_eq(c->control_nice, -20);
        load_ok(c, "{\"control_nice\": 19}");
        ck_assert_int_eq(c->control_nice, 19);
        load_ok(c, "{\"control_nice\": \"off\"}");
        ck_assert_int_eq(c->control_nice, CONTROL_NICE_OFF);

        load_ok(c, "{\"copy_streaming\": false}");
        ck_assert(!c->copy_streaming);
        load_ok(c, "{\"copy_streaming\": true}");
        ck_assert(c->copy_streaming);

        load_ok(c, "{\"log_level\": \"error\"}");
        ck_assert_int_eq(c->log_level, LOG_ERR);
        load_ok(c, "{\"log_level\": \"warning\"}");
        ck_assert_int_eq(c->log_level, LOG_WARNING);
        load_ok(c, "{\"log_level\": \"notice\"}");
        ck_assert_int_eq(c->log_level, LOG_NOTICE);
        load_ok(c, "{\"log_level\": \"debug\"}");
        ck_assert_int_eq(c->log_level, LOG_DEBUG);
        load_ok(c, "{\"log_level\": \"info\"}");
        ck_assert_int_eq(c->log_level, LOG_INFO);

        /* Keys a document does not name keep their values. */
        ck_assert_str_eq(c->socket_path, "/tmp/kvd-test/x.sock");
        ck_assert_uint_eq(c->socket_mode, 0);
        ck_assert_uint_eq(c->memory_size, TIB);
        ck_assert_uint_eq(c->page_shift, 30);
        ck_assert_uint_eq(c->copy_threads, 64);
}
END_TEST

START_TEST(test_round_trip_limits)
{
        _cleanup_(config_freep) Config *c = new_config();

        load_ok(c, "{\"limits\": {"
                   "\"max_clients\": 7,"
                   "\"max_regions_per_client\": 8,"
                   "\"max_region_size\": \"3G\","
                   "\"max_caches_per_client\": 9,"
                   "\"max_keys_per_client\": 10,"
                   "\"max_tensor_addrs\": 11,"
                   "\"max_inflight_per_client\": 12,"
                   "\"max_frame_size\": 8192,"
                   "\"max_blocks_per_transfer\": 4294967295}}");
        ck_assert_uint_eq(c->limits.max_clients, 7);
        ck_assert_uint_eq(c->limits.max_regions_per_client, 8);
        ck_assert_uint_eq(c->limits.max_region_size, 3 * GIB);
        ck_assert_uint_eq(c->limits.max_caches_per_client, 9);
        ck_assert_uint_eq(c->limits.max_keys_per_client, 10);
        ck_assert_uint_eq(c->limits.max_tensor_addrs, 11);
        ck_assert_uint_eq(c->limits.max_inflight_per_client, 12);
        ck_assert_uint_eq(c->limits.max_frame_size, 8192);
        ck_assert_uint_eq(c->limits.max_blocks_per_transfer, UINT32_MAX);

        /* One key of "limits" leaves the others as they were. */
        load_ok(c, "{\"limits\": {\"max_frame_size\": \"256M\", \"max_region_size\": 4096}}");
        ck_assert_uint_eq(c->limits.max_frame_size, 256 * MIB);
        ck_assert_uint_eq(c->limits.max_region_size, 4096);
        ck_assert_uint_eq(c->limits.max_clients, 7);
        ck_assert_uint_eq(c->limits.max_tensor_addrs, 11);

        load_ok(c, "{\"limits\": {\"max_clients\": 65536, \"max_tensor_addrs\": 240}}");
        ck_assert_uint_eq(c->limits.max_clients, 65536);
        ck_assert_uint_eq(c->limits.max_tensor_addrs, 240);
        load_ok(c, "{\"limits\": {}}");
        ck_assert_uint_eq(c->limits.max_clients, 65536);
}
END_TEST

START_TEST(test_round_trip_devices)
{
        _cleanup_(config_freep) Config *c = new_config();
        const DeviceConfig *d;

        load_ok(c, "{\"devices\": ["
                   "{\"device_id\": 0, \"transport\": \"rdma\", \"rdma_device\": \"mlx5_0\","
                   " \"port\": 2, \"gid_index\": 3, \"netdev\": \"eth0\"},"
                   "{\"device_id\": 7},"
                   "{\"device_id\": 2147483647, \"transport\": \"tcp\", \"gid_index\": -1,"
                   " \"port\": 255}]}");
        ck_assert_uint_eq(c->n_devices, 3);

        d = config_find_device(c, 0);
        ck_assert_ptr_eq(d, &c->devices[0]);
        ck_assert_int_eq(d->transport, TRANSPORT_KIND_RDMA);
        ck_assert_str_eq(d->rdma_device, "mlx5_0");
        ck_assert_uint_eq(d->port, 2);
        ck_assert_int_eq(d->gid_index, 3);
        ck_assert_str_eq(d->netdev, "eth0");

        d = config_find_device(c, 7);
        ck_assert_ptr_eq(d, &c->devices[1]);
        ck_assert_int_eq(d->transport, TRANSPORT_KIND_AUTO);
        ck_assert_ptr_null(d->rdma_device);
        ck_assert_uint_eq(d->port, 1);
        ck_assert_int_eq(d->gid_index, -1);
        ck_assert_ptr_null(d->netdev);

        d = config_find_device(c, INT32_MAX);
        ck_assert_ptr_eq(d, &c->devices[2]);
        ck_assert_int_eq(d->transport, TRANSPORT_KIND_TCP);
        ck_assert_uint_eq(d->port, 255);

        ck_assert_ptr_null(config_find_device(c, 1));
        ck_assert_ptr_null(config_find_device(c, -1));

        /* No address unless one is given. */
        for (size_t i = 0; i < c->n_devices; i++)
                ck_assert_ptr_null(c->devices[i].address);

        /* A new list replaces the old one entirely. */
        load_ok(c, "{\"devices\": [{\"device_id\": 1}]}");
        ck_assert_uint_eq(c->n_devices, 1);
        ck_assert_ptr_null(config_find_device(c, 0));
        ck_assert_ptr_nonnull(config_find_device(c, 1));
        load_ok(c, "{\"devices\": []}");
        ck_assert_uint_eq(c->n_devices, 0);
        ck_assert_ptr_null(config_find_device(c, 1));
}
END_TEST

/* A device's own peer address (HCCL's device_ip): kept canonical, port 7400 when left out. */
START_TEST(test_device_address)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *copy = NULL;

        load_ok(c, "{\"devices\": ["
                   "{\"device_id\": 0, \"address\": \"10.0.0.1\"},"
                   "{\"device_id\": 1, \"address\": \"10.0.0.1:7401\"},"
                   "{\"device_id\": 2, \"address\": \"[fd00::2]:80\"},"
                   "{\"device_id\": 3}]}");
        ck_assert_str_eq(config_find_device(c, 0)->address, "10.0.0.1:7400");
        ck_assert_str_eq(config_find_device(c, 1)->address, "10.0.0.1:7401");
        ck_assert_str_eq(config_find_device(c, 2)->address, "[fd00::2]:80");
        ck_assert_ptr_null(config_find_device(c, 3)->address);
        ck_assert_ptr_eq(transport_config_find_address(c->devices, c->n_devices, "10.0.0.1:7401"),
                         config_find_device(c, 1));
        ck_assert_ptr_null(transport_config_find_address(c->devices, c->n_devices, "10.0.0.1"));
        ck_assert_ptr_null(transport_config_find_address(c->devices, c->n_devices, NULL));
        /* A copy has its own strings. */
        ck_assert_int_eq(config_dup(c, &copy), 0);
        ck_assert_str_eq(copy->devices[2].address, "[fd00::2]:80");
        ck_assert_ptr_ne(copy->devices[2].address, c->devices[2].address);

        /* Two devices at one address, the default port spelt out or not. */
        load_fails_with("{\"devices\": [{\"device_id\": 0, \"address\": \"10.0.0.1\"},"
                        " {\"device_id\": 1, \"address\": \"10.0.0.1:7400\"}]}",
                        "devices[1].address: duplicate address 10.0.0.1:7400 (also in devices[0])");
        load_fails_with("{\"devices\": [{\"device_id\": 0, \"address\": \"node-1\"}]}",
                        "devices[0].address: \"node-1\" is not \"ip\", \"ip:port\"");
        load_fails_with("{\"devices\": [{\"device_id\": 0, \"address\": \"10.0.0.1:0\"}]}",
                        "devices[0].address: \"10.0.0.1:0\" is not");
        load_fails_with("{\"devices\": [{\"device_id\": 0, \"address\": \"\"}]}",
                        "devices[0].address: \"\" is not");
        load_fails_with("{\"devices\": [{\"device_id\": 0, \"address\": 7400}]}",
                        "devices[0].address: expected a string");
        /* A failed load leaves the map as it was. */
        {
                _cleanup_free_ char *error = NULL;

                ck_assert_int_eq(
                        config_load_string(c,
                                           "{\"devices\": [{\"device_id\": 0, "
                                           "\"address\": \"10.0.0.9\"}, {\"device_id\": 1, "
                                           "\"address\": \"10.0.0.9\"}]}",
                                           &error),
                        -EINVAL);
        }
        ck_assert_str_eq(config_find_device(c, 0)->address, "10.0.0.1:7400");
}
END_TEST

START_TEST(test_size_strings)
{
        static const struct {
                const char *s;
                uint64_t v;
        } good[] = {
                {"0", 0},
                {"4096", 4096},
                {"1K", 1024},
                {"4k", 4096},
                {"256M", 256 * MIB},
                {"256m", 256 * MIB},
                {"2G", 2 * GIB},
                {"1T", TIB},
                {"1GiB", GIB},
                {"64KiB", 64 * 1024},
                {"1024G", TIB},
                {"007M", 7 * MIB},
        };
        static const char *const bad[] = {
                "",   "M",   "-1",  "+1",  " 1M",  "1M ", "1.5G",
                "1X", "1MB", "1Mi", "1KK", "0x10", "1 M", "1e6",
        };
        _cleanup_(config_freep) Config *c = new_config();

        for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
                _cleanup_free_ char *json = NULL;

                ck_assert_int_ge(asprintf(&json, "{\"memory_size\": \"%s\"}", good[i].s), 0);
                load_ok(c, json);
                ck_assert_msg(c->memory_size == good[i].v, "\"%s\" gave %llu", good[i].s,
                              (unsigned long long)c->memory_size);
        }
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_free_ char *json = NULL, *msg = NULL;

                ck_assert_int_ge(asprintf(&json, "{\"memory_size\": \"%s\"}", bad[i]), 0);
                ck_assert_int_ge(asprintf(&msg,
                                          "memory_size: invalid size \"%s\", expected bytes or a "
                                          "number with a K, M, G or T suffix",
                                          bad[i]),
                                 0);
                load_fails(json, msg);
        }

        /* Above the range, or too large to represent at all. */
        load_fails("{\"memory_size\": \"1025G\"}", "memory_size: must be in [0, 1T]");
        load_fails("{\"memory_size\": \"99999999999999999999\"}",
                   "memory_size: must be in [0, 1T]");
        load_fails("{\"memory_size\": \"16777216T\"}", "memory_size: must be in [0, 1T]");
        load_fails("{\"memory_size\": 1099511627777}", "memory_size: must be in [0, 1T]");
        load_fails("{\"memory_size\": -1}", "memory_size: must be in [0, 1T]");
        load_fails("{\"limits\": {\"max_frame_size\": \"4095\"}}",
                   "limits.max_frame_size: must be in [4K, 256M]");
        load_fails("{\"limits\": {\"max_frame_size\": \"257M\"}}",
                   "limits.max_frame_size: must be in [4K, 256M]");
        load_fails("{\"limits\": {\"max_region_size\": 0}}",
                   "limits.max_region_size: must be in [1, 1T]");
        /* Only sizes take size strings. */
        load_fails("{\"page_shift\": \"16\"}", "page_shift: expected an integer");
        load_fails("{\"limits\": {\"max_clients\": \"64\"}}",
                   "limits.max_clients: expected an integer");
}
END_TEST

START_TEST(test_unknown_keys)
{
        load_fails("{\"socket_pth\": \"/x\"}", "socket_pth: unknown key");
        load_fails("{\"limits\": {\"max_clent\": 3}}", "limits.max_clent: unknown key");
        load_fails("{\"limits\": {\"per_user\": {\"max_conns\": 3}}}",
                   "limits.per_user.max_conns: unknown key");
        load_fails("{\"limits\": {\"per_user\": {\"max_clusters\": 0}}}",
                   "limits.per_user.max_clusters: must be an integer in [1, 65536]");
        load_fails("{\"limits\": {\"per_user\": 3}}", "limits.per_user: expected an object");
        load_fails("{\"devices\": [{\"device_id\": 1}, {\"device_id\": 2, \"prot\": 1}]}",
                   "devices[1].prot: unknown key");
        /* Keys are case-sensitive. */
        load_fails("{\"Memory_Size\": 1}", "Memory_Size: unknown key");
        /* The first bad key in document order is the one reported. */
        load_fails("{\"page_shift\": 14, \"zzz\": 1, \"aaa\": 2}", "zzz: unknown key");
}
END_TEST

START_TEST(test_wrong_types)
{
        load_fails("{\"socket_path\": 5}", "socket_path: expected a string");
        load_fails("{\"socket_mode\": 660}",
                   "socket_mode: expected a string of octal digits like \"0660\"");
        load_fails("{\"socket_mode\": \"0x1b0\"}",
                   "socket_mode: expected a string of octal digits like \"0660\"");
        load_fails("{\"socket_mode\": \"0680\"}",
                   "socket_mode: expected a string of octal digits like \"0660\"");
        load_fails("{\"socket_mode\": \"\"}",
                   "socket_mode: expected a string of octal digits like \"0660\"");
        load_fails("{\"allow_uids\": 0}", "allow_uids: expected an array of integers");
        load_fails("{\"allow_uids\": [1, \"root\"]}", "allow_uids[1]: expected an integer");
        load_fails("{\"allow_gids\": {}}", "allow_gids: expected an array of integers");
        load_fails("{\"memory_size\": true}",
                   "memory_size: expected an integer or a size string like \"256M\"");
        load_fails("{\"memory_size\": 1.5}",
                   "memory_size: expected an integer or a size string like \"256M\"");
        load_fails("{\"memory_size\": null}",
                   "memory_size: expected an integer or a size string like \"256M\"");
        load_fails("{\"page_shift\": 16.0}", "page_shift: expected an integer");
        load_fails("{\"sync_kv_timeout_ms\": [1]}", "sync_kv_timeout_ms: expected an integer");
        load_fails("{\"copy_threads\": false}", "copy_threads: expected an integer or \"auto\"");
        load_fails("{\"copy_threads\": \"4\"}", "copy_threads: expected an integer or \"auto\"");
        load_fails("{\"log_level\": 7}",
                   "log_level: expected one of \"error\", \"warning\", \"notice\", \"info\", "
                   "\"debug\"");
        load_fails("{\"log_level\": \"verbose\"}",
                   "log_level: expected one of \"error\", \"warning\", \"notice\", \"info\", "
                   "\"debug\"");
        load_fails("{\"devices\": {}}", "devices: expected an array of objects");
        load_fails("{\"devices\": [3]}", "devices[0]: expected an object");
        load_fails("{\"devices\": [{\"device_id\": \"0\"}]}",
                   "devices[0].device_id: expected an integer");
        load_fails("{\"devices\": [{\"device_id\": 0, \"transport\": \"ib\"}]}",
                   "devices[0].transport: expected one of \"auto\", \"tcp\", \"rdma\", "
                   "\"null\"");
        load_fails("{\"devices\": [{\"device_id\": 0, \"rdma_device\": 1}]}",
                   "devices[0].rdma_device: expected a string");
        load_fails("{\"devices\": [{\"device_id\": 0, \"netdev\": null}]}",
                   "devices[0].netdev: expected a string");
        load_fails("{\"devices\": [{\"device_id\": 0, \"port\": \"1\"}]}",
                   "devices[0].port: expected an integer");
        load_fails("{\"limits\": []}", "limits: expected an object");
        load_fails("{\"limits\": {\"max_frame_size\": false}}",
                   "limits.max_frame_size: expected an integer or a size string like \"256M\"");
        /* An embedded NUL would silently shorten a C string; jansson refuses it already. */
        load_fails_with("{\"socket_path\": \"/tmp/a\\u0000b\"}", "line 1, column ");
}
END_TEST

START_TEST(test_out_of_range)
{
        load_fails("{\"socket_path\": \"\"}", "socket_path: must be 1..107 characters long");
        load_fails("{\"socket_mode\": \"1777\"}", "socket_mode: must be in [0000, 0777]");
        load_fails("{\"allow_uids\": [-1]}",
                   "allow_uids[0]: must be an integer in [0, 4294967294]");
        load_fails("{\"allow_gids\": [0, 4294967295]}",
                   "allow_gids[1]: must be an integer in [0, 4294967294]");
        load_fails("{\"page_shift\": 11}", "page_shift: must be an integer in [12, 30]");
        load_fails("{\"page_shift\": 31}", "page_shift: must be an integer in [12, 30]");
        load_fails("{\"sync_kv_timeout_ms\": 0}",
                   "sync_kv_timeout_ms: must be an integer in [1, 2147483647]");
        load_fails("{\"sync_kv_timeout_ms\": 2147483648}",
                   "sync_kv_timeout_ms: must be an integer in [1, 2147483647]");
        load_fails("{\"copy_threads\": 0}",
                   "copy_threads: must be an integer in [1, 64] or \"auto\"");
        load_fails("{\"copy_threads\": 65}",
                   "copy_threads: must be an integer in [1, 64] or \"auto\"");
        load_fails("{\"control_nice\": -21}",
                   "control_nice: must be an integer in [-20, 19] or \"off\"");
        load_fails("{\"control_nice\": 20}",
                   "control_nice: must be an integer in [-20, 19] or \"off\"");
        load_fails("{\"control_nice\": \"-5\"}",
                   "control_nice: must be an integer in [-20, 19] or \"off\"");
        load_fails("{\"control_nice\": -2147483649}",
                   "control_nice: must be an integer in [-20, 19] or \"off\"");
        load_fails("{\"copy_streaming\": \"off\"}", "copy_streaming: expected true or false");
        load_fails("{\"copy_streaming\": 0}", "copy_streaming: expected true or false");
        load_fails("{\"limits\": {\"max_clients\": 0}}",
                   "limits.max_clients: must be an integer in [1, 65536]");
        load_fails("{\"limits\": {\"max_clients\": 65537}}",
                   "limits.max_clients: must be an integer in [1, 65536]");
        load_fails("{\"limits\": {\"max_tensor_addrs\": 241}}",
                   "limits.max_tensor_addrs: must be an integer in [1, 240]");
        load_fails("{\"limits\": {\"max_regions_per_client\": 4294967296}}",
                   "limits.max_regions_per_client: must be an integer in [1, 4294967295]");
        load_fails("{\"limits\": {\"max_inflight_per_client\": -5}}",
                   "limits.max_inflight_per_client: must be an integer in [1, 4294967295]");
        load_fails("{\"devices\": [{\"device_id\": -1}]}",
                   "devices[0].device_id: must be an integer in [0, 2147483647]");
        load_fails("{\"devices\": [{\"device_id\": 0, \"port\": 0}]}",
                   "devices[0].port: must be an integer in [1, 255]");
        load_fails("{\"devices\": [{\"device_id\": 0, \"port\": 256}]}",
                   "devices[0].port: must be an integer in [1, 255]");
        load_fails("{\"devices\": [{\"device_id\": 0, \"gid_index\": -2}]}",
                   "devices[0].gid_index: must be an integer in [-1, 255]");
        load_fails("{\"devices\": [{\"device_id\": 0, \"rdma_device\": \"\"}]}",
                   "devices[0].rdma_device: must be 1..63 characters long");
        load_fails("{\"devices\": [{\"device_id\": 0, \"netdev\": \"0123456789abcdef\"}]}",
                   "devices[0].netdev: must be 1..15 characters long");
}
END_TEST

START_TEST(test_long_socket_path)
{
        _cleanup_(config_freep) Config *c = new_config();
        char path[109], json[200];

        /* sun_path holds 108 bytes with the NUL: 107 characters fit, 108 do not. */
        memset(path, 'a', sizeof(path));
        path[0] = '/';
        path[107] = '\0';
        snprintf(json, sizeof(json), "{\"socket_path\": \"%s\"}", path);
        load_ok(c, json);
        ck_assert_str_eq(c->socket_path, path);
        path[107] = 'a';
        path[108] = '\0';
        snprintf(json, sizeof(json), "{\"socket_path\": \"%s\"}", path);
        load_fails(json, "socket_path: must be 1..107 characters long");
}
END_TEST

START_TEST(test_devices_errors)
{
        _cleanup_free_ char *json = NULL;
        size_t len = 0;
        FILE *f;

        load_fails("{\"devices\": [{\"device_id\": 3}, {\"device_id\": 4}, {\"device_id\": 3}]}",
                   "devices[2].device_id: duplicate device_id 3 (also in devices[0])");
        load_fails("{\"devices\": [{\"device_id\": 3}, {\"port\": 2}]}",
                   "devices[1]: missing required key \"device_id\"");

        /* The map is bounded. */
        f = open_memstream(&json, &len);
        ck_assert_ptr_nonnull(f);
        fputs("{\"devices\": [", f);
        for (int i = 0; i < 1025; i++)
                fprintf(f, "%s{\"device_id\": %d}", i ? "," : "", i);
        fputs("]}", f);
        ck_assert_int_eq(fclose(f), 0);
        load_fails(json, "devices: at most 1024 entries");
}
END_TEST

START_TEST(test_json_syntax)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *error = NULL, *error2 = NULL, *error3 = NULL;

        ck_assert_int_eq(
                config_load_string(c, "{\n  \"page_shift\": 16,\n  \"copy_threads\" 2\n}", &error),
                -EINVAL);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strncmp(error, "line 3, column ", 15) == 0, "got \"%s\"", error);

        ck_assert_int_eq(
                config_load_string(c, "{\"page_shift\": 14,\n\"page_shift\": 15}", &error2),
                -EINVAL);
        ck_assert_ptr_nonnull(error2);
        ck_assert_msg(strncmp(error2, "line 2, column ", 15) == 0 && strstr(error2, "duplicate"),
                      "got \"%s\"", error2);
        ck_assert_uint_eq(c->page_shift, 16);

        /* Duplicates are refused inside nested objects too. */
        load_fails_with("{\"limits\": {\"max_clients\": 1, \"max_clients\": 2}}", "duplicate");
        load_fails_with("", "line 1");
        load_fails_with("{", "line 1");
        load_fails_with("{} {}", "line 1");
        load_fails_with("[]", "expected a JSON object at the top level");

        /* ret_error may be NULL. */
        ck_assert_int_eq(config_load_string(c, "{\"nope\": 1}", NULL), -EINVAL);
        ck_assert_int_eq(config_load_string(c, "{}", &error3), 0);
        ck_assert_ptr_null(error3);
}
END_TEST

START_TEST(test_failure_keeps_config)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *before = new_config();
        static const char *const setup =
                "{\"socket_path\": \"/tmp/a.sock\", \"allow_uids\": [1, 2], \"allow_gids\": [3],"
                " \"devices\": [{\"device_id\": 5, \"rdma_device\": \"rxe0\","
                " \"netdev\": \"veth0\"}],"
                " \"page_shift\": 20}";
        static const char *const bad[] = {
                /* Valid keys first, a bad one last: nothing may stick. */
                ("{\"socket_path\": \"/tmp/b.sock\", \"allow_uids\": [], \"devices\": [],"
                 " \"memory_size\": \"1G\", \"limits\": {\"max_clients\": 3}, \"page_shift\": 99}"),
                "{\"devices\": [{\"device_id\": 1, \"rdma_device\": \"x\"}, {\"device_id\": 1}]}",
                "{\"allow_gids\": [1, 2, -3]}",
                "{\"limits\": {\"max_clients\": 3, \"max_frame_size\": 1}}",
        };

        load_ok(c, setup);
        load_ok(before, setup);
        ck_assert(config_equal(c, before, true));
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_free_ char *error = NULL;

                ck_assert_int_eq(config_load_string(c, bad[i], &error), -EINVAL);
                ck_assert_ptr_nonnull(error);
                ck_assert_msg(config_equal(c, before, true), "%s changed the config", bad[i]);
        }
        ck_assert_str_eq(c->devices[0].rdma_device, "rxe0");
}
END_TEST

/* Writes @text to a new temporary file; returns its path. */
static char *write_temp(const char *text)
{
        char *path = strdup("/tmp/kvdist-test-config-XXXXXX");
        int fd;

        ck_assert_ptr_nonnull(path);
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        return path;
}

START_TEST(test_load_file)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *good = NULL, *bad = NULL, *syntax = NULL;
        _cleanup_free_ char *e1 = NULL, *e2 = NULL, *e3 = NULL, *expect = NULL;

        good = write_temp(
                "{\n  \"memory_size\": \"512M\",\n  \"limits\": {\"max_clients\": 9}\n}\n");
        ck_assert_int_eq(config_load_file(c, good, &e1), 0);
        ck_assert_uint_eq(c->memory_size, 512 * MIB);
        ck_assert_uint_eq(c->limits.max_clients, 9);

        bad = write_temp("{\"limits\": {\"max_clent\": 9}}");
        ck_assert_int_eq(config_load_file(c, bad, &e1), -EINVAL);
        ck_assert_int_ge(asprintf(&expect, "%s: limits.max_clent: unknown key", bad), 0);
        ck_assert_str_eq(e1, expect);
        free(expect);

        syntax = write_temp("{\n\"memory_size\": 1,\n\n,}");
        ck_assert_int_eq(config_load_file(c, syntax, &e2), -EINVAL);
        ck_assert_int_ge(asprintf(&expect, "%s: line 4, column ", syntax), 0);
        ck_assert_msg(strncmp(e2, expect, strlen(expect)) == 0, "got \"%s\"", e2);
        ck_assert_uint_eq(c->memory_size, 512 * MIB);

        ck_assert_int_eq(config_load_file(c, "/nonexistent/kvdistd.json", &e3), -ENOENT);
        ck_assert_ptr_nonnull(e3);
        ck_assert_ptr_nonnull(strstr(e3, "/nonexistent/kvdistd.json"));

        unlink(good);
        unlink(bad);
        unlink(syntax);
}
END_TEST

/*
 * config/kvdistd.json from the source tree: $KVDIST_SOURCE_ROOT when set, else found from
 * __FILE__, which meson gives relative to the build root ("../tests/unit/test-config.c"). meson
 * runs tests in the build root; run by hand from elsewhere, the build root is found from this
 * executable's place in it (tests/unit/).
 */
static char *default_config_path(void)
{
        const char *root = getenv("KVDIST_SOURCE_ROOT");
        _cleanup_free_ char *file = strdup(__FILE__);
        char exe[PATH_MAX];
        ssize_t n;
        char *p;

        ck_assert_ptr_nonnull(file);
        if (root) {
                ck_assert_int_ge(asprintf(&p, "%s/config/kvdistd.json", root), 0);
                return p;
        }
        ck_assert_int_ge(asprintf(&p, "%s/../../config/kvdistd.json", dirname(file)), 0);
        if (p[0] == '/' || access(p, R_OK) == 0)
                return p;
        free(p);

        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        ck_assert_int_gt(n, 0);
        exe[n] = '\0';
        free(file);
        file = strdup(__FILE__);
        ck_assert_ptr_nonnull(file);
        ck_assert_int_ge(
                asprintf(&p, "%s/../../%s/../../config/kvdistd.json", dirname(exe), dirname(file)),
                0);
        return p;
}

START_TEST(test_shipped_config_is_defaults)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *defaults = new_config();
        _cleanup_free_ char *path = default_config_path(), *error = NULL;
        int r;

        /* Start from something else, so that every key must be in the file to match. */
        load_ok(c, "{\"socket_mode\": \"0600\", \"memory_size\": 0, \"page_shift\": 12,"
                   " \"sync_kv_timeout_ms\": 5, \"copy_threads\": 9, \"log_level\": \"debug\","
                   " \"allow_uids\": [1], \"allow_gids\": [2], \"devices\": [{\"device_id\": 1}],"
                   " \"metrics_listen\": \"127.0.0.1:1\","
                   " \"limits\": {\"max_clients\": 1, \"max_regions_per_client\": 1,"
                   " \"max_region_size\": 1, \"max_caches_per_client\": 1,"
                   " \"max_keys_per_client\": 1, \"max_tensor_addrs\": 1,"
                   " \"max_inflight_per_client\": 1, \"max_frame_size\": 4096,"
                   " \"max_blocks_per_transfer\": 1, \"max_links_per_client\": 1,"
                   " \"max_peers\": 1, \"max_notifies_per_client\": 1,"
                   " \"attach_timeout_ms\": 100, \"reserved_connections\": 0,"
                   " \"per_user\": {\"max_connections\": 1, \"max_clusters\": 1,"
                   " \"max_regions\": 1, \"max_region_bytes\": 1, \"max_inflight\": 1,"
                   " \"max_notifies\": 1}},"
                   " \"listen_ip_info\": \"127.0.0.1:1\", \"cluster_key_file\": \"/k\","
                   " \"heartbeat_interval_ms\": 10, \"heartbeat_timeout_ms\": 50,"
                   " \"tcp\": {\"streams\": 1, \"crc\": true, \"chunk_size\": 4096},"
                   " \"rdma\": {\"qps\": 1}}");
        r = config_load_file(c, path, &error);
        ck_assert_msg(r == 0, "%s: %d %s", path, r, error ? error : "");
        ck_assert(config_equal(c, defaults, false));
        ck_assert_str_eq(c->socket_path, "/run/kvdist/kvdist.sock");
}
END_TEST

START_TEST(test_argv_flags)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *error = NULL;

        ck_assert_int_eq(parse(c, &error, NULL), 0);
        ck_assert_int_eq(parse(c, &error, "--socket", "/tmp/s.sock", "--memory-size", "1G",
                               "--page-shift", "20", "--sync-kv-timeout", "2500", "--copy-threads",
                               "3", "--log-level", "debug", "--max-clients", "100",
                               "--max-frame-size=64M", NULL),
                         0);
        ck_assert_ptr_null(error);
        ck_assert_str_eq(c->socket_path, "/tmp/s.sock");
        ck_assert_uint_eq(c->memory_size, GIB);
        ck_assert_uint_eq(c->page_shift, 20);
        ck_assert_uint_eq(c->sync_kv_timeout_ms, 2500);
        ck_assert_uint_eq(c->copy_threads, 3);
        ck_assert_int_eq(c->log_level, LOG_DEBUG);
        ck_assert_uint_eq(c->limits.max_clients, 100);
        ck_assert_uint_eq(c->limits.max_frame_size, 64 * MIB);

        /* Called again (optind is reset): the last of repeated flags wins. */
        ck_assert_int_eq(parse(c, &error, "--memory-size", "0", "--memory-size", "4096",
                               "--log-level=error", NULL),
                         0);
        ck_assert_uint_eq(c->memory_size, 4096);
        ck_assert_int_eq(c->log_level, LOG_ERR);
        ck_assert_int_eq(parse(c, &error, "--copy-threads", "auto", NULL), 0);
        ck_assert_uint_eq(c->copy_threads, MIN(4, MAX(1, sysconf(_SC_NPROCESSORS_ONLN))));
        ck_assert_uint_eq(c->page_shift, 20);
}
END_TEST

START_TEST(test_argv_config_precedence)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *path = NULL, *error = NULL;

        path = write_temp("{\"memory_size\": \"1G\", \"page_shift\": 14, \"copy_threads\": 2,"
                          " \"limits\": {\"max_clients\": 10, \"max_frame_size\": \"1M\"}}");

        /* Flags before --config still win over the file. */
        ck_assert_int_eq(parse(c, &error, "--memory-size", "2G", "--max-clients", "20", "--config",
                               path, "--copy-threads", "5", NULL),
                         0);
        ck_assert_uint_eq(c->memory_size, 2 * GIB);
        ck_assert_uint_eq(c->limits.max_clients, 20);
        ck_assert_uint_eq(c->copy_threads, 5);
        /* What only the file sets comes from the file. */
        ck_assert_uint_eq(c->page_shift, 14);
        ck_assert_uint_eq(c->limits.max_frame_size, MIB);

        ck_assert_int_eq(parse(c, &error, "-c", path, NULL), 0);
        ck_assert_uint_eq(c->memory_size, GIB);
        ck_assert_uint_eq(c->limits.max_clients, 10);
        unlink(path);
}
END_TEST

/* Runs config_parse_argv() with stdout redirected; returns what was printed. */
static char *parse_capture_stdout(Config *c, int *ret, char **ret_error, int argc, char **argv)
{
        int fd, saved;
        char *out;
        off_t len;

        fd = memfd_create("stdout", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        fflush(stdout);
        saved = dup(STDOUT_FILENO);
        ck_assert_int_ge(saved, 0);
        ck_assert_int_ge(dup2(fd, STDOUT_FILENO), 0);
        *ret = config_parse_argv(c, argc, argv, ret_error);
        fflush(stdout);
        ck_assert_int_ge(dup2(saved, STDOUT_FILENO), 0);
        close(saved);

        len = lseek(fd, 0, SEEK_END);
        ck_assert_int_ge(len, 0);
        out = calloc(1, (size_t)len + 1);
        ck_assert_ptr_nonnull(out);
        ck_assert_int_eq(pread(fd, out, (size_t)len, 0), len);
        close(fd);
        return out;
}

START_TEST(test_argv_help_version)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *ref = new_config();
        _cleanup_free_ char *help = NULL, *h = NULL, *version = NULL, *out = NULL;
        _cleanup_free_ char *error = NULL;
        char *help_argv[] = {(char *)"kvdistd", (char *)"--help"};
        char *h_argv[] = {(char *)"kvdistd", (char *)"-h"};
        char *version_argv[] = {(char *)"kvdistd", (char *)"--version"};
        char *mixed_argv[] = {
                (char *)"kvdistd",       (char *)"--config", (char *)"/nonexistent.json",
                (char *)"--memory-size", (char *)"1G",       (char *)"--help"};
        int r;

        help = parse_capture_stdout(c, &r, &error, 2, help_argv);
        ck_assert_int_eq(r, 1);
        ck_assert_ptr_nonnull(strstr(help, "Usage: kvdistd [OPTIONS]"));
        ck_assert_ptr_nonnull(strstr(help, "--max-frame-size SIZE"));
        h = parse_capture_stdout(c, &r, &error, 2, h_argv);
        ck_assert_int_eq(r, 1);
        ck_assert_str_eq(h, help);

        version = parse_capture_stdout(c, &r, &error, 2, version_argv);
        ck_assert_int_eq(r, 1);
        ck_assert_str_eq(version, "kvdistd " KVDIST_VERSION "\n");

        /* --help wins over a config that would not load, and changes nothing. */
        out = parse_capture_stdout(c, &r, &error, ARRAY_SIZE(mixed_argv), mixed_argv);
        ck_assert_int_eq(r, 1);
        ck_assert_str_eq(out, help);
        ck_assert_ptr_null(error);
        ck_assert(config_equal(c, ref, true));
}
END_TEST

START_TEST(test_argv_errors)
{
        parse_fails("--copy-threads: expected an integer in [1, 64] or auto", "--copy-threads", "0",
                    NULL);
        parse_fails("--copy-threads: expected an integer in [1, 64] or auto", "--copy-threads",
                    "65", NULL);
        parse_fails("--copy-threads: expected an integer in [1, 64] or auto", "--copy-threads",
                    "4x", NULL);
        parse_fails("--copy-threads: expected an integer in [1, 64] or auto", "--copy-threads", "",
                    NULL);
        parse_fails("--page-shift: expected an integer in [12, 30]", "--page-shift", "8", NULL);
        parse_fails("--sync-kv-timeout: expected an integer in [1, 2147483647]",
                    "--sync-kv-timeout", "99999999999999999999", NULL);
        parse_fails("--max-clients: expected an integer in [1, 65536]", "--max-clients", "-1",
                    NULL);
        parse_fails("--memory-size: expected a size in [0, 1T] (bytes or a number with a K, M, "
                    "G or T suffix)",
                    "--memory-size", "2T", NULL);
        parse_fails("--memory-size: expected a size in [0, 1T] (bytes or a number with a K, M, "
                    "G or T suffix)",
                    "--memory-size", "lots", NULL);
        parse_fails("--max-frame-size: expected a size in [4K, 256M] (bytes or a number with a "
                    "K, M, G or T suffix)",
                    "--max-frame-size", "1K", NULL);
        parse_fails("--log-level: expected one of error, warning, notice, info, debug",
                    "--log-level", "trace", NULL);
        parse_fails("--socket: must be 1..107 characters long", "--socket", "", NULL);
        parse_fails("unknown option '--frobnicate'", "--frobnicate", NULL);
        parse_fails("unknown option '-x'", "-x", NULL);
        parse_fails("--socket: missing argument", "--socket", NULL);
        parse_fails("--config: missing argument", "--config", NULL);
        parse_fails("--help: takes no argument", "--help=yes", NULL);
        parse_fails("unexpected argument 'extra'", "extra", NULL);
        parse_fails("unexpected argument 'extra'", "--page-shift", "14", "extra", NULL);
        /* A good flag does not stick when a later one is bad. */
        parse_fails("--page-shift: expected an integer in [12, 30]", "--memory-size", "1G",
                    "--page-shift", "31", NULL);
}
END_TEST

START_TEST(test_argv_config_errors)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *ref = new_config();
        _cleanup_free_ char *path = NULL, *error = NULL, *error2 = NULL, *expect = NULL;

        path = write_temp("{\"memory_size\": \"lots\"}");
        ck_assert_int_eq(parse(c, &error, "--page-shift", "20", "--config", path, NULL), -EINVAL);
        ck_assert_int_ge(asprintf(&expect,
                                  "%s: memory_size: invalid size \"lots\", expected bytes or a "
                                  "number with a K, M, G or T suffix",
                                  path),
                         0);
        ck_assert_str_eq(error, expect);
        ck_assert(config_equal(c, ref, true));

        ck_assert_int_eq(parse(c, &error2, "--config", "/nonexistent/kvdistd.json", NULL), -ENOENT);
        ck_assert_ptr_nonnull(error2);
        ck_assert_ptr_nonnull(strstr(error2, "/nonexistent/kvdistd.json"));
        unlink(path);
}
END_TEST

START_TEST(test_strings)
{
        ck_assert_str_eq(transport_kind_to_string(TRANSPORT_KIND_AUTO), "auto");
        ck_assert_str_eq(transport_kind_to_string(TRANSPORT_KIND_TCP), "tcp");
        ck_assert_str_eq(transport_kind_to_string(TRANSPORT_KIND_RDMA), "rdma");
        ck_assert_str_eq(transport_kind_to_string(TRANSPORT_KIND_NULL), "null");
        ck_assert_int_eq(transport_kind_from_string("null"), TRANSPORT_KIND_NULL);
        ck_assert_ptr_null(transport_kind_to_string(_TRANSPORT_KIND_MAX));
        ck_assert_ptr_null(transport_kind_to_string(_TRANSPORT_KIND_INVALID));

        for (int l = LOG_ERR; l <= LOG_DEBUG; l++)
                ck_assert_int_eq(log_level_from_string(log_level_to_string(l)), l);
        ck_assert_str_eq(log_level_to_string(LOG_ERR), "error");
        ck_assert_str_eq(log_level_to_string(LOG_CRIT), "crit");
        ck_assert_ptr_null(log_level_to_string(8));
        ck_assert_ptr_null(log_level_to_string(-1));
        ck_assert_int_eq(log_level_from_string("crit"), -EINVAL);
        ck_assert_int_eq(log_level_from_string("INFO"), -EINVAL);
        ck_assert_int_eq(log_level_from_string(""), -EINVAL);
}
END_TEST

static Suite *config_suite(void)
{
        Suite *s = suite_create("config");
        TCase *tc;

        tc = tcase_create("defaults");
        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_default_socket_path);
        tcase_add_test(tc, test_shipped_config_is_defaults);
        tcase_add_test(tc, test_strings);
        suite_add_tcase(s, tc);

        tc = tcase_create("json");
        tcase_add_test(tc, test_round_trip_top_level);
        tcase_add_test(tc, test_round_trip_limits);
        tcase_add_test(tc, test_round_trip_devices);
        tcase_add_test(tc, test_device_address);
        tcase_add_test(tc, test_size_strings);
        tcase_add_test(tc, test_long_socket_path);
        tcase_add_test(tc, test_load_file);
        suite_add_tcase(s, tc);

        tc = tcase_create("json-errors");
        tcase_add_test(tc, test_unknown_keys);
        tcase_add_test(tc, test_wrong_types);
        tcase_add_test(tc, test_out_of_range);
        tcase_add_test(tc, test_devices_errors);
        tcase_add_test(tc, test_json_syntax);
        tcase_add_test(tc, test_failure_keeps_config);
        suite_add_tcase(s, tc);

        tc = tcase_create("argv");
        tcase_add_test(tc, test_argv_flags);
        tcase_add_test(tc, test_argv_config_precedence);
        tcase_add_test(tc, test_argv_help_version);
        tcase_add_test(tc, test_argv_errors);
        tcase_add_test(tc, test_argv_config_errors);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(config_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
