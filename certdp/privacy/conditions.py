"""Feasibility of smooth-sensitivity releases against global-sensitivity ones (paper Thms 3.2, 3.3).

Both theorems compare the error of two noise distributions at a confidence level 1 - alpha:
the error E of a release is the (1 - alpha)-quantile of |Z| (so P(|Z| > E) = alpha).

* Cauchy with scale g:   P(|Z| > E) = 1 - (2/pi) arctan(E/g)   =>  E = g tan(pi (1 - alpha)/2).
* Laplace with scale b:  P(|Z| > E) = e^{-E/b}                  =>  E = b ln(1/alpha).
* Gaussian with sd s:    P(|Z| > E) = 2 (1 - Phi(E/s))          =>  E = s Phi^{-1}(1 - alpha/2).

Pure DP (Theorem 3.2): Cauchy(6 SS/eps) vs Laplace(Delta f/eps).  The smooth release is c times
tighter (c E_C < E_L) iff

    rho = SS/Delta f < (1/(6c)) ln(1/alpha) / tan(pi (1 - alpha)/2).

The factor 6 is Nissim et al.'s Cauchy scale (``cauchy_factor``); the one-dimensional Cauchy
S/(eps - beta) at beta = eps/2 of the figures has factor 2 and triples every ratio.

Approximate DP (Theorem 3.3): Laplace(2 SS/eps) vs Gaussian(Delta_2 f sqrt(2 ln(1.25/delta))/eps):

    rho = SS/Delta_2 f < (1/(2c)) sqrt(2 ln(1.25/delta)) Phi^{-1}(1 - alpha/2) / ln(1/alpha).

Epsilon cancels in both.  The bracket of Theorem 3.3 decreases monotonically in the confidence
(from sqrt(2 pi)/2 as 1 - alpha -> 0 to 0 as 1 - alpha -> 1), so on a window 1 - alpha > a its
peak is at the window's left edge; the bracket of Theorem 3.2 has an interior maximum
(near 1 - alpha = 0.4).  The ratios are ceilings: beta constraints and the over-approximation of
SS by AGT only make the attainable ratio smaller.
"""

from __future__ import annotations

import math

import numpy as np


def _alpha(confidence) -> np.ndarray:
    c = np.asarray(confidence, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c <= 0) or np.any(c >= 1):
        raise ValueError("confidence (1 - alpha) must lie strictly between 0 and 1")
    return 1.0 - c


def _check_c(c: float) -> float:
    c = float(c)
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(f"c (the utility improvement factor) must be a finite number > 0 (got {c})")
    return c


def cauchy_error(*, scale, confidence):
    """(1 - alpha)-quantile of |Z|, Z ~ Cauchy(0, scale): ``scale * tan(pi (1 - alpha)/2)``."""
    a = _alpha(confidence)
    return np.asarray(scale, dtype=np.float64) * np.tan(np.pi * (1 - a) / 2)


def laplace_error(*, scale, confidence):
    """(1 - alpha)-quantile of |Z|, Z ~ Laplace(0, scale): ``scale * ln(1/alpha)``."""
    a = _alpha(confidence)
    return np.asarray(scale, dtype=np.float64) * np.log(1 / a)


def gaussian_error(*, sigma, confidence):
    """(1 - alpha)-quantile of |Z|, Z ~ N(0, sigma^2): ``sigma * Phi^{-1}(1 - alpha/2)``."""
    from scipy.stats import norm
    a = _alpha(confidence)
    return np.asarray(sigma, dtype=np.float64) * norm.ppf(1 - a / 2)


def pure_critical_ratio(*, confidence, c: float = 1.0, cauchy_factor: float = 6.0):
    """Theorem 3.2: the largest rho = SS^beta/Delta f at which Cauchy(cauchy_factor * SS/eps)
    has a c-times smaller (1 - alpha)-error than Laplace(Delta f/eps) (pure eps-DP both)."""
    c = _check_c(c)
    if not cauchy_factor > 0:
        raise ValueError(f"cauchy_factor must be > 0 (got {cauchy_factor})")
    a = _alpha(confidence)
    return np.log(1 / a) / np.tan(np.pi * (1 - a) / 2) / (cauchy_factor * c)


def approx_critical_ratio(*, confidence, c: float = 1.0, delta: float = 1e-5):
    """Theorem 3.3: the largest rho = SS^beta/Delta_2 f at which Laplace(2 SS/eps) has a
    c-times smaller (1 - alpha)-error than the Gaussian mechanism
    sigma = Delta_2 f sqrt(2 ln(1.25/delta))/eps ((eps, delta)-DP both)."""
    from scipy.stats import norm
    c = _check_c(c)
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) (got {delta})")
    a = _alpha(confidence)
    return math.sqrt(2 * math.log(1.25 / delta)) * norm.ppf(1 - a / 2) / np.log(1 / a) / (2 * c)


def peak(fn, lo: float, hi: float) -> tuple[float, float]:
    """(argmax, max) of a unimodal or monotone scalar function on [lo, hi] (bounded Brent
    search, compared with both ends)."""
    from scipy.optimize import minimize_scalar
    r = minimize_scalar(lambda t: -float(fn(t)), bounds=(lo, hi), method="bounded",
                        options={"xatol": 1e-10})
    cands = [(float(r.x), -float(r.fun)), (lo, float(fn(lo))), (hi, float(fn(hi)))]
    return max(cands, key=lambda t: t[1])
