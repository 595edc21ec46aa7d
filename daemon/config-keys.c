/* SPDX-License-Identifier: MIT */
/*
 * Daemon configuration keys: the parser of every key of the JSON file (jansson), each checked
 * against its type and range with a message that names it.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config-internal.h"
#include "daemon/config-keys.h"
#include "daemon/config.h"
#include "common/log.h"
#include "common/macro.h"
#include "common/sockaddr-util.h"

/* A bound on the device map keeps the duplicate check cheap whatever the input. */
#define DEVICES_MAX 1024
/* IBV_SYSFS_NAME_MAX less the NUL; not taken from verbs.h, which only the RDMA transport sees. */
#define RDMA_DEVICE_NAME_MAX 63
#define NETDEV_NAME_MAX (IFNAMSIZ - 1)
#define PATH_MAX_LEN 4095

static int int_field_range_error(const IntField *f, const char *path, char **error)
{
        char lo[32], hi[32];

        if (f->kind == FIELD_SIZE)
                return config_errorf(error, -EINVAL, "%s: must be in [%s, %s]", path,
                                     config_format_size((uint64_t)f->min, lo),
                                     config_format_size((uint64_t)f->max, hi));
        return config_errorf(error, -EINVAL, "%s: must be an integer in [%" PRIi64 ", %" PRIi64 "]",
                             path, f->min, f->max);
}

static bool json_string_is_clean(json_t *v)
{
        /* jansson keeps embedded NULs; a C consumer would silently see a shorter string. */
        return strlen(json_string_value(v)) == json_string_length(v);
}

static int apply_int_field_json(Config *c, const IntField *f, json_t *v, const char *path,
                                char **error)
{
        uint64_t u;
        int r;

        if (json_is_integer(v)) {
                json_int_t i = json_integer_value(v);

                if (i < f->min || i > f->max)
                        return int_field_range_error(f, path, error);
                u = (uint64_t)i;
        } else if (f->kind == FIELD_SIZE && json_is_string(v)) {
                const char *s = json_string_value(v);

                r = json_string_is_clean(v) ? config_parse_size(s, &u) : -EINVAL;
                if (r == -EINVAL)
                        return config_errorf(error, -EINVAL,
                                             "%s: invalid size \"%.64s\", expected bytes or a "
                                             "number with a K, M, G or T suffix",
                                             path, s);
                if (r < 0 || u < (uint64_t)f->min || u > (uint64_t)f->max)
                        return int_field_range_error(f, path, error);
        } else if (f->kind == FIELD_SIZE) {
                return config_errorf(error, -EINVAL,
                                     "%s: expected an integer or a size string like \"256M\"",
                                     path);
        } else {
                return config_errorf(error, -EINVAL, "%s: expected an integer", path);
        }
        config_int_field_store(c, f, u);
        return 0;
}

/* A bounded integer from JSON, for the settings that are not plain Config fields. */
static int json_get_int(json_t *v, const char *path, int64_t min, int64_t max, int64_t *ret,
                        char **error)
{
        json_int_t i;

        if (!json_is_integer(v))
                return config_errorf(error, -EINVAL, "%s: expected an integer", path);
        i = json_integer_value(v);
        if (i < min || i > max)
                return config_errorf(error, -EINVAL,
                                     "%s: must be an integer in [%" PRIi64 ", %" PRIi64 "]", path,
                                     min, max);
        *ret = i;
        return 0;
}

/* A string of @min_len..@max_len characters, duplicated into *@ret (replacing what was there). */
static int json_get_string(json_t *v, const char *path, size_t min_len, size_t max_len, char **ret,
                           char **error)
{
        size_t len;
        char *s;

        if (!json_is_string(v))
                return config_errorf(error, -EINVAL, "%s: expected a string", path);
        len = json_string_length(v);
        if (!json_string_is_clean(v))
                return config_errorf(error, -EINVAL, "%s: must not contain NUL characters", path);
        if (len < min_len || len > max_len)
                return config_errorf(error, -EINVAL, "%s: must be %zu..%zu characters long", path,
                                     min_len, max_len);
        s = strdup(json_string_value(v));
        if (!s)
                return -ENOMEM;
        free(*ret);
        *ret = s;
        return 0;
}

