/* SPDX-License-Identifier: MIT */
/*
 * Integration test: a hostile peer. This program speaks the daemon-to-daemon protocol itself: it
 * holds the cluster key (a compromised node), passes the handshake, attaches a data connection,
 * links to a real cluster, and then asks for what a well-behaved daemon never would: blocks out
 * of range, caches that were not exposed, links that do not exist, nonsense cache shapes, writes
 * past a cache's end, unknown requests, broken frames. Every request gets a clear status, no byte
 * outside what was exposed is read or written, and the daemon keeps serving its real peers.
 */
#include <arpa/inet.h>
#include <check.h>
#include <endian.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"
#include "daemon/link/peer-auth.h"

#define KEY "kvdist-hostile-test-key-0123456789"
#define HOSTILE_CLUSTER 9999
#define REPLY_TIMEOUT_MS harness_wait_ms()

typedef struct Hostile {
        int ctl;
        int data;
        uint64_t next_id;
        uint64_t link_id;
        size_t n_exposed;
} Hostile;

static int tcp_connect(const char *addr)
{
        char host[64];
        const char *colon = strrchr(addr, ':');
        struct sockaddr_in sa = {.sin_family = AF_INET};
        int fd;

        ck_assert_ptr_nonnull(colon);
        (void)snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
        ck_assert_int_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1);
        sa.sin_port = htons((uint16_t)atoi(colon + 1));
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        return fd;
}

/* Sends a request and reads the reply frame; returns its status code and unpacks it. */
static int hostile_call(Hostile *h, uint16_t type, const ProtobufCMessage *msg,
                        ProtobufCMessage **ret_reply, char *detail, size_t size)
{
        uint64_t id = ++h->next_id;
        HarnessFrame f;
        int code = 0;

        ck_assert_int_eq(harness_raw_send_frame(h->ctl, type, 0, id, msg, NULL, 0), 0);
        for (;;) {
                ck_assert_int_eq(harness_raw_read_frame(h->ctl, REPLY_TIMEOUT_MS, &f), 1);
                /* Heartbeats come our way too: answer them like a daemon would. */
                if (!(f.h.flags & FRAME_FLAG_REPLY) &&
                    f.h.type == KVDIST__V1__MSG_TYPE__MSG_PEER_HEARTBEAT) {
                        Kvdist__V1__PeerHeartbeatReply hb = KVDIST__V1__PEER_HEARTBEAT_REPLY__INIT;
                        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

                        hb.status = &st;
                        ck_assert_int_eq(harness_raw_send_frame(h->ctl, f.h.type, FRAME_FLAG_REPLY,
                                                                f.h.request_id, &hb.base, NULL, 0),
                                         0);
                        harness_frame_deinit(&f);
                        continue;
                }
                break;
        }
        ck_assert_uint_eq(f.h.request_id, id);
        ck_assert_uint_eq(f.h.type, type);
        ck_assert_int_eq(harness_frame_status(&f, &code, detail, size), 0);
        if (ret_reply) {
                *ret_reply = NULL;
                if (code == KVD_OK)
                        ck_assert_int_eq(harness_frame_unpack_reply(&f, ret_reply), 0);
        }
        harness_frame_deinit(&f);
        return code;
}

/* A dialer's Hello with a key, from the first step of @ours, asking for one data connection. */
static void hostile_hello(Kvdist__V1__PeerHello *hello, const PeerAuthHello *ours,
                          const char *identity)
{
        hello->protocol_version = PEER_PROTOCOL_VERSION;
        hello->node_id = ours->node_id;
        hello->identity = (char *)identity;
        hello->nonce.data = (uint8_t *)ours->nonce;
        hello->nonce.len = sizeof(ours->nonce);
        hello->has_key = true;
        hello->data_conns = 1;
        hello->chunk_size = 65536;
}

