/* SPDX-License-Identifier: MIT */
/* Copy engine: copy threads fed from one job queue, completions handed back through an eventfd. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/clist.h"
#include "daemon/transport/copy-stream.h"
#include "daemon/transport/engine.h"
#include "common/macro.h"
#include "common/thread-nice.h"

#define ENGINE_MAX_THREADS 64
#define ENGINE_DEFAULT_SLICE ((size_t)1 << 20)
/* Small copies are batched into jobs of at least this much, so queue traffic stays low. */
#define ENGINE_MIN_JOB_BYTES ((size_t)256 << 10)
/*
 * A big task is cut into about this many jobs per thread, so the threads finish together: the
 * last one ends at most a job after the others, and a thread that started late (woken late, or
 * planning the task) takes fewer jobs. With 4 a 78 MiB request of 4 KiB blocks ended with one
 * thread copying alone for 110-150 us; with 64, 25-30 us. A job is one lock round trip.
 */
#define ENGINE_JOBS_PER_THREAD 64
/*
 * A task of at most this many bytes is copied on the submitting (loop) thread: waking a copy
 * thread and the loop again through the eventfd costs more than copying 64 KiB.
 */
#define ENGINE_INLINE_BYTES ((size_t)64 << 10)
/*
 * A copy thread adds to a task's progress counter after this many bytes, not after every copy:
 * the counter's cache line is shared by every thread copying for the task, and a locked add
 * after each 4 KiB block waits for the block's stores and fights the other threads for the line.
 */
#define ENGINE_REPORT_BYTES ((size_t)1 << 20)
/*
 * A task of at least this many bytes (a prepared task's share: its bytes times the shares) is
 * copied with streaming stores where the CPU has them (copy-stream.h): its destination cannot
 * stay in the cache, and an ordinary store reads each destination line before writing it. Two
 * threads copying 20,000 scattered 4 KiB blocks took 3.2-4.0 ms so against 4.0-4.8 ms with
 * memcpy() in a test program; 64 KiB and 1 MiB blocks gained as much (docs/benchmarks.md). A
 * smaller task's bytes may still be read from the cache by whoever waits for them.
 */
#define ENGINE_STREAM_BYTES ((size_t)16 << 20)
/* Of such a task, the copies of at least this many bytes: a shorter one covers few whole lines. */
#define ENGINE_STREAM_MIN_COPY ((size_t)256)

typedef struct EnginePart EnginePart;

/* A run of bytes of one task: @bytes bytes of its part's copy list, from copy @copy at @offset. */
typedef struct EngineJob {
        CList link; /* on Engine.jobs while queued */
        EngineTask *task;
        EnginePart *part;
        size_t copy;
        size_t offset;
        size_t bytes;
} EngineJob;

/*
 * A share of a task's copies with the jobs cut from it: the whole list of a task submitted with
 * its copies, one of the lists a prepared task's steps make, side by side.
 */
struct EnginePart {
        EngineJob prep; /* the step that makes @copies, or a background task's next step */
        EngineCopy *copies;
        size_t n_jobs; /* queued ones; set under Engine.lock for a prepared part */
        EngineJob *jobs;
        bool stream; /* copied with streaming stores (ENGINE_STREAM_BYTES); set before queued */
};

struct EngineTask {
        Engine *engine;
        CList link_done; /* on Engine.done once no job is queued or running */
        atomic_bool cancel;
        atomic_size_t bytes_done; /* copied so far, for progress reports */
        size_t n_pending;         /* jobs queued or running; under Engine.lock */
        bool incomplete;          /* some byte was left uncopied; under Engine.lock */
        int error;                /* the first failed prepare step's; under Engine.lock */
        engine_done_fn done;
        void *userdata;
        size_t slice;
        /* engine_submit_prepare(): each part's list made by a copy thread first, which then
         * makes its jobs */
        engine_prepare_fn prepare;
        /* engine_submit_background(): its steps (parts[0].prep), run while no job waits */
        engine_step_fn step;
        void *step_data; /* for @prepare or @step */
        size_t n_parts;
        EnginePart *parts; /* &part_inline, or n_parts of their own */
        EnginePart part_inline;
        EngineJob jobs_inline[];
};

struct Engine {
        struct event_base *base;
        struct event *event;
        int efd;
        unsigned n_threads;
        unsigned n_started;
        pthread_t threads[ENGINE_MAX_THREADS];