static int unknown_key(const char *path, char **error)
{
        return config_errorf(error, -EINVAL, "%s: unknown key", path);
}

static int parse_socket_path(Config *c, json_t *v, const char *path, char **error)
{
        return json_get_string(v, path, 1, SOCKET_PATH_MAX, &c->socket_path, error);
}

static int parse_metrics_listen(Config *c, json_t *v, const char *path, char **error)
{
        struct sockaddr_storage sa;
        socklen_t len;
        char *s = NULL;
        int r;

        r = json_get_string(v, path, 0, METRICS_LISTEN_MAX, &s, error);
        if (r < 0)
                return r;
        if (s[0] != '\0' && config_parse_metrics_listen(s, &sa, &len) < 0) {
                free(s);
                return config_errorf(error, -EINVAL,
                                     "%s: expected \"\" (off) or a numeric address with an "
                                     "optional port, like \"127.0.0.1:%d\"",
                                     path, CONFIG_METRICS_DEFAULT_PORT);
        }
        free(c->metrics_listen);
        c->metrics_listen = s[0] ? s : NULL;
        if (!s[0])
                free(s);
        return 0;
}

static int parse_socket_mode_string(const char *s, uint32_t *ret)
{
        size_t len = strlen(s);
        uint32_t mode = 0;

        if (len < 1 || len > 4)
                return -EINVAL;
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '7')
                        return -EINVAL;
                mode = mode * 8 + (uint32_t)(*p - '0');
        }
        if (mode > 0777)
                return -ERANGE;
        *ret = mode;
        return 0;
}

static int parse_socket_mode(Config *c, json_t *v, const char *path, char **error)
{
        uint32_t mode;
        int r;

        r = json_is_string(v) && json_string_is_clean(v)
                    ? parse_socket_mode_string(json_string_value(v), &mode)
                    : -EINVAL;
        if (r == -ERANGE)
                return config_errorf(error, -EINVAL, "%s: must be in [0000, 0777]", path);
        if (r < 0)
                return config_errorf(error, -EINVAL,
                                     "%s: expected a string of octal digits like \"0660\"", path);
        c->socket_mode = mode;
        return 0;
}

/* allow_uids / allow_gids: uid_t and gid_t are both 32-bit, (uid_t)-1 means "none". */
static int parse_id_array(json_t *v, const char *path, uint32_t **ret, size_t *ret_n, char **error)
{
        _cleanup_free_ uint32_t *ids = NULL;
        char p[PATH_BUF];
        size_t n, i;
        json_t *e;
        int r;

        if (!json_is_array(v))
                return config_errorf(error, -EINVAL, "%s: expected an array of integers", path);
        n = json_array_size(v);
        if (n > 0) {
                ids = calloc(n, sizeof(uint32_t));
                if (!ids)
                        return -ENOMEM;
        }
        json_array_foreach(v, i, e)
        {
                int64_t id = 0;

                config_pathf(p, "%s[%zu]", path, i);
                r = json_get_int(e, p, 0, (int64_t)UINT32_MAX - 1, &id, error);
                if (r < 0)
                        return r;
                ids[i] = (uint32_t)id;
        }
        free(*ret);
        *ret = TAKE_PTR(ids);
        *ret_n = n;
        return 0;
}

_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
               "uid_t and gid_t are 32-bit");

static int parse_allow_uids(Config *c, json_t *v, const char *path, char **error)
{
        return parse_id_array(v, path, (uint32_t **)&c->allow_uids, &c->n_allow_uids, error);
}

static int parse_allow_gids(Config *c, json_t *v, const char *path, char **error)
{
        return parse_id_array(v, path, (uint32_t **)&c->allow_gids, &c->n_allow_gids, error);
}

static int parse_copy_threads(Config *c, json_t *v, const char *path, char **error)
{
        if (json_is_string(v) && json_string_is_clean(v) && streq(json_string_value(v), "auto")) {
                c->copy_threads = config_default_copy_threads();
                return 0;
        }
        if (!json_is_integer(v))
                return config_errorf(error, -EINVAL, "%s: expected an integer or \"auto\"", path);
        if (json_integer_value(v) < 1 || json_integer_value(v) > COPY_THREADS_MAX)
                return config_errorf(error, -EINVAL,
                                     "%s: must be an integer in [1, %d] or \"auto\"", path,
                                     COPY_THREADS_MAX);
        c->copy_threads = (unsigned)json_integer_value(v);
        return 0;
}

