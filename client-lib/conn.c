/* SPDX-License-Identifier: MIT */
/*
 * libkvdist connection: the Unix socket to kvdistd, request ids, and matching replies to
 * waiters. One thread at a time reads frames and files each reply under its request id; the
 * other waiters sleep on the condition variable until theirs arrives or the reader leaves.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "client-lib/client.h"
#include "common/socket-path.h"

int conn_connect(const char *path, Error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = CLIENT_SEND_TIMEOUT_MS / 1000};
        _cleanup_close_ int fd = -1;
        size_t len = strlen(path);
        char msg[ERROR_MSG_MAX];
        int r;

        if (len == 0 || len >= sizeof(sa.sun_path))
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "socket path \"%s\" is empty or longer than %zu bytes", path,
                                 sizeof(sa.sun_path) - 1);
        memcpy(sa.sun_path, path, len + 1);

        /* A missing folder means no daemon: connect() says so below. */
        r = socket_path_check_dir(path, false, msg, sizeof(msg));
        if (r < 0 && r != -ENOENT)
                return error_set(err, KVD_E_PERMISSION_DENIED, "refusing to connect to %s: %s",
                                 path, msg);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return error_set(err, KVD_E_FAILED, "socket(AF_UNIX): %s", strerror(errno));

        /* A daemon that reads nothing for this long is stuck: fail instead of hanging. */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

        do
                r = connect(fd, (const struct sockaddr *)&sa, sizeof(sa));
        while (r < 0 && errno == EINTR);
        if (r < 0 && errno != EISCONN) {
                int e = errno;

                if (e == EACCES || e == EPERM)
                        return error_set(err, KVD_E_PERMISSION_DENIED,
                                         "cannot connect to kvdistd at %s: %s", path, strerror(e));
                return error_set(err, KVD_E_DAEMON_UNAVAILABLE,
                                 "no daemon at %s: %s; is kvdistd running?", path, strerror(e));
        }

        return TAKE_FD(fd);
}

const char *conn_type_name(uint16_t type)
{
        const FrameType *ft = frame_type_lookup(type);

        return ft ? ft->name : "request";
}

void pending_init(Pending *p)
{
        *p = (Pending){};
        clist_init(&p->link);
        for (size_t i = 0; i < FRAME_MAX_FDS; i++)
                p->fds[i] = -1;
        p->wake_fd = -1;
}

/* Tells @p's poller (if any) that waiting on it can make progress now. */
static void pending_wake(Pending *p)
{
        if (p->wake_fd >= 0)
                (void)eventfd_write(p->wake_fd, 1);
}

/* Frees what a reply left in @p; the caller made sure nobody else can reach it. */
static void pending_clear(Pending *p)
{
        if (p->reply)
                protobuf_c_message_free_unpacked(p->reply, NULL);
        p->reply = NULL;
        for (size_t i = 0; i < p->n_fds; i++)
                p->fds[i] = safe_close(p->fds[i]);
        p->n_fds = 0;
}

void pending_deinit(kvd_client *c, Pending *p)
{
        pthread_mutex_lock(&c->lock);
        clist_unlink(&p->link);
        pthread_mutex_unlock(&c->lock);
        pending_clear(p);
}

static void conn_kill_locked(kvd_client *c, int code, const char *detail)
{
        Pending *p;

        if (!c->dead) {
                c->dead = true;
                c->dead_code = code;
                (void)snprintf(c->dead_detail, sizeof(c->dead_detail), "%s", detail);
                /* Wakes a reader blocked in poll(); the fd itself stays until the client goes. */
                if (c->fd >= 0)
                        (void)shutdown(c->fd, SHUT_RDWR);
                /* Every waiter's answer is final now: DAEMON_UNAVAILABLE. */
                CLIST_FOREACH (p, &c->pending, link)
                        pending_wake(p);
        }
        pthread_cond_broadcast(&c->cond);
}

void conn_kill(kvd_client *c, const char *detail)
{
        pthread_mutex_lock(&c->lock);
        conn_kill_locked(c, KVD_E_DAEMON_UNAVAILABLE, detail);
        pthread_mutex_unlock(&c->lock);
}

static void conn_read_farewell(kvd_client *c);

