/* SPDX-License-Identifier: MIT */
/* Shared set-up for the TCP data plane tests: transfers, two ends on one loop, waits. */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/macro.h"
#include "tests/unit/tcp-data-fixture.h"

unsigned done_total;

static uint64_t rnd_next(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

/* Segment lengths adding up to @total: @seg each, or random up to 64 KiB (some 0) when 0. */
static size_t cut_lengths(uint64_t *seed, uint64_t total, size_t seg, size_t **ret)
{
        size_t cap = 16, n = 0;
        size_t *lens = malloc(cap * sizeof(*lens));

        ck_assert_ptr_nonnull(lens);
        while (total > 0) {
                size_t len = seg;

                if (seg == 0)
                        len = rnd_next(seed) % 16 == 0 ? 0 : (size_t)(rnd_next(seed) % 65536 + 1);
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

Xfer *xfer_new(uint64_t seed, uint64_t total, size_t src_seg, size_t dst_seg)
{
        Xfer *x = calloc(1, sizeof(*x));
        _cleanup_free_ size_t *src_lens = NULL, *dst_lens = NULL, *slot = NULL, *order = NULL;
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1, logical = 0;
        size_t space = 0, pos = 0;

        ck_assert_ptr_nonnull(x);
        x->total = total;
        x->expect = malloc(total);
        ck_assert_ptr_nonnull(x->expect);
        for (uint64_t i = 0; i < total; i++)
                x->expect[i] = (uint8_t)(rnd_next(&s) % 255 + 1);

        x->n_src = cut_lengths(&s, total, src_seg, &src_lens);
        x->src = calloc(x->n_src + 1, sizeof(*x->src));
        ck_assert_ptr_nonnull(x->src);
        for (size_t i = 0; i < x->n_src; i++)
                space += src_lens[i] + 16;
        x->src_buf = malloc(space + 1);
        ck_assert_ptr_nonnull(x->src_buf);
        memset(x->src_buf, 0xee, space);
        for (size_t i = 0; i < x->n_src; i++) {
                pos += (size_t)(rnd_next(&s) % 16);
                memcpy(x->src_buf + pos, x->expect + logical, src_lens[i]);
                x->src[i] = (TcpSrcSegment){.src = x->src_buf + pos, .len = src_lens[i]};
                pos += src_lens[i];
                logical += src_lens[i];
        }

        /* Destination segments sit in the buffer in a shuffled order, each between guards. */
        x->n_dst = cut_lengths(&s, total, dst_seg, &dst_lens);
        x->dst = calloc(x->n_dst + 1, sizeof(*x->dst));
        order = calloc(x->n_dst + 1, sizeof(*order));
        slot = calloc(x->n_dst + 1, sizeof(*slot));
        ck_assert_ptr_nonnull(x->dst);
        ck_assert_ptr_nonnull(order);
        ck_assert_ptr_nonnull(slot);
        for (size_t i = 0; i < x->n_dst; i++)
                order[i] = i;
        for (size_t i = x->n_dst; i > 1; i--) {
                size_t k = (size_t)(rnd_next(&s) % i), t = order[i - 1];

                order[i - 1] = order[k];
                order[k] = t;
        }
        x->dst_buf_len = GUARD;
        for (size_t i = 0; i < x->n_dst; i++) {
                slot[order[i]] = x->dst_buf_len;
                x->dst_buf_len += dst_lens[order[i]] + GUARD;
        }
        x->dst_buf = malloc(x->dst_buf_len);
        ck_assert_ptr_nonnull(x->dst_buf);
        memset(x->dst_buf, GUARD_BYTE, x->dst_buf_len);
        for (size_t i = 0; i < x->n_dst; i++) {
                x->dst[i] = (TcpDstSegment){.dst = x->dst_buf + slot[i], .len = dst_lens[i]};
                memset(x->dst_buf + slot[i], FILL_BYTE, dst_lens[i]);
        }
        return x;
}

void xfer_free(Xfer *x)
{
        if (!x)
                return;
        free(x->expect);
        free(x->src_buf);
        free(x->src);
        free(x->dst_buf);
        free(x->dst);
        free(x);
}

/* Plain ifs in the loops here: ck_assert records its location each time, far too slow per byte. */
void xfer_check_guards(const Xfer *x)
{
        uint8_t *inside = calloc(x->dst_buf_len, 1);

        ck_assert_ptr_nonnull(inside);
        for (size_t i = 0; i < x->n_dst; i++)
                memset(inside + ((uint8_t *)x->dst[i].dst - x->dst_buf), 1, x->dst[i].len);
        for (size_t i = 0; i < x->dst_buf_len; i++)
                if (!inside[i] && x->dst_buf[i] != GUARD_BYTE)
                        ck_abort_msg("guard byte at %zu overwritten", i);
        free(inside);
}

/* Runs the statements that follow for every destination byte, with its logical offset. */
#define FOREACH_DST_BYTE(x, logical, byte, ...)                                                    \
        do {                                                                                       \
                uint64_t logical = 0;                                                              \
                for (size_t _s = 0; _s < (x)->n_dst; _s++)                                         \
                        for (size_t _k = 0; _k < (x)->dst[_s].len; _k++, logical++) {              \
                                uint8_t byte = ((uint8_t *)(x)->dst[_s].dst)[_k];                  \
                                __VA_ARGS__                                                        \
                        }                                                                          \
        } while (0)

void xfer_check(const Xfer *x, uint64_t lo, uint64_t hi)
{
        FOREACH_DST_BYTE(x, logical, byte, {
                bool in = logical >= lo && logical < hi;

                if (in && byte != x->expect[logical])
                        ck_abort_msg("byte %llu: got %u want %u", (unsigned long long)logical, byte,
                                     x->expect[logical]);
                if (!in && byte != FILL_BYTE)
                        ck_abort_msg("byte %llu written outside [%llu, %llu)",
                                     (unsigned long long)logical, (unsigned long long)lo,
                                     (unsigned long long)hi);
        });
        xfer_check_guards(x);
}

uint64_t xfer_check_prefixes(const Xfer *x, const TcpStreamRange *ranges, unsigned n)
{
        uint64_t landed = 0;
        unsigned r = 0;
        bool in_prefix = true;

        FOREACH_DST_BYTE(x, logical, byte, {
                while (r < n && logical >= ranges[r].end) {
                        r++;
                        in_prefix = true;
                }
                if (in_prefix && byte == FILL_BYTE)
                        in_prefix = false;
                if (in_prefix && byte != x->expect[logical])
                        ck_abort_msg("byte %llu: got %u want %u", (unsigned long long)logical, byte,
                                     x->expect[logical]);
                if (!in_prefix && byte != FILL_BYTE)
                        ck_abort_msg("byte %llu landed after a gap in its range",
                                     (unsigned long long)logical);
                landed += in_prefix;
        });
        xfer_check_guards(x);
        return landed;
}

uint8_t *xfer_snapshot(const Xfer *x)
{
        uint8_t *p = malloc(x->dst_buf_len);

        ck_assert_ptr_nonnull(p);
        memcpy(p, x->dst_buf, x->dst_buf_len);
        return p;
}

void on_done(void *userdata, int status)
{
        Done *d = userdata;

        ck_assert_uint_eq(d->calls, 0);
        d->calls++;
        d->status = status;
        if (d->snapshot_of)
                d->snapshot = xfer_snapshot(d->snapshot_of);
        done_total++;
}

static void on_broken(TcpData *td, int error, void *userdata)
{
        Peer *p = userdata;

        ck_assert_ptr_eq(td, p->td);
        ck_assert_int_lt(error, 0);
        p->broken_calls++;
        p->broken_error = error;
        if (p->free_on_broken)
                p->td = tcp_data_free(p->td);
}

static void set_bufs(int fd, int bufsize)
{
        if (bufsize <= 0)
                return;
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize)), 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize)), 0);
}

