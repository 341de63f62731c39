"""The released models of an AGS run and applying them (``certdp predict SOURCE --input t.csv``).

The run's ``publish/released.json`` (written by ``certdp ags``: :func:`certdp.methods.ags.released_document`) holds, per (release,
epsilon), one released parameter vector, the model's layer widths and loss, and the
preprocessing (public-only unless the document says ``dp_end_to_end: false``).  Predicting is
post-processing of the DP output with the user's own rows: no private statistic is read.

Where it is read from (:func:`released_path`): ``SOURCE`` is a run folder -- its
``publish/released.json`` (format ``certdp.released/2``), else its top-level ``released.json``
(format ``certdp.released/1``, runs made before the publish folder) -- or the path of a
``released.json`` itself (a recipient of a published file has no run folder).

What is trusted: nothing.  :func:`load_released` reads the file with a size cap and a nesting
guard (:mod:`certdp.settings.files`) and checks it against the schema of its format
(:data:`SCHEMA`): every field's type, every number finite, the model's widths and loss known and
consistent with ``n_params`` and with the preprocessing, every release's parameter vector of
exactly ``n_params`` finite numbers.  A bad document is one line naming the field
(``released.json.releases[0].parameters``) and the file.

Labels (:func:`true_codes`) are compared the way the run coded them: when the run's classes are
integers, an input cell is a class when it is that integer written any numeric way (``1``,
``01``, ``1.0``); when they are text, when its stripped text is the class.

Output: one row per (release, epsilon, input row) with the predicted class label
(:data:`PREDICTION_COLUMNS`); when the table holds the run's target column, the accuracy per
release too (the number the run's log.txt gives for the published release when the table is the
run's test rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE, results
from certdp.data.preprocessing import LABEL_CODINGS, Preprocessing, label_text
from certdp.errors import ConfigError
from certdp.settings.files import read_json_document, shown

RELEASED_FORMAT = "certdp.released/2"            # the format ``certdp ags`` writes
RELEASED_FORMATS = ("certdp.released/1", "certdp.released/2")
PUBLISH_DIR = "publish"
PREDICTION_COLUMNS = ("mechanism", "epsilon", "row", "prediction")
MAX_LAYERS = 64
MAX_PARAMS = 100_000_000
ALLOWED_DOC = "the released.json that certdp ags wrote, unmodified"
SOURCE_WHAT = ("the folder of a finished certdp ags run (it holds publish/released.json or released.json), or a "
               "released.json file")

# format -> (required top-level keys, optional ones); release -> (required, optional)
SCHEMA = {
    "certdp.released/1": (("format", "command", "dataset", "task", "seed", "dp_end_to_end", "model", "preprocessing",
                           "releases"), ()),
    "certdp.released/2": (("format", "publishable", "note", "command", "dataset", "task", "dp_end_to_end", "model",
                           "preprocessing", "releases"), ()),
}
RELEASE_SCHEMA = {
    "certdp.released/1": (("mechanism", "epsilon", "delta", "n_releases", "composition", "parameters"),
                          ("draw", "test_accuracy")),
    "certdp.released/2": (("mechanism", "regime", "epsilon", "delta", "n_releases", "composition", "parameters"), ()),
}


@dataclass(frozen=True)
class Release:
    """One released parameter vector and the budget it was released under."""
    mechanism: str
    epsilon: float
    delta: float
    parameters: np.ndarray            # [n_params] float64, finite


@dataclass(frozen=True, eq=False)
class Released:
    """A checked ``released.json``: the model, its preprocessing, its releases."""
    path: Path
    format: str
    dp_end_to_end: bool
    publishable: bool | None          # format 2 only
    note: str
    model: Any                        # certdp.models.ModelSpec
    preprocessing: Preprocessing
    releases: tuple[Release, ...]


class _Doc:
    """Field checks that raise one line ``released.json.<field>: <problem> in <file>; allowed: ...``."""

    def __init__(self, path: Path):
        self.path = path

    def bad(self, field: str, problem: str, allowed: str = ALLOWED_DOC) -> ConfigError:
        return ConfigError(f"released.json.{field}" if field else "released.json",
                           f"{problem} in {shown(self.path)}; allowed: {allowed}")

    def keys(self, d: Any, field: str, required: tuple, optional: tuple = ()) -> dict:
        if not isinstance(d, dict):
            raise self.bad(field, f"got {type(d).__name__}, not an object")
        missing = [k for k in required if k not in d]
        if missing:
            raise self.bad(f"{field}.{missing[0]}" if field else missing[0], "missing")
        unknown = [k for k in d if k not in required and k not in optional]
        if unknown:
            raise self.bad(f"{field}.{unknown[0]}" if field else str(unknown[0]), "unknown field",
                           f"the fields {', '.join(required + optional)}")
        return d

    def string(self, v: Any, field: str, allowed: tuple | None = None) -> str:
        if not isinstance(v, str) or (allowed is not None and v not in allowed):
            raise self.bad(field, f"got {v!r:.60}", ", ".join(allowed) if allowed else "a string")
        return v

    def integer(self, v: Any, field: str, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.bad(field, f"got {v!r:.60}", f"an integer in [{lo}, {hi}]")
        return v

    def number(self, v: Any, field: str, *, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            raise self.bad(field, f"got {v!r:.60}", f"a finite number in {rng}")
        return float(v)

    def vector(self, v: Any, field: str, n: int) -> np.ndarray:
        if not isinstance(v, list) or len(v) != n:
            raise self.bad(field, f"holds {len(v) if isinstance(v, list) else type(v).__name__} values, the model "
                                  f"has {n} parameters", f"a list of {n} finite numbers")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            i = next(i for i, x in enumerate(v) if not isinstance(x, (int, float)) or isinstance(x, bool))
            raise self.bad(f"{field}[{i}]", f"got {v[i]!r:.40} (not a number)", f"a list of {n} finite numbers")
        a = np.asarray(v, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise self.bad(f"{field}[{bad[0]}]", f"got {a[bad[0]]} ({bad.size} value(s) not finite)",
                           f"a list of {n} finite numbers")
        return a


def released_path(source: str | Path) -> Path:
    """The ``released.json`` that ``SOURCE`` names (see the module docstring)."""
    src = Path(source).expanduser()
    for part in src.absolute().parts:
        if not results.is_run_dir_name(part):
            raise ConfigError("RUN_DIR", f"{shown(src)} belongs to an unfinished run (a staging or replaced folder: "
                                         f"'{part}'); allowed: {SOURCE_WHAT}")
    if src.is_dir():
        for cand in (src / PUBLISH_DIR / "released.json", src / "released.json"):
            if cand.exists():
                return cand
        kind = "a certdp run without released models (only certdp ags releases models)" if results.run_kind(src) \
            else "not a certdp run folder"
        raise ConfigError("RUN_DIR", f"{shown(src)} holds no released.json ({kind}); allowed: {SOURCE_WHAT}")
    if not src.exists():
        raise ConfigError("RUN_DIR", f"{shown(src)} does not exist; allowed: {SOURCE_WHAT}")
    return src


def load_released(source: str | Path) -> Released:
    """The checked released models of ``SOURCE`` (a :class:`ConfigError` on the first problem)."""
    from certdp.losses import LOSSES
    from certdp.models import ModelSpec
    from certdp.privacy import mechanisms
    from certdp.privacy.accounting import accountant_names
    path = released_path(source)
    doc = read_json_document(path, key="released.json", what=ALLOWED_DOC)
    c = _Doc(path)
    if not isinstance(doc, dict):
        raise c.bad("", f"got a JSON {type(doc).__name__}, not an object")
    fmt = doc.get("format")
    if fmt not in RELEASED_FORMATS:
        raise c.bad("format", f"got {fmt!r:.60}", ", ".join(RELEASED_FORMATS))
    c.keys(doc, "", *SCHEMA[fmt])
    c.string(doc["command"], "command", ("ags",))
    c.string(doc["dataset"], "dataset")
    task = c.string(doc["task"], "task", ("binary", "multiclass"))
    if fmt == "certdp.released/1":
        c.integer(doc["seed"], "seed", 0, 2 ** 63 - 1)
    if not isinstance(doc["dp_end_to_end"], bool):
        raise c.bad("dp_end_to_end", f"got {doc['dp_end_to_end']!r:.40}", "true or false")
    publishable = None
    if fmt == "certdp.released/2":
        if not isinstance(doc["publishable"], bool):
            raise c.bad("publishable", f"got {doc['publishable']!r:.40}", "true or false")
        publishable = doc["publishable"]
        c.string(doc["note"], "note")
    m = c.keys(doc["model"], "model", ("widths", "loss", "n_params"))
    w = m["widths"]
    if not isinstance(w, list) or not 2 <= len(w) <= MAX_LAYERS + 1:
        raise c.bad("model.widths", f"got {w!r:.60}", f"a list of 2 to {MAX_LAYERS + 1} layer widths")
    widths = tuple(c.integer(v, f"model.widths[{i}]", 1, MAX_PARAMS) for i, v in enumerate(w))
    implied = sum(o * i + o for i, o in zip(widths[:-1], widths[1:]))
    if implied > MAX_PARAMS:
        raise c.bad("model.widths", f"imply {implied:,} parameters", f"at most {MAX_PARAMS:,}")
    loss = c.string(m["loss"], "model.loss", ("hinge", "ce"))
    if loss not in LOSSES:                                # pragma: no cover - the registry holds both
        raise c.bad("model.loss", f"got {loss!r}", ", ".join(LOSSES))
    if c.integer(m["n_params"], "model.n_params", 1, MAX_PARAMS) != implied:
        raise c.bad("model.n_params", f"got {m['n_params']}, the widths {list(widths)} imply {implied}",
                    f"{implied} (the number of parameters the widths imply)")
    try:
        model = ModelSpec(widths, loss)
    except ValueError as e:
        raise c.bad("model", f"{e}") from None
    prep = _preprocessing(c, doc["preprocessing"], task=task, widths=widths, loss=loss)
    rel_req, rel_opt = RELEASE_SCHEMA[fmt]
    rels = doc["releases"]
    if not isinstance(rels, list) or not rels:
        raise c.bad("releases", f"got {rels!r:.60}", "a non-empty list of releases")
    out = []
    for i, r in enumerate(rels):
        f = f"releases[{i}]"
        c.keys(r, f, rel_req, rel_opt)
        mech = c.string(r["mechanism"], f"{f}.mechanism", tuple(mechanisms.names("parameter")))
        if fmt == "certdp.released/2":
            c.string(r["regime"], f"{f}.regime", (mechanisms.REGISTRY[mech].regime,))
        eps = c.number(r["epsilon"], f"{f}.epsilon", lo=0, hi=1e300, lo_open=True)
        delta = c.number(r["delta"], f"{f}.delta", lo=0, hi=1, hi_open=True)
        c.integer(r["n_releases"], f"{f}.n_releases", 1, 10 ** 9)
        c.string(r["composition"], f"{f}.composition", accountant_names("compose"))
        out.append(Release(mech, eps, delta, c.vector(r["parameters"], f"{f}.parameters", implied)))
    return Released(path, fmt, doc["dp_end_to_end"], publishable, str(doc.get("note", "")), model, prep, tuple(out))


def _preprocessing(c: _Doc, d: Any, *, task: str, widths: tuple, loss: str) -> Preprocessing:
    if not isinstance(d, dict):
        raise c.bad("preprocessing", f"got {d!r:.60}", "the preprocessing object certdp wrote")
    try:
        prep = Preprocessing.from_dict(d)
    except (ValueError, TypeError, KeyError) as e:
        raise c.bad("preprocessing", " ".join(str(e).split())[:160]) from None
    if prep.task != task:
        raise c.bad("preprocessing.task", f"got {prep.task!r}, the document's task is {task!r}", task)
    if prep.n_features != widths[0]:
        raise c.bad("preprocessing.columns", f"map rows to {prep.n_features} features, the model reads {widths[0]}",
                    "a preprocessing whose features match model.widths[0]")
    coding = "sign" if loss == "hinge" else "index"
    if prep.label_coding != coding or coding not in LABEL_CODINGS:
        raise c.bad("preprocessing.label_coding", f"got {prep.label_coding!r}, the {loss} loss codes labels as "
                                                  f"{coding!r}", coding)
    if not prep.target:
        raise c.bad("preprocessing.target", "missing", "the name of the run's label column")
    n_out = 1 if coding == "sign" else len(prep.classes)
    if widths[-1] != n_out:
        raise c.bad("preprocessing.classes", f"list {len(prep.classes)} classes, the model has {widths[-1]} outputs",
                    "one class per output (two for a one-output hinge model)")
    if any(isinstance(k, float) or not isinstance(k, (int, str)) or isinstance(k, bool) for k in prep.classes):
        raise c.bad("preprocessing.classes", f"got {list(prep.classes)[:5]!r:.80}", "integers or strings")
    return prep


def read_input(path: str | Path) -> tuple[list[str], pd.DataFrame]:
    """``(header, cells)`` of the table to predict on: csv cells as text (compared the way the run
    read its own table), parquet columns as stored; refused in one line under ``--input``: what
    :func:`certdp.data.tables.read_table` refuses, and a header without data rows."""
    from certdp.data.tables import read_table
    p = Path(path).expanduser()
    try:
        header, data = read_table(p)
    except ConfigError as e:
        problem, sep, allowed = e.message.partition("; allowed: ")
        if " is empty (" in problem:          # the loader's allowed part counts the rows a run needs to train
            sep, allowed = "; allowed: ", "a table with a header row and at least one data row"
        raise ConfigError("--input", f"{problem}{sep}{allowed}") from None
    if len(data) == 0:
        raise ConfigError("--input", f"{shown(p)} has a header but no data rows; allowed: a table with at least one "
                                     "data row")
    return header, data


def _column(header: list[str], data: pd.DataFrame, name: str, where: str) -> pd.Series:
    at = [i for i, h in enumerate(header) if h == name]
    if len(at) > 1:
        raise ConfigError("--input", f"{name!r} names {len(at)} columns of {where} (columns "
                                     f"{' and '.join(str(i + 1) for i in at)}); allowed: a table whose columns have "
                                     "distinct names (rename one)")
    return data[at[0]]


def feature_matrix(prep: Preprocessing, header: list[str], data: pd.DataFrame, *, where: str) -> np.ndarray:
    """The model's raw columns as float64 [n, d] (missing, non-numeric and infinite cells refused)."""
    missing = [c for c in prep.columns if c not in header]
    if missing:
        raise ConfigError("--input", f"{where} lacks the column{'s' if len(missing) > 1 else ''} "
                                     f"{', '.join(map(repr, missing[:5]))}; allowed: a table with the model's columns "
                                     f"{', '.join(map(repr, prep.columns[:10]))}{', ...' if len(prep.columns) > 10 else ''}")
    cols = []
    for name in prep.columns:
        col = _column(header, data, name, where)
        vals = pd.to_numeric(col.astype("string").str.strip() if col.dtype.kind not in "biuf" else col,
                             errors="coerce").to_numpy(np.float64, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(vals))
        if bad.size:
            raise ConfigError("--input", f"column {name!r} of {where} holds {bad.size} empty, non-numeric or "
                                         f"infinite cell(s) (first: data row {bad[0] + 1}: {str(col.iloc[bad[0]])[:30]!r}); "
                                         "allowed: finite numbers in every row of the model's columns")
        cols.append(vals)
    return np.stack(cols, axis=1)


