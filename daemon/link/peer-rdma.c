/* SPDX-License-Identifier: MIT */
/*
 * Peer RDMA endpoints: the RC queue pairs between one of our RDMA devices and one of a peer's,
 * connected slot by slot over the peer's control connection (PeerRdmaConnect carries our QP
 * number, PSN, GID and MTU; the answer carries the peer's). The daemon that needs an endpoint
 * creates it and drives the connection (initiator); the other side creates its half when asked
 * (responder). Slots flushed after a timeout or an error are connected again on next use. The
 * endpoints are channels of the RDMA transport, opened, connected and closed through its ops.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/link/link-root.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer-rdma.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

struct PeerRdmaWaiter {
        CList link;
        PeerRdmaEp *pep;
        peer_rdma_ready_fn fn;
        void *userdata;
};

struct PeerRdmaEp {
        Peer *peer;
        TransportChannel *ep;
        uint32_t connecting;       /* slots with a PeerRdmaConnect in flight */
        char error[ERROR_MSG_MAX]; /* the last connect failure */
        CList waiters;             /* PeerRdmaWaiter.link */
        CList link_peer;           /* on Peer.rdma_eps */
};

typedef struct SlotCall {
        PeerRdmaEp *pep;
        unsigned slot;
} SlotCall;

/* The transport the endpoints are channels of. */
static Transport *peer_rdma_transport(const Peer *p)
{
        return transport_set_get(p->root->transports, TRANSPORT_ROLE_DIRECT);
}

static TransportChannelInfo peer_rdma_ep_info(const PeerRdmaEp *pep)
{
        TransportChannelInfo info;

        transport_channel_info(peer_rdma_transport(pep->peer), pep->ep, &info);
        return info;
}

/* The wire form of @local, pointing into it. */
static void peer_rdma_info_to_wire(TransportDeviceInfo *local, Kvdist__V1__RdmaDeviceInfo *ret)
{
        ret->device = local->device;
        ret->gid.data = local->address;
        ret->gid.len = TRANSPORT_ADDRESS_SIZE;
        ret->port = local->port;
        ret->mtu = local->mtu;
        ret->lid = local->lid;
}

static void peer_rdma_notify(PeerRdmaEp *pep, int status, const char *reason)
{
        while (!clist_is_empty(&pep->waiters)) {
                PeerRdmaWaiter *w = clist_first_entry(&pep->waiters, PeerRdmaWaiter, link);

                clist_unlink(&w->link);
                w->fn(status == 0 ? pep->ep : NULL, status, reason, w->userdata);
                free(w);
        }
}

static void peer_rdma_on_connect_reply(Peer *p, int status, const Error *err,
                                       const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerRdmaConnectReply *m = (const Kvdist__V1__PeerRdmaConnectReply *)reply;
        SlotCall *sc = userdata;
        PeerRdmaEp *pep = sc->pep;
        unsigned slot = sc->slot;
        int r = status == STATUS_OK ? 0 : -ECONNREFUSED;
        TransportChannelInfo info;

        free(sc);
        if (!pep)
                return; /* the endpoint went with its peer */
        pep->connecting &= ~(UINT32_C(1) << slot);
        if (r == 0)
                r = transport_path_connect(peer_rdma_transport(p), pep->ep, slot,
                                           &(TransportPathInfo){m->qpn, m->psn});
        info = peer_rdma_ep_info(pep);
        if (r < 0) {
                (void)snprintf(pep->error, sizeof(pep->error), "slot %u: %.200s", slot,
                               status != STATUS_OK && err ? err->msg : strerror(-r));
                log_warning("%s: RDMA queue pair %u toward %s: %s", peer_name(p, (char[96]){0}, 96),
                            slot, info.remote, pep->error);
        }
        if (pep->connecting != 0)
                return;
        if (info.broken_paths == (UINT32_C(1) << info.n_paths) - 1)
                peer_rdma_notify(pep, -ECONNREFUSED, pep->error);
        else
                peer_rdma_notify(pep, 0, NULL);
}