int conn_send(kvd_client *c, uint16_t type, const ProtobufCMessage *msg, const int *fds,
              size_t n_fds, Pending *p, Error *err)
{
        _cleanup_free_ uint8_t *buf = NULL;
        char detail[ERROR_MSG_MAX];
        size_t len, off = 0;
        ssize_t n = 0;
        int r;

        /* Packed before any lock is taken; the request id goes into the header below. */
        r = frame_pack(type, 0, 0, (uint16_t)n_fds, msg, c->max_payload, &buf, &len);
        if (r == -EMSGSIZE)
                return error_set(err, KVD_E_LIMIT_EXCEEDED,
                                 "the %s request is %zu bytes, larger than the %" PRIu32
                                 " bytes kvdistd accepts (limits.max_frame_size)",
                                 conn_type_name(type), protobuf_c_message_get_packed_size(msg),
                                 c->max_payload);
        if (r < 0)
                return error_set(err, r == -ENOMEM ? KVD_E_OUT_OF_MEMORY : KVD_E_FAILED,
                                 "cannot pack the %s request: %s", conn_type_name(type),
                                 strerror(-r));

        pthread_mutex_lock(&c->send_lock);
        pthread_mutex_lock(&c->lock);
        if (c->dead) {
                r = error_set(err, c->dead_code, "%s", c->dead_detail);
                pthread_mutex_unlock(&c->lock);
                pthread_mutex_unlock(&c->send_lock);
                return r;
        }
        /* Ids are taken under send_lock, so they reach the wire in increasing order. */
        p->request_id = c->next_request_id++;
        p->type = type;
        p->done = false;
        clist_link_tail(&c->pending, &p->link);
        pthread_mutex_unlock(&c->lock);

        frame_header_encode(
                &(FrameHeader){
                        .magic = FRAME_MAGIC,
                        .version = FRAME_VERSION,
                        .type = type,
                        .n_fds = (uint16_t)n_fds,
                        .length = (uint32_t)(len - FRAME_HEADER_SIZE),
                        .request_id = p->request_id,
                },
                buf);

        while (off < len) {
                /* The fds travel with the first byte. */
                n = frame_sendmsg(c->fd, buf + off, len - off, off == 0 ? fds : NULL,
                                  off == 0 ? n_fds : 0);
                if (n < 0)
                        break;
                off += (size_t)n;
        }
        pthread_mutex_unlock(&c->send_lock);

        if (off == len)
                return KVD_OK;

        pending_deinit(c, p);
        if (off == 0 && n == -EAGAIN)
                /* Nothing went out, so the stream is still in step. */
                return error_set(err, KVD_E_TIMEOUT,
                                 "kvdistd did not read the %s request within %u ms",
                                 conn_type_name(type), CLIENT_SEND_TIMEOUT_MS);

        if (n == -EPIPE || n == -ECONNRESET) {
                /* It may have said why before it closed (the allow-list refusing us). */
                conn_read_farewell(c);
                (void)snprintf(detail, sizeof(detail), "kvdistd closed the connection");
        } else
                (void)snprintf(detail, sizeof(detail),
                               "kvdistd closed the connection (sending %s: %s)",
                               conn_type_name(type), strerror((int)-n));
        pthread_mutex_lock(&c->lock);
        conn_kill_locked(c, KVD_E_DAEMON_UNAVAILABLE, detail);
        r = error_set(err, c->dead_code, "%s", c->dead_detail);
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* A frame the reader completed, decoded; @msg NULL means "nothing to deliver". */
typedef struct RxFrame {
        FrameHeader h;
        ProtobufCMessage *msg;
        bool is_error;
        bool farewell; /* about the connection, not a request: @msg is its Status */
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
} RxFrame;

static void rx_frame_clear(RxFrame *f)
{
        if (f->msg)
                protobuf_c_message_free_unpacked(f->msg, NULL);
        f->msg = NULL;
        for (size_t i = 0; i < f->n_fds; i++)
                safe_close(f->fds[i]);
        f->n_fds = 0;
}

/* Milliseconds for poll() until @deadline, -1 for none, 0 once it passed. */
static int poll_timeout(usec_t deadline)
{
        usec_t now, left;

        if (deadline == USEC_INFINITY)
                return -1;
        now = now_usec(CLOCK_MONOTONIC);
        if (now >= deadline)
                return 0;
        left = (deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC;
        return left > INT_MAX ? INT_MAX : (int)left;
}

/*
 * Decodes the whole frame in c->rx into @ret and starts the next one there. Returns 0, or -1
 * with @detail set when the frame breaks the protocol.
 */
static int rx_decode(kvd_client *c, RxFrame *ret, char *detail, size_t size)
{
        WireIn *rx = &c->rx;
        const ProtobufCMessageDescriptor *desc;
        const FrameType *ft;
        RxFrame f = {.h = rx->frame};
        int r = 0;

        /* wire_in_cut() matched the fds to the header. */
        memcpy(f.fds, rx->fds, sizeof(f.fds));
        f.n_fds = rx->n_fds;
        rx->n_fds = 0;

        if (!(f.h.flags & FRAME_FLAG_REPLY))
                /* Not an answer to anything we asked: dropped. */
                goto out;

        if ((f.h.flags & FRAME_FLAG_ERROR) && f.h.request_id == FRAME_CONNECTION_REQUEST_ID) {
                f.is_error = f.farewell = true;
                if (frame_unpack(&kvdist__v1__status__descriptor, rx->payload, rx->payload_len,
                                 &f.msg) < 0) {
                        (void)snprintf(detail, size, "kvdistd sent a malformed error frame");
                        r = -1;
                }
                goto out;
        }

        ft = frame_type_lookup(f.h.type);
        if (!ft) {
                (void)snprintf(detail, size, "kvdistd sent a reply of unknown type %u", f.h.type);
                r = -1;
                goto out;
        }
        f.is_error = f.h.flags & FRAME_FLAG_ERROR;
        desc = f.is_error ? &kvdist__v1__status__descriptor : ft->reply;
        if (frame_unpack(desc, rx->payload, rx->payload_len, &f.msg) < 0) {
                (void)snprintf(detail, size, "kvdistd sent a malformed %s reply", ft->name);
                r = -1;
        }

out:
        wire_in_reset(rx);
        if (r < 0)
                rx_frame_clear(&f);
        *ret = f;
        return r;
}

/* Says in @detail why wire_in_cut() refused the frame being read in @rx with @r. */
static void rx_cut_detail(const WireIn *rx, int r, char *detail, size_t size)
{
        if (r == -ENOMEM) {
                (void)snprintf(detail, size, "out of memory for a %u byte reply from kvdistd",
                               rx->frame.length);
                return;
        }
        /* The rest are the header's own errors or, after it passed, its fds' (-EBADMSG both) */
        if (!rx->frame_ok)
                (void)snprintf(detail, size, "kvdistd sent a malformed frame header (%s)",
                               strerror(-r));
        else if (rx->n_next_fds > 0 && rx->frame_start >= rx->next_fds_end)
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (%zu fds with no frame starting in "
                               "the bytes they came with)",
                               rx->n_next_fds);
        else
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (%zu fds for a header saying %u)",
                               rx->n_fds, rx->frame.n_fds);
}

/* Says in @detail why wire_in_recv() failed with @n on @rx. */
static void rx_recv_detail(const WireIn *rx, ssize_t n, char *detail, size_t size)
{
        if (n == -ECONNRESET || n == -EPIPE) {
                if (rx->header_len == 0)
                        (void)snprintf(detail, size, "kvdistd closed the connection");
                else if (rx->header_len < FRAME_HEADER_SIZE)
                        (void)snprintf(detail, size,
                                       "kvdistd closed the connection in the middle of a frame "
                                       "(%zu of %d header bytes)",
                                       rx->header_len, FRAME_HEADER_SIZE);
                else
                        (void)snprintf(detail, size,
                                       "kvdistd closed the connection in the middle of a frame "
                                       "(%zu of %u payload bytes)",
                                       rx->payload_len, rx->frame.length);
        } else if (n == -EPROTO)
                (void)snprintf(detail, size, "kvdistd sent a malformed frame (bad control data)");
        else if (n == -EBADMSG && rx->n_next_fds > 0)
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (more fds before a frame took the "
                               "last ones)");
        else if (n == -EBADMSG)
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (%zu fds in the middle of a %u "
                               "byte payload)",
                               rx->n_stray_fds, rx->frame.length);
        else
                (void)snprintf(detail, size, "kvdistd closed the connection (recv: %s)",
                               strerror((int)-n));
}

/*
 * Reads until one frame is complete (1, in @ret), @deadline passes (0; a partial frame stays in
 * c->rx for the next reader) or the connection fails (-1, @detail set). Without @may_read it
 * only cuts a frame from the bytes read ahead, and returns 0 when they hold no whole one. Called
 * by the reader only, without c->lock.
 */
static int conn_read(kvd_client *c, usec_t deadline, bool may_read, RxFrame *ret, char *detail,
                     size_t size)
{
        WireIn *rx = &c->rx;
        /* A call reads after it sent its request: the answer takes the daemon a wake-up, so wait
         * for it first. After a read that filled what it asked for, the rest of a frame is most
         * likely there already: try it without waiting. After a short read the socket is empty. */
        bool try_read = false;

        for (;;) {
                struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
                ssize_t n;
                int r;

                r = wire_in_cut(rx, CLIENT_MAX_PAYLOAD);
                if (r < 0) {
                        rx_cut_detail(rx, r, detail, size);
                        return -1;
                }
                if (r > 0)
                        return rx_decode(c, ret, detail, size) < 0 ? -1 : 1;
                if (!may_read)
                        return 0;

                if (!try_read) {
                        r = poll(&pfd, 1, poll_timeout(deadline));
                        if (r < 0 && errno == EINTR)
                                continue;
                        if (r < 0) {
                                (void)snprintf(detail, size, "kvdistd connection failed (poll: %s)",
                                               strerror(errno));
                                return -1;
                        }
                        if (r == 0)
                                return 0;
                }

                /* never blocks: after poll() there is data, and a try must not wait */
                n = wire_in_recv(rx, c->fd, MSG_DONTWAIT, FRAME_MAX_FDS, &try_read);
                if (n == -EAGAIN) {
                        try_read = false;
                        continue;
                }
                if (n < 0) {
                        rx_recv_detail(rx, n, detail, size);
                        return -1;
                }
        }
}

static Pending *conn_find_pending(kvd_client *c, uint64_t request_id)
{
        Pending *p;

        CLIST_FOREACH (p, &c->pending, link)
                if (p->request_id == request_id)
                        return p;
        return NULL;
}

/* Files @f under its request id, or drops it. Called by the reader with c->lock held. */
static void conn_dispatch_locked(kvd_client *c, RxFrame *f)
{
        Pending *p;

        if (!f->msg)
                goto drop;
        if (f->farewell) {
                const Kvdist__V1__Status *s = (const Kvdist__V1__Status *)f->msg;
                int code = s->code < 0 ? s->code : KVD_E_DAEMON_UNAVAILABLE;

                conn_kill_locked(c, code,
                                 s->detail && s->detail[0] ? s->detail : kvd_strerror(code));
                goto drop;
        }
        p = conn_find_pending(c, f->h.request_id);
        if (!p)
                goto drop;
        if (p->type != f->h.type) {
                char detail[ERROR_MSG_MAX];

                (void)snprintf(detail, sizeof(detail),
                               "kvdistd answered the %s request %llu with a %s reply",
                               conn_type_name(p->type), (unsigned long long)p->request_id,
                               conn_type_name(f->h.type));
                conn_kill_locked(c, KVD_E_DAEMON_UNAVAILABLE, detail);
                goto drop;
        }

        clist_unlink(&p->link);
        p->done = true;
        p->is_error = f->is_error;
        p->reply = TAKE_PTR(f->msg);
        memcpy(p->fds, f->fds, sizeof(p->fds));
        p->n_fds = f->n_fds;
        f->n_fds = 0;
        pending_wake(p);
        return;

drop:
        rx_frame_clear(f);
}

static void cond_wait_until(kvd_client *c, usec_t deadline)
{
        struct timespec ts;

        if (deadline == USEC_INFINITY) {
                pthread_cond_wait(&c->cond, &c->lock);
                return;
        }
        ts.tv_sec = (time_t)(deadline / USEC_PER_SEC);
        ts.tv_nsec = (long)(deadline % USEC_PER_SEC * NSEC_PER_USEC);
        (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
}

/*
 * With c->lock held and no reader: reads one frame as the reader until @deadline, files it and
 * every whole frame read ahead with it, or marks the connection dead, and wakes the waiters.
 * Returns conn_read()'s result for the first frame, or -1 when the connection died.
 */
static int conn_read_one_locked(kvd_client *c, usec_t deadline)
{
        char detail[ERROR_MSG_MAX] = "";
        RxFrame f = {};
        int k, first;

        c->reading = true;
        pthread_mutex_unlock(&c->lock);
        k = first = conn_read(c, deadline, true, &f, detail, sizeof(detail));
        pthread_mutex_lock(&c->lock);

        /*
         * Whole frames read ahead with this one are filed too: the socket no longer says they
         * are there, so a waiter polling it (kvd_task_fd()) would never learn of them. Not past
         * the answer to ClientFinalize: the cluster is gone by then, its caller closes the
         * connection next, and a task still waiting fails with DAEMON_UNAVAILABLE, as it did
         * when frames were read one at a time.
         */
        while (k > 0) {
                bool finalized = f.h.type == KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE &&
                                 (f.h.flags & FRAME_FLAG_REPLY);

                conn_dispatch_locked(c, &f);
                if (c->dead || finalized)
                        break;
                pthread_mutex_unlock(&c->lock);
                k = conn_read(c, deadline, false, &f, detail, sizeof(detail));
                pthread_mutex_lock(&c->lock);
        }
        c->reading = false;

        if (k < 0)
                conn_kill_locked(c, KVD_E_DAEMON_UNAVAILABLE, detail);
        /* Someone else's reply may have arrived, or they may read now. */
        pthread_cond_broadcast(&c->cond);
        return k < 0 ? k : first;
}

/*
 * After the daemon closed the connection under a send: reads what it wrote before, when no other
 * thread is the reader (that one reads it instead), so a farewell it sent marks the connection
 * dead with the daemon's status and detail.
 */
static void conn_read_farewell(kvd_client *c)
{
        pthread_mutex_lock(&c->lock);
        /* Everything is in the socket already: nothing is waited for. */
        while (!c->dead && !c->reading && conn_read_one_locked(c, now_usec(CLOCK_MONOTONIC)) > 0)
                ;
        pthread_mutex_unlock(&c->lock);
}

int conn_wait(kvd_client *c, Pending *p, usec_t deadline, Error *err)
{
        bool drained = false;
        int r;

        pthread_mutex_lock(&c->lock);
        for (;;) {
                if (p->done) {
                        r = KVD_OK;
                        break;
                }
                if (c->dead) {
                        r = error_set(err, c->dead_code, "%s", c->dead_detail);
                        break;
                }
                /*
                 * Past the deadline (a zero timeout is one from the start), what has arrived is
                 * still read first: a reply waiting in the socket is an answer, not a timeout.
                 */
                if (deadline != USEC_INFINITY && now_usec(CLOCK_MONOTONIC) >= deadline &&
                    (drained || c->reading)) {
                        r = KVD_E_TIMEOUT;
                        break;
                }

                if (!c->reading) {
                        if (conn_read_one_locked(c, deadline) == 0)
                                drained = true;
                        continue;
                }

                cond_wait_until(c, deadline);
        }
        pthread_mutex_unlock(&c->lock);

        return r;
}

/* Status is field 1 of every reply. */
static const Kvdist__V1__Status *reply_status(const ProtobufCMessage *m)
{
        const ProtobufCFieldDescriptor *f;

        f = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
        if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE ||
            f->descriptor != &kvdist__v1__status__descriptor)
                return NULL;
        return *(Kvdist__V1__Status *const *)(const void *)((const char *)m + f->offset);
}

int pending_status(const Pending *p, Error *err)
{
        const Kvdist__V1__Status *s;
        int code;

        s = p->is_error ? (const Kvdist__V1__Status *)p->reply : reply_status(p->reply);
        if (!s || s->code == KVD_OK) {
                if (!p->is_error)
                        return KVD_OK;
                return error_set(err, KVD_E_FAILED,
                                 "kvdistd answered the %s request with an error but no status",
                                 conn_type_name(p->type));
        }

        /* A code from a newer daemon is passed on; a positive one is not a status at all. */
        code = s->code > 0 ? KVD_E_FAILED : s->code;
        if (s->detail && s->detail[0])
                return error_set(err, code, "%s", s->detail);
        return error_set(err, code, "kvdistd answered the %s request with %s",
                         conn_type_name(p->type), kvd_strerror(code));
}

int conn_call(kvd_client *c, uint16_t type, const ProtobufCMessage *req, const int *fds,
              size_t n_fds, uint32_t timeout_ms, ProtobufCMessage **ret_reply, int *ret_fd,
              Error *err)
{
        usec_t deadline;
        Pending p;
        int r;

        pending_init(&p);
        deadline = now_usec(CLOCK_MONOTONIC) + (usec_t)timeout_ms * USEC_PER_MSEC;

        r = conn_send(c, type, req, fds, n_fds, &p, err);
        if (r < 0)
                return r;

        r = conn_wait(c, &p, deadline, err);
        if (r == KVD_E_TIMEOUT)
                r = error_set(err, KVD_E_TIMEOUT,
                              "kvdistd did not answer the %s request (id %llu) within %u ms",
                              conn_type_name(type), (unsigned long long)p.request_id, timeout_ms);
        if (r == KVD_OK) {
                r = pending_status(&p, err);
                if (!p.is_error) {
                        if (ret_reply)
                                *ret_reply = TAKE_PTR(p.reply);
                        if (ret_fd)
                                *ret_fd = p.n_fds > 0 ? TAKE_FD(p.fds[0]) : -1;
                }
        }

        pending_deinit(c, &p);
        return r;
}
