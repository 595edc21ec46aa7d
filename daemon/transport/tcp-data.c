/* SPDX-License-Identifier: MIT */
/* TCP data plane, the control loop's side: jobs, placement, cancels, completions. */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "daemon/transport/tcp-data-internal.h"

void tcp_data_job_check_locked(TcpData *td, Job *j)
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
                struct linger lg = {.l_onoff = 1, .l_linger = 0};

                (void)setsockopt(td->conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                td->conns[i].fd = safe_close(td->conns[i].fd);
        }

        /* No thread runs any more: jobs that completed get their own status first. */
        td_dispatch(td, true);

        pthread_mutex_lock(&td->lock);
        for (unsigned b = 0; b < TABLE_BUCKETS; b++) {
                CList *tables[2] = {&td->send_table[b], &td->recv_table[b]};

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

                r = pthread_create(&td->conns[i].thread, NULL, tcp_data_conn_thread, &td->conns[i]);
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
        atomic_init(&j->bytes_moved, 0);
        for (int i = 0; i < n; i++) {
                j->ranges[i] = (Range){.job = j, .r = ranges[i]};
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

/*
 * What every submission checks first: -EINVAL without a TcpData or for a NULL list with entries,
 * td_usable()'s error when the TcpData is broken or being freed.
 */
static int submit_check(TcpData *td, const void *segs, size_t n)
{
        if (!td || (n > 0 && !segs))
                return -EINVAL;
        return td_usable(td);
}

/* A send job of @total bytes on @td, which submit_check() cleared. */
static int send_start(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                      uint64_t total, tcp_data_done_fn done, void *userdata)
{
        Job *j;

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

int tcp_data_send(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                  tcp_data_done_fn done, void *userdata)
{
        uint64_t total;
        int r;

        /* checked before the count, so that a broken TcpData still says -EPIPE */
        r = submit_check(td, segs, n);
        if (r < 0)
                return r;
        if (tcp_stream_src_total(segs, n, &total) < 0)
                return -EINVAL;
        return send_start(td, job_id, segs, n, total, done, userdata);
}

int tcp_data_send_total(TcpData *td, uint64_t job_id, const TcpSrcSegment *segs, size_t n,
                        uint64_t total, tcp_data_done_fn done, void *userdata)
{
        int r = submit_check(td, segs, n);

        return r < 0 ? r : send_start(td, job_id, segs, n, total, done, userdata);
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

int tcp_data_progress(TcpData *td, uint64_t job_id, bool send, uint64_t *ret)
{
        Job *j;

        if (!td || !ret)
                return -EINVAL;
        pthread_mutex_lock(&td->lock);
        j = table_find(send ? td->send_table : td->recv_table, job_id);
        if (j)
                *ret = MIN(atomic_load_explicit(&j->bytes_moved, memory_order_relaxed), j->total);
        pthread_mutex_unlock(&td->lock);
        return j ? 0 : -ENOENT;
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
                tcp_data_job_check_locked(td, j);
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
        return tcp_data_recv_until(td, job_id, segs, n, 0, done, userdata);
}

/* A receive job of @total bytes on @td, which submit_check() cleared. */
static int recv_start(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                      uint64_t total, usec_t deadline_usec, tcp_data_done_fn done, void *userdata)
{
        Job *j;

        if (total == 0)
                return -EINVAL;
        j = job_new(td, JOB_RECV, job_id, total, done, userdata);
        if (!j)
                return -ENOMEM;
        j->dst = segs;
        j->n_segs = n;
        j->deadline = deadline_usec;
        return recv_submit(td, j);
}

int tcp_data_recv_until(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                        usec_t deadline_usec, tcp_data_done_fn done, void *userdata)
{
        uint64_t total;
        int r;

        /* checked before the count, so that a broken TcpData still says -EPIPE */
        r = submit_check(td, segs, n);
        if (r < 0)
                return r;
        if (tcp_stream_dst_total(segs, n, &total) < 0)
                return -EINVAL;
        return recv_start(td, job_id, segs, n, total, deadline_usec, done, userdata);
}

int tcp_data_recv_until_total(TcpData *td, uint64_t job_id, const TcpDstSegment *segs, size_t n,
                              uint64_t total, usec_t deadline_usec, tcp_data_done_fn done,
                              void *userdata)
{
        int r = submit_check(td, segs, n);

        return r < 0 ? r : recv_start(td, job_id, segs, n, total, deadline_usec, done, userdata);
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
                tcp_data_job_check_locked(td, j);
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
