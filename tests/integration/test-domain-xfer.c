/* SPDX-License-Identifier: MIT */
/*
 * Integration tests, batch send/recv in comm domains: the seed's ring exchange (each rank sends
 * to the next and receives from the previous) on three and four daemons, sends to self and
 * between members on one daemon, count 0, mismatched counts and data types (both ends fail, no
 * byte lands), duplicates, a timeout after which nothing is written, and receives that give up
 * while the bytes move. Every received byte is checked against its seeded pattern, and the guard
 * bytes around every buffer too. Run by rdma-vm, every channel across daemons must have moved
 * its messages over RDMA.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"

typedef struct Net {
        Node nodes[4];
        DomMember m[4];
        unsigned n;
        unsigned n_nodes;
        char table[RANK_TABLE_MAX];
} Net;

/* @n members; member i on node @on[i] (nodes 0.. started as needed), device @dev[i]. */
static void net_start(Net *w, unsigned n, const unsigned *on, const int *dev)
{
        unsigned n_nodes = 0;

        memset(w, 0, sizeof(*w));
        w->n = n;
        for (unsigned i = 0; i < n; i++)
                n_nodes = on[i] + 1 > n_nodes ? on[i] + 1 : n_nodes;
        w->n_nodes = n_nodes;
        for (unsigned k = 0; k < n_nodes; k++)
                node_start(&w->nodes[k]);
        for (unsigned i = 0; i < n; i++) {
                w->m[i] = (DomMember){&w->nodes[on[i]], 1001 * (i + 1), dev ? dev[i] : 0, NULL, 0};
                dom_member_attach(&w->m[i]);
        }
        rank_table_build(w->table, sizeof(w->table), w->m, n, false);
        dom_link_all(w->m, n, "xfer", w->table);
        dom_wait_ok(w->m, n);
}

/* Every node's channels to other nodes ran over it_transport() (RDMA in the soft-RoCE VM). */
static void net_check_channels(const Net *w)
{
        for (unsigned k = 0; k < w->n_nodes; k++)
                dom_check_channels(&w->nodes[k], w->n_nodes > 1);
}

static void net_stop(Net *w)
{
        for (unsigned i = 0; i < w->n; i++)
                expect_ok(w->m[i].client, kvd_client_finalize(w->m[i].client));
        for (unsigned i = 0; i < w->n_nodes; i++)
                node_stop(&w->nodes[i]);
}

/* One member's call: items and what it returned. */
typedef struct Call {
        kvd_send_recv_item items[8];
        size_t n;
        int timeout_ms;
        int ret;
        char detail[256];
} Call;

typedef struct Round {
        Net *w;
        Call calls[4];
} Round;

static int round_member(unsigned i, void *arg)
{
        Round *r = arg;
        DomMember *m = &r->w->m[i];
        Call *c = &r->calls[i];

        c->ret = kvd_domain_batch_send_recv(m->client, m->comm_id, c->items, c->n, c->timeout_ms);
        (void)snprintf(c->detail, sizeof(c->detail), "%s", kvd_last_error(m->client));
        return c->ret;
}

/* Every member calls with its items at once; returns when all returned. */
static void round_run(Round *r, unsigned n)
{
        int rets[4];

        dom_parallel(n, round_member, r, rets);
}

static kvd_send_recv_item item(kvd_send_recv_type t, void *buf, uint64_t count, kvd_dtype dt,
                               uint32_t rank)
{
        return (kvd_send_recv_item){t, buf, count, dt, rank};
}

