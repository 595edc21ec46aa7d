/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport: one-sided RDMA READ (pull) and WRITE (push) between the registered memory of
 * two daemons, over RC queue pairs. rdma.c (devices, registrations) and
 * rdma-endpoint.c (queue pairs, jobs), through rdma-internal.h, are the only files that see
 * <infiniband/verbs.h>; everything here is plain C, and built without libibverbs the functions
 * report -EOPNOTSUPP (rdma_context_new() gives a context with no devices).
 *
 * Devices: the config's device map names an RDMA device, port and GID index per device_id;
 * each is opened once, with one protection domain, one completion queue and its completion
 * channel watched on the control loop (re-arm, then drain in batches, ack in batches), and one
 * posting thread: the loop builds chains of work requests and queues them, the thread alone
 * calls ibv_post_send(). Posting can take long (soft-RoCE moves the bytes inside it; a loaded
 * NIC can be slow to take a doorbell) and never holds the loop. Jobs, queue pairs' accounting
 * and every callback below stay on the loop; only refused posts come back from the thread.
 *
 * Memory: the daemon's memory pool is registered whole on every working device at start (local
 * write, remote read and write): its caches are carved per request, after the links that reach
 * them, and share that registration, so the remote key a peer learns for a pool cache reaches
 * the whole pool (the pool stays pinned: freed extents are zeroed in place). Every tensor of a
 * cache in client memory (kvd_mem_alloc) is registered on the device of the cluster that owns
 * it when the cache is created: local write always, remote read and write only for a cache
 * that peers may reach (remote-accessible). Each such tensor is its own memory region, so the
 * remote key a peer learns reaches exactly that tensor's bytes and nothing else of the region
 * around it. These registrations go when the cache is freed, which waits for the last transfer
 * using it. Comm domain lanes register a message's own memory for as long as that message runs
 * (rdma_mr_register()), so a receiver that gives up can take its buffer back at once.
 *
 * Endpoints: a set of RC queue pairs between a device of ours and a device of a peer, connected
 * one slot at a time with the QP numbers, PSNs, GIDs and MTUs exchanged over the peer's control
 * connection (link/peer-channel.c, as bytes rdma-pack.c packs). A job takes whole queue pairs while
 * it runs, so flushing them after a timeout or an error touches no other transfer; flushed queue
 * pairs are rebuilt on next use. Flushing moves a job's queue pairs to the error state, takes back
 * the chains the posting thread has not posted, waits until the thread is out of ibv_post_send() on
 * them (the error state ends such a call soon) and destroys them: after that the device touches
 * none of the job's memory.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/transport.h"

typedef struct Cache Cache;
typedef struct Pool Pool;
typedef struct RdmaContext RdmaContext;
typedef struct RdmaDevice RdmaDevice;
typedef struct RdmaEndpoint RdmaEndpoint;
typedef struct RdmaMr RdmaMr;
typedef struct TransportSet TransportSet;

#define RDMA_GID_SIZE TRANSPORT_ADDRESS_SIZE
#define RDMA_MAX_SLOTS TRANSPORT_MAX_PATHS
/* The longest RdmaSegment: a work request's length field has 31 bits, so longer spans are cut
 * into pieces of this size before they reach rdma_job_submit(). */
#define RDMA_SEGMENT_MAX TRANSPORT_SEGMENT_MAX

/*
 * What a peer needs to know about one of our devices (and we about one of its): the transport
 * layer's device info, its address the GID; the MTU is the active one in bytes (256..4096).
 */
typedef TransportDeviceInfo RdmaDeviceInfo;

/*
 * rdma-pack.c: @info (its name 1..63 characters) or a queue pair's number and PSN (24 bits each)
 * as the bytes a peer unpacks: the length, -ENOBUFS past @size (TRANSPORT_PACKED_MAX is enough),
 * -EINVAL. Unpacking reads exactly @len bytes: -EBADMSG when they are not one packed device or
 * path, -EINVAL for a value out of range (an MTU that is no IB MTU, an empty name); *@ret is
 * written only on success.
 */
int rdma_device_pack(const RdmaDeviceInfo *info, uint8_t *buf, size_t size);
int rdma_device_unpack(const uint8_t *buf, size_t len, RdmaDeviceInfo *ret);
int rdma_path_pack(const TransportPathInfo *info, uint8_t *buf, size_t size);
int rdma_path_unpack(const uint8_t *buf, size_t len, TransportPathInfo *ret);

/*
 * rdma-pack.c: the descriptor of [@addr, +@len) reached with @rkey, 21 bytes (the length, or
 * -ENOBUFS past @size); unpacking reads exactly @len bytes, -EBADMSG when they are not one
 * descriptor or name a span that wraps around the address space.
 */
