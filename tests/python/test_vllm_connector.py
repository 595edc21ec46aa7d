# SPDX-License-Identifier: MIT
"""vllm-ascend's prefill/decode connector over llm_datadist (LLMDataDistCMgrConnector, pinned
in vllm_ascend_connector/ with `import llm_datadist` turned into `import kvdist as
llm_datadist`, nothing else changed) run on kvdist: this test plays vLLM's scheduler and engine
steps, a prefill node and a decode node are two worker processes (vllm_connector_node.py) on two
kvdistd, and every byte of the decode side's caches is compared with the prefill's seeded KV,
guard blocks and blocks not pulled untouched.

vLLM, vllm_ascend, zmq and msgspec are not installable here: stubs/ fakes what the connector
imports from them (see stubs/__init__.py); the connector's metadata exchange over zmq runs over
Unix sockets between the two processes (stubs/zmq). The connector's own code runs unchanged:
the rank table it reads, its two-member link() per TP rank, query_register_mem_status, its
pulls (MLA's two caches under model ids 0 and 1), the finished messages back to the prefill."""

import os
import pickle
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "stubs"), os.path.join(HERE, "vllm_ascend_connector")]

torch = pytest.importorskip("torch")

import llmdatadist_c_mgr_connector as conn  # noqa: E402
from conftest import _die_with_parent, pattern  # noqa: E402
from vllm.config import CacheConfig, KVTransferConfig, ParallelConfig, VllmConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.utils import network_utils  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheBlocks  # noqa: E402
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

REPLY_CEILING_S = 300
BLOCK_SIZE = 16
NUM_BLOCKS = 12
NUM_LAYERS = 2
RPC_PORT = 5557
PREFILL_CLUSTER, DECODE_CLUSTER = 11, 22
GQA = [(2, 16), (2, 16)]          # K and V: [block_size, kv_heads, head_dim] per block
MLA = [(1, 32), (1, 8)]           # k_normed (kv_lora_rank) and k_pe (rope dim)
DAEMON_ARGS = ()


class NodeProc:
    """A worker process of one node (one TP rank)."""

    def __init__(self, tmp_path, name, daemon, server_id, rank_table, tp_rank=0, tp_size=1,
                 timeout_ms=30000):
        env = dict(os.environ)
        env.update(KVDIST_SOCKET=daemon.socket, STUB_LOCAL_IP=server_id,
                   VLLM_ASCEND_LLMDD_RPC_IP=server_id, VLLM_ASCEND_LLMDD_RPC_PORT=str(RPC_PORT),
                   DISAGGREGATED_PREFILL_RANK_TABLE_PATH=str(rank_table),
                   STUB_ZMQ_DIR=str(tmp_path), STUB_TP_RANK=str(tp_rank),
                   STUB_TP_SIZE=str(tp_size), STUB_TRANSFER_TIMEOUT_MS=str(timeout_ms))
        self.log_path = tmp_path / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "vllm_connector_node.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                preexec_fn=_die_with_parent)

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

    def exit(self):
        if self.proc.poll() is None:
            self.call_exit()

    def call_exit(self):
        pickle.dump(("exit", {}), self.proc.stdin)
        self.proc.stdin.close()
        assert self.proc.wait(REPLY_CEILING_S) == 0, self.log()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def scheduler(kv_role, server_id):
    """The scheduler side's connector of a node (in this process: it makes no kvdist call)."""
    network_utils.ip = server_id
    try:
        config = VllmConfig(KVTransferConfig(kv_role=kv_role, engine_id=kv_role),
                            CacheConfig(block_size=BLOCK_SIZE), ParallelConfig())
        return conn.LLMDataDistCMgrConnector(config, KVConnectorRole.SCHEDULER)
    finally:
        network_utils.ip = None