/* The seed's example: each rank sends count floats to next and receives from prev. */
static void ring_exchange(unsigned n, size_t count, unsigned rounds)
{
        static const unsigned on[] = {0, 1, 2, 3};
        Buf send[4], recv[4];
        Round r;
        Net w;

        net_start(&w, n, on, NULL);
        for (unsigned i = 0; i < n; i++) {
                buf_alloc(&send[i], w.m[i].client, count * 4, 100 + i);
                buf_alloc(&recv[i], w.m[i].client, count * 4, 200 + i);
        }
        for (unsigned k = 0; k < rounds; k++) {
                memset(&r, 0, sizeof(r));
                r.w = &w;
                for (unsigned i = 0; i < n; i++) {
                        uint32_t next = (i + 1) % n, prev = (i + n - 1) % n;

                        /* New bytes every round: the send buffer is the stream of this round. */
                        harness_fill_pattern(send[i].p, send[i].len, 1000 * k + 100 + i);
                        r.calls[i].items[0] = item(KVD_SEND, send[i].p, count, KVD_DT_FLOAT, next);
                        r.calls[i].items[1] = item(KVD_RECV, recv[i].p, count, KVD_DT_FLOAT, prev);
                        r.calls[i].n = 2;
                        r.calls[i].timeout_ms = 20000;
                }
                round_run(&r, n);
                for (unsigned i = 0; i < n; i++) {
                        ck_assert_msg(r.calls[i].ret == KVD_OK, "round %u rank %u: %s: %s", k, i,
                                      kvd_strerror(r.calls[i].ret), r.calls[i].detail);
                        buf_expect(&recv[i], 1000 * k + 100 + (i + n - 1) % n);
                }
        }
        ck_assert_int_ge(dom_status_int(&w.nodes[0], "domains/0/calls_ok"), rounds);
        net_check_channels(&w);
        net_stop(&w);
}

START_TEST(test_ring_exchange_3)
{
        ring_exchange(3, 8192, 3);
}
END_TEST

START_TEST(test_ring_exchange_4)
{
        ring_exchange(4, 4096, 2);
}
END_TEST

/* 16 MiB per rank: split over every data connection. */
START_TEST(test_ring_exchange_large)
{
        ring_exchange(3, 4u << 20, 1);
}
END_TEST

/* Send to self (a copy), to and from the other member, an item of count 0, other types. */
START_TEST(test_self_and_skip)
{
        static const unsigned on[] = {0, 1};
        Buf s_self, r_self, s_a, r_a, s_b, r_b, skip;
        Round r;
        Net w;

        net_start(&w, 2, on, NULL);
        buf_alloc(&s_self, w.m[0].client, 1000 * 8, 1);
        buf_alloc(&r_self, w.m[0].client, 1000 * 8, 2);
        buf_alloc(&s_a, w.m[0].client, 333 * 2, 3);
        buf_alloc(&r_a, w.m[0].client, 777, 4);
        buf_alloc(&skip, w.m[0].client, 64, 5);
        buf_alloc(&s_b, w.m[1].client, 777, 6);
        buf_alloc(&r_b, w.m[1].client, 333 * 2, 7);
        memset(&r, 0, sizeof(r));
        r.w = &w;
        r.calls[0].items[0] = item(KVD_RECV, r_self.p, 1000, KVD_DT_INT64, 0);
        r.calls[0].items[1] = item(KVD_SEND, s_a.p, 333, KVD_DT_BF16, 1);
        r.calls[0].items[2] = item(KVD_SEND, skip.p, 0, KVD_DT_FLOAT, 0);
        r.calls[0].items[3] = item(KVD_RECV, r_a.p, 777, KVD_DT_UINT8, 1);
        r.calls[0].items[4] = item(KVD_SEND, s_self.p, 1000, KVD_DT_INT64, 0);
        r.calls[0].n = 5;
        r.calls[0].timeout_ms = 10000;
        r.calls[1].items[0] = item(KVD_SEND, s_b.p, 777, KVD_DT_UINT8, 0);
        r.calls[1].items[1] = item(KVD_RECV, r_b.p, 333, KVD_DT_BF16, 0);
        r.calls[1].n = 2;
        r.calls[1].timeout_ms = 10000;
        round_run(&r, 2);
        ck_assert_msg(r.calls[0].ret == KVD_OK, "%s", r.calls[0].detail);
        ck_assert_msg(r.calls[1].ret == KVD_OK, "%s", r.calls[1].detail);
        buf_expect(&r_self, 1);
        buf_expect(&r_a, 6);
        buf_expect(&r_b, 3);
        buf_untouched(&skip);
        buf_untouched(&s_self);
        net_check_channels(&w);
        net_stop(&w);
}
END_TEST

