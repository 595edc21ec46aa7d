/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the link state machine: a LinkRoot built by hand (an event_base, clusters, no
 * sockets, no threads) whose peer ops are a recorder. The tests play the peer's side: they
 * answer the recorded calls with grants, refusals and losses, and check the links, the client's
 * answer, the notices sent and what the LinkEvents listeners heard.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "daemon/link/notify.h"
#include "daemon/link/peer.h"
#include "daemon/memory/region.h"
#include "tests/unit/fake-transport.h"

/* After the daemon's headers: check.h defines fail(), a CompletionOps member. */
#include <check.h>

#define PEER_ADDRESS "10.0.0.2:7000"
#define LOCAL_ID 1
#define REMOTE_ID 2
#define MAX_RECORDED 8

typedef struct Recorder {
        struct event_base *base;
        IdSource ids;
        Memory memory;
        TransportSet transports;
        Limits limits;
        bool accept_links;
        LinkRoot root;
        Peer *peer; /* the one peer daemon, READY */
        Region *region;

        /* get, when_ready */
        char got_address[SOCKADDR_STR_MAX];
        unsigned n_gets;
        link_peer_ready_fn ready_fn;
        void *ready_userdata;
        unsigned n_waiters_cancelled;
        /* link, redirect */
        LinkPeerAsk asked;
        unsigned n_asked;
        link_grant_fn grant_fn;
        void *grant_userdata;
        /* notices */
        LinkPeerUnlink unlinks[MAX_RECORDED];
        unsigned n_unlinks;
        uint64_t gone[MAX_RECORDED];
        unsigned n_gone;

        /* the client's answer */
        Completion done;
        unsigned n_replies;
        int32_t rets[MAX_RECORDED];
        size_t n_rets;
        Error first;
        int failed;
        unsigned n_dropped;

        /* LinkEvents */
        Hook hook;
        Link *down[MAX_RECORDED];
        int down_status[MAX_RECORDED];
        unsigned n_down;
        unsigned n_inlinks_gone;
        int inlink_gone_status;
} Recorder;

static Recorder *rec;

/* Tokens the recorder hands out as waiters and calls: never dereferenced by link/. */
static char waiter_token, call_token;

static int rec_get(LinkRoot *root, const char *address, Peer **ret, Error *err)
{
        (void)snprintf(rec->got_address, sizeof(rec->got_address), "%s", address);
        rec->n_gets++;
        *ret = rec->peer;
        return 0;
}

static int rec_when_ready(Peer *p, link_peer_ready_fn fn, void *userdata, PeerWaiter **ret)
{
        ck_assert_ptr_eq(p, rec->peer);
        rec->ready_fn = fn;
        rec->ready_userdata = userdata;
        if (ret)
                *ret = (PeerWaiter *)&waiter_token;
        return 0;
}

static void rec_waiter_cancel(PeerWaiter *w)
{
        if (!w)
                return;
        ck_assert_ptr_eq(w, (PeerWaiter *)&waiter_token);
        rec->n_waiters_cancelled++;
        rec->ready_fn = NULL;
}

static int rec_link(Peer *p, const LinkPeerAsk *ask, link_grant_fn fn, void *userdata,
                    PeerCall **ret_call)
{
        ck_assert_ptr_eq(p, rec->peer);
        rec->asked = *ask;
        rec->n_asked++;
        rec->grant_fn = fn;
        rec->grant_userdata = userdata;
        if (ret_call)
                *ret_call = (PeerCall *)&call_token;
        return 0;
}

static void rec_redirect(PeerCall *call, link_grant_fn fn, void *userdata)
{
        ck_assert_ptr_eq(call, (PeerCall *)&call_token);
        rec->grant_fn = fn;
        rec->grant_userdata = userdata;
}

static int rec_unlink(Peer *p, const LinkPeerUnlink *u)
{
        ck_assert_ptr_eq(p, rec->peer);
        ck_assert_uint_lt(rec->n_unlinks, MAX_RECORDED);
        rec->unlinks[rec->n_unlinks++] = *u;
        return 0;
}

static int rec_cluster_gone(Peer *p, uint64_t cluster_id)
{
        ck_assert_ptr_eq(p, rec->peer);
        ck_assert_uint_lt(rec->n_gone, MAX_RECORDED);
        rec->gone[rec->n_gone++] = cluster_id;
        return 0;
}

static const LinkPeerOps rec_ops = {
        .get = rec_get,
        .when_ready = rec_when_ready,
        .waiter_cancel = rec_waiter_cancel,
        .link = rec_link,
        .redirect = rec_redirect,
        .unlink = rec_unlink,
        .cluster_gone = rec_cluster_gone,
};

static int rec_reply(Completion *done, const int32_t *rets, size_t n, const Error *first)
{
        ck_assert_ptr_eq(done, &rec->done);
        ck_assert_uint_le(n, MAX_RECORDED);
        rec->n_replies++;
        memcpy(rec->rets, rets, n * sizeof(*rets));
        rec->n_rets = n;
        rec->first = *first;
        return 0;
}

