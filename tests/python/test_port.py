# SPDX-License-Identifier: MIT
"""What code written for llm_datadist finds here: every name of its v2 API and its modules,
LlmConfig's checked properties and the options they generate, what init() makes of each option
(mapped, checked against the daemon, accepted as a mode kvdist always has, or refused by name),
and the local copies (copy_blocks, copy_cache, swap_blocks with cpu caches) checked byte for
byte with the guard bytes around every tensor."""

import ctypes
import json

import numpy as np
import pytest

import kvdist
from kvdist import (BlocksCacheKey, Cache, CacheDesc, DataType, KvCache, LLMConfig, LLMException,
                    LlmConfig, LLMStatusCode, MemInfo, Memtype, Placement, Status,
                    TransferConfig)
from kvdist._config import init_options

from conftest import GUARD, Guarded, addr, copy_blocks, pattern

PARAM_INVALID = LLMStatusCode.LLM_PARAM_INVALID
NOT_ENABLED = LLMStatusCode.LLM_FEATURE_NOT_ENABLED


def status_of(excinfo):
    return excinfo.value.status_code


# --- names ----------------------------------------------------------------------------------


def test_every_v2_name():
    # llm_datadist's v2_list, as its __init__.py has it.
    names = ["LLMClusterInfo", "LLMStatusCode", "LLMException", "LLMRole", "LlmConfig",
             "LLMConfig", "DataType", "Status", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex",
             "KvCache", "Cache", "BlocksCacheKey", "LLMDataDist", "Placement",
             "RegisterMemStatus", "LayerSynchronizer", "TransferConfig", "CacheTask",
             "TransferWithCacheKeyConfig", "Memtype", "MemInfo"]
    assert kvdist.v2_list == names
    for name in names:
        assert hasattr(kvdist, name), name
        assert name in kvdist.__all__
    assert LLMConfig is LlmConfig
    assert issubclass(KvCache, Cache)
    for name in ("swap_blocks", "copy_blocks", "copy_cache", "remap_registered_memory",
                 "deallocate_blocks_cache"):
        assert callable(getattr(kvdist.CacheManager, name)), name
    assert callable(Cache.create_cpu_cache) and callable(KvCache.create_cpu_cache)


def test_modules():
    from kvdist.configs import LLMClusterInfo, LLMRole
    from kvdist.configs import LlmConfig as C
    from kvdist.data_type import DataType as D
    from kvdist.status import LLMException as E
    from kvdist.status import LLMStatusCode as S
    from kvdist.status import Status as St

    assert (C, D, E, S, St) == (LlmConfig, DataType, LLMException, LLMStatusCode, Status)
    assert LLMClusterInfo is kvdist.LLMClusterInfo and LLMRole is kvdist.LLMRole


def test_module_v2_llm_types():
    # What llm_datadist's own API tests import (test_cache_manager.py and others).
    import kvdist.v2.llm_types as t

    for name in ("RegisterMemStatus", "Cache", "Memtype", "MemInfo", "CacheDesc", "CacheKey",
                 "CacheKeyByIdAndIndex", "BlocksCacheKey", "KvCache", "LayerSynchronizer",
                 "TransferWithCacheKeyConfig", "TransferConfig", "CacheTask", "Placement"):
        assert getattr(t, name) is getattr(kvdist, name), name
    assert sorted(t.__all__) == sorted(n for n in dir(t) if not n.startswith("_"))


def test_status_and_codes():
    assert Status(LLMStatusCode.LLM_SUCCESS).is_ok()
    s = Status(LLMStatusCode.LLM_TIMEOUT)
    assert not s.is_ok() and s.status_code == LLMStatusCode.LLM_TIMEOUT
    # llm_datadist's spellings and its device codes.
    assert LLMStatusCode.LLM_SEQ_LENOVERLIMIT is LLMStatusCode.LLM_SEQ_LEN_OVER_LIMIT
    assert LLMStatusCode.LLM_DEVICE_MEM_ERROR != LLMStatusCode.LLM_SUSPECT_REMOTE_ERROR


