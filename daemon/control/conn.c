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
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/decoder.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "proto/wire.h"
#include "common/status.h"
#include "proto/status-wire.h"

/* Frames served per wake-up: one busy client cannot starve the others. */
#define CONN_FRAMES_PER_WAKEUP 16
/* Replies a client may leave unread before it is disconnected. */
#define CONN_MAX_OUT_BYTES (64u << 20)

/* Frees @c: the close event's callback, conn_free_all() and a failed conn_new() only. */
static void conn_destroy(Conn *c)
{
        Request *req, *tmp;

        c->state = CONN_CLOSED;

        /* Requests in flight first: their owners stop and never answer. */
        CLIST_FOREACH_SAFE (req, tmp, &c->requests, link_conn) {
                clist_unlink(&req->link_conn);
                c->n_requests--;
                req->conn = NULL;
                if (req->done.cancel)
                        req->done.cancel(&req->done, req->done.userdata);
                conn_request_free(req);
        }
        cluster_free(TAKE_PTR(c->cluster));
        wire_out_clear(&c->out);
        wire_in_done(&c->in);
        if (c->ev_read)
                event_free(c->ev_read);
        if (c->ev_write)
                event_free(c->ev_write);
        if (c->ev_deadline)
                event_free(c->ev_deadline);
        if (c->ev_idle)
                event_free(c->ev_idle);
        user_uncharge(c->user, USER_SLOT_CONNECTIONS, 1);
        c->user = user_unref(c->user);
        if (c->reserved)
                c->root->counters.conns_reserved--;
        if (c->ev_close)
                event_free(c->ev_close);
        safe_close(c->fd);
        clist_unlink(&c->link_root);
        c->root->counters.conns_open--;
        control_root_changed(c->root);
        free(c);
}

static void conn_on_close(evutil_socket_t fd, short what, void *userdata)
{
        conn_destroy(userdata);
}

void conn_close_later(Conn *c)
{
        if (c->state == CONN_CLOSED)
                return;
        c->state = CONN_CLOSED;
        event_del(c->ev_read);
        event_del(c->ev_write);
        event_del(c->ev_deadline);
        event_del(c->ev_idle);
        /* The event exists since conn_new(): activating it allocates nothing and cannot fail. */
        event_active(c->ev_close, EV_TIMEOUT, 0);
}

void conn_resume_reading(Conn *c)
{
        c->decoding = false;
        if (c->state == CONN_CLOSED)
                return;
        if (event_add(c->ev_read, NULL) < 0) {
                log_error("connection %" PRIu64 ": cannot read it again, closing", c->id);
                conn_close_later(c);
                return;
        }
        /* what was read ahead, or the socket: the read callback sorts it out */
        event_active(c->ev_read, EV_READ, 0);
}

void conn_free_all(ControlRoot *root)
{
        Conn *c, *tmp;

        CLIST_FOREACH_SAFE (c, tmp, &root->conns, link_root) {
                conn_flush(c);
                conn_destroy(c);
        }
}

void conn_flush_all(ControlRoot *root)
{
        Conn *c;

        CLIST_FOREACH (c, &root->conns, link_root)
                conn_flush(c);
}

void conn_set_state(Conn *c, ConnState state)
{
        if (c->state == CONN_CLOSED)
                return;
        assert((c->state == CONN_HELLO && state == CONN_READY) ||
               (c->state == CONN_READY && state == CONN_CLUSTER) ||
               (c->state == CONN_CLUSTER && state == CONN_READY));
        c->state = state;
}

void conn_flush(Conn *c)
{
        (void)wire_out_write(&c->out, c->fd);
}

/* Writes queued output until the socket is full and waits for room for the rest; returns
 * negative errno when the socket broke. */
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

static void conn_on_write(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;
        int r;

        r = conn_write(c);
        if (r < 0) {
                log_debug_errno(r, "connection %" PRIu64 ": write failed, closing", c->id);
                conn_close_later(c);
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
                log_warning("connection %" PRIu64 ": %zu bytes of replies unread, closing", c->id,
                            c->out.bytes);
                conn_close_later(c);
                return -ENOBUFS;
        }
        r = wire_out_queue(&c->out, buf, len, fd);
        if (r < 0)
                return r;
        r = conn_write(c);
        if (r < 0) {
                log_debug_errno(r, "connection %" PRIu64 ": write failed, closing", c->id);
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

        control_root_count_error(c->root, code);
        if (frame_pack_error(type, id, status_wire_encode(code), detail,
                             c->root->options.limits->max_frame_size, &buf, &len) < 0)
                return;
        (void)conn_queue(c, buf, len, -1);
}

void conn_refuse(ControlRoot *root, int fd, int code, const char *detail)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        control_root_count_error(root, code);
        if (frame_pack_error(0, FRAME_CONNECTION_REQUEST_ID, status_wire_encode(code), detail,
                             root->options.limits->max_frame_size, &buf, &len) < 0)
                return;
        /* A fresh socket's buffer takes one small frame; if not, the close says enough. */
        (void)frame_sendmsg(fd, buf, len, NULL, 0);
}

