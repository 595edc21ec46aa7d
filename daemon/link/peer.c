/* SPDX-License-Identifier: MIT */
/* Peer: the control connection to another kvdistd: its life, I/O, calls and heartbeats. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include "daemon/link/link-root.h"
#include <kvdist/kvdist-version.h>
#include "kvdist-config.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer-internal.h"
#include "daemon/link/peer-channel.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "common/status.h"
#include "proto/status-wire.h"

/* Frames served per wake-up, so one busy peer cannot starve the loop. */
#define PEER_FRAMES_PER_WAKEUP 16
/* Output a peer may leave unread before it is dropped. */
#define PEER_MAX_OUT_BYTES (256u << 20)
/* Room on top of the frame limit for what a peer request adds to a client request. */
#define PEER_FRAME_SLACK (64u << 10)

struct PeerCall {
        CList link; /* on Peer.calls */
        uint64_t id;
        uint16_t type;
        peer_reply_fn fn;
        void *userdata;
};

struct PeerWaiter {
        CList link; /* on Peer.waiters */
        Peer *peer;
        peer_ready_fn fn;
        void *userdata;
};

static void peer_on_io(evutil_socket_t fd, short what, void *userdata);
static void peer_on_timer(evutil_socket_t fd, short what, void *userdata);
static void peer_on_lose(evutil_socket_t fd, short what, void *userdata);

const char *peer_state_to_string(PeerState s)
{
        static const char *const names[_PEER_STATE_MAX] = {
                [PEER_CONNECTING] = "connecting",
                [PEER_HANDSHAKE] = "handshake",
                [PEER_DATA] = "data",
                [PEER_READY] = "ready",
                [PEER_CLOSED] = "closed",
        };

        return s >= 0 && s < _PEER_STATE_MAX ? names[s] : "invalid";
}

const char *peer_name(const Peer *p, char *buf, size_t size)
{
        (void)snprintf(buf, size, "peer %" PRIu64 " (%s)", p->id,
                       p->address[0] ? p->address : p->remote);
        return buf;
}

void peer_set_state(Peer *p, PeerState state)
{
        assert(state >= 0 && state < _PEER_STATE_MAX);
        /* Forward only: CONNECTING -> HANDSHAKE -> DATA -> READY, any -> CLOSED. */
        assert(state > p->state);
        p->state = state;
}

int peer_arm_timer(Peer *p, uint64_t ms)
{
        struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                             .tv_usec = (suseconds_t)(ms % 1000) * 1000};

        return evtimer_add(p->timer, &tv) < 0 ? -ENOMEM : 0;
}

Peer *peer_new(LinkRoot *root, int fd, bool dialed)
{
        Peer *p;

        p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->root = root;
        p->id = id_source_next(root->ids);
        p->state = dialed ? PEER_CONNECTING : PEER_HANDSHAKE;
        p->dialed = dialed;
        p->fd = fd;
        for (size_t i = 0; i < ARRAY_SIZE(p->data_fds); i++)
                p->data_fds[i] = -1;
        p->max_frame = root->options.limits->max_frame_size + PEER_FRAME_SLACK;
        p->created_usec = p->last_rx_usec = now_usec(CLOCK_MONOTONIC);
        p->next_call_id = 1;
        wire_in_init(&p->in);
        wire_out_init(&p->out);
        clist_init(&p->calls);
        clist_init(&p->waiters);
        clist_init(&p->links);
        clist_init(&p->inlinks);
        clist_init(&p->transfers);
        clist_init(&p->served);
        clist_init(&p->channels);
        clist_link_tail(&root->peers, &p->link_daemon);
        root->n_peers++;
        p->ev_read = event_new(root->base, fd, EV_READ | EV_PERSIST, peer_on_io, p);
        p->ev_write = event_new(root->base, fd, EV_WRITE | EV_PERSIST, peer_on_io, p);
        p->timer = evtimer_new(root->base, peer_on_timer, p);
        p->ev_lose = evtimer_new(root->base, peer_on_lose, p);
        return p;
}

