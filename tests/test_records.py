"""A private cell's bytes do not decide the outcome of ``dataset=csv`` (issue 28, item 2).

The reader (:mod:`certdp.data.records`, :func:`certdp.data.tables.read_cells`) decodes cell by
cell and counts records by the csv grammar.  A private cell holding U+0000 (written as pandas'
``to_csv`` writes it), a byte that is not UTF-8, a bare carriage return (``to_csv`` writes it
unquoted), a quoted line break, or a private row with more fields than the header: the table
loads with the clean table's split, sizes, public and test arrays and map; the private arrays
differ in that row only.  The same in a public or test row is refused in one line naming it.
What still refuses the file reads the header line only (binary, not UTF-8, CR line endings).
"""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pandas as pd
import pytest

from certdp.data import load_dataset
from certdp.data.tables import read_table
from certdp.data.tabular import split_rows, split_sizes
from certdp.errors import ConfigError

N = 3000                     # about 75 KB as csv: rows on both sides of the old 64 KiB sniff
CFG = {"name": "csv", "target": "price", "features": ["a", "b"]}
ARRAYS = ("x_test", "y_test", "x_public", "y_public")


def _table(n=N) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2)).round(4)
    t = pd.DataFrame({"a": x[:, 0], "b": x[:, 1]})
    t["price"] = (2 * t.a - t.b).round(4)
    t["note"] = "ok"                                   # an unused text column
    return t


def _roles(n=N, seed=0):
    t, p = split_sizes(n, n_test=None, n_public=None)
    return split_rows(n, n_test=t, n_public=p, seed=seed)


def _offset_of_row(path, row: int) -> int:
    data = path.read_bytes()
    pos = 0
    for _ in range(row + 1):                            # the header line, then `row` data lines
        pos = data.index(b"\n", pos) + 1
    return pos


def _write(tmp_path, name, frame=None, patch=None) -> str:
    """``frame`` written by pandas, then ``patch(bytes) -> bytes``."""
    p = tmp_path / name
    (_table() if frame is None else frame).to_csv(p, index=False)
    if patch is not None:
        p.write_bytes(patch(p.read_bytes()))
    return str(p)


def _replace_line(row: int, new: bytes):
    def patch(data: bytes) -> bytes:
        lines = data.split(b"\n")
        lines[row + 1] = new
        return b"\n".join(lines)
    return patch


def _private_rows(n=N):
    """Two private rows: one within the first 64 KiB of the file, one beyond."""
    priv, _, _ = _roles(n)
    return int(min(priv)), int(max(priv))


def _same_but_one(clean, ds, i_row):
    priv, _, _ = _roles()
    for a in ARRAYS:
        assert getattr(ds, a).tobytes() == getattr(clean, a).tobytes(), a
    assert ds.preprocessing == clean.preprocessing and ds.n_train == clean.n_train
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.y_train).all()
    differs = np.flatnonzero((ds.x_train != clean.x_train).any(1) | (ds.y_train != clean.y_train))
    assert set(differs) <= {int(np.flatnonzero(priv == i_row)[0])}


def _cell_bytes(frame_row: pd.Series, col: str, value: bytes) -> bytes:
    cells = [str(v).encode() for v in frame_row.tolist()]
    cells[list(frame_row.index).index(col)] = value
    return b",".join(cells)


# (private cell bytes in column a, does it change the row's value)
CELLS = {"nul": b"1.5\x00", "nul_alone": b"\x00", "not_utf8": b"1.5\xff", "latin1_text": b"caf\xe9",
         "overlong": b"\xc0\xae"}


@pytest.mark.parametrize("where", ["first_64k", "beyond_64k"])
@pytest.mark.parametrize("kind", list(CELLS))
def test_a_private_cells_bytes_do_not_decide_the_outcome(tmp_path, kind, where, caplog):
    t = _table()
    clean = load_dataset({**CFG, "path": _write(tmp_path, "clean.csv")}, 0)
    row = _private_rows()[0 if where == "first_64k" else 1]
    path = _write(tmp_path, "cell.csv", patch=_replace_line(row, _cell_bytes(t.iloc[row], "a", CELLS[kind])))
    assert (_offset_of_row(tmp_path / "cell.csv", row) < 1 << 16) == (where == "first_64k")
    with caplog.at_level(logging.DEBUG, logger="certdp"):
        ds = load_dataset({**CFG, "path": path}, 0)
    _same_but_one(clean, ds, row)
    assert str(row + 1) not in caplog.text


def test_nul_written_by_pandas_in_a_private_cell(tmp_path):
    """The issue's case: pandas writes U+0000 as a raw NUL byte; early in the file it used to
    refuse the run ("not a text file (a NUL byte at offset ...)", the offset pointing at the row)."""
    t = _table().astype(object)
    clean = load_dataset({**CFG, "path": _write(tmp_path, "clean.csv")}, 0)
    row = _private_rows()[0]
    t.loc[row, "a"] = "1\x002"
    t.loc[row, "note"] = "\x00"
    ds = load_dataset({**CFG, "path": _write(tmp_path, "nul.csv", frame=t)}, 0)
    _same_but_one(clean, ds, row)
    # gzip-compressed too
    (tmp_path / "nul.csv.gz").write_bytes(gzip.compress((tmp_path / "nul.csv").read_bytes()))
    _same_but_one(clean, load_dataset({**CFG, "path": str(tmp_path / "nul.csv.gz")}, 0), row)


@pytest.mark.parametrize("value,kind", [("x\ry", "carriage_return"), ("two\nlines", "quoted_newline"),
                                         ('say "hi", twice', "quotes_and_comma")])
