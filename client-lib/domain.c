/* SPDX-License-Identifier: MIT */
/*
 * libkvdist comm domains: kvd_domain_link(), kvd_domain_status(), kvd_domain_unlink(), batch
 * send/recv and the broadcast and all-gather collectives. Arguments are checked here as far as
 * the library can; the daemon checks everything again against the domain.
 */
#include <stdlib.h>
#include <string.h>

#include "client-lib/client.h"

#define DOMAIN_LINK_TIMEOUT_MS CLIENT_CALL_TIMEOUT_MS

static int domain_link(kvd_client *c, const char *comm_name, const kvd_cluster_rank *info, size_t n,
                       const char *rank_table, uint64_t *ret_comm_id, Error *err)
{
        Kvdist__V1__DomainLink m = KVDIST__V1__DOMAIN_LINK__INIT;
        Kvdist__V1__ClusterRank ranks[KVD_MAX_DOMAIN_MEMBERS], *ptrs[KVD_MAX_DOMAIN_MEMBERS];
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        int r;

        if (!comm_name || !comm_name[0])
                return error_set(err, KVD_E_PARAM_INVALID, "comm_name is empty");
        if (strlen(comm_name) > KVD_COMM_NAME_MAX)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "comm_name is %zu characters, at most %d", strlen(comm_name),
                                 KVD_COMM_NAME_MAX);
        if (n < 2 || n > KVD_MAX_DOMAIN_MEMBERS)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "cluster_rank_info has %zu entries; a "
                                 "comm domain has 2..%d members",
                                 n, KVD_MAX_DOMAIN_MEMBERS);
        if (!info)
                return error_set(err, KVD_E_PARAM_INVALID, "cluster_rank_info is NULL");
        if (!rank_table)
                return error_set(err, KVD_E_PARAM_INVALID, "rank_table_json is NULL");
        if (!ret_comm_id)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_comm_id is NULL");
        for (size_t i = 0; i < n; i++) {
                kvdist__v1__cluster_rank__init(&ranks[i]);
                ranks[i].cluster_id = info[i].cluster_id;
                ranks[i].rank_id = info[i].rank_id;
                ptrs[i] = &ranks[i];
        }
        m.comm_name = (char *)comm_name;
        m.n_cluster_rank_info = n;
        m.cluster_rank_info = ptrs;
        m.rank_table = (char *)rank_table;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_LINK, &m.base, NULL, 0,
                      DOMAIN_LINK_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;
        *ret_comm_id = ((const Kvdist__V1__DomainLinkReply *)reply)->comm_id;
        return KVD_OK;
}

_public_ int kvd_domain_link(kvd_client *client, const char *comm_name,
                             const kvd_cluster_rank *cluster_rank_info, size_t n,
                             const char *rank_table_json, uint64_t *ret_comm_id)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = domain_link(client, comm_name, cluster_rank_info, n, rank_table_json,
                                ret_comm_id, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_domain_status(kvd_client *client, uint64_t comm_id, kvd_mem_status *ret_status)
{
        Kvdist__V1__DomainQuery m = KVDIST__V1__DOMAIN_QUERY__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const Kvdist__V1__DomainQueryReply *q;
        Error err = ERROR_INIT;
        int r;

        if (!client || !ret_status)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "%s is NULL",
                                               client ? "ret_status" : "client"));
        m.comm_id = comm_id;
        r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_QUERY, &m.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, &err);
        if (r < 0)
                return client_return(client, &err, r);
        q = (const Kvdist__V1__DomainQueryReply *)reply;
        if (q->mem_status > KVD_MEM_STATUS_FAILED)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_PROTOCOL_MISMATCH,
                                               "kvdistd answered with memory status %u",
                                               q->mem_status));
        *ret_status = (kvd_mem_status)q->mem_status;
        if (*ret_status == KVD_MEM_STATUS_FAILED)
                client_set_detail(client,
                                  q->reason && q->reason[0] ? q->reason : kvd_strerror(q->failure));
        return KVD_OK;
}

