/* SPDX-License-Identifier: MIT */
/*
 * Daemon configuration: built-in defaults, a strict JSON file (config.c, the daemon's only JSON
 * reader) and command-line flags (config-args.c), in that order of precedence (flags win).
 * config/kvdistd.json documents every key.
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "common/limits.h"
#include "common/macro.h"
#include "daemon/transport/transport-config.h"

typedef struct TransportSet TransportSet;

typedef struct Config {
        char *socket_path;
        uint32_t socket_mode; /* permission bits of the socket, default 0660 */
        uid_t *allow_uids;    /* empty = any uid that can open the socket */
        size_t n_allow_uids;
        gid_t *allow_gids;
        size_t n_allow_gids;
        uint64_t memory_size; /* pool bytes; 0 = no pool */
        unsigned page_shift;  /* pool page size 1 << page_shift */
        DeviceConfig *devices;
        size_t n_devices;
        uint32_t sync_kv_timeout_ms; /* default transfer timeout */
        unsigned copy_threads;
        int control_nice;       /* the control loop's nice; CONTROL_NICE_OFF = as started */
        bool copy_streaming;    /* big same-node copies with streaming stores, where possible */
        int log_level;          /* LOG_ERR .. LOG_DEBUG (syslog numbers) */
        char *listen_ip_info;   /* "ip:port" for peer daemons; NULL = client only */
        char *cluster_key_file; /* pre-shared key of the peers; NULL = none (warned) */
        bool client_clusters_accept_links; /* clusters without listen_ip_info accept links too */
        uint32_t heartbeat_interval_ms;    /* a peer heartbeat every so often */
        uint32_t heartbeat_timeout_ms;     /* a peer silent this long is lost */
        uint32_t link_total_time_ms;       /* a comm domain not formed by then fails */
        TcpConfig tcp;
        RdmaConfig rdma;
        char *metrics_listen; /* "ip:port" of the /metrics listener; NULL = off */
        Limits limits;
} Config;

/* control_nice "off": the control loop keeps the nice value the daemon was started with. */
#define CONTROL_NICE_OFF INT_MIN
#define CONTROL_NICE_DEFAULT (-10)

/* The port of a device's address when the value names none (a rank table's device_ip too). */
#define CONFIG_DEVICE_DEFAULT_PORT 7400

/* The port of metrics_listen when the value names none. */
#define CONFIG_METRICS_DEFAULT_PORT 9477

/* A config holding the built-in defaults (socket path per kvd's rules for root / non-root). */
int config_new(Config **ret);

/* Frees. Accepts NULL; returns NULL. */
Config *config_free(Config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Config, config_free)

/*
 * Reads @path and applies every key it sets over @c. Strict: an unknown key, a wrong type or a
 * value out of range fails with -EINVAL and a message naming the key ("limits.max_clients: must
 * be an integer in [1, 65536]") in *@ret_error (malloc()ed). -ENOENT etc. when unreadable.
 * On failure @c is unchanged.
 */
int config_load_file(Config *c, const char *path, char **ret_error);

/* Same as config_load_file() on a string, for tests and fuzzing. */
int config_load_string(Config *c, const char *json, char **ret_error);

/*
 * Parses the command line (--config FILE first, then the other flags over it; see
 * `kvdistd --help`). Returns 0 to run, 1 when --help or --version printed and the daemon should
 * exit 0, -EINVAL with *@ret_error on bad flags or config.
 */
int config_parse_argv(Config *c, int argc, char **argv, char **ret_error);

/* Finds the device map entry for @device_id; NULL when the map does not name it. */
const DeviceConfig *config_find_device(const Config *c, int32_t device_id);

/*
 * Points @ts at the parts of @c the transports read: the device map and each transport's terms
 * (which a reload changes in place, so the transports see the running configuration).
 */
void config_transport_terms(const Config *c, TransportSet *ts);

/* The default socket path: /run/kvdist/kvdist.sock for root, else $XDG_RUNTIME_DIR/kvdist/... */
char *config_default_socket_path(void);

/*
 * Parses a metrics_listen value: a numeric address with an optional port ("127.0.0.1:9477",
 * "[::1]:9477", "127.0.0.1" = port CONFIG_METRICS_DEFAULT_PORT; port 0 = any free port). Host
 * names are refused. Returns 0 or -EINVAL (-ENODEV for an unknown scope interface).
 */
int config_parse_metrics_listen(const char *s, struct sockaddr_storage *ret_addr,
                                socklen_t *ret_len);

/* "error", "warning", "notice", "info", "debug" to LOG_ERR..LOG_DEBUG; -EINVAL otherwise. */
