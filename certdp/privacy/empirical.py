"""A statistically valid lower bound on epsilon from samples of two release distributions.

If a mechanism M is (eps, delta)-DP then for every event E and neighbours D, D'

    P[M(D) in E] <= e^eps P[M(D') in E] + delta,   i.e.   eps >= ln((p - delta) / q)

with p = P[M(D) in E], q = P[M(D') in E].  From n_a draws of M(D) and n_b draws of M(D') the
Clopper-Pearson interval gives p >= p_lo and q <= q_hi, each with probability >= 1 - alpha';
then ln((p_lo - delta) / q_hi) is a lower bound on eps with probability >= 1 - 2 alpha' (union
bound over the two intervals).  Both directions (D over D' and D' over D) are events of the same
kind, so the roles of the samples may be swapped.

Events are sets of a scalar statistic of the output (for a vector release pass a scalar
projection chosen in advance):

* ``events="thresholds"``: the one-sided sets {y >= t} and {y <= t};
* ``events="intervals"`` (default): closed intervals [a, b] with a, b on a grid (one end may be
  -inf or +inf, so every threshold event is one too, and a = b is an atom of a clipped release)
  and their complements {y < a} or {y > b} (both tails at once).  The optimal event of two
  one-dimensional releases is {L > tau} for the log-ratio L of their densities, which for the
  Cauchy and Laplace pairs of :mod:`certdp.privacy.loss` is an interval, a complement of one, or
  a threshold set; so this family contains (up to the grid) the best event of every such pair.

Two ways to choose the event without invalidating the bound:

* ``select="fixed"``: the thresholds are given (fixed before sampling); every (threshold, side,
  direction) is tested and alpha is split over all of them by a union bound;
* ``select="split"`` (default): the first half of each sample alone picks the single event and
  direction with the largest bound computed on that half (at the same confidence), from a grid of
  quantiles of the pooled first halves (uniform in probability, plus log-spaced tail quantiles,
  plus the sample extremes and any ``hints`` fixed without looking at the draws).  Only the second
  half is used for the reported bound, with alpha split over its two one-sided intervals.  The
  event is a function of the first half only, and the halves are independent, so conditionally
  on it the second half's counts are binomial: the bound holds at confidence 1 - alpha whatever
  was selected.

The result is a lower bound at confidence 1 - alpha: if it exceeds the claimed epsilon, the
mechanism (or its implementation) is not (eps, delta)-DP, with that confidence.  A caller that
reports m such held-out tests and concludes from their maximum passes ``alpha / m`` to each
(Bonferroni).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from certdp.privacy.noise import SAMPLERS

EVENT_KINDS = ("thresholds", "intervals")
#: tail probabilities added to the uniform quantile grid of the selection half (both tails):
#: the large log-ratios of a heavy-tailed pair with different scales live far out
TAIL_PROBABILITIES = np.geomspace(1e-6, 2e-2, 12)


def clopper_pearson(k, n, alpha: float):
    """One-sided Clopper-Pearson bounds (lower, upper) for a binomial proportion k/n: each holds
    with probability >= 1 - alpha (exact, from the beta distribution)."""
    from scipy.stats import beta as beta_dist
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, beta_dist.ppf(alpha, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta_dist.ppf(1 - alpha, k + 1, n - k), 1.0)
    return lo, hi


@dataclass(frozen=True)
class EpsilonLowerBound:
    """``epsilon``: the lower bound (0 when no event gives evidence); ``event``: a description
    such as 'M(D) >= t', 'M(D) in [a, b]' or "M(D') outside [a, b]" (the sample named first is the
    one whose probability is bounded below); ``lo``, ``hi``: the interval's ends (-inf / +inf for
    a threshold), ``inside``: whether the event is the interval or its complement; ``threshold``:
    the finite end of a threshold event (NaN for a two-ended event); counts and sizes of the
    sample used for the bound."""

    epsilon: float
    event: str
    threshold: float
    k_a: int
    n_a: int
    k_b: int
    n_b: int
    alpha: float
    delta: float
    select: str
    lo: float = -math.inf
    hi: float = math.inf
    inside: bool = True


def _counts(s: np.ndarray, t: np.ndarray):
    """#{s >= t} and #{s <= t} for every threshold t (sorted sample, vectorised)."""
    srt = np.sort(s)
    ge = len(srt) - np.searchsorted(srt, t, side="left")
    le = np.searchsorted(srt, t, side="right")
    return ge, le


