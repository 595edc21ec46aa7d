/* SPDX-License-Identifier: MIT */
/*
 * libkvdist transfers: pull and push of caches and blocks. Every transfer is sent as one
 * request tracked by a kvd_task; the synchronous forms wait on the task before returning.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "client-lib/client.h"

typedef struct TransferArgs {
        kvd_transfer_kind kind;
        const kvd_cache_key *key;
        uint64_t cache_id;
        uint32_t batch_index;
        int64_t size;
        const uint64_t *src_blocks;
        size_t n_src;
        const uint64_t *dst_blocks;
        size_t n_dst;
        const kvd_transfer_opts *opts;
} TransferArgs;

static const char *transfer_name(kvd_transfer_kind kind)
{
        switch (kind) {
        case KVD_PULL_CACHE:
                return "pull_cache";
        case KVD_PULL_BLOCKS:
                return "pull_blocks";
        case KVD_PUSH_CACHE:
                return "push_cache";
        case KVD_PUSH_BLOCKS:
                return "push_blocks";
        default:
                return "transfer";
        }
}

static kvd_task *task_free(kvd_task *t)
{
        if (!t)
                return NULL;
        /* Unlinked first: then no reader or dying connection signals the eventfd any more. */
        pending_deinit(t->client, &t->pending);
        t->epoll_fd = safe_close(t->epoll_fd);
        t->event_fd = safe_close(t->event_fd);
        client_unref(t->client);
        task_batch_free(t->batch);
        free(t);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(kvd_task, task_free);

/*
 * Turns @r into the wire's inclusive range. Returns 0 for a range of every layer (count 0: the
 * wire leaves it out), 1 for a range it filled in, PARAM_INVALID for one past INT32_MAX.
 */
static int layer_range_to_pb(const kvd_layer_range *r, const char *what, const char *name,
                             Kvdist__V1__LayerRange *ret, Error *err)
{
        if (r->count == 0)
                return 0;
        if (r->first > INT32_MAX || r->count - 1 > (uint32_t)INT32_MAX - r->first)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%s%s {first %" PRIu32 ", count %" PRIu32 "} goes past layer %d",
                                 what, name, r->first, r->count, INT32_MAX);
        ret->first = (int32_t)r->first;
        ret->last = (int32_t)(r->first + r->count - 1);
        return 1;
}

int transfer_entry_to_pb(const kvd_batch_entry *e, int32_t timeout_ms, const char *what,
                         TransferPb *ret, Error *err)
{
        bool pull = transfer_kind_is_pull(e->kind);
        char key_name[64];
        int r;

        *ret = (TransferPb){
                .xfer = KVDIST__V1__TRANSFER__INIT,
                .src_layers = KVDIST__V1__LAYER_RANGE__INIT,
                .dst_layers = KVDIST__V1__LAYER_RANGE__INIT,
        };
        if (e->kind < KVD_PULL_CACHE || e->kind > KVD_PUSH_BLOCKS)
                return error_set(err, KVD_E_PARAM_INVALID, "%skind %d is not a transfer kind", what,
                                 (int)e->kind);
        (void)snprintf(key_name, sizeof(key_name), "%s%s", what, pull ? "src_key" : "dst_key");
        r = cache_key_to_pb(&e->key, &ret->ks, key_name, err);
        if (r < 0)
                return r;
        if (e->n_src > 0 && !e->src_blocks)
                return error_set(err, KVD_E_PARAM_INVALID, "%ssrc_blocks is NULL but n_src is %zu",
                                 what, e->n_src);
        if (e->n_dst > 0 && !e->dst_blocks)
                return error_set(err, KVD_E_PARAM_INVALID, "%sdst_blocks is NULL but n_dst is %zu",
                                 what, e->n_dst);
        if (e->size < -1)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%ssize is %lld (bytes per tensor, or -1 for the whole item)",
                                 what, (long long)e->size);
        ret->xfer.kind = (Kvdist__V1__TransferKind)e->kind;
        ret->xfer.remote_key = &ret->ks.key;
        ret->xfer.local_cache_id = e->cache_id;
        ret->xfer.n_src_blocks = e->n_src;
        ret->xfer.src_blocks = (uint64_t *)e->src_blocks;
        ret->xfer.n_dst_blocks = e->n_dst;
        ret->xfer.dst_blocks = (uint64_t *)e->dst_blocks;
        ret->xfer.local_batch_index = e->batch_index;
        ret->xfer.size = e->size;
        /* A range of no layers means every layer. */
        r = layer_range_to_pb(&e->src_layers, what[0] ? what : "opts.", "src_layers",
                              &ret->src_layers, err);
        if (r < 0)
                return r;
        if (r > 0)
                ret->xfer.src_layers = &ret->src_layers;
        r = layer_range_to_pb(&e->dst_layers, what[0] ? what : "opts.", "dst_layers",
                              &ret->dst_layers, err);
        if (r < 0)
                return r;
        if (r > 0)
                ret->xfer.dst_layers = &ret->dst_layers;
        ret->xfer.tensor_num_per_layer = e->tensor_num_per_layer ?: 2;
        /* Slices are sent as given: the daemon checks them against the blocks. */
        if (e->src_slice.offset || e->src_slice.length) {
                kvdist__v1__slice__init(&ret->src_slice);
                ret->src_slice.offset = e->src_slice.offset;
                ret->src_slice.length = e->src_slice.length;
                ret->xfer.src_slice = &ret->src_slice;
        }
        if (e->dst_slice.offset || e->dst_slice.length) {
                kvdist__v1__slice__init(&ret->dst_slice);
                ret->dst_slice.offset = e->dst_slice.offset;
                ret->dst_slice.length = e->dst_slice.length;
                ret->xfer.dst_slice = &ret->dst_slice;
        }
        if (timeout_ms > 0)
                ret->xfer.timeout_ms = (uint32_t)timeout_ms;
        return KVD_OK;
}

