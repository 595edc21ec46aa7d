# SPDX-License-Identifier: MIT
"""llm_datadist.data_type's DataType, so that `from llm_datadist.data_type import DataType`
ports by changing the import."""

from ._types import DataType

__all__ = ["DataType"]
