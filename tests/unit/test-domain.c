/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for comm domains: the membership state machine and the calls, driven by hand. A
 * DomainRegistry is built over the transfer suites' fixture (an event base, a LinkRoot, a READY
 * peer and a TransportSet whose same-node and TCP transports are fakes, fake-transport.h, and,
 * for the RDMA lane, an RDMA-like fake that registers and checks keys); what it sends to other
 * daemons goes to a recorder (its DomainPeerOps), and what other daemons send comes in as the
 * decoded messages domain-codec.c would hand over. Data jobs are completed by the test, the
 * same-node and RDMA ones copying. No sockets, no threads, no sleeps: timers are fired by
 * making their events active.
 */
/* Before check.h, whose fail() macro would rename CompletionOps.fail. */
#include "tests/unit/transfer-fixture.h"

#include <event2/event.h>
#include <kvdist/kvdist.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "daemon/link/peer.h"
#include "daemon/memory/region.h"
#include "tests/harness/harness.h"

#include <check.h>

/* The node ids and domain id of the other daemon in these tests. */
#define THEIR_NODE 900
#define THEIR_DOMAIN 77

/* What the registry sent, as the recorder saw it. */
typedef enum SentKind {
        SENT_DIAL,
        SENT_JOIN,
        SENT_JOIN_ANSWER,
        SENT_JOIN_REFUSE,
        SENT_LINKED,
        SENT_READY,
        SENT_LEAVE,
        SENT_XFER,
        SENT_LINK_ASK,
        SENT_LINK_CONNECT,
        SENT_LINK_MAKE,
        SENT_LINK_GIVE_BACK,
        SENT_CHANNEL_READY,
        SENT_CHANNEL_REPAIR,
} SentKind;

#define SENT_MAX_DESCS 4

typedef struct Sent {
        SentKind kind;
        Peer *peer;
        uint64_t dst_domain_id;
        uint64_t src_domain_id;
        uint32_t src_rank; /* JOIN, LINKED, XFER; READY and LEAVE: the rank */
        uint32_t dst_rank;
        int status; /* LEAVE, XFER, JOIN_REFUSE */
        char detail[ERROR_MSG_MAX];
        bool flag;        /* JOIN_ANSWER: joined; LINKED: direct */
        uint32_t xfer;    /* XFER: the kind */
        uint64_t seq;     /* XFER */
        OpDesc desc;      /* XFER: the description it carried, if any */
        DomainPair *pair; /* JOIN: to answer */
        PairLink *pl;     /* LINK_*: to answer */
        /* XFER: a READY's descriptors as the RDMA-like fake unpacks them; and its
         * registrations live as it went out */
        bool direct;
        TransportRemote remotes[SENT_MAX_DESCS];
        size_t n_descs;
        size_t live_regions;
        TransportChannel *channel; /* CHANNEL_* */
} Sent;

/* A pair link's answer: the recorder's stand-in for the peer's PeerLinkReply. */
struct DomainLinkOffer {
        uint64_t link_id;
};

static TransferFixture fx; /* base, ids, limits, LinkRoot, fake transports, the peer */
/* The RDMA transport (copying), in the transport set only where a test puts it (form_rdma()). */
static FakeTransport *rdma_fake;
static uint32_t link_total_time_ms = 60000;
static DomainRegistry *reg;
static Peer *them; /* the other daemon, READY: fx.peer */
static Sent sent[64];
static size_t n_sent;
static Link *made[8]; /* the links link_make() "made" */
static size_t n_made;
static char call_token; /* what a PeerCall handle points at */

static Sent *record(SentKind kind, Peer *p)
{
        ck_assert_uint_lt(n_sent, sizeof(sent) / sizeof(sent[0]));
        sent[n_sent] = (Sent){.kind = kind, .peer = p};
        return &sent[n_sent++];
}

/* The @n-th (0-based) recorded message of @kind, or NULL. */
static Sent *sent_nth(SentKind kind, size_t n)
{
        for (size_t i = 0; i < n_sent; i++)
                if (sent[i].kind == kind && n-- == 0)
                        return &sent[i];
        return NULL;
}

static size_t sent_count(SentKind kind)
{
        size_t n = 0;

        for (size_t i = 0; i < n_sent; i++)
                n += sent[i].kind == kind;
        return n;
}

/* ---- the recorder (DomainPeerOps) ---- */

static int rec_dial(LinkRoot *link, const char *address, Peer **ret, Error *err)
{
        record(SENT_DIAL, them);
        *ret = them;
        return 0;
}

static char waiter_token; /* what a PeerWaiter handle points at */

static int rec_when_ready(Peer *p, domain_ready_fn fn, void *userdata, PeerWaiter **ret_waiter)
{
        /* As peer_when_ready() does: a READY peer answers from inside, another one later
         * (never, here). */
        if (p->state != PEER_READY) {
                *ret_waiter = (PeerWaiter *)&waiter_token;
                return 0;
        }
        *ret_waiter = NULL;
        fn(p, STATUS_OK, NULL, userdata);
        return 0;
}

static void rec_waiter_cancel(PeerWaiter *w)
{
}

static int rec_join_ask(Peer *p, const DomainJoinMsg *m, DomainPair *pair, PeerCall **ret_call)
{
        Sent *s = record(SENT_JOIN, p);

        s->src_domain_id = m->src_domain_id;
        s->src_rank = m->src_rank;
        s->dst_rank = m->dst_rank;
        (void)snprintf(s->detail, sizeof(s->detail), "%s", m->comm_name);
        ck_assert_uint_eq(m->digest_len, SHA256_DIGEST_SIZE);
        s->pair = pair;
        *ret_call = (PeerCall *)&call_token;
        return 0;
}

static void rec_join_forget(PeerCall *call)
{
}

static void rec_join_answer(Peer *p, uint64_t request_id, const DomainJoinAnswer *a)
{
        Sent *s = record(SENT_JOIN_ANSWER, p);

        s->flag = a->joined;
        s->dst_domain_id = a->dst_domain_id;
}

static void rec_join_refuse(Peer *p, uint64_t request_id, const Error *err)
{
        Sent *s = record(SENT_JOIN_REFUSE, p);

        s->status = err->code;
        (void)snprintf(s->detail, sizeof(s->detail), "%s", err->msg);
}

static int rec_linked(Peer *p, const DomainLinkedMsg *m)
{
        Sent *s = record(SENT_LINKED, p);

        s->dst_domain_id = m->dst_domain_id;
        s->src_domain_id = m->src_domain_id;
        s->src_rank = m->src_rank;
        s->dst_rank = m->dst_rank;
        s->flag = m->direct;
        return 0;
}

static int rec_ready(Peer *p, const DomainReadyMsg *m)
{
        Sent *s = record(SENT_READY, p);

        s->dst_domain_id = m->dst_domain_id;
        s->src_domain_id = m->src_domain_id;
        s->src_rank = m->rank;
        return 0;
}

static int rec_leave(Peer *p, const DomainLeaveMsg *m)
{
        Sent *s = record(SENT_LEAVE, p);

        s->dst_domain_id = m->dst_domain_id;
        s->src_domain_id = m->src_domain_id;
        s->src_rank = m->rank;
        s->status = m->status;
        (void)snprintf(s->detail, sizeof(s->detail), "%s", m->detail);
        return 0;
}

static int rec_xfer(Peer *p, const DomainXferMsg *m)
{
        Sent *s = record(SENT_XFER, p);

        s->dst_domain_id = m->dst_domain_id;
        s->src_domain_id = m->src_domain_id;
        s->src_rank = m->src_rank;
        s->dst_rank = m->dst_rank;
        s->xfer = m->kind;
        s->seq = m->seq;
        if (m->desc)
                s->desc = *m->desc;
        s->status = m->status;
        (void)snprintf(s->detail, sizeof(s->detail), "%s", m->detail);
        s->direct = m->direct;
        ck_assert_uint_le(m->n_descs, SENT_MAX_DESCS);
        for (size_t i = 0; i < m->n_descs; i++)
                ck_assert_int_eq(transport_desc_unpack(&rdma_fake->transport, m->descs[i].bytes,
                                                       m->descs[i].len, &s->remotes[i]),
                                 0);
        s->n_descs = m->n_descs;
        s->live_regions = fake_transport_live_regions(rdma_fake);
        return 0;
}

static int channel_error;         /* != 0: channel_ready fails with it */
static bool channel_deferred;     /* channel_ready waits (for ever, here) instead of answering */
static char channel_waiter_token; /* what a PeerChannelWaiter handle points at */
static unsigned n_channel_cancels;

static int rec_channel_ready(Peer *p, TransportChannel *ch, domain_channel_ready_fn fn,
                             void *userdata, PeerChannelWaiter **ret_waiter)
{
        record(SENT_CHANNEL_READY, p)->channel = ch;
        /* As peer_channel_when_ready(): a connected channel answers from inside. */
        *ret_waiter = NULL;
        if (channel_error != 0)
                return channel_error;
        if (channel_deferred) {
                *ret_waiter = (PeerChannelWaiter *)&channel_waiter_token;
                return 0;
        }
        fn(ch, 0, NULL, userdata);
        return 0;
}

static void rec_channel_waiter_cancel(PeerChannelWaiter *w)
{
        ck_assert_ptr_eq(w, (PeerChannelWaiter *)&channel_waiter_token);
        n_channel_cancels++;
}

static void rec_channel_repair(Peer *p, TransportChannel *ch)
{
        record(SENT_CHANNEL_REPAIR, p)->channel = ch;
}

static int rec_link_ask(PairLink *pl, Cluster *c, Peer *p, PeerCall **ret_call)
{
        record(SENT_LINK_ASK, p)->pl = pl;
        *ret_call = (PeerCall *)&call_token;
        return 0;
}

static void rec_link_forget(PairLink *pl)
{
}

static void rec_link_connect(PairLink *pl, Peer *p)
{
        record(SENT_LINK_CONNECT, p)->pl = pl;
}

static void rec_link_give_back(PairLink *pl)
{
        record(SENT_LINK_GIVE_BACK, pl->peer)->pl = pl;
}

static int rec_link_make(PairLink *pl, Cluster *c, const char *reason, Link **ret, Error *err)
{
        Link *l;

        if (pl->channel) {
                /* As link_make_remote(): a link of @c over the pair's RDMA channel, on the
                 * cluster's list (the fixture frees it with the cluster). */
                l = transfer_fixture_remote_link(&fx, c, pl->remote_cluster_id);
                l->channel = pl->channel;
                record(SENT_LINK_MAKE, pl->peer)->pl = pl;
                *ret = l;
                return 0;
        }
        l = calloc(1, sizeof(*l));
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_lt(n_made, sizeof(made) / sizeof(made[0]));
        l->id = id_source_next(&fx.ids);
        made[n_made++] = l;
        record(SENT_LINK_MAKE, pl->peer)->pl = pl;
        *ret = l;
        return 0;
}

static void rec_offer_free(DomainLinkOffer *o)
{
        free(o);
}

static const DomainPeerOps recorder = {
        .dial = rec_dial,
        .when_ready = rec_when_ready,
        .waiter_cancel = rec_waiter_cancel,
        .join_ask = rec_join_ask,
        .join_forget = rec_join_forget,
        .join_answer = rec_join_answer,
        .join_refuse = rec_join_refuse,
        .linked = rec_linked,
        .ready = rec_ready,
        .leave = rec_leave,
        .xfer = rec_xfer,
        .channel_ready = rec_channel_ready,
        .channel_waiter_cancel = rec_channel_waiter_cancel,
        .channel_repair = rec_channel_repair,
        .link_ask = rec_link_ask,
        .link_forget = rec_link_forget,
        .link_connect = rec_link_connect,
        .link_give_back = rec_link_give_back,
        .link_make = rec_link_make,
        .offer_free = rec_offer_free,
};

/* ---- the fixture ---- */

static void setup(void)
{
        DomainRoots roots = {
                .link = &fx.link,
                .transports = &fx.transports,
                .link_total_time_ms = &link_total_time_ms,
        };

        transfer_fixture_init(&fx);
        fx.limits.max_region_size = 1 << 20;
        ck_assert_int_eq(domain_registry_new(&roots, &reg), 0);
        reg->peer = &recorder;
        them = fx.peer;
        them->node_id = THEIR_NODE;
        n_sent = 0;
        n_made = 0;
        rdma_fake = fake_transport_new_rdma(&fx.transports);
        ck_assert_ptr_nonnull(rdma_fake);
        rdma_fake->copy = true;
        channel_error = 0;
        channel_deferred = false;
        n_channel_cancels = 0;
}

static void teardown(void)
{
        reg = domain_registry_free(reg);
        /* Frees the clusters and checks that no data job was left behind. */
        transfer_fixture_done(&fx);
        for (size_t i = 0; i < n_made; i++)
                free(made[i]);
        /* No WRITE left running, no registration left behind. */
        ck_assert_uint_eq(rdma_fake->n_jobs, 0);
        ck_assert_uint_eq(fake_transport_live_regions(rdma_fake), 0);
        rdma_fake = fake_transport_free(rdma_fake);
}

/* Runs what the event loop has ready (the calls' drain, timers made active). */
static void loop_once(void)
{
        ck_assert_int_ge(event_base_loop(fx.base, EVLOOP_NONBLOCK), 0);
}