class PD:
    """A prefill node and a decode node, each with its kvdistd, scheduler and worker."""

    def __init__(self, tmp_path, daemons, shapes, timeout_ms=30000, **daemon_options):
        self.tmp_path = tmp_path
        self.shapes = shapes
        self.timeout_ms = timeout_ms
        self.pd = daemons("prefill", DAEMON_ARGS, **daemon_options)
        self.dd = daemons("decode", DAEMON_ARGS, **daemon_options)
        # The rank table vllm-ascend reads (DISAGGREGATED_PREFILL_RANK_TABLE_PATH): device_ip
        # names each node's kvdistd, as kvdist reads a table without host_ip.
        table = {
            "prefill_device_list": [{"server_id": "prefill-node", "device_id": "0",
                                     "device_ip": self.pd.peer_addr,
                                     "cluster_id": str(PREFILL_CLUSTER)}],
            "decode_device_list": [{"server_id": "decode-node", "device_id": "0",
                                    "device_ip": self.dd.peer_addr,
                                    "cluster_id": str(DECODE_CLUSTER)}],
        }
        self.rank_table = tmp_path / "ranktable.json"
        import json
        self.rank_table.write_text(json.dumps(table))
        self.nodes = []
        self.prefill_seed, self.decode_seed = 1, 2
        self.p_sched = scheduler("kv_producer", "prefill-node")
        self.d_sched = scheduler("kv_consumer", "decode-node")
        self.p = self.start_node("prefill", self.pd, "prefill-node", "kv_producer",
                                 self.prefill_seed)
        self.d = self.start_node("decode", self.dd, "decode-node", "kv_consumer",
                                 self.decode_seed)
        self.expected = self.image(self.decode_seed)

    def start_node(self, name, daemon, server_id, kv_role, seed):
        node = NodeProc(self.tmp_path, f"{name}-{len(self.nodes)}", daemon, server_id,
                        self.rank_table, timeout_ms=self.timeout_ms)
        self.nodes.append(node)
        node.call("init", kv_role=kv_role, tp_size=1, block_size=BLOCK_SIZE,
                  num_blocks=NUM_BLOCKS, shapes=self.shapes, num_layers=NUM_LAYERS, seed=seed)
        return node

    def image(self, seed):
        """What a node's tensors hold after init: per layer, per cache, (blocks + guard) rows."""
        out = []
        for layer in range(NUM_LAYERS):
            for i, shape in enumerate(self.shapes):
                block_bytes = BLOCK_SIZE * int(np.prod(shape)) * 2
                out.append(pattern(seed * 1000 + layer * 10 + i,
                                   (NUM_BLOCKS + 1) * block_bytes).reshape(NUM_BLOCKS + 1, -1))
        return out

    def step(self, node, meta, finished=()):
        return node.call("step", meta=meta, finished_req_ids=list(finished),
                         num_layers=NUM_LAYERS)

    def prefill(self, req_id, prompt_len, p_blocks):
        """The prefill node serves a prompt (max_tokens 1) and keeps its blocks for the decode
        node: the kv_transfer_params its request_finished returns."""
        req = Request(req_id, list(range(prompt_len)), {"do_remote_decode": True})
        assert self.p_sched.get_num_new_matched_tokens(req, 0) == (0, False)
        self.p_sched.update_state_after_alloc(req, KVCacheBlocks(p_blocks), 0)
        assert self.step(self.p, self.p_sched.build_connector_meta(SchedulerOutput())) == \
            (set(), None)
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        delay, params = self.p_sched.request_finished(req, p_blocks)
        assert delay and params["remote_block_ids"] == p_blocks
        assert params["remote_host"] == "prefill-node" and params["remote_port"] == RPC_PORT
        meta = self.p_sched.build_connector_meta(SchedulerOutput())
        assert req_id in meta.reqs_to_send
        assert self.step(self.p, meta) == (set(), None)
        return params

    def decode(self, req_id, prompt_len, params, d_blocks, num_hashed):
        """The decode node takes the request with num_hashed blocks of prefix-cache hit and
        pulls the rest; returns what get_finished said once the pull ended."""
        req = Request(req_id, list(range(prompt_len)), dict(params))
        computed = num_hashed * BLOCK_SIZE
        n, load_async = self.d_sched.get_num_new_matched_tokens(req, computed)
        assert (n, load_async) == (prompt_len - computed, True)
        self.d_sched.update_state_after_alloc(req, KVCacheBlocks(d_blocks, num_hashed), n)
        meta = self.d_sched.build_connector_meta(SchedulerOutput())
        assert list(meta.requests) == [req_id]
        assert meta.requests[req_id].local_block_ids == d_blocks[num_hashed:]
        assert self.step(self.d, meta) == (None, set())
        self.d.call("drain")
        return self.step(self.d, self.d_sched.build_connector_meta(SchedulerOutput()))

    def expect_pulled(self, p_blocks, d_blocks, num_hashed, prefill_seed):
        src = self.image(prefill_seed)
        tail = p_blocks[-(len(d_blocks) - num_hashed):]
        for exp, s in zip(self.expected, src):
            for p, d in zip(tail, d_blocks[num_hashed:]):
                exp[d] = s[p]

    def check(self):
        got = self.d.call("dump")
        assert len(got) == len(self.expected)
        for t, (g, e) in enumerate(zip(got, self.expected)):
            g = np.frombuffer(g, np.uint8).reshape(e.shape)
            bad = np.flatnonzero((g != e).any(axis=1))
            assert bad.size == 0, f"tensor {t}: blocks {bad.tolist()} differ " \
                f"(block {NUM_BLOCKS} is the guard)"
        # the prefill side's caches are what it seeded: pulls only read them
        got = self.p.call("dump")
        for g, e in zip(got, self.image(self.prefill_seed)):
            assert np.array_equal(np.frombuffer(g, np.uint8).reshape(e.shape), e)

    def close(self):
        for node in self.nodes:
            if node.proc.poll() is None:
                node.call_exit()

    def request(self, req_id, prompt_len, p_blocks, d_blocks, num_hashed=0):
        params = self.prefill(req_id, prompt_len, p_blocks)
        assert self.decode(req_id, prompt_len, params, d_blocks, num_hashed) == \
            (None, {req_id})
        # the decode node told the prefill node (ReqForFinished) before it said finished
        assert self.step(self.p, self.p_sched.build_connector_meta(SchedulerOutput())) == \
            ({req_id}, None)
        self.expect_pulled(p_blocks, d_blocks, num_hashed, self.prefill_seed)
        self.check()