_public_ int kvd_domain_unlink(kvd_client *client, uint64_t comm_id)
{
        Kvdist__V1__DomainUnlink m = KVDIST__V1__DOMAIN_UNLINK__INIT;
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else {
                m.comm_id = comm_id;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_UNLINK, &m.base, NULL, 0,
                              CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
        }
        return client_return(client, &err, r);
}

/* The timeout a domain operation runs under, as the daemon will apply it. */
static uint32_t op_timeout(const kvd_client *c, int32_t timeout_ms)
{
        if (timeout_ms > 0)
                return (uint32_t)timeout_ms;
        return c->sync_kv_timeout_ms ?: CLIENT_DEFAULT_SYNC_KV_TIMEOUT_MS;
}

static int batch_send_recv(kvd_client *c, uint64_t comm_id, const kvd_send_recv_item *items,
                           size_t n, int32_t timeout_ms, Error *err)
{
        Kvdist__V1__DomainSendRecv m = KVDIST__V1__DOMAIN_SEND_RECV__INIT;
        Kvdist__V1__SendRecvItem its[2 * KVD_MAX_DOMAIN_MEMBERS];
        Kvdist__V1__SendRecvItem *ptrs[2 * KVD_MAX_DOMAIN_MEMBERS];
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        uint32_t timeout = op_timeout(c, timeout_ms);

        if (n > 0 && !items)
                return error_set(err, KVD_E_PARAM_INVALID, "items is NULL but n is %zu", n);
        if (n > 2 * KVD_MAX_DOMAIN_MEMBERS)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%zu items; at most one SEND to and one "
                                 "RECV from each member",
                                 n);
        for (size_t i = 0; i < n; i++) {
                if (items[i].type != KVD_SEND && items[i].type != KVD_RECV)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "items[%zu].type %d is neither "
                                         "KVD_SEND nor KVD_RECV",
                                         i, (int)items[i].type);
                if (items[i].count > 0 && !items[i].buf)
                        return error_set(err, KVD_E_PARAM_INVALID, "items[%zu].buf is NULL", i);
                if ((unsigned)items[i].data_type >= _KVD_DT_MAX)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "items[%zu].data_type %d is not "
                                         "a kvd_dtype",
                                         i, (int)items[i].data_type);
                kvdist__v1__send_recv_item__init(&its[i]);
                its[i].recv = items[i].type == KVD_RECV;
                its[i].addr = (uint64_t)(uintptr_t)items[i].buf;
                its[i].count = items[i].count;
                its[i].dtype = (uint32_t)items[i].data_type;
                its[i].remote_rank = items[i].remote_rank;
                ptrs[i] = &its[i];
        }
        m.comm_id = comm_id;
        m.n_items = n;
        m.items = ptrs;
        m.timeout_ms = timeout;
        return conn_call(c, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_SEND_RECV, &m.base, NULL, 0,
                         timeout + CLIENT_GRACE_MS, &reply, NULL, err);
}

_public_ int kvd_domain_batch_send_recv(kvd_client *client, uint64_t comm_id,
                                        const kvd_send_recv_item *items, size_t n,
                                        int32_t timeout_ms)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = batch_send_recv(client, comm_id, items, n, timeout_ms, &err);
        return client_return(client, &err, r);
}

/* kvd_collective_opts as libkvdist 1.0 laid it out: fields appended later lie past this. */
#define COLLECTIVE_OPTS_V1_SIZE (offsetof(kvd_collective_opts, chunk_bytes) + sizeof(uint64_t))

