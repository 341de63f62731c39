"""Reading a user's table (csv or parquet): every problem with the file, its header or its schema
is a one-line ConfigError naming the key to change (a folder, an empty, header-only or binary
file, unknown or duplicate columns).  Cells are read, not judged: whether a non-numeric, missing,
infinite or overflowing cell is an error depends on the role of its row (public and test rows
are checked by :func:`check_rows`; private rows are imputed and clipped, never refused), which
the split decides from the row count and the seed alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.data import records
from certdp.data.records import first_line as _first_line, shown_name
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


@dataclass(frozen=True)
class _Read:
    """A table as read: header names, data cells (columns ``0..n-1`` in file order), the rows with
    more fields than the header, and whether any cell may hold bytes that are not UTF-8."""
    header: list
    data: pd.DataFrame
    extra: np.ndarray
    utf8: bool = True


def _read_csv(p: Path) -> _Read:
    """A csv or tsv (compressed or not) through :mod:`certdp.data.records`: records by the csv
    grammar, cells decoded one by one, nothing about a record refused here."""
    sep = "\t" if any(s in (".tsv", ".tab") for s in p.suffixes) else ","
    fname = shown_name(p)
    data = records.file_bytes(p)
    records.check_header_line(data, fname)
    cells, extra, utf8 = records.parse(data, fname, sep=sep)
    head, bad = records.decode(cells.iloc[0])
    if bad.any():
        raise ConfigError("dataset.path", f"{fname} is not UTF-8 text (in its header row); allowed: a UTF-8 .csv "
                                          f"(re-save it as UTF-8), or a .parquet table")
    header = [str(c).strip() for c in head.tolist()]
    header = [c if c else f"Unnamed: {i}" for i, c in enumerate(header)]
    return _Read(header, cells.iloc[1:].reset_index(drop=True), extra[1:], utf8)


def _read_parquet_columns(p: Path) -> _Read:
    import pyarrow.parquet as pq
    try:
        table = pq.read_table(p)
    except Exception as e:   # pyarrow raises several types (ArrowInvalid, OSError, ...): all one message
        raise ConfigError("dataset.path", f"{shown_name(p)} is not a readable parquet file ({_first_line(e)}); allowed: a "
                                          f".parquet table, or a UTF-8 .csv with a header row") from None
    header = [str(c) for c in table.column_names]
    data = pd.DataFrame({i: table.column(i).to_pandas() for i in range(table.num_columns)})
    return _Read(header, data, np.zeros(len(data), bool))


def _read(p: Path) -> _Read:
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
    return _read_csv(p)


def read_table(p: Path) -> tuple[list[str], pd.DataFrame]:
    """``(column names, data)`` of a csv (``.csv``, ``.tsv``, compressed ``.csv.gz`` ...) or
    parquet (``.parquet``, ``.pq``) file, every row checked strictly (for rows that are not
    private records, e.g. the rows ``certdp predict`` is given): ``data`` has columns ``0..n-1``
    in file order, so that duplicate names stay visible.  The path problems (missing, a
    directory, unreadable, empty, not text, malformed), a row with more fields than the header and
    a cell that is not UTF-8 raise one-line ConfigErrors under ``dataset.path``."""
    t = _read(p)
    fname = shown_name(p)
    if t.extra.any():
        raise ConfigError("dataset.path", f"{fname} has more fields than its header in "
                                          f"{_rows_text(np.flatnonzero(t.extra))}; allowed: a csv with a header row "
                                          f"and the same number of fields on every line")
    data = t.data
    if not t.utf8:
        for j in data.columns:
            bad = records.not_utf8(data[j])
            if bad.any():
                raise ConfigError("dataset.path", f"{fname} is not UTF-8 text (column {t.header[j]!r}, "
                                                  f"{_rows_text(np.flatnonzero(bad))}); allowed: a UTF-8 .csv "
                                                  f"(re-save it as UTF-8), or a .parquet table")
    return t.header, data


def _column_numbers(col: pd.Series, name: str, key: str, fname: str,
                    not_utf8: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """One column as float64 (NaN where a cell is missing or unreadable; infinities kept) and
    ``{row: text}`` of its unreadable cells (neither a number nor a missing-value token, or bytes
    that are not UTF-8: ``not_utf8``, the cells shown as ``\\xNN``).

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
    if not_utf8 is not None:
        vals[not_utf8], missing = np.nan, missing & ~not_utf8
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
    class-label text with ``''`` for a missing or unreadable label.  ``unreadable`` maps a column
    index (``d`` = the target) to ``{row: text}`` of its cells that are neither numbers nor
    missing tokens, or whose bytes are not UTF-8 (shown as ``\\xNN``).  ``malformed``: the rows
    with more fields than the header (every used cell of theirs NaN / ``''``).  Nothing about a
    cell's value has been checked: only the file, its header and its schema, so that a private
    record cannot decide whether the table is accepted."""
    x: np.ndarray
    y: np.ndarray
    columns: tuple
    target: str
    fname: str
    info: dict
    unreadable: dict
    malformed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

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
    t = _read(p)
    header, data = t.header, t.data
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

    def column(name):      # a used column, its cells decoded one by one (records.decode)
        col = data[positions[name][0]]
        return (col, None) if t.utf8 else records.decode(col)

    xs = []
    for j, f in enumerate(feats):
        col, not_utf8 = column(f)
        v, bad = _column_numbers(col, f, "dataset.features", fname, not_utf8)
        xs.append(v)
        if bad:
            unreadable[j] = bad
    col, not_utf8 = column(target)
    if labels:
        y = _column_labels(col)
        if not_utf8 is not None and not_utf8.any():
            unreadable[len(feats)] = {int(i): str(col.iloc[i]) for i in np.flatnonzero(not_utf8)}
            y[not_utf8] = ""
    else:
        y, bad = _column_numbers(col, target, "dataset.target", fname, not_utf8)
        if bad:
            unreadable[len(feats)] = bad
    x = np.stack(xs, axis=1)
    malformed = np.flatnonzero(t.extra)
    if malformed.size:        # which cell is which is unknown: every used cell is unreadable
        x[malformed] = np.nan
        y[malformed] = "" if labels else np.nan
    return Cells(x, y, tuple(feats), target, fname, {"source": str(p), "rows": int(len(y))}, unreadable, malformed)


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
               labels: bool, unreadable: dict | None, dropna: bool, role: str,
               malformed=None) -> np.ndarray:
    """Check the *non-private* ``rows`` (indices into the table; ``role`` names them in messages,
    e.g. "public or test") and return those to keep.

    Refused in one line: a row with more fields than the header (``malformed``) [dataset.path]; a
    label that is not UTF-8 [dataset.target]; a non-numeric cell (an example shown), an infinite
    cell, values whose variance overflows float64 [the column's key]; a missing cell unless
    ``dropna``, which drops those rows instead (the count is logged).  Private rows are never
    passed here: their cells are imputed and clipped by the preprocessing, so that no private
    value decides whether the run is refused."""
    unreadable = unreadable or {}
    names = list(columns) + [target]
    keys = ["dataset.features"] * len(columns) + ["dataset.target"]
    num = x[rows] if labels else np.concatenate([x[rows], np.asarray(y, np.float64)[rows][:, None]], axis=1)
    in_rows = set(int(r) for r in rows)
    long = sorted(int(r) for r in (malformed if malformed is not None else ()) if int(r) in in_rows)
    if long:
        raise ConfigError("dataset.path", f"{fname} has more fields than its header in "
                                          f"{_rows_text(np.array(long), '; ' + role + ' rows')}; allowed: a csv with a "
                                          f"header row and the same number of fields on every line")
    bad_labels = sorted(r for r in unreadable.get(len(columns), {}) if r in in_rows) if labels else []
    if bad_labels:
        raise ConfigError("dataset.target", f"column {target!r} of {fname} holds labels that are not UTF-8 text in "
                                            f"{_rows_text(np.array(bad_labels), '; ' + role + ' rows')}, e.g. "
                                            f"{unreadable[len(columns)][bad_labels[0]][:30]!r}; allowed: UTF-8 labels "
                                            f"(re-save the file as UTF-8)")
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
