# SPDX-License-Identifier: MIT
"""The values the API takes and returns: roles, data types, cache descriptions, keys, cluster
infos, transfer configurations, caches and memory descriptions."""

import abc
import collections
import enum
import ipaddress
import math
import operator
import socket

from . import _kvdist, _status

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


def _param_invalid(message):
    return _status._error(_status.LLMStatusCode.LLM_PARAM_INVALID, message)


class LLMRole(enum.IntEnum):
    PROMPT = 1
    DECODER = 2
    MIX = 3

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"  # as llm_datadist prints it


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
    # llm_datadist's; not a kvd_dtype. A string has no fixed size, and kvdist moves tensors of
    # fixed-size elements only: a cache of it is refused (LLM_FEATURE_NOT_ENABLED).
    DT_STRING = 13

    @property
    def itemsize(self):
        if self not in _ITEMSIZE:
            raise _no_strings()
        return _ITEMSIZE[self]


def _no_strings():
    return _status._error(_status.LLMStatusCode.LLM_FEATURE_NOT_ENABLED,
                          "DataType.DT_STRING: kvdist moves tensors of fixed-size elements, and "
                          "a string has no fixed size")


def get_python_dtype_from_wrapper_dtype(wrapper_dtype):
    """llm_datadist's data_type.get_python_dtype_from_wrapper_dtype(): the DataType of a data
    type of the library underneath (here a kvd_dtype); ValueError for one it has not."""
    try:
        dtype = DataType(wrapper_dtype)
    except ValueError:
        dtype = None
    if dtype is None or dtype not in _ITEMSIZE:
        raise ValueError(f"The data type {wrapper_dtype} is not supported.")
    return dtype


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

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"  # as llm_datadist prints it


class RegisterMemStatus(enum.IntEnum):
    """What query_register_mem_status() says about a comm domain."""

    OK = 0
    PREPARING = 1
    FAILED = 2


class CacheDesc:
    """num_tensors tensors of one shape and data type (K, V, K, V, ... one pair per layer).
    shape[0] is the number of blocks of a blocks cache, the batch size of a contiguous one."""

    def __init__(self, num_tensors, shape, data_type, placement=Placement.DEVICE,
                 batch_dim_index=0, seq_len_dim_index=-1, kv_tensor_format=None):
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
        if kv_tensor_format is not None and not isinstance(kv_tensor_format, str):
            raise TypeError(f"kv_tensor_format must be a str, not "
                            f"{type(kv_tensor_format).__name__}")
        self.kv_tensor_format = kv_tensor_format

    @property
    def batch_dim(self):
        return self.batch_dim_index

    @property
    def batch_size(self):
        """shape[batch_dim_index]: the batch size, or the number of blocks of a blocks cache."""
        return self.shape[self.batch_dim_index]

    @property
    def size(self):
        """Bytes per tensor."""
        return math.prod(self.shape) * self.data_type.itemsize

    def update_dim(self, dim_index, dim_value):
        """Sets shape[dim_index] to dim_value (llm_datadist's)."""
        dim_index = _int(dim_index, "dim_index", -len(self.shape), len(self.shape) - 1)
        self.shape[dim_index] = _int(dim_value, "dim_value")

    def _kvd(self):
        if self.data_type not in _ITEMSIZE:
            raise _no_strings()
        return (self.num_tensors, tuple(self.shape), int(self.data_type))

    def __repr__(self):
        return (f"CacheDesc(num_tensors={self.num_tensors}, shape={self.shape}, "
                f"data_type={self.data_type.name})")


