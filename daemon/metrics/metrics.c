/* SPDX-License-Identifier: MIT */
/* Metrics: the families kvdistd exports, and the transfer outcomes they need recorded. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/domain/domain.h"
#include "kvdist-config.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "daemon/memory/memory.h"
#include "daemon/metrics/metrics-text.h"
#include "daemon/metrics/metrics.h"
#include "daemon/link/peer.h"
#include "daemon/transfer/plan.h"
#include "daemon/transfer/transfer-events.h"
#include "daemon/memory/pool.h"
#include "daemon/transfer/transfer-root.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/engine.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"

/* Transports seen so far; the transports of the set leave room to spare. */
#define METRICS_MAX_TRANSPORTS 8
#define METRICS_TRANSPORT_NAME_MAX 16

enum { DIR_PULL, DIR_PUSH, _DIR_MAX };

static const char *const direction_names[_DIR_MAX] = {"pull", "push"};

/* Upper bounds of the latency buckets in seconds: 100 us (a small local copy) to 10 s. */
static const double latency_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
#define N_BOUNDS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))

typedef struct TransferStats {
        uint64_t by_status[-_KVD_E_MIN + 1]; /* by -public code: [0] = KVD_OK */
        uint64_t bytes;                      /* of the successful ones */
        uint64_t buckets[N_BOUNDS];          /* latency of the successful ones */
        uint64_t count;
        double sum;
} TransferStats;

struct Metrics {
        char transports[METRICS_MAX_TRANSPORTS][METRICS_TRANSPORT_NAME_MAX];
        size_t n_transports;
        TransferStats stats[_DIR_MAX][METRICS_MAX_TRANSPORTS];
        MetricsSources src;
        Hook transfer_hook; /* on the transfer layer's events */
};

Metrics *metrics_free(Metrics *m)
{
        if (m)
                hook_remove(&m->transfer_hook);
        free(m);
        return NULL;
}

static int direction_of(TransferKind k)
{
        return k == TRANSFER_PUSH_CACHE || k == TRANSFER_PUSH_BLOCKS ? DIR_PUSH : DIR_PULL;
}

/* The slot of @name, added on first sight; -ENOSPC when the table is full. */
static int transport_index(Metrics *m, const char *name)
{
        for (size_t i = 0; i < m->n_transports; i++)
                if (strcmp(m->transports[i], name) == 0)
                        return (int)i;
        if (m->n_transports >= METRICS_MAX_TRANSPORTS)
                return -ENOSPC;
        (void)snprintf(m->transports[m->n_transports], METRICS_TRANSPORT_NAME_MAX, "%s", name);
        return (int)m->n_transports++;
}

/* Records that @x completed with @status: its count, and for a success its bytes and latency. */
static void metrics_on_transfer_done(void *userdata, const Transfer *x, int status)
{
        Metrics *m = userdata;
        TransferStats *s;
        double seconds;
        int t;

        t = transport_index(m, transport_name(x->transport));
        if (t < 0)
                return;
        s = &m->stats[direction_of(x->kind)][t];
        s->by_status[-status_wire_encode(status)]++;
        if (status != STATUS_OK)
                return;
        s->bytes += x->total_bytes;
        seconds = (double)(now_usec(CLOCK_MONOTONIC) - x->start_usec) / USEC_PER_SEC;
        for (size_t i = 0; i < N_BOUNDS; i++)
                if (seconds <= latency_bounds[i]) {
                        s->buckets[i]++;
                        break;
                }
        s->count++;
        s->sum += seconds;
}

static const TransferEvents metrics_transfer_events = {
        .transfer_done = metrics_on_transfer_done,
};

int metrics_new(const MetricsSources *sources, Metrics **ret)
{
        Metrics *m = calloc(1, sizeof(*m));

        if (!m)
                return -ENOMEM;
        m->src = *sources;
        transfer_events_listen(m->src.transfer, &m->transfer_hook, &metrics_transfer_events, m);
        *ret = m;
        return 0;
}

/* One family: its HELP/TYPE header and samples, from the layers' state and what @m recorded. */
typedef void (*MetricsFamilyFn)(MetricsWriter *w, const Metrics *m);

static void family_build_info(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_build_info", "gauge", "kvdistd version (always 1)");
        metrics_sample_u64(w, "kvdist_build_info", METRICS_LABELS({"version", KVDIST_VERSION}), 1);
}

