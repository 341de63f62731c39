"""The certificate interface: every hook a bound-propagation engine may provide to AGT.

Notation.  A *box* is a row of an :class:`Interval` ``boxes`` [M, P] over the flat parameter
vector.  A batch is ``(x [b, d], y [b])`` of the fixed batch plan; gamma = ``settings.clip``,
lam = ``settings.contraction``, lr = ``settings.lr``.  A *query* q = (``src[q]``, ``subs[q]``)
asks for one training step from box ``src[q]`` with at most ``subs[q]`` of the b records of the
batch substituted; ``src=None`` means ``src = arange(Q)`` (query q starts from box q).  AGT's
pairing is ``src=None, subs=k_values``: box j is T_k for k = k_values[j], every batch holding at
most k substituted records.  Several queries may share one box (e.g. one box per number of
substitutions used so far, several numbers of substitutions in this batch); engines compute
what depends on the box alone once per box.

Step contract.  Row q of ``step_bounds`` contains

    lam * theta - (lr / b) * sum_{i=1..b} clip(grad_theta loss(f_theta(x'_i), y'_i), -gamma, gamma)

for every theta in ``boxes[src[q]]`` and every batch (x', y') that equals (x, y) except in at
most ``subs[q]`` records, which are arbitrary (any features, any label the loss accepts);
``subs[q] = 0`` (no substitution) and ``subs[q] >= b`` are allowed.  Row q of
``batch_sum_bounds`` contains the sum above (before the step), and entry [m, p, i] of
``per_sample_gradient_bounds`` contains clip(grad_theta loss(f_theta(x_i), y_i))_p for every
theta in box m.  A window engine's ``window_bounds`` contains theta_{t0+F} for every dataset
within ``ks[j]`` substitutions of D (over the whole dataset) whose run passes box j at step t0.
All bounds are sound in exact arithmetic; AGT widens every step by a relative 1e-12 against
rounding.

Hooks (an engine overrides at least one of the first three; the others have defaults):

=========================================  ===================================================
``per_sample_gradient_bounds``             [M, P, b] per-sample intervals (default: error
                                           naming the hook)
``batch_sum_bounds``                       [Q, P] (default: the per-sample intervals,
                                           aggregated once per box by top-k, see
                                           :mod:`certdp.bounds.aggregate`)
``step_bounds``                            [Q, P] (default: ``batch_sum_bounds`` + the
                                           clipped-GD step)
``output_bounds``                          [M, n, out] model outputs over the boxes (default:
                                           the interval forward pass)
``ledger_step_bounds``                     [M, P] bounds of lam * psi - (lr/b) * sum_i g_i(theta)
                                           over psi in ``anchor`` and theta in ``domain`` with
                                           |theta - psi| <= ``shift``: the per-epoch ledger's
                                           step (:mod:`certdp.agt`; default: the plain batch sum,
                                           ``batch_sum_bounds`` with no substitution, over
                                           ``domain``)
``substitutions``                          ``per_epoch`` (AGT keeps the per-epoch ledger where the
                                           batch plan allows it) or ``per_batch`` (default)
``schedule(plan, n)``                      the :class:`Schedule` of a pass: the per-epoch
                                           ledger's epoch (step engines) and the radii the engine
                                           computes (the rest get the trivial cover)
``window_steps`` / ``window_bounds``       F steps certified at once from the window's start
                                           boxes (default: None, one step at a time)
``supports(model)``                        False: AGT refuses the model with a one-line
                                           error naming the engines that do (default: True)
``memory_factor``                          [P, b] float64 temporaries per box a step holds;
                                           AGT chunks the queries to the device's memory budget
                                           (certdp.agt.memory_budget; default 2)
``devices``                                the device types the engine computes on (default
                                           cpu and cuda: torch operations on the inputs' device);
                                           AGT refuses another with a one-line ``device`` error
``options``                                the ``certificate.<opt>`` keys the constructor reads
``scope``                                  the models supported, in words (for errors)
``nesting_monotone``                       True: the step map nests (below); smooth-sensitivity
                                           releases refuse an engine without it (default False)
``nesting_refusal()``                      (key, reason, allowed) of that refusal
``nesting_slack(...)``                     per-step rounding slack AGT absorbs by graded widening
``ledger_slack(...)``                      the same for one ``ledger_step_bounds`` step
=========================================  ===================================================

Two protocols (:mod:`certdp.agt` drives them).  A *step engine* (``window_steps = None``) answers
one step at a time: ``step_bounds`` (the per-batch loop) and ``ledger_step_bounds`` (the per-epoch
ledger), with ``nesting_slack`` / ``ledger_slack``.  A *window engine* (``window_steps = F``)
answers F steps at once: ``start_run`` before a pass, then ``window_bounds(model, boxes, window)``
per window (a :class:`Window`: the data, plan, steps, radii, settings and AGT's callbacks).  Both
declare their :meth:`Certificate.schedule`; AGT reads nothing else to choose the loop.

Nesting (what ``nesting_monotone = True`` promises).  The smooth-sensitivity releases are
beta-smooth only if the computed envelopes of neighbouring datasets D ~ D' nest, T_r(D) inside
T_r'(D') for consecutive computed radii r < r' (the proof, its conditions (M1)-(M3) and the way
AGT uses them are in :mod:`certdp.privacy.sensitivity`).  An engine declares it when, for the
boxes ``B subset B'`` (row by row), the same batch except one substituted record, and numbers of
substitutions ``r' >= r + 1`` (``r' >= r`` for the same batch), every hook it overrides satisfies,
in exact arithmetic,

    step_bounds(B, batch of D, r)  subset  step_bounds(B', batch of D', r'),

and the same for ``window_bounds`` with ``ks``; concretely:

(M1) the per-sample bounds it relies on are inclusion-monotone in the box for a fixed record (a
     larger box never gives a smaller interval), lie in [-gamma, gamma], and are exact at a point
     box (the radius-0 query ``subs = 0`` at a point is the nominal step, up to rounding);
(M2) its aggregation over the batch nests: the bound for r' substitutions over the larger
     per-sample bounds of the D' batch contains the bound for r over D's batch, whatever the
     substituted record contributes (any value in [-gamma, gamma]); a top-k over the records, a
     record-independent charge per substitution, or a data-independent tau (Sigma max(u_i, tau) -
     r tau + r gamma) do; a charge that depends on the substituted record's own bounds does not;
(M3) everything after it is monotone: the update, intersections with other nesting bounds,
     relaxations chosen per record by a rule that is itself monotone in the box (a larger box
     never moves a record to a tighter relaxation), solver bounds within a data-independent gap
     of the optimum (absorbed by :meth:`nesting_slack`), and no fallback that depends on the
     data (a time limit, a failed solve or a crossed bound that swaps one bound for another).

AGT (certdp/agt.py) supplies the rest: the radius-0 step as the nominal, radii >= b as the
data-independent trivial cover, intersection with that cover, and the graded widening that
turns "nesting in exact arithmetic" into nesting of the floating-point boxes.  An engine whose
guarantee depends on its options declares it per instance (MILP: only when a time-limited solve
refuses instead of falling back).

Options are validated in the constructor (``ConfigError`` with key ``certificate.<opt>``).
Adding a certificate: one file with one subclass, registered in :mod:`certdp.bounds` (or with
``certdp.bounds.register`` from anywhere), plus ``configs/certificate/<name>.yaml``.
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import torch

from certdp.bounds.aggregate import batch_sum, clipped_gd_step
from certdp.bounds.interval import Interval, output_bounds
from certdp.registry import Registry

_COMPUTE_HOOKS = ("per_sample_gradient_bounds", "batch_sum_bounds", "step_bounds")


class Batch(NamedTuple):
    """One step's records: features ``x`` [b, d] and labels ``y`` [b] (as ``loss.labels`` gives)."""

    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True)
