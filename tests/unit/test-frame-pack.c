/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for frame_pack()'s own encoding of long block-id lists: what it packs decodes, with
 * protobuf-c and with frame_unpack_facts(), to the message it was given, at every varint length
 * and at the length where it takes over from protobuf-c.
 */

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"

/* Values of every varint length, 1 to 10 bytes, and both edges of each. */
static uint64_t edge_value(size_t i)
{
        unsigned bits = (unsigned)(i / 3 % 10) * 7;
        uint64_t top = bits == 63 ? UINT64_MAX : (UINT64_C(1) << (bits + 7)) - 1;
        uint64_t low = bits == 0 ? 0 : UINT64_C(1) << bits;

        switch (i % 3) {
        case 0:
                return low;
        case 1:
                return top;
        default:
                return low + (top - low) / 2 + i;
        }
}

typedef struct Lists {
        uint64_t *src, *dst;
        size_t n_src, n_dst;
} Lists;

static void lists_make(Lists *l, size_t n_src, size_t n_dst)
{
        l->src = calloc(n_src ?: 1, sizeof(uint64_t));
        l->dst = calloc(n_dst ?: 1, sizeof(uint64_t));
        ck_assert(l->src && l->dst);
        l->n_src = n_src;
        l->n_dst = n_dst;
        for (size_t i = 0; i < n_src; i++)
                l->src[i] = edge_value(i);
        for (size_t i = 0; i < n_dst; i++)
                l->dst[i] = edge_value(i * 7 + 1);
}

static void lists_free(Lists *l)
{
        free(l->src);
        free(l->dst);
}

/* A peer's request with fields on both sides of the lists. */
static void peer_transfer_fill(Kvdist__V1__PeerTransfer *t, const Lists *l)
{
        *t = (Kvdist__V1__PeerTransfer)KVDIST__V1__PEER_TRANSFER__INIT;
        t->job_id = UINT64_C(0x8000000000000001);
        t->link_id = 42;
        t->kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t->n_src_blocks = l->n_src;
        t->src_blocks = l->src;
        t->n_dst_blocks = l->n_dst;
        t->dst_blocks = l->dst;
        t->local_batch_index = 3;
        t->size = -1;
        t->tensor_num_per_layer = 2;
        t->timeout_ms = 5000;
}

static void assert_same_request(const Kvdist__V1__PeerTransfer *a,
                                const Kvdist__V1__PeerTransfer *b)
{
        ck_assert_uint_eq(a->job_id, b->job_id);
        ck_assert_uint_eq(a->link_id, b->link_id);
        ck_assert_int_eq(a->kind, b->kind);
        ck_assert_uint_eq(a->local_batch_index, b->local_batch_index);
        ck_assert_int_eq(a->size, b->size);
        ck_assert_uint_eq(a->tensor_num_per_layer, b->tensor_num_per_layer);
        ck_assert_uint_eq(a->timeout_ms, b->timeout_ms);
        ck_assert_uint_eq(a->n_src_blocks, b->n_src_blocks);
        ck_assert_uint_eq(a->n_dst_blocks, b->n_dst_blocks);
        for (size_t i = 0; i < a->n_src_blocks; i++)
                ck_assert_uint_eq(a->src_blocks[i], b->src_blocks[i]);
        for (size_t i = 0; i < a->n_dst_blocks; i++)
                ck_assert_uint_eq(a->dst_blocks[i], b->dst_blocks[i]);
}

/*
 * Packs lists of @n_src and @n_dst values; both decoders give the message back; the payload has
 * protobuf-c's size, and protobuf-c's very bytes when no list is long enough for frame_pack() to
 * encode it itself (it puts those after the rest, so the bytes differ when one is).
 */