static Cluster *cluster(uint64_t id)
{
        Cluster *c;

        ck_assert_int_eq(cluster_new(&fx.link, NULL, id, 0, (int32_t)id % 8, 1000, &c), 0);
        return c;
}

/*
 * A domain of @n ranks as domain_handle_link() builds it: rank r is cluster 100 * (r + 1), local
 * where @local[r]; @joined[r] local members called link (with their cluster in @clusters).
 */
static Domain *domain_make(const char *name, unsigned n, const bool *local, Cluster **clusters)
{
        Domain *dom;

        ck_assert_int_eq(domain_new(reg, &dom), 0);
        (void)snprintf(dom->name, sizeof(dom->name), "%s", name);
        memset(dom->digest, 0x5a, sizeof(dom->digest));
        dom->n_ranks = n;
        for (uint32_t o = 0; o < n; o++) {
                DomainRank *r = &dom->ranks[o];

                *r = (DomainRank){.dom = dom, .rank = o, .cluster_id = 100 * (o + 1)};
                r->local = local[o];
                r->device_id = (int32_t)o;
                (void)snprintf(r->address, sizeof(r->address), "10.0.0.%u:7400", local[o] ? 1 : 2);
                (void)snprintf(r->server_id, sizeof(r->server_id), "s%u", local[o] ? 1 : 2);
                for (uint32_t k = 0; k < n; k++)
                        r->pairs[k] = (DomainPair){.dom = dom, .m = o, .o = k};
        }
        for (uint32_t o = 0; o < n; o++)
                if (clusters && clusters[o]) {
                        dom->ranks[o].joined = true;
                        dom->ranks[o].cluster = clusters[o];
                        dom->ranks[o].seq = id_source_next_seq(&fx.ids);
                }
        ck_assert_int_eq(domain_start(dom), 0);
        domain_join_progress(dom);
        return dom;
}

/* A local member calls link after the domain exists. */
static void domain_join_local(Domain *dom, uint32_t rank, Cluster *c)
{
        dom->ranks[rank].joined = true;
        dom->ranks[rank].cluster = c;
        dom->ranks[rank].seq = id_source_next_seq(&fx.ids);
        domain_join_progress(dom);
}

/* The other daemon answers our @n-th join ask: joined, with its domain id. */
static void answer_join(size_t n)
{
        Sent *s = sent_nth(SENT_JOIN, n);

        ck_assert_ptr_nonnull(s);
        domain_join_on_reply(s->pair, them, STATUS_OK, NULL,
                             &(DomainJoinAnswer){.joined = true, .dst_domain_id = THEIR_DOMAIN});
}

/* The other daemon grants our @n-th pair link, and its transport connects over RDMA on @ep, or
 * over TCP when @ep is NULL. */
static void grant_link_over(size_t n, TransportChannel *ep)
{
        Sent *s = sent_nth(SENT_LINK_ASK, n);
        DomainLinkOffer *offer = calloc(1, sizeof(*offer));

        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_nonnull(offer);
        domain_pair_link_on_reply(s->pl, them, STATUS_OK, NULL, offer);
        s = sent_nth(SENT_LINK_CONNECT, n);
        ck_assert_ptr_nonnull(s);
        domain_pair_link_on_transport(&s->pl->transport, ep, NULL, s->pl);
}

/* The other daemon grants our @n-th pair link, and its transport connects over TCP. */
static void grant_link(size_t n)
{
        grant_link_over(n, NULL);
}

/* Rank @src's side of its pair with @dst is linked, over RDMA when @rdma. */
static void their_linked_over(Domain *dom, uint32_t src, uint32_t dst, bool rdma)
{
        domain_peer_on_linked(reg, them,
                              &(DomainLinkedMsg){.dst_domain_id = dom->id,
                                                 .src_domain_id = THEIR_DOMAIN,
                                                 .src_rank = src,
                                                 .dst_rank = dst,
                                                 .direct = rdma});
}

static void their_linked(Domain *dom, uint32_t src, uint32_t dst)
{
        their_linked_over(dom, src, dst, false);
}

static void their_ready(Domain *dom, uint32_t rank)
{
        domain_peer_on_ready(reg, them,
                             &(DomainReadyMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = rank});
}

/* What rank 1's daemon asks of our rank 0 in a 2-rank @dom: whether it joined. */
static DomainJoinMsg their_join(const Domain *dom)
{
        return (DomainJoinMsg){
                .comm_name = dom->name,
                .digest = dom->digest,
                .digest_len = sizeof(dom->digest),
                .n_members = 2,
                .src_rank = 1,
                .dst_rank = 0,
                .src_domain_id = THEIR_DOMAIN,
        };
}

/* Rank 0 here (cluster 100), rank 1 behind the other daemon, formed to OK. */
static Domain *form_two(void)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("two", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});

        answer_join(0);
        grant_link(0);
        their_linked(dom, 1, 0);
        their_ready(dom, 1);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        return dom;
}

/* ---- forming ---- */

