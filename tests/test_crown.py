"""CROWN: sound against sampled parameters and retrained neighbours, never wider than IBP,
contracting on contracting steps; golden bounds for small fixed cases."""


import itertools

import pytest
import torch

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import crown, get_certificate, rules
from certdp.bounds.aggregate import batch_sum, top_sum
from certdp.bounds.crown import mlp1_gradient_bounds, single_layer_step
from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train

D = torch.float64


def _data(m: ModelSpec, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, m.widths[0], generator=g, dtype=D)
    if m.loss.name == "mse":
        y = torch.randn(n, generator=g, dtype=D)
    elif m.loss.name == "hinge":
        y = (torch.rand(n, generator=g) < 0.5).to(D) * 2 - 1
    else:
        y = torch.randint(0, m.widths[-1], (n,), generator=g)
    return x, y


def _ibp_step(m, box, x, y, ks, st):
    gb = gradient_bounds(m, box, x, y, clip=st.clip)
    tot = batch_sum(gb, subs=ks, clip=st.clip)
    n = x.shape[0]
    return Interval(st.contraction * box.lo - st.lr / n * tot.hi, st.contraction * box.hi - st.lr / n * tot.lo)


HEADS = [((2, 1), "mse", 1.0), ((3, 1), "hinge", 1.0), ((3, 4), "ce", 0.6), ((2, 3), "ce", 1.0)]


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss,lam", HEADS)
def test_head_step_sound_and_never_wider_than_ibp(widths, loss, lam):
    m = ModelSpec(widths, loss)
    n, gam = 12, 0.3
    x, y = _data(m, n)
    st = TrainSettings(steps=1, lr=0.5, clip=gam, contraction=lam)
    c = m.init(1)
    rad = torch.stack([torch.full_like(c, r) for r in (0.002, 0.05, 0.4)])
    box = Interval(c - rad, c + rad)
    ks = torch.tensor([1, 2, 4])
    nb = single_layer_step(m, box, x, y, subs=ks, settings=st)
    ib = _ibp_step(m, box, x, y, ks, st)
    assert (nb.lo >= ib.lo - 1e-12).all() and (nb.hi <= ib.hi + 1e-12).all()
    if loss == "hinge":     # interval constants are the only monotone relaxation of the step: IBP
        assert torch.equal(nb.lo, ib.lo) and torch.equal(nb.hi, ib.hi)
    else:
        assert (nb.hi - nb.lo).sum() < (ib.hi - ib.lo).sum()
    g = torch.Generator().manual_seed(3)
    for j, k in enumerate(ks.tolist()):
        for it in range(150 if loss == "ce" else 400):
            if it % 2:
                th = torch.where(torch.rand(c.shape, generator=g) < 0.5, box.lo[j], box.hi[j])
            else:
                th = c + (torch.rand(c.shape, generator=g, dtype=D) * 2 - 1) * rad[j]
            gr = m.per_sample_grads(th, x, y).clamp(-gam, gam)
            sub = torch.randperm(n, generator=g)[:k]
            gr[sub] = (torch.rand(k, c.numel(), generator=g) < 0.5).to(D) * 2 * gam - gam
            new = lam * th - st.lr * gr.mean(0)
            assert ((new >= nb.lo[j] - 1e-12) & (new <= nb.hi[j] + 1e-12)).all()


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss", [((2, 1), "mse"), ((2, 3), "ce")])
def test_flat_and_coupled_modes_are_sound_and_coupled_is_tighter(widths, loss):
    """The vertex maximum is the exact maximum of the relaxed step, the flat form (chords and a
    2 gamma charge per substitution) an upper bound of it: both contain sampled steps with
    substitutions; coupled is inside flat."""
    m = ModelSpec(widths, loss)
    n, gam = 12, 0.3
    x, y = _data(m, n, seed=2)
    st = TrainSettings(steps=1, lr=0.5, clip=gam, contraction=0.9)
    c = m.init(4)
    rad = torch.stack([torch.full_like(c, r) for r in (0.01, 0.1, 0.5)])
    box = Interval(c - rad, c + rad)
    ks = torch.tensor([0, 2, 5])
    cp = single_layer_step(m, box, x, y, subs=ks, settings=st, mode="coupled")
    fl = single_layer_step(m, box, x, y, subs=ks, settings=st, mode="flat")
    assert bool((fl.lo <= cp.lo + 1e-12).all() and (cp.hi <= fl.hi + 1e-12).all())
    g = torch.Generator().manual_seed(8)
    for j, k in enumerate(ks.tolist()):
        for it in range(300):
            u = torch.rand(c.shape, generator=g, dtype=D)
            th = torch.where(u < 0.5, box.lo[j], box.hi[j]) if it % 2 else box.lo[j] + u * (box.hi[j] - box.lo[j])
            gr = m.per_sample_grads(th, x, y).clamp(-gam, gam)
            sub = torch.randperm(n, generator=g)[:k]
            gr[sub] = (torch.rand(k, c.numel(), generator=g) < 0.5).to(D) * 2 * gam - gam
            new = st.contraction * th - st.lr * gr.mean(0)
            for b in (cp, fl):
                assert bool(((new >= b.lo[j] - 1e-12) & (new <= b.hi[j] + 1e-12)).all()), (j, k)


