/* SPDX-License-Identifier: MIT */
/*
 * kvdistctl: shows what a node's kvdistd is doing: a summary, clusters, caches, links,
 * transfers, peers, the effective configuration and the metrics, as tables or JSON, once or
 * every few seconds.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/ctl-domains.h"
#include "tools/ctl-prom.h"
#include "tools/ctl-table.h"
#include "kvdist-config.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"
#include "common/socket-path.h"

enum {
        EXIT_DAEMON_ERROR = 1,
        EXIT_USAGE = 2,
        EXIT_NO_DAEMON = 3,
        EXIT_DENIED = 4,
};

#define WATCH_DEFAULT_SEC 2.0
#define WATCH_MIN_SEC 0.1

typedef struct Options {
        const char *command;
        char *socket_path;
        const char *input; /* a saved status document instead of the daemon */
        bool json;
        double watch; /* seconds between rounds; 0 = once */
        long count;   /* rounds with --watch; 0 = until interrupted */
} Options;

static volatile sig_atomic_t interrupted;

static void help(FILE *f)
{
        fprintf(f, "Usage: kvdistctl [OPTIONS] [COMMAND]\n"
                   "\n"
                   "Shows the state of the node's kvdistd.\n"
                   "\n"
                   "Commands:\n"
                   "  status            summary: uptime, clusters, links, peers, transfers,\n"
                   "                    pool, counters, errors (the default)\n"
                   "  clusters          attached clusters\n"
                   "  caches            registered caches\n"
                   "  links             links between clusters\n"
                   "  transfers         transfers in flight, with age and bytes done\n"
                   "  peers             peer daemons (\"no peers\" when there are none)\n"
                   "  devices           RDMA devices: state, link layer, MTU, GID,\n"
                   "                    registrations, completion errors\n"
                   "  domains           comm domains: members, state, algorithm, resources\n"
                   "  users             what each local uid holds of limits.per_user\n"
                   "                    (used/limit, and requests refused)\n"
                   "  config            the daemon's effective configuration\n"
                   "  metrics           the daemon's Prometheus metrics\n"
                   "\n"
                   "Options:\n"
                   "  -s, --socket PATH the daemon's socket (default: $KVDIST_SOCKET, then\n"
                   "                    /run/kvdist/kvdist.sock for root, else\n"
                   "                    $XDG_RUNTIME_DIR/kvdist/kvdist.sock, else\n"
                   "                    /tmp/kvdist-UID/kvdist.sock)\n"
                   "  -j, --json        print JSON instead of tables\n"
                   "  -w, --watch[=SEC] print again every SEC seconds (default 2) until\n"
                   "                    interrupted\n"
                   "  -n, --count N     with --watch: stop after N rounds\n"
                   "      --input FILE  show a saved `kvdistctl status --json` document\n"
                   "                    instead of asking the daemon (- = stdin)\n"
                   "  -h, --help        show this help\n"
                   "      --version     show the version\n"
                   "\n"
                   "Exit status: 0 ok, 1 daemon error, 2 usage, 3 daemon not running,\n"
                   "4 permission denied.\n");
}

/* The path the library connects to when given none; kvdistctl passes it explicitly. */
static char *default_socket_path(void)
{
        const char *env = getenv("KVDIST_SOCKET");
        char buf[108];

        if (env && env[0])
                return strdup(env);
        if (socket_path_default(buf, sizeof(buf)) < 0)
                return NULL;
        return strdup(buf);
}

/* Rows of the tables. */

