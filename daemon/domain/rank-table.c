/* SPDX-License-Identifier: MIT */
/* Rank table: the HCCL "1.0" and "1.2" JSON forms of a comm domain's members, parsed and checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include "daemon/domain/rank-table.h"
#include "common/status.h"

#define PATH_MAX_LEN 96

typedef struct Ctx {
        const char *what; /* "rank_table", "local_comm_res" */
        Error *err;
        bool v12; /* the "1.2" form: its keys are known */
} Ctx;

/* A key an object may have, and whether only the "1.2" form knows it. */
typedef struct Key {
        const char *name;
        bool v12;
} Key;

static int ctx_fail(const Ctx *c, const char *path, const char *fmt, ...) _printf_(3, 4);
static int ctx_fail(const Ctx *c, const char *path, const char *fmt, ...)
{
        char msg[ERROR_MSG_MAX];
        va_list ap;

        va_start(ap, fmt);
        (void)vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return error_set(c->err, STATUS_PARAM_INVALID, "%s: %s%s%s", c->what, path,
                         path[0] ? ": " : "", msg);
}

int rank_table_parse_address(const char *s, char *buf, size_t size)
{
        struct sockaddr_storage sa;
        socklen_t len;

        if (!s || sockaddr_parse(s, RANK_TABLE_DEFAULT_PORT, &sa, &len) < 0)
                return -EINVAL;
        return sockaddr_format((struct sockaddr *)&sa, len, buf, size) < 0 ? -EINVAL : 0;
}

bool rank_table_same_ip(const char *a, const char *b)
{
        struct sockaddr_storage x, y;
        socklen_t xl, yl;

        if (!a || !b || sockaddr_parse(a, RANK_TABLE_DEFAULT_PORT, &x, &xl) < 0 ||
            sockaddr_parse(b, RANK_TABLE_DEFAULT_PORT, &y, &yl) < 0 || x.ss_family != y.ss_family)
                return false;
        if (x.ss_family == AF_INET)
                return ((const struct sockaddr_in *)&x)->sin_addr.s_addr ==
                       ((const struct sockaddr_in *)&y)->sin_addr.s_addr;
        return IN6_ARE_ADDR_EQUAL(&((const struct sockaddr_in6 *)&x)->sin6_addr,
                                  &((const struct sockaddr_in6 *)&y)->sin6_addr);
}

