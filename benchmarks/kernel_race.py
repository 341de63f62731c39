"""How often the first parallel exp of a process is wrong, with and without certdp/kernels.py.

Each child process runs the first AGT step of ``gpu_profile_step.py --quick`` (IBP top-k, softmax
head, N = 2,000, K = 17: point boxes through ``SoftmaxCE.grad_bounds``) with ``CERTDP_DEBUG=1``
and reports whether an interval crossed.  ``--arm raw`` skips :func:`certdp.kernels.settle` and
:func:`certdp.kernels.verify` (marks them done before the import), ``--arm certdp`` runs them as
shipped.  ``--parallel`` children at once share the cores (the contention that exposes the race).

Measured 2026-11-28 on this project's 2-core machine (torch 2.13.0+cpu, MKL 2024.2), 4 at once:
this script (load 3-4), raw 3 of 40 processes crossed (gap 1.81e-10), certdp 0 of 40.  Through
the full ``CERTDP_DEBUG=1 gpu_profile_step.py --quick`` (4 at once): before the fix 4 of 40
crossed, each time the first exp of the process with one thread's chunk (rows 0-8 or 8-16 of
K = 17) off by up to 3.3e-9 relative; after it 0 of 80.

    python benchmarks/kernel_race.py --arm raw --runs 40 --parallel 4
    python benchmarks/kernel_race.py --arm certdp --runs 40 --parallel 4
    python benchmarks/kernel_race.py --quick           # 2 children of each arm
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CHILD = r"""
import sys
import certdp.kernels as k
if sys.argv[1] == "raw":
    k._settled = k._verified = True          # as before certdp/kernels.py
import torch
from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.models import ModelSpec
from certdp.training import TrainSettings
import certdp
certdp.tune_malloc()
F, n = torch.float64, 2000
g = torch.Generator().manual_seed(int(sys.argv[2]))
lab = torch.randint(0, 5, (n,), generator=g)
x = torch.randn(n, 8, generator=g, dtype=F) + 2 * torch.nn.functional.one_hot(lab, 8).to(F)
m = ModelSpec((8, 5), "ce")
try:
    run_agt(m, m.init(0), (x, lab), TrainSettings(steps=1, lr=2.0, clip=0.02, contraction=0.6), list(range(1, 17)) + [n],
            AGTOptions(certificate=get_certificate("ibp", aggregation="topk"), progress=False))
    print("sound")
except ValueError as e:
    print("crossed", str(e).splitlines()[0])
"""


def child(arm: str, seed: int) -> str:
    env = {**os.environ, "CERTDP_DEBUG": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD, arm, str(seed)], capture_output=True, text=True, env=env)
    lines = r.stdout.strip().splitlines()
    return lines[-1] if r.returncode == 0 and lines else f"failed: {r.stderr.strip().splitlines()[-1:]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=["raw", "certdp", "both"], default="both")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="2 children of each arm")
    a = ap.parse_args()
    runs = 2 if a.quick else a.runs
    for arm in (["raw", "certdp"] if a.arm == "both" else [a.arm]):
        with ThreadPoolExecutor(a.parallel) as pool:
            out = list(pool.map(lambda s: child(arm, s), range(runs)))
        crossed = [o for o in out if o.startswith("crossed")]
        failed = [o for o in out if o.startswith("failed")]
        print(f"arm {arm:6s}: {len(crossed)} of {runs} processes crossed, {len(failed)} failed "
              f"({a.parallel} at once; load {os.getloadavg()[0]:.1f})"
              + (f"; e.g. {crossed[0]}" if crossed else "") + (f"; e.g. {failed[0]}" if failed else ""), flush=True)
        if failed:
            sys.exit(1)


if __name__ == "__main__":
    main()
