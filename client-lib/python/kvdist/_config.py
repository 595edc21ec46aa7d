# SPDX-License-Identifier: MIT
"""LlmConfig, llm_datadist's builder of init() options, and what init() makes of each option:
libkvdist's option, a check against the daemon, a mode kvdist always has, or a clear refusal.
No option is dropped without one of these."""

import json
import math

from ._status import LLMStatusCode, _error

_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1


def _check_type(name, value, types):
    if not isinstance(value, types):
        want = [t.__name__ for t in (types if isinstance(types, tuple) else (types,))]
        raise TypeError(f"{name} only support {want}, but got {type(value)}.")


def _check_range(name, value, lo, hi, kind):
    _check_type(name, value, int)
    if value < lo or value > hi:
        raise ValueError(f"{name}'s value is out of range,{value} is not a {kind} value.")


def _param_invalid(message):
    return _error(LLMStatusCode.LLM_PARAM_INVALID, message)


def _refuse(option, why):
    return _error(LLMStatusCode.LLM_FEATURE_NOT_ENABLED, f"option \"{option}\": {why}")


class LlmConfig:
    """Builds the options dictionary init() takes, with llm_datadist's properties, checks and
    option names. kvdist's own: socket_path (the daemon's socket). What init() does with each
    option is in the package's documentation: every one is mapped, checked or refused there."""

    def __init__(self):
        self._options = {}
        self._listen_ip_info = ""
        self._device_id = None
        self._sync_kv_timeout = None
        self._deploy_res_path = ""
        self._ge_options = {}
        self._enable_switch_role = False
        self._link_total_time = None
        self._link_retry_count = None
        self._cluster_info = ""
        self._output_max_size = None
        self._mem_utilization = 0.95
        self._buf_pool_cfg = ""
        self._mem_pool_cfg = ""
        self._host_mem_pool_cfg = ""
        self._enable_cache_manager = None
        self._enable_remote_cache_accessible = None
        self._rdma_traffic_class = None
        self._rdma_service_level = None
        self._local_comm_res = None
        self._transfer_backend = None
        self._global_resource_config = None
        self._socket_path = None

    def generate_options(self):
        """The options dictionary: llm_datadist's keys and values for what was set."""
        return self.gen_options()

    def gen_options(self):
        o = {}
        o.update(self._ge_options)
        if self._device_id is not None:
            if isinstance(self._device_id, int):
                o["ge.exec.deviceId"] = str(self._device_id)
                o["ge.session_device_id"] = str(self._device_id)
            else:
                o["ge.session_device_id"] = str(self._device_id[0])
                o["ge.exec.deviceId"] = ";".join(str(d) for d in self._device_id)
        if self._sync_kv_timeout is not None:
            o["llm.SyncKvCacheWaitTime"] = str(self._sync_kv_timeout)
        if self._deploy_res_path:
            o["llm.deployResPath"] = self._deploy_res_path
        if self._buf_pool_cfg:
            o["llm.BufPoolCfg"] = self._buf_pool_cfg
        if self._mem_pool_cfg:
            o["llm.MemPoolConfig"] = self._mem_pool_cfg
        if self._host_mem_pool_cfg:
            o["llm.HostMemPoolConfig"] = self._host_mem_pool_cfg
        if self._enable_cache_manager is not None:
            o["llm.EnableCacheManager"] = "1" if self._enable_cache_manager else "0"
        if self._enable_remote_cache_accessible is not None:
            o["llm.EnableRemoteCacheAccessible"] = \
                "1" if self._enable_remote_cache_accessible else "0"
        if self._listen_ip_info:
            o["llm.listenIpInfo"] = self._listen_ip_info
        if self._link_total_time is not None:
            o["llm.LinkTotalTime"] = str(self._link_total_time)
        if self._link_retry_count is not None:
            o["llm.LinkRetryCount"] = str(self._link_retry_count)
        if self._rdma_traffic_class is not None:
            o["llm.RdmaTrafficClass"] = str(self._rdma_traffic_class)
        if self._rdma_service_level is not None:
            o["llm.RdmaServiceLevel"] = str(self._rdma_service_level)
        if self._local_comm_res is not None:
            o["llm.LocalCommRes"] = self._local_comm_res
        if self._transfer_backend is not None:
            o["llm.TransferBackend"] = self._transfer_backend
        if self._global_resource_config is not None:
            o["llm.GlobalResourceConfig"] = self._global_resource_config
        if self._cluster_info:
            o["llm.ClusterInfo"] = self._cluster_info
        if self._output_max_size is not None:
            o["llm.OutputMaxSize"] = str(self._output_max_size)
        if self._enable_switch_role:
            o["llm.EnableSwitchRole"] = "1"
        if self._mem_utilization is not None:
            o["llm.MemoryUtilization"] = str(self._mem_utilization)
        if self._socket_path is not None:
            o["socket_path"] = self._socket_path
        self._options = o
        return o

    @property
    def options(self):
        """What the last generate_options() returned."""
        return self._options

    @property
    def ge_options(self):
        return self._ge_options

    @ge_options.setter
    def ge_options(self, ge_options):
        _check_type("ge_options", ge_options, dict)
        for k, v in ge_options.items():
            _check_type("ge_options dict key", k, str)
            _check_type("ge_options dict value", v, str)
        self._ge_options = ge_options

    @property
    def device_id(self):
        return self._device_id

    @device_id.setter
    def device_id(self, device_id):
        _check_type("device_id", device_id, (list, tuple, int))
        ids = device_id if isinstance(device_id, (list, tuple)) else [device_id]
        for d in ids:
            _check_type("device_id", d, int)
            if d < 0:
                raise _param_invalid("device_id should be greater than or equal to zero.")
            _check_range("device_id", d, -2**31, _INT32_MAX, "int32")
        self._device_id = device_id

    @property
    def listen_ip_info(self):
        return self._listen_ip_info

    @listen_ip_info.setter
    def listen_ip_info(self, listen_ip_info):
        _check_type("listen_ip_info", listen_ip_info, str)
        self._listen_ip_info = listen_ip_info

    @property
    def deploy_res_path(self):
        return self._deploy_res_path

    @deploy_res_path.setter
    def deploy_res_path(self, deploy_res_path):
        _check_type("deploy_res_path", deploy_res_path, str)
        self._deploy_res_path = deploy_res_path

    @property
    def buf_pool_cfg(self):
        return self._buf_pool_cfg

    @buf_pool_cfg.setter
    def buf_pool_cfg(self, buf_pool_cfg):
        _check_type("buf_pool_cfg", buf_pool_cfg, str)
        self._buf_pool_cfg = buf_pool_cfg

    @property
    def output_max_size(self):
        return self._output_max_size

    @output_max_size.setter
    def output_max_size(self, output_max_size):
        _check_type("output_max_size", output_max_size, int)
        self._output_max_size = output_max_size

    @property
    def mem_utilization(self):
        return self._mem_utilization

    @mem_utilization.setter
    def mem_utilization(self, mem_utilization):
        _check_type("mem_utilization", mem_utilization, float)
        if not 0.0 <= mem_utilization <= 1.0:
            raise _param_invalid(f"mem_utilization must be in range [0,1], "
                                 f"current:{mem_utilization}")
        self._mem_utilization = mem_utilization

    @property
    def cluster_info(self):
        return self._cluster_info

    @cluster_info.setter
    def cluster_info(self, cluster_info):
        _check_type("cluster_info", cluster_info, str)
        json.loads(cluster_info)
        self._cluster_info = cluster_info

    @property
    def sync_kv_timeout(self):
        return self._sync_kv_timeout

    @sync_kv_timeout.setter
    def sync_kv_timeout(self, sync_kv_timeout):
        _check_type("sync_kv_timeout", sync_kv_timeout, (int, str))
        if isinstance(sync_kv_timeout, str) and not sync_kv_timeout.isdigit():
            raise _param_invalid("sync_kv_timeout must be digit.")
        if int(sync_kv_timeout) <= 0:
            raise _param_invalid("sync_kv_timeout should be greater than zero.")
        _check_range("sync_kv_timeout", int(sync_kv_timeout), -2**31, _INT32_MAX, "int32")
        self._sync_kv_timeout = sync_kv_timeout

    @property
    def enable_switch_role(self):
        return self._enable_switch_role

    @enable_switch_role.setter
    def enable_switch_role(self, enable_switch_role):
        _check_type("enable_switch_role", enable_switch_role, bool)
        self._enable_switch_role = enable_switch_role

    @property
    def link_total_time(self):
        return 0 if self._link_total_time is None else self._link_total_time

    @link_total_time.setter
    def link_total_time(self, link_total_time):
        _check_type("link_total_time", link_total_time, int)
        if not 0 <= link_total_time <= _UINT32_MAX:
            raise _param_invalid("link_total_time should be an integer between [0, 2^32-1], "
                                 f"given value is {link_total_time}")
        self._link_total_time = link_total_time

    @property
    def link_retry_count(self):
        return 1 if self._link_retry_count is None else self._link_retry_count

    @link_retry_count.setter
    def link_retry_count(self, link_retry_count):
        _check_type("link_retry_count", link_retry_count, int)
        if not 1 <= link_retry_count <= 100:
            raise _param_invalid("link_retry_count should be an integer between [1, 100], "
                                 f"given value is {link_retry_count}")
        self._link_retry_count = link_retry_count

    @property
    def enable_cache_manager(self):
        return bool(self._enable_cache_manager)

    @enable_cache_manager.setter
    def enable_cache_manager(self, enable_cache_manager):
        _check_type("enable_cache_manager", enable_cache_manager, bool)
        self._enable_cache_manager = enable_cache_manager

    @property
    def enable_remote_cache_accessible(self):
        return bool(self._enable_remote_cache_accessible)

    @enable_remote_cache_accessible.setter
    def enable_remote_cache_accessible(self, enable_remote_cache_accessible):
        _check_type("enable_remote_cache_accessible", enable_remote_cache_accessible, bool)
        self._enable_remote_cache_accessible = enable_remote_cache_accessible

    @property
    def mem_pool_cfg(self):
        return self._mem_pool_cfg

    @mem_pool_cfg.setter
    def mem_pool_cfg(self, mem_pool_cfg):
        _check_type("mem_pool_cfg", mem_pool_cfg, str)
        self._mem_pool_cfg = mem_pool_cfg

    @property
    def host_mem_pool_cfg(self):
        return self._host_mem_pool_cfg

    @host_mem_pool_cfg.setter
    def host_mem_pool_cfg(self, host_mem_pool_cfg):
        _check_type("host_mem_pool_cfg", host_mem_pool_cfg, str)
        self._host_mem_pool_cfg = host_mem_pool_cfg

    @property
    def rdma_traffic_class(self):
        return self._rdma_traffic_class

    @rdma_traffic_class.setter
    def rdma_traffic_class(self, rdma_traffic_class):
        _check_range("rdma_traffic_class", rdma_traffic_class, 0, _UINT32_MAX, "uint32")
        self._rdma_traffic_class = rdma_traffic_class

    @property
    def rdma_service_level(self):
        return self._rdma_service_level

    @rdma_service_level.setter
    def rdma_service_level(self, rdma_service_level):
        _check_range("rdma_service_level", rdma_service_level, 0, _UINT32_MAX, "uint32")
        self._rdma_service_level = rdma_service_level

    @property
    def local_comm_res(self):
        return "" if self._local_comm_res is None else self._local_comm_res

    @local_comm_res.setter
    def local_comm_res(self, local_comm_res):
        _check_type("local_comm_res", local_comm_res, str)
        self._local_comm_res = local_comm_res

    @property
    def transfer_backend(self):
        return "" if self._transfer_backend is None else self._transfer_backend

    @transfer_backend.setter
    def transfer_backend(self, transfer_backend):
        _check_type("transfer_backend", transfer_backend, str)
        self._transfer_backend = transfer_backend

    @property
    def global_resource_config(self):
        return "" if self._global_resource_config is None else self._global_resource_config

    @global_resource_config.setter
    def global_resource_config(self, global_resource_config):
        _check_type("global_resource_config", global_resource_config, str)
        self._global_resource_config = global_resource_config

    @property
    def socket_path(self):
        """kvdist's: the daemon's socket (default $KVDIST_SOCKET, then the daemon's)."""
        return self._socket_path

    @socket_path.setter
    def socket_path(self, socket_path):
        _check_type("socket_path", socket_path, str)
        self._socket_path = socket_path


