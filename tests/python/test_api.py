# SPDX-License-Identifier: MIT
"""The kvdist package's API on one daemon: statuses and exceptions, the value types, the
instance's lifecycle and options, what each call refuses (with which status), memory from
kvdist.empty() and its lifetime, notifications through asyncio, comm domains, introspection,
and reference counting."""

import asyncio
import gc
import json
import select
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import kvdist
from kvdist import (BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType,
                    LLMClusterInfo, LLMConfig, LLMDataDist, LLMException, LLMRole, LLMStatusCode,
                    Placement, RegisterMemStatus, TransferWithCacheKeyConfig, _kvdist)
from kvdist._status import _BY_KVD_NAME, status_code

from conftest import Guarded, addr, blocks_key, copy_blocks


def raises(code, match=None):
    """pytest.raises(LLMException) that also checks the status code."""

    class Checker:
        def __enter__(self):
            self.ctx = pytest.raises(LLMException, match=match)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            r = self.ctx.__exit__(*exc)
            assert self.info.value.status_code == code, \
                f"{self.info.value!r} is not {code.name}"
            return r

    return Checker()


def cluster(dd_or_id, role=LLMRole.PROMPT, addr=None):
    info = LLMClusterInfo()
    info.remote_cluster_id = dd_or_id if isinstance(dd_or_id, int) else dd_or_id.cluster_id
    info.remote_role_type = role
    if addr:
        ip, port = addr.rsplit(":", 1)
        info.append_remote_ip_info(ip.strip("[]"), int(port))
    return info


def blocks_desc(num_tensors=2, blocks=4, block_bytes=64):
    return CacheDesc(num_tensors, [blocks, block_bytes], DataType.DT_UINT8)


# --- statuses -------------------------------------------------------------------------------


def test_every_libkvdist_status_has_an_llm_status_code():
    statuses = _kvdist.statuses()
    assert statuses[0] == "KVD_OK" and statuses[-3] == "KVD_E_TIMEOUT"
    for code, name in statuses.items():
        assert name in _BY_KVD_NAME, f"{name} ({code}) maps to no LLMStatusCode"
        assert status_code(code) == _BY_KVD_NAME[name]
    # Distinct statuses stay distinct.
    assert len({status_code(c) for c in statuses}) == len(statuses)
    assert status_code(-9999) == LLMStatusCode.LLM_UNKNOWN_ERROR
    assert status_code(_kvdist.FINALIZED) == LLMStatusCode.LLM_ENGINE_FINALIZED
    # llm_datadist's value; -1 is also KVD_E_FAILED, which must still be LLM_FAILED: statuses
    # map by their names, never by an LLMStatusCode's value.
    assert LLMStatusCode.LLM_UNKNOWN_ERROR == -1 and statuses[-1] == "KVD_E_FAILED"
    assert status_code(-1) == LLMStatusCode.LLM_FAILED
    assert LLMStatusCode.LLM_UNKNOWN_ERROR not in _BY_KVD_NAME.values()
    assert str(LLMStatusCode.LLM_TIMEOUT) == "LLMStatusCode.LLM_TIMEOUT"
    # llm_datadist's status module functions, over libkvdist's statuses.
    assert kvdist.status.code_2_status(0) == LLMStatusCode.LLM_SUCCESS
    assert kvdist.status.code_2_status(-4) == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST
    assert kvdist.status.code_2_status(-9999) == LLMStatusCode.LLM_FAILED  # as llm_datadist's
    kvdist.status.handle_llm_status(0, "[pull]", "nothing")
    with raises(LLMStatusCode.LLM_KV_CACHE_NOT_EXIST, match=r"^\[pull\] failed, .* key 3\.$"):
        kvdist.status.handle_llm_status(-4, "[pull]", "key 3")
    kvdist.status.raise_if_false(True, "x")
    kvdist.status.raise_if_true(False, "x")
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="^a 1 b$"):
        kvdist.status.raise_if_false(False, "a {0} {x}", 1, x="b")
    with raises(LLMStatusCode.LLM_TIMEOUT, match="^late$"):
        kvdist.status.raise_if_true(True, "late", status_code=LLMStatusCode.LLM_TIMEOUT)


