/* SPDX-License-Identifier: MIT */
/*
 * Transport: how a transfer's planned segments become moved bytes. Every transport fills one
 * ops table; an operation it lacks is NULL and the wrappers answer -EOPNOTSUPP. Completion is
 * always reported on the control loop with transfer_complete().
 */
#pragma once

#include <stdint.h>

typedef struct Transfer Transfer;
typedef struct Transport Transport;
typedef struct TransportSet TransportSet;

typedef struct transport_ops {
        const char *name;
        /* Starts moving @x's plan; the transport calls transfer_complete(x, status) later. */
        int (*submit)(Transport *t, Transfer *x);
        /* Asks the transport to stop @x as soon as possible; completion still follows. */
        void (*cancel)(Transport *t, Transfer *x);
        void (*destroy)(Transport *t);
        /*
         * Bytes of @x's plan moved so far (landed, or for a push sent and acknowledged by the
         * transport), for kvdistctl transfers; a negative errno when it cannot tell right now.
         */
        int (*progress)(Transport *t, const Transfer *x, uint64_t *ret);
} transport_ops;

struct Transport {
        const transport_ops *ops;
        TransportSet *set;
        uint64_t bytes;         /* moved, for status */
        uint64_t n_transfers;
};

/* The shared-memory transport: copies between regions of this daemon on the copy engine. */
int transport_shm_new(TransportSet *ts, Transport **ret);

/* The TCP transport: data jobs on the TcpData of a transfer's peer. */
int transport_tcp_new(TransportSet *ts, Transport **ret);

/* The RDMA transport: one-sided READ (pull) / WRITE (push) jobs on a link's endpoint. */
int transport_rdma_new(TransportSet *ts, Transport **ret);

int transport_submit(Transport *t, Transfer *x);
/* Bytes of @x moved so far in *@ret; a negative errno when the transport cannot tell. */
int transport_progress(Transport *t, const Transfer *x, uint64_t *ret);
void transport_cancel(Transport *t, Transfer *x);
/* Accepts NULL; returns NULL. */
Transport *transport_free(Transport *t);

const char *transport_name(const Transport *t);