def _bound(ka, na, kb, nb, alpha_each, delta):
    p_lo, _ = clopper_pearson(ka, na, alpha_each)
    _, q_hi = clopper_pearson(kb, nb, alpha_each)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p_lo - delta > 0, np.log((p_lo - delta) / q_hi), -np.inf)


def _describe(first: str, lo: float, hi: float, inside: bool) -> tuple[str, float]:
    """The event's text and its threshold (NaN for a two-ended event)."""
    if inside:
        if math.isinf(lo):
            return f"{first} <= t", hi
        if math.isinf(hi):
            return f"{first} >= t", lo
        return f"{first} in [a, b]", math.nan
    if math.isinf(lo):
        return f"{first} > t", hi
    if math.isinf(hi):
        return f"{first} < t", lo
    return f"{first} outside [a, b]", math.nan


def _inside(s: np.ndarray, lo: float, hi: float) -> int:
    return int(((s >= lo) & (s <= hi)).sum())


def _grid(pooled: np.ndarray, n_thresholds: int, hints) -> np.ndarray:
    """Candidate interval ends: quantiles of the pooled selection half (uniform in probability
    and log-spaced in both tails), its extremes, the ``hints`` inside its range, and -inf, +inf."""
    p = np.unique(np.concatenate([np.linspace(0, 1, n_thresholds), TAIL_PROBABILITIES, 1 - TAIL_PROBABILITIES]))
    g = [np.quantile(pooled, p), [pooled.min(), pooled.max()]]
    if hints is not None:
        h = np.asarray(hints, dtype=np.float64).ravel()
        g.append(h[np.isfinite(h) & (h >= pooled.min()) & (h <= pooled.max())])
    return np.concatenate([[-np.inf], np.unique(np.concatenate(g)), [np.inf]])


def _wilson(k, n, z):
    """Wilson score bounds (lower, upper) for k/n at normal quantile z (the selection score: a
    close, cheap stand-in for Clopper-Pearson, vectorised over many thousands of events)."""
    k = np.asarray(k, dtype=np.float64)
    p = k / n
    c = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    mid = p + z * z / (2 * n)
    return np.maximum((mid - c) / (1 + z * z / n), 0.0), np.minimum((mid + c) / (1 + z * z / n), 1.0)


def _score(ka, na, kb, nb, z, delta):
    p_lo, _ = _wilson(ka, na, z)
    _, q_hi = _wilson(kb, nb, z)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((p_lo - delta > 0) & (q_hi > 0), np.log((p_lo - delta) / q_hi), -np.inf)


def _select_interval(a1, b1, grid, alpha_each, delta):
    """The (lo, hi, inside, a-over-b) event with the largest score on the selection halves."""
    from scipy.stats import norm
    sa, sb = np.sort(a1), np.sort(b1)
    na, nb = len(sa), len(sb)
    i, j = np.triu_indices(len(grid))
    keep = ~((i == 0) & (j == len(grid) - 1))           # the whole line (and its empty complement)
    i, j = i[keep], j[keep]
    ina = np.searchsorted(sa, grid[j], side="right") - np.searchsorted(sa, grid[i], side="left")
    inb = np.searchsorted(sb, grid[j], side="right") - np.searchsorted(sb, grid[i], side="left")
    # the score is the bound at a Bonferroni level over every candidate event: a conservative
    # score keeps a narrow event that looks good by chance on the first half from beating a
    # broad one whose evidence holds up on the second (the winner's curse)
    z = float(norm.isf(alpha_each / (4 * len(i))))
    best = (-np.inf, 0, True, True)
    for inside in (True, False):
        ka, kb = (ina, inb) if inside else (na - ina, nb - inb)
        for a_first in (True, False):
            e = _score(ka, na, kb, nb, z, delta) if a_first else _score(kb, nb, ka, na, z, delta)
            m = int(np.argmax(e))
            if e[m] > best[0]:
                best = (float(e[m]), m, inside, a_first)
    _, m, inside, a_first = best
    return float(grid[i[m]]), float(grid[j[m]]), inside, a_first


