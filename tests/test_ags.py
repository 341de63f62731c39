"""AGS: beta rules and scales against their derivations (numerical privacy-loss checks), the
accountants against known values, envelope collapse of multi-release, and soundness of the
parameter envelopes by retraining neighbours (blobs hinge; a small logistic head)."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import gamma as gamma_dist

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.errors import ConfigError
from certdp.bounds.shared import SharedBoxes
from certdp.certify import parameter_staircase, trivial_cover
from certdp.methods.ags import schedule
from certdp.models import ModelSpec
from certdp.privacy.accounting import pld_epsilon
from certdp.privacy.accounting import per_release_budget as budget
from certdp.privacy.mechanisms import (CauchyParams, CauchyParams6, LaplaceParams, LaplaceParamsUnion,
                                       gamma_tail, make_mechanism)
from certdp.settings import parse
from certdp.training import TrainSettings, batch_plan, train
from neighbourhoods import PLACEMENTS, neighbours

D = torch.float64


# ------------------------------------------------------------------ beta rules and scales
def test_rules_match_derivations():
    m = CauchyParams(2.0, 9)
    assert m.beta == pytest.approx(2.0 / 18) and m.scale(1.0) == pytest.approx(1.0)     # 2u/eps
    m6 = CauchyParams6(3.0, 5)
    assert m6.beta == pytest.approx(3.0 / 30) and m6.scale(1.0) == pytest.approx(2.0)
    lp = LaplaceParams(1.0, 1e-5, 45)
    G = gamma_dist.isf(0.5e-5, 45)
    assert lp.beta == pytest.approx(math.log1p(1.0 / (2 * G))) and lp.scale(1.0) == pytest.approx(2.0)
    lu = LaplaceParamsUnion(1.0, 1e-5, 9)
    assert lu.beta == pytest.approx(1.0 / (18 * (1 + 2 * math.log(18 / 1e-5))))
    assert lp.beta > lu.beta            # the Gamma tail is the tighter rule
    with pytest.raises(ConfigError):
        CauchyParams(1.0, 4, beta=0.25)    # beta must be < eps/P
    with pytest.raises(ConfigError):
        CauchyParams6(1.0, 4, beta=0.05)
    with pytest.raises(ConfigError):
        make_mechanism("gauss", query="parameter", epsilon=1.0, n_params=3)
    with pytest.raises(ConfigError):          # a prediction release is not a parameter release
        make_mechanism("cauchy", query="parameter", epsilon=1.0, n_params=3)


def _worst_loss_cauchy(mech, P, grid):
    """sup over outputs of the privacy loss between neighbours in the worst configuration of the
    derivation: S(y) = e^{-beta} S(x) or e^{beta} S(x), shift of l1 norm S(y) split over coords."""
    worst = 0.0
    s = 1.0
    for sgn in (-1, 1):
        s2 = s * math.exp(sgn * mech.beta)
        a, a2 = mech.scale(s), mech.scale(s2)
        for split in np.linspace(0, 1, 5):
            shift = min(s, s2) * np.array([split, 1 - split] + [0.0] * (P - 2))[:P]
            Z = np.stack(np.meshgrid(*[grid] * P, indexing="ij"), -1).reshape(-1, P)
            lx = -np.log1p((Z / a) ** 2).sum(-1) - P * np.log(a)
            ly = -np.log1p(((Z - shift) / a2) ** 2).sum(-1) - P * np.log(a2)
            worst = max(worst, float(np.max(np.abs(lx - ly))))
    return worst


@pytest.mark.parametrize("P", [1, 2])
def test_cauchy_release_pure_loss(P):
    grid = np.concatenate([-np.logspace(-3, 3, 150)[::-1], [0.0], np.logspace(-3, 3, 150)])
    for eps in (0.5, 2.0):
        for mech in (CauchyParams(eps, P), CauchyParams6(eps, P)):
            assert _worst_loss_cauchy(mech, P, grid) <= eps * (1 + 1e-9)
    # the check is not vacuous: the loss reaches a sizeable part of eps
    assert _worst_loss_cauchy(CauchyParams(2.0, 1), 1, grid) > 1.0


@pytest.mark.parametrize("P", [1, 2, 3])
def test_laplace_gamma_tail_delta(P):
    """Numerical delta(eps) = E_{z~h}[(1 - e^{eps - L(z)})_+] of the Gamma-tail rule, by Monte
    Carlo at a large delta (so that the tail is visible): must be <= delta."""
    rng = np.random.default_rng(0)
    delta = 0.05
    for eps in (0.5, 3.0):
        mech = LaplaceParams(eps, delta, P)
        s = 1.0
        worst = 0.0
        for sgn in (-1, 1):
            s2 = s * math.exp(sgn * mech.beta)
            a, a2 = mech.scale(s), mech.scale(s2)
            shift = np.zeros(P)
            shift[0] = min(s, s2)
            z = rng.laplace(size=(400_000, P))
            o = a * z
            L = (-np.abs(o / a).sum(-1) - P * np.log(a)) - (-np.abs((o - shift) / a2).sum(-1) - P * np.log(a2))
            d = float(np.mean(np.clip(1 - np.exp(eps - L), 0, None)))
            worst = max(worst, d)
        assert worst <= delta
        assert LaplaceParamsUnion(eps, delta, P).beta <= mech.beta


def test_gamma_tail_matches_scipy():
    assert gamma_tail(9, 1e-5) == pytest.approx(gamma_dist.ppf(1 - 0.5e-5, 9))


# ------------------------------------------------------------------ accounting
def per_release_budget(method, eps, delta, n):
    return budget(method, epsilon=eps, delta=delta, n=n)


def advanced_epsilon(eps0: float, n: int, delta_slack: float) -> float:
    """Dwork, Rothblum & Vadhan 2010, Thm III.3, written out independently of the library."""
    return eps0 * math.sqrt(2 * n * math.log(1 / delta_slack)) + n * eps0 * math.expm1(eps0)


def optimal_delta(eps: float, eps0: float, delta0: float, n: int) -> float:
    """Kairouz, Oh & Viswanath 2015, Thm 3.3, summed in the log domain over binomial weights:
    delta = 1 - (1 - delta0)^n (1 - sum_l C(n,l) [e^{(n-l)eps0} - e^eps e^{l eps0}]_+ / (1+e^eps0)^n),
    an implementation independent of certdp.privacy.accounting's (a cross-check)."""
    from scipy.special import gammaln
    l = np.arange(n + 1, dtype=np.float64)
    logc = gammaln(n + 1) - gammaln(l + 1) - gammaln(n - l + 1) - n * np.log1p(np.exp(eps0))
    a = logc + (n - l) * eps0
    b = logc + eps + l * eps0
    terms = np.where(a > b, np.exp(a) * -np.expm1(np.minimum(b - a, 0.0)), 0.0)
    dpure = float(min(1.0, terms.sum()))
    return float(1 - (1 - delta0) ** n * (1 - dpure))