def _bind_key(what, args, kwargs, positional, required):
    """The values of llm_datadist's key constructors, which take (*args, **kwargs): args in
    the order of positional, keywords by those names or prompt_cluster_id (cluster_id's other
    name). Errors are llm_datadist's: LLMException(LLM_PARAM_INVALID)."""
    if len(args) + len(kwargs) > len(positional):
        raise _param_invalid(f"{what}: Param num is over limit ({len(positional)})")
    values = dict(zip(positional, args))
    for k, v in kwargs.items():
        if k not in positional and k != "prompt_cluster_id":
            raise _param_invalid(f"{what}: Unsupported param:{k}")
        if k == "prompt_cluster_id":
            k = "cluster_id"
        if k in values:
            raise _param_invalid(f"{what}: cluster_id given twice (cluster_id and "
                                 "prompt_cluster_id are one parameter)"
                                 if k == "cluster_id" else f"{what}: {k} given twice")
        values[k] = v
    for name in required:
        if name not in values:
            alias = " or prompt_cluster_id" if name == "cluster_id" else ""
            raise _param_invalid(f"{what}: Param {name}{alias} is required")
    return values


class CacheKey:
    """A contiguous cache's batch item by request (req_id) or prefix (prefix_id, with req_id
    UINT64_MAX), of the cluster cluster_id; model_id tells models apart. As llm_datadist's:
    CacheKey(cluster_id, req_id, model_id=0, prefix_id=2**64-1), cluster_id also by its other
    name prompt_cluster_id=."""

    __slots__ = ("cluster_id", "req_id", "model_id", "prefix_id")

    def __init__(self, *args, **kwargs):
        v = _bind_key("CacheKey", args, kwargs, ("cluster_id", "req_id", "model_id", "prefix_id"),
                      ("cluster_id", "req_id"))
        self.cluster_id = _u64(v["cluster_id"], "cluster_id")
        self.req_id = _u64(v["req_id"], "req_id")
        self.model_id = _u64(v.get("model_id", 0), "model_id")
        self.prefix_id = _u64(v.get("prefix_id", UINT64_MAX), "prefix_id")

    @property
    def prompt_cluster_id(self):
        return self.cluster_id

    def _kvd(self):
        return (_kvdist.KEY_REQ, self.cluster_id, self.req_id, self.prefix_id, self.model_id, 0,
                0)

    def __eq__(self, other):
        return isinstance(other, CacheKey) and self._kvd() == other._kvd()

    def __hash__(self):
        return hash(self._kvd())

    def __repr__(self):
        return (f"CacheKey(cluster_id={self.cluster_id}, req_id={self.req_id}, "
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
    As llm_datadist's: BlocksCacheKey(cluster_id, model_id=0), cluster_id also by its other name
    prompt_cluster_id=; for a push it is the destination cluster."""

    __slots__ = ("cluster_id", "model_id")

    def __init__(self, *args, **kwargs):
        v = _bind_key("BlocksCacheKey", args, kwargs, ("cluster_id", "model_id"),
                      ("cluster_id",))
        self.cluster_id = _u64(v["cluster_id"], "cluster_id")
        self.model_id = _u64(v.get("model_id", 0), "model_id")

    @property
    def prompt_cluster_id(self):
        return self.cluster_id

    def _kvd(self):
        return (_kvdist.KEY_BLOCKS, self.cluster_id, UINT64_MAX, UINT64_MAX, self.model_id, 0, 0)

    def __eq__(self, other):
        return isinstance(other, BlocksCacheKey) and self._kvd() == other._kvd()

    def __hash__(self):
        return hash(self._kvd())

    def __repr__(self):
        return f"BlocksCacheKey(cluster_id={self.cluster_id}, model_id={self.model_id})"


_KEY_TYPES = (CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey)


def _key(key, name, types=_KEY_TYPES):
    if not isinstance(key, types):
        want = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{name} must be a {want}, not {type(key).__name__}")
    return key._kvd()


def trans_str_ip(ip):
    """llm_datadist's configs.trans_str_ip(): an IPv4 address in text as the int llm_datadist
    passes on (its 4 bytes in network order, read little-endian); an int as it is; RuntimeError
    for text that is not an address."""
    if isinstance(ip, str):
        try:
            return int.from_bytes(socket.inet_aton(ip), byteorder="little")
        except OSError:
            raise RuntimeError(f"Can not parse ip str:{ip}") from None
    return ip


def _ip_info(ip, port):
    """(ip, port) as llm_datadist keeps it (an IPv4 address as trans_str_ip()'s int; kvdist
    keeps an IPv6 address as text) and "ip:port" ("[v6]:port") as libkvdist takes it."""
    if isinstance(ip, str):
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            raise ValueError(f"{ip!r} is not an IP address") from None
    elif isinstance(ip, int) and not isinstance(ip, bool):
        # llm_datadist's int form: what trans_str_ip() makes of the text.
        if not 0 <= ip <= 2**32 - 1:
            raise ValueError(f"ip {ip} is not an IPv4 address in llm_datadist's int form")
        addr = ipaddress.IPv4Address(ip.to_bytes(4, byteorder="little"))
    else:
        raise TypeError(f"ip only support ['str', 'int'], but got {type(ip)}.")
    port = _int(port, "port", 0, 65535)
    if addr.version == 6:
        return (str(addr), port), f"[{addr}]:{port}"
    return (int.from_bytes(addr.packed, byteorder="little"), port), f"{addr}:{port}"


class LLMClusterInfo:
    """A cluster to link to: its id, role and the address of its kvdistd (remote), and
    optionally the local address. kvdist takes one address per side; a remote address left out
    means the cluster is attached to this node's daemon. An IPv4 address given as an int is in
    llm_datadist's form (configs.trans_str_ip()'s)."""

    def __init__(self):
        self.remote_cluster_id = 0
        self.remote_role_type = LLMRole.PROMPT
        self._local = []
        self._remote = []

    def append_local_ip_info(self, ip, port):
        self._local.append(_ip_info(ip, port))

    def append_remote_ip_info(self, ip, port):
        self._remote.append(_ip_info(ip, port))

    @property
    def local_ip_info_list(self):
        """llm_datadist's: [(ip, port)], an IPv4 address as trans_str_ip()'s int."""
        return [info for info, _ in self._local]

    @property
    def remote_ip_info_list(self):
        return [info for info, _ in self._remote]

    @property
    def local_ip_infos(self):
        """kvdist's: ["ip:port"] as libkvdist takes them."""
        return [text for _, text in self._local]

    @property
    def remote_ip_infos(self):
        return [text for _, text in self._remote]

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


