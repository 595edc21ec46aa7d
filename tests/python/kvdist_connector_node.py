# SPDX-License-Identifier: MIT
"""One vLLM worker (prefill or decode) running examples/vllm_kvdist_connector.py, driven by
test_vllm_kvdist_connector.py: pickled commands on stdin, pickled replies on stdout. Its KV
caches are kvdist memory (kvdist.empty_torch), one [2, num_blocks, block_size, heads, head_dim]
fp16 tensor per layer as vLLM's FlashAttention backend lays them out, with a guard block before
and after the blocks the connector registers; every byte seeded."""

import os
import pickle
import sys
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import kvdist  # noqa: E402
import vllm_kvdist_connector as conn  # noqa: E402


class Config:
    def __init__(self, kv_role, extra):
        self.kv_transfer_config = type("KVTransferConfig", (), {
            "kv_role": kv_role, "kv_connector_extra_config": extra})()


class Node:
    def __init__(self, kv_role, extra, num_layers, num_blocks, block_shape, seed):
        self.connector = conn.KVDistConnector(Config(kv_role, extra), conn.KVConnectorRole.WORKER)
        self.full = []
        kv_caches = {}
        for layer in range(num_layers):
            # Blocks 1..num_blocks are the cache's; blocks 0 and num_blocks + 1 are guards.
            nbytes = 2 * (num_blocks + 2) * int(np.prod(block_shape)) * 2
            raw = kvdist.empty_torch((nbytes,), torch.uint8)
            raw[:] = torch.from_numpy(np.random.default_rng(seed * 100 + layer).integers(
                0, 256, size=nbytes, dtype=np.uint8))
            full = raw.view(torch.float16).view(2, num_blocks + 2, *block_shape)
            self.full.append(full)
            # Without the guards: K and V are each contiguous, as vLLM's are.
            kv_caches[f"model.layers.{layer}.self_attn.attn"] = full[:, 1:-1]
        self.connector.register_kv_caches(kv_caches)

    def dump(self):
        return [f.view(-1).view(torch.uint8).numpy().copy() for f in self.full]

    def step(self, meta, finished_req_ids, num_layers):
        # One engine step of vLLM's GPUModelRunner with a KV connector (its order of calls).
        c = self.connector
        c.bind_connector_metadata(meta)
        c.start_load_kv(None)
        for layer in range(num_layers):
            name = f"model.layers.{layer}.self_attn.attn"
            c.wait_for_layer_load(name)
            c.save_kv_layer(name, None, None)
        c.wait_for_save()
        sending, recving = c.get_finished(set(finished_req_ids))
        errors = c.get_block_ids_with_load_errors()
        c.clear_connector_metadata()
        return sending, recving, errors


def main():
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to the log, not into the replies
    node = None
    while True:
        try:
            cmd, args = pickle.load(sys.stdin.buffer)
        except EOFError:
            return 0
        try:
            if cmd == "init":
                node = Node(**args)
                ret = (node.connector.local_info(), node.connector.datadist.cluster_id)
            elif cmd == "step":
                ret = node.step(**args)
            elif cmd == "dump":
                ret = node.dump()
            elif cmd == "exit":
                node.connector.shutdown()
                pickle.dump(("ok", None), out)
                out.flush()
                return 0
            else:
                raise ValueError(f"unknown command {cmd}")
            reply = ("ok", ret)
        except Exception:  # reported to the test, which fails with it
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, out)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
