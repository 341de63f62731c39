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
import math
import multiprocessing as mp
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from certdp.bounds.base import Certificate
from certdp.bounds.crown import CROWN, single_layer_step
from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval, outward
from certdp.errors import ConfigError
from certdp.losses import MSE, Hinge, Loss

log = logging.getLogger("certdp")

SOLVERS = ("highs", "cbc")
ON_TIME_LIMIT = ("bound", "refuse")
MIP_ABS_GAP = 1e-10
# Margin on every solver bound: HiGHS/CBC accept rows violated by up to their feasibility
# tolerance (set to 1e-9 below); a window of F steps accumulates at most ~F such errors per
# coordinate.  The margin is far below any envelope width of interest.
TOL_ABS = 1e-7
HIGHS_TOLERANCES = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9,
                    "mip_feasibility_tolerance": 1e-9}


# ------------------------------------------------------------------------ problem description
@dataclass
class _Rows:
    """A tiny sparse builder: rows as (lower, upper, {col: coef})."""

    lower: list = field(default_factory=list)
    upper: list = field(default_factory=list)
    idx: list = field(default_factory=list)
    val: list = field(default_factory=list)

    def add(self, cols, coefs, lo=-math.inf, hi=math.inf):
        self.idx.append(np.asarray(cols, dtype=np.int64))
        self.val.append(np.asarray(coefs, dtype=np.float64))
        self.lower.append(lo)
        self.upper.append(hi)


@dataclass
class WindowProblem:
    """Everything one radius' MILP needs, as plain numpy (picklable for worker processes)."""

    loss: Loss
    xt: np.ndarray          # [F, b, P] augmented inputs x~ of each step's batch
    y: np.ndarray           # [F, b]
    rec: np.ndarray         # [F, b] window-local record id (0..R-1) of each slot
    n_records: int
    boxes_lo: np.ndarray    # [F+1, P] B_0 (start box) .. B_F
    boxes_hi: np.ndarray
    lam: float
    lr: float
    clip: float
    k: int


