# SPDX-License-Identifier: MIT
"""vLLM stub package (see stubs/__init__.py)."""