static int rec_completion_reply(Completion *cpl, const void *reply, int fd)
{
        ck_abort_msg("link/ answered through the completion, not its reply function");
        return 0;
}

static int rec_completion_fail(Completion *cpl, int status, const Error *err)
{
        rec->failed = status;
        return 0;
}

static void rec_completion_drop(Completion *cpl)
{
        rec->n_dropped++;
}

static const CompletionOps rec_completion_ops = {
        .reply = rec_completion_reply,
        .fail = rec_completion_fail,
        .drop = rec_completion_drop,
};

static void rec_link_down(void *userdata, Link *l, int status)
{
        ck_assert_uint_lt(rec->n_down, MAX_RECORDED);
        rec->down[rec->n_down] = l;
        rec->down_status[rec->n_down++] = status;
}

static void rec_inlink_gone(void *userdata, InLink *il, int status)
{
        rec->n_inlinks_gone++;
        rec->inlink_gone_status = status;
}

static const LinkEvents rec_events = {
        .link_down = rec_link_down,
        .inlink_gone = rec_inlink_gone,
};

static void setup(void)
{
        rec = calloc(1, sizeof(*rec));
        ck_assert_ptr_nonnull(rec);
        rec->base = event_base_new();
        ck_assert_ptr_nonnull(rec->base);
        rec->memory.ids = &rec->ids;
        rec->transports.base = rec->base;
        ck_assert_int_eq(transport_set_init(&rec->transports, NULL), 0);
        rec->limits.max_links_per_client = 4;
        rec->limits.max_notifies_per_client = 4;

        link_root_init(&rec->root);
        rec->root.base = rec->base;
        rec->root.ids = &rec->ids;
        rec->root.memory = &rec->memory;
        rec->root.transports = &rec->transports;
        rec->root.options.limits = &rec->limits;
        rec->root.options.client_clusters_accept_links = &rec->accept_links;
        rec->root.peer_ops = &rec_ops;
        link_events_listen(&rec->root, &rec->hook, &rec_events, rec);

        rec->peer = calloc(1, sizeof(*rec->peer));
        ck_assert_ptr_nonnull(rec->peer);
        rec->peer->root = &rec->root;
        rec->peer->id = 1;
        rec->peer->state = PEER_READY;
        (void)snprintf(rec->peer->address, sizeof(rec->peer->address), "%s", PEER_ADDRESS);
        clist_init(&rec->peer->links);
        clist_init(&rec->peer->inlinks);
        clist_link_tail(&rec->root.peers, &rec->peer->link_daemon);
        rec->root.n_peers++;

        rec->done.ops = &rec_completion_ops;
}

static void teardown(void)
{
        Cluster *c, *tmp;

        CLIST_FOREACH_SAFE (c, tmp, &rec->root.clusters, link_daemon)
                cluster_free(c);
        ck_assert_uint_eq(rec->root.n_links, 0);
        ck_assert_uint_eq(rec->root.n_inlinks, 0);
        ck_assert_uint_eq(rec->peer->n_links, 0);
        ck_assert_uint_eq(rec->peer->n_inlinks, 0);
        clist_unlink(&rec->peer->link_daemon);
        free(rec->peer);
        region_unref(rec->region);
        link_root_done(&rec->root);
        transport_set_deinit(&rec->transports);
        event_base_free(rec->base);
        free(rec);
        rec = NULL;
}

static Cluster *make_cluster(uint64_t id, ClusterRole role)
{
        Cluster *c = NULL;

        ck_assert_int_eq(cluster_new(&rec->root, NULL, id, role, 0, 0, &c), 0);
        return c;
}

/* A cache of @c, registered now, with the REQ key @req_id. */
static Cache *add_cache(Cluster *c, uint64_t cache_id, bool remote_accessible, uint64_t req_id)
{
        CacheDesc desc = {.num_tensors = 2, .n_dims = 2, .shape = {4, 64}, .data_type = 1};
        CacheTensor tensors[2];
        CacheKey key = {CACHE_KEY_REQ, c->id, req_id, CACHE_ID_NONE, 9, 0, 0};
        Error err = ERROR_INIT;
        Cache *cache = NULL;

        if (!rec->region)
                ck_assert_int_eq(region_new_memfd("test-link", 1 << 16, 1, &rec->region), 0);
        tensors[0] = (CacheTensor){rec->region, 0};
        tensors[1] = (CacheTensor){rec->region, 4096};
        ck_assert_int_eq(cache_new(CACHE_CONTIGUOUS, &desc, tensors, &cache), 0);
        cache->id = cache_id;
        cache->owner_cluster_id = c->id;
        cache->seq = id_source_next_seq(&rec->ids);
        cache->remote_accessible = remote_accessible;
        ck_assert_int_eq(cache_table_add(&c->caches, cache, &key, 1, false, &err), 0);
        return cache;
}

