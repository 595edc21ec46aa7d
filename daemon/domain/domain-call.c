/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, client requests: kvd_domain_link(), kvd_domain_unlink(), kvd_domain_status(),
 * kvd_domain_batch_send_recv(), and the calls every operation shares (ops, deadline, answer).
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/link-request.h"
#include "common/log.h"
#include "daemon/memory/region.h"
#include "common/status.h"

static const uint8_t dtype_sizes[] = {
        [KVD_DT_FLOAT] = 4,  [KVD_DT_FLOAT16] = 2, [KVD_DT_BF16] = 2,   [KVD_DT_INT8] = 1,
        [KVD_DT_INT16] = 2,  [KVD_DT_UINT16] = 2,  [KVD_DT_UINT8] = 1,  [KVD_DT_INT32] = 4,
        [KVD_DT_INT64] = 8,  [KVD_DT_UINT32] = 4,  [KVD_DT_UINT64] = 8, [KVD_DT_BOOL] = 1,
        [KVD_DT_DOUBLE] = 8,
};

/* ---- calls ---- */

int domain_call_new(Domain *dom, uint32_t rank, Cluster *c, Completion *done, domain_reply_fn reply,
                    OpKind kind, size_t n_ops, size_t n_segs, DomainCall **ret)
{
        DomainCall *call = calloc(1, sizeof(*call));

        if (!call)
                return -ENOMEM;
        call->ops = calloc(n_ops ? n_ops : 1, sizeof(*call->ops));
        call->segs = calloc(n_segs ? n_segs : 1, sizeof(*call->segs));
        if (!call->ops || !call->segs) {
                free(call->ops);
                free(call->segs);
                free(call);
                return -ENOMEM;
        }
        call->dom = dom;
        call->rank = rank;
        call->cluster_id = c->id;
        call->done = done;
        call->reply = reply;
        call->kind = kind;
        call->n_ops = n_ops;
        call->start_usec = now_usec(CLOCK_MONOTONIC);
        for (size_t i = 0; i < n_ops; i++) {
                call->ops[i].call = call;
                clist_init(&call->ops[i].link_lane);
                clist_init(&call->ops[i].link_done);
        }
        domain_ref(dom);
        clist_link_tail(&dom->calls, &call->link_domain);
        dom->n_calls++;
        dom->reg->n_calls++;
        *ret = call;
        return 0;
}

DomainCall *domain_call_free(DomainCall *call)
{
        Domain *dom;

        if (!call)
                return NULL;
        dom = call->dom;
        for (size_t i = 0; i < call->n_ops; i++)
                assert((call->ops[i].state == OP_DONE || call->ops[i].lane == NULL) &&
                       !clist_is_linked(&call->ops[i].link_done));
        for (size_t i = 0; i < call->n_regions; i++)
                region_unref(call->regions[i]);
        if (call->timer)
                event_free(call->timer);
        completion_drop(call->done);
        clist_unlink(&call->link_domain);
        dom->n_calls--;
        dom->reg->n_calls--;
        free(call->regions);
        free(call->rets);
        free(call->ops);
        free(call->segs);
        free(call);
        domain_unref(dom);
        return NULL;
}