/* A connected pair, both ends blocking: TCP on loopback (fds[0] connected) or a socketpair. */
static void make_pair(int fds[2], bool tcp, int bufsize)
{
        struct sockaddr_in sin = {.sin_family = AF_INET};
        socklen_t len = sizeof(sin);
        _cleanup_close_ int l = -1;

        if (!tcp) {
                ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
                set_bufs(fds[0], bufsize);
                set_bufs(fds[1], bufsize);
                return;
        }
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(l, 0);
        set_bufs(l, bufsize);
        ck_assert_int_eq(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sin, &len), 0);
        ck_assert_int_eq(listen(l, 4), 0);
        fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fds[0], 0);
        set_bufs(fds[0], bufsize);
        ck_assert_int_eq(connect(fds[0], (struct sockaddr *)&sin, sizeof(sin)), 0);
        fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        ck_assert_int_ge(fds[1], 0);
        set_bufs(fds[1], bufsize);
}

static void peer_new(World *w, Peer *p, const int *fds, const TcpDataOptions *tmpl,
                     const char *name)
{
        TcpDataOptions o = {0};

        if (tmpl)
                o = *tmpl;
        o.base = w->base;
        o.fds = fds;
        o.n_fds = w->n;
        o.broken = on_broken;
        o.userdata = p;
        o.name = name;
        ck_assert_int_eq(tcp_data_new(&o, &p->td), 0);
        ck_assert_uint_eq(tcp_data_n_conns(p->td), w->n);
}

