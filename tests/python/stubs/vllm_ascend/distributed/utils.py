# SPDX-License-Identifier: MIT
"""vllm_ascend.distributed.utils.get_transfer_timeout_value: sync_kv_timeout in ms, from
$STUB_TRANSFER_TIMEOUT_MS (vllm_ascend derives it from HCCL's timeouts)."""

import os


def get_transfer_timeout_value():
    return int(os.environ.get("STUB_TRANSFER_TIMEOUT_MS", "30000"))