int domain_call_hold_region(DomainCall *call, Region *r)
{
        Region **v;

        for (size_t i = 0; i < call->n_regions; i++)
                if (call->regions[i] == r)
                        return 0;
        v = realloc(call->regions, (call->n_regions + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        call->regions = v;
        call->regions[call->n_regions++] = region_ref(r);
        return 0;
}

static const char *call_kind_name(OpKind k)
{
        return k == OP_BATCH ? "batch_send_recv" : k == OP_BROADCAST ? "broadcast" : "all_gather";
}

static void call_finish(DomainCall *call)
{
        Domain *dom = call->dom;
        DomainRegistry *reg = dom->reg;
        bool ok = call->status == STATUS_OK;

        dom->reg->calls[call->kind - 1][!ok]++;
        if (ok) {
                dom->counters.calls_ok++;
                dom->last_algorithm = (int)call->algorithm;
        } else {
                dom->counters.calls_failed++;
                log_debug("%s: %s of rank %" PRIu32 " failed: %s", DOMAIN_NAME(dom),
                          call_kind_name(call->kind), call->rank, call->err.msg);
        }
        if (call->done) {
                Completion *done = TAKE_PTR(call->done);

                if (call->kind == OP_BATCH) {
                        if (!ok)
                                domain_registry_count_error(reg, call->status);
                        (void)call->reply(done, &(DomainReply){
                                                        .status = call->status,
                                                        .detail = call->err.msg,
                                                        .rets = call->rets,
                                                        .n_rets = call->n_items,
                                                });
                } else if (!ok) {
                        (void)completion_fail(done, call->status, &call->err);
                } else {
                        (void)call->reply(done, &(DomainReply){
                                                        .algorithm = call->algorithm,
                                                        .bytes = call->bytes,
                                                });
                }
        }
        domain_call_free(call);
        domain_registry_call_ended(reg);
}

/* Stops every op of @call that is not done; the drain finishes the call after the last. */
static void call_cancel(DomainCall *call, int status, const char *reason)
{
        for (size_t i = 0; i < call->n_ops; i++) {
                DomainOp *op = &call->ops[i];

                if (op->lane && op->state != OP_DONE)
                        domain_op_cancel(op, status, "%s", reason);
        }
}

void domain_call_op_done(DomainOp *op)
{
        DomainRegistry *reg = op->call->dom->reg;

        assert(!clist_is_linked(&op->link_done));
        clist_link_tail(&reg->done, &op->link_done);
        event_active(reg->drain, EV_TIMEOUT, 1);
}

/* What completed @op means for its call. */
static void call_take_op(DomainOp *op)
{
        DomainCall *call = op->call;

        if (op->status == STATUS_OK) {
                call->bytes += op->desc.bytes;
                if (op->send)
                        call->dom->counters.bytes_sent += op->desc.bytes,
                                call->dom->reg->bytes_sent += op->desc.bytes;
                else
                        call->dom->counters.bytes_received += op->desc.bytes,
                                call->dom->reg->bytes_received += op->desc.bytes;
        }
        if (call->kind == OP_BATCH)
                call->rets[op->item] = op->status;
        /* The call says what the first item that failed, in list order, says (collectives: the
         * first failure, which stopped the rest). */
        if (op->status != STATUS_OK &&
            (call->status == STATUS_OK || (call->kind == OP_BATCH && op->item < call->err_item))) {
                call->status = op->status;
                call->err_item = op->item;
                error_clear(&call->err);
                if (call->kind == OP_BATCH)
                        error_set(&call->err, op->status, "items[%zu] (%s rank %" PRIu32 "): %s",
                                  op->item, op->send ? "SEND to" : "RECV from",
                                  op->send ? op->lane->dst : op->lane->src, op->err.msg);
                else
                        error_set(&call->err, op->status, "%s", op->err.msg);
        }
        if (op->status != STATUS_OK && call->fail_fast)
                call_cancel(call, call->status, call->err.msg);
        else if (op->status == STATUS_OK && op->forward && call->status == STATUS_OK)
                domain_op_post(op->forward);
        assert(call->n_pending > 0);
        if (--call->n_pending == 0)
                call_finish(call);
}

void domain_call_drain(DomainRegistry *reg)
{
        /* One op at a time from the head: handling one queues others (a cancel, a forward). A
         * call is finished with its last op, so none of its ops is queued any more then. */
        while (!clist_is_empty(&reg->done)) {
                DomainOp *op = clist_first_entry(&reg->done, DomainOp, link_done);

                clist_unlink(&op->link_done);
                call_take_op(op);
        }
}

static void call_on_deadline(evutil_socket_t fd, short what, void *userdata)
{
        DomainCall *call = userdata;
        char reason[ERROR_MSG_MAX];

        (void)snprintf(reason, sizeof(reason), "%s did not finish within %" PRIu64 " ms",
                       call_kind_name(call->kind),
                       (now_usec(CLOCK_MONOTONIC) - call->start_usec) / USEC_PER_MSEC);
        call_cancel(call, STATUS_TIMEOUT, reason);
}

static void call_on_request_cancel(Completion *done, void *userdata)
{
        DomainCall *call = userdata;

        call->done = NULL;
        call_cancel(call, STATUS_PEER_LOST, "the client went away");
}

void domain_calls_fail(Domain *dom, int code, const char *reason)
{
        DomainCall *call, *tmp;
        char msg[ERROR_MSG_MAX];

        (void)snprintf(msg, sizeof(msg), "%s: %s", DOMAIN_NAME(dom), reason);
        domain_ref(dom);
        CLIST_FOREACH_SAFE (call, tmp, &dom->calls, link_domain)
                call_cancel(call, code, msg);
        domain_unref(dom);
}

int domain_call_start(DomainCall *call, uint32_t timeout_ms, Error *err)
{
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};

        call->deadline_usec = call->start_usec + (usec_t)timeout_ms * USEC_PER_MSEC;
        call->n_pending = call->n_ops;
        if (call->n_ops == 0) {
                /* Nothing to do (every item had count 0): answered now. */
                call_finish(call);
                return COMPLETION_PENDING;
        }
        call->timer = evtimer_new(call->dom->reg->roots.link->base, call_on_deadline, call);
        if (!call->timer || evtimer_add(call->timer, &tv) < 0) {
                /* The seqs are taken: the other ends hear that these messages will not come.
                 * The drain frees the call, unanswered. */
                call->done = NULL;
                call_cancel(call, STATUS_OUT_OF_MEMORY, "out of memory");
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot arm the deadline");
        }
        completion_set_cancel(call->done, call_on_request_cancel, call);
        /* Receives first: their jobs exist before any sender looks. */
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < call->n_ops; i++) {
                        DomainOp *op = &call->ops[i];

                        if (op->send == (pass == 1) && !op->deferred)
                                domain_op_post(op);
                }
        return COMPLETION_PENDING;
}