static void cluster_row(const json_t *o, Table *t, size_t r)
{
        json_t *listen = json_object_get(o, "listen_ip_info");
        json_t *listener = json_object_get(o, "listener");

        fmt_int(o, "cluster_id", table_cell(t, r, 0));
        fmt_str(o, "role", table_cell(t, r, 1));
        fmt_int(o, "device_id", table_cell(t, r, 2));
        fmt_int(o, "pid", table_cell(t, r, 3));
        /* A server: where peers reach it, and whether through the daemon's own listener. */
        if (json_is_string(listen))
                cell_printf(table_cell(t, r, 4), "%s%s", json_string_value(listen),
                            json_is_string(listener) &&
                                            strcmp(json_string_value(listener), "daemon") == 0
                                    ? " (daemon)"
                                    : "");
        else
                cell_printf(table_cell(t, r, 4), "%s",
                            json_is_true(json_object_get(o, "accepts_links")) ? "- (accepts links)"
                                                                              : "-");
        fmt_int(o, "regions", table_cell(t, r, 5));
        fmt_bytes(o, "region_bytes", table_cell(t, r, 6));
        fmt_int(o, "caches", table_cell(t, r, 7));
        fmt_int(o, "links", table_cell(t, r, 8));
        fmt_int(o, "transfers_in_flight", table_cell(t, r, 9));
}

static void cache_row(const json_t *o, Table *t, size_t r)
{
        char *kind = table_cell(t, r, 2);

        fmt_int(o, "cache_id", table_cell(t, r, 0));
        fmt_int(o, "cluster_id", table_cell(t, r, 1));
        fmt_str(o, "kind", kind);
        if (json_is_true(json_object_get(o, "pool")))
                strncat(kind, " (pool)", CELL_MAX - strlen(kind) - 1);
        fmt_int(o, "num_tensors", table_cell(t, r, 3));
        fmt_shape(o, "shape", table_cell(t, r, 4));
        fmt_str(o, "dtype", table_cell(t, r, 5));
        fmt_bytes(o, "tensor_size", table_cell(t, r, 6));
        fmt_int(o, "keys", table_cell(t, r, 7));
        fmt_bool(o, "remote_accessible", table_cell(t, r, 8));
}

static void link_row(const json_t *o, Table *t, size_t r)
{
        json_t *peer = json_object_get(o, "peer");

        fmt_int(o, "link_id", table_cell(t, r, 0));
        fmt_str(o, "direction", table_cell(t, r, 1));
        fmt_int(o, "local_cluster", table_cell(t, r, 2));
        fmt_int(o, "remote_cluster", table_cell(t, r, 3));
        /* "" is a link between clusters of this daemon */
        cell_printf(table_cell(t, r, 4), "%s",
                    !json_is_string(peer)             ? "-"
                    : json_string_value(peer)[0] == 0 ? "local"
                                                      : json_string_value(peer));
        fmt_str(o, "transport", table_cell(t, r, 5));
        fmt_str(o, "state", table_cell(t, r, 6));
        fmt_age(o, "age_s", 1, table_cell(t, r, 7));
        fmt_int(o, "transfers", table_cell(t, r, 8));
        fmt_bytes(o, "bytes", table_cell(t, r, 9));
}

static void transfer_row(const json_t *o, Table *t, size_t r)
{
        char done[CELL_MAX], total[CELL_MAX];
        double d, n;

        fmt_int(o, "transfer_id", table_cell(t, r, 0));
        fmt_int(o, "cluster_id", table_cell(t, r, 1));
        fmt_str(o, "kind", table_cell(t, r, 2));
        fmt_int(o, "remote_cluster", table_cell(t, r, 3));
        fmt_str(o, "transport", table_cell(t, r, 4));
        fmt_bytes(o, "bytes_done", done);
        fmt_bytes(o, "bytes", total);
        if (get_number(o, "bytes_done", &d) && get_number(o, "bytes", &n) && n > 0)
                snprintf(table_cell(t, r, 5), CELL_MAX, "%.24s / %.24s (%.0f%%)", done, total,
                         d * 100 / n);
        else
                snprintf(table_cell(t, r, 5), CELL_MAX, "%.24s / %.24s", done, total);
        fmt_age(o, "age_ms", 0.001, table_cell(t, r, 6));
        fmt_str(o, "state", table_cell(t, r, 7));
}

