/* SPDX-License-Identifier: MIT */
/*
 * Frame input with read-ahead (proto/wire.c) read by read, as libkvdist reads kvdistd's replies
 * (wire_in_cut(), wire_in_recv() with MSG_DONTWAIT), on a socketpair: frames cut from one read,
 * frames split across reads, payloads longer than the read-ahead buffer, fds given to the frame
 * they came with, and a peer that closes in the middle of a frame. Every read is counted: the
 * point of reading ahead is the system calls it saves.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/macro.h"
#include "proto/wire.h"

#define MAX_PAYLOAD (1u << 20)

static int sv[2]; /* sv[0]: the client's end (read through rx), sv[1]: the daemon's */
static WireIn rx;

static void setup(void)
{
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(wire_in_init_ahead(&rx), 0);
}

static void teardown(void)
{
        wire_in_done(&rx);
        safe_close(sv[0]);
        safe_close(sv[1]);
}

static uint8_t pattern(uint64_t id, size_t i)
{
        return (uint8_t)(id * 31 + i * 7 + (i >> 8));
}

/* The header of a reply to request @id with @len payload bytes and @n_fds fds. */
static void header_make(uint8_t *out, uint64_t id, uint32_t len, uint16_t n_fds)
{
        frame_header_encode(
                &(FrameHeader){
                        .magic = FRAME_MAGIC,
                        .version = FRAME_VERSION,
                        .type = 3,
                        .flags = FRAME_FLAG_REPLY,
                        .n_fds = n_fds,
                        .length = len,
                        .request_id = id,
                },
                out);
}

/* A reply to request @id: header and @len pattern bytes; returns its size. */
static size_t frame_make(uint8_t *out, uint64_t id, uint32_t len, uint16_t n_fds)
{
        header_make(out, id, len, n_fds);
        for (size_t i = 0; i < len; i++)
                out[FRAME_HEADER_SIZE + i] = pattern(id, i);
        return FRAME_HEADER_SIZE + len;
}

/* Writes all of @buf, @n_fds fds on its first byte. */
static void send_bytes(const uint8_t *buf, size_t len, const int *fds, size_t n_fds)
{
        size_t off = 0;

        while (off < len) {
                ssize_t n = frame_sendmsg(sv[1], buf + off, len - off, off == 0 ? fds : NULL,
                                          off == 0 ? n_fds : 0);

                ck_assert_int_gt(n, 0);
                off += (size_t)n;
        }
}

/* One read that must bring bytes; returns how many, and whether more may be there. */
static size_t recv_once(bool *ret_more)
{
        bool more = false;
        ssize_t n;

        n = wire_in_recv(&rx, sv[0], MSG_DONTWAIT, FRAME_MAX_FDS, &more);
        ck_assert_msg(n > 0, "wire_in_recv: %zd", n);
        if (ret_more)
                *ret_more = more;
        return (size_t)n;
}

/* One read that must fail; returns its error. */
static ssize_t recv_fails(void)
{
        bool more = false;
        ssize_t n;

        n = wire_in_recv(&rx, sv[0], MSG_DONTWAIT, FRAME_MAX_FDS, &more);
        ck_assert_int_lt(n, 0);
        return n;
}

/* The socket holds nothing for the client: a read would find it empty. */
static void assert_socket_empty(void)
{
        ck_assert_int_eq(recv_fails(), -EAGAIN);
}

/* The frame in rx is request @id's with @len pattern bytes and @n_fds fds; then it is reset. */
static void assert_frame(uint64_t id, uint32_t len, size_t n_fds)
{
        ck_assert_uint_eq(rx.header_len, FRAME_HEADER_SIZE);
        ck_assert(rx.frame_ok);
        ck_assert_uint_eq(rx.frame.request_id, id);
        ck_assert_uint_eq(rx.frame.flags, FRAME_FLAG_REPLY);
        ck_assert_uint_eq(rx.frame.length, len);
        ck_assert_uint_eq(rx.payload_len, len);
        for (size_t i = 0; i < len; i++)
                if (rx.payload[i] != pattern(id, i))
                        ck_abort_msg("frame %llu: payload byte %zu is %u, not %u",
                                     (unsigned long long)id, i, rx.payload[i], pattern(id, i));
        ck_assert_uint_eq(rx.n_fds, n_fds);
        if (n_fds == 0) {
                wire_in_reset(&rx);
                ck_assert(!rx.frame_ok);
        }
}

