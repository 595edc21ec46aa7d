/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the TCP data plane (tcp-data.c): two TcpData ends in one process on one
 * event_base, or one end and raw sockets read by the test; transfers of every shape in both
 * directions, every destination byte and guard checked; cancels, aborted and discarded jobs,
 * and jobs whose chunks arrive before they are registered.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/macro.h"
#include "tests/unit/tcp-data-fixture.h"

#define MiB ((uint64_t)1 << 20)

/* ---- helpers ---- */

typedef struct Bytes {
        const TcpData *td;
        uint64_t sent, received; /* wait until at least this much moved */
} Bytes;

static bool bytes_moved(void *userdata)
{
        Bytes *b = userdata;
        TcpDataStats st;

        tcp_data_get_stats(b->td, &st);
        return st.bytes_sent >= b->sent && st.bytes_received >= b->received;
}

/* Runs the loop until both jobs of @d ended; both succeeded and every byte of @x landed. */
static void run_until_both_ok(World *w, const Done d[static 2], const Xfer *x)
{
        run_until(w, &done_total, 2);
        ck_assert_int_eq(d[0].status, 0);
        ck_assert_int_eq(d[1].status, 0);
        xfer_check(x, 0, x->total);
}

/* Runs the loop until @td sent at least @sent and received at least @received payload bytes. */
static void run_until_bytes(World *w, const TcpData *td, uint64_t sent, uint64_t received)
{
        Bytes b = {.td = td, .sent = sent, .received = received};

        run_until_cond(w, bytes_moved, &b);
}

static int split(World *w, const TcpDataOptions *o, uint64_t total, TcpStreamRange *ranges)
{
        uint64_t min = o && o->min_split_bytes ? o->min_split_bytes : TCP_DATA_MIN_SPLIT_DEFAULT;

        return tcp_stream_split(total, w->n, min, ranges);
}

/*
 * Reads one range of job @id of @x off the blocking raw socket @fd into @x's destination with a
 * receiver of its own, picking the range among @ranges by its first header. Returns its index.
 */
static int raw_recv_range(int fd, const Xfer *x, uint64_t id, bool crc,
                          const TcpStreamRange *ranges, int n)
{
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        TcpStreamHeader h;
        TcpReceiver r;
        int i;

        raw_read(fd, hdr, sizeof(hdr));
        ck_assert_int_eq(tcp_stream_header_parse(hdr, crc, &h), 0);
        ck_assert_uint_eq(h.transfer_id, id);
        for (i = 0; i < n; i++)
                if (ranges[i].start == h.offset)
                        break;
        ck_assert_int_lt(i, n);
        ck_assert_int_eq(tcp_receiver_init_range(&r, id, x->dst, x->n_dst, ranges[i].start,
                                                 ranges[i].end, crc),
                         0);
        ck_assert_int_eq(tcp_receiver_start(&r, &h), 0);
        /* On a blocking socket the step returns only when the range is complete. */
        ck_assert_int_eq(tcp_receiver_step(&r, fd), 1);
        return i;
}

/* Whether the raw socket @fd has anything to read right now. */
static bool raw_readable(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};

        return poll(&p, 1, 0) > 0;
}

/* ---- options ---- */

static bool fd_is_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(test_new_invalid)
{
        struct event_base *base = event_base_new();
        TcpData *td = NULL;
        int fds[2], dgram[2];
        TcpDataOptions o;

        ck_assert_ptr_nonnull(base);

        /* Each failure closes the sockets it was given. */
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        o = (TcpDataOptions){.fds = fds, .n_fds = 2};
        ck_assert_int_eq(tcp_data_new(&o, &td), -EINVAL);
        ck_assert(!fd_is_open(fds[0]) && !fd_is_open(fds[1]));

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        o = (TcpDataOptions){.base = base, .fds = fds, .n_fds = 0};
        ck_assert_int_eq(tcp_data_new(&o, &td), -EINVAL);
        close(fds[0]);
        close(fds[1]);
        o = (TcpDataOptions){.base = base, .fds = fds, .n_fds = TCP_DATA_MAX_CONNS + 1};
        ck_assert_int_eq(tcp_data_new(&o, &td), -EINVAL);

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        o = (TcpDataOptions){
                .base = base, .fds = fds, .n_fds = 2, .chunk_size = TCP_STREAM_CHUNK_MAX + 1};
        ck_assert_int_eq(tcp_data_new(&o, &td), -EINVAL);
        ck_assert(!fd_is_open(fds[0]) && !fd_is_open(fds[1]));

        /* Not a stream socket. */
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dgram), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        {
                int mixed[2] = {fds[0], dgram[0]};

                o = (TcpDataOptions){.base = base, .fds = mixed, .n_fds = 2};
                ck_assert_int_eq(tcp_data_new(&o, &td), -EINVAL);
                ck_assert(!fd_is_open(mixed[0]) && !fd_is_open(mixed[1]));
        }
        close(fds[1]);
        close(dgram[1]);
        ck_assert_ptr_null(td);
        ck_assert_ptr_null(tcp_data_free(NULL));
        event_base_free(base);
}
END_TEST