/* Connects every slot of @pep that is not connected and not being connected. */
static int peer_rdma_connect_slots(PeerRdmaEp *pep)
{
        Kvdist__V1__PeerRdmaConnect m = KVDIST__V1__PEER_RDMA_CONNECT__INIT;
        Kvdist__V1__RdmaDeviceInfo info = KVDIST__V1__RDMA_DEVICE_INFO__INIT;
        Transport *t = peer_rdma_transport(pep->peer);
        TransportChannelInfo ch = peer_rdma_ep_info(pep);
        uint32_t broken = ch.broken_paths & ~pep->connecting;
        int r;

        peer_rdma_info_to_wire(&ch.local, &info);
        m.endpoint_id = ch.id;
        m.n_slots = ch.n_paths;
        m.remote_device = (char *)ch.remote;
        m.local = &info;
        for (unsigned i = 0; i < ch.n_paths; i++) {
                TransportPathInfo path;
                SlotCall *sc;

                if (!(broken & (UINT32_C(1) << i)))
                        continue;
                r = transport_path_local(t, pep->ep, i, &path);
                if (r == -EBUSY)
                        continue;
                if (r < 0)
                        return r;
                m.qpn = path.qpn;
                m.psn = path.psn;
                sc = malloc(sizeof(*sc));
                if (!sc)
                        return -ENOMEM;
                *sc = (SlotCall){pep, i};
                m.slot = i;
                r = peer_call(pep->peer, KVDIST__V1__MSG_TYPE__MSG_PEER_RDMA_CONNECT, &m.base,
                              peer_rdma_on_connect_reply, sc, NULL);
                if (r < 0) {
                        free(sc);
                        return r;
                }
                pep->connecting |= UINT32_C(1) << i;
        }
        return 0;
}

static PeerRdmaEp *peer_rdma_ep_find(Peer *p, bool initiator, const char *device,
                                     const char *remote_device, uint64_t id)
{
        PeerRdmaEp *pep;

        CLIST_FOREACH (pep, &p->rdma_eps, link_peer) {
                TransportChannelInfo info = peer_rdma_ep_info(pep);

                if (info.initiator != initiator)
                        continue;
                /* Device names are unique in the device map. */
                if (initiator && strcmp(info.local.device, device) == 0 &&
                    strcmp(info.remote, remote_device) == 0)
                        return pep;
                if (!initiator && info.id == id)
                        return pep;
        }
        return NULL;
}

static int peer_rdma_ep_new(Peer *p, TransportChannel *ep, PeerRdmaEp **ret)
{
        PeerRdmaEp *pep = calloc(1, sizeof(*pep));

        if (!pep)
                return -ENOMEM;
        pep->peer = p;
        pep->ep = ep;
        clist_init(&pep->waiters);
        clist_link_tail(&p->rdma_eps, &pep->link_peer);
        *ret = pep;
        return 0;
}

