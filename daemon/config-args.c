/* SPDX-License-Identifier: MIT */
/*
 * Daemon command line: the getopt table, --help and --version, and the flags that override the
 * --config file. Values are checked by the same rules and ranges as the file's (config.c).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config-internal.h"
#include "daemon/config.h"
#include "common/log.h"
#include <kvdist/kvdist-version.h>
#include "kvdist-config.h"
#include "common/macro.h"

/* Parses a whole decimal integer; leading blanks and trailing text are errors. */
static int parse_int64(const char *s, int64_t *ret)
{
        char *end;
        long long v;

        if (!(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
                return -EINVAL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno != 0)
                return -errno;
        if (end == s || *end != '\0')
                return -EINVAL;
        *ret = v;
        return 0;
}

/* copy_threads: 1..64, or "auto" for the built-in default of min(4, CPUs). */
static int parse_copy_threads_string(const char *s, unsigned *ret)
{
        int64_t i = 0;

        if (strcmp(s, "auto") == 0) {
                *ret = config_default_copy_threads();
                return 0;
        }
        if (parse_int64(s, &i) < 0 || i < 1 || i > COPY_THREADS_MAX)
                return -EINVAL;
        *ret = (unsigned)i;
        return 0;
}

static int apply_int_field_arg(Config *c, const IntField *f, const char *flag, const char *arg,
                               char **error)
{
        char lo[32], hi[32];
        uint64_t u;
        int64_t i;

        if (f->kind == FIELD_SIZE) {
                if (config_parse_size(arg, &u) < 0 || u < (uint64_t)f->min || u > (uint64_t)f->max)
                        return config_errorf(error, -EINVAL,
                                             "%s: expected a size in [%s, %s] (bytes or a "
                                             "number with a K, M, G or T suffix)",
                                             flag, config_format_size((uint64_t)f->min, lo),
                                             config_format_size((uint64_t)f->max, hi));
        } else {
                i = 0;
                if (parse_int64(arg, &i) < 0 || i < f->min || i > f->max)
                        return config_errorf(error, -EINVAL,
                                             "%s: expected an integer in [%" PRIi64 ", %" PRIi64
                                             "]",
                                             flag, f->min, f->max);
                u = (uint64_t)i;
        }
        config_int_field_store(c, f, u);
        return 0;
}

enum {
        ARG_SOCKET = 0x100,
        ARG_MEMORY_SIZE,
        ARG_PAGE_SHIFT,
        ARG_SYNC_KV_TIMEOUT,
        ARG_COPY_THREADS,
        ARG_LOG_LEVEL,
        ARG_MAX_CLIENTS,
        ARG_MAX_FRAME_SIZE,
        ARG_LISTEN,
        ARG_CLUSTER_KEY_FILE,
        ARG_HEARTBEAT_INTERVAL,
        ARG_HEARTBEAT_TIMEOUT,
        ARG_TCP_STREAMS,
        ARG_LINK_TOTAL_TIME,
        ARG_TCP_CRC,
        ARG_METRICS_LISTEN,
        ARG_CLIENT_CLUSTERS_ACCEPT_LINKS,
};

static const struct option options[] = {
        {"config", required_argument, NULL, 'c'},
        {"socket", required_argument, NULL, ARG_SOCKET},
        {"memory-size", required_argument, NULL, ARG_MEMORY_SIZE},
        {"page-shift", required_argument, NULL, ARG_PAGE_SHIFT},
        {"sync-kv-timeout", required_argument, NULL, ARG_SYNC_KV_TIMEOUT},
        {"copy-threads", required_argument, NULL, ARG_COPY_THREADS},
        {"log-level", required_argument, NULL, ARG_LOG_LEVEL},
        {"max-clients", required_argument, NULL, ARG_MAX_CLIENTS},
        {"max-frame-size", required_argument, NULL, ARG_MAX_FRAME_SIZE},
        {"listen", required_argument, NULL, ARG_LISTEN},
        {"cluster-key-file", required_argument, NULL, ARG_CLUSTER_KEY_FILE},
        {"heartbeat-interval", required_argument, NULL, ARG_HEARTBEAT_INTERVAL},
        {"heartbeat-timeout", required_argument, NULL, ARG_HEARTBEAT_TIMEOUT},
        {"tcp-streams", required_argument, NULL, ARG_TCP_STREAMS},
        {"link-total-time", required_argument, NULL, ARG_LINK_TOTAL_TIME},
        {"tcp-crc", required_argument, NULL, ARG_TCP_CRC},
        {"metrics-listen", required_argument, NULL, ARG_METRICS_LISTEN},
        {"client-clusters-accept-links", required_argument, NULL, ARG_CLIENT_CLUSTERS_ACCEPT_LINKS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {}};

static const char *option_name(int val)
{
        for (size_t i = 0; options[i].name; i++)
                if (options[i].val == val)
                        return options[i].name;
        return NULL;
}

/* The last component of argv[0], as usage messages show it. */
static const char *program_name(const char *argv0)
{
        const char *slash;

        if (!argv0 || !argv0[0])
                return "kvdistd";
        slash = strrchr(argv0, '/');
        return slash && slash[1] ? slash + 1 : argv0;
}

static void print_usage(const char *argv0)
{
        printf("Usage: %s [OPTIONS]\n"
               "\n"
               "kvdist daemon: moves LLM KV-cache blocks between inference workers.\n"
               "The --config file is read first; every other flag overrides it.\n"
               "\n"
               "  -c, --config FILE          JSON configuration (see kvdistd.json)\n"
               "      --socket PATH          Unix socket to listen on\n"
               "                             (default /run/kvdist/kvdist.sock as root,\n"
               "                             else $XDG_RUNTIME_DIR/kvdist/kvdist.sock)\n"
               "      --memory-size SIZE     pool size, bytes or K/M/G/T; 0 = no pool (256M)\n"
               "      --page-shift N         pool page size is 1 << N, 12..30 (16)\n"
               "      --sync-kv-timeout MS   default transfer timeout in ms (1000)\n"
               "      --copy-threads N       local copy threads, 1..64 or auto = min(4, CPUs)\n"
               "      --log-level LEVEL      error, warning, notice, info or debug (info)\n"
               "      --max-clients N        clients connected at once, 1..65536 (64)\n"
               "      --max-frame-size SIZE  largest frame payload, 4K..256M (16M)\n"
               "      --listen IP:PORT       accept peer daemons here (\"\" = client only)\n"
               "      --cluster-key-file F   pre-shared key that peer daemons must prove\n"
               "      --client-clusters-accept-links on|off\n"
               "                             clusters attached without listen_ip_info accept\n"
               "                             links too, at this daemon's --listen (off)\n"
               "      --heartbeat-interval MS  peer heartbeat period, 10..600000 (1000)\n"
               "      --heartbeat-timeout MS   a silent peer is lost after, 50..3600000 (5000)\n"
               "      --tcp-streams N        TCP data connections per peer, 1..16 (4)\n"
               "      --tcp-crc on|off       CRC32C over every TCP data chunk (off)\n"
               "      --link-total-time MS   a comm domain not formed by then fails,\n"
               "                             100..3600000 (120000)\n"
               "      --metrics-listen ADDR  serve Prometheus /metrics on ADDR, e.g.\n"
               "                             127.0.0.1:9477 (port 9477 when left out;\n"
               "                             \"\" = off, the default)\n"
               "  -h, --help                 show this help and exit\n"
               "  -V, --version              show the version and exit\n",
               program_name(argv0));
}

typedef struct PendingFlag {
        int opt;
        const char *arg;
} PendingFlag;

static int apply_flag(Config *c, const PendingFlag *pf, char **error)
{
        static const struct {
                int opt;
                const IntFieldTable *table;
                const char *field;
        } int_flags[] = {
                {ARG_MEMORY_SIZE, &config_top_fields, "memory_size"},
                {ARG_PAGE_SHIFT, &config_top_fields, "page_shift"},
                {ARG_SYNC_KV_TIMEOUT, &config_top_fields, "sync_kv_timeout_ms"},
                {ARG_MAX_CLIENTS, &config_limit_fields, "max_clients"},
                {ARG_MAX_FRAME_SIZE, &config_limit_fields, "max_frame_size"},
                {ARG_HEARTBEAT_INTERVAL, &config_top_fields, "heartbeat_interval_ms"},
                {ARG_HEARTBEAT_TIMEOUT, &config_top_fields, "heartbeat_timeout_ms"},
                {ARG_TCP_STREAMS, &config_tcp_fields, "streams"},
                {ARG_LINK_TOTAL_TIME, &config_top_fields, "link_total_time_ms"},
        };
        char flag[64];
        int level, r;
        char *s;

        (void)snprintf(flag, sizeof(flag), "--%s", option_name(pf->opt) ?: "?");
        switch (pf->opt) {
        case ARG_SOCKET:
                if (strlen(pf->arg) < 1 || strlen(pf->arg) > SOCKET_PATH_MAX)
                        return config_errorf(error, -EINVAL, "%s: must be 1..%zu characters long",
                                             flag, SOCKET_PATH_MAX);
                s = strdup(pf->arg);
                if (!s)
                        return -ENOMEM;
                free(c->socket_path);
                c->socket_path = s;
                return 0;
        case ARG_LISTEN:
                r = config_parse_listen(pf->arg, &c->listen_ip_info);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        return config_errorf(error, -EINVAL,
                                             "%s: \"%.64s\" is not ip:port or [ipv6]:port "
                                             "(numeric, with a port), or \"\" for none",
                                             flag, pf->arg);
                return 0;
        case ARG_CLUSTER_KEY_FILE:
                if (strlen(pf->arg) > 4095)
                        return config_errorf(error, -EINVAL, "%s: path too long", flag);
                s = pf->arg[0] ? strdup(pf->arg) : NULL;
                if (pf->arg[0] && !s)
                        return -ENOMEM;
                free(c->cluster_key_file);
                c->cluster_key_file = s;
                return 0;
        case ARG_TCP_CRC:
        case ARG_CLIENT_CLUSTERS_ACCEPT_LINKS:
                if (strcmp(pf->arg, "on") != 0 && strcmp(pf->arg, "off") != 0)
                        return config_errorf(error, -EINVAL, "%s: expected on or off", flag);
                if (pf->opt == ARG_TCP_CRC)
                        c->tcp.crc = strcmp(pf->arg, "on") == 0;
                else
                        c->client_clusters_accept_links = strcmp(pf->arg, "on") == 0;
                return 0;
        case ARG_COPY_THREADS:
                if (parse_copy_threads_string(pf->arg, &c->copy_threads) < 0)
                        return config_errorf(error, -EINVAL,
                                             "%s: expected an integer in [1, %d] or auto", flag,
                                             COPY_THREADS_MAX);
                return 0;
        case ARG_METRICS_LISTEN: {
                struct sockaddr_storage sa;
                socklen_t len;

                if (pf->arg[0] != '\0' && (strlen(pf->arg) > METRICS_LISTEN_MAX ||
                                           config_parse_metrics_listen(pf->arg, &sa, &len) < 0))
                        return config_errorf(error, -EINVAL,
                                             "%s: expected a numeric address with an optional "
                                             "port, like 127.0.0.1:%d, or \"\" for off",
                                             flag, CONFIG_METRICS_DEFAULT_PORT);
                s = pf->arg[0] ? strdup(pf->arg) : NULL;
                if (pf->arg[0] && !s)
                        return -ENOMEM;
                free(c->metrics_listen);
                c->metrics_listen = s;
                return 0;
        }
        case ARG_LOG_LEVEL:
                level = log_level_from_string(pf->arg);
                if (level < 0)
                        return config_errorf(error, -EINVAL,
                                             "%s: expected one of error, warning, notice, info, "
                                             "debug",
                                             flag);
                c->log_level = level;
                return 0;
        default:
                for (size_t i = 0; i < ARRAY_SIZE(int_flags); i++)
                        if (int_flags[i].opt == pf->opt)
                                return apply_int_field_arg(
                                        c,
                                        config_int_field_find(int_flags[i].table,
                                                              int_flags[i].field),
                                        flag, pf->arg, error);
                return config_errorf(error, -EINVAL, "%s: not handled", flag);
        }
}

static int parse_argv(Config *c, int argc, char **argv, char **error)
{
        _cleanup_(config_freep) Config *scratch = NULL;
        _cleanup_free_ PendingFlag *pending = NULL;
        const char *config_path = NULL;
        bool help = false, version = false;
        size_t n_pending = 0;
        const char *name;
        int opt, r;

        if (argc < 1)
                return 0;
        pending = calloc((size_t)argc, sizeof(PendingFlag));
        if (!pending)
                return -ENOMEM;

        /* 0, not 1: glibc then re-initialises completely, so tests may call this repeatedly. */
        optind = 0;
        opterr = 0;
        while ((opt = getopt_long(argc, argv, "+:c:hV", options, NULL)) >= 0) {
                switch (opt) {
                case 'c':
                        config_path = optarg;
                        break;
                case 'h':
                        help = true;
                        break;
                case 'V':
                        version = true;
                        break;
                case ':':
                        name = option_name(optopt);
                        if (name)
                                return config_errorf(error, -EINVAL, "--%s: missing argument",
                                                     name);
                        return config_errorf(error, -EINVAL, "-%c: missing argument", optopt);
                case '?':
                        if (optopt == 0)
                                return config_errorf(error, -EINVAL, "unknown option '%s'",
                                                     argv[optind - 1]);
                        name = option_name(optopt);
                        if (name && argv[optind - 1][0] == '-' && argv[optind - 1][1] == '-')
                                return config_errorf(error, -EINVAL, "--%s: takes no argument",
                                                     name);
                        return config_errorf(error, -EINVAL, "unknown option '-%c'", optopt);
                default:
                        pending[n_pending++] = (PendingFlag){.opt = opt, .arg = optarg};
                        break;
                }
        }
        if (optind < argc)
                return config_errorf(error, -EINVAL, "unexpected argument '%s'", argv[optind]);

        if (help) {
                print_usage(argv[0]);
                return 1;
        }
        if (version) {
                printf("kvdistd " KVDIST_VERSION "\n");
                return 1;
        }

        r = config_dup(c, &scratch);
        if (r < 0)
                return r;
        if (config_path) {
                r = config_load_file(scratch, config_path, error);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < n_pending; i++) {
                r = apply_flag(scratch, &pending[i], error);
                if (r < 0)
                        return r;
        }
        r = config_check(scratch, error);
        if (r < 0)
                return r;
        config_replace(c, TAKE_PTR(scratch));
        return 0;
}

int config_parse_argv(Config *c, int argc, char **argv, char **ret_error)
{
        _cleanup_free_ char *error = NULL;
        int r;

        r = parse_argv(c, argc, argv, &error);
        if (r < 0)
                config_error_give(&error, ret_error);
        return r;
}
