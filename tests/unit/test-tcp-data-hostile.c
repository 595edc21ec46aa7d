/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the TCP data plane (tcp-data.c) against peers that lie, corrupt or vanish: a
 * scripted raw peer whose chunks break the protocol in every way the receiver must catch, a
 * corrupt payload that must fail only its own job, ends of stream, and tcp_data_free() with jobs
 * in flight, from the outside and from inside the callbacks.
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/macro.h"
#include "tests/unit/tcp-data-fixture.h"

#define MiB ((uint64_t)1 << 20)
#define CHUNK 65536
#define HALF (512 * 1024) /* min_split: the 1 MiB jobs here are two ranges of this */

typedef struct Bytes {
        const TcpData *td;
        uint64_t received;
} Bytes;

static bool bytes_in(void *userdata)
{
        Bytes *b = userdata;
        TcpDataStats st;

        tcp_data_get_stats(b->td, &st);
        return st.bytes_received >= b->received;
}

static void run_until_received(World *w, const TcpData *td, uint64_t received)
{
        Bytes b = {.td = td, .received = received};

        run_until_cond(w, bytes_in, &b);
}

/* Writes one chunk of job @x (its payload, or 0x77 past its end) with a correct CRC. */
static void raw_chunk(int fd, const Xfer *x, uint32_t flags, uint64_t id, uint64_t offset,
                      uint32_t len)
{
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        _cleanup_free_ uint8_t *payload = malloc(len + 1);

        ck_assert_ptr_nonnull(payload);
        for (uint32_t i = 0; i < len; i++)
                payload[i] = offset + i < x->total ? x->expect[offset + i] : 0x77;
        put_header(hdr, TCP_STREAM_MAGIC, flags, id, offset, len,
                   flags & TCP_STREAM_FLAG_CRC ? crc32c(0, payload, len) : 0);
        raw_write(fd, hdr, sizeof(hdr));
        raw_write(fd, payload, len);
}

/* Writes the first @n_chunks chunks of the range of @x at [@start, @end), then @extra bytes. */
static void raw_range_part(int fd, const Xfer *x, uint64_t id, uint64_t start, uint64_t end,
                           size_t n_chunks, size_t extra)
{
        size_t len, part = n_chunks * (TCP_STREAM_HEADER_SIZE + CHUNK) + extra;
        _cleanup_free_ uint8_t *wire = wire_range(x, id, start, end, CHUNK, true, &len);

        ck_assert_uint_le(part, len);
        raw_write(fd, wire, part);
}

/* ---- protocol violations ---- */

enum {
        BAD_MAGIC,
        UNKNOWN_FLAG,
        CRC_FLAG_MISSING,
        OFFSET_NOT_A_RANGE_START,
        RANGE_CLAIMED_TWICE,
        FIRST_CHUNK_PAST_RANGE,
        LATER_CHUNK_PAST_RANGE,
        EMPTY_CHUNK,
        ABORT_WITH_PAYLOAD,
        OTHER_JOB_MID_RANGE,
        UNKNOWN_JOB,
        EOF_MID_JOB,
        EOF_IDLE,
        _HOSTILE_MAX,
};

static const int hostile_error[_HOSTILE_MAX] = {
        [BAD_MAGIC] = -EBADMSG,
        [UNKNOWN_FLAG] = -EBADMSG,
        [CRC_FLAG_MISSING] = -EBADMSG,
        [OFFSET_NOT_A_RANGE_START] = -EPROTO,
        [RANGE_CLAIMED_TWICE] = -EPROTO,
        [FIRST_CHUNK_PAST_RANGE] = -EPROTO,
        [LATER_CHUNK_PAST_RANGE] = -EPROTO,
        [EMPTY_CHUNK] = -EPROTO,
        [ABORT_WITH_PAYLOAD] = -EBADMSG,
        [OTHER_JOB_MID_RANGE] = -EPROTO,
        [UNKNOWN_JOB] = -ETIMEDOUT,
        [EOF_MID_JOB] = -ECONNRESET,
        [EOF_IDLE] = -ECONNRESET,
};

