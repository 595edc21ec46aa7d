/* SPDX-License-Identifier: MIT */
/*
 * libkvdist frame input: the frame being read from kvdistd's socket and the bytes read ahead of
 * it. One recvmsg() takes what the socket has, up to RX_AHEAD_SIZE bytes, and frames are cut
 * from that buffer, so a small reply costs one read for its header and payload together; a
 * payload that needs RX_AHEAD_SIZE bytes or more is read straight into its own buffer.
 *
 * Fds come with the bytes of the sendmsg() that carried them, and the kernel ends a read after
 * those: they belong to the last frame that starts in that read (kvdistd's proto/wire.c gives
 * them to frames the same way).
 *
 * Nothing here waits, locks or knows about requests: the connection (conn.c) polls, and hands
 * whole frames to their waiters.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/frame.h"

/* As kvdistd's read-ahead (WIRE_AHEAD_SIZE): a reply that involves no bulk bytes fits. */
#define RX_AHEAD_SIZE 2048

typedef struct RxState {
        /* The frame being read; kept across readers so a deadline never splits a frame. */
        uint8_t header[FRAME_HEADER_SIZE];
        size_t header_len;
        FrameHeader h; /* valid once header_len == FRAME_HEADER_SIZE */
        uint8_t *payload;
        size_t payload_len;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;

        uint8_t ahead[RX_AHEAD_SIZE];
        size_t ahead_off, ahead_len; /* not yet cut into a frame: ahead[ahead_off..ahead_len) */
        uint64_t received;           /* bytes read from the socket so far */
        uint64_t frame_start;        /* stream offset of the frame being read */
        int next_fds[FRAME_MAX_FDS]; /* fds that came before the header that claims them */
        size_t n_next_fds;
        uint64_t next_fds_begin, next_fds_end; /* the stream bytes of the read they came with */
} RxState;

/* Whether the frame being read is whole: its header in @rx->h, its payload and fds in @rx. */
static inline bool rx_frame_complete(const RxState *rx)
{
        return rx->header_len == FRAME_HEADER_SIZE && rx->payload_len == rx->h.length;
}

/*
 * Moves bytes read ahead into the frame being read, checking its header against @max_payload
 * and giving it its fds. Makes no system call. Returns 1 when the frame is whole, 0 when it
 * needs bytes from the socket (nothing is left read ahead then), or -1 with @detail set when
 * the bytes break the protocol.
 */
int rx_cut(RxState *rx, uint32_t max_payload, char *detail, size_t size);

/*
 * One recvmsg(@sock, @flags) for the frame being read, after rx_cut() returned 0: into the
 * read-ahead buffer, or for a long payload straight into it. Returns the bytes read, with
 * *@ret_more true when the socket may hold more right away (the read filled what it asked for,
 * or ended early after fds); -EAGAIN when there was nothing to read; -1 with @detail set when
 * the connection ended or failed.
 */
ssize_t rx_recv(RxState *rx, int sock, int flags, bool *ret_more, char *detail, size_t size);

/*
 * Ends the frame being read (a whole one, after its header, payload and fds were taken or
 * copied): frees its payload and closes the fds still in it. What was read ahead stays.
 */
void rx_frame_reset(RxState *rx);

/* Drops everything, the frame being read and what was read ahead. */
void rx_done(RxState *rx);
