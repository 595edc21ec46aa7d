/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the TCP stream data path (tcp-stream.c): round trips over socketpairs and real
 * loopback TCP with scattered segments and tiny socket buffers, hostile or corrupt streams that
 * must be rejected without a byte landing outside the destination, and parallel streams.
 */

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/macro.h"
#include "tests/unit/tcp-stream-fixture.h"

typedef struct Stats {
        unsigned send_blocked; /* sender steps that returned 0 */
        unsigned recv_blocked; /* receiver steps that returned 0 */
} Stats;

/*
 * Drives @n sender/receiver pairs (sender i writes fds[i][0], receiver i reads fds[i][1]) from
 * one thread, alternating by poll() until every pair is done or one side fails. Returns 1 when
 * all are done, else the first error (receiver errors first).
 */
static int drive(TcpSender *snd, TcpReceiver *rcv, int (*fds)[2], size_t n, Stats *st)
{
        bool sdone[8] = {false}, rdone[8] = {false};

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
                                p[np++] = (struct pollfd){.fd = fds[i][0], .events = POLLOUT};
                        if (!rdone[i])
                                p[np++] = (struct pollfd){.fd = fds[i][1], .events = POLLIN};
                        open += !sdone[i] + !rdone[i];
                }
                if (open == 0)
                        return 1;
                r = poll(p, np, POLL_TIMEOUT_MS);
                ck_assert_msg(r > 0, "poll: stuck (%d)", r);
        }
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
                {0, 4, 1, 0},   {1, 4, 1, 1},          {10, 4, 1, 4},         {10, 4, 3, 3},
                {10, 4, 11, 1}, {10, 4, 0, 4},         {1000003, 4, 1024, 4}, {4096, 8, 1024, 4},
                {3, 8, 1, 3},   {UINT64_MAX, 8, 1, 8},
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
        TcpSrcSegment src[2] = {{a, 10}, {NULL, 0}};
        TcpSrcSegment bad_src[1] = {{NULL, 5}};
        TcpSrcSegment huge[2] = {{a, SIZE_MAX}, {a, 2}};
        TcpDstSegment dst[2] = {{b, 10}, {NULL, 0}};
        TcpDstSegment bad_dst[1] = {{NULL, 5}};
        uint64_t total = 0;
        TcpSender s;
        TcpReceiver r;

        ck_assert_int_eq(tcp_sender_init(&s, 1, src, 2, 0, true), 0);
        ck_assert_uint_eq(s.chunk_size, TCP_STREAM_CHUNK_DEFAULT);
        ck_assert_int_eq(tcp_sender_init(&s, 1, bad_src, 1, 0, true), -EINVAL);
        ck_assert_int_eq(tcp_sender_init(&s, 1, src, 2, TCP_STREAM_CHUNK_MAX + 1, true), -EINVAL);
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
        {300001, 5000, 7000, 0, true},
        {300001, 5000, 7000, 0, false},
        {5003, 37, 11, 1, true},
        {5003, 37, 11, 1, false},
        {200003, 1, 9000, 4097, true},  /* one-byte source segments: IOV_BATCH splits */
        {200003, 9000, 1, 4097, false}, /* one-byte destination segments */
        {1 << 20, 65536 + 3, 100003, 65537, true},
        {3000017, 300007, 250001, 0, true},
        {1, 1, 1, 0, true},
};

static void round_trip(int idx, bool tcp, int bufsize)
{
        Job *j = job_new((uint64_t)idx + (tcp ? 100 : 0), rt_cases[idx].total,
                         rt_cases[idx].max_src, rt_cases[idx].max_dst);
        TcpSender s;
        TcpReceiver r;
        int fds[1][2];
        Stats st = {0};

        if (tcp)
                tcp_pair(fds[0], bufsize);
        else
                unix_pair(fds[0], bufsize);
        ck_assert_int_eq(
                tcp_sender_init(&s, 42, j->src, j->n_src, rt_cases[idx].chunk, rt_cases[idx].crc),
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
        static const size_t caps[] = {1, 5, 31, 33, 100, 4099};
        Job *j = job_new(200 + (uint64_t)_i, 30011, 300, 500);
        TcpSender s;
        TcpReceiver r;
        int fds[1][2];
        Stats st = {0};
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
        ck_assert_int_eq(tcp_receiver_step(&r, -1), -EILSEQ); /* sticky */
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
        n = put_chunk(wire, j, TCP_STREAM_MAGIC, TCP_STREAM_FLAG_CRC, 77, 0, (uint32_t)T + 1, true);
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
        r = tcp_sender_step(&s, fds[0]); /* no SIGPIPE, or the test would die here */
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
                ck_assert_int_eq(tcp_sender_init_range(&s[i], 99, j->src, j->n_src, ranges[i].start,
                                                       ranges[i].end, 100000, crc),
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