/* Handshake with the key, one data connection, PeerReady: a READY peer of @n. */
static void hostile_connect(Hostile *h, const Node *n)
{
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        Kvdist__V1__PeerAuth auth = KVDIST__V1__PEER_AUTH__INIT;
        Kvdist__V1__PeerDataHello dh = KVDIST__V1__PEER_DATA_HELLO__INIT;
        Kvdist__V1__PeerHelloReply *hr;
        Kvdist__V1__PeerAuthReply *ar;
        ProtobufCMessage *reply;
        PeerAuthHello ours, theirs = {0};
        PeerAuthProof proof;
        PeerAuth auth_state;
        HarnessFrame f;

        memset(h, 0, sizeof(*h));
        h->ctl = tcp_connect(n->peer_addr);
        ck_assert_int_eq(peer_auth_init(&auth_state, PEER_AUTH_DIALER, 0x4057113, KEY, strlen(KEY)),
                         0);
        ck_assert_int_eq(peer_auth_hello(&auth_state, &ours), 0);
        hostile_hello(&hello, &ours, "hostile/1");
        ck_assert_int_eq(
                hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, &hello.base, &reply, NULL, 0),
                KVD_OK);
        hr = (Kvdist__V1__PeerHelloReply *)reply;
        theirs.node_id = hr->hello->node_id;
        theirs.has_key = hr->hello->has_key;
        memcpy(theirs.nonce, hr->hello->nonce.data, PEER_AUTH_NONCE_SIZE);
        ck_assert_int_eq(peer_auth_on_hello(&auth_state, &theirs), 0);
        ck_assert_uint_eq(hr->proof.len, PEER_AUTH_MAC_SIZE);
        memcpy(proof.mac, hr->proof.data, PEER_AUTH_MAC_SIZE);
        ck_assert_int_eq(peer_auth_on_proof(&auth_state, &proof), 0);
        protobuf_c_message_free_unpacked(reply, NULL);
        ck_assert_int_eq(peer_auth_proof(&auth_state, &proof), 0);
        auth.proof.data = proof.mac;
        auth.proof.len = sizeof(proof.mac);
        ck_assert_int_eq(
                hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, &auth.base, &reply, NULL, 0),
                KVD_OK);
        ar = (Kvdist__V1__PeerAuthReply *)reply;
        ck_assert_uint_eq(ar->data_conns, 1);
        ck_assert_uint_eq(ar->data_token.len, 32);

        h->data = tcp_connect(n->peer_addr);
        dh.data_token = ar->data_token;
        dh.index = 0;
        ck_assert_int_eq(harness_raw_send_frame(h->data, KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO,
                                                0, 0, &dh.base, NULL, 0),
                         0);
        protobuf_c_message_free_unpacked(reply, NULL);
        ck_assert_int_eq(harness_raw_read_frame(h->ctl, REPLY_TIMEOUT_MS, &f), 1);
        ck_assert_uint_eq(f.h.type, KVDIST__V1__MSG_TYPE__MSG_PEER_READY);
        harness_frame_deinit(&f);
        peer_auth_deinit(&auth_state);
}

/* Sends PeerUnlink of our cluster's link to @dst, named by the id @link_id the daemon gave it. */
static void hostile_unlink(Hostile *h, uint64_t dst, uint64_t link_id)
{
        Kvdist__V1__PeerUnlink m = KVDIST__V1__PEER_UNLINK__INIT;

        m.src_cluster_id = HOSTILE_CLUSTER;
        m.dst_cluster_id = dst;
        m.link_id = link_id;
        ck_assert_int_eq(
                hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK, &m.base, NULL, NULL, 0),
                KVD_OK);
}

static void hostile_link(Hostile *h, uint64_t dst)
{
        Kvdist__V1__PeerLink m = KVDIST__V1__PEER_LINK__INIT;
        Kvdist__V1__PeerLinkReply *r;
        ProtobufCMessage *reply;

        m.src_cluster_id = HOSTILE_CLUSTER;
        m.src_role = KVDIST__V1__ROLE__ROLE_DECODER;
        m.dst_cluster_id = dst;
        ck_assert_int_eq(
                hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, &m.base, &reply, NULL, 0),
                KVD_OK);
        r = (Kvdist__V1__PeerLinkReply *)reply;
        h->link_id = r->link_id;
        h->n_exposed = r->n_caches;
        protobuf_c_message_free_unpacked(reply, NULL);
}

