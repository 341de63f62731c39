"""Containment of the mini-batch certificates against >= 1,000 retrained neighbours per mode and model.

For each model (linear regression, a diabetes-like 10-16-1 ReLU MLP, the paper's blobs hinge
classifier, a 3-class softmax head), each certificate mode and each radius, neighbours are
built with every placement x replacement of ``certdp/neighbours.py`` (records used most, in
the last batch of an epoch, spread over epochs, at an epoch boundary; wide records, label flips,
clip-saturating records), retrained with the same initialisation and batch plan, and checked
against T_k (tolerance 1e-9 relative).  Prints one line per (model, mode): neighbours, violations,
the largest deviation / certified half-width ratio, and the seconds the certificate took.

    PYTHONPATH=$PWD python benchmarks/containment.py [--models linear,mlp,blobs,softmax]
        [--modes ibp:per_epoch,crown:per_epoch,crowntt,crowntt:alpha_iters=40] [--per 50]
    PYTHONPATH=$PWD python benchmarks/containment.py --quick      # 2 neighbours per case (CI, seconds)

A mode is ``name`` followed by ``:``-separated parts, each a ``certificate.substitutions`` value
or a ``key=value`` certificate option (e.g. ``crowntt:per_epoch:alpha_iters=40``).

``--extreme`` checks records of 1e6 and more instead (issue 19: a MILP that trusted its solver's
"optimal" let theta(D) escape T_1(D') when D' held a record of -1e6).  Per model (``xlinear``:
linear regression, N = 16, batch 4, 8 steps; ``xhinge``: a 2-feature hinge classifier, the same
plan; ``xmlp``: a 2-8-1 MLP, which MILP refuses by its scope, a data-independent reason) and
mode, three base datasets D (clean; one record (-1e6, 0) at the most-used index; records
(1e8, 1e3) and (-1e6, -1e6) at two indices), T_k(D) for k = 1, 2, 4, and neighbours D' at
exactly k substitutions at every placement of certdp/neighbours.py (random, most-used, last
batch of an epoch, several epochs, an epoch boundary), each substituted record one of
+-1e6 .. +-1e12 features with labels 0, +-1e6, +-1e12 or the original label (hinge: +-1),
cycled: theta(D') in T_k(D) for every one of them (``--per`` per placement and radius; default
enough for 1,000 per model and mode over the bases), and for the
first ``--reverse`` neighbours at k = 1 per base the other direction, theta(D) in T_1(D') with
T(D') computed.  Prints one line per (model, mode) and the wall time::

    PYTHONPATH=$PWD python benchmarks/containment.py --extreme --models xlinear,xhinge,xmlp \
        --modes milp:frequency=1:workers=1,milp:frequency=2:workers=1,milp:frequency=4:workers=1
"""

from __future__ import annotations

import argparse
import time

import torch

from certdp import DTYPE  # noqa: E402
from certdp.agt import AGTOptions, run_agt# noqa: E402
from certdp.bounds import get_certificate  # noqa: E402
from certdp.data import load_dataset  # noqa: E402
from certdp.models import ModelSpec  # noqa: E402
from certdp.training import TrainSettings, batch_plan, train  # noqa: E402
from certdp.errors import ConfigError  # noqa: E402
from certdp.neighbours import PLACEMENTS, neighbours, placement_indices  # noqa: E402


