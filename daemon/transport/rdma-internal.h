/* SPDX-License-Identifier: MIT */
/*
 * What the two halves of the RDMA transport share: transport-rdma.c (devices, memory
 * registrations, async events) and rdma-endpoint.c (queue pairs, endpoints, jobs, completions).
 * This header is the one place <infiniband/verbs.h> is included; only these two files include it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>
#include <infiniband/verbs.h>

#include "common/clist.h"
#include "daemon/transport/rdma.h"
#include "daemon/memory/region.h"


#define RDMA_CQ_SIZE 4096
#define RDMA_SQ_DEPTH 256               /* work requests queued per queue pair */
#define RDMA_MAX_SGE 4                  /* scatter-gather entries per work request we use */
#define RDMA_BATCH 16                   /* work requests chained per ibv_post_send */
#define RDMA_POLL_BATCH 32
/* Completions handled per pass of the event loop. More wait for the next pass, so a long job
 * (whose completions refill the queue as fast as they are polled) never keeps clients, peers and
 * heartbeats waiting. */
#define RDMA_POLL_BUDGET 64
#define RDMA_ACK_BATCH 64               /* CQ events acknowledged together */
#define RDMA_FIFO (RDMA_SQ_DEPTH / 1 + 1)

typedef struct RdmaQp RdmaQp;
typedef struct RdmaSlot RdmaSlot;

struct RdmaContext {
        TransportSet *set;
        RdmaDevice **devs;
        size_t n_devs;
};

struct RdmaDevice {
        RdmaContext *ctx;
        char name[64];
        char error[160];                /* why it cannot be used; "" when it can */
        struct ibv_context *ibv;
        struct ibv_pd *pd;
        struct ibv_comp_channel *chan;
        struct ibv_cq *cq;
        struct event *ev_cq;
        struct event *ev_kick;          /* zero timer: runs the CQ handler on the next pass */
        struct event *ev_async;
        uint8_t port;
        int gid_index;
        union ibv_gid gid;
        struct ibv_port_attr port_attr;
        struct ibv_device_attr attr;
        unsigned unacked;               /* CQ events not acknowledged yet */
        struct ibv_wc *stash;           /* completions polled while flushing another QP */
        size_t n_stash, cap_stash;
        unsigned dispatching;           /* rdma_on_cq() runs completions */
        RdmaQp *dead;                   /* destroyed meanwhile, freed when it is done */
        struct ibv_mr *pool_mr;         /* the daemon's whole memory pool, remote read/write */
        const Region *pool_region;      /* the region pool_mr covers */
        int pool_error;                 /* why the pool is not registered: -errno, 0 when it is */
        CList endpoints;                /* RdmaEndpoint.link_dev */
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
        unsigned outstanding;           /* work requests posted, not known complete */
        bool dead;                      /* destroyed; completions naming it are dropped */
        RdmaQp *next_dead;
};

struct RdmaSlot {
        RdmaEndpoint *ep;
        unsigned index;
        RdmaQp *qp;                     /* NULL when none exists */
        uint32_t psn;
        bool connected;
        RdmaJob *job;                   /* the job using this slot */
};

struct RdmaEndpoint {
        RdmaDevice *dev;
        uint64_t id;
        bool initiator;
        RdmaDeviceInfo remote;
        enum ibv_mtu mtu;
        unsigned n_slots;
        RdmaSlot slots[RDMA_MAX_SLOTS];
        CList waiting;                  /* RdmaJob.link_wait: jobs waiting for slots */
        CList link_dev;
        RdmaEndpointStats stats;
};

struct RdmaJob {
        RdmaEndpoint *ep;
        bool read;
        const RdmaSegment *segs;
        size_t n;
        size_t next;                    /* next segment to post, shared by the job's slots */
        size_t completed;               /* segments known complete */
        uint64_t bytes_done;            /* their bytes */
        uint32_t slots;                 /* mask of slots held */
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

/* rdma-endpoint.c: the completion channel's callback, on the control loop. */
void rdma_on_cq(evutil_socket_t fd, short what, void *userdata);
void rdma_device_kick(RdmaDevice *dev);

/* rdma-endpoint.c: every job on the device fails with @status and its queue pairs go. */
void rdma_device_fail_endpoints(RdmaDevice *dev, int status);
