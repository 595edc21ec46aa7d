/* SPDX-License-Identifier: MIT */
/* Peer: the control connection to another kvdistd, its handshake, calls and heartbeats. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "daemon.h"
#include "kvdist-config.h"
#include "kvdist.pb-c.h"
#include "log.h"
#include "peer-handlers.h"
#include "peer.h"
#include "random-util.h"

/* A connection that has not become READY by then is given up. */
#define PEER_HANDSHAKE_TIMEOUT_MS 10000
/* Frames served per wake-up, so one busy peer cannot starve the loop. */
#define PEER_FRAMES_PER_WAKEUP 16
/* Output a peer may leave unread before it is dropped. */
#define PEER_MAX_OUT_BYTES (256u << 20)
/* Room on top of the frame limit for what a peer request adds to a client request. */
#define PEER_FRAME_SLACK (64u << 10)
#define PEER_KEY_MAX (64u << 10)
#define PEER_KEY_MIN 16

struct PeerCall {
        CList link;                     /* on Peer.calls */
        uint64_t id;
        uint16_t type;
        peer_reply_fn fn;
        void *userdata;
};

struct PeerWaiter {
        CList link;                     /* on Peer.waiters */
        Peer *peer;
        peer_ready_fn fn;
        void *userdata;
};

struct PeerListener {
        Daemon *daemon;
        int fd;
        struct event *ev;
        char address[SOCKADDR_STR_MAX];
};

static void peer_on_io(evutil_socket_t fd, short what, void *userdata);
static void peer_on_timer(evutil_socket_t fd, short what, void *userdata);
static void peer_data_dial_all(Peer *p);

