/* SPDX-License-Identifier: MIT */
/* Unit tests for the frame codec: header, registry, pack/unpack, fd passing over a socketpair. */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/kvdist.pb-c.h"
#include "proto/wire.h"
#include "common/macro.h"

static const FrameHeader sample_header = {
        .magic = FRAME_MAGIC,
        .version = FRAME_VERSION,
        .type = 0x1e02,
        .flags = FRAME_FLAG_REPLY | FRAME_FLAG_ERROR,
        .n_fds = 3,
        .length = 0x00a1b2c3,
        .request_id = UINT64_C(0x0102030405060708),
};

static void encode(const FrameHeader *h, uint8_t out[FRAME_HEADER_SIZE])
{
        memset(out, 0xee, FRAME_HEADER_SIZE);
        frame_header_encode(h, out);
}

START_TEST(test_header_wire_order)
{
        static const uint8_t expect[FRAME_HEADER_SIZE] = {
                'K',  'V',  'D',  '1',                          /* magic */
                0x01, 0x00,                                     /* version */
                0x02, 0x1e,                                     /* type */
                0x03, 0x00,                                     /* flags */
                0x03, 0x00,                                     /* n_fds */
                0xc3, 0xb2, 0xa1, 0x00,                         /* length */
                0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* request id */
        };
        uint8_t buf[FRAME_HEADER_SIZE];

        encode(&sample_header, buf);
        ck_assert_mem_eq(buf, expect, FRAME_HEADER_SIZE);
}
END_TEST

START_TEST(test_header_round_trip)
{
        FrameHeader h = sample_header, out;
        uint8_t buf[FRAME_HEADER_SIZE];

        h.request_id = UINT64_MAX;
        h.type = UINT16_MAX;
        h.n_fds = FRAME_MAX_FDS;
        h.length = FRAME_MAX_PAYLOAD_DEFAULT;
        encode(&h, buf);
        memset(&out, 0, sizeof(out));
        ck_assert_int_eq(frame_header_decode(buf, FRAME_MAX_PAYLOAD_DEFAULT, &out), 0);
        ck_assert_uint_eq(out.magic, FRAME_MAGIC);
        ck_assert_uint_eq(out.version, FRAME_VERSION);
        ck_assert_uint_eq(out.type, UINT16_MAX);
        ck_assert_uint_eq(out.flags, FRAME_FLAG_REPLY | FRAME_FLAG_ERROR);
        ck_assert_uint_eq(out.n_fds, FRAME_MAX_FDS);
        ck_assert_uint_eq(out.length, FRAME_MAX_PAYLOAD_DEFAULT);
        ck_assert_uint_eq(out.request_id, UINT64_MAX);

        h = sample_header;
        h.n_fds = 0;
        h.flags = 0;
        h.length = 0;
        encode(&h, buf);
        ck_assert_int_eq(frame_header_decode(buf, 0, &out), 0);
        ck_assert_uint_eq(out.type, sample_header.type);
        ck_assert_uint_eq(out.request_id, sample_header.request_id);
        ck_assert_uint_eq(out.length, 0);
}
END_TEST

/* Decodes @h's encoding and checks both the result and that *ret stayed untouched on error. */
static void check_decode(const FrameHeader *h, uint32_t max_payload, int expect)
{
        FrameHeader out;
        uint8_t buf[FRAME_HEADER_SIZE];

        encode(h, buf);
        memset(&out, 0x5a, sizeof(out));
        ck_assert_int_eq(frame_header_decode(buf, max_payload, &out), expect);
        if (expect < 0)
                ck_assert_uint_eq(out.magic, 0x5a5a5a5a);
        else
                ck_assert_uint_eq(out.magic, FRAME_MAGIC);
}

START_TEST(test_header_decode_errors)
{
        FrameHeader h = sample_header;
        uint8_t buf[FRAME_HEADER_SIZE];
        FrameHeader out;

        h.length = 100;
        check_decode(&h, 100, 0);

        h.magic = 0x3244564b; /* "KVD2" */
        check_decode(&h, 100, -EBADMSG);
        h.magic = 0x4b564431; /* "KVD1" big-endian */
        check_decode(&h, 100, -EBADMSG);
        h.magic = FRAME_MAGIC;

        for (unsigned bit = 2; bit < 16; bit++) {
                h.flags = FRAME_FLAG_REPLY | (uint16_t)(1u << bit);
                check_decode(&h, 100, -EBADMSG);
        }
        h.flags = FRAME_FLAG_REPLY;

        h.version = 0;
        check_decode(&h, 100, -EPROTONOSUPPORT);
        h.version = FRAME_VERSION + 1;
        check_decode(&h, 100, -EPROTONOSUPPORT);
        h.version = 0x0100; /* 1 read big-endian */
        check_decode(&h, 100, -EPROTONOSUPPORT);
        h.version = FRAME_VERSION;

        h.length = 101;
        check_decode(&h, 100, -EMSGSIZE);
        h.length = UINT32_MAX;
        check_decode(&h, FRAME_MAX_PAYLOAD_DEFAULT, -EMSGSIZE);
        check_decode(&h, UINT32_MAX, 0);
        h.length = 100;

        h.n_fds = FRAME_MAX_FDS + 1;
        check_decode(&h, 100, -ETOOMANYREFS);
        h.n_fds = UINT16_MAX;
        check_decode(&h, 100, -ETOOMANYREFS);
        h.n_fds = FRAME_MAX_FDS;
        check_decode(&h, 100, 0);

        /* A header of zeros or of 0xff is rejected by its magic. */
        memset(buf, 0, sizeof(buf));
        ck_assert_int_eq(frame_header_decode(buf, UINT32_MAX, &out), -EBADMSG);
        memset(buf, 0xff, sizeof(buf));
        ck_assert_int_eq(frame_header_decode(buf, UINT32_MAX, &out), -EBADMSG);
}
END_TEST

