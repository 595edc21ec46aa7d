/* SPDX-License-Identifier: MIT */
/* TCP data plane connection threads: both directions of one socket, in bounded turns. */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/thread-nice.h"
#include "daemon/transport/tcp-data-internal.h"

/* What one direction of a connection thread asks for after its turn (0 is no answer). */
enum {
        IO_IDLE = 1, /* nothing to do on this direction */
        IO_BLOCKED,  /* the socket would block: poll for it */
        IO_MORE,     /* more to do right away */
        IO_WAIT,     /* a header names a job that is not registered yet */
};

/* Tells the loop that the TcpData broke, once, and every thread to leave. */
static void td_fail(TcpData *td, int error)
{
        int expected = 0;

        if (!atomic_compare_exchange_strong(&td->error, &expected, error))
                return;
        log_debug_errno(error, "%s: TCP data plane broken", td->name);
        kick_fd(td->efd);
        /* Every wake_fd exists before the first thread starts. */
        for (unsigned i = 0; i < td->n_conns; i++)
                kick_fd(td->conns[i].wake_fd);
}

/* With the lock held: the range is over on the wire, failed with @status when negative. */
static void range_over_locked(TcpData *td, Range *rg, int status)
{
        Job *j = rg->job;

        j->n_finished++;
        if (rg->busy) {
                rg->busy = false;
                j->n_busy--;
        }
        if (status < 0) {
                if (j->status == 0)
                        j->status = status;
                atomic_store_explicit(&j->stop, true, memory_order_relaxed);
        }
        tcp_data_job_check_locked(td, j);
}

/* ---- the receive side of a connection thread ---- */

/* With the lock held: the range of job @j whose first chunk is at @offset, if still unclaimed. */
static Range *recv_claim_locked(Job *j, uint64_t offset)
{
        for (unsigned i = 0; i < j->n_ranges; i++)
                if (j->ranges[i].r.start == offset)
                        return j->ranges[i].started ? NULL : &j->ranges[i];
        return NULL;
}

static void rx_over(Conn *c, int status)
{
        TcpData *td = c->td;

        pthread_mutex_lock(&td->lock);
        range_over_locked(td, c->rx, status);
        pthread_mutex_unlock(&td->lock);
        c->rx = NULL;
}

/* Stops writing into the job's destination; the rest of the range is read and dropped. */
static void rx_discard(Conn *c, int status)
{
        TcpData *td = c->td;
        Range *rg = c->rx;
        Job *j = rg->job;

        (void)tcp_receiver_discard(&c->receiver, c->scratch, SCRATCH_SIZE);
        c->rx_discarding = true;
        pthread_mutex_lock(&td->lock);
        if (rg->busy) {
                rg->busy = false;
                j->n_busy--;
        }
        if (status < 0) {
                if (j->status == 0)
                        j->status = status;
                atomic_store_explicit(&j->stop, true, memory_order_relaxed);
        }
        tcp_data_job_check_locked(td, j);
        pthread_mutex_unlock(&td->lock);
}

/*
 * Reads the next header (the connection is between ranges) and starts the range it opens.
 * Returns 0 when c->rx is set or the range already ended, IO_BLOCKED, IO_WAIT, or an error that
 * breaks the TcpData.
 */
