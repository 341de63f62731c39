"""DP-SGD / PATE baselines and the shared Poisson DP-SGD loop: noise calibration against
dp-accounting, training mechanics."""

import math

import pytest
import torch

from certdp.baselines import dpsgd_matched, matched_noise, participations
from certdp.certify.pate import pate_labels
from certdp.privacy.mechanisms import gdp_mu
from certdp.privacy.dpsgd_core import (accounted_epsilon, calibrated_noise, clip_factors, dpsgd_steps,
                                       noise_multiplier, poisson_schedule, train_dpsgd)
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan


def _pld_gaussian_eps(sigma_over_sens: float, count: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting import dp_event
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(sigma_over_sens), count)
    return acc.get_epsilon(delta)


@pytest.mark.slow
@pytest.mark.parametrize("eps,c", [(1.0, 20), (5.0, 200), (20.0, 300)])
def test_matched_gaussian_composes_to_target(eps, c):
    P, clip, delta = 9, 0.05, 1e-5
    sigma = matched_noise(regime="approx", epsilon=eps, delta=delta, clip=clip, n_params=P, compositions=c)
    sens = 2 * clip * math.sqrt(P)
    got = _pld_gaussian_eps(sigma / sens, c, delta)
    assert got == pytest.approx(eps, rel=0.02)       # exact composition: tight, not loose
    assert got <= eps * 1.005                          # (PLD is pessimistic: never far above)


def test_matched_laplace_basic():
    b = matched_noise(regime="pure", epsilon=2.0, delta=0.0, clip=0.05, n_params=9, compositions=20)
    assert b == pytest.approx(2 * 0.05 * 9 * 20 / 2.0)


@pytest.mark.parametrize("eps,T", [(20.0, 200), (100.0, 200), (1.0, 10)])
def test_matched_basic_composition_arm_is_per_step_dp(eps, T):
    """The basic-composition matched arm: each of the T steps is (eps/T, delta/T)-DP on its own
    (the analytic Gaussian is exact: delta(eps/T) = delta/T), pure DP is Laplace with eps/T."""
    from scipy.stats import norm
    P, clip, delta = 9, 0.05, 1e-5
    sens = 2 * clip * math.sqrt(P)
    sigma = matched_noise(regime="approx", epsilon=eps, delta=delta, clip=clip, n_params=P, compositions=T, basic=True)
    e, D = eps / T, sens
    d = norm.cdf(D / (2 * sigma) - e * sigma / D) - math.exp(e) * norm.cdf(-D / (2 * sigma) - e * sigma / D)
    assert d <= delta / T * (1 + 1e-6) and d >= delta / T * 0.99
    assert sigma > matched_noise(regime="approx", epsilon=eps, delta=delta, clip=clip, n_params=P, compositions=T)
    b = matched_noise(regime="pure", epsilon=eps, delta=0.0, clip=clip, n_params=P, compositions=T, basic=True)
    assert b == pytest.approx(2 * clip * P * T / eps)


def test_participations_fixed_plan():
    train_settings = TrainSettings(steps=200, lr=0.5, clip=0.05, batch_size=20, seed=0)
    assert participations(batch_plan(200, train_settings), 200) == 20
    st_full = TrainSettings(steps=7, lr=0.5, clip=0.05)
    assert participations(batch_plan(50, st_full), 50) == 7


def test_matched_training_noise_free_limit():
    """At huge epsilon the matched run equals the nominal algorithm."""
    from certdp.training import train
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = torch.where(torch.randn(40, generator=g) > 0, 1.0, -1.0).to(torch.float64)
    m = ModelSpec((3, 1), "hinge")
    train_settings = TrainSettings(steps=10, lr=0.5, clip=0.05, batch_size=10, seed=0)
    plan = batch_plan(40, train_settings)
    th = dpsgd_matched(m, m.init(0), x, y, train_settings, plan, regime="pure", epsilon=1e12, delta=0.0, n_draws=2,
                       gen=torch.Generator().manual_seed(1))
    assert torch.allclose(th, train(m, m.init(0), x, y, train_settings, plan=plan).expand(2, -1), atol=1e-6)


def _poisson_gaussian_eps(accountant, sigma: float, q: float, steps: int, delta: float) -> float:
    from dp_accounting import dp_event
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(delta)


def _replace_one_eps(sigma: float, q: float, steps: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting.privacy_accountant import NeighboringRelation
    acc = dp_accounting.pld.PLDAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE,
                                          value_discretization_interval=1e-3)
    return _poisson_gaussian_eps(acc, sigma, q, steps, delta)


