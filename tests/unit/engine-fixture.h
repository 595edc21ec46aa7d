/* SPDX-License-Identifier: MIT */
/* Copy engine test fixture: guarded buffers, seeded patterns and a callback that counts. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/transport/engine.h"

struct event_base;

#define GUARD 4096
#define GUARD_BYTE 0xa5
#define FRESH_BYTE 0x5a

/* A destination buffer with GUARD bytes of GUARD_BYTE on both sides, FRESH_BYTE inside. */
typedef struct Buf {
        uint8_t *mem;
        size_t size;
} Buf;

uint8_t *buf_data(Buf *b);
void buf_init(Buf *b, size_t size);
void buf_deinit(Buf *b);

/* Aborts the test when a guard byte around @b was written. */
void assert_guards(const Buf *b);

/* Whether every byte inside @b is still FRESH_BYTE. */
bool buf_untouched(Buf *b);

/* A seeded byte pattern that never equals FRESH_BYTE, so a missed byte is always visible. */
uint8_t *pattern_new(size_t size, uint32_t seed);

/* What on_done() saw of a task. */
typedef struct Done {
        unsigned calls;
        int status;
        EngineTask *task;
        Engine *engine; /* for the submit-while-stopping check */
        int submit_r;
        unsigned *counter;
        size_t progress; /* engine_task_bytes_done() when the callback ran */
} Done;

/* An engine_done_fn over a Done: counts the call (and *counter), keeps status and progress. */
void on_done(EngineTask *task, int status, void *userdata);

/*
 * Asserts what @e streamed (engine_bytes_streamed()) since @before, for a task of @total bytes:
 * where the CPU can and @streams, more than 90% and at most all of them (copies cut between jobs
 * may leave ends too short to stream), else nothing.
 */
void assert_streamed(Engine *e, size_t before, size_t total, bool streams);

/* Runs @base until *@counter reaches @want. */
void run_until(struct event_base *base, const unsigned *counter, unsigned want);

/*
 * Share @part of @n_parts of @n copies of @len bytes, copy i from @src + i*len to slot n-1-i of
 * @dst (share k being copies [n*k/K, n*(k+1)/K)): in *@ret (malloc()ed) and *@ret_n. -ENOMEM.
 */
int reversed_share(uint8_t *dst, const uint8_t *src, size_t n, size_t len, size_t part,
                   size_t n_parts, EngineCopy **ret, size_t *ret_n);