static void peer_row(const json_t *o, Table *t, size_t r)
{
        double rtt;

        fmt_id(o, "node_id", table_cell(t, r, 0));
        fmt_str(o, "address", table_cell(t, r, 1));
        fmt_str(o, "direction", table_cell(t, r, 2));
        fmt_str(o, "state", table_cell(t, r, 3));
        fmt_bool(o, "authenticated", table_cell(t, r, 4));
        fmt_int(o, "links", table_cell(t, r, 5));
        fmt_int(o, "inbound_links", table_cell(t, r, 6));
        fmt_int(o, "data_conns", table_cell(t, r, 7));
        if (get_number(o, "heartbeat_rtt_us", &rtt))
                snprintf(table_cell(t, r, 8), CELL_MAX, "%.2f ms", rtt / 1000);
        else
                snprintf(table_cell(t, r, 8), CELL_MAX, "-");
        fmt_bytes(o, "bytes_sent", table_cell(t, r, 9));
        fmt_bytes(o, "bytes_received", table_cell(t, r, 10));
        fmt_age(o, "age_s", 1, table_cell(t, r, 11));
}

static void device_row(const json_t *o, Table *t, size_t r)
{
        double us, n;

        fmt_str(o, "name", table_cell(t, r, 0));
        fmt_str(o, "state", table_cell(t, r, 1));
        fmt_str(o, "link_layer", table_cell(t, r, 2));
        fmt_int(o, "port", table_cell(t, r, 3));
        fmt_int(o, "mtu", table_cell(t, r, 4));
        fmt_str(o, "gid", table_cell(t, r, 5));
        fmt_int(o, "memory_regions", table_cell(t, r, 6));
        fmt_bytes(o, "registered_bytes", table_cell(t, r, 7));
        if (get_number(o, "registration_us_total", &us) && get_number(o, "registrations", &n) &&
            n > 0)
                snprintf(table_cell(t, r, 8), CELL_MAX, "%.1f us", us / n);
        else
                snprintf(table_cell(t, r, 8), CELL_MAX, "-");
        fmt_int(o, "completion_errors", table_cell(t, r, 9));
        fmt_str(o, "last_completion_error", table_cell(t, r, 10));
        fmt_str(o, "error", table_cell(t, r, 11));
}

/* "used/limit" of one limits.per_user resource, with "!" when the uid is at its limit. */
static void quota_cell(const json_t *o, const char *key, bool bytes, char *cell)
{
        const json_t *used = json_object_get(o, "used"), *limit = json_object_get(o, "limit");
        char a[CELL_MAX], b[CELL_MAX];
        double u, l;

        if (bytes) {
                fmt_bytes(used, key, a);
                fmt_bytes(limit, key, b);
        } else {
                fmt_int(used, key, a);
                fmt_int(limit, key, b);
        }
        cell_printf(cell, "%s/%s%s", a, b,
                    get_number(used, key, &u) && get_number(limit, key, &l) && u >= l ? " !" : "");
}

static void user_row(const json_t *o, Table *t, size_t r)
{
        static const char *const keys[] = {"connections",  "clusters", "regions",
                                           "region_bytes", "inflight", "notifies"};
        const json_t *refused = json_object_get(o, "refused"), *v;
        json_int_t n = 0;
        const char *key;

        fmt_int(o, "uid", table_cell(t, r, 0));
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                quota_cell(o, keys[i], strcmp(keys[i], "region_bytes") == 0,
                           table_cell(t, r, i + 1));
        json_object_foreach((json_t *)refused, key, v) n += json_integer_value(v);
        cell_printf(table_cell(t, r, 7), "%" JSON_INTEGER_FORMAT, n);
}

static const char *const user_cols[] = {"UID",   "CONNS",     "CLUSTERS", "REGIONS",
                                        "BYTES", "IN-FLIGHT", "NOTIFIES", "REFUSED"};
