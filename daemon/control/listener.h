/* SPDX-License-Identifier: MIT */
/*
 * Listener: the daemon's Unix socket. Creates it (mode from config, parent directory made if
 * missing, a /tmp/kvdist-UID folder made 0700 and checked), accepts connections, reads the
 * peer's credentials (SO_PEERCRED, SO_PEERGROUPS) and applies the uid/gid allow-list and the
 * connection limit before a connection exists; a refused peer gets an error frame saying why.
 */
#pragma once

typedef struct ControlRoot ControlRoot;
typedef struct Listener Listener;

/*
 * Serves @activated_fd, the listening Unix stream socket the service manager passed (socket
 * activation; the listener owns it), or when it is negative binds and listens on @root's socket
 * path, replacing a stale socket file (one nobody answers on) and nothing else. Logs what
 * failed.
 */
int listener_new(ControlRoot *root, int activated_fd, Listener **ret);

/*
 * Stops accepting and unlinks the socket file (not one the service manager made). Accepts NULL;
 * returns NULL.
 */
Listener *listener_free(Listener *l);

/* Stops accepting new connections (for an orderly stop) without closing the socket. */
void listener_pause(Listener *l);

/* The path clients connect to (the passed socket's own under socket activation). */
const char *listener_path(const Listener *l);
