/* SPDX-License-Identifier: MIT */
/*
 * TCP data plane: the data connections to one peer daemon and the threads that move transfer
 * bytes over them, straight out of and into mapped memory (tcp-stream chunks, no staging copy).
 *
 * A TcpData owns N connected stream sockets to one peer (N is the same on both ends: the peers
 * agree on it when they connect) and one I/O thread per socket. Both ends may send and receive on
 * every socket at once.
 *
 * Jobs. A job is the byte stream of one transfer in one direction, named by a 64-bit job id that
 * the *receiving* daemon chose (so ids are unique among the jobs a daemon receives). The sender
 * lays its source segments end to end; the receiver lays its destination segments end to end; both
 * lists add up to the same total. Both ends cut the stream with
 * tcp_stream_split(total, N, min_split_bytes) into the same ranges. The sender puts each range on
 * one connection of its choice (large jobs over all connections in parallel, small jobs on the
 * least busy one); ranges on one connection are sent one after another, each in order. The
 * receiver learns which range arrives where from the first chunk header (its offset is the
 * range's start) and finds the job by the header's id; a chunk for a job that is not registered
 * yet waits (that connection stops reading) until the job is registered or
 * TCP_DATA_UNKNOWN_JOB_WAIT_MS pass, which breaks the TcpData.
 *
 * Aborts. A sender that must stop (cancelled job, tcp_data_send_aborted()) ends every range it has
 * not finished with an ABORT chunk (TCP_STREAM_FLAG_ABORT, no payload) at the range's current
 * offset, so the stream stays in step and the receiver's job fails with -ECANCELED. A receiver
 * whose job is cancelled reads the rest of that job's ranges into a scratch buffer and drops them.
 *
 * Threads and completions. Jobs are handed over, cancelled and completed on the control loop
 * thread; completions cross back through a queue and an eventfd watched on the loop, and the
 * done callback runs there, exactly once per job registered with one. Once a job's done callback
 * has been called, no thread touches that job's memory any more: a send's source and a receive's
 * destination may then be unmapped or reused.
 *
 * Failure. A connection error, an end of stream, or a chunk that breaks the protocol (bad magic,
 * an unknown job after the wait, an offset that is no range's start, overlapping ranges, a CRC
 * flag that disagrees) makes the whole TcpData broken: the broken callback runs once on the loop,
 * and the owner is expected to call tcp_data_free(), which fails every job still registered.
 * A CRC mismatch fails only that job (-EILSEQ); the stream stays in step.
 *
 * Everything returns 0 or a negative errno; nothing here logs above debug.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/time-util.h"
#include "daemon/transport/tcp-stream.h"

struct event_base;

typedef struct TcpData TcpData;

#define TCP_DATA_MAX_CONNS 16
#define TCP_DATA_UNKNOWN_JOB_WAIT_MS 10000
/* Ranges shorter than this are not split further across connections. */
#define TCP_DATA_MIN_SPLIT_DEFAULT (UINT64_C(1) << 20)

/* Runs on the control loop thread: @status is 0 when every byte was sent (send jobs) or landed
 * and passed its CRC (receive jobs), else -ECANCELED, -EILSEQ, -ECONNRESET, ... */
typedef void (*tcp_data_done_fn)(void *userdata, int status);

/*
 * Runs on the control loop thread, once, when the TcpData broke; @error says why: -ECONNRESET for
 * an end of stream, -EBADMSG or -EPROTO for a chunk that breaks the protocol, -ETIMEDOUT for a
 * chunk of a job that was not registered in time, or the errno of a failed system call. It may
 * call tcp_data_free().
 */
typedef void (*tcp_data_broken_fn)(TcpData *td, int error, void *userdata);

typedef struct TcpDataOptions {
        struct event_base *base;  /* the control loop */
        const int *fds;           /* connected stream sockets; taken (closed on failure) */
        unsigned n_fds;           /* 1..TCP_DATA_MAX_CONNS, equal on both ends */
        uint32_t chunk_size;      /* 0: TCP_STREAM_CHUNK_DEFAULT */
        bool crc;                 /* CRC32C per chunk; both ends must agree */
        uint64_t min_split_bytes; /* 0: TCP_DATA_MIN_SPLIT_DEFAULT; equal on both ends */
        tcp_data_broken_fn broken;
        void *userdata;
        const char *name;             /* "peer 10.0.0.2:7000", for debug logs; copied */
        unsigned unknown_job_wait_ms; /* 0: TCP_DATA_UNKNOWN_JOB_WAIT_MS; tests make it short */
} TcpDataOptions;

/* Counters, read on the loop thread. */
typedef struct TcpDataStats {
        uint64_t bytes_sent; /* payload bytes */
        uint64_t bytes_received;
        uint64_t jobs_sent; /* completed with status 0 */
        uint64_t jobs_received;
        uint64_t jobs_failed;
        unsigned jobs_in_flight; /* registered, done not yet called */
} TcpDataStats;

