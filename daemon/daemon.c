/* SPDX-License-Identifier: MIT */
/* Daemon: the control loop and everything it owns. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "daemon/memory/cache.h"
#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/decoder.h"
#include "daemon/daemon.h"
#include "daemon/domain/domain.h"
#include <kvdist/kvdist-version.h>
#include "kvdist-config.h"
#include "daemon/transport/engine.h"
#include "daemon/control/listener.h"
#include "common/log.h"
#include "daemon/metrics/metrics-http.h"
#include "daemon/metrics/metrics.h"
#include "daemon/link/peer.h"
#include "daemon/memory/pool.h"
#include "common/random-util.h"
#include "daemon/memory/region.h"
#include "daemon/reload.h"
#include "daemon/sd.h"
#include "daemon/transfer/served.h"
#include "daemon/service.h"
#include "daemon/status.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport.h"
#include "common/status.h"
#include "common/thread-nice.h"
#include "proto/status-wire.h"

/* How long an orderly stop waits for transports to let go of memory before exiting anyway. */
#define DAEMON_STOP_GRACE_SEC 5

const char *daemon_peer_address(const Daemon *d)
{
        return link_root_peer_address(&d->link);
}

void daemon_format_status(Daemon *d, char *buf, size_t size)
{
        unsigned ready = 0;
        Peer *p;

        CLIST_FOREACH (p, &d->link.peers, link_daemon)
                ready += p->state == PEER_READY;
        (void)snprintf(buf, size, "%s%u clusters, %u links, %u peers, %u transfers in flight",
                       d->stopping ? "stopping: " : "", d->link.n_clusters, d->link.n_links, ready,
                       d->transfer.n_transfers + d->transfer.n_served);
}

static int daemon_render_metrics(void *userdata, char **ret, size_t *ret_len)
{
        Daemon *d = userdata;

        return metrics_render(d->metrics, ret, ret_len);
}

static int daemon_status_json(void *userdata, char **ret)
{
        return status_to_json(userdata, ret);
}

static void daemon_format_status_cb(void *userdata, char *buf, size_t size)
{
        daemon_format_status(userdata, buf, size);
}

void daemon_update_status(Daemon *d)
{
        service_status_changed(d->service);
}

static void daemon_on_changed(void *userdata)
{
        daemon_update_status(userdata);
}

static void daemon_on_ended(void *userdata)
{
        daemon_check_stopped(userdata);
}

static void daemon_on_error(void *userdata, int status)
{
        Daemon *d = userdata;

        control_root_count_error(&d->control, status);
}

/* The FileDescriptorName= of the client socket under socket activation. */
#define DAEMON_LISTEN_FD_NAME "kvdist"

/*
 * Picks the client socket among those the service manager passed: the one named
 * DAEMON_LISTEN_FD_NAME, or the only one, checked to be a listening Unix stream socket. The
 * others are closed. Returns the fd, -ENOENT when none fits (nothing was passed, or only sockets
 * with other names), or another negative errno (logged).
 */
static int daemon_take_activated(void)
{
        _cleanup_free_ SdListenFd *fds = NULL;
        size_t n = 0;
        int fd = -1, r;

        r = sd_service_listen_fds(&fds, &n);
        if (r < 0)
                return log_error_errno(r, "cannot read the sockets the service manager passed");
        for (size_t i = 0; i < n; i++) {
                if (fd < 0 && (strcmp(fds[i].name, DAEMON_LISTEN_FD_NAME) == 0 || n == 1)) {
                        fd = fds[i].fd;
                        continue;
                }
                log_warning("socket activation: fd %d named \"%s\" is not the client socket "
                            "(FileDescriptorName=%s), closing it",
                            fds[i].fd, fds[i].name, DAEMON_LISTEN_FD_NAME);
                safe_close(fds[i].fd);
        }
        if (fd < 0)
                return -ENOENT;

        r = sd_service_is_stream_listener(fd, AF_UNIX);
        if (r < 0)
                r = log_error_errno(r, "socket activation: cannot inspect fd %d", fd);
        else if (r == 0)
                r = log_error_errno(-ENOTSOCK,
                                    "socket activation: fd %d is not a listening "
                                    "Unix stream socket (check ListenStream= of the socket "
                                    "unit)",
                                    fd);
        if (r <= 0) {
                safe_close(fd);
                return r;
        }
        return fd;
}