/* What the peer grants in these tests: link 77, a decoder, two caches, no RDMA device. */
static LinkGrant *make_grant(void)
{
        LinkGrant *g = calloc(1, sizeof(*g));
        LinkExposedCache *e;

        ck_assert_ptr_nonnull(g);
        g->link_id = 77;
        g->role = CLUSTER_ROLE_DECODER;
        g->device_reason = strdup("no RDMA device");
        g->n_caches = 2;
        g->caches = calloc(2, sizeof(*g->caches));
        ck_assert_ptr_nonnull(g->caches);
        for (size_t i = 0; i < 2; i++) {
                e = &g->caches[i];
                e->cache_id = 100 + i;
                e->tensor_size = 4096;
                e->num_tensors = 2;
                e->n_shape = 2;
                e->shape = calloc(2, sizeof(*e->shape));
                e->shape[0] = 4;
                e->shape[1] = 64;
                e->n_keys = 1;
                e->keys = calloc(1, sizeof(*e->keys));
                e->keys[0] = (CacheKey){CACHE_KEY_REQ, REMOTE_ID, 500 + i, CACHE_ID_NONE, 9, 0, 0};
                e->key_slots = calloc(1, sizeof(*e->key_slots));
                e->key_slots[0] = (uint32_t)i;
        }
        return g;
}

/* Starts kvd_link_clusters() of @c to REMOTE_ID behind the peer, within @timeout_ms. */
static void start_link(Cluster *c, uint32_t timeout_ms)
{
        LinkTarget target = {REMOTE_ID, PEER_ADDRESS};
        Error err = ERROR_INIT;

        ck_assert_int_eq(link_request_start(c, &target, 1, timeout_ms, &rec->done, rec_reply, &err),
                         COMPLETION_PENDING);
        ck_assert_uint_eq(rec->n_gets, 1);
        ck_assert_str_eq(rec->got_address, PEER_ADDRESS);
        ck_assert_ptr_nonnull(rec->ready_fn);
        ck_assert(link_request_in_progress(c, REMOTE_ID));
        ck_assert_uint_eq(rec->n_replies, 0);
}

/* The peer became READY: link/ asks it for the link. */
static void peer_ready(void)
{
        link_peer_ready_fn fn = rec->ready_fn;

        rec->ready_fn = NULL;
        fn(rec->peer, STATUS_OK, NULL, rec->ready_userdata);
        ck_assert_uint_eq(rec->n_asked, 1);
        ck_assert_ptr_nonnull(rec->grant_fn);
}

/* The peer answers the recorded ask with @status (and a grant when OK). */
static void peer_answers(int status, LinkGrant *g)
{
        link_grant_fn fn = rec->grant_fn;
        Error err = ERROR_INIT;

        rec->grant_fn = NULL;
        if (status != STATUS_OK)
                error_set(&err, status, "refused by the test");
        fn(rec->peer, status, status == STATUS_OK ? NULL : &err, g, rec->grant_userdata);
}

/* Links cluster @c to REMOTE_ID through the whole state machine; returns the link. */
static Link *link_up(Cluster *c)
{
        Link *l;

        start_link(c, 0);
        peer_ready();
        peer_answers(STATUS_OK, make_grant());
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_OK);
        l = link_find(c, REMOTE_ID);
        ck_assert_ptr_nonnull(l);
        return l;
}

START_TEST(test_link_ok)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l;

        start_link(c, 0);
        peer_ready();
        /* What link/ asked the peer for. */
        ck_assert_uint_eq(rec->asked.src_cluster_id, LOCAL_ID);
        ck_assert_int_eq(rec->asked.src_role, CLUSTER_ROLE_PROMPT);
        ck_assert_uint_eq(rec->asked.dst_cluster_id, REMOTE_ID);
        ck_assert(!rec->asked.channel); /* no device in the map */
        ck_assert(!rec->asked.domain);
        ck_assert_uint_eq(rec->n_replies, 0);

        peer_answers(STATUS_OK, make_grant());
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_uint_eq(rec->n_rets, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_OK);
        ck_assert_int_eq(rec->first.code, 0);
        ck_assert(!link_request_in_progress(c, REMOTE_ID));

        l = link_find(c, REMOTE_ID);
        ck_assert_ptr_nonnull(l);
        ck_assert_int_eq(l->state, LINK_UP);
        ck_assert_ptr_eq(l->peer, rec->peer);
        ck_assert_ptr_eq(l->transport, transport_set_get(&rec->transports, TRANSPORT_ROLE_STREAM));
        ck_assert_uint_eq(l->remote_link_id, 77);
        ck_assert_int_eq(l->remote_role, CLUSTER_ROLE_DECODER);
        ck_assert_str_eq(l->peer_address, PEER_ADDRESS);
        ck_assert_uint_eq(c->n_links, 1);
        ck_assert_uint_eq(rec->peer->n_links, 1);

        /* The exposed caches, as the peer described them. */
        ck_assert_ptr_nonnull(l->exposed);
        ck_assert_uint_eq(l->exposed->n_caches, 2);
        for (size_t i = 0; i < 2; i++) {
                const LinkExposedCache *e = &l->exposed->caches[i];

                ck_assert_uint_eq(e->cache_id, 100 + i);
                ck_assert_uint_eq(e->num_tensors, 2);
                ck_assert_uint_eq(e->n_shape, 2);
                ck_assert_int_eq(e->shape[1], 64);
                ck_assert_uint_eq(e->n_keys, 1);
                ck_assert_int_eq(e->keys[0].kind, CACHE_KEY_REQ);
                ck_assert_uint_eq(e->keys[0].req_id, 500 + i);
                ck_assert_uint_eq(e->key_slots[0], i);
        }
        ck_assert_uint_eq(rec->n_unlinks, 0);
        ck_assert_uint_eq(rec->n_down, 0);
}
END_TEST