static void family_uptime(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_uptime_seconds", "gauge", "Seconds since kvdistd started");
        metrics_sample_double(w, "kvdist_uptime_seconds", NULL,
                              (double)(now_usec(CLOCK_MONOTONIC) - m->src.start_usec) /
                                      USEC_PER_SEC);
}

static void family_clusters(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_clusters", "gauge", "Clusters (workers) attached");
        metrics_sample_u64(w, "kvdist_clusters", NULL, m->src.link->n_clusters);
}

static void family_connections(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_connections", "gauge", "Client connections open");
        metrics_sample_u64(w, "kvdist_connections", NULL, m->src.clients->conns_open);
        metrics_family(w, "kvdist_connections_accepted_total", "counter",
                       "Client connections accepted");
        metrics_sample_u64(w, "kvdist_connections_accepted_total", NULL,
                           m->src.clients->conns_accepted);
        metrics_family(w, "kvdist_connections_refused_total", "counter",
                       "Client connections refused (allow-lists, limits)");
        metrics_sample_u64(w, "kvdist_connections_refused_total", NULL,
                           m->src.clients->conns_refused);
        metrics_family(w, "kvdist_connections_idle_closed_total", "counter",
                       "Connections closed for attaching no cluster (limits.attach_timeout_ms)");
        metrics_sample_u64(w, "kvdist_connections_idle_closed_total", NULL,
                           m->src.clients->conns_idle_closed);
        metrics_family(w, "kvdist_frames_malformed_total", "counter",
                       "Malformed frames that closed a connection");
        metrics_sample_u64(w, "kvdist_frames_malformed_total", NULL,
                           m->src.clients->frames_malformed +
                                   m->src.link->counters.frames_malformed);
}

/*
 * limits.per_user: what each uid holds, and the charges refused by limit (the uid is in the log
 * and the reply; counting by uid here would keep series of uids long gone).
 */
static void family_users(MetricsWriter *w, const Metrics *m)
{
        const UserRegistry *reg = &m->src.memory->users;
        const User *u;

        metrics_family(w, "kvdist_user_quota_refused_total", "counter",
                       "Requests and connections refused by a limits.per_user limit");
        for (UserSlot k = 0; k < _USER_SLOT_MAX; k++)
                metrics_sample_u64(w, "kvdist_user_quota_refused_total",
                                   METRICS_LABELS({"limit", user_slot_limit_key(k)}),
                                   reg->refused[k]);
        metrics_family(w, "kvdist_user_usage", "gauge",
                       "What a local uid's clients hold together, by limits.per_user resource");
        if (!reg->users.next)
                return;
        CLIST_FOREACH (u, &reg->users, link_registry) {
                char uid[16];

                (void)snprintf(uid, sizeof(uid), "%u", (unsigned)u->uid);
                for (UserSlot k = 0; k < _USER_SLOT_MAX; k++)
                        metrics_sample_u64(
                                w, "kvdist_user_usage",
                                METRICS_LABELS({"uid", uid}, {"resource", user_slot_to_string(k)}),
                                u->used[k]);
        }
}

static void family_memory(MetricsWriter *w, const Metrics *m)
{
        uint64_t regions = 0, region_bytes = 0, caches = 0;
        const Cluster *c;

        CLIST_FOREACH (c, &m->src.link->clusters, link_daemon) {
                regions += c->n_regions;
                region_bytes += c->region_bytes;
                caches += c->caches.n_caches;
        }
        metrics_family(w, "kvdist_regions", "gauge", "Memory regions registered by clients");
        metrics_sample_u64(w, "kvdist_regions", NULL, regions);
        metrics_family(w, "kvdist_region_bytes", "gauge", "Bytes of the registered regions");
        metrics_sample_u64(w, "kvdist_region_bytes", NULL, region_bytes);
        metrics_family(w, "kvdist_caches", "gauge", "Caches registered or allocated");
        metrics_sample_u64(w, "kvdist_caches", NULL, caches);
}

