/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for what tcp-stream.c offers a receiver that serves many jobs on one connection:
 * ABORT chunks, headers parsed before the receiver is chosen, discard mode, and byte budgets;
 * every stream stays in step for what follows it.
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
        TcpStreamHeader h = {0};
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
        h = (TcpStreamHeader){.transfer_id = 99};
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
                        {.fd = fds[0], .events = POLLOUT},
                        {.fd = fds[1], .events = POLLIN},
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

static Suite *tcp_stream_abort_suite(void)
{
        Suite *s = suite_create("tcp-stream-abort");
        TCase *tc;

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

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(tcp_stream_abort_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
