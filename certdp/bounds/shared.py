"""Shared boxes: per-sample gradient intervals on a few representative boxes (huge K).

The per-sample gradient intervals of a query may be computed on any box that contains its own
box.  AGT's boxes are nested (T_k is intersected downwards, so T_k is a subset of T_r for
k <= r), so with AGT's pairing (``src=None``: box j is T_k for k = ``subs[j]``, ``subs``
ascending) every radius k takes the intervals of the smallest radius r >= k on a geometric grid
{ceil(ratio^i)} (or the largest radius) and aggregates them with its own top-k and k*gamma term;
its step still starts from its own box, so every radius keeps its own envelope.  With an
explicit ``src`` the caller has already shared the boxes: intervals are computed once per box
that ``src`` names.  Queries with ``subs >= b`` take the trivial sum [-b gamma, b gamma].

The top-k sums are exact up to ``topk_cap``; beyond it each further removed lower (upper) bound
is bounded by the cap-th largest (smallest) one, which is exact when many samples are clipped at
the same value (the common case) and sound always.

Not nesting (certdp/privacy/sensitivity.py): radii k and k+1 of one group read their per-sample
bounds from the same representative box, so the envelopes of neighbouring datasets need not nest
(that needs the representative box of D inside the one of D', i.e. a data-independent box), and
the capped top-k is not monotone in the per-sample bounds.  Smooth releases refuse it.
"""

from __future__ import annotations

import math

import torch

from certdp.bounds.aggregate import top_sum
from certdp.bounds.base import Certificate
from certdp.bounds.interval import Interval


class SharedBoxes(Certificate):
    """Wraps the engine ``base``: its per-sample intervals on representative boxes only."""

    memory_factor = 1e-9      # manages its own memory: one chunk of queries

    def __init__(self, base: Certificate, ratio: float, *, topk_cap: int = 256):
        self.base, self.ratio, self.topk_cap = base, float(ratio), int(topk_cap)
        self.name = f"{base.name}+shared{ratio:g}"
        self.devices, self.device_note = base.devices, base.device_note

    def nesting_refusal(self):
        return ("ags.share_ratio", "shared per-sample bounds (ags.share_ratio) give radii k and k+1 the same box, "
                "which breaks envelope nesting between neighbours", "null (every radius its own box)")

    def output_bounds(self, model, theta, x):
        return self.base.output_bounds(model, theta, x)

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return self.base.per_sample_gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def _reps(self, ks: torch.Tensor) -> torch.Tensor:
        grid, r = set(), 1.0
        while r <= float(ks.max()) * self.ratio:
            grid.add(int(math.ceil(r)))
            r *= self.ratio
        kl = ks.tolist()
        is_rep = [k in grid or j == len(kl) - 1 for j, k in enumerate(kl)]
        rep, nxt = [0] * len(kl), len(kl) - 1
        for j in range(len(kl) - 1, -1, -1):
            if is_rep[j]:
                nxt = j
            rep[j] = nxt
        return torch.as_tensor(rep, device=ks.device)

    def step_bounds(self, model, boxes: Interval, batch, *, subs, src=None, settings) -> Interval:
        x, y = batch
        gamma, lam, lr = settings.clip, settings.contraction, settings.lr
        b = x.shape[0]
        dev = boxes.lo.device
        subs = subs.to(dev)
        own = torch.arange(len(subs), device=dev) if src is None else src.to(dev)
        rep = self._reps(subs) if src is None else src.to(dev)
        Q, P = len(subs), boxes.lo.shape[1]
        lo_out = torch.empty(Q, P, dtype=boxes.lo.dtype, device=dev)
        hi_out = torch.empty(Q, P, dtype=boxes.hi.dtype, device=dev)
        big = subs >= b
        if big.any():
            lo_out[big] = lam * boxes.lo[own[big]] - lr * gamma
            hi_out[big] = lam * boxes.hi[own[big]] + lr * gamma
        small = (~big).nonzero().flatten()
        if len(small):
            reps = torch.unique(rep[small])
            scratch = self.scratch((len(reps), model.n_params, b), boxes.lo.dtype, dev)
            g = self.base.per_sample_gradient_bounds(model, Interval(boxes.lo[reps], boxes.hi[reps]), x, y,
                                                     clip=gamma, out=scratch)
            for gi, r in enumerate(reps.tolist()):
                members = small[rep[small] == r]
                kk = subs[members]
                lo_g, hi_g = g.lo[gi], g.hi[gi]                                  # [P, b]
                at = torch.zeros(len(members), dtype=torch.long, device=dev)
                rm_lo = top_sum(lo_g.unsqueeze(0), kk, at, largest=True, cap=self.topk_cap)   # [M, P]
                rm_hi = top_sum(hi_g.unsqueeze(0), kk, at, largest=False, cap=self.topk_cap)
                kg = (kk.to(boxes.lo.dtype) * gamma).unsqueeze(-1)
                s_lo = lo_g.sum(-1) - rm_lo - kg
                s_hi = hi_g.sum(-1) - rm_hi + kg
                lo_out[members] = lam * boxes.lo[own[members]] - (lr / b) * s_hi
                hi_out[members] = lam * boxes.hi[own[members]] - (lr / b) * s_lo
        return Interval(lo_out, hi_out)