def _layer_range(r, name):
    """(first, last) of a range of layers with step 1; (-1, -1), every layer, for None."""
    if r is None:
        return (-1, -1)
    if not isinstance(r, range):
        raise TypeError(f"{name} must be a range, not {type(r).__name__}")
    if r.step != 1 or len(r) == 0:
        raise ValueError(f"{name} must be a non-empty range with step 1, not {r}")
    return (r.start, r.stop - 1)


def _block_slice(value, name):
    """(offset, length) in bytes of each block, or None for the whole block: TypeError or
    ValueError for anything else. The daemon checks it against the block size."""
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be (offset, length) or None, not {value!r}")
    return (_u64(value[0], f"{name} offset"), _u64(value[1], f"{name} length"))


def _check_layer_range(name, r, allow_none):
    """llm_datadist's check of a layer range: a range (TypeError otherwise; None only where
    allow_none), step 1 and 0 <= start < stop (LLM_PARAM_INVALID otherwise)."""
    if r is None and allow_none:
        return
    if not isinstance(r, range):
        raise TypeError(f"{name} only support ['range'], but got {type(r)}.")
    if r.step != 1:
        raise _param_invalid(f"check {name}.step == 1 failed")
    if not 0 <= r.start < r.stop:
        raise _param_invalid(f"check 0 <= range.start < range.stop failed, {name} = {r}")


