"""Seconds per AGT step at the mnist5 paper shape (softmax head on PCA-8, P = 45, N = 28,596,
IBP) for the two aggregations, per number of radii, on one device; ``--profile`` adds the torch
profiler's top operations.

Measured 2026-11-27 on one H200 (device tool, torch 2.11+cu130), radii 1..K-1 and N:
top-k 2.99 s per step at K = 1,025 (12.1 s at K = 4,097, AGT's own estimate in a full run),
tau 0.056 s per step at K = 1,025 (compiled).  Exact top-k sorts K x P x N per-sample bounds
every step; tau reads fixed-fraction sums (certdp/bounds/aggregate.py).

    python benchmarks/gpu_profile_step.py --device cuda
    python benchmarks/gpu_profile_step.py --quick            # small shapes on the CPU (seconds)
"""
from __future__ import annotations

import argparse
import time

import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.models import ModelSpec
from certdp.training import TrainSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="N = 2,000 and K = 17, 65 on the given device")
    ap.add_argument("--radii", default="257,1025", help="comma-separated K (radii 1..K-1 and N)")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    dev, F = a.device, torch.float64
    g = torch.Generator().manual_seed(0)
    n = 2000 if a.quick else 28596
    lab = torch.randint(0, 5, (n,), generator=g)
    x = (torch.randn(n, 8, generator=g, dtype=F) + 2 * torch.nn.functional.one_hot(lab, 8).to(F)).to(dev)
    lab = lab.to(dev)
    m = ModelSpec((8, 5), "ce")
    th = m.init(0)
    ts = TrainSettings(steps=1, lr=2.0, clip=0.02, contraction=0.6)
    sync = torch.cuda.synchronize if torch.device(dev).type == "cuda" else (lambda: None)
    for K in ([17, 65] if a.quick else [int(k) for k in a.radii.split(",")]):
        for agg in ("topk", "tau"):
            ks = list(range(1, K)) + [n]
            eng = get_certificate("ibp", aggregation=agg)
            run_agt(m, th, x, lab, ts, ks, certificate=eng, progress=False, device=dev)    # compile, allocate
            sync()
            t = time.perf_counter()
            if a.profile:
                acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                                if torch.device(dev).type == "cuda" else [])
                with torch.profiler.profile(activities=acts) as prof:
                    run_agt(m, th, x, lab, ts, ks, certificate=eng, progress=False, device=dev)
                    sync()
            else:
                run_agt(m, th, x, lab, ts, ks, certificate=eng, progress=False, device=dev)
                sync()
            print(f"K={K:5d} {agg:5s} {dev}: {time.perf_counter() - t:.3f} s per step", flush=True)
            if a.profile:
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)


if __name__ == "__main__":
    import certdp
    certdp.tune_malloc()          # as the command line does (import certdp tunes nothing): the CLI's timings
    main()
