/* SPDX-License-Identifier: MIT */
/*
 * Comm domains, inside: the objects the domain modules share.
 *
 *   domain.c          registry, Domain life and state, set-up slots and queue, failures
 *   domain-join.c     forming: PeerDomainJoin/Linked/Ready/Leave, pair links (PeerLink)
 *   domain-lane.c     lanes and ops: one message from one rank to another, matched by seq
 *   domain-lane-rdma.c  a lane's message over RDMA: registrations, READY's segments, WRITEs
 *   domain-call.c     client requests: link, unlink, query, batch send/recv
 *   domain-coll.c     broadcast and all-gather, ring and mesh
 *   domain-status.c   status JSON and metrics
 *   domain-codec.c    the peer messages on the wire, the peer handlers, DomainPeerOps
 *
 * A Domain is this daemon's record of one comm domain (one per comm_name): the members from the
 * rank table, which of them are local (their clusters attach here), and per local member the
 * state of its pair with every other member. Set-up: a domain with members behind other daemons
 * needs one of DOMAIN_SETUPS_MAX slots to reach out (dial, ask whether the others joined); the
 * rest wait in a FIFO queue. Answering other daemons never needs a slot, so a set-up in progress
 * only ever waits for members to call link (or for link_total_time), never for another daemon's
 * queue: domains formed in any order cannot deadlock.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/hook.h"
#include "common/clist.h"
#include "daemon/domain/domain.h"
#include "common/error.h"
#include "daemon/link/link-request.h"
#include "daemon/domain/rank-table.h"
#include "common/sha256.h"
#include "common/sockaddr-util.h"
#include "daemon/transport/transport.h"
#include "common/time-util.h"

struct event;
typedef struct Domain Domain;
typedef struct DomainCall DomainCall;
typedef struct DomainLinkOffer DomainLinkOffer;
typedef struct DomainOp DomainOp;
typedef struct DomainPair DomainPair;
typedef struct DomainPeerOps DomainPeerOps;
typedef struct Lane Lane;
typedef struct PairLink PairLink;
typedef struct PeerCall PeerCall;
typedef struct PeerWaiter PeerWaiter;
typedef struct PeerChannelWaiter PeerChannelWaiter;
typedef struct Transport Transport;
typedef struct TransportChannel TransportChannel;
typedef struct TransportRegion TransportRegion;
typedef struct Region Region;

#define DOMAIN_MAX_RANKS RANK_TABLE_MAX_RANKS
#define DOMAIN_NAME_MAX 127
/* LLM-DataDist: at most 512 domains, 16 recommended; at most 16 set-ups at once. */
#define DOMAIN_MAX 512
#define DOMAIN_WARN 16
#define DOMAIN_SETUPS_MAX 16
/* Messages about a lane's future seqs a peer may have us keep, and the descriptors their READYs
 * may carry in all. */
#define LANE_MAX_WORDS 1024
#define LANE_MAX_WORD_SEGS (1 << 20)
/* Segments one READY of a direct lane may name. */
#define LANE_DIRECT_MAX_SEGS (1u << 20)
/* Retries while forming: the first after this, doubling up to the cap. */
#define DOMAIN_RETRY_MIN_MS 10
#define DOMAIN_RETRY_MAX_MS 500
#define DOMAIN_DIAL_MAX_MS 2000

typedef enum DomainState {
        DOMAIN_PREPARING,
        DOMAIN_OK,
        DOMAIN_FAILED,
        _DOMAIN_STATE_MAX,
        _DOMAIN_STATE_INVALID = -22,
} DomainState;

typedef enum DomainSetup {
        SETUP_NONE,   /* nothing to reach out for: local members only, or done */
        SETUP_QUEUED, /* waits for a slot */
        SETUP_ACTIVE, /* holds a slot: dials and asks */
} DomainSetup;

typedef enum PairLinkState {
        PAIR_LINK_REQUESTING, /* our PeerLink is in flight */
        PAIR_LINK_CONNECTING, /* the peer answered; our channel to it connects, where the
                               * link's transport has channels of its own */
        PAIR_LINK_HELD,       /* the link is made from the answer when the domain is OK */
        PAIR_LINK_MADE,       /* a Link exists (link_id) */
        PAIR_LINK_FAILED,
} PairLinkState;

