/* SPDX-License-Identifier: MIT */
/*
 * Comm domains: LLM-DataDist's two-sided link(comm_name, cluster_rank_info, rank_table). Every
 * member cluster calls kvd_link(); the daemons of the members find each other through the rank
 * table, agree on it, link each member's cluster to every other member's with ordinary links
 * (so pull and push inside a domain are the link_clusters paths), and the domain is OK once
 * every member's caches are known to every other member. Batch send/recv and the broadcast and
 * all-gather collectives then run between the members over the TCP data plane (or as copies
 * between members on one daemon).
 *
 * This header is what the rest of the daemon calls; the peer handlers, which
 * domain_registry_new() registers with link/, are declared in domain-internal.h.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/completion.h"
#include "common/error.h"

struct json_t;
typedef struct Cluster Cluster;
typedef struct LinkRoot LinkRoot;
typedef struct TransportSet TransportSet;
typedef struct DomainRegistry DomainRegistry;
typedef struct Peer Peer;
struct Kvdist__V1__DomainLink;
struct Kvdist__V1__DomainUnlink;
struct Kvdist__V1__DomainQuery;
struct Kvdist__V1__DomainSendRecv;
struct Kvdist__V1__DomainBroadcast;
struct Kvdist__V1__DomainAllGather;

/* What the daemon hands the domain registry: the roots below it and how it tells the daemon. */
typedef struct DomainRoots {
        LinkRoot *link;                     /* clusters, peers, the event loop, ids, our address */
        TransportSet *transports;           /* what the lanes move bytes with */
        const uint32_t *link_total_time_ms; /* a domain not formed by then fails (config) */
        void (*changed)(void *userdata);    /* the count of domains changed (status line) */
        void (*call_ended)(void *userdata); /* a call answered: a stopping daemon may exit */
        void (*count_error)(void *userdata, int status); /* a call failed with @status */
        void *userdata;
} DomainRoots;

/*
 * Creates the daemon's (empty) set of domains over @roots (copied), listening to link/'s events
 * (clusters going away, peers lost) and registering the handlers of the domain peer messages.
 * -ENOMEM.
 */
int domain_registry_new(const DomainRoots *roots, DomainRegistry **ret);

/*
 * Frees every domain (daemon_free(), after the data planes and the copy engine ran their
 * completions). Accepts NULL; returns NULL.
 */
DomainRegistry *domain_registry_free(DomainRegistry *reg);

/* The daemon is stopping: domain operations in flight fail with DAEMON_UNAVAILABLE. */
void domain_stop_all(DomainRegistry *reg);

/* Domain operations still answering a client (daemon_check_stopped() waits for them). */
unsigned domain_calls_in_flight(const DomainRegistry *reg);

/*
 * @c is detaching (finalize or crash): every domain it is a member of fails, here and on the
 * other members' daemons, and its operations stop. Call before its links are torn down.
 */
void domain_cluster_gone(DomainRegistry *reg, Cluster *c);

/* @p is being lost, its RDMA endpoints already gone (LinkEvents.peer_flushed): domains with a
 * member behind it fail; their operations over it stop. */
void domain_on_peer_lost(DomainRegistry *reg, Peer *p, int status);

/* Whether @c joined a domain (memory it registers afterwards is not exposed by default). */
bool domain_cluster_has_domains(const DomainRegistry *reg, const Cluster *c);

/* Whether a domain is linking @c to @remote_cluster_id right now (link_clusters waits). */
bool domain_pair_link_in_progress(DomainRegistry *reg, const Cluster *c,
                                  uint64_t remote_cluster_id);

/*
 * @c has no link to @remote_cluster_id: when a comm domain of both on this daemon explains it
 * (still PREPARING: its links are made once it is OK; or FAILED), sets NOT_YET_LINK with a
 * detail naming the domain into @err and returns it; else returns 0.
 */
int domain_explain_no_link(DomainRegistry *reg, const Cluster *c, uint64_t remote_cluster_id,
                           Error *err);

/*
 * Takes the local_comm_res of a cluster that is attaching (NULL or "": generated from the
 * daemon's peer address and the cluster's device). PARAM_INVALID with @err for a fragment that
 * does not parse or does not describe this daemon.
 */
int domain_cluster_attach(DomainRegistry *reg, Cluster *c, const char *local_comm_res, Error *err);

/* The status document's "domains" array (status.c). NULL when out of memory. */
struct json_t *domain_status_json(DomainRegistry *reg);

/* Domain states (PREPARING, OK, FAILED) that DomainStats counts. */
#define DOMAIN_STATS_STATES 3

/* What a registry counts, for metrics/ to read when it builds a document. */
typedef struct DomainStats {
        const char *state_names[DOMAIN_STATS_STATES]; /* "preparing", ... */
        uint64_t by_state[DOMAIN_STATS_STATES];       /* domains now, by state */
        uint64_t setups_active;                       /* set-ups reaching out to other daemons */
        uint64_t setups_queued;
        uint64_t formed;      /* domains that reached OK */
        uint64_t failed;      /* that failed */
        uint64_t calls[3][2]; /* [batch send/recv, broadcast, all-gather][failed] */
        uint64_t bytes_sent;
        uint64_t bytes_received;
} DomainStats;

/* Fills @ret with what @reg counts. */
void domain_registry_stats(const DomainRegistry *reg, DomainStats *ret);

/*
 * Client requests of the cluster @c (control/handle-domain.c hands them down). Each returns 0
 * when it answered @done, COMPLETION_PENDING when it keeps @done to answer later, or a STATUS_*
 * status with @err filled (@done is still the caller's).
 */
int domain_handle_link(DomainRegistry *reg, Cluster *c, const struct Kvdist__V1__DomainLink *m,
                       Completion *done, Error *err);
int domain_handle_unlink(DomainRegistry *reg, Cluster *c, const struct Kvdist__V1__DomainUnlink *m,
                         Completion *done, Error *err);
int domain_handle_query(DomainRegistry *reg, Cluster *c, const struct Kvdist__V1__DomainQuery *m,
                        Completion *done, Error *err);
int domain_handle_send_recv(DomainRegistry *reg, Cluster *c,
                            const struct Kvdist__V1__DomainSendRecv *m, Completion *done,
                            Error *err);
int domain_handle_broadcast(DomainRegistry *reg, Cluster *c,
                            const struct Kvdist__V1__DomainBroadcast *m, Completion *done,
                            Error *err);
int domain_handle_all_gather(DomainRegistry *reg, Cluster *c,
                             const struct Kvdist__V1__DomainAllGather *m, Completion *done,
                             Error *err);
