"""The publishing code against its own proof (docs/dpaudit.md, "The worst neighbour the
certificate admits" and "The noise check").

A smooth release of D is clip(c + scale(S) Z) with S = S(D) the certified beta-smooth bound.  Its
DP proof holds for *every* neighbour D' the certificate admits: a centre c' with
|c - c'| <= min(S, S') (each of LS(D), LS(D') bounds the change and S bounds LS), a bound S' with
e^-beta <= S'/S <= e^beta (beta-smoothness) and S' at most the cap (the global sensitivity or the
trivial cover that caps the staircase), c' inside the output range.  The worst such neighbour of
the audited dataset D is a pair the mechanism must keep below its claim whatever the data, so:

* :func:`worst_admissible` finds, among the searched statistics, the corner of this set (shift
  +-min(S, S'), S' = S e^{+-beta} capped) with the largest exact loss -- from the mechanism's
  documented distribution, before any draw; the audit then draws both sides through the code
  that writes ``publish/`` (D's centre and bound, and the neighbour's) and bounds epsilon from
  the draws.  A bound, or an exact loss, above the claim says the release's own proof fails
  (the mechanism is mis-calibrated for its beta), even where no real pair of datasets reaches
  that corner: the real neighbours of the search test the certificate, this pair the mechanism
  and the publishing code.
* :func:`noise_check` tests, on D's draws, whether the published noise is narrower than the
  scale the proof uses (an exact binomial test on one interval around the centre): a publishing
  path that halves the noise is caught here on any setting, including those whose smooth bounds
  are so loose that a halved release is still far below its claim on every real pair.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from certdp import DTYPE
from certdp.methods.dpaudit.exact import _epsilon_at_delta, epsilon_exact
from certdp.privacy.empirical import clopper_pearson
from certdp.privacy.loss import Release1D, pure_loss

#: the median of |Z| of each standard noise family: the half-width of the noise check's interval
MEDIAN_ABS = {"cauchy": 1.0, "laplace": math.log(2.0)}


def _scale(mech, s) -> np.ndarray:
    return np.asarray(mech.scale(torch.as_tensor(s, dtype=DTYPE)), dtype=np.float64)


def worst_admissible(side: dict, mech, fam: str) -> dict:
    """The worst neighbour the certificate admits for ``side`` (D) under ``mech``: the statistic
    ``st``, the neighbour's centre and bound (model units), the exact eps(delta) of the statistic
    and, for a pure release of several parameters, of the whole release (``release_epsilon``: the
    other coordinates' dilation adds, coordinate by coordinate, since the log-ratio of independent
    coordinates is a sum whose supremum is the sum of theirs; NaN where not computed)."""
    beta, delta, claim = float(mech.beta), float(mech.delta_spent), float(mech.epsilon)
    c = np.asarray(side["center"], dtype=np.float64)
    ss = np.asarray(side["ss"][beta], dtype=np.float64)
    lo, hi = (-math.inf, math.inf) if side["rng"] is None else (float(side["rng"][0]), float(side["rng"][1]))
    cap = side["cap"]
    n_stats = len(c)
    if side["query"] == "parameter":
        # one bound for every coordinate and no clipping: the loss is the same on each (shift-invariant)
        c, ss, cap = c[:1], ss[:1], None if cap is None else np.asarray(cap)[:1]
    s = _scale(mech, ss)
    best = None
    for rho in (math.exp(beta), math.exp(-beta)):
        s2 = ss * rho if cap is None else np.minimum(ss * rho, cap)
        shift = np.minimum(ss, s2)
        for sign in (1.0, -1.0):
            c2 = np.clip(c + sign * shift, lo, hi)
            A, B = Release1D(fam, c, s, lo, hi), Release1D(fam, c2, _scale(mech, s2), lo, hi)
            loss = pure_loss(A, B) if delta == 0 else _epsilon_at_delta(A, B, delta, claim)
            st = int(np.argmax(loss))
            if best is None or loss[st] > best[0]:
                best = (float(loss[st]), st, float(c2[st]), float(s2[st]))
    _, st, c2, s2 = best
    A = Release1D(fam, np.array(c[st]), np.array(s[st]), lo, hi)
    B = Release1D(fam, np.array(c2), np.array(float(_scale(mech, s2))), lo, hi)
    stat = float(pure_loss(A, B)) if delta == 0 else epsilon_exact(A, B, delta, claim)
    whole = stat
    if side["query"] == "parameter":
        whole = math.nan
        if delta == 0 and fam == "cauchy":
            # a Cauchy dilation's log-ratio spans [-|ln r|, |ln r|]: each other coordinate adds its sup
            dil = float(pure_loss(Release1D(fam, 0.0, float(s[st])), Release1D(fam, 0.0, float(_scale(mech, s2)))))
            whole = stat + (n_stats - 1) * dil
    return {"st": st, "center": c2, "ss": s2, "epsilon": stat, "release_epsilon": whole,
            "loss": float(pure_loss(A, B)), "A": A, "B": B}


def _standard_cdf(fam: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if fam == "cauchy":
        return 0.5 + np.arctan(x) / math.pi
    with np.errstate(over="ignore"):
        return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0.0)), 1.0 - 0.5 * np.exp(-np.maximum(x, 0.0)))


def noise_check(y: np.ndarray, *, center: float, scale: float, lo: float, hi: float, fam: str,
                alpha: float) -> dict:
    """Is the noise of the draws ``y`` (what ``publish/`` would hold, one statistic of D) narrower
    than the documented ``scale`` around ``center``?  With y = clip(center + k * scale * Z),
    the open interval (a, b) = (max(lo, center - m scale), min(hi, center + m scale)), m the median
    of |Z|, lies in the open output range, so clipping moves no draw in or out of it, and its
    probability G((b - c)/(k s)) - G((a - c)/(k s)) falls as the noise ratio k grows.  Under the
    proof's noise (k >= 1) the count in it is binomial with p <= p0 = its probability at k = 1:
    ``below`` is the exact test's verdict that k < 1 at confidence 1 - alpha (Clopper-Pearson
    p_lo > p0).  ``ratio`` estimates k, ``ratio_upper`` is its upper confidence bound (NaN when
    there is no interval: the centre at both ends of the range, or unbounded)."""
    m = MEDIAN_ABS[fam]
    a, b = max(lo, center - m * scale), min(hi, center + m * scale)
    out = {"ratio": math.nan, "ratio_upper": math.nan, "below": False, "k": 0, "n": len(y), "p0": math.nan}
    if not b > a:
        return out
    ta, tb = (a - center) / scale, (b - center) / scale

    def prob(k):
        return _standard_cdf(fam, tb / k) - _standard_cdf(fam, ta / k)

    def ratio_at(p):
        """The k with prob(k) = p (prob falls in k), by bisection in log k over [1e-9, 1e9]."""
        if p <= 0:
            return math.nan
        lg_lo, lg_hi = math.log(1e-9), math.log(1e9)
        if prob(math.exp(lg_lo)) <= p:
            return 1e-9
        if prob(math.exp(lg_hi)) >= p:
            return math.nan
        for _ in range(60):
            mid = 0.5 * (lg_lo + lg_hi)
            lg_lo, lg_hi = (mid, lg_hi) if prob(math.exp(mid)) > p else (lg_lo, mid)
        return math.exp(lg_hi)

    k = int(((y > a) & (y < b)).sum())
    p0 = float(prob(1.0))
    p_lo, _ = clopper_pearson(k, len(y), alpha)
    out.update(k=k, p0=p0, below=bool(float(p_lo) > p0), ratio=ratio_at(k / len(y)), ratio_upper=ratio_at(float(p_lo)))
    return out
