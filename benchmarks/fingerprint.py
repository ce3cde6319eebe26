"""Every example's and validation row's numbers, to the bit: the check that a restructuring
changed no result.

    python benchmarks/fingerprint.py > before.json   # on the old code
    python benchmarks/fingerprint.py > after.json    # on the new code
    diff before.json after.json                      # empty when nothing moved

Each example scenario is run as shipped (``api.run``) and its headline metrics written with
``repr`` of every float (17 significant digits); the validation table's simulated column
likewise. Logs go to stderr, the fingerprint to stdout.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator import api  # noqa: E402
from simulator.validation import validate  # noqa: E402


def exact(value):
    """Floats as their shortest exact text (``repr``), recursively; NaN as "nan"."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return value


def main() -> None:
    from machine import describe

    print(describe(), file=sys.stderr)
    out = {"examples": {}, "validation": {}}
    for path in sorted((ROOT / "scenarios" / "examples").glob("*.yaml")):
        print(f"run {path.name}", file=sys.stderr)
        result = api.run(api.load(path))
        out["examples"][path.name] = exact(result.summary)
    frame = validate()
    for row in frame.itertuples(index=False):
        out["validation"][f"{row.group} | {row.row}"] = exact(float(row.simulated))
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
