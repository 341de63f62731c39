"""Exact clipped per-sample gradient ranges of one-hidden-layer MSE networks (``certificate=crown``,
part 2 of :mod:`certdp.bounds.crown`, where the derivation is): every candidate extreme of the
two quadratic gradient components over the independent parameter groups is evaluated, so the
ranges are exact (up to the closure at z = 0) and inclusion-monotone, and intersected with IBP."""

from __future__ import annotations

import torch

from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval
from certdp.models import ModelSpec


def _candidates_range(vals: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    st = torch.stack(vals, 0)
    return st.amin(0), st.amax(0)


def _mag(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """max(|lo|, |hi|) = max(hi, -lo): grows when [lo, hi] grows (an isotone rounding scale)."""
    return torch.maximum(hi, -lo).clamp(min=0)


def mlp1_gradient_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                         clip: float, out: tuple[torch.Tensor, torch.Tensor] | None = None) -> Interval:
    """Exact clipped per-sample gradient ranges [K, P, n] of a one-hidden-layer MSE network over
    the box (module docstring, part 2), intersected with IBP; written into ``out`` when given
    (see :func:`certdp.bounds.ibp.gradient_bounds`)."""
    ibp = gradient_bounds(model, theta, x, y, clip=clip, out=out)
    lo_buf, hi_buf = ibp.lo, ibp.hi
    (sw0, sb0, (H, d)), (sw1, sb1, _) = model.slices()
    K, n = theta.lo.shape[0], x.shape[0]
    W1l, W1u = theta.lo[:, sw0].view(K, H, d), theta.hi[:, sw0].view(K, H, d)
    b1l, b1u = theta.lo[:, sb0], theta.hi[:, sb0]
    wl, wu = theta.lo[:, sw1].view(K, 1, H), theta.hi[:, sw1].view(K, 1, H)
    b2l, b2u = theta.lo[:, sb1], theta.hi[:, sb1]
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    zl = xp @ W1l.transpose(1, 2) + xn @ W1u.transpose(1, 2) + b1l.unsqueeze(1)   # [K, n, H]
    zu = xp @ W1u.transpose(1, 2) + xn @ W1l.transpose(1, 2) + b1u.unsqueeze(1)
    al, au = zl.clamp(min=0), zu.clamp(min=0)
    tl = torch.minimum(wl * al, wl * au)                                      # w*a, a >= 0: exact
    tu = torch.maximum(wu * al, wu * au)
    fl = tl.sum(-1, keepdim=True) + b2l.view(K, 1, 1)
    fu = tu.sum(-1, keepdim=True) + b2u.view(K, 1, 1)
    yy = y.view(1, n, 1)
    # rounding margin on the rest r_h = f - t_h: relative to isotone magnitudes
    eps = 1e-13 * (2 * _mag(fl, fu) + 2 * _mag(tl, tu) + yy.abs() + 1)
    cl = fl - tl - yy - eps                                                   # c = rest_h - y
    cu = fu - tu - yy + eps
    # dL/dW2_h = 2 a (w a + c)
    cands = []
    for w in (wl, wu):
        for c in (cl, cu):
            astar = (-c / (2 * w).where(w != 0, torch.ones_like(w))).clamp(min=al, max=au)
            astar = torch.where(w != 0, astar, al)
            for a_ in (al, au, astar):
                cands.append(2 * a_ * (w * a_ + c))
    gw2_l, gw2_u = _candidates_range(cands)
    # dL/db1_h = 2 (w z + c) w on z > 0, else 0
    zp = zl.clamp(min=0)
    cands = []
    for z in (zp, zu):
        for c in (cl, cu):
            wstar = (-c / (2 * z).where(z > 0, torch.ones_like(z))).clamp(min=wl, max=wu)
            wstar = torch.where(z > 0, wstar, wl)
            for w in (wl, wu, wstar):
                cands.append(2 * (w * z + c) * w)
    gb1_l, gb1_u = _candidates_range(cands)
    active = zu > 0
    maybe_off = zl <= 0
    zero = torch.zeros_like(gb1_l)
    gb1_l = torch.where(active, torch.where(maybe_off, torch.minimum(gb1_l, zero), gb1_l), zero)
    gb1_u = torch.where(active, torch.where(maybe_off, torch.maximum(gb1_u, zero), gb1_u), zero)
    m2 = 2e-12 * _mag(gw2_l, gw2_u)
    m1 = 2e-12 * _mag(gb1_l, gb1_u)
    gw2_l, gw2_u, gb1_l, gb1_u = gw2_l - m2, gw2_u + m2, gb1_l - m1, gb1_u + m1
    # W1_hj = db1_h * x_j
    xpj, xnj = xp.T.view(1, 1, d, n), xn.T.view(1, 1, d, n)
    bl_, bu_ = gb1_l.transpose(1, 2).unsqueeze(2), gb1_u.transpose(1, 2).unsqueeze(2)   # [K, H, 1, n]
    gw1_l = (bl_ * xpj + bu_ * xnj).reshape(K, H * d, n)
    gw1_u = (bu_ * xpj + bl_ * xnj).reshape(K, H * d, n)
    new = [(sw0, gw1_l, gw1_u), (sb0, gb1_l.transpose(1, 2), gb1_u.transpose(1, 2)),
           (sw1, gw2_l.transpose(1, 2), gw2_u.transpose(1, 2))]
    for sl, l_, u_ in new:
        lo_buf[:, sl] = torch.maximum(lo_buf[:, sl], l_.clamp(-clip, clip))
        hi_buf[:, sl] = torch.minimum(hi_buf[:, sl], u_.clamp(-clip, clip))
    return Interval(lo_buf, hi_buf)