/*
 * End a receives jobs 1 and 2 (1 MiB, two ranges each) and sends job 3, which cannot finish:
 * nobody reads the raw ends. The scripted peer breaks the protocol; a must break, report it
 * once, refuse new work, and fail every job with -ECONNRESET when freed (from the broken
 * callback for odd cases, as an owner would, or afterwards).
 */
START_TEST(test_hostile)
{
        const uint32_t C = TCP_STREAM_FLAG_CRC;
        TcpDataOptions o = {
                .crc = true,
                .chunk_size = CHUNK,
                .min_split_bytes = HALF,
                .unknown_job_wait_ms = 50,
        };
        World w;
        Xfer *x = xfer_new(1, MiB, 0, 0), *y = xfer_new(2, MiB, 0, 0);
        Xfer *s = xfer_new(3, 16 * MiB, 0, 0);
        TcpStreamRange ranges[2] = {{0, HALF}, {HALF, MiB}};
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        Done d[3] = {{0}};
        Xfer *xs[2] = {x, y};

        world_init_raw(&w, 2, _i % 3 == 0, 65536, &o);
        w.a.free_on_broken = _i % 2 == 1;
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, x->dst, x->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 2, y->dst, y->n_dst, on_done, &d[1]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 3, s->src, s->n_src, on_done, &d[2]), 0);

        switch (_i) {
        case BAD_MAGIC:
                put_header(hdr, TCP_STREAM_MAGIC + 1, C, 1, 0, 100, 0);
                raw_write(w.raw[0], hdr, sizeof(hdr));
                break;
        case UNKNOWN_FLAG:
                raw_chunk(w.raw[1], x, C | 0x100, 1, HALF, 100);
                break;
        case CRC_FLAG_MISSING:
                raw_chunk(w.raw[0], x, 0, 1, 0, 100);
                break;
        case OFFSET_NOT_A_RANGE_START:
                raw_chunk(w.raw[0], x, C, 1, 4096, 100);
                break;
        case RANGE_CLAIMED_TWICE:
                raw_range_part(w.raw[0], x, 1, 0, HALF, 1, 0);
                run_until_received(&w, w.a.td, CHUNK);
                raw_chunk(w.raw[1], x, C, 1, 0, 100);
                break;
        case FIRST_CHUNK_PAST_RANGE:
                put_header(hdr, TCP_STREAM_MAGIC, C, 1, HALF, HALF + 1, 0);
                raw_write(w.raw[1], hdr, sizeof(hdr));
                break;
        case LATER_CHUNK_PAST_RANGE:
                /* The header alone: its payload would never be read. */
                raw_chunk(w.raw[1], x, C, 1, HALF, 100);
                put_header(hdr, TCP_STREAM_MAGIC, C, 1, HALF + 100, HALF, 0);
                raw_write(w.raw[1], hdr, sizeof(hdr));
                break;
        case EMPTY_CHUNK:
                put_header(hdr, TCP_STREAM_MAGIC, C, 2, 0, 0, 0);
                raw_write(w.raw[0], hdr, sizeof(hdr));
                break;
        case ABORT_WITH_PAYLOAD:
                raw_chunk(w.raw[0], x, C | TCP_STREAM_FLAG_ABORT, 1, 0, 100);
                break;
        case OTHER_JOB_MID_RANGE:
                /* Ranges on one connection follow each other whole: no interleaving. */
                raw_range_part(w.raw[0], x, 1, 0, HALF, 2, 0);
                raw_chunk(w.raw[0], y, C, 2, 0, 100);
                break;
        case UNKNOWN_JOB:
                raw_chunk(w.raw[1], x, C, 999, 0, 100);
                break;
        case EOF_MID_JOB:
                raw_range_part(w.raw[0], x, 1, 0, HALF, 1, TCP_STREAM_HEADER_SIZE + 1000);
                ck_assert_int_eq(shutdown(w.raw[0], SHUT_WR), 0);
                break;
        case EOF_IDLE:
                ck_assert_int_eq(shutdown(w.raw[1], SHUT_WR), 0);
                break;
        }

        run_until(&w, &w.a.broken_calls, 1);
        ck_assert_int_eq(w.a.broken_error, hostile_error[_i]);
        if (w.a.free_on_broken) {
                /* Freed from inside the callback: every job failed there. */
                ck_assert_ptr_null(w.a.td);
        } else {
                ck_assert(tcp_data_is_broken(w.a.td));
                ck_assert_int_eq(tcp_data_send(w.a.td, 4, s->src, s->n_src, on_done, &d[0]),
                                 -EPIPE);
                ck_assert_int_eq(tcp_data_recv(w.a.td, 4, x->dst, x->n_dst, on_done, &d[0]),
                                 -EPIPE);
                ck_assert_int_eq(tcp_data_send_aborted(w.a.td, 4, 10), -EPIPE);
                ck_assert_int_eq(tcp_data_recv_discard(w.a.td, 4, 10), -EPIPE);
                for (int i = 0; i < 3; i++)
                        ck_assert_uint_eq(d[i].calls, 0);
                w.a.td = tcp_data_free(w.a.td);
        }
        for (int i = 0; i < 3; i++) {
                ck_assert_uint_eq(d[i].calls, 1);
                ck_assert_int_eq(d[i].status, -ECONNRESET);
        }
        ck_assert_uint_eq(w.a.broken_calls, 1);
        /* Only bytes of valid chunks landed, each where it belongs. */
        for (int i = 0; i < 2; i++)
                (void)xfer_check_prefixes(xs[i], ranges, 2);
        world_deinit(&w);
        xfer_free(x);
        xfer_free(y);
        xfer_free(s);
}
END_TEST