def true_codes(prep: Preprocessing, col: pd.Series, *, where: str) -> np.ndarray:
    """The model codes of a column of labels, compared the way the run coded its classes:
    numerically when every class is an integer (``01``, ``1.0``, ``1e0`` are the class 1), by
    stripped text otherwise."""
    classes = list(prep.classes)
    if all(isinstance(k, int) for k in classes):
        raw = col.astype("string").str.strip() if col.dtype.kind not in "biuf" else col
        vals = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        ok = np.isfinite(vals) & (np.round(vals) == vals) & (np.abs(vals) < 2 ** 53)
        index = {int(k): i for i, k in enumerate(classes)}
        idx = np.array([index.get(int(v), -1) if good else -1 for v, good in zip(vals, ok)], dtype=np.int64)
    else:
        index = {label_text(k): i for i, k in enumerate(classes)}
        idx = np.array([index.get(label_text(v), -1) if not pd.isna(v) else -1 for v in col.tolist()], dtype=np.int64)
    bad = np.flatnonzero(idx < 0)
    if bad.size:
        raise ConfigError("--input", f"column {prep.target!r} of {where} holds {bad.size} label(s) outside the run's "
                                     f"classes (first: data row {bad[0] + 1}: {str(col.iloc[bad[0]])[:30]!r}); allowed: "
                                     f"the classes {classes[:10]}, or leave the column out to predict without accuracy")
    return 2 * idx - 1 if prep.label_coding == "sign" else idx