def test_memtype_meminfo_transfer_config():
    assert Memtype.MEM_TYPE_DEVICE.value == 0 and Memtype.MEM_TYPE_HOST.value == 1
    m = MemInfo(Memtype.MEM_TYPE_HOST, 4096, 64)
    assert (m.mem_type, m.addr, m.size) == (Memtype.MEM_TYPE_HOST, 4096, 64)
    with pytest.raises(TypeError):
        MemInfo(0, 4096, 64)
    with pytest.raises(TypeError):
        MemInfo(Memtype.MEM_TYPE_HOST, "4096", 64)
    t = TransferConfig(3, [1, 2], range(0, 1), 0)
    assert (t.dst_cluster_id, t.dst_addrs, t.src_layer_range, t.src_batch_index) == \
        (3, [1, 2], range(0, 1), 0)
    assert t.dst_layer_range is None
    with pytest.raises(ValueError):
        TransferConfig(-1, [])
    with pytest.raises(TypeError):
        TransferConfig(1, 7)
    with pytest.raises(ValueError):
        TransferConfig(1, [], range(0, 4, 2))


def test_cache_desc_additions():
    d = CacheDesc(2, [4, 8], DataType.DT_FLOAT, Placement.HOST, 0, -1, "ND")
    assert d.batch_size == 4 and d.batch_dim == 0 and d.kv_tensor_format == "ND"
    assert CacheDesc(2, [4, 8], DataType.DT_FLOAT, batch_dim_index=1).batch_size == 8
    with pytest.raises(TypeError):
        CacheDesc(2, [4], DataType.DT_FLOAT, kv_tensor_format=1)


def test_create_cpu_cache():
    desc = CacheDesc(2, [4, 8], DataType.DT_UINT8, Placement.HOST)
    c = Cache.create_cpu_cache(desc, [4096, 8192])
    assert c.cache_id == -1 and c.tensor_addrs == [4096, 8192] and c.is_blocks_cache
    k = KvCache.create_cpu_cache(desc, [[4096, 8192]])
    assert isinstance(k, KvCache) and k.per_device_tensor_addrs == [[4096, 8192]]
    with pytest.raises(LLMException) as e:
        Cache.create_cpu_cache(CacheDesc(2, [4, 8], DataType.DT_UINT8), [4096, 8192])
    assert status_of(e) == PARAM_INVALID  # placement must be HOST
    with pytest.raises(LLMException) as e:
        Cache.create_cpu_cache(desc, [4096])
    assert status_of(e) == PARAM_INVALID
    with pytest.raises(LLMException) as e:
        KvCache.create_cpu_cache(desc, [[4096, 8192], [4096, 8192]])
    assert status_of(e) == PARAM_INVALID  # one device
    with pytest.raises(ValueError):
        Cache.create_cpu_cache(desc, [0, 8192])
    with pytest.raises(TypeError):
        Cache.create_cpu_cache(desc, (4096, 8192))
    with pytest.raises(TypeError):
        Cache.create_cpu_cache("desc", [4096, 8192])


# --- LlmConfig ------------------------------------------------------------------------------