/* Runs @fn once every slot of @pep is connected (at once when it is) or the connection failed. */
static int peer_rdma_wait(PeerRdmaEp *pep, peer_rdma_ready_fn fn, void *userdata,
                          PeerRdmaWaiter **ret_waiter)
{
        PeerRdmaWaiter *w;
        int r;

        if (transport_channel_ready(peer_rdma_transport(pep->peer), pep->ep)) {
                fn(pep->ep, 0, NULL, userdata);
                return 0;
        }
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (PeerRdmaWaiter){.pep = pep, .fn = fn, .userdata = userdata};
        clist_link_tail(&pep->waiters, &w->link);
        r = peer_rdma_connect_slots(pep);
        if (r < 0) {
                clist_unlink(&w->link);
                free(w);
                return r;
        }
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

int peer_rdma_get(Peer *p, const char *device, const TransportDeviceInfo *remote,
                  peer_rdma_ready_fn fn, void *userdata, PeerRdmaWaiter **ret_waiter)
{
        Transport *t = peer_rdma_transport(p);
        TransportChannel *ep;
        PeerRdmaEp *pep;
        int r;

        if (ret_waiter)
                *ret_waiter = NULL;
        pep = peer_rdma_ep_find(p, true, device, remote->device, 0);
        if (!pep) {
                TransportChannelSpec spec = {
                        .device = device,
                        .id = id_source_next(p->root->ids),
                        .initiator = true,
                        .remote = remote,
                        .n_paths = p->root->options.rdma->qps,
                };

                r = transport_channel_open(t, &spec, &ep);
                if (r < 0)
                        return r;
                r = peer_rdma_ep_new(p, ep, &pep);
                if (r < 0) {
                        transport_channel_close(t, ep);
                        return r;
                }
        }
        return peer_rdma_wait(pep, fn, userdata, ret_waiter);
}

int peer_rdma_when_ready(Peer *p, TransportChannel *ep, peer_rdma_ready_fn fn, void *userdata,
                         PeerRdmaWaiter **ret_waiter)
{
        PeerRdmaEp *pep;

        if (ret_waiter)
                *ret_waiter = NULL;
        if (p->state != PEER_READY)
                return -ENOTCONN;
        CLIST_FOREACH (pep, &p->rdma_eps, link_peer)
                if (pep->ep == ep)
                        return peer_rdma_wait(pep, fn, userdata, ret_waiter);
        return -ENOENT;
}

void peer_rdma_waiter_cancel(PeerRdmaWaiter *w)
{
        if (!w)
                return;
        clist_unlink(&w->link);
        free(w);
}

void peer_rdma_repair(Peer *p, TransportChannel *ep)
{
        PeerRdmaEp *pep;

        CLIST_FOREACH (pep, &p->rdma_eps, link_peer)
                if (pep->ep == ep) {
                        if (peer_rdma_connect_slots(pep) < 0)
                                log_warning("%s: cannot reconnect RDMA queue pairs, ignoring",
                                            peer_name(p, (char[96]){0}, 96));
                        return;
                }
}

void peer_handle_rdma_connect(void *userdata, Peer *p, uint64_t request_id,
                              const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerRdmaConnect *m = (const Kvdist__V1__PeerRdmaConnect *)msg;
        Kvdist__V1__PeerRdmaConnectReply reply = KVDIST__V1__PEER_RDMA_CONNECT_REPLY__INIT;
        Kvdist__V1__RdmaDeviceInfo info = KVDIST__V1__RDMA_DEVICE_INFO__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Transport *t = peer_rdma_transport(p);
        TransportDeviceInfo remote = {0}, local;
        TransportPathInfo path;
        Error err = ERROR_INIT;
        PeerRdmaEp *pep;
        TransportChannel *ep;
        int r;

        if (!m->remote_device || transport_device_info(t, 0, m->remote_device, &local, NULL) < 0) {
                error_set(&err, STATUS_FEATURE_NOT_ENABLED, "no working RDMA device %s here",
                          m->remote_device ? m->remote_device : "");
                goto refuse;
        }
        if (!m->local || m->local->gid.len != TRANSPORT_ADDRESS_SIZE || m->n_slots == 0 ||
            m->n_slots > TRANSPORT_MAX_PATHS || m->slot >= m->n_slots) {
                error_set(&err, STATUS_PARAM_INVALID, "bad RDMA endpoint description");
                goto refuse;
        }
        pep = peer_rdma_ep_find(p, false, NULL, NULL, m->endpoint_id);
        if (!pep) {
                (void)snprintf(remote.device, sizeof(remote.device), "%s",
                               m->local->device ? m->local->device : "");
                memcpy(remote.address, m->local->gid.data, TRANSPORT_ADDRESS_SIZE);
                remote.port = (uint8_t)m->local->port;
                remote.mtu = m->local->mtu;
                remote.lid = (uint16_t)m->local->lid;
                r = transport_channel_open(t,
                                           &(TransportChannelSpec){
                                                   .device = m->remote_device,
                                                   .id = m->endpoint_id,
                                                   .remote = &remote,
                                                   .n_paths = m->n_slots,
                                           },
                                           &ep);
                if (r >= 0) {
                        r = peer_rdma_ep_new(p, ep, &pep);
                        if (r < 0)
                                transport_channel_close(t, ep);
                }
                if (r < 0) {
                        error_set(&err, STATUS_FAILED, "cannot create an RDMA endpoint: %s",
                                  strerror(-r));
                        goto refuse;
                }
        }
        if (m->n_slots != peer_rdma_ep_info(pep).n_paths) {
                error_set(&err, STATUS_PARAM_INVALID, "endpoint %" PRIu64 " has %u slots",
                          m->endpoint_id, peer_rdma_ep_info(pep).n_paths);
                goto refuse;
        }
        /* A slot connected again (after a flush on the other side) starts from a new QP. */
        r = transport_path_local(t, pep->ep, m->slot, &path);
        if (r >= 0)
                r = transport_path_connect(t, pep->ep, m->slot,
                                           &(TransportPathInfo){m->qpn, m->psn});
        if (r < 0) {
                error_set(&err, STATUS_FAILED, "cannot connect RDMA queue pair %u: %s", m->slot,
                          strerror(-r));
                goto refuse;
        }
        reply.qpn = path.qpn;
        reply.psn = path.psn;
        peer_rdma_info_to_wire(&local, &info);
        reply.status = &status;
        reply.local = &info;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_RDMA_CONNECT, request_id, &reply.base);
        return;
refuse:
        (void)peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_RDMA_CONNECT, request_id, err.code,
                               &err);
}

void peer_rdma_foreach(Peer *p, void (*fn)(TransportChannel *ep, void *userdata), void *userdata)
{
        PeerRdmaEp *pep;

        CLIST_FOREACH (pep, &p->rdma_eps, link_peer)
                fn(pep->ep, userdata);
}

void peer_rdma_on_lost(Peer *p)
{
        while (!clist_is_empty(&p->rdma_eps)) {
                PeerRdmaEp *pep = clist_first_entry(&p->rdma_eps, PeerRdmaEp, link_peer);

                peer_rdma_notify(pep, -ECONNRESET, "the peer was lost");
                clist_unlink(&pep->link_peer);
                /* Flushes the queue pairs: every job on them fails before this returns. */
                transport_channel_close(peer_rdma_transport(p), pep->ep);
                free(pep);
        }
}
