"""Small csv tables, good and bad, shared by the prober's fixtures and the tests
(``tests/test_settings.py``): :func:`write_tables` writes them below ``<folder>/csv/`` with a
regular file ``<folder>/afile`` where a folder is expected.

``good.csv``: 300 rows x1, x2 uniform on [-1, 1], y = 2 x1 - x2 + noise (seed 0).  The bad ones
change one thing each: no rows, only a header, random bytes, an infinite cell in one private row
(``inf.csv``: row 7, private under the default split, so clipped rather than refused) or in every
tenth row (``inf10.csv``, public and test rows among them: refused), empty targets in every
fiftieth (``nan.csv``) or tenth (``nan10.csv``) row, a constant target, values near 1e300, a
duplicated column name, text features or targets, one row, a record longer than the header in
every tenth row (``ragged.csv``: public and test rows among them, refused), a parquet name on csv
bytes, ``;`` separators.
"""

from __future__ import annotations

from pathlib import Path

N_ROWS = 300


def _table(path: Path, cols: dict, header=None) -> None:
    """A csv written cell by cell (``repr`` of each float: the shortest exact decimal)."""
    names = header or list(cols)
    lines = [",".join(names)]
    for row in zip(*cols.values()):
        lines.append(",".join(r if isinstance(r, str) else repr(float(r)) for r in row))
    path.write_text("\n".join(lines) + "\n")


def write_tables(folder: Path) -> Path:
    """Write the tables below ``folder/csv`` and ``folder/afile``; returns ``folder``."""
    import numpy as np
    c = folder / "csv"
    c.mkdir(parents=True, exist_ok=True)
    (c / "dir").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    n = N_ROWS
    x1, x2 = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    y = 2 * x1 - x2 + 0.1 * rng.standard_normal(n)
    _table(c / "good.csv", {"x1": x1, "x2": x2, "y": y})
    (c / "empty.csv").write_bytes(b"")
    (c / "header.csv").write_text("x1,x2,y\n")
    (c / "binary.csv").write_bytes(bytes(rng.integers(0, 256, 4096, dtype=np.uint8)))
    xi = x1.copy()
    xi[7] = np.inf
    _table(c / "inf.csv", {"x1": xi, "x2": x2, "y": y})
    _table(c / "inf10.csv", {"x1": np.where(np.arange(n) % 10 == 7, np.inf, x1), "x2": x2, "y": y})
    _table(c / "nan.csv", {"x1": x1, "x2": x2, "y": [("" if i % 50 == 3 else repr(float(v))) for i, v in enumerate(y)]})
    _table(c / "nan10.csv", {"x1": x1, "x2": x2,
                             "y": [("" if i % 10 == 3 else repr(float(v))) for i, v in enumerate(y)]})
    _table(c / "const.csv", {"x1": x1, "x2": x2, "y": np.full(n, 3.0)})
    _table(c / "big.csv", {"x1": 1e300 * (1 + x1), "x2": x2, "y": y})
    _table(c / "dup.csv", {"x1": x1, "y": y, "y2": -y}, header=["x1", "y", "y"])
    _table(c / "text.csv", {"x1": [f"v{i}" for i in range(n)], "x2": x2, "y": y})
    _table(c / "texttarget.csv", {"x1": x1, "x2": x2, "y": ["high" if v > 0 else "low" for v in y]})
    _table(c / "onerow.csv", {"x1": x1[:1], "x2": x2[:1], "y": y[:1]})
    lines = (c / "good.csv").read_text().splitlines()
    # a record with more fields than the header in every tenth row (a private one is read as
    # unreadable cells and imputed; a public or test one refuses the file)
    ragged = [ln + ",4.0,5.0" if i % 10 == 5 else ln for i, ln in enumerate(lines)]
    (c / "ragged.csv").write_text("\n".join(ragged) + "\n")
    (c / "fake.parquet").write_text((c / "good.csv").read_text())
    (c / "semicolon.csv").write_text((c / "good.csv").read_text().replace(",", ";"))
    (folder / "afile").write_text("a regular file, used where a folder is expected\n")
    return folder
