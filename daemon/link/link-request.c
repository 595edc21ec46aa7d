/* SPDX-License-Identifier: MIT */
/* LinkRequest: kvd_link_clusters() in progress, local links at once, remote ones through peers. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "proto/status-wire.h"
#include "common/status.h"

typedef struct LinkRequest LinkRequest;

typedef struct LinkSetup {
        LinkRequest *lr;
        size_t index;
        uint64_t remote_cluster_id;
        char address[SOCKADDR_STR_MAX];
        Peer *peer;
        PeerWaiter *waiter;
        PeerCall *call;
        LinkTransport transport;
        LinkGrant *reply; /* kept while the channel connects */
        Peer *reply_peer;
        bool done;
} LinkSetup;

struct LinkRequest {
        LinkRoot *root;
        Completion *done; /* NULL once answered or gone */
        link_reply_fn reply;
        Cluster *cluster;
        size_t n;
        int32_t rets[KVD_MAX_LINK_CLUSTERS];
        Error first;
        LinkSetup setups[KVD_MAX_LINK_CLUSTERS];
        unsigned n_pending;
        struct event *timer;
        CList link_cluster; /* on cluster->link_requests */
};

#define LINK_DEFAULT_TIMEOUT_MS 3000
/* link_request_one(): the entry's set-up runs on; its status comes later. */
#define LINK_SETUP_RUNNING 1

static void link_request_set_error(LinkRequest *lr, size_t i, const Error *e)
{
        lr->rets[i] = e->code;
        if (lr->first.code == 0)
                error_set(&lr->first, e->code, "clusters[%zu]: %s", i, e->msg);
}

int link_check_cluster_list(size_t n, Error *err)
{
        if (n == 0)
                return error_set(err, STATUS_PARAM_INVALID, "no clusters given");
        if (n > KVD_MAX_LINK_CLUSTERS)
                return error_set(err, STATUS_CLUSTER_NUM_EXCEED_LIMIT,
                                 "%zu clusters in one call, at most %d", n, KVD_MAX_LINK_CLUSTERS);
        return 0;
}

static void link_request_reply(LinkRequest *lr)
{
        Completion *done = TAKE_PTR(lr->done);

        if (!done)
                return;
        (void)lr->reply(done, lr->rets, lr->n, &lr->first);
}

static LinkRequest *link_request_free(LinkRequest *lr)
{
        for (size_t i = 0; i < lr->n; i++) {
                LinkSetup *s = &lr->setups[i];

                lr->root->peer_ops->waiter_cancel(s->waiter);
                s->waiter = NULL;
                link_transport_cancel(&s->transport);
                s->reply = link_grant_free(s->reply);
        }
        if (lr->timer)
                event_free(lr->timer);
        clist_unlink(&lr->link_cluster);
        completion_drop(lr->done);
        free(lr);
        return NULL;
}

/* Whom an abandoned call's grant goes back to. */
typedef struct LinkOrphan {
        LinkRoot *root;
        uint64_t cluster_id;
        uint64_t remote_cluster_id;
        bool keep_if_linked;
} LinkOrphan;

/* The peer granted a link that nobody waits for any more: take it back. */
static void link_on_orphan_grant(Peer *p, int status, const Error *err, LinkGrant *g,
                                 void *userdata)
{
        LinkOrphan *o = userdata; /* NULL when it could not be allocated */
        Cluster *c;

        if (status == STATUS_OK && o) {
                c = link_root_find_cluster(o->root, o->cluster_id);
                if (!o->keep_if_linked || !c || !link_find(c, o->remote_cluster_id))
                        link_give_back(o->root, p, o->cluster_id, o->remote_cluster_id, g->link_id);
        }
        link_grant_free(g);
        free(o);
}

void link_peer_abandon(LinkRoot *root, PeerCall *call, uint64_t cluster_id,
                       uint64_t remote_cluster_id, bool keep_if_linked)
{
        LinkOrphan *o = malloc(sizeof(*o));

        if (o)
                *o = (LinkOrphan){root, cluster_id, remote_cluster_id, keep_if_linked};
        root->peer_ops->redirect(call, link_on_orphan_grant, o);
}

