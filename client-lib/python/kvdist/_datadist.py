# SPDX-License-Identifier: MIT
"""LLMDataDist, its CacheManager and CacheTask: llm_datadist's classes over libkvdist."""

import json
import threading
import weakref

from . import _kvdist
from ._status import LLMException, LLMStatusCode, status_code
from ._types import (BlocksCacheKey, Cache, CacheKey, CacheKeyByIdAndIndex, LLMRole,
                     Notification, RegisterMemStatus, TransferWithCacheKeyConfig, _int, _key,
                     _layer_range, _u64)

_KVD_OK = 0
_KVD_E_FAILED = -1
_KVD_E_TIMEOUT = -3

# llm_datadist's option names and libkvdist's for them. Options that only select llm_datadist
# modes kvdist always has are accepted and dropped; every other option goes to libkvdist as it
# is, which refuses those it does not know (LLM_PARAM_INVALID naming the key).
_OPTION_NAMES = {
    "ge.exec.deviceId": "device_id",
    "llm.SyncKvCacheWaitTime": "sync_kv_timeout_ms",
    "llm.listenIpInfo": "listen_ip_info",
    "llm.LocalCommRes": "local_comm_res",
}
_OPTIONS_WITHOUT_EFFECT = {"llm.EnableCacheManager", "llm.EnableSwitchRole"}

# The instances initialized in this process, for kvdist.empty() without datadist=.
_initialized = weakref.WeakSet()


def _options(options):
    if options is None:
        return []
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, not {type(options).__name__}")
    out = []
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"option names are str, not {type(key).__name__}")
        if key in _OPTIONS_WITHOUT_EFFECT:
            continue
        out.append((_OPTION_NAMES.get(key, key), str(value)))
    return out


def _cache_id(cache, name):
    if isinstance(cache, Cache):
        return cache.cache_id
    return _u64(cache, name)


def _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify=None):
    src = _layer_range(src_layer_range, "src_layer_range")
    dst = _layer_range(dst_layer_range, "dst_layer_range")
    tpl = _int(tensor_num_per_layer, "tensor_num_per_layer", 0, 2**32 - 1)
    timeout = 0 if timeout_ms is None else _int(timeout_ms, "timeout_ms", 1, 2**31 - 1)
    if notify is not None and not isinstance(notify, (bytes, bytearray, memoryview)):
        raise TypeError(f"notify must be bytes, not {type(notify).__name__}")
    return (src[0], src[1], dst[0], dst[1], tpl, timeout, notify)


def _raise(status, detail):
    raise LLMException._from_kvd(status, detail)


class CacheTask:
    """An asynchronous transfer (the *_async methods) or a layer-by-layer push
    (transfer_cache_async()). wait() and done() are kvdist's; synchronize() and get_results()
    llm_datadist's. Timeouts are in milliseconds; None waits until the transfers' own
    deadlines."""

    def __init__(self, task=None, layered=None):
        self._task = task
        self._layered = layered

    def _results(self, timeout_ms):
        """(finished, [(kvd status or None, detail) per destination])."""
        if self._task is not None:
            status, detail = self._task.wait(-1 if timeout_ms is None else
                                             _int(timeout_ms, "timeout", 0, 2**31 - 1))
            if status == _KVD_E_TIMEOUT and not self._task.done():
                return False, [(None, detail)]
            return True, [(status, detail)]
        finished = self._layered.finished.wait(None if timeout_ms is None else timeout_ms / 1000)
        return finished, list(zip(self._layered.statuses, self._layered.details))

    def done(self):
        """Whether the transfer has its final status; does not wait."""
        if self._task is not None:
            return self._task.done()
        return self._layered.finished.is_set()

    def wait(self, timeout_ms=None):
        """Waits for the transfer; raises LLMException if it failed, or with LLM_TIMEOUT if it
        is still running after timeout_ms."""
        finished, results = self._results(timeout_ms)
        if not finished:
            raise LLMException(LLMStatusCode.LLM_TIMEOUT,
                               f"still running after {timeout_ms} ms", _KVD_E_TIMEOUT)
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
        """One LLMStatusCode per destination, None for one nothing was sent to yet."""
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
            self.finished.set()


