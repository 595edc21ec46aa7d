# SPDX-License-Identifier: MIT
"""LLMDataDist, its CacheManager and CacheTask: llm_datadist's classes over libkvdist."""

import ctypes
import json
import os
import threading
import weakref

from . import _kvdist
from . import _config
from ._status import LLMException, LLMStatusCode, _error, status_code
from ._types import (BatchEntry, BlocksCacheKey, Cache, CacheKey, CacheKeyByIdAndIndex, LLMRole,
                     MemInfo, Memtype, Notification, Placement, RegisterMemStatus, TransferConfig,
                     TransferKind, TransferWithCacheKeyConfig, _block_slice, _int, _key,
                     _layer_range, _u64)

_KVD_OK = 0
_UINT64_MAX = 2**64 - 1
_KVD_E_FAILED = -1
_KVD_E_TIMEOUT = -3
_KVD_E_IN_PROGRESS = -27
_KVD_E_CANCELLED = -28

# The instances initialized in this process, for kvdist.empty() without datadist=.
_initialized = weakref.WeakSet()


def _daemon_pool(socket_path):
    """The daemon's pool as its status says (size, page_size, ...)."""
    return json.loads(_kvdist.daemon_status(socket_path))["pool"]


def _cache_id(cache, name):
    if isinstance(cache, Cache):
        return cache.cache_id
    return _u64(cache, name)


def _timeout(timeout_ms):
    return 0 if timeout_ms is None else _int(timeout_ms, "timeout_ms", 1, 2**31 - 1)


def _remote_info(remote_info):
    if remote_info is not None and not isinstance(remote_info, str):
        raise TypeError(f"remote_info must be a str (LLMDataDist.local_info() of the remote "
                        f"cluster), not {type(remote_info).__name__}")
    return remote_info


def _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify=None,
          remote_info=None, src_slice=None, dst_slice=None):
    src = _layer_range(src_layer_range, "src_layer_range")
    dst = _layer_range(dst_layer_range, "dst_layer_range")
    tpl = _int(tensor_num_per_layer, "tensor_num_per_layer", 0, 2**32 - 1)
    if notify is not None and not isinstance(notify, (bytes, bytearray, memoryview)):
        raise TypeError(f"notify must be bytes, not {type(notify).__name__}")
    return (src[0], src[1], dst[0], dst[1], tpl, _timeout(timeout_ms), notify,
            _remote_info(remote_info), _block_slice(src_slice, "src_slice"),
            _block_slice(dst_slice, "dst_slice"))


def _raise(status, detail):
    raise LLMException._from_kvd(status, detail)


def _invalid(message):
    return _error(LLMStatusCode.LLM_PARAM_INVALID, message)