def test_exception():
    # llm_datadist's form: LLMException(*args, status_code=...), a RuntimeError.
    e = LLMException("late", status_code=LLMStatusCode.LLM_TIMEOUT)
    assert isinstance(e, RuntimeError) and e.args == ("late",) and str(e) == "late"
    assert e.status_code == LLMStatusCode.LLM_TIMEOUT and e.message == "late"
    assert e.kvd_status is None
    assert LLMException().status_code == LLMStatusCode.LLM_SUCCESS
    assert LLMException("a", "b", status_code=6).status_code is LLMStatusCode.LLM_PARAM_INVALID
    with pytest.raises(AttributeError):
        e.status_code = LLMStatusCode.LLM_FAILED  # read-only, as llm_datadist's
    with pytest.raises(TypeError):
        LLMException("late", LLMStatusCode.LLM_TIMEOUT, kvdist_status=1)
    # What kvdist raises says the code (and the libkvdist status), then the detail.
    e = LLMException._from_kvd(-4, "no cache 7")
    assert e.status_code == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST and e.kvd_status == -4
    assert str(e) == "LLM_KV_CACHE_NOT_EXIST (KVD_E_CACHE_NOT_EXIST): no cache 7"
    assert e.message == "no cache 7"
    try:
        raise e
    except RuntimeError as caught:  # what llm_datadist code catches
        assert caught is e


# --- value types ----------------------------------------------------------------------------


def test_cache_desc():
    d = CacheDesc(4, [16, 8, 128], DataType.DT_FLOAT16, Placement.HOST)
    assert d.size == 16 * 8 * 128 * 2 and d._kvd() == (4, (16, 8, 128), int(DataType.DT_FLOAT16))
    assert DataType.DT_BF16.itemsize == 2 and DataType.DT_DOUBLE.itemsize == 8
    with pytest.raises(TypeError):
        CacheDesc(4, [16], "float16")
    with pytest.raises(TypeError):
        CacheDesc(4, 16, DataType.DT_FLOAT)
    with pytest.raises(TypeError):
        CacheDesc(4.0, [16], DataType.DT_FLOAT)
    with pytest.raises(ValueError):
        CacheDesc(-1, [16], DataType.DT_FLOAT)
    d.update_dim(0, 32)
    assert d.shape == [32, 8, 128] and d.size == 32 * 8 * 128 * 2
    with pytest.raises(ValueError):
        d.update_dim(3, 1)
    assert kvdist.data_type.get_python_dtype_from_wrapper_dtype(2) is DataType.DT_BF16
    with pytest.raises(ValueError):
        kvdist.data_type.get_python_dtype_from_wrapper_dtype(99)


def test_dt_string_is_refused():
    # llm_datadist has DT_STRING; kvdist cannot move it (no fixed element size): it is refused
    # wherever its size or a cache of it would be needed, before anything reaches libkvdist.
    assert DataType.DT_STRING.name == "DT_STRING"
    assert DataType.DT_STRING not in (DataType(v) for v in range(13))
    d = CacheDesc(2, [4, 8], DataType.DT_STRING)  # a description, as in llm_datadist
    for what in (lambda: DataType.DT_STRING.itemsize, lambda: d.size, d._kvd):
        with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="DT_STRING"):
            what()
    with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="DT_STRING"):
        kvdist.Cache.create_cpu_cache(CacheDesc(2, [4, 8], DataType.DT_STRING, Placement.HOST),
                                      [4096, 8192])
    with pytest.raises(ValueError):
        kvdist.data_type.get_python_dtype_from_wrapper_dtype(int(DataType.DT_STRING))


def test_keys():
    assert CacheKey(1, req_id=5)._kvd() == (_kvdist.KEY_REQ, 1, 5, 2**64 - 1, 0, 0, 0)
    # A prefix key: llm_datadist requires req_id, here the invalid id.
    assert CacheKey(1, 2**64 - 1, prefix_id=9, model_id=2)._kvd() == (
        _kvdist.KEY_REQ, 1, 2**64 - 1, 9, 2, 0, 0)
    k = CacheKey(prompt_cluster_id=4, req_id=5, model_id=6, prefix_id=7)
    assert (k.cluster_id, k.prompt_cluster_id, k.req_id, k.model_id, k.prefix_id) == \
        (4, 4, 5, 6, 7)
    assert k == CacheKey(4, 5, 6, 7) and eval(repr(k), vars(kvdist)) == k
    assert CacheKeyByIdAndIndex(3, 4, 5)._kvd() == (_kvdist.KEY_ID_INDEX, 3, 2**64 - 1,
                                                    2**64 - 1, 0, 4, 5)
    k = BlocksCacheKey(7, 1)
    assert k._kvd() == (_kvdist.KEY_BLOCKS, 7, 2**64 - 1, 2**64 - 1, 1, 0, 0)
    assert k.cluster_id == k.prompt_cluster_id == 7
    assert k == BlocksCacheKey(7, 1) and hash(k) == hash(BlocksCacheKey(7, 1))
    assert k != BlocksCacheKey(7, 0) and k != CacheKey(7, 1)
    assert eval(repr(k), vars(kvdist)) == k
    assert BlocksCacheKey(np.uint64(7)) == BlocksCacheKey(7)
    with pytest.raises(ValueError):
        BlocksCacheKey(-1)
    with pytest.raises(ValueError):
        CacheKey(2**64, 1)
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="req_id is required"):
        CacheKey(7)
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="cluster_id or prompt_cluster_id"):
        BlocksCacheKey(model_id=1)
    with pytest.raises(TypeError):
        CacheKeyByIdAndIndex(1, "2")