int domain_call_check_domain(Domain *dom, const Cluster *c, uint32_t *ret_rank, Error *err)
{
        if (!dom)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "no comm domain with that comm_id on "
                                 "this daemon");
        for (uint32_t r = 0; r < dom->n_ranks; r++)
                if (dom->ranks[r].local && dom->ranks[r].joined && dom->ranks[r].cluster == c) {
                        *ret_rank = r;
                        if (dom->state == DOMAIN_PREPARING)
                                return error_set(err, STATUS_NOT_YET_LINK,
                                                 "%s is still PREPARING; wait until "
                                                 "kvd_domain_status() says OK",
                                                 DOMAIN_NAME(dom));
                        if (dom->state == DOMAIN_FAILED)
                                return error_set(err, dom->fail_code, "%s failed: %s",
                                                 DOMAIN_NAME(dom), dom->reason);
                        return 0;
                }
        return error_set(err, STATUS_PARAM_INVALID, "cluster %" PRIu64 " is not a member of %s",
                         c->id, DOMAIN_NAME(dom));
}

/* ---- link, unlink, query ---- */

static int check_comm_name(const char *name, Error *err)
{
        size_t len = name ? strlen(name) : 0;

        if (len == 0)
                return error_set(err, STATUS_PARAM_INVALID, "comm_name is empty");
        if (len > DOMAIN_NAME_MAX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "comm_name is %zu characters, at most "
                                 "%d",
                                 len, DOMAIN_NAME_MAX);
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "comm_name contains a control "
                                         "character at %zu",
                                         i);
        return 0;
}

/* SHA-256 over what every member must agree on: the name, each rank's cluster and device. */
static void domain_digest(Domain *dom)
{
        Sha256 h;

        sha256_init(&h);
        sha256_update(&h, "kvdist-domain-v1", 17);
        sha256_update(&h, dom->name, strlen(dom->name) + 1);
        for (uint32_t r = 0; r < dom->n_ranks; r++) {
                const DomainRank *x = &dom->ranks[r];
                char line[SOCKADDR_STR_MAX + RANK_TABLE_ID_MAX + 64];
                int n;

                n = snprintf(line, sizeof(line), "%" PRIu32 " %" PRIu64 " %s %" PRId32 " %s", r,
                             x->cluster_id, x->address, x->device_id, x->server_id);
                sha256_update(&h, line, (size_t)n + 1);
        }
        sha256_final(&h, dom->digest);
}

/*
 * Puts the @n entries of cluster_rank_info in rank order into @by_rank: any order is taken (the
 * seed passes a dict), but each rank of 0..n-1 once and each cluster once.
 */
