# SPDX-License-Identifier: MIT
"""vllm_ascend.envs: read from the environment when asked, as vllm_ascend's are."""

import os


def __getattr__(name):
    if name == "VLLM_ASCEND_LLMDD_RPC_PORT":
        return int(os.environ.get(name, "5557"))
    if name == "VLLM_ASCEND_LLMDD_RPC_IP":
        return os.environ.get(name, "0.0.0.0")
    if name == "DISAGGREGATED_PREFILL_RANK_TABLE_PATH":
        return os.environ.get(name)
    raise AttributeError(name)