def setting(name: str):
    gen = torch.Generator().manual_seed(0)
    if name == "linear":
        x = torch.rand(42, 1, generator=gen, dtype=DTYPE) * 2 - 1         # 8 batches per epoch, tail 2
        y = 2 * x[:, 0] + 1 + 0.1 * torch.randn(42, generator=gen, dtype=DTYPE)
        return ModelSpec((1, 1), "mse"), x, y, TrainSettings(steps=64, lr=0.1, clip=0.1, batch_size=5), [1, 2, 4, 8, 16], "mse", 1
    if name == "mlp":
        x = torch.randn(400, 10, generator=gen, dtype=DTYPE)
        y = torch.tanh(x[:, :3].sum(1)) + 0.2 * torch.randn(400, generator=gen, dtype=DTYPE)
        return (ModelSpec((10, 16, 1), "mse"), x, y, TrainSettings(steps=50, lr=0.05, clip=0.1, batch_size=20),
                [1, 2, 4], "mse", 1)
    if name == "blobs":
        ds = load_dataset({"name": "blobs", "n_features": 8, "n_train": 200, "n_test": 10, "n_public": 10,
                           "separation": 2.563, "cluster_std": 1.0}, 0)
        x, y = torch.as_tensor(ds.x_train, dtype=DTYPE), torch.as_tensor(ds.y_train)
        return (ModelSpec((8, 1), "hinge"), x, y, TrainSettings(steps=200, lr=0.5, clip=0.05, batch_size=20),
                [1, 2, 4, 8], "hinge", 2)
    if name == "softmax":
        c = torch.tensor([[2.0, 0.0, 0.0, 0.0], [-1.0, 1.7, 0.0, 0.0], [-1.0, -1.7, 0.0, 0.0]], dtype=DTYPE)
        lab = torch.randint(0, 3, (155,), generator=gen)
        x = c[lab] + torch.randn(155, 4, generator=gen, dtype=DTYPE)
        return (ModelSpec((4, 3), "ce"), x, lab, TrainSettings(steps=40, lr=0.5, clip=0.1, batch_size=10),
                [1, 2, 4], "ce", 3)
    if name in ("xlinear", "xhinge", "xmlp"):
        n = 16
        d = 2 if name == "xhinge" else 1
        x = torch.rand(n, d, generator=gen, dtype=DTYPE) * 2 - 1
        if name == "xhinge":
            y = torch.where(x.sum(1) > 0, 1.0, -1.0).to(DTYPE)
            m, loss = ModelSpec((2, 1), "hinge"), "hinge"
        else:
            y = 2 * x[:, 0] + 1 + 0.1 * torch.randn(n, generator=gen, dtype=DTYPE)
            m, loss = (ModelSpec((1, 8, 1), "mse") if name == "xmlp" else ModelSpec((1, 1), "mse")), "mse"
        return m, x, y, TrainSettings(steps=8, lr=0.3, clip=1.0, batch_size=4, seed=1), [1, 2, 4], loss, 2
    raise ValueError(name)


XV = (1e6, 1e7, 1e9, 1e12)
YV = (0.0, 1e6, -1e6, 1e12, -1e12, None)          # None: the record's own label