static int cluster_ranks_sort(const DomainLinkArgs *m, size_t n, const DomainClusterRank **by_rank,
                              Error *err)
{
        for (size_t i = 0; i < n; i++)
                by_rank[i] = NULL;
        for (size_t i = 0; i < n; i++) {
                const DomainClusterRank *e = &m->ranks[i];

                if (e->rank_id >= n)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "cluster_rank_info gives "
                                         "cluster %" PRIu64 " rank %" PRIu32 "; the ranks of %zu "
                                         "members are 0..%zu, each once",
                                         e->cluster_id, e->rank_id, n, n - 1);
                if (by_rank[e->rank_id])
                        return error_set(
                                err, STATUS_PARAM_INVALID,
                                "rank %" PRIu32 " appears "
                                "twice in cluster_rank_info (clusters %" PRIu64 " and %" PRIu64 ")",
                                e->rank_id, by_rank[e->rank_id]->cluster_id, e->cluster_id);
                for (size_t k = 0; k < i; k++)
                        if (m->ranks[k].cluster_id == e->cluster_id)
                                return error_set(err, STATUS_PARAM_INVALID,
                                                 "cluster %" PRIu64
                                                 " appears twice in cluster_rank_info",
                                                 e->cluster_id);
                by_rank[e->rank_id] = e;
        }
        return 0;
}

/*
 * A device with an address of its own (devices[].address) is that address in a rank table: its
 * device_ip, which names this kvdistd, or with a "1.2" host_ip the device's own NIC address (the
 * IP only: HCCL's device_ip has no port).
 */
static int check_device_address(LinkRoot *link, const Cluster *c, uint32_t me,
                                const RankDevice *own, Error *err)
{
        const DeviceConfig *dev = link_root_find_device(link, c->device_id);

        if (!dev || !dev->address)
                return 0;
        if (strcmp(own->address_key, "host_ip") == 0) {
                if (own->device_ip[0] && !rank_table_same_ip(own->device_ip, dev->address))
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "rank %" PRIu32 "'s device_ip %s is not the address of "
                                         "device %" PRId32 " on this kvdistd (%s)",
                                         me, own->device_ip, c->device_id, dev->address);
                return 0;
        }
        if (strcmp(own->address, dev->address) != 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "rank %" PRIu32 "'s device_ip %s is not the address of "
                                 "device %" PRId32 " on this kvdistd (%s): a device with an "
                                 "address is named by it",
                                 me, own->address, c->device_id, dev->address);
        return 0;
}

/* Checks the arguments of a link call and fills @ranks (without local state). */
static int link_check(DomainRegistry *reg, Cluster *c, const DomainLinkArgs *m, DomainRank *ranks,
                      uint32_t *ret_me, Error *err)
{
        const DomainClusterRank *by_rank[DOMAIN_MAX_RANKS];
        LinkRoot *link = c->root;
        const RankDevice *own;
        RankDevice res;
        RankTable t;
        size_t n = m->n_ranks;
        uint32_t me = UINT32_MAX;
        bool given, remote = false;
        int r;

        r = check_comm_name(m->comm_name, err);
        if (r < 0)
                return r;
        if (n < 2 || n > DOMAIN_MAX_RANKS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "cluster_rank_info has %zu entries; a "
                                 "comm domain has 2..%d members",
                                 n, DOMAIN_MAX_RANKS);
        r = cluster_ranks_sort(m, n, by_rank, err);
        if (r < 0)
                return r;
        for (uint32_t o = 0; o < n; o++)
                if (by_rank[o]->cluster_id == c->id)
                        me = o;
        if (me == UINT32_MAX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the calling cluster %" PRIu64 " is not "
                                 "in cluster_rank_info",
                                 c->id);
        r = rank_table_parse(m->rank_table, &t, err);
        if (r < 0)
                return r;
        if (t.n_ranks != n)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "the rank table lists %u devices, "
                                 "cluster_rank_info %zu members",
                                 t.n_ranks, n);
        own = &t.ranks[me];
        if (own->device_id != c->device_id)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "rank %" PRIu32 " is device %" PRId32
                                 " of server %s in the rank table, but cluster %" PRIu64 " was "
                                 "initialised with device_id %" PRId32,
                                 me, own->device_id, own->server_id, c->id, c->device_id);
        r = check_device_address(link, c, me, own, err);
        if (r < 0)
                return r;
        domain_local_res(reg, c, &res, &given);
        if (given &&
            (strcmp(res.address, own->address) != 0 || strcmp(res.server_id, own->server_id) != 0))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "rank %" PRIu32 " is server %s at %s "
                                 "in the rank table, but local_comm_res says server %s at %s",
                                 me, own->server_id, own->address, res.server_id, res.address);
        if (link_root_peer_address(link)[0] && !domain_address_is_ours(link, own->address))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "rank %" PRIu32 "'s %s %s is "
                                 "not where this kvdistd accepts peers (%s)",
                                 me, own->address_key, own->address, link_root_peer_address(link));
        for (uint32_t o = 0; o < n; o++) {
                DomainRank *x = &ranks[o];
                bool attached = link_root_find_cluster(link, by_rank[o]->cluster_id);
                bool ours = domain_address_is_ours(link, t.ranks[o].address);

                *x = (DomainRank){.rank = o};
                x->cluster_id = by_rank[o]->cluster_id;
                (void)snprintf(x->address, sizeof(x->address), "%s", t.ranks[o].address);
                x->device_id = t.ranks[o].device_id;
                (void)snprintf(x->server_id, sizeof(x->server_id), "%s", t.ranks[o].server_id);
                x->local = o == me || attached || ours ||
                           strcmp(t.ranks[o].address, own->address) == 0;
                if (attached && !ours && link_root_peer_address(link)[0])
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "cluster %" PRIu64 " (rank %" PRIu32
                                         ") is attached to this kvdistd, but the rank "
                                         "table puts it at %s",
                                         x->cluster_id, o, x->address);
                remote = remote || !x->local;
        }
        if (remote && !link_root_peer_address(link)[0])
                return error_set(err, STATUS_PARAM_INVALID,
                                 "members are on other daemons, but this "
                                 "kvdistd does not accept peers (set listen_ip_info)");
        if (remote) {
                LinkTransport lt;

                /* A device that must use RDMA and cannot fails here, not while forming. */
                r = link_transport_choose(&lt, c, NULL, err);
                if (r < 0)
                        return r;
        }
        *ret_me = me;
        return 0;
}

