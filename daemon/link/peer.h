/* SPDX-License-Identifier: MIT */
/*
 * Peer: another kvdistd, reached over one TCP control connection (the same framing as the
 * client socket) plus the TCP data connections of its TCP channel. A daemon dials a peer when one
 * of its clusters links to a cluster there, and accepts peers on its listen_ip_info and on those of
 * its server clusters (one listener each, see cluster_set_listen()). Every cluster pair
 * that links between the two daemons shares the one connection.
 *
 * Life of a connection: CONNECTING (dialer) -> HANDSHAKE (Hello both ways, then the mutual HMAC
 * proofs of peer-auth.h when a cluster key is configured) -> DATA (the dialer opens the agreed
 * number of data connections, the listener attaches them) -> READY (links and transfers use it)
 * -> CLOSED. Heartbeats run both ways while READY; a peer that sends nothing for
 * heartbeat_timeout_ms is lost. Losing a peer takes down every link and transfer over it.
 *
 * Requests to the peer are calls: a reply callback runs once, with the reply or with a failure
 * (the peer was lost). Requests with id 0 are notices and get no reply.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/clist.h"
#include "common/error.h"
#include "daemon/link/peer-auth.h"
#include "common/sockaddr-util.h"
#include "daemon/transport/transport.h"
#include "common/time-util.h"
#include "proto/wire.h"

struct event;
typedef struct DecodeJob DecodeJob;
typedef struct LinkRoot LinkRoot;
typedef struct Peer Peer;
typedef struct PeerCall PeerCall;
typedef struct PeerWaiter PeerWaiter;
typedef struct PeerListener PeerListener;

#define PEER_DATA_TOKEN_SIZE 32

typedef enum PeerState {
        PEER_CONNECTING, /* dialer: connect() in progress */
        PEER_HANDSHAKE,  /* Hello and proofs */
        PEER_DATA,       /* authenticated; data connections being attached */
        PEER_READY,
        PEER_CLOSED, /* lost or refused; freed once the loop is back */
        _PEER_STATE_MAX,
        _PEER_STATE_INVALID = -22,
} PeerState;

struct Peer {
        LinkRoot *root;
        uint64_t id; /* local, for logs and status */
        PeerState state;
        bool dialed;                    /* we opened the connection */
        bool retiring;                  /* a second connection to the same daemon won */
        char address[SOCKADDR_STR_MAX]; /* dialed: where we dialed; accepted: the peer's
                                         * listen_ip_info, or "" when it does not listen */
        char remote[SOCKADDR_STR_MAX];  /* the connection's other end */
        struct sockaddr_storage sa;     /* dialed: the address, for the data connections */
        socklen_t sa_len;
        uint64_t node_id; /* the peer's, once its Hello came */
        char identity[96];
        bool authenticated; /* proved the cluster key both ways */
        PeerAuth auth;

        int fd;
        struct event *ev_read;
        struct event *ev_write;
        struct event *timer;   /* handshake deadline, then heartbeats */
        struct event *ev_lose; /* runs a loss found while sending */
        Error loss;            /* that loss, while ev_lose is pending */
        WireIn in;
        DecodeJob *decoding;    /* its request decoded off the loop: nothing more is read
                                 * until it was handled */
        uint16_t decoding_type; /* that request's type and id */
        uint64_t decoding_request_id;
        WireOut out;
        uint32_t max_frame;

        /* data connections */
        unsigned offer_streams; /* what the peer's Hello asked for */
        bool offer_crc;
        uint32_t offer_chunk;
        uint8_t data_token[PEER_DATA_TOKEN_SIZE];
        unsigned n_streams; /* agreed */
        bool crc;
        uint32_t chunk_size;
        int data_fds[TRANSPORT_MAX_CONNS];
        unsigned n_data_fds;                        /* attached (listener) or connected (dialer) */
        struct event *data_ev[TRANSPORT_MAX_CONNS]; /* dialer: connect in progress */
        TransportChannel *data; /* the TCP transport's channel on them, once READY */

        usec_t created_usec;
        usec_t last_rx_usec;
        uint64_t heartbeat_seq;
        usec_t heartbeat_sent_usec;
        uint64_t rtt_usec; /* of the last heartbeat */
        uint64_t next_call_id;
        CList calls;   /* PeerCall.link: our requests without a reply yet */
        CList waiters; /* PeerWaiter.link: waiting for READY */

        CList links; /* Link.link_peer: our clusters' links to its clusters */
        unsigned n_links;
        CList inlinks; /* InLink.link_peer: its clusters' links to ours */
        unsigned n_inlinks;
        CList transfers; /* Transfer.link_peer: ours, waiting for its reply */
        CList served;    /* Served.link_peer: its transfers we serve */
        CList channels;  /* PeerChannel.link_peer: channels a transport opened to it */
        unsigned n_served;
        CList link_daemon;
};

/*
 * A reply to a call, or its failure: @reply is the decoded reply message on success (borrowed
 * for the callback), NULL when @status (a STATUS_* code, with @err) says why there is none.
 */
typedef void (*peer_reply_fn)(Peer *p, int status, const Error *err, const ProtobufCMessage *reply,
                              void *userdata);

