/* SPDX-License-Identifier: MIT */
/*
 * Transport: how bytes move. A caller describes what to move as one TransportJob (a direction,
 * segments of our memory with the other end of each, a deadline and a completion callback) and
 * hands it to a transport's ops table; only transport/ knows how the bytes go (copy threads,
 * TCP data connections or RDMA). An operation a transport lacks is NULL and the wrappers answer
 * -EOPNOTSUPP. Completion is always reported on the control loop, once per submitted job.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/time-util.h"
#include "daemon/memory/region.h"

typedef struct Cache Cache;
typedef struct Transport Transport;
typedef struct TransportChannel TransportChannel;
typedef struct TransportJob TransportJob;
typedef struct TransportRegion TransportRegion;
typedef struct TransportSet TransportSet;

typedef enum TransportDir {
        TRANSPORT_READ,  /* bytes land in our segments (a pull) */
        TRANSPORT_WRITE, /* bytes leave our segments (a push) */
} TransportDir;

/*
 * The longest piece of a segment a transport moves at once: longer segments are cut into pieces
 * of this size (an RDMA work request's length has 31 bits); a caller that pairs segments up may
 * cut at the same size so that its pieces are the transport's.
 */
#define TRANSPORT_SEGMENT_MAX (UINT32_C(1) << 30)

/*
 * One span of a job: @len bytes of ours, @offset bytes into @region, and where they come from or
 * go to. Memory is named by region and offset, never by an address: only transport/ turns them
 * into one (transport_span_next()), so memory without a mapping of ours can be named too.
 */
typedef struct TransportSegment {
        const Region *region; /* borrowed, like the segment */
        uint64_t offset;
        uint64_t len;
        /* The other end. On the same node (TRANSPORT_ROLE_LOCAL): @remote bytes into
         * @remote_region, the source (READ) or destination (WRITE). Otherwise @remote_region is
         * NULL and @remote is the peer's address from its descriptor (RDMA); unused over TCP,
         * where the peer lays out its own end of the stream. */
        const Region *remote_region;
        uint64_t remote;
        uint32_t lkey; /* RDMA: the key of the registration our span lies in */
        uint32_t rkey; /* RDMA: the peer's key of @remote */
        /* 0 or 1: the one span above. More: that many spans of @len bytes, the k-th at @offset +
         * k * TransportJob.local_step and @remote + k * TransportJob.remote_step (the same
         * slice of neighbouring blocks), moved in order. */
        uint64_t count;
} TransportSegment;

/* The spans of @s: its count, at least 1. */
static inline uint64_t transport_segment_pieces(const TransportSegment *s)
{
        return s->count > 1 ? s->count : 1;
}

/* A share of a job's segments, as its prepare step lays them (TransportJob.prepare). */
typedef struct TransportPart {
        const TransportSegment *segs; /* borrowed, like the job's */
        size_t n_segs;
        uint64_t local_step; /* as the job's */
        uint64_t remote_step;
} TransportPart;

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
        uint64_t local_step; /* between the spans of a segment of several, on each side */
        uint64_t remote_step;
        /* The connection to the other end, as the link made it: NULL on the same node, the
         * peer's data connections (TCP) or the link's endpoint (RDMA). */
        void *channel;
        uint64_t id; /* TCP: the job id the receiving daemon chose */
        /* When the submitter gives up on the job (it cancels it then), for descriptions. Unless
         * @hard_deadline, the transport does not time jobs itself. */
        usec_t deadline_usec;
        /* A job that receives into our memory (TCP: TRANSPORT_READ) writes nothing from
         * @deadline_usec on, whatever the control loop is doing: the transport's I/O threads
         * check it on their own clock and fail the job with -ETIMEDOUT (STATUS_TIMEOUT). */
        bool hard_deadline;
        transport_done_fn done;
        void *userdata;
        /* When set, @segs, @n_segs and the steps are not given yet: prepare(job, part, n_parts,
         * ret) lays share @part of @n_parts of them into *@ret (0 or a negative errno, which
         * fails the job). Where the transport can (the same node) it runs on copy threads, up
         * to @prepare_parts shares at once, each copied as soon as it is laid; otherwise
         * transport_submit() lays it as one share into the job itself, on a copy thread where
         * the set has an engine, and hands the job to the transport from the loop once it is
         * laid (a job that fails there has @submitted false). It may read only what stays
         * unchanged until @done, and write only its share's own memory. */
        int (*prepare)(const TransportJob *job, size_t part, size_t n_parts, TransportPart *ret);
        size_t prepare_parts; /* the most shares @prepare can lay (0: one) */
        /* Optional: runs on the loop once a job laid off the loop reached the transport
         * (@submitted is true then); not for a job transport_submit() handed on itself. */
        void (*handed)(TransportJob *job);
        int error; /* set before @done: 0 or the negative errno */
        /* The transport took the job (its submit() succeeded): the other end's job of the same
         * id is matched. False when it failed or was cancelled before that, so the caller can
         * settle the other end (transport_abandon()). */
        bool submitted;
        void *priv;    /* the transport's, while the job runs */
        void *staging; /* transport.c's, while @prepare runs off the loop */
};

