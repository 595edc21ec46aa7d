/* SPDX-License-Identifier: MIT */
/* kvdist._kvdist module: statuses and exceptions, read-only daemon queries, the module itself. */
#include "client-lib/python/ext/kvdistpy.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Module-wide for the process's lifetime: the extension is loaded once and never unloaded. */
static PyObject *error_type;    /* kvdist._kvdist.Error */
static PyObject *error_factory; /* the package's LLMException._from_kvd */

kvd_client *call_begin(Call *k, ClientObject *self)
{
        k->self = self;
        k->detail[0] = '\0';
        k->ts = PyEval_SaveThread();
        (void)pthread_rwlock_rdlock(&self->lock);
        k->c = self->client;
        return k->c;
}

int call_end(Call *k, int r)
{
        if (!k->c) {
                r = KVDPY_FINALIZED;
                (void)snprintf(k->detail, sizeof(k->detail), "finalize() was called");
        } else if (r != KVD_OK)
                /* Per thread and client in libkvdist: read it before another call can run here. */
                (void)snprintf(k->detail, sizeof(k->detail), "%s", kvd_last_error(k->c));
        (void)pthread_rwlock_unlock(&k->self->lock);
        PyEval_RestoreThread(k->ts);
        return r;
}

PyObject *kvdpy_str(const char *s)
{
        return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

PyObject *kvdpy_raise(int status, const char *detail)
{
        PyObject *msg, *exc;

        msg = kvdpy_str(detail && detail[0] ? detail : kvd_strerror(status));
        if (!msg)
                return NULL;
        if (!error_factory) {
                exc = Py_BuildValue("(iN)", status, msg);
                if (exc) {
                        PyErr_SetObject(error_type, exc);
                        Py_DECREF(exc);
                }
                return NULL;
        }
        exc = PyObject_CallFunction(error_factory, "iN", status, msg);
        if (!exc)
                return NULL;
        if (!PyExceptionInstance_Check(exc)) {
                PyErr_Format(PyExc_TypeError, "the error factory returned %.100s, not an exception",
                             Py_TYPE(exc)->tp_name);
                Py_DECREF(exc);
                return NULL;
        }
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return NULL;
}

static PyObject *module_set_error_factory(PyObject *module, PyObject *factory)
{
        if (factory != Py_None && !PyCallable_Check(factory)) {
                PyErr_SetString(PyExc_TypeError, "the error factory must be callable or None");
                return NULL;
        }
        Py_XSETREF(error_factory, factory == Py_None ? NULL : Py_NewRef(factory));
        Py_RETURN_NONE;
}

static PyObject *module_strerror(PyObject *module, PyObject *arg)
{
        int64_t status;

        if (i64_from_object(arg, INT32_MIN, INT32_MAX, &status, "status") < 0)
                return NULL;
        return PyUnicode_FromString(kvd_strerror((int)status));
}

/* {status: name} for KVD_OK and every KVD_E_* status this libkvdist knows. */
static PyObject *module_statuses(PyObject *module, PyObject *unused)
{
        PyObject *d;

        d = PyDict_New();
        if (!d)
                return NULL;
        for (int s = KVD_OK; s >= _KVD_E_MIN; s--) {
                PyObject *k = PyLong_FromLong(s), *v = PyUnicode_FromString(kvd_strerror(s));
                int r = k && v ? PyDict_SetItem(d, k, v) : -1;

                Py_XDECREF(k);
                Py_XDECREF(v);
                if (r < 0) {
                        Py_DECREF(d);
                        return NULL;
                }
        }
        return d;
}

/* kvd_daemon_status() or kvd_daemon_metrics() over a read-only connection to @socket_path. */
static PyObject *daemon_query(PyObject *args, PyObject *kwds, bool metrics)
{
        static char *kwlist[] = {"socket_path", NULL};
        PyObject *path = Py_None, *ret;
        _cleanup_(strpool_done) StrPool strs = {};
        kvd_option opt = {"socket_path", NULL};
        char detail[KVDPY_DETAIL_MAX] = "";
        kvd_client *c = NULL;
        char *text = NULL;
        int r;

        if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &path))
                return NULL;
        opt.value = strpool_add(&strs, path, true, "socket_path");
        if (!opt.value && PyErr_Occurred())
                return NULL;

        Py_BEGIN_ALLOW_THREADS r = kvd_client_connect(&opt, opt.value ? 1 : 0, &c);
        if (r == KVD_OK)
                r = metrics ? kvd_daemon_metrics(c, &text) : kvd_daemon_status(c, &text);
        if (r != KVD_OK)
                (void)snprintf(detail, sizeof(detail), "%s", kvd_last_error(c));
        (void)kvd_client_finalize(c);
        Py_END_ALLOW_THREADS

                if (r != KVD_OK) return kvdpy_raise(r, detail);
        ret = kvdpy_str(text);
        free(text);
        return ret;
}

