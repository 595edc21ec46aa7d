/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the TCP stream data path (tcp-stream.c): round trips over socketpairs and real
 * loopback TCP with scattered segments and tiny socket buffers, hostile or corrupt streams that
 * must be rejected without a byte landing outside the destination, parallel streams, ABORT
 * chunks, discard mode and byte budgets.
 */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "crc32c.h"
#include "macro.h"
#include "tcp-stream.h"

#define GUARD 24
#define GUARD_BYTE 0xa5
#define FILL_BYTE 0x00          /* destination before anything lands; payload bytes are never 0 */
#define POLL_TIMEOUT_MS 10000

/* ---- seeded data ---- */

static uint64_t rnd_next(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

/* A job: scattered source segments, scattered destination segments with guards around each. */
typedef struct Job {
        uint64_t total;
        uint8_t *expect;                /* the logical byte stream, total bytes, none of them 0 */
        uint8_t *src_buf;
        TcpSrcSegment *src;
        size_t n_src;
        uint8_t *dst_buf;
        size_t dst_buf_len;
        TcpDstSegment *dst;
        size_t n_dst;
} Job;

/* Random segment lengths (odd sizes, some empty) in [0, @max] that add up to @total. */
static size_t cut_lengths(uint64_t *seed, uint64_t total, size_t max, size_t **ret)
{
        size_t cap = 16, n = 0;
        size_t *lens = malloc(cap * sizeof(*lens));

        ck_assert_ptr_nonnull(lens);
        while (total > 0) {
                size_t len = (size_t)(rnd_next(seed) % (max + 1));

                if (rnd_next(seed) % 16 == 0)
                        len = 0;
                len = (size_t)MIN((uint64_t)len, total);
                if (n == cap) {
                        cap *= 2;
                        lens = realloc(lens, cap * sizeof(*lens));
                        ck_assert_ptr_nonnull(lens);
                }
                lens[n++] = len;
                total -= len;
        }
        *ret = lens;
        return n;
}

static Job *job_new(uint64_t seed, uint64_t total, size_t max_src_seg, size_t max_dst_seg)
{
        Job *j = calloc(1, sizeof(*j));
        _cleanup_free_ size_t *src_lens = NULL, *dst_lens = NULL;
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
        size_t src_space = 0, pos;
        uint64_t logical = 0;

        ck_assert_ptr_nonnull(j);
        j->total = total;
        j->expect = malloc(total + 1);
        ck_assert_ptr_nonnull(j->expect);
        for (uint64_t i = 0; i < total; i++)
                j->expect[i] = (uint8_t)(rnd_next(&s) % 255 + 1);

        j->n_src = cut_lengths(&s, total, max_src_seg, &src_lens);
        j->src = calloc(j->n_src + 1, sizeof(*j->src));
        ck_assert_ptr_nonnull(j->src);
        for (size_t i = 0; i < j->n_src; i++)
                src_space += src_lens[i] + 13;
        j->src_buf = malloc(src_space + 1);
        ck_assert_ptr_nonnull(j->src_buf);
        memset(j->src_buf, 0xee, src_space);
        pos = 0;
        for (size_t i = 0; i < j->n_src; i++) {
                pos += (size_t)(rnd_next(&s) % 13);
                memcpy(j->src_buf + pos, j->expect + logical, src_lens[i]);
                j->src[i] = (TcpSrcSegment){ .src = j->src_buf + pos, .len = src_lens[i] };
                pos += src_lens[i];
                logical += src_lens[i];
        }

        j->n_dst = cut_lengths(&s, total, max_dst_seg, &dst_lens);
        j->dst = calloc(j->n_dst + 1, sizeof(*j->dst));
        ck_assert_ptr_nonnull(j->dst);
        j->dst_buf_len = GUARD;
        for (size_t i = 0; i < j->n_dst; i++)
                j->dst_buf_len += dst_lens[i] + GUARD;
        j->dst_buf = malloc(j->dst_buf_len);
        ck_assert_ptr_nonnull(j->dst_buf);
        memset(j->dst_buf, GUARD_BYTE, j->dst_buf_len);
        pos = GUARD;
        for (size_t i = 0; i < j->n_dst; i++) {
                j->dst[i] = (TcpDstSegment){ .dst = j->dst_buf + pos, .len = dst_lens[i] };
                memset(j->dst_buf + pos, FILL_BYTE, dst_lens[i]);
                pos += dst_lens[i] + GUARD;
        }
        return j;
}

static void job_free(Job *j)
{
        free(j->expect);
        free(j->src_buf);
        free(j->src);
        free(j->dst_buf);
        free(j->dst);
        free(j);
}

/*
 * Asserts that logical bytes [@lo, @hi) of the destination hold the job's bytes, that every other
 * destination byte is untouched, and that every guard byte is intact. (Plain ifs: ck_assert
 * marks a point with a write to Check's pipe each time, far too slow per byte.)
 */
static void job_check(const Job *j, uint64_t lo, uint64_t hi)
{
        uint64_t logical = 0;
        size_t pos = 0;

        for (size_t i = 0; i < j->n_dst; i++) {
                const uint8_t *d = j->dst[i].dst;

                for (; j->dst_buf + pos < d; pos++)
                        if (j->dst_buf[pos] != GUARD_BYTE)
                                ck_abort_msg("guard byte at %zu overwritten", pos);
                for (size_t k = 0; k < j->dst[i].len; k++, logical++) {
                        bool in = logical >= lo && logical < hi;

                        if (in && d[k] != j->expect[logical])
                                ck_abort_msg("byte %llu: got %u want %u",
                                             (unsigned long long)logical, d[k],
                                             j->expect[logical]);
                        if (!in && d[k] != FILL_BYTE)
                                ck_abort_msg("byte %llu written outside [%llu, %llu)",
                                             (unsigned long long)logical,
                                             (unsigned long long)lo, (unsigned long long)hi);
                }
                pos += j->dst[i].len;
        }
        for (; pos < j->dst_buf_len; pos++)
                if (j->dst_buf[pos] != GUARD_BYTE)
                        ck_abort_msg("guard byte at %zu overwritten", pos);
        ck_assert_uint_eq(logical, j->total);
}

/* Puts the destination back as job_new() left it. */
static void job_reset_dst(Job *j)
{
        memset(j->dst_buf, GUARD_BYTE, j->dst_buf_len);
        for (size_t i = 0; i < j->n_dst; i++)
                memset(j->dst[i].dst, FILL_BYTE, j->dst[i].len);
        job_check(j, 0, 0);
}

/* ---- short I/O ---- */

/*
 * While io_cap is set, every sendmsg(), recv() and readv() in this process moves at most io_cap
 * bytes, so that writes and reads stop inside headers and payloads at chosen points. These
 * definitions replace libc's for the module under test too; the kernel does the real work.
 */
static size_t io_cap;

static size_t cap_iov(const struct iovec *in, size_t n, struct iovec *out, size_t max)
{
        size_t k = 0, left = io_cap;

        for (size_t i = 0; i < n && k < max && left > 0; i++) {
                out[k] = in[i];
                out[k].iov_len = MIN(out[k].iov_len, left);
                left -= out[k].iov_len;
                k++;
        }
        return k;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
        struct iovec iov[1024];
        struct msghdr m = *msg;

        if (io_cap > 0) {
                m.msg_iovlen = cap_iov(msg->msg_iov, msg->msg_iovlen, iov, ARRAY_SIZE(iov));
                m.msg_iov = iov;
        }
        return syscall(SYS_sendmsg, fd, &m, flags);
}

ssize_t readv(int fd, const struct iovec *in, int n)
{
        struct iovec iov[1024];

        if (io_cap > 0) {
                n = (int)cap_iov(in, (size_t)n, iov, ARRAY_SIZE(iov));
                in = iov;
        }
        return syscall(SYS_readv, fd, in, n);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
        if (io_cap > 0)
                len = MIN(len, io_cap);
        return syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

/* ---- sockets ---- */

static void set_nonblock(int fd)
{
        int fl = fcntl(fd, F_GETFL);

        ck_assert_int_ge(fl, 0);
        ck_assert_int_eq(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

static void set_bufs(int fd, int snd, int rcv)
{
        if (snd > 0)
                ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd)), 0);
        if (rcv > 0)
                ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)), 0);
}