def _dict_of_ints(value, name, values_are_lists=False):
    """{int: int} (or {int: [int, ...]}) as a list of (key, value) pairs in the dict's order."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, not {type(value).__name__}")
    pairs = []
    for k, v in value.items():
        k = _int(k, f"{name} key")
        if values_are_lists:
            if not isinstance(v, list):
                raise TypeError(f"{name} values must be lists of int, not {type(v).__name__}")
            pairs.extend((k, _int(d, f"{name}[{k}][]")) for d in v)
        else:
            pairs.append((k, _int(v, f"{name}[{k}]")))
    return pairs


def _geometry(cache, name):
    """(unit bytes, units) of a cache as it was registered: its batch items or blocks, along
    shape[0]."""
    _, _, shape, size, batch_dim_index = cache._layout
    if batch_dim_index != 0:
        raise _invalid(f"{name}: batch_dim_index is {batch_dim_index}, but kvdist's batch "
                       "(block) dimension is shape[0]")
    if not shape or shape[0] <= 0:
        raise _invalid(f"{name}: shape {list(shape)} has no batch items or blocks")
    return size // shape[0], shape[0]


def _num_tensors(cache):
    return cache._layout[1]


def _memmove_units(dst, dst_unit, src, src_unit, pairs, offset, size):
    """For every tensor: copies size bytes from offset of src's unit s to dst's unit d for each
    (s, d) of pairs, in that order. The caller checked every index and size."""
    for d_addr, s_addr in zip(dst._layout[0], src._layout[0]):
        for s, d in pairs:
            ctypes.memmove(d_addr + d * dst_unit + offset, s_addr + s * src_unit + offset, size)


class CacheTask:
    """An asynchronous transfer (the *_async methods) or a layer-by-layer push
    (transfer_cache_async()). wait(), done(), cancel() and fileno() are kvdist's; synchronize()
    and get_results() llm_datadist's. Timeouts are in milliseconds; None waits until the
    transfers' own deadlines. fileno() lets an event loop wait for it (asyncio's
    loop.add_reader(task.fileno(), ...), then done())."""

    def __init__(self, transfer_async_task):
        # libkvdist's task (the *_async methods) or transfer_cache_async()'s thread.
        layered = isinstance(transfer_async_task, _LayeredPush)
        self._task = None if layered else transfer_async_task
        self._layered = transfer_async_task if layered else None
        self._batch = False  # transfer_batch()'s task: a status per entry
        self._n_entries = 1  # destinations (a batch: its entries)

    def _results(self, timeout_ms):
        """(finished, [(kvd status or None, detail) per destination])."""
        if self._task is not None:
            status, detail = self._task.wait(-1 if timeout_ms is None else
                                             _int(timeout_ms, "timeout", 0, 2**31 - 1))
            if status == _KVD_E_IN_PROGRESS:
                return False, [(None, detail)] * self._n_entries
            if self._batch:
                # Every entry's own status; the task's detail goes with the first failure.
                statuses = self._task.entry_statuses()
                first = next((i for i, st in enumerate(statuses) if st != _KVD_OK), None)
                return True, [(st, detail if i == first else "")
                              for i, st in enumerate(statuses)]
            return True, [(status, detail)]
        finished = self._layered.finished.wait(None if timeout_ms is None else timeout_ms / 1000)
        return finished, list(zip(self._layered.statuses, self._layered.details))

    def done(self):
        """Whether the transfer has its final status; does not wait."""
        if self._task is not None:
            return self._task.done()
        return self._layered.finished.is_set()

    def cancel(self):
        """Stops the transfer and returns once nothing more of it can land (in this cluster's
        memory for a pull, at the destination for a push). Returns the final LLMStatusCode:
        LLM_CANCELLED, or how the transfer ended had it ended first (LLM_SUCCESS, ...), which
        cancel() then leaves as it was. A cancelled transfer may have written any part of its
        destination blocks and nothing else. A layer-by-layer push stops pushing layers and
        cancels the pushes in flight."""
        if self._task is not None:
            status, _ = self._task.cancel()
            return status_code(status)
        self._layered.cancel()
        return LLMStatusCode.LLM_CANCELLED if not self._layered.finished.is_set() \
            else self.synchronize(0)

    def fileno(self):
        """A file descriptor that polls readable once done() may have changed (a wake-up may be
        early: check done()) and stays readable once the task is done. The task's own: do not
        read or close it; it goes with the task."""
        if self._task is not None:
            return self._task.fileno()
        return self._layered.fileno()

    def _batch_task(self, what):
        if not self._batch:
            raise _invalid(f"{what}: the task is not a batch's "
                           "(CacheManager.transfer_batch())")
        return self._task

    def entry_statuses(self):
        """A batch's (transfer_batch()) LLMStatusCode per entry, in the entries' order, once it
        is done (done() is true, or wait() returned or raised); LLMException with
        LLM_IN_PROGRESS while it runs, LLM_PARAM_INVALID for a task that is not a batch's."""
        return [status_code(st) for st in self._batch_task("entry_statuses").entry_statuses()]

    def failed_blocks(self):
        """The local block ids of every entry of a finished batch that failed (the destination
        blocks of a failed pull, the source blocks of a failed push), in entry order, as a
        numpy uint64 array (empty when every entry succeeded): vLLM's
        get_block_ids_with_load_errors(). Raises as entry_statuses() does."""
        import numpy  # as kvdist.empty() does: only where arrays are made

        raw = self._batch_task("failed_blocks").failed_blocks()
        return numpy.frombuffer(raw, dtype=numpy.uint64)

    def wait(self, timeout_ms=None):
        """Waits for the transfer; raises LLMException if it failed, or with LLM_TIMEOUT if it
        is still running after timeout_ms."""
        finished, results = self._results(timeout_ms)
        if not finished:
            raise _error(LLMStatusCode.LLM_TIMEOUT,
                         f"still running after {timeout_ms} ms", _KVD_E_IN_PROGRESS)
        for status, detail in results:
            if status is not None and status != _KVD_OK:
                _raise(status, detail)

    def synchronize(self, timeout_in_millis=None):
        """The overall LLMStatusCode once every transfer ended (LLM_TIMEOUT while running)."""
        finished, results = self._results(timeout_in_millis)
        if not finished:
            return LLMStatusCode.LLM_TIMEOUT
        for status, _ in results:
            if status is not None and status != _KVD_OK:
                return status_code(status)
        return LLMStatusCode.LLM_SUCCESS

    def get_results(self, timeout_in_millis=None):
        """One LLMStatusCode per destination, None for one nothing was sent to yet; for a
        batch one per entry (entry_statuses()), None for each while it runs."""
        _, results = self._results(timeout_in_millis)
        return [None if status is None else status_code(status) for status, _ in results]


