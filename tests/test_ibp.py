"""Interval passes contain the outputs and clipped gradients of parameters sampled in the box."""

import pytest
import torch

from certdp.bounds import ibp
from certdp.bounds.aggregate import batch_sum
from certdp.bounds.base import Batch
from certdp.bounds.ibp import IBP, gradient_bounds
from certdp.bounds.interval import Interval, output_bounds
from certdp.models import ModelSpec

D = torch.float64


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss", [((2, 1), "mse"), ((3, 8, 1), "mse"), ((3, 6, 4, 1), "mse"),
                                         ((3, 1), "hinge"), ((3, 4), "ce"), ((3, 5, 3), "ce")])
def test_bounds_contain_sampled_parameters(widths, loss):
    g = torch.Generator().manual_seed(0)
    m = ModelSpec(widths, loss)
    n = 12
    x = torch.randn(n, widths[0], generator=g, dtype=torch.float64)
    if loss == "mse":
        y = torch.randn(n, generator=g, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    else:
        y = torch.randint(0, widths[-1], (n,), generator=g)
    c = m.init(1)
    rad = torch.stack([torch.full_like(c, 0.02), torch.full_like(c, 0.3)])      # two radii at once
    box = Interval(c - rad, c + rad)
    out = output_bounds(m, box, x)
    gb = gradient_bounds(m, box, x, y, clip=0.5)                                # [K, P, n]
    for j in range(2):
        for _ in range(200):
            th = c + (torch.rand(c.shape, generator=g, dtype=torch.float64) * 2 - 1) * rad[j]
            f = m.forward(th, x)
            assert ((f >= out.lo[j] - 1e-12) & (f <= out.hi[j] + 1e-12)).all()
            gr = m.per_sample_grads(th, x, y).clamp(-0.5, 0.5).T
            assert ((gr >= gb.lo[j] - 1e-12) & (gr <= gb.hi[j] + 1e-12)).all()
        # a box's corners are inside too
        for corner in (box.lo[j], box.hi[j]):
            gr = m.per_sample_grads(corner, x, y).clamp(-0.5, 0.5).T
            assert ((gr >= gb.lo[j] - 1e-12) & (gr <= gb.hi[j] + 1e-12)).all()


def test_point_box_is_exact_for_linear_model():
    m = ModelSpec((3, 1), "mse")
    x = torch.randn(5, 3, dtype=torch.float64)
    y = torch.randn(5, dtype=torch.float64)
    th = m.init(0)
    gb = gradient_bounds(m, Interval(th[None], th[None]), x, y, clip=10.0)
    ref = m.per_sample_grads(th, x, y).T
    assert torch.allclose(gb.lo[0], ref) and torch.allclose(gb.hi[0], ref)


# ---------------------------------------------------------------------------------------------
# The head pass (single-layer models under tau: certdp/bounds/ibp.py, head_sum_stats)

HEADS = [((3, 1), "mse"), ((4, 1), "hinge"), ((3, 2), "ce"), ((8, 5), "ce")]


def _head_problem(widths, loss, n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, widths[0], generator=g, dtype=torch.float64) * 3
    x[0] *= 1e6                                            # an extreme record
    x[1] = 0.0                                             # an all-zero one
    if loss == "ce":
        y = torch.randint(0, widths[-1], (n,), generator=g)
    elif loss == "hinge":
        y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    else:
        y = torch.randn(n, generator=g, dtype=torch.float64)
    m = ModelSpec(widths, loss)
    c = m.init(1)
    r = torch.tensor([0.0, 1e-3, 0.1, 2.0], dtype=torch.float64).unsqueeze(-1)      # a point box among them
    return m, Interval(c - r, c + r), x, y


def _head_matches_materialised(compiled: bool):
    from certdp.bounds.aggregate import tau_sums
    from certdp.bounds.ibp import head_sum_stats
    for widths, loss in HEADS:
        m, box, x, y = _head_problem(widths, loss)
        ref = tau_sums(*(lambda g: (g.lo, g.hi))(gradient_bounds(m, box, x, y, clip=0.3)), clip=0.3)
        got = head_sum_stats(m, box, x, y, clip=0.3, compiled=compiled)
        for a, b in zip(ref, got):
            # the same per-sample values summed in another order: 300 terms of at most 0.3
            assert torch.allclose(a, b, rtol=0, atol=300 * 0.3 * 2 ** -50), (widths, loss)


def test_head_pass_equals_the_materialised_tau_sums():
    """The head pass forms the same clipped per-sample bounds as ``gradient_bounds`` (extreme and
    zero records, a point box, boxes up to 2 wide) and sums them over the tau grid."""
    _head_matches_materialised(compiled=False)


def _force_compile(monkeypatch):
    from certdp.bounds import ibp
    monkeypatch.setattr(ibp, "COMPILE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(ibp, "_COMPILE", {"failed": False})
    return ibp


@pytest.mark.slow
def test_compiled_head_pass_equals_the_materialised_tau_sums():
    import shutil
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        pytest.skip("torch.compile needs a C++ compiler and this machine has none (the eager pass is checked)")
    _head_matches_materialised(compiled=True)


class _KTimesExtreme(IBP):
    """Planted: the batch sum as sum(u) - k min(u) + k gamma ("k times the extreme bound"): sound
    (the k records that leave carry at least k min(u)) but the minimum enters with coefficient 1 - k,
    so it does not nest (certdp/bounds/aggregate.py)."""

    def batch_sum_bounds(self, model, boxes, batch, *, subs, src=None, clip):
        x, y = batch
        g = gradient_bounds(model, boxes, x, y, clip=clip)
        k = subs.to(g.lo.device).clamp(max=x.shape[0]).to(g.lo.dtype).unsqueeze(-1)
        return Interval(g.lo.sum(-1) - k * g.lo.amax(-1) - k * clip, g.hi.sum(-1) - k * g.hi.amin(-1) + k * clip)


def _step_excess(engine, *, r: int = 3) -> float:
    """How far step(B, D, r) sticks out of step(B, D', r + 1) (condition (N) at one step, what
    AGT's graded widening must absorb) on the aggregation's worst case: a hinge head whose bias
    gradients are clipped at +gamma for every record but one at -gamma in D, replaced in D' by
    a record with gradient 0 (margin 5 at theta)."""
    from certdp.training import TrainSettings
    m = ModelSpec((3, 1), "hinge")
    n = 10
    x = torch.zeros(n, 3, dtype=torch.float64)
    y = torch.full((n,), -1.0, dtype=torch.float64)
    y[0] = 1.0                                             # margin 0 < 1: bias gradient -1 -> -gamma
    x2, y2 = x.clone(), y.clone()
    x2[0, 0] = 5.0                                         # margin 5 >= 1: gradient 0
    theta = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    box = Interval(theta, theta)
    st = TrainSettings(steps=1, lr=0.4, clip=0.3, contraction=0.9)
    a = engine.step_bounds(m, box, Batch(x, y), subs=torch.tensor([r]), settings=st)
    b = engine.step_bounds(m, box, Batch(x2, y2), subs=torch.tensor([r + 1]), settings=st)
    return float(torch.maximum(b.lo - a.lo, a.hi - b.hi).max())


def test_step_nesting_check_catches_an_aggregation_that_does_not_nest():
    """The head pass nests at the aggregation's worst case; the planted k-times-extreme sum does
    not (by lr * gamma / b), and the one-step nesting check sees it."""
    from certdp.bounds import get_certificate
    from certdp.training import TrainSettings
    eng = get_certificate("ibp", aggregation="tau")
    slack = eng.nesting_slack(ModelSpec((3, 1), "hinge"), settings=TrainSettings(steps=1, lr=0.4, clip=0.3),
                              b=10, k_max=4, magnitude=4.0)
    assert _step_excess(eng) <= slack
    assert _step_excess(_KTimesExtreme(aggregation="tau")) > 0.01 > slack


@pytest.mark.slow
def test_compiled_head_pass_nests_between_neighbours(monkeypatch):
    """run_agt through the compiled head pass (softmax head, full batch and the ledger) on D and on
    neighbours (random, extreme and label-flipped records): every box nests into the next radius's
    box of the other dataset, exactly; and the compiled step nests at the aggregation's worst case."""
    import shutil
    from test_smoothness import _assert_nested, _nest_data, _replacements, _substituted
    from certdp.agt import AGTOptions, epoch_length, run_agt
    from certdp.bounds import get_certificate
    from certdp.training import TrainSettings, batch_plan
    ibp = _force_compile(monkeypatch)
    eng = get_certificate("ibp", aggregation="tau")
    assert _step_excess(eng) <= eng.nesting_slack(ModelSpec((3, 1), "hinge"),
                                                  settings=TrainSettings(steps=1, lr=0.4, clip=0.3),
                                                  b=10, k_max=4, magnitude=4.0)
    widths, n = (4, 3), 24
    m = ModelSpec(widths, "ce")
    x, y = _nest_data(widths, "ce", n, 3)
    for bs in (None, 6):
        st = TrainSettings(steps=6, lr=0.5, clip=0.2, batch_size=bs, contraction=0.9, seed=1)
        plan = batch_plan(n, st)
        E = epoch_length(plan, n)
        b = plan.shape[1] * (E or 1)
        run = lambda X, Y: run_agt(m, m.init(2), (X, Y), st, [1, 2, 3, 5, 8, n],
                                   AGTOptions(certificate=eng, plan=plan, progress=False))
        base = run(x, y)
        idx = int(torch.bincount(plan.reshape(-1), minlength=n).argmax())
        for xv, yv in _replacements(x, y, "ce", 3, torch.Generator().manual_seed(7)):
            other = run(*_substituted(x, y, idx, xv, yv, "ce", 3))
            _assert_nested(base, other, b)
            _assert_nested(other, base, b)
    if ibp._COMPILE["failed"] and any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        pytest.fail("the compiled head pass failed on a machine with a C++ compiler (the eager one was checked)")


# The lean path: the blocked sums are the materialised ones, bit for bit --------------------------
def _problem(widths, loss, n, K, seed):
    g = torch.Generator().manual_seed(seed)
    m = ModelSpec(widths, loss)
    x = torch.randn(n, widths[0], generator=g, dtype=D) * 2
    y = (torch.randint(0, widths[-1], (n,), generator=g) if loss == "ce" else
         torch.sign(torch.randn(n, generator=g, dtype=D)) if loss == "hinge" else
         torch.randn(n, generator=g, dtype=D))
    c = m.init(seed)
    w = torch.linspace(0.0, 0.2, K, dtype=D).unsqueeze(-1) * (1 + torch.rand(K, m.n_params, generator=g, dtype=D))
    return m, x, m.loss.labels(y), Interval(c - w, c + w)


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss,n", [((8, 16, 1), "mse", 300), ((3, 5, 4, 1), "mse", 200), ((8, 5), "ce", 400),
                                          ((6, 1), "hinge", 300), ((4, 7, 3), "ce", 200)])