/*
 * The link of local cluster @local_cluster_id to @remote_cluster_id that domains share: one
 * PeerLink per pair of clusters however many domains they are both in (a second PeerLink would
 * replace the peer's inbound link of the first).
 */
struct PairLink {
        DomainRegistry *reg;
        uint64_t local_cluster_id;
        uint64_t remote_cluster_id;
        Peer *peer; /* remote pairs, while the call runs or the answer is held */
        PairLinkState state;
        PeerCall *call;
        LinkTransport transport;   /* decided as kvd_link_clusters() does */
        DomainLinkOffer *exposed;  /* CONNECTING, HELD: the peer's answer, what the remote
                                    * cluster exposed (domain-codec.c's) */
        TransportChannel *channel; /* HELD on a channel of its own (NULL: on the peer's data
                                    * connections) */
        uint64_t link_id;          /* MADE */
        bool owned;                /* MADE by us (freed with the last domain), not reused */
        bool reverse;              /* MADE: the link is the one the remote cluster made to
                                    * ours (links are two-way): a Link of this daemon on our
                                    * cluster's links_in, or the peer's InLink (@link_id its
                                    * id); never ours to free */
        Error err;                 /* FAILED */
        unsigned n_refs;
        CList link_reg;
};

/* A local member's pair with another member. */
struct DomainPair {
        Domain *dom;
        uint32_t m, o;       /* ranks[m].pairs[o] */
        bool joined;         /* both called link with the same table */
        bool out_done;       /* our cluster's link to theirs is held (or made) */
        bool in_done;        /* their daemon said its link to ours is held */
        bool in_direct;      /* ... and reaches our memory: their messages come one-sided */
        bool linked_sent;    /* we told them ours is */
        PeerCall *join_call; /* our PeerDomainJoin in flight */
        usec_t next_join_usec;
        unsigned join_backoff_ms;
        PairLink *pl; /* referenced */
};

typedef struct DomainRank {
        Domain *dom;
        uint32_t rank;
        uint64_t cluster_id;
        char address[SOCKADDR_STR_MAX];
        int32_t device_id;
        char server_id[RANK_TABLE_ID_MAX];
        bool local; /* its cluster attaches to this daemon */
        bool ready; /* linked both ways with every other member */

        /* local members */
        Cluster *cluster; /* while joined */
        bool joined;      /* called link (and did not leave) */
        bool left;        /* unlinked or detached */
        uint64_t seq;     /* registrations up to here are what link exposes */
        DomainPair pairs[DOMAIN_MAX_RANKS];

        /* remote members */
        Peer *peer; /* a connection to its daemon, READY or being made */
        PeerWaiter *waiter;
        uint64_t node_id;
        uint64_t domain_id; /* its daemon's id for this domain; 0 until known */
        bool ever_joined;   /* a pair with it joined: losing its daemon fails us */
        usec_t next_dial_usec;
        unsigned dial_backoff_ms;
} DomainRank;

typedef struct DomainCounters {
        uint64_t calls_ok;
        uint64_t calls_failed;
        uint64_t bytes_sent;
        uint64_t bytes_received;
} DomainCounters;

struct Domain {
        DomainRegistry *reg;
        uint64_t id; /* the comm_id clients get */
        char name[DOMAIN_NAME_MAX + 1];
        uint8_t digest[SHA256_DIGEST_SIZE];
        unsigned n_ranks;
        DomainRank ranks[DOMAIN_MAX_RANKS];
        DomainState state;
        int fail_code;
        char reason[ERROR_MSG_MAX];
        DomainSetup setup;
        usec_t created_usec;
        usec_t ok_usec;
        struct event *deadline;                          /* link_total_time */
        struct event *tick;                              /* retries while SETUP_ACTIVE */
        Lane *lanes[DOMAIN_MAX_RANKS][DOMAIN_MAX_RANKS]; /* [src][dst], where one end is local */
        CList calls;                                     /* DomainCall.link_domain */
        unsigned n_calls;
        DomainCounters counters;
        int last_algorithm; /* kvd_algorithm of the last collective, 0 none */
        bool replaced;      /* FAILED, and a new link() of its name made another domain:
                             * found by its comm_id only, until its members unlink it */
        unsigned refs;      /* calls and callbacks that keep it after removal */
        bool removed;       /* off the registry; freed when @refs drops to 0 */
        CList link_reg;
        CList link_queue;
};

