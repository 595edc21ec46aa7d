/* SPDX-License-Identifier: MIT */
/*
 * Transport: how bytes move. A caller describes what to move as one TransportJob (a direction,
 * segments of our memory with the other end of each, a deadline and a completion callback) and
 * hands it to a transport's ops table; only transport/ knows how the bytes go (copy threads,
 * TCP data connections or RDMA). An operation a transport lacks is NULL and the wrappers answer
 * -EOPNOTSUPP. Completion is always reported on the control loop, once per submitted job.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/time-util.h"

typedef struct Transport Transport;
typedef struct TransportJob TransportJob;
typedef struct TransportSet TransportSet;

typedef enum TransportDir {
        TRANSPORT_READ,  /* bytes land in our segments (a pull) */
        TRANSPORT_WRITE, /* bytes leave our segments (a push) */
} TransportDir;

/* One span of a job: @len bytes of ours at @local and where they come from or go to. */
typedef struct TransportSegment {
        void *local;
        uint64_t len;
        /* The other end: on the same node the address of the source (READ) or destination
         * (WRITE) in this process; over RDMA the peer's address. Unused over TCP, where the
         * peer lays out its own end of the stream. */
        uint64_t remote;
        uint32_t lkey; /* RDMA: the key of the registration @local lies in */
        uint32_t rkey; /* RDMA: the peer's key of @remote */
} TransportSegment;

/*
 * Runs on the control loop once the transport stopped touching the job's memory: @status is
 * STATUS_OK when every byte moved, else transport_status_from_errno() of what stopped it
 * (job->error keeps that errno for messages).
 */
typedef void (*transport_done_fn)(TransportJob *job, int status);

struct TransportJob {
        TransportDir dir;
        const TransportSegment *segs; /* borrowed, with the memory they name, until @done */
        size_t n_segs;
        /* The connection to the other end, as the link made it: NULL on the same node, the
         * peer's data connections (TCP) or the link's endpoint (RDMA). */
        void *channel;
        uint64_t id; /* TCP: the job id the receiving daemon chose */
        /* When the submitter gives up on the job (it cancels it then; the transport does not
         * time jobs itself), for descriptions. */
        usec_t deadline_usec;
        transport_done_fn done;
        void *userdata;
        int error;  /* set before @done: 0 or the negative errno */
        void *priv; /* the transport's, while the job runs */
};

typedef struct transport_ops {
        const char *name;
        /* Starts moving @job; @job->done runs later (never from inside this call). */
        int (*submit)(Transport *t, TransportJob *job);
        /* Asks the transport to stop @job as soon as possible; completion still follows. */
        void (*cancel)(Transport *t, TransportJob *job);
        /*
         * The other end expects job @id of @bytes on @channel, which this end will not run:
         * settles it without moving a byte (a WRITE goes out as aborted, the bytes of a READ are
         * dropped as they come), so the channel stays in step. No callback.
         */
        int (*abandon)(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes);
        void (*destroy)(Transport *t);
        /*
         * Bytes of @job moved so far (landed, or for a WRITE sent and acknowledged by the
         * transport), for kvdistctl transfers; a negative errno when it cannot tell right now.
         */
        int (*progress)(Transport *t, const TransportJob *job, uint64_t *ret);
} transport_ops;

struct Transport {
        const transport_ops *ops;
        TransportSet *set;
        uint64_t bytes; /* moved, for status */
        uint64_t n_transfers;
};

/* The shared-memory transport: copies between regions of this daemon on the copy engine. */
int transport_shm_new(TransportSet *ts, Transport **ret);

/* The TCP transport: data jobs on a peer's data connections (TcpData). */
int transport_tcp_new(TransportSet *ts, Transport **ret);

/* The RDMA transport: one-sided READ (pull) / WRITE (push) jobs on a link's endpoint. */
int transport_rdma_new(TransportSet *ts, Transport **ret);

int transport_submit(Transport *t, TransportJob *job);
/* Bytes of @job moved so far in *@ret; a negative errno when the transport cannot tell. */
int transport_progress(Transport *t, const TransportJob *job, uint64_t *ret);
void transport_cancel(Transport *t, TransportJob *job);
/* Settles job @id that the other end expects and this end will not run (see transport_ops). */
int transport_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes);
/* Accepts NULL; returns NULL. */
Transport *transport_free(Transport *t);

const char *transport_name(const Transport *t);

/*
 * The status of a data job that ended with @error (0 or a negative errno), the one mapping of
 * every data plane: 0 is STATUS_OK, -EILSEQ (a chunk failed its CRC32C check) STATUS_FAILED, and
 * anything else (a broken connection, an abort or cancel, a flushed queue pair)
 * STATUS_PEER_LOST.
 */
int transport_status_from_errno(int error);

/*
 * For transports: ends @job with @error. Clears job->priv, sets job->error and calls its done
 * callback with the mapped status.
 */
void transport_job_done(TransportJob *job, int error);
