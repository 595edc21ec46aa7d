/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication: the handshake two kvdistd daemons run when a peer control connection
 * opens, a mutual HMAC-SHA256 challenge-response over the pre-shared cluster key. Pure logic, no
 * I/O, no logging, no allocation: the connection code moves the messages and logs the outcome.
 *
 * Flow (the dialer opened the connection):
 *
 *      dialer                                  listener
 *      peer_auth_hello()       -- Hello -->    peer_auth_on_hello()
 *                                              peer_auth_hello()
 *      peer_auth_on_hello()    <-- Hello --
 *      peer_auth_on_proof()    <-- Proof --    peer_auth_proof()
 *      peer_auth_proof()       -- Proof -->    peer_auth_on_proof()
 *
 * Without a key on both sides no proofs are exchanged: each side is done once it has both
 * Hellos, and peer_auth_is_authenticated() stays false (allowed; the caller warns).
 *
 * A proof is PEER_AUTH_MAC_SIZE bytes of
 *
 *      HMAC-SHA256(key, "kvdist-peer-auth-v1" || prover role byte || prover node_id ||
 *                       verifier node_id || prover nonce || verifier nonce)
 *
 * with the 19 context bytes without a terminating NUL, the role byte 'D' (0x44) for the dialer
 * and 'L' (0x4c) for the listener, node ids as 8 bytes little-endian and nonces as their 32
 * bytes. A proof for the other direction, from another session (other nonces) or under another
 * key does not verify.
 *
 * This proves that the peer holds the key; it does not protect what follows on the connection.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hmac.h"

#define PEER_AUTH_NONCE_SIZE 32
#define PEER_AUTH_MAC_SIZE HMAC_SHA256_SIZE
#define PEER_AUTH_CONTEXT "kvdist-peer-auth-v1"
#define PEER_AUTH_ROLE_BYTE_DIALER 'D'
#define PEER_AUTH_ROLE_BYTE_LISTENER 'L'

typedef enum PeerAuthRole {
        PEER_AUTH_DIALER,   /* opened the connection; speaks first */
        PEER_AUTH_LISTENER, /* accepted it */
        _PEER_AUTH_ROLE_MAX,
        _PEER_AUTH_ROLE_INVALID = -EINVAL,
} PeerAuthRole;

typedef enum PeerAuthState {
        PEER_AUTH_START,          /* dialer: send Hello; listener: wait for Hello */
        PEER_AUTH_HELLO_SENT,     /* dialer: wait for the listener's Hello */
        PEER_AUTH_HELLO_RECEIVED, /* listener: send Hello */
        PEER_AUTH_PROOF_DUE,      /* send our Proof */
        PEER_AUTH_PROOF_AWAITED,  /* wait for the peer's Proof */
        PEER_AUTH_DONE,           /* finished; authenticated only if both sides have a key */
        PEER_AUTH_FAILED,         /* refused; every later call fails with -EPROTO */
        _PEER_AUTH_STATE_MAX,
        _PEER_AUTH_STATE_INVALID = -EINVAL,
} PeerAuthState;

typedef struct PeerAuthHello {
        uint64_t node_id;
        uint8_t nonce[PEER_AUTH_NONCE_SIZE];
        bool has_key;
} PeerAuthHello;

typedef struct PeerAuthProof {
        uint8_t mac[PEER_AUTH_MAC_SIZE];
} PeerAuthProof;

/* One side of one handshake, embedded in its connection; fields are private to peer-auth.c. */
typedef struct PeerAuth {
        PeerAuthRole role;
        PeerAuthState state;
        uint64_t node_id;
        uint64_t peer_node_id;
        uint8_t nonce[PEER_AUTH_NONCE_SIZE];
        uint8_t peer_nonce[PEER_AUTH_NONCE_SIZE];
        bool has_key;
        size_t key_len;
        uint8_t key[SHA256_BLOCK_SIZE]; /* a key over a block is its digest */
} PeerAuth;

/*
 * Starts a handshake in @a as @role for the daemon @node_id, with a fresh nonce from
 * getrandom(2). @key_len bytes at @key are copied into @a (any length; a key longer than the
 * HMAC block is kept as its SHA-256 digest, which gives the same MACs); @key_len 0 means no key.
 * Returns 0, -EINVAL for a bad @role or a NULL @key with a length, or getrandom's error.
 */
int peer_auth_init(PeerAuth *a, PeerAuthRole role, uint64_t node_id, const void *key,
                   size_t key_len);

/* As peer_auth_init() with the nonce given by the caller (tests); never reuse a nonce. */
int peer_auth_init_with_nonce(PeerAuth *a, PeerAuthRole role, uint64_t node_id,
                              const uint8_t nonce[PEER_AUTH_NONCE_SIZE], const void *key,
                              size_t key_len);

/* Wipes @a, key included (explicit_bzero); every later call on it fails with -EPROTO. */
void peer_auth_deinit(PeerAuth *a);

/*
 * Writes our Hello into @ret: the dialer's first message, the listener's answer to the dialer's
 * Hello. Returns 0, or -EPROTO when it is not our turn to send a Hello.
 */
int peer_auth_hello(PeerAuth *a, PeerAuthHello *ret);

/*
 * Takes the peer's Hello. Returns 0; -EPROTO when no Hello is expected now; -EALREADY when it
 * carries our own node id (we are connected to ourselves); -EPERM when one side has a key and
 * the other has none. Any error fails the handshake.
 */
int peer_auth_on_hello(PeerAuth *a, const PeerAuthHello *hello);

/*
 * Writes our Proof into @ret (listener: right after its Hello; dialer: after it verified the
 * listener's). Returns 0, or -EPROTO when no Proof is due (also when there is no key).
 */
int peer_auth_proof(PeerAuth *a, PeerAuthProof *ret);

/*
 * Verifies the peer's Proof in constant time. Returns 0; -EACCES when it does not verify;
 * -EPROTO when no Proof is expected now. Any error fails the handshake.
 */
int peer_auth_on_proof(PeerAuth *a, const PeerAuthProof *proof);

/* The state @a is in: what the caller has to send or wait for next. */
PeerAuthState peer_auth_get_state(const PeerAuth *a);

/* Whether the handshake finished (with or without keys). */
bool peer_auth_is_done(const PeerAuth *a);

/* Whether it finished with both sides proving the key to each other. */
bool peer_auth_is_authenticated(const PeerAuth *a);

const char *peer_auth_state_to_string(PeerAuthState s);
const char *peer_auth_role_to_string(PeerAuthRole r);
