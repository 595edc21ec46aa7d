/* SPDX-License-Identifier: MIT */
/*
 * A fake kvdistd for the client library's tests: a thread that accepts one connection on a
 * socket in a temporary directory and speaks frames through proto/frame.c, following a script.
 * The script records what it saw in the FakeDaemon; the test checks it after fake_stop().
 * Scripts run on the fake's thread and never call Check: they use EXPECT().
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include <kvdist/kvdist.h>
#include "proto/kvdist.pb-c.h"

typedef struct FakeDaemon FakeDaemon;

/* Speaks to the client on @fd; the fake closes @fd when the script returns. */
typedef void (*FakeScript)(FakeDaemon *d, int fd);

struct FakeDaemon {
        char dir[64];
        char path[108];
        int listen_fd;
        pthread_t thread;
        FakeScript script;
        int go[2]; /* the test writes a byte when a script may go on */

        /* What the script saw; read by the test after fake_stop(). */
        int fail_line; /* a script expectation that failed, 0 if none */
        uint64_t u[16];
        int64_t s[16];
        char str[256];
        uint16_t types[16];
        size_t n_types;
};

/* A script expectation: on failure, remember the line and end the script. */
#define EXPECT(d, cond)                                                                            \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        (d)->fail_line = __LINE__;                                                 \
                        return;                                                                    \
                }                                                                                  \
        } while (0)

/* One request as the fake received it: it owns the unpacked message and the fds. */
typedef struct FakeFrame {
        FrameHeader h;
        ProtobufCMessage *msg;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
} FakeFrame;

/* Frees the message and closes the fds of @f. */
void fake_frame_done(FakeFrame *f);

/*
 * Reads one request from the client into @f and records its type in @d->types. Returns 1, 0 at
 * EOF, -1 on a bad frame. On 1 the caller owns @f (fake_frame_done()).
 */
int fake_recv(FakeDaemon *d, int fd, FakeFrame *f);

/* Writes all of @buf, the @n_fds fds attached to its first byte. Returns 0 or -1. */
int fake_send_all(int fd, const uint8_t *buf, size_t len, const int *fds, size_t n_fds);

/*
 * Packs the frame that answers @req with @msg (its reply type), its header saying @n_fds fds,
 * into a malloc()ed *@ret_buf of *@ret_len bytes, for a script that sends several at once.
 * Returns 0 or -1.
 */
int fake_pack_reply(const FakeFrame *req, const ProtobufCMessage *msg, size_t n_fds,
                    uint8_t **ret_buf, size_t *ret_len);

/* Answers @req with @msg (its reply type) and @n_fds fds. Returns 0 or -1. */
int fake_reply(int fd, const FakeFrame *req, const ProtobufCMessage *msg, const int *fds,
               size_t n_fds);

/* Answers @req with an error frame (a bare Status). Returns 0 or -1. */
int fake_error(int fd, const FakeFrame *req, int code, const char *detail);

/* Says why the connection closes: an error frame about the connection, not a request. 0 or -1. */
int fake_farewell(int fd, int code, const char *detail);

/* Answers @req with its reply type, holding only a Status. Returns 0 or -1. */
int fake_status(int fd, const FakeFrame *req, int code, const char *detail);

/* Answers a Transfer request with @code, @detail and @bytes moved. Returns 0 or -1. */
int fake_transfer_reply(int fd, const FakeFrame *f, int code, const char *detail, uint64_t bytes);

/* Hello, then (with @init) ClientInit answered with an effective timeout of 250 ms. 0 or -1. */
int fake_handshake(FakeDaemon *d, int fd, bool init);

/* Expects ClientFinalize, answers it, and expects EOF. Returns 0 or -1. */
int fake_finalize(FakeDaemon *d, int fd);

/* On the script's thread: blocks until the test calls fake_go(). */
void fake_wait_go(FakeDaemon *d);

/*
 * Listens on a fresh socket (@d->path) and starts the thread that accepts one connection and
 * runs @script on it. Check assertions on failure.
 */
void fake_start(FakeDaemon *d, FakeScript script);

/* Lets a script waiting in fake_wait_go() go on. */
void fake_go(FakeDaemon *d);

/*
 * kvd_client_init() on the fake's socket as cluster 1, a decoder, device 0; asserts it
 * succeeds. The caller owns the client.
 */
kvd_client *fake_client_init(FakeDaemon *d);

/*
 * Joins the thread, removes the socket and its directory, and asserts that every expectation
 * of the script held. @d's records stay readable.
 */
void fake_stop(FakeDaemon *d);
