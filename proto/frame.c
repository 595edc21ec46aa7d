/* SPDX-License-Identifier: MIT */
/* Frame codec: header encode/decode, the message-type registry, packing, fd-carrying socket I/O. */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/kvdist.pb-c.h"
#include "common/id-repeat.h"
#include "common/macro.h"

static void put_le16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
        put_le16(p, (uint16_t)v);
        put_le16(p + 2, (uint16_t)(v >> 16));
}

static void put_le64(uint8_t *p, uint64_t v)
{
        put_le32(p, (uint32_t)v);
        put_le32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get_le16(const uint8_t *p)
{
        return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
        return (uint32_t)get_le16(p) | (uint32_t)get_le16(p + 2) << 16;
}

static uint64_t get_le64(const uint8_t *p)
{
        return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

void frame_header_encode(const FrameHeader *h, uint8_t out[FRAME_HEADER_SIZE])
{
        put_le32(out + 0, h->magic);
        put_le16(out + 4, h->version);
        put_le16(out + 6, h->type);
        put_le16(out + 8, h->flags);
        put_le16(out + 10, h->n_fds);
        put_le32(out + 12, h->length);
        put_le64(out + 16, h->request_id);
}

int frame_header_decode(const uint8_t in[FRAME_HEADER_SIZE], uint32_t max_payload, FrameHeader *ret)
{
        FrameHeader h = {
                .magic = get_le32(in + 0),
                .version = get_le16(in + 4),
                .type = get_le16(in + 6),
                .flags = get_le16(in + 8),
                .n_fds = get_le16(in + 10),
                .length = get_le32(in + 12),
                .request_id = get_le64(in + 16),
        };

        if (h.magic != FRAME_MAGIC)
                return -EBADMSG;
        if (h.flags & ~(uint16_t)_FRAME_FLAGS_KNOWN)
                return -EBADMSG;
        if (h.version != FRAME_VERSION)
                return -EPROTONOSUPPORT;
        if (h.length > max_payload)
                return -EMSGSIZE;
        if (h.n_fds > FRAME_MAX_FDS)
                return -ETOOMANYREFS;

        *ret = h;
        return 0;
}

/* Every request and its reply are named Foo / FooReply in kvdist.proto. */
#define FRAME_TYPE(upper, lower, camel)                                                            \
        [KVDIST__V1__MSG_TYPE__MSG_##upper] = {                                                    \
                .type = KVDIST__V1__MSG_TYPE__MSG_##upper,                                         \
                .name = camel,                                                                     \
                .request = &kvdist__v1__##lower##__descriptor,                                     \
                .reply = &kvdist__v1__##lower##_reply__descriptor,                                 \
        }

/* Indexed by type; a slot without a name is a type this build does not know. */
static const FrameType frame_types[] = {
        FRAME_TYPE(HELLO, hello, "Hello"),
        FRAME_TYPE(CLIENT_INIT, client_init, "ClientInit"),
        FRAME_TYPE(CLIENT_FINALIZE, client_finalize, "ClientFinalize"),
        FRAME_TYPE(REGION_ADD, region_add, "RegionAdd"),
        FRAME_TYPE(REGION_REMOVE, region_remove, "RegionRemove"),
        FRAME_TYPE(POOL_MAP, pool_map, "PoolMap"),
        FRAME_TYPE(REGISTER_CACHE, register_cache, "RegisterCache"),
        FRAME_TYPE(UNREGISTER_CACHE, unregister_cache, "UnregisterCache"),
        FRAME_TYPE(ALLOCATE_CACHE, allocate_cache, "AllocateCache"),
        FRAME_TYPE(DEALLOCATE_CACHE, deallocate_cache, "DeallocateCache"),
        FRAME_TYPE(REMOVE_CACHE_KEY, remove_cache_key, "RemoveCacheKey"),
        FRAME_TYPE(LINK_CLUSTERS, link_clusters, "LinkClusters"),
        FRAME_TYPE(UNLINK_CLUSTERS, unlink_clusters, "UnlinkClusters"),
        FRAME_TYPE(CHECK_LINK_STATUS, check_link_status, "CheckLinkStatus"),
        FRAME_TYPE(SWITCH_ROLE, switch_role, "SwitchRole"),
        FRAME_TYPE(LOCAL_INFO, local_info, "LocalInfo"),
        FRAME_TYPE(TRANSFER, transfer, "Transfer"),
        FRAME_TYPE(TRANSFER_BATCH, transfer_batch, "TransferBatch"),
        FRAME_TYPE(TRANSFER_CANCEL, transfer_cancel, "TransferCancel"),
        FRAME_TYPE(DAEMON_STATUS, daemon_status, "DaemonStatus"),
        FRAME_TYPE(DAEMON_METRICS, daemon_metrics, "DaemonMetrics"),
        FRAME_TYPE(NOTIFY_FD, notify_fd, "NotifyFd"),
        FRAME_TYPE(GET_NOTIFIES, get_notifies, "GetNotifies"),
        FRAME_TYPE(DOMAIN_LINK, domain_link, "DomainLink"),
        FRAME_TYPE(DOMAIN_UNLINK, domain_unlink, "DomainUnlink"),
        FRAME_TYPE(DOMAIN_QUERY, domain_query, "DomainQuery"),
        FRAME_TYPE(DOMAIN_SEND_RECV, domain_send_recv, "DomainSendRecv"),
        FRAME_TYPE(DOMAIN_BROADCAST, domain_broadcast, "DomainBroadcast"),
        FRAME_TYPE(DOMAIN_ALL_GATHER, domain_all_gather, "DomainAllGather"),
        FRAME_TYPE(PEER_HELLO, peer_hello, "PeerHello"),
        FRAME_TYPE(PEER_AUTH, peer_auth, "PeerAuth"),
        FRAME_TYPE(PEER_DATA_HELLO, peer_data_hello, "PeerDataHello"),
        FRAME_TYPE(PEER_READY, peer_ready, "PeerReady"),
        FRAME_TYPE(PEER_HEARTBEAT, peer_heartbeat, "PeerHeartbeat"),
        FRAME_TYPE(PEER_LINK, peer_link, "PeerLink"),
        FRAME_TYPE(PEER_UNLINK, peer_unlink, "PeerUnlink"),
        FRAME_TYPE(PEER_CLUSTER_GONE, peer_cluster_gone, "PeerClusterGone"),
        FRAME_TYPE(PEER_TRANSFER, peer_transfer, "PeerTransfer"),
        FRAME_TYPE(PEER_TRANSFER_DONE, peer_transfer_done, "PeerTransferDone"),
        FRAME_TYPE(PEER_TRANSFER_CANCEL, peer_transfer_cancel, "PeerTransferCancel"),
        FRAME_TYPE(PEER_CHANNEL_CONNECT, peer_channel_connect, "PeerChannelConnect"),
        FRAME_TYPE(PEER_REMOTE_DONE, peer_remote_done, "PeerRemoteDone"),
        FRAME_TYPE(PEER_DOMAIN_JOIN, peer_domain_join, "PeerDomainJoin"),
        FRAME_TYPE(PEER_DOMAIN_LINKED, peer_domain_linked, "PeerDomainLinked"),
        FRAME_TYPE(PEER_DOMAIN_READY, peer_domain_ready, "PeerDomainReady"),
        FRAME_TYPE(PEER_DOMAIN_LEAVE, peer_domain_leave, "PeerDomainLeave"),
        FRAME_TYPE(PEER_DOMAIN_XFER, peer_domain_xfer, "PeerDomainXfer"),
};

const FrameType *frame_type_lookup(uint16_t type)
{
        if (type >= ARRAY_SIZE(frame_types) || !frame_types[type].name)
                return NULL;
        return &frame_types[type];
}

/*
 * Packed lists of uint64 (block ids) of at least this many values are encoded by frame_pack()
 * itself: protobuf-c walks each list twice (its size, then its bytes) at about 8 ns a value, 1.7
 * ms of the control loop for a peer's request of 200,000 block ids.
 */
#define FRAME_PACKED_FAST_MIN_VALUES 256
#define FRAME_PACKED_OUT_MAX 4

/* A long list of a message's top level that frame_pack() encodes after the rest. */
typedef struct PackedOut {
        const ProtobufCFieldDescriptor *field;
        const uint64_t *values;
        size_t n;
        size_t body; /* bytes of its varints */
} PackedOut;

static size_t varint_size(uint64_t v)
{
        return v < 0x80 ? 1 : (size_t)(64 - __builtin_clzll(v) + 6) / 7;
}

static uint8_t *varint_put(uint8_t *p, uint64_t v)
{
        while (v >= 0x80) {
                *p++ = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        *p++ = (uint8_t)v;
        return p;
}

/* The bytes of @o with its tag and length. */
static size_t packed_out_size(const PackedOut *o)
{
        return varint_size((uint64_t)o->field->id << 3 | 2) + varint_size(o->body) + o->body;
}

/* The long packed uint64 lists of @msg's top level, at most FRAME_PACKED_OUT_MAX, in @out. */
static size_t packed_find(const ProtobufCMessage *msg, PackedOut *out)
{
        const ProtobufCMessageDescriptor *desc = msg->descriptor;
        size_t n = 0;

        for (unsigned i = 0; i < desc->n_fields && n < FRAME_PACKED_OUT_MAX; i++) {
                const ProtobufCFieldDescriptor *f = &desc->fields[i];
                const uint8_t *base = (const uint8_t *)msg;
                PackedOut *o = &out[n];

                if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_UINT64 ||
                    !(f->flags & PROTOBUF_C_FIELD_FLAG_PACKED))
                        continue;
                memcpy(&o->n, base + f->quantifier_offset, sizeof(o->n));
                if (o->n < FRAME_PACKED_FAST_MIN_VALUES)
                        continue;
                memcpy(&o->values, base + f->offset, sizeof(o->values));
                o->field = f;
                o->body = 0;
                for (size_t k = 0; k < o->n; k++)
                        o->body += varint_size(o->values[k]);
                n++;
        }
        return n;
}

/* Writes @o after the rest of the message: tag, length, varints. */
static uint8_t *packed_put(uint8_t *p, const PackedOut *o)
{
        p = varint_put(p, (uint64_t)o->field->id << 3 | 2);
        p = varint_put(p, o->body);
        for (size_t k = 0; k < o->n; k++)
                p = varint_put(p, o->values[k]);
        return p;
}

/*
 * A shallow copy of @msg without the lists of @out, for protobuf-c to pack the rest of it (fields
 * may come in any order on the wire); malloc()ed, NULL when out of memory.
 */
static ProtobufCMessage *packed_rest(const ProtobufCMessage *msg, const PackedOut *out, size_t n)
{
        size_t size = msg->descriptor->sizeof_message;
        uint8_t *rest = malloc(size);

        if (!rest)
                return NULL;
        memcpy(rest, msg, size);
        for (size_t i = 0; i < n; i++) {
                memset(rest + out[i].field->quantifier_offset, 0, sizeof(size_t));
                memset(rest + out[i].field->offset, 0, sizeof(uint64_t *));
        }
        return (ProtobufCMessage *)rest;
}

int frame_pack(uint16_t type, uint16_t flags, uint64_t request_id, uint16_t n_fds,
               const ProtobufCMessage *msg, uint32_t max_payload, uint8_t **ret_buf,
               size_t *ret_len)
{
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ ProtobufCMessage *rest = NULL;
        PackedOut out[FRAME_PACKED_OUT_MAX];
        size_t size = 0, n_out = 0;

        /* A frame the peer's frame_header_decode() would reject is a bug here, not there. */
        if (flags & ~(uint16_t)_FRAME_FLAGS_KNOWN || n_fds > FRAME_MAX_FDS)
                return -EINVAL;

        if (msg) {
                n_out = packed_find(msg, out);
                if (n_out > 0) {
                        rest = packed_rest(msg, out, n_out);
                        if (!rest)
                                return -ENOMEM;
                }
                size = protobuf_c_message_get_packed_size(rest ?: msg);
                for (size_t i = 0; i < n_out; i++)
                        size += packed_out_size(&out[i]);
        }
        if (size > max_payload)
                return -EMSGSIZE;

        buf = malloc(FRAME_HEADER_SIZE + size);
        if (!buf)
                return -ENOMEM;

        frame_header_encode(
                &(FrameHeader){
                        .magic = FRAME_MAGIC,
                        .version = FRAME_VERSION,
                        .type = type,
                        .flags = flags,
                        .n_fds = n_fds,
                        .length = (uint32_t)size,
                        .request_id = request_id,
                },
                buf);
        if (msg) {
                uint8_t *p = buf + FRAME_HEADER_SIZE;

                p += protobuf_c_message_pack(rest ?: msg, p);
                for (size_t i = 0; i < n_out; i++)
                        p = packed_put(p, &out[i]);
                assert((size_t)(p - buf) == FRAME_HEADER_SIZE + size);
                (void)p;
        }

        *ret_buf = TAKE_PTR(buf);
        *ret_len = FRAME_HEADER_SIZE + size;
        return 0;
}

/*
 * Packed lists of uint64 (block ids) at least this long are decoded by frame_unpack() itself:
 * protobuf-c spends about 65 instructions on each varint, which for a request of 200,000 block
 * ids was most of the control loop's work for it.
 */
#define FRAME_PACKED_FAST_MIN 256
#define FRAME_PACKED_FAST_MAX FRAME_LIST_FACTS_MAX

/* One top-level field of the message decoded here: its bytes, tag included, and its list. */
typedef struct PackedField {
        const ProtobufCFieldDescriptor *field;
        size_t start; /* the field's first byte (its tag) */
        size_t data;  /* the packed varints */
        size_t end;
        uint64_t *values;
        size_t n_values;
} PackedField;

/* Reads the varint at *@pos (at most 10 bytes); false when it does not end inside @len. */
static bool read_varint(const uint8_t *data, size_t len, size_t *pos, uint64_t *ret)
{
        uint64_t v = 0;

        for (unsigned shift = 0; shift < 70 && *pos < len; shift += 7) {
                uint8_t b = data[(*pos)++];

                v |= shift < 64 ? (uint64_t)(b & 0x7f) << shift : 0;
                if (b < 0x80) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

/* The number of bytes below 0x80 in @p: the varints ending there. Eight bytes at a time. */
static size_t count_varint_ends(const uint8_t *p, size_t len)
{
        const uint64_t ones = UINT64_C(0x0101010101010101);
        size_t n = 0, i = 0;

        while (len - i >= 8) {
                uint64_t acc = 0;

                /* per-byte counters of at most 255 each */
                for (size_t k = 0; k < 255 && len - i >= 8; k++, i += 8) {
                        uint64_t w;

                        memcpy(&w, p + i, sizeof(w));
                        acc += (~w >> 7) & ones;
                }
                n += (size_t)(((acc & UINT64_C(0x00ff00ff00ff00ff)) +
                               ((acc >> 8) & UINT64_C(0x00ff00ff00ff00ff))) *
                                      UINT64_C(0x0001000100010001) >>
                              48);
        }
        for (; i < len; i++)
                n += p[i] < 0x80;
        return n;
}

/*
 * Decodes the @n varints of @p (their last byte ends @p): the short ones of block ids inline.
 * False for one of 10 bytes or more, which protobuf-c is left to judge.
 */
static bool decode_varints(const uint8_t *p, const uint8_t *end, uint64_t *out, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                uint64_t b0, b1, b2, v = 0;

                if (p >= end)
                        return false;
                b0 = p[0];
                if (b0 < 0x80) {
                        out[i] = b0;
                        p++;
                        continue;
                }
                if (end - p >= 3) {
                        b1 = p[1];
                        if (b1 < 0x80) {
                                out[i] = (b0 & 0x7f) | b1 << 7;
                                p += 2;
                                continue;
                        }
                        b2 = p[2];
                        if (b2 < 0x80) {
                                out[i] = (b0 & 0x7f) | (b1 & 0x7f) << 7 | b2 << 14;
                                p += 3;
                                continue;
                        }
                }
                for (unsigned shift = 0;; shift += 7) {
                        uint8_t b;

                        if (p >= end || shift > 56)
                                return false;
                        b = *p++;
                        v |= (uint64_t)(b & 0x7f) << shift;
                        if (b < 0x80)
                                break;
                }
                out[i] = v;
        }
        return p == end;
}

static const ProtobufCFieldDescriptor *packed_u64_field(const ProtobufCMessageDescriptor *desc,
                                                        uint64_t id)
{
        const ProtobufCFieldDescriptor *f;

        if (id == 0 || id > UINT32_MAX)
                return NULL;
        f = protobuf_c_message_descriptor_get_field(desc, (unsigned)id);
        if (!f || f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_UINT64)
                return NULL;
        return f;
}

/*
 * Finds the long packed uint64 lists among the top-level fields of @data and decodes them into
 * @fields. 0 and *@ret_n (0 when there is none), or -EAGAIN when protobuf-c should decode the
 * message as it is: anything unusual (a list that comes twice or unpacked, a malformed field,
 * a varint of 10 bytes), which it judges as before.
 */
static int packed_scan(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                       PackedField *fields, size_t *ret_n)
{
        /* every list field met, long or short: one met twice is protobuf-c's to join */
        const ProtobufCFieldDescriptor *seen[2 * FRAME_PACKED_FAST_MAX];
        size_t pos = 0, n = 0, n_seen = 0;

        while (pos < len) {
                const ProtobufCFieldDescriptor *f;
                size_t start = pos, body;
                uint64_t tag, l;

                if (!read_varint(data, len, &pos, &tag))
                        return -EAGAIN;
                switch (tag & 7) {
                case 0:
                        if (!read_varint(data, len, &pos, &l))
                                return -EAGAIN;
                        break;
                case 1:
                case 5:
                        l = (tag & 7) == 1 ? 8 : 4;
                        if (len - pos < l)
                                return -EAGAIN;
                        pos += l;
                        break;
                case 2:
                        if (!read_varint(data, len, &pos, &l) || len - pos < l)
                                return -EAGAIN;
                        pos += l;
                        break;
                default:
                        return -EAGAIN;
                }
                f = packed_u64_field(desc, tag >> 3);
                if (!f)
                        continue;
                for (size_t i = 0; i < n_seen; i++)
                        if (seen[i] == f)
                                return -EAGAIN;
                if (n_seen >= ARRAY_SIZE(seen))
                        return -EAGAIN;
                seen[n_seen++] = f;
                body = pos - (size_t)l;
                if ((tag & 7) != 2 || l < FRAME_PACKED_FAST_MIN)
                        continue; /* a short list is protobuf-c's */
                if (n >= FRAME_PACKED_FAST_MAX)
                        return -EAGAIN;
                fields[n++] = (PackedField){.field = f, .start = start, .data = body, .end = pos};
        }

        for (size_t i = 0; i < n; i++) {
                PackedField *pf = &fields[i];
                const uint8_t *p = data + pf->data;
                size_t bytes = pf->end - pf->data;

                if (p[bytes - 1] >= 0x80)
                        return -EAGAIN;
                pf->n_values = count_varint_ends(p, bytes);
                pf->values = malloc(pf->n_values * sizeof(uint64_t));
                if (!pf->values)
                        return -ENOMEM;
                if (!decode_varints(p, p + bytes, pf->values, pf->n_values))
                        return -EAGAIN;
        }
        *ret_n = n;
        return 0;
}

/* The largest of @values and, when the planner's bitmap bound allows, whether one repeats. */
static void list_facts(const uint64_t *values, size_t n, FrameListFacts *ret)
{
        uint64_t max = 0;
        size_t repeat;

        for (size_t i = 0; i < n; i++)
                max = MAX(max, values[i]);
        *ret = (FrameListFacts){.values = values, .n = n, .max = max};

        /* sparse, or no memory: the loop judges it */
        if (max == UINT64_MAX || !id_repeat_bitmap_fits(n, max + 1) ||
            id_repeat_first(values, n, max + 1, &repeat) < 0)
                return;
        ret->unique_known = true;
        ret->unique = repeat == SIZE_MAX;
}

/*
 * The long packed lists decoded by packed_scan(), the rest of the message by protobuf-c from a
 * copy without them; the lists are then set as protobuf-c would have (and are freed with the
 * message by protobuf_c_message_free_unpacked()), their facts in @facts when it is not NULL.
 * -EAGAIN: decode it all with protobuf-c.
 */
static int unpack_packed_fast(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                              size_t len, ProtobufCMessage **ret, FrameListFacts *facts,
                              size_t *ret_n_facts)
{
        PackedField fields[FRAME_PACKED_FAST_MAX] = {};
        _cleanup_free_ uint8_t *rest = NULL;
        ProtobufCMessage *msg = NULL;
        size_t n = 0, rest_len = 0, from = 0;
        int r;

        r = packed_scan(desc, data, len, fields, &n);
        if (r < 0 || n == 0)
                goto out;

        rest_len = len;
        for (size_t i = 0; i < n; i++)
                rest_len -= fields[i].end - fields[i].start;
        rest = malloc(rest_len ? rest_len : 1);
        if (!rest) {
                r = -ENOMEM;
                goto out;
        }
        rest_len = 0;
        for (size_t i = 0; i < n; i++) {
                memcpy(rest + rest_len, data + from, fields[i].start - from);
                rest_len += fields[i].start - from;
                from = fields[i].end;
        }
        memcpy(rest + rest_len, data + from, len - from);
        rest_len += len - from;

        msg = protobuf_c_message_unpack(desc, NULL, rest_len, rest);
        if (!msg) {
                r = -EBADMSG;
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                const ProtobufCFieldDescriptor *f = fields[i].field;
                size_t *count = (size_t *)((uint8_t *)msg + f->quantifier_offset);
                uint64_t **values = (uint64_t **)((uint8_t *)msg + f->offset);

                /* not in the rest, or packed_scan() would have given up */
                assert(*count == 0 && !*values);
                *count = fields[i].n_values;
                *values = TAKE_PTR(fields[i].values);
                if (facts)
                        list_facts(*values, *count, &facts[i]);
        }
        if (ret_n_facts)
                *ret_n_facts = facts ? n : 0;
        *ret = msg;
        r = 1;
out:
        /* what packed_scan() decoded before it gave up, or what the message did not take */
        for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
                free(fields[i].values);
        return r;
}

int frame_unpack_facts(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                       ProtobufCMessage **ret, FrameListFacts *facts, size_t *ret_n_facts)
{
        ProtobufCMessage *msg;
        int r;

        assert(desc);

        if (ret_n_facts)
                *ret_n_facts = 0;
        if (len >= FRAME_PACKED_FAST_MIN) {
                r = unpack_packed_fast(desc, data, len, ret, facts, ret_n_facts);
                if (r != -EAGAIN && r != 0)
                        return r < 0 ? r : 0;
        }
        msg = protobuf_c_message_unpack(desc, NULL, len, data);
        if (!msg)
                return -EBADMSG;

        *ret = msg;
        return 0;
}

int frame_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                 ProtobufCMessage **ret)
{
        return frame_unpack_facts(desc, data, len, ret, NULL, NULL);
}

int frame_message_dup(const ProtobufCMessage *msg, ProtobufCMessage **ret)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t size = protobuf_c_message_get_packed_size(msg);

        buf = malloc(size ? size : 1);
        if (!buf)
                return -ENOMEM;
        (void)protobuf_c_message_pack(msg, buf);
        return frame_unpack(msg->descriptor, buf, size, ret);
}

int frame_pack_error(uint16_t type, uint64_t request_id, int code, const char *detail,
                     uint32_t max_payload, uint8_t **ret_buf, size_t *ret_len)
{
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;

        status.code = code;
        status.detail = (char *)(detail ?: "");

        return frame_pack(type, FRAME_FLAG_REPLY | FRAME_FLAG_ERROR, request_id, 0, &status.base,
                          max_payload, ret_buf, ret_len);
}

/* Room for the control data of one frame: never more than FRAME_MAX_FDS fds. */
typedef union FrameControl {
        struct cmsghdr align;
        uint8_t buf[CMSG_SPACE(sizeof(int) * FRAME_MAX_FDS)];
} FrameControl;

ssize_t frame_sendmsg(int sock, const void *buf, size_t len, const int *fds, size_t n_fds)
{
        FrameControl control = {};
        struct iovec iov = {
                .iov_base = (void *)buf,
                .iov_len = len,
        };
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
        };
        ssize_t n;

        if (n_fds > FRAME_MAX_FDS)
                return -EINVAL;
        /* A stream socket drops control data that comes with no byte to carry it. */
        if (n_fds > 0 && len == 0)
                return -EINVAL;

        if (n_fds > 0) {
                struct cmsghdr *cmsg;

                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                cmsg = CMSG_FIRSTHDR(&mh);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n_fds);
        }

        do
                n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        return n;
}