int rdma_desc_pack(uint64_t addr, uint64_t len, uint32_t rkey, uint8_t *buf, size_t size);
int rdma_desc_unpack(const uint8_t *buf, size_t len, uint64_t *ret_addr, uint64_t *ret_len,
                     uint32_t *ret_rkey);

/* One planned segment, both ends resolved: our bytes and the peer's. */
typedef struct RdmaSegment {
        uint64_t local_addr;
        uint32_t lkey;
        uint64_t remote_addr;
        uint32_t rkey;
        uint32_t len; /* a segment over 2 GiB is cut before it gets here */
} RdmaSegment;

/*
 * Runs on the control loop once every work request of a job completed (0), or failed (the job's
 * queue pairs are destroyed by then: nothing of it moves any more).
 */
typedef void (*rdma_done_fn)(void *userdata, int status);

/* Runs on the control loop when an endpoint's slot is connected (0) or failed to. */
typedef void (*rdma_ready_fn)(RdmaEndpoint *ep, int status, void *userdata);

/*
 * Opens every RDMA device @ts's device map names for transport "rdma" or "auto" (events on
 * @ts's loop), and registers the daemon's memory pool @pool (NULL: none) on each that works. A
 * device that cannot be opened is kept with the reason (for status and for the links that would use
 * it), a pool that cannot be registered is logged; only out-of-memory fails. Without RDMA support
 * it holds no device.
 */
int rdma_context_new(TransportSet *ts, Pool *pool, RdmaContext **ret);

/* Closes every device; endpoints must be gone. Accepts NULL; returns NULL. */
RdmaContext *rdma_context_free(RdmaContext *c);

/*
 * The working device a cluster on @device_id uses, or NULL with *@ret_reason (static string or
 * the device's error) saying why there is none.
 */
RdmaDevice *rdma_device_for(RdmaContext *c, int32_t device_id, const char **ret_reason);

/* The device named @name, working or not; NULL when the map names none. */
RdmaDevice *rdma_device_find(RdmaContext *c, const char *name);

/* Whether @dev opened and its port is active. */
bool rdma_device_usable(const RdmaDevice *dev);

/* Fills @ret with @dev's name, GID, port, MTU and LID. */
void rdma_device_get_info(const RdmaDevice *dev, RdmaDeviceInfo *ret);

/* Visits every device for status: @fn gets a JSON-ready description through accessors below. */
void rdma_context_foreach_device(RdmaContext *c, void (*fn)(const RdmaDevice *dev, void *ud),
                                 void *userdata);

/* For status: state words, numbers and the last error of @dev. */
typedef struct RdmaDeviceStatus {
        const char *name;
        const char *state;      /* "active", "down", "error" */
        const char *link_layer; /* "Ethernet", "InfiniBand"; "missing" (no such
                                 * device), "unknown" (its port did not answer) */
        const char *error;      /* "" when fine */
        uint32_t port;
        uint32_t mtu;
        int gid_index;
        char gid[48]; /* "fe80:0000:..." */
        uint64_t mrs; /* memory regions registered now */
        uint64_t mr_bytes;
        uint64_t reg_usec_total; /* time spent in ibv_reg_mr */
        uint64_t reg_count;
        uint64_t wc_errors;
        const char *last_wc_error; /* ibv_wc_status_str() of the last failed completion */
        uint64_t async_events;
        const char *last_async_event;
} RdmaDeviceStatus;

void rdma_device_get_status(const RdmaDevice *dev, RdmaDeviceStatus *ret);

/*
 * Registers the tensors of @cache on @dev (local write; remote read and write when @remote).
 * The registrations belong to @cache and go with cache_free(). A pool cache shares the pool's
 * registration made at start (its error when that failed). -errno from ibv_reg_mr.
 */
int rdma_cache_register(RdmaDevice *dev, Cache *cache, bool remote);

/* Whether @cache has registrations, and remote ones. */
bool rdma_cache_registered(const Cache *cache, bool remote);

/* Tensor @t's address in our mapping and its local (lkey) and remote (rkey) keys (a pool
 * cache's are the pool's, which reach all of it). */
int rdma_cache_tensor(const Cache *cache, uint32_t t, uint64_t *ret_addr, uint32_t *ret_lkey,
                      uint32_t *ret_rkey);