def epsilon_lower_bound(a, b, *, delta: float = 0.0, alpha: float = 0.05, thresholds=None,
                        select: str = "split", n_thresholds: int = 200, events: str = "intervals",
                        hints=None) -> EpsilonLowerBound:
    """Lower bound on epsilon at confidence 1 - ``alpha`` from scalar samples ``a`` ~ M(D) and
    ``b`` ~ M(D') (both directions are tested).  ``thresholds``: the events' thresholds for
    ``select="fixed"`` (required there); for ``select="split"`` the candidate ends are
    ``n_thresholds`` quantiles of the pooled selection half plus tail quantiles, the sample
    extremes (so atoms at the ends of a clipped output range are events too) and ``hints``
    (points fixed before sampling, e.g. where the exact log-ratio of the two releases peaks).
    ``events``: ``intervals`` (intervals, their complements and thresholds) or ``thresholds``
    (one-sided events only)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if len(a) < 2 or len(b) < 2:
        raise ValueError("need at least two samples of each distribution")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1) (got {alpha})")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1) (got {delta})")
    if events not in EVENT_KINDS:
        raise ValueError(f"unknown events {events!r}; allowed: {', '.join(EVENT_KINDS)}")
    if select == "fixed":
        if thresholds is None:
            raise ValueError("select='fixed' needs the thresholds, chosen before sampling")
        t = np.asarray(thresholds, dtype=np.float64).ravel()
        ga, la = _counts(a, t)
        gb, lb = _counts(b, t)
        m = 4 * len(t)                                  # (>=, <=) x (a over b, b over a)
        each = alpha / (2 * m)
        cands = [("M(D) >= t", ga, len(a), gb, len(b)), ("M(D) <= t", la, len(a), lb, len(b)),
                 ("M(D') >= t", gb, len(b), ga, len(a)), ("M(D') <= t", lb, len(b), la, len(a))]
        best = None
        for name, ka, na, kb, nb in cands:
            e = _bound(ka, na, kb, nb, each, delta)
            j = int(np.argmax(e))
            if best is None or e[j] > best[0]:
                best = (float(e[j]), name, float(t[j]), int(ka[j]), na, int(kb[j]), nb)
        eps, name, thr, ka, na, kb, nb = best
        lo, hi = (thr, math.inf) if ">=" in name else (-math.inf, thr)
        return EpsilonLowerBound(max(eps, 0.0), name, thr, ka, na, kb, nb, alpha, delta, select, lo, hi, True)
    if select != "split":
        raise ValueError(f"unknown select {select!r}; allowed: split, fixed")
    ha, hb = len(a) // 2, len(b) // 2
    a1, a2, b1, b2 = a[:ha], a[ha:], b[:hb], b[hb:]
    grid = _grid(np.concatenate([a1, b1]), n_thresholds, hints)
    if events == "thresholds":
        lo, hi, inside, a_first = _select_threshold(a1, b1, grid, alpha / 2, delta)
    else:
        lo, hi, inside, a_first = _select_interval(a1, b1, grid, alpha / 2, delta)
    first, second = (a2, b2) if a_first else (b2, a2)
    ka, kb = _inside(first, lo, hi), _inside(second, lo, hi)
    if not inside:
        ka, kb = len(first) - ka, len(second) - kb
    e = float(_bound(ka, len(first), kb, len(second), alpha / 2, delta))
    name, thr = _describe("M(D)" if a_first else "M(D')", lo, hi, inside)
    return EpsilonLowerBound(max(e, 0.0) if math.isfinite(e) else 0.0, name, thr, ka, len(first), kb, len(second),
                             alpha, delta, select, lo, hi, inside)


def _select_threshold(a1, b1, grid, alpha_each, delta):
    """The one-sided event {y >= t} or {y <= t} with the largest bound on the selection halves."""
    t = grid[np.isfinite(grid)]
    ga, la = _counts(a1, t)
    gb, lb = _counts(b1, t)
    ha, hb = len(a1), len(b1)
    best = (-np.inf, -math.inf, math.inf, True)
    for ge, ka, kb, a_first, na, nb in ((True, ga, gb, True, ha, hb), (False, la, lb, True, ha, hb),
                                        (True, gb, ga, False, hb, ha), (False, lb, la, False, hb, ha)):
        r = _bound(ka, na, kb, nb, alpha_each, delta)
        j = int(np.argmax(r))
        if r[j] > best[0]:
            best = (float(r[j]), float(t[j]) if ge else -math.inf, math.inf if ge else float(t[j]), a_first)
    _, lo, hi, a_first = best
    return lo, hi, True, a_first


def sample_release(release, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of a :class:`~certdp.privacy.loss.Release1D` (scalar centre and scale)."""
    z = SAMPLERS[release.family](rng, n).numpy()
    return np.clip(float(release.center) + float(release.scale) * z, release.lo, release.hi)
