/* SPDX-License-Identifier: MIT */
/* Wire: frame input with limits and queued frame output on a non-blocking socket. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "common/macro.h"
#include "proto/wire.h"

typedef struct WireFrame {
        CList link;
        uint8_t *buf;
        size_t len;
        size_t off;
        int fd; /* sent with the first byte, then closed */
} WireFrame;

static WireFrame *wire_frame_free(WireFrame *f)
{
        if (!f)
                return NULL;
        clist_unlink(&f->link);
        safe_close(f->fd);
        free(f->buf);
        free(f);
        return NULL;
}

void wire_in_init(WireIn *in)
{
        *in = (WireIn){};
}

int wire_in_init_ahead(WireIn *in)
{
        *in = (WireIn){.read_ahead = true};
        in->ahead = malloc(WIRE_AHEAD_SIZE);
        if (!in->ahead)
                return -ENOMEM;
        return 0;
}

void wire_in_done(WireIn *in)
{
        wire_in_reset(in);
        for (size_t i = 0; i < in->n_next_fds; i++)
                safe_close(in->next_fds[i]);
        in->n_next_fds = 0;
        free(in->ahead);
        in->ahead = NULL;
        in->ahead_off = in->ahead_len = 0;
}

bool wire_in_has_partial(const WireIn *in)
{
        return in->header_len > 0 || in->n_fds > 0 || in->n_next_fds > 0 ||
               in->ahead_off < in->ahead_len;
}

void wire_in_reset(WireIn *in)
{
        in->header_len = 0;
        in->frame_ok = false;
        free(in->payload);
        in->payload = NULL;
        in->payload_len = 0;
        for (size_t i = 0; i < in->n_fds; i++)
                safe_close(in->fds[i]);
        in->n_fds = 0;
}

/* The stream offset of the next byte a frame takes. */
static uint64_t ahead_consumed(const WireIn *in)
{
        return in->received - (in->ahead_len - in->ahead_off);
}

/*
 * Fds that came with the stream bytes [@begin, @end): they belong to the last frame that starts
 * there, which may be the frame being read or a later one, whose header says how many. None may
 * be waiting already, and some frame must start in those bytes. -EBADMSG.
 */
static int ahead_stash_fds(WireIn *in, const int *fds, size_t n, uint64_t begin, uint64_t end)
{
        int r = 0;

        if (in->n_next_fds > 0)
                r = -EBADMSG;
        /* the frame being read ends at or past @end: no frame starts in those bytes */
        else if (in->header_len == FRAME_HEADER_SIZE &&
                 in->frame_start + FRAME_HEADER_SIZE + in->frame.length >= end)
                r = -EBADMSG;
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        safe_close(fds[i]);
                in->n_stray_fds = n;
                return r;
        }
        memcpy(in->next_fds, fds, n * sizeof(int));
        in->n_next_fds = n;
        in->next_fds_begin = begin;
        in->next_fds_end = end;
        return 0;
}

/* The header of the frame being read is complete: it takes the fds that are its own. */
static int ahead_claim_fds(WireIn *in)
{
        uint64_t s = in->frame_start, next = s + FRAME_HEADER_SIZE + in->frame.length;

        if (in->n_next_fds == 0 || s < in->next_fds_begin)
                return 0;
        /* no frame started in the bytes the fds came with */
        if (s >= in->next_fds_end)
                return -EBADMSG;
        /* a later frame starts there too: theirs */
        if (next < in->next_fds_end)
                return 0;
        memcpy(in->fds, in->next_fds, in->n_next_fds * sizeof(int));
        in->n_fds = in->n_next_fds;
        in->n_next_fds = 0;
        return 0;
}

/*
 * The header of the frame @in reads is whole: decodes it, takes the fds that came with its first
 * bytes (@ahead: those the read-ahead stashed for it) and makes room for its payload.
 */
static int in_frame_begin(WireIn *in, uint32_t max_payload, bool ahead)
{
        int r;

        r = frame_header_decode(in->header, max_payload, &in->frame);
        if (r < 0)
                return r;
        in->frame_ok = true;
        if (ahead) {
                r = ahead_claim_fds(in);
                if (r < 0)
                        return r;
        }
        /* Fds travel with the frame's first bytes: anything else is a broken frame. */
        if (in->frame.n_fds != in->n_fds)
                return -EBADMSG;
        if (in->frame.length > 0) {
                in->payload = malloc(in->frame.length);
                if (!in->payload)
                        return -ENOMEM;
        }
        return 0;
}

int wire_in_cut(WireIn *in, uint32_t max_payload)
{
        size_t k;
        int r;

        assert(in->read_ahead);
        while (in->header_len < FRAME_HEADER_SIZE) {
                if (in->ahead_off == in->ahead_len)
                        return 0;
                if (in->header_len == 0)
                        in->frame_start = ahead_consumed(in);
                k = MIN(FRAME_HEADER_SIZE - in->header_len, in->ahead_len - in->ahead_off);
                memcpy(in->header + in->header_len, in->ahead + in->ahead_off, k);
                in->header_len += k;
                in->ahead_off += k;
                if (in->header_len < FRAME_HEADER_SIZE)
                        continue;

                r = in_frame_begin(in, max_payload, true);
                if (r < 0)
                        return r;
        }

        /* a zero-length frame has no payload buffer to copy into */
        k = MIN(in->frame.length - in->payload_len, in->ahead_len - in->ahead_off);
        if (k > 0) {
                memcpy(in->payload + in->payload_len, in->ahead + in->ahead_off, k);
                in->payload_len += k;
                in->ahead_off += k;
        }
        return in->payload_len == in->frame.length;
}

