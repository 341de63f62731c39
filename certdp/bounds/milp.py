"""Exact windows of F training steps as mixed-integer linear programs (``certificate=milp``).

Scope: single-layer piecewise-linear models, i.e. linear regression (``mse``) and the linear
hinge classifier (``hinge``, labels +-1), trained by clipped (S)GD with a fixed batch plan.

Window encoding (one MILP per radius k and window t0..t0+F-1, start box T_k(t0)):

* parameters theta_t in R^P for t = 0..F are variables; theta_0 ranges over the start box and
  theta_t (t >= 1) gets the CROWN/IBP step box B_t as variable bounds (valid: B_t contains every
  parameter reachable with k substitutions *per batch*, a superset of k per window);
* per step t, batch slot i and coordinate p, the clipped gradient c_tip is encoded exactly:
  - mse: z = 2 x~_p (x~ . theta_t - y) is affine; clip(z) = z - max(z - g, 0) + max(-g - z, 0)
    with each max(w, 0) (w in [L, U], L < 0 < U, from B_t) by the standard big-M pair
    y >= w, y >= 0, y <= U delta, y <= w - L (1 - delta), delta binary; a surely (un)clipped
    coordinate is affine and needs no binary;
  - hinge: g = a * clip(-y x~) with a = 1[m < 1], m = y x~ . theta_t:  m <= 1 + (mU - 1)(1 - a),
    m >= 1 - (1 - mL) a, a binary (both a = 0 and a = 1 are allowed at m = 1: a superset);
* the gradient actually used is a variable G_tip in [-g, g] with |G_tip - c_tip| <= 2 g s_j,
  where s_j is a binary "record j is substituted", one per distinct dataset index j in the
  window (a substituted record keeps its index in the plan, and its gradients at different
  steps are free, a superset of any real record), and sum_j s_j <= k;
* theta_{t+1} = lam theta_t - (lr / b) sum_i G_ti  (equalities).

Every feasible point of D' (d(D, D') <= k) is feasible, so min / max theta_F,p over the MILP
bound T_k(t0 + F).  We minimise and maximise each of the P coordinates (2P objectives), take the
solver's *proven* bound (HiGHS: the MIP dual bound, which is valid on time-out too; CBC: the
optimum when proven optimal, otherwise the LP relaxation's optimum), never an incumbent, widen
it by a margin above the solvers' feasibility tolerances, and intersect with the propagated box
B_F (so a window is never looser than the propagated bound).  The radius-0 query (the nominal)
is the propagated box itself.

Nesting (the smoothness proof, certdp/privacy/sensitivity.py).  The exact optimum nests: for
neighbours D ~ D', nested start boxes and k' >= k + 1, every feasible point of D's MILP at k is
feasible for D''s at k' (set s_j = 1 for the substituted record: its gradients become free in
[-gamma, gamma]; the other records' constraints are the same encodings over larger boxes B_t,
propagated by the nesting CROWN/IBP step), so the optimum of D' is at least as wide.  The solver
returns the optimum only up to its stopping gap: HiGHS stops when (incumbent - dual bound) <=
max(mip_abs_gap, mip_rel_gap * |incumbent|), and |incumbent| <= M, a data-independent bound on
|theta| (the trivial cover, passed by AGT as ``magnitude``), so the dual bound is within
G = mip_rel_gap * M + mip_abs_gap of the optimum; the tolerance margin is absolute too,
TOL_ABS (1 + F)(1 + M).  :meth:`MILP.nesting_slack` returns G plus twice the margin (and the
propagation's own slack), which AGT's graded widening absorbs, so the windows nest.  What does
not nest is a bound that is *not* within G of the optimum: a time-limited solve (its dual bound,
or the LP relaxation) or a failed one (the propagated box).  With ``on_time_limit=refuse`` such a
solve (and a crossed bound) is a one-line error instead, and the engine declares
``nesting_monotone``; with ``on_time_limit=bound`` (default) it falls back soundly, and smooth
releases refuse the engine up front.

Cost: binaries ~ F * b * (2P for mse, 1 for hinge) plus the distinct indices; radii are solved
one MILP each (independent, optionally in 2 worker processes).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from certdp.bounds.base import Certificate
from certdp.bounds.crown import CROWN, single_layer_step
from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval, outward
from certdp.bounds.milp_window import MIP_ABS_GAP, WindowProblem, solve_task
from certdp.errors import ConfigError
from certdp.losses import MSE, Hinge

log = logging.getLogger("certdp")

SOLVERS = ("highs", "cbc")
ON_TIME_LIMIT = ("bound", "refuse")
# Margin on every solver bound: HiGHS/CBC accept rows violated by up to their feasibility
# tolerance (1e-9: milp_window.HIGHS_TOLERANCES); a window of F steps accumulates at most ~F such errors per
# coordinate.  The margin is far below any envelope width of interest.
TOL_ABS = 1e-7


# ------------------------------------------------------------------------ certificate
class MILP(Certificate):
    """``certificate=milp``: exact MILP windows every ``frequency`` steps (see module docstring).

    Options: ``frequency`` (F >= 1), ``time_limit`` (seconds per objective), ``solver``
    (highs | cbc), ``workers`` (processes for the radii of a window, 1 or 2), ``mip_gap``
    (HiGHS's relative stopping gap), ``on_time_limit`` (``bound``: a solve that ends without an
    optimum within the gap uses its proven bound or the propagated box, sound but not nesting;
    ``refuse``: it is an error, and the engine nests).  ``stats`` collects one dict per
    (window, radius) with the solver's outcome."""

    name = "milp"
    options = ("frequency", "time_limit", "solver", "workers", "mip_gap", "on_time_limit")
    scope = "single-layer mse or hinge models"
    memory_factor = 48
    # one binary per record of the window with sum <= k: the window's budget is exact for any k
    window_budget = True

    def __init__(self, *, frequency=1, time_limit=30.0, solver="highs", workers=2, mip_gap=1e-4,
                 on_time_limit="bound"):
        try:
            F = int(frequency)
        except (TypeError, ValueError):
            raise ConfigError("certificate.frequency", f"must be an integer >= 1 (got {frequency!r})")
        if F < 1:
            raise ConfigError("certificate.frequency", f"must be an integer >= 1 (got {frequency!r})")
        try:
            tl = float(time_limit)
        except (TypeError, ValueError):
            raise ConfigError("certificate.time_limit", f"must be a number of seconds > 0 (got {time_limit!r})")
        if not tl > 0:
            raise ConfigError("certificate.time_limit", f"must be a number of seconds > 0 (got {time_limit!r})")
        if solver not in SOLVERS:
            raise ConfigError("certificate.solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
        try:
            w = int(workers)
        except (TypeError, ValueError):
            w = 0
        if w not in (1, 2):
            raise ConfigError("certificate.workers", f"must be 1 or 2 (got {workers!r})")
        try:
            gap = float(mip_gap)
        except (TypeError, ValueError):
            gap = -1.0
        if not gap >= 0:
            raise ConfigError("certificate.mip_gap", f"must be a number >= 0 (got {mip_gap!r})")
        if on_time_limit not in ON_TIME_LIMIT:
            raise ConfigError("certificate.on_time_limit", f"unknown '{on_time_limit}'; allowed: {', '.join(ON_TIME_LIMIT)}")
        self.window_steps = F
        self.time_limit = tl
        self.solver = solver
        self.workers = w
        self.mip_gap = gap
        self.on_time_limit = on_time_limit
        # windows nest only when every bound is within the stopping gap of the optimum
        self.nesting_monotone = on_time_limit == "refuse"
        self.stats: list[dict] = []

    @classmethod
    def supports(cls, model) -> bool:
        return model.n_layers == 1 and model.widths[-1] == 1 and isinstance(model.loss, (MSE, Hinge))

    def nesting_refusal(self):
        return ("certificate.on_time_limit",
                "MILP windows that fall back to another bound when a solve hits its time limit or fails are "
                "not monotone in the start box", "refuse")

    def nesting_slack(self, model, *, settings, b, k_max, magnitude, steps=1):
        """The propagation's slack over the window plus the solver's: its stopping gap
        mip_gap * M + mip_abs_gap and twice the tolerance margin (module docstring, Nesting)."""
        prop = CROWN().nesting_slack(model, settings=settings, b=b, k_max=k_max, magnitude=magnitude, steps=steps)
        gap = self.mip_gap * magnitude + MIP_ABS_GAP
        return prop + 2.0 * (gap + 2 * _margin(steps, magnitude))

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def _refuse(self, what: str):
        raise ConfigError("certificate.on_time_limit", f"{what}, so the windows are not provably nesting "
                          f"(the smooth releases would not be beta-smooth); allowed: a larger certificate.time_limit "
                          f"(now {self.time_limit:g} s) or certificate.mip_gap, or on_time_limit=bound with "
                          f"privacy.smoothness=unproven")

    def window_bounds(self, model, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                      plan: torch.Tensor, steps, ks: torch.Tensor, settings,
                      magnitude: float | None = None, step_boxes=None) -> Interval:
        """T_k at the end of the window ``steps`` ([K, P]) from the boxes at its start.
        ``magnitude``: a data-independent bound on |theta| over the window (AGT passes the
        trivial cover's); without it the margins are relative to the bounds themselves."""
        steps = list(steps)
        lam, lr, g = settings.contraction, settings.lr, settings.clip
        n = x.shape[0]
        full = plan.shape[1] == n
        b = plan.shape[1]
        # propagated boxes B_0..B_F (big-M bounds and the bound the windows are intersected with)
        path = [boxes]
        for t in steps:
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            raw = single_layer_step(model, path[-1], xb, yb, subs=ks, settings=settings)
            path.append(outward(raw, rel=1e-12, abs_=1e-14))
        # the caller widens the window's result once more; the propagated bound is the raw last step
        end = raw
        lo, hi = end.lo.clone(), end.hi.clone()
        solve = [j for j, k in enumerate(ks.tolist()) if k > 0]      # radius 0: the propagated box
        if not solve:
            return Interval(lo, hi)
        idx = torch.stack([torch.arange(n) if full else plan[t] for t in steps])     # [F, b]
        uniq, rec = torch.unique(idx, return_inverse=True)
        xt = torch.cat([x, torch.ones(n, 1, dtype=x.dtype)], 1)[idx]                 # [F, b, P]
        yy = y.to(x.dtype)[idx]
        blo = torch.stack([bx.lo for bx in path], 1).numpy()                         # [K, F+1, P]
        bhi = torch.stack([bx.hi for bx in path], 1).numpy()
        probs = [WindowProblem(model.loss, xt.numpy(), yy.numpy(), rec.numpy(), len(uniq),
                               blo[j], bhi[j], lam, lr, g, int(ks[j])) for j in solve]
        tasks = [(p, self.solver, self.time_limit, self.mip_gap) for p in probs]
        if self.workers > 1 and len(tasks) > 1 and len(steps) * b >= 20:
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("fork")) as ex:
                res = list(ex.map(solve_task, tasks))
        else:
            res = [solve_task(t) for t in tasks]
        for j, (l_, h_, st) in zip(solve, res):
            self.stats.append({"window_start": steps[0], "k": int(ks[j]), **st})
            if self.nesting_monotone and st["not_optimal"]:
                why = "hit its time limit" if st["time_limited"] else "ended without an optimum"
                self._refuse(f"a MILP solve of the window at steps {steps[0]}-{steps[-1]} (radius {int(ks[j])}) {why}")
            l_t = torch.as_tensor(l_, dtype=lo.dtype)
            h_t = torch.as_tensor(h_, dtype=lo.dtype)
            if magnitude is None:
                scale = torch.maximum(l_t.abs().nan_to_num(0, 0, 0), h_t.abs().nan_to_num(0, 0, 0))
            else:
                scale = torch.full_like(l_t, float(magnitude))
            marg = _margin(len(steps), scale)
            lo[j] = torch.maximum(lo[j], l_t - marg)
            hi[j] = torch.minimum(hi[j], h_t + marg)
        secs = [st["seconds"] for _, _, st in res]
        log.info("milp window steps %d-%d: %d radii in %.2f s of solver time (slowest radius %.2f s, "
                 "<= %d binaries, %d objectives time-limited, %d fell back to the propagated box)",
                 steps[0], steps[-1], len(res), sum(secs), max(secs), max(st["binaries"] for _, _, st in res),
                 sum(st["time_limited"] for _, _, st in res), sum(st["fallback"] for _, _, st in res))
        # a solver bound can cross the propagated box only through its tolerances
        bad = lo > hi
        if bool(bad.any()):
            if self.nesting_monotone:
                self._refuse(f"{int(bad.sum())} MILP bounds crossed the propagated box (solver tolerance)")
            log.warning("milp: %d crossed bounds (solver tolerance); using the propagated box there", int(bad.sum()))
            lo = torch.where(bad, end.lo, lo)
            hi = torch.where(bad, end.hi, hi)
        return Interval(lo, hi)


def _margin(steps: int, scale):
    """The tolerance margin on a solver bound: TOL_ABS (1 + F)(1 + scale)."""
    return TOL_ABS * (1 + steps) * (1 + scale)


class Exact(MILP):
    """``certificate=exact``: the MILP with one step per window (exact per step)."""

    name = "exact"
    options = ("time_limit", "solver", "workers", "mip_gap", "on_time_limit")

    def __init__(self, **opts):
        super().__init__(frequency=1, **opts)