def test_loss_linear_bounds_form_an_inclusion_monotone_family():
    """Boxes Z inside Z' (shifted centres): at every z of Z the affine bounds of Z' are no tighter
    than those of Z, and the range bounds r_L, r_U only move outwards (mse, hinge, and the
    mean-value form of softmax cross-entropy, whose centre moves with the box)."""
    g = torch.Generator().manual_seed(6)
    for loss, C in (("mse", 1), ("hinge", 1), ("ce", 4)):
        m = ModelSpec((2, C), loss)
        n = 20
        y = (torch.randn(n, generator=g, dtype=D) if loss == "mse" else
             torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double() if loss == "hinge" else
             torch.randint(0, C, (n,), generator=g))
        for _ in range(30):
            c = torch.randn(1, n, C, generator=g, dtype=D) * 2
            r1 = torch.rand(1, n, C, generator=g, dtype=D) * 1.5
            r2 = r1 + torch.rand(1, n, C, generator=g, dtype=D)
            sh = (torch.rand(1, n, C, generator=g, dtype=D) * 2 - 1) * (r2 - r1)
            small = m.loss.grad_linear_bounds(c - r1, c + r1, y)
            big = m.loss.grad_linear_bounds(c + sh - r2, c + sh + r2, y)
            for _ in range(20):
                z = c - r1 + 2 * r1 * torch.rand(1, n, C, generator=g, dtype=D)
                lin = lambda a, b_: (a * z.unsqueeze(-2)).sum(-1) + b_
                assert bool((lin(big[0], big[2]) <= lin(small[0], small[2]) + 1e-12).all())
                assert bool((lin(big[1], big[3]) >= lin(small[1], small[3]) - 1e-12).all())
            assert bool((big[4] <= small[4] + 1e-12).all() and (big[5] >= small[5] - 1e-12).all())


@pytest.mark.parametrize("widths", [(3, 8, 1), (2, 16, 1)])
def test_mlp_gradient_ranges_sound_and_tighter(widths):
    m = ModelSpec(widths, "mse")
    x, y = _data(m, 10)
    c = m.init(2)
    rad = torch.stack([torch.full_like(c, r) for r in (0.01, 0.1, 0.5)])
    box = Interval(c - rad, c + rad)
    cb = mlp1_gradient_bounds(m, box, x, y, clip=0.5)
    ib = gradient_bounds(m, box, x, y, clip=0.5)
    assert (cb.lo >= ib.lo).all() and (cb.hi <= ib.hi).all()
    assert (cb.hi - cb.lo)[:2].sum() < (ib.hi - ib.lo)[:2].sum()
    g = torch.Generator().manual_seed(5)
    for j in range(3):
        for it in range(300):
            if it % 3 == 0:
                th = torch.where(torch.rand(c.shape, generator=g) < 0.5, box.lo[j], box.hi[j])
            else:
                th = c + (torch.rand(c.shape, generator=g, dtype=D) * 2 - 1) * rad[j]
            gr = m.per_sample_grads(th, x, y).clamp(-0.5, 0.5).T
            assert ((gr >= cb.lo[j] - 1e-12) & (gr <= cb.hi[j] + 1e-12)).all()


