/* SPDX-License-Identifier: MIT */
/* Dispatch table: request types, what they need, their handlers; Hello is served here. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/decoder.h"
#include "daemon/control/dispatch.h"
#include "daemon/domain/domain.h"
#include "kvdist-config.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "common/status.h"

static const DispatchEntry dispatch_table[] = {
        {KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, DISPATCH_NO_CLUSTER, 0, handle_client_init},
        {KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE, DISPATCH_NEEDS_CLUSTER, 0,
         handle_client_finalize},
        {KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, DISPATCH_NEEDS_CLUSTER, 1, handle_region_add},
        {KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE, DISPATCH_NEEDS_CLUSTER, 0, handle_region_remove},
        {KVDIST__V1__MSG_TYPE__MSG_POOL_MAP, DISPATCH_NEEDS_CLUSTER, 0, handle_pool_map},
        {KVDIST__V1__MSG_TYPE__MSG_REGISTER_CACHE, DISPATCH_NEEDS_CLUSTER, 0,
         handle_register_cache},
        {KVDIST__V1__MSG_TYPE__MSG_UNREGISTER_CACHE, DISPATCH_NEEDS_CLUSTER, 0,
         handle_unregister_cache},
        {KVDIST__V1__MSG_TYPE__MSG_ALLOCATE_CACHE, DISPATCH_NEEDS_CLUSTER, 0,
         handle_allocate_cache},
        {KVDIST__V1__MSG_TYPE__MSG_DEALLOCATE_CACHE, DISPATCH_NEEDS_CLUSTER, 0,
         handle_deallocate_cache},
        {KVDIST__V1__MSG_TYPE__MSG_REMOVE_CACHE_KEY, DISPATCH_NEEDS_CLUSTER, 0,
         handle_remove_cache_key},
        {KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, DISPATCH_NEEDS_CLUSTER, 0, handle_link_clusters},
        {KVDIST__V1__MSG_TYPE__MSG_UNLINK_CLUSTERS, DISPATCH_NEEDS_CLUSTER, 0,
         handle_unlink_clusters},
        {KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS, DISPATCH_NEEDS_CLUSTER, 0,
         handle_check_link_status},
        {KVDIST__V1__MSG_TYPE__MSG_SWITCH_ROLE, DISPATCH_NEEDS_CLUSTER, 0, handle_switch_role},
        {KVDIST__V1__MSG_TYPE__MSG_LOCAL_INFO, DISPATCH_NEEDS_CLUSTER, 0, handle_local_info},
        {KVDIST__V1__MSG_TYPE__MSG_TRANSFER, DISPATCH_NEEDS_CLUSTER, 0, handle_transfer},
        {KVDIST__V1__MSG_TYPE__MSG_TRANSFER_BATCH, DISPATCH_NEEDS_CLUSTER, 0,
         handle_transfer_batch},
        {KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, DISPATCH_NEEDS_CLUSTER, 0,
         handle_transfer_cancel},
        {KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, DISPATCH_READ_ONLY, 0, handle_daemon_status},
        {KVDIST__V1__MSG_TYPE__MSG_NOTIFY_FD, DISPATCH_NEEDS_CLUSTER, 0, handle_notify_fd},
        {KVDIST__V1__MSG_TYPE__MSG_GET_NOTIFIES, DISPATCH_NEEDS_CLUSTER, 0, handle_get_notifies},
        {KVDIST__V1__MSG_TYPE__MSG_DAEMON_METRICS, DISPATCH_READ_ONLY, 0, handle_daemon_metrics},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_LINK, DISPATCH_NEEDS_CLUSTER, 0, handle_domain_link},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_UNLINK, DISPATCH_NEEDS_CLUSTER, 0, handle_domain_unlink},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_QUERY, DISPATCH_NEEDS_CLUSTER, 0, handle_domain_query},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_SEND_RECV, DISPATCH_NEEDS_CLUSTER, 0,
         handle_domain_send_recv},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_BROADCAST, DISPATCH_NEEDS_CLUSTER, 0,
         handle_domain_broadcast},
        {KVDIST__V1__MSG_TYPE__MSG_DOMAIN_ALL_GATHER, DISPATCH_NEEDS_CLUSTER, 0,
         handle_domain_all_gather},
};

const DispatchEntry *dispatch_lookup(uint16_t type)
{
        for (size_t i = 0; i < ARRAY_SIZE(dispatch_table); i++)
                if (dispatch_table[i].type == type)
                        return &dispatch_table[i];
        return NULL;
}

/* Sends an error for a frame that never became a request and closes the frame's fds. */
static void dispatch_refuse(Conn *c, int code, const char *fmt, ...) _printf_(3, 4);
static void dispatch_refuse(Conn *c, int code, const char *fmt, ...)
{
        Error err = ERROR_INIT;
        Request *req;
        va_list ap;

        req = conn_request_new(c);
        if (!req)
                return;
        va_start(ap, fmt);
        error_setv(&err, code, fmt, ap);
        va_end(ap);
        conn_request_fail(req, code, &err);
}

