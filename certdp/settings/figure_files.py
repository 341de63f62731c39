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
        profiles = r.get("profiles") or {}
        if not isinstance(profiles, dict):
            raise _bad(path, f"runs[{i}].profiles", f"got {profiles!r:.60}", f"a mapping of {', '.join(profiles)}")
        for prof, v in profiles.items():
            if prof not in profiles:
                raise _bad(path, f"runs[{i}].profiles", f"unknown {prof!r}", ", ".join(profiles))
            if v is None:
                continue
            if not isinstance(v, dict) or set(v) - {"overrides", "sweep"}:
                raise _bad(path, f"runs[{i}].profiles.{prof}", f"got {v!r:.60}", "a mapping with overrides and sweep")
            _str_list(path, f"runs[{i}].profiles.{prof}.overrides", v.get("overrides"))
            _sweep(path, f"runs[{i}].profiles.{prof}.sweep", v.get("sweep"))
    return d


def read_experiment(path: Path, *, profiles: tuple[str, ...]) -> dict:
    """An experiment file read safely (:func:`certdp.settings.files.read_yaml_document`; its
    aliases may not expand beyond a million nodes) and checked (:func:`check_experiment`)."""
    from certdp.settings.files import read_yaml_document
    d = read_yaml_document(path, key=path.name, what="an experiment file (name, caption, plot, runs)", aliases=True)
    return check_experiment(d, path, profiles=profiles)
