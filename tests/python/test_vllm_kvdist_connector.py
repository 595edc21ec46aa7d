# SPDX-License-Identifier: MIT
"""examples/vllm_kvdist_connector.py, a sketch of a vLLM KV connector over kvdist's API 2,
driven as vLLM drives a connector's worker side: this test plays the scheduler, and a prefill
node and a decode node are worker processes (kvdist_connector_node.py) on two kvdistd.

vLLM is not installable here (no PyPI): the connector is written against a minimal stand-in of
vLLM's v1 KV connector interface (KVConnectorBase_V1's worker-side method names and
signatures; see the example's docstring), and this test calls those methods in the order
vLLM's model runner does (bind_connector_metadata, start_load_kv, wait_for_layer_load and
save_kv_layer per layer, wait_for_save, get_finished, get_block_ids_with_load_errors,
clear_connector_metadata).

A few requests with scattered block tables are loaded by the decode worker in one batch, each
entry linking to its prefill worker on first use (remote_info from the request's metadata);
every byte of the decode side's KV is compared with the prefill's seeded KV, and every block
not loaded (the guard blocks around each tensor too) must be untouched. One request's prefill
blocks are gone (past the prefill's cache: its entry fails alone) and one request's prefill
worker has exited (its cluster is unreachable: the batch is refused, split, and that entry
fails alone): get_block_ids_with_load_errors() reports exactly their blocks, and get_finished()
still reports them, as vLLM requires. The same with layerwise loads (one batch per layer,
wait_for_layer_load() waiting for its layer's): the failed blocks come in the same step."""

import os
import pickle
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import _die_with_parent

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import vllm_kvdist_connector as conn  # noqa: E402

REPLY_CEILING_S = 300
NUM_LAYERS = 2
NUM_BLOCKS = 16
BLOCK_SHAPE = (4, 2, 8)             # block_size, kv_heads, head_dim (fp16)
BLOCK_BYTES = int(np.prod(BLOCK_SHAPE)) * 2


class NodeProc:
    def __init__(self, tmp_path, name, kv_role, cluster_id, daemon, seed, load_mode="async"):
        self.log_path = tmp_path / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "kvdist_connector_node.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                preexec_fn=_die_with_parent)
        extra = {"cluster_id": cluster_id, "socket_path": daemon.socket,
                 "listen_ip_info": daemon.peer_addr, "timeout_ms": 30000,
                 "load_mode": load_mode}
        self.info, self.cluster_id = self.call(
            "init", kv_role=kv_role, extra=extra, num_layers=NUM_LAYERS, num_blocks=NUM_BLOCKS,
            block_shape=BLOCK_SHAPE, seed=seed)
        self.before = self.call("dump")

    def log(self):
        return self.log_path.read_text(errors="replace")

    def call(self, cmd, **args):
        pickle.dump((cmd, args), self.proc.stdin)
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_CEILING_S)
        assert ready, f"{cmd}: no reply within {REPLY_CEILING_S} s:\n{self.log()}"
        try:
            status, ret = pickle.load(self.proc.stdout)
        except EOFError:
            pytest.fail(f"{cmd}: the node exited:\n{self.log()}")
        assert status == "ok", f"{cmd}: {ret}\n{self.log()}"
        return ret

    def step(self, meta=None, finished=()):
        return self.call("step", meta=meta or conn.KVDistConnectorMetadata(),
                         finished_req_ids=set(finished), num_layers=NUM_LAYERS)

    def exit(self):
        if self.proc.poll() is None:
            self.call("exit")
            self.proc.stdin.close()
            assert self.proc.wait(REPLY_CEILING_S) == 0, self.log()


def block(image, kv, index):
    """The bytes of block index (of the registered cache) of K (kv 0) or V (kv 1) in a layer's
    dump, whose tensors hold a guard block before and after the cache's blocks."""
    start = (kv * (NUM_BLOCKS + 2) + index + 1) * BLOCK_BYTES
    return image[start:start + BLOCK_BYTES]


