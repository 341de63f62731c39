"""The nominal training algorithm M(f, theta_init, D).

Clipped (S)GD with an optional contraction, exactly the algorithm AGT certifies:

    g_i   = clip(grad_theta l(f_theta(x_i), y_i), -gamma, gamma)        (element-wise)
    theta <- lam * theta - lr * (1/b) * sum_{i in B_t} g_i

``B_t`` is step t's batch from a *fixed batch plan* drawn from the seed before training: the
plan depends only on (N, batch_size, steps, seed), never on the data, so a neighbouring dataset
(same size, some records substituted) is trained on the same index batches.  ``lam = 1`` is
plain clipped GD; ``lam < 1`` is the paper's "contractive clipped GD".  Everything is float64, on
the device of the inputs (or the ``device`` given): the plan is drawn on the CPU, so it is the same
on every device.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from certdp import DTYPE, checkpoint
from certdp.data.params import SEED, check_settings, integer, real, setting
from certdp.errors import ConfigError
from certdp.models import ModelSpec


MAX_STEPS = 10 ** 7          # a fixed batch plan of more steps would not fit in memory


def _batch_size(value: Any, key: str) -> int | None:
    if value == "full":
        return None
    return integer(value, key, lo=1, none=True, null_means="full batch")


@dataclass(frozen=True)
class TrainSettings:
    """``train``: the nominal algorithm.  Each field is the one declaration of its setting
    (default, range, help; :func:`certdp.data.params.setting`): the ``train`` section is read
    against it, the settings reference and the YAML check read it, and a value built directly is
    checked against it (``__post_init__``)."""
    steps: int = setting(20, partial(integer, lo=1, hi=MAX_STEPS),
                         help="training steps T of the nominal algorithm (clipped gradient descent)")
    lr: float = setting(0.3, partial(real, lo=0, lo_open=True), help="learning rate eta")
    clip: float = setting(1.0, partial(real, lo=0, lo_open=True),
                          help="gradient clipping bound gamma (element-wise, per sample)")
    batch_size: int | None = setting(None, _batch_size, help="records per batch (null or full: full batch)")
    contraction: float = setting(1.0, partial(real, lo=0, lo_open=True, hi=1),
                                 help="lambda: the parameters are scaled by lambda each step (1: plain clipped GD)")
    # null: the run seed (certdp.settings.training.train_settings); outside a run, seed 0
    seed: int | None = setting(None, partial(SEED.func, **SEED.keywords, none=True, null_means="the run seed"),
                               help="seed of the initialisation and the batch plan (null: the run seed)")

    def __post_init__(self):
        check_settings(self, "train")
        if self.seed is None:           # built outside a run: the run seed's own default
            object.__setattr__(self, "seed", 0)


def batch_plan(n: int, settings: TrainSettings) -> torch.Tensor:
    """Index batches [steps, b]: consecutive slices of per-epoch permutations drawn from the
    seed (full batch: every step uses all indices in order).  Batches never straddle epochs;
    a short tail of an epoch is dropped so that every batch has exactly b indices."""
    b = n if settings.batch_size is None or settings.batch_size >= n else int(settings.batch_size)
    if b == n:
        return torch.arange(n, device="cpu").expand(settings.steps, n)
    g = torch.Generator().manual_seed(int(settings.seed) + 7919)
    per_epoch = n // b
    rows = []
    while len(rows) < settings.steps:
        perm = torch.randperm(n, generator=g, device="cpu")
        rows += list(perm[: per_epoch * b].view(per_epoch, b))
    return torch.stack(rows[: settings.steps])


def clipped_step(model: ModelSpec, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 settings: TrainSettings, *, noise: torch.Tensor | None = None) -> torch.Tensor:
    """One step of the nominal algorithm -- its one home: :func:`train`, AGT's nominal track
    (certdp/agt.py) and the matched DP-SGD baseline (certdp/baselines.py) all call it.

    ``noise`` (a draw [..., P], in gradient-sum units): the matched DP-SGD step
    ``lam theta - (lr / b) (sum_i g_i + noise)`` instead of the mean form (the two differ in
    rounding only, so each keeps its own arithmetic).  The clip is NaN-safe: an infinite gradient coordinate
    is clipped like any other (what exact arithmetic gives) and a NaN one (0 * inf, inf - inf)
    counts as 0, so a NaN never reaches a parameter.  Neither happens in a run that passed
    :func:`check_magnitudes` (every number stays far below overflow), which is what makes the
    nominal run's success independent of the data rather than a hope.  (Containment of the
    envelopes is argued inside that bound only: a run beyond it -- absurd settings on a dataset
    without a declared input bound -- is not claimed sound and is refused by the certify
    layer's finite checks once its bounds overflow.)"""
    g = torch.nan_to_num(model.per_sample_grads(theta, x, y), nan=0.0).clamp(-settings.clip, settings.clip)
    if noise is not None:
        return settings.contraction * theta - (settings.lr / g.shape[-2]) * (g.sum(-2) + noise)
    return settings.contraction * theta - settings.lr * g.mean(dim=-2)