# --- what init() makes of llm_datadist's options ------------------------------------------

# Straight renames to libkvdist's options (which checks the values).
_RENAMED = {
    "ge.exec.deviceId": "device_id",
    "llm.SyncKvCacheWaitTime": "sync_kv_timeout_ms",
    "llm.listenIpInfo": "listen_ip_info",
    "llm.LocalCommRes": "local_comm_res",
}

# Options only an Ascend deployment has: refused whatever their value.
_NO_COUNTERPART = {
    "llm.RdmaTrafficClass": "kvdistd has no per-cluster RDMA traffic class; its queue pairs "
                            "use the RDMA device's default",
    "llm.RdmaServiceLevel": "kvdistd has no per-cluster RDMA service level; its queue pairs "
                            "use the RDMA device's default",
    "llm.deployResPath": "an offline GE deployment option; kvdist has no deployment resources",
    "llm.ClusterInfo": "an offline GE deployment option; a kvdist cluster is its cluster_id",
    "llm.OutputMaxSize": "an offline GE inference option without a kvdist counterpart",
    "llm.BufPoolCfg": "an offline GE buffer pool without a kvdist counterpart",
}

# Options whose default kvdist has: accepted with exactly these values, refused otherwise.
_ONLY_DEFAULT = {
    "llm.EnableCacheManager": ("1", "kvdist always runs the cache manager; the API without it "
                                    "(KvCacheManager) does not exist"),
    "llm.LinkTotalTime": ("0", "kvdist sets links up within link_clusters()'s timeout and comm "
                               "domains within the daemon's link_total_time_ms; a cluster "
                               "cannot change either"),
    "llm.LinkRetryCount": ("1", "kvdist tries a link once per link_clusters() call; call it "
                                "again to retry"),
    "llm.GlobalResourceConfig": ("", "HIXL's resource configuration; kvdist has no HIXL "
                                     "backend"),
}

