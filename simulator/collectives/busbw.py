"""Bus bandwidth as nccl-tests reports it (doc/PERFORMANCE.md): busbw = algbw x factor(n).

algbw = S / t with S the buffer of docs/design.md's convention; the factor makes busbw comparable
to the hardware's link bandwidth whatever the rank count.
"""

from __future__ import annotations

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


def bus_bandwidth(kind: str, n: int, size_bytes: float, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in B/s for a collective of ``size_bytes`` over ``n`` ranks."""
    algbw = size_bytes / seconds
    return algbw, algbw * BUSBW_FACTORS[kind](n)
