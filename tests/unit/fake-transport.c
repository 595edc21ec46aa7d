/* SPDX-License-Identifier: MIT */
/* A fake transport that records jobs and lets the test complete them (fake-transport.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/fake-transport.h"

static FakeTransport *fake_of(Transport *t)
{
        return (FakeTransport *)t;
}

static int fake_submit(Transport *t, TransportJob *job)
{
        FakeTransport *f = fake_of(t);

        if (f->submit_error != 0)
                return f->submit_error;
        if (f->n_jobs >= FAKE_TRANSPORT_MAX_JOBS)
                return -EBUSY;
        f->jobs[f->n_jobs++] = job;
        f->n_submitted++;
        job->priv = f;
        return 0;
}

static void fake_cancel(Transport *t, TransportJob *job)
{
        FakeTransport *f = fake_of(t);

        f->n_cancelled++;
        f->last_cancelled = job;
}

static int fake_abandon(Transport *t, void *channel, TransportDir dir, uint64_t id, uint64_t bytes)
{
        FakeTransport *f = fake_of(t);

        f->n_abandoned++;
        f->abandon_channel = channel;
        f->abandon_dir = dir;
        f->abandon_id = id;
        f->abandon_bytes = bytes;
        return 0;
}

static const transport_ops fake_ops = {
        .name = "fake",
        .submit = fake_submit,
        .cancel = fake_cancel,
        .abandon = fake_abandon,
};

FakeTransport *fake_transport_new(TransportSet *set)
{
        FakeTransport *f = calloc(1, sizeof(*f));

        if (!f)
                return NULL;
        f->transport.ops = &fake_ops;
        f->transport.set = set;
        return f;
}

FakeTransport *fake_transport_free(FakeTransport *f)
{
        free(f);
        return NULL;
}

TransportJob *fake_transport_job(FakeTransport *f, size_t i)
{
        return i < f->n_jobs ? f->jobs[i] : NULL;
}

void fake_transport_complete(FakeTransport *f, TransportJob *job, int error)
{
        size_t i;

        for (i = 0; i < f->n_jobs && f->jobs[i] != job; i++)
                ;
        if (i == f->n_jobs)
                abort(); /* not ours, or completed twice: a test bug */
        memmove(&f->jobs[i], &f->jobs[i + 1], (f->n_jobs - i - 1) * sizeof(f->jobs[0]));
        f->n_jobs--;
        if (f->copy && error == 0)
                for (size_t s = 0; s < job->n_segs; s++) {
                        const TransportSegment *seg = &job->segs[s];
                        void *remote = (void *)(uintptr_t)seg->remote;

                        if (job->dir == TRANSPORT_READ)
                                memcpy(seg->local, remote, seg->len);
                        else
                                memcpy(remote, seg->local, seg->len);
                }
        transport_job_done(job, error);
}

uint64_t fake_transport_job_bytes(const TransportJob *job)
{
        uint64_t n = 0;

        for (size_t s = 0; s < job->n_segs; s++)
                n += job->segs[s].len;
        return n;
}

int fake_transport_feed(const TransportJob *job, const void *stream, size_t len)
{
        const uint8_t *p = stream;

        if (fake_transport_job_bytes(job) != len)
                return -EINVAL;
        for (size_t s = 0; s < job->n_segs; s++) {
                memcpy(job->segs[s].local, p, job->segs[s].len);
                p += job->segs[s].len;
        }
        return 0;
}

int fake_transport_gather(const TransportJob *job, void *stream, size_t len)
{
        uint8_t *p = stream;

        if (fake_transport_job_bytes(job) != len)
                return -EINVAL;
        for (size_t s = 0; s < job->n_segs; s++) {
                memcpy(p, job->segs[s].local, job->segs[s].len);
                p += job->segs[s].len;
        }
        return 0;
}
