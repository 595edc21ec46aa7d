/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the peer protocol: the daemon's peer connection code (daemon/link) and what a
 * READY peer may ask of it (links, transfers, data-stream chunks, heartbeats, comm-domain
 * messages, unlinks), fed by a scripted peer daemon (fuzz-script.h) on socketpairs. The
 * handshake runs with or without the cluster key, computing the proofs the way
 * daemon/link/peer-auth.h documents them (and checking the daemon's). fuzz-peer.h says what is
 * set up before the script. Built for libFuzzer, or with fuzz-main.c to replay a corpus.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "daemon/daemon.h"
#include "tests/fuzz/fuzz-daemon.h"
#include "tests/fuzz/fuzz-messages.h"
#include "tests/fuzz/fuzz-peer.h"
#include "common/hmac.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/link/peer-auth.h"
#include "daemon/link/peer.h"
#include "daemon/transport/tcp-stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the daemon handed out so far in this run, for the fill-ins of fuzz-peer.h. */
static struct {
        bool key;
        uint64_t link_id;
        uint64_t job_id;
        uint64_t domain_id;
        uint64_t comm_id;   /* of the local cluster's last DomainLinkReply */
        uint8_t digest[32]; /* of the daemon's last PeerDomainJoin */
        uint8_t token[PEER_DATA_TOKEN_SIZE];
        bool ready[FUZZ_ENDPOINTS_MAX];
} pf;

static char *key_path;

static void put_le64(uint8_t *p, uint64_t v)
{
        for (unsigned k = 0; k < 8; k++)
                p[k] = (uint8_t)(v >> (8 * k));
}

/* A proof as peer-auth.h defines it, computed here from that text, not with peer-auth.c. */
static void peer_proof(uint8_t role, uint64_t prover, uint64_t verifier,
                       const uint8_t *prover_nonce, const uint8_t *verifier_nonce,
                       uint8_t out[PEER_AUTH_MAC_SIZE])
{
        HmacSha256 h;
        uint8_t id[8];

        hmac_sha256_init(&h, FUZZ_PEER_KEY, strlen(FUZZ_PEER_KEY));
        hmac_sha256_update(&h, PEER_AUTH_CONTEXT, strlen(PEER_AUTH_CONTEXT));
        hmac_sha256_update(&h, &role, 1);
        put_le64(id, prover);
        hmac_sha256_update(&h, id, sizeof(id));
        put_le64(id, verifier);
        hmac_sha256_update(&h, id, sizeof(id));
        hmac_sha256_update(&h, prover_nonce, PEER_AUTH_NONCE_SIZE);
        hmac_sha256_update(&h, verifier_nonce, PEER_AUTH_NONCE_SIZE);
        hmac_sha256_final(&h, out);
}

static void peer_tweak(Config *c)
{
        free(c->listen_ip_info);
        c->listen_ip_info = strdup("127.0.0.1:0");
        FUZZ_CHECK(c->listen_ip_info);
        if (pf.key) {
                c->cluster_key_file = strdup(key_path);
                FUZZ_CHECK(c->cluster_key_file);
        }
}

/*
 * The dialer's side of the handshake on endpoint @i (a peer connection) up to @stage, its data
 * connections in free endpoints from @data_from on. Whether it got that far.
 */
static bool peer_start(FuzzDaemon *f, unsigned i, unsigned stage, uint64_t node_id,
                       unsigned streams, bool crc, unsigned data_from)
{
        Kvdist__V1__PeerHello hello = KVDIST__V1__PEER_HELLO__INIT;
        Kvdist__V1__PeerAuth auth = KVDIST__V1__PEER_AUTH__INIT;
        Kvdist__V1__PeerHelloReply *hr;
        Kvdist__V1__PeerAuthReply *ar;
        uint8_t nonce[PEER_AUTH_NONCE_SIZE];
        uint8_t proof[PEER_AUTH_MAC_SIZE], expected[PEER_AUTH_MAC_SIZE];
        unsigned n;

        if (stage == 0)
                return true;
        for (unsigned k = 0; k < sizeof(nonce); k++)
                nonce[k] = (uint8_t)(k * 7 + i);
        hello.protocol_version = PEER_PROTOCOL_VERSION;
        hello.node_id = node_id;
        hello.identity = (char *)"kvdistd/fuzz";
        hello.nonce.data = nonce;
        hello.nonce.len = sizeof(nonce);
        hello.has_key = pf.key;
        hello.listen_ip_info = (char *)FUZZ_PEER_ADDRESS;
        hello.data_conns = streams;
        hello.crc = crc;
        hello.chunk_size = 64u << 10;
        hello.max_frame_size = f->daemon->config->limits.max_frame_size;
        if (!fuzz_send_request(f, i, KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO, 1, &hello.base, -1))
                return false;
        hr = (Kvdist__V1__PeerHelloReply *)fuzz_expect_reply(f, i,
                                                             KVDIST__V1__MSG_TYPE__MSG_PEER_HELLO);
        if (!hr || !fuzz_reply_ok(&hr->base) || !hr->hello ||
            hr->hello->nonce.len != PEER_AUTH_NONCE_SIZE) {
                if (hr)
                        protobuf_c_message_free_unpacked(&hr->base, NULL);
                return false;
        }
        if (pf.key) {
                /* The daemon proves the key as peer-auth.h says, or the peers do not agree. */
                peer_proof(PEER_AUTH_ROLE_BYTE_LISTENER, hr->hello->node_id, node_id,
                           hr->hello->nonce.data, nonce, expected);
                FUZZ_CHECK(hr->proof.len == sizeof(expected));
                FUZZ_CHECK(memcmp(hr->proof.data, expected, sizeof(expected)) == 0);
                peer_proof(PEER_AUTH_ROLE_BYTE_DIALER, node_id, hr->hello->node_id, nonce,
                           hr->hello->nonce.data, proof);
                auth.proof.data = proof;
                auth.proof.len = sizeof(proof);
        } else
                FUZZ_CHECK(hr->proof.len == 0);
        protobuf_c_message_free_unpacked(&hr->base, NULL);
        if (stage == 1)
                return true;

        if (!fuzz_send_request(f, i, KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH, 2, &auth.base, -1))
                return false;
        ar = (Kvdist__V1__PeerAuthReply *)fuzz_expect_reply(f, i,
                                                            KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH);
        if (!ar || !fuzz_reply_ok(&ar->base)) {
                if (ar)
                        protobuf_c_message_free_unpacked(&ar->base, NULL);
                return false;
        }
        n = ar->data_conns;
        FUZZ_CHECK(n >= 1 && n <= streams);
        protobuf_c_message_free_unpacked(&ar->base, NULL);
        if (stage == 2)
                return true;

        pf.ready[i] = false;
        for (unsigned k = 0; k < n; k++) {
                Kvdist__V1__PeerDataHello dh = KVDIST__V1__PEER_DATA_HELLO__INIT;
                unsigned slot = fuzz_endpoint_free_slot(f, data_from);

                fuzz_endpoint_peer(f, slot, false);
                dh.data_token.data = pf.token;
                dh.data_token.len = sizeof(pf.token);
                dh.index = k;
                if (!fuzz_send_request(f, slot, KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO, 0,
                                       &dh.base, -1))
                        return false;
        }
        fuzz_settle(f);
        return pf.ready[i];
}

/* A request of the local cluster that must succeed. */
static void local_request(FuzzDaemon *f, uint16_t type, uint64_t id, const ProtobufCMessage *m,
                          int fd)
{
        FUZZ_CHECK(fuzz_request_ok(f, FUZZ_PEER_EP_CLIENT, type, id, m, fd));
}

/* The local cluster of fuzz-peer.h, its region and its caches. */
static void local_cluster(FuzzDaemon *f)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        Kvdist__V1__ClientInit init = KVDIST__V1__CLIENT_INIT__INIT;
        Kvdist__V1__RegionAdd region = KVDIST__V1__REGION_ADD__INIT;
        FuzzBlocksCache blocks;
        FuzzContiguousCache contig;
        int fd;

        fuzz_endpoint_client(f, FUZZ_PEER_EP_CLIENT);
        hello.protocol_version = FRAME_VERSION;
        local_request(f, KVDIST__V1__MSG_TYPE__MSG_HELLO, 1, &hello.base, -1);
        init.cluster_id = FUZZ_PEER_CLUSTER;
        init.role = KVDIST__V1__ROLE__ROLE_MIX;
        init.listen_ip_info = (char *)FUZZ_LISTEN;
        local_request(f, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, 2, &init.base, -1);

        fd = memfd_create("kvdist-fuzz-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        FUZZ_CHECK(fd >= 0);
        FUZZ_CHECK(ftruncate(fd, FUZZ_MEMFD_SIZE) == 0);
        FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
        region.size = FUZZ_MEMFD_SIZE;
        region.client_addr = FUZZ_REGION_ADDR;
        local_request(f, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, 3, &region.base, fd);
        close(fd);

        fuzz_blocks_cache_init(&blocks, FUZZ_PEER_CLUSTER, FUZZ_PEER_MODEL);
        local_request(f, KVDIST__V1__MSG_TYPE__MSG_REGISTER_CACHE, 4, &blocks.msg.base, -1);
        fuzz_contiguous_cache_init(&contig, FUZZ_PEER_CLUSTER, FUZZ_PEER_MODEL);
        local_request(f, KVDIST__V1__MSG_TYPE__MSG_REGISTER_CACHE, 5, &contig.msg.base, -1);
}

static void peer_open_endpoint(FuzzDaemon *f, unsigned i, uint8_t mode)
{
        uint64_t node = (mode & 4) ? FUZZ_PEER_NODE_ID : FUZZ_PEER_NODE_ID + i;

        fuzz_endpoint_peer(f, i, true);
        /* Its data connections are no endpoint a script names; they are only read. */
        (void)peer_start(f, i, mode & 3, node, FUZZ_PEER_SETUP_STREAMS(mode), false,
                         FUZZ_MAX_ENDPOINTS);
}

static void peer_on_frame(FuzzDaemon *f, unsigned i, const FrameHeader *h,
                          const ProtobufCMessage *msg)
{
        bool reply = h->flags & FRAME_FLAG_REPLY, ok;

        if (!msg || (h->flags & FRAME_FLAG_ERROR))
                return;
        ok = reply && fuzz_reply_ok(msg);
        switch (h->type) {
        case KVDIST__V1__MSG_TYPE__MSG_PEER_READY:
                pf.ready[i] = !reply;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_AUTH:
                if (ok && ((const Kvdist__V1__PeerAuthReply *)msg)->data_token.len ==
                                  PEER_DATA_TOKEN_SIZE)
                        memcpy(pf.token, ((const Kvdist__V1__PeerAuthReply *)msg)->data_token.data,
                               PEER_DATA_TOKEN_SIZE);
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_LINK:
                if (ok)
                        pf.link_id = ((const Kvdist__V1__PeerLinkReply *)msg)->link_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_LINK:
                if (ok)
                        pf.comm_id = ((const Kvdist__V1__DomainLinkReply *)msg)->comm_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER:
                if (ok)
                        pf.job_id = ((const Kvdist__V1__PeerTransferReply *)msg)->job_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN:
                if (ok) {
                        const Kvdist__V1__PeerDomainJoinReply *jr = (const void *)msg;

                        if (jr->dst_domain_id)
                                pf.domain_id = jr->dst_domain_id;
                } else if (!reply) {
                        const Kvdist__V1__PeerDomainJoin *j = (const void *)msg;

                        pf.domain_id = j->src_domain_id;
                        if (j->digest.len == sizeof(pf.digest))
                                memcpy(pf.digest, j->digest.data, sizeof(pf.digest));
                }
                break;
        default:
                break;
        }
}

/* Replaces @from with @to in the malloc()ed string *@s; whether it did. */
static bool replace_string(char **s, const char *from, const char *to)
{
        char *at = *s ? strstr(*s, from) : NULL, *n;

        if (!at)
                return false;
        FUZZ_CHECK(asprintf(&n, "%.*s%s%s", (int)(at - *s), *s, to, at + strlen(from)) >= 0);
        free(*s);
        *s = n;
        return true;
}

static bool peer_fixup(FuzzDaemon *f, uint16_t type, ProtobufCMessage *msg)
{
        static const uint8_t zeros[PEER_DATA_TOKEN_SIZE];
        Kvdist__V1__PeerDataHello *dh;
        Kvdist__V1__PeerDomainJoin *j;
        uint64_t *domain = NULL, *link = NULL;
        bool changed = false;

        switch (type) {
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DATA_HELLO:
                /* The connection carries a data stream from here on (or the daemon closes it). */
                f->ep[f->cur].frames = false;
                dh = (Kvdist__V1__PeerDataHello *)msg;
                if (dh->data_token.len != PEER_DATA_TOKEN_SIZE ||
                    memcmp(dh->data_token.data, zeros, sizeof(zeros)) != 0)
                        return false;
                memcpy(dh->data_token.data, pf.token, PEER_DATA_TOKEN_SIZE);
                return true;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER:
                link = &((Kvdist__V1__PeerTransfer *)msg)->link_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_UNLINK:
                link = &((Kvdist__V1__PeerUnlink *)msg)->link_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LINKED:
                domain = &((Kvdist__V1__PeerDomainLinked *)msg)->dst_domain_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_READY:
                domain = &((Kvdist__V1__PeerDomainReady *)msg)->dst_domain_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_LEAVE:
                domain = &((Kvdist__V1__PeerDomainLeave *)msg)->dst_domain_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_XFER:
                domain = &((Kvdist__V1__PeerDomainXfer *)msg)->dst_domain_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_PEER_DOMAIN_JOIN:
                j = (Kvdist__V1__PeerDomainJoin *)msg;
                for (size_t k = 0; k < j->n_members; k++)
                        changed |= replace_string(&j->members[k]->address, FUZZ_PEER_SELF,
                                                  daemon_peer_address(f->daemon));
                if (j->digest.len == sizeof(pf.digest) &&
                    memcmp(j->digest.data, zeros, sizeof(pf.digest)) == 0) {
                        memcpy(j->digest.data, pf.digest, sizeof(pf.digest));
                        changed = true;
                }
                return changed;
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_SEND_RECV:
                if (((Kvdist__V1__DomainSendRecv *)msg)->comm_id != 0 || !pf.comm_id)
                        return false;
                ((Kvdist__V1__DomainSendRecv *)msg)->comm_id = pf.comm_id;
                return true;
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_LINK:
                while (replace_string(&((Kvdist__V1__DomainLink *)msg)->rank_table, FUZZ_PEER_SELF,
                                      daemon_peer_address(f->daemon)))
                        changed = true;
                return changed;
        default:
                return false;
        }
        if (link && *link == 0 && pf.link_id) {
                *link = pf.link_id;
                return true;
        }
        if (domain && *domain == 0 && pf.domain_id) {
                *domain = pf.domain_id;
                return true;
        }
        return false;
}

/* FUZZ_OP_CHUNK: u8 flags, u64 job id, u32 offset, u16 length, payload. */
static size_t peer_chunk(FuzzDaemon *f, uint8_t arg, const uint8_t *data, size_t size)
{
        const uint8_t *start = data;
        uint8_t flags, hdr[TCP_STREAM_HEADER_SIZE], *buf;
        unsigned i = 1 + arg % 4;
        uint64_t job;
        uint32_t offset, crc;
        uint16_t len;

        if (!fuzz_u8(&data, &size, &flags) || !fuzz_u64(&data, &size, &job) ||
            !fuzz_u32(&data, &size, &offset) || !fuzz_u16(&data, &size, &len) || size < len)
                return 0;
        if (job == 0)
                job = pf.job_id;
        crc = (flags & TCP_STREAM_FLAG_CRC) ? crc32c(0, data, len) : 0;
        for (unsigned k = 0; k < 4; k++) {
                hdr[k] = (uint8_t)(TCP_STREAM_MAGIC >> (8 * k));
                hdr[4 + k] = k == 0 ? flags : 0;
                hdr[24 + k] = (uint8_t)((uint32_t)len >> (8 * k));
                hdr[28 + k] = (uint8_t)(crc >> (8 * k));
        }
        put_le64(hdr + 8, job);
        put_le64(hdr + 16, offset);
        buf = malloc(sizeof(hdr) + len);
        FUZZ_CHECK(buf);
        memcpy(buf, hdr, sizeof(hdr));
        memcpy(buf + sizeof(hdr), data, len);
        /* Only a data connection takes chunks. */
        if (f->ep[i].opened && !f->ep[i].frames)
                fuzz_send_raw(f, i, buf, sizeof(hdr) + len);
        free(buf);
        return (size_t)(data - start) + len;
}

static const FuzzTarget peer_target = {
        .open_endpoint = peer_open_endpoint,
        .on_frame = peer_on_frame,
        .fixup = peer_fixup,
        .chunk = peer_chunk,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        uint8_t setup;
        FuzzDaemon *f;

        if (size == 0)
                return 0;
        fuzz_init();
        if (!key_path) {
                int fd;

                key_path = fuzz_private_path("cluster.key");
                fd = open(key_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                FUZZ_CHECK(fd >= 0);
                FUZZ_CHECK(write(fd, FUZZ_PEER_KEY, strlen(FUZZ_PEER_KEY)) ==
                           (ssize_t)strlen(FUZZ_PEER_KEY));
                close(fd);
        }
        setup = data[0];
        memset(&pf, 0, sizeof(pf));
        pf.key = setup & FUZZ_PEER_SETUP_KEY;
        f = fuzz_daemon_new(&peer_target, peer_tweak);
        local_cluster(f);
        fuzz_endpoint_peer(f, FUZZ_PEER_EP_PEER, true);
        if (!peer_start(f, FUZZ_PEER_EP_PEER, FUZZ_PEER_SETUP_STAGE(setup), FUZZ_PEER_NODE_ID,
                        FUZZ_PEER_SETUP_STREAMS(setup), setup & FUZZ_PEER_SETUP_CRC, 1)) {
                fprintf(stderr, "fuzz-peer: the handshake stopped short of stage %u\n",
                        FUZZ_PEER_SETUP_STAGE(setup));
                abort();
        }
        fuzz_run_script(f, data + 1, size - 1);
        fuzz_daemon_free(f);
        return 0;
}