static void family_pool(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_pool_size_bytes", "gauge", "Size of the memory pool");
        metrics_sample_u64(w, "kvdist_pool_size_bytes", NULL,
                           m->src.memory->pool ? pool_size(m->src.memory->pool) : 0);
        metrics_family(w, "kvdist_pool_used_bytes", "gauge", "Bytes of the pool given to caches");
        metrics_sample_u64(w, "kvdist_pool_used_bytes", NULL,
                           m->src.memory->pool ? pool_used(m->src.memory->pool) : 0);
        metrics_family(w, "kvdist_pool_allocations", "gauge", "Caches carved from the pool");
        metrics_sample_u64(w, "kvdist_pool_allocations", NULL,
                           m->src.memory->pool ? pool_n_allocated(m->src.memory->pool) : 0);
}

static void family_links(MetricsWriter *w, const Metrics *m)
{
        /* Counted per (transport, state): few distinct transports, two states. */
        const char *names[METRICS_MAX_TRANSPORTS];
        uint64_t counts[METRICS_MAX_TRANSPORTS][_LINK_STATE_MAX] = {};
        size_t n = 0;
        const Link *l;

        metrics_family(w, "kvdist_links", "gauge",
                       "Links between clusters, by transport and state");
        CLIST_FOREACH (l, &m->src.link->links, link_daemon) {
                const char *t = transport_name(l->transport);
                size_t i;

                for (i = 0; i < n && strcmp(names[i], t) != 0; i++)
                        ;
                if (i == n) {
                        if (n == METRICS_MAX_TRANSPORTS)
                                continue;
                        names[n++] = t;
                }
                if (l->state >= 0 && l->state < _LINK_STATE_MAX)
                        counts[i][l->state]++;
        }
        for (size_t i = 0; i < n; i++)
                for (int s = 0; s < _LINK_STATE_MAX; s++)
                        metrics_sample_u64(w, "kvdist_links",
                                           METRICS_LABELS({"transport", names[i]},
                                                          {"state", link_state_to_string(s)}),
                                           counts[i][s]);
}

static void family_transfers_in_flight(MetricsWriter *w, const Metrics *m)
{
        uint64_t counts[_DIR_MAX] = {};
        const Transfer *x;

        CLIST_FOREACH (x, &m->src.transfer->transfers, link_daemon)
                counts[direction_of(x->kind)]++;
        metrics_family(w, "kvdist_transfers_in_flight", "gauge",
                       "Transfers running now, by direction");
        for (int dir = 0; dir < _DIR_MAX; dir++)
                metrics_sample_u64(w, "kvdist_transfers_in_flight",
                                   METRICS_LABELS({"direction", direction_names[dir]}),
                                   counts[dir]);
}

static void family_transfers(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_transfers_total", "counter",
                       "Transfers completed, by direction, transport and status");
        for (size_t t = 0; t < m->n_transports; t++)
                for (int dir = 0; dir < _DIR_MAX; dir++)
                        for (int s = 0; s <= -_KVD_E_MIN; s++) {
                                uint64_t v = m->stats[dir][t].by_status[s];

                                /* KVD_OK always, a failure status once it happened */
                                if (s != 0 && v == 0)
                                        continue;
                                metrics_sample_u64(
                                        w, "kvdist_transfers_total",
                                        METRICS_LABELS({"direction", direction_names[dir]},
                                                       {"transport", m->transports[t]},
                                                       {"status", kvd_strerror(-s)}),
                                        v);
                        }
        metrics_family(w, "kvdist_transfer_bytes_total", "counter",
                       "Bytes moved by successful transfers, by direction and transport");
        for (size_t t = 0; t < m->n_transports; t++)
                for (int dir = 0; dir < _DIR_MAX; dir++)
                        metrics_sample_u64(w, "kvdist_transfer_bytes_total",
                                           METRICS_LABELS({"direction", direction_names[dir]},
                                                          {"transport", m->transports[t]}),
                                           m->stats[dir][t].bytes);
}

static void family_transfer_latency(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_transfer_duration_seconds", "histogram",
                       "Time from request to the last byte of successful transfers");
        for (size_t t = 0; t < m->n_transports; t++)
                for (int dir = 0; dir < _DIR_MAX; dir++) {
                        const TransferStats *s = &m->stats[dir][t];

                        metrics_histogram(w, "kvdist_transfer_duration_seconds",
                                          METRICS_LABELS({"direction", direction_names[dir]},
                                                         {"transport", m->transports[t]}),
                                          latency_bounds, s->buckets, N_BOUNDS, s->count, s->sum);
                }
}

