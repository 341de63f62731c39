"""Feature maps fitted on the **public** data only, and the label coding of binary tasks.

Anything fitted on the private training set (a mean, a scale, a projection) would make the
features themselves a function of the private data, outside what AGT certifies.  So every
statistic here is computed from ``x_public`` and then applied, unchanged, to the private and
test sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certdp.data.preprocessing import Preprocessing
from certdp.errors import ConfigError


@dataclass(frozen=True)
class PublicPCA:
    """``z = ((x - in_mean) / in_sd) @ components.T``, then ``(z - out_mean) / out_sd``.

    ``components`` [k, d] are the top-k right singular vectors of the centred (optionally
    standardised) public data, each signed so that its largest-magnitude loading is positive
    (a deterministic choice; SVD signs are arbitrary).  ``out_mean``/``out_sd`` standardise
    the k scores with public statistics."""
    in_mean: np.ndarray
    in_sd: np.ndarray
    components: np.ndarray
    out_mean: np.ndarray
    out_sd: np.ndarray
    explained: float                  # fraction of the public variance kept by the k components

    def transform(self, x: np.ndarray) -> np.ndarray:
        z = ((np.asarray(x, np.float64) - self.in_mean) / self.in_sd) @ self.components.T
        return (z - self.out_mean) / self.out_sd


def _safe_sd(a: np.ndarray) -> np.ndarray:
    sd = a.std(0)
    return np.where(sd > 1e-12, sd, 1.0)


def fit_public_pca(x_public: np.ndarray, k: int, *, standardise_inputs: bool = False,
                   key: str = "dataset.pca_dim") -> PublicPCA:
    """Fit PCA-``k`` on the public rows only (see :class:`PublicPCA`)."""
    x = np.asarray(x_public, np.float64)
    n, d = x.shape
    if not 1 <= int(k) <= min(n, d):
        raise ConfigError(key, f"got {k}; allowed: an integer in [1, {min(n, d)}] (public rows x features = "
                               f"{n} x {d})")
    k = int(k)
    mu = x.mean(0)
    sd = _safe_sd(x) if standardise_inputs else np.ones(d)
    xc = (x - mu) / sd
    _, s, vt = np.linalg.svd(xc, full_matrices=False)
    comps = vt[:k]
    signs = np.sign(comps[np.arange(k), np.abs(comps).argmax(1)])
    comps = comps * np.where(signs == 0, 1.0, signs)[:, None]
    z = xc @ comps.T
    var = s ** 2
    return PublicPCA(mu, sd, comps, z.mean(0), _safe_sd(z), float(var[:k].sum() / max(var.sum(), 1e-300)))


def fit_public_map(cfg: dict, x_public: np.ndarray, *, default_dim: int, standardise_inputs: bool = False,
                   columns=None, input: str = "feature columns", bounds: tuple[float, float] | None = None,
                   clip: float | None = None) -> tuple[Preprocessing, dict]:
    """The feature map of ``dataset.features``, fitted on the public rows only: ``pca``
    (PCA-``dataset.pca_dim``, scores standardised with public statistics) or ``raw`` (inputs
    standardised with public statistics).  Returns the map (a :class:`Preprocessing`) and an
    info dict.  ``columns`` names the input columns (default ``x0, x1, ...``).

    What makes it total on private rows (``apply(..., private=True)``: a missing value takes the
    public mean, nothing is refused): ``bounds`` ``(lo, hi)``, a declared range of every raw value
    (MNIST pixels [0, 1], unit-length embeddings [-1, 1]), to which every row is clipped (the
    public rows too, before fitting: on data inside the range a no-op); and ``clip``, a clip range
    in standardised units (public standard deviations), applied before the PCA."""
    x = np.asarray(x_public, np.float64)
    d = x.shape[1]
    columns = tuple(columns) if columns is not None else tuple(f"x{j}" for j in range(d))
    _check_public(x, columns)
    lower = upper = None
    if bounds is not None:
        lower, upper = np.full(d, float(bounds[0])), np.full(d, float(bounds[1]))
        x = np.clip(x, lower, upper)
    common = dict(feature_source="public", input=input, lower=lower, upper=upper, clip=clip)
    mode = cfg.get("features", "pca")
    if mode == "pca":
        pca = fit_public_pca(x, cfg.get("pca_dim", default_dim) or default_dim,
                             standardise_inputs=standardise_inputs)
        prep = Preprocessing(columns, pca.in_mean, pca.in_sd, components=pca.components, pca_shift=pca.out_mean,
                             pca_scale=pca.out_sd, **common)
        info = {"features": f"pca{pca.components.shape[0]}", "pca_fitted_on": "public",
                "pca_explained_variance": round(pca.explained, 4)}
    elif mode == "raw":
        prep = Preprocessing(columns, x.mean(0), _safe_sd(x), **common)
        info = {"features": "raw", "standardised_with": "public"}
    else:
        raise ConfigError("dataset.features", f"unknown feature map '{mode}'; allowed: pca, raw")
    return prep, info


def _check_public(x: np.ndarray, columns) -> None:
    """The public rows are not private: a non-finite value, or values whose variance overflows
    float64, refuse the run in one line (they would make the fitted map non-finite)."""
    bad = np.flatnonzero(~np.isfinite(x).all(1))
    if bad.size:
        j = int(np.flatnonzero(~np.isfinite(x[bad[0]]))[0])
        raise ConfigError("dataset.path", f"{bad.size} public row(s) hold a missing or infinite value (first: public "
                                          f"row {bad[0] + 1}, column {columns[j]!r}); allowed: finite public rows")
    with np.errstate(over="ignore", invalid="ignore"):
        var = x.var(0)
    if not np.isfinite(var).all():
        j = int(np.flatnonzero(~np.isfinite(var))[0])
        raise ConfigError("dataset.path", f"column {columns[j]!r} holds values up to {np.abs(x[:, j]).max():.3g} in the "
                                          f"public rows, whose variance overflows float64; allowed: values well below "
                                          f"1e150")


def public_features(cfg: dict, x_public: np.ndarray, *others: np.ndarray, default_dim: int,
                    **kw) -> tuple[list[np.ndarray], dict, Preprocessing]:
    """:func:`fit_public_map` and ``[x_public, *others]`` mapped with it (the strict map: rows
    that are not private records)."""
    prep, info = fit_public_map(cfg, x_public, default_dim=default_dim, **kw)
    return [prep.apply(a) for a in (x_public, *others)], info, prep


def binary_labels(y01: np.ndarray, cfg: dict) -> tuple[str, np.ndarray, int]:
    """Code 0/1 labels for ``dataset.task``: ``multiclass`` (default) -> int64 in {0, 1} with two
    classes (the paper's logistic = softmax heads: P = 2(d+1) parameters), ``binary`` -> int64 in
    {-1, +1} (the hinge / margin convention of :class:`certdp.data.Dataset`, one output).
    Returns (task, y, n_classes)."""
    task = cfg.get("task") or "multiclass"
    y = np.asarray(y01).astype(np.int64)
    if task == "binary":
        return "binary", 2 * y - 1, 2
    if task == "multiclass":
        return "multiclass", y, 2
    raise ConfigError("dataset.task", f"unknown task '{task}' for a two-class dataset; allowed: binary, multiclass")
