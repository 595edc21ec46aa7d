# SPDX-License-Identifier: MIT
"""llm_datadist.data_type's names, so that `from llm_datadist.data_type import DataType` ports
by changing the import."""

from ._types import DataType, get_python_dtype_from_wrapper_dtype

__all__ = ["DataType", "get_python_dtype_from_wrapper_dtype"]
