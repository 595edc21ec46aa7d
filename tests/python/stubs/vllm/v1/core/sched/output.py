# SPDX-License-Identifier: MIT
"""vllm.v1.core.sched.output: only a type here."""


class SchedulerOutput:
    pass
