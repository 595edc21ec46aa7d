# SPDX-License-Identifier: MIT
"""vllm.config: the fields of VllmConfig and KVTransferConfig the connector reads."""

from dataclasses import dataclass, field


@dataclass
class KVTransferConfig:
    kv_role: str
    engine_id: str = "engine"
    kv_connector: str = "LLMDataDistCMgrConnector"


@dataclass
class CacheConfig:
    block_size: int = 16


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_size_local: int = 1
    data_parallel_rank: int = 0
    data_parallel_rank_local: int = 0
    data_parallel_external_lb: bool = False


@dataclass
class VllmConfig:
    kv_transfer_config: KVTransferConfig
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