class CacheManager:
    """The caches of an LLMDataDist and the transfers between them and other clusters'.
    Transfers take kvdist's keyword arguments timeout_ms (this call's deadline instead of
    sync_kv_timeout) and, for pushes, notify (bytes the destination gets once the push
    landed)."""

    def __init__(self, datadist):
        self._datadist = datadist

    def _c(self):
        return self._datadist._c()

    @staticmethod
    def _access(remote_accessible):
        if remote_accessible is None:
            return _kvdist.REMOTE_DEFAULT
        return _kvdist.REMOTE_YES if remote_accessible else _kvdist.REMOTE_NO

    def register_cache(self, cache_desc, addrs, cache_keys=(), remote_accessible=None):
        """A contiguous cache whose tensors start at addrs (e.g. tensor.data_ptr() of
        kvdist.empty_torch() tensors); one CacheKey per batch slot."""
        keys = [_key(k, "cache_keys[]", (CacheKey,)) for k in cache_keys]
        cache_id = self._c().register_cache(cache_desc._kvd(), list(addrs), keys,
                                            self._access(remote_accessible))
        return Cache(cache_id, cache_desc, addrs)

    def register_blocks_cache(self, cache_desc, addrs, blocks_cache_key=None,
                              remote_accessible=None):
        """A blocks cache (shape[0] blocks per tensor) whose tensors start at addrs."""
        key = None if blocks_cache_key is None else _key(blocks_cache_key, "blocks_cache_key",
                                                         (BlocksCacheKey,))
        cache_id = self._c().register_blocks_cache(cache_desc._kvd(), list(addrs), key,
                                                   self._access(remote_accessible))
        return Cache(cache_id, cache_desc, addrs)

    def unregister_cache(self, cache_id):
        self._c().unregister_cache(_cache_id(cache_id, "cache_id"))

    def allocate_cache(self, cache_desc, cache_keys=()):
        """A contiguous cache from the daemon's pool."""
        keys = [_key(k, "cache_keys[]", (CacheKey,)) for k in cache_keys]
        cache_id, addrs = self._c().allocate_cache(cache_desc._kvd(), keys)
        return Cache(cache_id, cache_desc, addrs, pool=True)

    def allocate_blocks_cache(self, cache_desc, blocks_cache_key=None):
        """A blocks cache from the daemon's pool."""
        key = None if blocks_cache_key is None else _key(blocks_cache_key, "blocks_cache_key",
                                                         (BlocksCacheKey,))
        cache_id, addrs = self._c().allocate_blocks_cache(cache_desc._kvd(), key)
        return Cache(cache_id, cache_desc, addrs, pool=True)

    def deallocate_cache(self, cache):
        self._c().deallocate_cache(_cache_id(cache, "cache"))

    def remove_cache_key(self, cache_key):
        self._c().remove_cache_key(_key(cache_key, "cache_key", (CacheKey,)))

    # Transfers: the synchronous forms return None and raise LLMException; the _async forms
    # return a CacheTask.

    def _pull_cache(self, is_async, cache_key, cache, batch_index, size, src_layer_range,
                    dst_layer_range, tensor_num_per_layer, timeout_ms):
        c = self._c()
        args = (_key(cache_key, "cache_key", (CacheKey, CacheKeyByIdAndIndex)),
                _cache_id(cache, "cache"), _int(batch_index, "batch_index"), _int(size, "size"),
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms))
        return CacheTask(c.pull_cache_async(*args)) if is_async else c.pull_cache(*args)

    def pull_cache(self, cache_key, cache, batch_index=0, size=-1, src_layer_range=None,
                   dst_layer_range=None, tensor_num_per_layer=2, *, timeout_ms=None):
        """Pulls the remote item cache_key names into batch slot batch_index of cache."""
        self._pull_cache(False, cache_key, cache, batch_index, size, src_layer_range,
                         dst_layer_range, tensor_num_per_layer, timeout_ms)

    def pull_cache_async(self, cache_key, cache, batch_index=0, size=-1, src_layer_range=None,
                         dst_layer_range=None, tensor_num_per_layer=2, *, timeout_ms=None):
        return self._pull_cache(True, cache_key, cache, batch_index, size, src_layer_range,
                                dst_layer_range, tensor_num_per_layer, timeout_ms)

    def _push_cache(self, is_async, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                    dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify):
        c = self._c()
        args = (_key(dst_cache_key, "dst_cache_key", (CacheKeyByIdAndIndex, CacheKey)),
                _cache_id(src_cache, "src_cache"), _int(src_batch_index, "src_batch_index"),
                _int(size, "size"),
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify))
        return CacheTask(c.push_cache_async(*args)) if is_async else c.push_cache(*args)

    def push_cache(self, dst_cache_key, src_cache, src_batch_index=0, src_layer_range=None,
                   dst_layer_range=None, size=-1, tensor_num_per_layer=2, *, timeout_ms=None,
                   notify=None):
        """Writes batch slot src_batch_index of src_cache into the item dst_cache_key names."""
        self._push_cache(False, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                         dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify)

    def push_cache_async(self, dst_cache_key, src_cache, src_batch_index=0, src_layer_range=None,
                         dst_layer_range=None, size=-1, tensor_num_per_layer=2, *,
                         timeout_ms=None, notify=None):
        return self._push_cache(True, dst_cache_key, src_cache, src_batch_index, src_layer_range,
                                dst_layer_range, size, tensor_num_per_layer, timeout_ms, notify)

    def _blocks(self, is_async, push, key, cache, src_blocks, dst_blocks, src_layer_range,
                dst_layer_range, tensor_num_per_layer, timeout_ms, notify=None):
        c = self._c()
        args = (_key(key, "dst_cache_key" if push else "src_cache_key"),
                _cache_id(cache, "src_cache" if push else "dst_cache"), src_blocks, dst_blocks,
                _opts(src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify))
        if push:
            return CacheTask(c.push_blocks_async(*args)) if is_async else c.push_blocks(*args)
        return CacheTask(c.pull_blocks_async(*args)) if is_async else c.pull_blocks(*args)

    def pull_blocks(self, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(),
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                    timeout_ms=None):
        """Pulls blocks src_blocks[i] of the remote blocks cache into dst_blocks[i] of
        dst_cache; from a contiguous source (CacheKey, CacheKeyByIdAndIndex) src_blocks is empty
        and the item fills dst_blocks. Block ids: lists or integer numpy arrays."""
        self._blocks(False, False, src_cache_key, dst_cache, src_blocks, dst_blocks,
                     src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms)

    def pull_blocks_async(self, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(),
                          src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                          timeout_ms=None):
        return self._blocks(True, False, src_cache_key, dst_cache, src_blocks, dst_blocks,
                            src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms)

    def push_blocks(self, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(),
                    src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                    timeout_ms=None, notify=None):
        """Writes blocks src_blocks[i] of src_cache into dst_blocks[i] of the remote blocks
        cache dst_cache_key names."""
        self._blocks(False, True, dst_cache_key, src_cache, src_blocks, dst_blocks,
                     src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms, notify)

    def push_blocks_async(self, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(),
                          src_layer_range=None, dst_layer_range=None, tensor_num_per_layer=2, *,
                          timeout_ms=None, notify=None):
        return self._blocks(True, True, dst_cache_key, src_cache, src_blocks, dst_blocks,
                            src_layer_range, dst_layer_range, tensor_num_per_layer, timeout_ms,
                            notify)

    def transfer_cache_async(self, src_cache, layer_synchronizer, transfer_configs,
                             src_block_indices=None, dst_block_indices=None,
                             dst_block_memory_size=None, *, notify=None):
        """Pushes src_cache layer by layer, each as soon as layer_synchronizer says it is
        computed, to every destination of transfer_configs (TransferWithCacheKeyConfig). A
        blocks cache sends blocks src_block_indices[i] to dst_block_indices[i]. kvdist checks
        block sizes against the destination itself: dst_block_memory_size may only repeat the
        source's. notify (kvdist's): bytes each destination gets once all its layers landed."""
        if not isinstance(src_cache, Cache):
            raise TypeError(f"src_cache must be a Cache, not {type(src_cache).__name__}")
        if not callable(getattr(layer_synchronizer, "synchronize_layer", None)):
            raise TypeError("layer_synchronizer must have synchronize_layer() (a "
                            "LayerSynchronizer)")
        configs = list(transfer_configs)
        for c in configs:
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
        layered = _LayeredPush(self._c(), src_cache, layer_synchronizer, configs,
                               () if src_block_indices is None else src_block_indices,
                               () if dst_block_indices is None else dst_block_indices, notify)
        layered.thread.start()
        return CacheTask(layered=layered)


