# SPDX-License-Identifier: MIT
"""A sketch of a vLLM KV connector over kvdist: the worker side of KVConnectorBase_V1 for
prefill/decode disaggregation, where the decode worker pulls each request's KV blocks from the
prefill worker that computed them.

vLLM is not installable here (no PyPI), so this file is written against a minimal stand-in of
vLLM's v1 KV connector interface (vllm/distributed/kv_transfer/kv_connector/v1/base.py): the
classes KVConnectorRole, KVConnectorMetadata and KVConnectorBase_V1 below carry the method names
and signatures vLLM's engine calls on a connector's worker side, and nothing of vLLM's code.
With vLLM installed, KVDistConnector would derive from vLLM's own base class instead and add the
scheduler side (get_num_new_matched_tokens, update_state_after_alloc, build_connector_meta,
request_finished), which decides what goes into KVDistConnectorMetadata; tests/python/
test_vllm_kvdist_connector.py plays that scheduler.

How it maps onto kvdist:

- register_kv_caches(): every layer's K and V tensors (vLLM's FlashAttention layout
  [2, num_blocks, block_size, num_kv_heads, head_size]) become one kvdist blocks cache of
  2 * num_layers tensors under BlocksCacheKey(cluster_id, 0), so one block id names a block in
  every layer. The tensors must lie in kvdist memory (kvdist.empty_torch()): kvdistd moves
  blocks between shared-memory regions, not device memory.
- The prefill worker's LLMDataDist.local_info() (one line: cluster, role, address, protocol
  hash) travels in the request's kv_transfer_params to the decode side, which passes it as
  remote_info: the first load from a prefill worker links to it, no link set-up beforehand.
- start_load_kv(): every request the step loads is one BatchEntry of one
  CacheManager.transfer_batch() (one round trip to the daemon for the whole step; block ids as
  numpy arrays). A batch that is refused as a whole before it is sent (a remote_info whose
  link cannot be made, a malformed one) is split into single entries, so that only the
  requests at fault fail.
- get_finished(): a load is finished once its task says done() (its fd polls readable first:
  select() with a zero timeout over the tasks' fileno()s picks the candidates); a finished load
  reports its requests whether or not their blocks loaded, as vLLM requires.
- get_block_ids_with_load_errors(): the failed_blocks() of every finished batch: exactly the
  local blocks of the requests whose entries failed, no later than the step get_finished()
  reports them.
- Loads are asynchronous by default (vLLM schedules a request once get_finished() reported
  it), so wait_for_layer_load() has nothing to wait for. With "load_mode": "layerwise" they are
  synchronous and pipelined with the forward pass instead: start_load_kv() submits one batch
  per layer (each entry a layer range of one layer), wait_for_layer_load() waits for that
  layer's batch alone, and the failed blocks are reported in the same step, as vLLM asks of
  synchronous loads.
- In this pull design the prefill side moves nothing in save_kv_layer() / wait_for_save(): it
  keeps a finished request's blocks until the decode side read them (get_finished()'s sending
  set, once the metadata says so).
"""

import dataclasses
import enum
import select

import numpy as np

import kvdist
from kvdist import BatchEntry, BlocksCacheKey, CacheDesc, DataType, LLMDataDist, LLMRole


# --- a minimal stand-in of vLLM's v1 KV connector interface (see the docstring) ----------

class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    """What the scheduler side hands the worker side for one engine step."""


class KVConnectorBase_V1:
    """The worker-side methods vLLM's model runner calls, with their signatures."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._role = role
        self._kv_cache_config = kv_cache_config

    @property
    def role(self):
        return self._role

    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def _get_connector_metadata(self):
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self):
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches):
        return

    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError

    def wait_for_save(self):
        raise NotImplementedError

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        return set()

    def shutdown(self):
        return None


# --- the connector ------------------------------------------------------------------------

@dataclasses.dataclass
class RecvReq:
    """A request whose KV the decode worker loads: its own blocks, the prefill's blocks that
    hold the KV (same order), and the prefill worker (cluster id, local_info() line) from the
    request's kv_transfer_params."""

    local_block_ids: list
    remote_block_ids: list
    remote_cluster_id: int
    remote_info: str


@dataclasses.dataclass
class KVDistConnectorMetadata(KVConnectorMetadata):
    reqs_to_recv: dict = dataclasses.field(default_factory=dict)   # req_id -> RecvReq
    # Prefill side: requests whose blocks the decode side has read (it told the scheduler).
    reqs_read: set = dataclasses.field(default_factory=set)


_DTYPES = {"torch.float16": DataType.DT_FLOAT16, "torch.bfloat16": DataType.DT_BF16,
           "torch.float32": DataType.DT_FLOAT, "torch.uint8": DataType.DT_UINT8,
           "torch.int8": DataType.DT_INT8}