static void round_trip(size_t n_src, size_t n_dst)
{
        Kvdist__V1__PeerTransfer t, *back;
        FrameListFacts facts[FRAME_LIST_FACTS_MAX];
        _cleanup_free_ uint8_t *buf = NULL, *ref = NULL;
        ProtobufCMessage *m = NULL;
        size_t len, ref_len, payload, n_facts;
        bool own = n_src >= 256 || n_dst >= 256;
        Lists l;

        lists_make(&l, n_src, n_dst);
        peer_transfer_fill(&t, &l);
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, 0, 9, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        payload = len - FRAME_HEADER_SIZE;

        ref_len = protobuf_c_message_get_packed_size(&t.base);
        ck_assert_uint_eq(payload, ref_len);
        ref = malloc(ref_len);
        ck_assert_ptr_nonnull(ref);
        ck_assert_uint_eq(protobuf_c_message_pack(&t.base, ref), ref_len);
        if (own)
                ck_assert_int_ne(memcmp(buf + FRAME_HEADER_SIZE, ref, payload), 0);
        else
                ck_assert_int_eq(memcmp(buf + FRAME_HEADER_SIZE, ref, payload), 0);

        back = kvdist__v1__peer_transfer__unpack(NULL, payload, buf + FRAME_HEADER_SIZE);
        ck_assert_ptr_nonnull(back);
        assert_same_request(&t, back);
        kvdist__v1__peer_transfer__free_unpacked(back, NULL);

        ck_assert_int_eq(frame_unpack_facts(&kvdist__v1__peer_transfer__descriptor,
                                            buf + FRAME_HEADER_SIZE, payload, &m, facts, &n_facts),
                         0);
        assert_same_request(&t, (Kvdist__V1__PeerTransfer *)m);
        protobuf_c_message_free_unpacked(m, NULL);
        lists_free(&l);
}

/* Every varint length, lists on both sides of the length where frame_pack() takes over. */
START_TEST(test_pack_long_lists_round_trip)
{
        static const size_t lengths[] = {0, 1, 30, 255, 256, 257, 3001};

        for (size_t i = 0; i < ARRAY_SIZE(lengths); i++)
                for (size_t j = 0; j < ARRAY_SIZE(lengths); j++)
                        round_trip(lengths[i], lengths[j]);
}
END_TEST

/* The ids were encoded by hand: a list of 2^63 and UINT64_MAX only, byte for byte. */
START_TEST(test_pack_long_list_bytes)
{
        Kvdist__V1__PeerTransfer t = KVDIST__V1__PEER_TRANSFER__INIT;
        uint64_t ids[256];
        _cleanup_free_ uint8_t *buf = NULL;
        const uint8_t *p;
        size_t len;

        for (size_t i = 0; i < ARRAY_SIZE(ids); i++)
                ids[i] = i % 2 ? UINT64_MAX : UINT64_C(1) << 63;
        t.job_id = 1;
        t.n_dst_blocks = ARRAY_SIZE(ids);
        t.dst_blocks = ids;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, 0, 9, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        ck_assert_uint_eq(len, FRAME_HEADER_SIZE + 2 + 3 + 2560);
        p = buf + FRAME_HEADER_SIZE;
        /* job_id = 1 first (protobuf-c's part), then field 7, wire type 2, length 2560 */
        ck_assert_uint_eq(p[0], 1 << 3);
        ck_assert_uint_eq(p[1], 1);
        ck_assert_uint_eq(p[2], 7 << 3 | 2);
        ck_assert_uint_eq(p[3], 0x80);
        ck_assert_uint_eq(p[4], 0x14);
        p += 5;
        for (size_t i = 0; i < ARRAY_SIZE(ids); i++, p += 10) {
                for (size_t k = 0; k < 9; k++)
                        ck_assert_uint_eq(p[k], i % 2 ? 0xff : 0x80);
                ck_assert_uint_eq(p[9], 1);
        }
}
END_TEST

/* The limit counts the lists frame_pack() encodes itself; the message is left as it was. */
START_TEST(test_pack_long_lists_limit)
{
        Kvdist__V1__PeerTransfer t;
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len, need;
        Lists l;

        lists_make(&l, 1000, 1000);
        peer_transfer_fill(&t, &l);
        need = protobuf_c_message_get_packed_size(&t.base);
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, 0, 9, 0, &t.base,
                                    (uint32_t)need - 1, &buf, &len),
                         -EMSGSIZE);
        ck_assert_ptr_null(buf);
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, 0, 9, 0, &t.base,
                                    (uint32_t)need, &buf, &len),
                         0);
        ck_assert_uint_eq(len, FRAME_HEADER_SIZE + need);
        ck_assert_ptr_eq(t.src_blocks, l.src);
        ck_assert_uint_eq(t.n_src_blocks, 1000);
        ck_assert_ptr_eq(t.dst_blocks, l.dst);
        ck_assert_uint_eq(t.n_dst_blocks, 1000);
        lists_free(&l);
}
END_TEST

static Suite *frame_pack_suite(void)
{
        Suite *s = suite_create("frame-pack");
        TCase *tc = tcase_create("long-lists");

        tcase_add_test(tc, test_pack_long_lists_round_trip);
        tcase_add_test(tc, test_pack_long_list_bytes);
        tcase_add_test(tc, test_pack_long_lists_limit);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(frame_pack_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
