/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the decoder thread: payloads decoded off the loop and called back on it in
 * the order they came, a payload that does not decode, a forgotten job, and wake-ups of the
 * loop written only once the decoder has let go of its lock (wake-fixture.h: the other thread
 * takes the lock by submitting a job of its own).
 */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/control/decoder.h"
#include "proto/kvdist.pb-c.h"
#include "tests/unit/wake-fixture.h"

#define LIST_LEN 3000 /* long enough for the decoder's own varint path (256 and more) */

typedef struct Seen {
        unsigned calls;
        uint64_t ids[64]; /* request_id of each cancel called back, in order */
        int bad_r;        /* the undecodable payload's status */
        bool bad_seen, list_ok, forgotten_called;
        atomic_uint extra; /* jobs submitted by wake_watch()'s taker */
} Seen;

typedef struct Ctx {
        Decoder *d;
        Seen *seen;
} Ctx;

/* A packed TransferCancel of @id, malloc()ed. */
static uint8_t *cancel_payload(uint64_t id, size_t *ret_len)
{
        Kvdist__V1__TransferCancel m = KVDIST__V1__TRANSFER_CANCEL__INIT;
        uint8_t *buf;

        m.request_id = id;
        *ret_len = protobuf_c_message_get_packed_size(&m.base);
        buf = malloc(*ret_len ? *ret_len : 1);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq(protobuf_c_message_pack(&m.base, buf), *ret_len);
        return buf;
}

static void on_cancel(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                      const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Seen *s = userdata;

        ck_assert_int_eq(r, 0);
        ck_assert_ptr_nonnull(msg);
        ck_assert_uint_lt(s->calls, 64);
        s->ids[s->calls++] = ((Kvdist__V1__TransferCancel *)msg)->request_id;
        protobuf_c_message_free_unpacked(msg, NULL);
}

static void on_bad(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                   const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Seen *s = userdata;

        s->calls++;
        s->bad_seen = true;
        s->bad_r = r;
        ck_assert_ptr_null(msg);
}

static void on_forgotten(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                         const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Seen *s = userdata;

        s->forgotten_called = true;
        protobuf_c_message_free_unpacked(msg, NULL);
}

/* A PeerTransfer of LIST_LEN src ids i*3 and dst ids LIST_LEN-1-i: decoded, with its facts. */
static void on_lists(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                     const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Kvdist__V1__PeerTransfer *t = (Kvdist__V1__PeerTransfer *)msg;
        Seen *s = userdata;
        bool ok = r == 0 && t && t->n_src_blocks == LIST_LEN && t->n_dst_blocks == LIST_LEN;

        for (size_t i = 0; ok && i < LIST_LEN; i++)
                ok = t->src_blocks[i] == 3 * i && t->dst_blocks[i] == LIST_LEN - 1 - i;
        /* the facts of both lists, in the message's field order */
        ok = ok && n_facts == 2 && facts[0].n == LIST_LEN && facts[0].max == 3 * (LIST_LEN - 1) &&
             facts[1].max == LIST_LEN - 1;
        s->list_ok = ok;
        s->calls++;
        if (msg)
                protobuf_c_message_free_unpacked(msg, NULL);
}

static uint8_t *lists_payload(size_t *ret_len)
{
        Kvdist__V1__PeerTransfer t = KVDIST__V1__PEER_TRANSFER__INIT;
        uint64_t *src = calloc(LIST_LEN, sizeof(uint64_t)),
                 *dst = calloc(LIST_LEN, sizeof(uint64_t));
        uint8_t *buf;

        ck_assert(src && dst);
        for (size_t i = 0; i < LIST_LEN; i++) {
                src[i] = 3 * i;
                dst[i] = LIST_LEN - 1 - i;
        }
        t.n_src_blocks = t.n_dst_blocks = LIST_LEN;
        t.src_blocks = src;
        t.dst_blocks = dst;
        *ret_len = protobuf_c_message_get_packed_size(&t.base);
        buf = malloc(*ret_len);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq(protobuf_c_message_pack(&t.base, buf), *ret_len);
        free(src);
        free(dst);
        return buf;
}

static void submit_cancel(Decoder *d, uint64_t id, Seen *s)
{
        DecodeJob *job;
        size_t len;
        uint8_t *p = cancel_payload(id, &len);

        ck_assert_int_eq(decoder_submit(d, &kvdist__v1__transfer_cancel__descriptor, p, len,
                                        on_cancel, s, &job),
                         0);
}

static void run_until_calls(struct event_base *base, const Seen *s, unsigned want)
{
        while (s->calls < want + atomic_load(&s->extra))
                ck_assert_int_ge(event_base_loop(base, EVLOOP_ONCE), 0);
}

START_TEST(test_decodes_in_order)
{
        static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
        struct event_base *base = event_base_new();
        Seen s = {};
        DecodeJob *job;
        uint8_t *p;
        size_t len;
        Decoder *d;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(decoder_new(base, &d), 0);
        for (uint64_t i = 0; i < 8; i++)
                submit_cancel(d, 100 + i, &s);
        p = malloc(sizeof(garbage));
        ck_assert_ptr_nonnull(p);
        memcpy(p, garbage, sizeof(garbage));
        ck_assert_int_eq(decoder_submit(d, &kvdist__v1__transfer_cancel__descriptor, p,
                                        sizeof(garbage), on_bad, &s, &job),
                         0);
        p = cancel_payload(7, &len);
        ck_assert_int_eq(decoder_submit(d, &kvdist__v1__transfer_cancel__descriptor, p, len,
                                        on_forgotten, &s, &job),
                         0);
        decoder_forget(job);
        p = lists_payload(&len);
        ck_assert_int_eq(decoder_submit(d, &kvdist__v1__peer_transfer__descriptor, p, len, on_lists,
                                        &s, &job),
                         0);
        /* 8 cancels, the garbage and the lists; the forgotten job is never called back */
        run_until_calls(base, &s, 10);
        for (unsigned i = 0; i < 8; i++)
                ck_assert_uint_eq(s.ids[i], 100 + i);
        ck_assert(s.bad_seen);
        ck_assert_int_eq(s.bad_r, -EBADMSG);
        ck_assert(s.list_ok);
        ck_assert(!s.forgotten_called);

        decoder_free(d);
        event_base_free(base);
}
END_TEST

/* wake_watch()'s @take: submitting a job takes the decoder's lock. */
static void take_decoder_lock(void *userdata)
{
        Ctx *c = userdata;

        atomic_fetch_add(&c->seen->extra, 1);
        submit_cancel(c->d, 1000, c->seen);
}

START_TEST(test_wake_without_lock)
{
        struct event_base *base = event_base_new();
        Seen s = {};
        Ctx c = {.seen = &s};

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(decoder_new(base, &c.d), 0);
        /* at most 4 wake-ups looked at: each adds a job, whose wake-up may be looked at too */
        wake_watch(take_decoder_lock, &c, 4);
        for (unsigned round = 0; round < 3; round++) {
                submit_cancel(c.d, round, &s);
                run_until_calls(base, &s, round + 1);
        }
        wake_unwatch();
        decoder_free(c.d);
        event_base_free(base);

        ck_assert_msg(wake_blocked() == 0, "the loop was woken while the decoder held its lock");
        ck_assert_uint_ge(wake_looked(), 3);
        ck_assert_uint_eq(s.calls, 3 + atomic_load(&s.extra));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("decoder");
        TCase *tc = tcase_create("decoder");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 100);
        tcase_add_test(tc, test_decodes_in_order);
        tcase_add_test(tc, test_wake_without_lock);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