class Window:
    """What a window engine's ``window_bounds`` certifies: the steps ``steps`` (consecutive
    indices of ``plan``) on the whole training set ``data``, one row per radius of ``ks`` (0: the
    nominal run), with ``settings`` (the training's).  ``magnitude``: a data-independent bound on
    |theta| over the window (the trivial cover's), for margins that must not depend on the data.
    ``step_boxes``: AGT's callback ``step_boxes(engine=, ref=, ks=, start_box=, steps=) ->
    (envelopes, trace)`` running a per-step engine over the same window (engines that cap their
    bounds by it)."""

    data: Batch
    plan: torch.Tensor
    steps: Any
    ks: torch.Tensor
    settings: Any
    magnitude: float | None = None
    step_boxes: Callable | None = None


@dataclass(frozen=True)
class Schedule:
    """How AGT runs an engine over a batch plan: ``epoch`` E (step engines: the per-epoch ledger
    over epochs of E batches; None: per batch) and ``limit``: the engine computes the radii below
    it, every radius from it on is the data-independent trivial cover (module docstring of
    :mod:`certdp.agt`)."""

    epoch: int | None
    limit: int


@dataclass(frozen=True)
class LossRule:
    """The bound rules of one loss beyond its interval and linear gradient bounds (which
    :mod:`certdp.losses` keeps with the loss): one rule per loss, as auto_LiRPA keeps one rule
    per operator; each lives in :mod:`certdp.bounds.rules` (one module a loss) and engines look
    it up with :func:`loss_rule` instead of branching on the loss.

    ``crown_coupled``: CROWN's single-layer joint step over the box's vertices, used when the
    vertex tensors are small (``single_layer_step``'s signature; None: the general relaxation).
    ``crown_joint``: False when the loss's linear gradient bounds are interval constants, so the
    joint step is the IBP step (hinge).  ``milp_steps(prob, theta, subst, rows, new, eps)``: the
    MILP window's constraints of every step (None: MILP does not bound the loss).
    ``crowntt_neurons``: crowntt's neuron relaxation class (None: crowntt does not bound it)."""

    loss: str
    crown_coupled: Callable | None = None
    crown_joint: bool = True
    milp_steps: Callable | None = None
    crowntt_neurons: Any = None


