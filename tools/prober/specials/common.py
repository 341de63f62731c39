"""What the special probes of the hardening (issue 28) share: one command line in a folder of its
own, the answer of a special probe, the private report's sizes, and where a value shows up in
what a run said."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tools.prober.judge import ERRLINE, TRACEBACK, lines_info
from tools.prober.process import Ctx, base_env, fill, finish, launch


def run_cli(ctx: Ctx, argv: list, folder: Path, *, env: dict | None = None, timeout: float = 300):
    """``python -m certdp.cli *argv`` in ``folder`` (placeholders filled): (rc, stdout, stderr, timed out)."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [fill(a, ctx, folder) for a in argv]
    return finish(launch(ctx, argv, folder, base_env(ctx, folder, env)), timeout, folder)


def answer(behaviour: str, note: str = "", *, argv=(), rc=None, se: str = "") -> dict:
    """A special probe's result: its behaviour, a note, and the command line it judged."""
    lines, info = lines_info(se)
    m = ERRLINE.match(info["first"])
    return {"behaviour": behaviour, "note": note, "argv": list(argv), "rc": rc, "named": m.group(1) if m else "",
            **info}


def crashed(rc, se: str, to: bool) -> str | None:
    """``timeout`` or ``traceback`` when the process ended so, else None."""
    if to:
        return "timeout"
    if TRACEBACK.search(se) or (rc is not None and rc < 0):
        return "traceback"
    return None


def sizes(run_dir: Path) -> tuple | None:
    """(n_train, n_test) of a finished run's results.csv (the private report), None if absent."""
    import pandas as pd
    try:
        df = pd.read_csv(run_dir / "results.csv")
    except (OSError, ValueError):
        return None
    cols = [c for c in ("n_train", "n_test") if c in df.columns]
    return tuple(sorted(set(tuple(r) for r in df[cols].itertuples(index=False)))) if cols else None


def mentions(text: str, *, tokens=(), numbers=()) -> list[str]:
    """The planted ``tokens`` found in ``text``, and the record ``numbers`` it names (``record N``,
    ``row N``, ``line N``)."""
    found = [f"'{tok}'" for tok in tokens if tok and tok in text]
    for n in numbers:
        if re.search(rf"\b(record|row|line)s?\s+(no\.?\s*|#)?{n}\b", text, re.I):
            found.append(f"record number {n}")
    return found


def said(folder: Path, so: str, se: str) -> str:
    """Everything a run said: its stdout, stderr and every log.txt below ``folder``."""
    logs = [p.read_text(errors="replace") for p in folder.rglob("log.txt")]
    return "\n".join([so, se, *logs])


def tree(folder: Path) -> dict:
    """Every file below ``folder`` by relative path: its SHA-256."""
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()} if folder.is_dir() else {}
