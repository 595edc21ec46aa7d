# SPDX-License-Identifier: MIT
"""The Python API across two daemons: blocks pulled and pushed over the daemons' TCP link with
every byte checked, a peer daemon killed under running transfers, and a transfer that times
out while the peer is frozen (SIGSTOP) - during which other Python threads keep running, since
the call released the GIL - and leaves nothing behind in the destination."""

import signal
import threading
import time

import numpy as np
import pytest

from kvdist import LLMClusterInfo, LLMException, LLMRole, LLMStatusCode

from conftest import Guarded, blocks_key, copy_blocks


def remote(dd, daemon):
    info = LLMClusterInfo()
    info.remote_cluster_id = dd.cluster_id
    info.remote_role_type = dd.role
    ip, port = daemon.peer_addr.rsplit(":", 1)
    info.append_remote_ip_info(ip.strip("[]"), int(port))
    return info


def link(dd, other, daemon):
    ret, rets = dd.link_clusters([remote(other, daemon)], 10000)
    assert ret == LLMStatusCode.LLM_SUCCESS, dd.last_error
    return remote(other, daemon)


def test_across_daemons(daemons, attach):
    P, D = daemons("prefill"), daemons("decode")
    p = attach(P, LLMRole.PROMPT)
    d = attach(D, LLMRole.DECODER)
    src = Guarded(p, 4, 96, 2048, seed=21, key=blocks_key(p))
    dst = Guarded(d, 4, 64, 2048, seed=22, key=blocks_key(d))
    to_p = link(d, p, P)
    sb = np.array([(i * 37) % 96 for i in range(48)], np.int64)
    db = np.arange(48, dtype=np.int64)[::-1].copy()
    d.cache_manager.pull_blocks(blocks_key(p), dst.cache, sb, db)
    expected = copy_blocks(dst.expected(), dst, src, sb, db)
    dst.check(expected)
    links = d.daemon_status()["links"]
    assert any(link.get("transport") == "tcp" for link in links), links

    # Pushed the other way, over the link P makes.
    to_d = link(p, d, D)
    p.cache_manager.push_blocks(blocks_key(d), src.cache, [95, 0], [60, 63], notify=b"done")
    dst.check(copy_blocks(expected, dst, src, [95, 0], [60, 63]))
    deadline = time.monotonic() + 30
    notes = []
    while not notes and time.monotonic() < deadline:
        notes = d.get_notifies()
        time.sleep(0.01)
    assert notes == [(p.cluster_id, b"done")]
    src.check_untouched()
    assert d.unlink_clusters([to_p])[0] == LLMStatusCode.LLM_SUCCESS
    assert p.unlink_clusters([to_d])[0] == LLMStatusCode.LLM_SUCCESS


def pulling(daemons, attach, blocks, block_bytes, heartbeat_ms=(200, 2000)):
    """Prefill P and decode D on daemons of their own, D linked to P to pull from its blocks
    cache src into dst: (P's daemon, p, d, src, dst)."""
    P = daemons("prefill", heartbeat_ms=heartbeat_ms)
    D = daemons("decode", heartbeat_ms=heartbeat_ms)
    p = attach(P, LLMRole.PROMPT)
    d = attach(D, LLMRole.DECODER)
    src = Guarded(p, 2, blocks, block_bytes, seed=blocks + 1, key=blocks_key(p))
    dst = Guarded(d, 2, blocks, block_bytes, seed=blocks + 2)
    link(d, p, P)
    return P, p, d, src, dst


def test_killed_peer(daemons, attach):
    P, p, d, src, dst = pulling(daemons, attach, 1024, 4096)
    ids = np.arange(1024)
    tasks = [d.cache_manager.pull_blocks_async(blocks_key(p), dst.cache, ids, ids[::-1].copy(),
                                               timeout_ms=60000) for _ in range(4)]
    P.kill()
    for t in tasks:
        # Within the heartbeat timeout (2 s), far before the transfers' own 60 s.
        assert t.synchronize(30000) in (LLMStatusCode.LLM_SUCCESS, LLMStatusCode.LLM_PEER_LOST)
        assert t.done()
    with pytest.raises(LLMException) as e:
        d.check_link_status(p.cluster_id)
    assert e.value.status_code == LLMStatusCode.LLM_PEER_LOST
    with pytest.raises(LLMException) as e:
        d.cache_manager.pull_blocks(blocks_key(p), dst.cache, [0], [0])
    assert e.value.status_code == LLMStatusCode.LLM_PEER_LOST
    # Every block is what it was or the source's: nothing else was written.
    new = copy_blocks(dst.expected(), dst, src, ids, ids[::-1])
    old_or_new = (dst.mem == dst.image) | (dst.mem == new)
    assert old_or_new.all()
    # Its own daemon is gone: finalizing says so, and the instance is finalized all the same.
    with pytest.raises(LLMException) as e:
        p.finalize()
    assert e.value.status_code == LLMStatusCode.LLM_DAEMON_UNAVAILABLE
    with pytest.raises(LLMException) as e:
        p.check_link_status(d.cluster_id)
    assert e.value.status_code == LLMStatusCode.LLM_ENGINE_FINALIZED


def test_timeout_releases_the_gil(daemons, attach):
    # Peers are lost only after 30 s here: the frozen peer must time transfers out, not vanish.
    P, p, d, src, dst = pulling(daemons, attach, 64, 1024, heartbeat_ms=(200, 30000))
    ids = np.arange(64)
    cm = d.cache_manager

    ticks = 0
    stop = threading.Event()

    def ticker():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    P.proc.send_signal(signal.SIGSTOP)
    try:
        before = ticks
        with pytest.raises(LLMException) as e:
            cm.pull_blocks(blocks_key(p), dst.cache, ids, ids, timeout_ms=500)
        during = ticks - before
        assert e.value.status_code == LLMStatusCode.LLM_TIMEOUT
        # With the GIL held for the 500 ms call the ticker could not have run at all.
        assert during >= 10, f"the ticker ran {during} times during the call"

        task = cm.pull_blocks_async(blocks_key(p), dst.cache, ids, ids, timeout_ms=500)
        assert not task.done()
        assert task.synchronize(10) == LLMStatusCode.LLM_TIMEOUT  # still running
        assert task.get_results(0) == [None]
        with pytest.raises(LLMException) as e:
            task.wait()
        assert e.value.status_code == LLMStatusCode.LLM_TIMEOUT
        assert task.done() and task.get_results() == [LLMStatusCode.LLM_TIMEOUT]
    finally:
        P.proc.send_signal(signal.SIGCONT)
        stop.set()
        thread.join()

    # The peer answers the stale requests now; nothing lands after they timed out.
    d.daemon_status()
    time.sleep(0.5)
    dst.check_untouched()
    cm.pull_blocks(blocks_key(p), dst.cache, ids, ids[::-1].copy(), timeout_ms=30000)
    dst.check(copy_blocks(dst.expected(), dst, src, ids, ids[::-1]))
