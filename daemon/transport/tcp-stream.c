/* SPDX-License-Identifier: MIT */
/* TCP stream: chunked, optionally CRC-checked byte streams straight out of and into segments. */

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/crc32c.h"
#include "common/macro.h"
#include "daemon/transport/tcp-stream.h"

/*
 * iovec entries per system call, on the stack. A chunk that spans more segments than this is
 * simply sent or received in more than one call, exactly like a partial write.
 */
#define IOV_BATCH 64
#if defined(IOV_MAX)
_Static_assert(IOV_BATCH <= IOV_MAX, "IOV_BATCH exceeds IOV_MAX");
#endif

/* Either side's segment array, seen through one interface. */
typedef struct SegList {
        const TcpSrcSegment *src;
        const TcpDstSegment *dst;
        size_t n;
} SegList;

static inline uint8_t *seg_base(const SegList *l, size_t i)
{
        /* The sender only ever reads through this pointer; iovec just has no const. */
        return l->src ? (uint8_t *)(uintptr_t)l->src[i].src : (uint8_t *)l->dst[i].dst;
}

static inline size_t seg_len(const SegList *l, size_t i)
{
        return l->src ? l->src[i].len : l->dst[i].len;
}

static void put_le32(uint8_t *p, uint32_t v)
{
        for (unsigned i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
        uint32_t v = 0;

        for (unsigned i = 0; i < 4; i++)
                v |= (uint32_t)p[i] << (8 * i);
        return v;
}

static uint64_t get_le64(const uint8_t *p)
{
        uint64_t v = 0;

        for (unsigned i = 0; i < 8; i++)
                v |= (uint64_t)p[i] << (8 * i);
        return v;
}

static int seg_total(const SegList *l, uint64_t *ret_total)
{
        uint64_t total = 0;

        for (size_t i = 0; i < l->n; i++) {
                if (seg_len(l, i) > 0 && !seg_base(l, i))
                        return -EINVAL;
                if (ADD_OVERFLOW(total, (uint64_t)seg_len(l, i), &total))
                        return -EOVERFLOW;
        }
        *ret_total = total;
        return 0;
}

/* Skips segments the cursor has reached the end of (and empty ones), so it names a real byte. */
static void cursor_normalize(const SegList *l, TcpStreamCursor *c)
{
        while (c->seg < l->n && c->off >= seg_len(l, c->seg)) {
                c->seg++;
                c->off = 0;
        }
}

/* The cursor of job-global offset @pos, which the caller checked is within the job. */
static TcpStreamCursor cursor_seek(const SegList *l, uint64_t pos)
{
        TcpStreamCursor c = {.seg = 0, .off = 0};

        while (c.seg < l->n && pos >= seg_len(l, c.seg)) {
                pos -= seg_len(l, c.seg);
                c.seg++;
        }
        c.off = (size_t)pos;
        cursor_normalize(l, &c);
        return c;
}

/* Checks that [@start, @end) lies within the job of @l and returns the cursor of @start. */
static int range_seek(const SegList *l, uint64_t start, uint64_t end, TcpStreamCursor *ret)
{
        uint64_t total;
        int r;

        r = seg_total(l, &total);
        if (r < 0)
                return r;
        if (start > end || end > total)
                return -EINVAL;
        *ret = cursor_seek(l, start);
        return 0;
}

static void cursor_advance(const SegList *l, TcpStreamCursor *c, uint64_t n)
{
        while (n > 0 && c->seg < l->n) {
                size_t step = (size_t)MIN((uint64_t)(seg_len(l, c->seg) - c->off), n);

                c->off += step;
                n -= step;
                cursor_normalize(l, c);
        }
}

/* Fills @iov with up to @max_iov entries covering at most @max_bytes from @c; returns the count. */
static size_t cursor_iov(const SegList *l, TcpStreamCursor c, uint64_t max_bytes, struct iovec *iov,
                         size_t max_iov)
{
        size_t k = 0;

        while (k < max_iov && max_bytes > 0 && c.seg < l->n) {
                size_t step = (size_t)MIN((uint64_t)(seg_len(l, c.seg) - c.off), max_bytes);

                iov[k].iov_base = seg_base(l, c.seg) + c.off;
                iov[k].iov_len = step;
                k++;
                max_bytes -= step;
                c.off += step;
                cursor_normalize(l, &c);
        }
        return k;
}

/* Extends @crc over @n bytes of the segments from @c. */
static uint32_t cursor_crc(const SegList *l, TcpStreamCursor c, uint64_t n, uint32_t crc)
{
        while (n > 0 && c.seg < l->n) {
                size_t step = (size_t)MIN((uint64_t)(seg_len(l, c.seg) - c.off), n);

                crc = crc32c(crc, seg_base(l, c.seg) + c.off, step);
                n -= step;
                c.off += step;
                cursor_normalize(l, &c);
        }
        return crc;
}

int tcp_stream_split(uint64_t total_bytes, unsigned n_streams, uint64_t min_bytes,
                     TcpStreamRange *ret_ranges)
{
        uint64_t n, base, extra, pos = 0;

        if (n_streams == 0)
                return -EINVAL;
        if (total_bytes == 0)
                return 0;
        if (min_bytes == 0)
                min_bytes = 1;

        n = MAX(MIN(total_bytes / min_bytes, (uint64_t)n_streams), UINT64_C(1));
        base = total_bytes / n;
        extra = total_bytes % n;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t len = base + (i < extra ? 1 : 0);

                ret_ranges[i] = (TcpStreamRange){.start = pos, .end = pos + len};
                pos += len;
        }
        return (int)n;
}