static const char *const cluster_cols[] = {"ID",      "ROLE",  "DEVICE", "PID",   "LISTEN",
                                           "REGIONS", "BYTES", "CACHES", "LINKS", "IN-FLIGHT"};
static const char *const cache_cols[] = {"ID",    "CLUSTER",     "KIND", "TENSORS", "SHAPE",
                                         "DTYPE", "SIZE/TENSOR", "KEYS", "REMOTE"};
static const char *const link_cols[] = {"ID",        "DIR",   "LOCAL", "REMOTE",    "PEER",
                                        "TRANSPORT", "STATE", "AGE",   "TRANSFERS", "BYTES"};
static const char *const transfer_cols[] = {"ID",        "CLUSTER", "KIND", "REMOTE",
                                            "TRANSPORT", "DONE",    "AGE",  "STATE"};
static const char *const peer_cols[] = {"NODE", "ADDRESS", "DIRECTION", "STATE",
                                        "AUTH", "LINKS",   "IN-LINKS",  "DATA",
                                        "RTT",  "SENT",    "RECEIVED",  "AGE"};
static const char *const device_cols[] = {"DEVICE", "STATE",  "LINK",     "PORT",
                                          "MTU",    "GID",    "MRS",      "REGISTERED",
                                          "REG/MR", "WC-ERR", "LAST-ERR", "ERROR"};

/*
 * A command that shows one array of the status document as a table (@key), followed by the
 * elements of a second one (@more_key) when set.
 */
typedef struct ArrayCommand {
        const char *name;
        const char *key;
        const char *more_key;
        const char *const *cols;
        size_t n_cols;
        RowFunc row;
        const char *empty;
} ArrayCommand;

static const ArrayCommand array_commands[] = {
        {"clusters", "clusters", NULL, cluster_cols, ARRAY_SIZE(cluster_cols), cluster_row,
         "no clusters"},
        {"caches", "caches", NULL, cache_cols, ARRAY_SIZE(cache_cols), cache_row, "no caches"},
        /* The links this node's clusters made, then those peers' clusters made to them. */
        {"links", "links", "inbound_links", link_cols, ARRAY_SIZE(link_cols), link_row, "no links"},
        {"transfers", "transfers", NULL, transfer_cols, ARRAY_SIZE(transfer_cols), transfer_row,
         "no transfers in flight"},
        {"peers", "peers", NULL, peer_cols, ARRAY_SIZE(peer_cols), peer_row, "no peers"},
        {"devices", "rdma_devices", NULL, device_cols, ARRAY_SIZE(device_cols), device_row,
         "no RDMA devices"},
        {"domains", "domains", NULL, domain_cols, N_DOMAIN_COLS, domain_row, "no comm domains"},
        {"users", "users", NULL, user_cols, ARRAY_SIZE(user_cols), user_row, "no users"},
};

static const ArrayCommand *find_array_command(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(array_commands); i++)
                if (strcmp(array_commands[i].name, name) == 0)
                        return &array_commands[i];
        return NULL;
}

static bool is_command(const char *name)
{
        return find_array_command(name) || strcmp(name, "status") == 0 ||
               strcmp(name, "config") == 0 || strcmp(name, "metrics") == 0;
}

/* The summary. */

static size_t array_size_of(const json_t *root, const char *key)
{
        json_t *a = json_object_get(root, key);

        return json_is_array(a) ? json_array_size(a) : 0;
}