START_TEST(test_registry_knows_every_type)
{
        const ProtobufCEnumDescriptor *e = &kvdist__v1__msg_type__descriptor;
        unsigned known = 0, seen = 0;

        for (unsigned i = 0; i < e->n_values; i++) {
                const ProtobufCEnumValue *v = &e->values[i];
                const FrameType *t;
                char reply_name[128];

                ck_assert_int_ge(v->value, 0);
                ck_assert_int_le(v->value, UINT16_MAX);
                t = frame_type_lookup((uint16_t)v->value);
                if (v->value == KVDIST__V1__MSG_TYPE__MSG_INVALID) {
                        ck_assert_ptr_null(t);
                        continue;
                }
                ck_assert_msg(t, "%s has no registry entry", v->name);
                known++;
                ck_assert_uint_eq(t->type, (unsigned)v->value);
                ck_assert_ptr_nonnull(t->name);
                ck_assert_ptr_nonnull(t->request);
                ck_assert_ptr_nonnull(t->reply);
                ck_assert_uint_eq(t->request->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
                ck_assert_uint_eq(t->reply->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
                ck_assert_str_eq(t->name, t->request->short_name);
                snprintf(reply_name, sizeof(reply_name), "%sReply", t->name);
                ck_assert_str_eq(t->reply->short_name, reply_name);

                /* Every reply carries Status as field 1 (kvdist.proto's rule). */
                ck_assert_uint_ge(t->reply->n_fields, 1);
                ck_assert_uint_eq(t->reply->fields[0].id, 1);
                ck_assert_int_eq(t->reply->fields[0].type, PROTOBUF_C_TYPE_MESSAGE);
                ck_assert_ptr_eq(t->reply->fields[0].descriptor, &kvdist__v1__status__descriptor);
        }
        ck_assert_uint_eq(known, e->n_values - 1);

        /* Nothing else is known: the registry holds exactly the enum's types. */
        for (unsigned type = 0; type <= UINT16_MAX; type++)
                if (frame_type_lookup((uint16_t)type))
                        seen++;
        ck_assert_uint_eq(seen, known);

        ck_assert_ptr_eq(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS)->request,
                         &kvdist__v1__link_clusters__descriptor);
        ck_assert_ptr_eq(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS)->reply,
                         &kvdist__v1__link_clusters_reply__descriptor);
        ck_assert_str_eq(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS)->name,
                         "LinkClusters");
        ck_assert_ptr_eq(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_HELLO)->request,
                         &kvdist__v1__hello__descriptor);
        ck_assert_ptr_eq(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_HELLO)->reply,
                         &kvdist__v1__hello_reply__descriptor);

        ck_assert_ptr_null(frame_type_lookup(0));
        ck_assert_ptr_null(frame_type_lookup(4));
        ck_assert_ptr_null(frame_type_lookup(9));
        ck_assert_ptr_null(frame_type_lookup(39));
        ck_assert_ptr_null(frame_type_lookup(45));
        ck_assert_ptr_null(frame_type_lookup(99));
        ck_assert_ptr_null(frame_type_lookup(113));
        ck_assert_ptr_null(frame_type_lookup(1000));
        ck_assert_ptr_null(frame_type_lookup(UINT16_MAX));
}
END_TEST

/* Decodes the header of a packed frame and checks it describes the rest of the buffer. */
static FrameHeader check_frame(const uint8_t *buf, size_t len, uint16_t type, uint16_t flags,
                               uint64_t request_id, uint16_t n_fds)
{
        FrameHeader h;

        ck_assert_uint_ge(len, FRAME_HEADER_SIZE);
        ck_assert_int_eq(frame_header_decode(buf, FRAME_MAX_PAYLOAD_DEFAULT, &h), 0);
        ck_assert_uint_eq(h.type, type);
        ck_assert_uint_eq(h.flags, flags);
        ck_assert_uint_eq(h.request_id, request_id);
        ck_assert_uint_eq(h.n_fds, n_fds);
        ck_assert_uint_eq(h.length, len - FRAME_HEADER_SIZE);
        return h;
}

START_TEST(test_pack_transfer)
{
        uint64_t src[] = {0, 1, 2, 511, UINT64_MAX};
        uint64_t dst[] = {7, 8, 9, 10, 11};
        Kvdist__V1__BlocksKey bkey = KVDIST__V1__BLOCKS_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        Kvdist__V1__LayerRange layers = KVDIST__V1__LAYER_RANGE__INIT;
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        Kvdist__V1__Transfer *u;
        ProtobufCMessage *m;
        size_t len;

        bkey.cluster_id = 42;
        bkey.model_id = 3;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &bkey;
        layers.first = -1;
        layers.last = 31;
        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t.remote_key = &key;
        t.local_cache_id = 99;
        t.n_src_blocks = ARRAY_SIZE(src);
        t.src_blocks = src;
        t.n_dst_blocks = ARRAY_SIZE(dst);
        t.dst_blocks = dst;
        t.size = -1;
        t.src_layers = &layers;
        t.timeout_ms = 1000;

        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 77, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 77, 0);

        ck_assert_int_eq(frame_unpack(&kvdist__v1__transfer__descriptor, buf + FRAME_HEADER_SIZE,
                                      len - FRAME_HEADER_SIZE, &m),
                         0);
        u = (Kvdist__V1__Transfer *)m;
        ck_assert_int_eq(u->kind, KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS);
        ck_assert_ptr_nonnull(u->remote_key);
        ck_assert_int_eq(u->remote_key->kind_case, KVDIST__V1__CACHE_KEY__KIND_BLOCKS);
        ck_assert_uint_eq(u->remote_key->blocks->cluster_id, 42);
        ck_assert_uint_eq(u->remote_key->blocks->model_id, 3);
        ck_assert_uint_eq(u->local_cache_id, 99);
        ck_assert_uint_eq(u->n_src_blocks, ARRAY_SIZE(src));
        ck_assert_mem_eq(u->src_blocks, src, sizeof(src));
        ck_assert_uint_eq(u->n_dst_blocks, ARRAY_SIZE(dst));
        ck_assert_mem_eq(u->dst_blocks, dst, sizeof(dst));
        ck_assert_int_eq(u->size, -1);
        ck_assert_ptr_nonnull(u->src_layers);
        ck_assert_int_eq(u->src_layers->first, -1);
        ck_assert_int_eq(u->src_layers->last, 31);
        ck_assert_ptr_null(u->dst_layers);
        ck_assert_uint_eq(u->timeout_ms, 1000);
        protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

