"""A tiny base scenario and spec writer for the sweep tests (each point simulates in ~0.1 s)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

# Two layers of Llama 3 8B on one 8-GPU DGX H100 node: the smallest scenario that still has
# TP, PP and DP traffic. The HBM is the catalog's (80 GB).
TINY_BASE = """\
name: tiny
model: {name: llama3-8b, layers: 4}
cluster:
  accelerator: H100-SXM
  topology: {include: topologies/dgx-h100.yaml}
parallelism: {tp: 2, pp: 2, zero: 1}
training: {global_batch: 8, micro_batch: 1, seq_len: 1024}
"""


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write the tiny base and a spec body beside it; return the spec's path."""

    def write(body: str, base: str = TINY_BASE) -> Path:
        (tmp_path / "base.yaml").write_text(base)
        spec = tmp_path / "spec.yaml"
        spec.write_text("base: base.yaml\n" + textwrap.dedent(body))
        return spec

    return write
