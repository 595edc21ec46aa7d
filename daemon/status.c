/* SPDX-License-Identifier: MIT */
/* Status: the daemon's state as JSON for kvdistctl (jansson on the output side). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/config-json.h"
#include "daemon/daemon.h"
#include "daemon/domain/domain.h"
#include "daemon/transport/engine.h"
#include "kvdist-config.h"
#include "daemon/link/link.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/control/listener.h"
#include "daemon/metrics/metrics-http.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transfer/plan.h"
#include "daemon/memory/pool.h"
#include "daemon/status.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"
#include "common/thread-nice.h"

static const char *const dtype_names[] = {
        [KVD_DT_FLOAT] = "float",   [KVD_DT_FLOAT16] = "float16", [KVD_DT_BF16] = "bf16",
        [KVD_DT_INT8] = "int8",     [KVD_DT_INT16] = "int16",     [KVD_DT_UINT16] = "uint16",
        [KVD_DT_UINT8] = "uint8",   [KVD_DT_INT32] = "int32",     [KVD_DT_INT64] = "int64",
        [KVD_DT_UINT32] = "uint32", [KVD_DT_UINT64] = "uint64",   [KVD_DT_BOOL] = "bool",
        [KVD_DT_DOUBLE] = "double",
};

/* json_object_set_new() that remembers a failure instead of checking every call. */
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

static json_t *status_pool(Daemon *d, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        set(o, "size", json_u64(d->memory.pool ? pool_size(d->memory.pool) : 0), ok);
        set(o, "used", json_u64(d->memory.pool ? pool_used(d->memory.pool) : 0), ok);
        set(o, "page_size",
            json_u64(d->memory.pool ? UINT64_C(1) << pool_page_shift(d->memory.pool) : 0), ok);
        set(o, "allocations", json_u64(d->memory.pool ? pool_n_allocated(d->memory.pool) : 0), ok);
        return o;
}

static json_t *status_counters(Daemon *d, bool *ok)
{
        const ClientCounters *k = &d->control.counters;
        const LinkCounters *lk = &d->link.counters;
        const TransferCounters *tk = &d->transfer.counters;
        json_t *o = json_object(), *errors = json_object();

        if (!o || !errors) {
                json_decref(o);
                json_decref(errors);
                return NULL;
        }
        set(o, "transfers_ok", json_u64(tk->transfers_ok), ok);
        set(o, "transfers_failed", json_u64(tk->transfers_failed), ok);
        set(o, "bytes_pulled", json_u64(tk->bytes_pulled), ok);
        set(o, "bytes_pushed", json_u64(tk->bytes_pushed), ok);
        set(o, "connections_accepted", json_u64(k->conns_accepted), ok);
        set(o, "connections_refused", json_u64(k->conns_refused), ok);
        set(o, "connections_idle_closed", json_u64(k->conns_idle_closed), ok);
        set(o, "frames_malformed", json_u64(k->frames_malformed + lk->frames_malformed), ok);
        set(o, "bytes_streamed", json_u64(engine_bytes_streamed(d->transports.engine)), ok);
        set(o, "frames_decoded_away", json_u64(k->frames_decoded_away), ok);
        set(o, "peer_frames_decoded_away", json_u64(lk->frames_decoded_away), ok);
        set(o, "peers_lost", json_u64(lk->peers_lost), ok);
        set(o, "peers_refused", json_u64(lk->peers_refused), ok);
        set(o, "peer_requests_refused", json_u64(lk->peer_requests_refused), ok);
        set(o, "transfers_served", json_u64(tk->transfers_served), ok);
        set(o, "bytes_served", json_u64(tk->bytes_served), ok);
        set(o, "notifies_delivered", json_u64(lk->notifies_delivered), ok);
        for (int s = 1; s <= -_KVD_E_MIN; s++)
                if (k->errors[s] > 0)
                        set(errors, kvd_strerror(-s), json_u64(k->errors[s]), ok);
        set(o, "errors", errors, ok);
        return o;
}

