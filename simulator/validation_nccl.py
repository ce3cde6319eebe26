"""nccl-tests' published bus bandwidths and times against the simulated collectives: the
rows of ``nccl_busbw`` and ``nccl_times`` in ``scenarios/validation/published/rows.yaml``."""

from __future__ import annotations

from simulator import api
from simulator.collectives import bus_bandwidth, plan_collective
from simulator.engine import time_collective
from simulator.scenario.loader import PROJECT_ROOT


def nccl_rows(spec: dict, make_row) -> list[dict]:
    """nccl-tests' bus bandwidth of each row (8 GiB) against the simulated collective on the
    row's topology (``make_row`` as validation's)."""
    out = []
    for r in spec["rows"]:
        topo = api.topology_from_file(
            PROJECT_ROOT / r["topology"], r["accelerator"], r.get("set", [])
        )
        size = 8 * 2**30
        if r["op"] == "send_recv":
            model = api.network_model(topo)
            seconds, _ = time_collective(model, plan_collective("send_recv", r["pair"], size))
            busbw = bus_bandwidth("send_recv", 2, size, seconds)[1]
        else:
            table = api.collective_table(topo, r["op"], r["ranks"], r["algo"], [size])
            busbw = float(table["busbw_Bps"].iloc[0])
        out.append(
            make_row(
                "nccl-tests bus bandwidth",
                r["name"],
                r["published"],
                busbw / 1e9,
                spec["tolerance"],
                "GB/s",
            )
        )
    return out


def nccl_time_rows(spec: dict, make_row) -> list[dict]:
    """nccl-tests' out-of-place time (us) of one collective at each of a row's sizes, against
    :func:`simulator.api.collective_table` on the row's topology (the row's algorithm, a
    ring without one; the protocol NCCL's model picks by size, as the executor does;
    ``make_row`` as validation's)."""
    out = []
    for r in spec["rows"]:
        topo = api.topology_from_file(
            PROJECT_ROOT / r["topology"], r["accelerator"], r.get("set", [])
        )
        sizes = [float(size) for size, _ in r["times_us"]]
        table = api.collective_table(topo, r["op"], r["ranks"], r.get("algo"), sizes)
        misses = r.get("expected_miss", {})
        for (size, published), seconds in zip(r["times_us"], table["time_s"], strict=True):
            label = f"{size / 2**20:g} MiB" if size < 2**30 else f"{size / 2**30:g} GiB"
            row = make_row(
                "nccl-tests time", f"{r['name']}, {label}", published, seconds * 1e6,
                spec["tolerance"], "us",
            )  # fmt: skip
            row["expected_miss"] = misses.get(size, "")
            out.append(row)
    return out