def test_a_private_text_cell_does_not_change_the_row_count(tmp_path, value, kind):
    """pandas writes a cell holding a bare CR unquoted (a reader ending records at CR counted one
    row more and moved the split); a line break or a comma inside quotes is text."""
    t = _table().astype(object)
    clean = load_dataset({**CFG, "path": _write(tmp_path, "clean.csv")}, 0)
    row = _private_rows()[1]
    t.loc[row, "note"] = value
    ds = load_dataset({**CFG, "path": _write(tmp_path, "text.csv", frame=t)}, 0)
    _same_but_one(clean, ds, row)
    assert ds.info["rows"] == N


def test_a_private_row_with_more_fields_is_imputed(tmp_path):
    clean = load_dataset({**CFG, "path": _write(tmp_path, "clean.csv")}, 0)
    row = _private_rows()[0]
    ds = load_dataset({**CFG, "path": _write(tmp_path, "long.csv", patch=_replace_line(row, b"1,2,3,ok,5,6"))}, 0)
    _same_but_one(clean, ds, row)
    priv, _, _ = _roles()
    i = int(np.flatnonzero(priv == row)[0])
    assert (ds.x_train[i] == 0).all() and ds.y_train[i] == 0       # every cell imputed: the centre


@pytest.mark.parametrize("role", ["public", "test"])
@pytest.mark.parametrize("kind,needle", [("nul", "non-numeric"), ("not_utf8", "'1.5\\\\xff'"),
                                         ("more_fields", "more fields than its header")])
def test_the_same_in_a_public_or_test_row_is_refused(tmp_path, kind, needle, role):
    t = _table()
    _, pub, test = _roles()
    row = int((pub if role == "public" else test)[0])
    new = b"1,2,3,ok,5" if kind == "more_fields" else _cell_bytes(t.iloc[row], "a", CELLS[kind])
    with pytest.raises(ConfigError) as e:
        load_dataset({**CFG, "path": _write(tmp_path, "bad.csv", patch=_replace_line(row, new))}, 0)
    msg = str(e.value)
    assert needle in msg and f"row {row + 1} after the header; {role} rows" in msg, msg


def test_labels_that_are_not_utf8(tmp_path):
    """Classification: a private label that is not UTF-8 is an unknown label (the first class);
    a public one is refused."""
    t = _table(600)
    t["price"] = np.where(t.a > 0, "high", "low")
    cfg = {**CFG, "task": "binary"}
    priv, pub, _ = _roles(600)
    clean = load_dataset({**cfg, "path": _write(tmp_path, "clean.csv", frame=t)}, 0)
    row = int(priv[0])
    ds = load_dataset({**cfg, "path": _write(tmp_path, "l.csv", frame=t,
                                             patch=_replace_line(row, _cell_bytes(t.iloc[row], "price", b"hi\xffgh")))}, 0)
    for a in ARRAYS:
        assert getattr(ds, a).tobytes() == getattr(clean, a).tobytes()
    assert ds.y_train[0] == -1                     # the first class, "high", coded -1
    row = int(pub[0])
    with pytest.raises(ConfigError, match=r"^dataset.target: column 'price' of p.csv holds labels that are not UTF-8"):
        load_dataset({**cfg, "path": _write(tmp_path, "p.csv", frame=t,
                                            patch=_replace_line(row, _cell_bytes(t.iloc[row], "price", b"hi\xffgh")))}, 0)


@pytest.mark.parametrize("head,needle", [(b"a,b\x00,price\n", "not a text file"),
                                         (b"a,caf\xe9,price\n", "not UTF-8 text"),
                                         (b"a,b,price\r1,2,3\r", "carriage return in its header line")])
def test_the_header_line_is_checked_as_a_whole(tmp_path, head, needle):
    (tmp_path / "h.csv").write_bytes(head + b"".join(b"%d,%d,%d\n" % (i, i % 5, i % 7) for i in range(20)))
    with pytest.raises(ConfigError, match=needle) as e:
        load_dataset({**CFG, "path": str(tmp_path / "h.csv")}, 0)
    assert e.value.key == "dataset.path"


def test_read_table_for_rows_that_are_not_private_stays_strict(tmp_path):
    """``certdp predict``'s input (not private records): a cell that is not UTF-8 or a row with
    more fields is refused, naming the row."""
    (tmp_path / "p.csv").write_bytes(b"a,b\n1,2\n3,\xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(column 'b', 1 row \(row 2 after the header\)\)"):
        read_table(tmp_path / "p.csv")
    (tmp_path / "q.csv").write_bytes(b"a,b\n1,2\n3,4,5\n")
    with pytest.raises(ConfigError, match=r"more fields than its header in 1 row \(row 2 after the header\)"):
        read_table(tmp_path / "q.csv")
    (tmp_path / "r.csv").write_bytes(b"a,b\r\n1,x\ry\r\n")          # CRLF line ends; a bare CR is text
    header, data = read_table(tmp_path / "r.csv")
    assert header == ["a", "b"] and data.values.tolist() == [["1", "x\ry"]]


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path):
    """Excel writes UTF-8 with a byte-order mark; the reader drops it (the first column keeps its
    name), as pandas did before the reader decoded cell by cell."""
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfa,b,price\r\n" + b"".join(b"%d,%d,%d\r\n" % (i, i % 5, i % 7)
                                                                            for i in range(20)))
    header, data = read_table(tmp_path / "bom.csv")
    assert header == ["a", "b", "price"] and len(data) == 20
    assert load_dataset({"name": "csv", "target": "price", "path": str(tmp_path / "bom.csv")}, 0).n_features == 2
