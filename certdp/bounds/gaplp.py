"""Relaxations of the whole trajectory solved to a certified gap, with a ramp in the radius index
(``certificate=gaplp``): a certificate for the linear hinge head that nests by construction.

Scope: single-layer hinge classifiers (labels +-1, P = d + 1), clipped (S)GD with a fixed batch plan
(mini-batch or full batch), one window = the whole run (or the AGS release window).

The program P_k(D)
------------------
For a radius k, P_k(D) is a polytope in absolute coordinates (no reference run):

* theta_0 in the window's start box; theta_t (t >= 1) in the IBP per-epoch ledger's box X_t of the
  same radius (certdp/agt.py: it contains theta'_t of every D' within k, and X_t(D; k_j) lies in
  X_t(D'; k_{j+1}) for neighbours, by that module's proof and graded widening);
* one weight s_r in [0, 1] per record of the window, sum_r s_r <= k (a dataset within k
  substitutions: s = the indicator of its substituted set);
* slot i of step t (record r, w = y_r x~_r, c = clip(-w, -gamma, gamma), margin m = w . theta_t,
  kink band [tau_lo, tau_hi] = [1 - delta, 1 + delta] rounded outward, delta >= |fl(margin) -
  m| of the float run, milp_window.gradient_slack at a data-independent magnitude), with a
  margin interval [mL, mU] (below): surely inactive (mL >= tau_hi) slots add nothing, surely
  active ones (mU < tau_lo) add u c with 1 - s_r - 2^-40 <= u <= 1 - s_r, uncertain ones have
  columns a, abar, u in [0, 1] and the **hull rows**

      alpha a + w.theta_t >= tau_lo,   beta abar - w.theta_t >= -tau_hi,   a + abar = 1 (+- 2^-40),
      alpha = max(0, up(tau_lo - mL)),  beta = max(0, up(mU - tau_hi)),

  i.e. a >= (tau_lo - m)/alpha and a <= 1 - (m - tau_hi)/beta: the convex hull of the step
  1[m < 1] over [mL, mU] with the kink anywhere in the band (the float run's activation is
  1[fl(m) < 1]: 1 only where m < tau_hi, 0 only where m >= tau_lo), and McCormick's rows of
  u = a (1 - s_r): u <= a, u <= 1 - s_r, u >= a - s_r.  Every row but u + s_r <= 1 carries a
  data-independent slack (2^-40 times the row's data-independent magnitude: looser, so sound, and
  the same for D and D'), which leaves room for the verification of a repaired primal; u + s_r
  <= 1 has none, because the nesting argument below spends exactly 1 - s_r (the verification
  decides such rows in exact rationals);
* E_t in [-ghat S_t, ghat S_t]^P, S_t = sum_{slots of t} s_rec, ghat = gamma (1 + 4u): the
  substituted slots' clipped gradients;
* the update rows  |theta_{t+1} - lam theta_t + sum_i fl(eta c_i) u_i + eta E_t| <= eps  (per
  coordinate), eta = lr / b, eps a data-independent bound on the float run's and the repaired
  primal's rounding.

Soundness: every float run theta'' of every D'' within k of D is a point of P_k(D) (s = its
substituted set; a = the run's activation, u = a (1 - s); E_t = the sum of the substituted
slots' clipped gradients, |E_t,p| <= gamma * #substituted <= ghat S_t; the residual of the update
row is the run's rounding plus |fl(eta c) - eta c| u, within eps), as long as every margin interval
contains the margins of P_k(D)'s points (by construction below).  So max / min of theta_T,p over
P_k(D) bound T_k.

Nesting of the programs.  Let D ~ D' differ at record r and j be the index of radius k_j among the
computed radii (0 = k_0 < k_1 < ...).  If every margin interval of a record common to D and D'
satisfies I_{t,i}(D; j) inside I_{t,i}(D'; j+1) wherever D's slot is uncertain, then
P_{k_j}(D) lies in P_{k_{j+1}}(D') (as sets of (theta, s, a, ...) with D''s substituted record's
columns re-assigned):

* common records: the hull rows are monotone in the interval (alpha and beta grow as the interval
  grows and a, abar >= 0; up() is monotone), the kink band and coefficients are the same floats;
  a slot surely decided in D satisfies the exact step relation at every point of P_k(D), which
  lies in any sound relaxation of D' (its interval contains the point's margin, by induction);
* the differing record r: put s'_r = 1 (budget k_j + 1 <= k_{j+1}), u'_r = 0 and move D's slot
  term fl(eta c_r) u_r into E': |E'_p| <= ghat sum_{other} s + ghat s_r + |fl(eta c_rp)| u_r / eta
  <= ghat (sum_{other} s + 1) = ghat S'_t (plus the same slack on both sides) because u_r + s_r
  <= 1 holds exactly and |fl(eta c)| / eta <= ghat; the budget row's slack 2^-40 (1 + k) grows
  with k;
  a'_r exists in its hull at the point's margin since D''s interval for x'_r contains the margins
  of P_{k_{j+1}}(D'), which contains P_{k_j}(D)'s points (induction over the steps);
* the boxes X_t nest (ledger), the start boxes nest (AGT), budget, eps, ghat and LINK_SLACK are
  data-independent.

Hence F_j(D) := max c.theta_T over P_{k_j}(D) <= F_{j+1}(D') for every objective c.

The lemma (certified gap and ramp).  A solve returns U >= F (a safe Neumaier-Shcherbina bound from
the solver's duals: rigorous whatever the solver returned) and the value L <= F of a point whose
feasibility is *verified* (column bounds compared exactly, each row's A x enclosed with outward
rounding, c.x rounded down: safe_lp.verified_value; the point is the solver's primal repaired step
by step, gaplp_program.TrajectoryProgram.repair), and is accepted only when U <= down(L + gamma).
Then, with U~_j(D) := up(U_j(D) + gamma j) and exact arithmetic on the stored floats,

    U~_j(D) <= up(F_j(D) + gamma + gamma j) <= up(F_{j+1}(D') + gamma (j + 1)) <= U~_{j+1}(D')

(up() is monotone), so the upper ends nest; lower ends are the mirror (down(L - gamma j)).  The
index j, not the radius, carries the ramp: the staircase (certdp/privacy/sensitivity.py, (N))
needs T_{k_j}(D) inside T_{k_{j+1}}(D'), which this gives for any radii k_j < k_{j+1}
(P_{k_j}(D) lies in the program with budget k_j + 1 <= k_{j+1}).  Radius 0 (index 0) is the
nominal box, whose width (rounding, ~1e-13) is below gamma: T_0(D) holds D's float run, a point
of P_{k_1}(D'), so it lies in [L - gamma, U + gamma] of D' at index 1.  The price is gamma j per
side and coordinate.

Margin intervals (intermediate bounds) nest by the same lemma, by induction over the steps:
J_{t,i} is the range of w . theta over the ledger box X_t (float sums of monotone terms in a
fixed order, widened by the data-independent delta: monotone, sound); at the steps of the
data-independent schedule ``tighten``, a slot uncertain under J gets I = J n [down(L~ - g_i j),
up(U~ + g_i j)] from two certified solves over the program of the steps before t (max first; a
slot whose upper end is already below tau_lo is surely active and needs no lower end); every other
slot keeps J.  Two neighbours tighten the same slots (J nests, so J uncertain in D is uncertain in
D'), and a slot decided in D needs no containment (above), so the condition of the nesting
argument holds at step t given it at the steps before.  The result is intersected with the
ledger's end box (nests) and, in AGT, with the trivial cover, the larger radii and the graded
widening (certdp/agt.py).

What breaks the premises, and is refused or absent: a time limit (a gap left open decides the
bound by the data: ``certificate.time_limit`` is refused at parse time); a schedule of tightened
steps that depends on the data (only ``all``, ``none`` or a period are offered); a gap that
stays open is never accepted: :data:`gaplp_program.ATTEMPTS` re-solves, then an internal error
(a simplex solver finishes a feasible, bounded LP -- D's own run is a point of it and every
column is bounded -- so this is a solver failure, not an outcome the data can choose in exact
arithmetic).

Cost: the program of radius k over T steps has ~ 3 T b columns; the schedule ``all`` solves
~2 uncertain slots per step (warm-started HiGHS) plus 2P final objectives; measured frontier in
docs/certificates.md (``benchmarks/gaplp_frontier.py``).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from certdp.bounds.base import Certificate
from certdp.bounds.gaplp_program import TrajectoryProgram, _down, _up
from certdp.bounds.ibp import IBP, gradient_bounds
from certdp.bounds.interval import Interval, outward
from certdp.bounds.milp_window import gradient_slack, update_slack
from certdp.errors import ConfigError
from certdp.losses import Hinge

log = logging.getLogger("certdp")
_ROW = None            # the row function a forked worker runs (set around the pool only)


def _call_row(task):
    q, j = task
    try:
        return _ROW(q, j)
    except ConfigError as e:                            # not picklable: sent back as its parts
        return ("error", e.key, e.message, None)


def _schedule(v):
    if v in ("all", "none"):
        return v
    try:
        n = None if isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        n = None
    if n is None or n < 1 or str(n) != str(v).strip():
        raise ConfigError("certificate.tighten", f"must be all, none or a period >= 1 (got {v!r}); allowed: all, "
                                                 f"none, an integer n (steps t with t % n == 0)")
    return n


def _gap(v, key):
    try:
        g = None if isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        g = None
    if g is None or not (1e-9 <= g < math.inf):
        raise ConfigError(key, f"must be a number >= 1e-9 (got {v!r}); allowed: a certified gap such as 1e-3")
    return g


class GapLP(Certificate):
    """``certificate=gaplp``: the whole-trajectory relaxation solved to a certified gap with a
    ramp in the radius index (module docstring).  Options: ``gap`` (gamma of the final bounds),
    ``gap_intermediate`` (gamma of the margin intervals), ``tighten`` (steps whose uncertain margins
    are tightened: all | none | a period n), ``time_limit`` (refused: null only), ``workers``
    (processes solving the radii, 1 or 2: the same bounds either way)."""

    name = "gaplp"
    options = ("gap", "gap_intermediate", "tighten", "time_limit", "workers")
    scope = "single-layer hinge classifiers"
    devices = ("cpu",)
    device_note = "its programs are solved by HiGHS, a CPU solver"
    window_steps = 10 ** 9
    window_budget = True
    nesting_monotone = True

    def __init__(self, *, gap=1e-4, gap_intermediate=1e-4, tighten="all", time_limit=None, workers=1):
        if time_limit is not None:
            raise ConfigError("certificate.time_limit", "a time limit can leave a gap open, and the bound would then "
                              "depend on where the solve on the private data stopped (no nesting); allowed: null "
                              "(every solve runs to its certified gap)")
        self.gap = _gap(gap, "certificate.gap")
        self.gap_intermediate = _gap(gap_intermediate, "certificate.gap_intermediate")
        self.tighten = _schedule(tighten)
        try:
            self.workers = None if isinstance(workers, bool) else int(workers)
        except (TypeError, ValueError):
            self.workers = None
        if self.workers not in (1, 2) or str(self.workers) != str(workers).strip():
            raise ConfigError("certificate.workers", f"must be 1 or 2 (got {workers!r}); allowed: 1, 2 (processes "
                                                     f"solving the radii)")
        self.stats: list[dict] = []
        self._plant = {}          # tests only: planted faults (tests/test_gaplp.py)

    @classmethod
    def supports(cls, model) -> bool:
        return model.n_layers == 1 and model.widths[-1] == 1 and isinstance(model.loss, Hinge)

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def _tightened(self, t: int) -> bool:
        if self.tighten == "all":
            return t >= 1
        if self.tighten == "none":
            return False
        return t >= 1 and t % self.tighten == 0

    def _bound(self, prog: TrajectoryProgram, cols, coefs, gap: float, j: int) -> float:
        """up(U + gap j): the ramped certified upper bound of coefs . x[cols] over ``prog`` at the
        radius index j (module docstring, the lemma)."""
        U, L, _ = prog.certified_max(cols, np.asarray(coefs, float), gap=gap,
                                     _accept_any=self._plant.get("accept_gap", False))
        if "slop" in self._plant:
            # tests: any U in [U, down(L + gap)] is what a certified solve may return
            U = self._plant["slop"](U, L, gap)
        ramp = 0.0 if self._plant.get("no_ramp") else gap * j
        return float(_up(U + ramp))

    def window_bounds(self, model, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *, plan: torch.Tensor, steps,
                      ks: torch.Tensor, settings, magnitude: float | None = None, step_boxes=None) -> Interval:
        steps = list(steps)
        n, b = x.shape[0], plan.shape[1]
        full = b == n
        F, P = len(steps), model.n_params
        lam, lr, g = float(settings.contraction), float(settings.lr), float(settings.clip)
        eta = lr / b
        # a data-independent bound on |theta| over the window (the cover's, or the start's plus F steps)
        start_mag = float(torch.maximum(boxes.lo.abs(), boxes.hi.abs()).max())
        mag = ((magnitude + lr * g * F) / lam ** F) if magnitude is not None else start_mag + lr * g * F
        lo0, hi0 = boxes.lo[0].clone(), boxes.hi[0].clone()
        nominal = IBP(substitutions="per_batch")
        for t in steps:                                    # radius 0: the nominal box (rounding width)
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            nb = nominal.step_bounds(model, Interval(lo0.unsqueeze(0), hi0.unsqueeze(0)), xb, yb,
                                     subs=torch.zeros(1, dtype=torch.long), settings=settings)
            nb = outward(nb, rel=1e-12, abs_=1e-14)
            lo0, hi0 = nb.lo[0], nb.hi[0]
        lo = torch.empty_like(boxes.lo); hi = torch.empty_like(boxes.hi)
        lo[0], hi[0] = lo0, hi0
        pos = (ks >= 1).nonzero().flatten()
        if not len(pos):
            return Interval(lo, hi)
        if step_boxes is None:
            raise ValueError("gaplp's window_bounds needs AGT's step_boxes callback (certdp.agt.run_agt)")
        ref = (boxes.lo[0] + boxes.hi[0]) / 2
        env, trace = step_boxes(engine=IBP(substitutions="per_epoch"), ref=ref, ks=ks[pos].tolist(),
                                start_box=Interval(boxes.lo[pos], boxes.hi[pos]), steps=range(steps[0], steps[-1] + 1))
        idx = torch.stack([torch.arange(n) if full else plan[t] for t in steps])          # [F, b]
        uniq, rec = torch.unique(idx, return_inverse=True)
        xt = torch.cat([x, torch.ones(n, 1, dtype=x.dtype)], 1)
        yy = model.loss.labels(y).to(x.dtype)
        W = (yy.unsqueeze(-1) * xt).numpy()                                                 # [n, P]: y x~
        C = np.clip(-W, -g, g)
        magv = np.full(P, mag)
        delta = np.array([gradient_slack(scale=1.0, x=W[i], mag=magv, y=0.0) for i in range(n)])
        # the gaps are relative to a data-independent scale of each objective (the same for D and D'):
        # 1 + |w|_1 M for the margin of a record, 1 + M for a coordinate of theta_T
        gscale = 1.0 + np.abs(W).sum(-1) * mag
        fscale = 1.0 + mag
        tau_lo = _down(1.0 - delta)
        tau_hi = _up(1.0 + delta)
        ghat = float(_up(g * (1 + 4 * 2.0 ** -53)))
        eps = 4.0 * update_slack(b=2 * b + P, lr=lr, clip=g * (b + 2), magnitude=mag) + 1e-300
        def row(q: int, j: int):
            t0 = time.process_time()
            prog = TrajectoryProgram(start_lo=boxes.lo[j].numpy(), start_hi=boxes.hi[j].numpy(), n_records=len(uniq),
                                     k=int(ks[j]), lam=lam, eta=eta, ghat=ghat, eps=eps, mag=mag)
            prog.plant_dual = self._plant.get("dual")
            n_tight = 0
            for local, t in enumerate(steps):
                ids = idx[local].numpy()
                w = W[ids]
                blo, bhi = trace[local][0][q].numpy(), trace[local][1][q].numpy()
                mL = _down(np.sum(np.minimum(w * blo, w * bhi), -1) - delta[ids])
                mU = _up(np.sum(np.maximum(w * blo, w * bhi), -1) + delta[ids])
                tl, th = tau_lo[ids], tau_hi[ids]
                if self._tightened(local):
                    th_cols = prog.theta[-1]
                    # upper ends first, then the lower ends of the slots still uncertain; each pass
                    # ordered by label, so that consecutive objectives are alike (warm starts)
                    todo = np.nonzero(~((mL >= th) | (mU < tl)))[0]
                    todo = todo[np.argsort(np.sign(w[todo, -1]), kind="stable")]
                    for i in todo:
                        mU[i] = min(mU[i], self._bound(prog, th_cols, w[i], self.gap_intermediate * gscale[ids[i]], j))
                        n_tight += 1
                    for i in todo:
                        if mU[i] >= tl[i]:
                            mL[i] = max(mL[i], -self._bound(prog, th_cols, -w[i], self.gap_intermediate * gscale[ids[i]],
                                                            j))
                            n_tight += 1
                    if "loosen" in self._plant:
                        mL, mU = self._plant["loosen"](local, j, mL, mU)
                if (local + 1) % 20 == 0:
                    log.info("gaplp radius %d: %d of %d steps, %d margin solves, %d columns, %.1f s CPU", int(ks[j]),
                             local + 1, F, n_tight, prog.n_cols, time.process_time() - t0)
                nlo, nhi = (trace[local + 1] if local + 1 < F else (env.lo, env.hi))
                prog.add_step(w=w, c=C[ids], rec=rec[local].numpy(), lo=mL, hi=mU, tau_lo=tl, tau_hi=th,
                              next_lo=nlo[q].numpy(), next_hi=nhi[q].numpy())
            thT = prog.theta[-1]
            out_lo, out_hi = env.lo[q].clone(), env.hi[q].clone()
            for p in range(P):
                out_hi[p] = min(float(out_hi[p]), self._bound(prog, thT[p:p + 1], np.ones(1), self.gap * fscale, j))
                out_lo[p] = max(float(out_lo[p]), -self._bound(prog, thT[p:p + 1], -np.ones(1), self.gap * fscale, j))
            if bool((out_lo > out_hi).any()):
                raise ConfigError("certificate.name", f"internal error: the gaplp bounds of radius {int(ks[j])} cross "
                                  f"the ledger box, which no sound engine allows; allowed: another certificate")
            st = {"window_start": steps[0], "k": int(ks[j]), "index": j, "tightened": n_tight, "columns": prog.n_cols,
                  "rows": prog.n_rows, "solves": prog.solves, "retries": prog.retries, "worst_gap": prog.worst_gap,
                  "cpu_s": time.process_time() - t0}
            log.info("gaplp radius %d (index %d): %d margin solves, %d columns, %.1f s CPU", int(ks[j]), j, n_tight,
                     prog.n_cols, time.process_time() - t0)
            return out_lo, out_hi, st

        # the radii are independent programs: one after the other, or in ``workers`` processes
        tasks = list(enumerate(pos.tolist()))
        if self.workers > 1 and len(tasks) > 1:
            global _ROW
            _ROW = row
            try:
                with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("fork")) as ex:
                    res = list(ex.map(_call_row, tasks))
            finally:
                _ROW = None
        else:
            res = [row(q, j) for q, j in tasks]
        for (q, j), r in zip(tasks, res):
            if isinstance(r[0], str):                       # a refusal inside a worker process
                raise ConfigError(r[1], r[2])
            lo[j], hi[j] = r[0], r[1]
            self.stats.append(r[2])
        return Interval(lo, hi)
