# SPDX-License-Identifier: MIT
"""vllm.envs: what the connector reads."""

VLLM_NIXL_ABORT_REQUEST_TIMEOUT = 480
