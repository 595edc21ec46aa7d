/* SPDX-License-Identifier: MIT */
/*
 * kvdist._kvdist.Memory: kvd_mem_alloc() memory as a Python buffer. numpy.frombuffer() and
 * torch.frombuffer() view it without a copy and hold the object, so the memory lives as long as
 * the last array over it. It is freed then: kvd_mem_free() while the client is attached (or later,
 * when a cache still lies in it), munmap() once the client was finalized (which left the mapping
 * to us: kvd_client_finalize_keep_memory()).
 */
#include "client-lib/python/ext/kvdistpy.h"

#include <sys/mman.h>

PyObject *memory_new(ClientObject *owner, void *ptr, size_t size)
{
        MemoryObject *self;

        self = PyObject_New(MemoryObject, &MemoryType);
        if (!self)
                return NULL;
        self->owner = (ClientObject *)Py_NewRef((PyObject *)owner);
        self->ptr = ptr;
        self->size = size;
        return (PyObject *)self;
}

static void memory_dealloc(MemoryObject *self)
{
        ClientObject *owner = self->owner;
        kvd_client *c;
        Call k;

        c = call_begin(&k, owner);
        if (!c)
                (void)munmap(self->ptr, self->size);
        else if (kvd_mem_free(c, self->ptr) != KVD_OK)
                /* BUSY: a registered cache lies in it; the daemon may still write into it. */
                client_add_orphan(owner, self->ptr, self->size);
        (void)call_end(&k, KVD_OK);
        Py_DECREF(owner);
        Py_TYPE(self)->tp_free((PyObject *)self);
}

static int memory_getbuffer(MemoryObject *self, Py_buffer *view, int flags)
{
        return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, (Py_ssize_t)self->size, 0,
                                 flags);
}

static PyObject *memory_get_address(MemoryObject *self, void *closure)
{
        return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *memory_get_size(MemoryObject *self, void *closure)
{
        return PyLong_FromSize_t(self->size);
}

static PyObject *memory_repr(MemoryObject *self)
{
        return PyUnicode_FromFormat("<kvdist._kvdist.Memory %zu bytes at %p>", self->size,
                                    self->ptr);
}

static PyGetSetDef memory_getset[] = {
        {"address", (getter)memory_get_address, NULL, "Where the memory starts (an int).", NULL},
        {"size", (getter)memory_get_size, NULL, "Its size in bytes (a multiple of the page).",
         NULL},
        {},
};

static PyBufferProcs memory_as_buffer = {
        .bf_getbuffer = (getbufferproc)memory_getbuffer,
};

PyTypeObject MemoryType = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvdist._kvdist.Memory",
        .tp_doc = "Memory from kvd_mem_alloc() (Client.mem_alloc()), shared with kvdistd; a "
                  "writable buffer.",
        .tp_basicsize = sizeof(MemoryObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor)memory_dealloc,
        .tp_repr = (reprfunc)memory_repr,
        .tp_as_buffer = &memory_as_buffer,
        .tp_getset = memory_getset,
};