typedef struct LocalRes {
        uint64_t cluster_id;
        RankDevice dev;
        bool given; /* from the client, not generated */
        CList link;
} LocalRes;

struct DomainRegistry {
        DomainRoots roots;
        const DomainPeerOps *peer; /* how the state machines reach other daemons */
        Hook link_hook;            /* on the link root's events */
        CList domains;             /* Domain.link_reg */
        unsigned n_domains;
        CList queue; /* Domain.link_queue, SETUP_QUEUED, oldest first */
        unsigned n_queued;
        unsigned n_active;
        CList pair_links;    /* PairLink.link_reg */
        CList local_res;     /* LocalRes.link */
        CList done;          /* DomainOp.link_done: completed, their calls not told */
        struct event *drain; /* tells them, from the event loop (domain_call_drain()) */
        unsigned n_calls;
        uint64_t formed;      /* domains that reached OK */
        uint64_t failed;      /* that failed */
        uint64_t calls[3][2]; /* [op - 1][failed] */
        uint64_t bytes_sent;
        uint64_t bytes_received;
};

/* What one message of an operation is; both ends must agree before a byte moves. */
typedef enum OpKind {
        OP_BATCH = 1,
        OP_BROADCAST = 2,
        OP_ALL_GATHER = 3,
} OpKind;

typedef struct OpDesc {
        uint32_t op;
        uint64_t bytes;
        uint64_t count;
        uint32_t dtype;
        uint32_t algorithm;
        uint32_t root;
        uint32_t part;
        uint32_t chunk;
        uint32_t n_chunks;
        uint32_t num_tensors;
        uint64_t block_bytes;
        uint64_t n_blocks;
} OpDesc;

typedef enum XferKind {
        XFER_READY = 1,
        XFER_DONE = 2,
        XFER_RECV_CANCEL = 3,
        XFER_MISMATCH = 4,
        XFER_SEND_CANCEL = 5,
        XFER_WRITTEN = 6, /* sender: every one-sided write of the message completed */
} XferKind;

/*
 * Where one segment of a message lands at the receiver, when its lane is direct: the
 * descriptor its transport packed (opaque bytes, TRANSPORT_DESC_MAX at most), or none (@len 0)
 * for an empty segment. One a peer sent may say it is longer than a descriptor can be (only
 * @len is kept then): it is no descriptor.
 */
typedef struct LaneDesc {
        size_t len;
        uint8_t bytes[TRANSPORT_DESC_MAX];
} LaneDesc;

/* A word about a lane seq that came before the op it is about. */
typedef struct LaneWord {
        CList link;
        XferKind kind;
        uint64_t seq;
        OpDesc desc;
        int status;
        char msg[ERROR_MSG_MAX];
        Peer *peer;      /* the connection it came on */
        bool direct;     /* READY: the receiver waits for one-sided writes ... */
        LaneDesc *descs; /* ... into the segments these describe (owned) */
        size_t n_descs;
} LaneWord;

/*
 * The domain peer messages, decoded: domain-codec.c turns them into frames and back, so the
 * state machines see plain values. Strings borrow from the frame for the handler's call.
 */

/* A member as PeerDomainJoin lists it. */
typedef struct DomainMemberMsg {
        uint32_t rank;
        uint64_t cluster_id;
        const char *address;
        int32_t device_id;
        const char *server_id;
} DomainMemberMsg;

/* PeerDomainJoin: whether member @dst_rank called link with the same table, asked by the daemon
 * of @src_rank. */
typedef struct DomainJoinMsg {
        const char *comm_name;
        const uint8_t *digest;
        size_t digest_len;
        size_t n_members;                          /* as many as the sender listed ... */
        DomainMemberMsg members[DOMAIN_MAX_RANKS]; /* ... of which the first DOMAIN_MAX_RANKS */
        uint32_t src_rank;
        uint32_t dst_rank;
        uint64_t src_domain_id;
} DomainJoinMsg;

