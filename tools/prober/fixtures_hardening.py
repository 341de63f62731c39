"""The fixtures of the hardening probes (issue 28), built only when a selected probe needs them:

* ``adult`` -- copies of the cached UCI Adult files (``$CERTDP_CACHE/adult`` or the user's
  ``~/.cache/certdp/adult``) below ``adult/orig``, and one folder per variant in which exactly one
  *private* record of ``adult.data`` is changed (a ``?``, an unknown category, a text, infinite or
  1e300 age).  Private by the documented split: with ``dataset.split=official`` every record of
  ``adult.data`` is private; with ``split=paper`` the first ``n_private`` records of the pooled
  records (adult.data's, then adult.test's) permuted by ``numpy.random.default_rng(split_seed)``.
  Absent cache: ``have["adult"]`` says so, and the probes report ``inconclusive``.
* ``hard`` -- a csv whose private row 7 holds U+0000 (written by ``pandas.to_csv``) or a byte that
  is not UTF-8; query points for ``certdp agtr queries=``; ``certdp predict`` edges (a score that
  overflows, an empty file, one row).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

NEEDS = {"adult", "hard"}

ADULT_FILES = ("adult.data", "adult.test")
PAPER_PRIVATE = 30222         # the paper split's private records (configs/dataset/adult.yaml)
SPLIT_SEED = 0
# variant -> (field index in a record, the new value, a token the messages must not show)
ADULT_EDITS = {
    "missing": (1, "?", None),                        # workclass
    "unknown-category": (13, "Mars", "Mars"),        # native_country
    "text-age": (0, "forty-two", "forty-two"),
    "inf-age": (0, "inf", None),
    "huge-age": (0, "1e300", "1e300"),
}
PAPER_EDITS = ("missing", "unknown-category", "huge-age")
CSV_PRIVATE_ROW = 7           # a private row of tables.good.csv under the CSV settings (bases.CSV)


def adult_source() -> Path | None:
    """The folder of the cached adult files, or None."""
    for base in (os.environ.get("CERTDP_CACHE"), str(Path.home() / ".cache" / "certdp")):
        if base and all((Path(base) / "adult" / f).is_file() for f in ADULT_FILES):
            return Path(base) / "adult"
    return None


def _records(path: Path, *, test_file: bool) -> list[int]:
    """Line indices of the records of one UCI file (non-blank lines; adult.test's first line is
    a comment)."""
    lines = path.read_bytes().split(b"\n")
    return [i for i, ln in enumerate(lines) if ln.strip() and not (test_file and i == 0)]


def _edited(src: Path, dst: Path, line: int, field: int, value: str) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    lines = (src / "adult.data").read_bytes().split(b"\n")
    cells = lines[line].split(b", ")
    cells[field] = value.encode()
    lines[line] = b", ".join(cells)
    (dst / "adult.data").write_bytes(b"\n".join(lines))
    os.link(src / "adult.test", dst / "adult.test")


def _adult(fx: Path, have: dict) -> None:
    src = adult_source()
    if src is None:
        have["adult"] = "no cached adult files ($CERTDP_CACHE/adult or ~/.cache/certdp/adult: run any " \
                        "`certdp ags dataset=adult` once online)"
        return
    import numpy as np
    d = fx / "adult"
    orig = d / "orig"
    orig.mkdir(parents=True, exist_ok=True)
    for f in ADULT_FILES:
        shutil.copyfile(src / f, orig / f)
    data, test = _records(orig / "adult.data", test_file=False), _records(orig / "adult.test", test_file=True)
    text = (orig / "adult.data").read_bytes().split(b"\n")
    complete = [i for i in data if b"?" not in text[i]]
    # official: every adult.data record is private; take an ordinary one
    official = complete[10]
    # paper: the first complete adult.data record among the seeded permutation's private ones
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(data) + len(test))[:PAPER_PRIVATE]
    ok = set(complete)
    paper = next(data[r] for r in perm if r < len(data) and data[r] in ok)
    meta = {"official": official, "paper": paper}
    for split, line in meta.items():
        for name, (field, value, _) in ADULT_EDITS.items():
            if split == "official" or name in PAPER_EDITS:
                _edited(orig, d / f"{split}-{name}", line, field, value)
    (d / "meta.json").write_text(json.dumps(meta))
    have["adult"] = True
    have["adult_line"] = meta


def _hard(fx: Path, have: dict) -> None:
    import pandas as pd
    h = fx / "hard"
    h.mkdir(parents=True, exist_ok=True)
    good = pd.read_csv(fx / "csv" / "good.csv", dtype=str, keep_default_na=False)
    nul = good.copy()
    nul.loc[CSV_PRIVATE_ROW, "x1"] = nul.loc[CSV_PRIVATE_ROW, "x1"] + "\x00"
    nul.to_csv(h / "nul.csv", index=False)                 # pandas writes the U+0000 as it is
    lines = (fx / "csv" / "good.csv").read_bytes().split(b"\n")
    cells = lines[CSV_PRIVATE_ROW + 1].split(b",")
    cells[0] = cells[0][:3] + b"\xff" + cells[0][3:]       # one byte that is not UTF-8, inside the number
    lines[CSV_PRIVATE_ROW + 1] = b",".join(cells)
    (h / "nonutf8.csv").write_bytes(b"\n".join(lines))
    good[["x1", "x2"]].head(5).to_csv(h / "queries.csv", index=False)
    # predict: parameters near the float64 limit.  The score 1e308 a - 1e308 b is finite in exact
    # arithmetic on every row, but 1e308 * 1e10 overflows: rows 0 and 1 compute inf - inf = nan
    # although their exact scores are +1e312 (label 1) and -1e312 (label 0); row 2's is +2e318
    # (+inf, label 1); row 3 is ordinary (label 1)
    doc = json.loads((fx / "pred" / "ok2.json").read_text())
    doc["releases"][0]["parameters"] = [1e308, -1e308, 0.0]
    (h / "overflow.json").write_text(json.dumps(doc))
    (h / "overflow.csv").write_text("a,b,y\n1.000001e10,1e10,1\n1e10,1.000001e10,0\n1e10,-1e10,1\n0.5,0.25,1\n")
    have["overflow_labels"] = [1, 0, 1, 1]
    (h / "empty.csv").write_bytes(b"")
    (h / "one.csv").write_text("a,b,y\n0.5,0.25,1\n")
    have["hard"] = True


def make_fixtures(fx: Path, python: str, root: Path, have: dict, needs: set) -> None:
    """The hardening fixtures below ``fx`` that ``needs`` names (after the surfaces' ones: the
    predict edges start from ``pred/ok2.json``)."""
    if "adult" in needs:
        _adult(fx, have)
    if "hard" in needs:
        _hard(fx, have)