class _LayeredPush:
    """transfer_cache_async()'s thread: waits for each layer and pushes it to every
    destination that takes it."""

    def __init__(self, client, src_cache, synchronizer, configs, src_blocks, dst_blocks, notify):
        self.client = client
        self.src_id = src_cache.cache_id
        self.synchronizer = synchronizer
        self.src_blocks = src_blocks
        self.dst_blocks = dst_blocks
        self.notify = notify
        layers = src_cache.cache_desc.num_tensors // 2
        self.plans = []
        for c in configs:
            src = c.src_layer_range if c.src_layer_range is not None else range(layers)
            dst = c.dst_layer_range if c.dst_layer_range is not None else src
            if len(src) != len(dst):
                raise ValueError("src_layer_range and dst_layer_range differ in length")
            self.plans.append((c, src, dst.start - src.start))
        self.statuses = [None] * len(configs)
        self.details = [""] * len(configs)
        self.tasks = [[] for _ in configs]
        self.finished = threading.Event()
        self.lock = threading.Lock()  # cancel() against a push being started
        self.cancelled = False
        self.wake_fd = None  # fileno(): an eventfd written once finished
        self.thread = threading.Thread(target=self._run, name="kvdist-transfer-cache",
                                       daemon=True)

    def _push(self, i, layer, last):
        config, _, shift = self.plans[i]
        key = config.cache_key._kvd()
        notify = self.notify if last else None
        opts = (layer, layer, layer + shift, layer + shift, 2, 0, notify)
        if isinstance(config.cache_key, BlocksCacheKey):
            return self.client.push_blocks_async(key, self.src_id, self.src_blocks,
                                                 self.dst_blocks, opts)
        return self.client.push_cache_async(key, self.src_id, config.src_batch_index, -1, opts)

    def cancel(self):
        """No layer is pushed after this; the pushes in flight are cancelled (each returns once
        nothing more of it lands)."""
        with self.lock:
            self.cancelled = True
            tasks = [t for per_dst in self.tasks for t in per_dst]
        for t in tasks:
            t.cancel()

    def fileno(self):
        with self.lock:
            if self.wake_fd is None:
                self.wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
                if self.finished.is_set():
                    os.eventfd_write(self.wake_fd, 1)
            return self.wake_fd

    def __del__(self):
        if self.wake_fd is not None:
            os.close(self.wake_fd)

    def _fail(self, i, status, detail):
        if self.statuses[i] in (None, _KVD_OK):
            self.statuses[i] = status
            self.details[i] = detail

    def _settle(self, i):
        """Waits for every push to destination i sent so far."""
        for t in self.tasks[i]:
            status, detail = t.wait(-1)
            if status != _KVD_OK:
                self._fail(i, status, detail)
        self.tasks[i] = []

    def _run(self):
        try:
            order = sorted({layer for _, src, _ in self.plans for layer in src})
            for layer in order:
                if not self.synchronizer.synchronize_layer(layer, None):
                    for i, (_, src, _) in enumerate(self.plans):
                        if layer in src:
                            # A push that failed before says so rather than this.
                            self._settle(i)
                            self._fail(i, _KVD_E_TIMEOUT,
                                       f"the layer synchronizer gave up on layer {layer}")
                    break
                for i, (_, src, _) in enumerate(self.plans):
                    if layer not in src or self.statuses[i] not in (None, _KVD_OK):
                        continue
                    last = layer == src[-1]
                    if last and self.notify is not None:
                        # The notification says every layer landed: the last layer goes once
                        # the earlier ones did.
                        self._settle(i)
                        if self.statuses[i] not in (None, _KVD_OK):
                            continue
                    try:
                        with self.lock:
                            if self.cancelled:
                                self._fail(i, _KVD_E_CANCELLED, "transfer_cache_async: cancelled")
                                continue
                            self.tasks[i].append(self._push(i, layer, last))
                        self.statuses[i] = _KVD_OK
                    except LLMException as e:
                        self._fail(i, e.kvd_status if e.kvd_status is not None else _KVD_E_FAILED,
                                   e.message)
            for i in range(len(self.plans)):
                self._settle(i)
        except BaseException as e:  # the synchronizer's own failure ends the task, not the thread
            for i in range(len(self.plans)):
                self._fail(i, _KVD_E_FAILED, f"transfer_cache_async: {e!r}")
                self.tasks[i] = []
        finally:
            with self.lock:
                self.finished.set()
                if self.wake_fd is not None:
                    os.eventfd_write(self.wake_fd, 1)