static void unix_pair(int fds[2], int bufsize)
{
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
                         0);
        set_bufs(fds[0], bufsize, bufsize);
        set_bufs(fds[1], bufsize, bufsize);
}

/* A connected loopback TCP pair on an ephemeral port: fds[0] connects, fds[1] was accepted. */
static void tcp_pair(int fds[2], int bufsize)
{
        struct sockaddr_in sin = { .sin_family = AF_INET };
        socklen_t len = sizeof(sin);
        _cleanup_close_ int l = -1;
        int one = 1;

        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(l, 0);
        /* Set before connect/listen so that the window is negotiated small as well. */
        set_bufs(l, bufsize, bufsize);
        ck_assert_int_eq(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sin, &len), 0);
        ck_assert_int_eq(listen(l, 4), 0);
        fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fds[0], 0);
        set_bufs(fds[0], bufsize, bufsize);
        ck_assert_int_eq(connect(fds[0], (struct sockaddr *)&sin, sizeof(sin)), 0);
        fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        ck_assert_int_ge(fds[1], 0);
        set_bufs(fds[1], bufsize, bufsize);
        for (int i = 0; i < 2; i++) {
                set_nonblock(fds[i]);
                ck_assert_int_eq(setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)),
                                 0);
        }
}

typedef struct Stats {
        unsigned send_blocked;  /* sender steps that returned 0 */
        unsigned recv_blocked;  /* receiver steps that returned 0 */
} Stats;

/*
 * Drives @n sender/receiver pairs (sender i writes fds[i][0], receiver i reads fds[i][1]) from
 * one thread, alternating by poll() until every pair is done or one side fails. Returns 1 when
 * all are done, else the first error (receiver errors first).
 */
static int drive(TcpSender *snd, TcpReceiver *rcv, int (*fds)[2], size_t n, Stats *st)
{
        bool sdone[8] = { false }, rdone[8] = { false };

        ck_assert_uint_le(n, 8);
        for (;;) {
                struct pollfd p[16];
                size_t np = 0, open = 0;
                int r;

                for (size_t i = 0; i < n; i++) {
                        if (!sdone[i]) {
                                r = tcp_sender_step(&snd[i], fds[i][0]);
                                if (r < 0)
                                        return r;
                                if (r == 0 && st)
                                        st->send_blocked++;
                                sdone[i] = r == 1;
                        }
                        if (!rdone[i]) {
                                r = tcp_receiver_step(&rcv[i], fds[i][1]);
                                if (r < 0)
                                        return r;
                                if (r == 0 && st)
                                        st->recv_blocked++;
                                rdone[i] = r == 1;
                        }
                }
                for (size_t i = 0; i < n; i++) {
                        if (!sdone[i])
                                p[np++] = (struct pollfd){ .fd = fds[i][0], .events = POLLOUT };
                        if (!rdone[i])
                                p[np++] = (struct pollfd){ .fd = fds[i][1], .events = POLLIN };
                        open += !sdone[i] + !rdone[i];
                }
                if (open == 0)
                        return 1;
                r = poll(p, np, POLL_TIMEOUT_MS);
                ck_assert_msg(r > 0, "poll: stuck (%d)", r);
        }
}

/* Sends a whole job as one stream and returns the bytes the sender put on the wire. */
static uint8_t *capture(const Job *j, uint64_t id, uint32_t chunk, bool crc, size_t *ret_len)
{
        _cleanup_close_ int a = -1, b = -1;
        size_t cap = 4096, len = 0;
        uint8_t *buf = malloc(cap);
        TcpSender s;
        int fds[2], r;

        ck_assert_ptr_nonnull(buf);
        unix_pair(fds, 0);
        a = fds[0];
        b = fds[1];
        ck_assert_int_eq(tcp_sender_init(&s, id, j->src, j->n_src, chunk, crc), 0);
        do {
                ssize_t n;

                r = tcp_sender_step(&s, a);
                ck_assert_int_ge(r, 0);
                for (;;) {
                        if (cap - len < 65536) {
                                cap *= 2;
                                buf = realloc(buf, cap);
                                ck_assert_ptr_nonnull(buf);
                        }
                        n = read(b, buf + len, cap - len);
                        if (n < 0 && errno == EAGAIN)
                                break;
                        ck_assert_int_gt(n, 0);
                        len += (size_t)n;
                }
        } while (r == 0);
        *ret_len = len;
        return buf;
}

/*
 * Feeds @len bytes of @buf to @r over a fresh socketpair, closing the write side afterwards when
 * @eof. Returns the receiver's verdict: 1, an error, or 0 when it is still waiting for more.
 */
static int feed(TcpReceiver *r, const uint8_t *buf, size_t len, bool eof)
{
        _cleanup_close_ int a = -1, b = -1;
        size_t off = 0;
        bool shut = false;
        int fds[2], q;

        unix_pair(fds, 0);
        a = fds[0];
        b = fds[1];
        for (;;) {
                struct pollfd p = { .fd = b, .events = POLLIN };

                while (off < len) {
                        ssize_t n = write(a, buf + off, len - off);

                        if (n < 0 && errno == EAGAIN)
                                break;
                        ck_assert_int_gt(n, 0);
                        off += (size_t)n;
                }
                if (off == len && eof && !shut) {
                        ck_assert_int_eq(shutdown(a, SHUT_WR), 0);
                        shut = true;
                }
                q = tcp_receiver_step(r, b);
                if (q != 0)
                        return q;
                if (off == len && poll(&p, 1, 100) == 0)
                        return 0;
        }
}

