"""Noise mechanisms as frozen descriptions; the beta rule of each lives here and nowhere else.

All mechanisms release q(D) + scale * Z for a scalar or vector query; ``scale(sensitivity)``
maps the (smooth or global) sensitivity to the noise scale.  Adjacency is substitution
(d(D, D') = 1); sensitivities are l1 unless stated.

Smooth-sensitivity releases (Nissim, Raskhodnikova, Smith 2007, Lemma 2.5/2.6): adding
(S(D)/a) * Z where S is a beta-smooth upper bound on the local sensitivity is private when the
density h of Z satisfies a sliding bound (shift by <= a changes log h by <= eps_slide) and a
dilation bound (scaling by e^{+-beta} changes log h by <= eps_dil).

* :class:`CauchySmooth` - Nissim et al.'s Cauchy (h ~ 1/(1+z^2)): scale 6 S/eps, beta <= eps/6,
  pure DP.
* :class:`CauchyTight` - one-dimensional Cauchy with scale S/(eps - beta), beta < eps
  (figures: beta = eps/2, scale 2S/eps).  Derivation: with s = S(D)/a the output density ratio
  between neighbours D, D' (|q(D) - q(D')| <= LS(D) <= S(D), S(D') in e^{+-beta} S(D)) splits as

    [h_s(y - q)/h_s(y - q')] * [h_s(y - q')/h_{s'}(y - q')].

  Sliding: h_s(z)/h_s(z + D) = (s^2 + (z+D)^2)/(s^2 + z^2) <= (u/2 + sqrt(1 + u^2/4))^2 with
  u = |D|/s, whose log is 2 asinh(u/2) <= u <= a.  Dilation: h_s(z)/h_{s'}(z) =
  (s/s')(s'^2 + z^2)/(s^2 + z^2) lies in [e^{-beta}, e^{beta}] for s' = e^{+-beta} s.  So the
  privacy loss is at most a + beta; a = eps - beta gives eps-DP (pure).  Valid for one
  released coordinate only (the sliding bounds of several coordinates add).
* :class:`LaplaceSmooth` - Laplace with scale 2 S/eps, beta <= eps / (2 ln(2/delta)),
  (eps, delta)-DP (Nissim et al. Lemma 2.6 with a = eps/2).

Global-sensitivity releases: :class:`LaplaceGlobal` (Delta_1/eps, pure) and
:class:`GaussianGlobal` (Delta_2 sqrt(2 ln(1.25/delta))/eps, Dwork & Roth Thm A.1, proven for
eps < 1; for eps >= 1 we use the larger of that and the analytic Gaussian mechanism's exact
calibration (Balle & Wang 2018), so the release stays (eps, delta)-DP at every eps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from certdp.errors import ConfigError


def _check_eps(eps: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ConfigError("privacy.epsilons", f"every epsilon must be a finite number > 0 (got {eps})")


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ConfigError("privacy.delta", f"delta must be in (0, 1) (got {delta})")


def _check_beta(beta: float, limit: float, name: str, strict: bool = False) -> None:
    bad = beta > limit or (strict and beta >= limit) or beta <= 0
    if bad:
        rel = "<" if strict else "<="
        raise ConfigError("privacy.beta", f"{name} needs 0 < beta {rel} {limit:.6g} (got {beta:.6g})")


class _Noise:
    def sample(self, generator: torch.Generator, shape, dtype=torch.float64) -> torch.Tensor:
        raise NotImplementedError


def _cauchy(g, shape, dtype):
    u = torch.rand(shape, generator=g, dtype=dtype)
    return torch.tan(math.pi * (u - 0.5))


def _laplace(g, shape, dtype):
    u = torch.rand(shape, generator=g, dtype=dtype) - 0.5
    return -torch.sign(u) * torch.log1p(-2 * u.abs())


def _gauss(g, shape, dtype):
    return torch.randn(shape, generator=g, dtype=dtype)


@dataclass(frozen=True)
class CauchySmooth:
    """Nissim et al.'s Cauchy mechanism: scale 6 S/eps, any beta <= eps/6; pure eps-DP."""
    epsilon: float
    beta: float | None = None
    regime = "pure"
    name = "cauchy6"

    def __post_init__(self):
        _check_eps(self.epsilon)
        if self.beta is None:
            object.__setattr__(self, "beta", self.max_beta())
        _check_beta(self.beta, self.max_beta(), "the Cauchy mechanism (6S/eps)")

    def max_beta(self) -> float:
        return self.epsilon / 6

    def scale(self, s):
        return 6 * s / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _cauchy(g, shape, dtype)


