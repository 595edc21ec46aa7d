/* SPDX-License-Identifier: MIT */
/* Unit tests for the daemon-to-daemon authentication handshake (daemon/link/peer-auth.c). */

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hmac.h"
#include "common/macro.h"
#include "daemon/link/peer-auth.h"

static const char KEY[] = "kvdist-test-cluster-key";
static const char OTHER_KEY[] = "kvdist-test-cluster-kez";

#define DIALER_ID UINT64_C(0x0102030405060708)
#define LISTENER_ID UINT64_C(0xf1e2d3c4b5a69788)

static void hex(const uint8_t *p, size_t n, char *out)
{
        for (size_t i = 0; i < n; i++)
                sprintf(out + 2 * i, "%02x", p[i]);
        out[2 * n] = '\0';
}

#define assert_hex(bytes, n, want)                                                                 \
        do {                                                                                       \
                char _h_[2 * 64 + 1];                                                              \
                hex((bytes), (n), _h_);                                                            \
                ck_assert_str_eq(_h_, (want));                                                     \
        } while (0)

/* A nonce whose bytes are @base, @base + 1, ... */
static void nonce_fill(uint8_t nonce[PEER_AUTH_NONCE_SIZE], uint8_t base)
{
        for (unsigned i = 0; i < PEER_AUTH_NONCE_SIZE; i++)
                nonce[i] = (uint8_t)(base + i);
}

static void init_fixed(PeerAuth *a, PeerAuthRole role, uint64_t id, uint8_t nonce_base,
                       const void *key, size_t key_len)
{
        uint8_t nonce[PEER_AUTH_NONCE_SIZE];

        nonce_fill(nonce, nonce_base);
        ck_assert_int_eq(peer_auth_init_with_nonce(a, role, id, nonce, key, key_len), 0);
}

/*
 * The proof written out by hand from the documented layout, independently of peer-auth.c:
 * context || role byte || prover id LE || verifier id LE || prover nonce || verifier nonce.
 */
static void expected_mac(const void *key, size_t key_len, uint8_t role_byte, uint64_t prover_id,
                         uint64_t verifier_id, const uint8_t *prover_nonce,
                         const uint8_t *verifier_nonce, uint8_t out[PEER_AUTH_MAC_SIZE])
{
        uint8_t buf[19 + 1 + 8 + 8 + 32 + 32];
        size_t n = 0;

        memcpy(buf, "kvdist-peer-auth-v1", 19);
        n += 19;
        buf[n++] = role_byte;
        for (unsigned i = 0; i < 8; i++)
                buf[n++] = (uint8_t)(prover_id >> (8 * i));
        for (unsigned i = 0; i < 8; i++)
                buf[n++] = (uint8_t)(verifier_id >> (8 * i));
        memcpy(buf + n, prover_nonce, 32);
        n += 32;
        memcpy(buf + n, verifier_nonce, 32);
        n += 32;
        ck_assert_uint_eq(n, sizeof(buf));
        hmac_sha256(key, key_len, buf, n, out);
}

/* Messages one complete keyed handshake exchanged, in order. */
typedef struct Transcript {
        PeerAuthHello dialer_hello;
        PeerAuthHello listener_hello;
        PeerAuthProof listener_proof;
        PeerAuthProof dialer_proof;
} Transcript;

