/* SPDX-License-Identifier: MIT */
/*
 * Peer channels: the channels a transport opens to a peer's device with an exchange of its own
 * (RDMA: RC queue pairs), connected path by path over the peer connection. The transport packs
 * and unpacks what the two ends tell each other; this is the peer protocol that carries it.
 */
#pragma once

#include <stdbool.h>

#include "daemon/transport/transport.h"

typedef struct Peer Peer;
typedef struct PeerChannel PeerChannel;
typedef struct PeerChannelWaiter PeerChannelWaiter;

/* @ch is connected (@status 0), or could not be (@status < 0, @reason says why). */
typedef void (*peer_channel_ready_fn)(TransportChannel *ch, int status, const char *reason,
                                      void *userdata);

/*
 * Our channel from our device @device to the peer's device @remote, opened and connected if
 * needed. @fn runs once it is connected (at once, from inside this call, when it is) or failed;
 * *@ret_waiter (may be NULL) can cancel the wait. Returns 0 or a negative errno (@fn is not
 * called then).
 */
int peer_channel_get(Peer *p, const char *device, const TransportDeviceInfo *remote,
                     peer_channel_ready_fn fn, void *userdata, PeerChannelWaiter **ret_waiter);

/* Forgets a waiter; its callback will not run. Accepts NULL. */
void peer_channel_waiter_cancel(PeerChannelWaiter *w);

/*
 * The channel @ch of READY @p with every path connected: the paths that were flushed (after a
 * timeout or an error) are connected again first. @fn runs as with peer_channel_get(). Returns
 * 0, -ENOENT when @ch is not one of @p's, -ENOTCONN when @p is not READY, or -errno.
 */
int peer_channel_when_ready(Peer *p, TransportChannel *ch, peer_channel_ready_fn fn, void *userdata,
                            PeerChannelWaiter **ret_waiter);

/* Connects again the paths of @ch that were flushed (after a timeout or an error). */
void peer_channel_repair(Peer *p, TransportChannel *ch);

/* Calls @fn with every channel of @p (for status). */
void peer_channel_foreach(Peer *p, void (*fn)(TransportChannel *ch, void *userdata),
                          void *userdata);

/* @p is being lost: its channels are closed (failing their jobs) and freed. */
void peer_channel_on_lost(Peer *p);
