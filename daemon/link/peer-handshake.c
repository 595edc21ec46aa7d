/* SPDX-License-Identifier: MIT */
/*
 * Peer handshake: Hello both ways, the mutual proofs of the cluster key (peer-auth.h), the
 * negotiated data terms, the data connections introduced by their token, and READY.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include "common/sockaddr-util.h"
#include "daemon/link/link-root.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/peer-internal.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"
#include "common/random-util.h"
#include "common/status.h"

static void peer_data_dial_all(Peer *p);
static void peer_on_data_connected(evutil_socket_t fd, short what, void *userdata);

static void peer_on_data_broken(TransportChannel *ch, int error, void *userdata)
{
        Peer *p = userdata;

        peer_lose(p, STATUS_PEER_LOST, "data connection failed: %s", strerror(-error));
}

/* Hands the data connections to a channel of the TCP transport: the last step before READY. */
static int peer_start_data(Peer *p)
{
        char name[SOCKADDR_STR_MAX + 32];
        TransportChannelSpec spec = {
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
        r = transport_channel_open(transport_set_get(p->root->transports, TRANSPORT_ROLE_STREAM),
                                   &spec, &p->data);
        /* The channel took the sockets, or closed them. */
        for (unsigned i = 0; i < p->n_streams; i++)
                p->data_fds[i] = -1;
        return r;
}

static void peer_hello_fill(Peer *p, const PeerAuthHello *ah, Kvdist__V1__PeerHello *m)
{
        LinkRoot *root = p->root;
        TransportStreamTerms terms = transport_set_stream_terms(root->transports);

        m->protocol_version = PEER_PROTOCOL_VERSION;
        m->node_id = ah->node_id;
        m->identity = root->identity;
        m->nonce.data = (uint8_t *)ah->nonce;
        m->nonce.len = sizeof(ah->nonce);
        m->has_key = ah->has_key;
        m->listen_ip_info = (char *)link_root_peer_address(root);
        m->data_conns = terms.conns;
        m->crc = terms.crc;
        m->chunk_size = terms.chunk_size;
        m->max_frame_size = root->options.limits->max_frame_size;
}

/* Takes the other side's Hello; fills @err when it is refused. */
static int peer_take_hello(Peer *p, const Kvdist__V1__PeerHello *m, Error *err)
{
        PeerAuthHello ah = {0};
        int r;

        if (!m)
                return error_set(err, STATUS_PROTOCOL_MISMATCH, "Hello without a body");
        if (m->protocol_version != PEER_PROTOCOL_VERSION)
                return error_set(err, STATUS_PROTOCOL_MISMATCH,
                                 "peer speaks peer protocol %" PRIu32 ", we speak %d",
                                 m->protocol_version, PEER_PROTOCOL_VERSION);
        if (m->node_id == 0)
                return error_set(err, STATUS_PROTOCOL_MISMATCH, "Hello without a node id");
        if (m->nonce.len != PEER_AUTH_NONCE_SIZE)
                return error_set(err, STATUS_PROTOCOL_MISMATCH, "Hello nonce of %zu bytes",
                                 m->nonce.len);
        ah.node_id = m->node_id;
        ah.has_key = m->has_key;
        memcpy(ah.nonce, m->nonce.data, PEER_AUTH_NONCE_SIZE);
        r = peer_auth_on_hello(&p->auth, &ah);
        if (r == -EALREADY)
                return error_set(err, STATUS_LINK_FAILED,
                                 "the address is this daemon's own listener");
        if (r == -EPERM)
                return error_set(err, STATUS_PERMISSION_DENIED,
                                 "cluster key configured on %s side only",
                                 p->root->cluster_key_len ? "our" : "the peer's");
        if (r < 0)
                return error_set(err, STATUS_PROTOCOL_MISMATCH, "unexpected Hello");
        p->node_id = m->node_id;
        p->offer_streams = m->data_conns;
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
        p->root->counters.peers_refused++;
        (void)peer_reply_error(p, type, id, err->code, err);
        peer_lose(p, err->code, "%s", err->msg);
}

static void peer_on_auth_reply(Peer *p, int status, const Error *err, const ProtobufCMessage *reply,
                               void *userdata)
{
        const Kvdist__V1__PeerAuthReply *m = (const Kvdist__V1__PeerAuthReply *)reply;

        if (status != STATUS_OK) {
                peer_lose(p, status, "authentication: %s", err ? err->msg : "refused");
                return;
        }
        if (m->data_token.len != PEER_DATA_TOKEN_SIZE || m->data_conns < 1 ||
            m->data_conns > TRANSPORT_MAX_CONNS ||
            m->data_conns > transport_set_stream_terms(p->root->transports).conns) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "bad data connection terms");
                return;
        }
        memcpy(p->data_token, m->data_token.data, PEER_DATA_TOKEN_SIZE);
        p->n_streams = m->data_conns;
        p->crc = m->crc;
        p->chunk_size = m->chunk_size;
        p->authenticated = peer_auth_is_authenticated(&p->auth);
        peer_set_state(p, PEER_DATA);
        peer_data_dial_all(p);
}