const char *peer_state_to_string(PeerState s)
{
        static const char *const names[_PEER_STATE_MAX] = {
                [PEER_CONNECTING] = "connecting", [PEER_HANDSHAKE] = "handshake",
                [PEER_DATA] = "data",             [PEER_READY] = "ready",
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

#define PEER_NAME(p) peer_name((p), (char[SOCKADDR_STR_MAX + 32]){ 0 }, SOCKADDR_STR_MAX + 32)

static void peer_set_state(Peer *p, PeerState state)
{
        assert(state >= 0 && state < _PEER_STATE_MAX);
        /* Forward only: CONNECTING -> HANDSHAKE -> DATA -> READY, any -> CLOSED. */
        assert(state > p->state);
        p->state = state;
}

static int peer_arm_timer(Peer *p, uint64_t ms)
{
        struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
                              .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

        return evtimer_add(p->timer, &tv) < 0 ? -ENOMEM : 0;
}

/* Sets the socket options every peer socket gets. */
static void peer_socket_setup(int fd)
{
        int one = 1;

        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

static Peer *peer_new(Daemon *d, int fd, bool dialed)
{
        Peer *p;

        p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->daemon = d;
        p->id = daemon_next_id(d);
        p->state = dialed ? PEER_CONNECTING : PEER_HANDSHAKE;
        p->dialed = dialed;
        p->fd = fd;
        for (size_t i = 0; i < ARRAY_SIZE(p->data_fds); i++)
                p->data_fds[i] = -1;
        p->max_frame = d->config->limits.max_frame_size + PEER_FRAME_SLACK;
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
        clist_link_tail(&d->peers, &p->link_daemon);
        d->n_peers++;
        p->ev_read = event_new(d->base, fd, EV_READ | EV_PERSIST, peer_on_io, p);
        p->ev_write = event_new(d->base, fd, EV_WRITE | EV_PERSIST, peer_on_io, p);
        p->timer = evtimer_new(d->base, peer_on_timer, p);
        return p;
}

static void peer_free(Peer *p)
{
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
        safe_close(p->fd);
        clist_unlink(&p->link_daemon);
        p->daemon->n_peers--;
        free(p);
}

static void peer_on_free_later(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;

        /* The data plane goes last: its jobs' callbacks fail the transfers still waiting. */
        p->data = tcp_data_free(p->data);
        peer_free(p);
}

void peer_lose(Peer *p, int status, const char *fmt, ...)
{
        static const struct timeval now = { 0, 0 };
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
        event_del(p->ev_read);
        event_del(p->ev_write);
        event_del(p->timer);
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
        peer_link_on_lost(p, status);
        served_on_peer_lost(p);
        domain_on_peer_lost(p, status);
        if (was_ready)
                p->daemon->counters.peers_lost++;
        daemon_update_status(p->daemon);

        if (event_base_once(p->daemon->base, -1, EV_TIMEOUT, peer_on_free_later, p, &now) < 0)
                log_error("%s: cannot schedule its release", PEER_NAME(p));
}

/* Writes what the socket takes; loses the peer when it broke. */
static void peer_write(Peer *p)
{
        int r;

        r = wire_out_write(&p->out, p->fd);
        if (r < 0) {
                peer_lose(p, KVD_E_PEER_LOST, "write failed: %s", strerror(-r));
                return;
        }
        if (wire_out_is_empty(&p->out))
                event_del(p->ev_write);
        else
                (void)event_add(p->ev_write, NULL);
}

static int peer_send_frame(Peer *p, uint16_t type, uint16_t flags, uint64_t id,
                           const ProtobufCMessage *msg)
{
        uint8_t *buf;
        size_t len;
        int r;

        if (p->state == PEER_CLOSED || p->state == PEER_CONNECTING)
                return -ENOTCONN;
        r = frame_pack(type, flags, id, 0, msg, p->max_frame, &buf, &len);
        if (r < 0)
                return r;
        if (p->out.bytes + len > PEER_MAX_OUT_BYTES) {
                free(buf);
                peer_lose(p, KVD_E_PEER_LOST, "%zu bytes unread by the peer", p->out.bytes);
                return -ENOBUFS;
        }
        r = wire_out_queue(&p->out, buf, len, -1);
        if (r < 0)
                return r;
        peer_write(p);
        return p->state == PEER_CLOSED ? -ENOTCONN : 0;
}

/* A call in any state but CLOSED: the handshake uses calls too. */
static int peer_call_internal(Peer *p, uint16_t type, const ProtobufCMessage *msg,
                              peer_reply_fn fn, void *userdata, PeerCall **ret_call)
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

int peer_call(Peer *p, uint16_t type, const ProtobufCMessage *msg, peer_reply_fn fn,
              void *userdata, PeerCall **ret_call)
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

        p->daemon->counters.peer_requests_refused++;
        if (request_id == 0)
                return 0;
        status.code = code;
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
                fn(p, KVD_OK, NULL, userdata);
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
        return p->dialed ? p->daemon->node_id : p->node_id;
}

static void peer_become_ready(Peer *p)
{
        Daemon *d = p->daemon;
        PeerWaiter *w;
        Peer *q;

        peer_set_state(p, PEER_READY);
        p->last_rx_usec = now_usec(CLOCK_MONOTONIC);
        event_del(p->timer);
        (void)peer_arm_timer(p, d->config->heartbeat_interval_ms);

        /* Two daemons that dialed each other at once end up with two connections: both keep
         * the one dialed by the lower node id for new links; the other serves what it has. */
        CLIST_FOREACH(q, &d->peers, link_daemon) {
                if (q == p || q->state != PEER_READY || q->node_id != p->node_id || q->retiring)
                        continue;
                if (peer_dialer_node_id(p) > peer_dialer_node_id(q))
                        p->retiring = true;
                else
                        q->retiring = true;
                log_info("%s and %s reach the same daemon; %s takes new links",
                         PEER_NAME(p), PEER_NAME(q), PEER_NAME(p->retiring ? q : p));
        }

        log_info("%s: ready: %s, node %016" PRIx64 ", %s, %u data connections%s", PEER_NAME(p),
                 p->identity, p->node_id,
                 p->authenticated ? "authenticated with the cluster key" : "NOT authenticated",
                 p->n_streams, p->crc ? ", CRC32C on" : "");
        daemon_update_status(d);
        while (!clist_is_empty(&p->waiters) && p->state == PEER_READY) {
                w = clist_first_entry(&p->waiters, PeerWaiter, link);
                clist_unlink(&w->link);
                w->fn(p, KVD_OK, NULL, w->userdata);
                free(w);
        }
}

static void peer_on_data_broken(TcpData *td, int error, void *userdata)
{
        Peer *p = userdata;

        peer_lose(p, KVD_E_PEER_LOST, "data connection failed: %s", strerror(-error));
}

/* Hands the data connections to a TcpData: the last step before READY. */
static int peer_start_data(Peer *p)
{
        char name[SOCKADDR_STR_MAX + 32];
        TcpDataOptions o = {
                .base = p->daemon->base,
                .fds = p->data_fds,
                .n_fds = p->n_streams,
                .chunk_size = p->chunk_size,
                .crc = p->crc,
                .broken = peer_on_data_broken,
                .userdata = p,
                .name = peer_name(p, name, sizeof(name)),
        };
        int r;

        for (unsigned i = 0; i < p->n_streams; i++)
                if (p->data_ev[i]) {
                        event_free(p->data_ev[i]);
                        p->data_ev[i] = NULL;
                }
        r = tcp_data_new(&o, &p->data);
        /* The TcpData took the sockets, or closed them. */
        for (unsigned i = 0; i < p->n_streams; i++)
                p->data_fds[i] = -1;
        return r;
}

/* ---- handshake ---- */

static void peer_hello_fill(Peer *p, const PeerAuthHello *ah, Kvdist__V1__PeerHello *m)
{
        Daemon *d = p->daemon;

        m->protocol_version = FRAME_VERSION;
        m->node_id = ah->node_id;
        m->identity = d->identity;
        m->nonce.data = (uint8_t *)ah->nonce;
        m->nonce.len = sizeof(ah->nonce);
        m->has_key = ah->has_key;
        m->listen_ip_info = (char *)daemon_peer_address(d);
        m->tcp_streams = d->config->tcp.streams;
        m->crc = d->config->tcp.crc;
        m->chunk_size = d->config->tcp.chunk_size;
        m->max_frame_size = d->config->limits.max_frame_size;
}

/* Takes the other side's Hello; fills @err when it is refused. */
static int peer_take_hello(Peer *p, const Kvdist__V1__PeerHello *m, Error *err)
{
        PeerAuthHello ah = { 0 };
        int r;

        if (!m)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH, "Hello without a body");
        if (m->protocol_version != FRAME_VERSION)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                 "peer speaks protocol %" PRIu32 ", we speak %d",
                                 m->protocol_version, FRAME_VERSION);
        if (m->node_id == 0)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH, "Hello without a node id");
        if (m->nonce.len != PEER_AUTH_NONCE_SIZE)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH, "Hello nonce of %zu bytes",
                                 m->nonce.len);
        ah.node_id = m->node_id;
        ah.has_key = m->has_key;
        memcpy(ah.nonce, m->nonce.data, PEER_AUTH_NONCE_SIZE);
        r = peer_auth_on_hello(&p->auth, &ah);
        if (r == -EALREADY)
                return error_set(err, KVD_E_LINK_FAILED,
                                 "the address is this daemon's own listener");
        if (r == -EPERM)
                return error_set(err, KVD_E_PERMISSION_DENIED,
                                 "cluster key configured on %s side only",
                                 p->daemon->cluster_key_len ? "our" : "the peer's");
        if (r < 0)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH, "unexpected Hello");
        p->node_id = m->node_id;
        p->offer_streams = m->tcp_streams;
        p->offer_crc = m->crc;
        p->offer_chunk = m->chunk_size;
        (void)snprintf(p->identity, sizeof(p->identity), "%.80s", m->identity ? m->identity : "");
        if (!p->dialed && m->listen_ip_info && m->listen_ip_info[0]) {
                struct sockaddr_storage sa;
                socklen_t len;

                /* Only an address that parses is kept: it is matched against what clusters
                 * ask to link to. */
                if (sockaddr_parse(m->listen_ip_info, 0, &sa, &len) == 0)
                        (void)sockaddr_format((struct sockaddr *)&sa, len, p->address,
                                              sizeof(p->address));
        }
        return 0;
}

