/* SPDX-License-Identifier: MIT */
/*
 * Peer internals shared by peer.c (a connection's life, I/O, calls, heartbeats),
 * peer-handshake.c (Hello, proofs, data connections) and peer-listener.c (dialing, accepting,
 * the cluster key). Not for the rest of the daemon: peer.h is.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

#include "proto/kvdist.pb-c.h"
#include "daemon/link/peer.h"

/* A connection that has not become READY by then is given up. */
#define PEER_HANDSHAKE_TIMEOUT_MS 10000

/* "peer 3 (10.0.0.2:7000)" for a log line. */
#define PEER_NAME(p) peer_name((p), (char[SOCKADDR_STR_MAX + 32]){0}, SOCKADDR_STR_MAX + 32)

/* A new peer on connected (or connecting, @dialed) socket @fd, on the daemon's list; NULL when
 * out of memory (the caller checks its events too). */
Peer *peer_new(LinkRoot *root, int fd, bool dialed);

/* Frees @p at once: its events, buffers, fds (the data plane must be gone). */
void peer_free(Peer *p);

/* The event callback that frees a lost peer, data plane first, once the loop is back. */
void peer_on_free_later(evutil_socket_t fd, short what, void *userdata);

/* Moves @p forward to @state (asserting the transition). */
void peer_set_state(Peer *p, PeerState state);

/* (Re)arms @p's timer for @ms; -ENOMEM. */
int peer_arm_timer(Peer *p, uint64_t ms);

/* peer_call() in any state but CLOSED: the handshake uses calls too. */
int peer_call_internal(Peer *p, uint16_t type, const ProtobufCMessage *msg, peer_reply_fn fn,
                       void *userdata, PeerCall **ret_call);

/* @p is READY: heartbeats start, waiters run, duplicates to the same daemon are sorted out. */
void peer_become_ready(Peer *p);

/* peer-handshake.c */

/* Dialer: the TCP connection is up; sends Hello. */
void peer_send_hello(Peer *p);

/* Listener: the dialer's Hello, its proof (PeerAuth), a data connection's PeerDataHello. */
void peer_on_hello(Peer *p, uint64_t id, const Kvdist__V1__PeerHello *m);
void peer_on_auth(Peer *p, uint64_t id, const Kvdist__V1__PeerAuth *m);
void peer_on_data_hello(Peer *tmp, const Kvdist__V1__PeerDataHello *m);

/* Dialer: the listener attached every data connection. */
void peer_on_ready_notice(Peer *p);

/*
 * Listener: the connection closed during the handshake. A dialer that closes after our proof
 * instead of sending its own is refused, logged and counted like one whose proof fails; returns
 * true when it was (@p is lost), false when the caller loses @p as usual.
 */
bool peer_on_handshake_closed(Peer *p);