START_TEST(test_link_twice_is_already_link)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        LinkTarget target = {REMOTE_ID, PEER_ADDRESS};
        Error err = ERROR_INIT;

        (void)link_up(c);
        rec->n_replies = 0;
        ck_assert_int_eq(link_request_start(c, &target, 1, 0, &rec->done, rec_reply, &err), 0);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_ALREADY_LINK);
        ck_assert_int_eq(rec->first.code, STATUS_ALREADY_LINK);
        ck_assert_uint_eq(rec->n_gets, 1); /* the peer was not asked again */
}
END_TEST

/* The peer refuses with @status; the client gets @expect for the entry and overall. */
static void check_refused(int status, int expect)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);

        start_link(c, 0);
        peer_ready();
        peer_answers(status, NULL);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], expect);
        ck_assert_int_eq(rec->first.code, expect);
        /* The peer's reason reaches the client. */
        ck_assert_ptr_nonnull(strstr(rec->first.msg, "refused by the test"));
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
        ck_assert_uint_eq(c->n_links, 0);
        ck_assert_uint_eq(rec->peer->n_links, 0);
        ck_assert(!link_request_in_progress(c, REMOTE_ID));
}

START_TEST(test_link_refused)
{
        /* kvd_link_clusters() to a client cluster: the peer refuses with LINK_FAILED. */
        check_refused(STATUS_LINK_FAILED, STATUS_LINK_FAILED);
}
END_TEST

START_TEST(test_link_refused_keeps_status)
{
        /* Any other refusal reaches the client as the peer said it. */
        check_refused(STATUS_LIMIT_EXCEEDED, STATUS_LIMIT_EXCEEDED);
}
END_TEST

START_TEST(test_link_timeout)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);

        /* The peer never becomes READY: the call's deadline answers TIMEOUT. */
        start_link(c, 1);
        ck_assert_int_eq(event_base_loop(rec->base, EVLOOP_ONCE), 0);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_TIMEOUT);
        ck_assert_int_eq(rec->first.code, STATUS_TIMEOUT);
        ck_assert_uint_eq(rec->n_waiters_cancelled, 1);
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
        ck_assert(!link_request_in_progress(c, REMOTE_ID));
}
END_TEST

START_TEST(test_link_timeout_late_grant_given_back)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);

        /* Asked, but the answer comes after the deadline. */
        start_link(c, 1);
        peer_ready();
        ck_assert_int_eq(event_base_loop(rec->base, EVLOOP_ONCE), 0);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_TIMEOUT);
        /* The call was redirected; the late grant is given back, no link is made. */
        ck_assert_ptr_nonnull(rec->grant_fn);
        peer_answers(STATUS_OK, make_grant());
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
        ck_assert_uint_eq(rec->n_unlinks, 1);
        ck_assert_uint_eq(rec->unlinks[0].src_cluster_id, LOCAL_ID);
        ck_assert_uint_eq(rec->unlinks[0].dst_cluster_id, REMOTE_ID);
        ck_assert_uint_eq(rec->unlinks[0].link_id, 77);
        ck_assert(!rec->unlinks[0].from_linked);
}
END_TEST

START_TEST(test_link_peer_lost_while_asking)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);

        start_link(c, 0);
        peer_ready();
        /* The peer is lost before it answers: the link fails as LINK_FAILED. */
        peer_answers(STATUS_PEER_LOST, NULL);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_LINK_FAILED);
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
}
END_TEST

START_TEST(test_link_peer_lost_before_ready)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        link_peer_ready_fn fn;
        Error err = ERROR_INIT;

        start_link(c, 0);
        fn = rec->ready_fn;
        error_set(&err, STATUS_PEER_LOST, "connection reset");
        fn(rec->peer, STATUS_PEER_LOST, &err, rec->ready_userdata);
        ck_assert_uint_eq(rec->n_asked, 0);
        ck_assert_uint_eq(rec->n_replies, 1);
        ck_assert_int_eq(rec->rets[0], STATUS_LINK_FAILED);
}
END_TEST

START_TEST(test_link_peer_lost_after_link)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);

        /* A lost peer takes its links down; the listeners hear it with PEER_LOST. */
        link_peer_lost(rec->peer, STATUS_PEER_LOST);
        ck_assert_int_eq(l->state, LINK_DOWN);
        ck_assert_ptr_null(l->peer);
        ck_assert_uint_eq(rec->peer->n_links, 0);
        ck_assert_uint_eq(rec->n_down, 1);
        ck_assert_ptr_eq(rec->down[0], l);
        ck_assert_int_eq(rec->down_status[0], STATUS_PEER_LOST);
        /* Still there, down, until the client unlinks or re-links. */
        ck_assert_ptr_eq(link_find(c, REMOTE_ID), l);
        ck_assert_uint_eq(rec->n_unlinks, 0);
}
END_TEST