@pytest.mark.slow
def test_contracting_step_contracts_the_envelope():
    """Full-batch logistic head with lambda < 1 and unclipped gradients: IBP adds the widths of
    the per-sample gradients every step, CROWN's joint step bound sees the positive curvature."""
    m = ModelSpec((3, 3), "ce")
    x, y = _data(m, 400)
    st = TrainSettings(steps=8, lr=0.5, clip=1.0, contraction=0.9)
    th0 = m.init(0)
    w = {}
    for name in ("ibp", "crown"):
        env = run_agt(m, th0, (x, y), st, [1], AGTOptions(certificate=get_certificate(name), progress=False))
        w[name] = env.widths().sum(-1)
    assert (w["crown"] <= w["ibp"] + 1e-12).all()
    assert (w["crown"] < 0.5 * w["ibp"]).all()


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss,bs", [((1, 1), "mse", 4), ((3, 1), "hinge", 5), ((2, 3), "ce", None),
                                            ((2, 6, 1), "mse", 5)])
def test_envelopes_contain_retrained_neighbours(widths, loss, bs):
    from certdp.methods.audit import neighbours
    m = ModelSpec(widths, loss)
    N = 20
    x, y = _data(m, N, seed=4)
    st = TrainSettings(steps=12, lr=0.2, clip=0.2, batch_size=bs, contraction=0.9 if loss == "ce" else 1.0)
    th0 = m.init(0)
    plan = batch_plan(N, st)
    ks = [1, 2, 4]
    env = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=get_certificate("crown"), plan=plan, progress=False))
    ibp = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=get_certificate("ibp"), plan=plan, progress=False))
    # never wider than IBP, up to the difference of their graded widenings against rounding
    assert (env.widths() <= ibp.widths() + 1e-8).all()
    for j, k in enumerate(ks):
        for mode in ("random", "adversarial"):
            X, Y = neighbours(mode, k, 40, x, y, plan, loss, widths[-1], torch.Generator().manual_seed(k))
            th = train(m, th0.expand(40, -1), X, Y, st, plan=plan)
            assert ((th >= env.lo[j] - 1e-10) & (th <= env.hi[j] + 1e-10)).all(), (mode, k)


def _golden_case(widths, loss, lam):
    m = ModelSpec(widths, loss)
    x, y = _data(m, 8, seed=11)
    st = TrainSettings(steps=1, lr=0.4, clip=0.25, contraction=lam)
    c = m.init(7)
    rad = torch.stack([torch.full_like(c, r) for r in (0.01, 0.1)])
    return single_layer_step(m, Interval(c - rad, c + rad), x, y, subs=torch.tensor([1, 3]), settings=st)


@pytest.mark.parametrize("widths,loss,lam", HEADS)
def test_golden_step_bounds(widths, loss, lam, check_golden):
    nb = _golden_case(widths, loss, lam)
    check_golden(f"crown_step_{loss}_{'x'.join(map(str, widths))}.json", nb.lo.to(D), nb.hi.to(D), atol=1e-10)


