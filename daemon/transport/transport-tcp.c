/* SPDX-License-Identifier: MIT */
/*
 * TCP transport: the bytes of a transfer to or from a peer daemon, moved by the peer's TcpData
 * straight out of and into our side's memory. By the time a transfer is submitted both daemons
 * agreed on its plan and job id (transfer-remote.c); this turns it into one data job.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transfer/plan.h"
#include "daemon/transport/tcp-data.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport.h"

static bool tcp_is_receive(const Transfer *x)
{
        return x->kind == TRANSFER_PULL_CACHE || x->kind == TRANSFER_PULL_BLOCKS;
}

static void tcp_on_done(void *userdata, int status)
{
        transfer_remote_data_done(userdata, status);
}

static int tcp_submit(Transport *t, Transfer *x)
{
        if (!x->data || !x->segs)
                return -ENOTCONN;
        if (tcp_is_receive(x))
                return tcp_data_recv(x->data, x->job_id, x->segs, x->plan->n_segments,
                                     tcp_on_done, x);
        return tcp_data_send(x->data, x->job_id, x->segs, x->plan->n_segments, tcp_on_done, x);
}

static void tcp_cancel(Transport *t, Transfer *x)
{
        if (!x->data)
                return;
        if (tcp_is_receive(x))
                tcp_data_cancel_recv(x->data, x->job_id);
        else
                tcp_data_cancel_send(x->data, x->job_id);
}

/* Unknown (-ENOENT) before the job is handed to the data plane and once it is over on the wire. */
static int tcp_progress(Transport *t, const Transfer *x, uint64_t *ret)
{
        if (!x->data)
                return -ENOENT;
        return tcp_data_progress(x->data, x->job_id, !tcp_is_receive(x), ret);
}

static const transport_ops tcp_ops = {
        .name = "tcp",
        .submit = tcp_submit,
        .cancel = tcp_cancel,
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
