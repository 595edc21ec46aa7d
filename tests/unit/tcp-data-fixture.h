/* SPDX-License-Identifier: MIT */
/*
 * Shared set-up for the TCP data plane tests: seeded transfers with scattered, guarded
 * destination segments, two TcpData ends (or one and raw sockets) on one event_base, and waits
 * that run the loop until something happened.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "daemon/transport/tcp-data.h"

#define GUARD 64
#define GUARD_BYTE 0xa5
#define FILL_BYTE 0x00 /* destination before anything lands; pattern bytes are never 0 */

/*
 * One transfer's memory: the logical byte stream, source segments scattered in a buffer, and
 * destination segments in shuffled order with a guard zone around each.
 */
typedef struct Xfer {
        uint64_t total;
        uint8_t *expect;
        uint8_t *src_buf;
        TcpSrcSegment *src;
        size_t n_src;
        uint8_t *dst_buf;
        size_t dst_buf_len;
        TcpDstSegment *dst;
        size_t n_dst;
} Xfer;

/*
 * A transfer of @total bytes; segments of @src_seg and @dst_seg bytes (the last one shorter),
 * or of random lengths up to 64 KiB (some empty) where 0.
 */
Xfer *xfer_new(uint64_t seed, uint64_t total, size_t src_seg, size_t dst_seg);
void xfer_free(Xfer *x);

/* Asserts that exactly logical bytes [@lo, @hi) landed, and that every guard byte is intact. */
void xfer_check(const Xfer *x, uint64_t lo, uint64_t hi);

/* Asserts that every byte outside the destination segments is a guard byte. */
void xfer_check_guards(const Xfer *x);

/*
 * For a transfer cut into @ranges that may have stopped early: asserts that each range holds a
 * correct prefix and nothing after it, guards intact. Returns the bytes that landed.
 */
uint64_t xfer_check_prefixes(const Xfer *x, const TcpStreamRange *ranges, unsigned n);

/* A copy of the destination buffer, guards included. */
uint8_t *xfer_snapshot(const Xfer *x);

/* A done callback's record: how often it ran and with what. */
typedef struct Done {
        unsigned calls;
        int status;
        const Xfer *snapshot_of; /* when set, the callback copies its destination */
        uint8_t *snapshot;
} Done;

/* Counts every done callback since the last world_init*(), for waits. */
extern unsigned done_total;

/* A tcp_data_done_fn for a Done; asserts it runs once. */
void on_done(void *userdata, int status);

/* One TcpData end and what its broken callback saw. */
typedef struct Peer {
        TcpData *td;
        unsigned broken_calls;
        int broken_error;
        bool free_on_broken; /* the broken callback frees td, as an owner would */
} Peer;

typedef struct World {
        struct event_base *base;
        unsigned n;
        Peer a, b;
        int raw[TCP_DATA_MAX_CONNS]; /* world_init_raw(): the other ends of a's sockets */
} World;

/*
 * Two TcpData ends, a and b, over @n loopback TCP connections (socketpairs unless @tcp), with
 * socket buffers of @bufsize when > 0; @tmpl gives the other options (may be NULL). Resets
 * done_total.
 */
void world_init(World *w, unsigned n, bool tcp, int bufsize, const TcpDataOptions *tmpl);

/*
 * One TcpData end, a, whose sockets' other ends are w->raw[] (blocking), for scripted peers.
 * Resets done_total.
 */
void world_init_raw(World *w, unsigned n, bool tcp, int bufsize, const TcpDataOptions *tmpl);

/* Frees whatever of a, b and the raw sockets is left, then the event_base. */
void world_deinit(World *w);

/* Runs the loop until *@counter reaches @want. */
void run_until(World *w, const unsigned *counter, unsigned want);

/* Runs the loop, looking at @cond after every event and at least every millisecond. */
void run_until_cond(World *w, bool (*cond)(void *userdata), void *userdata);

/* The wire bytes of one range of @x's job, as a TcpSender puts them on a socket. */
uint8_t *wire_range(const Xfer *x, uint64_t id, uint64_t start, uint64_t end, uint32_t chunk,
                    bool crc, size_t *ret_len);

/* Writes all of @buf to the blocking socket @fd. */
void raw_write(int fd, const void *buf, size_t len);

/* Reads exactly @len bytes from the blocking socket @fd. */
void raw_read(int fd, void *buf, size_t len);

/* A chunk header, as tcp-stream writes it. */
void put_header(uint8_t *buf, uint32_t magic, uint32_t flags, uint64_t id, uint64_t offset,
                uint32_t len, uint32_t crc);