static void print_summary(const json_t *root, const char *socket_path)
{
        const json_t *pool = json_object_get(root, "pool");
        const json_t *counters = json_object_get(root, "counters");
        json_t *errors = json_object_get(counters, "errors"), *v, *links, *metrics, *users;
        char a[CELL_MAX], b[CELL_MAX];
        size_t up = 0, i;
        double used, size;
        const char *key;
        bool first = true;

        printf("%-13s%s\n", "version:", fmt_str(root, "version", a));
        printf("%-13s%s\n", "pid:", fmt_int(root, "pid", a));
        printf("%-13s%s\n", "uptime:", fmt_age(root, "uptime_s", 1, a));
        /* the control loop's nice: not control_nice when the daemon could not raise it */
        if (json_is_integer(json_object_get(root, "control_nice")))
                printf("%-13s%s\n", "loop nice:", fmt_int(root, "control_nice", a));
        printf("%-13s%s\n", "socket:",
               json_is_string(json_object_get(root, "socket")) ? fmt_str(root, "socket", a)
                                                               : socket_path);
        metrics = json_object_get(root, "metrics_address");
        printf("%-13s%s%s%s\n", "metrics:", json_is_string(metrics) ? "http://" : "",
               json_is_string(metrics) ? json_string_value(metrics) : "off",
               json_is_string(metrics) ? "/metrics" : "");
        printf("%-13s%zu\n", "clusters:", array_size_of(root, "clusters"));
        links = json_object_get(root, "links");
        json_array_foreach(links, i, v) up +=
                json_is_string(json_object_get(v, "state")) &&
                strcmp(json_string_value(json_object_get(v, "state")), "up") == 0;
        printf("%-13s%zu (%zu up)", "links:", array_size_of(root, "links"), up);
        /* Links peers' clusters made to this node's: on a prefill node, usually all of them. */
        if (array_size_of(root, "inbound_links") > 0)
                printf(", %zu inbound", array_size_of(root, "inbound_links"));
        printf("\n");
        printf("%-13s%zu\n", "peers:", array_size_of(root, "peers"));
        /* Only where comm domains exist: the summary of a daemon without any stays as it was. */
        if (array_size_of(root, "domains") > 0)
                printf("%-13s%zu\n", "domains:", array_size_of(root, "domains"));
        printf("%-13s%s\n", "in flight:", fmt_int(root, "transfers_in_flight", a));

        printf("%-13s%s / %s", "pool:", fmt_bytes(pool, "used", a), fmt_bytes(pool, "size", b));
        if (get_number(pool, "used", &used) && get_number(pool, "size", &size) && size > 0)
                printf(" (%.1f%%)", used * 100 / size);
        if (json_is_integer(json_object_get(pool, "allocations")))
                printf(", %s allocations", fmt_int(pool, "allocations", a));
        printf("\n");

        printf("%-13s%s ok, %s failed\n", "transfers:", fmt_int(counters, "transfers_ok", a),
               fmt_int(counters, "transfers_failed", b));
        printf("%-13s%s pulled, %s pushed\n", "bytes:", fmt_bytes(counters, "bytes_pulled", a),
               fmt_bytes(counters, "bytes_pushed", b));
        printf("%-13s%s accepted, %s refused",
               "connections:", fmt_int(counters, "connections_accepted", a),
               fmt_int(counters, "connections_refused", b));
        if (json_is_integer(json_object_get(counters, "connections_idle_closed")))
                printf(", %s closed unattached", fmt_int(counters, "connections_idle_closed", a));
        printf("\n");

        json_object_foreach(errors, key, v)
        {
                if (!json_is_integer(v) || json_integer_value(v) == 0)
                        continue;
                printf("%s%s %" JSON_INTEGER_FORMAT, first ? "errors:      " : ", ", key,
                       json_integer_value(v));
                first = false;
        }
        printf("%s\n", first ? "errors:      none" : "");

        /* Each local uid's share (limits.per_user); "!" marks one held at a limit. */
        users = json_object_get(root, "users");
        if (json_array_size(users) > 0) {
                printf("\nusers (used/limit of limits.per_user):\n");
                (void)print_table(users, user_cols, ARRAY_SIZE(user_cols), user_row, "no users");
        }
}

