/* SPDX-License-Identifier: MIT */
/* Shared set-up for the TCP stream tests: seeded jobs, short I/O, sockets, hand-made chunks. */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/macro.h"
#include "tests/unit/tcp-stream-fixture.h"

/* ---- seeded data ---- */

static uint64_t rnd_next(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

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

Job *job_new(uint64_t seed, uint64_t total, size_t max_src_seg, size_t max_dst_seg)
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
                j->src[i] = (TcpSrcSegment){.src = j->src_buf + pos, .len = src_lens[i]};
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
                j->dst[i] = (TcpDstSegment){.dst = j->dst_buf + pos, .len = dst_lens[i]};
                memset(j->dst_buf + pos, FILL_BYTE, dst_lens[i]);
                pos += dst_lens[i] + GUARD;
        }
        return j;
}

void job_free(Job *j)
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
void job_check(const Job *j, uint64_t lo, uint64_t hi)
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
                                             (unsigned long long)logical, d[k], j->expect[logical]);
                        if (!in && d[k] != FILL_BYTE)
                                ck_abort_msg("byte %llu written outside [%llu, %llu)",
                                             (unsigned long long)logical, (unsigned long long)lo,
                                             (unsigned long long)hi);
                }
                pos += j->dst[i].len;
        }
        for (; pos < j->dst_buf_len; pos++)
                if (j->dst_buf[pos] != GUARD_BYTE)
                        ck_abort_msg("guard byte at %zu overwritten", pos);
        ck_assert_uint_eq(logical, j->total);
}

/* Puts the destination back as job_new() left it. */
void job_reset_dst(Job *j)
{
        memset(j->dst_buf, GUARD_BYTE, j->dst_buf_len);
        for (size_t i = 0; i < j->n_dst; i++)
                memset(j->dst[i].dst, FILL_BYTE, j->dst[i].len);
        job_check(j, 0, 0);
}

/* ---- short I/O ---- */

/* These definitions replace libc's for the module under test too; the kernel does the work. */
size_t io_cap;

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

void unix_pair(int fds[2], int bufsize)
{
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
                         0);
        set_bufs(fds[0], bufsize, bufsize);
        set_bufs(fds[1], bufsize, bufsize);
}

/* A connected loopback TCP pair on an ephemeral port: fds[0] connects, fds[1] was accepted. */
void tcp_pair(int fds[2], int bufsize)
{
        struct sockaddr_in sin = {.sin_family = AF_INET};
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

/* Sends a whole job as one stream and returns the bytes the sender put on the wire. */
uint8_t *capture(const Job *j, uint64_t id, uint32_t chunk, bool crc, size_t *ret_len)
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
int feed(TcpReceiver *r, const uint8_t *buf, size_t len, bool eof)
{
        _cleanup_close_ int a = -1, b = -1;
        size_t off = 0;
        bool shut = false;
        int fds[2], q;

        unix_pair(fds, 0);
        a = fds[0];
        b = fds[1];
        for (;;) {
                struct pollfd p = {.fd = b, .events = POLLIN};

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
size_t put_header(uint8_t *buf, uint32_t magic, uint32_t flags, uint64_t id, uint64_t offset,
                  uint32_t len, uint32_t crc)
{
        uint64_t f[6] = {magic, flags, id, offset, len, crc};
        unsigned w[6] = {4, 4, 8, 8, 4, 4};
        size_t p = 0;

        for (unsigned i = 0; i < 6; i++)
                for (unsigned k = 0; k < w[i]; k++)
                        buf[p++] = (uint8_t)(f[i] >> (8 * k));
        return p;
}

/* Appends a well-formed-looking chunk carrying the job's bytes at @offset (or any, if outside). */
size_t put_chunk(uint8_t *buf, const Job *j, uint32_t magic, uint32_t flags, uint64_t id,
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

/* A rejected header: the verdict, nothing written, and its payload still unread on the socket. */
void assert_header_rejected(const Job *j, const uint8_t *wire, size_t len, bool crc, int want)
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
