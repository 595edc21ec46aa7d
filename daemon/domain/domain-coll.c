/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, collectives on blocks caches: broadcast (the root's blocks into every other
 * member's) and all-gather (every member's part into every other member's), each as ring or
 * mesh, built from lane messages.
 *
 * The bytes of a block list form one stream: tensor 0's blocks in list order, then tensor 1's,
 * and so on; every member lays its own cache out the same way, so stream offsets name the same
 * (tensor, block) everywhere. Mesh: every message is a whole stream, straight from its owner to
 * each other member (n-1 channels, each its own lane). Ring: rank r talks to r+1 and r-1 only;
 * the stream is cut into chunks, and a rank passes chunk c on to its next neighbour as soon as
 * chunk c landed, while chunk c+1 still arrives (pipelined), so the root sends its bytes once
 * instead of n-1 times.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/memory/region.h"
#include "common/status.h"

#define CHUNK_DEFAULT (UINT64_C(1) << 20)
#define CHUNK_MIN (UINT64_C(4) << 10)
#define CHUNK_MAX (UINT64_C(256) << 20)
/* algorithm=auto: a broadcast of at least this many bytes among 3 or more members runs as a
 * ring. kvdist-domain-bench (docs/benchmarks.md): on hosts whose links are the bottleneck the
 * ring wins from 512 KiB up (1.4x to 2.5x with 4 members), on loopback it is even from 1 MiB;
 * below that the ring's n-1 hops are latency. All-gather moves the same bytes per host either
 * way and mesh is never slower, so auto picks mesh for it. */
#define RING_MIN_BYTES (UINT64_C(1) << 20)

/* The blocks of one member's cache that one operation moves. */
typedef struct Stream {
        const Cache *cache;
        const uint64_t *blocks;
        size_t n_blocks;
        uint64_t bytes; /* num_tensors * n_blocks * stride */
} Stream;

/* The segments of [@off, @off + @len) of @s, merged where they touch; returns how many, and
 * writes them to @out unless it is NULL. */
static size_t stream_slice(const Stream *s, uint64_t off, uint64_t len, TransportSegment *out)
{
        const Cache *c = s->cache;
        uint64_t stride = c->stride, i = off / stride, skip = off % stride;
        size_t n = 0;
        const Region *end_region = NULL;
        uint64_t end = 0;

        while (len > 0) {
                uint32_t t = (uint32_t)(i / s->n_blocks);
                const CacheTensor *ct = &c->tensors[t];
                uint64_t p = ct->offset + s->blocks[i % s->n_blocks] * stride + skip;
                uint64_t take = MIN(stride - skip, len);

                if (n > 0 && ct->region == end_region && p == end) {
                        if (out)
                                out[n - 1].len += take;
                } else {
                        if (out)
                                out[n] = (TransportSegment){
                                        .region = ct->region, .offset = p, .len = take};
                        n++;
                }
                end_region = ct->region;
                end = p + take;
                len -= take;
                skip = 0;
                i++;
        }
        return n;
}

/* One planned message: which lane end, which bytes of the stream, and its description. */
typedef struct Msg {
        bool send;
        uint32_t peer;   /* the other rank */
        uint32_t stream; /* all-gather: the part; broadcast: 0 */
        uint64_t off, len;
        OpDesc desc;
        int forward_from; /* a send passing on the receive with this index, or -1 */
} Msg;

typedef struct Plan {
        Msg *v;
        size_t n, cap;
} Plan;

static int plan_add(Plan *p, Msg m)
{
        if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 16;
                Msg *v = realloc(p->v, cap * sizeof(*v));

                if (!v)
                        return -ENOMEM;
                p->v = v;
                p->cap = cap;
        }
        p->v[p->n++] = m;
        return 0;
}

/* Adds the chunks of the @len bytes of stream @stream; a send with @forward_base >= 0 passes on
 * the receives added at @forward_base, chunk for chunk. Returns the index of the first. */
