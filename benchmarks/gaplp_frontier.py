"""Width/time frontier of ``certificate=gaplp`` on blobs (linear hinge, 200 private points, batch 20,
lr 0.5, gamma 0.05), beside the IBP ledger and CROWN-TT, per radius.

One line per (steps, radius, gap, gap_intermediate, tighten): the l1 width of T_k, the number of
certified margin solves (intermediate bounds tightened), the program's size and the CPU seconds
of that radius (process time; the machine's load is printed with every line: the CPU is shared).

    PYTHONPATH=$PWD python benchmarks/gaplp_frontier.py --steps 40 --radii 1 --gaps 1e-4 --tighten all,5,none
    PYTHONPATH=$PWD python benchmarks/gaplp_frontier.py --quick        # seconds (CI)
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from certdp import DTYPE
from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.data import load_dataset
from certdp.models import build_model
from certdp.training import TrainSettings


def blobs(steps: int, n: int = 200):
    ds = load_dataset({"name": "blobs", "n_features": 8, "n_train": n, "n_test": 10, "n_public": 10,
                       "separation": 2.563, "cluster_std": 1.0}, 0)
    x, y = torch.as_tensor(ds.x_train, dtype=DTYPE), torch.as_tensor(ds.y_train)
    st = TrainSettings(steps=steps, lr=0.5, clip=0.05, batch_size=20, seed=0)
    return x, y, build_model("linear", 8, loss="hinge"), st


def load() -> str:
    return "load %.2f" % os.getloadavg()[0]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--radii", default="1,2")
    ap.add_argument("--gaps", default="1e-4")
    ap.add_argument("--gap-intermediate", default=None)
    ap.add_argument("--tighten", default="all")
    ap.add_argument("--baselines", default="ibp,crowntt")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--log", action="store_true", help="the engine's progress every 20 steps (stderr)")
    a = ap.parse_args(argv)
    if a.log:
        import logging
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if a.quick:
        a.steps, a.n, a.radii, a.tighten = 4, 40, "1,2", "all"
    x, y, m, st = blobs(a.steps, a.n)
    radii = [int(r) for r in a.radii.split(",")]
    for name in [b for b in a.baselines.split(",") if b]:
        opts = {"branch": 0} if name == "crowntt" else {}
        t = time.process_time()
        env = run_agt(m, m.init(0), x, y, st, radii, certificate=get_certificate(name, **opts), progress=False)
        print(f"steps={a.steps} {name}{opts}: l1 widths {[round(float(v), 4) for v in env.widths().sum(-1)]} "
              f"({time.process_time() - t:.1f} s CPU, {load()})", flush=True)
    for gap in a.gaps.split(","):
        gi = a.gap_intermediate or gap
        for tighten in a.tighten.split(","):
            cert = get_certificate("gaplp", gap=float(gap), gap_intermediate=float(gi), tighten=tighten)
            t = time.process_time()
            env = run_agt(m, m.init(0), x, y, st, radii, certificate=cert, progress=False)
            for r, w, s in zip(radii, env.widths().sum(-1), cert.stats):
                print(f"steps={a.steps} gaplp gap={gap} gap_intermediate={gi} tighten={tighten} k={r}: l1 width "
                      f"{float(w):.4f}, {s['tightened']} margin solves, {s['columns']} columns, {s['rows']} rows, "
                      f"worst certified gap {s['worst_gap']:.2g}, {s['retries']} retries, "
                      f"{s['cpu_s']:.1f} s CPU ({load()})", flush=True)
            print(f"  total {time.process_time() - t:.1f} s CPU", flush=True)


if __name__ == "__main__":
    main()