START_TEST(test_submit_invalid)
{
        World w;
        uint8_t buf[16] = "0123456789abcdef", out[16] = {0};
        TcpSrcSegment src[2] = {{buf, 16}, {NULL, 0}}, bad_src[1] = {{NULL, 4}};
        TcpDstSegment dst[1] = {{out, 16}}, bad_dst[1] = {{NULL, 4}};
        Done d[4] = {{0}};
        Xfer *big = xfer_new(8, 8 * MiB, 0, 0);

        world_init(&w, 2, false, 65536, NULL);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, src, 0, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, src + 1, 1, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, bad_src, 1, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, NULL, 1, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, bad_dst, 1, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, dst, 0, on_done, &d[0]), -EINVAL);
        ck_assert_int_eq(tcp_data_send_aborted(w.a.td, 1, 0), -EINVAL);
        ck_assert_int_eq(tcp_data_recv_discard(w.a.td, 1, 0), -EINVAL);

        /*
         * One id per direction: the same id may be a send and a receive at once. Job 7 from a
         * to b cannot finish before b registers it (small socket buffers), so it is surely
         * still registered on a when the duplicates come.
         */
        ck_assert_int_eq(tcp_data_send(w.a.td, 7, big->src, big->n_src, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 7, src, 2, on_done, &d[1]), -EEXIST);
        ck_assert_int_eq(tcp_data_send_aborted(w.a.td, 7, 16), -EEXIST);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 7, big->dst, big->n_dst, on_done, &d[1]), 0);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 7, dst, 1, on_done, &d[2]), -EEXIST);
        ck_assert_int_eq(tcp_data_recv_discard(w.b.td, 7, 16), -EEXIST);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 7, dst, 1, on_done, &d[2]), 0);
        ck_assert_int_eq(tcp_data_send(w.b.td, 7, src, 2, on_done, &d[3]), 0);
        run_until(&w, &done_total, 4);
        for (int i = 0; i < 4; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, 0);
        }
        xfer_check(big, 0, big->total);
        ck_assert(memcmp(out, buf, 16) == 0);
        /* Cancelling what is gone or never was is a no-op. */
        tcp_data_cancel_send(w.a.td, 7);
        tcp_data_cancel_recv(w.b.td, 7);
        tcp_data_cancel_send(w.a.td, 12345);
        tcp_data_cancel_recv(w.b.td, 12345);
        ck_assert(!tcp_data_is_broken(w.a.td));
        world_deinit(&w);
        xfer_free(big);
}
END_TEST

/* ---- transfers ---- */

/* Both ends send one job to each other at once and every byte is checked on arrival. */
static const struct {
        unsigned n;
        bool tcp, crc;
        uint64_t total;
        size_t src_seg, dst_seg; /* 0: random lengths up to 64 KiB */
        uint32_t chunk;
        uint64_t min_split;
        int bufsize;
} rt[] = {
        {1, false, true, 1, 1, 1, 0, 0, 0},
        {1, true, false, 1000, 7, 0, 0, 0, 0},
        {2, false, true, 300001, 0, 0, 4096, 4096, 0},
        {3, true, false, 5 * MiB + 3, 0, 0, 0, 0, 0},
        {4, true, true, 8 * MiB, 65536, 65536, 0, 0, 0},
        {4, true, true, 2 * MiB + 1, 0, 0, 65536, 65536, 16384}, /* tiny socket buffers */
        {16, true, false, 4 * MiB, 0, 4096, 100000, 1, 0},
        {2, false, false, 100003, 0, 0, 1, 50000, 0}, /* one-byte chunks */
};