START_TEST(test_link_peer_unavailable_after_link)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);

        /* A daemon shutting down says so: its links go down with DAEMON_UNAVAILABLE. */
        link_peer_lost(rec->peer, STATUS_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(l->state, LINK_DOWN);
        ck_assert_uint_eq(rec->n_down, 1);
        ck_assert_int_eq(rec->down_status[0], STATUS_DAEMON_UNAVAILABLE);
}
END_TEST

START_TEST(test_unlink)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);

        link_free(l, STATUS_NOT_YET_LINK);
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
        ck_assert_uint_eq(c->n_links, 0);
        ck_assert_uint_eq(rec->root.n_links, 0);
        ck_assert_uint_eq(rec->peer->n_links, 0);
        /* The peer is told which of its inbound links went. */
        ck_assert_uint_eq(rec->n_unlinks, 1);
        ck_assert_uint_eq(rec->unlinks[0].src_cluster_id, LOCAL_ID);
        ck_assert_uint_eq(rec->unlinks[0].dst_cluster_id, REMOTE_ID);
        ck_assert_uint_eq(rec->unlinks[0].link_id, 77);
        ck_assert(!rec->unlinks[0].from_linked);
        ck_assert_uint_eq(rec->n_down, 1);
        ck_assert_int_eq(rec->down_status[0], STATUS_NOT_YET_LINK);
}
END_TEST

START_TEST(test_unlink_force_tells_nobody)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);

        link_free_full(l, STATUS_NOT_YET_LINK, false);
        ck_assert_ptr_null(link_find(c, REMOTE_ID));
        ck_assert_uint_eq(rec->n_unlinks, 0);
        ck_assert_uint_eq(rec->n_down, 1);
}
END_TEST

START_TEST(test_unlinked_by_the_linked_side)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);
        LinkPeerUnlink stale = {REMOTE_ID, LOCAL_ID, 76, true};
        LinkPeerUnlink u = {REMOTE_ID, LOCAL_ID, 77, true};

        /* A notice naming another link id leaves the link alone. */
        link_peer_unlinked(rec->peer, &stale);
        ck_assert_int_eq(l->state, LINK_UP);
        link_peer_unlinked(rec->peer, &u);
        ck_assert_int_eq(l->state, LINK_DOWN);
        ck_assert_uint_eq(rec->n_down, 1);
        ck_assert_int_eq(rec->down_status[0], STATUS_NOT_YET_LINK);
}
END_TEST

START_TEST(test_inbound_link)
{
        Cluster *c = make_cluster(5, CLUSTER_ROLE_DECODER);
        LinkPeerAsk ask = {
                .src_cluster_id = 9, .src_role = CLUSTER_ROLE_PROMPT, .dst_cluster_id = 5};
        LinkPeerUnlink u;
        Error err = ERROR_INIT;
        LinkGrant *g = NULL;
        InLink *il = NULL;

        rec->accept_links = true;
        (void)add_cache(c, 40, true, 600);
        (void)add_cache(c, 41, false, 601); /* not remote-accessible */
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err), 0);
        (void)add_cache(c, 42, true, 602); /* registered after the link */

        ck_assert_ptr_eq(il->local, c);
        ck_assert_ptr_eq(il->peer, rec->peer);
        ck_assert_uint_eq(il->remote_cluster_id, 9);
        ck_assert_int_eq(il->remote_role, CLUSTER_ROLE_PROMPT);
        ck_assert_ptr_eq(link_inlink_find(rec->peer, 9, c), il);
        ck_assert_uint_eq(c->n_inlinks, 1);
        ck_assert_uint_eq(rec->peer->n_inlinks, 1);

        /* The grant names the inbound link and exposes only cache 40. */
        ck_assert_uint_eq(g->link_id, il->id);
        ck_assert_int_eq(g->role, CLUSTER_ROLE_DECODER);
        ck_assert(!g->has_device);
        ck_assert_ptr_nonnull(g->device_reason);
        ck_assert_uint_eq(g->n_caches, 1);
        ck_assert_uint_eq(g->caches[0].cache_id, 40);
        ck_assert_uint_eq(g->caches[0].num_tensors, 2);
        ck_assert_uint_eq(g->caches[0].n_shape, 2);
        ck_assert_int_eq(g->caches[0].shape[0], 4);
        ck_assert_uint_eq(g->caches[0].n_keys, 1);
        ck_assert_uint_eq(g->caches[0].keys[0].req_id, 600);
        ck_assert_uint_eq(g->caches[0].n_descs, 0);
        link_grant_free(g);

        /* The linking side unlinks: the inbound link goes, its listeners hear it. */
        u = (LinkPeerUnlink){9, 5, il->id, false};
        link_peer_unlinked(rec->peer, &u);
        ck_assert_uint_eq(c->n_inlinks, 0);
        ck_assert_uint_eq(rec->n_inlinks_gone, 1);
        ck_assert_int_eq(rec->inlink_gone_status, STATUS_NOT_YET_LINK);
}
END_TEST

