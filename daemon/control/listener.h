/* SPDX-License-Identifier: MIT */
/*
 * Listener: the daemon's Unix socket. Creates it (mode from config, parent directory made if
 * missing), accepts connections, reads the peer's credentials with SO_PEERCRED and applies the
 * uid/gid allow-list before a connection exists.
 */
#pragma once

typedef struct Daemon Daemon;
typedef struct Listener Listener;

/* Binds and listens on the configured path; a stale socket file is replaced. */
int listener_new(Daemon *d, Listener **ret);

/* Stops accepting and unlinks the socket file. Accepts NULL; returns NULL. */
Listener *listener_free(Listener *l);

/* Stops accepting new connections (for an orderly stop) without closing the socket. */
void listener_pause(Listener *l);

const char *listener_path(const Listener *l);
