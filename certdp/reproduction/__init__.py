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

A measure (:mod:`certdp.reproduction.measures`) reads the runs' CSVs only.  The verdict of a
row: *not run* (a run or a grid point it needs is missing), *shape only (quick profile)* (the
profile is not among the value's ``profiles``: the numbers come from reduced settings), else
*reproduced* (within tolerance) or *differs* (with its reason and section of docs/deviations.md).
The verdict reads the proven value, or the paper's construction where certdp has no proven run
of the value.
"""

from __future__ import annotations

import os
import platform
import re
import time
import unicodedata
from pathlib import Path

import pandas as pd

from certdp.reproduction.measures import (Missing, RunView, Source, evaluate, fmt, fmt_tolerance,  # noqa: F401
                                          within)

VERDICTS = ("reproduced", "differs", "shape only (quick profile)", "not run")
COLUMNS = ("figure", "label", "id", "claim", "source", "paper_value", "tolerance", "certdp_proven", "construction",
           "certdp_paper_construction", "verdict", "basis", "within_tolerance", "reason", "deviation", "needs",
           "profile", "runs")


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
        return v, fmt(v), "", set(src.used)
    except Missing as e:
        return None, "not run", str(e), set(src.used)
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as e:   # a measure that does not fit its CSVs
        return None, "not run", f"measure error: {e}", set(src.used)


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
        verdict = "shape only (quick profile)"
        reason = f"the {profile} profile's reduced settings ({'within' if ok else 'outside'} the tolerance here); profile=paper compares"
    elif ok:
        verdict = "reproduced"
    else:
        verdict = "differs"
        reason = str(entry.get("reason") or ("a documented deviation" if deviation else "no documented reason (not declared)"))
        if cv is not None and basis == "proven" and within(cv, paper, tol):
            reason += "; the paper's construction reproduces it"
    if value is not None and basis != "proven":
        reason = "; ".join(x for x in (reason, f"proven: {pmiss}") if x)
    c = entry.get("construction") or {}
    return {"figure": figure, "label": label, "id": entry["id"], "claim": " ".join(str(entry["claim"]).split()),
            "source": " ".join(str(entry["source"]).split()), "paper_value": fmt(paper),
            "tolerance": fmt_tolerance(tol, paper),
            "certdp_proven": ptext if pv is not None else _not_run(pmiss, reason),
            "construction": str(c.get("label", "")),
            "certdp_paper_construction": (ctext if cv is not None else _not_run(cmiss, reason)) if cm is not None
            else "same as proven (certdp follows the paper here)",
            "verdict": verdict, "basis": basis, "within_tolerance": "" if ok is None else ("yes" if ok else "no"),
            "reason": reason, "deviation": deviation,
            "needs": str(entry.get("needs", "")), "profile": profile,
            "runs": "; ".join(sorted(_rel(d, out_root) for d in used))}


def _not_run(why: str, reason: str) -> str:
    """A value cell that was not computed: the why, unless the reason column already says it."""
    return "not run" if why and why in reason else f"not run: {why}"


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
    """(section title, link) of ``deviations.md#anchor``: relative to ``fig_dir`` when both lie in
    this checkout, the file's path otherwise (or the path in the repository without docs/)."""
    page, _, frag = anchor.partition("#")
    root = Path(__file__).resolve().parents[2]
    doc = root / "docs" / (page or "deviations.md")
    if not doc.exists():
        return frag or page, f"docs/{anchor}"
    titles = {slug(h): h for h in headings(doc.read_text())}
    target = str(doc)
    if fig_dir is not None and Path(fig_dir).resolve().is_relative_to(root):
        target = os.path.relpath(doc, fig_dir)
    return titles.get(frag, frag or page), f"{target}#{frag}" if frag else target


def headings(md: str) -> list[str]:
    """The Markdown headings of a page (outside code blocks)."""
    out, code = [], False
    for line in md.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and (m := re.match(r"#{1,6}\s+(.*?)\s*$", line)):
            out.append(m.group(1))
    return out


def slug(title: str) -> str:
    """A heading's anchor as mkdocs makes it (its default ``toc`` slugify)."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict], exps: dict, *, profile: str, fig_dir: Path | None, links: str = "local",
             level: int = 1) -> str:
    """The table as Markdown, one section per figure (headings from ``level``).  ``links="docs"``
    links the deviations as the docs pages do (``deviations.md#...``)."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    h = "#" * level
    out = [f"{h} The paper's values beside certdp's ({profile} profile)", "",
           f"Made {machine()} from the runs' CSVs (`certdp figures --compare` rewrites it without running).  "
           + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(rows)} values.", ""]
    by_fig: dict[str, list[dict]] = {}
    for r in rows:
        by_fig.setdefault(r["figure"], []).append(r)
    for name, rs in by_fig.items():
        exp = exps.get(name)
        out += [f"{h}# {name}: {exp.title if exp else ''} ({rs[0]['label']})", "",
                "| claim | paper | certdp (proven) | paper's construction | verdict | reason |",
                "|---|---|---|---|---|---|"]
        for r in rs:
            text, href = deviation_target(r["deviation"], fig_dir) if r["deviation"] else ("", "")
            link = r["deviation"] and f"see [{text}]({r['deviation'] if links == 'docs' else href})"
            cons = (f"{r['construction']}: " if r["construction"] else "") + r["certdp_paper_construction"]
            out.append("| " + " | ".join(_cell(x) for x in (
                f"{r['claim']} <br><small>{r['source']}</small>", f"{r['paper_value']} ({r['tolerance']})",
                r["certdp_proven"], cons, f"**{r['verdict']}**",
                "; ".join(x for x in (r["reason"], link, r["needs"] and f"needs {r['needs']}") if x))) + " |")
        out.append("")
    return "\n".join(out)