        pthread_mutex_t lock;
        pthread_cond_t cond;
        CList jobs; /* EngineJob.link, in submission order */
        CList idle; /* EngineJob.link of background tasks' next steps, taken when jobs is empty */
        bool stepping; /* a thread runs a step: one at a time, so the others stay for copies */
        CList done;    /* EngineTask.link_done, waiting for their callback */
        bool stopping;
        bool held;
        bool stream;                  /* the CPU has streaming stores: big tasks use them */
        atomic_size_t bytes_streamed; /* copied with them so far */
};

static EngineTask *task_free(EngineTask *t)
{
        if (!t)
                return NULL;
        for (size_t k = 0; k < t->n_parts; k++) {
                free(t->parts[k].copies);
                if (t->parts[k].jobs != t->jobs_inline)
                        free(t->parts[k].jobs);
        }
        if (t->parts != &t->part_inline)
                free(t->parts);
        free(t);
        return NULL;
}

/* Wakes the event loop, once the done list has become non-empty. */
static void engine_wake(Engine *e)
{
        uint64_t one = 1;
        ssize_t n;

        /* Fails only with EAGAIN when the counter is saturated, and then a wake-up is pending. */
        n = write(e->efd, &one, sizeof(one));
        (void)n;
}

/*
 * With the lock held: one job of @t is over, @ok when it copied all its bytes. True when @t is
 * done and the done list was empty: the caller wakes the loop (engine_wake()) once it has let
 * go of the lock, since a loop woken meanwhile would only wait for the lock (and, raised above
 * the copy threads, take the core of the thread that holds it first).
 */
static bool task_job_finished_locked(Engine *e, EngineTask *t, bool ok)
{
        bool wake;

        if (!ok)
                t->incomplete = true;
        if (--t->n_pending > 0)
                return false;
        wake = clist_is_empty(&e->done);
        clist_link_tail(&e->done, &t->link_done);
        return wake;
}

/* task_job_finished_locked(), then the loop woken without the lock held; the lock is held again
 * on return. */
static void task_job_finished_relock(Engine *e, EngineTask *t, bool ok)
{
        if (!task_job_finished_locked(e, t, ok))
                return;
        pthread_mutex_unlock(&e->lock);
        engine_wake(e);
        pthread_mutex_lock(&e->lock);
}

/*
 * From the loop, after queueing work with the lock held and let go: wakes no thread (0), one
 * (1) or all (2). After the unlock, so that a woken thread does not find the lock still held
 * and sleep once more until the loop lets go of it. No wake-up is lost: a thread that checks
 * for work from now on finds it.
 */
static void engine_wake_threads(Engine *e, unsigned wake)
{
        if (wake == 1)
                pthread_cond_signal(&e->cond);
        else if (wake > 1)
                pthread_cond_broadcast(&e->cond);
}

static bool job_run(Engine *e, const EngineJob *job)
{
        EngineTask *t = job->task;
        const EngineCopy *copies = job->part->copies;
        size_t c = job->copy, off = job->offset, left = job->bytes, unreported = 0, streamed = 0;
        bool ok = true, stream = job->part->stream;

        while (left > 0) {
                const EngineCopy *cp = &copies[c];
                size_t n = MIN(cp->len - off, left);

                if (n == 0) {
                        c++;
                        off = 0;
                        continue;
                }
                n = MIN(n, t->slice);
                if (atomic_load_explicit(&t->cancel, memory_order_relaxed)) {
                        ok = false;
                        break;
                }
                if (stream && n >= ENGINE_STREAM_MIN_COPY) {
                        /* the job goes on to the next copy: its first line and page, now */
                        if (left > cp->len - off)
                                copy_stream_prefetch(copies[c + 1].src);
                        copy_stream((char *)cp->dst + off, (const char *)cp->src + off, n);
                        streamed += n;
                } else
                        memcpy((char *)cp->dst + off, (const char *)cp->src + off, n);
                off += n;
                left -= n;
                unreported += n;
                if (unreported >= ENGINE_REPORT_BYTES) {
                        atomic_fetch_add_explicit(&t->bytes_done, unreported, memory_order_relaxed);
                        unreported = 0;
                }
        }
        if (unreported > 0)
                atomic_fetch_add_explicit(&t->bytes_done, unreported, memory_order_relaxed);
        if (streamed > 0) {
                /* before the lock that tells the loop: the streaming stores are not ordered */
                copy_stream_fence();
                atomic_fetch_add_explicit(&e->bytes_streamed, streamed, memory_order_relaxed);
        }
        return ok;
}

