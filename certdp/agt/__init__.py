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


The per-epoch ledger (``certificate.substitutions=per_epoch``: one substitution budget per epoch
of the batch plan, at per-batch cost) and its nesting argument are in :mod:`certdp.agt.ledger`.

Protocols.  An engine is a *step engine* (``window_steps = None``: ``step_bounds`` per batch,
``ledger_step_bounds`` in the ledger) or a *window engine* (``window_bounds`` over F steps); its
:meth:`~certdp.bounds.base.Certificate.schedule` says which loop runs (the ledger or the
per-batch boxes) and which radii it computes.  The loops (:mod:`certdp.agt.steps`,
:mod:`certdp.agt.ledger`) take one :class:`~certdp.agt.state.Pass` (what stays fixed) and one
:class:`~certdp.agt.state.LoopState` (what a step changes and a checkpoint saves).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch

from certdp import DTYPE, checkpoint, kernels
from certdp.agt.ledger import ledger_loop, ledger_width
from certdp.agt.state import LoopState, Pass, trivial_step
from certdp.agt.steps import box_loop
from certdp.bounds import check_device, check_supported, get_certificate
from certdp.bounds.base import Batch, Certificate, epoch_length
from certdp.bounds.interval import Interval
from certdp.checkpoint import Calibration
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan

__all__ = ["AGTOptions", "Envelopes", "check_boxes", "epoch_length", "ledger_width", "memory_budget", "run_agt",
           "trivial_step"]

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


@dataclass(frozen=True, eq=False)
class AGTOptions:
    """How :func:`run_agt` runs (every field optional).

    ``certificate``: the engine (default IBP; a model it does not support is a ConfigError before
    any work).  ``plan``: the batch plan (default :func:`certdp.training.batch_plan`).
    ``steps``: a window of the plan (multi-release AGS; default every step).  ``start_box``
    ([K, P]): the window starts from existing envelopes (the radius-0 box starts at
    ``theta_init``; default: every radius starts at the point ``theta_init``).  ``device``
    (default: the device of the data): where every box and bound is computed; the inputs are
    moved there and the envelopes are returned there (float64 on every device).  ``progress``: a
    progress bar.  ``trace`` (a list, per-step engines only) receives, before every step t, boxes
    (lo, hi) [K, P] that contain theta'_t for every dataset within k substitutions (relational
    engines cap their intermediate bounds with them).  ``resumable``: the phase name under which
    the loop (per-step engines; a window engine's pass is not cut) is checkpointed and reports
    progress (:mod:`certdp.checkpoint`)."""

    certificate: Certificate | None = None
    plan: torch.Tensor | None = None
    steps: range | None = None
    start_box: Interval | None = None
    device: torch.device | str | None = None
    progress: bool = True
    trace: list | None = None
    resumable: str | None = None


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


@dataclass(frozen=True, eq=False)
class StepBoxes:
    """AGT's callback for window engines (:class:`certdp.bounds.base.Window`): a per-step engine's
    boxes over a window of the same data and plan, so that an engine can cap its own bounds by
    them without importing this module."""

    model: ModelSpec
    data: Batch
    settings: TrainSettings
    plan: torch.Tensor
    device: torch.device

    def __call__(self, *, engine: Certificate, ref: torch.Tensor, ks, start_box: Interval, steps: range):
        """(the envelopes at the window's end, the per-step trace) of ``engine`` over ``steps``
        from ``start_box`` (rows for radii ``ks``, the nominal run from ``ref``)."""
        trace: list = []
        env = run_agt(self.model, ref, self.data, self.settings, ks,
                      AGTOptions(certificate=engine, plan=self.plan, progress=False, start_box=start_box, steps=steps,
                                 trace=trace, device=self.device))
        return env, trace


def run_agt(model: ModelSpec, theta_init: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor],
            settings: TrainSettings, k_values, options: AGTOptions = AGTOptions()) -> Envelopes:
    """Train nominally on ``data`` = (x, y) and certify envelopes for all radii ``k_values`` in one
    pass (:class:`AGTOptions`: the engine, plan, window, device and watchers).  See the module
    docstring for what is added to the engine's steps."""
    kernels.verify()              # exp, log, ... within 2 ulps on every thread (certdp/kernels.py)
    opts = options
    cert = opts.certificate if opts.certificate is not None else get_certificate("ibp")
    check_supported(cert, model)
    x, y = data
    dev = x.device if opts.device is None else torch.device(opts.device)
    check_device(cert, dev)
    x = x.to(device=dev, dtype=DTYPE)
    y = model.loss.labels(y).to(dev)
    ks = torch.as_tensor(sorted(set(int(k) for k in k_values)), dtype=torch.long, device=dev)
    if len(ks) == 0 or int(ks[0]) < 1:
        raise ValueError("k_values must be non-empty radii >= 1")
    n = x.shape[0]
    plan = (batch_plan(n, settings) if opts.plan is None else opts.plan).to(dev)
    K, P = len(ks), model.n_params
    theta = theta_init.to(device=dev, dtype=DTYPE).clone()
    qs = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), ks])   # row 0: radius 0 (the nominal)
    lo = theta.expand(K + 1, P).clone()
    hi = lo.clone()
    if opts.start_box is not None:
        lo[1:], hi[1:] = opts.start_box.lo.to(dev), opts.start_box.hi.to(dev)
    order = list(range(settings.steps) if opts.steps is None else opts.steps)
    b = plan.shape[1]
    window = cert.window_steps
    sched = cert.schedule(plan, n)
    # the ledger is the step protocol's; a window engine's schedule only sets the radii it computes
    E = sched.epoch if window is None else None
    # a step engine's rows per call are sized by the radii below b, in the ledger too
    chunk = _chunks(int((qs < (sched.limit if window else b)).sum()), b, P, factor=cert.memory_factor, device=dev)
    clock = Calibration(steps=len(order), radii=K, engine=cert.name, device=dev)
    ledger = E is not None and int(ks[0]) < b * E
    if opts.trace is not None and window:
        raise ValueError("trace needs a per-step engine")
    ps = Pass(cert=cert, model=model, data=Batch(x, y), plan=plan, settings=settings, rows=qs, order=order,
              limit=sched.limit if window else b, epoch=E, chunk=chunk, check=check_boxes,
              step_boxes=StepBoxes(model, Batch(x, y), settings, plan, dev) if window else None,
              trace=opts.trace, progress=opts.progress, clock=clock)
    state = LoopState(lo, hi, theta, lo.amin(0), hi.amax(0))            # the trivial cover C_0: the start's hull
    ck = (checkpoint.current().loop(opts.resumable, total=len(order), detail=f"radii={K} engine={cert.name}")
          if opts.resumable and not window and opts.trace is None else contextlib.nullcontext())
    if window and not ledger:
        cert.start_run(windows=-(-len(order) // window), steps=range(order[0], order[-1] + 1) if order else range(0))
    with ck as lp:
        state = (ledger_loop if ledger else box_loop)(ps, state, lp)
    # The released nominal: the trained parameters, inside the radius-0 box (the engine's bound on
    # the same trajectory; they differ by rounding only).
    nominal = torch.minimum(torch.maximum(state.theta, state.lo[0]), state.hi[0])
    return Envelopes(ks, state.lo[1:].clone(), state.hi[1:].clone(), nominal)


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