/* Checks the options every collective takes into @ret_opts; fills @ret_timeout. */
static int collective_opts(const kvd_client *c, const kvd_collective_opts *opts,
                           const uint64_t *blocks, size_t n_blocks, kvd_collective_opts *ret_opts,
                           uint32_t *ret_timeout, Error *err)
{
        int r;

        if (n_blocks == 0)
                return error_set(err, KVD_E_PARAM_INVALID, "no blocks given");
        if (!blocks)
                return error_set(err, KVD_E_PARAM_INVALID, "blocks is NULL");
        r = client_copy_opts(ret_opts, sizeof(*ret_opts), COLLECTIVE_OPTS_V1_SIZE, opts,
                             opts ? opts->size : 0, "opts", err);
        if (r < 0)
                return r;
        if ((unsigned)ret_opts->algorithm > KVD_ALGO_MESH)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "opts.algorithm %d is not "
                                 "KVD_ALGO_AUTO, KVD_ALGO_RING or KVD_ALGO_MESH",
                                 (int)ret_opts->algorithm);
        *ret_timeout = op_timeout(c, ret_opts->timeout_ms);
        return 0;
}

static int collective_result(int r, ProtobufCMessage *reply, kvd_algorithm *ret_algorithm)
{
        if (r == KVD_OK && ret_algorithm)
                *ret_algorithm =
                        (kvd_algorithm)((const Kvdist__V1__DomainBroadcastReply *)reply)->algorithm;
        return r;
}

_public_ int kvd_domain_broadcast(kvd_client *client, uint64_t comm_id, uint32_t root_rank,
                                  uint64_t cache_id, const uint64_t *blocks, size_t n_blocks,
                                  const kvd_collective_opts *opts, kvd_algorithm *ret_algorithm)
{
        Kvdist__V1__DomainBroadcast m = KVDIST__V1__DOMAIN_BROADCAST__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        Error err = ERROR_INIT;
        kvd_collective_opts o;
        uint32_t timeout;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        r = collective_opts(client, opts, blocks, n_blocks, &o, &timeout, &err);
        if (r == KVD_OK) {
                m.comm_id = comm_id;
                m.root_rank = root_rank;
                m.cache_id = cache_id;
                m.n_blocks = n_blocks;
                m.blocks = (uint64_t *)blocks;
                m.algorithm = (uint32_t)o.algorithm;
                m.timeout_ms = timeout;
                m.chunk_bytes = o.chunk_bytes;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_BROADCAST, &m.base, NULL, 0,
                              timeout + CLIENT_GRACE_MS, &reply, NULL, &err);
        }
        return client_return(client, &err, collective_result(r, reply, ret_algorithm));
}

_public_ int kvd_domain_all_gather(kvd_client *client, uint64_t comm_id, uint64_t cache_id,
                                   const uint64_t *blocks, size_t n_blocks, size_t blocks_per_rank,
                                   const kvd_collective_opts *opts, kvd_algorithm *ret_algorithm)
{
        Kvdist__V1__DomainAllGather m = KVDIST__V1__DOMAIN_ALL_GATHER__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        Error err = ERROR_INIT;
        kvd_collective_opts o;
        uint32_t timeout;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        r = collective_opts(client, opts, blocks, n_blocks, &o, &timeout, &err);
        if (r == KVD_OK && (blocks_per_rank == 0 || blocks_per_rank > UINT32_MAX ||
                            n_blocks % blocks_per_rank != 0))
                r = error_set(&err, KVD_E_PARAM_INVALID,
                              "%zu blocks are not a whole number of "
                              "parts of %zu blocks",
                              n_blocks, blocks_per_rank);
        if (r == KVD_OK) {
                m.comm_id = comm_id;
                m.cache_id = cache_id;
                m.n_blocks = n_blocks;
                m.blocks = (uint64_t *)blocks;
                m.blocks_per_rank = (uint32_t)blocks_per_rank;
                m.algorithm = (uint32_t)o.algorithm;
                m.timeout_ms = timeout;
                m.chunk_bytes = o.chunk_bytes;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_DOMAIN_ALL_GATHER, &m.base, NULL, 0,
                              timeout + CLIENT_GRACE_MS, &reply, NULL, &err);
        }
        return client_return(client, &err, collective_result(r, reply, ret_algorithm));
}
