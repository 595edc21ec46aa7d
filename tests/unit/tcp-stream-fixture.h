/* SPDX-License-Identifier: MIT */
/*
 * Shared set-up for the TCP stream tests: seeded jobs with scattered, guarded segments, short
 * I/O on demand, socket pairs, captured and hand-made wire bytes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/tcp-stream.h"

#define GUARD 24
#define GUARD_BYTE 0xa5
#define FILL_BYTE 0x00 /* destination before anything lands; payload bytes are never 0 */
#define POLL_TIMEOUT_MS 10000

/* A job: scattered source segments, scattered destination segments with guards around each. */
typedef struct Job {
        uint64_t total;
        uint8_t *expect; /* the logical byte stream, total bytes, none of them 0 */
        uint8_t *src_buf;
        TcpSrcSegment *src;
        size_t n_src;
        uint8_t *dst_buf;
        size_t dst_buf_len;
        TcpDstSegment *dst;
        size_t n_dst;
} Job;

/*
 * A job of @total bytes: source and destination segments of random lengths up to @max_src_seg
 * and @max_dst_seg (some empty), seeded by @seed, the destination filled with FILL_BYTE.
 */
Job *job_new(uint64_t seed, uint64_t total, size_t max_src_seg, size_t max_dst_seg);
void job_free(Job *j);

/*
 * Asserts that logical bytes [@lo, @hi) of the destination hold the job's bytes, that every other
 * destination byte is untouched, and that every guard byte is intact.
 */
void job_check(const Job *j, uint64_t lo, uint64_t hi);

/* Puts the destination back as job_new() left it. */
void job_reset_dst(Job *j);

/*
 * While io_cap is set, every sendmsg(), recv() and readv() in this process moves at most io_cap
 * bytes, so that writes and reads stop inside headers and payloads at chosen points.
 */
extern size_t io_cap;

/* A non-blocking socketpair with buffers of @bufsize when > 0. */
void unix_pair(int fds[2], int bufsize);

/* A connected loopback TCP pair on an ephemeral port: fds[0] connects, fds[1] was accepted. */
void tcp_pair(int fds[2], int bufsize);

/* Sends a whole job as one stream and returns the bytes the sender put on the wire. */
uint8_t *capture(const Job *j, uint64_t id, uint32_t chunk, bool crc, size_t *ret_len);

/*
 * Feeds @len bytes of @buf to @r over a fresh socketpair, closing the write side afterwards when
 * @eof. Returns the receiver's verdict: 1, an error, or 0 when it is still waiting for more.
 */
int feed(TcpReceiver *r, const uint8_t *buf, size_t len, bool eof);

/* Appends one hand-made chunk header to @buf (which must have room). */
size_t put_header(uint8_t *buf, uint32_t magic, uint32_t flags, uint64_t id, uint64_t offset,
                  uint32_t len, uint32_t crc);

/* Appends a well-formed-looking chunk carrying the job's bytes at @offset (or any, if outside). */
size_t put_chunk(uint8_t *buf, const Job *j, uint32_t magic, uint32_t flags, uint64_t id,
                 uint64_t offset, uint32_t len, bool crc);

/* A rejected header: the verdict, nothing written, and its payload still unread on the socket. */
void assert_header_rejected(const Job *j, const uint8_t *wire, size_t len, bool crc, int want);
