/* SPDX-License-Identifier: MIT */
/*
 * A fake transport for unit tests of the layers above transport/: its submit records the job and
 * returns, and the test completes the job when it likes (fake_transport_complete()), so a state
 * machine can be driven one step at a time without threads, sockets or timers. With @copy set a
 * completion first moves the bytes the way a same-node transport would (a READ copies from each
 * segment's remote address into its local memory, a WRITE the other way), so a test can check
 * every destination byte.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/transport.h"

#define FAKE_TRANSPORT_MAX_JOBS 16

typedef struct FakeTransport {
        Transport transport; /* what the layer under test is handed */
        bool copy;           /* completions with error 0 move the bytes first */
        int submit_error;    /* != 0: submit fails with it and records nothing */

        TransportJob *jobs[FAKE_TRANSPORT_MAX_JOBS]; /* submitted and not completed, in order */
        size_t n_jobs;
        unsigned n_submitted;
        unsigned n_cancelled;
        TransportJob *last_cancelled;

        unsigned n_abandoned; /* transport_abandon() calls, the last one's arguments: */
        void *abandon_channel;
        TransportDir abandon_dir;
        uint64_t abandon_id;
        uint64_t abandon_bytes;
} FakeTransport;

/* A fake transport named "fake", belonging to @set (NULL: none). Free with fake_transport_free().
 */
FakeTransport *fake_transport_new(TransportSet *set);

/* Frees @f (jobs still recorded are forgotten, not completed). Accepts NULL; returns NULL. */
FakeTransport *fake_transport_free(FakeTransport *f);

/* The job submitted @i-th among those not completed yet, or NULL. */
TransportJob *fake_transport_job(FakeTransport *f, size_t i);

/*
 * Ends @job (which @f holds) with @error (0 or a negative errno), moving its bytes first when
 * f->copy and @error is 0: runs its done callback from here, as the control loop would.
 */
void fake_transport_complete(FakeTransport *f, TransportJob *job, int error);

/*
 * Lays @len bytes of @stream into @job's segments in order, as a peer's stream over TCP lands
 * (a READ); the stream must cover every segment exactly. Returns 0 or -EINVAL.
 */
int fake_transport_feed(const TransportJob *job, const void *stream, size_t len);

/* Gathers the bytes of @job's segments in order into @stream, as a TCP WRITE sends them. */
int fake_transport_gather(const TransportJob *job, void *stream, size_t len);

/* The total length of @job's segments. */
uint64_t fake_transport_job_bytes(const TransportJob *job);
