/* SPDX-License-Identifier: MIT */
/*
 * Integration test, comm domain operations that fail, many times over: a four-member domain on
 * three daemons (ranks 0 and 1 share one, so their lane is a copy and the others run over the
 * network), ring broadcasts, ring all-gathers and batch send/recv stopped by a member that
 * unlinks, a member daemon that is killed, deadlines and members that disagree. Completions
 * then cascade over every kind of lane (a failed copy stops a collective, which stops its
 * neighbours' messages on this daemon and the others), which is where an op or a call freed
 * under its caller shows; the suite runs under ASan too. Each round checks every status, that
 * nothing outside the destination blocks and buffers changed and that what changed is what was
 * sent, and ends with operations that succeed, byte-exact.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define MEMBERS 4
#define TENSORS 2
#define BLOCKS 64
#define BLOCK_BYTES (16u << 10)
#define NB 48             /* blocks a broadcast moves: 1.5 MiB */
#define CHUNK (32u << 10) /* ring chunks: 48 messages per lane */
#define BATCH_BYTES (64u << 10)
#define ROUNDS 3
#define LONG_MS 20000

/* Ranks 0 and 1 on node 0, rank 2 on node 1, rank 3 on node 2. */
static const unsigned member_node[MEMBERS] = {0, 0, 1, 2};

typedef enum Kind {
        BROADCAST,
        ALL_GATHER,
        BATCH,
} Kind;

typedef struct Stress {
        Node nodes[3];
        DomMember m[MEMBERS];
        TCache cache[MEMBERS];
        Buf send[MEMBERS], self[MEMBERS], recv[MEMBERS], recv_self[MEMBERS];
        uint64_t blocks[MEMBERS][BLOCKS];
        char table[RANK_TABLE_MAX];
        char name[32];
        unsigned gen;
} Stress;

/* One member's operation in its own thread. */
typedef struct Job {
        Stress *s;
        unsigned rank;
        Kind kind;
        uint32_t root;
        int timeout_ms;
        uint64_t chunk;
        int ret;
        char detail[256];
        atomic_bool done;
        pthread_t thread;
} Job;

static void *job_main(void *p)
{
        Job *j = p;
        Stress *s = j->s;
        DomMember *m = &s->m[j->rank];
        kvd_collective_opts o = {
                .algorithm = KVD_ALGO_RING, .timeout_ms = j->timeout_ms, .chunk_bytes = j->chunk};
        uint32_t r = j->rank, next = (r + 1) % MEMBERS, prev = (r + MEMBERS - 1) % MEMBERS;
        kvd_send_recv_item it[4] = {
                {KVD_SEND, s->send[r].p, BATCH_BYTES / 2, KVD_DT_FLOAT16, next},
                {KVD_RECV, s->recv[r].p, BATCH_BYTES / 2, KVD_DT_FLOAT16, prev},
                {KVD_SEND, s->self[r].p, BATCH_BYTES / 4, KVD_DT_INT32, r},
                {KVD_RECV, s->recv_self[r].p, BATCH_BYTES / 4, KVD_DT_INT32, r},
        };

        switch (j->kind) {
        case BROADCAST:
                j->ret = kvd_domain_broadcast(m->client, m->comm_id, j->root, s->cache[r].id,
                                              s->blocks[r], NB, &o, NULL);
                break;
        case ALL_GATHER:
                j->ret = kvd_domain_all_gather(m->client, m->comm_id, s->cache[r].id, s->blocks[r],
                                               BLOCKS, BLOCKS / MEMBERS, &o, NULL);
                break;
        case BATCH:
                j->ret = kvd_domain_batch_send_recv(m->client, m->comm_id, it, 4, j->timeout_ms);
                break;
        }
        (void)snprintf(j->detail, sizeof(j->detail), "%s", kvd_last_error(m->client));
        atomic_store(&j->done, true);
        return NULL;
}

