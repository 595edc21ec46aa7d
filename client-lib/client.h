/* SPDX-License-Identifier: MIT */
/*
 * libkvdist internals: the client object, the connection to kvdistd (request/reply matching
 * with one reader at a time) and the helpers every public call shares.
 */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/error.h"
#include "proto/frame.h"
#include "kvdist-config.h"
#include "proto/kvdist.pb-c.h"
#include "proto/wire.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"
#include "common/time-util.h"

#define CLIENT_IDENTITY "libkvdist/" KVDIST_VERSION
#define CLIENT_PROTOCOL_VERSION 1
#define CLIENT_MAX_PAYLOAD (256u << 20)
#define CLIENT_DEFAULT_SYNC_KV_TIMEOUT_MS 1000u
#define CLIENT_CALL_TIMEOUT_MS 30000u /* replies that involve no transfer or link */
#define CLIENT_GRACE_MS 5000u         /* on top of a transfer's or link's own timeout */
#define CLIENT_SEND_TIMEOUT_MS 30000u /* a daemon that reads nothing for this long is stuck */
#define USEC_INFINITY UINT64_MAX

/* Memory from kvd_mem_alloc(), known to the daemon as a region. */
typedef struct ClientRegion {
        CList link; /* on kvd_client.regions */
        uint64_t region_id;
        void *addr;
        size_t size;
        bool removing; /* a RegionRemove for it is under way */
        bool engine;   /* the caller's own (kvd_mem_register()): never unmapped here */
} ClientRegion;

/* One request waiting for its reply. Embedded in a task or on a caller's stack. */
typedef struct Pending {
        CList link; /* on kvd_client.pending while unanswered */
        uint64_t request_id;
        uint16_t type;
        bool done;     /* the reply arrived and is stored below */
        bool is_error; /* @reply is a bare Status (FRAME_FLAG_ERROR) */
        ProtobufCMessage *reply;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
        int wake_fd; /* an eventfd (not ours) signalled once the reply is stored or the connection
                      * died, so a poller learns what another thread read; -1 for none */
} Pending;

struct kvd_client {
        unsigned n_ref; /* the caller's, plus one per task */
        int fd;
        char socket_path[108];

        pthread_mutex_t send_lock; /* one frame on the wire at a time; taken before @lock */
        pthread_mutex_t lock;      /* everything below */
        pthread_cond_t cond;       /* a reply was stored, the reader left, or the link died */
        uint64_t next_request_id;
        CList pending; /* Pending.link */
        bool reading;  /* a thread is the reader; only it touches @rx */
        bool dead;
        int dead_code; /* what calls fail with once dead: DAEMON_UNAVAILABLE, or the daemon's
                        * own status when it said why it closed (FRAME_CONNECTION_REQUEST_ID) */
        char dead_detail[ERROR_MSG_MAX];
        WireIn rx; /* the reader's: frames being read, bytes read ahead */

        uint32_t max_payload; /* the daemon's frame limit (HelloReply), CLIENT_MAX_PAYLOAD before */
        bool initialized;     /* attached as a cluster (kvd_client_init) */
        uint32_t sync_kv_timeout_ms;
        CList regions; /* ClientRegion.link */
        int notify_fd; /* the daemon's eventfd for our notifications; -1 until asked for */

        pthread_mutex_t pool_lock; /* serialises mapping the pool; taken before the others */
        void *pool_base;
        size_t pool_size;
};

/* What a batch task keeps to tell its entries apart once answered (batch.c). */
typedef struct TaskBatch {
        size_t n;
        int *status;             /* per entry, once answered */
        kvd_transfer_kind *kind; /* per entry */
        uint64_t *local_blocks;  /* each entry's local block ids, one after the other */
        size_t *local_off;       /* n + 1 offsets into local_blocks */
        char **pre_detail;       /* n entries or NULL: why an entry failed before it was sent */
} TaskBatch;

struct kvd_task {
        kvd_client *client; /* holds a reference */
        TaskBatch *batch;   /* a batch's task; NULL for one transfer */
        Pending pending;
        const char *name; /* what the request was, for details */
        usec_t deadline;  /* the daemon must have answered by then */
        uint32_t timeout_ms;
        bool completed;
        int status;
        char detail[ERROR_MSG_MAX];
        int event_fd; /* kvd_task_fd(): the pending's wake_fd, in @epoll_fd; -1 until asked for */
        int epoll_fd; /* kvd_task_fd(): the eventfd and the connection's socket */
};

