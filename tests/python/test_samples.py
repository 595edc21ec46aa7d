# SPDX-License-Identifier: MIT
"""The flows of LLM-DataDist's nine Python samples (hicann/hixl examples/python/llm_datadist),
written anew for kvdist: the same calls in the same order with the same arguments (roles,
cluster ids, cache ids, keys, the 1.2 rank table with host_ip, LlmConfig options, link and
unlink, switch_role, pulls, pushes, transfer_cache_async, remove_cache_key after a pull, xPyD,
the hixl transfer backend), each side a process of its own on a kvdistd of its own, as the
samples run. What differs: the tensors are kvdist memory framed by guard bytes and filled with
seeded patterns instead of ones and zeros, the host addresses are the two daemons' (each
daemon's own peer address serves as every cluster's listen_ip_info and host_ip), the sides
meet at barriers the test runs instead of torch.distributed's and the xPyD sample's sleeps,
and every byte of every cache, guards included, is checked at the end.

Each side is this file run as a script (python3 test_samples.py FLOW SIDE OUT ADDRESSES...),
as the samples are run with their --cluster_id or --role arguments."""

import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

if __name__ != "__main__":
    from conftest import GUARD, pattern
else:
    GUARD = 64

    def pattern(seed, nbytes):
        return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)

RUN_TIMEOUT_S = 300  # a ceiling; a run ends when every side exits
MEM_POOL_SIZE = 64 * 1024 * 1024

# ---------------------------------------------------------------------------------------------
# One side (a process). barrier() waits until every side of the run has called it as often.


