/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the client protocol as the daemon's socket sees it: the daemon's connection,
 * dispatch and handler code (daemon/control) serve scripted clients (fuzz-script.h) on
 * socketpairs: frames of any type with fds of any kind, partial frames, shutdowns, closes,
 * several connections at once. The setup byte says how connection 0 starts: (setup % 3) 0 with
 * nothing sent, 1 after Hello, 2 after Hello and ClientInit as cluster 1 (mix role, device 0,
 * listen_ip_info FUZZ_LISTEN: a server, which other clusters may link to). FUZZ_OP_ENDPOINT
 * opens connection i the same way, its mode byte instead of the setup byte, as cluster i + 1 on
 * device i.
 *
 * Fill-ins, so that a seed can name what the daemon handed out at run time: in a request, a
 * region_id, cache_id, local_cache_id or comm_id of 0 is the last one the daemon gave on that
 * connection (RegionAddReply, RegisterCacheReply or AllocateCacheReply, DomainLinkReply).
 * Built for libFuzzer, or with fuzz-main.c to replay a corpus.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz-daemon.h"
#include "proto/kvdist.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the daemon handed out on each connection in this run, for the fill-ins. */
static struct {
        uint64_t region_id;
        uint64_t cache_id;
        uint64_t comm_id;
} learned[FUZZ_ENDPOINTS_MAX];

/* Hello, then (@mode 2) ClientInit as cluster i + 1 on device i on endpoint @i; whether each
 * was answered OK. */
static bool client_start(FuzzDaemon *f, unsigned i, unsigned mode)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        Kvdist__V1__ClientInit init = KVDIST__V1__CLIENT_INIT__INIT;

        if (mode == 0)
                return true;
        hello.protocol_version = FRAME_VERSION;
        hello.identity = (char *)"kvdist-fuzz";
        if (!fuzz_request_ok(f, i, KVDIST__V1__MSG_TYPE__MSG_HELLO, 1, &hello.base, -1))
                return false;
        if (mode == 1)
                return true;
        init.cluster_id = i + 1;
        init.role = KVDIST__V1__ROLE__ROLE_MIX;
        init.device_id = (int32_t)i;
        init.listen_ip_info = (char *)FUZZ_LISTEN;
        return fuzz_request_ok(f, i, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, 2, &init.base, -1);
}

static void client_open_endpoint(FuzzDaemon *f, unsigned i, uint8_t mode)
{
        fuzz_endpoint_client(f, i);
        /* The script may have taken the cluster id already: then the connection stays READY. */
        (void)client_start(f, i, mode % 3);
}

static void client_on_frame(FuzzDaemon *f, unsigned i, const FrameHeader *h,
                            const ProtobufCMessage *msg)
{
        if (!msg || (h->flags & FRAME_FLAG_ERROR) || !(h->flags & FRAME_FLAG_REPLY) ||
            !fuzz_reply_ok(msg))
                return;
        switch (h->type) {
        case KVDIST__V1__MSG_TYPE__MSG_REGION_ADD:
                learned[i].region_id = ((const Kvdist__V1__RegionAddReply *)msg)->region_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_REGISTER_CACHE:
                learned[i].cache_id = ((const Kvdist__V1__RegisterCacheReply *)msg)->cache_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_ALLOCATE_CACHE:
                learned[i].cache_id = ((const Kvdist__V1__AllocateCacheReply *)msg)->cache_id;
                break;
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_LINK:
                learned[i].comm_id = ((const Kvdist__V1__DomainLinkReply *)msg)->comm_id;
                break;
        default:
                break;
        }
}

/* Sets *@field to @value when it is 0 and @value is not; whether it did. */
static bool fill_in(uint64_t *field, uint64_t value)
{
        if (*field != 0 || value == 0)
                return false;
        *field = value;
        return true;
}

static bool client_fixup(FuzzDaemon *f, uint16_t type, ProtobufCMessage *msg)
{
        const typeof(learned[0]) *l = &learned[f->cur];
        bool a, b;

        switch (type) {
        case KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE:
                return fill_in(&((Kvdist__V1__RegionRemove *)msg)->region_id, l->region_id);
        case KVDIST__V1__MSG_TYPE__MSG_UNREGISTER_CACHE:
                return fill_in(&((Kvdist__V1__UnregisterCache *)msg)->cache_id, l->cache_id);
        case KVDIST__V1__MSG_TYPE__MSG_DEALLOCATE_CACHE:
                return fill_in(&((Kvdist__V1__DeallocateCache *)msg)->cache_id, l->cache_id);
        case KVDIST__V1__MSG_TYPE__MSG_TRANSFER:
                return fill_in(&((Kvdist__V1__Transfer *)msg)->local_cache_id, l->cache_id);
        case KVDIST__V1__MSG_TYPE__MSG_TRANSFER_BATCH: {
                const Kvdist__V1__TransferBatch *m = (const Kvdist__V1__TransferBatch *)msg;

                a = false;
                for (size_t i = 0; i < m->n_entries; i++)
                        a |= fill_in(&m->entries[i]->local_cache_id, l->cache_id);
                return a;
        }
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_QUERY:
                return fill_in(&((Kvdist__V1__DomainQuery *)msg)->comm_id, l->comm_id);
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_UNLINK:
                return fill_in(&((Kvdist__V1__DomainUnlink *)msg)->comm_id, l->comm_id);
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_SEND_RECV:
                return fill_in(&((Kvdist__V1__DomainSendRecv *)msg)->comm_id, l->comm_id);
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_BROADCAST:
                a = fill_in(&((Kvdist__V1__DomainBroadcast *)msg)->comm_id, l->comm_id);
                b = fill_in(&((Kvdist__V1__DomainBroadcast *)msg)->cache_id, l->cache_id);
                return a || b;
        case KVDIST__V1__MSG_TYPE__MSG_DOMAIN_ALL_GATHER:
                a = fill_in(&((Kvdist__V1__DomainAllGather *)msg)->comm_id, l->comm_id);
                b = fill_in(&((Kvdist__V1__DomainAllGather *)msg)->cache_id, l->cache_id);
                return a || b;
        default:
                return false;
        }
}

static const FuzzTarget client_target = {
        .open_endpoint = client_open_endpoint,
        .on_frame = client_on_frame,
        .fixup = client_fixup,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        FuzzDaemon *f;

        if (size == 0)
                return 0;
        fuzz_init();
        memset(learned, 0, sizeof(learned));
        f = fuzz_daemon_new(&client_target, NULL);
        fuzz_endpoint_client(f, 0);
        if (!client_start(f, 0, data[0] % 3)) {
                fprintf(stderr, "fuzz-client: the daemon refused the set-up\n");
                abort();
        }
        fuzz_run_script(f, data + 1, size - 1);
        fuzz_daemon_free(f);
        return 0;
}
