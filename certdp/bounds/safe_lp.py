"""Rigorous lower bounds on linear programs whatever an LP solver returns, and a branch and bound
over binaries built on them (used by the MILP windows, certdp/bounds/milp_window.py).

* :func:`safe_lower_bound` is the Neumaier-Shcherbina bound: from *any* vector y of row
  multipliers it gives a lower bound on min c.x over the LP, evaluated with outward rounding
  (each product moved one ulp outward, each sum by a bound on its rounding error), so it is a
  bound on the exact problem the floats describe, never a solver's claim;
* :func:`equilibrate` scales rows and columns by powers of two (exact) before the LP goes to the
  solver; the dual of the scaled LP is mapped back and the bound is computed on the unscaled LP;
* :func:`bound_target` is a best-first branch and bound over the binaries whose every node is an
  LP relaxation bounded by :func:`safe_lower_bound`: the minimum over its open nodes is a bound
  on the MIP's optimum (every integral point lies in one node), with ``lp_only`` the root alone.

The solver (HiGHS via highspy, or CBC via pulp) only proposes dual vectors and primal points
(used to pick a branching binary); a solver that returns garbage, stops at a time limit or fails
gives a looser bound (at worst the variable bound of the objective column), never an unsound
one."""

from __future__ import annotations

import heapq
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np
import scipy.sparse as sp

HIGHS_TOLERANCES = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}
# unit roundoff of float64, and an absolute allowance for underflow (every rounding error of a
# product below the normal range is < 2^-1074; 2^-1000 stays far above it after amplification by
# any finite coefficient it is multiplied with, and far below any width of interest)
U = 2.0 ** -53
TINY = 2.0 ** -1000
# a binary within this of 0 or 1 in a node's LP solution is not branched on (a choice of the
# search only; the node's bound is the safe bound either way)
INT_TOL = 1e-6
# the absolute part of the stopping gap of the branch and bound
ABS_GAP = 1e-10
# verified_value: at most this many rows are checked in exact rationals (the rest by enclosures)
EXACT_ROWS = 2000


@dataclass(frozen=True)
class LinearProgram:
    """min c.x subject to row_lo <= A x <= row_hi and col_lo <= x <= col_hi (finite), with the
    columns ``binaries`` integral in the MIP; ``targets``: the columns of theta_F."""

    A: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    binaries: np.ndarray
    targets: np.ndarray

    @cached_property
    def AT(self) -> sp.csr_matrix:
        """A transposed (row j: the coefficients of column j), for A^T y."""
        return self.A.T.tocsr()

    @cached_property
    def absAT(self) -> sp.csr_matrix:
        return abs(self.AT)

    @cached_property
    def absA(self) -> sp.csr_matrix:
        return abs(self.A)


# ------------------------------------------------------------------------ safe bounds
def _down(v):
    """The next float below (a lower bound on the exact result of one rounded operation)."""
    return np.nextafter(v, -np.inf)


def _up(v):
    return np.nextafter(v, np.inf)


def sum_down(v: np.ndarray) -> float:
    """A float <= the exact sum of the floats ``v`` (-inf if any is NaN or -inf): the computed sum
    (any order) is within gamma_{n-1} sum |v_i| of it, bounded by 4 (n + 1) U times the computed
    sum of |v_i| (which covers the evaluation of the bound itself); the last subtraction is
    rounded down by one ulp."""
    v = np.asarray(v, dtype=np.float64)
    if v.size == 0:
        return 0.0
    if np.isnan(v).any() or np.isneginf(v).any():
        return -math.inf
    v = np.minimum(v, np.finfo(np.float64).max)        # a lower bound of +inf (overflow) stays one
    n = v.size
    s = float(np.sum(v))
    a = float(np.sum(np.abs(v)))
    err = 4.0 * (n + 1) * U * a + (n + 1) * TINY
    out = float(_down(s - err))
    return out if not math.isnan(out) else -math.inf


