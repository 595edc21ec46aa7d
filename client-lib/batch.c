/* SPDX-License-Identifier: MIT */
/*
 * libkvdist batches: many transfers as one request and one task, with a status per entry and
 * the local blocks of the entries that failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-lib/client.h"

TaskBatch *task_batch_free(TaskBatch *b)
{
        if (!b)
                return NULL;
        free(b->status);
        free(b->kind);
        free(b->local_blocks);
        free(b->local_off);
        if (b->pre_detail)
                for (size_t i = 0; i < b->n; i++)
                        free(b->pre_detail[i]);
        free(b->pre_detail);
        free(b);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(TaskBatch, task_batch_free);

/* Keeps what the task needs of @entries once answered: kinds and local block ids. */
static int task_batch_new(const kvd_batch_entry *entries, size_t n, TaskBatch **ret, Error *err)
{
        _cleanup_(task_batch_freep) TaskBatch *b = calloc(1, sizeof(*b));
        size_t total = 0;

        if (!b)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++)
                total += transfer_kind_is_pull(entries[i].kind) ? entries[i].n_dst
                                                                : entries[i].n_src;
        b->n = n;
        b->status = calloc(n, sizeof(*b->status));
        b->kind = calloc(n, sizeof(*b->kind));
        b->local_off = calloc(n + 1, sizeof(*b->local_off));
        b->local_blocks = malloc((total ?: 1) * sizeof(*b->local_blocks));
        if (!b->status || !b->kind || !b->local_off || !b->local_blocks)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
                const kvd_batch_entry *e = &entries[i];
                const uint64_t *local =
                        transfer_kind_is_pull(e->kind) ? e->dst_blocks : e->src_blocks;
                size_t n_local = transfer_kind_is_pull(e->kind) ? e->n_dst : e->n_src;

                b->kind[i] = e->kind;
                b->status[i] = KVD_E_IN_PROGRESS;
                if (n_local > 0)
                        memcpy(b->local_blocks + b->local_off[i], local, n_local * sizeof(*local));
                b->local_off[i + 1] = b->local_off[i] + n_local;
        }
        *ret = TAKE_PTR(b);
        return KVD_OK;
}

/* Entry @i failed before the batch was sent (its link could not be made): it keeps @status. */
static int task_batch_fail_entry(TaskBatch *b, size_t i, int status, const char *detail)
{
        if (!b->pre_detail) {
                b->pre_detail = calloc(b->n, sizeof(*b->pre_detail));
                if (!b->pre_detail)
                        return KVD_E_OUT_OF_MEMORY;
        }
        b->status[i] = status;
        b->pre_detail[i] = strdup(detail);
        return b->pre_detail[i] ? KVD_OK : KVD_E_OUT_OF_MEMORY;
}

int task_batch_take_reply(kvd_task *t, int r, Error *err)
{
        const Kvdist__V1__TransferBatchReply *reply =
                (const Kvdist__V1__TransferBatchReply *)t->pending.reply;
        TaskBatch *b = t->batch;
        int first = KVD_OK;

        if (r == KVD_OK && (t->pending.is_error || !reply || reply->n_results != b->n))
                r = error_set(err, KVD_E_FAILED,
                              "kvdistd answered the batch of %zu entries with %zu results", b->n,
                              reply && !t->pending.is_error ? reply->n_results : 0);
        if (r < 0) {
                /* The request as a whole failed: so did every entry. */
                for (size_t i = 0; i < b->n; i++)
                        b->status[i] = r;
                return r;
        }
        for (size_t i = 0; i < b->n; i++) {
                const Kvdist__V1__TransferBatchResult *res = reply->results[i];
                int code = res && res->status ? res->status->code : KVD_E_FAILED;
                const char *detail = res && res->status && res->status->detail ? res->status->detail
                                                                               : kvd_strerror(code);

                /* An entry whose link failed before the batch went keeps that failure. */
                if (b->pre_detail && b->pre_detail[i]) {
                        code = b->status[i];
                        detail = b->pre_detail[i];
                }
                b->status[i] = code > 0 || code < _KVD_E_MIN ? KVD_E_FAILED : code;
                if (b->status[i] < 0 && first == KVD_OK)
                        first = error_set(err, b->status[i], "entries[%zu]: %s", i, detail);
        }
        return first;
}

