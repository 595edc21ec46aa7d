/* SPDX-License-Identifier: MIT */
/*
 * Integration test world: one kvdistd and two clusters attached to it, A (prompt, owns the
 * sources, a server that others link to: attached with listen_ip_info) and B (decoder, a client
 * that pulls), plus the helpers the tests on it share. Failures are Check assertions.
 */
#pragma once

#include <stdint.h>

#include <kvdist/kvdist.h>

#include "harness.h"

#define A_ID 1001
#define B_ID 2002
#define C_ID 3003

#define ALL ((kvd_layer_range){ -1, -1 })
#define LAYERS(a, b) ((kvd_layer_range){ (a), (b) })

typedef struct World {
        HarnessDaemon d;
        kvd_client *a;
        kvd_client *b;
} World;

/* Starts a daemon with its defaults and attaches A (a server, on a port of its own) and B. */
void world_start(World *w);

/* Finalizes the clients still set, stops the daemon and checks it exited cleanly. */
void world_stop(World *w);

/* Links @c to the cluster @remote (of role @role) and checks the per-cluster status too. */
void link_to(kvd_client *c, uint64_t remote, kvd_role role);

/* Transfer options for a layer range on each side, @tpl tensors per layer, a 10 s timeout. */
kvd_transfer_opts opts_layers(kvd_layer_range sl, kvd_layer_range dl, uint32_t tpl);
