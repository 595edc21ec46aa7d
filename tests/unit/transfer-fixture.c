/* SPDX-License-Identifier: MIT */
/* The transfer/ unit suites' fixture: roots by hand, fakes, a recorder (transfer-fixture.h). */
/* Before check.h, whose fail() macro would rename CompletionOps.fail. */
#include "tests/unit/transfer-fixture.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "common/status.h"
#include "proto/kvdist.pb-c.h"
#include "tests/harness/harness.h"

/* The fixture the recorder writes to: the peer ops carry no userdata. */
static TransferFixture *recording;

static int recorder_request(Peer *p, const TransferPeerRequest *req, Transfer *x,
                            PeerCall **ret_call)
{
        PeerRecorder *rec = &recording->rec;

        if (rec->request_error != 0)
                return rec->request_error;
        rec->n_requests++;
        rec->request = *req;
        if (req->local) {
                rec->request_local = *req->local;
                rec->request.local = &rec->request_local;
        }
        rec->request_transfer = x;
        /* A handle the transfer keeps and gives back to orphan(); never dereferenced. */
        *ret_call = (PeerCall *)rec;
        return 0;
}

static void recorder_orphan(PeerCall *call, unsigned flags)
{
        ck_assert_ptr_eq(call, (PeerCall *)&recording->rec);
        recording->rec.n_orphans++;
        recording->rec.orphan_flags = flags;
}

static int recorder_cancel(Peer *p, uint64_t transfer_id)
{
        recording->rec.n_cancels++;
        recording->rec.cancel_id = transfer_id;
        return 0;
}

static int recorder_data_done(Peer *p, uint64_t transfer_id, int status)
{
        recording->rec.n_data_done++;
        recording->rec.data_done_id = transfer_id;
        recording->rec.data_done_status = status;
        return 0;
}

static int recorder_push_done(Peer *p, uint64_t transfer_id, int status)
{
        recording->rec.n_push_done++;
        recording->rec.push_done_id = transfer_id;
        recording->rec.push_done_status = status;
        return 0;
}

static int recorder_answer(Peer *p, uint64_t request_id, const TransferPeerAnswer *answer)
{
        PeerRecorder *rec = &recording->rec;

        rec->n_answers++;
        rec->answer_request_id = request_id;
        rec->answer = *answer;
        rec->answer.descs = NULL; /* borrowed from the caller's stack */
        if (answer->remote) {
                rec->answer_remote = *answer->remote;
                rec->answer.remote = &rec->answer_remote;
        }
        return 0;
}

static int recorder_refuse(Peer *p, uint64_t request_id, const Error *err)
{
        recording->rec.n_refusals++;
        recording->rec.refuse_request_id = request_id;
        recording->rec.refusal = *err;
        return 0;
}

/* The fixture's links have no one-sided channel, so nothing has queue pairs to repair. */
static void recorder_channel_repair(Peer *p, TransportChannel *ch)
{
        ck_abort_msg("a channel repair, but the fixture makes no one-sided links");
}

static const TransferPeerOps recorder_ops = {
        .request = recorder_request,
        .orphan = recorder_orphan,
        .cancel = recorder_cancel,
        .data_done = recorder_data_done,
        .push_done = recorder_push_done,
        .answer = recorder_answer,
        .refuse = recorder_refuse,
        .channel_repair = recorder_channel_repair,
};

/* Stands for the peer's data connections: transports get it as the job's channel. */
static int fake_data_channel;

