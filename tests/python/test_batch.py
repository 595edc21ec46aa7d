# SPDX-License-Identifier: MIT
"""API 2 in Python: CacheManager.transfer_batch() (BatchEntry pulls and pushes of blocks and
caches mixed, block ids as numpy arrays read where they lie, a status per entry and the failed
blocks), LLMDataDist.local_info() and link_remote(), and transfers and batch entries that link
first (remote_info=), on one daemon and across two. Every destination byte and the guard bytes
around each tensor are checked; bad input gets a clear exception and writes nothing."""

import gc
import signal
import sys
import tracemalloc

import numpy as np
import pytest

from kvdist import (BatchEntry, CacheKey, LLMClusterInfo, LLMDataDist, LLMException, LLMRole,
                    LLMStatusCode, TransferKind)

from conftest import NOT_THERE, Guarded, blocks_key, copy_blocks

OK = LLMStatusCode.LLM_SUCCESS


def link(dd, remote):
    info = LLMClusterInfo()
    info.remote_cluster_id = remote.cluster_id
    info.remote_role_type = remote.role
    ret, _ = dd.link_clusters([info], 5000)
    assert ret == OK, dd.last_error


def copy_item(expected, dst, src, src_index, dst_index):
    """What pulling batch item src_index of src into item dst_index of dst makes of expected."""
    for t in range(expected.shape[0]):
        dst.unit(expected, t, dst_index)[:] = src.unit(src.image, t, src_index)
    return expected


@pytest.fixture
def pair(daemon, attach):
    return attach(daemon, LLMRole.PROMPT), attach(daemon, LLMRole.DECODER)


def test_batch_mixed(pair):
    p, d = pair
    kv = Guarded(p, 4, 32, 256, seed=11, key=blocks_key(p, 0))
    rope = Guarded(p, 2, 16, 64, seed=12, key=blocks_key(p, 1))
    item = Guarded(p, 4, 1, 1024, seed=13, blocks=False, cache_keys=[CacheKey(p.cluster_id, 42)])
    into = Guarded(p, 4, 24, 256, seed=14, key=blocks_key(p, 2))
    dkv = Guarded(d, 4, 40, 256, seed=21)
    drope = Guarded(d, 2, 16, 64, seed=22)
    ditem = Guarded(d, 4, 2, 1024, seed=23, blocks=False)
    src_push = Guarded(d, 4, 8, 256, seed=24)
    link(d, p)

    kv_src = np.array([3, 17, 5, 31, 0], np.int64)        # read where it lies
    kv_dst = np.array([39, 1, 22, 7, 8], np.uint64)
    rope_src, rope_dst = [2, 3, 4, 9], np.array([10, 11, 12, 0], np.int32)  # copied
    entries = [
        BatchEntry.pull_blocks(blocks_key(p, 0), dkv.cache, kv_src, kv_dst),
        BatchEntry.pull_blocks(blocks_key(p, 1), drope.cache, rope_src, rope_dst),
        BatchEntry.pull_cache(CacheKey(p.cluster_id, 42), ditem.cache, 1),
        BatchEntry.push_blocks(blocks_key(p, 2), src_push.cache, [6, 7], [20, 21]),
        # Layer 1 only (tensors 2 and 3) of block 30 into block 2.
        BatchEntry(TransferKind.PULL_BLOCKS, blocks_key(p, 0), dkv.cache.cache_id, [30], [2],
                   src_layer_range=range(1, 2), dst_layer_range=range(1, 2)),
    ]
    task = d.cache_manager.transfer_batch(entries, timeout_ms=30000)
    task.wait()
    assert task.done()
    assert task.synchronize() == OK
    assert task.entry_statuses() == [OK] * 5
    assert task.get_results() == [OK] * 5
    failed = task.failed_blocks()
    assert failed.dtype == np.uint64 and failed.size == 0

    expected = copy_blocks(dkv.expected(), dkv, kv, kv_src, kv_dst)
    dkv.check(copy_blocks(expected, dkv, kv, [30], [2], [(2, 2), (3, 3)]))
    drope.check(copy_blocks(drope.expected(), drope, rope, rope_src, rope_dst))
    ditem.check(copy_item(ditem.expected(), ditem, item, 0, 1))
    into.check(copy_blocks(into.expected(), into, src_push, [6, 7], [20, 21]))
    for untouched in (kv, rope, item, src_push):
        untouched.check_untouched()


