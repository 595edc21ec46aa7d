# SPDX-License-Identifier: MIT
"""vllm.v1.request: a request's id, prompt, transfer parameters and status."""

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED_STOPPED = 2
    FINISHED_LENGTH_CAPPED = 3
    FINISHED_ABORTED = 4


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list
    kv_transfer_params: dict = None
    status: RequestStatus = RequestStatus.WAITING
    extra: dict = field(default_factory=dict)
