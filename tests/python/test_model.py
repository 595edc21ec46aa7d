# SPDX-License-Identifier: MIT
"""examples/disagg_llm.py as users run it: a small transformer served prefill-to-decode through
two kvdistd (in two network namespaces when root), layer by layer and after prefill; it checks
itself that the decoded tokens and the KV are those of a single-process run."""

import os
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "disagg_llm.py")


def test_disaggregated_model():
    pytest.importorskip("torch", reason="python3-torch is not installed")
    r = subprocess.run([sys.executable, EXAMPLE, "--kvdistd", os.environ["KVDISTD"]],
                       capture_output=True, text=True, timeout=600)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    assert r.returncode == 0
    assert "exactly the tokens of a single-process run" in r.stdout
    assert "layer by layer" in r.stdout and "after prefill" in r.stdout
