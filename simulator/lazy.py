"""Names a package exports but imports only when first read (PEP 562), so that importing the
package (the command line's ``--help``) does not load what its modules need."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: name -> the value of that name in
    ``package.<exports[name]>``, imported on first use and kept in ``namespace`` after."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
