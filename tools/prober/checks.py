"""What a finished run must hold: CSVs pandas reads, non-empty, without ``nan``/``inf`` text,
their key cells filled in and in range, no audit violation, and a ``config.yaml`` and results
that record the values given on the command line (else a silent replacement)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from tools.prober.bases import FILES, REQUIRED
from tools.prober.model import Probe
from tools.prober.process import csv_files, run_dirs

NONNEG = re.compile(r"^(mae|mse|ss_mean|ss_median|scale|scale_mean|u|u_first|a_bar\w*|width_\w+|sens_mean|"
                    r"sens_median|certified_\w+|contribution_\w+|rho|peak_rho\w*|n_draws|repeats)$")
UNIT = re.compile(r"^(accuracy_(median|mean|q25|q75)|nonprivate_accuracy|majority_rate|confidence)$")
NONFINITE_TEXT = {"nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"}


def check_csv(path: Path, command: str) -> list[str]:
    """Problems of one CSV written by a finished run (empty list: fine)."""
    import pandas as pd
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
        df = pd.read_csv(path)
    except Exception as e:
        return [f"{path.name} unreadable ({type(e).__name__})"]
    if len(df) == 0 or len(df.columns) == 0:
        return [f"{path.name} has no rows"]
    bad = []
    for c in raw.columns:
        vals = raw[c].str.strip().str.lower()
        n = int(vals.isin(NONFINITE_TEXT).sum())
        if n:
            bad.append(f"{path.name}:{c} {n} non-finite")
    for cols, filt in REQUIRED.get((command, path.stem), []):
        rows = df if filt is None or filt[0] not in df.columns else df[df[filt[0]].isin(filt[1])]
        for c in cols:
            if c not in df.columns:
                if filt is None:
                    bad.append(f"{path.name}: no column {c}")
                continue
            if len(rows) and rows[c].isna().any():
                bad.append(f"{path.name}:{c} {int(rows[c].isna().sum())} empty")
    for c in df.columns:
        col = pd.to_numeric(df[c], errors="coerce")
        if NONNEG.match(c) and (col < 0).any():
            bad.append(f"{path.name}:{c} negative ({col.min():.3g})")
        if UNIT.match(c) and ((col < 0) | (col > 1)).any():
            bad.append(f"{path.name}:{c} outside [0, 1]")
    for c in ("param_violations", "output_violations", "staircase_violations", "smoothness_violations"):
        if c in df.columns and (pd.to_numeric(df[c], errors="coerce").fillna(0) > 0).any():
            bad.append(f"AUDIT-VIOLATION {path.name}:{c}")
    return bad


NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_value(v: str):
    """A command-line value as Hydra reads it (numbers, inf/nan, null, booleans, flat lists)."""
    s = v.strip()
    low = s.lower()
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [parse_value(x) for x in inner.split(",")] if inner else []
    if low in ("inf", "+inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    if NUMBER.match(s):
        return int(s) if re.match(r"^[+-]?\d+$", s) else float(s)
    return s.strip("'\"")


def same_value(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return (math.isnan(a) and math.isnan(b)) if (math.isnan(a) or math.isnan(b)) else math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def config_mismatches(argv: list, run_dir: Path) -> list[str]:
    """Overrides ``a.b=v`` whose value config.yaml does not record as given."""
    import yaml
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except Exception as e:
        return [f"config.yaml unreadable ({type(e).__name__})"]
    out = []
    for a in argv:
        if "=" not in a or a.startswith("-") or a.startswith("~"):
            continue
        k, v = a.split("=", 1)
        k = k.lstrip("+")
        if "/" in k or k in ("out_root", "run", "hydra") or k.startswith("hydra.") or "," in v and not v.startswith("["):
            continue
        node, ok = cfg, True
        for part in k.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                ok = False
                break
        if not ok:
            if "." in k or k not in ("dataset", "model", "certificate", "staircase", "privacy", "train", "profile"):
                out.append(f"config.yaml lacks {k}")
            continue
        if isinstance(node, dict):        # a group selection (dataset=linear)
            continue
        want = parse_value(v)
        if not same_value(want, node):
            out.append(f"config.yaml {k}={node!r} (given {v})")
    return out


def result_mismatches(argv: list, run_dir: Path, command: str) -> list[str]:
    """What the results say was run, against the explicit overrides (silent replacement)."""
    import pandas as pd
    p = run_dir / "results.csv"
    if not p.exists():
        return []
    try:
        df = pd.read_csv(p)
    except Exception:
        return []
    given = {a.split("=", 1)[0].lstrip("+"): parse_value(a.split("=", 1)[1]) for a in argv if "=" in a and not a.startswith("-")}
    out = []
    eps = given.get("privacy.epsilons")
    if eps is not None and "epsilon" in df.columns and command in ("agtr", "ags", "dpsgd"):
        want = set(float(e) for e in (eps if isinstance(eps, list) else [eps])) if not isinstance(eps, str) else None
        got = set(df["epsilon"].dropna().astype(float))
        if want is not None and got != want:
            out.append(f"results epsilons {sorted(got)} (given {sorted(want)})")
    nd = given.get("privacy.n_draws")
    if command == "agtr" and isinstance(nd, int) and "n_draws" in df.columns and (df["n_draws"] != nd).any():
        out.append(f"results n_draws {sorted(set(df['n_draws']))} (given {nd})")
    nt = given.get("dataset.n_train")
    if command in ("agtr", "ags") and isinstance(nt, int) and "n_train" in df.columns and (df["n_train"] != nt).any():
        out.append(f"results n_train {sorted(set(df['n_train']))} (given {nt})")
    rel = given.get("privacy.releases")
    if command == "agtr" and rel is not None and "mechanism" in df.columns:
        want = set(rel if isinstance(rel, list) else [rel])
        got = set(df["mechanism"])
        if not got <= want or not {r for r in want if r in ("cauchy", "cauchy6", "laplace")} <= got:
            out.append(f"results mechanisms {sorted(got)} (given {sorted(want)})")
    return out


def judge_outputs(p: Probe, argv: list, out: Path, command: str, *, count: bool = True) -> tuple[str, str]:
    """Behaviour of an exit-0 run: ran-ok, exit0-bad-output, silent-replacement or audit-violation."""
    root = out / "o"
    notes = []
    if p.files and command == "figures":
        missing = [f for f in p.files if not (root / f).exists()]
        if missing:
            return "exit0-bad-output", f"missing {missing}"
        probs = [x for f in csv_files(root) for x in check_csv(f, "figures")]
        return ("exit0-bad-output", "; ".join(probs[:4])) if probs else ("ran-ok", "")
    dirs = [d for d in run_dirs(root)]
    if count and len(dirs) != p.runs:
        return "exit0-bad-output", f"{len(dirs)} run directories (expected {p.runs})"
    files = p.files or FILES.get(command, ("results",))
    probs, mism, perms = [], [], []
    for d in dirs:
        for f in files:
            if not (d / f"{f}.csv").exists():
                probs.append(f"missing {f}.csv")
        for f in sorted(d.glob("*.csv")):
            probs += check_csv(f, command)
            mode = f.stat().st_mode & 0o777
            if mode != 0o644:
                perms.append(f"{f.name} mode {oct(mode)}")
        mism += config_mismatches(argv, d) + result_mismatches(argv, d, command)
    if perms and count:
        notes.append("perm: " + ", ".join(sorted(set(perms))[:2]))
    viol = [x for x in probs if x.startswith("AUDIT-VIOLATION")]
    probs = [x for x in probs if not x.startswith("AUDIT-VIOLATION")]
    if probs:
        return "exit0-bad-output", "; ".join(probs[:4] + notes)
    if viol:
        return "audit-violation", "; ".join(viol[:3])
    if mism:
        return "silent-replacement", "; ".join(mism[:3] + notes)
    return "ran-ok", "; ".join(notes)