# property: (valid values, {invalid value: exception}, what a valid value generates)
PROPERTIES = {
    "device_id": ([0, [3], (1,)], [("0", TypeError), (-1, LLMException), (2**31, ValueError),
                                   ([0, "1"], TypeError)],
                  (3, {"ge.exec.deviceId": "3", "ge.session_device_id": "3"})),
    "sync_kv_timeout": ([1, "2500"], [(0, LLMException), ("soon", LLMException),
                                      (1.5, TypeError), (2**31, ValueError)],
                        (2500, {"llm.SyncKvCacheWaitTime": "2500"})),
    "listen_ip_info": (["10.0.0.1:7400"], [(7400, TypeError)],
                       ("10.0.0.1:7400", {"llm.listenIpInfo": "10.0.0.1:7400"})),
    "local_comm_res": (["", "{}"], [(None, TypeError)], ("{}", {"llm.LocalCommRes": "{}"})),
    "enable_cache_manager": ([True, False], [(1, TypeError)],
                             (True, {"llm.EnableCacheManager": "1"})),
    "enable_remote_cache_accessible": ([True, False], [("1", TypeError)],
                                       (False, {"llm.EnableRemoteCacheAccessible": "0"})),
    "enable_switch_role": ([True, False], [(1, TypeError)],
                           (True, {"llm.EnableSwitchRole": "1"})),
    "mem_pool_cfg": (['{"memory_size": 1024}'], [(1024, TypeError)],
                     ('{"memory_size": 7}', {"llm.MemPoolConfig": '{"memory_size": 7}'})),
    "host_mem_pool_cfg": (['{"memory_size": 1024}'], [({}, TypeError)],
                          ("{}", {"llm.HostMemPoolConfig": "{}"})),
    "rdma_traffic_class": ([0, 132], [(-1, ValueError), (2**32, ValueError), ("132", TypeError)],
                           (132, {"llm.RdmaTrafficClass": "132"})),
    "rdma_service_level": ([0, 4], [(-1, ValueError), (4.0, TypeError)],
                           (4, {"llm.RdmaServiceLevel": "4"})),
    "link_total_time": ([0, 2**32 - 1], [(-1, LLMException), (2**32, LLMException),
                                         ("1", TypeError)],
                        (20, {"llm.LinkTotalTime": "20"})),
    "link_retry_count": ([1, 100], [(0, LLMException), (101, LLMException), (2.0, TypeError)],
                         (2, {"llm.LinkRetryCount": "2"})),
    "transfer_backend": (["", "hixl"], [(0, TypeError)],
                         ("hixl", {"llm.TransferBackend": "hixl"})),
    "global_resource_config": (["{}"], [(b"{}", TypeError)],
                               ("{}", {"llm.GlobalResourceConfig": "{}"})),
    "deploy_res_path": (["/x"], [(1, TypeError)], ("/x", {"llm.deployResPath": "/x"})),
    "buf_pool_cfg": (["{}"], [(1, TypeError)], ("{}", {"llm.BufPoolCfg": "{}"})),
    "output_max_size": ([1], [("1", TypeError)], (1, {"llm.OutputMaxSize": "1"})),
    "cluster_info": (['{"cluster_id": 1}'], [(1, TypeError), ("not json", ValueError)],
                     ('{"cluster_id": 1}', {"llm.ClusterInfo": '{"cluster_id": 1}'})),
    "mem_utilization": ([0.0, 1.0], [(1, TypeError), (1.5, LLMException)],
                        (0.5, {"llm.MemoryUtilization": "0.5"})),
    "ge_options": ([{"ge.x": "1"}], [({"ge.x": 1}, TypeError), ({1: "x"}, TypeError),
                                     ("x", TypeError)],
                   ({"ge.x": "1"}, {"ge.x": "1"})),
    "socket_path": (["/run/x.sock"], [(1, TypeError)],
                    ("/run/x.sock", {"socket_path": "/run/x.sock"})),
}

# What a fresh LlmConfig generates (llm_datadist always has the memory utilization).
DEFAULTS = {"llm.MemoryUtilization": "0.95"}


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_llm_config_property(name):
    valid, invalid, (value, generated) = PROPERTIES[name]
    for v in valid:
        c = LlmConfig()
        setattr(c, name, v)
        assert getattr(c, name) == v
    for v, exc in invalid:
        c = LlmConfig()
        before = getattr(c, name)
        with pytest.raises(exc) as e:
            setattr(c, name, v)
        if exc is LLMException:
            assert status_of(e) == PARAM_INVALID and name in str(e.value)
        assert getattr(c, name) == before, "a refused value must not stay"
    c = LlmConfig()
    setattr(c, name, value)
    expected = dict(DEFAULTS, **generated)
    assert c.generate_options() == expected and c.gen_options() == expected
    assert c.options == expected