/*
 * Registers [@addr, @addr + @len) on @dev on its own, for as long as one message needs it:
 * local access only (the source of WRITEs), or also remote write when @remote_write (where a
 * peer's WRITEs land). Its remote key reaches exactly these bytes, and once rdma_mr_free()
 * returned the device touches none of them again: a peer's WRITE still on its way fails at the
 * peer with a remote access error. Returns 0 and the registration in *@ret, or -errno from
 * ibv_reg_mr (-EOPNOTSUPP without RDMA support).
 */
int rdma_mr_register(RdmaDevice *dev, void *addr, size_t len, bool remote_write, RdmaMr **ret);

/* Deregisters @mr. Accepts NULL; returns NULL. */
RdmaMr *rdma_mr_free(RdmaMr *mr);

/* The local and the remote key of @mr (the remote key is 0 without remote write). */
uint32_t rdma_mr_lkey(const RdmaMr *mr);
uint32_t rdma_mr_rkey(const RdmaMr *mr);

/*
 * Creates an endpoint with @n_slots queue pairs on @dev toward the peer device @remote (its
 * info as the peer sent it); slots are connected one by one with rdma_endpoint_slot_local() and
 * rdma_endpoint_slot_connect(). @id names it for the peer (the initiator's id).
 */
int rdma_endpoint_new(RdmaDevice *dev, uint64_t id, bool initiator, const RdmaDeviceInfo *remote,
                      unsigned n_slots, RdmaEndpoint **ret);

/*
 * Fails every job on @ep (their callbacks run with -ECONNRESET before this returns, after the
 * queue pairs were flushed) and destroys it. Accepts NULL; returns NULL.
 */
RdmaEndpoint *rdma_endpoint_free(RdmaEndpoint *ep);

/* (Re)creates slot @slot's queue pair in INIT and returns its QP number and a fresh PSN. */
int rdma_endpoint_slot_local(RdmaEndpoint *ep, unsigned slot, uint32_t *ret_qpn, uint32_t *ret_psn);

/* Moves slot @slot to RTR and RTS toward the peer's @qpn / @psn (MTU: the smaller port MTU). */
int rdma_endpoint_slot_connect(RdmaEndpoint *ep, unsigned slot, uint32_t qpn, uint32_t psn);

/* The endpoint's id, initiator flag, device and peer device name, slot count. */
uint64_t rdma_endpoint_id(const RdmaEndpoint *ep);
bool rdma_endpoint_initiator(const RdmaEndpoint *ep);
RdmaDevice *rdma_endpoint_device(const RdmaEndpoint *ep);
const char *rdma_endpoint_remote_device(const RdmaEndpoint *ep);
unsigned rdma_endpoint_n_slots(const RdmaEndpoint *ep);

/* Whether every slot is connected (a job can start); slots flushed after a failure are not. */
bool rdma_endpoint_ready(const RdmaEndpoint *ep);

/* The slots that were flushed and wait to be connected again, as a bit mask. */
uint32_t rdma_endpoint_broken_slots(const RdmaEndpoint *ep);

/*
 * Starts a job: every segment of @segs (@n, borrowed until @done runs) becomes an RDMA READ
 * (@read, the peer's bytes into ours) or WRITE. The job takes the free, connected queue pairs it
 * needs (up to all of them) and waits for them when none is free; its work requests are queued
 * for the device's posting thread, so this returns without waiting for the device. Returns a
 * handle for rdma_job_cancel() in *@ret (valid until @done runs), -ENOTCONN when the endpoint
 * has no connected queue pair, -EINVAL, -ENOMEM.
 */
typedef struct RdmaJob RdmaJob;
int rdma_job_submit(RdmaEndpoint *ep, bool read, const RdmaSegment *segs, size_t n,
                    rdma_done_fn done, void *userdata, RdmaJob **ret);

/*
 * Stops @job before this returns: its queue pairs are moved to the error state and destroyed
 * (chains not posted yet are dropped, a post in progress is waited for), so no byte moves after
 * @done (status -ECANCELED) runs, which it does before this returns; the slots are rebuilt on
 * the next use. A job that has not started yet ends at once.
 */
void rdma_job_cancel(RdmaJob *job);

/* The bytes of @job's READs or WRITEs known complete so far. */
uint64_t rdma_job_bytes_done(const RdmaJob *job);

/* Counters of @ep for status. */
typedef struct RdmaEndpointStats {
        uint64_t jobs_done;
        uint64_t jobs_failed;
        uint64_t bytes;
        uint64_t wrs_posted; /* work requests handed to the posting thread */
        unsigned jobs_in_flight;
        unsigned slots_ready;
} RdmaEndpointStats;

void rdma_endpoint_get_stats(const RdmaEndpoint *ep, RdmaEndpointStats *ret);