/* Its answer when it is not an error. */
typedef struct DomainJoinAnswer {
        bool joined;            /* false: ask again */
        uint64_t dst_domain_id; /* the answering daemon's id of the domain */
} DomainJoinAnswer;

/* PeerDomainLinked: the sender holds the link of @src_rank's cluster to @dst_rank's. */
typedef struct DomainLinkedMsg {
        uint64_t dst_domain_id;
        uint64_t src_domain_id;
        uint32_t src_rank;
        uint32_t dst_rank;
        bool direct; /* that link reaches dst's memory: src's messages come one-sided */
} DomainLinkedMsg;

/* PeerDomainReady: member @rank is linked both ways with every other member. */
typedef struct DomainReadyMsg {
        uint64_t dst_domain_id;
        uint64_t src_domain_id;
        uint32_t rank;
} DomainReadyMsg;

/* PeerDomainLeave: member @rank left with @status (STATUS_*) and @detail. */
typedef struct DomainLeaveMsg {
        uint64_t dst_domain_id;
        uint64_t src_domain_id;
        uint32_t rank;
        int status;
        const char *detail;
} DomainLeaveMsg;

/* PeerDomainXfer: a word about message @seq of lane @src_rank -> @dst_rank. */
typedef struct DomainXferMsg {
        uint64_t dst_domain_id;
        uint64_t src_domain_id;
        uint32_t kind; /* XferKind, as the peer sent it */
        uint32_t src_rank;
        uint32_t dst_rank;
        uint64_t seq;
        const OpDesc *desc; /* NULL: none */
        int status;         /* STATUS_* */
        const char *detail;
        bool direct;     /* READY: the receiver waits for one-sided writes into the
                          * segments @descs describe, one each */
        LaneDesc *descs; /* (received: the handler's to free) */
        size_t n_descs;
} DomainXferMsg;

typedef void (*domain_ready_fn)(Peer *p, int status, const Error *err, void *userdata);

/* The channel @ch is connected (@status 0), or could not be (@status < 0, @reason says why; may be
 * NULL). */
typedef void (*domain_channel_ready_fn)(TransportChannel *ch, int status, const char *reason,
                                        void *userdata);

/*
 * How the domain state machines reach other daemons: domain-codec.c fills it with what puts
 * the messages on the wire (domain_codec_ops), a unit test with a recorder. Notices return 0 or
 * a negative errno; a call's answer comes to the domain_*_on_reply() function it names.
 */
struct DomainPeerOps {
        /* A connection to the daemon at @address (peer_get()), and waiting for it to be READY
         * (peer_when_ready(): @fn may run from inside). */
        int (*dial)(LinkRoot *link, const char *address, Peer **ret, Error *err);
        int (*when_ready)(Peer *p, domain_ready_fn fn, void *userdata, PeerWaiter **ret_waiter);
        void (*waiter_cancel)(PeerWaiter *w);
        /* PeerDomainJoin for @pair, answered to domain_join_on_reply(); forgetting it makes the
         * answer find nobody. */
        int (*join_ask)(Peer *p, const DomainJoinMsg *m, DomainPair *pair, PeerCall **ret_call);
        void (*join_forget)(PeerCall *call);
        /* The answers to a PeerDomainJoin that came in. */
        void (*join_answer)(Peer *p, uint64_t request_id, const DomainJoinAnswer *a);
        void (*join_refuse)(Peer *p, uint64_t request_id, const Error *err);
        int (*linked)(Peer *p, const DomainLinkedMsg *m);
        int (*ready)(Peer *p, const DomainReadyMsg *m);
        int (*leave)(Peer *p, const DomainLeaveMsg *m);
        int (*xfer)(Peer *p, const DomainXferMsg *m);
        /*
         * A link's channel @ch to @p with every path connected, the paths an earlier
         * timeout or error flushed connected again first (peer_channel_when_ready()): @fn runs
         * once it is (from inside, when it is already) or could not be, unless the wait is
         * cancelled; returns 0 or a negative errno (@fn does not run then). Repairing connects
         * the flushed paths of @ch again for whatever uses it next (peer_channel_repair()).
         */
        int (*channel_ready)(Peer *p, TransportChannel *ch, domain_channel_ready_fn fn,
                             void *userdata, PeerChannelWaiter **ret_waiter);
        void (*channel_waiter_cancel)(PeerChannelWaiter *w);
        void (*channel_repair)(Peer *p, TransportChannel *ch);
        /*
         * The pair link of @pl: asks @p for it (PeerLink of @c, answered to
         * domain_pair_link_on_reply()); forgets the question (a link granted later is given
         * back); connects its transport from the answer (domain_pair_link_on_transport());
         * gives the granted link back (PeerUnlink); makes the Link from the answer; frees an
         * answer.
         */
        int (*link_ask)(PairLink *pl, Cluster *c, Peer *p, PeerCall **ret_call);
        void (*link_forget)(PairLink *pl);
        void (*link_connect)(PairLink *pl, Peer *p);
        void (*link_give_back)(PairLink *pl);
        int (*link_make)(PairLink *pl, Cluster *c, const char *reason, Link **ret, Error *err);
        void (*offer_free)(DomainLinkOffer *offer);
};

