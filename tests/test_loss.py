"""Exact privacy loss of the 1-D releases (closed forms, quadrature) and the empirical epsilon
lower bound (validity and power on Laplace pairs of known epsilon)."""

import math

import numpy as np
import pytest
from scipy import integrate

from certdp.privacy.empirical import clopper_pearson, epsilon_lower_bound, sample_release
from certdp.privacy.loss import Release1D, delta_of, hockey_stick, pure_loss, release_for
from certdp.privacy.mechanisms import CauchySmooth, CauchyTight, LaplaceSmooth


def _quad_hockey(a, b, eps):
    """int (p_a - e^eps p_b)_+ over the open range, plus the atoms, by adaptive quadrature."""
    f = lambda y: max(math.exp(float(a.log_density(y))) - math.exp(eps) * math.exp(float(b.log_density(y))), 0.0)
    edges = sorted({a.lo, a.hi, *[float(c) for c in (a.center, b.center) if a.lo < float(c) < a.hi]})
    val = sum(integrate.quad(f, u, v, limit=400, epsabs=1e-13, epsrel=1e-11)[0] for u, v in zip(edges[:-1], edges[1:]))
    (la, ha), (lb, hb) = a.atoms(), b.atoms()
    return val + sum(max(math.exp(float(x)) - math.exp(eps) * math.exp(float(y)), 0.0) for x, y in ((la, lb), (ha, hb)))


@pytest.mark.parametrize("s,d", [(1.0, 0.3), (0.5, 2.0), (3.0, 30.0)])
def test_equal_scales_closed_forms(s, d):
    lap = pure_loss(Release1D("laplace", 0.0, s), Release1D("laplace", d, s))
    assert float(lap) == pytest.approx(d / s, rel=1e-12)                        # |Delta| / b
    cau = pure_loss(Release1D("cauchy", 0.0, s), Release1D("cauchy", d, s))
    assert float(cau) == pytest.approx(2 * math.asinh(d / (2 * s)), rel=1e-12)  # sliding bound
    mu = d / s
    for eps in (0.0, 0.5 * mu, 0.99 * mu, 1.5 * mu):
        want = max(0.0, 1 - math.exp((eps - mu) / 2))                           # Laplace shift
        got = float(hockey_stick(Release1D("laplace", 0.0, s), Release1D("laplace", d, s), eps))
        assert got == pytest.approx(want, abs=1e-13)


@pytest.mark.parametrize("family", ["cauchy", "laplace"])
@pytest.mark.parametrize("rng_", [None, (-3.0, 4.0)])
def test_different_scales_against_quadrature_and_a_grid(family, rng_):
    gen = np.random.default_rng(3)
    kw = {} if rng_ is None else {"lo": rng_[0], "hi": rng_[1]}
    for _ in range(4):
        c1, c2 = gen.normal(0, 2, 2)
        s1, s2 = np.exp(gen.normal(0, 0.6, 2))
        a, b = Release1D(family, c1, s1, **kw), Release1D(family, c2, s2, **kw)
        for eps in (0.1, 0.7):
            assert float(hockey_stick(a, b, eps)) == pytest.approx(_quad_hockey(a, b, eps), abs=1e-9)
            assert float(delta_of(a, b, eps)) >= float(hockey_stick(b, a, eps)) - 1e-15
        pl = float(pure_loss(a, b))
        lo, hi = (-50.0, 50.0) if rng_ is None else rng_
        ys = np.linspace(lo, hi, 200001)[1:-1]
        grid = float(np.abs(a.log_density(ys) - b.log_density(ys)).max())
        if rng_ is not None:
            (la, ha), (lb, hb) = a.atoms(), b.atoms()
            grid = max(grid, abs(float(la - lb)), abs(float(ha - hb)))
        assert pl >= grid - 1e-9                           # the analytic sup is never below a grid
        if family == "cauchy" or rng_ is not None:
            assert pl <= grid + 1e-3                       # and the grid gets close to it
        else:
            assert math.isinf(pl) == (s1 != s2)            # unclipped Laplace with unequal scales


def test_clipping_is_post_processing():
    a, b = Release1D("cauchy", 0.2, 1.0), Release1D("cauchy", 1.1, 1.4)
    ac, bc = Release1D("cauchy", 0.2, 1.0, -1.0, 2.0), Release1D("cauchy", 1.1, 1.4, -1.0, 2.0)
    assert float(pure_loss(ac, bc)) <= float(pure_loss(a, b)) + 1e-12
    for eps in (0.05, 0.3):
        assert float(delta_of(ac, bc, eps)) <= float(delta_of(a, b, eps)) + 1e-12