def test_batch_failures(pair):
    p, d = pair
    kv = Guarded(p, 2, 32, 128, seed=31, key=blocks_key(p))
    dkv = Guarded(d, 2, 40, 128, seed=32)
    other = Guarded(d, 2, 8, 128, seed=33)
    link(d, p)
    entries = [
        # Source block 99 is past P's 32 blocks: this entry fails, and says so.
        BatchEntry.pull_blocks(blocks_key(p), dkv.cache, np.array([1, 99]), np.array([30, 31])),
        BatchEntry.pull_blocks(blocks_key(p), dkv.cache, [20, 21], [24, 25]),
        # No cache under model 77.
        BatchEntry.pull_blocks(blocks_key(p, 77), other.cache, [0], [5]),
        # A local destination block past this cluster's cache.
        BatchEntry.pull_blocks(blocks_key(p), other.cache, [3, 4], [6, 8]),
    ]
    task = d.cache_manager.transfer_batch(entries, timeout_ms=30000)
    with pytest.raises(LLMException) as e:
        task.wait()
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "99" in e.value.message, e.value.message
    assert task.synchronize() == LLMStatusCode.LLM_PARAM_INVALID
    statuses = task.entry_statuses()
    assert statuses[0] == LLMStatusCode.LLM_PARAM_INVALID
    assert statuses[1] == OK
    assert statuses[2] in NOT_THERE
    assert statuses[3] == LLMStatusCode.LLM_PARAM_INVALID
    assert task.get_results() == statuses
    # Exactly the local blocks of the failed entries, in entry order.
    assert task.failed_blocks().tolist() == [30, 31, 5, 6, 8]
    # The good entry landed; the failed ones wrote nothing.
    dkv.check(copy_blocks(dkv.expected(), dkv, kv, [20, 21], [24, 25]))
    other.check_untouched()
    kv.check_untouched()


def test_batch_many_blocks(pair):
    # 40,000 scattered block ids in four entries of one submit, numpy int64 (no copy) and
    # uint16 / strided (converted), every byte checked.
    p, d = pair
    n = 10000
    src = Guarded(p, 2, n, 64, seed=41, key=blocks_key(p))
    dst = Guarded(d, 2, 4 * n, 64, seed=42)
    link(d, p)
    rng = np.random.default_rng(43)
    # Entry i: every source block, shuffled, into destination blocks [i*n, (i+1)*n) shuffled.
    plans = [(rng.permutation(n).astype(np.int64), rng.permutation(n) + i * n)
             for i in range(4)]
    args = [plans[0], (plans[1][0].astype(np.uint16), plans[1][1].astype(np.uint64)),
            (np.repeat(plans[2][0], 2)[::2], plans[2][1]),
            (plans[3][0].tolist(), plans[3][1].tolist())]
    assert not args[2][0].flags.contiguous
    entries = [BatchEntry.pull_blocks(blocks_key(p), dst.cache, s, dd) for s, dd in args]
    task = d.cache_manager.transfer_batch(entries, timeout_ms=120000)
    task.wait()
    assert task.entry_statuses() == [OK] * 4
    assert task.failed_blocks().size == 0
    expected = dst.expected()
    for s, dd in plans:
        copy_blocks(expected, dst, src, s, dd)
    dst.check(expected)
    src.check_untouched()


