/* SPDX-License-Identifier: MIT */
/*
 * Metrics HTTP: a small libevent evhttp server on the control loop that answers GET /metrics
 * with the Prometheus text document (and HEAD; anything else is refused). Off unless
 * metrics_listen is set; meant for loopback.
 */
#pragma once

#include <stddef.h>
#include <sys/socket.h>

struct event_base;
typedef struct MetricsServer MetricsServer;

/* Builds the document: *@ret malloc()ed, *@ret_len bytes. 0 or negative errno. */
typedef int (*metrics_render_fn)(void *userdata, char **ret, size_t *ret_len);

/*
 * Listens on @addr (@len bytes; @listen_addr names it in logs) on @base and serves what @render
 * builds. Logs what failed. Returns 0 or the errno of socket(), bind() or listen().
 */
int metrics_server_new(struct event_base *base, const struct sockaddr_storage *addr, socklen_t len,
                       const char *listen_addr, metrics_render_fn render, void *userdata,
                       MetricsServer **ret);

/* Closes the listener and the connections. Accepts NULL; returns NULL. */
MetricsServer *metrics_server_free(MetricsServer *s);

/* The bound address, "127.0.0.1:9477" (the real port when the config said 0). */
const char *metrics_server_address(const MetricsServer *s);
