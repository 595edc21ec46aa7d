/* SPDX-License-Identifier: MIT */
/*
 * Comm domains: LLM-DataDist's two-sided link(comm_name, cluster_rank_info, rank_table). Every
 * member cluster calls kvd_domain_link(); the daemons of the members find each other through the
 * rank table, agree on it, link each member's cluster to every other member's with ordinary links
 * (so pull and push inside a domain are the link_clusters paths), and the domain is OK once
 * every member's caches are known to every other member. Batch send/recv and the broadcast and
 * all-gather collectives then run between the members over the TCP data plane (or as copies
 * between members on one daemon).
 *
 * This header is what the rest of the daemon calls, in plain C values: control/ decodes the
 * client's requests into the arguments below and builds the replies. The domain peer messages
 * are decoded and encoded in domain-codec.c only, which domain_registry_new() has register
 * their handlers with link/ (see domain-internal.h).
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

/* ---- client requests (control/handle-domain.c decodes them and builds the replies) ---- */

/* kvd_domain_link(): cluster @cluster_id is rank @rank_id. */
typedef struct DomainClusterRank {
        uint64_t cluster_id;
        uint32_t rank_id;
} DomainClusterRank;

/* kvd_domain_link(comm_name, cluster_rank_info, rank_table). */
typedef struct DomainLinkArgs {
        const char *comm_name;
        const DomainClusterRank *ranks; /* cluster_rank_info, in any order */
        size_t n_ranks;
        const char *rank_table; /* JSON */
} DomainLinkArgs;

/* One item of kvd_domain_batch_send_recv(). */
typedef struct DomainSendRecvItem {
        bool recv;
        uint64_t addr; /* the client's, inside memory from kvd_mem_alloc() */
        uint64_t count;
        uint32_t dtype; /* kvd_dtype */
        uint32_t remote_rank;
} DomainSendRecvItem;

typedef struct DomainSendRecvArgs {
        uint64_t comm_id;
        const DomainSendRecvItem *items;
        size_t n_items;
        uint32_t timeout_ms; /* 0: the cluster's sync_kv_timeout */
} DomainSendRecvArgs;

/* kvd_broadcast() (@root_rank) and kvd_all_gather() (@blocks_per_rank) over a blocks cache. */
typedef struct DomainCollArgs {
        uint64_t comm_id;
        uint32_t root_rank;
        uint64_t cache_id;
        const uint64_t *blocks;
        size_t n_blocks;
        uint32_t blocks_per_rank;
        uint32_t algorithm; /* kvd_algorithm */
        uint32_t timeout_ms;
        uint64_t chunk_bytes; /* 0: the default */
} DomainCollArgs;

/* What kvd_domain_status() answers. */
typedef struct DomainQueryResult {
        uint32_t mem_status; /* kvd_mem_status */
        int failure;         /* FAILED: the STATUS_* it failed with */
        const char *reason;  /* FAILED: why (borrowed for the call); NULL otherwise */
} DomainQueryResult;

/* What a link, a batch send/recv or a collective answers with. */
typedef struct DomainReply {
        uint64_t comm_id;    /* link */
        int status;          /* batch send/recv: the call's STATUS_*, with @detail */
        const char *detail;  /* (borrowed for the call) */
        const int32_t *rets; /* batch send/recv: per item, STATUS_* */
        size_t n_rets;
        uint32_t algorithm; /* collectives: the one that ran */
        uint64_t bytes;     /* collectives: bytes this member sent and received */
} DomainReply;

/*
 * Builds the client's reply of the request's type from @reply and answers @done with it (see
 * completion_reply()): control/ passes it down with each request that answers with values.
 */
typedef int (*domain_reply_fn)(Completion *done, const DomainReply *reply);

/*
 * Client requests of the cluster @c. Those with @done return 0 when they answered it (through
 * @reply where they answer with values), COMPLETION_PENDING when they keep @done to answer
 * later, or a STATUS_* status with @err filled (@done is still the caller's). The others return
 * 0 (the caller answers) or a STATUS_* status with @err.
 */
int domain_handle_link(DomainRegistry *reg, Cluster *c, const DomainLinkArgs *args,
                       Completion *done, domain_reply_fn reply, Error *err);
int domain_handle_unlink(DomainRegistry *reg, Cluster *c, uint64_t comm_id, Error *err);
int domain_handle_query(DomainRegistry *reg, Cluster *c, uint64_t comm_id, DomainQueryResult *ret,
                        Error *err);
int domain_handle_send_recv(DomainRegistry *reg, Cluster *c, const DomainSendRecvArgs *args,
                            Completion *done, domain_reply_fn reply, Error *err);
int domain_handle_broadcast(DomainRegistry *reg, Cluster *c, const DomainCollArgs *args,
                            Completion *done, domain_reply_fn reply, Error *err);
int domain_handle_all_gather(DomainRegistry *reg, Cluster *c, const DomainCollArgs *args,
                             Completion *done, domain_reply_fn reply, Error *err);