/* Stops a set-up that is still running (timeout, the client or the cluster went away). */
static void link_setup_abandon(LinkSetup *s)
{
        LinkRoot *root = s->lr->root;

        root->peer_ops->waiter_cancel(s->waiter);
        s->waiter = NULL;
        link_transport_cancel(&s->transport);
        if (s->reply) {
                /* Granted, but nobody waits for it any more: take the link back. */
                link_give_back(root, s->reply_peer, s->lr->cluster->id, s->remote_cluster_id,
                               s->reply->link_id);
                s->reply = link_grant_free(s->reply);
        }
        if (s->call) {
                link_peer_abandon(root, s->call, s->lr->cluster->id, s->remote_cluster_id, false);
                s->call = NULL;
        }
}

static void link_setup_finish(LinkSetup *s, const Error *e)
{
        LinkRequest *lr = s->lr;

        if (s->done)
                return;
        s->done = true;
        s->waiter = NULL;
        s->call = NULL;
        s->transport.waiter = NULL;
        if (e && e->code != STATUS_OK) {
                log_info("cluster %" PRIu64 ": link to %" PRIu64 " at %s failed: %s",
                         lr->cluster->id, s->remote_cluster_id, s->address, e->msg);
                link_request_set_error(lr, s->index, e);
        } else
                lr->rets[s->index] = STATUS_OK;
        if (--lr->n_pending == 0) {
                link_request_reply(lr);
                link_request_free(lr);
        }
}

int link_make_remote(Cluster *c, Peer *p, uint64_t remote_cluster_id, LinkGrant *g,
                     TransportChannel *ep, const char *transport_reason, Link **ret, Error *err)
{
        LinkRoot *root = c->root;
        Link *l;
        int r;

        l = link_find(c, remote_cluster_id);
        if (l)
                link_free_full(l, STATUS_PEER_LOST, false);
        r = link_new_remote(root, c, p, remote_cluster_id, g,
                            ep ? link_channel_transport(root)
                               : transport_set_get(root->transports, TRANSPORT_ROLE_STREAM),
                            &l);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot create the link");
        l->channel = ep;
        (void)snprintf(l->transport_reason, sizeof(l->transport_reason), "%s", transport_reason);
        if (ret)
                *ret = l;
        return 0;
}

/* Makes the link out of the peer's kept answer, over the channel @ep or TCP. */
static void link_setup_complete(LinkSetup *s, TransportChannel *ep)
{
        Error e = ERROR_INIT;

        if (link_make_remote(s->lr->cluster, s->reply_peer, s->remote_cluster_id, s->reply, ep,
                             s->transport.reason, NULL, &e) == 0)
                s->reply = NULL;
        else
                s->reply = link_grant_free(s->reply);
        link_setup_finish(s, &e);
}

void link_transport_cancel(LinkTransport *t)
{
        peer_channel_waiter_cancel(t->waiter);
        t->waiter = NULL;
}

static void link_transport_on_channel(TransportChannel *ch, int status, const char *reason,
                                      void *userdata)
{
        LinkTransport *t = userdata;
        const char *name = transport_name(link_channel_transport(t->peer->root));
        Error e = ERROR_INIT;

        t->waiter = NULL;
        if (t->peer->state != PEER_READY) {
                /* Its channels fail as it goes: no link over it, TCP or not. */
                error_set(&e, STATUS_LINK_FAILED,
                          "the daemon at %s was lost while the %s channel connected", t->address,
                          name);
                t->fn(t, NULL, &e, t->userdata);
                return;
        }
        if (status < 0 && t->required) {
                error_set(&e, STATUS_LINK_FAILED,
                          "cannot connect the %s channel to the daemon at %s: %s", name, t->address,
                          reason ? reason : strerror(-status));
                t->fn(t, NULL, &e, t->userdata);
                return;
        }
        if (status < 0)
                (void)snprintf(t->reason, sizeof(t->reason),
                               "auto: the %s channel did not connect: %s", name,
                               reason ? reason : strerror(-status));
        else if (t->required)
                (void)snprintf(t->reason, sizeof(t->reason), "configured");
        else
                (void)snprintf(t->reason, sizeof(t->reason), "auto: %s on both ends", name);
        t->fn(t, status < 0 ? NULL : ch, NULL, t->userdata);
}

