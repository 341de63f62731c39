"""Synthetic data generated from the seed: ``linear`` regression and ``blobs`` classification."""

from __future__ import annotations

from functools import partial

import numpy as np

from certdp.data import Dataset, register, settings
from certdp.data.params import Field, integer, interval, real
from certdp.data.preprocessing import identity
from certdp.errors import ConfigError

# Generated arrays are held in memory as float64: at most this many rows per part, and rows x
# features at most _MAX_CELLS (800 MB), so that a typo (n_train=4e9) is refused instead of
# exhausting memory.
_MAX_ROWS = 10_000_000
_MAX_CELLS = 100_000_000

# sklearn's random_state takes seeds below 2^32
_SEED = Field(None, partial(integer, lo=0, hi=2 ** 32 - 1, none=True, null_means="the run seed"),
              help="seed of the generated data (null: the run seed)")

LINEAR_FIELDS = {
    "data_seed": _SEED,
    "n_train": Field(40000, partial(integer, lo=2, hi=_MAX_ROWS), help="private training rows"),
    "n_test": Field(2000, partial(integer, lo=1, hi=_MAX_ROWS), help="test queries"),
    "x_low": Field(-1.0, real, help="smallest input x"),
    "x_high": Field(1.0, real, help="largest input x"),
    "slope": Field(2.0, real, help="slope of the true line"),
    "intercept": Field(1.0, real, help="intercept of the true line"),
    "noise": Field(0.1, partial(real, lo=0), help="standard deviation of the label noise"),
    "output_range": Field([-6.0, 6.0], partial(interval, none=True, null_means="no global-sensitivity arms"),
                          help="declared [lo, hi] of the outputs (global-sensitivity arms)"),
}


@register("linear", task="regression", fields=LINEAR_FIELDS, size=lambda params: (params["n_train"], 1, 1),
          summary="y = 2x + 1 + N(0, 0.1^2), x ~ U(x_low, x_high); generated from the seed")
def load_linear(cfg: dict, seed: int) -> Dataset:
    params = settings(cfg, "linear")
    if not params["x_low"] < params["x_high"]:
        raise ConfigError("dataset.x_high", f"got {params['x_high']:g} with dataset.x_low={params['x_low']:g}; "
                                            f"allowed: a number above dataset.x_low")
    rng = np.random.default_rng(seed if params["data_seed"] is None else params["data_seed"])
    n, m = params["n_train"], params["n_test"]
    x = rng.uniform(params["x_low"], params["x_high"], size=(n + m, 1))
    y = params["slope"] * x[:, 0] + params["intercept"] + params["noise"] * rng.standard_normal(n + m)
    if not np.isfinite(x).all():
        raise ConfigError("dataset.x_low", f"[{params['x_low']:g}, {params['x_high']:g}] is too wide for float64; "
                                           f"allowed: bounds whose difference is finite")
    if not np.isfinite(y).all():
        raise ConfigError("dataset.slope", "slope, intercept and noise give non-finite targets; "
                                           "allowed: values whose products with x stay finite in float64")
    # generated from public parameters: nothing is fitted, inputs and targets are used as they are
    prep = identity(("x",), input="generated x", target="y", target_source="generated",
                    output_range=params["output_range"])
    return Dataset("linear", "regression", x[:n], y[:n], x[n:], y[n:], output_range=prep.model_output_range,
                   info={"source": "generated"}, preprocessing=prep)


BLOBS_FIELDS = {
    "data_seed": _SEED,
    "n_features": Field(8, partial(integer, lo=1, hi=10_000), help="input dimension"),
    "n_train": Field(200, partial(integer, lo=2, hi=_MAX_ROWS), help="private training rows"),
    "n_test": Field(4000, partial(integer, lo=1, hi=_MAX_ROWS), help="test rows"),
    "n_public": Field(400, partial(integer, lo=0, hi=_MAX_ROWS),
                      help="public rows (a pool/selection set for PATE and tuned DP-SGD)"),
    "separation": Field(2.563, partial(real, lo=0), help="distance between the two cluster centres"),
    "cluster_std": Field(1.0, partial(real, lo=0, lo_open=True), help="cluster standard deviation"),
}


@register("blobs", task="binary", fields=BLOBS_FIELDS, size=lambda params: (params["n_train"], params["n_features"], 1),
          summary="two Gaussian blobs in R^8 (sklearn make_blobs), labels +-1; generated from the seed")
def load_blobs(cfg: dict, seed: int) -> Dataset:
    """Two isotropic Gaussians N(+-c, sd^2 I) in R^d with ||2c|| = ``separation`` (Bayes accuracy
    Phi(separation / (2 sd)) = 0.90 at the defaults), drawn with sklearn's make_blobs.  Labels are
    +-1 for the hinge classifier.  ``n_public`` extra points (same distribution) form the public
    set the baselines tune on (the paper's blobs setting has none; 0 disables it)."""
    from sklearn.datasets import make_blobs
    params = settings(cfg, "blobs")
    d, n, m, npub = params["n_features"], params["n_train"], params["n_test"], params["n_public"]
    if (n + m + npub) * d > _MAX_CELLS:
        raise ConfigError("dataset.n_features", f"got {d} features x {n + m + npub} rows = {(n + m + npub) * d} values; "
                                                f"allowed: rows x features <= {_MAX_CELLS}")
    sep, sd = params["separation"], params["cluster_std"]
    c = np.full(d, sep / (2 * np.sqrt(d)))
    x, lab = make_blobs(n_samples=n + m + npub, centers=np.stack([c, -c]), cluster_std=sd,
                        n_features=d, random_state=seed if params["data_seed"] is None else params["data_seed"])
    if not np.isfinite(x).all():
        raise ConfigError("dataset.cluster_std", f"got {sd:g}: the generated points are not finite; "
                                                 f"allowed: a finite number > 0 small enough for float64")
    y = np.where(lab == 0, 1.0, -1.0)
    xp, yp = (x[n + m:], y[n + m:]) if npub else (None, None)
    prep = identity(tuple(f"x{j}" for j in range(d)), input="generated points", task="binary",
                    target="label", classes=(-1, 1), label_coding="sign")
    return Dataset("blobs", "binary", x[:n], y[:n], x[n:n + m], y[n:n + m], x_public=xp, y_public=yp,
                   n_classes=2, info={"source": "generated", "separation": sep}, preprocessing=prep)