/* The listener's answer to our refusal, if it comes before the connection closes: nothing to do. */
static void peer_on_refusal_reply(Peer *p, int status, const Error *err,
                                  const ProtobufCMessage *reply, void *userdata)
{
}

/*
 * Dialer: the listener's proof does not verify with our key. Tells it so before closing, so
 * that it too logs and counts a peer holding another key instead of seeing a bare close.
 */
static void peer_refuse_listener_proof(Peer *p)
{
        Kvdist__V1__PeerAuth refusal = KVDIST__V1__PEER_AUTH__INIT;

        log_warning("%s: does not hold our cluster key, refusing it", PEER_NAME(p));
        p->root->counters.peers_refused++;
        refusal.refusal = "the listener's proof of the cluster key does not verify with the "
                          "dialer's key";
        (void)peer_call_internal(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, &refusal.base,
                                 peer_on_refusal_reply, NULL, NULL);
        peer_lose(p, STATUS_PERMISSION_DENIED,
                  "the peer's proof of the cluster key does not verify");
}

static void peer_on_hello_reply(Peer *p, int status, const Error *err,
                                const ProtobufCMessage *reply, void *userdata)
{
        const Kvdist__V1__PeerHelloReply *m = (const Kvdist__V1__PeerHelloReply *)reply;
        Kvdist__V1__PeerAuth auth = KVDIST__V1__PEER_AUTH__INIT;
        PeerAuthProof proof;
        Error e = ERROR_INIT;
        int r;

        if (status != STATUS_OK) {
                peer_lose(p, status == STATUS_PEER_LOST ? STATUS_LINK_FAILED : status,
                          "handshake: %s", err ? err->msg : "refused");
                return;
        }
        if (peer_take_hello(p, m->hello, &e) < 0) {
                peer_lose(p, e.code, "%s", e.msg);
                return;
        }
        if (p->auth.has_key) {
                if (m->proof.len != PEER_AUTH_MAC_SIZE) {
                        peer_lose(p, STATUS_PERMISSION_DENIED,
                                  "the peer sent no proof of the "
                                  "cluster key");
                        return;
                }
                memcpy(proof.mac, m->proof.data, PEER_AUTH_MAC_SIZE);
                r = peer_auth_on_proof(&p->auth, &proof);
                if (r < 0) {
                        peer_refuse_listener_proof(p);
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
                peer_lose(p, STATUS_LINK_FAILED, "cannot send PeerAuth: %s", strerror(-r));
}

/* Dialer: the TCP connection is up; start the handshake. */
void peer_send_hello(Peer *p)
{
        LinkRoot *root = p->root;
        Kvdist__V1__PeerHello m = KVDIST__V1__PEER_HELLO__INIT;
        PeerAuthHello ah;
        int r;

        r = peer_auth_init(&p->auth, PEER_AUTH_DIALER, root->node_id, root->cluster_key,
                           root->cluster_key_len);
        if (r >= 0)
                r = peer_auth_hello(&p->auth, &ah);
        if (r < 0) {
                peer_lose(p, STATUS_LINK_FAILED, "cannot start the handshake: %s", strerror(-r));
                return;
        }
        peer_hello_fill(p, &ah, &m);
        r = peer_call_internal(p, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, &m.base,
                               peer_on_hello_reply, NULL, NULL);
        if (r < 0)
                peer_lose(p, STATUS_LINK_FAILED, "cannot send Hello: %s", strerror(-r));
}

/* Listener: the dialer's Hello. */
void peer_on_hello(Peer *p, uint64_t id, const Kvdist__V1__PeerHello *m)
{
        LinkRoot *root = p->root;
        Kvdist__V1__PeerHelloReply reply = KVDIST__V1__PEER_HELLO_REPLY__INIT;
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Error err = ERROR_INIT;
        PeerAuthHello ah;
        PeerAuthProof proof;
        int r;

        r = peer_auth_init(&p->auth, PEER_AUTH_LISTENER, root->node_id, root->cluster_key,
                           root->cluster_key_len);
        if (r < 0) {
                error_set(&err, STATUS_FAILED, "cannot start the handshake: %s", strerror(-r));
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
void peer_on_auth(Peer *p, uint64_t id, const Kvdist__V1__PeerAuth *m)
{
        TransportStreamTerms terms = transport_set_stream_terms(p->root->transports);
        Kvdist__V1__PeerAuthReply reply = KVDIST__V1__PEER_AUTH_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Error err = ERROR_INIT;
        PeerAuthProof proof;
        int r;

        if (m->refusal && m->refusal[0]) {
                error_set(&err, STATUS_PERMISSION_DENIED, "it holds another cluster key: %.160s",
                          m->refusal);
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                return;
        }
        if (p->auth.has_key) {
                if (m->proof.len != PEER_AUTH_MAC_SIZE)
                        r = -EACCES;
                else {
                        memcpy(proof.mac, m->proof.data, PEER_AUTH_MAC_SIZE);
                        r = peer_auth_on_proof(&p->auth, &proof);
                }
                if (r < 0) {
                        error_set(&err, STATUS_PERMISSION_DENIED,
                                  "the proof of the cluster key does not verify");
                        peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                        return;
                }
        }
        if (!peer_auth_is_done(&p->auth)) {
                error_set(&err, STATUS_PROTOCOL_MISMATCH, "PeerAuth out of turn");
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                return;
        }
        r = random_bytes(p->data_token, sizeof(p->data_token));
        if (r < 0) {
                error_set(&err, STATUS_FAILED, "no random bytes: %s", strerror(-r));
                peer_refuse(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &err);
                return;
        }
        p->authenticated = peer_auth_is_authenticated(&p->auth);
        p->n_streams = MAX(MIN(p->offer_streams, terms.conns), 1u);
        p->crc = p->offer_crc || terms.crc;
        p->chunk_size = MIN(p->offer_chunk ? p->offer_chunk : terms.chunk_size, terms.chunk_size);
        peer_set_state(p, PEER_DATA);

        reply.status = &status;
        reply.data_token.data = p->data_token;
        reply.data_token.len = sizeof(p->data_token);
        reply.data_conns = p->n_streams;
        reply.crc = p->crc;
        reply.chunk_size = p->chunk_size;
        (void)peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, id, &reply.base);
}

/* Dialer: one data connection per agreed stream, each introduced by PeerDataHello. */
static void peer_data_dial_all(Peer *p)
{
        for (unsigned i = 0; i < p->n_streams; i++) {
                int fd, r;

                fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        peer_lose(p, STATUS_LINK_FAILED, "cannot open a data connection: %m");
                        return;
                }
                p->data_fds[i] = fd;
                sockaddr_socket_setup(fd);
                if (connect(fd, (struct sockaddr *)&p->sa, p->sa_len) < 0 && errno != EINPROGRESS) {
                        peer_lose(p, STATUS_LINK_FAILED, "data connection %u: connect: %m", i);
                        return;
                }
                p->data_ev[i] = event_new(p->root->base, fd, EV_WRITE, peer_on_data_connected, p);
                r = p->data_ev[i] ? event_add(p->data_ev[i], NULL) : -1;
                if (r < 0) {
                        peer_lose(p, STATUS_OUT_OF_MEMORY, "cannot watch a data connection");
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
                peer_lose(p, STATUS_LINK_FAILED, "data connection %u: %s", index, strerror(e));
                return;
        }
        m.data_token.data = p->data_token;
        m.data_token.len = sizeof(p->data_token);
        m.index = index;
        r = frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO, 0, 0, 0, &m.base, p->max_frame,
                       &buf, &len);
        if (r < 0) {
                peer_lose(p, STATUS_LINK_FAILED, "cannot pack PeerDataHello");
                return;
        }
        /* A few dozen bytes into a fresh socket's empty buffer: all or nothing. */
        n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n != (ssize_t)len) {
                peer_lose(p, STATUS_LINK_FAILED, "data connection %u: cannot send its hello",
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
                peer_lose(p, STATUS_LINK_FAILED, "cannot start the data connections: %s",
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
void peer_on_data_hello(Peer *tmp, const Kvdist__V1__PeerDataHello *m)
{
        LinkRoot *root = tmp->root;
        Peer *p;

        if (m->data_token.len == PEER_DATA_TOKEN_SIZE)
                CLIST_FOREACH (p, &root->peers, link_daemon) {
                        if (p->state != PEER_DATA || p->dialed ||
                            !hmac_memeq(p->data_token, m->data_token.data, PEER_DATA_TOKEN_SIZE))
                                continue;
                        if (m->index >= p->n_streams || p->data_fds[m->index] >= 0)
                                break;
                        /* The socket moves over; this connection object goes. */
                        event_del(tmp->ev_read);
                        event_del(tmp->ev_write);
                        event_del(tmp->timer);
                        peer_attach_data(p, m->index, TAKE_FD(tmp->fd));
                        tmp->state = PEER_CLOSED;
                        (void)event_base_once(root->base, -1, EV_TIMEOUT, peer_on_free_later, tmp,
                                              &(struct timeval){0, 0});
                        return;
                }
        log_warning("%s: data connection with an unknown token or index, refusing", PEER_NAME(tmp));
        root->counters.peers_refused++;
        peer_lose(tmp, STATUS_PERMISSION_DENIED, "bad data connection");
}

bool peer_on_handshake_closed(Peer *p)
{
        if (p->dialed || p->state != PEER_HANDSHAKE ||
            peer_auth_get_state(&p->auth) != PEER_AUTH_PROOF_AWAITED)
                return false;
        /* A dialer that does not accept our proof (another key) and did not say so. */
        log_warning("%s: refused: it closed the connection instead of proving it holds the "
                    "cluster key",
                    PEER_NAME(p));
        p->root->counters.peers_refused++;
        peer_lose(p, STATUS_PERMISSION_DENIED, "closed before proving the cluster key");
        return true;
}

/* Dialer: the listener has every data connection. */
void peer_on_ready_notice(Peer *p)
{
        int r;

        if (!p->dialed || p->state != PEER_DATA || p->n_data_fds < p->n_streams) {
                peer_lose(p, STATUS_PROTOCOL_MISMATCH, "PeerReady out of turn");
                return;
        }
        r = peer_start_data(p);
        if (r < 0) {
                peer_lose(p, STATUS_LINK_FAILED, "cannot start the data connections: %s",
                          strerror(-r));
                return;
        }
        peer_become_ready(p);
}
