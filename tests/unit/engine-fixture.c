/* SPDX-License-Identifier: MIT */
/* Copy engine test fixture (engine-fixture.h). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/transport/copy-stream.h"
#include "tests/unit/engine-fixture.h"

uint8_t *buf_data(Buf *b)
{
        return b->mem + GUARD;
}

void buf_init(Buf *b, size_t size)
{
        b->size = size;
        b->mem = malloc(size + 2 * GUARD);
        ck_assert_ptr_nonnull(b->mem);
        memset(b->mem, GUARD_BYTE, GUARD);
        memset(b->mem + GUARD, FRESH_BYTE, size);
        memset(b->mem + GUARD + size, GUARD_BYTE, GUARD);
}

void buf_deinit(Buf *b)
{
        free(b->mem);
        b->mem = NULL;
}

/* Loops check without ck_assert: every ck_assert records its location, which is slow. */
void assert_guards(const Buf *b)
{
        for (size_t i = 0; i < GUARD; i++)
                if (b->mem[i] != GUARD_BYTE || b->mem[GUARD + b->size + i] != GUARD_BYTE)
                        ck_abort_msg("guard byte %zu around a %zu-byte buffer was written", i,
                                     b->size);
}

bool buf_untouched(Buf *b)
{
        const uint8_t *d = buf_data(b);

        for (size_t i = 0; i < b->size; i++)
                if (d[i] != FRESH_BYTE)
                        return false;
        return true;
}

/* A seeded byte pattern that never equals FRESH_BYTE, so a missed byte is always visible. */
uint8_t *pattern_new(size_t size, uint32_t seed)
{
        uint8_t *p = malloc(size);
        uint32_t x = seed * 2654435761u + 1;

        ck_assert_ptr_nonnull(p);
        for (size_t i = 0; i < size; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                p[i] = (uint8_t)x;
                if (p[i] == FRESH_BYTE)
                        p[i] = 0;
        }
        return p;
}

void on_done(EngineTask *task, int status, void *userdata)
{
        Done *d = userdata;

        d->calls++;
        d->status = status;
        d->progress = engine_task_bytes_done(task);
        if (d->task)
                ck_assert_ptr_eq(task, d->task);
        if (d->counter)
                (*d->counter)++;
        if (d->engine) {
                EngineCopy c = {NULL, NULL, 0};

                d->submit_r = engine_submit(d->engine, &c, 1, 0, on_done, d, NULL);
        }
}

void assert_streamed(Engine *e, size_t before, size_t total, bool streams)
{
        size_t streamed = engine_bytes_streamed(e) - before;

        if (copy_stream_available() && streams) {
                ck_assert_uint_gt(streamed, total * 9 / 10);
                ck_assert_uint_le(streamed, total);
        } else
                ck_assert_uint_eq(streamed, 0);
}

void run_until(struct event_base *base, const unsigned *counter, unsigned want)
{
        while (*counter < want)
                ck_assert_int_ge(event_base_loop(base, EVLOOP_ONCE), 0);
}

int reversed_share(uint8_t *dst, const uint8_t *src, size_t n, size_t len, size_t part,
                   size_t n_parts, EngineCopy **ret, size_t *ret_n)
{
        size_t lo = n * part / n_parts, hi = n * (part + 1) / n_parts;
        EngineCopy *c = malloc((hi > lo ? hi - lo : 1) * sizeof(EngineCopy));

        if (!c)
                return -ENOMEM;
        for (size_t i = lo; i < hi; i++)
                c[i - lo] = (EngineCopy){dst + (n - 1 - i) * len, src + i * len, len};
        *ret = c;
        *ret_n = hi - lo;
        return 0;
}