static int rx_begin(Conn *c)
{
        TcpData *td = c->td;
        Range *rg;
        Job *j;
        bool discard;
        int q;

        while (!c->hdr_ready) {
                ssize_t n =
                        recv(c->fd, c->hdr + c->hdr_got, TCP_STREAM_HEADER_SIZE - c->hdr_got, 0);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return IO_BLOCKED;
                        return -errno;
                }
                if (n == 0)
                        return -ECONNRESET;
                c->hdr_got += (uint32_t)n;
                if (c->hdr_got < TCP_STREAM_HEADER_SIZE)
                        continue;
                c->hdr_got = 0;
                q = tcp_stream_header_parse(c->hdr, td->crc, &c->h);
                if (q < 0)
                        return q;
                c->hdr_ready = true;
        }

        /* While waiting, look again only when a job was registered since. */
        if (c->waiting && atomic_load(&td->recv_gen) == c->wait_gen)
                return now_usec(CLOCK_MONOTONIC) >= c->wait_until ? -ETIMEDOUT : IO_WAIT;

        pthread_mutex_lock(&td->lock);
        j = table_find(td->recv_table, c->h.transfer_id);
        if (!j) {
                usec_t now = now_usec(CLOCK_MONOTONIC);

                if (!c->waiting) {
                        c->waiting = true;
                        c->wait_until = now + td->wait_usec;
                }
                /* Read under the lock: a job registered after this bumps it after we look. */
                c->wait_gen = atomic_load(&td->recv_gen);
                pthread_mutex_unlock(&td->lock);
                if (now >= c->wait_until) {
                        log_debug("%s: connection %u: no job %" PRIu64 " after waiting for it",
                                  td->name, c->idx, c->h.transfer_id);
                        return -ETIMEDOUT;
                }
                return IO_WAIT;
        }
        c->waiting = false;
        rg = recv_claim_locked(j, c->h.offset);
        if (!rg) {
                pthread_mutex_unlock(&td->lock);
                log_debug("%s: connection %u: job %" PRIu64 " has no unclaimed range at %" PRIu64,
                          td->name, c->idx, c->h.transfer_id, c->h.offset);
                return -EPROTO;
        }
        rg->started = true;
        rg->conn = c->idx;
        discard = !j->dst || atomic_load_explicit(&j->stop, memory_order_relaxed);
        if (!discard && j->deadline != 0 && now_usec(CLOCK_MONOTONIC) >= j->deadline) {
                /* Past its deadline nothing of the job lands: drop the range. */
                discard = true;
                if (j->status == 0)
                        j->status = -ETIMEDOUT;
                atomic_store_explicit(&j->stop, true, memory_order_relaxed);
                tcp_data_job_check_locked(td, j);
        }
        if (!discard) {
                rg->busy = true;
                j->n_busy++;
        }
        pthread_mutex_unlock(&td->lock);

        /* The range lies inside the job (split from its total), so neither init can fail. */
        if (discard)
                q = tcp_receiver_init_discard(&c->receiver, j->id, rg->r.start, rg->r.end, td->crc,
                                              c->scratch, SCRATCH_SIZE);
        else
                q = tcp_receiver_init_range(&c->receiver, j->id, j->dst, j->n_segs, rg->r.start,
                                            rg->r.end, td->crc);
        c->rx = rg;
        c->rx_discarding = discard;
        c->hdr_ready = false;
        if (q >= 0)
                q = tcp_receiver_start(&c->receiver, &c->h);
        if (q == -ECANCELED) {
                rx_over(c, q);
                return 0;
        }
        if (q < 0)
                /* c->rx stays claimed and busy: the TcpData is broken, free fails the job */
                return q;
        return 0;
}

static int conn_rx(Conn *c)
{
        uint64_t before;
        int q;

        if (!c->rx) {
                q = rx_begin(c);
                if (q != 0)
                        return q;
                if (!c->rx)
                        return IO_MORE;
        }

        if (!c->rx_discarding && atomic_load_explicit(&c->rx->job->stop, memory_order_relaxed))
                rx_discard(c, 0);
        /* The job's deadline holds in this thread, on its own clock: a control loop that is
         * late (or a daemon that was stopped) cannot let a byte land after it. */
        if (!c->rx_discarding && c->rx->job->deadline != 0 &&
            now_usec(CLOCK_MONOTONIC) >= c->rx->job->deadline)
                rx_discard(c, -ETIMEDOUT);

        before = c->receiver.pos;
        q = tcp_receiver_step_max(&c->receiver, c->fd, TURN_BYTES);
        atomic_fetch_add_explicit(&c->bytes_received, c->receiver.pos - before,
                                  memory_order_relaxed);
        if (!c->rx_discarding)
                atomic_fetch_add_explicit(&c->rx->job->bytes_moved, c->receiver.pos - before,
                                          memory_order_relaxed);
        switch (q) {
        case TCP_STREAM_BLOCKED:
                return IO_BLOCKED;
        case TCP_STREAM_MORE:
                return IO_MORE;
        case TCP_STREAM_DONE:
                rx_over(c, 0);
                return IO_MORE;
        case -ECANCELED:
                rx_over(c, q);
                return IO_MORE;
        case -EILSEQ:
                /* The bad chunk was read whole: read past the rest of the range, in step. */
                log_debug("%s: connection %u: job %" PRIu64 ": CRC mismatch before %" PRIu64,
                          c->td->name, c->idx, c->rx->job->id, c->receiver.pos);
                rx_discard(c, q);
                return IO_MORE;
        default:
                return q;
        }
}

/* ---- the send side of a connection thread ---- */

/* With the lock held: takes the next queued range, if any, into c->tx. */
static bool tx_take_locked(Conn *c, bool *ret_abort_only)
{
        Range *rg = clist_first_entry(&c->queue, Range, link);

        if (!rg)
                return false;
        clist_unlink(&rg->link);
        rg->started = true;
        c->tx = rg;
        *ret_abort_only = rg->abort_only;
        return true;
}

