# SPDX-License-Identifier: MIT
"""vllm_ascend stub package (see stubs/__init__.py)."""