# The lean path: the coupled MSE step is the former formulation, bit for bit ----------------------
def _mse_coupled_reference(model, boxes, x, y, *, subs, settings):
    """The coupled MSE step as it was written before the lean path (torch.where regimes, top-k of
    Lv + gamma and gamma - Uv, one chunk)."""
    g, lam = settings.clip, settings.contraction
    n = x.shape[0]
    dt = boxes.lo.dtype
    s = settings.lr / n
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1).T.contiguous()
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    P = xt.shape[0]
    verts = torch.tensor(list(itertools.product((0, 1), repeat=P)), dtype=torch.bool)
    kk = subs.clamp(max=n)
    inv = torch.arange(len(kk))
    cap = crown._caps(x, y)
    two_x = 2 * xt
    lo, hi = boxes.lo, boxes.hi
    r_lo = lo @ xp + hi @ xn - y
    r_hi = hi @ xp + lo @ xn - y
    z1, z2 = two_x * r_lo.unsqueeze(1), two_x * r_hi.unsqueeze(1)
    zl, zu = torch.minimum(z1, z2), torch.maximum(z1, z2)
    cl, cu = zl.clamp(-g, g), zu.clamp(-g, g)
    reg_l = ((zl >= -g) & cap).unsqueeze(1)
    reg_u = ((zu <= g) & cap).unsqueeze(1)
    kg = (kk.to(dt) * g).unsqueeze(-1)
    ibp_lo = lam * lo - s * (cu.sum(-1) - top_sum(cu, kk, inv, largest=False) + kg)
    ibp_hi = lam * hi - s * (cl.sum(-1) - top_sum(cl, kk, inv, largest=True) - kg)
    th = torch.where(verts.unsqueeze(0), hi.unsqueeze(1), lo.unsqueeze(1))
    rv = th @ xt - y
    zv = two_x.unsqueeze(0) * rv.unsqueeze(2)
    Lv = torch.where(reg_l, zv.clamp(max=g), cl.unsqueeze(1))
    Uv = torch.where(reg_u, zv.clamp(min=-g), cu.unsqueeze(1))
    top_l = top_sum(Lv + g, kk, inv, largest=True)
    top_u = top_sum(g - Uv, kk, inv, largest=True)
    up = lam * th - s * Lv.sum(-1) + s * top_l
    dn = lam * th - s * Uv.sum(-1) - s * top_u
    mag = torch.maximum(hi, -lo).amax(-1, keepdim=True)
    marg = 1e-13 * (mag + settings.lr * g)
    lo_q = torch.maximum(ibp_lo, dn.amin(1) - marg)
    hi_q = torch.minimum(ibp_hi, up.amax(1) + marg)
    return torch.minimum(lo_q, hi_q), torch.maximum(lo_q, hi_q)


@pytest.mark.slow
@pytest.mark.parametrize("d,n", [(1, 3000), (2, 800)])
def test_coupled_mse_step_is_the_former_formula(d, n, monkeypatch):
    monkeypatch.setattr(crown, "CHUNK_ELEMENTS", 4 * n * (d + 1) * 2 ** (d + 1))    # several chunks
    g = torch.Generator().manual_seed(d)
    x = torch.rand(n, d, generator=g, dtype=D) * 4 - 2
    x[:3] *= 20                                                              # beyond X_CAP: the constant regimes
    y = x.sum(1) + 0.5 + 0.3 * torch.randn(n, generator=g, dtype=D)
    m = ModelSpec((d, 1), "mse")
    K = 70
    c = torch.tensor([0.8] * d + [0.2], dtype=D)
    w = torch.linspace(0.0, 0.4, K, dtype=D).unsqueeze(-1)
    box = Interval(c - w, c + w)
    subs = torch.cat([torch.tensor([0]), torch.arange(1, K - 1) * 7, torch.tensor([n + 5])])
    for clip in (0.3, 2.0):
        train_settings = TrainSettings(steps=1, lr=0.3, clip=clip)
        got = rules.mse.mse_coupled_step(m, box, x, y, subs=subs, settings=train_settings)
        lo, hi = _mse_coupled_reference(m, box, x, y, subs=subs, settings=train_settings)
        assert got.lo.numpy().tobytes() == lo.numpy().tobytes()
        assert got.hi.numpy().tobytes() == hi.numpy().tobytes()