class KVDistConnector(KVConnectorBase_V1):
    """The worker side. vllm_config.kv_transfer_config: kv_role ("kv_producer" for prefill,
    "kv_consumer" for decode) and kv_connector_extra_config {"cluster_id", "socket_path",
    "listen_ip_info" (where this worker's cluster accepts links: the prefill's must),
    "timeout_ms", "load_mode" ("async", the default, or "layerwise")}."""

    MODEL_ID = 0

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        config = vllm_config.kv_transfer_config
        extra = config.kv_connector_extra_config
        self.is_producer = config.kv_role == "kv_producer"
        self.timeout_ms = int(extra.get("timeout_ms", 30000))
        self.layerwise = extra.get("load_mode", "async") == "layerwise"
        self.datadist = LLMDataDist(LLMRole.PROMPT if self.is_producer else LLMRole.DECODER,
                                    int(extra["cluster_id"]))
        options = {"ge.exec.deviceId": "0"}
        if extra.get("socket_path"):
            options["socket_path"] = extra["socket_path"]
        if extra.get("listen_ip_info"):
            options["llm.listenIpInfo"] = extra["listen_ip_info"]
        self.datadist.init(options)
        self.cache = None
        self.layers = {}          # layer name -> index
        self.loads = []           # (CacheTask, [req_id]) of start_load_kv()
        self.layer_loads = {}     # layerwise: layer index -> [(CacheTask, [req_id])]
        self.done_recving = set()  # finished loads not reported yet
        self.load_errors = set()  # failed local block ids not reported yet
        self.sending = set()      # prefill: finished requests whose blocks are kept
        self.read = set()         # prefill: requests the decode side read

    def local_info(self):
        """What the prefill side puts into a request's kv_transfer_params."""
        return self.datadist.local_info()

    def register_kv_caches(self, kv_caches):
        tensors = []
        for i, (name, kv) in enumerate(kv_caches.items()):
            if kv.dim() < 3 or kv.shape[0] != 2:
                raise ValueError(f"{name}: {tuple(kv.shape)} is not [2, num_blocks, ...]")
            self.layers[name] = i
            tensors += [kv[0], kv[1]]
        first = tensors[0]
        for t in tensors:
            if not t.is_contiguous() or t.shape != first.shape or t.dtype != first.dtype:
                raise ValueError("every layer's K and V must be contiguous and of one shape")
        num_blocks = first.shape[0]
        desc = CacheDesc(len(tensors), [num_blocks, first[0].numel()], _DTYPES[str(first.dtype)])
        self.cache = self.datadist.cache_manager.register_blocks_cache(
            desc, [t.data_ptr() for t in tensors],
            BlocksCacheKey(self.datadist.cluster_id, self.MODEL_ID), remote_accessible=True)

    def _entry(self, req, layer):
        # Layer l is tensors 2l and 2l + 1 (K and V): a layer range of one layer moves both.
        layers = None if layer is None else range(layer, layer + 1)
        return BatchEntry.pull_blocks(BlocksCacheKey(req.remote_cluster_id, self.MODEL_ID),
                                      self.cache, np.asarray(req.remote_block_ids, np.int64),
                                      np.asarray(req.local_block_ids, np.int64),
                                      src_layer_range=layers, dst_layer_range=layers,
                                      remote_info=req.remote_info)

    def _submit(self, reqs, layer, loads):
        """One batch for reqs {req_id: RecvReq} (of one layer, or all) into loads; split into
        single entries when it is refused as a whole (the entry at fault then fails alone, its
        blocks reported)."""
        cm = self.datadist.cache_manager
        ids = list(reqs)
        try:
            loads.append((cm.transfer_batch([self._entry(reqs[r], layer) for r in ids],
                                            timeout_ms=self.timeout_ms), ids))
            return
        except kvdist.LLMException:
            if len(ids) == 1:
                self.load_errors.update(int(b) for b in reqs[ids[0]].local_block_ids)
                if not self.layerwise:
                    self.done_recving.add(ids[0])
                return
        for r in ids:
            self._submit({r: reqs[r]}, layer, loads)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        self.read |= meta.reqs_read
        reqs = dict(meta.reqs_to_recv)
        limit = 1024  # entries per batch (KVD_BATCH_MAX_ENTRIES)
        ids = list(reqs)
        for i in range(0, len(ids), limit):
            chunk = {r: reqs[r] for r in ids[i:i + limit]}
            if not self.layerwise:
                self._submit(chunk, None, self.loads)
                continue
            for layer in range(len(self.layers)):
                self._submit(chunk, layer, self.layer_loads.setdefault(layer, []))

    def wait_for_layer_load(self, layer_name):
        # Asynchronous loads: a request runs only after get_finished() reported its load.
        # Layerwise: this layer's batches, and nothing of the later layers'.
        for task, _ in self.layer_loads.pop(self.layers[layer_name], []):
            task.synchronize()  # each entry's status stays with the task
            self.load_errors.update(int(b) for b in task.failed_blocks())

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        # Pull design: the decode side reads the prefill's blocks; nothing moves here.
        return

    def wait_for_save(self):
        return

    def get_finished(self, finished_req_ids):
        # Loads: the tasks whose fds poll readable may be done; done() says whether they are.
        if self.loads:
            fds = {task.fileno(): (task, ids) for task, ids in self.loads}
            ready, _, _ = select.select(list(fds), [], [], 0)
            for fd in ready:
                task, ids = fds[fd]
                if task.done():
                    self.load_errors.update(int(b) for b in task.failed_blocks())
                    self.done_recving.update(ids)
                    self.loads.remove((task, ids))
        recving, self.done_recving = self.done_recving, set()
        # Sends: a finished request's blocks stay until the decode side read them.
        sending = set()
        if self.is_producer:
            self.sending |= set(finished_req_ids)
            sending = self.sending & self.read
            self.sending -= sending
            self.read -= sending
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self):
        errors, self.load_errors = self.load_errors, set()
        return errors

    def shutdown(self):
        for task, _ in self.loads + [t for ts in self.layer_loads.values() for t in ts]:
            task.cancel()
        self.loads, self.layer_loads = [], {}
        self.datadist.finalize()
