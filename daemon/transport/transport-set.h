/* SPDX-License-Identifier: MIT */
/*
 * TransportSet: the root of the transport layer, what the daemon builds once and hands the
 * layers above: the transports (shared memory on the copy engine, TCP, RDMA), the RDMA devices
 * of the device map, and the parts of the config they read (the device map, the TCP and RDMA
 * terms, embedded in the daemon's Config and changed there in place by a reload).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/transport-config.h"

struct event_base;
typedef struct Cache Cache;
typedef struct Engine Engine;
typedef struct Pool Pool;
typedef struct Region Region;
typedef struct RdmaContext RdmaContext;
typedef struct Transport Transport;

/*
 * What a transport is for: the index of the transport table. The layers above ask the set for
 * the transport of a role (transport_set_get()) and never pick one by name; what a transport
 * can do beyond its role it says in its capabilities (transport_caps()).
 */
typedef enum TransportRole {
        TRANSPORT_ROLE_LOCAL,  /* between clusters of this daemon, through its own mappings */
        TRANSPORT_ROLE_STREAM, /* to a peer daemon that runs the other end of every job, on the
                                * data connections the peer connection set up */
        TRANSPORT_ROLE_DIRECT, /* to a peer daemon's registered memory, one-sided, on channels of
                                * its own: the peer hands out descriptors and moves nothing */
        _TRANSPORT_ROLE_MAX,
} TransportRole;

#define TRANSPORT_SET_MAX 8

typedef struct TransportSet {
        struct event_base *base;
        Engine *engine;              /* the copy threads of same-node transfers */
        const DeviceConfig *devices; /* the device map (fixed until a restart) */
        size_t n_devices;
        const TcpConfig *tcp_config;
        const RdmaConfig *rdma_config;
        /* Every transport of the set, in the order built: what the device map can name. */
        Transport *all[TRANSPORT_SET_MAX];
        size_t n_all;
        Transport *table[_TRANSPORT_ROLE_MAX]; /* by role, from @all; NULL where none */
        RdmaContext *rdma; /* the RDMA devices of the device map (none without verbs) */
} TransportSet;

/* The transport of @role in @ts, or NULL. */
static inline Transport *transport_set_get(const TransportSet *ts, TransportRole role)
{
        return ts->table[role];
}

/*
 * Fills @ts (whose base, engine, device map and terms the caller set) with the transports, and
 * opens the RDMA devices of the device map, registering @pool (NULL: none) on each that works.
 * Logs what failed; @ts is left for transport_set_deinit() either way.
 */
int transport_set_init(TransportSet *ts, Pool *pool);

/* Frees the transports and closes the devices (no endpoint may be left). */
void transport_set_deinit(TransportSet *ts);

/* The device map's entry for @device_id, or NULL. */
const DeviceConfig *transport_set_find_device(const TransportSet *ts, int32_t device_id);

/*
 * What the stream transport asks of a peer's data connections, for the peer handshake that opens
 * them: how many, CRC32C per chunk, the largest chunk. Read from the config at each call, so a
 * reload applies to the next peer.
 */
typedef struct TransportStreamTerms {
        uint32_t conns;
        bool crc;
        uint32_t chunk_size;
} TransportStreamTerms;

TransportStreamTerms transport_set_stream_terms(const TransportSet *ts);

/*
 * The transport the device map names for @device_id ("transport": "tcp", "rdma", "null"), or
 * NULL where it leaves the choice to kvdistd ("auto", or no entry).
 */
Transport *transport_set_configured(const TransportSet *ts, int32_t device_id);

/*
 * Registers @cache's tensors with each transport of @ts that moves only memory registered with
 * it and serves the device of @device_id (the one-sided transport, where the device has RDMA).
 * 0 when done, or when no transport needs it; else the -errno of the one that failed, with its
 * name in *@ret_name and in *@ret_required whether the device map asks for that transport on the
 * device (then the cache cannot be used there; otherwise it still moves by another transport).
 */
int transport_set_register_cache(TransportSet *ts, int32_t device_id, Cache *cache,
                                 const char **ret_name, bool *ret_required);

/*
 * Maps the pages of client region @r that its file holds already into kvdistd's page tables, in
 * the background: steps of 2 MiB on a copy thread while no copy waits, the region referenced
 * until the last. Without it the first transfers after a registration take a page fault on every
 * page they touch (22,049 in the first pull of kvdist-bench's 20,000 x 4 KiB case; 4,099 with
 * it). Stops when the owner releases @r (region_release()). Pages the file does not hold are
 * left alone: they are allocated by whoever writes them first. -ENOMEM, -ESHUTDOWN.
 */
int transport_set_warm_region(TransportSet *ts, Region *r);