def _finite_scores(scores: torch.Tensor, *, release: str, where: str) -> None:
    """Refuse a row whose model scores are not all finite: float64 overflowed on the way (features
    near 1e308, or huge weights times large features), and a NaN or an infinity has no class the
    model chose -- a label printed from it would be made up (``NaN >= 0`` is false, so a hinge
    model would name its first class)."""
    bad = np.flatnonzero(~torch.isfinite(scores.reshape(scores.shape[0], -1)).all(-1).numpy())
    if bad.size:
        first = scores.reshape(scores.shape[0], -1)[bad[0]]
        shown_score = next(v for v in first.tolist() if not math.isfinite(v))
        raise ConfigError("--input", f"{bad.size} row(s) of {where} give the release {release} a score that is not "
                                     f"finite (first: data row {bad[0] + 1}: {shown_score}; float64 overflowed), so they "
                                     "have no predicted class; allowed: rows whose values keep every score finite "
                                     "(of the size of the run's own data)")


def predict(rel: Released, header: list[str], data: pd.DataFrame, *, mechanism: str | None = None,
            epsilon: float | None = None, where: str = "the input table") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predictions, summary) of every release of ``rel`` (or the one ``mechanism``/``epsilon``
    selects) on the raw rows ``data`` (columns ``0..n-1`` named by ``header``)."""
    chosen = [r for r in rel.releases if (mechanism is None or r.mechanism == mechanism)
              and (epsilon is None or np.isclose(r.epsilon, epsilon))]
    if not chosen:
        have = ", ".join(f"{r.mechanism}@{r.epsilon:g}" for r in rel.releases)
        raise ConfigError("--mechanism/--epsilon", f"no release matches; allowed: {have}")
    prep, model = rel.preprocessing, rel.model
    x = torch.as_tensor(prep.apply(feature_matrix(prep, header, data, where=where), key="--input"), dtype=DTYPE)
    y = true_codes(prep, _column(header, data, prep.target, where), where=where) if prep.target in header else None
    preds, summary = [], []
    for r in chosen:
        scores = model.forward(torch.as_tensor(r.parameters, dtype=DTYPE), x)
        _finite_scores(scores, release=f"{r.mechanism}@{r.epsilon:g}", where=where)
        codes = model.loss.classify(scores).numpy().astype(np.int64)
        preds.append(pd.DataFrame({"mechanism": r.mechanism, "epsilon": r.epsilon, "row": np.arange(len(x)),
                                   "prediction": prep.decode_labels(codes)}))
        row = {"mechanism": r.mechanism, "epsilon": r.epsilon, "delta": r.delta, "n_rows": len(x)}
        if y is not None:
            row["accuracy"] = float(np.mean(codes == y))
        summary.append(row)
    return pd.concat(preds, ignore_index=True)[list(PREDICTION_COLUMNS)], pd.DataFrame(summary)
