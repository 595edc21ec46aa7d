/* SPDX-License-Identifier: MIT */
/* libkvdist frame input: frames cut from bytes read ahead, with the fds that came with them. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-lib/rx.h"
#include "common/macro.h"

/* The stream offset of the next byte a frame takes. */
static uint64_t rx_consumed(const RxState *rx)
{
        return rx->received - (rx->ahead_len - rx->ahead_off);
}

static void close_fds(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                fds[i] = safe_close(fds[i]);
}

/* The header of the frame being read is whole: checks it, gives it its fds, makes room. */
static int rx_begin(RxState *rx, uint32_t max_payload, char *detail, size_t size)
{
        uint64_t start = rx->frame_start, end;
        int r;

        r = frame_header_decode(rx->header, max_payload, &rx->h);
        if (r < 0) {
                (void)snprintf(detail, size, "kvdistd sent a malformed frame header (%s)",
                               strerror(-r));
                return -1;
        }
        end = start + FRAME_HEADER_SIZE + rx->h.length;

        /* Fds that came with the bytes this frame starts in are its own, unless a later frame
         * starts there too. */
        if (rx->n_next_fds > 0 && start >= rx->next_fds_begin) {
                if (start >= rx->next_fds_end) {
                        (void)snprintf(detail, size,
                                       "kvdistd sent a malformed frame (%zu fds with no frame "
                                       "starting in the bytes they came with)",
                                       rx->n_next_fds);
                        return -1;
                }
                if (end >= rx->next_fds_end) {
                        memcpy(rx->fds, rx->next_fds, rx->n_next_fds * sizeof(int));
                        rx->n_fds = rx->n_next_fds;
                        rx->n_next_fds = 0;
                }
        }
        if (rx->n_fds != rx->h.n_fds) {
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (%zu fds for a header saying %u)",
                               rx->n_fds, rx->h.n_fds);
                return -1;
        }

        rx->payload = malloc(MAX(rx->h.length, 1u));
        if (!rx->payload) {
                (void)snprintf(detail, size, "out of memory for a %u byte reply from kvdistd",
                               rx->h.length);
                return -1;
        }
        return 0;
}

int rx_cut(RxState *rx, uint32_t max_payload, char *detail, size_t size)
{
        size_t k;

        while (rx->header_len < FRAME_HEADER_SIZE) {
                if (rx->ahead_off == rx->ahead_len)
                        return 0;
                if (rx->header_len == 0)
                        rx->frame_start = rx_consumed(rx);
                k = MIN(FRAME_HEADER_SIZE - rx->header_len, rx->ahead_len - rx->ahead_off);
                memcpy(rx->header + rx->header_len, rx->ahead + rx->ahead_off, k);
                rx->header_len += k;
                rx->ahead_off += k;
                if (rx->header_len == FRAME_HEADER_SIZE &&
                    rx_begin(rx, max_payload, detail, size) < 0)
                        return -1;
        }

        k = MIN(rx->h.length - rx->payload_len, rx->ahead_len - rx->ahead_off);
        if (k > 0) {
                memcpy(rx->payload + rx->payload_len, rx->ahead + rx->ahead_off, k);
                rx->payload_len += k;
                rx->ahead_off += k;
        }
        return rx_frame_complete(rx);
}

/*
 * Keeps the @n fds that came with the stream bytes [@begin, @end) for the last frame that starts
 * there: the frame being read, if its header is not whole yet, or a later one. Takes @fds.
 */
static int rx_stash_fds(RxState *rx, int *fds, size_t n, uint64_t begin, uint64_t end, char *detail,
                        size_t size)
{
        if (rx->n_next_fds > 0) {
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (more fds before a frame took "
                               "the last ones)");
                close_fds(fds, n);
                return -1;
        }
        if (rx->header_len == FRAME_HEADER_SIZE &&
            rx->frame_start + FRAME_HEADER_SIZE + rx->h.length >= end) {
                (void)snprintf(detail, size,
                               "kvdistd sent a malformed frame (%zu fds in the middle of a "
                               "%u byte payload)",
                               n, rx->h.length);
                close_fds(fds, n);
                return -1;
        }
        memcpy(rx->next_fds, fds, n * sizeof(int));
        rx->n_next_fds = n;
        rx->next_fds_begin = begin;
        rx->next_fds_end = end;
        return 0;
}

ssize_t rx_recv(RxState *rx, int sock, int flags, bool *ret_more, char *detail, size_t size)
{
        int fds[FRAME_MAX_FDS];
        size_t want, got = 0;
        bool straight;
        ssize_t n;

        assert(rx->ahead_off == rx->ahead_len);
        straight = rx->header_len == FRAME_HEADER_SIZE &&
                   rx->h.length - rx->payload_len >= RX_AHEAD_SIZE;
        if (straight) {
                /* fds on a payload's bytes break the frame: no room for them, -EPROTO */
                want = rx->h.length - rx->payload_len;
                n = frame_recvmsg_flags(sock, rx->payload + rx->payload_len, want, NULL, 0, flags,
                                        &got);
        } else {
                want = RX_AHEAD_SIZE;
                n = frame_recvmsg_flags(sock, rx->ahead, want, fds, FRAME_MAX_FDS, flags, &got);
        }

        if (n == -EAGAIN || n == -EWOULDBLOCK)
                return -EAGAIN;
        if (n == 0 || n == -ECONNRESET || n == -EPIPE) {
                if (rx->header_len == 0)
                        (void)snprintf(detail, size, "kvdistd closed the connection");
                else if (rx->header_len < FRAME_HEADER_SIZE)
                        (void)snprintf(detail, size,
                                       "kvdistd closed the connection in the middle of a frame "
                                       "(%zu of %d header bytes)",
                                       rx->header_len, FRAME_HEADER_SIZE);
                else
                        (void)snprintf(detail, size,
                                       "kvdistd closed the connection in the middle of a frame "
                                       "(%zu of %u payload bytes)",
                                       rx->payload_len, rx->h.length);
                return -1;
        }
        if (n == -EPROTO) {
                (void)snprintf(detail, size, "kvdistd sent a malformed frame (bad control data)");
                return -1;
        }
        if (n < 0) {
                (void)snprintf(detail, size, "kvdistd closed the connection (recv: %s)",
                               strerror((int)-n));
                return -1;
        }

        rx->received += (uint64_t)n;
        if (straight)
                rx->payload_len += (size_t)n;
        else {
                rx->ahead_off = 0;
                rx->ahead_len = (size_t)n;
        }
        /* A read ends early after fds, so a short one says nothing about the socket then. */
        *ret_more = (size_t)n == want || got > 0;
        if (got > 0 &&
            rx_stash_fds(rx, fds, got, rx->received - (uint64_t)n, rx->received, detail, size) < 0)
                return -1;
        return n;
}

void rx_frame_reset(RxState *rx)
{
        free(rx->payload);
        rx->payload = NULL;
        rx->payload_len = 0;
        rx->header_len = 0;
        rx->h = (FrameHeader){};
        close_fds(rx->fds, rx->n_fds);
        rx->n_fds = 0;
}

void rx_done(RxState *rx)
{
        rx_frame_reset(rx);
        close_fds(rx->next_fds, rx->n_next_fds);
        rx->n_next_fds = 0;
        rx->ahead_off = rx->ahead_len = 0;
}
