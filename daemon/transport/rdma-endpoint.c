/* SPDX-License-Identifier: MIT */
/* RDMA transport, endpoints half: RC queue pairs, endpoints, READ/WRITE jobs, completions. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/clist.h"
#include "common/log.h"
#include "common/random-util.h"
#include "daemon/transport/rdma-internal.h"

static void rdma_job_finish(RdmaJob *job);
static void rdma_job_pump(RdmaJob *job);
static void rdma_slot_flush(RdmaSlot *slot);
static void rdma_dispatch_wc(RdmaDevice *dev, const struct ibv_wc *wc);

/* ---- queue pairs ---- */

static RdmaQp *rdma_qp_new(RdmaSlot *slot)
{
        RdmaEndpoint *ep = slot->ep;
        struct ibv_qp_init_attr init = {
                .send_cq = ep->dev->cq,
                .recv_cq = ep->dev->cq,
                .cap = {.max_send_wr = RDMA_SQ_DEPTH,
                        .max_recv_wr = 1,
                        .max_send_sge = rdma_device_max_sge(ep->dev),
                        .max_recv_sge = 1},
                .qp_type = IBV_QPT_RC,
                .sq_sig_all = 0,
        };
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_INIT,
                .pkey_index = 0,
                .port_num = ep->dev->port,
                .qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
        };
        RdmaQp *q;
        int r;

        q = calloc(1, sizeof(*q));
        if (!q)
                return NULL;
        q->slot = slot;
        q->qp = ibv_create_qp(ep->dev->pd, &init);
        if (!q->qp) {
                free(q);
                return NULL;
        }
        r = ibv_modify_qp(q->qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (r != 0) {
                (void)ibv_destroy_qp(q->qp);
                free(q);
                errno = r;
                return NULL;
        }
        return q;
}

/* INIT -> RTR toward the peer's QP. */
static int rdma_qp_to_rtr(RdmaEndpoint *ep, RdmaQp *q, uint32_t qpn, uint32_t psn)
{
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_RTR,
                .path_mtu = ep->mtu,
                .dest_qp_num = qpn,
                .rq_psn = psn,
                .max_dest_rd_atomic = (uint8_t)MIN(16, ep->dev->attr.max_qp_rd_atom),
                .min_rnr_timer = 12,
                .ah_attr =
                        {
                                .is_global = 1,
                                .dlid = ep->remote.lid,
                                .port_num = ep->dev->port,
                                .grh = {.hop_limit = 64, .sgid_index = (uint8_t)ep->dev->gid_index},
                        },
        };

        memcpy(attr.ah_attr.grh.dgid.raw, ep->remote.address, RDMA_GID_SIZE);
        return -ibv_modify_qp(q->qp, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER);
}