/* Whether a part of @total bytes, one of @n_parts of its task, is copied with streaming stores. */
static bool part_streams(const Engine *e, size_t total, size_t n_parts)
{
        return e->stream && total >= ENGINE_STREAM_BYTES / n_parts;
}

static size_t engine_job_bytes(const Engine *e, size_t total, size_t n_parts, size_t *ret_n_jobs);
static void part_make_jobs(EngineTask *t, EnginePart *p, EngineJob *jobs, size_t n_jobs,
                           size_t total, size_t job_bytes);
static int copies_total(const EngineCopy *copies, size_t n, size_t *ret);

/*
 * A copy thread runs the prepare step of part @p of @t (the lock not held), then queues the jobs
 * of the copies it made. Returns with the lock held, the step's own job finished. A failed or
 * cancelled step leaves the task incomplete: its callback reports the step's error, or
 * -ECANCELED.
 */
static void part_prepare(Engine *e, EngineTask *t, EnginePart *p)
{
        EngineCopy *copies = NULL;
        EngineJob *jobs = NULL;
        size_t n = 0, total = 0, job_bytes = 0, n_jobs = 0;
        int r = -ECANCELED;

        if (!atomic_load(&t->cancel))
                r = t->prepare(t->step_data, (size_t)(p - t->parts), t->n_parts, &copies, &n);
        if (r >= 0)
                r = copies_total(copies, n, &total);
        if (r >= 0) {
                job_bytes = engine_job_bytes(e, total, t->n_parts, &n_jobs);
                jobs = n_jobs > 0 ? calloc(n_jobs, sizeof(EngineJob)) : NULL;
                if (n_jobs > 0 && !jobs)
                        r = -ENOMEM;
        }
        if (r >= 0) {
                p->copies = copies;
                p->stream = part_streams(e, total, t->n_parts);
                part_make_jobs(t, p, jobs, n_jobs, total, job_bytes);
        } else {
                free(copies);
                free(jobs);
                jobs = NULL;
        }

        pthread_mutex_lock(&e->lock);
        /* engine_cancel() looks at the jobs, under the lock, once they are queued */
        p->jobs = jobs;
        if (r >= 0 && !atomic_load(&t->cancel) && !e->stopping) {
                p->n_jobs = n_jobs;
                for (size_t j = 0; j < n_jobs; j++)
                        clist_link_tail(&e->jobs, &jobs[j].link);
                t->n_pending += n_jobs;
                if (n_jobs > 1)
                        pthread_cond_broadcast(&e->cond);
        } else if (r >= 0 && n_jobs > 0)
                r = -ECANCELED;
        if (r < 0 && r != -ECANCELED && t->error == 0) {
                /* the task has failed: the other parts need not be made or copied */
                t->error = r;
                atomic_store(&t->cancel, true);
        }
        task_job_finished_relock(e, t, r >= 0);
}

/*
 * A copy thread runs one step of background task @t (the lock not held) and queues the next
 * behind the other background tasks' or finishes the task. Returns with the lock held; the
 * thread goes on to the next job or step itself, so no other thread needs waking.
 */
static void task_step(Engine *e, EngineTask *t)
{
        int r = 0;

        if (!atomic_load(&t->cancel))
                r = t->step(t->step_data);

        pthread_mutex_lock(&e->lock);
        e->stepping = false;
        /* engine_cancel() unlinks a queued step under the lock: it finds this one unlinked */
        if (r > 0 && !atomic_load(&t->cancel) && !e->stopping) {
                clist_link_tail(&e->idle, &t->parts[0].prep.link);
                return;
        }
        task_job_finished_relock(e, t, r == 0 && !atomic_load(&t->cancel));
}

