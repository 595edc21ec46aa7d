/* SPDX-License-Identifier: MIT */
/* kvdist._kvdist arguments: Python objects into the structures libkvdist takes. */
#include "client-lib/python/ext/kvdistpy.h"

#include <inttypes.h>
#include <string.h>

/*
 * @o as a Python int: anything with __index__ (numpy integers too) but not floats. A new
 * reference, or NULL with a TypeError naming @what.
 */
static PyObject *index_of(PyObject *o, const char *what)
{
        PyObject *i;

        i = PyNumber_Index(o);
        if (!i && PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                             Py_TYPE(o)->tp_name);
        }
        return i;
}

int i64_from_object(PyObject *o, int64_t min, int64_t max, int64_t *ret, const char *what)
{
        PyObject *i;
        long long v;
        int overflow;

        i = index_of(o, what);
        if (!i)
                return -1;
        v = PyLong_AsLongLongAndOverflow(i, &overflow);
        Py_DECREF(i);
        if (v == -1 && PyErr_Occurred())
                return -1;
        if (overflow != 0 || v < min || v > max) {
                PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld]", what, (long long)min,
                             (long long)max);
                return -1;
        }
        *ret = v;
        return 0;
}

int u64_from_object(PyObject *o, uint64_t *ret, const char *what)
{
        unsigned long long v;
        PyObject *i;

        i = index_of(o, what);
        if (!i)
                return -1;
        v = PyLong_AsUnsignedLongLong(i);
        Py_DECREF(i);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
                if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                        PyErr_Clear();
                        PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**64)", what);
                }
                return -1;
        }
        *ret = v;
        return 0;
}

/*
 * Converts each element of sequence @o with @convert(element, &(*items)[i * size], userdata)
 * into a new PyMem array *@items of *@ret_n items of @size bytes (zeroed; NULL for none);
 * @what names the sequence in a TypeError. 0, or -1 with an error set: the caller frees *@items
 * either way.
 */
static int items_from_sequence(PyObject *o, const char *what, size_t size, void **items,
                               size_t *ret_n,
                               int (*convert)(PyObject *e, void *item, void *userdata),
                               void *userdata)
{
        PyObject *seq;
        Py_ssize_t n;
        int r = 0;

        seq = PySequence_Fast(o, what);
        if (!seq)
                return -1;
        n = PySequence_Fast_GET_SIZE(seq);
        *ret_n = (size_t)n;
        if (n > 0) {
                *items = PyMem_Calloc((size_t)n, size);
                if (!*items) {
                        PyErr_NoMemory();
                        r = -1;
                }
        }
        for (Py_ssize_t i = 0; r == 0 && i < n; i++)
                r = convert(PySequence_Fast_GET_ITEM(seq, i), (char *)*items + (size_t)i * size,
                            userdata);
        Py_DECREF(seq);
        return r;
}

/* --- block ids -------------------------------------------------------------------------- */

/* Reads element @i of a one-dimensional integer buffer of struct format @fmt into *@ret. */
static int buffer_item(const Py_buffer *v, char fmt, Py_ssize_t i, uint64_t *ret)
{
        const char *p = (const char *)v->buf + i * (v->strides ? v->strides[0] : v->itemsize);
        int64_t s;

        switch (fmt) {
        case 'b':
                s = *(const signed char *)p;
                break;
        case 'h':
                s = *(const short *)p;
                break;
        case 'i':
                s = *(const int *)p;
                break;
        case 'l':
                s = *(const long *)p;
                break;
        case 'q':
                s = *(const long long *)p;
                break;
        case 'n':
                s = *(const Py_ssize_t *)p;
                break;
        case 'B':
                *ret = *(const unsigned char *)p;
                return 0;
        case 'H':
                *ret = *(const unsigned short *)p;
                return 0;
        case 'I':
                *ret = *(const unsigned int *)p;
                return 0;
        case 'L':
                *ret = *(const unsigned long *)p;
                return 0;
        case 'Q':
                *ret = *(const unsigned long long *)p;
                return 0;
        case 'N':
                *ret = *(const size_t *)p;
                return 0;
        default:
                return -1;
        }
        if (s < 0) {
                PyErr_Format(PyExc_ValueError, "block ids must not be negative (item %zd is %lld)",
                             i, (long long)s);
                return -1;
        }
        *ret = (uint64_t)s;
        return 0;
}

