"""MILP windows are sound whatever the solver returns (certdp/bounds/milp.py, docs/milp.md).

* the issue's case (linear regression, N = 12, batch 4, record 10 := (-1e6, 0)): both directions
  of containment hold and no box is crossed; the same engine with the solver's raw objective (the
  old behaviour) is caught, by AGT's crossing check and, with that check off, by containment;
* the safe bound is below the exact optimum of badly scaled LPs with known optima, for the
  solver's dual, the exact dual and perturbed duals, and tight at the exact dual; a planted
  bound that trusts the dual (drops the column term) is caught;
* crossings are internal errors (milp.meet, crown._meet, agt.check_boxes), each shown to fire;
* extreme records (1e6 and more, both signs, several indices) at F = 1, 2, 4: retrained
  neighbours lie in T_k(D);
* (an MLP with certificate=milp, and a smooth release with it, are refused in one line before any
  training: tests/test_settings.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import certdp.agt as agt
import certdp.bounds.milp_window as mw
import certdp.bounds.safe_lp as lpb
from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.bounds.crown import _meet
from certdp.bounds.ibp import IBP
from certdp.bounds.interval import Interval
from certdp.bounds.milp import meet
from certdp.data import load_dataset
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train

D = torch.float64


# ----------------------------------------------------------------------------- the issue's case
def _issue_case():
    ds = load_dataset({"name": "linear", "n_train": 12, "n_test": 10}, 0)
    x = torch.as_tensor(ds.x_train, dtype=D)
    y = torch.as_tensor(ds.y_train, dtype=D)
    m = ModelSpec((1, 1), "mse")
    st = TrainSettings(steps=6, lr=0.3, clip=1.0, batch_size=4, seed=0)
    x2, y2 = x.clone(), y.clone()
    x2[10, 0], y2[10] = -1e6, 0.0
    return m, st, batch_plan(12, st), m.init(0), (x, y), (x2, y2)


# radius 6 is where the solver's "optimal" claimed theta_w <= 0.30 on D' (T_1 then crossed after
# the downward intersection)
ISSUE_KS = [1, 6]


def _issue_envelopes():
    m, st, plan, th0, dd, dp = _issue_case()
    out = {}
    for name, (X, Y) in (("D", dd), ("D'", dp)):
        cert = get_certificate("milp", frequency=2, workers=1)
        out[name] = (run_agt(m, th0, (X, Y), st, ISSUE_KS, AGTOptions(certificate=cert, plan=plan, progress=False)),
                     train(m, th0, X, Y, st, plan=plan), cert.stats)
    return out


@pytest.mark.slow
def test_issue_case_is_sound_both_ways_and_uncrossed():
    out = _issue_envelopes()
    (eD, tD, _), (eP, tP, sP) = out["D"], out["D'"]
    assert max(s["max_coef"] for s in sP) > 1e12          # the badly scaled instance is exercised
    for env in (eD, eP):
        assert bool((env.lo <= env.hi).all())
        assert bool(env.contains(env.nominal).all())
    assert bool(eP.contains(tD)[0]), "theta(D) escapes T_1(D')"
    assert bool(eD.contains(tP)[0]), "theta(D') escapes T_1(D)"


def _raw_objective(oracle, lp, c, *, lp_only, nodes, gap, deadline):
    """The planted bug: the solver's own objective (HiGHS's LP optimum and MIP dual bound on the
    unscaled problem, the larger kept), as the engine used before safe bounds."""
    import highspy
    h = lpb._highs()
    for k, v in (("threads", 1), ("primal_feasibility_tolerance", 1e-9), ("dual_feasibility_tolerance", 1e-9),
                 ("mip_feasibility_tolerance", 1e-9), ("mip_rel_gap", 1e-4), ("mip_abs_gap", 1e-10)):
        h.setOptionValue(k, v)
    inf, A, n = highspy.kHighsInf, lp.A, lp.A.shape[1]
    h.addVars(n, lp.col_lo, lp.col_hi)
    h.addRows(A.shape[0], np.where(np.isfinite(lp.row_lo), lp.row_lo, -inf),
              np.where(np.isfinite(lp.row_hi), lp.row_hi, inf), A.nnz, A.indptr[:-1].astype(np.int32),
              A.indices.astype(np.int32), A.data)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), c)
    h.run()
    v = float(h.getInfo().objective_function_value)
    h.clearSolver()
    ints = lp.binaries.astype(np.int32)
    h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
    h.run()
    v = max(v, float(h.getInfo().mip_dual_bound))
    return (v if math.isfinite(v) else -math.inf), {k: 0 for k in ("lps", "nodes", "not_optimal", "time_limited",
                                                                  "infeasible", "verified_empty")}


@pytest.mark.slow
def test_raw_solver_objective_is_caught(monkeypatch):
    """The same engine trusting the solver's objective: AGT's crossing check refuses the run, and
    with that check switched off the containment check above fails."""
    monkeypatch.setattr(mw, "bound_target", _raw_objective)
    with pytest.raises(ConfigError, match="internal error"):
        _issue_envelopes()
    monkeypatch.setattr(agt, "check_boxes", lambda *a, **k: None)
    out = _issue_envelopes()
    (eD, tD, _), (eP, tP, _) = out["D"], out["D'"]
    sound = bool((eP.lo <= eP.hi).all()) and bool(eP.contains(tD)[0]) and bool(eD.contains(tP)[0])
    assert not sound, "the planted raw objective was not caught"


# ----------------------------------------------------------------------------- safe bounds on LPs
def _known_lp(seed: int):
    """A badly scaled LP (rows by 2^-30..2^40, columns by 2^-30..2^30: exact) whose optimum is known
    exactly: integer data built from an optimal primal-dual pair (x*, y*, reduced costs z*) that
    satisfies the KKT conditions exactly.  Returns (lp, y*, the optimum as a Fraction)."""
    rng = np.random.default_rng(seed)
    m, n = 6, 8
    A = rng.integers(-5, 6, size=(m, n)).astype(np.float64)
    lo, hi = np.full(n, -10.0), np.full(n, 10.0)
    xs = rng.integers(-9, 10, size=n).astype(np.float64)
    at = rng.integers(0, 3, size=n)                       # 0 interior, 1 at lower, 2 at upper bound
    xs[at == 1], xs[at == 2] = lo[at == 1], hi[at == 2]
    z = np.where(at == 1, rng.integers(1, 4, n), np.where(at == 2, -rng.integers(1, 4, n), 0)).astype(np.float64)
    ys = np.zeros(m)
    ys[:4] = rng.choice([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], size=4)
    act = A @ xs
    row_lo = np.where(ys > 0, act, np.where(ys < 0, -np.inf, act - 7.0))
    row_hi = np.where(ys < 0, act, np.where(ys > 0, np.inf, act + 7.0))
    c = A.T @ ys + z
    opt = sum(Fraction(float(ci)) * Fraction(float(xi)) for ci, xi in zip(c, xs))
    er = 2.0 ** rng.choice([-30, 0, 20, 40], size=m)
    ec = 2.0 ** rng.choice([-30, 0, 30], size=n)
    As = (er[:, None] * A) * ec[None, :]                  # x = ec * x', rows scaled by er: exact
    lp = lpb.LinearProgram(sp.csr_matrix(As), er * row_lo, er * row_hi, lo / ec, hi / ec,
                          np.zeros(0, np.int64), np.arange(n, dtype=np.int64))
    return lp, c * ec, ys / er, opt


@pytest.mark.parametrize("seed", range(6))
def test_safe_bound_is_below_known_optima_for_any_dual(seed):
    lp, c, ys, opt = _known_lp(seed)
    # the exact dual: the bound is the optimum up to its outward rounding
    b = lpb.safe_lower_bound(lp, c, ys)
    assert Fraction(b) <= opt and b >= float(opt) - 1e-6 * (1 + abs(float(opt)))
    # the solver's dual (scaled, solved, mapped back): valid and tight
    st, y, x, _ = lpb.HighsLP(lp).solve(c, lp.col_lo, lp.col_hi, 10.0)
    assert st == "optimal"
    b = lpb.safe_lower_bound(lp, c, y)
    assert Fraction(b) <= opt and b >= float(opt) - 1e-6 * (1 + abs(float(opt)))
    # any other multipliers: still a bound (perturbed, flipped, garbage, none)
    gen = np.random.default_rng(100 + seed)
    for scale in (1e-12, 1e-6, 1e-2, 1.0, 1e3):
        yp = y + scale * np.abs(y).max() * gen.standard_normal(y.shape)
        assert Fraction(lpb.safe_lower_bound(lp, c, yp)) <= opt
    for yp in (-y, y * 1e30, np.full_like(y, np.nan), None):
        v = lpb.safe_lower_bound(lp, c, yp)
        assert v == -math.inf or Fraction(v) <= opt


def test_a_planted_dual_objective_without_the_column_term_is_caught():
    """Trusting the multipliers to be dual feasible (dropping the sum over columns of
    min (c - A^T y)_j x_j, i.e. the column bounds' reduced costs) is not a bound: the check above
    sees it exceed the optimum on LPs whose optimum sits at column bounds."""
    caught = 0
    for seed in range(6):
        lp, c, ys, opt = _known_lp(seed)
        zero = np.zeros(lp.A.shape[1])
        v = lpb.safe_lower_bound(lp, c, ys, col_lo=zero, col_hi=zero)     # the column term vanishes
        caught += math.isfinite(v) and Fraction(v) > opt
    assert caught >= 3


def test_verified_infeasibility_and_branch_and_bound_reach_the_mip_optimum():
    """A tiny MIP: min -x1 - x2 s.t. x1 + x2 <= 1.5, binaries: LP bound -1.5, MIP optimum -1; the
    branch and bound closes the gap, and a node with x1 = x2 = 1 is dropped only by a verified
    Farkas certificate."""
    A = sp.csr_matrix(np.array([[1.0, 1.0]]))
    lp = lpb.LinearProgram(A, np.array([-np.inf]), np.array([1.5]), np.zeros(2), np.ones(2),
                          np.array([0, 1]), np.array([0, 1]))
    c = np.array([-1.0, -1.0])
    oracle = lpb.HighsLP(lp)
    root, _ = lpb.bound_target(oracle, lp, c, lp_only=True, nodes=0, gap=0.0, deadline=math.inf)
    assert -1.5 - 1e-9 <= root <= -1.5 + 1e-9
    full, info = lpb.bound_target(oracle, lp, c, lp_only=False, nodes=10, gap=0.0, deadline=math.inf)
    assert -1.0 - 1e-9 <= full <= -1.0 and info["nodes"] >= 1
    st, y, x, ray = oracle.solve(c, np.ones(2), np.ones(2), 10.0)
    assert st == "infeasible" and ray is not None and lpb.proves_infeasible(lp, ray, col_lo=np.ones(2), col_hi=np.ones(2))
    assert not lpb.proves_infeasible(lp, ray, col_lo=np.zeros(2), col_hi=np.ones(2))


# ----------------------------------------------------------------------------- crossings
def test_crossings_are_internal_errors():
    a = torch.tensor([0.0, 1.0], dtype=D)
    lo, hi = meet(a, a + 1, a + 0.5, a + 2, what="x")
    assert torch.equal(lo, a + 0.5) and torch.equal(hi, a + 1)
    with pytest.raises(ConfigError, match="internal error"):
        meet(a, a + 1, a + 1.5, a + 2, what="x")
    st = TrainSettings(steps=1, lr=0.1, clip=1.0)
    mag = torch.ones(1, 1, dtype=D)
    lo, hi = _meet(torch.tensor([[1.0 + 1e-14]], dtype=D), torch.tensor([[1.0]], dtype=D), mag, st)
    assert bool((lo <= hi).all())                       # rounding-level: kept, in order
    with pytest.raises(ConfigError, match="internal error"):
        _meet(torch.tensor([[1.1]], dtype=D), torch.tensor([[1.0]], dtype=D), mag, st)


class _Shifted(IBP):
    """A planted unsound engine: the IBP step moved by 1 (it excludes the nominal run)."""

    name = "shifted"

    def step_bounds(self, model, boxes, batch, *, subs, src=None, settings):
        nb = super().step_bounds(model, boxes, batch, subs=subs, src=src, settings=settings)
        return Interval(nb.lo + 1.0, nb.hi + 1.0)


def test_agt_refuses_a_box_that_excludes_the_nominal():
    m = ModelSpec((1, 1), "mse")
    x = torch.rand(8, 1, generator=torch.Generator().manual_seed(0), dtype=D)
    y = 2 * x[:, 0]
    st = TrainSettings(steps=3, lr=0.1, clip=1.0, batch_size=4)
    run_agt(m, m.init(0), (x, y), st, [1, 2], AGTOptions(certificate=IBP(substitutions="per_batch"), progress=False))
    with pytest.raises(ConfigError, match="internal error"):
        run_agt(m, m.init(0), (x, y), st, [1, 2],
                AGTOptions(certificate=_Shifted(substitutions="per_batch"), progress=False))


# ----------------------------------------------------------------------------- extreme records
@pytest.mark.parametrize("F", [1, 2, 4])
def test_extreme_records_stay_inside(F):
    """D with records of 1e6 and -1e8 at two indices; neighbours put +-1e6..1e9 (and moderate
    records) at the most-used, a random and the extreme indices: every retrained neighbour lies in
    T_k(D), every box is ordered and holds the nominal."""
    gen = torch.Generator().manual_seed(F)
    n = 12
    x = torch.rand(n, 1, generator=gen, dtype=D) * 2 - 1
    y = 2 * x[:, 0] + 1
    x[3, 0], y[3] = 1e6, -5.0
    x[7, 0], y[7] = -1e8, 1e3
    m = ModelSpec((1, 1), "mse")
    st = TrainSettings(steps=4, lr=0.3, clip=1.0, batch_size=4, seed=F)
    plan = batch_plan(n, st)
    th0 = m.init(0)
    ks = [1, 2]
    env = run_agt(m, th0, (x, y), st, ks,
                  AGTOptions(certificate=get_certificate("milp", frequency=F, workers=1, nodes=16),
                             plan=plan, progress=False))
    assert bool((env.lo <= env.hi).all()) and bool(env.contains(env.nominal).all())
    used = int(torch.bincount(plan.reshape(-1), minlength=n).argmax())
    recs = [(s * v, s * w) for v in (1e6, 1e7, 1e9) for w in (0.0, 1e6) for s in (1.0, -1.0)] + [(0.5, 40.0), (3.0, -2.0)]
    X, Y, dist = [], [], []
    for xv, yv in recs:
        for idx in ([used], [int(torch.randint(0, n, (1,), generator=gen))], [3], [3, 7], [used, 7]):
            Xr, Yr = x.clone(), y.clone()
            Xr[idx, 0], Yr[idx] = xv, yv
            X.append(Xr), Y.append(Yr), dist.append(len(set(idx)))
    X, Y, dist = torch.stack(X), torch.stack(Y), torch.tensor(dist)
    th = train(m, th0.expand(len(X), -1), X, Y, st, plan=plan)
    inside = env.contains(th)                                     # [R, K]
    assert bool(inside[dist <= 1, 0].all()) and bool(inside[:, 1].all())