@dataclass(frozen=True)
class CauchyTight:
    """One-dimensional Cauchy: scale S/(eps - beta), beta < eps (default eps/2); pure eps-DP."""
    epsilon: float
    beta: float | None = None
    regime = "pure"
    name = "cauchy"

    def __post_init__(self):
        _check_eps(self.epsilon)
        if self.beta is None:
            object.__setattr__(self, "beta", self.epsilon / 2)
        _check_beta(self.beta, self.max_beta(), "the one-dimensional Cauchy mechanism S/(eps-beta)", strict=True)

    def max_beta(self) -> float:
        return self.epsilon

    def scale(self, s):
        return s / (self.epsilon - self.beta)

    def sample(self, g, shape, dtype=torch.float64):
        return _cauchy(g, shape, dtype)


@dataclass(frozen=True)
class LaplaceSmooth:
    """Smooth-sensitivity Laplace: scale 2 S/eps, beta <= eps/(2 ln(2/delta)); (eps, delta)-DP."""
    epsilon: float
    delta: float
    beta: float | None = None
    regime = "approx"
    name = "laplace"

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_delta(self.delta)
        if self.beta is None:
            object.__setattr__(self, "beta", self.max_beta())
        _check_beta(self.beta, self.max_beta(), "the smooth Laplace mechanism")

    def max_beta(self) -> float:
        return self.epsilon / (2 * math.log(2 / self.delta))

    def scale(self, s):
        return 2 * s / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _laplace(g, shape, dtype)