void transfer_fixture_init(TransferFixture *f)
{
        Peer *p;

        *f = (TransferFixture){
                .limits =
                        {
                                .max_inflight_per_client = 8,
                                .max_blocks_per_transfer = 64,
                                .max_notifies_per_client = 4,
                                .max_tensor_addrs = 240,
                        },
                .sync_kv_timeout_ms = 1000,
        };
        f->base = event_base_new();
        ck_assert_ptr_nonnull(f->base);

        ck_assert_int_eq(memory_init(&f->memory, &f->ids, 0, 12), 0);

        f->transports.base = f->base;
        f->shm = fake_transport_new(&f->transports);
        f->tcp = fake_transport_new(&f->transports);
        ck_assert_ptr_nonnull(f->shm);
        ck_assert_ptr_nonnull(f->tcp);
        f->shm->copy = true;
        f->transports.table[TRANSPORT_ROLE_LOCAL] = &f->shm->transport;
        f->transports.table[TRANSPORT_ROLE_STREAM] = &f->tcp->transport;

        link_root_init(&f->link);
        f->link.base = f->base;
        f->link.options.limits = &f->limits;
        f->link.ids = &f->ids;
        f->link.memory = &f->memory;
        f->link.transports = &f->transports;
        f->link.node_id = 1;

        transfer_root_init(&f->root);
        f->root.link = &f->link;
        f->root.memory = &f->memory;
        f->root.transports = &f->transports;
        f->root.options.limits = &f->limits;
        f->root.options.sync_kv_timeout_ms = &f->sync_kv_timeout_ms;
        /* The link events the daemon wires up, then the recorder instead of the wire. */
        transfer_listen(&f->root);
        f->root.peer_ops = &recorder_ops;
        recording = f;

        p = calloc(1, sizeof(*p));
        ck_assert_ptr_nonnull(p);
        p->root = &f->link;
        p->id = id_source_next(&f->ids);
        p->state = PEER_READY;
        p->fd = -1;
        p->data = (TransportChannel *)&fake_data_channel;
        (void)strcpy(p->address, "192.0.2.1:7000");
        clist_init(&p->calls);
        clist_init(&p->waiters);
        clist_init(&p->links);
        clist_init(&p->inlinks);
        clist_init(&p->transfers);
        clist_init(&p->served);
        clist_init(&p->channels);
        clist_init(&p->link_daemon);
        f->peer = p;
}

void transfer_fixture_done(TransferFixture *f)
{
        Cluster *c, *tmp;

        /* Whatever the clusters' teardown would tell the peer goes nowhere. */
        f->peer->state = PEER_CLOSED;
        CLIST_FOREACH_SAFE (c, tmp, &f->link.clusters, link_daemon)
                cluster_free(c);
        ck_assert_uint_eq(f->root.n_transfers, 0);
        ck_assert_uint_eq(f->root.n_served, 0);
        ck_assert(clist_is_empty(&f->peer->transfers));
        ck_assert(clist_is_empty(&f->peer->served));
        ck_assert_uint_eq(f->shm->n_jobs, 0);
        ck_assert_uint_eq(f->tcp->n_jobs, 0);
        free(f->peer);
        f->shm = fake_transport_free(f->shm);
        f->tcp = fake_transport_free(f->tcp);
        memory_deinit(&f->memory);
        link_root_done(&f->link);
        event_base_free(f->base);
        recording = NULL;
}

Cluster *transfer_fixture_cluster(TransferFixture *f, uint64_t id)
{
        Cluster *c = NULL;

        ck_assert_int_eq(
                cluster_new(&f->link, NULL, id, CLUSTER_ROLE_MIX, 0, f->sync_kv_timeout_ms, &c), 0);
        return c;
}

Cache *transfer_fixture_cache(TransferFixture *f, Cluster *c, CacheKind kind, uint32_t num_tensors,
                              uint32_t units, const CacheKey *key, uint64_t seed)
{
        CacheDesc desc = {
                .num_tensors = num_tensors,
                .n_dims = 3,
                .shape = {units, 8, 8},
                .data_type = KVD_DT_FLOAT16,
        };
        CacheTensor tensors[KVD_MAX_TENSORS];
        uint64_t tensor_size = (uint64_t)units * FIXTURE_STRIDE;
        Error err = ERROR_INIT;
        Region *region = NULL;
        Cache *cache = NULL;

        ck_assert_uint_le(num_tensors, KVD_MAX_TENSORS);
        ck_assert_int_eq(
                region_new_memfd("test-transfer",
                                 FIXTURE_GUARD + num_tensors * (tensor_size + FIXTURE_GUARD),
                                 id_source_next(&f->ids), &region),
                0);
        harness_fill_pattern(region->data, region->size, seed);
        for (uint32_t t = 0; t < num_tensors; t++)
                tensors[t] =
                        (CacheTensor){region, FIXTURE_GUARD + t * (tensor_size + FIXTURE_GUARD)};
        ck_assert_int_eq(cache_new(kind, &desc, tensors, &cache), 0);
        region_unref(region); /* the cache holds it */
        ck_assert_uint_eq(cache->stride, FIXTURE_STRIDE);
        cache->id = id_source_next(&f->ids);
        cache->owner_cluster_id = c->id;
        cache->remote_accessible = true;
        cache->access = CACHE_ACCESS_YES;
        cache->seq = id_source_next_seq(&f->ids);
        ck_assert_int_eq(cache_table_add(&c->caches, cache, key, key ? 1 : 0, false, &err), 0);
        return cache;
}

