"""Releases of the whole parameter vector theta in R^P (AGS): ``query = "parameter"``.

AGS releases a vector theta in R^P with *independent* noise coordinates, calibrated to one
scalar u = SS^beta, a beta-smooth upper bound on the l1 local sensitivity of theta (sum over
coordinates of the cross-radius certificate).  All rules below rest on one pointwise
decomposition of the privacy loss, written once here.

Let x, y be neighbours, s = S(x)/a, s' = S(y)/a the two noise scales (r = s/s' lies in
[e^-beta, e^beta] because S is beta-smooth), h = prod_j h1 the noise density, and let the
output be o = q(x) + s z with z ~ h.  Then

  L(o) = ln p_x(o) - ln p_y(o)
       = [ln h(z) - ln h(r z) - P ln r]                         (dilation, depends on z)
       + [ln h(r z) - ln h(r z + (q(x) - q(y))/s')]             (sliding)

because (o - q(y))/s' = r z + (q(x) - q(y))/s'.  Sliding: both densities below have a
1-Lipschitz log (|d/dz ln h1| <= 1: 2|z|/(1+z^2) <= 1 for Cauchy, 1 for Laplace), so the
sliding term is at most ||q(x) - q(y)||_1 / s' <= LS(y)/s' <= S(y)/s' = a (x is a neighbour
of y, so ||q(x) - q(y)||_1 <= LS(y)).  Dilation, per coordinate with c = ln r, |c| <= beta:

  Cauchy:  ln(1 + r^2 z^2) - ln(1 + z^2) - c  in [-|c|, |c|]   (the first difference lies
           between 0 and 2c), so the dilation term is at most P*beta for *every* z;
  Laplace: (r - 1)|z| - c  <= (e^beta - 1)|z| if c > 0, <= beta if c < 0; summed:
           <= max((e^beta - 1) ||z||_1, P beta), and ||z||_1 ~ Gamma(P, 1) under h.

Hence Cauchy: L <= a + P beta everywhere, pure (a + P beta)-DP.  Laplace: L <= a + eps_d
except on {||z||_1 > G} where (e^beta - 1) G <= eps_d and P beta <= eps_d; a privacy-loss
tail Pr[L > eps] <= delta' gives (eps, delta')-DP.  (This direct argument avoids the factor
e^{eps/2} that chaining Nissim et al.'s two admissibility inequalities puts on delta/2.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from certdp.privacy.mechanisms.base import Mechanism
from certdp.privacy.noise import cauchy, laplace


@dataclass(frozen=True)
class CauchyParams(Mechanism):
    """Pure DP release of P parameters (the AGS tables): independent Cauchy(u/(eps - P beta));
    default beta = eps/(2P), i.e. scale 2u/eps.  Any beta < eps/P is admissible.

    Derivation (see the block comment above): the privacy loss is at most a + P*beta for every
    output, with a = eps - P*beta the sliding budget; beta = eps/(2P) gives a = eps/2 and the
    scale u/a = 2u/eps.  This is tighter than Corollary 4.1's proof (which bounds each dilation
    term by 3|lambda| instead of |lambda|), so the tables' setting *is* provably eps-DP."""
    epsilon: float
    n_params: int
    beta: float | None = None
    name = "cauchy_p"
    kind = "smooth"
    query = "parameter"
    regime = "pure"
    noise = staticmethod(cauchy)
    description = "the P-parameter Cauchy release u/(eps - P beta)"
    strict_beta = True

    def max_beta(self) -> float:
        return self.epsilon / self.n_params

    def default_beta(self) -> float:
        return self.epsilon / (2 * self.n_params)

    def scale(self, u):
        return u / (self.epsilon - self.n_params * self.beta)


@dataclass(frozen=True)
class CauchyParams6(Mechanism):
    """Corollary 4.1 (C): independent Cauchy(6u/eps), beta <= eps/(6P); pure eps-DP.

    Sliding budget a = eps/6, dilation <= P beta <= eps/6 (pointwise), total eps/3 <= eps."""
    epsilon: float
    n_params: int
    beta: float | None = None
    name = "cauchy6_p"
    kind = "smooth"
    query = "parameter"
    regime = "pure"
    scale_factor = 6
    noise = staticmethod(cauchy)
    description = "Corollary 4.1's Cauchy release (6u/eps)"

    def max_beta(self) -> float:
        return self.epsilon / (6 * self.n_params)


def gamma_tail(p: int, delta: float) -> float:
    """G with Pr[Gamma(p, 1) > G] = delta/2: the l1 norm of p i.i.d. standard Laplace draws."""
    from scipy.stats import gamma
    return float(gamma.isf(delta / 2, p))


@dataclass(frozen=True)
class LaplaceParams(Mechanism):
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
    name = "laplace_p"
    kind = "smooth"
    query = "parameter"
    regime = "approx"
    scale_factor = 2
    noise = staticmethod(laplace)
    description = "the Gamma-tail Laplace release (2u/eps)"

    def max_beta(self) -> float:
        G = gamma_tail(self.n_params, self.delta)
        return min(math.log1p(self.epsilon / (2 * G)), self.epsilon / (2 * self.n_params))


@dataclass(frozen=True)
class LaplaceParamsUnion(Mechanism):
    """Corollary 4.1 (L): independent Laplace(2u/eps), beta <= eps/(2P(1 + 2 ln(2P/delta))),
    additionally beta <= 1 (the proof uses e^beta - 1 <= 2 beta); (eps, delta)-DP.

    On B = {max_j |z_j| <= ln(2P/delta)} (Pr[not B] <= delta/2 by a union bound) the dilation
    term is <= (e^beta - 1) P ln(2P/delta) <= 2 beta P ln(2P/delta) <= eps/2, and P beta <= eps/2."""
    epsilon: float
    delta: float
    n_params: int
    beta: float | None = None
    name = "laplace_union_p"
    kind = "smooth"
    query = "parameter"
    regime = "approx"
    scale_factor = 2
    noise = staticmethod(laplace)
    description = "Corollary 4.1's Laplace release (union bound)"

    def max_beta(self) -> float:
        p = self.n_params
        return min(self.epsilon / (2 * p * (1 + 2 * math.log(2 * p / self.delta))), 1.0)
