/* SPDX-License-Identifier: MIT */
/*
 * Daemon configuration: built-in defaults, the strict JSON file (jansson) and the value parsers
 * that the command line (config-args.c) shares.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "config-internal.h"
#include "config.h"
#include "sockaddr-util.h"
#include "socket-path.h"
#include "log.h"
#include "macro.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

#define DEFAULT_SOCKET_MODE 0660
#define DEFAULT_MEMORY_SIZE (256 * MIB)
#define DEFAULT_PAGE_SHIFT 16
#define DEFAULT_SYNC_KV_TIMEOUT_MS 1000
#define DEFAULT_COPY_THREADS_MAX 4

#define MEMORY_SIZE_MAX TIB
#define MAX_CLIENTS_MAX 65536
#define TENSOR_ADDRS_MAX 240
#define FRAME_SIZE_MIN (4 * KIB)
#define FRAME_SIZE_MAX (256 * MIB)
/* A bound on the device map keeps the duplicate check cheap whatever the input. */
#define DEVICES_MAX 1024
/* IBV_SYSFS_NAME_MAX less the NUL; not taken from verbs.h, which only the RDMA transport sees. */
#define RDMA_DEVICE_NAME_MAX 63
#define NETDEV_NAME_MAX (IFNAMSIZ - 1)
#define PATH_MAX_LEN 4095
#define TCP_STREAMS_MAX 16

/* Room for a key path in messages ("devices[1023].rdma_device"); longer user keys are cut. */
#define PATH_BUF 256

static inline void fclosep(FILE **f)
{
        if (*f)
                (void)fclose(*f);
}

/* Formats a key path for messages into @buf (PATH_BUF bytes), ending in "..." when cut. */
static void pathf(char *buf, const char *fmt, ...) _printf_(2, 3);
static void pathf(char *buf, const char *fmt, ...)
{
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vsnprintf(buf, PATH_BUF, fmt, ap);
        va_end(ap);
        if (k >= PATH_BUF)
                memcpy(buf + PATH_BUF - 4, "...", 4);
}

static bool streq(const char *a, const char *b)
{
        return strcmp(a, b) == 0;
}

int config_errorf(char **error, int r, const char *fmt, ...)
{
        va_list ap;
        char *s;

        if (*error)
                return r;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        *error = s;
        return r;
}

void config_error_give(char **error, char **ret_error)
{
        if (ret_error)
                *ret_error = TAKE_PTR(*error);
}

const char *config_format_size(uint64_t v, char buf[static 32])
{
        static const struct {
                uint64_t factor;
                char suffix;
        } units[] = { { TIB, 'T' }, { GIB, 'G' }, { MIB, 'M' }, { KIB, 'K' } };

        for (size_t i = 0; i < ARRAY_SIZE(units); i++)
                if (v != 0 && v % units[i].factor == 0) {
                        (void)snprintf(buf, 32, "%" PRIu64 "%c", v / units[i].factor,
                                       units[i].suffix);
                        return buf;
                }
        (void)snprintf(buf, 32, "%" PRIu64, v);
        return buf;
}

int config_parse_size(const char *s, uint64_t *ret)
{
        uint64_t v = 0, factor = 1;
        const char *p = s;

        if (*p < '0' || *p > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++)
                if (MUL_OVERFLOW(v, 10, &v) || ADD_OVERFLOW(v, (uint64_t)(*p - '0'), &v))
                        return -ERANGE;
        switch (*p) {
        case 'K':
        case 'k':
                factor = KIB;
                break;
        case 'M':
        case 'm':
                factor = MIB;
                break;
        case 'G':
        case 'g':
                factor = GIB;
                break;
        case 'T':
        case 't':
                factor = TIB;
                break;
        case '\0':
                break;
        default:
                return -EINVAL;
        }
        if (factor != 1) {
                p++;
                if (*p != '\0' && !streq(p, "iB"))
                        return -EINVAL;
        }
        if (MUL_OVERFLOW(v, factor, &v))
                return -ERANGE;
        *ret = v;
        return 0;
}

const char *transport_kind_to_string(TransportKind k)
{
        static const char *const names[_TRANSPORT_KIND_MAX] = {
                [TRANSPORT_KIND_AUTO] = "auto",
                [TRANSPORT_KIND_TCP] = "tcp",
                [TRANSPORT_KIND_RDMA] = "rdma",
        };

        if (k < 0 || k >= _TRANSPORT_KIND_MAX)
                return NULL;
        return names[k];
}