static void peer_refuse(Peer *p, uint16_t type, uint64_t id, const Error *err)
{
        log_warning("%s: refused: %s", PEER_NAME(p), err->msg);
        p->daemon->counters.peers_refused++;
        (void)peer_reply_error(p, type, id, err->code, err);
        peer_lose(p, err->code, "%s", err->msg);
}

static void peer_on_auth_reply(Peer *p, int status, const Error *err,
                               const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerAuthReply *m = (const Kvdist__V1__PeerAuthReply *)reply;

        if (status != KVD_OK) {
                peer_lose(p, status, "authentication: %s", err ? err->msg : "refused");
                return;
        }
        if (m->data_token.len != PEER_DATA_TOKEN_SIZE || m->tcp_streams < 1 ||
            m->tcp_streams > TCP_DATA_MAX_CONNS || m->tcp_streams > p->daemon->config->tcp.streams) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "bad data connection terms");
                return;
        }
        memcpy(p->data_token, m->data_token.data, PEER_DATA_TOKEN_SIZE);
        p->n_streams = m->tcp_streams;
        p->crc = m->crc;
        p->chunk_size = m->chunk_size;
        p->authenticated = peer_auth_is_authenticated(&p->auth);
        peer_set_state(p, PEER_DATA);
        peer_data_dial_all(p);
}

static void peer_on_hello_reply(Peer *p, int status, const Error *err,
                                const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerHelloReply *m = (const Kvdist__V1__PeerHelloReply *)reply;
        Kvdist__V1__PeerAuth auth = KVDIST__V1__PEER_AUTH__INIT;
        PeerAuthProof proof;
        Error e = ERROR_INIT;
        int r;

        if (status != KVD_OK) {
                peer_lose(p, status == KVD_E_PEER_LOST ? KVD_E_LINK_FAILED : status,
                          "handshake: %s", err ? err->msg : "refused");
                return;
        }
        if (peer_take_hello(p, m->hello, &e) < 0) {
                peer_lose(p, e.code, "%s", e.msg);
                return;
        }
        if (p->auth.has_key) {
                if (m->proof.len != PEER_AUTH_MAC_SIZE) {
                        peer_lose(p, KVD_E_PERMISSION_DENIED, "the peer sent no proof of the "
                                  "cluster key");
                        return;
                }
                memcpy(proof.mac, m->proof.data, PEER_AUTH_MAC_SIZE);
                r = peer_auth_on_proof(&p->auth, &proof);
                if (r < 0) {
                        log_warning("%s: does not hold our cluster key, refusing it",
                                    PEER_NAME(p));
                        p->daemon->counters.peers_refused++;
                        peer_lose(p, KVD_E_PERMISSION_DENIED,
                                  "the peer's proof of the cluster key does not verify");
                        return;
                }
                r = peer_auth_proof(&p->auth, &proof);
                assert(r == 0);
                auth.proof.data = proof.mac;
                auth.proof.len = sizeof(proof.mac);
        }
        r = peer_call_internal(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, &auth.base,
                               peer_on_auth_reply, NULL, NULL);
        if (r < 0)
                peer_lose(p, KVD_E_LINK_FAILED, "cannot send PeerAuth: %s", strerror(-r));
}