@pytest.mark.parametrize("eps", [0.02, 0.3, 2.0])
def test_smooth_releases_meet_their_claim_on_admissible_pairs(eps):
    """Neighbours with |q - q'| <= min(S, S') and S' = e^{+-beta} S: the tight Cauchy and the
    6S/eps Cauchy are eps-DP, the smooth Laplace (eps, delta)-DP, exactly, with clipping or not."""
    s0 = np.geomspace(0.01, 100.0, 9)
    for mech in (CauchyTight(eps), CauchySmooth(eps)):
        for r in (-1.0, 0.0, 1.0):
            s1 = s0 * math.exp(r * mech.beta)
            for rng_ in (None, (-1.0, 1.0)):
                a = release_for(mech, center=0.0, sensitivity=s0, output_range=rng_)
                b = release_for(mech, center=np.minimum(s0, s1), sensitivity=s1, output_range=rng_)
                assert (pure_loss(a, b) <= eps * (1 + 1e-9)).all()
    lap = LaplaceSmooth(eps, 1e-5)
    for r in (-1.0, 1.0):
        s1 = s0 * math.exp(r * lap.beta)
        a = release_for(lap, center=0.0, sensitivity=s0)
        b = release_for(lap, center=np.minimum(s0, s1), sensitivity=s1)
        assert (delta_of(a, b, eps) <= 1e-5).all()
    # the bound is not vacuous: a shift of min(S, S') with S' = e^{+-beta} S uses over half of eps
    m = CauchyTight(eps)
    worst = max(float(pure_loss(release_for(m, center=0.0, sensitivity=1.0),
                                release_for(m, center=min(1.0, math.exp(r * m.beta)), sensitivity=math.exp(r * m.beta))))
                for r in (-1.0, 1.0))
    assert 0.5 * eps < worst <= eps


def test_release_for_rejects_gaussian_and_bad_scales():
    from certdp.privacy.mechanisms import GaussianGlobal
    with pytest.raises(ValueError):
        release_for(GaussianGlobal(1.0, 1e-5), center=0.0, sensitivity=1.0)
    with pytest.raises(ValueError):
        Release1D("cauchy", 0.0, 0.0)


def test_clopper_pearson_is_exact_at_the_ends():
    lo, hi = clopper_pearson(np.array([0, 10]), np.array([10, 10]), 0.05)
    assert lo[0] == 0.0 and hi[1] == 1.0
    assert hi[0] == pytest.approx(1 - 0.05 ** (1 / 10)) and lo[1] == pytest.approx(0.05 ** (1 / 10))


@pytest.mark.slow
def test_empirical_lower_bound_on_laplace_pairs():
    """Laplace(0, 1) vs Laplace(1, 1) is exactly 1-DP: the bound is valid and nearly tight."""
    rng = np.random.default_rng(0)
    a, b = Release1D("laplace", 0.0, 1.0), Release1D("laplace", 1.0, 1.0)
    n = 400_000
    res = epsilon_lower_bound(sample_release(a, n, rng), sample_release(b, n, rng), alpha=0.05)
    assert 0.75 < res.epsilon <= 1.0
    # unequal scales at delta = 0.01: the true epsilon(delta) from the exact hockey-stick divergence
    c = Release1D("laplace", 0.0, 0.5)
    lo_e, hi_e = 0.0, 50.0
    for _ in range(80):
        mid = (lo_e + hi_e) / 2
        lo_e, hi_e = (mid, hi_e) if float(delta_of(c, b, mid)) > 0.01 else (lo_e, mid)
    res = epsilon_lower_bound(sample_release(c, n, rng), sample_release(b, n, rng), delta=0.01, alpha=0.05)
    assert 0.5 * hi_e < res.epsilon <= hi_e
    # validity: with fixed events, P[bound > true eps] <= alpha (union bound: far below)
    exceed = 0
    for _ in range(60):
        r = epsilon_lower_bound(sample_release(a, 3000, rng), sample_release(b, 3000, rng), alpha=0.1,
                                select="fixed", thresholds=[-1.0, 0.0, 0.5, 1.0, 2.0])
        exceed += r.epsilon > 1.0
    assert exceed <= 6
    with pytest.raises(ValueError):
        epsilon_lower_bound([0.0, 1.0], [1.0, 2.0], select="fixed")