static int cut(void)
{
        return wire_in_cut(&rx, MAX_PAYLOAD);
}

/* An eventfd whose counter says @value: a received fd proves what it is by it. */
static int counter_fd(uint64_t value)
{
        int fd = eventfd(0, EFD_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(eventfd_write(fd, value), 0);
        return fd;
}

static uint64_t counter_of(int fd)
{
        eventfd_t v = 0;

        ck_assert_int_eq(eventfd_read(fd, &v), 0);
        return v;
}

/* Three replies (empty, short, longer) that arrive together cost one read. */
START_TEST(test_frames_in_one_read)
{
        uint8_t buf[1024];
        size_t len = 0;
        bool more = true;

        len += frame_make(buf + len, 1, 0, 0);
        len += frame_make(buf + len, 2, 10, 0);
        len += frame_make(buf + len, 3, 700, 0);
        send_bytes(buf, len, NULL, 0);

        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(recv_once(&more), len);
        /* Short: the socket is empty, nobody needs to look again before poll() says so. */
        ck_assert(!more);
        ck_assert_int_eq(cut(), 1);
        assert_frame(1, 0, 0);
        ck_assert_int_eq(cut(), 1);
        assert_frame(2, 10, 0);
        ck_assert_int_eq(cut(), 1);
        assert_frame(3, 700, 0);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.header_len, 0);
        assert_socket_empty();
}
END_TEST

/* A header that comes in two pieces, then a payload that does. */
START_TEST(test_split_header_and_payload)
{
        uint8_t buf[256];
        size_t len;

        len = frame_make(buf, 9, 100, 0);
        len += frame_make(buf + len, 10, 5, 0);

        send_bytes(buf, 10, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), 10);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.header_len, 10);
        assert_socket_empty();

        /* the rest of the header and 30 payload bytes */
        send_bytes(buf + 10, FRAME_HEADER_SIZE - 10 + 30, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), FRAME_HEADER_SIZE - 10 + 30);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.header_len, FRAME_HEADER_SIZE);
        ck_assert_uint_eq(rx.payload_len, 30);

        /* the payload's end with the next frame's first 3 bytes */
        send_bytes(buf + FRAME_HEADER_SIZE + 30, 70 + 3, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), 73);
        ck_assert_int_eq(cut(), 1);
        assert_frame(9, 100, 0);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.header_len, 3);

        send_bytes(buf + FRAME_HEADER_SIZE + 100 + 3, len - (FRAME_HEADER_SIZE + 100 + 3), NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), len - (FRAME_HEADER_SIZE + 100 + 3));
        ck_assert_int_eq(cut(), 1);
        assert_frame(10, 5, 0);
        ck_assert_int_eq(cut(), 0);
}
END_TEST

/*
 * A payload longer than the read-ahead buffer: what came with the header is copied, the rest is
 * read straight into the payload, which stops at the frame's end; the next frame is read ahead.
 */
START_TEST(test_long_payload)
{
        const uint32_t big = 100000;
        _cleanup_free_ uint8_t *buf = malloc(FRAME_HEADER_SIZE * 2 + big + 40);
        size_t len, first;
        bool more = false;

        ck_assert_ptr_nonnull(buf);
        len = frame_make(buf, 4, big, 0);
        first = len;
        len += frame_make(buf + len, 5, 40, 0);
        send_bytes(buf, len, NULL, 0);

        ck_assert_uint_eq(recv_once(&more), WIRE_AHEAD_SIZE);
        ck_assert(more);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.payload_len, WIRE_AHEAD_SIZE - FRAME_HEADER_SIZE);

        /* straight in: exactly the payload's rest, not a byte of the next frame */
        ck_assert_uint_eq(recv_once(&more), big - (WIRE_AHEAD_SIZE - FRAME_HEADER_SIZE));
        ck_assert(more);
        ck_assert_uint_eq(rx.received, first);
        ck_assert_int_eq(cut(), 1);
        assert_frame(4, big, 0);

        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(recv_once(&more), FRAME_HEADER_SIZE + 40);
        ck_assert(!more);
        ck_assert_int_eq(cut(), 1);
        assert_frame(5, 40, 0);
        assert_socket_empty();
}
END_TEST

