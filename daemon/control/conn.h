/* SPDX-License-Identifier: MIT */
/*
 * Conn: one client connection on the Unix socket. It reads frames (header first, checked
 * against the limits before the payload is allocated; fds ride with the header and must be
 * regular files, i.e. memfds), hands each to the dispatch table and queues replies. The first
 * frame must be Hello. A malformed frame, a frame or Hello that does not complete within
 * CONN_FRAME_TIMEOUT_SEC, a connection that holds no cluster and sends nothing for
 * limits.attach_timeout_ms, or a broken quota closes this connection only. Each connection is
 * charged to its peer's uid (limits.per_user.max_connections).
 *
 * A connection is freed in exactly one place: the close event that conn_close_later() makes
 * active. Whatever notices that it must go (a read or write error, a handler, a reply that
 * cannot be queued) calls conn_close_later(), so no callback, handler or request reply ever runs
 * on a freed Conn; until the close event runs, a closing connection reads nothing, writes only
 * when flushed and drops replies.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "common/clist.h"
#include "common/completion.h"
#include "common/error.h"
#include "proto/frame.h"
#include "proto/wire.h"
#include "daemon/memory/user.h"

/* From a frame's first byte to its last, and from connecting to the end of Hello. */
#define CONN_FRAME_TIMEOUT_SEC 10

struct event;
typedef struct Cluster Cluster;
typedef struct Conn Conn;
typedef struct ControlRoot ControlRoot;
typedef struct DecodeJob DecodeJob;
typedef struct Request Request;

typedef enum ConnState {
        CONN_HELLO,   /* waiting for Hello */
        CONN_READY,   /* Hello done; read-only requests allowed, ClientInit makes a cluster */
        CONN_CLUSTER, /* a cluster is attached */
        CONN_CLOSED,  /* closing: freed by the close event, never leaves this state */
        _CONN_STATE_MAX,
        _CONN_STATE_INVALID = -22,
} ConnState;

struct Conn {
        ControlRoot *root;
        uint64_t id;
        int fd;
        struct event *ev_read;
        struct event *ev_write;
        struct event *ev_close;    /* active once closing: the only place a Conn is freed */
        struct event *ev_deadline; /* a partial frame, or Hello, took too long */
        struct event *ev_idle;     /* no cluster and no request for limits.attach_timeout_ms */
        struct ucred cred;
        User *user;    /* its uid's account, charged this connection */
        bool reserved; /* came in on limits.reserved_connections: read-only, never a cluster */
        ConnState state;
        Cluster *cluster; /* CONN_CLUSTER */

        WireIn in;            /* the frame being read */
        size_t n_fds_checked; /* fds of @in whose kind was checked */
        WireOut out;          /* replies not yet written */
        CList requests;       /* Request.link_conn: requests still waiting for their reply */
        bool decoding;        /* a request's payload is decoded off the loop: nothing is read */
        unsigned n_requests;
        CList link_root; /* ControlRoot.conns */
};

/*
 * A request being served. Synchronous handlers reply before returning; a handler that returns
 * HANDLER_PENDING keeps the request and answers later with conn_request_reply() or
 * conn_request_fail(), or, below control/, through @done. If the connection goes first, @done's
 * cancel callback runs and the request is freed.
 */
struct Request {
        Conn *conn; /* NULL once the connection is gone */
        uint16_t type;
        uint64_t id;
        ProtobufCMessage *msg; /* the decoded request */
        DecodeJob *decoding;   /* its payload is being decoded off the loop (decoder.h) */
        /* what decoding off the loop learnt of @msg's long lists (a handler may skip a pass) */
        FrameListFacts facts[FRAME_LIST_FACTS_MAX];
        size_t n_facts;
        int fds[FRAME_MAX_FDS]; /* taken by the handler (set to -1) or closed with the request */
        size_t n_fds;
        Completion done; /* how a lower layer answers (conn_request_reply() and the rest) */
        CList link_conn;
};

/*
 * Takes ownership of an accepted socket @fd and starts reading. @user (a reference the
 * connection takes) was charged one connection for it, which the connection releases when it
 * goes; @reserved: it came in on the read-only reserve.
 */
int conn_new(ControlRoot *root, int fd, const struct ucred *cred, User *user, bool reserved,
             Conn **ret);

/*
 * Tells a client on the accepted socket @fd, which gets no Conn, why it is refused: an error
 * frame about the connection (FRAME_CONNECTION_REQUEST_ID) with @code and @detail, written without
 * blocking and counted in @root's errors. The caller closes @fd.
 */
void conn_refuse(ControlRoot *root, int fd, int code, const char *detail);

/*
 * The request whose payload was being decoded off the loop has been handled: @c reads again,
 * from the frames it read ahead first. Nothing for a closing connection.
 */
void conn_resume_reading(Conn *c);

/*
 * Marks the connection closing: it stops reading and writing, drops later replies, and is freed
 * (its cluster destroyed, pending requests cancelled) by its close event once the event loop is
 * back. Safe from anywhere, any number of times.
 */
void conn_close_later(Conn *c);

/*
 * Frees every connection of @root, flushing what it can first. Only for the daemon's teardown,
 * once the event loop stopped: no callback of a connection can be running.
 */
void conn_free_all(ControlRoot *root);

/* Writes what every connection of @root has queued, as far as the sockets take it now (a
 * stopping daemon's last word). */
void conn_flush_all(ControlRoot *root);

/*
 * Moves @c to @state (HELLO -> READY -> CLUSTER <-> READY; CLOSED through conn_close_later()
 * only). A closing connection stays closing: the call is then ignored.
 */
void conn_set_state(Conn *c, ConnState state);

/* Writes as much queued output as the socket takes without blocking (a last word before a
 * close, or when stopping); arms nothing. */
void conn_flush(Conn *c);

/*
 * Sends @reply (a message of the type's reply descriptor) for @req, with @fd attached (or -1;
 * the fd stays the caller's) and frees the request. Returns 0 or negative errno (the reply could
 * not be queued: the connection is closed).
 */
int conn_request_reply(Request *req, const ProtobufCMessage *reply, int fd);

/* Answers @req with its type's reply message carrying only an OK status; frees the request. */
int conn_request_reply_ok(Request *req);

/* The same with @fd (not -1) attached; the fd stays the caller's. */
int conn_request_reply_ok_fd(Request *req, int fd);

/* Answers @req with a bare Status carrying @code (< 0) and @err's message; frees the request. */
int conn_request_fail(Request *req, int code, const Error *err);

/*
 * A request for the frame @c has just read (its type and id), on @c's list of requests.
 * NULL when out of memory.
 */
Request *conn_request_new(Conn *c);

/* Frees a request without answering. Accepts NULL; returns NULL. */
Request *conn_request_free(Request *req);

/* Takes fd number @i of the request (the request no longer closes it); -1 when absent. */
int conn_request_take_fd(Request *req, size_t i);
