/* SPDX-License-Identifier: MIT */
/* TCP data plane: one I/O thread per data connection to a peer, jobs cut into ranges. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "clist.h"
#include "log.h"
#include "macro.h"
#include "tcp-data.h"
#include "time-util.h"

/* Job ids hash into this many chains per direction; chains stay short for thousands of jobs. */
#define TABLE_BUCKETS 256
/* Payload moved per turn of a thread on one direction before it looks at the other one. */
#define TURN_BYTES (UINT64_C(1) << 20)
/* Where discarded payload lands, per connection. */
#define SCRATCH_SIZE ((size_t)64 << 10)

/* What one direction of a connection thread asks for after its turn (0 is no answer). */
enum {
        IO_IDLE = 1,                    /* nothing to do on this direction */
        IO_BLOCKED,                     /* the socket would block: poll for it */
        IO_MORE,                        /* more to do right away */
        IO_WAIT,                        /* a header names a job that is not registered yet */
};

typedef enum JobKind {
        JOB_SEND,
        JOB_RECV,
} JobKind;

typedef struct Job Job;

/*
 * One tcp_stream_split() range of a job. A send range sits on its connection's queue until that
 * connection's thread takes it; a receive range is claimed by the thread whose connection
 * carried its first chunk.
 */
typedef struct Range {
        Job *job;
        CList link;                     /* send: on Conn.queue until taken */
        TcpStreamRange r;
        unsigned conn;
        uint64_t weight;                /* send: what it adds to Conn.queued_bytes */
        bool started;                   /* send: taken by the thread; receive: claimed */
        bool abort_only;                /* send: goes out as one ABORT chunk, reads no memory */
        bool busy;                      /* counted in Job.n_busy */
} Range;

/*
 * Everything under TcpData.lock unless said otherwise. A job leaves its table when every range
 * is over on the wire (finished); its callback may run earlier, once no range can touch its
 * memory any more (cancelled or failed, n_busy 0). It is freed on the loop after both.
 */
struct Job {
        TcpData *td;
        JobKind kind;
        uint64_t id;
        uint64_t total;
        CList link_table;
        CList link_done;                /* on TcpData.done while its callback or freeing is due */
        tcp_data_done_fn done;          /* immutable */
        void *userdata;
        const TcpSrcSegment *src;       /* immutable; NULL for an aborted send */
        const TcpDstSegment *dst;       /* immutable; NULL for a discarded receive */
        size_t n_segs;
        unsigned n_ranges;              /* immutable */
        unsigned n_finished;            /* ranges over on the wire */
        unsigned n_busy;                /* ranges that may still touch the job's memory */
        int status;                     /* the first failure */
        atomic_bool stop;               /* cancelled or failed: stop touching memory */
        bool notify_due;
        bool notified;                  /* the callback ran, or there is none */
        bool finished;
        Range ranges[];
};

typedef struct Conn {
        TcpData *td;
        unsigned idx;
        int fd;
        int wake_fd;                    /* eventfd: new ranges, a cancel, a new job, stop */
        pthread_t thread;
        atomic_bool kick;               /* ranges were queued since the thread last looked */
        _Atomic uint64_t bytes_sent;
        _Atomic uint64_t bytes_received;

        /* Under TcpData.lock. */
        CList queue;                    /* Range.link of send ranges, in order */
        uint64_t queued_bytes;          /* of ranges queued or in progress: how busy it is */
        bool waiting;                   /* its receive side waits for an unknown job */

        /* The thread's own. */
        Range *tx;
        TcpSender sender;
        bool tx_aborting;
        Range *rx;
        TcpReceiver receiver;
        bool rx_discarding;
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
        uint32_t hdr_got;
        bool hdr_ready;
        TcpStreamHeader h;
        usec_t wait_until;
        unsigned wait_gen;
        uint8_t *scratch;
} Conn;

struct TcpData {
        struct event_base *base;
        struct event *event;
        int efd;                        /* completions and breakage: wakes the loop */
        char *name;
        uint32_t chunk_size;
        bool crc;
        uint64_t min_split;
        usec_t wait_usec;
        tcp_data_broken_fn broken;
        void *userdata;

        atomic_int error;               /* what broke it, 0 while sound */
        atomic_bool stop;               /* tcp_data_free(): the threads leave */
        atomic_uint recv_gen;           /* bumped on every receive job registered */