def test_llm_config_defaults_and_devices():
    c = LlmConfig()
    assert c.generate_options() == DEFAULTS
    assert (c.link_total_time, c.link_retry_count, c.local_comm_res, c.transfer_backend,
            c.global_resource_config, c.enable_cache_manager) == (0, 1, "", "", "", False)
    c.device_id = [0, 1]
    assert c.generate_options()["ge.exec.deviceId"] == "0;1"
    assert c.generate_options()["ge.session_device_id"] == "0"
    c.ge_options = {"ge.exec.deviceId": "9"}
    assert c.generate_options()["ge.exec.deviceId"] == "0;1"  # the property wins


class Pool:
    """A fake daemon_pool() for init_options(): records whether it was asked."""

    def __init__(self, size=64 << 20, page_size=1 << 16):
        self.pool = {"size": size, "used": 0, "page_size": page_size, "allocations": 0}
        self.asked = []

    def __call__(self, socket_path):
        self.asked.append(socket_path)
        return self.pool


def test_init_options_mapping():
    c = LlmConfig()
    c.device_id = 2
    c.sync_kv_timeout = 700
    c.listen_ip_info = "127.0.0.1:0"
    c.local_comm_res = ""
    c.enable_cache_manager = True
    c.enable_remote_cache_accessible = False
    c.enable_switch_role = True
    c.mem_pool_cfg = '{"memory_size": 1048576, "page_shift": 16}'
    c.host_mem_pool_cfg = '{"memory_size": 4096}'
    c.link_total_time = 0
    c.link_retry_count = 1
    c.transfer_backend = "hixl"
    c.global_resource_config = ""
    c.socket_path = "/run/k.sock"
    pool = Pool()
    out = init_options(c.generate_options(), pool)
    assert sorted(out) == sorted([("device_id", "2"), ("sync_kv_timeout_ms", "700"),
                                  ("listen_ip_info", "127.0.0.1:0"),
                                  ("socket_path", "/run/k.sock")])
    assert pool.asked == ["/run/k.sock"]
    # Without a pool option the daemon is not asked; a local_comm_res is passed on.
    pool = Pool()
    assert init_options({"device_id": "0", "llm.LocalCommRes": "{}"}, pool) == \
        [("device_id", "0"), ("local_comm_res", "{}")]
    assert pool.asked == []
    # libkvdist's names and unknown ones pass through (libkvdist refuses the unknown).
    assert init_options({"ge.flowGraphMemMaxSize": "1"}, pool) == [("ge.flowGraphMemMaxSize",
                                                                     "1")]


