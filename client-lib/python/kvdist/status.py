# SPDX-License-Identifier: MIT
"""llm_datadist.status's names, so that `from llm_datadist.status import ...` ports by changing
the import."""

from ._status import (LLMException, LLMStatusCode, Status, code_2_status, handle_llm_status,
                      raise_if_false, raise_if_true)

__all__ = ["LLMException", "LLMStatusCode", "Status", "code_2_status", "handle_llm_status",
           "raise_if_false", "raise_if_true"]
