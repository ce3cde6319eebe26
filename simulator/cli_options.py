"""Checks of command-line options that need no simulation: output paths (checked before any
work, so a bad ``--out`` fails in a second, not after the run) and option values.

Each raises :class:`OptionError`, whose message names the option; the CLI prints it and exits 2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


class OptionError(ValueError):
    """A bad command-line option; the message starts with the option's name."""


def _writable_ancestor(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` must be a folder we may write in."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OptionError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(f"{option} {path}: cannot write in {parent}")


def check_out_dir(path: Path | None, option: str = "--out") -> None:
    """Refuse, before any work, a folder that cannot be created or written."""
    if path is None:
        return
    if path.exists():
        if not path.is_dir():
            raise OptionError(f"{option} {path}: exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise OptionError(f"{option} {path}: cannot write in it")
        return
    _writable_ancestor(path, option)


def image_formats() -> list[str]:
    """File extensions matplotlib can write (png, svg, pdf, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_out_file(path: Path | None, option: str) -> None:
    """Refuse, before any work, an image path whose folder is missing or not writable, or
    whose extension names no picture format matplotlib writes (none: PNG)."""
    if path is None:
        return
    if path.is_dir():
        raise OptionError(
            f"{option} {path}: is a folder; give a file name such as {path / 'out.png'}"
        )
    ext = path.suffix[1:].lower()
    if ext and ext not in image_formats():
        raise OptionError(
            f"{option} {path}: cannot draw a .{ext} picture; use one of "
            f"{', '.join('.' + f for f in image_formats())}"
        )
    if not path.parent.exists():
        raise OptionError(f"{option} {path}: folder {path.parent} does not exist")
    _writable_ancestor(path, option)
    if path.exists() and not os.access(path, os.W_OK):
        raise OptionError(f"{option} {path}: cannot overwrite it")


def safe_name(name: str) -> str:
    """``name`` as one folder name (for default output folders named after a spec or
    scenario): anything but letters, digits, ``.``, ``_`` and ``-`` becomes ``-``, and no
    leading dots (so ``../x`` cannot leave the parent folder)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).lstrip(".-")
    return cleaned or "unnamed"


def parse_ranks(text: str) -> list[int]:
    """``"0,4"`` -> ``[0, 4]``."""
    try:
        return [int(r) for r in text.split(",")]
    except ValueError:
        raise OptionError(f"--ranks {text}: want comma-separated rank numbers, e.g. 0,4") from None


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` of simulated time; bare numbers are seconds, or write units (``5ms``)."""
    if text is None:
        return None
    from simulator.units import UnitError, parse_quantity  # pydantic: not on --help's path

    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise UnitError("want START:END")
        start, end = (parse_quantity(p, "time") for p in parts)
    except UnitError as exc:
        raise OptionError(
            f"--window {text}: {exc} (START:END in seconds, or with units: 100ms:200ms)"
        ) from None
    if end <= start:
        raise OptionError(f"--window {text}: END must be after START")
    return start, end


LINKS_DEFAULT_MAX_GPUS = 4096  # `run --out` tracks link loads by default up to this many GPUs


def track_links(num_gpus: int, writing: bool, links: bool | None) -> tuple[bool, str]:
    """Whether ``run`` tracks link loads (only when ``writing`` a report): as ``--links`` /
    ``--no-links`` say, by default up to :data:`LINKS_DEFAULT_MAX_GPUS` GPUs (tracking slows
    a 16K-GPU step about 2x); and a note for stderr when the default leaves them out."""
    if not writing:
        return False, ""
    if links is not None:
        return links, ""
    if num_gpus > LINKS_DEFAULT_MAX_GPUS:
        return False, (
            f"link loads are not tracked above {LINKS_DEFAULT_MAX_GPUS:,} GPUs: --links adds "
            "links.parquet and links.png"
        )
    return True, ""