def test_batch_bad_input(pair):
    p, d = pair
    src = Guarded(p, 2, 4, 128, seed=51, key=blocks_key(p))
    dst = Guarded(d, 2, 4, 128, seed=52)
    link(d, p)
    cm = d.cache_manager
    good = BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1], [2])

    with pytest.raises(TypeError, match="sequence of BatchEntry"):
        cm.transfer_batch(good)
    with pytest.raises(TypeError, match=r"entries\[1\] must be a BatchEntry, not tuple"):
        cm.transfer_batch([good, (2, blocks_key(p), dst.cache, [1], [2])])
    with pytest.raises(TypeError, match="kind must be a TransferKind"):
        BatchEntry(2, blocks_key(p), dst.cache, [1], [2])
    with pytest.raises(TypeError, match="cache_key must be a CacheKey or CacheKeyByIdAndIndex"):
        BatchEntry.pull_cache(blocks_key(p), dst.cache)
    with pytest.raises(TypeError, match="remote_info must be a str"):
        BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1], [2], remote_info=b"kvdist1")
    with pytest.raises(ValueError, match="src_layer_range"):
        BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1], [2], src_layer_range=range(2, 2))
    with pytest.raises(LLMException) as e:
        cm.transfer_batch([])
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    with pytest.raises(LLMException) as e:
        cm.transfer_batch([good] * 1025)
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "1025" in e.value.message
    # Block ids libkvdist cannot take: the error names the entry.
    with pytest.raises(TypeError, match=r"entries\[1\]: block ids must be"):
        cm.transfer_batch([good, BatchEntry.pull_blocks(blocks_key(p), dst.cache,
                                                        np.array([1.0]), [2])])
    with pytest.raises(ValueError, match=r"entries\[0\]: block ids must not be negative"):
        cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1],
                                                  np.array([-2]))])
    with pytest.raises(TypeError, match=r"entries\[0\]\.cache"):
        cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), "cache", [1], [2])])
    # A request key must name exactly one of a request and a prefix.
    with pytest.raises(LLMException) as e:
        cm.transfer_batch([BatchEntry.pull_cache(CacheKey(p.cluster_id, 2**64 - 1), dst.cache)])
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    # Mismatched block lists are refused at submit, naming the entry.
    dst.check_untouched()

    # Block lists of different lengths: that entry fails alone, naming itself.
    task = cm.transfer_batch([good, BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1, 2],
                                                           [3])])
    with pytest.raises(LLMException) as e:
        task.wait()
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "entries[1]" in e.value.message, e.value.message
    assert task.entry_statuses() == [OK, LLMStatusCode.LLM_PARAM_INVALID]
    assert task.failed_blocks().tolist() == [3]
    dst.check(copy_blocks(dst.expected(), dst, src, [1], [2]))

    # entry_statuses() and failed_blocks() belong to batches.
    task = cm.pull_blocks_async(blocks_key(p), dst.cache, [1], [2])
    task.wait()
    for call in (task.entry_statuses, task.failed_blocks):
        with pytest.raises(LLMException) as e:
            call()
        assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    dst.check(copy_blocks(dst.expected(), dst, src, [1], [2]))


def test_local_info_and_link_remote(daemon, attach):
    p, d = attach(daemon, LLMRole.PROMPT), attach(daemon, LLMRole.DECODER)
    info = p.local_info()
    assert isinstance(info, str) and info.startswith("kvdist1;compat="), info
    assert f";cluster={p.cluster_id};role=prompt;addr=" in info, info
    src = Guarded(p, 2, 8, 512, seed=61, key=blocks_key(p))
    dst = Guarded(d, 2, 8, 512, seed=62)
    with pytest.raises(LLMException) as e:
        d.check_link_status(p.cluster_id)
    assert e.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK
    d.link_remote(info)
    d.check_link_status(p.cluster_id)
    with pytest.raises(LLMException) as e:
        d.link_remote(info, timeout_ms=5000)
    assert e.value.status_code == LLMStatusCode.LLM_ALREADY_LINK
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, [4, 1, 6], [0, 7, 2])
    dst.check(copy_blocks(dst.expected(), dst, src, [4, 1, 6], [0, 7, 2]))

    # A client cluster (no listen address) accepts no links.
    c = LLMDataDist(LLMRole.DECODER, p.cluster_id + 5000)
    c.init({"ge.exec.deviceId": "0", "socket_path": daemon.socket})
    try:
        cinfo = c.local_info()
        assert f";cluster={c.cluster_id};role=decoder" in cinfo and "addr=" not in cinfo
        with pytest.raises(LLMException) as e:
            p.link_remote(cinfo)
        assert e.value.status_code == LLMStatusCode.LLM_LINK_FAILED
    finally:
        c.finalize()
    with pytest.raises(LLMException) as e:
        c.local_info()
    assert e.value.status_code == LLMStatusCode.LLM_ENGINE_FINALIZED