/* config: one "key = value" line per setting, nested objects as "limits.max_clients". */
static void print_config_value(const char *path, const json_t *v)
{
        const char *key;
        json_t *e;
        size_t i;

        if (json_is_object(v)) {
                json_object_foreach((json_t *)v, key, e)
                {
                        char sub[256];

                        snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", key);
                        print_config_value(sub, e);
                }
                return;
        }
        if (json_is_array(v) && json_array_size(v) > 0 && json_is_object(json_array_get(v, 0))) {
                json_array_foreach((json_t *)v, i, e)
                {
                        char sub[256];

                        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
                        print_config_value(sub, e);
                }
                return;
        }
        if (json_is_string(v)) {
                printf("%s = \"%s\"\n", path, json_string_value(v));
        } else {
                char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

                printf("%s = %s\n", path, s ? s : "?");
                free(s);
        }
}

/* Fetching. */

static int exit_code_for(int status)
{
        switch (status) {
        case KVD_E_DAEMON_UNAVAILABLE:
                return EXIT_NO_DAEMON;
        case KVD_E_PERMISSION_DENIED:
                return EXIT_DENIED;
        case KVD_E_PARAM_INVALID:
                return EXIT_USAGE;
        default:
                return EXIT_DAEMON_ERROR;
        }
}

/* Asks the daemon for its status document (@metrics false) or metrics text into *@ret. */
static int fetch(const Options *o, bool metrics, char **ret)
{
        kvd_client *client = NULL;
        int r;

        r = kvd_client_connect(&(kvd_option){"socket_path", o->socket_path}, 1, &client);
        if (r == KVD_E_DAEMON_UNAVAILABLE) {
                fprintf(stderr, "kvdistctl: no kvdistd at %s (is it running?)\n", o->socket_path);
                return EXIT_NO_DAEMON;
        }
        if (r == KVD_E_PERMISSION_DENIED) {
                /* The allow-lists, or a socket folder that is not safe to use. */
                fprintf(stderr, "kvdistctl: not allowed to use kvdistd at %s: %s\n", o->socket_path,
                        kvd_last_error(NULL));
                return EXIT_DENIED;
        }
        if (r < 0) {
                fprintf(stderr, "kvdistctl: cannot talk to kvdistd at %s: %s (%s)\n",
                        o->socket_path, kvd_last_error(NULL), kvd_strerror(r));
                return exit_code_for(r);
        }
        r = metrics ? kvd_daemon_metrics(client, ret) : kvd_daemon_status(client, ret);
        if (r < 0) {
                fprintf(stderr, "kvdistctl: kvdistd %s failed: %s (%s)\n",
                        metrics ? "metrics" : "status", kvd_last_error(client), kvd_strerror(r));
                kvd_client_finalize(client);
                return exit_code_for(r);
        }
        kvd_client_finalize(client);
        return 0;
}

/* The status document, from the daemon or from --input; "-" is read once and kept. */
static int load_status(const Options *o, json_t **ret)
{
        static json_t *stdin_doc;
        _cleanup_free_ char *text = NULL;
        json_error_t jerr;
        json_t *root;
        int r;

        if (o->input) {
                if (strcmp(o->input, "-") == 0) {
                        if (!stdin_doc)
                                stdin_doc = json_loadf(stdin, 0, &jerr);
                        root = json_incref(stdin_doc);
                } else
                        root = json_load_file(o->input, 0, &jerr);
                if (!root || !json_is_object(root)) {
                        fprintf(stderr, "kvdistctl: %s: %s\n", o->input,
                                root ? "not a JSON object" : jerr.text);
                        json_decref(root);
                        return EXIT_DAEMON_ERROR;
                }
                *ret = root;
                return 0;
        }
        r = fetch(o, false, &text);
        if (r != 0)
                return r;
        root = json_loads(text, 0, &jerr);
        if (!root || !json_is_object(root)) {
                fprintf(stderr, "kvdistctl: kvdistd sent invalid JSON: %s\n",
                        root ? "not an object" : jerr.text);
                json_decref(root);
                return EXIT_DAEMON_ERROR;
        }
        *ret = root;
        return 0;
}

