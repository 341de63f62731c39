"""One window of F training steps as a mixed-integer linear program: the rows (clipped-gradient
encodings, one binary per substitutable record, the update equations) and the solvers (HiGHS via
highspy, CBC via pulp).  The derivation and the soundness argument are in certdp/bounds/milp.py;
here every solver outcome is reported with its status, so that the certificate uses proven
bounds only."""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from certdp.losses import MSE, Loss

MIP_ABS_GAP = 1e-10
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
    if not isinstance(prob.loss, MSE):
        # hinge: aggregated per step (below); mse: one clipped-gradient column per slot and coordinate
        _hinge_steps(prob, theta, subst, rows, new)
        return (np.asarray(col_lo), np.asarray(col_hi), np.asarray(integ, dtype=np.int64), rows, theta[F])
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        th = theta[t]
        G_cols = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            # residual r = x . theta - y over the box: exact range
            r_lo = float(np.sum(np.minimum(x * lo_t, x * hi_t)) - yi)
            r_hi = float(np.sum(np.maximum(x * lo_t, x * hi_t)) - yi)
            for p in range(P):
                Gc = new(-g, g)
                G_cols.append((p, Gc))
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


def _hinge_steps(prob: WindowProblem, theta, subst, rows: _Rows, new) -> None:
    """The hinge window's steps, aggregated per step (module docstring of certdp/bounds/milp.py).

    Slot i of step t (record j, s_j its substitution binary) contributes u_i kappa_i + e_i with
    u_i = a_i (1 - s_j) (the original record's clipped gradient a_i kappa_i, kappa_i =
    clip(-y_i x~_i), a_i = 1[m_i < 1]) and e_i in [-g s_j, g s_j]^P (a substituted record's
    gradient: anything in [-g, g]).  For binary a, s this is exactly G_i of the per-slot encoding
    (s_j = 0: G_i = a_i kappa_i; s_j = 1: G_i = e_i, free in [-g, g]), with u_i linearised by
    u <= a, u <= 1 - s, u >= a - s (exact at binary a, s).  The e_i of a step enter only through
    their sum E_t = sum_i e_i, whose exact range is |E_t,p| <= g sum_{i in B_t} s_j(i): one
    column per step and coordinate instead of b."""
    F, b, P = prob.xt.shape
    g, eta = prob.clip, prob.lr / b
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        th = theta[t]
        cols: list[list] = [[] for _ in range(P)]
        coefs: list[list] = [[] for _ in range(P)]
        const = np.zeros(P)
        s_step = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            s_step.append(s)
            kappa = np.clip(-yi * x, -g, g)
            m_lo = float(np.sum(np.minimum(yi * x * lo_t, yi * x * hi_t)))
            m_hi = float(np.sum(np.maximum(yi * x * lo_t, yi * x * hi_t)))
            if m_lo >= 1.0:
                continue                                    # surely inactive: a = 0, u = 0
            if m_hi < 1.0:
                # surely active: a = 1, u = 1 - s
                const += kappa
                for p in range(P):
                    cols[p].append(s); coefs[p].append(-float(kappa[p]))
                continue
            act = new(0.0, 1.0, True)
            # m <= 1 + (mU - 1)(1 - a);  m >= 1 - (1 - mL) a
            rows.add(th + [act], np.concatenate([yi * x, [m_hi - 1.0]]), hi=m_hi)
            rows.add(th + [act], np.concatenate([yi * x, [1.0 - m_lo]]), lo=1.0)
            u = new(0.0, 1.0)
            rows.add([u, act], [1.0, -1.0], hi=0.0)         # u <= a
            rows.add([u, s], [1.0, 1.0], hi=1.0)            # u <= 1 - s
            rows.add([u, act, s], [1.0, -1.0, 1.0], lo=0.0)  # u >= a - s
            for p in range(P):
                if kappa[p] != 0.0:
                    cols[p].append(u); coefs[p].append(float(kappa[p]))
        for p in range(P):
            E = new(-g * b, g * b)
            rows.add([E] + s_step, np.concatenate([[1.0], np.full(b, -g)]), hi=0.0)
            rows.add([E] + s_step, np.concatenate([[1.0], np.full(b, g)]), lo=0.0)
            # theta_{t+1} = lam theta_t - eta (const + sum coefs . cols + E)
            rows.add([theta[t + 1][p], th[p], E] + cols[p],
                     np.concatenate([[1.0, -prob.lam, eta], eta * np.asarray(coefs[p], dtype=np.float64)]),
                     lo=-eta * float(const[p]), hi=-eta * float(const[p]))


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