def build(prob: WindowProblem):
    """Columns (lower, upper, integrality) and rows of the window MILP; returns also the column
    indices of theta_F."""
    F, b, P = prob.xt.shape
    g = prob.clip
    col_lo, col_hi, integ = [], [], []

    def new(lo, hi, binary=False):
        col_lo.append(lo); col_hi.append(hi); integ.append(1 if binary else 0)
        return len(col_lo) - 1

    rows = _Rows()
    theta = [[new(float(prob.boxes_lo[t, p]), float(prob.boxes_hi[t, p])) for p in range(P)]
             for t in range(F + 1)]
    subst = [new(0.0, 1.0, True) for _ in range(prob.n_records)]
    k_eff = min(prob.k, prob.n_records)
    if k_eff < prob.n_records:
        rows.add(subst, np.ones(prob.n_records), hi=float(k_eff))
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        th = theta[t]
        G_cols = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            # affine clipped gradient per coordinate: (cols, coefs, const)
            if isinstance(prob.loss, MSE):
                # residual r = x . theta - y over the box: exact range
                r_lo = float(np.sum(np.minimum(x * lo_t, x * hi_t)) - yi)
                r_hi = float(np.sum(np.maximum(x * lo_t, x * hi_t)) - yi)
            else:
                m_lo = float(np.sum(np.minimum(yi * x * lo_t, yi * x * hi_t)))
                m_hi = float(np.sum(np.maximum(yi * x * lo_t, yi * x * hi_t)))
                kappa = np.clip(-yi * x, -g, g)
                if m_hi < 1.0:
                    act = None          # surely active: a = 1
                elif m_lo >= 1.0:
                    act = "off"         # surely inactive: a = 0
                else:
                    act = new(0.0, 1.0, True)
                    # m <= 1 + (mU - 1)(1 - a);  m >= 1 - (1 - mL) a
                    rows.add(th + [act], np.concatenate([yi * x, [m_hi - 1.0]]), hi=m_hi)
                    rows.add(th + [act], np.concatenate([yi * x, [1.0 - m_lo]]), lo=1.0)
            for p in range(P):
                Gc = new(-g, g)
                G_cols.append((p, Gc))
                if isinstance(prob.loss, MSE):
                    scale = 2.0 * x[p]
                    zc = scale * x                      # z = zc . theta - scale * y
                    z0 = -scale * yi
                    zl = min(scale * r_lo, scale * r_hi)
                    zu = max(scale * r_lo, scale * r_hi)
                    if zu <= -g or zl >= g:             # surely clipped: constant
                        cols, coefs, const = [], [], (-g if zu <= -g else g)
                    else:
                        cols, coefs, const = list(th), list(zc), z0
                        if zu > g:                      # u = max(z - g, 0) leaves
                            u = new(0.0, zu - g); du = new(0.0, 1.0, True)
                            rows.add(th + [u], np.concatenate([zc, [-1.0]]), hi=g - z0)        # u >= z - g
                            rows.add([u, du], [1.0, -(zu - g)], hi=0.0)                        # u <= U d
                            # u <= z - g - L (1 - d), L = zl - g
                            rows.add(th + [u, du], np.concatenate([-zc, [1.0, -(zl - g)]]), hi=z0 - g - (zl - g))
                            cols.append(u); coefs.append(-1.0)
                        if zl < -g:                     # v = max(-g - z, 0) enters
                            v = new(0.0, -g - zl); dv = new(0.0, 1.0, True)
                            rows.add(th + [v], np.concatenate([zc, [1.0]]), lo=-g - z0)        # v >= -g - z
                            rows.add([v, dv], [1.0, -(-g - zl)], hi=0.0)                       # v <= U d
                            # v <= -g - z - L (1 - d), L = -g - zu
                            rows.add(th + [v, dv], np.concatenate([zc, [1.0, -(-g - zu)]]), hi=-g - z0 - (-g - zu))
                            cols.append(v); coefs.append(1.0)
                else:
                    kp = float(kappa[p])
                    if act is None:
                        cols, coefs, const = [], [], kp
                    elif act == "off":
                        cols, coefs, const = [], [], 0.0
                    else:
                        cols, coefs, const = [act], [kp], 0.0
                # |G - c| <= 2 g s
                cc = np.asarray(coefs, dtype=np.float64)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [-2 * g]]), hi=const)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [2 * g]]), lo=const)
        # theta_{t+1} = lam theta_t - lr/b sum_i G
        for p in range(P):
            gs = [c for (q, c) in G_cols if q == p]
            rows.add([theta[t + 1][p], theta[t][p]] + gs,
                     np.concatenate([[1.0, -prob.lam], np.full(len(gs), prob.lr / b)]), lo=0.0, hi=0.0)
    return (np.asarray(col_lo), np.asarray(col_hi), np.asarray(integ, dtype=np.int64), rows,
            theta[F])


# ------------------------------------------------------------------------ solvers
# highspy and pulp are imported where a window is solved: importing them costs start-up time
# for every command, and a build without highspy falls back to CBC (solve_window).
_BANNER_DONE = False


def _highs():
    """A silent highspy.Highs (its constructor prints a banner once per process)."""
    global _BANNER_DONE
    import highspy
    if _BANNER_DONE:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        fd = os.dup(1)
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, 1)
        try:
            h = highspy.Highs()
        finally:
            os.dup2(fd, 1)
            os.close(fd); os.close(nul)
        _BANNER_DONE = True
    h.setOptionValue("output_flag", False)
    return h


def _solve_highs(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap):
    import highspy
    h = _highs()
    for name, v in (("threads", 1), *HIGHS_TOLERANCES.items(),
                    ("mip_rel_gap", mip_gap), ("mip_abs_gap", MIP_ABS_GAP), ("time_limit", float(time_limit))):
        h.setOptionValue(name, v)
    inf = highspy.kHighsInf
    n = len(col_lo)
    h.addVars(n, col_lo, col_hi)
    starts = np.cumsum([0] + [len(c) for c in rows.idx[:-1]]).astype(np.int32) if rows.idx else np.zeros(0, np.int32)
    idx = np.concatenate(rows.idx).astype(np.int32) if rows.idx else np.zeros(0, np.int32)
    val = np.concatenate(rows.val) if rows.val else np.zeros(0)
    lo = np.array([(-inf if math.isinf(v) else v) for v in rows.lower], dtype=np.float64)
    hi = np.array([(inf if math.isinf(v) else v) for v in rows.upper], dtype=np.float64)
    h.addRows(len(lo), lo, hi, len(idx), starts, idx, val)
    ints = np.nonzero(integ)[0].astype(np.int32)
    if len(ints):
        h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
    is_mip = len(ints) > 0
    out, stats = [], {"proven": 0, "fallback": 0, "time_limited": 0, "not_optimal": 0}
    allc = np.arange(n, dtype=np.int32)
    for col, sign in targets:
        cost = np.zeros(n); cost[col] = sign
        h.changeColsCost(n, allc, cost)
        h.run()
        st = h.getModelStatus()
        info = h.getInfo()
        if st == highspy.HighsModelStatus.kTimeLimit:
            stats["time_limited"] += 1
        if st != highspy.HighsModelStatus.kOptimal:
            stats["not_optimal"] += 1           # a bound, but not within the stopping gap
        bound = None
        if is_mip:
            if st in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit,
                      highspy.HighsModelStatus.kIterationLimit, highspy.HighsModelStatus.kSolutionLimit,
                      highspy.HighsModelStatus.kInterrupt):
                bound = float(info.mip_dual_bound)
        elif st == highspy.HighsModelStatus.kOptimal:
            bound = float(info.objective_function_value)
        if bound is None or not math.isfinite(bound):
            stats["fallback"] += 1
            out.append(None)
        else:
            stats["proven"] += 1
            out.append(bound)
        h.clearSolver()
    return out, stats