typedef struct Ask {
        Kvdist__V1__TransferKind kind;
        uint64_t link_id;
        uint64_t key_cluster, model;
        uint64_t *src_blocks, *dst_blocks;
        size_t n_src, n_dst;
        uint32_t num_tensors;
        uint64_t tensor_size, units;
        size_t notify_len;
} Ask;

/*
 * Channel descriptions are bytes only the transport reads. A link asked for with a device that
 * does not unpack is granted all the same (our cluster's own transfers stay on TCP), and the
 * grant says the daemon's own device as bytes (or why it has none).
 */
static void hostile_link_garbage_device(Hostile *h, const Node *n, uint64_t dst)
{
        static uint8_t garbage[] = {0x01, 60, 'x', 'y'}; /* 60 bytes of name said, 2 there */
        Kvdist__V1__PeerLink m = KVDIST__V1__PEER_LINK__INIT;
        Kvdist__V1__PeerLinkReply *r;
        ProtobufCMessage *reply;

        m.src_cluster_id = HOSTILE_CLUSTER;
        m.src_role = KVDIST__V1__ROLE__ROLE_DECODER;
        m.dst_cluster_id = dst;
        m.channel = true;
        m.src_channel.data = garbage;
        m.src_channel.len = sizeof(garbage);
        ck_assert_int_eq(
                hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_LINK, &m.base, &reply, NULL, 0),
                KVD_OK);
        r = (Kvdist__V1__PeerLinkReply *)reply;
        h->link_id = r->link_id;
        if (strcmp(it_transport(), "rdma") == 0) {
                ck_assert_uint_gt(r->channel.len, 0);
                /* The daemon logs after the reply went out: a status round trip after it
                 * ends on a loop that finished the handler. */
                ck_assert_int_eq(node_status_len(n, "inbound_links"), 1);
                ck_assert(harness_daemon_log_contains(&n->d, "did not say its rdma device"));
        } else {
                ck_assert_uint_eq(r->channel.len, 0);
                ck_assert_ptr_nonnull(r->channel_reason);
                ck_assert_uint_gt(strlen(r->channel_reason), 0);
        }
        protobuf_c_message_free_unpacked(reply, NULL);
}

/* A PeerChannelConnect toward the daemon's device (any name over TCP); returns the status. */
static int hostile_channel_connect(Hostile *h, uint32_t slot, uint32_t n_slots,
                                   const uint8_t *device, size_t device_len, const uint8_t *path,
                                   size_t path_len, char *detail, size_t size)
{
        const char *dev = getenv("KVDIST_RDMA_DEVICE");
        Kvdist__V1__PeerChannelConnect m = KVDIST__V1__PEER_CHANNEL_CONNECT__INIT;

        m.channel_id = 4242;
        m.slot = slot;
        m.n_slots = n_slots;
        m.remote_device = (char *)(strcmp(it_transport(), "rdma") == 0 && dev ? dev : "rxe0");
        m.device.data = (uint8_t *)device;
        m.device.len = device_len;
        m.path.data = (uint8_t *)path;
        m.path.len = path_len;
        return hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_CHANNEL_CONNECT, &m.base, NULL,
                            detail, size);
}

/*
 * Garbage where a channel's device or path should be is refused, and nothing is opened for it:
 * PARAM_INVALID where the device named works here, FEATURE_NOT_ENABLED where the daemon has
 * none (it says so before it reads the bytes).
 */