START_TEST(test_form_two)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("two", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        DomainQueryResult q;
        Error err = ERROR_INIT;
        Sent *s;

        /* The set-up dials rank 1's daemon and asks whether rank 1 joined. */
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        ck_assert_int_eq(dom->setup, SETUP_ACTIVE);
        ck_assert_uint_eq(sent_count(SENT_DIAL), 1);
        s = sent_nth(SENT_JOIN, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_eq(s->peer, them);
        ck_assert_uint_eq(s->src_domain_id, dom->id);
        ck_assert_uint_eq(s->src_rank, 0);
        ck_assert_uint_eq(s->dst_rank, 1);
        ck_assert_str_eq(s->detail, "two");
        ck_assert_uint_eq(sent_count(SENT_LINK_ASK), 0);

        /* Joined: our cluster asks for its pair link. */
        answer_join(0);
        ck_assert(dom->ranks[0].pairs[1].joined);
        ck_assert_uint_eq(dom->ranks[1].domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(sent_count(SENT_LINK_ASK), 1);
        ck_assert_uint_eq(sent_count(SENT_LINKED), 0);

        /* Granted and connected: we say our side is linked, over TCP. */
        grant_link(0);
        s = sent_nth(SENT_LINKED, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(s->src_domain_id, dom->id);
        ck_assert_uint_eq(s->src_rank, 0);
        ck_assert_uint_eq(s->dst_rank, 1);
        ck_assert(!s->flag);
        ck_assert_uint_eq(sent_count(SENT_READY), 0);

        /* Their side is linked: rank 0 is ready and says so; the domain waits for rank 1. */
        their_linked(dom, 1, 0);
        s = sent_nth(SENT_READY, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(s->src_rank, 0);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        ck_assert_int_eq(domain_handle_query(reg, c0, dom->id, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_PREPARING);

        /* Rank 1 is ready: the links are made and the domain is OK. */
        their_ready(dom, 1);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        ck_assert_uint_eq(sent_count(SENT_LINK_MAKE), 1);
        ck_assert_int_eq(dom->setup, SETUP_NONE);
        ck_assert_uint_eq(reg->formed, 1);
        ck_assert_int_eq(domain_handle_query(reg, c0, dom->id, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_OK);
        ck_assert_ptr_null(q.reason);
        ck_assert_uint_eq(sent_count(SENT_LEAVE), 0);
}
END_TEST

START_TEST(test_form_three)
{
        Cluster *c0 = cluster(100), *c1 = cluster(200);
        Domain *dom =
                domain_make("three", 3, (bool[]){true, true, false}, (Cluster *[]){c0, NULL, NULL});

        /* Only rank 0 called link: it asks rank 2's daemon; nothing is linked locally yet. */
        ck_assert_uint_eq(sent_count(SENT_JOIN), 1);
        answer_join(0);
        grant_link(0);
        their_linked(dom, 2, 0);
        ck_assert_uint_eq(sent_count(SENT_READY), 0);
        ck_assert(!dom->ranks[0].ready);

        /* Rank 1 calls link: its pair with rank 0 joins here, it asks rank 2's daemon too. */
        domain_join_local(dom, 1, c1);
        ck_assert(dom->ranks[0].pairs[1].joined && dom->ranks[1].pairs[0].joined);
        ck_assert_uint_eq(sent_count(SENT_JOIN), 2);
        ck_assert_uint_eq(sent_nth(SENT_JOIN, 1)->src_rank, 1);
        answer_join(1);
        grant_link(1);
        ck_assert_uint_eq(sent_count(SENT_LINKED), 2);
        ck_assert_uint_eq(sent_nth(SENT_LINKED, 1)->src_rank, 1);
        ck_assert_uint_eq(sent_nth(SENT_LINKED, 1)->dst_rank, 2);
        their_linked(dom, 2, 1);

        /* Both local ranks are ready and say so (rank 0 first); rank 2 is not yet. */
        ck_assert_uint_eq(sent_count(SENT_READY), 2);
        ck_assert_uint_eq(sent_nth(SENT_READY, 0)->src_rank, 0);
        ck_assert_uint_eq(sent_nth(SENT_READY, 1)->src_rank, 1);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        their_ready(dom, 2);
        ck_assert_int_eq(dom->state, DOMAIN_OK);

        /* The remote pairs' links came from the answers, the local pair's links are real. */
        ck_assert_uint_eq(sent_count(SENT_LINK_MAKE), 2);
        ck_assert_ptr_nonnull(link_find(c0, 200));
        ck_assert_ptr_nonnull(link_find(c1, 100));
}
END_TEST

/* We are the daemon asked: rank 1's daemon asks whether our rank 0 joined. */
START_TEST(test_answer_join)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("asked", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        DomainJoinMsg m = their_join(dom);
        Sent *s;

        domain_peer_on_join(reg, them, 5, &m);
        s = sent_nth(SENT_JOIN_ANSWER, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert(s->flag);
        ck_assert_uint_eq(s->dst_domain_id, dom->id);
        ck_assert(dom->ranks[0].pairs[1].joined);
        ck_assert_uint_eq(dom->ranks[1].domain_id, THEIR_DOMAIN);
        ck_assert(dom->ranks[1].ever_joined);
        /* The pair joined: our cluster asks for its link. */
        ck_assert_uint_eq(sent_count(SENT_LINK_ASK), 1);

        /* Asked again (a retry): the same answer, nothing more happens. */
        domain_peer_on_join(reg, them, 6, &m);
        ck_assert_uint_eq(sent_count(SENT_JOIN_ANSWER), 2);
        ck_assert(sent_nth(SENT_JOIN_ANSWER, 1)->flag);
        ck_assert_uint_eq(sent_count(SENT_LINK_ASK), 1);

        /* A domain nobody here linked yet: not joined, ask again. */
        m.comm_name = "other";
        domain_peer_on_join(reg, them, 7, &m);
        ck_assert(!sent_nth(SENT_JOIN_ANSWER, 2)->flag);
        ck_assert_uint_eq(sent_nth(SENT_JOIN_ANSWER, 2)->dst_domain_id, 0);
}
END_TEST

/* ---- leaving and losing ---- */

START_TEST(test_their_leave)
{
        Domain *dom = form_two();
        DomainQueryResult q;
        Error err = ERROR_INIT;

        domain_peer_on_leave(reg, them,
                             &(DomainLeaveMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = 1,
                                               .status = STATUS_LINK_FAILED,
                                               .detail = "unlinked"});
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_int_eq(dom->fail_code, STATUS_LINK_FAILED);
        ck_assert_ptr_nonnull(strstr(dom->reason, "rank 1 (cluster 200 at 10.0.0.2:7400) left"));
        ck_assert_ptr_nonnull(strstr(dom->reason, "unlinked"));
        ck_assert_uint_eq(reg->failed, 1);
        /* Our member tells the other daemon that it leaves too, with the same status. */
        ck_assert_uint_eq(sent_count(SENT_LEAVE), 1);
        ck_assert_uint_eq(sent_nth(SENT_LEAVE, 0)->src_rank, 0);
        ck_assert_int_eq(sent_nth(SENT_LEAVE, 0)->status, STATUS_LINK_FAILED);
        ck_assert_uint_eq(sent_nth(SENT_LEAVE, 0)->dst_domain_id, THEIR_DOMAIN);
        /* The client sees FAILED with the status and the reason. */
        ck_assert_int_eq(domain_handle_query(reg, dom->ranks[0].cluster, dom->id, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_FAILED);
        ck_assert_int_eq(q.failure, STATUS_LINK_FAILED);
        ck_assert_str_eq(q.reason, dom->reason);
}
END_TEST

/* A member leaves while our pair link is granted but not made: it is given back. */
START_TEST(test_leave_while_linking)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("two", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});

        answer_join(0);
        grant_link(0);
        ck_assert_uint_eq(sent_count(SENT_LINK_GIVE_BACK), 0);
        domain_peer_on_leave(reg, them,
                             &(DomainLeaveMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = 1,
                                               .status = STATUS_PEER_LOST,
                                               .detail = "detached"});
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_int_eq(dom->fail_code, STATUS_PEER_LOST);
        ck_assert_uint_eq(sent_count(SENT_LINK_GIVE_BACK), 1);
        ck_assert_ptr_eq(sent_nth(SENT_LINK_GIVE_BACK, 0)->peer, them);
        ck_assert_uint_eq(sent_count(SENT_LINK_MAKE), 0);
        ck_assert_ptr_null(link_find(c0, 200));
}
END_TEST

START_TEST(test_our_unlink)
{
        Domain *dom = form_two();
        Cluster *c0 = dom->ranks[0].cluster;
        uint64_t id = dom->id;
        Error err = ERROR_INIT;
        Sent *s;

        ck_assert_int_eq(domain_handle_unlink(reg, c0, id, &err), 0);
        s = sent_nth(SENT_LEAVE, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(s->src_domain_id, id);
        ck_assert_uint_eq(s->src_rank, 0);
        ck_assert_int_eq(s->status, STATUS_LINK_FAILED);
        ck_assert_ptr_nonnull(strstr(s->detail, "unlinked"));
        /* No member is left here: the domain is gone. */
        ck_assert_ptr_null(domain_find_id(reg, id));
        ck_assert_int_eq(domain_handle_unlink(reg, c0, id, &err), STATUS_PARAM_INVALID);
}
END_TEST

START_TEST(test_peer_lost)
{
        Domain *dom = form_two();

        them->state = PEER_CLOSED;
        domain_on_peer_lost(reg, them, STATUS_PEER_LOST);
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_int_eq(dom->fail_code, STATUS_PEER_LOST);
        ck_assert_ptr_nonnull(strstr(dom->reason, "the daemon of rank 1"));
        ck_assert_ptr_nonnull(strstr(dom->reason, "the connection to it was lost"));
        /* Nobody to tell. */
        ck_assert_uint_eq(sent_count(SENT_LEAVE), 0);
}
END_TEST

/* A peer lost before any pair with it joined only delays the set-up. */
START_TEST(test_peer_lost_before_join)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("early", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});

        /* The connection goes while our question is out: asked again once it is back. */
        them->state = PEER_CLOSED;
        domain_join_on_reply(sent_nth(SENT_JOIN, 0)->pair, them, STATUS_PEER_LOST, NULL, NULL);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        domain_on_peer_lost(reg, them, STATUS_PEER_LOST);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
}
END_TEST

START_TEST(test_formation_deadline)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("late", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});

        /* link_total_time passes with rank 1 never having called link. */
        event_active(dom->deadline, EV_TIMEOUT, 1);
        loop_once();
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_int_eq(dom->fail_code, STATUS_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(dom->reason, "rank 1 (cluster 200 at 10.0.0.2:7400) did not "
                                                  "call link"));
}
END_TEST

/* ---- what peers may not do ---- */

START_TEST(test_bad_notices)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("bad", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        uint64_t refused = fx.link.counters.peer_requests_refused;
        DomainXferMsg x = {.dst_domain_id = 999, .kind = 1, .src_domain_id = THEIR_DOMAIN};

        answer_join(0);

        /* An unknown domain, a wrong incarnation, a rank out of range, a rank of ours: each is
         * refused and changes nothing. */
        domain_peer_on_linked(reg, them,
                              &(DomainLinkedMsg){.dst_domain_id = 999,
                                                 .src_domain_id = THEIR_DOMAIN,
                                                 .src_rank = 1,
                                                 .dst_rank = 0});
        domain_peer_on_linked(reg, them,
                              &(DomainLinkedMsg){.dst_domain_id = dom->id,
                                                 .src_domain_id = THEIR_DOMAIN + 1,
                                                 .src_rank = 1,
                                                 .dst_rank = 0});
        domain_peer_on_linked(reg, them,
                              &(DomainLinkedMsg){.dst_domain_id = dom->id,
                                                 .src_domain_id = THEIR_DOMAIN,
                                                 .src_rank = 1,
                                                 .dst_rank = UINT32_MAX});
        ck_assert(!dom->ranks[0].pairs[1].in_done);
        domain_peer_on_ready(reg, them,
                             &(DomainReadyMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = 2});
        domain_peer_on_ready(reg, them,
                             &(DomainReadyMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = 0});
        ck_assert(!dom->ranks[0].ready && !dom->ranks[1].ready);
        domain_peer_on_leave(reg, them,
                             &(DomainLeaveMsg){.dst_domain_id = dom->id,
                                               .src_domain_id = THEIR_DOMAIN,
                                               .rank = 0,
                                               .status = STATUS_FAILED,
                                               .detail = ""});
        domain_lane_on_xfer(reg, them, &x);
        x.dst_domain_id = dom->id;
        x.src_rank = 5;
        domain_lane_on_xfer(reg, them, &x);
        ck_assert_uint_eq(fx.link.counters.peer_requests_refused, refused + 8);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        ck_assert_uint_eq(sent_count(SENT_LEAVE), 0);
        ck_assert_uint_eq(sent_count(SENT_READY), 0);
}
END_TEST

START_TEST(test_bad_joins)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("joins", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        DomainJoinMsg good = their_join(dom), m;
        Sent *s;

        /* Malformed: a rank asking about itself, ranks past any domain, no domain id. */
        m = good, m.dst_rank = 1;
        domain_peer_on_join(reg, them, 1, &m);
        m = good, m.src_rank = DOMAIN_MAX_RANKS;
        domain_peer_on_join(reg, them, 2, &m);
        m = good, m.src_domain_id = 0;
        domain_peer_on_join(reg, them, 3, &m);
        /* Ranks that are not on the asked and the asking side. */
        m = good, m.src_rank = 0, m.dst_rank = 1;
        domain_peer_on_join(reg, them, 4, &m);
        ck_assert_uint_eq(sent_count(SENT_JOIN_REFUSE), 4);
        for (size_t i = 0; i < 4; i++)
                ck_assert_int_eq(sent_nth(SENT_JOIN_REFUSE, i)->status, STATUS_PROTOCOL_MISMATCH);
        ck_assert(!dom->ranks[0].pairs[1].joined);
        ck_assert_uint_eq(dom->ranks[1].domain_id, 0);

        /* Joined once; a second join as another incarnation of the domain is refused. */
        domain_peer_on_join(reg, them, 5, &good);
        ck_assert(sent_nth(SENT_JOIN_ANSWER, 0)->flag);
        m = good, m.src_domain_id = THEIR_DOMAIN + 1;
        domain_peer_on_join(reg, them, 6, &m);
        s = sent_nth(SENT_JOIN_REFUSE, 4);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(s->status, STATUS_PROTOCOL_MISMATCH);
        ck_assert_ptr_nonnull(strstr(s->detail, "another incarnation"));
        ck_assert_uint_eq(dom->ranks[1].domain_id, THEIR_DOMAIN);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);

        /* Another rank table fails the domain here (documented: the tables disagree). */
        m = good;
        m.digest_len = 3;
        domain_peer_on_join(reg, them, 7, &m);
        s = sent_nth(SENT_JOIN_REFUSE, 5);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(s->status, STATUS_PARAM_INVALID);
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_int_eq(dom->fail_code, STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(dom->reason, "the rank tables disagree"));

        /* A failed domain refuses with its own status. */
        domain_peer_on_join(reg, them, 8, &good);
        ck_assert_int_eq(sent_nth(SENT_JOIN_REFUSE, 6)->status, STATUS_PARAM_INVALID);

        /* A new incarnation of rank 1's domain (it linked again: a restart) is not refused by
         * our failure: "not yet", it waits until our member links again. So is one from a
         * restarted daemon (another node id), whatever its domain id. */
        m = good, m.src_domain_id = THEIR_DOMAIN + 7;
        domain_peer_on_join(reg, them, 9, &m);
        ck_assert_uint_eq(sent_count(SENT_JOIN_REFUSE), 7);
        s = sent_nth(SENT_JOIN_ANSWER, 1);
        ck_assert_ptr_nonnull(s);
        ck_assert(!s->flag);
        ck_assert_uint_eq(s->dst_domain_id, 0);
        dom->ranks[1].node_id = them->node_id + 1;
        domain_peer_on_join(reg, them, 10, &good);
        ck_assert_uint_eq(sent_count(SENT_JOIN_REFUSE), 7);
        ck_assert(!sent_nth(SENT_JOIN_ANSWER, 2)->flag);
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
}
END_TEST

/* Rank 1's daemon restarted and its member linked again before we noticed: whatever domain id
 * it asks with, the answer is "not yet", not a refusal; our domain is left as it is. */
START_TEST(test_join_restarted_daemon)
{
        Cluster *c0 = cluster(100);
        Domain *dom = domain_make("restart", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        DomainJoinMsg good = their_join(dom), m;

        domain_peer_on_join(reg, them, 1, &good);
        ck_assert(sent_nth(SENT_JOIN_ANSWER, 0)->flag);
        dom->ranks[1].node_id = them->node_id + 1;
        for (uint64_t k = 0; k < 2; k++) {
                m = good, m.src_domain_id = THEIR_DOMAIN + k;
                domain_peer_on_join(reg, them, 2 + k, &m);
                ck_assert(!sent_nth(SENT_JOIN_ANSWER, 1 + k)->flag);
        }
        ck_assert_uint_eq(sent_count(SENT_JOIN_REFUSE), 0);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        ck_assert_uint_eq(dom->ranks[1].domain_id, THEIR_DOMAIN);
}
END_TEST

/* ---- calls ---- */

static int replies;
static DomainReply last_reply;
static int32_t last_rets[4];

static int call_reply(Completion *done, const DomainReply *r)
{
        replies++;
        last_reply = *r;
        ck_assert_uint_le(r->n_rets, 4);
        if (r->n_rets > 0)
                memcpy(last_rets, r->rets, r->n_rets * sizeof(*r->rets));
        last_reply.rets = last_rets;
        last_reply.detail = NULL;
        return 0;
}

static int cpl_reply(Completion *cpl, const void *reply, int fd)
{
        ck_abort_msg("a domain call answers through its reply function");
        return 0;
}

static int cpl_fail(Completion *cpl, int status, const Error *err)
{
        ck_abort_msg("a batch send/recv answers with its per-item statuses");
        return 0;
}

static void cpl_drop(Completion *cpl)
{
}

static const CompletionOps cpl_ops = {.reply = cpl_reply, .fail = cpl_fail, .drop = cpl_drop};

/* A region of @c at client address 0x10000. */
static Region *region(Cluster *c)
{
        Region *r;

        ck_assert_int_eq(region_new_memfd("test-domain", 4096, 1, &r), 0);
        r->client_addr = 0x10000;
        clist_link_tail(&c->regions, &r->link_owner);
        return r;
}

/* Starts a batch of one send of 16 floats from rank 0 to rank 1. */
static void send_one(Domain *dom, Completion *done)
{
        DomainSendRecvItem it = {
                .addr = 0x10000, .count = 16, .dtype = KVD_DT_FLOAT, .remote_rank = 1};
        Error err = ERROR_INIT;

        ck_assert_int_eq(domain_handle_send_recv(reg, dom->ranks[0].cluster,
                                                 &(DomainSendRecvArgs){.comm_id = dom->id,
                                                                       .items = &it,
                                                                       .n_items = 1,
                                                                       .timeout_ms = 1000},
                                                 done, call_reply, &err),
                         COMPLETION_PENDING);
}

START_TEST(test_send_deadline)
{
        Domain *dom = form_two();
        Region *r = region(dom->ranks[0].cluster);
        Completion done = {.ops = &cpl_ops};
        DomainCall *call;
        Sent *s;

        replies = 0;
        send_one(dom, &done);
        /* A send waits for the receiver's READY; none comes before the deadline. */
        ck_assert_uint_eq(domain_calls_in_flight(reg), 1);
        call = clist_first_entry(&dom->calls, DomainCall, link_domain);
        event_active(call->timer, EV_TIMEOUT, 1);
        loop_once();
        loop_once();
        ck_assert_int_eq(replies, 1);
        ck_assert_int_eq(last_reply.status, STATUS_TIMEOUT);
        ck_assert_uint_eq(last_reply.n_rets, 1);
        ck_assert_int_eq(last_rets[0], STATUS_TIMEOUT);
        ck_assert_uint_eq(domain_calls_in_flight(reg), 0);
        /* The receiver hears that this message will not come. */
        s = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->xfer, XFER_SEND_CANCEL);
        ck_assert_uint_eq(s->dst_domain_id, THEIR_DOMAIN);
        ck_assert_int_eq(s->status, STATUS_TIMEOUT);
        /* The domain stays OK. */
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        clist_unlink(&r->link_owner);
        region_unref(r);
}
END_TEST

START_TEST(test_send_mismatch)
{
        Domain *dom = form_two();
        Region *r = region(dom->ranks[0].cluster);
        Completion done = {.ops = &cpl_ops};
        OpDesc theirs = {.op = OP_BATCH, .count = 8, .dtype = KVD_DT_FLOAT, .bytes = 32};
        DomainXferMsg ready = {
                .dst_domain_id = dom->id,
                .src_domain_id = THEIR_DOMAIN,
                .kind = XFER_READY,
                .src_rank = 0,
                .dst_rank = 1,
                .seq = 0,
                .desc = &theirs,
                .status = STATUS_OK,
                .detail = "",
        };
        Sent *s;

        replies = 0;
        send_one(dom, &done);
        /* The receiver is ready for 8 floats where we send 16: no byte moves. */
        domain_lane_on_xfer(reg, them, &ready);
        loop_once();
        ck_assert_int_eq(replies, 1);
        ck_assert_int_eq(last_reply.status, STATUS_PARAM_INVALID);
        ck_assert_int_eq(last_rets[0], STATUS_PARAM_INVALID);
        s = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->xfer, XFER_MISMATCH);
        ck_assert_int_eq(s->status, STATUS_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(s->detail, "rank 0 sends 16"));
        ck_assert_ptr_nonnull(strstr(s->detail, "rank 1 receives 8"));
        clist_unlink(&r->link_owner);
        region_unref(r);
}
END_TEST

/* ---- the data path: fake transports move the bytes ---- */

#define SEED_SRC 0x5e0d
#define SEED_DST 0xde57
#define SEED_RANK(r) (0x7a00 + (r))
/* The message of the data-path cases: 256 floats at byte 256 of a 4096-byte region, so that
 * bytes on both sides of it must stay as they were. */
#define MSG_OFF 256
#define MSG_COUNT 256
#define MSG_BYTES (MSG_COUNT * 4)

/* How one call was answered: the reply (batch send/recv, collectives) or the failure. */
typedef struct Answer {
        Completion cpl;
        unsigned n;
        int status;
        int32_t ret0;
        uint32_t algorithm;
        uint64_t bytes;
        char detail[ERROR_MSG_MAX];
} Answer;

static int answer_reply(Completion *done, const DomainReply *r)
{
        Answer *a = container_of(done, Answer, cpl);

        a->n++;
        a->status = r->status;
        a->ret0 = r->n_rets > 0 ? r->rets[0] : STATUS_OK;
        a->algorithm = r->algorithm;
        a->bytes = r->bytes;
        (void)snprintf(a->detail, sizeof(a->detail), "%s", r->detail ?: "");
        return 0;
}

static int answer_fail(Completion *done, int status, const Error *err)
{
        Answer *a = container_of(done, Answer, cpl);

        a->n++;
        a->status = status;
        (void)snprintf(a->detail, sizeof(a->detail), "%s", err ? err->msg : "");
        return 0;
}

static const CompletionOps answer_ops = {.reply = cpl_reply, .fail = answer_fail, .drop = cpl_drop};

static void answer_init(Answer *a)
{
        *a = (Answer){.cpl.ops = &answer_ops};
}

/* @a was answered once, with @status for the call and its one item. */
static void answered(const Answer *a, int status)
{
        ck_assert_uint_eq(a->n, 1);
        ck_assert_int_eq(a->status, status);
        ck_assert_int_eq(a->ret0, status);
}

/* A region of @c (see region()) holding the pattern @seed. */
static Region *pattern_region(Cluster *c, uint64_t seed)
{
        Region *r = region(c);

        harness_fill_pattern(r->data, r->size, seed);
        return r;
}

static void region_drop(Region *r)
{
        clist_unlink(&r->link_owner);
        region_unref(r);
}

/*
 * Checks every byte of @r: the pattern @seed, except [MSG_OFF, MSG_OFF + MSG_BYTES), which holds
 * bytes [@src_off, @src_off + MSG_BYTES) of the pattern @src_seed when @landed.
 */
static void check_region(const Region *r, uint64_t seed, bool landed, uint64_t src_seed,
                         uint64_t src_off)
{
        uint8_t *image = malloc(r->size);

        ck_assert_ptr_nonnull(image);
        harness_fill_pattern(image, r->size, seed);
        if (landed)
                harness_fill_pattern_at(image + MSG_OFF, MSG_BYTES, src_seed, src_off);
        for (size_t i = 0; i < r->size; i++)
                if (r->data[i] != image[i])
                        ck_abort_msg("byte %zu of the region is 0x%02x, expected 0x%02x", i,
                                     r->data[i], image[i]);
        free(image);
}

/* Starts a batch of one item of rank @me of @dom: the message, to or from rank @other. */
static void batch_one(Domain *dom, uint32_t me, uint32_t other, bool recv, Answer *a)
{
        DomainSendRecvItem it = {.addr = 0x10000 + MSG_OFF,
                                 .count = MSG_COUNT,
                                 .dtype = KVD_DT_FLOAT,
                                 .remote_rank = other,
                                 .recv = recv};
        Error err = ERROR_INIT;

        answer_init(a);
        ck_assert_int_eq(domain_handle_send_recv(reg, dom->ranks[me].cluster,
                                                 &(DomainSendRecvArgs){.comm_id = dom->id,
                                                                       .items = &it,
                                                                       .n_items = 1,
                                                                       .timeout_ms = 1000},
                                                 &a->cpl, answer_reply, &err),
                         COMPLETION_PENDING);
}

/* Two clusters of this daemon as ranks 0 and 1 of a domain, formed. */
static Domain *form_local(void)
{
        Domain *dom = domain_make("local", 2, (bool[]){true, true},
                                  (Cluster *[]){cluster(100), cluster(200)});

        ck_assert_int_eq(dom->state, DOMAIN_OK);
        return dom;
}

/* The receiver (rank 1, behind the peer) says @kind about our message @seq (a READY describes
 * MSG_COUNT floats). */
static void their_word(Domain *dom, XferKind kind, uint64_t seq, int status)
{
        OpDesc theirs = {
                .op = OP_BATCH, .count = MSG_COUNT, .dtype = KVD_DT_FLOAT, .bytes = MSG_BYTES};

        domain_lane_on_xfer(reg, them,
                            &(DomainXferMsg){.dst_domain_id = dom->id,
                                             .src_domain_id = THEIR_DOMAIN,
                                             .kind = kind,
                                             .src_rank = 0,
                                             .dst_rank = 1,
                                             .seq = seq,
                                             .desc = kind == XFER_READY ? &theirs : NULL,
                                             .status = status,
                                             .detail = ""});
}

START_TEST(test_local_pair)
{
        Domain *dom = form_local();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        Region *dst = pattern_region(dom->ranks[1].cluster, SEED_DST);
        Answer s, r;
        TransportJob *job;

        batch_one(dom, 1, 0, true, &r);
        ck_assert_uint_eq(fx.shm->n_submitted, 0);
        batch_one(dom, 0, 1, false, &s);
        /* Matched on the lane: one copy of the message's bytes, nothing for the peer. */
        ck_assert_uint_eq(fx.shm->n_jobs, 1);
        job = fake_transport_job(fx.shm, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_ptr_null(job->channel);
        ck_assert_uint_eq(fake_transport_job_bytes(job), MSG_BYTES);
        loop_once();
        ck_assert_uint_eq(s.n + r.n, 0); /* nothing completes while a byte may still move */
        fake_transport_complete(fx.shm, job, 0);
        loop_once();
        answered(&s, STATUS_OK);
        answered(&r, STATUS_OK);
        check_region(dst, SEED_DST, true, SEED_SRC, MSG_OFF);
        check_region(src, SEED_SRC, false, 0, 0);
        ck_assert_uint_eq(dom->counters.bytes_sent, MSG_BYTES);
        ck_assert_uint_eq(dom->counters.bytes_received, MSG_BYTES);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        ck_assert_uint_eq(n_sent, 0);
        ck_assert_uint_eq(domain_calls_in_flight(reg), 0);
        region_drop(src);
        region_drop(dst);
}
END_TEST

START_TEST(test_local_copy_fails)
{
        Domain *dom = form_local();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        Region *dst = pattern_region(dom->ranks[1].cluster, SEED_DST);
        Answer s, r;

        batch_one(dom, 0, 1, false, &s);
        batch_one(dom, 1, 0, true, &r);
        ck_assert_uint_eq(fx.shm->n_jobs, 1);
        /* The copy stops (documented in domain-lane.c: neither end gave up, so FAILED). */
        fake_transport_complete(fx.shm, fake_transport_job(fx.shm, 0), -EIO);
        loop_once();
        answered(&s, STATUS_FAILED);
        answered(&r, STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(r.detail, "the copy stopped"));
        check_region(dst, SEED_DST, false, 0, 0);
        ck_assert_uint_eq(dom->counters.bytes_received, 0);
        region_drop(src);
        region_drop(dst);
}
END_TEST

START_TEST(test_local_recv_deadline)
{
        Domain *dom = form_local();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        Region *dst = pattern_region(dom->ranks[1].cluster, SEED_DST);
        DomainCall *call;
        Answer s, r;

        batch_one(dom, 1, 0, true, &r);
        call = clist_first_entry(&dom->calls, DomainCall, link_domain);
        event_active(call->timer, EV_TIMEOUT, 1);
        loop_once();
        loop_once();
        answered(&r, STATUS_TIMEOUT);
        /* The late sender fails with the receiver's TIMEOUT, as it would on another daemon,
         * and no byte moves. */
        batch_one(dom, 0, 1, false, &s);
        loop_once();
        answered(&s, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.shm->n_submitted, 0);
        check_region(dst, SEED_DST, false, 0, 0);
        ck_assert_uint_eq(domain_calls_in_flight(reg), 0);
        region_drop(src);
        region_drop(dst);
}
END_TEST

START_TEST(test_remote_send)
{
        Domain *dom = form_two();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        uint8_t stream[MSG_BYTES];
        TransportJob *job;
        Answer s;

        batch_one(dom, 0, 1, false, &s);
        /* Nothing moves before the receiver's READY. */
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        their_word(dom, XFER_READY, 0, STATUS_OK);
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_ptr_eq(job->channel, them->data);
        /* The id the receiver registered its job under. */
        ck_assert_uint_eq(job->id, domain_lane_job_id(THEIR_DOMAIN, 0, 1, 0));
        ck_assert_int_eq(fake_transport_gather(job, stream, sizeof(stream)), 0);
        ck_assert_int_eq(harness_check_pattern_at(stream, sizeof(stream), SEED_SRC, MSG_OFF), -1);
        fake_transport_complete(fx.tcp, job, 0);
        loop_once();
        /* Sent; the op completes on the receiver's DONE. */
        ck_assert_uint_eq(s.n, 0);
        their_word(dom, XFER_DONE, 0, STATUS_OK);
        loop_once();
        answered(&s, STATUS_OK);
        /* Over TCP the sender says nothing when all goes well. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 0);
        ck_assert_uint_eq(fx.tcp->n_abandoned, 0);
        check_region(src, SEED_SRC, false, 0, 0);
        ck_assert_uint_eq(dom->counters.bytes_sent, MSG_BYTES);
        region_drop(src);
}
END_TEST

START_TEST(test_remote_send_fails)
{
        Domain *dom = form_two();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        Answer s;

        batch_one(dom, 0, 1, false, &s);
        their_word(dom, XFER_READY, 0, STATUS_OK);
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        /* The connection breaks under the job: transport_status_from_errno() says PEER_LOST. */
        fake_transport_complete(fx.tcp, fake_transport_job(fx.tcp, 0), -ECONNRESET);
        loop_once();
        answered(&s, STATUS_PEER_LOST);
        ck_assert_ptr_nonnull(strstr(s.detail, "sending to rank 1 failed"));
        /* The receiver's job ends with the same connection: no word, no abort. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 0);
        ck_assert_uint_eq(fx.tcp->n_abandoned, 0);
        check_region(src, SEED_SRC, false, 0, 0);
        region_drop(src);
}
END_TEST

/* Rank 0 receives the message from rank 1 behind the peer: returns its data job. */
static TransportJob *remote_recv(Domain *dom, uint64_t seq, Answer *r)
{
        TransportJob *job;
        Sent *w;

        batch_one(dom, 0, 1, true, r);
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_ptr_eq(job->channel, them->data);
        ck_assert_uint_eq(job->id, domain_lane_job_id(dom->id, 1, 0, seq));
        ck_assert_uint_eq(fake_transport_job_bytes(job), MSG_BYTES);
        /* The job exists before the READY that lets the sender start. */
        w = sent_nth(SENT_XFER, sent_count(SENT_XFER) - 1);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_READY);
        ck_assert_uint_eq(w->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(w->src_domain_id, dom->id);
        ck_assert_uint_eq(w->src_rank, 1);
        ck_assert_uint_eq(w->dst_rank, 0);
        ck_assert_uint_eq(w->seq, seq);
        ck_assert_uint_eq(w->desc.op, OP_BATCH);
        ck_assert_uint_eq(w->desc.count, MSG_COUNT);
        ck_assert_uint_eq(w->desc.bytes, MSG_BYTES);
        return job;
}

START_TEST(test_remote_recv)
{
        Domain *dom = form_two();
        Region *dst = pattern_region(dom->ranks[0].cluster, SEED_DST);
        uint8_t stream[MSG_BYTES];
        TransportJob *job;
        Answer r;
        Sent *w;

        job = remote_recv(dom, 0, &r);
        harness_fill_pattern(stream, sizeof(stream), SEED_SRC);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        /* Every byte landed: DONE tells the sender. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 2);
        w = sent_nth(SENT_XFER, 1);
        ck_assert_uint_eq(w->xfer, XFER_DONE);
        ck_assert_uint_eq(w->seq, 0);
        ck_assert_int_eq(w->status, STATUS_OK);
        loop_once();
        answered(&r, STATUS_OK);
        check_region(dst, SEED_DST, true, SEED_SRC, 0);
        ck_assert_uint_eq(dom->counters.bytes_received, MSG_BYTES);
        region_drop(dst);
}
END_TEST

START_TEST(test_remote_recv_fails)
{
        static const struct {
                int error, status;
        } cases[] = {
                /* transport_status_from_errno(): a broken connection, a bad CRC32C. */
                {-ECONNRESET, STATUS_PEER_LOST},
                {-EILSEQ, STATUS_FAILED},
        };
        Domain *dom = form_two();
        Region *dst = pattern_region(dom->ranks[0].cluster, SEED_DST);

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                TransportJob *job;
                Answer r;
                Sent *w;

                job = remote_recv(dom, i, &r);
                fake_transport_complete(fx.tcp, job, cases[i].error);
                /* The sender hears the same status in DONE. */
                w = sent_nth(SENT_XFER, sent_count(SENT_XFER) - 1);
                ck_assert_uint_eq(w->xfer, XFER_DONE);
                ck_assert_uint_eq(w->seq, i);
                ck_assert_int_eq(w->status, cases[i].status);
                ck_assert_str_eq(w->detail, "the bytes did not land");
                loop_once();
                answered(&r, cases[i].status);
                ck_assert_ptr_nonnull(strstr(r.detail, "receiving from rank 1 failed"));
                check_region(dst, SEED_DST, false, 0, 0);
        }
        ck_assert_uint_eq(dom->counters.bytes_received, 0);
        region_drop(dst);
}
END_TEST

START_TEST(test_remote_recv_deadline)
{
        Domain *dom = form_two();
        Region *dst = pattern_region(dom->ranks[0].cluster, SEED_DST);
        DomainCall *call;
        TransportJob *job;
        Answer r;
        Sent *w;

        job = remote_recv(dom, 0, &r);
        call = clist_first_entry(&dom->calls, DomainCall, link_domain);
        event_active(call->timer, EV_TIMEOUT, 1);
        loop_once();
        /* The sender hears that the receiver gave up, and the job is stopped... */
        w = sent_nth(SENT_XFER, 1);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_RECV_CANCEL);
        ck_assert_int_eq(w->status, STATUS_TIMEOUT);
        ck_assert_uint_eq(fx.tcp->n_cancelled, 1);
        ck_assert_ptr_eq(fx.tcp->last_cancelled, job);
        /* ...but the call waits until the transport let go of its memory. */
        loop_once();
        ck_assert_uint_eq(r.n, 0);
        fake_transport_complete(fx.tcp, job, -ECANCELED);
        loop_once();
        answered(&r, STATUS_TIMEOUT);
        ck_assert_uint_eq(sent_count(SENT_XFER), 2);
        check_region(dst, SEED_DST, false, 0, 0);
        ck_assert_uint_eq(domain_calls_in_flight(reg), 0);
        region_drop(dst);
}
END_TEST