/* Cache 100 of make_grant()'s, with descriptors of its two tensors in @mem (packed by @t). */
static LinkGrant *grant_with_descs(FakeTransport *t, uint8_t *mem, size_t n_descs)
{
        TransportRegion reg = {
                .transport = &t->transport, .addr = mem, .len = 2 * 4096, .key = {.rkey = 0x2001}};
        LinkGrant *g = make_grant();
        LinkExposedCache *e = &g->caches[0];

        e->descs = calloc(2, sizeof(*e->descs));
        ck_assert_ptr_nonnull(e->descs);
        e->n_descs = n_descs;
        for (size_t k = 0; k < 2; k++)
                ck_assert_int_eq(transport_region_desc(&reg, mem + k * 4096, 4096, &e->descs[k]),
                                 0);
        return g;
}

/* A grant is refused for descriptors our transport does not read, before anything uses them. */
static void check_grant_refused(Transport *direct, LinkGrant *g, const char *why)
{
        Error err = ERROR_INIT;

        ck_assert_int_eq(link_grant_check(direct, g, &err), STATUS_PROTOCOL_MISMATCH);
        ck_assert_int_eq(err.code, STATUS_PROTOCOL_MISMATCH);
        ck_assert_msg(strstr(err.msg, why), "%s", err.msg);
        link_grant_free(g);
}

START_TEST(test_grant_descriptors_checked)
{
        static uint8_t mem[2 * 4096];
        FakeTransport *t = fake_transport_new_remote(NULL);
        Transport *direct;
        Error err = ERROR_INIT;
        LinkGrant *g;

        ck_assert_ptr_nonnull(t);
        direct = &t->transport;
        /* No descriptors (a cache peers do not reach one-sided), or one per tensor. */
        g = make_grant();
        ck_assert_int_eq(link_grant_check(direct, g, &err), 0);
        link_grant_free(g);
        g = grant_with_descs(t, mem, 2);
        ck_assert_int_eq(link_grant_check(direct, g, &err), 0);
        /* Without a transport that reaches peers' memory they stay opaque: kept, unread. */
        ck_assert_int_eq(link_grant_check(NULL, g, &err), 0);
        link_grant_free(g);

        check_grant_refused(direct, grant_with_descs(t, mem, 1),
                            "the peer sent 1 descriptors for its cache 100 of 2 tensors");
        g = grant_with_descs(t, mem, 2);
        g->caches[0].descs[1].len = 0;
        check_grant_refused(NULL, g, "descriptor of tensor 1 of its cache 100 (0 bytes)");
        g = grant_with_descs(t, mem, 2);
        g->caches[0].descs[0].bytes[0] ^= 0xff; /* another kind */
        check_grant_refused(direct, g,
                            "descriptor of tensor 0 of its cache 100 (21 bytes) does not "
                            "describe the tensor to transport fake-remote");
        g = grant_with_descs(t, mem, 2);
        g->caches[0].descs[1].len--; /* cut short */
        check_grant_refused(direct, g, "descriptor of tensor 1 of its cache 100 (20 bytes)");
        /* A descriptor of fewer bytes than the tensor has. */
        g = grant_with_descs(t, mem, 2);
        g->caches[0].tensor_size = 4097;
        check_grant_refused(direct, g, "descriptor of tensor 0 of its cache 100");
        fake_transport_free(t);
}
END_TEST

START_TEST(test_inbound_link_refused)
{
        Cluster *c = make_cluster(5, CLUSTER_ROLE_DECODER);
        LinkPeerAsk ask = {.src_cluster_id = 9, .dst_cluster_id = 5};
        Error err = ERROR_INIT;
        LinkGrant *g = NULL;
        InLink *il = NULL;

        /* A client cluster takes no kvd_link_clusters() links... */
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err),
                         STATUS_LINK_FAILED);
        /* ...but a comm domain's pair link. */
        ask.domain = true;
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err), 0);
        link_grant_free(g);
        ask.domain = false;
        rec->accept_links = true;

        /* No such cluster here. */
        ask.dst_cluster_id = 6;
        error_clear(&err);
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err),
                         STATUS_LINK_FAILED);
        /* The asking cluster's id is attached here too. */
        (void)make_cluster(9, CLUSTER_ROLE_PROMPT);
        ask.dst_cluster_id = 5;
        error_clear(&err);
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err),
                         STATUS_LINK_FAILED);
        ck_assert_uint_eq(c->n_inlinks, 1);
}
END_TEST

START_TEST(test_unlink_inbound)
{
        Cluster *c = make_cluster(5, CLUSTER_ROLE_DECODER);
        LinkPeerAsk ask = {.src_cluster_id = 9, .dst_cluster_id = 5, .domain = true};
        Error err = ERROR_INIT;
        LinkGrant *g = NULL;
        InLink *il = NULL;
        uint64_t id;

        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err), 0);
        link_grant_free(g);
        id = il->id;
        /* kvd_unlink_clusters() on the linked side: the peer hears it from the linked side. */
        ck_assert_int_eq(link_unlink_inbound(c, 9, false), 1);
        ck_assert_uint_eq(c->n_inlinks, 0);
        ck_assert_uint_eq(rec->n_unlinks, 1);
        ck_assert_uint_eq(rec->unlinks[0].src_cluster_id, 5);
        ck_assert_uint_eq(rec->unlinks[0].dst_cluster_id, 9);
        ck_assert_uint_eq(rec->unlinks[0].link_id, id);
        ck_assert(rec->unlinks[0].from_linked);
        ck_assert_int_eq(link_unlink_inbound(c, 9, false), 0);
}
END_TEST