REFUSED = [
    # (option, value, status, words the message has)
    ("llm.RdmaTrafficClass", "132", NOT_ENABLED, "traffic class"),
    ("llm.RdmaServiceLevel", "4", NOT_ENABLED, "service level"),
    ("llm.deployResPath", "/x", NOT_ENABLED, "deployment"),
    ("llm.ClusterInfo", "{}", NOT_ENABLED, "cluster_id"),
    ("llm.OutputMaxSize", "1", NOT_ENABLED, "counterpart"),
    ("llm.BufPoolCfg", "{}", NOT_ENABLED, "buffer pool"),
    ("llm.EnableCacheManager", "0", NOT_ENABLED, "KvCacheManager"),
    ("llm.LinkTotalTime", "20", NOT_ENABLED, "link_total_time_ms"),
    ("llm.LinkRetryCount", "3", NOT_ENABLED, "once"),
    ("llm.TransferBackend", "hixl", PARAM_INVALID, "llm.listenIpInfo"),
    ("llm.TransferBackend", "", PARAM_INVALID, "\"hixl\""),
    ("llm.TransferBackend", "adxl", PARAM_INVALID, "\"hixl\""),
    ("llm.GlobalResourceConfig", "{}", NOT_ENABLED, "HIXL"),
    ("llm.EnableSwitchRole", "yes", PARAM_INVALID, "\"0\" or \"1\""),
    ("llm.EnableRemoteCacheAccessible", "2", PARAM_INVALID, "\"0\" or \"1\""),
    ("llm.MemoryUtilization", "1.5", PARAM_INVALID, "[0, 1]"),
    ("llm.MemoryUtilization", "most", PARAM_INVALID, "[0, 1]"),
    ("ge.exec.deviceId", "0;1", PARAM_INVALID, "one device"),
    ("llm.MemPoolConfig", "64M", PARAM_INVALID, "not JSON"),
    ("llm.MemPoolConfig", '{"memory_size": 0}', PARAM_INVALID, "memory_size"),
    ("llm.MemPoolConfig", '{"memory_size": "1G"}', PARAM_INVALID, "memory_size"),
    ("llm.MemPoolConfig", '{"memory_size": 1, "page_shift": 9}', PARAM_INVALID, "page_shift"),
    ("llm.HostMemPoolConfig", '{"size": 1}', PARAM_INVALID, "memory_size"),
    ("llm.MemPoolConfig", '{"memory_size": 1073741824}', LLMStatusCode.LLM_OUT_OF_MEMORY,
     "67108864 bytes"),
    ("llm.HostMemPoolConfig", '{"memory_size": 4096, "page_shift": 12}', PARAM_INVALID,
     "page_shift 12"),
]


@pytest.mark.parametrize("option,value,code,words", REFUSED)
def test_init_options_refused(option, value, code, words):
    with pytest.raises(LLMException) as e:
        init_options({"device_id": "0", option: value}, Pool())
    assert status_of(e) == code
    assert option in str(e.value) and words in str(e.value)


def test_init_options_session_device():
    assert init_options({"ge.exec.deviceId": "1", "ge.session_device_id": "1"}, Pool()) == \
        [("device_id", "1")]
    assert init_options({"ge.session_device_id": "4"}, Pool()) == [("device_id", "4")]
    with pytest.raises(LLMException) as e:
        init_options({"ge.exec.deviceId": "1", "ge.session_device_id": "2"}, Pool())
    assert status_of(e) == PARAM_INVALID and "ge.session_device_id" in str(e.value)


def test_init_with_samples_configs(daemon, attach):
    """The LlmConfig of pull_cache_sample.py (a 64 MiB pool) and transfer_cache_async_sample.py
    (with HIXL), on a daemon with a 64 MiB pool: accepted; a pool larger than the daemon's is
    refused."""
    pool = kvdist.daemon_status(daemon.socket)["pool"]
    c = LLMConfig()
    c.device_id = 0
    c.enable_cache_manager = True
    c.mem_pool_cfg = f'{{"memory_size": {64 * 1024 * 1024}}}'
    c.socket_path = daemon.socket
    dd = kvdist.LLMDataDist(kvdist.LLMRole.PROMPT, 7101)
    dd.init(c.generate_options())
    cache = dd.cache_manager.allocate_cache(CacheDesc(4, [2, 1024], DataType.DT_FLOAT16))
    dd.cache_manager.deallocate_cache(cache)
    dd.finalize()
    c = LLMConfig()
    c.device_id = 0
    c.listen_ip_info = daemon.peer_addr
    c.enable_cache_manager = True
    c.enable_remote_cache_accessible = True
    c.local_comm_res = ""
    c.transfer_backend = "hixl"  # --transfer_backend hixl, and hixl_transfer_backend_sample.py
    c.socket_path = daemon.socket
    dd = kvdist.LLMDataDist(kvdist.LLMRole.DECODER, 7102)
    dd.init(c.generate_options())
    dd.finalize()
    c.mem_pool_cfg = f'{{"memory_size": {pool["size"] + 1}}}'
    dd = kvdist.LLMDataDist(kvdist.LLMRole.DECODER, 7103)
    with pytest.raises(LLMException) as e:
        dd.init(c.generate_options())
    assert status_of(e) == LLMStatusCode.LLM_OUT_OF_MEMORY
    assert "llm.MemPoolConfig" in str(e.value)
    # Refused before attaching: the id was never taken.
    assert 7103 not in [x["cluster_id"] for x in kvdist.daemon_status(daemon.socket)["clusters"]]
    c.mem_pool_cfg = ""
    c.rdma_traffic_class = 132
    with pytest.raises(LLMException) as e:
        dd.init(c.generate_options())
    assert status_of(e) == NOT_ENABLED and "llm.RdmaTrafficClass" in str(e.value)
    c = LLMConfig()
    c.device_id = 0
    c.socket_path = daemon.socket
    c.mem_pool_cfg = json.dumps({"memory_size": 4096,
                                 "page_shift": pool["page_size"].bit_length() - 1})
    dd.init(c.generate_options())
    dd.finalize()


