/* SPDX-License-Identifier: MIT */
/*
 * TCP transport: the bytes of a job to or from a peer daemon, moved by the peer's TcpData (the
 * job's channel, opened on the data connections of the peer's handshake) straight out of and into
 * our memory. Both daemons agreed on the job id and on the stream's layout before the job is
 * submitted; this hands our side of it to the data plane. TCP reaches memory without registering
 * it, and its channels have no paths to connect: the ops for those are left out.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/tcp-data.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/macro.h"

_Static_assert(sizeof(TcpSrcSegment) == sizeof(TcpDstSegment), "segment layouts differ");
_Static_assert(TRANSPORT_MAX_CONNS == TCP_DATA_MAX_CONNS, "connection limits differ");

/* A channel: a peer's data connections, and whom to tell when they break. */
typedef struct TcpChannel {
        TcpData *data;
        transport_broken_fn broken;
        void *userdata;
} TcpChannel;

static TcpData *tcp_channel_data(const void *channel)
{
        return ((const TcpChannel *)channel)->data;
}

/* A running job: the data plane borrows its segments until the job's callback. */
typedef struct TcpJob {
        TcpData *data;
        /* the segments' byte count, or why it could not be taken: counted where they were built */
        uint64_t total;
        int total_error;
        size_t n_segs;
        TcpDstSegment segs[]; /* a send reads them as TcpSrcSegment */
} TcpJob;

static void tcp_on_done(void *userdata, int status)
{
        TransportJob *job = userdata;

        free(job->priv);
        transport_job_done(job, status);
}

/* The stream's list of @job's spans, in order; the peer lays out its own end the same way. */
static int tcp_job_new(const TransportJob *job, TcpJob **ret)
{
        TransportSpan sp;
        TcpJob *tj;
        size_t n, k = 0;

        if (transport_job_spans(job, &n) < 0)
                return -ENOMEM;
        tj = malloc(sizeof(*tj) + (n ? n : 1) * sizeof(tj->segs[0]));
        if (!tj)
                return -ENOMEM;
        tj->data = NULL;
        tj->n_segs = n;
        for (TransportSpanIter it = {job}; transport_span_next(&it, &sp);)
                tj->segs[k++] = (TcpDstSegment){.dst = sp.local, .len = (size_t)sp.len};
        tj->total_error = tcp_stream_dst_total(tj->segs, n, &tj->total);
        *ret = tj;
        return 0;
}

/* Off the loop, after the job's prepare step: its list of spans (tcp_submit() takes it). */
static int tcp_stage(Transport *t, const TransportJob *job, void **ret_priv)
{
        TcpJob *tj;
        int r;

        r = tcp_job_new(job, &tj);
        if (r < 0)
                return r;
        *ret_priv = tj;
        return 0;
}

static int tcp_submit(Transport *t, TransportJob *job)
{
        TcpJob *tj = job->priv; /* staged off the loop, or built here */
        int r;

        if (!job->channel) {
                free(tj);
                job->priv = NULL;
                return -ENOTCONN;
        }
        if (!tj) {
                r = tcp_job_new(job, &tj);
                if (r < 0)
                        return r;
        }
        tj->data = tcp_channel_data(job->channel);
        job->priv = tj;
        if (tj->total_error < 0)
                r = -EINVAL; /* as the data plane says of such segments */
        else if (job->dir == TRANSPORT_READ)
                r = tcp_data_recv_until_total(tj->data, job->id, tj->segs, tj->n_segs, tj->total,
                                              job->hard_deadline ? job->deadline_usec : 0,
                                              tcp_on_done, job);
        else
                r = tcp_data_send_total(tj->data, job->id, (const TcpSrcSegment *)tj->segs,
                                        tj->n_segs, tj->total, tcp_on_done, job);
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
                return tcp_data_recv_discard(tcp_channel_data(channel), id, bytes);
        return tcp_data_send_aborted(tcp_channel_data(channel), id, bytes);
}

/* Unknown (-ENOENT) before the job is handed to the data plane and once it is over on the wire. */
static int tcp_progress(Transport *t, const TransportJob *job, uint64_t *ret)
{
        const TcpJob *tj = job->priv;

        if (!tj)
                return -ENOENT;
        return tcp_data_progress(tj->data, job->id, job->dir == TRANSPORT_WRITE, ret);
}

static void tcp_channel_on_broken(TcpData *td, int error, void *userdata)
{
        TcpChannel *ch = userdata;

        /* May close the channel: nothing of it is touched after. */
        if (ch->broken)
                ch->broken((TransportChannel *)ch, error, ch->userdata);
}

static int tcp_channel_open(Transport *t, const TransportChannelSpec *spec, TransportChannel **ret)
{
        TcpChannel *ch;
        TcpDataOptions o = {
                .base = t->set->base,
                .fds = spec->fds,
                .n_fds = spec->n_fds,
                .chunk_size = spec->chunk_size,
                .crc = spec->crc,
                .broken = tcp_channel_on_broken,
                .name = spec->name,
        };
        int r;

        ch = calloc(1, sizeof(*ch));
        if (!ch) {
                /* The sockets are ours to close, as tcp_data_new() would. */
                for (unsigned i = 0; i < spec->n_fds; i++)
                        safe_close(spec->fds[i]);
                return -ENOMEM;
        }
        *ch = (TcpChannel){.broken = spec->broken, .userdata = spec->userdata};
        o.userdata = ch;
        r = tcp_data_new(&o, &ch->data);
        if (r < 0) {
                free(ch);
                return r;
        }
        *ret = (TransportChannel *)ch;
        return 0;
}

static void tcp_channel_close(Transport *t, TransportChannel *channel)
{
        TcpChannel *ch = (TcpChannel *)channel;

        /* Fails every job still registered, from inside this call. */
        ch->data = tcp_data_free(ch->data);
        free(ch);
}

static void tcp_describe_channel(Transport *t, const TransportChannel *channel, TransportFacts *ret)
{
        TcpData *td = tcp_channel_data(channel);
        TcpDataStats st;

        tcp_data_get_stats(td, &st);
        transport_facts_add_int(ret, "connections", tcp_data_n_conns(td));
        transport_facts_add_u64(ret, "bytes_sent", st.bytes_sent);
        transport_facts_add_u64(ret, "bytes_received", st.bytes_received);
        transport_facts_add_u64(ret, "jobs_sent", st.jobs_sent);
        transport_facts_add_u64(ret, "jobs_received", st.jobs_received);
        transport_facts_add_u64(ret, "jobs_failed", st.jobs_failed);
        transport_facts_add_int(ret, "jobs_in_flight", st.jobs_in_flight);
        transport_facts_add_bool(ret, "broken", tcp_data_is_broken(td));
}

static const transport_ops tcp_ops = {
        .name = "tcp",
        .caps = {.mapped_only = true, .max_segment = TRANSPORT_SEGMENT_MAX},
        .submit = tcp_submit,
        .stage = tcp_stage,
        .cancel = tcp_cancel,
        .abandon = tcp_abandon,
        .progress = tcp_progress,
        .channel_open = tcp_channel_open,
        .channel_close = tcp_channel_close,
        .describe_channel = tcp_describe_channel,
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
