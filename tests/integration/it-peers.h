/* SPDX-License-Identifier: MIT */
/*
 * Integration tests across daemons: nodes (a kvdistd that listens for peers, on loopback or in
 * a network namespace), links to clusters on other nodes, and status lookups. Failures are Check
 * assertions.
 */
#pragma once

#include <stdint.h>

#include <kvdist/kvdist.h>

#include "tests/harness/harness.h"

typedef struct Node {
        HarnessDaemon d;
        char peer_addr[64];   /* where it accepts peers, "127.0.0.1:40123" */
        char key_path[96];    /* its cluster key file, "" for none */
        char config_path[96]; /* its config file (RDMA device map), "" for none */
} Node;

/*
 * The transport links between nodes use: "rdma" when $KVDIST_RDMA_DEVICE names an RDMA device
 * (every node then maps device_ids 0..3 to it with transport rdma: the suites run unchanged over
 * RDMA, inside the soft-RoCE VM), else "tcp".
 */
const char *it_transport(void);

/*
 * Starts a daemon that listens for peers on @listen ("127.0.0.1:0" picks a port; NULL means
 * that) inside network namespace @netns (NULL: this one), with the cluster key @key (NULL:
 * none) and the NULL-terminated @extra flags (may be NULL).
 */
void node_start_full(Node *n, const char *netns, const char *listen, const char *key,
                     const char *const *extra);

/* node_start_full() on loopback, any port, no key, no extra flags. */
void node_start(Node *n);

/* Stops the daemon, checks it exited cleanly and removes its files. */
void node_stop(Node *n);

/* Attaches cluster @id to @n's daemon, a client (no listen_ip_info): it links out only. */
kvd_client *node_client(Node *n, uint64_t id, kvd_role role);

/*
 * Attaches cluster @id to @n's daemon as a server reachable at the daemon's own --listen address
 * (listen_ip_info = @n->peer_addr): what link_node() links to.
 */
kvd_client *node_server(Node *n, uint64_t id, kvd_role role);

/* kvd_link_clusters() of @c to @remote at @addr; returns the call's status, *@ret the entry's. */
int link_at(kvd_client *c, uint64_t remote, const char *addr, int timeout_ms, int *ret);

/* Links @c to @remote on @n and checks both statuses. */
void link_node(kvd_client *c, uint64_t remote, const Node *n);

/* A string at a '/'-separated path of a status document (malloc()ed). */
char *status_json_str(const char *json, const char *path);

/* status_json_int() of @n's status document. */
int64_t node_status_int(const Node *n, const char *path);

/* The length of the array at @path of @n's status document. */
size_t node_status_len(const Node *n, const char *path);