/*
 * Prepares the sender for the range just taken, outside the lock (it walks the segments). Cannot
 * fail: the segments and the chunk size were checked when the job was handed over.
 */
static int tx_init(Conn *c, bool abort_only)
{
        TcpData *td = c->td;
        Range *rg = c->tx;
        Job *j = rg->job;

        c->tx_aborting = abort_only;
        if (abort_only)
                return tcp_sender_init_aborted(&c->sender, j->id, rg->r.start, rg->r.end, td->crc);
        return tcp_sender_init_range(&c->sender, j->id, j->src, j->n_segs, rg->r.start, rg->r.end,
                                     td->chunk_size, td->crc);
}

static int conn_tx(Conn *c)
{
        TcpData *td = c->td;
        uint64_t before;
        bool abort_only, taken;
        int q;

        if (!c->tx) {
                if (!atomic_exchange(&c->kick, false))
                        return IO_IDLE;
                pthread_mutex_lock(&td->lock);
                taken = tx_take_locked(c, &abort_only);
                pthread_mutex_unlock(&td->lock);
                if (!taken)
                        return IO_IDLE;
                q = tx_init(c, abort_only);
                if (q < 0)
                        return q;
        }

        if (!c->tx_aborting && atomic_load_explicit(&c->tx->job->stop, memory_order_relaxed)) {
                tcp_sender_abort(&c->sender);
                c->tx_aborting = true;
        }

        before = c->sender.pos;
        q = tcp_sender_step_max(&c->sender, c->fd, TURN_BYTES);
        atomic_fetch_add_explicit(&c->bytes_sent, c->sender.pos - before, memory_order_relaxed);
        if (!c->tx_aborting)
                atomic_fetch_add_explicit(&c->tx->job->bytes_moved, c->sender.pos - before,
                                          memory_order_relaxed);
        switch (q) {
        case TCP_STREAM_BLOCKED:
                return IO_BLOCKED;
        case TCP_STREAM_MORE:
                return IO_MORE;
        case TCP_STREAM_DONE:
                pthread_mutex_lock(&td->lock);
                c->queued_bytes -= c->tx->weight;
                range_over_locked(td, c->tx, c->sender.aborted ? -ECANCELED : 0);
                c->tx = NULL;
                taken = tx_take_locked(c, &abort_only);
                pthread_mutex_unlock(&td->lock);
                if (taken) {
                        q = tx_init(c, abort_only);
                        if (q < 0)
                                return q;
                }
                return IO_MORE;
        default:
                return q;
        }
}

/* ---- the connection thread ---- */

/* A socket error that poll() reported while nobody read or wrote the socket. */
static int socket_error(int fd, short revents)
{
        int err = 0;
        socklen_t len = sizeof(err);

        if ((revents & POLLERR) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err > 0)
                return -err;
        return -ECONNRESET;
}

void *tcp_data_conn_thread(void *userdata)
{
        Conn *c = userdata;
        TcpData *td = c->td;
        int r = 0;

        thread_nice_worker();
        while (!atomic_load(&td->stop) && atomic_load(&td->error) == 0) {
                struct pollfd p[2];
                int rx, tx, timeout = -1;

                rx = conn_rx(c);
                if (rx < 0) {
                        r = rx;
                        break;
                }
                tx = conn_tx(c);
                if (tx < 0) {
                        r = tx;
                        break;
                }
                if (rx == IO_MORE || tx == IO_MORE)
                        continue;

                p[0] = (struct pollfd){.fd = c->fd};
                if (rx == IO_BLOCKED)
                        p[0].events |= POLLIN;
                if (tx == IO_BLOCKED)
                        p[0].events |= POLLOUT;
                p[1] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
                if (rx == IO_WAIT) {
                        usec_t now = now_usec(CLOCK_MONOTONIC);

                        /* Not reading, but a peer that hung up is gone: no need to wait. */
                        p[0].events |= POLLRDHUP;
                        timeout = c->wait_until > now
                                          ? (int)((c->wait_until - now + USEC_PER_MSEC - 1) /
                                                  USEC_PER_MSEC)
                                          : 0;
                }
                if (poll(p, 2, timeout) < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                if (p[1].revents & POLLIN)
                        drain_fd(c->wake_fd);
                /* Without POLLIN asked for, a dead socket shows only here. */
                if (!(p[0].events & POLLIN) && (p[0].revents & (POLLERR | POLLHUP | POLLRDHUP))) {
                        r = socket_error(c->fd, p[0].revents);
                        break;
                }
        }
        if (r < 0) {
                log_debug_errno(r, "%s: connection %u failed", td->name, c->idx);
                td_fail(td, r);
        }
        return NULL;
}
