/* SPDX-License-Identifier: MIT */
/* Conn: one client connection; frame input with limits, reply output, request bookkeeping. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "cluster.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "kvdist.pb-c.h"
#include "log.h"
#include "wire.h"

/* Frames served per wake-up: one busy client cannot starve the others. */
#define CONN_FRAMES_PER_WAKEUP 16
/* Replies a client may leave unread before it is disconnected. */
#define CONN_MAX_OUT_BYTES (64u << 20)

static void conn_on_close_later(evutil_socket_t fd, short what, void *userdata)
{
        conn_free(userdata);
}

void conn_close_later(Conn *c)
{
        static const struct timeval now = { 0, 0 };

        if (c->state == CONN_CLOSED)
                return;
        c->state = CONN_CLOSED;
        event_del(c->ev_read);
        event_del(c->ev_write);
        if (event_base_once(c->daemon->base, -1, EV_TIMEOUT, conn_on_close_later, c, &now) < 0)
                log_error("connection %" PRIu64 ": cannot schedule its close", c->id);
}

/* Writes queued output until the socket is full; returns negative errno when it broke. */
static int conn_write(Conn *c)
{
        int r;

        r = wire_out_write(&c->out, c->fd);
        if (r < 0)
                return r;
        if (wire_out_is_empty(&c->out))
                event_del(c->ev_write);
        else if (event_add(c->ev_write, NULL) < 0)
                return -ENOMEM;
        return 0;
}

void conn_flush(Conn *c)
{
        if (c->fd >= 0)
                (void)conn_write(c);
}

static void conn_on_write(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;
        int r;

        r = conn_write(c);
        if (r < 0) {
                log_debug_errno(r, "connection %" PRIu64 ": write failed, closing", c->id);
                conn_free(c);
        }
}

/* Queues @buf (taking it) with @fd (dup'ed) and starts writing. */
static int conn_queue(Conn *c, uint8_t *buf, size_t len, int fd)
{
        int r;

        if (c->state == CONN_CLOSED) {
                free(buf);
                return -ENOTCONN;
        }
        if (c->out.bytes + len > CONN_MAX_OUT_BYTES) {
                free(buf);
                log_warning("connection %" PRIu64 ": %zu bytes of replies unread, closing",
                            c->id, c->out.bytes);
                conn_close_later(c);
                return -ENOBUFS;
        }
        r = wire_out_queue(&c->out, buf, len, fd);
        if (r < 0)
                return r;
        r = conn_write(c);
        if (r < 0) {
                conn_close_later(c);
                return r;
        }
        return 0;
}

/* Answers a frame that never became a request (bad version, unknown type, wrong fds). */
static void conn_send_error(Conn *c, uint16_t type, uint64_t id, int code, const char *detail)
{
        uint8_t *buf;
        size_t len;

        daemon_count_error(c->daemon, code);
        if (frame_pack_error(type, id, code, detail, c->daemon->config->limits.max_frame_size,
                             &buf, &len) < 0)
                return;
        (void)conn_queue(c, buf, len, -1);
}

/* Reads toward the next complete frame: 1 when one is ready, 0 when the socket is drained. */
static int conn_read_frame(Conn *c)
{
        int r;

        r = wire_in_read(&c->in, c->fd, c->daemon->config->limits.max_frame_size, FRAME_MAX_FDS);
        if (r == -EPROTONOSUPPORT) {
                char detail[128];

                (void)snprintf(detail, sizeof(detail), "kvdistd speaks frame version %d",
                               FRAME_VERSION);
                conn_send_error(c, 0, 0, KVD_E_PROTOCOL_MISMATCH, detail);
        }
        return r;
}

static void conn_on_read(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;

        for (int i = 0; i < CONN_FRAMES_PER_WAKEUP; i++) {
                int r = conn_read_frame(c);

                if (r == 0)
                        return;
                if (r < 0) {
                        if (r != -ECONNRESET) {
                                c->daemon->counters.frames_malformed++;
                                log_warning_errno(r, "connection %" PRIu64 " (pid %d): broken "
                                                  "frame (type %u, %u bytes, %u fds), closing",
                                                  c->id, (int)c->cred.pid, c->in.frame.type,
                                                  c->in.frame.length, c->in.frame.n_fds);
                        } else
                                log_debug("connection %" PRIu64 " (pid %d): closed by peer",
                                          c->id, (int)c->cred.pid);
                        conn_flush(c);
                        conn_free(c);
                        return;
                }
                dispatch_frame(c);
                wire_in_reset(&c->in);
                if (c->state == CONN_CLOSED)
                        return;
        }
}

