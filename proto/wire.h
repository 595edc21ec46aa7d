/* SPDX-License-Identifier: MIT */
/*
 * Wire: frame input and output buffering on a non-blocking stream socket, shared by kvdistd's
 * client connections (Unix socket, fds ride along) and peer connections (TCP, no fds), and
 * libkvdist's input from kvdistd (its own poll() and deadlines, read by read). Input checks a
 * header against the limits before anything is allocated for its payload; output queues whole
 * frames and writes what the socket takes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/clist.h"
#include "proto/frame.h"

/* Bytes one read asks for with read-ahead: a small request's header and payload together. */
#define WIRE_AHEAD_SIZE 2048

typedef struct WireIn {
        uint8_t header[FRAME_HEADER_SIZE];
        size_t header_len;
        FrameHeader frame; /* valid while @frame_ok */
        bool frame_ok;     /* the header is complete and decoded (not after a bad header) */
        uint8_t *payload;
        size_t payload_len;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;

        /*
         * Read-ahead (wire_in_init_ahead()): one recvmsg() takes what the socket has, up to
         * WIRE_AHEAD_SIZE, and frames are cut from it (wire_in_cut()); a payload that needs
         * WIRE_AHEAD_SIZE bytes or more is read straight into its buffer. Fds come with the
         * bytes of the sendmsg() that carried them, and the kernel ends a read after those: they
         * belong to the last frame that starts in that read.
         */
        bool read_ahead;
        bool drained;                /* wire_in_read(): the last read took less than it asked */
        uint8_t *ahead;              /* WIRE_AHEAD_SIZE bytes */
        size_t ahead_off, ahead_len; /* unread: ahead[ahead_off..ahead_len) */
        uint64_t received;           /* bytes read from the socket so far */
        uint64_t frame_start;        /* stream offset of the first byte of the frame being read */
        int next_fds[FRAME_MAX_FDS]; /* fds of a frame whose header is not complete yet */
        size_t n_next_fds;
        uint64_t next_fds_begin, next_fds_end; /* the stream bytes of the read they came with */
        size_t n_stray_fds; /* fds of the last read that no frame could take (-EBADMSG), closed */
} WireIn;

typedef struct WireOut {
        CList frames; /* WireFrame, oldest first */
        size_t bytes; /* queued and not yet written */
} WireOut;

/* Prepares an empty input buffer. */
void wire_in_init(WireIn *in);

/*
 * As wire_in_init(), with read-ahead: small frames cost one recvmsg() (header and payload
 * together) and no read that finds the socket empty. Only for a socket whose bytes are all
 * frames read through @in. -ENOMEM.
 */
int wire_in_init_ahead(WireIn *in);

/* Drops the frame being read, partial or complete: frees its payload and closes its fds. Bytes
 * and fds already read for the frames after it stay. */
void wire_in_reset(WireIn *in);

/* Drops everything: the frame being read and what was read ahead. */
void wire_in_done(WireIn *in);

/* Whether bytes or fds of a frame not yet complete are held. */
bool wire_in_has_partial(const WireIn *in);

/* Whether bytes read ahead wait to be cut into frames: they need no readiness of the socket. */
static inline bool wire_in_has_ahead(const WireIn *in)
{
        return in->ahead_off < in->ahead_len;
}

/*
 * Reads from @sock toward the next frame, with at most @max_fds fds riding on its header bytes.
 * Returns 1 when a whole frame is in @in (header in in->frame), 0 when the socket has nothing
 * more for now, -ECONNRESET at end of stream, frame_header_decode()'s errors for a bad header
 * (-EPROTONOSUPPORT for another frame version), -EBADMSG when the fds that came do not match the
 * header, -ENOMEM, or the error of recvmsg(). With read-ahead it is wire_in_cut() and
 * wire_in_recv() in turn, and for a level-triggered socket: after a read that took less than it
 * asked for, it returns 0 instead of reading again.
 */
int wire_in_read(WireIn *in, int sock, uint32_t max_payload, size_t max_fds);

/*
 * With read-ahead: moves bytes read ahead into the frame being read, checks its header against
 * @max_payload and gives it its fds. Makes no system call. Returns 1 when the frame is whole, 0
 * when it needs bytes from the socket (nothing is left read ahead then), frame_header_decode()'s
 * errors for a bad header, -EBADMSG when its fds do not match it (in->n_fds, in->frame.n_fds;
 * with in->n_next_fds still held when no frame started in the bytes they came with), -ENOMEM.
 */
int wire_in_cut(WireIn *in, uint32_t max_payload);

/*
 * With read-ahead, after wire_in_cut() returned 0: one recvmsg(@sock, @flags) for the frame
 * being read, into the read-ahead buffer with at most @max_fds fds, or for a payload that needs
 * WIRE_AHEAD_SIZE bytes or more straight into it. Returns the bytes read, with *@ret_more true
 * when the socket may hold more right away (the read filled what it asked for, or ended early
 * after fds); -EAGAIN when it had nothing; -ECONNRESET at end of stream; -EBADMSG when fds came
 * that no frame can take (in->n_stray_fds of them, closed; in->n_next_fds > 0: fds of an earlier
 * read still wait for their frame), -EPROTO when they came on a payload read straight or broke
 * the limits; or the error of recvmsg().
 */
ssize_t wire_in_recv(WireIn *in, int sock, int flags, size_t max_fds, bool *ret_more);

/* Prepares an empty output queue. */
void wire_out_init(WireOut *out);

/* Drops every queued frame. */
void wire_out_clear(WireOut *out);

/*
 * Queues the packed frame @buf of @len bytes (taken, freed on failure too) with a duplicate of
 * @fd (-1 for none) to go with its first byte. -ENOMEM, or dup's error.
 */
int wire_out_queue(WireOut *out, uint8_t *buf, size_t len, int fd);

/* Writes queued frames until the queue is empty (0) or the socket is full (0); -errno when the
 * socket failed. */
int wire_out_write(WireOut *out, int sock);

static inline bool wire_out_is_empty(const WireOut *out)
{
        return clist_is_empty(&out->frames);
}
