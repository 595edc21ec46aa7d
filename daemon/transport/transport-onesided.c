/* SPDX-License-Identifier: MIT */
/*
 * One-sided transport: the ops table of transfers over RDMA. By the time a transfer is submitted
 * both daemons agreed on its plan and the peer named its tensors' addresses and remote keys
 * (transfer-remote.c built x->rdma_segs); this hands the segments to the link's RDMA endpoint as
 * one job of READs (pull) or WRITEs (push). Built with or without libibverbs: without, the
 * endpoint calls report -EOPNOTSUPP and no link ever chooses this transport.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transfer/plan.h"
#include "daemon/transport/rdma.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport.h"

static void onesided_on_done(void *userdata, int status)
{
        Transfer *x = userdata;

        x->rdma_job = NULL;
        transfer_remote_data_done(x, status);
}

static int onesided_submit(Transport *t, Transfer *x)
{
        bool read = x->kind == TRANSFER_PULL_CACHE || x->kind == TRANSFER_PULL_BLOCKS;

        if (!x->rdma_ep || !x->rdma_segs)
                return -ENOTCONN;
        return rdma_job_submit(x->rdma_ep, read, x->rdma_segs, x->n_rdma_segs, onesided_on_done,
                               x, &x->rdma_job);
}

static void onesided_cancel(Transport *t, Transfer *x)
{
        /* The job's queue pairs are flushed; its callback runs before this returns. */
        if (x->rdma_job)
                rdma_job_cancel(x->rdma_job);
}

/* Unknown (-ENOENT) before the job is posted and once it completed. */
static int onesided_progress(Transport *t, const Transfer *x, uint64_t *ret)
{
        if (!x->rdma_job)
                return -ENOENT;
        *ret = rdma_job_bytes_done(x->rdma_job);
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
