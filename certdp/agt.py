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

(:mod:`certdp.bounds.aggregate`; engines may bound the step jointly instead, see
:mod:`certdp.bounds.base`.)  All radii share one pass: boxes carry a leading K axis and every
step is one ``step_bounds`` call per chunk of radii, box j paired with radius k_j
(``src=None, subs=k_values``); window engines (``window_steps`` = F) certify F steps at once
with ``window_bounds``.  Because T_k is also a valid bound for every smaller radius, boxes are
intersected downwards (a running max/min from the largest radius), and every step is widened
outward by a relative 1e-12 against rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from certdp import DTYPE
from certdp.bounds import check_supported, get_certificate
from certdp.bounds.base import Certificate
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


def _chunks(n_k: int, b: int, p: int, factor: int = 2, budget_bytes: float = 1.2e9) -> int:
    """Radii per chunk so that ``factor`` [chunk, P, b] float64 tensors fit the budget."""
    per_radius = b * p * 8 * factor
    return max(1, min(n_k, int(budget_bytes // max(per_radius, 1))))


def _one_step(cert: Certificate, model, lo, hi, xb, yb, ks, settings, chunk):
    """Boxes after one step for all radii, one ``step_bounds`` call per chunk of radii."""
    new_lo, new_hi = torch.empty_like(lo), torch.empty_like(hi)
    for s in range(0, lo.shape[0], chunk):
        sl = slice(s, s + chunk)
        nb = cert.step_bounds(model, Interval(lo[sl], hi[sl]), xb, yb, subs=ks[sl], settings=settings)
        new_lo[sl], new_hi[sl] = nb.lo, nb.hi
    return new_lo, new_hi


def run_agt(model: ModelSpec, theta_init: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            settings: TrainSettings, k_values, certificate: Certificate | None = None,
            plan: torch.Tensor | None = None,
            progress: bool = True, start_box: Interval | None = None,
            steps: range | None = None) -> Envelopes:
    """Train nominally and certify envelopes for all radii ``k_values`` in one pass.

    ``start_box`` ([K, P]) lets a window start from existing envelopes; by default training
    starts from the point ``theta_init`` (for every radius).  ``steps`` restricts to a window of
    the batch plan (multi-release AGS).  ``certificate`` defaults to IBP; a model it does not
    support is a ConfigError before any work."""
    cert = certificate if certificate is not None else get_certificate("ibp")
    check_supported(cert, model)
    x = x.to(DTYPE)
    y = model.loss.labels(y)
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
    chunk = _chunks(K, b, P, factor=cert.memory_factor)
    window = cert.window_steps
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
            nb = cert.window_bounds(model, Interval(lo, hi), x, y, plan=plan, steps=block, ks=ks,
                                    settings=settings)
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