/* ---- corruption that fails one job only ---- */

/*
 * A flipped payload byte in one range of job 1 (in a middle chunk, or in the range's last one):
 * job 1 fails with -EILSEQ, and job 2, behind it on both connections, arrives whole.
 */
START_TEST(test_crc_mismatch)
{
        TcpDataOptions o = {.crc = true, .chunk_size = CHUNK, .min_split_bytes = HALF};
        World w;
        Xfer *x = xfer_new(11, MiB, 0, 0), *y = xfer_new(12, MiB, 0, 0);
        TcpStreamRange ranges[2] = {{0, HALF}, {HALF, MiB}};
        size_t bad_chunk = _i == 0 ? 2 : HALF / CHUNK - 1, len;
        Done d[2] = {{0}};

        world_init_raw(&w, 2, true, 0, &o);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 1, x->dst, x->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_recv(w.a.td, 2, y->dst, y->n_dst, on_done, &d[1]), 0);
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ uint8_t *wx = NULL, *wy = NULL;

                wx = wire_range(x, 1, ranges[i].start, ranges[i].end, CHUNK, true, &len);
                if (i == 1)
                        wx[bad_chunk * (TCP_STREAM_HEADER_SIZE + CHUNK) + TCP_STREAM_HEADER_SIZE +
                           4321] ^= 0x08;
                raw_write(w.raw[i], wx, len);
                wy = wire_range(y, 2, ranges[i].start, ranges[i].end, CHUNK, true, &len);
                raw_write(w.raw[i], wy, len);
        }
        run_until(&w, &done_total, 2);
        ck_assert_int_eq(d[0].status, -EILSEQ);
        ck_assert_int_eq(d[1].status, 0);
        xfer_check(y, 0, y->total);
        xfer_check_guards(x);
        ck_assert(!tcp_data_is_broken(w.a.td));
        ck_assert_uint_eq(w.a.broken_calls, 0);
        world_deinit(&w);
        xfer_free(x);
        xfer_free(y);
}
END_TEST

/* ---- freeing with jobs in flight ---- */

/*
 * a sends a job b never registers, b waits for one a never sends: freeing a fails a's job from
 * inside tcp_data_free(); b sees the end of stream, breaks, and freeing it fails b's job.
 */