/* Its request being decoded off the loop is dropped, never handled. */
static void peer_forget_decoding(Peer *p)
{
        if (!p->decoding)
                return;
        p->root->decoder.forget(p->decoding);
        p->decoding = NULL;
}

void peer_free(Peer *p)
{
        peer_forget_decoding(p);
        wire_in_reset(&p->in);
        wire_out_clear(&p->out);
        peer_auth_deinit(&p->auth);
        explicit_bzero(p->data_token, sizeof(p->data_token));
        for (size_t i = 0; i < ARRAY_SIZE(p->data_fds); i++) {
                if (p->data_ev[i])
                        event_free(p->data_ev[i]);
                safe_close(p->data_fds[i]);
        }
        if (p->ev_read)
                event_free(p->ev_read);
        if (p->ev_write)
                event_free(p->ev_write);
        if (p->timer)
                event_free(p->timer);
        if (p->ev_lose)
                event_free(p->ev_lose);
        safe_close(p->fd);
        clist_unlink(&p->link_daemon);
        p->root->n_peers--;
        free(p);
}

void peer_on_free_later(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;

        /* The data plane goes last: its jobs' callbacks fail the transfers still waiting. */
        p->data = transport_channel_close(
                transport_set_get(p->root->transports, TRANSPORT_ROLE_STREAM), p->data);
        peer_free(p);
}

void peer_lose(Peer *p, int status, const char *fmt, ...)
{
        static const struct timeval now = {0, 0};
        PeerCall *call;
        PeerWaiter *w;
        Error err = ERROR_INIT;
        bool was_ready;
        va_list ap;

        if (p->state == PEER_CLOSED)
                return;
        was_ready = p->state == PEER_READY;
        va_start(ap, fmt);
        error_setv(&err, status, fmt, ap);
        va_end(ap);
        if (was_ready || p->dialed)
                log_warning("%s: lost: %s", PEER_NAME(p), err.msg);
        else
                log_info("%s: closed: %s", PEER_NAME(p), err.msg);
        peer_set_state(p, PEER_CLOSED);
        peer_forget_decoding(p);
        event_del(p->ev_read);
        event_del(p->ev_write);
        event_del(p->timer);
        event_del(p->ev_lose);
        if (p->fd >= 0)
                (void)shutdown(p->fd, SHUT_RDWR);

        /* One at a time from the head: a callback may cancel other waiters or calls. */
        while (!clist_is_empty(&p->waiters)) {
                w = clist_first_entry(&p->waiters, PeerWaiter, link);
                clist_unlink(&w->link);
                w->fn(p, status, &err, w->userdata);
                free(w);
        }
        while (!clist_is_empty(&p->calls)) {
                call = clist_first_entry(&p->calls, PeerCall, link);
                clist_unlink(&call->link);
                call->fn(p, status, &err, NULL, call->userdata);
                free(call);
        }
        link_peer_lost(p, status);
        hook_list_emit(&p->root->events, LinkEvents, peer_lost, p, status);
        peer_channel_on_lost(p);
        hook_list_emit(&p->root->events, LinkEvents, peer_flushed, p, status);
        if (was_ready)
                p->root->counters.peers_lost++;
        link_root_changed(p->root);

        if (event_base_once(p->root->base, -1, EV_TIMEOUT, peer_on_free_later, p, &now) < 0)
                log_error("%s: cannot schedule its release", PEER_NAME(p));
}

static void peer_on_lose(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;

        peer_lose(p, p->loss.code, "%s", p->loss.msg);
}

/*
 * Loses @p on the next turn of the loop. A sender's callers hold links, transfers and domains
 * that a loss tears down, so a loss found while sending never runs under them; until it runs,
 * the peer reads nothing and takes no more frames (peer_send_frame() answers -ENOTCONN).
 */
_printf_(3, 4) static void peer_lose_later(Peer *p, int status, const char *fmt, ...)
{
        static const struct timeval now = {0, 0};
        va_list ap;

        if (p->state == PEER_CLOSED || p->loss.code != 0)
                return;
        va_start(ap, fmt);
        error_setv(&p->loss, status, fmt, ap);
        va_end(ap);
        event_del(p->ev_read);
        event_del(p->ev_write);
        if (event_add(p->ev_lose, &now) < 0)
                log_error("%s: cannot schedule its loss (%s)", PEER_NAME(p), p->loss.msg);
}