@pytest.fixture
def pd_factory(tmp_path, daemons):
    made = []

    def make(shapes, **options):
        pd = PD(tmp_path, daemons, shapes, **options)
        made.append(pd)
        return pd

    yield make
    for pd in made:
        pd.close()


@pytest.mark.parametrize("shapes", [GQA, MLA], ids=["gqa", "mla"])
def test_pull_per_request(pd_factory, shapes):
    """Requests pulled in turn over the one link the first made: scattered block tables on both
    sides, a partial last block, and a prefix-cache hit whose tail is pulled."""
    pd = pd_factory(shapes)
    # 3 blocks, the last one partial; scattered, out of order on both sides
    pd.request("req-1", 2 * BLOCK_SIZE + 5, [7, 2, 10], [4, 9, 1])
    # a prefix hit of 2 blocks: the decode node pulls the last 2 of the prefill's 4
    pd.request("req-2", 4 * BLOCK_SIZE, [3, 11, 0, 6], [8, 5, 0, 11], num_hashed=2)
    # blocks pulled before are overwritten by a later request's
    pd.request("req-3", BLOCK_SIZE, [5], [4])


UPSTREAM_SHA256 = "a4ee6728045cb4e16d11ec880b14c6a7bb641583ac09d235e9c4a608963e2ac4"


def test_pinned_copy_is_upstream_but_its_import():
    """The connector under test is vllm-ascend's file at 848419d1 with only the import
    changed: turning those lines back gives upstream's bytes."""
    import hashlib
    path = os.path.join(HERE, "vllm_ascend_connector", "llmdatadist_c_mgr_connector.py")
    with open(path, "rb") as f:
        text = f.read()
    changed = [(b"import kvdist as llm_datadist  # type: ignore\n",
                b"import llm_datadist  # type: ignore\n"),
               (b"from kvdist import (BlocksCacheKey,", b"from llm_datadist import (BlocksCacheKey,")]
    for ours, theirs in changed:
        assert text.count(ours) == 1
        text = text.replace(ours, theirs)
    assert hashlib.sha256(text).hexdigest() == UPSTREAM_SHA256


