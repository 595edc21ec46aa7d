# SPDX-License-Identifier: MIT
"""vllm.distributed.parallel_state: one process is one rank; $STUB_TP_RANK and $STUB_TP_SIZE
say which (a single node, no data or context parallelism)."""

import os
from types import SimpleNamespace


def _tp():
    return int(os.environ.get("STUB_TP_RANK", "0")), int(os.environ.get("STUB_TP_SIZE", "1"))


def get_world_group():
    rank, size = _tp()
    return SimpleNamespace(rank=rank, local_rank=rank, world_size=size)


def get_tp_group():
    rank, size = _tp()
    return SimpleNamespace(rank_in_group=rank, world_size=size)


def get_pcp_group():
    return SimpleNamespace(rank_in_group=0, world_size=1)


def get_dcp_group():
    return SimpleNamespace(rank_in_group=0, world_size=1)
