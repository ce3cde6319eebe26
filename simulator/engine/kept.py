"""A dict kept within a budget: the caches a network model keeps for the runs after
(routed shapes, collective plans, link orbits, water-fillings' rates) drop their oldest
entries past it (the least recently used), so a long sweep's memory stays bounded."""

from __future__ import annotations

from collections.abc import Callable


class KeptWithin(dict):
    """A dict that drops its least recently used entries while their sizes
    (``size_of(key, value)``) add up to more than ``budget``, the newest always kept: ``get``
    and ``d[k] = v`` make an entry the newest. Entries come and go by ``d[k] = v``,
    ``del d[k]``, ``pop`` and ``clear``, which keep the count; other ways to change it are
    refused."""

    def __init__(self, budget: float, size_of: Callable[[object, object], float]):
        super().__init__()
        self.budget = budget
        self.size_of = size_of
        self.nbytes = 0  # the entries' sizes added up (bytes for RoutedShapes)
        self._sizes: dict = {}

    def __setitem__(self, key, value) -> None:
        if key in self:
            self.nbytes -= self._sizes[key]
        size = self.size_of(key, value)
        super().__setitem__(key, value)
        self._sizes[key] = size
        self.nbytes += size
        while self.nbytes > self.budget and len(self) > 1:
            del self[next(iter(self))]  # the oldest

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self.nbytes -= self._sizes.pop(key)

    def pop(self, key, *default):
        if key not in self:
            return super().pop(key, *default)
        value = self[key]
        del self[key]
        return value

    def get(self, key, default=None):
        """The entry of ``key`` (``default`` if none), made the newest, the last to be
        dropped: a budget keeps what is used, not what came first."""
        if key not in self:
            return default
        value = super().pop(key)  # to the end of the order; its size stays counted
        super().__setitem__(key, value)
        return value

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.nbytes = 0

    def _refused(self, *args, **kw):
        raise TypeError(f"{type(self).__name__} changes by d[k] = v, del, pop and clear only")

    update = setdefault = popitem = __ior__ = _refused