# --- local copies ---------------------------------------------------------------------------


def test_copy_blocks(daemon, attach):
    dd = attach(daemon)
    c = Guarded(dd, 3, 8, 48, seed=31)
    cm = dd.cache_manager
    cm.copy_blocks(c.cache, {1: [0, 6], 7: [2]})
    expected = copy_blocks(c.expected(), c, c, [1, 1, 7], [0, 6, 2])
    c.check(expected)
    # In the dict's order: 2 (now block 7's bytes) goes on to 5.
    cm.copy_blocks(c.cache, {2: [5]})
    for t in range(3):
        c.unit(expected, t, 5)[:] = c.unit(expected, t, 2)
    c.check(expected)
    for bad in ({8: [0]}, {0: [8]}, {-1: [0]}, {0: [1, 2, 99]}):
        with pytest.raises(LLMException) as e:
            cm.copy_blocks(c.cache, bad)
        assert status_of(e) == PARAM_INVALID
        c.check(expected)  # checked before a byte moved
    # What the daemon registered counts, not what the description says later.
    c.cache.cache_desc.shape[0] = 100
    c.cache.tensor_addrs.append(addr(c.mem))
    with pytest.raises(LLMException) as e:
        cm.copy_blocks(c.cache, {50: [0]})
    assert status_of(e) == PARAM_INVALID and "[0, 8)" in str(e.value)
    c.check(expected)
    with pytest.raises(TypeError):
        cm.copy_blocks(c.cache, {0: 1})
    with pytest.raises(TypeError):
        cm.copy_blocks(c.cache, [(0, [1])])
    item = Guarded(dd, 3, 4, 48, seed=32, blocks=False)
    with pytest.raises(LLMException) as e:
        cm.copy_blocks(item.cache, {0: [1]})
    assert status_of(e) == PARAM_INVALID
    item.check_untouched()


