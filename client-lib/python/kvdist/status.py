# SPDX-License-Identifier: MIT
"""llm_datadist.status's names, so that `from llm_datadist.status import ...` ports by changing
the import."""

from ._status import LLMException, LLMStatusCode, Status

__all__ = ["LLMException", "LLMStatusCode", "Status"]
