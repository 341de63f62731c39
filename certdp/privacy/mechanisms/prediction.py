"""Releases of one private prediction per test point (AGT-R, PATE): ``query = "prediction"``.

Adjacency is substitution (d(D, D') = 1); sensitivities are l1 unless stated.

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

from certdp.privacy.mechanisms.base import Mechanism, analytic_gaussian_sigma
from certdp.privacy.noise import cauchy, gaussian, laplace


@dataclass(frozen=True)
class CauchyTight(Mechanism):
    """One-dimensional Cauchy: scale S/(eps - beta), beta < eps (default eps/2); pure eps-DP."""
    epsilon: float
    beta: float | None = None
    name = "cauchy"
    kind = "smooth"
    query = "prediction"
    regime = "pure"
    noise = staticmethod(cauchy)
    description = "the one-dimensional Cauchy mechanism S/(eps-beta)"
    strict_beta = True

    def max_beta(self) -> float:
        return self.epsilon

    def default_beta(self) -> float:
        return self.epsilon / 2

    def scale(self, s):
        return s / (self.epsilon - self.beta)


@dataclass(frozen=True)
class CauchySmooth(Mechanism):
    """Nissim et al.'s Cauchy mechanism: scale 6 S/eps, any beta <= eps/6; pure eps-DP."""
    epsilon: float
    beta: float | None = None
    name = "cauchy6"
    kind = "smooth"
    query = "prediction"
    regime = "pure"
    scale_factor = 6
    noise = staticmethod(cauchy)
    description = "the Cauchy mechanism (6S/eps)"

    def max_beta(self) -> float:
        return self.epsilon / 6


@dataclass(frozen=True)
class LaplaceSmooth(Mechanism):
    """Smooth-sensitivity Laplace: scale 2 S/eps, beta <= eps/(2 ln(2/delta)); (eps, delta)-DP."""
    epsilon: float
    delta: float
    beta: float | None = None
    name = "laplace"
    kind = "smooth"
    query = "prediction"
    regime = "approx"
    scale_factor = 2
    noise = staticmethod(laplace)
    description = "the smooth Laplace mechanism"

    def max_beta(self) -> float:
        return self.epsilon / (2 * math.log(2 / self.delta))


@dataclass(frozen=True)
class LaplaceGlobal(Mechanism):
    """Laplace mechanism: scale Delta_1/eps; pure eps-DP."""
    epsilon: float
    name = "laplace_gs"
    kind = "global"
    query = "prediction"
    regime = "pure"
    beta = 0.0
    scale_factor = 1
    noise = staticmethod(laplace)


@dataclass(frozen=True)
class GaussianGlobal(Mechanism):
    """Gaussian mechanism: sigma = Delta_2 sqrt(2 ln(1.25/delta))/eps (eps < 1); for eps >= 1 the
    max of that and the analytic calibration, so that the guarantee holds; (eps, delta)-DP."""
    epsilon: float
    delta: float
    name = "gaussian_gs"
    kind = "global"
    query = "prediction"
    regime = "approx"
    beta = 0.0
    noise = staticmethod(gaussian)

    def multiplier(self) -> float:
        classic = math.sqrt(2 * math.log(1.25 / self.delta)) / self.epsilon
        if self.epsilon < 1:
            return classic
        return max(classic, analytic_gaussian_sigma(self.epsilon, self.delta))

    def scale(self, s):
        return s * self.multiplier()