static void *engine_thread(void *userdata)
{
        Engine *e = userdata;

        thread_nice_worker();
        pthread_mutex_lock(&e->lock);
        for (;;) {
                EngineJob *job;
                bool ok;

                while (!e->stopping && (e->held || (clist_is_empty(&e->jobs) &&
                                                    (clist_is_empty(&e->idle) || e->stepping))))
                        pthread_cond_wait(&e->cond, &e->lock);
                /* engine_free() takes the queued jobs itself */
                if (e->stopping)
                        break;

                /* copies first: background work only fills time no copy wants */
                if (clist_is_empty(&e->jobs)) {
                        job = clist_first_entry(&e->idle, EngineJob, link);
                        e->stepping = true;
                } else
                        job = clist_first_entry(&e->jobs, EngineJob, link);
                clist_unlink(&job->link);
                pthread_mutex_unlock(&e->lock);

                if (job == &job->part->prep) {
                        if (job->task->prepare)
                                part_prepare(e, job->task, job->part);
                        else
                                task_step(e, job->task);
                        continue;
                }

                ok = job_run(e, job);

                pthread_mutex_lock(&e->lock);
                task_job_finished_relock(e, job->task, ok);
        }
        pthread_mutex_unlock(&e->lock);
        return NULL;
}

/* Runs the callbacks of every finished task, on the loop thread. */
static void engine_dispatch(Engine *e)
{
        CList list = CLIST_INIT(list);

        pthread_mutex_lock(&e->lock);
        clist_splice_tail(&list, &e->done);
        pthread_mutex_unlock(&e->lock);

        while (!clist_is_empty(&list)) {
                EngineTask *t = clist_first_entry(&list, EngineTask, link_done);

                clist_unlink(&t->link_done);
                /* No job of t is left, and the lock above ordered its last writes before us. */
                t->done(t, !t->incomplete ? 0 : t->error < 0 ? t->error : -ECANCELED, t->userdata);
                task_free(t);
        }
}

static void engine_on_event(evutil_socket_t fd, short what, void *userdata)
{
        Engine *e = userdata;
        uint64_t v;
        ssize_t n;

        /* Reset the counter before taking the list: a later completion writes it again. Only
         * an inline task's event_active() (EV_TIMEOUT alone) finds it unwritten. */
        if (what & EV_READ) {
                n = read(fd, &v, sizeof(v));
                (void)n;
        }
        engine_dispatch(e);
}

Engine *engine_free(Engine *e)
{
        if (!e)
                return NULL;

        pthread_mutex_lock(&e->lock);
        e->stopping = true;
        clist_splice_tail(&e->jobs, &e->idle);
        while (!clist_is_empty(&e->jobs)) {
                EngineJob *job = clist_first_entry(&e->jobs, EngineJob, link);

                clist_unlink(&job->link);
                atomic_store(&job->task->cancel, true);
                /* no wake-up: the done list is dispatched below, after the threads are joined */
                (void)task_job_finished_locked(e, job->task, false);
        }
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);

        for (unsigned i = 0; i < e->n_started; i++)
                pthread_join(e->threads[i], NULL);

        /* Every task is on the done list now: no job is queued and none is running. */
        engine_dispatch(e);

        if (e->event)
                event_free(e->event);
        safe_close(e->efd);
        pthread_cond_destroy(&e->cond);
        pthread_mutex_destroy(&e->lock);
        free(e);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Engine, engine_free);

int engine_new(struct event_base *base, unsigned n_threads, Engine **ret)
{
        _cleanup_(engine_freep) Engine *e = NULL;
        sigset_t all, saved;
        Engine *p;
        int r;

        if (!base || !ret || n_threads < 1 || n_threads > ENGINE_MAX_THREADS)
                return -EINVAL;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        r = pthread_mutex_init(&p->lock, NULL);
        if (r != 0) {
                free(p);
                return -r;
        }
        r = pthread_cond_init(&p->cond, NULL);
        if (r != 0) {
                pthread_mutex_destroy(&p->lock);
                free(p);
                return -r;
        }
        e = p;
        e->base = base;
        e->efd = -1;
        engine_set_streaming(e, true);
        clist_init(&e->jobs);
        clist_init(&e->idle);
        clist_init(&e->done);

        e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (e->efd < 0)
                return -errno;
        e->event = event_new(base, e->efd, EV_READ | EV_PERSIST, engine_on_event, e);
        if (!e->event)
                return -ENOMEM;
        if (event_add(e->event, NULL) < 0)
                return -EIO;

        /* Signals belong to the loop thread: the copy threads start with all of them blocked. */
        sigfillset(&all);
        r = pthread_sigmask(SIG_SETMASK, &all, &saved);
        if (r != 0)
                return -r;
        for (unsigned i = 0; i < n_threads; i++) {
                char name[16];

                r = pthread_create(&e->threads[i], NULL, engine_thread, e);
                if (r != 0)
                        break;
                e->n_started++;
                (void)snprintf(name, sizeof(name), "kvd-copy/%u", i);
                (void)pthread_setname_np(e->threads[i], name);
        }
        (void)pthread_sigmask(SIG_SETMASK, &saved, NULL);
        if (r != 0)
                return -r;

        e->n_threads = n_threads;
        *ret = TAKE_PTR(e);
        return 0;
}

