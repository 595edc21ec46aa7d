/* SPDX-License-Identifier: MIT */
/*
 * Limits: what one client or peer may hold or send ("limits" in the config). The config embeds
 * them and a reload changes them in place, so every layer that enforces one keeps a pointer and
 * reads the current value.
 */
#pragma once

#include <stdint.h>

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
} Limits;