/* The messages from rank @src to rank @dst, in seq order on both ends. */
struct Lane {
        Domain *dom;
        uint32_t src;
        uint32_t dst;
        bool local;             /* both ends on this daemon: copies */
        bool direct;            /* remote: the sender's link reaches the receiver's memory
                                 * (its transport has remote access), so its messages move
                                 * as one-sided writes */
        Transport *transport;   /* what its messages move by (NULL: not decided yet) */
        uint64_t next_send_seq; /* src local: the next seq a send takes */
        uint64_t next_recv_seq; /* dst local: the next seq a receive takes */
        CList ops;              /* DomainOp.link_lane: assigned, not done */
        CList words;            /* LaneWord.link */
        unsigned n_words;
        size_t n_word_descs; /* the descriptors @words hold */
        uint64_t n_msgs;     /* completed (counted at the local end's op) */
        uint64_t bytes;
        uint64_t n_direct_msgs; /* of which moved one-sided */
};

typedef enum OpState {
        OP_ASSIGNED,  /* has its seq; not started (a forward waits for its data) */
        OP_POSTED,    /* started; waits for the other end */
        OP_DATA,      /* bytes moving (data job or copy) */
        OP_WAIT_WORD, /* our side is done; waits for the other end's word */
        OP_DONE,
} OpState;

struct DomainOp {
        DomainCall *call;
        Lane *lane;
        size_t item; /* batch: the item; collectives: unused */
        bool send;
        uint64_t seq;
        OpDesc desc;
        TransportSegment *segs; /* into the call's storage; a send reads them */
        size_t n_segs;
        OpState state;
        int status;
        Error err;
        /* remote */
        Peer *peer;            /* where the job runs and the words go */
        TransportJob data_job; /* our side of the message's stream, or the writes of a
                                * direct send */
        bool job;              /* @data_job runs; its callback will run */
        bool data_ok;          /* our side moved every byte */
        bool have_ready;       /* send: the receiver's READY, in @ready */
        bool ready_spent;      /* its job got our bytes or our abort (exactly once) */
        OpDesc ready;
        Peer *ready_peer;
        bool have_word; /* the other end's final word (status in @word_*) */
        int word_status;
        char word_msg[ERROR_MSG_MAX];
        /* remote, direct (domain-lane-direct.c) */
        bool direct;       /* this message moves one-sided */
        bool ready_direct; /* send: the READY asks for writes into what @ready_descs name */
        LaneDesc *ready_descs;
        size_t n_ready_descs;
        TransportRegion **regions; /* our spans, registered while the message runs */
        size_t n_regions;
        TransportRegion **seg_regions; /* per segment: its span's (NULL: none) */
        LaneDesc *descs;               /* receive: per segment, its descriptor */
        TransportSegment *write_segs;  /* send: the writes */
        size_t n_write_segs;
        bool writing;                      /* send: @data_job writes them; its callback will run */
        PeerChannelWaiter *channel_waiter; /* send: the channel connects its paths first */
        Peer *channel_peer;                /* send: the link's peer, which owns @channel */
        TransportChannel *channel;
        /* local */
        bool copying;                /* send: @copy runs; its callback will run */
        TransportJob copy;           /* send: the copy into the partner's segments */
        TransportSegment *copy_segs; /* its segments, until its callback */
        DomainOp *partner;
        /* collectives */
        DomainOp *forward; /* receive: the send that passes its bytes on */
        bool deferred;     /* send: posted when its receive completes */
        CList link_lane;
        CList link_done; /* on reg->done between its completion and the drain */
};