void link_transport_connect(LinkTransport *t, Peer *p, uint64_t remote_cluster_id,
                            const LinkGrant *g, link_transport_fn fn, void *userdata)
{
        const char *name = transport_name(link_channel_transport(p->root));
        Error e = ERROR_INIT;
        int r;

        t->fn = fn;
        t->userdata = userdata;
        t->peer = p;
        if (!t->channel) {
                fn(t, NULL, NULL, userdata);
                return;
        }
        if (!g->has_device) {
                const char *why = g->device_reason ?: "it did not say why";

                if (t->required) {
                        error_set(&e, STATUS_FEATURE_NOT_ENABLED,
                                  "cluster %" PRIu64 " at %s has no %s device: %s",
                                  remote_cluster_id, t->address, name, why);
                        fn(t, NULL, &e, userdata);
                        return;
                }
                (void)snprintf(t->reason, sizeof(t->reason),
                               "auto: the peer has no %s for cluster %" PRIu64 ": %s", name,
                               remote_cluster_id, why);
                fn(t, NULL, NULL, userdata);
                return;
        }
        r = peer_channel_get(p, t->device, &g->device, link_transport_on_channel, t, &t->waiter);
        if (r < 0)
                link_transport_on_channel(NULL, r, NULL, t);
}

static void link_setup_on_transport(LinkTransport *t, TransportChannel *ep, const Error *err,
                                    void *userdata)
{
        LinkSetup *s = userdata;

        if (err) {
                link_setup_abandon(s);
                link_setup_finish(s, err);
                return;
        }
        link_setup_complete(s, ep);
}

static void link_setup_on_reply(Peer *p, int status, const Error *err, LinkGrant *g, void *userdata)
{
        LinkSetup *s = userdata;
        Error e = ERROR_INIT;

        s->call = NULL;
        if (status != STATUS_OK) {
                error_set(&e, status == STATUS_PEER_LOST ? STATUS_LINK_FAILED : status,
                          "the daemon at %s refused: %s", s->address,
                          err ? err->msg : status_wire_name(status));
                link_setup_finish(s, &e);
                return;
        }
        s->reply = g;
        s->reply_peer = p;
        link_transport_connect(&s->transport, p, s->remote_cluster_id, s->reply,
                               link_setup_on_transport, s);
}

/* Asks for a link of @c to @remote_cluster_id: kvd_link_clusters()'s, or a comm domain's
 * (@domain). */
static int link_peer_call(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool channel,
                          bool domain, link_grant_fn fn, void *userdata, PeerCall **ret_call)
{
        LinkPeerAsk ask = {
                .src_cluster_id = c->id,
                .src_role = c->role,
                .dst_cluster_id = remote_cluster_id,
                .channel = channel,
                .domain = domain,
        };
        const char *why = NULL;

        /* Links are two-way: the linked side opens a channel of its own to our device. */
        if (channel && transport_device_info(link_channel_transport(c->root), c->device_id, NULL,
                                             &ask.src_device, &why) >= 0)
                ask.has_src_device = true;
        return c->root->peer_ops->link(p, &ask, fn, userdata, ret_call);
}

int link_peer_request(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool channel,
                      link_grant_fn fn, void *userdata, PeerCall **ret_call)
{
        return link_peer_call(c, p, remote_cluster_id, channel, true, fn, userdata, ret_call);
}

static void link_setup_on_ready(Peer *p, int status, const Error *err, void *userdata)
{
        LinkSetup *s = userdata;
        Cluster *c = s->lr->cluster;
        Error e = ERROR_INIT;
        int r;

        s->waiter = NULL;
        if (status != STATUS_OK) {
                error_set(&e, status == STATUS_PERMISSION_DENIED ? status : STATUS_LINK_FAILED,
                          "cannot reach the daemon at %s: %s", s->address,
                          err ? err->msg : status_wire_name(status));
                link_setup_finish(s, &e);
                return;
        }
        r = link_peer_call(c, p, s->remote_cluster_id, s->transport.channel, false,
                           link_setup_on_reply, s, &s->call);
        if (r < 0) {
                error_set(&e, STATUS_LINK_FAILED, "cannot ask the daemon at %s: %s", s->address,
                          strerror(-r));
                link_setup_finish(s, &e);
        }
}

