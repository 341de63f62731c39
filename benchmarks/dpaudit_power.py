"""The power of ``certdp dpaudit`` (docs/dpaudit.md), two parts.

``--table`` (the default): every shipped release (below the claim) and two planted bugs (above
it), each ``certdp dpaudit`` run end to end with its neighbour search.  Cases: the AGT-R releases
``cauchy`` and ``laplace`` on ``dataset=linear`` (N = 12, batches of 4, 6 steps -- the task of
issue 19 item 3 -- and N = 200 full batch); the AGS releases ``cauchy_p`` and ``laplace_p`` on
``dataset=blobs``; a Cauchy release with its noise scale halved (the mechanism's ``scale``
patched, narrow output range, small beta: exact loss 1.59 > 1); an IBP engine that drops the
k*gamma term of the substituted records (registered as ``test_drops_kgamma``), next to the sound
``ibp`` on the same settings.  Prints one markdown row per (case, release, eps, audited pair).

``--defaults``: the default search on the default ``dataset=linear`` (prediction) and
``dataset=blobs`` (parameter) settings, every candidate trained once (its time is the default
run's training time), then the draws and tests repeated over ``--seeds`` seeds of the draws for
three variants: the shipped code, the publishing function with half the noise scale (issue 28
item 3's bug) and every audited mechanism's ``scale`` halved (the docs' ``halved`` bug on the
defaults).  Prints, per (dataset, variant), how many seeds flag the run (exit status 1) and which
releases flag, and the seconds of training and of one seed's draws.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/dpaudit_power.py [--draws 1000000]
        [--cases linear12,linear200,blobs,halved,halved_ok,kgamma,kgamma_ibp] [--out /tmp/dpaudit-power]
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/dpaudit_power.py --defaults [--seeds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

LIN12 = ["dataset=linear", "dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4", "train.steps=6",
         "train.lr=0.3", "staircase.k_max=12"]
CASES = {
    "linear12": (None, ["dpaudit", *LIN12, "privacy.epsilons=[0.2,1,4]"]),
    "linear200": (None, ["dpaudit", "dataset=linear", "dataset.n_train=200", "dataset.n_test=20", "train.steps=5",
                         "staircase.k_max=8", "privacy.epsilons=[0.2,1,4]"]),
    "blobs": (None, ["dpaudit", "dataset=blobs", "dpaudit.query=parameter", "privacy.epsilons=[0.2,1,4]"]),
    "halved": ("halved", ["dpaudit", *LIN12, "dataset.output_range=[1.1,1.2]", "privacy.releases=[cauchy]",
                          "privacy.epsilons=[1]", "privacy.beta=0.02"]),
    "halved_ok": (None, ["dpaudit", *LIN12, "dataset.output_range=[1.1,1.2]", "privacy.releases=[cauchy]",
                         "privacy.epsilons=[1]", "privacy.beta=0.02"]),
    "kgamma": ("kgamma", ["dpaudit", *LIN12, "privacy.releases=[cauchy]", "privacy.epsilons=[4]",
                          "certificate.name=test_drops_kgamma", "certificate.substitutions=per_batch"]),
    "kgamma_ibp": (None, ["dpaudit", *LIN12, "privacy.releases=[cauchy]", "privacy.epsilons=[4]",
                          "certificate.name=ibp", "certificate.substitutions=per_batch"]),
}


def plant(bug: str | None) -> None:
    """Install a planted bug in this process (the child that runs one case)."""
    if bug == "halved":
        from certdp.privacy.mechanisms.prediction import CauchyTight
        full = CauchyTight.scale
        CauchyTight.scale = lambda self, s: full(self, s) / 2
    elif bug == "kgamma":
        from certdp.bounds import register
        from certdp.bounds.ibp import IBP
        from certdp.bounds.interval import Interval

        class DropsSubstitutionTerm(IBP):
            """IBP without the k*gamma term of the substituted records (a planted bug)."""

            name = "test_drops_kgamma"

            def batch_sum_bounds(self, model, boxes, x, y, *, subs, src=None, clip):
                s = super().batch_sum_bounds(model, boxes, x, y, subs=subs, src=src, clip=clip)
                kg = (subs.clamp(max=x.shape[0]).to(s.lo.dtype) * clip).unsqueeze(-1)
                return Interval(s.lo + kg, s.hi - kg)
        register(DropsSubstitutionTerm)
        # AGT's crossing guard (certdp.agt.check_boxes) refuses this engine's boxes on its own;
        # switched off here so that the table shows what the audit alone sees
        import certdp.agt
        certdp.agt.check_boxes = lambda *a, **k: None


@contextlib.contextmanager
def halved(variant: str):
    """The variant's planted bug, undone on exit: ``publish`` halves the noise scale inside the
    publishing function, ``mechanism`` halves every audited release's own ``scale``."""
    from certdp.certify import publish
    from certdp.privacy.mechanisms import REGISTRY
    saved = []
    if variant == "publish":
        original = publish.release
        saved.append((publish, "release", original))
        publish.release = lambda c, s, m, src, **kw: original(c, s / 2, m, src, **kw)
    elif variant == "mechanism":
        for name in ("cauchy", "laplace", "cauchy_p", "laplace_p"):
            cls = REGISTRY[name]
            saved.append((cls, "scale", cls.__dict__.get("scale", cls.scale)))
            cls.scale = (lambda f: lambda self, s: f(self, s) / 2)(cls.scale)
    try:
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)


