# SPDX-License-Identifier: MIT
"""Minimal fakes of what vllm-ascend's llmdatadist_c_mgr_connector imports from vLLM, vllm_ascend,
zmq and msgspec (none is installable here), so that test_vllm_connector.py can run the connector
itself over kvdist. Put this directory first on sys.path. Only what the connector touches is
there; each fake behaves as the real one does for those uses and no further."""