/* Three members, two of them on one daemon (devices 0 and 1): copies and the network mixed. */
START_TEST(test_members_on_one_daemon)
{
        static const unsigned on[] = {0, 0, 1};
        static const int dev[] = {0, 1, 0};
        Buf send[3], recv[3];
        Round r;
        Net w;

        net_start(&w, 3, on, dev);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains"), 1);
        ck_assert_int_eq(dom_status_len(&w.nodes[0], "domains/0/local_ranks"), 2);
        memset(&r, 0, sizeof(r));
        r.w = &w;
        for (unsigned i = 0; i < 3; i++) {
                buf_alloc(&send[i], w.m[i].client, 65536, 10 + i);
                buf_alloc(&recv[i], w.m[i].client, 65536, 20 + i);
                r.calls[i].items[0] = item(KVD_RECV, recv[i].p, 32768, KVD_DT_FLOAT16, (i + 2) % 3);
                r.calls[i].items[1] = item(KVD_SEND, send[i].p, 32768, KVD_DT_FLOAT16, (i + 1) % 3);
                r.calls[i].n = 2;
                r.calls[i].timeout_ms = 10000;
        }
        round_run(&r, 3);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_msg(r.calls[i].ret == KVD_OK, "rank %u: %s", i, r.calls[i].detail);
                buf_expect(&recv[i], 10 + (i + 2) % 3);
        }
        net_check_channels(&w);
        net_stop(&w);
}
END_TEST

/* Counts or types that differ: both ends fail and say what differs; nothing lands. */
START_TEST(test_mismatch)
{
        static const unsigned on[] = {0, 1};
        Buf s0, r1, r0, s1, ss, rs;
        Round r;
        Net w;

        net_start(&w, 2, on, NULL);
        buf_alloc(&s0, w.m[0].client, 64, 1);
        buf_alloc(&r0, w.m[0].client, 64, 2);
        buf_alloc(&ss, w.m[0].client, 64, 3);
        buf_alloc(&rs, w.m[0].client, 64, 4);
        buf_alloc(&s1, w.m[1].client, 64, 5);
        buf_alloc(&r1, w.m[1].client, 64, 6);

        /* 8 float16 against 16 float16 across daemons; int32 against float (same bytes) back. */
        memset(&r, 0, sizeof(r));
        r.w = &w;
        r.calls[0].items[0] = item(KVD_SEND, s0.p, 8, KVD_DT_FLOAT16, 1);
        r.calls[0].items[1] = item(KVD_RECV, r0.p, 4, KVD_DT_INT32, 1);
        r.calls[0].n = 2;
        r.calls[0].timeout_ms = 10000;
        r.calls[1].items[0] = item(KVD_SEND, s1.p, 4, KVD_DT_FLOAT, 0);
        r.calls[1].items[1] = item(KVD_RECV, r1.p, 16, KVD_DT_FLOAT16, 0);
        r.calls[1].n = 2;
        r.calls[1].timeout_ms = 10000;
        round_run(&r, 2);
        ck_assert_int_eq(r.calls[0].ret, KVD_E_PARAM_INVALID);
        ck_assert_int_eq(r.calls[1].ret, KVD_E_PARAM_INVALID);
        ck_assert_msg(strstr(r.calls[0].detail, "8 x float16") &&
                              strstr(r.calls[0].detail, "16 x float16"),
                      "%s", r.calls[0].detail);
        /* The first item that failed, in list order, is the call's detail. */
        ck_assert_msg(strstr(r.calls[0].detail, "items[0]"), "%s", r.calls[0].detail);
        ck_assert_msg(strstr(r.calls[1].detail, "items[0]") &&
                              strstr(r.calls[1].detail, "4 x float") &&
                              strstr(r.calls[1].detail, "4 x int32"),
                      "%s", r.calls[1].detail);
        buf_untouched(&r0);
        buf_untouched(&r1);

        /* On one daemon: a send to self of 8 elements against a receive of 16. */
        memset(&r, 0, sizeof(r));
        r.w = &w;
        r.calls[0].items[0] = item(KVD_SEND, ss.p, 8, KVD_DT_FLOAT, 0);
        r.calls[0].items[1] = item(KVD_RECV, rs.p, 16, KVD_DT_FLOAT, 0);
        r.calls[0].n = 2;
        r.calls[0].timeout_ms = 10000;
        round_run(&r, 1);
        ck_assert_int_eq(r.calls[0].ret, KVD_E_PARAM_INVALID);
        ck_assert_msg(strstr(r.calls[0].detail, "8 x float"), "%s", r.calls[0].detail);
        buf_untouched(&rs);

        /* The lanes are still in step: a matching exchange goes through. */
        memset(&r, 0, sizeof(r));
        r.w = &w;
        r.calls[0].items[0] = item(KVD_SEND, s0.p, 16, KVD_DT_FLOAT16, 1);
        r.calls[0].n = 1;
        r.calls[0].timeout_ms = 10000;
        r.calls[1].items[0] = item(KVD_RECV, r1.p, 16, KVD_DT_FLOAT16, 0);
        r.calls[1].n = 1;
        r.calls[1].timeout_ms = 10000;
        round_run(&r, 2);
        ck_assert_msg(r.calls[0].ret == KVD_OK, "%s", r.calls[0].detail);
        ck_assert_msg(r.calls[1].ret == KVD_OK, "%s", r.calls[1].detail);
        buf_expect_n(&r1, 1, 32);
        net_check_channels(&w);
        net_stop(&w);
}
END_TEST

