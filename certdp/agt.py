"""Abstract Gradient Training: sound parameter envelopes T_k for every radius k in one pass.

For a fixed batch plan, a dataset D' with d(D, D') <= k (substitutions) changes at most
min(k, b) of the b records of any batch.  With per-sample clipped-gradient intervals
[l_i, u_i] (valid for every parameter in the current box T_k), the batch sum of D' lies in

    [ SEMin_{b-k}(l) - k*gamma ,  SEMax_{b-k}(u) + k*gamma ]                 (k < b)

where SEMin_{b-k} is the sum of the b-k smallest lower bounds (= sum(l) - top_k(l)) and
SEMax_{b-k} the sum of the b-k largest upper bounds (= sum(u) - bottom_k(u)): the k substituted
records contribute clipped gradients in [-gamma, gamma] and the retained ones at least their
lower bounds.  Taking k' < k substitutions in a batch only raises the lower end (each extra
removal drops a value >= -gamma and adds -gamma), so k is the worst case.  The step
theta <- lam*theta - lr/b * sum then gives

    lo' = lam*lo - lr/b * SumU,     hi' = lam*hi - lr/b * SumL.

(:mod:`certdp.bounds.aggregate`; engines may bound the step jointly instead, see
:mod:`certdp.bounds.base`.)  All radii share one pass: boxes carry a leading axis and every step
is one ``step_bounds`` call per chunk of radii, box i paired with radius r_i (``src=None``);
window engines (``window_steps`` = F) certify F steps at once with ``window_bounds``.

What AGT adds to the engine's step, and why (the smoothness proof, certdp/privacy/sensitivity.py,
needs T_{r_i}(D) inside T_{r_{i+1}}(D') for neighbours, for the *floating-point* boxes):

* Radius 0.  Row 0 is the radius-0 query (``subs = 0``) started at the point theta_init: the
  engine's own bound on the nominal step, a box of rounding width.  The returned nominal is the
  trained theta clamped into it, so the released point lies in T_0(D), and T_0(D) nests into
  T_{r_1}(D') by the same induction as every other radius (instead of a separately computed
  nominal that is only close to the envelopes).
* The trivial cover C_t: C_0 is the hull of the start boxes, C_{t+1} = lam*C_t -/+ lr*gamma (every
  clipped gradient coordinate is in [-gamma, gamma], whatever the data), widened outward.  It
  contains every reachable parameter vector of every dataset, does not depend on the data, and
  every box is intersected with it.  Radii r >= b (any batch may be entirely substituted) are
  set to C_t exactly: the engine's formula would give the same box up to rounding, and only the
  exact, data-independent box makes T_N the same for every dataset (the proof's condition (C)).
* Widening: every step is widened outward by a relative 1e-12 (+1e-14) against the engine's
  rounding (soundness), and radius index i additionally by i*E with E = ``cert.nesting_slack``, a
  data-independent bound on the rounding that can break nesting between two datasets; since
  index i of D is compared with index i+1 of D', the extra E absorbs it (graded widening).
* Downward intersection: T_r is valid for every radius below r too, so boxes 1..K are
  intersected downwards (a running max/min from the largest radius); box i of D then maps into
  box i+1 of D' because every D'-box of index > i contains a D-box of index >= i.
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


def trivial_step(lo: torch.Tensor, hi: torch.Tensor, settings: TrainSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The step of any box when every clipped gradient coordinate may be anything in [-gamma,
    gamma] (a whole batch substituted), widened outward against rounding."""
    lam, step = settings.contraction, settings.lr * settings.clip
    nb = outward(Interval(lam * lo - step, lam * hi + step), rel=1e-12, abs_=1e-14)
    return nb.lo, nb.hi


def run_agt(model: ModelSpec, theta_init: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            settings: TrainSettings, k_values, certificate: Certificate | None = None,
            plan: torch.Tensor | None = None,
            progress: bool = True, start_box: Interval | None = None,
            steps: range | None = None) -> Envelopes:
    """Train nominally and certify envelopes for all radii ``k_values`` in one pass.

    ``start_box`` ([K, P]) lets a window start from existing envelopes (the radius-0 box starts
    at ``theta_init``); by default training starts from the point ``theta_init`` (for every
    radius).  ``steps`` restricts to a window of the batch plan (multi-release AGS).
    ``certificate`` defaults to IBP; a model it does not support is a ConfigError before any
    work.  See the module docstring for what is added to the engine's steps."""
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
    qs = torch.cat([torch.zeros(1, dtype=torch.long), ks])            # row 0: radius 0 (the nominal)
    lo = theta.expand(K + 1, P).clone()
    hi = lo.clone()
    if start_box is not None:
        lo[1:], hi[1:] = start_box.lo, start_box.hi
    c_lo, c_hi = lo.amin(0), hi.amax(0)                                # the trivial cover C_0
    step_range = range(settings.steps) if steps is None else steps
    full = plan.shape[1] == n
    b = plan.shape[1]
    live = qs < b                                                      # rows the engine computes
    n_live = int(live.sum())
    q_live = qs[:n_live]
    grade = torch.arange(K + 1, dtype=DTYPE).unsqueeze(-1)             # graded widening i * E
    chunk = _chunks(n_live, b, P, factor=cert.memory_factor)
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
            g_nom = model.per_sample_grads(new_theta, xb, yb).clamp(-settings.clip, settings.clip)
            new_theta = settings.contraction * new_theta - settings.lr * g_nom.mean(0)
            c_lo, c_hi = trivial_step(c_lo, c_hi, settings)
        if window:
            mag = float(torch.maximum(c_hi.abs(), c_lo.abs()).max())
            nb = cert.window_bounds(model, Interval(lo[:n_live], hi[:n_live]), x, y, plan=plan, steps=block,
                                    ks=q_live, settings=settings, magnitude=mag)
            new_lo, new_hi = nb.lo, nb.hi
        else:
            new_lo, new_hi = _one_step(cert, model, lo[:n_live], hi[:n_live], xb, yb, q_live, settings, chunk)
        nb = outward(Interval(new_lo, new_hi), rel=1e-12, abs_=1e-14)
        mag = float(torch.maximum(c_hi.abs(), c_lo.abs()).max())
        # graded widening: only an engine that nests needs it (module docstring)
        slack = (cert.nesting_slack(model, settings=settings, b=b, k_max=int(q_live[-1]), magnitude=mag,
                                    steps=len(block)) if cert.nesting_monotone else 0.0)
        wid = grade[:n_live] * slack
        lo = torch.empty_like(lo)
        hi = torch.empty_like(hi)
        lo[:n_live] = torch.maximum(nb.lo - wid, c_lo)
        hi[:n_live] = torch.minimum(nb.hi + wid, c_hi)
        lo[n_live:], hi[n_live:] = c_lo, c_hi
        # T_k is valid for every radius below k as well: intersect downwards (radius 0 apart).
        lo[1:] = torch.flip(torch.cummax(torch.flip(lo[1:], [0]), 0).values, [0])
        hi[1:] = torch.flip(torch.cummin(torch.flip(hi[1:], [0]), 0).values, [0])
        theta = new_theta
    # The released nominal: the trained parameters, inside the radius-0 box (the engine's bound on
    # the same trajectory; they differ by rounding only).
    nominal = torch.minimum(torch.maximum(theta, lo[0]), hi[0])
    return Envelopes(ks, lo[1:].clone(), hi[1:].clone(), nominal)