@pytest.mark.slow
def test_noise_multiplier_is_substitution_adjacent():
    """Every accountant's sigma meets the target under substitution of one record, checked by
    dp-accounting's replace-one PLD; the Opacus ones go through group privacy (k = 2), so their
    add/remove epsilon is half the target (checked by dp-accounting's independent RDP) and
    their sigma is larger than the tight replace-one one."""
    import dp_accounting
    from certdp.privacy.accounting import group_budget
    q, steps, eps, delta = 0.02, 100, 2.0, 1e-5
    sig = {a: noise_multiplier(epsilon=eps, delta=delta, sample_rate=q, steps=steps, accountant=a)
           for a in ("pld", "prv", "rdp")}
    for a, s in sig.items():
        assert _replace_one_eps(s, q, steps, delta) <= eps * 1.01, a
    assert _replace_one_eps(0.97 * sig["pld"], q, steps, delta) > eps     # pld's sigma is nearly the smallest
    assert sig["pld"] < sig["prv"] <= sig["rdp"]
    eps_a, delta_a = group_budget(eps, delta)
    rdp = dp_accounting.rdp.RdpAccountant()
    assert _poisson_gaussian_eps(rdp, sig["rdp"], q, steps, delta_a) == pytest.approx(eps_a, rel=0.05)
    # a replace-one pair is at add/remove distance 2, so it needs more noise than one add/remove step
    add_remove = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    assert _poisson_gaussian_eps(add_remove, sig["pld"], q, steps, delta) < eps


@pytest.mark.slow
def test_calibrated_noise_is_within_target_and_nearly_smallest():
    q, steps, eps, delta = 0.05, 60, 1.0, 5e-6
    for acc in ("pld", "prv"):
        sigma, got = calibrated_noise(epsilon=eps, delta=delta, sample_rate=q, steps=steps, accountant=acc)
        assert 0 < got <= eps
        assert accounted_epsilon(sigma=0.97 * sigma, delta=delta, sample_rate=q, steps=steps, accountant=acc) > eps


def test_poisson_schedule():
    assert poisson_schedule(batch_size=64, epochs=5, n=1000) == (64, 0.064, 78)
    assert poisson_schedule(batch_size=256, epochs=2, n=100) == (100, 1.0, 2)


def test_dpsgd_poisson_noise_free_full_batch_is_clipped_gd():
    """q = 1, sigma = 0: every record every step, so the loop is full-batch GD on per-sample
    gradients clipped to l2 norm C, theta <- theta - lr * sum / N."""
    g = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (30,), generator=g)
    from certdp.models import build_model
    m = build_model("logistic", 4, n_out=3)
    theta, clip, lr = m.init(0), 0.2, 0.7
    got = train_dpsgd(m, theta, x, y, lr=lr, clip=clip, sigma=0.0, sample_rate=1.0, steps=6, gen=torch.Generator())
    for _ in range(6):
        gr = m.per_sample_grads(theta, x, y)
        norms = gr.norm(dim=-1, keepdim=True)
        assert (norms * clip_factors(norms, clip) <= clip * (1 + 1e-12)).all()
        theta = theta - lr * (gr * torch.clamp(clip / norms, max=1.0)).sum(0) / 30
    torch.testing.assert_close(got, theta, rtol=1e-12, atol=1e-14)


def test_poisson_dpsgd_resumes_exactly_with_per_step_generators():
    """Steps 0..T in one go equal steps 0..k then k..T (the hybrid's resumable fine-tune)."""
    w = torch.zeros(5, dtype=torch.float64)
    x = torch.randn(50, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def run(state, start, stop):
        def grad_sum(idx, _gen):
            gr = x[idx] - state["w"]
            return {"w": (gr * clip_factors(gr.norm(dim=-1, keepdim=True), 1.0)).sum(0)}

        def update(noisy, expected_batch):
            state["w"] = state["w"] + 0.5 * noisy["w"] / expected_batch
        dpsgd_steps(n=50, steps=stop, sample_rate=0.2, clip=1.0, sigma=1.1, clipped_grad_sum=grad_sum,
                      apply_update=update, generator_at=lambda t: torch.Generator().manual_seed(100 + t), start=start)
        return state

    whole = run({"w": w.clone()}, 0, 12)["w"]
    resumed = run(run({"w": w.clone()}, 0, 5), 5, 12)["w"]
    assert torch.equal(whole, resumed)
    assert not torch.equal(whole, run({"w": w.clone()}, 1, 12)["w"])   # a skipped step changes the result


def test_pate_gaussian_calibration():
    m, eps, delta = 200, 3.0, 1e-5
    sigma = math.sqrt(2 * m) / gdp_mu(eps, delta)
    assert _pld_gaussian_eps(sigma / math.sqrt(2), m, delta) == pytest.approx(eps, rel=0.02)
    votes = torch.zeros(5, 3, dtype=torch.float64)
    votes[:, 1] = 1e6
    lab = pate_labels(votes, regime="pure", epsilon=1.0, delta=0.0, gen=torch.Generator().manual_seed(0))
    assert (lab == 1).all()


@pytest.mark.slow
def test_an_accountant_that_cannot_calibrate_is_a_one_line_config_error():
    """Under substitution, prv is asked for delta / (1 + e^{eps/2}) on add/remove (group privacy):
    at eps = 100 that is far below what opacus' PRV resolves -- a ConfigError naming the key that
    chose the accountant, not an opacus traceback; pld calibrates the same budget."""
    from certdp.errors import ConfigError
    from certdp.privacy.dpsgd_core import noise_multiplier
    with pytest.raises(ConfigError) as e:
        noise_multiplier(epsilon=100.0, delta=1e-5, sample_rate=0.32, steps=16, accountant="prv")
    assert e.value.key == "dpsgd.optimised.accountants" and "pld" in str(e.value) and "\n" not in str(e.value)
    assert noise_multiplier(epsilon=100.0, delta=1e-5, sample_rate=0.32, steps=16, accountant="pld") > 0
