"""The per-epoch ledger of AGT (step engines, :meth:`Certificate.ledger_step_bounds`).

Per-epoch substitution budget (``certificate.substitutions=per_epoch``, the default)
----------------------------------------------------------------------------------
The per-batch step of :mod:`certdp.agt` lets *every* batch hold k substituted records.  certdp's batch plan
(:func:`certdp.training.batch_plan`) cuts each epoch's permutation into E = floor(N / b)
consecutive batches (tail dropped), so an index occupies at most one slot per epoch: for D' with
substituted index set S (|S| <= k) and n_t = |B_t n S|,

    sum_{t in epoch} n_t <= k,    0 <= n_t <= min(k, b).                              (budget)

(:func:`epoch_length` checks this on the plan actually used; a plan without it is certified per
batch.)  The *ledger* uses it at per-batch cost.  Let g_i be the clipped gradient of D's record i,
s_i in [-gamma, gamma]^P that of the record D' puts in its place, eta = lr / b, and theta'_t the
run on D'.  Then exactly

    theta'_{t+1} = lam theta'_t - eta sum_{i in B_t} g_i(theta'_t) + sigma_t,
    sigma_t = eta sum_{i in B_t n S} (g_i(theta'_t) - s_i),   |sigma_t,p| <= n_t rho,  rho = 2 gamma eta.

Split theta'_t = psi_t + S_t with S_t = sum_{t' < t in the current epoch (and window)}
lam^(t-1-t') sigma_t' (the neighbour's substitution deviation so far in this epoch).  Then
psi_{t+1} = lam psi_t - eta sum_{i in B_t} g_i(theta'_t): *no* substitution term, every slot's
*original* record.  By (budget) and 0 < lam <= 1, |S_t,p| <= rho sum_t' n_t' lam^(t-1-t') <= k rho,
so S_t lies in [-L_t, L_t] with the data-independent half-width

    L_t(k) = k rho  once the epoch has had a step (s >= 1),   L_t(k) = 0  at its start (s = 0).

(The exact maximum over allocations, rho sum_{j<s} lam^j min(b, max(0, k - j b)), is smaller
only early in an epoch for k > b or with lam < 1; its increments in k can vanish, which the
nesting argument below cannot afford, so k rho is used.)  So the engine keeps, per radius, a box B_t
containing psi_t for every D' within k, and one step is

    X_t = (B_t +- L_t(k)) n C_t                          (contains theta'_t),
    B_{t+1} = lam B_t - eta [ sum_i u_i(X_t), sum_i l_i(X_t) ]   (plain sums over all b records,
                                                                no top-k, no k*gamma),

[l_i, u_i] the engine's clipped-gradient bounds of record i over X_t (engines may bound the map
psi, theta -> lam psi - eta sum g(theta) jointly: ``Certificate.ledger_step_bounds``).  C_t is the
data-independent cover lam^m [start] +- lr gamma sum_{j<m} lam^j (m steps after the start) that
contains every run of the algorithm on any data.  At an epoch boundary (and at the end)
S is folded into the box: B <- (B +- L) n C, and the ledger restarts empty (psi = theta').
Radius 0 is the ledger row with k = 0 (L = 0: the engine's radius-0 step).  Since psi_t depends on D' only
(not on k), the boxes of two radii k < k' both contain psi_t for every D' within k: intersecting
B downwards over the ledger radii (radius 0 apart, as above) is sound.  Radii k >= b E (the budget never binds: every slot
of an epoch may be substituted) get the cover C itself (the per-batch step gives the same box
for k >= b, up to rounding); plans with one batch per epoch (full batch) take the per-batch step,
so full-batch runs are unchanged.

Nesting (privacy/sensitivity.py, condition (N)): for neighbours D ~ D' differing at record r and
every ledger radius k,  B_t(D; k)  is a subset of  B_t(D'; k+1) +- o_t,  o_t = rho lam^age when r
has appeared in the current epoch (age steps ago), else 0.  Induction: L(k+1) = L(k) + rho >=
L(k) + o_t whenever o_t > 0 (then s >= 1), so X(D;k) subset X(D';k+1); (M1) (inclusion-monotone
per-sample bounds, IBP) nests the bounds of every common record, so a step without r maps the
inclusion to itself with o_t shrunk by lam; the step whose batch holds r (o_t = 0 before: r is
used once per epoch) changes one plain-sum term by at most |u_r - u_r'| <= 2 gamma, i.e. the
boxes by eta 2 gamma = rho: o_{t+1} = rho; at a fold B(D;k) +- L(k) subset B(D';k+1) +- L(k) +- o
subset B(D';k+1) +- L(k+1), and o resets with the epoch.
The cover cap, the graded widening (also applied at a fold, whose one addition rounds less than a
step) and the downward intersection are data-independent and monotone; radii >= b E get
the data-independent cover, which contains every capped ledger box (and is the same box for every
D, as the ceiling radius N of condition (C) needs).  So the ledger with IBP (top-k or plain sums) keeps (N) and IBP's
``nesting_monotone`` covers it.
"""