/* The keys a job's segment names for memory a transport registered (zero where none is needed). */
typedef struct TransportKey {
        uint32_t lkey; /* ours: the registration our jobs use */
        uint32_t rkey; /* the peer's: 0 unless peers may reach the memory */
} TransportKey;

/*
 * Descriptors: how a peer learns where memory of ours is, in the terms of the transport that
 * reaches it. A transport with remote access packs a span of memory registered for peers into at
 * most TRANSPORT_DESC_MAX opaque bytes, which links and the wire carry as they are; the peer's
 * transport of the same kind unpacks them into the other end of its segments
 * (transport_segment_set_remote()). Nothing outside transport/ reads the bytes.
 */
#define TRANSPORT_DESC_MAX 32

typedef struct TransportDesc {
        size_t len;
        uint8_t bytes[TRANSPORT_DESC_MAX];
} TransportDesc;

/* A peer's memory as its descriptor names it. */
typedef struct TransportRemote {
        uint64_t addr; /* the start, in the peer's terms */
        uint64_t len;  /* bytes a segment may reach from @addr */
        uint32_t key;  /* what grants the access */
} TransportRemote;

/* The other end of @seg: @off bytes into @m (the caller checked that @m holds the span). */
static inline void transport_segment_set_remote(TransportSegment *seg, const TransportRemote *m,
                                                uint64_t off)
{
        seg->remote_region = NULL;
        seg->remote = m->addr + off;
        seg->rkey = m->key;
}

/*
 * One span of our memory registered with a transport on its own, for as long as one message
 * needs it (transport_region_register()); its keys go into the segments of jobs on it.
 */
struct TransportRegion {
        Transport *transport;
        void *addr;
        uint64_t len;
        TransportKey key;
        void *priv; /* the transport's */
};

#define TRANSPORT_ADDRESS_SIZE 16
/* The most bytes transport_device_pack() or transport_path_pack() writes. */
#define TRANSPORT_PACKED_MAX 128
#define TRANSPORT_MAX_PATHS 8
/* The most data connections a TCP channel has. */
#define TRANSPORT_MAX_CONNS 16

/*
 * What a peer needs to know about a device of ours to open a channel to it, and we about one of
 * its. It crosses the peer connection as bytes only the transport reads
 * (transport_device_pack()); above transport/ only its name is read
 * (transport_device_name()). RDMA: the device's name, GID, port, active MTU and LID.
 */
typedef struct TransportDeviceInfo {
        char device[64];
        uint8_t address[TRANSPORT_ADDRESS_SIZE];
        uint8_t port;
        uint32_t mtu; /* bytes */
        uint16_t lid;
} TransportDeviceInfo;

/* The name of the device @info describes ("" for none), for status and messages. */
static inline const char *transport_device_name(const TransportDeviceInfo *info)
{
        return info->device;
}

/*
 * A channel (TransportJob.channel) is a set of paths between a device of ours and one of a
 * peer's; each path is connected with the parameters of both ends exchanged over the peer
 * connection, as bytes only the transport reads (transport_path_pack()). RDMA: the paths are
 * RC queue pairs, these are a queue pair's number and its first packet sequence number.
 */
typedef struct TransportPathInfo {
        uint32_t qpn;
        uint32_t psn;
} TransportPathInfo;

/*
 * Runs on the control loop, once, when a channel broke for good (TCP: a data connection failed;
 * @error says why). It may close the channel.
 */
typedef void (*transport_broken_fn)(TransportChannel *ch, int error, void *userdata);