/* Appends one hand-made chunk header to @buf (which must have room). */
static size_t put_header(uint8_t *buf, uint32_t magic, uint32_t flags, uint64_t id,
                         uint64_t offset, uint32_t len, uint32_t crc)
{
        uint64_t f[6] = { magic, flags, id, offset, len, crc };
        unsigned w[6] = { 4, 4, 8, 8, 4, 4 };
        size_t p = 0;

        for (unsigned i = 0; i < 6; i++)
                for (unsigned k = 0; k < w[i]; k++)
                        buf[p++] = (uint8_t)(f[i] >> (8 * k));
        return p;
}

/* Appends a well-formed-looking chunk carrying the job's bytes at @offset (or any, if outside). */
static size_t put_chunk(uint8_t *buf, const Job *j, uint32_t magic, uint32_t flags, uint64_t id,
                        uint64_t offset, uint32_t len, bool crc)
{
        size_t p;
        uint8_t *payload;

        p = put_header(buf, magic, flags, id, offset, len, 0);
        payload = buf + p;
        for (uint32_t i = 0; i < len; i++)
                payload[i] = offset + i < j->total ? j->expect[offset + i] : 0x77;
        if (crc)
                put_header(buf, magic, flags, id, offset, len, crc32c(0, payload, len));
        return p + len;
}

/* ---- tests ---- */

START_TEST(test_split)
{
        TcpStreamRange r[8];
        static const struct {
                uint64_t total;
                unsigned n;
                uint64_t min;
                int want;
        } cases[] = {
                { 0, 4, 1, 0 },       { 1, 4, 1, 1 },         { 10, 4, 1, 4 },
                { 10, 4, 3, 3 },      { 10, 4, 11, 1 },       { 10, 4, 0, 4 },
                { 1000003, 4, 1024, 4 }, { 4096, 8, 1024, 4 }, { 3, 8, 1, 3 },
                { UINT64_MAX, 8, 1, 8 },
        };

        ck_assert_int_eq(tcp_stream_split(10, 0, 1, r), -EINVAL);
        for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
                uint64_t pos = 0, lo = UINT64_MAX, hi = 0;
                int n = tcp_stream_split(cases[c].total, cases[c].n, cases[c].min, r);

                ck_assert_msg(n == cases[c].want, "case %zu: %d ranges, want %d", c, n,
                              cases[c].want);
                for (int i = 0; i < n; i++) {
                        uint64_t len = r[i].end - r[i].start;

                        ck_assert_uint_eq(r[i].start, pos);
                        ck_assert_uint_gt(r[i].end, r[i].start);
                        if (n > 1)
                                ck_assert_uint_ge(len, cases[c].min);
                        lo = MIN(lo, len);
                        hi = MAX(hi, len);
                        pos = r[i].end;
                }
                ck_assert_uint_eq(pos, cases[c].total);
                if (n > 0)
                        ck_assert_uint_le(hi - lo, 1);
        }
}
END_TEST

START_TEST(test_init_invalid)
{
        uint8_t a[10], b[10];
        TcpSrcSegment src[2] = { { a, 10 }, { NULL, 0 } };
        TcpSrcSegment bad_src[1] = { { NULL, 5 } };
        TcpSrcSegment huge[2] = { { a, SIZE_MAX }, { a, 2 } };
        TcpDstSegment dst[2] = { { b, 10 }, { NULL, 0 } };
        TcpDstSegment bad_dst[1] = { { NULL, 5 } };
        uint64_t total = 0;
        TcpSender s;
        TcpReceiver r;

        ck_assert_int_eq(tcp_sender_init(&s, 1, src, 2, 0, true), 0);
        ck_assert_uint_eq(s.chunk_size, TCP_STREAM_CHUNK_DEFAULT);
        ck_assert_int_eq(tcp_sender_init(&s, 1, bad_src, 1, 0, true), -EINVAL);
        ck_assert_int_eq(tcp_sender_init(&s, 1, src, 2, TCP_STREAM_CHUNK_MAX + 1, true),
                         -EINVAL);
        ck_assert_int_eq(tcp_sender_init_range(&s, 1, src, 2, 4, 3, 0, true), -EINVAL);
        ck_assert_int_eq(tcp_sender_init_range(&s, 1, src, 2, 0, 11, 0, true), -EINVAL);
        ck_assert_int_eq(tcp_stream_src_total(huge, 2, &total), -EOVERFLOW);
        ck_assert_int_eq(tcp_stream_src_total(src, 2, &total), 0);
        ck_assert_uint_eq(total, 10);
        ck_assert_int_eq(tcp_stream_dst_total(dst, 2, &total), 0);
        ck_assert_uint_eq(total, 10);

        ck_assert_int_eq(tcp_receiver_init(&r, 1, dst, 2, true), 0);
        ck_assert_int_eq(tcp_receiver_init(&r, 1, bad_dst, 1, true), -EINVAL);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 1, dst, 2, 5, 4, true), -EINVAL);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 1, dst, 2, 0, 11, true), -EINVAL);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 1, dst, 2, 10, 10, true), 0);
        /* An empty range is complete at once, without touching the socket. */
        ck_assert_int_eq(tcp_receiver_step(&r, -1), 1);
        ck_assert_int_eq(tcp_sender_init_range(&s, 1, src, 2, 3, 3, 0, true), 0);
        ck_assert_int_eq(tcp_sender_step(&s, -1), 1);
}
END_TEST

/* Round trip configurations: job size, segment size limits, chunk size, CRC. */
static const struct {
        uint64_t total;
        size_t max_src, max_dst;
        uint32_t chunk;
        bool crc;
} rt_cases[] = {
        { 300001, 5000, 7000, 0, true },
        { 300001, 5000, 7000, 0, false },
        { 5003, 37, 11, 1, true },
        { 5003, 37, 11, 1, false },
        { 200003, 1, 9000, 4097, true },        /* one-byte source segments: IOV_BATCH splits */
        { 200003, 9000, 1, 4097, false },       /* one-byte destination segments */
        { 1 << 20, 65536 + 3, 100003, 65537, true },
        { 3000017, 300007, 250001, 0, true },
        { 1, 1, 1, 0, true },
};