static void link_request_on_timeout(evutil_socket_t fd, short what, void *userdata)
{
        LinkRequest *lr = userdata;
        Error e = ERROR_INIT;

        for (size_t i = 0; i < lr->n; i++) {
                LinkSetup *s = &lr->setups[i];
                bool last;

                if (s->done || !s->lr)
                        continue;
                last = lr->n_pending == 1;

                link_setup_abandon(s);
                error_clear(&e);
                error_set(&e, STATUS_TIMEOUT,
                          "no link to cluster %" PRIu64 " at %s within the "
                          "call's timeout",
                          s->remote_cluster_id, s->address);
                /* The last set-up to finish answers the client and frees @lr. */
                link_setup_finish(s, &e);
                if (last)
                        return;
        }
}

static void link_request_on_cancel(Completion *done, void *userdata)
{
        LinkRequest *lr = userdata;

        lr->done = NULL;
        for (size_t i = 0; i < lr->n; i++)
                if (lr->setups[i].lr && !lr->setups[i].done)
                        link_setup_abandon(&lr->setups[i]);
        link_request_free(lr);
}

void link_requests_abort(Cluster *c)
{
        LinkRequest *lr, *tmp;
        Error e = ERROR_INIT;

        error_set(&e, STATUS_PEER_LOST, "cluster %" PRIu64 " detached while linking", c->id);
        CLIST_FOREACH_SAFE (lr, tmp, &c->link_requests, link_cluster) {
                for (size_t i = 0; i < lr->n; i++)
                        if (lr->setups[i].lr && !lr->setups[i].done)
                                link_setup_abandon(&lr->setups[i]);
                if (lr->done)
                        completion_fail(TAKE_PTR(lr->done), STATUS_PEER_LOST, &e);
                link_request_free(lr);
        }
}

bool link_request_in_progress(const Cluster *c, uint64_t remote_cluster_id)
{
        LinkRequest *lr;

        CLIST_FOREACH (lr, &c->link_requests, link_cluster)
                for (size_t i = 0; i < lr->n; i++)
                        if (lr->setups[i].lr && !lr->setups[i].done &&
                            lr->setups[i].remote_cluster_id == remote_cluster_id)
                                return true;
        return false;
}

/* Links @c to a cluster of this daemon; returns a status and fills @err on failure. */
static int link_local(Cluster *c, Cluster *remote, Link *old, Error *err)
{
        Link *l;
        int r;

        /* A link whose remote end went away is replaced by the new one. */
        if (old)
                link_free(old, STATUS_PEER_LOST);
        r = link_new_local(c->root, c, remote,
                           transport_set_get(c->root->transports, TRANSPORT_ROLE_LOCAL), &l);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot create the link");
        (void)snprintf(l->transport_reason, sizeof(l->transport_reason), "same node");
        return STATUS_OK;
}

int link_transport_choose(LinkTransport *t, const Cluster *c, const char *address, Error *err)
{
        TransportSet *ts = c->root->transports;
        Transport *configured = transport_set_configured(ts, c->device_id);
        const char *why = NULL;
        TransportDeviceInfo dev;
        bool usable;

        *t = (LinkTransport){0};
        (void)snprintf(t->address, sizeof(t->address), "%s", address ? address : "");
        if (configured && configured == transport_set_get(ts, TRANSPORT_ROLE_STREAM)) {
                (void)snprintf(t->reason, sizeof(t->reason), "configured");
                return 0;
        }
        /* Any other transport the device map names is required: no falling back. */
        if (configured && transport_device_info(configured, c->device_id, NULL, NULL, &why) < 0)
                return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                 "device %" PRId32 " is configured for transport %s, but: %s",
                                 c->device_id, transport_name(configured), why);
        usable = transport_device_info(link_channel_transport(c->root), c->device_id, NULL, &dev,
                                       &why) >= 0;
        t->required = configured != NULL;
        t->channel = usable;
        if (usable)
                (void)snprintf(t->device, sizeof(t->device), "%s", transport_device_name(&dev));
        else
                (void)snprintf(t->reason, sizeof(t->reason), "auto: %s", why);
        return 0;
}