/* Dialer: the TCP connection is up; start the handshake. */
static void peer_send_hello(Peer *p)
{
        Daemon *d = p->daemon;
        Kvdist__V1__PeerHello m = KVDIST__V1__PEER_HELLO__INIT;
        PeerAuthHello ah;
        int r;

        r = peer_auth_init(&p->auth, PEER_AUTH_DIALER, d->node_id, d->cluster_key,
                           d->cluster_key_len);
        if (r >= 0)
                r = peer_auth_hello(&p->auth, &ah);
        if (r < 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "cannot start the handshake: %s", strerror(-r));
                return;
        }
        peer_hello_fill(p, &ah, &m);
        r = peer_call_internal(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, &m.base,
                               peer_on_hello_reply, NULL, NULL);
        if (r < 0)
                peer_lose(p, KVD_E_LINK_FAILED, "cannot send Hello: %s", strerror(-r));
}

/* Listener: the dialer's Hello. */
static void peer_on_hello(Peer *p, uint64_t id, const Kvdist__V1__PeerHello *m)
{
        Daemon *d = p->daemon;
        Kvdist__V1__PeerHelloReply reply = KVDIST__V1__PEER_HELLO_REPLY__INIT;
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Error err = ERROR_INIT;
        PeerAuthHello ah;
        PeerAuthProof proof;
        int r;

        r = peer_auth_init(&p->auth, PEER_AUTH_LISTENER, d->node_id, d->cluster_key,
                           d->cluster_key_len);
        if (r < 0) {
                error_set(&err, KVD_E_FAILED, "cannot start the handshake: %s", strerror(-r));
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, id, &err);
                return;
        }
        if (peer_take_hello(p, m, &err) < 0) {
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, id, &err);
                return;
        }
        r = peer_auth_hello(&p->auth, &ah);
        assert(r == 0);
        peer_hello_fill(p, &ah, &hello);
        reply.status = &status;
        reply.hello = &hello;
        if (p->auth.has_key) {
                r = peer_auth_proof(&p->auth, &proof);
                assert(r == 0);
                reply.proof.data = proof.mac;
                reply.proof.len = sizeof(proof.mac);
        }
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, id, &reply.base);
}

/* Listener: the dialer's proof (or its empty PeerAuth without keys). */
static void peer_on_auth(Peer *p, uint64_t id, const Kvdist__V1__PeerAuth *m)
{
        const TcpConfig *tcp = &p->daemon->config->tcp;
        Kvdist__V1__PeerAuthReply reply = KVDIST__V1__PEER_AUTH_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Error err = ERROR_INIT;
        PeerAuthProof proof;
        int r;

        if (p->auth.has_key) {
                if (m->proof.len != PEER_AUTH_MAC_SIZE)
                        r = -EACCES;
                else {
                        memcpy(proof.mac, m->proof.data, PEER_AUTH_MAC_SIZE);
                        r = peer_auth_on_proof(&p->auth, &proof);
                }
                if (r < 0) {
                        error_set(&err, KVD_E_PERMISSION_DENIED,
                                  "the proof of the cluster key does not verify");
                        peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                        return;
                }
        }
        if (!peer_auth_is_done(&p->auth)) {
                error_set(&err, KVD_E_PROTOCOL_MISMATCH, "PeerAuth out of turn");
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                return;
        }
        r = random_bytes(p->data_token, sizeof(p->data_token));
        if (r < 0) {
                error_set(&err, KVD_E_FAILED, "no random bytes: %s", strerror(-r));
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                return;
        }
        p->authenticated = peer_auth_is_authenticated(&p->auth);
        p->n_streams = MAX(MIN(p->offer_streams, tcp->streams), 1u);
        p->crc = p->offer_crc || tcp->crc;
        p->chunk_size = MIN(p->offer_chunk ? p->offer_chunk : tcp->chunk_size,
                            tcp->chunk_size);
        peer_set_state(p, PEER_DATA);

        reply.status = &status;
        reply.data_token.data = p->data_token;
        reply.data_token.len = sizeof(p->data_token);
        reply.tcp_streams = p->n_streams;
        reply.crc = p->crc;
        reply.chunk_size = p->chunk_size;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &reply.base);
}

