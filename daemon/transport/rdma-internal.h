/* SPDX-License-Identifier: MIT */
/*
 * What the parts of the RDMA transport share: rdma.c (devices, memory registrations,
 * async events), rdma-endpoint.c (queue pairs, endpoints, jobs, completions) and rdma-poster.c
 * (each device's posting thread). This header is the one place <infiniband/verbs.h> is included;
 * only these three files include it.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>
#include <infiniband/verbs.h>

#include "common/clist.h"
#include "common/macro.h"
#include "daemon/transport/rdma.h"
#include "daemon/memory/region.h"

#define RDMA_CQ_SIZE 4096
#define RDMA_SQ_DEPTH 256 /* work requests queued per queue pair */
/* Scatter-gather entries per work request we use at most (fewer where the device has fewer):
 * spans whose far ends continue one another, such as a slice of neighbouring blocks into whole
 * blocks, share a request. */
#define RDMA_MAX_SGE 16
/*
 * A chain (one ibv_post_send, one signalled request) ends at RDMA_BATCH requests or once it
 * carries RDMA_CHAIN_BYTES. Long chains of small requests keep completions, and the wake-ups of
 * the loop and the posting thread that come with each, few; the byte bound keeps one call short
 * where posting moves the bytes (soft-RoCE does it inside the call, in the kernel).
 */
#define RDMA_BATCH 64
#define RDMA_CHAIN_BYTES (UINT64_C(2) << 20)
#define RDMA_POLL_BATCH 32
/* Completions handled per pass of the event loop. More wait for the next pass, so a long job
 * (whose completions refill the queue as fast as they are polled) never keeps clients, peers and
 * heartbeats waiting. */
#define RDMA_POLL_BUDGET 64
#define RDMA_ACK_BATCH 64 /* CQ events acknowledged together */
#define RDMA_FIFO (RDMA_SQ_DEPTH / 1 + 1)

struct event;
struct event_base;
typedef struct RdmaQp RdmaQp;
typedef struct RdmaSlot RdmaSlot;

/* One chain of work requests, built on the loop and posted by the device's posting thread. */
typedef struct RdmaPost {
        CList link;        /* on RdmaPoster.queue, .refused or .spare */
        RdmaQp *q;         /* whose chain it is (the thread only compares it) */
        struct ibv_qp *qp; /* where the thread posts it */
        int error;         /* ibv_post_send()'s errno, on RdmaPoster.refused */
        struct ibv_send_wr wrs[RDMA_BATCH];
        struct ibv_sge sges[RDMA_BATCH][RDMA_MAX_SGE];
} RdmaPost;

/*
 * A device's posting thread and what it shares with the loop: everything below @lock is read
 * and written under it.
 */
typedef struct RdmaPoster {
        pthread_t thread;
        bool started, lock_init, cond_init;
        int efd;          /* eventfd: chains were refused (-1 when none) */
        struct event *ev; /* the loop's watch on @efd */
        pthread_mutex_t lock;
        pthread_cond_t wake; /* for the thread: a chain was queued, or stop */
        pthread_cond_t left; /* for the loop: the thread left @busy */
        CList queue;         /* RdmaPost.link: to post, oldest first */
        CList refused;       /* RdmaPost.link: refused, for the loop */
        CList spare;         /* RdmaPost.link: posted, for reuse */
        unsigned n_spare;
        RdmaQp *busy; /* the queue pair inside ibv_post_send() now */
        bool idle;    /* the thread waits on @wake */
        bool waiting; /* the loop waits on @left */
        bool stop;
} RdmaPoster;

struct RdmaContext {
        TransportSet *set;
        RdmaDevice **devs;
        size_t n_devs;
};

struct RdmaDevice {
        RdmaContext *ctx;
        char name[64];
        char error[160]; /* why it cannot be used; "" when it can */
        struct ibv_context *ibv;
        struct ibv_pd *pd;
        struct ibv_comp_channel *chan;
        struct ibv_cq *cq;
        struct event *ev_cq;
        struct event *ev_kick; /* zero timer: runs the CQ handler on the next pass */
        struct event *ev_async;
        uint8_t port;
        int gid_index;
        union ibv_gid gid;
        struct ibv_port_attr port_attr;
        struct ibv_device_attr attr;
        unsigned unacked;     /* CQ events not acknowledged yet */
        struct ibv_wc *stash; /* completions polled while flushing another QP */
        size_t n_stash, cap_stash;
        unsigned dispatching;      /* rdma_on_cq() runs completions */
        RdmaQp *dead;              /* destroyed meanwhile, freed when it is done */
        struct ibv_mr *pool_mr;    /* the daemon's whole memory pool, remote read/write */
        const Region *pool_region; /* the region pool_mr covers */
        int pool_error;            /* why the pool is not registered: -errno, 0 when it is */
        CList endpoints;           /* RdmaEndpoint.link_dev */
        RdmaPoster poster;
        uint64_t mrs, mr_bytes, reg_usec, reg_count, wc_errors, async_events;
        const char *last_wc_error;
        const char *last_async_event;
};