class TransferWithCacheKeyConfig:
    """Where transfer_cache_async() pushes: the cache cache_key names on another cluster
    (BlocksCacheKey for a blocks cache, CacheKeyByIdAndIndex for a batch item), which layers
    (src_layer_range to dst_layer_range, both required and of one length, as in llm_datadist)
    and, for a contiguous source, which batch item (0 for a BlocksCacheKey). kvdist never sends
    memory addresses to a peer, so llm_datadist's TransferConfig (remote addresses) has no
    counterpart: name the destination by its key."""

    def __init__(self, cache_key, src_layer_range=None, dst_layer_range=None, src_batch_index=0):
        _key(cache_key, "cache_key", (BlocksCacheKey, CacheKeyByIdAndIndex))
        _check_layer_range("src_layer_range", src_layer_range, False)
        _check_layer_range("dst_layer_range", dst_layer_range, False)
        if len(src_layer_range) != len(dst_layer_range):
            raise _param_invalid("src_layer_range size should be equal to dst_layer_range size")
        src_batch_index = _int(src_batch_index, "src_batch_index", 0, 2**32 - 1)
        if isinstance(cache_key, BlocksCacheKey) and src_batch_index != 0:
            raise _param_invalid("src_batch_index should be 0 when cache_key is BlocksCacheKey.")
        self._cache_key = cache_key
        self._src_layer_range = src_layer_range
        self._dst_layer_range = dst_layer_range
        self._src_batch_index = src_batch_index
        self.dst_cluster_id = cache_key.cluster_id

    @property
    def cache_key(self):
        return self._cache_key

    @cache_key.setter
    def cache_key(self, cache_key):
        _key(cache_key, "cache_key", (BlocksCacheKey, CacheKeyByIdAndIndex))
        self._cache_key = cache_key

    @property
    def src_layer_range(self):
        return self._src_layer_range

    @src_layer_range.setter
    def src_layer_range(self, src_layer_range):
        _check_layer_range("src_layer_range", src_layer_range, True)
        self._src_layer_range = src_layer_range

    @property
    def dst_layer_range(self):
        return self._dst_layer_range

    @dst_layer_range.setter
    def dst_layer_range(self, dst_layer_range):
        _check_layer_range("dst_layer_range", dst_layer_range, True)
        self._dst_layer_range = dst_layer_range

    @property
    def src_batch_index(self):
        return self._src_batch_index

    @src_batch_index.setter
    def src_batch_index(self, src_batch_index):
        if isinstance(self._cache_key, BlocksCacheKey) and src_batch_index != 0:
            raise _param_invalid("src_batch_index should be 0 when cache_key is BlocksCacheKey.")
        self._src_batch_index = _int(src_batch_index, "src_batch_index", 0, 2**32 - 1)

    def __repr__(self):
        return (f"TransferWithCacheKeyConfig(cache_key={self._cache_key!r}, "
                f"src_layer_range={self._src_layer_range}, "
                f"dst_layer_range={self._dst_layer_range}, "
                f"src_batch_index={self._src_batch_index})")


class LayerSynchronizer(abc.ABC):
    """The engine's side of transfer_cache_async(): synchronize_layer(i, timeout) returns True
    once layer i of the source cache is computed (False: it will not be, stop)."""

    @abc.abstractmethod
    def synchronize_layer(self, layer_index, timeout_in_millis):
        raise NotImplementedError


def _cpu_addrs(cache_desc, addrs):
    """create_cpu_cache()'s checks, as llm_datadist's; the addresses as ints."""
    if not isinstance(cache_desc, CacheDesc):
        raise TypeError(f"cache_desc must be a CacheDesc, not {type(cache_desc).__name__}")
    if not isinstance(addrs, list):
        raise TypeError(f"addrs must be a list of int, not {type(addrs).__name__}")
    addrs = [_int(a, "addrs[]", 1, UINT64_MAX) for a in addrs]
    if cache_desc.placement != Placement.HOST:
        raise _param_invalid("cache_desc placement must be HOST")
    if cache_desc.num_tensors != len(addrs):
        raise _param_invalid(f"cache_desc num_tensors:{cache_desc.num_tensors} not equal addrs "
                             f"num:{len(addrs)}")
    return addrs