static const char *file_kind(mode_t mode)
{
        switch (mode & S_IFMT) {
        case S_IFSOCK:
                return "a socket";
        case S_IFIFO:
                return "a pipe";
        case S_IFDIR:
                return "a directory";
        case S_IFCHR:
                return "a character device";
        case S_IFBLK:
                return "a block device";
        case 0:
                /* eventfd, epoll, io_uring, pidfd, ...: anonymous inodes have no file type. */
                return "an anonymous inode";
        default:
                return "an unknown kind of file";
        }
}

/*
 * Checks the fds that arrived since the last call. Clients send memfds (regions) and nothing
 * else, and only regular files are let in: a socket held in a partial frame, above all a dup of
 * the client's own end, would keep the connection (and its cluster) alive after the client
 * exits; an io_uring or epoll fd could hold one too. Returns 0, or -EBADFD after logging.
 */
static int conn_check_fd(Conn *c, int fd, size_t i)
{
        struct stat st;

        if (fstat(fd, &st) < 0)
                st.st_mode = 0;
        if (S_ISREG(st.st_mode))
                return 0;
        c->root->counters.frames_malformed++;
        log_warning("connection %" PRIu64 " (pid %d): sent %s as fd %zu of a frame; "
                    "clients may pass memfds only, closing",
                    c->id, (int)c->cred.pid, file_kind(st.st_mode), i);
        return -EBADFD;
}

static int conn_check_fds(Conn *c)
{
        int r;

        for (; c->n_fds_checked < c->in.n_fds; c->n_fds_checked++) {
                r = conn_check_fd(c, c->in.fds[c->n_fds_checked], c->n_fds_checked);
                if (r < 0)
                        return r;
        }
        /* read ahead with bytes of a later frame; rare, so checked again until it takes them */
        for (size_t i = 0; i < c->in.n_next_fds; i++) {
                r = conn_check_fd(c, c->in.next_fds[i], i);
                if (r < 0)
                        return r;
        }
        return 0;
}

/*
 * Reads toward the next complete frame: 1 when one is ready, 0 when the socket is drained,
 * negative errno when the connection must close (-EBADFD: refused fds, logged).
 */
static int conn_read_frame(Conn *c)
{
        int r, k;

        r = wire_in_read(&c->in, c->fd, c->root->options.limits->max_frame_size, FRAME_MAX_FDS);
        /* Whatever came, fds that must not stay are refused before anything else. */
        k = conn_check_fds(c);
        if (k < 0)
                return k;
        if (r == -EPROTONOSUPPORT) {
                char detail[128];

                (void)snprintf(detail, sizeof(detail), "kvdistd speaks frame version %d",
                               FRAME_VERSION);
                conn_send_error(c, 0, FRAME_CONNECTION_REQUEST_ID, STATUS_PROTOCOL_MISMATCH,
                                detail);
        }
        return r;
}

static bool conn_has_partial_frame(const Conn *c)
{
        return wire_in_has_partial(&c->in);
}

static void conn_on_deadline(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;

        if (conn_has_partial_frame(c)) {
                c->root->counters.frames_malformed++;
                log_warning("connection %" PRIu64 " (pid %d): a frame (%zu of %zu header bytes, "
                            "%zu of %u payload bytes, %zu fds) did not complete within %d s, "
                            "closing",
                            c->id, (int)c->cred.pid, c->in.header_len, (size_t)FRAME_HEADER_SIZE,
                            c->in.payload_len, c->in.frame_ok ? c->in.frame.length : 0, c->in.n_fds,
                            CONN_FRAME_TIMEOUT_SEC);
        } else
                log_warning("connection %" PRIu64 " (pid %d): no Hello within %d s, closing", c->id,
                            (int)c->cred.pid, CONN_FRAME_TIMEOUT_SEC);
        conn_close_later(c);
}

/*
 * After a read pass: a partial frame has CONN_FRAME_TIMEOUT_SEC from when it was first seen to
 * complete; so has Hello from the connect. Otherwise nothing is due.
 */
