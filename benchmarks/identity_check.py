"""Before/after check: the envelopes of a fixed set of AGT problems, saved and compared bitwise.

A performance change to an engine must either leave every certificate byte-identical or come with
a soundness and nesting argument (docs/performance-and-devices.md).  This script is the evidence
for the first: it computes the envelopes (lo, hi, nominal) of the shapes the presets run -- the
linear AGT-R head under CROWN's coupled step, the California MLP under IBP (top-k and tau) and
CROWN, blobs' hinge head under the per-epoch ledger, a softmax head under CROWN's flat step and
IBP top-k at many radii, and shared boxes -- and either saves them or compares them with a saved
file.

    # with the old code on PYTHONPATH
    python benchmarks/identity_check.py --save /tmp/before.pt
    # with the new code
    python benchmarks/identity_check.py --against /tmp/before.pt     # exit 1 on any difference
    python benchmarks/identity_check.py --quick --save ...             # smaller shapes (seconds)

``--device cuda`` computes on another device and ``--rtol`` compares to a relative tolerance
instead of bitwise (the GPU check: float64 envelopes within 1e-9 relative of the CPU's).
Comparison is bitwise on the raw float64 bytes, and reports the first differing case.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time

import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.bounds.shared import SharedBoxes
from certdp.models import ModelSpec
from certdp.training import TrainSettings

F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def cases(quick: bool):
    """(name, model, x, y, settings, ks, engine) of every checked problem (synthetic data from fixed
    seeds; shapes of the presets, reduced by ``quick``)."""
    out = []
    # linear AGT-R head (P = 2), CROWN coupled step, full batch
    n = 4000 if quick else 40000
    g = _gen(1)
    x = torch.rand(n, 1, generator=g, dtype=F64) * 2 - 1
    y = 2 * x[:, 0] + 1 + 0.1 * torch.randn(n, generator=g, dtype=F64)
    kmax = 60 if quick else 400
    out.append(("linear_crown", ModelSpec((1, 1), "mse"), x, y,
                TrainSettings(steps=8 if quick else 20, lr=0.3, clip=1.0), list(range(1, kmax + 1)) + [n],
                get_certificate("crown")))
    # California-shape MLP 8-64-1
    n = 600 if quick else 4000
    g = _gen(2)
    x = torch.randn(n, 8, generator=g, dtype=F64)
    y = torch.tanh(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.3 * torch.randn(n, generator=g, dtype=F64)
    s = TrainSettings(steps=4 if quick else 12, lr=0.01, clip=0.1)
    m = ModelSpec((8, 64, 1), "mse")
    ks = list(range(1, 29))
    out.append(("california_ibp_topk", m, x, y, s, ks, get_certificate("ibp", aggregation="topk")))
    out.append(("california_ibp_tau", m, x, y, s, ks, get_certificate("ibp", aggregation="tau")))
    out.append(("california_crown", m, x, y, s, ks, get_certificate("crown")))
    # blobs-shape hinge head, mini-batches: the per-epoch ledger
    n = 200 if quick else 1000
    g = _gen(3)
    lab = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 8, generator=g, dtype=F64) + (2 * lab - 1).to(F64).unsqueeze(-1)
    y = (2 * lab - 1).to(F64)
    out.append(("blobs_ibp_ledger", ModelSpec((8, 1), "hinge"), x, y,
                TrainSettings(steps=30 if quick else 200, lr=0.5, clip=0.05, batch_size=20, seed=4),
                [1, 2, 4, 8], get_certificate("ibp")))
    # softmax head (P = 45), contractive full batch: CROWN flat step and IBP top-k at many radii
    n = 400 if quick else 3000
    g = _gen(4)
    lab = torch.randint(0, 5, (n,), generator=g)
    x = torch.randn(n, 8, generator=g, dtype=F64) + torch.nn.functional.one_hot(lab, 8).to(F64)
    m = ModelSpec((8, 5), "ce")
    s = TrainSettings(steps=6 if quick else 20, lr=2.0, clip=0.02, contraction=0.6)
    out.append(("softmax_crown", m, x, lab, s, list(range(1, 17)) + [n], get_certificate("crown")))
    out.append(("softmax_ibp_topk_many", m, x, lab, s, list(range(1, (100 if quick else 400) + 1)) + [n],
                get_certificate("ibp", aggregation="topk")))
    out.append(("softmax_ibp_tau_many", m, x, lab, s, list(range(1, (100 if quick else 400) + 1)) + [n],
                get_certificate("ibp", aggregation="tau")))
    out.append(("softmax_shared", m, x, lab, s, list(range(1, 257)) + [n],
                SharedBoxes(get_certificate("crown"), 4.0)))
    return out


def compute(quick: bool, device: str = "cpu", only: str | None = None) -> dict:
    res = {}
    takes_device = "device" in inspect.signature(run_agt).parameters
    for name, m, x, y, s, ks, eng in cases(quick):
        if only and only not in name:
            continue
        t = time.perf_counter()
        kw = {"device": device} if takes_device else {}
        if device != "cpu" and not takes_device:
            raise SystemExit("this version of run_agt has no device argument")
        if "options" in inspect.signature(run_agt).parameters:          # the AGTOptions API (issue 32)
            from certdp.agt import AGTOptions
            env = run_agt(m, m.init(0), (x, y), s, ks, AGTOptions(certificate=eng, progress=False, **kw))
        else:
            env = run_agt(m, m.init(0), x, y, s, ks, certificate=eng, progress=False, **kw)
        res[name] = {"lo": env.lo.cpu(), "hi": env.hi.cpu(), "nominal": env.nominal.cpu()}
        print(f"{name:24s} {time.perf_counter() - t:7.2f} s", flush=True)
    return res


def compare(a: dict, b: dict, rtol: float | None) -> list[str]:
    """Names (with the first differing field) where ``b`` differs from ``a``: bitwise, or beyond
    ``rtol`` relative to max(|a|, 1e-300)."""
    bad = []
    for name in a:
        if name not in b:
            continue
        for f in ("lo", "hi", "nominal"):
            u, v = a[name][f], b[name][f]
            if rtol is None:
                same = u.shape == v.shape and u.numpy().tobytes() == v.numpy().tobytes()
                if not same:
                    eq = bool(torch.equal(u, v))
                    bad.append(f"{name}.{f}" + (" (equal values, signed zeros differ)" if eq else
                                                f" (max |diff| {float((u - v).abs().max()):.3g})"))
            else:
                rel = ((u - v).abs() / torch.maximum(u.abs(), torch.full_like(u, 1e-300))).max()
                if not bool(rel <= rtol):
                    bad.append(f"{name}.{f} (max relative diff {float(rel):.3g})")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--save")
    ap.add_argument("--against")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rtol", type=float, default=None)
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this")
    a = ap.parse_args()
    res = compute(a.quick, a.device, a.only)
    if a.save:
        torch.save(res, a.save)
    if a.against:
        ref = torch.load(a.against)
        bad = compare(ref, res, a.rtol)
        print("identical" if not bad and a.rtol is None else
              "within rtol" if not bad else "DIFFERENT: " + "; ".join(bad))
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
