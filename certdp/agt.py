"""Abstract Gradient Training: sound parameter envelopes T_k for every radius k in one pass.

For a fixed batch plan, a dataset D' with d(D, D') <= k (substitutions) changes at most
min(k, b) of the b records of any batch.  With per-sample clipped-gradient intervals
[l_i, u_i] (valid for every parameter in the current box T_k), the batch sum of D' lies in

    [ SEMin_{b-k}(l) - k*gamma ,  SEMax_{b-k}(u) + k*gamma ]                 (k < b)

where SEMin_{b-k} is the sum of the b-k smallest lower bounds (= sum(l) - top_k(l)) and
SEMax_{b-k} the sum of the b-k largest upper bounds (= sum(u) - bottom_k(u)): the k substituted
records contribute clipped gradients in [-gamma, gamma] and the retained ones at least their
lower bounds.  Taking k' < k substitutions in a batch only raises the lower end (each extra
removal drops a value >= -gamma and adds -gamma), so k is the worst case.  For k >= b the sum
is in [-b*gamma, b*gamma].  The step theta <- lam*theta - lr/b * sum then gives

    lo' = lam*lo - lr/b * SumU,     hi' = lam*hi - lr/b * SumL.

All radii share one pass: boxes carry a leading K axis, each coordinate is sorted once with
``topk(min(k_max, b))`` and every k reads its sum from a cumulative sum.  Because T_k is also a
valid bound for every smaller radius, boxes are intersected downwards (a running max/min from
the largest radius), and every step is widened outward by a relative 1e-12 against rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from certdp import DTYPE
from certdp.bounds.interval import Interval, outward
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan


@dataclass(frozen=True)
class Envelopes:
    """Parameter envelopes: ``lo[j], hi[j]`` bound every parameter vector reachable by training
    on a dataset within ``k_values[j]`` substitutions of D; ``nominal`` is M(f, theta_init, D)."""

    k_values: torch.Tensor   # [K], sorted ascending, >= 1
    lo: torch.Tensor         # [K, P]
    hi: torch.Tensor         # [K, P]
    nominal: torch.Tensor    # [P]

    @property
    def box(self) -> Interval:
        return Interval(self.lo, self.hi)

    def contains(self, theta: torch.Tensor, tol: float = 0.0) -> torch.Tensor:
        """[..., K] booleans: is theta ([..., P]) inside T_k."""
        t = theta.unsqueeze(-2)
        return ((t >= self.lo - tol) & (t <= self.hi + tol)).all(-1)

    def widths(self) -> torch.Tensor:
        return self.hi - self.lo


def _extreme_sum(v: torch.Tensor, kk: torch.Tensor, largest: bool) -> torch.Tensor:
    """Sum of the ``kk[j]`` largest (or smallest) entries of ``v[j, p, :]``: [K, P].

    One ``topk(max k)`` per coordinate; every radius reads its own k from a cumulative sum."""
    kmax = int(kk.max())
    top = torch.topk(v, kmax, dim=-1, largest=largest, sorted=True).values.cumsum_(-1)
    idx = (kk - 1).view(-1, 1, 1).expand(v.shape[0], v.shape[1], 1)
    return top.gather(-1, idx).squeeze(-1)


def aggregate_batch(g: Interval, ks: torch.Tensor, clip: float, mode: str = "topk") -> Interval:
    """Bounds [K, P] on the batch sum of clipped gradients of any dataset within k substitutions.

    ``g`` holds per-sample intervals [K, P, b] (row j valid on box j); ``ks`` the radii [K].
    ``mode="topk"`` removes the exact top-k lower / bottom-k upper bounds (SEMin/SEMax);
    ``mode="max"`` removes k times the largest lower / smallest upper bound instead, a sound
    relaxation (sum of the top k <= k * max) that needs one pass instead of a partial sort and
    is equal to it whenever k samples are clipped at the threshold."""
    b = g.lo.shape[-1]
    kk = ks.clamp(max=b)
    lo_sum, hi_sum = g.lo.sum(-1), g.hi.sum(-1)
    if mode == "max":
        kf = kk.to(lo_sum.dtype).unsqueeze(-1)
        rm_lo, rm_hi = kf * g.lo.amax(-1), kf * g.hi.amin(-1)
    else:
        rm_lo = _extreme_sum(g.lo, kk, largest=True)     # top-k lower bounds leave the sum
        rm_hi = _extreme_sum(g.hi, kk, largest=False)   # bottom-k upper bounds leave the sum
    kg = (kk.to(lo_sum.dtype) * clip).unsqueeze(-1)
    return Interval(lo_sum - rm_lo - kg, hi_sum - rm_hi + kg)


def _chunks(n_k: int, b: int, p: int, factor: int = 2, budget_bytes: float = 1.2e9) -> int:
    """Radii per chunk so that ``factor`` [chunk, P, b] float64 tensors fit the budget."""
    per_radius = b * p * 8 * factor
    return max(1, min(n_k, int(budget_bytes // max(per_radius, 1))))


def _one_step(cert, model, lo, hi, xb, yb, ks, settings, chunk):
    """Boxes after one step for all radii (chunked over K): the engine's joint ``step_bounds``
    where it has one, else per-sample gradient intervals aggregated with :func:`aggregate_batch`."""
    lam, lr, gamma = settings.contraction, settings.lr, settings.clip
    b = xb.shape[0]
    step_bounds = getattr(cert, "step_bounds", None)
    new_lo, new_hi = torch.empty_like(lo), torch.empty_like(hi)
    for s in range(0, lo.shape[0], chunk):
        sl = slice(s, s + chunk)
        box = Interval(lo[sl], hi[sl])
        if step_bounds is not None:
            nb = step_bounds(model, box, xb, yb, ks[sl], settings)
        else:
            sums = getattr(cert, "batch_sum_bounds", None)
            if sums is not None:
                tot = sums(model, box, xb, yb, ks[sl], gamma)
            else:
                g = cert.per_sample_gradient_bounds(model, box, xb, yb, gamma)
                tot = aggregate_batch(g, ks[sl], gamma, getattr(cert, "aggregation", "topk"))
            nb = Interval(lam * box.lo - (lr / b) * tot.hi, lam * box.hi - (lr / b) * tot.lo)
        new_lo[sl], new_hi[sl] = nb.lo, nb.hi
    return new_lo, new_hi


def run_agt(model: ModelSpec, theta_init: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            settings: TrainSettings, k_values, certificate=None, plan: torch.Tensor | None = None,
            progress: bool = True, start_box: Interval | None = None,
            steps: range | None = None) -> Envelopes:
    """Train nominally and certify envelopes for all radii ``k_values`` in one pass.

    ``start_box`` ([K, P]) lets a window start from existing envelopes; by default training
    starts from the point ``theta_init`` (for every radius).  ``steps`` restricts to a window of
    the batch plan (multi-release AGS)."""
    from certdp.bounds import get_certificate
    cert = certificate if certificate is not None else get_certificate("ibp")
    x = x.to(DTYPE)
    y = y.to(DTYPE) if model.loss != "ce" else y
    ks = torch.as_tensor(sorted(set(int(k) for k in k_values)), dtype=torch.long)
    if len(ks) == 0 or int(ks[0]) < 1:
        raise ValueError("k_values must be non-empty radii >= 1")
    n = x.shape[0]
    plan = batch_plan(n, settings) if plan is None else plan
    K, P = len(ks), model.n_params
    theta = theta_init.to(DTYPE).clone()
    if start_box is None:
        lo = theta.expand(K, P).clone()
        hi = lo.clone()
    else:
        lo, hi = start_box.lo.clone(), start_box.hi.clone()
    lam, lr, gamma = settings.contraction, settings.lr, settings.clip
    step_range = range(settings.steps) if steps is None else steps
    full = plan.shape[1] == n
    b = plan.shape[1]
    chunk = _chunks(K, b, P, factor=getattr(cert, "memory_factor", 2))
    window = getattr(cert, "window_steps", None)
    # Window engines (MILP) certify `window` consecutive steps at once from the boxes at the
    # window's start (``cert.window_bounds``); every other engine goes one step at a time.
    order = list(step_range)
    blocks = ([order[i:i + window] for i in range(0, len(order), window)] if window
              else [[t] for t in order])
    it = tqdm(blocks, desc=f"AGT[{cert.name}] |K|={K}", disable=not progress, leave=False)
    for block in it:
        new_theta = theta
        for t in block:
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            g_nom = model.per_sample_grads(new_theta, xb, yb).clamp(-gamma, gamma)
            new_theta = lam * new_theta - lr * g_nom.mean(0)
        if window:
            nb = cert.window_bounds(model, Interval(lo, hi), x, y, plan, block, ks, settings)
            new_lo, new_hi = nb.lo, nb.hi
        else:
            new_lo, new_hi = _one_step(cert, model, lo, hi, xb, yb, ks, settings, chunk)
        nb = outward(Interval(new_lo, new_hi), rel=1e-12, abs_=1e-14)
        # T_k is valid for every radius below k as well: intersect downwards.
        lo = torch.flip(torch.cummax(torch.flip(nb.lo, [0]), 0).values, [0])
        hi = torch.flip(torch.cummin(torch.flip(nb.hi, [0]), 0).values, [0])
        theta = new_theta
        # Rounding can only push the nominal by ~1 ulp; keep it inside the boxes it belongs to.
        lo = torch.minimum(lo, theta)
        hi = torch.maximum(hi, theta)
    return Envelopes(ks, lo, hi, theta)