/* The struct format character of a native integer buffer, or 0. */
static char buffer_int_format(const Py_buffer *v)
{
        const char *f = v->format ? v->format : "B";

        if (f[0] == '@' || f[0] == '=')
                f++;
        if (!f[0] || f[1] || !strchr("bhilqnBHILQN", f[0]))
                return 0;
        return f[0];
}

static int blocks_from_buffer(PyObject *o, BlockList *b)
{
        Py_buffer *v = &b->view;
        char fmt;

        if (PyObject_GetBuffer(o, v, PyBUF_FORMAT | PyBUF_STRIDES) < 0)
                return -1;
        b->has_view = true;
        fmt = buffer_int_format(v);
        if (v->ndim != 1 || fmt == 0) {
                PyErr_Format(PyExc_TypeError,
                             "block ids must be a one-dimensional buffer of integers, not %d "
                             "dimensions of format '%s'",
                             v->ndim, v->format ? v->format : "B");
                return -1;
        }
        b->n = (size_t)v->shape[0];
        if (b->n == 0)
                return 0;

        /* 8-byte integers laid out one after the other are passed as they are. */
        if (v->itemsize == 8 && (!v->strides || v->strides[0] == 8) && strchr("lqnLQN", fmt)) {
                const uint64_t *ids = v->buf;

                if (strchr("lqn", fmt))
                        for (size_t i = 0; i < b->n; i++)
                                if ((int64_t)ids[i] < 0) {
                                        PyErr_Format(PyExc_ValueError,
                                                     "block ids must not be negative (item %zu "
                                                     "is %lld)",
                                                     i, (long long)(int64_t)ids[i]);
                                        return -1;
                                }
                b->ids = ids;
                return 0;
        }

        b->owned = PyMem_New(uint64_t, b->n);
        if (!b->owned) {
                PyErr_NoMemory();
                return -1;
        }
        for (size_t i = 0; i < b->n; i++)
                if (buffer_item(v, fmt, (Py_ssize_t)i, &b->owned[i]) < 0)
                        return -1;
        b->ids = b->owned;
        return 0;
}

static int block_id_from_object(PyObject *e, void *item, void *userdata)
{
        return u64_from_object(e, item, "a block id");
}

int blocks_from_object(PyObject *o, BlockList *b)
{
        int r;

        *b = (BlockList){};
        if (o == Py_None)
                return 0;
        if (PyObject_CheckBuffer(o))
                return blocks_from_buffer(o, b);
        r = items_from_sequence(o, "block ids must be a sequence of ints or a buffer of integers",
                                sizeof(uint64_t), (void **)&b->owned, &b->n, block_id_from_object,
                                NULL);
        b->ids = b->owned;
        return r;
}

void blocks_done(BlockList *b)
{
        if (b->has_view)
                PyBuffer_Release(&b->view);
        PyMem_Free(b->owned);
        *b = (BlockList){};
}

/* --- caches and keys -------------------------------------------------------------------- */

static int dim_from_object(PyObject *e, void *item, void *userdata)
{
        return i64_from_object(e, INT64_MIN, INT64_MAX, item, "a shape dimension");
}

int desc_from_object(PyObject *o, kvd_cache_desc *d)
{
        int64_t num_tensors, dtype, *dims = NULL;
        PyObject *shape;
        size_t n = 0;

        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 3) {
                PyErr_SetString(PyExc_TypeError,
                                "a cache description is a tuple (num_tensors, shape, data_type)");
                return -1;
        }
        *d = (kvd_cache_desc){};
        if (i64_from_object(PyTuple_GET_ITEM(o, 0), 0, UINT32_MAX, &num_tensors, "num_tensors") <
                    0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 2), 0, INT32_MAX, &dtype, "data_type") < 0)
                return -1;
        shape = PyTuple_GET_ITEM(o, 1);
        if (items_from_sequence(shape, "shape must be a sequence of ints", sizeof(int64_t),
                                (void **)&dims, &n, dim_from_object, NULL) < 0) {
                PyMem_Free(dims);
                return -1;
        }
        if (n < 1 || n > KVD_MAX_DIMS) {
                PyMem_Free(dims);
                PyErr_Format(PyExc_ValueError, "shape has %zu dimensions, not 1 to %d", n,
                             KVD_MAX_DIMS);
                return -1;
        }
        memcpy(d->shape, dims, n * sizeof(int64_t));
        PyMem_Free(dims);
        d->num_tensors = (uint32_t)num_tensors;
        d->n_dims = (uint32_t)n;
        d->data_type = (kvd_dtype)dtype;
        return 0;
}

