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


@register("blobs", task="binary", summary="two Gaussian blobs in R^8 (sklearn make_blobs), labels +-1; generated from the seed")
def load_blobs(cfg: dict, seed: int) -> Dataset:
    """Two isotropic Gaussians N(+-c, sd^2 I) in R^d with ||2c|| = ``separation`` (Bayes accuracy
    Phi(separation / (2 sd)) = 0.90 at the defaults), drawn with sklearn's make_blobs.  Labels are
    +-1 for the hinge classifier.  ``n_public`` extra points (same distribution) form the public
    set the baselines tune on (the paper's blobs setting has none; 0 disables it)."""
    from sklearn.datasets import make_blobs
    from certdp.errors import ConfigError
    d = int(cfg.get("n_features", 8))
    n, m, npub = int(cfg.get("n_train", 200)), int(cfg.get("n_test", 4000)), int(cfg.get("n_public", 0))
    sep, sd = float(cfg.get("separation", 2.563)), float(cfg.get("cluster_std", 1.0))
    if d < 1 or n < 2 or m < 1 or npub < 0:
        raise ConfigError("dataset", f"blobs needs n_features >= 1, n_train >= 2, n_test >= 1, n_public >= 0 (got {d}, {n}, {m}, {npub})")
    c = np.full(d, sep / (2 * np.sqrt(d)))
    x, lab = make_blobs(n_samples=n + m + npub, centers=np.stack([c, -c]), cluster_std=sd,
                        n_features=d, random_state=int(cfg.get("data_seed", seed)))
    y = np.where(lab == 0, 1.0, -1.0)
    xp, yp = (x[n + m:], y[n + m:]) if npub else (None, None)
    return Dataset("blobs", "binary", x[:n], y[:n], x[n:n + m], y[n:n + m], x_public=xp, y_public=yp,
                   n_classes=2, info={"source": "generated", "separation": sep})