/* A boolean key's value at @path into *@ret; JSON true or false only. */
static int parse_bool(json_t *v, const char *path, bool *ret, char **error)
{
        if (!json_is_boolean(v))
                return config_errorf(error, -EINVAL, "%s: expected true or false", path);
        *ret = json_is_true(v);
        return 0;
}

static int parse_copy_streaming(Config *c, json_t *v, const char *path, char **error)
{
        return parse_bool(v, path, &c->copy_streaming, error);
}

static int parse_control_nice(Config *c, json_t *v, const char *path, char **error)
{
        if (json_is_string(v) && json_string_is_clean(v) && streq(json_string_value(v), "off")) {
                c->control_nice = CONTROL_NICE_OFF;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < -20 || json_integer_value(v) > 19)
                return config_errorf(error, -EINVAL,
                                     "%s: must be an integer in [-20, 19] or \"off\"", path);
        c->control_nice = (int)json_integer_value(v);
        return 0;
}

static int parse_log_level(Config *c, json_t *v, const char *path, char **error)
{
        int level = -EINVAL;

        if (json_is_string(v) && json_string_is_clean(v))
                level = log_level_from_string(json_string_value(v));
        if (level < 0)
                return config_errorf(error, -EINVAL,
                                     "%s: expected one of \"error\", \"warning\", \"notice\", "
                                     "\"info\", \"debug\"",
                                     path);
        c->log_level = level;
        return 0;
}

/*
 * A device's own peer address: "ip" (port CONFIG_DEVICE_DEFAULT_PORT, as a rank table's device_ip
 * means) or "ip:port", "[v6]:port"; numeric, no port 0 (peers dial it). Kept canonical, so rank
 * tables and duplicates compare as strings.
 */
static int parse_device_address(json_t *v, const char *path, char **ret, char **error)
{
        char canon[SOCKADDR_STR_MAX];
        struct sockaddr_storage sa;
        socklen_t len;
        char *d;

        if (!json_is_string(v) || !json_string_is_clean(v))
                return config_errorf(error, -EINVAL, "%s: expected a string", path);
        if (sockaddr_parse(json_string_value(v), CONFIG_DEVICE_DEFAULT_PORT, &sa, &len) < 0 ||
            sockaddr_format((struct sockaddr *)&sa, len, canon, sizeof(canon)) < 0)
                return config_errorf(error, -EINVAL,
                                     "%s: \"%.64s\" is not \"ip\", \"ip:port\" or \"[ipv6]:port\" "
                                     "(numeric; port 1..65535, %d when left out)",
                                     path, json_string_value(v), CONFIG_DEVICE_DEFAULT_PORT);
        d = strdup(canon);
        if (!d)
                return -ENOMEM;
        free(*ret);
        *ret = d;
        return 0;
}

static int parse_device(json_t *obj, const char *path, DeviceConfig *d, char **error)
{
        char p[PATH_BUF];
        bool have_id = false;
        const char *key;
        json_t *v;
        int64_t i = 0;
        int r;

        if (!json_is_object(obj))
                return config_errorf(error, -EINVAL, "%s: expected an object", path);
        json_object_foreach(obj, key, v)
        {
                config_pathf(p, "%s.%s", path, key);
                if (streq(key, "device_id")) {
                        r = json_get_int(v, p, 0, INT32_MAX, &i, error);
                        if (r < 0)
                                return r;
                        d->device_id = (int32_t)i;
                        have_id = true;
                } else if (streq(key, "transport")) {
                        TransportKind k = _TRANSPORT_KIND_INVALID;

                        if (json_is_string(v) && json_string_is_clean(v))
                                k = transport_kind_from_string(json_string_value(v));
                        if (k < 0) {
                                char names[128];

                                return config_errorf(error, -EINVAL, "%s: expected one of %s", p,
                                                     transport_kind_names(names, sizeof(names)));
                        }
                        d->transport = k;
                } else if (streq(key, "rdma_device")) {
                        r = json_get_string(v, p, 1, RDMA_DEVICE_NAME_MAX, &d->rdma_device, error);
                        if (r < 0)
                                return r;
                } else if (streq(key, "port")) {
                        r = json_get_int(v, p, 1, 255, &i, error);
                        if (r < 0)
                                return r;
                        d->port = (uint8_t)i;
                } else if (streq(key, "gid_index")) {
                        r = json_get_int(v, p, -1, 255, &i, error);
                        if (r < 0)
                                return r;
                        d->gid_index = (int)i;
                } else if (streq(key, "netdev")) {
                        r = json_get_string(v, p, 1, NETDEV_NAME_MAX, &d->netdev, error);
                        if (r < 0)
                                return r;
                } else if (streq(key, "address")) {
                        r = parse_device_address(v, p, &d->address, error);
                        if (r < 0)
                                return r;
                } else {
                        return unknown_key(p, error);
                }
        }
        if (!have_id)
                return config_errorf(error, -EINVAL, "%s: missing required key \"device_id\"",
                                     path);
        return 0;
}