LOSS_RULES: Registry[LossRule] = Registry("loss rule")


def loss_rule(loss) -> LossRule:
    """The :class:`LossRule` of ``loss`` (a loss object or its name); a loss without one gets the
    general rules (CROWN's relaxation from its linear gradient bounds; no MILP, no crowntt)."""
    name = loss if isinstance(loss, str) else loss.name
    return LOSS_RULES[name] if name in LOSS_RULES else LossRule(name)


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


class Workspace:
    """Named scratch tensors reused across calls on the CPU.

    A step's large temporaries ([boxes, ..., b] float64, tens of MB) are the same shapes every
    step; freshly allocated, each costs a page fault per 4 KiB on first touch (glibc does not hand
    freed aligned blocks back to the next aligned allocation), which measured more than the
    arithmetic on them.  ``get(name, shape)`` returns a view of a buffer kept under ``name``
    (grown when too small).  Callers use a name for one live tensor at a time and never return
    the view.  On a CUDA device it allocates (the caching allocator already reuses memory)."""

    def __init__(self):
        self._bufs: dict = {}

    def get(self, name: str, shape: tuple, dtype, device) -> torch.Tensor:
        dev = torch.device(device)
        numel = 1
        for s in shape:
            numel *= int(s)
        if dev.type != "cpu":
            return torch.empty(shape, dtype=dtype, device=dev)
        key = (name, dtype)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < numel:
            self._bufs.pop(key, None)
            buf = self._bufs[key] = torch.empty(numel, dtype=dtype, device="cpu")
        return buf[:numel].view(shape)


WORKSPACE = Workspace()