static int print_json(const json_t *v)
{
        if (json_dumpf(v, stdout,
                       JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY |
                               JSON_REAL_PRECISION(15)) < 0)
                return -EIO;
        printf("\n");
        return 0;
}

static int run_metrics(const Options *o)
{
        _cleanup_free_ char *text = NULL;
        unsigned line = 0;
        json_t *samples;
        int r;

        if (o->input) {
                fprintf(stderr, "kvdistctl: metrics come from the daemon; --input is for "
                                "status documents\n");
                return EXIT_USAGE;
        }
        r = fetch(o, true, &text);
        if (r != 0)
                return r;
        if (!o->json) {
                fputs(text, stdout);
                return 0;
        }
        samples = prom_to_json(text, &line);
        if (!samples) {
                fprintf(stderr, "kvdistctl: kvdistd sent unreadable metrics (line %u)\n", line);
                return EXIT_DAEMON_ERROR;
        }
        r = print_json(samples);
        json_decref(samples);
        return r < 0 ? EXIT_DAEMON_ERROR : 0;
}

/*
 * The elements @ac shows: its array of @root, then those of its second one, each with a
 * "direction" ("out", "in") where a daemon from before that key did not send one. A new
 * reference; NULL when out of memory.
 */
static json_t *command_array(json_t *root, const ArrayCommand *ac)
{
        const char *keys[] = {ac->key, ac->more_key}, *dirs[] = {"out", "in"};
        json_t *all = json_array(), *v, *e;
        size_t i;

        for (size_t k = 0; all && k < ARRAY_SIZE(keys) && keys[k]; k++) {
                v = json_object_get(root, keys[k]);
                if (!json_is_array(v))
                        continue;
                json_array_foreach(v, i, e)
                {
                        if (ac->more_key && json_is_object(e) && !json_object_get(e, "direction") &&
                            json_object_set_new(e, "direction", json_string(dirs[k])) < 0)
                                goto fail;
                        if (json_array_append(all, e) < 0)
                                goto fail;
                }
        }
        return all;
fail:
        json_decref(all);
        return NULL;
}

/* One round of the command; returns the exit code. */
static int run_once(const Options *o)
{
        const ArrayCommand *ac = find_array_command(o->command);
        json_t *root = NULL, *v;
        int r;

        if (strcmp(o->command, "metrics") == 0)
                return run_metrics(o);
        r = load_status(o, &root);
        if (r != 0)
                return r;

        if (strcmp(o->command, "status") == 0) {
                if (o->json)
                        r = print_json(root);
                else
                        print_summary(root, o->socket_path);
        } else if (strcmp(o->command, "config") == 0) {
                v = json_object_get(root, "config");
                if (!json_is_object(v)) {
                        fprintf(stderr, "kvdistctl: this kvdistd does not report its "
                                        "configuration\n");
                        json_decref(root);
                        return EXIT_DAEMON_ERROR;
                }
                if (o->json)
                        r = print_json(v);
                else
                        print_config_value("", v);
        } else {
                v = command_array(root, ac);
                if (!v)
                        r = -ENOMEM;
                else if (o->json)
                        r = print_json(v);
                else
                        r = print_table(v, ac->cols, ac->n_cols, ac->row, ac->empty);
                json_decref(v);
        }
        json_decref(root);
        if (r < 0 || fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "kvdistctl: cannot write the output\n");
                return EXIT_DAEMON_ERROR;
        }
        return 0;
}

static void on_interrupt(int sig)
{
        interrupted = 1;
}

