/* SPDX-License-Identifier: MIT */
/*
 * Listener: the daemon's Unix socket. Creates it (mode from config, parent directory made if
 * missing), accepts connections, reads the peer's credentials with SO_PEERCRED and applies the
 * uid/gid allow-list before a connection exists.
 */
#pragma once

typedef struct Daemon Daemon;
typedef struct Listener Listener;

/*
 * Serves the client socket the service manager passed (socket activation: the one named
 * "kvdist", or the only one; checked to be a listening Unix stream socket), else binds and
 * listens on the configured path, replacing a stale socket file. Logs what failed.
 */
int listener_new(Daemon *d, Listener **ret);

/*
 * Stops accepting and unlinks the socket file (not one the service manager made). Accepts NULL;
 * returns NULL.
 */
Listener *listener_free(Listener *l);

/* Stops accepting new connections (for an orderly stop) without closing the socket. */
void listener_pause(Listener *l);

/* The path clients connect to (the passed socket's own under socket activation). */
const char *listener_path(const Listener *l);