/* Links are two-way: each end finds the link the other made, and the linked side unlinks it. */
START_TEST(test_two_way_finds)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Cluster *a = make_cluster(5, CLUSTER_ROLE_DECODER);
        Cluster *b = make_cluster(6, CLUSTER_ROLE_PROMPT);
        LinkPeerAsk ask = {.src_cluster_id = 9, .dst_cluster_id = 5, .domain = true};
        LinkPeerUnlink u = {REMOTE_ID, LOCAL_ID, 77, true};
        Error err = ERROR_INIT;
        LinkGrant *g = NULL;
        InLink *il = NULL;
        Link *l = link_up(c), *local = NULL;

        /* Our link over the peer, by the id the peer granted: UP links only. */
        ck_assert_ptr_eq(link_find_granted(rec->peer, 77), l);
        ck_assert_ptr_null(link_find_granted(rec->peer, 78));
        /* A same-daemon link, seen from the cluster linked to. */
        ck_assert_int_eq(link_new_local(&rec->root, a, b,
                                        transport_set_get(&rec->transports, TRANSPORT_ROLE_LOCAL),
                                        &local),
                         0);
        ck_assert_ptr_eq(link_find_in(b, 5), local);
        ck_assert_ptr_null(link_find_in(a, 6));
        ck_assert_ptr_null(link_find_in(b, 7));
        /* The peer's cluster 9 linked to a. */
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err), 0);
        link_grant_free(g);
        ck_assert_ptr_eq(link_inlink_find_cluster(a, 9), il);
        ck_assert_ptr_null(link_inlink_find_cluster(a, 10));
        ck_assert_ptr_null(link_inlink_find_cluster(b, 9));

        /* b unlinks the link a made to it: it goes at once, for both; a forced unlink too. */
        ck_assert_int_eq(link_unlink_inbound(b, 5, false), 1);
        ck_assert_uint_eq(a->n_links, 0);
        ck_assert_uint_eq(b->n_links_in, 0);
        ck_assert_ptr_null(link_find(a, 6));
        ck_assert_int_eq(rec->down_status[rec->n_down - 1], STATUS_NOT_YET_LINK);
        ck_assert_int_eq(link_new_local(&rec->root, a, b,
                                        transport_set_get(&rec->transports, TRANSPORT_ROLE_LOCAL),
                                        &local),
                         0);
        ck_assert_int_eq(link_unlink_inbound(b, 5, true), 1);
        ck_assert_uint_eq(a->n_links, 0);
        ck_assert_int_eq(link_unlink_inbound(b, 5, true), 0);
        ck_assert_uint_eq(rec->n_unlinks, 0); /* nobody else to tell */

        /* The peer's cluster unlinked ours: down, saying so, and no longer found by grant. */
        link_peer_unlinked(rec->peer, &u);
        ck_assert_int_eq(l->state, LINK_DOWN);
        ck_assert_int_eq(l->down_status, STATUS_NOT_YET_LINK);
        ck_assert_ptr_null(link_find_granted(rec->peer, 77));
}
END_TEST

START_TEST(test_cluster_gone)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Cluster *other = make_cluster(3, CLUSTER_ROLE_PROMPT);
        LinkPeerAsk ask = {.src_cluster_id = 9, .dst_cluster_id = LOCAL_ID, .domain = true};
        Error err = ERROR_INIT;
        LinkGrant *g = NULL;
        InLink *il = NULL;
        Link *local = NULL;
        Link *remote;

        remote = link_up(c);
        /* A local link to it, and a peer's link to it. */
        ck_assert_int_eq(link_new_local(&rec->root, other, c,
                                        transport_set_get(&rec->transports, TRANSPORT_ROLE_LOCAL),
                                        &local),
                         0);
        ck_assert_int_eq(link_inlink_accept(&rec->root, rec->peer, &ask, &il, &g, &err), 0);
        link_grant_free(g);
        ck_assert_uint_eq(rec->root.n_links, 2);

        cluster_free(c);
        /* The peer hears it once, not once per link. */
        ck_assert_uint_eq(rec->n_gone, 1);
        ck_assert_uint_eq(rec->gone[0], LOCAL_ID);
        ck_assert_uint_eq(rec->n_unlinks, 0);
        /* Its own link went (listeners heard PEER_LOST), the peer's inbound link too. */
        ck_assert_uint_eq(rec->peer->n_links, 0);
        ck_assert_uint_eq(rec->peer->n_inlinks, 0);
        ck_assert_uint_eq(rec->n_inlinks_gone, 1);
        ck_assert_uint_ge(rec->n_down, 2);
        ck_assert_ptr_eq(rec->down[0], remote);
        ck_assert_int_eq(rec->down_status[0], STATUS_PEER_LOST);
        /* The other cluster's link to it stays, down, until unlinked. */
        ck_assert_uint_eq(rec->root.n_links, 1);
        ck_assert_ptr_eq(link_find(other, LOCAL_ID), local);
        ck_assert_int_eq(local->state, LINK_DOWN);
        ck_assert_ptr_eq(rec->down[rec->n_down - 1], local);
}
END_TEST