/* One queue pair's life: freed after it was destroyed and its completions were consumed. */
struct RdmaQp {
        RdmaSlot *slot;
        struct ibv_qp *qp;
        /* Per chained batch in the send queue, oldest first: work requests, segments, bytes. */
        struct {
                uint16_t wrs;
                uint16_t segs;
                uint64_t bytes;
        } fifo[RDMA_FIFO];
        unsigned fifo_head, fifo_len;
        unsigned outstanding; /* work requests posted, not known complete */
        bool stopped;         /* in the error state, nothing of it left to post */
        bool dead;            /* destroyed; completions naming it are dropped */
        RdmaQp *next_dead;
};

struct RdmaSlot {
        RdmaEndpoint *ep;
        unsigned index;
        RdmaQp *qp; /* NULL when none exists */
        uint32_t psn;
        bool connected;
        RdmaJob *job; /* the job using this slot */
};

struct RdmaEndpoint {
        RdmaDevice *dev;
        uint64_t id;
        bool initiator;
        RdmaDeviceInfo remote;
        enum ibv_mtu mtu;
        unsigned n_slots;
        RdmaSlot slots[RDMA_MAX_SLOTS];
        CList waiting; /* RdmaJob.link_wait: jobs waiting for slots */
        CList link_dev;
        RdmaEndpointStats stats;
};

struct RdmaJob {
        RdmaEndpoint *ep;
        bool read;
        const RdmaSegment *segs;
        size_t n;
        size_t next;         /* next segment to post, shared by the job's slots */
        size_t completed;    /* segments known complete */
        uint64_t bytes_done; /* their bytes */
        uint32_t slots;      /* mask of slots held */
        int status;
        bool stopping;
        rdma_done_fn done;
        void *userdata;
        CList link_wait;
};

static inline uint32_t rdma_mtu_bytes(enum ibv_mtu m)
{
        return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static inline enum ibv_mtu rdma_mtu_enum(uint32_t bytes)
{
        for (enum ibv_mtu m = IBV_MTU_4096; m > IBV_MTU_256; m--)
                if (rdma_mtu_bytes(m) <= bytes)
                        return m;
        return IBV_MTU_256;
}

/* The scatter-gather entries a work request of ours carries at most on @dev. */
static inline unsigned rdma_device_max_sge(const RdmaDevice *dev)
{
        return dev->attr.max_sge > 0 ? MIN((unsigned)dev->attr.max_sge, RDMA_MAX_SGE) : 1;
}

/* rdma-endpoint.c: the completion channel's callback, on the control loop. */
void rdma_on_cq(evutil_socket_t fd, short what, void *userdata);
void rdma_device_kick(RdmaDevice *dev);

/* rdma-endpoint.c: every job on the device fails with @status and its queue pairs go. */
void rdma_device_fail_endpoints(RdmaDevice *dev, int status);

/* rdma-endpoint.c, on the loop: ibv_post_send() refused a chain of @q with -errno @error. */
void rdma_qp_refused(RdmaQp *q, int error);

/* rdma-poster.c: starts @dev's posting thread and watches its refusals on @base; -errno. */
int rdma_poster_start(RdmaDevice *dev, struct event_base *base);

/* rdma-poster.c: stops and joins the thread (no queue pair may be left) and frees its state. */
void rdma_poster_stop(RdmaDevice *dev);

/* rdma-poster.c: a chain to fill (a spare one or a new one); NULL when out of memory. */
RdmaPost *rdma_post_new(RdmaDevice *dev);

/* rdma-poster.c: hands @post (its fields set, @wrs chained) to the posting thread. */
void rdma_post_queue(RdmaDevice *dev, RdmaPost *post);

/* rdma-poster.c: drops the chains of @q that the thread did not take yet. */
void rdma_poster_take_back(RdmaDevice *dev, const RdmaQp *q);

/*
 * rdma-poster.c: returns once the thread is out of ibv_post_send() on @q (the loop moved @q to
 * the error state first, which ends such a post soon) and holds nothing of it; then @q may be
 * destroyed.
 */
void rdma_poster_wait_out(RdmaDevice *dev, const RdmaQp *q);