typedef struct DomainCall {
        Domain *dom;
        uint32_t rank; /* the caller's */
        uint64_t cluster_id;
        Completion *done;      /* NULL once answered or gone */
        domain_reply_fn reply; /* answers @done with values */
        OpKind kind;
        DomainOp *ops;
        size_t n_ops;
        size_t n_pending; /* ops the drain has not handled yet */
        int32_t *rets;    /* batch: per item */
        size_t n_items;
        TransportSegment *segs; /* storage of every op's segments */
        Region **regions;       /* referenced */
        size_t n_regions;
        bool fail_fast; /* collectives: the first failure stops the rest */
        int status;
        Error err;
        size_t err_item; /* batch: the item @err is about */
        uint32_t algorithm;
        uint64_t bytes;
        usec_t start_usec;
        usec_t deadline_usec; /* when @timer fires */
        struct event *timer;
        CList link_domain;
} DomainCall;

/* domain.c */
const char *domain_state_to_string(DomainState s);
Domain *domain_find_id(DomainRegistry *reg, uint64_t id);
Domain *domain_find_name(DomainRegistry *reg, const char *name);
void domain_ref(Domain *dom);
void domain_unref(Domain *dom);
/* Fails @dom (PREPARING or OK) with @code and a reason; tells the other members unless
 * @quiet. Idempotent. */
void domain_fail(Domain *dom, int code, bool quiet, const char *fmt, ...) _printf_(4, 5);
/* Every rank ready: links made, resources acquired, OK. */
void domain_check_ok(Domain *dom);
/* A set-up slot may have freed or the domain no longer needs one. */
void domain_setup_update(Domain *dom);
/* Creates a domain in @reg; the caller fills in members and calls domain_start(). */
int domain_new(DomainRegistry *reg, Domain **ret);
/* Arms link_total_time and asks for a slot. */
int domain_start(Domain *dom);
/* Member @rank (local) leaves: unlink or detach. Frees the domain when no local member is
 * left. */
void domain_member_leave(Domain *dom, uint32_t rank, int code, const char *why);
/* The Peer to reach member @rank's daemon on now (READY, not retiring), or NULL. */
Peer *domain_rank_peer(Domain *dom, uint32_t rank);
/* Whether canonical @ip_port is where this daemon accepts peers (a wildcard listener: any
 * address of this host with its port). */
bool domain_address_is_ours(LinkRoot *link, const char *ip_port);
/* Tell the daemon (DomainRoots): the count of domains changed, a call was answered, a call
 * failed with @status. */
void domain_registry_changed(DomainRegistry *reg);
void domain_registry_call_ended(DomainRegistry *reg);
void domain_registry_count_error(DomainRegistry *reg, int status);
/* The local_comm_res of @c: the one it gave at init, or one generated for it. */
void domain_local_res(DomainRegistry *reg, const Cluster *c, RankDevice *ret, bool *ret_given);
/* "comm domain 7 (name)" into @buf. */
const char *domain_name(const Domain *dom, char *buf, size_t size);
#define DOMAIN_NAME(dom) domain_name((dom), (char[DOMAIN_NAME_MAX + 64]){0}, DOMAIN_NAME_MAX + 64)