/* How to open a channel to a peer (transport_channel_open()). */
typedef struct TransportChannelSpec {
        /* RDMA: queue pairs between two devices, connected path by path. */
        const char *device;                /* our device, by name */
        uint64_t id;                       /* names the channel for the peer: the initiator's */
        bool initiator;                    /* we open it and connect its paths */
        const TransportDeviceInfo *remote; /* the peer's device, as the peer sent it */
        unsigned n_paths; /* 1..TRANSPORT_MAX_PATHS; 0: as many as the transport's config says */
        /* TCP: data connections the peers agreed on, connected already. */
        const int *fds; /* taken: closed on failure */
        unsigned n_fds;
        uint32_t chunk_size; /* 0: the default */
        bool crc;            /* CRC32C per chunk */
        const char *name;    /* for debug logs; copied */
        transport_broken_fn broken;
        void *userdata;
} TransportChannelSpec;

/* What a channel is now. */
typedef struct TransportChannelInfo {
        uint64_t id;
        bool initiator;
        bool ready; /* every path connected: jobs can start */
        unsigned n_paths;
        uint32_t broken_paths;     /* paths flushed (or never connected), as a bit mask */
        const char *remote;        /* the peer's device */
        TransportDeviceInfo local; /* our device, as the peer learns it */
} TransportChannelInfo;

/*
 * One fact a transport states about itself or a channel, for status and metrics. @key is the
 * name status shows it under; strings live as long as what they describe.
 */
typedef enum TransportFactType {
        TRANSPORT_FACT_STRING,
        TRANSPORT_FACT_U64,
        TRANSPORT_FACT_INT,
        TRANSPORT_FACT_BOOL,
} TransportFactType;

typedef struct TransportFact {
        const char *key;
        TransportFactType type;
        union {
                const char *s;
                uint64_t u;
                int64_t i;
                bool b;
        };
} TransportFact;

#define TRANSPORT_FACTS_MAX 24

/* The facts about one thing a transport holds (a device, a channel), in the order shown. */
typedef struct TransportFacts {
        size_t n;
        TransportFact f[TRANSPORT_FACTS_MAX];
} TransportFacts;

typedef void (*transport_describe_fn)(const TransportFacts *facts, void *userdata);

/*
 * What a transport can do, for the layers above to decide by instead of by its name (the role
 * it plays is its index in the TransportSet's table).
 */
typedef struct TransportCaps {
        /* Jobs read and write a peer's registered memory without its daemon taking part: the
         * peer hands out descriptors of that memory (one-sided). */
        bool remote_access;
        /* Moves only memory registered with it (transport_cache_register(),
         * transport_region_register()); the others reach it through the daemon's mappings. */
        bool registers;
        /* Moves only memory the daemon maps (a region with a CPU mapping): not device memory. */
        bool mapped_only;
        /* The longest span one piece of a job may have (TRANSPORT_SEGMENT_MAX or less). */
        uint64_t max_segment;
} TransportCaps;

/*
 * A number a transport exports per device it describes (metrics): the metric's name, type and
 * help, and the fact of the device's description it reads, a number in units of @divisor, or a
 * string that counts 1 when it is "active".
 */
typedef struct TransportMetric {
        const char *name;
        const char *type; /* "gauge", "counter" */
        const char *help;
        const char *fact;
        double divisor;
} TransportMetric;

