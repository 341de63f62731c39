"""Abstract Gradient Training: sound parameter envelopes T_k for every radius k in one pass.

For a fixed batch plan, a dataset D' with d(D, D') <= k (substitutions) changes at most
min(k, b) of the b records of any batch.  With per-sample clipped-gradient intervals
[l_i, u_i] (valid for every parameter in the current box T_k), the batch sum of D' lies in

    [ SEMin_{b-k}(l) - k*gamma ,  SEMax_{b-k}(u) + k*gamma ]                 (k < b)

where SEMin_{b-k} is the sum of the b-k smallest lower bounds (= sum(l) - top_k(l)) and
SEMax_{b-k} the sum of the b-k largest upper bounds (= sum(u) - bottom_k(u)): the k substituted
records contribute clipped gradients in [-gamma, gamma] and the retained ones at least their
lower bounds.  Taking k' < k substitutions in a batch only raises the lower end (each extra
removal drops a value >= -gamma and adds -gamma), so k is the worst case.  The step
theta <- lam*theta - lr/b * sum then gives

    lo' = lam*lo - lr/b * SumU,     hi' = lam*hi - lr/b * SumL.

(:mod:`certdp.bounds.aggregate`; engines may bound the step jointly instead, see
:mod:`certdp.bounds.base`.)  All radii share one pass: boxes carry a leading axis and every step
is one ``step_bounds`` call per chunk of radii, box i paired with radius r_i (``src=None``);
window engines (``window_steps`` = F) certify F steps at once with ``window_bounds``.

What AGT adds to the engine's step, and why (the smoothness proof, certdp/privacy/sensitivity.py,
needs T_{r_i}(D) inside T_{r_{i+1}}(D') for neighbours, for the *floating-point* boxes):

* Radius 0.  Row 0 is the radius-0 query (``subs = 0``) started at the point theta_init: the
  engine's own bound on the nominal step, a box of rounding width.  The returned nominal is the
  trained theta clamped into it, so the released point lies in T_0(D), and T_0(D) nests into
  T_{r_1}(D') by the same induction as every other radius (instead of a separately computed
  nominal that is only close to the envelopes).
* The trivial cover C_t: C_0 is the hull of the start boxes, C_{t+1} = lam*C_t -/+ lr*gamma (every
  clipped gradient coordinate is in [-gamma, gamma], whatever the data), widened outward.  It
  contains every reachable parameter vector of every dataset, does not depend on the data, and
  every box is intersected with it.  Radii r >= b (any batch may be entirely substituted) are
  set to C_t exactly: the engine's formula would give the same box up to rounding, and only the
  exact, data-independent box makes T_N the same for every dataset (the proof's condition (C)).
  Window engines that budget k over the distinct records of their F steps (MILP: one binary per
  record, ``window_budget``) compute every radius below min(F b, N): below it k substitutions need
  not fill every slot of a window, and the exact window is tighter than C_t.
* Widening: every step is widened outward by a relative 1e-12 (+1e-14) against the engine's
  rounding (soundness), and radius index i additionally by i*E with E = ``cert.nesting_slack``, a
  data-independent bound on the rounding that can break nesting between two datasets; since
  index i of D is compared with index i+1 of D', the extra E absorbs it (graded widening).
* Downward intersection: T_r is valid for every radius below r too, so boxes 1..K are
  intersected downwards (a running max/min from the largest radius); box i of D then maps into
  box i+1 of D' because every D'-box of index > i contains a D-box of index >= i.
* Crossings (:func:`check_boxes`, after every step's intersections, for every engine): each box
  of a radius r >= 1 contains the floating-point run of every D' within r, D's own run (the
  nominal theta) among them, so after the intersections it is never crossed and never excludes
  the nominal -- unless the engine is unsound.  That is an internal error (a one-line refusal
  naming the engine), never a swap or a fallback: for a sound engine the check passes on every
  input, so it cannot make the run's outcome depend on the data.

Per-epoch substitution budget (``certificate.substitutions=per_epoch``, the default)
----------------------------------------------------------------------------------
The per-batch step above lets *every* batch hold k substituted records.  certdp's batch plan
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

import contextlib
import logging
from dataclasses import dataclass
from functools import partial

import torch
from tqdm.auto import tqdm

from certdp import DTYPE, checkpoint
from certdp.checkpoint import Calibration
from certdp.bounds import check_device, check_supported, get_certificate
from certdp.bounds.base import Certificate
from certdp.bounds.interval import Interval, outward
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, clipped_step

log = logging.getLogger("certdp")


@dataclass(frozen=True)
class Envelopes:
    """Parameter envelopes: ``lo[j], hi[j]`` bound every parameter vector reachable by training
    on a dataset within ``k_values[j]`` substitutions of D; ``nominal`` is M(f, theta_init, D)."""

    k_values: torch.Tensor   # [K], sorted ascending, >= 1
    lo: torch.Tensor         # [K, P]
    hi: torch.Tensor         # [K, P]
    nominal: torch.Tensor    # [P]

    @property
    def box(self) -> Interval:
        return Interval(self.lo, self.hi)

    def contains(self, theta: torch.Tensor, tol: float = 0.0) -> torch.Tensor:
        """[..., K] booleans: is theta ([..., P]) inside T_k."""
        t = theta.unsqueeze(-2)
        return ((t >= self.lo - tol) & (t <= self.hi + tol)).all(-1)

    def widths(self) -> torch.Tensor:
        return self.hi - self.lo


# CPU memory budget of one step's [chunk, P, b] temporaries (bytes).
CPU_BUDGET_BYTES = 1.2e9
# Fraction of the free device memory (CUDA: torch.cuda.mem_get_info) one step's temporaries may use.
DEVICE_MEMORY_FRACTION = 0.5


def memory_budget(device: torch.device | str | None = None) -> float:
    """Bytes one step's temporaries may take on ``device``: :data:`CPU_BUDGET_BYTES` on the CPU,
    :data:`DEVICE_MEMORY_FRACTION` of the free memory on a CUDA device (read when called, so that
    it follows what the run already holds)."""
    dev = torch.device("cpu" if device is None else device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return DEVICE_MEMORY_FRACTION * float(free)
    return CPU_BUDGET_BYTES


def _chunks(n_k: int, b: int, p: int, factor: float = 2, budget_bytes: float | None = None,
            device: torch.device | str | None = None) -> int:
    """Radii per chunk so that ``factor`` [chunk, P, b] float64 tensors fit the budget (by default
    the device's, :func:`memory_budget`)."""
    budget = memory_budget(device) if budget_bytes is None else budget_bytes
    per_radius = b * p * 8 * factor
    return max(1, min(n_k, int(budget // max(per_radius, 1))))


def _even_chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """(start, stop) of chunks of at most ``chunk`` rows, all of one size: the last one starts
    earlier and overlaps its predecessor (each row's bounds depend on that row alone), so that a
    compiled engine sees a single shape and never recompiles for a remainder."""
    parts = -(-n // max(chunk, 1))
    size = -(-n // parts)
    return [(min(s, n - size), min(s, n - size) + size) for s in range(0, n, size)]


def _one_step(cert: Certificate, model, lo, hi, xb, yb, ks, settings, chunk):
    """Boxes after one step for all radii, one ``step_bounds`` call per chunk of radii."""
    new_lo, new_hi = torch.empty_like(lo), torch.empty_like(hi)
    for a, z in _even_chunks(lo.shape[0], chunk):
        nb = cert.step_bounds(model, Interval(lo[a:z], hi[a:z]), xb, yb, subs=ks[a:z], settings=settings)
        new_lo[a:z], new_hi[a:z] = nb.lo, nb.hi
    return new_lo, new_hi


def trivial_step(lo: torch.Tensor, hi: torch.Tensor, settings: TrainSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The step of any box when every clipped gradient coordinate may be anything in [-gamma,
    gamma] (a whole batch substituted), widened outward against rounding."""
    lam, step = settings.contraction, settings.lr * settings.clip
    nb = outward(Interval(lam * lo - step, lam * hi + step), rel=1e-12, abs_=1e-14)
    return nb.lo, nb.hi


def _step_boxes(model: ModelSpec, x: torch.Tensor, y: torch.Tensor, settings: TrainSettings, plan: torch.Tensor,
                *, engine: Certificate, ref: torch.Tensor, ks, start_box: Interval, steps: range, device=None):
    """The per-step engine ``engine``'s boxes over the window ``steps`` from ``start_box`` (rows for
    radii ``ks``, nominal run from ``ref``): (the envelopes at the window's end, the per-step
    trace).  Handed to window engines as ``step_boxes``, so that an engine can cap its own bounds
    by a per-step engine's without importing this module."""
    trace: list = []
    env = run_agt(model, ref, x, y, settings, ks, certificate=engine, plan=plan, progress=False,
                  start_box=start_box, steps=steps, trace=trace, device=device)
    return env, trace


def run_agt(model: ModelSpec, theta_init: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            settings: TrainSettings, k_values, certificate: Certificate | None = None,
            plan: torch.Tensor | None = None,
            progress: bool = True, start_box: Interval | None = None,
            steps: range | None = None, trace: list | None = None,
            device: torch.device | str | None = None, resumable: str | None = None) -> Envelopes:
    """Train nominally and certify envelopes for all radii ``k_values`` in one pass.

    ``start_box`` ([K, P]) lets a window start from existing envelopes (the radius-0 box starts
    at ``theta_init``); by default training starts from the point ``theta_init`` (for every
    radius).  ``steps`` restricts to a window of the batch plan (multi-release AGS).
    ``certificate`` defaults to IBP; a model it does not support is a ConfigError before any
    work.  See the module docstring for what is added to the engine's steps.  ``trace`` (a list,
    per-step engines only) receives, before every step t, boxes (lo, hi) [K, P] that contain
    theta'_t for every dataset within k substitutions (relational engines cap their intermediate
    bounds with them).  ``device`` (default: the device of ``x``): where every box and bound is
    computed; the inputs are moved there and the envelopes are returned there (float64 on every
    device).  ``resumable``: the phase name under which the box loop (per-step engines; a window
    engine's pass is not cut) is checkpointed and reports progress (:mod:`certdp.checkpoint`)."""
    cert = certificate if certificate is not None else get_certificate("ibp")
    check_supported(cert, model)
    dev = x.device if device is None else torch.device(device)
    check_device(cert, dev)
    x = x.to(device=dev, dtype=DTYPE)
    y = model.loss.labels(y).to(dev)
    ks = torch.as_tensor(sorted(set(int(k) for k in k_values)), dtype=torch.long, device=dev)
    if len(ks) == 0 or int(ks[0]) < 1:
        raise ValueError("k_values must be non-empty radii >= 1")
    n = x.shape[0]
    plan = (batch_plan(n, settings) if plan is None else plan).to(dev)
    K, P = len(ks), model.n_params
    theta = theta_init.to(device=dev, dtype=DTYPE).clone()
    qs = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), ks])   # row 0: radius 0 (the nominal)
    lo = theta.expand(K + 1, P).clone()
    hi = lo.clone()
    if start_box is not None:
        lo[1:], hi[1:] = start_box.lo.to(dev), start_box.hi.to(dev)
    c_lo, c_hi = lo.amin(0), hi.amax(0)                                # the trivial cover C_0
    step_range = range(settings.steps) if steps is None else steps
    full = plan.shape[1] == n
    b = plan.shape[1]
    window = cert.window_steps
    # rows the engine computes; a window engine with a per-epoch budget (crowntt) bounds every
    # radius below the slots of an epoch itself; one that budgets the records of each window
    # exactly (milp) every radius below min(F b, N): from there on every slot of every window may
    # be substituted, and the windows give C_t; every other engine the radii below b (from b on, a
    # batch may be entirely substituted: C_t)
    E_win = (epoch_length(plan, n) if (window and not full and cert.substitutions == "per_epoch")
             else None)
    if window and cert.window_budget:
        # ... and a MILP whose variable bounds come from the per-epoch ledger stays informative
        # wherever the ledger is: below the slots of an epoch
        E_vb = (epoch_length(plan, n) if (not full and cert.variable_bounds == "per_epoch")
                else None)
        limit = max(min(b * window, n), b * E_vb if E_vb else 0)
    else:
        limit = b * E_win if E_win else b
    live = qs < limit
    n_live = int(live.sum())
    q_live = qs[:n_live]
    grade = torch.arange(K + 1, dtype=DTYPE, device=dev).unsqueeze(-1)   # graded widening i * E
    chunk = _chunks(n_live, b, P, factor=cert.memory_factor, device=dev)
    # Window engines (MILP) certify `window` consecutive steps at once from the boxes at the
    # window's start (``cert.window_bounds``); every other engine goes one step at a time.
    order = list(step_range)
    blocks = ([order[i:i + window] for i in range(0, len(order), window)] if window
              else [[t] for t in order])
    E = epoch_length(plan, n) if (window is None and not full
                                  and cert.substitutions == "per_epoch") else None
    clock = Calibration(steps=len(order), radii=K, engine=cert.name, device=dev)
    ck = (checkpoint.current().loop(resumable, total=len(order), detail=f"radii={K} engine={cert.name}")
          if resumable and not window and trace is None else contextlib.nullcontext())
    if E is not None and int(ks[0]) < b * E:
        with ck as lp:
            lo, hi, theta = _run_ledger(cert, model, Interval(lo, hi), (c_lo, c_hi), theta, x, y, plan, order, qs,
                                        settings, E=E, chunk=chunk, progress=progress, trace=trace, grade=grade,
                                        clock=clock, lp=lp)
        nominal = torch.minimum(torch.maximum(theta, lo[0]), hi[0])
        return Envelopes(ks, lo[1:].clone(), hi[1:].clone(), nominal)
    if trace is not None and window:
        raise ValueError("trace needs a per-step engine")
    if window:
        cert.start_run(windows=len(blocks), steps=range(order[0], order[-1] + 1) if order else range(0))
    with ck as lp:
        lo, hi, theta = _box_loop(cert, model, lo, hi, theta, (c_lo, c_hi), x, y, plan, blocks, ks, settings,
                                  full=full, window=window, n_live=n_live, q_live=q_live, chunk=chunk, b=b, grade=grade,
                                  trace=trace, progress=progress, clock=clock, dev=dev, lp=lp)
    # The released nominal: the trained parameters, inside the radius-0 box (the engine's bound on
    # the same trajectory; they differ by rounding only).
    nominal = torch.minimum(torch.maximum(theta, lo[0]), hi[0])
    return Envelopes(ks, lo[1:].clone(), hi[1:].clone(), nominal)


def _box_loop(cert, model, lo, hi, theta, cover, x, y, plan, blocks, ks, settings, *, full, window, n_live, q_live,
              chunk, b, grade, trace, progress, clock, dev, lp):
    """The per-step (or per-window) box loop of :func:`run_agt`: returns (lo, hi, theta) after the
    last block; ``lp`` (a :class:`certdp.checkpoint.Loop` or None) restores and saves its state."""
    K = len(ks)
    c_lo, c_hi = cover
    first = 0
    if lp is not None and lp.state is not None:
        st = lp.state
        lo, hi, theta, c_lo, c_hi = (st[k].to(dev) for k in ("lo", "hi", "theta", "c_lo", "c_hi"))
        first = lp.step
        # the estimate counts the steps this process does (the first of them compiles)
        clock.done = clock.base = sum(len(bl) for bl in blocks[:first])
        clock.skip = clock.done + (1 if clock.steps - clock.done > 2 else 0)

    def state():
        return {"lo": lo, "hi": hi, "theta": theta, "c_lo": c_lo, "c_hi": c_hi}

    it = tqdm(blocks[first:], desc=f"AGT[{cert.name}] |K|={K}", disable=not progress, leave=False)
    for i, block in enumerate(it, start=first):
        if trace is not None:
            trace.append((lo[1:].clone(), hi[1:].clone()))
        new_theta = theta
        for t in block:
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            new_theta = clipped_step(model, new_theta, xb, yb, settings)
            c_lo, c_hi = trivial_step(c_lo, c_hi, settings)
        if window:
            mag = float(torch.maximum(c_hi.abs(), c_lo.abs()).max())
            nb = cert.window_bounds(model, Interval(lo[:n_live], hi[:n_live]), x, y, plan=plan, steps=block,
                                    ks=q_live, settings=settings, magnitude=mag,
                                    step_boxes=partial(_step_boxes, model, x, y, settings, plan, device=dev))
            new_lo, new_hi = nb.lo, nb.hi
        else:
            new_lo, new_hi = _one_step(cert, model, lo[:n_live], hi[:n_live], xb, yb, q_live, settings, chunk)
        nb = outward(Interval(new_lo, new_hi), rel=1e-12, abs_=1e-14)
        mag = float(torch.maximum(c_hi.abs(), c_lo.abs()).max())
        # graded widening: only an engine that nests needs it (module docstring)
        slack = (cert.nesting_slack(model, settings=settings, b=b, k_max=int(q_live[-1]), magnitude=mag,
                                    steps=len(block)) if cert.nesting_monotone else 0.0)
        wid = grade[:n_live] * slack
        lo, hi = torch.empty_like(lo), torch.empty_like(hi)
        lo[:n_live], hi[:n_live] = torch.maximum(nb.lo - wid, c_lo), torch.minimum(nb.hi + wid, c_hi)
        lo[n_live:], hi[n_live:] = c_lo, c_hi
        lo, hi = _intersect_down(lo, hi)        # T_k is valid for every radius below k as well
        theta = new_theta
        check_boxes(cert, lo, hi, theta, step=block[-1])
        clock.tick(len(block))
        if lp is not None:
            lp.tick(i + 1, state)
    if lp is not None:
        lp.finish(state)
    return lo, hi, theta


def check_boxes(cert: Certificate, lo: torch.Tensor, hi: torch.Tensor, theta: torch.Tensor, *, step: int) -> None:
    """Refuse (internal error) a crossed box, or a box of a radius >= 1 (rows 1..) that excludes the
    nominal run ``theta``: no sound engine returns one (module docstring, Crossings)."""
    bad = (lo > hi).any(-1)
    bad[1:] |= ((theta < lo[1:]) | (theta > hi[1:])).any(-1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ConfigError("certificate.name", f"internal error: after step {step} the '{cert.name}' engine's box of "
                          f"row {row} (0: radius 0) is crossed or excludes the nominal run, which no sound engine "
                          f"returns: a bug in the engine, not a property of the data; allowed: another certificate "
                          f"until it is fixed")


def epoch_length(plan: torch.Tensor, n: int) -> int | None:
    """E = floor(N / b) if the plan has more than one batch per epoch and no index occurs twice in
    any aligned block of E consecutive steps (the structure of :func:`certdp.training.batch_plan`,
    which the per-epoch budget relies on), else None (certify per batch)."""
    b = plan.shape[1]
    E = n // b
    if E < 2:
        return None
    T = plan.shape[0]
    for s in range(0, T, E):
        blk = plan[s:s + E].reshape(-1)
        if torch.unique(blk).numel() != blk.numel():
            return None
    return E


def ledger_width(ks: torch.Tensor, s: int, *, rho: float) -> torch.Tensor:
    """Half-width [K] of the substitution ledger after ``s`` steps of an epoch (module docstring):
    k * rho for s >= 1, 0 at the epoch's start."""
    return ks.to(DTYPE) * rho if s > 0 else torch.zeros(len(ks), dtype=DTYPE, device=ks.device)


def _intersect_down(lo, hi):
    """T_k is valid for every radius below k as well: a running max/min from the largest radius
    (rows 1.., radius 0 apart)."""
    lo, hi = lo.clone(), hi.clone()
    lo[1:] = torch.flip(torch.cummax(torch.flip(lo[1:], [0]), 0).values, [0])
    hi[1:] = torch.flip(torch.cummin(torch.flip(hi[1:], [0]), 0).values, [0])
    return lo, hi


def _run_ledger(cert, model, start: Interval, cover, theta, x, y, plan, order, qs, settings, *, E, chunk,
                progress, trace, grade, clock: Calibration | None = None, lp=None):
    """The per-epoch ledger (module docstring) over the steps ``order`` for the rows ``qs`` (radius 0
    first); returns (lo, hi, theta) with a row per entry of ``qs``."""
    lr, gamma = settings.lr, settings.clip
    b = plan.shape[1]
    rho = 2.0 * gamma * lr / b
    n_led = int((qs < b * E).sum())        # rows whose budget binds (qs ascending)
    kl = qs[:n_led]
    c_lo, c_hi = cover
    B_lo, B_hi = start.lo[:n_led].clone(), start.hi[:n_led].clone()
    wgrade = grade[:n_led]
    s = 0
    first = 0
    if lp is not None and lp.state is not None:       # a resumed pass: the ledger as it was after step `first`
        st, dev = lp.state, B_lo.device
        B_lo, B_hi, theta, c_lo, c_hi = (st[k].to(dev) for k in ("B_lo", "B_hi", "theta", "c_lo", "c_hi"))
        s, first = int(st["s"]), lp.step
        if clock is not None:
            clock.done = clock.base = first
            clock.skip = first + (1 if clock.steps - first > 2 else 0)

    def state():
        return {"B_lo": B_lo, "B_hi": B_hi, "theta": theta, "c_lo": c_lo, "c_hi": c_hi, "s": s}

    it = tqdm(order[first:], desc=f"AGT[{cert.name}, per-epoch] |K|={len(qs) - 1}", disable=not progress,
              leave=False)

    # the ledger step with the default hook is the plain sum of per-sample bounds: the base
    # aggregation slack (an engine's own joint step is not used here)
    slack_of = (Certificate.nesting_slack if type(cert).ledger_step_bounds is Certificate.ledger_step_bounds
                else type(cert).nesting_slack)

    def slack(mag):
        return (slack_of(cert, model, settings=settings, b=b, k_max=int(kl[-1]), magnitude=mag, steps=1)
                if cert.nesting_monotone else 0.0)

    def margin() -> float:
        # outward widening against rounding, relative to a data-independent magnitude (the cover's
        # largest coordinate plus the largest ledger width) that bounds every box: a margin read
        # from the box itself would differ between D and D' by 1e-12 times the ledger offset rho
        return 1e-12 * (float(torch.maximum(c_hi.abs(), c_lo.abs()).max()) + float(kl[-1]) * rho) + 1e-14

    def fold(B_lo, B_hi, s):
        L = ledger_width(kl, s, rho=rho).unsqueeze(-1)
        m = margin()
        wid = wgrade * slack(float(torch.maximum(c_hi.abs(), c_lo.abs()).max()))
        return _intersect_down(torch.maximum(B_lo - L - m - wid, c_lo), torch.minimum(B_hi + L + m + wid, c_hi))

    for i, t in enumerate(it, start=first):
        if s > 0 and t % E == 0:
            B_lo, B_hi = fold(B_lo, B_hi, s)
            s = 0
        xb, yb = x[plan[t]], y[plan[t]]
        L = ledger_width(kl, s, rho=rho).unsqueeze(-1)
        X = Interval(torch.maximum(B_lo - L, c_lo), torch.minimum(B_hi + L, c_hi))
        if trace is not None:
            n_c = len(qs) - n_led
            trace.append((torch.cat([X.lo, c_lo.expand(n_c, -1)], 0)[1:], torch.cat([X.hi, c_hi.expand(n_c, -1)], 0)[1:]))
        shift = L.expand(-1, B_lo.shape[1])
        n_lo, n_hi = torch.empty_like(B_lo), torch.empty_like(B_hi)
        for a, z in _even_chunks(n_led, chunk):
            q = cert.ledger_step_bounds(model, Interval(B_lo[a:z], B_hi[a:z]), xb, yb,
                                        domain=Interval(X.lo[a:z], X.hi[a:z]), shift=shift[a:z], settings=settings)
            n_lo[a:z], n_hi[a:z] = q.lo, q.hi
        theta = clipped_step(model, theta, xb, yb, settings)
        c_lo, c_hi = trivial_step(c_lo, c_hi, settings)
        m = margin()
        wid = wgrade * slack(float(torch.maximum(c_hi.abs(), c_lo.abs()).max()))
        B_lo, B_hi = _intersect_down(n_lo - m - wid, n_hi + m + wid)
        check_boxes(cert, B_lo, B_hi, theta, step=t)       # B contains psi_t, which is theta_t for D itself
        s += 1
        if clock is not None:
            clock.tick()
        if lp is not None:
            lp.tick(i + 1, state)
    if lp is not None:
        lp.finish(state)
    B_lo, B_hi = fold(B_lo, B_hi, s)
    n_c = len(qs) - n_led
    lo = torch.cat([B_lo, c_lo.expand(n_c, -1)], 0)
    hi = torch.cat([B_hi, c_hi.expand(n_c, -1)], 0)
    return lo, hi, theta
