/* SPDX-License-Identifier: MIT */
/*
 * Transport config: the parts of the daemon's configuration that say how bytes move, as the
 * transports read them: the device map (which RDMA device and transport a client's device_id
 * uses), the TCP data plane's terms and the RDMA queue pairs. The daemon's Config embeds these
 * structs; the transports and the link layer keep pointers to them.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum TransportKind {
        TRANSPORT_KIND_AUTO,
        TRANSPORT_KIND_TCP,
        TRANSPORT_KIND_RDMA,
        TRANSPORT_KIND_NULL,
        _TRANSPORT_KIND_MAX,
        _TRANSPORT_KIND_INVALID = -22,
} TransportKind;

/* One entry of "devices": which NIC / RDMA device a client's device_id uses, and the address
 * that names the device to peers. */
typedef struct DeviceConfig {
        int32_t device_id;
        char *rdma_device; /* "mlx5_0", NULL = none */
        uint8_t port;      /* RDMA port, default 1 */
        int gid_index;     /* -1 = choose the RoCE v2 IPv4 GID */
        char *netdev;      /* "eth0", NULL = any */
        TransportKind transport;
        char *address; /* the device's own peer address, canonical "ip:port" (HCCL's device_ip):
                        * the daemon listens there for peers; NULL = none */
} DeviceConfig;

/* The TCP data transport between daemons ("tcp" object). */
typedef struct TcpConfig {
        uint32_t streams;    /* data connections per peer (the smaller offer wins) */
        bool crc;            /* CRC32C over every chunk (either side asking wins) */
        uint32_t chunk_size; /* bytes per chunk header */
} TcpConfig;

/* The RDMA transport between daemons ("rdma" object). */
typedef struct RdmaConfig {
        uint32_t qps; /* RC queue pairs per peer device pair */
} RdmaConfig;

/* The entry of the @n_devices long device map @devices for @device_id; NULL when none names it. */
const DeviceConfig *transport_config_find_device(const DeviceConfig *devices, size_t n_devices,
                                                 int32_t device_id);

/* The entry of the device map whose address is @address (canonical "ip:port"), or NULL. */
const DeviceConfig *transport_config_find_address(const DeviceConfig *devices, size_t n_devices,
                                                  const char *address);

/* "auto", "tcp", "rdma"; NULL for a value out of range. */
const char *transport_kind_to_string(TransportKind k);

/* The TransportKind named @s ("auto", "tcp", "rdma", "null"), or _TRANSPORT_KIND_INVALID. */
TransportKind transport_kind_from_string(const char *s);

/* Every kind's name, quoted and separated by ", " ("\"auto\", \"tcp\", ..."), in @buf; @buf. */
char *transport_kind_names(char *buf, size_t size);