static void round_trip(int idx, bool tcp, int bufsize)
{
        Job *j = job_new((uint64_t)idx + (tcp ? 100 : 0), rt_cases[idx].total,
                         rt_cases[idx].max_src, rt_cases[idx].max_dst);
        TcpSender s;
        TcpReceiver r;
        int fds[1][2];
        Stats st = { 0 };

        if (tcp)
                tcp_pair(fds[0], bufsize);
        else
                unix_pair(fds[0], bufsize);
        ck_assert_int_eq(tcp_sender_init(&s, 42, j->src, j->n_src, rt_cases[idx].chunk,
                                         rt_cases[idx].crc),
                         0);
        ck_assert_int_eq(tcp_receiver_init(&r, 42, j->dst, j->n_dst, rt_cases[idx].crc), 0);
        ck_assert_int_eq(drive(&s, &r, fds, 1, &st), 1);
        job_check(j, 0, j->total);
        /* Both report done again without touching the socket. */
        ck_assert_int_eq(tcp_sender_step(&s, fds[0][0]), 1);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[0][1]), 1);
        if (bufsize > 0 && j->total > 100000) {
                /* Tiny buffers: the job cannot have gone through in one go either way. */
                ck_assert_uint_gt(st.send_blocked, 1);
                ck_assert_uint_gt(st.recv_blocked, 1);
        }
        close(fds[0][0]);
        close(fds[0][1]);
        job_free(j);
}

START_TEST(test_round_trip_unix)
{
        round_trip(_i, false, 0);
}
END_TEST

START_TEST(test_round_trip_unix_tiny)
{
        round_trip(_i, false, 2048);
}
END_TEST

START_TEST(test_round_trip_tcp)
{
        round_trip(_i, true, 0);
}
END_TEST

START_TEST(test_round_trip_tcp_tiny)
{
        round_trip(_i, true, 4096);
}
END_TEST

/* Every send and receive stops after a few bytes: resuming inside headers and payloads. */
START_TEST(test_round_trip_dribble)
{
        static const size_t caps[] = { 1, 5, 31, 33, 100, 4099 };
        Job *j = job_new(200 + (uint64_t)_i, 30011, 300, 500);
        TcpSender s;
        TcpReceiver r;
        int fds[1][2];
        Stats st = { 0 };
        bool crc = _i % 2 == 1;

        unix_pair(fds[0], 0);
        ck_assert_int_eq(tcp_sender_init(&s, 42, j->src, j->n_src, 1000, crc), 0);
        ck_assert_int_eq(tcp_receiver_init(&r, 42, j->dst, j->n_dst, crc), 0);
        io_cap = caps[_i];
        ck_assert_int_eq(drive(&s, &r, fds, 1, &st), 1);
        io_cap = 0;
        job_check(j, 0, j->total);
        close(fds[0][0]);
        close(fds[0][1]);
        job_free(j);
}
END_TEST

/* Nothing past the job is consumed: what follows on the connection is left for the caller. */
START_TEST(test_leaves_trailing_bytes)
{
        Job *j = job_new(7, 100000, 3000, 5000);
        _cleanup_free_ uint8_t *wire = NULL;
        uint8_t tail[5];
        size_t len;
        TcpReceiver r;
        int fds[2];

        wire = capture(j, 9, 4096, true, &len);
        wire = realloc(wire, len + 5);
        ck_assert_ptr_nonnull(wire);
        memcpy(wire + len, "TAIL!", 5);
        unix_pair(fds, 0);
        ck_assert_int_eq(write(fds[0], wire, len + 5), (ssize_t)(len + 5));
        ck_assert_int_eq(tcp_receiver_init(&r, 9, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), 1);
        job_check(j, 0, j->total);
        ck_assert_int_eq(read(fds[1], tail, sizeof(tail)), 5);
        ck_assert(memcmp(tail, "TAIL!", 5) == 0);
        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

START_TEST(test_crc_mismatch)
{
        Job *j = job_new(3, 10000, 300, 700);
        _cleanup_free_ uint8_t *wire = NULL;
        size_t len, chunk_len = TCP_STREAM_HEADER_SIZE + 1000;
        TcpReceiver r;

        wire = capture(j, 5, 1000, true, &len);
        ck_assert_uint_eq(len, 10 * chunk_len);

        /* A flipped payload byte in the third chunk: the first two chunks land, then -EILSEQ. */
        wire[2 * chunk_len + TCP_STREAM_HEADER_SIZE + 517] ^= 0x10;
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, len, true), -EILSEQ);
        ck_assert_int_eq(tcp_receiver_step(&r, -1), -EILSEQ);        /* sticky */
        /* The bad chunk landed as sent (and is not to be trusted); nothing else was written. */
        j->expect[2517] ^= 0x10;
        job_check(j, 0, 3000);
        j->expect[2517] ^= 0x10;
        wire[2 * chunk_len + TCP_STREAM_HEADER_SIZE + 517] ^= 0x10;

        /* A flipped bit in the CRC field of the first header. */
        job_reset_dst(j);
        wire[28] ^= 0x01;
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, len, true), -EILSEQ);
        job_check(j, 0, 1000);
        wire[28] ^= 0x01;

        /* The intact stream passes. */
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, len, true), 1);
        job_check(j, 0, j->total);
        job_free(j);
}
END_TEST

/* A rejected header: the verdict, nothing written, and its payload still unread on the socket. */
static void assert_header_rejected(const Job *j, const uint8_t *wire, size_t len, bool crc,
                                   int want)
{
        uint8_t after[TCP_STREAM_HEADER_SIZE + 16];
        TcpReceiver r;
        int fds[2];
        size_t expect_after = MIN(len - TCP_STREAM_HEADER_SIZE, (size_t)16);

        unix_pair(fds, 0);
        ck_assert_int_eq(write(fds[0], wire, len), (ssize_t)len);
        ck_assert_int_eq(tcp_receiver_init(&r, 77, j->dst, j->n_dst, crc), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), want);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), want);
        job_check(j, 0, 0);
        if (expect_after > 0) {
                ck_assert_int_eq(read(fds[1], after, expect_after), (ssize_t)expect_after);
                ck_assert(memcmp(after, wire + TCP_STREAM_HEADER_SIZE, expect_after) == 0);
        }
        close(fds[0]);
        close(fds[1]);
}