/* TransferCancel names a Transfer by its request id; its reply says whether it stops. */
START_TEST(test_pack_transfer_cancel)
{
        Kvdist__V1__TransferCancel c = KVDIST__V1__TRANSFER_CANCEL__INIT;
        Kvdist__V1__TransferCancelReply r = KVDIST__V1__TRANSFER_CANCEL_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ uint8_t *buf = NULL, *rbuf = NULL;
        const FrameType *ft = frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL);
        ProtobufCMessage *m;
        size_t len, rlen;

        ck_assert_ptr_nonnull(ft);
        ck_assert_str_eq(ft->name, "TransferCancel");
        ck_assert_uint_eq(KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, 31);
        c.request_id = UINT64_MAX - 1;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, 0, 78, 0, &c.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, 0, 78, 0);
        ck_assert_int_eq(
                frame_unpack(ft->request, buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &m), 0);
        ck_assert_uint_eq(((Kvdist__V1__TransferCancel *)m)->request_id, UINT64_MAX - 1);
        protobuf_c_message_free_unpacked(m, NULL);

        r.status = &st;
        r.stopping = true;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER_CANCEL, FRAME_FLAG_REPLY, 78,
                                    0, &r.base, FRAME_MAX_PAYLOAD_DEFAULT, &rbuf, &rlen),
                         0);
        ck_assert_int_eq(
                frame_unpack(ft->reply, rbuf + FRAME_HEADER_SIZE, rlen - FRAME_HEADER_SIZE, &m), 0);
        ck_assert(((Kvdist__V1__TransferCancelReply *)m)->stopping);
        ck_assert_int_eq(((Kvdist__V1__TransferCancelReply *)m)->status->code, 0);
        protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

/*
 * A GetNotifies reply says each notification's kind; one without the field (what a daemon that
 * predates pull notifications sends) is a push's. A pull's Transfer keeps its notification.
 */
START_TEST(test_pack_notifies_kind)
{
        Kvdist__V1__GetNotifiesReply r = KVDIST__V1__GET_NOTIFIES_REPLY__INIT;
        Kvdist__V1__Notify n[2] = {KVDIST__V1__NOTIFY__INIT, KVDIST__V1__NOTIFY__INIT};
        Kvdist__V1__Notify *ptrs[2] = {&n[0], &n[1]};
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        const FrameType *ft = frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_GET_NOTIFIES);
        const Kvdist__V1__GetNotifiesReply *got;
        const Kvdist__V1__Transfer *gt;
        _cleanup_free_ uint8_t *buf = NULL, *tbuf = NULL;
        uint8_t old[64];
        ProtobufCMessage *m;
        size_t len, tlen;

        ck_assert_uint_eq(KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PUSH, 0);
        ck_assert_uint_eq(KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL, 1);
        n[0].src_cluster_id = 7;
        n[0].data.data = (uint8_t *)"pushed";
        n[0].data.len = 6;
        n[1].src_cluster_id = UINT64_MAX;
        n[1].data.data = (uint8_t *)"read";
        n[1].data.len = 4;
        n[1].kind = KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL;
        r.status = &st;
        r.notifies = ptrs;
        r.n_notifies = 2;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_GET_NOTIFIES, FRAME_FLAG_REPLY, 9, 0,
                                    &r.base, FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        ck_assert_int_eq(
                frame_unpack(ft->reply, buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &m), 0);
        got = (const Kvdist__V1__GetNotifiesReply *)m;
        ck_assert_uint_eq(got->n_notifies, 2);
        ck_assert_int_eq(got->notifies[0]->kind, KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PUSH);
        ck_assert_uint_eq(got->notifies[0]->src_cluster_id, 7);
        ck_assert_mem_eq(got->notifies[0]->data.data, "pushed", 6);
        ck_assert_int_eq(got->notifies[1]->kind, KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL);
        ck_assert_uint_eq(got->notifies[1]->src_cluster_id, UINT64_MAX);
        ck_assert_uint_eq(got->notifies[1]->data.len, 4);
        ck_assert_mem_eq(got->notifies[1]->data.data, "read", 4);
        protobuf_c_message_free_unpacked(m, NULL);

        /* A push's Notify packs without the field: as an older daemon's does. */
        ck_assert_uint_eq(kvdist__v1__notify__pack(&n[0], old), 2 + 2 + 6);
        n[1].kind = KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PUSH;
        ck_assert_uint_eq(kvdist__v1__notify__get_packed_size(&n[1]), 11 + 2 + 4);

        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t.notify.data = (uint8_t *)"free them";
        t.notify.len = 9;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 10, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &tbuf, &tlen),
                         0);
        ck_assert_int_eq(
                frame_unpack(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_TRANSFER)->request,
                             tbuf + FRAME_HEADER_SIZE, tlen - FRAME_HEADER_SIZE, &m),
                0);
        gt = (const Kvdist__V1__Transfer *)m;
        ck_assert_int_eq(gt->kind, KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS);
        ck_assert_uint_eq(gt->notify.len, 9);
        ck_assert_mem_eq(gt->notify.data, "free them", 9);
        protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

