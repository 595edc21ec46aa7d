/* SPDX-License-Identifier: MIT */
/* kvdistctl: shows what a node's kvdistd is doing (clusters, caches, links, transfers). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvdist-config.h"
#include "kvdist/kvdist.h"
#include "macro.h"
#include "socket-path.h"

enum {
        EXIT_DAEMON_ERROR = 1,
        EXIT_USAGE = 2,
        EXIT_NO_DAEMON = 3,
};

/* Room for one formatted cell. */
#define CELL_MAX 64

static void help(FILE *f)
{
        fprintf(f, "Usage: kvdistctl [OPTIONS] [COMMAND]\n"
                   "\n"
                   "Shows the state of the node's kvdistd.\n"
                   "\n"
                   "Commands:\n"
                   "  status            summary and tables of clusters, caches, links and\n"
                   "                    transfers in flight (the default)\n"
                   "\n"
                   "Options:\n"
                   "  -s, --socket PATH the daemon's socket (default: $KVDIST_SOCKET, then\n"
                   "                    /run/kvdist/kvdist.sock for root, else\n"
                   "                    $XDG_RUNTIME_DIR/kvdist/kvdist.sock)\n"
                   "  -j, --json        print the daemon's JSON document\n"
                   "  -h, --help        show this help\n"
                   "      --version     show the version\n"
                   "\n"
                   "Exit status: 0 ok, 1 daemon error, 2 usage, 3 daemon not running.\n");
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

static void fmt_bytes_value(double v, char *buf)
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        size_t u = 0;

        if (v < 1024) {
                snprintf(buf, CELL_MAX, "%.0f B", v);
                return;
        }
        while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, CELL_MAX, "%.1f %s", v, units[u]);
}

static void fmt_duration(double s, char *buf)
{
        uint64_t t;

        if (s < 0) {
                snprintf(buf, CELL_MAX, "-");
                return;
        }
        if (s < 60) {
                snprintf(buf, CELL_MAX, "%.1fs", s);
                return;
        }
        t = (uint64_t)s;
        if (t < 3600)
                snprintf(buf, CELL_MAX, "%" PRIu64 "m %02" PRIu64 "s", t / 60, t % 60);
        else if (t < 86400)
                snprintf(buf, CELL_MAX, "%" PRIu64 "h %02" PRIu64 "m", t / 3600, t / 60 % 60);
        else
                snprintf(buf, CELL_MAX, "%" PRIu64 "d %02" PRIu64 "h", t / 86400, t / 3600 % 24);
}

/* Each formatter writes "-" for a key the daemon did not send (or sent as another type). */
static bool get_number(const json_t *obj, const char *key, double *ret)
{
        json_t *v = json_object_get(obj, key);

        if (!json_is_number(v))
                return false;
        *ret = json_number_value(v);
        return true;
}