/* client.c */

/* Takes or drops a reference; the last one frees the client (the connection must be closed). */
kvd_client *client_ref(kvd_client *c);
kvd_client *client_unref(kvd_client *c);

/*
 * Remembers @err's detail (or a generic one) as this thread's last error for @c when @r is a
 * failure, and returns @r, so public calls end with "return client_return(c, &err, r);".
 */
int client_return(kvd_client *c, const Error *err, int r);

/* Sets this thread's kvd_last_error(@c) to @msg for a call that succeeds with news (a FAILED
 * domain's reason). */
void client_set_detail(kvd_client *c, const char *msg);

/*
 * Copies a caller's growable option struct (@src, may be NULL: every default) into @dst of
 * @dst_size bytes, zeroing what the caller's version lacks. @src_size is the struct's size field
 * (0: @v1_size, the layout of libkvdist 1.0). Refuses a size below @v1_size, and a larger struct
 * than this library knows unless the bytes past @dst_size are zero (fields it would ignore).
 * @name names the argument in the error.
 */
int client_copy_opts(void *dst, size_t dst_size, size_t v1_size, const void *src, uint32_t src_size,
                     const char *name, Error *err);

/*
 * Parses kvd_switch_role() options (only "listen_ip_info"); *@ret is NULL when not given.
 * Returns KVD_OK or PARAM_INVALID with a detail.
 */
int client_parse_listen_ip_info(const kvd_option *options, size_t n, const char **ret, Error *err);

/* conn.c */

/*
 * Connects a blocking AF_UNIX stream socket to @path. Returns the fd, or DAEMON_UNAVAILABLE /
 * PERMISSION_DENIED / PARAM_INVALID with a detail in @err. A path in a per-user fallback folder
 * that someone else could control (socket_path_check_dir()) is refused with PERMISSION_DENIED
 * before anything connects.
 */
int conn_connect(const char *path, Error *err);

/* Prepares @p to be registered by conn_send(). */
void pending_init(Pending *p);

/* Unregisters @p if it still waits and frees whatever reply it holds. */
void pending_deinit(kvd_client *c, Pending *p);

/*
 * Allocates the next request id, registers @p under it and sends @msg as a frame of @type with
 * @fds attached. A failure that leaves the stream unusable marks the connection dead; when the
 * daemon had closed it, what it wrote before is read first, so its own reason for closing is
 * the status.
 * Returns KVD_OK or a KVD_E_* status with a detail in @err; @p is unregistered on failure.
 */
int conn_send(kvd_client *c, uint16_t type, const ProtobufCMessage *msg, const int *fds,
              size_t n_fds, Pending *p, Error *err);

/*
 * Waits until @p's reply arrived (KVD_OK), @deadline (CLOCK_MONOTONIC usec, USEC_INFINITY for
 * none) passed (KVD_E_TIMEOUT, no detail set) or the connection died (DAEMON_UNAVAILABLE, or the
 * status of the error frame in which the daemon said why it closes the connection, with a
 * detail). The calling thread may act as the reader for every waiter meanwhile.
 */
int conn_wait(kvd_client *c, Pending *p, usec_t deadline, Error *err);

/*
 * The status a stored reply carries: KVD_OK, or the daemon's code with its detail in @err.
 * Call with the reply stored (conn_wait() returned KVD_OK); needs no lock.
 */
int pending_status(const Pending *p, Error *err);

/*
 * Marks the connection dead (if it was not already), wakes every waiter; later calls fail fast
 * with DAEMON_UNAVAILABLE and @detail. Takes c->lock.
 */
void conn_kill(kvd_client *c, const char *detail);

/*
 * One request and its reply: send @req as @type (with @fds), wait up to @timeout_ms, check the
 * reply's Status. On success, and also when the daemon answered with a non-OK status in a full
 * reply message, *@ret_reply (may be NULL) receives the decoded reply (free it with
 * protobuf_c_message_free_unpacked()) and *@ret_fd (may be NULL) the first fd that came with
 * it or -1. Returns KVD_OK or a KVD_E_* status with a detail in @err.
 */
