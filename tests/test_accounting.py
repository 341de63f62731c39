"""Amplification and composition helpers: closed forms, inversions, orderings."""

import math

import numpy as np
import pytest
from scipy.special import comb

from certdp.privacy.accounting import (amplify_wor, base_budget_wor, compose_advanced, compose_basic,
                                       compose_optimal, optimal_delta, optimal_per_release_epsilon,
                                       pld_laplace_epsilon)


# ---------------------------------------------------------------- amplification (Lemma 3.1)

@pytest.mark.parametrize("eps,delta,q", [(1.0, 1e-5, 1 / 1024), (0.1, 1e-5, 0.5), (10.0, 0.0, 1 / 3), (2.0, 1e-6, 1.0)])
def test_wor_closed_form_and_round_trip(eps, delta, q):
    eb, db = base_budget_wor(epsilon=eps, delta=delta, q=q)
    assert eb == pytest.approx(math.log(1 + (math.exp(eps) - 1) / q), rel=1e-12)
    assert db == pytest.approx(delta / q, rel=1e-12)
    e2, d2 = amplify_wor(epsilon_base=eb, delta_base=db, q=q)
    assert e2 == pytest.approx(eps, rel=1e-12)
    assert d2 == pytest.approx(delta, rel=1e-12, abs=1e-300)
    assert eb >= eps


def test_wor_paper_table_form():
    # paper table: eps_b = ln(1 + T(e^eps - 1)), delta_b = T delta with q = 1/T
    T, eps, delta = 64, 0.5, 1e-5
    eb, db = base_budget_wor(epsilon=eps, delta=delta, q=1 / T)
    assert eb == pytest.approx(math.log(1 + T * math.expm1(eps)))
    assert db == pytest.approx(T * delta)


def test_wor_amplifies_and_identity_at_q1():
    assert amplify_wor(epsilon_base=1.0, delta_base=1e-5, q=1.0) == pytest.approx((1.0, 1e-5))
    e, d = amplify_wor(epsilon_base=1.0, delta_base=1e-5, q=0.01)
    assert e < 1.0 * 0.01 * math.e and d == pytest.approx(1e-7)


def test_wor_rejects_bad_input():
    with pytest.raises(ValueError, match="delta/q"):
        base_budget_wor(epsilon=1.0, delta=1e-2, q=1 / 200)
    for kw in ({"q": 0.0}, {"q": 1.5}):
        with pytest.raises(ValueError):
            base_budget_wor(epsilon=1.0, **kw)
    with pytest.raises(ValueError):
        amplify_wor(epsilon_base=-1.0, q=0.5)
    with pytest.raises(TypeError):
        amplify_wor(1.0, 0.0, 0.5)      # keyword-only


def test_wor_large_epsilon_is_finite():
    eb, _ = base_budget_wor(epsilon=800.0, q=1e-3)
    assert eb == pytest.approx(800.0 - math.log(1e-3))


# ---------------------------------------------------------------- composition

def test_basic_and_advanced_closed_forms():
    assert compose_basic(epsilon=0.3, delta=1e-6, n=10) == pytest.approx((3.0, 1e-5))
    e0, n, dp = 0.1, 100, 1e-5
    e, d = compose_advanced(epsilon=e0, delta=1e-7, n=n, delta_prime=dp)
    assert e == pytest.approx(e0 * math.sqrt(2 * n * math.log(1 / dp)) + n * e0 * (math.exp(e0) - 1))
    assert d == pytest.approx(n * 1e-7 + dp)
    with pytest.raises(ValueError):
        compose_basic(epsilon=1.0, n=0)
    with pytest.raises(ValueError):
        compose_advanced(epsilon=1.0, n=3, delta_prime=0.0)


@pytest.mark.parametrize("e0,d0", [(1.0, 0.0), (0.3, 1e-6), (5.0, 1e-3)])
def test_optimal_n1_is_the_mechanism(e0, d0):
    assert compose_optimal(epsilon=e0, delta=d0, n=1, target_delta=d0) == pytest.approx(e0, rel=1e-10)


def test_optimal_pure_at_zero_delta_is_basic():
    assert compose_optimal(epsilon=0.5, n=7, target_delta=0.0) == pytest.approx(3.5)


