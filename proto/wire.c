/* SPDX-License-Identifier: MIT */
/* Wire: frame input with limits and queued frame output on a non-blocking socket. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

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

void wire_in_reset(WireIn *in)
{
        in->header_len = 0;
        free(in->payload);
        in->payload = NULL;
        in->payload_len = 0;
        for (size_t i = 0; i < in->n_fds; i++)
                safe_close(in->fds[i]);
        in->n_fds = 0;
}

int wire_in_read(WireIn *in, int sock, uint32_t max_payload, size_t max_fds)
{
        ssize_t n;
        int r;

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

                r = frame_header_decode(in->header, max_payload, &in->frame);
                if (r < 0)
                        return r;
                /* Fds travel with the header's bytes: anything else is a broken frame. */
                if (in->frame.n_fds != in->n_fds)
                        return -EBADMSG;
                if (in->frame.length > 0) {
                        in->payload = malloc(in->frame.length);
                        if (!in->payload)
                                return -ENOMEM;
                }
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