def test_cluster_info():
    info = LLMClusterInfo()
    info.remote_cluster_id = 9
    info.append_remote_ip_info("10.0.0.2", 7400)
    # An int is llm_datadist's form of the address: trans_str_ip()'s, 10.0.0.1 -> 0x0100000A.
    assert kvdist.configs.trans_str_ip("10.0.0.1") == 0x0100000A
    assert kvdist.configs.trans_str_ip(5) == 5
    with pytest.raises(RuntimeError):
        kvdist.configs.trans_str_ip("node-a")
    info.append_local_ip_info(0x0100000A, 0)
    assert info._kvd() == (9, int(LLMRole.PROMPT), "10.0.0.2:7400", "10.0.0.1:0")
    assert info.remote_ip_info_list == [(0x0200000A, 7400)]
    assert info.local_ip_info_list == [(0x0100000A, 0)]
    with pytest.raises(TypeError):
        info.append_local_ip_info(b"10.0.0.1", 0)
    with pytest.raises(ValueError):
        info.append_local_ip_info(2**32, 0)
    v6 = LLMClusterInfo()
    v6.append_remote_ip_info("fe80::1", 1)
    assert v6._kvd()[2] == "[fe80::1]:1" and v6.remote_ip_info_list == [("fe80::1", 1)]
    with pytest.raises(ValueError):
        v6.append_remote_ip_info("node-a", 1)
    with pytest.raises(ValueError):
        v6.append_remote_ip_info("::1", 65536)
    v6.append_remote_ip_info("::1", 2)
    with pytest.raises(ValueError, match="one address"):
        v6._kvd()


def test_config_options():
    # Every property in detail: test_port.py. Here: a config init() takes as it is.
    c = LLMConfig()
    assert c.generate_options() == {"llm.MemoryUtilization": "0.95"}
    c.device_id = [3]
    c.sync_kv_timeout = 2500
    c.listen_ip_info = "10.0.0.1:7400"
    c.local_comm_res = ""
    c.enable_cache_manager = True
    c.socket_path = "/run/x.sock"
    c.ge_options = {"ge.extra": "1"}
    assert c.generate_options() == {
        "ge.exec.deviceId": "3", "ge.session_device_id": "3", "llm.SyncKvCacheWaitTime": "2500",
        "llm.listenIpInfo": "10.0.0.1:7400", "llm.LocalCommRes": "",
        "llm.EnableCacheManager": "1", "socket_path": "/run/x.sock", "ge.extra": "1",
        "llm.MemoryUtilization": "0.95"}
    with pytest.raises(TypeError):
        c.ge_options = {"ge.extra": 1}


def test_transfer_config():
    k = BlocksCacheKey(2)
    c = TransferWithCacheKeyConfig(k, range(0, 4), range(2, 6))
    assert c.cache_key is k and c.src_batch_index == 0 and c.dst_cluster_id == 2
    assert (c.src_layer_range, c.dst_layer_range) == (range(0, 4), range(2, 6))
    # As in llm_datadist: both layer ranges are required, of one length, step 1, from 0 up.
    with pytest.raises(TypeError):
        TransferWithCacheKeyConfig(k)
    with pytest.raises(TypeError):
        TransferWithCacheKeyConfig(k, range(0, 4))
    with pytest.raises(TypeError):
        TransferWithCacheKeyConfig(k, dst_layer_range=range(0, 4))
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        TransferWithCacheKeyConfig(k, range(0, 4), range(0, 2))
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        TransferWithCacheKeyConfig(k, range(0, 4, 2), range(0, 2))
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        TransferWithCacheKeyConfig(k, range(2, 2), range(0, 0))
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        TransferWithCacheKeyConfig(k, range(-1, 1), range(0, 2))
    with pytest.raises(TypeError):
        TransferWithCacheKeyConfig(CacheKey(2, 1), range(0, 1), range(0, 1))
    with pytest.raises(TypeError):
        TransferWithCacheKeyConfig(k, (0, 3), range(0, 3))
    # A blocks destination has no batch index.
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        TransferWithCacheKeyConfig(k, range(0, 1), range(0, 1), src_batch_index=1)
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        c.src_batch_index = 1
    item = TransferWithCacheKeyConfig(CacheKeyByIdAndIndex(2, 3), range(0, 1), range(1, 2), 4)
    assert item.src_batch_index == 4
    # The setters check as llm_datadist's do; they take None (every layer).
    c.src_layer_range = None
    assert c.src_layer_range is None
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        c.dst_layer_range = range(0, 4, 2)
    with pytest.raises(TypeError):
        c.cache_key = CacheKey(2, 1)