static int64_t calls_in_flight(const Stress *s, unsigned rank)
{
        return dom_status_int(s->m[rank].node, "domains/0/calls_in_flight");
}

/*
 * Starts the operations of the members in @mask, in rank order, each once the one before is in
 * flight on its daemon (so that on node 0 rank 0's call comes first, and a failure there walks
 * from it into rank 1's), or over; returns when all are.
 */
static void jobs_start(Stress *s, Job *jobs, unsigned mask)
{
        for (unsigned r = 0; r < MEMBERS; r++) {
                Job *j = &jobs[r];
                uint64_t deadline = harness_now_ms() + (uint64_t)harness_wait_ms();

                if (!(mask & (1u << r)))
                        continue;
                j->s = s;
                j->rank = r;
                atomic_init(&j->done, false);
                ck_assert_int_eq(pthread_create(&j->thread, NULL, job_main, j), 0);
                for (;;) {
                        int64_t running = 0;

                        /* The calls of this node's members that did not return yet. */
                        for (unsigned q = 0; q <= r; q++)
                                running += (mask & (1u << q)) && member_node[q] == member_node[r] &&
                                           !atomic_load(&jobs[q].done);
                        if (atomic_load(&j->done) || calls_in_flight(s, r) >= running)
                                break;
                        ck_assert_msg(harness_now_ms() < deadline, "rank %u never got in flight",
                                      r);
                        harness_sleep_ms(2);
                }
        }
}

/* Joins the operations in @mask and checks that each returned one of @want, or OK where @ok. */
static void jobs_join(Job *jobs, unsigned mask, int want, unsigned ok, const char *what)
{
        for (unsigned r = 0; r < MEMBERS; r++) {
                Job *j = &jobs[r];

                if (!(mask & (1u << r)))
                        continue;
                pthread_join(j->thread, NULL);
                ck_assert_msg(j->ret == want || (j->ret == KVD_OK && (ok & (1u << r))),
                              "%s: rank %u returned %s, want %s: %s", what, r, kvd_strerror(j->ret),
                              kvd_strerror(want), j->detail);
        }
}

static void stress_attach(Stress *s, unsigned r)
{
        s->m[r] = (DomMember){&s->nodes[member_node[r]], 1001 * (r + 1), r == 1 ? 1 : 0, NULL, 0};
        dom_member_attach(&s->m[r]);
        expect_ok(s->m[r].client,
                  tcache_register(&s->cache[r], s->m[r].client, true, TENSORS, BLOCKS, BLOCK_BYTES,
                                  60 + r, NULL, 0, KVD_REMOTE_DEFAULT));
        buf_alloc(&s->send[r], s->m[r].client, BATCH_BYTES, 100 + r);
        buf_alloc(&s->self[r], s->m[r].client, BATCH_BYTES, 200 + r);
        buf_alloc(&s->recv[r], s->m[r].client, BATCH_BYTES, 300 + r);
        buf_alloc(&s->recv_self[r], s->m[r].client, BATCH_BYTES, 400 + r);
        /* A permutation of every block: a broadcast moves the first NB, an all-gather all. */
        for (unsigned k = 0; k < BLOCKS; k++)
                s->blocks[r][k] = (k * 37 + 11 * r + 5) % BLOCKS;
}

/* A new domain of every member under a new name. */
static void stress_form(Stress *s)
{
        (void)snprintf(s->name, sizeof(s->name), "stress-%u", s->gen++);
        rank_table_build(s->table, sizeof(s->table), s->m, MEMBERS, false);
        dom_link_all(s->m, MEMBERS, s->name, s->table);
        dom_wait_ok(s->m, MEMBERS);
}

/* Every member leaves (the first fails the domain for the others) and it forms anew, its lanes
 * in step again. */
static void stress_reform(Stress *s)
{
        for (unsigned r = 0; r < MEMBERS; r++)
                expect_ok(s->m[r].client, kvd_domain_unlink(s->m[r].client, s->m[r].comm_id));
        stress_form(s);
}