typedef struct transport_ops {
        const char *name;
        TransportCaps caps;
        /* Starts moving @job; @job->done runs later (never from inside this call). */
        int (*submit)(Transport *t, TransportJob *job);
        /* submit() runs a job's prepare() itself, off the loop */
        bool prepares;
        /*
         * Optional, for a transport that does not prepare: after a job's prepare() laid it, on
         * the same copy thread, builds what submit() would build from the segments, returned
         * as one malloc()ed block (free() releases it). submit() then finds it in job->priv.
         * It must not touch the transport's shared state: submit() does that, on the loop.
         */
        int (*stage)(Transport *t, const TransportJob *job, void **ret_priv);
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

        /*
         * Memory. A transport whose jobs reach memory without registering it (shm, TCP) leaves
         * these NULL and the wrappers answer "nothing to do" (see below).
         *
         * Whether the memory of clusters on @device_id can take part in this transport's jobs,
         * and that device's info in @ret (may be NULL); -ENODEV with *@ret_reason saying why not.
         * With @name, the device of that name instead.
         */
        int (*device_info)(Transport *t, int32_t device_id, const char *name,
                           TransportDeviceInfo *ret, const char **ret_reason);
        /* Registers [@addr, +@len) on the device of @device_id, or @channel's when not NULL. */
        int (*region_register)(Transport *t, int32_t device_id, TransportChannel *channel,
                               void *addr, uint64_t len, bool remote_write, TransportRegion *r);
        void (*region_deregister)(Transport *t, TransportRegion *r);
        /* Registers the tensors of @cache on the device of @device_id (they go with the cache). */
        int (*cache_register)(Transport *t, int32_t device_id, Cache *cache, bool remote);
        /* Tensor @tensor's address and keys: -ENOENT when @cache is not registered (for peers). */
        int (*cache_key)(Transport *t, const Cache *cache, uint32_t tensor, bool remote,
                         uint64_t *ret_addr, TransportKey *ret_key);

        /* Packs [@addr, +@len) of memory with keys @key for a peer (remote access only). */
        int (*desc_pack)(Transport *t, uint64_t addr, uint64_t len, const TransportKey *key,
                         TransportDesc *ret);
        /* Unpacks a peer's descriptor: -EBADMSG when @bytes are not one of this kind. */
        int (*desc_unpack)(Transport *t, const void *bytes, size_t len, TransportRemote *ret);

        /*
         * Channels to a peer (TCP: on data connections the peer handshake made; RDMA: queue
         * pairs whose paths are connected with parameters the peer connection carries; shm has
         * none). The peer protocol stays with the link; these are the transport's side of it.
         */
        int (*channel_open)(Transport *t, const TransportChannelSpec *spec, TransportChannel **ret);
        /* Fails every job on @ch (their callbacks run before this returns) and frees it. */
        void (*channel_close)(Transport *t, TransportChannel *ch);
        void (*channel_info)(Transport *t, const TransportChannel *ch, TransportChannelInfo *ret);
        /* (Re)creates path @path in its first state and returns our parameters for it. */
        int (*path_local)(Transport *t, TransportChannel *ch, unsigned path,
                          TransportPathInfo *ret);
        /* Connects path @path toward the peer's parameters. */
        int (*path_connect)(Transport *t, TransportChannel *ch, unsigned path,
                            const TransportPathInfo *remote);
        /*
         * What a peer needs to open a channel, as the bytes the peer connection carries: our
         * device's info and our end of a path packed into @buf (the length, or -ENOBUFS past
         * @size), the peer's unpacked from what it sent (-EBADMSG, -EINVAL; see below).
         */
        int (*device_pack)(Transport *t, const TransportDeviceInfo *info, uint8_t *buf,
                           size_t size);
        int (*device_unpack)(Transport *t, const uint8_t *buf, size_t len,
                             TransportDeviceInfo *ret);
        int (*path_pack)(Transport *t, const TransportPathInfo *info, uint8_t *buf, size_t size);
        int (*path_unpack)(Transport *t, const uint8_t *buf, size_t len, TransportPathInfo *ret);

        /* Status: @fn once per device the transport holds; a channel's facts in @ret. */
        void (*describe)(Transport *t, transport_describe_fn fn, void *userdata);
        void (*describe_channel)(Transport *t, const TransportChannel *ch, TransportFacts *ret);
        /* The metrics read from describe()'s facts. */
        const TransportMetric *metrics;
        size_t n_metrics;
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

/* The null transport: moves nothing, refuses every device with a reason. */
int transport_null_new(TransportSet *ts, Transport **ret);

int transport_submit(Transport *t, TransportJob *job);
/* Bytes of @job moved so far in *@ret; a negative errno when the transport cannot tell. */
int transport_progress(Transport *t, const TransportJob *job, uint64_t *ret);
void transport_cancel(Transport *t, TransportJob *job);
/* Settles job @id that the other end expects and this end will not run (see transport_ops). */
int transport_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes);
/* Accepts NULL; returns NULL. */
Transport *transport_free(Transport *t);

const char *transport_name(const Transport *t);

/* What @t can do (all false, max_segment 0, for NULL: a set built without that transport). */
const TransportCaps *transport_caps(const Transport *t);

/*
 * Whether memory on @device_id (or the device @name, when not NULL) can take part in @t's jobs:
 * 0 and the device's info in @ret (may be NULL), or -ENODEV with *@ret_reason (a static string
 * or the device's error) saying why not, -EOPNOTSUPP (reason given) for a transport that has no
 * devices. A transport that needs no registration answers 0 with an empty @ret.
 */
