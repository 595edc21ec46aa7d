/* SPDX-License-Identifier: MIT */
/*
 * Transfer codec: the peer messages of transfer/ as plain structs, the ops that send them, and
 * the codec (transfer-codec.c, the only file of transfer/ that knows the wire) that fills those
 * ops and turns what peers send into calls on served.c and transfer-remote.c. A unit test fills
 * TransferRoot.peer_ops with a recorder of its own instead.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "daemon/memory/cache.h"
#include "daemon/transfer/remote-plan.h"
#include "daemon/transport/transport.h"

typedef struct Peer Peer;
typedef struct PeerCall PeerCall;
typedef struct Transfer Transfer;
typedef struct TransferRoot TransferRoot;
typedef struct TransportChannel TransportChannel;

/* A peer's request to move one of our caches (MSG_PEER_TRANSFER), or ours to a peer. */
typedef struct TransferPeerRequest {
        uint64_t job_id;            /* pull: the initiator's receive job; push: its transfer id */
        uint64_t link_id;           /* the receiver's inbound link; 0 with @linked_link_id */
        uint64_t initiator_link_id; /* the initiator's id of the link */
        uint64_t linked_link_id;    /* the initiator was linked to: its inbound link's id, the
                                     * one the receiver's outbound link knows (two-way links) */
        CacheKey key;               /* the receiver's cache */
        Error key_err;              /* code != 0: the key did not decode, and why */
        const RemoteDesc *local;    /* the initiator's cache; NULL when the message had none */
        TransferArgs args;          /* borrowed from the message */
        bool src_layers_set;        /* the message named the layer ranges */
        bool dst_layers_set;
        uint32_t timeout_ms;
        const uint8_t *notify;
        size_t notify_len;
        bool remote_access; /* one-sided: the initiator reads or writes the receiver's memory
                             * itself, through the descriptors of the answer */
} TransferPeerRequest;

/* What the receiver answers a TransferPeerRequest with (the arrays are borrowed). */
typedef struct TransferPeerAnswer {
        const RemoteDesc *remote; /* the receiver's cache as resolved now; NULL when missing */
        uint32_t remote_index;    /* the batch slot the key named */
        uint64_t total_bytes;
        uint64_t segments;
        uint64_t job_id; /* push: send the bytes as this data job */
        /*
         * remote_access: per tensor of the resolved cache, its descriptor (opaque: only the
         * transport unpacks it). From a peer, NULL with @n_descs set when it sent more than
         * KVD_MAX_TENSORS (no cache has that many), and a descriptor too long to be one comes
         * empty (no transport unpacks that).
         */
        const TransportDesc *descs;
        size_t n_descs;
} TransferPeerAnswer;

/*
 * How transfer/ speaks to peers. Every op returns 0 or a negative errno (not READY: -ENOTCONN;
 * too big for a frame: -EMSGSIZE).
 */
typedef struct TransferPeerOps {
        /* Asks @p for @req on behalf of @x; transfer_remote_on_answer() gets the answer. */
        int (*request)(Peer *p, const TransferPeerRequest *req, Transfer *x, PeerCall **ret_call);
        /* @call's transfer is gone: transfer_remote_on_orphan_answer() gets its answer, with
         * @flags (TRANSFER_ORPHAN_*). */
        void (*orphan)(PeerCall *call, unsigned flags);
        /* Notices: we cancel our transfer @transfer_id; our data of it stopped with @status
         * (MSG_PEER_REMOTE_DONE); the bytes of the peer's push @transfer_id landed with @status. */
        int (*cancel)(Peer *p, uint64_t transfer_id);
        int (*data_done)(Peer *p, uint64_t transfer_id, int status);
        int (*push_done)(Peer *p, uint64_t transfer_id, int status);
        /* Answers the peer's request @request_id with @answer, or refuses it with @err. */
        int (*answer)(Peer *p, uint64_t request_id, const TransferPeerAnswer *answer);
        int (*refuse)(Peer *p, uint64_t request_id, const Error *err);
        /* Connects again the paths of @ch, a one-sided channel to @p, that a timeout or an error
         * flushed (peer_channel_repair()). */
        void (*channel_repair)(Peer *p, TransportChannel *ch);
} TransferPeerOps;

/* What an orphaned request needs to know of its transfer. */
enum {
        TRANSFER_ORPHAN_PULL = 1u << 0,
        TRANSFER_ORPHAN_REMOTE_ACCESS = 1u << 1, /* moved nothing through the streams */
};

/*
 * Points @root's peer ops at the wire and registers the handlers of transfer/'s peer messages
 * with the link root. Once, at start (transfer_listen() calls it).
 */
void transfer_codec_listen(TransferRoot *root);

/* What the codec calls with what peers send (transfer-remote.c, served.c). */

/* The peer answered our request for @x: @answer on STATUS_OK, else @status and @err say why. */
void transfer_remote_on_answer(Transfer *x, Peer *p, int status, const Error *err,
                               const TransferPeerAnswer *answer);

/* The answer to a request whose transfer gave up before it came (@flags: TRANSFER_ORPHAN_*). */
void transfer_remote_on_orphan_answer(Peer *p, int status, const TransferPeerAnswer *answer,
                                      unsigned flags);

/* @p says the bytes of our push @transfer_id landed there with @status (@detail: why not). */
void transfer_remote_handle_done(TransferRoot *root, Peer *p, uint64_t transfer_id, int status,
                                 const char *detail);

/* @p asks request @request_id (not 0) of us: one of its transfers of our caches. */
void served_handle_transfer(TransferRoot *root, Peer *p, uint64_t request_id,
                            const TransferPeerRequest *req);

/* @p cancels its transfer @transfer_id. */
void served_handle_transfer_cancel(TransferRoot *root, Peer *p, uint64_t transfer_id);

/* @p says its one-sided transfer (or its pull by CacheKey) @transfer_id ended with @status. */
void served_handle_remote_done(TransferRoot *root, Peer *p, uint64_t transfer_id, int status);