class Cache:
    """A registered or allocated cache: its id, description and tensor addresses; or, from
    create_cpu_cache(), host memory of the caller's that swap_blocks() copies to and from.
    Made by the CacheManager (llm_datadist's constructor, which code does not call)."""

    def __init__(self, cache_id, cache_desc, tensor_addrs, cache_manager, is_registered,
                 is_blocks_cache):
        self.cache_id = cache_id
        self.cache_desc = cache_desc
        self.tensor_addrs = list(tensor_addrs)
        # What the local copies trust, taken now: the attributes above are the caller's to
        # change, the memory the daemon checked (or create_cpu_cache() was promised) is not.
        self._layout = (tuple(operator.index(a) for a in self.tensor_addrs),
                        cache_desc.num_tensors, tuple(cache_desc.shape), cache_desc.size,
                        cache_desc.batch_dim_index)
        self._is_registered = bool(is_registered)
        self.is_blocks_cache = is_blocks_cache
        # The CacheManager that holds it, None for a cpu cache; cleared when it is released.
        self._manager = cache_manager
        self._cpu = False

    @property
    def pool(self):
        """kvdist's: whether the cache was allocated from the daemon's pool."""
        return not self._is_registered and not self._cpu

    @classmethod
    def create_cpu_cache(cls, cache_desc, addrs):
        """A blocks cache over host memory the caller owns (cache_desc.placement HOST), for
        swap_blocks(). Not registered: the daemon never sees it, and the addresses are the
        caller's promise that num_tensors tensors of cache_desc.size bytes live there."""
        cache = cls(-1, cache_desc, _cpu_addrs(cache_desc, addrs), None, False, True)
        cache._cpu = True
        return cache

    @property
    def per_device_tensor_addrs(self):
        """llm_datadist's form: one list of addresses per device (kvdist has one)."""
        return [self.tensor_addrs]

    def __repr__(self):
        return (f"{type(self).__name__}(cache_id={self.cache_id}, {self.cache_desc!r}, "
                f"is_blocks_cache={self.is_blocks_cache})")


class KvCache(Cache):
    """llm_datadist's KvCache: a Cache over addresses per device (per_device_tensor_addrs,
    [[addr, ...]]; kvdist has one device, so one list), made by create_cpu_cache(), which also
    takes one list of addresses. A blocks cache for swap_blocks()."""

    def __init__(self, cache_id, cache_desc, per_device_tensor_addrs, kv_cache_manager):
        if (not isinstance(per_device_tensor_addrs, list) or len(per_device_tensor_addrs) != 1 or
                not isinstance(per_device_tensor_addrs[0], list)):
            raise _param_invalid("per_device_tensor_addrs must be [[addr, ...]]: kvdist has one "
                                 "device per instance")
        super().__init__(cache_id, cache_desc, per_device_tensor_addrs[0], kv_cache_manager,
                         False, True)

    @classmethod
    def create_cpu_cache(cls, cache_desc, addrs):
        if isinstance(addrs, list) and addrs and all(isinstance(a, list) for a in addrs):
            if len(addrs) != 1:
                raise _param_invalid(f"addrs for {len(addrs)} devices: kvdist has one device "
                                     "per instance")
            addrs = addrs[0]
        cache = cls(-1, cache_desc, [_cpu_addrs(cache_desc, addrs)], None)
        cache._cpu = True
        return cache


class Memtype(enum.Enum):
    """Kinds of memory in a MemInfo."""

    MEM_TYPE_DEVICE = 0
    MEM_TYPE_HOST = 1


class MemInfo:
    """A piece of memory: its Memtype, address and size (remap_registered_memory())."""

    def __init__(self, mem_type, addr, size):
        if not isinstance(mem_type, Memtype):
            raise TypeError(f"mem_type must be a Memtype, not {type(mem_type).__name__}")
        for name, v in (("addr", addr), ("size", size)):
            if not isinstance(v, int):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        self._mem_type = mem_type
        self._addr = addr
        self._size = size

    @property
    def mem_type(self):
        return self._mem_type

    @property
    def addr(self):
        return self._addr

    @property
    def size(self):
        return self._size

    def __repr__(self):
        return f"MemInfo(mem_type={self.mem_type}, addr={self.addr}, size={self.size})"


