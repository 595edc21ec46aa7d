/* SPDX-License-Identifier: MIT */
/*
 * Integration test world: one kvdistd and two clusters attached to it, A (prompt, owns the
 * sources, a server that others link to: attached with listen_ip_info) and B (decoder, a client
 * that pulls), plus the helpers the tests on it share. Failures are Check assertions.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <kvdist/kvdist.h>

#include "tests/harness/harness.h"

#define A_ID 1001
#define B_ID 2002
#define C_ID 3003

#define ALL ((kvd_layer_range){0, 0})
/* Layers a..b, inclusive. */
#define LAYERS(a, b) ((kvd_layer_range){(a), (b) - (a) + 1})

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

/*
 * Takes exactly @want notifications of @c into @got, each wait ending on its notify fd @fd
 * (harness_wait_ms() in all), and checks that no more wait.
 */
void notifies_take(kvd_client *c, int fd, kvd_notify *got, size_t want);

/* Checks that @n is a notification of @kind from cluster @from carrying the string @msg. */
void notify_check(const kvd_notify *n, kvd_notify_kind kind, uint64_t from, const char *msg);

/*
 * Checks of what a link reaches and how transfers treat caches, shared by the one-daemon and
 * the cross-daemon suites. @a is cluster A_ID (the prompt side, owning the sources), @b is
 * cluster B_ID, not linked yet; @link links @b to A when called (with @userdata). Every
 * destination byte is checked, and the bytes around it.
 */
typedef void (*link_fn)(void *userdata);

/*
 * Caches A registered with KVD_REMOTE_NO, or (default access) after B linked, are refused for
 * pull and push with PERMISSION_DENIED and a detail saying why; nothing moves.
 */
void check_unexposed_caches(kvd_client *a, kvd_client *b, link_fn link, void *userdata);

/*
 * Pool caches A allocates after B linked (contiguous by CacheKey and by id and index, blocks by
 * BlocksCacheKey) are reachable through the link; a successful pull by CacheKey ends that key
 * (a second pull by it is CACHE_NOT_EXIST) while the id still holds the cache, and pool caches
 * allocated around a pushed-into one are untouched.
 */
void check_pool_caches_after_link(kvd_client *a, kvd_client *b, link_fn link, void *userdata);

/*
 * Caches of 1 and 3 tensors (MLA, K only) move whole with default options (opts NULL and
 * KVD_TRANSFER_OPTS_INIT): pull and push, blocks and cache forms. A layer range counts layers
 * of tensor_num_per_layer tensors, which must divide the caches.
 */
void check_odd_tensor_counts(kvd_client *a, kvd_client *b, link_fn link, void *userdata);

/*
 * Links are two-way: after B linked to A, A pulls from and pushes into the caches B registered
 * before the link (a push's notification reaches B), and B's pool caches allocated since; what
 * B did not expose (KVD_REMOTE_NO, registered after the link even with KVD_REMOTE_YES), blocks
 * out of range and a key of a cluster at neither end are refused, and nothing else moves.
 */
void check_two_way(kvd_client *a, kvd_client *b, link_fn link, void *userdata);

/*
 * An unlink by either side, plain or forced, ends both directions: pulls and pushes of A and B
 * fail with NOT_YET_LINK, and a new link works both ways again. @one_daemon: A and B are on one
 * daemon (a link there is one record, so a forced unlink removes it for both).
 */
void check_two_way_unlink(kvd_client *a, kvd_client *b, link_fn link, void *userdata,
                          bool one_daemon);