/* RTR -> RTS with our PSN. */
static int rdma_qp_to_rts(RdmaEndpoint *ep, RdmaQp *q, uint32_t psn)
{
        struct ibv_qp_attr attr = {
                .qp_state = IBV_QPS_RTS,
                .timeout = 14,
                .retry_cnt = 7,
                .rnr_retry = 7,
                .sq_psn = psn,
                .max_rd_atomic = (uint8_t)MIN(16, ep->dev->attr.max_qp_init_rd_atom),
        };

        return -ibv_modify_qp(q->qp, &attr,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Drops the stashed completions that name @q. */
static void rdma_stash_drop(RdmaDevice *dev, const RdmaQp *q)
{
        size_t k = 0;

        for (size_t i = 0; i < dev->n_stash; i++)
                if ((RdmaQp *)(uintptr_t)dev->stash[i].wr_id != q)
                        dev->stash[k++] = dev->stash[i];
        dev->n_stash = k;
}

/*
 * Stops a queue pair on its way to rdma_qp_destroy(): the chains the posting thread did not post
 * yet go, and the error state ends the work requests in its send queue (and a post in progress)
 * without moving more bytes. Stopping every queue pair of a job before destroying the first
 * keeps the others from moving bytes, and the device busy, while it goes.
 */
static void rdma_qp_stop(RdmaQp *q)
{
        struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};

        if (q->stopped)
                return;
        q->stopped = true;
        /* No job takes the slot before it is connected again. */
        q->slot->connected = false;
        rdma_poster_take_back(q->slot->ep->dev, q);
        (void)ibv_modify_qp(q->qp, &attr, IBV_QP_STATE);
}

/* rdma_qp_stop() on each queue pair of the slots in @mask. */
static void rdma_endpoint_stop_slots(RdmaEndpoint *ep, uint32_t mask)
{
        for (unsigned i = 0; i < ep->n_slots; i++)
                if ((mask & (UINT32_C(1) << i)) && ep->slots[i].qp)
                        rdma_qp_stop(ep->slots[i].qp);
}

/*
 * Destroys a queue pair so that the device touches none of our memory through it any more, then
 * consumes whatever completions it left in the CQ (others are kept for the next dispatch).
 */
static void rdma_qp_destroy(RdmaQp *q)
{
        RdmaDevice *dev = q->slot->ep->dev;
        struct ibv_wc wc[RDMA_POLL_BATCH];
        int n;

        /* In the error state and out of the posting thread's hands: then it can go. */
        rdma_qp_stop(q);
        rdma_poster_wait_out(dev, q);
        (void)ibv_destroy_qp(q->qp);
        /* Completions stashed earlier may name @q too: they go with it. */
        rdma_stash_drop(dev, q);
        while ((n = ibv_poll_cq(dev->cq, RDMA_POLL_BATCH, wc)) > 0)
                for (int i = 0; i < n; i++) {
                        RdmaQp *of = (RdmaQp *)(uintptr_t)wc[i].wr_id;

                        /* Its own go with it, and so do those of queue pairs gone before. */
                        if (of == q || (of && of->dead))
                                continue;
                        if (dev->n_stash == dev->cap_stash) {
                                size_t cap = dev->cap_stash ? dev->cap_stash * 2 : 64;
                                struct ibv_wc *s = realloc(dev->stash, cap * sizeof(*s));

                                if (!s) {
                                        log_error("RDMA device %s: out of memory keeping a "
                                                  "completion, dropping it",
                                                  dev->name);
                                        continue;
                                }
                                dev->stash = s;
                                dev->cap_stash = cap;
                        }
                        dev->stash[dev->n_stash++] = wc[i];
                }
        if (dev->n_stash > 0)
                rdma_device_kick(dev);
        if (dev->dispatching) {
                /* rdma_on_cq() may hold more completions of @q, polled in the same batch as the
                 * one that got it flushed: they find it dead rather than freed. */
                q->dead = true;
                q->next_dead = dev->dead;
                dev->dead = q;
                return;
        }
        free(q);
}

/* ---- endpoints ---- */

int rdma_endpoint_new(RdmaDevice *dev, uint64_t id, bool initiator, const RdmaDeviceInfo *remote,
                      unsigned n_slots, RdmaEndpoint **ret)
{
        RdmaEndpoint *ep;

        if (!rdma_device_usable(dev) || n_slots == 0 || n_slots > RDMA_MAX_SLOTS)
                return -EINVAL;
        ep = calloc(1, sizeof(*ep));
        if (!ep)
                return -ENOMEM;
        ep->dev = dev;
        ep->id = id;
        ep->initiator = initiator;
        ep->remote = *remote;
        ep->remote.device[sizeof(ep->remote.device) - 1] = '\0';
        ep->mtu = rdma_mtu_enum(MIN(remote->mtu, rdma_mtu_bytes(dev->port_attr.active_mtu)));
        ep->n_slots = n_slots;
        for (unsigned i = 0; i < n_slots; i++)
                ep->slots[i] = (RdmaSlot){.ep = ep, .index = i};
        clist_init(&ep->waiting);
        clist_link_tail(&dev->endpoints, &ep->link_dev);
        *ret = ep;
        return 0;
}

RdmaEndpoint *rdma_endpoint_free(RdmaEndpoint *ep)
{
        RdmaJob *job, *tmp;

        if (!ep)
                return NULL;
        /* Jobs that never started: nothing to flush. */
        CLIST_FOREACH_SAFE (job, tmp, &ep->waiting, link_wait) {
                clist_unlink(&job->link_wait);
                job->status = -ECONNRESET;
                rdma_job_finish(job);
        }
        rdma_endpoint_stop_slots(ep, UINT32_MAX);
        for (unsigned i = 0; i < ep->n_slots; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job && slot->job->status == 0)
                        slot->job->status = -ECONNRESET;
                rdma_slot_flush(slot);
        }
        clist_unlink(&ep->link_dev);
        free(ep);
        return NULL;
}

