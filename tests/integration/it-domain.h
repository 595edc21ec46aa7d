/* SPDX-License-Identifier: MIT */
/*
 * Integration tests of comm domains: rank tables for nodes, members that call in parallel
 * threads (every member of a domain operation must call at once), waiting for a domain to form,
 * and status lookups with array indexes. Failures are Check assertions (in the main thread).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvdist/kvdist.h>

#include "tests/integration/it-peers.h"

#define RANK_TABLE_MAX 4096

/* A member of a test domain: a cluster attached to a node's daemon. */
typedef struct DomMember {
        Node *node;
        uint64_t cluster_id;
        int32_t device_id;
        kvd_client *client;
        uint64_t comm_id;
} DomMember;

/*
 * Writes the rank table of @n members into @buf: rank r is device m[r].device_id of server
 * "node-<peer address>" at m[r].node's peer address (members on one node share its server).
 * @form_ip: write device_ip as "ip" alone (the default port) instead of "ip:port".
 */
void rank_table_build(char *buf, size_t size, const DomMember *m, unsigned n, bool ip_only);

/* Attaches m->cluster_id to m->node with m->device_id. */
void dom_member_attach(DomMember *m);

/* kvd_domain_link() of member @k of @m with the rank table @table; returns the call's status. */
int dom_link(DomMember *m, unsigned n, unsigned k, const char *name, const char *table);

/* dom_link() of every member, asserting each returns KVD_OK. */
void dom_link_all(DomMember *m, unsigned n, const char *name, const char *table);

/*
 * Polls kvd_domain_status() of @m every few ms until it is no longer PREPARING or
 * @timeout_ms passed; returns the last status.
 */
kvd_mem_status dom_wait(DomMember *m, int timeout_ms);

/*
 * Polls kvd_domain_status() of @m until it says FAILED or @timeout_ms passed; returns
 * the last status. For a domain that was OK: dom_wait() would return at once.
 */
kvd_mem_status dom_wait_failed(DomMember *m, int timeout_ms);

/* dom_wait() of every member, asserting OK. */
void dom_wait_ok(DomMember *m, unsigned n);

/* Runs @fn(i, @arg) for i in [0, @n) in parallel threads and stores the returns in @rets. */
void dom_parallel(unsigned n, int (*fn)(unsigned i, void *arg), void *arg, int *rets);

/*
 * Asserts that on @n every channel of an OK domain to a member on another node runs over
 * it_transport() both ways and that every message it moved went that way (over RDMA: all of them
 * counted in messages_rdma, none otherwise), so a silent fallback to TCP fails the test. With
 * @moved, some channel must have moved a message.
 */
void dom_check_channels(const Node *n, bool moved);

/* Guard bytes on each side of a Buf. */
#define BUF_GUARD 4096

/*
 * A buffer in memory from kvd_mem_alloc() with guard bytes on both sides: the guards hold the
 * stream @seed at their offsets, the payload the start of stream @seed.
 */
typedef struct Buf {
        uint8_t *mem;
        size_t size;
        uint8_t *p;
        size_t len;
        uint64_t seed;
} Buf;

/* Allocates @b, @len bytes of payload, through @c and fills it (buf_reset()). */
void buf_alloc(Buf *b, kvd_client *c, size_t len, uint64_t seed);

/* Fills the guards and the payload with their patterns again. */
void buf_reset(Buf *b);

/* Asserts that the first @n bytes of the payload hold stream @src, the rest and the guards
 * their own. */
void buf_expect_n(const Buf *b, uint64_t src, size_t n);

/* buf_expect_n() of the whole payload. */
void buf_expect(const Buf *b, uint64_t src);

/* Asserts that nothing of @b changed. */
void buf_untouched(const Buf *b);

/* Asserts that the guards are untouched and every payload byte is its own old one or the stream
 * @sent's (a receive that failed midway); returns how many of the new ones differ from the old. */
size_t buf_old_or_new(const Buf *b, uint64_t sent);

/* The status document of @n at a '/'-separated path (array indexes allowed). */
char *dom_status_str(const Node *n, const char *path);
int64_t dom_status_int(const Node *n, const char *path);
size_t dom_status_len(const Node *n, const char *path);
