"""DP-SGD / PATE baselines: noise calibration against dp-accounting, matched training mechanics."""

import math

import pytest
import torch

from certdp.methods.dpsgd import (dpsgd_matched, gdp_mu, matched_noise, opacus_sigma, participations,
                                  pate_labels)
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan


def _pld_gaussian_eps(sigma_over_sens: float, count: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting import dp_event
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(sigma_over_sens), count)
    return acc.get_epsilon(delta)


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


def test_participations_fixed_plan():
    st = TrainSettings(steps=200, lr=0.5, clip=0.05, batch_size=20, seed=0)
    assert participations(batch_plan(200, st), 200) == 20
    st_full = TrainSettings(steps=7, lr=0.5, clip=0.05)
    assert participations(batch_plan(50, st_full), 50) == 7


def test_matched_training_noise_free_limit():
    """At huge epsilon the matched run equals the nominal algorithm."""
    from certdp.training import train
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = torch.where(torch.randn(40, generator=g) > 0, 1.0, -1.0).to(torch.float64)
    m = ModelSpec((3, 1), "hinge")
    st = TrainSettings(steps=10, lr=0.5, clip=0.05, batch_size=10, seed=0)
    plan = batch_plan(40, st)
    th = dpsgd_matched(m, m.init(0), x, y, st, plan, regime="pure", epsilon=1e12, delta=0.0, n_draws=2,
                       gen=torch.Generator().manual_seed(1))
    assert torch.allclose(th, train(m, m.init(0), x, y, st, plan=plan).expand(2, -1), atol=1e-6)


def test_opacus_sigma_against_dp_accounting_rdp():
    import dp_accounting
    from dp_accounting import dp_event
    q, steps, eps, delta = 0.02, 100, 2.0, 1e-5
    sigma = opacus_sigma(epsilon=eps, delta=delta, sample_rate=q, steps=steps, accountant="rdp")
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    assert acc.get_epsilon(delta) == pytest.approx(eps, rel=0.05)
    assert opacus_sigma(epsilon=eps, delta=delta, sample_rate=q, steps=steps, accountant="prv") <= sigma


def test_pate_gaussian_calibration():
    m, eps, delta = 200, 3.0, 1e-5
    sigma = math.sqrt(2 * m) / gdp_mu(eps, delta)
    assert _pld_gaussian_eps(sigma / math.sqrt(2), m, delta) == pytest.approx(eps, rel=0.02)
    votes = torch.zeros(5, 3, dtype=torch.float64)
    votes[:, 1] = 1e6
    lab = pate_labels(votes, regime="pure", epsilon=1.0, delta=0.0, gen=torch.Generator().manual_seed(0))
    assert (lab == 1).all()