DEFAULTS = {"linear": ["dataset=linear"], "blobs": ["dataset=blobs", "dpaudit.query=parameter"]}
QUICK_DEFAULTS = ["dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4", "train.steps=6",
                  "staircase.k_max=12", "dpaudit.placements=0", "dpaudit.magnitudes=[100]"]


def defaults(seeds: int, draws: int | None, extra: list[str]) -> None:
    """The ``--defaults`` table (module docstring)."""
    from certdp import results
    from certdp.methods import dpaudit
    from certdp.settings import config_dir
    from certdp.settings.compose import compose_and_parse
    results.register_resolvers()
    print("| dataset | variant | runs flagged | releases flagged (of seeds) | training s | draws s per seed |")
    print("|---|---|---|---|---|---|")
    for name, over in DEFAULTS.items():
        argv = [*over, *extra] + ([f"privacy.n_draws={draws}"] if draws else [])
        if name == "blobs" and extra:
            argv = [a for a in argv if not a.startswith(("dataset.n_test", "train.batch_size"))]
        s = compose_and_parse("dpaudit", argv, multirun=False, config_path=str(config_dir()), config_name="dpaudit")[0]
        t0 = time.perf_counter()
        au = dpaudit.prepare(s)
        t_train = time.perf_counter() - t0
        for variant in ("shipped", "publish", "mechanism"):
            flagged, per, t_draws = 0, {}, 0.0
            with halved(variant):
                for seed in range(seeds):
                    t0 = time.perf_counter()
                    rows = dpaudit.audit(au, seed=seed)
                    t_draws += time.perf_counter() - t0
                    flagged += any(r["violation"] for r in rows)
                    for r in rows:
                        key = f"{r['mechanism']}@{r['epsilon']:g}"
                        per[key] = per.get(key, 0) + bool(r["violation"])
            rel = ", ".join(f"{k} {v}" for k, v in per.items() if v) or "none"
            print(f"| {name} | {variant} | {flagged}/{seeds} | {rel} | {t_train:.0f} | {t_draws / seeds:.1f} |")


def table(args) -> None:
    import pandas as pd
    print("| case | release | eps | search | exact eps of the statistic | lower bound (95%) | verdict | pair |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        subprocess.run([sys.executable, __file__, "--one", name, "--draws", str(args.draws), "--out", args.out],
                       env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        runs = sorted(Path(args.out, name).rglob("results.csv"), key=lambda p: p.stat().st_mtime)
        if not runs:
            print(f"| {name} | (no results) |||||||")
            continue
        for _, r in pd.read_csv(runs[-1]).iterrows():
            verdict = "**above**" if r.violation else "below"
            print(f"| {name} | {r.mechanism} | {r.epsilon:g} | {r.search} | {r.statistic_epsilon:.4f} | "
                  f"{r.epsilon_lower_bound:.4f} | {verdict} | {r.record_D} vs {r.record_D_prime} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=None, help="draws per side (table: 1,000,000; defaults: the "
                                                            "default privacy.n_draws)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default="/tmp/dpaudit-power")
    ap.add_argument("--defaults", action="store_true", help="the default settings over --seeds seeds of the draws")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="one case, 2,000 draws, and the defaults' table on a tiny "
                                                         "dataset with 2 seeds (seconds): checks it runs")
    args = ap.parse_args()
    if args.one:                                   # the child: one case in this process
        bug, argv = CASES[args.one]
        plant(bug)
        from certdp import cli
        sys.argv = ["certdp", *argv, f"privacy.n_draws={args.draws}", f"out_root={args.out}/{args.one}",
                    "progress=false"]
        cli.main()
        return
    if args.quick:
        args.draws, args.cases = min(args.draws or 2000, 2000), "linear12"
        table(args)
        defaults(2, 2000, QUICK_DEFAULTS)
    elif args.defaults:
        defaults(args.seeds, args.draws, [])
    else:
        args.draws = args.draws or 1_000_000
        table(args)


if __name__ == "__main__":
    main()