static TransportKind transport_kind_from_string(const char *s)
{
        for (int k = 0; k < _TRANSPORT_KIND_MAX; k++)
                if (streq(s, transport_kind_to_string(k)))
                        return k;
        return _TRANSPORT_KIND_INVALID;
}

char *config_default_socket_path(void)
{
        char buf[SOCKET_PATH_MAX + 1];

        if (socket_path_default(buf, sizeof(buf)) < 0)
                return NULL;
        return strdup(buf);
}

unsigned config_default_copy_threads(void)
{
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        if (n < 1)
                n = 1;
        return (unsigned)MIN(n, DEFAULT_COPY_THREADS_MAX);
}

static void device_config_done(DeviceConfig *d)
{
        free(d->rdma_device);
        free(d->netdev);
}

static void devices_free(DeviceConfig *devices, size_t n)
{
        for (size_t i = 0; i < n; i++)
                device_config_done(&devices[i]);
        free(devices);
}

int config_new(Config **ret)
{
        _cleanup_(config_freep) Config *c = NULL;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->socket_path = config_default_socket_path();
        if (!c->socket_path)
                return -ENOMEM;
        c->socket_mode = DEFAULT_SOCKET_MODE;
        c->memory_size = DEFAULT_MEMORY_SIZE;
        c->page_shift = DEFAULT_PAGE_SHIFT;
        c->sync_kv_timeout_ms = DEFAULT_SYNC_KV_TIMEOUT_MS;
        c->copy_threads = config_default_copy_threads();
        c->log_level = LOG_INFO;
        c->limits = (Limits){
                .max_clients = 64,
                .max_regions_per_client = 256,
                .max_region_size = 64 * GIB,
                .max_caches_per_client = 4096,
                .max_keys_per_client = 65536,
                .max_tensor_addrs = TENSOR_ADDRS_MAX,
                .max_inflight_per_client = 256,
                .max_frame_size = 16 * MIB,
                .max_blocks_per_transfer = 1048576,
                .max_links_per_client = 1024,
                .max_peers = 64,
                .max_notifies_per_client = 4096,
        };
        c->heartbeat_interval_ms = 1000;
        c->heartbeat_timeout_ms = 5000;
        c->link_total_time_ms = 120000;
        c->tcp = (TcpConfig){
                .streams = 4,
                .crc = false,
                .chunk_size = 1 * MIB,
        };
        *ret = TAKE_PTR(c);
        return 0;
}

Config *config_free(Config *c)
{
        if (!c)
                return NULL;
        free(c->socket_path);
        free(c->listen_ip_info);
        free(c->cluster_key_file);
        free(c->metrics_listen);
        free(c->allow_uids);
        free(c->allow_gids);
        devices_free(c->devices, c->n_devices);
        free(c);
        return NULL;
}

static int strdup_or_null(const char *s, char **ret)
{
        char *d = NULL;

        if (s) {
                d = strdup(s);
                if (!d)
                        return -ENOMEM;
        }
        *ret = d;
        return 0;
}

static int memdup_array(const void *p, size_t n, size_t size, void **ret)
{
        void *d = NULL;

        if (n > 0) {
                d = malloc(n * size);
                if (!d)
                        return -ENOMEM;
                memcpy(d, p, n * size);
        }
        *ret = d;
        return 0;
}