def wait_link_status(node, cluster_id, want):
    deadline = time.monotonic() + REPLY_CEILING_S
    while True:
        got = node.call("link_status", cluster_id=cluster_id)
        if got == want:
            return
        assert time.monotonic() < deadline, f"link to {cluster_id}: {got}, not {want}"
        time.sleep(0.05)


def test_prefill_restart_and_relink(pd_factory):
    """A prefill node that restarts (its worker killed, a new one on the same kvdistd with the
    same cluster id from the rank table) links the same comm_name again when the decode node
    asks for its metadata, and waits (PREPARING) in its listener thread. The decode node still
    has the cluster in its linked_cluster, so it skips link() and pulls over the link that
    ended: the pull fails at once and the connector only logs it (the request never finishes:
    the connector has no path for a failed load). Its own remove_remote_agent() and
    add_remote_agent(), which it calls on no failure, end the failed link and link again: the
    domain forms with the waiting prefill, and the next request is pulled byte-exact from the
    new prefill's caches, the failed request's blocks untouched."""
    pd = pd_factory(GQA)
    pd.request("req-1", 2 * BLOCK_SIZE + 5, [7, 2, 10], [4, 9, 1])

    pd.p.kill()
    wait_link_status(pd.d, PREFILL_CLUSTER, "LLM_NOT_YET_LINK")
    pd.prefill_seed = 3
    pd.p_sched = scheduler("kv_producer", "prefill-node")
    pd.p = pd.start_node("prefill", pd.pd, "prefill-node", "kv_producer", pd.prefill_seed)

    params = pd.prefill("req-2", 2 * BLOCK_SIZE, [1, 5])
    assert pd.decode("req-2", 2 * BLOCK_SIZE, params, [2, 3], 0) == (None, set())
    assert any(m.startswith("KV transfer task failed: ") and "pull_blocks" in m
               for m in pd.d.call("errors"))
    [(message, status)] = pd.d.call("failures")
    assert status == "LLM_NOT_YET_LINK", message
    # the prefill's listener linked again and waits for the decode node
    assert pd.p.call("link_status", cluster_id=DECODE_CLUSTER) == "LLM_NOT_YET_LINK"
    pd.check()      # the failed pull wrote nothing

    # unlink() of the failed domain succeeds (else the connector keeps the cluster)
    assert pd.d.call("remove_remote_agent", cluster_id=PREFILL_CLUSTER) == []
    metadata = dict(super_pod_id=None, server_id="prefill-node", device_id="0",
                    device_ip=pd.pd.peer_addr, super_device_id=None, cluster_id=PREFILL_CLUSTER)
    assert pd.d.call("add_remote_agent", metadata=metadata) == PREFILL_CLUSTER
    assert pd.d.call("link_status", cluster_id=PREFILL_CLUSTER) == "OK"
    wait_link_status(pd.p, DECODE_CLUSTER, "OK")

    pd.request("req-3", 3 * BLOCK_SIZE, [4, 8, 0], [6, 10, 7])
    pd.request("req-4", 2 * BLOCK_SIZE + 1, [11, 9, 3], [5, 0, 8], num_hashed=1)


