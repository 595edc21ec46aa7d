/* SPDX-License-Identifier: MIT */
/* Unit tests for SHA-256 (sha256.c), HMAC-SHA256 and the constant-time comparison (hmac.c). */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hmac.h"
#include "common/macro.h"
#include "common/sha256.h"

static void hex(const uint8_t *p, size_t n, char *out)
{
        for (size_t i = 0; i < n; i++)
                sprintf(out + 2 * i, "%02x", p[i]);
        out[2 * n] = '\0';
}

/* Asserts that the @n bytes at @digest print as @want, so that a failure shows both. */
#define assert_hex(digest, n, want)                                                                \
        do {                                                                                       \
                char _h_[2 * 64 + 1];                                                              \
                hex((digest), (n), _h_);                                                           \
                ck_assert_str_eq(_h_, (want));                                                     \
        } while (0)

/* A fixed, cheap pseudo-random sequence (xorshift64), so that failures reproduce. */
static uint64_t rnd_next(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static void rnd_fill(uint64_t *s, uint8_t *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)rnd_next(s);
}

/* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf"). */
START_TEST(test_sha256_nist)
{
        uint8_t d[SHA256_DIGEST_SIZE];

        sha256("abc", 3, d);
        assert_hex(d, sizeof(d),
                   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

        /* 448 bits: the padding does not fit after the message and takes a second block. */
        sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, d);
        assert_hex(d, sizeof(d),
                   "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

        sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
               "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
               112, d);
        assert_hex(d, sizeof(d),
                   "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

        sha256(NULL, 0, d);
        assert_hex(d, sizeof(d),
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(test_sha256_million_a)
{
        const char *want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        _cleanup_free_ uint8_t *buf = malloc(1000000);
        uint8_t d[SHA256_DIGEST_SIZE];
        Sha256 ctx;

        ck_assert_ptr_nonnull(buf);
        memset(buf, 'a', 1000000);
        sha256(buf, 1000000, d);
        assert_hex(d, sizeof(d), want);

        /* The same million bytes as NIST feeds them, a thousand at a time. */
        sha256_init(&ctx);
        for (unsigned i = 0; i < 1000; i++)
                sha256_update(&ctx, buf, 1000);
        sha256_final(&ctx, d);
        assert_hex(d, sizeof(d), want);
}
END_TEST

/*
 * Messages of 0, 1, 2, ... bytes around the block and padding boundaries; the digests were
 * computed with an independent implementation (Python's hashlib).
 */
START_TEST(test_sha256_boundaries)
{
        static const struct {
                size_t len;
                const char *want;
        } v[] = {
                {55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"},
                {56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"},
                {63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"},
                {64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"},
                {65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"},
                {119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"},
                {120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"},
                {128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5"},
        };
        uint8_t msg[128], d[SHA256_DIGEST_SIZE];

        for (size_t i = 0; i < sizeof(msg); i++)
                msg[i] = (uint8_t)i;
        for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
                sha256(msg, v[i].len, d);
                assert_hex(d, sizeof(d), v[i].want);
        }
}
END_TEST

START_TEST(test_sha256_streaming)
{
        uint64_t seed = 0x9e3779b97f4a7c15u;
        uint8_t msg[4099], one[SHA256_DIGEST_SIZE], streamed[SHA256_DIGEST_SIZE];

        rnd_fill(&seed, msg, sizeof(msg));
        for (unsigned round = 0; round < 200; round++) {
                size_t len = (size_t)(rnd_next(&seed) % (sizeof(msg) + 1));
                Sha256 ctx;

                sha256(msg, len, one);
                sha256_init(&ctx);
                for (size_t off = 0; off < len;) {
                        /* Odd pieces, mostly short, sometimes more than a block. */
                        size_t piece = (size_t)(rnd_next(&seed) % (round % 2 ? 7 : 150));

                        piece = MIN(piece, len - off);
                        sha256_update(&ctx, msg + off, piece);
                        off += piece;
                }
                sha256_final(&ctx, streamed);
                ck_assert_msg(memcmp(one, streamed, sizeof(one)) == 0,
                              "round %u: %zu bytes streamed differ from one shot", round, len);
        }
}
END_TEST

START_TEST(test_sha256_final_wipes)
{
        static const uint8_t zero[sizeof(Sha256)];
        uint8_t d[SHA256_DIGEST_SIZE];
        Sha256 ctx;

        sha256_init(&ctx);
        sha256_update(&ctx, "secret", 6);
        sha256_final(&ctx, d);
        ck_assert(memcmp(&ctx, zero, sizeof(ctx)) == 0);

        /* And the context is good for another digest after init. */
        sha256_init(&ctx);
        sha256_update(&ctx, "abc", 3);
        sha256_final(&ctx, d);
        assert_hex(d, sizeof(d),
                   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

/* RFC 4231 section 4, test cases 1-7. */
START_TEST(test_hmac_rfc4231)
{
        uint8_t k20_0b[20], k20_aa[20], k25[25], k20_0c[20], k131[131], d50_dd[50], d50_cd[50];
        uint8_t mac[HMAC_SHA256_SIZE];

        memset(k20_0b, 0x0b, sizeof(k20_0b));
        memset(k20_aa, 0xaa, sizeof(k20_aa));
        for (size_t i = 0; i < sizeof(k25); i++)
                k25[i] = (uint8_t)(i + 1);
        memset(k20_0c, 0x0c, sizeof(k20_0c));
        memset(k131, 0xaa, sizeof(k131));
        memset(d50_dd, 0xdd, sizeof(d50_dd));
        memset(d50_cd, 0xcd, sizeof(d50_cd));

        hmac_sha256(k20_0b, sizeof(k20_0b), "Hi There", 8, mac);
        assert_hex(mac, sizeof(mac),
                   "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

        /* 2: a key shorter than the output. */
        hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
        assert_hex(mac, sizeof(mac),
                   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

        hmac_sha256(k20_aa, sizeof(k20_aa), d50_dd, sizeof(d50_dd), mac);
        assert_hex(mac, sizeof(mac),
                   "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");

        hmac_sha256(k25, sizeof(k25), d50_cd, sizeof(d50_cd), mac);
        assert_hex(mac, sizeof(mac),
                   "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");

        /* 5: the RFC gives only the first 128 bits. */
        hmac_sha256(k20_0c, sizeof(k20_0c), "Test With Truncation", 20, mac);
        assert_hex(mac, 16, "a3b6167473100ee06e0c796c2955552b");

        /* 6 and 7: a key longer than the 64-byte block is hashed first. */
        hmac_sha256(k131, sizeof(k131), "Test Using Larger Than Block-Size Key - Hash Key First",
                    54, mac);
        assert_hex(mac, sizeof(mac),
                   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

        {
                const char *d = "This is a test using a larger than block-size key and a larger "
                                "than block-size data. The key needs to be hashed before being "
                                "used by the HMAC algorithm.";

                hmac_sha256(k131, sizeof(k131), d, strlen(d), mac);
                assert_hex(mac, sizeof(mac),
                           "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
        }
}
END_TEST

/* Keys at the edges RFC 4231 does not reach; computed with Python's hmac module. */
START_TEST(test_hmac_key_edges)
{
        uint8_t k64[64], mac[HMAC_SHA256_SIZE];

        hmac_sha256(NULL, 0, NULL, 0, mac);
        assert_hex(mac, sizeof(mac),
                   "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");

        /* Exactly one block: used as it is, not hashed. */
        memset(k64, 'k', sizeof(k64));
        hmac_sha256(k64, sizeof(k64), "x", 1, mac);
        assert_hex(mac, sizeof(mac),
                   "f91c4c403625fb06910ef93999265bbd2d62baeaec6ff36455498cc124fe3e66");
}
END_TEST

START_TEST(test_hmac_streaming)
{
        uint64_t seed = 42;
        uint8_t key[200], msg[3001], one[HMAC_SHA256_SIZE], streamed[HMAC_SHA256_SIZE];

        rnd_fill(&seed, msg, sizeof(msg));
        for (unsigned round = 0; round < 100; round++) {
                size_t key_len = (size_t)(rnd_next(&seed) % (sizeof(key) + 1));
                size_t len = (size_t)(rnd_next(&seed) % (sizeof(msg) + 1));
                HmacSha256 ctx;

                rnd_fill(&seed, key, key_len);
                hmac_sha256(key, key_len, msg, len, one);

                hmac_sha256_init(&ctx, key, key_len);
                /* The context keeps what it needs of the key, not a pointer to it. */
                memset(key, 0, sizeof(key));
                for (size_t off = 0; off < len;) {
                        size_t piece = (size_t)(rnd_next(&seed) % 97);

                        piece = MIN(piece, len - off);

                        hmac_sha256_update(&ctx, msg + off, piece);
                        off += piece;
                }
                hmac_sha256_final(&ctx, streamed);
                ck_assert_msg(memcmp(one, streamed, sizeof(one)) == 0,
                              "round %u: key %zu, %zu bytes streamed differ from one shot", round,
                              key_len, len);
        }
}
END_TEST

START_TEST(test_hmac_key_matters)
{
        uint8_t a[HMAC_SHA256_SIZE], b[HMAC_SHA256_SIZE];

        hmac_sha256("key1", 4, "data", 4, a);
        hmac_sha256("key2", 4, "data", 4, b);
        ck_assert(memcmp(a, b, sizeof(a)) != 0);

        /* A key is zero-padded to a block, so a trailing NUL does not change it ... */
        hmac_sha256("key1\0", 5, "data", 4, b);
        ck_assert(memcmp(a, b, sizeof(a)) == 0);
        /* ... but the message is not padded. */
        hmac_sha256("key1", 4, "data\0", 5, b);
        ck_assert(memcmp(a, b, sizeof(a)) != 0);
}
END_TEST

START_TEST(test_memeq_consttime)
{
        uint8_t a[64], b[64];

        for (size_t i = 0; i < sizeof(a); i++)
                a[i] = b[i] = (uint8_t)(i * 7);
        ck_assert(hmac_memeq(a, b, sizeof(a)));
        ck_assert(hmac_memeq(a, b, 0));
        ck_assert(hmac_memeq(NULL, NULL, 0));

        /* One bit anywhere is a difference, including the first and the last byte. */
        for (size_t i = 0; i < sizeof(a); i++) {
                for (unsigned bit = 0; bit < 8; bit++) {
                        b[i] ^= (uint8_t)(1u << bit);
                        ck_assert_msg(!hmac_memeq(a, b, sizeof(a)), "byte %zu bit %u", i, bit);
                        ck_assert(hmac_memeq(a, b, i));
                        b[i] ^= (uint8_t)(1u << bit);
                }
        }
}
END_TEST

static Suite *sha256_suite(void)
{
        Suite *s = suite_create("sha256");
        TCase *tc = tcase_create("digest");

        tcase_add_test(tc, test_sha256_nist);
        tcase_add_test(tc, test_sha256_million_a);
        tcase_add_test(tc, test_sha256_boundaries);
        tcase_add_test(tc, test_sha256_streaming);
        tcase_add_test(tc, test_sha256_final_wipes);
        suite_add_tcase(s, tc);
        return s;
}

static Suite *hmac_suite(void)
{
        Suite *s = suite_create("hmac");
        TCase *tc = tcase_create("hmac-sha256");

        tcase_add_test(tc, test_hmac_rfc4231);
        tcase_add_test(tc, test_hmac_key_edges);
        tcase_add_test(tc, test_hmac_streaming);
        tcase_add_test(tc, test_hmac_key_matters);
        tcase_add_test(tc, test_memeq_consttime);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(sha256_suite());
        int failed;

        srunner_add_suite(sr, hmac_suite());
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
