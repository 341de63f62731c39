"""The experiment files of ``certdp figures`` (``experiments/<name>.yaml``), checked field by field
before any run is composed: every problem one line ``<file>:<field>: <problem>; allowed: ...``
(a ``runs`` that is not a list, a run that is a scalar, ``profiles`` given as a list, overrides
given as one string, a sweep value that is not a list, an unknown command or field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from certdp.errors import ConfigError


def _bad(path: Path, field: str, problem: str, allowed: str) -> ConfigError:
    return ConfigError(f"{path.name}:{field}", f"{problem}; allowed: {allowed}")


def _str_list(path: Path, field: str, v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, (str, int, float, bool)) for x in v):
        raise _bad(path, field, f"got {v!r:.80}", "a list of overrides such as [dataset=linear, train.steps=5]")
    return [str(x) for x in v]


def _sweep(path: Path, field: str, v: Any) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, list) and x for k, x in v.items()):
        raise _bad(path, field, f"got {v!r:.80}", "a mapping KEY: [value, ...] (each list non-empty)")
    return v


def check_experiment(d: Any, path: Path, *, profiles: tuple[str, ...]) -> dict:
    """The experiment file's content checked field by field (one line naming file and field)."""
    from certdp.settings import config_dir
    command_names = sorted(p.stem for p in config_dir().glob("*.yaml") if p.stem != "base")
    if not isinstance(d, dict):
        raise _bad(path, "", f"got {type(d).__name__}, not a mapping", "the fields name, caption, plot, runs")
    for key in ("name", "caption", "plot", "runs"):
        if key not in d:
            raise _bad(path, key, "missing (required in an experiment file)", "name, caption, plot and runs")
        if key != "runs" and not isinstance(d[key], str):
            raise _bad(path, key, f"got {d[key]!r:.60}", "a string")
    if not isinstance(d["runs"], list) or not d["runs"]:
        raise _bad(path, "runs", f"got {d['runs']!r:.60}", "a non-empty list of runs (each with id and command)")
    for i, r in enumerate(d["runs"]):
        if not isinstance(r, dict):
            raise _bad(path, f"runs[{i}]", f"got {r!r:.60}", "a mapping with id, command, overrides, ...")
        for key in ("id", "command"):
            if key not in r or not isinstance(r[key], (str, int)) or isinstance(r[key], bool):
                raise _bad(path, f"runs[{i}].{key}", f"got {r.get(key)!r:.60}", "a string (required)")
        if r["command"] not in command_names:
            raise _bad(path, f"runs[{i}].command", f"got {r['command']!r:.40}", ", ".join(command_names))
        unknown = set(r) - {"id", "command", "overrides", "sweep", "expect", "profiles"}
        if unknown:
            raise _bad(path, f"runs[{i}].{sorted(unknown)[0]}", "unknown field",
                       "id, command, overrides, sweep, expect, profiles")
        _str_list(path, f"runs[{i}].overrides", r.get("overrides"))
        _sweep(path, f"runs[{i}].sweep", r.get("sweep"))
        _str_list(path, f"runs[{i}].expect", r.get("expect"))
        run_profiles = r.get("profiles") or {}
        if not isinstance(run_profiles, dict):
            raise _bad(path, f"runs[{i}].profiles", f"got {run_profiles!r:.60}", f"a mapping of {', '.join(profiles)}")
        for prof, v in run_profiles.items():
            if prof not in profiles:
                raise _bad(path, f"runs[{i}].profiles", f"unknown {prof!r}", ", ".join(profiles))
            if v is None:
                continue
            if not isinstance(v, dict) or set(v) - {"overrides", "sweep"}:
                raise _bad(path, f"runs[{i}].profiles.{prof}", f"got {v!r:.60}", "a mapping with overrides and sweep")
            _str_list(path, f"runs[{i}].profiles.{prof}.overrides", v.get("overrides"))
            _sweep(path, f"runs[{i}].profiles.{prof}.sweep", v.get("sweep"))
    if "paper" in d:
        check_paper(d["paper"], path, run_ids={str(r["id"]) for r in d["runs"]}, profiles=profiles)
    return d


