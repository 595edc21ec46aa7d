/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport, posting half: each device's posting thread, which calls ibv_post_send() for
 * the chains of work requests the control loop built. Posting can take long: soft-RoCE (rxe)
 * runs the requester inside ibv_post_send(), moving the bytes of the whole send queue before it
 * returns, and a NIC under load can be slow to take a doorbell. The loop only queues chains
 * here, so it keeps answering clients and peers and keeps its timers (deadlines, heartbeats)
 * on time while RDMA jobs run.
 *
 * The thread touches verbs objects only (it posts to a queue pair); jobs, slots and queue pairs'
 * bookkeeping stay on the loop. A chain that ibv_post_send() refuses goes back to the loop
 * through a list and an eventfd. Before the loop destroys a queue pair it takes back the chains
 * still queued for it, moves it to the error state (which ends a post in progress soon: rxe's
 * requester stops at its next packet) and waits until the thread left it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/clist.h"
#include "common/log.h"
#include "common/thread-nice.h"
#include "daemon/transport/rdma-internal.h"

/* Posted chains kept for reuse, so a long job does not allocate one per chain. */
#define RDMA_POST_SPARE 64

/* Takes @post back into the spare list or frees it; under the lock. */
static void rdma_post_recycle_locked(RdmaPoster *p, RdmaPost *post)
{
        if (p->n_spare < RDMA_POST_SPARE) {
                clist_link_tail(&p->spare, &post->link);
                p->n_spare++;
        } else
                free(post);
}

/* Moves every chain of @q on @list to the spare list; under the lock. */
static void rdma_post_drop_locked(RdmaPoster *p, CList *list, const RdmaQp *q)
{
        RdmaPost *post, *tmp;

        CLIST_FOREACH_SAFE (post, tmp, list, link)
                if (post->q == q) {
                        clist_unlink(&post->link);
                        rdma_post_recycle_locked(p, post);
                }
}

