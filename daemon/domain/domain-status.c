/* SPDX-License-Identifier: MIT */
/* Comm domains as kvdistctl sees them, and the numbers metrics/ reads. */
#include <assert.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/link.h"
#include "daemon/link/peer.h"
#include "proto/status-wire.h"

static void set(json_t *o, const char *key, json_t *v, bool *ok)
{
        if (!v || json_object_set_new(o, key, v) < 0)
                *ok = false;
}

static void append(json_t *a, json_t *v, bool *ok)
{
        if (!v || json_array_append_new(a, v) < 0)
                *ok = false;
}

static json_t *json_u64(uint64_t v)
{
        return json_integer((json_int_t)v);
}

static const char *algorithm_name(int a)
{
        return a == KVD_ALGO_RING ? "ring" : a == KVD_ALGO_MESH ? "mesh" : "auto";
}

static json_t *resources(unsigned threads, unsigned notifies, unsigned channels, bool *ok)
{
        json_t *o = json_object();

        set(o, "threads", json_integer(threads), ok);
        set(o, "notifies", json_integer(notifies), ok);
        set(o, "channels", json_integer(channels), ok);
        return o;
}

static json_t *member_json(const Domain *dom, uint32_t r, bool *ok)
{
        const DomainRank *x = &dom->ranks[r];
        const Peer *p = x->local ? NULL : x->peer;
        json_t *o = json_object();

        set(o, "rank", json_integer(r), ok);
        set(o, "cluster_id", json_u64(x->cluster_id), ok);
        set(o, "address", json_string(x->address), ok);
        set(o, "server_id", json_string(x->server_id), ok);
        set(o, "device_id", json_integer(x->device_id), ok);
        set(o, "local", json_boolean(x->local), ok);
        set(o, "joined", json_boolean(x->local ? x->joined : x->ever_joined), ok);
        set(o, "ready", json_boolean(x->ready), ok);
        set(o, "peer",
            p && p->state == PEER_READY ? json_string(p->address[0] ? p->address : p->remote)
                                        : json_null(),
            ok);
        return o;
}

static const char *lane_transport(const Lane *l)
{
        return transport_name(l->transport);
}

/* The lanes with rank @o, seen from the local members. */
static json_t *channel_json(const Domain *dom, uint32_t o, bool *ok)
{
        uint64_t sends = 0, recvs = 0, sent = 0, received = 0, direct = 0;
        const char *send_tp = NULL, *recv_tp = NULL, *reason = "";
        json_t *c = json_object();
        char why[256];

        for (uint32_t m = 0; m < dom->n_ranks; m++) {
                const Lane *out = dom->lanes[m][o], *in = dom->lanes[o][m];

                if (m == o || !dom->ranks[m].local)
                        continue;
                if (out) {
                        sends += out->n_msgs;
                        sent += out->bytes;
                        direct += out->n_direct_msgs;
                        send_tp = lane_transport(out);
                }
                if (in) {
                        recvs += in->n_msgs;
                        received += in->bytes;
                        direct += in->n_direct_msgs;
                        recv_tp = lane_transport(in);
                }
                if (dom->state == DOMAIN_OK && dom->ranks[m].cluster && !dom->ranks[o].local &&
                    domain_pair_reason(dom, m, o, why, sizeof(why))[0])
                        reason = why;
        }
        set(c, "rank", json_integer(o), ok);
        set(c, "cluster_id", json_u64(dom->ranks[o].cluster_id), ok);
        /* What carries the messages each way (both lanes' senders' links); until the domain is
         * OK nothing is decided. */
        if (dom->state != DOMAIN_OK && !dom->ranks[o].local)
                send_tp = recv_tp = NULL;
        set(c, "transport",
            !send_tp || !recv_tp            ? json_null()
            : strcmp(send_tp, recv_tp) == 0 ? json_string(send_tp)
                                            : json_string("mixed"),
            ok);
        set(c, "send_transport", send_tp ? json_string(send_tp) : json_null(), ok);
        set(c, "recv_transport", recv_tp ? json_string(recv_tp) : json_null(), ok);
        set(c, "transport_reason", json_string(dom->ranks[o].local ? "same node" : reason), ok);
        set(c, "messages_rdma", json_u64(direct), ok);
        set(c, "messages_sent", json_u64(sends), ok);
        set(c, "messages_received", json_u64(recvs), ok);
        set(c, "bytes_sent", json_u64(sent), ok);
        set(c, "bytes_received", json_u64(received), ok);
        return c;
}

