"""Issue 28, items 1-2: every loader as safe as ``dataset=csv``.  One private record of UCI Adult
with a ``?``, an unknown category, a text, infinite or 1e300 age, and a private csv cell holding
U+0000 or a byte that is not UTF-8, must not decide whether the run succeeds, what it says or what
``publish/`` holds; public and test rows stay strict (refused in one line naming the file)."""

from __future__ import annotations

from tools.prober.bases import CSV
from tools.prober.fixtures_hardening import ADULT_EDITS, PAPER_EDITS
from tools.prober.model import Table

ADULT_CORRECT = ("exit 0 like the unmodified copy; publish/released.json and publish/README.txt identical to "
                 "the unmodified copy's apart from the noised parameters (same preprocessing block: the split and "
                 "the public rows did not move); the same n_train and n_test; neither the changed value nor the "
                 "record's number in stdout, stderr or log.txt")
CSV_CORRECT = ("exit 0 like good.csv (the cell is private: imputed, never refused); the same n_train and n_test; "
               "neither the cell's bytes nor its row number in any message")


ADULT_WHAT = {"missing": "a '?' (a missing workclass)", "unknown-category": "an unknown native_country",
              "text-age": "a text age", "inf-age": "an infinite age", "huge-age": "an age of 1e300"}
PUBLIC_STRICT = "refused in one line naming the file (a public or test row holds it; public and test rows are strict)"


def add(t: Table) -> None:
    with t.marked(hardening=True, item=1, correct=ADULT_CORRECT):
        for name in ADULT_EDITS:
            t.special("adult-neighbour", f"adult:official split, one private record with {ADULT_WHAT[name]}",
                      section="dataset", category="privacy", timeout=600, fixture="adult", split="official",
                      variant=name)
        for name in PAPER_EDITS:
            t.special("adult-neighbour", f"adult:paper split (the preset's), one private record with "
                                         f"{ADULT_WHAT[name]}", section="dataset", category="privacy", timeout=600,
                      fixture="adult", split="paper", variant=name)
    with t.marked(hardening=True, item=2, correct=CSV_CORRECT):
        for name, what in (("nul", "U+0000 (written by pandas.to_csv)"), ("nonutf8", "a byte that is not UTF-8")):
            t.special("csv-private", f"csv:a private cell holding {what}", section="dataset.path", category="privacy",
                      timeout=300, fixture="hard", table=f"{{fx}}/hard/{name}.csv")
    with t.marked(hardening=True, item=2, correct=PUBLIC_STRICT):
        table_keys = ("dataset.path", "dataset.features", "dataset.target")
        for name in ("inf10.csv", "nan10.csv"):
            t.add("agtr", [f"dataset.path={{fx}}/csv/{name}"], "refuse", table_keys + ("dataset.dropna",), base=CSV,
                  category="bad-table", section="dataset.path")