uint32_t transfer_timeout(const kvd_client *c, uint32_t timeout_ms)
{
        return timeout_ms ?: c->sync_kv_timeout_ms ?: CLIENT_DEFAULT_SYNC_KV_TIMEOUT_MS;
}

kvd_task *transfer_task_new(kvd_client *c, const char *name, uint32_t timeout_ms)
{
        kvd_task *t = calloc(1, sizeof(*t));

        if (!t)
                return NULL;
        t->client = client_ref(c);
        pending_init(&t->pending);
        t->event_fd = t->epoll_fd = -1;
        t->name = name;
        t->timeout_ms = timeout_ms;
        /* The daemon answers by the transfer's own deadline; the grace covers the way back. */
        t->deadline =
                now_usec(CLOCK_MONOTONIC) + ((usec_t)timeout_ms + CLIENT_GRACE_MS) * USEC_PER_MSEC;
        return t;
}

static int transfer_submit(kvd_client *c, const TransferArgs *a, kvd_task **ret_task, Error *err)
{
        bool pull = transfer_kind_is_pull(a->kind);
        _cleanup_(task_freep) kvd_task *t = NULL;
        kvd_transfer_opts o;
        TransferPb pb;
        uint32_t timeout;
        int r;

        if (!ret_task)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_task is NULL");
        if (!a->key)
                return error_set(err, KVD_E_PARAM_INVALID, "%s is NULL",
                                 pull ? "src_key" : "dst_key");
        r = client_copy_opts(&o, sizeof(o), TRANSFER_OPTS_V1_SIZE, a->opts,
                             a->opts ? a->opts->size : 0, "opts", err);
        if (r < 0)
                return r;
        r = transfer_entry_to_pb(
                &(kvd_batch_entry){
                        .kind = a->kind,
                        .key = *a->key,
                        .cache_id = a->cache_id,
                        .src_blocks = a->src_blocks,
                        .n_src = a->n_src,
                        .dst_blocks = a->dst_blocks,
                        .n_dst = a->n_dst,
                        .batch_index = a->batch_index,
                        .size = a->size,
                        .src_layers = o.src_layers,
                        .dst_layers = o.dst_layers,
                        .tensor_num_per_layer = o.tensor_num_per_layer,
                        .src_slice = o.src_slice,
                        .dst_slice = o.dst_slice,
                },
                o.timeout_ms, "", &pb, err);
        if (r < 0)
                return r;
        if (o.notify_len > 0) {
                if (!o.notify)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "opts.notify is NULL but notify_len is %zu", o.notify_len);
                if (o.notify_len > KVD_NOTIFY_MAX)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "opts.notify_len is %zu, at most %d", o.notify_len,
                                         KVD_NOTIFY_MAX);
                pb.xfer.notify.data = (uint8_t *)o.notify;
                pb.xfer.notify.len = o.notify_len;
        }
        timeout = transfer_timeout(c, pb.xfer.timeout_ms);
        if (o.remote_info) {
                /* Linking takes from the transfer's time; the rest goes to the daemon. */
                r = transfer_link_first(c, o.remote_info, a->key->cluster_id, &timeout, "opts.",
                                        err);
                if (r < 0)
                        return r;
                pb.xfer.timeout_ms = timeout;
        }

        t = transfer_task_new(c, transfer_name(a->kind), timeout);
        if (!t)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        r = conn_send(c, KVDIST__V1__MSG_TYPE__MSG_TRANSFER, &pb.xfer.base, NULL, 0, &t->pending,
                      err);
        if (r < 0)
                return r;

        *ret_task = TAKE_PTR(t);
        return KVD_OK;
}

