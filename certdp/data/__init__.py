"""Datasets: a registry of loaders returning one :class:`Dataset` value.

Add a dataset by writing a loader in one module of this package and decorating it with
:func:`register`, together with the table of its settings (:class:`certdp.data.params.Field`s);
its config is ``configs/dataset/<name>.yaml``.  Loaders receive the dataset config (a dict) and
the seed, must be deterministic in both, and start by parsing the config with :func:`settings`
(typed, range-checked, unknown keys refused), so that a bad value is refused before any file is
read or any training starts.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from certdp.data.params import Field, anything, parse_settings
from certdp.data.preprocessing import Preprocessing
from certdp.registry import Registry
from certdp.errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    """One dataset as the runners see it: private training rows (``x_train``, ``y_train``, the
    records DP protects), test queries, and an optional public split, all already mapped by
    ``preprocessing`` (model units).  ``output_range`` is in model units (for a regression task
    the released value is clipped to it); ``preprocessing.output_range`` is the same range in
    the target's raw units.  ``info`` holds descriptions and public facts only, never a
    statistic of the private rows."""
    name: str
    task: str                         # regression | binary | multiclass
    x_train: np.ndarray               # float64 [N, d]
    y_train: np.ndarray               # float64 (regression), {-1,+1} (binary hinge) or int64 classes
    x_test: np.ndarray
    y_test: np.ndarray
    x_public: np.ndarray | None = None
    y_public: np.ndarray | None = None
    n_classes: int | None = None
    output_range: tuple[float, float] | None = None   # regression, model units: released values are clipped here
    info: dict = field(default_factory=dict)
    preprocessing: Preprocessing | None = None        # raw row -> model input, target/label coding

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def dp_end_to_end(self) -> bool:
        """False when a non-DP shortcut shaped the data (``dataset.scaling=private_stats_not_dp``):
        then the released numbers are not differentially private whatever the certificate says."""
        return self.preprocessing is not None and self.preprocessing.dp_end_to_end

    @property
    def scaling(self) -> str:
        """Where the scaling came from: public, bounds, none, generated, or private_stats_not_dp."""
        return self.preprocessing.scaling if self.preprocessing is not None else "unknown"


def provenance(ds: Dataset) -> dict:
    """The columns every results row carries about how the data was prepared:
    ``dp_end_to_end`` (bool) and ``scaling`` (see :attr:`Dataset.scaling`), and the dataset's own
    labels (``info["row_labels"]``, settings only: imdb's ``data_profile``, ``encoder``, ``subset``)."""
    return {**(ds.info.get("row_labels") or {}), "dp_end_to_end": bool(ds.dp_end_to_end), "scaling": ds.scaling}


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    loader: Callable[[dict, int], Dataset]
    task: str
    summary: str
    files: Callable[[dict], list] = lambda cfg: []     # DataFiles it reads (for `certdp list`)
    fields: dict = field(default_factory=dict)         # its settings: key -> Field(default, parser)
    # (private records, features, outputs) from the settings alone (public metadata of the
    # dataset, no file read), for time estimates (certdp/estimate.py); None: known only once read
    size: Callable[[dict], "tuple[int, int, int] | None"] = lambda cfg: None


REGISTRY: Registry[DatasetEntry] = Registry("dataset")
_MODULES = ("certdp.data.synthetic", "certdp.data.tabular", "certdp.data.adult", "certdp.data.vision", "certdp.data.text")


# Keys every dataset config carries: its name (checked by load_dataset) and the model it
# defaults to (read by certdp.settings.training.model_settings).
COMMON_FIELDS = {"name": Field(None, anything,
                               help="the dataset (dataset=NAME picks its config; certdp list)"), "model": Field(None, anything,
                                                                                                                help="the dataset's default model (arch, hidden, loss), used by model.arch=auto")}


def register(name: str, *, task: str, summary: str, files=None, fields: dict | None = None, size=None):
    def deco(fn):
        REGISTRY[name] = DatasetEntry(name, fn, task, summary, files or (lambda cfg: []),
                                      {**COMMON_FIELDS, **(fields or {})}, size or (lambda cfg: None))
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


def _entry(name) -> DatasetEntry:
    _load_modules()
    if not isinstance(name, str) or name not in REGISTRY:
        raise ConfigError("dataset", f"unknown dataset '{name}'; allowed: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def settings(cfg: dict | None, name: str) -> dict:
    """The config of dataset ``name`` parsed against its registered fields: every key typed and
    range-checked, absent keys filled with the loader's defaults, unknown keys refused (each
    failure a one-line :class:`ConfigError` naming ``dataset.<key>``).  Idempotent."""
    return parse_settings(cfg, _entry(name).fields, prefix="dataset", owner=f"dataset '{name}'")


def dataset_settings(cfg: dict) -> dict:
    """Validate a whole ``dataset:`` section (its ``name`` and every setting) without loading
    anything: what a run can call first, before any other work."""
    return settings(cfg, (cfg or {}).get("name"))


def dataset_size(cfg: dict) -> "tuple[int, int, int] | None":
    """(private records, features, model outputs) of the ``dataset:`` section from its settings
    alone (no file is read; None where only reading tells, e.g. a user's csv): what the time
    estimates of :mod:`certdp.estimate` scale with."""
    entry = _entry((cfg or {}).get("name"))
    return entry.size(settings(cfg, entry.name))


def load_dataset(cfg: dict, seed: int) -> Dataset:
    return _entry((cfg or {}).get("name")).loader(cfg, seed)


def standardise(train: np.ndarray, *others: np.ndarray, key: str = "dataset", columns=None,
                source: str | None = None):
    """``(a - mean) / sd`` with the training rows' per-column mean and sd, for ``train`` and
    each of ``others``; returns ``([train, *others], (mean, sd))``.

    A column constant on the training rows (sd at most 1e-12 of its largest magnitude, which
    also catches the rounding noise of a constant column) keeps sd = 1.  Statistics that are
    not finite (values so large that the variance overflows float64, e.g. 1e300) raise a
    one-line :class:`ConfigError` under ``key`` naming the column (``columns``) and the file
    (``source``): zeroing such a column silently would train on something else than the data."""
    train = np.asarray(train, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        mu = train.mean(0)
        sd = train.std(0)
        scale = np.abs(train).max(0) if train.size else np.zeros(train.shape[1:])
    bad = ~(np.isfinite(mu) & np.isfinite(sd))
    if bad.any():
        j = int(np.flatnonzero(np.atleast_1d(bad))[0])
        name = f"column {columns[j]!r}" if columns is not None else f"column {j + 1}"
        where = f" of {source}" if source else ""
        raise ConfigError(key, f"{name}{where} holds values up to {float(np.atleast_1d(scale)[j]):.3g}, whose "
                               f"variance overflows float64; allowed: values well below 1e150 (rescale the "
                               f"column, e.g. divide it by a power of 10)")
    sd = np.where(sd > 1e-12 * scale, sd, 1.0)
    return [(np.asarray(a, np.float64) - mu) / sd for a in (train, *others)], (mu, sd)