static void conn_update_deadline(Conn *c)
{
        static const struct timeval timeout = {CONN_FRAME_TIMEOUT_SEC, 0};

        if (c->state == CONN_CLOSED)
                return;
        if (!conn_has_partial_frame(c) && c->state != CONN_HELLO) {
                event_del(c->ev_deadline);
                return;
        }
        if (!evtimer_pending(c->ev_deadline, NULL) && evtimer_add(c->ev_deadline, &timeout) < 0) {
                log_error("connection %" PRIu64 ": cannot arm its frame deadline, closing", c->id);
                conn_close_later(c);
        }
}

static void conn_on_idle(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;
        char detail[160];

        c->root->counters.conns_idle_closed++;
        log_info("connection %" PRIu64 " (pid %d uid %u): no cluster attached and no request "
                 "within %" PRIu32 " ms (limits.attach_timeout_ms), closing",
                 c->id, (int)c->cred.pid, (unsigned)c->cred.uid,
                 c->root->options.limits->attach_timeout_ms);
        (void)snprintf(detail, sizeof(detail),
                       "kvdistd closed the connection: no cluster attached and no request within "
                       "%" PRIu32 " ms (limits.attach_timeout_ms)",
                       c->root->options.limits->attach_timeout_ms);
        conn_send_error(c, 0, FRAME_CONNECTION_REQUEST_ID, STATUS_TIMEOUT, detail);
        conn_flush(c);
        conn_close_later(c);
}

/*
 * A connection without a cluster holds a share of the daemon that nobody uses: it has
 * limits.attach_timeout_ms from Hello, and from each request it sends, to attach one or ask
 * something again. One with a cluster waits as long as it likes.
 */
static void conn_update_idle(Conn *c)
{
        uint32_t ms = c->root->options.limits->attach_timeout_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

        if (c->state != CONN_READY) {
                if (c->state == CONN_CLUSTER)
                        event_del(c->ev_idle);
                return;
        }
        if (evtimer_add(c->ev_idle, &tv) < 0) {
                log_error("connection %" PRIu64 ": cannot arm its attach deadline, closing", c->id);
                conn_close_later(c);
        }
}

static void conn_on_read(evutil_socket_t fd, short what, void *userdata)
{
        Conn *c = userdata;

        for (int i = 0; i < CONN_FRAMES_PER_WAKEUP && c->state != CONN_CLOSED; i++) {
                int r = conn_read_frame(c);

                if (r == 0)
                        break;
                if (r < 0) {
                        if (r == -ECONNRESET)
                                log_debug("connection %" PRIu64 " (pid %d): closed by peer", c->id,
                                          (int)c->cred.pid);
                        else if (r != -EBADFD) {
                                c->root->counters.frames_malformed++;
                                if (!c->in.frame_ok)
                                        log_warning_errno(r,
                                                          "connection %" PRIu64 " (pid %d): "
                                                          "broken frame header, closing",
                                                          c->id, (int)c->cred.pid);
                                else
                                        log_warning_errno(r,
                                                          "connection %" PRIu64 " (pid %d): "
                                                          "broken frame (type %u, %u bytes, %u "
                                                          "fds), closing",
                                                          c->id, (int)c->cred.pid, c->in.frame.type,
                                                          c->in.frame.length, c->in.frame.n_fds);
                        }
                        /* The fds of a refused frame go now, not with the connection. */
                        wire_in_reset(&c->in);
                        conn_flush(c);
                        conn_close_later(c);
                        return;
                }
                dispatch_frame(c);
                conn_update_idle(c);
                wire_in_reset(&c->in);
                c->n_fds_checked = 0;
                /* The next frame's time starts when it is first seen. */
                if (c->state != CONN_HELLO)
                        event_del(c->ev_deadline);
                /* Its requests keep their order: the next waits for this one's decoding. */
                if (c->decoding) {
                        event_del(c->ev_read);
                        break;
                }
        }
        /* Frames read ahead and left by the limit above: the socket may have nothing more to
         * wake us with, so the next pass of the loop comes back for them. */
        if (c->state != CONN_CLOSED && !c->decoding && wire_in_has_ahead(&c->in))
                event_active(c->ev_read, EV_READ, 0);
        conn_update_deadline(c);
}

