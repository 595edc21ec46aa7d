/* SPDX-License-Identifier: MIT */
/*
 * Copy engine: a small pool of threads that copy memory off the control loop. A task is a list
 * of (dst, src, len) copies; the engine cuts it into jobs of bounded size spread over the
 * threads, and when the last job is done it calls the task's callback on the event loop thread
 * (completions come back through a queue and an eventfd). Cancelling a task stops it at the
 * next slice boundary; the callback still runs, once, after every started slice has finished,
 * so no byte is written after the callback. Background work (engine_submit_background()) runs
 * in short steps on one thread at a time, only while no copy waits.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct Engine Engine;
typedef struct EngineTask EngineTask;

typedef struct EngineCopy {
        void *dst;
        const void *src;
        size_t len;
} EngineCopy;

/*
 * Called on the event loop thread: 0 when every byte was copied, -ECANCELED after cancel, a
 * prepare step's error when it failed (engine_submit_prepare()).
 */
typedef void (*engine_done_fn)(EngineTask *task, int status, void *userdata);

/* Starts @n_threads copy threads (1..64) whose completions are dispatched on @base. */
int engine_new(struct event_base *base, unsigned n_threads, Engine **ret);

/*
 * Stops and joins the threads. Tasks still queued are cancelled and their callbacks run before
 * this returns. Accepts NULL; returns NULL.
 */
Engine *engine_free(Engine *e);

/*
 * Queues the copies in @copies (@n entries; the engine keeps its own copy of the array) and
 * returns the task in *@ret (owned by the engine; valid until the callback returns). A task of
 * at most 64 KiB is copied at once on the calling thread, unless the engine is held; its
 * callback still runs from the loop, never from here.
 * Copies are split into slices of at most @slice bytes (0 = default, 1 MiB) for cancellation
 * and spread over the threads. -ENOMEM, -ESHUTDOWN when the engine is stopping.
 */
int engine_submit(Engine *e, const EngineCopy *copies, size_t n, size_t slice, engine_done_fn done,
                  void *userdata, EngineTask **ret);

/*
 * As engine_submit(), but the engine takes @copies (malloc()ed, @n entries) instead of copying
 * it, and frees it, on failure too: no second array for a request of 100,000 blocks.
 */
int engine_submit_take(Engine *e, EngineCopy *copies, size_t n, size_t slice, engine_done_fn done,
                       void *userdata, EngineTask **ret);

/*
 * Makes share @part of @n_parts of a task's copy list off the loop: returns 0 and a malloc()ed
 * array (taken) of *@ret_n copies, or a negative errno. Runs on a copy thread, never on the
 * loop; the shares of one task may be made at once on several threads.
 */
typedef int (*engine_prepare_fn)(void *userdata, size_t part, size_t n_parts,
                                 EngineCopy **ret_copies, size_t *ret_n);

/*
 * As engine_submit_take(), but the copy list is made by @prepare(@prepare_data, ...) on copy
 * threads when its turn in the queue comes, so that a list of 100,000 copies costs the loop
 * nothing: in up to @max_parts shares (at most one per thread; 0 counts as 1), each made by
 * whichever thread comes first and copied as soon as it is made, so the threads make a long list
 * side by side instead of waiting for one of them. A @prepare that fails cancels the task, which
 * completes with its error (the first share's to fail); copies of the other shares made before
 * that may have landed. A task cancelled before its copies are queued completes with -ECANCELED
 * and copies nothing.
 * Never copies on the calling thread.
 */
int engine_submit_prepare(Engine *e, engine_prepare_fn prepare, void *prepare_data,
                          size_t max_parts, engine_done_fn done, void *userdata, EngineTask **ret);

/*
 * One step of background work, on a copy thread: 1 when there is more to do, 0 when it is all
 * done, a negative errno when it failed (the task then completes with -ECANCELED).
 */
typedef int (*engine_step_fn)(void *userdata);

/*
 * Queues background work: @step(@step_data) is called on a copy thread, over and over, while no
 * job of a task waits, until it returns 0 or less or the task is cancelled; then @done runs on the
 * loop (0 when every step succeeded, -ECANCELED otherwise). A copy that is queued waits for the
 * step that runs at most, so a step should be short (well under a millisecond). -ENOMEM,
 * -ESHUTDOWN. Never calls @step on the calling thread.
 */
int engine_submit_background(Engine *e, engine_step_fn step, void *step_data, engine_done_fn done,
                             void *userdata, EngineTask **ret);

/* Asks @task to stop; its callback reports -ECANCELED unless it had already finished. */
void engine_cancel(EngineTask *task);

/*
 * While @hold is true the threads take no new jobs (running ones finish); queued tasks can still
 * be cancelled or freed. For tests and for draining: it lets a caller act on tasks that have
 * certainly not started.
 */
void engine_hold(Engine *e, bool hold);

/*
 * Bytes of @task copied so far: a snapshot, which each copy thread adds to a megabyte at a time
 * and at the end of each of its jobs, so every byte is counted by the time the callback runs.
 */
size_t engine_task_bytes_done(EngineTask *task);

/* The number of copy threads. */
unsigned engine_n_threads(const Engine *e);

/*
 * Whether the threads copy the tasks of 16 MiB or more with streaming stores (copy-stream.h):
 * where the CPU has them (x86-64 with AVX2), unless turned off. False for NULL.
 */
bool engine_streams(const Engine *e);

/* Turns the streaming stores off (@on false) or back on where the CPU has them; before any task. */
void engine_set_streaming(Engine *e, bool on);

/*
 * Bytes the threads copied with streaming stores so far: of those tasks, the copies of 256 bytes
 * or more (a copy cut between two jobs in pieces, each piece of 256 bytes or more); 0 for NULL.
 */
size_t engine_bytes_streamed(Engine *e);
