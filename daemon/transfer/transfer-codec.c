/* SPDX-License-Identifier: MIT */
/* Transfer codec: transfer/'s peer messages between the wire and their plain structs. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "common/macro.h"
#include "common/status.h"
#include "daemon/link/link-root.h"
#include "daemon/link/peer-handlers.h"
#include "daemon/link/peer.h"
#include "daemon/link/peer-cache-key.h"
#include "daemon/link/peer-channel.h"
#include "daemon/transfer/transfer-codec.h"
#include "daemon/transfer/transfer-root.h"
#include "proto/kvdist.pb-c.h"
#include "proto/status-wire.h"

static void transfer_codec_desc_to_proto(const RemoteDesc *desc, Kvdist__V1__PlanCacheDesc *m)
{
        m->blocks = desc->blocks;
        m->num_tensors = desc->num_tensors;
        m->tensor_size = desc->tensor_size;
        m->units = desc->units;
}

static const RemoteDesc *transfer_codec_desc_from_proto(const Kvdist__V1__PlanCacheDesc *m,
                                                        RemoteDesc *storage)
{
        if (!m)
                return NULL;
        *storage = (RemoteDesc){
                .blocks = m->blocks,
                .num_tensors = m->num_tensors,
                .tensor_size = m->tensor_size,
                .units = m->units,
        };
        return storage;
}

static PlanSlice transfer_codec_slice_from_proto(const Kvdist__V1__Slice *s)
{
        return s ? (PlanSlice){s->offset, s->length} : (PlanSlice){};
}

/* @s in @storage, or NULL for a whole block (what a daemon without slices sends). */
static Kvdist__V1__Slice *transfer_codec_slice_to_proto(const PlanSlice *s,
                                                        Kvdist__V1__Slice *storage)
{
        if (s->offset == 0 && s->length == 0)
                return NULL;
        kvdist__v1__slice__init(storage);
        storage->offset = s->offset;
        storage->length = s->length;
        return storage;
}

static PlanLayers transfer_codec_layers_from_proto(const Kvdist__V1__LayerRange *r)
{
        if (!r)
                return (PlanLayers){PLAN_LAYERS_ALL, PLAN_LAYERS_ALL};
        return (PlanLayers){r->first, r->last};
}

/* The answer's status: a peer that sent none is out of step with us. */
static int transfer_codec_status(const Kvdist__V1__Status *st)
{
        return st ? status_wire_decode(st->code) : STATUS_PROTOCOL_MISMATCH;
}

/* The peer's descriptors, copied into @descs (KVD_MAX_TENSORS of them; see TransferPeerAnswer). */
static const TransportDesc *transfer_codec_descs_from_proto(const Kvdist__V1__PeerTransferReply *m,
                                                            TransportDesc *descs)
{
        if (m->n_descs == 0 || m->n_descs > KVD_MAX_TENSORS)
                return NULL;
        for (size_t i = 0; i < m->n_descs; i++) {
                const ProtobufCBinaryData *d = &m->descs[i];

                descs[i] = (TransportDesc){0};
                if (d->len > TRANSPORT_DESC_MAX)
                        continue;
                descs[i].len = d->len;
                if (d->len > 0)
                        memcpy(descs[i].bytes, d->data, d->len);
        }
        return descs;
}

static void transfer_codec_answer_from_proto(const Kvdist__V1__PeerTransferReply *m,
                                             RemoteDesc *storage, TransportDesc *descs,
                                             TransferPeerAnswer *ret)
{
        *ret = (TransferPeerAnswer){
                .remote = transfer_codec_desc_from_proto(m->remote, storage),
                .remote_index = m->remote_index,
                .total_bytes = m->total_bytes,
                .segments = m->segments,
                .job_id = m->job_id,
                .descs = transfer_codec_descs_from_proto(m, descs),
                .n_descs = m->n_descs,
        };
}

static void transfer_codec_on_reply(Peer *p, int status, const Error *err,
                                    const ProtobufCMessage *reply, void *userdata)
{
        TransportDesc descs[KVD_MAX_TENSORS];
        TransferPeerAnswer answer;
        RemoteDesc storage;

        if (status != STATUS_OK) {
                transfer_remote_on_answer(userdata, p, status, err, NULL);
                return;
        }
        transfer_codec_answer_from_proto((const Kvdist__V1__PeerTransferReply *)reply, &storage,
                                         descs, &answer);
        transfer_remote_on_answer(userdata, p, status, err, &answer);
}

