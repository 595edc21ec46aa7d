# SPDX-License-Identifier: MIT
"""One vLLM worker (one TP rank of a prefill or decode node) running vllm-ascend's
LLMDataDistCMgrConnector over kvdist, driven by test_vllm_connector.py: it reads pickled
commands on stdin and answers on the descriptor that was stdout (the connector's logs go to
stderr). Its KV caches are kvdist memory (kvdist.empty_torch) allocated after the connector
initialised its LLMDataDist, each tensor one block longer than the cache it registers (a guard
block), every byte seeded."""

import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "stubs"), os.path.join(HERE, "vllm_ascend_connector")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kvdist  # noqa: E402
import llmdatadist_c_mgr_connector as conn  # noqa: E402
from vllm import logger as vllm_logger  # noqa: E402
from vllm.config import CacheConfig, KVTransferConfig, ParallelConfig, VllmConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402


def pattern(seed, nbytes):
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


NPU_ALIGNMENT = 2 * 1024 * 1024


def aligned_empty(shape):
    """An fp16 tensor of kvdist memory that starts on 2 MiB, as an NPU's KV cache does (the
    connector asserts it for GQA caches): kvdist.empty_torch() memory is aligned to the pool's
    page in the pool, but where the pool is mapped in this process is not 2 MiB aligned, so a
    larger allocation is cut at the first 2 MiB boundary."""
    nbytes = int(np.prod(shape)) * 2
    raw = kvdist.empty_torch((nbytes + NPU_ALIGNMENT,), torch.uint8)
    skip = -raw.data_ptr() % NPU_ALIGNMENT
    t = raw[skip:skip + nbytes].view(torch.float16).view(shape)
    assert t.data_ptr() % NPU_ALIGNMENT == 0
    return t


class Node:
    def __init__(self, kv_role, tp_size, block_size, num_blocks, shapes, num_layers, seed):
        config = VllmConfig(KVTransferConfig(kv_role=kv_role, engine_id=kv_role),
                            CacheConfig(block_size=block_size),
                            ParallelConfig(tensor_parallel_size=tp_size))
        self.connector = conn.LLMDataDistCMgrConnector(config, KVConnectorRole.WORKER)
        self.full = []          # per layer, per cache: the tensor with its guard block
        kv_caches = {}
        for layer in range(num_layers):
            caches = []
            for i, shape in enumerate(shapes):
                full = aligned_empty((num_blocks + 1, block_size, *shape))
                raw = full.view(-1).view(torch.uint8)
                raw[:] = torch.from_numpy(pattern(seed * 1000 + layer * 10 + i, raw.numel()))
                self.full.append(full)
                caches.append(full[:num_blocks])
            kv_caches[f"model.layers.{layer}.self_attn.attn"] = tuple(caches)
        self.connector.register_kv_caches(kv_caches)
        # The connector logs a failed pull's RuntimeError only; the futures of its executor
        # keep the kvdist exception it was raised from (__context__), for the test to see.
        executor = self.connector.connector_worker.executor
        self.submit = executor.submit
        self.futures = []

        def recording_submit(*a, **kw):
            future = self.submit(*a, **kw)
            self.futures.append(future)
            return future
        executor.submit = recording_submit

    def step(self, meta, finished_req_ids, num_layers):
        # One engine step of vLLM's GPUModelRunner with a KV connector.
        c = self.connector
        c.bind_connector_metadata(meta)
        c.start_load_kv(None)
        for layer in range(num_layers):
            name = f"model.layers.{layer}.self_attn.attn"
            c.wait_for_layer_load(name)
            c.save_kv_layer(name, None, None)
        c.wait_for_save()
        done = c.get_finished(set(finished_req_ids))
        c.clear_connector_metadata()
        return done

    def drain(self):
        # The connector pulls in a one-thread executor: a no-op queued behind ends once the
        # pulls submitted before it ended.
        self.submit(lambda: None).result(timeout=300)

    def failures(self):
        """(message, the kvdist status it came from) of each pull that failed since asked."""
        out = []
        for f in self.futures:
            e = f.exception()
            if e is not None:
                cause = e.__context__
                out.append((str(e), cause.status_code.name
                            if isinstance(cause, kvdist.LLMException) else repr(cause)))
        self.futures = []
        return out

    def dump(self):
        return [t.view(-1).view(torch.uint8).numpy().tobytes() for t in self.full]


def main():
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    node = None
    while True:
        try:
            cmd, args = pickle.load(inp)
        except EOFError:
            return
        try:
            if cmd == "init":
                node = Node(**args)
                ret = None
            elif cmd == "step":
                ret = node.step(**args)
            elif cmd == "drain":
                node.drain()
                ret = None
            elif cmd == "failures":
                ret = node.failures()
            elif cmd == "dump":
                ret = node.dump()
            elif cmd == "errors":
                ret = list(vllm_logger.records.messages)
            elif cmd == "link_status":
                # what kvdist says of the link to a cluster (the connector logs no status)
                try:
                    node.connector.connector_worker.llm_datadist.check_link_status(
                        args["cluster_id"])
                    ret = "OK"
                except kvdist.LLMException as e:
                    ret = e.status_code.name
            elif cmd == "remove_remote_agent":
                # the connector's own methods, which it calls on no failure: the test calls
                # them as an operator (or a fix of the connector) would
                node.connector.connector_worker.remove_remote_agent(args["cluster_id"])
                ret = sorted(node.connector.connector_worker.linked_cluster)
            elif cmd == "add_remote_agent":
                ret = node.connector.connector_worker.add_remote_agent(
                    conn.LLMDataDistCMgrAgentMetadata(**args["metadata"]))
            elif cmd == "exit":
                return
            else:
                raise ValueError(cmd)
            reply = ("ok", ret)
        except BaseException as e:  # noqa: B902 - reported to the test, which fails on it
            import traceback
            reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        pickle.dump(reply, out)
        out.flush()


if __name__ == "__main__":
    main()