def test_copy_cache(daemon, attach):
    dd = attach(daemon)
    cm = dd.cache_manager
    src = Guarded(dd, 2, 3, 96, seed=33, blocks=False)
    dst = Guarded(dd, 2, 5, 96, seed=34, blocks=False)
    cm.copy_cache(dst.cache, src.cache, 4, 1)
    expected = copy_blocks(dst.expected(), dst, src, [1], [4])
    dst.check(expected)
    cm.copy_cache(dst.cache, src.cache, 0, 2, offset=10, size=50, req_id=7)
    for t in range(2):
        dst.unit(expected, t, 0)[10:60] = src.unit(src.image, t, 2)[10:60]
    dst.check(expected)
    cm.copy_cache(dst.cache, src.cache, 1, 0, offset=90)
    for t in range(2):
        dst.unit(expected, t, 1)[90:] = src.unit(src.image, t, 0)[90:]
    dst.check(expected)
    bad_calls = [dict(dst_batch_index=5), dict(src_batch_index=3), dict(offset=96),
                 dict(offset=10, size=87), dict(size=0), dict(size=-2)]
    for kwargs in bad_calls:
        with pytest.raises(LLMException) as e:
            cm.copy_cache(dst.cache, src.cache, **kwargs)
        assert status_of(e) == PARAM_INVALID, kwargs
    for kwargs, exc in ((dict(dst_batch_index=-1), ValueError), (dict(offset=-1), ValueError),
                        (dict(req_id=-1), ValueError), (dict(size="1"), TypeError)):
        with pytest.raises(exc):
            cm.copy_cache(dst.cache, src.cache, **kwargs)
    # Tensor counts must match; blocks caches are not contiguous caches.
    three = Guarded(dd, 3, 3, 96, seed=35, blocks=False)
    blocks = Guarded(dd, 2, 3, 96, seed=36)
    for d, s in ((three.cache, src.cache), (blocks.cache, src.cache), (dst.cache, blocks.cache)):
        with pytest.raises(LLMException) as e:
            cm.copy_cache(d, s)
        assert status_of(e) == PARAM_INVALID
    # A smaller destination item: the whole source item does not fit.
    small = Guarded(dd, 2, 3, 64, seed=37, blocks=False)
    with pytest.raises(LLMException) as e:
        cm.copy_cache(small.cache, src.cache)
    assert status_of(e) == PARAM_INVALID
    cm.copy_cache(small.cache, src.cache, 2, 0, size=64)
    small_expected = small.expected()
    for t in range(2):
        small.unit(small_expected, t, 2)[:] = src.unit(src.image, t, 0)[:64]
    small.check(small_expected)
    dst.check(expected)
    src.check_untouched()
    three.check_untouched()
    blocks.check_untouched()


def test_copies_only_held_caches(daemon, attach):
    dd = attach(daemon)
    other = attach(daemon)
    cm = dd.cache_manager
    a = Guarded(dd, 2, 4, 32, seed=38)
    b = Guarded(other, 2, 4, 32, seed=39)
    with pytest.raises(LLMException) as e:
        cm.copy_blocks(b.cache, {0: [1]})
    assert status_of(e) == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST
    cm.unregister_cache(a.cache.cache_id)
    with pytest.raises(LLMException) as e:
        cm.copy_blocks(a.cache, {0: [1]})
    assert status_of(e) == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST
    a.check_untouched()
    b.check_untouched()
    with pytest.raises(TypeError):
        cm.copy_blocks(a.cache.cache_id, {0: [1]})


def test_pool_caches_copy_and_deallocate_blocks(daemon, attach):
    dd = attach(daemon)
    cm = dd.cache_manager
    desc = CacheDesc(2, [4, 256], DataType.DT_UINT8)
    cache = cm.allocate_blocks_cache(desc)
    assert cache.is_blocks_cache
    views = [np.ctypeslib.as_array((ctypes.c_uint8 * 1024).from_address(a))
             for a in cache.tensor_addrs]
    for t, v in enumerate(views):
        v[:] = pattern(40 + t, 1024)
    before = [v.copy() for v in views]
    cm.copy_blocks(cache, {3: [0]})
    for t, v in enumerate(views):
        want = before[t].copy()
        want[0:256] = before[t][768:1024]
        assert np.array_equal(v, want)
    item = cm.allocate_cache(desc)
    with pytest.raises(LLMException) as e:
        cm.deallocate_blocks_cache(item)
    assert status_of(e) == PARAM_INVALID
    cm.deallocate_cache(item)
    cm.deallocate_blocks_cache(cache)
    with pytest.raises(LLMException) as e:
        cm.copy_blocks(cache, {0: [1]})
    assert status_of(e) == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST


class CpuCache:
    """A cpu cache (Cache.create_cpu_cache) over a numpy array, each tensor between guards."""

    def __init__(self, num_tensors, blocks, block_bytes, seed):
        self.mem = np.empty((num_tensors, GUARD + blocks * block_bytes + GUARD), np.uint8)
        self.mem.reshape(-1)[:] = pattern(seed, self.mem.size)
        self.image = self.mem.copy()
        self.unit_bytes = block_bytes
        desc = CacheDesc(num_tensors, [blocks, block_bytes], DataType.DT_UINT8, Placement.HOST)
        self.cache = Cache.create_cpu_cache(desc, [addr(self.mem[t, GUARD:])
                                                   for t in range(num_tensors)])

    unit = Guarded.unit
    expected = Guarded.expected
    check = Guarded.check