static void hostile_channel_garbage(Hostile *h)
{
        /* As the RDMA transport packs them: device "x", port 1, MTU 1024; QP 17, PSN 5. */
        static const uint8_t device[] = {0x01, 1, 'x', 0xfe, 0x80, [18] = 1, 1, 0, 4, 0, 0, 0, 0};
        static const uint8_t path[] = {0x02, 17, 0, 0, 0, 5, 0, 0, 0};
        static const uint8_t big_qpn[] = {0x02, 17, 0, 0, 1, 5, 0, 0, 0};
        static const uint8_t garbage[] = {0x01, 60, 'x', 'y'};
        bool rdma = strcmp(it_transport(), "rdma") == 0;
        int want = rdma ? KVD_E_PARAM_INVALID : KVD_E_FEATURE_NOT_ENABLED;
        char detail[256];

        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, garbage, sizeof(garbage), path,
                                                 sizeof(path), detail, sizeof(detail)),
                         want);
        /* Truncated or one byte too long. */
        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, device, sizeof(device) - 1, path,
                                                 sizeof(path), detail, sizeof(detail)),
                         want);
        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, device, sizeof(device), path,
                                                 sizeof(path) - 1, detail, sizeof(detail)),
                         want);
        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, device, sizeof(device), big_qpn,
                                                 sizeof(big_qpn), detail, sizeof(detail)),
                         want);
        /* A path's bytes for a device, nothing at all, slots out of range. */
        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, path, sizeof(path), path, sizeof(path),
                                                 detail, sizeof(detail)),
                         want);
        ck_assert_int_eq(hostile_channel_connect(h, 0, 1, NULL, 0, NULL, 0, detail, sizeof(detail)),
                         want);
        ck_assert_int_eq(hostile_channel_connect(h, 1, 1, device, sizeof(device), path,
                                                 sizeof(path), detail, sizeof(detail)),
                         want);
        ck_assert_int_eq(hostile_channel_connect(h, 0, 0, device, sizeof(device), path,
                                                 sizeof(path), detail, sizeof(detail)),
                         want);
        if (rdma)
                ck_assert_ptr_nonnull(strstr(detail, "bad rdma channel description"));
        else
                ck_assert_ptr_nonnull(strstr(detail, "no working rdma device rxe0 here"));
}

/* A PeerTransfer for blocks of a BlocksKey; returns the status, the detail in @detail. */
static int hostile_transfer(Hostile *h, const Ask *a, char *detail, size_t size,
                            Kvdist__V1__PeerTransferReply **ret)
{
        Kvdist__V1__PeerTransfer m = KVDIST__V1__PEER_TRANSFER__INIT;
        Kvdist__V1__PlanCacheDesc desc = KVDIST__V1__PLAN_CACHE_DESC__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        Kvdist__V1__BlocksKey bk = KVDIST__V1__BLOCKS_KEY__INIT;
        static uint8_t notify[4096];
        ProtobufCMessage *reply = NULL;
        int code;

        bk.cluster_id = a->key_cluster;
        bk.model_id = a->model;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &bk;
        desc.blocks = true;
        desc.num_tensors = a->num_tensors;
        desc.tensor_size = a->tensor_size;
        desc.units = a->units;
        m.job_id = ++h->next_id + 1000;
        m.link_id = a->link_id;
        m.kind = a->kind;
        m.key = &key;
        m.local = &desc;
        m.src_blocks = a->src_blocks;
        m.n_src_blocks = a->n_src;
        m.dst_blocks = a->dst_blocks;
        m.n_dst_blocks = a->n_dst;
        m.timeout_ms = 5000;
        m.notify.data = notify;
        m.notify.len = a->notify_len;
        /* Over RDMA the request asks for descriptors instead of bytes on the data streams. */
        m.remote_access = strcmp(it_transport(), "rdma") == 0;
        code = hostile_call(h, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, &m.base,
                            ret ? &reply : NULL, detail, size);
        if (ret)
                *ret = (Kvdist__V1__PeerTransferReply *)reply;
        return code;
}

/* Reads @len bytes of data chunks (one range, in order) from the data connection. */
static void hostile_read_chunks(Hostile *h, uint64_t job, uint8_t *out, uint64_t len)
{
        uint64_t got = 0;

        while (got < len) {
                uint8_t hdr[32];
                uint32_t magic, clen;
                uint64_t id, off;

                ck_assert_int_eq(recv(h->data, hdr, sizeof(hdr), MSG_WAITALL), (ssize_t)32);
                memcpy(&magic, hdr, 4);
                memcpy(&id, hdr + 8, 8);
                memcpy(&off, hdr + 16, 8);
                memcpy(&clen, hdr + 24, 4);
                ck_assert_uint_eq(le32toh(magic), 0x5344564b);
                ck_assert_uint_eq(le64toh(id), job);
                ck_assert_uint_eq(le64toh(off), got);
                ck_assert_uint_le(got + le32toh(clen), len);
                ck_assert_int_eq(recv(h->data, out + got, le32toh(clen), MSG_WAITALL),
                                 (ssize_t)le32toh(clen));
                got += le32toh(clen);
        }
}