/* Checks one entry and links it (local) or starts its set-up (remote). */
static int link_request_one(LinkRequest *lr, size_t i, const LinkTarget *info, Error *err)
{
        Cluster *c = lr->cluster;
        LinkRoot *root = c->root;
        LinkSetup *s = &lr->setups[i];
        const char *address = info->remote_ip_info;
        Cluster *remote;
        Link *l;
        int r;

        if (info->remote_cluster_id == c->id)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "cluster %" PRIu64 " cannot link to itself", c->id);
        l = link_find(c, info->remote_cluster_id);
        if (l && l->state == LINK_UP)
                return error_set(err, STATUS_ALREADY_LINK,
                                 "cluster %" PRIu64 " is linked to %" PRIu64
                                 " already (link %" PRIu64 ")",
                                 c->id, info->remote_cluster_id, l->id);
        if (link_request_in_progress(c, info->remote_cluster_id) ||
            link_linking_elsewhere(c, info->remote_cluster_id))
                return error_set(err, STATUS_PROCESSING_LINK,
                                 "a link from cluster %" PRIu64 " to %" PRIu64 " is being set up",
                                 c->id, info->remote_cluster_id);
        if (c->n_links >= root->options.limits->max_links_per_client)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u links (limits.max_links_per_client)",
                                 c->id, c->n_links);
        remote = link_root_find_cluster(root, info->remote_cluster_id);
        if (remote) {
                r = link_check_target(remote, err);
                return r < 0 ? r : link_local(c, remote, l, err);
        }
        if (!address || !address[0])
                return error_set(err, STATUS_LINK_FAILED,
                                 "no cluster %" PRIu64 " is attached to this daemon, and no "
                                 "remote_ip_info names the daemon it is on",
                                 info->remote_cluster_id);
        *s = (LinkSetup){.lr = lr, .index = i, .remote_cluster_id = info->remote_cluster_id};
        (void)snprintf(s->address, sizeof(s->address), "%.*s", (int)sizeof(s->address) - 1,
                       address);
        r = link_transport_choose(&s->transport, c, s->address, err);
        if (r < 0) {
                s->lr = NULL;
                return r;
        }
        r = root->peer_ops->get(root, address, &s->peer, err);
        if (r < 0) {
                s->lr = NULL;
                return r;
        }
        lr->n_pending++;
        s->done = false;
        r = root->peer_ops->when_ready(s->peer, link_setup_on_ready, s, &s->waiter);
        if (r < 0) {
                s->done = true;
                lr->n_pending--;
                s->lr = NULL;
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        return LINK_SETUP_RUNNING;
}

int link_request_start(Cluster *c, const LinkTarget *targets, size_t n, uint32_t timeout_ms,
                       Completion *done, link_reply_fn reply, Error *err)
{
        LinkRoot *root = c->root;
        LinkRequest *lr;
        struct timeval tv;
        int r;

        r = link_check_cluster_list(n, err);
        if (r < 0)
                return r;
        lr = calloc(1, sizeof(*lr));
        if (!lr)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        lr->root = root;
        lr->cluster = c;
        lr->n = n;
        lr->done = done;
        lr->reply = reply;
        clist_link_tail(&c->link_requests, &lr->link_cluster);
        /* Counts as pending until every entry was looked at, so nothing answers early. */
        lr->n_pending = 1;

        for (size_t i = 0; i < lr->n; i++) {
                Error e = ERROR_INIT;

                r = link_request_one(lr, i, &targets[i], &e);
                if (r == LINK_SETUP_RUNNING)
                        continue;
                lr->rets[i] = r;
                if (r != STATUS_OK) {
                        log_info("cluster %" PRIu64 ": link to %" PRIu64 " failed: %s", c->id,
                                 targets[i].remote_cluster_id, e.msg);
                        link_request_set_error(lr, i, &e);
                }
        }
        if (lr->n_pending > 1) {
                if (timeout_ms == 0)
                        timeout_ms = LINK_DEFAULT_TIMEOUT_MS;
                tv = (struct timeval){.tv_sec = timeout_ms / 1000,
                                      .tv_usec = (timeout_ms % 1000) * 1000};
                lr->timer = evtimer_new(root->base, link_request_on_timeout, lr);
                if (lr->timer && evtimer_add(lr->timer, &tv) == 0) {
                        completion_set_cancel(done, link_request_on_cancel, lr);
                        lr->n_pending--;
                        return COMPLETION_PENDING;
                }
                for (size_t i = 0; i < lr->n; i++)
                        if (lr->setups[i].lr && !lr->setups[i].done) {
                                Error e = ERROR_INIT;

                                link_setup_abandon(&lr->setups[i]);
                                error_set(&e, STATUS_OUT_OF_MEMORY, "cannot arm the timeout");
                                link_setup_finish(&lr->setups[i], &e);
                        }
        }
        /* Every entry is done: answer now. */
        link_request_reply(lr);
        link_request_free(lr);
        return 0;
}
