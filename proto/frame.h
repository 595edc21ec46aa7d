/* SPDX-License-Identifier: MIT */
/*
 * Frame codec: the fixed little-endian header that precedes every protobuf message on a kvdist
 * socket, the message-type registry, and socket I/O that carries fds (SCM_RIGHTS).
 *
 * Header layout (24 bytes, little-endian):
 *   0  u32 magic "KVD1"     4  u16 version     6  u16 type
 *   8  u16 flags           10  u16 n_fds      12  u32 payload length
 *  16  u64 request id
 * Everything here returns 0 or a negative errno and never logs.
 */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FRAME_MAGIC UINT32_C(0x3144564b) /* "KVD1" read as little-endian u32 */
#define FRAME_VERSION 1 /* the client protocol: Hello.protocol_version, and every header's */
/*
 * The peer protocol (PeerHello.protocol_version): 2 carries memory for one-sided access as
 * opaque transport descriptors; a peer speaking another version is refused.
 */
#define PEER_PROTOCOL_VERSION 2
#define FRAME_HEADER_SIZE 24
#define FRAME_MAX_FDS 4 /* fds one frame may carry */
#define FRAME_MAX_PAYLOAD_DEFAULT (16u << 20)

enum {
        FRAME_FLAG_REPLY = 1u << 0, /* answers the request with the same id and type */
        FRAME_FLAG_ERROR = 1u << 1, /* payload is a bare kvdist.v1.Status */
        _FRAME_FLAGS_KNOWN = FRAME_FLAG_REPLY | FRAME_FLAG_ERROR,
};

/*
 * Requests are numbered from 1. An error frame (REPLY | ERROR) with request id 0 and type 0
 * answers no request: it is about the connection itself and says why the daemon closes it
 * (another frame version, the allow-list, too many connections). A client fails whatever call
 * is under way with its code and detail.
 */
#define FRAME_CONNECTION_REQUEST_ID 0

typedef struct FrameHeader {
        uint32_t magic;
        uint16_t version;
        uint16_t type;
        uint16_t flags;
        uint16_t n_fds;
        uint32_t length;
        uint64_t request_id;
} FrameHeader;

/* Writes @h to @out in wire order. */
void frame_header_encode(const FrameHeader *h, uint8_t out[FRAME_HEADER_SIZE]);

/*
 * Parses and checks a header before anything is allocated for its payload:
 * -EBADMSG bad magic or unknown flags, -EPROTONOSUPPORT other version, -EMSGSIZE length above
 * @max_payload, -ETOOMANYREFS more than FRAME_MAX_FDS fds. *@ret is written only on success.
 */
int frame_header_decode(const uint8_t in[FRAME_HEADER_SIZE], uint32_t max_payload,
                        FrameHeader *ret);

/* What the registry knows of one message type. */
typedef struct FrameType {
        uint16_t type;    /* a kvdist.v1.MsgType value */
        const char *name; /* "LinkClusters" */
        const ProtobufCMessageDescriptor *request;
        const ProtobufCMessageDescriptor *reply;
} FrameType;

/* The registry entry for @type, or NULL for a type this build does not know. */
const FrameType *frame_type_lookup(uint16_t type);

/*
 * Packs header + @msg into one malloc()ed buffer: *@ret_buf, *@ret_len (header included).
 * @msg may be NULL for an empty payload. -EMSGSIZE when the packed message exceeds
 * @max_payload, -ENOMEM.
 */
int frame_pack(uint16_t type, uint16_t flags, uint64_t request_id, uint16_t n_fds,
               const ProtobufCMessage *msg, uint32_t max_payload, uint8_t **ret_buf,
               size_t *ret_len);

/*
 * Unpacks a payload with @desc. -EBADMSG when protobuf-c rejects it. The result is freed with
 * protobuf_c_message_free_unpacked(msg, NULL).
 */
int frame_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                 ProtobufCMessage **ret);

/*
 * Request payloads of at least this many bytes, a client's or a peer daemon's, are decoded on
 * kvdistd's decoder thread while the loop serves others: a 100,000-block transfer's two lists
 * are 600 KB, half a millisecond of the loop's time. Below it, decoding costs less than the two
 * thread wake-ups.
 */
#define FRAME_DECODE_AWAY_BYTES ((size_t)256 << 10)

/* Long lists of uint64 in one message that frame_unpack_facts() reports on, at most. */
#define FRAME_LIST_FACTS_MAX 4

/*
 * What decoding learnt of one long packed uint64 list (block ids) of the message: its largest
 * value, and whether a value repeats when that was cheap to find (values below 64 times the
 * list's length, or below 2^20: a bitmap over them).
 */
typedef struct FrameListFacts {
        const uint64_t *values; /* the list in the message, which identifies it */
        size_t n;
        uint64_t max;
        bool unique_known;
        bool unique; /* unique_known: no value repeats */
} FrameListFacts;

/*
 * frame_unpack(), and the facts of the message's long top-level lists that it decoded itself
 * (lists of 256 bytes or more) in @facts (FRAME_LIST_FACTS_MAX entries), *@ret_n_facts of them:
 * none for the lists protobuf-c decoded. For a thread that decodes so that the loop need not
 * walk the lists again.
 */
int frame_unpack_facts(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                       ProtobufCMessage **ret, FrameListFacts *facts, size_t *ret_n_facts);

/*
 * A deep copy of @msg (packed and unpacked again) in *@ret; free it with
 * protobuf_c_message_free_unpacked(). -ENOMEM, -EBADMSG.
 */
int frame_message_dup(const ProtobufCMessage *msg, ProtobufCMessage **ret);

/* Packs a bare Status{code, detail} payload (for FRAME_FLAG_ERROR replies). */
int frame_pack_error(uint16_t type, uint64_t request_id, int code, const char *detail,
                     uint32_t max_payload, uint8_t **ret_buf, size_t *ret_len);

/*
 * sendmsg() of @len bytes of @buf with @n_fds fds (<= FRAME_MAX_FDS) attached as SCM_RIGHTS.
 * Returns bytes sent (possibly fewer than @len, and the fds went with the first byte) or a
 * negative errno; -EAGAIN on a non-blocking socket that is full. MSG_NOSIGNAL is set.
 */
ssize_t frame_sendmsg(int sock, const void *buf, size_t len, const int *fds, size_t n_fds);

/*
 * recvmsg() into @buf with room for up to @max_fds received fds, which are opened
 * O_CLOEXEC (MSG_CMSG_CLOEXEC) and stored in @fds, their number in *@ret_n_fds.
 * Returns bytes read, 0 at EOF, or a negative errno (-EAGAIN; -EPROTO when the control data
 * was truncated or was not SCM_RIGHTS; any fds received then are closed).
 */
ssize_t frame_recvmsg(int sock, void *buf, size_t len, int *fds, size_t max_fds, size_t *ret_n_fds);

/*
 * frame_recvmsg() with more recvmsg() @flags (MSG_DONTWAIT: -EAGAIN on a blocking socket that
 * has nothing to read, instead of waiting).
 */
ssize_t frame_recvmsg_flags(int sock, void *buf, size_t len, int *fds, size_t max_fds, int flags,
                            size_t *ret_n_fds);