def _mul_down(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise lower bounds on the exact products a b (one rounding: one ulp down; an
    underflow to 0 goes to the smallest subnormal below 0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _down(a * b)


def safe_lower_bound(lp: LinearProgram, c: np.ndarray, y: np.ndarray | None, *,
                     col_lo: np.ndarray | None = None, col_hi: np.ndarray | None = None) -> float:
    """A rigorous lower bound on min c.x over row_lo <= A x <= row_hi, col_lo <= x <= col_hi (the
    LP relaxation, exact arithmetic on the stored floats), from *any* multipliers ``y`` (None: 0).

    For every feasible x and every y: c.x = y.(A x) + (c - A^T y).x, and y_i (A x)_i >= y_i row_lo_i
    (y_i > 0) or y_i row_hi_i (y_i < 0) -- a multiplier whose side is infinite is set to 0 first
    --, and d_j x_j >= min(d_j col_lo_j, d_j col_hi_j) for d = c - A^T y (Neumaier and
    Shcherbina, "Safe bounds in linear and mixed-integer linear programming", 2004).  d is
    enclosed in [d_lo, d_hi] with a bound on the rounding of the sparse products and sums, the
    minimum over the box of d_j x_j is the least of the four corner products each rounded down,
    and the sum is :func:`sum_down`: the result is <= the exact value of the expression, hence <=
    the LP's minimum, whatever y is (a poor y only loosens it).  ``col_lo``/``col_hi`` override the
    column bounds (a branch-and-bound node)."""
    lo = lp.col_lo if col_lo is None else col_lo
    hi = lp.col_hi if col_hi is None else col_hi
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError("safe_lower_bound needs finite column bounds")
    m = lp.A.shape[0]
    yy = np.zeros(m) if y is None else np.array(y, dtype=np.float64)
    yy[~np.isfinite(yy)] = 0.0
    yy[(yy > 0) & ~np.isfinite(lp.row_lo)] = 0.0
    yy[(yy < 0) & ~np.isfinite(lp.row_hi)] = 0.0
    side = np.where(yy > 0, lp.row_lo, np.where(yy < 0, lp.row_hi, 0.0))
    rho = _mul_down(yy, np.where(yy != 0, side, 0.0))
    with np.errstate(over="ignore", invalid="ignore"):
        s = lp.AT @ yy
        sa = lp.absAT @ np.abs(yy)
        nnz = np.diff(lp.AT.indptr)
        nmax = float(nnz.max()) if nnz.size else 0.0
        e = 4.0 * (nmax + 2) * U * (sa + np.abs(c)) + (nmax + 2) * TINY
        d = c - s
        d_lo = _down(d - e)
        d_hi = _up(d + e)
        corners = np.stack([_mul_down(d_lo, lo), _mul_down(d_lo, hi), _mul_down(d_hi, lo), _mul_down(d_hi, hi)])
    kappa = corners.min(0)
    if np.isnan(kappa).any() or np.isnan(rho).any():
        return -math.inf
    return sum_down(np.concatenate([rho, kappa]))


def verified_value(lp: LinearProgram, x: np.ndarray, c: np.ndarray) -> float | None:
    """A float <= c.x when ``x`` is a feasible point of the LP (exact arithmetic on the stored
    floats), else None: every column bound is compared exactly, and every row with an enclosure of
    (A x)_i -- the computed product, within 4 (n + 2) U sum_j |a_ij x_j| of the exact one (n the
    row's nonzeros; the factor covers the evaluation of the bound itself), moved one ulp outward
    -- inside [row_lo_i, row_hi_i].  The value is the sum of the products c_j x_j each rounded
    down, summed by :func:`sum_down`.  A row the enclosure cannot decide (at most
    :data:`EXACT_ROWS` of them) is evaluated exactly in rationals.  (The primal half of a certified
    gap: gaplp.py.)"""
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all() or (x < lp.col_lo).any() or (x > lp.col_hi).any():
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        ax = lp.A @ x
        mag = lp.absA @ np.abs(x)
        nnz = np.diff(lp.A.indptr)
        e = 4.0 * (nnz + 2) * U * mag + (nnz + 2) * TINY
        lo_ok = ~np.isfinite(lp.row_lo) | (_down(ax - e) >= lp.row_lo)
        hi_ok = ~np.isfinite(lp.row_hi) | (_up(ax + e) <= lp.row_hi)
    if not (np.isfinite(ax).all() and np.isfinite(mag).all()):
        return None
    bad = np.nonzero(~(lo_ok & hi_ok))[0]
    if len(bad) > EXACT_ROWS:
        return None
    for i in bad:
        # rows the enclosure cannot decide (met with equality, e.g. u + s <= 1 at u = 1 - s): the
        # exact rational value of the row
        a, b = lp.A.indptr[i], lp.A.indptr[i + 1]
        v = sum((Fraction(float(c_)) * Fraction(float(x_)) for c_, x_ in zip(lp.A.data[a:b], x[lp.A.indices[a:b]])),
                Fraction(0))
        if (math.isfinite(lp.row_lo[i]) and v < Fraction(float(lp.row_lo[i]))) or \
                (math.isfinite(lp.row_hi[i]) and v > Fraction(float(lp.row_hi[i]))):
            return None
    nz = np.nonzero(c)[0]
    v = sum_down(_mul_down(c[nz], x[nz]))
    return v if math.isfinite(v) else None


def proves_infeasible(lp: LinearProgram, ray: np.ndarray, *, col_lo: np.ndarray, col_hi: np.ndarray) -> bool:
    """True when ``ray`` (or its negative) is a verified Farkas certificate: the safe lower bound
    of min 0.x with it as multipliers is > 0, which no feasible x allows."""
    zero = np.zeros(lp.A.shape[1])
    return any(safe_lower_bound(lp, zero, sgn * ray, col_lo=col_lo, col_hi=col_hi) > 0 for sgn in (1.0, -1.0))


def equilibrate(A: sp.csr_matrix, passes: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Row and column scale factors (powers of two, so that scaling is exact) that bring every
    row's and column's nonzero magnitudes to a geometric mean near 1 (alternating passes): the
    solver then works on coefficients within its tolerances' reach even where big-M constants
    are ~1e13 (records of 1e6)."""
    m, n = A.shape
    r, c = np.ones(m), np.ones(n)
    B = A.tocoo()
    keep = (B.data != 0) & np.isfinite(B.data)
    rows, cols, v = B.row[keep], B.col[keep], np.abs(B.data[keep])
    if v.size == 0:
        return r, c

    def factor(vals, idx, size):
        big = np.zeros(size); np.maximum.at(big, idx, vals)
        small = np.full(size, np.inf); np.minimum.at(small, idx, vals)
        ok = big > 0
        f = np.ones(size)
        f[ok] = np.exp2(-np.round(0.5 * (np.log2(big[ok]) + np.log2(small[ok]))))
        return f

    for _ in range(passes):
        r *= factor(v * r[rows] * c[cols], rows, m)
        c *= factor(v * r[rows] * c[cols], cols, n)
    return r, c


# ------------------------------------------------------------------------ LP oracles
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


class _Scaled:
    """The LP with rows scaled by r and columns by c (x = c x~): what the solver sees."""

    def __init__(self, lp: LinearProgram):
        self.lp = lp
        self.r, self.c = equilibrate(lp.A)
        self.A = (sp.diags(self.r) @ lp.A @ sp.diags(self.c)).tocsr()
        with np.errstate(invalid="ignore"):
            self.row_lo = self.r * lp.row_lo
            self.row_hi = self.r * lp.row_hi

    def cols(self, lo, hi):
        return lo / self.c, hi / self.c


class HighsLP(_Scaled):
    """LP relaxations on HiGHS, warm-started from node to node; returns unscaled (y, x)."""

    def __init__(self, lp: LinearProgram):
        super().__init__(lp)
        import highspy
        self.hs = highspy
        h = _highs()
        for name, v in (("threads", 1), *HIGHS_TOLERANCES.items()):
            h.setOptionValue(name, v)
        inf = highspy.kHighsInf
        lo, hi = self.cols(lp.col_lo, lp.col_hi)
        n = len(lo)
        h.addVars(n, lo, hi)
        A = self.A
        rl = np.where(np.isfinite(self.row_lo), self.row_lo, -inf)
        ru = np.where(np.isfinite(self.row_hi), self.row_hi, inf)
        h.addRows(A.shape[0], rl, ru, A.nnz, A.indptr[:-1].astype(np.int32), A.indices.astype(np.int32),
                  A.data.astype(np.float64))
        self.h = h
        self.n = n
        self.allc = np.arange(n, dtype=np.int32)
        self.ints = lp.binaries.astype(np.int32)
        self.cost_col = None

    def solve(self, c: np.ndarray, lo: np.ndarray, hi: np.ndarray, time_limit: float):
        """(status, y, x, ray): status 'optimal' | 'infeasible' | 'other'; y, x unscaled or None."""
        h, hs = self.h, self.hs
        h.changeColsCost(self.n, self.allc, c * self.c)
        slo, shi = lo[self.ints] / self.c[self.ints], hi[self.ints] / self.c[self.ints]
        if len(self.ints):
            h.changeColsBounds(len(self.ints), self.ints, slo, shi)
        h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
        h.run()
        st = h.getModelStatus()
        sol = h.getSolution()
        y = self.r * np.asarray(sol.row_dual) if sol.dual_valid else None
        x = self.c * np.asarray(sol.col_value) if sol.value_valid else None
        if st == hs.HighsModelStatus.kOptimal:
            return "optimal", y, x, None
        if st == hs.HighsModelStatus.kInfeasible:
            _, has, ray = h.getDualRay()
            return "infeasible", y, None, (self.r * np.asarray(ray) if has else None)
        if st == hs.HighsModelStatus.kTimeLimit:
            return "time_limit", y, x, None
        return "other", y, x, None


class CbcLP(_Scaled):
    """LP relaxations on CBC through pulp (one process per solve); returns unscaled (y, x)."""

    def __init__(self, lp: LinearProgram):
        super().__init__(lp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)     # pulp 3's API, deprecated for pulp 4
            self._build(lp)

    def _build(self, lp: LinearProgram):
        import pulp
        self.pulp = pulp
        lo, hi = self.cols(lp.col_lo, lp.col_hi)
        prob = pulp.LpProblem("window", pulp.LpMinimize)
        vs = [pulp.LpVariable(f"v{j}", lowBound=float(lo[j]), upBound=float(hi[j])) for j in range(len(lo))]
        A = self.A
        self.names = []
        for r in range(A.shape[0]):
            a, z = A.indptr[r], A.indptr[r + 1]
            e = pulp.LpAffineExpression([(vs[int(j)], float(v)) for j, v in zip(A.indices[a:z], A.data[a:z])])
            rl, ru = self.row_lo[r], self.row_hi[r]
            names = []
            if rl == ru:
                prob += (e == float(rl)), f"r{r}"; names.append(f"r{r}")
            else:
                if math.isfinite(rl):
                    prob += (e >= float(rl)), f"r{r}l"; names.append(f"r{r}l")
                if math.isfinite(ru):
                    prob += (e <= float(ru)), f"r{r}u"; names.append(f"r{r}u")
            self.names.append(names)
        self.prob, self.vs = prob, vs

    def solve(self, c: np.ndarray, lo: np.ndarray, hi: np.ndarray, time_limit: float):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)     # PULP_CBC_CMD, constraints as a mapping
            return self._solve(c, lo, hi, time_limit)

    def _solve(self, c: np.ndarray, lo: np.ndarray, hi: np.ndarray, time_limit: float):
        pulp = self.pulp
        sc = c * self.c
        self.prob.setObjective(pulp.LpAffineExpression([(self.vs[j], float(sc[j])) for j in np.nonzero(sc)[0]]))
        slo, shi = self.cols(lo, hi)
        for j in self.lp.binaries:
            self.vs[j].lowBound, self.vs[j].upBound = float(slo[j]), float(shi[j])
        self.prob.solve(pulp.PULP_CBC_CMD(msg=False, threads=1, timeLimit=max(1, int(math.ceil(time_limit)))))
        cons = self.prob.constraints
        y = np.array([sum((cons[nm].pi or 0.0) for nm in names) for names in self.names], dtype=np.float64)
        x = np.array([(v.varValue if v.varValue is not None else np.nan) for v in self.vs], dtype=np.float64)
        st = "optimal" if self.prob.status == pulp.LpStatusOptimal else (
            "infeasible" if self.prob.status == pulp.LpStatusInfeasible else "other")
        return st, self.r * y, self.c * x, None


# ------------------------------------------------------------------------ branch and bound
def bound_target(oracle, lp: LinearProgram, c: np.ndarray, *, lp_only: bool, nodes: int, gap: float,
                 deadline: float) -> tuple[float, dict]:
    """A rigorous lower bound on min c.x over the MIP (``lp_only``: over its LP relaxation).

    Best-first branch and bound over the binaries: a node fixes some of them; its bound is the
    safe bound of its LP relaxation (from the solver's dual at that node), at least its parent's
    (a node's region lies in its parent's), +inf only for a verified Farkas certificate.  Every
    integral point lies in exactly one open node, so the least open bound is a bound on the MIP
    -- whatever the solver returned at each node.  The search expands the open node of least
    bound, branching on its most fractional binary, and stops when that node's LP solution is
    integral (its bound is then the MIP's optimum up to the safe bound's slack), within ``gap``
    (relative, of a heuristic incumbent: an LP solution that was integral), after ``nodes``
    expansions, or at ``deadline`` (perf_counter seconds)."""
    info = {"lps": 0, "not_optimal": 0, "time_limited": 0, "nodes": 0, "infeasible": 0, "verified_empty": 0}
    ints = lp.binaries

    def evaluate(lo, hi, parent):
        st, y, x, ray = oracle.solve(c, lo, hi, max(1e-3, deadline - time.perf_counter()))
        info["lps"] += 1
        if st != "optimal":
            info["not_optimal"] += 1
            info["time_limited"] += st == "time_limit"
        info["infeasible"] += st == "infeasible"
        if st == "infeasible" and ray is not None and proves_infeasible(lp, ray, col_lo=lo, col_hi=hi):
            info["verified_empty"] += 1
            return math.inf, None, None
        b = safe_lower_bound(lp, c, y, col_lo=lo, col_hi=hi) if y is not None else -math.inf
        obj = float(c @ x) if (st == "optimal" and x is not None and np.isfinite(x).all()) else None
        return max(parent, b), (x if st == "optimal" else None), obj

    bound, x, obj = evaluate(lp.col_lo, lp.col_hi, -math.inf)
    if lp_only or len(ints) == 0 or not math.isfinite(bound):
        return bound, info
    heap = [(bound, 0, lp.col_lo, lp.col_hi, x, obj)]
    seq, incumbent = 1, math.inf
    while info["nodes"] < nodes and time.perf_counter() < deadline:
        b, _, lo, hi, x, obj = heap[0]
        if not math.isfinite(b) or x is None:
            break                                   # nothing to branch on at the least bound
        frac = np.abs(x[ints] - np.round(x[ints]))
        free = lo[ints] < hi[ints]
        frac = np.where(free, frac, 0.0)
        j = int(np.argmax(frac))
        if frac[j] <= INT_TOL:
            break                                   # integral at the least bound: the MIP's optimum
        if incumbent < math.inf and incumbent - b <= max(ABS_GAP, gap * abs(incumbent)):
            break
        heapq.heappop(heap)
        info["nodes"] += 1
        col = int(ints[j])
        for v in (0.0, 1.0):
            clo, chi = lo.copy(), hi.copy()
            clo[col] = chi[col] = v
            cb, cx, cobj = evaluate(clo, chi, b)
            if cb == math.inf:
                continue                            # verified empty
            if cx is not None and cobj is not None:
                fr = np.abs(cx[ints] - np.round(cx[ints]))
                if (fr <= INT_TOL).all():
                    incumbent = min(incumbent, cobj)
            heapq.heappush(heap, (cb, seq, clo, chi, cx, cobj))
            seq += 1
        if not heap:
            return math.inf, info                   # every branch verified empty
    return heap[0][0], info