def test_stopped_prefill_daemon(pd_factory):
    """The prefill node's kvdistd stopped (SIGSTOP) while the decode node pulls over the link
    it has: the pull fails with LLM_TIMEOUT at the connector's sync_kv_timeout (1 s here; the
    daemons' heartbeat timeout is far longer, so the peer is not lost meanwhile). Continued,
    the daemon writes nothing late into the timed-out request's blocks, and the same link
    carries the next requests byte-exact."""
    pd = pd_factory(GQA, timeout_ms=1000, heartbeat_ms=(200, 600000))
    pd.request("req-1", 2 * BLOCK_SIZE + 5, [7, 2, 10], [4, 9, 1])
    pd.pd.proc.send_signal(signal.SIGSTOP)
    try:
        params = pd.prefill("req-2", 2 * BLOCK_SIZE, [1, 5])
        assert pd.decode("req-2", 2 * BLOCK_SIZE, params, [2, 3], 0) == (None, set())
        [(message, status)] = pd.d.call("failures")
        assert status == "LLM_TIMEOUT", message
    finally:
        pd.pd.proc.send_signal(signal.SIGCONT)
    assert pd.d.call("link_status", cluster_id=PREFILL_CLUSTER) == "OK"
    pd.request("req-3", 3 * BLOCK_SIZE, [4, 8, 0], [6, 10, 7])
    pd.request("req-4", BLOCK_SIZE, [2], [3])
    pd.check()          # req-2's blocks (2, 3) were not written: req-4 wrote 3 as pulled
    assert pd.d.call("failures") == []


def test_killed_prefill_node(pd_factory):
    """The prefill node's kvdistd killed between requests (MLA): the decode side's link to it
    ends (LLM_NOT_YET_LINK), and the next request's pull over the connector's cached link fails
    at once with that status, its blocks untouched; the prefill worker's listener still
    answers the metadata request, so only the pull tells."""
    pd = pd_factory(MLA)
    pd.request("req-1", 2 * BLOCK_SIZE + 5, [7, 2, 10], [4, 9, 1])
    pd.pd.kill()
    wait_link_status(pd.d, PREFILL_CLUSTER, "LLM_NOT_YET_LINK")
    params = pd.prefill("req-2", 2 * BLOCK_SIZE, [1, 5])
    assert pd.decode("req-2", 2 * BLOCK_SIZE, params, [2, 3], 0) == (None, set())
    [(message, status)] = pd.d.call("failures")
    assert status == "LLM_NOT_YET_LINK", message
    got = pd.d.call("dump")
    for g, e in zip(got, pd.expected):
        assert np.array_equal(np.frombuffer(g, np.uint8).reshape(e.shape), e)


def loopback(pid, node, device):
    """A loopback address of this test process for a device: 127.0.0.0/8 is all on lo, and
    the pid keeps tests running at once (other checkouts) off each other's port 7400."""
    return f"127.{100 + pid % 100}.{(pid // 100) % 250}.{node * 10 + device + 1}"


