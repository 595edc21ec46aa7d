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

#include "daemon/config-internal.h"
#include "daemon/config-keys.h"
#include "daemon/config.h"
#include "daemon/transport/transport-set.h"
#include "common/sockaddr-util.h"
#include "common/socket-path.h"
#include "common/log.h"
#include "common/macro.h"

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
#define TCP_STREAMS_MAX 16

static inline void fclosep(FILE **f)
{
        if (*f)
                (void)fclose(*f);
}

void config_pathf(char *buf, const char *fmt, ...)
{
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vsnprintf(buf, PATH_BUF, fmt, ap);
        va_end(ap);
        if (k >= PATH_BUF)
                memcpy(buf + PATH_BUF - 4, "...", 4);
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
        } units[] = {{TIB, 'T'}, {GIB, 'G'}, {MIB, 'M'}, {KIB, 'K'}};

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
        free(d->address);
}

void config_devices_free(DeviceConfig *devices, size_t n)
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
        c->copy_streaming = true;
        c->control_nice = CONTROL_NICE_DEFAULT;
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
                .attach_timeout_ms = 10000,
                .reserved_connections = 4,
                /* One uid (all the workers of an engine, usually) may take a fair part, never
                 * all: the others still attach, register and move bytes. */
                .per_user =
                        {
                                .max_connections = 32,
                                .max_clusters = 16,
                                .max_regions = 1024,
                                .max_region_bytes = 1024 * GIB,
                                .max_inflight = 1024,
                                .max_notifies = 16384,
                        },
        };
        c->heartbeat_interval_ms = 1000;
        c->heartbeat_timeout_ms = 5000;
        c->rdma = (RdmaConfig){.qps = 4};
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
        config_devices_free(c->devices, c->n_devices);
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

int config_memdup_array(const void *p, size_t n, size_t size, void **ret)
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
        r = config_memdup_array(c->allow_uids, c->n_allow_uids, sizeof(uid_t), &p);
        if (r < 0)
                return r;
        d->allow_uids = p;
        d->n_allow_uids = c->n_allow_uids;
        r = config_memdup_array(c->allow_gids, c->n_allow_gids, sizeof(gid_t), &p);
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
                        dd->rdma_device = dd->netdev = dd->address = NULL;
                        d->n_devices = i + 1;
                        r = strdup_or_null(c->devices[i].rdma_device, &dd->rdma_device);
                        if (r < 0)
                                return r;
                        r = strdup_or_null(c->devices[i].netdev, &dd->netdev);
                        if (r < 0)
                                return r;
                        r = strdup_or_null(c->devices[i].address, &dd->address);
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
        return transport_config_find_device(c->devices, c->n_devices, device_id);
}

void config_transport_terms(const Config *c, TransportSet *ts)
{
        ts->devices = c->devices;
        ts->n_devices = c->n_devices;
        ts->tcp_config = &c->tcp;
        ts->rdma_config = &c->rdma;
}

#define INT_FIELD(n, member, k, lo, hi)                                                            \
        {                                                                                          \
                .name = (n), .offset = offsetof(Config, member),                                   \
                .size = sizeof(((Config *)NULL)->member), .kind = (k), .min = (lo), .max = (hi)    \
        }

static const IntField top_fields[] = {
        INT_FIELD("memory_size", memory_size, FIELD_SIZE, 0, MEMORY_SIZE_MAX),
        INT_FIELD("page_shift", page_shift, FIELD_INT, 12, 30),
        INT_FIELD("sync_kv_timeout_ms", sync_kv_timeout_ms, FIELD_INT, 1, INT32_MAX),
        INT_FIELD("heartbeat_interval_ms", heartbeat_interval_ms, FIELD_INT, 10, 600000),
        INT_FIELD("heartbeat_timeout_ms", heartbeat_timeout_ms, FIELD_INT, 50, 3600000),
        INT_FIELD("link_total_time_ms", link_total_time_ms, FIELD_INT, 100, 3600000),
};

static const IntField rdma_fields[] = {
        INT_FIELD("qps", rdma.qps, FIELD_INT, 1, 8),
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
        INT_FIELD("max_caches_per_client", limits.max_caches_per_client, FIELD_INT, 1, UINT32_MAX),
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
        INT_FIELD("max_notifies_per_client", limits.max_notifies_per_client, FIELD_INT, 1, 1048576),
        INT_FIELD("attach_timeout_ms", limits.attach_timeout_ms, FIELD_INT, 100, 3600000),
        INT_FIELD("reserved_connections", limits.reserved_connections, FIELD_INT, 0, 1024),
};

static const IntField per_user_fields[] = {
        INT_FIELD("max_connections", limits.per_user.max_connections, FIELD_INT, 1,
                  2 * MAX_CLIENTS_MAX),
        INT_FIELD("max_clusters", limits.per_user.max_clusters, FIELD_INT, 1, MAX_CLIENTS_MAX),
        INT_FIELD("max_regions", limits.per_user.max_regions, FIELD_INT, 1, UINT32_MAX),
        INT_FIELD("max_region_bytes", limits.per_user.max_region_bytes, FIELD_SIZE, 1, 1024 * TIB),
        INT_FIELD("max_inflight", limits.per_user.max_inflight, FIELD_INT, 1, UINT32_MAX),
        INT_FIELD("max_notifies", limits.per_user.max_notifies, FIELD_INT, 1, UINT32_MAX),
};

_Static_assert(sizeof(unsigned) == sizeof(uint32_t), "IntField stores unsigned as 4 bytes");

const IntFieldTable config_top_fields = {top_fields, ARRAY_SIZE(top_fields)};
const IntFieldTable config_limit_fields = {limit_fields, ARRAY_SIZE(limit_fields)};
const IntFieldTable config_per_user_fields = {per_user_fields, ARRAY_SIZE(per_user_fields)};
const IntFieldTable config_tcp_fields = {tcp_fields, ARRAY_SIZE(tcp_fields)};
const IntFieldTable config_rdma_fields = {rdma_fields, ARRAY_SIZE(rdma_fields)};

const IntField *config_int_field_find(const IntFieldTable *t, const char *name)
{
        for (size_t i = 0; i < t->n_fields; i++)
                if (streq(t->fields[i].name, name))
                        return &t->fields[i];
        return NULL;
}

void config_int_field_store(Config *c, const IntField *f, uint64_t v)
{
        char *p = (char *)c + f->offset;

        if (f->size == sizeof(uint64_t)) {
                memcpy(p, &v, sizeof(v));
        } else {
                uint32_t v32 = (uint32_t)v;

                memcpy(p, &v32, sizeof(v32));
        }
}

uint64_t config_int_field_load(const Config *c, const IntField *f)
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
        r = config_apply_json(scratch, root, error);
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
