/* SPDX-License-Identifier: MIT */
/*
 * The RDMA transport's words to a peer, as bytes: to open a channel, a device's name, GID,
 * port, MTU and LID, and one queue pair's number and first PSN (PeerLink, PeerChannelConnect);
 * and the descriptor of memory a peer may read or write (links' caches, transfer replies, comm
 * domains' READYs). Packed into what the peer connection carries without reading it, and
 * unpacked from what a peer sent, which may be anything. All little endian:
 *
 *      device: u8 RDMA_PACK_DEVICE, u8 name length n (1..63), n bytes of name (no NUL),
 *              16 bytes GID, u8 port, u32 MTU in bytes (256..4096, a power of two), u16 LID
 *      path:   u8 RDMA_PACK_PATH, u32 QP number, u32 PSN (24 bits each)
 *      memory: u8 RDMA_PACK_DESC, u64 address, u64 length, u32 rkey
 *
 * Plain C, built with or without libibverbs.
 */
#include <errno.h>
#include <string.h>

#include "daemon/transport/rdma.h"

/* The first byte of each form: a path's bytes are never taken for a device's. */
#define RDMA_PACK_DEVICE 0x01
#define RDMA_PACK_PATH 0x02
#define RDMA_PACK_DESC 0x03

#define RDMA_PACK_DEVICE_FIXED (2 + RDMA_GID_SIZE + 1 + 4 + 2)
#define RDMA_PACK_PATH_SIZE (1 + 4 + 4)
#define RDMA_PACK_DESC_SIZE (1 + 8 + 8 + 4)
/* Queue pair numbers and PSNs have 24 bits. */
#define RDMA_PACK_24_MAX UINT32_C(0xffffff)

static void put_le(uint8_t *p, uint64_t v, size_t n)
{
        for (size_t k = 0; k < n; k++)
                p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t get_le(const uint8_t *p, size_t n)
{
        uint64_t v = 0;

        for (size_t k = 0; k < n; k++)
                v |= (uint64_t)p[k] << (8 * k);
        return v;
}

static bool rdma_pack_mtu_valid(uint32_t mtu)
{
        return mtu >= 256 && mtu <= 4096 && (mtu & (mtu - 1)) == 0;
}

int rdma_device_pack(const RdmaDeviceInfo *info, uint8_t *buf, size_t size)
{
        size_t n = strnlen(info->device, sizeof(info->device)), len;
        uint8_t *p = buf;

        if (n == 0 || n >= sizeof(info->device))
                return -EINVAL;
        len = RDMA_PACK_DEVICE_FIXED + n;
        if (size < len)
                return -ENOBUFS;
        *p++ = RDMA_PACK_DEVICE;
        *p++ = (uint8_t)n;
        memcpy(p, info->device, n);
        p += n;
        memcpy(p, info->address, RDMA_GID_SIZE);
        p += RDMA_GID_SIZE;
        *p++ = info->port;
        put_le(p, info->mtu, 4);
        p += 4;
        put_le(p, info->lid, 2);
        return (int)len;
}

int rdma_device_unpack(const uint8_t *buf, size_t len, RdmaDeviceInfo *ret)
{
        RdmaDeviceInfo info = {0};
        const uint8_t *p = buf;
        size_t n;

        if (len < RDMA_PACK_DEVICE_FIXED || p[0] != RDMA_PACK_DEVICE)
                return -EBADMSG;
        n = p[1];
        if (len != RDMA_PACK_DEVICE_FIXED + n)
                return -EBADMSG;
        p += 2;
        if (n == 0 || n >= sizeof(info.device) || memchr(p, '\0', n))
                return -EINVAL;
        memcpy(info.device, p, n);
        p += n;
        memcpy(info.address, p, RDMA_GID_SIZE);
        p += RDMA_GID_SIZE;
        info.port = *p++;
        info.mtu = (uint32_t)get_le(p, 4);
        p += 4;
        info.lid = (uint16_t)get_le(p, 2);
        if (!rdma_pack_mtu_valid(info.mtu))
                return -EINVAL;
        *ret = info;
        return 0;
}

int rdma_path_pack(const TransportPathInfo *info, uint8_t *buf, size_t size)
{
        if (info->qpn > RDMA_PACK_24_MAX || info->psn > RDMA_PACK_24_MAX)
                return -EINVAL;
        if (size < RDMA_PACK_PATH_SIZE)
                return -ENOBUFS;
        buf[0] = RDMA_PACK_PATH;
        put_le(buf + 1, info->qpn, 4);
        put_le(buf + 5, info->psn, 4);
        return RDMA_PACK_PATH_SIZE;
}

int rdma_path_unpack(const uint8_t *buf, size_t len, TransportPathInfo *ret)
{
        TransportPathInfo info;

        if (len != RDMA_PACK_PATH_SIZE || buf[0] != RDMA_PACK_PATH)
                return -EBADMSG;
        info.qpn = (uint32_t)get_le(buf + 1, 4);
        info.psn = (uint32_t)get_le(buf + 5, 4);
        if (info.qpn > RDMA_PACK_24_MAX || info.psn > RDMA_PACK_24_MAX)
                return -EINVAL;
        *ret = info;
        return 0;
}

int rdma_desc_pack(uint64_t addr, uint64_t len, uint32_t rkey, uint8_t *buf, size_t size)
{
        if (size < RDMA_PACK_DESC_SIZE)
                return -ENOBUFS;
        buf[0] = RDMA_PACK_DESC;
        put_le(buf + 1, addr, 8);
        put_le(buf + 9, len, 8);
        put_le(buf + 17, rkey, 4);
        return RDMA_PACK_DESC_SIZE;
}

int rdma_desc_unpack(const uint8_t *buf, size_t len, uint64_t *ret_addr, uint64_t *ret_len,
                     uint32_t *ret_rkey)
{
        uint64_t addr, n;

        if (len != RDMA_PACK_DESC_SIZE || buf[0] != RDMA_PACK_DESC)
                return -EBADMSG;
        addr = get_le(buf + 1, 8);
        n = get_le(buf + 9, 8);
        if (n > UINT64_MAX - addr) /* a span that wraps names no memory */
                return -EBADMSG;
        *ret_addr = addr;
        *ret_len = n;
        *ret_rkey = (uint32_t)get_le(buf + 17, 4);
        return 0;
}