/*
 * A request long enough to be decoded off the daemon's loop (120,000 ids, out of range) is
 * refused as a short one is, and the connection goes on: the next request is answered.
 */
static void hostile_long_out_of_range(Hostile *h, const Node *n, Ask *ask)
{
        enum { LONG = 120000 };
        uint64_t *src = calloc(LONG, sizeof(uint64_t)), *dst = calloc(LONG, sizeof(uint64_t));
        uint64_t *src0 = ask->src_blocks, *dst0 = ask->dst_blocks;
        size_t n_src0 = ask->n_src, n_dst0 = ask->n_dst;
        int64_t away0 = node_status_int(n, "counters/peer_frames_decoded_away");
        char detail[256];

        ck_assert(src && dst);
        for (size_t i = 0; i < LONG; i++) {
                src[i] = 1000000 + i;
                dst[i] = i;
        }
        ask->src_blocks = src;
        ask->dst_blocks = dst;
        ask->n_src = ask->n_dst = LONG;
        ck_assert_int_eq(hostile_transfer(h, ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(detail, "out of range"));
        ck_assert_int_eq(node_status_int(n, "counters/peer_frames_decoded_away") - away0, 1);
        ask->src_blocks = src0;
        ask->dst_blocks = dst0;
        ask->n_src = n_src0;
        ask->n_dst = n_dst0;
        ck_assert_int_eq(hostile_transfer(h, ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(detail, "out of range"));
        free(src);
        free(dst);
}

/*
 * A peer request of 300 KB that does not decode (decoded off the loop): the daemon drops the
 * peer that sent it, as for a short one, and counts nothing decoded.
 */
static void hostile_long_garbage(const Node *n)
{
        enum { LEN = 300 << 10 };
        uint8_t *frame = malloc(FRAME_HEADER_SIZE + LEN);
        int64_t away0 = node_status_int(n, "counters/peer_frames_decoded_away");
        Hostile h;

        ck_assert_ptr_nonnull(frame);
        hostile_connect(&h, n);
        frame_header_encode(
                &(FrameHeader){
                        .magic = FRAME_MAGIC,
                        .version = FRAME_VERSION,
                        .type = KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER,
                        .length = LEN,
                        .request_id = 77,
                },
                frame);
        /* varints that never end */
        memset(frame + FRAME_HEADER_SIZE, 0xff, LEN);
        ck_assert_int_eq(harness_raw_send(h.ctl, frame, FRAME_HEADER_SIZE + LEN, NULL, 0), 0);
        ck_assert_int_eq(harness_raw_wait_closed(h.ctl, harness_wait_ms()), 1);
        ck_assert(harness_daemon_log_contains(&n->d, "undecodable PeerTransfer"));
        ck_assert_int_eq(node_status_int(n, "counters/peer_frames_decoded_away"), away0);
        close(h.ctl);
        close(h.data);
        free(frame);
}

START_TEST(test_hostile_peer)
{
        static const char *const extra[] = {"--tcp-streams", "1", NULL};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0), hidden_key = kvd_key_blocks(A_ID, 1);
        kvd_cache_key late_key = kvd_key_blocks(A_ID, 2), target_key = kvd_key_blocks(A_ID, 3);
        uint64_t in_range[] = {1}, far[] = {8}, huge[] = {UINT64_MAX}, zero[] = {0};
        Kvdist__V1__PeerTransferReply *rep;
        TCache src, hidden, late, target, dst;
        kvd_client *a, *b;
        TCopies cp = {};
        char detail[256];
        uint8_t *stream;
        Hostile h;
        Node p, d;
        Ask ask;
        int one = 1;

        node_start_full(&p, NULL, NULL, KEY, extra);
        node_start_full(&d, NULL, NULL, KEY, extra);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, 8, 4096, 0xa1, &key, 1, 0));
        expect_ok(a, tcache_register(&hidden, a, true, 2, 8, 4096, 0xa2, &hidden_key, 1,
                                     KVD_REMOTE_NO));
        expect_ok(a, tcache_register(&target, a, true, 2, 8, 4096, 0xa3, &target_key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 8, 4096, 0xb1, NULL, 0, 0));

        hostile_connect(&h, &p);
        (void)setsockopt(h.ctl, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        hostile_link(&h, A_ID);
        /* Linking again replaces the link; a late unlink of the old one leaves the new one. */
        {
                uint64_t old = h.link_id;

                hostile_link(&h, A_ID);
                ck_assert_uint_ne(h.link_id, old);
                hostile_unlink(&h, A_ID, old);
                ck_assert_int_eq(node_status_len(&p, "inbound_links"), 1);
                hostile_unlink(&h, A_ID, h.link_id);
                ck_assert_int_eq(node_status_len(&p, "inbound_links"), 0);
                ck_assert(harness_daemon_log_contains(&p.d, "removed (unlinked by cluster "
                                                            "9999)"));
                hostile_link_garbage_device(&h, &p, A_ID);
                hostile_link(&h, A_ID);
        }
        /* The private cache is not even described. */
        ck_assert_uint_eq(h.n_exposed, 2);
        /* A peer's link counts: nothing new can be made remote-accessible now. */
        expect_status(
                a, tcache_register(&late, a, true, 2, 8, 4096, 0xa4, &late_key, 1, KVD_REMOTE_YES),
                KVD_E_PARAM_INVALID, NULL);
        expect_ok(a, tcache_register(&late, a, true, 2, 8, 4096, 0xa4, &late_key, 1, 0));

        /* Every one of these is refused with a status that names the problem. */
        ask = (Ask){KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS,
                    h.link_id,
                    A_ID,
                    0,
                    far,
                    zero,
                    1,
                    1,
                    2,
                    8 * 4096,
                    8,
                    0};
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(detail, "out of range"));
        hostile_long_out_of_range(&h, &p, &ask);
        ask.src_blocks = huge;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.src_blocks = in_range;
        ask.link_id = h.link_id + 1000;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_NOT_YET_LINK);
        ask.link_id = h.link_id;
        ask.model = 1;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PERMISSION_DENIED);
        ask.model = 2;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PERMISSION_DENIED);
        ck_assert_ptr_nonnull(strstr(detail, "registered after"));
        ask.model = 0;
        ask.key_cluster = B_ID;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_CACHE_NOT_EXIST);
        ask.key_cluster = A_ID;
        ask.num_tensors = 0;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.num_tensors = 100000;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.num_tensors = 2;
        ask.units = 0;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.units = 8;
        /* A pull may carry a notification, never one too long. */
        ask.notify_len = 4096;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.notify_len = 0;

        /* Writes past the end of the target, or with a notification too long, land nowhere. */
        ask.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS;
        ask.model = 3;
        ask.src_blocks = zero;
        ask.dst_blocks = far;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.dst_blocks = zero;
        ask.notify_len = 4096;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_PARAM_INVALID);
        ask.notify_len = 0;
        /* Our side described bigger than the target: the plan does not fit. */
        ask.dst_blocks = zero;
        ask.tensor_size = 8 * 8192;
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), NULL),
                         KVD_E_CACHE_INCOMPATIBLE);
        tcache_verify_untouched(&target);

        /* An unknown request gets UNSUPPORTED and the connection stays up. */
        {
                Kvdist__V1__PeerReady m = KVDIST__V1__PEER_READY__INIT;

                ck_assert_int_eq(hostile_call(&h, 999, &m.base, NULL, detail, sizeof(detail)),
                                 KVD_E_UNSUPPORTED);
                ck_assert_int_eq(hostile_call(&h, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, &m.base,
                                              NULL, detail, sizeof(detail)),
                                 KVD_E_UNSUPPORTED);
        }

        hostile_channel_garbage(&h);

        /* A well-formed pull: exactly the exposed bytes arrive on the data connection. */
        ask = (Ask){KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS,
                    h.link_id,
                    A_ID,
                    0,
                    in_range,
                    zero,
                    1,
                    1,
                    2,
                    8 * 4096,
                    8,
                    0};
        ck_assert_int_eq(hostile_transfer(&h, &ask, detail, sizeof(detail), &rep), KVD_OK);
        ck_assert_uint_eq(rep->total_bytes, 2 * 4096);
        if (strcmp(it_transport(), "rdma") == 0) {
                Kvdist__V1__PeerRemoteDone done = KVDIST__V1__PEER_REMOTE_DONE__INIT;
                Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

                /* Descriptors for the two tensors of the cache asked for, and only for that one:
                 * opaque here, but not empty, no longer than a descriptor is, and not the same. */
                ck_assert_uint_eq(rep->n_descs, 2);
                for (size_t i = 0; i < 2; i++) {
                        ck_assert_uint_gt(rep->descs[i].len, 0);
                        ck_assert_uint_le(rep->descs[i].len, 32);
                }
                ck_assert(rep->descs[0].len != rep->descs[1].len ||
                          memcmp(rep->descs[0].data, rep->descs[1].data, rep->descs[0].len) != 0);
                done.transfer_id = rep->job_id;
                done.status = &st;
                ck_assert_int_eq(harness_raw_send_frame(h.ctl,
                                                        KVDIST__V1__MSG_TYPE__MSG_PEER_REMOTE_DONE,
                                                        0, 0, &done.base, NULL, 0),
                                 0);
        } else {
                stream = malloc(2 * 4096);
                ck_assert_ptr_nonnull(stream);
                hostile_read_chunks(&h, rep->job_id, stream, 2 * 4096);
                ck_assert_int_eq(harness_check_pattern_at(stream, 4096, src.seed,
                                                          tcache_tensor_off(&src, 0) + 4096),
                                 -1);
                ck_assert_int_eq(harness_check_pattern_at(stream + 4096, 4096, src.seed,
                                                          tcache_tensor_off(&src, 1) + 4096),
                                 -1);
                free(stream);
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        ck_assert_int_ge(node_status_int(&p, "counters/peer_requests_refused"), 13);

        /* A frame with a bad magic: the daemon drops this peer, and only this peer. */
        ck_assert_int_eq(harness_raw_send(h.ctl, "garbage-garbage-garbage-garbage!", 32, NULL, 0),
                         0);
        ck_assert_int_eq(harness_raw_wait_closed(h.ctl, harness_wait_ms()), 1);
        close(h.ctl);
        close(h.data);
        hostile_long_garbage(&p);

        /* The real decoder links and pulls, byte-exact; A's caches were never written. */
        link_node(b, A_ID, &p);
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, in_range, 1, zero, 1, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, in_range, zero, 1);
        tcache_verify(&dst, &cp);
        tcache_verify_untouched(&src);
        tcache_verify_untouched(&hidden);
        tcache_verify_untouched(&target);
        ck_assert_int_eq(node_status_len(&p, "peers"), 1);

        expect_ok(a, kvd_client_finalize(a));
        expect_ok(b, kvd_client_finalize(b));
        tcopies_free(&cp);
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/* Data connections that show no token, a wrong one, or garbage are refused. */
START_TEST(test_bad_data_connections)
{
        Kvdist__V1__PeerDataHello dh = KVDIST__V1__PEER_DATA_HELLO__INIT;
        uint8_t token[32] = {1, 2, 3};
        Node p;
        int fd;

        node_start(&p);
        fd = tcp_connect(p.peer_addr);
        dh.data_token.data = token;
        dh.data_token.len = sizeof(token);
        ck_assert_int_eq(harness_raw_send_frame(fd, KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO, 0, 0,
                                                &dh.base, NULL, 0),
                         0);
        ck_assert_int_eq(harness_raw_wait_closed(fd, harness_wait_ms()), 1);
        close(fd);
        fd = tcp_connect(p.peer_addr);
        ck_assert_int_eq(harness_raw_send(fd, "\x4b\x56\x44\x31\x01\x00\xff\xff", 8, NULL, 0), 0);
        close(fd);
        ck_assert_int_ge(node_status_int(&p, "counters/peers_refused"), 1);
        ck_assert_int_eq(node_status_len(&p, "peers"), 0);
        node_stop(&p);
}
END_TEST