/* ---- data connections ---- */

static void peer_on_data_connected(evutil_socket_t fd, short what, void *userdata);

/* Dialer: one data connection per agreed stream, each introduced by PeerDataHello. */
static void peer_data_dial_all(Peer *p)
{
        for (unsigned i = 0; i < p->n_streams; i++) {
                int fd, r;

                fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        peer_lose(p, KVD_E_LINK_FAILED, "cannot open a data connection: %m");
                        return;
                }
                p->data_fds[i] = fd;
                peer_socket_setup(fd);
                if (connect(fd, (struct sockaddr *)&p->sa, p->sa_len) < 0 &&
                    errno != EINPROGRESS) {
                        peer_lose(p, KVD_E_LINK_FAILED, "data connection %u: connect: %m", i);
                        return;
                }
                p->data_ev[i] = event_new(p->daemon->base, fd, EV_WRITE,
                                          peer_on_data_connected, p);
                r = p->data_ev[i] ? event_add(p->data_ev[i], NULL) : -1;
                if (r < 0) {
                        peer_lose(p, KVD_E_OUT_OF_MEMORY, "cannot watch a data connection");
                        return;
                }
        }
}

static void peer_on_data_connected(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;
        Kvdist__V1__PeerDataHello m = KVDIST__V1__PEER_DATA_HELLO__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        socklen_t elen = sizeof(int);
        unsigned index = 0;
        size_t len;
        ssize_t n;
        int e = 0, r;

        while (index < p->n_streams && p->data_fds[index] != fd)
                index++;
        assert(index < p->n_streams);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0)
                e = errno;
        if (e != 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "data connection %u: %s", index, strerror(e));
                return;
        }
        m.data_token.data = p->data_token;
        m.data_token.len = sizeof(p->data_token);
        m.index = index;
        r = frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO, 0, 0, 0, &m.base, p->max_frame,
                       &buf, &len);
        if (r < 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "cannot pack PeerDataHello");
                return;
        }
        /* A few dozen bytes into a fresh socket's empty buffer: all or nothing. */
        n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n != (ssize_t)len) {
                peer_lose(p, KVD_E_LINK_FAILED, "data connection %u: cannot send its hello",
                          index);
                return;
        }
        event_free(p->data_ev[index]);
        p->data_ev[index] = NULL;
        p->n_data_fds++;
}

/* Listener: the dialer sent PeerReady's counterpart, its data connections; when the last one is
 * attached the peer is READY on this side and says so. */
static void peer_attach_data(Peer *p, unsigned index, int fd)
{
        int r;

        p->data_fds[index] = fd;
        p->n_data_fds++;
        if (p->n_data_fds < p->n_streams)
                return;
        r = peer_start_data(p);
        if (r < 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "cannot start the data connections: %s",
                          strerror(-r));
                return;
        }
        r = peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_READY,
                        &(Kvdist__V1__PeerReady)KVDIST__V1__PEER_READY__INIT.base);
        if (r < 0)
                return;
        peer_become_ready(p);
}

/* A connection whose first frame is PeerDataHello: it joins the peer whose token it shows. */
static void peer_on_data_hello(Peer *tmp, const Kvdist__V1__PeerDataHello *m)
{
        Daemon *d = tmp->daemon;
        Peer *p;

        if (m->data_token.len == PEER_DATA_TOKEN_SIZE)
                CLIST_FOREACH(p, &d->peers, link_daemon) {
                        if (p->state != PEER_DATA || p->dialed ||
                            !memeq_consttime(p->data_token, m->data_token.data,
                                             PEER_DATA_TOKEN_SIZE))
                                continue;
                        if (m->index >= p->n_streams || p->data_fds[m->index] >= 0)
                                break;
                        /* The socket moves over; this connection object goes. */
                        event_del(tmp->ev_read);
                        event_del(tmp->ev_write);
                        event_del(tmp->timer);
                        peer_attach_data(p, m->index, TAKE_FD(tmp->fd));
                        tmp->state = PEER_CLOSED;
                        (void)event_base_once(d->base, -1, EV_TIMEOUT, peer_on_free_later, tmp,
                                              &(struct timeval){ 0, 0 });
                        return;
                }
        log_warning("%s: data connection with an unknown token or index, refusing",
                    PEER_NAME(tmp));
        d->counters.peers_refused++;
        peer_lose(tmp, KVD_E_PERMISSION_DENIED, "bad data connection");
}

/* Dialer: the listener has every data connection. */
static void peer_on_ready_notice(Peer *p)
{
        int r;

        if (!p->dialed || p->state != PEER_DATA || p->n_data_fds < p->n_streams) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "PeerReady out of turn");
                return;
        }
        r = peer_start_data(p);
        if (r < 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "cannot start the data connections: %s",
                          strerror(-r));
                return;
        }
        peer_become_ready(p);
}

