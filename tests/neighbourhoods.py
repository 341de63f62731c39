"""Neighbouring datasets for containment checks, placed where the batch plan hurts a certificate most.

Used by the soundness tests and by ``benchmarks/containment.py`` (which runs the same checks with
thousands of neighbours).  :func:`neighbours` returns R datasets at substitution distance exactly
k from (x, y), stacked as [R, N, d] / [R, N] for one batched retraining;
:func:`assert_contains_neighbours` retrains them for every placement and radius and checks that
each final parameter vector lies in the envelope T_k; :func:`toy_data` makes the small
regression / hinge / softmax training sets those checks run on (:func:`toy_problem`: with model,
settings and plan); :func:`table_neighbour` substitutes one row of a raw table (the data pipeline's
privacy tests).  The generator itself (placements, replacements) is :mod:`certdp.neighbours`.

"""

from __future__ import annotations

import pandas as pd
import torch

from certdp.neighbours import PLACEMENTS, REPLACEMENTS, neighbours  # noqa: F401 (the tests' one import)
from certdp.training import train



def toy_data(loss: str, n: int, d: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n records with features uniform in [-1, 1]^d and labels for ``loss``: ``mse`` a noisy linear
    target, ``hinge`` a noisy sign of the first feature (+-1), otherwise three classes 0, 1, 2."""
    x = torch.rand(n, d, generator=gen, dtype=torch.float64) * 2 - 1
    if loss == "mse":
        y = x.sum(1) * 1.5 + 0.5 + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(x[:, 0] + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64) > 0, 1, -1)
    else:
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0.3).long()
    return x, y


def toy_problem(widths, loss: str, n: int, b: int, steps: int, lr: float, clip: float, *, data_seed: int,
                train_seed: int):
    """A small training problem for the containment tests: the model, :func:`toy_data` drawn from a
    generator seeded with ``data_seed`` (returned too, for the neighbours), clipped SGD settings and
    the batch plan.  Returns (model, x, y, settings, plan, generator)."""
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings, batch_plan
    gen = torch.Generator().manual_seed(data_seed)
    m = ModelSpec(widths, loss)
    x, y = toy_data(loss, n, widths[0], gen)
    train_settings = TrainSettings(steps=steps, lr=lr, clip=clip, batch_size=b, seed=train_seed)
    return m, x, y, train_settings, batch_plan(n, train_settings), gen


def assert_contains_neighbours(env, model, theta0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, settings, *,
                               ks, R: int, plan: torch.Tensor, loss: str, gen: torch.Generator,
                               n_classes: int = 2, tol: float = 1e-9, steps: range | None = None) -> None:
    """For each radius ``ks[j]`` and every placement, retrain R neighbours of (x, y) from ``theta0``
    on ``plan`` (only its ``steps`` when given: a window) and assert that all of them lie in
    column j of ``env`` (T_k, up to ``tol``)."""
    for j, k in enumerate(ks):
        for placement in PLACEMENTS:
            X, Y = neighbours(x, y, k=k, R=R, plan=plan, loss=loss, placement=placement, gen=gen,
                              n_classes=n_classes)
            tht = train(model, theta0.expand(R, -1), X, Y, settings, plan=plan, steps=steps)
            inside = env.contains(tht, tol=tol)[:, j]
            assert bool(inside.all()), f"{int((~inside).sum())}/{R} {placement} neighbours at k={k} escape T_k"


def table_neighbour(frame: pd.DataFrame, row: int, target: str) -> pd.DataFrame:
    """``frame`` with the record ``row`` substituted by an outlier: its target 50 times the largest
    |target| and its first column 1000 times that column's largest magnitude (plus one)."""
    other = frame.copy()
    other.loc[row, target] = 50 * frame[target].abs().max()
    other.loc[row, other.columns[0]] = 1000 * frame[other.columns[0]].abs().max() + 1
    return other
