"""Softmax bounds class by class (certdp.losses._softmax_bounds_cols, the form up to 16 classes):
sound against exact arithmetic for every class count, on boxes of every width and position,
ties and near-ties at the top included, and a planted shift that underflows is caught."""

from __future__ import annotations

import mpmath as mp
import pytest
import torch

from certdp import losses
from certdp.losses import SoftmaxCE, softmax_bounds

D = torch.float64


def _boxes(C: int, n: int, seed: int):
    """Centres from 1e-3 to 1e6 (a few at 1e300), widths from 0 to 1e6, and rows whose two largest
    coordinates tie or nearly tie (the argmax / second-largest switch of the shifts)."""
    gen = torch.Generator().manual_seed(seed)
    mag = 10 ** torch.empty(n, 1, dtype=D).uniform_(-3, 6, generator=gen)
    c = (torch.rand(n, C, generator=gen, dtype=D) * 2 - 1) * mag
    w = 10 ** torch.empty(n, C, dtype=D).uniform_(-6, 6, generator=gen) * (torch.rand(n, C, generator=gen) < 0.9)
    c[:4] *= 1e294
    top = c.argmax(-1)
    c[4:12, 0] = c[4:12].gather(-1, top[4:12, None]).squeeze(-1)                       # exact ties
    c[12:20, 0] = c[12:20].gather(-1, top[12:20, None]).squeeze(-1) * (1 + 1e-15)       # near-ties
    c[20:28] = 0.0
    c[20:28, 1] = 800.0                                                                  # the others underflow
    return c - w / 2, c + w / 2


def _exact_ok(lo, hi, pl, pu, rows, *, tight: float | None = None) -> bool:
    """Sound against 50-digit arithmetic on ``rows``: pl <= the exact minimum of p_c over the box
    and pu >= the maximum; with ``tight``, also within that relative distance of them (the margins
    are a few ulps of the largest logit, 1e-8 relative up to |z| = 1e6)."""
    mp.mp.dps = 50
    C = lo.shape[1]
    for i in rows:
        lo_i, hi_i = lo[i].tolist(), hi[i].tolist()
        for c in range(C):
            low = 1 / (1 + mp.fsum(mp.exp(mp.mpf(hi_i[j]) - mp.mpf(lo_i[c])) for j in range(C) if j != c))
            high = 1 / (1 + mp.fsum(mp.exp(mp.mpf(lo_i[j]) - mp.mpf(hi_i[c])) for j in range(C) if j != c))
            a, b = mp.mpf(float(pl[i, c])), mp.mpf(float(pu[i, c]))
            if not (a <= low and high <= b):
                return False
            if tight is not None and (a < low * (1 - tight) - mp.mpf(1e-300) or b > high * (1 + tight) + mp.mpf(1e-300)):
                return False
    return True


@pytest.mark.parametrize("C", [2, 3, 5, 10, 16])
def test_class_wise_softmax_bounds_hold_in_exact_arithmetic(C):
    lo, hi = _boxes(C, 120, C)
    pl, pu = softmax_bounds(lo, hi)
    assert torch.isfinite(pl).all() and torch.isfinite(pu).all()
    assert (0 <= pl).all() and (pl <= pu).all() and (pu <= 1).all()
    assert _exact_ok(lo, hi, pl, pu, range(0, 120, 3 if C <= 5 else 7))
    moderate = [i for i in range(4, 120) if float(torch.maximum(lo[i].abs(), hi[i].abs()).max()) <= 1e6]
    assert _exact_ok(lo, hi, pl, pu, moderate[::4], tight=1e-6)
    # within the margins of the log-cumulative-sum form (the one beyond 16 classes)
    old = losses.UNROLL_CLASSES
    try:
        losses.UNROLL_CLASSES = 0
        ql, qu = softmax_bounds(lo, hi)
    finally:
        losses.UNROLL_CLASSES = old
    zmag = torch.maximum(lo.abs(), hi.abs()).amax(-1, keepdim=True)
    tol = 8 * 2.0 ** -53 * (C + 2) * (1 + zmag) + 1e-320
    assert bool(((pl - ql).abs() <= tol).all() and ((pu - qu).abs() <= tol).all())

def test_a_shift_by_the_maximum_alone_is_caught(monkeypatch):
    """Planted: every class shifted by the overall maximum (no second-largest value for the top
    class).  Where the top class's box is wide and the others sit 800 below its upper end, its sum
    over the other classes underflows: 0/0, the trivial bound 0 where the exact minimum is 1/C.
    Sound, but the tightness check fails (the real shifts keep t_c >= 1)."""
    def shift_by_max(cols):
        m = cols[0]
        for v in cols[1:]:
            m = torch.maximum(m, v)
        e = [torch.exp(v - m) for v in cols]
        t = [sum(e[j] for j in range(len(cols)) if j != c) for c in range(len(cols))]
        return [m] * len(cols), t
    lo = torch.tensor([[0.0, 0.0, 0.0], [-5.0, 10.0, -3.0]], dtype=D)
    hi = torch.tensor([[800.0, 0.0, 0.0], [790.0, 10.5, -2.0]], dtype=D)
    assert _exact_ok(lo, hi, *softmax_bounds(lo, hi), range(2), tight=1e-9)
    monkeypatch.setattr(losses, "_others", shift_by_max)
    pl, pu = softmax_bounds(lo, hi)
    assert _exact_ok(lo, hi, pl, pu, range(2))                      # still sound
    assert not _exact_ok(lo, hi, pl, pu, range(2), tight=1e-9)      # but not tight: caught


