"""Write the validation rows the documentation shows: every row of ``trainsim validate`` with
its published and simulated value, error, tolerance and reason for a miss, to
``docs/data/validation-rows.csv``, and the machine and date it was run on to
``docs/data/validation-rows.txt``. The docs site renders them (docs/hooks/reference.py); the
slow validation test checks the CSV against a fresh run, so the page cannot go stale.

    python benchmarks/validation_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine import describe  # noqa: E402  (benchmarks/machine.py, beside this script)

from simulator.validation import validate  # noqa: E402

OUT = ROOT / "docs" / "data" / "validation-rows.csv"


def main() -> None:
    line = describe()
    print(line)
    frame = validate()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT, index=False, float_format="%.10g")
    OUT.with_suffix(".txt").write_text(
        f"{line.lstrip('# ')}; `python benchmarks/validation_table.py`\n"
    )
    print(f"wrote {OUT} ({len(frame)} rows)")


if __name__ == "__main__":
    main()