int key_from_object(PyObject *o, kvd_cache_key *k)
{
        static const char *const names[] = {"key kind",  "cluster_id", "req_id",
                                            "prefix_id", "model_id",   "cache_id"};
        uint64_t v[6];
        int64_t batch_index;

        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 7) {
                PyErr_SetString(PyExc_TypeError, "a cache key is a tuple (kind, cluster_id, "
                                                 "req_id, prefix_id, model_id, cache_id, "
                                                 "batch_index)");
                return -1;
        }
        for (size_t i = 0; i < ARRAY_SIZE(v); i++)
                if (u64_from_object(PyTuple_GET_ITEM(o, (Py_ssize_t)i), &v[i], names[i]) < 0)
                        return -1;
        if (i64_from_object(PyTuple_GET_ITEM(o, 6), 0, UINT32_MAX, &batch_index, "batch_index") < 0)
                return -1;
        if (v[0] > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "key kind %llu is unknown",
                             (unsigned long long)v[0]);
                return -1;
        }
        *k = (kvd_cache_key){
                .kind = (kvd_key_kind)v[0],
                .cluster_id = v[1],
                .req_id = v[2],
                .prefix_id = v[3],
                .model_id = v[4],
                .cache_id = v[5],
                .batch_index = (uint32_t)batch_index,
        };
        return 0;
}

static int key_item(PyObject *e, void *item, void *userdata)
{
        return key_from_object(e, item);
}

int keys_from_object(PyObject *o, KeyList *l)
{
        *l = (KeyList){};
        return items_from_sequence(o, "cache keys must be a sequence", sizeof(kvd_cache_key),
                                   (void **)&l->keys, &l->n, key_item, NULL);
}

void keys_done(KeyList *l)
{
        PyMem_Free(l->keys);
        *l = (KeyList){};
}

static int addr_item(PyObject *e, void *item, void *userdata)
{
        uint64_t a;

        if (u64_from_object(e, &a, "an address") < 0)
                return -1;
        if (a > UINTPTR_MAX) {
                PyErr_SetString(PyExc_ValueError, "an address does not fit a pointer");
                return -1;
        }
        *(void **)item = (void *)(uintptr_t)a;
        return 0;
}

int addrs_from_object(PyObject *o, AddrList *l)
{
        *l = (AddrList){};
        return items_from_sequence(o, "addrs must be a sequence of addresses (ints)",
                                   sizeof(void *), (void **)&l->addrs, &l->n, addr_item, NULL);
}

void addrs_done(AddrList *l)
{
        PyMem_Free(l->addrs);
        *l = (AddrList){};
}

/* --- strings, options and clusters ------------------------------------------------------ */

const char *strpool_add(StrPool *pool, PyObject *o, bool none_ok, const char *what)
{
        const char *s;
        Py_ssize_t len;
        char **strs, *copy;

        if (o == Py_None && none_ok)
                return NULL;
        if (!PyUnicode_Check(o)) {
                PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what,
                             Py_TYPE(o)->tp_name);
                return NULL;
        }
        s = PyUnicode_AsUTF8AndSize(o, &len);
        if (!s)
                return NULL;
        if (strlen(s) != (size_t)len) {
                PyErr_Format(PyExc_ValueError, "%s contains a NUL character", what);
                return NULL;
        }
        strs = PyMem_Realloc(pool->strs, (pool->n + 1) * sizeof(char *));
        if (!strs) {
                PyErr_NoMemory();
                return NULL;
        }
        pool->strs = strs;
        copy = PyMem_Malloc((size_t)len + 1);
        if (!copy) {
                PyErr_NoMemory();
                return NULL;
        }
        memcpy(copy, s, (size_t)len + 1);
        pool->strs[pool->n++] = copy;
        return copy;
}

void strpool_done(StrPool *pool)
{
        for (size_t i = 0; i < pool->n; i++)
                PyMem_Free(pool->strs[i]);
        PyMem_Free(pool->strs);
        *pool = (StrPool){};
}

static int option_item(PyObject *pair, void *item, void *userdata)
{
        kvd_option *opt = item;
        StrPool *strs = userdata;

        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "an option is a (key, value) tuple");
                return -1;
        }
        opt->key = strpool_add(strs, PyTuple_GET_ITEM(pair, 0), false, "an option key");
        if (!opt->key)
                return -1;
        opt->value = strpool_add(strs, PyTuple_GET_ITEM(pair, 1), false, "an option value");
        return opt->value ? 0 : -1;
}