def test_composition_known_values():
    # advanced composition formula (Dwork, Rothblum & Vadhan)
    assert advanced_epsilon(0.1, 10, 1e-5) == pytest.approx(0.1 * math.sqrt(20 * math.log(1e5)) + math.expm1(0.1))
    # Kairouz for n = 1: the mechanism itself
    assert optimal_delta(1.0, 1.0, 1e-6, 1) == pytest.approx(1e-6, rel=1e-6)
    assert optimal_delta(0.5, 1.0, 0.0, 1) > 0
    # n-fold: optimal never worse than basic, never better than the 0 at eps = n eps0
    assert optimal_delta(10 * 0.1, 0.1, 0.0, 10) == pytest.approx(0.0, abs=1e-15)
    # per-release budgets: basic split, and optimal/advanced/pld >= basic
    e0, d0 = per_release_budget("basic", 5.0, 1e-5, 256)
    assert (e0, d0) == (5.0 / 256, 1e-5 / 256)
    opt, dopt = per_release_budget("optimal", 5.0, 1e-5, 256)
    adv, _ = per_release_budget("advanced", 5.0, 1e-5, 256)
    assert opt >= adv > e0
    # the optimal per-release budget really composes to (5, 1e-5)
    assert optimal_delta(5.0, opt, dopt, 256) <= 1e-5
    # PLD of the (eps0, delta0) dominating pair agrees with the exact optimal composition
    assert pld_epsilon(epsilon0=opt, delta0=dopt, n=256, delta=1e-5) == pytest.approx(5.0, rel=0.02)
    from certdp.privacy import accounting
    assert accounting.optimal_delta(epsilon0=opt, delta0=dopt, n=256, epsilon=5.0) == pytest.approx(optimal_delta(5.0, opt, dopt, 256), rel=1e-6)
    # pure DP composes by basic only
    assert per_release_budget("optimal", 5.0, 0.0, 8) == (5.0 / 8, 0.0)