/* Every cache and buffer holds its own pattern again. */
static void stress_reset(Stress *s)
{
        for (unsigned r = 0; r < MEMBERS; r++) {
                harness_fill_pattern(s->cache[r].mem, s->cache[r].mem_size, s->cache[r].seed);
                buf_reset(&s->recv[r]);
                buf_reset(&s->recv_self[r]);
        }
}

/* After a broadcast from @root (@exact: that succeeded), every receiver holds only bytes the root
 * sent where it may have landed and its own everywhere else, the root its own. */
static void check_broadcast(Stress *s, uint32_t root, bool exact)
{
        for (unsigned r = 0; r < MEMBERS; r++) {
                TCopies cp = {};

                if (r != root)
                        tcopies_blocks(&cp, &s->cache[root], &s->cache[r], ALL, ALL, 2,
                                       s->blocks[root], s->blocks[r], NB);
                if (exact)
                        tcache_verify(&s->cache[r], &cp);
                else
                        tcache_verify_old_or_new(&s->cache[r], &cp);
                tcopies_free(&cp);
        }
}

/* As check_broadcast() for an all-gather of BLOCKS / MEMBERS blocks per rank. */
static void check_all_gather(Stress *s, bool exact)
{
        const size_t k = BLOCKS / MEMBERS;

        for (unsigned r = 0; r < MEMBERS; r++) {
                TCopies cp = {};

                for (unsigned q = 0; q < MEMBERS; q++)
                        if (q != r)
                                tcopies_blocks(&cp, &s->cache[q], &s->cache[r], ALL, ALL, 2,
                                               s->blocks[q] + q * k, s->blocks[r] + q * k, k);
                if (exact)
                        tcache_verify(&s->cache[r], &cp);
                else
                        tcache_verify_old_or_new(&s->cache[r], &cp);
                tcopies_free(&cp);
        }
}

/* After a batch ring exchange, the receives of members that returned OK hold what was sent, the
 * others only bytes that were sent or their own. */
static void check_batch(Stress *s, const Job *jobs, unsigned mask)
{
        for (unsigned r = 0; r < MEMBERS; r++) {
                unsigned prev = (r + MEMBERS - 1) % MEMBERS;

                if (!(mask & (1u << r))) {
                        buf_untouched(&s->recv[r]);
                        buf_untouched(&s->recv_self[r]);
                } else if (jobs[r].ret == KVD_OK) {
                        buf_expect(&s->recv[r], s->send[prev].seed);
                        buf_expect_n(&s->recv_self[r], s->self[r].seed, BATCH_BYTES);
                } else {
                        (void)buf_old_or_new(&s->recv[r], s->send[prev].seed);
                        (void)buf_old_or_new(&s->recv_self[r], s->self[r].seed);
                }
        }
}

/* An operation (a broadcast: from @root) of every member but @absent, which then unlinks: the
 * domain fails under the others' messages, on every daemon. Those in @ok may have finished. */
static void round_unlink(Stress *s, Kind kind, uint32_t root, unsigned absent, unsigned ok)
{
        unsigned mask = 0xf & ~(1u << absent);
        Job jobs[MEMBERS] = {0};

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] = (Job){.kind = kind, .root = root, .timeout_ms = LONG_MS, .chunk = CHUNK};
        jobs_start(s, jobs, mask);
        expect_ok(s->m[absent].client,
                  kvd_domain_unlink(s->m[absent].client, s->m[absent].comm_id));
        jobs_join(jobs, mask, KVD_E_LINK_FAILED, ok, "unlink");
        if (kind == BATCH)
                check_batch(s, jobs, mask);
        else if (kind == ALL_GATHER)
                check_all_gather(s, false);
        else
                check_broadcast(s, root, false);
        /* It left: it is not waited for as FAILED. */
        ck_assert_int_eq(dom_wait_failed(&s->m[(absent + 1) % MEMBERS], harness_wait_ms()),
                         KVD_MEM_STATUS_FAILED);
        for (unsigned r = 0; r < MEMBERS; r++)
                if (r != absent)
                        expect_ok(s->m[r].client,
                                  kvd_domain_unlink(s->m[r].client, s->m[r].comm_id));
        stress_form(s);
}

