"""What is published and what is said about it (issue 28, items 3, 4, 10, 11): dpaudit on shipped
and planted code (:mod:`tools.prober.plant`), the README of a reproducible release, and the
machine's timing rates."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from tools.prober.model import Probe
from tools.prober.process import Ctx, base_env, fill, run_dirs
from tools.prober.specials.common import answer, crashed, run_cli

PLANT = Path(__file__).resolve().parent.parent / "plant.py"
# a release command that publishes: the planted published-noise bug must reach its publish/
PUBLISHES = ["ags", "dataset=blobs", "dataset.n_test=400", "train.steps=5", "ags.baselines=[]", "privacy.n_draws=3",
             "privacy.epsilons=[1]", "progress=false"]


def planted(ctx: Ctx, bug: str, argv: list, folder: Path, timeout: float) -> tuple:
    """``argv`` run with ``bug`` planted: (rc, stdout, stderr, timed out, hits)."""
    folder.mkdir(parents=True, exist_ok=True)
    script, hits = folder / "plant.py", folder / "hits.txt"
    shutil.copyfile(PLANT, script)
    argv = [fill(a, ctx, folder) for a in argv] + [f"out_root={folder / 'o'}"]
    proc = subprocess.run([ctx.python, str(script), bug, str(hits), *argv], cwd=folder, capture_output=True,
                          text=True, errors="replace", env=base_env(ctx, folder), timeout=timeout)
    (folder / "stderr.txt").write_text(proc.stderr)
    n = int(hits.read_text() or 0) if hits.exists() else 0
    return proc.returncode, proc.stdout, proc.stderr, False, n


def sp_dpaudit_planted(p: Probe, ctx: Ctx, out: Path) -> dict:
    argv, bug = p.extra["argv"], p.extra["plant"]
    if bug is None:
        rc, so, se, to = run_cli(ctx, argv + [f"out_root={out / 'o'}"], out, timeout=p.timeout)
        bad = crashed(rc, se, to)
        if bad or rc not in (0, 1):
            return answer(bad or "wrong-refusal", f"exit {rc}", argv=argv, rc=rc, se=se)
        return answer("ran-ok" if rc == 0 else "audit-violation",
                      "below the claim" if rc == 0 else "a lower bound above the claimed epsilon on shipped code",
                      argv=argv, rc=rc, se=se)
    try:
        if bug == "publish-half":                   # the plant must reach publish/ at all
            rc, so, se, to, n = planted(ctx, bug, PUBLISHES, out / "control", 300)
            if rc != 0 or n == 0:
                return answer("inconclusive", f"the planted bug does not reach publish/ in this tree (ags: exit {rc}, "
                                              f"{n} published draws halved)", argv=PUBLISHES, rc=rc, se=se)
        rc, so, se, to, n = planted(ctx, bug, argv, out / "audit", p.timeout)
    except subprocess.TimeoutExpired:
        return answer("timeout", "", argv=argv)
    if crashed(rc, se, False):
        return answer("inconclusive", f"the planted run crashed (exit {rc}): the plant may not fit this tree",
                      argv=argv, rc=rc, se=se)
    if rc == 1:
        return answer("ran-ok", f"caught: exit 1 (the planted code ran {n} times)", argv=argv, rc=rc, se=se)
    if rc == 0:
        why = f"the planted code ran {n} times" if n else "dpaudit never ran the planted code (it audits something " \
                                                            "else than what ships)"
        return answer("audit-missed", f"exit 0: {why}", argv=argv, rc=rc, se=se)
    return answer("unclean-refusal" if rc == 2 else "traceback", f"exit {rc}", argv=argv, rc=rc, se=se)


SILENT_S = 30       # imports and settings take seconds (more under load); timing a machine takes 30 s and more
# what a README claims of CSPRNG noise ("not from the operating system's CSPRNG" is no claim)
CSPRNG_CLAIM = re.compile(r"(drawn|came)\s+from\s+the\s+operating\s+system's\s+CSPRNG|no\s+seed\s+is\s+stored",
                          re.I)


def sp_publish_readme(p: Probe, ctx: Ctx, out: Path) -> dict:
    argv = p.extra["argv"] + ["progress=false", f"out_root={out / 'o'}"]
    rc, so, se, to = run_cli(ctx, argv, out, timeout=p.timeout)
    bad = crashed(rc, se, to)
    if bad or rc != 0:
        return answer(bad or "wrong-refusal", f"exit {rc}", argv=argv, rc=rc, se=se)
    dirs = run_dirs(out / "o")
    readme = dirs[0] / "publish" / "README.txt" if len(dirs) == 1 else None
    if readme is None or not readme.is_file():
        return answer("exit0-bad-output", "no publish/README.txt", argv=argv, rc=rc, se=se)
    text = readme.read_text(errors="replace")
    released = dirs[0] / "publish" / "released.json"
    flag = json.loads(released.read_text()).get("publishable") if released.is_file() else None
    if p.extra["reproducible"]:
        if re.search(r"Publishable:\s*YES", text) or flag is True:
            return answer("privacy-leak", "a seeded release is labelled publishable", argv=argv, rc=rc, se=se)
        if CSPRNG_CLAIM.search(text):
            return answer("misleading", f"'Publishable: NO' (seeded) beside '{CSPRNG_CLAIM.search(text).group(0)}'",
                          argv=argv, rc=rc, se=se)
    return answer("ran-ok", "README.txt says what the release is", argv=argv, rc=rc, se=se)


def _rates(node, path="") -> list[tuple[str, float]]:
    """Every per-element rate of a timing cache (keys named ``unit`` or ending in ``rate``)."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (k == "unit" or k.endswith("rate")):
                out.append((f"{path}{k}", float(v)))
            else:
                out += _rates(v, f"{path}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _rates(v, f"{path}{i}.")
    return out


def implausible_rates(caches: list) -> list[str]:
    """The cached rates no machine can have: a per-element rate (``unit``, ``...rate``) below
    1e-12 s (the floor rates of issue 28 item 11), or, for a rate of calls (an ``accountant/``
    entry: its time is ``overhead`` a call and its ``unit`` 0 by design), a call time outside
    (0, 600] s or a nonzero unit."""
    bad = []
    for cache in caches:
        for key, entry in (cache.items() if isinstance(cache, dict) else []):
            if key.startswith("accountant/") and isinstance(entry, dict):
                call = entry.get("overhead")
                if not (isinstance(call, (int, float)) and 0 < call <= 600 and entry.get("unit", 0) == 0):
                    bad.append(f"{key}: {call!r} s a call, unit {entry.get('unit')!r}")
                continue
            bad += [f"{key}.{k}={v:.3g}" for k, v in _rates(entry) if not v >= 1e-12]
    return bad


def sp_estimates(p: Probe, ctx: Ctx, out: Path) -> dict:
    argv = ["figures", "--list", "profile=quick", f"out_root={out / 'o'}"]
    env = base_env(ctx, out)
    proc = subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=out, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    t0, first, chunks = time.time(), [], {"so": [], "se": []}

    def read(stream, name):
        for line in stream:
            if line.strip() and not first:
                first.append(time.time() - t0)
            chunks[name].append(line)
    threads = [threading.Thread(target=read, args=(proc.stdout, "so")),
               threading.Thread(target=read, args=(proc.stderr, "se"))]
    for th in threads:
        th.start()
    try:
        rc = proc.wait(timeout=p.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return answer("timeout", "", argv=argv)
    for th in threads:
        th.join()
    total, se = time.time() - t0, "".join(chunks["se"])
    (out / "stderr.txt").write_text(se)
    bad = crashed(rc, se, False)
    if bad or rc != 0:
        return answer(bad or "wrong-refusal", f"exit {rc}", argv=argv, rc=rc, se=se)
    silent = first[0] if first else total
    if silent > SILENT_S and total > SILENT_S:
        return answer("misleading", f"nothing printed for the first {silent:.0f} s of {total:.0f} s (timing "
                                    f"without a word)", argv=argv, rc=rc, se=se)
    caches = [json.loads(f.read_text()) for f in sorted(Path(env["CERTDP_CACHE"]).glob("timing/*.json"))]
    low = implausible_rates(caches)
    if low:
        return answer("exit0-bad-output", f"implausible cached rates: {', '.join(low[:4])}",
                      argv=argv, rc=rc, se=se)
    return answer("ran-ok", f"first line after {silent:.1f} s of {total:.0f} s; {len(_rates(caches))} cached rates, "
                            f"per element all >= 1e-12 s, per call in (0, 600] s", argv=argv, rc=rc, se=se)


SPECIALS = {"dpaudit-planted": sp_dpaudit_planted, "publish-readme": sp_publish_readme, "estimates": sp_estimates}
