/* SPDX-License-Identifier: MIT */
/*
 * Dispatch table: what each message type needs (an attached cluster, fds) and the handler that
 * serves it. A type the table does not know gets STATUS_UNSUPPORTED and the connection stays up.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "daemon/link/peer-cache-key.h"
#include "daemon/control/conn.h"
#include "common/error.h"

/* A handler returns 0 (it replied), HANDLER_PENDING (it keeps the request), or a STATUS_* status
 * with @err filled (dispatch answers with it). */
#define HANDLER_PENDING COMPLETION_PENDING

typedef int (*handler_fn)(Request *req, Error *err);

enum {
        DISPATCH_NEEDS_CLUSTER = 1u << 0, /* only after ClientInit */
        DISPATCH_NO_CLUSTER = 1u << 1,    /* only before ClientInit */
        DISPATCH_READ_ONLY = 1u << 2,     /* changes nothing (allowed without a cluster) */
};

typedef struct DispatchEntry {
        uint16_t type;
        unsigned flags;
        unsigned max_fds;
        handler_fn handler;
} DispatchEntry;

/* The entry for @type, or NULL. */
const DispatchEntry *dispatch_lookup(uint16_t type);

/* Serves one decoded frame of @c (header in c->frame, payload and fds in @c). */
void dispatch_frame(Conn *c);

/* Handlers, one per request type (handlers-*.c). */
int handle_client_init(Request *req, Error *err);
int handle_client_finalize(Request *req, Error *err);
int handle_daemon_status(Request *req, Error *err);
int handle_daemon_metrics(Request *req, Error *err);
int handle_region_add(Request *req, Error *err);
int handle_region_remove(Request *req, Error *err);
int handle_pool_map(Request *req, Error *err);
int handle_register_cache(Request *req, Error *err);
int handle_unregister_cache(Request *req, Error *err);
int handle_allocate_cache(Request *req, Error *err);
int handle_deallocate_cache(Request *req, Error *err);
int handle_remove_cache_key(Request *req, Error *err);
int handle_link_clusters(Request *req, Error *err);
int handle_unlink_clusters(Request *req, Error *err);
int handle_check_link_status(Request *req, Error *err);
int handle_switch_role(Request *req, Error *err);
int handle_local_info(Request *req, Error *err);
int handle_transfer(Request *req, Error *err);
int handle_transfer_batch(Request *req, Error *err);
int handle_transfer_cancel(Request *req, Error *err);
int handle_notify_fd(Request *req, Error *err);
int handle_get_notifies(Request *req, Error *err);
int handle_domain_link(Request *req, Error *err);
int handle_domain_unlink(Request *req, Error *err);
int handle_domain_query(Request *req, Error *err);
int handle_domain_send_recv(Request *req, Error *err);
int handle_domain_broadcast(Request *req, Error *err);
int handle_domain_all_gather(Request *req, Error *err);