def _extreme_record(r: int, d: int, loss: str, y_orig: float, gen: torch.Generator):
    """The r-th extreme record: a magnitude of XV with a random sign per feature, a label of YV
    (hinge: +-1)."""
    mag = XV[r % len(XV)]
    xv = mag * torch.where(torch.rand(d, generator=gen) < 0.5, -1.0, 1.0).to(DTYPE)
    if loss == "hinge":
        return xv, (1.0 if r % 2 else -1.0)
    yv = YV[(r // len(XV)) % len(YV)]
    return xv, (y_orig if yv is None else yv)


def _bases(x, y, plan, loss):
    """The clean dataset and two with extreme records (module docstring)."""
    n = x.shape[0]
    used = torch.bincount(plan.reshape(-1), minlength=n).argsort(descending=True)
    out = [("clean", x, y)]
    X, Y = x.clone(), y.clone()
    X[int(used[0])], Y[int(used[0])] = -1e6, (0.0 if loss == "mse" else 1.0)
    out.append(("one-1e6", X, Y))
    X, Y = x.clone(), y.clone()
    X[int(used[1])], Y[int(used[1])] = 1e8, (1e3 if loss == "mse" else -1.0)
    X[int(used[-1])], Y[int(used[-1])] = -1e6, (-1e6 if loss == "mse" else 1.0)
    out.append(("two-extreme", X, Y))
    return out


def extreme(models: list[str], modes: list[str], per: int, reverse: int) -> None:
    """The ``--extreme`` check (module docstring)."""
    t_all = time.time()
    for mname in models:
        m, x, y, st, ks, loss, _ = setting(mname)
        plan = batch_plan(x.shape[0], st)
        th0 = m.init(0)
        n, d = x.shape
        epoch = max(1, n // plan.shape[1])
        bases = _bases(x, y, plan, loss)
        per_ = per or -(-1000 // (len(PLACEMENTS) * len(ks) * len(bases)))
        for mode in modes:
            name, *parts = mode.split(":")
            opts = dict(p.split("=", 1) if "=" in p else ("substitutions", p) for p in parts)
            t0 = time.time()
            total = viol = rev = rev_viol = crossed = 0
            cert_s = 0.0
            try:
                cert = get_certificate(name, **opts)
                for bname, xb, yb in bases:
                    c0 = time.time()
                    env = run_agt(m, th0, (xb, yb), st, ks, AGTOptions(certificate=cert, plan=plan, progress=False))
                    cert_s += time.time() - c0
                    crossed += int((env.lo > env.hi).any(-1).sum())
                    gen = torch.Generator().manual_seed(3)
                    firsts = []
                    for j, k in enumerate(ks):
                        for placement in PLACEMENTS:
                            X = xb.unsqueeze(0).repeat(per_, 1, 1)
                            Y = yb.unsqueeze(0).repeat(per_, 1)
                            for r in range(per_):
                                idx = placement_indices(placement, k, plan, n, epoch, gen)
                                for i in idx:
                                    X[r, i], Y[r, i] = _extreme_record(r + i, d, loss, float(yb[i]), gen)
                            th = train(m, th0.expand(per_, -1), X, Y, st, plan=plan)
                            ok = env.contains(th)[:, j]
                            viol += int((~ok).sum())
                            total += per_
                            if k == 1:
                                firsts += [(X[r], Y[r]) for r in range(per_)]
                    th_d = train(m, th0, xb, yb, st, plan=plan)
                    for Xr, Yr in firsts[:reverse]:
                        c0 = time.time()
                        env_r = run_agt(m, th0, (Xr, Yr), st, [1],
                                        AGTOptions(certificate=cert, plan=plan, progress=False))
                        cert_s += time.time() - c0
                        crossed += int((env_r.lo > env_r.hi).any(-1).sum())
                        rev += 1
                        rev_viol += int(not bool(env_r.contains(th_d)[0]))
            except ConfigError as e:
                print(f"{mname:8s} {mode:28s} refused: {e}", flush=True)
                continue
            print(f"{mname:8s} {mode:28s} neighbours {total:5d} violations {viol} | reverse theta(D) in T_1(D') "
                  f"{rev} checked, {rev_viol} violations | crossed boxes {crossed} | certificate {cert_s:.1f} s, "
                  f"wall {time.time() - t0:.1f} s", flush=True)
    print(f"total wall {time.time() - t_all:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="linear,mlp,blobs,softmax")
    ap.add_argument("--modes", default="ibp:per_epoch,crown:per_epoch")
    ap.add_argument("--per", type=int, default=0, help="neighbours per (radius, placement); default: "
                                                      "enough for 1,000 per mode and model")
    ap.add_argument("--extreme", action="store_true", help="records of 1e6 and more, both directions "
                                                           "(module docstring; models xlinear, xhinge, xmlp)")
    ap.add_argument("--reverse", type=int, default=4, help="--extreme: neighbours per base whose own "
                                                           "envelope is computed (theta(D) in T_1(D'))")
    ap.add_argument("--quick", action="store_true", help="2 neighbours per (radius, placement): checks it runs")
    a = ap.parse_args()
    if a.quick:
        a.per = a.per or 2
    if a.extreme:
        extreme(a.models.split(","), a.modes.split(","), a.per, a.reverse)
        return
    for mname in a.models.split(","):
        m, x, y, st, ks, loss, ncls = setting(mname)
        plan = batch_plan(x.shape[0], st)
        th0 = m.init(0)
        per = a.per or -(-1000 // (len(PLACEMENTS) * len(ks)))
        for mode in a.modes.split(","):
            name, *parts = mode.split(":")
            opts = dict(p.split("=", 1) if "=" in p else ("substitutions", p) for p in parts)
            if not get_certificate(name).supports(m):
                print(f"{mname:8s} {mode:18s} not supported")
                continue
            cert = get_certificate(name, **opts)
            t0 = time.time()
            env = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=cert, plan=plan, progress=False))
            secs = time.time() - t0
            gen = torch.Generator().manual_seed(1)
            total = viol = 0
            worst = 0.0
            half = torch.maximum(env.hi - env.nominal, env.nominal - env.lo)
            for j, k in enumerate(ks):
                for placement in PLACEMENTS:
                    X, Y = neighbours(x, y, k=k, R=per, plan=plan, loss=loss, placement=placement, gen=gen,
                                      n_classes=ncls)
                    th = train(m, th0.expand(per, -1), X, Y, st, plan=plan)
                    scale = 1e-9 * (1 + env.hi[j].abs().max())
                    ok = ((th >= env.lo[j] - scale) & (th <= env.hi[j] + scale)).all(-1)
                    viol += int((~ok).sum())
                    total += per
                    worst = max(worst, float(((th - env.nominal).abs() / half[j].clamp(min=1e-300)).max()))
            widths = [round(float(v), 4) for v in env.widths().sum(-1)]
            print(f"{mname:8s} {mode:18s} neighbours {total:5d} violations {viol} worst dev/half-width "
                  f"{worst:.3f} T_k l1 widths {widths} ({secs:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