int options_from_object(PyObject *o, OptionList *l)
{
        *l = (OptionList){};
        return items_from_sequence(o, "options must be a sequence of (key, value) pairs",
                                   sizeof(kvd_option), (void **)&l->options, &l->n, option_item,
                                   &l->strs);
}

void options_done(OptionList *l)
{
        strpool_done(&l->strs);
        PyMem_Free(l->options);
        *l = (OptionList){};
}

/* An address of a cluster tuple: NULL for None, a copy for a str. 0 or -1. */
static int ip_item(PyObject *ip, StrPool *strs, const char **ret, const char *what)
{
        *ret = strpool_add(strs, ip, true, what);
        return *ret || ip == Py_None ? 0 : -1;
}

static int cluster_item(PyObject *t, void *item, void *userdata)
{
        kvd_cluster_info *info = item;
        int64_t role;

        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
                PyErr_SetString(PyExc_TypeError, "a cluster is a tuple (remote_cluster_id, role, "
                                                 "remote_ip_info, local_ip_info)");
                return -1;
        }
        if (u64_from_object(PyTuple_GET_ITEM(t, 0), &info->remote_cluster_id, "remote_cluster_id") <
                    0 ||
            i64_from_object(PyTuple_GET_ITEM(t, 1), INT32_MIN, INT32_MAX, &role, "remote_role") < 0)
                return -1;
        info->remote_role = (kvd_role)role;
        if (ip_item(PyTuple_GET_ITEM(t, 2), userdata, &info->remote_ip_info, "remote_ip_info") < 0)
                return -1;
        return ip_item(PyTuple_GET_ITEM(t, 3), userdata, &info->local_ip_info, "local_ip_info");
}

int clusters_from_object(PyObject *o, ClusterList *l)
{
        *l = (ClusterList){};
        return items_from_sequence(o, "clusters must be a sequence", sizeof(kvd_cluster_info),
                                   (void **)&l->infos, &l->n, cluster_item, &l->strs);
}

void clusters_done(ClusterList *l)
{
        strpool_done(&l->strs);
        PyMem_Free(l->infos);
        *l = (ClusterList){};
}

static int rank_item(PyObject *t, void *item, void *userdata)
{
        kvd_cluster_rank *rank = item;
        int64_t id;

        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
                PyErr_SetString(PyExc_TypeError, "a member is a (cluster_id, rank) tuple");
                return -1;
        }
        if (u64_from_object(PyTuple_GET_ITEM(t, 0), &rank->cluster_id, "a cluster id") < 0 ||
            i64_from_object(PyTuple_GET_ITEM(t, 1), 0, UINT32_MAX, &id, "a rank id") < 0)
                return -1;
        rank->rank_id = (uint32_t)id;
        return 0;
}

int ranks_from_object(PyObject *o, RankList *l)
{
        *l = (RankList){};
        return items_from_sequence(o, "cluster_rank_info must be a sequence of (cluster, rank)",
                                   sizeof(kvd_cluster_rank), (void **)&l->ranks, &l->n, rank_item,
                                   NULL);
}

void ranks_done(RankList *l)
{
        PyMem_Free(l->ranks);
        *l = (RankList){};
}

/* --- transfer options ------------------------------------------------------------------- */

static const char *const layer_names[] = {"src_layers first", "src_layers last", "dst_layers first",
                                          "dst_layers last"};

/*
 * Four ints (src_first, src_last, dst_first, dst_last) at @items into @src and @dst: (-1, -1) is
 * every layer (a range of count 0). 0 or -1 with an error set.
 */
static int layers_from_items(PyObject *const *items, kvd_layer_range *src, kvd_layer_range *dst)
{
        int64_t v[4];

        for (size_t i = 0; i < ARRAY_SIZE(v); i++)
                if (i64_from_object(items[i], INT32_MIN, INT32_MAX, &v[i], layer_names[i]) < 0)
                        return -1;
        for (size_t i = 0; i < ARRAY_SIZE(v); i += 2)
                if (!(v[i] == -1 && v[i + 1] == -1) && (v[i] < 0 || v[i + 1] < v[i])) {
                        PyErr_Format(PyExc_ValueError,
                                     "%s %" PRIi64 " and %s %" PRIi64
                                     " are not a range of layers (or -1, -1 for every layer)",
                                     layer_names[i], v[i], layer_names[i + 1], v[i + 1]);
                        return -1;
                }
        *src = v[0] < 0 ? (kvd_layer_range){}
                        : (kvd_layer_range){(uint32_t)v[0], (uint32_t)(v[1] - v[0] + 1)};
        *dst = v[2] < 0 ? (kvd_layer_range){}
                        : (kvd_layer_range){(uint32_t)v[2], (uint32_t)(v[3] - v[2] + 1)};
        return 0;
}

