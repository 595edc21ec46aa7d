/* SPDX-License-Identifier: MIT */
/*
 * Peer RDMA endpoints: RC queue pairs to a peer's device, connected over the peer connection.
 * The endpoints are the RDMA transport's channels; this is the peer protocol that connects them.
 */
#pragma once

#include <stdbool.h>

#include "daemon/transport/transport.h"

typedef struct Peer Peer;
typedef struct PeerRdmaEp PeerRdmaEp;
typedef struct PeerRdmaWaiter PeerRdmaWaiter;

/* @ep is connected (@status 0), or could not be (@status < 0, @reason says why). */
typedef void (*peer_rdma_ready_fn)(TransportChannel *ep, int status, const char *reason,
                                   void *userdata);

/*
 * Our endpoint from our device @device to the peer's device @remote, created and connected if
 * needed. @fn runs
 * once it is connected (at once, from inside this call, when it is) or failed; *@ret_waiter (may
 * be NULL) can cancel the wait. Returns 0 or a negative errno (@fn is not called then).
 */
int peer_rdma_get(Peer *p, const char *device, const TransportDeviceInfo *remote,
                  peer_rdma_ready_fn fn, void *userdata, PeerRdmaWaiter **ret_waiter);

/* Forgets a waiter; its callback will not run. Accepts NULL. */
void peer_rdma_waiter_cancel(PeerRdmaWaiter *w);

/*
 * The endpoint @ep of READY @p with every slot connected: the slots that were flushed (after a
 * timeout or an error) are connected again first. @fn runs as with peer_rdma_get(). Returns 0,
 * -ENOENT when @ep is not one of @p's, -ENOTCONN when @p is not READY, or -errno.
 */
int peer_rdma_when_ready(Peer *p, TransportChannel *ep, peer_rdma_ready_fn fn, void *userdata,
                         PeerRdmaWaiter **ret_waiter);

/* Connects again the slots of @ep that were flushed (after a timeout or an error). */
void peer_rdma_repair(Peer *p, TransportChannel *ep);

/* Calls @fn with every endpoint of @p (for status). */
void peer_rdma_foreach(Peer *p, void (*fn)(TransportChannel *ep, void *userdata), void *userdata);

/* @p is being lost: its endpoints are flushed (failing their jobs) and freed. */
void peer_rdma_on_lost(Peer *p);
