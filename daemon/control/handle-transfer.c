/* SPDX-License-Identifier: MIT */
/* Handlers: pull and push of caches and blocks, one or a batch at a time, decoded here into
 * transfer/'s TransferRequest. */
#include <errno.h>
#include <kvdist/kvdist.h>
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
#include "proto/status-wire.h"
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

static PlanSlice transfer_slice_from_proto(const Kvdist__V1__Slice *s)
{
        return s ? (PlanSlice){s->offset, s->length} : (PlanSlice){};
}

static PlanLayers transfer_layers_from_proto(const Kvdist__V1__LayerRange *r)
{
        if (!r)
                return (PlanLayers){PLAN_LAYERS_ALL, PLAN_LAYERS_ALL};
        return (PlanLayers){r->first, r->last};
}

/* The facts of @values among @facts (what decoding off the loop learnt), when there are. */
static PlanListFacts transfer_list_facts(const uint64_t *values, const FrameListFacts *facts,
                                         size_t n_facts)
{
        for (size_t i = 0; values && i < n_facts; i++)
                if (facts[i].values == values)
                        return (PlanListFacts){
                                .known = true,
                                .max = facts[i].max,
                                .unique_known = facts[i].unique_known,
                                .unique = facts[i].unique,
                        };
        return (PlanListFacts){};
}

/*
 * Decodes @m into @ret, once: nothing is checked but what the wire cannot say (a key that does
 * not decode is kept in key_err for transfer_start() to refuse in its turn). The block lists are
 * taken from @m, not copied (protobuf-c allocates them with malloc(), and frame_unpack() too):
 * a 100,000-block request's are 1.6 MB; with them what their decoding learnt (@facts, @n_facts).
 * -ENOMEM.
 */
static int transfer_request_from_proto(Kvdist__V1__Transfer *m, const FrameListFacts *facts,
                                       size_t n_facts, TransferRequest *ret)
{
        TransferRequest req = {
                .local_cache_id = m->local_cache_id,
                .src_layers_set = m->src_layers != NULL,
                .dst_layers_set = m->dst_layers != NULL,
                .timeout_ms = m->timeout_ms,
        };
        (void)peer_cache_key_from_proto(m->remote_key, &req.key, &req.key_err);
        if (m->notify.len > 0) {
                req.notify = malloc(m->notify.len);
                if (!req.notify)
                        return -ENOMEM;
                memcpy(req.notify, m->notify.data, m->notify.len);
                req.notify_len = m->notify.len;
        }
        req.args = (TransferArgs){
                .kind = (TransferKind)m->kind,
                .src_blocks = m->src_blocks,
                .n_src_blocks = m->n_src_blocks,
                .dst_blocks = m->dst_blocks,
                .n_dst_blocks = m->n_dst_blocks,
                .local_batch_index = m->local_batch_index,
                .size = m->size,
                .src_layers = transfer_layers_from_proto(m->src_layers),
                .dst_layers = transfer_layers_from_proto(m->dst_layers),
                .tensor_num_per_layer = m->tensor_num_per_layer,
                .src_slice = transfer_slice_from_proto(m->src_slice),
                .dst_slice = transfer_slice_from_proto(m->dst_slice),
                .src_facts = transfer_list_facts(m->src_blocks, facts, n_facts),
                .dst_facts = transfer_list_facts(m->dst_blocks, facts, n_facts),
        };
        /* the message frees nothing of them now */
        req.src_blocks = TAKE_PTR(m->src_blocks);
        req.dst_blocks = TAKE_PTR(m->dst_blocks);
        m->n_src_blocks = m->n_dst_blocks = 0;
        *ret = req;
        return 0;
}