/*
 * A dialer that takes the listener's proof and closes without sending its own (it holds another
 * key, or is from before dialers said so): the listener refuses it, logs and counts it.
 */
START_TEST(test_dialer_closes_before_its_proof)
{
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        PeerAuthHello ours;
        PeerAuth auth_state;
        Hostile h = {0};
        Node p;

        node_start_full(&p, NULL, NULL, KEY, NULL);
        h.ctl = tcp_connect(p.peer_addr);
        ck_assert_int_eq(peer_auth_init(&auth_state, PEER_AUTH_DIALER, 0x4057114,
                                        "another-key-"
                                        "0123456789abcdef",
                                        28),
                         0);
        ck_assert_int_eq(peer_auth_hello(&auth_state, &ours), 0);
        hostile_hello(&hello, &ours, "silent/1");
        ck_assert_int_eq(
                hostile_call(&h, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, &hello.base, NULL, NULL, 0),
                KVD_OK);
        close(h.ctl);
        peer_auth_deinit(&auth_state);

        for (int i = 0; i < 250 && node_status_int(&p, "counters/peers_refused") < 1; i++)
                harness_sleep_ms(20);
        ck_assert_int_eq(node_status_int(&p, "counters/peers_refused"), 1);
        ck_assert(harness_daemon_log_contains(&p.d, "refused: it closed the connection instead "
                                                    "of proving it holds the cluster key"));
        ck_assert_int_eq(node_status_len(&p, "peers"), 0);
        node_stop(&p);
}
END_TEST