class CacheManager:
    """The caches of an LLMDataDist and the transfers between them and other clusters'.
    Transfers take kvdist's keyword arguments timeout_ms (this call's deadline instead of
    sync_kv_timeout) and notify (bytes the other cluster gets: a push's destination once the
    push landed, a pull's source once every byte was read; none for a transfer that failed)."""

    def __init__(self, llm_datadist, options):
        # llm_datadist's constructor (LLMDataDist makes its CacheManager); kvdist reads no
        # option here: init() took them.
        self._datadist = llm_datadist
        # The caches this instance holds, by id: what the local copies may touch.
        self._caches = {}

    def _c(self):
        return self._datadist._c()

    @staticmethod
    def _access(remote_accessible):
        if remote_accessible is None:
            return _kvdist.REMOTE_DEFAULT
        return _kvdist.REMOTE_YES if remote_accessible else _kvdist.REMOTE_NO

    @staticmethod
    def check_cache_key(cache_key):
        """llm_datadist's check of a CacheKey that names a request or a prefix: exactly one of
        req_id and prefix_id is valid (not 2**64-1); LLM_PARAM_INVALID otherwise."""
        if not isinstance(cache_key, CacheKey):
            raise TypeError(f"cache_key must be a CacheKey, not {type(cache_key).__name__}")
        req, prefix = cache_key.req_id != _UINT64_MAX, cache_key.prefix_id != _UINT64_MAX
        if req == prefix:
            raise _invalid(f"{'only ' if req else ''}one of req id and prefix id should contain "
                           f"valid value:[0, 2**64-1), req id:{cache_key.req_id}, prefix "
                           f"id:{cache_key.prefix_id}.")

    def _hold(self, cache_id, cache_desc, addrs, pool, blocks):
        cache = Cache(cache_id, cache_desc, [_int(a, "addrs[]") for a in addrs], self, not pool,
                      blocks)
        self._caches[cache_id] = cache
        return cache

    def _release(self, cache_id):
        cache = self._caches.pop(cache_id, None)
        if cache is not None:
            cache._manager = None

    def register_cache(self, cache_desc, addrs, cache_keys=(), remote_accessible=None):
        """A contiguous cache whose tensors start at addrs (e.g. tensor.data_ptr() of
        kvdist.empty_torch() tensors); one CacheKey per batch slot."""
        keys = [_key(k, "cache_keys[]", (CacheKey,)) for k in cache_keys]
        addrs = list(addrs)
        cache_id = self._c().register_cache(cache_desc._kvd(), addrs, keys,
                                            self._access(remote_accessible))
        return self._hold(cache_id, cache_desc, addrs, False, False)

    def register_blocks_cache(self, cache_desc, addrs, blocks_cache_key=None,
                              remote_accessible=None):
        """A blocks cache (shape[0] blocks per tensor) whose tensors start at addrs."""
        key = None if blocks_cache_key is None else _key(blocks_cache_key, "blocks_cache_key",
                                                         (BlocksCacheKey,))
        addrs = list(addrs)
        cache_id = self._c().register_blocks_cache(cache_desc._kvd(), addrs, key,
                                                   self._access(remote_accessible))
        return self._hold(cache_id, cache_desc, addrs, False, True)

    def unregister_cache(self, cache_id):
        cache_id = _cache_id(cache_id, "cache_id")
        self._c().unregister_cache(cache_id)
        self._release(cache_id)

    def allocate_cache(self, cache_desc, cache_keys=()):
        """A contiguous cache from the daemon's pool."""
        keys = [_key(k, "cache_keys[]", (CacheKey,)) for k in cache_keys]
        cache_id, addrs = self._c().allocate_cache(cache_desc._kvd(), keys)
        return self._hold(cache_id, cache_desc, addrs, True, False)

    def allocate_blocks_cache(self, cache_desc, blocks_cache_key=None):
        """A blocks cache from the daemon's pool."""
        key = None if blocks_cache_key is None else _key(blocks_cache_key, "blocks_cache_key",
                                                         (BlocksCacheKey,))
        cache_id, addrs = self._c().allocate_blocks_cache(cache_desc._kvd(), key)
        return self._hold(cache_id, cache_desc, addrs, True, True)

    def _deallocate(self, cache_id):
        self._c().deallocate_cache(cache_id)
        self._release(cache_id)

    def deallocate_cache(self, cache):
        """Deallocates a contiguous cache (a Cache, or kvdist's: its id). A blocks cache is
        refused (LLM_PARAM_INVALID), as in llm_datadist: deallocate_blocks_cache() takes it."""
        cache_id = _cache_id(cache, "cache")
        held = cache if isinstance(cache, Cache) else self._caches.get(cache_id)
        if held is not None and held.is_blocks_cache:
            raise _invalid("param check failed, cache can not be blocks cache.")
        self._deallocate(cache_id)

    def deallocate_blocks_cache(self, cache):
        """Deallocates a blocks cache."""
        if not isinstance(cache, Cache):
            raise TypeError(f"cache must be a Cache, not {type(cache).__name__}")
        if not cache.is_blocks_cache:
            raise _invalid("param check failed, cache should be blocks cache.")
        self._deallocate(cache.cache_id)

    # Local copies between caches of this process: host memory both sides, copied here.

    def _held(self, cache, name, cpu_ok=False):
        """Checks that cache is one this instance holds (or, with cpu_ok, a cpu cache)."""
        if not isinstance(cache, Cache):
            raise TypeError(f"{name} must be a Cache, not {type(cache).__name__}")
        self._c()
        if cpu_ok and getattr(cache, "_cpu", False):
            return cache
        if self._caches.get(cache.cache_id) is not cache:
            raise _error(LLMStatusCode.LLM_KV_CACHE_NOT_EXIST,
                         f"{name} (cache {cache.cache_id}) is not a cache of this "
                         "instance: unregistered, deallocated, or another instance's")
        return cache

    def copy_blocks(self, cache, copy_block_info):
        """Copies, in every tensor of the blocks cache cache, block s to each block of
        copy_block_info[s] ({src block: [dst blocks]}), in the dict's order. Every index is
        checked before a byte moves."""
        self._held(cache, "cache")
        pairs = _dict_of_ints(copy_block_info, "copy_block_info", values_are_lists=True)
        if not cache.is_blocks_cache:
            raise _invalid("param check failed, cache should be blocks cache.")
        unit, n = _geometry(cache, "cache")
        for s, d in pairs:
            if not 0 <= s < n:
                raise _invalid(f"copy_block_info: src block {s} is out of range [0, {n})")
            if not 0 <= d < n:
                raise _invalid(f"copy_block_info: dst block {d} is out of range [0, {n})")
        _memmove_units(cache, unit, cache, unit, pairs, 0, unit)

    def copy_cache(self, dst, src, dst_batch_index=0, src_batch_index=0, offset=0, size=-1,
                   req_id=None):
        """Copies, in every tensor, size bytes (-1: the rest of the item) from offset of batch
        item src_batch_index of the contiguous cache src to the same offset of item
        dst_batch_index of dst. Both have num_tensors tensors; req_id is only checked."""
        self._held(dst, "dst")
        self._held(src, "src")
        dst_batch_index = _int(dst_batch_index, "dst_batch_index", 0, 2**32 - 1)
        src_batch_index = _int(src_batch_index, "src_batch_index", 0, 2**32 - 1)
        offset = _int(offset, "offset", 0, 2**64 - 1)
        size = _int(size, "size", -2**63, 2**63 - 1)
        if req_id is not None:
            _u64(req_id, "req_id")
        if src.is_blocks_cache:
            raise _invalid("param check failed, src cache can not be blocks cache.")
        if dst.is_blocks_cache:
            raise _invalid("param check failed, dst cache can not be blocks cache.")
        if size != -1 and size <= 0:
            raise _invalid(f"[copy_cache] param check failed, size ({size}) is invalid, should "
                           "be = -1 or > 0")
        if _num_tensors(src) != _num_tensors(dst):
            raise _invalid(f"num_tensors mismatches, src_tensor_num = {_num_tensors(src)}, "
                           f"dst_tensor_num = {_num_tensors(dst)}")
        src_unit, src_n = _geometry(src, "src")
        dst_unit, dst_n = _geometry(dst, "dst")
        if src_batch_index >= src_n:
            raise _invalid(f"src_batch_index ({src_batch_index}) out of range [0, {src_n})")
        if dst_batch_index >= dst_n:
            raise _invalid(f"dst_batch_index ({dst_batch_index}) out of range [0, {dst_n})")
        if offset >= src_unit or offset >= dst_unit:
            raise _invalid(f"offset {offset} out of range of a batch item, src item = "
                           f"{src_unit} bytes, dst item = {dst_unit} bytes")
        nbytes = src_unit - offset if size == -1 else size
        if nbytes > src_unit - offset or nbytes > dst_unit - offset:
            raise _invalid(f"{nbytes} bytes from offset {offset} do not fit a batch item, src "
                           f"item = {src_unit} bytes, dst item = {dst_unit} bytes")
        _memmove_units(dst, dst_unit, src, src_unit, [(src_batch_index, dst_batch_index)],
                       offset, nbytes)

    def swap_blocks(self, src_cache, dst_cache, src_to_dst):
        """Copies block s of src_cache to block src_to_dst[s] of dst_cache in every tensor:
        between a cpu cache (Cache.create_cpu_cache(), Placement.HOST) and a blocks cache of
        this instance (Placement.DEVICE), either way. Every index is checked before a byte
        moves."""
        self._held(src_cache, "src", cpu_ok=True)
        self._held(dst_cache, "dst", cpu_ok=True)
        if not src_cache.is_blocks_cache:
            raise _invalid("param check failed, src cache should be blocks cache.")
        if not dst_cache.is_blocks_cache:
            raise _invalid("param check failed, dst cache should be blocks cache.")
        pairs = _dict_of_ints(src_to_dst, "src_to_dst")
        src_unit, src_n = _geometry(src_cache, "src")
        dst_unit, dst_n = _geometry(dst_cache, "dst")
        if src_unit != dst_unit:
            raise _invalid(f"src block size:{src_unit} and dst block size:{dst_unit} must be "
                           "equal")
        if _num_tensors(src_cache) != _num_tensors(dst_cache):
            raise _invalid(f"src num_tensors:{_num_tensors(src_cache)} and dst "
                           f"num_tensors:{_num_tensors(dst_cache)} must be equal")
        for s, d in pairs:
            if not 0 <= s < src_n:
                raise _invalid(f"src_block_index:{s} must be in [0, {src_n})")
            if not 0 <= d < dst_n:
                raise _invalid(f"dst_block_index:{d} must be in [0, {dst_n})")
        placements = (src_cache.cache_desc.placement, dst_cache.cache_desc.placement)
        if placements not in ((Placement.HOST, Placement.DEVICE),
                              (Placement.DEVICE, Placement.HOST)):
            raise _invalid(f"swap src placement:{placements[0]} to dst placement:"
                           f"{placements[1]} is not support")
        _memmove_units(dst_cache, dst_unit, src_cache, src_unit, pairs, 0, src_unit)

    def remap_registered_memory(self, mem_infos):
        """llm_datadist's recovery after a device memory fault. kvdist memory is host memory
        shared with kvdistd, with no device mapping to renew: the arguments are checked as
        llm_datadist checks them, then the call fails with LLM_FEATURE_NOT_ENABLED."""
        infos = mem_infos if isinstance(mem_infos, list) else [mem_infos]
        if not isinstance(mem_infos, (list, MemInfo)):
            raise _invalid("mem_infos type only support list of MemInfo or MemInfo, but got "
                           f"{type(mem_infos)}.")
        for i, info in enumerate(infos):
            if not isinstance(info, MemInfo):
                raise _invalid(f"mem_infos[{i}] type only support MemInfo, but got "
                               f"{type(info)}.")
            if info.mem_type != Memtype.MEM_TYPE_DEVICE:
                raise _invalid("check mem_info.mem_type failed, only support "
                               f"Memtype.MEM_TYPE_DEVICE, index={i}.")
            if info.addr == 0:
                raise _invalid(f"check mem_info.addr failed, addr can not be zero, index={i}.")
            if info.size <= 0:
                raise _invalid(f"check mem_info.size failed, size must be > 0, index={i}.")
        self._c()
        raise _error(LLMStatusCode.LLM_FEATURE_NOT_ENABLED,
                     "remap_registered_memory: kvdist caches live in host memory shared "
                     "with kvdistd; there is no device memory to remap")

    def remove_cache_key(self, cache_key):
        self._c().remove_cache_key(_key(cache_key, "cache_key", (CacheKey,)))

    # Transfers: the synchronous forms return None and raise LLMException; the _async forms
    # return a CacheTask.

    def _pull_cache(self, is_async, cache_key, cache, batch_index, size, src_layer_range,
                    dst_layer_range, tensor_num_per_layer, timeout_ms, notify, remote_info):
        c = self._c()
        if isinstance(cache_key, CacheKey):
            self.check_cache_key(cache_key)
        args = (_key(cache_key, "cache_key", (CacheKey, CacheKeyByIdAndIndex)),
                _cache_id(cache, "cache"), _int(batch_index, "batch_index"), _int(size, "size"),
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                      remote_info))
        return CacheTask(c.pull_cache_async(*args)) if is_async else c.pull_cache(*args)

    def pull_cache(self, cache_key, cache, batch_index=0, size=-1, *, src_layer_range=None,
                   dst_layer_range=None, tensor_num_per_layer=2, timeout_ms=None, notify=None,
                   remote_info=None):
        """Pulls the remote item cache_key names into batch slot batch_index of cache."""
        self._pull_cache(False, cache_key, cache, batch_index, size, src_layer_range,
                         dst_layer_range, tensor_num_per_layer, timeout_ms, notify, remote_info)

    def pull_cache_async(self, cache_key, cache, batch_index=0, size=-1, *,
                         src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                         timeout_ms=None, notify=None, remote_info=None):
        return self._pull_cache(True, cache_key, cache, batch_index, size, src_layer_range,
                                dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                                remote_info)

    def _push_cache(self, is_async, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                    dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify,
                    remote_info):
        c = self._c()
        args = (_key(dst_cache_key, "dst_cache_key", (CacheKeyByIdAndIndex, CacheKey)),
                _cache_id(src_cache, "src_cache"), _int(src_batch_index, "src_batch_index"),
                _int(size, "size"),
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                      remote_info))
        return CacheTask(c.push_cache_async(*args)) if is_async else c.push_cache(*args)

    def push_cache(self, dst_cache_key, src_cache, src_batch_index=0, src_layer_range=None,
                   dst_layer_range=None, size=-1, tensor_num_per_layer=2, *, timeout_ms=None,
                   notify=None, remote_info=None):
        """Writes batch slot src_batch_index of src_cache into the item dst_cache_key names."""
        self._push_cache(False, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                         dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify,
                         remote_info)

    def push_cache_async(self, dst_cache_key, src_cache, src_batch_index=0, src_layer_range=None,
                         dst_layer_range=None, size=-1, tensor_num_per_layer=2, *,
                         timeout_ms=None, notify=None, remote_info=None):
        return self._push_cache(True, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                                dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify,
                                remote_info)

    def _blocks(self, is_async, push, key, cache, src_blocks, dst_blocks, src_layer_range,
                dst_layer_range, tensor_num_per_layer, timeout_ms, notify=None,
                remote_info=None, src_slice=None, dst_slice=None):
        c = self._c()
        if not push and isinstance(key, CacheKey):
            self.check_cache_key(key)
        args = (_key(key, "dst_cache_key" if push else "src_cache_key"),
                _cache_id(cache, "src_cache" if push else "dst_cache"), src_blocks, dst_blocks,
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                      remote_info, src_slice, dst_slice))
        if push:
            return CacheTask(c.push_blocks_async(*args)) if is_async else c.push_blocks(*args)
        return CacheTask(c.pull_blocks_async(*args)) if is_async else c.pull_blocks(*args)

    def pull_blocks(self, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(), *,
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                    timeout_ms=None, notify=None, remote_info=None, src_slice=None,
                    dst_slice=None):
        """Pulls blocks src_blocks[i] of the remote blocks cache into dst_blocks[i] of
        dst_cache; from a contiguous source (CacheKey, CacheKeyByIdAndIndex) src_blocks is empty
        and the item fills dst_blocks. Block ids: lists or integer numpy arrays. remote_info
        (kvdist's, on every transfer): the remote cluster's local_info(); when no link joins
        the two yet, the transfer links first, within the same timeout. src_slice and
        dst_slice (kvdist's, between blocks caches): (offset, length) in bytes of each source
        and destination block, None for the whole block, length 0 for the rest of it; both
        move the same number of bytes, and the caches' block sizes may then differ."""
        self._blocks(False, False, src_cache_key, dst_cache, src_blocks, dst_blocks,
                     src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                     remote_info, src_slice, dst_slice)

    def pull_blocks_async(self, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(), *,
                          src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2,
                          timeout_ms=None, notify=None, remote_info=None, src_slice=None,
                          dst_slice=None):
        return self._blocks(True, False, src_cache_key, dst_cache, src_blocks, dst_blocks,
                            src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms,
                            notify, remote_info, src_slice, dst_slice)

    def push_blocks(self, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(),
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                    timeout_ms=None, notify=None, remote_info=None, src_slice=None,
                    dst_slice=None):
        """Writes blocks src_blocks[i] of src_cache into dst_blocks[i] of the remote blocks
        cache dst_cache_key names (src_slice, dst_slice: as for pull_blocks())."""
        self._blocks(False, True, dst_cache_key, src_cache, src_blocks, dst_blocks,
                     src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify,
                     remote_info, src_slice, dst_slice)

    def push_blocks_async(self, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(),
                          src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                          timeout_ms=None, notify=None, remote_info=None, src_slice=None,
                          dst_slice=None):
        return self._blocks(True, True, dst_cache_key, src_cache, src_blocks, dst_blocks,
                            src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms,
                            notify, remote_info, src_slice, dst_slice)

    def transfer_batch(self, entries, *, timeout_ms=None):
        """Submits many transfers (BatchEntry: pulls and pushes, blocks and caches, of several
        local caches and remote clusters mixed) as one request to the daemon, and returns one
        CacheTask for all of them (kvdist's; kvd_transfer_batch()). timeout_ms is every
        entry's deadline. Each entry is checked, limited and merged as one transfer of its own
        (contiguous blocks move as one segment); an entry that fails fails alone.
        The task's wait() raises the first failure, synchronize() returns it; once it is done,
        entry_statuses() gives each entry's LLMStatusCode and failed_blocks() the local block
        ids of the entries that failed (vLLM's get_block_ids_with_load_errors()). At most 1024
        entries (LLM_PARAM_INVALID otherwise, as for an entry that libkvdist refuses before
        sending: the message names the entry). Block ids that numpy arrays hold are read where
        they lie, not copied."""
        c = self._c()
        if isinstance(entries, BatchEntry):
            raise TypeError("entries must be a sequence of BatchEntry, not one BatchEntry")
        kvd = []
        for i, e in enumerate(entries):
            if not isinstance(e, BatchEntry):
                raise TypeError(f"entries[{i}] must be a BatchEntry, not {type(e).__name__}")
            pull = e.kind in (TransferKind.PULL_BLOCKS, TransferKind.PULL_CACHE)
            if pull and isinstance(e.cache_key, CacheKey):
                self.check_cache_key(e.cache_key)
            src = _layer_range(e.src_layer_range, f"entries[{i}].src_layer_range")
            dst = _layer_range(e.dst_layer_range, f"entries[{i}].dst_layer_range")
            kvd.append((int(e.kind), e.cache_key._kvd(),
                        _cache_id(e.cache, f"entries[{i}].cache"), e.src_blocks, e.dst_blocks,
                        e.batch_index, e.size, src[0], src[1], dst[0], dst[1],
                        e.tensor_num_per_layer, _remote_info(e.remote_info), e.src_slice,
                        e.dst_slice))
        task = CacheTask(c.transfer_batch(kvd, _timeout(timeout_ms)))
        task._batch = True
        task._n_entries = len(kvd)
        return task

    def transfer_cache_async(self, src_cache, layer_synchronizer, transfer_configs,
                             src_block_indices=None, dst_block_indices=None,
                             dst_block_memory_size=None, *, notify=None):
        """Pushes src_cache layer by layer, each as soon as layer_synchronizer says it is
        computed, to every destination of transfer_configs (TransferWithCacheKeyConfig). A
        blocks cache sends blocks src_block_indices[i] to dst_block_indices[i], or, with
        neither given, every block i to block i (the whole cache). kvdist checks block sizes
        against the destination itself: dst_block_memory_size may only repeat the source's.
        llm_datadist's TransferConfig (a remote address) is refused with
        LLM_FEATURE_NOT_ENABLED. notify (kvdist's): bytes each destination gets once all its
        layers landed."""
        if not isinstance(src_cache, Cache):
            raise TypeError(f"src_cache must be a Cache, not {type(src_cache).__name__}")
        if src_cache._cpu:
            raise _invalid("src_cache is a cpu cache (Cache.create_cpu_cache()), which kvdistd "
                           "does not know: register the cache to send it")
        if not callable(getattr(layer_synchronizer, "synchronize_layer", None)):
            raise TypeError("layer_synchronizer must have synchronize_layer() (a "
                            "LayerSynchronizer)")
        configs = list(transfer_configs)
        for c in configs:
            if isinstance(c, TransferConfig):
                raise _error(LLMStatusCode.LLM_FEATURE_NOT_ENABLED,
                             "TransferConfig names the destination by memory address, "
                             "which kvdist never sends to a peer; name it by its key "
                             "with TransferWithCacheKeyConfig")
            if not isinstance(c, TransferWithCacheKeyConfig):
                raise TypeError("transfer_configs must be TransferWithCacheKeyConfig, not "
                                f"{type(c).__name__}")
        desc = src_cache.cache_desc
        if dst_block_memory_size:
            block = desc.size // desc.shape[0]
            if _int(dst_block_memory_size, "dst_block_memory_size") != block:
                raise ValueError(f"dst_block_memory_size {dst_block_memory_size} is not the "
                                 f"source's block size {block}")
        if notify is not None and not isinstance(notify, (bytes, bytearray, memoryview)):
            raise TypeError(f"notify must be bytes, not {type(notify).__name__}")
        src_blocks = () if src_block_indices is None else src_block_indices
        dst_blocks = () if dst_block_indices is None else dst_block_indices
        if src_cache.is_blocks_cache:
            if len(src_blocks) == 0 and len(dst_blocks) == 0:
                # The whole cache, as llm_datadist sends a blocks cache without indices.
                src_blocks = dst_blocks = list(range(desc.shape[0]))
            elif len(src_blocks) == 0 or len(dst_blocks) == 0:
                raise _invalid("a blocks cache sends src_block_indices[i] to "
                               "dst_block_indices[i]: give both, or neither for the whole "
                               "cache")
            elif len(src_blocks) != len(dst_blocks):
                raise _invalid(f"num_block_indices mismatches, src_num = {len(src_blocks)}, "
                               f"dst_num = {len(dst_blocks)}")
        layered = _LayeredPush(self._c(), src_cache, layer_synchronizer, configs, src_blocks,
                               dst_blocks, notify)
        layered.thread.start()
        return CacheTask(layered)