int handle_transfer(Request *req, Error *err)
{
        _cleanup_(transfer_request_done) TransferRequest tr = {};
        TransferCall *call;
        int r;

        if (transfer_request_from_proto((Kvdist__V1__Transfer *)req->msg, req->facts, req->n_facts,
                                        &tr) < 0)
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

/*
 * A batch: many transfers of one client as one request. Each entry is started as a transfer of
 * its own (validated, limited and answered like one); the request is answered once every entry
 * has ended, with each entry's status in entry order. An entry refused at the start is just an
 * entry that failed: the others run.
 */
typedef struct BatchCall BatchCall;

typedef struct BatchEntry {
        Completion cpl; /* what transfer/ holds while the entry runs */
        BatchCall *batch;
        bool running;
        int status;
        char *detail;
        TransferResult result;
} BatchEntry;

struct BatchCall {
        Completion *client; /* the request's */
        size_t n, n_running;
        bool starting; /* entries are still being started: the reply waits for the loop */
        bool dropped;  /* an entry ended without an answer: so does the request */
        BatchEntry entries[];
};

static void batch_call_free(BatchCall *b)
{
        for (size_t i = 0; i < b->n; i++)
                free(b->entries[i].detail);
        free(b);
}

/* Answers the request once nothing runs any more; frees @b. */
static void batch_call_finish(BatchCall *b)
{
        Kvdist__V1__TransferBatchReply reply = KVDIST__V1__TRANSFER_BATCH_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        Kvdist__V1__TransferBatchResult *results = NULL, **ptrs = NULL;
        Kvdist__V1__Status *sts = NULL;
        Error err = ERROR_INIT;

        if (b->starting || b->n_running > 0)
                return;
        if (b->dropped) {
                completion_drop(b->client);
                batch_call_free(b);
                return;
        }
        results = calloc(b->n, sizeof(*results));
        ptrs = calloc(b->n, sizeof(*ptrs));
        sts = calloc(b->n, sizeof(*sts));
        if (!results || !ptrs || !sts) {
                error_set(&err, STATUS_OUT_OF_MEMORY, "out of memory for the batch's answer");
                (void)completion_fail(b->client, STATUS_OUT_OF_MEMORY, &err);
                goto out;
        }
        for (size_t i = 0; i < b->n; i++) {
                const BatchEntry *e = &b->entries[i];

                kvdist__v1__transfer_batch_result__init(&results[i]);
                kvdist__v1__status__init(&sts[i]);
                sts[i].code = status_wire_encode(e->status);
                sts[i].detail = e->detail ? e->detail : (char *)"";
                results[i].status = &sts[i];
                results[i].bytes = e->result.bytes;
                results[i].segments = e->result.segments;
                ptrs[i] = &results[i];
        }
        reply.status = &st;
        reply.n_results = b->n;
        reply.results = ptrs;
        (void)completion_reply(b->client, &reply.base, -1);
out:
        free(results);
        free(ptrs);
        free(sts);
        batch_call_free(b);
}

static void batch_entry_end(BatchEntry *e, int status, const Error *err)
{
        e->running = false;
        e->status = status;
        if (status != STATUS_OK)
                e->detail = strdup(err && err->msg[0] ? err->msg : status_wire_name(status));
        e->batch->n_running--;
        batch_call_finish(e->batch);
}

static int batch_entry_reply(Completion *cpl, const void *unused, int fd)
{
        batch_entry_end(container_of(cpl, BatchEntry, cpl), STATUS_OK, NULL);
        return 0;
}

static int batch_entry_fail(Completion *cpl, int status, const Error *err)
{
        batch_entry_end(container_of(cpl, BatchEntry, cpl), status, err);
        return 0;
}

static void batch_entry_drop(Completion *cpl)
{
        BatchEntry *e = container_of(cpl, BatchEntry, cpl);

        e->batch->dropped = true;
        batch_entry_end(e, STATUS_FAILED, NULL);
}

static const CompletionOps batch_entry_ops = {
        .reply = batch_entry_reply,
        .fail = batch_entry_fail,
        .drop = batch_entry_drop,
};

/* The client went away: transfer/ forgets every entry still running, and the batch goes. */
static void batch_call_on_cancel(Completion *client, void *userdata)
{
        BatchCall *b = userdata;

        for (size_t i = 0; i < b->n; i++) {
                BatchEntry *e = &b->entries[i];

                if (e->running && e->cpl.cancel)
                        e->cpl.cancel(&e->cpl, e->cpl.userdata);
        }
        batch_call_free(b);
}

/*
 * Cancels every entry of @b still running, as transfer_cancel_held() one transfer; the batch is
 * answered once they all let go (maybe right here: @b is gone then). Whether any was running.
 */
static bool batch_call_cancel(BatchCall *b)
{
        bool stopping = false;

        /* Entries that answer at once must not finish the batch under this loop. */
        b->starting = true;
        for (size_t i = 0; i < b->n; i++)
                if (b->entries[i].running)
                        stopping |= transfer_cancel_held(&b->entries[i].cpl);
        b->starting = false;
        batch_call_finish(b);
        return stopping;
}

int handle_transfer_batch(Request *req, Error *err)
{
        const Kvdist__V1__TransferBatch *m = (const Kvdist__V1__TransferBatch *)req->msg;
        BatchCall *b;

        if (m->n_entries == 0 || m->n_entries > KVD_BATCH_MAX_ENTRIES)
                return error_set(err, STATUS_PARAM_INVALID, "a batch has 1 to %d entries, not %zu",
                                 KVD_BATCH_MAX_ENTRIES, m->n_entries);
        b = calloc(1, sizeof(*b) + m->n_entries * sizeof(BatchEntry));
        if (!b)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        b->client = &req->done;
        b->n = m->n_entries;
        b->starting = true;
        for (size_t i = 0; i < b->n; i++) {
                _cleanup_(transfer_request_done) TransferRequest tr = {};
                BatchEntry *e = &b->entries[i];
                Error entry_err = ERROR_INIT;
                int r;

                e->batch = b;
                e->cpl.ops = &batch_entry_ops;
                e->running = true;
                b->n_running++;
                /* the entries' lists are nested: protobuf-c decodes them, no facts */
                if (transfer_request_from_proto(m->entries[i], NULL, 0, &tr) < 0)
                        r = error_set(&entry_err, STATUS_OUT_OF_MEMORY, "out of memory");
                else
                        r = transfer_start(req->conn->root->transfer, req->conn->cluster, &tr,
                                           &e->cpl, &e->result, &entry_err);
                if (r < 0)
                        batch_entry_end(e, r, &entry_err);
        }
        b->starting = false;
        if (b->n_running == 0) {
                /* Every entry was refused at the start: answered now. */
                batch_call_finish(b);
                return 0;
        }
        completion_set_cancel(&req->done, batch_call_on_cancel, b);
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

                if (r->id != m->request_id)
                        continue;
                if (r->type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER_BATCH &&
                    r->done.cancel == batch_call_on_cancel) {
                        reply.stopping = batch_call_cancel(r->done.userdata);
                        break;
                }
                if (r->type != KVDIST__V1__MSG_TYPE__MSG_TRANSFER ||
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
