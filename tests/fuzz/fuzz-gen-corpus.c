/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpora of the socket-level fuzz targets (corpus/client, corpus/peer): scripts
 * (fuzz-script.h) that each walk one path of the protocol a fuzzer should start from. The seeds
 * in the tree are this program's output:
 *
 *      fuzz-gen-corpus DIR           writes DIR/client/<seed> and DIR/peer/<seed>
 *      fuzz-gen-corpus --check DIR   fails when a seed there differs from what it would write
 *
 * (the fuzz-corpus-current test runs the second over tests/fuzz/corpus). Other files in those
 * folders, such as regression inputs of fixed bugs, are left alone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"
#include "tests/fuzz/fuzz-messages.h"
#include "tests/fuzz/fuzz-peer.h"
#include "tests/fuzz/fuzz-script.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"

#define MT(x) KVDIST__V1__MSG_TYPE__MSG_##x

typedef struct Script {
        uint8_t buf[1u << 16];
        size_t len;
} Script;

static const char *out_dir;
static bool check;
static unsigned n_seeds, n_differ;

static void put(Script *s, const void *p, size_t n)
{
        if (s->len + n > sizeof(s->buf)) {
                fprintf(stderr, "fuzz-gen-corpus: a seed outgrew %zu bytes\n", sizeof(s->buf));
                exit(EXIT_FAILURE);
        }
        memcpy(s->buf + s->len, p, n);
        s->len += n;
}

static void put_le(Script *s, uint64_t v, size_t n)
{
        for (size_t k = 0; k < n; k++) {
                uint8_t b = (uint8_t)(v >> (8 * k));

                put(s, &b, 1);
        }
}

static void script_init(Script *s, uint8_t setup)
{
        s->len = 0;
        put_le(s, setup, 1);
}

static void op(Script *s, FuzzOp o, unsigned arg)
{
        put_le(s, (uint8_t)(o | arg << 4), 1);
}

/* A frame of @type carrying @m (NULL: empty), with @n_fds fds of @kind; @cut >= 0 sends only
 * that many bytes of it. */
static void frame_full(Script *s, uint16_t type, uint8_t flags, uint8_t id,
                       const ProtobufCMessage *m, unsigned n_fds, uint8_t kind, int cut)
{
        uint8_t payload[1u << 15];
        size_t len = m ? protobuf_c_message_get_packed_size(m) : 0;

        if (len > sizeof(payload)) {
                fprintf(stderr, "fuzz-gen-corpus: a message of %zu bytes\n", len);
                exit(EXIT_FAILURE);
        }
        if (m)
                (void)protobuf_c_message_pack(m, payload);
        op(s, FUZZ_OP_FRAME, n_fds | (cut >= 0 ? 8 : 0));
        put_le(s, type, 2);
        put_le(s, flags, 1);
        put_le(s, id, 1);
        put_le(s, kind, 1);
        if (cut >= 0)
                put_le(s, (uint8_t)cut, 1);
        put_le(s, len, 2);
        put(s, payload, len);
}

static void frame(Script *s, uint16_t type, uint8_t id, const ProtobufCMessage *m)
{
        frame_full(s, type, 0, id, m, 0, 0, -1);
}

static void frame_fds(Script *s, uint16_t type, uint8_t id, const ProtobufCMessage *m,
                      unsigned n_fds, uint8_t kind)
{
        frame_full(s, type, 0, id, m, n_fds, kind, -1);
}

static void raw(Script *s, const void *p, size_t len, unsigned n_fds, uint8_t kind)
{
        op(s, FUZZ_OP_RAW, n_fds);
        put_le(s, kind, 1);
        put_le(s, len, 2);
        put(s, p, len);
}

/* A frame header as it stands on the wire, whatever it says. */
static void raw_header(Script *s, uint16_t version, uint16_t type, uint16_t flags, uint16_t n_fds,
                       uint32_t length, unsigned pass_fds, uint8_t kind)
{
        Script h = {.len = 0};

        put_le(&h, FRAME_MAGIC, 4);
        put_le(&h, version, 2);
        put_le(&h, type, 2);
        put_le(&h, flags, 2);
        put_le(&h, n_fds, 2);
        put_le(&h, length, 4);
        put_le(&h, 1, 8);
        raw(s, h.buf, h.len, pass_fds, kind);
}

/* Switches to endpoint @i; @mode >= 0 opens it (the first time) in that mode. */
static void endpoint(Script *s, unsigned i, int mode)
{
        op(s, FUZZ_OP_ENDPOINT, i);
        if (mode >= 0)
                put_le(s, (uint8_t)mode, 1);
}

static void wait_ms(Script *s, unsigned ms)
{
        op(s, FUZZ_OP_WAIT, ms - 1);
}

static void chunk(Script *s, unsigned conn, uint8_t flags, uint64_t job, uint32_t offset,
                  const void *payload, uint16_t len)
{
        op(s, FUZZ_OP_CHUNK, conn);
        put_le(s, flags, 1);
        put_le(s, job, 8);
        put_le(s, offset, 4);
        put_le(s, len, 2);
        put(s, payload, len);
}

static void emit(const char *target, const char *name, const Script *s)
{
        char path[4096];
        FILE *f;

        (void)snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
        n_seeds++;
        if (check) {
                uint8_t old[sizeof(s->buf) + 1];
                size_t n = 0;

                f = fopen(path, "re");
                if (f) {
                        n = fread(old, 1, sizeof(old), f);
                        fclose(f);
                }
                if (!f || n != s->len || memcmp(old, s->buf, n) != 0) {
                        fprintf(stderr, "%s: %s\n", path,
                                f ? "differs from what fuzz-gen-corpus writes" : "missing");
                        n_differ++;
                }
                return;
        }
        f = fopen(path, "we");
        if (!f || fwrite(s->buf, 1, s->len, f) != s->len || fclose(f) != 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                exit(EXIT_FAILURE);
        }
}

/* ---- messages ---- */

static void msg_region_add(Script *s, uint8_t id, uint64_t size, uint64_t addr, unsigned n_fds,
                           uint8_t kind)
{
        Kvdist__V1__RegionAdd m = KVDIST__V1__REGION_ADD__INIT;

        m.size = size;
        m.client_addr = addr;
        frame_fds(s, MT(REGION_ADD), id, &m.base, n_fds, kind);
}

static void msg_register_blocks(Script *s, uint8_t id, uint64_t cluster, uint64_t model)
{
        FuzzBlocksCache c;

        fuzz_blocks_cache_init(&c, cluster, model);
        frame(s, MT(REGISTER_CACHE), id, &c.msg.base);
}

static void msg_register_contiguous(Script *s, uint8_t id, uint64_t cluster)
{
        FuzzContiguousCache c;

        fuzz_contiguous_cache_init(&c, cluster, 1);
        frame(s, MT(REGISTER_CACHE), id, &c.msg.base);
}