/*
 * Takes the sockets (made non-blocking and TCP_NODELAY here), starts one thread per socket and
 * watches the completion eventfd on @o->base. -EINVAL for a bad option, -ENOMEM, or the error of
 * creating a thread; the sockets are closed on failure.
 */
int tcp_data_new(const TcpDataOptions *o, TcpData **ret);

/*
 * Stops and joins the threads, closes the sockets (abortively: unsent bytes are dropped and the
 * peer sees a reset), and calls the done callback of every job still registered with
 * -ECONNRESET (from inside this call; a job that completed but whose callback had not run yet
 * gets its own status). May be called from a done or broken callback. Accepts NULL; returns NULL.
 */
TcpData *tcp_data_free(TcpData *td);

/*
 * Starts sending job @job_id: the bytes of @segs (@n entries, borrowed, with the memory they
 * name, until @done runs). -EEXIST when a send job with that id is registered (until its last
 * range is on the wire), -EINVAL for an empty job or a NULL segment with a length, -EPIPE when
 * the TcpData is broken or being freed. @done may be NULL when nobody needs to know.
 */
int tcp_data_send(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                  tcp_data_done_fn done, void *userdata);

/*
 * tcp_data_send() of segments whose byte count @total the caller took with
 * tcp_stream_src_total() (off the control loop: a transport's stage op), so that the list is not
 * walked again here. @total must be that count.
 */
int tcp_data_send_total(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                        uint64_t total, tcp_data_done_fn done, void *userdata);

/*
 * Sends job @job_id of @total bytes as aborted: one ABORT chunk for each of its ranges, so the
 * receiving end's job finishes (failed) without a byte of payload. No callback. For a job that the
 * receiver registered but this end will not send after all. Errors as tcp_data_send().
 */
int tcp_data_send_aborted(TcpData *td, uint64_t job_id, uint64_t total);

/*
 * Stops send job @job_id: ranges not finished end with an ABORT chunk after the chunk in
 * progress (the payload promised by a header that was sent is sent). Its done callback follows
 * with -ECANCELED, or with the job's own status if it had already finished. Unknown ids are
 * ignored.
 */
void tcp_data_cancel_send(TcpData *td, uint64_t job_id);

/*
 * Registers receive job @job_id: its bytes land in @segs (@n entries, borrowed, with the memory
 * they name, until @done runs). -EEXIST when a receive job with that id is registered (a
 * cancelled or failed one stays registered, dropping what arrives, until every one of its
 * ranges went past), -EINVAL as tcp_data_send(), -EPIPE when broken.
 */
int tcp_data_recv(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                  tcp_data_done_fn done, void *userdata);

/*
 * tcp_data_recv() with a deadline on CLOCK_MONOTONIC (0: none): from @deadline_usec on, the I/O
 * threads write nothing more into @segs, whatever the control loop is doing (a range in progress
 * stops before its next read; one that starts later is dropped), and the job fails with
 * -ETIMEDOUT. The rest of the job is read and dropped, so the streams stay in step.
 */
int tcp_data_recv_until(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                        usec_t deadline_usec, tcp_data_done_fn done, void *userdata);

/* tcp_data_recv_until() with @total counted by the caller, as tcp_data_send_total(). */
int tcp_data_recv_until_total(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                              uint64_t total, usec_t deadline_usec, tcp_data_done_fn done,
                              void *userdata);

/*
 * Registers receive job @job_id of @total bytes whose bytes nobody wants: they are read and
 * dropped, and the job disappears once every range has arrived or aborted. No callback.
 */
int tcp_data_recv_discard(TcpData *td, uint64_t job_id, uint64_t total);

/*
 * Stops receive job @job_id from writing into its destination: the done callback follows with
 * -ECANCELED (or the job's own status if it had finished) as soon as no thread writes into the
 * destination any more; whatever of the job still arrives is dropped. Unknown ids are ignored.
 */
void tcp_data_cancel_recv(TcpData *td, uint64_t job_id);

/*
 * The payload bytes job @job_id (a send when @send, else a receive) moved so far, in *@ret:
 * sent, or landed in its destination. -ENOENT when no such job is in progress (not registered
 * yet, or over on the wire).
 */
int tcp_data_progress(TcpData *td, uint64_t job_id, bool send, uint64_t *ret);

/* Whether the TcpData broke (every later send/recv fails with -EPIPE). */
bool tcp_data_is_broken(const TcpData *td);

/* The number of connections. */
unsigned tcp_data_n_conns(const TcpData *td);

/* Fills @ret with the counters. */
void tcp_data_get_stats(const TcpData *td, TcpDataStats *ret);