START_TEST(test_bad_header_rejected)
{
        Job *j = job_new(11, 4000, 100, 300);
        uint8_t wire[8192];
        const uint64_t T = j->total;
        size_t n;

        memset(wire, 0x33, sizeof(wire));

        /* -EBADMSG: magic, unknown flag, CRC flag disagreeing with the receiver, stray CRC. */
        n = put_chunk(wire, j, 0x5344564c, TCP_STREAM_FLAG_CRC, 77, 0, 100, true);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC | 0x2, 77, 0, 100, true);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, UINT32_C(1) << 31, 77, 0, 100, false);
        assert_header_rejected(j, wire, n, false, -EBADMSG);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, 0, 77, 0, 100, false);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, 100, true);
        assert_header_rejected(j, wire, n, false, -EBADMSG);
        n = put_header(wire, TCP_STREAM_MAGIC, 0, 77, 0, 100, 0x1234);
        memcpy(wire + n, j->expect, 100);
        assert_header_rejected(j, wire, n + 100, false, -EBADMSG);

        /* -EPROTO: wrong transfer, offsets outside or after the expected one, lengths. */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 78, 0, 100, true);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, T + 100, 100, true);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, T, 1, true);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_header(wire, TCP_STREAM_MAGIC, 0, 77, UINT64_MAX - 5, 100, 0);
        assert_header_rejected(j, wire, n + 100, false, -EPROTO);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 1, 100, true);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, (uint32_t)T + 1,
                      true);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_header(wire, TCP_STREAM_MAGIC, 0, 77, 0, UINT32_MAX, 0);
        memcpy(wire + n, j->expect, 100);
        assert_header_rejected(j, wire, n + 100, false, -EPROTO);
        n = put_header(wire, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, 0, 0);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        job_free(j);
}
END_TEST

/* A violation after good chunks: the good ones landed, nothing else did. */
START_TEST(test_bad_later_chunk)
{
        Job *j = job_new(12, 4000, 100, 300);
        uint8_t wire[16384];
        const uint32_t T = (uint32_t)j->total;
        TcpReceiver r;
        size_t n;

        /* Out of order: [0,100), then [300,400). */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, 100, true);
        n += put_chunk(wire + n, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 300, 100, true);
        ck_assert_int_eq(tcp_receiver_init(&r, 77, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EPROTO);
        job_check(j, 0, 100);

        job_reset_dst(j);
        /* A duplicate of the first chunk. */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, 0, 77, 0, 100, false);
        n += put_chunk(wire + n, j, TCP_STREAM_MAGIC, 0, 77, 0, 100, false);
        ck_assert_int_eq(tcp_receiver_init(&r, 77, j->dst, j->n_dst, false), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EPROTO);
        job_check(j, 0, 100);

        job_reset_dst(j);
        /* The last chunk runs one byte past the job. */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, T - 10, true);
        n += put_chunk(wire + n, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, T - 10, 11, true);
        ck_assert_int_eq(tcp_receiver_init(&r, 77, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EPROTO);
        job_check(j, 0, T - 10);

        job_reset_dst(j);
        /* A bad magic in the second header. */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, 100, true);
        n += put_chunk(wire + n, j, 0, TCP_STREAM_FLAG_CRC, 77, 100, 100, true);
        ck_assert_int_eq(tcp_receiver_init(&r, 77, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EBADMSG);
        job_check(j, 0, 100);
        job_free(j);
}
END_TEST

START_TEST(test_eof_mid_job)
{
        Job *j = job_new(13, 10000, 300, 700);
        _cleanup_free_ uint8_t *wire = NULL;
        size_t len, chunk_len = TCP_STREAM_HEADER_SIZE + 1000;
        TcpReceiver r;

        wire = capture(j, 5, 1000, true, &len);

        /* Mid-payload of the second chunk: 400 bytes of it land, then -ECONNRESET. */
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, chunk_len + TCP_STREAM_HEADER_SIZE + 400, true),
                         -ECONNRESET);
        job_check(j, 0, 1400);
        ck_assert_int_eq(tcp_receiver_step(&r, -1), -ECONNRESET);

        /* Without the EOF the receiver just waits. */
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, chunk_len + TCP_STREAM_HEADER_SIZE + 400, false), 0);

        /* Mid-header and at a chunk boundary. */
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, 2 * chunk_len + 10, true), -ECONNRESET);
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, 3 * chunk_len, true), -ECONNRESET);
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(feed(&r, wire, 0, true), -ECONNRESET);
        job_check(j, 0, 3000);
        job_free(j);
}
END_TEST

START_TEST(test_sender_peer_closed)
{
        Job *j = job_new(14, 1 << 20, 5000, 5000);
        TcpSender s;
        int fds[2], r;

        unix_pair(fds, 0);
        close(fds[1]);
        ck_assert_int_eq(tcp_sender_init(&s, 1, j->src, j->n_src, 0, true), 0);
        r = tcp_sender_step(&s, fds[0]);     /* no SIGPIPE, or the test would die here */
        ck_assert_int_eq(r, -EPIPE);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), -EPIPE);
        close(fds[0]);
        job_free(j);
}
END_TEST

/* A receiver for a range refuses chunks of the job that belong to another range. */
START_TEST(test_range_receiver)
{
        Job *j = job_new(15, 4000, 100, 300);
        uint8_t wire[8192];
        TcpReceiver r;
        size_t n;

        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, 100, true);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 77, j->dst, j->n_dst, 1000, 2000, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EPROTO);
        job_check(j, 0, 0);

        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 1000, 1001, true);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 77, j->dst, j->n_dst, 1000, 2000, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), -EPROTO);
        job_check(j, 0, 0);

        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 1000, 600, true);
        n += put_chunk(wire + n, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 1600, 400, true);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 77, j->dst, j->n_dst, 1000, 2000, true), 0);
        ck_assert_int_eq(feed(&r, wire, n, false), 1);
        ck_assert_uint_eq(r.pos, 2000);
        job_check(j, 1000, 2000);
        job_free(j);
}
END_TEST

/* One job over 4 loopback TCP connections, each carrying its own range. */
START_TEST(test_parallel_streams)
{
        Job *j = job_new(16 + (uint64_t)_i, 4000037, 70001, 90001);
        TcpStreamRange ranges[4];
        TcpSender s[4];
        TcpReceiver r[4];
        int fds[4][2], n;
        bool crc = _i == 0;

        n = tcp_stream_split(j->total, 4, 65536, ranges);
        ck_assert_int_eq(n, 4);
        for (int i = 0; i < n; i++) {
                tcp_pair(fds[i], _i == 1 ? 8192 : 0);
                ck_assert_int_eq(tcp_sender_init_range(&s[i], 99, j->src, j->n_src,
                                                       ranges[i].start, ranges[i].end, 100000,
                                                       crc),
                                 0);
                ck_assert_int_eq(tcp_receiver_init_range(&r[i], 99, j->dst, j->n_dst,
                                                         ranges[i].start, ranges[i].end, crc),
                                 0);
        }
        ck_assert_int_eq(drive(s, r, fds, (size_t)n, NULL), 1);
        job_check(j, 0, j->total);
        for (int i = 0; i < n; i++) {
                close(fds[i][0]);
                close(fds[i][1]);
        }
        job_free(j);
}
END_TEST

/* ---- aborts, header parsing, discard mode, byte budgets ---- */

