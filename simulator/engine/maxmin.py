"""Max-min fair rates of flow classes sharing links (progressive filling / water-filling).

A flow class stands for ``n(e)`` identical copies on link ``e`` (docs/design.md, Scale): its
copies all get the class's rate ``r``, and a link's load is the sum over classes of
``n(e) r``. Rates rise together until a link saturates; the classes crossing it freeze at its
fair share; the rest continue. The result is the unique max-min fair allocation.

>>> import numpy as np
>>> # two flows share link 0 (10 B/s); flow 1 also crosses link 1 (4 B/s)
>>> max_min_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), np.ones(3), 2,
...               np.array([10.0, 4.0])).tolist()
[6.0, 4.0]
"""

from __future__ import annotations

import numpy as np

_REL = 1e-12
_INF = float("inf")


def max_min_rates(
    entry_flow: np.ndarray,
    entry_link: np.ndarray,
    entry_count: np.ndarray,
    n_flows: int,
    capacity: np.ndarray,
) -> np.ndarray:
    """Rates (B/s) of ``n_flows`` classes; entry ``i`` says class ``entry_flow[i]`` puts
    ``entry_count[i]`` copies on link ``entry_link[i]``. A class with no entries gets ``inf``.
    """
    rates = np.full(n_flows, np.inf)
    if entry_flow.size == 0:
        return rates
    # Work over the links the entries use, renumbered 0..n-1, not every link of the topology
    # (200K on a 24K-GPU cluster): the same sums in the same order, so the same rates. Marked
    # in a boolean array (a bincount of the entries would sum counts nobody reads).
    crossed = np.zeros(capacity.size, dtype=bool)
    crossed[entry_link] = True
    links = np.flatnonzero(crossed)
    local = np.empty(capacity.size, dtype=np.intp)
    local[links] = np.arange(links.size)
    entry_link = local[entry_link]
    remaining = capacity[links].astype(float)
    frozen = np.zeros(n_flows, dtype=bool)
    live = None  # every entry, until the first classes freeze (no masking needed)
    n_links = links.size
    while True:
        if live is None:
            weight = np.bincount(entry_link, weights=entry_count, minlength=n_links)
        else:
            weight = np.bincount(entry_link[live], weights=entry_count[live], minlength=n_links)
        if live is None and weight.min() > 0:  # the first round: every link is used
            share = np.maximum(remaining, 0.0) / weight
        else:
            used = weight > 0
            share = np.full(n_links, np.inf)
            share[used] = np.maximum(remaining[used], 0.0) / weight[used]
        level = share.min()
        at_level = (share <= level * (1 + _REL))[entry_link]
        # the classes crossing a bottleneck, as a mask (np.unique would sort every entry)
        hit = np.zeros(n_flows, dtype=bool)
        hit[entry_flow[at_level if live is None else live & at_level]] = True
        rates[hit] = level
        frozen |= hit
        newly = frozen[entry_flow] if live is None else live & frozen[entry_flow]
        live = ~newly if live is None else live & ~newly
        if not live.any():
            return rates  # nothing left to share what remains
        np.subtract.at(remaining, entry_link[newly], entry_count[newly] * level)