/*
 * One uid's share: what it holds of each limits.per_user slot, the limit, and the charges of that
 * slot refused since the uid last held nothing.
 */
static json_t *status_user(const User *u, bool *ok)
{
        json_t *o = json_object(), *used = json_object(), *limit = json_object();
        json_t *refused = json_object();

        if (!o || !used || !limit || !refused) {
                json_decref(o);
                json_decref(used);
                json_decref(limit);
                json_decref(refused);
                return NULL;
        }
        set(o, "uid", json_integer(u->uid), ok);
        for (UserSlot k = 0; k < _USER_SLOT_MAX; k++) {
                set(used, user_slot_to_string(k), json_u64(u->used[k]), ok);
                set(limit, user_slot_to_string(k), json_u64(user_slot_limit(u->registry, k)), ok);
                set(refused, user_slot_to_string(k), json_u64(u->refused[k]), ok);
        }
        set(o, "used", used, ok);
        set(o, "limit", limit, ok);
        set(o, "refused", refused, ok);
        return o;
}

static json_t *status_cluster(const Cluster *c, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        set(o, "cluster_id", json_u64(c->id), ok);
        set(o, "role", json_string(cluster_role_to_string(c->role)), ok);
        set(o, "device_id", json_integer(c->device_id), ok);
        set(o, "pid", json_integer(c->pid), ok);
        set(o, "uid", json_integer(c->uid), ok);
        set(o, "sync_kv_timeout_ms", json_integer(c->sync_kv_timeout_ms), ok);
        set(o, "listen_ip_info", c->listen_ip_info ? json_string(c->listen_ip_info) : json_null(),
            ok);
        /* Who accepts its peers: a listener of its own, the daemon's, or nobody (a client). */
        set(o, "listener",
            !c->listen_ip_info ? json_null() : json_string(c->listener ? "own" : "daemon"), ok);
        set(o, "accepts_links", json_boolean(cluster_accepts_links(c)), ok);
        set(o, "regions", json_integer(c->n_regions), ok);
        set(o, "region_bytes", json_u64(c->region_bytes), ok);
        set(o, "caches", json_integer(c->caches.n_caches), ok);
        set(o, "keys", json_integer(c->caches.n_keys), ok);
        set(o, "tensor_addrs", json_integer(c->caches.n_addrs), ok);
        set(o, "links", json_integer(c->n_links), ok);
        set(o, "inbound_links", json_integer(c->n_links_in + c->n_inlinks), ok);
        set(o, "notifies_pending", json_integer(c->n_notifies), ok);
        set(o, "transfers_in_flight", json_integer(c->n_transfers), ok);
        return o;
}

static json_t *status_cache(const CacheTable *t, const Cache *cache, bool *ok)
{
        json_t *o = json_object(), *shape = json_array();

        if (!o || !shape) {
                json_decref(o);
                json_decref(shape);
                return NULL;
        }
        for (uint32_t i = 0; i < cache->desc.n_dims; i++)
                append(shape, json_integer(cache->desc.shape[i]), ok);
        set(o, "cache_id", json_u64(cache->id), ok);
        set(o, "cluster_id", json_u64(cache->owner_cluster_id), ok);
        set(o, "kind", json_string(cache->kind == CACHE_BLOCKS ? "blocks" : "contiguous"), ok);
        set(o, "num_tensors", json_integer(cache->desc.num_tensors), ok);
        set(o, "shape", shape, ok);
        set(o, "dtype",
            json_string(cache->desc.data_type < _KVD_DT_MAX ? dtype_names[cache->desc.data_type]
                                                            : "unknown"),
            ok);
        set(o, "tensor_size", json_u64(cache->tensor_size), ok);
        set(o, "pool", json_boolean(cache->pool_backed), ok);
        set(o, "remote_accessible", json_boolean(cache->remote_accessible), ok);
        set(o, "keys", json_integer(cache_table_count_keys(t, cache)), ok);
        set(o, "key_holds", json_integer(cache->n_key_holds), ok);
        set(o, "transfers_in_flight", json_integer(cache->n_busy), ok);
        return o;
}

