/* SPDX-License-Identifier: MIT */
/*
 * kvdist._kvdist.Client: one process attached to kvdistd as a cluster, and every libkvdist call
 * on it. Arguments are converted first, then the call runs with the GIL released under the
 * client's lock (shared; finalize() takes it exclusively, since libkvdist's finalize must run
 * alone), then the result becomes Python objects. Failures raise through kvdpy_raise().
 */
#include "client-lib/python/ext/kvdistpy.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

void client_add_orphan(ClientObject *self, void *ptr, size_t size)
{
        Orphan *o;

        o = PyMem_RawMalloc(sizeof(*o));
        if (!o)
                /* Nothing better to do: the mapping stays until the process ends. */
                return;
        *o = (Orphan){.ptr = ptr, .size = size};
        (void)pthread_mutex_lock(&self->orphans_lock);
        o->next = self->orphans;
        self->orphans = o;
        (void)pthread_mutex_unlock(&self->orphans_lock);
}

void client_reap_orphans_locked(ClientObject *self, kvd_client *c)
{
        Orphan **p, *o;

        (void)pthread_mutex_lock(&self->orphans_lock);
        for (p = &self->orphans; (o = *p);) {
                if (kvd_mem_free(c, o->ptr) == KVD_OK) {
                        *p = o->next;
                        PyMem_RawFree(o);
                } else
                        p = &o->next;
        }
        (void)pthread_mutex_unlock(&self->orphans_lock);
}

/* After finalizing: the orphans' mappings are ours now (kvd_client_finalize_keep_memory()). */
static void client_unmap_orphans(ClientObject *self)
{
        Orphan *o;

        (void)pthread_mutex_lock(&self->orphans_lock);
        while ((o = self->orphans)) {
                self->orphans = o->next;
                (void)munmap(o->ptr, o->size);
                PyMem_RawFree(o);
        }
        (void)pthread_mutex_unlock(&self->orphans_lock);
}

/* Finalizes @self's client once; with the GIL released. Returns the status and its detail. */
static int client_finalize_nogil(ClientObject *self, char *detail, size_t size)
{
        kvd_client *c;
        int r = KVD_OK;

        (void)pthread_rwlock_wrlock(&self->lock);
        c = self->client;
        self->client = NULL;
        if (c) {
                /* Memory objects may outlive the cluster: they unmap their memory themselves. */
                r = kvd_client_finalize_keep_memory(c);
                if (r != KVD_OK)
                        /* Compares the pointer only: safe after the client was freed. */
                        (void)snprintf(detail, size, "%s", kvd_last_error(c));
        }
        (void)pthread_rwlock_unlock(&self->lock);
        client_unmap_orphans(self);
        return r;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
        static char *kwlist[] = {"cluster_id", "role", "options", NULL};
        _cleanup_(options_done) OptionList opts = {};
        PyObject *id_o, *role_o, *opts_o;
        char detail[KVDPY_DETAIL_MAX] = "";
        pthread_rwlockattr_t attr;
        ClientObject *self;
        uint64_t cluster_id;
        kvd_client *c = NULL;
        int64_t role;
        int r;

        if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO", kwlist, &id_o, &role_o, &opts_o))
                return NULL;
        if (u64_from_object(id_o, &cluster_id, "cluster_id") < 0 ||
            i64_from_object(role_o, INT32_MIN, INT32_MAX, &role, "role") < 0 ||
            options_from_object(opts_o, &opts) < 0)
                return NULL;

        self = (ClientObject *)type->tp_alloc(type, 0);
        if (!self)
                return NULL;
        /* Finalizing waits for the calls under way, and new calls wait for it, not the reverse. */
        (void)pthread_rwlockattr_init(&attr);
        (void)pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        (void)pthread_rwlock_init(&self->lock, &attr);
        (void)pthread_rwlockattr_destroy(&attr);
        (void)pthread_mutex_init(&self->orphans_lock, NULL);

        Py_BEGIN_ALLOW_THREADS r =
                kvd_client_init(cluster_id, (kvd_role)role, opts.options, opts.n, &c);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(NULL));
        Py_END_ALLOW_THREADS

                if (r != KVD_OK)
        {
                Py_DECREF(self);
                return kvdpy_raise(r, detail);
        }
        self->client = c;
        return (PyObject *)self;
}

