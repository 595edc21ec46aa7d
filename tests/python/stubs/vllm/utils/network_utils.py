# SPDX-License-Identifier: MIT
"""vllm.utils.network_utils.get_ip: this node's name in the rank table's server_id, from
$STUB_LOCAL_IP (or `ip`, which a test that plays two nodes' schedulers in one process sets)."""

import os

ip = None


def get_ip():
    return ip if ip is not None else os.environ["STUB_LOCAL_IP"]
