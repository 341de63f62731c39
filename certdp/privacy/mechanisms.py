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
