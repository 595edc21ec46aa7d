/* SPDX-License-Identifier: MIT */
/* The peer codec of links: link/'s peer messages to and from the wire (peer-handlers.h has the
 * handlers). */
#pragma once

#include "daemon/link/link.h"

/* The daemon's LinkPeerOps: PeerLink calls, PeerUnlink and PeerClusterGone notices. */
extern const LinkPeerOps peer_link_ops;