static int transfer_async(kvd_client *c, const TransferArgs *a, kvd_task **ret_task)
{
        Error err = ERROR_INIT;
        int r;

        if (!c)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = transfer_submit(c, a, ret_task, &err);
        return client_return(c, &err, r);
}

/*
 * The cache forms: batch item @batch_index of local cache @cache_id against the item @key names
 * (@size bytes per tensor, -1 for all of it).
 */
static int cache_transfer(kvd_client *c, kvd_transfer_kind kind, const kvd_cache_key *key,
                          uint64_t cache_id, uint32_t batch_index, int64_t size,
                          const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        TransferArgs a = {
                .kind = kind,
                .key = key,
                .cache_id = cache_id,
                .batch_index = batch_index,
                .size = size,
                .opts = opts,
        };

        return transfer_async(c, &a, ret_task);
}

/* The blocks forms: blocks of local cache @cache_id against the blocks cache @key names. */
static int blocks_transfer(kvd_client *c, kvd_transfer_kind kind, const kvd_cache_key *key,
                           uint64_t cache_id, const uint64_t *src_blocks, size_t n_src,
                           const uint64_t *dst_blocks, size_t n_dst, const kvd_transfer_opts *opts,
                           kvd_task **ret_task)
{
        TransferArgs a = {
                .kind = kind,
                .key = key,
                .cache_id = cache_id,
                .size = -1,
                .src_blocks = src_blocks,
                .n_src = n_src,
                .dst_blocks = dst_blocks,
                .n_dst = n_dst,
                .opts = opts,
        };

        return transfer_async(c, &a, ret_task);
}

/*
 * What a synchronous form returns: @r, the async form's status, or else the status of waiting
 * for @task until its own deadline. Frees the task.
 */
static int transfer_wait(int r, kvd_task *task)
{
        if (r < 0)
                return r;
        r = kvd_task_wait(task, -1);
        /* Answered, or the daemon is overdue: there is nothing to cancel. */
        task_free(task);
        return r;
}

/*
 * kvd_task_wait() without the last-error bookkeeping: the task's status once it has one, else
 * KVD_E_IN_PROGRESS (or KVD_E_TIMEOUT once the daemon is overdue), with a detail in @err.
 */
static int task_wait(kvd_task *task, int32_t timeout_ms, Error *err)
{
        kvd_client *c = task->client;
        usec_t deadline;
        int r;

        /* Never past the answer's own deadline: after it the daemon is overdue. */
        deadline = task->deadline;
        if (timeout_ms >= 0)
                deadline = MIN(deadline,
                               now_usec(CLOCK_MONOTONIC) + (usec_t)timeout_ms * USEC_PER_MSEC);

        pthread_mutex_lock(&c->lock);
        if (task->completed)
                goto done;
        pthread_mutex_unlock(&c->lock);

        r = conn_wait(c, &task->pending, deadline, err);

        pthread_mutex_lock(&c->lock);
        if (task->completed)
                /* Another thread waited on the same task and finished it. */
                goto done;
        if (r == KVD_E_TIMEOUT && c->dead)
                /* It died after our wait ended: that is the answer now. */
                r = error_set(err, c->dead_code, "%s", c->dead_detail);
        if (r != KVD_E_TIMEOUT || c->dead) {
                /* Final: the reply, or a connection that can never bring one (conn_wait() gives
                 * the daemon's own reason when it said why it closed). */
                if (r == KVD_OK)
                        r = pending_status(&task->pending, err);
                if (task->batch)
                        r = task_batch_take_reply(task, r, err);
                task->completed = true;
                task->status = r;
                (void)snprintf(task->detail, sizeof(task->detail), "%s", err->msg);
                goto done;
        }
        pthread_mutex_unlock(&c->lock);

        if (now_usec(CLOCK_MONOTONIC) >= task->deadline)
                return error_set(err, KVD_E_TIMEOUT,
                                 "kvdistd did not answer the %s request (id %llu) within %u ms",
                                 task->name, (unsigned long long)task->pending.request_id,
                                 task->timeout_ms + CLIENT_GRACE_MS);
        return error_set(err, KVD_E_IN_PROGRESS, "the %s request (id %llu) is still running",
                         task->name, (unsigned long long)task->pending.request_id);

done:
        r = task->status;
        error_clear(err);
        if (r < 0)
                error_set(err, r, "%s", task->detail);
        pthread_mutex_unlock(&c->lock);
        return r;
}

