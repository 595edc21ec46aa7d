/* SPDX-License-Identifier: MIT */
/* Config diff: the changes a reload finds, and applying those a running daemon can take. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config-diff.h"
#include "daemon/config-internal.h"
#include "common/log.h"

/* Settings a reload applies; every other setting needs a restart. */
static const char *const runtime_top_keys[] = {"sync_kv_timeout_ms", "heartbeat_interval_ms",
                                               "heartbeat_timeout_ms", "link_total_time_ms"};
/* Clients learned the frame limit at Hello: lowering it under them would cut their sessions. */
static const char *const restart_limit_keys[] = {"max_frame_size"};

typedef struct ChangeList {
        ConfigChange *items;
        size_t n;
        size_t allocated;
        int error;
} ChangeList;

static bool in_list(const char *const *list, size_t n, const char *key)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i], key) == 0)
                        return true;
        return false;
}

static void add_change(ChangeList *l, const char *key, const char *old_value, const char *new_value,
                       bool runtime)
{
        ConfigChange *c;

        if (l->error)
                return;
        if (l->n == l->allocated) {
                size_t n = l->allocated ? l->allocated * 2 : 8;
                ConfigChange *p = realloc(l->items, n * sizeof(*p));

                if (!p) {
                        l->error = -ENOMEM;
                        return;
                }
                l->items = p;
                l->allocated = n;
        }
        c = &l->items[l->n++];
        (void)snprintf(c->key, sizeof(c->key), "%s", key);
        (void)snprintf(c->old_value, sizeof(c->old_value), "%s", old_value);
        (void)snprintf(c->new_value, sizeof(c->new_value), "%s", new_value);
        c->runtime = runtime;
}

/* A boolean key @key that went from @a to @b, if it changed. */
static void diff_bool(ChangeList *l, const char *key, bool a, bool b, bool runtime)
{
        if (a != b)
                add_change(l, key, a ? "true" : "false", b ? "true" : "false", runtime);
}

static const char *format_control_nice(int nice, char buf[static 96])
{
        if (nice == CONTROL_NICE_OFF)
                return "off";
        (void)snprintf(buf, 96, "%d", nice);
        return buf;
}

static void format_int_field(const IntField *f, uint64_t v, char *buf, size_t size)
{
        char tmp[32];

        if (f->kind == FIELD_SIZE)
                (void)snprintf(buf, size, "%s", config_format_size(v, tmp));
        else
                (void)snprintf(buf, size, "%" PRIu64, v);
}

/* Whether a reload applies @f of the table named by @prefix ("" for the top level). */
static bool int_field_is_runtime(const char *prefix, const IntField *f)
{
        if (prefix[0])
                return !in_list(restart_limit_keys, ARRAY_SIZE(restart_limit_keys), f->name);
        return in_list(runtime_top_keys, ARRAY_SIZE(runtime_top_keys), f->name);
}

static void diff_int_fields(ChangeList *l, const IntFieldTable *t, const char *prefix,
                            const Config *old, const Config *new)
{
        for (size_t i = 0; i < t->n_fields; i++) {
                const IntField *f = &t->fields[i];
                uint64_t a = config_int_field_load(old, f), b = config_int_field_load(new, f);
                char key[64], va[32], vb[32];

                if (a == b)
                        continue;
                (void)snprintf(key, sizeof(key), "%s%s", prefix, f->name);
                format_int_field(f, a, va, sizeof(va));
                format_int_field(f, b, vb, sizeof(vb));
                add_change(l, key, va, vb, int_field_is_runtime(prefix, f));
        }
}

static bool str_same(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "") == 0;
}

/* "[1000, 1001]", cut with "..." when it does not fit. */
static void format_ids(const uint32_t *ids, size_t n, char *buf, size_t size)
{
        size_t off = 0;
        int k;

        k = snprintf(buf, size, "[");
        off = (size_t)k;
        for (size_t i = 0; i < n && off < size; i++) {
                k = snprintf(buf + off, size - off, "%s%" PRIu32, i ? ", " : "", ids[i]);
                if (k < 0 || (size_t)k >= size - off) {
                        if (size > 5)
                                memcpy(buf + size - 5, "...]", 5);
                        return;
                }
                off += (size_t)k;
        }
        if (off + 2 <= size)
                memcpy(buf + off, "]", 2);
}

static void diff_ids(ChangeList *l, const char *key, const uint32_t *a, size_t na,
                     const uint32_t *b, size_t nb)
{
        char va[96], vb[96];

        if (na == nb && (na == 0 || memcmp(a, b, na * sizeof(uint32_t)) == 0))
                return;
        format_ids(a, na, va, sizeof(va));
        format_ids(b, nb, vb, sizeof(vb));
        add_change(l, key, va, vb, true);
}

static bool devices_same(const Config *a, const Config *b)
{
        if (a->n_devices != b->n_devices)
                return false;
        for (size_t i = 0; i < a->n_devices; i++) {
                const DeviceConfig *x = &a->devices[i], *y = &b->devices[i];

                if (x->device_id != y->device_id || x->port != y->port ||
                    x->gid_index != y->gid_index || x->transport != y->transport ||
                    !str_same(x->rdma_device, y->rdma_device) || !str_same(x->netdev, y->netdev) ||
                    !str_same(x->address, y->address))
                        return false;
        }
        return true;
}