/* Closes every fd that arrived in @mh's SCM_RIGHTS control messages. */
static void close_received_fds(struct msghdr *mh)
{
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                size_t n;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        safe_close(fd);
                }
        }
}

ssize_t frame_recvmsg(int sock, void *buf, size_t len, int *fds, size_t max_fds, size_t *ret_n_fds)
{
        return frame_recvmsg_flags(sock, buf, len, fds, max_fds, 0, ret_n_fds);
}

ssize_t frame_recvmsg_flags(int sock, void *buf, size_t len, int *fds, size_t max_fds, int flags,
                            size_t *ret_n_fds)
{
        FrameControl control;
        struct iovec iov = {
                .iov_base = buf,
                .iov_len = len,
        };
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control.buf,
        };
        size_t n_fds = 0;
        bool bad = false;
        ssize_t n;

        /*
         * The control buffer bounds what the kernel installs: fds beyond it are discarded by the
         * kernel and flagged with MSG_CTRUNC. CMSG_SPACE() rounds up, so the count is checked
         * again below.
         */
        max_fds = MIN(max_fds, (size_t)FRAME_MAX_FDS);
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * max_fds);

        do
                n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;

        if (mh.msg_flags & MSG_CTRUNC)
                bad = true;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
                        bad = true;
                        continue;
                }
                n_fds += (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        }
        if (n_fds > max_fds)
                bad = true;
        if (bad) {
                close_received_fds(&mh);
                return -EPROTO;
        }

        n_fds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                if (k == 0)
                        continue;
                memcpy(fds + n_fds, CMSG_DATA(c), k * sizeof(int));
                n_fds += k;
        }

        *ret_n_fds = n_fds;
        return n;
}
