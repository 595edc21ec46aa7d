# SPDX-License-Identifier: MIT
"""vllm.v1.kv_cache_interface: only a type here."""


class KVCacheConfig:
    pass