static void msg_empty(Script *s, uint16_t type, uint8_t id)
{
        frame(s, type, id, NULL);
}

static void msg_link_local(Script *s, uint16_t type, uint8_t id, uint64_t remote, bool force)
{
        Kvdist__V1__ClusterInfo ci = KVDIST__V1__CLUSTER_INFO__INIT, *cis[] = {&ci};
        Kvdist__V1__LinkClusters link = KVDIST__V1__LINK_CLUSTERS__INIT;
        Kvdist__V1__UnlinkClusters unlink = KVDIST__V1__UNLINK_CLUSTERS__INIT;

        ci.remote_cluster_id = remote;
        ci.remote_role = KVDIST__V1__ROLE__ROLE_MIX;
        ci.remote_ip_info = (char *)"";
        if (type == MT(LINK_CLUSTERS)) {
                link.clusters = cis;
                link.n_clusters = 1;
                link.timeout_ms = 1000;
                frame(s, type, id, &link.base);
        } else {
                unlink.clusters = cis;
                unlink.n_clusters = 1;
                unlink.timeout_ms = 1000;
                unlink.force = force;
                frame(s, type, id, &unlink.base);
        }
}

/* A TransferCancel naming the request @target of the same connection. */
static void msg_transfer_cancel(Script *s, uint8_t id, uint64_t target)
{
        Kvdist__V1__TransferCancel m = KVDIST__V1__TRANSFER_CANCEL__INIT;

        m.request_id = target;
        frame(s, MT(TRANSFER_CANCEL), id, &m.base);
}

/* A transfer between the blocks caches of the local-link seeds (BlocksKey {@remote, 1}). */
static void msg_transfer_blocks(Script *s, uint8_t id, Kvdist__V1__TransferKind kind,
                                uint64_t remote, uint32_t timeout_ms, const char *notify)
{
        Kvdist__V1__Transfer m = KVDIST__V1__TRANSFER__INIT;
        Kvdist__V1__BlocksKey bk = KVDIST__V1__BLOCKS_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        uint64_t src[] = {0, 1, 2, 7}, dst[] = {4, 5, 6, 3};

        bk.cluster_id = remote;
        bk.model_id = 1;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &bk;
        m.kind = kind;
        m.remote_key = &key;
        m.local_cache_id = 0; /* fuzz-client fills in the cache it registered last */
        m.src_blocks = src;
        m.n_src_blocks = 4;
        m.dst_blocks = dst;
        m.n_dst_blocks = 4;
        m.timeout_ms = timeout_ms;
        if (notify) {
                m.notify.data = (uint8_t *)notify;
                m.notify.len = strlen(notify);
        }
        frame(s, MT(TRANSFER), id, &m.base);
}

/* A batch of a pull, a push and a pull past the caches, between the local-link seeds' caches. */
static void msg_transfer_batch(Script *s, uint8_t id, uint64_t remote, uint32_t timeout_ms)
{
        Kvdist__V1__TransferBatch m = KVDIST__V1__TRANSFER_BATCH__INIT;
        Kvdist__V1__Transfer e[3], *ptrs[3];
        Kvdist__V1__BlocksKey bk = KVDIST__V1__BLOCKS_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        uint64_t src[] = {0, 1, 2, 7}, dst[] = {4, 5, 6, 3}, bad[] = {1u << 30, 0};

        bk.cluster_id = remote;
        bk.model_id = 1;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &bk;
        for (size_t i = 0; i < 3; i++) {
                kvdist__v1__transfer__init(&e[i]);
                e[i].kind = i == 1 ? KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS
                                   : KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
                e[i].remote_key = &key;
                e[i].local_cache_id = 0; /* fuzz-client fills in the cache it registered last */
                e[i].src_blocks = i == 2 ? bad : src;
                e[i].n_src_blocks = i == 2 ? 2 : 4;
                e[i].dst_blocks = i == 1 ? src : dst;
                e[i].n_dst_blocks = i == 2 ? 2 : 4;
                e[i].timeout_ms = timeout_ms;
                ptrs[i] = &e[i];
        }
        m.n_entries = 3;
        m.entries = ptrs;
        frame(s, MT(TRANSFER_BATCH), id, &m.base);
}

/* ---- client seeds (fuzz-client.c) ---- */