/* Writes what the socket takes; returns a negative errno when the connection broke. */
static int peer_write(Peer *p)
{
        int r;

        r = wire_out_write(&p->out, p->fd);
        if (r < 0)
                return r;
        if (wire_out_is_empty(&p->out))
                event_del(p->ev_write);
        else
                (void)event_add(p->ev_write, NULL);
        return 0;
}

static int peer_send_frame(Peer *p, uint16_t type, uint16_t flags, uint64_t id,
                           const ProtobufCMessage *msg)
{
        uint8_t *buf;
        size_t len;
        int r;

        if (p->state == PEER_CLOSED || p->state == PEER_CONNECTING || p->loss.code != 0)
                return -ENOTCONN;
        r = frame_pack(type, flags, id, 0, msg, p->max_frame, &buf, &len);
        if (r < 0)
                return r;
        if (p->out.bytes + len > PEER_MAX_OUT_BYTES) {
                free(buf);
                peer_lose_later(p, STATUS_PEER_LOST, "%zu bytes unread by the peer", p->out.bytes);
                return -ENOBUFS;
        }
        r = wire_out_queue(&p->out, buf, len, -1);
        if (r < 0)
                return r;
        r = peer_write(p);
        if (r < 0) {
                peer_lose_later(p, STATUS_PEER_LOST, "write failed: %s", strerror(-r));
                return -ENOTCONN;
        }
        return 0;
}

/* A call in any state but CLOSED: the handshake uses calls too. */
int peer_call_internal(Peer *p, uint16_t type, const ProtobufCMessage *msg, peer_reply_fn fn,
                       void *userdata, PeerCall **ret_call)
{
        PeerCall *call;
        int r;

        call = calloc(1, sizeof(*call));
        if (!call)
                return -ENOMEM;
        call->id = p->next_call_id++;
        call->type = type;
        call->fn = fn;
        call->userdata = userdata;
        r = peer_send_frame(p, type, 0, call->id, msg);
        if (r < 0) {
                free(call);
                return r;
        }
        clist_link_tail(&p->calls, &call->link);
        if (ret_call)
                *ret_call = call;
        return 0;
}

int peer_call(Peer *p, uint16_t type, const ProtobufCMessage *msg, peer_reply_fn fn, void *userdata,
              PeerCall **ret_call)
{
        if (p->state != PEER_READY)
                return -ENOTCONN;
        return peer_call_internal(p, type, msg, fn, userdata, ret_call);
}

void peer_call_redirect(PeerCall *call, peer_reply_fn fn, void *userdata)
{
        call->fn = fn;
        call->userdata = userdata;
}

void *peer_call_userdata(const PeerCall *call)
{
        return call->userdata;
}

int peer_notice(Peer *p, uint16_t type, const ProtobufCMessage *msg)
{
        if (p->state != PEER_READY && type != KVDIST__V1__MSG_TYPE__MSG_PEER_READY)
                return -ENOTCONN;
        return peer_send_frame(p, type, 0, 0, msg);
}

int peer_reply(Peer *p, uint16_t type, uint64_t request_id, const ProtobufCMessage *reply)
{
        if (request_id == 0)
                return 0;
        return peer_send_frame(p, type, FRAME_FLAG_REPLY, request_id, reply);
}

int peer_reply_error(Peer *p, uint16_t type, uint64_t request_id, int code, const Error *err)
{
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;

        p->root->counters.peer_requests_refused++;
        if (request_id == 0)
                return 0;
        status.code = status_wire_encode(code);
        status.detail = (char *)(err ? err->msg : "");
        return peer_send_frame(p, type, FRAME_FLAG_REPLY | FRAME_FLAG_ERROR, request_id,
                               &status.base);
}

