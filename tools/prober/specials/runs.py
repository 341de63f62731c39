"""Special probes of runs as a whole (real ``python -m certdp.cli`` processes): same-second pairs
of identical runs and sweeps (distinct, complete run folders, nothing mixed), a rerun into a fixed
``run=`` name (a finished run is never overwritten), SIGTERM/SIGINT of a run and of ``certdp
figures`` (exit 143/130, nothing half-written, no orphaned child) and ``certdp rerun``."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tools.prober.bases import FILES
from tools.prober.checks import check_csv
from tools.prober.judge import ERRLINE, TRACEBACK
from tools.prober.model import Probe
from tools.prober.process import Ctx, base_env, csv_files, digest, fill, finish, launch, nonempty_lines, run_dirs


def _complete(d: Path, command: str) -> bool:
    return (d / "config.yaml").exists() and all((d / f"{f}.csv").exists() for f in FILES[command])


def _seed_mixed(d: Path) -> bool:
    import pandas as pd
    import yaml
    try:
        seed = (yaml.safe_load((d / "config.yaml").read_text()) or {}).get("seed")
        df = pd.read_csv(d / "results.csv")
    except Exception:
        return False
    return "seed" in df.columns and seed is not None and bool((df["seed"] != seed).any())


def sp_concurrent(p: Probe, ctx: Ctx, out: Path) -> dict:
    argvs = [[fill(a, ctx, out) for a in av] + [f"out_root={out / 'o'}"] for av in p.extra["argvs"]]
    cmd = argvs[0][0]
    procs = []
    for i, av in enumerate(argvs):
        o = out / f"p{i}"
        o.mkdir(parents=True, exist_ok=True)
        procs.append(launch(ctx, av, o, base_env(ctx, o)))
    res = [finish(pr, p.timeout, out / f'p{i}') for i, pr in enumerate(procs)]
    se = "\n".join(r[2] for r in res)
    rcs = [r[0] for r in res]
    expect_dirs = len(argvs) * p.extra.get("runs_each", 1)
    dirs = [d for d in run_dirs(out / "o")]
    complete = [d for d in dirs if _complete(d, cmd)]
    mixed = [d for d in complete if _seed_mixed(d)]
    bad = [x for d in complete for f in d.glob("*.csv") for x in check_csv(f, cmd)]
    info = {"argv": argvs[0], "rc": max(r if r is not None else 999 for r in rcs), "named": "",
            "first": (nonempty_lines(se) or [""])[0][:300], "last": (nonempty_lines(se) or [""])[-1][:300]}
    if any(r[3] for r in res):
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": f"exits {rcs}"}
    if mixed or len(complete) < expect_dirs:
        return {**info, "behaviour": "data-loss",
                "note": f"exits {rcs}; {len(complete)} complete run dirs of {expect_dirs} expected"
                        + (f"; {len(mixed)} mix config.yaml of one run with CSVs of another" if mixed else "")}
    if any(r != 0 for r in rcs):
        return {**info, "behaviour": "wrong-refusal", "note": f"exits {rcs}"}
    if bad:
        return {**info, "behaviour": "exit0-bad-output", "note": "; ".join(bad[:3])}
    return {**info, "behaviour": "ran-ok", "note": f"{len(complete)} distinct complete run dirs"}


def sp_overwrite(p: Probe, ctx: Ctx, out: Path) -> dict:
    first = [fill(a, ctx, out) for a in p.extra["first"]] + [f"out_root={out / 'o'}"]
    second = [fill(a, ctx, out) for a in p.extra["second"]] + [f"out_root={out / 'o'}"]
    (out / "a").mkdir(parents=True, exist_ok=True)
    (out / "b").mkdir(parents=True, exist_ok=True)
    rc1, _, se1, _ = finish(launch(ctx, first, out / "a", base_env(ctx, out / "a")), p.timeout, out / "a")
    dirs1 = [d for d in run_dirs(out / "o") if _complete(d, "agtr")]
    info = {"argv": second, "named": "", "first": "", "last": ""}
    if rc1 != 0 or len(dirs1) != 1:
        return {**info, "rc": rc1, "behaviour": "inconclusive", "note": f"first run exit {rc1}: {se1.strip()[-150:]}"}
    d1 = dirs1[0]
    before = digest(d1)
    rc2, so2, se2, to = finish(launch(ctx, second, out / "b", base_env(ctx, out / "b")), p.timeout, out / "b")
    lines = nonempty_lines(se2)
    info.update(rc=rc2, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    after = digest(d1) if d1.exists() else {}
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if p.extra.get("allow"):
        if rc2 == 0 and _complete(d1, "agtr") and not _seed_mixed(d1) and after != before:
            return {**info, "behaviour": "ran-ok", "note": "replaced as asked"}
        if TRACEBACK.search(se2):
            return {**info, "behaviour": "traceback", "note": ""}
        return {**info, "behaviour": "wrong-refusal" if rc2 else "silent-replacement", "note": f"exit {rc2}"}
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.endswith(".txt"))
    if changed:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc2}; finished run changed: {', '.join(changed[:4])}"
                + ("; config.yaml and CSVs now from different runs" if _seed_mixed(d1) else "")}
    if TRACEBACK.search(se2):
        return {**info, "behaviour": "traceback", "note": ""}
    if rc2 == 0:
        others = [d for d in run_dirs(out / "o") if d != d1 and _complete(d, "agtr")]
        return ({**info, "behaviour": "ran-ok", "note": f"landed in {others[0].name}"} if others else
                {**info, "behaviour": "data-loss", "note": "exit 0 but no complete second run directory"})
    m = ERRLINE.match(info["first"])
    if rc2 == 2 and len(lines) == 1 and m:
        return {**info, "named": m.group(1), "behaviour": "refused-ok", "note": ""}
    return {**info, "behaviour": "unclean-refusal", "note": f"exit {rc2}"}


def _wait_for(pattern_root: Path, name: str, proc, limit: float, text: str | None = None) -> bool:
    """Wait until a file ``name`` (holding ``text``, when given) exists below ``pattern_root``."""
    t0 = time.time()
    while time.time() - t0 < limit:
        files = list(pattern_root.rglob(name)) if pattern_root.exists() else []
        if any(text is None or text in f.read_text(errors="replace") for f in files):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def sp_signal(p: Probe, ctx: Ctx, out: Path) -> dict:
    argv = [fill(a, ctx, out) for a in p.extra["argv"]] + [f"out_root={out / 'o'}"]
    sig = signal.SIGTERM if p.extra["sig"] == "TERM" else signal.SIGINT
    want = 143 if sig == signal.SIGTERM else 130
    proc = launch(ctx, argv, out, base_env(ctx, out))
    started = _wait_for(out / "o", "log.txt", proc, 120, text="AGT-R on")     # computing, not importing
    time.sleep(1.5)
    info = {"argv": argv, "named": ""}
    if not started or proc.poll() is not None:
        rc, so, se, _ = finish(proc, 30)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "",
                "note": "the run ended before the signal could be sent"}
    proc.send_signal(sig)
    rc, so, se, to = finish(proc, 60, out)
    lines = nonempty_lines(se)
    info.update(rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    left = [f for f in csv_files(out / "o")
            if not any("incomplete" in part.lower() for part in f.relative_to(out / "o").parts)
            and not any((d / "INCOMPLETE").exists() for d in f.parents)]
    if to:
        return {**info, "behaviour": "timeout", "note": "did not stop within 60 s of the signal"}
    if TRACEBACK.search(se) and rc != -sig:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    if left:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc}; left {', '.join(f.name for f in left[:3])}"}
    if rc != want or not lines:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc} (want {want} and a message)"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, nothing half-written"}


def _procs_mentioning(text: str, exclude: set) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in exclude:
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(d.name))
    return pids


def sp_figures_signal(p: Probe, ctx: Ctx, out: Path) -> dict:
    root = out / "o"
    argv = [fill(a, ctx, out) for a in p.extra["argv"]] + [f"out_root={root}"]
    proc = launch(ctx, argv, out, base_env(ctx, out))
    t0, children = time.time(), []
    while not children and proc.poll() is None and time.time() - t0 < 120:   # a child run has started
        time.sleep(0.2)
        children = _procs_mentioning(f"out_root={root}", {os.getpid(), proc.pid})
    time.sleep(0.5)
    info = {"argv": argv, "named": ""}
    children = [c for c in children if Path(f"/proc/{c}").exists()]
    if proc.poll() is not None or not children:
        rc, _, se, _ = finish(proc, 30, out)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "",
                "note": "no child run was running when the signal was due"}
    proc.send_signal(signal.SIGTERM)
    rc, so, se, to = finish(proc, 60, out)
    time.sleep(3.0)
    orphans = [pid for pid in _procs_mentioning(f"out_root={root}", {os.getpid()}) if pid in children]
    for pid in orphans:                      # the prober started them (through certdp figures)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = nonempty_lines(se)
    info.update(rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    if orphans:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc}; {len(orphans)} child run(s) still running"}
    if any(root.rglob("done.json")):
        return {**info, "behaviour": "data-loss", "note": "done.json written for an interrupted run"}
    if rc != 143:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc} (want 143)"}
    return {**info, "behaviour": "ran-ok", "note": "no orphan"}


def sp_rerun(p: Probe, ctx: Ctx, out: Path) -> dict:
    if ctx.have.get("rerun") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("rerun")), "named": "", "first": "", "last": ""}
    first = [fill(a, ctx, out) for a in p.extra["first"]] + [f"out_root={out / 'o'}"]
    (out / "a").mkdir(parents=True, exist_ok=True)
    rc1, _, se1, _ = finish(launch(ctx, first, out / "a", base_env(ctx, out / "a")), p.timeout, out / "a")
    dirs = run_dirs(out / "o")
    info = {"named": "", "first": "", "last": ""}
    if rc1 != 0 or len(dirs) != 1:
        return {**info, "rc": rc1, "behaviour": "inconclusive", "note": f"first run exit {rc1}"}
    d1 = dirs[0]
    before = digest(d1)
    argv = ["rerun", str(d1)]
    rc, so, se, to = finish(launch(ctx, argv, out, base_env(ctx, out)), p.timeout, out)
    lines = nonempty_lines(se)
    info.update(argv=argv, rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": ""}
    if rc != 0:
        return {**info, "behaviour": "wrong-refusal", "note": f"exit {rc}"}
    if digest(d1) != before:
        return {**info, "behaviour": "data-loss", "note": "the original run changed"}
    new = [d for d in run_dirs(out) if d != d1 and (d / "results.csv").exists()]
    if not new:
        return {**info, "behaviour": "exit0-bad-output", "note": "no new run directory with results.csv"}
    same = all((new[0] / f"{f}.csv").read_bytes() == (d1 / f"{f}.csv").read_bytes() for f in FILES["agtr"])
    return {**info, "behaviour": "ran-ok" if same else "silent-replacement",
            "note": f"new dir {new[0].name}" + ("" if same else "; CSVs differ from the original")}


SPECIALS = {"concurrent": sp_concurrent, "overwrite": sp_overwrite, "signal": sp_signal,
            "figures-signal": sp_figures_signal, "rerun": sp_rerun}
