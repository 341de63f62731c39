"""Containment of the mini-batch certificates against >= 1,000 retrained neighbours per mode and model.

For each model (linear regression, a diabetes-like 10-16-1 ReLU MLP, the paper's blobs hinge
classifier, a 3-class softmax head), each certificate mode and each radius, neighbours are
built with every placement x replacement of ``tests/neighbourhoods.py`` (records used most, in
the last batch of an epoch, spread over epochs, at an epoch boundary; wide records, label flips,
clip-saturating records), retrained with the same initialisation and batch plan, and checked
against T_k (tolerance 1e-9 relative).  Prints one line per (model, mode): neighbours, violations,
the largest deviation / certified half-width ratio, and the seconds the certificate took.

    PYTHONPATH=$PWD python benchmarks/containment.py [--models linear,mlp,blobs,softmax]
        [--modes ibp:per_epoch,crown:per_epoch,crowntt,crowntt:alpha_iters=40] [--per 50]
    PYTHONPATH=$PWD python benchmarks/containment.py --quick      # 2 neighbours per case (CI, seconds)

A mode is ``name`` followed by ``:``-separated parts, each a ``certificate.substitutions`` value
or a ``key=value`` certificate option (e.g. ``crowntt:per_epoch:alpha_iters=40``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from certdp import DTYPE  # noqa: E402
from certdp.agt import run_agt  # noqa: E402
from certdp.bounds import get_certificate  # noqa: E402
from certdp.data import load_dataset  # noqa: E402
from certdp.models import ModelSpec  # noqa: E402
from certdp.training import TrainSettings, batch_plan, train  # noqa: E402
from neighbourhoods import PLACEMENTS, neighbours  # noqa: E402


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
    raise ValueError(name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="linear,mlp,blobs,softmax")
    ap.add_argument("--modes", default="ibp:per_epoch,crown:per_epoch")
    ap.add_argument("--per", type=int, default=0, help="neighbours per (radius, placement); default: "
                                                      "enough for 1,000 per mode and model")
    ap.add_argument("--quick", action="store_true", help="2 neighbours per (radius, placement): checks it runs")
    a = ap.parse_args()
    if a.quick:
        a.per = a.per or 2
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
            env = run_agt(m, th0, x, y, st, ks, certificate=cert, plan=plan, progress=False)
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