/* domain-join.c */
/* Looks at every pair of every joined local member: asks, links, says so. */
void domain_join_progress(Domain *dom);
/* The retry tick of an active set-up. */
void domain_join_tick(Domain *dom);
/* Drops the domain's calls, waiters and pair links (before it fails or goes). */
void domain_join_release(Domain *dom, uint32_t rank);
/* Tells every remote member's daemon that @rank left with @code/@reason. */
void domain_send_leave(Domain *dom, uint32_t rank, int code, const char *reason);
/* The rank's daemon is lost. */
void domain_join_peer_lost(Domain *dom, Peer *p, int status, const char *why);
/* Makes the links of OK @dom from what the pairs hold. */
void domain_make_links(Domain *dom);
void domain_pair_link_unref(PairLink *pl);
PairLink *domain_pair_link_find(DomainRegistry *reg, uint64_t local, uint64_t remote);
/*
 * Where the messages of local member @m to remote member @o of OK @dom go one-sided: the
 * channel (and in *@ret_peer the peer that owns it) of the link the pair uses, its own or the
 * one the other cluster made, when that link's transport reaches the receiver's memory
 * (transport_caps()->remote_access). NULL when it does not or the link is unusable; *@ret_why
 * then says why ("streams on the peer connection", "is gone", ...).
 */
TransportChannel *domain_pair_direct(Domain *dom, uint32_t m, uint32_t o, Peer **ret_peer,
                                     const char **ret_why);
/* The transport_reason of the link pair @m -> @o of OK @dom uses, into @buf. */
const char *domain_pair_reason(const Domain *dom, uint32_t m, uint32_t o, char *buf, size_t size);
/*
 * Link or inbound link @link_id of this daemon is gone with @status: unlinked by either cluster
 * (NOT_YET_LINK) fails every domain whose pairs use it with LINK_FAILED, as a member's unlink
 * does; other statuses (a peer, a cluster lost) are left to what fails domains for those.
 */
void domain_link_gone(DomainRegistry *reg, uint64_t link_id, int status, uint64_t a, uint64_t b);

/* The peer messages the handlers take, decoded (domain-codec.c): domain-peer.c for members
 * joining, linking, becoming ready and leaving, domain-lane.c for the words of a lane's messages.
 * Each takes a message as a READY peer sent it and checks it as untrusted input. */
void domain_peer_on_join(DomainRegistry *reg, Peer *p, uint64_t request_id, const DomainJoinMsg *m);
void domain_peer_on_linked(DomainRegistry *reg, Peer *p, const DomainLinkedMsg *m);
void domain_peer_on_ready(DomainRegistry *reg, Peer *p, const DomainReadyMsg *m);
void domain_peer_on_leave(DomainRegistry *reg, Peer *p, const DomainLeaveMsg *m);
/* Takes @m->descs. */
void domain_lane_on_xfer(DomainRegistry *reg, Peer *p, DomainXferMsg *m);

/* The answers to what domain/ asked through DomainPeerOps (domain-join.c). */
/* The answer to join_ask(): @a on STATUS_OK, else @status and @err say why there is none. */
void domain_join_on_reply(DomainPair *pair, Peer *p, int status, const Error *err,
                          const DomainJoinAnswer *a);
/* The answer to link_ask(): @offer (taken; NULL when it could not be kept) on STATUS_OK. */
void domain_pair_link_on_reply(PairLink *pl, Peer *p, int status, const Error *err,
                               DomainLinkOffer *offer);
/* What link_connect() found: a channel of the link's own (@ch), none (NULL: the link streams
 * on the peer connection), or no link (@err). */
void domain_pair_link_on_transport(LinkTransport *t, TransportChannel *ch, const Error *err,
                                   void *userdata);

/* domain-codec.c */
/* What reaches other daemons in the daemon. */
extern const DomainPeerOps domain_codec_ops;
/* Registers the handlers of the domain peer messages with @reg's link root. */
void domain_codec_register(DomainRegistry *reg);

/* domain-lane.c */
int domain_lanes_new(Domain *dom);
void domain_lanes_free(Domain *dom);
/* The job id a receiving daemon registers message @seq of @src -> @dst under. */
uint64_t domain_lane_job_id(uint64_t recv_domain_id, uint32_t src, uint32_t dst, uint64_t seq);
/* Gives @op its lane and seq (in call order). */
void domain_op_assign(DomainOp *op, Lane *lane, bool send);
/* Starts @op (a receive registers its job; a send looks for the READY). */
void domain_op_post(DomainOp *op);
/* Stops @op with @status; its completion follows once no byte of it moves. */
void domain_op_cancel(DomainOp *op, int status, const char *fmt, ...) _printf_(3, 4);
/* Every lane op that runs over @p fails; their data jobs end with the data plane. */
void domain_lanes_peer_lost(Domain *dom, Peer *p);

