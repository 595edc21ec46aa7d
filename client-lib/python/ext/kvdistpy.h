/* SPDX-License-Identifier: MIT */
/*
 * kvdist._kvdist, the CPython extension over libkvdist: the object types it defines and the
 * helpers its modules share. Python objects are only touched with the GIL held; every libkvdist
 * call that can wait runs with the GIL released, inside a Call (see call_begin()).
 */
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <kvdist/kvdist.h>

#include "common/macro.h"

/* Room for kvd_last_error() (libkvdist keeps 256 bytes) and a prefix. */
#define KVDPY_DETAIL_MAX 512

/*
 * Not a libkvdist status (those are <= 0): the call found its client finalized. The package maps
 * it to LLMStatusCode.LLM_ENGINE_FINALIZED.
 */
#define KVDPY_FINALIZED 1

/* Memory whose object died while a cache still lay in it (kvd_mem_free() said BUSY). */
typedef struct Orphan {
        struct Orphan *next;
        void *ptr;
        size_t size;
} Orphan;

/* kvdist._kvdist.Client: one kvd_client attached as a cluster. */
typedef struct ClientObject {
        PyObject_HEAD kvd_client
                *client;       /* NULL once finalized; changes under @lock held exclusively */
        pthread_rwlock_t lock; /* library calls hold it shared, finalizing exclusively */
        pthread_mutex_t orphans_lock;
        Orphan *orphans;
} ClientObject;

/* kvdist._kvdist.Memory: memory from kvd_mem_alloc(), exported through the buffer protocol. */
typedef struct MemoryObject {
        PyObject_HEAD ClientObject *owner; /* strong reference: the client outlives its memory */
        void *ptr;
        size_t size;        /* what is mapped: the size asked for, rounded up to the page size */
        Py_ssize_t exports; /* buffers handed out and not yet released */
} MemoryObject;

/* kvdist._kvdist.Task: one asynchronous transfer (kvd_task). */
typedef struct TaskObject {
        PyObject_HEAD ClientObject *owner; /* strong reference */
        kvd_task *task;
        kvd_client *c;    /* the task's client, for kvd_last_error(); the task holds it */
        size_t n_entries; /* a batch's entries (kvd_transfer_batch()); 0 for one transfer */
} TaskObject;

extern PyTypeObject ClientType;
extern PyTypeObject MemoryType;
extern PyTypeObject TaskType;

/* One library call made with the GIL released. */
typedef struct Call {
        ClientObject *self;
        PyThreadState *ts;
        kvd_client *c;
        char detail[KVDPY_DETAIL_MAX];
} Call;

/*
 * Releases the GIL and enters @self for library calls: returns the kvd_client, or NULL when the
 * client was finalized. Touch no Python object until call_end().
 */
kvd_client *call_begin(Call *k, ClientObject *self);

/*
 * Leaves the client and takes the GIL back. Returns @r, or KVDPY_FINALIZED when call_begin()
 * found no client; for a failure, k->detail holds kvd_last_error() of this thread.
 */
int call_end(Call *k, int r);

/*
 * Raises the exception for status @status (a KVD_E_* code or KVDPY_FINALIZED) with @detail,
 * built by the factory the package registered (LLMException), else kvdist._kvdist.Error.
 * Returns NULL.
 */
PyObject *kvdpy_raise(int status, const char *detail);

/* A Python str from @s, invalid UTF-8 replaced (details may quote what a peer sent). */
PyObject *kvdpy_str(const char *s);

/* client.c */

/* Frees the orphaned memory kvd_mem_free() now takes; call between call_begin() and call_end(). */
void client_reap_orphans_locked(ClientObject *self, kvd_client *c);

/* Adds memory that could not be freed yet to @self's orphans; takes no GIL. */
void client_add_orphan(ClientObject *self, void *ptr, size_t size);

/* memory.c */

/* A new Memory object over @size bytes at @ptr (from kvd_mem_alloc() on @owner's client). */
PyObject *memory_new(ClientObject *owner, void *ptr, size_t size);

/* task.c */

/*
 * A new Task object that owns @task, a transfer of @owner's client @c; @n_entries is the number
 * of entries of a batch's task, 0 for one transfer's.
 */
PyObject *task_new(ClientObject *owner, kvd_task *task, kvd_client *c, size_t n_entries);

/* args.c: converting Python arguments into libkvdist's structures. */