def barrier():
    print("barrier", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("the test ended the run")


class Side:
    def __init__(self, out, name):
        self.out, self.name = out, name

    def guarded(self, dd, num_tensors, shape, dtype, seed):
        """num_tensors tensors of shape and dtype in kvdist memory, each between GUARD bytes,
        all seeded; (memory, tensor addresses)."""
        import kvdist

        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        mem = kvdist.empty((num_tensors, GUARD + nbytes + GUARD), np.uint8, datadist=dd)
        mem.reshape(-1)[:] = pattern(seed, mem.size)
        return mem, [mem[t, GUARD:].__array_interface__["data"][0] for t in range(num_tensors)]

    def fill_pool(self, cache, seed):
        """Writes a seeded pattern into a pool cache (what a model writes into its KV)."""
        size = cache.cache_desc.size
        image = pattern(seed, size * len(cache.tensor_addrs))
        for t, a in enumerate(cache.tensor_addrs):
            ctypes.memmove(a, image[t * size:].ctypes.data, size)

    def pool_bytes(self, cache):
        size = cache.cache_desc.size
        return np.stack([np.frombuffer(ctypes.string_at(a, size), np.uint8)
                         for a in cache.tensor_addrs])

    def save(self, what, array):
        np.save(os.path.join(self.out, f"{self.name}-{what}.npy"), np.array(array, copy=True))


def config(device_id=0, **props):
    from kvdist import LLMConfig

    c = LLMConfig()
    if device_id is not None:
        c.device_id = device_id
    for k, v in props.items():
        setattr(c, k, v)
    return c.generate_options()


def cluster(remote_id, local=None, remote=None):
    from kvdist import LLMClusterInfo

    c = LLMClusterInfo()
    c.remote_cluster_id = remote_id
    if local is not None:
        c.append_local_ip_info(*local)
    if remote is not None:
        c.append_remote_ip_info(*remote)
    return c


def ok(ret):
    from kvdist import LLMStatusCode

    status, _ = ret
    if status != LLMStatusCode.LLM_SUCCESS:
        raise RuntimeError(f"{status}")


def split(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def rank_table_link(dd, prompt_host, decoder_host):
    """pull_cache_sample.py's link(): comm domain "link" of clusters 1 and 2 over a 1.2 rank
    table, then query_register_mem_status() until OK."""
    from kvdist import RegisterMemStatus

    table = {"server_count": "2", "status": "completed", "version": "1.2", "server_list": [
        {"device": [{"device_id": "0", "device_ip": "192.168.1.1", "rank_id": "0"}],
         "host_ip": prompt_host, "server_id": "1"},
        {"device": [{"device_id": "0", "device_ip": "192.168.2.1", "rank_id": "1"}],
         "host_ip": decoder_host, "server_id": "2"}]}
    comm_id = dd.link("link", {1: 0, 2: 1}, json.dumps(table))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        st = dd.query_register_mem_status(comm_id)
        if st == RegisterMemStatus.OK:
            return comm_id
        if st == RegisterMemStatus.FAILED or time.monotonic() > deadline:
            raise RuntimeError(f"link failed: {st} {dd.last_error}")
        time.sleep(0.01)


def rank_table_init(role_side, mem_pool):
    from kvdist import LLMDataDist, LLMRole

    cluster_id = 1 if role_side == "prompt" else 2
    dd = LLMDataDist(LLMRole.PROMPT if cluster_id == 1 else LLMRole.DECODER, cluster_id)
    props = {"enable_cache_manager": True}
    if mem_pool:
        props["mem_pool_cfg"] = f'{{"memory_size": {MEM_POOL_SIZE}}}'
    dd.init(config(**props))
    return dd


def flow_pull_cache(s, side, a, b):
    from kvdist import CacheDesc, CacheKey, DataType, Placement

    dd = rank_table_init(side, True)
    comm_id = rank_table_link(dd, a, b)
    cm = dd.cache_manager
    desc = CacheDesc(num_tensors=4, shape=[2, 16 * 1024], data_type=DataType.DT_FLOAT16,
                     placement=Placement.DEVICE)
    k0 = CacheKey(prompt_cluster_id=1, req_id=0, model_id=0)
    k1 = CacheKey(prompt_cluster_id=1, req_id=1, model_id=0)
    if side == "decoder":
        cache = cm.allocate_cache(desc)
        assert cache.cache_id == 1
        s.fill_pool(cache, 21)
        barrier()  # cache ready
        cm.pull_cache(k0, cache, batch_index=0)
        cm.pull_cache(k1, cache, batch_index=1)
        s.save("cache", s.pool_bytes(cache))
        barrier()  # pull_cache end
        dd.unlink(comm_id)
        barrier()  # peer unlinked
        cm.deallocate_cache(cache)
    else:
        cache = cm.allocate_cache(desc, [k0, k1])
        assert cache.cache_id == 1
        s.fill_pool(cache, 11)
        barrier()
        barrier()
        dd.unlink(comm_id)
        barrier()
        s.save("cache", s.pool_bytes(cache))
        cm.remove_cache_key(k0)  # a no-op after the pull, as in llm_datadist
        cm.remove_cache_key(k1)
        cm.deallocate_cache(cache)
    dd.finalize()


def flow_pull_from_cache_to_blocks(s, side, a, b):
    from kvdist import CacheDesc, CacheKey, DataType, Placement

    dd = rank_table_init(side, True)
    cm = dd.cache_manager
    desc = CacheDesc(num_tensors=4, shape=[2, 16 * 1024], data_type=DataType.DT_FLOAT16,
                     placement=Placement.DEVICE)
    key = CacheKey(prompt_cluster_id=1, req_id=0, model_id=0)
    if side == "decoder":
        mem, addrs = s.guarded(dd, 4, [2, 16 * 1024], np.float16, 22)
        cache = cm.register_blocks_cache(desc, addrs)
        comm_id = rank_table_link(dd, a, b)
        barrier()  # cache ready
        cm.pull_blocks(key, cache, src_blocks=[], dst_blocks=[0])
        s.save("mem", mem)
        barrier()  # pull_blocks end
        dd.unlink(comm_id)
        barrier()
    else:
        comm_id = rank_table_link(dd, a, b)
        cache = cm.allocate_cache(desc, [key])
        s.fill_pool(cache, 12)
        barrier()
        barrier()
        dd.unlink(comm_id)
        barrier()
        s.save("cache", s.pool_bytes(cache))
        cm.remove_cache_key(key)
        cm.deallocate_cache(cache)
    dd.finalize()


def flow_pull_blocks(s, side, a, b):
    from kvdist import BlocksCacheKey, Cache, CacheDesc, DataType, Placement

    dd = rank_table_init(side, False)
    cm = dd.cache_manager
    desc = CacheDesc(num_tensors=1, shape=[2, 1024 * 1024], data_type=DataType.DT_FLOAT,
                     placement=Placement.DEVICE)
    if side == "decoder":
        mem, addrs = s.guarded(dd, 1, [2, 1024 * 1024], np.float32, 23)
        cache = cm.register_blocks_cache(desc, [addrs[0]])
        comm_id = rank_table_link(dd, a, b)
        barrier()  # cache ready
        cm.pull_blocks(BlocksCacheKey(1, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 1])
        s.save("mem", mem)
        # swap out to a cpu cache and back in
        cpu = np.frombuffer(pattern(33, 2 * 4 * 1024 * 1024 + 2 * GUARD), np.uint8).copy()
        cpu_desc = CacheDesc(num_tensors=1, shape=[2, 1024 * 1024],
                             data_type=DataType.DT_FLOAT, placement=Placement.HOST)
        cpu_cache = Cache.create_cpu_cache(cpu_desc, [cpu[GUARD:].ctypes.data])
        cm.swap_blocks(cache, cpu_cache, {0: 0, 1: 1})
        s.save("cpu", cpu)
        mem[0, GUARD:-GUARD] = pattern(43, mem.shape[1] - 2 * GUARD)  # seen if swapped in
        cm.swap_blocks(cpu_cache, cache, {0: 0, 1: 1})
        s.save("swapped-in", mem)
        barrier()  # pull_blocks end
        dd.unlink(comm_id)
        barrier()
    else:
        mem, addrs = s.guarded(dd, 1, [2, 1024 * 1024], np.float32, 13)
        cm.register_blocks_cache(desc, [addrs[0]], BlocksCacheKey(1, 0))
        comm_id = rank_table_link(dd, a, b)
        barrier()
        barrier()
        dd.unlink(comm_id)
        barrier()
    dd.finalize()


PROMPT, DECODER = 0, 1  # the cluster ids of the samples that take hosts as arguments
BLOCKS = dict(num_tensors=2, shape=[3, 10])


def host_init(side, a, b, listen, **props):
    """init_llm_datadist() of the samples with --local_host_ip/--remote_host_ip: cluster 0 the
    prompt, 1 the decoder; listen: which sides listen (their daemon's address)."""
    from kvdist import LLMDataDist, LLMRole

    prompt = side == "prompt"
    dd = LLMDataDist(LLMRole.PROMPT if prompt else LLMRole.DECODER, PROMPT if prompt else DECODER)
    if side in listen:
        props["listen_ip_info"] = a if prompt else b
    dd.init(config(**props))
    return dd


def blocks_desc():
    from kvdist import CacheDesc, DataType, Placement

    return CacheDesc(num_tensors=2, shape=[3, 10], data_type=DataType.DT_FLOAT,
                     placement=Placement.DEVICE)


def flow_push_blocks(s, side, a, b, backend=""):
    from kvdist import BlocksCacheKey

    props = {"local_comm_res": ""}
    if backend:
        props["transfer_backend"] = backend
    dd = host_init(side, a, b, ("prompt", "decoder"), **props)
    cm = dd.cache_manager
    if side == "prompt":
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 14)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(PROMPT, 0))
        barrier()  # registered
        barrier()  # decoder pushed
        s.save("mem", mem)
        ok(dd.unlink_clusters([cluster(DECODER)], 5000, force=True))
    else:
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 24)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(DECODER, 0))
        barrier()
        ok(dd.link_clusters([cluster(PROMPT, split(b), split(a))], 5000))
        cm.push_blocks(BlocksCacheKey(PROMPT, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 2])
        barrier()
        ok(dd.unlink_clusters([cluster(PROMPT)], 5000, force=True))
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