static int parse_devices(Config *c, json_t *v, const char *path, char **error)
{
        DeviceConfig *devices = NULL;
        char p[PATH_BUF];
        size_t n, i;
        json_t *e;
        int r = 0;

        if (!json_is_array(v))
                return config_errorf(error, -EINVAL, "%s: expected an array of objects", path);
        n = json_array_size(v);
        if (n > DEVICES_MAX)
                return config_errorf(error, -EINVAL, "%s: at most %d entries", path, DEVICES_MAX);
        if (n > 0) {
                devices = calloc(n, sizeof(DeviceConfig));
                if (!devices)
                        return -ENOMEM;
        }
        for (i = 0; i < n; i++) {
                devices[i] = (DeviceConfig){
                        .device_id = -1,
                        .port = 1,
                        .gid_index = -1,
                        .transport = TRANSPORT_KIND_AUTO,
                };
        }
        json_array_foreach(v, i, e)
        {
                config_pathf(p, "%s[%zu]", path, i);
                r = parse_device(e, p, &devices[i], error);
                if (r < 0)
                        goto fail;
                for (size_t j = 0; j < i; j++)
                        if (devices[j].device_id == devices[i].device_id) {
                                r = config_errorf(error, -EINVAL,
                                                  "%s.device_id: duplicate device_id %" PRIi32
                                                  " (also in %s[%zu])",
                                                  p, devices[i].device_id, path, j);
                                goto fail;
                        }
                for (size_t j = 0; devices[i].address && j < i; j++)
                        if (devices[j].address && streq(devices[j].address, devices[i].address)) {
                                r = config_errorf(error, -EINVAL,
                                                  "%s.address: duplicate address %s (also in "
                                                  "%s[%zu]): each device has its own",
                                                  p, devices[i].address, path, j);
                                goto fail;
                        }
        }
        config_devices_free(c->devices, c->n_devices);
        c->devices = devices;
        c->n_devices = n;
        return 0;
fail:
        config_devices_free(devices, n);
        return r;
}

/*
 * An object of integer settings from @t (limits, tcp, rdma); @extra, when not NULL, takes the
 * keys the table lacks and returns 1 for one it knows, 0 for one it does not.
 */