static void transfer_codec_on_orphan_reply(Peer *p, int status, const Error *err,
                                           const ProtobufCMessage *reply, void *userdata)
{
        TransportDesc descs[KVD_MAX_TENSORS];
        TransferPeerAnswer answer;
        RemoteDesc storage;

        if (status != STATUS_OK) {
                transfer_remote_on_orphan_answer(p, status, NULL, (unsigned)(uintptr_t)userdata);
                return;
        }
        transfer_codec_answer_from_proto((const Kvdist__V1__PeerTransferReply *)reply, &storage,
                                         descs, &answer);
        transfer_remote_on_orphan_answer(p, status, &answer, (unsigned)(uintptr_t)userdata);
}

static int transfer_codec_request(Peer *p, const TransferPeerRequest *req, Transfer *x,
                                  PeerCall **ret_call)
{
        Kvdist__V1__PeerTransfer m = KVDIST__V1__PEER_TRANSFER__INIT;
        Kvdist__V1__PlanCacheDesc desc = KVDIST__V1__PLAN_CACHE_DESC__INIT;
        Kvdist__V1__LayerRange src_layers = KVDIST__V1__LAYER_RANGE__INIT;
        Kvdist__V1__LayerRange dst_layers = KVDIST__V1__LAYER_RANGE__INIT;
        Kvdist__V1__Slice src_slice, dst_slice;
        const TransferArgs *a = &req->args;
        PeerCacheKeyStorage ks;

        m.job_id = req->job_id;
        m.link_id = req->link_id;
        m.initiator_link_id = req->initiator_link_id;
        m.linked_link_id = req->linked_link_id;
        m.kind = (Kvdist__V1__TransferKind)a->kind;
        m.key = peer_cache_key_to_proto(&req->key, &ks);
        if (req->local) {
                transfer_codec_desc_to_proto(req->local, &desc);
                m.local = &desc;
        }
        m.n_src_blocks = a->n_src_blocks;
        m.src_blocks = (uint64_t *)a->src_blocks;
        m.n_dst_blocks = a->n_dst_blocks;
        m.dst_blocks = (uint64_t *)a->dst_blocks;
        m.local_batch_index = a->local_batch_index;
        m.size = a->size;
        if (req->src_layers_set) {
                src_layers.first = a->src_layers.first;
                src_layers.last = a->src_layers.last;
                m.src_layers = &src_layers;
        }
        if (req->dst_layers_set) {
                dst_layers.first = a->dst_layers.first;
                dst_layers.last = a->dst_layers.last;
                m.dst_layers = &dst_layers;
        }
        m.tensor_num_per_layer = a->tensor_num_per_layer;
        m.src_slice = transfer_codec_slice_to_proto(&a->src_slice, &src_slice);
        m.dst_slice = transfer_codec_slice_to_proto(&a->dst_slice, &dst_slice);
        m.timeout_ms = req->timeout_ms;
        m.notify.data = (uint8_t *)req->notify;
        m.notify.len = req->notify_len;
        m.remote_access = req->remote_access;
        return peer_call(p, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, &m.base,
                         transfer_codec_on_reply, x, ret_call);
}

static void transfer_codec_orphan(PeerCall *call, unsigned flags)
{
        peer_call_redirect(call, transfer_codec_on_orphan_reply, (void *)(uintptr_t)flags);
}

static int transfer_codec_cancel(Peer *p, uint64_t transfer_id)
{
        Kvdist__V1__PeerTransferCancel m = KVDIST__V1__PEER_TRANSFER_CANCEL__INIT;

        m.transfer_id = transfer_id;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_CANCEL, &m.base);
}

static int transfer_codec_data_done(Peer *p, uint64_t transfer_id, int status)
{
        Kvdist__V1__PeerRemoteDone m = KVDIST__V1__PEER_REMOTE_DONE__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        st.code = status_wire_encode(status);
        m.transfer_id = transfer_id;
        m.status = &st;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_REMOTE_DONE, &m.base);
}

static int transfer_codec_push_done(Peer *p, uint64_t transfer_id, int status)
{
        Kvdist__V1__PeerTransferDone m = KVDIST__V1__PEER_TRANSFER_DONE__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        st.code = status_wire_encode(status);
        st.detail = (char *)(status == STATUS_OK ? "" : status_wire_name(status));
        m.transfer_id = transfer_id;
        m.status = &st;
        return peer_notice(p, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_DONE, &m.base);
}

