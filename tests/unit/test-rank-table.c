/* SPDX-License-Identifier: MIT */
/* Unit tests for the rank-table parser: the "1.0" and "1.2" forms, what they accept, every refusal.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/domain/rank-table.h"

static const char *const two = "{\"version\": \"1.0\", \"server_count\": \"2\", \"status\": "
                               "\"completed\", \"server_list\": ["
                               "{\"server_id\": \"p\", \"device\": [{\"device_id\": \"0\", "
                               "\"device_ip\": \"10.0.0.1\", \"rank_id\": \"1\"}]},"
                               "{\"server_id\": \"d\", \"device\": [{\"device_id\": \"5\", "
                               "\"device_ip\": \"10.0.0.2:7401\", \"rank_id\": \"0\"}]}]}";

/* Parses @json and checks it fails with a message containing @want. */
static void refused(const char *json, const char *want)
{
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_int_eq(rank_table_parse(json, &t, &err), STATUS_PARAM_INVALID);
        ck_assert_msg(strstr(err.msg, want), "wanted \"%s\" in \"%s\"", want, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, "rank_table: "));
}

/* @two with its first occurrence of @from replaced by @to. */
static char *variant(const char *from, const char *to)
{
        const char *at = strstr(two, from);
        char *s;

        ck_assert_ptr_nonnull(at);
        ck_assert_int_ge(asprintf(&s, "%.*s%s%s", (int)(at - two), two, to, at + strlen(from)), 0);
        return s;
}

static void refused_variant(const char *from, const char *to, const char *want)
{
        char *s = variant(from, to);

        refused(s, want);
        free(s);
}

START_TEST(test_parse_two)
{
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_int_eq(rank_table_parse(two, &t, &err), 0);
        ck_assert_uint_eq(t.n_ranks, 2);
        ck_assert_uint_eq(t.n_servers, 2);
        /* Indexed by rank, whatever order the servers come in. */
        ck_assert_str_eq(t.ranks[0].server_id, "d");
        ck_assert_int_eq(t.ranks[0].device_id, 5);
        ck_assert_str_eq(t.ranks[0].address, "10.0.0.2:7401");
        ck_assert_str_eq(t.ranks[1].server_id, "p");
        /* An address alone means the default peer port. */
        ck_assert_str_eq(t.ranks[1].address, "10.0.0.1:7400");
}
END_TEST

/*
 * HCCL's meaning of device_ip: each NPU its own address (a kvdistd's devices[].address), so the
 * devices of one server have different device_ips; each is kept as given, canonical.
 */
