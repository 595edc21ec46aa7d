# SPDX-License-Identifier: MIT
"""Transfers between clusters on one daemon through the Python API, every destination byte and
the guard bytes around each tensor checked: blocks and caches, pulled and pushed, layer ranges,
block ids as lists and as numpy arrays of any integer type, pool caches and their keys,
asynchronous tasks, and transfer_cache_async() pushing layer by layer as a synchronizer lets
each layer go."""

import ctypes
import pathlib
import select
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from kvdist import (Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, LayerSynchronizer,
                    LLMClusterInfo, LLMException, LLMRole, LLMStatusCode, Placement,
                    TransferConfig, TransferWithCacheKeyConfig)

from conftest import GUARD, NOT_THERE, Guarded, blocks_key, copy_blocks, pattern

NO_REQ = 2**64 - 1  # a CacheKey's req_id when it names a prefix


def link(dd, remote):
    info = LLMClusterInfo()
    info.remote_cluster_id = remote.cluster_id
    info.remote_role_type = remote.role
    ret, rets = dd.link_clusters([info], 5000)
    assert ret == LLMStatusCode.LLM_SUCCESS, dd.last_error


@pytest.fixture
def pair(daemon, attach):
    """A prompt cluster P and a decoder cluster D on one daemon, D linked to P and P to D."""
    p, d = attach(daemon, LLMRole.PROMPT), attach(daemon, LLMRole.DECODER)
    return p, d


@pytest.mark.parametrize("ids", ["list", "int64", "int32", "uint64", "uint16", "strided"])
def test_pull_blocks(pair, ids):
    p, d = pair
    src = Guarded(p, 4, 32, 96, seed=1, key=blocks_key(p))
    dst = Guarded(d, 4, 24, 96, seed=2)
    link(d, p)
    sb = [(i * 7) % 32 for i in range(20)]
    db = [23 - i for i in range(20)]
    if ids == "list":
        args = (sb, db)
    elif ids == "strided":
        args = (np.repeat(np.array(sb, np.int64), 2)[::2], np.array(db, np.int64)[::-1][::-1])
        assert not args[0].flags.contiguous
    else:
        args = (np.array(sb, dtype=ids), np.array(db, dtype=ids))
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, *args)
    dst.check(copy_blocks(dst.expected(), dst, src, sb, db))
    src.check_untouched()


def test_pull_blocks_layers(pair):
    p, d = pair
    # 3 layers of K and V: tensors 0..5.
    src = Guarded(p, 6, 8, 64, seed=3, key=blocks_key(p, 1))
    dst = Guarded(d, 6, 8, 64, seed=4)
    link(d, p)
    cm = d.cache_manager
    cm.pull_blocks(blocks_key(p, 1), dst.cache, [1, 2], [3, 4], src_layer_range=range(2, 3),
                   dst_layer_range=range(0, 1))
    expected = copy_blocks(dst.expected(), dst, src, [1, 2], [3, 4], [(4, 0), (5, 1)])
    dst.check(expected)
    # One tensor per layer: layer 3 is tensor 3.
    cm.pull_blocks(blocks_key(p, 1), dst.cache, [7], [7], src_layer_range=range(1, 4),
                   dst_layer_range=range(3, 6), tensor_num_per_layer=1)
    dst.check(copy_blocks(expected, dst, src, [7], [7], [(1, 3), (2, 4), (3, 5)]))
    with pytest.raises(LLMException) as e:
        cm.pull_blocks(blocks_key(p, 1), dst.cache, [0], [0], src_layer_range=range(0, 2),
                       dst_layer_range=range(2, 4))
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    dst.check(expected)


def test_push_blocks(pair):
    p, d = pair
    src = Guarded(p, 2, 16, 128, seed=5)
    dst = Guarded(d, 2, 16, 128, seed=6, key=blocks_key(d, 2))
    link(p, d)
    sb, db = np.array([15, 0, 7], np.uint64), np.array([1, 2, 3], np.uint64)
    p.cache_manager.push_blocks(blocks_key(d, 2), src.cache, sb, db)
    dst.check(copy_blocks(dst.expected(), dst, src, sb, db))
    src.check_untouched()