@pytest.mark.parametrize("load_mode", ["async", "layerwise"])
def test_connector_pd(tmp_path, daemons, load_mode):
    P, D = daemons("prefill"), daemons("decode")
    nodes = []
    try:
        p1 = NodeProc(tmp_path, "prefill-1", "kv_producer", 11, P, seed=1)
        nodes.append(p1)
        p2 = NodeProc(tmp_path, "prefill-2", "kv_producer", 12, P, seed=2)
        nodes.append(p2)
        d = NodeProc(tmp_path, "decode", "kv_consumer", 22, D, seed=3, load_mode=load_mode)
        nodes.append(d)
        # Prefill 2 goes away after its requests' metadata left it: its cluster is gone.
        p2_info = p2.info
        p2.exit()

        # req_id -> (prefill node, its blocks, the decode's blocks), scattered.
        plan = {
            "A": (p1, [3, 9, 14], [5, 0, 12]),
            "B": (p1, [1, 2], [15, 7]),
            "G": (p1, [15, 16, 20], [2, 6, 8]),    # blocks 16 and 20 are past the cache
            "L": (p2, [0, 1], [10, 11]),            # its prefill worker exited
            "C": (p1, [0, 4, 6, 8], [1, 3, 4, 9]),  # arrives one step later
        }
        failing = {"G", "L"}

        def recv(req_id):
            node, remote, local = plan[req_id]
            return conn.RecvReq(local, remote, node.cluster_id,
                                p2_info if node is p2 else node.info)

        # The prefill finished A, B, C and G: its blocks are kept for the decode to read.
        assert p1.step(finished={"A", "B", "C", "G"}) == (None, None, set())

        recvd, errors = set(), set()
        metas = [conn.KVDistConnectorMetadata({r: recv(r) for r in ("A", "B", "G", "L")}),
                 conn.KVDistConnectorMetadata({"C": recv("C")})]
        if load_mode == "layerwise":
            # Synchronous: each layer waited for in its step, the failures of that step's
            # requests reported in it, nothing through get_finished().
            assert d.step(metas[0]) == (None, None, {b for r in failing for b in plan[r][2]})
            assert d.step(metas[1]) == (None, None, set())
            metas, recvd = [], set(plan)
        deadline = time.monotonic() + REPLY_CEILING_S
        while recvd != set(plan):
            assert time.monotonic() < deadline, f"loaded only {recvd}:\n{d.log()}"
            sending, recving, errs = d.step(metas.pop(0) if metas else None)
            assert sending is None
            assert not (recving or set()) & recvd, "a request was reported twice"
            recvd |= recving or set()
            errors |= errs
            # Errors come no later than the step that reports their request.
            assert errors >= {b for r in (recving or ()) if r in failing for b in plan[r][2]}
            if not recving:
                time.sleep(0.01)
        if load_mode == "async":
            assert errors == {b for r in failing for b in plan[r][2]}

        # Every decode byte: the prefill's block where a request loaded, else as it was.
        after = d.call("dump")
        src = p1.call("dump")
        assert [np.array_equal(a, b) for a, b in zip(src, p1.before)] == [True] * NUM_LAYERS
        for layer in range(NUM_LAYERS):
            expected = d.before[layer].copy()
            for req_id, (node, remote, local) in plan.items():
                if req_id in failing:
                    continue
                for kv in (0, 1):
                    for r, l in zip(remote, local):
                        block(expected, kv, l)[:] = block(src[layer], kv, r)
            if not np.array_equal(after[layer], expected):
                diff = np.argwhere(after[layer] != expected)
                pytest.fail(f"layer {layer}: {len(diff)} bytes differ, first at byte "
                            f"{diff[0][0]} (block {diff[0][0] // BLOCK_BYTES - 1} of K, "
                            f"counting past the guard)")

        # The decode side read them: the prefill may free their blocks now.
        read = {"A", "B", "C", "G"}
        assert p1.step(conn.KVDistConnectorMetadata(reqs_read=read)) == (read, None, set())
        for node in nodes:
            node.exit()
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