/* Block ids: a buffer of integers (numpy arrays, array.array) or a sequence of ints. */
typedef struct BlockList {
        const uint64_t *ids; /* NULL when n == 0 */
        size_t n;
        Py_buffer view; /* the caller's buffer when @ids points into it */
        bool has_view;
        uint64_t *owned; /* PyMem_Malloc()ed copy otherwise */
} BlockList;

/* Fills @b from @o; zero copy for a contiguous buffer of 8-byte integers. 0 or -1 with an error. */
int blocks_from_object(PyObject *o, BlockList *b);
void blocks_done(BlockList *b);

/* A tuple (num_tensors, shape, data_type) into @d. 0 or -1 with an error set. */
int desc_from_object(PyObject *o, kvd_cache_desc *d);

/*
 * A key tuple (kind, cluster_id, req_id, prefix_id, model_id, cache_id, batch_index) into @k.
 * 0 or -1 with an error set.
 */
int key_from_object(PyObject *o, kvd_cache_key *k);

/* A sequence of key tuples. */
typedef struct KeyList {
        kvd_cache_key *keys;
        size_t n;
} KeyList;

int keys_from_object(PyObject *o, KeyList *l);
void keys_done(KeyList *l);

/* A sequence of addresses (ints). */
typedef struct AddrList {
        void **addrs;
        size_t n;
} AddrList;

int addrs_from_object(PyObject *o, AddrList *l);
void addrs_done(AddrList *l);

/* Strings copied out of Python objects, so that they outlive a released GIL. */
typedef struct StrPool {
        char **strs;
        size_t n;
} StrPool;

/* A copy of str @o in @pool (NULL for None when @none_ok); NULL with an error set. */
const char *strpool_add(StrPool *pool, PyObject *o, bool none_ok, const char *what);
void strpool_done(StrPool *pool);

/* A sequence of (key, value) str pairs. */
typedef struct OptionList {
        kvd_option *options;
        size_t n;
        StrPool strs;
} OptionList;

int options_from_object(PyObject *o, OptionList *l);
void options_done(OptionList *l);

/* A sequence of (remote_cluster_id, role, remote_ip_info, local_ip_info) tuples. */
typedef struct ClusterList {
        kvd_cluster_info *infos;
        size_t n;
        StrPool strs;
} ClusterList;

int clusters_from_object(PyObject *o, ClusterList *l);
void clusters_done(ClusterList *l);

/* A sequence of (cluster_id, rank_id) tuples: a comm domain's members. */
typedef struct RankList {
        kvd_cluster_rank *ranks;
        size_t n;
} RankList;

int ranks_from_object(PyObject *o, RankList *l);
void ranks_done(RankList *l);

/*
 * Transfer options: None (the defaults) or a tuple (src_first, src_last, dst_first, dst_last,
 * tensor_num_per_layer, timeout_ms, notify[, remote_info[, src_slice, dst_slice]]), notify a
 * bytes-like object or None, remote_info a str (kvd_local_info() of the remote cluster) or None,
 * each slice (offset, length) or None.
 */
typedef struct TransferOpts {
        kvd_transfer_opts opts;
        bool given;
        void *notify; /* PyMem_Malloc()ed copy of the notification */
        StrPool strs; /* the copy of remote_info */
} TransferOpts;

int opts_from_object(PyObject *o, TransferOpts *t);
void opts_done(TransferOpts *t);

/*
 * A batch (kvd_transfer_batch()): a sequence of entry tuples (kind, key, cache_id, src_blocks,
 * dst_blocks, batch_index, size, src_first, src_last, dst_first, dst_last, tensor_num_per_layer,
 * remote_info); block ids as blocks_from_object() reads them (numpy arrays without a copy).
 */
typedef struct BatchList {
        kvd_batch_entry *entries;
        BlockList *blocks; /* 2 per entry: src, dst */
        size_t n;
        StrPool strs;
} BatchList;

int batch_from_object(PyObject *o, BatchList *l);
void batch_done(BatchList *l);

/* An int in [0, 2**64) into *@ret; ValueError for one out of range. 0 or -1. */
int u64_from_object(PyObject *o, uint64_t *ret, const char *what);

/* An int in [@min, @max] into *@ret; ValueError for one out of range. 0 or -1. */
int i64_from_object(PyObject *o, int64_t min, int64_t max, int64_t *ret, const char *what);
