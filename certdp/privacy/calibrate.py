"""One home for the monotone searches of privacy calibration: :func:`bisect` halves a bracket
of a monotone predicate, :func:`largest` is the largest point where it holds.  Every
calibration in certdp (accountants, the Gaussian mechanism's sigma, the exact audits) searches
with these, so a search's stopping rule is written once."""

from __future__ import annotations

from typing import Callable


def bisect(below: Callable[[float], bool], lo: float, hi: float, *, iters: int | None = 60,
           close: Callable[[float, float], bool] | None = None) -> tuple[float, float]:
    """The bracket (lo, hi) after halving it ``iters`` times (None: no limit), keeping ``below``
    true at lo and false at hi for a monotone ``below`` (true below a threshold, false above);
    stops early once ``close(lo, hi)`` holds after a halving.  The caller picks the end it may
    return: lo where the result must satisfy ``below``, hi where it must not."""
    n = 0
    while iters is None or n < iters:
        mid = (lo + hi) / 2
        if below(mid):
            lo = mid
        else:
            hi = mid
        n += 1
        if close is not None and close(lo, hi):
            break
    return lo, hi


def largest(ok: Callable[[float], bool], lo: float, hi: float, iters: int = 60) -> float:
    """The largest x in [lo, hi] with ``ok(x)`` to within (hi - lo) / 2^iters, from below (the
    value returned satisfies ``ok``, and is below hi even when ``ok(hi)`` holds); ``ok`` must be
    monotone (true below a threshold, false above).  0 when ``ok(lo)`` fails."""
    if not ok(lo):
        return 0.0
    return bisect(ok, lo, hi, iters=iters)[0]