START_TEST(test_cluster_gone_while_linking)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);

        start_link(c, 0);
        peer_ready();
        cluster_free(c);
        /* The client's request is answered PEER_LOST; a later grant is given back. */
        ck_assert_int_eq(rec->failed, STATUS_PEER_LOST);
        ck_assert_uint_eq(rec->n_replies, 0);
        ck_assert_ptr_nonnull(rec->grant_fn);
        peer_answers(STATUS_OK, make_grant());
        ck_assert_uint_eq(rec->n_unlinks, 1);
        ck_assert_uint_eq(rec->unlinks[0].link_id, 77);
}
END_TEST

START_TEST(test_peer_cluster_gone)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_PROMPT);
        Link *l = link_up(c);

        /* The peer's cluster went away: our link to it goes down. */
        link_peer_cluster_gone(rec->peer, 4);
        ck_assert_int_eq(l->state, LINK_UP);
        link_peer_cluster_gone(rec->peer, REMOTE_ID);
        ck_assert_int_eq(l->state, LINK_DOWN);
        ck_assert_uint_eq(rec->n_down, 1);
        ck_assert_int_eq(rec->down_status[0], STATUS_PEER_LOST);
}
END_TEST

START_TEST(test_notify_take)
{
        Cluster *c = make_cluster(LOCAL_ID, CLUSTER_ROLE_DECODER);
        CList taken = CLIST_INIT(taken);
        Error err = ERROR_INIT;
        NotifyEvent *e;
        uint8_t data[NOTIFY_DATA_MAX + 1] = {0};
        uint64_t src = 10;

        for (uint8_t i = 0; i < 3; i++) {
                data[0] = i;
                ck_assert_int_eq(notify_deliver(c, 10 + i, i == 1, data, 1 + i, NULL), 0);
        }
        ck_assert_int_eq(notify_deliver(c, 13, false, data, sizeof(data), NULL), -EINVAL);
        ck_assert_uint_eq(c->n_notifies, 3);
        ck_assert_uint_eq(notify_count_takeable(c, 2), 2);

        /* The two oldest, in order, as the client gets them. */
        ck_assert_uint_eq(notify_take(c, 2, &taken), 2);
        ck_assert_uint_eq(c->n_notifies, 1);
        CLIST_FOREACH (e, &taken, link) {
                ck_assert_uint_eq(e->src_cluster_id, src);
                ck_assert_uint_eq(e->len, 1 + src - 10);
                ck_assert_uint_eq(e->data[0], src - 10);
                ck_assert(e->pull == (src == 11)); /* the kind stays with its notification */
                src++;
        }
        ck_assert_uint_eq(src, 12);
        notify_list_free(&taken);
        ck_assert(clist_is_empty(&taken));

        /* limits.max_notifies_per_client: room while below it. */
        ck_assert_int_eq(notify_check_room(c, NULL, &err), 0);
        for (uint64_t i = 0; i < 3; i++)
                ck_assert_int_eq(notify_deliver(c, 20 + i, false, data, 1, NULL), 0);
        ck_assert_int_eq(notify_check_room(c, NULL, &err), STATUS_LIMIT_EXCEEDED);
        ck_assert_uint_eq(notify_count_takeable(c, UINT32_MAX), 4);
}
END_TEST

static Suite *link_suite(void)
{
        Suite *s = suite_create("link");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_link_ok);
        tcase_add_test(tc, test_link_twice_is_already_link);
        tcase_add_test(tc, test_link_refused);
        tcase_add_test(tc, test_link_refused_keeps_status);
        tcase_add_test(tc, test_link_timeout);
        tcase_add_test(tc, test_link_timeout_late_grant_given_back);
        tcase_add_test(tc, test_link_peer_lost_while_asking);
        tcase_add_test(tc, test_link_peer_lost_before_ready);
        tcase_add_test(tc, test_link_peer_lost_after_link);
        tcase_add_test(tc, test_link_peer_unavailable_after_link);
        tcase_add_test(tc, test_unlink);
        tcase_add_test(tc, test_unlink_force_tells_nobody);
        tcase_add_test(tc, test_unlinked_by_the_linked_side);
        tcase_add_test(tc, test_inbound_link);
        tcase_add_test(tc, test_grant_descriptors_checked);
        tcase_add_test(tc, test_inbound_link_refused);
        tcase_add_test(tc, test_unlink_inbound);
        tcase_add_test(tc, test_two_way_finds);
        tcase_add_test(tc, test_cluster_gone);
        tcase_add_test(tc, test_cluster_gone_while_linking);
        tcase_add_test(tc, test_peer_cluster_gone);
        tcase_add_test(tc, test_notify_take);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(link_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
