"""Staircase (index discount) and caps, beta rules, and the DP inequalities of the releases checked
numerically (privacy-loss bounds on a grid; hockey-stick divergence by integration)."""

import math

import numpy as np
import pytest
import torch

from certdp.errors import ConfigError
from certdp.privacy.mechanisms import (CauchySmooth, CauchyTight, GaussianGlobal, LaplaceGlobal,
                                       LaplaceSmooth, analytic_gaussian_sigma)
from certdp.privacy.sensitivity import staircase

D = torch.float64


def _box(vals):
    """Query bounds from (lo, hi) pairs per radius: lo/hi [K, 1, 1]."""
    lo = torch.tensor([[[a]] for a, _ in vals], dtype=D)
    hi = torch.tensor([[[b]] for _, b in vals], dtype=D)
    return lo, hi


def test_sound_bounding_function_uses_neighbouring_radii_not_the_nominal():
    # T_1 -> [0.9, 1.1], T_2 -> [0.7, 1.3], nominal 1.0
    lo, hi = _box([(0.9, 1.1), (0.7, 1.3)])
    sc = staircase(lo, hi, torch.tensor([[1.0]], dtype=D), torch.tensor([1, 2]), n_total=100,
                   global_sensitivity=torch.tensor([5.0], dtype=D))
    a = dict(zip(sc.k.tolist(), sc.a_bar[0].tolist()))
    assert a[0] == pytest.approx(0.1)            # max(1.1 - 1.0, 1.0 - 0.9)
    assert a[1] == pytest.approx(0.4)            # max(1.3 - 0.9, 1.1 - 0.7): not 0.3 from the nominal
    assert a[2] == pytest.approx(5.0)            # beyond the largest radius: the global sensitivity
    assert sc.source[-1] == "global" and sc.phi.tolist() == [0, 1, 2]


def test_sparse_radii_are_discounted_by_their_index_and_capped_by_gs():
    lo, hi = _box([(0.9, 1.1), (0.5, 1.5), (-9.0, 9.0)])
    sc = staircase(lo, hi, torch.tensor([[1.0]], dtype=D), torch.tensor([1, 4, 10]), n_total=10,
                   global_sensitivity=torch.tensor([3.0], dtype=D))
    assert sc.k.tolist() == [0, 1, 4, 10] and sc.phi.tolist() == [0, 1, 2, 3]
    assert sc.source == ("computed", "computed", "computed", "ceiling")
    a = sc.a_bar[0].tolist()
    assert a[0] == pytest.approx(0.1)          # nominal against T_1
    assert a[1] == pytest.approx(0.6)          # T_1 against T_4 (no back-filled radii 2, 3)
    assert a[2] == pytest.approx(3.0)          # T_4 against T_10, capped by GS
    assert a[3] == pytest.approx(3.0)          # T_N, capped
    # SS^beta discounts the j-th value by e^{-beta j}, j the index of the radius, not the radius
    beta = 0.3
    expect = max(v * math.exp(-beta * j) for j, v in enumerate(a))
    assert float(sc.smooth(beta)[0]) == pytest.approx(expect, rel=1e-10)
    assert float(sc.smooth(beta)[0]) >= a[0]


def test_staircase_without_gs_must_reach_n():
    lo, hi = _box([(0.9, 1.1)])
    with pytest.raises(ConfigError, match="staircase"):
        staircase(lo, hi, torch.tensor([[1.0]], dtype=D), torch.tensor([1]), n_total=50, global_sensitivity=None)
    lo, hi = _box([(0.9, 1.1), (-3, 4)])
    sc = staircase(lo, hi, torch.tensor([[1.0]], dtype=D), torch.tensor([1, 50]), n_total=50, global_sensitivity=None)
    assert torch.isfinite(sc.a_bar).all() and float(sc.a_bar[0, -1]) == pytest.approx(7.0)


def test_beta_rules_and_scales():
    assert CauchySmooth(1.2).beta == pytest.approx(0.2) and CauchySmooth(1.2).scale(1.0) == pytest.approx(5.0)
    assert CauchyTight(1.0).beta == 0.5 and CauchyTight(1.0).scale(1.0) == pytest.approx(2.0)
    lap = LaplaceSmooth(1.0, 1e-5)
    assert lap.beta == pytest.approx(1 / (2 * math.log(2e5))) and lap.scale(1.0) == pytest.approx(2.0)
    assert LaplaceGlobal(2.0).scale(3.0) == pytest.approx(1.5)
    assert GaussianGlobal(0.5, 1e-5).scale(1.0) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    for bad in (lambda: CauchySmooth(1.0, beta=0.2), lambda: CauchyTight(1.0, beta=1.0),
                lambda: LaplaceSmooth(1.0, 1e-5, beta=0.1), lambda: LaplaceSmooth(1.0, 1.5),
                lambda: CauchyTight(-1.0)):
        with pytest.raises(ConfigError):
            bad()