/*
 * A payload of just under the buffer goes through it; one of exactly the buffer's size is read
 * straight when its header came alone.
 */
START_TEST(test_payload_at_buffer_size)
{
        _cleanup_free_ uint8_t *buf = malloc(FRAME_HEADER_SIZE + WIRE_AHEAD_SIZE);
        size_t len;

        ck_assert_ptr_nonnull(buf);
        len = frame_make(buf, 6, WIRE_AHEAD_SIZE, 0);
        send_bytes(buf, FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), FRAME_HEADER_SIZE);
        ck_assert_int_eq(cut(), 0);
        send_bytes(buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), WIRE_AHEAD_SIZE);
        /* straight into the payload: nothing went through the buffer */
        ck_assert_uint_eq(rx.ahead_len, FRAME_HEADER_SIZE);
        ck_assert_int_eq(cut(), 1);
        assert_frame(6, WIRE_AHEAD_SIZE, 0);

        len = frame_make(buf, 7, WIRE_AHEAD_SIZE - 1, 0);
        send_bytes(buf, FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), FRAME_HEADER_SIZE);
        ck_assert_int_eq(cut(), 0);
        send_bytes(buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), WIRE_AHEAD_SIZE - 1);
        ck_assert_uint_eq(rx.ahead_len, WIRE_AHEAD_SIZE - 1);
        ck_assert_int_eq(cut(), 1);
        assert_frame(7, WIRE_AHEAD_SIZE - 1, 0);
        assert_socket_empty();
}
END_TEST

/*
 * Fds go to the last frame that starts in the read they came with: here after a whole frame and
 * after the end of a frame that began in an earlier read; the frame after them has none.
 */
START_TEST(test_fds_go_with_their_frame)
{
        uint8_t a[64], b[64], c[64], d[64];
        size_t la, lb, lc, ld, n;
        int e1 = counter_fd(7), e2[2] = {counter_fd(11), counter_fd(13)};
        bool more = false;

        la = frame_make(a, 1, 20, 0);
        lb = frame_make(b, 2, 8, 1);
        lc = frame_make(c, 3, 4, 0);
        ld = frame_make(d, 4, 16, 2);

        /* a, then b with its fd, then c: the kernel ends the read after b */
        send_bytes(a, la, NULL, 0);
        send_bytes(b, lb, &e1, 1);
        send_bytes(c, lc, NULL, 0);
        safe_close(e1);

        n = recv_once(&more);
        ck_assert_uint_eq(n, la + lb);
        ck_assert(more); /* after fds a short read says nothing */
        ck_assert_int_eq(cut(), 1);
        assert_frame(1, 20, 0);
        ck_assert_int_eq(cut(), 1);
        assert_frame(2, 8, 1);
        ck_assert_uint_eq(counter_of(rx.fds[0]), 7);
        wire_in_reset(&rx);
        ck_assert_int_eq(cut(), 0);

        ck_assert_uint_eq(recv_once(&more), lc);
        ck_assert_int_eq(cut(), 1);
        assert_frame(3, 4, 0);

        /* a's header and 1 byte; then a's rest, and d with its fds */

        send_bytes(a, FRAME_HEADER_SIZE + 1, NULL, 0);
        ck_assert_uint_eq(recv_once(NULL), FRAME_HEADER_SIZE + 1);
        ck_assert_int_eq(cut(), 0);
        send_bytes(a + FRAME_HEADER_SIZE + 1, la - FRAME_HEADER_SIZE - 1, NULL, 0);
        send_bytes(d, ld, e2, 2);
        safe_close(e2[0]);
        safe_close(e2[1]);
        ck_assert_uint_eq(recv_once(NULL), la - FRAME_HEADER_SIZE - 1 + ld);
        ck_assert_int_eq(cut(), 1);
        assert_frame(1, 20, 0);
        ck_assert_int_eq(cut(), 1);
        assert_frame(4, 16, 2);
        ck_assert_uint_eq(counter_of(rx.fds[0]), 11);
        ck_assert_uint_eq(counter_of(rx.fds[1]), 13);
        wire_in_reset(&rx);
        ck_assert_int_eq(cut(), 0);
        assert_socket_empty();
}
END_TEST

