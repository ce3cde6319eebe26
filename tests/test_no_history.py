"""User-facing text states current facts: no README, docs page, comment, benchmark result or
shipped scenario narrates the project's development (work sessions, rounds, internal issue
numbers). History lives in the git log and CHANGELOG.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = re.compile(
    r"\bsessions? \d+|\b(?:this|that|earlier|last|previous) session\b"
    r"|\b(?:since|for|in) (?:the last|this) round\b|\bsince session\b"
    r"|(?<!nccl-tests )(?<!nccl )\bissue \d+\b",
    re.IGNORECASE,
)
TEXTS = [
    "README.md",
    "docs/**/*.md",
    "benchmarks/*.md",
    "benchmarks/*.py",
    "simulator/**/*.py",
    "scenarios/**/*.yaml",
    "topologies/*.yaml",
    "reports/README.md",
]


def test_no_text_narrates_the_development():
    found = []
    for pattern in TEXTS:
        for path in sorted(ROOT.glob(pattern)):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if MARKERS.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_markers_are_found():
    """The pattern catches what it is for, and lets external issue references through."""
    assert MARKERS.search("measured in session 18's quiet hours")
    assert MARKERS.search("since session 20 (lists per kind)")
    assert MARKERS.search("(issue 14, F08)")
    assert MARKERS.search("what changed since the last round")
    assert not MARKERS.search("NCCL maintainer in nccl-tests issue 149")
    assert not MARKERS.search("the search's one Ray session ended with it")