int conn_call(kvd_client *c, uint16_t type, const ProtobufCMessage *req, const int *fds,
              size_t n_fds, uint32_t timeout_ms, ProtobufCMessage **ret_reply, int *ret_fd,
              Error *err);

/* The registry's name for @type ("Transfer"), or "request". */
const char *conn_type_name(uint16_t type);

static inline void pb_freep(void *p)
{
        ProtobufCMessage *m = *(ProtobufCMessage **)p;

        if (m)
                protobuf_c_message_free_unpacked(m, NULL);
}
#define _cleanup_pb_ _cleanup_(pb_freep)

/* cache.c */

/* Room for one CacheKey and whichever key message its oneof points at. */
typedef struct KeyStorage {
        Kvdist__V1__CacheKey key;
        Kvdist__V1__ReqKey req;
        Kvdist__V1__IdIndexKey id_index;
        Kvdist__V1__BlocksKey blocks;
} KeyStorage;

/*
 * Fills @storage from @key; storage->key is the message to send and points into @storage.
 * Returns KVD_OK or PARAM_INVALID with a detail naming @what (the argument, e.g. "src_key").
 */
int cache_key_to_pb(const kvd_cache_key *key, KeyStorage *storage, const char *what, Error *err);

/* transfer.c */

/* kvd_transfer_opts as libkvdist 1.0 laid it out: fields appended later lie past this. */
#define TRANSFER_OPTS_V1_SIZE (offsetof(kvd_transfer_opts, remote_info) + sizeof(const char *))

/* One transfer as the wire carries it, and the messages it points into. */
typedef struct TransferPb {
        Kvdist__V1__Transfer xfer;
        Kvdist__V1__LayerRange src_layers;
        Kvdist__V1__LayerRange dst_layers;
        Kvdist__V1__Slice src_slice;
        Kvdist__V1__Slice dst_slice;
        KeyStorage ks;
} TransferPb;

/*
 * Checks @e and fills @ret from it (pointing into @e's arrays) with @timeout_ms (<= 0: the
 * client's). @what prefixes the names in a detail ("entries[3]."; "" for a single call).
 * KVD_OK or PARAM_INVALID.
 */
int transfer_entry_to_pb(const kvd_batch_entry *e, int32_t timeout_ms, const char *what,
                         TransferPb *ret, Error *err);

/*
 * Links @c to the cluster @remote_info names unless a link joins the two already, within
 * *@timeout_ms, which it lowers by the time that took (at least 1 ms is left). @cluster_id is
 * the cluster the transfer names, which must be the one of @remote_info (local-info.c).
 */
int transfer_link_first(kvd_client *c, const char *remote_info, uint64_t cluster_id,
                        uint32_t *timeout_ms, const char *what, Error *err);

/* Whether @kind reads the remote cache (the local one is the destination). */
static inline bool transfer_kind_is_pull(kvd_transfer_kind kind)
{
        return kind == KVD_PULL_CACHE || kind == KVD_PULL_BLOCKS;
}

/* The timeout a transfer of @timeout_ms (0: the client's) runs with. */
uint32_t transfer_timeout(const kvd_client *c, uint32_t timeout_ms);

/* A new task for a request @name that the daemon answers within @timeout_ms; NULL: ENOMEM. */
kvd_task *transfer_task_new(kvd_client *c, const char *name, uint32_t timeout_ms);

/* batch.c */

TaskBatch *task_batch_free(TaskBatch *b);

/*
 * Reads a batch task's reply (TransferBatchReply) into its entries' statuses, when @r (the
 * request's own status) is KVD_OK; else every entry takes @r. Returns KVD_OK when every entry
 * succeeded, else the first failed entry's status with a detail naming it. Under c->lock.
 */
int task_batch_take_reply(kvd_task *t, int r, Error *err);

/* memory.c */

/*
 * Maps the daemon's pool once per client (MSG_POOL_MAP). Returns KVD_OK with the mapping in
 * c->pool_base / c->pool_size, or a KVD_E_* status with a detail.
 */
int memory_map_pool(kvd_client *c, Error *err);

/*
 * Unmaps the pool and every region, or with @keep_regions forgets the regions and leaves their
 * mappings to the caller; for kvd_client_finalize(), which runs alone.
 */
void memory_unmap_all(kvd_client *c, bool keep_regions);