/* Every member but rank 3 in an operation with deadlines of about 300 ms: they stop on their own
 * deadline or on their neighbours', as TIMEOUT; the domain stays OK. */
static void round_timeout(Stress *s, Kind kind)
{
        const unsigned mask = 0x7;
        Job jobs[MEMBERS] = {0};

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] = (Job){
                        .kind = kind, .root = 3, .timeout_ms = 250 + 40 * (int)r, .chunk = CHUNK};
        jobs_start(s, jobs, mask);
        /* Rank 1's batch needs nobody but ranks 0 and 2. */
        jobs_join(jobs, mask, KVD_E_TIMEOUT, kind == BATCH ? 0x2 : 0, "timeout");
        if (kind == BATCH)
                check_batch(s, jobs, mask);
        else
                check_broadcast(s, 3, false);
        /* Rank 3 never sent what the others gave up on: its next operation meets theirs. Every
         * member's lanes must be in step again for what follows, so rank 3 runs the same one and
         * fails at once, as TIMEOUT, what it would have sent (or received) there. */
        jobs_start(s, jobs, 0x8);
        jobs_join(jobs, 0x8, KVD_E_TIMEOUT, 0, "late member after a timeout");
        for (unsigned r = 0; r < MEMBERS; r++)
                ck_assert_int_eq(dom_wait(&s->m[r], 0), KVD_MEM_STATUS_OK);
}

/* A ring all-gather where rank 2 passes another chunk size: PARAM_INVALID where it meets its
 * neighbours, and from there on every member's messages stop. Rank 2 planned fewer messages
 * than its neighbours, so their lanes are out of step: the domain is formed anew. */
static void round_disagree(Stress *s)
{
        Job jobs[MEMBERS] = {0};

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] = (Job){.kind = ALL_GATHER,
                                .timeout_ms = LONG_MS,
                                .chunk = r == 2 ? 2 * CHUNK : CHUNK};
        jobs_start(s, jobs, 0xf);
        jobs_join(jobs, 0xf, KVD_E_PARAM_INVALID, 0, "disagree");
        check_all_gather(s, false);
        stress_reform(s);
}

/* Rank 3's daemon is killed under a broadcast from it that the others wait for: PEER_LOST for
 * all; it starts again at a new address and the domain forms anew. */
static void round_kill(Stress *s)
{
        const unsigned mask = 0x7;
        Job jobs[MEMBERS] = {0};

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] =
                        (Job){.kind = BROADCAST, .root = 3, .timeout_ms = LONG_MS, .chunk = CHUNK};
        jobs_start(s, jobs, mask);
        ck_assert_int_eq(harness_daemon_kill(&s->nodes[2].d), 0);
        jobs_join(jobs, mask, KVD_E_PEER_LOST, 0, "kill");
        check_broadcast(s, 3, false);
        ck_assert_int_eq(kvd_client_finalize(s->m[3].client), KVD_E_DAEMON_UNAVAILABLE);
        harness_daemon_cleanup(&s->nodes[2].d);
        node_start(&s->nodes[2]);
        stress_attach(s, 3);
        for (unsigned r = 0; r < 3; r++) {
                ck_assert_int_eq(dom_wait_failed(&s->m[r], harness_wait_ms()),
                                 KVD_MEM_STATUS_FAILED);
                expect_ok(s->m[r].client, kvd_domain_unlink(s->m[r].client, s->m[r].comm_id));
        }
        stress_form(s);
}

/*
 * Every member in a broadcast from rank 0 while rank @short_rank's deadline, @deadline_ms, passes
 * about when the bytes move (copies between ranks 0 and 1 included): those that finish say OK,
 * the others TIMEOUT; what landed is what the root sent.
 */