/* ---- the data path over RDMA: registrations, READY's segments, WRITEs ---- */

/* What the link's RDMA channel to the other daemon points at. */
static char channel_token;
#define RDMA_CHANNEL ((TransportChannel *)&channel_token)

/*
 * Rank 0 here (cluster 100), rank 1 behind the other daemon, formed to OK over RDMA both ways:
 * our pair link's transport connected on RDMA_CHANNEL (our sends WRITE over it), and rank 1 said
 * its side runs over RDMA (our receives register for its WRITEs). The transport set's RDMA
 * transport is the RDMA-like fake.
 */
static Domain *form_rdma(void)
{
        Cluster *c0 = cluster(100);
        Domain *dom;
        Sent *s;

        fx.transports.table[TRANSPORT_ROLE_DIRECT] = &rdma_fake->transport;
        dom = domain_make("rdma", 2, (bool[]){true, false}, (Cluster *[]){c0, NULL});
        answer_join(0);
        grant_link_over(0, RDMA_CHANNEL);
        s = sent_nth(SENT_LINKED, 0);
        ck_assert_ptr_nonnull(s);
        ck_assert(s->flag); /* our messages to rank 1 go as WRITEs */
        their_linked_over(dom, 1, 0, true);
        their_ready(dom, 1);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        ck_assert(dom->lanes[0][1]->direct);
        ck_assert(dom->lanes[1][0]->direct);
        /* From here on, what the data path did. */
        n_sent = 0;
        rdma_fake->n_device_info = 0;
        return dom;
}