static void world_base(World *w, unsigned n)
{
        /* Counts from 0 for each world, also when Check runs the tests in one process. */
        done_total = 0;
        *w = (World){.n = n};
        for (unsigned i = 0; i < TCP_DATA_MAX_CONNS; i++)
                w->raw[i] = -1;
        w->base = event_base_new();
        ck_assert_ptr_nonnull(w->base);
}

void world_init(World *w, unsigned n, bool tcp, int bufsize, const TcpDataOptions *tmpl)
{
        int fa[TCP_DATA_MAX_CONNS], fb[TCP_DATA_MAX_CONNS];

        world_base(w, n);
        for (unsigned i = 0; i < n; i++) {
                int fds[2];

                make_pair(fds, tcp, bufsize);
                fa[i] = fds[0];
                fb[i] = fds[1];
        }
        peer_new(w, &w->a, fa, tmpl, "peer a");
        peer_new(w, &w->b, fb, tmpl, "peer b");
}

void world_init_raw(World *w, unsigned n, bool tcp, int bufsize, const TcpDataOptions *tmpl)
{
        int fa[TCP_DATA_MAX_CONNS];

        world_base(w, n);
        for (unsigned i = 0; i < n; i++) {
                int fds[2];

                make_pair(fds, tcp, bufsize);
                fa[i] = fds[0];
                w->raw[i] = fds[1];
        }
        peer_new(w, &w->a, fa, tmpl, "peer a");
}

void world_deinit(World *w)
{
        w->a.td = tcp_data_free(w->a.td);
        w->b.td = tcp_data_free(w->b.td);
        for (unsigned i = 0; i < TCP_DATA_MAX_CONNS; i++)
                w->raw[i] = safe_close(w->raw[i]);
        event_base_free(w->base);
        w->base = NULL;
}

void run_until(World *w, const unsigned *counter, unsigned want)
{
        while (*counter < want)
                ck_assert_int_ge(event_base_loop(w->base, EVLOOP_ONCE), 0);
}

static void on_tick(evutil_socket_t fd, short what, void *userdata)
{
        (void)fd;
        (void)what;
        (void)userdata;
}

void run_until_cond(World *w, bool (*cond)(void *userdata), void *userdata)
{
        struct timeval ms = {.tv_sec = 0, .tv_usec = 1000};
        struct event *tick = event_new(w->base, -1, EV_PERSIST, on_tick, NULL);

        ck_assert_ptr_nonnull(tick);
        ck_assert_int_eq(event_add(tick, &ms), 0);
        while (!cond(userdata))
                ck_assert_int_ge(event_base_loop(w->base, EVLOOP_ONCE), 0);
        event_free(tick);
}

uint8_t *wire_range(const Xfer *x, uint64_t id, uint64_t start, uint64_t end, uint32_t chunk,
                    bool crc, size_t *ret_len)
{
        size_t cap = 65536, len = 0;
        uint8_t *buf = malloc(cap);
        TcpSender s;
        int fds[2], r;

        ck_assert_ptr_nonnull(buf);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
                         0);
        ck_assert_int_eq(tcp_sender_init_range(&s, id, x->src, x->n_src, start, end, chunk, crc),
                         0);
        do {
                r = tcp_sender_step(&s, fds[0]);
                ck_assert_int_ge(r, 0);
                for (;;) {
                        ssize_t n;

                        if (cap - len < 65536) {
                                cap *= 2;
                                buf = realloc(buf, cap);
                                ck_assert_ptr_nonnull(buf);
                        }
                        n = read(fds[1], buf + len, cap - len);
                        if (n < 0 && errno == EAGAIN)
                                break;
                        ck_assert_int_gt(n, 0);
                        len += (size_t)n;
                }
        } while (r == 0);
        close(fds[0]);
        close(fds[1]);
        *ret_len = len;
        return buf;
}

void raw_write(int fd, const void *buf, size_t len)
{
        const uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = write(fd, p, len);

                if (n < 0 && errno == EINTR)
                        continue;
                ck_assert_int_gt(n, 0);
                p += n;
                len -= (size_t)n;
        }
}

void raw_read(int fd, void *buf, size_t len)
{
        uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = read(fd, p, len);

                if (n < 0 && errno == EINTR)
                        continue;
                ck_assert_int_gt(n, 0);
                p += n;
                len -= (size_t)n;
        }
}

void put_header(uint8_t *buf, uint32_t magic, uint32_t flags, uint64_t id, uint64_t offset,
                uint32_t len, uint32_t crc)
{
        uint64_t f[6] = {magic, flags, id, offset, len, crc};
        unsigned w[6] = {4, 4, 8, 8, 4, 4};
        size_t p = 0;

        for (unsigned i = 0; i < 6; i++)
                for (unsigned k = 0; k < w[i]; k++)
                        buf[p++] = (uint8_t)(f[i] >> (8 * k));
}