static void family_errors(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_request_errors_total", "counter",
                       "Client requests answered with an error, by status");
        for (int s = 1; s <= -_KVD_E_MIN; s++)
                if (m->src.clients->errors[s] > 0)
                        metrics_sample_u64(w, "kvdist_request_errors_total",
                                           METRICS_LABELS({"status", kvd_strerror(-s)}),
                                           m->src.clients->errors[s]);
}

static void family_peers(MetricsWriter *w, const Metrics *m)
{
        uint64_t counts[_PEER_STATE_MAX] = {};
        const Peer *p;

        metrics_family(w, "kvdist_peers", "gauge", "Peer daemons, by connection state");
        CLIST_FOREACH (p, &m->src.link->peers, link_daemon)
                if (p->state >= 0 && p->state < _PEER_STATE_MAX && (p->dialed || p->node_id))
                        counts[p->state]++;
        for (int s = 0; s < _PEER_STATE_MAX; s++)
                if (s != PEER_CLOSED)
                        metrics_sample_u64(w, "kvdist_peers",
                                           METRICS_LABELS({"state", peer_state_to_string(s)}),
                                           counts[s]);
        metrics_family(w, "kvdist_peers_lost_total", "counter",
                       "Ready peers lost (closed connection, heartbeat timeout, data error)");
        metrics_sample_u64(w, "kvdist_peers_lost_total", NULL, m->src.link->counters.peers_lost);
        metrics_family(w, "kvdist_peers_refused_total", "counter",
                       "Peer connections refused (cluster key, data token, limits)");
        metrics_sample_u64(w, "kvdist_peers_refused_total", NULL,
                           m->src.link->counters.peers_refused);
        metrics_family(w, "kvdist_peer_requests_refused_total", "counter",
                       "Peer requests answered with an error");
        metrics_sample_u64(w, "kvdist_peer_requests_refused_total", NULL,
                           m->src.link->counters.peer_requests_refused);
}

static void family_peer_heartbeat(MetricsWriter *w, const Metrics *m)
{
        const Peer *p;

        metrics_family(w, "kvdist_peer_heartbeat_rtt_seconds", "gauge",
                       "Round trip of the last heartbeat to each ready peer");
        CLIST_FOREACH (p, &m->src.link->peers, link_daemon) {
                char name[SOCKADDR_STR_MAX];

                if (p->state != PEER_READY)
                        continue;
                (void)snprintf(name, sizeof(name), "%s", p->address[0] ? p->address : p->remote);
                metrics_sample_double(w, "kvdist_peer_heartbeat_rtt_seconds",
                                      METRICS_LABELS({"peer", name}),
                                      (double)p->rtt_usec / USEC_PER_SEC);
        }
}

static void family_served(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_inbound_links", "gauge",
                       "Links peers' clusters made to clusters of this daemon");
        metrics_sample_u64(w, "kvdist_inbound_links", NULL, m->src.link->n_inlinks);
        metrics_family(w, "kvdist_served_in_flight", "gauge",
                       "Peers' transfers of this daemon's caches running now");
        metrics_sample_u64(w, "kvdist_served_in_flight", NULL, m->src.transfer->n_served);
        metrics_family(w, "kvdist_served_total", "counter",
                       "Peers' transfers of this daemon's caches completed");
        metrics_sample_u64(w, "kvdist_served_total", NULL,
                           m->src.transfer->counters.transfers_served);
        metrics_family(w, "kvdist_served_bytes_total", "counter",
                       "Bytes of this daemon's caches that peers pulled or pushed");
        metrics_sample_u64(w, "kvdist_served_bytes_total", NULL,
                           m->src.transfer->counters.bytes_served);
        metrics_family(w, "kvdist_notifies_delivered_total", "counter",
                       "Push notifications queued for clusters of this daemon");
        metrics_sample_u64(w, "kvdist_notifies_delivered_total", NULL,
                           m->src.link->counters.notifies_delivered);
}

typedef struct DeviceSampleCtx {
        MetricsWriter *w;
        const TransportMetric *m;
} DeviceSampleCtx;