def test_pull_and_push_cache(pair):
    p, d = pair
    # Contiguous caches: shape[0] is the batch; each batch item is one unit here.
    src = Guarded(p, 2, 3, 256, seed=7, blocks=False,
                  cache_keys=[CacheKey(p.cluster_id, req_id=10), CacheKey(p.cluster_id, 11),
                              CacheKey(p.cluster_id, NO_REQ, prefix_id=12)])
    dst = Guarded(d, 2, 2, 256, seed=8, blocks=False)
    link(d, p)
    cm = d.cache_manager
    cm.pull_cache(CacheKey(p.cluster_id, req_id=11), dst.cache, batch_index=1)
    expected = copy_blocks(dst.expected(), dst, src, [1], [1])
    dst.check(expected)
    cm.pull_cache(CacheKey(p.cluster_id, NO_REQ, prefix_id=12), dst.cache, 0, size=100)
    for t in range(2):
        dst.unit(expected, t, 0)[:100] = src.unit(src.image, t, 2)[:100]
    dst.check(expected)
    cm.pull_cache(CacheKeyByIdAndIndex(p.cluster_id, src.cache.cache_id, 0), dst.cache, 0,
                  src_layer_range=range(0, 1), dst_layer_range=range(0, 1),
                  tensor_num_per_layer=1)
    dst.check(copy_blocks(expected, dst, src, [0], [0], [(0, 0)]))
    with pytest.raises(LLMException) as e:
        cm.pull_cache(CacheKey(p.cluster_id, req_id=99), dst.cache)
    assert e.value.status_code in NOT_THERE

    # And back: P writes its item 0 into D's item 1.
    link(p, d)
    p.cache_manager.push_cache(CacheKeyByIdAndIndex(d.cluster_id, dst.cache.cache_id, 1),
                               src.cache, 0)
    dst.check(copy_blocks(copy_blocks(expected, dst, src, [0], [0], [(0, 0)]), dst, src, [0],
                          [1]))
    src.check_untouched()


def test_pull_blocks_from_item(pair):
    p, d = pair
    src = Guarded(p, 2, 1, 4 * 64, seed=9, blocks=False,
                  cache_keys=[CacheKey(p.cluster_id, req_id=1)])
    dst = Guarded(d, 2, 8, 64, seed=10)
    link(d, p)
    d.cache_manager.pull_blocks(CacheKey(p.cluster_id, req_id=1), dst.cache, (), [6, 1, 3, 0])
    expected = dst.expected()
    for t in range(2):
        item = src.unit(src.image, t, 0)
        for i, b in enumerate([6, 1, 3, 0]):
            dst.unit(expected, t, b)[:] = item[i * 64:(i + 1) * 64]
    dst.check(expected)


def pool_view(cache, tensor, nbytes):
    """Tensor of a pool cache as bytes (pool caches come as raw addresses)."""
    buf = (ctypes.c_uint8 * nbytes).from_address(cache.tensor_addrs[tensor])
    return np.ctypeslib.as_array(buf)


def test_pool_caches(pair):
    p, d = pair
    desc = CacheDesc(2, [2, 512], DataType.DT_UINT8)
    key0, key1 = CacheKey(p.cluster_id, req_id=1), CacheKey(p.cluster_id, req_id=2)
    src = p.cache_manager.allocate_cache(desc, [key0, key1])
    assert src.pool and len(src.tensor_addrs) == 2
    image = [pattern(20 + t, 1024) for t in range(2)]
    for t in range(2):
        pool_view(src, t, 1024)[:] = image[t]
    dst = d.cache_manager.allocate_blocks_cache(CacheDesc(2, [4, 512], DataType.DT_UINT8),
                                                blocks_key(d))
    link(d, p)
    d.cache_manager.pull_blocks(key1, dst, (), [2])
    for t in range(2):
        got = pool_view(dst, t, 2048)
        assert not got[:1024].any() and not got[1536:].any()
        assert np.array_equal(got[1024:1536], image[t][512:])
    # The pull ended key1's hold; the prompt side ends key0's.
    with pytest.raises(LLMException) as e:
        d.cache_manager.pull_blocks(key1, dst, (), [3])
    assert e.value.status_code in NOT_THERE
    p.cache_manager.remove_cache_key(key0)
    p.cache_manager.deallocate_cache(src)
    # A blocks cache is deallocate_blocks_cache()'s, as in llm_datadist: deallocate_cache()
    # refuses it, by the Cache or by its id, and leaves it allocated.
    for cache in (dst, dst.cache_id):
        with pytest.raises(LLMException, match="blocks cache") as e:
            d.cache_manager.deallocate_cache(cache)
        assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    with pytest.raises(LLMException, match="should be blocks cache") as e:
        p.cache_manager.deallocate_blocks_cache(src)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    d.cache_manager.deallocate_blocks_cache(dst)
    with pytest.raises(LLMException) as e:
        d.cache_manager.deallocate_blocks_cache(dst)
    assert e.value.status_code == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST


