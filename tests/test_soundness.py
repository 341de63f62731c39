"""Soundness by retraining: envelopes contain the parameters of real neighbouring datasets.

For each radius k, 60 datasets at k substitutions are built (tests/neighbourhoods.py: every
placement, random, label-flipped and saturating replacement records), retrained with the same
initialisation and batch plan, and checked: theta~ in T_k, and the change of every test
prediction within the certified staircase bound."""

import os
import shutil

import pytest
import torch

import certdp.bounds.ibp as ibp
from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.bounds.base import Batch
from certdp.bounds.aggregate import batch_sum, batch_sum_from_stats
from certdp.bounds.ibp import gradient_bounds, gradient_sum_stats
from certdp.bounds.interval import Interval
from certdp.bounds.interval import output_bounds
from certdp.models import ModelSpec
from certdp.privacy.sensitivity import staircase
from certdp.training import TrainSettings, batch_plan, train
from neighbourhoods import PLACEMENTS, assert_contains_neighbours, neighbours, toy_data

D = torch.float64

R = 12  # neighbours per radius and placement (tests/neighbourhoods.py: 5 placements, 3 replacements)


CASES = [
    ("linear-full-ibp", (1, 1), "ibp", None, 0.3, 1.0),
    ("linear-full-crown", (1, 1), "crown", None, 0.3, 1.0),
    ("linear2d-sgd-crown", (2, 1), "crown", 8, 0.1, 0.1),
    ("mlp-full-ibp", (3, 8, 1), "ibp", None, 0.05, 0.1),
    ("mlp-sgd-ibp", (3, 6, 1), "ibp", 10, 0.05, 0.2),
    ("mlp-full-ibp-tau", (3, 8, 1), "ibp-tau", None, 0.05, 0.1),
    ("mlp-sgd-crown", (3, 6, 1), "crown", 10, 0.05, 0.2),
]


# the full-batch MLP cases take the longest (measured): slow tier; the others stay in `make test`
@pytest.mark.parametrize("name,widths,cert,bs,lr,clip",
                         [pytest.param(*c, id=c[0], marks=(pytest.mark.slow,) if c[0].startswith("mlp-full") else ())
                          for c in CASES])
def test_envelopes_contain_retrained_neighbours(name, widths, cert, bs, lr, clip):
    gen = torch.Generator().manual_seed(11)
    n = 40
    m = ModelSpec(widths, "mse")
    x = torch.rand(n, widths[0], generator=gen, dtype=torch.float64) * 2 - 1
    y = x.sum(1) * 1.5 + 0.5 + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    s = TrainSettings(steps=12, lr=lr, clip=clip, batch_size=bs, seed=3)
    plan = batch_plan(n, s)
    th0 = m.init(4)
    ks = [1, 2, 3, 5, 8]
    c = get_certificate("ibp", aggregation="tau") if cert == "ibp-tau" else get_certificate(cert)
    env = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=c, progress=False))
    assert torch.allclose(env.nominal, train(m, th0, x, y, s))
    xtest = torch.rand(25, widths[0], generator=gen, dtype=torch.float64) * 2 - 1
    out = output_bounds(m, env.box, xtest)
    pred = m.forward(env.nominal, xtest)
    sc = staircase(out.lo, out.hi, pred, env.k_values, n_total=n, global_sensitivity=torch.full((25,), 1e9))
    for j, k in enumerate(ks):
        sets = [neighbours(x, y, k=k, R=R, plan=plan, loss="mse", placement=p, gen=gen) for p in PLACEMENTS]
        xs, ys = torch.cat([q[0] for q in sets]), torch.cat([q[1] for q in sets])
        tht = train(m, th0.expand(len(xs), -1), xs, ys, s)
        inside = env.contains(tht)[:, j]
        assert bool(inside.all()), f"{int((~inside).sum())} of {len(xs)} neighbours at k={k} escape T_k"
        # the prediction change of a dataset at distance k is bounded by d(x, k-1)
        change = (m.forward(tht, xtest) - pred).abs().squeeze(-1)       # [R, n_test]
        col = sc.k.tolist().index(k - 1) if (k - 1) in sc.k.tolist() else None
        bound = sc.a_bar[:, col] if col is not None else None
        if bound is not None:
            assert bool((change <= bound + 1e-12).all())


