/* SPDX-License-Identifier: MIT */
/* Peer authentication: the HMAC-SHA256 challenge-response between two kvdistd daemons. */

#include <assert.h>
#include <string.h>

#include "common/macro.h"
#include "daemon/link/peer-auth.h"
#include "common/random-util.h"
#include "common/sha256.h"

/* The MAC input: context, role byte, two node ids, two nonces. */
#define PEER_AUTH_MAC_INPUT_SIZE                                                                   \
        (sizeof(PEER_AUTH_CONTEXT) - 1 + 1 + 2 * 8 + 2 * PEER_AUTH_NONCE_SIZE)

const char *peer_auth_state_to_string(PeerAuthState s)
{
        switch (s) {
        case PEER_AUTH_START:
                return "start";
        case PEER_AUTH_HELLO_SENT:
                return "hello-sent";
        case PEER_AUTH_HELLO_RECEIVED:
                return "hello-received";
        case PEER_AUTH_PROOF_DUE:
                return "proof-due";
        case PEER_AUTH_PROOF_AWAITED:
                return "proof-awaited";
        case PEER_AUTH_DONE:
                return "done";
        case PEER_AUTH_FAILED:
                return "failed";
        default:
                return "invalid";
        }
}

const char *peer_auth_role_to_string(PeerAuthRole r)
{
        switch (r) {
        case PEER_AUTH_DIALER:
                return "dialer";
        case PEER_AUTH_LISTENER:
                return "listener";
        default:
                return "invalid";
        }
}

/*
 * The transitions each role may take; FAILED is reachable from every unfinished state. Only
 * asserts read it, hence _unused_ for NDEBUG builds.
 */
_unused_ static bool peer_auth_transition_ok(PeerAuthRole role, PeerAuthState from,
                                             PeerAuthState to)
{
        bool dialer = role == PEER_AUTH_DIALER;

        if (to == PEER_AUTH_FAILED)
                return from != PEER_AUTH_DONE && from != PEER_AUTH_FAILED;

        switch (from) {
        case PEER_AUTH_START:
                return to == (dialer ? PEER_AUTH_HELLO_SENT : PEER_AUTH_HELLO_RECEIVED);
        case PEER_AUTH_HELLO_SENT:
                return dialer && (to == PEER_AUTH_PROOF_AWAITED || to == PEER_AUTH_DONE);
        case PEER_AUTH_HELLO_RECEIVED:
                return !dialer && (to == PEER_AUTH_PROOF_DUE || to == PEER_AUTH_DONE);
        case PEER_AUTH_PROOF_DUE:
                return to == (dialer ? PEER_AUTH_DONE : PEER_AUTH_PROOF_AWAITED);
        case PEER_AUTH_PROOF_AWAITED:
                return to == (dialer ? PEER_AUTH_PROOF_DUE : PEER_AUTH_DONE);
        default:
                return false;
        }
}

static void peer_auth_set_state(PeerAuth *a, PeerAuthState state)
{
        assert(state >= 0 && state < _PEER_AUTH_STATE_MAX);
        assert(peer_auth_transition_ok(a->role, a->state, state));
        a->state = state;
}

/* Fails the handshake (unless it already ended) and hands @r back. */
static int peer_auth_fail(PeerAuth *a, int r)
{
        if (a->state != PEER_AUTH_DONE && a->state != PEER_AUTH_FAILED)
                peer_auth_set_state(a, PEER_AUTH_FAILED);
        return r;
}

static uint8_t *put_le64(uint8_t *p, uint64_t v)
{
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
        return p + 8;
}

static uint8_t peer_auth_role_byte(PeerAuthRole r)
{
        return r == PEER_AUTH_DIALER ? PEER_AUTH_ROLE_BYTE_DIALER : PEER_AUTH_ROLE_BYTE_LISTENER;
}

/* The MAC that the side @prover_is_us (we, or else the peer) has to present. */
static void peer_auth_mac(const PeerAuth *a, bool prover_is_us, uint8_t out[PEER_AUTH_MAC_SIZE])
{
        uint8_t buf[PEER_AUTH_MAC_INPUT_SIZE], *p = buf;
        PeerAuthRole prover_role = prover_is_us ? a->role
                                                : (a->role == PEER_AUTH_DIALER ? PEER_AUTH_LISTENER
                                                                               : PEER_AUTH_DIALER);

        memcpy(p, PEER_AUTH_CONTEXT, sizeof(PEER_AUTH_CONTEXT) - 1);
        p += sizeof(PEER_AUTH_CONTEXT) - 1;
        *p++ = peer_auth_role_byte(prover_role);
        p = put_le64(p, prover_is_us ? a->node_id : a->peer_node_id);
        p = put_le64(p, prover_is_us ? a->peer_node_id : a->node_id);
        memcpy(p, prover_is_us ? a->nonce : a->peer_nonce, PEER_AUTH_NONCE_SIZE);
        p += PEER_AUTH_NONCE_SIZE;
        memcpy(p, prover_is_us ? a->peer_nonce : a->nonce, PEER_AUTH_NONCE_SIZE);
        p += PEER_AUTH_NONCE_SIZE;
        assert(p == buf + sizeof(buf));

        hmac_sha256(a->key, a->key_len, buf, sizeof(buf), out);
}

