"""How good are the settings estimates (certdp/estimate/)?  One table: command, estimate (with
its band), measured wall-clock seconds, estimate / measured, and the load average before and
after.

    python benchmarks/estimate_accuracy.py                      # the README, California and blobs commands
    python benchmarks/estimate_accuracy.py --only linear,blobs  # some of them
    python benchmarks/estimate_accuracy.py --steps 6            # every command shortened to 6 steps
    python benchmarks/estimate_accuracy.py --steps california=10   # only California shortened
    python benchmarks/estimate_accuracy.py --retime             # rates timed afresh (not the cache's)
    python benchmarks/estimate_accuracy.py --out-root DIR --profile quick   # finished `certdp figures` runs
    python benchmarks/estimate_accuracy.py --quick              # one small run (seconds), rates timed afresh

For each command: the estimate a user gets (``certdp.estimate.estimate``: the cached rates,
timed first where missing; ``--retime``: in a temporary cache), then the command itself run as
``python -m certdp.cli ...`` in a temporary out_root, timed from start to exit.  The load is
``/proc/loadavg``'s 1-minute average (the machine's, ours included).  With ``--out-root``, the
runs ``certdp figures`` completed there (their ``done.json`` holds the measured seconds; the
load then is not known) are compared with their estimates now.  Run it on the machine that did
the runs: the rates are this machine's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {                  # the acceptance commands of issue 28 item 11
    "linear": ("agtr", ["dataset=linear"]),
    "california": ("agtr", ["dataset=california"]),
    "blobs": ("ags", ["dataset=blobs"]),
}
QUICK = {"linear-small": ("agtr", ["dataset=linear", "dataset.n_train=2000", "dataset.n_test=200", "train.steps=20",
                                   "staircase.k_max=8", "privacy.n_draws=5"])}


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def settings_of(command: str, overrides: list[str]):
    from certdp import results
    from certdp.settings import config_dir
    from certdp.settings.compose import compose_and_parse
    results.register_resolvers()
    return compose_and_parse(command, overrides, multirun=False, config_path=str(config_dir()),
                             config_name=command)[0]


def estimate_of(command: str, overrides: list[str], retime: Path | None):
    """(the estimate, seconds its timing took) with the user's cache, or a fresh one in ``retime``."""
    from certdp.estimate import estimate
    old = os.environ.get("CERTDP_CACHE")
    if retime is not None:
        os.environ["CERTDP_CACHE"] = str(retime)
    try:
        t0 = time.perf_counter()
        est = estimate(settings_of(command, overrides), say=lambda line: print(f"  {line}", file=sys.stderr))
        return est, time.perf_counter() - t0
    finally:
        if retime is not None:
            if old is None:
                os.environ.pop("CERTDP_CACHE", None)
            else:
                os.environ["CERTDP_CACHE"] = old


def measure(command: str, overrides: list[str], out_root: Path) -> tuple[float, int]:
    """(wall seconds, exit status) of the command run as a user runs it."""
    argv = [sys.executable, "-m", "certdp.cli", command, *overrides, f"out_root={out_root}", "progress=false"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
    return time.perf_counter() - t0, done.returncode


def row(name: str, est, measured: float, loads: str, width: int = 44) -> tuple[str, float | None]:
    if est is None:
        e, ratio = "-", None
    else:
        e = est.text()
        ratio = est.seconds / measured if measured > 0 and est.known else None
    inside = "" if ratio is None else (" yes" if est.low <= measured <= est.high else " no")
    r = "-" if ratio is None else f"{ratio:.2f}"
    print(f"{name:<{width}} {e:<40} {measured:>9.0f} s {r:>6} {inside:>4}  {loads}", flush=True)
    return name, ratio


def header(width: int = 44) -> None:
    print(f"{'command':<{width}} {'estimate':<40} {'measured':>11} {'ratio':>6} {'band':>4}  load before -> after",
          flush=True)


def shortened(spec: str, name: str) -> int:
    """The train.steps of command ``name`` in ``--steps`` (N, or NAME=N,...; 0: its own)."""
    for part in filter(None, spec.split(",")):
        key, _, value = part.rpartition("=")
        if key in ("", name):
            return int(value)
    return 0


def commands(a) -> list[float]:
    ratios = []
    table = QUICK if a.quick else COMMANDS
    names = [n for n in a.only.split(",") if n] or list(table)
    retime = Path(tempfile.mkdtemp(prefix="certdp-rates-")) if a.retime or a.quick else None
    out = Path(tempfile.mkdtemp(prefix="estimate-accuracy-"))
    results = []
    for name in names:
        command, overrides = table[name]
        steps = shortened(a.steps, name)
        overrides = overrides + ([f"train.steps={steps}"] if steps else [])
        l0 = load()
        est, took = estimate_of(command, overrides, retime)
        l1 = load()
        secs, rc = measure(command, overrides, out / name)
        l2 = load()
        label = f"certdp {command} {' '.join(overrides)}" + (" (failed)" if rc else "")
        results.append((label, est, secs, f"{l0:.1f} -> {l2:.1f} (estimate {took:.0f} s at {l1:.1f})"))
    width = max(len(r[0]) for r in results)
    header(width)
    for label, est, secs, loads in results:
        _, ratio = row(label, est, secs, loads, width)
        if ratio is not None:
            ratios.append(ratio)
    return ratios


def figure_runs(a) -> list[float]:
    from certdp import figures as F
    from certdp.figure_times import run_estimate
    ratios, seen = [], set()
    header()
    for name, e in F.load_experiments(None).items():
        if a.figures and name not in a.figures.split(","):
            continue
        for spec in e.specs(a.profile):
            r = F.resolve(spec, a.out_root)
            if r.key in seen or not r.is_done():
                continue
            seen.add(r.key)
            _, ratio = row(f"{name}: {spec.label()}"[:44], run_estimate(r), float(r.done().get("seconds", 0.0)), "-")
            if ratio is not None and not run_estimate(r, calibrate=False).unmodelled:
                ratios.append(ratio)
    return ratios


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help=f"comma-separated, of {', '.join(COMMANDS)} (default: all)")
    ap.add_argument("--steps", default="", help="train.steps=N for every command, or NAME=N,... for some (shortened runs)")
    ap.add_argument("--retime", action="store_true", help="time the rates afresh in a temporary cache")
    ap.add_argument("--out-root", type=Path, help="compare the finished `certdp figures` runs there instead")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--figures", default="", help="with --out-root: comma-separated figure names")
    ap.add_argument("--quick", action="store_true", help="one small run instead (seconds), rates timed afresh")
    a = ap.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, python -m certdp.cli, "
          f"{'rates timed afresh' if a.retime or a.quick else 'the cached rates'}", flush=True)
    ratios = figure_runs(a) if a.out_root else commands(a)
    if not ratios:
        print("no comparable run")
        return 1
    print(f"estimate / measured over {len(ratios)} runs: median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f} - {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
