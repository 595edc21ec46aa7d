/* SPDX-License-Identifier: MIT */
/*
 * kvdist._kvdist.Task: an asynchronous transfer. Waiting releases the GIL; a task may be waited
 * on after its client was finalized (it then fails with KVD_E_DAEMON_UNAVAILABLE), since the
 * kvd_task keeps its own reference to the connection.
 */
#include "client-lib/python/ext/kvdistpy.h"

#include <stdio.h>

PyObject *task_new(ClientObject *owner, kvd_task *task, kvd_client *c, size_t n_entries)
{
        TaskObject *self;

        self = PyObject_New(TaskObject, &TaskType);
        if (!self)
                return NULL;
        self->owner = (ClientObject *)Py_NewRef((PyObject *)owner);
        self->task = task;
        self->c = c;
        self->n_entries = n_entries;
        return (PyObject *)self;
}

static void task_dealloc(TaskObject *self)
{
        ClientObject *owner = self->owner;

        /* Not while the client is being finalized, which must run alone. */
        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&owner->lock);
        kvd_task_free(self->task);
        (void)pthread_rwlock_unlock(&owner->lock);
        Py_END_ALLOW_THREADS Py_DECREF(owner);
        Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *task_wait(TaskObject *self, PyObject *args, PyObject *kwds)
{
        static char *kwlist[] = {"timeout_ms", NULL};
        char detail[KVDPY_DETAIL_MAX] = "";
        PyObject *timeout_o = NULL;
        int64_t timeout = -1;
        int r;

        if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &timeout_o))
                return NULL;
        if (timeout_o && timeout_o != Py_None &&
            i64_from_object(timeout_o, -1, INT32_MAX, &timeout, "timeout_ms") < 0)
                return NULL;

        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->owner->lock);
        r = kvd_task_wait(self->task, (int)timeout);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(self->c));
        (void)pthread_rwlock_unlock(&self->owner->lock);
        Py_END_ALLOW_THREADS

                return Py_BuildValue("(iN)", r, kvdpy_str(detail));
}

static PyObject *task_done(TaskObject *self, PyObject *unused)
{
        bool done = false;

        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->owner->lock);
        /* Takes an answer that arrived meanwhile; then asks whether there is one. */
        (void)kvd_task_wait(self->task, 0);
        (void)kvd_task_done(self->task, &done);
        (void)pthread_rwlock_unlock(&self->owner->lock);
        Py_END_ALLOW_THREADS

                return PyBool_FromLong(done);
}

static PyObject *task_cancel(TaskObject *self, PyObject *unused)
{
        char detail[KVDPY_DETAIL_MAX] = "";
        int r;

        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->owner->lock);
        r = kvd_task_cancel(self->task);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(self->c));
        (void)pthread_rwlock_unlock(&self->owner->lock);
        Py_END_ALLOW_THREADS

                return Py_BuildValue("(iN)", r, kvdpy_str(detail));
}

static PyObject *task_fileno(TaskObject *self, PyObject *unused)
{
        int fd = -1, r;

        /* Creates no connection traffic: no need to leave the GIL. */
        r = kvd_task_fd(self->task, &fd);
        if (r != KVD_OK)
                return kvdpy_raise(r, kvd_last_error(self->c));
        return PyLong_FromLong(fd);
}

