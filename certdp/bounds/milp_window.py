"""One window of F training steps as a mixed-integer linear program (certdp/bounds/milp.py has the
derivation): :func:`build` writes the rows (clipped-gradient encodings, one binary per
substitutable record, the update equations) with the *rounding slacks* that make every
floating-point run of the algorithm a feasible point (milp.py, "Floating point"), and
:func:`solve_window` bounds theta_F with the safe bounds of certdp/bounds/safe_lp.py, which hold
whatever the LP solver returns."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from certdp.bounds.base import loss_rule
from certdp.bounds.safe_lp import TINY, U, CbcLP, HighsLP, LinearProgram, bound_target
from certdp.losses import Loss


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


def update_slack(*, b: int, lr: float, clip: float, magnitude: float) -> float:
    """A bound on |fl(lam theta - lr mean(g)) - (lam theta - (lr / b) sum g)| for |theta| <= magnitude
    and |g_i| <= clip, plus the rounding of the coefficient lr / b: the (b + 8) roundings of the
    sum, mean, products and difference, each at most U times a magnitude below magnitude + lr clip,
    with a factor 4 over the first-order bound (it also covers the evaluation of this formula)."""
    return 4.0 * (b + 8) * U * (magnitude + lr * clip) + TINY * (1.0 + magnitude + lr * clip)


def gradient_slack(*, scale: float, x: np.ndarray, mag: np.ndarray, y: float) -> float:
    """A bound on how far the float64 value of z = scale (x~ . theta - y) (what training computes,
    in any summation order) and the LP's z (coefficients fl(scale x~_q), fl(-scale y), evaluated
    exactly) can each be from the exact z, and on the rounding of z's range over the box, for
    |theta_q| <= mag_q: (P + 4) roundings of terms at most |scale| (sum |x~_q| mag_q + |y|), with a
    factor 4 over the first-order bound, plus the underflow allowance."""
    P = x.shape[0]
    base = float(np.sum(np.abs(x) * mag)) + abs(y)
    return 4.0 * (P + 6) * U * abs(scale) * base + TINY * (P + 6) * (1.0 + abs(scale)) * (1.0 + float(mag.max()))


def build(prob: WindowProblem) -> LinearProgram:
    """The window MILP (certdp/bounds/milp.py: encoding and floating-point slacks)."""
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
    magnitude = float(np.maximum(np.abs(prob.boxes_lo), np.abs(prob.boxes_hi)).max())
    eps = update_slack(b=b, lr=prob.lr, clip=g, magnitude=magnitude)
    # the loss's rule (certdp/bounds/rules): hinge aggregated per step, mse one clipped-gradient
    # column per slot and coordinate
    loss_rule(prob.loss).milp_steps(prob, theta, subst, rows, new, eps)
    n = len(col_lo)
    starts = np.cumsum([0] + [len(c) for c in rows.idx]).astype(np.int64)
    idx = np.concatenate(rows.idx) if rows.idx else np.zeros(0, np.int64)
    val = np.concatenate(rows.val) if rows.val else np.zeros(0)
    A = sp.csr_matrix((val, idx, starts), shape=(len(rows.lower), n))
    A.sum_duplicates()
    return LinearProgram(A, np.asarray(rows.lower, dtype=np.float64), np.asarray(rows.upper, dtype=np.float64),
                         np.asarray(col_lo, dtype=np.float64), np.asarray(col_hi, dtype=np.float64),
                         np.nonzero(integ)[0].astype(np.int64), np.asarray(theta[F], dtype=np.int64))


def solve_window(prob: WindowProblem, solver: str, time_limit: float, mip_gap: float, lp_only: bool = False,
                 nodes: int = 64):
    """Rigorous bounds (lo[P], hi[P]) of theta_F for one radius (-inf / +inf: none better than the
    variable bounds; see :func:`bound_target`) and the solve's statistics."""
    t0 = time.perf_counter()
    lp = build(prob)
    try:
        oracle = HighsLP(lp) if solver == "highs" else CbcLP(lp)
    except ImportError:
        if solver != "highs":
            raise
        oracle = CbcLP(lp)
    P = len(lp.targets)
    n = lp.A.shape[1]
    out = []
    stats = {"proven": 0, "fallback": 0, "time_limited": 0, "not_optimal": 0, "lps": 0, "nodes": 0,
             "infeasible": 0, "verified_empty": 0}
    for sign in (1.0, -1.0):
        for col in lp.targets:
            c = np.zeros(n); c[col] = sign
            b, info = bound_target(oracle, lp, c, lp_only=lp_only, nodes=nodes, gap=mip_gap,
                                   deadline=time.perf_counter() + time_limit)
            for key in ("lps", "nodes", "not_optimal", "time_limited", "infeasible", "verified_empty"):
                stats[key] += info[key]
            stats["proven" if math.isfinite(b) else "fallback"] += 1
            out.append(b)
    lo = np.array(out[:P])
    hi = -np.array(out[P:])
    stats["seconds"] = time.perf_counter() - t0
    stats["binaries"] = int(len(lp.binaries))
    stats["max_coef"] = float(np.abs(lp.A.data).max()) if lp.A.nnz else 0.0
    return lo, hi, stats


def solve_task(args):
    prob, solver, time_limit, mip_gap, lp_only, nodes = args
    return solve_window(prob, solver, time_limit, mip_gap, lp_only, nodes)