static const char *fmt_int(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        if (json_is_integer(v))
                snprintf(buf, CELL_MAX, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
                snprintf(buf, CELL_MAX, "%.0f", json_real_value(v));
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

static const char *fmt_str(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        snprintf(buf, CELL_MAX, "%s", json_is_string(v) ? json_string_value(v) : "-");
        return buf;
}

static const char *fmt_bool(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        snprintf(buf, CELL_MAX, "%s", !json_is_boolean(v) ? "-" : json_is_true(v) ? "yes" : "no");
        return buf;
}

static const char *fmt_bytes(const json_t *obj, const char *key, char *buf)
{
        double v;

        if (get_number(obj, key, &v))
                fmt_bytes_value(v, buf);
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

static const char *fmt_age(const json_t *obj, const char *key, double scale, char *buf)
{
        double v;

        if (get_number(obj, key, &v))
                fmt_duration(v * scale, buf);
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

/* "512x16x128" from [512, 16, 128]. */
static const char *fmt_shape(const json_t *obj, const char *key, char *buf)
{
        json_t *shape = json_object_get(obj, key), *dim;
        size_t i, off = 0;

        if (!json_is_array(shape) || json_array_size(shape) == 0) {
                snprintf(buf, CELL_MAX, "-");
                return buf;
        }
        json_array_foreach(shape, i, dim)
        {
                int n = snprintf(buf + off, CELL_MAX - off, "%s%" JSON_INTEGER_FORMAT,
                                 i > 0 ? "x" : "", json_integer_value(dim));

                if (n < 0 || (size_t)n >= CELL_MAX - off)
                        break;
                off += (size_t)n;
        }
        return buf;
}

/* A table of text cells, printed with aligned columns. */
typedef struct Table {
        size_t n_cols;
        size_t n_rows;
        const char *const *headers;
        char (*cells)[CELL_MAX]; /* n_rows * n_cols */
} Table;

static int table_init(Table *t, const char *const *headers, size_t n_cols, size_t n_rows)
{
        *t = (Table){.n_cols = n_cols, .n_rows = n_rows, .headers = headers};
        t->cells = calloc(MAX(n_rows, 1u) * n_cols, CELL_MAX);
        return t->cells ? 0 : -ENOMEM;
}

static char *table_cell(Table *t, size_t row, size_t col)
{
        return t->cells[row * t->n_cols + col];
}

static void table_print(Table *t, const char *title)
{
        size_t width[16] = {};

        printf("\n%s\n", title);
        if (t->n_rows == 0) {
                printf("(none)\n");
                return;
        }
        for (size_t c = 0; c < t->n_cols; c++) {
                width[c] = strlen(t->headers[c]);
                for (size_t r = 0; r < t->n_rows; r++)
                        width[c] = MAX(width[c], strlen(table_cell(t, r, c)));
        }
        for (size_t c = 0; c < t->n_cols; c++)
                printf("%-*s%s", c + 1 < t->n_cols ? (int)width[c] : 0, t->headers[c],
                       c + 1 < t->n_cols ? "  " : "\n");
        for (size_t r = 0; r < t->n_rows; r++)
                for (size_t c = 0; c < t->n_cols; c++)
                        printf("%-*s%s", c + 1 < t->n_cols ? (int)width[c] : 0, table_cell(t, r, c),
                               c + 1 < t->n_cols ? "  " : "\n");
}

static void table_free(Table *t)
{
        free(t->cells);
        t->cells = NULL;
}

/* Fills one row from @obj. */
typedef void (*RowFunc)(const json_t *obj, Table *t, size_t row);

static void cluster_row(const json_t *o, Table *t, size_t r)
{
        fmt_int(o, "cluster_id", table_cell(t, r, 0));
        fmt_str(o, "role", table_cell(t, r, 1));
        fmt_int(o, "device_id", table_cell(t, r, 2));
        fmt_int(o, "pid", table_cell(t, r, 3));
        fmt_int(o, "regions", table_cell(t, r, 4));
        fmt_int(o, "caches", table_cell(t, r, 5));
        fmt_int(o, "links", table_cell(t, r, 6));
        fmt_int(o, "transfers_in_flight", table_cell(t, r, 7));
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
        fmt_int(o, "link_id", table_cell(t, r, 0));
        fmt_int(o, "local_cluster", table_cell(t, r, 1));
        fmt_int(o, "remote_cluster", table_cell(t, r, 2));
        fmt_str(o, "transport", table_cell(t, r, 3));
        fmt_str(o, "state", table_cell(t, r, 4));
        fmt_age(o, "age_s", 1, table_cell(t, r, 5));
        fmt_int(o, "transfers", table_cell(t, r, 6));
        fmt_bytes(o, "bytes", table_cell(t, r, 7));
}

static void transfer_row(const json_t *o, Table *t, size_t r)
{
        fmt_int(o, "transfer_id", table_cell(t, r, 0));
        fmt_int(o, "cluster_id", table_cell(t, r, 1));
        fmt_str(o, "kind", table_cell(t, r, 2));
        fmt_int(o, "remote_cluster", table_cell(t, r, 3));
        fmt_bytes(o, "bytes", table_cell(t, r, 4));
        fmt_age(o, "age_ms", 0.001, table_cell(t, r, 5));
}

static int print_table(const json_t *root, const char *key, const char *title,
                       const char *const *headers, size_t n_cols, RowFunc row)
{
        json_t *array = json_object_get(root, key), *o;
        size_t n = json_is_array(array) ? json_array_size(array) : 0, i;
        Table t;

        if (table_init(&t, headers, n_cols, n) < 0)
                return -ENOMEM;
        if (n > 0)
                json_array_foreach(array, i, o) row(o, &t, i);
        table_print(&t, title);
        table_free(&t);
        return 0;
}

static void print_summary(const json_t *root, const char *socket_path)
{
        const json_t *pool = json_object_get(root, "pool");
        const json_t *counters = json_object_get(root, "counters");
        json_t *errors = json_object_get(counters, "errors"), *v;
        char a[CELL_MAX], b[CELL_MAX];
        double used, size;
        const char *key;
        bool first = true;

        printf("%-12s %s\n", "version:", fmt_str(root, "version", a));
        printf("%-12s %s\n", "pid:", fmt_int(root, "pid", a));
        printf("%-12s %s\n", "uptime:", fmt_age(root, "uptime_s", 1, a));
        printf("%-12s %s\n", "socket:",
               json_is_string(json_object_get(root, "socket")) ? fmt_str(root, "socket", a)
                                                               : socket_path);

        printf("%-12s %s / %s", "pool:", fmt_bytes(pool, "used", a), fmt_bytes(pool, "size", b));
        if (get_number(pool, "used", &used) && get_number(pool, "size", &size) && size > 0)
                printf(" (%.1f%%)", used * 100 / size);
        if (json_is_integer(json_object_get(pool, "allocations")))
                printf(", %s allocations", fmt_int(pool, "allocations", a));
        printf("\n");

        printf("%-12s %s ok, %s failed\n", "transfers:", fmt_int(counters, "transfers_ok", a),
               fmt_int(counters, "transfers_failed", b));
        printf("%-12s %s pulled, %s pushed\n", "bytes:", fmt_bytes(counters, "bytes_pulled", a),
               fmt_bytes(counters, "bytes_pushed", b));
        printf("%-12s %s\n", "in flight:", fmt_int(root, "transfers_in_flight", a));

        json_object_foreach(errors, key, v)
        {
                if (!json_is_integer(v) || json_integer_value(v) == 0)
                        continue;
                printf("%s %s %" JSON_INTEGER_FORMAT, first ? "errors:     " : ",", key,
                       json_integer_value(v));
                first = false;
        }
        if (!first)
                printf("\n");
}

static int print_status(const json_t *root, const char *socket_path)
{
        static const char *const cluster_cols[] = {"ID",      "ROLE",   "DEVICE", "PID",
                                                   "REGIONS", "CACHES", "LINKS",  "IN-FLIGHT"};
        static const char *const cache_cols[] = {"ID",    "CLUSTER",     "KIND", "TENSORS", "SHAPE",
                                                 "DTYPE", "SIZE/TENSOR", "KEYS", "REMOTE"};
        static const char *const link_cols[] = {"ID",    "LOCAL", "REMOTE",    "TRANSPORT",
                                                "STATE", "AGE",   "TRANSFERS", "BYTES"};
        static const char *const transfer_cols[] = {"ID",     "CLUSTER", "KIND",
                                                    "REMOTE", "BYTES",   "AGE"};

        print_summary(root, socket_path);
        if (print_table(root, "clusters", "CLUSTERS", cluster_cols, ARRAY_SIZE(cluster_cols),
                        cluster_row) < 0 ||
            print_table(root, "caches", "CACHES", cache_cols, ARRAY_SIZE(cache_cols), cache_row) <
                    0 ||
            print_table(root, "links", "LINKS", link_cols, ARRAY_SIZE(link_cols), link_row) < 0 ||
            print_table(root, "transfers", "TRANSFERS IN FLIGHT", transfer_cols,
                        ARRAY_SIZE(transfer_cols), transfer_row) < 0)
                return -ENOMEM;
        return 0;
}

int main(int argc, char *argv[])
{
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = {{"socket", required_argument, NULL, 's'},
                                                {"json", no_argument, NULL, 'j'},
                                                {"help", no_argument, NULL, 'h'},
                                                {"version", no_argument, NULL, ARG_VERSION},
                                                {}};
        _cleanup_free_ char *socket_path = NULL, *text = NULL;
        kvd_client *client = NULL;
        json_error_t jerr;
        json_t *root;
        bool json = false;
        int c, r;

        while ((c = getopt_long(argc, argv, "s:jh", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        free(socket_path);
                        socket_path = strdup(optarg);
                        break;
                case 'j':
                        json = true;
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

        if (optind < argc && strcmp(argv[optind], "status") != 0) {
                fprintf(stderr, "kvdistctl: unknown command \"%s\"\n", argv[optind]);
                return EXIT_USAGE;
        }
        if (optind + 1 < argc) {
                fprintf(stderr, "kvdistctl: too many arguments\n");
                return EXIT_USAGE;
        }

        if (!socket_path)
                socket_path = default_socket_path();
        if (!socket_path) {
                fprintf(stderr, "kvdistctl: out of memory\n");
                return EXIT_DAEMON_ERROR;
        }

        r = kvd_client_connect(&client, &(kvd_option){"socket_path", socket_path}, 1);
        if (r == KVD_E_DAEMON_UNAVAILABLE) {
                fprintf(stderr, "kvdistctl: no kvdistd at %s (is it running?)\n", socket_path);
                return EXIT_NO_DAEMON;
        }
        if (r < 0) {
                fprintf(stderr, "kvdistctl: cannot talk to kvdistd at %s: %s (%s)\n", socket_path,
                        kvd_last_error(NULL), kvd_strerror(r));
                return r == KVD_E_PARAM_INVALID ? EXIT_USAGE : EXIT_DAEMON_ERROR;
        }

        r = kvd_daemon_status(client, &text);
        if (r < 0) {
                fprintf(stderr, "kvdistctl: kvdistd status failed: %s (%s)\n",
                        kvd_last_error(client), kvd_strerror(r));
                kvd_client_finalize(client);
                return EXIT_DAEMON_ERROR;
        }
        kvd_client_finalize(client);

        root = json_loads(text, 0, &jerr);
        if (!root || !json_is_object(root)) {
                fprintf(stderr, "kvdistctl: kvdistd sent invalid JSON: %s\n",
                        root ? "not an object" : jerr.text);
                json_decref(root);
                return EXIT_DAEMON_ERROR;
        }

        if (json) {
                r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                if (r == 0)
                        printf("\n");
        } else
                r = print_status(root, socket_path);
        json_decref(root);

        if (r < 0 || fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "kvdistctl: cannot write the status\n");
                return EXIT_DAEMON_ERROR;
        }
        return 0;
}
