# SPDX-License-Identifier: MIT
"""kvdist for Python: move LLM KV cache blocks between inference workers through kvdistd.

The API follows LLM-DataDist's llm_datadist package, so code written for it ports by changing
the import: LLMDataDist(role, cluster_id), init(options), link_clusters(), a cache_manager with
register_blocks_cache(), pull_blocks(), push_blocks(), transfer_cache_async(), ... Every failure
raises LLMException with its LLMStatusCode. What kvdist adds: kvdist.empty() and
kvdist.empty_torch() (arrays and tensors over memory the daemon shares, which caches must live
in), the *_async transfers, notifications (notify=, get_notifies(), notify_fd()) and
daemon_status()."""

import json as _json

from . import _kvdist
from ._datadist import CacheManager, CacheTask, LLMDataDist
from ._memory import empty, empty_torch
from ._status import LLMException, LLMStatusCode
from ._types import (BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType,
                     KvCache, LayerSynchronizer, LLMClusterInfo, LLMConfig, LLMRole, Notification,
                     Placement, RegisterMemStatus, TransferWithCacheKeyConfig)


def daemon_status(socket_path=None):
    """The state of the kvdistd at socket_path (default: $KVDIST_SOCKET, then the daemon's
    default path) as a dict, over a read-only connection."""
    return _json.loads(_kvdist.daemon_status(socket_path))


def daemon_metrics(socket_path=None):
    """The metrics of the kvdistd at socket_path in the Prometheus text format."""
    return _kvdist.daemon_metrics(socket_path)


__all__ = [
    "BlocksCacheKey", "Cache", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "CacheManager",
    "CacheTask", "DataType", "KvCache", "LLMClusterInfo", "LLMConfig", "LLMDataDist",
    "LLMException", "LLMRole", "LLMStatusCode", "LayerSynchronizer", "Notification",
    "Placement", "RegisterMemStatus", "TransferWithCacheKeyConfig", "daemon_metrics",
    "daemon_status", "empty", "empty_torch",
]