uint8_t *transfer_fixture_image(const Cache *cache, uint64_t seed)
{
        const Region *r = cache->tensors[0].region;
        uint8_t *image = malloc(r->size);

        ck_assert_ptr_nonnull(image);
        harness_fill_pattern(image, r->size, seed);
        return image;
}

void transfer_fixture_check_image(const Cache *cache, const uint8_t *image)
{
        const Region *r = cache->tensors[0].region;

        for (uint64_t i = 0; i < r->size; i++)
                if (r->data[i] != image[i])
                        ck_abort_msg("byte %" PRIu64 " of cache %" PRIu64 "'s region is 0x%02x, "
                                     "expected 0x%02x",
                                     i, cache->id, r->data[i], image[i]);
}

Link *transfer_fixture_remote_link(TransferFixture *f, Cluster *local, uint64_t remote_cluster_id)
{
        LinkGrant *exposed = calloc(1, sizeof(*exposed));
        Link *l = NULL;

        ck_assert_ptr_nonnull(exposed);
        exposed->link_id = 4242; /* the peer's id of its inbound link */
        exposed->role = CLUSTER_ROLE_MIX;
        ck_assert_int_eq(link_new_remote(&f->link, local, f->peer, remote_cluster_id, exposed,
                                         &f->tcp->transport, &l),
                         0);
        return l;
}

static int client_reply(Completion *cpl, const void *reply, int fd)
{
        ClientAnswer *a = container_of(cpl, ClientAnswer, cpl);

        ck_assert_ptr_null(reply);
        ck_assert_int_eq(fd, -1);
        a->n_replies++;
        return 0;
}

static int client_fail(Completion *cpl, int status, const Error *err)
{
        ClientAnswer *a = container_of(cpl, ClientAnswer, cpl);

        a->n_fails++;
        a->status = status;
        if (err)
                a->err = *err;
        return 0;
}

static void client_drop(Completion *cpl)
{
        container_of(cpl, ClientAnswer, cpl)->n_drops++;
}

static const CompletionOps client_ops = {
        .reply = client_reply,
        .fail = client_fail,
        .drop = client_drop,
};

void transfer_fixture_answer_init(ClientAnswer *a)
{
        *a = (ClientAnswer){.cpl.ops = &client_ops};
}

Transfer *transfer_fixture_last(TransferFixture *f)
{
        if (clist_is_empty(&f->root.transfers))
                return NULL;
        return clist_entry(f->root.transfers.prev, Transfer, link_daemon);
}

CacheKey transfer_fixture_id_index(uint64_t cluster_id, uint64_t cache_id, uint32_t index)
{
        return (CacheKey){
                .kind = CACHE_KEY_ID_INDEX,
                .cluster_id = cluster_id,
                .req_id = CACHE_ID_NONE,
                .prefix_id = CACHE_ID_NONE,
                .cache_id = cache_id,
                .batch_index = index,
        };
}

TransferArgs transfer_fixture_item_args(TransferKind kind, uint32_t local_index)
{
        return (TransferArgs){
                .kind = kind,
                .local_batch_index = local_index,
                .size = -1,
                .src_layers = {PLAN_LAYERS_ALL, PLAN_LAYERS_ALL},
                .dst_layers = {PLAN_LAYERS_ALL, PLAN_LAYERS_ALL},
        };
}

Served *transfer_fixture_last_served(TransferFixture *f)
{
        if (clist_is_empty(&f->root.served))
                return NULL;
        return clist_entry(f->root.served.prev, Served, link_daemon);
}

void transfer_fixture_expire(TransferFixture *f, struct event *timer)
{
        ck_assert_ptr_nonnull(timer);
        event_active(timer, EV_TIMEOUT, 1);
        ck_assert_int_ge(event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
}