int domain_handle_link(DomainRegistry *reg, Cluster *c, const DomainLinkArgs *m, Completion *done,
                       domain_reply_fn reply, Error *err)
{
        DomainRank ranks[DOMAIN_MAX_RANKS];
        Domain probe = {0}, *dom;
        uint32_t me = 0;
        int r;

        r = link_check(reg, c, m, ranks, &me, err);
        if (r < 0)
                return r;
        (void)snprintf(probe.name, sizeof(probe.name), "%s", m->comm_name);
        probe.n_ranks = (unsigned)m->n_ranks;
        memcpy(probe.ranks, ranks, sizeof(ranks));
        domain_digest(&probe);

        dom = domain_find_name(reg, m->comm_name);
        if (dom && dom->state == DOMAIN_FAILED) {
                /* A member left or was lost (a restart, say): linking the name again makes a
                 * new domain. The failed one stays FAILED under its comm_id until the members
                 * here that still hold it unlink it; PeerDomainJoin finds the new one. */
                log_info("%s: failed (%s); cluster %" PRIu64 " links %s again: a new domain "
                         "replaces it",
                         DOMAIN_NAME(dom), dom->reason, c->id, dom->name);
                dom->replaced = true;
                dom = NULL;
        }
        if (dom) {
                if (memcmp(dom->digest, probe.digest, sizeof(probe.digest)) != 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "comm_name %s is in use on this "
                                         "daemon by comm domain %" PRIu64 ", with another rank "
                                         "table or cluster ranks",
                                         dom->name, dom->id);
                if (dom->ranks[me].joined)
                        return error_set(err, STATUS_ALREADY_LINK,
                                         "cluster %" PRIu64 " is rank %" PRIu32 " of %s already",
                                         c->id, me, DOMAIN_NAME(dom));
                if (!dom->ranks[me].local)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "%s was linked here expecting "
                                         "rank %" PRIu32 " (cluster %" PRIu64 ") on another "
                                         "daemon",
                                         DOMAIN_NAME(dom), me, c->id);
        } else {
                if (reg->n_domains >= DOMAIN_MAX)
                        return error_set(err, STATUS_LIMIT_EXCEEDED,
                                         "%u comm domains on this "
                                         "daemon, at most %d",
                                         reg->n_domains, DOMAIN_MAX);
                r = domain_new(reg, &dom);
                if (r < 0)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                memcpy(dom->name, probe.name, sizeof(dom->name));
                memcpy(dom->digest, probe.digest, sizeof(dom->digest));
                dom->n_ranks = probe.n_ranks;
                for (uint32_t o = 0; o < dom->n_ranks; o++) {
                        dom->ranks[o] = ranks[o];
                        dom->ranks[o].dom = dom;
                        for (uint32_t k = 0; k < dom->n_ranks; k++)
                                dom->ranks[o].pairs[k] = (DomainPair){.dom = dom, .m = o, .o = k};
                }
        }
        dom->ranks[me].joined = true;
        dom->ranks[me].cluster = c;
        dom->ranks[me].seq = id_source_next_seq(c->root->ids);
        log_info("%s: cluster %" PRIu64 " joined as rank %" PRIu32 " of %u", DOMAIN_NAME(dom),
                 c->id, me, dom->n_ranks);
        if (!dom->deadline) {
                r = domain_start(dom);
                if (r < 0) {
                        domain_member_leave(dom, me, STATUS_OUT_OF_MEMORY, "could not start");
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                }
        }
        (void)reply(done, &(DomainReply){.comm_id = dom->id});
        /* Pairs with members that joined already (here or elsewhere) move on. */
        domain_join_progress(dom);
        return 0;
}