START_TEST(test_free_in_flight)
{
        World w;
        Xfer *x = xfer_new(21, 16 * MiB, 0, 0), *y = xfer_new(22, MiB, 0, 0);
        Done d[2] = {{0}};
        TcpDataStats st;

        world_init(&w, 2, _i == 0, 128 * 1024, NULL);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, x->src, x->n_src, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 2, y->dst, y->n_dst, on_done, &d[1]), 0);
        tcp_data_get_stats(w.a.td, &st);
        ck_assert_uint_eq(st.jobs_in_flight, 1);
        w.a.td = tcp_data_free(w.a.td);
        ck_assert_uint_eq(d[0].calls, 1);
        ck_assert_int_eq(d[0].status, -ECONNRESET);

        run_until(&w, &w.b.broken_calls, 1);
        ck_assert_int_eq(w.b.broken_error, -ECONNRESET);
        ck_assert_uint_eq(d[1].calls, 0);
        tcp_data_get_stats(w.b.td, &st);
        ck_assert_uint_eq(st.jobs_in_flight, 1);
        w.b.td = tcp_data_free(w.b.td);
        ck_assert_uint_eq(d[1].calls, 1);
        ck_assert_int_eq(d[1].status, -ECONNRESET);
        xfer_check(y, 0, 0);
        world_deinit(&w);
        xfer_free(x);
        xfer_free(y);
}
END_TEST

typedef struct FreeFromDone {
        Done done;
        TcpData **td;
        Done *other;
} FreeFromDone;

static void on_done_free(void *userdata, int status)
{
        FreeFromDone *f = userdata;

        on_done(&f->done, status);
        ck_assert_uint_eq(f->other->calls, 0);
        *f->td = tcp_data_free(*f->td);
        /* The other job failed inside that call. */
        ck_assert_uint_eq(f->other->calls, 1);
        ck_assert_int_eq(f->other->status, -ECONNRESET);
}

/* The owner frees the TcpData from a done callback while another job is still in flight. */
START_TEST(test_free_from_done)
{
        World w;
        Xfer *x = xfer_new(31, 1000, 0, 0), *big = xfer_new(32, 16 * MiB, 0, 0);
        Done d[2] = {{0}};
        FreeFromDone f = {.td = &w.a.td, .other = &d[1]};

        world_init(&w, 1, true, 65536, NULL);
        ck_assert_int_eq(tcp_data_recv(w.b.td, 1, x->dst, x->n_dst, on_done, &d[0]), 0);
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, x->src, x->n_src, on_done_free, &f), 0);
        /* b never registers job 2: it stays in flight on a */
        ck_assert_int_eq(tcp_data_send(w.a.td, 2, big->src, big->n_src, on_done, &d[1]), 0);
        run_until(&w, &f.done.calls, 1);
        ck_assert_int_eq(f.done.status, 0);
        ck_assert_ptr_null(w.a.td);
        run_until(&w, &d[0].calls, 1);
        ck_assert_int_eq(d[0].status, 0);
        xfer_check(x, 0, x->total);
        world_deinit(&w);
        xfer_free(x);
        xfer_free(big);
}
END_TEST

/* A peer that goes away between jobs breaks the TcpData; later work is refused. */
START_TEST(test_peer_gone)
{
        World w;
        uint8_t buf[10] = {0};
        TcpSrcSegment src = {buf, sizeof(buf)};
        Done d = {0};

        world_init(&w, 3, _i == 0, 0, NULL);
        w.b.td = tcp_data_free(w.b.td);
        run_until(&w, &w.a.broken_calls, 1);
        ck_assert_int_eq(w.a.broken_error, -ECONNRESET);
        ck_assert(tcp_data_is_broken(w.a.td));
        ck_assert_int_eq(tcp_data_send(w.a.td, 1, &src, 1, on_done, &d), -EPIPE);
        world_deinit(&w);
        ck_assert_uint_eq(d.calls, 0);
}
END_TEST

static Suite *tcp_data_hostile_suite(void)
{
        Suite *s = suite_create("tcp-data-hostile");
        TCase *tc;

        tc = tcase_create("protocol");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_hostile, 0, _HOSTILE_MAX);
        tcase_add_loop_test(tc, test_crc_mismatch, 0, 2);
        suite_add_tcase(s, tc);

        tc = tcase_create("free");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_free_in_flight, 0, 2);
        tcase_add_test(tc, test_free_from_done);
        tcase_add_loop_test(tc, test_peer_gone, 0, 2);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(tcp_data_hostile_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