static void sleep_seconds(double s)
{
        struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};

        /* SIGINT ends the sleep (no SA_RESTART) and the loop. */
        while (!interrupted && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int run_watch(const Options *o)
{
        struct sigaction sa = {.sa_handler = on_interrupt};
        bool tty = isatty(STDOUT_FILENO);
        int r = 0;

        sigemptyset(&sa.sa_mask);
        (void)sigaction(SIGINT, &sa, NULL);
        (void)sigaction(SIGTERM, &sa, NULL);
        for (long round = 0; !interrupted && (o->count == 0 || round < o->count); round++) {
                if (round > 0)
                        sleep_seconds(o->watch);
                if (interrupted)
                        break;
                if (tty) {
                        time_t now = time(NULL);
                        char when[32];

                        strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
                        printf("\033[H\033[2J");
                        printf("kvdistctl %s, every %.1fs, %s\n\n", o->command, o->watch, when);
                } else if (round > 0 && !o->json)
                        printf("\n");
                r = run_once(o);
                fflush(stdout);
        }
        return r;
}

static int parse_watch(const char *arg, double *ret)
{
        char *end;
        double v;

        if (!arg) {
                *ret = WATCH_DEFAULT_SEC;
                return 0;
        }
        errno = 0;
        v = strtod(arg, &end);
        if (errno != 0 || end == arg || *end != '\0' || !(v >= WATCH_MIN_SEC) || v > 86400)
                return -EINVAL;
        *ret = v;
        return 0;
}

int main(int argc, char *argv[])
{
        enum { ARG_VERSION = 0x100, ARG_INPUT };
        static const struct option options[] = {{"socket", required_argument, NULL, 's'},
                                                {"json", no_argument, NULL, 'j'},
                                                {"watch", optional_argument, NULL, 'w'},
                                                {"count", required_argument, NULL, 'n'},
                                                {"input", required_argument, NULL, ARG_INPUT},
                                                {"help", no_argument, NULL, 'h'},
                                                {"version", no_argument, NULL, ARG_VERSION},
                                                {}};
        Options o = {.command = "status"};
        char *end;
        int c, r;

        while ((c = getopt_long(argc, argv, "s:jw::n:h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        free(o.socket_path);
                        o.socket_path = strdup(optarg);
                        break;
                case 'j':
                        o.json = true;
                        break;
                case 'w':
                        if (parse_watch(optarg, &o.watch) < 0) {
                                fprintf(stderr,
                                        "kvdistctl: --watch takes seconds, %.1f to "
                                        "86400\n",
                                        WATCH_MIN_SEC);
                                return EXIT_USAGE;
                        }
                        break;
                case 'n':
                        errno = 0;
                        o.count = strtol(optarg, &end, 10);
                        if (errno != 0 || end == optarg || *end != '\0' || o.count < 1) {
                                fprintf(stderr, "kvdistctl: --count takes a positive number\n");
                                return EXIT_USAGE;
                        }
                        break;
                case ARG_INPUT:
                        o.input = optarg;
                        break;
                case 'h':
                        help(stdout);
                        return 0;
                case ARG_VERSION:
                        printf("kvdistctl %s\n", KVDIST_VERSION);
                        return 0;
                default:
                        help(stderr);
                        return EXIT_USAGE;
                }

        if (optind < argc) {
                if (!is_command(argv[optind])) {
                        fprintf(stderr, "kvdistctl: unknown command \"%s\" (see --help)\n",
                                argv[optind]);
                        return EXIT_USAGE;
                }
                o.command = argv[optind++];
        }
        if (optind < argc) {
                fprintf(stderr, "kvdistctl: too many arguments\n");
                return EXIT_USAGE;
        }
        if (o.count > 0 && o.watch == 0) {
                fprintf(stderr, "kvdistctl: --count needs --watch\n");
                return EXIT_USAGE;
        }

        if (!o.socket_path)
                o.socket_path = default_socket_path();
        if (!o.socket_path) {
                fprintf(stderr, "kvdistctl: out of memory\n");
                return EXIT_DAEMON_ERROR;
        }
        r = o.watch > 0 ? run_watch(&o) : run_once(&o);
        free(o.socket_path);
        return r;
}