@dataclass(frozen=True)
class LaplaceGlobal:
    """Laplace mechanism: scale Delta_1/eps; pure eps-DP."""
    epsilon: float
    regime = "pure"
    name = "laplace_gs"
    beta = 0.0

    def __post_init__(self):
        _check_eps(self.epsilon)

    def scale(self, s):
        return s / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _laplace(g, shape, dtype)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma with N(0, sigma^2) (eps, delta)-DP for l2 sensitivity 1 (Balle & Wang 2018):
    delta(sigma) = Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D)."""
    from scipy.stats import norm

    def dlt(sig):
        a, b = 1 / (2 * sig), epsilon * sig
        return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b)

    lo, hi = 1e-6, 1.0
    while dlt(hi) > delta:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if dlt(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi * sensitivity


@dataclass(frozen=True)
class GaussianGlobal:
    """Gaussian mechanism: sigma = Delta_2 sqrt(2 ln(1.25/delta))/eps (eps < 1); for eps >= 1 the
    max of that and the analytic calibration, so that the guarantee holds; (eps, delta)-DP."""
    epsilon: float
    delta: float
    regime = "approx"
    name = "gaussian_gs"
    beta = 0.0

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_delta(self.delta)

    def multiplier(self) -> float:
        classic = math.sqrt(2 * math.log(1.25 / self.delta)) / self.epsilon
        if self.epsilon < 1:
            return classic
        return max(classic, analytic_gaussian_sigma(self.epsilon, self.delta))

    def scale(self, s):
        return s * self.multiplier()

    def sample(self, g, shape, dtype=torch.float64):
        return _gauss(g, shape, dtype)


MECHANISMS = {
    "cauchy": CauchyTight,
    "cauchy6": CauchySmooth,
    "laplace": LaplaceSmooth,
    "laplace_gs": LaplaceGlobal,
    "gaussian_gs": GaussianGlobal,
}

MECHANISM_HELP = {
    "cauchy": "smooth, pure DP: Cauchy S/(eps-beta), beta = eps/2 by default (1-D, paper figures)",
    "cauchy6": "smooth, pure DP: Cauchy 6S/eps, beta <= eps/6 (Nissim et al.)",
    "laplace": "smooth, approx DP: Laplace 2S/eps, beta <= eps/(2 ln(2/delta))",
    "laplace_gs": "global, pure DP: Laplace Delta/eps",
    "gaussian_gs": "global, approx DP: Gaussian Delta_2 sqrt(2 ln(1.25/delta))/eps",
}


# ------------------------------------------------------------------ parameter releases (AGS)
#
# AGS releases a vector theta in R^P with *independent* noise coordinates, calibrated to one
# scalar u = SS^beta, a beta-smooth upper bound on the l1 local sensitivity of theta (sum over
# coordinates of the cross-radius certificate).  All rules below rest on one pointwise
# decomposition of the privacy loss, written once here.
#
# Let x, y be neighbours, s = S(x)/a, s' = S(y)/a the two noise scales (r = s/s' lies in
# [e^-beta, e^beta] because S is beta-smooth), h = prod_j h1 the noise density, and let the
# output be o = q(x) + s z with z ~ h.  Then
#
#   L(o) = ln p_x(o) - ln p_y(o)
#        = [ln h(z) - ln h(r z) - P ln r]                         (dilation, depends on z)
#        + [ln h(r z) - ln h(r z + (q(x) - q(y))/s')]             (sliding)
#
# because (o - q(y))/s' = r z + (q(x) - q(y))/s'.  Sliding: both densities below have a
# 1-Lipschitz log (|d/dz ln h1| <= 1: 2|z|/(1+z^2) <= 1 for Cauchy, 1 for Laplace), so the
# sliding term is at most ||q(x) - q(y)||_1 / s' <= LS(y)/s' <= S(y)/s' = a (x is a neighbour
# of y, so ||q(x) - q(y)||_1 <= LS(y)).  Dilation, per coordinate with c = ln r, |c| <= beta:
#
#   Cauchy:  ln(1 + r^2 z^2) - ln(1 + z^2) - c  in [-|c|, |c|]   (the first difference lies
#            between 0 and 2c), so the dilation term is at most P*beta for *every* z;
#   Laplace: (r - 1)|z| - c  <= (e^beta - 1)|z| if c > 0, <= beta if c < 0; summed:
#            <= max((e^beta - 1) ||z||_1, P beta), and ||z||_1 ~ Gamma(P, 1) under h.
#
# Hence Cauchy: L <= a + P beta everywhere, pure (a + P beta)-DP.  Laplace: L <= a + eps_d
# except on {||z||_1 > G} where (e^beta - 1) G <= eps_d and P beta <= eps_d; a privacy-loss
# tail Pr[L > eps] <= delta' gives (eps, delta')-DP.  (This direct argument avoids the factor
# e^{eps/2} that chaining Nissim et al.'s two admissibility inequalities puts on delta/2.)


def _check_p(p) -> None:
    if not (isinstance(p, int) and p >= 1):
        raise ConfigError("model", f"the number of released parameters must be an integer >= 1 (got {p!r})")


@dataclass(frozen=True)
class CauchyParams:
    """Pure DP release of P parameters (the AGS tables): independent Cauchy(u/(eps - P beta));
    default beta = eps/(2P), i.e. scale 2u/eps.  Any beta < eps/P is admissible.

    Derivation (see the block comment above): the privacy loss is at most a + P*beta for every
    output, with a = eps - P*beta the sliding budget; beta = eps/(2P) gives a = eps/2 and the
    scale u/a = 2u/eps.  This is tighter than Corollary 4.1's proof (which bounds each dilation
    term by 3|lambda| instead of |lambda|), so the tables' setting *is* provably eps-DP."""
    epsilon: float
    n_params: int
    beta: float | None = None
    regime = "pure"
    name = "cauchy_p"

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_p(self.n_params)
        if self.beta is None:
            object.__setattr__(self, "beta", self.epsilon / (2 * self.n_params))
        _check_beta(self.beta, self.max_beta(), "the P-parameter Cauchy release u/(eps - P beta)", strict=True)

    def max_beta(self) -> float:
        return self.epsilon / self.n_params

    def scale(self, u):
        return u / (self.epsilon - self.n_params * self.beta)

    def sample(self, g, shape, dtype=torch.float64):
        return _cauchy(g, shape, dtype)


@dataclass(frozen=True)
class CauchyParams6:
    """Corollary 4.1 (C): independent Cauchy(6u/eps), beta <= eps/(6P); pure eps-DP.

    Sliding budget a = eps/6, dilation <= P beta <= eps/6 (pointwise), total eps/3 <= eps."""
    epsilon: float
    n_params: int
    beta: float | None = None
    regime = "pure"
    name = "cauchy6_p"

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_p(self.n_params)
        if self.beta is None:
            object.__setattr__(self, "beta", self.max_beta())
        _check_beta(self.beta, self.max_beta(), "Corollary 4.1's Cauchy release (6u/eps)")

    def max_beta(self) -> float:
        return self.epsilon / (6 * self.n_params)

    def scale(self, u):
        return 6 * u / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _cauchy(g, shape, dtype)


def gamma_tail(p: int, delta: float) -> float:
    """G with Pr[Gamma(p, 1) > G] = delta/2: the l1 norm of p i.i.d. standard Laplace draws."""
    from scipy.stats import gamma
    return float(gamma.isf(delta / 2, p))