int peer_when_ready(Peer *p, peer_ready_fn fn, void *userdata, PeerWaiter **ret_waiter)
{
        PeerWaiter *w;

        if (p->state == PEER_READY) {
                if (ret_waiter)
                        *ret_waiter = NULL;
                fn(p, STATUS_OK, NULL, userdata);
                return 0;
        }
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->peer = p;
        w->fn = fn;
        w->userdata = userdata;
        clist_link_tail(&p->waiters, &w->link);
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

void peer_waiter_cancel(PeerWaiter *w)
{
        if (!w)
                return;
        clist_unlink(&w->link);
        free(w);
}

/* The daemon that dialed @p's connection: ties between two connections go to the lower one. */
static uint64_t peer_dialer_node_id(const Peer *p)
{
        return p->dialed ? p->root->node_id : p->node_id;
}

void peer_become_ready(Peer *p)
{
        LinkRoot *root = p->root;
        PeerWaiter *w;
        Peer *q;

        peer_set_state(p, PEER_READY);
        p->last_rx_usec = now_usec(CLOCK_MONOTONIC);
        event_del(p->timer);
        (void)peer_arm_timer(p, *root->options.heartbeat_interval_ms);

        /* Two daemons that dialed each other at once end up with two connections: both keep
         * the one dialed by the lower node id for new links; the other serves what it has. */
        CLIST_FOREACH (q, &root->peers, link_daemon) {
                if (q == p || q->state != PEER_READY || q->node_id != p->node_id || q->retiring)
                        continue;
                if (peer_dialer_node_id(p) > peer_dialer_node_id(q))
                        p->retiring = true;
                else
                        q->retiring = true;
                log_info("%s and %s reach the same daemon; %s takes new links", PEER_NAME(p),
                         PEER_NAME(q), PEER_NAME(p->retiring ? q : p));
        }

        log_info("%s: ready: %s, node %016" PRIx64 ", %s, %u data connections%s", PEER_NAME(p),
                 p->identity, p->node_id,
                 p->authenticated ? "authenticated with the cluster key" : "NOT authenticated",
                 p->n_streams, p->crc ? ", CRC32C on" : "");
        link_root_changed(root);
        while (!clist_is_empty(&p->waiters) && p->state == PEER_READY) {
                w = clist_first_entry(&p->waiters, PeerWaiter, link);
                clist_unlink(&w->link);
                w->fn(p, STATUS_OK, NULL, w->userdata);
                free(w);
        }
}

/* ---- input ---- */

/* The types a READY peer may send besides heartbeats; their handlers are registered at start,
 * at the same index of LinkRoot.handlers. */
static const uint16_t peer_ready_types[] = {
        KVDIST__V1__MSG_TYPE__MSG_PEER_LINK,
        KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK,
        KVDIST__V1__MSG_TYPE__MSG_PEER_CLUSTER_GONE,
        KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER,
        KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_DONE,
        KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_CANCEL,
        KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT,
        KVDIST__V1__MSG_TYPE__MSG_PEER_REMOTE_DONE,
        KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN,
        KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LINKED,
        KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_READY,
        KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LEAVE,
        KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_XFER,
};

_Static_assert(ARRAY_SIZE(peer_ready_types) == PEER_N_HANDLERS,
               "PeerHandlers has one slot per type a READY peer may send");

/* The index of @type in peer_ready_types, or -1 when a READY peer may not send it. */
static int peer_ready_type_index(uint16_t type)
{
        for (size_t i = 0; i < ARRAY_SIZE(peer_ready_types); i++)
                if (peer_ready_types[i] == type)
                        return (int)i;
        return -1;
}

void peer_handlers_register(LinkRoot *root, const PeerHandler *handlers, size_t n, void *userdata)
{
        for (size_t i = 0; i < n; i++) {
                int k = peer_ready_type_index(handlers[i].type);

                assert(k >= 0 && handlers[i].fn);
                assert(!root->handlers.fn[k]);
                root->handlers.fn[k] = handlers[i].fn;
                root->handlers.userdata[k] = userdata;
        }
}

/* link/'s own: links to our clusters and the channels under them. */
static const PeerHandler peer_link_handlers[] = {
        {KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, peer_handle_link},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, peer_handle_unlink},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_CLUSTER_GONE, peer_handle_cluster_gone},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT, peer_handle_channel_connect},
};

