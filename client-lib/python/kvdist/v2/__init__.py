# SPDX-License-Identifier: MIT
"""llm_datadist.v2's module layout: kvdist.v2.llm_types holds llm_datadist.v2.llm_types's
value types, so that `from llm_datadist.v2.llm_types import ...` ports by changing the
import."""
