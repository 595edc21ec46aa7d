# SPDX-License-Identifier: MIT
"""The values the API takes and returns: roles, data types, cache descriptions, keys, cluster
infos, the configuration, transfer configurations and caches."""

import abc
import collections
import enum
import ipaddress
import math
import operator

from . import _kvdist

UINT64_MAX = 2**64 - 1


def _int(value, name, lo=None, hi=None):
    """value as an int (anything with __index__), TypeError or ValueError otherwise."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} is {v}, not in [{lo}, {hi}]")
    return v


def _u64(value, name):
    return _int(value, name, 0, UINT64_MAX)


class LLMRole(enum.IntEnum):
    PROMPT = 1
    DECODER = 2
    MIX = 3


class DataType(enum.IntEnum):
    """Element types of cache tensors (kvd_dtype)."""

    DT_FLOAT = 0
    DT_FLOAT16 = 1
    DT_BF16 = 2
    DT_INT8 = 3
    DT_INT16 = 4
    DT_UINT16 = 5
    DT_UINT8 = 6
    DT_INT32 = 7
    DT_INT64 = 8
    DT_UINT32 = 9
    DT_UINT64 = 10
    DT_BOOL = 11
    DT_DOUBLE = 12

    @property
    def itemsize(self):
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DataType.DT_FLOAT: 4, DataType.DT_FLOAT16: 2, DataType.DT_BF16: 2, DataType.DT_INT8: 1,
    DataType.DT_INT16: 2, DataType.DT_UINT16: 2, DataType.DT_UINT8: 1, DataType.DT_INT32: 4,
    DataType.DT_INT64: 8, DataType.DT_UINT32: 4, DataType.DT_UINT64: 8, DataType.DT_BOOL: 1,
    DataType.DT_DOUBLE: 8,
}


class Placement(enum.IntEnum):
    """Where a cache lives. kvdist memory is host memory shared with kvdistd, whichever is
    given: the placement is kept for code written for llm_datadist and not used."""

    HOST = 0
    DEVICE = 1


class RegisterMemStatus(enum.IntEnum):
    """What query_register_mem_status() says about a comm domain."""

    OK = 0
    PREPARING = 1
    FAILED = 2


class CacheDesc:
    """num_tensors tensors of one shape and data type (K, V, K, V, ... one pair per layer).
    shape[0] is the number of blocks of a blocks cache, the batch size of a contiguous one."""

    def __init__(self, num_tensors, shape, data_type, placement=Placement.DEVICE,
                 batch_dim_index=0, seq_len_dim_index=-1):
        self.num_tensors = _int(num_tensors, "num_tensors", 0, 2**32 - 1)
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise TypeError(f"shape must be a sequence of ints, not {type(shape).__name__}")
        self.shape = [_int(d, "a shape dimension") for d in shape]
        if not isinstance(data_type, DataType):
            raise TypeError(f"data_type must be a DataType, not {type(data_type).__name__}")
        self.data_type = data_type
        self.placement = Placement(placement)
        self.batch_dim_index = _int(batch_dim_index, "batch_dim_index")
        self.seq_len_dim_index = _int(seq_len_dim_index, "seq_len_dim_index")

    @property
    def size(self):
        """Bytes per tensor."""
        return math.prod(self.shape) * self.data_type.itemsize

    def _kvd(self):
        return (self.num_tensors, tuple(self.shape), int(self.data_type))

    def __repr__(self):
        return (f"CacheDesc(num_tensors={self.num_tensors}, shape={self.shape}, "
                f"data_type={self.data_type.name})")


class CacheKey:
    """A contiguous cache's batch item by request (req_id) or prefix (prefix_id), of the
    cluster prompt_cluster_id; model_id tells models apart."""

    __slots__ = ("prompt_cluster_id", "req_id", "model_id", "prefix_id")

    def __init__(self, prompt_cluster_id, req_id=UINT64_MAX, model_id=0, prefix_id=UINT64_MAX):
        self.prompt_cluster_id = _u64(prompt_cluster_id, "prompt_cluster_id")
        self.req_id = _u64(req_id, "req_id")
        self.model_id = _u64(model_id, "model_id")
        self.prefix_id = _u64(prefix_id, "prefix_id")

    def _kvd(self):
        return (_kvdist.KEY_REQ, self.prompt_cluster_id, self.req_id, self.prefix_id,
                self.model_id, 0, 0)

    def __eq__(self, other):
        return isinstance(other, CacheKey) and self._kvd() == other._kvd()

    def __hash__(self):
        return hash(self._kvd())

    def __repr__(self):
        return (f"CacheKey({self.prompt_cluster_id}, req_id={self.req_id}, "
                f"model_id={self.model_id}, prefix_id={self.prefix_id})")


class CacheKeyByIdAndIndex:
    """Batch item batch_index of the cache cache_id of cluster cluster_id."""

    __slots__ = ("cluster_id", "cache_id", "batch_index")

    def __init__(self, cluster_id, cache_id, batch_index=0):
        self.cluster_id = _u64(cluster_id, "cluster_id")
        self.cache_id = _u64(cache_id, "cache_id")
        self.batch_index = _int(batch_index, "batch_index", 0, 2**32 - 1)

    def _kvd(self):
        return (_kvdist.KEY_ID_INDEX, self.cluster_id, UINT64_MAX, UINT64_MAX, 0, self.cache_id,
                self.batch_index)

    def __eq__(self, other):
        return isinstance(other, CacheKeyByIdAndIndex) and self._kvd() == other._kvd()

    def __hash__(self):
        return hash(self._kvd())

    def __repr__(self):
        return f"CacheKeyByIdAndIndex({self.cluster_id}, {self.cache_id}, {self.batch_index})"


class BlocksCacheKey:
    """The blocks cache a cluster registered under model_id (the last one registered under it).
    prompt_cluster_id is llm_datadist's name; for a push it is the destination cluster, which
    cluster_id also names."""

    __slots__ = ("prompt_cluster_id", "model_id")

    def __init__(self, prompt_cluster_id, model_id=0):
        self.prompt_cluster_id = _u64(prompt_cluster_id, "prompt_cluster_id")
        self.model_id = _u64(model_id, "model_id")

    @property
    def cluster_id(self):
        return self.prompt_cluster_id

    def _kvd(self):
        return (_kvdist.KEY_BLOCKS, self.prompt_cluster_id, UINT64_MAX, UINT64_MAX, self.model_id,
                0, 0)

    def __eq__(self, other):
        return isinstance(other, BlocksCacheKey) and self._kvd() == other._kvd()

    def __hash__(self):
        return hash(self._kvd())

    def __repr__(self):
        return f"BlocksCacheKey({self.prompt_cluster_id}, model_id={self.model_id})"


_KEY_TYPES = (CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey)


def _key(key, name, types=_KEY_TYPES):
    if not isinstance(key, types):
        want = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{name} must be a {want}, not {type(key).__name__}")
    return key._kvd()


def _ip_port(ip, port):
    """ "ip:port" or "[v6]:port" from an address (str, or an int as ipaddress takes it)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"{ip!r} is not an IP address") from None
    port = _int(port, "port", 0, 65535)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