/*
 * A peer that speaks peer protocol 1 (rdma_addrs/rdma_rkeys where 2 carries descriptors) is
 * refused at its Hello with PROTOCOL_MISMATCH and a detail naming both versions, and never
 * becomes a peer.
 */
START_TEST(test_peer_protocol_1_refused)
{
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        PeerAuthHello ours;
        PeerAuth auth_state;
        Hostile h = {0};
        char detail[256] = "";
        Node p;

        ck_assert_int_eq(PEER_PROTOCOL_VERSION, 2);
        node_start_full(&p, NULL, NULL, KEY, NULL);
        h.ctl = tcp_connect(p.peer_addr);
        ck_assert_int_eq(peer_auth_init(&auth_state, PEER_AUTH_DIALER, 0x4057115, KEY, strlen(KEY)),
                         0);
        ck_assert_int_eq(peer_auth_hello(&auth_state, &ours), 0);
        hostile_hello(&hello, &ours, "old/1");
        hello.protocol_version = 1;
        ck_assert_int_eq(hostile_call(&h, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, &hello.base, NULL,
                                      detail, sizeof(detail)),
                         KVD_E_PROTOCOL_MISMATCH);
        ck_assert_msg(strstr(detail, "peer protocol 1, we speak 2"), "detail: %s", detail);
        ck_assert_int_eq(harness_raw_wait_closed(h.ctl, harness_wait_ms()), 1);
        close(h.ctl);
        peer_auth_deinit(&auth_state);
        ck_assert_int_eq(node_status_len(&p, "peers"), 0);
        node_stop(&p);
}
END_TEST

static Suite *hostile_suite(void)
{
        Suite *s = suite_create("integration-hostile-peer");
        TCase *tc;

        tc = tcase_create("hostile");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_hostile_peer);
        tcase_add_test(tc, test_bad_data_connections);
        tcase_add_test(tc, test_dialer_closes_before_its_proof);
        tcase_add_test(tc, test_peer_protocol_1_refused);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(hostile_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
