"""Exact windows of F training steps as mixed-integer linear programs (``certificate=milp``).

Scope: single-layer piecewise-linear models, i.e. linear regression (``mse``) and the linear
hinge classifier (``hinge``, labels +-1), trained by clipped (S)GD with a fixed batch plan.

Window encoding (one MILP per radius k and window t0..t0+F-1, start box T_k(t0)):

* parameters theta_t in R^P for t = 0..F are variables; theta_0 ranges over the start box and
  theta_t (t >= 1) gets a box B_t as variable bounds, from which the big-M constants below are
  read (see "Variable bounds"); every B_t contains theta'_{t0+t} of every dataset D' within k
  substitutions whose parameters at t0 lie in the start box;
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
  The hinge window is encoded aggregated (milp_window._hinge_steps): G_ti = u_i kappa_i + e_i with
  u_i = a_i (1 - s_j) (linearised exactly for binary a, s) and e_i in [-g s_j, g s_j]^P, and only
  the step's sum E_t = sum_i e_i, |E_t,p| <= g sum_{i in B_t} s_j(i), is a column: the same set
  of trajectories with b u-columns per step instead of b P G-columns (blobs, one step: 87
  columns and 128 rows instead of 238 and 410; HiGHS's presolve got most of that already, the
  CPU time was the same).

Objectives (``solve``).  ``milp`` (default): each objective's LP relaxation first (all binaries in
[0, 1]; its optimum is a proven bound on the MIP's, and on blobs it costs ~0.1 s against tens of
seconds for the MIP and gets most of the way: 88% of the MIP's 20-second improvement over the box
on a 10-step window), then the MIP with what is left of the objective's time limit; the larger
of the two proven bounds is kept.  ``lp``: the LP relaxation only.

Variable bounds (``substitutions``).  B_t is the intersection of up to three boxes, each
containing theta'_{t0+t} for every D' within k:

* the per-batch step box: the CROWN/IBP step (k substitutions in *every* batch, a superset of k
  per window) applied to B_{t-1};
* ``per_epoch`` (default, plans with more than one batch per epoch): the per-epoch ledger of
  :mod:`certdp.agt` (IBP; its derivation, soundness and nesting proof are in that module's
  docstring) run over the window from the start box, through AGT's ``step_boxes`` callback.
  Restarting the ledger at the window's start is sound: the start box contains theta'_{t0} of
  every D' within k, so psi_{t0} = theta'_{t0} with an empty ledger, S_{t0} = 0, satisfies the
  ledger's invariant; from t0 on, D' uses in the rest of the current epoch at most the k
  substitutions the whole epoch allows (n_t >= 0 summed over part of the epoch is at most the
  sum over all of it), so |S_t,p| <= k rho holds up to the next epoch boundary exactly as in a
  ledger started at the epoch's start; at epoch boundaries inside the window the ledger folds
  and restarts as in agt.py.  The ledger's per-step box X_t = (B_t +- L_t) n C_t contains
  theta'_t, and its folded box at the window's end contains theta'_{t0+F};
* ``per_epoch`` within an AGT pass: the same ledger run *once* over the whole pass from the
  pass's start boxes (at its first window, which starts from them), not restarted at window
  starts: it keeps the epoch budget across windows (a window of F steps restarts the ledger
  every F steps, which with F = 1 is the per-batch budget again), and it bounds theta'_t at
  every step of the pass, so it is valid inside every window too.
The window's result is intersected with B_F, so a window is never looser than the ledger run over
the whole pass (IBP with ``substitutions=per_epoch``).  The hinge margin's big-M constants are
the exact range of m = y x~ . theta over B_t (sum_p min/max(y x~_p lo_p, y x~_p hi_p)): a linear
function's range over a box, so no tighter constant exists given B_t; a margin whose range lies
on one side of 1 gets no binary.

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
[-gamma, gamma]; the other records' constraints are the same encodings over larger boxes B_t),
so the optimum of D' is at least as wide.  The boxes B_t are larger for D' at k' because each
of the three nests: the per-batch step is the nesting CROWN/IBP step; the ledger run from the
window's start box and the one from the pass's start boxes are IBP ledgers from nested start
boxes, which nest by agt.py's proof (condition (N): B(D; k) inside B(D'; k+1) +- o, and the
per-step box X = (B +- L) n C absorbs o since L(k+1) = L(k) + rho); an intersection of nested
boxes nests.  Wider boxes only relax the MILP: the big-M rows m <= 1 + (mU - 1)(1 - a) and
m >= 1 - (1 - mL) a (and the mse clip rows) only loosen as mU grows and mL falls, and a slot
surely (in)active or clipped for D is encoded with a binary for D', whose feasible set contains
the constant.  The solver
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
The LP relaxation (``solve=lp``) nests by the same embedding with fractional binaries: D's
relaxed point with s_r in [0, 1] maps to D''s with s_r = 1, u_r = 0 and e_r = u_r kappa_r + e_r
of D, whose |.| <= (1 - s_r) g + s_r g = g, so |E'_t| <= g sum s' still holds and sum s' <= k + 1;
its optimum is computed to the solver's tolerance (no stopping gap), so with
``on_time_limit=refuse`` (an LP stopped by a time limit is refused) it is covered the same way.

Run budget (``run_time_limit``, seconds, default none).  AGT announces a pass's windows
(``start_run``); each window gives every objective the time limit
min(time_limit, remaining / remaining objectives), where remaining is the budget less the time
since the pass started and remaining objectives counts what one worker still solves in sequence
(2P objectives per radius, the radii of a window split over the workers, this window and every
later one of the pass).  Every objective stops by its limit, so the solves of the pass end within
the budget; the propagation and model building around them (seconds on blobs) come on top.  A
solve stopped by this limit is treated exactly like one stopped by ``time_limit``: its proven
dual bound (``on_time_limit=bound``) or a refusal (``refuse``).  An AGS run with several release
windows runs one pass per window, each with the whole budget.

A warm start (the nominal run, s = 0, as HiGHS's incumbent) was measured on blobs and did not
help (the same dual bounds after 300 nodes, the same CPU time): the min / max of a coordinate is
far from the nominal, so that incumbent prunes nothing.

Cost: binaries ~ F * b * (2P for mse, 1 for hinge) plus the distinct indices; radii are solved
one MILP each (independent, optionally in 2 worker processes).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from certdp.bounds.base import Certificate
from certdp.bounds.crown import CROWN, single_layer_step
from certdp.bounds.ibp import IBP, check_substitutions, gradient_bounds
from certdp.bounds.interval import Interval, outward
from certdp.bounds.milp_window import MIP_ABS_GAP, WindowProblem, solve_task
from certdp.errors import ConfigError
from certdp.losses import MSE, Hinge

log = logging.getLogger("certdp")

SOLVERS = ("highs", "cbc")
ON_TIME_LIMIT = ("bound", "refuse")
SOLVE = ("milp", "lp")
# Margin on every solver bound: HiGHS/CBC accept rows violated by up to their feasibility
# tolerance (1e-9: milp_window.HIGHS_TOLERANCES); a window of F steps accumulates at most ~F such errors per
# coordinate.  The margin is far below any envelope width of interest.
TOL_ABS = 1e-7
# the run budget's clock (wall seconds: HiGHS's time limits are wall-clock too)
_clock = time.perf_counter


# ------------------------------------------------------------------------ certificate
class MILP(Certificate):
    """``certificate=milp``: exact MILP windows every ``frequency`` steps (see module docstring).

    Options: ``frequency`` (F >= 1), ``time_limit`` (seconds per objective), ``run_time_limit``
    (seconds for all windows of an AGT pass, or None), ``substitutions`` (``per_epoch`` |
    ``per_batch``: the variable bounds), ``solve`` (``milp`` | ``lp``), ``solver``
    (highs | cbc), ``workers`` (processes for the radii of a window, 1 or 2), ``mip_gap``
    (HiGHS's relative stopping gap), ``on_time_limit`` (``bound``: a solve that ends without an
    optimum within the gap uses its proven bound or the propagated box, sound but not nesting;
    ``refuse``: it is an error, and the engine nests).  ``stats`` collects one dict per
    (window, radius) with the solver's outcome."""

    name = "milp"
    options = ("frequency", "time_limit", "solver", "workers", "mip_gap", "on_time_limit", "substitutions",
               "run_time_limit", "solve")
    scope = "single-layer mse or hinge models"
    memory_factor = 48
    devices = ("cpu",)
    device_note = "its windows are solved by HiGHS, a CPU solver"
    # one binary per record of the window with sum <= k: the window's budget is exact for any k
    window_budget = True

    def __init__(self, *, frequency=1, time_limit=30.0, solver="highs", workers=2, mip_gap=1e-4,
                 on_time_limit="bound", substitutions="per_epoch", run_time_limit=None, solve="milp"):
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
        if run_time_limit is None:
            rtl = None
        else:
            try:
                rtl = None if isinstance(run_time_limit, bool) else float(run_time_limit)
            except (TypeError, ValueError):
                rtl = None
            if rtl is None or not (rtl > 0 and math.isfinite(rtl)):
                raise ConfigError("certificate.run_time_limit", f"must be a number of seconds > 0 or null "
                                                                f"(got {run_time_limit!r}); allowed: seconds > 0, "
                                                                f"null (no run budget)")
        if rtl is not None and on_time_limit == "refuse":
            # a run budget shortens every solve's limit, and under refuse a solve it cuts short
            # stops the run: refused here, before any training, instead of minutes into the run
            raise ConfigError("certificate.run_time_limit", f"a run budget ({rtl:g} s) cuts solves short, which "
                              f"on_time_limit=refuse turns into an error; allowed: null (no run budget) with "
                              f"on_time_limit=refuse, or on_time_limit=bound")
        if solve not in SOLVE:
            raise ConfigError("certificate.solve", f"unknown '{solve}'; allowed: {', '.join(SOLVE)}")
        self.solve = solve
        # not named ``substitutions`` (AGT reads that name for the per-epoch window engines,
        # crowntt); AGT reads ``variable_bounds`` to compute the radii below an epoch's slots,
        # where the ledger bounds are informative (``window_budget``)
        self.variable_bounds = check_substitutions(substitutions)
        self.run_time_limit = rtl
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

    def start_run(self, *, windows: int, steps: range | None = None) -> None:
        """AGT calls this before the ``windows`` windows of one pass over ``steps``: the run budget
        (``run_time_limit``) is counted from here over them, and the first window bounds the
        whole pass with the per-epoch ledger once (module docstring)."""
        self._run = {"t0": _clock(), "windows_left": int(windows)}
        self._pass = {"steps": steps, "boxes": None}

    def _pass_boxes(self, *, boxes, pos, ks, ref, steps, step_boxes):
        """{t: (lo, hi)} boxes of the rows ``pos`` containing theta'_t for every step t of the pass
        and its end, from the per-epoch ledger run once over the whole pass from its start boxes
        (computed at the pass's first window, which starts from them), or None outside a pass."""
        ps = getattr(self, "_pass", None)
        if ps is None or ps["steps"] is None or len(ps["steps"]) == 0:
            return None
        if ps["boxes"] is None:
            if steps[0] != ps["steps"][0]:
                return None
            env, trace = step_boxes(engine=IBP(substitutions="per_epoch"), ref=ref, ks=ks[pos].tolist(),
                                    start_box=Interval(boxes.lo[pos], boxes.hi[pos]), steps=ps["steps"])
            out = {t: bx for t, bx in zip(ps["steps"], trace)}
            out[ps["steps"][-1] + 1] = (env.lo, env.hi)
            ps["boxes"] = (tuple(ks[pos].tolist()), out)
        kk, out = ps["boxes"]
        if kk != tuple(ks[pos].tolist()) or steps[0] not in out or steps[-1] + 1 not in out:
            return None
        return out

    def _objective_limit(self, *, n_objectives: int, steps: list, plan: torch.Tensor) -> float:
        """The time limit of each objective of this window: ``time_limit``, or with a run budget
        its share :func:`objective_time_limit` of what is left over the windows left."""
        if self.run_time_limit is None:
            return self.time_limit
        run = getattr(self, "_run", None)
        if run is None:
            # window_bounds called outside AGT: the budget covers the rest of the plan
            self.start_run(windows=-(-(plan.shape[0] - steps[0]) // self.window_steps), steps=None)
            run = self._run
        left = max(1, run["windows_left"])
        run["windows_left"] = left - 1
        if left == 1:
            self._run = None            # the pass's last window: a later pass starts its own budget
        remaining = self.run_time_limit - (_clock() - run["t0"])
        return objective_time_limit(time_limit=self.time_limit, remaining_s=remaining,
                                    remaining_objectives=left * n_objectives)

    def window_bounds(self, model, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                      plan: torch.Tensor, steps, ks: torch.Tensor, settings,
                      magnitude: float | None = None, step_boxes=None) -> Interval:
        """T_k at the end of the window ``steps`` ([K, P]) from the boxes at its start.
        ``magnitude``: a data-independent bound on |theta| over the window (AGT passes the
        trivial cover's); without it the margins are relative to the bounds themselves.
        ``step_boxes``: AGT's per-step engine callback; with ``substitutions=per_epoch`` it runs
        the per-epoch ledger (IBP) over the window from the start boxes, whose boxes tighten the
        variable bounds and big-M constants (module docstring)."""
        steps = list(steps)
        lam, lr, g = settings.contraction, settings.lr, settings.clip
        n = x.shape[0]
        full = plan.shape[1] == n
        b = plan.shape[1]
        F = len(steps)
        # ledger boxes of the rows k >= 1 over the window: led[i] contains theta'_{t0+i} (i < F),
        # led_end theta'_{t0+F}, for every neighbour within k
        pos = (ks >= 1).nonzero().flatten()
        led, led_end = None, None
        if self.variable_bounds == "per_epoch" and not full and len(pos) and step_boxes is not None:
            ref = (boxes.lo[0] + boxes.hi[0]) / 2
            env, trace = step_boxes(engine=IBP(substitutions="per_epoch"), ref=ref, ks=ks[pos].tolist(),
                                    start_box=Interval(boxes.lo[pos], boxes.hi[pos]),
                                    steps=range(steps[0], steps[-1] + 1))
            led = trace
            led_end = (env.lo, env.hi)
            whole = self._pass_boxes(boxes=boxes, pos=pos, ks=ks, ref=ref, steps=steps, step_boxes=step_boxes)
            if whole is not None:
                # the same ledger run over the whole pass (not restarted at window starts) is valid
                # at every step of it too: intersect (both contain every neighbour's parameters)
                led = [(torch.maximum(l_, whole[steps[0] + i][0]), torch.minimum(h_, whole[steps[0] + i][1]))
                       for i, (l_, h_) in enumerate(led)]
                we = whole[steps[-1] + 1]
                led_end = (torch.maximum(led_end[0], we[0]), torch.minimum(led_end[1], we[1]))

        def cap(box: Interval, i: int) -> Interval:
            """``box`` intersected with the ledger's box of step i (i = F: the window's end)."""
            if led is None:
                return box
            l_, h_ = led_end if i == F else led[i]
            lo_, hi_ = box.lo.clone(), box.hi.clone()
            lo_[pos] = torch.maximum(lo_[pos], l_)
            hi_[pos] = torch.minimum(hi_[pos], h_)
            # both contain the nominal run; a crossing can only be rounding: keep the box there
            bad = lo_ > hi_
            return Interval(torch.where(bad, box.lo, lo_), torch.where(bad, box.hi, hi_))

        # propagated boxes B_0..B_F (variable bounds, big-M constants, and the bound the windows
        # are intersected with): the per-batch step from the capped box of the step before
        path = [boxes]
        for i, t in enumerate(steps):
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            src = cap(path[-1], i) if i > 0 else path[-1]
            raw = single_layer_step(model, src, xb, yb, subs=ks, settings=settings)
            path.append(outward(raw, rel=1e-12, abs_=1e-14))
        # the caller widens the window's result once more; the propagated bound is the raw last step
        end = cap(raw, F)
        path = [path[0]] + [cap(bx, i) for i, bx in enumerate(path[1:], start=1)]
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
        parallel = self.workers > 1 and len(probs) > 1 and F * b >= 20
        # objectives one worker solves in sequence in this window: the unit of the run budget
        per_worker = -(-len(probs) // (self.workers if parallel else 1)) * 2 * model.n_params
        limit = self._objective_limit(n_objectives=per_worker, steps=steps, plan=plan)
        tasks = [(p, self.solver, limit, self.mip_gap, self.solve == "lp") for p in probs]
        if parallel:
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("fork")) as ex:
                res = list(ex.map(solve_task, tasks))
        else:
            res = [solve_task(t) for t in tasks]
        for j, (l_, h_, st) in zip(solve, res):
            self.stats.append({"window_start": steps[0], "k": int(ks[j]), "time_limit": limit, **st})
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
        log.info("milp window steps %d-%d: %d radii in %.2f s of solver time (LP %.2f s, MIP %.2f s; slowest "
                 "radius %.2f s, <= %d binaries, objective limit %.3g s, %d objectives time-limited, %d where the "
                 "LP bound beat the MIP's, %d fell back to the propagated box)",
                 steps[0], steps[-1], len(res), sum(secs), sum(st.get("lp_seconds", 0.0) for _, _, st in res),
                 sum(st.get("mip_seconds", 0.0) for _, _, st in res), max(secs),
                 max(st["binaries"] for _, _, st in res), limit, sum(st["time_limited"] for _, _, st in res),
                 sum(st.get("lp_better", 0) for _, _, st in res), sum(st["fallback"] for _, _, st in res))
        # a solver bound can cross the propagated box only through its tolerances
        bad = lo > hi
        if bool(bad.any()):
            if self.nesting_monotone:
                self._refuse(f"{int(bad.sum())} MILP bounds crossed the propagated box (solver tolerance)")
            log.warning("milp: %d crossed bounds (solver tolerance); using the propagated box there", int(bad.sum()))
            lo = torch.where(bad, end.lo, lo)
            hi = torch.where(bad, end.hi, hi)
        return Interval(lo, hi)


def objective_time_limit(*, time_limit: float, remaining_s: float, remaining_objectives: int) -> float:
    """Seconds one objective may take: min(time_limit, remaining_s / remaining_objectives), at
    least 1 ms (a solve stopped that early still returns a proven, if loose, bound).
    ``remaining_objectives`` counts the objectives one worker still solves in sequence, this
    window's included, so the run's solves end within the budget (module docstring)."""
    share = max(0.0, float(remaining_s)) / max(1, int(remaining_objectives))
    return max(1e-3, min(float(time_limit), share))


def _margin(steps: int, scale):
    """The tolerance margin on a solver bound: TOL_ABS (1 + F)(1 + scale)."""
    return TOL_ABS * (1 + steps) * (1 + scale)


class Exact(MILP):
    """``certificate=exact``: the MILP with one step per window (exact per step)."""

    name = "exact"
    options = ("time_limit", "solver", "workers", "mip_gap", "on_time_limit")

    def __init__(self, **opts):
        super().__init__(frequency=1, **opts)
