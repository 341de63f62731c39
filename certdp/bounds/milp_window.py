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

from certdp.bounds.safe_lp import TINY, U, CbcLP, HighsLP, LinearProgram, bound_target
from certdp.losses import MSE, Loss


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
    if not isinstance(prob.loss, MSE):
        # hinge: aggregated per step (below); mse: one clipped-gradient column per slot and coordinate
        _hinge_steps(prob, theta, subst, rows, new, eps)
    else:
        _mse_steps(prob, theta, subst, rows, new, eps)
    n = len(col_lo)
    starts = np.cumsum([0] + [len(c) for c in rows.idx]).astype(np.int64)
    idx = np.concatenate(rows.idx) if rows.idx else np.zeros(0, np.int64)
    val = np.concatenate(rows.val) if rows.val else np.zeros(0)
    A = sp.csr_matrix((val, idx, starts), shape=(len(rows.lower), n))
    A.sum_duplicates()
    return LinearProgram(A, np.asarray(rows.lower, dtype=np.float64), np.asarray(rows.upper, dtype=np.float64),
                         np.asarray(col_lo, dtype=np.float64), np.asarray(col_hi, dtype=np.float64),
                         np.nonzero(integ)[0].astype(np.int64), np.asarray(theta[F], dtype=np.int64))


def _mse_steps(prob: WindowProblem, theta, subst, rows: _Rows, new, eps: float) -> None:
    """MSE: per slot and coordinate, the clipped gradient clip(z), z = 2 x~_p (x~ . theta - y), by
    big-M pairs over z's range on the box widened by the rounding slack delta; the gradient used,
    G, within 2 g s + delta of it; the update equations within eps."""
    F, b, P = prob.xt.shape
    g = prob.clip
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        mag_t = np.maximum(np.abs(lo_t), np.abs(hi_t))
        th = theta[t]
        G_cols = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            # residual r = x . theta - y over the box: its range (rounding covered by delta)
            r_lo = float(np.sum(np.minimum(x * lo_t, x * hi_t)) - yi)
            r_hi = float(np.sum(np.maximum(x * lo_t, x * hi_t)) - yi)
            for p in range(P):
                Gc = new(-g, g)
                G_cols.append((p, Gc))
                scale = 2.0 * x[p]
                zc = scale * x                      # z = zc . theta - scale * y
                z0 = -scale * yi
                delta = gradient_slack(scale=scale, x=x, mag=mag_t, y=yi)
                zl = min(scale * r_lo, scale * r_hi) - delta
                zu = max(scale * r_lo, scale * r_hi) + delta
                if not (np.isfinite(zc).all() and math.isfinite(z0) and math.isfinite(zl) and math.isfinite(zu)):
                    continue                        # overflows in float64: G stays free in [-g, g]
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
                # |G - clip(z)| <= 2 g s + delta
                cc = np.asarray(coefs, dtype=np.float64)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [-2 * g]]), hi=const + delta)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [2 * g]]), lo=const - delta)
        # theta_{t+1} = lam theta_t - lr/b sum_i G, up to the update's rounding eps
        for p in range(P):
            gs = [c for (q, c) in G_cols if q == p]
            rows.add([theta[t + 1][p], theta[t][p]] + gs,
                     np.concatenate([[1.0, -prob.lam], np.full(len(gs), prob.lr / b)]), lo=-eps, hi=eps)


def _hinge_steps(prob: WindowProblem, theta, subst, rows: _Rows, new, eps: float) -> None:
    """The hinge window's steps, aggregated per step (module docstring of certdp/bounds/milp.py).

    Slot i of step t (record j, s_j its substitution binary) contributes u_i kappa_i + e_i with
    u_i = a_i (1 - s_j) (the original record's clipped gradient a_i kappa_i, kappa_i =
    clip(-y_i x~_i), a_i = 1[m_i < 1]) and e_i in [-g s_j, g s_j]^P (a substituted record's
    gradient: anything in [-g, g]).  For binary a, s this is exactly G_i of the per-slot encoding
    (s_j = 0: G_i = a_i kappa_i; s_j = 1: G_i = e_i, free in [-g, g]), with u_i linearised by
    u <= a, u <= 1 - s, u >= a - s (exact at binary a, s).  The e_i of a step enter only through
    their sum E_t = sum_i e_i, whose exact range is |E_t,p| <= g sum_{i in B_t} s_j(i): one
    column per step and coordinate instead of b.  The margin m = y x~ . theta that training
    computes is within delta_m of the LP's, so the indicator rows leave delta_m around 1."""
    F, b, P = prob.xt.shape
    g, eta = prob.clip, prob.lr / b
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        mag_t = np.maximum(np.abs(lo_t), np.abs(hi_t))
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
            dm = gradient_slack(scale=1.0, x=x, mag=mag_t, y=0.0)
            # the range of both margins (training's and the LP's) over the box
            m_lo = float(np.sum(np.minimum(yi * x * lo_t, yi * x * hi_t))) - 2 * dm
            m_hi = float(np.sum(np.maximum(yi * x * lo_t, yi * x * hi_t))) + 2 * dm
            finite = math.isfinite(m_lo) and math.isfinite(m_hi) and np.isfinite(x).all()
            if finite and m_lo >= 1.0:
                continue                                    # surely inactive: a = 0, u = 0
            if finite and m_hi < 1.0:
                # surely active: a = 1, u = 1 - s
                const += kappa
                for p in range(P):
                    cols[p].append(s); coefs[p].append(-float(kappa[p]))
                continue
            act = new(0.0, 1.0, True)
            if finite:
                # m <= 1 + dm + (mU - 1 - dm)(1 - a);  m >= 1 - dm - (1 - dm - mL) a
                rows.add(th + [act], np.concatenate([yi * x, [m_hi - 1.0 - dm]]), hi=m_hi)
                rows.add(th + [act], np.concatenate([yi * x, [1.0 - dm - m_lo]]), lo=1.0 - dm)
            # (a margin that overflows float64 leaves a free)
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
            # theta_{t+1} = lam theta_t - eta (const + sum coefs . cols + E), up to eps
            c0 = -eta * float(const[p])
            rows.add([theta[t + 1][p], th[p], E] + cols[p],
                     np.concatenate([[1.0, -prob.lam, eta], eta * np.asarray(coefs[p], dtype=np.float64)]),
                     lo=c0 - eps, hi=c0 + eps)


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