_public_ int kvd_transfer_batch(kvd_client *client, const kvd_batch_entry *entries, size_t n,
                                const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        Kvdist__V1__TransferBatch m = KVDIST__V1__TRANSFER_BATCH__INIT;
        _cleanup_free_ Kvdist__V1__Transfer **ptrs = NULL;
        _cleanup_free_ TransferPb *pbs = NULL;
        _cleanup_(task_batch_freep) TaskBatch *b = NULL;
        Error err = ERROR_INIT;
        kvd_transfer_opts o;
        uint32_t timeout;
        kvd_task *t;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        if (!ret_task)
                r = error_set(&err, KVD_E_PARAM_INVALID, "ret_task is NULL");
        else if (n == 0 || n > KVD_BATCH_MAX_ENTRIES)
                r = error_set(&err, KVD_E_PARAM_INVALID, "a batch has 1 to %d entries, not %zu",
                              KVD_BATCH_MAX_ENTRIES, n);
        else if (!entries)
                r = error_set(&err, KVD_E_PARAM_INVALID, "entries is NULL");
        else
                r = client_copy_opts(&o, sizeof(o), TRANSFER_OPTS_V1_SIZE, opts,
                                     opts ? opts->size : 0, "opts", &err);
        if (r == KVD_OK &&
            (o.src_layers.count || o.dst_layers.count || o.tensor_num_per_layer ||
             o.src_slice.offset || o.src_slice.length || o.dst_slice.offset || o.dst_slice.length))
                r = error_set(&err, KVD_E_PARAM_INVALID,
                              "opts of a batch set layers or slices: each entry has its own");
        if (r == KVD_OK && o.notify_len > 0)
                r = error_set(&err, KVD_E_PARAM_INVALID, "a batch carries no notification");
        if (r < 0)
                return client_return(client, &err, r);

        r = task_batch_new(entries, n, &b, &err);
        if (r < 0)
                return client_return(client, &err, r);
        /*
         * Entries that link first take from the batch's time; its entries get the rest. A line
         * that is not right (malformed, another protocol, another cluster) refuses the batch; a
         * link that cannot be made fails its entry alone (the daemon then finds no link for it,
         * and the entry reads the link's status), so one unreachable peer fails only its own.
         */
        timeout = transfer_timeout(client, o.timeout_ms > 0 ? (uint32_t)o.timeout_ms : 0);
        for (size_t i = 0; i < n && r == KVD_OK; i++) {
                Error link_err = ERROR_INIT;
                char what[48];

                if (!entries[i].remote_info)
                        continue;
                (void)snprintf(what, sizeof(what), "entries[%zu].", i);
                r = transfer_link_first(client, entries[i].remote_info, entries[i].key.cluster_id,
                                        &timeout, what, &link_err);
                o.timeout_ms = (int32_t)MIN(timeout, (uint32_t)INT32_MAX);
                if (r == KVD_E_PARAM_INVALID || r == KVD_E_PROTOCOL_MISMATCH) {
                        err = link_err;
                        break;
                }
                if (r < 0)
                        r = task_batch_fail_entry(b, i, r, link_err.msg);
        }
        if (r < 0)
                return client_return(client, &err, r);

        pbs = calloc(n, sizeof(*pbs));
        ptrs = calloc(n, sizeof(*ptrs));
        if (!pbs || !ptrs)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_OUT_OF_MEMORY, "out of memory"));
        for (size_t i = 0; i < n && r == KVD_OK; i++) {
                kvd_batch_entry e = entries[i];
                char what[48];

                /* Zero is the default here too: a whole item. */
                if (e.size == 0)
                        e.size = -1;
                (void)snprintf(what, sizeof(what), "entries[%zu].", i);
                /* The key is copied into pbs[i]; the block arrays stay the caller's. */
                r = transfer_entry_to_pb(&e, o.timeout_ms, what, &pbs[i], &err);
                ptrs[i] = &pbs[i].xfer;
        }
        if (r < 0)
                return client_return(client, &err, r);

        t = transfer_task_new(client, "transfer_batch", timeout);
        if (!t)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_OUT_OF_MEMORY, "out of memory"));
        t->batch = TAKE_PTR(b);
        m.n_entries = n;
        m.entries = ptrs;
        r = conn_send(client, KVDIST__V1__MSG_TYPE__MSG_TRANSFER_BATCH, &m.base, NULL, 0,
                      &t->pending, &err);
        if (r < 0) {
                kvd_task_free(t);
                return client_return(client, &err, r);
        }
        *ret_task = t;
        return KVD_OK;
}

/* The batch of a finished @task, or a status saying why there is none (under c->lock). */
static int task_finished_batch(kvd_task *task, TaskBatch **ret, Error *err)
{
        if (!task->batch)
                return error_set(err, KVD_E_PARAM_INVALID, "the task is not a batch's");
        if (!task->completed)
                return error_set(err, KVD_E_IN_PROGRESS,
                                 "the batch is still running: kvd_task_wait() for it first");
        *ret = task->batch;
        return KVD_OK;
}

_public_ int kvd_task_entry_status(kvd_task *task, size_t index, int *ret_status)
{
        Error err = ERROR_INIT;
        TaskBatch *b = NULL;
        int r;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        if (!ret_status)
                return client_return(task->client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "ret_status is NULL"));
        pthread_mutex_lock(&task->client->lock);
        r = task_finished_batch(task, &b, &err);
        if (r == KVD_OK && index >= b->n)
                r = error_set(&err, KVD_E_PARAM_INVALID, "index %zu is past the %zu entries", index,
                              b->n);
        if (r == KVD_OK)
                *ret_status = b->status[index];
        pthread_mutex_unlock(&task->client->lock);
        return client_return(task->client, &err, r);
}

_public_ int kvd_task_failed_blocks(kvd_task *task, uint64_t *ret_blocks, size_t max, size_t *ret_n)
{
        Error err = ERROR_INIT;
        size_t n = 0;
        TaskBatch *b = NULL;
        int r;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        if (!ret_n || (max > 0 && !ret_blocks))
                return client_return(task->client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "%s is NULL",
                                               ret_n ? "ret_blocks" : "ret_n"));
        pthread_mutex_lock(&task->client->lock);
        r = task_finished_batch(task, &b, &err);
        for (size_t i = 0; r == KVD_OK && i < b->n; i++) {
                if (b->status[i] == KVD_OK)
                        continue;
                for (size_t k = b->local_off[i]; k < b->local_off[i + 1]; k++, n++)
                        if (n < max)
                                ret_blocks[n] = b->local_blocks[k];
        }
        if (r == KVD_OK)
                *ret_n = n;
        pthread_mutex_unlock(&task->client->lock);
        return client_return(task->client, &err, r);
}