int rdma_endpoint_slot_local(RdmaEndpoint *ep, unsigned slot_index, uint32_t *ret_qpn,
                             uint32_t *ret_psn)
{
        RdmaSlot *slot;
        uint32_t psn;
        int r;

        if (slot_index >= ep->n_slots)
                return -EINVAL;
        slot = &ep->slots[slot_index];
        if (slot->job)
                return -EBUSY;
        if (slot->qp)
                rdma_slot_flush(slot);
        r = random_bytes(&psn, sizeof(psn));
        if (r < 0)
                return r;
        slot->qp = rdma_qp_new(slot);
        if (!slot->qp)
                return errno ? -errno : -EIO;
        slot->psn = psn & 0xffffff;
        slot->connected = false;
        *ret_qpn = slot->qp->qp->qp_num;
        *ret_psn = slot->psn;
        return 0;
}

int rdma_endpoint_slot_connect(RdmaEndpoint *ep, unsigned slot_index, uint32_t qpn, uint32_t psn)
{
        RdmaSlot *slot;
        int r;

        if (slot_index >= ep->n_slots || !ep->slots[slot_index].qp)
                return -EINVAL;
        slot = &ep->slots[slot_index];
        r = rdma_qp_to_rtr(ep, slot->qp, qpn, psn & 0xffffff);
        if (r == 0)
                r = rdma_qp_to_rts(ep, slot->qp, slot->psn);
        if (r < 0) {
                rdma_slot_flush(slot);
                return r;
        }
        slot->connected = true;
        /* A job may have waited for this slot. */
        if (!clist_is_empty(&ep->waiting))
                rdma_job_pump(clist_first_entry(&ep->waiting, RdmaJob, link_wait));
        return 0;
}

uint64_t rdma_endpoint_id(const RdmaEndpoint *ep)
{
        return ep->id;
}

bool rdma_endpoint_initiator(const RdmaEndpoint *ep)
{
        return ep->initiator;
}

RdmaDevice *rdma_endpoint_device(const RdmaEndpoint *ep)
{
        return ep->dev;
}

const char *rdma_endpoint_remote_device(const RdmaEndpoint *ep)
{
        return ep->remote.device;
}

unsigned rdma_endpoint_n_slots(const RdmaEndpoint *ep)
{
        return ep->n_slots;
}

bool rdma_endpoint_ready(const RdmaEndpoint *ep)
{
        return rdma_endpoint_broken_slots(ep) == 0;
}

uint32_t rdma_endpoint_broken_slots(const RdmaEndpoint *ep)
{
        uint32_t mask = 0;

        for (unsigned i = 0; i < ep->n_slots; i++)
                if (!ep->slots[i].connected)
                        mask |= UINT32_C(1) << i;
        return mask;
}

void rdma_endpoint_get_stats(const RdmaEndpoint *ep, RdmaEndpointStats *ret)
{
        *ret = ep->stats;
        ret->slots_ready = 0;
        for (unsigned i = 0; i < ep->n_slots; i++)
                ret->slots_ready += ep->slots[i].connected;
}

/* ---- jobs ---- */

/* Takes @slot out of service: its queue pair goes, so it needs connecting again. */
static void rdma_slot_flush(RdmaSlot *slot)
{
        RdmaJob *job = slot->job;

        slot->connected = false;
        if (slot->qp) {
                rdma_qp_destroy(slot->qp);
                slot->qp = NULL;
        }
        if (job) {
                slot->job = NULL;
                job->slots &= ~(UINT32_C(1) << slot->index);
                if (job->slots == 0)
                        rdma_job_finish(job);
        }
}

static void rdma_job_finish(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        rdma_done_fn done = job->done;
        void *userdata = job->userdata;
        int status = job->status;

        if (status == 0 && job->completed < job->n)
                status = -EIO;
        ep->stats.jobs_in_flight--;
        if (status == 0)
                ep->stats.jobs_done++;
        else
                ep->stats.jobs_failed++;
        free(job);
        /* Slots came free: the next waiting job starts from the CQ handler, not from inside
         * whatever loop finished this one. */
        if (!clist_is_empty(&ep->waiting))
                rdma_device_kick(ep->dev);
        done(userdata, status);
}