int transport_device_info(Transport *t, int32_t device_id, const char *name,
                          TransportDeviceInfo *ret, const char **ret_reason);

/*
 * Registers [@addr, +@len) for @t's jobs on the device of @device_id, or on the device @channel
 * runs on when @channel is not NULL: local access only (the source of WRITEs), or also remote
 * write when @remote_write (a peer's WRITEs land there; its remote key reaches exactly these
 * bytes). Returns 0 and the region in *@ret (its keys in ret->key), or 0 and NULL where @t needs
 * no registration (keys are 0 then), or a negative errno: -EOPNOTSUPP built without support,
 * -ENODEV when @device_id has no working device, -EINVAL for an empty span or one on a device
 * that stopped working, or the registration's error.
 */
int transport_region_register(Transport *t, int32_t device_id, TransportChannel *channel,
                              void *addr, uint64_t len, bool remote_write, TransportRegion **ret);

/* Deregisters @r: once this returns the transport touches none of its bytes. Accepts NULL. */
TransportRegion *transport_region_free(TransportRegion *r);

/*
 * Registers every tensor of @cache for @t's jobs on the device of @device_id (peers may read and
 * write them when @remote); the registrations belong to @cache and go with cache_free(). 0 where
 * @t needs none; else as transport_region_register().
 */
int transport_cache_register(Transport *t, int32_t device_id, Cache *cache, bool remote);

/*
 * The address of tensor @tensor of @cache in our mapping and the keys of its registration in
 * *@ret_key (either may be NULL): -ENOENT when @cache has no registration with @t, or only a
 * local one and @remote asks for the keys peers use. Zero keys where @t needs no registration.
 */
int transport_cache_key(Transport *t, const Cache *cache, uint32_t tensor, bool remote,
                        uint64_t *ret_addr, TransportKey *ret_key);

/* Whether @cache is registered with @t (for peers too when @remote): tensor 0's key exists. */
bool transport_cache_registered(Transport *t, const Cache *cache, bool remote);

/*
 * The descriptor of tensor @tensor of @cache for peers, registered with @t for remote access:
 * -EOPNOTSUPP where @t has no remote access, -ENOENT when @cache is not registered for peers.
 */
int transport_cache_desc(Transport *t, const Cache *cache, uint32_t tensor, TransportDesc *ret);

/*
 * The descriptor of [@addr, +@len), which must lie inside @r (registered with remote_write):
 * -EOPNOTSUPP where @r's transport has no remote access, -EINVAL outside @r.
 */
int transport_region_desc(const TransportRegion *r, const void *addr, uint64_t len,
                          TransportDesc *ret);

/*
 * Unpacks a descriptor a peer sent (@len bytes at @bytes): -EBADMSG when they are not a
 * descriptor of @t's kind (a peer's word: checked whole, never read past @len), -EOPNOTSUPP
 * where @t has no remote access (or is NULL).
 */
int transport_desc_unpack(Transport *t, const void *bytes, size_t len, TransportRemote *ret);

/*
 * Opens a channel of @t to a peer as @spec says; its paths are connected one by one with
 * transport_path_local() and transport_path_connect(). -EOPNOTSUPP where @t opens no channels of
 * its own (or was built without support), -EINVAL for a bad @spec or when our device is missing
 * or does not work, -ENOMEM.
 */
int transport_channel_open(Transport *t, const TransportChannelSpec *spec, TransportChannel **ret);

/* Fails every job on @ch (callbacks run before this returns) and frees it. Accepts NULL. */
TransportChannel *transport_channel_close(Transport *t, TransportChannel *ch);

/* Fills @ret with what @ch is now (zero for a transport without channels of its own). */
void transport_channel_info(Transport *t, const TransportChannel *ch, TransportChannelInfo *ret);

/* Whether every path of @ch is connected (a job can start on it). */
bool transport_channel_ready(Transport *t, const TransportChannel *ch);

/*
 * (Re)creates path @path of @ch in its first state and returns our parameters for the peer in
 * @ret (a path connected again after a flush starts anew). -EOPNOTSUPP where channels have no
 * paths; -EBUSY while a job holds the path.
 */
int transport_path_local(Transport *t, TransportChannel *ch, unsigned path, TransportPathInfo *ret);

