/* SPDX-License-Identifier: MIT */
/*
 * Conn: one client connection on the Unix socket. It reads frames (header first, checked
 * against the limits before the payload is allocated; fds ride with the header), hands each to
 * the dispatch table and queues replies. The first frame must be Hello. A malformed frame or a
 * broken quota closes this connection only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "clist.h"
#include "error.h"
#include "frame.h"
#include "wire.h"

struct event;
typedef struct Cluster Cluster;
typedef struct Daemon Daemon;
typedef struct Conn Conn;
typedef struct Request Request;

typedef enum ConnState {
        CONN_HELLO,     /* waiting for Hello */
        CONN_READY,     /* Hello done; read-only requests allowed, ClientInit makes a cluster */
        CONN_CLUSTER,   /* a cluster is attached */
        CONN_CLOSED,    /* torn down; waiting for requests in flight to let go */
        _CONN_STATE_MAX,
        _CONN_STATE_INVALID = -22,
} ConnState;

struct Conn {
        Daemon *daemon;
        uint64_t id;
        int fd;
        struct event *ev_read;
        struct event *ev_write;
        struct ucred cred;
        ConnState state;
        Cluster *cluster;       /* CONN_CLUSTER */

        WireIn in;              /* the frame being read */
        WireOut out;            /* replies not yet written */
        CList requests;         /* Request.link_conn: requests still waiting for their reply */
        unsigned n_requests;
        CList link_daemon;
};

/*
 * A request being served. Synchronous handlers reply before returning; a handler that returns
 * HANDLER_PENDING keeps the request and answers later with request_reply() or request_fail().
 * If the connection goes first, the request's cancel callback runs and later replies are
 * dropped.
 */
struct Request {
        Conn *conn;             /* NULL once the connection is gone */
        uint16_t type;
        uint64_t id;
        ProtobufCMessage *msg;  /* the decoded request */
        int fds[FRAME_MAX_FDS]; /* taken by the handler (set to -1) or closed with the request */
        size_t n_fds;
        void (*cancel)(Request *req, void *userdata);
        void *userdata;
        CList link_conn;
};

/* Takes ownership of an accepted socket @fd and starts reading. */
int conn_new(Daemon *d, int fd, const struct ucred *cred, Conn **ret);

/* Closes the connection: its cluster is destroyed, pending requests cancelled. NULL ok. */
Conn *conn_free(Conn *c);

/* Marks the connection for closing once the event loop is back; safe from handlers. */
void conn_close_later(Conn *c);

/* Writes as much queued output as the socket takes without blocking (used when stopping). */
void conn_flush(Conn *c);

/*
 * Sends @reply (a message of the type's reply descriptor) for @req, with @fd attached (or -1;
 * the fd stays the caller's) and frees the request. Returns 0 or negative errno (the reply could
 * not be queued: the connection is closed).
 */
int request_reply(Request *req, const ProtobufCMessage *reply, int fd);

/* Answers @req with its type's reply message carrying only an OK status; frees the request. */
int request_reply_ok(Request *req);

/* The same with @fd (not -1) attached; the fd stays the caller's. */
int request_reply_ok_fd(Request *req, int fd);

/* Answers @req with a bare Status carrying @code (< 0) and @err's message; frees the request. */
int request_fail(Request *req, int code, const Error *err);

/*
 * A request for the frame @c has just read (its type and id), on @c's list of requests.
 * NULL when out of memory.
 */
Request *request_new(Conn *c);

/* Frees a request without answering. Accepts NULL; returns NULL. */
Request *request_free(Request *req);

/* Takes fd number @i of the request (the request no longer closes it); -1 when absent. */
int request_take_fd(Request *req, size_t i);