# --- lifecycle and options ------------------------------------------------------------------


def test_lifecycle(daemon):
    dd = LLMDataDist(LLMRole.DECODER, 4242)
    assert dd.role == LLMRole.DECODER and dd.cluster_id == 4242
    with raises(LLMStatusCode.LLM_NOT_INITIALIZED):
        dd.check_link_status(1)
    with raises(LLMStatusCode.LLM_NOT_INITIALIZED):
        kvdist.empty(4, datadist=dd)
    config = LLMConfig()
    config.device_id = 0
    config.socket_path = daemon.socket
    with dd:
        dd.init(config.generate_options())
        dd.init({"this": "is not even looked at"})  # a second init does nothing
        status = dd.daemon_status()
        assert 4242 in [c["cluster_id"] for c in status["clusters"]]
    # The context manager finalized it.
    with raises(LLMStatusCode.LLM_ENGINE_FINALIZED):
        dd.check_link_status(1)
    with raises(LLMStatusCode.LLM_ENGINE_FINALIZED):
        dd.init({"device_id": "0", "socket_path": daemon.socket})
    dd.finalize()
    assert 4242 not in [c["cluster_id"] for c in kvdist.daemon_status(daemon.socket)["clusters"]]
    # The id is free again.
    again = LLMDataDist(LLMRole.PROMPT, 4242)
    again.init({"device_id": "0", "socket_path": daemon.socket})
    again.finalize()


def test_init_refusals(daemon, attach, tmp_path):
    sock = daemon.socket
    with raises(LLMStatusCode.LLM_DAEMON_UNAVAILABLE):
        LLMDataDist(LLMRole.PROMPT, 1).init({"device_id": "0",
                                             "socket_path": str(tmp_path / "none.sock")})
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="device_id"):
        LLMDataDist(LLMRole.PROMPT, 1).init({"socket_path": sock})
    with raises(LLMStatusCode.LLM_OUT_OF_MEMORY, match="llm.MemPoolConfig"):
        LLMDataDist(LLMRole.PROMPT, 1).init({"device_id": "0", "socket_path": sock,
                                             "llm.MemPoolConfig": '{"memory_size": 1099511627776}'})
    with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="llm.RdmaServiceLevel"):
        LLMDataDist(LLMRole.PROMPT, 1).init({"device_id": "0", "socket_path": sock,
                                             "llm.RdmaServiceLevel": "4"})
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="sync_kv_timeout_ms"):
        LLMDataDist(LLMRole.PROMPT, 1).init({"device_id": "0", "socket_path": sock,
                                             "llm.SyncKvCacheWaitTime": "soon"})
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="given twice"):
        LLMDataDist(LLMRole.PROMPT, 1).init({"device_id": "0", "ge.exec.deviceId": "0",
                                             "socket_path": sock})
    with pytest.raises(ValueError):
        LLMDataDist(7, 1)
    with pytest.raises(TypeError):
        LLMDataDist(LLMRole.PROMPT, 1).init([("device_id", "0")])
    taken = attach(daemon)
    with raises(LLMStatusCode.LLM_CLUSTER_EXISTS):
        attach(daemon, cluster_id=taken.cluster_id)
    # Options that only select llm_datadist modes are accepted.
    attach(daemon, **{"llm.EnableCacheManager": "1", "llm.EnableSwitchRole": "0"})


# --- what calls refuse ----------------------------------------------------------------------