class Certificate(ABC):
    """Base class of the bound-propagation engines (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    scope: ClassVar[str] = "every model"
    memory_factor: float = 2.0
    #: device types (``torch.device(...).type``) the engine runs on; an engine that calls a CPU
    #: solver or builds its bounds outside torch declares ("cpu",) and says why in ``device_note``
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    device_note: ClassVar[str] = ""
    window_steps: int | None = None
    substitutions: str = "per_batch"
    #: the step map satisfies (M1)-(M3) of certdp/privacy/sensitivity.py (module docstring above);
    #: smooth-sensitivity releases refuse an engine that does not declare it
    nesting_monotone: bool = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        own = {h for c in cls.__mro__ if c not in (Certificate, ABC, object) for h in vars(c)}
        if not own.intersection(_COMPUTE_HOOKS):
            raise TypeError(f"certificate {cls.__name__} implements none of {', '.join(_COMPUTE_HOOKS)}")

    def nesting_refusal(self) -> tuple[str, str, str | None]:
        """(config key, reason, allowed values) for the one-line refusal of a smooth release when
        ``nesting_monotone`` is False; ``allowed=None`` lets the caller name the engines that nest."""
        return ("certificate.name", f"the engine '{self.name}' does not declare a nesting-monotone step map", None)

    def schedule(self, plan: torch.Tensor, n: int) -> Schedule:
        """The :class:`Schedule` of a pass over ``plan`` on ``n`` records.  Default: with
        ``substitutions = per_epoch`` and a plan of several batches per epoch, the per-epoch ledger
        (a step engine; a window engine budgets per epoch itself), computing every radius below an
        epoch's slots b E; otherwise per batch, computing the radii below b (from b on a batch may
        be entirely substituted: the trivial cover)."""
        b = plan.shape[1]
        E = epoch_length(plan, n) if (b < n and self.substitutions == "per_epoch") else None
        return Schedule(epoch=E, limit=b * E if E else b)

    def nesting_slack(self, model, *, settings, b: int, k_max: int, magnitude: float, steps: int = 1) -> float:
        """A data-independent bound E on how far one block of ``steps`` computed steps (this
        engine's floating-point evaluation) can break the nesting that holds in exact arithmetic:
        AGT widens the box of the i-th radius by i * E, so that T_i(D) + E inside T_{i+1}(D')
        becomes exact for the rounded boxes.

        Default: the aggregation and update, for per-sample bounds evaluated by float-isotone
        operations in a fixed order (the same for every dataset).  A recursive sum of b terms of
        size <= gamma errs by at most (b - 1) u b gamma (u = 2^-53), the top-k and the k*gamma term
        by k u k gamma and u k gamma, and lam*theta - (lr/b) S by 3u (|theta| + lr gamma) with
        |theta| <= ``magnitude`` (the trivial cover's largest coordinate); times 2, for the two
        datasets compared, and times 2 again as margin."""
        u = 2.0 ** -53
        g, lr = float(settings.clip), float(settings.lr)
        per = lr * g * u * (b + k_max + 2) + 3 * u * (magnitude + lr * g)
        return 4.0 * steps * per

    def ledger_slack(self, model, *, settings, b: int, k_max: int, magnitude: float) -> float:
        """:meth:`nesting_slack` of one ``ledger_step_bounds`` step.  Default: the base
        aggregation's (the default ledger step is the plain sum of per-sample bounds; an engine's
        own joint ``step_bounds`` is not used there).  An engine that overrides
        ``ledger_step_bounds`` overrides this too."""
        return Certificate.nesting_slack(self, model, settings=settings, b=b, k_max=k_max, magnitude=magnitude, steps=1)

    @classmethod
    def supports(cls, model) -> bool:
        """Whether the engine can bound ``model`` (widths and loss only, never the options)."""
        return True

    def per_sample_gradient_bounds(self, model, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                                   clip: float, out: tuple[torch.Tensor, torch.Tensor] | None = None) -> Interval:
        """Intervals [M, P, b] (samples last) containing the clipped per-sample gradients over each
        box of ``theta`` [M, P].  ``out``: two [M, P, b] tensors (lo, hi) the result may be written into;
        a caller passes them only when it reduces the result before reusing them (engines may
        ignore them); otherwise the result is owned by the caller."""
        raise NotImplementedError(f"certificate '{self.name}' does not implement per_sample_gradient_bounds "
                                  f"(needed by the default batch_sum_bounds / step_bounds)")

    def batch_sum_bounds(self, model, boxes: Interval, batch: Batch, *,
                         subs: torch.Tensor, src: torch.Tensor | None = None, clip: float) -> Interval:
        """Bounds [Q, P] on the batch sum of clipped gradients for every query (module docstring)."""
        x, y = batch
        M, b = boxes.lo.shape[0], x.shape[0]
        g = self.per_sample_gradient_bounds(model, boxes, x, y, clip=clip,
                                            out=self.scratch((M, model.n_params, b), boxes.lo.dtype,
                                                             boxes.lo.device))
        return batch_sum(g, subs=subs, src=src, clip=clip)

    def step_bounds(self, model, boxes: Interval, batch: Batch, *,
                    subs: torch.Tensor, src: torch.Tensor | None = None, settings) -> Interval:
        """Boxes [Q, P] after one clipped-GD step, one per query (module docstring)."""
        sums = self.batch_sum_bounds(model, boxes, batch, subs=subs, src=src, clip=settings.clip)
        return clipped_gd_step(boxes, sums, src=src, settings=settings, b=batch.x.shape[0])

    def ledger_step_bounds(self, model, anchor: Interval, batch: Batch, *,
                           domain: Interval, shift: torch.Tensor, settings) -> Interval:
        """Boxes [M, P] containing lam * psi - (lr / b) * sum_{i=1..b} clip(grad_theta loss(f_theta(x_i),
        y_i)) for every psi in ``anchor[m]`` and every theta in ``domain[m]`` with |theta - psi| <=
        ``shift[m]`` (element-wise; ``domain`` contains ``anchor`` +- ``shift`` intersected with a
        cover): the step of the per-epoch ledger (:mod:`certdp.agt`), the batch's *own* records only.
        The default bounds the sum by the per-sample bounds over ``domain`` (no substitution): an
        inclusion-monotone map of (anchor, domain) whenever the per-sample bounds are."""
        x = batch.x
        sums = self.batch_sum_bounds(model, domain, batch,
                                     subs=torch.zeros(anchor.lo.shape[0], dtype=torch.long, device=x.device),
                                     clip=settings.clip)
        return clipped_gd_step(anchor, sums, settings=settings, b=x.shape[0])

    def output_bounds(self, model, theta: Interval, x: torch.Tensor) -> Interval:
        """Intervals [M, n, out] containing f_theta(x) for every theta in each box of ``theta``."""
        return output_bounds(model, theta, x)

    def window_bounds(self, model, boxes: Interval, window: Window) -> Interval:
        """Boxes [K, P] at the end of the window ``window.steps`` (consecutive step indices of its
        plan, ``len(steps) <= window_steps``) from the boxes [K, P] at its start; row j for datasets
        within ``window.ks[j]`` substitutions of the whole training set ``window.data``
        (``ks[j] = 0``: the nominal run); :class:`Window` says what else it carries."""
        raise NotImplementedError(f"certificate '{self.name}' sets window_steps but does not implement window_bounds")

    def start_run(self, *, windows: int, steps: range) -> None:
        """Called by AGT before the ``windows`` calls of ``window_bounds`` of one pass over the
        plan's ``steps`` (window engines with a budget over the whole pass start its clock here,
        or bound the whole pass once); a no-op by default."""

    def scratch(self, shape: tuple, dtype, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Two reusable buffers of ``shape`` private to this engine, for per-sample bounds that are
        reduced before a hook returns: AGT asks for the same large [M, P, b] tensors every step,
        and fresh allocations of that size cost more than the arithmetic.  One pair per (dtype,
        device)."""
        bufs = self.__dict__.setdefault("_scratch", {})
        numel = 1
        for s in shape:
            numel *= s
        dev = torch.device("cpu" if device is None else device)
        pair = bufs.get((dtype, dev))
        if pair is None or pair[0].numel() < numel:
            bufs.pop((dtype, dev), None)            # free the smaller pair before allocating
            pair = bufs[(dtype, dev)] = (torch.empty(numel, dtype=dtype, device=dev),
                                         torch.empty(numel, dtype=dtype, device=dev))
        return pair[0][:numel].view(shape), pair[1][:numel].view(shape)
