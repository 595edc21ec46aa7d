/* SPDX-License-Identifier: MIT */
/*
 * Handlers: the domain requests, decoded into domain/'s plain arguments and handed down with the
 * request's Completion; the replies are built here from what domain/ answers.
 */
#include <assert.h>
#include <stdlib.h>

#include "common/macro.h"
#include "common/status.h"
#include "daemon/control/conn.h"
#include "daemon/control/dispatch.h"
#include "daemon/domain/domain.h"
#include "proto/kvdist.pb-c.h"
#include "proto/status-wire.h"

static int domain_link_reply(Completion *done, const DomainReply *r)
{
        Kvdist__V1__DomainLinkReply reply = KVDIST__V1__DOMAIN_LINK_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        reply.status = &st;
        reply.comm_id = r->comm_id;
        return completion_reply(done, &reply.base, -1);
}

int handle_domain_link(Request *req, Error *err)
{
        const Kvdist__V1__DomainLink *m = (const Kvdist__V1__DomainLink *)req->msg;
        _cleanup_free_ DomainClusterRank *ranks = NULL;
        DomainLinkArgs args = {
                .comm_name = m->comm_name,
                .n_ranks = m->n_cluster_rank_info,
                .rank_table = m->rank_table,
        };

        ranks = calloc(args.n_ranks ?: 1, sizeof(*ranks));
        if (!ranks)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < args.n_ranks; i++)
                ranks[i] = (DomainClusterRank){
                        .cluster_id = m->cluster_rank_info[i]->cluster_id,
                        .rank_id = m->cluster_rank_info[i]->rank_id,
                };
        args.ranks = ranks;
        return domain_handle_link(conn_domain_registry(req->conn), req->conn->cluster, &args,
                                  &req->done, domain_link_reply, err);
}

int handle_domain_unlink(Request *req, Error *err)
{
        const Kvdist__V1__DomainUnlink *m = (const Kvdist__V1__DomainUnlink *)req->msg;
        int r;

        r = domain_handle_unlink(conn_domain_registry(req->conn), req->conn->cluster, m->comm_id,
                                 err);
        if (r < 0)
                return r;
        return completion_reply_ok(&req->done, -1), 0;
}

int handle_domain_query(Request *req, Error *err)
{
        const Kvdist__V1__DomainQuery *m = (const Kvdist__V1__DomainQuery *)req->msg;
        Kvdist__V1__DomainQueryReply reply = KVDIST__V1__DOMAIN_QUERY_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        DomainQueryResult res;
        int r;

        r = domain_handle_query(conn_domain_registry(req->conn), req->conn->cluster, m->comm_id,
                                &res, err);
        if (r < 0)
                return r;
        reply.status = &st;
        reply.mem_status = res.mem_status;
        if (res.reason) {
                reply.failure = status_wire_encode(res.failure);
                reply.reason = (char *)res.reason;
        }
        return completion_reply(&req->done, &reply.base, -1), 0;
}

static int domain_send_recv_reply(Completion *done, const DomainReply *r)
{
        Kvdist__V1__DomainSendRecvReply reply = KVDIST__V1__DOMAIN_SEND_RECV_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ int32_t *rets = NULL;

        rets = calloc(r->n_rets ?: 1, sizeof(*rets));
        if (!rets)
                return completion_fail(done, STATUS_OUT_OF_MEMORY, NULL);
        for (size_t i = 0; i < r->n_rets; i++)
                rets[i] = status_wire_encode(r->rets[i]);
        st.code = status_wire_encode(r->status);
        st.detail = (char *)r->detail;
        reply.status = &st;
        reply.rets = rets;
        reply.n_rets = r->n_rets;
        return completion_reply(done, &reply.base, -1);
}

int handle_domain_send_recv(Request *req, Error *err)
{
        const Kvdist__V1__DomainSendRecv *m = (const Kvdist__V1__DomainSendRecv *)req->msg;
        _cleanup_free_ DomainSendRecvItem *items = NULL;
        DomainSendRecvArgs args = {
                .comm_id = m->comm_id,
                .n_items = m->n_items,
                .timeout_ms = m->timeout_ms,
        };

        items = calloc(args.n_items ?: 1, sizeof(*items));
        if (!items)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < args.n_items; i++)
                items[i] = (DomainSendRecvItem){
                        .recv = m->items[i]->recv,
                        .addr = m->items[i]->addr,
                        .count = m->items[i]->count,
                        .dtype = m->items[i]->dtype,
                        .remote_rank = m->items[i]->remote_rank,
                };
        args.items = items;
        return domain_handle_send_recv(conn_domain_registry(req->conn), req->conn->cluster, &args,
                                       &req->done, domain_send_recv_reply, err);
}

/* A broadcast's or an all-gather's reply: both have the same fields. */
static int domain_coll_reply(Completion *done, const DomainReply *r)
{
        Kvdist__V1__DomainBroadcastReply reply = KVDIST__V1__DOMAIN_BROADCAST_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        static_assert(sizeof(Kvdist__V1__DomainBroadcastReply) ==
                              sizeof(Kvdist__V1__DomainAllGatherReply),
                      "reply layouts");
        reply.status = &st;
        reply.algorithm = r->algorithm;
        reply.bytes = r->bytes;
        return completion_reply(done, &reply.base, -1);
}

int handle_domain_broadcast(Request *req, Error *err)
{
        const Kvdist__V1__DomainBroadcast *m = (const Kvdist__V1__DomainBroadcast *)req->msg;
        DomainCollArgs args = {
                .comm_id = m->comm_id,
                .root_rank = m->root_rank,
                .cache_id = m->cache_id,
                .blocks = m->blocks,
                .n_blocks = m->n_blocks,
                .algorithm = m->algorithm,
                .timeout_ms = m->timeout_ms,
                .chunk_bytes = m->chunk_bytes,
        };

        return domain_handle_broadcast(conn_domain_registry(req->conn), req->conn->cluster, &args,
                                       &req->done, domain_coll_reply, err);
}

int handle_domain_all_gather(Request *req, Error *err)
{
        const Kvdist__V1__DomainAllGather *m = (const Kvdist__V1__DomainAllGather *)req->msg;
        DomainCollArgs args = {
                .comm_id = m->comm_id,
                .cache_id = m->cache_id,
                .blocks = m->blocks,
                .n_blocks = m->n_blocks,
                .blocks_per_rank = m->blocks_per_rank,
                .algorithm = m->algorithm,
                .timeout_ms = m->timeout_ms,
                .chunk_bytes = m->chunk_bytes,
        };

        return domain_handle_all_gather(conn_domain_registry(req->conn), req->conn->cluster, &args,
                                        &req->done, domain_coll_reply, err);
}
