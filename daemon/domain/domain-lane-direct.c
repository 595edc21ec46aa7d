/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, direct lanes: the registrations and one-sided writes of one message. A lane
 * whose sender's link runs on a transport with remote access (transport_caps()) moves its
 * messages as one-sided writes straight from the sender's memory into the receiver's
 * (domain-lane.c runs the words around them):
 *
 *   receiver   registers its destination for remote write, for this one message, and names
 *              every segment in its READY by the transport's descriptor (opaque bytes; an
 *              empty segment by an empty one)
 *   sender     unpacks the descriptors with its own transport of the same kind, compares them
 *              with the message, registers its source for local access, pairs the two segment
 *              lists up byte for byte in stream order and posts the writes
 *
 * Registrations cover spans: the segments of a message that lie in one region within
 * LANE_DIRECT_SPAN_GAP of each other share one, so a collective over scattered blocks registers
 * a few spans rather than one per block. A descriptor reaches no byte outside its span, and no
 * span outlives its message: a receiver deregisters before its op completes, so a write still on
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
#define LANE_DIRECT_SPAN_GAP (UINT64_C(1) << 20)

typedef struct SegRef {
        const Region *region;
        uint64_t offset;
        uint64_t len;
        size_t index;
} SegRef;

/* By region, then by offset. */
static int seg_ref_cmp(const void *a, const void *b)
{
        const SegRef *x = a, *y = b;
        uintptr_t rx = (uintptr_t)x->region, ry = (uintptr_t)y->region;

        if (rx != ry)
                return rx < ry ? -1 : 1;
        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Whether @r holds all of [@off, +@len). */
static bool region_holds(const Region *r, uint64_t off, uint64_t len)
{
        return len <= r->size && off <= r->size - len;
}

/* Whether @r is a region of the call that holds all of [@off, +@len). */
static bool call_holds(const DomainCall *call, const Region *r, uint64_t off, uint64_t len)
{
        for (size_t i = 0; i < call->n_regions; i++)
                if (call->regions[i] == r)
                        return region_holds(r, off, len);
        return false;
}

Transport *domain_lane_direct_transport(const Lane *l)
{
        return transport_set_get(l->dom->reg->roots.transports, TRANSPORT_ROLE_DIRECT);
}

/*
 * Registers the segments of @op in spans on the device of @device_id, or of @channel when not
 * NULL; each segment's registration goes to op->seg_regions (NULL for an empty span).
 */
static int lane_direct_register(DomainOp *op, int32_t device_id, TransportChannel *channel,
                                bool remote_write)
{
        Transport *t = domain_lane_direct_transport(op->lane);
        size_t n = op->n_segs;
        SegRef *refs;
        int r = 0;

        refs = calloc(n ? n : 1, sizeof(*refs));
        op->seg_regions = calloc(n ? n : 1, sizeof(*op->seg_regions));
        op->regions = calloc(n ? n : 1, sizeof(*op->regions));
        if (!refs || !op->seg_regions || !op->regions) {
                free(refs);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                refs[i] = (SegRef){op->segs[i].region, op->segs[i].offset, op->segs[i].len, i};
        qsort(refs, n, sizeof(*refs), seg_ref_cmp);
        /* A span grows while its segments stay in the first one's region. */
        for (size_t i = 0, j; i < n; i = j) {
                const Region *reg = refs[i].region;
                uint64_t start = refs[i].offset, end = start + refs[i].len;
                TransportRegion *mr;

                if (!reg || !call_holds(op->call, reg, refs[i].offset, refs[i].len)) {
                        r = -EFAULT; /* every segment lies in a region the call holds */
                        break;
                }
                for (j = i + 1; j < n && refs[j].region == reg &&
                                refs[j].offset <= end + LANE_DIRECT_SPAN_GAP &&
                                region_holds(reg, refs[j].offset, refs[j].len);
                     j++)
                        end = MAX(end, refs[j].offset + refs[j].len);
                if (end == start)
                        continue; /* nothing to register for empty segments */
                r = transport_region_register(t, device_id, channel, reg->data + start, end - start,
                                              remote_write, &mr);
                if (r < 0)
                        break;
                op->regions[op->n_regions++] = mr;
                for (size_t k = i; k < j; k++)
                        op->seg_regions[refs[k].index] = mr;
        }
        free(refs);
        return r;
}

void domain_lane_direct_release(DomainOp *op)
{
        for (size_t i = 0; i < op->n_regions; i++)
                transport_region_free(op->regions[i]);
        free(op->regions);
        op->regions = NULL;
        op->n_regions = 0;
        free(op->seg_regions);
        op->seg_regions = NULL;
        free(op->descs);
        op->descs = NULL;
        free(op->write_segs);
        op->write_segs = NULL;
        op->n_write_segs = 0;
        free(op->ready_descs);
        op->ready_descs = NULL;
        op->n_ready_descs = 0;
}

/* The descriptors of receive @op's segments, one each (empty for an empty segment). */
static int lane_direct_pack(DomainOp *op)
{
        size_t n = op->n_segs;

        op->descs = calloc(n ? n : 1, sizeof(*op->descs));
        if (!op->descs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                TransportDesc d;
                int r;

                if (op->segs[i].len == 0)
                        continue;
                if (!op->seg_regions[i])
                        return -EOPNOTSUPP; /* a transport with remote access registers */
                r = transport_region_desc(op->seg_regions[i],
                                          op->segs[i].region->data + op->segs[i].offset,
                                          op->segs[i].len, &d);
                if (r < 0)
                        return r;
                op->descs[i].len = d.len;
                memcpy(op->descs[i].bytes, d.bytes, d.len);
        }
        return 0;
}

int domain_lane_direct_recv_register(DomainOp *op, Error *err)
{
        Lane *l = op->lane;
        Domain *dom = l->dom;
        const Cluster *c = dom->ranks[l->dst].cluster;
        const char *why = "the member left";
        int r;

        if (op->n_segs > LANE_DIRECT_MAX_SEGS)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "the message has %zu segments, "
                                 "more than one READY of a direct lane names (%u); use larger "
                                 "blocks or smaller chunks",
                                 op->n_segs, LANE_DIRECT_MAX_SEGS);
        if (!c || transport_device_info(domain_lane_direct_transport(l), c->device_id, NULL, NULL,
                                        &why) < 0)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "rank %" PRIu32 " writes one-sided over %s, but rank %" PRIu32
                                 "'s device cannot take its writes: %s",
                                 l->src, transport_name(domain_lane_direct_transport(l)), l->dst,
                                 why);
        r = lane_direct_register(op, c->device_id, NULL, true);
        if (r < 0) {
                domain_lane_direct_release(op);
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "cannot register the receive buffer "
                                 "for %s: %s (is LimitMEMLOCK high enough?)",
                                 transport_name(domain_lane_direct_transport(l)), strerror(-r));
        }
        r = lane_direct_pack(op);
        if (r < 0) {
                domain_lane_direct_release(op);
                return error_set(err, r == -ENOMEM ? STATUS_OUT_OF_MEMORY : STATUS_FAILED,
                                 "cannot describe the receive buffer for %s: %s",
                                 transport_name(domain_lane_direct_transport(l)), strerror(-r));
        }
        return 0;
}

