/* SPDX-License-Identifier: MIT */
/*
 * A fake transport for unit tests of the layers above transport/: its submit records the job and
 * returns, and the test completes the job when it likes (fake_transport_complete()), so a state
 * machine can be driven one step at a time without threads, sockets or timers. With @copy set a
 * completion first moves the bytes the way a same-node transport would (a READ copies from each
 * segment's remote address into its local memory, a WRITE the other way), so a test can check
 * every destination byte.
 *
 * fake_transport_new_rdma() makes one that behaves like RDMA where memory is concerned: it
 * answers for a device, hands out keys for the spans it registers and keeps a record of them,
 * and a copying completion moves the bytes only when every segment lies in a live registration
 * with the segment's keys (the remote span in one registered for remote write, with its remote
 * key: the fake has no other kind that peers reach): otherwise the job ends with -EACCES, as a
 * remote access error does, and no byte moves. One fake plays the devices of both daemons, so a
 * test can register "the peer's" destination on it too. It has remote access (transport_caps()):
 * it packs a span of a registration into a descriptor of its own kind and unpacks one (-EBADMSG
 * for anything else).
 *
 * fake_transport_new_remote() makes one that also answers for caches: the tensors of a cache
 * registered with fake_transport_register_cache() have keys (transport_cache_key()) and descriptors
 * (transport_cache_desc()), which it unpacks again (transport_desc_unpack():
 * FAKE_TRANSPORT_DESC_SIZE bytes, FAKE_TRANSPORT_DESC_TAG, then address, length and remote key,
 * little-endian), so a one-sided transfer between "two daemons" can run on it end to end.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/transport.h"

#define FAKE_TRANSPORT_MAX_JOBS 16
#define FAKE_TRANSPORT_MAX_REGIONS 32
/* The keys of registration i: lkey FAKE_TRANSPORT_LKEY + i, and for remote write rkey
 * FAKE_TRANSPORT_RKEY + i (0 otherwise). */
#define FAKE_TRANSPORT_LKEY 0x1000u
#define FAKE_TRANSPORT_RKEY 0x2000u
/* The descriptors of fake_transport_new_remote(): tag, u64 address, u64 length, u32 rkey. */
#define FAKE_TRANSPORT_DESC_TAG 0x46
#define FAKE_TRANSPORT_DESC_SIZE 21

/* One registration an RDMA-like fake handed out. */
typedef struct FakeRegion {
        bool live; /* not deregistered yet */
        void *addr;
        uint64_t len;
        int32_t device_id;
        TransportChannel *channel; /* registered on the device of this channel, when not NULL */
        bool remote_write;
        TransportKey key;
} FakeRegion;

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

        /* RDMA-like only (fake_transport_new_rdma()): */
        const char *no_device;      /* != NULL: device_info answers -ENODEV with this reason */
        TransportDeviceInfo device; /* what device_info answers otherwise */
        unsigned n_device_info;
        int32_t device_info_id;                         /* the last device_info's device id */
        int register_error;                             /* != 0: region_register fails with it */
        FakeRegion regions[FAKE_TRANSPORT_MAX_REGIONS]; /* every registration, in order */
        size_t n_regions;
} FakeTransport;

/* A fake transport named "fake", belonging to @set (NULL: none). Free with fake_transport_free().
 */
FakeTransport *fake_transport_new(TransportSet *set);

/*
 * A fake transport named "fake-rdma" whose memory must be registered (see above), answering for
 * the device "fake0". Free with fake_transport_free().
 */
FakeTransport *fake_transport_new_rdma(TransportSet *set);

/*
 * An RDMA-like fake named "fake-remote" that also reaches a peer's memory one-sided (see above).
 * Free with fake_transport_free().
 */
FakeTransport *fake_transport_new_remote(TransportSet *set);

/*
 * Registers each tensor of @cache on @f on its own (for remote write when @remote_write, as a
 * cache peers reach): its keys are then the cache's on @f. Returns 0 or what registration
 * returns.
 */
int fake_transport_register_cache(FakeTransport *f, const Cache *cache, bool remote_write);

/* The registrations of @f not deregistered yet. */
size_t fake_transport_live_regions(const FakeTransport *f);

/* The registration of @f (live or not) that @key names as lkey, or as rkey when @remote; NULL
 * when none. */
const FakeRegion *fake_transport_region_by_key(const FakeTransport *f, uint32_t key, bool remote);

/* Frees @f (jobs still recorded are forgotten, not completed). Accepts NULL; returns NULL. */
FakeTransport *fake_transport_free(FakeTransport *f);

/* The job submitted @i-th among those not completed yet, or NULL. */
TransportJob *fake_transport_job(FakeTransport *f, size_t i);

/*
 * Ends @job (which @f holds) with @error (0 or a negative errno), moving its bytes first when
 * f->copy and @error is 0: runs its done callback from here, as the control loop would. An
 * RDMA-like @f ends it with -EACCES instead, moving nothing, when a segment lies outside the
 * registrations its keys name.
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