static void dispatch_hello(Conn *c, const Kvdist__V1__Hello *hello)
{
        Kvdist__V1__HelloReply reply = KVDIST__V1__HELLO_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        char detail[128] = "";
        Request *req;

        if (hello->protocol_version != FRAME_VERSION) {
                status.code = KVD_E_PROTOCOL_MISMATCH;
                (void)snprintf(detail, sizeof(detail),
                               "kvdistd speaks protocol %d, the client speaks %" PRIu32,
                               FRAME_VERSION, hello->protocol_version);
                status.detail = detail;
                log_warning("connection %" PRIu64 " (pid %d): %s, closing", c->id, (int)c->cred.pid,
                            detail);
        }
        reply.status = &status;
        reply.protocol_version = FRAME_VERSION;
        reply.identity = (char *)"kvdistd/" KVDIST_VERSION;
        reply.max_frame_size = c->root->options.limits->max_frame_size;

        req = conn_request_new(c);
        if (!req) {
                conn_close_later(c);
                return;
        }
        (void)conn_request_reply(req, &reply.base, -1);
        if (status.code != KVD_OK) {
                conn_flush(c);
                conn_close_later(c);
                return;
        }
        /* Stays closing if the reply could not be queued. */
        conn_set_state(c, CONN_READY);
}

/* Hands @req its decoded message (@r: frame_unpack()'s result for @len bytes) and its handler. */
static void dispatch_run(Request *req, size_t len, int r, ProtobufCMessage *msg)
{
        Conn *c = req->conn;
        const DispatchEntry *entry = dispatch_lookup(req->type);
        const FrameType *ft = frame_type_lookup(req->type);
        Error err = ERROR_INIT;

        if (r < 0) {
                log_warning("connection %" PRIu64 " (pid %d): undecodable %s payload of %zu "
                            "bytes, closing",
                            c->id, (int)c->cred.pid, ft->name, len);
                c->root->counters.frames_malformed++;
                conn_request_free(req);
                conn_close_later(c);
                return;
        }
        req->msg = msg;
        r = entry->handler(req, &err);
        if (r < 0) {
                if (err.code == 0)
                        error_set(&err, r, NULL);
                log_debug("connection %" PRIu64 ": %s failed: %s", c->id, ft->name, err.msg);
                conn_request_fail(req, r, &err);
        }
}

/*
 * On the loop: the decoder is done with @userdata's payload. Its connection is alive, or the
 * request would have been freed and the job forgotten.
 */
static void dispatch_decoded(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                             const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Request *req = userdata;
        Conn *c = req->conn;

        req->decoding = NULL;
        for (size_t i = 0; i < n_facts && i < ARRAY_SIZE(req->facts); i++)
                req->facts[i] = facts[i];
        req->n_facts = MIN(n_facts, ARRAY_SIZE(req->facts));
        c->root->counters.frames_decoded_away++;
        dispatch_run(req, len, r, msg);
        conn_resume_reading(c);
}