/* Runs a keyed handshake between @d and @l that must succeed, recording it in @t. */
static void run_keyed(PeerAuth *d, PeerAuth *l, Transcript *t)
{
        ck_assert_int_eq(peer_auth_hello(d, &t->dialer_hello), 0);
        ck_assert_int_eq(peer_auth_get_state(d), PEER_AUTH_HELLO_SENT);
        ck_assert_int_eq(peer_auth_on_hello(l, &t->dialer_hello), 0);
        ck_assert_int_eq(peer_auth_get_state(l), PEER_AUTH_HELLO_RECEIVED);
        ck_assert_int_eq(peer_auth_hello(l, &t->listener_hello), 0);
        ck_assert_int_eq(peer_auth_get_state(l), PEER_AUTH_PROOF_DUE);
        ck_assert_int_eq(peer_auth_proof(l, &t->listener_proof), 0);
        ck_assert_int_eq(peer_auth_get_state(l), PEER_AUTH_PROOF_AWAITED);
        ck_assert(!peer_auth_is_done(l));

        ck_assert_int_eq(peer_auth_on_hello(d, &t->listener_hello), 0);
        ck_assert_int_eq(peer_auth_get_state(d), PEER_AUTH_PROOF_AWAITED);
        ck_assert_int_eq(peer_auth_on_proof(d, &t->listener_proof), 0);
        ck_assert_int_eq(peer_auth_get_state(d), PEER_AUTH_PROOF_DUE);
        ck_assert(!peer_auth_is_done(d));
        ck_assert_int_eq(peer_auth_proof(d, &t->dialer_proof), 0);
        ck_assert(peer_auth_is_done(d));
        ck_assert(peer_auth_is_authenticated(d));

        ck_assert_int_eq(peer_auth_on_proof(l, &t->dialer_proof), 0);
        ck_assert(peer_auth_is_done(l));
        ck_assert(peer_auth_is_authenticated(l));
}

START_TEST(test_same_key_completes)
{
        PeerAuth d, l;
        Transcript t;

        ck_assert_int_eq(peer_auth_init(&d, PEER_AUTH_DIALER, DIALER_ID, KEY, strlen(KEY)), 0);
        ck_assert_int_eq(peer_auth_init(&l, PEER_AUTH_LISTENER, LISTENER_ID, KEY, strlen(KEY)), 0);
        run_keyed(&d, &l, &t);

        ck_assert_uint_eq(t.dialer_hello.node_id, DIALER_ID);
        ck_assert_uint_eq(t.listener_hello.node_id, LISTENER_ID);
        ck_assert(t.dialer_hello.has_key);
        ck_assert(t.listener_hello.has_key);
        /* getrandom() nonces: two sides never share one. */
        ck_assert(memcmp(t.dialer_hello.nonce, t.listener_hello.nonce, PEER_AUTH_NONCE_SIZE));
        ck_assert(memcmp(t.dialer_proof.mac, t.listener_proof.mac, PEER_AUTH_MAC_SIZE));

        /* Once done, nothing more is accepted and it stays authenticated. */
        ck_assert_int_eq(peer_auth_on_proof(&l, &t.dialer_proof), -EPROTO);
        ck_assert_int_eq(peer_auth_proof(&d, &t.dialer_proof), -EPROTO);
        ck_assert(peer_auth_is_authenticated(&l));
        ck_assert(peer_auth_is_authenticated(&d));

        peer_auth_deinit(&d);
        peer_auth_deinit(&l);
}
END_TEST

START_TEST(test_wire_format_pinned)
{
        uint8_t dn[PEER_AUTH_NONCE_SIZE], ln[PEER_AUTH_NONCE_SIZE], want[PEER_AUTH_MAC_SIZE];
        PeerAuth d, l;
        Transcript t;

        nonce_fill(dn, 0x00);
        nonce_fill(ln, 0x80);
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        run_keyed(&d, &l, &t);

        ck_assert_mem_eq(t.dialer_hello.nonce, dn, sizeof(dn));
        ck_assert_mem_eq(t.listener_hello.nonce, ln, sizeof(ln));

        expected_mac(KEY, strlen(KEY), 'L', LISTENER_ID, DIALER_ID, ln, dn, want);
        ck_assert_mem_eq(t.listener_proof.mac, want, sizeof(want));
        expected_mac(KEY, strlen(KEY), 'D', DIALER_ID, LISTENER_ID, dn, ln, want);
        ck_assert_mem_eq(t.dialer_proof.mac, want, sizeof(want));

        /* The same two tags from Python's hmac module, so that neither side of this test can
         * drift with the C code. */
        assert_hex(t.listener_proof.mac, PEER_AUTH_MAC_SIZE,
                   "659d58c162e37c8d9e34a529ab1e74b13c1b42db879310afe29ee55135f51db2");
        assert_hex(t.dialer_proof.mac, PEER_AUTH_MAC_SIZE,
                   "d04cbc1490773c5f141245370364704f36510c40bd33abad71163bcb3fe6a2af");

        peer_auth_deinit(&d);
        peer_auth_deinit(&l);
}
END_TEST

