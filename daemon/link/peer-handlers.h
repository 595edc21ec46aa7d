/* SPDX-License-Identifier: MIT */
/*
 * What a READY peer may ask of us. peer.c decodes the frame and knows which types a READY peer
 * may send; the layers that own the objects register the handlers of those types at start
 * (link/ its own here, transfer/ and domain/ theirs), so link/ names none of theirs. A type
 * without a handler is answered as an unknown one. A handler answers a request with
 * peer_reply() / peer_reply_error() when @request_id is not 0 (a notice gets no answer).
 * Whatever a peer sends is checked as input from an untrusted party.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "proto/frame.h"

typedef struct LinkRoot LinkRoot;
typedef struct Peer Peer;

/* Handles @msg from @p; @userdata is what the handler was registered with. */
typedef void (*peer_handler_fn)(void *userdata, Peer *p, uint64_t request_id,
                                const ProtobufCMessage *msg);

/*
 * How link/ decodes a peer's long request off the loop: the daemon's decoder thread
 * (control/decoder.h), reached only through these, since link/ does not know control/; the
 * daemon fills them with decoder_submit() and decoder_forget(). No @submit: on the loop.
 */
typedef struct Decoder Decoder;
typedef struct DecodeJob DecodeJob;
typedef void (*LinkDecodedFn)(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                              const FrameListFacts *facts, size_t n_facts, void *userdata);
typedef struct LinkDecoder {
        Decoder *decoder;
        int (*submit)(Decoder *d, const ProtobufCMessageDescriptor *desc, uint8_t *payload,
                      size_t len, LinkDecodedFn done, void *userdata, DecodeJob **ret);
        void (*forget)(DecodeJob *job);
} LinkDecoder;

/* One message type a READY peer may send and what handles it. */
typedef struct PeerHandler {
        uint16_t type; /* KVDIST__V1__MSG_TYPE__MSG_PEER_* */
        peer_handler_fn fn;
} PeerHandler;

/* How many message types a READY peer may send (besides heartbeats, which peer.c answers). */
#define PEER_N_HANDLERS 13

/* The registry: the handler of each type peer.c's table lists, at the same index. */
typedef struct PeerHandlers {
        peer_handler_fn fn[PEER_N_HANDLERS];
        void *userdata[PEER_N_HANDLERS];
} PeerHandlers;

/*
 * Makes @handlers (@n of them) handle their types from @root's READY peers, each called with
 * @userdata (the registering layer's root). Once per type, at start; a type a READY peer may not
 * send, or one registered twice, is a programming error (asserted).
 */
void peer_handlers_register(LinkRoot *root, const PeerHandler *handlers, size_t n, void *userdata);

/* Registers link/'s own handlers (links, peer channels). Once, at start. */
void peer_handlers_init(LinkRoot *root);

/* peer-link.c */
void peer_handle_link(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_unlink(void *userdata, Peer *p, uint64_t request_id, const ProtobufCMessage *msg);
void peer_handle_cluster_gone(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg);

/* peer-channel.c */
void peer_handle_channel_connect(void *userdata, Peer *p, uint64_t request_id,
                                 const ProtobufCMessage *msg);
