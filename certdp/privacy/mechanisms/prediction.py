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
* :class:`LaplaceSmooth` - Laplace with scale 2 S/eps and beta <= eps / (2 ln(2/delta)) (Nissim
  et al. Lemma 2.6 with a = eps/2), further capped where that rule's first-order step fails
  (:func:`laplace_max_beta`); (eps, delta)-DP.

Global-sensitivity releases: :class:`LaplaceGlobal` (Delta_1/eps, pure) and
:class:`GaussianGlobal` (Delta_2 sqrt(2 ln(1.25/delta))/eps, Dwork & Roth Thm A.1, proven for
eps < 1; for eps >= 1 we use the larger of that and the analytic Gaussian mechanism's exact
calibration (Balle & Wang 2018), so the release stays (eps, delta)-DP at every eps).
"""


from __future__ import annotations

import math
from dataclasses import dataclass

from certdp.privacy.mechanisms.base import Mechanism, analytic_gaussian_sigma
from certdp.privacy.calibrate import largest
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
        return laplace_max_beta(self.epsilon, self.delta)


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


def laplace_max_beta(epsilon: float, delta: float) -> float:
    """The beta of the smooth Laplace release (scale 2 S/eps): min(eps / (2 ln(2/delta)), b*),
    b* the largest b <= eps/2 with (eps/2 + b) / (e^b - 1) >= ln(2/delta).

    Why b*.  The release is (eps, delta)-DP when the standard Laplace Z slides by <= a = eps/2
    with privacy loss <= eps/2 (exact: |z| - |z + D| <= |D|) and dilates by e^lambda,
    |lambda| <= beta, with loss <= eps/2 except on a set of mass <= delta/2 (Nissim et al.
    Lemma 2.6; dilation first, then sliding at the neighbour's scale, so the deltas do not add).
    The dilation's log ratio is ln h(z) - ln(e^-lambda h(e^-lambda z)) = lambda + |z| (e^-lambda - 1):
    at most lambda <= eps/2 for lambda >= 0 (so beta <= eps/2), and for lambda = -b above eps/2
    exactly when |z| > t = (eps/2 + b) / (e^b - 1), of mass e^-t; e^-t <= delta/2 is the rule
    above (t decreases in b, so b = beta is the worst).  Nissim et al. take e^b - 1 ~ b, which
    gives eps / (2 ln(2/delta)): valid while eps is small (at delta = 1e-5 up to eps ~ 4.5), but
    at eps = 15 its privacy loss on the worst admissible pair is 1.03 eps (found by certdp
    dpaudit's admissible-pair check).  The minimum keeps the published rule wherever it holds."""
    L = math.log(2 / delta)
    first_order = epsilon / (2 * L)

    def ok(b: float) -> bool:     # in logs: e^b overflows float64 for the b of a huge eps
        return b == 0.0 or math.log(epsilon / 2 + b) >= math.log(L) + b + math.log(-math.expm1(-b))

    if ok(first_order):
        return first_order
    # a bracket: b >= ln 2 meeting the rule has e^b / 2 <= e^b - 1 <= (eps/2 + b) / ln 2, so b < 1 + ln(1 + 5 eps)
    return largest(ok, 0.0, min(first_order, epsilon / 2, 1.0 + math.log1p(5 * epsilon)))
