"""Mutating a drawn document for the fuzzers: drop, replace or add values anywhere in it."""

from __future__ import annotations

from hypothesis import strategies as st


def paths(data, prefix=()):
    """Every path into ``data`` (mappings and lists), the root's empty path first."""
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from paths(v, prefix + (i,))


KEYS = st.text(max_size=8)
TIMES = st.integers(1, 4)


def mutate(draw, data, values, keys=KEYS, times=TIMES):
    """``data`` with ``times`` drops, replacements (by ``values``) or additions (under a key
    drawn from ``keys``), in place; returned."""
    for _ in range(draw(times)):
        found = [p for p in paths(data) if p]
        if not found:
            break
        path = draw(st.sampled_from(found))
        parent = data
        for seg in path[:-1]:
            parent = parent[seg]
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
    return data
