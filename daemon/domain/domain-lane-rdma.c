/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, lanes over RDMA: the registrations and WRITEs of one message. A lane whose
 * sender's link runs over RDMA moves its messages as RDMA WRITEs straight from the sender's
 * memory into the receiver's (domain-lane.c runs the words around them):
 *
 *   receiver   registers its destination for remote write, for this one message, and names
 *              every segment (address, length, remote key) in its READY
 *   sender     compares the descriptions, registers its source for local access, pairs the two
 *              segment lists up byte for byte in stream order and posts the WRITEs
 *
 * Registrations cover spans: the segments of a message that lie in one region within
 * LANE_RDMA_SPAN_GAP of each other share one, so a collective over scattered blocks registers a
 * few spans rather than one per block. A remote key reaches no byte outside its span, and no
 * span outlives its message: a receiver deregisters before its op completes, so a WRITE still on
 * its way then fails at the sender (remote access error) and lands nowhere.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "daemon/memory/region.h"
#include "common/status.h"

/* Holes between a message's segments that one span may cover (they are its own region's bytes,
 * reachable by this peer while the message runs). */
#define LANE_RDMA_SPAN_GAP (UINT64_C(1) << 20)

typedef struct SegRef {
        uintptr_t addr;
        uint64_t len;
        size_t index;
} SegRef;

static int seg_ref_cmp(const void *a, const void *b)
{
        const SegRef *x = a, *y = b;

        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Whether @r holds all of [@p, +@len). */
static bool region_holds(const Region *r, uintptr_t p, uint64_t len)
{
        uintptr_t base = (uintptr_t)r->data;

        return p >= base && len <= r->size && p - base <= r->size - len;
}

/* The region of the call that holds all of [@p, +@len), or NULL. */
static const Region *call_region_of(const DomainCall *call, uintptr_t p, uint64_t len)
{
        for (size_t i = 0; i < call->n_regions; i++)
                if (region_holds(call->regions[i], p, len))
                        return call->regions[i];
        return NULL;
}

/*
 * Registers the segments of @op in spans on the device of @device_id, or of @channel when not
 * NULL; each segment's key goes to op->seg_keys.
 */
static int lane_rdma_register(DomainOp *op, int32_t device_id, TransportChannel *channel,
                              bool remote_write)
{
        Transport *rdma =
                transport_set_get(op->lane->dom->reg->roots.transports, TRANSPORT_ROLE_DIRECT);
        size_t n = op->n_segs;
        SegRef *refs;
        int r = 0;

        refs = calloc(n ? n : 1, sizeof(*refs));
        op->seg_keys = calloc(n ? n : 1, sizeof(*op->seg_keys));
        op->mrs = calloc(n ? n : 1, sizeof(*op->mrs));
        if (!refs || !op->seg_keys || !op->mrs) {
                free(refs);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                refs[i] = (SegRef){(uintptr_t)op->segs[i].local, op->segs[i].len, i};
        qsort(refs, n, sizeof(*refs), seg_ref_cmp);
        /* Regions never overlap: a span grows while its segments stay in the first one's. */
        for (size_t i = 0, j; i < n; i = j) {
                const Region *reg = call_region_of(op->call, refs[i].addr, refs[i].len);
                uintptr_t start = refs[i].addr, end = start + refs[i].len;
                TransportRegion *mr;
                uint32_t key;

                if (!reg) {
                        r = -EFAULT; /* every segment lies in a region the call holds */
                        break;
                }
                for (j = i + 1; j < n && refs[j].addr <= end + LANE_RDMA_SPAN_GAP &&
                                region_holds(reg, refs[j].addr, refs[j].len);
                     j++)
                        end = MAX(end, (uintptr_t)(refs[j].addr + refs[j].len));
                if (end == start)
                        continue; /* nothing to register for empty segments */
                r = transport_region_register(rdma, device_id, channel, (void *)start, end - start,
                                              remote_write, &mr);
                if (r < 0)
                        break;
                op->mrs[op->n_mrs++] = mr;
                key = !mr ? 0 : remote_write ? mr->key.rkey : mr->key.lkey;
                for (size_t k = i; k < j; k++)
                        op->seg_keys[refs[k].index] = key;
        }
        free(refs);
        return r;
}

void domain_lane_rdma_release(DomainOp *op)
{
        for (size_t i = 0; i < op->n_mrs; i++)
                transport_region_free(op->mrs[i]);
        free(op->mrs);
        op->mrs = NULL;
        op->n_mrs = 0;
        free(op->seg_keys);
        op->seg_keys = NULL;
        free(op->rdma_segs);
        op->rdma_segs = NULL;
        op->n_rdma_segs = 0;
        free(op->ready_rsegs);
        op->ready_rsegs = NULL;
        op->n_ready_rsegs = 0;
}

int domain_lane_rdma_recv_register(DomainOp *op, Error *err)
{
        Lane *l = op->lane;
        Domain *dom = l->dom;
        const Cluster *c = dom->ranks[l->dst].cluster;
        const char *why = "the member left";
        int r;

        if (op->n_segs > LANE_RDMA_MAX_SEGS)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "the message has %zu segments, "
                                 "more than one READY over RDMA names (%u); use larger blocks "
                                 "or smaller chunks",
                                 op->n_segs, LANE_RDMA_MAX_SEGS);
        if (!c || transport_device_info(
                          transport_set_get(dom->reg->roots.transports, TRANSPORT_ROLE_DIRECT),
                          c->device_id, NULL, NULL, &why) < 0)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "rank %" PRIu32 " sends over "
                                 "RDMA, but rank %" PRIu32 "'s device cannot take its WRITEs: %s",
                                 l->src, l->dst, why);
        r = lane_rdma_register(op, c->device_id, NULL, true);
        if (r < 0) {
                domain_lane_rdma_release(op);
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "cannot register the receive buffer "
                                 "for RDMA: %s (is LimitMEMLOCK high enough?)",
                                 strerror(-r));
        }
        return 0;
}

