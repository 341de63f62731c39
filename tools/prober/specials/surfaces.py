"""Special probes of the surfaces around the runs (issue 22): ``certdp predict`` writing to paths
that must not be replaced and reading labels however they are written, sequences of runs and
refusals after which every finished run is unchanged, ``certdp rerun`` on a changed input,
signals during start-up and closed or failing output streams."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

from tools.prober.judge import ERRLINE, TRACEBACK, lines_info, refusal_problem
from tools.prober.process import base_env, csv_files, digest, fill, finish, launch, run_dirs


def _state(path: Path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return ("dir", digest(path))
    if stat.S_ISREG(st.st_mode):
        return ("file", path.read_bytes())
    return ("node", stat.S_IFMT(st.st_mode), st.st_rdev)


def sp_predict_output(p, ctx, out: Path) -> dict:
    if p.extra.get("needs") and ctx.have.get(p.extra["needs"]) is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get(p.extra["needs"])), "named": "", "first": "", "last": ""}
    target = Path(fill(p.extra["target"], ctx, out))
    argv = ["predict", str(ctx.fx / "pred" / "ok2.json"), "--input", str(ctx.fx / "pred" / "t.csv"),
            "--output", str(target), *p.extra["flags"]]
    if "agsrun" in str(target):
        argv[1] = str(ctx.fx / "agsrun" / "o" / "ags" / "csv" / "r")
    watched = [target, ctx.fx / "pred" / "t.csv", ctx.fx / "pred" / "ok2.json"]
    if "agsrun" in str(target):
        watched.append(target.parent)
    before = [_state(w) for w in watched]
    rc, so, se, to = finish(launch(ctx, argv, out, base_env(ctx, out)), p.timeout, out)
    lines, info = lines_info(se)
    info.update(argv=argv, rc=rc, named=(ERRLINE.match(info["first"]).group(1) if ERRLINE.match(info["first"]) else ""))
    changed = [str(w) for w, b in zip(watched, before) if _state(w) != b]
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if changed:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc}; changed {', '.join(changed)}"}
    bad = refusal_problem(rc, se, ("--output",))
    return {**info, "behaviour": bad[0] if bad else "refused-ok", "note": bad[1] if bad else ""}


def sp_predict_labels(p, ctx, out: Path) -> dict:
    if ctx.have.get("surf-ags") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("surf-ags")), "named": "", "first": "", "last": ""}
    run = ctx.fx / "agsrun" / "o" / "ags" / "csv" / "r"
    accs, info = {}, {"named": "", "first": "", "last": ""}
    for name in ("t", "t01", "t10"):
        argv = ["predict", str(run), "--input", str(ctx.fx / "agsrun" / f"{name}.csv")]
        rc, so, se, to = finish(launch(ctx, argv, out, base_env(ctx, out)), p.timeout, out)
        info.update(lines_info(se)[1], argv=argv, rc=rc)
        if to or rc != 0 or TRACEBACK.search(se):
            return {**info, "behaviour": "timeout" if to else "traceback" if TRACEBACK.search(se) else "wrong-refusal",
                    "note": f"{name}: exit {rc}"}
        accs[name] = re.findall(r"accuracy ([0-9.]+)", se)
    if not accs["t"] or any(accs[k] != accs["t"] for k in accs):
        return {**info, "behaviour": "silent-replacement", "note": f"accuracies {accs}"}
    return {**info, "behaviour": "ran-ok", "note": f"accuracy {accs['t']} whatever way the labels are written"}


def sp_sequence(p, ctx, out: Path) -> dict:
    """Steps of runs and refusals; after each refusal every finished run is unchanged."""
    root = out / "o"
    info = {"named": "", "first": "", "last": "", "rc": None}
    finished: dict = {}
    for i, (argv, want) in enumerate(p.extra["steps"]):
        if want == "setup":
            d = Path(fill(argv.split(":", 1)[1], ctx, out))
            d.mkdir(parents=True, exist_ok=True)
            (d / "notes.txt").write_text("the user's own file\n")
            finished[d] = digest(d)
            continue
        av = [fill(a, ctx, out) for a in argv] + [f"out_root={root}"]
        step = out / f"s{i}"
        step.mkdir(parents=True, exist_ok=True)
        rc, so, se, to = finish(launch(ctx, av, step, base_env(ctx, step)), p.timeout, step)
        info.update(lines_info(se)[1], argv=av, rc=rc)
        if to:
            return {**info, "behaviour": "timeout", "note": f"step {i}"}
        lost = [str(d) for d, dig in finished.items()
                if not any(str(d).endswith(r) for r in p.extra.get("replaced", ())) and
                (not d.exists() or digest(d) != dig)]
        if lost:
            return {**info, "behaviour": "data-loss", "note": f"step {i} (exit {rc}) changed {', '.join(lost[:2])}"}
        if want == "run":
            if rc != 0:
                return {**info, "behaviour": "inconclusive" if i < len(p.extra["steps"]) - 1 else "wrong-refusal",
                        "note": f"step {i}: exit {rc}: {info['last']}"}
        else:
            bad = refusal_problem(rc, se)
            if bad:
                return {**info, "behaviour": bad[0], "note": f"step {i}: {bad[1]}"}
            m = ERRLINE.match(info["first"])
            info["named"] = m.group(1) if m else ""
        nested = [d for d in run_dirs(root) if any((a / "run.json").exists() for a in d.parents)]
        if nested:
            return {**info, "behaviour": "data-loss", "note": f"a run inside another run: {nested[0]}"}
        finished.update({d: digest(d) for d in run_dirs(root)})
    return {**info, "behaviour": "refused-ok" if p.extra["steps"][-1][1] == "refuse" else "ran-ok", "note": ""}


def sp_rerun_changed(p, ctx, out: Path) -> dict:
    if ctx.have.get("surf-runs") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("surf-runs")), "named": "", "first": "", "last": ""}
    run = ctx.fx / "runs" / "o" / "agtr" / "csv" / "changed"
    before = digest(run)
    argv = ["rerun", str(run), f"out_root={out / 'o'}"]
    rc, so, se, to = finish(launch(ctx, argv, out, base_env(ctx, out)), p.timeout, out)
    info = {**lines_info(se)[1], "argv": argv, "rc": rc, "named": ""}
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": ""}
    if digest(run) != before:
        return {**info, "behaviour": "data-loss", "note": "the original run changed"}
    if rc != 0:
        return {**info, "behaviour": "wrong-refusal", "note": f"exit {rc}"}
    if "dataset.path" not in se or "changed since the run" not in se:
        return {**info, "behaviour": "silent-replacement", "note": "no warning about the changed input"}
    if len(run_dirs(out / "o")) != 1 or (out / "outputs").exists():
        return {**info, "behaviour": "exit0-bad-output", "note": "no new run folder (or outputs/ in the cwd)"}
    return {**info, "behaviour": "ran-ok", "note": "warned and reran"}


def sp_startup_signal(p, ctx, out: Path) -> dict:
    argv = [fill(a, ctx, out) for a in p.extra["argv"]] + ([f"out_root={out / 'o'}"] if p.extra["argv"][0] != "predict"
                                                           else [])
    sig = signal.SIGTERM if p.extra["sig"] == "TERM" else signal.SIGINT
    proc = launch(ctx, argv, out, base_env(ctx, out))
    time.sleep(0.7)                          # interpreter up, certdp importing (seconds of it)
    info = {"argv": argv, "named": ""}
    if proc.poll() is not None:
        rc, so, se, _ = finish(proc, 30, out)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "", "note": "ended before the signal"}
    proc.send_signal(sig)
    rc, so, se, to = finish(proc, 60, out)
    lines, more = lines_info(se)
    info.update(more, rc=rc)
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se) or "Traceback" in se:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    if csv_files(out / "o") if (out / "o").exists() else []:
        return {**info, "behaviour": "data-loss", "note": "CSVs left"}
    if rc != 128 + sig or len(lines) != 1 or "interrupted" not in lines[0]:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc}, {len(lines)} line(s)"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, one line"}


def sp_stream(p, ctx, out: Path) -> dict:
    argv = [fill(a, ctx, out) for a in p.extra["argv"]]
    if argv[0] in ("agtr",) and "--cfg" not in argv:
        argv.append(f"out_root={out / 'o'}")
    env = base_env(ctx, out)
    info = {"argv": argv, "named": ""}
    if p.extra["mode"] == "full":
        with open("/dev/full", "w") as full:
            proc = subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env, stdout=full,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                _, se = proc.communicate(timeout=p.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return {**info, "rc": None, "behaviour": "timeout", "first": "", "last": "", "note": ""}
    else:
        proc = subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        proc.stdout.read(1)              # | head -c 1
        proc.stdout.close()
        try:
            se = proc.stderr.read().decode(errors="replace")
            proc.wait(timeout=p.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return {**info, "rc": None, "behaviour": "timeout", "first": "", "last": "", "note": ""}
    rc = proc.returncode
    lines, more = lines_info(se)
    info.update(more, rc=rc)
    (out / "stderr.txt").write_text(se)
    if TRACEBACK.search(se) or "Logging error" in se or "Exception ignored" in se:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    runs = run_dirs(out / "o") if (out / "o").exists() else []
    complete = all((d / "run.json").exists() for d in runs)
    if rc != p.extra["want"]:
        return {**info, "behaviour": "misleading", "note": f"exit {rc} (want {p.extra['want']})"}
    if len(lines) > 1:
        return {**info, "behaviour": "misleading", "note": f"{len(lines)} stderr lines"}
    if runs and not complete:
        return {**info, "behaviour": "data-loss", "note": "a run folder without run.json"}
    if lines and "nothing was written" in lines[0] and runs:
        return {**info, "behaviour": "misleading", "note": "says nothing was written, but the run is complete"}
    if lines and runs and "complete" not in lines[0]:
        return {**info, "behaviour": "misleading", "note": "does not say the run is complete"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, {len(lines)} line(s)"}


SPECIALS = {"predict-output": sp_predict_output, "predict-labels": sp_predict_labels, "sequence": sp_sequence,
            "rerun-changed": sp_rerun_changed, "startup-signal": sp_startup_signal, "stream": sp_stream}
