/* SPDX-License-Identifier: MIT */
/*
 * One-sided transport: the ops table of jobs over RDMA. By the time a job is submitted both
 * daemons agreed on its plan and the peer named its memory's addresses and remote keys; this
 * cuts the segments to what a work request can carry and hands them to the link's RDMA endpoint
 * (the job's channel) as one job of READs (pull) or WRITEs (push). Built with or without
 * libibverbs: without, the endpoint calls report -EOPNOTSUPP and no link ever chooses this
 * transport.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/rdma.h"
#include "daemon/transport/transport.h"
#include "common/macro.h"

/* A running job: the endpoint borrows its segments until the job's callback. */
typedef struct OnesidedJob {
        RdmaJob *job;
        size_t n_segs;
        RdmaSegment segs[];
} OnesidedJob;

static void onesided_on_done(void *userdata, int status)
{
        TransportJob *job = userdata;

        free(job->priv);
        transport_job_done(job, status);
}

static int onesided_submit(Transport *t, TransportJob *job)
{
        OnesidedJob *oj;
        size_t n = 0;
        int r;

        if (!job->channel || !job->segs)
                return -ENOTCONN;
        for (size_t i = 0; i < job->n_segs; i++)
                n += (job->segs[i].len + RDMA_SEGMENT_MAX - 1) / RDMA_SEGMENT_MAX;
        oj = calloc(1, sizeof(*oj) + MAX(n, (size_t)1) * sizeof(oj->segs[0]));
        if (!oj)
                return -ENOMEM;
        for (size_t i = 0; i < job->n_segs; i++) {
                const TransportSegment *s = &job->segs[i];

                for (uint64_t done = 0; done < s->len;) {
                        uint32_t len = (uint32_t)MIN(s->len - done, (uint64_t)RDMA_SEGMENT_MAX);

                        oj->segs[oj->n_segs++] = (RdmaSegment){
                                .local_addr = (uint64_t)(uintptr_t)s->local + done,
                                .lkey = s->lkey,
                                .remote_addr = s->remote + done,
                                .rkey = s->rkey,
                                .len = len,
                        };
                        done += len;
                }
        }
        job->priv = oj;
        r = rdma_job_submit(job->channel, job->dir == TRANSPORT_READ, oj->segs, oj->n_segs,
                            onesided_on_done, job, &oj->job);
        if (r < 0) {
                job->priv = NULL;
                free(oj);
        }
        return r;
}

static void onesided_cancel(Transport *t, TransportJob *job)
{
        OnesidedJob *oj = job->priv;

        /* The job's queue pairs are flushed; its callback runs before this returns. */
        if (oj && oj->job)
                rdma_job_cancel(oj->job);
}

/* Unknown (-ENOENT) before the job is posted and once it completed. */
static int onesided_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        const OnesidedJob *oj = job->priv;

        if (!oj || !oj->job)
                return -ENOENT;
        *ret = rdma_job_bytes_done(oj->job);
        return 0;
}

static const transport_ops onesided_ops = {
        .name = "rdma",
        .submit = onesided_submit,
        .cancel = onesided_cancel,
        .progress = onesided_progress,
};

int transport_rdma_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &onesided_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