START_TEST(test_round_trip)
{
        TcpDataOptions o = {
                .crc = rt[_i].crc,
                .chunk_size = rt[_i].chunk,
                .min_split_bytes = rt[_i].min_split,
        };
        World w;
        Xfer *ab = xfer_new(10 + (uint64_t)_i, rt[_i].total, rt[_i].src_seg, rt[_i].dst_seg);
        Xfer *ba = xfer_new(50 + (uint64_t)_i, rt[_i].total, rt[_i].dst_seg, rt[_i].src_seg);
        Done d[4] = {{0}};
        TcpDataStats st;

        world_init(&w, rt[_i].n, rt[_i].tcp, rt[_i].bufsize, &o);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 1, ab->dst, ab->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, ab->src, ab->n_src, on_done, &d[1]), 0);
        ck_assert_int_eq(tcp_data_send(w.b.td, 1, ba->src, ba->n_src, on_done, &d[2]), 0);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, ba->dst, ba->n_dst, on_done, &d[3]), 0);
        tcp_data_get_stats(w.a.td, &st);
        ck_assert_uint_eq(st.jobs_in_flight, 2);
        run_until(&w, &done_total, 4);
        for (int i = 0; i < 4; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, 0);
        }
        xfer_check(ab, 0, ab->total);
        xfer_check(ba, 0, ba->total);

        tcp_data_get_stats(w.a.td, &st);
        ck_assert_uint_eq(st.bytes_sent, rt[_i].total);
        ck_assert_uint_eq(st.bytes_received, rt[_i].total);
        ck_assert_uint_eq(st.jobs_sent, 1);
        ck_assert_uint_eq(st.jobs_received, 1);
        ck_assert_uint_eq(st.jobs_failed, 0);
        ck_assert_uint_eq(st.jobs_in_flight, 0);
        world_deinit(&w);
        xfer_free(ab);
        xfer_free(ba);
}
END_TEST