/* ---- input ---- */

static const struct {
        uint16_t type;
        peer_handler_fn fn;
} peer_handlers[] = {
        { KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, peer_handle_link },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, peer_handle_unlink },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_CLUSTER_GONE, peer_handle_cluster_gone },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, peer_handle_transfer },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_DONE, peer_handle_transfer_done },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_CANCEL, peer_handle_transfer_cancel },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN, peer_handle_domain_join },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LINKED, peer_handle_domain_linked },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_READY, peer_handle_domain_ready },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LEAVE, peer_handle_domain_leave },
        { KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_XFER, peer_handle_domain_xfer },
};

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

        CLIST_FOREACH(c, &p->calls, link)
                if (c->id == h->request_id) {
                        call = c;
                        break;
                }
        if (!call || call->type != h->type) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "a reply to no request (type %u, id %"
                          PRIu64 ")", h->type, h->request_id);
                return;
        }
        r = frame_unpack((h->flags & FRAME_FLAG_ERROR) ? &kvdist__v1__status__descriptor
                                                       : ft->reply,
                         p->in.payload, p->in.payload_len, &msg);
        if (r < 0) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "undecodable %s reply", ft->name);
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
                        error_set(&err, KVD_E_PROTOCOL_MISMATCH, "an error reply without error");
                call->fn(p, (h->flags & FRAME_FLAG_ERROR) ? KVD_E_PROTOCOL_MISMATCH : KVD_OK,
                         &err, (h->flags & FRAME_FLAG_ERROR) ? NULL : msg, call->userdata);
        } else {
                int code = st->code < _KVD_E_MIN ? KVD_E_FAILED : st->code;

                error_set(&err, code, "%s", st->detail ? st->detail : "");
                call->fn(p, code, &err, NULL, call->userdata);
        }
        free(call);
        protobuf_c_message_free_unpacked(msg, NULL);
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
                        peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "reply of unknown type %u",
                                  h->type);
                        return;
                }
                error_set(&err, KVD_E_UNSUPPORTED, "request type %u is not supported by "
                          "kvdistd " KVDIST_VERSION, h->type);
                (void)peer_reply_error(p, h->type, h->request_id, KVD_E_UNSUPPORTED, &err);
                return;
        }
        if (h->n_fds > 0) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "fds on a TCP connection");
                return;
        }
        if (h->flags & FRAME_FLAG_REPLY) {
                peer_dispatch_reply(p, ft);
                return;
        }
        r = frame_unpack(ft->request, p->in.payload, p->in.payload_len, &msg);
        if (r < 0) {
                peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "undecodable %s", ft->name);
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
                if (h->type == KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT) {
                        peer_on_heartbeat(p, h->request_id, (Kvdist__V1__PeerHeartbeat *)msg);
                        goto out;
                }
                for (size_t i = 0; i < ARRAY_SIZE(peer_handlers); i++)
                        if (peer_handlers[i].type == h->type) {
                                peer_handlers[i].fn(p, h->request_id, msg);
                                goto out;
                        }
                error_set(&err, KVD_E_UNSUPPORTED, "%s is not a peer request", ft->name);
                (void)peer_reply_error(p, h->type, h->request_id, KVD_E_UNSUPPORTED, &err);
                goto out;
        default:
                break;
        }
        peer_lose(p, KVD_E_PROTOCOL_MISMATCH, "%s in state %s", ft->name,
                  peer_state_to_string(p->state));
out:
        protobuf_c_message_free_unpacked(msg, NULL);
}

static void peer_read(Peer *p)
{
        for (int i = 0; i < PEER_FRAMES_PER_WAKEUP && p->state != PEER_CLOSED; i++) {
                int r = wire_in_read(&p->in, p->fd, p->max_frame, 0);

                if (r == 0)
                        return;
                if (r < 0) {
                        if (r != -ECONNRESET)
                                p->daemon->counters.frames_malformed++;
                        peer_lose(p, KVD_E_PEER_LOST, "%s",
                                  r == -ECONNRESET ? "connection closed" : strerror(-r));
                        return;
                }
                p->last_rx_usec = now_usec(CLOCK_MONOTONIC);
                peer_dispatch_frame(p);
                wire_in_reset(&p->in);
        }
}

static void peer_on_connected(Peer *p)
{
        socklen_t len = sizeof(int);
        int e = 0;

        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
                e = errno;
        if (e != 0) {
                peer_lose(p, KVD_E_LINK_FAILED, "connect: %s", strerror(e));
                return;
        }
        peer_set_state(p, PEER_HANDSHAKE);
        event_del(p->ev_write);
        if (event_add(p->ev_read, NULL) < 0) {
                peer_lose(p, KVD_E_OUT_OF_MEMORY, "cannot watch the connection");
                return;
        }
        peer_send_hello(p);
}