static void client_dealloc(ClientObject *self)
{
        char detail[KVDPY_DETAIL_MAX];

        /* No Memory or Task is left (each holds a reference): nothing else uses the client. */
        Py_BEGIN_ALLOW_THREADS(void) client_finalize_nogil(self, detail, sizeof(detail));
        Py_END_ALLOW_THREADS(void) pthread_mutex_destroy(&self->orphans_lock);
        (void)pthread_rwlock_destroy(&self->lock);
        Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_finalize(ClientObject *self, PyObject *unused)
{
        char detail[KVDPY_DETAIL_MAX] = "";
        int r;

        Py_BEGIN_ALLOW_THREADS r = client_finalize_nogil(self, detail, sizeof(detail));
        Py_END_ALLOW_THREADS
                /* The daemon refused the orderly detach; the connection is closed all the same. */
                if (r != KVD_OK) return kvdpy_raise(r, detail);
        Py_RETURN_NONE;
}

static PyObject *client_get_finalized(ClientObject *self, void *closure)
{
        bool finalized;

        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->lock);
        finalized = !self->client;
        (void)pthread_rwlock_unlock(&self->lock);
        Py_END_ALLOW_THREADS return PyBool_FromLong(finalized);
}

/* --- memory and caches ------------------------------------------------------------------ */

static PyObject *client_mem_alloc(ClientObject *self, PyObject *arg)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *ptr = NULL;
        PyObject *mem;
        int64_t size;
        Call k;
        int r = KVD_OK;

        if (i64_from_object(arg, 0, PY_SSIZE_T_MAX, &size, "size") < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_mem_alloc(k.c, (size_t)size, &ptr);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);

        /* libkvdist maps whole pages; the buffer covers them all. */
        size = (int64_t)(((size_t)size + page - 1) / page * page);
        mem = memory_new(self, ptr, (size_t)size);
        if (!mem) {
                if (call_begin(&k, self))
                        (void)kvd_mem_free(k.c, ptr);
                else
                        (void)munmap(ptr, (size_t)size);
                (void)call_end(&k, KVD_OK);
        }
        return mem;
}

/* mem_register(fd, offset, length, address): kvd_mem_register() of the caller's memfd. */
static PyObject *client_mem_register(ClientObject *self, PyObject *args)
{
        PyObject *fd_o, *off_o, *len_o, *addr_o;
        int64_t fd, offset, length, addr;
        uint64_t id = 0;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OOOO", &fd_o, &off_o, &len_o, &addr_o) ||
            i64_from_object(fd_o, -1, INT32_MAX, &fd, "fd") < 0 ||
            i64_from_object(off_o, 0, INT64_MAX, &offset, "offset") < 0 ||
            i64_from_object(len_o, 0, INT64_MAX, &length, "length") < 0 ||
            i64_from_object(addr_o, 0, INT64_MAX, &addr, "address") < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_mem_register(k.c,
                                     &(kvd_mem_desc){.size = sizeof(kvd_mem_desc),
                                                     .fd = (int)fd,
                                                     .offset = (uint64_t)offset,
                                                     .length = (uint64_t)length,
                                                     .addr = (void *)(uintptr_t)addr},
                                     &id);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        return PyLong_FromUnsignedLongLong(id);
}