/* A non-negative number no larger than @max, written as a decimal string or a JSON integer. */
static int get_uint(const Ctx *c, json_t *v, const char *path, uint64_t max, uint64_t *ret)
{
        uint64_t n = 0;

        if (json_is_integer(v)) {
                if (json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
                        return ctx_fail(c, path,
                                        "%" JSON_INTEGER_FORMAT " is outside [0, %" PRIu64 "]",
                                        json_integer_value(v), max);
                *ret = (uint64_t)json_integer_value(v);
                return 0;
        }
        if (!json_is_string(v))
                return ctx_fail(c, path, "expected a number (\"0\" or 0)");
        {
                const char *s = json_string_value(v);
                size_t len = json_string_length(v);

                if (len == 0 || len > 10 || strlen(s) != len)
                        return ctx_fail(c, path, "\"%.32s\" is not a decimal number", s);
                for (size_t i = 0; i < len; i++) {
                        if (s[i] < '0' || s[i] > '9')
                                return ctx_fail(c, path, "\"%.32s\" is not a decimal number", s);
                        n = n * 10 + (uint64_t)(s[i] - '0');
                }
                if (n > max)
                        return ctx_fail(c, path, "%" PRIu64 " is outside [0, %" PRIu64 "]", n, max);
        }
        *ret = n;
        return 0;
}

static int get_string(const Ctx *c, json_t *v, const char *path, size_t max, const char **ret)
{
        const char *s;

        if (!json_is_string(v))
                return ctx_fail(c, path, "expected a string");
        s = json_string_value(v);
        if (strlen(s) != json_string_length(v))
                return ctx_fail(c, path, "contains a NUL byte");
        if (json_string_length(v) == 0 || json_string_length(v) > max)
                return ctx_fail(c, path, "must be 1..%zu characters", max);
        for (const char *p = s; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        return ctx_fail(c, path, "contains a control character");
        *ret = s;
        return 0;
}

/* Fails for a key of @obj that is not in the @known list (ended by a NULL name). */
static int check_keys(const Ctx *c, json_t *obj, const char *path, const Key *known)
{
        const char *key;
        json_t *v;

        json_object_foreach(obj, key, v)
        {
                const Key *k = known;

                while (k->name && strcmp(key, k->name) != 0)
                        k++;
                if (k->name && k->v12 && !c->v12)
                        return ctx_fail(c, path,
                                        "unknown key \"%s\" (a \"1.2\" key, and this is the "
                                        "\"1.0\" form: set \"version\": \"1.2\")",
                                        k->name);
                if (!k->name)
                        return ctx_fail(c, path, "unknown key \"%.32s\"", key);
        }
        return 0;
}

static json_t *need(const Ctx *c, json_t *obj, const char *path, const char *key, int *r)
{
        json_t *v = json_object_get(obj, key);

        if (!v)
                *r = ctx_fail(c, path, "\"%s\" is missing", key);
        return v;
}

/* Reads the version (it decides which keys are known), checks the top level. */
static int parse_header(Ctx *c, json_t *root, bool fragment, json_t **ret_servers)
{
        static const Key keys[] = {{"version"}, {"server_count"},         {"server_list"},
                                   {"status"},  {"super_pod_list", true}, {NULL}};
        json_t *v, *servers;
        uint64_t count;
        int r = 0;

        if (!json_is_object(root))
                return ctx_fail(c, "", "expected a JSON object");
        v = json_object_get(root, "version");
        if (!v && !fragment)
                return ctx_fail(c, "",
                                "\"version\" is missing (kvdist reads the \"1.0\" and \"1.2\" "
                                "forms)");
        if (v && !json_is_string(v))
                return ctx_fail(c, "version", "expected a string (\"1.0\" or \"1.2\")");
        if (v && strcmp(json_string_value(v), "1.2") == 0)
                c->v12 = true;
        else if (v && strcmp(json_string_value(v), "1.0") != 0)
                return ctx_fail(c, "version",
                                "\"%.16s\" is not a form kvdist reads (\"1.0\" or \"1.2\")",
                                json_string_value(v));
        r = check_keys(c, root, "", keys);
        if (r < 0)
                return r;
        v = json_object_get(root, "status");
        if (v && (!json_is_string(v) || strcmp(json_string_value(v), "completed") != 0))
                return ctx_fail(c, "status",
                                "must be \"completed\" (a table still being filled "
                                "in cannot form a domain)");
        servers = need(c, root, "", "server_list", &r);
        if (!servers)
                return r;
        if (!json_is_array(servers) || json_array_size(servers) == 0)
                return ctx_fail(c, "server_list", "expected a non-empty array");
        v = json_object_get(root, "server_count");
        if (!v && !fragment)
                return ctx_fail(c, "", "\"server_count\" is missing");
        if (v) {
                r = get_uint(c, v, "server_count", UINT32_MAX, &count);
                if (r < 0)
                        return r;
                if (count != json_array_size(servers))
                        return ctx_fail(c, "server_count",
                                        "%" PRIu64 ", but server_list "
                                        "has %zu entries",
                                        count, json_array_size(servers));
        }
        *ret_servers = servers;
        return 0;
}

/* A member address at @v (a device_ip or host_ip) into @buf, canonical. */
static int get_address(const Ctx *c, json_t *v, const char *path, char *buf, size_t size)
{
        const char *ip;
        int r;

        r = get_string(c, v, path, SOCKADDR_STR_MAX - 1, &ip);
        if (r < 0)
                return r;
        if (rank_table_parse_address(ip, buf, size) < 0)
                return ctx_fail(c, path,
                                "\"%.48s\" is not a numeric address (\"ip\", \"ip:port\" or "
                                "\"[v6]:port\" of the member's kvdistd)",
                                ip);
        return 0;
}

/* "1.2" device keys kvdist does not use: checked for their form only. */
static int check_unused_device_keys(const Ctx *c, json_t *dev, const char *path)
{
        static const char *const ports[] = {"device_port", "backup_device_port", "host_port"};
        char p[PATH_MAX_LEN + 24];
        const char *ip;
        uint64_t n;
        json_t *v;
        int r;

        v = json_object_get(dev, "super_device_id");
        if (v) {
                (void)snprintf(p, sizeof(p), "%.*s.super_device_id", PATH_MAX_LEN - 1, path);
                r = get_uint(c, v, p, UINT32_MAX, &n);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ARRAY_SIZE(ports); i++) {
                v = json_object_get(dev, ports[i]);
                if (!v)
                        continue;
                (void)snprintf(p, sizeof(p), "%.*s.%s", PATH_MAX_LEN - 1, path, ports[i]);
                r = get_uint(c, v, p, UINT16_MAX, &n);
                if (r < 0)
                        return r;
        }
        v = json_object_get(dev, "backup_device_ip");
        if (v) {
                struct in6_addr a;

                (void)snprintf(p, sizeof(p), "%.*s.backup_device_ip", PATH_MAX_LEN - 1, path);
                r = get_string(c, v, p, INET6_ADDRSTRLEN - 1, &ip);
                if (r < 0)
                        return r;
                if (inet_pton(AF_INET, ip, &a) != 1 && inet_pton(AF_INET6, ip, &a) != 1)
                        return ctx_fail(c, p, "\"%.48s\" is not a numeric IP address", ip);
        }
        return 0;
}

/*
 * One device entry; @with_rank says whether rank_id is required (table) or refused (fragment).
 * @host (NULL when the server has no host_ip) is the server's kvdistd address: the device's
 * address then, and device_ip the device's own NIC address (optional, checked, not used).
 */
static int parse_device(const Ctx *c, json_t *dev, const char *path, bool with_rank,
                        const char *host, RankDevice *ret)
{
        static const Key keys[] = {{"device_id"},
                                   {"device_ip"},
                                   {"rank_id"},
                                   {"super_device_id", true},
                                   {"device_port", true},
                                   {"backup_device_ip", true},
                                   {"backup_device_port", true},
                                   {"host_port", true},
                                   {NULL}};
        char p[PATH_MAX_LEN + 16], nic[SOCKADDR_STR_MAX];
        uint64_t n;
        json_t *v;
        int r = 0;

        if (!json_is_object(dev))
                return ctx_fail(c, path, "expected an object");
        r = check_keys(c, dev, path, keys);
        if (r < 0)
                return r;
        v = need(c, dev, path, "device_id", &r);
        if (!v)
                return r;
        (void)snprintf(p, sizeof(p), "%.*s.device_id", PATH_MAX_LEN - 1, path);
        r = get_uint(c, v, p, INT32_MAX, &n);
        if (r < 0)
                return r;
        ret->device_id = (int32_t)n;
        v = json_object_get(dev, "device_ip");
        if (!v && !host)
                return ctx_fail(c, path, "\"device_ip\" is missing%s",
                                c->v12 ? " (it names the member's kvdistd unless the server "
                                         "has a host_ip)"
                                       : "");
        if (v) {
                (void)snprintf(p, sizeof(p), "%.*s.device_ip", PATH_MAX_LEN - 1, path);
                r = get_address(c, v, p, nic, sizeof(nic));
                if (r < 0)
                        return r;
                (void)snprintf(ret->device_ip, sizeof(ret->device_ip), "%s", nic);
        }
        (void)snprintf(ret->address, sizeof(ret->address), "%s", host ?: nic);
        ret->address_key = host ? "host_ip" : "device_ip";
        r = check_unused_device_keys(c, dev, path);
        if (r < 0)
                return r;
        v = json_object_get(dev, "rank_id");
        (void)snprintf(p, sizeof(p), "%.*s.rank_id", PATH_MAX_LEN - 1, path);
        if (!with_rank) {
                if (v)
                        return ctx_fail(c, p,
                                        "belongs in the rank table given to link, not in "
                                        "local_comm_res");
                return 0;
        }
        if (!v)
                return ctx_fail(c, path, "\"rank_id\" is missing");
        r = get_uint(c, v, p, UINT32_MAX, &n);
        if (r < 0)
                return r;
        ret->rank = (uint32_t)n;
        return 0;
}

static int parse_server(const Ctx *c, json_t *server, const char *path, bool with_rank,
                        RankDevice *devs, size_t max, size_t *n_devs)
{
        static const Key keys[] = {
                {"server_id"}, {"device"}, {"host_nic_ip"}, {"host_ip", true}, {NULL}};
        char p[PATH_MAX_LEN], host[SOCKADDR_STR_MAX];
        const char *id;
        json_t *devices, *v;
        size_t i, first = *n_devs;
        bool has_host;
        int r = 0;

        if (!json_is_object(server))
                return ctx_fail(c, path, "expected an object");
        r = check_keys(c, server, path, keys);
        if (r < 0)
                return r;
        v = need(c, server, path, "server_id", &r);
        if (!v)
                return r;
        (void)snprintf(p, sizeof(p), "%s.server_id", path);
        r = get_string(c, v, p, RANK_TABLE_ID_MAX - 1, &id);
        if (r < 0)
                return r;
        v = json_object_get(server, "host_ip");
        has_host = v != NULL;
        if (has_host) {
                (void)snprintf(p, sizeof(p), "%s.host_ip", path);
                r = get_address(c, v, p, host, sizeof(host));
                if (r < 0)
                        return r;
        }
        devices = need(c, server, path, "device", &r);
        if (!devices)
                return r;
        (void)snprintf(p, sizeof(p), "%s.device", path);
        if (!json_is_array(devices) || json_array_size(devices) == 0)
                return ctx_fail(c, p, "expected a non-empty array");
        json_array_foreach(devices, i, v)
        {
                RankDevice *d;

                if (*n_devs >= max)
                        return ctx_fail(c, p, "more than %zu devices in all%s", max,
                                        with_rank ? " (a comm domain has 2..4 members)"
                                                  : " (local_comm_res describes one device)");
                d = &devs[(*n_devs)++];
                *d = (RankDevice){0};
                (void)snprintf(d->server_id, sizeof(d->server_id), "%s", id);
                (void)snprintf(p, sizeof(p), "%s.device[%zu]", path, i);
                r = parse_device(c, v, p, with_rank, has_host ? host : NULL, d);
                if (r < 0)
                        return r;
                for (size_t k = first; k + 1 < *n_devs; k++) {
                        if (devs[k].device_id == d->device_id)
                                return ctx_fail(c, p,
                                                "device_id %" PRId32 " appears twice in "
                                                "server %s",
                                                d->device_id, id);
                }
                /* One kvdistd serves every device of a server; the devices may name it by
                 * one address (its listen_ip_info) or each by its own (devices[].address), so
                 * their device_ips may differ. */
        }
        return 0;
}

/* Whether server_list has a server named @id. */
static bool has_server(json_t *servers, const char *id)
{
        size_t i;
        json_t *s;

        json_array_foreach(servers, i, s)
        {
                const char *sid = json_string_value(json_object_get(s, "server_id"));

                if (sid && strcmp(sid, id) == 0)
                        return true;
        }
        return false;
}

/*
 * "1.2": super_pod_list, the super pods (HCCL: NPUs joined by the super pod's fabric) and their
 * servers. kvdist has none (every member goes through its kvdistd), so it is only checked: each
 * pod an id and servers of server_list, no pod or server twice.
 */
static int parse_super_pods(const Ctx *c, json_t *root, json_t *servers)
{
        static const Key pod_keys[] = {{"super_pod_id"}, {"server_list"}, {NULL}};
        static const Key ref_keys[] = {{"server_id"}, {NULL}};
        json_t *pods = json_object_get(root, "super_pod_list"), *pod, *v, *refs, *ref;
        size_t i, j;
        int r = 0;

        if (!pods)
                return 0;
        if (!json_is_array(pods) || json_array_size(pods) == 0)
                return ctx_fail(c, "super_pod_list", "expected a non-empty array");
        json_array_foreach(pods, i, pod)
        {
                char p[PATH_MAX_LEN], q[PATH_MAX_LEN + 64];
                const char *id, *sid;

                (void)snprintf(p, sizeof(p), "super_pod_list[%zu]", i);
                if (!json_is_object(pod))
                        return ctx_fail(c, p, "expected an object");
                r = check_keys(c, pod, p, pod_keys);
                if (r < 0)
                        return r;
                v = need(c, pod, p, "super_pod_id", &r);
                if (!v)
                        return r;
                (void)snprintf(q, sizeof(q), "%.*s.super_pod_id", PATH_MAX_LEN - 1, p);
                r = get_string(c, v, q, RANK_TABLE_POD_ID_MAX - 1, &id);
                if (r < 0)
                        return r;
                for (size_t k = 0; k < i; k++)
                        if (strcmp(json_string_value(json_object_get(json_array_get(pods, k),
                                                                     "super_pod_id")),
                                   id) == 0)
                                return ctx_fail(c, q, "\"%s\" appears twice", id);
                refs = need(c, pod, p, "server_list", &r);
                if (!refs)
                        return r;
                (void)snprintf(q, sizeof(q), "%.*s.server_list", PATH_MAX_LEN - 1, p);
                if (!json_is_array(refs) || json_array_size(refs) == 0)
                        return ctx_fail(c, q, "expected a non-empty array");
                json_array_foreach(refs, j, ref)
                {
                        (void)snprintf(q, sizeof(q), "%.*s.server_list[%zu]", PATH_MAX_LEN - 1, p,
                                       j);
                        if (!json_is_object(ref))
                                return ctx_fail(c, q, "expected an object");
                        r = check_keys(c, ref, q, ref_keys);
                        if (r < 0)
                                return r;
                        v = need(c, ref, q, "server_id", &r);
                        if (!v)
                                return r;
                        (void)snprintf(q, sizeof(q), "%.*s.server_list[%zu].server_id",
                                       PATH_MAX_LEN - 1, p, j);
                        r = get_string(c, v, q, RANK_TABLE_ID_MAX - 1, &sid);
                        if (r < 0)
                                return r;
                        if (!has_server(servers, sid))
                                return ctx_fail(c, q, "\"%s\" is not a server of server_list", sid);
                        /* Pods before this one, and this one's servers before this one. */
                        for (size_t k = 0; k <= i; k++) {
                                json_t *other =
                                        json_object_get(json_array_get(pods, k), "server_list");
                                size_t end = k < i ? json_array_size(other) : j;

                                for (size_t m = 0; m < end; m++)
                                        if (strcmp(json_string_value(json_object_get(
                                                           json_array_get(other, m), "server_id")),
                                                   sid) == 0)
                                                return ctx_fail(c, q,
                                                                "server \"%s\" is in a super "
                                                                "pod already",
                                                                sid);
                        }
                }
        }
        return 0;
}

/* Parses @json into a jansson tree, refusing what is too large or not JSON. */
static json_t *load(const Ctx *c, const char *json, int *r)
{
        json_error_t jerr;
        json_t *root;
        size_t len = json ? strlen(json) : 0;

        if (len == 0) {
                *r = ctx_fail(c, "", "empty");
                return NULL;
        }
        if (len > RANK_TABLE_MAX_BYTES) {
                *r = ctx_fail(c, "", "%zu bytes, at most %u", len, RANK_TABLE_MAX_BYTES);
                return NULL;
        }
        root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                *r = json_error_code(&jerr) == json_error_out_of_memory
                             ? error_set(c->err, STATUS_OUT_OF_MEMORY, "out of memory")
                             : ctx_fail(c, "", "line %d, column %d: %s", jerr.line, jerr.column,
                                        jerr.text);
        return root;
}

int rank_table_parse(const char *json, RankTable *ret, Error *err)
{
        Ctx c = {"rank_table", err};
        _cleanup_(json_decrefp) json_t *root = NULL;
        RankDevice devs[RANK_TABLE_MAX_RANKS];
        RankTable t = {0};
        size_t n = 0, i;
        json_t *servers, *s;
        int r = 0;

        root = load(&c, json, &r);
        if (!root)
                return r;
        r = parse_header(&c, root, false, &servers);
        if (r < 0)
                return r;
        json_array_foreach(servers, i, s)
        {
                char p[PATH_MAX_LEN];
                size_t first = n;

                (void)snprintf(p, sizeof(p), "server_list[%zu]", i);
                r = parse_server(&c, s, p, true, devs, RANK_TABLE_MAX_RANKS, &n);
                if (r < 0)
                        return r;
                for (size_t k = 0; k < first; k++) {
                        if (strcmp(devs[k].server_id, devs[first].server_id) == 0)
                                return ctx_fail(&c, p, "server_id \"%s\" appears twice",
                                                devs[first].server_id);
                        for (size_t j = first; j < n; j++)
                                if (strcmp(devs[k].address, devs[j].address) == 0)
                                        return ctx_fail(&c, p,
                                                        "%s %s is also server %s's: each "
                                                        "server has its own kvdistd",
                                                        devs[j].address_key, devs[j].address,
                                                        devs[k].server_id);
                }
        }
        r = parse_super_pods(&c, root, servers);
        if (r < 0)
                return r;
        t.n_servers = (unsigned)json_array_size(servers);
        t.n_ranks = (unsigned)n;
        for (size_t k = 0; k < n; k++) {
                uint32_t rank = devs[k].rank;

                if (rank >= n)
                        return ctx_fail(&c, "",
                                        "rank_id %" PRIu32 " of server %s device %" PRId32
                                        " is not below the %zu devices listed (ranks are 0..%zu)",
                                        rank, devs[k].server_id, devs[k].device_id, n, n - 1);
                if (t.ranks[rank].server_id[0])
                        return ctx_fail(&c, "",
                                        "rank_id %" PRIu32 " appears twice (server %s "
                                        "device %" PRId32 " and server %s device %" PRId32 ")",
                                        rank, t.ranks[rank].server_id, t.ranks[rank].device_id,
                                        devs[k].server_id, devs[k].device_id);
                t.ranks[rank] = devs[k];
        }
        *ret = t;
        return 0;
}

int rank_table_parse_fragment(const char *json, RankDevice *ret, Error *err)
{
        Ctx c = {"local_comm_res", err};
        _cleanup_(json_decrefp) json_t *root = NULL;
        RankDevice dev;
        size_t n = 0;
        json_t *servers;
        int r = 0;

        root = load(&c, json, &r);
        if (!root)
                return r;
        r = parse_header(&c, root, true, &servers);
        if (r < 0)
                return r;
        if (json_array_size(servers) != 1)
                return ctx_fail(&c, "server_list",
                                "%zu servers; local_comm_res describes this "
                                "cluster's one server",
                                json_array_size(servers));
        r = parse_server(&c, json_array_get(servers, 0), "server_list[0]", false, &dev, 1, &n);
        if (r < 0)
                return r;
        r = parse_super_pods(&c, root, servers);
        if (r < 0)
                return r;
        *ret = dev;
        return 0;
}
