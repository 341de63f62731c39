"""The relaxed trajectory program P_k(D) of ``certificate=gaplp`` for one radius, built step by
step, and its certified-gap solves (the derivation and the proofs are in certdp/bounds/gaplp.py).

:class:`TrajectoryProgram` holds the linear program over the steps added so far (absolute
coordinates: theta_0 .. theta_t, one substitution weight per record, the hinge activations with
their hull rows, the update rows) in the exact form the proofs use -- every stored float is the
number the proofs speak about -- and mirrors it in a HiGHS instance that is warm-started from
objective to objective and from step to step.  :meth:`TrajectoryProgram.certified_max` returns,
for one linear objective, a rigorous upper bound U (a Neumaier-Shcherbina safe bound from the
solver's row duals, :func:`certdp.bounds.safe_lp.safe_lower_bound`) and the value L of a verified
feasible point (:func:`certdp.bounds.safe_lp.verified_value`), with U - L <= gap or an internal
error; the solver sees a copy whose column bounds are pulled inward (every point it returns then
lies inside the stored bounds) and whose primal is repaired step by step before verification.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from certdp.bounds.safe_lp import HIGHS_TOLERANCES, LinearProgram, _highs, safe_lower_bound, verified_value
from certdp.errors import ConfigError

U = 2.0 ** -53
# slack of every inequality row and of the rows that tie a column to 1 - another (a + abar = 1,
# u + s = 1 for surely active slots), times the row's data-independent magnitude (1 + sum |coef| *
# the bound of its columns): a looser relaxation (sound), the same for D and D' (nested), and room
# for the verification's enclosure of A x at the repaired point, which meets some rows with
# equality in exact arithmetic (u = a when s = 0)
LINK_SLACK = 2.0 ** -40
# the solver's copy: column bounds of theta_t (t >= 1) pulled inward by this fraction of the width
# (plus the absolute part), attempts multiply it by 100
SHRINK = 1e-7
ATTEMPTS = 3


def _up(v):
    return np.nextafter(v, np.inf)


def _down(v):
    return np.nextafter(v, -np.inf)


class TrajectoryProgram:
    """P_k(D) for one radius k over the steps added so far (certdp/bounds/gaplp.py, "The program").

    ``start_lo``/``start_hi`` [P]: the box of theta_0; ``n_records``: window-local records, one
    weight s_r in [0, 1] each with sum_r s_r <= k; ``ghat``: the data-independent bound on a
    substituted slot's gradient coordinate (gamma rounded up); ``eps``: the data-independent slack
    of the update rows (covers the float runs' rounding and the repaired primal's)."""

    def __init__(self, *, start_lo, start_hi, n_records: int, k: int, lam: float, eta: float, ghat: float, eps: float,
                 mag: float):
        self.P = len(start_lo)
        self.mag = float(mag)
        self.lam, self.eta, self.ghat, self.eps = float(lam), float(eta), float(ghat), float(eps)
        self.k = int(k)
        self.col_lo: list[np.ndarray] = []
        self.col_hi: list[np.ndarray] = []
        self.n_cols = 0
        self.rows: list[tuple] = []           # (row starts, indices, values, lo, hi) per block
        self.n_rows = 0
        self.h = _highs()
        for name, v in (("threads", 1), ("presolve", "off"), *HIGHS_TOLERANCES.items()):
            self.h.setOptionValue(name, v)
        self.s = self._cols(np.zeros(n_records), np.ones(n_records))
        kk = float(min(self.k, n_records))
        self._rows([self.s], [np.ones(n_records)], [-math.inf], [kk + LINK_SLACK * (1 + kk)])
        self.theta = [self._cols(np.asarray(start_lo, float), np.asarray(start_hi, float), shrink=False)]
        self.steps: list[dict] = []
        self._lp = None
        self.plant_dual = None        # tests only: a planted solver fault (tests/test_gaplp.py)
        self.solves = 0
        self.retries = 0              # solves whose first attempt left the gap open
        self.worst_gap = 0.0          # the largest certified U - L accepted

    # ---------------------------------------------------------------- building
    def _cols(self, lo, hi, shrink: bool = False) -> np.ndarray:
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        ids = np.arange(self.n_cols, self.n_cols + len(lo))
        self.col_lo.append(lo); self.col_hi.append(hi)
        self.n_cols += len(lo)
        s_lo, s_hi = (lo, hi)
        if shrink:
            # the solver's copy: pulled inward (a point inside the pulled box is inside the stored one)
            d = SHRINK * ((hi - lo) + 1e-3 * (np.abs(lo) + np.abs(hi)) + 1e-12)
            d = np.minimum(d, (hi - lo) / 4)
            s_lo, s_hi = lo + d, hi - d
        self.h.addVars(len(lo), s_lo, s_hi)
        return ids

    def _rows(self, idx: list, val: list, lo: list, hi: list) -> None:
        """Append rows (each ``idx[r]``/``val[r]``); every row is scaled by a power of two (exact)
        so that its largest coefficient is in [1, 2)."""
        inf = 1e300
        starts, ii, vv, L, H = [0], [], [], [], []
        for i, v, l_, h_ in zip(idx, val, lo, hi):
            i = np.asarray(i, np.int64); v = np.asarray(v, float)
            keep = v != 0
            i, v = i[keep], v[keep]
            big = float(np.abs(v).max()) if v.size else 1.0
            f = 2.0 ** (-math.floor(math.log2(big))) if big > 0 and math.isfinite(big) else 1.0
            ii.append(i); vv.append(v * f); L.append(l_ * f); H.append(h_ * f)
            starts.append(starts[-1] + len(i))
        ii = np.concatenate(ii); vv = np.concatenate(vv)
        L, H = np.asarray(L), np.asarray(H)
        self.rows.append((np.asarray(starts, np.int64), ii, vv, L, H))
        self.n_rows += len(L)
        hs_lo = np.where(np.isfinite(L), L, -inf); hs_hi = np.where(np.isfinite(H), H, inf)
        self.h.addRows(len(L), hs_lo, hs_hi, len(ii), np.asarray(starts[:-1], np.int32), ii.astype(np.int32), vv)
        self._lp = None

    def add_step(self, *, w, c, rec, lo, hi, tau_lo, tau_hi, next_lo, next_hi) -> dict:
        """Rows of one training step: ``w`` [b, P] (y x~ of each slot), ``c`` [b, P] (its clipped
        gradient clip(-w) when active), ``rec`` [b] (window-local record ids), ``lo``/``hi`` [b]:
        the margin intervals (nested, certified), ``tau_lo``/``tau_hi`` [b]: the kink band, and the
        box of theta_{t+1}; returns the step's column ids."""
        b, P = w.shape
        th = self.theta[-1]
        inactive = lo >= tau_hi
        active = (hi < tau_lo) & ~inactive
        unc = ~(inactive | active)
        iu = np.nonzero(unc)[0]; ia = np.nonzero(active)[0]
        n_u = len(iu)
        a = self._cols(np.zeros(n_u), np.ones(n_u))
        ab = self._cols(np.zeros(n_u), np.ones(n_u))
        u = self._cols(np.zeros(n_u + len(ia)), np.ones(n_u + len(ia)))
        E = self._cols(np.full(P, -self.ghat * b), np.full(P, self.ghat * b))
        thn = self._cols(next_lo, next_hi, shrink=True)
        # hull rows (certdp/bounds/gaplp.py, "Hull rows"): alpha a + w.theta >= tau_lo,
        # beta abar - w.theta >= -tau_hi, a + abar = 1 (+- LINK_SLACK)
        alpha = np.maximum(0.0, _up(tau_lo - lo))
        beta = np.maximum(0.0, _up(hi - tau_hi))
        # the hull rows' slack: LINK_SLACK times the data-independent magnitude of the margin
        hs = LINK_SLACK * (1.0 + np.abs(w).sum(-1) * self.mag)
        sl = LINK_SLACK
        idx, val, L, H = [], [], [], []
        for q, i in enumerate(iu):
            sc = self.s[rec[i]]
            idx += [np.r_[th, a[q]], np.r_[th, ab[q]], [a[q], ab[q]], [u[q], a[q]], [u[q], sc], [u[q], a[q], sc]]
            val += [np.r_[w[i], alpha[i]], np.r_[-w[i], beta[i]], [1.0, 1.0], [1.0, -1.0], [1.0, 1.0], [1.0, -1.0, 1.0]]
            L += [tau_lo[i] - hs[i], -tau_hi[i] - hs[i], 1.0 - sl, -math.inf, -math.inf, -2 * sl]
            # u + s_r <= 1 has no slack: the nesting argument moves a slot's u_r into the substituted
            # record's E, which has room for exactly 1 - s_r (certdp/bounds/gaplp.py)
            H += [math.inf, math.inf, 1.0 + sl, 2 * sl, 1.0, math.inf]
        for q, i in enumerate(ia):                      # surely active: u = 1 - s
            idx.append([u[n_u + q], self.s[rec[i]]]); val.append([1.0, 1.0])
            L.append(1.0 - LINK_SLACK); H.append(1.0)
        slots = np.r_[iu, ia].astype(np.int64)
        coef = self.eta * c[slots]                     # [n_slots, P]: fl(eta c_ip)
        srec = self.s[rec]
        for p in range(P):
            # |E_p| <= ghat sum_{slots} s_rec; theta_{t+1} = lam theta_t - sum fl(eta c) u - eta E (+- eps)
            idx += [np.r_[E[p], srec], np.r_[E[p], srec], np.r_[thn[p], th[p], E[p], u]]
            val += [np.r_[1.0, np.full(b, -self.ghat)], np.r_[1.0, np.full(b, self.ghat)],
                    np.r_[1.0, -self.lam, self.eta, coef[:, p]]]
            es = sl * (1.0 + self.ghat * b)
            L += [-math.inf, -es, -self.eps]
            H += [es, math.inf, self.eps]
        self._rows(idx, val, L, H)
        step = {"w": w, "c": c, "rec": rec, "iu": iu, "ia": ia, "a": a, "ab": ab, "u": u, "E": E,
                "alpha": alpha, "beta": beta, "tau_lo": tau_lo, "tau_hi": tau_hi, "coef": coef, "slots": slots}
        self.steps.append(step)
        self.theta.append(thn)
        return step

    def lp(self) -> LinearProgram:
        """The stored program as a :class:`LinearProgram` (cached until rows are added)."""
        if self._lp is None:
            starts, ii, vv, L, H = [], [], [], [], []
            off = 0
            for st, i, v, lo, hi in self.rows:
                starts.append(st[:-1] + off); off += st[-1]
                ii.append(i); vv.append(v); L.append(lo); H.append(hi)
            indptr = np.r_[np.concatenate(starts), off].astype(np.int64)
            A = sp.csr_matrix((np.concatenate(vv), np.concatenate(ii), indptr), shape=(self.n_rows, self.n_cols))
            self._lp = LinearProgram(A, np.concatenate(L), np.concatenate(H), np.concatenate(self.col_lo),
                                     np.concatenate(self.col_hi), np.zeros(0, np.int64), self.theta[-1])
        return self._lp

    # ---------------------------------------------------------------- solving
    def _solve(self, cost: np.ndarray, attempt: int):
        import highspy
        h = self.h
        if attempt > 0:
            h.clearSolver()
        h.changeColsCost(self.n_cols, np.arange(self.n_cols, dtype=np.int32), cost)
        h.run()
        ok = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        sol = h.getSolution()
        y = np.asarray(sol.row_dual) if sol.dual_valid else None
        if self.plant_dual is not None and y is not None:
            y = self.plant_dual(y)
        x = np.asarray(sol.col_value) if sol.value_valid else None
        return ok, y, x

    def repair(self, x: np.ndarray) -> np.ndarray:
        """A candidate feasible point near the solver's ``x``: the substitution weights scaled into
        the budget, then step by step every activation clamped into its hull interval at the
        recomputed margin, u into its McCormick interval, E into its budget and theta_{t+1} by the
        update; feasibility is then *verified* (nothing here is trusted)."""
        lp = self.lp()
        z = np.clip(np.nan_to_num(x, nan=0.0), lp.col_lo, lp.col_hi)
        s = z[self.s]
        tot = float(np.sum(s))
        if tot > self.k * (1 - 1e-12):
            s = s * (self.k / tot) * (1 - 1e-12)
        z[self.s] = s
        th = np.clip(z[self.theta[0]], lp.col_lo[self.theta[0]], lp.col_hi[self.theta[0]])
        z[self.theta[0]] = th
        for t, st in enumerate(self.steps):
            iu, ia, w = st["iu"], st["ia"], st["w"]
            m = w[iu] @ th
            err = 4 * (self.P + 2) * U * (np.abs(w[iu]) @ np.abs(th)) + 1e-300
            with np.errstate(divide="ignore", invalid="ignore"):
                lo_a = np.where(st["alpha"][iu] > 0, (st["tau_lo"][iu] - m + err) / st["alpha"][iu], -np.inf)
                hi_a = np.where(st["beta"][iu] > 0, 1 - (m + err - st["tau_hi"][iu]) / st["beta"][iu], np.inf)
            lo_a = np.clip(lo_a, 0.0, 1.0)
            hi_a = np.clip(hi_a, 0.0, 1.0)
            mid = np.minimum(lo_a, hi_a) + 0.5 * np.abs(hi_a - lo_a)
            a = np.where(lo_a <= hi_a, np.clip(z[st["a"]], lo_a, hi_a), mid)
            z[st["a"]] = a
            z[st["ab"]] = 1.0 - a
            sr = s[st["rec"]]
            su = sr[iu]
            # 1 - s rounded down: u + s <= 1 exactly (that row has no slack)
            ulo = np.maximum(0.0, a - su); uhi = np.minimum(a, _down(1.0 - su))
            uu = np.clip(z[st["u"][:len(iu)]], np.minimum(ulo, uhi), uhi)
            ua = np.maximum(0.0, _down(1.0 - sr[ia]))
            z[st["u"]] = np.r_[uu, ua]
            S = float(np.sum(sr))
            cap = self.ghat * S * (1 - 1e-12)
            E = np.clip(z[st["E"]], -cap, cap)
            z[st["E"]] = E
            nxt = self.lam * th - (st["coef"].T @ np.r_[uu, ua] + self.eta * E)
            nid = self.theta[t + 1]
            nxt = np.clip(nxt, lp.col_lo[nid], lp.col_hi[nid])
            z[nid] = nxt
            th = nxt
        return z

    def certified_max(self, cols: np.ndarray, coefs: np.ndarray, *, gap: float, _accept_any=False) -> tuple[float, float, dict]:
        """(U, L): U >= max c.x over the stored program (rigorous), L <= c.x at a verified feasible
        point, U - L <= ``gap`` (else retried; after :data:`ATTEMPTS` an internal error: the
        program is feasible and bounded by construction).  c has ``coefs`` on ``cols``."""
        global SHRINK
        lp = self.lp()
        c = np.zeros(self.n_cols)
        c[cols] = coefs
        info = {"attempts": 0}
        best_u, best_l = math.inf, -math.inf
        for attempt in range(ATTEMPTS):
            info["attempts"] = attempt + 1
            ok, y, x = self._solve(-c, attempt)
            if y is not None:
                best_u = min(best_u, -safe_lower_bound(lp, -c, y))
            if x is not None:
                v = verified_value(lp, self.repair(x), c)
                if v is not None:
                    best_l = max(best_l, v)
            if _accept_any or best_u <= _down(best_l + gap):
                self.solves += 1
                self.retries += attempt > 0
                self.worst_gap = max(self.worst_gap, best_u - best_l)
                return best_u, best_l, info
        raise ConfigError("certificate.name", f"internal error: the gaplp program's certified gap stayed open "
                          f"({best_u - best_l:.3g} > {gap:g}) after {ATTEMPTS} solves of a feasible, bounded LP (a "
                          f"solver failure, not a property of the data); allowed: another certificate")
