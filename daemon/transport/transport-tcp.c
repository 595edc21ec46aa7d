/* SPDX-License-Identifier: MIT */
/*
 * TCP transport: the bytes of a job to or from a peer daemon, moved by the peer's TcpData (the
 * job's channel) straight out of and into our memory. Both daemons agreed on the job id and on
 * the stream's layout before the job is submitted; this hands our side of it to the data plane.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/tcp-data.h"
#include "daemon/transport/transport.h"

_Static_assert(sizeof(TcpSrcSegment) == sizeof(TcpDstSegment), "segment layouts differ");

/* A running job: the data plane borrows its segments until the job's callback. */
typedef struct TcpJob {
        TcpData *data;
        TcpDstSegment segs[]; /* a send reads them as TcpSrcSegment */
} TcpJob;

static void tcp_on_done(void *userdata, int status)
{
        TransportJob *job = userdata;

        free(job->priv);
        transport_job_done(job, status);
}

static int tcp_submit(Transport *t, TransportJob *job)
{
        TcpJob *tj;
        int r;

        if (!job->channel)
                return -ENOTCONN;
        tj = calloc(1, sizeof(*tj) + (job->n_segs ? job->n_segs : 1) * sizeof(tj->segs[0]));
        if (!tj)
                return -ENOMEM;
        tj->data = job->channel;
        for (size_t i = 0; i < job->n_segs; i++)
                tj->segs[i] =
                        (TcpDstSegment){.dst = job->segs[i].local, .len = (size_t)job->segs[i].len};
        job->priv = tj;
        if (job->dir == TRANSPORT_READ)
                r = tcp_data_recv(tj->data, job->id, tj->segs, job->n_segs, tcp_on_done, job);
        else
                r = tcp_data_send(tj->data, job->id, (const TcpSrcSegment *)tj->segs, job->n_segs,
                                  tcp_on_done, job);
        if (r < 0) {
                job->priv = NULL;
                free(tj);
        }
        return r;
}

static void tcp_cancel(Transport *t, TransportJob *job)
{
        TcpJob *tj = job->priv;

        if (!tj)
                return;
        if (job->dir == TRANSPORT_READ)
                tcp_data_cancel_recv(tj->data, job->id);
        else
                tcp_data_cancel_send(tj->data, job->id);
}

static int tcp_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes)
{
        if (!channel)
                return -ENOTCONN;
        if (dir == TRANSPORT_READ)
                return tcp_data_recv_discard(channel, id, bytes);
        return tcp_data_send_aborted(channel, id, bytes);
}

/* Unknown (-ENOENT) before the job is handed to the data plane and once it is over on the wire. */
static int tcp_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        const TcpJob *tj = job->priv;

        if (!tj)
                return -ENOENT;
        return tcp_data_progress(tj->data, job->id, job->dir == TRANSPORT_WRITE, ret);
}

static const transport_ops tcp_ops = {
        .name = "tcp",
        .submit = tcp_submit,
        .cancel = tcp_cancel,
        .abandon = tcp_abandon,
        .progress = tcp_progress,
};

int transport_tcp_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &tcp_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
