/* SPDX-License-Identifier: MIT */
/* Handlers: pull and push of caches and blocks, decoded here into transfer/'s TransferRequest. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/macro.h"
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "daemon/link/peer-cache-key.h"
#include "daemon/transfer/plan.h"
#include "daemon/transfer/transfer.h"
#include "proto/kvdist.pb-c.h"
#include "common/status.h"

/*
 * One client transfer between the request and transfer/: transfer/ answers @cpl with OK and what
 * moved in @result, from which the reply is built here; the rest passes through to the request.
 */
typedef struct TransferCall {
        Completion cpl;     /* what transfer/ holds */
        Completion *client; /* the request's */
        TransferResult result;
} TransferCall;

static int transfer_call_reply(Completion *cpl, const void *unused, int fd)
{
        TransferCall *call = container_of(cpl, TransferCall, cpl);
        Kvdist__V1__TransferReply reply = KVDIST__V1__TRANSFER_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        int r;

        reply.status = &st;
        reply.bytes = call->result.bytes;
        reply.segments = call->result.segments;
        r = completion_reply(call->client, &reply.base, fd);
        free(call);
        return r;
}

static int transfer_call_fail(Completion *cpl, int status, const Error *err)
{
        TransferCall *call = container_of(cpl, TransferCall, cpl);
        int r = completion_fail(call->client, status, err);

        free(call);
        return r;
}

static void transfer_call_drop(Completion *cpl)
{
        TransferCall *call = container_of(cpl, TransferCall, cpl);

        completion_drop(call->client);
        free(call);
}

static const CompletionOps transfer_call_ops = {
        .reply = transfer_call_reply,
        .fail = transfer_call_fail,
        .drop = transfer_call_drop,
};

/* The client went away: transfer/ forgets the call, which goes with the request. */
static void transfer_call_on_cancel(Completion *client, void *userdata)
{
        TransferCall *call = userdata;

        if (call->cpl.cancel)
                call->cpl.cancel(&call->cpl, call->cpl.userdata);
        free(call);
}

static PlanLayers transfer_layers_from_proto(const Kvdist__V1__LayerRange *r)
{
        if (!r)
                return (PlanLayers){PLAN_LAYERS_ALL, PLAN_LAYERS_ALL};
        return (PlanLayers){r->first, r->last};
}

/*
 * Decodes @m into @ret, once: nothing is checked but what the wire cannot say (a key that does
 * not decode is kept in key_err for transfer_start() to refuse in its turn). -ENOMEM.
 */
static int transfer_request_from_proto(const Kvdist__V1__Transfer *m, TransferRequest *ret)
{
        TransferRequest req = {
                .local_cache_id = m->local_cache_id,
                .src_layers_set = m->src_layers != NULL,
                .dst_layers_set = m->dst_layers != NULL,
                .timeout_ms = m->timeout_ms,
        };
        size_t n_blocks = m->n_src_blocks + m->n_dst_blocks;

        (void)peer_cache_key_from_proto(m->remote_key, &req.key, &req.key_err);
        if (n_blocks > 0) {
                req.blocks = malloc(n_blocks * sizeof(uint64_t));
                if (!req.blocks)
                        return -ENOMEM;
                if (m->n_src_blocks > 0)
                        memcpy(req.blocks, m->src_blocks, m->n_src_blocks * sizeof(uint64_t));
                if (m->n_dst_blocks > 0)
                        memcpy(req.blocks + m->n_src_blocks, m->dst_blocks,
                               m->n_dst_blocks * sizeof(uint64_t));
        }
        if (m->notify.len > 0) {
                req.notify = malloc(m->notify.len);
                if (!req.notify) {
                        free(req.blocks);
                        return -ENOMEM;
                }
                memcpy(req.notify, m->notify.data, m->notify.len);
                req.notify_len = m->notify.len;
        }
        req.args = (TransferArgs){
                .kind = (TransferKind)m->kind,
                .src_blocks = req.blocks,
                .n_src_blocks = m->n_src_blocks,
                .dst_blocks = req.blocks ? req.blocks + m->n_src_blocks : NULL,
                .n_dst_blocks = m->n_dst_blocks,
                .local_batch_index = m->local_batch_index,
                .size = m->size,
                .src_layers = transfer_layers_from_proto(m->src_layers),
                .dst_layers = transfer_layers_from_proto(m->dst_layers),
                .tensor_num_per_layer = m->tensor_num_per_layer,
        };
        *ret = req;
        return 0;
}

int handle_transfer(Request *req, Error *err)
{
        _cleanup_(transfer_request_done) TransferRequest tr = {};
        TransferCall *call;
        int r;

        if (transfer_request_from_proto((const Kvdist__V1__Transfer *)req->msg, &tr) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        call = calloc(1, sizeof(*call));
        if (!call)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        call->cpl.ops = &transfer_call_ops;
        call->client = &req->done;
        r = transfer_start(req->conn->root->transfer, req->conn->cluster, &tr, &call->cpl,
                           &call->result, err);
        if (r < 0) {
                free(call);
                return r;
        }
        completion_set_cancel(&req->done, transfer_call_on_cancel, call);
        return HANDLER_PENDING;
}

int handle_transfer_cancel(Request *req, Error *err)
{
        const Kvdist__V1__TransferCancel *m = (const Kvdist__V1__TransferCancel *)req->msg;
        Kvdist__V1__TransferCancelReply reply = KVDIST__V1__TRANSFER_CANCEL_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        Request *r;

        if (m->request_id == FRAME_CONNECTION_REQUEST_ID || m->request_id == req->id)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "TransferCancel names request %" PRIu64
                                 ", not a Transfer of this connection",
                                 m->request_id);
        /* Only this connection's own transfers; one that was answered is gone from the list. */
        CLIST_FOREACH (r, &req->conn->requests, link_conn) {
                TransferCall *call;

                if (r->id != m->request_id || r->type != KVDIST__V1__MSG_TYPE__MSG_TRANSFER ||
                    r->done.cancel != transfer_call_on_cancel)
                        continue;
                call = r->done.userdata;
                /* The transfer may answer (and free @r) right here: nothing of it is used after. */
                reply.stopping = transfer_cancel_held(&call->cpl);
                break;
        }
        reply.status = &st;
        return conn_request_reply(req, &reply.base, -1), 0;
}
