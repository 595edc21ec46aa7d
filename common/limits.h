/* SPDX-License-Identifier: MIT */
/*
 * Limits: what one client or peer may hold or send ("limits" in the config). The config embeds
 * them and a reload changes them in place, so every layer that enforces one keeps a pointer and
 * reads the current value.
 */
#pragma once

#include <stdint.h>

/*
 * What all the clients of one local uid may hold together ("limits.per_user"), so that one user
 * cannot take what the others need (daemon/memory/user.h accounts it).
 */
typedef struct UserLimits {
        uint32_t max_connections;  /* client connections open, attached or not */
        uint32_t max_clusters;     /* clusters attached */
        uint32_t max_regions;      /* memory regions registered */
        uint64_t max_region_bytes; /* bytes of those regions */
        uint32_t max_inflight;     /* transfers in flight */
        uint32_t max_notifies;     /* push notifications queued by its pushes, not yet taken */
} UserLimits;

typedef struct Limits {
        uint32_t max_clients;
        uint32_t max_regions_per_client;
        uint64_t max_region_size; /* bytes */
        uint32_t max_caches_per_client;
        uint32_t max_keys_per_client;
        uint32_t max_tensor_addrs;        /* per cluster, LLM-DataDist's 240 */
        uint32_t max_inflight_per_client; /* transfers in flight */
        uint32_t max_frame_size;          /* bytes of one frame's payload */
        uint32_t max_blocks_per_transfer;
        uint32_t max_links_per_client;    /* links one cluster makes, and inbound links to it */
        uint32_t max_peers;               /* peer daemons connected or connecting at once */
        uint32_t max_notifies_per_client; /* push notifications waiting for one cluster */
        uint32_t attach_timeout_ms;       /* a connection without a cluster is closed after */
        uint32_t reserved_connections;    /* read-only connections beyond the connection limit */
        UserLimits per_user;
} Limits;