void dispatch_frame(Conn *c)
{
        const FrameHeader *h = &c->in.frame;
        const DispatchEntry *entry;
        const FrameType *ft;
        ProtobufCMessage *msg = NULL;
        Request *req;
        int r;

        if (h->flags & FRAME_FLAG_REPLY) {
                log_warning("connection %" PRIu64 " (pid %d): sent a reply frame, closing", c->id,
                            (int)c->cred.pid);
                c->root->counters.frames_malformed++;
                conn_close_later(c);
                return;
        }

        ft = frame_type_lookup(h->type);
        if (c->state == CONN_HELLO) {
                if (h->type != KVDIST__V1__MSG_TYPE__MSG_HELLO || h->n_fds > 0) {
                        dispatch_refuse(c, STATUS_PROTOCOL_MISMATCH,
                                        "the first frame must be Hello, got type %u", h->type);
                        conn_flush(c);
                        conn_close_later(c);
                        return;
                }
                r = frame_unpack(ft->request, c->in.payload, c->in.payload_len, &msg);
                if (r < 0) {
                        log_warning("connection %" PRIu64 ": undecodable Hello, closing", c->id);
                        c->root->counters.frames_malformed++;
                        conn_close_later(c);
                        return;
                }
                dispatch_hello(c, (const Kvdist__V1__Hello *)msg);
                protobuf_c_message_free_unpacked(msg, NULL);
                return;
        }

        entry = dispatch_lookup(h->type);
        if (!entry || !ft) {
                dispatch_refuse(c, STATUS_UNSUPPORTED,
                                "request type %u is not supported by "
                                "kvdistd " KVDIST_VERSION,
                                h->type);
                return;
        }
        if (h->n_fds > entry->max_fds) {
                dispatch_refuse(c, STATUS_PARAM_INVALID, "%s carries %u fds, it takes at most %u",
                                ft->name, h->n_fds, entry->max_fds);
                return;
        }
        if ((entry->flags & DISPATCH_NEEDS_CLUSTER) && !c->cluster) {
                dispatch_refuse(c, STATUS_NOT_INITIALIZED,
                                "%s needs an initialised client (kvd_client_init)", ft->name);
                return;
        }
        if ((entry->flags & DISPATCH_NO_CLUSTER) && c->cluster) {
                dispatch_refuse(c, STATUS_PARAM_INVALID,
                                "%s: this connection is cluster %" PRIu64 " already", ft->name,
                                c->cluster->id);
                return;
        }

        req = conn_request_new(c);
        if (!req) {
                conn_close_later(c);
                return;
        }
        for (size_t i = 0; i < c->in.n_fds; i++)
                req->fds[i] = TAKE_FD(c->in.fds[i]);
        req->n_fds = c->in.n_fds;
        c->in.n_fds = 0;

        if (c->root->decoder && c->in.payload_len >= FRAME_DECODE_AWAY_BYTES) {
                /* The connection reads nothing more until the request is decoded and handled. */
                r = decoder_submit(c->root->decoder, ft->request, TAKE_PTR(c->in.payload),
                                   c->in.payload_len, dispatch_decoded, req, &req->decoding);
                if (r < 0) {
                        log_error_errno(r,
                                        "connection %" PRIu64 ": cannot decode a %s away "
                                        "from the loop, closing",
                                        c->id, ft->name);
                        conn_request_free(req);
                        conn_close_later(c);
                        return;
                }
                c->in.payload_len = 0;
                c->decoding = true;
                return;
        }

        r = frame_unpack(ft->request, c->in.payload, c->in.payload_len, &msg);
        dispatch_run(req, c->in.payload_len, r, msg);
}