/* Connects path @path of @ch toward the peer's parameters @remote. -EOPNOTSUPP as above. */
int transport_path_connect(Transport *t, TransportChannel *ch, unsigned path,
                           const TransportPathInfo *remote);

/*
 * Packs our device's @info into @buf, as the bytes a peer gives transport_device_unpack() of the
 * same transport to open a channel to it (link/ carries them without reading). Returns the
 * length (at most TRANSPORT_PACKED_MAX), -ENOBUFS when @size is too small, -EINVAL when @info
 * cannot be described (no name), -EOPNOTSUPP where @t opens no channels this way.
 */
int transport_device_pack(Transport *t, const TransportDeviceInfo *info, uint8_t *buf, size_t size);

/*
 * Unpacks a peer's device from the @len bytes at @buf it sent (a hostile peer may send
 * anything: exactly @len bytes are read). 0 and *@ret, -EBADMSG when they are not one device
 * packed by this transport (short, long, another format), -EINVAL when a value is out of range,
 * -EOPNOTSUPP as above. *@ret is written only on success.
 */
int transport_device_unpack(Transport *t, const uint8_t *buf, size_t len, TransportDeviceInfo *ret);

/* As transport_device_pack(), for our end of a path (transport_path_local()'s @ret). */
int transport_path_pack(Transport *t, const TransportPathInfo *info, uint8_t *buf, size_t size);

/* As transport_device_unpack(), for the peer's end of a path. */
int transport_path_unpack(Transport *t, const uint8_t *buf, size_t len, TransportPathInfo *ret);

/*
 * The memory, channel and describe wrappers above accept a NULL @t (a transport set built without
 * that transport, as unit tests build them): no device (-ENODEV, reason given), no registration
 * (-ENOENT for keys), no channels (-EOPNOTSUPP, packing too), nothing to describe.
 */

/* The per-device metrics @t exports (none for NULL), *@ret_n of them. */
const TransportMetric *transport_metrics(const Transport *t, size_t *ret_n);

/* Calls @fn with the facts of every device @t holds (none for most transports). */
void transport_describe(Transport *t, transport_describe_fn fn, void *userdata);

/* Fills @ret with the facts of @ch (none when @ch is NULL or @t tells nothing). */
void transport_describe_channel(Transport *t, const TransportChannel *ch, TransportFacts *ret);

/*
 * For describe ops: appends a fact to @f. More than TRANSPORT_FACTS_MAX is a bug in the op
 * (asserted; the fact is dropped where assertions are off).
 */
void transport_facts_add_string(TransportFacts *f, const char *key, const char *value);
void transport_facts_add_u64(TransportFacts *f, const char *key, uint64_t value);
void transport_facts_add_int(TransportFacts *f, const char *key, int64_t value);
void transport_facts_add_bool(TransportFacts *f, const char *key, bool value);

/* The fact named @key of @f, or NULL. */
const TransportFact *transport_facts_find(const TransportFacts *f, const char *key);

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

/* For transports: the spans of @job's segments, all together; -E2BIG past SIZE_MAX. */
int transport_job_spans(const TransportJob *job, size_t *ret);

/* One span of a job: @len bytes at @local and the other end's @remote, of segment @seg. */
typedef struct TransportSpan {
        uint8_t *local;  /* our bytes, in the daemon's mapping of the segment's region */
        uint64_t remote; /* the same node: the address of the other end; else as the segment's */
        uint64_t len;
        const TransportSegment *seg; /* its keys */
} TransportSpan;

/* Walks a job's spans in order: `TransportSpanIter it = {job}; while (transport_span_next(...))`.
 */
typedef struct TransportSpanIter {
        const TransportJob *job;
        size_t seg;
        uint64_t piece;
} TransportSpanIter;

/* For transports: the next span of the job into *@ret; false after the last. */
static inline bool transport_span_next(TransportSpanIter *it, TransportSpan *ret)
{
        const TransportJob *job = it->job;
        const TransportSegment *s;

        if (it->seg >= job->n_segs)
                return false;
        s = &job->segs[it->seg];
        *ret = (TransportSpan){
                .local = s->region->data + s->offset + it->piece * job->local_step,
                .remote = (s->remote_region ? (uint64_t)(uintptr_t)s->remote_region->data : 0) +
                          s->remote + it->piece * job->remote_step,
                .len = s->len,
                .seg = s,
        };
        if (++it->piece >= transport_segment_pieces(s)) {
                it->seg++;
                it->piece = 0;
        }
        return true;
}