static void client_seeds(void)
{
        Script s;

        /* Read-only requests on a connection that said Hello only. */
        script_init(&s, 1);
        msg_empty(&s, MT(DAEMON_STATUS), 3);
        msg_empty(&s, MT(DAEMON_METRICS), 4);
        msg_empty(&s, MT(REGION_REMOVE), 5);
        emit("client", "hello-read-only", &s);

        /* Issue 10 item 1: the error reply to a frame of another version fails with EPIPE. */
        script_init(&s, 0);
        op(&s, FUZZ_OP_SHUT_RD, 0);
        raw_header(&s, FRAME_VERSION + 1, MT(HELLO), 0, 0, 0, 0, 0);
        emit("client", "bad-version-after-shutdown", &s);

        script_init(&s, 0);
        raw_header(&s, FRAME_VERSION + 1, MT(HELLO), 0, 0, 0, 0, 0);
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("client", "bad-version-then-close", &s);

        /* Before Hello: another request, a Hello with an fd, an undecodable Hello. */
        script_init(&s, 0);
        {
                Kvdist__V1__ClientInit m = KVDIST__V1__CLIENT_INIT__INIT;

                m.cluster_id = 5;
                m.role = KVDIST__V1__ROLE__ROLE_PROMPT;
                frame(&s, MT(CLIENT_INIT), 1, &m.base);
        }
        emit("client", "first-frame-not-hello", &s);

        script_init(&s, 0);
        {
                Kvdist__V1__Hello m = KVDIST__V1__HELLO__INIT;

                m.protocol_version = FRAME_VERSION;
                frame_fds(&s, MT(HELLO), 1, &m.base, 1, FUZZ_FD_MEMFD);
        }
        emit("client", "hello-with-fd", &s);

        script_init(&s, 0);
        {
                Kvdist__V1__Hello m = KVDIST__V1__HELLO__INIT;

                m.protocol_version = FRAME_VERSION + 1;
                frame(&s, MT(HELLO), 1, &m.base);
        }
        emit("client", "hello-other-protocol", &s);

        /* Types and flags the daemon does not take, after Hello. */
        script_init(&s, 1);
        msg_empty(&s, 999, 3);
        msg_empty(&s, MT(PEER_HELLO), 4);
        msg_empty(&s, MT(HELLO), 5);
        msg_empty(&s, MT(CLIENT_FINALIZE), 6);
        frame_full(&s, MT(DAEMON_STATUS), FRAME_FLAG_ERROR, 7, NULL, 0, 0, -1);
        frame_full(&s, MT(DAEMON_STATUS), FRAME_FLAG_REPLY, 8, NULL, 0, 0, -1);
        emit("client", "unsupported-frames", &s);

        /* Regions and registered caches, then their removal. */
        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 1, 1);
        msg_register_contiguous(&s, 5, 1);
        {
                Kvdist__V1__UnregisterCache m = KVDIST__V1__UNREGISTER_CACHE__INIT;
                Kvdist__V1__RegionRemove r = KVDIST__V1__REGION_REMOVE__INIT;

                frame(&s, MT(UNREGISTER_CACHE), 6, &m.base);
                frame(&s, MT(REGION_REMOVE), 7, &r.base);
        }
        msg_empty(&s, MT(DAEMON_STATUS), 8);
        emit("client", "regions-caches", &s);

        /* Engine memory: at an offset into the memfd, past its end, and a dma-buf. */
        script_init(&s, 2);
        for (unsigned i = 0; i < 3; i++) {
                Kvdist__V1__RegionAdd m = KVDIST__V1__REGION_ADD__INIT;

                m.size = FUZZ_MEMFD_SIZE / 2;
                m.client_addr = FUZZ_REGION_ADDR + i * FUZZ_MEMFD_SIZE;
                m.file_offset = i == 1 ? FUZZ_MEMFD_SIZE : FUZZ_MEMFD_SIZE / 2;
                m.source = i == 2 ? KVDIST__V1__REGION_SOURCE__REGION_SOURCE_DMABUF
                                  : KVDIST__V1__REGION_SOURCE__REGION_SOURCE_ENGINE;
                frame_fds(&s, MT(REGION_ADD), (uint8_t)(3 + i), &m.base, 1, FUZZ_FD_MEMFD);
        }
        msg_register_blocks(&s, 6, 1, 1);
        emit("client", "regions-engine", &s);

        /* RegionAdd with every kind of fd but a good memfd, then too many fds. */
        script_init(&s, 2);
        for (uint8_t k = FUZZ_FD_MEMFD_UNSEALED; k < _FUZZ_FD_MAX; k++)
                msg_region_add(&s, (uint8_t)(3 + k), FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, k);
        msg_region_add(&s, 20, 64u << 20, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_region_add(&s, 21, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 2, 16 | FUZZ_FD_MEMFD);
        msg_region_add(&s, 22, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 7, 16 | FUZZ_FD_PIPE);
        emit("client", "region-odd-fds", &s);

        /* Issue 10 item 2: a partial frame carrying a dup of the client's own socket, then exit. */
        script_init(&s, 2);
        {
                Kvdist__V1__RegionAdd m = KVDIST__V1__REGION_ADD__INIT;

                m.size = FUZZ_MEMFD_SIZE;
                m.client_addr = FUZZ_REGION_ADDR;
                frame_full(&s, MT(REGION_ADD), 0, 3, &m.base, 1, FUZZ_FD_OWN_SOCKET, 10);
        }
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("client", "partial-frame-own-socket", &s);

        script_init(&s, 2);
        {
                Kvdist__V1__RegionAdd m = KVDIST__V1__REGION_ADD__INIT;

                m.size = FUZZ_MEMFD_SIZE;
                m.client_addr = FUZZ_REGION_ADDR;
                frame_full(&s, MT(REGION_ADD), 0, 3, &m.base, 1, FUZZ_FD_DAEMON_SOCKET,
                           FRAME_HEADER_SIZE + 2);
        }
        op(&s, FUZZ_OP_SHUT_WR, 0);
        emit("client", "partial-frame-daemon-socket", &s);

        /* Lengths and counts far beyond the limits. */
        script_init(&s, 2);
        raw_header(&s, FRAME_VERSION, MT(REGION_ADD), 0, 1, 16u << 20, 1, FUZZ_FD_MEMFD);
        raw(&s, "partial payload", 15, 0, 0);
        emit("client", "huge-length-partial", &s);

        script_init(&s, 2);
        raw_header(&s, FRAME_VERSION, MT(REGION_ADD), 0, 0, UINT32_MAX, 0, 0);
        emit("client", "length-over-limit", &s);

        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        {
                Kvdist__V1__RegisterCache m = KVDIST__V1__REGISTER_CACHE__INIT;
                Kvdist__V1__CacheDesc desc = KVDIST__V1__CACHE_DESC__INIT;
                Kvdist__V1__AllocateCache a = KVDIST__V1__ALLOCATE_CACHE__INIT;
                Kvdist__V1__GetNotifies g = KVDIST__V1__GET_NOTIFIES__INIT;
                Kvdist__V1__Transfer t = KVDIST__V1__TRANSFER__INIT;
                int64_t shape[] = {INT64_MAX, INT64_MAX, 3};
                uint64_t addrs[] = {FUZZ_REGION_ADDR, UINT64_MAX, 1}, blocks[512];

                desc.num_tensors = UINT32_MAX;
                desc.shape = shape;
                desc.n_shape = 3;
                desc.data_type = 12;
                m.desc = &desc;
                m.addrs = addrs;
                m.n_addrs = 3;
                m.blocks = true;
                frame(&s, MT(REGISTER_CACHE), 4, &m.base);
                desc.num_tensors = 240;
                shape[0] = INT64_C(1) << 40;
                shape[1] = 1 << 20;
                desc.n_shape = 2;
                a.desc = &desc;
                a.blocks = true;
                frame(&s, MT(ALLOCATE_CACHE), 5, &a.base);
                g.max = UINT32_MAX;
                frame(&s, MT(GET_NOTIFIES), 6, &g.base);
                for (size_t k = 0; k < ARRAY_SIZE(blocks); k++)
                        blocks[k] = UINT64_MAX - k;
                t.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS;
                t.src_blocks = blocks;
                t.n_src_blocks = ARRAY_SIZE(blocks);
                t.dst_blocks = blocks;
                t.n_dst_blocks = ARRAY_SIZE(blocks);
                t.size = INT64_MIN;
                t.tensor_num_per_layer = UINT32_MAX;
                frame(&s, MT(TRANSFER), 7, &t.base);
        }
        emit("client", "huge-counts", &s);

        /* The pool: map it, carve caches from it, remove a key, give one back. */
        script_init(&s, 2);
        msg_empty(&s, MT(POOL_MAP), 3);
        {
                Kvdist__V1__AllocateCache a = KVDIST__V1__ALLOCATE_CACHE__INIT;
                Kvdist__V1__CacheDesc desc = KVDIST__V1__CACHE_DESC__INIT;
                Kvdist__V1__ReqKey rk = KVDIST__V1__REQ_KEY__INIT;
                Kvdist__V1__BlocksKey bk = KVDIST__V1__BLOCKS_KEY__INIT;
                Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT, *keys[] = {&key};
                Kvdist__V1__RemoveCacheKey rm = KVDIST__V1__REMOVE_CACHE_KEY__INIT;
                Kvdist__V1__DeallocateCache d = KVDIST__V1__DEALLOCATE_CACHE__INIT;
                int64_t shape[] = {4, 1024};

                desc.num_tensors = 2;
                desc.shape = shape;
                desc.n_shape = 2;
                desc.data_type = 1;
                bk.cluster_id = 1;
                bk.model_id = 2;
                key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
                key.blocks = &bk;
                a.desc = &desc;
                a.blocks = true;
                a.keys = keys;
                a.n_keys = 1;
                frame(&s, MT(ALLOCATE_CACHE), 4, &a.base);
                rk.cluster_id = 1;
                rk.req_id = 9;
                rk.prefix_id = UINT64_MAX;
                key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
                key.req = &rk;
                shape[0] = 1;
                a.blocks = false;
                frame(&s, MT(ALLOCATE_CACHE), 5, &a.base);
                rm.key = &key;
                frame(&s, MT(REMOVE_CACHE_KEY), 6, &rm.base);
                frame(&s, MT(DEALLOCATE_CACHE), 7, &d.base);
                frame(&s, MT(DEALLOCATE_CACHE), 8, &d.base);
        }
        emit("client", "pool-caches", &s);

        /* Two clusters on this daemon: link, pull and push with a notification each, unlink. */
        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 1, 1);
        msg_empty(&s, MT(NOTIFY_FD), 5);
        endpoint(&s, 1, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 2, 1);
        msg_link_local(&s, MT(LINK_CLUSTERS), 5, 1, false);
        {
                Kvdist__V1__CheckLinkStatus m = KVDIST__V1__CHECK_LINK_STATUS__INIT;

                m.remote_cluster_id = 1;
                frame(&s, MT(CHECK_LINK_STATUS), 6, &m.base);
        }
        msg_transfer_blocks(&s, 7, KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS, 1, 1000,
                            "pulled");
        msg_transfer_blocks(&s, 8, KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS, 1, 1000,
                            "pushed");
        endpoint(&s, 0, -1);
        {
                Kvdist__V1__GetNotifies m = KVDIST__V1__GET_NOTIFIES__INIT;

                m.max = 4;
                frame(&s, MT(GET_NOTIFIES), 6, &m.base);
        }
        endpoint(&s, 1, -1);
        msg_link_local(&s, MT(UNLINK_CLUSTERS), 9, 1, false);
        {
                Kvdist__V1__SwitchRole m = KVDIST__V1__SWITCH_ROLE__INIT;

                m.role = KVDIST__V1__ROLE__ROLE_DECODER;
                frame(&s, MT(SWITCH_ROLE), 10, &m.base);
        }
        emit("client", "local-link-transfer", &s);

        /* A transfer whose deadline passes, and one whose client leaves while it runs. */
        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 1, 1);
        endpoint(&s, 1, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 2, 1);
        msg_link_local(&s, MT(LINK_CLUSTERS), 5, 1, false);
        msg_transfer_blocks(&s, 6, KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS, 1, 1, NULL);
        wait_ms(&s, 3);
        msg_transfer_blocks(&s, 7, KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS, 1, 1000, NULL);
        op(&s, FUZZ_OP_CLOSE, 0);
        endpoint(&s, 0, -1);
        op(&s, FUZZ_OP_SHUT_RD, 0);
        msg_empty(&s, MT(CLIENT_FINALIZE), 5);
        emit("client", "transfer-timeout-and-close", &s);

        /* A batch answered whole, and one whose client leaves while it runs. */
        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 1, 1);
        endpoint(&s, 1, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 2, 1);
        msg_empty(&s, MT(LOCAL_INFO), 5);
        msg_link_local(&s, MT(LINK_CLUSTERS), 5, 1, false);
        msg_transfer_batch(&s, 6, 1, 1000);
        wait_ms(&s, 3);
        msg_transfer_batch(&s, 7, 1, 1000);
        msg_transfer_cancel(&s, 8, 7);
        msg_transfer_batch(&s, 9, 1, 1000);
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("client", "transfer-batch-and-close", &s);

        /* A transfer cancelled while it runs, a cancel of one answered, of itself, of nothing. */
        script_init(&s, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 1, 1);
        endpoint(&s, 1, 2);
        msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
        msg_register_blocks(&s, 4, 2, 1);
        msg_link_local(&s, MT(LINK_CLUSTERS), 5, 1, false);
        msg_transfer_blocks(&s, 6, KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS, 1, 1000, NULL);
        msg_transfer_cancel(&s, 7, 6);
        wait_ms(&s, 3);
        msg_transfer_cancel(&s, 8, 6);
        msg_transfer_cancel(&s, 9, 9);
        msg_transfer_cancel(&s, 10, 0);
        msg_transfer_blocks(&s, 11, KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS, 1, 1000, NULL);
        msg_transfer_cancel(&s, 12, 11);
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("client", "transfer-cancel", &s);

        /* Finalize, initialise again as another cluster, finalize twice. */
        script_init(&s, 2);
        msg_empty(&s, MT(CLIENT_FINALIZE), 3);
        {
                Kvdist__V1__ClientInit m = KVDIST__V1__CLIENT_INIT__INIT;

                m.cluster_id = 9;
                m.role = KVDIST__V1__ROLE__ROLE_DECODER;
                m.device_id = 3;
                m.sync_kv_timeout_ms = 5;
                m.listen_ip_info = (char *)"127.0.0.1:26000";
                frame(&s, MT(CLIENT_INIT), 4, &m.base);
                frame(&s, MT(CLIENT_INIT), 5, &m.base);
        }
        msg_empty(&s, MT(CLIENT_FINALIZE), 6);
        msg_empty(&s, MT(CLIENT_FINALIZE), 7);
        msg_empty(&s, MT(DAEMON_STATUS), 8);
        emit("client", "finalize-init-again", &s);

        /* A comm domain of two clusters of this daemon, and its collectives. */
        script_init(&s, 2);
        {
                static const char table[] =
                        "{\"version\": \"1.0\", \"server_count\": \"1\", "
                        "\"status\": \"completed\", "
                        "\"server_list\": [{\"server_id\": \"a\", \"device\": [{\"device_id\": "
                        "\"0\", \"device_ip\": \"10.0.0.1\", \"rank_id\": \"0\"}, {\"device_id\": "
                        "\"1\", \"device_ip\": \"10.0.0.1\", \"rank_id\": \"1\"}]}]}";
                Kvdist__V1__DomainLink dl = KVDIST__V1__DOMAIN_LINK__INIT;
                Kvdist__V1__ClusterRank cr[2] = {KVDIST__V1__CLUSTER_RANK__INIT,
                                                 KVDIST__V1__CLUSTER_RANK__INIT};
                Kvdist__V1__ClusterRank *crs[] = {&cr[0], &cr[1]};
                Kvdist__V1__DomainQuery q = KVDIST__V1__DOMAIN_QUERY__INIT;
                Kvdist__V1__SendRecvItem it[2] = {KVDIST__V1__SEND_RECV_ITEM__INIT,
                                                  KVDIST__V1__SEND_RECV_ITEM__INIT};
                Kvdist__V1__SendRecvItem *its[] = {&it[0], &it[1]};
                Kvdist__V1__DomainSendRecv sr = KVDIST__V1__DOMAIN_SEND_RECV__INIT;
                Kvdist__V1__DomainBroadcast bc = KVDIST__V1__DOMAIN_BROADCAST__INIT;
                Kvdist__V1__DomainAllGather ag = KVDIST__V1__DOMAIN_ALL_GATHER__INIT;
                Kvdist__V1__DomainUnlink ul = KVDIST__V1__DOMAIN_UNLINK__INIT;
                uint64_t blocks[] = {0, 1, 2, 3};

                for (unsigned k = 0; k < 2; k++) {
                        cr[k].cluster_id = k + 1;
                        cr[k].rank_id = k;
                }
                dl.comm_name = (char *)"fuzz-domain";
                dl.cluster_rank_info = crs;
                dl.n_cluster_rank_info = 2;
                dl.rank_table = (char *)table;
                it[0].addr = FUZZ_REGION_ADDR;
                it[0].count = 256;
                it[0].dtype = 6;
                it[1] = it[0];
                it[1].recv = true;
                it[1].addr = FUZZ_REGION_ADDR + 4096;
                sr.items = its;
                sr.n_items = 2;
                sr.timeout_ms = 50;
                bc.blocks = blocks;
                bc.n_blocks = 2;
                bc.timeout_ms = 50;
                ag.blocks = blocks;
                ag.n_blocks = 4;
                ag.blocks_per_rank = 2;
                ag.timeout_ms = 50;

                msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
                msg_register_blocks(&s, 4, 1, 1);
                frame(&s, MT(DOMAIN_LINK), 5, &dl.base);
                endpoint(&s, 1, 2);
                msg_region_add(&s, 3, FUZZ_MEMFD_SIZE, FUZZ_REGION_ADDR, 1, FUZZ_FD_MEMFD);
                msg_register_blocks(&s, 4, 2, 1);
                frame(&s, MT(DOMAIN_LINK), 5, &dl.base);
                frame(&s, MT(DOMAIN_QUERY), 6, &q.base);
                /* Rank 1 and rank 0 take turns, each op matching the other's. */
                it[0].remote_rank = it[1].remote_rank = 0;
                frame(&s, MT(DOMAIN_SEND_RECV), 7, &sr.base);
                endpoint(&s, 0, -1);
                frame(&s, MT(DOMAIN_QUERY), 6, &q.base);
                it[0].remote_rank = it[1].remote_rank = 1;
                frame(&s, MT(DOMAIN_SEND_RECV), 7, &sr.base);
                endpoint(&s, 1, -1);
                frame(&s, MT(DOMAIN_BROADCAST), 8, &bc.base);
                endpoint(&s, 0, -1);
                frame(&s, MT(DOMAIN_BROADCAST), 8, &bc.base);
                frame(&s, MT(DOMAIN_ALL_GATHER), 9, &ag.base);
                endpoint(&s, 1, -1);
                frame(&s, MT(DOMAIN_ALL_GATHER), 9, &ag.base);
                wait_ms(&s, 2);
                frame(&s, MT(DOMAIN_UNLINK), 10, &ul.base);
        }
        emit("client", "domain-local", &s);

        /* A client that stops reading: replies pile up in the socket, then in the daemon,
         * until it reads again; then one that never does and leaves. */
        script_init(&s, 1);
        op(&s, FUZZ_OP_PAUSE, 0);
        for (unsigned k = 0; k < 64; k++)
                msg_empty(&s, MT(DAEMON_METRICS), (uint8_t)(3 + k));
        op(&s, FUZZ_OP_PAUSE, 0);
        msg_empty(&s, MT(DAEMON_STATUS), 67);
        endpoint(&s, 1, 1);
        op(&s, FUZZ_OP_PAUSE, 0);
        for (unsigned k = 0; k < 64; k++)
                msg_empty(&s, MT(DAEMON_STATUS), (uint8_t)(3 + k));
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("client", "unread-replies", &s);

        /* Many connections at once, some closing in every way. */
        script_init(&s, 1);
        for (unsigned i = 1; i < FUZZ_MAX_ENDPOINTS; i++) {
                endpoint(&s, i, (int)(i % 3));
                if (i % 4 == 1)
                        op(&s, FUZZ_OP_SHUT_WR, 0);
                else if (i % 4 == 2)
                        op(&s, FUZZ_OP_CLOSE, 0);
                else if (i % 4 == 3)
                        op(&s, FUZZ_OP_SHUT_RD, 0);
        }
        endpoint(&s, 0, -1);
        msg_empty(&s, MT(DAEMON_STATUS), 3);
        emit("client", "many-connections", &s);
}

