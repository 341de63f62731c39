"""Accuracy metrics shared by the runners (fractions in [0, 1], float64)."""

from __future__ import annotations

import numpy as np
import torch

from certdp import DTYPE


def accuracy(model, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accuracy of ``model`` with parameters ``theta`` [..., P] on (x, y): a tensor [...].
    Labels are {-1, +1} for the hinge loss and class indices otherwise."""
    pred = model.classify(theta, x)
    yy = y.to(pred.dtype) if model.loss.name == "hinge" else y
    return (pred == yy).to(DTYPE).mean(-1)


def majority_rate(y: torch.Tensor) -> float:
    """Accuracy of always predicting the most frequent label of ``y``."""
    _, counts = torch.unique(y, return_counts=True)
    return float(counts.max()) / len(y)


def quantile_summary(values, prefix: str) -> dict[str, float]:
    """Median, mean and quartiles of accuracies over noise draws, as result columns
    ``{prefix}median``, ``{prefix}mean``, ``{prefix}q25``, ``{prefix}q75`` (in that order)."""
    a = np.asarray(values, float)
    return {f"{prefix}median": float(np.median(a)), f"{prefix}mean": float(a.mean()),
            f"{prefix}q25": float(np.quantile(a, 0.25)), f"{prefix}q75": float(np.quantile(a, 0.75))}