def max_min_rates_segments(
    lengths: np.ndarray,
    entry_link: np.ndarray,
    entry_count: np.ndarray,
    capacity: np.ndarray,
    work: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """:func:`max_min_rates` for entries grouped by class: class ``k``'s entries are the
    ``lengths[k]`` (> 0) after those of classes ``0 .. k-1``, as a flow network lists them.

    Each class's bottleneck share is a ``np.minimum.reduceat`` over its run of entries and
    frozen classes are dropped from the arrays, rather than masks over every entry each
    round; the links' weights are summed, and what remains subtracted, in the same entry
    order as :func:`max_min_rates`, so the rates are the same to the last bit (a test checks).
    ``work``: a boolean array of ``capacity.size`` all False and an integer array as large,
    reused across calls (left all False) to save allocating them. With entries at least
    ``1 / DENSE_AT`` of the links, the first round is tried over the link ids as they are
    (:func:`_one_round_level`): when every class freezes there, that is the answer.
    """
    n_flows = lengths.size
    rates = np.full(n_flows, np.inf)
    if entry_link.size == 0:
        return rates
    if entry_link.size * DENSE_AT >= capacity.size:
        level = _one_round_level(lengths, entry_link, entry_count, capacity)
        if level is not None:
            rates[:] = level
            return rates
    if work is None:
        work = (np.zeros(capacity.size, dtype=bool), np.empty(capacity.size, dtype=np.intp))
    crossed, local = work
    crossed[entry_link] = True
    links = np.flatnonzero(crossed)
    crossed[links] = False
    local[links] = np.arange(links.size)
    link, count = local[entry_link], entry_count
    remaining = capacity[links].astype(float)
    n_links = links.size
    flows = np.arange(n_flows)  # the classes still rising, in order
    first = True
    while True:
        weight = np.bincount(link, weights=count, minlength=n_links)
        if first and weight.min() > 0:  # every link is used
            share = np.maximum(remaining, 0.0) / weight
        else:
            used = weight > 0
            share = np.full(n_links, np.inf)
            share[used] = np.maximum(remaining[used], 0.0) / weight[used]
        first = False
        level = share.min()
        bottleneck = np.minimum.reduceat(share[link], np.cumsum(lengths) - lengths)
        hit = bottleneck <= level * (1 + _REL)
        rates[flows[hit]] = level
        if hit.all():
            return rates  # nothing left to share what remains
        newly = np.repeat(hit, lengths)
        np.subtract.at(remaining, link[newly], count[newly] * level)
        rising = ~newly
        link, count = link[rising], count[rising]
        flows, lengths = flows[~hit], lengths[~hit]


# Entries per link id at which a water-filling tries its first round over every link id
# (:func:`_one_round_level`) before numbering the links it uses: a 1,024-rank tree's
# copies put 48K entries on 131K links and every class freezes in that round.
DENSE_AT = 8


def _one_round_level(
    lengths: np.ndarray, entry_link: np.ndarray, entry_count: np.ndarray, capacity: np.ndarray
) -> float | None:
    """The level at which every class freezes in the first round of
    :func:`max_min_rates_segments`, found over the link ids as they are (no renumbering):
    the same weights (a bincount in entry order), the same shares (each entry's link's
    capacity over its weight: the same division of the same numbers), so the same level and
    bottlenecks. None when some class does not freeze there, or a link has no weight:
    then the rounds are done in full."""
    weight = np.bincount(entry_link, weights=entry_count, minlength=capacity.size)[entry_link]
    if not weight.min() > 0:
        return None
    share = np.maximum(capacity[entry_link], 0.0) / weight
    level = share.min()
    bottleneck = np.minimum.reduceat(share, np.cumsum(lengths) - lengths)
    return level if (bottleneck <= level * (1 + _REL)).all() else None


def max_min_rates_lists(
    links: list[list[int]], counts: list[list[float]], capacity: np.ndarray
) -> list[float]:
    """:func:`max_min_rates` in plain Python, for the small sets that most re-ratings see
    (numpy's per-call overhead dominates below a few hundred entries).

    Class ``k`` puts ``counts[k][j]`` copies on link ``links[k][j]``. Same arithmetic in the
    same order as :func:`max_min_rates` (weights summed in entry order, capacity used in
    entry order), so the two agree to the last bit on the same input.
    """
    n = len(links)
    rates = [_INF] * n
    remaining: dict[int, float] = {}
    for ls in links:
        for e in ls:
            if e not in remaining:
                remaining[e] = float(capacity[e])
    live = [k for k in range(n) if links[k]]
    while live:
        weight: dict[int, float] = {}
        for k in live:
            for e, c in zip(links[k], counts[k], strict=True):
                weight[e] = weight.get(e, 0.0) + c
        shares = {e: max(remaining[e], 0.0) / w for e, w in weight.items() if w > 0}
        level = min(shares.values(), default=_INF)
        cut = level * (1 + _REL)
        hit = [k for k in live if any(shares.get(e, _INF) <= cut for e in links[k])]
        for k in hit:
            rates[k] = level
            for e, c in zip(links[k], counts[k], strict=True):
                remaining[e] -= c * level
        frozen = set(hit)
        live = [k for k in live if k not in frozen]
    return rates