def test_schedule():
    assert schedule(300, n=1) == [(0, 300)]
    assert schedule(10, n=3) == [(0, 3), (3, 7), (7, 10)]
    assert schedule(10, sampling_steps=(2, 10)) == [(0, 2), (2, 10)]


# ------------------------------------------------------------------ soundness by retraining
def _blobs(n=40, seed=0):
    from certdp.data import load_dataset
    ds = load_dataset({"name": "blobs", "n_train": n, "n_test": 50, "n_public": 0}, seed)
    return torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)


def _check_envelopes(model, x, y, settings, ks, cert, labels, window=None, theta0=None, reps=24):
    """Envelopes of ``cert`` and the number of retrained neighbours (tests/neighbourhoods.py: every
    placement, about ``reps`` per radius) that escape them."""
    gen = torch.Generator().manual_seed(1)
    theta0 = model.init(0) if theta0 is None else theta0
    plan = batch_plan(x.shape[0], settings)
    steps = range(*window) if window else None
    env = run_agt(model, theta0, (x, y), settings, ks,
                  AGTOptions(certificate=cert, plan=plan, progress=False, steps=steps))
    viol = 0
    for j, k in enumerate(env.k_values.tolist()):
        for placement in PLACEMENTS:
            X, Y = neighbours(x, y, k=k, R=max(3, reps // len(PLACEMENTS)), plan=plan, loss=model.loss.name,
                              placement=placement, gen=gen, n_classes=len(labels))
            th = train(model, theta0.expand(len(X), -1), X, Y, settings, plan=plan, steps=steps)
            inside = (th >= env.lo[j] - 1e-10) & (th <= env.hi[j] + 1e-10)
            viol += int((~inside.all(-1)).sum())
    return env, viol


def test_blobs_hinge_envelopes_sound():
    x, y = _blobs()
    model = ModelSpec((8, 1), "hinge")
    st = TrainSettings(steps=30, lr=0.5, clip=0.05, batch_size=10, seed=0)
    env, viol = _check_envelopes(model, x, y, st, [1, 2, 4, 8], get_certificate("ibp"), [-1.0, 1.0])
    assert viol == 0


def test_blobs_hinge_envelopes_sound_milp():
    milp = get_certificate("milp", frequency=2)   # pulp and highspy are core dependencies: no skip
    x, y = _blobs(n=20)
    model = ModelSpec((8, 1), "hinge")
    st = TrainSettings(steps=4, lr=0.5, clip=0.05, batch_size=10, seed=0)
    _, viol = _check_envelopes(model, x, y, st, [1, 2], milp, [-1.0, 1.0], reps=8)
    assert viol == 0


@pytest.mark.slow
def test_logistic_head_envelopes_sound_shared_and_crown():
    g = torch.Generator().manual_seed(0)
    n = 60
    x = torch.randn(n, 3, generator=g, dtype=D)
    y = torch.randint(0, 3, (n,), generator=g)
    model = ModelSpec((3, 3), "ce")
    st = TrainSettings(steps=15, lr=1.0, clip=0.05, contraction=0.6)
    ks = [1, 2, 3, 5, 8, 13, n]
    for cert in (get_certificate("crown"), SharedBoxes(get_certificate("crown"), 2.0, topk_cap=2)):
        _, viol = _check_envelopes(model, x, y, st, ks, cert, [0, 1, 2])
        assert viol == 0
    # shared boxes: every radius keeps its own envelope, never tighter than the direct one
    e_direct = run_agt(model, model.init(0), (x, y), st, ks,
                       AGTOptions(certificate=get_certificate("ibp"), progress=False))
    e_shared = run_agt(model, model.init(0), (x, y), st, ks,
                       AGTOptions(certificate=SharedBoxes(get_certificate("ibp"), 2.0), progress=False))
    assert torch.all(e_shared.lo <= e_direct.lo + 1e-12) and torch.all(e_shared.hi >= e_direct.hi - 1e-12)
    assert torch.allclose(e_shared.nominal, e_direct.nominal)


def test_multi_release_collapse_and_window_soundness():
    """Lemma 4.1: a window certified from a released point starts with point envelopes; its
    envelopes are sound for neighbours retrained from that point over the same window."""
    x, y = _blobs(n=40)
    model = ModelSpec((8, 1), "hinge")
    st = TrainSettings(steps=20, lr=0.5, clip=0.05, batch_size=10, seed=0)
    released = model.init(0) + 0.3
    e0 = run_agt(model, released, (x, y), st, [1, 2, 4], AGTOptions(progress=False, steps=range(10, 10)))
    assert torch.equal(e0.lo, e0.hi) and torch.equal(e0.lo[0], released)     # collapsed: points
    env, viol = _check_envelopes(model, x, y, st, [1, 2, 4], get_certificate("ibp"), [-1.0, 1.0],
                                 window=(10, 20), theta0=released)
    assert viol == 0
    sc = parameter_staircase(env, n_total=40, cover=trivial_cover(st, 9, (10, 20)))
    assert float(sc.smooth(0.1)) <= trivial_cover(st, 9, (10, 20)) + 1e-12


def test_trivial_cover_is_sound():
    """Any two datasets (all records replaced) stay within the trivial cover."""
    x, y = _blobs(n=40)
    model = ModelSpec((8, 1), "hinge")
    st = TrainSettings(steps=25, lr=0.5, clip=0.05, batch_size=10, seed=0)
    X, Y = neighbours(x, y, k=40, R=16, plan=batch_plan(40, st), loss="hinge", placement="random",
                      gen=torch.Generator().manual_seed(3))
    th = train(model, model.init(0).expand(16, -1), X, Y, st)
    th0 = train(model, model.init(0), x, y, st)
    assert float((th - th0).abs().sum(-1).max()) <= trivial_cover(st, 9, (0, 25))


def test_ags_cli_blobs_small(tmp_path):
    from certdp.methods.ags import run
    cfg = {"seed": 0, "dataset": {"name": "blobs", "n_train": 60, "n_test": 200, "n_public": 80, "model": {"arch": "linear"}},
           "model": {"arch": "auto"}, "train": {"steps": 12, "lr": 0.5, "clip": 0.05, "batch_size": 20},
           "certificate": {"name": "ibp"}, "staircase": {"kind": "list", "values": [1, 2, 4]},
           "privacy": {"epsilons": [1, 20], "delta": 1e-5, "releases": ["cauchy_p", "laplace_p"], "n_draws": 5},
           "ags": {"releases_n": 2, "baselines": ["dpsgd_matched", "pate"]},
           "pate": {"teachers": [2], "queries": [20]}}
    out = run(parse("ags", cfg), progress=False)
    res = out["results"]
    assert set(res.arm) == {"AGS", "DP-SGD matched", "PATE"}
    assert {"nonprivate_accuracy", "majority_rate", "accuracy_median"} <= set(res.columns)
    assert (res[res.arm == "AGS"].n_releases == 2).all()


@pytest.mark.slow
def test_sampling_ablation_shares_noise_between_compositions():
    """The sampling ablation's compositions of one (n, eps) cell use the same noise draws, so
    their accuracies differ only through the per-release budget: equal budgets (n = 1, or optimal
    composition no better than basic) give equal accuracy; optimal never gives less than eps/n."""
    from certdp.methods.ags import run
    cfg = {"seed": 0, "dataset": {"name": "blobs", "n_train": 60, "n_test": 200, "n_public": 80, "model": {"arch": "linear"}},
           "model": {"arch": "auto"}, "train": {"steps": 16, "lr": 0.5, "clip": 0.05, "batch_size": None},
           "certificate": {"name": "ibp"}, "staircase": {"kind": "list", "values": [1, 2, 4]},
           "privacy": {"epsilons": [2, 20], "delta": 1e-5, "releases": ["laplace_p"], "n_draws": 3},
           "ags": {"releases_n": 1, "baselines": [], "ablation_n": [1, 4], "ablation_draws": 2,
                   "ablation_compositions": ["basic", "optimal"]}}
    ab = run(parse("ags", cfg), progress=False)["ablation"]
    cells = ab.pivot_table(index=["n_releases", "epsilon"], columns="composition", values=["eps0", "accuracy_median"])
    assert len(cells) == 4
    for (n, eps), c in cells.iterrows():
        assert c[("eps0", "basic")] == pytest.approx(eps / n)
        assert c[("eps0", "optimal")] >= c[("eps0", "basic")] * (1 - 1e-9)
        if c[("eps0", "optimal")] <= c[("eps0", "basic")] * (1 + 1e-6):
            # the same draws, scaled by the same budget to within 1e-6: at most one test point flips
            assert abs(c[("accuracy_median", "optimal")] - c[("accuracy_median", "basic")]) <= 1 / 200 + 1e-12