START_TEST(test_pack_link_clusters)
{
        Kvdist__V1__ClusterInfo ci[3];
        Kvdist__V1__ClusterInfo *cp[3];
        Kvdist__V1__LinkClusters lc = KVDIST__V1__LINK_CLUSTERS__INIT;
        Kvdist__V1__LinkClustersReply *r;
        int32_t rets[] = {0, -5, 2147483647, -2147483647 - 1};
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        Kvdist__V1__LinkClustersReply reply = KVDIST__V1__LINK_CLUSTERS_REPLY__INIT;
        Kvdist__V1__LinkClusters *u;
        uint8_t *buf = NULL;
        ProtobufCMessage *m;
        size_t len;

        for (unsigned i = 0; i < 3; i++) {
                kvdist__v1__cluster_info__init(&ci[i]);
                ci[i].remote_cluster_id = 1000 + i;
                ci[i].remote_role = KVDIST__V1__ROLE__ROLE_DECODER;
                ci[i].remote_ip_info = (char *)(i == 1 ? "" : "10.0.0.2:26000");
                ci[i].local_ip_info = (char *)"10.0.0.1";
                cp[i] = &ci[i];
        }
        lc.n_clusters = 3;
        lc.clusters = cp;
        lc.timeout_ms = 5000;

        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, 0, 1, 0, &lc.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, 0, 1, 0);
        ck_assert_int_eq(
                frame_unpack(frame_type_lookup(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS)->request,
                             buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &m),
                0);
        u = (Kvdist__V1__LinkClusters *)m;
        ck_assert_uint_eq(u->n_clusters, 3);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_uint_eq(u->clusters[i]->remote_cluster_id, 1000 + i);
                ck_assert_int_eq(u->clusters[i]->remote_role, KVDIST__V1__ROLE__ROLE_DECODER);
                ck_assert_str_eq(u->clusters[i]->remote_ip_info, ci[i].remote_ip_info);
                ck_assert_str_eq(u->clusters[i]->local_ip_info, "10.0.0.1");
        }
        ck_assert_uint_eq(u->timeout_ms, 5000);
        protobuf_c_message_free_unpacked(m, NULL);
        free(buf);

        st.code = -7;
        st.detail = (char *)"cluster 1001 is already linked";
        reply.status = &st;
        reply.n_rets = ARRAY_SIZE(rets);
        reply.rets = rets;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, FRAME_FLAG_REPLY, 1, 0,
                                    &reply.base, FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, FRAME_FLAG_REPLY, 1, 0);
        ck_assert_int_eq(frame_unpack(&kvdist__v1__link_clusters_reply__descriptor,
                                      buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &m),
                         0);
        r = (Kvdist__V1__LinkClustersReply *)m;
        ck_assert_ptr_nonnull(r->status);
        ck_assert_int_eq(r->status->code, -7);
        ck_assert_str_eq(r->status->detail, "cluster 1001 is already linked");
        ck_assert_uint_eq(r->n_rets, ARRAY_SIZE(rets));
        ck_assert_mem_eq(r->rets, rets, sizeof(rets));
        protobuf_c_message_free_unpacked(m, NULL);
        free(buf);
}
END_TEST

START_TEST(test_pack_empty)
{
        _cleanup_free_ uint8_t *buf = NULL;
        ProtobufCMessage *m;
        size_t len;

        ck_assert_int_eq(
                frame_pack(KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE, 0, 5, 0, NULL, 0, &buf, &len),
                0);
        ck_assert_uint_eq(len, FRAME_HEADER_SIZE);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE, 0, 5, 0);
        ck_assert_int_eq(frame_unpack(&kvdist__v1__client_finalize__descriptor,
                                      buf + FRAME_HEADER_SIZE, 0, &m),
                         0);
        ck_assert_ptr_eq(m->descriptor, &kvdist__v1__client_finalize__descriptor);
        protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

START_TEST(test_pack_limits)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        uint8_t *buf = (uint8_t *)&hello;
        size_t len = 12345, size;

        hello.protocol_version = 1;
        hello.identity = (char *)"libkvdist/0.1.0";
        size = protobuf_c_message_get_packed_size(&hello.base);
        ck_assert_uint_gt(size, 0);

        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, 0, &hello.base,
                                    (uint32_t)size - 1, &buf, &len),
                         -EMSGSIZE);
        ck_assert_ptr_eq(buf, &hello);
        ck_assert_uint_eq(len, 12345);

        /* Flags or an fd count the receiver would reject are refused here. */
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 1u << 2, 1, 0, &hello.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         -EINVAL);
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, FRAME_MAX_FDS + 1,
                                    &hello.base, FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         -EINVAL);
        ck_assert_ptr_eq(buf, &hello);

        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, FRAME_MAX_FDS,
                                    &hello.base, (uint32_t)size, &buf, &len),
                         0);
        ck_assert_uint_eq(len, FRAME_HEADER_SIZE + size);
        check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, FRAME_MAX_FDS);
        free(buf);
}
END_TEST