/* The domain @comm_id and the caller's rank in it (joined or not yet left). */
static int domain_member(DomainRegistry *reg, Cluster *c, uint64_t comm_id, Domain **ret,
                         uint32_t *ret_rank, Error *err)
{
        Domain *dom = domain_find_id(reg, comm_id);

        if (!dom)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "no comm domain %" PRIu64 " on this "
                                 "daemon",
                                 comm_id);
        for (uint32_t r = 0; r < dom->n_ranks; r++)
                if (dom->ranks[r].local && dom->ranks[r].joined && dom->ranks[r].cluster == c) {
                        *ret = dom;
                        *ret_rank = r;
                        return 0;
                }
        return error_set(err, STATUS_PARAM_INVALID, "cluster %" PRIu64 " is not a member of %s",
                         c->id, DOMAIN_NAME(dom));
}

int domain_handle_unlink(DomainRegistry *reg, Cluster *c, uint64_t comm_id, Error *err)
{
        DomainCall *call;
        Domain *dom;
        uint32_t me = 0;
        int r;

        r = domain_member(reg, c, comm_id, &dom, &me, err);
        if (r < 0)
                return r;
        CLIST_FOREACH (call, &dom->calls, link_domain)
                if (call->rank == me)
                        return error_set(err, STATUS_LINK_BUSY,
                                         "%s has a %s of cluster %" PRIu64 " in flight",
                                         DOMAIN_NAME(dom), call_kind_name(call->kind), c->id);
        log_info("%s: cluster %" PRIu64 " (rank %" PRIu32 ") unlinks", DOMAIN_NAME(dom), c->id, me);
        domain_member_leave(dom, me, STATUS_LINK_FAILED, "unlinked");
        return 0;
}

int domain_handle_query(DomainRegistry *reg, Cluster *c, uint64_t comm_id, DomainQueryResult *ret,
                        Error *err)
{
        Domain *dom;
        uint32_t me = 0;
        int r;

        r = domain_member(reg, c, comm_id, &dom, &me, err);
        if (r < 0)
                return r;
        *ret = (DomainQueryResult){
                .mem_status = dom->state == DOMAIN_OK          ? KVD_MEM_STATUS_OK
                              : dom->state == DOMAIN_PREPARING ? KVD_MEM_STATUS_PREPARING
                                                               : KVD_MEM_STATUS_FAILED,
        };
        if (dom->state == DOMAIN_FAILED) {
                ret->failure = dom->fail_code;
                ret->reason = dom->reason;
        }
        return 0;
}

/* ---- batch send/recv ---- */