/* Sets every lane's transport once the links are made: a remote lane is direct when the
 * sender's link reaches the receiver's memory (ours, or as the sender's daemon said in
 * PeerDomainLinked). */
void domain_lanes_set_transport(Domain *dom);

/*
 * Walks two segment lists that add up to the same bytes side by side, one piece per call: the
 * piece starts at offset @z->oi of segment @z->i of the first list and @z->oj of @z->j of the
 * second, and ends where either segment ends or after @max bytes. Returns its length (0 for a
 * segment of length 0) and moves on.
 */
typedef struct SegZip {
        size_t i, j;
        uint64_t oi, oj;
} SegZip;

static inline uint64_t seg_zip_step(SegZip *z, uint64_t len_i, uint64_t len_j, uint64_t max)
{
        uint64_t len = MIN(MIN(len_i - z->oi, len_j - z->oj), max);

        z->oi += len;
        z->oj += len;
        if (z->oi == len_i) {
                z->i++;
                z->oi = 0;
        }
        if (z->oj == len_j) {
                z->j++;
                z->oj = 0;
        }
        return len;
}

/* domain-lane-direct.c */
/* The transport direct lanes write with (the transport set's direct one). */
Transport *domain_lane_direct_transport(const Lane *l);
/* Registers the destination of receive @op for remote write on its member's device and packs
 * its descriptors; its READY carries them. LIMIT_EXCEEDED, FEATURE_NOT_ENABLED, OUT_OF_MEMORY
 * or FAILED with @err. */
int domain_lane_direct_recv_register(DomainOp *op, Error *err);
/* The descriptors @op's READY carries for the sender's writes, into @m (borrowed from @op). */
void domain_lane_direct_ready_fill(const DomainOp *op, DomainXferMsg *m);
/* Unpacks the READY's descriptors of send @op with its transport, checks that they cover the
 * message exactly, registers its source on @channel and pairs the two up into writes
 * (op->write_segs). PROTOCOL_MISMATCH (a descriptor that is none, or lengths that do not add up
 * to the message) or OUT_OF_MEMORY with @err. */
int domain_lane_direct_send_prepare(DomainOp *op, TransportChannel *channel, Error *err);
/* Deregisters @op's spans and frees its direct state; no job may run. Idempotent. */
void domain_lane_direct_release(DomainOp *op);

/* domain-call.c */
/*
 * @op reached OP_DONE: queues it for domain_call_drain(), which tells its call. Nothing that
 * completes an op (a job's end, a word, a cancel, a lost peer) ever runs a call's reaction to it (a
 * collective's fail-fast cancel, a forward, the answer) or frees an op or a call under its
 * caller: only the drain does, from its own event, where no other op is being handled.
 */
void domain_call_op_done(DomainOp *op);
/* Tells every call what its queued ops did; finishes and frees calls whose ops are all done. */
void domain_call_drain(DomainRegistry *reg);
/* Every call of @dom stops with @code. */
void domain_calls_fail(Domain *dom, int code, const char *reason);
/* Validates the caller and @dom for an operation; NOT_YET_LINK while PREPARING. */
int domain_call_check_domain(Domain *dom, const Cluster *c, uint32_t *ret_rank, Error *err);
/* Allocates a call of @n_ops ops and @n_segs segments that answers @done through @reply. */
int domain_call_new(Domain *dom, uint32_t rank, Cluster *c, Completion *done, domain_reply_fn reply,
                    OpKind kind, size_t n_ops, size_t n_segs, DomainCall **ret);
DomainCall *domain_call_free(DomainCall *call);
/* Takes a reference on @r for the call's life (deduplicated). */
int domain_call_hold_region(DomainCall *call, Region *r);
/* Arms the deadline, posts the ops and keeps the call's Completion. Returns COMPLETION_PENDING,
 * or fails. */
int domain_call_start(DomainCall *call, uint32_t timeout_ms, Error *err);