@dataclass(frozen=True)
class LaplaceParams:
    """Approx. DP release of P parameters (the AGS tables): independent Laplace(2u/eps) with the
    Gamma-tail beta = min(ln(1 + eps/(2G)), eps/(2P)), G the (1 - delta/2) quantile of Gamma(P, 1).

    Derivation (block comment above): sliding a = eps/2; dilation <= max((e^beta - 1)||z||_1,
    P beta) <= eps/2 whenever ||z||_1 <= G, an event of probability 1 - delta/2 under the noise
    (||z||_1 of P i.i.d. standard Laplace coordinates is Gamma(P, 1)).  So Pr[L > eps] <= delta/2
    <= delta: (eps, delta)-DP.  (The quantile at 1 - delta would do; 1 - delta/2 is the tables'.)
    Since G > P, ln(1 + eps/(2G)) < eps/(2G) < eps/(2P): the first term is the binding one."""
    epsilon: float
    delta: float
    n_params: int
    beta: float | None = None
    regime = "approx"
    name = "laplace_p"

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_delta(self.delta)
        _check_p(self.n_params)
        if self.beta is None:
            object.__setattr__(self, "beta", self.max_beta())
        _check_beta(self.beta, self.max_beta(), "the Gamma-tail Laplace release (2u/eps)")

    def max_beta(self) -> float:
        G = gamma_tail(self.n_params, self.delta)
        return min(math.log1p(self.epsilon / (2 * G)), self.epsilon / (2 * self.n_params))

    def scale(self, u):
        return 2 * u / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _laplace(g, shape, dtype)


@dataclass(frozen=True)
class LaplaceParamsUnion:
    """Corollary 4.1 (L): independent Laplace(2u/eps), beta <= eps/(2P(1 + 2 ln(2P/delta))),
    additionally beta <= 1 (the proof uses e^beta - 1 <= 2 beta); (eps, delta)-DP.

    On B = {max_j |z_j| <= ln(2P/delta)} (Pr[not B] <= delta/2 by a union bound) the dilation
    term is <= (e^beta - 1) P ln(2P/delta) <= 2 beta P ln(2P/delta) <= eps/2, and P beta <= eps/2."""
    epsilon: float
    delta: float
    n_params: int
    beta: float | None = None
    regime = "approx"
    name = "laplace_union_p"

    def __post_init__(self):
        _check_eps(self.epsilon)
        _check_delta(self.delta)
        _check_p(self.n_params)
        if self.beta is None:
            object.__setattr__(self, "beta", self.max_beta())
        _check_beta(self.beta, self.max_beta(), "Corollary 4.1's Laplace release (union bound)")

    def max_beta(self) -> float:
        p = self.n_params
        return min(self.epsilon / (2 * p * (1 + 2 * math.log(2 * p / self.delta))), 1.0)

    def scale(self, u):
        return 2 * u / self.epsilon

    def sample(self, g, shape, dtype=torch.float64):
        return _laplace(g, shape, dtype)


PARAMETER_MECHANISMS = {
    "cauchy_p": CauchyParams,
    "cauchy6_p": CauchyParams6,
    "laplace_p": LaplaceParams,
    "laplace_union_p": LaplaceParamsUnion,
}

PARAMETER_MECHANISM_HELP = {
    "cauchy_p": "AGS, pure DP: independent Cauchy u/(eps - P beta), beta = eps/(2P) (scale 2u/eps; tables)",
    "cauchy6_p": "AGS, pure DP: independent Cauchy 6u/eps, beta <= eps/(6P) (Corollary 4.1)",
    "laplace_p": "AGS, approx DP: independent Laplace 2u/eps, Gamma-tail beta (tables)",
    "laplace_union_p": "AGS, approx DP: independent Laplace 2u/eps, beta <= eps/(2P(1+2ln(2P/delta))) (Corollary 4.1)",
}


def parameter_mechanism(name: str, *, epsilon: float, n_params: int, delta: float | None = None,
                        beta: float | None = None):
    """Instantiate a P-parameter release by name (``ags.releases``)."""
    if name not in PARAMETER_MECHANISMS:
        raise ConfigError("privacy.releases", f"unknown AGS release '{name}'; allowed: {', '.join(PARAMETER_MECHANISMS)}")
    cls = PARAMETER_MECHANISMS[name]
    kw = {"epsilon": epsilon, "n_params": n_params, "beta": beta}
    if name.startswith("laplace"):
        kw["delta"] = delta
    return cls(**kw)