/* Reads whatever is on @fd now (non-blocking) into @buf; returns the count. */
static size_t drain(int fd, uint8_t *buf, size_t cap)
{
        size_t len = 0;

        for (;;) {
                ssize_t n = read(fd, buf + len, cap - len);

                if (n < 0 && errno == EAGAIN)
                        return len;
                ck_assert_int_gt(n, 0);
                len += (size_t)n;
                ck_assert_uint_lt(len, cap);
        }
}

/* Asserts that @p holds an ABORT header for (@id, @offset) in a stream with CRCs when @crc. */
static void assert_abort_header(const uint8_t *p, uint64_t id, uint64_t offset, bool crc)
{
        TcpStreamHeader h;

        ck_assert_int_eq(tcp_stream_header_parse(p, crc, &h), 0);
        ck_assert_uint_eq(h.flags, TCP_STREAM_FLAG_ABORT | (crc ? TCP_STREAM_FLAG_CRC : 0));
        ck_assert_uint_eq(h.transfer_id, id);
        ck_assert_uint_eq(h.offset, offset);
        ck_assert_uint_eq(h.length, 0);
        ck_assert_uint_eq(h.crc, 0);
}

START_TEST(test_header_parse)
{
        uint8_t b[TCP_STREAM_HEADER_SIZE];
        TcpStreamHeader h = { 0 };
        const uint32_t A = TCP_STREAM_FLAG_ABORT, C = TCP_STREAM_FLAG_CRC;

        put_header(b, TCP_STREAM_MAGIC, C, 7, 4096, 100, 0xdeadbeef);
        ck_assert_int_eq(tcp_stream_header_parse(b, true, &h), 0);
        ck_assert_uint_eq(h.flags, C);
        ck_assert_uint_eq(h.transfer_id, 7);
        ck_assert_uint_eq(h.offset, 4096);
        ck_assert_uint_eq(h.length, 100);
        ck_assert_uint_eq(h.crc, 0xdeadbeef);
        put_header(b, TCP_STREAM_MAGIC, A, 8, 5, 0, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), 0);
        ck_assert_uint_eq(h.flags, A);
        ck_assert_uint_eq(h.offset, 5);
        put_header(b, TCP_STREAM_MAGIC, A | C, 8, UINT64_MAX, 0, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, true, &h), 0);

        /* ret is written only on success */
        h = (TcpStreamHeader){ .transfer_id = 99 };
        put_header(b, TCP_STREAM_MAGIC + 1, 0, 7, 0, 1, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EBADMSG);
        ck_assert_uint_eq(h.transfer_id, 99);
        put_header(b, TCP_STREAM_MAGIC, 0x4, 7, 0, 1, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EBADMSG);
        put_header(b, TCP_STREAM_MAGIC, A, 7, 0, 0, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, true, &h), -EBADMSG);
        put_header(b, TCP_STREAM_MAGIC, A | C, 7, 0, 0, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EBADMSG);
        put_header(b, TCP_STREAM_MAGIC, A, 7, 0, 1, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EBADMSG);
        put_header(b, TCP_STREAM_MAGIC, A | C, 7, 0, 0, 1);
        ck_assert_int_eq(tcp_stream_header_parse(b, true, &h), -EBADMSG);
        put_header(b, TCP_STREAM_MAGIC, 0, 7, 0, 0, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EPROTO);
        put_header(b, TCP_STREAM_MAGIC, 0, 7, UINT64_MAX, 1, 0);
        ck_assert_int_eq(tcp_stream_header_parse(b, false, &h), -EPROTO);
}
END_TEST

/* A sender asked to stop mid-chunk finishes the chunk, then ends the range with an ABORT. */
START_TEST(test_sender_abort)
{
        Job *j = job_new(21, 10000, 300, 700);
        size_t chunk_len = TCP_STREAM_HEADER_SIZE + 1000, len;
        _cleanup_free_ uint8_t *wire = malloc(65536);
        bool crc = _i == 1;
        TcpSender s;
        TcpReceiver r;
        int fds[2];

        ck_assert_ptr_nonnull(wire);
        unix_pair(fds, 0);
        ck_assert_int_eq(tcp_sender_init(&s, 31, j->src, j->n_src, 1000, crc), 0);
        /* Two chunks and part of the third, then stop. */
        io_cap = 500;
        while (s.pos < 2400)
                ck_assert_int_eq(tcp_sender_step_max(&s, fds[0], 1), TCP_STREAM_MORE);
        io_cap = 0;
        ck_assert(s.in_chunk);
        ck_assert_uint_lt(s.pos, 3000);
        tcp_sender_abort(&s);
        tcp_sender_abort(&s);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_uint_eq(s.pos, 3000);
        len = drain(fds[1], wire, 65536);
        ck_assert_uint_eq(len, 3 * chunk_len + TCP_STREAM_HEADER_SIZE);
        assert_abort_header(wire + 3 * chunk_len, 31, 3000, crc);

        /* The receiver lands the three chunks, then the range ends failed, in step. */
        memcpy(wire + len, "TAIL!", 5);
        ck_assert_int_eq(write(fds[0], wire, len + 5), (ssize_t)(len + 5));
        ck_assert_int_eq(tcp_receiver_init(&r, 31, j->dst, j->n_dst, crc), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -ECANCELED);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -ECANCELED);
        ck_assert_uint_eq(r.pos, 3000);
        job_check(j, 0, 3000);
        ck_assert_uint_eq(drain(fds[1], wire, 65536), 5);
        ck_assert(memcmp(wire, "TAIL!", 5) == 0);

        /* Before the first byte: the ABORT is all there is. */
        ck_assert_int_eq(tcp_sender_init_range(&s, 31, j->src, j->n_src, 500, 9000, 1000, crc), 0);
        tcp_sender_abort(&s);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_uint_eq(drain(fds[1], wire, 65536), TCP_STREAM_HEADER_SIZE);
        assert_abort_header(wire, 31, 500, crc);

        /* After the last byte: nothing more goes out. */
        ck_assert_int_eq(tcp_sender_init_range(&s, 31, j->src, j->n_src, 500, 1200, 1000, crc), 0);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        tcp_sender_abort(&s);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_uint_eq(drain(fds[1], wire, 65536), TCP_STREAM_HEADER_SIZE + 700);

        /* An aborted range's sender names no memory and sends the ABORT at the range's start. */
        ck_assert_int_eq(tcp_sender_init_aborted(&s, 32, 4000, 4000, crc), -EINVAL);
        ck_assert_int_eq(tcp_sender_init_aborted(&s, 32, 4001, 4000, crc), -EINVAL);
        ck_assert_int_eq(tcp_sender_init_aborted(&s, 32, 4000, 8000, crc), 0);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        len = drain(fds[1], wire, 65536);
        ck_assert_uint_eq(len, TCP_STREAM_HEADER_SIZE);
        assert_abort_header(wire, 32, 4000, crc);
        ck_assert_int_eq(write(fds[0], wire, len), (ssize_t)len);
        job_reset_dst(j);
        ck_assert_int_eq(tcp_receiver_init_range(&r, 32, j->dst, j->n_dst, 4000, 8000, crc), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -ECANCELED);
        job_check(j, 0, 0);

        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

