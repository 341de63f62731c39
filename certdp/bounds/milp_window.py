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


def solve_task(args):
    prob, solver, time_limit, mip_gap = args
    return solve_window(prob, solver, time_limit, mip_gap)
