"""Neighbouring datasets placed where the batch plan hurts a certificate most: the one generator
of the soundness tests (tests/neighbourhoods.py) and of ``benchmarks/containment.py`` (the same
checks with thousands of neighbours).  :func:`neighbours` returns R datasets at substitution
distance exactly k from (x, y), stacked as [R, N, d] / [R, N] for one batched retraining;
:func:`placement_indices` the k indices one placement substitutes.

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

import torch


PLACEMENTS = ("random", "frequent", "last", "multi", "boundary")
REPLACEMENTS = ("wide", "flip", "saturate")


def placement_indices(placement: str, k: int, plan: torch.Tensor, n: int, epoch: int, gen: torch.Generator) -> list[int]:
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
        idx = torch.as_tensor(placement_indices(placement, k, plan, n, epoch, gen))
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