static PyObject *module_daemon_status(PyObject *module, PyObject *args, PyObject *kwds)
{
        return daemon_query(args, kwds, false);
}

static PyObject *module_daemon_metrics(PyObject *module, PyObject *args, PyObject *kwds)
{
        return daemon_query(args, kwds, true);
}

static PyMethodDef module_methods[] = {
        {"_set_error_factory", module_set_error_factory, METH_O,
         "_set_error_factory(factory)\n--\n\n"
         "factory(status, detail) builds the exception every failure raises."},
        {"strerror", module_strerror, METH_O,
         "strerror(status)\n--\n\nThe name of a KVD_E_* status (\"KVD_E_TIMEOUT\")."},
        {"statuses", module_statuses, METH_NOARGS,
         "statuses()\n--\n\n{status: name} for KVD_OK and every KVD_E_* status."},
        {"daemon_status", (PyCFunction)(void (*)(void))module_daemon_status,
         METH_VARARGS | METH_KEYWORDS,
         "daemon_status(socket_path=None)\n--\n\n"
         "The daemon's state as a JSON document (kvdistctl status --json)."},
        {"daemon_metrics", (PyCFunction)(void (*)(void))module_daemon_metrics,
         METH_VARARGS | METH_KEYWORDS,
         "daemon_metrics(socket_path=None)\n--\n\n"
         "The daemon's metrics in the Prometheus text format."},
        {},
};

static struct PyModuleDef kvdist_module = {
        PyModuleDef_HEAD_INIT,
        .m_name = "kvdist._kvdist",
        .m_doc = "The kvdist client library (libkvdist) for Python; use the kvdist package.",
        .m_size = -1,
        .m_methods = module_methods,
};

static int add_constants(PyObject *m)
{
        static const struct {
                const char *name;
                long value;
        } ints[] = {
                {"FINALIZED", KVDPY_FINALIZED},   {"MAX_DIMS", KVD_MAX_DIMS},
                {"MAX_TENSORS", KVD_MAX_TENSORS}, {"MAX_LINK_CLUSTERS", KVD_MAX_LINK_CLUSTERS},
                {"NOTIFY_MAX", KVD_NOTIFY_MAX},   {"COMM_NAME_MAX", KVD_COMM_NAME_MAX},
                {"KEY_REQ", KVD_KEY_REQ},         {"KEY_ID_INDEX", KVD_KEY_ID_INDEX},
                {"KEY_BLOCKS", KVD_KEY_BLOCKS},   {"REMOTE_DEFAULT", KVD_REMOTE_DEFAULT},
                {"REMOTE_YES", KVD_REMOTE_YES},   {"REMOTE_NO", KVD_REMOTE_NO},
        };

        PyObject *id_none;
        int r;

        for (size_t i = 0; i < ARRAY_SIZE(ints); i++)
                if (PyModule_AddIntConstant(m, ints[i].name, ints[i].value) < 0)
                        return -1;
        if (PyModule_AddIntConstant(m, "PAGE_SIZE", sysconf(_SC_PAGESIZE)) < 0)
                return -1;
        id_none = PyLong_FromUnsignedLongLong(KVD_ID_NONE);
        if (!id_none)
                return -1;
        r = PyModule_AddObjectRef(m, "ID_NONE", id_none);
        Py_DECREF(id_none);
        return r;
}

PyMODINIT_FUNC PyInit__kvdist(void);

PyMODINIT_FUNC PyInit__kvdist(void)
{
        PyObject *m;

        if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&MemoryType) < 0 ||
            PyType_Ready(&TaskType) < 0)
                return NULL;
        m = PyModule_Create(&kvdist_module);
        if (!m)
                return NULL;
        if (!error_type)
                error_type = PyErr_NewExceptionWithDoc(
                        "kvdist._kvdist.Error",
                        "A libkvdist failure: args are (status, detail). The kvdist package "
                        "raises LLMException instead.",
                        NULL, NULL);
        if (!error_type || PyModule_AddObjectRef(m, "Error", error_type) < 0 ||
            PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
            PyModule_AddObjectRef(m, "Memory", (PyObject *)&MemoryType) < 0 ||
            PyModule_AddObjectRef(m, "Task", (PyObject *)&TaskType) < 0 || add_constants(m) < 0) {
                Py_DECREF(m);
                return NULL;
        }
        return m;
}