int config_diff(const Config *old, const Config *new, ConfigChange **ret, size_t *ret_n)
{
        ChangeList l = {};
        char va[96], vb[96];

        if (!str_same(old->socket_path, new->socket_path))
                add_change(&l, "socket_path", old->socket_path, new->socket_path, false);
        if (old->socket_mode != new->socket_mode) {
                (void)snprintf(va, sizeof(va), "%04o", old->socket_mode);
                (void)snprintf(vb, sizeof(vb), "%04o", new->socket_mode);
                add_change(&l, "socket_mode", va, vb, false);
        }
        diff_ids(&l, "allow_uids", (const uint32_t *)old->allow_uids, old->n_allow_uids,
                 (const uint32_t *)new->allow_uids, new->n_allow_uids);
        diff_ids(&l, "allow_gids", (const uint32_t *)old->allow_gids, old->n_allow_gids,
                 (const uint32_t *)new->allow_gids, new->n_allow_gids);
        diff_int_fields(&l, &config_top_fields, "", old, new);
        if (old->copy_threads != new->copy_threads) {
                (void)snprintf(va, sizeof(va), "%u", old->copy_threads);
                (void)snprintf(vb, sizeof(vb), "%u", new->copy_threads);
                add_change(&l, "copy_threads", va, vb, false);
        }
        diff_bool(&l, "copy_streaming", old->copy_streaming, new->copy_streaming, false);
        if (old->control_nice != new->control_nice)
                add_change(&l, "control_nice", format_control_nice(old->control_nice, va),
                           format_control_nice(new->control_nice, vb), false);
        if (old->log_level != new->log_level)
                add_change(&l, "log_level", log_level_to_string(old->log_level) ?: "?",
                           log_level_to_string(new->log_level) ?: "?", true);
        if (!str_same(old->metrics_listen, new->metrics_listen))
                add_change(&l, "metrics_listen", old->metrics_listen ?: "",
                           new->metrics_listen ?: "", false);
        if (!str_same(old->listen_ip_info, new->listen_ip_info))
                add_change(&l, "listen_ip_info", old->listen_ip_info ?: "",
                           new->listen_ip_info ?: "", false);
        if (!str_same(old->cluster_key_file, new->cluster_key_file))
                add_change(&l, "cluster_key_file", old->cluster_key_file ?: "",
                           new->cluster_key_file ?: "", false);
        /* Checked when a link is asked for: links made afterwards follow the new value. */
        diff_bool(&l, "client_clusters_accept_links", old->client_clusters_accept_links,
                  new->client_clusters_accept_links, true);
        /* The TCP settings are offered to each peer when it connects: new peers get them. */
        diff_int_fields(&l, &config_tcp_fields, "tcp.", old, new);
        diff_int_fields(&l, &config_rdma_fields, "rdma.", old, new);
        diff_bool(&l, "tcp.crc", old->tcp.crc, new->tcp.crc, true);
        if (!devices_same(old, new)) {
                (void)snprintf(va, sizeof(va), "%zu entries", old->n_devices);
                (void)snprintf(vb, sizeof(vb), "%zu entries", new->n_devices);
                add_change(&l, "devices", va, vb, false);
        }
        diff_int_fields(&l, &config_limit_fields, "limits.", old, new);
        /* Read at each charge: a lower limit refuses what comes next, takes nothing back. */
        diff_int_fields(&l, &config_per_user_fields, "limits.per_user.", old, new);

        if (l.error) {
                free(l.items);
                return l.error;
        }
        *ret = l.items;
        *ret_n = l.n;
        return 0;
}

/* Copies from @new into @c every integer field of @t that a reload applies. */
static void apply_int_fields(Config *c, const Config *new, const IntFieldTable *t,
                             const char *prefix)
{
        for (size_t i = 0; i < t->n_fields; i++)
                if (int_field_is_runtime(prefix, &t->fields[i]))
                        config_int_field_store(c, &t->fields[i],
                                               config_int_field_load(new, &t->fields[i]));
}

/* Applies what config_diff() marks runtime: the same rules, so none is reported but not done. */
int config_apply_runtime(Config *c, const Config *new)
{
        void *uids = NULL, *gids = NULL;

        if (config_memdup_array(new->allow_uids, new->n_allow_uids, sizeof(uid_t), &uids) < 0 ||
            config_memdup_array(new->allow_gids, new->n_allow_gids, sizeof(gid_t), &gids) < 0) {
                free(uids);
                return -ENOMEM;
        }
        free(c->allow_uids);
        c->allow_uids = uids;
        c->n_allow_uids = new->n_allow_uids;
        free(c->allow_gids);
        c->allow_gids = gids;
        c->n_allow_gids = new->n_allow_gids;
        c->log_level = new->log_level;
        c->tcp.crc = new->tcp.crc;
        c->client_clusters_accept_links = new->client_clusters_accept_links;
        apply_int_fields(c, new, &config_top_fields, "");
        apply_int_fields(c, new, &config_tcp_fields, "tcp.");
        apply_int_fields(c, new, &config_rdma_fields, "rdma.");
        apply_int_fields(c, new, &config_limit_fields, "limits.");
        apply_int_fields(c, new, &config_per_user_fields, "limits.per_user.");
        return 0;
}