def _cauchy_logpdf(z, s):
    return np.log(s / math.pi) - np.log(s * s + z * z)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_tight_cauchy_privacy_loss_is_at_most_eps(eps):
    # Neighbours: q' = q + shift with |shift| <= S, smooth bounds S' = S e^{+-beta}.
    m = CauchyTight(eps)
    S = 1.0
    y = np.linspace(-200, 200, 400001)
    worst = 0.0
    for shift in (-S, -0.5 * S, 0.0, 0.5 * S, S):
        for S2 in (S * math.exp(m.beta), S * math.exp(-m.beta), S):
            l1 = _cauchy_logpdf(y, m.scale(S))
            l2 = _cauchy_logpdf(y - shift, m.scale(S2))
            worst = max(worst, float(np.max(np.abs(l1 - l2))))
    assert worst <= eps + 1e-9


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (2.0, 1e-3)])
def test_smooth_laplace_hockey_stick_is_at_most_delta(eps, delta):
    m = LaplaceSmooth(eps, delta)
    S = 1.0
    y = np.linspace(-400, 400, 1600001)
    dy = y[1] - y[0]
    for shift in (S, -S):
        for S2 in (S * math.exp(m.beta), S * math.exp(-m.beta)):
            for (sa, qa), (sb, qb) in [((m.scale(S), 0.0), (m.scale(S2), shift)),
                                      ((m.scale(S2), shift), (m.scale(S), 0.0))]:
                p = np.exp(-np.abs(y - qa) / sa) / (2 * sa)
                q = np.exp(-np.abs(y - qb) / sb) / (2 * sb)
                hs = np.sum(np.maximum(p - math.exp(eps) * q, 0)) * dy
                assert hs <= delta * 1.01


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0, 10.0])
def test_gaussian_global_meets_delta(eps):
    from scipy.stats import norm
    delta = 1e-5
    sig = GaussianGlobal(eps, delta).scale(1.0)
    achieved = norm.cdf(1 / (2 * sig) - eps * sig) - math.exp(eps) * norm.cdf(-1 / (2 * sig) - eps * sig)
    assert achieved <= delta * (1 + 1e-6)
    assert analytic_gaussian_sigma(eps, delta) <= sig * (1 + 1e-9)


@pytest.mark.parametrize("eps", [700.0, 1e3, 1e37, 1e300])
def test_analytic_gaussian_sigma_at_huge_epsilon_is_finite_and_meets_delta(eps):
    # e^eps overflows above eps ~ 709: the log-space form must give a finite sigma whose
    # privacy profile (evaluated in logs) is within delta, and agree with the direct form at 700
    from scipy.stats import norm
    delta = 1e-5
    sig = analytic_gaussian_sigma(eps, delta)
    assert math.isfinite(sig) and sig > 0
    a, b = 1 / (2 * sig), eps * sig
    assert norm.cdf(a - b) - math.exp(eps + norm.logcdf(-a - b)) <= delta * (1 + 1e-6)
    if eps == 700.0:
        assert sig == pytest.approx(analytic_gaussian_sigma(699.9999999, delta), rel=1e-6)


def _smooth_laplace_worst_delta(eps: float, delta: float, beta: float) -> float:
    """The exact delta(eps) of the smooth Laplace release (scale 2S/eps) over the corners of the
    neighbours its proof admits: centres |c - c'| <= min(S, S'), S' = S e^{+-beta}."""
    from certdp.privacy.loss import Release1D, delta_of
    worst = 0.0
    for s2 in (math.exp(beta), math.exp(-beta)):
        shift = min(1.0, s2)
        a = Release1D("laplace", 0.0, 2.0 / eps)
        b = Release1D("laplace", shift, 2.0 * s2 / eps)
        worst = max(worst, float(delta_of(a, b, eps)))
    return worst


@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0, 8.0, 15.0, 30.0, 100.0])
def test_smooth_laplace_beta_keeps_delta_at_every_epsilon(eps, delta):
    """Exact hockey-stick divergence (privacy.loss) on the worst admissible pair: the shipped beta
    keeps it <= delta at every eps, and equals Nissim et al.'s eps / (2 ln(2/delta)) wherever that
    rule holds (so the small-eps releases are unchanged)."""
    m = LaplaceSmooth(eps, delta)
    assert _smooth_laplace_worst_delta(eps, delta, m.beta) <= delta * (1 + 1e-9)
    first_order = eps / (2 * math.log(2 / delta))
    if eps <= 2.0:
        assert m.beta == first_order


def test_smooth_laplace_first_order_beta_fails_at_large_epsilon():
    """The planted bug the rule above removes: Nissim et al.'s first-order beta at eps = 15,
    delta = 1e-5 is not (eps, delta)-DP on an admissible pair (the check can fail)."""
    eps, delta = 15.0, 1e-5
    assert _smooth_laplace_worst_delta(eps, delta, eps / (2 * math.log(2 / delta))) > delta
    assert LaplaceSmooth(eps, delta).beta < eps / (2 * math.log(2 / delta))


@pytest.mark.parametrize("eps", [1e3, 1e6, 1e300])
def test_smooth_laplace_beta_is_finite_at_huge_epsilon(eps):
    """The beta rule never overflows (e^b of the first-order beta would): a finite beta in (0, eps/2]
    that meets the dilation condition."""
    from certdp.privacy.mechanisms.prediction import laplace_max_beta
    b = laplace_max_beta(eps, 1e-5)
    assert 0 < b <= eps / 2 and math.isfinite(b)
    assert math.log(eps / 2 + b) >= math.log(math.log(2e5)) + b + math.log(-math.expm1(-b))
