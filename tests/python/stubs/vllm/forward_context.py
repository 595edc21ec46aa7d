# SPDX-License-Identifier: MIT
"""vllm.forward_context: only a type here."""


class ForwardContext:
    pass