static json_t *domain_json(const Domain *dom, usec_t now, unsigned queue_pos, bool *ok)
{
        json_t *o = json_object(), *members = json_array(), *local = json_array(),
               *channels = json_array(), *res = json_object();
        unsigned n = dom->n_ranks;

        set(o, "comm_id", json_u64(dom->id), ok);
        set(o, "comm_name", json_string(dom->name), ok);
        set(o, "state", json_string(domain_state_to_string(dom->state)), ok);
        set(o, "setup",
            json_string(dom->state != DOMAIN_PREPARING ? "done"
                        : dom->setup == SETUP_QUEUED   ? "queued"
                        : dom->setup == SETUP_ACTIVE   ? "in_progress"
                                                       : "waiting"),
            ok);
        set(o, "queue_position", queue_pos ? json_integer(queue_pos) : json_null(), ok);
        set(o, "status",
            dom->state == DOMAIN_FAILED ? json_string(status_wire_name(dom->fail_code))
                                        : json_null(),
            ok);
        set(o, "reason", json_string(dom->reason), ok);
        set(o, "replaced", json_boolean(dom->replaced), ok);
        set(o, "ranks", json_integer(n), ok);
        for (uint32_t r = 0; r < n; r++) {
                append(members, member_json(dom, r, ok), ok);
                if (dom->ranks[r].local && dom->ranks[r].joined)
                        append(local, json_integer(r), ok);
        }
        set(o, "members", members, ok);
        set(o, "local_ranks", local, ok);
        /* auto picks ring for broadcasts of 1 MiB and more among 3 or more members. */
        set(o, "algorithm",
            json_string(n >= 3 ? "auto: ring for broadcasts from 1 MiB, else mesh"
                               : "auto: mesh (2 members)"),
            ok);
        set(o, "last_algorithm",
            dom->last_algorithm ? json_string(algorithm_name(dom->last_algorithm)) : json_null(),
            ok);
        /* Acquired when the domain formed: per rank, the seed's model of each algorithm. */
        set(o, "resources_acquired", json_boolean(dom->state == DOMAIN_OK), ok);
        set(res, "ring", resources(2, 4, 2, ok), ok);
        set(res, "mesh", resources(n - 1, 2 * (n - 1), n - 1, ok), ok);
        set(o, "resources", res, ok);
        for (uint32_t r = 0; r < n; r++) {
                bool other = false;

                for (uint32_t m = 0; m < n; m++)
                        other = other || (m != r && dom->ranks[m].local);
                if (other)
                        append(channels, channel_json(dom, r, ok), ok);
        }
        set(o, "channels", channels, ok);
        set(o, "calls_in_flight", json_integer(dom->n_calls), ok);
        set(o, "calls_ok", json_u64(dom->counters.calls_ok), ok);
        set(o, "calls_failed", json_u64(dom->counters.calls_failed), ok);
        set(o, "bytes_sent", json_u64(dom->counters.bytes_sent), ok);
        set(o, "bytes_received", json_u64(dom->counters.bytes_received), ok);
        set(o, "age_s", json_real((double)(now - dom->created_usec) / USEC_PER_SEC), ok);
        set(o, "formed_ms",
            dom->ok_usec ? json_u64((dom->ok_usec - dom->created_usec) / USEC_PER_MSEC)
                         : json_null(),
            ok);
        return o;
}

json_t *domain_status_json(DomainRegistry *reg)
{
        usec_t now = now_usec(CLOCK_MONOTONIC);
        json_t *a = json_array();
        const Domain *dom;
        bool ok = a != NULL;

        if (!reg)
                return a;
        CLIST_FOREACH (dom, &reg->domains, link_reg) {
                unsigned pos = 0, i = 0;
                const Domain *q;

                if (dom->setup == SETUP_QUEUED)
                        CLIST_FOREACH (q, &reg->queue, link_queue) {
                                i++;
                                if (q == dom)
                                        pos = i;
                        }
                append(a, domain_json(dom, now, pos, &ok), &ok);
        }
        if (!ok) {
                json_decref(a);
                return NULL;
        }
        return a;
}

void domain_registry_stats(const DomainRegistry *reg, DomainStats *ret)
{
        const Domain *dom;

        static_assert(DOMAIN_STATS_STATES == _DOMAIN_STATE_MAX, "DomainStats.by_state");
        static_assert(sizeof(ret->calls) == sizeof(reg->calls), "DomainStats.calls");
        *ret = (DomainStats){
                .setups_active = reg->n_active,
                .setups_queued = reg->n_queued,
                .formed = reg->formed,
                .failed = reg->failed,
                .bytes_sent = reg->bytes_sent,
                .bytes_received = reg->bytes_received,
        };
        for (int s = 0; s < _DOMAIN_STATE_MAX; s++)
                ret->state_names[s] = domain_state_to_string(s);
        CLIST_FOREACH (dom, &reg->domains, link_reg)
                ret->by_state[dom->state]++;
        memcpy(ret->calls, reg->calls, sizeof(ret->calls));
}