/* A slice of each block: None (the whole block) or (offset, length). 0 or -1. */
static int slice_from_object(PyObject *o, kvd_slice *ret, const char *what)
{
        *ret = (kvd_slice){};
        if (o == Py_None)
                return 0;
        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
                PyErr_Format(PyExc_TypeError, "%s is a tuple (offset, length) or None, not %.100s",
                             what, Py_TYPE(o)->tp_name);
                return -1;
        }
        if (u64_from_object(PyTuple_GET_ITEM(o, 0), &ret->offset, what) < 0 ||
            u64_from_object(PyTuple_GET_ITEM(o, 1), &ret->length, what) < 0)
                return -1;
        return 0;
}

int opts_from_object(PyObject *o, TransferOpts *t)
{
        PyObject *notify;
        Py_buffer view;
        int64_t tpl, timeout;

        *t = (TransferOpts){.opts = KVD_TRANSFER_OPTS_INIT};
        if (o == Py_None)
                return 0;
        if (!PyTuple_Check(o) ||
            (PyTuple_GET_SIZE(o) != 7 && PyTuple_GET_SIZE(o) != 8 && PyTuple_GET_SIZE(o) != 10)) {
                PyErr_SetString(PyExc_TypeError,
                                "transfer options are a tuple (src_first, src_last, dst_first, "
                                "dst_last, tensor_num_per_layer, timeout_ms, notify[, "
                                "remote_info[, src_slice, dst_slice]])");
                return -1;
        }
        if (layers_from_items(&PyTuple_GET_ITEM(o, 0), &t->opts.src_layers, &t->opts.dst_layers) <
                    0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 4), 0, UINT32_MAX, &tpl, "tensor_num_per_layer") <
                    0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 5), INT32_MIN, INT32_MAX, &timeout, "timeout_ms") <
                    0)
                return -1;
        t->opts.tensor_num_per_layer = (uint32_t)tpl;
        t->opts.timeout_ms = (int32_t)timeout;
        t->given = true;
        if (PyTuple_GET_SIZE(o) == 10 &&
            (slice_from_object(PyTuple_GET_ITEM(o, 8), &t->opts.src_slice, "src_slice") < 0 ||
             slice_from_object(PyTuple_GET_ITEM(o, 9), &t->opts.dst_slice, "dst_slice") < 0))
                return -1;
        if (PyTuple_GET_SIZE(o) >= 8) {
                PyObject *info = PyTuple_GET_ITEM(o, 7);

                t->opts.remote_info = strpool_add(&t->strs, info, true, "remote_info");
                if (!t->opts.remote_info && info != Py_None)
                        return -1;
        }

        notify = PyTuple_GET_ITEM(o, 6);
        if (notify == Py_None)
                return 0;
        if (PyObject_GetBuffer(notify, &view, PyBUF_SIMPLE) < 0)
                return -1;
        /* Copied whole: libkvdist judges the length (and says what the limit is). */
        if (view.len > 0) {
                t->notify = PyMem_Malloc((size_t)view.len);
                if (!t->notify) {
                        PyBuffer_Release(&view);
                        PyErr_NoMemory();
                        return -1;
                }
                memcpy(t->notify, view.buf, (size_t)view.len);
        }
        t->opts.notify = t->notify;
        t->opts.notify_len = (size_t)view.len;
        PyBuffer_Release(&view);
        return 0;
}

void opts_done(TransferOpts *t)
{
        PyMem_Free(t->notify);
        strpool_done(&t->strs);
        *t = (TransferOpts){};
}

/* --- batches ---------------------------------------------------------------------------- */

#define BATCH_ENTRY_ITEMS 15

