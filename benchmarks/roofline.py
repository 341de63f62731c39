"""Roofline of one AGT step: the arithmetic an engine does per step, its achieved rate, and this
machine's float64 matmul rate beside it.

For each shape (records N, model widths, loss, radii K, batch b) the script runs ``run_agt`` for a
few steps after a warm-up pass (which compiles), and prints per step: wall and CPU seconds, the
operation count of the step (:func:`step_flops`: every add, multiply, min, max, compare, select,
divide and transcendental the engine's formulas evaluate counts one; K + 1 boxes, the radius-0
row included), the achieved GFLOP/s and its fraction of a float64 matrix product (torch.mm of
2048 x 2048 matrices, same threads) timed in the same process.  The counts are the formulas'
arithmetic, not what a particular implementation executes: a faster implementation raises the
rate, never the count.

    python benchmarks/roofline.py                            # mnist5, california, blobs; IBP tau
    python benchmarks/roofline.py --engines ibp-tau,ibp-topk,crown --shapes mnist5 --steps 5
    python benchmarks/roofline.py --threads 1                # CPU time is the reliable clock on a loaded machine
    python benchmarks/roofline.py --out benchmarks/results/roofline_after.md
    python benchmarks/roofline.py --quick                    # tiny shapes, eager, seconds (CI)

Data: standard normal features and random labels of the shape (the arithmetic of a step does not
depend on the values; the clipping pattern only moves top-k's candidate counts).  The load
average is printed with every table: on a shared machine compare CPU seconds with one thread.
Before/after: run the same command with ``PYTHONPATH`` pointing at the other tree.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch

# (records N, widths, loss, radii K, batch size or None, lr, clip, contraction): the presets' shapes
SHAPES = {
    "mnist5": (28596, (8, 5), "ce", 64, None, 2.0, 0.02, 0.6),          # preset ags/mnist5, the probe's 64 radii
    "california": (16512, (8, 64, 1), "mse", 28, None, 0.01, 0.1, 1.0),  # preset agtr/california
    "blobs": (200, (8, 1), "hinge", 64, 20, 0.5, 0.05, 1.0),             # preset ags/blobs, the ledger
}
QUICK = {
    "mnist5": (600, (8, 5), "ce", 8, None, 2.0, 0.02, 0.6),
    "california": (300, (8, 16, 1), "mse", 4, None, 0.01, 0.1, 1.0),
    "blobs": (200, (8, 1), "hinge", 8, 20, 0.5, 0.05, 1.0),
}


def loss_flops(loss: str, C: int) -> int:
    """Operations of ``loss.grad_bounds`` per record and box (both ends)."""
    if loss == "mse":
        return 4 * C                          # (z - y) * 2, both ends
    if loss == "hinge":
        return 10 * C                         # margin by sign, two tests, selects
    # softmax (certdp/losses.py, class by class): |z| maxima (4C), the margin (3), one-hot (2C); per
    # end: the shifts s_c, m, M2 (5C), exp(v - m) and exp(v - M2) with their prefix and suffix sums
    # (10C - 8), the choice of t_c (2C), and per class the logistic over t (17: two differences,
    # |.|, exp, t e, 1 + ., e + t, two divisions, test, select, two margins, clamp to [0, 1])
    return 4 * C + 3 + 2 * C + 2 * (3 * C + 1 + C + 10 * C - 8 + 2 * C + 17 * C)

# per weight-gradient element (record, box): the interval product (2 multiplies, 1 add per end),
# the NaN-safe clip (compare, select, min per end), the tau grid (3 clamps, 4 adds per end)
TAU_WEIGHT = 6 + 6 + 14
TAU_BIAS = 6 + 14


def step_flops(engine: str, widths, loss: str, n: int, K: int) -> float | None:
    """Operations of one AGT step over ``K`` radii plus the radius-0 row on ``n`` records (None: not
    counted for this engine).  IBP: the interval forward pass (exact first-layer input: per
    weight 2 multiplies and 2 adds per end; later layers: sign-split products, 8 per weight), the
    loss's bounds, the interval backward pass (per hidden weight: 4 products, 3 min, 3 max, 2 adds;
    ReLU derivative 6 per unit), then per parameter the clipped per-sample bounds and either the
    tau sums (``ibp-tau``) or a top-k selection (``ibp-topk``: counted as the clip and two passes
    over the samples, a lower bound of a selection)."""
    if not engine.startswith("ibp"):
        return None
    rows = K + 1
    layers = list(zip(widths[:-1], widths[1:]))
    fwd = 0
    for li, (i, o) in enumerate(layers):
        fwd += 8 * i * o + 2 * o + (2 * o if li < len(layers) - 1 else 0)      # + bias, + ReLU clamp
    back = sum(12 * i * o + 6 * i for (i, o) in layers[1:])
    per_param = TAU_WEIGHT if engine == "ibp-tau" else 6 + 6 + 4
    params = sum(o * i * per_param + o * (TAU_BIAS if engine == "ibp-tau" else 12) for (i, o) in layers)
    return float(rows) * n * (fwd + loss_flops(loss, widths[-1]) + back + params)


def matmul_rate(size: int = 2048, reps: int = 3) -> float:
    """Best float64 GEMM rate (GFLOP/s) of a size x size product with the current threads."""
    a = torch.randn(size, size, dtype=torch.float64)
    b = torch.randn(size, size, dtype=torch.float64)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * size ** 3 / best / 1e9


def time_step(shape, engine: str, steps: int, profile: bool = False) -> tuple[float, float]:
    """(wall, CPU) seconds per AGT step of ``engine`` on ``shape``, after a warm-up pass."""
    from certdp.agt import run_agt
    from certdp.bounds import get_certificate
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings

    n, widths, loss, K, bs, lr, clip, lam = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, widths[0], generator=g, dtype=torch.float64)
    if loss == "ce":
        y = torch.randint(0, widths[-1], (n,), generator=g)
    elif loss == "hinge":
        y = torch.randint(0, 2, (n,), generator=g).to(torch.float64) * 2 - 1
    else:
        y = torch.randn(n, generator=g, dtype=torch.float64)
    m = ModelSpec(widths, loss)
    name, _, agg = engine.partition("-")
    cert = get_certificate(name, **({"aggregation": agg} if agg else {}))
    theta = m.init(0)

    def run(t):
        st = TrainSettings(steps=t, lr=lr, clip=clip, batch_size=bs, contraction=lam, seed=0)
        w, c = time.perf_counter(), time.process_time()
        run_agt(m, theta, x, y, st, range(1, K + 1), certificate=cert, progress=False)
        return time.perf_counter() - w, time.process_time() - c

    run(2)                                          # compile, allocate
    if profile:                                     # where a step's time goes, by operator / compiled graph
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as prof
        with prof(activities=[ProfilerActivity.CPU]) as p:
            run(steps)
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    steps = steps * (50 if n * K <= 1e5 else 1)     # tiny shapes: enough steps to be timed
    best = [float("inf")] * 4
    for _ in range(2):                              # the best of two: a shared machine only adds time
        one, many = run(1), run(1 + steps)
        best = [min(p, q) for p, q in zip(best, (*one, *many))]
    w1, c1, wn, cn = best
    return max(wn - w1, 0.0) / steps, max(cn - c1, 0.0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="mnist5,california,blobs")
    ap.add_argument("--engines", default="ibp-tau")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--k", type=int, default=None, help="radii (default: the shape's)")
    ap.add_argument("--out", default=None, help="also write the table (markdown) to this file")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one step, no torch.compile")
    ap.add_argument("--profile", action="store_true", help="also print torch.profiler's operator table of the steps")
    a = ap.parse_args()
    if a.quick:
        os.environ["CERTDP_NO_COMPILE"] = "1"
        a.steps = 1
    if a.threads:
        torch.set_num_threads(a.threads)
    shapes = QUICK if a.quick else SHAPES
    import certdp
    rate = matmul_rate(512 if a.quick else 2048)
    head = (f"roofline of one AGT step: {platform.node()} {platform.processor() or platform.machine()}, "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}, certdp from "
            f"{Path(certdp.__file__).resolve().parent.parent}, {time.strftime('%Y-%m-%d %H:%M')}")
    lines = [head, "", f"float64 matmul: {rate:.1f} GFLOP/s", "",
             "| shape | engine | N | P | K | b | s/step (wall) | s/step (CPU) | GFLOP/step | GFLOP/s (CPU) "
             "| of matmul | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in a.shapes.split(","):
        shape = shapes[name]
        if a.k:
            shape = (*shape[:3], a.k, *shape[4:])
        n, widths, loss, K, bs, *_ = shape
        from certdp.models import ModelSpec
        P = ModelSpec(widths, loss).n_params
        b = n if bs is None else bs
        for engine in a.engines.split(","):
            wall, cpu = time_step(shape, engine, a.steps, a.profile)
            fl = step_flops(engine, widths, loss, b, K)
            load = os.getloadavg()[0]
            threads = torch.get_num_threads()
            if fl is None:
                lines.append(f"| {name} | {engine} | {n} | {P} | {K} | {b} | {wall:.4g} | {cpu:.4g} | - | - | - | "
                             f"{load:.1f} |")
                continue
            # CPU seconds over the threads that ran: the rate the cores achieved while busy
            got = fl / max(cpu / threads, 1e-12) / 1e9
            lines.append(f"| {name} | {engine} | {n} | {P} | {K} | {b} | {wall:.4g} | {cpu:.4g} | {fl / 1e9:.3g} | "
                         f"{got:.2f} | {100 * got / rate:.0f}% | {load:.1f} |")
    lines.append("")
    lines.append("GFLOP/s (CPU) = operations / (CPU seconds / threads); wall time on a loaded machine "
                 "includes other users' work.")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