def _solve_highs(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap, lp_only=False):
    """Per target: the LP relaxation's optimum (a proven bound, cheap), then unless ``lp_only``
    the MIP with the time left of the target's ``time_limit``; the larger of the two proven lower
    bounds is returned (None: neither)."""
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
    is_mip = len(ints) > 0
    stats = {"proven": 0, "fallback": 0, "time_limited": 0, "not_optimal": 0, "lp_better": 0,
             "lp_seconds": 0.0, "mip_seconds": 0.0}
    allc = np.arange(n, dtype=np.int32)
    optimal = highspy.HighsModelStatus.kOptimal

    def objective(col, sign):
        cost = np.zeros(n); cost[col] = sign
        h.changeColsCost(n, allc, cost)

    # 1. the LP relaxation of every target (all columns continuous): its optimum bounds the MIP's
    lp_val, lp_sec = [None] * len(targets), [0.0] * len(targets)
    for j, (col, sign) in enumerate(targets):
        objective(col, sign)
        t0 = time.perf_counter()
        h.run()
        lp_sec[j] = time.perf_counter() - t0
        st = h.getModelStatus()
        if st == optimal:
            v = float(h.getInfo().objective_function_value)
            lp_val[j] = v if math.isfinite(v) else None
        elif st == highspy.HighsModelStatus.kTimeLimit and (lp_only or not is_mip):
            stats["time_limited"] += 1
        h.clearSolver()
    stats["lp_seconds"] = float(sum(lp_sec))
    if lp_only or not is_mip:
        out = []
        for v in lp_val:
            stats["proven" if v is not None else "fallback"] += 1
            stats["not_optimal"] += v is None
            out.append(v)
        return out, stats
    # 2. the MIP, each target with what its LP left of the time limit
    h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
    out = []
    t_mip = time.perf_counter()
    for j, (col, sign) in enumerate(targets):
        objective(col, sign)
        h.setOptionValue("time_limit", max(1e-3, float(time_limit) - lp_sec[j]))
        h.run()
        st = h.getModelStatus()
        info = h.getInfo()
        if st == highspy.HighsModelStatus.kTimeLimit:
            stats["time_limited"] += 1
        if st != optimal:
            stats["not_optimal"] += 1           # a bound, but not within the stopping gap
        bound = None
        if st in (optimal, highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit,
                  highspy.HighsModelStatus.kSolutionLimit, highspy.HighsModelStatus.kInterrupt):
            bound = float(info.mip_dual_bound)
            if not math.isfinite(bound):
                bound = None
        if lp_val[j] is not None and (bound is None or lp_val[j] > bound):
            stats["lp_better"] += 1
            bound = lp_val[j]
        if bound is None:
            stats["fallback"] += 1
        else:
            stats["proven"] += 1
        out.append(bound)
        h.clearSolver()
    stats["mip_seconds"] = time.perf_counter() - t_mip
    return out, stats


def _solve_cbc(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap, lp_only=False):
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

    if lp_only:
        rp, rv = make(True)
        out = []
        for col, sign in targets:
            rp.setObjective(pulp.LpAffineExpression([(rv[col], float(sign))]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                rp.solve(pulp.PULP_CBC_CMD(msg=False, threads=1, timeLimit=time_limit))
            bound = float(pulp.value(rp.objective)) if rp.status == pulp.LpStatusOptimal else None
            stats["proven" if bound is not None else "fallback"] += 1
            stats["not_optimal"] += bound is None
            out.append(bound)
        return out, stats
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


def solve_window(prob: WindowProblem, solver: str, time_limit: float, mip_gap: float, lp_only: bool = False):
    """Proven bounds (lo[P], hi[P]) of theta_F for one radius (None entries: no proven bound);
    ``lp_only``: the LP relaxation's optimum only."""
    t0 = time.perf_counter()
    col_lo, col_hi, integ, rows, thF = build(prob)
    targets = [(c, 1.0) for c in thF] + [(c, -1.0) for c in thF]
    fn = _solve_highs if solver == "highs" else _solve_cbc
    try:
        vals, stats = fn(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap, lp_only=lp_only)
    except ImportError:
        if solver != "highs":
            raise
        vals, stats = _solve_cbc(col_lo, col_hi, integ, rows, targets, time_limit, mip_gap, lp_only=lp_only)
    P = len(thF)
    lo = np.array([(v if v is not None else -np.inf) for v in vals[:P]])
    hi = np.array([(-v if v is not None else np.inf) for v in vals[P:]])
    stats["seconds"] = time.perf_counter() - t0
    stats["binaries"] = int(integ.sum())
    return lo, hi, stats


def solve_task(args):
    prob, solver, time_limit, mip_gap, lp_only = args
    return solve_window(prob, solver, time_limit, mip_gap, lp_only)