def test_local_info_refusals(daemon, attach):
    p, d = attach(daemon, LLMRole.PROMPT), attach(daemon, LLMRole.DECODER)
    info = p.local_info()
    src = Guarded(p, 2, 4, 256, seed=71, key=blocks_key(p))
    dst = Guarded(d, 2, 4, 256, seed=72)

    def refused(line, status, text=None):
        with pytest.raises(LLMException) as e:
            d.link_remote(line)
        assert e.value.status_code == status, e.value
        if text:
            assert text in e.value.message, e.value.message

    refused("127.0.0.1:7400", LLMStatusCode.LLM_PARAM_INVALID, "kvd_local_info")
    refused("", LLMStatusCode.LLM_PARAM_INVALID)
    refused(info + ";more=1", LLMStatusCode.LLM_PARAM_INVALID)
    refused("k" * 200, LLMStatusCode.LLM_PARAM_INVALID)
    # Another compat hash (its first digit changed): another protocol.
    at = len("kvdist1;compat=")
    flipped = info[:at] + ("1" if info[at] == "0" else "0") + info[at + 1:]
    refused(flipped, LLMStatusCode.LLM_PROTOCOL_MISMATCH, "another protocol")
    with pytest.raises(TypeError, match="remote_info must be a str"):
        d.link_remote(info.encode())
    with pytest.raises(ValueError, match="NUL"):
        d.link_remote(info + "\0")
    # On a transfer: a malformed line, another cluster's line, a mismatched hash.
    cm = d.cache_manager
    other = info.replace(f";cluster={p.cluster_id};", f";cluster={p.cluster_id + 1};")
    for line, status in (("nonsense", LLMStatusCode.LLM_PARAM_INVALID),
                         (other, LLMStatusCode.LLM_PARAM_INVALID),
                         (flipped, LLMStatusCode.LLM_PROTOCOL_MISMATCH)):
        with pytest.raises(LLMException) as e:
            cm.pull_blocks(blocks_key(p), dst.cache, [1], [2], remote_info=line)
        assert e.value.status_code == status, e.value
        # A batch checks its entries' lines before it sends anything.
        with pytest.raises(LLMException) as e:
            cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1], [2]),
                               BatchEntry.pull_blocks(blocks_key(p), dst.cache, [1], [2],
                                                      remote_info=line)])
        assert e.value.status_code == status, e.value
    with pytest.raises(TypeError, match="remote_info must be a str"):
        cm.pull_blocks(blocks_key(p), dst.cache, [1], [2], remote_info=42)
    # Nothing was linked or written by any of them.
    with pytest.raises(LLMException) as e:
        d.check_link_status(p.cluster_id)
    assert e.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK
    dst.check_untouched()
    src.check_untouched()


def test_lazy_links_one_daemon(daemon, attach):
    # Every transfer kind with remote_info, nothing linked beforehand.
    p, d = attach(daemon, LLMRole.PROMPT), attach(daemon, LLMRole.DECODER)
    src = Guarded(p, 2, 8, 256, seed=81, key=blocks_key(p))
    dst = Guarded(d, 2, 8, 256, seed=82, key=blocks_key(d))
    cm = d.cache_manager
    task = cm.push_blocks_async(blocks_key(p), dst.cache, [0, 1], [6, 7],
                                remote_info=p.local_info(), timeout_ms=30000)
    task.wait()
    d.check_link_status(p.cluster_id)
    src_expected = copy_blocks(src.expected(), src, dst, [0, 1], [6, 7])
    src.check(src_expected)
    # Linked now: remote_info is accepted and no second link is made.
    cm.pull_blocks(blocks_key(p), dst.cache, [2], [3], remote_info=p.local_info())
    dst.check(copy_blocks(dst.expected(), dst, src, [2], [3]))


def test_lazy_links_across_daemons(daemons, attach):
    # Two prompt clusters on one node, a decoder on another; nothing linked: one pull links to
    # the first, a batch naming both links to the second and moves both.
    P, D = daemons("prefill"), daemons("decode")
    p1, p2 = attach(P, LLMRole.PROMPT), attach(P, LLMRole.PROMPT)
    d = attach(D, LLMRole.DECODER)
    s1 = Guarded(p1, 4, 10, 512, seed=91, key=blocks_key(p1))
    s2 = Guarded(p2, 4, 10, 512, seed=92, key=blocks_key(p2))
    d1 = Guarded(d, 4, 10, 512, seed=93)
    d2 = Guarded(d, 4, 10, 512, seed=94)
    i1, i2 = p1.local_info(), p2.local_info()
    cm = d.cache_manager
    cm.pull_blocks(blocks_key(p1), d1.cache, [3, 0, 5], [1, 2, 9], remote_info=i1,
                   timeout_ms=30000)
    d.check_link_status(p1.cluster_id)
    e1 = copy_blocks(d1.expected(), d1, s1, [3, 0, 5], [1, 2, 9])
    d1.check(e1)
    with pytest.raises(LLMException) as e:
        d.check_link_status(p2.cluster_id)
    assert e.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK

    task = cm.transfer_batch([
        BatchEntry.pull_blocks(blocks_key(p1), d1.cache, np.array([7, 6]), np.array([4, 5]),
                               remote_info=i1),
        BatchEntry.pull_blocks(blocks_key(p2), d2.cache, np.array([7, 6]), np.array([4, 5]),
                               remote_info=i2),
    ], timeout_ms=30000)
    task.wait()
    assert task.entry_statuses() == [OK, OK]
    d.check_link_status(p2.cluster_id)
    d1.check(copy_blocks(e1, d1, s1, [7, 6], [4, 5]))
    d2.check(copy_blocks(d2.expected(), d2, s2, [7, 6], [4, 5]))
    s1.check_untouched()
    s2.check_untouched()