def test_optimal_matches_kairouz_breakpoints():
    # Kairouz, Oh, Viswanath Thm 3.3: ((n - 2i) eps0, 1 - (1 - d0)^n (1 - delta_i)) with
    # delta_i = sum_{l < i} C(n, l) (e^{(n-l) eps0} - e^{(n-2i+l) eps0}) / (1 + e^eps0)^n
    n, e0, d0 = 6, 0.4, 1e-4
    for i in range(n // 2 + 1):
        di = sum(comb(n, l) * (math.exp((n - l) * e0) - math.exp((n - 2 * i + l) * e0)) for l in range(i)) / (1 + math.exp(e0)) ** n
        want = 1 - (1 - d0) ** n * (1 - di)
        assert optimal_delta(epsilon0=e0, delta0=d0, n=n, epsilon=(n - 2 * i) * e0) == pytest.approx(want, rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("e0,n", [(0.1, 100), (1.0, 10), (0.02, 1000)])
def test_optimal_is_below_basic_and_advanced(e0, n):
    td = 1e-5
    opt = compose_optimal(epsilon=e0, n=n, target_delta=td)
    assert opt <= compose_basic(epsilon=e0, n=n)[0] + 1e-12
    assert opt <= compose_advanced(epsilon=e0, n=n, delta_prime=td)[0] + 1e-12
    # and it is a valid (tight) point: its delta is the target
    assert optimal_delta(epsilon0=e0, n=n, epsilon=opt) <= td * (1 + 1e-9)


def test_optimal_unreachable_delta_raises():
    with pytest.raises(ValueError, match="unreachable"):
        compose_optimal(epsilon=1.0, delta=1e-3, n=10, target_delta=1e-3)


@pytest.mark.parametrize("eps,n", [(5.0, 256), (1.0, 16), (0.5, 1)])
def test_optimal_inverse_round_trip(eps, n):
    e0 = optimal_per_release_epsilon(epsilon=eps, delta=1e-5, n=n)
    assert e0 >= eps / n - 1e-12
    total = compose_optimal(epsilon=e0, n=n, target_delta=1e-5)
    assert total <= eps + 1e-9
    assert total == pytest.approx(eps, rel=1e-6)


def test_optimal_inverse_gain_paper_value():
    # paper appendix: optimal composition gains up to ~3.5x over eps/n at eps = 5, n = 2^8
    e0 = optimal_per_release_epsilon(epsilon=5.0, delta=1e-5, n=256)
    assert 3.3 < e0 / (5.0 / 256) < 3.8


@pytest.mark.parametrize("e0,n", [(1.0, 1), (0.5, 10), (0.1, 50)])
def test_pld_laplace_at_most_basic(e0, n):
    eps = pld_laplace_epsilon(scale=1 / e0, n=n, delta=1e-6)
    assert eps <= n * e0 + 1e-3
    assert eps <= compose_optimal(epsilon=e0, n=n, target_delta=1e-6) + 1e-3


def test_pld_single_laplace_is_its_epsilon():
    assert pld_laplace_epsilon(scale=2.0, sensitivity=1.0, n=1, delta=1e-9) == pytest.approx(0.5, abs=2e-3)
    # only the ratio scale/sensitivity matters
    a = pld_laplace_epsilon(scale=4.0, sensitivity=2.0, n=5, delta=1e-5)
    b = pld_laplace_epsilon(scale=2.0, sensitivity=1.0, n=5, delta=1e-5)
    assert a == pytest.approx(b)


def test_keyword_only_everywhere():
    for fn, args in ((compose_basic, (1.0, 0.0, 2)), (compose_optimal, (1.0, 0.0, 2, 1e-5)),
                     (optimal_per_release_epsilon, (1.0, 1e-5, 2)), (pld_laplace_epsilon, (1.0, 2, 1e-5))):
        with pytest.raises(TypeError):
            fn(*args)
    assert np.isfinite(compose_optimal(epsilon=0.0, n=3, target_delta=1e-5))


def test_accountants_at_huge_epsilon_fall_back_to_a_valid_split():
    from certdp.privacy.accounting import accountant_names, compose_advanced, per_release_budget, pld_epsilon
    for name in accountant_names("compose"):
        e0, d0 = per_release_budget(name, epsilon=1e6, delta=1e-5, n=2)
        assert np.isfinite(e0) and e0 >= 5e5 * (1 - 1e-12) and 0 <= d0 <= 1e-5, name
    assert pld_epsilon(epsilon0=800.0, delta0=0.0, n=2, delta=1e-5) == np.inf
    assert compose_advanced(epsilon=800.0, n=2, delta_prime=1e-5)[0] == np.inf