START_TEST(test_pack_error)
{
        static const char detail[] = "dst_blocks[3]=900 is out of range, cache 7 has 512 blocks";
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ uint8_t *buf2 = NULL;
        Kvdist__V1__Status *st;
        ProtobufCMessage *m;
        FrameHeader h;
        size_t len;

        ck_assert_int_eq(frame_pack_error(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 9, -12, detail,
                                          FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        h = check_frame(buf, len, KVDIST__V1__MSG_TYPE__MSG_TRANSFER,
                        FRAME_FLAG_REPLY | FRAME_FLAG_ERROR, 9, 0);
        ck_assert_int_eq(frame_unpack(&kvdist__v1__status__descriptor, buf + FRAME_HEADER_SIZE,
                                      h.length, &m),
                         0);
        st = (Kvdist__V1__Status *)m;
        ck_assert_int_eq(st->code, -12);
        ck_assert_str_eq(st->detail, detail);
        protobuf_c_message_free_unpacked(m, NULL);

        /* No detail: an empty string comes back. */
        ck_assert_int_eq(frame_pack_error(KVDIST__V1__MSG_TYPE__MSG_HELLO, 1, -3, NULL,
                                          FRAME_MAX_PAYLOAD_DEFAULT, &buf2, &len),
                         0);
        h = check_frame(buf2, len, KVDIST__V1__MSG_TYPE__MSG_HELLO,
                        FRAME_FLAG_REPLY | FRAME_FLAG_ERROR, 1, 0);
        ck_assert_int_eq(frame_unpack(&kvdist__v1__status__descriptor, buf2 + FRAME_HEADER_SIZE,
                                      h.length, &m),
                         0);
        st = (Kvdist__V1__Status *)m;
        ck_assert_int_eq(st->code, -3);
        ck_assert_str_eq(st->detail, "");
        protobuf_c_message_free_unpacked(m, NULL);

        /* The detail counts against the limit like any payload. */
        free(TAKE_PTR(buf2));
        ck_assert_int_eq(
                frame_pack_error(KVDIST__V1__MSG_TYPE__MSG_HELLO, 1, -3, detail, 10, &buf2, &len),
                -EMSGSIZE);
        ck_assert_ptr_null(buf2);
}
END_TEST

START_TEST(test_unpack_garbage)
{
        static const struct {
                const char *what;
                uint8_t bytes[12];
                size_t len;
        } bad[] = {
                {"varint field without its value", {0x08}, 1},
                {"unterminated varint", {0x08, 0x80, 0x80}, 3},
                {"varint over 10 bytes",
                 {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
                 12},
                {"string longer than the payload", {0x1a, 0x05, 'a', 'b'}, 4},
                {"invalid wire type 7", {0x0f, 0x00}, 2},
                {"invalid wire type 6", {0x0e, 0x00}, 2},
                {"field number 0", {0x00, 0x01}, 2},
                {"tag without its field", {0xff}, 1},
        };
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        ProtobufCMessage *m = (ProtobufCMessage *)&hello;
        size_t len, payload;

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                ck_assert_msg(frame_unpack(&kvdist__v1__hello__descriptor, bad[i].bytes, bad[i].len,
                                           &m) == -EBADMSG,
                              "%s was accepted", bad[i].what);
        ck_assert_ptr_eq(m, &hello);

        /* A Hello cut inside its last field (the identity string) is rejected at every length. */
        hello.protocol_version = 1;
        hello.features = UINT64_MAX;
        hello.identity = (char *)"libkvdist/0.1.0";
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, 0, &hello.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        payload = len - FRAME_HEADER_SIZE;
        for (size_t cut = 1; cut <= strlen(hello.identity) + 1; cut++)
                ck_assert_int_eq(frame_unpack(&kvdist__v1__hello__descriptor,
                                              buf + FRAME_HEADER_SIZE, payload - cut, &m),
                                 -EBADMSG);
        ck_assert_ptr_eq(m, &hello);
}
END_TEST

/* Every prefix of a packed message either unpacks or is -EBADMSG (the sanitizers watch). */
START_TEST(test_unpack_truncated_prefixes)
{
        uint64_t blocks[64];
        Kvdist__V1__ReqKey rkey = KVDIST__V1__REQ_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        unsigned rejected = 0;
        size_t len, payload;

        for (size_t i = 0; i < ARRAY_SIZE(blocks); i++)
                blocks[i] = i * 1000003u;
        rkey.cluster_id = 1;
        rkey.req_id = 2;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
        key.req = &rkey;
        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS;
        t.remote_key = &key;
        t.n_src_blocks = t.n_dst_blocks = ARRAY_SIZE(blocks);
        t.src_blocks = t.dst_blocks = blocks;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 1, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        payload = len - FRAME_HEADER_SIZE;

        for (size_t l = 0; l < payload; l++) {
                /* A private copy of exactly l bytes, so an overread is an ASan report. */
                _cleanup_free_ uint8_t *copy = malloc(l ?: 1);
                ProtobufCMessage *m = NULL;
                int r;

                ck_assert_ptr_nonnull(copy);
                memcpy(copy, buf + FRAME_HEADER_SIZE, l);
                r = frame_unpack(&kvdist__v1__transfer__descriptor, copy, l, &m);
                if (r == 0)
                        protobuf_c_message_free_unpacked(m, NULL);
                else {
                        ck_assert_int_eq(r, -EBADMSG);
                        rejected++;
                }
        }
        /* Cuts inside the key or a packed block list cannot all be valid messages. */
        ck_assert_uint_gt(rejected, payload / 2);
}
END_TEST

static unsigned count_open_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        unsigned n = 0;

        ck_assert_ptr_nonnull(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* A memfd holding @tag, so each one is a distinct file with its own inode. */
static int make_file(int tag)
{
        int fd = memfd_create("test-frame", MFD_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, &tag, sizeof(tag)), sizeof(tag));
        return fd;
}

static void check_same_file(int a, int b)
{
        struct stat sa, sb;

        ck_assert_int_ne(a, b);
        ck_assert_int_eq(fstat(a, &sa), 0);
        ck_assert_int_eq(fstat(b, &sb), 0);
        ck_assert_uint_eq(sa.st_dev, sb.st_dev);
        ck_assert_uint_eq(sa.st_ino, sb.st_ino);
        ck_assert_int_eq(fcntl(b, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

/* Sends a Hello frame with @n fds over a socketpair and checks what arrives. */
static void send_recv_fds(size_t n)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        int sv[2], sent[FRAME_MAX_FDS], got[FRAME_MAX_FDS];
        _cleanup_free_ uint8_t *buf = NULL;
        uint8_t in[256];
        size_t len, n_got = 99;
        ssize_t r;

        hello.protocol_version = FRAME_VERSION;
        hello.identity = (char *)"test-frame";
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, (uint16_t)n, &hello.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        ck_assert_uint_le(len, sizeof(in));
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        for (size_t i = 0; i < n; i++)
                sent[i] = make_file((int)i);

        ck_assert_int_eq(frame_sendmsg(sv[0], buf, len, sent, n), (ssize_t)len);
        memset(got, -1, sizeof(got));
        r = frame_recvmsg(sv[1], in, sizeof(in), got, FRAME_MAX_FDS, &n_got);
        ck_assert_int_eq(r, (ssize_t)len);
        ck_assert_mem_eq(in, buf, len);
        ck_assert_uint_eq(n_got, n);
        check_frame(in, len, KVDIST__V1__MSG_TYPE__MSG_HELLO, 0, 1, (uint16_t)n);
        for (size_t i = 0; i < n; i++) {
                check_same_file(sent[i], got[i]);
                close(sent[i]);
                close(got[i]);
        }
        for (size_t i = n; i < FRAME_MAX_FDS; i++)
                ck_assert_int_eq(got[i], -1);

        close(sv[0]);
        close(sv[1]);
}

START_TEST(test_sendmsg_fds)
{
        unsigned before = count_open_fds();

        send_recv_fds(0);
        send_recv_fds(1);
        send_recv_fds(2);
        send_recv_fds(FRAME_MAX_FDS);
        ck_assert_uint_eq(count_open_fds(), before);
}
END_TEST

/* Sends @n fds to a receiver with room for @max_fds: -EPROTO and nothing left open. */
static void check_too_many_fds(size_t n, size_t max_fds)
{
        int sv[2], sent[FRAME_MAX_FDS], got[FRAME_MAX_FDS + 1];
        uint8_t out[8] = "KVD1xxxx", in[8];
        size_t n_got = 99;
        unsigned before;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        for (size_t i = 0; i < n; i++)
                sent[i] = make_file((int)i);
        before = count_open_fds();

        ck_assert_int_eq(frame_sendmsg(sv[0], out, sizeof(out), sent, n), sizeof(out));
        memset(got, -1, sizeof(got));
        ck_assert_int_eq(frame_recvmsg(sv[1], in, sizeof(in), got, max_fds, &n_got), -EPROTO);
        ck_assert_uint_eq(n_got, 99);
        for (size_t i = 0; i < ARRAY_SIZE(got); i++)
                ck_assert_int_eq(got[i], -1);
        ck_assert_uint_eq(count_open_fds(), before);

        for (size_t i = 0; i < n; i++)
                close(sent[i]);
        close(sv[0]);
        close(sv[1]);
}

START_TEST(test_recvmsg_too_many_fds)
{
        check_too_many_fds(1, 0);
        check_too_many_fds(FRAME_MAX_FDS, 0);
        /* CMSG_SPACE() rounds up to 8 bytes: room for 1 int is room for 2 in the kernel's eyes. */
        check_too_many_fds(2, 1);
        check_too_many_fds(FRAME_MAX_FDS, 1);
        check_too_many_fds(FRAME_MAX_FDS, FRAME_MAX_FDS - 1);
}
END_TEST

START_TEST(test_socket_errors)
{
        int sv[2], fds[FRAME_MAX_FDS + 1];
        uint8_t b = 0;
        size_t n_got = 99;

        for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
                fds[i] = STDIN_FILENO;
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);

        ck_assert_int_eq(frame_sendmsg(sv[0], &b, 1, fds, FRAME_MAX_FDS + 1), -EINVAL);
        ck_assert_int_eq(frame_sendmsg(sv[0], &b, 0, fds, 1), -EINVAL);
        ck_assert_int_eq(frame_recvmsg(sv[1], &b, 1, fds, FRAME_MAX_FDS, &n_got), -EAGAIN);
        ck_assert_int_eq(frame_recvmsg(-1, &b, 1, fds, FRAME_MAX_FDS, &n_got), -EBADF);
        ck_assert_int_eq(frame_sendmsg(-1, &b, 1, NULL, 0), -EBADF);
        ck_assert_uint_eq(n_got, 99);

        /* EOF reads as 0; writing to a closed peer is -EPIPE, not SIGPIPE (MSG_NOSIGNAL). */
        close(sv[0]);
        ck_assert_int_eq(frame_recvmsg(sv[1], &b, 1, fds, FRAME_MAX_FDS, &n_got), 0);
        ck_assert_uint_eq(n_got, 0);
        ck_assert_int_eq(frame_sendmsg(sv[1], &b, 1, NULL, 0), -EPIPE);
        close(sv[1]);
}
END_TEST

/*
 * Unpacks @buf with frame_unpack() and with protobuf-c alone: both reject it, or both give the
 * same Transfer. Returns whether it was accepted.
 */
static bool transfer_unpacks_alike(const uint8_t *buf, size_t len)
{
        const ProtobufCMessageDescriptor *d = &kvdist__v1__transfer__descriptor;
        Kvdist__V1__Transfer *a = NULL, *b;
        ProtobufCMessage *m = NULL;
        int r;

        r = frame_unpack(d, buf, len, &m);
        b = (Kvdist__V1__Transfer *)protobuf_c_message_unpack(d, NULL, len, buf);
        if (!b) {
                ck_assert_int_eq(r, -EBADMSG);
                return false;
        }
        ck_assert_int_eq(r, 0);
        a = (Kvdist__V1__Transfer *)m;
        ck_assert_int_eq(a->kind, b->kind);
        ck_assert_uint_eq(a->local_cache_id, b->local_cache_id);
        ck_assert_uint_eq(a->timeout_ms, b->timeout_ms);
        ck_assert_uint_eq(a->notify.len, b->notify.len);
        if (b->notify.len > 0)
                ck_assert_int_eq(memcmp(a->notify.data, b->notify.data, b->notify.len), 0);
        ck_assert_int_eq(a->remote_key != NULL, b->remote_key != NULL);
        ck_assert_uint_eq(a->n_src_blocks, b->n_src_blocks);
        ck_assert_uint_eq(a->n_dst_blocks, b->n_dst_blocks);
        if (b->n_src_blocks > 0 &&
            memcmp(a->src_blocks, b->src_blocks, b->n_src_blocks * sizeof(uint64_t)) != 0)
                ck_abort_msg("src_blocks differ");
        if (b->n_dst_blocks > 0 &&
            memcmp(a->dst_blocks, b->dst_blocks, b->n_dst_blocks * sizeof(uint64_t)) != 0)
                ck_abort_msg("dst_blocks differ");
        protobuf_c_message_free_unpacked(m, NULL);
        protobuf_c_message_free_unpacked(&b->base, NULL);
        return true;
}

/*
 * Long block lists are decoded by frame_unpack() itself: whatever the encoding (varints of
 * every length, a list sent twice or unpacked, cut anywhere, a list whose last varint does not
 * end), it says what protobuf-c says.
 */
START_TEST(test_unpack_long_lists)
{
        enum { N = 5000 };
        uint64_t *src = calloc(N, sizeof(uint64_t)), *dst = calloc(N, sizeof(uint64_t));
        uint8_t notify[40];
        Kvdist__V1__ReqKey rkey = KVDIST__V1__REQ_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        _cleanup_free_ uint8_t *buf = NULL, *twice = NULL, *odd = NULL;
        uint64_t x = 88172645463325252u;
        size_t len, payload, accepted = 0;
        const uint8_t *p;

        ck_assert(src && dst);
        for (size_t i = 0; i < N; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                /* every varint length from 1 to 10 bytes: 0, then the top 1..64 bits of x */
                src[i] = i % 65 == 0 ? 0 : x >> (64 - i % 65);
                dst[i] = i * 37 % 20000;
        }
        memset(notify, 0x3c, sizeof(notify));
        rkey.cluster_id = 1;
        rkey.req_id = 2;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
        key.req = &rkey;
        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t.remote_key = &key;
        t.local_cache_id = 77;
        t.timeout_ms = 1234;
        t.n_src_blocks = t.n_dst_blocks = N;
        t.src_blocks = src;
        t.dst_blocks = dst;
        t.notify.data = notify;
        t.notify.len = sizeof(notify);
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 1, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        p = buf + FRAME_HEADER_SIZE;
        payload = len - FRAME_HEADER_SIZE;
        ck_assert(transfer_unpacks_alike(p, payload));

        /* only varints of at most 9 bytes: decoded here, not handed back */
        for (size_t i = 0; i < N; i++)
                src[i] >>= 1;
        free(buf);
        buf = NULL;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 1, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        p = buf + FRAME_HEADER_SIZE;
        payload = len - FRAME_HEADER_SIZE;
        ck_assert(transfer_unpacks_alike(p, payload));

        /* the message twice: protobuf merges it, each list comes twice */
        twice = malloc(2 * payload);
        ck_assert_ptr_nonnull(twice);
        memcpy(twice, p, payload);
        memcpy(twice + payload, p, payload);
        ck_assert(transfer_unpacks_alike(twice, 2 * payload));

        /* one src_blocks entry unpacked (field 4, wire type 0) before the packed list */
        odd = malloc(payload + 2);
        ck_assert_ptr_nonnull(odd);
        odd[0] = 4 << 3;
        odd[1] = 0x05;
        memcpy(odd + 2, p, payload);
        ck_assert(transfer_unpacks_alike(odd, payload + 2));

        /* cut anywhere: inside the lists, their lengths, the fields between */
        for (size_t cut = 0; cut < payload; cut += cut < 64 || payload - cut < 64 ? 1 : 97)
                accepted += transfer_unpacks_alike(p, cut);
        ck_assert_uint_gt(accepted, 0);

        /* a list whose last varint has no end: without the fields after it, dst_blocks ends
         * the payload */
        t.timeout_ms = 0;
        t.notify.len = 0;
        free(buf);
        buf = NULL;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 1, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        p = buf + FRAME_HEADER_SIZE;
        payload = len - FRAME_HEADER_SIZE;
        ck_assert(transfer_unpacks_alike(p, payload));
        memcpy(odd, p, payload);
        odd[payload - 1] |= 0x80;
        ck_assert(!transfer_unpacks_alike(odd, payload));

        free(src);
        free(dst);
}
END_TEST

/* Packs a Transfer with @src and @dst (@n each) and unpacks it with frame_unpack_facts(). */
static void unpack_facts(const uint64_t *src, const uint64_t *dst, size_t n,
                         Kvdist__V1__Transfer **ret, FrameListFacts *facts, size_t *n_facts)
{
        Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
        _cleanup_free_ uint8_t *buf = NULL;
        ProtobufCMessage *m = NULL;
        size_t len;

        t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
        t.n_src_blocks = t.n_dst_blocks = n;
        t.src_blocks = (uint64_t *)src;
        t.dst_blocks = (uint64_t *)dst;
        ck_assert_int_eq(frame_pack(KVDIST__V1__MSG_TYPE__MSG_TRANSFER, 0, 1, 0, &t.base,
                                    FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len),
                         0);
        memset(facts, 0xa5, FRAME_LIST_FACTS_MAX * sizeof(*facts));
        ck_assert_int_eq(frame_unpack_facts(&kvdist__v1__transfer__descriptor,
                                            buf + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &m,
                                            facts, n_facts),
                         0);
        *ret = (Kvdist__V1__Transfer *)m;
}

/* The facts in @facts of the list at @values: it must be there. */
static const FrameListFacts *facts_of(const FrameListFacts *facts, size_t n, const uint64_t *values)
{
        for (size_t i = 0; i < n; i++)
                if (facts[i].values == values)
                        return &facts[i];
        ck_abort_msg("no facts for the list at %p", (const void *)values);
        return NULL;
}

/*
 * The facts of long lists, as the decoder learns them: the largest id, and whether one repeats
 * when a bitmap over the ids is small; nothing of short lists (protobuf-c decodes those).
 */
START_TEST(test_unpack_list_facts)
{
        enum { N = 3000 };
        uint64_t *src = calloc(N, sizeof(uint64_t)), *dst = calloc(N, sizeof(uint64_t));
        FrameListFacts facts[FRAME_LIST_FACTS_MAX];
        const FrameListFacts *f;
        Kvdist__V1__Transfer *m;
        size_t n_facts;
        uint64_t max = 0;

        ck_assert(src && dst);
        for (size_t i = 0; i < N; i++) {
                src[i] = (i * 7919) % 100003; /* distinct, largest below 100003 */
                dst[i] = i % 1000;            /* each value three times */
                max = MAX(max, src[i]);
        }
        unpack_facts(src, dst, N, &m, facts, &n_facts);
        ck_assert_uint_eq(n_facts, 2);
        f = facts_of(facts, n_facts, m->src_blocks);
        ck_assert_uint_eq(f->n, N);
        ck_assert_uint_eq(f->max, max);
        ck_assert(f->unique_known && f->unique);
        f = facts_of(facts, n_facts, m->dst_blocks);
        ck_assert_uint_eq(f->max, 999);
        ck_assert(f->unique_known && !f->unique);
        protobuf_c_message_free_unpacked(&m->base, NULL);

        /* one repeat at the very end; a sparse list: repeats not looked for */
        dst[N - 1] = dst[0] = 5;
        for (size_t i = 1; i < N - 1; i++)
                dst[i] = i + 10;
        src[N / 2] = UINT64_C(1) << 40;
        unpack_facts(src, dst, N, &m, facts, &n_facts);
        ck_assert_uint_eq(n_facts, 2);
        f = facts_of(facts, n_facts, m->dst_blocks);
        ck_assert_uint_eq(f->max, N - 2 + 10);
        ck_assert(f->unique_known && !f->unique);
        f = facts_of(facts, n_facts, m->src_blocks);
        ck_assert_uint_eq(f->max, UINT64_C(1) << 40);
        ck_assert(!f->unique_known);
        protobuf_c_message_free_unpacked(&m->base, NULL);

        /* short lists are protobuf-c's: no facts */
        unpack_facts(src, dst, 10, &m, facts, &n_facts);
        ck_assert_uint_eq(n_facts, 0);
        ck_assert_uint_eq(m->n_src_blocks, 10);
        protobuf_c_message_free_unpacked(&m->base, NULL);

        free(src);
        free(dst);
}
END_TEST

/* A frame of @len payload bytes (each @fill) with @n_fds declared, into @buf; its size. */
static size_t make_frame(uint8_t *buf, uint16_t n_fds, uint32_t len, uint8_t fill, uint64_t id)
{
        FrameHeader h = {FRAME_MAGIC, FRAME_VERSION, 7, 0, n_fds, len, id};

        frame_header_encode(&h, buf);
        memset(buf + FRAME_HEADER_SIZE, fill, len);
        return FRAME_HEADER_SIZE + len;
}

/* Reads one frame through @in and checks it: id, payload, number of fds (closed here). */
static void expect_frame(WireIn *in, int sock, uint64_t id, uint32_t len, uint8_t fill,
                         size_t n_fds)
{
        ck_assert_int_eq(wire_in_read(in, sock, 1 << 20, FRAME_MAX_FDS), 1);
        ck_assert_uint_eq(in->frame.request_id, id);
        ck_assert_uint_eq(in->frame.length, len);
        ck_assert_uint_eq(in->payload_len, len);
        for (uint32_t i = 0; i < len; i++)
                if (in->payload[i] != fill)
                        ck_abort_msg("frame %" PRIu64 ": payload byte %u is %u", id, i,
                                     in->payload[i]);
        ck_assert_uint_eq(in->n_fds, n_fds);
        wire_in_reset(in);
}

/*
 * Read-ahead: frames that came in one read are cut from it, fds go to the frame whose first
 * bytes they came with even when a frame before it came in the same read, a read that took
 * less than it asked ends the pass, and fds on bytes where no frame starts break the stream.
 */
START_TEST(test_wire_read_ahead)
{
        uint8_t buf[3 * 8192];
        size_t a, b, c;
        unsigned before = count_open_fds();
        int sv[2], fd;
        WireIn in;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
        ck_assert_int_eq(wire_in_init_ahead(&in), 0);

        /* nothing yet */
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);
        ck_assert(!wire_in_has_partial(&in));

        /* three frames, one write: all three from it, then the pass ends without a read */
        a = make_frame(buf, 0, 23, 0x11, 1);
        b = make_frame(buf + a, 0, 0, 0, 2);
        c = make_frame(buf + a + b, 0, 300, 0x33, 3);
        ck_assert_int_eq(write(sv[0], buf, a + b + c), (ssize_t)(a + b + c));
        expect_frame(&in, sv[1], 1, 23, 0x11, 0);
        expect_frame(&in, sv[1], 2, 0, 0, 0);
        expect_frame(&in, sv[1], 3, 300, 0x33, 0);
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);
        /* the next pass reads again */
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);

        /* a frame without fds, then one with an fd, both queued before the read */
        a = make_frame(buf, 0, 40, 0x44, 4);
        b = make_frame(buf + a, 1, 10, 0x55, 5);
        ck_assert_int_eq(frame_sendmsg(sv[0], buf, a, NULL, 0), (ssize_t)a);
        fd = make_file(5);
        ck_assert_int_eq(frame_sendmsg(sv[0], buf + a, b, &fd, 1), (ssize_t)b);
        close(fd);
        expect_frame(&in, sv[1], 4, 40, 0x44, 0);
        expect_frame(&in, sv[1], 5, 10, 0x55, 1);

        /* a header cut in two, and a payload larger than a read-ahead: read straight in */
        a = make_frame(buf, 0, 3 * 4096, 0x66, 6);
        ck_assert_int_eq(write(sv[0], buf, 10), 10);
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);
        ck_assert(wire_in_has_partial(&in));
        ck_assert_int_eq(write(sv[0], buf + 10, a - 10), (ssize_t)(a - 10));
        for (int i = 0; i < 4 && in.payload_len < 3 * 4096; i++)
                if (wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS) == 1)
                        break;
        ck_assert_uint_eq(in.payload_len, 3 * 4096);
        for (size_t i = 0; i < 3 * 4096; i++)
                if (in.payload[i] != 0x66)
                        ck_abort_msg("big payload byte %zu is %u", i, in.payload[i]);
        wire_in_reset(&in);
        ck_assert(!wire_in_has_partial(&in));

        /* an fd on the last bytes of a frame whose header came before: no frame starts there */
        a = make_frame(buf, 0, 100, 0x77, 7);
        ck_assert_int_eq(write(sv[0], buf, 50), 50);
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), 0);
        fd = make_file(7);
        ck_assert_int_eq(frame_sendmsg(sv[0], buf + 50, a - 50, &fd, 1), (ssize_t)(a - 50));
        close(fd);
        ck_assert_int_eq(wire_in_read(&in, sv[1], 1 << 20, FRAME_MAX_FDS), -EBADMSG);

        wire_in_done(&in);
        close(sv[0]);
        close(sv[1]);
        ck_assert_uint_eq(count_open_fds(), before);
}
END_TEST