/* Thousands of 4 KiB segments, scattered on both ends. */
START_TEST(test_many_segments)
{
        TcpDataOptions o = {.crc = true};
        World w;
        Xfer *x = xfer_new(7, 4099 * 4096, 4096, 4096);
        Done d[2] = {{0}};

        ck_assert_uint_eq(x->n_src, 4099);
        world_init(&w, 3, true, 0, &o);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 9, x->dst, x->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 9, x->src, x->n_src, on_done, &d[1]), 0);
        run_until_both_ok(&w, d, x);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* Segments counted beforehand (a transport's stage op, off the loop): the same bytes land. */
START_TEST(test_counted_totals)
{
        World w;
        Xfer *x = xfer_new(11, 513 * 4096 + 100, 4096, 3000);
        uint64_t src_total = 0, dst_total = 0;
        Done d[2] = {{0}};

        ck_assert_int_eq(tcp_stream_src_total(x->src, x->n_src, &src_total), 0);
        ck_assert_int_eq(tcp_stream_dst_total(x->dst, x->n_dst, &dst_total), 0);
        ck_assert_uint_eq(src_total, x->total);
        ck_assert_uint_eq(dst_total, x->total);
        world_init(&w, 2, true, 0, NULL);
        ck_assert_int_eq(tcp_data_send_total(w.a.td, 3, x->src, x->n_src, 0, on_done, &d[0]),
                         -EINVAL);
        ck_assert_int_eq(
                tcp_data_recv_until_total(w.b.td, 3, x->dst, x->n_dst, 0, 0, on_done, &d[0]),
                -EINVAL);
        ck_assert_int_eq(tcp_data_recv_until_total(w.b.td, 3, x->dst, x->n_dst, dst_total, 0,
                                                   on_done, &d[0]),
                         0);
        ck_assert_int_eq(
                tcp_data_send_total(w.a.td, 3, x->src, x->n_src, src_total, on_done, &d[1]), 0);
        run_until_both_ok(&w, d, x);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* On the wire: a large job takes every connection, one range each; a small one takes one. */
START_TEST(test_wire_layout)
{
        TcpDataOptions o = {.crc = _i == 1, .chunk_size = 65536};
        World w;
        Xfer *big = xfer_new(3, 4 * MiB + 5, 0, 0), *small = xfer_new(4, 1000, 0, 0);
        TcpStreamRange ranges[4];
        Done d[2] = {{0}};
        bool seen[4] = {false};
        int n, carrier = -1;

        world_init_raw(&w, 4, true, 0, &o);
        n = split(&w, &o, big->total, ranges);
        ck_assert_int_eq(n, 4);
        ck_assert_int_eq(tcp_data_send(w.a.td, 5, big->src, big->n_src, on_done, &d[0]), 0);
        for (unsigned c = 0; c < 4; c++) {
                int i = raw_recv_range(w.raw[c], big, 5, o.crc, ranges, n);

                ck_assert(!seen[i]);
                seen[i] = true;
        }
        run_until(&w, &done_total, 1);
        ck_assert_int_eq(d[0].status, 0);
        xfer_check(big, 0, big->total);

        ck_assert_int_eq(split(&w, &o, small->total, ranges), 1);
        ck_assert_int_eq(tcp_data_send(w.a.td, 6, small->src, small->n_src, on_done, &d[1]), 0);
        while (carrier < 0) {
                struct pollfd p[4];

                for (unsigned c = 0; c < 4; c++)
                        p[c] = (struct pollfd){.fd = w.raw[c], .events = POLLIN};
                ck_assert_int_gt(poll(p, 4, -1), 0);
                for (int c = 0; c < 4; c++)
                        if (p[c].revents & POLLIN)
                                carrier = c;
        }
        ck_assert_int_eq(raw_recv_range(w.raw[carrier], small, 6, o.crc, ranges, 1), 0);
        run_until(&w, &done_total, 2);
        ck_assert_int_eq(d[1].status, 0);
        xfer_check(small, 0, small->total);
        /* The whole job went on one connection: nothing was sent on the others. */
        for (int c = 0; c < 4; c++)
                ck_assert(!raw_readable(w.raw[c]));
        world_deinit(&w);
        xfer_free(big);
        xfer_free(small);
}
END_TEST

#define N_CONCURRENT 48

/* Many jobs of many sizes in both directions at once, over four connections. */
START_TEST(test_concurrent)
{
        TcpDataOptions o = {.crc = _i == 1, .min_split_bytes = 256 * 1024, .chunk_size = 0};
        World w;
        Xfer *ab[N_CONCURRENT], *ba[N_CONCURRENT];
        Done d[4 * N_CONCURRENT] = {{0}};
        uint64_t seed = 99;

        world_init(&w, 4, true, 0, &o);
        for (int i = 0; i < N_CONCURRENT; i++) {
                uint64_t r = (seed = seed * 6364136223846793005ull + 1442695040888963407ull);
                uint64_t t1 = i % 8 == 0 ? (r >> 20) % (3 * MiB) + 1 : (r >> 20) % 200000 + 1;
                uint64_t t2 = i % 8 == 4 ? (r >> 40) % (3 * MiB) + 1 : (r >> 40) % 100000 + 1;

                ab[i] = xfer_new(1000 + (uint64_t)i, t1, 0, 0);
                ba[i] = xfer_new(2000 + (uint64_t)i, t2, 0, 0);
        }
        /* Receivers first for half of them, senders first for the other half. */
        for (int i = 0; i < N_CONCURRENT; i++) {
                uint64_t id = 100 + (uint64_t)i;

                if (i % 2 == 0) {
                        ck_assert_int_eq(tcp_data_recv(w.b.td, id, ab[i]->dst, ab[i]->n_dst,
                                                       on_done, &d[4 * i]),
                                         0);
                        ck_assert_int_eq(tcp_data_recv(w.a.td, id, ba[i]->dst, ba[i]->n_dst,
                                                       on_done, &d[4 * i + 1]),
                                         0);
                }
                ck_assert_int_eq(
                        tcp_data_send(w.a.td, id, ab[i]->src, ab[i]->n_src, on_done, &d[4 * i + 2]),
                        0);
                ck_assert_int_eq(
                        tcp_data_send(w.b.td, id, ba[i]->src, ba[i]->n_src, on_done, &d[4 * i + 3]),
                        0);
        }
        for (int i = 1; i < N_CONCURRENT; i += 2) {
                uint64_t id = 100 + (uint64_t)i;

                ck_assert_int_eq(
                        tcp_data_recv(w.b.td, id, ab[i]->dst, ab[i]->n_dst, on_done, &d[4 * i]), 0);
                ck_assert_int_eq(
                        tcp_data_recv(w.a.td, id, ba[i]->dst, ba[i]->n_dst, on_done, &d[4 * i + 1]),
                        0);
        }
        run_until(&w, &done_total, 4 * N_CONCURRENT);
        for (int i = 0; i < 4 * N_CONCURRENT; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, 0);
        }
        for (int i = 0; i < N_CONCURRENT; i++) {
                xfer_check(ab[i], 0, ab[i]->total);
                xfer_check(ba[i], 0, ba[i]->total);
                xfer_free(ab[i]);
                xfer_free(ba[i]);
        }
        world_deinit(&w);
}
END_TEST

/* A chunk that arrives before its job is registered waits for it. */
START_TEST(test_late_registration)
{
        TcpDataOptions o = {.crc = true, .min_split_bytes = 65536};
        World w;
        Xfer *x = xfer_new(31, 3 * MiB, 0, 0);
        Done d[2] = {{0}};

        world_init(&w, 2, true, 0, &o);
        ck_assert_int_eq(tcp_data_send(w.a.td, 77, x->src, x->n_src, on_done, &d[0]), 0);
        /* The first chunks are on their way before b knows the job. */
        run_until_bytes(&w, w.a.td, 1, 0);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 77, x->dst, x->n_dst, on_done, &d[1]), 0);
        run_until_both_ok(&w, d, x);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* Progress: what a job moved so far, on both ends, and nothing for jobs not in progress. */
