# SPDX-License-Identifier: MIT
"""kvdist for Python: move LLM KV cache blocks between inference workers through kvdistd.

The API follows LLM-DataDist's llm_datadist package, so code written for it ports by changing
the import: LLMDataDist(role, cluster_id), init(options), link_clusters(), a cache_manager with
register_blocks_cache(), pull_blocks(), push_blocks(), transfer_cache_async(), ... Every failure
raises LLMException with its LLMStatusCode. What kvdist adds: kvdist.empty() and
kvdist.empty_torch() (arrays and tensors over memory the daemon shares, which caches must live
in), the *_async transfers, notifications (notify=, get_notifies(), notify_fd()) and
daemon_status(); and API 2 for engines: CacheManager.transfer_batch() (BatchEntry, a status
per entry, the failed blocks), LLMDataDist.local_info() and link_remote() (remote_info= on
transfers links first)."""

import json as _json

from . import _kvdist
from ._config import LLMConfig, LlmConfig
from ._datadist import CacheManager, CacheTask, LLMDataDist
from ._memory import empty, empty_torch, register_memory, unregister_memory
from ._status import LLMException, LLMStatusCode, Status
from ._types import (BatchEntry, BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex,
                     DataType, KvCache, LayerSynchronizer, LLMClusterInfo, LLMRole, MemInfo,
                     Memtype, Notification, Placement, RegisterMemStatus, TransferConfig,
                     TransferKind, TransferWithCacheKeyConfig)
from . import configs, data_type, status  # llm_datadist's modules of the same names


def daemon_status(socket_path=None):
    """The state of the kvdistd at socket_path (default: $KVDIST_SOCKET, then the daemon's
    default path) as a dict, over a read-only connection."""
    return _json.loads(_kvdist.daemon_status(socket_path))


def daemon_metrics(socket_path=None):
    """The metrics of the kvdistd at socket_path in the Prometheus text format."""
    return _kvdist.daemon_metrics(socket_path)


# llm_datadist's list of its v2 API names; every one is here.
v2_list = [
    "LLMClusterInfo", "LLMStatusCode", "LLMException", "LLMRole", "LlmConfig", "LLMConfig",
    "DataType", "Status", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Cache",
    "BlocksCacheKey", "LLMDataDist", "Placement", "RegisterMemStatus", "LayerSynchronizer",
    "TransferConfig", "CacheTask", "TransferWithCacheKeyConfig", "Memtype", "MemInfo",
]

__all__ = v2_list + [
    "BatchEntry", "CacheManager", "Notification", "TransferKind", "daemon_metrics",
    "daemon_status", "empty", "empty_torch", "register_memory", "unregister_memory",
]