def test_batch_in_progress_and_cancel(daemons, attach):
    # The prefill's daemon frozen (SIGSTOP; peers are lost only after 30 s): the batch runs
    # until cancelled, and its entry calls say so meanwhile.
    P = daemons("prefill", heartbeat_ms=(200, 30000))
    D = daemons("decode", heartbeat_ms=(200, 30000))
    p, d = attach(P, LLMRole.PROMPT), attach(D, LLMRole.DECODER)
    src = Guarded(p, 2, 64, 1024, seed=101, key=blocks_key(p))
    dst = Guarded(d, 2, 64, 1024, seed=102)
    d.link_remote(p.local_info(), timeout_ms=10000)
    ids = np.arange(64)
    P.proc.send_signal(signal.SIGSTOP)
    try:
        task = d.cache_manager.transfer_batch(
            [BatchEntry.pull_blocks(blocks_key(p), dst.cache, ids[:32], ids[32:][::-1].copy()),
             BatchEntry.pull_blocks(blocks_key(p), dst.cache, ids[32:], ids[:32])],
            timeout_ms=60000)
        assert not task.done()
        assert task.synchronize(10) == LLMStatusCode.LLM_TIMEOUT  # this wait's, not the task's
        assert task.get_results(10) == [None, None]  # one per entry, none finished
        for call in (task.entry_statuses, task.failed_blocks):
            with pytest.raises(LLMException) as e:
                call()
            assert e.value.status_code == LLMStatusCode.LLM_IN_PROGRESS
        assert task.cancel() == LLMStatusCode.LLM_CANCELLED
        assert task.done()
        assert task.entry_statuses() == [LLMStatusCode.LLM_CANCELLED] * 2
        assert sorted(task.failed_blocks().tolist()) == list(range(64))
    finally:
        P.proc.send_signal(signal.SIGCONT)
    # Nothing lands after cancel() returned, even once the peer answers.
    d.daemon_status()
    d.check_link_status(p.cluster_id)
    got = dst.mem.copy()
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, [0], [0], timeout_ms=30000)
    expected = copy_blocks(got.copy(), dst, src, [0], [0])
    dst.check(expected)
    # Each byte the cancelled batch may have written is the old one or the source's.
    full = copy_blocks(dst.expected(), dst, src, ids, np.concatenate([ids[32:][::-1], ids[:32]]))
    assert ((got == dst.image) | (got == full)).all()


def test_no_reference_leaks(pair):
    """Batches, their entry calls, local info and lazy links, successful and refused, many
    times: the Python heap must not grow, and the block arrays given must keep their reference
    counts and export no buffer afterwards."""
    p, d = pair
    src = Guarded(p, 2, 16, 64, seed=111, key=blocks_key(p))
    dst = Guarded(d, 2, 16, 64, seed=112)
    cm = d.cache_manager
    info = p.local_info()
    d.link_remote(info)
    ids = np.arange(16, dtype=np.int64)
    wide = np.arange(4, dtype=np.uint32)
    bad = np.array([1.5])
    held = (ids, wide, bad, info)
    counts = [sys.getrefcount(o) for o in held]

    def once():
        t = cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), dst.cache, ids, ids,
                                                      remote_info=info),
                               BatchEntry.pull_blocks(blocks_key(p), dst.cache, wide, wide),
                               BatchEntry.pull_blocks(blocks_key(p), dst.cache, [99], [0])])
        assert t.synchronize() == LLMStatusCode.LLM_PARAM_INVALID
        assert t.entry_statuses()[2] == LLMStatusCode.LLM_PARAM_INVALID
        assert t.failed_blocks().tolist() == [0]
        assert len(p.local_info()) > 0
        with pytest.raises(LLMException):
            d.link_remote(info)
        with pytest.raises(LLMException):
            d.link_remote("nonsense")
        with pytest.raises(TypeError):
            cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), dst.cache, ids, ids),
                               BatchEntry.pull_blocks(blocks_key(p), dst.cache, bad, wide)])
        with pytest.raises(LLMException):
            cm.transfer_batch([BatchEntry.pull_blocks(blocks_key(p), dst.cache, ids, ids,
                                                      remote_info="nonsense")])
        cm.pull_blocks(blocks_key(p), dst.cache, wide, wide, remote_info=info)

    for _ in range(20):
        once()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(200):
        once()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = [s for s in after.compare_to(before, "lineno") if s.size_diff > 0]
    total = sum(s.size_diff for s in grown)
    assert total < 16384, "\n".join(str(s) for s in grown[:10])
    assert [sys.getrefcount(o) for o in held] == counts
    for a in (ids, wide, bad):
        a.resize(a.size + 1, refcheck=False)  # no buffer of it is still exported
    dst.check(copy_blocks(dst.expected(), dst, src, ids, ids))