/* An fd with a frame whose header says none, and a header whose fds never came. */
START_TEST(test_fds_not_matching_the_header)
{
        uint8_t a[64];
        size_t la;
        int e = counter_fd(1);

        la = frame_make(a, 1, 3, 0);
        send_bytes(a, la, &e, 1);
        safe_close(e);
        recv_once(NULL);
        ck_assert_int_eq(cut(), -EBADMSG);
        /* the header itself was sound: what it says stays for the caller's message */
        ck_assert(rx.frame_ok);
        ck_assert_uint_eq(rx.n_fds, 1);
        ck_assert_uint_eq(rx.frame.n_fds, 0);
        ck_assert_uint_eq(rx.n_next_fds, 0);
        /* the fd is the frame's, closed with it */
        wire_in_done(&rx);
        ck_assert_int_eq(wire_in_init_ahead(&rx), 0);

        la = frame_make(a, 2, 3, 1);
        send_bytes(a, la, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), -EBADMSG);
        ck_assert_uint_eq(rx.n_fds, 0);
        ck_assert_uint_eq(rx.frame.n_fds, 1);
}
END_TEST

/* Fds that come with bytes in the middle of a payload belong to no frame. */
START_TEST(test_fds_mid_payload)
{
        uint8_t a[256];
        int e = counter_fd(1);

        frame_make(a, 1, 200, 0);
        send_bytes(a, 50, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 0);
        send_bytes(a + 50, 100, &e, 1);
        safe_close(e);
        ck_assert_int_eq(recv_fails(), -EBADMSG);
        ck_assert_uint_eq(rx.n_stray_fds, 1);
        ck_assert_uint_eq(rx.frame.length, 200);
        ck_assert_uint_eq(rx.n_next_fds, 0);
}
END_TEST

/*
 * Fds that came with the end of a frame begun in an earlier read, and no frame starting there:
 * the next frame's header, in a later read, finds them still held and not its own.
 */
START_TEST(test_fds_with_no_frame_starting)
{
        uint8_t a[64], b[64];
        size_t la, lb;
        int e = counter_fd(1);

        la = frame_make(a, 1, 5, 0);
        lb = frame_make(b, 2, 5, 0);
        send_bytes(a, 10, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 0);
        send_bytes(a + 10, la - 10, &e, 1);
        safe_close(e);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 1);
        assert_frame(1, 5, 0);
        ck_assert_int_eq(cut(), 0);

        send_bytes(b, lb, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), -EBADMSG);
        ck_assert_uint_eq(rx.n_next_fds, 1);
        ck_assert_uint_ge(rx.frame_start, rx.next_fds_end);
}
END_TEST

/* Fds of a second read while those of the first still wait for their header: no frame's. */
START_TEST(test_fds_before_the_last_taken)
{
        uint8_t a[64];
        int e1 = counter_fd(1), e2 = counter_fd(2);

        frame_make(a, 1, 0, 1);
        send_bytes(a, 4, &e1, 1);
        safe_close(e1);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 0);
        send_bytes(a + 4, 4, &e2, 1);
        safe_close(e2);
        ck_assert_int_eq(recv_fails(), -EBADMSG);
        ck_assert_uint_eq(rx.n_stray_fds, 1);
        ck_assert_uint_eq(rx.n_next_fds, 1);
        ck_assert_uint_eq(counter_of(rx.next_fds[0]), 1);
}
END_TEST