static void device_sample(const TransportFacts *f, void *userdata)
{
        DeviceSampleCtx *ctx = userdata;
        const TransportFact *name = transport_facts_find(f, "name");
        const TransportFact *fact = transport_facts_find(f, ctx->m->fact);
        double v = 0;

        if (!name || !fact)
                return;
        if (fact->type == TRANSPORT_FACT_STRING)
                v = strcmp(fact->s, "active") == 0;
        else if (fact->type == TRANSPORT_FACT_U64)
                v = (double)fact->u / ctx->m->divisor;
        metrics_sample_double(ctx->w, ctx->m->name, METRICS_LABELS({"device", name->s}), v);
}

/* The metrics each transport exports about the devices it describes. */
static void family_devices(MetricsWriter *w, const Metrics *m)
{
        const TransportSet *ts = m->src.transports;

        for (size_t t = 0; t < ts->n_all; t++) {
                size_t n;
                const TransportMetric *tm = transport_metrics(ts->all[t], &n);

                for (size_t i = 0; i < n; i++) {
                        DeviceSampleCtx ctx = {w, &tm[i]};

                        metrics_family(w, tm[i].name, tm[i].type, tm[i].help);
                        transport_describe(ts->all[t], device_sample, &ctx);
                }
        }
}

static void family_copy(MetricsWriter *w, const Metrics *m)
{
        metrics_family(w, "kvdist_copy_bytes_streamed_total", "counter",
                       "Bytes same-node copies wrote with streaming stores, around the CPU caches");
        metrics_sample_u64(w, "kvdist_copy_bytes_streamed_total", NULL,
                           engine_bytes_streamed(m->src.transports->engine));
}

static void family_domains(MetricsWriter *w, const Metrics *m)
{
        static const char *const ops[] = {"batch_send_recv", "broadcast", "all_gather"};
        DomainStats st;

        if (!m->src.domains)
                return;
        domain_registry_stats(m->src.domains, &st);
        metrics_family(w, "kvdist_domains", "gauge", "Comm domains, by state");
        for (int s = 0; s < DOMAIN_STATS_STATES; s++)
                metrics_sample_u64(w, "kvdist_domains",
                                   METRICS_LABELS({"state", st.state_names[s]}), st.by_state[s]);
        metrics_family(w, "kvdist_domain_setups", "gauge",
                       "Comm domain set-ups reaching out to other daemons, and queued ones");
        metrics_sample_u64(w, "kvdist_domain_setups", METRICS_LABELS({"phase", "in_progress"}),
                           st.setups_active);
        metrics_sample_u64(w, "kvdist_domain_setups", METRICS_LABELS({"phase", "queued"}),
                           st.setups_queued);
        metrics_family(w, "kvdist_domains_formed_total", "counter", "Comm domains that became OK");
        metrics_sample_u64(w, "kvdist_domains_formed_total", NULL, st.formed);
        metrics_family(w, "kvdist_domains_failed_total", "counter", "Comm domains that failed");
        metrics_sample_u64(w, "kvdist_domains_failed_total", NULL, st.failed);
        metrics_family(w, "kvdist_domain_operations_total", "counter",
                       "Batch send/recv and collective calls completed, by outcome");
        for (int op = 0; op < 3; op++)
                for (int f = 0; f < 2; f++)
                        metrics_sample_u64(
                                w, "kvdist_domain_operations_total",
                                METRICS_LABELS({"op", ops[op]}, {"result", f ? "failed" : "ok"}),
                                st.calls[op][f]);
        metrics_family(w, "kvdist_domain_bytes_total", "counter",
                       "Bytes domain operations sent and received");
        metrics_sample_u64(w, "kvdist_domain_bytes_total", METRICS_LABELS({"direction", "sent"}),
                           st.bytes_sent);
        metrics_sample_u64(w, "kvdist_domain_bytes_total",
                           METRICS_LABELS({"direction", "received"}), st.bytes_received);
}

/* The families, in the order they are written. Add one here and write its function above. */
static const MetricsFamilyFn families[] = {
        family_build_info,
        family_uptime,
        family_clusters,
        family_connections,
        family_users,
        family_memory,
        family_pool,
        family_links,
        family_transfers_in_flight,
        family_transfers,
        family_transfer_latency,
        family_errors,
        family_peers,
        family_peer_heartbeat,
        family_served,
        family_devices,
        family_copy,
        family_domains,
};

int metrics_render(const Metrics *m, char **ret, size_t *ret_len)
{
        MetricsWriter w;
        int r;

        r = metrics_writer_init(&w);
        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
                families[i](&w, m);
        return metrics_writer_finish(&w, ret, ret_len);
}