_public_ int kvd_task_wait(kvd_task *task, int32_t timeout_ms)
{
        Error err = ERROR_INIT;
        int r;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        r = task_wait(task, timeout_ms, &err);
        return client_return(task->client, &err, r);
}

_public_ int kvd_task_done(kvd_task *task, bool *ret_done)
{
        Error err = ERROR_INIT;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        if (!ret_done)
                return client_return(task->client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "ret_done is NULL"));
        pthread_mutex_lock(&task->client->lock);
        *ret_done = task->completed;
        pthread_mutex_unlock(&task->client->lock);
        return KVD_OK;
}

/* Whether @t's answer is in (or can never come); with c->lock held. */
static bool task_answered_locked(const kvd_task *t)
{
        return t->completed || t->pending.done || t->client->dead;
}

/* Makes @t's eventfd and epoll fd; with c->lock held. Returns KVD_OK or a status with a detail. */
static int task_make_fd_locked(kvd_task *t, Error *err)
{
        struct epoll_event ev = {.events = EPOLLIN};
        _cleanup_close_ int efd = -1, ep = -1;
        kvd_client *c = t->client;

        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (efd < 0)
                return error_set(err, errno == ENOMEM ? KVD_E_OUT_OF_MEMORY : KVD_E_FAILED,
                                 "eventfd: %s", strerror(errno));
        ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
                return error_set(err, errno == ENOMEM ? KVD_E_OUT_OF_MEMORY : KVD_E_FAILED,
                                 "epoll_create1: %s", strerror(errno));
        if (epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) < 0)
                return error_set(err, KVD_E_FAILED, "epoll_ctl(eventfd): %s", strerror(errno));
        /* What waits in the socket may be this answer, read by nobody yet; a finalized client has
         * no socket, and a dead connection signals below. */
        if (c->fd >= 0 && !c->dead && epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
                return error_set(err, KVD_E_FAILED, "epoll_ctl(kvdistd socket): %s",
                                 strerror(errno));
        if (task_answered_locked(t))
                (void)eventfd_write(efd, 1);
        t->event_fd = TAKE_FD(efd);
        t->epoll_fd = TAKE_FD(ep);
        /* Still on c->pending while unanswered: from now on its answer signals the eventfd. */
        t->pending.wake_fd = t->event_fd;
        return KVD_OK;
}

_public_ int kvd_task_fd(kvd_task *task, int *ret_fd)
{
        Error err = ERROR_INIT;
        kvd_client *c;
        int r = KVD_OK;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        c = task->client;
        if (!ret_fd)
                return client_return(c, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "ret_fd is NULL"));
        pthread_mutex_lock(&c->lock);
        if (task->epoll_fd < 0)
                r = task_make_fd_locked(task, &err);
        if (r == KVD_OK)
                *ret_fd = task->epoll_fd;
        pthread_mutex_unlock(&c->lock);
        return client_return(c, &err, r);
}

/*
 * Asks the daemon to stop @t (unless its answer is in) and waits for the answer, which comes
 * once nothing of the transfer can land any more. Returns the task's final status, or the
 * cancel request's failure (UNSUPPORTED from an older daemon), with a detail in @err.
 */
static int task_cancel(kvd_task *t, Error *err)
{
        Kvdist__V1__TransferCancel m = KVDIST__V1__TRANSFER_CANCEL__INIT;
        kvd_client *c = t->client;
        bool answered;
        int r;

        pthread_mutex_lock(&c->lock);
        answered = task_answered_locked(t);
        m.request_id = t->pending.request_id;
        pthread_mutex_unlock(&c->lock);

        if (!answered) {
                r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, &m.base, NULL, 0,
                              CLIENT_CALL_TIMEOUT_MS, NULL, NULL, err);
                /* A dead connection answers the task below; anything else is the cancel's. */
                if (r < 0 && r != KVD_E_DAEMON_UNAVAILABLE)
                        return r;
                error_clear(err);
        }
        return task_wait(t, -1, err);
}

