/* SPDX-License-Identifier: MIT */
/*
 * Peer channels: the channels between one of our devices and one of a peer's that a transport
 * opens with an exchange of its own (RDMA: RC queue pairs), connected path by path over the
 * peer's control connection. PeerChannelConnect carries our device and our end of a path as
 * the bytes the transport packed; the answer carries the peer's end, which the transport
 * unpacks. The daemon that needs a channel opens it and drives the connection (initiator); the
 * other side opens its end when asked (responder). Paths flushed after a timeout or an error
 * are connected again on next use. Nothing here reads what the transport packed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/link/link-root.h"
#include "daemon/link/link.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

struct PeerChannelWaiter {
        CList link;
        PeerChannel *pch;
        peer_channel_ready_fn fn;
        void *userdata;
};

struct PeerChannel {
        Peer *peer;
        TransportChannel *ch;
        uint32_t connecting;       /* paths with a PeerChannelConnect in flight */
        char error[ERROR_MSG_MAX]; /* the last connect failure */
        CList waiters;             /* PeerChannelWaiter.link */
        CList link_peer;           /* on Peer.channels */
};

typedef struct PathCall {
        PeerChannel *pch;
        unsigned slot;
} PathCall;

/* The transport the channels are its. */
static Transport *peer_channel_transport(const Peer *p)
{
        return link_channel_transport(p->root);
}

static TransportChannelInfo peer_channel_info(const PeerChannel *pch)
{
        TransportChannelInfo info;

        transport_channel_info(peer_channel_transport(pch->peer), pch->ch, &info);
        return info;
}

static void peer_channel_notify(PeerChannel *pch, int status, const char *reason)
{
        while (!clist_is_empty(&pch->waiters)) {
                PeerChannelWaiter *w = clist_first_entry(&pch->waiters, PeerChannelWaiter, link);

                clist_unlink(&w->link);
                w->fn(status == 0 ? pch->ch : NULL, status, reason, w->userdata);
                free(w);
        }
}

static void peer_channel_on_connect_reply(Peer *p, int status, const Error *err,
                                          const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerChannelConnectReply *m =
                (const Kvdist__V1__PeerChannelConnectReply *)reply;
        PathCall *pc = userdata;
        PeerChannel *pch = pc->pch;
        unsigned slot = pc->slot;
        int r = status == STATUS_OK ? 0 : -ECONNREFUSED;
        Transport *t = peer_channel_transport(p);
        TransportChannelInfo info;
        TransportPathInfo path;

        free(pc);
        if (!pch)
                return; /* the channel went with its peer */
        pch->connecting &= ~(UINT32_C(1) << slot);
        if (r == 0)
                r = transport_path_unpack(t, m->path.data, m->path.len, &path);
        if (r == 0)
                r = transport_path_connect(t, pch->ch, slot, &path);
        info = peer_channel_info(pch);
        if (r < 0) {
                (void)snprintf(pch->error, sizeof(pch->error), "path %u: %.200s", slot,
                               status != STATUS_OK && err ? err->msg : strerror(-r));
                log_warning("%s: %s channel path %u toward %s: %s", peer_name(p, (char[96]){0}, 96),
                            transport_name(t), slot, info.remote, pch->error);
        }
        if (pch->connecting != 0)
                return;
        if (info.broken_paths == (UINT32_C(1) << info.n_paths) - 1)
                peer_channel_notify(pch, -ECONNREFUSED, pch->error);
        else
                peer_channel_notify(pch, 0, NULL);
}

/* Connects every path of @pch that is not connected and not being connected. */
static int peer_channel_connect_paths(PeerChannel *pch)
{
        Kvdist__V1__PeerChannelConnect m = KVDIST__V1__PEER_CHANNEL_CONNECT__INIT;
        Transport *t = peer_channel_transport(pch->peer);
        TransportChannelInfo ch = peer_channel_info(pch);
        uint32_t broken = ch.broken_paths & ~pch->connecting;
        uint8_t device[TRANSPORT_PACKED_MAX], packed[TRANSPORT_PACKED_MAX];
        int r;

        r = transport_device_pack(t, &ch.local, device, sizeof(device));
        if (r < 0)
                return r;
        m.device.data = device;
        m.device.len = (size_t)r;
        m.channel_id = ch.id;
        m.n_slots = ch.n_paths;
        m.remote_device = (char *)ch.remote;
        for (unsigned i = 0; i < ch.n_paths; i++) {
                TransportPathInfo path;
                PathCall *pc;

                if (!(broken & (UINT32_C(1) << i)))
                        continue;
                r = transport_path_local(t, pch->ch, i, &path);
                if (r == -EBUSY)
                        continue;
                if (r >= 0)
                        r = transport_path_pack(t, &path, packed, sizeof(packed));
                if (r < 0)
                        return r;
                m.path.data = packed;
                m.path.len = (size_t)r;
                pc = malloc(sizeof(*pc));
                if (!pc)
                        return -ENOMEM;
                *pc = (PathCall){pch, i};
                m.slot = i;
                r = peer_call(pch->peer, KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT, &m.base,
                              peer_channel_on_connect_reply, pc, NULL);
                if (r < 0) {
                        free(pc);
                        return r;
                }
                pch->connecting |= UINT32_C(1) << i;
        }
        return 0;
}