/* Two sends to (or receives from) one rank in one list are refused before anything moves. */
START_TEST(test_duplicates)
{
        static const unsigned on[] = {0, 1};
        kvd_send_recv_item items[3];
        Buf a, b, c;
        Net w;

        net_start(&w, 2, on, NULL);
        buf_alloc(&a, w.m[0].client, 64, 1);
        buf_alloc(&b, w.m[0].client, 64, 2);
        buf_alloc(&c, w.m[0].client, 64, 3);
        items[0] = item(KVD_SEND, a.p, 4, KVD_DT_FLOAT, 1);
        items[1] = item(KVD_RECV, b.p, 4, KVD_DT_FLOAT, 1);
        items[2] = item(KVD_SEND, c.p, 4, KVD_DT_FLOAT, 1);
        expect_status(w.m[0].client,
                      kvd_domain_batch_send_recv(w.m[0].client, w.m[0].comm_id, items, 3, 1000),
                      KVD_E_PARAM_INVALID, "items[2]: a second SEND to rank 1 (items[0]");
        items[2] = item(KVD_RECV, c.p, 4, KVD_DT_FLOAT, 1);
        expect_status(w.m[0].client,
                      kvd_domain_batch_send_recv(w.m[0].client, w.m[0].comm_id, items, 3, 1000),
                      KVD_E_PARAM_INVALID, "a second RECV from rank 1");
        /* Other refusals name the item too. */
        items[0] = item(KVD_SEND, a.p, 4, KVD_DT_FLOAT, 2);
        expect_status(w.m[0].client,
                      kvd_domain_batch_send_recv(w.m[0].client, w.m[0].comm_id, items, 1, 1000),
                      KVD_E_PARAM_INVALID, "items[0].remote_rank 2");
        {
                uint8_t stack[16];

                items[0] = item(KVD_SEND, stack, 4, KVD_DT_FLOAT, 1);
                expect_status(
                        w.m[0].client,
                        kvd_domain_batch_send_recv(w.m[0].client, w.m[0].comm_id, items, 1, 1000),
                        KVD_E_PARAM_INVALID, "not inside memory from kvd_mem_alloc()");
        }
        buf_untouched(&b);
        buf_untouched(&c);
        net_stop(&w);
}
END_TEST

/*
 * One end of a message times out before the other calls (loop bit 0: the receive, else the
 * send); loop bit 1: the two members on one daemon (a copy) rather than two. The late end fails
 * with the cause, TIMEOUT, and says the other end gave up, whichever the placement; nothing lands
 * in the receive buffer, later bytes neither, and the lanes stay in step.
 */
