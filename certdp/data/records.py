"""Text records read so that no cell decides how many records there are, or whether the file is
read at all (the one reader of ``dataset=csv``, ``adult`` and ``imdb``; ``sst2`` splits its lines
the same way).

A split is drawn from the number of records and a seed, so that number must not depend on what a
private cell holds.  The rules:

* **Records follow the file's grammar, never a cell's bytes.**  A record ends at a line feed
  outside quotes (``\\r\\n`` is read as ``\\n``); a bare ``\\r`` is a character of its cell (pandas'
  ``to_csv`` writes a cell holding ``\\r`` unquoted, and a reader that ended the record there would
  count one record more).  Quoted cells (csv, imdb) may hold separators, quotes (doubled) and line
  breaks, as a csv writer writes them, so any cell *value* leaves the count unchanged.  A blank
  line is not a record: every record of these formats holds a separator (two columns at least).
* **Decoding is per cell.**  The bytes are decoded as UTF-8 with invalid bytes kept as escapes
  (``surrogateescape``), so a cell holding invalid UTF-8 or U+0000 is read like any other; the
  caller decides by the row's role: a private cell is unreadable (imputed), a public or test
  cell is refused.  Only the header line (the schema, not a record) is checked as a whole: a NUL
  byte or invalid UTF-8 there means the file is not a text table.
* **A record with more fields than the header** is flagged (``extra``), not an error: for a
  private record every cell is unreadable, a public or test one is refused by the caller.
  Fewer fields: the missing cells are empty.

What still refuses the file, whatever its records hold: it cannot be read or decompressed, its
header line holds a NUL byte, invalid UTF-8 or a carriage return (old Mac line endings), or a
quoted cell opens and never closes (then everything after it would be one cell: not a file a
csv writer writes, and the one case in which bytes inside a record decide the outcome).  No
message names a row or shows a cell.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.errors import ConfigError

_SNIFF_BYTES = 1 << 16
_ALLOWED = "a UTF-8 .csv with a header row, or a .parquet table"


def shown_name(p: Path) -> str:
    """The file's name, quoted when it holds control characters (the message stays one line)."""
    return p.name if p.name.isprintable() else repr(p.name)


def first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return (msg[0] if msg else type(e).__name__)[:160]


def file_bytes(p: Path, *, key: str = "dataset.path", allowed: str = _ALLOWED) -> bytes:
    """The file's bytes, decompressed by suffix (``.gz``, ``.bz2``, ``.zip``, ``.xz``, ``.zst``),
    ``\\r\\n`` read as ``\\n``, a leading UTF-8 byte-order mark (Excel writes one) dropped.  A file
    that cannot be read or decompressed is one line under ``key``."""
    from pandas.io.common import get_handle
    try:
        with get_handle(p, "rb", compression="infer", is_text=False) as h:
            data = h.handle.read()
    except Exception as e:   # OSError, EOFError, zipfile/lzma/zstd errors: all one message
        raise ConfigError(key, f"{shown_name(p)} could not be read ({first_line(e)}); allowed: {allowed}") from None
    return data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n")


def check_header_line(data: bytes, fname: str, *, key: str = "dataset.path", allowed: str = _ALLOWED) -> None:
    """Refuse a file whose header line (up to the first line feed; at most 64 KiB of it) is not
    UTF-8 text: a binary file (a NUL byte), another encoding, or carriage-return line endings.
    These bytes are the schema, not a record, so the check reads no record."""
    head = data[:_SNIFF_BYTES]
    end = head.find(b"\n")
    line = head if end < 0 else head[:end]
    cr = line.find(b"\r")
    if cr >= 0:     # checked first: in a CR-only file the bytes after it are records
        raise ConfigError(key, f"{fname} has a carriage return in its header line (old Mac line endings?); allowed: "
                               f"{allowed}, with LF or CRLF line endings")
    nul = line.find(b"\0")
    if nul >= 0:
        raise ConfigError(key, f"{fname} is not a text file (a NUL byte at offset {nul} of its header line); allowed: "
                               f"{allowed}")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        cut = end < 0 and len(data) > len(head) and e.start >= len(line) - 3   # a character cut at the limit
        if not cut:
            raise ConfigError(key, f"{fname} is not UTF-8 text (byte 0x{line[e.start]:02x} at offset {e.start} of its "
                                   f"header line); allowed: a UTF-8 file (re-save it as UTF-8), or a .parquet "
                                   f"table") from None


def parse(data: bytes, fname: str, *, sep: str = ",", width: int | None = None, quoted: bool = True,
          skipinitialspace: bool = False, key: str = "dataset.path",
          allowed: str = _ALLOWED) -> tuple[pd.DataFrame, np.ndarray, bool]:
    """``(cells, extra, utf8)``: every record of ``data`` (header included) as text cells, columns
    ``0..width-1`` (``width``: the number of fields of the first record when None), and a bool
    per record, True where it has more fields than ``width`` (those fields are dropped).  Cells
    are ``str`` holding surrogate escapes where the bytes are not UTF-8 (:func:`decode`); ``utf8``
    is True when the whole of ``data`` is UTF-8 (then no cell needs :func:`decode`)."""
    common = dict(sep=sep, header=None, dtype=object, na_filter=False, lineterminator="\n", index_col=False,
                  encoding="utf-8", encoding_errors="surrogateescape", skipinitialspace=skipinitialspace,
                  quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
    kind = "tab" if sep == "\t" else "comma"
    try:
        if width is None:
            width = pd.read_csv(io.BytesIO(data), nrows=1, **common).shape[1]
        # a first record of width + 1 empty fields makes column `width` exist, so that pandas
        # flags a longer record in it (and drops what is beyond) instead of refusing the file
        frame = pd.read_csv(io.BytesIO((sep * width).encode() + b"\n" + data), names=range(width + 1),
                            usecols=lambda c: c <= width, **common)
    except pd.errors.EmptyDataError:
        raise ConfigError(key, f"{fname} is empty (no header row); allowed: {allowed}") from None
    except pd.errors.ParserError:     # pandas' text names a row: not shown
        raise ConfigError(key, f"{fname} is not a well-formed {kind}-separated file (a quoted cell opens and never "
                               f"closes); allowed: a file as a csv writer writes it (quotes around a cell holding "
                               f"the separator, a quote or a line break; a quote inside doubled)") from None
    frame = frame.iloc[1:].reset_index(drop=True)
    extra = (frame[width] != "").to_numpy(bool)
    return frame.drop(columns=width), extra, _is_utf8(data)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def not_utf8(col: pd.Series) -> np.ndarray:
    """True for the cells of ``col`` (text read by :func:`parse`) whose bytes are not UTF-8."""
    if col.dtype.kind != "O" or len(col) == 0:
        return np.zeros(len(col), bool)
    return col.map(lambda s: isinstance(s, str) and not s.isascii() and _escaped(s)).to_numpy(bool)


def _escaped(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def shown(s: str) -> str:
    """A cell's text that is safe to print or compare: invalid bytes as ``\\xNN``."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def decode(col: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """``(cells, bad)``: the cells of ``col`` with invalid bytes shown as ``\\xNN`` (:func:`shown`)
    and a bool per cell, True where its bytes are not UTF-8."""
    bad = not_utf8(col)
    if bad.any():
        col = col.copy()
        col[bad] = [shown(s) for s in col[bad]]
    return col, bad