# Modes kvdist always has: accepted with either value, no effect.
_ALWAYS_ON = {"llm.EnableSwitchRole", "llm.EnableRemoteCacheAccessible"}

_POOLS = ("llm.MemPoolConfig", "llm.HostMemPoolConfig")


def _pool_request(key, value):
    """(memory_size, page_shift or None) of a pool option, PARAM_INVALID if it does not
    parse."""
    try:
        cfg = json.loads(value)
    except ValueError as e:
        raise _param_invalid(f"option \"{key}\" is not JSON ({e}): {value!r}") from None
    if not isinstance(cfg, dict) or set(cfg) - {"memory_size", "page_shift"}:
        raise _param_invalid(f"option \"{key}\" takes {{\"memory_size\": N, \"page_shift\": S}}, "
                             f"not {value!r}")
    size = cfg.get("memory_size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise _param_invalid(f"option \"{key}\": memory_size must be a positive integer, "
                             f"not {size!r}")
    shift = cfg.get("page_shift")
    if shift is not None and (isinstance(shift, bool) or not isinstance(shift, int) or
                              not 10 <= shift < 31):
        raise _param_invalid(f"option \"{key}\": page_shift must be an integer in [10, 31), "
                             f"not {shift!r}")
    return size, shift


def _check_pool(key, request, pool):
    """Refuses a pool request the daemon's pool (its status "pool") cannot hold."""
    size, shift = request
    if size > pool["size"]:
        raise _error(LLMStatusCode.LLM_OUT_OF_MEMORY,
                     f"option \"{key}\" asks for a pool of {size} bytes, but the caches of "
                     f"every cluster of this node come from kvdistd's pool, which has "
                     f"{pool['size']} bytes (its memory_size setting)")
    if shift is not None and (1 << shift) != pool["page_size"]:
        raise _param_invalid(f"option \"{key}\" asks for pages of {1 << shift} bytes "
                             f"(page_shift {shift}), but kvdistd's pool has pages of "
                             f"{pool['page_size']} bytes (its page_shift setting)")


