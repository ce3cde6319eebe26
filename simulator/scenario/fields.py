"""Field types and the base model shared by the scenario's sections.

Counts are strict integers and flags strict booleans (YAML's ``true`` is no count); plain
numbers accept YAML 1.1's numeric strings (``1e-3``). Quantities with units are in
:mod:`simulator.units`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

PosInt = Annotated[int, Field(ge=1, le=10**9)]

MAX_DEVICES = 131_072
"""Largest cluster accepted (2^17 accelerators). The topology graph is built in full: 16,384
nodes x 8 = 131,072 GPUs take 1.2 GB and a 165 s run, while 8M GPUs exhausted
10 GB. It covers today's largest published training clusters (Llama 3: 24,576 GPUs; 100K-GPU
clusters)."""

MIN_BUCKET_BYTES = 1e6
"""Smallest gradient bucket accepted (1 MB). PyTorch DDP's smallest bucket is its first, 1 MiB
(``dist._DEFAULT_FIRST_BUCKET_BYTES``), its default 25 MB (``bucket_cap_mb``); a bucket of a
few bytes makes an all-reduce per few parameters, millions of tasks."""


def _real(value: Any) -> Any:
    """A plain number: YAML 1.1 reads ``1e-3`` as a string, so numeric strings are numbers;
    a boolean is not (strict mode refuses it)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


Real = Annotated[float, BeforeValidator(_real)]
"""A dimensionless number (a ratio, a probability, bytes per parameter)."""

Efficiency = Annotated[Real, Field(ge=0.1, le=1)]
"""A link's payload fraction. Real protocols carry 0.8 (NVLink) to 0.99 (InfiniBand); below 0.1
is no protocol, and tiny fractions push simulated time past the largest float."""


def fields_equal(self, other: object) -> bool:
    """Equality of two models of one type by their fields (not their private attributes:
    a scenario's YAML provenance)."""
    return self.__dict__ == other.__dict__ if type(other) is type(self) else NotImplemented


class Frozen(BaseModel):
    # strict: a count must be an int, a flag a bool; YAML's `true` is no count. A docstring
    # under a field is its description (the generated scenario reference shows it)
    model_config = ConfigDict(
        frozen=True, extra="forbid", strict=True, use_attribute_docstrings=True
    )

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # pydantic's private attributes
            super().__setattr__(name, value)
            return
        raise TypeError(
            f"{type(self).__name__}.{name} cannot be set: a scenario is frozen (validated as a "
            f"whole). Make a changed copy, validated like a file, with "
            f"api.with_overrides(scenario, {{'<section>.{name}': value}}) (e.g. "
            "{'training.global_batch': 512}), or load it with api.load(path, ['key=value'])"
        )