/*
 * The bytes of each job of a part of @total bytes, one of @n_parts, and their number in
 * *@ret_n_jobs: the parts together make about as many jobs as one list would.
 */
static size_t engine_job_bytes(const Engine *e, size_t total, size_t n_parts, size_t *ret_n_jobs)
{
        size_t job_bytes, per_thread;

        if (total == 0) {
                *ret_n_jobs = 0;
                return 0;
        }
        per_thread = (size_t)e->n_threads * ENGINE_JOBS_PER_THREAD;
        per_thread = MAX(per_thread / n_parts, (size_t)1);
        job_bytes = total / per_thread + (total % per_thread != 0);
        job_bytes = MAX(job_bytes, ENGINE_MIN_JOB_BYTES);
        *ret_n_jobs = total / job_bytes + (total % job_bytes != 0);
        return job_bytes;
}

/* Cuts the byte stream of @p's copies into jobs of @job_bytes (the last may be shorter). */
static void part_make_jobs(EngineTask *t, EnginePart *p, EngineJob *jobs, size_t n_jobs,
                           size_t total, size_t job_bytes)
{
        const EngineCopy *copies = p->copies;
        size_t c = 0, off = 0;

        for (size_t j = 0; j < n_jobs; j++) {
                EngineJob *job = &jobs[j];
                size_t left = MIN(job_bytes, total);

                /* start past finished and empty copies, so a job never begins at a copy's end */
                while (off == copies[c].len) {
                        c++;
                        off = 0;
                }
                *job = (EngineJob){
                        .task = t,
                        .part = p,
                        .copy = c,
                        .offset = off,
                        .bytes = left,
                };
                clist_init(&job->link);
                total -= left;
                while (left > 0) {
                        size_t n = MIN(copies[c].len - off, left);

                        if (n == 0) {
                                c++;
                                off = 0;
                                continue;
                        }
                        off += n;
                        left -= n;
                }
        }
}

/* A task of one part with room for @n_jobs jobs, or NULL for want of memory. */
static EngineTask *task_new(Engine *e, size_t n_jobs, engine_done_fn done, void *userdata)
{
        EngineTask *t;

        /* n_jobs <= n_threads * ENGINE_JOBS_PER_THREAD + 1: no overflow */
        t = calloc(1, sizeof(EngineTask) + n_jobs * sizeof(EngineJob));
        if (!t)
                return NULL;
        t->engine = e;
        clist_init(&t->link_done);
        atomic_init(&t->cancel, false);
        atomic_init(&t->bytes_done, 0);
        t->done = done;
        t->userdata = userdata;
        t->slice = ENGINE_DEFAULT_SLICE;
        t->n_parts = 1;
        t->parts = &t->part_inline;
        /* linked only for a prepared or background task, but a list node in every task */
        t->part_inline.prep = (EngineJob){.task = t, .part = &t->part_inline};
        clist_init(&t->part_inline.prep.link);
        return t;
}

/*
 * A small task, copied here on the loop thread: no copy thread to wake and no eventfd to write.
 * Its callback still runs from the loop, never from engine_submit(): the task goes on the done
 * list and the engine's event is made active, which the loop runs in its next pass.
 */