/* Flushes every slot of @job; the last one finishes it. */
static void rdma_job_flush_slots(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        uint32_t mask = job->slots;

        rdma_endpoint_stop_slots(ep, mask);
        for (unsigned i = 0; i < ep->n_slots; i++)
                if (mask & (UINT32_C(1) << i))
                        rdma_slot_flush(&ep->slots[i]);
}

/*
 * Builds one chain of work requests on @slot from the job's cursor and hands it to the posting
 * thread. Returns the requests queued (0: the send queue is full or the job has no more), or
 * -ENOMEM.
 */
static int rdma_slot_post(RdmaSlot *slot, RdmaJob *job)
{
        RdmaDevice *dev = slot->ep->dev;
        RdmaQp *q = slot->qp;
        unsigned n_wr = 0, n_seg = 0, room, at, max_sge = rdma_device_max_sge(dev);
        uint64_t bytes = 0;
        RdmaPost *post;

        room = RDMA_SQ_DEPTH - q->outstanding;
        if (q->fifo_len == RDMA_FIFO || room == 0 || job->next == job->n)
                return 0;
        post = rdma_post_new(dev);
        if (!post)
                return -ENOMEM;
        post->q = q;
        post->qp = q->qp;
        while (n_wr < RDMA_BATCH && n_wr < room && job->next < job->n && bytes < RDMA_CHAIN_BYTES) {
                const RdmaSegment *s = &job->segs[job->next];
                struct ibv_send_wr *wr = &post->wrs[n_wr];
                unsigned k = 0;

                *wr = (struct ibv_send_wr){
                        .opcode = job->read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
                        .sg_list = post->sges[n_wr],
                        .wr.rdma = {.remote_addr = s->remote_addr, .rkey = s->rkey},
                };
                /* Segments that continue one another on the peer's side share a request. */
                do {
                        s = &job->segs[job->next];
                        post->sges[n_wr][k++] = (struct ibv_sge){
                                .addr = s->local_addr, .length = s->len, .lkey = s->lkey};
                        job->next++;
                        n_seg++;
                        bytes += s->len;
                } while (k < max_sge && job->next < job->n &&
                         job->segs[job->next].rkey == s->rkey &&
                         job->segs[job->next].remote_addr == s->remote_addr + s->len);
                wr->num_sge = (int)k;
                if (n_wr > 0)
                        post->wrs[n_wr - 1].next = wr;
                n_wr++;
        }
        /* Only the last request of a chain asks for a completion; it accounts for the chain. */
        post->wrs[n_wr - 1].send_flags = IBV_SEND_SIGNALED;
        post->wrs[n_wr - 1].wr_id = (uint64_t)(uintptr_t)q;
        /* Counted as in the send queue from now on: the thread posts a queue pair's chains in
         * order, and one it cannot post fails the job (rdma_qp_refused()). */
        at = (q->fifo_head + q->fifo_len) % RDMA_FIFO;
        q->fifo[at].wrs = (uint16_t)n_wr;
        q->fifo[at].segs = (uint16_t)n_seg;
        q->fifo[at].bytes = bytes;
        q->fifo_len++;
        q->outstanding += n_wr;
        slot->ep->stats.wrs_posted += n_wr;
        rdma_post_queue(dev, post);
        return (int)n_wr;
}

/* Keeps every slot of @job busy as far as its send queue allows; ends a finished job. */
static void rdma_job_fill(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;

        for (unsigned i = 0; i < ep->n_slots; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job != job)
                        continue;
                for (;;) {
                        int r = rdma_slot_post(slot, job);

                        if (r == 0)
                                break;
                        if (r < 0) {
                                log_warning("RDMA device %s: cannot queue work requests: %s, "
                                            "failing the transfer",
                                            ep->dev->name, strerror(-r));
                                job->status = r;
                                job->stopping = true;
                                break;
                        }
                }
                if (job->stopping)
                        break;
        }
        if (job->stopping)
                rdma_job_flush_slots(job);
}