static int plan_chunks(Plan *p, bool send, uint32_t peer, uint32_t stream, uint64_t len,
                       uint64_t chunk, const OpDesc *base, int forward_base, int *ret_first)
{
        uint32_t n = (uint32_t)((len + chunk - 1) / chunk);

        *ret_first = (int)p->n;
        for (uint32_t c = 0; c < n; c++) {
                Msg m = {.send = send,
                         .peer = peer,
                         .stream = stream,
                         .off = (uint64_t)c * chunk,
                         .len = MIN(chunk, len - (uint64_t)c * chunk),
                         .desc = *base,
                         .forward_from = forward_base < 0 ? -1 : forward_base + (int)c};

                m.desc.chunk = c;
                m.desc.n_chunks = n;
                m.desc.bytes = m.len;
                if (plan_add(p, m) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int plan_broadcast(Plan *p, uint32_t n, uint32_t me, uint32_t root, bool ring,
                          uint64_t bytes, uint64_t chunk, const OpDesc *base)
{
        uint32_t pos = (me + n - root) % n, next = (me + 1) % n, prev = (me + n - 1) % n;
        int first, recvs;

        if (!ring) {
                for (uint32_t o = 0; o < n; o++) {
                        if (o == me || (me != root && o != root))
                                continue;
                        if (plan_chunks(p, me == root, o, 0, bytes, bytes, base, -1, &first) < 0)
                                return -ENOMEM;
                }
                return 0;
        }
        if (pos > 0 && plan_chunks(p, false, prev, 0, bytes, chunk, base, -1, &recvs) < 0)
                return -ENOMEM;
        if (pos < n - 1 &&
            plan_chunks(p, true, next, 0, bytes, chunk, base, pos > 0 ? recvs : -1, &first) < 0)
                return -ENOMEM;
        return 0;
}

static int plan_all_gather(Plan *p, uint32_t n, uint32_t me, bool ring, uint64_t part,
                           uint64_t chunk, const OpDesc *base)
{
        uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
        OpDesc d = *base;
        int first, recvs[DOMAIN_MAX_RANKS];

        if (!ring) {
                for (uint32_t o = 0; o < n; o++) {
                        if (o == me)
                                continue;
                        d.part = me;
                        if (plan_chunks(p, true, o, me, part, part, &d, -1, &first) < 0)
                                return -ENOMEM;
                        d.part = o;
                        if (plan_chunks(p, false, o, o, part, part, &d, -1, &first) < 0)
                                return -ENOMEM;
                }
                return 0;
        }
        /* Step s receives part me-1-s from prev and sends part me-s to next: its own at step 0,
         * then what step s-1 received; the part that started at next goes no further. */
        for (uint32_t s = 0; s + 1 < n; s++) {
                uint32_t q = (me + n - 1 - s) % n;

                d.part = q;
                if (plan_chunks(p, false, prev, q, part, chunk, &d, -1, &recvs[s]) < 0)
                        return -ENOMEM;
        }
        for (uint32_t s = 0; s + 1 < n; s++) {
                uint32_t q = (me + n - s) % n;

                d.part = q;
                if (plan_chunks(p, true, next, q, part, chunk, &d, s == 0 ? -1 : recvs[s - 1],
                                &first) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* Checks the cache and blocks of a collective into @s. */
static int stream_check(Cluster *c, uint64_t cache_id, const uint64_t *blocks, size_t n_blocks,
                        Stream *s, Error *err)
{
        const Cache *cache = cache_table_find(&c->caches, cache_id);
        uint64_t total;

        if (!cache)
                return error_set(err, STATUS_CACHE_NOT_EXIST,
                                 "cluster %" PRIu64 " has no cache %" PRIu64, c->id, cache_id);
        if (cache->kind != CACHE_BLOCKS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "cache %" PRIu64 " is contiguous; "
                                 "collectives move the blocks of a blocks cache",
                                 cache_id);
        if (n_blocks == 0)
                return error_set(err, STATUS_PARAM_INVALID, "no blocks given");
        if (n_blocks > c->root->options.limits->max_blocks_per_transfer)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "%zu blocks, at most %" PRIu32 " (limits.max_blocks_per_transfer)",
                                 n_blocks, c->root->options.limits->max_blocks_per_transfer);
        for (size_t i = 0; i < n_blocks; i++)
                if (blocks[i] >= cache->units)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "blocks[%zu]=%" PRIu64 " is out "
                                         "of range, cache %" PRIu64 " has %" PRIu64 " blocks",
                                         i, blocks[i], cache_id, cache->units);
        {
                /* A block named twice would be written twice. */
                uint64_t *sorted = malloc(n_blocks * sizeof(*sorted));

                if (!sorted)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                memcpy(sorted, blocks, n_blocks * sizeof(*sorted));
                qsort(sorted, n_blocks, sizeof(*sorted), cmp_u64);
                for (size_t i = 1; i < n_blocks; i++)
                        if (sorted[i] == sorted[i - 1]) {
                                uint64_t b = sorted[i];

                                free(sorted);
                                return error_set(err, STATUS_PARAM_INVALID,
                                                 "block %" PRIu64 " appears twice in blocks", b);
                        }
                free(sorted);
        }
        if (MUL_OVERFLOW((uint64_t)n_blocks * cache->desc.num_tensors, cache->stride, &total))
                return error_set(err, STATUS_PARAM_INVALID, "too many bytes");
        *s = (Stream){cache, blocks, n_blocks, total};
        return 0;
}

/* Turns @plan into the ops of a new call and starts it. */
static int coll_start(Completion *done, domain_reply_fn reply, Cluster *c, Domain *dom, uint32_t me,
                      OpKind kind, const Stream *streams, const Plan *plan, uint32_t algorithm,
                      uint32_t timeout_ms, Error *err)
{
        const Stream *s = &streams[0];
        size_t n_segs = 0, k = 0;
        DomainCall *call;
        int r;

        for (size_t i = 0; i < plan->n; i++)
                n_segs += stream_slice(&streams[plan->v[i].stream], plan->v[i].off, plan->v[i].len,
                                       NULL);
        r = domain_call_new(dom, me, c, done, reply, kind, plan->n, n_segs, &call);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        call->fail_fast = true;
        call->algorithm = algorithm;
        for (uint32_t t = 0; t < s->cache->desc.num_tensors; t++)
                if (domain_call_hold_region(call, s->cache->tensors[t].region) < 0) {
                        call->done = NULL;
                        domain_call_free(call);
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                }
        for (size_t i = 0; i < plan->n; i++) {
                const Msg *m = &plan->v[i];
                DomainOp *op = &call->ops[i];

                op->desc = m->desc;
                op->segs = &call->segs[k];
                op->n_segs = stream_slice(&streams[m->stream], m->off, m->len, op->segs);
                k += op->n_segs;
                if (m->forward_from >= 0) {
                        /* Same bytes: the send reads what the receive wrote. */
                        op->deferred = true;
                        call->ops[m->forward_from].forward = op;
                }
        }
        /* Lane seqs in plan order: the other end plans the same messages in the same order. */
        for (size_t i = 0; i < plan->n; i++) {
                const Msg *m = &plan->v[i];

                domain_op_assign(&call->ops[i],
                                 m->send ? dom->lanes[me][m->peer] : dom->lanes[m->peer][me],
                                 m->send);
        }
        return domain_call_start(call, timeout_ms ? timeout_ms : c->sync_kv_timeout_ms, err);
}

static int coll_args(Domain *dom, uint32_t algorithm, uint64_t chunk_bytes, uint64_t bytes,
                     bool broadcast, uint32_t *ret_algorithm, uint64_t *ret_chunk, Error *err)
{
        if (algorithm > KVD_ALGO_MESH)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "algorithm %" PRIu32 " is not auto (0), "
                                 "ring (1) or mesh (2)",
                                 algorithm);
        if (chunk_bytes && (chunk_bytes < CHUNK_MIN || chunk_bytes > CHUNK_MAX))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "chunk_bytes %" PRIu64 " is outside [%" PRIu64 ", %" PRIu64 "]",
                                 chunk_bytes, CHUNK_MIN, CHUNK_MAX);
        if (algorithm == KVD_ALGO_AUTO)
                algorithm = broadcast && dom->n_ranks >= 3 && bytes >= RING_MIN_BYTES
                                    ? KVD_ALGO_RING
                                    : KVD_ALGO_MESH;
        *ret_algorithm = algorithm;
        *ret_chunk = chunk_bytes ? chunk_bytes : CHUNK_DEFAULT;
        return 0;
}

int domain_handle_broadcast(DomainRegistry *reg, Cluster *c, const DomainCollArgs *m,
                            Completion *done, domain_reply_fn reply, Error *err)
{
        Domain *dom = domain_find_id(reg, m->comm_id);
        uint32_t me = 0, algorithm;
        uint64_t chunk;
        Plan plan = {0};
        OpDesc base;
        Stream s;
        int r;

        r = domain_call_check_domain(dom, c, &me, err);
        if (r < 0)
                return r;
        if (m->root_rank >= dom->n_ranks)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "root_rank %" PRIu32 " is not below "
                                 "the %u members",
                                 m->root_rank, dom->n_ranks);
        r = stream_check(c, m->cache_id, m->blocks, m->n_blocks, &s, err);
        if (r < 0)
                return r;
        r = coll_args(dom, m->algorithm, m->chunk_bytes, s.bytes, true, &algorithm, &chunk, err);
        if (r < 0)
                return r;
        base = (OpDesc){.op = OP_BROADCAST,
                        .dtype = s.cache->desc.data_type,
                        .algorithm = algorithm,
                        .root = m->root_rank,
                        .num_tensors = s.cache->desc.num_tensors,
                        .block_bytes = s.cache->stride,
                        .n_blocks = s.n_blocks};
        r = plan_broadcast(&plan, dom->n_ranks, me, m->root_rank, algorithm == KVD_ALGO_RING,
                           s.bytes, chunk, &base);
        if (r >= 0)
                r = coll_start(done, reply, c, dom, me, OP_BROADCAST, &s, &plan, algorithm,
                               m->timeout_ms, err);
        else
                r = error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        free(plan.v);
        return r;
}

int domain_handle_all_gather(DomainRegistry *reg, Cluster *c, const DomainCollArgs *m,
                             Completion *done, domain_reply_fn reply, Error *err)
{
        Domain *dom = domain_find_id(reg, m->comm_id);
        uint32_t me = 0, algorithm;
        uint64_t chunk, part;
        Stream s, parts[DOMAIN_MAX_RANKS];
        Plan plan = {0};
        OpDesc base;
        int r;

        r = domain_call_check_domain(dom, c, &me, err);
        if (r < 0)
                return r;
        if (m->blocks_per_rank == 0 || m->n_blocks != (size_t)m->blocks_per_rank * dom->n_ranks)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%zu blocks for %u members of %" PRIu32 " blocks each",
                                 m->n_blocks, dom->n_ranks, m->blocks_per_rank);
        r = stream_check(c, m->cache_id, m->blocks, m->n_blocks, &s, err);
        if (r < 0)
                return r;
        /* Part q is its own stream: blocks[q*k .. (q+1)*k) of every tensor. */
        part = (uint64_t)m->blocks_per_rank * s.cache->desc.num_tensors * s.cache->stride;
        for (uint32_t q = 0; q < dom->n_ranks; q++)
                parts[q] = (Stream){s.cache, m->blocks + (size_t)q * m->blocks_per_rank,
                                    m->blocks_per_rank, part};
        r = coll_args(dom, m->algorithm, m->chunk_bytes, part, false, &algorithm, &chunk, err);
        if (r < 0)
                return r;
        base = (OpDesc){.op = OP_ALL_GATHER,
                        .dtype = s.cache->desc.data_type,
                        .algorithm = algorithm,
                        .num_tensors = s.cache->desc.num_tensors,
                        .block_bytes = s.cache->stride,
                        .n_blocks = m->blocks_per_rank};
        r = plan_all_gather(&plan, dom->n_ranks, me, algorithm == KVD_ALGO_RING, part, chunk,
                            &base);
        if (r >= 0)
                r = coll_start(done, reply, c, dom, me, OP_ALL_GATHER, parts, &plan, algorithm,
                               m->timeout_ms, err);
        else
                r = error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        free(plan.v);
        return r;
}