static int engine_submit_inline(Engine *e, const EngineCopy *copies, size_t n, size_t total,
                                engine_done_fn done, void *userdata, EngineTask **ret)
{
        EngineTask *t;

        t = task_new(e, 0, done, userdata);
        if (!t)
                return -ENOMEM;
        atomic_init(&t->bytes_done, total);

        pthread_mutex_lock(&e->lock);
        if (e->stopping) {
                pthread_mutex_unlock(&e->lock);
                free(t);
                return -ESHUTDOWN;
        }
        pthread_mutex_unlock(&e->lock);

        for (size_t i = 0; i < n; i++)
                memcpy(copies[i].dst, copies[i].src, copies[i].len);

        pthread_mutex_lock(&e->lock);
        clist_link_tail(&e->done, &t->link_done);
        pthread_mutex_unlock(&e->lock);
        event_active(e->event, EV_TIMEOUT, 0);

        if (ret)
                *ret = t;
        return 0;
}

/* Checks @copies and sums their bytes; -EINVAL for a copy without an address or a sum past 2^64. */
static int copies_total(const EngineCopy *copies, size_t n, size_t *ret)
{
        size_t total = 0;

        for (size_t i = 0; i < n; i++) {
                if (copies[i].len > 0 && (!copies[i].dst || !copies[i].src))
                        return -EINVAL;
                if (ADD_OVERFLOW(total, copies[i].len, &total))
                        return -EINVAL;
        }
        *ret = total;
        return 0;
}

/* Queues @copies (@n entries of @total bytes, checked), which the task takes, freed on failure. */
static int engine_queue(Engine *e, EngineCopy *copies, size_t n, size_t total, size_t slice,
                        engine_done_fn done, void *userdata, EngineTask **ret)
{
        EngineTask *t;
        EnginePart *p;
        size_t job_bytes, n_jobs;
        unsigned wake = 0;

        job_bytes = engine_job_bytes(e, total, 1, &n_jobs);
        t = task_new(e, n_jobs, done, userdata);
        if (!t) {
                free(copies);
                return -ENOMEM;
        }
        if (slice > 0)
                t->slice = slice;
        p = t->parts;
        p->copies = copies;
        p->stream = part_streams(e, total, 1);
        p->jobs = t->jobs_inline;
        p->n_jobs = n_jobs;
        part_make_jobs(t, p, p->jobs, n_jobs, total, job_bytes);

        pthread_mutex_lock(&e->lock);
        if (e->stopping) {
                pthread_mutex_unlock(&e->lock);
                task_free(t);
                return -ESHUTDOWN;
        }
        if (n_jobs == 0) {
                /* nothing to copy: complete through the loop all the same, never from here */
                t->n_pending = 1;
                task_job_finished_relock(e, t, true);
        } else {
                for (size_t j = 0; j < n_jobs; j++)
                        clist_link_tail(&e->jobs, &p->jobs[j].link);
                t->n_pending = n_jobs;
                wake = e->held ? 0 : n_jobs == 1 ? 1 : 2;
        }
        pthread_mutex_unlock(&e->lock);
        engine_wake_threads(e, wake);

        if (ret)
                *ret = t;
        return 0;
}

int engine_submit(Engine *e, const EngineCopy *copies, size_t n, size_t slice, engine_done_fn done,
                  void *userdata, EngineTask **ret)
{
        EngineCopy *own = NULL;
        size_t total, bytes;
        int r;

        if (!e || !done || (n > 0 && !copies))
                return -EINVAL;
        r = copies_total(copies, n, &total);
        if (r < 0)
                return r;
        /* held: a test or a drain wants the task queued, not started */
        if (total > 0 && total <= ENGINE_INLINE_BYTES && !e->held)
                return engine_submit_inline(e, copies, n, total, done, userdata, ret);
        if (n > 0) {
                if (MUL_OVERFLOW(n, sizeof(EngineCopy), &bytes))
                        return -ENOMEM;
                own = malloc(bytes);
                if (!own)
                        return -ENOMEM;
                memcpy(own, copies, bytes);
        }
        return engine_queue(e, own, n, total, slice, done, userdata, ret);
}

int engine_submit_take(Engine *e, EngineCopy *copies, size_t n, size_t slice, engine_done_fn done,
                       void *userdata, EngineTask **ret)
{
        size_t total;
        int r;

        if (!e || !done || (n > 0 && !copies)) {
                free(copies);
                return -EINVAL;
        }
        r = copies_total(copies, n, &total);
        if (r >= 0 && total > 0 && total <= ENGINE_INLINE_BYTES && !e->held)
                r = engine_submit_inline(e, copies, n, total, done, userdata, ret);
        else if (r >= 0)
                return engine_queue(e, copies, n, total, slice, done, userdata, ret);
        free(copies);
        return r;
}