/* The sender (rank 1, behind the peer) says @kind about its message @seq to our rank 0. */
static void their_send_word(Domain *dom, XferKind kind, uint64_t seq, int status)
{
        domain_lane_on_xfer(reg, them,
                            &(DomainXferMsg){.dst_domain_id = dom->id,
                                             .src_domain_id = THEIR_DOMAIN,
                                             .kind = kind,
                                             .src_rank = 1,
                                             .dst_rank = 0,
                                             .seq = seq,
                                             .status = status,
                                             .detail = ""});
}

static void write_done(TransportJob *job, int status)
{
}

/* Rank 0 receives the message over RDMA; returns the READY it sent (checked for its shape). */
static Sent *rdma_recv(Domain *dom, uint64_t seq, Answer *r)
{
        Sent *w;

        batch_one(dom, 0, 1, true, r);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0); /* no stream to read */
        w = sent_nth(SENT_XFER, sent_count(SENT_XFER) - 1);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_READY);
        ck_assert_uint_eq(w->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(w->src_rank, 1);
        ck_assert_uint_eq(w->dst_rank, 0);
        ck_assert_uint_eq(w->seq, seq);
        ck_assert_uint_eq(w->desc.bytes, MSG_BYTES);
        ck_assert(w->direct);
        return w;
}

START_TEST(test_rdma_recv)
{
        Domain *dom = form_rdma();
        Cluster *c0 = dom->ranks[0].cluster;
        Region *dst = pattern_region(c0, SEED_DST);
        uint8_t src[MSG_BYTES];
        TransportSegment seg;
        Region src_region;
        TransportRegion *mr;
        const FakeRegion *fr;
        TransportJob job;
        Answer r;
        Sent *w;

        w = rdma_recv(dom, 0, &r);
        /* The device of rank 0's cluster was asked whether it takes WRITEs, and the destination
         * is registered on it for remote write, exactly the message's bytes... */
        ck_assert_uint_eq(rdma_fake->n_device_info, 1);
        ck_assert_int_eq(rdma_fake->device_info_id, c0->device_id);
        ck_assert_uint_eq(rdma_fake->n_regions, 1);
        fr = &rdma_fake->regions[0];
        ck_assert(fr->live);
        ck_assert(fr->remote_write);
        ck_assert_ptr_eq(fr->addr, dst->data + MSG_OFF);
        ck_assert_uint_eq(fr->len, MSG_BYTES);
        ck_assert_int_eq(fr->device_id, c0->device_id);
        ck_assert_ptr_null(fr->channel);
        /* ...before the READY that names it with its remote key. */
        ck_assert_uint_eq(w->live_regions, 1);
        ck_assert_uint_eq(w->n_descs, 1);
        ck_assert_uint_eq(w->remotes[0].addr, (uint64_t)(uintptr_t)(dst->data + MSG_OFF));
        ck_assert_uint_eq(w->remotes[0].len, MSG_BYTES);
        ck_assert_uint_eq(w->remotes[0].key, fr->key.rkey);
        ck_assert_uint_eq(w->remotes[0].key, FAKE_TRANSPORT_RKEY);

        /* The sender's WRITE with what the READY named lands (the fake checks the keys). */
        harness_fill_pattern(src, sizeof(src), SEED_SRC);
        ck_assert_int_eq(transport_region_register(&rdma_fake->transport, 0, NULL, src, sizeof(src),
                                                   false, &mr),
                         0);
        src_region = (Region){.data = src, .size = sizeof(src)};
        seg = (TransportSegment){.region = &src_region, .len = sizeof(src), .lkey = mr->key.lkey};
        transport_segment_set_remote(&seg, &w->remotes[0], 0);
        job = (TransportJob){.dir = TRANSPORT_WRITE, .segs = &seg, .n_segs = 1, .done = write_done};
        ck_assert_int_eq(transport_submit(&rdma_fake->transport, &job), 0);
        fake_transport_complete(rdma_fake, &job, 0);
        ck_assert_int_eq(job.error, 0);
        mr = transport_region_free(mr);
        loop_once();
        ck_assert_uint_eq(r.n, 0); /* bytes land unseen: the receiver waits for WRITTEN */

        their_send_word(dom, XFER_WRITTEN, 0, STATUS_OK);
        /* Deregistered before DONE goes out. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 2);
        w = sent_nth(SENT_XFER, 1);
        ck_assert_uint_eq(w->xfer, XFER_DONE);
        ck_assert_uint_eq(w->seq, 0);
        ck_assert_int_eq(w->status, STATUS_OK);
        ck_assert_uint_eq(w->live_regions, 0);
        loop_once();
        answered(&r, STATUS_OK);
        check_region(dst, SEED_DST, true, SEED_SRC, 0);
        ck_assert_uint_eq(dom->counters.bytes_received, MSG_BYTES);
        ck_assert_uint_eq(dom->lanes[1][0]->n_direct_msgs, 1);
        region_drop(dst);
}
END_TEST

/* A buffer of the other daemon that rank 1's receive names in its READY. */
static uint8_t their_buf[4096];

/* Where rank 1's READY asks for the message: three spans of their_buf with holes between them,
 * as a receive into scattered blocks names them. */
typedef struct Span {
        uint64_t off, len;
} Span;

static const Span their_spans[] = {{64, 100}, {400, 500}, {1200, MSG_BYTES - 600}};

/* Registers @spans of their_buf (seeded SEED_DST) for remote write, as rank 1's daemon would,
 * in @mrs. */
static void their_register(const Span *spans, size_t n, TransportRegion **mrs)
{
        harness_fill_pattern(their_buf, sizeof(their_buf), SEED_DST);
        for (size_t k = 0; k < n; k++)
                ck_assert_int_eq(transport_region_register(&rdma_fake->transport, 7, NULL,
                                                           their_buf + spans[k].off, spans[k].len,
                                                           true, &mrs[k]),
                                 0);
}

static void their_deregister(TransportRegion **mrs, size_t n)
{
        for (size_t k = 0; k < n; k++)
                mrs[k] = transport_region_free(mrs[k]);
}

/* Rank 1 is ready for our message @seq (described as @desc; NULL: the batch message) over
 * RDMA, into @spans registered in @mrs. */
static void their_rdma_ready(Domain *dom, uint64_t seq, const OpDesc *desc, const Span *spans,
                             size_t n, TransportRegion **mrs)
{
        OpDesc theirs = desc ? *desc
                             : (OpDesc){.op = OP_BATCH,
                                        .count = MSG_COUNT,
                                        .dtype = KVD_DT_FLOAT,
                                        .bytes = MSG_BYTES};
        LaneDesc *descs = calloc(n, sizeof(*descs)); /* the handler's to free */

        ck_assert_ptr_nonnull(descs);
        for (size_t k = 0; k < n; k++) {
                TransportDesc d;

                ck_assert_int_eq(
                        transport_region_desc(mrs[k], their_buf + spans[k].off, spans[k].len, &d),
                        0);
                descs[k].len = d.len;
                memcpy(descs[k].bytes, d.bytes, d.len);
        }
        domain_lane_on_xfer(reg, them,
                            &(DomainXferMsg){.dst_domain_id = dom->id,
                                             .src_domain_id = THEIR_DOMAIN,
                                             .kind = XFER_READY,
                                             .src_rank = 0,
                                             .dst_rank = 1,
                                             .seq = seq,
                                             .desc = &theirs,
                                             .status = STATUS_OK,
                                             .detail = "",
                                             .direct = true,
                                             .descs = descs,
                                             .n_descs = n});
}

/* Checks every byte of their_buf: SEED_DST, except that @spans hold @stream in span order when
 * it is not NULL. */
static void check_their_buf(const Span *spans, size_t n, const uint8_t *stream)
{
        uint8_t image[sizeof(their_buf)];
        uint64_t at = 0;

        harness_fill_pattern(image, sizeof(image), SEED_DST);
        for (size_t k = 0; stream && k < n; k++) {
                memcpy(image + spans[k].off, stream + at, spans[k].len);
                at += spans[k].len;
        }
        for (size_t i = 0; i < sizeof(image); i++)
                if (their_buf[i] != image[i])
                        ck_abort_msg("byte %zu of the receiver's buffer is 0x%02x, expected 0x%02x",
                                     i, their_buf[i], image[i]);
}

/* Our send's WRITE job, checked: our source registered on the channel, paired with @spans. */
static TransportJob *rdma_send_job(const Region *src, const Span *spans, size_t n,
                                   TransportRegion **mrs)
{
        const FakeRegion *ours = &rdma_fake->regions[n];
        TransportJob *job;
        uint64_t at = 0;
        Sent *c;

        /* Our source: registered after theirs, on the link's channel, for local access. */
        ck_assert_uint_eq(rdma_fake->n_regions, n + 1);
        ck_assert(ours->live);
        ck_assert(!ours->remote_write);
        ck_assert_ptr_eq(ours->channel, RDMA_CHANNEL);
        ck_assert_ptr_eq(ours->addr, src->data + MSG_OFF);
        ck_assert_uint_eq(ours->len, MSG_BYTES);
        /* The channel was asked to have its paths connected first. */
        c = sent_nth(SENT_CHANNEL_READY, 0);
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_eq(c->peer, them);
        ck_assert_ptr_eq(c->channel, RDMA_CHANNEL);
        /* One job: a WRITE per span, our bytes in stream order. */
        ck_assert_uint_eq(rdma_fake->n_jobs, 1);
        job = fake_transport_job(rdma_fake, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_ptr_eq(job->channel, RDMA_CHANNEL);
        ck_assert_uint_eq(job->n_segs, n);
        for (size_t k = 0; k < n; k++) {
                const TransportSegment *seg = &job->segs[k];

                ck_assert_ptr_eq(seg->region, src);
                ck_assert_uint_eq(seg->offset, MSG_OFF + at);
                ck_assert_uint_eq(seg->len, spans[k].len);
                ck_assert_uint_eq(seg->remote, (uint64_t)(uintptr_t)(their_buf + spans[k].off));
                ck_assert_uint_eq(seg->lkey, ours->key.lkey);
                ck_assert_uint_eq(seg->rkey, mrs[k]->key.rkey);
                at += spans[k].len;
        }
        ck_assert_uint_eq(at, MSG_BYTES);
        return job;
}

#define N_SPANS ARRAY_SIZE(their_spans)

/*
 * Our rank 0 sends the batch message to rank 1, which registers their_spans (in @mrs) and READYs
 * over RDMA; until the READY nothing of ours is registered and the channel is not asked. From
 * the READY on, our registrations fail with @register_error (0: they do not).
 */
static void rdma_send_readied(Domain *dom, Answer *s, TransportRegion **mrs, int register_error)
{
        batch_one(dom, 0, 1, false, s);
        their_register(their_spans, N_SPANS, mrs);
        ck_assert_uint_eq(rdma_fake->n_regions, N_SPANS);
        ck_assert_uint_eq(sent_count(SENT_CHANNEL_READY), 0);
        rdma_fake->register_error = register_error;
        their_rdma_ready(dom, 0, NULL, their_spans, N_SPANS, mrs);
}

START_TEST(test_rdma_send)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        uint8_t stream[MSG_BYTES];
        TransportJob *job;
        Answer s;
        Sent *w;

        rdma_send_readied(dom, &s, mrs, 0);
        job = rdma_send_job(src, their_spans, N_SPANS, mrs);
        ck_assert_uint_eq(sent_count(SENT_XFER), 0);
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);

        fake_transport_complete(rdma_fake, job, 0);
        /* Every WRITE completed: our registration goes, then WRITTEN tells the receiver. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_uint_eq(w->xfer, XFER_WRITTEN);
        ck_assert_uint_eq(w->dst_domain_id, THEIR_DOMAIN);
        ck_assert_uint_eq(w->src_rank, 0);
        ck_assert_uint_eq(w->dst_rank, 1);
        ck_assert_uint_eq(w->seq, 0);
        ck_assert_int_eq(w->status, STATUS_OK);
        ck_assert_uint_eq(w->live_regions, N_SPANS);
        loop_once();
        ck_assert_uint_eq(s.n, 0); /* the receiver's DONE completes it */
        their_word(dom, XFER_DONE, 0, STATUS_OK);
        loop_once();
        answered(&s, STATUS_OK);
        harness_fill_pattern_at(stream, sizeof(stream), SEED_SRC, MSG_OFF);
        check_their_buf(their_spans, N_SPANS, stream);
        check_region(src, SEED_SRC, false, 0, 0);
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        ck_assert_uint_eq(sent_count(SENT_CHANNEL_REPAIR), 0);
        ck_assert_uint_eq(dom->counters.bytes_sent, MSG_BYTES);
        ck_assert_uint_eq(dom->lanes[0][1]->n_direct_msgs, 1);
        their_deregister(mrs, N_SPANS);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_send_bad_ready)
{
        /* READYs whose segments do not cover the message exactly: short, long. */
        static const Span spans[][3] = {
                {{64, 100}, {400, 500}, {1200, MSG_BYTES - 624}},
                {{64, 100}, {400, 500}, {1200, MSG_BYTES - 576}},
        };
        static const char *const named[] = {"names 1000 bytes", "names 1048 bytes"};
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);

        for (size_t i = 0; i < ARRAY_SIZE(spans); i++) {
                TransportRegion *mrs[3];
                Answer s;
                Sent *w;

                batch_one(dom, 0, 1, false, &s);
                their_register(spans[i], 3, mrs);
                their_rdma_ready(dom, i, NULL, spans[i], 3, mrs);
                loop_once();
                /* PROTOCOL_MISMATCH (domain_lane_direct_send_prepare()): nothing is registered
                 * or written... */
                answered(&s, STATUS_PROTOCOL_MISMATCH);
                ck_assert_ptr_nonnull(strstr(s.detail, named[i]));
                ck_assert_ptr_nonnull(strstr(s.detail, "for a message of 1024"));
                ck_assert_uint_eq(rdma_fake->n_submitted, 0);
                ck_assert_uint_eq(rdma_fake->n_regions, 3 * (i + 1)); /* theirs only */
                ck_assert_uint_eq(sent_count(SENT_CHANNEL_READY), 0);
                check_their_buf(spans[i], 3, NULL);
                /* ...and the receiver hears it, to let go of its registration. */
                w = sent_nth(SENT_XFER, sent_count(SENT_XFER) - 1);
                ck_assert_ptr_nonnull(w);
                ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
                ck_assert_uint_eq(w->seq, i);
                ck_assert_int_eq(w->status, STATUS_PROTOCOL_MISMATCH);
                ck_assert_uint_eq(sent_count(SENT_XFER), i + 1);
                their_deregister(mrs, 3);
        }
        check_region(src, SEED_SRC, false, 0, 0);
        region_drop(src);
}
END_TEST