def test_cache_refusals(daemon, attach):
    dd = attach(daemon)
    cm = dd.cache_manager
    outside = np.zeros(4096, np.uint8)
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        cm.register_blocks_cache(blocks_desc(1), [addr(outside)])
    mem = kvdist.empty((2, 256), np.uint8, datadist=dd)
    addrs = [addr(mem[t]) for t in range(2)]
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="num_tensors|addrs"):
        cm.register_blocks_cache(blocks_desc(3), addrs)
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        cm.register_blocks_cache(blocks_desc(0), [])
    with pytest.raises(TypeError):
        cm.register_blocks_cache(blocks_desc(2), addrs, CacheKey(dd.cluster_id, 1))
    with pytest.raises(TypeError):
        cm.register_cache(blocks_desc(2), addrs, [BlocksCacheKey(dd.cluster_id)])
    key = CacheKey(dd.cluster_id, req_id=1)
    cache = cm.register_cache(CacheDesc(2, [1, 256], DataType.DT_UINT8), addrs, [key])
    assert cache.per_device_tensor_addrs == [addrs]
    other = kvdist.empty((2, 256), np.uint8, datadist=dd)
    with raises(LLMStatusCode.LLM_CACHE_KEY_ALREADY_EXIST):
        cm.register_cache(CacheDesc(2, [1, 256], DataType.DT_UINT8),
                          [addr(other[t]) for t in range(2)], [key])
    cm.remove_cache_key(key)
    cm.remove_cache_key(key)  # a key that is gone: a no-op, as in LLM-DataDist
    cm.unregister_cache(cache.cache_id)
    cm.unregister_cache(cache)  # unknown ids are success
    with raises(LLMStatusCode.LLM_KV_CACHE_NOT_EXIST):
        cm.deallocate_cache(123456)
    with raises(LLMStatusCode.LLM_NOT_YET_LINK):
        cm.pull_blocks(BlocksCacheKey(99999), cache, [0], [0])
    with pytest.raises(ValueError):
        cm.pull_blocks(BlocksCacheKey(99999), cache, [-1], [0])
    with pytest.raises(ValueError):
        cm.pull_blocks(BlocksCacheKey(99999), cache, np.array([0, -2]), [0, 1])
    with pytest.raises(TypeError):
        cm.pull_blocks(BlocksCacheKey(99999), cache, np.array([0.5]), [0])
    with pytest.raises(TypeError):
        cm.pull_blocks(BlocksCacheKey(99999), cache, np.zeros((2, 2), np.int64), [0])
    with pytest.raises(ValueError):
        cm.pull_cache(CacheKey(99999, 1), cache, timeout_ms=0)
    with pytest.raises(TypeError):
        cm.pull_cache(BlocksCacheKey(99999), cache)
    with pytest.raises(TypeError):
        cm.push_blocks(BlocksCacheKey(99999), cache, [0], [0], notify="text")
    # The layer keywords of the pulls are keyword-only, as llm_datadist's **kwargs.
    with pytest.raises(TypeError):
        cm.pull_blocks(BlocksCacheKey(99999), cache, [0], [0], range(0, 1))
    with pytest.raises(TypeError):
        cm.pull_cache(CacheKey(99999, 1), cache, 0, -1, range(0, 1))
    # A CacheKey names a request or a prefix, not both or neither (llm_datadist's check).
    for bad in (CacheKey(99999, 1, prefix_id=2), CacheKey(99999, 2**64 - 1)):
        with raises(LLMStatusCode.LLM_PARAM_INVALID, match="req id"):
            cm.pull_cache(bad, cache)
        with raises(LLMStatusCode.LLM_PARAM_INVALID, match="req id"):
            cm.pull_blocks(bad, cache, (), [0])
    # A cache of DT_STRING is refused before it reaches the daemon.
    with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="DT_STRING"):
        cm.register_cache(CacheDesc(2, [1, 256], DataType.DT_STRING), addrs)
    with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="DT_STRING"):
        cm.allocate_blocks_cache(CacheDesc(2, [1, 256], DataType.DT_STRING))
    with pytest.raises(TypeError, match="DT_STRING"):
        kvdist.empty((4,), DataType.DT_STRING, datadist=dd)
    with raises(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, match="cache_manager"):
        dd.kv_cache_manager


def test_link_refusals(daemon, attach):
    a, b = attach(daemon), attach(daemon, LLMRole.DECODER)
    ret, rets = b.link_clusters([cluster(1 + i) for i in range(17)])
    assert ret == LLMStatusCode.LLM_CLUSTER_NUM_EXCEED_LIMIT
    assert rets == [LLMStatusCode.LLM_CLUSTER_NUM_EXCEED_LIMIT] * 17
    assert "at most 16" in b.last_error
    ret, rets = b.link_clusters([cluster(a), cluster(987654)], 2000)
    assert ret != LLMStatusCode.LLM_SUCCESS and rets[0] == LLMStatusCode.LLM_SUCCESS
    assert rets[1] != LLMStatusCode.LLM_SUCCESS and b.last_error
    assert b.link_clusters([cluster(a)]) == (LLMStatusCode.LLM_ALREADY_LINK,
                                             [LLMStatusCode.LLM_ALREADY_LINK])
    b.check_link_status(a.cluster_id)
    with raises(LLMStatusCode.LLM_NOT_YET_LINK):
        b.check_link_status(987654)
    with raises(LLMStatusCode.LLM_EXIST_LINK):
        b.switch_role(LLMRole.PROMPT)
    assert b.role == LLMRole.DECODER
    assert b.unlink_clusters([cluster(a)]) == (LLMStatusCode.LLM_SUCCESS,
                                               [LLMStatusCode.LLM_SUCCESS])
    with raises(LLMStatusCode.LLM_NOT_YET_LINK):
        b.check_link_status(a.cluster_id)
    # After a fault a side drops its own end (force); the pair links again.
    b.link_clusters([cluster(a)])
    assert b.unlink_clusters([cluster(a)], 3000, force=True) == (LLMStatusCode.LLM_SUCCESS,
                                                                  [LLMStatusCode.LLM_SUCCESS])
    with raises(LLMStatusCode.LLM_NOT_YET_LINK):
        b.check_link_status(a.cluster_id)
    assert b.link_clusters([cluster(a)])[0] == LLMStatusCode.LLM_SUCCESS
    b.unlink_clusters([cluster(a)])
    b.switch_role(LLMRole.MIX, {"llm.listenIpInfo": daemon.peer_addr})
    assert b.role == LLMRole.MIX
    with pytest.raises(ValueError):
        b.switch_role(9)
    with pytest.raises(ValueError):
        b.link_clusters([cluster(a)], timeout=2**40)