int tcp_stream_header_parse(const uint8_t *buf, bool crc, TcpStreamHeader *ret)
{
        TcpStreamHeader h = {
                .flags = get_le32(buf + 4),
                .transfer_id = get_le64(buf + 8),
                .offset = get_le64(buf + 16),
                .length = get_le32(buf + 24),
                .crc = get_le32(buf + 28),
        };
        uint64_t end;

        if (get_le32(buf + 0) != TCP_STREAM_MAGIC)
                return -EBADMSG;
        if (h.flags & ~TCP_STREAM_FLAGS_KNOWN)
                return -EBADMSG;
        if (!!(h.flags & TCP_STREAM_FLAG_CRC) != crc)
                return -EBADMSG;
        if (!crc && h.crc != 0)
                return -EBADMSG;
        if ((h.flags & TCP_STREAM_FLAG_ABORT) && (h.length != 0 || h.crc != 0))
                return -EBADMSG;
        if (h.length == 0 && !(h.flags & TCP_STREAM_FLAG_ABORT))
                return -EPROTO;
        if (ADD_OVERFLOW(h.offset, (uint64_t)h.length, &end))
                return -EPROTO;

        *ret = h;
        return 0;
}

int tcp_stream_src_total(const TcpSrcSegment *segs, size_t n, uint64_t *ret_total)
{
        SegList l = {.src = segs, .n = n};

        return seg_total(&l, ret_total);
}

int tcp_stream_dst_total(const TcpDstSegment *segs, size_t n, uint64_t *ret_total)
{
        SegList l = {.dst = segs, .n = n};

        return seg_total(&l, ret_total);
}

static SegList sender_list(const TcpSender *s)
{
        return (SegList){.src = s->segs, .n = s->n_segs};
}

static SegList receiver_list(const TcpReceiver *r)
{
        return (SegList){.dst = r->segs, .n = r->n_segs};
}

int tcp_sender_init_range(TcpSender *s, uint64_t transfer_id, const TcpSrcSegment *segs, size_t n,
                          uint64_t start, uint64_t end, uint32_t chunk_size, bool crc)
{
        SegList l = {.src = segs, .n = n};
        TcpStreamCursor cur;
        int r;

        if (chunk_size > TCP_STREAM_CHUNK_MAX)
                return -EINVAL;
        r = range_seek(&l, start, end, &cur);
        if (r < 0)
                return r;

        *s = (TcpSender){
                .transfer_id = transfer_id,
                .segs = segs,
                .n_segs = n,
                .end = end,
                .pos = start,
                .cur = cur,
                .chunk_size = chunk_size ? chunk_size : TCP_STREAM_CHUNK_DEFAULT,
                .crc = crc,
        };
        return 0;
}

int tcp_sender_init(TcpSender *s, uint64_t transfer_id, const TcpSrcSegment *segs, size_t n,
                    uint32_t chunk_size, bool crc)
{
        SegList l = {.src = segs, .n = n};
        uint64_t total;
        int r;

        r = seg_total(&l, &total);
        if (r < 0)
                return r;
        return tcp_sender_init_range(s, transfer_id, segs, n, 0, total, chunk_size, crc);
}

int tcp_sender_init_aborted(TcpSender *s, uint64_t transfer_id, uint64_t start, uint64_t end,
                            bool crc)
{
        if (start >= end)
                return -EINVAL;

        *s = (TcpSender){
                .transfer_id = transfer_id,
                .end = end,
                .pos = start,
                .chunk_size = TCP_STREAM_CHUNK_DEFAULT,
                .crc = crc,
                .abort = true,
        };
        return 0;
}

void tcp_sender_abort(TcpSender *s)
{
        s->abort = true;
}