/* Gives @job (the first waiting one) the free connected slots and starts it. */
static void rdma_job_pump(RdmaJob *job)
{
        RdmaEndpoint *ep = job->ep;
        unsigned wanted;

        /* One slot per 64 segments, at least one, at most all. */
        wanted = (unsigned)MIN((job->n + 63) / 64, (size_t)ep->n_slots);
        wanted = MAX(wanted, 1u);
        for (unsigned i = 0; i < ep->n_slots && __builtin_popcount(job->slots) < (int)wanted; i++) {
                RdmaSlot *slot = &ep->slots[i];

                if (slot->job || !slot->connected || !slot->qp)
                        continue;
                slot->job = job;
                job->slots |= UINT32_C(1) << i;
        }
        if (job->slots == 0)
                return;
        clist_unlink(&job->link_wait);
        rdma_job_fill(job);
}

int rdma_job_submit(RdmaEndpoint *ep, bool read, const RdmaSegment *segs, size_t n,
                    rdma_done_fn done, void *userdata, RdmaJob **ret)
{
        RdmaJob *job;
        bool any = false;

        if (n == 0 || !segs || !done)
                return -EINVAL;
        for (unsigned i = 0; i < ep->n_slots; i++)
                any = any || ep->slots[i].connected;
        if (!any)
                return -ENOTCONN;
        job = calloc(1, sizeof(*job));
        if (!job)
                return -ENOMEM;
        job->ep = ep;
        job->read = read;
        job->segs = segs;
        job->n = n;
        job->done = done;
        job->userdata = userdata;
        ep->stats.jobs_in_flight++;
        clist_link_tail(&ep->waiting, &job->link_wait);
        *ret = job;
        if (clist_first_entry(&ep->waiting, RdmaJob, link_wait) == job)
                rdma_job_pump(job);
        return 0;
}

uint64_t rdma_job_bytes_done(const RdmaJob *job)
{
        return job ? job->bytes_done : 0;
}

void rdma_job_cancel(RdmaJob *job)
{
        if (job->status == 0)
                job->status = -ECANCELED;
        job->stopping = true;
        if (job->slots == 0) {
                clist_unlink(&job->link_wait);
                rdma_job_finish(job);
                return;
        }
        /* Flushing destroys the queue pairs: no request of this job runs afterwards. */
        rdma_job_flush_slots(job);
}

void rdma_qp_refused(RdmaQp *q, int error)
{
        RdmaSlot *slot = q->slot;
        RdmaJob *job = slot->job;

        log_warning("RDMA device %s: ibv_post_send on slot %u: %s, flushing the transfer's queue "
                    "pairs",
                    slot->ep->dev->name, slot->index, strerror(-error));
        if (!job) {
                rdma_slot_flush(slot);
                return;
        }
        if (job->status == 0)
                job->status = error;
        job->stopping = true;
        rdma_job_flush_slots(job);
}

/* ---- completions ---- */

static void rdma_dispatch_wc(RdmaDevice *dev, const struct ibv_wc *wc)
{
        RdmaQp *q = (RdmaQp *)(uintptr_t)wc->wr_id;
        RdmaSlot *slot;
        RdmaJob *job;
        uint64_t bytes;
        unsigned segs;

        if (!q || q->dead)
                return;
        slot = q->slot;
        job = slot->job;
        if (wc->status != IBV_WC_SUCCESS) {
                dev->wc_errors++;
                dev->last_wc_error = ibv_wc_status_str(wc->status);
                log_warning("RDMA device %s: %s completion failed: %s (QP %u), flushing the "
                            "transfer's queue pairs",
                            dev->name, wc->opcode == IBV_WC_RDMA_READ ? "READ" : "WRITE",
                            ibv_wc_status_str(wc->status), wc->qp_num);
                if (job) {
                        if (job->status == 0)
                                job->status = wc->status == IBV_WC_REM_ACCESS_ERR ? -EACCES : -EIO;
                        job->stopping = true;
                        rdma_job_flush_slots(job);
                } else
                        rdma_slot_flush(slot);
                return;
        }
        if (q->fifo_len == 0)
                return;
        segs = q->fifo[q->fifo_head].segs;
        bytes = q->fifo[q->fifo_head].bytes;
        q->outstanding -= q->fifo[q->fifo_head].wrs;
        q->fifo_head = (q->fifo_head + 1) % RDMA_FIFO;
        q->fifo_len--;
        if (!job)
                return;
        job->completed += segs;
        job->bytes_done += bytes;
        slot->ep->stats.bytes += bytes;
        if (job->completed == job->n) {
                /* Every request of the job completed: its slots are free again. */
                for (unsigned i = 0; i < slot->ep->n_slots; i++)
                        if (slot->ep->slots[i].job == job) {
                                slot->ep->slots[i].job = NULL;
                                job->slots &= ~(UINT32_C(1) << i);
                        }
                rdma_job_finish(job);
                return;
        }
        if (!job->stopping)
                rdma_job_fill(job);
}