START_TEST(test_progress)
{
        TcpDataOptions o = {.min_split_bytes = 65536};
        World w;
        Xfer *x = xfer_new(41, 16 * MiB, 0, 0);
        Done d[2] = {{0}};
        uint64_t p = UINT64_MAX;

        /* Small socket buffers: a sender whose receiver does not know the job yet blocks. */
        world_init(&w, 2, true, 65536, &o);
        ck_assert_int_eq(tcp_data_progress(w.a.td, 5, true, &p), -ENOENT);
        ck_assert_int_eq(tcp_data_send(w.a.td, 5, x->src, x->n_src, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_progress(w.b.td, 5, false, &p), -ENOENT);
        run_until_bytes(&w, w.a.td, 1, 0);
        ck_assert_int_eq(tcp_data_progress(w.a.td, 5, true, &p), 0);
        ck_assert_uint_gt(p, 0);
        ck_assert_uint_lt(p, x->total);
        /* A send is not a receive. */
        ck_assert_int_eq(tcp_data_progress(w.a.td, 5, false, &p), -ENOENT);

        ck_assert_int_eq(tcp_data_recv(w.b.td, 5, x->dst, x->n_dst, on_done, &d[1]), 0);
        ck_assert_int_eq(tcp_data_progress(w.b.td, 5, false, &p), 0);
        ck_assert_uint_le(p, x->total);
        run_until_both_ok(&w, d, x);
        /* Over on the wire: no longer in progress. */
        ck_assert_int_eq(tcp_data_progress(w.a.td, 5, true, &p), -ENOENT);
        ck_assert_int_eq(tcp_data_progress(w.b.td, 5, false, &p), -ENOENT);
        ck_assert_int_eq(tcp_data_progress(NULL, 5, false, &p), -EINVAL);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* ---- cancels, aborts, discards ---- */

/* A job both ends must still be able to run after something failed on the TcpData. */
static void assert_still_works(World *w, uint64_t id, uint64_t seed)
{
        Xfer *x = xfer_new(seed, 3 * MiB + 11, 0, 0);
        Done d[2] = {{0}};
        unsigned want = done_total + 2;

        ck_assert_int_eq(tcp_data_recv(w->b.td, id, x->dst, x->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_send(w->a.td, id, x->src, x->n_src, on_done, &d[1]), 0);
        run_until(w, &done_total, want);
        ck_assert_int_eq(d[0].status, 0);
        ck_assert_int_eq(d[1].status, 0);
        xfer_check(x, 0, x->total);
        xfer_free(x);
}

/*
 * A send cancelled before (_i 0) or after (_i 1) its first bytes left: the receiver, registered
 * only afterwards so that the sender cannot have finished, gets the landed prefix of each range
 * and -ECANCELED; the TcpData goes on working.
 */
START_TEST(test_cancel_send)
{
        TcpDataOptions o = {.crc = true, .chunk_size = 65536, .min_split_bytes = MiB};
        World w;
        Xfer *x = xfer_new(41, 32 * MiB, 0, 0);
        TcpStreamRange ranges[2];
        Done d[2] = {{0}};
        uint64_t landed;

        world_init(&w, 2, true, 256 * 1024, &o);
        ck_assert_int_eq(split(&w, &o, x->total, ranges), 2);
        ck_assert_int_eq(tcp_data_send(w.a.td, 3, x->src, x->n_src, on_done, &d[0]), 0);
        if (_i == 1)
                run_until_bytes(&w, w.a.td, 1, 0);
        tcp_data_cancel_send(w.a.td, 3);
        tcp_data_cancel_send(w.a.td, 3);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 3, x->dst, x->n_dst, on_done, &d[1]), 0);
        run_until(&w, &done_total, 2);
        ck_assert_int_eq(d[0].status, -ECANCELED);
        ck_assert_int_eq(d[1].status, -ECANCELED);
        landed = xfer_check_prefixes(x, ranges, 2);
        ck_assert_uint_lt(landed, x->total);
        if (_i == 1) {
                /*
                 * The chunk in progress was finished on the wire. Whether the receiver keeps it
                 * depends on which connection it reads first: the other range's ABORT stops the
                 * job, and a range opened after that is read and dropped.
                 */
                TcpDataStats st;

                tcp_data_get_stats(w.a.td, &st);
                ck_assert_uint_ge(st.bytes_sent, 65536);
        }

        assert_still_works(&w, 4, 42);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* On the wire, a cancelled send finishes its chunk in progress, then sends one ABORT. */
START_TEST(test_cancel_send_wire)
{
        TcpDataOptions o = {.chunk_size = 65536};
        World w;
        Xfer *x = xfer_new(43, 16 * MiB, 0, 0);
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        _cleanup_free_ uint8_t *payload = malloc(65536);
        Done d = {0};
        uint64_t pos = 0;

        ck_assert_ptr_nonnull(payload);
        world_init_raw(&w, 1, true, 65536, &o);
        ck_assert_int_eq(tcp_data_send(w.a.td, 8, x->src, x->n_src, on_done, &d), 0);
        raw_read(w.raw[0], hdr, 1);
        tcp_data_cancel_send(w.a.td, 8);
        raw_read(w.raw[0], hdr + 1, sizeof(hdr) - 1);
        for (;;) {
                TcpStreamHeader h;

                ck_assert_int_eq(tcp_stream_header_parse(hdr, false, &h), 0);
                ck_assert_uint_eq(h.transfer_id, 8);
                ck_assert_uint_eq(h.offset, pos);
                if (h.flags & TCP_STREAM_FLAG_ABORT)
                        break;
                raw_read(w.raw[0], payload, h.length);
                ck_assert(memcmp(payload, x->expect + pos, h.length) == 0);
                pos += h.length;
                raw_read(w.raw[0], hdr, sizeof(hdr));
        }
        ck_assert_uint_lt(pos, x->total);
        ck_assert_uint_eq(pos % 65536, 0);
        run_until(&w, &done_total, 1);
        ck_assert_int_eq(d.status, -ECANCELED);
        ck_assert(!raw_readable(w.raw[0]));
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/*
 * A receive cancelled while one of its ranges is half in: the callback runs once no thread
 * writes into the destination, and nothing lands after it though the rest of the job arrives
 * (the scripted sender then sends another job, which proves the rest was read past).
 */
START_TEST(test_cancel_recv)
{
        TcpDataOptions o = {.crc = true, .chunk_size = 65536, .min_split_bytes = 512 * 1024};
        World w;
        unsigned n = (unsigned)_i + 1;
        Xfer *x = xfer_new(51, MiB, 0, 0), *y = xfer_new(52, MiB, 0, 0);
        TcpStreamRange rx[2], ry[2];
        Done dx = {.snapshot_of = x}, dy = {0};
        _cleanup_free_ uint8_t *wire = NULL;
        size_t len, part;

        world_init_raw(&w, n, false, 0, &o);
        ck_assert_int_eq(split(&w, &o, x->total, rx), (int)n);
        ck_assert_int_eq(split(&w, &o, y->total, ry), (int)n);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, x->dst, x->n_dst, on_done, &dx), 0);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 2, y->dst, y->n_dst, on_done, &dy), 0);

        /* Five chunks of the first range land, then the receive is cancelled. */
        wire = wire_range(x, 1, rx[0].start, rx[0].end, 65536, true, &len);
        part = 5 * (TCP_STREAM_HEADER_SIZE + 65536) + 100;
        raw_write(w.raw[0], wire, part);
        run_until_bytes(&w, w.a.td, 0, 5 * 65536 + 100 - TCP_STREAM_HEADER_SIZE);
        tcp_data_cancel_recv(w.a.td, 1);
        tcp_data_cancel_recv(w.a.td, 1);
        run_until(&w, &dx.calls, 1);
        ck_assert_int_eq(dx.status, -ECANCELED);
        ck_assert_ptr_nonnull(dx.snapshot);

        /* The rest of job 1, then job 2 behind it on every connection. */
        raw_write(w.raw[0], wire + part, len - part);
        for (unsigned i = 0; i < n; i++) {
                if (i > 0) {
                        free(wire);
                        wire = wire_range(x, 1, rx[i].start, rx[i].end, 65536, true, &len);
                        raw_write(w.raw[i], wire, len);
                }
                free(wire);
                wire = wire_range(y, 2, ry[i].start, ry[i].end, 65536, true, &len);
                raw_write(w.raw[i], wire, len);
        }
        run_until(&w, &dy.calls, 1);
        ck_assert_int_eq(dy.status, 0);
        xfer_check(y, 0, y->total);

        ck_assert(memcmp(dx.snapshot, x->dst_buf, x->dst_buf_len) == 0);
        ck_assert_uint_ge(xfer_check_prefixes(x, rx, n), 5 * 65536);
        ck_assert_uint_eq(dx.calls, 1);
        ck_assert(!tcp_data_is_broken(w.a.td));
        world_deinit(&w);
        free(dx.snapshot);
        xfer_free(x);
        xfer_free(y);
}
END_TEST

