/* SPDX-License-Identifier: MIT */
/* Config test fixture: loading and parsing helpers that assert, and deep comparison. */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/config-fixture.h"
#include "common/macro.h"
#include "daemon/config-internal.h"

/* Every field of @t, compared one by one (a struct's padding says nothing). */
static bool int_fields_equal(const Config *a, const Config *b, const IntFieldTable *t)
{
        for (size_t i = 0; i < t->n_fields; i++)
                if (config_int_field_load(a, &t->fields[i]) !=
                    config_int_field_load(b, &t->fields[i]))
                        return false;
        return true;
}

Config *new_config(void)
{
        Config *c = NULL;

        ck_assert_int_eq(config_new(&c), 0);
        ck_assert_ptr_nonnull(c);
        return c;
}

void load_ok(Config *c, const char *json)
{
        _cleanup_free_ char *error = NULL;
        int r;

        r = config_load_string(c, json, &error);
        ck_assert_msg(r == 0, "loading %s failed: %d %s", json, r, error ? error : "(null)");
}

static bool devices_equal(const DeviceConfig *a, const DeviceConfig *b)
{
        return a->device_id == b->device_id && a->port == b->port && a->gid_index == b->gid_index &&
               a->transport == b->transport &&
               (a->rdma_device ? b->rdma_device && strcmp(a->rdma_device, b->rdma_device) == 0
                               : !b->rdma_device) &&
               (a->netdev ? b->netdev && strcmp(a->netdev, b->netdev) == 0 : !b->netdev) &&
               (a->address ? b->address && strcmp(a->address, b->address) == 0 : !b->address);
}

static bool str_equal(const char *a, const char *b)
{
        return a ? b && strcmp(a, b) == 0 : !b;
}

/* Every field, the socket path only when @with_socket_path. */
bool config_equal(const Config *a, const Config *b, bool with_socket_path)
{
        if (with_socket_path && strcmp(a->socket_path, b->socket_path) != 0)
                return false;
        if (!str_equal(a->listen_ip_info, b->listen_ip_info) ||
            !str_equal(a->cluster_key_file, b->cluster_key_file) ||
            a->client_clusters_accept_links != b->client_clusters_accept_links ||
            a->heartbeat_interval_ms != b->heartbeat_interval_ms ||
            a->heartbeat_timeout_ms != b->heartbeat_timeout_ms ||
            memcmp(&a->tcp, &b->tcp, sizeof(TcpConfig)) != 0 || a->rdma.qps != b->rdma.qps)
                return false;
        if (a->socket_mode != b->socket_mode || a->memory_size != b->memory_size ||
            a->page_shift != b->page_shift || a->sync_kv_timeout_ms != b->sync_kv_timeout_ms ||
            a->copy_threads != b->copy_threads || a->copy_streaming != b->copy_streaming ||
            a->log_level != b->log_level || !int_fields_equal(a, b, &config_limit_fields) ||
            !int_fields_equal(a, b, &config_per_user_fields))
                return false;
        if (strcmp(a->metrics_listen ? a->metrics_listen : "",
                   b->metrics_listen ? b->metrics_listen : "") != 0)
                return false;
        if (a->n_allow_uids != b->n_allow_uids || a->n_allow_gids != b->n_allow_gids ||
            a->n_devices != b->n_devices)
                return false;
        for (size_t i = 0; i < a->n_allow_uids; i++)
                if (a->allow_uids[i] != b->allow_uids[i])
                        return false;
        for (size_t i = 0; i < a->n_allow_gids; i++)
                if (a->allow_gids[i] != b->allow_gids[i])
                        return false;
        for (size_t i = 0; i < a->n_devices; i++)
                if (!devices_equal(&a->devices[i], &b->devices[i]))
                        return false;
        return true;
}

/* Loading @json fails with -EINVAL and exactly @message, and leaves a default config as it was. */
void load_fails(const char *json, const char *message)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *ref = new_config();
        _cleanup_free_ char *error = NULL;
        int r;

        r = config_load_string(c, json, &error);
        ck_assert_msg(r == -EINVAL, "loading %s: expected -EINVAL, got %d", json, r);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strcmp(error, message) == 0,
                      "loading %s:\n  got      \"%s\"\n  expected \"%s\"", json, error, message);
        ck_assert(config_equal(c, ref, true));
}

/* Like load_fails() but only checks that @part occurs in the message. */
void load_fails_with(const char *json, const char *part)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_free_ char *error = NULL;
        int r;

        r = config_load_string(c, json, &error);
        ck_assert_msg(r == -EINVAL, "loading %s: expected -EINVAL, got %d", json, r);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strstr(error, part), "loading %s: \"%s\" lacks \"%s\"", json, error, part);
}

/* Runs config_parse_argv() on a NULL-terminated list of arguments after "kvdistd". */
int parse(Config *c, char **ret_error, ...)
{
        char *argv[32] = {(char *)"kvdistd"};
        int argc = 1;
        va_list ap;
        char *a;

        va_start(ap, ret_error);
        while ((a = va_arg(ap, char *)))
                argv[argc++] = a;
        va_end(ap);
        ck_assert_int_lt(argc, 32);
        return config_parse_argv(c, argc, argv, ret_error);
}

/* parse() fails with -EINVAL and exactly @message, leaving @c as it was. */
void parse_fails(const char *message, ...)
{
        _cleanup_(config_freep) Config *c = new_config();
        _cleanup_(config_freep) Config *ref = new_config();
        _cleanup_free_ char *error = NULL;
        char *argv[16] = {(char *)"kvdistd"};
        int argc = 1, r;
        va_list ap;
        char *a;

        va_start(ap, message);
        while ((a = va_arg(ap, char *)))
                argv[argc++] = a;
        va_end(ap);

        r = config_parse_argv(c, argc, argv, &error);
        ck_assert_msg(r == -EINVAL, "%s %s: expected -EINVAL, got %d", argv[1], argv[2], r);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strcmp(error, message) == 0, "got \"%s\", expected \"%s\"", error, message);
        ck_assert(config_equal(c, ref, true));
}
