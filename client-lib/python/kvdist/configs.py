# SPDX-License-Identifier: MIT
"""llm_datadist.configs's names, so that `from llm_datadist.configs import ...` ports by
changing the import."""

from ._config import LLMConfig, LlmConfig
from ._types import LLMClusterInfo, LLMRole, trans_str_ip

__all__ = ["LLMClusterInfo", "LLMConfig", "LLMRole", "LlmConfig", "trans_str_ip"]