def flow_push_cache(s, side, a, b, backend=""):
    from kvdist import CacheKeyByIdAndIndex

    props = {"local_comm_res": ""}
    if backend:
        props["transfer_backend"] = backend
    dd = host_init(side, a, b, ("prompt", "decoder"), **props)
    cm = dd.cache_manager
    if side == "prompt":
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 15)
        cache = cm.register_cache(blocks_desc(), addrs)
        assert cache.cache_id == 1
        barrier()  # registered
        barrier()  # decoder pushed
        s.save("mem", mem)
        barrier()  # decoder unlinked
    else:
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 25)
        cache = cm.register_cache(blocks_desc(), addrs)
        barrier()
        ok(dd.link_clusters([cluster(PROMPT, split(b), split(a))], 5000))
        cm.push_cache(CacheKeyByIdAndIndex(cluster_id=PROMPT, cache_id=1, batch_index=0), cache,
                      src_batch_index=0)
        barrier()
        ok(dd.unlink_clusters([cluster(PROMPT, remote=split(a))], 5000))
        barrier()
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


def flow_switch_role(s, side, a, b):
    from kvdist import BlocksCacheKey, LLMRole

    dd = host_init(side, a, b, ("prompt",), local_comm_res="")
    cm = dd.cache_manager
    if side == "prompt":
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 16)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(PROMPT, 0))
        barrier()  # registered
        barrier()  # decoder pulled and unlinked
        dd.switch_role(LLMRole.DECODER)
        barrier()  # prompt switched: no longer listens
        barrier()  # decoder switched: listens
        ok(dd.link_clusters([cluster(DECODER, split(a), split(b))], 5000))
        barrier()  # prompt linked
        barrier()  # decoder pushed
        s.save("mem", mem)
        ok(dd.unlink_clusters([cluster(DECODER)], 5000, force=True))
    else:
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 26)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(DECODER, 0))
        barrier()
        ok(dd.link_clusters([cluster(PROMPT, split(b), split(a))], 5000))
        cm.pull_blocks(BlocksCacheKey(PROMPT, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 2])
        s.save("pulled", mem)
        ok(dd.unlink_clusters([cluster(PROMPT, remote=split(a))], 5000))
        barrier()
        barrier()
        dd.switch_role(LLMRole.PROMPT, config(None, listen_ip_info=b))
        barrier()
        barrier()
        cm.push_blocks(BlocksCacheKey(PROMPT, 0), cache, src_blocks=[0, 1, 2],
                       dst_blocks=[0, 1, 2], src_layer_range=range(0, 2),
                       dst_layer_range=range(0, 2), tensor_num_per_layer=1)
        barrier()
        ok(dd.unlink_clusters([cluster(PROMPT)], 5000, force=True))
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


