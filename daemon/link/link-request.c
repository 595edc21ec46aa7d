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
#include "proto/kvdist.pb-c.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/peer-rdma.h"
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
        Kvdist__V1__PeerLinkReply *reply; /* kept while the RDMA endpoint connects */
        Peer *reply_peer;
        bool done;
} LinkSetup;

struct LinkRequest {
        LinkRoot *root;
        Completion *done; /* NULL once answered or gone */
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

int link_reply_send(Completion *done, const int32_t *rets, size_t n, const Error *first)
{
        Kvdist__V1__LinkClustersReply reply = KVDIST__V1__LINK_CLUSTERS_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        int32_t wire_rets[KVD_MAX_LINK_CLUSTERS];

        assert(n <= KVD_MAX_LINK_CLUSTERS);
        /* LinkClustersReply and UnlinkClustersReply are the same message on the wire. */
        static_assert(sizeof(Kvdist__V1__LinkClustersReply) ==
                              sizeof(Kvdist__V1__UnlinkClustersReply),
                      "reply layouts differ");
        status.code = status_wire_encode(first->code);
        status.detail = (char *)first->msg;
        reply.status = &status;
        for (size_t i = 0; i < n; i++)
                wire_rets[i] = status_wire_encode(rets[i]);
        reply.rets = wire_rets;
        reply.n_rets = n;
        return completion_reply(done, &reply.base, -1);
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
        (void)link_reply_send(done, lr->rets, lr->n, &lr->first);
}

static LinkRequest *link_request_free(LinkRequest *lr)
{
        for (size_t i = 0; i < lr->n; i++) {
                LinkSetup *s = &lr->setups[i];

                peer_waiter_cancel(s->waiter);
                s->waiter = NULL;
                link_transport_cancel(&s->transport);
                if (s->reply)
                        protobuf_c_message_free_unpacked(&s->reply->base, NULL);
                s->reply = NULL;
        }
        if (lr->timer)
                event_free(lr->timer);
        clist_unlink(&lr->link_cluster);
        completion_drop(lr->done);
        free(lr);
        return NULL;
}

/* The peer granted a link that nobody waits for any more: take it back. */
static void link_setup_on_orphan_reply(Peer *p, int status, const Error *err,
                                       const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerLinkReply *m = (const Kvdist__V1__PeerLinkReply *)reply;
        Kvdist__V1__PeerUnlink u = KVDIST__V1__PEER_UNLINK__INIT;
        uint64_t *ids = userdata; /* NULL when it could not be allocated */

        if (status == STATUS_OK && ids) {
                u.src_cluster_id = ids[0];
                u.dst_cluster_id = ids[1];
                u.link_id = m->link_id;
                (void)peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, &u.base);
        }
        free(ids);
}

