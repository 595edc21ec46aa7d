/* SPDX-License-Identifier: MIT */
/*
 * TCP data plane internals: the job, range and connection state that tcp-data.c (the control
 * loop's side) shares with tcp-data-conn.c (the connection threads). No other file includes it.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "common/clist.h"
#include "common/macro.h"
#include "daemon/transport/tcp-data.h"
#include "common/time-util.h"

struct event;

/* Job ids hash into this many chains per direction; chains stay short for thousands of jobs. */
#define TABLE_BUCKETS 256
/* Payload moved per turn of a thread on one direction before it looks at the other one. */
#define TURN_BYTES (UINT64_C(1) << 20)
/* Where discarded payload lands, per connection. */
#define SCRATCH_SIZE ((size_t)64 << 10)

typedef enum JobKind {
        JOB_SEND,
        JOB_RECV,
} JobKind;

typedef struct Job Job;

/*
 * One tcp_stream_split() range of a job. A send range sits on its connection's queue until that
 * connection's thread takes it; a receive range is claimed by the thread whose connection
 * carried its first chunk.
 */
typedef struct Range {
        Job *job;
        CList link; /* send: on Conn.queue until taken */
        TcpStreamRange r;
        unsigned conn;
        uint64_t weight; /* send: what it adds to Conn.queued_bytes */
        bool started;    /* send: taken by the thread; receive: claimed */
        bool abort_only; /* send: goes out as one ABORT chunk, reads no memory */
        bool busy;       /* counted in Job.n_busy */
} Range;

/*
 * Everything under TcpData.lock unless said otherwise. A job leaves its table when every range
 * is over on the wire (finished); its callback may run earlier, once no range can touch its
 * memory any more (cancelled or failed, n_busy 0). It is freed on the loop after both.
 */
struct Job {
        TcpData *td;
        JobKind kind;
        uint64_t id;
        uint64_t total;
        CList link_table;
        CList link_done;       /* on TcpData.done while its callback or freeing is due */
        tcp_data_done_fn done; /* immutable */
        void *userdata;
        const TcpSrcSegment *src; /* immutable; NULL for an aborted send */
        const TcpDstSegment *dst; /* immutable; NULL for a discarded receive */
        size_t n_segs;
        usec_t deadline;              /* immutable; receive: 0, or no byte lands from then on */
        unsigned n_ranges;            /* immutable */
        unsigned n_finished;          /* ranges over on the wire */
        unsigned n_busy;              /* ranges that may still touch the job's memory */
        int status;                   /* the first failure */
        atomic_bool stop;             /* cancelled or failed: stop touching memory */
        _Atomic uint64_t bytes_moved; /* payload sent or landed, for progress reports */
        bool notify_due;
        bool notified; /* the callback ran, or there is none */
        bool finished;
        Range ranges[];
};

typedef struct Conn {
        TcpData *td;
        unsigned idx;
        int fd;
        int wake_fd; /* eventfd: new ranges, a cancel, a new job, stop */
        pthread_t thread;
        atomic_bool kick; /* ranges were queued since the thread last looked */
        _Atomic uint64_t bytes_sent;
        _Atomic uint64_t bytes_received;

        /* Under TcpData.lock. */
        CList queue;           /* Range.link of send ranges, in order */
        uint64_t queued_bytes; /* of ranges queued or in progress: how busy it is */
        bool waiting;          /* its receive side waits for an unknown job */

        /* The thread's own. */
        Range *tx;
        TcpSender sender;
        bool tx_aborting;
        Range *rx;
        TcpReceiver receiver;
        bool rx_discarding;
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        uint32_t hdr_got;
        bool hdr_ready;
        TcpStreamHeader h;
        usec_t wait_until;
        unsigned wait_gen;
        uint8_t *scratch;
} Conn;

struct TcpData {
        struct event_base *base;
        struct event *event;
        int efd; /* completions and breakage: wakes the loop */
        char *name;
        uint32_t chunk_size;
        bool crc;
        uint64_t min_split;
        usec_t wait_usec;
        tcp_data_broken_fn broken;
        void *userdata;

        atomic_int error;     /* what broke it, 0 while sound */
        atomic_bool stop;     /* tcp_data_free(): the threads leave */
        atomic_uint recv_gen; /* bumped on every receive job registered */

        /* The loop's own. */
        bool broken_reported;
        bool freeing;
        unsigned dispatching;
        unsigned next_conn;
        TcpDataStats stats;

        pthread_mutex_t lock;
        CList send_table[TABLE_BUCKETS];
        CList recv_table[TABLE_BUCKETS];
        CList done; /* Job.link_done */

        unsigned n_conns;
        unsigned n_started;
        Conn conns[];
};

static inline void kick_fd(int fd)
{
        uint64_t one = 1;
        ssize_t n;

        /* Fails only with EAGAIN when the counter is saturated, and then a wake-up is pending. */
        n = write(fd, &one, sizeof(one));
        (void)n;
}

static inline void drain_fd(int fd)
{
        uint64_t v;
        ssize_t n;

        n = read(fd, &v, sizeof(v));
        (void)n;
}

static inline CList *table_bucket(CList *table, uint64_t id)
{
        return &table[(id * UINT64_C(0x9e3779b97f4a7c15)) >> 56 & (TABLE_BUCKETS - 1)];
}

static inline Job *table_find(CList *table, uint64_t id)
{
        CList *b = table_bucket(table, id);
        Job *j;

        CLIST_FOREACH (j, b, link_table)
                if (j->id == id)
                        return j;
        return NULL;
}

/*
 * With the lock held, after any change to @j's counters: takes it off its table once every
 * range is over, and puts it on the done list (waking the loop) when its callback may run or it
 * may be freed.
 */
void tcp_data_job_check_locked(TcpData *td, Job *j);

/* The thread of connection @userdata (a Conn): moves bytes until the TcpData stops or breaks. */
void *tcp_data_conn_thread(void *userdata);