int config_dup(const Config *c, Config **ret)
{
        _cleanup_(config_freep) Config *d = NULL;
        void *p;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        *d = *c;
        d->socket_path = NULL;
        d->listen_ip_info = NULL;
        d->cluster_key_file = NULL;
        d->metrics_listen = NULL;
        d->allow_uids = NULL;
        d->allow_gids = NULL;
        d->devices = NULL;
        d->n_allow_uids = d->n_allow_gids = d->n_devices = 0;

        r = strdup_or_null(c->socket_path, &d->socket_path);
        if (r < 0)
                return r;
        r = strdup_or_null(c->listen_ip_info, &d->listen_ip_info);
        if (r < 0)
                return r;
        r = strdup_or_null(c->cluster_key_file, &d->cluster_key_file);
        if (r < 0)
                return r;
        r = strdup_or_null(c->metrics_listen, &d->metrics_listen);
        if (r < 0)
                return r;
        r = memdup_array(c->allow_uids, c->n_allow_uids, sizeof(uid_t), &p);
        if (r < 0)
                return r;
        d->allow_uids = p;
        d->n_allow_uids = c->n_allow_uids;
        r = memdup_array(c->allow_gids, c->n_allow_gids, sizeof(gid_t), &p);
        if (r < 0)
                return r;
        d->allow_gids = p;
        d->n_allow_gids = c->n_allow_gids;
        if (c->n_devices > 0) {
                d->devices = calloc(c->n_devices, sizeof(DeviceConfig));
                if (!d->devices)
                        return -ENOMEM;
                for (size_t i = 0; i < c->n_devices; i++) {
                        DeviceConfig *dd = &d->devices[i];

                        *dd = c->devices[i];
                        dd->rdma_device = dd->netdev = NULL;
                        d->n_devices = i + 1;
                        r = strdup_or_null(c->devices[i].rdma_device, &dd->rdma_device);
                        if (r < 0)
                                return r;
                        r = strdup_or_null(c->devices[i].netdev, &dd->netdev);
                        if (r < 0)
                                return r;
                }
        }
        *ret = TAKE_PTR(d);
        return 0;
}

void config_replace(Config *c, Config *scratch)
{
        Config old = *c;

        *c = *scratch;
        *scratch = old;
        config_free(scratch);
}

const DeviceConfig *config_find_device(const Config *c, int32_t device_id)
{
        for (size_t i = 0; i < c->n_devices; i++)
                if (c->devices[i].device_id == device_id)
                        return &c->devices[i];
        return NULL;
}

#define INT_FIELD(n, member, k, lo, hi)                                                   \
        {                                                                                 \
                .name = (n), .offset = offsetof(Config, member),                          \
                .size = sizeof(((Config *)NULL)->member), .kind = (k), .min = (lo),       \
                .max = (hi)                                                               \
        }

static const IntField top_fields[] = {
        INT_FIELD("memory_size", memory_size, FIELD_SIZE, 0, MEMORY_SIZE_MAX),
        INT_FIELD("page_shift", page_shift, FIELD_INT, 12, 30),
        INT_FIELD("sync_kv_timeout_ms", sync_kv_timeout_ms, FIELD_INT, 1, INT32_MAX),
        INT_FIELD("heartbeat_interval_ms", heartbeat_interval_ms, FIELD_INT, 10, 600000),
        INT_FIELD("heartbeat_timeout_ms", heartbeat_timeout_ms, FIELD_INT, 50, 3600000),
        INT_FIELD("link_total_time_ms", link_total_time_ms, FIELD_INT, 100, 3600000),
};

static const IntField tcp_fields[] = {
        INT_FIELD("streams", tcp.streams, FIELD_INT, 1, TCP_STREAMS_MAX),
        INT_FIELD("chunk_size", tcp.chunk_size, FIELD_SIZE, 4 * KIB, 64 * MIB),
};

static const IntField limit_fields[] = {
        INT_FIELD("max_clients", limits.max_clients, FIELD_INT, 1, MAX_CLIENTS_MAX),
        INT_FIELD("max_regions_per_client", limits.max_regions_per_client, FIELD_INT, 1,
                  UINT32_MAX),
        INT_FIELD("max_region_size", limits.max_region_size, FIELD_SIZE, 1, TIB),
        INT_FIELD("max_caches_per_client", limits.max_caches_per_client, FIELD_INT, 1,
                  UINT32_MAX),
        INT_FIELD("max_keys_per_client", limits.max_keys_per_client, FIELD_INT, 1, UINT32_MAX),
        INT_FIELD("max_tensor_addrs", limits.max_tensor_addrs, FIELD_INT, 1, TENSOR_ADDRS_MAX),
        INT_FIELD("max_inflight_per_client", limits.max_inflight_per_client, FIELD_INT, 1,
                  UINT32_MAX),
        INT_FIELD("max_frame_size", limits.max_frame_size, FIELD_SIZE, FRAME_SIZE_MIN,
                  FRAME_SIZE_MAX),
        INT_FIELD("max_blocks_per_transfer", limits.max_blocks_per_transfer, FIELD_INT, 1,
                  UINT32_MAX),
        INT_FIELD("max_links_per_client", limits.max_links_per_client, FIELD_INT, 1, 65536),
        INT_FIELD("max_peers", limits.max_peers, FIELD_INT, 1, 4096),
        INT_FIELD("max_notifies_per_client", limits.max_notifies_per_client, FIELD_INT, 1,
                  1048576),
};