START_TEST(test_wrong_key_fails_at_dialer)
{
        PeerAuthHello dh, lh;
        PeerAuthProof lp, dp;
        PeerAuth d, l;

        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, OTHER_KEY, strlen(OTHER_KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));

        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d, &lp), -EACCES);
        ck_assert_int_eq(peer_auth_get_state(&d), PEER_AUTH_FAILED);
        ck_assert(!peer_auth_is_done(&d));
        ck_assert(!peer_auth_is_authenticated(&d));

        /* A failed dialer produces no proof, and a second try with the same proof is refused. */
        memset(&dp, 0xaa, sizeof(dp));
        ck_assert_int_eq(peer_auth_proof(&d, &dp), -EPROTO);
        for (unsigned i = 0; i < sizeof(dp.mac); i++)
                ck_assert_uint_eq(dp.mac[i], 0xaa);
        ck_assert_int_eq(peer_auth_on_proof(&d, &lp), -EPROTO);
        ck_assert_int_eq(peer_auth_get_state(&d), PEER_AUTH_FAILED);
}
END_TEST

START_TEST(test_wrong_key_lying_dialer_fails_at_listener)
{
        PeerAuth d, l, shadow;
        PeerAuthHello dh, lh, sh;
        PeerAuthProof lp, sp, dp;

        /*
         * The dialer holds the wrong key but lies its way past its own check: a shadow listener
         * with the same id and nonce as the real one, under the dialer's key, gives it a
         * listener proof it accepts. Its own proof then reaches the real listener.
         */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, OTHER_KEY, strlen(OTHER_KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        init_fixed(&shadow, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, OTHER_KEY, strlen(OTHER_KEY));

        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&shadow, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_hello(&shadow, &sh), 0);
        ck_assert_mem_eq(&lh, &sh, sizeof(lh));
        ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
        ck_assert_int_eq(peer_auth_proof(&shadow, &sp), 0);
        ck_assert(memcmp(lp.mac, sp.mac, sizeof(lp.mac)));

        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d, &sp), 0);
        ck_assert_int_eq(peer_auth_proof(&d, &dp), 0);
        ck_assert(peer_auth_is_done(&d));

        ck_assert_int_eq(peer_auth_on_proof(&l, &dp), -EACCES);
        ck_assert_int_eq(peer_auth_get_state(&l), PEER_AUTH_FAILED);
        ck_assert(!peer_auth_is_authenticated(&l));
        /* A second guess is not allowed. */
        ck_assert_int_eq(peer_auth_on_proof(&l, &dp), -EPROTO);
}
END_TEST

START_TEST(test_replay_from_earlier_session)
{
        PeerAuth d, l, d2, l2;
        PeerAuthHello h;
        Transcript t;

        /* A session an eavesdropper recorded. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        run_keyed(&d, &l, &t);

        /* It plays the dialer to the same listener, whose nonce is new this time. */
        init_fixed(&l2, PEER_AUTH_LISTENER, LISTENER_ID, 0x40, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_on_hello(&l2, &t.dialer_hello), 0);
        ck_assert_int_eq(peer_auth_hello(&l2, &h), 0);
        ck_assert_int_eq(peer_auth_proof(&l2, &(PeerAuthProof){0}), 0);
        ck_assert_int_eq(peer_auth_on_proof(&l2, &t.dialer_proof), -EACCES);
        ck_assert(!peer_auth_is_authenticated(&l2));

        /* And the listener to the same dialer, whose nonce is new. */
        init_fixed(&d2, PEER_AUTH_DIALER, DIALER_ID, 0x20, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d2, &h), 0);
        ck_assert_int_eq(peer_auth_on_hello(&d2, &t.listener_hello), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d2, &t.listener_proof), -EACCES);
        ck_assert(!peer_auth_is_authenticated(&d2));
}
END_TEST

