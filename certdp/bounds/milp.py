"""Windows of F training steps as mixed-integer linear programs (``certificate=milp``), bounded
by safe bounds that hold whatever the solver returns.

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
* the gradient actually used is a variable G_tip in [-g, g] with |G_tip - c_tip| <= 2 g s_j
  (+ the rounding slack delta, see "Floating point"),
  where s_j is a binary "record j is substituted", one per distinct dataset index j in the
  window (a substituted record keeps its index in the plan, and its gradients at different
  steps are free, a superset of any real record), and sum_j s_j <= k;
* theta_{t+1} = lam theta_t - (lr / b) sum_i G_ti  (up to the rounding slack eps).
  The hinge window is encoded aggregated (certdp/bounds/rules/hinge.py): G_ti = u_i kappa_i + e_i with
  u_i = a_i (1 - s_j) (linearised exactly for binary a, s) and e_i in [-g s_j, g s_j]^P, and only
  the step's sum E_t = sum_i e_i, |E_t,p| <= g sum_{i in B_t} s_j(i), is a column: the same set
  of trajectories with b u-columns per step instead of b P G-columns (blobs, one step: 87
  columns and 128 rows instead of 238 and 410; HiGHS's presolve got most of that already, the
  CPU time was the same).

Objectives (``solve``).  ``milp`` (default): a best-first branch and bound over the binaries
(safe_lp.bound_target) whose every node's bound is a *safe* LP bound (below), up to
``nodes`` expansions per objective, ``time_limit`` or ``mip_gap``; the least open node's bound
is the window's.  ``lp``: the root (the LP relaxation) only.

Safe bounds (what makes the certificate rigorous whatever the solver returns).  A solver's
"optimal" objective is never used.  The solver (HiGHS via highspy, or CBC) only proposes row
multipliers y (and primal points, to choose a branching binary); for *any* y, every feasible x of
min c.x s.t. row_lo <= A x <= row_hi, col_lo <= x <= col_hi has

    c.x = y.(A x) + (c - A^T y).x >= sum_i min(y_i row_lo_i, y_i row_hi_i) + sum_j min_{x_j} (c - A^T y)_j x_j,

(Neumaier-Shcherbina), which safe_lp.safe_lower_bound evaluates with outward rounding (each
product one ulp outward, d = c - A^T y enclosed with a bound on the rounding of the sparse
products and sums, the final sum rounded down by a bound on its error): a lower bound on the
LP's exact minimum on the stored floats.  A poor y (a time limit, a failure, a solver confused
by coefficients of 1e13) only loosens it, down to the objective column's own variable bound,
i.e. the propagated box; y = 0 gives exactly that.  In the branch and bound a node's bound is
the maximum of its parent's and its own safe bound (a node's region lies in its parent's); a
node is dropped only with a verified Farkas certificate (the safe bound of min 0.x from the
solver's dual ray is > 0); every integral point lies in an open node, so the least open bound
bounds the MIP.  Before the LP goes to the solver, rows and columns are scaled by powers of two
(exact) to geometric means near 1 (safe_lp.equilibrate): big-M constants of ~1e13 (records of
1e6) then reach the solver as coefficients near 1; its dual is mapped back (y = R y~) and the
bound is computed on the unscaled problem.

Floating point (what the MILP must contain).  Training runs in float64, so the set to bound is
that of the *floating-point* runs theta'_t of every D' within k.  Each is made a feasible point:
the clipped gradient training computes, clip(fl(z)), is within delta of clip(z~) for the LP's z~
(coefficients fl(2 x~_p x~_q), exact evaluation), delta = 4 (P + 6) u |2 x~_p| (sum_q |x~_q| M_q +
|y|) + an underflow allowance (milp_window.gradient_slack; u = 2^-53, M_q the box's magnitude),
so the rows read |G - clip(z~)| <= 2 g s + delta and the big-M ranges of z~ are widened by delta;
the hinge margin training computes is within delta_m of the LP's, so its indicator rows leave
delta_m around 1; the update rows hold up to the rounding of lam theta - lr mean(g),
eps = 4 (b + 8) u (M + lr g) (milp_window.update_slack).  A slot whose z overflows float64 keeps
G free in [-g, g].  With records of moderate size delta is ~1e-15; with records of 1e6 it is
~1e-2, and it matters only where z is that close to +-g.

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
the range of m = y x~ . theta over B_t (sum_p min/max(y x~_p lo_p, y x~_p hi_p)), widened by
twice the rounding slack delta_m: a linear function's range over a box, so no tighter constant
exists given B_t; a margin whose range lies on one side of 1 gets no binary.

Every floating-point run of a D' (d(D, D') <= k) through the boxes B_t is feasible, so the safe
lower bounds of min / max theta_F,p bound T_k(t0 + F).  We bound each of the P coordinates from
both sides (2P objectives) and intersect with the propagated box B_F, so a window is never looser
than the propagated bound.  The radius-0 query (the nominal) is the propagated box itself.

Crossings (a data-independent rule).  Every box intersected here -- the propagated steps, the
ledger's boxes, the safe bounds -- contains every floating-point run of every D' within k whose
parameters start in the window's start box, and D itself is such a D' (k >= 1): its run lies in
all of them, so their intersection is never empty.  A crossed intersection therefore means an
unsound engine (a bug), not a property of the data: it stops the run with a one-line internal
error (:func:`meet`) instead of a swap or a fallback that would depend on the data.  For a sound
engine the check never fires, whatever the data.

Nesting (the smoothness proof, certdp/privacy/sensitivity.py): **not declared**
(``nesting_monotone = False``; smooth releases refuse ``certificate=milp|exact`` at settings time,
``privacy.smoothness=unproven`` runs them labelled).  The exact optima nest (every feasible point
of D's window at k is feasible for D''s at k + 1 with the substituted record free, over nested
variable bounds), but the proof needs the *computed* bounds to nest up to a data-independent
slack that AGT's graded widening absorbs.  A safe bound lies below the exact optimum by
sum_j |(c - A^T y)_j - d*_j| (col_hi_j - col_lo_j) for the solver's y against an exact dual d*:
the solver's dual infeasibility (a tolerance on the *scaled* problem) times column ranges that
grow with the records (big-M columns of ~1e13 for records of 1e6), and a time- or node-limited
branch and bound stops at a data-dependent node.  No data-independent bound on that gap exists,
so nothing guarantees T_k(D) inside T_{k+1}(D').  (Before, a solver's "optimal" was trusted and
declared within mip_gap of the optimum; on records of 1e6 HiGHS reported optimal bounds that
excluded the trained parameters by 1.5 and crossed the propagated box.)  The option
``on_time_limit`` keeps its default ``bound`` only: ``refuse`` made whether a run completes
depend on whether a solve on the private data reached its optimum.

Run budget (``run_time_limit``, seconds, default none).  AGT announces a pass's windows
(``start_run``); each window gives every objective the time limit
min(time_limit, remaining / remaining objectives), where remaining is the budget less the time
since the pass started and remaining objectives counts what one worker still solves in sequence
(2P objectives per radius, the radii of a window split over the workers, this window and every
later one of the pass).  Every objective stops by its limit, so the solves of the pass end within
the budget; the propagation and model building around them (seconds on blobs) come on top.  A
solve stopped by this limit is treated exactly like one stopped by ``time_limit``: the safe
bound of the nodes reached so far.  An AGS run with several release
windows runs one pass per window, each with the whole budget.

Cost: binaries ~ F * b * (2P for mse, 1 for hinge) plus the distinct indices; radii are solved
one MILP each (independent, optionally in 2 worker processes); each node of the branch and
bound is one warm-started LP and one sparse product A^T y.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from certdp.bounds.base import Certificate, Schedule, Window, epoch_length, loss_rule
from certdp.bounds.crown import single_layer_step
from certdp.bounds.ibp import IBP, check_substitutions, gradient_bounds
from certdp.bounds.interval import Interval, outward
from certdp.bounds.milp_window import WindowProblem, solve_task
from certdp.errors import ConfigError

log = logging.getLogger("certdp")

SOLVERS = ("highs", "cbc")
ON_TIME_LIMIT = ("bound",)
SOLVE = ("milp", "lp")
# the run budget's clock (wall seconds: HiGHS's time limits are wall-clock too)
_clock = time.perf_counter


# ------------------------------------------------------------------------ certificate
class MILP(Certificate):
    """``certificate=milp``: exact MILP windows every ``frequency`` steps (see module docstring).

    Options: ``frequency`` (F >= 1), ``time_limit`` (seconds per objective), ``run_time_limit``
    (seconds for all windows of an AGT pass, or None), ``substitutions`` (``per_epoch`` |
    ``per_batch``: the variable bounds), ``solve`` (``milp`` | ``lp``), ``solver``
    (highs | cbc: the LP solver proposing duals), ``workers`` (processes for the radii of a
    window, 1 or 2), ``mip_gap`` (relative stopping gap of the branch and bound), ``nodes``
    (branch-and-bound expansions per objective), ``on_time_limit`` (``bound`` only: whatever a
    solve ends with gives a safe bound).  Every bound is a safe bound (module docstring); the
    windows do not nest, so smooth releases refuse the engine.  ``stats`` collects one dict per
    (window, radius) with the solves' outcome."""

    name = "milp"
    options = ("frequency", "time_limit", "solver", "workers", "mip_gap", "on_time_limit", "substitutions",
               "run_time_limit", "solve", "nodes")
    scope = "single-layer mse or hinge models"
    memory_factor = 48
    devices = ("cpu",)
    device_note = "its windows are solved by HiGHS, a CPU solver"
    # safe bounds are sound but not within a data-independent distance of the optimum (module
    # docstring, Nesting)
    nesting_monotone = False

    def __init__(self, *, frequency=1, time_limit=30.0, solver="highs", workers=2, mip_gap=1e-4,
                 on_time_limit="bound", substitutions="per_epoch", run_time_limit=None, solve="milp", nodes=64):
        try:
            F = int(frequency)
        except (TypeError, ValueError):
            raise ConfigError("certificate.frequency", f"got {frequency!r}; allowed: an integer >= 1")
        if F < 1:
            raise ConfigError("certificate.frequency", f"got {frequency!r}; allowed: an integer >= 1")
        try:
            tl = float(time_limit)
        except (TypeError, ValueError):
            raise ConfigError("certificate.time_limit", f"got {time_limit!r}; allowed: a number of seconds > 0")
        if not tl > 0:
            raise ConfigError("certificate.time_limit", f"got {time_limit!r}; allowed: a number of seconds > 0")
        if solver not in SOLVERS:
            raise ConfigError("certificate.solver", f"unknown solver '{solver}'; allowed: {', '.join(SOLVERS)}")
        try:
            w = int(workers)
        except (TypeError, ValueError):
            w = 0
        if w not in (1, 2):
            raise ConfigError("certificate.workers", f"got {workers!r}; allowed: 1 or 2")
        try:
            gap = float(mip_gap)
        except (TypeError, ValueError):
            gap = -1.0
        if not gap >= 0:
            raise ConfigError("certificate.mip_gap", f"got {mip_gap!r}; allowed: a number >= 0")
        if on_time_limit == "refuse":
            # it stopped the run when a solve on the private data ended without an optimum (a
            # data-dependent outcome) to claim nesting, which a solver's bound does not give
            raise ConfigError("certificate.on_time_limit", "'refuse' is withdrawn: every solve now ends in a safe "
                              "bound, whether a solve on the private data reaches its optimum must not decide "
                              "whether the run completes, and the windows do not nest either way; allowed: bound "
                              "(smooth releases need certificate=crown or ibp, or privacy.smoothness=unproven)")
        if on_time_limit not in ON_TIME_LIMIT:
            raise ConfigError("certificate.on_time_limit", f"unknown '{on_time_limit}'; allowed: {', '.join(ON_TIME_LIMIT)}")
        try:
            nd = None if isinstance(nodes, bool) else int(nodes)
        except (TypeError, ValueError):
            nd = None
        if nd is None or nd < 0 or nd != nodes:
            raise ConfigError("certificate.nodes", f"must be an integer >= 0 (got {nodes!r}); allowed: 0 (the LP "
                                                   f"relaxation's bound) or more branch-and-bound expansions")
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
        if solve not in SOLVE:
            raise ConfigError("certificate.solve", f"unknown '{solve}'; allowed: {', '.join(SOLVE)}")
        self.solve = solve
        # the window's variable bounds, not ``substitutions`` (the default schedule reads that one
        # for the per-epoch window engines, crowntt): :meth:`schedule` computes the radii below an
        # epoch's slots, where the ledger bounds are informative
        self.variable_bounds = check_substitutions(substitutions)
        self.run_time_limit = rtl
        self.window_steps = F
        self.time_limit = tl
        self.solver = solver
        self.workers = w
        self.mip_gap = gap
        self.on_time_limit = on_time_limit
        self.nodes = nd
        self.stats: list[dict] = []

    @classmethod
    def supports(cls, model) -> bool:
        return model.n_layers == 1 and model.widths[-1] == 1 and loss_rule(model.loss).milp_steps is not None

    def nesting_refusal(self):
        return ("certificate.name",
                f"'{self.name}' windows are safe solver bounds whose distance to the exact optimum depends on the "
                f"data, so they are not provably nesting", None)

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

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

    def schedule(self, plan, n):
        """One binary per record of the window with sum <= k budgets each window exactly for any
        k: every radius below min(F b, N) is informative (from there on every slot of a window
        may be substituted); with ``substitutions=per_epoch`` the ledger's variable bounds keep
        the radii below an epoch's slots informative too."""
        b = plan.shape[1]
        E = epoch_length(plan, n) if (b < n and self.variable_bounds == "per_epoch") else None
        return Schedule(epoch=None, limit=max(min(b * self.window_steps, n), b * E if E else 0))

    def window_bounds(self, model, boxes: Interval, window: Window) -> Interval:
        """T_k at the end of the window ``steps`` ([K, P]) from the boxes at its start.
        ``magnitude``: accepted for the hook's signature (safe bounds need no tolerance margin).
        ``step_boxes``: AGT's per-step engine callback; with ``substitutions=per_epoch`` it runs
        the per-epoch ledger (IBP) over the window from the start boxes, whose boxes tighten the
        variable bounds and big-M constants (module docstring)."""
        (x, y), plan, ks, settings = window.data, window.plan, window.ks, window.settings
        step_boxes = window.step_boxes
        steps = list(window.steps)
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
                led = [meet(l_, h_, *whole[steps[0] + i], what=f"the per-epoch ledgers at step {steps[0] + i}")
                       for i, (l_, h_) in enumerate(led)]
                led_end = meet(*led_end, *whole[steps[-1] + 1], what=f"the per-epoch ledgers after step {steps[-1]}")

        def cap(box: Interval, i: int) -> Interval:
            """``box`` intersected with the ledger's box of step i (i = F: the window's end)."""
            if led is None:
                return box
            l_, h_ = led_end if i == F else led[i]
            lo_, hi_ = box.lo.clone(), box.hi.clone()
            lo_[pos], hi_[pos] = meet(lo_[pos], hi_[pos], l_, h_,
                                      what=f"the propagated and the ledger box at step {steps[0] + i}")
            return Interval(lo_, hi_)

        # propagated boxes B_0..B_F (variable bounds, big-M constants, and the bound the windows
        # are intersected with): the per-batch step from the capped box of the step before,
        # widened outward (so that every box here contains the floating-point runs it bounds)
        path = [boxes]
        for i, t in enumerate(steps):
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            src = cap(path[-1], i) if i > 0 else path[-1]
            raw = single_layer_step(model, src, xb, yb, subs=ks, settings=settings)
            path.append(outward(raw, rel=1e-12, abs_=1e-14))
        path = [path[0]] + [cap(bx, i) for i, bx in enumerate(path[1:], start=1)]
        end = path[-1]
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
        tasks = [(p, self.solver, limit, self.mip_gap, self.solve == "lp", self.nodes) for p in probs]
        if parallel:
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("fork")) as ex:
                res = list(ex.map(solve_task, tasks))
        else:
            res = [solve_task(t) for t in tasks]
        for j, (l_, h_, st) in zip(solve, res):
            self.stats.append({"window_start": steps[0], "k": int(ks[j]), "time_limit": limit, **st})
            # safe bounds (-inf / +inf where none beats the variable bound): no margin needed
            lo[j], hi[j] = meet(lo[j], hi[j], torch.as_tensor(l_, dtype=lo.dtype), torch.as_tensor(h_, dtype=lo.dtype),
                                what=f"the safe bound and the propagated box of radius {int(ks[j])} after step "
                                     f"{steps[-1]}")
        secs = [st["seconds"] for _, _, st in res]
        log.info("milp window steps %d-%d: %d radii in %.2f s (slowest radius %.2f s, <= %d binaries, largest "
                 "coefficient %.3g, %d LPs, %d branch-and-bound nodes, objective limit %.3g s, %d LPs not optimal, "
                 "%d time-limited, %d objectives with no bound beyond the propagated box)",
                 steps[0], steps[-1], len(res), sum(secs), max(secs), max(st["binaries"] for _, _, st in res),
                 max(st["max_coef"] for _, _, st in res), sum(st["lps"] for _, _, st in res),
                 sum(st["nodes"] for _, _, st in res), limit, sum(st["not_optimal"] for _, _, st in res),
                 sum(st["time_limited"] for _, _, st in res), sum(st["fallback"] for _, _, st in res))
        return Interval(lo, hi)