START_TEST(test_parse_device_addresses)
{
        static const char *const json =
                "{\"version\": \"1.0\", \"server_count\": \"2\", \"status\": \"completed\", "
                "\"server_list\": [{\"server_id\": \"p\", \"device\": ["
                "{\"device_id\": \"0\", \"device_ip\": \"10.0.0.1\", \"rank_id\": \"0\"}, "
                "{\"device_id\": \"1\", \"device_ip\": \"10.0.0.2:7401\", \"rank_id\": \"1\"}]}, "
                "{\"server_id\": \"d\", \"device\": ["
                "{\"device_id\": \"0\", \"device_ip\": \"10.0.1.1\", \"rank_id\": \"2\"}, "
                "{\"device_id\": \"1\", \"device_ip\": \"10.0.1.2\", \"rank_id\": \"3\"}]}]}";
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_msg(rank_table_parse(json, &t, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(t.n_ranks, 4);
        ck_assert_str_eq(t.ranks[0].address, "10.0.0.1:7400");
        ck_assert_str_eq(t.ranks[1].address, "10.0.0.2:7401");
        ck_assert_str_eq(t.ranks[1].device_ip, "10.0.0.2:7401");
        ck_assert_str_eq(t.ranks[1].address_key, "device_ip");
        ck_assert_str_eq(t.ranks[3].address, "10.0.1.2:7400");
        ck_assert_str_eq(t.ranks[3].server_id, "d");
        /* A device of d at an address of p's devices: refused, whichever device it is. */
        refused("{\"version\": \"1.0\", \"server_count\": \"2\", \"server_list\": ["
                "{\"server_id\": \"p\", \"device\": ["
                "{\"device_id\": 0, \"device_ip\": \"10.0.0.1\", \"rank_id\": 0}, "
                "{\"device_id\": 1, \"device_ip\": \"10.0.0.2\", \"rank_id\": 1}]}, "
                "{\"server_id\": \"d\", \"device\": ["
                "{\"device_id\": 0, \"device_ip\": \"10.0.1.1\", \"rank_id\": 2}, "
                "{\"device_id\": 1, \"device_ip\": \"10.0.0.2\", \"rank_id\": 3}]}]}",
                "server_list[1]: device_ip 10.0.0.2:7400 is also server p's");
}
END_TEST

START_TEST(test_parse_forms)
{
        const char *json = "{\"version\": \"1.0\", \"server_count\": 2, \"server_list\": ["
                           "{\"server_id\": \"a\", \"host_nic_ip\": \"reserve\", \"device\": ["
                           "{\"device_id\": 0, \"device_ip\": \"::1\", \"rank_id\": 2},"
                           "{\"device_id\": 1, \"device_ip\": \"[::1]:7400\", \"rank_id\": 0}]},"
                           "{\"server_id\": \"b\", \"device\": [{\"device_id\": \"0\", "
                           "\"device_ip\": \"[fd00::2]:9000\", \"rank_id\": \"1\"}]}]}";
        Error err = ERROR_INIT;
        RankTable t;

        /* Numbers as JSON integers, IPv6, two devices of one server sharing its kvdistd. */
        ck_assert_msg(rank_table_parse(json, &t, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(t.n_ranks, 3);
        ck_assert_str_eq(t.ranks[2].address, "[::1]:7400");
        ck_assert_str_eq(t.ranks[0].address, "[::1]:7400");
        ck_assert_int_eq(t.ranks[0].device_id, 1);
        ck_assert_str_eq(t.ranks[1].address, "[fd00::2]:9000");
}
END_TEST

START_TEST(test_refused)
{
        char big[RANK_TABLE_MAX_BYTES + 16];

        refused("", "empty");
        refused("[1, 2]", "expected a JSON object");
        refused("{\"version\": \"1.0\",", "line 1");
        /* The seed document's example has trailing commas: not JSON. */
        refused("{\"server_list\": [{\"device\": [{\"device_id\": \"0\"},]}]}", "line 1");
        refused("{\"server_count\": \"1\", \"server_list\": []}", "\"version\" is missing");
        refused("{\"version\": 1.2, \"server_list\": []}", "version: expected a string");
        refused("{\"version\": \"1.0\", \"version\": \"1.0\"}", "duplicate");
        refused_variant("\"version\": \"1.0\"", "\"version\": \"1.1\"",
                        "version: \"1.1\" is not a form kvdist reads (\"1.0\" or \"1.2\")");
        /* The "1.2" keys, named as such, in a table that says "1.0". */
        refused_variant("\"server_id\": \"p\"", "\"server_id\": \"p\", \"host_ip\": \"10.0.0.9\"",
                        "server_list[0]: unknown key \"host_ip\" (a \"1.2\" key");
        refused_variant("\"rank_id\": \"1\"", "\"rank_id\": \"1\", \"super_device_id\": \"0\"",
                        "server_list[0].device[0]: unknown key \"super_device_id\" (a \"1.2\"");
        refused_variant("\"status\"", "\"super_pod_list\": [], \"status\"",
                        ": unknown key \"super_pod_list\" (a \"1.2\" key");
        refused_variant("\"completed\"", "\"initializing\"", "must be \"completed\"");
        refused_variant("\"server_count\": \"2\"", "\"server_count\": \"3\"",
                        "server_count: 3, but server_list has 2 entries");
        refused_variant("\"server_count\": \"2\"", "\"server_count\": \"two\"",
                        "server_count: \"two\" is not a decimal number");
        refused_variant("\"server_count\": \"2\", ", "", "\"server_count\" is missing");
        refused_variant("\"status\"", "\"state\"", "unknown key \"state\"");
        refused_variant("\"server_id\": \"p\"", "\"server_id\": \"p\", \"rack\": 1",
                        "server_list[0]: unknown key \"rack\"");
        refused_variant("\"server_id\": \"p\"", "\"server_id\": \"\"",
                        "server_list[0].server_id: must be 1..63 characters");
        refused_variant("\"server_id\": \"d\"", "\"server_id\": \"p\"",
                        "server_id \"p\" appears twice");
        refused_variant("\"device_id\": \"0\"", "\"device_id\": \"-1\"",
                        "server_list[0].device[0].device_id: \"-1\" is not a decimal number");
        refused_variant("\"device_id\": \"0\", ", "", "\"device_id\" is missing");
        refused_variant("\"10.0.0.1\"", "\"x.x.x.x\"",
                        "server_list[0].device[0].device_ip: \"x.x.x.x\" is not a numeric address");
        refused_variant("\"10.0.0.1\"", "\"node-1:7400\"", "is not a numeric address");
        refused_variant("\"10.0.0.1\"", "\"10.0.0.1:0\"", "is not a numeric address");
        refused_variant("\"10.0.0.1\"", "\"10.0.0.2:7401\"",
                        "device_ip 10.0.0.2:7401 is also server p's");
        refused_variant("\"rank_id\": \"1\"", "\"rank_id\": \"0\"", "rank_id 0 appears twice");
        refused_variant("\"rank_id\": \"1\"", "\"rank_id\": \"2\"",
                        "rank_id 2 of server p device 0 is not below the 2 devices listed");
        refused_variant(", \"rank_id\": \"1\"", "", "\"rank_id\" is missing");
        refused("{\"version\": \"1.0\", \"server_count\": \"1\", \"server_list\": "
                "[{\"server_id\": \"a\", \"device\": []}]}",
                "server_list[0].device: expected a non-empty array");
        /* Two devices of one server: distinct ids; a device of another server may not share
         * one's address (each server has its own kvdistd). */
        refused_variant("\"rank_id\": \"0\"}]",
                        "\"rank_id\": \"0\"}, {\"device_id\": \"6\", \"device_ip\": \"10.0.0.1\", "
                        "\"rank_id\": \"2\"}]",
                        "server_list[1]: device_ip 10.0.0.1:7400 is also server p's");
        refused_variant("\"rank_id\": \"1\"}]",
                        "\"rank_id\": \"1\"}, {\"device_id\": \"0\", \"device_ip\": \"10.0.0.1\", "
                        "\"rank_id\": \"2\"}]",
                        "device_id 0 appears twice in server p");
        refused("{\"version\": \"1.0\", \"server_count\": \"1\", \"server_list\": [{\"server_id\": "
                "\"a\", \"device\": [{\"device_id\": 0, \"device_ip\": \"10.0.0.1\", \"rank_id\": "
                "0},"
                "{\"device_id\": 1, \"device_ip\": \"10.0.0.1\", \"rank_id\": 1},"
                "{\"device_id\": 2, \"device_ip\": \"10.0.0.1\", \"rank_id\": 2},"
                "{\"device_id\": 3, \"device_ip\": \"10.0.0.1\", \"rank_id\": 3},"
                "{\"device_id\": 4, \"device_ip\": \"10.0.0.1\", \"rank_id\": 4}]}]}",
                "more than 4 devices");
        refused_variant("\"p\"", "\"p\\u0000q\"", "is not allowed");
        memset(big, ' ', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        refused(big, "bytes, at most");
}
END_TEST

/* pull_cache_sample.py's two-server table: host_ip per server, a device_ip per NPU. */
static const char *const sample12 =
        "{\"server_count\": \"2\", \"status\": \"completed\", \"version\": \"1.2\", "
        "\"server_list\": ["
        "{\"device\": [{\"device_id\": \"3\", \"device_ip\": \"192.168.1.4\", \"rank_id\": "
        "\"0\"}], "
        "\"host_ip\": \"10.10.10.0\", \"server_id\": \"1\"}, "
        "{\"device\": [{\"device_id\": \"3\", \"device_ip\": \"192.168.2.4\", \"rank_id\": "
        "\"1\"}], "
        "\"host_ip\": \"10.10.10.1\", \"server_id\": \"2\"}]}";

/* @sample12 with its first occurrence of @from replaced by @to. */
static char *variant12(const char *from, const char *to)
{
        const char *at = strstr(sample12, from);
        char *s;

        ck_assert_ptr_nonnull(at);
        ck_assert_int_ge(
                asprintf(&s, "%.*s%s%s", (int)(at - sample12), sample12, to, at + strlen(from)), 0);
        return s;
}

static void refused12(const char *from, const char *to, const char *want)
{
        char *s = variant12(from, to);

        refused(s, want);
        free(s);
}

/* The variant parses, and rank @rank's kvdistd is @address, from @key. */
static void accepted12(const char *from, const char *to, unsigned rank, const char *address,
                       const char *key)
{
        char *s = variant12(from, to);
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_msg(rank_table_parse(s, &t, &err) == 0, "%s: %s", s, err.msg);
        ck_assert_str_eq(t.ranks[rank].address, address);
        ck_assert_str_eq(t.ranks[rank].address_key, key);
        free(s);
}

START_TEST(test_parse_v12_samples)
{
        /* The same sample on one machine: one server, two NPUs with their own device_ip. */
        const char *single =
                "{\"server_count\": \"1\", \"status\": \"completed\", \"version\": \"1.2\", "
                "\"server_list\": [{\"device\": ["
                "{\"device_id\": \"0\", \"device_ip\": \"192.168.1.1\", \"rank_id\": \"0\"}, "
                "{\"device_id\": \"1\", \"device_ip\": \"192.168.1.2\", \"rank_id\": \"1\"}], "
                "\"host_ip\": \"127.0.0.1:7411\", \"server_id\": \"1\"}]}";
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_msg(rank_table_parse(sample12, &t, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(t.n_ranks, 2);
        ck_assert_uint_eq(t.n_servers, 2);
        /* host_ip names the member's kvdistd; the NPU's device_ip is not its address. */
        ck_assert_str_eq(t.ranks[0].address, "10.10.10.0:7400");
        ck_assert_str_eq(t.ranks[0].address_key, "host_ip");
        ck_assert_str_eq(t.ranks[0].server_id, "1");
        ck_assert_int_eq(t.ranks[0].device_id, 3);
        ck_assert_str_eq(t.ranks[1].address, "10.10.10.1:7400");
        ck_assert_str_eq(t.ranks[1].server_id, "2");

        ck_assert_msg(rank_table_parse(single, &t, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(t.n_ranks, 2);
        ck_assert_uint_eq(t.n_servers, 1);
        ck_assert_str_eq(t.ranks[0].address, "127.0.0.1:7411");
        ck_assert_str_eq(t.ranks[1].address, "127.0.0.1:7411");
        ck_assert_int_eq(t.ranks[1].device_id, 1);

        /* A server without host_ip: its device_ip names its kvdistd, as in "1.0". */
        accepted12("\"host_ip\": \"10.10.10.0\", ", "", 0, "192.168.1.4:7400", "device_ip");
        accepted12("\"host_ip\": \"10.10.10.1\", ", "\"host_nic_ip\": \"reserve\", ", 1,
                   "192.168.2.4:7400", "device_ip");
        /* With one, the device's own device_ip may be left out. */
        accepted12("\"device_ip\": \"192.168.2.4\", ", "", 1, "10.10.10.1:7400", "host_ip");
}
END_TEST

START_TEST(test_parse_v12_fields)
{
        /* HCCL's documented "1.2" keys: accepted, checked, unused; device_ip optional with a
         * host_ip, and without one it still names the kvdistd as in "1.0". */
        const char *json =
                "{\"status\": \"completed\", \"version\": \"1.2\", \"server_count\": \"2\", "
                "\"server_list\": ["
                "{\"server_id\": \"node_0\", \"host_ip\": \"[fd00::1]:7500\", \"device\": ["
                "{\"device_id\": \"0\", \"super_device_id\": \"0\", \"device_ip\": "
                "\"192.168.1.6\", "
                "\"device_port\": \"16666\", \"backup_device_ip\": \"192.168.1.7\", "
                "\"backup_device_port\": \"16667\", \"host_port\": \"16665\", \"rank_id\": \"0\"}, "
                "{\"device_id\": \"1\", \"super_device_id\": 1, \"rank_id\": \"2\"}]}, "
                "{\"server_id\": \"node_1\", \"device\": [{\"device_id\": \"0\", "
                "\"device_ip\": \"10.0.0.2:7401\", \"rank_id\": \"1\"}]}], "
                "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                "[{\"server_id\": \"node_0\"}]}, {\"super_pod_id\": \"1\", \"server_list\": "
                "[{\"server_id\": \"node_1\"}]}]}";
        Error err = ERROR_INIT;
        RankTable t;

        ck_assert_msg(rank_table_parse(json, &t, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(t.n_ranks, 3);
        ck_assert_str_eq(t.ranks[0].address, "[fd00::1]:7500");
        ck_assert_str_eq(t.ranks[2].address, "[fd00::1]:7500");
        ck_assert_int_eq(t.ranks[2].device_id, 1);
        ck_assert_str_eq(t.ranks[1].address, "10.0.0.2:7401");
        ck_assert_str_eq(t.ranks[1].address_key, "device_ip");
        /* With a host_ip the device's own device_ip is kept (checked against its device's
         * address by kvdistd), or "" when left out. */
        ck_assert_str_eq(t.ranks[0].device_ip, "192.168.1.6:7400");
        ck_assert_str_eq(t.ranks[0].address_key, "host_ip");
        ck_assert_str_eq(t.ranks[2].device_ip, "");
}
END_TEST

START_TEST(test_refused_v12)
{
        refused12("\"10.10.10.0\"", "\"x.x.x.x\"",
                  "server_list[0].host_ip: \"x.x.x.x\" is not a numeric address");
        refused12("\"10.10.10.0\"", "10", "server_list[0].host_ip: expected a string");
        refused12("\"10.10.10.1\"", "\"10.10.10.0\"",
                  "host_ip 10.10.10.0:7400 is also server 1's: each server has its own kvdistd");
        /* Malformed even though unused: the key is named. */
        refused12("\"192.168.1.4\"", "\"192.168.1\"",
                  "server_list[0].device[0].device_ip: \"192.168.1\" is not a numeric address");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"device_port\": \"70000\"",
                  "server_list[0].device[0].device_port: 70000 is outside [0, 65535]");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"host_port\": \"x\"",
                  "server_list[0].device[0].host_port: \"x\" is not a decimal number");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"backup_device_port\": -1",
                  "server_list[0].device[0].backup_device_port: -1 is outside");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"super_device_id\": \"a\"",
                  "server_list[0].device[0].super_device_id: \"a\" is not a decimal number");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"backup_device_ip\": \"10.0.0.1:1\"",
                  "server_list[0].device[0].backup_device_ip: \"10.0.0.1:1\" is not a numeric "
                  "IP address");
        refused12("\"rank_id\": \"0\"", "\"rank_id\": \"0\", \"vnic_ip\": \"10.0.0.1\"",
                  "server_list[0].device[0]: unknown key \"vnic_ip\"");
        refused12("\"server_id\": \"1\"", "\"server_id\": \"1\", \"container_ip\": \"10.0.0.1\"",
                  "server_list[0]: unknown key \"container_ip\"");
        /* Without a host_ip, device_ip names the kvdistd and is required. */
        refused12("\"device_ip\": \"192.168.2.4\", \"rank_id\": \"1\"}], \"host_ip\": "
                  "\"10.10.10.1\", ",
                  "\"rank_id\": \"1\"}], ",
                  "server_list[1].device[0]: \"device_ip\" is missing (it names the member's "
                  "kvdistd unless the server has a host_ip)");
        /* super_pod_list: pods of servers of server_list, each once. */
        refused12("\"status\"", "\"super_pod_list\": {}, \"status\"",
                  "super_pod_list: expected a non-empty array");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"server_list\": [{\"server_id\": \"1\"}]}], "
                  "\"status\"",
                  "super_pod_list[0]: \"super_pod_id\" is missing");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"3\"}]}], \"status\"",
                  "super_pod_list[0].server_list[0].server_id: \"3\" is not a server of "
                  "server_list");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"1\"}]}, {\"super_pod_id\": \"1\", \"server_list\": "
                  "[{\"server_id\": \"2\"}, {\"server_id\": \"1\"}]}], \"status\"",
                  "super_pod_list[1].server_list[1].server_id: server \"1\" is in a super pod "
                  "already");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"1\"}, {\"server_id\": \"1\"}]}], \"status\"",
                  "server \"1\" is in a super pod already");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"1\"}]}, {\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"2\"}]}], \"status\"",
                  "super_pod_list[1].super_pod_id: \"0\" appears twice");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": "
                  "[{\"server_id\": \"1\", \"rack\": 2}]}], \"status\"",
                  "super_pod_list[0].server_list[0]: unknown key \"rack\"");
        refused12("\"status\"",
                  "\"super_pod_list\": [{\"super_pod_id\": \"0\", \"server_list\": []}], "
                  "\"status\"",
                  "super_pod_list[0].server_list: expected a non-empty array");
}
END_TEST

START_TEST(test_fragment)
{
        Error err = ERROR_INIT;
        RankDevice d;

        ck_assert_int_eq(rank_table_parse_fragment(
                                 "{\"server_list\": [{\"server_id\": \"n\", \"device\": "
                                 "[{\"device_id\": \"3\", \"device_ip\": \"10.1.1.1\"}]}]}",
                                 &d, &err),
                         0);
        ck_assert_int_eq(d.device_id, 3);
        ck_assert_str_eq(d.address, "10.1.1.1:7400");
        ck_assert_str_eq(d.server_id, "n");
        ck_assert_int_eq(rank_table_parse_fragment(
                                 "{\"server_count\": \"1\", \"version\": \"1.0\", "
                                 "\"server_list\": [{\"server_id\": \"n\", \"device\": "
                                 "[{\"device_id\": \"3\", \"device_ip\": \"10.1.1.1\"}]}]}",
                                 &d, &err),
                         0);
        ck_assert_int_eq(
                rank_table_parse_fragment("{\"server_list\": [{\"server_id\": \"n\", \"device\": "
                                          "[{\"device_id\": \"3\", \"device_ip\": \"10.1.1.1\", "
                                          "\"rank_id\": \"0\"}]}]}",
                                          &d, &err),
                STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "local_comm_res: server_list[0].device[0].rank_id"));
        error_clear(&err);
        ck_assert_int_eq(
                rank_table_parse_fragment("{\"server_list\": [{\"server_id\": \"n\", \"device\": "
                                          "[{\"device_id\": \"3\", \"device_ip\": \"10.1.1.1\"}, "
                                          "{\"device_id\": \"4\", \"device_ip\": \"10.1.1.1\"}]}]}",
                                          &d, &err),
                STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "one device"));
        error_clear(&err);
        ck_assert_int_eq(rank_table_parse_fragment("{\"server_count\": \"2\", \"server_list\": "
                                                   "[{}, {}]}",
                                                   &d, &err),
                         STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(err.msg, "2 servers; local_comm_res describes"));
        error_clear(&err);
        /* The "1.2" form: host_ip names this cluster's kvdistd. */
        ck_assert_msg(rank_table_parse_fragment(
                              "{\"version\": \"1.2\", \"server_list\": [{\"server_id\": \"n\", "
                              "\"host_ip\": \"10.1.1.2\", \"device\": [{\"device_id\": \"3\", "
                              "\"super_device_id\": \"3\", \"device_ip\": \"192.168.1.9\"}]}], "
                              "\"super_pod_list\": [{\"super_pod_id\": \"sp0\", \"server_list\": "
                              "[{\"server_id\": \"n\"}]}]}",
                              &d, &err) == 0,
                      "%s", err.msg);
        ck_assert_str_eq(d.address, "10.1.1.2:7400");
        ck_assert_str_eq(d.address_key, "host_ip");
        /* Without a version it is the "1.0" form, which has no host_ip. */
        ck_assert_int_eq(
                rank_table_parse_fragment("{\"server_list\": [{\"server_id\": \"n\", \"host_ip\": "
                                          "\"10.1.1.2\", \"device\": [{\"device_id\": \"3\"}]}]}",
                                          &d, &err),
                STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(
                strstr(err.msg, "local_comm_res: server_list[0]: unknown key \"host_ip\""));
}
END_TEST

START_TEST(test_address)
{
        char buf[SOCKADDR_STR_MAX];

        ck_assert_int_eq(rank_table_parse_address("127.0.0.1", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "127.0.0.1:7400");
        ck_assert_int_eq(rank_table_parse_address("127.0.0.1:1", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "127.0.0.1:1");
        ck_assert_int_eq(rank_table_parse_address("[::1]:80", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "[::1]:80");
        ck_assert_int_eq(rank_table_parse_address("localhost", buf, sizeof(buf)), -EINVAL);
        ck_assert_int_eq(rank_table_parse_address(NULL, buf, sizeof(buf)), -EINVAL);

        ck_assert(rank_table_same_ip("10.0.0.1", "10.0.0.1:7401"));
        ck_assert(rank_table_same_ip("[::1]:5", "::1"));
        ck_assert(!rank_table_same_ip("10.0.0.1", "10.0.0.2"));
        ck_assert(!rank_table_same_ip("10.0.0.1", "[::ffff:10.0.0.1]:7400"));
        ck_assert(!rank_table_same_ip("10.0.0.1", "node-1"));
        ck_assert(!rank_table_same_ip(NULL, "10.0.0.1"));
}
END_TEST

static Suite *rank_table_suite(void)
{
        Suite *s = suite_create("rank-table");
        TCase *tc = tcase_create("parse");

        tcase_add_test(tc, test_parse_two);
        tcase_add_test(tc, test_parse_device_addresses);
        tcase_add_test(tc, test_parse_forms);
        tcase_add_test(tc, test_refused);
        tcase_add_test(tc, test_parse_v12_samples);
        tcase_add_test(tc, test_parse_v12_fields);
        tcase_add_test(tc, test_refused_v12);
        tcase_add_test(tc, test_fragment);
        tcase_add_test(tc, test_address);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(rank_table_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
