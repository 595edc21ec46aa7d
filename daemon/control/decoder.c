/* SPDX-License-Identifier: MIT */
/* Decoder: one thread decoding big request payloads, its results handed back through an eventfd. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/clist.h"
#include "common/macro.h"
#include "common/thread-nice.h"
#include "daemon/control/decoder.h"
#include "proto/frame.h"

struct DecodeJob {
        CList link; /* Decoder.queue, then Decoder.done */
        const ProtobufCMessageDescriptor *desc;
        uint8_t *payload;
        size_t len;
        int r;
        ProtobufCMessage *msg;
        FrameListFacts facts[FRAME_LIST_FACTS_MAX];
        size_t n_facts;
        decode_done_fn done; /* NULL once forgotten */
        void *userdata;
};

struct Decoder {
        struct event *event;
        int efd;
        pthread_t thread;
        bool started;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        CList queue; /* DecodeJob.link, to decode */
        CList done;  /* DecodeJob.link, decoded, waiting for the loop */
        bool stopping;
};

static void job_free(DecodeJob *job)
{
        if (job->msg)
                protobuf_c_message_free_unpacked(job->msg, NULL);
        free(job->payload);
        free(job);
}

static void *decoder_thread(void *userdata)
{
        Decoder *d = userdata;

        thread_nice_worker();
        pthread_mutex_lock(&d->lock);
        for (;;) {
                DecodeJob *job;
                uint64_t one = 1;
                ssize_t n;
                bool wake;

                while (!d->stopping && clist_is_empty(&d->queue))
                        pthread_cond_wait(&d->cond, &d->lock);
                if (d->stopping)
                        break;
                job = clist_first_entry(&d->queue, DecodeJob, link);
                clist_unlink(&job->link);
                pthread_mutex_unlock(&d->lock);

                job->r = frame_unpack_facts(job->desc, job->payload, job->len, &job->msg,
                                            job->facts, &job->n_facts);
                if (job->r < 0)
                        job->msg = NULL;
                free(TAKE_PTR(job->payload));

                pthread_mutex_lock(&d->lock);
                wake = clist_is_empty(&d->done);
                clist_link_tail(&d->done, &job->link);
                if (wake) {
                        /* With the lock let go: a loop woken under it would only wait for it
                         * (raised above this thread, on this thread's core). Fails only with
                         * EAGAIN when the counter is saturated: a wake-up is pending then. */
                        pthread_mutex_unlock(&d->lock);
                        n = write(d->efd, &one, sizeof(one));
                        (void)n;
                        pthread_mutex_lock(&d->lock);
                }
        }
        pthread_mutex_unlock(&d->lock);
        return NULL;
}

/* On the loop: the callbacks of every decoded job. */
static void decoder_on_event(evutil_socket_t fd, short what, void *userdata)
{
        Decoder *d = userdata;
        CList list = CLIST_INIT(list);
        uint64_t v;
        ssize_t n;

        /* Reset the counter before taking the list: a later job writes it again. */
        n = read(fd, &v, sizeof(v));
        (void)n;

        pthread_mutex_lock(&d->lock);
        clist_splice_tail(&list, &d->done);
        pthread_mutex_unlock(&d->lock);

        while (!clist_is_empty(&list)) {
                DecodeJob *job = clist_first_entry(&list, DecodeJob, link);

                clist_unlink(&job->link);
                if (job->done)
                        job->done(job, job->len, job->r, TAKE_PTR(job->msg), job->facts,
                                  job->n_facts, job->userdata);
                job_free(job);
        }
}

int decoder_new(struct event_base *base, Decoder **ret)
{
        sigset_t all, old;
        Decoder *d;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->efd = -EBADF;
        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->cond, NULL);
        clist_init(&d->queue);
        clist_init(&d->done);

        d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (d->efd < 0) {
                r = -errno;
                decoder_free(d);
                return r;
        }
        d->event = event_new(base, d->efd, EV_READ | EV_PERSIST, decoder_on_event, d);
        if (!d->event || event_add(d->event, NULL) < 0) {
                decoder_free(d);
                return -ENOMEM;
        }

        /* Signals are the loop's (signalfd, sd_event): the thread blocks them all. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = -pthread_create(&d->thread, NULL, decoder_thread, d);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                decoder_free(d);
                return r;
        }
        d->started = true;
        (void)pthread_setname_np(d->thread, "kvd-decode");
        *ret = d;
        return 0;
}

Decoder *decoder_free(Decoder *d)
{
        if (!d)
                return NULL;

        pthread_mutex_lock(&d->lock);
        d->stopping = true;
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
        if (d->started)
                pthread_join(d->thread, NULL);

        /* The thread is gone: no lock needed for what it left, decoded or not. */
        clist_splice_tail(&d->done, &d->queue);
        while (!clist_is_empty(&d->done)) {
                DecodeJob *job = clist_first_entry(&d->done, DecodeJob, link);

                clist_unlink(&job->link);
                job_free(job);
        }
        if (d->event)
                event_free(d->event);
        safe_close(d->efd);
        pthread_cond_destroy(&d->cond);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return NULL;
}

int decoder_submit(Decoder *d, const ProtobufCMessageDescriptor *desc, uint8_t *payload, size_t len,
                   decode_done_fn done, void *userdata, DecodeJob **ret)
{
        DecodeJob *job;

        if (!d || !desc || !done || !ret) {
                free(payload);
                return -EINVAL;
        }
        job = calloc(1, sizeof(*job));
        if (!job) {
                free(payload);
                return -ENOMEM;
        }
        *job = (DecodeJob){
                .desc = desc,
                .payload = payload,
                .len = len,
                .done = done,
                .userdata = userdata,
        };
        clist_init(&job->link);

        pthread_mutex_lock(&d->lock);
        if (d->stopping) {
                pthread_mutex_unlock(&d->lock);
                job_free(job);
                return -ESHUTDOWN;
        }
        clist_link_tail(&d->queue, &job->link);
        pthread_cond_signal(&d->cond);
        pthread_mutex_unlock(&d->lock);
        *ret = job;
        return 0;
}

void decoder_forget(DecodeJob *job)
{
        /* Only the loop reads done and userdata (decoder_on_event()): no lock. */
        if (job) {
                job->done = NULL;
                job->userdata = NULL;
        }
}