_public_ int kvd_task_cancel(kvd_task *task)
{
        Error err = ERROR_INIT;
        int r;

        if (!task)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "task is NULL"));
        r = task_cancel(task, &err);
        return client_return(task->client, &err, r);
}

_public_ void kvd_task_free(kvd_task *task)
{
        Error err = ERROR_INIT;
        bool answered;

        if (!task)
                return;
        pthread_mutex_lock(&task->client->lock);
        answered = task_answered_locked(task);
        pthread_mutex_unlock(&task->client->lock);
        /* Nothing of it lands once this returns; the caller's last error stays as it was. A
         * daemon that is overdue (past the task's deadline and grace) is not asked. */
        if (!answered && now_usec(CLOCK_MONOTONIC) < task->deadline)
                (void)task_cancel(task, &err);
        task_free(task);
}

_public_ int kvd_pull_cache_async(kvd_client *client, const kvd_cache_key *src_key,
                                  uint64_t dst_cache_id, uint32_t dst_batch_index, int64_t size,
                                  const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        return cache_transfer(client, KVD_PULL_CACHE, src_key, dst_cache_id, dst_batch_index, size,
                              opts, ret_task);
}

_public_ int kvd_pull_blocks_async(kvd_client *client, const kvd_cache_key *src_key,
                                   uint64_t dst_cache_id, const uint64_t *src_blocks, size_t n_src,
                                   const uint64_t *dst_blocks, size_t n_dst,
                                   const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        return blocks_transfer(client, KVD_PULL_BLOCKS, src_key, dst_cache_id, src_blocks, n_src,
                               dst_blocks, n_dst, opts, ret_task);
}

_public_ int kvd_push_cache_async(kvd_client *client, const kvd_cache_key *dst_key,
                                  uint64_t src_cache_id, uint32_t src_batch_index, int64_t size,
                                  const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        return cache_transfer(client, KVD_PUSH_CACHE, dst_key, src_cache_id, src_batch_index, size,
                              opts, ret_task);
}

_public_ int kvd_push_blocks_async(kvd_client *client, const kvd_cache_key *dst_key,
                                   uint64_t src_cache_id, const uint64_t *src_blocks, size_t n_src,
                                   const uint64_t *dst_blocks, size_t n_dst,
                                   const kvd_transfer_opts *opts, kvd_task **ret_task)
{
        return blocks_transfer(client, KVD_PUSH_BLOCKS, dst_key, src_cache_id, src_blocks, n_src,
                               dst_blocks, n_dst, opts, ret_task);
}

/* The synchronous forms: the async form, then a wait until the transfer's own deadline. */

_public_ int kvd_pull_cache(kvd_client *client, const kvd_cache_key *src_key, uint64_t dst_cache_id,
                            uint32_t dst_batch_index, int64_t size, const kvd_transfer_opts *opts)
{
        kvd_task *t = NULL;
        int r;

        r = kvd_pull_cache_async(client, src_key, dst_cache_id, dst_batch_index, size, opts, &t);
        return transfer_wait(r, t);
}

_public_ int kvd_pull_blocks(kvd_client *client, const kvd_cache_key *src_key,
                             uint64_t dst_cache_id, const uint64_t *src_blocks, size_t n_src,
                             const uint64_t *dst_blocks, size_t n_dst,
                             const kvd_transfer_opts *opts)
{
        kvd_task *t = NULL;
        int r;

        r = kvd_pull_blocks_async(client, src_key, dst_cache_id, src_blocks, n_src, dst_blocks,
                                  n_dst, opts, &t);
        return transfer_wait(r, t);
}

_public_ int kvd_push_cache(kvd_client *client, const kvd_cache_key *dst_key, uint64_t src_cache_id,
                            uint32_t src_batch_index, int64_t size, const kvd_transfer_opts *opts)
{
        kvd_task *t = NULL;
        int r;

        r = kvd_push_cache_async(client, dst_key, src_cache_id, src_batch_index, size, opts, &t);
        return transfer_wait(r, t);
}

_public_ int kvd_push_blocks(kvd_client *client, const kvd_cache_key *dst_key,
                             uint64_t src_cache_id, const uint64_t *src_blocks, size_t n_src,
                             const uint64_t *dst_blocks, size_t n_dst,
                             const kvd_transfer_opts *opts)
{
        kvd_task *t = NULL;
        int r;

        r = kvd_push_blocks_async(client, dst_key, src_cache_id, src_blocks, n_src, dst_blocks,
                                  n_dst, opts, &t);
        return transfer_wait(r, t);
}
