"""The README's Python example runs as printed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    for code in blocks:
        namespace: dict = {}
        exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["metrics"].step_time_s > 0