static int parse_int_object(Config *c, json_t *v, const char *path, const IntFieldTable *t,
                            int (*extra)(Config *c, const char *key, json_t *e, const char *p,
                                         char **error),
                            char **error)
{
        char p[PATH_BUF];
        const char *key;
        json_t *e;
        int r;

        if (!json_is_object(v))
                return config_errorf(error, -EINVAL, "%s: expected an object", path);
        json_object_foreach(v, key, e)
        {
                const IntField *f = config_int_field_find(t, key);

                config_pathf(p, "%s.%s", path, key);
                if (f)
                        r = apply_int_field_json(c, f, e, p, error) ?: 1;
                else
                        r = extra ? extra(c, key, e, p, error) : 0;
                if (r == 0)
                        return unknown_key(p, error);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_limits_extra(Config *c, const char *key, json_t *e, const char *p, char **error)
{
        int r;

        if (!streq(key, "per_user"))
                return 0;
        r = parse_int_object(c, e, p, &config_per_user_fields, NULL, error);
        return r < 0 ? r : 1;
}

static int parse_limits(Config *c, json_t *v, const char *path, char **error)
{
        return parse_int_object(c, v, path, &config_limit_fields, parse_limits_extra, error);
}

static int parse_tcp_extra(Config *c, const char *key, json_t *e, const char *p, char **error)
{
        int r;

        if (!streq(key, "crc"))
                return 0;
        r = parse_bool(e, p, &c->tcp.crc, error);
        return r < 0 ? r : 1;
}

static int parse_tcp(Config *c, json_t *v, const char *path, char **error)
{
        return parse_int_object(c, v, path, &config_tcp_fields, parse_tcp_extra, error);
}

static int parse_rdma(Config *c, json_t *v, const char *path, char **error)
{
        return parse_int_object(c, v, path, &config_rdma_fields, NULL, error);
}

int config_parse_listen(const char *s, char **ret)
{
        struct sockaddr_storage sa;
        socklen_t len;
        char *d = NULL;
        int r;

        if (s[0]) {
                /* A port is required: peers must know where to dial (0: any free one). */
                r = sockaddr_parse_listen(s, &sa, &len);
                if (r < 0)
                        return r;
                d = strdup(s);
                if (!d)
                        return -ENOMEM;
        }
        free(*ret);
        *ret = d;
        return 0;
}

static int parse_listen_ip_info(Config *c, json_t *v, const char *path, char **error)
{
        int r;

        if (!json_is_string(v) || !json_string_is_clean(v))
                return config_errorf(error, -EINVAL, "%s: expected a string", path);
        r = config_parse_listen(json_string_value(v), &c->listen_ip_info);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return config_errorf(error, -EINVAL,
                                     "%s: \"%.64s\" is not \"ip:port\" or \"[ipv6]:port\" "
                                     "(numeric, with a port), or \"\" for none",
                                     path, json_string_value(v));
        return 0;
}

static int parse_cluster_key_file(Config *c, json_t *v, const char *path, char **error)
{
        int r;

        r = json_get_string(v, path, 0, PATH_MAX_LEN, &c->cluster_key_file, error);
        if (r < 0)
                return r;
        if (!c->cluster_key_file[0]) {
                free(c->cluster_key_file);
                c->cluster_key_file = NULL;
        }
        return 0;
}

static int parse_client_clusters_accept_links(Config *c, json_t *v, const char *path, char **error)
{
        return parse_bool(v, path, &c->client_clusters_accept_links, error);
}

typedef int (*KeyParser)(Config *c, json_t *v, const char *path, char **error);

static const struct {
        const char *name;
        KeyParser parse;
} top_keys[] = {
        {"socket_path", parse_socket_path},
        {"socket_mode", parse_socket_mode},
        {"allow_uids", parse_allow_uids},
        {"allow_gids", parse_allow_gids},
        {"copy_threads", parse_copy_threads},
        {"control_nice", parse_control_nice},
        {"copy_streaming", parse_copy_streaming},
        {"log_level", parse_log_level},
        {"metrics_listen", parse_metrics_listen},
        {"devices", parse_devices},
        {"listen_ip_info", parse_listen_ip_info},
        {"cluster_key_file", parse_cluster_key_file},
        {"client_clusters_accept_links", parse_client_clusters_accept_links},
        {"tcp", parse_tcp},
        {"rdma", parse_rdma},
        {"limits", parse_limits},
};

int config_apply_json(Config *c, json_t *root, char **error)
{
        const char *key;
        json_t *v;
        int r;

        if (!json_is_object(root))
                return config_errorf(error, -EINVAL, "expected a JSON object at the top level");
        json_object_foreach(root, key, v)
        {
                const IntField *f;
                KeyParser parse = NULL;
                char p[PATH_BUF];

                config_pathf(p, "%s", key);
                for (size_t i = 0; i < ARRAY_SIZE(top_keys); i++)
                        if (streq(key, top_keys[i].name))
                                parse = top_keys[i].parse;
                if (parse) {
                        r = parse(c, v, p, error);
                } else {
                        f = config_int_field_find(&config_top_fields, key);
                        if (!f)
                                return unknown_key(p, error);
                        r = apply_int_field_json(c, f, v, p, error);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}