# ---------------------------------------------------------------------------------------------
# The stabilised softmax bounds on extreme boxes (|z| up to 1e300): finite, sound, inclusion-monotone;
# the old formula exp(z - max z) (planted) is not finite there

def _naive_softmax_bounds(lo, hi):
    """The formula before the fix (planted bug): exponentials shifted by max(hi)."""
    shift = hi.max(dim=-1, keepdim=True).values
    el, eu = torch.exp(lo - shift), torch.exp(hi - shift)
    su, sl = eu.sum(-1, keepdim=True), el.sum(-1, keepdim=True)
    return (el / (el + (su - eu))).clamp(0, 1), (eu / (eu + (sl - el))).clamp(0, 1)


def _extreme_boxes(gen, n=400, C=4):
    """Boxes of every width and position: centres up to 1e6 (and a few up to 1e300), widths
    from 0 to 1e6."""
    mag = 10 ** torch.empty(n, 1, dtype=D).uniform_(-3, 6, generator=gen)
    c = (torch.rand(n, C, generator=gen, dtype=D) * 2 - 1) * mag
    w = 10 ** torch.empty(n, C, dtype=D).uniform_(-6, 6, generator=gen) * (torch.rand(n, C, generator=gen) < 0.9)
    c[:8] *= 1e294
    return c - w / 2, c + w / 2


def test_softmax_bounds_are_finite_and_sound_on_extreme_boxes():
    gen = torch.Generator().manual_seed(0)
    lo, hi = _extreme_boxes(gen)
    pl, pu = softmax_bounds(lo, hi)
    assert torch.isfinite(pl).all() and torch.isfinite(pu).all()
    assert (0 <= pl).all() and (pl <= pu).all() and (pu <= 1).all()
    # every softmax of the box lies inside (corners, where the extremes are, and random points)
    for _ in range(40):
        t = torch.rand(lo.shape, generator=gen, dtype=D)
        t = torch.where(torch.rand(lo.shape, generator=gen) < 0.5, t.round(), t)
        p = torch.softmax(lo + t * (hi - lo), -1)
        assert bool(((pl <= p) & (p <= pu)).all())
    # against exact arithmetic (50 digits) at the corners where the extremes are attained
    mp.mp.dps = 50
    for i in range(8, lo.shape[0], 7):
        for c in range(lo.shape[1]):
            lo_i, hi_i = lo[i].tolist(), hi[i].tolist()
            low = 1 / (1 + mp.fsum(mp.exp(mp.mpf(hi_i[j]) - mp.mpf(lo_i[c])) for j in range(len(lo_i)) if j != c))
            high = 1 / (1 + mp.fsum(mp.exp(mp.mpf(lo_i[j]) - mp.mpf(hi_i[c])) for j in range(len(lo_i)) if j != c))
            assert mp.mpf(float(pl[i, c])) <= low and high <= mp.mpf(float(pu[i, c])), (i, c)
    # the exact corner values are reached within the rounding margin (tight, not trivial)
    mid = torch.softmax((lo + hi) / 2, -1)
    narrow = ((hi - lo).amax(-1) < 1e-3) & (lo.abs().amax(-1) < 1e3)
    assert bool(((pu - pl)[narrow] < 1e-2).all())
    assert bool(((pl <= mid) & (mid <= pu)).all())
    # the planted bug: the old formula is not finite on the same boxes
    ol, ou = _naive_softmax_bounds(lo, hi)
    assert not (torch.isfinite(ol).all() and torch.isfinite(ou).all())


def test_softmax_bounds_are_inclusion_monotone():
    gen = torch.Generator().manual_seed(1)
    lo, hi = _extreme_boxes(gen, n=300)
    grow = 10 ** torch.empty(lo.shape, dtype=D).uniform_(-8, 5, generator=gen)
    pl, pu = softmax_bounds(lo, hi)
    ql, qu = softmax_bounds(lo - grow * torch.rand(lo.shape, generator=gen, dtype=D), hi + grow)
    assert bool((ql <= pl).all() and (qu >= pu).all())


def test_ce_gradient_and_linear_bounds_stay_finite_on_extreme_logits():
    gen = torch.Generator().manual_seed(2)
    lo, hi = _extreme_boxes(gen, n=60, C=3)
    lo, hi = lo[8:].reshape(2, 26, 3), hi[8:].reshape(2, 26, 3)      # [K, n, C], centres up to 1e6
    y = torch.randint(0, 3, (26,), generator=gen)
    gl, gu = SoftmaxCE().grad_bounds(lo, hi, y)
    assert torch.isfinite(gl).all() and torch.isfinite(gu).all() and (gl >= -1).all() and (gu <= 1).all()
    for t in SoftmaxCE().grad_linear_bounds(lo, hi, y):
        assert torch.isfinite(t).all()