START_TEST(test_reflected_proof)
{
        uint8_t dn[PEER_AUTH_NONCE_SIZE], ln[PEER_AUTH_NONCE_SIZE];
        PeerAuthHello dh, lh;
        PeerAuthProof lp, own;
        PeerAuth d, l;

        /* The listener's proof echoed back to it as the dialer's. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
        ck_assert_int_eq(peer_auth_on_proof(&l, &lp), -EACCES);

        /* The dialer handed the proof it would itself send, in place of the listener's. */
        nonce_fill(dn, 0x00);
        nonce_fill(ln, 0x80);
        expected_mac(KEY, strlen(KEY), 'D', DIALER_ID, LISTENER_ID, dn, ln, own.mac);
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d, &own), -EACCES);

        /* Even with both nonces equal, the role byte keeps the two directions apart. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
        ck_assert_int_eq(peer_auth_on_proof(&l, &lp), -EACCES);
}
END_TEST

START_TEST(test_key_on_one_side)
{
        PeerAuthHello dh, lh;
        PeerAuth d, l;

        /* Dialer keyed, listener not: the listener refuses the dialer's Hello. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, NULL, 0);
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert(dh.has_key);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EPERM);
        ck_assert_int_eq(peer_auth_get_state(&l), PEER_AUTH_FAILED);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), -EPROTO);

        /* The dialer refuses a Hello without a key, too. */
        lh = (PeerAuthHello){.node_id = LISTENER_ID, .has_key = false};
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), -EPERM);
        ck_assert_int_eq(peer_auth_get_state(&d), PEER_AUTH_FAILED);

        /* Listener keyed, dialer not. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, NULL, 0);
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert(!dh.has_key);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EPERM);
        lh = (PeerAuthHello){.node_id = LISTENER_ID, .has_key = true};
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), -EPERM);
        ck_assert(!peer_auth_is_done(&d));
        ck_assert(!peer_auth_is_done(&l));
}
END_TEST

START_TEST(test_no_keys_completes_unauthenticated)
{
        PeerAuthHello dh, lh;
        PeerAuthProof p = {0};
        PeerAuth d, l;

        ck_assert_int_eq(peer_auth_init(&d, PEER_AUTH_DIALER, DIALER_ID, NULL, 0), 0);
        /* A non-NULL key of length 0 is no key either. */
        ck_assert_int_eq(peer_auth_init(&l, PEER_AUTH_LISTENER, LISTENER_ID, KEY, 0), 0);

        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert(!dh.has_key);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert(!lh.has_key);
        ck_assert(peer_auth_is_done(&l));
        ck_assert(!peer_auth_is_authenticated(&l));
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert(peer_auth_is_done(&d));
        ck_assert(!peer_auth_is_authenticated(&d));

        /* No proofs in either direction. */
        ck_assert_int_eq(peer_auth_proof(&l, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_proof(&d, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_on_proof(&l, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_on_proof(&d, &p), -EPROTO);
        ck_assert(peer_auth_is_done(&d));
        ck_assert(!peer_auth_is_authenticated(&d));
}
END_TEST

START_TEST(test_same_node_id)
{
        PeerAuthHello dh, lh;
        PeerAuth d, l;

        /* Dialed ourselves: the listener sees its own id. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        init_fixed(&l, PEER_AUTH_LISTENER, DIALER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EALREADY);
        ck_assert_int_eq(peer_auth_get_state(&l), PEER_AUTH_FAILED);

        /* The dialer sees its own id in the answer (a Hello echoed back; also without keys). */
        ck_assert_int_eq(peer_auth_on_hello(&d, &dh), -EALREADY);
        ck_assert_int_eq(peer_auth_get_state(&d), PEER_AUTH_FAILED);

        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, NULL, 0);
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        lh = dh;
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), -EALREADY);
        ck_assert(!peer_auth_is_done(&d));
}
END_TEST