static json_t *status_link(const Link *l, usec_t now, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        set(o, "link_id", json_u64(l->id), ok);
        set(o, "direction", json_string("out"), ok);
        set(o, "local_cluster", json_u64(l->local->id), ok);
        set(o, "remote_cluster", json_u64(l->remote_cluster_id), ok);
        set(o, "transport", json_string(transport_name(l->transport)), ok);
        set(o, "transport_reason", json_string(l->transport_reason), ok);
        set(o, "peer", json_string(l->exposed ? l->peer_address : ""), ok);
        set(o, "remote_caches", json_integer(l->exposed ? (json_int_t)l->exposed->n_caches : -1),
            ok);
        set(o, "state", json_string(link_state_to_string(l->state)), ok);
        set(o, "age_s", json_real((double)(now - l->created_usec) / USEC_PER_SEC), ok);
        set(o, "transfers", json_u64(l->n_transfers), ok);
        set(o, "transfers_in_flight", json_integer(l->n_inflight), ok);
        set(o, "bytes", json_u64(l->bytes), ok);
        return o;
}

/* The transport an inbound link's bytes take: its channel's when it runs on one, else the
 * stream transport's. */
static const char *status_inlink_transport(const InLink *il, bool on_channel)
{
        return transport_name(transport_set_get(
                il->root->transports, on_channel ? TRANSPORT_ROLE_DIRECT : TRANSPORT_ROLE_STREAM));
}

static json_t *status_inlink(const InLink *il, usec_t now, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        set(o, "link_id", json_u64(il->id), ok);
        set(o, "direction", json_string("in"), ok);
        set(o, "local_cluster", json_u64(il->local->id), ok);
        set(o, "remote_cluster", json_u64(il->remote_cluster_id), ok);
        set(o, "peer", json_string(il->peer->address[0] ? il->peer->address : il->peer->remote),
            ok);
        set(o, "transport", json_string(status_inlink_transport(il, il->over_channel)), ok);
        /* An inbound link lives while it is up: a lost peer or an unlink removes it. */
        set(o, "state", json_string("up"), ok);
        set(o, "age_s", json_real((double)(now - il->created_usec) / USEC_PER_SEC), ok);
        set(o, "transfers", json_u64(il->n_served), ok);
        set(o, "transfers_served", json_u64(il->n_served), ok);
        set(o, "transfers_in_flight", json_integer(il->n_inflight), ok);
        /* Links are two-way: our cluster's own transfers over it, on queue pairs of ours or on
         * the data connection. */
        set(o, "transport_out", json_string(status_inlink_transport(il, il->channel != NULL)), ok);
        set(o, "transfers_out_in_flight", json_integer(il->n_outgoing), ok);
        set(o, "bytes", json_u64(il->bytes), ok);
        return o;
}

/* A transport's facts about one device or channel, as one object, in the transport's order. */
static json_t *status_facts(const TransportFacts *f, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        for (size_t i = 0; i < f->n; i++) {
                const TransportFact *fact = &f->f[i];

                switch (fact->type) {
                case TRANSPORT_FACT_STRING:
                        set(o, fact->key, json_string(fact->s), ok);
                        break;
                case TRANSPORT_FACT_U64:
                        set(o, fact->key, json_u64(fact->u), ok);
                        break;
                case TRANSPORT_FACT_INT:
                        set(o, fact->key, json_integer(fact->i), ok);
                        break;
                case TRANSPORT_FACT_BOOL:
                        set(o, fact->key, json_boolean(fact->b), ok);
                        break;
                }
        }
        return o;
}

typedef struct FactsCtx {
        json_t *array;
        bool *ok;
        Transport *transport;
} FactsCtx;

static void status_device(const TransportFacts *f, void *userdata)
{
        FactsCtx *ctx = userdata;

        append(ctx->array, status_facts(f, ctx->ok), ctx->ok);
}

