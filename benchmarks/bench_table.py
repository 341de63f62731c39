"""``make bench``: one table of AGT seconds per step on the CPU and, where torch sees one, the GPU.

Rows: the shapes of the presets at their radii, on synthetic data of the same size (the timing
does not depend on the values beyond the clipping pattern):

=================  ======================================================================
linear             AGT-R linear head, P = 2, N = 40,000, CROWN (coupled), k = 1..400 and N
california         8-64-1 ReLU MLP, P = 641, N = 16,512, IBP tau (torch.compile'd on the CPU), k = 1..28
mnist5 (cpu)       softmax head on PCA-8, P = 45, N = 28,596, CROWN, k = 1..16 and N (the CPU profile)
mnist5 (paper)     the same head, IBP tau, k = 1..4096 and N: the proven profile a GPU runs
blobs              hinge head, P = 9, N = 200, batch 20 (the per-epoch ledger), IBP, k = 1, 2, 4, 8
=================  ======================================================================

For each (shape, device): seconds per AGT step (the mean over the timed steps, after one
untimed pass that compiles and allocates), seconds per nominal step (the same training, no
bounds), the ratio AGT / (|K| x nominal) -- the cost of one radius in nominal runs -- and, with
two devices, CPU / GPU.  ``--quick`` shrinks N and the radii (seconds; what CI runs), and leaves
torch.compile out (CERTDP_NO_COMPILE=1: its ~20 s compile would be the whole quick run).

    python benchmarks/bench_table.py                   # full shapes, every device torch sees
    python benchmarks/bench_table.py --quick --devices cpu
    python benchmarks/bench_table.py --only linear,california --csv /tmp/bench.csv
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.models import ModelSpec
from certdp.training import TrainSettings, train

F = torch.float64


def shapes(quick: bool) -> dict:
    """name -> (model, x, y, train settings, radii, engine factory, timed steps)."""
    g = torch.Generator().manual_seed(0)
    out = {}
    n = 4000 if quick else 40000
    x = torch.rand(n, 1, generator=g, dtype=F) * 2 - 1
    out["linear"] = (ModelSpec((1, 1), "mse"), x, 2 * x[:, 0] + 1 + 0.1 * torch.randn(n, generator=g, dtype=F),
                     dict(lr=0.3, clip=1.0), list(range(1, (40 if quick else 400) + 1)) + [n],
                     lambda: get_certificate("crown"), 2 if quick else 3)
    n = 1000 if quick else 16512
    x = torch.randn(n, 8, generator=g, dtype=F)
    out["california"] = (ModelSpec((8, 64, 1), "mse"), x,
                         torch.tanh(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.3 * torch.randn(n, generator=g, dtype=F),
                         dict(lr=0.01, clip=0.1), list(range(1, 29)), lambda: get_certificate("ibp", aggregation="tau"),
                         2 if quick else 3)
    n = 2000 if quick else 28596
    lab = torch.randint(0, 5, (n,), generator=g)
    x = torch.randn(n, 8, generator=g, dtype=F) + 2 * torch.nn.functional.one_hot(lab, 8).to(F)
    head = ModelSpec((8, 5), "ce")
    ts = dict(lr=2.0, clip=0.02, contraction=0.6)
    out["mnist5 (cpu)"] = (head, x, lab, ts, list(range(1, 17)) + [n], lambda: get_certificate("crown"), 2)
    out["mnist5 (paper)"] = (head, x, lab, ts, list(range(1, (256 if quick else 4096) + 1)) + [n],
                             lambda: get_certificate("ibp", aggregation="tau"), 1)      # the GPU profile's aggregation
    n = 200
    lab = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 8, generator=g, dtype=F) + 0.9 * (2 * lab - 1).to(F).unsqueeze(-1)
    out["blobs"] = (ModelSpec((8, 1), "hinge"), x, (2 * lab - 1).to(F), dict(lr=0.5, clip=0.05, batch_size=20),
                    [1, 2, 4, 8], lambda: get_certificate("ibp"), 20 if quick else 50)
    return out


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure(shape, device) -> dict:
    m, x, y, ts, ks, make, steps = shape
    th = m.init(0)
    x, y = x.to(device), y.to(device)
    eng = make()
    warm = TrainSettings(steps=1, **ts)
    run_agt(m, th, x, y, warm, ks, certificate=eng, progress=False, device=device)   # compile, allocate
    timed = TrainSettings(steps=steps, **ts)
    _sync(device)
    t = time.perf_counter()
    run_agt(m, th, x, y, timed, ks, certificate=eng, progress=False, device=device)
    _sync(device)
    agt = (time.perf_counter() - t) / steps
    nom_steps = max(steps, 20)
    nominal_settings = TrainSettings(steps=nom_steps, **ts)
    train(m, th, x, y, TrainSettings(steps=1, **ts), device=device)
    _sync(device)
    t = time.perf_counter()
    train(m, th, x, y, nominal_settings, device=device)
    _sync(device)
    nominal = (time.perf_counter() - t) / nom_steps
    return {"agt_s_per_step": agt, "nominal_s_per_step": nominal, "per_radius": agt / (len(ks) * nominal),
            "radii": len(ks), "N": int(x.shape[0]), "P": m.n_params, "engine": eng.name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, no torch.compile (seconds)")
    ap.add_argument("--devices", default=None, help="comma-separated (default: cpu, and cuda where torch sees it)")
    ap.add_argument("--only", default=None, help="comma-separated shape names (prefixes)")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    if a.quick:
        os.environ["CERTDP_NO_COMPILE"] = "1"
    devices = a.devices.split(",") if a.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for name, shape in shapes(a.quick).items():
        if a.only and not any(name.startswith(o) for o in a.only.split(",")):
            continue
        for dev in devices:
            r = measure(shape, dev)
            rows.append({"shape": name, "device": dev, **r})
            print(f"  measured {name} on {dev}: {r['agt_s_per_step']:.3g} s/step", file=sys.stderr, flush=True)
    by = {(r["shape"], r["device"]): r for r in rows}
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"# AGT seconds per step ({'quick' if a.quick else 'full'} shapes; {when}; {platform.node()}; "
          f"{os.cpu_count()} CPUs, torch {torch.__version__} with {torch.get_num_threads()} threads; GPU: {gpu})")
    head = f"{'shape':16s} {'engine':7s} {'radii':>6s} {'N':>6s} {'P':>4s} {'device':7s} {'AGT s/step':>11s} " \
           f"{'nominal s/step':>14s} {'per radius':>10s} {'vs other':>9s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        other = [o for (s, d), o in by.items() if s == r["shape"] and d != r["device"]]
        vs = f"{r['agt_s_per_step'] / other[0]['agt_s_per_step']:.2f}x" if other else "-"
        print(f"{r['shape']:16s} {r['engine']:7s} {r['radii']:6d} {r['N']:6d} {r['P']:4d} {r['device']:7s} "
              f"{r['agt_s_per_step']:11.4g} {r['nominal_s_per_step']:14.4g} {r['per_radius']:10.2f} {vs:>9s}")
    print("per radius = AGT s/step / (radii x nominal s/step); vs other = this device's AGT time / the other's")
    if a.csv:
        import pandas as pd
        pd.DataFrame(rows).to_csv(a.csv, index=False)


if __name__ == "__main__":
    import certdp
    certdp.tune_malloc()          # as the command line does (import certdp tunes nothing): the CLI's timings
    main()
