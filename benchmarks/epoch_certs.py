"""Acceptance measurements of the mini-batch certificates (per-epoch ledger, CROWN through time).

Sections (``--only a,b``; all by default), each printing one line per measurement:

* ``blobs``    l1 widths of T_1, T_2, T_4, T_8 on blobs at the paper's settings (linear hinge, 200
               private points, 200 SGD steps of batch 20, lr 0.5, gamma 0.05) for IBP per batch,
               IBP with the per-epoch ledger, CROWN-TT without and with record branches, and CPU s.
* ``blobs_alpha`` T_1 on the same run with CROWN-TT, record branches and the slope optimisation of
               the final bounds (``certificate.alpha_iters=20``), and its CPU s (about 3 min).
* ``linear``   the linear frequency ablation with IBP (``+preset/ablation=linear_frequency``):
               mean SS^beta at beta = 1/2 over the test points, per batch and per epoch, and the
               CPU seconds of AGT (median of 3 repeats, same process).
* ``california`` the California batch-size ablation at BS 250 (``certdp agtr``): mean SS^1/2 with
               and without the ledger (the full-batch run is unchanged by construction: one batch
               per epoch takes the per-batch code path; tests/test_epoch_ledger.py checks bitwise).
* ``ags``      ``certdp ags dataset=blobs`` at eps 20 and 100 (median accuracy over draws): IBP with the
               ledger (proven smoothness) on the preset radii and on radii 1..10, CROWN-TT (unproven)
               on radii 1..10, and the two matched DP-SGD arms.

    PYTHONPATH=$PWD python benchmarks/epoch_certs.py --out /tmp/epoch-certs [--only blobs,linear]
    PYTHONPATH=$PWD python benchmarks/epoch_certs.py --quick      # every section, small (CI, seconds)

``--quick`` runs every section (blobs_alpha with 2 slope iterations) on small sizes: fewer steps
and records, no repeats; its numbers check that the measurement still runs, not the claims.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from certdp import DTYPE
from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.data import load_dataset
from certdp.models import build_model
from certdp.training import TrainSettings


def cli(*args) -> None:
    r = subprocess.run([sys.executable, "-m", "certdp.cli", *args, "progress=false"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"certdp {' '.join(args)} failed:\n{r.stderr[-2000:]}")


QUICK = False


def _blobs():
    n = 60 if QUICK else 200
    ds = load_dataset({"name": "blobs", "n_features": 8, "n_train": n, "n_test": 10, "n_public": 10,
                       "separation": 2.563, "cluster_std": 1.0}, 0)
    x, y = torch.as_tensor(ds.x_train, dtype=DTYPE), torch.as_tensor(ds.y_train)
    st = TrainSettings(steps=12 if QUICK else 200, lr=0.5, clip=0.05, batch_size=20, seed=0)
    return x, y, build_model("linear", 8, loss="hinge"), st


def blobs():
    x, y, m, st = _blobs()
    for name, opts in [("ibp", {"substitutions": "per_batch"}), ("ibp", {"substitutions": "per_epoch"}),
                       ("crowntt", {"branch": 0}), ("crowntt", {"branch": "auto"})]:
        t = time.process_time()
        env = run_agt(m, m.init(0), (x, y), st, [1, 2, 4, 8],
                      AGTOptions(certificate=get_certificate(name, **opts), progress=False))
        w = [round(float(v), 3) for v in env.widths().sum(-1)]
        print(f"blobs {name} {opts}: T_1/T_2/T_4/T_8 l1 widths {w} ({time.process_time() - t:.1f} s CPU)", flush=True)


def blobs_alpha(iters: int = 20):
    x, y, m, st = _blobs()
    iters = 2 if QUICK else iters
    t = time.process_time()
    env = run_agt(m, m.init(0), (x, y), st, [1],
                  AGTOptions(certificate=get_certificate("crowntt", alpha_iters=iters), progress=False))
    print(f"blobs crowntt alpha_iters={iters}: T_1 l1 width {float(env.widths()[0].sum()):.4f} "
          f"({time.process_time() - t:.1f} s CPU)", flush=True)


def linear(out: Path):
    from omegaconf import OmegaConf

    from certdp.settings import config_dir
    dcfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "dataset" / "linear.yaml"))
    N = 2000 if QUICK else 40000
    dcfg["n_train"] = N
    ds = load_dataset(dcfg, 0)
    x, y = torch.as_tensor(ds.x_train, dtype=DTYPE), torch.as_tensor(ds.y_train, dtype=DTYPE)
    m = build_model("linear", x.shape[1], loss="mse")
    st = TrainSettings(steps=16, lr=0.1, clip=0.1, batch_size=5, seed=0)
    ks = list(range(1, 17)) + [N]
    small = [f"dataset.n_train={N}", "train.steps=16", "privacy.n_draws=5"] if QUICK else []
    for sub in ("per_batch", "per_epoch"):
        tag = f"lin_{sub}"
        cli("agtr", "dataset=linear", "+preset/ablation=linear_frequency", "certificate.name=ibp",
            f"certificate.substitutions={sub}", f"out_root={out}", f"run={tag}", "overwrite=true", *small)
        cert = pd.read_csv(out / "agtr" / "linear" / tag / "certificate.csv")
        ss = float(cert[cert.beta == 0.5].ss_mean.iloc[0])
        times = []
        for _ in range(1 if QUICK else 5):
            t = time.process_time()
            run_agt(m, m.init(0), (x, y), st, ks,
                    AGTOptions(certificate=get_certificate("ibp", substitutions=sub), progress=False))
            times.append(time.process_time() - t)
        print(f"linear ablation IBP {sub}: mean SS^1/2 {ss:.5f}, AGT CPU s {sorted(times)[len(times) // 2]:.3f} "
              f"(median of {len(times)}, 17 radii)", flush=True)


def california(out: Path):
    for sub in ("per_batch", "per_epoch"):
        tag = f"cal250_{sub}"
        t = time.time()
        small = ["train.steps=3", "privacy.n_draws=5", "staircase.k_max=4"] if QUICK else []
        cli("agtr", "dataset=california", "+preset/ablation=california_batch", "train.batch_size=250",
            f"certificate.substitutions={sub}", f"out_root={out}", f"run={tag}", "overwrite=true", *small)
        cert = pd.read_csv(out / "agtr" / "california" / tag / "certificate.csv")
        ss = float(cert[cert.beta == 0.5].ss_mean.iloc[0])
        print(f"california BS250 IBP {sub}: mean SS^1/2 {ss:.4f} ({time.time() - t:.0f} s wall)", flush=True)


def ags(out: Path):
    base = ["dataset=blobs", "privacy.epsilons=[20,100]", f"out_root={out}", "overwrite=true"]
    if QUICK:
        base += ["dataset.n_train=60", "train.steps=12", "privacy.n_draws=5"]
    dense = ["staircase.kind=range", "staircase.k_min=1", "staircase.k_max=10"]
    runs = [("ibp_preset", ["certificate=ibp", "ags.baselines=[dpsgd_matched,dpsgd_matched_basic]"]),
            ("ibp_dense", ["certificate=ibp", "ags.baselines=[]", *dense]),
            ("crowntt_dense", ["certificate=crowntt", "privacy.smoothness=unproven", "ags.baselines=[]", *dense])]
    for tag, extra in runs:
        t = time.time()
        cli("ags", *base, *extra, f"run={tag}")
        res = pd.read_csv(out / "ags" / "blobs" / tag / "results.csv")
        for _, r in res.sort_values(["arm", "regime", "epsilon"]).iterrows():
            mech = r.get("mechanism", "")
            print(f"ags blobs {tag}: {r.arm} {mech} {r.regime} eps={r.epsilon:g}: accuracy median "
                  f"{r.accuracy_median:.4f}" + (f" u={r.u:.3f}" if "u" in r and pd.notna(r.get("u")) else ""),
                  flush=True)
        print(f"ags blobs {tag}: {time.time() - t:.0f} s wall", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/epoch-certs")
    ap.add_argument("--only", default="blobs,blobs_alpha,linear,california,ags")
    ap.add_argument("--quick", action="store_true", help="every section on small sizes (seconds): CI")
    a = ap.parse_args()
    global QUICK
    QUICK = a.quick
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for sec in a.only.split(","):
        {"blobs": lambda: blobs(), "blobs_alpha": lambda: blobs_alpha(), "linear": lambda: linear(out), "california": lambda: california(out),
         "ags": lambda: ags(out)}[sec]()


if __name__ == "__main__":
    main()
