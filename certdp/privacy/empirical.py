"""A statistically valid lower bound on epsilon from samples of two release distributions.

If a mechanism M is (eps, delta)-DP then for every event E and neighbours D, D'

    P[M(D) in E] <= e^eps P[M(D') in E] + delta,   i.e.   eps >= ln((p - delta) / q)

with p = P[M(D) in E], q = P[M(D') in E].  From n_a draws of M(D) and n_b draws of M(D') the
Clopper-Pearson interval gives p >= p_lo and q <= q_hi, each with probability >= 1 - alpha';
then ln((p_lo - delta) / q_hi) is a lower bound on eps with probability >= 1 - 2 alpha'.

Events are one-sided threshold sets {y >= t} and {y <= t} of a scalar statistic of the output
(for a vector release pass a scalar projection chosen in advance).  Two ways to choose them
without invalidating the bound:

* ``select="fixed"``: the thresholds are given (fixed before sampling); every (threshold, side,
  direction) is tested and alpha is split over all of them by a union bound;
* ``select="split"`` (default): the first half of each sample picks the single event and
  direction with the largest bound computed on that half; only the second half is used for the
  reported bound, with alpha split over its two one-sided intervals.

The result is a lower bound at confidence 1 - alpha: if it exceeds the claimed epsilon, the
mechanism (or its implementation) is not (eps, delta)-DP, with that confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from certdp.privacy.noise import SAMPLERS


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
    """``epsilon``: the lower bound (0 when no event gives evidence); ``event``: 'M(D) >= t' style
    description of the event attaining it; counts and sizes of the sample used for the bound."""

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


def epsilon_lower_bound(a, b, *, delta: float = 0.0, alpha: float = 0.05, thresholds=None,
                        select: str = "split", n_thresholds: int = 200) -> EpsilonLowerBound:
    """Lower bound on epsilon at confidence 1 - ``alpha`` from scalar samples ``a`` ~ M(D) and
    ``b`` ~ M(D') (both directions are tested).  ``thresholds``: the events' thresholds for
    ``select="fixed"`` (required there); for ``select="split"`` the candidates are
    ``n_thresholds`` quantiles of the pooled selection half (plus the sample extremes, so atoms
    at the ends of a clipped output range are events too)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if len(a) < 2 or len(b) < 2:
        raise ValueError("need at least two samples of each distribution")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1) (got {alpha})")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1) (got {delta})")
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
        return EpsilonLowerBound(max(eps, 0.0), name, thr, ka, na, kb, nb, alpha, delta, select)
    if select != "split":
        raise ValueError(f"unknown select {select!r}; allowed: split, fixed")
    ha, hb = len(a) // 2, len(b) // 2
    a1, a2, b1, b2 = a[:ha], a[ha:], b[:hb], b[hb:]
    pooled = np.concatenate([a1, b1])
    t = np.unique(np.concatenate([np.quantile(pooled, np.linspace(0, 1, n_thresholds)), [pooled.min(), pooled.max()]]))
    ga, la = _counts(a1, t)
    gb, lb = _counts(b1, t)
    # the event is chosen by the same confidence bound computed on the selection half (which
    # penalises events seen a handful of times); the bound itself uses the other half only
    score = []
    for name, ka, na, kb, nb in (("M(D) >= t", ga, ha, gb, hb), ("M(D) <= t", la, ha, lb, hb),
                                 ("M(D') >= t", gb, hb, ga, ha), ("M(D') <= t", lb, hb, la, ha)):
        r = _bound(ka, na, kb, nb, alpha / 2, delta)
        j = int(np.argmax(r))
        score.append((float(r[j]), name, float(t[j])))
    _, name, thr = max(score)
    side_ge = ">=" in name
    first, second = (a2, b2) if name.startswith("M(D) ") else (b2, a2)
    ka = int((first >= thr).sum() if side_ge else (first <= thr).sum())
    kb = int((second >= thr).sum() if side_ge else (second <= thr).sum())
    e = float(_bound(ka, len(first), kb, len(second), alpha / 2, delta))
    return EpsilonLowerBound(max(e, 0.0) if math.isfinite(e) else 0.0, name, thr, ka, len(first), kb, len(second),
                             alpha, delta, select)


def sample_release(release, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of a :class:`~certdp.privacy.loss.Release1D` (scalar centre and scale)."""
    z = SAMPLERS[release.family](rng, n).numpy()
    return np.clip(float(release.center) + float(release.scale) * z, release.lo, release.hi)