def test_async(pair):
    p, d = pair
    src = Guarded(p, 2, 64, 256, seed=11, key=blocks_key(p))
    dst = Guarded(d, 2, 64, 256, seed=12)
    item = Guarded(d, 2, 1, 256, seed=13, blocks=False)
    src_item = Guarded(p, 2, 1, 256, seed=19, blocks=False,
                       cache_keys=[CacheKey(p.cluster_id, req_id=5)])
    # Registered before any link of D: remote-accessible (it would not be after one).
    dst_keyed = Guarded(d, 2, 4, 256, seed=20, key=blocks_key(d, 4))
    link(d, p)
    cm = d.cache_manager
    ids = np.arange(64)
    tasks = [cm.pull_blocks_async(blocks_key(p), dst.cache, ids[i::4], ids[i::4][::-1].copy())
             for i in range(4)]
    for t in tasks:
        t.wait()
        assert t.done()
        assert t.synchronize() == LLMStatusCode.LLM_SUCCESS
        assert t.get_results() == [LLMStatusCode.LLM_SUCCESS]
    expected = dst.expected()
    for i in range(4):
        copy_blocks(expected, dst, src, ids[i::4], ids[i::4][::-1])
    dst.check(expected)
    bad = cm.pull_blocks_async(blocks_key(p), dst.cache, [64], [0])
    with pytest.raises(LLMException) as e:
        bad.wait()
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert bad.done() and bad.get_results() == [LLMStatusCode.LLM_PARAM_INVALID]
    t = cm.pull_cache_async(CacheKey(p.cluster_id, req_id=5), item.cache, 0, timeout_ms=30000)
    t.wait(30000)
    item.check(copy_blocks(item.expected(), item, src_item, [0], [0]))
    link(p, d)
    t = p.cache_manager.push_blocks_async(blocks_key(d, 4), src.cache, np.array([63]),
                                          np.array([1]))
    assert t.get_results() == [LLMStatusCode.LLM_SUCCESS]
    dst_keyed.check(copy_blocks(dst_keyed.expected(), dst_keyed, src, [63], [1]))
    t = p.cache_manager.push_cache_async(CacheKeyByIdAndIndex(d.cluster_id, item.cache.cache_id),
                                         src_item.cache, 0)
    assert t.synchronize() == LLMStatusCode.LLM_SUCCESS
    item.check(copy_blocks(item.expected(), item, src_item, [0], [0]))
    dst.check(expected)


class Gate(LayerSynchronizer):
    """Lets layer i go once open(i) was called; records what was asked."""

    def __init__(self, layers, refuse=None):
        self.events = [threading.Event() for _ in range(layers)]
        self.asked = []
        self.refuse = refuse

    def open(self, layer):
        self.events[layer].set()

    def synchronize_layer(self, layer_index, timeout_in_millis):
        self.asked.append(layer_index)
        if layer_index == self.refuse:
            return False
        return self.events[layer_index].wait(60)