static PeerChannel *peer_channel_find(Peer *p, bool initiator, const char *device,
                                      const char *remote_device, uint64_t id)
{
        PeerChannel *pch;

        CLIST_FOREACH (pch, &p->channels, link_peer) {
                TransportChannelInfo info = peer_channel_info(pch);

                if (info.initiator != initiator)
                        continue;
                /* Device names are unique in the device map. */
                if (initiator && strcmp(transport_device_name(&info.local), device) == 0 &&
                    strcmp(info.remote, remote_device) == 0)
                        return pch;
                if (!initiator && info.id == id)
                        return pch;
        }
        return NULL;
}

static int peer_channel_new(Peer *p, TransportChannel *ch, PeerChannel **ret)
{
        PeerChannel *pch = calloc(1, sizeof(*pch));

        if (!pch)
                return -ENOMEM;
        pch->peer = p;
        pch->ch = ch;
        clist_init(&pch->waiters);
        clist_link_tail(&p->channels, &pch->link_peer);
        *ret = pch;
        return 0;
}

/* Runs @fn once every path of @pch is connected (at once when it is) or the connection failed. */
static int peer_channel_wait(PeerChannel *pch, peer_channel_ready_fn fn, void *userdata,
                             PeerChannelWaiter **ret_waiter)
{
        PeerChannelWaiter *w;
        int r;

        if (transport_channel_ready(peer_channel_transport(pch->peer), pch->ch)) {
                fn(pch->ch, 0, NULL, userdata);
                return 0;
        }
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (PeerChannelWaiter){.pch = pch, .fn = fn, .userdata = userdata};
        clist_link_tail(&pch->waiters, &w->link);
        r = peer_channel_connect_paths(pch);
        if (r < 0) {
                clist_unlink(&w->link);
                free(w);
                return r;
        }
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

int peer_channel_get(Peer *p, const char *device, const TransportDeviceInfo *remote,
                     peer_channel_ready_fn fn, void *userdata, PeerChannelWaiter **ret_waiter)
{
        Transport *t = peer_channel_transport(p);
        TransportChannel *ch;
        PeerChannel *pch;
        int r;

        if (ret_waiter)
                *ret_waiter = NULL;
        pch = peer_channel_find(p, true, device, transport_device_name(remote), 0);
        if (!pch) {
                /* As many paths as the transport's config says. */
                TransportChannelSpec spec = {
                        .device = device,
                        .id = id_source_next(p->root->ids),
                        .initiator = true,
                        .remote = remote,
                };

                r = transport_channel_open(t, &spec, &ch);
                if (r < 0)
                        return r;
                r = peer_channel_new(p, ch, &pch);
                if (r < 0) {
                        transport_channel_close(t, ch);
                        return r;
                }
        }
        return peer_channel_wait(pch, fn, userdata, ret_waiter);
}

int peer_channel_when_ready(Peer *p, TransportChannel *ch, peer_channel_ready_fn fn, void *userdata,
                            PeerChannelWaiter **ret_waiter)
{
        PeerChannel *pch;

        if (ret_waiter)
                *ret_waiter = NULL;
        if (p->state != PEER_READY)
                return -ENOTCONN;
        CLIST_FOREACH (pch, &p->channels, link_peer)
                if (pch->ch == ch)
                        return peer_channel_wait(pch, fn, userdata, ret_waiter);
        return -ENOENT;
}

void peer_channel_waiter_cancel(PeerChannelWaiter *w)
{
        if (!w)
                return;
        clist_unlink(&w->link);
        free(w);
}

void peer_channel_repair(Peer *p, TransportChannel *ch)
{
        PeerChannel *pch;

        CLIST_FOREACH (pch, &p->channels, link_peer)
                if (pch->ch == ch) {
                        if (peer_channel_connect_paths(pch) < 0)
                                log_warning("%s: cannot reconnect %s channel paths, ignoring",
                                            peer_name(p, (char[96]){0}, 96),
                                            transport_name(peer_channel_transport(p)));
                        return;
                }
}

void peer_handle_channel_connect(void *userdata, Peer *p, uint64_t request_id,
                                 const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerChannelConnect *m = (const Kvdist__V1__PeerChannelConnect *)msg;
        Kvdist__V1__PeerChannelConnectReply reply = KVDIST__V1__PEER_CHANNEL_CONNECT_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Transport *t = peer_channel_transport(p);
        uint8_t device[TRANSPORT_PACKED_MAX], packed[TRANSPORT_PACKED_MAX];
        TransportDeviceInfo remote, local;
        TransportPathInfo path, remote_path;
        Error err = ERROR_INIT;
        PeerChannel *pch;
        TransportChannel *ch;
        int r;

        if (!m->remote_device || transport_device_info(t, 0, m->remote_device, &local, NULL) < 0) {
                error_set(&err, STATUS_FEATURE_NOT_ENABLED, "no working %s device %s here",
                          transport_name(t), m->remote_device ? m->remote_device : "");
                goto refuse;
        }
        if (m->n_slots == 0 || m->n_slots > TRANSPORT_MAX_PATHS || m->slot >= m->n_slots ||
            transport_device_unpack(t, m->device.data, m->device.len, &remote) < 0 ||
            transport_path_unpack(t, m->path.data, m->path.len, &remote_path) < 0) {
                error_set(&err, STATUS_PARAM_INVALID, "bad %s channel description",
                          transport_name(t));
                goto refuse;
        }
        pch = peer_channel_find(p, false, NULL, NULL, m->channel_id);
        if (!pch) {
                r = transport_channel_open(t,
                                           &(TransportChannelSpec){
                                                   .device = m->remote_device,
                                                   .id = m->channel_id,
                                                   .remote = &remote,
                                                   .n_paths = m->n_slots,
                                           },
                                           &ch);
                if (r >= 0) {
                        r = peer_channel_new(p, ch, &pch);
                        if (r < 0)
                                transport_channel_close(t, ch);
                }
                if (r < 0) {
                        error_set(&err, STATUS_FAILED, "cannot open a %s channel: %s",
                                  transport_name(t), strerror(-r));
                        goto refuse;
                }
        }
        if (m->n_slots != peer_channel_info(pch).n_paths) {
                error_set(&err, STATUS_PARAM_INVALID, "channel %" PRIu64 " has %u paths",
                          m->channel_id, peer_channel_info(pch).n_paths);
                goto refuse;
        }
        /* A path connected again (after a flush on the other side) starts anew. */
        r = transport_path_local(t, pch->ch, m->slot, &path);
        if (r >= 0)
                r = transport_path_connect(t, pch->ch, m->slot, &remote_path);
        if (r >= 0)
                r = transport_path_pack(t, &path, packed, sizeof(packed));
        if (r >= 0) {
                reply.path.data = packed;
                reply.path.len = (size_t)r;
                r = transport_device_pack(t, &local, device, sizeof(device));
        }
        if (r < 0) {
                error_set(&err, STATUS_FAILED, "cannot connect %s channel path %u: %s",
                          transport_name(t), m->slot, strerror(-r));
                goto refuse;
        }
        reply.device.data = device;
        reply.device.len = (size_t)r;
        reply.status = &status;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT, request_id,
                         &reply.base);
        return;
refuse:
        (void)peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT, request_id,
                               err.code, &err);
}

void peer_channel_foreach(Peer *p, void (*fn)(TransportChannel *ch, void *userdata), void *userdata)
{
        PeerChannel *pch;

        CLIST_FOREACH (pch, &p->channels, link_peer)
                fn(pch->ch, userdata);
}

void peer_channel_on_lost(Peer *p)
{
        while (!clist_is_empty(&p->channels)) {
                PeerChannel *pch = clist_first_entry(&p->channels, PeerChannel, link_peer);

                peer_channel_notify(pch, -ECONNRESET, "the peer was lost");
                clist_unlink(&pch->link_peer);
                /* Flushes the paths: every job on them fails before this returns. */
                transport_channel_close(peer_channel_transport(p), pch->ch);
                free(pch);
        }
}