_Static_assert(sizeof(unsigned) == sizeof(uint32_t), "IntField stores unsigned as 4 bytes");

const IntFieldTable config_top_fields = { top_fields, ARRAY_SIZE(top_fields) };
const IntFieldTable config_limit_fields = { limit_fields, ARRAY_SIZE(limit_fields) };
const IntFieldTable config_tcp_fields = { tcp_fields, ARRAY_SIZE(tcp_fields) };

const IntField *int_field_find(const IntFieldTable *t, const char *name)
{
        for (size_t i = 0; i < t->n_fields; i++)
                if (streq(t->fields[i].name, name))
                        return &t->fields[i];
        return NULL;
}

void int_field_store(Config *c, const IntField *f, uint64_t v)
{
        char *p = (char *)c + f->offset;

        if (f->size == sizeof(uint64_t)) {
                memcpy(p, &v, sizeof(v));
        } else {
                uint32_t v32 = (uint32_t)v;

                memcpy(p, &v32, sizeof(v32));
        }
}

uint64_t int_field_load(const Config *c, const IntField *f)
{
        const char *p = (const char *)c + f->offset;
        uint32_t v32;
        uint64_t v;

        if (f->size == sizeof(uint64_t)) {
                memcpy(&v, p, sizeof(v));
                return v;
        }
        memcpy(&v32, p, sizeof(v32));
        return v32;
}

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
        int_field_store(c, f, u);
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
static int json_get_string(json_t *v, const char *path, size_t min_len, size_t max_len,
                           char **ret, char **error)
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
static int parse_id_array(json_t *v, const char *path, uint32_t **ret, size_t *ret_n,
                          char **error)
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
        json_array_foreach(v, i, e) {
                int64_t id = 0;

                pathf(p, "%s[%zu]", path, i);
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
        json_object_foreach(obj, key, v) {
                pathf(p, "%s.%s", path, key);
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
                        if (k < 0)
                                return config_errorf(error, -EINVAL,
                                                     "%s: expected one of \"auto\", \"tcp\", "
                                                     "\"rdma\"",
                                                     p);
                        d->transport = k;
                } else if (streq(key, "rdma_device")) {
                        r = json_get_string(v, p, 1, RDMA_DEVICE_NAME_MAX, &d->rdma_device,
                                            error);
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
        json_array_foreach(v, i, e) {
                pathf(p, "%s[%zu]", path, i);
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
        }
        devices_free(c->devices, c->n_devices);
        c->devices = devices;
        c->n_devices = n;
        return 0;
fail:
        devices_free(devices, n);
        return r;
}

static int parse_limits(Config *c, json_t *v, const char *path, char **error)
{
        char p[PATH_BUF];
        const char *key;
        json_t *e;
        int r;

        if (!json_is_object(v))
                return config_errorf(error, -EINVAL, "%s: expected an object", path);
        json_object_foreach(v, key, e) {
                const IntField *f = int_field_find(&config_limit_fields, key);

                pathf(p, "%s.%s", path, key);
                if (!f)
                        return unknown_key(p, error);
                r = apply_int_field_json(c, f, e, p, error);
                if (r < 0)
                        return r;
        }
        return 0;
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

static int parse_tcp(Config *c, json_t *v, const char *path, char **error)
{
        char p[PATH_BUF];
        const char *key;
        json_t *e;
        int r;

        if (!json_is_object(v))
                return config_errorf(error, -EINVAL, "%s: expected an object", path);
        json_object_foreach(v, key, e) {
                const IntField *f = int_field_find(&config_tcp_fields, key);

                pathf(p, "%s.%s", path, key);
                if (streq(key, "crc")) {
                        if (!json_is_boolean(e))
                                return config_errorf(error, -EINVAL, "%s: expected true or false",
                                                     p);
                        c->tcp.crc = json_is_true(e);
                        continue;
                }
                if (!f)
                        return unknown_key(p, error);
                r = apply_int_field_json(c, f, e, p, error);
                if (r < 0)
                        return r;
        }
        return 0;
}

typedef int (*KeyParser)(Config *c, json_t *v, const char *path, char **error);

static const struct {
        const char *name;
        KeyParser parse;
} top_keys[] = {
        { "socket_path", parse_socket_path },
        { "socket_mode", parse_socket_mode },
        { "allow_uids", parse_allow_uids },
        { "allow_gids", parse_allow_gids },
        { "copy_threads", parse_copy_threads },
        { "log_level", parse_log_level },
        { "metrics_listen", parse_metrics_listen },
        { "devices", parse_devices },
        { "listen_ip_info", parse_listen_ip_info },
        { "cluster_key_file", parse_cluster_key_file },
        { "tcp", parse_tcp },
        { "limits", parse_limits },
};

/* Applies every key of @root over @c, which is a scratch copy: it may be left half-written. */
static int apply_json(Config *c, json_t *root, char **error)
{
        const char *key;
        json_t *v;
        int r;

        if (!json_is_object(root))
                return config_errorf(error, -EINVAL, "expected a JSON object at the top level");
        json_object_foreach(root, key, v) {
                const IntField *f;
                KeyParser parse = NULL;
                char p[PATH_BUF];

                pathf(p, "%s", key);
                for (size_t i = 0; i < ARRAY_SIZE(top_keys); i++)
                        if (streq(key, top_keys[i].name))
                                parse = top_keys[i].parse;
                if (parse) {
                        r = parse(c, v, p, error);
                } else {
                        f = int_field_find(&config_top_fields, key);
                        if (!f)
                                return unknown_key(p, error);
                        r = apply_int_field_json(c, f, v, p, error);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

int config_check(const Config *c, char **error)
{
        if (c->heartbeat_timeout_ms < 2 * c->heartbeat_interval_ms)
                return config_errorf(error, -EINVAL,
                                     "heartbeat_timeout_ms: %" PRIu32 " ms must be at least twice "
                                     "heartbeat_interval_ms (%" PRIu32 " ms), or one late "
                                     "heartbeat loses the peer",
                                     c->heartbeat_timeout_ms, c->heartbeat_interval_ms);
        return 0;
}

static int json_error_to_errno(const json_error_t *jerr)
{
        return json_error_code(jerr) == json_error_out_of_memory ? -ENOMEM : -EINVAL;
}

/* Applies what jansson parsed over @c, all or nothing; @root NULL is the parse error in @jerr. */
static int load_json(Config *c, json_t *root, const json_error_t *jerr, char **error)
{
        _cleanup_(config_freep) Config *scratch = NULL;
        int r;

        if (!root)
                return config_errorf(error, json_error_to_errno(jerr), "line %d, column %d: %s",
                                     jerr->line, jerr->column, jerr->text);
        r = config_dup(c, &scratch);
        if (r < 0)
                return r;
        r = apply_json(scratch, root, error);
        if (r < 0)
                return r;
        r = config_check(scratch, error);
        if (r < 0)
                return r;
        config_replace(c, TAKE_PTR(scratch));
        return 0;
}

int config_load_string(Config *c, const char *json, char **ret_error)
{
        _cleanup_(json_decrefp) json_t *root = NULL;
        _cleanup_free_ char *error = NULL;
        json_error_t jerr;
        int r;

        root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
        r = load_json(c, root, &jerr, &error);
        if (r < 0)
                config_error_give(&error, ret_error);
        return r;
}

int config_load_file(Config *c, const char *path, char **ret_error)
{
        _cleanup_(json_decrefp) json_t *root = NULL;
        _cleanup_(fclosep) FILE *f = NULL;
        _cleanup_free_ char *error = NULL;
        _cleanup_free_ char *msg = NULL;
        json_error_t jerr;
        int r;

        f = fopen(path, "re");
        if (!f) {
                r = -errno;
                (void)config_errorf(&msg, r, "%s: cannot open: %s", path, strerror(-r));
                config_error_give(&msg, ret_error);
                return r;
        }
        root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
        r = load_json(c, root, &jerr, &error);
        if (r < 0) {
                if (error)
                        (void)config_errorf(&msg, r, "%s: %s", path, error);
                config_error_give(&msg, ret_error);
        }
        return r;
}