START_TEST(test_out_of_order)
{
        PeerAuthHello dh, lh;
        PeerAuthProof p = {0};
        PeerAuth d, l;

        /* Listener: a Proof before any Hello, then nothing more goes. */
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_on_proof(&l, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_get_state(&l), PEER_AUTH_FAILED);
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EPROTO);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), -EPROTO);
        ck_assert_int_eq(peer_auth_proof(&l, &p), -EPROTO);

        /* Listener: speaking before the dialer did. */
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&l, &lh), -EPROTO);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EPROTO);

        /* Listener: a second Hello from the dialer. */
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), -EPROTO);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), -EPROTO);

        /* Listener: the dialer's Proof before the listener sent its own. */
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&l, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_proof(&l, &p), -EPROTO);

        /* Dialer: a Hello taken before it sent its own. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), -EPROTO);
        ck_assert_int_eq(peer_auth_hello(&d, &dh), -EPROTO);

        /* Dialer: a Proof before the listener's Hello. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), -EPROTO);

        /* Dialer: asked for its Proof before it verified the listener's. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert_int_eq(peer_auth_proof(&d, &p), -EPROTO);
        ck_assert_int_eq(peer_auth_get_state(&d), PEER_AUTH_FAILED);
        ck_assert_int_eq(peer_auth_on_proof(&d, &p), -EPROTO);

        /* Dialer: a second Hello. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&d, &dh), -EPROTO);
        ck_assert(!peer_auth_is_done(&d));
}
END_TEST

START_TEST(test_long_key)
{
        uint8_t key[200], other[200], want[PEER_AUTH_MAC_SIZE];
        uint8_t dn[PEER_AUTH_NONCE_SIZE], ln[PEER_AUTH_NONCE_SIZE];
        static const size_t lens[] = {1, 63, 64, 65, 100, 200};
        PeerAuthHello dh, lh;
        PeerAuthProof lp;
        PeerAuth d, l;
        Transcript t;

        for (size_t i = 0; i < sizeof(key); i++)
                key[i] = (uint8_t)(i * 7 + 3);
        nonce_fill(dn, 0x00);
        nonce_fill(ln, 0x80);

        for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
                size_t n = lens[i];

                init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, key, n);
                init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, key, n);
                run_keyed(&d, &l, &t);
                /* Equal to HMAC under the key as given, however it is stored. */
                expected_mac(key, n, 'L', LISTENER_ID, DIALER_ID, ln, dn, want);
                ck_assert_mem_eq(t.listener_proof.mac, want, sizeof(want));
                expected_mac(key, n, 'D', DIALER_ID, LISTENER_ID, dn, ln, want);
                ck_assert_mem_eq(t.dialer_proof.mac, want, sizeof(want));

                /* The last byte counts, past the block size too. */
                memcpy(other, key, n);
                other[n - 1] ^= 0x01;
                init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, other, n);
                init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, key, n);
                ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
                ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
                ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
                ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
                ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
                ck_assert_int_eq(peer_auth_on_proof(&d, &lp), -EACCES);
        }

        /* A longer key is not confused with a prefix of it. */
        init_fixed(&d, PEER_AUTH_DIALER, DIALER_ID, 0x00, key, 65);
        init_fixed(&l, PEER_AUTH_LISTENER, LISTENER_ID, 0x80, key, 64);
        ck_assert_int_eq(peer_auth_hello(&d, &dh), 0);
        ck_assert_int_eq(peer_auth_on_hello(&l, &dh), 0);
        ck_assert_int_eq(peer_auth_hello(&l, &lh), 0);
        ck_assert_int_eq(peer_auth_proof(&l, &lp), 0);
        ck_assert_int_eq(peer_auth_on_hello(&d, &lh), 0);
        ck_assert_int_eq(peer_auth_on_proof(&d, &lp), -EACCES);
}
END_TEST