/* Stops a set-up that is still running (timeout, the client or the cluster went away). */
static void link_setup_abandon(LinkSetup *s)
{
        peer_waiter_cancel(s->waiter);
        s->waiter = NULL;
        link_transport_cancel(&s->transport);
        if (s->reply) {
                /* Granted, but nobody waits for it any more: take the link back. */
                Kvdist__V1__PeerUnlink u = KVDIST__V1__PEER_UNLINK__INIT;

                u.src_cluster_id = s->lr->cluster->id;
                u.dst_cluster_id = s->remote_cluster_id;
                u.link_id = s->reply->link_id;
                if (s->reply_peer && s->reply_peer->state == PEER_READY)
                        (void)peer_notice(s->reply_peer, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK,
                                          &u.base);
                protobuf_c_message_free_unpacked(&s->reply->base, NULL);
                s->reply = NULL;
        }
        if (s->call) {
                uint64_t *ids = malloc(2 * sizeof(uint64_t));

                if (ids) {
                        ids[0] = s->lr->cluster->id;
                        ids[1] = s->remote_cluster_id;
                }
                peer_call_redirect(s->call, link_setup_on_orphan_reply, ids);
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

/*
 * Makes the link of @c to @remote_cluster_id behind @p out of the peer's answer @reply (taken,
 * freed on failure) over @ep (RDMA) or TCP, replacing a link that is down.
 */
static int link_install_remote(Cluster *c, Peer *p, uint64_t remote_cluster_id,
                               Kvdist__V1__PeerLinkReply *reply, TransportChannel *ep,
                               const char *transport_reason, Link **ret, Error *err)
{
        LinkRoot *root = c->root;
        Link *l;
        int r;

        l = link_find(c, remote_cluster_id);
        if (l)
                link_free_full(l, STATUS_PEER_LOST, false);
        r = link_new_remote(root, c, p, remote_cluster_id, reply,
                            ep ? root->transports->rdma_transport : root->transports->tcp, &l);
        if (r < 0) {
                protobuf_c_message_free_unpacked(&reply->base, NULL);
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot create the link");
        }
        l->rdma_ep = ep;
        (void)snprintf(l->transport_reason, sizeof(l->transport_reason), "%s", transport_reason);
        if (ret)
                *ret = l;
        return 0;
}

int link_make_remote(Cluster *c, Peer *p, uint64_t remote_cluster_id, const ProtobufCMessage *reply,
                     TransportChannel *ep, const char *transport_reason, Link **ret, Error *err)
{
        ProtobufCMessage *copy = NULL;

        /* The reply is the peer's to free; the link keeps its own copy of what was exposed. */
        if (frame_message_dup(reply, &copy) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        return link_install_remote(c, p, remote_cluster_id, (Kvdist__V1__PeerLinkReply *)copy, ep,
                                   transport_reason, ret, err);
}

/* Makes the link out of the peer's kept answer, over @ep (RDMA) or TCP. */
static void link_setup_complete(LinkSetup *s, TransportChannel *ep)
{
        Error e = ERROR_INIT;

        (void)link_install_remote(s->lr->cluster, s->reply_peer, s->remote_cluster_id,
                                  TAKE_PTR(s->reply), ep, s->transport.reason, NULL, &e);
        link_setup_finish(s, &e);
}

void link_transport_cancel(LinkTransport *t)
{
        peer_rdma_waiter_cancel(t->waiter);
        t->waiter = NULL;
}

static void link_transport_on_rdma(TransportChannel *ep, int status, const char *reason,
                                   void *userdata)
{
        LinkTransport *t = userdata;
        Error e = ERROR_INIT;

        t->waiter = NULL;
        if (t->peer->state != PEER_READY) {
                /* Its endpoints fail as it goes: no link over it, TCP or not. */
                error_set(&e, STATUS_LINK_FAILED,
                          "the daemon at %s was lost while RDMA queue "
                          "pairs connected",
                          t->address);
                t->fn(t, NULL, &e, t->userdata);
                return;
        }
        if (status < 0 && t->required) {
                error_set(&e, STATUS_LINK_FAILED,
                          "cannot connect RDMA queue pairs to the daemon "
                          "at %s: %s",
                          t->address, reason ? reason : strerror(-status));
                t->fn(t, NULL, &e, t->userdata);
                return;
        }
        if (status < 0)
                (void)snprintf(t->reason, sizeof(t->reason),
                               "auto: RDMA queue pairs did not connect: %s",
                               reason ? reason : strerror(-status));
        else
                (void)snprintf(t->reason, sizeof(t->reason), "%s",
                               t->required ? "configured" : "auto: RDMA on both ends");
        t->fn(t, status < 0 ? NULL : ep, NULL, t->userdata);
}

void link_transport_connect(LinkTransport *t, Peer *p, uint64_t remote_cluster_id,
                            const Kvdist__V1__PeerLinkReply *m, link_transport_fn fn,
                            void *userdata)
{
        TransportDeviceInfo remote = {0};
        Error e = ERROR_INIT;
        int r;

        t->fn = fn;
        t->userdata = userdata;
        t->peer = p;
        if (!t->rdma) {
                fn(t, NULL, NULL, userdata);
                return;
        }
        if (!m->rdma || m->rdma->gid.len != TRANSPORT_ADDRESS_SIZE || !m->rdma->device) {
                const char *why =
                        m->rdma_reason && m->rdma_reason[0] ? m->rdma_reason : "it did not say why";

                if (t->required) {
                        error_set(&e, STATUS_FEATURE_NOT_ENABLED,
                                  "cluster %" PRIu64 " at %s "
                                  "has no RDMA device: %s",
                                  remote_cluster_id, t->address, why);
                        fn(t, NULL, &e, userdata);
                        return;
                }
                (void)snprintf(t->reason, sizeof(t->reason),
                               "auto: the peer has no RDMA for cluster %" PRIu64 ": %s",
                               remote_cluster_id, why);
                fn(t, NULL, NULL, userdata);
                return;
        }
        (void)snprintf(remote.device, sizeof(remote.device), "%s", m->rdma->device);
        memcpy(remote.address, m->rdma->gid.data, TRANSPORT_ADDRESS_SIZE);
        remote.port = (uint8_t)m->rdma->port;
        remote.mtu = m->rdma->mtu;
        remote.lid = (uint16_t)m->rdma->lid;
        r = peer_rdma_get(p, t->device, &remote, link_transport_on_rdma, t, &t->waiter);
        if (r < 0)
                link_transport_on_rdma(NULL, r, NULL, t);
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

static void link_setup_on_reply(Peer *p, int status, const Error *err,
                                const ProtobufCMessage *reply, void *userdata)
{
        LinkSetup *s = userdata;
        ProtobufCMessage *copy = NULL;
        Error e = ERROR_INIT;
        int r;

        s->call = NULL;
        if (status != STATUS_OK) {
                error_set(&e, status == STATUS_PEER_LOST ? STATUS_LINK_FAILED : status,
                          "the daemon at %s refused: %s", s->address,
                          err ? err->msg : status_wire_name(status));
                link_setup_finish(s, &e);
                return;
        }
        /* The reply is the peer's to free; the link keeps its own copy of what was exposed. */
        r = frame_message_dup(reply, &copy);
        if (r < 0) {
                error_set(&e, STATUS_OUT_OF_MEMORY, "out of memory");
                link_setup_finish(s, &e);
                return;
        }
        s->reply = (Kvdist__V1__PeerLinkReply *)copy;
        s->reply_peer = p;
        link_transport_connect(&s->transport, p, s->remote_cluster_id, s->reply,
                               link_setup_on_transport, s);
}

/* PeerLink of @c to @remote_cluster_id: kvd_link_clusters()'s, or a comm domain's (@domain). */
static int link_peer_call(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool rdma, bool domain,
                          peer_reply_fn fn, void *userdata, PeerCall **ret_call)
{
        Kvdist__V1__PeerLink m = KVDIST__V1__PEER_LINK__INIT;

        m.src_cluster_id = c->id;
        m.src_role = (Kvdist__V1__Role)c->role;
        m.dst_cluster_id = remote_cluster_id;
        m.rdma = rdma;
        m.domain = domain;
        return peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, &m.base, fn, userdata, ret_call);
}

int link_peer_request(Cluster *c, Peer *p, uint64_t remote_cluster_id, bool rdma, peer_reply_fn fn,
                      void *userdata, PeerCall **ret_call)
{
        return link_peer_call(c, p, remote_cluster_id, rdma, true, fn, userdata, ret_call);
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
        r = link_peer_call(c, p, s->remote_cluster_id, s->transport.rdma, false,
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
        r = link_new_local(c->root, c, remote, c->root->transports->shm, &l);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot create the link");
        (void)snprintf(l->transport_reason, sizeof(l->transport_reason), "same node");
        return STATUS_OK;
}

int link_transport_choose(LinkTransport *t, const Cluster *c, const char *address, Error *err)
{
        const DeviceConfig *cfg = transport_config_find_device(
                c->root->transports->devices, c->root->transports->n_devices, c->device_id);
        const char *why = NULL;
        TransportDeviceInfo dev;
        bool rdma;

        *t = (LinkTransport){0};
        (void)snprintf(t->address, sizeof(t->address), "%s", address ? address : "");
        if (cfg && cfg->transport == TRANSPORT_KIND_TCP) {
                (void)snprintf(t->reason, sizeof(t->reason), "configured");
                return 0;
        }
        rdma = transport_device_info(c->root->transports->rdma_transport, c->device_id, NULL, &dev,
                                     &why) >= 0;
        if (cfg && cfg->transport == TRANSPORT_KIND_RDMA) {
                if (!rdma)
                        return error_set(err, STATUS_FEATURE_NOT_ENABLED,
                                         "device %" PRId32 " is configured for transport rdma, "
                                         "but: %s",
                                         c->device_id, why);
                t->required = true;
        }
        t->rdma = rdma;
        if (rdma)
                (void)snprintf(t->device, sizeof(t->device), "%s", dev.device);
        else
                (void)snprintf(t->reason, sizeof(t->reason), "auto: %s", why);
        return 0;
}

/* Checks one entry and links it (local) or starts its set-up (remote). */
static int link_request_one(LinkRequest *lr, size_t i, const Kvdist__V1__ClusterInfo *info,
                            Error *err)
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
        r = peer_get(root, address, &s->peer, err);
        if (r < 0) {
                s->lr = NULL;
                return r;
        }
        lr->n_pending++;
        s->done = false;
        r = peer_when_ready(s->peer, link_setup_on_ready, s, &s->waiter);
        if (r < 0) {
                s->done = true;
                lr->n_pending--;
                s->lr = NULL;
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        return LINK_SETUP_RUNNING;
}

int link_request_start(Cluster *c, const Kvdist__V1__LinkClusters *m, Completion *done, Error *err)
{
        LinkRoot *root = c->root;
        LinkRequest *lr;
        uint32_t timeout_ms;
        struct timeval tv;
        int r;

        r = link_check_cluster_list(m->n_clusters, err);
        if (r < 0)
                return r;
        lr = calloc(1, sizeof(*lr));
        if (!lr)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        lr->root = root;
        lr->cluster = c;
        lr->n = m->n_clusters;
        lr->done = done;
        clist_link_tail(&c->link_requests, &lr->link_cluster);
        /* Counts as pending until every entry was looked at, so nothing answers early. */
        lr->n_pending = 1;

        for (size_t i = 0; i < lr->n; i++) {
                Error e = ERROR_INIT;

                r = link_request_one(lr, i, m->clusters[i], &e);
                if (r == LINK_SETUP_RUNNING)
                        continue;
                lr->rets[i] = r;
                if (r != STATUS_OK) {
                        log_info("cluster %" PRIu64 ": link to %" PRIu64 " failed: %s", c->id,
                                 m->clusters[i]->remote_cluster_id, e.msg);
                        link_request_set_error(lr, i, &e);
                }
        }
        if (lr->n_pending > 1) {
                timeout_ms = m->timeout_ms ? m->timeout_ms : LINK_DEFAULT_TIMEOUT_MS;
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