/* A descriptor of @len bytes at @bytes, as a READY carries it. */
static LaneDesc lane_desc(const void *bytes, size_t len)
{
        LaneDesc d = {.len = len};

        memcpy(d.bytes, bytes, MIN(len, sizeof(d.bytes)));
        return d;
}

START_TEST(test_direct_send_bad_descs)
{
        /*
         * READYs of a direct lane whose descriptors are not what the sender's transport packs,
         * or are too few or too many for the message: each is refused as a READY whose lengths
         * do not add up (PROTOCOL_MISMATCH), before anything of ours is registered or a byte is
         * written. their_spans are registered for real, so a write that went out anyway would
         * land in their_buf, which stays as it was.
         */
        enum { GOOD, BAD_TAG, SHORT, LONG, OVERSIZE, WRAPS, NONE, TOO_FEW, TOO_MANY, _N_CASES };
        static const char *const named[_N_CASES] = {
                [BAD_TAG] = "no fake-rdma descriptor (segment 1 of 3)",
                [SHORT] = "no fake-rdma descriptor (segment 2 of 3)",
                [LONG] = "no fake-rdma descriptor (segment 0 of 3)",
                [OVERSIZE] = "no fake-rdma descriptor (segment 1 of 3)",
                [WRAPS] = "no fake-rdma descriptor (segment 2 of 3)",
                [NONE] = "names 0 bytes",
                [TOO_FEW] = "names 600 bytes",
                [TOO_MANY] = "names 1124 bytes",
        };
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        size_t n_msgs = 0;

        their_register(their_spans, N_SPANS, mrs);
        for (size_t i = BAD_TAG; i < _N_CASES; i++) {
                LaneDesc descs[N_SPANS + 1], *copy;
                size_t n = N_SPANS;
                Answer s;
                Sent *w;

                /* Good descriptors of their_spans, then the case's damage. */
                for (size_t k = 0; k < N_SPANS + 1; k++) {
                        TransportDesc d;

                        ck_assert_int_eq(
                                transport_region_desc(mrs[k % N_SPANS],
                                                      their_buf + their_spans[k % N_SPANS].off,
                                                      their_spans[k % N_SPANS].len, &d),
                                0);
                        descs[k] = lane_desc(d.bytes, d.len);
                }
                switch (i) {
                case BAD_TAG:
                        descs[1].bytes[0] ^= 0xff;
                        break;
                case SHORT:
                        descs[2].len--;
                        break;
                case LONG:
                        descs[0].len++;
                        break;
                case OVERSIZE:
                        /* Longer than any descriptor: the codec keeps only its length. */
                        descs[1].len = TRANSPORT_DESC_MAX + 8;
                        break;
                case WRAPS:
                        /* An address whose span wraps past the end of memory. */
                        memset(descs[2].bytes + 1, 0xff, 8);
                        break;
                case NONE:
                        n = 0;
                        break;
                case TOO_FEW:
                        n = 1 + 1; /* 100 + 500 of the message's 1024 bytes */
                        break;
                case TOO_MANY:
                        n = N_SPANS + 1; /* the first span once more */
                        break;
                }
                copy = calloc(n ? n : 1, sizeof(*copy)); /* the handler's to free */
                ck_assert_ptr_nonnull(copy);
                memcpy(copy, descs, n * sizeof(*copy));

                batch_one(dom, 0, 1, false, &s);
                domain_lane_on_xfer(reg, them,
                                    &(DomainXferMsg){.dst_domain_id = dom->id,
                                                     .src_domain_id = THEIR_DOMAIN,
                                                     .kind = XFER_READY,
                                                     .src_rank = 0,
                                                     .dst_rank = 1,
                                                     .seq = n_msgs,
                                                     .desc = &(OpDesc){.op = OP_BATCH,
                                                                       .count = MSG_COUNT,
                                                                       .dtype = KVD_DT_FLOAT,
                                                                       .bytes = MSG_BYTES},
                                                     .status = STATUS_OK,
                                                     .detail = "",
                                                     .direct = true,
                                                     .descs = copy,
                                                     .n_descs = n});
                loop_once();
                answered(&s, STATUS_PROTOCOL_MISMATCH);
                if (!strstr(s.detail, named[i]))
                        ck_abort_msg("case %zu: \"%s\" does not say \"%s\"", i, s.detail, named[i]);
                /* Nothing of ours registered, no channel asked, no write: their buffer and its
                 * guards are as they were... */
                ck_assert_uint_eq(rdma_fake->n_submitted, 0);
                ck_assert_uint_eq(rdma_fake->n_regions, N_SPANS);
                ck_assert_uint_eq(fake_transport_live_regions(rdma_fake), N_SPANS);
                ck_assert_uint_eq(sent_count(SENT_CHANNEL_READY), 0);
                ck_assert_uint_eq(fx.tcp->n_submitted, 0);
                check_their_buf(their_spans, N_SPANS, NULL);
                /* ...and the receiver hears it, to let go of its registration. */
                w = sent_nth(SENT_XFER, sent_count(SENT_XFER) - 1);
                ck_assert_ptr_nonnull(w);
                ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
                ck_assert_uint_eq(w->seq, n_msgs);
                ck_assert_int_eq(w->status, STATUS_PROTOCOL_MISMATCH);
                n_msgs++;
                ck_assert_uint_eq(sent_count(SENT_XFER), n_msgs);
        }
        their_deregister(mrs, N_SPANS);
        check_region(src, SEED_SRC, false, 0, 0);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_write_fails)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        TransportJob *job;
        Answer s;
        Sent *w;

        rdma_send_readied(dom, &s, mrs, 0);
        job = rdma_send_job(src, their_spans, N_SPANS, mrs);
        /* The WRITEs fail (a flushed queue pair): PEER_LOST for the call... */
        fake_transport_complete(rdma_fake, job, -EIO);
        loop_once();
        answered(&s, STATUS_PEER_LOST);
        ck_assert_ptr_nonnull(strstr(s.detail, "writing to rank 1 over fake-rdma failed"));
        /* ...the channel's paths are connected again for whatever uses it next... */
        w = sent_nth(SENT_CHANNEL_REPAIR, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_ptr_eq(w->peer, them);
        ck_assert_ptr_eq(w->channel, RDMA_CHANNEL);
        /* ...and the receiver hears it in SEND_CANCEL, our registration gone already. */
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
        ck_assert_uint_eq(w->seq, 0);
        ck_assert_int_eq(w->status, STATUS_PEER_LOST);
        ck_assert_uint_eq(w->live_regions, N_SPANS);
        check_their_buf(their_spans, N_SPANS, NULL);
        check_region(src, SEED_SRC, false, 0, 0);
        ck_assert_uint_eq(dom->counters.bytes_sent, 0);
        their_deregister(mrs, N_SPANS);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_write_refused)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        TransportJob *job;
        Answer s;
        Sent *w;

        rdma_send_readied(dom, &s, mrs, 0);
        job = rdma_send_job(src, their_spans, N_SPANS, mrs);
        /* The receiver takes its buffer back while the WRITEs run: they fail with a remote
         * access error and land nowhere. */
        their_deregister(mrs, N_SPANS);
        fake_transport_complete(rdma_fake, job, 0);
        ck_assert_int_eq(job->error, -EACCES);
        /* Only this message fails: SEND_CANCEL ends the receiver's wait, should it still
         * wait, and the call waits for the receiver's word. */
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
        ck_assert_int_eq(w->status, STATUS_FAILED);
        ck_assert_ptr_nonnull(strstr(w->detail, "remote access error"));
        loop_once();
        ck_assert_uint_eq(s.n, 0);
        /* It gave up: its word says why. */
        domain_lane_on_xfer(reg, them,
                            &(DomainXferMsg){.dst_domain_id = dom->id,
                                             .src_domain_id = THEIR_DOMAIN,
                                             .kind = XFER_RECV_CANCEL,
                                             .src_rank = 0,
                                             .dst_rank = 1,
                                             .seq = 0,
                                             .status = STATUS_TIMEOUT,
                                             .detail = "timed out"});
        loop_once();
        answered(&s, STATUS_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(s.detail, "timed out"));
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        check_their_buf(their_spans, N_SPANS, NULL);
        check_region(src, SEED_SRC, false, 0, 0);
        ck_assert_uint_eq(dom->counters.bytes_sent, 0);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_channel_fails)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        Answer s;
        Sent *w;

        /* The link's peer has no such channel any more: PEER_LOST, no WRITE. */
        channel_error = -ENOENT;
        rdma_send_readied(dom, &s, mrs, 0);
        loop_once();
        answered(&s, STATUS_PEER_LOST);
        ck_assert_ptr_nonnull(strstr(s.detail, "no fake-rdma channel to rank 1"));
        ck_assert_uint_eq(rdma_fake->n_submitted, 0);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
        ck_assert_int_eq(w->status, STATUS_PEER_LOST);
        ck_assert_uint_eq(w->live_regions, N_SPANS);
        check_their_buf(their_spans, N_SPANS, NULL);
        their_deregister(mrs, N_SPANS);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_channel_wait_deadline)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        DomainCall *call;
        Answer s;
        Sent *w;

        /* The channel's paths are still connecting when the call's time is up. */
        channel_deferred = true;
        rdma_send_readied(dom, &s, mrs, 0);
        ck_assert_uint_eq(sent_count(SENT_CHANNEL_READY), 1);
        ck_assert_uint_eq(rdma_fake->n_submitted, 0);
        call = clist_first_entry(&dom->calls, DomainCall, link_domain);
        event_active(call->timer, EV_TIMEOUT, 1);
        loop_once();
        loop_once();
        /* The wait is cancelled, the receiver hears it, nothing was written. */
        ck_assert_uint_eq(n_channel_cancels, 1);
        answered(&s, STATUS_TIMEOUT);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
        ck_assert_int_eq(w->status, STATUS_TIMEOUT);
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        ck_assert_uint_eq(rdma_fake->n_submitted, 0);
        ck_assert_uint_eq(fake_transport_live_regions(rdma_fake), N_SPANS);
        check_their_buf(their_spans, N_SPANS, NULL);
        their_deregister(mrs, N_SPANS);
        region_drop(src);
}
END_TEST