static void sender_put_header(TcpSender *s, uint32_t flags, uint32_t len, uint32_t crc)
{
        put_le32(s->hdr + 0, TCP_STREAM_MAGIC);
        put_le32(s->hdr + 4, flags | (s->crc ? TCP_STREAM_FLAG_CRC : 0));
        put_le64(s->hdr + 8, s->transfer_id);
        put_le64(s->hdr + 16, s->pos);
        put_le32(s->hdr + 24, len);
        put_le32(s->hdr + 28, crc);
        s->hdr_sent = 0;
        s->chunk_end = s->pos + len;
        s->in_chunk = true;
}

/* The ABORT chunk is a header alone: the step loop sends it like any chunk with no payload. */
static void sender_begin_abort(TcpSender *s)
{
        sender_put_header(s, TCP_STREAM_FLAG_ABORT, 0, 0);
        s->aborted = true;
}

static void sender_begin_chunk(TcpSender *s)
{
        SegList l = sender_list(s);
        uint32_t len = (uint32_t)MIN(s->end - s->pos, (uint64_t)s->chunk_size);
        uint32_t crc = s->crc ? cursor_crc(&l, s->cur, len, 0) : 0;

        sender_put_header(s, 0, len, crc);
}

int tcp_sender_step_max(TcpSender *s, int fd, uint64_t max_bytes)
{
        SegList l = sender_list(s);
        uint64_t moved = 0;

        if (s->error < 0)
                return s->error;

        for (;;) {
                struct iovec iov[IOV_BATCH];
                struct msghdr msg = {.msg_iov = iov};
                size_t k = 0;
                ssize_t n;
                uint64_t done;

                if (!s->in_chunk && (s->aborted || s->pos >= s->end))
                        return TCP_STREAM_DONE;
                if (moved > 0 && moved >= max_bytes)
                        return TCP_STREAM_MORE;
                if (!s->in_chunk) {
                        if (s->abort)
                                sender_begin_abort(s);
                        else
                                sender_begin_chunk(s);
                }

                if (s->hdr_sent < TCP_STREAM_HEADER_SIZE) {
                        iov[k].iov_base = s->hdr + s->hdr_sent;
                        iov[k].iov_len = TCP_STREAM_HEADER_SIZE - s->hdr_sent;
                        k++;
                }
                k += cursor_iov(&l, s->cur, s->chunk_end - s->pos, iov + k, IOV_BATCH - k);
                msg.msg_iovlen = k;

                n = sendmsg(fd, &msg, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return TCP_STREAM_BLOCKED;
                        s->error = -errno;
                        return s->error;
                }

                moved += (uint64_t)n;
                done = (uint64_t)n;
                if (s->hdr_sent < TCP_STREAM_HEADER_SIZE) {
                        uint64_t left = TCP_STREAM_HEADER_SIZE - s->hdr_sent;
                        uint32_t h = (uint32_t)MIN(done, left);

                        s->hdr_sent += h;
                        done -= h;
                }
                cursor_advance(&l, &s->cur, done);
                s->pos += done;
                if (s->hdr_sent == TCP_STREAM_HEADER_SIZE && s->pos == s->chunk_end)
                        s->in_chunk = false;
        }
}

int tcp_sender_step(TcpSender *s, int fd)
{
        return tcp_sender_step_max(s, fd, UINT64_MAX);
}

int tcp_receiver_init_range(TcpReceiver *r, uint64_t transfer_id, const TcpDstSegment *segs,
                            size_t n, uint64_t start, uint64_t end, bool crc)
{
        SegList l = {.dst = segs, .n = n};
        TcpStreamCursor cur;
        int k;

        k = range_seek(&l, start, end, &cur);
        if (k < 0)
                return k;

        *r = (TcpReceiver){
                .transfer_id = transfer_id,
                .segs = segs,
                .n_segs = n,
                .end = end,
                .pos = start,
                .cur = cur,
                .crc = crc,
        };
        return 0;
}

int tcp_receiver_init(TcpReceiver *r, uint64_t transfer_id, const TcpDstSegment *segs, size_t n,
                      bool crc)
{
        SegList l = {.dst = segs, .n = n};
        uint64_t total;
        int k;

        k = seg_total(&l, &total);
        if (k < 0)
                return k;
        return tcp_receiver_init_range(r, transfer_id, segs, n, 0, total, crc);
}

int tcp_receiver_init_discard(TcpReceiver *r, uint64_t transfer_id, uint64_t start, uint64_t end,
                              bool crc, void *scratch, size_t scratch_len)
{
        if (start > end || !scratch || scratch_len == 0)
                return -EINVAL;

        *r = (TcpReceiver){
                .transfer_id = transfer_id,
                .end = end,
                .pos = start,
                .crc = crc,
                .scratch = scratch,
                .scratch_len = scratch_len,
        };
        return 0;
}