def meet(lo_a: torch.Tensor, hi_a: torch.Tensor, lo_b: torch.Tensor, hi_b: torch.Tensor, *, what: str):
    """The intersection of two boxes that both contain every floating-point run they bound, D's
    own among them (module docstring, Crossings): never empty for sound engines, so a crossing is
    an internal error -- a one-line refusal that names the engine failure -- rather than a swap or
    a fallback chosen by the data."""
    lo, hi = torch.maximum(lo_a, lo_b), torch.minimum(hi_a, hi_b)
    bad = lo > hi
    if bool(bad.any()):
        raise ConfigError("certificate.name", f"internal error: {what} cross at {int(bad.sum())} coordinate(s) "
                          f"(by up to {float((lo - hi).max()):.3g}), which no sound engine allows: a bug in the milp "
                          f"engine or the engines it intersects, not a property of the data; allowed: another "
                          f"certificate (ibp, crown) until it is fixed")
    return lo, hi


def objective_time_limit(*, time_limit: float, remaining_s: float, remaining_objectives: int) -> float:
    """Seconds one objective may take: min(time_limit, remaining_s / remaining_objectives), at
    least 1 ms (a solve stopped that early still returns a proven, if loose, bound).
    ``remaining_objectives`` counts the objectives one worker still solves in sequence, this
    window's included, so the run's solves end within the budget (module docstring)."""
    share = max(0.0, float(remaining_s)) / max(1, int(remaining_objectives))
    return max(1e-3, min(float(time_limit), share))


class Exact(MILP):
    """``certificate=exact``: the MILP with one step per window (exact per step)."""

    name = "exact"
    options = ("time_limit", "solver", "workers", "mip_gap", "on_time_limit", "nodes")

    def __init__(self, **opts):
        super().__init__(frequency=1, **opts)