# --- memory ---------------------------------------------------------------------------------


def cluster_regions(daemon, cluster_id):
    for c in kvdist.daemon_status(daemon.socket)["clusters"]:
        if c["cluster_id"] == cluster_id:
            return c["regions"]
    raise AssertionError(f"cluster {cluster_id} is not attached")


def test_empty(daemon, attach):
    dd = attach(daemon)
    a = kvdist.empty((3, 5, 7), np.float16)
    assert a.shape == (3, 5, 7) and a.dtype == np.float16 and a.flags.writeable
    assert not a.any()  # zero-filled
    assert kvdist.empty(10, DataType.DT_INT64).dtype == np.int64
    assert kvdist.empty((2, 2), DataType.DT_BF16).dtype == np.uint16
    assert kvdist.empty((0, 4)).shape == (0, 4)
    mem = a.base
    while not isinstance(mem, _kvdist.Memory):
        mem = mem.base if hasattr(mem, "base") else mem.obj
    assert mem.address == addr(a) and mem.size % _kvdist.PAGE_SIZE == 0
    with pytest.raises(ValueError):
        kvdist.empty((-1, 4))
    with pytest.raises(TypeError):
        kvdist.empty(4, "no such type")
    other = attach(daemon)
    with pytest.raises(ValueError, match="2 LLMDataDist"):
        kvdist.empty(4)
    assert kvdist.empty(4, datadist=other).shape == (4,)
    other.finalize()
    dd.finalize()
    with pytest.raises(ValueError, match="0 LLMDataDist"):
        kvdist.empty(4)


def test_empty_torch(daemon, attach):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    dd = attach(daemon)
    t = kvdist.empty_torch((4, 16, 2, 8))
    assert t.dtype == torch.float32 and t.shape == (4, 16, 2, 8) and not t.any()
    t += 1.5
    b = kvdist.empty_torch((4, 4), torch.bfloat16)
    assert b.dtype == torch.bfloat16 and b.element_size() == 2
    assert kvdist.empty_torch(3, DataType.DT_INT32).dtype == torch.int32
    with pytest.raises(TypeError):
        kvdist.empty_torch(3, torch.complex64)
    with pytest.raises(TypeError):
        kvdist.empty_torch(3, DataType.DT_UINT32)
    # A cache registered straight from the tensors, as engines do (data_ptr()).
    kv = kvdist.empty_torch((2, 8, 16), torch.float16)
    desc = CacheDesc(2, [8, 16], DataType.DT_FLOAT16)
    cache = dd.cache_manager.register_blocks_cache(desc, [x.data_ptr() for x in kv],
                                                   blocks_key(dd))
    assert cache.tensor_addrs[1] - cache.tensor_addrs[0] == 8 * 16 * 2
    dd.cache_manager.unregister_cache(cache.cache_id)


def test_memory_outlives_the_instance(daemon, attach):
    dd = attach(daemon)
    a = kvdist.empty((4, 1000), np.uint8)
    a[:] = 7
    cache = dd.cache_manager.register_blocks_cache(
        CacheDesc(1, [4, 1000], DataType.DT_UINT8), [addr(a)])
    assert cluster_regions(daemon, dd.cluster_id) == 1
    dd.finalize()
    # Still mapped, still ours: read, written, then freed with the array.
    assert (a == 7).all()
    a[:] = 9
    assert a.sum() == 9 * 4000
    del a, cache
    gc.collect()