static PyObject *client_mem_unregister(ClientObject *self, PyObject *arg)
{
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (u64_from_object(arg, &id, "mem_id") < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_mem_unregister(k.c, id);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

static PyObject *register_cache(ClientObject *self, PyObject *args, bool blocks)
{
        _cleanup_(addrs_done) AddrList addrs = {};
        _cleanup_(keys_done) KeyList keys = {};
        PyObject *desc_o, *addrs_o, *keys_o, *access_o;
        kvd_cache_key key;
        kvd_cache_desc desc;
        uint64_t id = 0;
        int64_t access;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OOOO", &desc_o, &addrs_o, &keys_o, &access_o) ||
            desc_from_object(desc_o, &desc) < 0 || addrs_from_object(addrs_o, &addrs) < 0 ||
            i64_from_object(access_o, INT32_MIN, INT32_MAX, &access, "remote access") < 0)
                return NULL;
        if (blocks ? keys_o != Py_None && key_from_object(keys_o, &key) < 0
                   : keys_from_object(keys_o, &keys) < 0)
                return NULL;

        if (call_begin(&k, self)) {
                if (blocks)
                        r = kvd_register_blocks_cache(k.c, &desc, addrs.addrs, addrs.n,
                                                      keys_o == Py_None ? NULL : &key,
                                                      (kvd_remote_access)access, &id);
                else
                        r = kvd_register_cache(k.c, &desc, addrs.addrs, addrs.n, keys.keys, keys.n,
                                               (kvd_remote_access)access, &id);
        }
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        return PyLong_FromUnsignedLongLong(id);
}

static PyObject *client_register_cache(ClientObject *self, PyObject *args)
{
        return register_cache(self, args, false);
}

static PyObject *client_register_blocks_cache(ClientObject *self, PyObject *args)
{
        return register_cache(self, args, true);
}

static PyObject *allocate_cache(ClientObject *self, PyObject *args, bool blocks)
{
        _cleanup_(keys_done) KeyList keys = {};
        void *addrs[KVD_MAX_TENSORS];
        PyObject *desc_o, *keys_o, *list;
        kvd_cache_desc desc;
        kvd_cache_key key;
        uint64_t id = 0;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OO", &desc_o, &keys_o) || desc_from_object(desc_o, &desc) < 0)
                return NULL;
        if (blocks ? keys_o != Py_None && key_from_object(keys_o, &key) < 0
                   : keys_from_object(keys_o, &keys) < 0)
                return NULL;

        if (call_begin(&k, self)) {
                /* More tensors than addrs[] holds are refused before anything is written. */
                void **ret_addrs = desc.num_tensors <= KVD_MAX_TENSORS ? addrs : NULL;

                if (blocks)
                        r = kvd_allocate_blocks_cache(k.c, &desc, keys_o == Py_None ? NULL : &key,
                                                      &id, ret_addrs);
                else
                        r = kvd_allocate_cache(k.c, &desc, keys.keys, keys.n, &id, ret_addrs);
        }
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);

        list = PyList_New(desc.num_tensors);
        for (uint32_t i = 0; list && i < desc.num_tensors; i++) {
                PyObject *a = PyLong_FromVoidPtr(addrs[i]);

                if (!a)
                        Py_CLEAR(list);
                else
                        PyList_SET_ITEM(list, i, a);
        }
        if (!list)
                return NULL;
        return Py_BuildValue("(KN)", (unsigned long long)id, list);
}

static PyObject *client_allocate_cache(ClientObject *self, PyObject *args)
{
        return allocate_cache(self, args, false);
}

static PyObject *client_allocate_blocks_cache(ClientObject *self, PyObject *args)
{
        return allocate_cache(self, args, true);
}

