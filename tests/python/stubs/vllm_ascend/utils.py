# SPDX-License-Identifier: MIT
"""vllm_ascend.utils: the device type (an A2, so no super-pod list in the rank table)."""

import enum


class AscendDeviceType(enum.Enum):
    _910B = 0
    _910_93 = 1
    _310P = 2


def get_ascend_device_type():
    return AscendDeviceType._910B
