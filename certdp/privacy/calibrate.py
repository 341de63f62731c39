"""One home for the monotone searches of privacy calibration."""

from __future__ import annotations

from typing import Callable


def largest(ok: Callable[[float], bool], lo: float, hi: float, iters: int = 60) -> float:
    """The largest x in [lo, hi] with ``ok(x)`` to within (hi - lo) / 2^iters, from below (the
    value returned satisfies ``ok``, and is below hi even when ``ok(hi)`` holds); ``ok`` must be
    monotone (true below a threshold, false above).  0 when ``ok(lo)`` fails."""
    if not ok(lo):
        return 0.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