START_TEST(test_rdma_recv_register_fails)
{
        Domain *dom = form_rdma();
        Region *dst = pattern_region(dom->ranks[0].cluster, SEED_DST);
        struct {
                int register_error;
                const char *no_device;
                int status;
                const char *detail;
        } cases[] = {
                /* domain_lane_direct_recv_register(): the device cannot take WRITEs... */
                {0, "the device is down (test)", STATUS_FEATURE_NOT_ENABLED,
                 "the device is down (test)"},
                /* ...or the registration fails (LimitMEMLOCK, most often). */
                {-ENOMEM, NULL, STATUS_OUT_OF_MEMORY, "cannot register the receive buffer"},
        };

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                Answer r;
                Sent *w;

                rdma_fake->register_error = cases[i].register_error;
                rdma_fake->no_device = cases[i].no_device;
                batch_one(dom, 0, 1, true, &r);
                loop_once();
                answered(&r, cases[i].status);
                ck_assert_ptr_nonnull(strstr(r.detail, cases[i].detail));
                /* No READY: the sender hears that this message will not come. */
                ck_assert_uint_eq(sent_count(SENT_XFER), i + 1);
                w = sent_nth(SENT_XFER, i);
                ck_assert_uint_eq(w->xfer, XFER_RECV_CANCEL);
                ck_assert_uint_eq(w->seq, i);
                ck_assert_int_eq(w->status, cases[i].status);
                ck_assert_uint_eq(rdma_fake->n_regions, 0);
                check_region(dst, SEED_DST, false, 0, 0);
        }
        ck_assert_uint_eq(fx.tcp->n_submitted, 0);
        region_drop(dst);
}
END_TEST

START_TEST(test_rdma_send_register_fails)
{
        Domain *dom = form_rdma();
        Region *src = pattern_region(dom->ranks[0].cluster, SEED_SRC);
        TransportRegion *mrs[N_SPANS];
        Answer s;
        Sent *w;

        rdma_send_readied(dom, &s, mrs, -ENOMEM);
        loop_once();
        /* domain_lane_direct_send_prepare(): OUT_OF_MEMORY, no WRITE; the receiver hears it. */
        answered(&s, STATUS_OUT_OF_MEMORY);
        ck_assert_ptr_nonnull(strstr(s.detail, "cannot register the send buffer"));
        ck_assert_uint_eq(rdma_fake->n_submitted, 0);
        ck_assert_uint_eq(sent_count(SENT_CHANNEL_READY), 0);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_SEND_CANCEL);
        ck_assert_int_eq(w->status, STATUS_OUT_OF_MEMORY);
        ck_assert_uint_eq(sent_count(SENT_XFER), 1);
        check_their_buf(their_spans, N_SPANS, NULL);
        their_deregister(mrs, N_SPANS);
        region_drop(src);
}
END_TEST

/* ---- collectives among clusters of this daemon ---- */

#define COLL_RANKS 3
#define COLL_TENSORS 2
#define COLL_UNITS 4

/* Where block @b of tensor @t lies in a fixture cache's region. */
static uint64_t block_offset(uint32_t t, uint64_t b)
{
        return FIXTURE_GUARD + t * ((uint64_t)COLL_UNITS * FIXTURE_STRIDE + FIXTURE_GUARD) +
               b * FIXTURE_STRIDE;
}

/* In @image, block @b of every tensor as rank @from's cache holds it. */
static void image_take_block(uint8_t *image, uint64_t b, uint32_t from)
{
        for (uint32_t t = 0; t < COLL_TENSORS; t++)
                harness_fill_pattern_at(image + block_offset(t, b), FIXTURE_STRIDE, SEED_RANK(from),
                                        block_offset(t, b));
}

/* Three clusters of this daemon as ranks 0..2, each with a blocks cache seeded per rank. */
static Domain *form_coll(Cache **caches)
{
        Cluster *c[COLL_RANKS];
        Domain *dom;

        for (uint32_t r = 0; r < COLL_RANKS; r++)
                c[r] = cluster(100 * (r + 1));
        dom = domain_make("coll", COLL_RANKS, (bool[]){true, true, true}, c);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        for (uint32_t r = 0; r < COLL_RANKS; r++)
                caches[r] = transfer_fixture_cache(&fx, c[r], CACHE_BLOCKS, COLL_TENSORS,
                                                   COLL_UNITS, NULL, SEED_RANK(r));
        return dom;
}

typedef int (*coll_fn)(DomainRegistry *reg, Cluster *c, const DomainCollArgs *m, Completion *done,
                       domain_reply_fn reply, Error *err);

/*
 * Every rank calls @fn with @args (its own cache); the fake copies every message as it is
 * matched, until no copy is left; every call must have answered OK with @algorithm.
 */
static void coll_run(Domain *dom, Cache **caches, coll_fn fn, DomainCollArgs args)
{
        Answer a[COLL_RANKS];
        Error err = ERROR_INIT;

        for (uint32_t r = 0; r < COLL_RANKS; r++) {
                harness_fill_pattern(caches[r]->tensors[0].region->data,
                                     caches[r]->tensors[0].region->size, SEED_RANK(r));
                answer_init(&a[r]);
                args.cache_id = caches[r]->id;
                ck_assert_int_eq(
                        fn(reg, dom->ranks[r].cluster, &args, &a[r].cpl, answer_reply, &err),
                        COMPLETION_PENDING);
        }
        for (unsigned guard = 0; fx.shm->n_jobs > 0; guard++) {
                ck_assert_uint_lt(guard, 64);
                fake_transport_complete(fx.shm, fake_transport_job(fx.shm, 0), 0);
                loop_once(); /* a ring passes on what landed */
        }
        loop_once();
        for (uint32_t r = 0; r < COLL_RANKS; r++) {
                answered(&a[r], STATUS_OK);
                ck_assert_uint_eq(a[r].algorithm, args.algorithm);
        }
        ck_assert_uint_eq(domain_calls_in_flight(reg), 0);
        ck_assert_uint_eq(n_sent, 0);
}

START_TEST(test_broadcast)
{
        static const uint64_t blocks[] = {3, 1};
        static const uint32_t algorithms[] = {KVD_ALGO_MESH, KVD_ALGO_RING};
        Cache *caches[COLL_RANKS];
        Domain *dom = form_coll(caches);

        for (size_t i = 0; i < ARRAY_SIZE(algorithms); i++) {
                coll_run(dom, caches, domain_handle_broadcast,
                         (DomainCollArgs){.comm_id = dom->id,
                                          .root_rank = 1,
                                          .blocks = blocks,
                                          .n_blocks = ARRAY_SIZE(blocks),
                                          .algorithm = algorithms[i],
                                          .timeout_ms = 1000});
                /* The root's blocks everywhere, every other byte as it was. */
                for (uint32_t r = 0; r < COLL_RANKS; r++) {
                        uint8_t *image = transfer_fixture_image(caches[r], SEED_RANK(r));

                        for (size_t k = 0; k < ARRAY_SIZE(blocks); k++)
                                image_take_block(image, blocks[k], 1);
                        transfer_fixture_check_image(caches[r], image);
                        free(image);
                }
        }
}
END_TEST

START_TEST(test_all_gather)
{
        static const uint64_t blocks[] = {2, 0, 3}; /* rank r's part: blocks[r] */
        static const uint32_t algorithms[] = {KVD_ALGO_MESH, KVD_ALGO_RING};
        Cache *caches[COLL_RANKS];
        Domain *dom = form_coll(caches);

        for (size_t i = 0; i < ARRAY_SIZE(algorithms); i++) {
                coll_run(dom, caches, domain_handle_all_gather,
                         (DomainCollArgs){.comm_id = dom->id,
                                          .blocks = blocks,
                                          .n_blocks = ARRAY_SIZE(blocks),
                                          .blocks_per_rank = 1,
                                          .algorithm = algorithms[i],
                                          .timeout_ms = 1000});
                /* Every rank's part everywhere, every other byte as it was. */
                for (uint32_t r = 0; r < COLL_RANKS; r++) {
                        uint8_t *image = transfer_fixture_image(caches[r], SEED_RANK(r));

                        for (uint32_t q = 0; q < COLL_RANKS; q++)
                                image_take_block(image, blocks[q], q);
                        transfer_fixture_check_image(caches[r], image);
                        free(image);
                }
        }
}
END_TEST

/* A broadcast from rank 1 behind the peer into rank 0's blocks: the stream lands block by block,
 * tensor 0's blocks in list order, then tensor 1's. */
START_TEST(test_broadcast_remote)
{
        static const uint64_t blocks[] = {3, 1};
        const uint64_t bytes = COLL_TENSORS * ARRAY_SIZE(blocks) * FIXTURE_STRIDE;
        Domain *dom = form_two();
        Cache *cache = transfer_fixture_cache(&fx, dom->ranks[0].cluster, CACHE_BLOCKS,
                                              COLL_TENSORS, COLL_UNITS, NULL, SEED_RANK(0));
        uint8_t stream[COLL_TENSORS * 2 * FIXTURE_STRIDE], *image;
        Error err = ERROR_INIT;
        TransportJob *job;
        Answer a;
        Sent *w;

        answer_init(&a);
        ck_assert_int_eq(domain_handle_broadcast(reg, dom->ranks[0].cluster,
                                                 &(DomainCollArgs){.comm_id = dom->id,
                                                                   .root_rank = 1,
                                                                   .cache_id = cache->id,
                                                                   .blocks = blocks,
                                                                   .n_blocks = ARRAY_SIZE(blocks),
                                                                   .algorithm = KVD_ALGO_MESH,
                                                                   .timeout_ms = 1000},
                                                 &a.cpl, answer_reply, &err),
                         COMPLETION_PENDING);
        /* One receive from the root: its job, then READY with the blocks' description. */
        ck_assert_uint_eq(fx.tcp->n_jobs, 1);
        job = fake_transport_job(fx.tcp, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_READ);
        ck_assert_uint_eq(job->id, domain_lane_job_id(dom->id, 1, 0, 0));
        ck_assert_uint_eq(fake_transport_job_bytes(job), bytes);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_READY);
        ck_assert_uint_eq(w->desc.op, OP_BROADCAST);
        ck_assert_uint_eq(w->desc.root, 1);
        ck_assert_uint_eq(w->desc.num_tensors, COLL_TENSORS);
        ck_assert_uint_eq(w->desc.block_bytes, FIXTURE_STRIDE);
        ck_assert_uint_eq(w->desc.n_blocks, ARRAY_SIZE(blocks));
        ck_assert_uint_eq(w->desc.bytes, bytes);
        harness_fill_pattern(stream, sizeof(stream), SEED_SRC);
        ck_assert_int_eq(fake_transport_feed(job, stream, sizeof(stream)), 0);
        fake_transport_complete(fx.tcp, job, 0);
        w = sent_nth(SENT_XFER, 1);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_DONE);
        ck_assert_int_eq(w->status, STATUS_OK);
        loop_once();
        answered(&a, STATUS_OK);
        ck_assert_uint_eq(a.algorithm, KVD_ALGO_MESH);
        ck_assert_uint_eq(a.bytes, bytes);
        image = transfer_fixture_image(cache, SEED_RANK(0));
        for (uint32_t t = 0; t < COLL_TENSORS; t++)
                for (size_t k = 0; k < ARRAY_SIZE(blocks); k++) {
                        uint64_t at = (t * ARRAY_SIZE(blocks) + k) * FIXTURE_STRIDE;

                        memcpy(image + block_offset(t, blocks[k]), stream + at, FIXTURE_STRIDE);
                }
        transfer_fixture_check_image(cache, image);
        free(image);
}
END_TEST