def wait_until(predicate, what, seconds=30):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def test_transfer_cache_async(pair):
    p, d = pair
    layers = 3
    src = Guarded(p, 2 * layers, 8, 128, seed=14)
    dst = Guarded(d, 2 * layers, 8, 128, seed=15, key=blocks_key(d, 5))
    link(p, d)
    sb, db = [0, 3, 5], [7, 2, 4]
    gate = Gate(layers)
    task = p.cache_manager.transfer_cache_async(
        src.cache, gate,
        [TransferWithCacheKeyConfig(blocks_key(d, 5), range(0, layers), range(0, layers))], sb, db,
        dst_block_memory_size=128, notify=b"all layers")
    expected = dst.expected()
    for layer in range(layers):
        assert not task.done()
        gate.open(layer)
        pairs = [(2 * layer, 2 * layer), (2 * layer + 1, 2 * layer + 1)]
        copy_blocks(expected, dst, src, sb, db, pairs)
        # The layer lands while the later ones are still being computed.
        wait_until(lambda: np.array_equal(dst.mem[:2 * layer + 2], expected[:2 * layer + 2]),
                   f"layer {layer} landed")
        dst.check(expected)
        if layer < layers - 1:
            assert d.get_notifies() == []
    assert task.synchronize(60000) == LLMStatusCode.LLM_SUCCESS
    assert task.get_results() == [LLMStatusCode.LLM_SUCCESS] and task.done()
    task.wait()
    assert gate.asked == [0, 1, 2]
    notes = []
    wait_until(lambda: notes.extend(d.get_notifies()) or notes, "the notification came")
    assert notes == [(p.cluster_id, b"all layers")]
    dst.check(expected)
    src.check_untouched()


def test_transfer_cache_async_layers_and_refusals(pair):
    p, d = pair
    src = Guarded(p, 8, 4, 64, seed=16)
    dst_a = Guarded(d, 8, 4, 64, seed=17, key=blocks_key(d, 1))
    dst_b = Guarded(d, 4, 4, 64, seed=18, key=blocks_key(d, 2))
    link(p, d)
    gate = Gate(4, refuse=3)
    for layer in range(4):
        gate.open(layer)
    # The last one: every layer, which its setters (not its constructor) take as None.
    every = TransferWithCacheKeyConfig(blocks_key(d, 9), range(0, 1), range(0, 1))
    every.src_layer_range = every.dst_layer_range = None
    configs = [TransferWithCacheKeyConfig(blocks_key(d, 1), range(1, 3), range(2, 4)),
               TransferWithCacheKeyConfig(blocks_key(d, 2), range(0, 2), range(0, 2)),
               TransferWithCacheKeyConfig(blocks_key(d, 1), range(3, 4), range(0, 1)), every]
    task = p.cache_manager.transfer_cache_async(src.cache, gate, configs, [0, 1], [3, 2])
    assert task.synchronize() != LLMStatusCode.LLM_SUCCESS
    results = task.get_results()
    assert results[0] == LLMStatusCode.LLM_SUCCESS and results[1] == LLMStatusCode.LLM_SUCCESS
    # Layer 3 was refused by the synchronizer; the last destination does not exist.
    assert results[2] == LLMStatusCode.LLM_TIMEOUT
    assert results[3] in NOT_THERE
    with pytest.raises(LLMException):
        task.wait()
    dst_a.check(copy_blocks(dst_a.expected(), dst_a, src, [0, 1], [3, 2],
                            [(2, 4), (3, 5), (4, 6), (5, 7)]))
    dst_b.check(copy_blocks(dst_b.expected(), dst_b, src, [0, 1], [3, 2],
                            [(t, t) for t in range(4)]))
    with pytest.raises(TypeError):
        p.cache_manager.transfer_cache_async(src.cache, object(), configs)
    with pytest.raises(TypeError):
        p.cache_manager.transfer_cache_async(src.cache, gate, [blocks_key(d, 1)])
    with pytest.raises(ValueError):
        p.cache_manager.transfer_cache_async(src.cache, gate, configs[:1],
                                             dst_block_memory_size=3)


class Always(LayerSynchronizer):
    """Every layer is computed (the samples' LayerSynchronizerImpl(True))."""

    def synchronize_layer(self, layer_index, timeout_in_millis):
        return True


def test_transfer_cache_async_whole_blocks_cache(pair):
    # transfer_cache_async_sample.py: a blocks cache without block indices sends every block i
    # to block i of the destination; a destination with more blocks keeps the others.
    p, d = pair
    src = Guarded(p, 4, 6, 80, seed=19)
    dst = Guarded(d, 4, 9, 80, seed=20, key=blocks_key(d))
    again = Guarded(d, 4, 6, 80, seed=21, key=blocks_key(d, 3))
    link(p, d)
    configs = [TransferWithCacheKeyConfig(blocks_key(d), range(0, 2), range(0, 2))]
    task = p.cache_manager.transfer_cache_async(src.cache, Always(), configs)
    assert task.get_results(60000) == [LLMStatusCode.LLM_SUCCESS]
    assert task.synchronize() == LLMStatusCode.LLM_SUCCESS
    whole = list(range(6))
    dst.check(copy_blocks(dst.expected(), dst, src, whole, whole))
    src.check_untouched()
    # Empty index lists mean the same; one layer only moves that layer's tensors.
    again.check_untouched()
    configs = [TransferWithCacheKeyConfig(blocks_key(d, 3), range(1, 2), range(0, 1))]
    task = p.cache_manager.transfer_cache_async(src.cache, Always(), configs, [], [])
    assert task.get_results(60000) == [LLMStatusCode.LLM_SUCCESS]
    again.check(copy_blocks(again.expected(), again, src, whole, whole, [(2, 0), (3, 1)]))


