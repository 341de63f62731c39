"""The prober's command line (``python -m tools.prober`` or ``python tools/probe.py``): choose the
probes, build the fixtures, run a pass (regular probes on ``--jobs`` workers, then the special
ones alone), write ``probes.csv`` and print the counts."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tools.prober as package
from tools.prober.catalogue import build
from tools.prober.fixtures import make_fixtures
from tools.prober.forking import Servers
from tools.prober.model import OK, Probe
from tools.prober.process import Ctx
from tools.prober.report import behaviour_counts, summary, worklist
from tools.prober.runner import run_probe

REPO = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.prober", description=package.__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(REPO), help="the certdp source tree to probe (put first on PYTHONPATH)")
    ap.add_argument("--out", default="/tmp/certdp-probe", help="scratch folder for run outputs")
    ap.add_argument("--jobs", type=int, default=2, help="probes at once (special probes run alone)")
    ap.add_argument("--only", default=None, help="regular expression on the probe id or its arguments")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs certdp")
    ap.add_argument("--mem-gb", type=float, default=4.0,
                    help="address space a probe may add to the imported modules (GiB; 0 = no limit)")
    ap.add_argument("--worklist", default=None, help="write a Markdown worklist of the failing probes here")
    ap.add_argument("--csv", default=None, help="the per-probe CSV (default <pass folder>/probes.csv)")
    ap.add_argument("--list", action="store_true", help="print the probes and exit")
    ap.add_argument("--surfaces", action="store_true",
                    help="only the probes of the surfaces around the runs (predict, rerun, run folders, sweeps, "
                         "signals, streams: tools/prober/catalogue/surfaces.py)")
    ap.add_argument("--hardening", action="store_true",
                    help="only the probes of loaders, resume, audits, publish/ and the house as a new user meets "
                         "them (issue 28: tools/prober/catalogue/{loaders,resume,publish,house}.py)")
    ap.add_argument("--quick", action="store_true",
                    help="only the device probes and the first few regular ones (seconds): checks the prober runs")
    ap.add_argument("--from-csv", default=None,
                    help="do not run: print the counts of an earlier probes.csv (and write --worklist from it)")
    ap.add_argument("--snapshot", action="store_true",
                    help="probe a copy of --root's committed HEAD (git archive) so that commits landing during "
                         "the pass do not mix two versions")
    ap.add_argument("--exec", action="store_true",
                    help="start a fresh `python -m certdp.cli` for every probe (slower: ~3 s of imports each) "
                         "instead of forking a pre-imported server")
    return ap


def select(a: argparse.Namespace) -> list[Probe]:
    """The probes the options choose, in catalogue order."""
    probes = build()
    if a.surfaces or a.hardening:
        probes = [p for p in probes if (a.surfaces and p.extra.get("surface")) or
                  (a.hardening and p.extra.get("hardening"))]
    if a.quick and not a.only:
        probes = [p for p in probes if p.section == "device" and not p.special][:4]
    if a.only:
        rx = re.compile(a.only)
        probes = [p for p in probes if rx.search(p.id) or rx.search(" ".join(p.argv))]
    return probes


def from_csv(a: argparse.Namespace) -> None:
    import pandas as pd
    rows = pd.read_csv(a.from_csv, keep_default_na=False).to_dict("records")
    print("\n".join(behaviour_counts(rows)))
    meta_path = Path(a.from_csv).with_name("pass.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"label": a.from_csv, "seconds": float("nan")}
    if a.worklist:
        worklist(rows, meta["label"], meta["seconds"], Path(a.worklist))


def label_of(root: Path, snapshot: bool) -> str:
    """``<root> @ <commit>``, saying when the tree holds uncommitted changes."""
    rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = rev.stdout.strip() if rev.returncode == 0 else "unknown"
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{root} @ {commit}" + (" (with uncommitted changes)" if dirty and not snapshot else "")


def snapshot_of(root: Path, out: Path) -> Path:
    """A copy of ``root``'s committed HEAD below ``out``."""
    tree = out / "_tree"
    tree.mkdir()
    arch = subprocess.run(["git", "-C", str(root), "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=arch.stdout, check=True)
    return tree


def run_pass(probes: list[Probe], ctx: Ctx, out: Path, jobs: int) -> list[dict]:
    """Every probe's row, in catalogue order: the regular ones on ``jobs`` workers (each with its
    fork server), then the special ones one at a time."""
    servers = Servers(ctx) if ctx.fork else None
    results: dict[int, dict] = {}

    def one(ip):
        i, p = ip
        folder = out / f"{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', p.id)[:60]}"
        r = run_probe(p, ctx, folder, servers)
        flag = "  " if r["got"] in OK or r["got"] == "skipped" else "!!"
        print(f"{flag} {r['got']:<18} {r['seconds']:>5.1f}s  {p.id}", flush=True)
        return i, r

    normal = [(i, p) for i, p in enumerate(probes) if not p.special]
    specials = [(i, p) for i, p in enumerate(probes) if p.special]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, r in pool.map(one, normal):
            results[i] = r
    if servers is not None:
        servers.close()
    for ip in specials:
        i, r = one(ip)
        results[i] = r
    return [results[i] for i in sorted(results)]


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)
    if a.from_csv:
        from_csv(a)
        return
    probes = select(a)
    if a.list:
        for p in probes:
            print(f"{p.id:<70} {p.expect} {'|'.join(p.keys)}")
            if p.extra.get("correct"):
                print(f"    correct: {p.extra['correct']}")
        print(f"{len(probes)} probes")
        return
    root = Path(a.root).resolve()
    out = Path(a.out).resolve() / time.strftime("pass-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=False)
    label = label_of(root, a.snapshot)
    if a.snapshot:
        root = snapshot_of(root, out)
    t0 = time.time()
    fx = out / "_fixtures"
    needs = {p.extra.get(k) for p in probes for k in ("needs", "fixture")} - {None}
    have = make_fixtures(fx, a.python, root, needs)
    ctx = Ctx(root, a.python, fx, int(a.mem_gb * (1 << 30)), have, fork=not a.exec)
    print(f"probing {label} with {len(probes)} probes -> {out} (fixtures {time.time() - t0:.0f} s; "
          + ", ".join(f"{k}: {'yes' if v is True else 'no'}" for k, v in have.items()) + ")", flush=True)
    rows = run_pass(probes, ctx, out, a.jobs)
    seconds = time.time() - t0
    import pandas as pd
    csv_path = Path(a.csv) if a.csv else out / "probes.csv"
    pd.DataFrame(rows).to_csv(csv_path, index=False)
    (csv_path.parent / "pass.json").write_text(json.dumps({"label": label, "seconds": seconds}))
    print(f"\n{len(rows)} probes in {seconds / 60:.1f} min ({label})")
    print("\n".join(summary(rows)))
    print(f"per-probe CSV: {csv_path}")
    if a.worklist:
        worklist(rows, label, seconds, Path(a.worklist))
        print(f"worklist: {a.worklist}")