void peer_handlers_init(LinkRoot *root)
{
        peer_handlers_register(root, peer_link_handlers, ARRAY_SIZE(peer_link_handlers), root);
}

static void peer_on_heartbeat(Peer *p, uint64_t id, const Kvdist__V1__PeerHeartbeat *m)
{
        Kvdist__V1__PeerHeartbeatReply reply = KVDIST__V1__PEER_HEARTBEAT_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;

        reply.status = &status;
        reply.seq = m->seq;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT, id, &reply.base);
}

/* A reply: the call it answers gets it, decoded. */
static void peer_dispatch_reply(Peer *p, const FrameType *ft)
{
        const FrameHeader *h = &p->in.frame;
        ProtobufCMessage *msg = NULL;
        const Kvdist__V1__Status *st;
        Error err = ERROR_INIT;
        PeerCall *call = NULL, *c;
        int r;

        CLIST_FOREACH (c, &p->calls, link)
                if (c->id == h->request_id) {
                        call = c;
                        break;
                }
        if (!call || call->type != h->type) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH,
                          "a reply to no request (type %u, id %" PRIu64 ")", h->type,
                          h->request_id);
                return;
        }
        r = frame_unpack((h->flags & FRAME_FLAG_ERROR) ? &kvdist__v1__status__descriptor
                                                       : ft->reply,
                         p->in.payload, p->in.payload_len, &msg);
        if (r < 0) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "undecodable %s reply", ft->name);
                return;
        }
        /* Every reply has Status as field 1; an error frame is a bare Status. */
        st = (h->flags & FRAME_FLAG_ERROR)
                     ? (const Kvdist__V1__Status *)msg
                     : *(Kvdist__V1__Status *const *)((const uint8_t *)msg +
                                                      ft->reply->fields[0].offset);
        clist_unlink(&call->link);
        if (!st || st->code >= 0) {
                if (h->flags & FRAME_FLAG_ERROR)
                        error_set(&err, STATUS_PROTOCOL_MISMATCH, "an error reply without error");
                call->fn(p, (h->flags & FRAME_FLAG_ERROR) ? STATUS_PROTOCOL_MISMATCH : STATUS_OK,
                         &err, (h->flags & FRAME_FLAG_ERROR) ? NULL : msg, call->userdata);
        } else {
                int code = status_wire_decode(st->code);

                error_set(&err, code, "%s", st->detail ? st->detail : "");
                call->fn(p, code, &err, NULL, call->userdata);
        }
        free(call);
        protobuf_c_message_free_unpacked(msg, NULL);
}

/* A request of a READY peer, decoded: to its handler, or refused as no peer request. */
static void peer_dispatch_ready(Peer *p, const FrameType *ft, uint16_t type, uint64_t request_id,
                                ProtobufCMessage *msg)
{
        Error err = ERROR_INIT;
        int k;

        if (type == KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT) {
                peer_on_heartbeat(p, request_id, (Kvdist__V1__PeerHeartbeat *)msg);
                return;
        }
        k = peer_ready_type_index(type);
        if (k >= 0 && p->root->handlers.fn[k]) {
                p->root->handlers.fn[k](p->root->handlers.userdata[k], p, request_id, msg);
                return;
        }
        error_set(&err, STATUS_UNSUPPORTED, "%s is not a peer request", ft->name);
        (void)peer_reply_error(p, type, request_id, STATUS_UNSUPPORTED, &err);
}