static void status_channel(TransportChannel *ep, void *userdata)
{
        FactsCtx *ctx = userdata;
        TransportFacts f;

        transport_describe_channel(ctx->transport, ep, &f);
        append(ctx->array, status_facts(&f, ctx->ok), ctx->ok);
}

static json_t *status_channels(Peer *p, Transport *t, bool *ok)
{
        FactsCtx ctx = {json_array(), ok, t};

        if (ctx.array)
                peer_channel_foreach(p, status_channel, &ctx);
        return ctx.array;
}

/* A number the transport told about a channel, or 0. */
static uint64_t status_fact_u64(const TransportFacts *f, const char *key)
{
        const TransportFact *fact = transport_facts_find(f, key);

        if (!fact)
                return 0;
        return fact->type == TRANSPORT_FACT_U64 ? fact->u : (uint64_t)fact->i;
}

static json_t *status_peer(Peer *p, TransportSet *ts, usec_t now, bool *ok)
{
        TransportFacts data;
        char node[24];
        json_t *o = json_object();

        if (!o)
                return NULL;
        /* The TCP data plane's counters (none before the peer is READY). */
        transport_describe_channel(transport_set_get(ts, TRANSPORT_ROLE_STREAM), p->data, &data);
        (void)snprintf(node, sizeof(node), "%016" PRIx64, p->node_id);
        set(o, "peer_id", json_u64(p->id), ok);
        set(o, "node_id", json_string(node), ok);
        set(o, "identity", json_string(p->identity), ok);
        set(o, "address", json_string(p->address), ok);
        set(o, "remote", json_string(p->remote), ok);
        set(o, "direction", json_string(p->dialed ? "dialed" : "accepted"), ok);
        set(o, "state", json_string(peer_state_to_string(p->state)), ok);
        set(o, "retiring", json_boolean(p->retiring), ok);
        set(o, "authenticated", json_boolean(p->authenticated), ok);
        set(o, "links", json_integer(p->n_links), ok);
        set(o, "inbound_links", json_integer(p->n_inlinks), ok);
        set(o, "data_conns", json_integer((json_int_t)status_fact_u64(&data, "connections")), ok);
        set(o, "crc", json_boolean(p->crc), ok);
        set(o, "heartbeat_rtt_us", json_u64(p->rtt_usec), ok);
        set(o, "bytes_sent", json_u64(status_fact_u64(&data, "bytes_sent")), ok);
        set(o, "bytes_received", json_u64(status_fact_u64(&data, "bytes_received")), ok);
        set(o, "jobs_in_flight", json_integer((json_int_t)status_fact_u64(&data, "jobs_in_flight")),
            ok);
        set(o, "age_s", json_real((double)(now - p->created_usec) / USEC_PER_SEC), ok);
        set(o, "rdma_endpoints",
            status_channels(p, transport_set_get(ts, TRANSPORT_ROLE_DIRECT), ok), ok);
        return o;
}

static json_t *status_transfer(const Transfer *x, usec_t now, bool *ok)
{
        json_t *o = json_object();
        uint64_t done;

        if (!o)
                return NULL;
        set(o, "transfer_id", json_u64(x->id), ok);
        set(o, "cluster_id", json_u64(x->cluster_id), ok);
        set(o, "kind", json_string(transfer_kind_to_string(x->kind)), ok);
        set(o, "remote_cluster", json_u64(x->remote_cluster_id), ok);
        set(o, "transport", json_string(transport_name(x->transport)), ok);
        set(o, "bytes", json_u64(x->total_bytes), ok);
        set(o, "bytes_done",
            transport_progress(x->transport, &x->job, &done) == 0 ? json_u64(done) : json_null(),
            ok);
        set(o, "age_ms", json_u64((now - x->start_usec) / USEC_PER_MSEC), ok);
        set(o, "state", json_string(x->state == TRANSFER_RUNNING ? "running" : "stopping"), ok);
        return o;
}