/* The peer reached READY (@status STATUS_OK) or was lost first (@status and @err say why). */
typedef void (*peer_ready_fn)(Peer *p, int status, const Error *err, void *userdata);

/*
 * Opens the daemon's peer listener on the configured listen_ip_info (none when it is not set);
 * logs what failed.
 */
int peer_listener_new(LinkRoot *root, PeerListener **ret);

/*
 * Opens a peer listener on the address of every device of the device map that has one
 * (devices[].address, HCCL's device_ip), unless the peer listener serves it already: a peer that
 * dials a device's address reaches this daemon. Needs the peer listener (listen_ip_info) when
 * any device has an address. Logs what failed and why; -EINVAL, -EADDRINUSE etc.
 */
int peer_device_listeners_new(LinkRoot *root);

/*
 * Opens a peer listener on @address ("ip:port", "[v6]:port"; port 0: any free port): peers
 * connect there exactly as to the daemon's own listener (Hello, the cluster key, data
 * connections). A cluster's listen_ip_info gets one. Returns 0, -EINVAL for an address that does
 * not parse, or the negative errno of socket(), bind() or listen(); logs nothing.
 */
int peer_listener_open(LinkRoot *root, const char *address, PeerListener **ret);

/*
 * Whether connections to @address reach @l already: the same port (not 0) and the same address,
 * or @l bound to every address. False for NULL @l and for an address that does not parse.
 */
bool peer_listener_covers(const PeerListener *l, const char *address);

/*
 * Takes @fd, a connected non-blocking stream socket a peer daemon opened to us (from @sa of @len
 * bytes; NULL when unknown), and waits for its first frame under the handshake deadline: the
 * listener's accept path, also used by tests that hand the daemon one end of a socketpair.
 * The fd is the peer's from here on (closed on failure). Returns 0 or -ENOMEM.
 */
int peer_accept(LinkRoot *root, int fd, const struct sockaddr *sa, socklen_t len);

/* Closes the listener. Accepts NULL; returns NULL. */
PeerListener *peer_listener_free(PeerListener *l);

/* "ip:port" the listener is bound to (the real port when the config said port 0). */
const char *peer_listener_address(const PeerListener *l);

/*
 * The peer at @address ("ip:port"): one that is connected or connecting there (dialed there, or
 * advertising it as its listen address), else a new connection dialed now. PARAM_INVALID for an
 * address that does not parse, LIMIT_EXCEEDED when limits.max_peers are connected, LINK_FAILED
 * when the connection cannot even start; @err says which.
 */
int peer_get(LinkRoot *root, const char *address, Peer **ret, Error *err);

/*
 * Calls @fn once @p is READY (at once, from inside this call, if it is) or lost. *@ret_waiter (may
 * be NULL) can cancel the wait. -ENOMEM.
 */
int peer_when_ready(Peer *p, peer_ready_fn fn, void *userdata, PeerWaiter **ret_waiter);

/* Forgets a waiter; its callback will not run. Accepts NULL. */
void peer_waiter_cancel(PeerWaiter *w);

/*
 * Sends @msg as a request of @type and calls @fn with the reply (or the loss of @p). *@ret_call
 * (may be NULL) can detach the callback. Returns 0 or a negative errno (not READY: -ENOTCONN;
 * the message does not fit a frame: -EMSGSIZE); @fn is not called on failure.
 */
int peer_call(Peer *p, uint16_t type, const ProtobufCMessage *msg, peer_reply_fn fn, void *userdata,
              PeerCall **ret_call);

/* Replaces a call's callback (e.g. when its owner goes away before the reply). */
void peer_call_redirect(PeerCall *call, peer_reply_fn fn, void *userdata);

/* The userdata a call's callback gets. */
void *peer_call_userdata(const PeerCall *call);

/* Sends @msg as a notice of @type (request id 0: no reply). Returns 0 or a negative errno. */
int peer_notice(Peer *p, uint16_t type, const ProtobufCMessage *msg);

/* Answers request @request_id of @type with @reply (a message of the type's reply descriptor). */
int peer_reply(Peer *p, uint16_t type, uint64_t request_id, const ProtobufCMessage *reply);

/* Answers request @request_id of @type with a bare Status (@code < 0, @err's message). */
int peer_reply_error(Peer *p, uint16_t type, uint64_t request_id, int code, const Error *err);

/*
 * Declares @p lost with @status (STATUS_PEER_LOST, ...) and a reason: every link over it goes
 * down, every transfer and call over it fails, the connections close. Idempotent; @p is freed
 * once the loop is back.
 */
void peer_lose(Peer *p, int status, const char *fmt, ...) _printf_(3, 4);

/* Tears down every peer and every peer listener of @root, the clusters' too (daemon shutdown). */
void peer_close_all(LinkRoot *root);

/* Frees every closed peer now, data planes first (daemon_free(), after the loop ended). */
void peer_free_all(LinkRoot *root);

/* "ready", "handshake", ... */
const char *peer_state_to_string(PeerState s);

/* A name for logs: "peer 3 (10.0.0.2:7000)". Returns @buf. */
const char *peer_name(const Peer *p, char *buf, size_t size);

/* Loads the cluster key named by the options into @root (NULL/0 when none). Logs what is wrong. */
int peer_load_cluster_key(LinkRoot *root);