def test_blocked_ibp_sums_are_the_materialised_ones(widths, loss, n, monkeypatch):
    monkeypatch.setattr(ibp, "BLOCK_ELEMENTS", 20000)                      # several blocks per layer
    m, x, y, box = _problem(widths, loss, n, 9, seed=len(widths) + n)
    subs = torch.tensor([0, 1, 2, 3, 5, 8, 13, 100, 10 ** 6])
    src = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8])
    for clip in (0.05, 1.0):
        ref = batch_sum(ibp.gradient_bounds(m, box, x, y, clip=clip), subs=subs, clip=clip)
        got = ibp.gradient_topk_sums(m, box, x, y, subs=subs, clip=clip)
        assert got.lo.numpy().tobytes() == ref.lo.numpy().tobytes()
        assert got.hi.numpy().tobytes() == ref.hi.numpy().tobytes()
        shared = ibp.gradient_topk_sums(m, box, x, y, subs=subs[:4], src=torch.tensor([8, 8, 2, 0]), clip=clip)
        ref_s = batch_sum(ibp.gradient_bounds(m, box, x, y, clip=clip), subs=subs[:4], src=torch.tensor([8, 8, 2, 0]),
                          clip=clip)
        assert torch.equal(shared.lo, ref_s.lo) and torch.equal(shared.hi, ref_s.hi)
        a = ibp.gradient_sum_stats(m, box, x, y, clip=clip)
        b = ibp.gradient_sum_stats_blocked(m, box, x, y, clip=clip)
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert src is not None


def test_no_compiled_pass_relies_on_torchs_automatic_dynamic_shapes(monkeypatch):
    """With ``dynamic=None`` a graph recompiled after the process had seen other shapes (the
    estimate's timings, then a second mnist5 run at K = 129) returned boxes that excluded the
    nominal run; every compiled pass is either dynamic from the start or static per shape."""
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw.get("dynamic")) or fn)
    monkeypatch.setattr(ibp, "_HEAD", {})
    monkeypatch.setattr(ibp, "_COMPILED", {})
    ibp._head_fns(True)
    ibp._compiled_sum_stats(ModelSpec((3, 4, 1), "mse"), 1.0)
    assert len(seen) == 3 and None not in seen, seen