int status_to_json(Daemon *d, char **ret)
{
        usec_t now = now_usec(CLOCK_MONOTONIC);
        json_t *root, *clusters, *caches, *links, *transfers, *peers, *inlinks, *users;
        const User *u;
        const InLink *il;
        Peer *p;
        const Cluster *c;
        const Cache *cache;
        const Link *l;
        const Transfer *x;
        bool ok = true;
        char *s;

        root = json_object();
        clusters = json_array();
        caches = json_array();
        links = json_array();
        transfers = json_array();
        peers = json_array();
        inlinks = json_array();
        users = json_array();
        set(root, "users", users, &ok);
        set(root, "peers", peers, &ok);
        set(root, "inbound_links", inlinks, &ok);
        set(root, "clusters", clusters, &ok);
        set(root, "caches", caches, &ok);
        set(root, "links", links, &ok);
        set(root, "transfers", transfers, &ok);
        set(root, "domains", domain_status_json(d->domains), &ok);
        if (!root || !ok) {
                json_decref(root);
                return -ENOMEM;
        }

        set(root, "version", json_string(KVDIST_VERSION), &ok);
        set(root, "pid", json_integer(getpid()), &ok);
        set(root, "uptime_s", json_real((double)(now - d->start_usec) / USEC_PER_SEC), &ok);
        set(root, "socket", json_string(listener_path(d->control.listener)), &ok);
        set(root, "copy_threads", json_integer(engine_n_threads(d->transports.engine)), &ok);
        set(root, "copy_streaming", json_boolean(engine_streams(d->transports.engine)), &ok);
        /* status is built on the loop: this thread's own value */
        set(root, "control_nice", json_integer(thread_nice_get()), &ok);
        set(root, "stopping", json_boolean(d->stopping), &ok);
        set(root, "pool", status_pool(d, &ok), &ok);
        set(root, "counters", status_counters(d, &ok), &ok);
        set(root, "transfers_in_flight", json_integer(d->transfer.n_transfers), &ok);
        set(root, "connections", json_integer(d->control.counters.conns_open), &ok);
        set(root, "connections_reserved", json_integer(d->control.counters.conns_reserved), &ok);
        set(root, "transfers_served_in_flight", json_integer(d->transfer.n_served), &ok);
        {
                char node[24];

                (void)snprintf(node, sizeof(node), "%016" PRIx64, d->link.node_id);
                set(root, "node_id", json_string(node), &ok);
        }
        set(root, "peer_listen", json_string(daemon_peer_address(d)), &ok);
        set(root, "cluster_key", json_boolean(d->link.cluster_key != NULL), &ok);
        set(root, "config", config_to_json(d->config), &ok);
        set(root, "metrics_address",
            d->metrics_server ? json_string(metrics_server_address(d->metrics_server))
                              : json_null(),
            &ok);

        CLIST_FOREACH (c, &d->link.clusters, link_daemon) {
                append(clusters, status_cluster(c, &ok), &ok);
                CLIST_FOREACH (cache, &c->caches.caches, link_table)
                        append(caches, status_cache(&c->caches, cache, &ok), &ok);
        }
        CLIST_FOREACH (u, &d->memory.users.users, link_registry)
                append(users, status_user(u, &ok), &ok);
        CLIST_FOREACH (l, &d->link.links, link_daemon)
                append(links, status_link(l, now, &ok), &ok);
        CLIST_FOREACH (x, &d->transfer.transfers, link_daemon)
                append(transfers, status_transfer(x, now, &ok), &ok);
        CLIST_FOREACH (p, &d->link.peers, link_daemon)
                if (p->state != PEER_CLOSED && (p->dialed || p->node_id != 0))
                        append(peers, status_peer(p, &d->transports, now, &ok), &ok);
        CLIST_FOREACH (il, &d->link.inlinks, link_daemon)
                append(inlinks, status_inlink(il, now, &ok), &ok);
        {
                FactsCtx ctx = {json_array(), &ok,
                                transport_set_get(&d->transports, TRANSPORT_ROLE_DIRECT)};

                if (!ctx.array)
                        ok = false;
                transport_describe(ctx.transport, status_device, &ctx);
                set(root, "rdma_devices", ctx.array, &ok);
        }

        s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
        json_decref(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}