static void peer_on_io(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;

        if (p->state == PEER_CONNECTING) {
                peer_on_connected(p);
                return;
        }
        /* Input first: a reply in the buffer may free room for what is queued. */
        if (what & EV_READ)
                peer_read(p);
        if ((what & EV_WRITE) && p->state != PEER_CLOSED)
                peer_write(p);
}

static void peer_on_heartbeat_reply(Peer *p, int status, const Error *err,
                                    const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerHeartbeatReply *m = (const Kvdist__V1__PeerHeartbeatReply *)reply;

        if (status == KVD_OK && m->seq == p->heartbeat_seq)
                p->rtt_usec = now_usec(CLOCK_MONOTONIC) - p->heartbeat_sent_usec;
}

static void peer_on_timer(evutil_socket_t fd, short what, void *userdata)
{
        Peer *p = userdata;
        const Config *cfg = p->daemon->config;
        Kvdist__V1__PeerHeartbeat hb = KVDIST__V1__PEER_HEARTBEAT__INIT;
        usec_t now = now_usec(CLOCK_MONOTONIC), silent = now - p->last_rx_usec;

        if (p->state != PEER_READY) {
                peer_lose(p, KVD_E_TIMEOUT, "no %s within %d ms",
                          p->state == PEER_CONNECTING ? "connection" : "handshake",
                          PEER_HANDSHAKE_TIMEOUT_MS);
                return;
        }
        if (silent > (usec_t)cfg->heartbeat_timeout_ms * USEC_PER_MSEC) {
                peer_lose(p, KVD_E_PEER_LOST, "nothing heard for %" PRIu64 " ms (heartbeat "
                          "timeout %" PRIu32 " ms)", silent / USEC_PER_MSEC,
                          cfg->heartbeat_timeout_ms);
                return;
        }
        hb.seq = ++p->heartbeat_seq;
        p->heartbeat_sent_usec = now;
        (void)peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT, &hb.base,
                        peer_on_heartbeat_reply, NULL, NULL);
        if (p->state == PEER_READY)
                (void)peer_arm_timer(p, cfg->heartbeat_interval_ms);
}

/* ---- dialing and accepting ---- */

int peer_get(Daemon *d, const char *address, Peer **ret, Error *err)
{
        char canon[SOCKADDR_STR_MAX];
        struct sockaddr_storage sa;
        socklen_t len;
        Peer *p;
        int fd, r;

        if (sockaddr_parse(address, 0, &sa, &len) < 0 ||
            sockaddr_format((struct sockaddr *)&sa, len, canon, sizeof(canon)) < 0)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_ip_info \"%.64s\" is not ip:port or [ipv6]:port", address);
        CLIST_FOREACH(p, &d->peers, link_daemon)
                if (p->state != PEER_CLOSED && !p->retiring && strcmp(p->address, canon) == 0) {
                        *ret = p;
                        return 0;
                }
        if (d->stopping)
                return error_set(err, KVD_E_DAEMON_UNAVAILABLE, "kvdistd is stopping");
        if (d->n_peers >= d->config->limits.max_peers)
                return error_set(err, KVD_E_LIMIT_EXCEEDED,
                                 "%u peer connections open (limits.max_peers)", d->n_peers);

        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return error_set(err, KVD_E_LINK_FAILED, "cannot open a socket: %s",
                                 strerror(errno));
        peer_socket_setup(fd);
        if (connect(fd, (struct sockaddr *)&sa, len) < 0 && errno != EINPROGRESS) {
                r = errno;
                safe_close(fd);
                return error_set(err, KVD_E_LINK_FAILED, "cannot connect to %s: %s", canon,
                                 strerror(r));
        }
        p = peer_new(d, fd, true);
        if (!p || !p->ev_read || !p->ev_write || !p->timer || event_add(p->ev_write, NULL) < 0 ||
            peer_arm_timer(p, PEER_HANDSHAKE_TIMEOUT_MS) < 0) {
                if (p)
                        peer_free(p);
                else
                        safe_close(fd);
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot set up a peer connection");
        }
        memcpy(&p->sa, &sa, len);
        p->sa_len = len;
        strcpy(p->address, canon);
        strcpy(p->remote, canon);
        log_info("%s: dialing", PEER_NAME(p));
        *ret = p;
        return 0;
}