def copy_slices(expected, dst, src, src_blocks, dst_blocks, src_slice, dst_slice):
    """What moving slice src_slice (offset, length) of src_blocks[i] of src into dst_slice of
    dst_blocks[i] of dst makes of expected, every tensor 1:1."""
    (so, length), do = src_slice, dst_slice[0]
    for t in range(expected.shape[0]):
        for s, d in zip(src_blocks, dst_blocks):
            dst.unit(expected, t, d)[do:do + length] = src.unit(src.image, t, s)[so:so + length]
    return expected


def test_slices(pair):
    """Head slices: a decode rank with twice the tensor parallelism pulls its half of each
    prefill block (neighbouring blocks included, so runs merge) into whole half-size blocks,
    pushes the other way, and a batch entry gathers into the second half of full blocks."""
    p, d = pair
    full = Guarded(p, 4, 32, 256, seed=41, key=blocks_key(p, 0))
    into_p = Guarded(p, 4, 16, 256, seed=42, key=blocks_key(p, 1))
    half = Guarded(d, 4, 24, 128, seed=43)
    half_src = Guarded(d, 4, 8, 128, seed=44)
    link(d, p)
    cm = d.cache_manager

    src, dst = np.array([4, 5, 6, 7, 20, 9], np.int64), [0, 1, 2, 3, 10, 23]
    cm.pull_blocks(blocks_key(p, 0), half.cache, src, dst, src_slice=(128, 128),
                   timeout_ms=30000)
    expected = copy_slices(half.expected(), half, full, src, dst, (128, 128), (0, 128))

    # dst_slice's length 0 is the rest of the block; a push writes the first half of P's
    # full-size blocks 10 and 11 from whole half-size blocks.
    cm.push_blocks(blocks_key(p, 1), half_src.cache, [2, 3], [10, 11], src_slice=None,
                   dst_slice=(0, 128), timeout_ms=30000)
    expected_p = copy_slices(into_p.expected(), into_p, half_src, [2, 3], [10, 11], (0, 128),
                             (0, 128))

    task = cm.transfer_batch([
        BatchEntry.pull_blocks(blocks_key(p, 0), half.cache, [30, 31], [20, 21],
                               src_slice=(0, 128)),
        BatchEntry.push_blocks(blocks_key(p, 1), half_src.cache, [5], [12],
                               dst_slice=(128, 0)),
    ], timeout_ms=30000)
    task.wait()
    assert task.entry_statuses() == [OK, OK]
    copy_slices(expected, half, full, [30, 31], [20, 21], (0, 128), (0, 128))
    copy_slices(expected_p, into_p, half_src, [5], [12], (0, 128), (128, 128))
    half.check(expected)
    into_p.check(expected_p)
    full.check_untouched()
    half_src.check_untouched()

    # Bad slices: refused with a clear status, nothing written.
    with pytest.raises(LLMException) as e:
        cm.pull_blocks(blocks_key(p, 0), half.cache, [1], [5], src_slice=(200, 128))
    assert e.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
    assert "src_slice" in e.value.message, e.value.message
    with pytest.raises(LLMException) as e:
        cm.pull_blocks(blocks_key(p, 0), half.cache, [1], [5])  # 256-byte blocks into 128
    assert e.value.status_code == LLMStatusCode.LLM_CACHE_INCOMPATIBLE
    with pytest.raises(TypeError):
        cm.pull_blocks(blocks_key(p, 0), half.cache, [1], [5], src_slice=128)
    with pytest.raises(ValueError):
        BatchEntry.pull_blocks(blocks_key(p, 0), half.cache, [1], [5], dst_slice=(-1, 8))
    half.check(expected)