static Suite *frame_suite(void)
{
        Suite *s = suite_create("frame");
        TCase *tc;

        tc = tcase_create("header");
        tcase_add_test(tc, test_header_wire_order);
        tcase_add_test(tc, test_header_round_trip);
        tcase_add_test(tc, test_header_decode_errors);
        suite_add_tcase(s, tc);

        tc = tcase_create("registry");
        tcase_add_test(tc, test_registry_knows_every_type);
        suite_add_tcase(s, tc);

        tc = tcase_create("pack");
        tcase_add_test(tc, test_pack_transfer);
        tcase_add_test(tc, test_pack_notifies_kind);
        tcase_add_test(tc, test_pack_transfer_cancel);
        tcase_add_test(tc, test_pack_link_clusters);
        tcase_add_test(tc, test_pack_empty);
        tcase_add_test(tc, test_pack_limits);
        tcase_add_test(tc, test_pack_error);
        tcase_add_test(tc, test_unpack_garbage);
        tcase_add_test(tc, test_unpack_truncated_prefixes);
        tcase_add_test(tc, test_unpack_long_lists);
        tcase_add_test(tc, test_unpack_list_facts);
        suite_add_tcase(s, tc);

        tc = tcase_create("socket");
        tcase_add_test(tc, test_sendmsg_fds);
        tcase_add_test(tc, test_wire_read_ahead);
        tcase_add_test(tc, test_recvmsg_too_many_fds);
        tcase_add_test(tc, test_socket_errors);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(frame_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