class LLMClusterInfo:
    """A cluster to link to: its id, role and the address of its kvdistd (remote), and
    optionally the local address. kvdist takes one address per side; a remote address left out
    means the cluster is attached to this node's daemon."""

    def __init__(self):
        self.remote_cluster_id = 0
        self.remote_role_type = LLMRole.PROMPT
        self.local_ip_infos = []
        self.remote_ip_infos = []

    def append_local_ip_info(self, ip, port):
        self.local_ip_infos.append(_ip_port(ip, port))

    def append_remote_ip_info(self, ip, port):
        self.remote_ip_infos.append(_ip_port(ip, port))

    def _kvd(self):
        for name in ("local_ip_infos", "remote_ip_infos"):
            if len(getattr(self, name)) > 1:
                raise ValueError(f"{name}: kvdist takes one address, not "
                                 f"{len(getattr(self, name))}")
        return (_u64(self.remote_cluster_id, "remote_cluster_id"),
                _int(self.remote_role_type, "remote_role_type"),
                self.remote_ip_infos[0] if self.remote_ip_infos else None,
                self.local_ip_infos[0] if self.local_ip_infos else None)

    def __repr__(self):
        return (f"LLMClusterInfo(remote_cluster_id={self.remote_cluster_id}, "
                f"remote_ip_infos={self.remote_ip_infos})")