/* ABORT chunks that break the rules are rejected like any bad header. */
START_TEST(test_abort_rejected)
{
        Job *j = job_new(22, 4000, 100, 300);
        const uint32_t A = TCP_STREAM_FLAG_ABORT, C = TCP_STREAM_FLAG_CRC;
        uint8_t wire[8192];
        size_t n;

        memset(wire, 0x33, sizeof(wire));
        /* A length (its "payload" stays unread), a CRC, a CRC flag that disagrees. */
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 77, 0, 100, 0);
        assert_header_rejected(j, wire, n + 100, true, -EBADMSG);
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 77, 0, 0, 0x1234);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        n = put_header(wire, TCP_STREAM_MAGIC, A, 77, 0, 0, 0);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 77, 0, 0, 0);
        assert_header_rejected(j, wire, n, false, -EBADMSG);
        /* A flag nobody knows. */
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, C | 0x4, 77, 0, 100, true);
        assert_header_rejected(j, wire, n, true, -EBADMSG);
        /* Another job's ABORT, or one at an offset that is not where the range stands. */
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 78, 0, 0, 0);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 77, 1, 0, 0);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        n = put_header(wire, TCP_STREAM_MAGIC, A | C, 77, j->total, 0, 0);
        assert_header_rejected(j, wire, n, true, -EPROTO);
        job_free(j);
}
END_TEST

/* The caller reads a header itself, picks the receiver by it, and the receiver goes on. */
START_TEST(test_receiver_start)
{
        Job *j = job_new(23, 20000, 300, 700);
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        TcpStreamHeader h;
        TcpStreamRange ranges[2];
        TcpReceiver r[2];
        TcpSender s;
        size_t len;
        int fds[2];

        ck_assert_int_eq(tcp_stream_split(j->total, 2, 1, ranges), 2);
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(tcp_receiver_init_range(&r[i], 5, j->dst, j->n_dst,
                                                         ranges[i].start, ranges[i].end, true),
                                 0);

        /* The second range arrives: its first header names it by its offset. */
        unix_pair(fds, 0);
        ck_assert_int_eq(tcp_sender_init_range(&s, 5, j->src, j->n_src, ranges[1].start,
                                               ranges[1].end, 3000, true),
                         0);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        ck_assert_int_eq(read(fds[1], hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
        ck_assert_int_eq(tcp_stream_header_parse(hdr, true, &h), 0);
        ck_assert_uint_eq(h.offset, ranges[1].start);
        /* The first range's receiver refuses it, without a sticky error. */
        ck_assert_int_eq(tcp_receiver_start(&r[0], &h), -EPROTO);
        ck_assert_int_eq(tcp_receiver_init_range(&r[0], 5, j->dst, j->n_dst, ranges[0].start,
                                                 ranges[0].end, true),
                         0);
        ck_assert_int_eq(tcp_receiver_start(&r[1], &h), 0);
        ck_assert_int_eq(tcp_receiver_start(&r[1], &h), -EBUSY);
        ck_assert_int_eq(tcp_receiver_step(&r[1], fds[1]), 1);
        job_check(j, ranges[1].start, ranges[1].end);

        /* An ABORT as a range's first chunk ends it at once. */
        ck_assert_int_eq(tcp_sender_init_aborted(&s, 5, ranges[0].start, ranges[0].end, true), 0);
        ck_assert_int_eq(tcp_sender_step(&s, fds[0]), 1);
        len = drain(fds[1], hdr, sizeof(hdr) + 1);
        ck_assert_uint_eq(len, sizeof(hdr));
        ck_assert_int_eq(tcp_stream_header_parse(hdr, true, &h), 0);
        ck_assert_int_eq(tcp_receiver_start(&r[0], &h), -ECANCELED);
        ck_assert_int_eq(tcp_receiver_step(&r[0], fds[1]), -ECANCELED);
        job_check(j, ranges[1].start, ranges[1].end);

        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

/* Discard mode from the start: the whole range is read and dropped, the stream stays in step. */
START_TEST(test_discard)
{
        Job *j = job_new(24, 10000, 300, 700);
        _cleanup_free_ uint8_t *wire = NULL;
        uint8_t scratch[77], tail[8];
        size_t len;
        TcpReceiver r;
        int fds[2];

        ck_assert_int_eq(tcp_receiver_init_discard(&r, 9, 0, 10, true, NULL, 10), -EINVAL);
        ck_assert_int_eq(tcp_receiver_init_discard(&r, 9, 0, 10, true, scratch, 0), -EINVAL);
        ck_assert_int_eq(tcp_receiver_init_discard(&r, 9, 11, 10, true, scratch, 10), -EINVAL);

        wire = capture(j, 9, 1000, _i == 1, &len);
        wire = realloc(wire, len + 5);
        ck_assert_ptr_nonnull(wire);
        memcpy(wire + len, "TAIL!", 5);
        /* A corrupt payload does not matter to a range nobody wants. */
        wire[TCP_STREAM_HEADER_SIZE + 3] ^= 0x40;
        unix_pair(fds, 0);
        ck_assert_int_eq(write(fds[0], wire, len + 5), (ssize_t)(len + 5));
        ck_assert_int_eq(
                tcp_receiver_init_discard(&r, 9, 0, j->total, _i == 1, scratch, sizeof(scratch)),
                0);
        io_cap = _i == 1 ? 13 : 0;
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), 1);
        io_cap = 0;
        ck_assert_uint_eq(r.pos, j->total);
        ck_assert_uint_eq(drain(fds[1], tail, sizeof(tail)), 5);
        ck_assert(memcmp(tail, "TAIL!", 5) == 0);
        job_check(j, 0, 0);

        /* Headers are still checked. */
        ck_assert_int_eq(write(fds[0], wire, TCP_STREAM_HEADER_SIZE), TCP_STREAM_HEADER_SIZE);
        ck_assert_int_eq(
                tcp_receiver_init_discard(&r, 10, 0, j->total, _i == 1, scratch, sizeof(scratch)),
                0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -EPROTO);
        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

/* Switching to discard mid-chunk: what landed stays, nothing more lands, the stream is in step. */
START_TEST(test_discard_midway)
{
        Job *j = job_new(25, 10000, 300, 700);
        _cleanup_free_ uint8_t *wire = NULL;
        size_t len, cut = TCP_STREAM_HEADER_SIZE + 1000 + TCP_STREAM_HEADER_SIZE + 400;
        uint8_t scratch[100], tail[8];
        TcpReceiver r;
        int fds[2];

        wire = capture(j, 9, 1000, true, &len);
        wire = realloc(wire, len + 5);
        ck_assert_ptr_nonnull(wire);
        memcpy(wire + len, "TAIL!", 5);
        unix_pair(fds, 0);
        ck_assert_int_eq(tcp_receiver_init(&r, 9, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(write(fds[0], wire, cut), (ssize_t)cut);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), 0);
        ck_assert_uint_eq(r.pos, 1400);
        ck_assert_int_eq(tcp_receiver_discard(&r, NULL, 1), -EINVAL);
        ck_assert_int_eq(tcp_receiver_discard(&r, scratch, sizeof(scratch)), 0);
        ck_assert_int_eq(write(fds[0], wire + cut, len + 5 - cut), (ssize_t)(len + 5 - cut));
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), 1);
        ck_assert_uint_eq(drain(fds[1], tail, sizeof(tail)), 5);
        job_check(j, 0, 1400);
        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

/* After a CRC mismatch the stream is in step: discard mode reads past the rest of the range. */
START_TEST(test_crc_mismatch_then_discard)
{
        Job *j = job_new(26, 10000, 300, 700);
        _cleanup_free_ uint8_t *wire = NULL;
        size_t len, chunk_len = TCP_STREAM_HEADER_SIZE + 1000;
        uint8_t scratch[4096], tail[8];
        TcpReceiver r;
        int fds[2];

        wire = capture(j, 5, 1000, true, &len);
        wire = realloc(wire, len + 5);
        ck_assert_ptr_nonnull(wire);
        memcpy(wire + len, "TAIL!", 5);
        wire[2 * chunk_len + TCP_STREAM_HEADER_SIZE + 517] ^= 0x10;
        unix_pair(fds, 0);
        ck_assert_int_eq(write(fds[0], wire, len + 5), (ssize_t)(len + 5));
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -EILSEQ);
        ck_assert_uint_eq(r.pos, 3000);
        ck_assert_int_eq(tcp_receiver_discard(&r, scratch, sizeof(scratch)), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), 1);
        ck_assert_uint_eq(drain(fds[1], tail, sizeof(tail)), 5);
        ck_assert(memcmp(tail, "TAIL!", 5) == 0);
        j->expect[2517] ^= 0x10;
        job_check(j, 0, 3000);

        /* Discard mode clears nothing but -EILSEQ. */
        job_reset_dst(j);
        ck_assert_int_eq(write(fds[0], wire + chunk_len, chunk_len), (ssize_t)chunk_len);
        ck_assert_int_eq(tcp_receiver_init(&r, 5, j->dst, j->n_dst, true), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -EPROTO);
        ck_assert_int_eq(tcp_receiver_discard(&r, scratch, sizeof(scratch)), 0);
        ck_assert_int_eq(tcp_receiver_step(&r, fds[1]), -EPROTO);
        job_check(j, 0, 0);
        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