def _solve_cbc(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap):
    import pulp
    stats = {"proven": 0, "fallback": 0, "time_limited": 0, "not_optimal": 0}

    def make(relax: bool):
        prob = pulp.LpProblem("window", pulp.LpMinimize)
        vs = [pulp.LpVariable(f"v{j}", lowBound=float(col_lo[j]), upBound=float(col_hi[j]),
                              cat=("Integer" if (integ[j] and not relax) else "Continuous"))
              for j in range(len(col_lo))]
        for r, (ci, cv) in enumerate(zip(rows.idx, rows.val)):
            e = pulp.LpAffineExpression([(vs[int(c)], float(v)) for c, v in zip(ci, cv)])
            lo, hi = rows.lower[r], rows.upper[r]
            if lo == hi:
                prob += (e == lo), f"r{r}"
            else:
                if not math.isinf(lo):
                    prob += (e >= lo), f"r{r}l"
                if not math.isinf(hi):
                    prob += (e <= hi), f"r{r}u"
        return prob, vs

    prob, vs = make(False)
    relax = None
    out = []
    for col, sign in targets:
        prob.setObjective(pulp.LpAffineExpression([(vs[col], float(sign))]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)     # PULP_CBC_CMD: the bundled CBC
            prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, gapRel=0.0, threads=1))
        bound = None
        if prob.sol_status == pulp.LpSolutionOptimal and prob.status == pulp.LpStatusOptimal:
            bound = float(pulp.value(prob.objective))
        else:
            # time limit: an incumbent is not a bound; the LP relaxation's optimum is
            stats["time_limited"] += 1
            stats["not_optimal"] += 1
            if relax is None:
                relax = make(True)
            rp, rv = relax
            rp.setObjective(pulp.LpAffineExpression([(rv[col], float(sign))]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                rp.solve(pulp.PULP_CBC_CMD(msg=False, threads=1))
            if rp.status == pulp.LpStatusOptimal:
                bound = float(pulp.value(rp.objective))
        if bound is None:
            stats["fallback"] += 1
        else:
            stats["proven"] += 1
        out.append(bound)
    return out, stats


def solve_window(prob: WindowProblem, solver: str, time_limit: float, mip_gap: float):
    """Proven bounds (lo[P], hi[P]) of theta_F for one radius (None entries: no proven bound)."""
    t0 = time.perf_counter()
    col_lo, col_hi, integ, rows, thF = build(prob)
    targets = [(c, 1.0) for c in thF] + [(c, -1.0) for c in thF]
    fn = _solve_highs if solver == "highs" else _solve_cbc
    try:
        vals, stats = fn(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap)
    except ImportError:
        if solver != "highs":
            raise
        vals, stats = _solve_cbc(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap)
    P = len(thF)
    lo = np.array([(v if v is not None else -np.inf) for v in vals[:P]])
    hi = np.array([(-v if v is not None else np.inf) for v in vals[P:]])
    stats["seconds"] = time.perf_counter() - t0
    stats["binaries"] = int(integ.sum())
    return lo, hi, stats


def _solve_task(args):
    prob, solver, time_limit, mip_gap = args
    return solve_window(prob, solver, time_limit, mip_gap)


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
                      magnitude: float | None = None) -> Interval:
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
                res = list(ex.map(_solve_task, tasks))
        else:
            res = [_solve_task(t) for t in tasks]
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
