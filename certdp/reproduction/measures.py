"""Measures: how a value of the paper is computed from a figure's runs (:mod:`certdp.reproduction`).

A measure (:func:`evaluate`) reads the runs' CSVs only: ``{run: ID, csv: results, where: {...},
col: C, by: K, agg: one|min|max|mean|median|first}`` selects (``by`` gives a series over K;
``figure: true`` reads the figure's own data CSV instead of a run's), and ``ratio``, ``diff``,
``min``, ``max``, ``argmin``/``argmax`` (``over``: the level), ``first``/``last``/``all``/``frac``
of a comparison ``{gt|ge|lt|le: [a, b]}`` combine them; ``{not_run: reason}`` is a value certdp
does not compute.  A ``where`` value is a value, a list (any of), or ``{ge|gt|le|lt: v}``,
``{range: [lo, hi]}``, ``{nearest: v}``, ``{prefix: text}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.settings.figure_files import OPS

COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}


class Missing(Exception):
    """A value certdp cannot compute from the runs at hand (the reason says what is missing)."""


@dataclass
class RunView:
    """One finished (or not) run of a figure: its id, sweep point and directory."""
    id: str
    params: dict
    run_dir: Path
    ok: bool


@dataclass
class Source:
    """The runs of one figure, read lazily: ``frame(run, csv)`` concatenates the CSV of every
    finished run with that id, its sweep point added as columns; ``used`` collects the run
    directories a value read."""
    figure: str
    runs: dict[str, list[RunView]]
    fig_dir: Path
    used: set = field(default_factory=set)
    _cache: dict = field(default_factory=dict)

    def frame(self, run_id: str, csv: str) -> pd.DataFrame:
        if (run_id, csv) in self._cache:
            df, dirs = self._cache[(run_id, csv)]
            self.used.update(dirs)
            return df
        views = self.runs.get(run_id)
        if not views:
            raise Missing(f"no run '{run_id}' in this profile")
        ok = [v for v in views if v.ok]
        if not ok:
            raise Missing(f"run {run_id} has not finished (no done.json in its folder)")
        parts = []
        for v in ok:
            p = v.run_dir / f"{csv}.csv"
            if not p.exists():
                raise Missing(f"run {run_id} has no {csv}.csv")
            parts.append(pd.read_csv(p).assign(**{k: val for k, val in v.params.items()}))
        dirs = {v.run_dir for v in ok}
        df = pd.concat(parts, ignore_index=True)
        self._cache[(run_id, csv)] = (df, dirs)
        self.used.update(dirs)
        return df

    def figure_frame(self) -> pd.DataFrame:
        p = self.fig_dir / f"{self.figure}.csv"
        if not p.exists() or not p.stat().st_size:
            raise Missing(f"no figure data {p.name}")
        self.used.update(v.run_dir for vs in self.runs.values() for v in vs if v.ok)
        return pd.read_csv(p)


# ---------------------------------------------------------------------------- measures
def _match(col: pd.Series, cond) -> pd.Series:
    if isinstance(cond, dict):
        (op, v), = cond.items()
        if op == "range":
            return (col >= v[0]) & (col <= v[1])
        if op == "nearest":
            x = pd.to_numeric(col, errors="coerce")
            return np.isclose(x, x.iloc[int(np.nanargmin(np.abs(x - v)))]) if len(x) else x.astype(bool)
        if op == "prefix":
            return col.astype(str).str.startswith(str(v))
        return COMPARE[op](pd.to_numeric(col, errors="coerce"), v)
    if isinstance(cond, list):
        return np.logical_or.reduce([_match(col, c) for c in cond]) if cond else col.astype(bool) & False
    if isinstance(cond, bool) or isinstance(cond, str):
        return col.astype(str).str.lower() == str(cond).lower()
    return np.isclose(pd.to_numeric(col, errors="coerce"), float(cond), rtol=1e-9, atol=1e-12)


def _select(node: dict, src: Source):
    df = src.figure_frame() if node.get("figure") else src.frame(str(node["run"]), str(node.get("csv", "results")))
    where = dict(node.get("where") or {})
    # nearest matches within the other filters
    for key, cond in sorted(where.items(), key=lambda kv: isinstance(kv[1], dict) and "nearest" in kv[1]):
        if key not in df:
            raise Missing(f"{node.get('run', 'figure')}: no column {key}")
        df = df[np.asarray(_match(df[key], cond), dtype=bool)]
    what = f"{node.get('run', 'figure data')}" + (f" where {_fmt_where(where)}" if where else "")
    col = str(node["col"])
    if not len(df):
        raise Missing(f"no rows of {what} (not on this profile's grid)")
    if col not in df:
        raise Missing(f"{what}: no column {col}")
    agg = node.get("agg", "one")
    by = node.get("by")
    if by is not None:
        keys = [by] if isinstance(by, str) else list(by)
        g = df.groupby(keys)[col]
        s = g.first() if agg in ("one", "first") else g.agg(agg)
        if agg == "one" and (g.size() > 1).any():
            raise ValueError(f"{what}: several rows per {', '.join(keys)}; give agg")
        return s.sort_index()
    if agg == "one" and len(df) > 1:
        raise ValueError(f"{what}: {len(df)} rows, one expected; give agg")
    v = df[col].iloc[0] if agg in ("one", "first") else df[col].agg(agg)
    return v.item() if hasattr(v, "item") else v


SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "nearest": "nearest", "prefix": "starting", "range": "in"}


def _fmt_where(where: dict) -> str:
    def one(k, v):
        if isinstance(v, dict):
            (op, x), = v.items()
            return f"{k} {SIGNS[op]} {x}"
        return f"{k}={v}"
    return ", ".join(one(k, v) for k, v in where.items())


def _reduce(v, how: str):
    if isinstance(v, pd.Series):
        v = v.dropna()
        if not len(v):
            raise Missing("no values to reduce")
        return float(getattr(v, how)())
    return v


def _arg(s, how: str, over):
    if not isinstance(s, pd.Series) or not len(s.dropna()):
        raise Missing("no series to take the arg of")
    s = s.dropna()
    if over is None or s.index.nlevels == 1:
        return _scalar(getattr(s, "idx" + how)())
    rest = [n for n in s.index.names if n != over]
    return s.groupby(level=rest).apply(lambda g: _scalar(getattr(g.droplevel(rest), "idx" + how)()))


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def _compare(node: dict, src: Source) -> pd.Series:
    (op, (a, b)), = node.items()
    x, y = evaluate(a, src), evaluate(b, src)
    if not isinstance(x, pd.Series) and not isinstance(y, pd.Series):
        return pd.Series([bool(COMPARE[op](x, y))])
    if isinstance(x, pd.Series) and isinstance(y, pd.Series):
        x, y = x.align(y, join="inner")
        if not len(x):
            raise Missing("the two series share no point")
    out = COMPARE[op](x, y)
    return out if isinstance(out, pd.Series) else pd.Series(out)


def evaluate(node, src: Source):
    """A measure's value from the runs' CSVs: a number, a word, a bool or a series."""
    if not isinstance(node, dict):
        return node
    if "run" in node or node.get("figure"):
        return _select(node, src)
    (op, arg), = ((k, v) for k, v in node.items() if k in OPS)
    if op == "not_run":
        raise Missing(str(arg))
    if op in ("ratio", "diff"):
        a, b = (evaluate(x, src) for x in arg)
        if isinstance(a, pd.Series) and isinstance(b, pd.Series):
            a, b = a.align(b, join="inner")
        return a / b if op == "ratio" else a - b
    if op in ("min", "max"):
        if isinstance(arg, list):
            vals = [evaluate(x, src) for x in arg]
            if any(isinstance(v, pd.Series) for v in vals):
                return pd.concat(vals, axis=1, join="inner").agg(op, axis=1)
            return min(vals) if op == "min" else max(vals)
        return _reduce(evaluate(arg, src), op)
    if op in ("argmin", "argmax"):
        return _arg(evaluate(arg, src), op[3:], node.get("over"))
    cond = _compare(arg, src)
    if op == "all":
        return bool(cond.all())
    if op == "frac":
        return float(cond.mean())
    hits = [i for i, c in cond.sort_index().items() if c]
    if not hits:
        return f"none (up to {fmt(cond.index.max())})" if op == "first" else "none on this grid"
    return _scalar(hits[0] if op == "first" else hits[-1])


# ---------------------------------------------------------------------------- verdicts
def within(value, paper, tol: dict | None) -> bool:
    """Whether certdp's ``value`` agrees with the paper's under ``tol`` (every point of a series)."""
    if isinstance(value, pd.Series):
        return bool(len(value)) and all(within(v, paper, tol) for v in value)
    if isinstance(paper, bool) or isinstance(value, bool):
        return str(value).lower() == str(paper).lower()
    if isinstance(paper, str) or isinstance(value, str):
        return str(value).strip().lower() == str(paper).strip().lower()
    v, p = float(value), float(paper)
    if not math.isfinite(v):
        return False
    tol = tol or {}
    if "range" in tol:
        return tol["range"][0] <= v <= tol["range"][1]
    if tol.get("at_least"):
        return v >= p
    if tol.get("at_most"):
        return v <= p
    if "log10" in tol:
        return v > 0 and p > 0 and abs(math.log10(v / p)) <= tol["log10"]
    if "rel" in tol:
        return abs(v - p) <= tol["rel"] * abs(p)
    return abs(v - p) <= tol.get("abs", 1e-9 * max(1.0, abs(p)))


def fmt(v) -> str:
    if isinstance(v, pd.Series):
        v = v.dropna()
        if not len(v):
            return "none"
        name = ",".join(str(n) for n in v.index.names if n) or "point"
        if len(v) <= 6:
            return f"{name} " + "; ".join(f"{fmt(i)}: {fmt(x)}" for i, x in v.items())
        lo, hi = fmt(v.min()), fmt(v.max())
        return (lo if lo == hi else f"{lo} to {hi}") + f" over {len(v)} {name} values"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, tuple):
        return "(" + ", ".join(fmt(x) for x in v) + ")"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.3g}"
    return str(v)


def fmt_tolerance(tol: dict | None, paper) -> str:
    if not tol:
        return "exact"
    (k, v), = tol.items()
    if k == "range":
        return f"in [{fmt(v[0])}, {fmt(v[1])}]"
    return {"rel": f"±{fmt(100 * v)}%", "abs": f"±{fmt(v)}", "log10": f"±{fmt(v)} decade(s)",
            "at_least": f"≥ {fmt(paper)}", "at_most": f"≤ {fmt(paper)}"}[k]