from __future__ import annotations

import torch

from certdp import DTYPE
from certdp.agt.state import LoopState, Pass, even_chunks, intersect_down, resume
from certdp.bounds.interval import Interval
from certdp.training import clipped_step


def ledger_width(ks: torch.Tensor, s: int, *, rho: float) -> torch.Tensor:
    """Half-width [K] of the substitution ledger after ``s`` steps of an epoch (module docstring):
    k * rho for s >= 1, 0 at the epoch's start."""
    return ks.to(DTYPE) * rho if s > 0 else torch.zeros(len(ks), dtype=DTYPE, device=ks.device)


def ledger_loop(ps: Pass, state: LoopState, lp) -> LoopState:
    """The per-epoch ledger (module docstring) over the steps ``ps.order`` from ``state`` (a row per
    entry of ``ps.rows``, radius 0 first); returns the state after the last step and the final
    fold, again with a row per entry of ``ps.rows`` (the rows from an epoch's slots on: the cover)."""
    cert, model, settings, qs, E = ps.cert, ps.model, ps.settings, ps.rows, ps.epoch
    b = ps.b
    rho = 2.0 * settings.clip * settings.lr / b
    n_led = int((qs < b * E).sum())        # rows whose budget binds (qs ascending)
    kl = qs[:n_led]
    wgrade = ps.grade[:n_led]
    state.lo, state.hi = state.lo[:n_led].clone(), state.hi[:n_led].clone()
    keys = ("B_lo", "B_hi")
    first = resume(state, lp, ps.clock, keys=keys, done_steps=lambda f: f)

    def saved():
        return state.saved(keys, with_s=True)

    def slack() -> float:
        return (cert.ledger_slack(model, settings=settings, b=b, k_max=int(kl[-1]), magnitude=state.magnitude())
                if cert.nesting_monotone else 0.0)

    def margin() -> float:
        # outward widening against rounding, relative to a data-independent magnitude (the cover's
        # largest coordinate plus the largest ledger width) that bounds every box: a margin read
        # from the box itself would differ between D and D' by 1e-12 times the ledger offset rho
        return 1e-12 * (state.magnitude() + float(kl[-1]) * rho) + 1e-14

    def fold():
        L = ledger_width(kl, state.s, rho=rho).unsqueeze(-1)
        m = margin()
        wid = wgrade * slack()
        state.lo, state.hi = intersect_down(torch.maximum(state.lo - L - m - wid, state.c_lo),
                                            torch.minimum(state.hi + L + m + wid, state.c_hi))

    n_c = len(qs) - n_led
    it = ps.bar(ps.order[first:], f"AGT[{cert.name}, per-epoch] |K|={len(qs) - 1}")
    for i, t in enumerate(it, start=first):
        if state.s > 0 and t % E == 0:
            fold()
            state.s = 0
        batch = ps.batch(t)
        L = ledger_width(kl, state.s, rho=rho).unsqueeze(-1)
        B_lo, B_hi = state.lo, state.hi
        X = Interval(torch.maximum(B_lo - L, state.c_lo), torch.minimum(B_hi + L, state.c_hi))
        if ps.trace is not None:
            ps.trace.append((torch.cat([X.lo, state.c_lo.expand(n_c, -1)], 0)[1:],
                             torch.cat([X.hi, state.c_hi.expand(n_c, -1)], 0)[1:]))
        shift = L.expand(-1, B_lo.shape[1])
        n_lo, n_hi = torch.empty_like(B_lo), torch.empty_like(B_hi)
        for a, z in even_chunks(n_led, ps.chunk):
            q = cert.ledger_step_bounds(model, Interval(B_lo[a:z], B_hi[a:z]), batch,
                                        domain=Interval(X.lo[a:z], X.hi[a:z]), shift=shift[a:z], settings=settings)
            n_lo[a:z], n_hi[a:z] = q.lo, q.hi
        state.theta = clipped_step(model, state.theta, *batch, settings)
        state.advance_cover(settings)
        m = margin()
        wid = wgrade * slack()
        state.lo, state.hi = intersect_down(n_lo - m - wid, n_hi + m + wid)
        ps.check(cert, state.lo, state.hi, state.theta, step=t)   # B contains psi_t, which is theta_t for D itself
        state.s += 1
        if ps.clock is not None:
            ps.clock.tick()
        if lp is not None:
            lp.tick(i + 1, saved)
    if lp is not None:
        lp.finish(saved)
    fold()
    state.lo = torch.cat([state.lo, state.c_lo.expand(n_c, -1)], 0)
    state.hi = torch.cat([state.hi, state.c_hi.expand(n_c, -1)], 0)
    return state