/* entry_statuses(): [status per entry] of a finished batch; raises while it runs. */
static PyObject *task_entry_statuses(TaskObject *self, PyObject *unused)
{
        char detail[KVDPY_DETAIL_MAX] = "";
        size_t n = self->n_entries;
        PyObject *list;
        int *st;
        int r = KVD_OK;

        st = PyMem_New(int, n + 1);
        if (!st)
                return PyErr_NoMemory();
        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->owner->lock);
        /* Takes an answer that arrived meanwhile, as done() does. */
        (void)kvd_task_wait(self->task, 0);
        /* A task of one transfer: libkvdist says it is not a batch. */
        for (size_t i = 0; r == KVD_OK && i < (n > 0 ? n : 1); i++)
                r = kvd_task_entry_status(self->task, i, &st[i]);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(self->c));
        (void)pthread_rwlock_unlock(&self->owner->lock);
        Py_END_ALLOW_THREADS

                if (r != KVD_OK)
        {
                PyMem_Free(st);
                return kvdpy_raise(r, detail);
        }
        list = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; list && i < n; i++) {
                PyObject *v = PyLong_FromLong(st[i]);

                if (!v)
                        Py_CLEAR(list);
                else
                        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
        }
        PyMem_Free(st);
        return list;
}

/* failed_blocks(): a bytearray of the uint64 local block ids of a finished batch's failures. */
static PyObject *task_failed_blocks(TaskObject *self, PyObject *unused)
{
        char detail[KVDPY_DETAIL_MAX] = "";
        PyObject *ret;
        size_t n = 0, got = 0;
        int r;

        Py_BEGIN_ALLOW_THREADS(void) pthread_rwlock_rdlock(&self->owner->lock);
        (void)kvd_task_wait(self->task, 0);
        r = kvd_task_failed_blocks(self->task, NULL, 0, &n);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(self->c));
        (void)pthread_rwlock_unlock(&self->owner->lock);
        Py_END_ALLOW_THREADS

                if (r != KVD_OK) return kvdpy_raise(r, detail);
        if (n > (size_t)PY_SSIZE_T_MAX / sizeof(uint64_t))
                return PyErr_NoMemory();
        ret = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(uint64_t)));
        if (!ret || n == 0)
                return ret;
        /* The task is finished: its failed blocks no longer change. */
        r = kvd_task_failed_blocks(self->task, (uint64_t *)(void *)PyByteArray_AS_STRING(ret), n,
                                   &got);
        if (r != KVD_OK || got != n) {
                Py_DECREF(ret);
                return kvdpy_raise(r != KVD_OK ? r : KVD_E_FAILED, kvd_last_error(self->c));
        }
        return ret;
}

static PyMethodDef task_methods[] = {
        {"wait", (PyCFunction)(void (*)(void))task_wait, METH_VARARGS | METH_KEYWORDS,
         "wait(timeout_ms=-1)\n--\n\n"
         "Waits up to timeout_ms (-1: until the transfer's own deadline) and returns\n"
         "(status, detail): KVD_OK, the transfer's failure (KVD_E_TIMEOUT: past its own\n"
         "deadline), or KVD_E_IN_PROGRESS while it runs."},
        {"cancel", (PyCFunction)task_cancel, METH_NOARGS,
         "cancel()\n--\n\nStops the transfer and returns (status, detail) once nothing more of\n"
         "it can land: KVD_E_CANCELLED, or how it ended had it ended first."},
        {"fileno", (PyCFunction)task_fileno, METH_NOARGS,
         "fileno()\n--\n\nAn fd that polls readable when wait(0) can make progress or the\n"
         "task is done (the task's; closed with it)."},
        {"entry_statuses", (PyCFunction)task_entry_statuses, METH_NOARGS,
         "entry_statuses()\n--\n\nA finished batch's status per entry "
         "(kvd_task_entry_status())."},
        {"failed_blocks", (PyCFunction)task_failed_blocks, METH_NOARGS,
         "failed_blocks()\n--\n\nA finished batch's failed local block ids, as a bytearray "
         "of\nnative uint64 (kvd_task_failed_blocks())."},
        {"done", (PyCFunction)task_done, METH_NOARGS,
         "done()\n--\n\nWhether the transfer has its final status; does not wait."},
        {},
};

PyTypeObject TaskType = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvdist._kvdist.Task",
        .tp_doc = "An asynchronous transfer (kvd_task).",
        .tp_basicsize = sizeof(TaskObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor)task_dealloc,
        .tp_methods = task_methods,
};