/* Fds held for a frame whose header has not come are closed with the state. */
START_TEST(test_done_closes_held_fds)
{
        uint8_t a[64];
        int e = counter_fd(5), held;

        frame_make(a, 1, 0, 1);
        send_bytes(a, 4, &e, 1);
        safe_close(e);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 0);
        ck_assert_uint_eq(rx.n_next_fds, 1);
        held = rx.next_fds[0];
        ck_assert_uint_eq(counter_of(held), 5);
        wire_in_done(&rx);
        ck_assert_int_eq(fcntl(held, F_GETFD), -1);
        ck_assert_int_eq(errno, EBADF);
}
END_TEST

/*
 * Sends @len bytes of @buf and closes the stream; reads them, cuts the whole frame among them
 * first (request 1's, 10 bytes) when @whole, and finds the end of the stream with what was read
 * of the next frame still there to say where.
 */
static void read_then_end(const uint8_t *buf, size_t len, bool whole)
{
        send_bytes(buf, len, NULL, 0);
        (void)shutdown(sv[1], SHUT_WR);
        recv_once(NULL);
        if (whole) {
                ck_assert_int_eq(cut(), 1);
                assert_frame(1, 10, 0);
        }
        ck_assert_int_eq(cut(), 0);
        ck_assert_int_eq(recv_fails(), -ECONNRESET);
}

/* The peer closes in the middle of a header, of a payload, and between frames. */
START_TEST(test_closed_mid_frame)
{
        uint8_t a[64] = {};
        size_t la;

        la = frame_make(a, 1, 10, 0);
        read_then_end(a, la + 15, true); /* a whole, then 15 bytes of the next header */
        ck_assert_uint_eq(rx.header_len, 15);
        teardown();

        setup();
        read_then_end(a, FRAME_HEADER_SIZE + 3, false);
        ck_assert_uint_eq(rx.header_len, FRAME_HEADER_SIZE);
        ck_assert_uint_eq(rx.payload_len, 3);
        ck_assert_uint_eq(rx.frame.length, 10);
        teardown();

        setup();
        read_then_end(a, la, true);
        ck_assert_uint_eq(rx.header_len, 0);
}
END_TEST

/*
 * A header that breaks the limits is refused before anything is allocated for it, and nothing
 * says a frame was decoded: the frame before it, whose header is still in rx.frame, is not taken
 * for it in messages.
 */
START_TEST(test_bad_header)
{
        uint8_t a[64];
        size_t la;

        la = frame_make(a, 1, 5, 0);
        send_bytes(a, la, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), 1);
        assert_frame(1, 5, 0);

        header_make(a, 2, MAX_PAYLOAD + 1, 0);
        send_bytes(a, FRAME_HEADER_SIZE, NULL, 0);
        recv_once(NULL);
        ck_assert_int_eq(cut(), -EMSGSIZE);
        ck_assert_ptr_null(rx.payload);
        ck_assert(!rx.frame_ok);
}
END_TEST

static Suite *wire_in_suite(void)
{
        Suite *s = suite_create("wire-in");
        TCase *tc = tcase_create("read-by-read");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_frames_in_one_read);
        tcase_add_test(tc, test_split_header_and_payload);
        tcase_add_test(tc, test_long_payload);
        tcase_add_test(tc, test_payload_at_buffer_size);
        tcase_add_test(tc, test_fds_go_with_their_frame);
        tcase_add_test(tc, test_fds_not_matching_the_header);
        tcase_add_test(tc, test_fds_mid_payload);
        tcase_add_test(tc, test_fds_with_no_frame_starting);
        tcase_add_test(tc, test_fds_before_the_last_taken);
        tcase_add_test(tc, test_done_closes_held_fds);
        tcase_add_test(tc, test_closed_mid_frame);
        tcase_add_test(tc, test_bad_header);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(wire_in_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
