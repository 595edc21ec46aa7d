# SPDX-License-Identifier: MIT
"""The value types llm_datadist.v2.llm_types defines, kvdist's (the same objects as kvdist's
top-level names)."""

from .. import (BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask,
                KvCache, LayerSynchronizer, MemInfo, Memtype, Placement, RegisterMemStatus,
                TransferConfig, TransferWithCacheKeyConfig)

__all__ = ["BlocksCacheKey", "Cache", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex",
           "CacheTask", "KvCache", "LayerSynchronizer", "MemInfo", "Memtype", "Placement",
           "RegisterMemStatus", "TransferConfig", "TransferWithCacheKeyConfig"]