/* Entry tuple @o into entry @i of @l; the error names the entry. 0 or -1. */
static int batch_entry(PyObject *o, BatchList *l, size_t i)
{
        kvd_batch_entry *e = &l->entries[i];
        int64_t kind, index, size, tpl;
        PyObject *info;

        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != BATCH_ENTRY_ITEMS) {
                PyErr_Format(PyExc_TypeError,
                             "a batch entry is a tuple (kind, key, cache_id, src_blocks, "
                             "dst_blocks, batch_index, size, src_first, src_last, dst_first, "
                             "dst_last, tensor_num_per_layer, remote_info, src_slice, "
                             "dst_slice), not %.100s",
                             Py_TYPE(o)->tp_name);
                return -1;
        }
        if (i64_from_object(PyTuple_GET_ITEM(o, 0), INT32_MIN, INT32_MAX, &kind, "kind") < 0 ||
            key_from_object(PyTuple_GET_ITEM(o, 1), &e->key) < 0 ||
            u64_from_object(PyTuple_GET_ITEM(o, 2), &e->cache_id, "cache_id") < 0 ||
            blocks_from_object(PyTuple_GET_ITEM(o, 3), &l->blocks[2 * i]) < 0 ||
            blocks_from_object(PyTuple_GET_ITEM(o, 4), &l->blocks[2 * i + 1]) < 0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 5), 0, UINT32_MAX, &index, "batch_index") < 0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 6), INT64_MIN, INT64_MAX, &size, "size") < 0 ||
            layers_from_items(&PyTuple_GET_ITEM(o, 7), &e->src_layers, &e->dst_layers) < 0 ||
            i64_from_object(PyTuple_GET_ITEM(o, 11), 0, UINT32_MAX, &tpl, "tensor_num_per_layer") <
                    0 ||
            slice_from_object(PyTuple_GET_ITEM(o, 13), &e->src_slice, "src_slice") < 0 ||
            slice_from_object(PyTuple_GET_ITEM(o, 14), &e->dst_slice, "dst_slice") < 0)
                return -1;
        info = PyTuple_GET_ITEM(o, 12);
        e->remote_info = strpool_add(&l->strs, info, true, "remote_info");
        if (!e->remote_info && info != Py_None)
                return -1;
        /* libkvdist judges the kind (and names the entry): only the C type is checked here. */
        e->kind = (kvd_transfer_kind)kind;
        e->src_blocks = l->blocks[2 * i].ids;
        e->n_src = l->blocks[2 * i].n;
        e->dst_blocks = l->blocks[2 * i + 1].ids;
        e->n_dst = l->blocks[2 * i + 1].n;
        e->batch_index = (uint32_t)index;
        e->size = size;
        e->tensor_num_per_layer = (uint32_t)tpl;
        return 0;
}

/* Prefixes the message of the error set with "entries[@i]: ". */
static void batch_entry_error(size_t i)
{
        PyObject *type, *value, *tb, *msg;

        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        msg = value ? PyObject_Str(value) : NULL;
        if (!msg) {
                PyErr_Restore(type, value, tb);
                return;
        }
        PyErr_Format(type, "entries[%zu]: %U", i, msg);
        Py_DECREF(msg);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
}

int batch_from_object(PyObject *o, BatchList *l)
{
        PyObject *seq;
        Py_ssize_t n;
        int r = 0;

        *l = (BatchList){};
        seq = PySequence_Fast(o, "entries must be a sequence of batch entries");
        if (!seq)
                return -1;
        n = PySequence_Fast_GET_SIZE(seq);
        if (n > 0) {
                l->entries = PyMem_Calloc((size_t)n, sizeof(kvd_batch_entry));
                l->blocks = PyMem_Calloc(2 * (size_t)n, sizeof(BlockList));
                if (!l->entries || !l->blocks) {
                        Py_DECREF(seq);
                        PyErr_NoMemory();
                        return -1;
                }
        }
        for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
                /* Counted as it goes: batch_done() releases the buffers taken so far. */
                l->n = (size_t)i + 1;
                r = batch_entry(PySequence_Fast_GET_ITEM(seq, i), l, (size_t)i);
                if (r < 0)
                        batch_entry_error((size_t)i);
        }
        Py_DECREF(seq);
        return r;
}

void batch_done(BatchList *l)
{
        for (size_t i = 0; l->blocks && i < 2 * l->n; i++)
                blocks_done(&l->blocks[i]);
        PyMem_Free(l->blocks);
        PyMem_Free(l->entries);
        strpool_done(&l->strs);
        *l = (BatchList){};
}