/*
 * A task whose jobs at first are steps of its own (EnginePart.prep): the @n_parts steps of
 * @prepare, queued with the copies, or, with @step instead, background work on parts[0], queued
 * on the idle list. -ENOMEM, -ESHUTDOWN.
 */
static int engine_submit_step(Engine *e, engine_prepare_fn prepare, size_t n_parts,
                              engine_step_fn step, void *step_data, engine_done_fn done,
                              void *userdata, EngineTask **ret)
{
        EngineTask *t;
        unsigned wake;

        t = task_new(e, 0, done, userdata);
        if (!t)
                return -ENOMEM;
        if (n_parts > 1) {
                t->parts = calloc(n_parts, sizeof(EnginePart));
                if (!t->parts) {
                        free(t);
                        return -ENOMEM;
                }
        }
        t->n_parts = n_parts;
        t->prepare = prepare;
        t->step = step;
        t->step_data = step_data;

        pthread_mutex_lock(&e->lock);
        if (e->stopping) {
                pthread_mutex_unlock(&e->lock);
                task_free(t);
                return -ESHUTDOWN;
        }
        for (size_t k = 0; k < n_parts; k++) {
                t->parts[k].prep = (EngineJob){.task = t, .part = &t->parts[k]};
                clist_link_tail(step ? &e->idle : &e->jobs, &t->parts[k].prep.link);
        }
        t->n_pending = n_parts;
        /* a thread that runs a step takes the next itself */
        wake = e->held || (n_parts == 1 && step && e->stepping) ? 0 : n_parts > 1 ? 2 : 1;
        pthread_mutex_unlock(&e->lock);
        engine_wake_threads(e, wake);

        if (ret)
                *ret = t;
        return 0;
}

int engine_submit_prepare(Engine *e, engine_prepare_fn prepare, void *prepare_data,
                          size_t max_parts, engine_done_fn done, void *userdata, EngineTask **ret)
{
        if (!e || !prepare || !done)
                return -EINVAL;
        max_parts = MIN(MAX(max_parts, (size_t)1), (size_t)e->n_threads);
        return engine_submit_step(e, prepare, max_parts, NULL, prepare_data, done, userdata, ret);
}

int engine_submit_background(Engine *e, engine_step_fn step, void *step_data, engine_done_fn done,
                             void *userdata, EngineTask **ret)
{
        if (!e || !step || !done)
                return -EINVAL;
        return engine_submit_step(e, NULL, 1, step, step_data, done, userdata, ret);
}

void engine_cancel(EngineTask *task)
{
        Engine *e;
        size_t removed = 0;

        if (!task)
                return;
        e = task->engine;
        atomic_store(&task->cancel, true);

        /* Queued jobs go now, so a cancelled task completes without waiting for its turn. */
        pthread_mutex_lock(&e->lock);
        for (size_t k = 0; k < task->n_parts; k++) {
                EnginePart *p = &task->parts[k];

                if (clist_is_linked(&p->prep.link)) {
                        clist_unlink(&p->prep.link);
                        removed++;
                }
                for (size_t j = 0; j < p->n_jobs; j++)
                        if (clist_is_linked(&p->jobs[j].link)) {
                                clist_unlink(&p->jobs[j].link);
                                removed++;
                        }
        }
        if (removed > 0) {
                task->n_pending -= removed - 1;
                task_job_finished_relock(e, task, false);
        }
        pthread_mutex_unlock(&e->lock);
}

void engine_hold(Engine *e, bool hold)
{
        if (!e)
                return;
        pthread_mutex_lock(&e->lock);
        e->held = hold;
        if (!hold)
                pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
}

size_t engine_task_bytes_done(EngineTask *task)
{
        return atomic_load_explicit(&task->bytes_done, memory_order_relaxed);
}

bool engine_streams(const Engine *e)
{
        return e && e->stream;
}

void engine_set_streaming(Engine *e, bool on)
{
        if (e)
                e->stream = on && copy_stream_available();
}

size_t engine_bytes_streamed(Engine *e)
{
        return e ? atomic_load_explicit(&e->bytes_streamed, memory_order_relaxed) : 0;
}

unsigned engine_n_threads(const Engine *e)
{
        return e ? e->n_threads : 0;
}
