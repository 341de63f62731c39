"""Reading a user's table (csv or parquet): every problem with the file, its header or its schema
is a one-line ConfigError naming the key to change (a folder, an empty, header-only or binary
file, unknown or duplicate columns).  Cells are read, not judged: whether a non-numeric, missing,
infinite or overflowing cell is an error depends on the role of its row (public and test rows
are checked by :func:`check_rows`; private rows are imputed and clipped, never refused), which
the split decides from the row count and the seed alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass
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


def _column_numbers(col: pd.Series, name: str, key: str, fname: str) -> tuple[np.ndarray, dict]:
    """One column as float64 (NaN where a cell is missing or unreadable; infinities kept) and
    ``{row: text}`` of its unreadable cells (neither a number nor a missing-value token).

    Nothing is refused here: whether an unreadable cell is an error depends on the role of its
    row, which the split decides later (:func:`certdp.data.tabular.prepare_table`).  Only a
    column whose *type* is not text or numbers (a parquet date column: the file's schema, not
    a cell) is refused."""
    kind = col.dtype.kind
    if kind in "biuf":
        return col.to_numpy(np.float64, na_value=np.nan), {}
    if kind not in "OSU" and not isinstance(col.dtype, pd.StringDtype):
        raise ConfigError(key, f"column {name!r} of {fname} holds {col.dtype} values, not numbers; allowed: "
                               f"numeric columns (encode {name!r} as numbers or leave it out)")
    cells = col.astype("string").str.strip()
    missing = (cells.isna() | cells.isin(MISSING_TOKENS)).to_numpy(bool)
    vals = pd.to_numeric(cells.where(~missing), errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = np.flatnonzero(np.isnan(vals) & ~missing)
    return vals, {int(i): str(cells.iloc[i]) for i in bad}


def _column_labels(col: pd.Series) -> np.ndarray:
    """One column of class labels as canonical text (:func:`label_text`: strings stripped,
    integral numbers as ``'3'``); ``''`` where the cell is missing (empty or an NA token)."""
    if col.dtype.kind in "biuf":
        missing = col.isna().to_numpy(bool)
        return np.array([label_text(v) if not m else "" for v, m in zip(col.tolist(), missing)], dtype=object)
    cells = col.astype("string").str.strip()
    missing = (cells.isna() | cells.isin(MISSING_TOKENS)).to_numpy(bool)
    return np.where(missing, "", np.array(cells.fillna("").tolist(), dtype=object)).astype(object)


@dataclass(frozen=True)
class Cells:
    """A user's table as read, before any row has a role (private, public or test).

    ``x`` [n, d] float64 holds every used feature cell: NaN where the cell is missing or
    unreadable, infinities as written; ``y`` [n] the target: float64 likewise (regression) or
    class-label text with ``''`` for a missing label.  ``unreadable`` maps a column index
    (``d`` = the target) to ``{row: text}`` of its cells that are neither numbers nor missing
    tokens.  Nothing about a cell's value has been checked: only the file, its header and its
    schema, so that a private record cannot decide whether the table is accepted."""
    x: np.ndarray
    y: np.ndarray
    columns: tuple
    target: str
    fname: str
    info: dict
    unreadable: dict

    @property
    def n(self) -> int:
        return int(len(self.y))


def read_cells(path, *, target: str | None, features=None, labels: bool = False) -> Cells:
    """Read a user's table (:class:`Cells`).  ``features=None`` means every column but the
    target; with ``labels`` the target holds class labels (any strings or integers).

    Refused with a one-line :class:`ConfigError` (key in brackets), all before a cell's value is
    looked at: a missing file, a directory, an unreadable, empty, header-only, binary or
    malformed file, fewer than ``MIN_ROWS`` data rows [dataset.path]; a target that is not set,
    not a column, or names several columns [dataset.target]; features that are not columns,
    repeat, name several columns or include the target, a column of a non-numeric type
    [dataset.features].  The cells themselves are checked per role after the split
    (:func:`certdp.data.tabular.prepare_table`): public and test rows strictly, private rows
    never (they are imputed and clipped)."""
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
    if len(data) < MIN_ROWS:
        raise ConfigError("dataset.path", f"{fname} has {len(data)} data row{'s' if len(data) != 1 else ''}; "
                                          f"allowed: at least {MIN_ROWS} (2 to train on, 1 to test)")
    unreadable: dict[int, dict] = {}
    xs = []
    for j, f in enumerate(feats):
        v, bad = _column_numbers(data[positions[f][0]], f, "dataset.features", fname)
        xs.append(v)
        if bad:
            unreadable[j] = bad
    if labels:
        y = _column_labels(data[positions[target][0]])
    else:
        y, bad = _column_numbers(data[positions[target][0]], target, "dataset.target", fname)
        if bad:
            unreadable[len(feats)] = bad
    x = np.stack(xs, axis=1)
    return Cells(x, y, tuple(feats), target, fname, {"source": str(p), "rows": int(len(y))}, unreadable)


def load_table(path, *, target: str | None, features=None, dropna: bool = False,
               labels: bool = False) -> tuple[np.ndarray, np.ndarray, list[str], dict]:
    """``(x, y, feature names, info)`` of :func:`read_cells` (kept for callers that rebuild a
    table by hand, e.g. a neighbouring table in ``certdp dpaudit``).  Every row is returned, in
    file order: rows are never dropped before the split (``dropna`` is accepted for those
    callers and has no effect here; :func:`certdp.data.tabular.prepare_table` applies
    ``dataset.dropna`` to public and test rows only)."""
    c = read_cells(path, target=target, features=features, labels=labels)
    return c.x, c.y, list(c.columns), dict(c.info)


def check_rows(x: np.ndarray, y: np.ndarray, rows: np.ndarray, *, columns, target: str, fname: str,
               labels: bool, unreadable: dict | None, dropna: bool, role: str) -> np.ndarray:
    """Check the *non-private* ``rows`` (indices into the table; ``role`` names them in messages,
    e.g. "public or test") and return those to keep.

    Refused in one line: a non-numeric cell (an example shown), an infinite cell, values whose
    variance overflows float64 [the column's key]; a missing cell unless ``dropna``, which drops
    those rows instead (the count is logged).  Private rows are never passed here: their cells
    are imputed and clipped by the preprocessing, so that no private value decides whether the
    run is refused."""
    unreadable = unreadable or {}
    names = list(columns) + [target]
    keys = ["dataset.features"] * len(columns) + ["dataset.target"]
    num = x[rows] if labels else np.concatenate([x[rows], np.asarray(y, np.float64)[rows][:, None]], axis=1)
    in_rows = set(int(r) for r in rows)
    for j in range(num.shape[1]):
        bad_rows = sorted(r for r in unreadable.get(j, {}) if r in in_rows)
        if bad_rows:
            what = ("the target, or set dataset.task=binary or multiclass for class labels" if keys[j] == "dataset.target"
                    else f"{names[j]!r} as numbers or leave it out of dataset.features")
            raise ConfigError(keys[j], f"column {names[j]!r} of {fname} holds non-numeric values in "
                                       f"{_rows_text(np.array(bad_rows), '; ' + role + ' rows')}, e.g. "
                                       f"{unreadable[j][bad_rows[0]][:30]!r}; allowed: numbers, and empty cells or NA "
                                       f"for missing values (encode {what})")
        inf = rows[np.isinf(num[:, j])]
        if inf.size:
            raise ConfigError(keys[j], f"column {names[j]!r} of {fname} holds infinite values in "
                                       f"{_rows_text(np.sort(inf), '; ' + role + ' rows')}; allowed: finite numbers "
                                       f"(fix or remove those rows)")
    missing = np.isnan(num)
    if labels:
        missing = np.concatenate([missing, (np.asarray(y, dtype=object)[rows] == "")[:, None]], axis=1)
    rows_nan = np.flatnonzero(missing.any(1))
    keep = rows
    if rows_nan.size:
        per_col = [(name, int(missing[:, j].sum())) for j, name in enumerate(names) if missing[:, j].any()]
        detail = ", ".join(f"{n!r}: {k}" for n, k in per_col[:5]) + (", ..." if len(per_col) > 5 else "")
        if not dropna:
            key = "dataset.target" if missing[:, :-1].sum() == 0 else "dataset.features"
            raise ConfigError(key, f"{fname} has missing values in {_rows_text(np.sort(rows[rows_nan]), '; ' + role + ' rows; missing cells per column: ' + detail)}; "
                                   f"allowed: complete {role} rows: fill those cells, or set dataset.dropna=true to "
                                   f"drop those {len(rows_nan)} rows (a private row's missing cells are imputed, "
                                   f"see dataset.impute)")
        keep = rows[~missing.any(1)]
        log.warning("dataset.dropna: dropped %d of the %d %s rows of %s with missing values (cells per column: %s); "
                    "%d remain", len(rows_nan), len(rows), role, fname, detail, len(keep))
    _check_no_overflow(x[keep], list(columns), "dataset.features", fname)
    if not labels:
        _check_no_overflow(np.asarray(y, np.float64)[keep][:, None], [target], "dataset.target", fname)
    return keep


def _check_no_overflow(a: np.ndarray, names, key: str, fname: str) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        var = a.var(0) if len(a) else np.zeros(a.shape[1])
        scale = np.abs(a).max(0) if len(a) else np.zeros(a.shape[1])
    bad = np.flatnonzero(~np.isfinite(var))
    if bad.size:
        j = int(bad[0])
        raise ConfigError(key, f"column {names[j]!r} of {fname} holds values up to {float(scale[j]):.3g} in its "
                               f"public or test rows, whose variance overflows float64; allowed: values well below "
                               f"1e150 (rescale the column, e.g. divide it by a power of 10)")


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
