/* SPDX-License-Identifier: MIT */
/*
 * Harness of the socket-level fuzz targets: a real Daemon (built-in defaults, a small pool) run
 * in-process, sockets whose other ends the daemon serves as client connections (conn_new()) or
 * as accepted peer connections (peer_accept()), an event loop driven until it is idle, the
 * script interpreter of fuzz-script.h, and the checks every input gets:
 *
 *  - every frame the daemon sends decodes: a known header, a payload its type's descriptor
 *    unpacks, a reply with a Status whose code is a KVD_E_* value (an error frame: not OK);
 *  - the loop becomes idle: a daemon that keeps an always-ready event spins (abort);
 *  - once our ends are closed the daemon drops every connection, cluster, peer, link and
 *    transfer they held, and after it is freed no fd and (under LeakSanitizer) no memory is
 *    left behind.
 *
 * The daemon dials no other host and takes no port a script names: in these programs (linked
 * with --wrap=connect,--wrap=bind) connect() to an IP address fails with ENETUNREACH and bind()
 * to one gets a free loopback port.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <protobuf-c/protobuf-c.h>

#include "daemon/config.h"
#include "proto/frame.h"
#include "tests/fuzz/fuzz-script.h"

typedef struct Daemon Daemon;
typedef struct FuzzDaemon FuzzDaemon;

/* A harness assumption or an oracle: when it does not hold, the input found a bug. */
#define FUZZ_CHECK(x)                                                                              \
        do {                                                                                       \
                if (!(x)) {                                                                        \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #x);      \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

/* Endpoints a harness may hold: those a script names, and data connections behind them. */
#define FUZZ_ENDPOINTS_MAX (FUZZ_MAX_ENDPOINTS + 16)

typedef struct FuzzEndpoint {
        int fd;              /* our end; -1 when not open or closed */
        int daemon_fd;       /* the number of the daemon's end (the daemon owns it) */
        uint64_t daemon_ino; /* its inode, to tell whether daemon_fd still names it */
        bool opened;         /* set up once (a closed endpoint is not opened again) */
        bool frames;         /* the daemon sends frames here; else a data stream (dropped) */
        bool no_read;        /* we shut our reading side down */
        bool paused;         /* FUZZ_OP_PAUSE: we do not read for now */
        uint8_t *buf;        /* bytes of frames from the daemon not parsed yet */
        size_t len, cap;
} FuzzEndpoint;

/* What a target adds to the script interpreter. */
typedef struct FuzzTarget {
        /* Opens endpoint @i (named by FUZZ_OP_ENDPOINT for the first time) in @mode. */
        void (*open_endpoint)(FuzzDaemon *f, unsigned i, uint8_t mode);
        /*
         * Sees each well-formed frame the daemon sent on endpoint @i, decoded as @msg (an error
         * frame as a bare Status), e.g. to learn ids it hands out. May be NULL.
         */
        void (*on_frame)(FuzzDaemon *f, unsigned i, const FrameHeader *h,
                         const ProtobufCMessage *msg);
        /*
         * May rewrite the request @msg of @type before FUZZ_OP_FRAME packs it (fill in ids the
         * daemon handed out) and note what it does to the connection; returns whether it
         * changed @msg. May be NULL.
         */
        bool (*fixup)(FuzzDaemon *f, uint16_t type, ProtobufCMessage *msg);
        /* FUZZ_OP_CHUNK: the record after the op byte; returns the bytes it used, 0 when cut. */
        size_t (*chunk)(FuzzDaemon *f, uint8_t arg, const uint8_t *data, size_t size);
        void *userdata;
} FuzzTarget;

struct FuzzDaemon {
        Daemon *daemon;
        const FuzzTarget *target;
        FuzzEndpoint ep[FUZZ_ENDPOINTS_MAX];
        unsigned cur; /* the endpoint the script acts on */
        unsigned wait_left_ms;
        unsigned n_fds; /* fds open before the daemon was made */

        /* fuzz_expect_reply(): the reply it waits for */
        bool want;
        bool wanted_done;
        unsigned want_ep;
        uint16_t want_type;
        ProtobufCMessage *wanted;
};

/*
 * Once per process: quiet logs (KVDIST_FUZZ_LOG=error|...|debug shows them; debug also each frame
 * the daemon sends), a private folder for the daemon's socket, SIGPIPE ignored.
 */
void fuzz_init(void);

/*
 * A daemon with the built-in defaults, a pool of 1 MiB, one copy thread and its socket in the
 * private folder; @tweak (may be NULL) adjusts the config first. Aborts when it cannot be made.
 */
FuzzDaemon *fuzz_daemon_new(const FuzzTarget *target, void (*tweak)(Config *c));

/* A file @name in the private folder (malloc()ed). */
char *fuzz_private_path(const char *name);

/*
 * Closes our ends and checks that the daemon lets go of every connection, cluster, peer, link
 * and transfer they held, then frees it; aborts when it does not, or when an fd is left open.
 */
void fuzz_daemon_free(FuzzDaemon *f);

/* Makes endpoint @i a client connection (conn_new() on the daemon's end). */
void fuzz_endpoint_client(FuzzDaemon *f, unsigned i);

/* Makes endpoint @i a connection from a peer daemon (peer_accept()); @frames: see FuzzEndpoint. */
void fuzz_endpoint_peer(FuzzDaemon *f, unsigned i, bool frames);

/* The first endpoint at or after @from that is not opened yet; aborts when none is left. */
unsigned fuzz_endpoint_free_slot(FuzzDaemon *f, unsigned from);

/* Runs the event loop until nothing is ready, reading what the daemon sends meanwhile. */
void fuzz_settle(FuzzDaemon *f);

/*
 * Packs @msg as a request of @type with @id (and @fd, -1 for none, which stays the caller's) and
 * sends it whole on endpoint @i; the loop does not run (fuzz_expect_reply() runs it). Returns
 * false when the endpoint cannot take it.
 */
bool fuzz_send_request(FuzzDaemon *f, unsigned i, uint16_t type, uint64_t id,
                       const ProtobufCMessage *msg, int fd);

/*
 * The next frame on endpoint @i that is a reply of @type (others are checked and dropped),
 * decoded with its reply descriptor; NULL when the daemon answered with an error or closed.
 * Free it with protobuf_c_message_free_unpacked().
 */
ProtobufCMessage *fuzz_expect_reply(FuzzDaemon *f, unsigned i, uint16_t type);

/* fuzz_send_request(), then whether its reply came with Status OK. */
bool fuzz_request_ok(FuzzDaemon *f, unsigned i, uint16_t type, uint64_t id,
                     const ProtobufCMessage *msg, int fd);

/* Whether @reply, decoded with its type's reply descriptor, carries Status OK. */
bool fuzz_reply_ok(const ProtobufCMessage *reply);

/* Sends @len bytes on endpoint @i as they are (a data stream), settling while it is full. */
void fuzz_send_raw(FuzzDaemon *f, unsigned i, const void *buf, size_t len);

/* Runs the records of a script (fuzz-script.h) over @data. */
void fuzz_run_script(FuzzDaemon *f, const uint8_t *data, size_t size);

/* Readers of the script's little-endian integers: false (nothing read) when it is cut short. */
bool fuzz_u8(const uint8_t **data, size_t *size, uint8_t *ret);
bool fuzz_u16(const uint8_t **data, size_t *size, uint16_t *ret);
bool fuzz_u32(const uint8_t **data, size_t *size, uint32_t *ret);
bool fuzz_u64(const uint8_t **data, size_t *size, uint64_t *ret);