int domain_lane_rdma_ready_fill(const DomainOp *op, DomainXferMsg *m)
{
        size_t n = op->n_segs;

        m->rsegs = calloc(n ? n : 1, sizeof(*m->rsegs));
        if (!m->rsegs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                m->rsegs[i] = (LaneRemoteSeg){
                        .addr = (uint64_t)(uintptr_t)op->segs[i].local,
                        .len = op->segs[i].len,
                        .rkey = op->seg_keys[i],
                };
        m->n_rsegs = n;
        m->rdma = true;
        return 0;
}

void domain_lane_rdma_ready_clear(DomainXferMsg *m)
{
        free(m->rsegs);
        m->rsegs = NULL;
        m->n_rsegs = 0;
        m->rdma = false;
}

/* Pairs our segments with the READY's into WRITEs; with @out NULL only counts them. */
static size_t lane_rdma_pair(const DomainOp *op, TransportSegment *out)
{
        const TransportSegment *a = op->segs;
        const LaneRemoteSeg *b = op->ready_rsegs;
        SegZip z = {0};
        size_t n = 0;

        while (z.i < op->n_segs && z.j < op->n_ready_rsegs) {
                size_t i = z.i, j = z.j;
                uint64_t oi = z.oi, oj = z.oj;
                uint64_t len = seg_zip_step(&z, a[i].len, b[j].len, TRANSPORT_SEGMENT_MAX);

                if (len == 0)
                        continue;
                if (out)
                        out[n] = (TransportSegment){
                                .local = (uint8_t *)a[i].local + oi,
                                .len = len,
                                .remote = b[j].addr + oj,
                                .lkey = op->seg_keys[i],
                                .rkey = b[j].rkey,
                        };
                n++;
        }
        return n;
}

int domain_lane_rdma_send_prepare(DomainOp *op, TransportChannel *channel, Error *err)
{
        Lane *l = op->lane;
        uint64_t mine = 0, theirs = 0;
        bool overflow = false;
        size_t n;
        int r;

        for (size_t i = 0; i < op->n_segs; i++)
                overflow = overflow || ADD_OVERFLOW(mine, (uint64_t)op->segs[i].len, &mine);
        for (size_t i = 0; i < op->n_ready_rsegs; i++)
                overflow = overflow || ADD_OVERFLOW(theirs, op->ready_rsegs[i].len, &theirs);
        /* Both lists must cover the message exactly: no WRITE may run past what it names. */
        if (overflow || mine != op->desc.bytes || theirs != op->desc.bytes)
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "rank %" PRIu32 " names %" PRIu64
                                 " bytes to WRITE into for a message of %" PRIu64,
                                 l->dst, theirs, op->desc.bytes);
        r = lane_rdma_register(op, 0, channel, false);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "cannot register the send buffer for "
                                 "RDMA: %s (is LimitMEMLOCK high enough?)",
                                 strerror(-r));
        n = lane_rdma_pair(op, NULL);
        op->rdma_segs = calloc(n ? n : 1, sizeof(*op->rdma_segs));
        if (!op->rdma_segs)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        op->n_rdma_segs = lane_rdma_pair(op, op->rdma_segs);
        return 0;
}