def test_transfer_cache_async_whole_cache_refusals(pair):
    p, d = pair
    src = Guarded(p, 2, 8, 64, seed=22)
    small = Guarded(d, 2, 5, 64, seed=23, key=blocks_key(d))
    link(p, d)
    configs = [TransferWithCacheKeyConfig(blocks_key(d), range(0, 1), range(0, 1))]
    # The destination has fewer blocks than the whole source: refused, nothing lands.
    task = p.cache_manager.transfer_cache_async(src.cache, Always(), configs)
    assert task.get_results(60000) == [LLMStatusCode.LLM_PARAM_INVALID]
    small.check_untouched()
    cm = p.cache_manager
    host = np.zeros((2, 8 * 64), np.uint8)
    cpu = Cache.create_cpu_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8, Placement.HOST),
                                 [host[0].ctypes.data, host[1].ctypes.data])
    with pytest.raises(LLMException) as e:
        cm.transfer_cache_async(cpu, Always(), configs)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    for sb, db in (([0], None), (None, [0]), ([0, 1], [0]), ([], [1])):
        with pytest.raises(LLMException) as e:
            cm.transfer_cache_async(src.cache, Always(), configs, sb, db)
        assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    # llm_datadist's TransferConfig names remote memory by address: refused, by name.
    with pytest.raises(LLMException, match="TransferConfig") as e:
        cm.transfer_cache_async(src.cache, Always(), [TransferConfig(d.cluster_id, [1, 2])])
    assert e.value.status_code == LLMStatusCode.LLM_FEATURE_NOT_ENABLED
    small.check_untouched()


def _held_pull(p, d, src, dst):
    """A pull from P that D's event loop may see running: 256 blocks of 64 KiB."""
    return d.cache_manager.pull_blocks_async(blocks_key(p), dst.cache, np.arange(256),
                                             np.arange(256)[::-1].copy(), timeout_ms=30000)


def test_task_done_wait_cancel_fileno(pair):
    p, d = pair
    src = Guarded(p, 2, 256, 65536, seed=41, key=blocks_key(p))
    dst = Guarded(d, 2, 256, 65536, seed=42)
    link(d, p)
    expected = copy_blocks(dst.expected(), dst, src, np.arange(256), np.arange(256)[::-1])

    # wait(0) on a running task: LLM_TIMEOUT as llm_datadist says, the libkvdist status behind
    # it IN_PROGRESS; fileno() wakes a poller; done() and wait() then give the status.
    t = _held_pull(p, d, src, dst)
    fd = t.fileno()
    assert fd == t.fileno() and fd >= 0
    while not t.done():
        try:
            t.wait(0)
        except LLMException as e:
            assert e.status_code == LLMStatusCode.LLM_TIMEOUT
            assert e.kvd_status == -27  # KVD_E_IN_PROGRESS
        select.select([fd], [], [], 30)
    t.wait()
    assert select.select([fd], [], [], 0)[0] == [fd]
    dst.check(expected)
    # Cancel after completion: the status it had, nothing changes.
    assert t.cancel() == LLMStatusCode.LLM_SUCCESS
    assert t.synchronize() == LLMStatusCode.LLM_SUCCESS
    dst.check(expected)

    # Cancel of a fresh pull: CANCELLED (or SUCCESS when it was quicker); nothing lands after.
    back = dst.mem.copy()
    t = d.cache_manager.pull_blocks_async(blocks_key(p), dst.cache, np.arange(256)[::-1].copy(),
                                          np.arange(256), timeout_ms=30000)
    status = t.cancel()
    assert status in (LLMStatusCode.LLM_CANCELLED, LLMStatusCode.LLM_SUCCESS)
    snap = dst.mem.copy()
    full = copy_blocks(dst.expected(), dst, src, np.arange(256)[::-1], np.arange(256))
    if status == LLMStatusCode.LLM_SUCCESS:
        dst.check(full)
    else:
        assert np.all((snap == back) | (snap == full))
        with pytest.raises(LLMException) as e:
            t.wait()
        assert e.value.status_code == LLMStatusCode.LLM_CANCELLED
        assert t.get_results() == [LLMStatusCode.LLM_CANCELLED]
    # The link still works, and the cancelled pull wrote nothing since.
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, [0], [0])
    snap[:, GUARD:GUARD + 65536] = src.mem[:, GUARD:GUARD + 65536]
    assert np.array_equal(dst.mem, snap)
    # A task dropped while it runs is cancelled; the daemon goes on.
    t = _held_pull(p, d, src, dst)
    del t
    snap = dst.mem.copy()
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, [0], [0])
    snap[:, GUARD:GUARD + 65536] = src.mem[:, GUARD:GUARD + 65536]
    assert np.array_equal(dst.mem, snap)
    assert np.array_equal(dst.mem[:, :GUARD], dst.image[:, :GUARD])
    assert np.array_equal(dst.mem[:, -GUARD:], dst.image[:, -GUARD:])