/* A receive cancelled before anything arrived: the sender's bytes are read and dropped. */
START_TEST(test_cancel_recv_early)
{
        World w;
        Xfer *x = xfer_new(53, 3 * MiB, 0, 0);
        Done d[2] = {{0}};

        world_init(&w, 2, true, 0, NULL);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 5, x->dst, x->n_dst, on_done, &d[0]), 0);
        tcp_data_cancel_recv(w.b.td, 5);
        ck_assert_uint_eq(d[0].calls, 0); /* never from inside the call */
        run_until(&w, &d[0].calls, 1);
        ck_assert_int_eq(d[0].status, -ECANCELED);
        /* The cancelled job still holds its id until its ranges went past. */
        ck_assert_int_eq(tcp_data_recv(w.b.td, 5, x->dst, x->n_dst, on_done, &d[1]), -EEXIST);
        ck_assert_int_eq(tcp_data_send(w.a.td, 5, x->src, x->n_src, on_done, &d[1]), 0);
        run_until(&w, &d[1].calls, 1);
        ck_assert_int_eq(d[1].status, 0);
        assert_still_works(&w, 6, 54);
        xfer_check(x, 0, 0);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/*
 * A receive with a deadline that passes while one of its ranges is half in, with nobody on the
 * loop cancelling it: the I/O thread stops writing on its own, the rest of the job is read and
 * dropped, and the job fails with -ETIMEDOUT (the scripted sender then sends another job, which
 * proves the streams stayed in step). A job whose deadline passed before its bytes came lands
 * nothing at all.
 */
