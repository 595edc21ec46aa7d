/* SPDX-License-Identifier: MIT */
/*
 * Rank table: the JSON document (HCCL's "1.0" or "1.2" form, as LLM-DataDist's link() takes it)
 * that names every member of a comm domain by server, device and rank, and the local_comm_res
 * fragment a cluster may describe its own device with at init. The only jansson user besides
 * config.c and status.c; everything past it sees plain structs.
 *
 *   { "version": "1.0", "server_count": "2", "status": "completed",
 *     "server_list": [ { "server_id": "node-a",
 *                        "device": [ { "device_id": "0", "device_ip": "10.0.0.1",
 *                                      "rank_id": "0" } ] }, ... ] }
 *
 * kvdist reaches a member through the kvdistd of its server: the member's address is a peer
 * address of that kvdistd ("ip" means port RANK_TABLE_DEFAULT_PORT, "ip:port" or "[v6]:port"
 * name one). In the "1.0" form it is the device's device_ip: the kvdistd's listen_ip_info, which
 * every device of the server then shares, or the device's own address (the config's
 * devices[].address, HCCL's meaning of device_ip), on which the kvdistd that owns the device
 * listens too; the devices of one server may so have different device_ips. The "1.2" form adds
 * a server's "host_ip" (HCCL: the server's host address): when given it names the server's
 * kvdistd and each device_ip is then the device's own NIC address (optional; kvdistd checks it
 * against the device's configured address, when there is one, and does not dial it). The other
 * "1.2" keys (a device's super_device_id, device_port, backup_device_ip, backup_device_port,
 * host_port; the table's super_pod_list) are checked for their form and otherwise ignored: kvdist
 * has no super pods and its own ports.
 *
 * Numbers may be written as strings (HCCL's way) or as JSON integers. The parser is strict: an
 * unknown key (a "1.2" key in a "1.0" table among them), a missing one, a wrong type, a value
 * out of range or a duplicate fails with a message that names the path
 * ("server_list[1].device[0].rank_id: 4 is not below the 2 devices listed").
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/sockaddr-util.h"

/* Members of a comm domain (LLM-DataDist: at most 4). */
#define RANK_TABLE_MAX_RANKS 4
/* The peer port a device_ip without one means. */
#define RANK_TABLE_DEFAULT_PORT 7400
/* server_id: 1..63 characters. */
#define RANK_TABLE_ID_MAX 64
/* "1.2": super_pod_id, 1..127 characters (HCCL's logical super pod ids are under 128). */
#define RANK_TABLE_POD_ID_MAX 128
/* A rank table larger than this is refused before it is parsed. */
#define RANK_TABLE_MAX_BYTES (64u * 1024u)

typedef struct RankDevice {
        uint32_t rank;
        int32_t device_id;
        char address[SOCKADDR_STR_MAX];   /* the member's kvdistd, canonical "ip:port" */
        const char *address_key;          /* the key that gave it, for messages: "device_ip",
                                           * "host_ip" (a static string) */
        char device_ip[SOCKADDR_STR_MAX]; /* the device_ip as given, canonical; "" when none */
        char server_id[RANK_TABLE_ID_MAX];
} RankDevice;

typedef struct RankTable {
        unsigned n_servers;
        unsigned n_ranks;
        RankDevice ranks[RANK_TABLE_MAX_RANKS]; /* indexed by rank: ranks[r].rank == r */
} RankTable;

/*
 * Parses and checks @json (NUL-terminated) into @ret. Returns 0, or STATUS_PARAM_INVALID with
 * @err saying what is wrong and where ("rank_table: ..."), STATUS_OUT_OF_MEMORY.
 */
int rank_table_parse(const char *json, RankTable *ret, Error *err);

/*
 * Parses a local_comm_res fragment: one server with one device, no rank_id; "server_count" may
 * be given and must then be 1, "version" ("1.0" when left out) as in a table. Returns as
 * rank_table_parse() ("local_comm_res: ...").
 */
int rank_table_parse_fragment(const char *json, RankDevice *ret, Error *err);

/*
 * Parses a member address (a device_ip or host_ip: "ip", "ip:port", "[v6]:port") into the canonical
 * "ip:port" form in @buf (SOCKADDR_STR_MAX bytes). -EINVAL when it is not a numeric address.
 */
int rank_table_parse_address(const char *s, char *buf, size_t size);

/* Whether the addresses @a and @b ("ip:port", canonical or not) have the same IP, whatever
 * their ports. False when either does not parse. */
bool rank_table_same_ip(const char *a, const char *b);