def test_tensor_parallel_2(tmp_path, daemons):
    """TP 2 on both nodes, each device at an address of its own (kvdistd's devices[].address,
    HCCL's device_ip in the rank table): each TP rank's connector links its own comm domain
    (named after the two ranks' device_ips) and the decode rank pulls its prefill rank's
    blocks; every byte of every rank's caches checked."""
    import json
    tp = 2
    pid = os.getpid()
    nodes_daemons = []
    for k, name in enumerate(("prefill", "decode")):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({"devices": [
            {"device_id": r, "address": loopback(pid, k, r)} for r in range(tp)]}))
        nodes_daemons.append(daemons(name, ("--config", str(cfg))))
    table = {
        f"{name}_device_list": [
            {"server_id": f"{name}-node", "device_id": str(r), "device_ip": loopback(pid, k, r),
             "cluster_id": str((k + 1) * 10 + r)} for r in range(tp)]
        for k, name in enumerate(("prefill", "decode"))}
    rank_table = tmp_path / "ranktable.json"
    rank_table.write_text(json.dumps(table))

    def image(seed, rank):
        out = []
        for layer in range(NUM_LAYERS):
            for i, shape in enumerate(GQA):
                block_bytes = BLOCK_SIZE * int(np.prod(shape)) * 2
                out.append(pattern((seed * 10 + rank) * 1000 + layer * 10 + i,
                                   (NUM_BLOCKS + 1) * block_bytes).reshape(NUM_BLOCKS + 1, -1))
        return out

    procs = {}
    try:
        for k, (name, role) in enumerate((("prefill", "kv_producer"), ("decode", "kv_consumer"))):
            for r in range(tp):
                node = NodeProc(tmp_path, f"{name}-{r}", nodes_daemons[k], f"{name}-node",
                                rank_table, tp_rank=r, tp_size=tp)
                procs[name, r] = node
                node.call("init", kv_role=role, tp_size=tp, block_size=BLOCK_SIZE,
                          num_blocks=NUM_BLOCKS, shapes=GQA, num_layers=NUM_LAYERS,
                          seed=(k + 1) * 10 + r)
        scheds = []
        for role, server_id in (("kv_producer", "prefill-node"), ("kv_consumer", "decode-node")):
            network_utils.ip = server_id
            try:
                config = VllmConfig(KVTransferConfig(kv_role=role, engine_id=role),
                                    CacheConfig(block_size=BLOCK_SIZE),
                                    ParallelConfig(tensor_parallel_size=tp))
                scheds.append(conn.LLMDataDistCMgrConnector(config, KVConnectorRole.SCHEDULER))
            finally:
                network_utils.ip = None
        p_sched, d_sched = scheds

        def step(name, meta):
            # vLLM gives every TP worker the scheduler's output; each reports its own finished
            return [procs[name, r].call("step", meta=meta, finished_req_ids=[],
                                        num_layers=NUM_LAYERS) for r in range(tp)]

        expected = [image(2, r) for r in range(tp)]
        for req_id, prompt_len, p_blocks, d_blocks, hashed in (
                ("req-1", 2 * BLOCK_SIZE + 5, [7, 2, 10], [4, 9, 1], 0),
                ("req-2", 4 * BLOCK_SIZE, [3, 11, 0, 6], [8, 5, 0, 11], 2)):
            req = Request(req_id, list(range(prompt_len)), {"do_remote_decode": True})
            p_sched.update_state_after_alloc(req, KVCacheBlocks(p_blocks), 0)
            assert step("prefill", p_sched.build_connector_meta(SchedulerOutput())) == \
                [(set(), None)] * tp
            req.status = RequestStatus.FINISHED_LENGTH_CAPPED
            _, params = p_sched.request_finished(req, p_blocks)
            assert params["remote_tp_size"] == str(tp)
            assert step("prefill", p_sched.build_connector_meta(SchedulerOutput())) == \
                [(set(), None)] * tp
            dreq = Request(req_id, list(range(prompt_len)), dict(params))
            n, _ = d_sched.get_num_new_matched_tokens(dreq, hashed * BLOCK_SIZE)
            d_sched.update_state_after_alloc(dreq, KVCacheBlocks(d_blocks, hashed), n)
            assert step("decode", d_sched.build_connector_meta(SchedulerOutput())) == \
                [(None, set())] * tp
            for r in range(tp):
                procs["decode", r].call("drain")
            assert step("decode", d_sched.build_connector_meta(SchedulerOutput())) == \
                [(None, {req_id})] * tp, [procs["decode", r].call("failures") for r in range(tp)]
            assert step("prefill", p_sched.build_connector_meta(SchedulerOutput())) == \
                [({req_id}, None)] * tp
            tail = p_blocks[-(len(d_blocks) - hashed):]
            for r in range(tp):
                for exp, src in zip(expected[r], image(1, r)):
                    for p, d in zip(tail, d_blocks[hashed:]):
                        exp[d] = src[p]
        for r in range(tp):
            for t, (g, e) in enumerate(zip(procs["decode", r].call("dump"), expected[r])):
                g = np.frombuffer(g, np.uint8).reshape(e.shape)
                bad = np.flatnonzero((g != e).any(axis=1))
                assert bad.size == 0, f"rank {r} tensor {t}: blocks {bad.tolist()} differ"
            for g, e in zip(procs["prefill", r].call("dump"), image(1, r)):
                assert np.array_equal(np.frombuffer(g, np.uint8).reshape(e.shape), e)
    finally:
        for node in procs.values():
            if node.proc.poll() is None:
                node.call_exit()