START_TEST(test_recv_deadline)
{
        TcpDataOptions o = {.crc = true, .chunk_size = 65536, .min_split_bytes = 512 * 1024};
        World w;
        Xfer *x = xfer_new(55, MiB, 0, 0), *y = xfer_new(56, MiB, 0, 0);
        Xfer *z = xfer_new(57, MiB, 0, 0);
        TcpStreamRange rx[1], ry[1], rz[1];
        Done dx = {.snapshot_of = x}, dy = {0}, dz = {0};
        _cleanup_free_ uint8_t *wire = NULL, *after = NULL;
        usec_t deadline;
        size_t len, part;

        world_init_raw(&w, 1, false, 0, &o);
        ck_assert_int_eq(split(&w, &o, x->total, rx), 1);
        ck_assert_int_eq(split(&w, &o, y->total, ry), 1);
        ck_assert_int_eq(split(&w, &o, z->total, rz), 1);
        deadline = now_usec(CLOCK_MONOTONIC) + 300 * USEC_PER_MSEC;
        ck_assert_int_eq(tcp_data_recv_until(w.a.td, 1, x->dst, x->n_dst, deadline, on_done, &dx),
                         0);
        /* Already past: nothing of it may land. */
        ck_assert_int_eq(tcp_data_recv_until(w.a.td, 3, z->dst, z->n_dst,
                                             now_usec(CLOCK_MONOTONIC) - 1, on_done, &dz),
                         0);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 2, y->dst, y->n_dst, on_done, &dy), 0);

        /* Five chunks land before the deadline. */
        wire = wire_range(x, 1, rx[0].start, rx[0].end, 65536, true, &len);
        part = 5 * (TCP_STREAM_HEADER_SIZE + 65536) + 100;
        raw_write(w.raw[0], wire, part);
        run_until_bytes(&w, w.a.td, 0, 5 * 65536 + 100 - TCP_STREAM_HEADER_SIZE);
        while (now_usec(CLOCK_MONOTONIC) <= deadline)
                (void)usleep(10000);
        ck_assert_uint_eq(dx.calls, 0);
        after = xfer_snapshot(x);

        /* The rest of job 1 comes after its deadline: dropped. Then jobs 3 and 2. */
        raw_write(w.raw[0], wire + part, len - part);
        run_until(&w, &dx.calls, 1);
        ck_assert_int_eq(dx.status, -ETIMEDOUT);
        free(wire);
        wire = wire_range(z, 3, rz[0].start, rz[0].end, 65536, true, &len);
        raw_write(w.raw[0], wire, len);
        free(wire);
        wire = wire_range(y, 2, ry[0].start, ry[0].end, 65536, true, &len);
        raw_write(w.raw[0], wire, len);
        run_until(&w, &dy.calls, 1);
        run_until(&w, &dz.calls, 1);
        ck_assert_int_eq(dy.status, 0);
        ck_assert_int_eq(dz.status, -ETIMEDOUT);
        xfer_check(y, 0, y->total);
        xfer_check(z, 0, 0);

        ck_assert(memcmp(after, x->dst_buf, x->dst_buf_len) == 0);
        ck_assert(memcmp(dx.snapshot, x->dst_buf, x->dst_buf_len) == 0);
        ck_assert_uint_ge(xfer_check_prefixes(x, rx, 1), 5 * 65536);
        ck_assert_uint_lt(xfer_check_prefixes(x, rx, 1), x->total);
        ck_assert(!tcp_data_is_broken(w.a.td));
        world_deinit(&w);
        free(dx.snapshot);
        xfer_free(x);
        xfer_free(y);
        xfer_free(z);
}
END_TEST

