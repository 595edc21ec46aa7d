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
typedef struct RdmaContext RdmaContext;
typedef struct Transport Transport;

typedef struct TransportSet {
        struct event_base *base;
        Engine *engine;              /* the copy threads of same-node transfers */
        const DeviceConfig *devices; /* the device map (fixed until a restart) */
        size_t n_devices;
        const TcpConfig *tcp_config;
        const RdmaConfig *rdma_config;
        Transport *shm;            /* moves bytes between clusters of this daemon */
        Transport *tcp;            /* moves bytes to and from peer daemons over TcpData */
        Transport *rdma_transport; /* one-sided READ/WRITE over RDMA endpoints */
        RdmaContext *rdma;         /* the RDMA devices of the device map (none without
                                    * verbs) */
} TransportSet;

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
 * Registers @cache's tensors with each transport of @ts that moves only memory registered with
 * it and serves the device of @device_id (the one-sided transport, where the device has RDMA).
 * 0 when done, or when no transport needs it; else the -errno of the one that failed, with its
 * name in *@ret_name and in *@ret_required whether the device map asks for that transport on the
 * device (then the cache cannot be used there; otherwise it still moves by another transport).
 */
int transport_set_register_cache(TransportSet *ts, int32_t device_id, Cache *cache,
                                 const char **ret_name, bool *ret_required);