static void daemon_on_signal(evutil_socket_t sig, short what, void *userdata)
{
        Daemon *d = userdata;

        if (sig == SIGHUP) {
                log_info("received SIGHUP, reloading the configuration");
                (void)reload_daemon(d);
                return;
        }
        log_info("received %s, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        daemon_stop(d, 0);
}

static void daemon_on_stop_grace(evutil_socket_t fd, short what, void *userdata)
{
        Daemon *d = userdata;

        log_warning("%u transfers still running after %d s, exiting anyway",
                    d->transfer.n_transfers, DAEMON_STOP_GRACE_SEC);
        event_base_loopexit(d->base, NULL);
}

void daemon_stop(Daemon *d, int exit_code)
{
        static const struct timeval grace = {DAEMON_STOP_GRACE_SEC, 0};
        Transfer *x, *tmp;

        if (d->stopping)
                return;
        d->stopping = true;
        d->link.stopping = true;
        d->control.stopping = true;
        d->exit_code = exit_code;
        service_stopping(d->service);
        listener_pause(d->control.listener);

        CLIST_FOREACH_SAFE (x, tmp, &d->transfer.transfers, link_daemon)
                transfer_fail(x, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
        served_stop_all(&d->transfer, STATUS_DAEMON_UNAVAILABLE);
        domain_stop_all(d->domains);
        /* Peers hear it now rather than from a heartbeat timeout. */
        peer_close_all(&d->link);
        daemon_check_stopped(d);
        if (d->stopping && (d->transfer.n_transfers > 0 || d->transfer.n_served > 0 ||
                            domain_calls_in_flight(d->domains) > 0))
                (void)event_base_once(d->base, -1, EV_TIMEOUT, daemon_on_stop_grace, d, &grace);
}

void daemon_check_stopped(Daemon *d)
{
        if (!d->stopping || d->transfer.n_transfers > 0 || d->transfer.n_served > 0 ||
            domain_calls_in_flight(d->domains) > 0)
                return;
        conn_flush_all(&d->control);
        event_base_loopexit(d->base, NULL);
}

int daemon_new(Config *config, Daemon **ret)
{
        Daemon *d;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d) {
                config_free(config);
                return -ENOMEM;
        }
        d->config = config;
        d->start_usec = now_usec(CLOCK_MONOTONIC);
        control_root_init(&d->control);
        link_root_init(&d->link);
        d->link.options = (LinkOptions){
                .limits = &config->limits,
                .heartbeat_interval_ms = &config->heartbeat_interval_ms,
                .heartbeat_timeout_ms = &config->heartbeat_timeout_ms,
                .client_clusters_accept_links = &config->client_clusters_accept_links,
                .listen_ip_info = config->listen_ip_info,
                .cluster_key_file = config->cluster_key_file,
        };
        d->link.ids = &d->ids;
        d->link.memory = &d->memory;
        d->link.transports = &d->transports;
        d->link.changed = daemon_on_changed;
        d->link.changed_userdata = d;
        peer_handlers_init(&d->link);
        transfer_root_init(&d->transfer);
        d->transfer.link = &d->link;
        d->transfer.memory = &d->memory;
        d->transfer.transports = &d->transports;
        d->transfer.options = (TransferOptions){
                .limits = &config->limits,
                .sync_kv_timeout_ms = &config->sync_kv_timeout_ms,
        };
        d->transfer.changed = daemon_on_changed;
        d->transfer.ended = daemon_on_ended;
        d->transfer.userdata = d;
        do {
                r = random_bytes(&d->link.node_id, sizeof(d->link.node_id));
                if (r < 0) {
                        log_error_errno(r, "cannot draw a node id");
                        goto fail;
                }
        } while (d->link.node_id == 0);
        {
                char host[64] = "";

                (void)gethostname(host, sizeof(host) - 1);
                (void)snprintf(d->link.identity, sizeof(d->link.identity), "kvdistd/%s %s",
                               KVDIST_VERSION, host);
        }
        r = peer_load_cluster_key(&d->link);
        if (r < 0)
                goto fail;

        /* Copy threads never touch libevent, but completions cross into the loop. */
        if (evthread_use_pthreads() < 0) {
                r = log_error_errno(-ENOMEM, "cannot enable libevent threading");
                goto fail;
        }
        d->base = event_base_new();
        if (!d->base) {
                r = log_error_errno(-ENOMEM, "cannot create the event loop");
                goto fail;
        }
        d->link.base = d->base;

        r = memory_init(&d->memory, &d->ids, config->memory_size, config->page_shift);
        if (r < 0) {
                log_error_errno(r, "cannot create the memory pool of %" PRIu64 " bytes",
                                config->memory_size);
                goto fail;
        }
        user_registry_init(&d->memory.users, &config->limits);

        r = engine_new(d->base, config->copy_threads, &d->transports.engine);
        if (r < 0) {
                log_error_errno(r, "cannot start %u copy threads", config->copy_threads);
                goto fail;
        }
        engine_set_streaming(d->transports.engine, config->copy_streaming);
        d->transports.base = d->base;
        config_transport_terms(config, &d->transports);
        r = transport_set_init(&d->transports, d->memory.pool);
        if (r < 0)
                goto fail;

        d->sig_term = evsignal_new(d->base, SIGTERM, daemon_on_signal, d);
        d->sig_int = evsignal_new(d->base, SIGINT, daemon_on_signal, d);
        d->sig_hup = evsignal_new(d->base, SIGHUP, daemon_on_signal, d);
        if (!d->sig_term || !d->sig_int || !d->sig_hup || event_add(d->sig_term, NULL) < 0 ||
            event_add(d->sig_int, NULL) < 0 || event_add(d->sig_hup, NULL) < 0) {
                r = log_error_errno(-ENOMEM, "cannot watch signals");
                goto fail;
        }
        (void)signal(SIGPIPE, SIG_IGN);

        r = service_new(d->base, 0, daemon_format_status_cb, d, &d->service);
        if (r < 0) {
                log_error_errno(r, "cannot set up service-manager notifications");
                goto fail;
        }

        r = domain_registry_new(
                &(DomainRoots){
                        .link = &d->link,
                        .transports = &d->transports,
                        .link_total_time_ms = &config->link_total_time_ms,
                        .changed = daemon_on_changed,
                        .call_ended = daemon_on_ended,
                        .count_error = daemon_on_error,
                        .userdata = d,
                },
                &d->domains);
        if (r < 0)
                goto fail;
        r = metrics_new(
                &(MetricsSources){
                        .start_usec = d->start_usec,
                        .link = &d->link,
                        .transfer = &d->transfer,
                        .domains = d->domains,
                        .memory = &d->memory,
                        .transports = &d->transports,
                        .clients = &d->control.counters,
                },
                &d->metrics);
        if (r < 0)
                goto fail;
        transfer_listen(&d->transfer);

        d->control.base = d->base;
        d->control.options = (ControlOptions){
                .limits = &config->limits,
                .sync_kv_timeout_ms = &config->sync_kv_timeout_ms,
                .socket_path = config->socket_path,
                .socket_mode = &config->socket_mode,
                .allow_uids = &config->allow_uids,
                .n_allow_uids = &config->n_allow_uids,
                .allow_gids = &config->allow_gids,
                .n_allow_gids = &config->n_allow_gids,
        };
        d->control.ids = &d->ids;
        d->control.memory = &d->memory;
        d->control.transports = &d->transports;
        d->control.link = &d->link;
        d->control.transfer = &d->transfer;
        d->control.domains = d->domains;
        d->control.metrics = d->metrics;
        d->control.changed = daemon_on_changed;
        d->control.status_json = daemon_status_json;
        d->control.userdata = d;
        r = peer_listener_new(&d->link, &d->link.peer_listener);
        if (r < 0)
                goto fail;
        r = peer_device_listeners_new(&d->link);
        if (r < 0)
                goto fail;
        if (config->metrics_listen) {
                struct sockaddr_storage sa;
                socklen_t len;

                r = config_parse_metrics_listen(config->metrics_listen, &sa, &len);
                if (r < 0) {
                        r = log_error_errno(-EINVAL, "metrics_listen %s is not a numeric address",
                                            config->metrics_listen);
                        goto fail;
                }
                r = metrics_server_new(d->base, &sa, len, config->metrics_listen,
                                       daemon_render_metrics, d, &d->metrics_server);
                if (r < 0)
                        goto fail;
        }
        r = decoder_new(d->base, &d->control.decoder);
        if (r < 0)
                goto fail;
        d->link.decoder = (LinkDecoder){
                .decoder = d->control.decoder,
                .submit = decoder_submit,
                .forget = decoder_forget,
        };
        /* The control socket last: a client that can connect finds a daemon that started, and
         * whoever waits for the socket to accept (a script, a test) never mistakes a kvdistd
         * that is about to fail on a peer address for one that runs. */
        r = daemon_take_activated();
        if (r < 0 && r != -ENOENT)
                goto fail;
        r = listener_new(&d->control, r, &d->control.listener);
        if (r < 0)
                goto fail;

        *ret = d;
        return 0;
fail:
        daemon_free(d);
        return r;
}

/*
 * Raises the control loop (this thread) to control_nice. Its work is short (a status call, a
 * request's checks), but with every core busy copying it waited milliseconds for one; the
 * workers keep the daemon's own nice (thread_nice_worker()). Never lowers it: a daemon started
 * at control_nice or above keeps its nice. Without the privilege the loop stays as it was: a
 * notice, not a failure.
 */
static void daemon_raise_control_loop(const Daemon *d)
{
        int r, nice = d->config->control_nice, own = thread_nice_get();

        if (nice == CONTROL_NICE_OFF)
                return;
        /* started at or above it: moving would put the loop below its own workers */
        if (own <= nice) {
                log_debug("control loop left at nice %d, at or above control_nice %d", own, nice);
                return;
        }
        r = thread_nice_set(nice);
        if (r < 0)
                log_full_errno(LOG_NOTICE, r,
                               "control loop left at nice %d, not %d: %m (it takes "
                               "CAP_SYS_NICE or LimitNICE=%d; control_nice \"off\" silences this)",
                               own, nice, nice);
        else
                log_debug("control loop at nice %d", nice);
}

int daemon_run(Daemon *d)
{
        daemon_raise_control_loop(d);
        log_info("kvdistd %s listening on %s%s%s, pool %" PRIu64 " bytes, %u copy threads, "
                 "node %016" PRIx64 "%s",
                 KVDIST_VERSION, listener_path(d->control.listener),
                 d->link.peer_listener ? ", peers on " : "", daemon_peer_address(d),
                 d->config->memory_size, engine_n_threads(d->transports.engine), d->link.node_id,
                 d->link.cluster_key ? ", cluster key loaded" : "");
        /* Every listener accepts connections by now: listen() ran in daemon_new(). */
        service_ready(d->service);

        if (event_base_dispatch(d->base) < 0)
                return log_error_errno(-EIO, "the event loop failed"), 1;
        return d->exit_code;
}

Daemon *daemon_free(Daemon *d)
{
        if (!d)
                return NULL;
        d->stopping = true;
        d->link.stopping = true;
        d->metrics_server = metrics_server_free(d->metrics_server);
        d->control.listener = listener_free(d->control.listener);
        conn_free_all(&d->control);
        peer_close_all(&d->link);
        /* Runs the completions of whatever was still moving over the network. */
        peer_free_all(&d->link);
        /* after the connections and the peers: each forgot its request's decoding */
        d->control.decoder = decoder_free(d->control.decoder);
        /* Runs the completions of whatever was still copying. */
        d->transports.engine = engine_free(d->transports.engine);
        d->domains = domain_registry_free(d->domains);
        transport_set_deinit(&d->transports);
        link_root_done(&d->link);
        memory_deinit(&d->memory);
        if (d->sig_term)
                event_free(d->sig_term);
        if (d->sig_int)
                event_free(d->sig_int);
        if (d->sig_hup)
                event_free(d->sig_hup);
        d->service = service_free(d->service);
        d->metrics = metrics_free(d->metrics);
        if (d->base)
                event_base_free(d->base);
        config_free(d->config);
        free(d);
        return NULL;
}