def test_swap_blocks(daemon, attach):
    dd = attach(daemon)
    cm = dd.cache_manager
    dev = Guarded(dd, 4, 6, 64, seed=41)
    host = CpuCache(4, 10, 64, seed=42)
    # Swap out: device blocks to host blocks.
    cm.swap_blocks(dev.cache, host.cache, {0: 9, 5: 3, 2: 0})
    host_expected = copy_blocks(host.expected(), host, dev, [0, 5, 2], [9, 3, 0])
    host.check(host_expected)
    # Swap in: host blocks to device blocks.
    cm.swap_blocks(host.cache, dev.cache, {9: 1, 4: 4})
    dev_expected = dev.expected()
    for t in range(4):
        dev.unit(dev_expected, t, 1)[:] = host.unit(host_expected, t, 9)
        dev.unit(dev_expected, t, 4)[:] = host.unit(host_expected, t, 4)
    dev.check(dev_expected)
    host.check(host_expected)
    # Every index checked before a byte moves.
    for bad in ({6: 0}, {0: 10}, {0: 1, -1: 2}, {0: 1, 1: 99}):
        with pytest.raises(LLMException) as e:
            cm.swap_blocks(dev.cache, host.cache, bad)
        assert status_of(e) == PARAM_INVALID
    with pytest.raises(TypeError):
        cm.swap_blocks(dev.cache, host.cache, {0: "1"})
    # Block size, tensor count and placement must match llm_datadist's rules.
    wide = CpuCache(4, 4, 128, seed=43)
    few = CpuCache(2, 4, 64, seed=44)
    host2 = CpuCache(4, 4, 64, seed=45)
    dev2 = Guarded(dd, 4, 4, 64, seed=46)
    item = Guarded(dd, 4, 4, 64, seed=47, blocks=False)
    for s, d in ((dev.cache, wide.cache), (dev.cache, few.cache), (host.cache, host2.cache),
                 (dev.cache, dev2.cache), (item.cache, host2.cache)):
        with pytest.raises(LLMException) as e:
            cm.swap_blocks(s, d, {0: 0})
        assert status_of(e) == PARAM_INVALID
    dev.check(dev_expected)
    host.check(host_expected)
    for c in (wide, few, host2):
        c.check(c.image)
    dev2.check_untouched()
    item.check_untouched()


def test_remap_registered_memory(daemon, attach):
    cm = attach(daemon).cache_manager
    with pytest.raises(LLMException) as e:
        cm.remap_registered_memory(MemInfo(Memtype.MEM_TYPE_DEVICE, 4096, 64))
    assert status_of(e) == NOT_ENABLED and "host memory" in str(e.value)
    for bad in (MemInfo(Memtype.MEM_TYPE_HOST, 4096, 64), MemInfo(Memtype.MEM_TYPE_DEVICE, 0, 1),
                MemInfo(Memtype.MEM_TYPE_DEVICE, 1, 0), [MemInfo(Memtype.MEM_TYPE_DEVICE, 1, 1),
                                                          "x"], "x"):
        with pytest.raises(LLMException) as e:
            cm.remap_registered_memory(bad)
        assert status_of(e) == PARAM_INVALID


def test_blocks_cache_flag(daemon, attach):
    dd = attach(daemon)
    assert Guarded(dd, 2, 2, 16, seed=48).cache.is_blocks_cache
    assert not Guarded(dd, 2, 2, 16, seed=49, blocks=False).cache.is_blocks_cache
    key = BlocksCacheKey(dd.cluster_id, 2)
    assert Guarded(dd, 2, 2, 16, seed=50, key=key).cache.is_blocks_cache