ssize_t wire_in_recv(WireIn *in, int sock, int flags, size_t max_fds, bool *ret_more)
{
        int fds[FRAME_MAX_FDS];
        size_t want, got = 0;
        bool straight;
        ssize_t n;
        int r;

        assert(in->read_ahead && in->ahead_off == in->ahead_len);
        straight = in->header_len == FRAME_HEADER_SIZE &&
                   in->frame.length - in->payload_len >= WIRE_AHEAD_SIZE;
        if (straight) {
                /* fds on a payload's bytes break the frame: no room for them, -EPROTO */
                want = in->frame.length - in->payload_len;
                n = frame_recvmsg_flags(sock, in->payload + in->payload_len, want, NULL, 0, flags,
                                        &got);
        } else {
                want = WIRE_AHEAD_SIZE;
                n = frame_recvmsg_flags(sock, in->ahead, want, fds,
                                        MIN(max_fds, (size_t)FRAME_MAX_FDS), flags, &got);
        }
        if (n == 0)
                return -ECONNRESET;
        if (n < 0)
                return n;

        in->received += (uint64_t)n;
        if (straight)
                in->payload_len += (size_t)n;
        else {
                in->ahead_off = 0;
                in->ahead_len = (size_t)n;
        }
        if (got > 0) {
                r = ahead_stash_fds(in, fds, got, in->received - (uint64_t)n, in->received);
                if (r < 0)
                        return r;
        }
        /* after fds the kernel ends a read early, so a short one says nothing then */
        *ret_more = (size_t)n == want || got > 0;
        return n;
}

/* wire_in_read() with read-ahead, on a level-triggered socket: more bytes wake it again. */
static int wire_in_read_ahead(WireIn *in, int sock, uint32_t max_payload, size_t max_fds)
{
        bool more = false;
        ssize_t n;
        int r;

        for (;;) {
                r = wire_in_cut(in, max_payload);
                if (r != 0)
                        return r;
                if (in->drained) {
                        in->drained = false;
                        return 0;
                }
                n = wire_in_recv(in, sock, 0, max_fds, &more);
                if (n == -EAGAIN)
                        return 0;
                if (n < 0)
                        return (int)n;
                in->drained = !more;
        }
}

int wire_in_read(WireIn *in, int sock, uint32_t max_payload, size_t max_fds)
{
        ssize_t n;
        int r;

        if (in->read_ahead)
                return wire_in_read_ahead(in, sock, max_payload,
                                          MIN(max_fds, (size_t)FRAME_MAX_FDS));
        if (max_fds > FRAME_MAX_FDS)
                max_fds = FRAME_MAX_FDS;
        if (in->header_len < FRAME_HEADER_SIZE) {
                size_t got = 0;

                n = frame_recvmsg(sock, in->header + in->header_len,
                                  FRAME_HEADER_SIZE - in->header_len, in->fds + in->n_fds,
                                  max_fds - MIN(in->n_fds, max_fds), &got);
                if (n == -EAGAIN || n == -EINTR)
                        return 0;
                if (n == 0)
                        return -ECONNRESET;
                if (n < 0)
                        return (int)n;
                in->n_fds += got;
                in->header_len += (size_t)n;
                if (in->header_len < FRAME_HEADER_SIZE)
                        return 0;

                r = in_frame_begin(in, max_payload, false);
                if (r < 0)
                        return r;
        }

        while (in->payload_len < in->frame.length) {
                size_t got = 0;

                n = frame_recvmsg(sock, in->payload + in->payload_len,
                                  in->frame.length - in->payload_len, NULL, 0, &got);
                if (n == -EAGAIN || n == -EINTR)
                        return 0;
                if (n == 0)
                        return -ECONNRESET;
                if (n < 0)
                        return (int)n;
                in->payload_len += (size_t)n;
        }
        return 1;
}

void wire_out_init(WireOut *out)
{
        clist_init(&out->frames);
        out->bytes = 0;
}

void wire_out_clear(WireOut *out)
{
        WireFrame *f, *tmp;

        CLIST_FOREACH_SAFE (f, tmp, &out->frames, link)
                wire_frame_free(f);
        out->bytes = 0;
}

int wire_out_queue(WireOut *out, uint8_t *buf, size_t len, int fd)
{
        WireFrame *f;
        int r;

        f = calloc(1, sizeof(*f));
        if (!f) {
                free(buf);
                return -ENOMEM;
        }
        f->buf = buf;
        f->len = len;
        f->fd = -1;
        if (fd >= 0) {
                f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (f->fd < 0) {
                        r = -errno;
                        free(buf);
                        free(f);
                        return r;
                }
        }
        clist_link_tail(&out->frames, &f->link);
        out->bytes += len;
        return 0;
}

int wire_out_write(WireOut *out, int sock)
{
        while (!clist_is_empty(&out->frames)) {
                WireFrame *f = clist_first_entry(&out->frames, WireFrame, link);
                ssize_t n;

                n = frame_sendmsg(sock, f->buf + f->off, f->len - f->off,
                                  f->fd >= 0 ? &f->fd : NULL, f->fd >= 0 ? 1 : 0);
                if (n == -EAGAIN || n == -EINTR)
                        return 0;
                if (n < 0)
                        return (int)n;
                f->fd = safe_close(f->fd);
                f->off += (size_t)n;
                out->bytes -= (size_t)n;
                if (f->off == f->len)
                        wire_frame_free(f);
        }
        return 0;
}