class LLMDataDist:
    """This process as one cluster of a kvdist deployment: LLMDataDist(role, cluster_id),
    then init(options) attaches it to the node's kvdistd and finalize() detaches it."""

    def __init__(self, role, cluster_id):
        self._role = LLMRole(role)
        self._cluster_id = _u64(cluster_id, "cluster_id")
        self._client = None
        self._finalized = False
        self._lock = threading.Lock()
        self._cache_manager = CacheManager(self, {})
        self.last_error = ""

    @property
    def role(self):
        return self._role

    @property
    def cluster_id(self):
        return self._cluster_id

    @property
    def cache_manager(self):
        return self._cache_manager

    @property
    def kv_cache_manager(self):
        """llm_datadist's KvCacheManager, of its mode without the cache manager: kvdist always
        runs the cache manager, so it is refused (LLM_FEATURE_NOT_ENABLED), as llm_datadist
        refuses it in that mode."""
        raise _error(LLMStatusCode.LLM_FEATURE_NOT_ENABLED,
                     "kv_cache_manager is not supported when llm.EnableCacheManager is "
                     "configured, which kvdist always is: use cache_manager")

    def _c(self):
        client = self._client
        if client is None:
            if self._finalized:
                raise _error(LLMStatusCode.LLM_ENGINE_FINALIZED, "finalize() was called")
            raise _error(LLMStatusCode.LLM_NOT_INITIALIZED, "init() was not called")
        return client

    def init(self, options):
        """Attaches to kvdistd with options: llm_datadist's (LlmConfig.generate_options())
        or libkvdist's ("device_id", "sync_kv_timeout_ms", "listen_ip_info", "local_comm_res",
        "socket_path"). Every llm_datadist option is mapped to libkvdist's, checked against
        the daemon (the pool options), accepted as a mode kvdist always has, or refused with
        LLMException naming it (LLM_PARAM_INVALID for a bad value, LLM_FEATURE_NOT_ENABLED for
        what kvdist does not do, LLM_OUT_OF_MEMORY for a pool larger than the daemon's). A
        second init() does nothing."""
        with self._lock:
            if self._finalized:
                raise _error(LLMStatusCode.LLM_ENGINE_FINALIZED, "finalize() was called")
            if self._client is not None:
                return
            opts = _config.init_options(options, _daemon_pool)
            self._client = _kvdist.Client(self._cluster_id, int(self._role), opts)
        _initialized.add(self)

    def finalize(self):
        """Detaches the cluster (the daemon drops its links and caches). Arrays from
        kvdist.empty() stay valid until they go. A second finalize() does nothing."""
        with self._lock:
            client, self._client = self._client, None
            if client is not None:
                self._finalized = True
        if client is not None:
            _initialized.discard(self)
            client.finalize()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finalize()

    def _links(self, clusters, timeout, force=None):
        infos = [c._kvd() for c in clusters]
        timeout = _int(timeout, "timeout", -2**31, 2**31 - 1)
        if force is None:
            ret, rets, detail = self._c().link_clusters(infos, timeout)
        else:
            ret, rets, detail = self._c().unlink_clusters(infos, timeout, bool(force))
        self.last_error = detail if ret != _KVD_OK else ""
        return status_code(ret), [status_code(r) for r in rets]

    def link_clusters(self, clusters, timeout=3000):
        """Links to each LLMClusterInfo; returns (status, [status per cluster]). On failure
        last_error holds the detail."""
        return self._links(clusters, timeout)

    def unlink_clusters(self, clusters, timeout=3000, force=False):
        """Tears the links down (force: only this end); returns (status, [status per
        cluster])."""
        return self._links(clusters, timeout, force)

    def check_link_status(self, remote_cluster_id):
        """Returns when a working link to remote_cluster_id exists; raises LLMException
        (LLM_NOT_YET_LINK, LLM_PEER_LOST, ...) otherwise."""
        self._c().check_link_status(_u64(remote_cluster_id, "remote_cluster_id"))

    def local_info(self):
        """This cluster as another engine names it (kvdist's; kvd_local_info()): one printable
        line with its cluster id, role, the address others link to and a hash of the protocol,
        for an engine to ship inside its request metadata. The other side passes it to
        link_remote(), or as remote_info= to a transfer or a BatchEntry. Its form is
        libkvdist's: do not take it apart."""
        return self._c().local_info()

    def link_remote(self, remote_info, timeout_ms=3000):
        """Links this cluster to the cluster remote_info (its local_info()) describes, as
        link_clusters() does with its id, role and address (kvdist's; kvd_link_remote()).
        Raises LLMException: LLM_PARAM_INVALID for a string that is no such line,
        LLM_PROTOCOL_MISMATCH for one of a kvdist that speaks another protocol, LLM_LINK_FAILED
        for a client cluster (it accepts no links), LLM_ALREADY_LINK when the link exists, else
        as link_clusters()."""
        if not isinstance(remote_info, str):
            raise TypeError(f"remote_info must be a str, not {type(remote_info).__name__}")
        self._c().link_remote(remote_info, _int(timeout_ms, "timeout_ms", -2**31, 2**31 - 1))

    def switch_role(self, role, switch_options=None):
        """Changes the role, and with "llm.listenIpInfo" the listen address."""
        role = LLMRole(role)
        self._c().switch_role(int(role), _config.switch_options(switch_options))
        self._role = role

    def link(self, comm_name, cluster_rank_info, rank_table):
        """Joins the comm domain comm_name: cluster_rank_info {cluster_id: rank_id}, the HCCL
        rank table as JSON text. Returns the comm id; the domain forms in the background
        (query_register_mem_status())."""
        if not isinstance(cluster_rank_info, dict):
            raise TypeError("cluster_rank_info must be a dict {cluster_id: rank_id}")
        ranks = [(_u64(c, "cluster id"), _int(r, "rank id", 0, 2**32 - 1))
                 for c, r in cluster_rank_info.items()]
        return self._c().link(comm_name, ranks, rank_table)

    def unlink(self, comm_id):
        self._c().unlink(_u64(comm_id, "comm_id"))

    def query_register_mem_status(self, comm_id):
        """RegisterMemStatus of the domain; for FAILED, last_error says why."""
        status, detail = self._c().query_register_mem_status(_u64(comm_id, "comm_id"))
        self.last_error = detail
        return RegisterMemStatus(status)

    def notify_fd(self):
        """A file descriptor that is readable while notifications wait (for select(), poll()
        or asyncio's loop.add_reader()); owned by this instance: do not close it."""
        return self._c().notify_fd()

    def get_notifies(self, max_count=256):
        """The notifications pushes into and pulls from this cluster carried, oldest first (at
        most max_count): a list of Notification(src_cluster_id, data) with .kind "push" or
        "pull"."""
        return [Notification(s, d, "pull" if k == 1 else "push")
                for s, d, k in self._c().get_notifies(max_count)]

    def daemon_status(self):
        """The daemon's state (what kvdistctl status --json prints) as a dict."""
        return json.loads(self._c().daemon_status())

    def daemon_metrics(self):
        """The daemon's metrics in the Prometheus text format."""
        return self._c().daemon_metrics()