def test_memory_freed_with_the_last_array(daemon, attach):
    dd = attach(daemon)
    a = kvdist.empty((2, 4096), np.uint8)
    view = a[1]
    assert cluster_regions(daemon, dd.cluster_id) == 1
    del a
    assert cluster_regions(daemon, dd.cluster_id) == 1  # the view holds it
    del view
    assert cluster_regions(daemon, dd.cluster_id) == 0
    # Memory a cache lies in waits for the cache to go, then goes with it.
    b = kvdist.empty((1, 4096), np.uint8)
    cache = dd.cache_manager.register_blocks_cache(
        CacheDesc(1, [1, 4096], DataType.DT_UINT8), [addr(b)])
    del b
    assert cluster_regions(daemon, dd.cluster_id) == 1
    dd.cache_manager.unregister_cache(cache)
    assert cluster_regions(daemon, dd.cluster_id) == 0


# --- notifications --------------------------------------------------------------------------


def test_notifications_with_asyncio(daemon, attach):
    a, b = attach(daemon), attach(daemon, LLMRole.DECODER)
    src = Guarded(a, 2, 8, 32, seed=1)
    dst = Guarded(b, 2, 8, 32, seed=2, key=blocks_key(b, 3))
    assert a.link_clusters([cluster(b, LLMRole.DECODER)])[0] == LLMStatusCode.LLM_SUCCESS
    fd = b.notify_fd()
    assert fd == b.notify_fd() and b.get_notifies() == []
    assert select.select([fd], [], [], 0)[0] == []

    async def receive():
        loop = asyncio.get_running_loop()
        got = loop.create_future()

        def readable():
            notes = b.get_notifies()
            if notes and not got.done():
                got.set_result(notes)

        loop.add_reader(fd, readable)
        try:
            pushed = loop.run_in_executor(None, lambda: a.cache_manager.push_blocks(
                blocks_key(b, 3), src.cache, [1, 2], [5, 6], notify=b"layer 0 done"))
            notes = await asyncio.wait_for(got, 30)
            await pushed
            return notes
        finally:
            loop.remove_reader(fd)

    notes = asyncio.run(receive())
    assert notes == [kvdist.Notification(a.cluster_id, b"layer 0 done")]
    assert notes[0].kind == "push"
    # The bytes had landed before the notification came.
    dst.check(copy_blocks(dst.expected(), dst, src, [1, 2], [5, 6]))
    assert select.select([fd], [], [], 0)[0] == []
    # Several wait in order; max_count takes some of them.
    for i in range(3):
        a.cache_manager.push_blocks(blocks_key(b, 3), src.cache, [0], [0], notify=bytes([i]))
    assert [n.data for n in b.get_notifies(2)] == [b"\0", b"\1"]
    assert [n.data for n in b.get_notifies()] == [b"\2"]
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="256"):
        a.cache_manager.push_blocks(blocks_key(b, 3), src.cache, [0], [0], notify=bytes(257))
    with pytest.raises(ValueError):
        b.get_notifies(0)
    # A pull tells the cluster it read from (kind "pull", from the puller), on the same queue:
    # on one daemon before the pull returned. A pull that fails tells nothing.
    with raises(LLMStatusCode.LLM_PARAM_INVALID):
        a.cache_manager.pull_blocks(blocks_key(b, 3), src.cache, [99], [7], notify=b"lost")
    a.cache_manager.pull_blocks(blocks_key(b, 3), src.cache, [3], [7], notify=b"3 read")
    a.cache_manager.pull_blocks_async(blocks_key(b, 3), src.cache, [4], [6],
                                      notify=b"4 read").wait()
    src.check(copy_blocks(src.expected(), src, dst, [3, 4], [7, 6]))
    assert select.select([fd], [], [], 0)[0] == [fd]
    notes = b.get_notifies()
    assert notes == [(a.cluster_id, b"3 read"), (a.cluster_id, b"4 read")]
    assert [n.kind for n in notes] == ["pull", "pull"]
    assert "kind='pull'" in repr(notes[0])
    assert a.get_notifies() == []


# --- comm domains ---------------------------------------------------------------------------