/*
 * A broadcast from our rank 0 to rank 1 behind the peer over RDMA: our blocks (tensor 0's in
 * list order, then tensor 1's) are paired with the two spans rank 1's READY names, the pieces
 * cut where either side's segment ends.
 */
START_TEST(test_rdma_broadcast_send)
{
        static const uint64_t blocks[] = {3, 1};
        static const Span spans[] = {{100, 200}, {700, 312}};
        /* The WRITEs: block k of the stream (t * 2 + list index) from @off, into span @span
         * from @at. */
        static const struct {
                size_t block;
                uint64_t off;
                size_t span;
                uint64_t at, len;
        } writes[] = {
                {0, 0, 0, 0, 128},  {1, 0, 0, 128, 72},  {1, 72, 1, 0, 56},
                {2, 0, 1, 56, 128}, {3, 0, 1, 184, 128},
        };
        const uint64_t bytes = COLL_TENSORS * ARRAY_SIZE(blocks) * FIXTURE_STRIDE;
        Domain *dom = form_rdma();
        Cache *cache = transfer_fixture_cache(&fx, dom->ranks[0].cluster, CACHE_BLOCKS,
                                              COLL_TENSORS, COLL_UNITS, NULL, SEED_RANK(0));
        const uint8_t *data = cache->tensors[0].region->data;
        uint8_t stream[COLL_TENSORS * ARRAY_SIZE(blocks) * FIXTURE_STRIDE], *image;
        TransportRegion *mrs[ARRAY_SIZE(spans)];
        const FakeRegion *ours;
        Error err = ERROR_INIT;
        TransportJob *job;
        DomainOp *op;
        Answer a;
        Sent *w;

        answer_init(&a);
        ck_assert_int_eq(domain_handle_broadcast(reg, dom->ranks[0].cluster,
                                                 &(DomainCollArgs){.comm_id = dom->id,
                                                                   .root_rank = 0,
                                                                   .cache_id = cache->id,
                                                                   .blocks = blocks,
                                                                   .n_blocks = ARRAY_SIZE(blocks),
                                                                   .algorithm = KVD_ALGO_MESH,
                                                                   .timeout_ms = 1000},
                                                 &a.cpl, answer_reply, &err),
                         COMPLETION_PENDING);
        /* One send to rank 1; it READYs with what it was told (the send's own description). */
        op = clist_first_entry(&dom->lanes[0][1]->ops, DomainOp, link_lane);
        ck_assert_uint_eq(op->desc.bytes, bytes);
        their_register(spans, ARRAY_SIZE(spans), mrs);
        their_rdma_ready(dom, 0, &op->desc, spans, ARRAY_SIZE(spans), mrs);

        /* Our blocks lie within one span of the region: one registration for all four. */
        ck_assert_uint_eq(rdma_fake->n_regions, ARRAY_SIZE(spans) + 1);
        ours = &rdma_fake->regions[ARRAY_SIZE(spans)];
        ck_assert(!ours->remote_write);
        ck_assert_ptr_eq(ours->channel, RDMA_CHANNEL);
        ck_assert_ptr_eq(ours->addr, data + block_offset(0, 1));
        ck_assert_uint_eq(ours->len, block_offset(1, 3) + FIXTURE_STRIDE - block_offset(0, 1));
        ck_assert_uint_eq(rdma_fake->n_jobs, 1);
        job = fake_transport_job(rdma_fake, 0);
        ck_assert_int_eq(job->dir, TRANSPORT_WRITE);
        ck_assert_uint_eq(job->n_segs, ARRAY_SIZE(writes));
        for (size_t k = 0; k < ARRAY_SIZE(writes); k++) {
                const TransportSegment *seg = &job->segs[k];
                size_t b = writes[k].block;
                uint64_t from =
                        block_offset(b / ARRAY_SIZE(blocks), blocks[b % ARRAY_SIZE(blocks)]);

                ck_assert_ptr_eq(seg->region->data + seg->offset, data + from + writes[k].off);
                ck_assert_uint_eq(seg->len, writes[k].len);
                ck_assert_uint_eq(seg->remote,
                                  (uint64_t)(uintptr_t)(their_buf + spans[writes[k].span].off +
                                                        writes[k].at));
                ck_assert_uint_eq(seg->lkey, ours->key.lkey);
                ck_assert_uint_eq(seg->rkey, mrs[writes[k].span]->key.rkey);
        }
        fake_transport_complete(rdma_fake, job, 0);
        w = sent_nth(SENT_XFER, 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_uint_eq(w->xfer, XFER_WRITTEN);
        their_word(dom, XFER_DONE, 0, STATUS_OK);
        loop_once();
        ck_assert_uint_eq(a.n, 1);
        ck_assert_int_eq(a.status, STATUS_OK);
        ck_assert_uint_eq(a.bytes, bytes);
        /* Their buffer holds our blocks in stream order, and nothing else moved. */
        image = transfer_fixture_image(cache, SEED_RANK(0));
        for (uint32_t t = 0; t < COLL_TENSORS; t++)
                for (size_t k = 0; k < ARRAY_SIZE(blocks); k++)
                        memcpy(stream + (t * ARRAY_SIZE(blocks) + k) * FIXTURE_STRIDE,
                               image + block_offset(t, blocks[k]), FIXTURE_STRIDE);
        check_their_buf(spans, ARRAY_SIZE(spans), stream);
        transfer_fixture_check_image(cache, image);
        free(image);
        their_deregister(mrs, ARRAY_SIZE(spans));
}
END_TEST

/* Two clusters of this daemon: devices 4 and 0 of one server. */
static const char *const local_table =
        "{\"version\": \"1.0\", \"server_count\": \"1\", \"status\": \"completed\", "
        "\"server_list\": [{\"server_id\": \"s\", \"device\": ["
        "{\"device_id\": \"4\", \"device_ip\": \"127.0.0.1\", \"rank_id\": \"0\"},"
        "{\"device_id\": \"0\", \"device_ip\": \"127.0.0.1\", \"rank_id\": \"1\"}]}]}";

/* kvd_domain_link() of @c with @ranks; returns what domain_handle_link() did, the comm id in @ret.
 */
static int link_call(Cluster *c, const DomainClusterRank *ranks, size_t n, uint64_t *ret)
{
        Completion done = {.ops = &cpl_ops};
        Error err = ERROR_INIT;
        int r;

        replies = 0;
        r = domain_handle_link(reg, c, &(DomainLinkArgs){"pair", ranks, n, local_table}, &done,
                               call_reply, &err);
        ck_assert_int_eq(replies, r == 0);
        if (r == 0)
                *ret = last_reply.comm_id;
        return r;
}

/* A domain of two clusters of this daemon, through the client's kvd_domain_link() arguments. */
START_TEST(test_link_local)
{
        Cluster *c0 = cluster(100), *c1 = cluster(200);
        DomainClusterRank ranks[] = {{100, 0}, {200, 1}}, swapped[] = {{200, 1}, {100, 0}};
        DomainClusterRank twice[] = {{100, 0}, {200, 0}}, stranger[] = {{300, 0}, {200, 1}};
        DomainQueryResult q;
        Error err = ERROR_INIT;
        uint64_t id0 = 0, id1 = 0, unused;
        Domain *dom;

        ck_assert_int_eq(link_call(c0, ranks, 2, &id0), 0);
        dom = domain_find_id(reg, id0);
        ck_assert_ptr_nonnull(dom);
        ck_assert_int_eq(dom->state, DOMAIN_PREPARING);
        ck_assert(dom->ranks[0].local && dom->ranks[1].local);
        ck_assert_int_eq(dom->setup, SETUP_NONE);
        ck_assert_int_eq(domain_handle_query(reg, c0, id0, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_PREPARING);

        /* The second member (ranks in another order) forms the domain at once. */
        ck_assert_int_eq(link_call(c1, swapped, 2, &id1), 0);
        ck_assert_uint_eq(id1, id0);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        ck_assert_ptr_nonnull(link_find(c0, 200));
        ck_assert_ptr_nonnull(link_find(c1, 100));

        /* Refused, changing nothing: linking twice, a rank twice, a stranger's table. */
        ck_assert_int_eq(link_call(c0, ranks, 2, &unused), STATUS_ALREADY_LINK);
        ck_assert_int_eq(link_call(c0, twice, 2, &unused), STATUS_PARAM_INVALID);
        ck_assert_int_eq(link_call(c0, stranger, 2, &unused), STATUS_PARAM_INVALID);
        ck_assert_int_eq(link_call(c0, ranks, 1, &unused), STATUS_PARAM_INVALID);
        ck_assert_int_eq(dom->state, DOMAIN_OK);
        ck_assert_uint_eq(reg->n_domains, 1);

        /* One member unlinks: the domain fails for the other, nobody else is told. */
        ck_assert_int_eq(domain_handle_unlink(reg, c1, id0, &err), 0);
        ck_assert_int_eq(domain_handle_query(reg, c0, id0, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_FAILED);
        ck_assert_int_eq(q.failure, STATUS_LINK_FAILED);
        ck_assert_int_eq(domain_handle_query(reg, c1, id0, &q, &err), STATUS_PARAM_INVALID);
        ck_assert_uint_eq(n_sent, 0);

        /* Linking the failed domain's name again makes a new domain that takes the name; the
         * failed one stays FAILED under its comm_id until its member here unlinks it. */
        ck_assert_int_eq(link_call(c0, ranks, 2, &id1), 0);
        ck_assert_uint_ne(id1, id0);
        ck_assert(dom->replaced);
        ck_assert_int_eq(dom->state, DOMAIN_FAILED);
        ck_assert_ptr_eq(domain_find_name(reg, "pair"), domain_find_id(reg, id1));
        ck_assert_uint_eq(reg->n_domains, 2);
        ck_assert_int_eq(link_call(c1, ranks, 2, &unused), 0);
        ck_assert_uint_eq(unused, id1);
        ck_assert_int_eq(domain_find_id(reg, id1)->state, DOMAIN_OK);
        ck_assert_int_eq(domain_handle_query(reg, c0, id0, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_FAILED);
        ck_assert_int_eq(domain_handle_unlink(reg, c0, id0, &err), 0);
        ck_assert_ptr_null(domain_find_id(reg, id0));
        ck_assert_int_eq(domain_handle_query(reg, c0, id1, &q, &err), 0);
        ck_assert_uint_eq(q.mem_status, KVD_MEM_STATUS_OK);
        ck_assert_uint_eq(n_sent, 0);
}
END_TEST

static Suite *domain_suite(void)
{
        Suite *s = suite_create("domain");
        TCase *tc;

        tc = tcase_create("form");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_form_two);
        tcase_add_test(tc, test_form_three);
        tcase_add_test(tc, test_answer_join);
        tcase_add_test(tc, test_link_local);
        tcase_add_test(tc, test_formation_deadline);
        suite_add_tcase(s, tc);

        tc = tcase_create("leave");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_their_leave);
        tcase_add_test(tc, test_leave_while_linking);
        tcase_add_test(tc, test_our_unlink);
        tcase_add_test(tc, test_peer_lost);
        tcase_add_test(tc, test_peer_lost_before_join);
        suite_add_tcase(s, tc);

        tc = tcase_create("hostile");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_bad_notices);
        tcase_add_test(tc, test_bad_joins);
        tcase_add_test(tc, test_join_restarted_daemon);
        suite_add_tcase(s, tc);

        tc = tcase_create("calls");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_send_deadline);
        tcase_add_test(tc, test_send_mismatch);
        suite_add_tcase(s, tc);

        tc = tcase_create("data");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_local_pair);
        tcase_add_test(tc, test_local_copy_fails);
        tcase_add_test(tc, test_local_recv_deadline);
        tcase_add_test(tc, test_remote_send);
        tcase_add_test(tc, test_remote_send_fails);
        tcase_add_test(tc, test_remote_recv);
        tcase_add_test(tc, test_remote_recv_fails);
        tcase_add_test(tc, test_remote_recv_deadline);
        tcase_add_test(tc, test_broadcast);
        tcase_add_test(tc, test_all_gather);
        tcase_add_test(tc, test_broadcast_remote);
        suite_add_tcase(s, tc);

        tc = tcase_create("rdma-lane");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_rdma_recv);
        tcase_add_test(tc, test_rdma_send);
        tcase_add_test(tc, test_rdma_send_bad_ready);
        tcase_add_test(tc, test_direct_send_bad_descs);
        tcase_add_test(tc, test_rdma_write_fails);
        tcase_add_test(tc, test_rdma_write_refused);
        tcase_add_test(tc, test_rdma_channel_fails);
        tcase_add_test(tc, test_rdma_channel_wait_deadline);
        tcase_add_test(tc, test_rdma_recv_register_fails);
        tcase_add_test(tc, test_rdma_send_register_fails);
        tcase_add_test(tc, test_rdma_broadcast_send);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(domain_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