START_TEST(test_timeout_nothing_lands)
{
        static const unsigned on_two[] = {0, 1}, on_one[] = {0, 0};
        static const int dev_one[] = {0, 1};
        bool recv_gives_up = !(_i & 1), one_daemon = _i & 2;
        unsigned early = recv_gives_up ? 1 : 0;
        kvd_send_recv_item its[2];
        Buf s0, r1, r1b;
        Round r;
        Net w;

        net_start(&w, 2, one_daemon ? on_one : on_two, one_daemon ? dev_one : NULL);
        buf_alloc(&s0, w.m[0].client, 1 << 20, 1);
        buf_alloc(&r1, w.m[1].client, 1 << 20, 2);
        buf_alloc(&r1b, w.m[1].client, 1 << 20, 3);
        its[0] = item(KVD_SEND, s0.p, 1 << 18, KVD_DT_FLOAT, 1);
        its[1] = item(KVD_RECV, r1.p, 1 << 18, KVD_DT_FLOAT, 0);
        expect_status(w.m[early].client,
                      kvd_domain_batch_send_recv(w.m[early].client, w.m[early].comm_id, &its[early],
                                                 1, 200),
                      KVD_E_TIMEOUT, "did not finish");
        /* The other end comes late: its message fails with why the first gave up. */
        expect_status(w.m[!early].client,
                      kvd_domain_batch_send_recv(w.m[!early].client, w.m[!early].comm_id,
                                                 &its[!early], 1, 5000),
                      KVD_E_TIMEOUT,
                      recv_gives_up ? "the receiver (rank 1) gave up"
                                    : "the sender (rank 0) gave up");
        ck_assert_msg(strstr(kvd_last_error(w.m[!early].client), "did not finish within"), "%s",
                      kvd_last_error(w.m[!early].client));
        buf_untouched(&r1);

        /* The next messages pair up again. */
        memset(&r, 0, sizeof(r));
        r.w = &w;
        r.calls[0].items[0] = item(KVD_SEND, s0.p, 1 << 18, KVD_DT_FLOAT, 1);
        r.calls[0].n = 1;
        r.calls[0].timeout_ms = 10000;
        r.calls[1].items[0] = item(KVD_RECV, r1b.p, 1 << 18, KVD_DT_FLOAT, 0);
        r.calls[1].n = 1;
        r.calls[1].timeout_ms = 10000;
        round_run(&r, 2);
        ck_assert_msg(r.calls[0].ret == KVD_OK, "%s", r.calls[0].detail);
        ck_assert_msg(r.calls[1].ret == KVD_OK, "%s", r.calls[1].detail);
        buf_expect(&r1b, 1);
        buf_untouched(&r1);
        net_check_channels(&w);
        net_stop(&w);
}
END_TEST

/* The receiver of a round that times out keeps a copy of its buffer the moment it returned. */
typedef struct LateRound {
        Round r;
        const Buf *watch;
        uint8_t *snapshot;
} LateRound;

static int late_member(unsigned i, void *arg)
{
        LateRound *lr = arg;
        int ret = round_member(i, &lr->r);

        if (i == 1)
                memcpy(lr->snapshot, lr->watch->mem, lr->watch->size);
        return ret;
}

/*
 * One message of @len bytes from rank 0's @src into rank 1's @dst where rank @short_side's call
 * has @deadline_ms and the other's 60 s. Checks what either outcome allows: a send succeeds
 * only with its receive, a receive that failed keeps its buffer as it was when its call returned
 * (every byte the old one or the sent one, the guards untouched); then the lanes pair up again.
 */