void domain_lane_direct_ready_fill(const DomainOp *op, DomainXferMsg *m)
{
        m->descs = op->descs;
        m->n_descs = op->n_segs;
        m->direct = true;
}

/* Pairs our segments with the READY's into writes; with @out NULL only counts them. */
static size_t lane_direct_pair(const DomainOp *op, const TransportRemote *theirs,
                               TransportSegment *out)
{
        const TransportSegment *a = op->segs;
        SegZip z = {0};
        size_t n = 0;

        while (z.i < op->n_segs && z.j < op->n_ready_descs) {
                size_t i = z.i, j = z.j;
                uint64_t oi = z.oi, oj = z.oj;
                uint64_t len = seg_zip_step(&z, a[i].len, theirs[j].len, TRANSPORT_SEGMENT_MAX);

                if (len == 0)
                        continue;
                if (out) {
                        out[n] = (TransportSegment){
                                .region = a[i].region,
                                .offset = a[i].offset + oi,
                                .len = len,
                                .lkey = op->seg_regions[i] ? op->seg_regions[i]->key.lkey : 0,
                        };
                        transport_segment_set_remote(&out[n], &theirs[j], oj);
                }
                n++;
        }
        return n;
}

/*
 * Unpacks the READY's descriptors into @ret (one per segment of theirs; an empty descriptor is
 * an empty segment): the index of the first that is not one of @t's kind, or n_ready_descs.
 */
static size_t lane_direct_unpack(const DomainOp *op, Transport *t, TransportRemote *ret)
{
        for (size_t i = 0; i < op->n_ready_descs; i++) {
                const LaneDesc *d = &op->ready_descs[i];

                ret[i] = (TransportRemote){0};
                if (d->len == 0)
                        continue;
                if (d->len > sizeof(d->bytes) ||
                    transport_desc_unpack(t, d->bytes, d->len, &ret[i]) < 0)
                        return i;
        }
        return op->n_ready_descs;
}

int domain_lane_direct_send_prepare(DomainOp *op, TransportChannel *channel, Error *err)
{
        Lane *l = op->lane;
        Transport *t = domain_lane_direct_transport(l);
        uint64_t mine = 0, theirs = 0;
        TransportRemote *remotes;
        bool overflow = false;
        size_t n, bad;
        int r;

        remotes = calloc(op->n_ready_descs ? op->n_ready_descs : 1, sizeof(*remotes));
        if (!remotes)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        /* A peer's word: every descriptor must be one, and they must cover the message
         * exactly, so that no write runs past what they name. */
        bad = lane_direct_unpack(op, t, remotes);
        if (bad < op->n_ready_descs) {
                free(remotes);
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "rank %" PRIu32 " names where to write with something that is "
                                 "no %s descriptor (segment %zu of %zu)",
                                 l->dst, transport_name(t), bad, op->n_ready_descs);
        }
        for (size_t i = 0; i < op->n_segs; i++)
                overflow = overflow || ADD_OVERFLOW(mine, (uint64_t)op->segs[i].len, &mine);
        for (size_t i = 0; i < op->n_ready_descs; i++)
                overflow = overflow || ADD_OVERFLOW(theirs, remotes[i].len, &theirs);
        if (overflow || mine != op->desc.bytes || theirs != op->desc.bytes) {
                free(remotes);
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "rank %" PRIu32 " names %" PRIu64
                                 " bytes to write into for a message of %" PRIu64,
                                 l->dst, theirs, op->desc.bytes);
        }
        r = lane_direct_register(op, 0, channel, false);
        if (r < 0) {
                free(remotes);
                return error_set(err, STATUS_OUT_OF_MEMORY,
                                 "cannot register the send buffer for "
                                 "%s: %s (is LimitMEMLOCK high enough?)",
                                 transport_name(t), strerror(-r));
        }
        n = lane_direct_pair(op, remotes, NULL);
        op->write_segs = calloc(n ? n : 1, sizeof(*op->write_segs));
        if (!op->write_segs) {
                free(remotes);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        op->n_write_segs = lane_direct_pair(op, remotes, op->write_segs);
        free(remotes);
        return 0;
}
