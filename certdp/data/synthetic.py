"""Synthetic data generated from the seed: ``linear`` regression and ``blobs`` classification."""

from __future__ import annotations

import numpy as np

from certdp.data import Dataset, register


@register("linear", task="regression", summary="y = 2x + 1 + N(0, 0.1^2), x ~ U(x_low, x_high); generated from the seed")
def load_linear(cfg: dict, seed: int) -> Dataset:
    rng = np.random.default_rng(int(cfg.get("data_seed", seed)))
    n, m = int(cfg.get("n_train", 40000)), int(cfg.get("n_test", 2000))
    lo, hi = float(cfg.get("x_low", -1.0)), float(cfg.get("x_high", 1.0))
    slope, icpt, noise = float(cfg.get("slope", 2.0)), float(cfg.get("intercept", 1.0)), float(cfg.get("noise", 0.1))
    x = rng.uniform(lo, hi, size=(n + m, 1))
    y = slope * x[:, 0] + icpt + noise * rng.standard_normal(n + m)
    rng_range = cfg.get("output_range")
    return Dataset("linear", "regression", x[:n], y[:n], x[n:], y[n:],
                   output_range=tuple(rng_range) if rng_range is not None else None,
                   info={"source": "generated"})