class TransferConfig:
    """llm_datadist's destination of transfer_cache_async() by remote memory address
    (dst_addrs: one per tensor sent). kvdist never sends memory addresses to a peer:
    transfer_cache_async() refuses it with LLM_FEATURE_NOT_ENABLED; name the destination by
    its key with TransferWithCacheKeyConfig."""

    def __init__(self, dst_cluster_id, dst_addrs, src_layer_range=None, src_batch_index=0):
        self.dst_cluster_id = dst_cluster_id
        self.dst_addrs = dst_addrs
        self.src_layer_range = src_layer_range
        self.src_batch_index = src_batch_index
        self.dst_layer_range = None

    @property
    def dst_cluster_id(self):
        return self._dst_cluster_id

    @dst_cluster_id.setter
    def dst_cluster_id(self, v):
        self._dst_cluster_id = _u64(v, "dst_cluster_id")

    @property
    def dst_addrs(self):
        return self._dst_addrs

    @dst_addrs.setter
    def dst_addrs(self, v):
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"dst_addrs must be a list of int, not {type(v).__name__}")
        self._dst_addrs = [_u64(a, "dst_addrs[]") for a in v]

    @property
    def src_layer_range(self):
        return self._src_layer_range

    @src_layer_range.setter
    def src_layer_range(self, v):
        _layer_range(v, "src_layer_range")
        self._src_layer_range = v

    @property
    def src_batch_index(self):
        return self._src_batch_index

    @src_batch_index.setter
    def src_batch_index(self, v):
        self._src_batch_index = _int(v, "src_batch_index", 0, 2**32 - 1)

    def __repr__(self):
        return (f"TransferConfig(dst_cluster_id={self.dst_cluster_id}, "
                f"dst_addrs={self.dst_addrs}, src_layer_range={self.src_layer_range}, "
                f"src_batch_index={self.src_batch_index})")


class Notification(collections.namedtuple("Notification", "src_cluster_id data")):
    """What a transfer carried (notify=) to this cluster: kind "push", from src_cluster_id that
    pushed, once its bytes landed here; kind "pull", from src_cluster_id that pulled, once it
    read every byte. kind is an attribute, not part of the tuple: (src_cluster_id, data)
    unpacking and comparisons work as before."""

    kind = "push"

    def __new__(cls, src_cluster_id, data, kind="push"):
        self = super().__new__(cls, src_cluster_id, data)
        self.kind = kind
        return self

    def __getnewargs__(self):
        return (self.src_cluster_id, self.data, self.kind)

    def __repr__(self):
        return (f"Notification(src_cluster_id={self.src_cluster_id!r}, data={self.data!r}, "
                f"kind={self.kind!r})")


class TransferKind(enum.IntEnum):
    """What a BatchEntry does (kvdist's; libkvdist's kvd_transfer_kind)."""

    PULL_CACHE = 1
    PULL_BLOCKS = 2
    PUSH_CACHE = 3
    PUSH_BLOCKS = 4


# The remote keys each kind takes, as the methods of the same names take them.
_ENTRY_KEYS = {
    TransferKind.PULL_CACHE: (CacheKey, CacheKeyByIdAndIndex),
    TransferKind.PULL_BLOCKS: _KEY_TYPES,
    TransferKind.PUSH_CACHE: (CacheKeyByIdAndIndex, CacheKey),
    TransferKind.PUSH_BLOCKS: _KEY_TYPES,
}