# the paper: section (certdp.reproduction documents the fields and the measure grammar)
ENTRY_KEYS = {"id", "claim", "source", "value", "tolerance", "profiles", "proven", "construction", "deviation",
              "reason", "needs", "point"}
SELECT_KEYS = {"run", "figure", "csv", "where", "col", "by", "agg"}
OPS = ("ratio", "diff", "min", "max", "argmin", "argmax", "first", "last", "all", "frac", "not_run")
AGGS = ("one", "min", "max", "mean", "median", "first")
MATCHERS = ("ge", "gt", "le", "lt", "range", "nearest", "prefix")
TOLERANCES = ("rel", "abs", "range", "log10", "at_least", "at_most")
COMPARISONS = ("gt", "ge", "lt", "le")


def _measure(path: Path, f: str, node: Any, run_ids: set[str]) -> None:
    """A measure: a constant, a select or an operation on measures (one line per problem)."""
    if isinstance(node, (int, float, str, bool)):
        return
    if not isinstance(node, dict) or not node:
        raise _bad(path, f, f"got {node!r:.60}", "a number, a select {run, col, ...} or one of " + ", ".join(OPS))
    if "run" in node or "figure" in node:
        if set(node) - SELECT_KEYS:
            raise _bad(path, f"{f}.{sorted(set(node) - SELECT_KEYS)[0]}", "unknown field", ", ".join(sorted(SELECT_KEYS)))
        if "run" in node and str(node["run"]) not in run_ids:
            raise _bad(path, f"{f}.run", f"unknown run {node['run']!r:.40}", ", ".join(sorted(run_ids)))
        if not isinstance(node.get("col"), str):
            raise _bad(path, f"{f}.col", f"got {node.get('col')!r:.40}", "a column of the CSV (required)")
        if node.get("agg", "one") not in AGGS:
            raise _bad(path, f"{f}.agg", f"got {node.get('agg')!r:.40}", ", ".join(AGGS))
        where = node.get("where") or {}
        if not isinstance(where, dict):
            raise _bad(path, f"{f}.where", f"got {where!r:.60}", "a mapping column: value | [values] | {op: value}")
        for k, cond in where.items():
            if isinstance(cond, dict) and (len(cond) != 1 or next(iter(cond)) not in MATCHERS):
                raise _bad(path, f"{f}.where.{k}", f"got {cond!r:.60}", "one of " + ", ".join(MATCHERS))
        return
    ops = [k for k in node if k in OPS]
    extra = set(node) - set(OPS) - {"over"}
    if len(ops) != 1 or extra:
        raise _bad(path, f, f"got {sorted(node)!r:.60}", "exactly one of " + ", ".join(OPS) + " (and over)")
    op, arg = ops[0], node[ops[0]]
    if op == "not_run":
        if not isinstance(arg, str):
            raise _bad(path, f"{f}.not_run", f"got {arg!r:.40}", "the reason (a string)")
    elif op in ("ratio", "diff"):
        if not isinstance(arg, list) or len(arg) != 2:
            raise _bad(path, f"{f}.{op}", f"got {arg!r:.60}", "two measures [a, b]")
        for i, a in enumerate(arg):
            _measure(path, f"{f}.{op}[{i}]", a, run_ids)
    elif op in ("first", "last", "all", "frac"):
        if not isinstance(arg, dict) or len(arg) != 1 or next(iter(arg)) not in COMPARISONS \
                or not isinstance(next(iter(arg.values())), list) or len(next(iter(arg.values()))) != 2:
            raise _bad(path, f"{f}.{op}", f"got {arg!r:.60}", "a comparison {gt|ge|lt|le: [a, b]}")
        (c, pair), = arg.items()
        for i, a in enumerate(pair):
            _measure(path, f"{f}.{op}.{c}[{i}]", a, run_ids)
    else:
        for i, a in enumerate(arg if isinstance(arg, list) else [arg]):
            _measure(path, f"{f}.{op}" + (f"[{i}]" if isinstance(arg, list) else ""), a, run_ids)