class LLMConfig:
    """Builds the options dictionary init() takes, under llm_datadist's option names.
    socket_path (kvdist's) names the daemon's socket; ge_options are added as they are."""

    def __init__(self):
        self.device_id = None
        self.sync_kv_timeout = None
        self.listen_ip_info = None
        self.local_comm_res = None
        self.enable_switch_role = None
        self.enable_cache_manager = None
        self.socket_path = None
        self.ge_options = None

    def generate_options(self):
        options = {}
        if self.device_id is not None:
            ids = self.device_id if isinstance(self.device_id, (list, tuple)) else [self.device_id]
            if len(ids) != 1:
                raise ValueError(f"device_id: one device per instance, not {len(ids)}")
            options["ge.exec.deviceId"] = str(_int(ids[0], "device_id"))
        if self.sync_kv_timeout is not None:
            options["llm.SyncKvCacheWaitTime"] = str(self.sync_kv_timeout)
        if self.listen_ip_info is not None:
            options["llm.listenIpInfo"] = str(self.listen_ip_info)
        if self.local_comm_res is not None:
            options["llm.LocalCommRes"] = str(self.local_comm_res)
        if self.enable_switch_role is not None:
            options["llm.EnableSwitchRole"] = "1" if self.enable_switch_role else "0"
        if self.enable_cache_manager is not None:
            options["llm.EnableCacheManager"] = "1" if self.enable_cache_manager else "0"
        if self.socket_path is not None:
            options["socket_path"] = str(self.socket_path)
        if self.ge_options:
            options.update({str(k): str(v) for k, v in self.ge_options.items()})
        return options


def _layer_range(r, name):
    """(first, last) of a range of layers with step 1; (-1, -1), every layer, for None."""
    if r is None:
        return (-1, -1)
    if not isinstance(r, range):
        raise TypeError(f"{name} must be a range, not {type(r).__name__}")
    if r.step != 1 or len(r) == 0:
        raise ValueError(f"{name} must be a non-empty range with step 1, not {r}")
    return (r.start, r.stop - 1)


class TransferWithCacheKeyConfig:
    """Where transfer_cache_async() pushes: the cache cache_key names on another cluster
    (BlocksCacheKey for a blocks cache, CacheKeyByIdAndIndex for a batch item), which layers
    (src_layer_range to dst_layer_range, every layer when left out) and, for a contiguous
    source, which batch item. kvdist never sends memory addresses to a peer, so llm_datadist's
    TransferConfig (remote addresses) has no counterpart: name the destination by its key."""

    def __init__(self, cache_key, src_layer_range=None, dst_layer_range=None, src_batch_index=0):
        _key(cache_key, "cache_key", (BlocksCacheKey, CacheKeyByIdAndIndex))
        _layer_range(src_layer_range, "src_layer_range")
        _layer_range(dst_layer_range, "dst_layer_range")
        if (src_layer_range is not None and dst_layer_range is not None and
                len(src_layer_range) != len(dst_layer_range)):
            raise ValueError("src_layer_range and dst_layer_range differ in length")
        self.cache_key = cache_key
        self.src_layer_range = src_layer_range
        self.dst_layer_range = dst_layer_range
        self.src_batch_index = _int(src_batch_index, "src_batch_index", 0, 2**32 - 1)


class LayerSynchronizer(abc.ABC):
    """The engine's side of transfer_cache_async(): synchronize_layer(i, timeout) returns True
    once layer i of the source cache is computed (False: it will not be, stop)."""

    @abc.abstractmethod
    def synchronize_layer(self, layer_index, timeout_in_millis):
        raise NotImplementedError


class Cache:
    """A registered or allocated cache: its id, description and tensor addresses."""

    def __init__(self, cache_id, cache_desc, tensor_addrs, pool=False):
        self.cache_id = cache_id
        self.cache_desc = cache_desc
        self.tensor_addrs = list(tensor_addrs)
        self.pool = pool

    @property
    def per_device_tensor_addrs(self):
        """llm_datadist's form: one list of addresses per device (kvdist has one)."""
        return [self.tensor_addrs]

    def __repr__(self):
        return f"Cache(cache_id={self.cache_id}, {self.cache_desc!r})"


KvCache = Cache

Notification = collections.namedtuple("Notification", "src_cluster_id data")
Notification.__doc__ = "What a push into this cluster carried (notify=), once its bytes landed."