class BatchEntry:
    """One transfer of CacheManager.transfer_batch() (kvdist's). Build it with the class
    methods named after the CacheManager methods it stands for, which take the same arguments:
    BatchEntry.pull_blocks(src_cache_key, dst_cache, src_blocks, dst_blocks, ...),
    pull_cache(cache_key, cache, batch_index, size, ...), push_blocks(dst_cache_key, src_cache,
    src_blocks, dst_blocks, ...), push_cache(dst_cache_key, src_cache, src_batch_index, size,
    ...); each also takes src_layer_range and dst_layer_range (Python ranges, None for every
    layer), tensor_num_per_layer (2) and remote_info (the remote cluster's
    LLMDataDist.local_info(): the batch links to it first when no link joins the two); the
    blocks ones also src_slice and dst_slice ((offset, length) of each block, as for
    CacheManager.pull_blocks()). Block
    ids are lists of ints or integer numpy arrays, kept as they are (not copied) until the
    batch is submitted. cache_key is the remote cache, cache the local one (a Cache or its
    id)."""

    __slots__ = ("kind", "cache_key", "cache", "src_blocks", "dst_blocks", "batch_index", "size",
                 "src_layer_range", "dst_layer_range", "tensor_num_per_layer", "remote_info",
                 "src_slice", "dst_slice")

    def __init__(self, kind, cache_key, cache, src_blocks=(), dst_blocks=(), batch_index=0,
                 size=-1, src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                 remote_info=None, src_slice=None, dst_slice=None):
        if not isinstance(kind, TransferKind):
            raise TypeError(f"kind must be a TransferKind, not {type(kind).__name__}")
        _key(cache_key, "cache_key", _ENTRY_KEYS[kind])
        _layer_range(src_layer_range, "src_layer_range")
        _layer_range(dst_layer_range, "dst_layer_range")
        if remote_info is not None and not isinstance(remote_info, str):
            raise TypeError(f"remote_info must be a str, not {type(remote_info).__name__}")
        self.kind = kind
        self.cache_key = cache_key
        self.cache = cache
        self.src_blocks = () if src_blocks is None else src_blocks
        self.dst_blocks = () if dst_blocks is None else dst_blocks
        self.batch_index = _int(batch_index, "batch_index", 0, 2**32 - 1)
        self.size = _int(size, "size", -2**63, 2**63 - 1)
        self.src_layer_range = src_layer_range
        self.dst_layer_range = dst_layer_range
        self.tensor_num_per_layer = _int(tensor_num_per_layer, "tensor_num_per_layer", 0,
                                         2**32 - 1)
        self.remote_info = remote_info
        self.src_slice = _block_slice(src_slice, "src_slice")
        self.dst_slice = _block_slice(dst_slice, "dst_slice")

    @classmethod
    def pull_blocks(cls, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(), *,
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                    remote_info=None, src_slice=None, dst_slice=None):
        return cls(TransferKind.PULL_BLOCKS, src_cache_key, dst_cache, src_blocks, dst_blocks,
                   0, -1, src_layer_range, dst_layer_range, tensor_num_per_layer, remote_info,
                   src_slice, dst_slice)

    @classmethod
    def pull_cache(cls, cache_key, cache, batch_index=0, size=-1, *, src_layer_range=None,
                   dst_layer_range=None, tensor_num_per_layer=2, remote_info=None):
        return cls(TransferKind.PULL_CACHE, cache_key, cache, (), (), batch_index, size,
                   src_layer_range, dst_layer_range, tensor_num_per_layer, remote_info)

    @classmethod
    def push_blocks(cls, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(), *,
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                    remote_info=None, src_slice=None, dst_slice=None):
        return cls(TransferKind.PUSH_BLOCKS, dst_cache_key, src_cache, src_blocks, dst_blocks,
                   0, -1, src_layer_range, dst_layer_range, tensor_num_per_layer, remote_info,
                   src_slice, dst_slice)

    @classmethod
    def push_cache(cls, dst_cache_key, src_cache, src_batch_index=0, size=-1, *,
                   src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                   remote_info=None):
        return cls(TransferKind.PUSH_CACHE, dst_cache_key, src_cache, (), (), src_batch_index,
                   size, src_layer_range, dst_layer_range, tensor_num_per_layer, remote_info)

    def __repr__(self):
        return (f"BatchEntry({self.kind.name}, {self.cache_key!r}, cache={self.cache!r}, "
                f"{len(self.src_blocks)} src blocks, {len(self.dst_blocks)} dst blocks, "
                f"batch_index={self.batch_index}, remote_info={self.remote_info!r})")
