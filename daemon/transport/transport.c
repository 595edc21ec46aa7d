/* SPDX-License-Identifier: MIT */
/* Transport: the generic wrappers over a transport's ops table. */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/transport.h"
#include "common/status.h"

int transport_submit(Transport *t, TransportJob *job)
{
        if (!t->ops->submit)
                return -EOPNOTSUPP;
        job->error = 0;
        job->priv = NULL;
        return t->ops->submit(t, job);
}

int transport_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        if (!t || !t->ops->progress)
                return -EOPNOTSUPP;
        return t->ops->progress(t, job, ret);
}

void transport_cancel(Transport *t, TransportJob *job)
{
        if (t->ops->cancel)
                t->ops->cancel(t, job);
}

int transport_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes)
{
        if (!t->ops->abandon)
                return -EOPNOTSUPP;
        return t->ops->abandon(t, channel, dir, id, bytes);
}

Transport *transport_free(Transport *t)
{
        if (!t)
                return NULL;
        if (t->ops->destroy)
                t->ops->destroy(t);
        else
                free(t);
        return NULL;
}

const char *transport_name(const Transport *t)
{
        return t ? t->ops->name : "none";
}

int transport_status_from_errno(int error)
{
        switch (error) {
        case 0:
                return STATUS_OK;
        case -EILSEQ:
                return STATUS_FAILED;
        default:
                return STATUS_PEER_LOST;
        }
}

void transport_job_done(TransportJob *job, int error)
{
        job->priv = NULL;
        job->error = error;
        job->done(job, transport_status_from_errno(error));
}