static void round_deadline(Stress *s, unsigned short_rank, int deadline_ms)
{
        Job jobs[MEMBERS] = {0};
        bool all_ok = true;

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] = (Job){.kind = BROADCAST,
                                .root = 0,
                                .timeout_ms = r == short_rank ? deadline_ms : LONG_MS,
                                .chunk = CHUNK};
        /* Rank 0 last: the bytes start moving when every other member waits for them. */
        jobs_start(s, jobs, 0xe);
        jobs_start(s, jobs, 0x1);
        jobs_join(jobs, 0xf, KVD_E_TIMEOUT, 0xf, "deadline");
        for (unsigned r = 0; r < MEMBERS; r++)
                all_ok = all_ok && jobs[r].ret == KVD_OK;
        check_broadcast(s, 0, all_ok);
}

/* Every member, nothing in the way: a broadcast, an all-gather and a batch, byte-exact. */
static void round_ok(Stress *s)
{
        Job jobs[MEMBERS] = {0};

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r] =
                        (Job){.kind = BROADCAST, .root = 3, .timeout_ms = LONG_MS, .chunk = CHUNK};
        jobs_start(s, jobs, 0xf);
        jobs_join(jobs, 0xf, KVD_OK, 0, "broadcast");
        check_broadcast(s, 3, true);

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r].kind = ALL_GATHER;
        jobs_start(s, jobs, 0xf);
        jobs_join(jobs, 0xf, KVD_OK, 0, "all-gather");
        check_all_gather(s, true);

        stress_reset(s);
        for (unsigned r = 0; r < MEMBERS; r++)
                jobs[r].kind = BATCH;
        jobs_start(s, jobs, 0xf);
        jobs_join(jobs, 0xf, KVD_OK, 0, "batch");
        check_batch(s, jobs, 0xf);
}

START_TEST(test_failing_operations)
{
        uint64_t start = harness_now_ms();
        Stress *s = calloc(1, sizeof(*s));

        ck_assert_ptr_nonnull(s);
        for (unsigned k = 0; k < 3; k++)
                node_start(&s->nodes[k]);
        for (unsigned r = 0; r < MEMBERS; r++)
                stress_attach(s, r);
        stress_form(s);
        round_ok(s);
        for (unsigned i = 0; i < ROUNDS; i++) {
                /* The member that leaves is the root a ring waits for, then one of the pair
                 * that shares a daemon. */
                round_unlink(s, BROADCAST, 3, 3, 0);
                round_unlink(s, BROADCAST, 0, 1, 0);
                /* The bytes move from rank 0 through 1 to 2 as rank 3 leaves. */
                round_unlink(s, BROADCAST, 0, 3, 0x3);
                round_unlink(s, ALL_GATHER, 0, 3, 0);
                /* Rank 1's messages need nobody but ranks 0 and 2. */
                round_unlink(s, BATCH, 0, 3, 0x2);
                for (unsigned k = 0; k < 4; k++)
                        round_deadline(s, 1 + k % 3, 5 + 15 * (int)(i * 4 + k));
                round_timeout(s, BROADCAST);
                round_timeout(s, BATCH);
                round_disagree(s);
                if (i < 2)
                        round_kill(s);
                round_ok(s);
        }
        fprintf(stderr, "test_failing_operations: %u rounds in %llu ms\n", ROUNDS,
                (unsigned long long)(harness_now_ms() - start));
        for (unsigned r = 0; r < MEMBERS; r++)
                expect_ok(s->m[r].client, kvd_client_finalize(s->m[r].client));
        for (unsigned k = 0; k < 3; k++)
                node_stop(&s->nodes[k]);
        free(s);
}
END_TEST

static Suite *stress_suite(void)
{
        Suite *s = suite_create("domain-stress");
        TCase *tc = tcase_create("stress");

        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_failing_operations);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(stress_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
