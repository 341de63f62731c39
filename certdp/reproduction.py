"""The paper side by side: every checkable value of the paper beside certdp's, in one table.

Each experiment file's ``paper:`` section lists the values the paper states for its figure (the
text, the tables, its claims, points readable from the figure descriptions), each with its
source and a tolerance, and says how certdp computes the same value from the figure's runs::

    paper:
      - id: gs_ratio_linear_pure            # unique in the file
        claim: Linear, pure DP, eps = 1: GS's MAE over the best arm's
        source: "Sec. 5.1.2, para. Private prediction baselines: 'the best arm's error is 57 times ...'"
        value: 57                           # a number, a word (an arm, a setting) or true/false
        tolerance: {rel: 0.25}              # rel | abs | range: [lo, hi] | log10 (decades) | at_least | at_most
        profiles: [paper]                   # profiles whose runs are the paper's setting for it (default)
        proven: <measure>                   # certdp's value, as it runs by default (proven)
        construction:                       # optional: certdp under the paper's own construction
          label: private-statistics scaling (dataset.scaling=private_stats_not_dp)
          runs: {california: california_private_stats}   # the proven measure on other runs,
          where: {certificate.substitutions: per_batch}   # and/or with these filters replaced,
          # measure: <measure>              # or a measure of its own, or
          # not_run: why certdp does not run it
        deviation: deviations.md#anchor     # the documented reason where certdp differs
        needs: paper profile (eps = 30)     # what a row needs beyond the quick profile
        point: {panel: "Linear, pure", x: 10, y: 0.079}   # the paper's marker on the figure

A measure (:func:`evaluate`) reads the runs' CSVs only: ``{run: ID, csv: results, where: {...},
col: C, by: K, agg: one|min|max|mean|median|first}`` selects (``by`` gives a series over K;
``figure: true`` reads the figure's own data CSV instead of a run's), and ``ratio``, ``diff``,
``min``, ``max``, ``argmin``/``argmax`` (``over``: the level), ``first``/``last``/``all``/``frac``
of a comparison ``{gt|ge|lt|le: [a, b]}`` combine them; ``{not_run: reason}`` is a value certdp
does not compute.  A ``where`` value is a value, a list (any of), or ``{ge|gt|le|lt: v}``,
``{range: [lo, hi]}``, ``{nearest: v}``, ``{prefix: text}``.

The verdict of a row: *not run* (a run or a grid point it needs is missing), *shape only (quick
profile)* (the profile is not among the value's ``profiles``: the numbers come from a reduced
grid), else *reproduced* (within tolerance) or *differs* (with its reason and section of
docs/deviations.md).  The verdict reads the proven value, or the paper's construction where
certdp has no proven run of the value.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from certdp.settings.figure_files import OPS

VERDICTS = ("reproduced", "differs", "shape only (quick profile)", "not run")
COLUMNS = ("figure", "label", "id", "claim", "source", "paper_value", "tolerance", "certdp_proven", "construction",
           "certdp_paper_construction", "verdict", "basis", "within_tolerance", "reason", "deviation", "needs",
           "profile", "runs")
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
            raise Missing(f"run {run_id} not finished")
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
        raise Missing(f"{what}: no rows (not on this profile's grid)")
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


def _fmt_where(where: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in where.items())


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
        return f"none (up to {_fmt(cond.index.max())})" if op == "first" else "none"
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


def _fmt(v) -> str:
    if isinstance(v, pd.Series):
        v = v.dropna()
        if not len(v):
            return "none"
        name = ",".join(str(n) for n in v.index.names if n) or "point"
        if v.map(lambda x: isinstance(x, (int, float, np.number)) and not isinstance(x, bool)).all():
            lo, hi = _fmt(v.min()), _fmt(v.max())
            return (lo if lo == hi else f"{lo} to {hi}") + f" over {len(v)} {name} value(s)"
        return "; ".join(f"{_fmt(i)}: {_fmt(x)}" for i, x in v.items())
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
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
        return f"in [{_fmt(v[0])}, {_fmt(v[1])}]"
    return {"rel": f"±{_fmt(100 * v)}%", "abs": f"±{_fmt(v)}", "log10": f"±{_fmt(v)} decade(s)",
            "at_least": f"≥ {_fmt(paper)}", "at_most": f"≤ {_fmt(paper)}"}[k]


def _construction_measure(entry: dict):
    c = entry.get("construction")
    if not c:
        return None
    if "not_run" in c:
        return {"not_run": c["not_run"]}
    if "measure" in c:
        return c["measure"]
    return _rewrite(entry["proven"], dict(c.get("runs") or {}), dict(c.get("where") or {}))


def _rewrite(node, runs: dict, where: dict):
    """The proven measure with run ids renamed and ``where`` filters replaced (keys it has)."""
    if isinstance(node, list):
        return [_rewrite(x, runs, where) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rewrite(v, runs, where) for k, v in node.items()}
    if "run" in out:
        out["run"] = runs.get(out["run"], out["run"])
        if "where" in out:
            out["where"] = {k: where.get(k, v) for k, v in out["where"].items()}
    return out


def _value(measure, src: Source):
    """(value, text, missing reason, run dirs read)."""
    src.used = set()
    try:
        v = evaluate(measure, src)
        return v, _fmt(v), "", set(src.used)
    except Missing as e:
        return None, "not run", str(e), set(src.used)


def row(entry: dict, src: Source, *, figure, label: str, profile: str, out_root: Path) -> dict:
    """One row of the table: the paper's value, certdp's (proven and under the paper's
    construction), the verdict and its reason."""
    paper, tol = entry["value"], entry.get("tolerance")
    pv, ptext, pmiss, used = _value(entry["proven"], src)
    cm = _construction_measure(entry)
    cv, ctext, cmiss = None, "", ""
    if cm is not None:
        cv, ctext, cmiss, cused = _value(cm, src)
        used |= cused
    # the verdict reads the proven value; the paper's construction where certdp has no proven run
    basis, value, miss = ("proven", pv, pmiss) if pv is not None or cm is None else ("paper's construction", cv, cmiss)
    ok = within(value, paper, tol) if value is not None else None
    reason, deviation = "", str(entry.get("deviation", ""))
    if value is None:
        verdict, reason = "not run", miss + (f"; proven: {pmiss}" if basis != "proven" else "")
        basis = ""
    elif profile not in entry.get("profiles", ["paper"]):
        verdict, reason = "shape only (quick profile)", f"the {profile} profile's grid is reduced; the paper profile compares"
    elif ok:
        verdict = "reproduced"
    else:
        verdict = "differs"
        reason = str(entry.get("reason") or ("documented" if deviation else "no documented reason (not declared)"))
        if cv is not None and basis == "proven" and within(cv, paper, tol):
            reason += "; the paper's construction reproduces it"
    if value is not None and basis != "proven":
        reason = "; ".join(x for x in (reason, f"proven: {pmiss}") if x)
    c = entry.get("construction") or {}
    return {"figure": figure, "label": label, "id": entry["id"], "claim": " ".join(str(entry["claim"]).split()),
            "source": " ".join(str(entry["source"]).split()), "paper_value": _fmt(paper),
            "tolerance": fmt_tolerance(tol, paper), "certdp_proven": ptext if pv is not None else f"not run: {pmiss}",
            "construction": str(c.get("label", "")),
            "certdp_paper_construction": (ctext if cv is not None else f"not run: {cmiss}") if cm is not None
            else "same as proven (certdp follows the paper here)",
            "verdict": verdict, "basis": basis, "within_tolerance": "" if ok is None else ("yes" if ok else "no"),
            "reason": reason, "deviation": deviation if verdict == "differs" or deviation else "",
            "needs": str(entry.get("needs", "")), "profile": profile,
            "runs": "; ".join(sorted(_rel(d, out_root) for d in used))}


def _rel(d: Path, root: Path) -> str:
    try:
        return str(Path(d).relative_to(root))
    except ValueError:
        return str(d)


# ---------------------------------------------------------------------------- the table
def views(resolved_runs) -> dict[str, list[RunView]]:
    """``certdp.figures.Resolved`` runs -> run id -> [RunView]."""
    out: dict[str, list[RunView]] = {}
    for r in resolved_runs:
        out.setdefault(r.spec.id, []).append(RunView(r.spec.id, dict(r.spec.params), r.run_dir, r.is_done()))
    return out


def table(exps: dict, runs_of: dict, *, profile: str, out_root: Path, fig_dir: Path) -> list[dict]:
    """Every ``paper:`` value of every experiment (``runs_of``: figure -> run id -> views)."""
    rows = []
    for name, exp in exps.items():
        src = Source(name, runs_of.get(name, {}), fig_dir)
        for entry in exp.paper:
            rows.append(row(entry, src, figure=name, label=exp.label, profile=profile, out_root=out_root))
    return rows


def write_table(exps: dict, out_root, *, profile: str, resolved: dict | None = None, resolve=None,
                echo=print) -> list[dict]:
    """``<out_root>/figures/reproduction.{csv,md}`` from the runs' CSVs (runs nothing).
    ``resolved``: figure -> resolved runs already at hand; the other figures' runs are resolved
    with ``resolve(spec, out_root)`` (:func:`certdp.figures.resolve`)."""
    from certdp import results
    out_root = Path(out_root)
    fig_dir = out_root / "figures"
    resolved = dict(resolved or {})
    for name, exp in exps.items():
        if name not in resolved and exp.paper and resolve is not None:
            resolved[name] = [resolve(s, out_root) for s in exp.specs(profile)]
    rows = table(exps, {n: views(rs) for n, rs in resolved.items()}, profile=profile, out_root=out_root,
                 fig_dir=fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    results.write_csv(fig_dir / "reproduction.csv", pd.DataFrame(rows, columns=list(COLUMNS)))
    results.atomic_write_text(fig_dir / "reproduction.md", markdown(rows, exps, profile=profile, fig_dir=fig_dir))
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    echo(f"[figures] reproduction table {fig_dir / 'reproduction.md'}: {len(rows)} paper value(s), "
         + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    return rows


def machine() -> str:
    """Date, machine and load: what a measured table says about where it was made."""
    try:
        load = "load %.2f / %.2f / %.2f (1 / 5 / 15 min)" % os.getloadavg()
    except OSError:
        load = "load unknown"
    return (f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} CPU core(s), {load}")


def deviation_target(anchor: str, fig_dir: Path | None) -> tuple[str, str]:
    """(section, link) of ``deviations.md#section``: relative to ``fig_dir`` where the checkout has
    docs/, else the path in the repository."""
    page, _, frag = anchor.partition("#")
    doc = Path(__file__).resolve().parent.parent / "docs" / (page or "deviations.md")
    target = os.path.relpath(doc, fig_dir) if fig_dir is not None and doc.exists() else f"docs/{page}"
    return frag or page, f"{target}#{frag}" if frag else target


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict], exps: dict, *, profile: str, fig_dir: Path | None, links: str = "local") -> str:
    """The table as Markdown, one section per figure.  ``links="docs"`` links the deviations as
    the docs pages do (``deviations.md#...``)."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    out = [f"# The paper's values beside certdp's ({profile} profile)", "",
           f"Made {machine()} from the runs' CSVs (`certdp figures --compare` rewrites it without running).  "
           + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(rows)} values.", ""]
    by_fig: dict[str, list[dict]] = {}
    for r in rows:
        by_fig.setdefault(r["figure"], []).append(r)
    for name, rs in by_fig.items():
        exp = exps.get(name)
        out += [f"## {name}: {exp.title if exp else ''} ({rs[0]['label']})", "",
                "| claim | paper | certdp (proven) | paper's construction | verdict | reason |",
                "|---|---|---|---|---|---|"]
        for r in rs:
            text, href = deviation_target(r["deviation"], fig_dir) if r["deviation"] else ("", "")
            link = r["deviation"] and f"deviations: [{text}]({r['deviation'] if links == 'docs' else href})"
            cons = r["certdp_paper_construction"] + (f" ({r['construction']})" if r["construction"] else "")
            out.append("| " + " | ".join(_cell(x) for x in (
                f"{r['claim']} <br><small>{r['source']}</small>", f"{r['paper_value']} ({r['tolerance']})",
                r["certdp_proven"], cons, f"**{r['verdict']}**",
                "; ".join(x for x in (r["reason"], link, r["needs"] and f"needs {r['needs']}") if x))) + " |")
        out.append("")
    return "\n".join(out)
