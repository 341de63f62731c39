"""What one AGT pass carries: :class:`Pass` (what does not change from step to step: the engine,
the data, the plan, the rows, the watchers) and :class:`LoopState` (what does: the boxes, the
nominal run, the trivial cover and the ledger's position in its epoch), the one object the loops
of :mod:`certdp.agt.steps` and :mod:`certdp.agt.ledger` hand from step to step and checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from certdp.bounds.base import Batch, Certificate
from certdp.bounds.interval import Interval, outward
from certdp.checkpoint import Calibration
from certdp.models import ModelSpec
from certdp.training import TrainSettings


@dataclass(frozen=True, eq=False)
class Pass:
    """The fixed context of one pass: ``rows`` [K + 1] the radius of each box row (0 first: the
    nominal), ``order`` the plan's steps, ``limit`` the radius from which rows are the trivial
    cover (:meth:`Certificate.schedule`), ``epoch`` the ledger's E (or None), ``chunk`` the rows
    per engine call, ``check`` AGT's crossing guard, ``step_boxes`` the callback handed to
    window engines, ``trace`` (a list, or None) the per-step boxes, ``clock`` the estimate."""

    cert: Certificate
    model: ModelSpec
    data: Batch
    plan: torch.Tensor
    settings: TrainSettings
    rows: torch.Tensor
    order: list
    limit: int
    epoch: int | None
    chunk: int
    check: Callable
    step_boxes: Callable | None
    trace: list | None
    progress: bool
    clock: Calibration

    @property
    def b(self) -> int:
        return self.plan.shape[1]

    @property
    def full(self) -> bool:
        return self.plan.shape[1] == self.data.x.shape[0]

    @property
    def grade(self) -> torch.Tensor:
        """[K + 1, 1]: the graded widening's multiplier i of row i (module docstring)."""
        return torch.arange(len(self.rows), dtype=self.data.x.dtype, device=self.rows.device).unsqueeze(-1)

    def batch(self, t: int) -> Batch:
        """The records of step ``t`` (all of them in a full-batch plan)."""
        x, y = self.data
        return Batch(x, y) if self.full else Batch(x[self.plan[t]], y[self.plan[t]])

    def bar(self, items, desc: str):
        return tqdm(items, desc=desc, disable=not self.progress, leave=False)


@dataclass
class LoopState:
    """The boxes ``lo``/``hi`` (one row per computed row of the loop), the nominal run ``theta``,
    the trivial cover ``c_lo``/``c_hi`` and, in the per-epoch ledger, the steps ``s`` taken in the
    current epoch.  ``saved`` names the checkpoint keys of the boxes (the ledger's are B_lo, B_hi)."""

    lo: torch.Tensor
    hi: torch.Tensor
    theta: torch.Tensor
    c_lo: torch.Tensor
    c_hi: torch.Tensor
    s: int = 0

    def magnitude(self) -> float:
        """The cover's largest coordinate: a data-independent bound on every box."""
        return float(torch.maximum(self.c_hi.abs(), self.c_lo.abs()).max())

    def advance_cover(self, settings: TrainSettings) -> None:
        self.c_lo, self.c_hi = trivial_step(self.c_lo, self.c_hi, settings)

    def saved(self, keys: tuple[str, str], with_s: bool) -> dict:
        d = {keys[0]: self.lo, keys[1]: self.hi, "theta": self.theta, "c_lo": self.c_lo, "c_hi": self.c_hi}
        if with_s:
            d["s"] = self.s
        return d

    def restore(self, saved: dict, keys: tuple[str, str], device) -> None:
        self.lo, self.hi, self.theta, self.c_lo, self.c_hi = (saved[k].to(device) for k in
                                                              (*keys, "theta", "c_lo", "c_hi"))
        if "s" in saved:
            self.s = int(saved["s"])


def resume(state: LoopState, lp, clock: Calibration, *, keys: tuple[str, str], done_steps) -> int:
    """Restore ``state`` from the checkpointed loop ``lp`` (if it holds one) and return the index
    of the first block still to run; ``done_steps(first)`` counts the steps done before it (the
    estimate counts the steps this process does; the first of them compiles)."""
    if lp is None or lp.state is None:
        return 0
    state.restore(lp.state, keys, state.lo.device)
    first = lp.step
    if clock is not None:
        clock.done = clock.base = done_steps(first)
        clock.skip = clock.done + (1 if clock.steps - clock.done > 2 else 0)
    return first


def trivial_step(lo: torch.Tensor, hi: torch.Tensor, settings: TrainSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The step of any box when every clipped gradient coordinate may be anything in [-gamma,
    gamma] (a whole batch substituted), widened outward against rounding."""
    lam, step = settings.contraction, settings.lr * settings.clip
    nb = outward(Interval(lam * lo - step, lam * hi + step), rel=1e-12, abs_=1e-14)
    return nb.lo, nb.hi


def even_chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """(start, stop) of chunks of at most ``chunk`` rows, all of one size: the last one starts
    earlier and overlaps its predecessor (each row's bounds depend on that row alone), so that a
    compiled engine sees a single shape and never recompiles for a remainder."""
    parts = -(-n // max(chunk, 1))
    size = -(-n // parts)
    return [(min(s, n - size), min(s, n - size) + size) for s in range(0, n, size)]


def intersect_down(lo, hi):
    """T_k is valid for every radius below k as well: a running max/min from the largest radius
    (rows 1.., radius 0 apart)."""
    lo, hi = lo.clone(), hi.clone()
    lo[1:] = torch.flip(torch.cummax(torch.flip(lo[1:], [0]), 0).values, [0])
    hi[1:] = torch.flip(torch.cummin(torch.flip(hi[1:], [0]), 0).values, [0])
    return lo, hi
