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
        transport_job_done(userdata, status);
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

/*
 * On a copy thread: share @part of @n_parts of the job's segments, laid by the job's own prepare
 * step, then their copies. The other shares may be laid at the same time on other threads.
 */
static int shm_prepare(void *userdata, size_t part, size_t n_parts, EngineCopy **ret_copies,
                       size_t *ret_n)
{
        const TransportJob *job = userdata;
        TransportJob share;
        TransportPart p;
        int r;

        r = job->prepare(job, part, n_parts, &p);
        if (r < 0)
                return r;
        /* the share as a job of its own, for the walk over its spans; the job itself is the
         * loop's meanwhile (it sets job->priv) */
        share = (TransportJob){
                .dir = job->dir,
                .segs = p.segs,
                .n_segs = p.n_segs,
                .local_step = p.local_step,
                .remote_step = p.remote_step,
        };
        return shm_copies(&share, ret_copies, ret_n);
}

static int shm_submit(Transport *t, TransportJob *job)
{
        EngineCopy *copies;
        EngineTask *task;
        size_t n;
        int r;

        if (job->prepare)
                r = engine_submit_prepare(t->set->engine, shm_prepare, job, job->prepare_parts,
                                          shm_on_done, job, &task);
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