int tcp_receiver_discard(TcpReceiver *r, void *scratch, size_t scratch_len)
{
        if (!scratch || scratch_len == 0)
                return -EINVAL;

        r->scratch = scratch;
        r->scratch_len = scratch_len;
        r->segs = NULL;
        r->n_segs = 0;
        r->cur = (TcpStreamCursor){.seg = 0, .off = 0};
        if (r->error == -EILSEQ)
                r->error = 0;
        return 0;
}

/* Checks a parsed header against what this receiver expects next; touches no destination. */
static int receiver_accept(TcpReceiver *r, const TcpStreamHeader *h)
{
        if (h->transfer_id != r->transfer_id)
                return -EPROTO;
        /* In order on one connection: anything but the next offset is a violation. */
        if (r->pos >= r->end || h->offset != r->pos)
                return -EPROTO;
        if (h->flags & TCP_STREAM_FLAG_ABORT)
                return -ECANCELED;
        if (h->length > r->end - r->pos)
                return -EPROTO;

        r->chunk_end = r->pos + h->length;
        r->chunk_crc = h->crc;
        r->crc_run = 0;
        r->in_chunk = true;
        return 0;
}

static int receiver_accept_header(TcpReceiver *r)
{
        TcpStreamHeader h;
        int q;

        q = tcp_stream_header_parse(r->hdr, r->crc, &h);
        if (q < 0)
                return q;
        return receiver_accept(r, &h);
}

static int receiver_fail(TcpReceiver *r, int error)
{
        r->error = error;
        return error;
}

int tcp_receiver_start(TcpReceiver *r, const TcpStreamHeader *h)
{
        int q;

        if (r->error < 0)
                return r->error;
        if (r->in_chunk || r->hdr_got > 0)
                return -EBUSY;
        q = receiver_accept(r, h);
        if (q < 0)
                return receiver_fail(r, q);
        return 0;
}

/* Reads payload of the chunk in progress into the scratch buffer; no CRC, no destination. */
static ssize_t receiver_read_discard(TcpReceiver *r, int fd)
{
        size_t want = (size_t)MIN(r->chunk_end - r->pos, (uint64_t)r->scratch_len);

        return recv(fd, r->scratch, want, 0);
}

int tcp_receiver_step_max(TcpReceiver *r, int fd, uint64_t max_bytes)
{
        SegList l = receiver_list(r);
        uint64_t moved = 0;

        if (r->error < 0)
                return r->error;

        for (;;) {
                struct iovec iov[IOV_BATCH];
                size_t k;
                ssize_t n;
                int q;

                if (!r->in_chunk && r->pos >= r->end)
                        return TCP_STREAM_DONE;
                if (moved > 0 && moved >= max_bytes)
                        return TCP_STREAM_MORE;
                if (!r->in_chunk) {
                        /* Only the header: not one payload byte is read before it is checked. */
                        n = recv(fd, r->hdr + r->hdr_got, TCP_STREAM_HEADER_SIZE - r->hdr_got, 0);
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                if (errno == EAGAIN || errno == EWOULDBLOCK)
                                        return TCP_STREAM_BLOCKED;
                                return receiver_fail(r, -errno);
                        }
                        if (n == 0)
                                return receiver_fail(r, -ECONNRESET);
                        moved += (uint64_t)n;
                        r->hdr_got += (uint32_t)n;
                        if (r->hdr_got < TCP_STREAM_HEADER_SIZE)
                                continue;
                        r->hdr_got = 0;
                        q = receiver_accept_header(r);
                        if (q < 0)
                                return receiver_fail(r, q);
                }

                if (r->scratch) {
                        n = receiver_read_discard(r, fd);
                } else {
                        /* chunk_end <= end <= the job's size: the iovec lies inside the segments */
                        k = cursor_iov(&l, r->cur, r->chunk_end - r->pos, iov, IOV_BATCH);
                        n = readv(fd, iov, (int)k);
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return TCP_STREAM_BLOCKED;
                        return receiver_fail(r, -errno);
                }
                if (n == 0)
                        return receiver_fail(r, -ECONNRESET);
                moved += (uint64_t)n;

                if (r->scratch) {
                        r->pos += (uint64_t)n;
                        if (r->pos == r->chunk_end)
                                r->in_chunk = false;
                        continue;
                }
                if (r->crc)
                        r->crc_run = cursor_crc(&l, r->cur, (uint64_t)n, r->crc_run);
                cursor_advance(&l, &r->cur, (uint64_t)n);
                r->pos += (uint64_t)n;
                if (r->pos == r->chunk_end) {
                        r->in_chunk = false;
                        if (r->crc && r->crc_run != r->chunk_crc)
                                return receiver_fail(r, -EILSEQ);
                }
        }
}

int tcp_receiver_step(TcpReceiver *r, int fd)
{
        return tcp_receiver_step_max(r, fd, UINT64_MAX);
}