        /* The loop's own. */
        bool broken_reported;
        bool freeing;
        unsigned dispatching;
        unsigned next_conn;
        TcpDataStats stats;

        pthread_mutex_t lock;
        CList send_table[TABLE_BUCKETS];
        CList recv_table[TABLE_BUCKETS];
        CList done;                     /* Job.link_done */

        unsigned n_conns;
        unsigned n_started;
        Conn conns[];
};

static void kick_fd(int fd)
{
        uint64_t one = 1;
        ssize_t n;

        /* Fails only with EAGAIN when the counter is saturated, and then a wake-up is pending. */
        n = write(fd, &one, sizeof(one));
        (void)n;
}

static void drain_fd(int fd)
{
        uint64_t v;
        ssize_t n;

        n = read(fd, &v, sizeof(v));
        (void)n;
}

static CList *table_bucket(CList *table, uint64_t id)
{
        return &table[(id * UINT64_C(0x9e3779b97f4a7c15)) >> 56 & (TABLE_BUCKETS - 1)];
}

static Job *table_find(CList *table, uint64_t id)
{
        CList *b = table_bucket(table, id);
        Job *j;

        CLIST_FOREACH(j, b, link_table)
                if (j->id == id)
                        return j;
        return NULL;
}

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

/*
 * With the lock held, after any change to @j's counters: takes it off its table once every
 * range is over, and puts it on the done list when its callback may run or it may be freed.
 */
