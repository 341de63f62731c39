"""How good are the settings estimates of ``certdp figures --list`` (certdp/estimate.py)?

For every figure run that ``certdp figures`` completed under ``--out-root`` (its ``done.json``
holds the measured wall-clock seconds), print the estimate from the run's settings on this
machine beside the measurement, and the ratio; then the median and the range of the ratios.

    python benchmarks/estimate_accuracy.py --out-root /tmp/figq --profile quick
    python benchmarks/estimate_accuracy.py --quick        # two tiny figure runs, then the table

Run it on the machine that did the runs, under the same load (the rates are calibrated here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

TINY = """name: tiny_estimate
title: tiny
caption: two small AGT-R runs
plot: cond_table
runs:
  - id: lin
    command: agtr
    overrides: [dataset=linear, dataset.n_train=2000, dataset.n_test=200, train.steps=40, staircase.k_max=8,
                privacy.n_draws=5]
    sweep: {train.batch_size: [null, 500]}
"""


def table(out_root: Path, profile: str, experiments: Path | None, names: list[str]) -> list[tuple]:
    from certdp import figures as F
    from certdp.figure_times import run_estimate
    rows, seen = [], set()
    for name, e in F.load_experiments(experiments).items():
        if names and name not in names:
            continue
        for spec in e.specs(profile):
            r = F.resolve(spec, out_root)
            if r.key in seen or not r.is_done():
                continue
            seen.add(r.key)
            est = run_estimate(r)
            measured = float(r.done().get("seconds", 0.0))
            rows.append((name, spec.label(), est, measured))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-root", type=Path, help="the out_root of `certdp figures` runs")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--figures", default="", help="comma-separated figure names (default: all)")
    ap.add_argument("--quick", action="store_true", help="run two tiny figure runs first, then compare")
    a = ap.parse_args(argv)
    experiments = None
    if a.quick:
        from certdp import figures as F
        tmp = Path(tempfile.mkdtemp(prefix="estimate-accuracy-"))
        experiments = tmp / "experiments"
        experiments.mkdir()
        (experiments / "tiny_estimate.yaml").write_text(TINY)
        a.out_root = tmp / "out"
        F.figures(None, profile=a.profile, out_root=a.out_root, experiments=experiments, echo=lambda m: None,
                  plot_only=False)
    if a.out_root is None:
        ap.error("--out-root or --quick")
    rows = table(a.out_root, a.profile, experiments, [n for n in a.figures.split(",") if n])
    if not rows:
        print(f"no finished figure run under {a.out_root} for profile {a.profile}")
        return 1
    print(f"{'figure':<22} {'run':<58} {'estimate':>10} {'measured':>10} {'ratio':>7}")
    ratios = []
    for name, label, est, measured in rows:
        e = "-" if est is None else f"{'>=' if est.unmodelled else ''}{est.seconds:.0f} s"
        ratio = "" if est is None or measured <= 0 else f"{est.seconds / measured:.2f}"
        if ratio and not est.unmodelled:
            ratios.append(est.seconds / measured)
        print(f"{name:<22} {label[:58]:<58} {e:>10} {measured:>8.0f} s {ratio:>7}")
    if ratios:
        print(f"estimate / measured over {len(ratios)} fully modelled runs: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f} - {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
