/* SPDX-License-Identifier: MIT */
/*
 * The input format of the socket-level fuzz targets (fuzz-client.c, fuzz-peer.c) and of the seed
 * generator (fuzz-gen-corpus.c): a script of what the other side of the daemon's sockets does.
 *
 * An input is one setup byte (its meaning is the target's) followed by records. A record starts
 * with an op byte: its low nibble is the operation (FuzzOp), its high nibble the argument A.
 * Integers are little-endian; a record cut short by the end of the input is dropped. Every
 * operation acts on the current endpoint (a socket whose other end the daemon holds), 0 at the
 * start:
 *
 *   FUZZ_OP_FRAME     u16 type, u8 flags, u8 request id, u8 fd kind, u16 length, payload.
 *                     A well-formed header for the payload with A & 7 fds of the kind; with
 *                     A & 8 one more byte follows the fd kind: only that many bytes of the
 *                     frame are sent (a partial frame).
 *   FUZZ_OP_RAW       u8 fd kind, u16 length, bytes: sent as they are, with A & 7 fds.
 *   FUZZ_OP_SHUT_RD   shutdown(SHUT_RD) of our end: the daemon's replies fail with EPIPE.
 *   FUZZ_OP_SHUT_WR   shutdown(SHUT_WR) of our end: the daemon reads end of stream.
 *   FUZZ_OP_CLOSE     closes our end.
 *   FUZZ_OP_ENDPOINT  switches to endpoint A % FUZZ_MAX_ENDPOINTS; one not open yet is opened
 *                     and set up as the target says, with one more byte for it (its mode).
 *   FUZZ_OP_WAIT      runs the event loop for A + 1 ms (FUZZ_WAIT_BUDGET_MS per input at most),
 *                     so timers fire.
 *   FUZZ_OP_CHUNK     fuzz-peer: a data-stream chunk on data connection A % 4: u8 flags,
 *                     u64 job id (0: the job id of the last PeerTransferReply), u32 offset,
 *                     u16 length, payload; the CRC is computed when flags ask for one.
 *   FUZZ_OP_PAUSE     stops reading what the daemon sends on this endpoint, or starts again:
 *                     its replies pile up in the socket, then in the daemon.
 *
 * After each record the event loop runs until it is idle (fuzz-daemon.h).
 *
 * Fd kinds (FuzzFdKind) name what a frame carries with SCM_RIGHTS; a kind byte K gives every fd
 * the kind K % _FUZZ_FD_MAX when K < 16, else fd i the kind ((K & 15) + i) % _FUZZ_FD_MAX.
 */
#pragma once

#include <stdint.h>

#define FUZZ_MAX_ENDPOINTS 8
/* The listen_ip_info of the clusters the targets set up: servers, on any free loopback port. */
#define FUZZ_LISTEN "127.0.0.1:0"
#define FUZZ_WAIT_BUDGET_MS 20
/* The size of the memfds FUZZ_FD_MEMFD and FUZZ_FD_MEMFD_UNSEALED make. */
#define FUZZ_MEMFD_SIZE (64u << 10)

typedef enum FuzzOp {
        FUZZ_OP_FRAME,
        FUZZ_OP_RAW,
        FUZZ_OP_SHUT_RD,
        FUZZ_OP_SHUT_WR,
        FUZZ_OP_CLOSE,
        FUZZ_OP_ENDPOINT,
        FUZZ_OP_WAIT,
        FUZZ_OP_CHUNK,
        FUZZ_OP_PAUSE,
        _FUZZ_OP_MAX,
} FuzzOp;

typedef enum FuzzFdKind {
        FUZZ_FD_MEMFD, /* FUZZ_MEMFD_SIZE bytes, sealed against shrinking: a region */
        FUZZ_FD_MEMFD_UNSEALED,
        FUZZ_FD_MEMFD_EMPTY,        /* 0 bytes, sealed */
        FUZZ_FD_MEMFD_SEALED_WRITE, /* sealed against writing too */
        FUZZ_FD_MEMFD_SPARSE,       /* 64 MiB of holes, sealed */
        FUZZ_FD_OWN_SOCKET,         /* a dup of our own end of the connection */
        FUZZ_FD_DAEMON_SOCKET,      /* a dup of the daemon's end of it */
        FUZZ_FD_PIPE,               /* the read end of a pipe whose write end is closed */
        FUZZ_FD_DEV_NULL,
        FUZZ_FD_EVENTFD,
        FUZZ_FD_DIRECTORY,  /* an O_PATH fd of / */
        FUZZ_FD_SOCKETPAIR, /* one end of a fresh socketpair, the other closed */
        _FUZZ_FD_MAX,
} FuzzFdKind;
