# SPDX-License-Identifier: MIT
"""vllm.v1.core.kv_cache_manager.KVCacheBlocks: the blocks allocated to a request; the ones
without a prefix-cache hash are those the connector loads into."""


class KVCacheBlocks:
    def __init__(self, block_ids, num_hashed=0):
        self.block_ids = list(block_ids)
        self.num_hashed = num_hashed

    def get_unhashed_block_ids(self):
        return self.block_ids[self.num_hashed:]