/* ---- peer seeds (fuzz-peer.c) ---- */

static void msg_peer_link(Script *s, uint8_t id, uint64_t src, bool channel)
{
        Kvdist__V1__PeerLink m = KVDIST__V1__PEER_LINK__INIT;

        m.src_cluster_id = src;
        m.src_role = KVDIST__V1__ROLE__ROLE_MIX;
        m.dst_cluster_id = FUZZ_PEER_CLUSTER;
        m.channel = channel;
        frame(s, MT(PEER_LINK), id, &m.base);
}

/*
 * A transfer of blocks 0..1 of the daemon's blocks cache (pull) or into blocks 2..3 (push), with
 * the notification @notify (NULL: none).
 */
static void msg_peer_transfer_notify(Script *s, uint8_t id, uint64_t job, bool pull, bool rdma,
                                     const char *notify)
{
        Kvdist__V1__PeerTransfer m = KVDIST__V1__PEER_TRANSFER__INIT;
        Kvdist__V1__PlanCacheDesc local = KVDIST__V1__PLAN_CACHE_DESC__INIT;
        Kvdist__V1__BlocksKey bk = KVDIST__V1__BLOCKS_KEY__INIT;
        Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
        uint64_t src[] = {0, 1}, dst[] = {2, 3};

        bk.cluster_id = FUZZ_PEER_CLUSTER;
        bk.model_id = FUZZ_PEER_MODEL;
        key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        key.blocks = &bk;
        local.blocks = true;
        local.num_tensors = 2;
        local.tensor_size = FUZZ_TENSOR_BYTES;
        local.units = FUZZ_CACHE_BLOCKS;
        m.job_id = job;
        m.link_id = 0; /* fuzz-peer fills in the last link */
        m.kind = pull ? KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_BLOCKS
                      : KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS;
        m.key = &key;
        m.local = &local;
        m.src_blocks = pull ? src : dst;
        m.n_src_blocks = 2;
        m.dst_blocks = pull ? dst : src;
        m.n_dst_blocks = 2;
        m.timeout_ms = 1000;
        m.remote_access = rdma;
        if (notify) {
                m.notify.data = (uint8_t *)notify;
                m.notify.len = strlen(notify);
        }
        frame(s, MT(PEER_TRANSFER), id, &m.base);
}

