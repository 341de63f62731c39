"""Benchmark: one nominal training run vs AGT over |K| radii on California-sized data.

Data: 16,512 x 8 standard-normal features with a noisy nonlinear target (the timing does not
depend on the values), model 8-64-1 ReLU, full batch, lr 0.01, gamma 0.1.  Prints seconds and
the ratio (AGT seconds) / (|K| x nominal seconds).  Target: ratio <= 1 (paper: ~4 per radius).

    python benchmarks/bench_agt.py                 # 330 steps, K = 1..28 (minutes)
    python benchmarks/bench_agt.py --steps 20      # quicker estimate
    python benchmarks/bench_agt.py --quick         # 2 steps on 1,000 records (CI: checks it runs)
"""

from __future__ import annotations

import argparse
import time

import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.bounds.aggregate import MODES
from certdp.models import ModelSpec
from certdp.training import TrainSettings, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=330)
    ap.add_argument("--k-max", type=int, default=28)
    ap.add_argument("--n", type=int, default=16512)
    # topk: the California preset's exact SEMin/SEMax; tau: fused sums (both nest, see certdp/bounds/aggregate.py)
    ap.add_argument("--aggregation", default="topk", choices=list(MODES))
    ap.add_argument("--quick", action="store_true", help="2 steps, 1,000 records, no torch.compile")
    a = ap.parse_args()
    if a.quick:
        import os
        os.environ["CERTDP_NO_COMPILE"] = "1"
        a.steps, a.n = 2, 1000
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.n, 8, generator=g, dtype=torch.float64)
    y = torch.tanh(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.3 * torch.randn(a.n, generator=g, dtype=torch.float64)
    m = ModelSpec((8, 64, 1), "mse")
    s = TrainSettings(steps=a.steps, lr=0.01, clip=0.1, seed=0)
    th = m.init(0)
    t = time.perf_counter()
    train(m, th, x, y, s)
    nominal = time.perf_counter() - t
    ks = list(range(1, a.k_max + 1))
    t = time.perf_counter()
    run_agt(m, th, x, y, s, ks, certificate=get_certificate("ibp", aggregation=a.aggregation), progress=False)
    agt = time.perf_counter() - t
    print(f"n={a.n} P={m.n_params} steps={a.steps} |K|={len(ks)} aggregation={a.aggregation}")
    print(f"nominal: {nominal:.2f} s   AGT: {agt:.2f} s   per radius: {agt / len(ks):.2f} s")
    print(f"ratio AGT / (|K| x nominal) = {agt / (len(ks) * nominal):.2f}   (target <= 1)")


if __name__ == "__main__":
    import certdp
    certdp.tune_malloc()          # as the command line does (import certdp tunes nothing): the CLI's timings
    main()
