"""Interval value type, the few interval products AGT needs, and the interval forward pass.

All functions are sound over-approximations in exact arithmetic; rounding is handled by
:func:`outward`, applied once per training step by AGT.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

# The lo <= hi check reads every element; it is on in tests (CERTDP_DEBUG=1), off in runs.
CHECK = os.environ.get("CERTDP_DEBUG", "0") not in ("", "0")


@dataclass(frozen=True)
class Interval:
    """Element-wise interval ``[lo, hi]`` of two equal-shape tensors."""

    lo: torch.Tensor
    hi: torch.Tensor

    def __post_init__(self):
        if self.lo.shape != self.hi.shape:
            raise ValueError(f"Interval bounds differ in shape: {tuple(self.lo.shape)} vs {tuple(self.hi.shape)}")
        if CHECK and self.lo.numel() and bool((self.lo > self.hi).any()):
            gap = (self.lo - self.hi).max().item()
            raise ValueError(f"Interval with lo > hi (by up to {gap:.3g})")

    @staticmethod
    def point(x: torch.Tensor) -> "Interval":
        return Interval(x, x)

    @property
    def mid(self) -> torch.Tensor:
        return (self.lo + self.hi) / 2

    @property
    def rad(self) -> torch.Tensor:
        return (self.hi - self.lo) / 2

    @property
    def width(self) -> torch.Tensor:
        return self.hi - self.lo

    def contains(self, x: torch.Tensor, tol: float = 0.0) -> torch.Tensor:
        return (x >= self.lo - tol) & (x <= self.hi + tol)

    def clamp(self, lo: float, hi: float) -> "Interval":
        # clamp is monotone, so clamping both ends is exact.
        return Interval(self.lo.clamp(lo, hi), self.hi.clamp(lo, hi))

    def __getitem__(self, idx) -> "Interval":
        return Interval(self.lo[idx], self.hi[idx])


def outward(iv: Interval, rel: float = 1e-12, abs_: float = 1e-300) -> Interval:
    """Widen by a relative margin that dominates float64 rounding of one step's arithmetic."""
    m = torch.maximum(iv.lo.abs(), iv.hi.abs()) * rel + abs_
    return Interval(iv.lo - m, iv.hi + m)


def matmul_exact_left(x: torch.Tensor, w: Interval) -> Interval:
    """Bounds of ``x @ W^T`` for an exact ``x`` [..., n, i] and interval ``W`` [..., o, i]."""
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    wl, wu = w.lo.transpose(-1, -2), w.hi.transpose(-1, -2)
    return Interval(xp @ wl + xn @ wu, xp @ wu + xn @ wl)


def matmul_nonneg_left(a: Interval, w: Interval) -> Interval:
    """Bounds of ``a @ W^T`` for ``a`` >= 0 (post-ReLU) [..., n, i] and interval ``W`` [..., o, i].

    For a_j in [al, au] with al >= 0, the product w*a is minimised at (wl, al) if wl >= 0 and
    at (wl, au) otherwise; symmetrically for the maximum.  Each product is bounded exactly.
    """
    wl, wu = w.lo.transpose(-1, -2), w.hi.transpose(-1, -2)
    lo = a.lo @ wl.clamp(min=0) + a.hi @ wl.clamp(max=0)
    hi = a.hi @ wu.clamp(min=0) + a.lo @ wu.clamp(max=0)
    return Interval(lo, hi)


def matmul_midrad(a: Interval, w: Interval) -> Interval:
    """Bounds of ``a @ W`` for general intervals (midpoint-radius arithmetic, Rump 1999):
    mid = am @ wm, rad = |am| @ wr + ar @ |wm| + ar @ wr."""
    am, ar = a.mid, a.rad
    wm, wr = w.mid, w.rad
    m = am @ wm
    r = am.abs() @ wr + ar @ wm.abs() + ar @ wr
    return Interval(m - r, m + r)


# Largest [..., n, o, i] temporary (elements) for which matmul_interval forms the exact
# element-wise products instead of the midpoint-radius product.
EXACT_PRODUCT_ELEMENTS = 2 ** 26


def matmul_interval(a: Interval, w: Interval) -> Interval:
    """Bounds of ``a @ W`` ([..., n, o] @ [..., o, i]) for general intervals.

    With a small enough [..., n, o, i] temporary: the exact interval product of every pair
    (min / max over the four corners), summed over o.  That is the tightest interval enclosure
    of the sum, inclusion-monotone, and monotone in floating point too (a rounded minimum of
    rounded products, summed in a fixed order, can only decrease when the box grows).
    Otherwise the midpoint-radius product (:func:`matmul_midrad`), inclusion-monotone in exact
    arithmetic."""
    numel = a.lo.numel() * w.lo.shape[-1]
    if numel > EXACT_PRODUCT_ELEMENTS:
        return matmul_midrad(a, w)
    al, ah = a.lo.unsqueeze(-1), a.hi.unsqueeze(-1)              # [..., n, o, 1]
    wl, wh = w.lo.unsqueeze(-3), w.hi.unsqueeze(-3)              # [..., 1, o, i]
    c1, c2, c3, c4 = al * wl, al * wh, ah * wl, ah * wh
    lo = torch.minimum(torch.minimum(c1, c2), torch.minimum(c3, c4)).sum(-2)
    hi = torch.maximum(torch.maximum(c1, c2), torch.maximum(c3, c4)).sum(-2)
    return Interval(lo, hi)


def mul_exact(d: Interval, x: torch.Tensor) -> Interval:
    """Bounds of ``d * x`` (broadcast) for an interval ``d`` and an exact ``x``."""
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    return Interval(d.lo * xp + d.hi * xn, d.hi * xp + d.lo * xn)


def mul_nonneg(d: Interval, a: Interval) -> Interval:
    """Bounds of ``d * a`` (broadcast) for an interval ``d`` and ``a`` >= 0."""
    return Interval(d.lo.clamp(min=0) * a.lo + d.lo.clamp(max=0) * a.hi,
                    d.hi.clamp(min=0) * a.hi + d.hi.clamp(max=0) * a.lo)


def forward_bounds(model, theta: Interval, x: torch.Tensor):
    """Interval forward pass of a Linear/ReLU stack (``certdp.models.ModelSpec``) over the
    parameter boxes ``theta`` [K, P] for exact inputs ``x`` [n, d]: the output interval
    [K, n, out] plus the pre-activation and activation intervals of every layer.

    The first layer has exact inputs (``x+ W_L + x- W_U``); later layers have non-negative
    post-ReLU inputs, for which each product w*a is bounded exactly by sign-splitting the
    weight bound."""
    lo_layers = model.unflatten(theta.lo)
    hi_layers = model.unflatten(theta.hi)
    acts: list = [x]
    pres: list[Interval] = []
    a = None
    for l in range(model.n_layers):
        w = Interval(lo_layers[l][0], hi_layers[l][0])
        b = Interval(lo_layers[l][1].unsqueeze(-2), hi_layers[l][1].unsqueeze(-2))
        z = matmul_exact_left(x, w) if l == 0 else matmul_nonneg_left(a, w)
        z = Interval(z.lo + b.lo, z.hi + b.hi)
        pres.append(z)
        a = z.clamp(0.0, float("inf")) if l < model.n_layers - 1 else z
        acts.append(a)
    return a, acts, pres


def output_bounds(model, theta: Interval, x: torch.Tensor) -> Interval:
    """Intervals [K, n, out] containing f_theta(x) for every theta in the boxes [K, P]."""
    out, _, _ = forward_bounds(model, theta, x)
    return out
