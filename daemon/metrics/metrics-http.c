/* SPDX-License-Identifier: MIT */
/* Metrics HTTP: GET /metrics through libevent's evhttp, on the control loop. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "common/log.h"
#include "common/macro.h"
#include "daemon/metrics/metrics-http.h"
#include "common/sockaddr-util.h"

/* Prometheus scrapes send a few headers and no body; anything bigger is not a scraper. */
#define METRICS_MAX_HEADERS_SIZE 8192
#define METRICS_TIMEOUT_SEC 10
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct MetricsServer {
        struct evhttp *http;
        metrics_render_fn render;
        void *userdata;
        char address[SOCKADDR_STR_MAX];
};

static void free_document(const void *data, size_t len, void *extra)
{
        free((void *)data);
}

static void metrics_on_request(struct evhttp_request *req, void *userdata)
{
        MetricsServer *s = userdata;
        const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
        const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
        struct evbuffer *body;
        char *doc = NULL;
        size_t len = 0;
        int r;

        if (!path || strcmp(path, "/metrics") != 0) {
                evhttp_send_error(req, HTTP_NOTFOUND, "kvdistd serves /metrics only");
                return;
        }
        r = s->render(s->userdata, &doc, &len);
        body = evbuffer_new();
        if (r < 0 || !body || evbuffer_add_reference(body, doc, len, free_document, NULL) < 0) {
                if (body)
                        evbuffer_free(body);
                free(doc);
                evhttp_send_error(req, HTTP_INTERNAL, "cannot build the metrics");
                return;
        }
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          METRICS_CONTENT_TYPE);
        evhttp_send_reply(req, HTTP_OK, "OK", body);
        evbuffer_free(body);
}

int metrics_server_new(struct event_base *base, const struct sockaddr_storage *addr, socklen_t len,
                       const char *listen_addr, metrics_render_fn render, void *userdata,
                       MetricsServer **ret)
{
        _cleanup_close_ int fd = -1;
        struct sockaddr_storage sa = *addr;
        MetricsServer *s;
        int one = 1;

        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "metrics: cannot create a socket");
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (sa.ss_family == AF_INET6)
                (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, len) < 0)
                return log_error_errno(-errno, "metrics: cannot bind %s", listen_addr);
        if (listen(fd, 16) < 0)
                return log_error_errno(-errno, "metrics: cannot listen on %s", listen_addr);
        len = sizeof(sa);
        if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                return log_error_errno(-errno, "metrics: getsockname() failed");

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->render = render;
        s->userdata = userdata;
        (void)sockaddr_format((struct sockaddr *)&sa, len, s->address, sizeof(s->address));
        s->http = evhttp_new(base);
        if (!s->http) {
                metrics_server_free(s);
                return log_error_errno(-ENOMEM, "metrics: cannot create the HTTP server");
        }
        evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
        evhttp_set_max_headers_size(s->http, METRICS_MAX_HEADERS_SIZE);
        evhttp_set_max_body_size(s->http, 0);
        evhttp_set_timeout(s->http, METRICS_TIMEOUT_SEC);
        evhttp_set_gencb(s->http, metrics_on_request, s);
        /* evhttp owns the fd from here on and closes it in evhttp_free(). */
        if (!evhttp_accept_socket_with_handle(s->http, fd)) {
                metrics_server_free(s);
                return log_error_errno(-ENOMEM, "metrics: cannot accept on %s", listen_addr);
        }
        TAKE_FD(fd);
        log_info("metrics: serving http://%s/metrics", s->address);
        *ret = s;
        return 0;
}

MetricsServer *metrics_server_free(MetricsServer *s)
{
        if (!s)
                return NULL;
        if (s->http)
                evhttp_free(s->http);
        free(s);
        return NULL;
}

const char *metrics_server_address(const MetricsServer *s)
{
        return s ? s->address : NULL;
}