def test_crown_step_is_never_wider_than_ibp_on_linear_regression():
    gen = torch.Generator().manual_seed(0)
    m = ModelSpec((2, 1), "mse")
    x = torch.rand(200, 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = x @ torch.tensor([2.0, -1.0], dtype=torch.float64) + 1
    for bs in (None, 16):
        s = TrainSettings(steps=15, lr=0.2, clip=0.5, batch_size=bs, seed=1)
        a = run_agt(m, m.init(0), (x, y), s, [1, 4, 16],
                    AGTOptions(certificate=get_certificate("ibp"), progress=False))
        b = run_agt(m, m.init(0), (x, y), s, [1, 4, 16],
                    AGTOptions(certificate=get_certificate("crown"), progress=False))
        assert bool((b.widths() <= a.widths() * (1 + 1e-9) + 1e-12).all())


def test_tau_aggregation_is_a_relaxation_of_topk_and_fused_equals_materialised():
    """Every member of the tau grid bounds the top-k sum, so the 'tau' bounds contain the 'topk'
    bounds; they coincide where the k removed bounds sit at -gamma (tau = -gamma); the fused
    reduction gives the same numbers as materialising the per-sample intervals."""
    gen = torch.Generator().manual_seed(2)
    m = ModelSpec((3, 7, 1), "mse")
    x = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(50, generator=gen, dtype=torch.float64)
    c = m.init(0)
    lo = torch.stack([c - r for r in (0.01, 0.05, 0.2)])
    hi = torch.stack([c + r for r in (0.01, 0.05, 0.2)])
    ks = torch.tensor([1, 3, 9])
    g = gradient_bounds(m, Interval(lo, hi), x, y, clip=0.3)
    exact = batch_sum(g, subs=ks, clip=0.3, mode="topk")
    relaxed = batch_sum(g, subs=ks, clip=0.3, mode="tau")
    stats = gradient_sum_stats(m, Interval(lo, hi), x, y, clip=0.3)
    fused = batch_sum_from_stats(stats, subs=ks, clip=0.3, b=50)
    assert bool((relaxed.lo <= exact.lo + 1e-12).all() and (relaxed.hi >= exact.hi - 1e-12).all())
    assert bool((relaxed.hi - relaxed.lo > exact.hi - exact.lo).any())
    assert torch.allclose(fused.lo, relaxed.lo, atol=1e-12) and torch.allclose(fused.hi, relaxed.hi, atol=1e-12)
    # k bounds at the threshold: tau = -gamma removes exactly them
    sat = Interval(torch.full((1, 1, 6), -0.3, dtype=torch.float64), torch.full((1, 1, 6), -0.3, dtype=torch.float64))
    a = batch_sum(sat, subs=torch.tensor([2]), clip=0.3, mode="tau")
    b = batch_sum(sat, subs=torch.tensor([2]), clip=0.3, mode="topk")
    assert torch.allclose(a.hi, b.hi, atol=1e-15)


@pytest.mark.slow
def test_compiled_fused_pass_matches_eager(monkeypatch):
    """The torch.compile'd pass (used for large problems) computes the same bounds."""
    monkeypatch.setattr(ibp, "COMPILE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(ibp, "_COMPILE", {"failed": False})
    gen = torch.Generator().manual_seed(3)
    m = ModelSpec((4, 5, 1), "mse")
    x = torch.randn(64, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(64, generator=gen, dtype=torch.float64)
    c = m.init(1)
    box = Interval(torch.stack([c - 0.01, c - 0.1]), torch.stack([c + 0.01, c + 0.1]))
    ks = torch.tensor([1, 4])
    fused = ibp.IBP(aggregation="tau").batch_sum_bounds(m, box, Batch(x, y), subs=ks, clip=0.2)
    eager = batch_sum_from_stats(ibp.gradient_sum_stats(m, box, x, y, clip=0.2), subs=ks, clip=0.2, b=64)
    assert torch.allclose(fused.lo, eager.lo, atol=1e-11) and torch.allclose(fused.hi, eager.hi, atol=1e-11)
    if ibp._COMPILE["failed"]:
        # The eager fallback kept the bounds right (checked above).  Only a machine without a C++
        # compiler may skip the compiled pass; elsewhere its failure is a regression: re-raise it.
        if not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "c++", "clang++")):
            pytest.skip("torch.compile needs a C++ compiler and this machine has none (eager fallback checked)")
        ibp._compiled_sum_stats(m, 0.2)(box.lo, box.hi, x, y)
        pytest.fail("torch.compile failed once but not when repeated: the fallback flag is stale")


def test_cover_width_bounds_retrained_neighbours():
    """The linear model's trajectory global sensitivity covers real one-record substitutions,
    including the divergence of every other sample's gradient after the first difference."""
    from certdp.certify import cover_width
    gen = torch.Generator().manual_seed(5)
    m = ModelSpec((2, 1), "mse")
    n = 30
    x = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = x.sum(1) + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    for bs in (None, 4):
        s = TrainSettings(steps=15, lr=0.5, clip=0.3, batch_size=bs, seed=2)
        c = cover_width(s, (0, s.steps))
        th0 = m.init(1)
        base = train(m, th0, x, y, s)
        sets = [neighbours(x, y, k=1, R=40, plan=batch_plan(n, s), loss="mse", placement=p, gen=gen)
                for p in PLACEMENTS]
        xs, ys = torch.cat([q[0] for q in sets]), torch.cat([q[1] for q in sets])
        tht = train(m, th0.expand(len(xs), -1), xs, ys, s)
        assert bool(((tht - base).abs() <= c + 1e-12).all())


# Records up to 1e6: the envelopes stay finite and contain every retrained neighbour ----------------
CONTAIN = [
    ("softmax-head-ibp", (3, 3), "ce", "ibp"),
    ("softmax-head-crown", (3, 3), "ce", "crown"),
    ("mlp-softmax-ibp", (3, 8, 3), "ce", "ibp"),
    ("mlp-mse-ibp", (3, 8, 1), "mse", "ibp"),
]


@pytest.mark.parametrize("name,widths,loss,cert", CONTAIN, ids=[c[0] for c in CONTAIN])
def test_envelopes_on_records_up_to_1e6_are_finite_and_contain_retrained_neighbours(name, widths, loss, cert):
    """Training data with records of |x| up to 1e6 (the MLP failed from |x| = 16, the softmax
    head from 100); neighbours substitute records up to 1e8 (the helper's 'wide' and 'saturate'
    replacements are 10x and 100x the data's span)."""
    gen = torch.Generator().manual_seed(3)
    n = 24
    x, y = toy_data(loss, n, widths[0], gen)
    x[:3] = torch.tensor([[1e6, -1e6, 3.0], [-16.0, 16.0, 16.0], [100.0, 100.0, -1e6]], dtype=D)
    model = ModelSpec(widths, loss)
    train_settings = TrainSettings(steps=6, lr=0.3, clip=1.0, batch_size=8, seed=0)
    plan = batch_plan(n, train_settings)
    theta0 = model.init(0)
    ks = (1, 2, 4)
    env = run_agt(model, theta0, (x, y), train_settings, ks,
                  AGTOptions(certificate=get_certificate(cert), plan=plan, progress=False))
    assert torch.isfinite(env.lo).all() and torch.isfinite(env.hi).all() and torch.isfinite(env.nominal).all()
    assert_contains_neighbours(env, model, theta0, x, y, train_settings, ks=ks, R=6, plan=plan, loss=loss, gen=gen, n_classes=3)
