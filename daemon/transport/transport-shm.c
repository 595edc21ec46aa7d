/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory transport: both ends of the link live on this daemon, so a job is a set of
 * memcpy()s between memory the daemon has mapped, run on the copy engine's threads. A READ
 * copies each span's remote address into its local one, a WRITE the other way.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/macro.h"

static void shm_on_done(EngineTask *task, int status, void *userdata)
{
        TransportJob *job = userdata;

        /* a failed prepare step left its errno in job->error (the engine's lock ordered it) */
        transport_job_done(job, status < 0 && job->error < 0 ? job->error : status);
}

/* The engine's copies of @job's segments, one per span, malloc()ed; their number in *@ret_n. */
static int shm_copies(const TransportJob *job, EngineCopy **ret, size_t *ret_n)
{
        EngineCopy *copies;
        TransportSpan sp;
        size_t n, k = 0;
        int r;

        r = transport_job_spans(job, &n);
        if (r < 0)
                return -ENOMEM;
        /* every entry is written below; the engine takes the array */
        copies = malloc((n ? n : 1) * sizeof(*copies));
        if (!copies)
                return -ENOMEM;
        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);) {
                void *other = (void *)(uintptr_t)sp.remote;

                copies[k++] = (EngineCopy){
                        .dst = job->dir == TRANSPORT_READ ? (void *)sp.local : other,
                        .src = job->dir == TRANSPORT_READ ? other : (void *)sp.local,
                        .len = sp.len,
                };
        }
        *ret = copies;
        *ret_n = n;
        return 0;
}

/* On a copy thread: the job's own prepare step, then its copies. */
static int shm_prepare(void *userdata, EngineCopy **ret_copies, size_t *ret_n)
{
        TransportJob *job = userdata;
        int r;

        r = job->prepare(job);
        if (r < 0) {
                job->error = r;
                return r;
        }
        return shm_copies(job, ret_copies, ret_n);
}

static int shm_submit(Transport *t, TransportJob *job)
{
        EngineCopy *copies;
        EngineTask *task;
        size_t n;
        int r;

        if (job->prepare)
                r = engine_submit_prepare(t->set->engine, shm_prepare, job, shm_on_done, job,
                                          &task);
        else {
                r = shm_copies(job, &copies, &n);
                if (r < 0)
                        return r;
                r = engine_submit_take(t->set->engine, copies, n, 0, shm_on_done, job, &task);
        }
        if (r < 0)
                return r;
        job->priv = task;
        return 0;
}

static void shm_cancel(Transport *t, TransportJob *job)
{
        if (job->priv)
                engine_cancel(job->priv);
}

static int shm_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        *ret = job->priv ? engine_task_bytes_done(job->priv) : 0;
        return 0;
}

static const transport_ops shm_ops = {
        .name = "shm",
        .caps = {.mapped_only = true, .max_segment = TRANSPORT_SEGMENT_MAX},
        .submit = shm_submit,
        .prepares = true,
        .cancel = shm_cancel,
        .progress = shm_progress,
};

int transport_shm_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &shm_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
