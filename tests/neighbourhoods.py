"""Neighbouring datasets for containment checks, placed where the batch plan hurts a certificate most.

Used by the soundness tests and by ``benchmarks/containment.py`` (which runs the same checks with
thousands of neighbours).  :func:`neighbours` returns R datasets at substitution distance exactly
k from (x, y), stacked as [R, N, d] / [R, N] for one batched retraining;
:func:`assert_contains_neighbours` retrains them for every placement and radius and checks that
each final parameter vector lies in the envelope T_k; :func:`toy_data` makes the small
regression / hinge / softmax training sets those checks run on (:func:`toy_problem`: with model,
settings and plan); :func:`table_neighbour` substitutes one row of a raw table (the data pipeline's
privacy tests).  The one home of neighbouring datasets in the tests.

Placements (which indices are substituted):

* ``random``    k indices uniformly among those the plan uses;
* ``frequent``  the k indices that occur in the most batches (ties broken at random);
* ``last``      indices of the last batch of an epoch (earlier batches of the same epoch when k > b);
* ``multi``     indices taken from the last batches of different epochs;
* ``boundary``  indices of the last batch of epoch e and the first batch of epoch e + 1.

Replacements (what the substituted records become), cycled over the R datasets:

* ``wide``      features and labels drawn from a range ten times the data's;
* ``flip``      the same features with the label flipped (hinge), moved to another class (ce) or
                reflected far outside the labels (mse);
* ``saturate``  huge features with one sign pattern per dataset and an extreme label, so that
                every clipped gradient coordinate sits at +gamma or -gamma.
"""

from __future__ import annotations

import pandas as pd
import torch

from certdp.training import train

PLACEMENTS = ("random", "frequent", "last", "multi", "boundary")
REPLACEMENTS = ("wide", "flip", "saturate")


def _indices(placement: str, k: int, plan: torch.Tensor, n: int, epoch: int, gen: torch.Generator) -> list[int]:
    T, b = plan.shape
    used = plan.reshape(-1).unique()
    if placement == "random":
        return used[torch.randperm(len(used), generator=gen)[:k]].tolist()
    if placement == "frequent":
        counts = torch.bincount(plan.reshape(-1), minlength=n).to(torch.float64)
        key = counts + 0.5 * torch.rand(n, generator=gen, dtype=torch.float64)
        return torch.argsort(key, descending=True)[:k].tolist()
    n_ep = max(1, -(-T // epoch))
    if placement in ("last", "multi"):
        pool: list[int] = []
        rounds = 0
        while len(pool) < k and rounds < 10 * (k + 1):
            e = n_ep - 1 if placement == "last" else int(torch.randint(0, n_ep, (1,), generator=gen))
            t_last = min(T - 1, (e + 1) * epoch - 1)
            back = (rounds // n_ep if placement == "multi" else len(pool) // b)
            t = max(e * epoch, t_last - back)
            for i in plan[t][torch.randperm(b, generator=gen)].tolist():
                if i not in pool:
                    pool.append(i)
                    if placement == "multi":
                        break
                if len(pool) >= k:
                    break
            rounds += 1
        return (pool + [i for i in used.tolist() if i not in pool])[:k]
    if placement == "boundary":
        e = int(torch.randint(0, max(1, n_ep - 1), (1,), generator=gen))
        t1, t2 = min(T - 1, (e + 1) * epoch - 1), min(T - 1, (e + 1) * epoch)
        a, c = plan[t1].tolist(), plan[t2].tolist()
        both = [i for i in a if i in set(c)]
        pool = both + [v for pair in zip(a, c) for v in pair]
        out: list[int] = []
        for i in pool + used.tolist():
            if i not in out:
                out.append(i)
        return out[:k]
    raise ValueError(f"unknown placement {placement!r}")


def neighbours(x: torch.Tensor, y: torch.Tensor, *, k: int, R: int, plan: torch.Tensor, loss: str,
               placement: str, gen: torch.Generator, n_classes: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """R datasets ([R, N, d], [R, N]) with exactly k records of (x, y) substituted (module docstring).
    ``loss``: ``mse`` (real labels), ``hinge`` (labels +-1) or ``ce`` (classes 0..n_classes-1)."""
    n, d = x.shape
    b = plan.shape[1]
    epoch = max(1, n // b) if b < n else 1
    X = x.unsqueeze(0).repeat(R, 1, 1)
    Y = y.unsqueeze(0).repeat(R, 1)
    span = float(x.abs().max()) + 1.0
    for r in range(R):
        idx = torch.as_tensor(_indices(placement, k, plan, n, epoch, gen))
        kind = REPLACEMENTS[r % len(REPLACEMENTS)]
        kk = len(idx)
        if kind == "wide":
            X[r, idx] = (torch.rand(kk, d, generator=gen, dtype=x.dtype) * 2 - 1) * 10 * span
        elif kind == "saturate":
            sign = torch.where(torch.rand(d, generator=gen) < 0.5, -1.0, 1.0).to(x.dtype)
            X[r, idx] = sign * 100 * span
        if loss == "mse":
            ymax = float(y.abs().max()) + 1.0
            if kind == "wide":
                Y[r, idx] = (torch.rand(kk, generator=gen, dtype=y.dtype) * 2 - 1) * 10 * ymax
            elif kind == "flip":
                Y[r, idx] = -10 * ymax * torch.sign(y[idx] + 0.5)
            else:
                Y[r, idx] = (1.0 if r % 2 else -1.0) * 100 * ymax
        elif loss == "hinge":
            if kind == "flip":
                Y[r, idx] = -y[idx]
            else:
                Y[r, idx] = torch.where(torch.rand(kk, generator=gen) < 0.5, -1, 1).to(y.dtype)
        else:
            shift = torch.randint(1, n_classes, (kk,), generator=gen)
            Y[r, idx] = ((y[idx].long() + shift) % n_classes).to(y.dtype)
    return X, Y


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
