"""The line every benchmark prints first: the machine and the date its figures come from."""

from __future__ import annotations

import datetime
import os
import platform


def describe() -> str:
    """``# x86_64, 2 cores, Python 3.11.7, 2026-12-07 12:39``."""
    return (
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}"
    )