START_TEST(test_init_and_deinit)
{
        uint8_t nonce[PEER_AUTH_NONCE_SIZE] = {0};
        char key[] = "kvdist-test-cluster-key";
        PeerAuthHello h;
        PeerAuth a;

        ck_assert_int_eq(peer_auth_init(&a, (PeerAuthRole)2, DIALER_ID, KEY, strlen(KEY)), -EINVAL);
        ck_assert_int_eq(peer_auth_init(&a, _PEER_AUTH_ROLE_INVALID, DIALER_ID, NULL, 0), -EINVAL);
        ck_assert_int_eq(peer_auth_init_with_nonce(&a, PEER_AUTH_DIALER, DIALER_ID, nonce, NULL, 4),
                         -EINVAL);

        /* The key is copied: changing the caller's buffer afterwards changes nothing. */
        ck_assert_int_eq(peer_auth_init(&a, PEER_AUTH_DIALER, DIALER_ID, key, strlen(key)), 0);
        memset(key, 0, sizeof(key));
        ck_assert_uint_eq(a.key_len, strlen(KEY));
        ck_assert_mem_eq(a.key, KEY, strlen(KEY));
        ck_assert_int_eq(peer_auth_hello(&a, &h), 0);

        peer_auth_deinit(&a);
        for (size_t i = 0; i < sizeof(a.key); i++)
                ck_assert_uint_eq(a.key[i], 0);
        for (size_t i = 0; i < sizeof(a.nonce); i++)
                ck_assert_uint_eq(a.nonce[i], 0);
        ck_assert_uint_eq(a.key_len, 0);
        ck_assert_int_eq(peer_auth_get_state(&a), PEER_AUTH_FAILED);
        ck_assert_int_eq(peer_auth_on_hello(&a, &h), -EPROTO);
        ck_assert_int_eq(peer_auth_hello(&a, &h), -EPROTO);
        peer_auth_deinit(NULL);

        ck_assert_str_eq(peer_auth_state_to_string(PEER_AUTH_PROOF_AWAITED), "proof-awaited");
        ck_assert_str_eq(peer_auth_state_to_string(_PEER_AUTH_STATE_INVALID), "invalid");
        ck_assert_str_eq(peer_auth_role_to_string(PEER_AUTH_LISTENER), "listener");
}
END_TEST

static Suite *peer_auth_suite(void)
{
        Suite *s = suite_create("peer-auth");
        TCase *tc = tcase_create("handshake");
        TCase *tc_attack = tcase_create("refusals");

        tcase_add_test(tc, test_same_key_completes);
        tcase_add_test(tc, test_wire_format_pinned);
        tcase_add_test(tc, test_no_keys_completes_unauthenticated);
        tcase_add_test(tc, test_long_key);
        tcase_add_test(tc, test_init_and_deinit);
        suite_add_tcase(s, tc);

        tcase_add_test(tc_attack, test_wrong_key_fails_at_dialer);
        tcase_add_test(tc_attack, test_wrong_key_lying_dialer_fails_at_listener);
        tcase_add_test(tc_attack, test_replay_from_earlier_session);
        tcase_add_test(tc_attack, test_reflected_proof);
        tcase_add_test(tc_attack, test_key_on_one_side);
        tcase_add_test(tc_attack, test_same_node_id);
        tcase_add_test(tc_attack, test_out_of_order);
        suite_add_tcase(s, tc_attack);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(peer_auth_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