/* unregister_cache() and deallocate_cache(): a cache that goes may free memory held back. */
static PyObject *cache_release(ClientObject *self, PyObject *arg, bool deallocate)
{
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (u64_from_object(arg, &id, "cache_id") < 0)
                return NULL;
        if (call_begin(&k, self)) {
                r = deallocate ? kvd_deallocate_cache(k.c, id) : kvd_unregister_cache(k.c, id);
                if (r == KVD_OK)
                        client_reap_orphans_locked(self, k.c);
        }
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

static PyObject *client_unregister_cache(ClientObject *self, PyObject *arg)
{
        return cache_release(self, arg, false);
}

static PyObject *client_deallocate_cache(ClientObject *self, PyObject *arg)
{
        return cache_release(self, arg, true);
}

static PyObject *client_remove_cache_key(ClientObject *self, PyObject *arg)
{
        kvd_cache_key key;
        Call k;
        int r = KVD_OK;

        if (key_from_object(arg, &key) < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_remove_cache_key(k.c, &key);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

/* --- links ------------------------------------------------------------------------------ */

/* link_clusters() and unlink_clusters(): (status, [status per cluster], detail), no raising. */
static PyObject *link_or_unlink(ClientObject *self, PyObject *args, bool unlink)
{
        _cleanup_(clusters_done) ClusterList clusters = {};
        PyObject *clusters_o, *timeout_o, *force_o = Py_False, *list;
        int64_t timeout;
        int *rets;
        int force, r = KVD_OK;
        Call k;

        if (!PyArg_ParseTuple(args, unlink ? "OOO" : "OO", &clusters_o, &timeout_o, &force_o) ||
            clusters_from_object(clusters_o, &clusters) < 0 ||
            i64_from_object(timeout_o, INT32_MIN, INT32_MAX, &timeout, "timeout") < 0)
                return NULL;
        force = PyObject_IsTrue(force_o);
        if (force < 0)
                return NULL;
        rets = PyMem_New(int, clusters.n + 1);
        if (!rets)
                return PyErr_NoMemory();

        if (call_begin(&k, self))
                r = unlink ? kvd_unlink_clusters(k.c, clusters.infos, clusters.n, (int)timeout,
                                                 force, rets)
                           : kvd_link_clusters(k.c, clusters.infos, clusters.n, (int)timeout, rets);
        r = call_end(&k, r);
        if (r == KVDPY_FINALIZED) {
                PyMem_Free(rets);
                return kvdpy_raise(r, k.detail);
        }

        list = PyList_New((Py_ssize_t)clusters.n);
        for (size_t i = 0; list && i < clusters.n; i++) {
                PyObject *v = PyLong_FromLong(rets[i]);

                if (!v)
                        Py_CLEAR(list);
                else
                        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
        }
        PyMem_Free(rets);
        if (!list)
                return NULL;
        return Py_BuildValue("(iNN)", r, list, kvdpy_str(k.detail));
}

static PyObject *client_link_clusters(ClientObject *self, PyObject *args)
{
        return link_or_unlink(self, args, false);
}

static PyObject *client_unlink_clusters(ClientObject *self, PyObject *args)
{
        return link_or_unlink(self, args, true);
}

static PyObject *client_check_link_status(ClientObject *self, PyObject *arg)
{
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (u64_from_object(arg, &id, "remote_cluster_id") < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_check_link_status(k.c, id);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

static PyObject *client_local_info(ClientObject *self, PyObject *unused)
{
        char *info = NULL;
        PyObject *ret;
        Call k;
        int r = KVD_OK;

        if (call_begin(&k, self))
                r = kvd_local_info(k.c, &info);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        ret = kvdpy_str(info);
        free(info);
        return ret;
}

static PyObject *client_link_remote(ClientObject *self, PyObject *args)
{
        _cleanup_(strpool_done) StrPool strs = {};
        PyObject *info_o, *timeout_o;
        const char *info;
        int64_t timeout;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OO", &info_o, &timeout_o) ||
            i64_from_object(timeout_o, INT32_MIN, INT32_MAX, &timeout, "timeout_ms") < 0)
                return NULL;
        info = strpool_add(&strs, info_o, false, "remote_info");
        if (!info)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_link_remote(k.c, info, (int32_t)timeout);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

static PyObject *client_switch_role(ClientObject *self, PyObject *args)
{
        _cleanup_(options_done) OptionList opts = {};
        PyObject *role_o, *opts_o;
        int64_t role;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OO", &role_o, &opts_o) ||
            i64_from_object(role_o, INT32_MIN, INT32_MAX, &role, "role") < 0 ||
            options_from_object(opts_o, &opts) < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_switch_role(k.c, (kvd_role)role, opts.options, opts.n);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

/* --- transfers -------------------------------------------------------------------------- */

/* What a transfer method returns: a Task for the async forms, else None. */
static PyObject *transfer_result(ClientObject *self, Call *k, int r, kvd_task *task)
{
        PyObject *t;

        if (r != KVD_OK)
                return kvdpy_raise(r, k->detail);
        if (!task)
                Py_RETURN_NONE;
        t = task_new(self, task, k->c, 0);
        if (!t)
                kvd_task_free(task);
        return t;
}

/* pull_cache() and push_cache(): (key, cache_id, batch_index, size, opts). */
static PyObject *cache_transfer(ClientObject *self, PyObject *args, bool push, bool async)
{
        _cleanup_(opts_done) TransferOpts opts = {};
        PyObject *key_o, *id_o, *index_o, *size_o, *opts_o = Py_None;
        const kvd_transfer_opts *o;
        kvd_task *task = NULL;
        int64_t index, size;
        kvd_cache_key key;
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OOOO|O", &key_o, &id_o, &index_o, &size_o, &opts_o) ||
            key_from_object(key_o, &key) < 0 || u64_from_object(id_o, &id, "cache_id") < 0 ||
            i64_from_object(index_o, 0, UINT32_MAX, &index, "batch_index") < 0 ||
            i64_from_object(size_o, INT64_MIN, INT64_MAX, &size, "size") < 0 ||
            opts_from_object(opts_o, &opts) < 0)
                return NULL;
        o = opts.given ? &opts.opts : NULL;

        if (call_begin(&k, self)) {
                if (async)
                        r = push ? kvd_push_cache_async(k.c, &key, id, (uint32_t)index, size, o,
                                                        &task)
                                 : kvd_pull_cache_async(k.c, &key, id, (uint32_t)index, size, o,
                                                        &task);
                else
                        r = push ? kvd_push_cache(k.c, &key, id, (uint32_t)index, size, o)
                                 : kvd_pull_cache(k.c, &key, id, (uint32_t)index, size, o);
        }
        r = call_end(&k, r);
        return transfer_result(self, &k, r, task);
}

/* pull_blocks() and push_blocks(): (key, cache_id, src_blocks, dst_blocks, opts). */
static PyObject *blocks_transfer(ClientObject *self, PyObject *args, bool push, bool async)
{
        _cleanup_(blocks_done) BlockList src = {}, dst = {};
        _cleanup_(opts_done) TransferOpts opts = {};
        PyObject *key_o, *id_o, *src_o, *dst_o, *opts_o = Py_None;
        const kvd_transfer_opts *o;
        kvd_task *task = NULL;
        kvd_cache_key key;
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OOOO|O", &key_o, &id_o, &src_o, &dst_o, &opts_o) ||
            key_from_object(key_o, &key) < 0 || u64_from_object(id_o, &id, "cache_id") < 0 ||
            blocks_from_object(src_o, &src) < 0 || blocks_from_object(dst_o, &dst) < 0 ||
            opts_from_object(opts_o, &opts) < 0)
                return NULL;
        o = opts.given ? &opts.opts : NULL;

        /* The block ids are read where they lie (a numpy array's memory) with the GIL released:
         * the buffers stay exported, so their owners cannot resize them meanwhile. */
        if (call_begin(&k, self)) {
                if (async)
                        r = push ? kvd_push_blocks_async(k.c, &key, id, src.ids, src.n, dst.ids,
                                                         dst.n, o, &task)
                                 : kvd_pull_blocks_async(k.c, &key, id, src.ids, src.n, dst.ids,
                                                         dst.n, o, &task);
                else
                        r = push ? kvd_push_blocks(k.c, &key, id, src.ids, src.n, dst.ids, dst.n, o)
                                 : kvd_pull_blocks(k.c, &key, id, src.ids, src.n, dst.ids, dst.n,
                                                   o);
        }
        r = call_end(&k, r);
        return transfer_result(self, &k, r, task);
}

static PyObject *client_pull_cache(ClientObject *self, PyObject *args)
{
        return cache_transfer(self, args, false, false);
}

static PyObject *client_pull_cache_async(ClientObject *self, PyObject *args)
{
        return cache_transfer(self, args, false, true);
}

static PyObject *client_push_cache(ClientObject *self, PyObject *args)
{
        return cache_transfer(self, args, true, false);
}

static PyObject *client_push_cache_async(ClientObject *self, PyObject *args)
{
        return cache_transfer(self, args, true, true);
}

static PyObject *client_pull_blocks(ClientObject *self, PyObject *args)
{
        return blocks_transfer(self, args, false, false);
}

static PyObject *client_pull_blocks_async(ClientObject *self, PyObject *args)
{
        return blocks_transfer(self, args, false, true);
}

static PyObject *client_push_blocks(ClientObject *self, PyObject *args)
{
        return blocks_transfer(self, args, true, false);
}

static PyObject *client_push_blocks_async(ClientObject *self, PyObject *args)
{
        return blocks_transfer(self, args, true, true);
}

/* transfer_batch(entries, timeout_ms): kvd_transfer_batch(), a Task. */
static PyObject *client_transfer_batch(ClientObject *self, PyObject *args)
{
        _cleanup_(batch_done) BatchList batch = {};
        kvd_transfer_opts o = KVD_TRANSFER_OPTS_INIT;
        PyObject *entries_o, *timeout_o, *t;
        kvd_task *task = NULL;
        int64_t timeout;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OO", &entries_o, &timeout_o) ||
            i64_from_object(timeout_o, INT32_MIN, INT32_MAX, &timeout, "timeout_ms") < 0 ||
            batch_from_object(entries_o, &batch) < 0)
                return NULL;
        o.timeout_ms = (int32_t)timeout;

        /* As blocks_transfer(): block ids are read where they lie, their buffers exported;
         * libkvdist copies them before it returns. */
        if (call_begin(&k, self))
                r = kvd_transfer_batch(k.c, batch.entries, batch.n, &o, &task);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        t = task_new(self, task, k.c, batch.n);
        if (!t)
                kvd_task_free(task);
        return t;
}

/* --- notifications ---------------------------------------------------------------------- */

static PyObject *client_notify_fd(ClientObject *self, PyObject *unused)
{
        int fd = -1, r = KVD_OK;
        Call k;

        if (call_begin(&k, self))
                r = kvd_notify_fd(k.c, &fd);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        return PyLong_FromLong(fd);
}

/* The daemon keeps at most this many per cluster (limits.max_notifies_per_client). */
#define NOTIFIES_MAX 4096

static PyObject *client_get_notifies(ClientObject *self, PyObject *arg)
{
        kvd_notify *out;
        PyObject *list;
        int64_t max;
        size_t n = 0;
        Call k;
        int r = KVD_OK;

        if (i64_from_object(arg, 1, NOTIFIES_MAX, &max, "max") < 0)
                return NULL;
        out = PyMem_New(kvd_notify, (size_t)max);
        if (!out)
                return PyErr_NoMemory();
        if (call_begin(&k, self))
                r = kvd_get_notifies(k.c, out, (size_t)max, &n);
        r = call_end(&k, r);
        if (r != KVD_OK) {
                PyMem_Free(out);
                return kvdpy_raise(r, k.detail);
        }

        list = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; list && i < n; i++) {
                PyObject *item = Py_BuildValue("(Ky#i)", (unsigned long long)out[i].src_cluster_id,
                                               (const char *)out[i].data, (Py_ssize_t)out[i].len,
                                               (int)out[i].kind);

                if (!item)
                        Py_CLEAR(list);
                else
                        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        PyMem_Free(out);
        return list;
}

/* --- comm domains ----------------------------------------------------------------------- */

static PyObject *client_link(ClientObject *self, PyObject *args)
{
        _cleanup_(strpool_done) StrPool strs = {};
        _cleanup_(ranks_done) RankList ranks = {};
        PyObject *name_o, *ranks_o, *table_o;
        const char *name, *table;
        uint64_t comm_id = 0;
        Call k;
        int r = KVD_OK;

        if (!PyArg_ParseTuple(args, "OOO", &name_o, &ranks_o, &table_o))
                return NULL;
        name = strpool_add(&strs, name_o, false, "comm_name");
        table = name ? strpool_add(&strs, table_o, false, "rank_table") : NULL;
        if (!table || ranks_from_object(ranks_o, &ranks) < 0)
                return NULL;

        if (call_begin(&k, self))
                r = kvd_domain_link(k.c, name, ranks.ranks, ranks.n, table, &comm_id);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        return PyLong_FromUnsignedLongLong(comm_id);
}

static PyObject *client_query_register_mem_status(ClientObject *self, PyObject *arg)
{
        kvd_mem_status st = KVD_MEM_STATUS_FAILED;
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (u64_from_object(arg, &id, "comm_id") < 0)
                return NULL;
        if (call_begin(&k, self)) {
                r = kvd_domain_status(k.c, id, &st);
                /* A FAILED domain's reason comes as the detail of a successful call. */
                if (r == KVD_OK && st == KVD_MEM_STATUS_FAILED)
                        (void)snprintf(k.detail, sizeof(k.detail), "%s", kvd_last_error(k.c));
        }
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        return Py_BuildValue("(iN)", (int)st, kvdpy_str(k.detail));
}

static PyObject *client_unlink(ClientObject *self, PyObject *arg)
{
        uint64_t id;
        Call k;
        int r = KVD_OK;

        if (u64_from_object(arg, &id, "comm_id") < 0)
                return NULL;
        if (call_begin(&k, self))
                r = kvd_domain_unlink(k.c, id);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        Py_RETURN_NONE;
}

/* --- introspection ---------------------------------------------------------------------- */

static PyObject *client_daemon_query(ClientObject *self, bool metrics)
{
        char *text = NULL;
        PyObject *ret;
        Call k;
        int r = KVD_OK;

        if (call_begin(&k, self))
                r = metrics ? kvd_daemon_metrics(k.c, &text) : kvd_daemon_status(k.c, &text);
        r = call_end(&k, r);
        if (r != KVD_OK)
                return kvdpy_raise(r, k.detail);
        ret = kvdpy_str(text);
        free(text);
        return ret;
}

static PyObject *client_daemon_status(ClientObject *self, PyObject *unused)
{
        return client_daemon_query(self, false);
}

static PyObject *client_daemon_metrics(ClientObject *self, PyObject *unused)
{
        return client_daemon_query(self, true);
}

static PyMethodDef client_methods[] = {
        {"finalize", (PyCFunction)client_finalize, METH_NOARGS,
         "finalize()\n--\n\nDetaches the cluster; Memory objects stay usable until they go."},
        {"mem_alloc", (PyCFunction)client_mem_alloc, METH_O,
         "mem_alloc(size)\n--\n\nkvd_mem_alloc(): a Memory object over zeroed shared memory."},
        {"mem_register", (PyCFunction)client_mem_register, METH_VARARGS,
         "mem_register(fd, offset, length, address)\n--\n\n"
         "kvd_mem_register() of the caller's sealed memfd, mapped at address: its id."},
        {"mem_unregister", (PyCFunction)client_mem_unregister, METH_O,
         "mem_unregister(mem_id)\n--\n\nkvd_mem_unregister()."},
        {"register_cache", (PyCFunction)client_register_cache, METH_VARARGS,
         "register_cache(desc, addrs, keys, access)\n--\n\nkvd_register_cache(); the cache id."},
        {"register_blocks_cache", (PyCFunction)client_register_blocks_cache, METH_VARARGS,
         "register_blocks_cache(desc, addrs, key, access)\n--\n\n"
         "kvd_register_blocks_cache(); the cache id."},
        {"unregister_cache", (PyCFunction)client_unregister_cache, METH_O,
         "unregister_cache(cache_id)\n--\n\nkvd_unregister_cache()."},
        {"allocate_cache", (PyCFunction)client_allocate_cache, METH_VARARGS,
         "allocate_cache(desc, keys)\n--\n\nkvd_allocate_cache(): (cache_id, [addresses])."},
        {"allocate_blocks_cache", (PyCFunction)client_allocate_blocks_cache, METH_VARARGS,
         "allocate_blocks_cache(desc, key)\n--\n\n"
         "kvd_allocate_blocks_cache(): (cache_id, [addresses])."},
        {"deallocate_cache", (PyCFunction)client_deallocate_cache, METH_O,
         "deallocate_cache(cache_id)\n--\n\nkvd_deallocate_cache()."},
        {"remove_cache_key", (PyCFunction)client_remove_cache_key, METH_O,
         "remove_cache_key(key)\n--\n\nkvd_remove_cache_key()."},
        {"link_clusters", (PyCFunction)client_link_clusters, METH_VARARGS,
         "link_clusters(clusters, timeout_ms)\n--\n\n"
         "kvd_link_clusters(): (status, [status per cluster], detail)."},
        {"unlink_clusters", (PyCFunction)client_unlink_clusters, METH_VARARGS,
         "unlink_clusters(clusters, timeout_ms, force)\n--\n\n"
         "kvd_unlink_clusters(): (status, [status per cluster], detail)."},
        {"check_link_status", (PyCFunction)client_check_link_status, METH_O,
         "check_link_status(remote_cluster_id)\n--\n\nkvd_check_link_status()."},
        {"local_info", (PyCFunction)client_local_info, METH_NOARGS,
         "local_info()\n--\n\nkvd_local_info(): this cluster as one line another engine "
         "links by."},
        {"link_remote", (PyCFunction)client_link_remote, METH_VARARGS,
         "link_remote(remote_info, timeout_ms)\n--\n\nkvd_link_remote()."},
        {"switch_role", (PyCFunction)client_switch_role, METH_VARARGS,
         "switch_role(role, options)\n--\n\nkvd_switch_role()."},
        {"pull_cache", (PyCFunction)client_pull_cache, METH_VARARGS,
         "pull_cache(key, cache_id, batch_index, size, opts=None)\n--\n\nkvd_pull_cache()."},
        {"pull_cache_async", (PyCFunction)client_pull_cache_async, METH_VARARGS,
         "pull_cache_async(key, cache_id, batch_index, size, opts=None)\n--\n\n"
         "kvd_pull_cache_async(): a Task."},
        {"push_cache", (PyCFunction)client_push_cache, METH_VARARGS,
         "push_cache(key, cache_id, batch_index, size, opts=None)\n--\n\nkvd_push_cache()."},
        {"push_cache_async", (PyCFunction)client_push_cache_async, METH_VARARGS,
         "push_cache_async(key, cache_id, batch_index, size, opts=None)\n--\n\n"
         "kvd_push_cache_async(): a Task."},
        {"pull_blocks", (PyCFunction)client_pull_blocks, METH_VARARGS,
         "pull_blocks(key, cache_id, src_blocks, dst_blocks, opts=None)\n--\n\n"
         "kvd_pull_blocks()."},
        {"pull_blocks_async", (PyCFunction)client_pull_blocks_async, METH_VARARGS,
         "pull_blocks_async(key, cache_id, src_blocks, dst_blocks, opts=None)\n--\n\n"
         "kvd_pull_blocks_async(): a Task."},
        {"push_blocks", (PyCFunction)client_push_blocks, METH_VARARGS,
         "push_blocks(key, cache_id, src_blocks, dst_blocks, opts=None)\n--\n\n"
         "kvd_push_blocks()."},
        {"push_blocks_async", (PyCFunction)client_push_blocks_async, METH_VARARGS,
         "push_blocks_async(key, cache_id, src_blocks, dst_blocks, opts=None)\n--\n\n"
         "kvd_push_blocks_async(): a Task."},
        {"transfer_batch", (PyCFunction)client_transfer_batch, METH_VARARGS,
         "transfer_batch(entries, timeout_ms)\n--\n\n"
         "kvd_transfer_batch(): a Task; entries are (kind, key, cache_id, src_blocks,\n"
         "dst_blocks, batch_index, size, src_first, src_last, dst_first, dst_last,\n"
         "tensor_num_per_layer, remote_info) tuples."},
        {"notify_fd", (PyCFunction)client_notify_fd, METH_NOARGS,
         "notify_fd()\n--\n\nkvd_notify_fd(): readable while notifications wait."},
        {"get_notifies", (PyCFunction)client_get_notifies, METH_O,
         "get_notifies(max)\n--\n\nkvd_get_notifies(): [(src_cluster_id, bytes, kind)]."},
        {"link", (PyCFunction)client_link, METH_VARARGS,
         "link(comm_name, [(cluster_id, rank)], rank_table)\n--\n\nkvd_link(): the comm id."},
        {"query_register_mem_status", (PyCFunction)client_query_register_mem_status, METH_O,
         "query_register_mem_status(comm_id)\n--\n\n"
         "kvd_domain_status(): (status, reason when FAILED)."},
        {"unlink", (PyCFunction)client_unlink, METH_O, "unlink(comm_id)\n--\n\nkvd_unlink()."},
        {"daemon_status", (PyCFunction)client_daemon_status, METH_NOARGS,
         "daemon_status()\n--\n\nkvd_daemon_status(): JSON text."},
        {"daemon_metrics", (PyCFunction)client_daemon_metrics, METH_NOARGS,
         "daemon_metrics()\n--\n\nkvd_daemon_metrics(): Prometheus text."},
        {},
};

static PyGetSetDef client_getset[] = {
        {"finalized", (getter)client_get_finalized, NULL, "Whether finalize() ran.", NULL},
        {},
};

PyTypeObject ClientType = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvdist._kvdist.Client",
        .tp_doc = "Client(cluster_id, role, options)\n--\n\n"
                  "kvd_client_init(): this process attached to kvdistd as a cluster. options is a "
                  "sequence of (key, value) strings.",
        .tp_basicsize = sizeof(ClientObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_new = client_new,
        .tp_dealloc = (destructor)client_dealloc,
        .tp_methods = client_methods,
        .tp_getset = client_getset,
};