int peer_auth_init_with_nonce(PeerAuth *a, PeerAuthRole role, uint64_t node_id,
                              const uint8_t nonce[PEER_AUTH_NONCE_SIZE], const void *key,
                              size_t key_len)
{
        assert(a);
        assert(nonce);

        if (role < 0 || role >= _PEER_AUTH_ROLE_MAX)
                return -EINVAL;
        if (!key && key_len > 0)
                return -EINVAL;

        *a = (PeerAuth){
                .role = role,
                .state = PEER_AUTH_START,
                .node_id = node_id,
                .has_key = key_len > 0,
        };
        memcpy(a->nonce, nonce, PEER_AUTH_NONCE_SIZE);

        /* HMAC hashes a key longer than its block first (RFC 2104), so keeping the digest is
         * the same key and bounds the copy. */
        if (key_len > sizeof(a->key)) {
                sha256(key, key_len, a->key);
                a->key_len = SHA256_DIGEST_SIZE;
        } else if (key_len > 0) {
                memcpy(a->key, key, key_len);
                a->key_len = key_len;
        }
        return 0;
}

int peer_auth_init(PeerAuth *a, PeerAuthRole role, uint64_t node_id, const void *key,
                   size_t key_len)
{
        uint8_t nonce[PEER_AUTH_NONCE_SIZE];
        int r;

        assert(a);

        if (role < 0 || role >= _PEER_AUTH_ROLE_MAX)
                return -EINVAL;
        r = random_bytes(nonce, sizeof(nonce));
        if (r < 0)
                return r;

        r = peer_auth_init_with_nonce(a, role, node_id, nonce, key, key_len);
        explicit_bzero(nonce, sizeof(nonce));
        return r;
}

void peer_auth_deinit(PeerAuth *a)
{
        if (!a)
                return;
        explicit_bzero(a, sizeof(*a));
        /* Not a transition: a wiped handshake must refuse every call, whatever it was in. */
        a->state = PEER_AUTH_FAILED;
}

int peer_auth_hello(PeerAuth *a, PeerAuthHello *ret)
{
        PeerAuthState next;

        assert(a);
        assert(ret);

        if (a->role == PEER_AUTH_DIALER && a->state == PEER_AUTH_START)
                next = PEER_AUTH_HELLO_SENT;
        else if (a->role == PEER_AUTH_LISTENER && a->state == PEER_AUTH_HELLO_RECEIVED)
                next = a->has_key ? PEER_AUTH_PROOF_DUE : PEER_AUTH_DONE;
        else
                return peer_auth_fail(a, -EPROTO);

        *ret = (PeerAuthHello){
                .node_id = a->node_id,
                .has_key = a->has_key,
        };
        memcpy(ret->nonce, a->nonce, PEER_AUTH_NONCE_SIZE);
        peer_auth_set_state(a, next);
        return 0;
}

int peer_auth_on_hello(PeerAuth *a, const PeerAuthHello *hello)
{
        PeerAuthState next;

        assert(a);
        assert(hello);

        if (a->role == PEER_AUTH_DIALER && a->state == PEER_AUTH_HELLO_SENT)
                next = a->has_key ? PEER_AUTH_PROOF_AWAITED : PEER_AUTH_DONE;
        else if (a->role == PEER_AUTH_LISTENER && a->state == PEER_AUTH_START)
                next = PEER_AUTH_HELLO_RECEIVED;
        else
                return peer_auth_fail(a, -EPROTO);

        if (hello->node_id == a->node_id)
                return peer_auth_fail(a, -EALREADY);
        if (hello->has_key != a->has_key)
                return peer_auth_fail(a, -EPERM);

        a->peer_node_id = hello->node_id;
        memcpy(a->peer_nonce, hello->nonce, PEER_AUTH_NONCE_SIZE);
        peer_auth_set_state(a, next);
        return 0;
}

int peer_auth_proof(PeerAuth *a, PeerAuthProof *ret)
{
        assert(a);
        assert(ret);

        if (a->state != PEER_AUTH_PROOF_DUE)
                return peer_auth_fail(a, -EPROTO);

        peer_auth_mac(a, true, ret->mac);
        peer_auth_set_state(a,
                            a->role == PEER_AUTH_DIALER ? PEER_AUTH_DONE : PEER_AUTH_PROOF_AWAITED);
        return 0;
}

int peer_auth_on_proof(PeerAuth *a, const PeerAuthProof *proof)
{
        uint8_t want[PEER_AUTH_MAC_SIZE];
        bool ok;

        assert(a);
        assert(proof);

        if (a->state != PEER_AUTH_PROOF_AWAITED)
                return peer_auth_fail(a, -EPROTO);

        peer_auth_mac(a, false, want);
        ok = hmac_memeq(want, proof->mac, sizeof(want));
        explicit_bzero(want, sizeof(want));
        if (!ok)
                return peer_auth_fail(a, -EACCES);

        peer_auth_set_state(a, a->role == PEER_AUTH_DIALER ? PEER_AUTH_PROOF_DUE : PEER_AUTH_DONE);
        return 0;
}

PeerAuthState peer_auth_get_state(const PeerAuth *a)
{
        assert(a);
        return a->state;
}

bool peer_auth_is_done(const PeerAuth *a)
{
        assert(a);
        return a->state == PEER_AUTH_DONE;
}

bool peer_auth_is_authenticated(const PeerAuth *a)
{
        assert(a);
        return a->state == PEER_AUTH_DONE && a->has_key;
}
