"""The lean CPU path computes the same certificates, bit for bit, as the direct forms it replaces.

* :func:`certdp.bounds.aggregate.top_values` (shared candidates) against ``torch.topk``, on
  values built to stress it (ties at the clip, nested boxes, many radii, NaN), and a planted bug
  (a dropped candidate) that the comparison catches;
* :func:`certdp.bounds.ibp.gradient_topk_sums` (block by block) against ``batch_sum`` of the
  materialised :func:`certdp.bounds.ibp.gradient_bounds`, and the blocked eager tau sums against
  :func:`certdp.bounds.ibp.gradient_sum_stats`;
* CROWN's coupled MSE step against the former formulation (``torch.where`` regimes, top-k of
  ``Lv + gamma`` and ``gamma - Uv``), kept here as the reference;
* the workspace buffers: reused across shapes without mixing results.

Soundness and nesting of these engines are tested in test_soundness.py, test_smoothness.py,
test_crown.py and test_ibp.py; these tests pin that the faster code is the same function."""

from __future__ import annotations

import itertools

import pytest
import torch

from certdp.bounds import aggregate, crown, ibp, rules
from certdp.bounds.aggregate import batch_sum, top_sum, top_values
from certdp.bounds.base import WORKSPACE
from certdp.bounds.interval import Interval
from certdp.models import ModelSpec
from certdp.training import TrainSettings

D = torch.float64


def _nested_rows(M, C, n, *, seed, clip=None, spread=1e-3):
    """[M, C, n] values of M nested boxes: a common base plus offsets that grow with the box."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(C, n, generator=g, dtype=D)
    off = torch.rand(M, C, n, generator=g, dtype=D) * spread * torch.arange(1, M + 1, dtype=D).view(-1, 1, 1)
    v = base - off
    return v.clamp(-clip, clip) if clip is not None else v


@pytest.mark.parametrize("M,C,n,k,clip", [(6, 3, 2000, 64, None), (12, 2, 4000, 200, 0.5), (3, 8, 1000, 100, 0.05),
                                         (40, 1, 3000, 300, None)])
def test_shared_candidates_select_the_same_sorted_values(M, C, n, k, clip):
    v = _nested_rows(M, C, n, seed=M + n, clip=clip)
    for largest in (True, False):
        ref = torch.topk(v, k, dim=-1, largest=largest, sorted=True).values
        got = top_values(v, k, largest=largest)
        assert got.numpy().tobytes() == ref.numpy().tobytes()


def test_shared_candidates_on_a_middle_axis_and_with_nan():
    v = _nested_rows(5, 4, 2000, seed=3).movedim(-1, 1).contiguous()          # samples on axis 1
    ref = torch.topk(v, 80, dim=1, sorted=True).values
    assert torch.equal(top_values(v, 80, largest=True, dim=1), ref)
    w = _nested_rows(5, 2, 2000, seed=4)
    w[2, 1, 17] = float("nan")                                               # order undefined: the plain top-k
    assert aggregate._candidate_index(w, 80, True) is None
    same = top_values(w, 80, largest=True).numpy().tobytes() == torch.topk(w, 80, dim=-1, sorted=True).values.numpy().tobytes()
    assert same                                                              # NaN != NaN: compare the bytes


def test_a_dropped_candidate_is_caught(monkeypatch):
    """Planted bug: the candidate set loses its best sample; the bitwise comparison fails."""
    v = _nested_rows(6, 2, 3000, seed=5)
    ref = torch.topk(v, 100, dim=-1, sorted=True).values
    real = aggregate._candidate_index

    def lossy(w, kmax, largest, bounds=None):
        idx = real(w, kmax, largest, bounds)
        best = torch.topk(w.amin(0), 1, dim=-1).indices                    # a sample of the true top set
        return torch.where(idx == best, -1, idx)
    monkeypatch.setattr(aggregate, "_candidate_index", lossy)
    assert not torch.equal(top_values(v, 100, largest=True), ref)


def test_top_sum_transform_equals_selecting_the_shifted_values():
    v = _nested_rows(8, 3, 1500, seed=6, clip=1.0)
    subs = torch.arange(60, 68)
    a = top_sum(v, subs, largest=True, transform=lambda t: t + 1.0)
    b = top_sum(v + 1.0, subs, largest=True)
    c = top_sum(v, subs, largest=False, transform=lambda t: 1.0 - t)
    d = top_sum(1.0 - v, subs, largest=True)
    assert torch.equal(a, b) and torch.equal(c, d)


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
        st = TrainSettings(steps=1, lr=0.3, clip=clip)
        got = rules.mse.mse_coupled_step(m, box, x, y, subs=subs, settings=st)
        lo, hi = _mse_coupled_reference(m, box, x, y, subs=subs, settings=st)
        assert got.lo.numpy().tobytes() == lo.numpy().tobytes()
        assert got.hi.numpy().tobytes() == hi.numpy().tobytes()


def test_workspace_buffers_grow_and_are_views():
    a = WORKSPACE.get("test.lean", (3, 4), D, "cpu")
    a.fill_(1.0)
    b = WORKSPACE.get("test.lean", (5, 6), D, "cpu")                       # grows: a new buffer
    b.fill_(2.0)
    c = WORKSPACE.get("test.lean", (2, 2), D, "cpu")
    assert c.shape == (2, 2) and c.data_ptr() == b.data_ptr() and bool((a == 1.0).all())