def flow_transfer_cache_async(s, side, a, b, backend=""):
    from kvdist import BlocksCacheKey, LayerSynchronizer, TransferWithCacheKeyConfig

    class Synchronizer(LayerSynchronizer):
        def __init__(self, ret=True):
            self._ret = ret

        def synchronize_layer(self, layer_index, timeout_in_millis):
            return self._ret

    props = {"enable_cache_manager": True, "enable_remote_cache_accessible": True}
    if backend:
        props["transfer_backend"] = backend
    dd = host_init(side, a, b, ("prompt", "decoder"), **props)
    cm = dd.cache_manager
    if side == "prompt":
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 17)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(PROMPT, 0))
        barrier()  # registered
        ok(dd.link_clusters([cluster(DECODER, split(a), split(b))], 5000))
        config_ = TransferWithCacheKeyConfig(BlocksCacheKey(DECODER, 0), range(0, 1),
                                             range(0, 1))
        task = cm.transfer_cache_async(cache, Synchronizer(True), [config_])
        task.get_results()
        barrier()  # transferred
        ok(dd.unlink_clusters([cluster(DECODER)], 5000, force=True))
    else:
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 27)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(DECODER, 0))
        barrier()
        barrier()
        s.save("mem", mem)
        ok(dd.unlink_clusters([cluster(PROMPT)], 5000, force=True))
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


def flow_hixl_transfer_backend(s, side, a, b):
    from kvdist import BlocksCacheKey

    dd = host_init(side, a, b, ("prompt", "decoder"), local_comm_res="",
                   transfer_backend="hixl")
    cm = dd.cache_manager
    if side == "prompt":
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 18)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(PROMPT, 0))
        barrier()  # registered
        ok(dd.link_clusters([cluster(DECODER, split(a), split(b))], 5000))
        cm.pull_blocks(BlocksCacheKey(DECODER, 0), cache, src_blocks=[2], dst_blocks=[2])
        barrier()  # decoder pushed
        ok(dd.unlink_clusters([cluster(DECODER)], 5000))
        barrier()  # both unlinked
        s.save("mem", mem)
    else:
        mem, addrs = s.guarded(dd, 2, [3, 10], np.float32, 28)
        cache = cm.register_blocks_cache(blocks_desc(), addrs, BlocksCacheKey(DECODER, 0))
        barrier()
        ok(dd.link_clusters([cluster(PROMPT, split(b), split(a))], 5000))
        cm.push_blocks(BlocksCacheKey(PROMPT, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 1])
        barrier()
        ok(dd.unlink_clusters([cluster(PROMPT)], 5000))
        barrier()
        s.save("mem", mem)
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


def ip_port_to_int(ip_port):
    ip, port = ip_port.rsplit(":", 1)
    return (int.from_bytes(bytes(int(x) for x in ip.split(".")), "big") << 16) | int(port)


