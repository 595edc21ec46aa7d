# SPDX-License-Identifier: MIT
"""KVConnectorBase_V1 as vLLM's engine drives it: the worker binds the scheduler's metadata
before start_load_kv() and clears it after the step."""

import enum


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    pass


class KVConnectorBase_V1:
    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None
