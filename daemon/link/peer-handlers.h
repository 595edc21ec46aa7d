/* SPDX-License-Identifier: MIT */
/*
 * What a READY peer may ask of us, and what the rest of the daemon does when a peer is lost. The
 * handlers are spread over the modules that own the objects (links in peer-link.c, served
 * transfers in served.c); peer.c decodes the frame and calls them. A handler answers a request
 * with peer_reply() / peer_reply_error() when @request_id is not 0 (a notice gets no answer).
 * Whatever a peer sends is checked as input from an untrusted party.
 */
#pragma once

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

typedef struct Peer Peer;

typedef void (*peer_handler_fn)(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/* peer-link.c */
void peer_handle_link(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_unlink(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_cluster_gone(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/* served.c */
void peer_handle_transfer(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_transfer_cancel(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_rdma_done(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/* peer-rdma.c */
void peer_handle_rdma_connect(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/* transfer-remote.c */
void peer_handle_transfer_done(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/* domain-peer.c, domain-lane.c */
void peer_handle_domain_join(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_domain_linked(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_domain_ready(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_domain_leave(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_domain_xfer(Peer *p, uint64_t request_id, const ProtobufCMessage *msg);

/*
 * @p is being lost with @status: links over it go down, inbound links from it go away with the
 * transfers they serve. Called once, before the peer's connections close.
 */
void peer_link_on_lost(Peer *p, int status);
void served_on_peer_lost(Peer *p);
void domain_on_peer_lost(Peer *p, int status);