static void peer_decoded(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                         const FrameListFacts *facts, size_t n_facts, void *userdata)
{
        Peer *p = userdata;
        const FrameType *ft = frame_type_lookup(p->decoding_type);

        /* peer_lose() and peer_free() forget the job: the peer is READY, maybe losing */
        p->decoding = NULL;
        if (r < 0) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "undecodable %s", ft->name);
                return;
        }
        p->root->counters.frames_decoded_away++;
        peer_dispatch_ready(p, ft, p->decoding_type, p->decoding_request_id, msg);
        protobuf_c_message_free_unpacked(msg, NULL);
        if (p->state == PEER_CLOSED || p->loss.code != 0)
                return;
        if (event_add(p->ev_read, NULL) < 0) {
                peer_lose(p, STATUS_OUT_OF_MEMORY, "cannot watch the connection");
                return;
        }
        /* what was read ahead, or the socket: peer_read() sorts it out */
        event_active(p->ev_read, EV_READ, 0);
}

/*
 * A READY peer's request of FRAME_DECODE_AWAY_BYTES or more, for a handler (a transfer's
 * 200,000 block ids are 600 KB), is decoded on the daemon's decoder thread: the loop serves the
 * others meanwhile, and this peer's connection reads nothing more until the request was handled,
 * so its frames keep their order. True when it went there (or the peer was lost trying).
 */
static bool peer_decode_away(Peer *p, const FrameType *ft)
{
        const LinkDecoder *dec = &p->root->decoder;
        const FrameHeader *h = &p->in.frame;
        int k = peer_ready_type_index(h->type);
        int r;

        if (!dec->submit || p->in.payload_len < FRAME_DECODE_AWAY_BYTES || k < 0 ||
            !p->root->handlers.fn[k])
                return false;
        p->decoding_type = h->type;
        p->decoding_request_id = h->request_id;
        r = dec->submit(dec->decoder, ft->request, TAKE_PTR(p->in.payload), p->in.payload_len,
                        peer_decoded, p, &p->decoding);
        p->in.payload_len = 0;
        if (r < 0) {
                peer_lose(p, STATUS_OUT_OF_MEMORY, "cannot decode a %s off the loop: %s", ft->name,
                          strerror(-r));
                return true;
        }
        event_del(p->ev_read);
        return true;
}

static void peer_dispatch_frame(Peer *p)
{
        const FrameHeader *h = &p->in.frame;
        const FrameType *ft = frame_type_lookup(h->type);
        ProtobufCMessage *msg = NULL;
        Error err = ERROR_INIT;
        int r;

        if (!ft) {
                if (h->flags & FRAME_FLAG_REPLY) {
                        peer_lose(p, STATUS_PROTOCOL_MISMATCH, "reply of unknown type %u", h->type);
                        return;
                }
                error_set(&err, STATUS_UNSUPPORTED,
                          "request type %u is not supported by "
                          "kvdistd " KVDIST_VERSION,
                          h->type);
                (void)peer_reply_error(p, h->type, h->request_id, STATUS_UNSUPPORTED, &err);
                return;
        }
        if (h->n_fds > 0) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "fds on a TCP connection");
                return;
        }
        if (h->flags & FRAME_FLAG_REPLY) {
                peer_dispatch_reply(p, ft);
                return;
        }
        if (p->state == PEER_READY && peer_decode_away(p, ft))
                return;
        r = frame_unpack(ft->request, p->in.payload, p->in.payload_len, &msg);
        if (r < 0) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "undecodable %s", ft->name);
                return;
        }

        switch (p->state) {
        case PEER_HANDSHAKE:
                if (p->dialed)
                        break;
                if (h->type == KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO &&
                    peer_auth_get_state(&p->auth) == PEER_AUTH_START && p->node_id == 0) {
                        peer_on_hello(p, h->request_id, (Kvdist__V1__PeerHello *)msg);
                        goto out;
                }
                if (h->type == KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH && p->node_id != 0) {
                        peer_on_auth(p, h->request_id, (Kvdist__V1__PeerAuth *)msg);
                        goto out;
                }
                if (h->type == KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO && p->node_id == 0) {
                        peer_on_data_hello(p, (Kvdist__V1__PeerDataHello *)msg);
                        goto out;
                }
                break;
        case PEER_DATA:
                if (h->type == KVDIST__V1__MSG_TYPE__MSG_PEER_READY) {
                        peer_on_ready_notice(p);
                        goto out;
                }
                break;
        case PEER_READY:
                peer_dispatch_ready(p, ft, h->type, h->request_id, msg);
                goto out;
        default:
                break;
        }
        peer_lose(p, STATUS_PROTOCOL_MISMATCH, "%s in state %s", ft->name,
                  peer_state_to_string(p->state));