static int transfer_codec_answer(Peer *p, uint64_t request_id, const TransferPeerAnswer *answer)
{
        Kvdist__V1__PeerTransferReply m = KVDIST__V1__PEER_TRANSFER_REPLY__INIT;
        Kvdist__V1__PlanCacheDesc desc = KVDIST__V1__PLAN_CACHE_DESC__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        ProtobufCBinaryData descs[KVD_MAX_TENSORS];

        if (answer->n_descs > KVD_MAX_TENSORS)
                return -EINVAL;
        m.status = &st;
        if (answer->remote) {
                transfer_codec_desc_to_proto(answer->remote, &desc);
                m.remote = &desc;
        }
        m.remote_index = answer->remote_index;
        m.total_bytes = answer->total_bytes;
        m.segments = answer->segments;
        m.job_id = answer->job_id;
        for (size_t i = 0; i < answer->n_descs; i++)
                descs[i] = (ProtobufCBinaryData){
                        .len = answer->descs[i].len,
                        .data = (uint8_t *)answer->descs[i].bytes,
                };
        m.descs = descs;
        m.n_descs = answer->n_descs;
        return peer_reply(p, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, request_id, &m.base);
}

static int transfer_codec_refuse(Peer *p, uint64_t request_id, const Error *err)
{
        return peer_reply_error(p, KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, request_id, err->code,
                                err);
}

static const TransferPeerOps transfer_codec_ops = {
        .request = transfer_codec_request,
        .orphan = transfer_codec_orphan,
        .cancel = transfer_codec_cancel,
        .data_done = transfer_codec_data_done,
        .push_done = transfer_codec_push_done,
        .answer = transfer_codec_answer,
        .refuse = transfer_codec_refuse,
        .channel_repair = peer_channel_repair,
};

static void transfer_codec_on_transfer(void *userdata, Peer *p, uint64_t request_id,
                                       const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerTransfer *m = (const Kvdist__V1__PeerTransfer *)msg;
        TransferPeerRequest req = {
                .job_id = m->job_id,
                .link_id = m->link_id,
                .initiator_link_id = m->initiator_link_id,
                .linked_link_id = m->linked_link_id,
                .args =
                        {
                                .kind = (TransferKind)m->kind,
                                .src_blocks = m->src_blocks,
                                .n_src_blocks = m->n_src_blocks,
                                .dst_blocks = m->dst_blocks,
                                .n_dst_blocks = m->n_dst_blocks,
                                .local_batch_index = m->local_batch_index,
                                .size = m->size,
                                .src_layers = transfer_codec_layers_from_proto(m->src_layers),
                                .dst_layers = transfer_codec_layers_from_proto(m->dst_layers),
                                .tensor_num_per_layer = m->tensor_num_per_layer,
                                .src_slice = transfer_codec_slice_from_proto(m->src_slice),
                                .dst_slice = transfer_codec_slice_from_proto(m->dst_slice),
                        },
                .src_layers_set = m->src_layers != NULL,
                .dst_layers_set = m->dst_layers != NULL,
                .timeout_ms = m->timeout_ms,
                .notify = m->notify.data,
                .notify_len = m->notify.len,
                .remote_access = m->remote_access,
        };
        RemoteDesc local;

        req.local = transfer_codec_desc_from_proto(m->local, &local);
        (void)peer_cache_key_from_proto(m->key, &req.key, &req.key_err);
        served_handle_transfer(userdata, p, request_id, &req);
}

static void transfer_codec_on_done(void *userdata, Peer *p, uint64_t request_id,
                                   const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerTransferDone *m = (const Kvdist__V1__PeerTransferDone *)msg;

        transfer_remote_handle_done(userdata, p, m->transfer_id, transfer_codec_status(m->status),
                                    m->status && m->status->detail ? m->status->detail : "");
}

static void transfer_codec_on_cancel(void *userdata, Peer *p, uint64_t request_id,
                                     const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerTransferCancel *m = (const Kvdist__V1__PeerTransferCancel *)msg;

        served_handle_transfer_cancel(userdata, p, m->transfer_id);
}

static void transfer_codec_on_remote_done(void *userdata, Peer *p, uint64_t request_id,
                                          const ProtobufCMessage *msg)
{
        const Kvdist__V1__PeerRemoteDone *m = (const Kvdist__V1__PeerRemoteDone *)msg;

        served_handle_remote_done(userdata, p, m->transfer_id, transfer_codec_status(m->status));
}

/* What transfer/ handles of what peers send: their transfers here, the end of ours there. */
static const PeerHandler transfer_codec_handlers[] = {
        {KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER, transfer_codec_on_transfer},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_DONE, transfer_codec_on_done},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_TRANSFER_CANCEL, transfer_codec_on_cancel},
        {KVDIST__V1__MSG_TYPE__MSG_PEER_REMOTE_DONE, transfer_codec_on_remote_done},
};

void transfer_codec_listen(TransferRoot *root)
{
        root->peer_ops = &transfer_codec_ops;
        peer_handlers_register(root->link, transfer_codec_handlers,
                               ARRAY_SIZE(transfer_codec_handlers), root);
}
