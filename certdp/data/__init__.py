"""Datasets: a registry of loaders returning one :class:`Dataset` value.

Add a dataset by writing a loader in one module of this package and decorating it with
:func:`register`; its config is ``configs/dataset/<name>.yaml``.  Loaders receive the dataset
config (a dict) and the seed, and must be deterministic in both.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from certdp.errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str                         # regression | binary | multiclass
    x_train: np.ndarray               # float64 [N, d]
    y_train: np.ndarray               # float64 (regression), {-1,+1} (binary hinge) or int64 classes
    x_test: np.ndarray
    y_test: np.ndarray
    x_public: np.ndarray | None = None
    y_public: np.ndarray | None = None
    n_classes: int | None = None
    output_range: tuple[float, float] | None = None   # regression: released values are clipped here
    info: dict = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    loader: Callable[[dict, int], Dataset]
    task: str
    summary: str
    files: Callable[[dict], list] = lambda cfg: []     # DataFiles it reads (for `certdp list`)


REGISTRY: dict[str, DatasetEntry] = {}
_MODULES = ("certdp.data.synthetic", "certdp.data.tabular", "certdp.data.vision", "certdp.data.text")


def register(name: str, *, task: str, summary: str, files=None):
    def deco(fn):
        REGISTRY[name] = DatasetEntry(name, fn, task, summary, files or (lambda cfg: []))
        return fn
    return deco


def _load_modules() -> None:
    for m in _MODULES:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as e:
            if e.name != m:
                raise


def entries() -> dict[str, DatasetEntry]:
    _load_modules()
    return dict(sorted(REGISTRY.items()))


def load_dataset(cfg: dict, seed: int) -> Dataset:
    _load_modules()
    name = cfg.get("name")
    if name not in REGISTRY:
        raise ConfigError("dataset", f"unknown dataset '{name}'; allowed: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name].loader(cfg, seed)


def split_indices(n: int, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    return perm[n_test:], perm[:n_test]


def standardise(train: np.ndarray, *others: np.ndarray):
    mu = train.mean(0)
    sd = train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return [(a - mu) / sd for a in (train, *others)], (mu, sd)
