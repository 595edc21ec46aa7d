/* SPDX-License-Identifier: MIT */
/*
 * What the peer-protocol fuzz target (fuzz-peer.c) sets up before a script runs, shared with the
 * seed generator: the values a seed needs to name what exists.
 *
 * The daemon listens for peers on 127.0.0.1 (port 0) and, with setup bit FUZZ_PEER_SETUP_KEY,
 * holds FUZZ_PEER_KEY as its cluster key. Endpoint FUZZ_PEER_EP_CLIENT is a client connection of
 * cluster FUZZ_PEER_CLUSTER (a server: listen_ip_info FUZZ_LISTEN) with the region and the two
 * caches of fuzz-messages.h (model FUZZ_PEER_MODEL). Endpoint FUZZ_PEER_EP_PEER is the control
 * connection of a peer daemon (node FUZZ_PEER_NODE_ID, listening at FUZZ_PEER_ADDRESS) that
 * dialed us, taken through the handshake as far as the setup byte says; its data connections
 * are endpoints 1, 2, ...
 *
 * Setup byte: bit 0 key; bits 1-2 stage (0 nothing sent, 1 Hello answered, 2 PeerAuth answered,
 * 3 data connections attached and PeerReady received); bits 3-4 data connections offered - 1;
 * bit 5 CRC asked for. FUZZ_OP_ENDPOINT opens another peer connection with its mode byte:
 * bits 0-1 stage, bit 2 the node id of endpoint 0 (else a node of its own), bits 3-4 data
 * connections offered - 1.
 *
 * Fill-ins (so that a seed can name what the daemon handed out at run time): in a request, a
 * link_id of 0 is the last PeerLinkReply's, a DomainSendRecv comm_id of 0 the last
 * DomainLinkReply's, a dst_domain_id of 0 the last domain id the daemon gave (PeerDomainJoinReply
 * or its own PeerDomainJoin), a PeerDomainJoin digest of zeros the one of the daemon's last
 * PeerDomainJoin, a PeerDataHello token of zeros the agreed one, and FUZZ_PEER_SELF in a
 * DomainLink's rank table or a PeerDomainJoin's member addresses the daemon's peer address.
 * FUZZ_OP_CHUNK sends a data-stream chunk on endpoint 1 + A % 4 when that is a data connection
 * (one the set-up attached, or one that sent PeerDataHello); job id 0 is the last
 * PeerTransferReply's.
 */
#pragma once

#include <stdint.h>

#define FUZZ_PEER_SETUP_KEY 0x01
#define FUZZ_PEER_SETUP_STAGE(s) (((s) >> 1) & 3)
#define FUZZ_PEER_SETUP_STREAMS(s) ((((s) >> 3) & 3) + 1)
#define FUZZ_PEER_SETUP_CRC 0x20
#define FUZZ_PEER_SETUP(key, stage, streams, crc)                                                  \
        ((uint8_t)(((key) ? FUZZ_PEER_SETUP_KEY : 0) | ((stage) << 1) | (((streams)-1) << 3) |     \
                   ((crc) ? FUZZ_PEER_SETUP_CRC : 0)))

#define FUZZ_PEER_EP_PEER 0
#define FUZZ_PEER_EP_CLIENT 5

#define FUZZ_PEER_KEY "kvdist fuzz cluster key, not a secret"
#define FUZZ_PEER_NODE_ID UINT64_C(0x6b76642d66757a7a)
#define FUZZ_PEER_ADDRESS "127.0.0.2:7000"
#define FUZZ_PEER_SELF "127.0.0.1:1"
#define FUZZ_PEER_CLUSTER 7
#define FUZZ_PEER_MODEL 1