@pytest.mark.parametrize("batch", [False, True])
def test_asyncio_example(daemon, batch):
    # examples/asyncio_pulls.py, as a user runs it (pulls of their own, or one batch): it
    # checks every byte itself.
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "asyncio_pulls.py"
    r = subprocess.run([sys.executable, str(example), "--socket", daemon.socket, "--listen",
                        daemon.peer_addr, "--pulls", "6", "--blocks-per-pull", "8"] +
                       (["--batch"] if batch else []),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every byte as expected" in r.stdout
    assert ("in one batch" in r.stdout) == batch


def engine_memory(shape, seal=True):
    """An engine's own memory: a memfd it maps and seals, and a uint8 array of shape over it."""
    import fcntl
    import mmap
    import os

    nbytes = int(np.prod(shape))
    size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    fd = os.memfd_create("engine-kv", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    mm = mmap.mmap(fd, size)
    return fd, mm, np.frombuffer(mm, np.uint8, count=nbytes).reshape(shape)


def test_engine_memory(pair):
    """Caches in memory the engine allocated (a numpy array and a torch tensor over its own
    memfds) move byte-exact once registered in one call; what is refused."""
    import kvdist

    p, d = pair
    shape = (4, GUARD + 16 * 128 + GUARD)
    pfd, _, parr = engine_memory(shape)
    dfd, _, darr = engine_memory(shape)
    torch = pytest.importorskip("torch", reason="torch (python3-torch) is not installed")
    pid = kvdist.register_memory(parr, pfd, datadist=p)
    did = kvdist.register_memory(torch.from_numpy(darr), dfd, datadist=d)
    assert pid != did or p is not d
    src = Guarded(p, 4, 16, 128, seed=41, key=blocks_key(p), mem=parr)
    dst = Guarded(d, 4, 16, 128, seed=42, mem=darr)
    link(d, p)
    sb, db = [3, 9, 4, 15], [0, 1, 2, 8]
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, sb, db)
    dst.check(copy_blocks(dst.expected(), dst, src, sb, db))
    src.check_untouched()

    # A cache lies in it: busy; an unsealed memfd; not an array.
    with pytest.raises(LLMException) as e:
        kvdist.unregister_memory(did, datadist=d)
    assert e.value.status_code == LLMStatusCode.LLM_BUSY
    ufd, _, uarr = engine_memory((2, 4096), seal=False)
    with pytest.raises(LLMException) as e:
        kvdist.register_memory(uarr, ufd, datadist=d)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "sealed against shrinking" in str(e.value)
    with pytest.raises(TypeError):
        kvdist.register_memory(b"bytes", ufd, datadist=d)
    d.cache_manager.unregister_cache(dst.cache.cache_id)
    kvdist.unregister_memory(did, datadist=d)
    # The engine's array is still its own after kvdist let go.
    dst.check(copy_blocks(dst.expected(), dst, src, sb, db))