/* A job the sender will not send after all: its receiver fails without a byte landing. */
START_TEST(test_send_aborted)
{
        TcpDataOptions o = {.crc = _i == 1};
        World w;
        Xfer *x = xfer_new(61, 5 * MiB, 0, 0);
        Done d = {0};

        world_init(&w, 3, true, 0, &o);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 11, x->dst, x->n_dst, on_done, &d), 0);
        ck_assert_int_eq(tcp_data_send_aborted(w.a.td, 11, x->total), 0);
        run_until(&w, &d.calls, 1);
        ck_assert_int_eq(d.status, -ECANCELED);
        xfer_check(x, 0, 0);
        assert_still_works(&w, 12, 62);
        /* The aborted job left a's table once its ABORTs were out. */
        ck_assert_int_eq(tcp_data_send_aborted(w.a.td, 11, x->total), 0);
        ck_assert_int_eq(tcp_data_recv_discard(w.b.td, 11, x->total), 0);
        assert_still_works(&w, 13, 63);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

/* A job nobody wants: read and dropped, and then its id is free again. */
START_TEST(test_recv_discard)
{
        TcpDataOptions o = {.crc = true, .min_split_bytes = 65536};
        World w;
        Xfer *x = xfer_new(71, 2 * MiB + 1, 0, 0);
        Done d[3] = {{0}};
        TcpDataStats st;

        world_init(&w, 4, true, 0, &o);
        ck_assert_int_eq(tcp_data_recv_discard(w.b.td, 21, x->total), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 21, x->src, x->n_src, on_done, &d[0]), 0);
        run_until(&w, &d[0].calls, 1);
        ck_assert_int_eq(d[0].status, 0);
        /* A job split over every connection behind it: once it is in, job 21 went past. */
        assert_still_works(&w, 22, 72);
        tcp_data_get_stats(w.b.td, &st);
        ck_assert_uint_eq(st.jobs_in_flight, 0);
        ck_assert_uint_eq(st.jobs_failed, 0);
        xfer_check(x, 0, 0);

        ck_assert_int_eq(tcp_data_recv(w.b.td, 21, x->dst, x->n_dst, on_done, &d[1]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 21, x->src, x->n_src, on_done, &d[2]), 0);
        run_until(&w, &d[2].calls, 1);
        run_until(&w, &d[1].calls, 1);
        ck_assert_int_eq(d[1].status, 0);
        ck_assert_int_eq(d[2].status, 0);
        xfer_check(x, 0, x->total);
        world_deinit(&w);
        xfer_free(x);
}
END_TEST

static Suite *tcp_data_suite(void)
{
        Suite *s = suite_create("tcp-data");
        TCase *tc;

        tc = tcase_create("api");
        tcase_add_test(tc, test_new_invalid);
        tcase_add_test(tc, test_submit_invalid);
        suite_add_tcase(s, tc);

        tc = tcase_create("transfers");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_round_trip, 0, (int)ARRAY_SIZE(rt));
        tcase_add_test(tc, test_many_segments);
        tcase_add_test(tc, test_counted_totals);
        tcase_add_loop_test(tc, test_wire_layout, 0, 2);
        tcase_add_loop_test(tc, test_concurrent, 0, 2);
        tcase_add_test(tc, test_late_registration);
        tcase_add_test(tc, test_progress);
        suite_add_tcase(s, tc);

        tc = tcase_create("cancel");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_cancel_send, 0, 2);
        tcase_add_test(tc, test_cancel_send_wire);
        tcase_add_loop_test(tc, test_cancel_recv, 0, 2);
        tcase_add_test(tc, test_cancel_recv_early);
        tcase_add_test(tc, test_recv_deadline);
        tcase_add_loop_test(tc, test_send_aborted, 0, 2);
        tcase_add_test(tc, test_recv_discard);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(tcp_data_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
