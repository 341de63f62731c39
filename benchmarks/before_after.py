"""Same-process before/after timing: AGT on one problem with the engines of two source trees.

The old tree (``--old``, a checkout or ``git archive`` of the base commit) is imported first and
its modules renamed to ``old_certdp.*`` (every ``from certdp... import`` inside it is bound at
import time), then the current tree is imported as ``certdp``; the two runs alternate
``--repeats`` times, so machine load hits both alike, and the ratio old / new is printed.

    git archive BASE | tar -x -C /tmp/base
    python benchmarks/before_after.py --old /tmp/base --case linear
    python benchmarks/before_after.py --quick       # the tree against itself, small (CI: checks it runs)
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time


def load_old(path: str):
    saved = sys.path[:]
    for name in [m for m in sys.modules if m == "certdp" or m.startswith("certdp.")]:
        del sys.modules[name]
    sys.path.insert(0, path)
    mods = {n: importlib.import_module(n) for n in ("certdp", "certdp.agt", "certdp.bounds", "certdp.models",
                                                     "certdp.training")}
    for name in [m for m in sys.modules if m == "certdp" or m.startswith("certdp.")]:
        sys.modules["old_" + name] = sys.modules.pop(name)
    sys.path[:] = saved
    return mods


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=None, help="the old source tree (default with --quick: this one)")
    ap.add_argument("--quick", action="store_true", help="small shapes, one repeat")
    ap.add_argument("--case", default="linear", choices=["linear", "california", "california_tau", "softmax"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (1 makes a loaded machine's timings comparable: no barriers)")
    a = ap.parse_args()
    if a.old is None:
        if not a.quick:
            ap.error("--old is required (except with --quick)")
        import os
        a.old = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if a.quick:
        a.repeats, a.steps = 1, a.steps or 1
    old = load_old(a.old)
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)

    import certdp.agt
    import certdp.bounds
    import certdp.models
    import certdp.training
    new = {"certdp.agt": certdp.agt, "certdp.bounds": certdp.bounds, "certdp.models": certdp.models,
           "certdp.training": certdp.training}
    assert old["certdp.agt"] is not new["certdp.agt"]
    F = torch.float64
    g = torch.Generator().manual_seed(0)
    if a.case == "linear":
        n = 3000 if a.quick else 40000
        x = torch.rand(n, 1, generator=g, dtype=F) * 2 - 1
        y = 2 * x[:, 0] + 1 + 0.1 * torch.randn(n, generator=g, dtype=F)
        widths, loss, eng, opts = (1, 1), "mse", "crown", {}
        ts = dict(steps=a.steps or 3, lr=0.3, clip=1.0)
        ks = list(range(1, 401)) + [n]
    elif a.case.startswith("california"):
        n = 800 if a.quick else 16512
        x = torch.randn(n, 8, generator=g, dtype=F)
        y = torch.tanh(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.3 * torch.randn(n, generator=g, dtype=F)
        widths, loss, eng = (8, 64, 1), "mse", "ibp"
        opts = {"aggregation": "tau" if a.case.endswith("tau") else "topk"}
        ts = dict(steps=a.steps or 2, lr=0.01, clip=0.1)
        ks = list(range(1, 29))
    else:
        n = 2000 if a.quick else 28596
        y = torch.randint(0, 5, (n,), generator=g)
        x = torch.randn(n, 8, generator=g, dtype=F) + torch.nn.functional.one_hot(y, 8).to(F)
        widths, loss, eng, opts = (8, 5), "ce", "ibp", {"aggregation": "topk"}
        ts = dict(steps=a.steps or 2, lr=2.0, clip=0.02, contraction=0.6)
        ks = list(range(1, 257)) + [n]
    times = {"old": [], "new": []}
    cpu = {"old": [], "new": []}
    outs = {}
    for _ in range(a.repeats):
        for tag, mods in (("old", old), ("new", new)):
            m = mods["certdp.models"].ModelSpec(widths, loss)
            s = mods["certdp.training"].TrainSettings(**ts)
            cert = mods["certdp.bounds"].get_certificate(eng, **opts)
            t, c = time.perf_counter(), time.process_time()
            env = mods["certdp.agt"].run_agt(m, m.init(0), x, y, s, ks, certificate=cert, progress=False)
            times[tag].append(time.perf_counter() - t)
            cpu[tag].append(time.process_time() - c)
            outs[tag] = env
    same = all(torch.equal(getattr(outs["old"], f), getattr(outs["new"], f)) for f in ("lo", "hi", "nominal"))
    o, nw = min(times["old"]), min(times["new"])
    co, cn = min(cpu["old"]), min(cpu["new"])
    print(f"case={a.case} steps={ts['steps']} |K|={len(ks)} threads={torch.get_num_threads()}  wall: old {o:.2f} s  "
          f"new {nw:.2f} s  old/new = {o / nw:.2f}   cpu: old {co:.2f} s  new {cn:.2f} s  old/new = {co / cn:.2f}  "
          f"envelopes identical: {same}")


if __name__ == "__main__":
    import certdp
    certdp.tune_malloc()          # as the command line does (import certdp tunes nothing): the CLI's timings
    main()