int domain_handle_send_recv(DomainRegistry *reg, Cluster *c, const DomainSendRecvArgs *m,
                            Completion *done, domain_reply_fn reply, Error *err)
{
        const Limits *lim = c->root->options.limits;
        Domain *dom = domain_find_id(reg, m->comm_id);
        int send_item[DOMAIN_MAX_RANKS], recv_item[DOMAIN_MAX_RANKS];
        Region *regions[2 * DOMAIN_MAX_RANKS];
        uint64_t offsets[2 * DOMAIN_MAX_RANKS];
        size_t n_ops = 0, k = 0;
        DomainCall *call;
        uint32_t me = 0;
        int r;

        r = domain_call_check_domain(dom, c, &me, err);
        if (r < 0)
                return r;
        if (m->n_items > 2 * DOMAIN_MAX_RANKS)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "%zu items; at most one SEND to and "
                                 "one RECV from each of the %u ranks",
                                 m->n_items, dom->n_ranks);
        if (dom->n_calls >= lim->max_inflight_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "%s has %u operations in flight "
                                 "(limits.max_inflight_per_client)",
                                 DOMAIN_NAME(dom), dom->n_calls);
        for (uint32_t o = 0; o < DOMAIN_MAX_RANKS; o++)
                send_item[o] = recv_item[o] = -1;
        for (size_t i = 0; i < m->n_items; i++) {
                const DomainSendRecvItem *it = &m->items[i];
                int *seen;
                uint64_t bytes;

                if (it->dtype >= _KVD_DT_MAX)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "items[%zu].dtype %" PRIu32 " is not a kvd_dtype", i,
                                         it->dtype);
                if (it->remote_rank >= dom->n_ranks)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "items[%zu].remote_rank %" PRIu32
                                         " is not below the %u members",
                                         i, it->remote_rank, dom->n_ranks);
                if (it->count == 0)
                        continue; /* skipped, as HCCL does */
                seen = it->recv ? &recv_item[it->remote_rank] : &send_item[it->remote_rank];
                if (*seen >= 0)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "items[%zu]: a second %s rank %" PRIu32
                                         " (items[%d] is the first); one SEND to and one "
                                         "RECV from each rank per call",
                                         i, it->recv ? "RECV from" : "SEND to", it->remote_rank,
                                         *seen);
                *seen = (int)i;
                if (MUL_OVERFLOW(it->count, (uint64_t)dtype_sizes[it->dtype], &bytes) ||
                    bytes > lim->max_region_size)
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "items[%zu]: %" PRIu64 " elements"
                                         " are more than one region holds",
                                         i, it->count);
                regions[n_ops] = region_find(&c->regions, it->addr, bytes, &offsets[n_ops]);
                if (!regions[n_ops])
                        return error_set(err, STATUS_PARAM_INVALID,
                                         "items[%zu]: the %" PRIu64 " bytes at 0x%" PRIx64
                                         " are not inside memory from "
                                         "kvd_mem_alloc()",
                                         i, bytes, it->addr);
                n_ops++;
        }
        r = domain_call_new(dom, me, c, done, reply, OP_BATCH, n_ops, n_ops, &call);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        call->n_items = m->n_items;
        call->rets = calloc(m->n_items ? m->n_items : 1, sizeof(*call->rets));
        if (!call->rets) {
                call->done = NULL;
                domain_call_free(call);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        for (size_t i = 0; i < m->n_items; i++) {
                const DomainSendRecvItem *it = &m->items[i];
                DomainOp *op;

                if (it->count == 0)
                        continue;
                op = &call->ops[k];
                op->item = i;
                op->desc = (OpDesc){.op = OP_BATCH,
                                    .count = it->count,
                                    .dtype = it->dtype,
                                    .bytes = it->count * dtype_sizes[it->dtype]};
                op->segs = &call->segs[k];
                op->n_segs = 1;
                call->segs[k] = (TransportSegment){
                        .region = regions[k], .offset = offsets[k], .len = op->desc.bytes};
                if (domain_call_hold_region(call, regions[k]) < 0) {
                        /* Nothing was assigned yet: no seq is taken. */
                        for (size_t j = 0; j < call->n_ops; j++)
                                call->ops[j].state = OP_DONE;
                        call->done = NULL;
                        domain_call_free(call);
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
                }
                k++;
        }
        for (k = 0; k < n_ops; k++) {
                DomainOp *op = &call->ops[k];
                uint32_t o = m->items[op->item].remote_rank;

                if (m->items[op->item].recv)
                        domain_op_assign(op, dom->lanes[o][me], false);
                else
                        domain_op_assign(op, dom->lanes[me][o], true);
        }
        return domain_call_start(call, m->timeout_ms ? m->timeout_ms : c->sync_kv_timeout_ms, err);
}