class LLMDataDist:
    """This process as one cluster of a kvdist deployment: LLMDataDist(role, cluster_id),
    then init(options) attaches it to the node's kvdistd and finalize() detaches it."""

    def __init__(self, role, cluster_id):
        self._role = LLMRole(role)
        self._cluster_id = _u64(cluster_id, "cluster_id")
        self._client = None
        self._finalized = False
        self._lock = threading.Lock()
        self._cache_manager = CacheManager(self)
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

    def _c(self):
        client = self._client
        if client is None:
            if self._finalized:
                raise LLMException(LLMStatusCode.LLM_ENGINE_FINALIZED, "finalize() was called")
            raise LLMException(LLMStatusCode.LLM_NOT_INITIALIZED, "init() was not called")
        return client

    def init(self, options):
        """Attaches to kvdistd with options: llm_datadist's names ("ge.exec.deviceId",
        "llm.SyncKvCacheWaitTime", "llm.listenIpInfo", "llm.LocalCommRes") or libkvdist's
        ("device_id", "sync_kv_timeout_ms", "listen_ip_info", "local_comm_res",
        "socket_path"). A second init() does nothing."""
        opts = _options(options)
        with self._lock:
            if self._finalized:
                raise LLMException(LLMStatusCode.LLM_ENGINE_FINALIZED, "finalize() was called")
            if self._client is not None:
                return
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

    def switch_role(self, role, switch_options=None):
        """Changes the role, and with "llm.listenIpInfo" the listen address."""
        role = LLMRole(role)
        self._c().switch_role(int(role), _options(switch_options))
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
        """The notifications pushes into this cluster carried, oldest first (at most
        max_count): a list of Notification(src_cluster_id, data)."""
        return [Notification(*n) for n in self._c().get_notifies(max_count)]

    def daemon_status(self):
        """The daemon's state (what kvdistctl status --json prints) as a dict."""
        return json.loads(self._c().daemon_status())

    def daemon_metrics(self):
        """The daemon's metrics in the Prometheus text format."""
        return self._c().daemon_metrics()