static void give_up_while_moving(Net *w, const Buf *src, Buf *dst, Buf *spare, unsigned short_side,
                                 int deadline_ms)
{
        const size_t len = dst->len;
        LateRound lr = {.watch = dst};
        size_t landed;

        lr.snapshot = malloc(dst->size);
        ck_assert_ptr_nonnull(lr.snapshot);
        buf_reset(dst);
        lr.r.w = w;
        lr.r.calls[0].items[0] = item(KVD_SEND, src->p, len, KVD_DT_UINT8, 1);
        lr.r.calls[0].n = 1;
        lr.r.calls[1].items[0] = item(KVD_RECV, dst->p, len, KVD_DT_UINT8, 0);
        lr.r.calls[1].n = 1;
        lr.r.calls[short_side].timeout_ms = deadline_ms;
        lr.r.calls[!short_side].timeout_ms = 60000;
        dom_parallel(2, late_member, &lr, (int[2]){0});
        ck_assert_msg(
                lr.r.calls[short_side].ret == KVD_OK || lr.r.calls[short_side].ret == KVD_E_TIMEOUT,
                "%s: %s", kvd_strerror(lr.r.calls[short_side].ret), lr.r.calls[short_side].detail);
        /* A send completes only on the receiver's word that every byte landed. */
        if (lr.r.calls[0].ret == KVD_OK)
                ck_assert_msg(lr.r.calls[1].ret == KVD_OK,
                              "the send succeeded, the receive "
                              "said %s",
                              lr.r.calls[1].detail);
        if (lr.r.calls[1].ret == KVD_OK) {
                buf_expect(dst, src->seed);
        } else {
                /* Time for a late byte to show: nothing in this test waits for one. */
                harness_sleep_ms(300);
                ck_assert_msg(memcmp(lr.snapshot, dst->mem, dst->size) == 0,
                              "the receive buffer changed after its call failed");
                landed = buf_old_or_new(dst, src->seed);
                fprintf(stderr,
                        "give_up_while_moving: the %s gave up after %d ms; the receive "
                        "had about %zu of %zu bytes in place and said: %s\n",
                        short_side ? "receive" : "send", deadline_ms, landed, len,
                        lr.r.calls[1].detail);
        }

        /* The next messages pair up again. */
        memset(&lr.r, 0, sizeof(lr.r));
        lr.r.w = w;
        lr.r.calls[0].items[0] = item(KVD_SEND, src->p, len, KVD_DT_UINT8, 1);
        lr.r.calls[0].n = 1;
        lr.r.calls[0].timeout_ms = 60000;
        lr.r.calls[1].items[0] = item(KVD_RECV, spare->p, len, KVD_DT_UINT8, 0);
        lr.r.calls[1].n = 1;
        lr.r.calls[1].timeout_ms = 60000;
        round_run(&lr.r, 2);
        ck_assert_msg(lr.r.calls[0].ret == KVD_OK, "%s", lr.r.calls[0].detail);
        ck_assert_msg(lr.r.calls[1].ret == KVD_OK, "%s", lr.r.calls[1].detail);
        buf_expect(spare, src->seed);
        buf_reset(spare);
        ck_assert_msg(memcmp(lr.snapshot, dst->mem, dst->size) == 0,
                      "the receive buffer changed after its call returned");
        free(lr.snapshot);
}

/*
 * A receive, then a send, that give up while the bytes are on their way (over RDMA: while the
 * WRITEs run; the receiver takes its buffer back, the sender flushes its queue pairs): nothing
 * lands in the receive buffer once its call returned. Several deadlines, so that some land in
 * the middle of the message; either outcome is checked.
 */
START_TEST(test_timeout_while_moving)
{
        static const unsigned on[] = {0, 1};
        static const int deadlines_ms[] = {30, 80, 200, 400};
        const size_t len = 16u << 20;
        Buf s0, r1, r1b;
        Net w;

        net_start(&w, 2, on, NULL);
        buf_alloc(&s0, w.m[0].client, len, 1);
        buf_alloc(&r1, w.m[1].client, len, 2);
        buf_alloc(&r1b, w.m[1].client, len, 3);
        for (unsigned side = 0; side < 2; side++)
                for (size_t d = 0; d < sizeof(deadlines_ms) / sizeof(deadlines_ms[0]); d++)
                        give_up_while_moving(&w, &s0, &r1, &r1b, 1 - side, deadlines_ms[d]);
        net_check_channels(&w);
        net_stop(&w);
}
END_TEST

static Suite *xfer_suite(void)
{
        Suite *s = suite_create("domain-xfer");
        TCase *tc = tcase_create("batch");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_ring_exchange_3);
        tcase_add_test(tc, test_ring_exchange_4);
        tcase_add_test(tc, test_ring_exchange_large);
        tcase_add_test(tc, test_self_and_skip);
        tcase_add_test(tc, test_members_on_one_daemon);
        tcase_add_test(tc, test_mismatch);
        tcase_add_test(tc, test_duplicates);
        tcase_add_loop_test(tc, test_timeout_nothing_lands, 0, 4);
        tcase_add_test(tc, test_timeout_while_moving);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(xfer_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