/* As msg_peer_transfer_notify(), without a notification. */
static void msg_peer_transfer_blocks(Script *s, uint8_t id, uint64_t job, bool pull, bool rdma)
{
        msg_peer_transfer_notify(s, id, job, pull, rdma, NULL);
}

static void msg_peer_unlink(Script *s, uint8_t id, uint64_t src)
{
        Kvdist__V1__PeerUnlink m = KVDIST__V1__PEER_UNLINK__INIT;

        m.src_cluster_id = src;
        m.dst_cluster_id = FUZZ_PEER_CLUSTER;
        frame(s, MT(PEER_UNLINK), id, &m.base);
}

static void peer_seeds(void)
{
        uint8_t data[4096];
        Script s;

        for (size_t k = 0; k < sizeof(data); k++)
                data[k] = (uint8_t)(k * 13 + 1);

        /* The whole handshake from the script: Hello, PeerAuth, a data connection. */
        script_init(&s, FUZZ_PEER_SETUP(false, 0, 1, false));
        {
                Kvdist__V1__PeerHello h = KVDIST__V1__PEER_HELLO__INIT;
                Kvdist__V1__PeerAuth a = KVDIST__V1__PEER_AUTH__INIT;
                Kvdist__V1__PeerDataHello dh = KVDIST__V1__PEER_DATA_HELLO__INIT;
                uint8_t nonce[32] = {1, 2, 3}, token[32] = {0};

                h.protocol_version = PEER_PROTOCOL_VERSION;
                h.node_id = FUZZ_PEER_NODE_ID + 50;
                h.identity = (char *)"kvdistd/fuzz script";
                h.nonce.data = nonce;
                h.nonce.len = sizeof(nonce);
                h.listen_ip_info = (char *)"127.0.0.3:7000";
                h.data_conns = 1;
                h.chunk_size = 4096;
                frame(&s, MT(PEER_HELLO), 1, &h.base);
                frame(&s, MT(PEER_AUTH), 2, &a.base);
                dh.data_token.data = token; /* fuzz-peer fills in the agreed token */
                dh.data_token.len = sizeof(token);
                endpoint(&s, 1, 0);
                frame(&s, MT(PEER_DATA_HELLO), 0, &dh.base);
                endpoint(&s, 0, -1);
                msg_peer_link(&s, 3, 100, false);
        }
        emit("peer", "handshake-by-script", &s);

        /* With the key: a proof that does not verify. */
        script_init(&s, FUZZ_PEER_SETUP(true, 1, 1, false));
        {
                Kvdist__V1__PeerAuth a = KVDIST__V1__PEER_AUTH__INIT;
                uint8_t proof[32] = {0};

                a.proof.data = proof;
                a.proof.len = sizeof(proof);
                frame(&s, MT(PEER_AUTH), 2, &a.base);
        }
        emit("peer", "bad-proof", &s);

        /* Out of turn: PeerReady from the dialer, data before READY. */
        script_init(&s, FUZZ_PEER_SETUP(true, 2, 2, false));
        msg_empty(&s, MT(PEER_READY), 0);
        msg_peer_link(&s, 3, 100, false);
        emit("peer", "out-of-turn", &s);

        /* READY: heartbeats both ways, a reply to nothing. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        {
                Kvdist__V1__PeerHeartbeat hb = KVDIST__V1__PEER_HEARTBEAT__INIT;
                Kvdist__V1__PeerHeartbeatReply r = KVDIST__V1__PEER_HEARTBEAT_REPLY__INIT;
                Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

                hb.seq = 1;
                frame(&s, MT(PEER_HEARTBEAT), 5, &hb.base);
                frame(&s, MT(PEER_HEARTBEAT), 0, &hb.base);
                r.status = &st;
                r.seq = 1;
                frame_full(&s, MT(PEER_HEARTBEAT), FRAME_FLAG_REPLY, 9, &r.base, 0, 0, -1);
        }
        emit("peer", "heartbeats", &s);

        /* Link, pull blocks over the data connection, cancel, unlink. */
        script_init(&s, FUZZ_PEER_SETUP(true, 3, 1, false));
        msg_peer_link(&s, 3, 100, false);
        msg_peer_transfer_blocks(&s, 4, 42, true, false);
        wait_ms(&s, 2);
        {
                Kvdist__V1__PeerTransferCancel c = KVDIST__V1__PEER_TRANSFER_CANCEL__INIT;

                c.transfer_id = 42;
                frame(&s, MT(PEER_TRANSFER_CANCEL), 0, &c.base);
        }
        msg_peer_unlink(&s, 5, 100);
        emit("peer", "link-pull-unlink", &s);

        /* A pull that carries a notification: the source's cluster is told once our word (OK)
         * says every byte landed; then a second word, and one for a job never asked. */
        script_init(&s, FUZZ_PEER_SETUP(true, 3, 1, false));
        msg_peer_link(&s, 3, 100, false);
        msg_peer_transfer_notify(&s, 4, 44, true, false, "blocks 0 1 read");
        wait_ms(&s, 2);
        {
                Kvdist__V1__PeerRemoteDone r = KVDIST__V1__PEER_REMOTE_DONE__INIT;

                r.transfer_id = 44;
                frame(&s, MT(PEER_REMOTE_DONE), 0, &r.base);
                frame(&s, MT(PEER_REMOTE_DONE), 0, &r.base);
                r.transfer_id = 45;
                frame(&s, MT(PEER_REMOTE_DONE), 0, &r.base);
        }
        msg_peer_unlink(&s, 5, 100);
        emit("peer", "link-pull-notify", &s);

        /* Push into blocks: the bytes come as data-stream chunks, with CRCs. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 2, true));
        msg_peer_link(&s, 3, 100, false);
        msg_peer_transfer_blocks(&s, 4, 43, false, false);
        chunk(&s, 0, 1, 0, 0, data, 4096);
        chunk(&s, 0, 1, 0, 4096, data, 4096);
        {
                Kvdist__V1__PeerTransferDone d = KVDIST__V1__PEER_TRANSFER_DONE__INIT;
                Kvdist__V1__PeerRemoteDone r = KVDIST__V1__PEER_REMOTE_DONE__INIT;

                d.transfer_id = 43;
                frame(&s, MT(PEER_TRANSFER_DONE), 0, &d.base);
                r.transfer_id = 43;
                frame(&s, MT(PEER_REMOTE_DONE), 0, &r.base);
        }
        emit("peer", "link-push-chunks", &s);

        /* A pull of a contiguous cache by request key, then the peer's cluster goes away. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        msg_peer_link(&s, 3, 101, false);
        {
                Kvdist__V1__PeerTransfer m = KVDIST__V1__PEER_TRANSFER__INIT;
                Kvdist__V1__PlanCacheDesc local = KVDIST__V1__PLAN_CACHE_DESC__INIT;
                Kvdist__V1__ReqKey rk = KVDIST__V1__REQ_KEY__INIT;
                Kvdist__V1__CacheKey key = KVDIST__V1__CACHE_KEY__INIT;
                Kvdist__V1__PeerClusterGone g = KVDIST__V1__PEER_CLUSTER_GONE__INIT;
                uint64_t gone[] = {101, 7};

                rk.cluster_id = FUZZ_PEER_CLUSTER;
                rk.req_id = 2;
                rk.prefix_id = UINT64_MAX;
                rk.model_id = FUZZ_PEER_MODEL;
                key.kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
                key.req = &rk;
                local.num_tensors = 2;
                local.tensor_size = FUZZ_TENSOR_BYTES;
                local.units = FUZZ_BATCH_SLOTS;
                m.job_id = 44;
                m.kind = KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_CACHE;
                m.key = &key;
                m.local = &local;
                m.size = -1;
                m.timeout_ms = 1000;
                frame(&s, MT(PEER_TRANSFER), 4, &m.base);
                g.cluster_ids = gone;
                g.n_cluster_ids = 2;
                frame(&s, MT(PEER_CLUSTER_GONE), 0, &g.base);
        }
        emit("peer", "pull-cache-cluster-gone", &s);

        /* RDMA asked for where the daemon has no device. */
        script_init(&s, FUZZ_PEER_SETUP(true, 3, 1, false));
        msg_peer_link(&s, 3, 100, true);
        {
                Kvdist__V1__PeerChannelConnect m = KVDIST__V1__PEER_CHANNEL_CONNECT__INIT;
                /* As the RDMA transport packs them (daemon/transport/rdma-pack.c): device
                 * "rxe0", its GID, port 1, MTU 1024, LID 0; queue pair 17, PSN 5. */
                static uint8_t dev[] = {0x01, 4, 'r', 'x', 'e', '0', 0xfe, 0x80, 0, 0,
                                        0,    0, 0,   0,   0,   0,   0,    0,    0, 0,
                                        0,    1, 1,   0,   4,   0,   0,    0,    0};
                static uint8_t path[] = {0x02, 17, 0, 0, 0, 5, 0, 0, 0};

                m.channel_id = 1;
                m.n_slots = 1;
                m.remote_device = (char *)"mlx5_0";
                m.device.data = dev;
                m.device.len = sizeof(dev);
                m.path.data = path;
                m.path.len = sizeof(path);
                frame(&s, MT(PEER_CHANNEL_CONNECT), 4, &m.base);
        }
        msg_peer_transfer_blocks(&s, 5, 45, true, true);
        emit("peer", "rdma-without-device", &s);

        /* A comm domain between the local cluster and one of the peer's. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        {
                static const char table[] =
                        "{\"version\": \"1.0\", \"server_count\": \"2\", "
                        "\"status\": \"completed\", "
                        "\"server_list\": [{\"server_id\": \"here\", \"device\": [{\"device_id\": "
                        "\"0\", \"device_ip\": \"" FUZZ_PEER_SELF "\", \"rank_id\": \"0\"}]}, "
                        "{\"server_id\": \"there\", \"device\": [{\"device_id\": \"0\", "
                        "\"device_ip\": \"" FUZZ_PEER_ADDRESS "\", \"rank_id\": \"1\"}]}]}";
                Kvdist__V1__DomainLink dl = KVDIST__V1__DOMAIN_LINK__INIT;
                Kvdist__V1__ClusterRank cr[2] = {KVDIST__V1__CLUSTER_RANK__INIT,
                                                 KVDIST__V1__CLUSTER_RANK__INIT};
                Kvdist__V1__ClusterRank *crs[] = {&cr[0], &cr[1]};
                Kvdist__V1__PeerDomainJoin j = KVDIST__V1__PEER_DOMAIN_JOIN__INIT;
                Kvdist__V1__PeerDomainJoinReply jr = KVDIST__V1__PEER_DOMAIN_JOIN_REPLY__INIT;
                Kvdist__V1__PeerLinkReply lr = KVDIST__V1__PEER_LINK_REPLY__INIT;
                Kvdist__V1__SendRecvItem it = KVDIST__V1__SEND_RECV_ITEM__INIT, *its[] = {&it};
                Kvdist__V1__DomainSendRecv sr = KVDIST__V1__DOMAIN_SEND_RECV__INIT;
                Kvdist__V1__DomainMember dm[2] = {KVDIST__V1__DOMAIN_MEMBER__INIT,
                                                  KVDIST__V1__DOMAIN_MEMBER__INIT};
                Kvdist__V1__DomainMember *dms[] = {&dm[0], &dm[1]};
                Kvdist__V1__PeerDomainLinked ln = KVDIST__V1__PEER_DOMAIN_LINKED__INIT;
                Kvdist__V1__PeerDomainReady rd = KVDIST__V1__PEER_DOMAIN_READY__INIT;
                Kvdist__V1__PeerDomainXfer x = KVDIST__V1__PEER_DOMAIN_XFER__INIT;
                static uint8_t desc_bytes[40] = {0xfd, 0x10, 0x20, 0x30, 0x40, 0, 0,
                                                 0,    0,    0x00, 0x01, 0,    0, 0,
                                                 0,    0,    0,    0x01, 0x20};
                ProtobufCBinaryData descs[] = {{21, desc_bytes}, {0, NULL}, {40, desc_bytes}};
                Kvdist__V1__DomainOpDesc od = KVDIST__V1__DOMAIN_OP_DESC__INIT;
                Kvdist__V1__PeerDomainLeave lv = KVDIST__V1__PEER_DOMAIN_LEAVE__INIT;
                Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
                uint8_t digest[32] = {0};

                cr[0].cluster_id = FUZZ_PEER_CLUSTER;
                cr[1].cluster_id = 100;
                cr[1].rank_id = 1;
                dl.comm_name = (char *)"fuzz-peer-domain";
                dl.cluster_rank_info = crs;
                dl.n_cluster_rank_info = 2;
                dl.rank_table = (char *)table;
                endpoint(&s, FUZZ_PEER_EP_CLIENT, -1);
                frame(&s, MT(DOMAIN_LINK), 6, &dl.base);
                endpoint(&s, FUZZ_PEER_EP_PEER, -1);

                /* The daemon asks first (its first call on this connection); we answer. */
                jr.status = &st;
                jr.joined = true;
                jr.dst_domain_id = 77;
                frame_full(&s, MT(PEER_DOMAIN_JOIN), FRAME_FLAG_REPLY, 1, &jr.base, 0, 0, -1);
                /* Then links its cluster to ours (its second call). */
                lr.status = &st;
                lr.link_id = 500;
                lr.dst_role = KVDIST__V1__ROLE__ROLE_MIX;
                frame_full(&s, MT(PEER_LINK), FRAME_FLAG_REPLY, 2, &lr.base, 0, 0, -1);

                for (unsigned k = 0; k < 2; k++) {
                        dm[k].rank = k;
                        dm[k].cluster_id = cr[k].cluster_id;
                        dm[k].server_id = (char *)(k ? "there" : "here");
                        dm[k].address = (char *)(k ? FUZZ_PEER_ADDRESS : FUZZ_PEER_SELF);
                }
                j.comm_name = dl.comm_name;
                j.digest.data = digest;
                j.digest.len = sizeof(digest);
                j.members = dms;
                j.n_members = 2;
                j.src_rank = 1;
                j.dst_rank = 0;
                j.src_domain_id = 77;
                frame(&s, MT(PEER_DOMAIN_JOIN), 3, &j.base);
                msg_peer_link(&s, 4, 100, false);
                ln.src_domain_id = 77;
                ln.src_rank = 1;
                frame(&s, MT(PEER_DOMAIN_LINKED), 0, &ln.base);
                rd.src_domain_id = 77;
                rd.rank = 1;
                frame(&s, MT(PEER_DOMAIN_READY), 0, &rd.base);
                /* The local cluster receives 256 bytes from rank 1, which says READY's
                 * counterpart for a message the other way, then gives up. */
                it.recv = true;
                it.addr = FUZZ_REGION_ADDR;
                it.count = 256;
                it.dtype = 6;
                it.remote_rank = 1;
                sr.items = its;
                sr.n_items = 1;
                sr.timeout_ms = 50;
                endpoint(&s, FUZZ_PEER_EP_CLIENT, -1);
                frame(&s, MT(DOMAIN_SEND_RECV), 7, &sr.base);
                endpoint(&s, FUZZ_PEER_EP_PEER, -1);
                od.op = 1;
                od.bytes = 256;
                od.count = 256;
                od.dtype = 6;
                x.src_domain_id = 77;
                x.kind = 1;
                x.src_rank = 0;
                x.dst_rank = 1;
                x.desc = &od;
                frame(&s, MT(PEER_DOMAIN_XFER), 0, &x.base);
                x.kind = 4;
                frame(&s, MT(PEER_DOMAIN_XFER), 0, &x.base);
                /* A READY of a direct lane for a later message: one descriptor per segment, the
                 * transport's opaque bytes (an empty one for an empty segment, and one longer
                 * than any descriptor), kept until the message comes. */
                x.kind = 1;
                x.seq = 1;
                x.descs = descs;
                x.n_descs = ARRAY_SIZE(descs);
                frame(&s, MT(PEER_DOMAIN_XFER), 0, &x.base);
                x.descs = NULL;
                x.n_descs = 0;
                st.code = -1;
                lv.src_domain_id = 77;
                lv.rank = 1;
                lv.status = &st;
                frame(&s, MT(PEER_DOMAIN_LEAVE), 0, &lv.base);
        }
        emit("peer", "domain", &s);

        /* A second connection from the same daemon, then the first one goes. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        msg_peer_link(&s, 3, 100, false);
        endpoint(&s, 6, 3 | 4);
        msg_peer_link(&s, 3, 102, false);
        endpoint(&s, 0, -1);
        op(&s, FUZZ_OP_CLOSE, 0);
        endpoint(&s, 6, -1);
        msg_peer_transfer_blocks(&s, 4, 46, true, false);
        emit("peer", "second-connection", &s);

        /* What a peer connection must not carry: fds, unknown types, client requests, garbage
         * on a data connection. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        msg_empty(&s, 999, 3);
        msg_empty(&s, MT(TRANSFER), 4);
        msg_empty(&s, MT(PEER_HELLO), 5);
        chunk(&s, 0, 0x80, 1, 0, data, 16);
        frame_fds(&s, MT(PEER_HEARTBEAT), 6, NULL, 1, FUZZ_FD_MEMFD);
        emit("peer", "forbidden", &s);

        /* The peer reads neither its control nor its data connection for a while, during a
         * pull and heartbeats. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        msg_peer_link(&s, 3, 100, false);
        op(&s, FUZZ_OP_PAUSE, 0);
        endpoint(&s, 1, -1);
        op(&s, FUZZ_OP_PAUSE, 0);
        endpoint(&s, 0, -1);
        msg_peer_transfer_blocks(&s, 4, 48, true, false);
        {
                Kvdist__V1__PeerHeartbeat hb = KVDIST__V1__PEER_HEARTBEAT__INIT;

                for (unsigned k = 0; k < 32; k++) {
                        hb.seq = k;
                        frame(&s, MT(PEER_HEARTBEAT), (uint8_t)(5 + k), &hb.base);
                }
        }
        wait_ms(&s, 2);
        op(&s, FUZZ_OP_PAUSE, 0);
        endpoint(&s, 1, -1);
        op(&s, FUZZ_OP_PAUSE, 0);
        emit("peer", "unread-pull", &s);

        /* The peer stops reading while a pull runs, then its data connection goes. */
        script_init(&s, FUZZ_PEER_SETUP(false, 3, 1, false));
        msg_peer_link(&s, 3, 100, false);
        op(&s, FUZZ_OP_SHUT_RD, 0);
        msg_peer_transfer_blocks(&s, 4, 47, true, false);
        endpoint(&s, 1, -1);
        op(&s, FUZZ_OP_CLOSE, 0);
        emit("peer", "stop-reading-mid-pull", &s);
}

int main(int argc, char **argv)
{
        int first = 1;

        if (argc > 1 && strcmp(argv[1], "--check") == 0) {
                check = true;
                first = 2;
        }
        if (argc != first + 1) {
                fprintf(stderr, "usage: %s [--check] DIR\n", argv[0]);
                return EXIT_FAILURE;
        }
        out_dir = argv[first];
        if (!check) {
                char path[4096];

                for (unsigned k = 0; k < 2; k++) {
                        (void)snprintf(path, sizeof(path), "%s/%s", out_dir, k ? "peer" : "client");
                        if (mkdir(path, 0755) < 0 && errno != EEXIST) {
                                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                                return EXIT_FAILURE;
                        }
                }
        }
        client_seeds();
        peer_seeds();
        if (check) {
                if (n_differ > 0) {
                        fprintf(stderr, "%u of %u seeds differ: run fuzz-gen-corpus %s\n", n_differ,
                                n_seeds, out_dir);
                        return EXIT_FAILURE;
                }
                printf("%u seeds are current\n", n_seeds);
        } else
                printf("%u seeds written\n", n_seeds);
        return EXIT_SUCCESS;
}