/*
 * Schedules the CQ handler for the next pass of the event loop, after the loop polled every
 * descriptor again: a zero timer, not event_active(), which would run it in the current pass
 * ahead of sockets that are ready.
 */
void rdma_device_kick(RdmaDevice *dev)
{
        static const struct timeval now = {0, 0};

        if (evtimer_add(dev->ev_kick, &now) < 0)
                log_error("RDMA device %s: cannot schedule the completion handler", dev->name);
}

void rdma_on_cq(evutil_socket_t fd, short what, void *userdata)
{
        RdmaDevice *dev = userdata;
        RdmaEndpoint *ep, *tmp;
        struct ibv_wc wc[RDMA_POLL_BATCH];
        unsigned budget = RDMA_POLL_BUDGET;
        struct ibv_cq *cq;
        void *ctx;
        int n = 0;

        dev->dispatching++;
        /* A real event, or a kick (the channel is non-blocking: then there is none to get). */
        if (ibv_get_cq_event(dev->chan, &cq, &ctx) == 0) {
                if (++dev->unacked >= RDMA_ACK_BATCH) {
                        ibv_ack_cq_events(dev->cq, dev->unacked);
                        dev->unacked = 0;
                }
                /* Re-arm before draining, so no completion slips between the two. */
                (void)ibv_req_notify_cq(dev->cq, 0);
        }
        /* Stashed ones first, oldest first: a queue pair's completions come in order. */
        while (dev->n_stash > 0 && budget > 0) {
                struct ibv_wc w = dev->stash[0];

                memmove(dev->stash, dev->stash + 1, --dev->n_stash * sizeof(w));
                rdma_dispatch_wc(dev, &w);
                budget--;
        }
        while (budget > 0 && dev->n_stash == 0 &&
               (n = ibv_poll_cq(dev->cq, budget < RDMA_POLL_BATCH ? (int)budget : RDMA_POLL_BATCH,
                                wc)) > 0) {
                for (int i = 0; i < n; i++)
                        rdma_dispatch_wc(dev, &wc[i]);
                budget -= (unsigned)n;
        }
        if (n < 0)
                log_error("RDMA device %s: ibv_poll_cq failed, ignoring", dev->name);
        /* Out of budget: the rest, which the armed channel may never signal, on the next pass. */
        if (budget == 0 || dev->n_stash > 0)
                rdma_device_kick(dev);
        if (--dev->dispatching == 0)
                while (dev->dead) {
                        RdmaQp *q = dev->dead;

                        dev->dead = q->next_dead;
                        rdma_stash_drop(dev, q);
                        free(q);
                }
        /* Jobs that wait for slots freed meanwhile. */
        CLIST_FOREACH_SAFE (ep, tmp, &dev->endpoints, link_dev)
                if (!clist_is_empty(&ep->waiting))
                        rdma_job_pump(clist_first_entry(&ep->waiting, RdmaJob, link_wait));
}

void rdma_device_fail_endpoints(RdmaDevice *dev, int status)
{
        RdmaEndpoint *ep, *tmp;

        CLIST_FOREACH (ep, &dev->endpoints, link_dev)
                rdma_endpoint_stop_slots(ep, UINT32_MAX);
        CLIST_FOREACH_SAFE (ep, tmp, &dev->endpoints, link_dev)
                for (unsigned i = 0; i < ep->n_slots; i++) {
                        RdmaSlot *slot = &ep->slots[i];

                        if (slot->job && slot->job->status == 0)
                                slot->job->status = status;
                        rdma_slot_flush(slot);
                }
}