static void job_check_locked(TcpData *td, Job *j)
{
        bool queue = false;

        if (!j->finished && j->n_finished == j->n_ranges) {
                j->finished = true;
                clist_unlink(&j->link_table);
                queue = true;
        }
        if (!j->notified && !j->notify_due && j->n_busy == 0 &&
            (j->finished || atomic_load_explicit(&j->stop, memory_order_relaxed))) {
                j->notify_due = true;
                queue = true;
        }
        if (queue && !clist_is_linked(&j->link_done)) {
                if (clist_is_empty(&td->done))
                        kick_fd(td->efd);
                clist_link_tail(&td->done, &j->link_done);
        }
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
        job_check_locked(td, j);
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
        job_check_locked(td, j);
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

        before = c->receiver.pos;
        q = tcp_receiver_step_max(&c->receiver, c->fd, TURN_BYTES);
        atomic_fetch_add_explicit(&c->bytes_received, c->receiver.pos - before,
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

static void *conn_thread(void *userdata)
{
        Conn *c = userdata;
        TcpData *td = c->td;
        int r = 0;

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

                p[0] = (struct pollfd){ .fd = c->fd };
                if (rx == IO_BLOCKED)
                        p[0].events |= POLLIN;
                if (tx == IO_BLOCKED)
                        p[0].events |= POLLOUT;
                p[1] = (struct pollfd){ .fd = c->wake_fd, .events = POLLIN };
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

/* ---- the loop side ---- */

/*
 * Runs due callbacks and frees finished jobs, one at a time so that a callback may use the
 * TcpData. Stops when a callback freed it (unless @all: tcp_data_free() itself draining).
 */
static void td_dispatch(TcpData *td, bool all)
{
        for (;;) {
                Job *j;
                bool call, fin;
                int status;

                pthread_mutex_lock(&td->lock);
                j = clist_first_entry(&td->done, Job, link_done);
                if (!j) {
                        pthread_mutex_unlock(&td->lock);
                        return;
                }
                clist_unlink(&j->link_done);
                call = j->notify_due && !j->notified;
                if (call)
                        j->notified = true;
                status = j->status;
                fin = j->finished;
                pthread_mutex_unlock(&td->lock);

                if (call) {
                        td->stats.jobs_in_flight--;
                        if (status < 0)
                                td->stats.jobs_failed++;
                        else if (j->kind == JOB_SEND)
                                td->stats.jobs_sent++;
                        else
                                td->stats.jobs_received++;
                        j->done(j->userdata, status);
                }
                if (fin)
                        free(j);
                if (td->freeing && !all)
                        return;
        }
}

static void td_destroy(TcpData *td)
{
        if (td->event)
                event_free(td->event);
        safe_close(td->efd);
        for (unsigned i = 0; i < td->n_conns; i++) {
                safe_close(td->conns[i].fd);
                safe_close(td->conns[i].wake_fd);
                free(td->conns[i].scratch);
        }
        pthread_mutex_destroy(&td->lock);
        free(td->name);
        free(td);
}

static void td_on_event(evutil_socket_t fd, short what, void *userdata)
{
        TcpData *td = userdata;
        int error;

        (void)what;
        /* Reset the counter first: a later completion writes it again. */
        drain_fd(fd);
        td->dispatching++;
        td_dispatch(td, false);
        error = atomic_load(&td->error);
        if (!td->freeing && error != 0 && !td->broken_reported) {
                td->broken_reported = true;
                if (td->broken)
                        td->broken(td, error, td->userdata);
        }
        td->dispatching--;
        if (td->freeing && td->dispatching == 0)
                td_destroy(td);
}

TcpData *tcp_data_free(TcpData *td)
{
        CList jobs = CLIST_INIT(jobs);

        if (!td || td->freeing)
                return NULL;
        td->freeing = true;

        atomic_store(&td->stop, true);
        for (unsigned i = 0; i < td->n_started; i++)
                kick_fd(td->conns[i].wake_fd);
        for (unsigned i = 0; i < td->n_started; i++)
                pthread_join(td->conns[i].thread, NULL);
        td->n_started = 0;
        for (unsigned i = 0; i < td->n_conns; i++) {
                /*
                 * Abortively: what is still unsent is of no use to anyone, and a peer that
                 * stopped reading would otherwise keep the socket (and our data) alive, and
                 * not see the end until it read all of it. Not a TCP socket: ignored.
                 */
                struct linger lg = { .l_onoff = 1, .l_linger = 0 };

                (void)setsockopt(td->conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                td->conns[i].fd = safe_close(td->conns[i].fd);
        }

        /* No thread runs any more: jobs that completed get their own status first. */
        td_dispatch(td, true);

        pthread_mutex_lock(&td->lock);
        for (unsigned b = 0; b < TABLE_BUCKETS; b++) {
                CList *tables[2] = { &td->send_table[b], &td->recv_table[b] };

                for (unsigned t = 0; t < 2; t++)
                        while (!clist_is_empty(tables[t])) {
                                Job *j = clist_first_entry(tables[t], Job, link_table);

                                clist_unlink(&j->link_table);
                                clist_link_tail(&jobs, &j->link_table);
                        }
        }
        pthread_mutex_unlock(&td->lock);

        while (!clist_is_empty(&jobs)) {
                Job *j = clist_first_entry(&jobs, Job, link_table);

                clist_unlink(&j->link_table);
                if (!j->notified) {
                        j->notified = true;
                        td->stats.jobs_in_flight--;
                        td->stats.jobs_failed++;
                        j->done(j->userdata, -ECONNRESET);
                }
                free(j);
        }

        if (td->dispatching == 0)
                td_destroy(td);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(TcpData, tcp_data_free);

/* Non-blocking, close-on-exec, no Nagle (where the socket has Nagle at all). */
static int setup_socket(int fd)
{
        int type, one = 1, fl;
        socklen_t len = sizeof(type);

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
                return -errno;
        if (type != SOCK_STREAM)
                return -EINVAL;
        fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return -errno;
        fl = fcntl(fd, F_GETFD);
        if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
                return -errno;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 &&
            errno != EOPNOTSUPP && errno != ENOTSUP && errno != ENOPROTOOPT)
                return -errno;
        return 0;
}

static void close_fds(const int *fds, unsigned n)
{
        if (!fds)
                return;
        for (unsigned i = 0; i < n; i++)
                safe_close(fds[i]);
}

static int td_new_locked_parts(TcpData *td)
{
        int r;

        r = pthread_mutex_init(&td->lock, NULL);
        if (r != 0)
                return -r;
        for (unsigned b = 0; b < TABLE_BUCKETS; b++) {
                clist_init(&td->send_table[b]);
                clist_init(&td->recv_table[b]);
        }
        clist_init(&td->done);
        return 0;
}

int tcp_data_new(const TcpDataOptions *o, TcpData **ret)
{
        _cleanup_(tcp_data_freep) TcpData *td = NULL;
        sigset_t all, saved;
        TcpData *p;
        int r;

        if (!o || !ret || !o->base || !o->fds || o->n_fds < 1 || o->n_fds > TCP_DATA_MAX_CONNS ||
            o->chunk_size > TCP_STREAM_CHUNK_MAX) {
                if (o && o->n_fds <= TCP_DATA_MAX_CONNS)
                        close_fds(o->fds, o->n_fds);
                return -EINVAL;
        }

        p = calloc(1, sizeof(TcpData) + o->n_fds * sizeof(Conn));
        if (!p) {
                close_fds(o->fds, o->n_fds);
                return -ENOMEM;
        }
        r = td_new_locked_parts(p);
        if (r < 0) {
                free(p);
                close_fds(o->fds, o->n_fds);
                return r;
        }
        td = p;
        td->efd = -1;
        td->n_conns = o->n_fds;
        for (unsigned i = 0; i < td->n_conns; i++) {
                Conn *c = &td->conns[i];

                c->td = td;
                c->idx = i;
                c->fd = o->fds[i];
                c->wake_fd = -1;
                clist_init(&c->queue);
        }
        /* From here on the sockets are the TcpData's: freeing it closes them. */

        td->base = o->base;
        td->chunk_size = o->chunk_size ? o->chunk_size : TCP_STREAM_CHUNK_DEFAULT;
        td->crc = o->crc;
        td->min_split = o->min_split_bytes ? o->min_split_bytes : TCP_DATA_MIN_SPLIT_DEFAULT;
        td->wait_usec = (usec_t)(o->unknown_job_wait_ms ? o->unknown_job_wait_ms
                                                        : TCP_DATA_UNKNOWN_JOB_WAIT_MS) *
                        USEC_PER_MSEC;
        td->broken = o->broken;
        td->userdata = o->userdata;
        td->name = strdup(o->name ? o->name : "tcp-data");
        if (!td->name)
                return -ENOMEM;

        for (unsigned i = 0; i < td->n_conns; i++) {
                Conn *c = &td->conns[i];

                r = setup_socket(c->fd);
                if (r < 0)
                        return r;
                c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
                if (c->wake_fd < 0)
                        return -errno;
                c->scratch = malloc(SCRATCH_SIZE);
                if (!c->scratch)
                        return -ENOMEM;
        }

        td->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (td->efd < 0)
                return -errno;
        td->event = event_new(td->base, td->efd, EV_READ | EV_PERSIST, td_on_event, td);
        if (!td->event)
                return -ENOMEM;
        if (event_add(td->event, NULL) < 0)
                return -EIO;

        /* Signals belong to the loop thread: the I/O threads start with all of them blocked. */
        sigfillset(&all);
        r = pthread_sigmask(SIG_SETMASK, &all, &saved);
        if (r != 0)
                return -r;
        for (unsigned i = 0; i < td->n_conns; i++) {
                char name[32]; /* the kernel takes 15 characters; ours have 10 at most */

                r = pthread_create(&td->conns[i].thread, NULL, conn_thread, &td->conns[i]);
                if (r != 0)
                        break;
                td->n_started++;
                (void)snprintf(name, sizeof(name), "kvd-tcp/%u", i);
                (void)pthread_setname_np(td->conns[i].thread, name);
        }
        (void)pthread_sigmask(SIG_SETMASK, &saved, NULL);
        if (r != 0)
                return -r;

        *ret = TAKE_PTR(td);
        return 0;
}

/* A job with its ranges cut, on no list yet; NULL when out of memory. */
static Job *job_new(TcpData *td, JobKind kind, uint64_t id, uint64_t total, tcp_data_done_fn done,
                    void *userdata)
{
        TcpStreamRange ranges[TCP_DATA_MAX_CONNS];
        int n = tcp_stream_split(total, td->n_conns, td->min_split, ranges);
        Job *j;

        /* total > 0 and n_conns > 0 here, so n >= 1 */
        j = calloc(1, sizeof(Job) + (size_t)n * sizeof(Range));
        if (!j)
                return NULL;
        j->td = td;
        j->kind = kind;
        j->id = id;
        j->total = total;
        j->done = done;
        j->userdata = userdata;
        j->notified = !done;
        j->n_ranges = (unsigned)n;
        clist_init(&j->link_table);
        clist_init(&j->link_done);
        atomic_init(&j->stop, false);
        for (int i = 0; i < n; i++) {
                j->ranges[i] = (Range){ .job = j, .r = ranges[i] };
                clist_init(&j->ranges[i].link);
        }
        return j;
}

static int td_usable(const TcpData *td)
{
        if (td->freeing || atomic_load(&td->error) != 0)
                return -EPIPE;
        return 0;
}

/*
 * With the lock held: puts the ranges of send job @j on connections, the least busy first, and
 * returns the mask of connections to wake.
 */
static uint32_t send_place_locked(TcpData *td, Job *j)
{
        unsigned order[TCP_DATA_MAX_CONNS];
        uint32_t wake = 0;

        /* Ties go round-robin, so that small jobs spread over idle connections. */
        for (unsigned i = 0; i < td->n_conns; i++) {
                unsigned c = (td->next_conn + i) % td->n_conns, k = i;

                while (k > 0 && td->conns[order[k - 1]].queued_bytes > td->conns[c].queued_bytes) {
                        order[k] = order[k - 1];
                        k--;
                }
                order[k] = c;
        }
        td->next_conn = (td->next_conn + 1) % td->n_conns;

        for (unsigned i = 0; i < j->n_ranges; i++) {
                Range *rg = &j->ranges[i];
                Conn *c = &td->conns[order[i]];

                rg->conn = c->idx;
                rg->weight = rg->abort_only ? TCP_STREAM_HEADER_SIZE : rg->r.end - rg->r.start;
                c->queued_bytes += rg->weight;
                clist_link_tail(&c->queue, &rg->link);
                wake |= UINT32_C(1) << c->idx;
        }
        return wake;
}

static void wake_conns(TcpData *td, uint32_t mask, bool kick)
{
        for (unsigned i = 0; i < td->n_conns; i++)
                if (mask & (UINT32_C(1) << i)) {
                        if (kick)
                                atomic_store(&td->conns[i].kick, true);
                        kick_fd(td->conns[i].wake_fd);
                }
}

static int send_submit(TcpData *td, Job *j)
{
        uint32_t wake;

        pthread_mutex_lock(&td->lock);
        if (table_find(td->send_table, j->id)) {
                pthread_mutex_unlock(&td->lock);
                free(j);
                return -EEXIST;
        }
        clist_link_tail(table_bucket(td->send_table, j->id), &j->link_table);
        wake = send_place_locked(td, j);
        pthread_mutex_unlock(&td->lock);

        if (j->done)
                td->stats.jobs_in_flight++;
        wake_conns(td, wake, true);
        return 0;
}

int tcp_data_send(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                  tcp_data_done_fn done, void *userdata)
{
        uint64_t total;
        Job *j;
        int r;

        if (!td || (n > 0 && !segs))
                return -EINVAL;
        r = td_usable(td);
        if (r < 0)
                return r;
        r = tcp_stream_src_total(segs, n, &total);
        if (r < 0)
                return -EINVAL;
        if (total == 0)
                return -EINVAL;

        j = job_new(td, JOB_SEND, job_id, total, done, userdata);
        if (!j)
                return -ENOMEM;
        j->src = segs;
        j->n_segs = n;
        j->n_busy = j->n_ranges;
        for (unsigned i = 0; i < j->n_ranges; i++)
                j->ranges[i].busy = true;
        return send_submit(td, j);
}

int tcp_data_send_aborted(TcpData *td, uint64_t job_id, uint64_t total)
{
        Job *j;
        int r;

        if (!td || total == 0)
                return -EINVAL;
        r = td_usable(td);
        if (r < 0)
                return r;

        j = job_new(td, JOB_SEND, job_id, total, NULL, NULL);
        if (!j)
                return -ENOMEM;
        for (unsigned i = 0; i < j->n_ranges; i++)
                j->ranges[i].abort_only = true;
        return send_submit(td, j);
}

void tcp_data_cancel_send(TcpData *td, uint64_t job_id)
{
        Job *j;

        if (!td || td->freeing)
                return;
        pthread_mutex_lock(&td->lock);
        j = table_find(td->send_table, job_id);
        if (j && !j->notified && !j->notify_due) {
                atomic_store_explicit(&j->stop, true, memory_order_relaxed);
                /* Ranges no thread took yet go out as a bare ABORT: they read no memory. */
                for (unsigned i = 0; i < j->n_ranges; i++) {
                        Range *rg = &j->ranges[i];

                        if (rg->started || rg->abort_only)
                                continue;
                        rg->abort_only = true;
                        td->conns[rg->conn].queued_bytes -= rg->weight - TCP_STREAM_HEADER_SIZE;
                        rg->weight = TCP_STREAM_HEADER_SIZE;
                        rg->busy = false;
                        j->n_busy--;
                        if (j->status == 0)
                                j->status = -ECANCELED;
                }
                job_check_locked(td, j);
        }
        pthread_mutex_unlock(&td->lock);
}

static int recv_submit(TcpData *td, Job *j)
{
        uint32_t wake = 0;

        pthread_mutex_lock(&td->lock);
        if (table_find(td->recv_table, j->id)) {
                pthread_mutex_unlock(&td->lock);
                free(j);
                return -EEXIST;
        }
        clist_link_tail(table_bucket(td->recv_table, j->id), &j->link_table);
        /* Under the lock, so a thread that finds no job sees this bump afterwards. */
        atomic_fetch_add(&td->recv_gen, 1);
        for (unsigned i = 0; i < td->n_conns; i++)
                if (td->conns[i].waiting)
                        wake |= UINT32_C(1) << i;
        pthread_mutex_unlock(&td->lock);

        if (j->done)
                td->stats.jobs_in_flight++;
        wake_conns(td, wake, false);
        return 0;
}

int tcp_data_recv(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                  tcp_data_done_fn done, void *userdata)
{
        uint64_t total;
        Job *j;
        int r;

        if (!td || (n > 0 && !segs))
                return -EINVAL;
        r = td_usable(td);
        if (r < 0)
                return r;
        r = tcp_stream_dst_total(segs, n, &total);
        if (r < 0)
                return -EINVAL;
        if (total == 0)
                return -EINVAL;

        j = job_new(td, JOB_RECV, job_id, total, done, userdata);
        if (!j)
                return -ENOMEM;
        j->dst = segs;
        j->n_segs = n;
        return recv_submit(td, j);
}

int tcp_data_recv_discard(TcpData *td, uint64_t job_id, uint64_t total)
{
        Job *j;
        int r;

        if (!td || total == 0)
                return -EINVAL;
        r = td_usable(td);
        if (r < 0)
                return r;

        j = job_new(td, JOB_RECV, job_id, total, NULL, NULL);
        if (!j)
                return -ENOMEM;
        atomic_store(&j->stop, true);
        return recv_submit(td, j);
}

void tcp_data_cancel_recv(TcpData *td, uint64_t job_id)
{
        uint32_t wake = 0;
        Job *j;

        if (!td || td->freeing)
                return;
        pthread_mutex_lock(&td->lock);
        j = table_find(td->recv_table, job_id);
        if (j && !j->notified && !j->notify_due) {
                atomic_store_explicit(&j->stop, true, memory_order_relaxed);
                if (j->status == 0)
                        j->status = -ECANCELED;
                /* Threads writing into it switch to discarding at their next turn: wake them. */
                for (unsigned i = 0; i < j->n_ranges; i++)
                        if (j->ranges[i].busy)
                                wake |= UINT32_C(1) << j->ranges[i].conn;
                job_check_locked(td, j);
        }
        pthread_mutex_unlock(&td->lock);
        wake_conns(td, wake, false);
}

bool tcp_data_is_broken(const TcpData *td)
{
        return td_usable(td) < 0;
}

unsigned tcp_data_n_conns(const TcpData *td)
{
        return td ? td->n_conns : 0;
}

void tcp_data_get_stats(const TcpData *td, TcpDataStats *ret)
{
        *ret = td->stats;
        ret->bytes_sent = 0;
        ret->bytes_received = 0;
        for (unsigned i = 0; i < td->n_conns; i++) {
                const Conn *c = &td->conns[i];

                ret->bytes_sent += atomic_load_explicit(&c->bytes_sent, memory_order_relaxed);
                ret->bytes_received +=
                        atomic_load_explicit(&c->bytes_received, memory_order_relaxed);
        }
}
