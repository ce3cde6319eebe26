"""results.parquet is a table for analysis: each swept quantity a number in SI units (plus its
text), the base row with the base's values, stream utilisation as columns, warnings a list;
read as it is by pandas and by DuckDB."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.sweep.runner import make_backend, run_sweep
from simulator.sweep.spec import load_spec

IN_PROCESS = make_backend("local", workers=1)

# Two DGX H100 nodes on one rail-optimised leaf group: TP 8 in a node, DP 2 over the NICs.
FABRIC_BASE = """\
name: two-nodes
model: {name: llama3-8b, layers: 2}
cluster:
  accelerator: H100-SXM
  topology: {kind: fat_tree, nodes: 2, nodes_per_leaf: 2, nic_bandwidth: 400 Gb/s}
parallelism: {tp: 8, zero: 1}
training: {global_batch: 4, micro_batch: 1, seq_len: 1024}
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fabric")
    (tmp / "base.yaml").write_text(FABRIC_BASE)
    spec = tmp / "spec.yaml"
    # written out of numeric order, and "1600 Gb/s" sorts before "200 Gb/s" as text
    spec.write_text(
        "base: base.yaml\ngrid:\n"
        "  cluster.topology.nic_bandwidth: [1600 Gb/s, 200 Gb/s, 50 Gb/s]\n"
        "  parallelism.zero: [1, 2]\n"
    )
    run_sweep(load_spec(spec), tmp / "out", IN_PROCESS, progress=False)
    return tmp / "out" / "results.parquet"


NIC = "cluster.topology.nic_bandwidth"


def test_pandas_sorts_the_nic_bandwidth_as_a_number(results):
    frame = pd.read_parquet(results)
    assert frame[NIC].dtype.kind == "f"
    ordered = frame[frame["point"] >= 0].sort_values([NIC, "parallelism.zero"])
    # 50 Gb/s = 6.25e9 B/s: SI units (bytes per second), as every bandwidth of a scenario
    assert ordered[NIC].tolist() == [6.25e9] * 2 + [25e9] * 2 + [200e9] * 2
    assert ordered[NIC + "_text"].tolist()[::2] == ["50 Gb/s", "200 Gb/s", "1600 Gb/s"]
    # a slower NIC never makes the step faster (the DP all-reduce crosses it)
    zero1 = ordered[ordered["parallelism.zero"] == 1]["step_time_s"].tolist()
    assert zero1 == sorted(zero1, reverse=True)


def test_the_base_row_carries_the_base_values(results):
    base = pd.read_parquet(results).set_index("point").loc[-1]
    assert base[NIC] == 50e9  # 400 Gb/s as the base file writes it
    assert base[NIC + "_text"] == "400 Gb/s"
    assert base["parallelism.zero"] == 1


def test_utilisation_is_one_column_per_stream_and_warnings_a_list(results):
    frame = pd.read_parquet(results)
    assert "utilisation" not in frame
    assert frame["util_compute"].between(0, 1).all()
    assert frame["util_dp"].gt(0).all()  # every point syncs gradients over the NICs
    assert all(hasattr(w, "__len__") and not isinstance(w, str) for w in frame["warnings"])


def test_duckdb_reads_and_sorts_the_file_as_it_is(results):
    import duckdb  # a test dependency (pyproject's test extra)

    rows = duckdb.sql(
        f'SELECT "{NIC}_text", "{NIC}" FROM read_parquet(\'{results}\') '
        f'WHERE point >= 0 AND "parallelism.zero" = 2 ORDER BY "{NIC}" DESC'
    ).fetchall()
    assert [r[0] for r in rows] == ["1600 Gb/s", "200 Gb/s", "50 Gb/s"]
    assert rows[0][1] == pytest.approx(200e9)