def flow_pull_blocks_xpyd(s, side, local, *remotes):
    """side "p0", "p1" (prompts listening at local) or "d" (pulls from every remote)."""
    from kvdist import BlocksCacheKey, CacheDesc, DataType, LLMDataDist, LLMRole, Placement

    me = ip_port_to_int(local)
    dd = LLMDataDist(LLMRole.PROMPT if side != "d" else LLMRole.DECODER, me)
    props = {"local_comm_res": ""}
    if side != "d":
        props["listen_ip_info"] = local
    dd.init(config(**props))
    cm = dd.cache_manager
    desc = CacheDesc(num_tensors=1, shape=[3, 10], data_type=DataType.DT_FLOAT,
                     placement=Placement.DEVICE)
    mem, addrs = s.guarded(dd, 1, [3, 10], np.float32, 19 + me % 1000)
    cache = cm.register_blocks_cache(desc, [addrs[0]], BlocksCacheKey(me, 0))
    barrier()  # every side registered (the samples sleep instead)
    if side == "d":
        clusters = [cluster(ip_port_to_int(r), (local.rsplit(":", 1)[0], 0), split(r))
                    for r in remotes]
        ok(dd.link_clusters(clusters, 5000))
        for i, r in enumerate(remotes):
            cm.pull_blocks(BlocksCacheKey(ip_port_to_int(r), 0), cache, src_blocks=[0, 1],
                           dst_blocks=[0, 2])
            s.save(f"after-{i}", mem)
        ok(dd.unlink_clusters(clusters, 5000))
    barrier()  # the decoder is done (the prompts sleep 30 s instead)
    s.save("mem", mem)
    cm.unregister_cache(cache.cache_id)
    dd.finalize()


# ---------------------------------------------------------------------------------------------
# The test: start the sides, run their barriers, check every byte.