/* With a byte budget both sides come back with TCP_STREAM_MORE and still move every byte. */
START_TEST(test_step_budget)
{
        Job *j = job_new(27, 300001, 5000, 7000);
        unsigned more_s = 0, more_r = 0;
        bool sdone = false, rdone = false;
        TcpSender s;
        TcpReceiver r;
        int fds[2];

        unix_pair(fds, 0);
        ck_assert_int_eq(tcp_sender_init(&s, 3, j->src, j->n_src, 4096, true), 0);
        ck_assert_int_eq(tcp_receiver_init(&r, 3, j->dst, j->n_dst, true), 0);
        /* A budget of 0 still moves one system call's worth. */
        ck_assert_int_eq(tcp_sender_step_max(&s, fds[0], 0), TCP_STREAM_MORE);
        ck_assert_uint_gt(s.hdr_sent, 0);
        while (!sdone || !rdone) {
                struct pollfd p[2] = {
                        { .fd = fds[0], .events = POLLOUT },
                        { .fd = fds[1], .events = POLLIN },
                };
                int q;

                if (!sdone) {
                        q = tcp_sender_step_max(&s, fds[0], 10000);
                        ck_assert_int_ge(q, 0);
                        more_s += q == TCP_STREAM_MORE;
                        sdone = q == TCP_STREAM_DONE;
                }
                if (!rdone) {
                        q = tcp_receiver_step_max(&r, fds[1], 10000);
                        ck_assert_int_ge(q, 0);
                        more_r += q == TCP_STREAM_MORE;
                        rdone = q == TCP_STREAM_DONE;
                }
                if (!sdone && !rdone)
                        ck_assert_int_gt(poll(p, 2, POLL_TIMEOUT_MS), 0);
        }
        ck_assert_uint_gt(more_s, 0);
        ck_assert_uint_gt(more_r, 0);
        job_check(j, 0, j->total);
        close(fds[0]);
        close(fds[1]);
        job_free(j);
}
END_TEST

static Suite *tcp_stream_suite(void)
{
        Suite *s = suite_create("tcp-stream");
        TCase *tc;
        int n_rt = (int)ARRAY_SIZE(rt_cases);

        tc = tcase_create("split");
        tcase_add_test(tc, test_split);
        tcase_add_test(tc, test_init_invalid);
        suite_add_tcase(s, tc);

        tc = tcase_create("round-trip");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_round_trip_unix, 0, n_rt);
        tcase_add_loop_test(tc, test_round_trip_unix_tiny, 0, n_rt);
        tcase_add_loop_test(tc, test_round_trip_tcp, 0, n_rt);
        tcase_add_loop_test(tc, test_round_trip_tcp_tiny, 0, n_rt);
        tcase_add_loop_test(tc, test_round_trip_dribble, 0, 6);
        tcase_add_test(tc, test_leaves_trailing_bytes);
        suite_add_tcase(s, tc);

        tc = tcase_create("rejects");
        tcase_add_test(tc, test_crc_mismatch);
        tcase_add_test(tc, test_bad_header_rejected);
        tcase_add_test(tc, test_bad_later_chunk);
        tcase_add_test(tc, test_eof_mid_job);
        tcase_add_test(tc, test_sender_peer_closed);
        tcase_add_test(tc, test_range_receiver);
        suite_add_tcase(s, tc);

        tc = tcase_create("abort-discard");
        tcase_add_test(tc, test_header_parse);
        tcase_add_loop_test(tc, test_sender_abort, 0, 2);
        tcase_add_test(tc, test_abort_rejected);
        tcase_add_test(tc, test_receiver_start);
        tcase_add_loop_test(tc, test_discard, 0, 2);
        tcase_add_test(tc, test_discard_midway);
        tcase_add_test(tc, test_crc_mismatch_then_discard);
        tcase_add_test(tc, test_step_budget);
        suite_add_tcase(s, tc);

        tc = tcase_create("parallel");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_parallel_streams, 0, 2);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(tcp_stream_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
