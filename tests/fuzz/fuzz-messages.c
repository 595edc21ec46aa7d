/* SPDX-License-Identifier: MIT */
/* Requests shared by the socket-level fuzz targets and their seed generator. */
#include <stdbool.h>

#include "tests/fuzz/fuzz-messages.h"

/* kvd_dtype FLOAT16: 2 bytes an element. */
#define FUZZ_DTYPE 1
#define FUZZ_DTYPE_BYTES 2

void fuzz_blocks_cache_init(FuzzBlocksCache *c, uint64_t cluster, uint64_t model)
{
        *c = (FuzzBlocksCache){
                .msg = KVDIST__V1__REGISTER_CACHE__INIT,
                .desc = KVDIST__V1__CACHE_DESC__INIT,
                .blocks_key = KVDIST__V1__BLOCKS_KEY__INIT,
                .key = KVDIST__V1__CACHE_KEY__INIT,
                .shape = {FUZZ_CACHE_BLOCKS, FUZZ_CACHE_BLOCK_BYTES / FUZZ_DTYPE_BYTES},
                .addrs = {FUZZ_REGION_ADDR, FUZZ_REGION_ADDR + FUZZ_TENSOR_BYTES},
        };
        c->desc.num_tensors = 2;
        c->desc.shape = c->shape;
        c->desc.n_shape = 2;
        c->desc.data_type = FUZZ_DTYPE;
        c->blocks_key.cluster_id = cluster;
        c->blocks_key.model_id = model;
        c->key.kind_case = KVDIST__V1__CACHE_KEY__KIND_BLOCKS;
        c->key.blocks = &c->blocks_key;
        c->keys[0] = &c->key;
        c->msg.desc = &c->desc;
        c->msg.addrs = c->addrs;
        c->msg.n_addrs = 2;
        c->msg.blocks = true;
        c->msg.keys = c->keys;
        c->msg.n_keys = 1;
        c->msg.remote_access = KVDIST__V1__REMOTE_ACCESS__REMOTE_YES;
}

void fuzz_contiguous_cache_init(FuzzContiguousCache *c, uint64_t cluster, uint64_t model)
{
        *c = (FuzzContiguousCache){
                .msg = KVDIST__V1__REGISTER_CACHE__INIT,
                .desc = KVDIST__V1__CACHE_DESC__INIT,
                .shape = {FUZZ_BATCH_SLOTS,
                          FUZZ_TENSOR_BYTES / FUZZ_BATCH_SLOTS / FUZZ_DTYPE_BYTES},
                .addrs = {FUZZ_REGION_ADDR + 2 * FUZZ_TENSOR_BYTES,
                          FUZZ_REGION_ADDR + 3 * FUZZ_TENSOR_BYTES},
        };
        c->desc.num_tensors = 2;
        c->desc.shape = c->shape;
        c->desc.n_shape = 2;
        c->desc.data_type = FUZZ_DTYPE;
        for (unsigned k = 0; k < FUZZ_BATCH_SLOTS; k++) {
                kvdist__v1__req_key__init(&c->req_keys[k]);
                c->req_keys[k].cluster_id = cluster;
                c->req_keys[k].req_id = k + 1;
                c->req_keys[k].prefix_id = UINT64_MAX; /* KVD_ID_NONE: a request key */
                c->req_keys[k].model_id = model;
                kvdist__v1__cache_key__init(&c->key[k]);
                c->key[k].kind_case = KVDIST__V1__CACHE_KEY__KIND_REQ;
                c->key[k].req = &c->req_keys[k];
                c->keys[k] = &c->key[k];
        }
        c->msg.desc = &c->desc;
        c->msg.addrs = c->addrs;
        c->msg.n_addrs = 2;
        c->msg.keys = c->keys;
        c->msg.n_keys = FUZZ_BATCH_SLOTS;
        c->msg.remote_access = KVDIST__V1__REMOTE_ACCESS__REMOTE_YES;
}