static void peer_listener_on_accept(evutil_socket_t lfd, short what, void *userdata)
{
        PeerListener *l = userdata;
        Daemon *d = l->daemon;

        for (int n = 0; n < 16; n++) {
                struct sockaddr_storage sa;
                socklen_t len = sizeof(sa);
                Peer *p;
                int fd;

                fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warning_errno(-errno, "peer listener %s: accept failed, "
                                                  "ignoring", l->address);
                        return;
                }
                /* Data connections count too: a peer uses up to 17 sockets. */
                if (d->stopping ||
                    d->n_peers >= d->config->limits.max_peers * (TCP_DATA_MAX_CONNS + 1)) {
                        d->counters.peers_refused++;
                        safe_close(fd);
                        continue;
                }
                peer_socket_setup(fd);
                p = peer_new(d, fd, false);
                if (!p || !p->ev_read || !p->ev_write || !p->timer ||
                    event_add(p->ev_read, NULL) < 0 ||
                    peer_arm_timer(p, PEER_HANDSHAKE_TIMEOUT_MS) < 0) {
                        if (p)
                                peer_free(p);
                        else
                                safe_close(fd);
                        continue;
                }
                (void)sockaddr_format((struct sockaddr *)&sa, len, p->remote, sizeof(p->remote));
                log_debug("%s: accepted", PEER_NAME(p));
        }
}

int peer_listener_new(Daemon *d, PeerListener **ret)
{
        const char *address = d->config->listen_ip_info;
        _cleanup_close_ int fd = -1;
        struct sockaddr_storage sa;
        socklen_t len;
        PeerListener *l;
        int one = 1, r;

        *ret = NULL;
        if (!address)
                return 0;
        r = sockaddr_parse_listen(address, &sa, &len);
        if (r < 0)
                return log_error_errno(r, "listen_ip_info %s is not an address", address);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create the peer listener socket");
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, len) < 0)
                return log_error_errno(-errno, "cannot bind the peer listener to %s", address);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(-errno, "cannot listen on %s", address);
        len = sizeof(sa);
        if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                return log_error_errno(-errno, "getsockname on the peer listener");

        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->daemon = d;
        (void)sockaddr_format((struct sockaddr *)&sa, len, l->address, sizeof(l->address));
        l->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, peer_listener_on_accept, l);
        if (!l->ev || event_add(l->ev, NULL) < 0) {
                if (l->ev)
                        event_free(l->ev);
                free(l);
                return -ENOMEM;
        }
        l->fd = TAKE_FD(fd);
        *ret = l;
        return 0;
}

PeerListener *peer_listener_free(PeerListener *l)
{
        if (!l)
                return NULL;
        event_free(l->ev);
        safe_close(l->fd);
        free(l);
        return NULL;
}

const char *peer_listener_address(const PeerListener *l)
{
        return l ? l->address : "";
}

void peer_close_all(Daemon *d)
{
        Peer *p, *tmp;

        d->peer_listener = peer_listener_free(d->peer_listener);
        CLIST_FOREACH_SAFE(p, tmp, &d->peers, link_daemon)
                peer_lose(p, KVD_E_DAEMON_UNAVAILABLE, "kvdistd is stopping");
}

void peer_free_all(Daemon *d)
{
        Peer *p, *tmp;

        CLIST_FOREACH_SAFE(p, tmp, &d->peers, link_daemon)
                peer_on_free_later(-1, 0, p);
}

int peer_load_cluster_key(Daemon *d)
{
        const char *path = d->config->cluster_key_file;
        _cleanup_close_ int fd = -1;
        _cleanup_free_ uint8_t *key = NULL;
        struct stat st;
        size_t len = 0;

        if (!path) {
                if (d->config->listen_ip_info)
                        log_warning("no cluster_key_file: any host that reaches %s can act as "
                                    "a peer daemon", d->config->listen_ip_info);
                return 0;
        }
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_error_errno(-errno, "cluster_key_file %s", path);
        if (fstat(fd, &st) < 0)
                return log_error_errno(-errno, "cluster_key_file %s", path);
        if (!S_ISREG(st.st_mode) || st.st_size > (off_t)PEER_KEY_MAX)
                return log_error_errno(-EINVAL, "cluster_key_file %s: not a regular file of at "
                                       "most %u bytes", path, PEER_KEY_MAX);
        if (st.st_mode & 0077)
                log_warning("cluster_key_file %s can be read by others (mode %04o)", path,
                            (unsigned)(st.st_mode & 07777));
        key = malloc((size_t)st.st_size + 1);
        if (!key)
                return -ENOMEM;
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, key + len, (size_t)st.st_size - len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return log_error_errno(n < 0 ? -errno : -EIO, "cluster_key_file %s",
                                               path);
                len += (size_t)n;
        }
        /* A key written with echo ends in a newline that is not part of it. */
        while (len > 0 && (key[len - 1] == '\n' || key[len - 1] == '\r'))
                len--;
        if (len < PEER_KEY_MIN) {
                explicit_bzero(key, (size_t)st.st_size);
                return log_error_errno(-EINVAL, "cluster_key_file %s: the key must be at least "
                                       "%d bytes", path, PEER_KEY_MIN);
        }
        d->cluster_key = TAKE_PTR(key);
        d->cluster_key_len = len;
        return 0;
}