int conn_new(Daemon *d, int fd, const struct ucred *cred, Conn **ret)
{
        Conn *c;

        c = calloc(1, sizeof(*c));
        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->daemon = d;
        c->id = daemon_next_id(d);
        c->fd = fd;
        c->cred = *cred;
        c->state = CONN_HELLO;
        wire_in_init(&c->in);
        wire_out_init(&c->out);
        clist_init(&c->requests);
        clist_init(&c->link_daemon);
        c->ev_read = event_new(d->base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
        c->ev_write = event_new(d->base, fd, EV_WRITE | EV_PERSIST, conn_on_write, c);
        clist_link_tail(&d->conns, &c->link_daemon);
        d->n_conns++;
        if (!c->ev_read || !c->ev_write || event_add(c->ev_read, NULL) < 0) {
                conn_free(c);
                return -ENOMEM;
        }
        log_debug("connection %" PRIu64 ": pid %d uid %u", c->id, (int)cred->pid,
                  (unsigned)cred->uid);
        *ret = c;
        return 0;
}

Conn *conn_free(Conn *c)
{
        Request *req, *tmp;

        if (!c)
                return NULL;
        c->state = CONN_CLOSED;

        /* Requests in flight first: their owners stop and never answer. */
        CLIST_FOREACH_SAFE(req, tmp, &c->requests, link_conn) {
                clist_unlink(&req->link_conn);
                c->n_requests--;
                req->conn = NULL;
                if (req->cancel)
                        req->cancel(req, req->userdata);
                else
                        request_free(req);
        }
        if (c->cluster) {
                Cluster *cl = TAKE_PTR(c->cluster);

                cl->conn = NULL;
                cluster_free(cl);
        }
        wire_out_clear(&c->out);
        wire_in_reset(&c->in);
        if (c->ev_read)
                event_free(c->ev_read);
        if (c->ev_write)
                event_free(c->ev_write);
        safe_close(c->fd);
        clist_unlink(&c->link_daemon);
        c->daemon->n_conns--;
        daemon_update_status(c->daemon);
        free(c);
        return NULL;
}

Request *request_new(Conn *c)
{
        Request *req;

        req = calloc(1, sizeof(*req));
        if (!req)
                return NULL;
        req->conn = c;
        req->type = c->in.frame.type;
        req->id = c->in.frame.request_id;
        for (size_t i = 0; i < FRAME_MAX_FDS; i++)
                req->fds[i] = -1;
        clist_link_tail(&c->requests, &req->link_conn);
        c->n_requests++;
        return req;
}

Request *request_free(Request *req)
{
        if (!req)
                return NULL;
        if (req->conn) {
                clist_unlink(&req->link_conn);
                req->conn->n_requests--;
        }
        if (req->msg)
                protobuf_c_message_free_unpacked(req->msg, NULL);
        for (size_t i = 0; i < req->n_fds; i++)
                safe_close(req->fds[i]);
        free(req);
        return NULL;
}

int request_take_fd(Request *req, size_t i)
{
        if (i >= req->n_fds)
                return -1;
        return TAKE_FD(req->fds[i]);
}

int request_reply(Request *req, const ProtobufCMessage *reply, int fd)
{
        Conn *c = req->conn;
        uint8_t *buf;
        size_t len;
        int r = 0;

        if (c && c->state != CONN_CLOSED) {
                r = frame_pack(req->type, FRAME_FLAG_REPLY, req->id, fd >= 0 ? 1 : 0, reply,
                               c->daemon->config->limits.max_frame_size, &buf, &len);
                if (r < 0) {
                        log_error_errno(r, "connection %" PRIu64 ": cannot pack a reply of %zu "
                                        "bytes, closing", c->id,
                                        protobuf_c_message_get_packed_size(reply));
                        conn_close_later(c);
                } else
                        r = conn_queue(c, buf, len, fd);
        }
        request_free(req);
        return r;
}

int request_reply_ok(Request *req)
{
        return request_reply_ok_fd(req, -1);
}

int request_reply_ok_fd(Request *req, int fd)
{
        const FrameType *ft = frame_type_lookup(req->type);
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        const ProtobufCFieldDescriptor *field;
        _cleanup_free_ ProtobufCMessage *reply = NULL;

        /* Every reply has Status as field 1 (proto/kvdist.proto); the rest stays default. */
        field = protobuf_c_message_descriptor_get_field(ft->reply, 1);
        assert(field && field->type == PROTOBUF_C_TYPE_MESSAGE &&
               field->descriptor == &kvdist__v1__status__descriptor);
        reply = calloc(1, ft->reply->sizeof_message);
        if (!reply) {
                if (req->conn)
                        conn_close_later(req->conn);
                request_free(req);
                return -ENOMEM;
        }
        protobuf_c_message_init(ft->reply, reply);
        *(Kvdist__V1__Status **)((uint8_t *)reply + field->offset) = &status;
        return request_reply(req, reply, fd);
}

int request_fail(Request *req, int code, const Error *err)
{
        Conn *c = req->conn;

        if (c && c->state != CONN_CLOSED)
                conn_send_error(c, req->type, req->id, code, err ? err->msg : NULL);
        else if (c)
                daemon_count_error(c->daemon, code);
        request_free(req);
        return 0;
}
