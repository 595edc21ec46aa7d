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
        FRAME_TYPE(PEER_RDMA_CONNECT, peer_rdma_connect, "PeerRdmaConnect"),
        FRAME_TYPE(PEER_RDMA_DONE, peer_rdma_done, "PeerRdmaDone"),
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

int frame_pack(uint16_t type, uint16_t flags, uint64_t request_id, uint16_t n_fds,
               const ProtobufCMessage *msg, uint32_t max_payload, uint8_t **ret_buf,
               size_t *ret_len)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t size = 0;

        /* A frame the peer's frame_header_decode() would reject is a bug here, not there. */
        if (flags & ~(uint16_t)_FRAME_FLAGS_KNOWN || n_fds > FRAME_MAX_FDS)
                return -EINVAL;

        if (msg)
                size = protobuf_c_message_get_packed_size(msg);
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
                size_t packed = protobuf_c_message_pack(msg, buf + FRAME_HEADER_SIZE);

                assert(packed == size);
                (void)packed;
        }

        *ret_buf = TAKE_PTR(buf);
        *ret_len = FRAME_HEADER_SIZE + size;
        return 0;
}

int frame_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                 ProtobufCMessage **ret)
{
        ProtobufCMessage *msg;

        assert(desc);

        msg = protobuf_c_message_unpack(desc, NULL, len, data);
        if (!msg)
                return -EBADMSG;

        *ret = msg;
        return 0;
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