def check_paper(entries: Any, path: Path, *, run_ids: set[str], profiles: tuple[str, ...]) -> None:
    """The ``paper:`` section: a list of the paper's values, each with its source, tolerance and
    measures (a run id not in the file, an unknown operation or field is one line)."""
    if not isinstance(entries, list):
        raise _bad(path, "paper", f"got {entries!r:.60}", "a list of the paper's values (id, claim, source, ...)")
    seen = set()
    for i, e in enumerate(entries):
        f = f"paper[{i}]"
        if not isinstance(e, dict):
            raise _bad(path, f, f"got {e!r:.60}", "a mapping with id, claim, source, value, proven")
        for key in ("id", "claim", "source", "value", "proven"):
            if key not in e:
                raise _bad(path, f"{f}.{key}", "missing", "id, claim, source, value and proven (required)")
        for key in ("id", "claim", "source"):
            if not isinstance(e[key], str) or not e[key].strip():
                raise _bad(path, f"{f}.{key}", f"got {e[key]!r:.60}", "a non-empty string")
        if e["id"] in seen:
            raise _bad(path, f"{f}.id", f"{e['id']!r} given twice", "ids unique in the file")
        seen.add(e["id"])
        if set(e) - ENTRY_KEYS:
            raise _bad(path, f"{f}.{sorted(set(e) - ENTRY_KEYS)[0]}", "unknown field", ", ".join(sorted(ENTRY_KEYS)))
        if not isinstance(e["value"], (int, float, str, bool)):
            raise _bad(path, f"{f}.value", f"got {e['value']!r:.60}", "a number, a word or true/false")
        tol = e.get("tolerance")
        numeric = isinstance(e["value"], (int, float)) and not isinstance(e["value"], bool)
        if tol is None and numeric:
            raise _bad(path, f"{f}.tolerance", "missing for a number", "{" + "|".join(TOLERANCES) + ": ...}")
        if tol is not None and (not isinstance(tol, dict) or len(tol) != 1 or next(iter(tol)) not in TOLERANCES):
            raise _bad(path, f"{f}.tolerance", f"got {tol!r:.60}", "one of {" + "|".join(TOLERANCES) + ": ...}")
        if tol and "range" in tol and not (isinstance(tol["range"], list) and len(tol["range"]) == 2):
            raise _bad(path, f"{f}.tolerance.range", f"got {tol['range']!r:.60}", "[lo, hi]")
        prof = e.get("profiles", ["paper"])
        if not isinstance(prof, list) or set(prof) - set(profiles):
            raise _bad(path, f"{f}.profiles", f"got {prof!r:.60}", "a list of " + ", ".join(profiles))
        _measure(path, f"{f}.proven", e["proven"], run_ids)
        c = e.get("construction")
        if c is not None:
            if not isinstance(c, dict) or not isinstance(c.get("label"), str) \
                    or set(c) - {"label", "runs", "where", "measure", "not_run"}:
                raise _bad(path, f"{f}.construction", f"got {c!r:.60}",
                           "a mapping with label and runs / where / measure / not_run")
            for rid in (c.get("runs") or {}).values():
                if str(rid) not in run_ids:
                    raise _bad(path, f"{f}.construction.runs", f"unknown run {rid!r:.40}", ", ".join(sorted(run_ids)))
            if "measure" in c:
                _measure(path, f"{f}.construction.measure", c["measure"], run_ids)
        if "deviation" in e and not (isinstance(e["deviation"], str) and e["deviation"].startswith("deviations.md#")):
            raise _bad(path, f"{f}.deviation", f"got {e['deviation']!r:.60}", "deviations.md#<section anchor>")
        pt = e.get("point")
        if pt is not None and (not isinstance(pt, dict) or not isinstance(pt.get("panel"), str) or "x" not in pt
                               or set(pt) - {"panel", "x", "y", "axis"} or pt.get("axis", "left") not in ("left", "right")):
            raise _bad(path, f"{f}.point", f"got {pt!r:.60}", "{panel: <title text>, x: ..., y: ..., axis: left|right}")


def read_experiment(path: Path, *, profiles: tuple[str, ...]) -> dict:
    """An experiment file read safely (:func:`certdp.settings.files.read_yaml_document`; its
    aliases may not expand beyond a million nodes) and checked (:func:`check_experiment`)."""
    from certdp.settings.files import read_yaml_document
    d = read_yaml_document(path, key=path.name, what="an experiment file (name, caption, plot, runs)", aliases=True)
    return check_experiment(d, path, profiles=profiles)