static void *rdma_poster_thread(void *userdata)
{
        RdmaDevice *dev = userdata;
        RdmaPoster *p = &dev->poster;

        thread_nice_worker();
        pthread_mutex_lock(&p->lock);
        for (;;) {
                struct ibv_send_wr *bad = NULL;
                RdmaPost *post;
                bool wake;
                int r;

                while (!p->stop && clist_is_empty(&p->queue)) {
                        p->idle = true;
                        pthread_cond_wait(&p->wake, &p->lock);
                }
                p->idle = false;
                if (p->stop)
                        break;
                post = clist_first_entry(&p->queue, RdmaPost, link);
                clist_unlink(&post->link);
                p->busy = post->q;
                pthread_mutex_unlock(&p->lock);

                r = ibv_post_send(post->qp, post->wrs, &bad);

                pthread_mutex_lock(&p->lock);
                p->busy = NULL;
                if (p->waiting)
                        pthread_cond_broadcast(&p->left);
                if (r == 0) {
                        rdma_post_recycle_locked(p, post);
                        continue;
                }
                /* The queue pair's later chains would run ahead of this one's requests: they
                 * go, and the loop fails the job and flushes the queue pair. */
                rdma_post_drop_locked(p, &p->queue, post->q);
                post->error = r;
                wake = clist_is_empty(&p->refused);
                clist_link_tail(&p->refused, &post->link);
                if (wake && eventfd_write(p->efd, 1) < 0)
                        log_error("RDMA device %s: cannot wake the control loop: %m", dev->name);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* Hands each refused chain to the loop's job code, one at a time: handling one may destroy
 * queue pairs that later ones name, and destroying a queue pair drops its entries here. */
static void rdma_poster_on_refused(evutil_socket_t fd, short what, void *userdata)
{
        RdmaDevice *dev = userdata;
        RdmaPoster *p = &dev->poster;
        eventfd_t v;

        /* Reset the counter before taking the list: a later refusal writes it again. */
        (void)eventfd_read(fd, &v);
        for (;;) {
                RdmaPost *post = NULL;
                RdmaQp *q;
                int error;

                pthread_mutex_lock(&p->lock);
                if (!clist_is_empty(&p->refused)) {
                        post = clist_first_entry(&p->refused, RdmaPost, link);
                        clist_unlink(&post->link);
                        q = post->q;
                        error = post->error;
                        rdma_post_recycle_locked(p, post);
                }
                pthread_mutex_unlock(&p->lock);
                if (!post)
                        return;
                rdma_qp_refused(q, -error);
        }
}

int rdma_poster_start(RdmaDevice *dev, struct event_base *base)
{
        RdmaPoster *p = &dev->poster;
        sigset_t all, saved;
        char name[16];
        int r;

        clist_init(&p->queue);
        clist_init(&p->refused);
        clist_init(&p->spare);
        p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (p->efd < 0)
                return -errno;
        r = pthread_mutex_init(&p->lock, NULL);
        if (r != 0)
                return -r;
        p->lock_init = true;
        r = pthread_cond_init(&p->wake, NULL);
        if (r == 0)
                r = pthread_cond_init(&p->left, NULL);
        if (r != 0)
                return -r;
        p->cond_init = true;
        p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, rdma_poster_on_refused, dev);
        if (!p->ev)
                return -ENOMEM;
        if (event_add(p->ev, NULL) < 0)
                return -EIO;

        /* Signals belong to the loop thread: the posting thread starts with all of them blocked. */
        sigfillset(&all);
        r = pthread_sigmask(SIG_SETMASK, &all, &saved);
        if (r != 0)
                return -r;
        r = pthread_create(&p->thread, NULL, rdma_poster_thread, dev);
        (void)pthread_sigmask(SIG_SETMASK, &saved, NULL);
        if (r != 0)
                return -r;
        p->started = true;
        /* "kvd-post/" and as much of the device's name as a thread name holds. */
        (void)snprintf(name, sizeof(name), "kvd-post/%.6s", dev->name);
        (void)pthread_setname_np(p->thread, name);
        return 0;
}

void rdma_poster_stop(RdmaDevice *dev)
{
        RdmaPoster *p = &dev->poster;
        RdmaPost *post, *tmp;

        if (p->started) {
                pthread_mutex_lock(&p->lock);
                p->stop = true;
                pthread_cond_signal(&p->wake);
                pthread_mutex_unlock(&p->lock);
                (void)pthread_join(p->thread, NULL);
                p->started = false;
        }
        if (p->ev)
                event_free(p->ev);
        p->ev = NULL;
        /* Every queue pair is gone by now, and with them their chains: only spares are left. */
        if (p->lock_init) {
                CLIST_FOREACH_SAFE (post, tmp, &p->spare, link) {
                        clist_unlink(&post->link);
                        free(post);
                }
                p->n_spare = 0;
        }
        if (p->cond_init) {
                pthread_cond_destroy(&p->wake);
                pthread_cond_destroy(&p->left);
                p->cond_init = false;
        }
        if (p->lock_init) {
                pthread_mutex_destroy(&p->lock);
                p->lock_init = false;
        }
        if (p->efd >= 0)
                (void)close(p->efd);
        p->efd = -1;
}

RdmaPost *rdma_post_new(RdmaDevice *dev)
{
        RdmaPoster *p = &dev->poster;
        RdmaPost *post = NULL;

        pthread_mutex_lock(&p->lock);
        if (!clist_is_empty(&p->spare)) {
                post = clist_first_entry(&p->spare, RdmaPost, link);
                clist_unlink(&post->link);
                p->n_spare--;
        }
        pthread_mutex_unlock(&p->lock);
        return post ? post : malloc(sizeof(*post));
}

void rdma_post_queue(RdmaDevice *dev, RdmaPost *post)
{
        RdmaPoster *p = &dev->poster;

        post->error = 0;
        pthread_mutex_lock(&p->lock);
        clist_link_tail(&p->queue, &post->link);
        if (p->idle)
                pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);
}

void rdma_poster_take_back(RdmaDevice *dev, const RdmaQp *q)
{
        RdmaPoster *p = &dev->poster;

        pthread_mutex_lock(&p->lock);
        rdma_post_drop_locked(p, &p->queue, q);
        pthread_mutex_unlock(&p->lock);
}

void rdma_poster_wait_out(RdmaDevice *dev, const RdmaQp *q)
{
        RdmaPoster *p = &dev->poster;

        pthread_mutex_lock(&p->lock);
        /* Nothing of @q is queued any more (rdma_poster_take_back()), and the loop, the only one
         * to queue chains, is here: once the thread left @q it does not come back. */
        rdma_post_drop_locked(p, &p->queue, q);
        p->waiting = true;
        while (p->busy == q)
                pthread_cond_wait(&p->left, &p->lock);
        p->waiting = false;
        /* A refusal the thread reported meanwhile names a queue pair about to go. */
        rdma_post_drop_locked(p, &p->refused, q);
        pthread_mutex_unlock(&p->lock);
}