def run_sides(tmp_path, flow, sides):
    """sides: [(name, daemon, [args])]; runs them to the end, returns {name-what: array}."""
    procs = []
    for name, daemon, args in sides:
        env = dict(os.environ, KVDIST_SOCKET=daemon.socket)
        err = open(tmp_path / f"{name}.log", "wb")
        procs.append((name, err, subprocess.Popen(
            [sys.executable, __file__, flow, name, str(tmp_path), *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err, env=env, text=True)))
    # Every side's "barrier" line counts; when all have said it, each is told to go on. A side
    # that exits while the others wait fails the run below (they are killed).
    lock = threading.Lock()
    waiting = [0]

    def pump(proc):
        for line in proc.stdout:
            if line.strip() != "barrier":
                continue
            with lock:
                waiting[0] += 1
                if waiting[0] < len(procs):
                    continue
                waiting[0] = 0
                for _, _, p in procs:
                    try:
                        p.stdin.write("go\n")
                        p.stdin.flush()
                    except BrokenPipeError:
                        pass

    threads = [threading.Thread(target=pump, args=(p,), daemon=True) for _, _, p in procs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    failed = []
    while True:
        states = [(n, p.poll()) for n, _, p in procs]
        bad = [(n, rc) for n, rc in states if rc not in (None, 0)]
        if bad or all(rc == 0 for _, rc in states) or time.monotonic() > deadline:
            failed = bad or [(n, "still running at the ceiling") for n, rc in states
                             if rc is None]
            break
        time.sleep(0.05)
    for _, err, p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        err.close()
    if failed:
        logs = "\n".join(f"--- {n} ({rc}):\n{(tmp_path / f'{n}.log').read_text()[-3000:]}"
                         for n, rc in failed)
        pytest.fail(f"{flow}: {failed}\n{logs}")
    return {f.name[:-4]: np.load(f) for f in tmp_path.glob("*.npy")}


def image(seed, num_tensors, nbytes):
    return pattern(seed, num_tensors * (2 * GUARD + nbytes)).reshape(num_tensors, -1)


def set_units(img, unit_bytes, dst_units, src, src_units, src_tensors=None):
    """img (a guarded image) with unit dst_units[i] of each tensor set to unit src_units[i] of
    src: a guarded image too, or a pool cache's bytes (tensors x bytes, no guards)."""
    out = img.copy()
    for t in range(img.shape[0]):
        st = t if src_tensors is None else src_tensors[t]
        for d, sidx in zip(dst_units, src_units):
            s0 = GUARD + sidx * unit_bytes if src.shape[1] == img.shape[1] else sidx * unit_bytes
            out[t, GUARD + d * unit_bytes:GUARD + (d + 1) * unit_bytes] = \
                src[st, s0:s0 + unit_bytes]
    return out


def assert_bytes(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if not np.array_equal(got, want):
        where = np.argwhere(got != want)
        raise AssertionError(f"{what}: {len(where)} bytes differ, first at (tensor, byte) "
                             f"{tuple(where[0])} (guard bytes: the first and last {GUARD})")


def pool(seed, num_tensors, size):
    return pattern(seed, num_tensors * size).reshape(num_tensors, size)


@pytest.fixture
def two(daemons):
    return daemons("kvdistd-a"), daemons("kvdistd-b")


def test_pull_cache(two, tmp_path):
    a, b = two
    out = run_sides(tmp_path, "pull_cache", [("prompt", a, [a.peer_addr, b.peer_addr]),
                                             ("decoder", b, [a.peer_addr, b.peer_addr])])
    size = 2 * 16 * 1024 * 2
    assert_bytes(out["prompt-cache"], pool(11, 4, size), "prompt's cache")
    assert_bytes(out["decoder-cache"], pool(11, 4, size), "decoder's cache after two pulls")


def test_pull_from_cache_to_blocks(two, tmp_path):
    a, b = two
    out = run_sides(tmp_path, "pull_from_cache_to_blocks",
                    [("prompt", a, [a.peer_addr, b.peer_addr]),
                     ("decoder", b, [a.peer_addr, b.peer_addr])])
    size = 2 * 16 * 1024 * 2
    prompt = pool(12, 4, size)
    assert_bytes(out["prompt-cache"], prompt, "prompt's cache")
    want = set_units(image(22, 4, size), size // 2, [0], prompt, [0])
    assert_bytes(out["decoder-mem"], want, "decoder's block 0 from the prompt's batch item 0")


def test_pull_blocks_and_swap(two, tmp_path):
    a, b = two
    out = run_sides(tmp_path, "pull_blocks", [("prompt", a, [a.peer_addr, b.peer_addr]),
                                              ("decoder", b, [a.peer_addr, b.peer_addr])])
    nbytes = 2 * 4 * 1024 * 1024
    half = nbytes // 2
    prompt = image(13, 1, nbytes)
    pulled = set_units(image(23, 1, nbytes), half, [0, 1], prompt, [0, 1])
    assert_bytes(out["decoder-mem"], pulled, "decoder after pull_blocks")
    cpu = pattern(33, nbytes + 2 * GUARD).copy()
    cpu[GUARD:-GUARD] = prompt[0, GUARD:-GUARD]
    assert_bytes(out["decoder-cpu"][None], cpu[None], "cpu cache after the swap out")
    swapped = pulled.copy()  # the swap in brings back what the decoder overwrote after it
    assert_bytes(out["decoder-swapped-in"], swapped, "decoder after the swap in")


def test_push_blocks(two, tmp_path, backend=""):
    a, b = two
    args = [a.peer_addr, b.peer_addr, backend]
    out = run_sides(tmp_path, "push_blocks", [("prompt", a, args), ("decoder", b, args)])
    unit = 10 * 4
    want = set_units(image(14, 2, 3 * unit), unit, [0, 2], image(24, 2, 3 * unit), [0, 1])
    assert_bytes(out["prompt-mem"], want, "prompt after the decoder's push_blocks")


def test_push_blocks_hixl(two, tmp_path):
    test_push_blocks(two, tmp_path, "hixl")


def test_push_cache(two, tmp_path, backend=""):
    a, b = two
    args = [a.peer_addr, b.peer_addr, backend]
    out = run_sides(tmp_path, "push_cache", [("prompt", a, args), ("decoder", b, args)])
    unit = 10 * 4
    want = set_units(image(15, 2, 3 * unit), unit, [0], image(25, 2, 3 * unit), [0])
    assert_bytes(out["prompt-mem"], want, "prompt after the decoder's push_cache")


def test_push_cache_hixl(two, tmp_path):
    test_push_cache(two, tmp_path, "hixl")


def test_switch_role(two, tmp_path):
    a, b = two
    args = [a.peer_addr, b.peer_addr]
    out = run_sides(tmp_path, "switch_role", [("prompt", a, args), ("decoder", b, args)])
    unit = 10 * 4
    prompt, decoder = image(16, 2, 3 * unit), image(26, 2, 3 * unit)
    pulled = set_units(decoder, unit, [0, 2], prompt, [0, 1])
    assert_bytes(out["decoder-pulled"], pulled, "decoder after pull_blocks")
    want = set_units(prompt, unit, [0, 1, 2], pulled, [0, 1, 2])
    assert_bytes(out["prompt-mem"], want, "prompt after the decoder's push_blocks")


def test_transfer_cache_async(two, tmp_path, backend=""):
    a, b = two
    args = [a.peer_addr, b.peer_addr, backend]
    out = run_sides(tmp_path, "transfer_cache_async", [("prompt", a, args),
                                                       ("decoder", b, args)])
    unit = 10 * 4
    want = set_units(image(27, 2, 3 * unit), unit, [0, 1, 2], image(17, 2, 3 * unit), [0, 1, 2])
    assert_bytes(out["decoder-mem"], want, "decoder after transfer_cache_async of layer 0")


def test_transfer_cache_async_hixl(two, tmp_path):
    test_transfer_cache_async(two, tmp_path, "hixl")


def test_hixl_transfer_backend(two, tmp_path):
    a, b = two
    args = [a.peer_addr, b.peer_addr]
    out = run_sides(tmp_path, "hixl_transfer_backend", [("prompt", a, args),
                                                        ("decoder", b, args)])
    unit = 10 * 4
    prompt, decoder = image(18, 2, 3 * unit), image(28, 2, 3 * unit)
    want = set_units(set_units(prompt, unit, [0, 1], decoder, [0, 1]), unit, [2], decoder, [2])
    assert_bytes(out["prompt-mem"], want, "prompt after push_blocks and pull_blocks")
    assert_bytes(out["decoder-mem"], decoder, "decoder (a source only)")


def test_pull_blocks_xpyd(daemons, tmp_path):
    # 2P1D: a prompt on each daemon (at its address), the decoder beside the second one.
    a, b = daemons("kvdistd-a"), daemons("kvdistd-b")
    p0, p1 = a.peer_addr, b.peer_addr
    d = f"{b.peer_addr.rsplit(':', 1)[0]}:0"
    out = run_sides(tmp_path, "pull_blocks_xpyd", [("p0", a, [p0]), ("p1", b, [p1]),
                                                   ("d", b, [d, p0, p1])])
    unit = 10 * 4
    seed = lambda addr: 19 + ip_port_to_int(addr) % 1000  # noqa: E731
    dec = image(seed(d), 1, 3 * unit)
    for i, p in enumerate((p0, p1)):
        assert_bytes(out[f"p{i}-mem"], image(seed(p), 1, 3 * unit), f"prompt {p}")
        dec = set_units(dec, unit, [0, 2], image(seed(p), 1, 3 * unit), [0, 1])
        assert_bytes(out[f"d-after-{i}"], dec, f"decoder after the pull from {p}")


def test_switch_role_takes_generated_options(daemon):
    """switch_role_sample.py passes a fresh LlmConfig's generate_options(), which always has
    llm.MemoryUtilization: taken (checked as init() checks it); a bad value is refused."""
    import kvdist
    from kvdist import LLMDataDist, LLMException, LLMRole, LLMStatusCode

    dd = LLMDataDist(LLMRole.DECODER, 77)
    dd.init({"ge.exec.deviceId": "0", "socket_path": daemon.socket})  # a client
    bad = {"llm.listenIpInfo": daemon.peer_addr, "llm.MemoryUtilization": "1.5"}
    with pytest.raises(LLMException) as e:
        dd.switch_role(LLMRole.PROMPT, bad)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "llm.MemoryUtilization" in str(e.value)
    c = kvdist.LlmConfig()
    c.listen_ip_info = daemon.peer_addr
    options = c.generate_options()
    assert "llm.MemoryUtilization" in options
    dd.switch_role(LLMRole.PROMPT, options)
    me = [c for c in dd.daemon_status()["clusters"] if c["cluster_id"] == 77]
    assert me and me[0]["listen_ip_info"] is not None, me
    dd.finalize()


FLOWS = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("flow_")}

if __name__ == "__main__":
    flow, side_name, out_dir, *rest = sys.argv[1:]
    # An empty transfer backend is the flow's default (the samples' --transfer_backend "").
    FLOWS[flow](Side(out_dir, side_name), side_name, *[r for r in rest if r != ""])