# Numbers a run may compute, by the a-priori bound of check_magnitudes: far below float64's 1.8e308,
# leaving room for the sums over batches and radii and the products of the interval passes.
MAGNITUDE_LIMIT = 1e250


def parameter_bound(settings: TrainSettings) -> float:
    """A bound on |theta_p| for every parameter the algorithm can reach from the initialisation
    (|theta_0| <= 1: U(+-1/sqrt(fan_in))), on any dataset: each step is
    lam * theta - lr * mean(clipped g) with |clipped g| <= gamma and lam <= 1, so
    |theta_t| <= 1 + t * lr * gamma.  AGT's envelopes stay inside it too (they are intersected
    with the trivial cover and widened by a relative 1e-12 per step; the 1% absorbs that)."""
    return 1.01 * (1.0 + settings.steps * settings.lr * settings.clip)


def check_magnitudes(model: ModelSpec, settings: TrainSettings, *, input_bound: float | None,
                     target_bound: float | None = None) -> float | None:
    """Refuse, before any training and from the settings alone, a run whose numbers could
    overflow float64; return the a-priori bound (None when the dataset declares no input bound).

    Why the outcome is then data-independent: with every model input clipped to
    ``input_bound`` (a setting: ``dataset.clip_sd``, or 1 with declared feature bounds) and
    every parameter and envelope within :func:`parameter_bound`, every activation, output
    gradient, delta and per-sample gradient of the nominal and the interval passes is at most
    :meth:`ModelSpec.magnitude_bound` in absolute value, whatever the private records hold.
    Below ``MAGNITUDE_LIMIT`` nothing overflows, so no NaN or infinity arises (the softmax
    bounds are log-sum-exp, finite for finite logits: certdp/losses.py), and the "training
    diverged" and "envelope not finite" refusals cannot be triggered by a record.  The one
    exception is a multi-release AGS window started from a *noisy* release, which may lie
    outside the bound with the probability of a Cauchy draw beyond ~1e100 (below 1e-99)."""
    if input_bound is None:
        return None
    R = parameter_bound(settings)
    m = model.magnitude_bound(input_bound=input_bound, param_bound=R, target_bound=target_bound)
    if not m <= MAGNITUDE_LIMIT:
        raise ConfigError("train.lr", f"the a-priori bound on the numbers training computes is {m:.3g} (inputs up "
                                      f"to {input_bound:g}, parameters up to 1 + steps*lr*clip = {R:.3g}, widths "
                                      f"{list(model.widths)}), beyond float64; allowed: settings that keep it below "
                                      f"{MAGNITUDE_LIMIT:g}: a smaller train.lr, train.steps or train.clip, a smaller "
                                      f"dataset.clip_sd, or a narrower model")
    return m


def train(model: ModelSpec, theta_init: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
          settings: TrainSettings, plan: torch.Tensor | None = None,
          steps: range | None = None, device: torch.device | str | None = None,
          resumable: str | None = None) -> torch.Tensor:
    """Run the nominal algorithm and return the final parameters.

    ``x`` may carry leading batch dims ([R, N, d]) with ``theta_init`` [R, P] to retrain R
    neighbouring datasets at once.  ``steps`` restricts training to a window of the plan
    (used by multi-release AGS).  ``device`` (default: that of ``x``): where training runs; the
    parameters are returned there.  ``resumable``: the phase name under which the loop is
    checkpointed and reports progress (:mod:`certdp.checkpoint`; None: neither)."""
    dev = x.device if device is None else torch.device(device)
    x = x.to(device=dev, dtype=DTYPE)
    y = model.loss.labels(y).to(dev)
    plan = (batch_plan(x.shape[-2], settings) if plan is None else plan).to(dev)
    theta = theta_init.to(device=dev, dtype=DTYPE).clone()
    full = plan.shape[1] == x.shape[-2]
    order = list(range(settings.steps) if steps is None else steps)
    with (checkpoint.current().loop(resumable, total=len(order)) if resumable else contextlib.nullcontext()) as lp:
        done = 0
        if lp is not None and lp.state is not None:
            theta, done = lp.state["theta"].to(dev), lp.step
        for i in range(done, len(order)):
            t = order[i]
            if full:
                xb, yb = x, y
            else:
                idx = plan[t]
                xb, yb = x[..., idx, :], y[..., idx]
            theta = clipped_step(model, theta, xb, yb, settings)
            if lp is not None:
                lp.tick(i + 1, lambda: {"theta": theta})
        if lp is not None:
            lp.finish(lambda: {"theta": theta})
    return theta