out:
        protobuf_c_message_free_unpacked(msg, NULL);
}

static void peer_read(Peer *p)
{
        if (p->decoding)
                return;
        for (int i = 0; i < PEER_FRAMES_PER_WAKEUP && p->state != PEER_CLOSED && p->loss.code == 0;
             i++) {
                int r = wire_in_read(&p->in, p->fd, p->max_frame, 0);

                if (r == 0)
                        return;
                if (r < 0) {
                        if (r != -ECONNRESET)
                                p->root->counters.frames_malformed++;
                        else if (peer_on_handshake_closed(p))
                                return;
                        peer_lose(p, STATUS_PEER_LOST, "%s",
                                  r == -ECONNRESET ? "connection closed" : strerror(-r));
                        return;
                }
                p->last_rx_usec = now_usec(CLOCK_MONOTONIC);
                peer_dispatch_frame(p);
                wire_in_reset(&p->in);
                /* Its frames keep their order: the next waits for this one's decoding. */
                if (p->decoding)
                        return;
        }
}

static void peer_on_connected(Peer *p)
{
        socklen_t len = sizeof(int);
        int e = 0;

        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
                e = errno;
        if (e != 0) {
                peer_lose(p, STATUS_LINK_FAILED, "connect: %s", strerror(e));
                return;
        }
        peer_set_state(p, PEER_HANDSHAKE);
        event_del(p->ev_write);
        if (event_add(p->ev_read, NULL) < 0) {
                peer_lose(p, STATUS_OUT_OF_MEMORY, "cannot watch the connection");
                return;
        }
        peer_send_hello(p);
}

static void peer_on_io(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;
        int r;

        if (p->state == PEER_CONNECTING) {
                peer_on_connected(p);
                return;
        }
        /* Input first: a reply in the buffer may free room for what is queued. */
        if (what & EV_READ)
                peer_read(p);
        if ((what & EV_WRITE) && p->state != PEER_CLOSED && p->loss.code == 0) {
                r = peer_write(p);
                if (r < 0)
                        peer_lose(p, STATUS_PEER_LOST, "write failed: %s", strerror(-r));
        }
}

static void peer_on_heartbeat_reply(Peer *p, int status, const Error *err,
                                    const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerHeartbeatReply *m = (const Kvdist__V1__PeerHeartbeatReply *)reply;

        if (status == STATUS_OK && m->seq == p->heartbeat_seq)
                p->rtt_usec = now_usec(CLOCK_MONOTONIC) - p->heartbeat_sent_usec;
}

static void peer_on_timer(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;
        uint32_t timeout_ms = *p->root->options.heartbeat_timeout_ms;
        Kvdist__V1__PeerHeartbeat hb = KVDIST__V1__PEER_HEARTBEAT__INIT;
        usec_t now = now_usec(CLOCK_MONOTONIC), silent = now - p->last_rx_usec;

        if (p->state != PEER_READY) {
                peer_lose(p, STATUS_TIMEOUT, "no %s within %d ms",
                          p->state == PEER_CONNECTING ? "connection" : "handshake",
                          PEER_HANDSHAKE_TIMEOUT_MS);
                return;
        }
        if (silent > (usec_t)timeout_ms * USEC_PER_MSEC) {
                peer_lose(p, STATUS_PEER_LOST,
                          "nothing heard for %" PRIu64 " ms (heartbeat "
                          "timeout %" PRIu32 " ms)",
                          silent / USEC_PER_MSEC, timeout_ms);
                return;
        }
        hb.seq = ++p->heartbeat_seq;
        p->heartbeat_sent_usec = now;
        (void)peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT, &hb.base,
                        peer_on_heartbeat_reply, NULL, NULL);
        if (p->state == PEER_READY)
                (void)peer_arm_timer(p, *p->root->options.heartbeat_interval_ms);
}