int conn_new(ControlRoot *root, int fd, const struct ucred *cred, User *user, bool reserved,
             Conn **ret)
{
        Conn *c;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c) {
                safe_close(fd);
                user_uncharge(user, USER_SLOT_CONNECTIONS, 1);
                return -ENOMEM;
        }
        c->root = root;
        c->user = user_ref(user);
        c->reserved = reserved;
        if (reserved)
                root->counters.conns_reserved++;
        c->id = id_source_next(root->ids);
        c->fd = fd;
        c->cred = *cred;
        c->state = CONN_HELLO;
        /* a small request is one read, and no read finds the socket empty after it */
        r = wire_in_init_ahead(&c->in);
        wire_out_init(&c->out);
        clist_init(&c->requests);
        clist_init(&c->link_root);
        clist_link_tail(&root->conns, &c->link_root);
        root->counters.conns_open++;
        c->ev_read = event_new(root->base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
        c->ev_write = event_new(root->base, fd, EV_WRITE | EV_PERSIST, conn_on_write, c);
        c->ev_close = event_new(root->base, -1, 0, conn_on_close, c);
        c->ev_deadline = evtimer_new(root->base, conn_on_deadline, c);
        c->ev_idle = evtimer_new(root->base, conn_on_idle, c);
        if (r < 0 || !c->ev_read || !c->ev_write || !c->ev_close || !c->ev_deadline ||
            !c->ev_idle || event_add(c->ev_read, NULL) < 0) {
                conn_destroy(c);
                return -ENOMEM;
        }
        /* Hello has CONN_FRAME_TIMEOUT_SEC from now. */
        conn_update_deadline(c);
        log_debug("connection %" PRIu64 ": pid %d uid %u%s", c->id, (int)cred->pid,
                  (unsigned)cred->uid, reserved ? ", on the read-only reserve" : "");
        *ret = c;
        return 0;
}

static int request_done_reply(Completion *cpl, const void *reply, int fd)
{
        Request *req = container_of(cpl, Request, done);

        /* control/ answers its clients with their reply message (see completion.h). */
        return reply ? conn_request_reply(req, (const ProtobufCMessage *)reply, fd)
                     : conn_request_reply_ok_fd(req, fd);
}

static int request_done_fail(Completion *cpl, int status, const Error *err)
{
        return conn_request_fail(container_of(cpl, Request, done), status, err);
}

static void request_done_drop(Completion *cpl)
{
        conn_request_free(container_of(cpl, Request, done));
}

/* How a layer below control/ answers a request it was handed. */
static const CompletionOps request_done_ops = {
        .reply = request_done_reply,
        .fail = request_done_fail,
        .drop = request_done_drop,
};

Request *conn_request_new(Conn *c)
{
        Request *req;

        req = calloc(1, sizeof(*req));
        if (!req)
                return NULL;
        req->conn = c;
        req->type = c->in.frame.type;
        req->id = c->in.frame.request_id;
        req->done.ops = &request_done_ops;
        for (size_t i = 0; i < FRAME_MAX_FDS; i++)
                req->fds[i] = -1;
        clist_link_tail(&c->requests, &req->link_conn);
        c->n_requests++;
        return req;
}

Request *conn_request_free(Request *req)
{
        if (!req)
                return NULL;
        if (req->conn) {
                clist_unlink(&req->link_conn);
                req->conn->n_requests--;
        }
        decoder_forget(req->decoding);
        if (req->msg)
                protobuf_c_message_free_unpacked(req->msg, NULL);
        for (size_t i = 0; i < req->n_fds; i++)
                safe_close(req->fds[i]);
        free(req);
        return NULL;
}

int conn_request_take_fd(Request *req, size_t i)
{
        if (i >= req->n_fds)
                return -1;
        return TAKE_FD(req->fds[i]);
}

int conn_request_reply(Request *req, const ProtobufCMessage *reply, int fd)
{
        Conn *c = req->conn;
        uint8_t *buf;
        size_t len;
        int r = 0;

        if (c && c->state != CONN_CLOSED) {
                r = frame_pack(req->type, FRAME_FLAG_REPLY, req->id, fd >= 0 ? 1 : 0, reply,
                               c->root->options.limits->max_frame_size, &buf, &len);
                if (r < 0) {
                        log_error_errno(r,
                                        "connection %" PRIu64 ": cannot pack a reply of %zu "
                                        "bytes, closing",
                                        c->id, protobuf_c_message_get_packed_size(reply));
                        conn_close_later(c);
                } else
                        r = conn_queue(c, buf, len, fd);
        }
        conn_request_free(req);
        return r;
}

int conn_request_reply_ok(Request *req)
{
        return conn_request_reply_ok_fd(req, -1);
}

int conn_request_reply_ok_fd(Request *req, int fd)
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
                conn_request_free(req);
                return -ENOMEM;
        }
        protobuf_c_message_init(ft->reply, reply);
        *(Kvdist__V1__Status **)((uint8_t *)reply + field->offset) = &status;
        return conn_request_reply(req, reply, fd);
}

int conn_request_fail(Request *req, int code, const Error *err)
{
        Conn *c = req->conn;

        if (c && c->state != CONN_CLOSED)
                conn_send_error(c, req->type, req->id, code, err ? err->msg : NULL);
        else if (c)
                control_root_count_error(c->root, code);
        conn_request_free(req);
        return 0;
}
