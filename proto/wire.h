/* SPDX-License-Identifier: MIT */
/*
 * Wire: frame input and output buffering on a non-blocking stream socket, shared by client
 * connections (Unix socket, fds ride along) and peer connections (TCP, no fds). Input checks a
 * header against the limits before anything is allocated for its payload; output queues whole
 * frames and writes what the socket takes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clist.h"
#include "proto/frame.h"

typedef struct WireIn {
        uint8_t header[FRAME_HEADER_SIZE];
        size_t header_len;
        FrameHeader frame; /* valid once the header is complete */
        uint8_t *payload;
        size_t payload_len;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
} WireIn;

typedef struct WireOut {
        CList frames; /* WireFrame, oldest first */
        size_t bytes; /* queued and not yet written */
} WireOut;

/* Prepares an empty input buffer. */
void wire_in_init(WireIn *in);

/* Drops a partial or complete frame: frees its payload and closes its fds. */
void wire_in_reset(WireIn *in);

/*
 * Reads from @sock toward the next frame, with at most @max_fds fds riding on its header bytes.
 * Returns 1 when a whole frame is in @in (header in in->frame), 0 when the socket has nothing
 * more for now, -ECONNRESET at end of stream, frame_header_decode()'s errors for a bad header
 * (-EPROTONOSUPPORT for another frame version), -EBADMSG when the fds that came do not match the
 * header, -ENOMEM, or the error of recvmsg().
 */
int wire_in_read(WireIn *in, int sock, uint32_t max_payload, size_t max_fds);

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