def test_comm_domain(daemon, attach):
    a = attach(daemon, LLMRole.MIX, **{"ge.exec.deviceId": "0"})
    b = attach(daemon, LLMRole.MIX, **{"ge.exec.deviceId": "1"})
    devices = ", ".join(f'{{"device_id": "{r}", "device_ip": "{daemon.peer_addr}", '
                        f'"rank_id": "{r}"}}' for r in range(2))
    table = json.dumps(json.loads(
        f'{{"version": "1.0", "server_count": "1", "status": "completed", '
        f'"server_list": [{{"server_id": "node-a", "device": [{devices}]}}]}}'))
    src = Guarded(a, 2, 4, 64, seed=5, key=blocks_key(a))
    dst = Guarded(b, 2, 4, 64, seed=6)
    ranks = {a.cluster_id: 0, b.cluster_id: 1}
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="rank_table"):
        a.link("bad", ranks, "{")
    with pytest.raises(TypeError):
        a.link("bad", [(a.cluster_id, 0)], table)
    comm_a = a.link("py-domain", ranks, table)
    assert a.query_register_mem_status(comm_a) in (RegisterMemStatus.PREPARING,
                                                    RegisterMemStatus.OK)
    comm_b = b.link("py-domain", ranks, table)
    for dd, comm in ((a, comm_a), (b, comm_b)):
        for _ in range(3000):
            st = dd.query_register_mem_status(comm)
            if st != RegisterMemStatus.PREPARING:
                break
            threading.Event().wait(0.01)
        assert st == RegisterMemStatus.OK, dd.last_error
    b.cache_manager.pull_blocks(blocks_key(a), dst.cache, [3, 0], [0, 2])
    dst.check(copy_blocks(dst.expected(), dst, src, [3, 0], [0, 2]))
    a.unlink(comm_a)
    with raises(LLMStatusCode.LLM_PARAM_INVALID, match="comm domain"):
        a.unlink(comm_a)
    for _ in range(3000):
        if b.query_register_mem_status(comm_b) == RegisterMemStatus.FAILED:
            break
        threading.Event().wait(0.01)
    assert b.query_register_mem_status(comm_b) == RegisterMemStatus.FAILED
    assert b.last_error
    b.unlink(comm_b)


# --- introspection --------------------------------------------------------------------------


def test_introspection(daemon, attach):
    dd = attach(daemon)
    status = kvdist.daemon_status(daemon.socket)
    assert status["peer_listen"] == daemon.peer_addr
    assert dd.cluster_id in [c["cluster_id"] for c in dd.daemon_status()["clusters"]]
    assert "kvdist_clusters" in kvdist.daemon_metrics(daemon.socket)
    assert "kvdist_clusters" in dd.daemon_metrics()


# --- reference counting ---------------------------------------------------------------------


def test_no_reference_leaks(daemon, attach):
    """Every call, successful or refused, many times: the Python heap must not grow."""
    a, b = attach(daemon), attach(daemon, LLMRole.DECODER)
    src = Guarded(a, 2, 16, 64, seed=11, key=blocks_key(a))
    dst = Guarded(b, 2, 16, 64, seed=12, key=blocks_key(b))
    b.link_clusters([cluster(a)])
    a.link_clusters([cluster(b)])
    cm = b.cache_manager
    ids = np.arange(16, dtype=np.int64)
    # Objects handed to the extension as they are: their reference counts must not move.
    small_ids, wide_ids, note = list(range(4)), np.arange(4, dtype=np.uint32), b"n" * 40
    a_id = a.cluster_id + 2**40  # not a cached small int
    held = (ids, small_ids, wide_ids, note, a_id)
    counts = [sys.getrefcount(o) for o in held]

    def once():
        cm.pull_blocks(blocks_key(a), dst.cache, ids, ids[::-1].copy())
        cm.pull_blocks(blocks_key(a), dst.cache, small_ids, wide_ids,
                       src_layer_range=range(0, 1), dst_layer_range=range(0, 1))
        a.cache_manager.push_blocks(blocks_key(b), src.cache, small_ids, wide_ids, notify=note)
        assert b.get_notifies() == [(a.cluster_id, note)]
        with pytest.raises(LLMException):
            b.check_link_status(a_id)
        t = cm.pull_blocks_async(blocks_key(a), dst.cache, [1], [2])
        t.wait()
        assert t.done()
        with pytest.raises(LLMException):
            cm.pull_blocks(blocks_key(a), dst.cache, [99], [0])
        with pytest.raises(LLMException):
            b.check_link_status(1)
        with pytest.raises(ValueError):
            cm.pull_blocks(blocks_key(a), dst.cache, [-1], [0])
        b.link_clusters([cluster(a)])
        x = kvdist.empty((2, 100), np.float32, datadist=b)
        c = cm.register_blocks_cache(CacheDesc(2, [1, 100], DataType.DT_FLOAT),
                                     [addr(x[0]), addr(x[1])])
        cm.unregister_cache(c)
        b.daemon_status()

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
    # 200 rounds of a dozen calls: a leaked object per call would be tens of kilobytes.
    assert total < 16384, "\n".join(str(s) for s in grown[:10])
    assert [sys.getrefcount(o) for o in held] == counts
    wide_ids.resize(8, refcheck=False)  # no buffer of it is still exported
