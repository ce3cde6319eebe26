"""Unit strings -> SI floats (simulator/units.py)."""

import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.units import Bandwidth, Bytes, LinkLatency, UnitError, parse_quantity


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("400 Gb/s", "bandwidth", 50e9),  # bits: 400e9 / 8
        ("200Gbps", "bandwidth", 25e9),
        ("450 GB/s", "bandwidth", 450e9),
        ("1 GiB/s", "bandwidth", 2.0**30),
        ("80 GiB", "bytes", 80 * 2.0**30),
        ("80 GB", "bytes", 80e9),
        ("25 MB", "bytes", 25e6),
        ("989 TFLOP/s", "flops_rate", 989e12),
        ("1.979 PFLOPS", "flops_rate", 1.979e15),
        ("3.8e25 FLOP", "flops", 3.8e25),
        ("1.5 us", "time", 1.5e-6),
        ("10 ms", "time", 1e-2),
        ("2 h", "time", 7200.0),
        ("16K", "count", 16e3),
        ("1e9", "bytes", 1e9),  # YAML 1.1 loads 1e9 as a string
        (1e9, "bytes", 1e9),
        (7, "time", 7.0),
    ],
)
def test_parse(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "dimension"),
    [
        ("400 Gb", "bandwidth"),  # a size where a rate is needed
        ("80 GB/s", "bytes"),
        ("989 TFLOP", "flops_rate"),
        ("1.5 parsecs", "time"),
        ("fast", "bandwidth"),
        ("-3 GB", "bytes"),
        ("inf", "bytes"),
        (True, "bytes"),
        ([1], "bytes"),
        (float("nan"), "time"),
    ],
)
def test_rejects(text, dimension):
    with pytest.raises(UnitError):
        parse_quantity(text, dimension)


def test_schema_types_bound_what_the_simulator_can_time():
    assert TypeAdapter(Bandwidth).validate_python("400 Gb/s") == 50e9
    assert TypeAdapter(Bandwidth).validate_python("1 MB/s") == 1e6  # the floor itself
    with pytest.raises(ValidationError, match="below the 1 MB/s floor"):
        TypeAdapter(Bandwidth).validate_python("1e-300 B/s")
    with pytest.raises(ValidationError, match="above the 1 s ceiling"):
        TypeAdapter(LinkLatency).validate_python("2 s")
    with pytest.raises(ValidationError):
        TypeAdapter(Bytes).validate_python(0)  # one bound for every byte count: positive