def _device_ids(key, value):
    ids = value.split(";")
    if len(ids) != 1:
        raise _param_invalid(f"option \"{key}\" is \"{value}\": kvdist attaches one device per "
                             "instance")
    return ids[0]


def _check_mem_utilization(key, value):
    """GE's device memory share: checked as llm_datadist does, no host meaning."""
    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not 0.0 <= v <= 1.0:
        raise _param_invalid(f"option \"{key}\" is \"{value}\", not a number in [0, 1]")


def init_options(options, daemon_pool=None):
    """libkvdist's options for an init() options dict, LLMException for one that is refused.
    daemon_pool(socket_path) returns the daemon's pool status; it is asked only when a pool
    option is given."""
    if options is None:
        return []
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, not {type(options).__name__}")
    out = []
    pools = []
    session_device = None
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"option names are str, not {type(key).__name__}")
        value = str(value)
        if key in _RENAMED:
            if key == "ge.exec.deviceId":
                value = _device_ids(key, value)
            if key == "llm.LocalCommRes" and value == "":
                continue  # llm_datadist's "generate it", which is libkvdist's default
            out.append((_RENAMED[key], value))
        elif key == "ge.session_device_id":
            session_device = value
        elif key in _NO_COUNTERPART:
            raise _refuse(key, _NO_COUNTERPART[key])
        elif key in _ONLY_DEFAULT:
            default, why = _ONLY_DEFAULT[key]
            if value != default:
                raise _refuse(key, f"\"{value}\" is not supported: {why}")
        elif key == "llm.TransferBackend":
            # llm_datadist knows one backend, HIXL's, with which each end links and is linked
            # at its listen address: what kvdist's own transports do for a server cluster.
            if value != "hixl":
                raise _param_invalid(f"option \"{key}\" is \"{value}\": the only transfer "
                                     "backend llm_datadist knows is \"hixl\"")
            if "llm.listenIpInfo" not in options and "listen_ip_info" not in options:
                raise _param_invalid(f"option \"{key}\" needs llm.listenIpInfo, as in "
                                     "llm_datadist")
        elif key in _ALWAYS_ON:
            if value not in ("0", "1"):
                raise _param_invalid(f"option \"{key}\" is \"{value}\", not \"0\" or \"1\"")
        elif key == "llm.MemoryUtilization":
            _check_mem_utilization(key, value)
        elif key in _POOLS:
            pools.append((key, _pool_request(key, value)))
        else:
            out.append((key, value))
    if session_device is not None:
        device = [v for k, v in out if k == "device_id"]
        if device and device[0] != session_device:
            raise _param_invalid(f"option \"ge.session_device_id\" is \"{session_device}\" but "
                                 f"the device is \"{device[0]}\"")
        if not device:
            out.append(("device_id", session_device))
    if pools:
        socket_path = next((v for k, v in out if k == "socket_path"), None)
        pool = daemon_pool(socket_path)
        for key, request in pools:
            _check_pool(key, request, pool)
    return out


def switch_options(options):
    """libkvdist's options for a switch_role() options dict (llm.listenIpInfo; also
    LlmConfig.generate_options()'s llm.MemoryUtilization, checked and without effect)."""
    if options is None:
        return []
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, not {type(options).__name__}")
    out = []
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"option names are str, not {type(key).__name__}")
        if key == "llm.MemoryUtilization":
            # What LlmConfig.generate_options() always adds, so that its options (the
            # samples' way to give llm.listenIpInfo) are taken here too; checked as in init().
            _check_mem_utilization(key, str(value))
            continue
        out.append((_RENAMED.get(key, key), str(value)))
    return out


LLMConfig = LlmConfig
