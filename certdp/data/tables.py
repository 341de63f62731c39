"""Reading a user's table (csv or parquet): every problem a one-line ConfigError naming the key to
change -- a folder, an empty, header-only or binary file, non-numeric, missing, infinite or
overflowing cells, duplicate or constant targets."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data.params import names, text
from certdp.data.preprocessing import label_text
from certdp.errors import ConfigError

log = logging.getLogger("certdp")
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


def listing(cols, limit: int = 20) -> str:
    # plain names as they are; quoted where a name could be misread (or would break the line)
    shown = ", ".join(repr(c) if (not c or c != c.strip() or "," in c or not c.isprintable()) else c
                      for c in cols[:limit])
    return shown + (f", ... ({len(cols)} columns)" if len(cols) > limit else "")


def _rows_text(rows: np.ndarray, extra: str = "") -> str:
    """Rows (0-based data rows) as the user counts them: 1 = the first row after the header."""
    first = ", ".join(str(int(r) + 1) for r in rows[:3])
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''} (row{'s' if len(rows) != 1 else ''} {first}" \
           f"{', ...' if len(rows) > 3 else ''} after the header{extra})"


def shown_name(p: Path) -> str:
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
        raise ConfigError("dataset.path", f"{shown_name(p)} is not a text file (a NUL byte at offset {nul}); "
                                          f"allowed: a UTF-8 .csv with a header row, or a .parquet table")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3 or len(head) < _SNIFF_BYTES:   # not a character cut at the sniff limit
            raise ConfigError("dataset.path", f"{shown_name(p)} is not UTF-8 text (byte 0x{head[e.start]:02x} at offset "
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
        raise ConfigError("dataset.path", f"{shown_name(p)} is empty (no header row); allowed: a table with a header "
                                          f"row and at least {MIN_ROWS} data rows") from None
    except UnicodeDecodeError as e:
        raise ConfigError("dataset.path", f"{shown_name(p)} is not UTF-8 text ({_first_line(e)}); allowed: a UTF-8 .csv "
                                          f"(re-save it as UTF-8), or a .parquet table") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError) as e:
        raise ConfigError("dataset.path", f"{shown_name(p)} could not be read as a {'tab' if sep == chr(9) else 'comma'}-"
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
        raise ConfigError("dataset.path", f"{shown_name(p)} is not a readable parquet file ({_first_line(e)}); allowed: a "
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
        raise ConfigError("dataset.path", f"{shown_name(p)} is empty (0 bytes); allowed: a table with a header row and "
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
    fname = shown_name(p)
    cols = listing(header)
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
                                              f"{listing([c for c in header if c != target])}")
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
        check_target_varies(y, target, fname, "dataset.target", where="every row")
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


def check_target_varies(y: np.ndarray, name: str, fname: str, key: str, *, where: str) -> None:
    """A constant target has nothing to learn and a zero standard deviation (standardising it
    would divide by zero); the tolerance also catches a constant column's rounding noise."""
    with np.errstate(over="ignore", invalid="ignore"):
        sd, scale = float(np.std(y)), float(np.max(np.abs(y)))
    if np.isfinite(sd) and sd <= 1e-12 * scale or scale == 0:
        raise ConfigError(key, f"column {name!r} of {fname} is constant ({where}: {float(y[0]):g}); allowed: a "
                               f"target that varies across rows")
