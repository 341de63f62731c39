"""The measured frontier of proven private learning (``certdp ags``) on mnist5 (and blobs): for each
point of a sweep over the choices that decide cost and accuracy under the smoothness proof --
engine (IBP tau, IBP top-k, CROWN; the per-epoch ledger where batches are used), the layout of
the radii (dense 1..m, geometric, dense then geometric; the last piece N or the global cover), m,
steps and batch size -- the AGT time, which staircase term sets the smooth sensitivity S (a
radius r_j, or the cover: the ceiling T_N / the global bound), and the median accuracy of the
proven releases at each epsilon beside the non-private model and matched DP-SGD.

Every point runs the shipped AGS runner (:func:`certdp.methods.ags.run`) on the composed settings
``certdp ags dataset=<name> <overrides>``, in this process; only the AGT phase
(:func:`certdp.certify.certify_window`) is timed (wall and CPU seconds, with the load average).
Matched DP-SGD depends on the training settings only, so it runs once per (steps, batch size).

    python benchmarks/frontier_mnist5.py                       # the mnist5 sweep (about an hour, 2 idle cores)
    python benchmarks/frontier_mnist5.py --dataset blobs       # the blobs sweep (minutes)
    python benchmarks/frontier_mnist5.py --points d128,d256    # some points
    python benchmarks/frontier_mnist5.py --list                # the points and their overrides
    python benchmarks/frontier_mnist5.py --quick               # two tiny points on the test fixture (CI)
    python benchmarks/frontier_mnist5.py --tables              # docs/frontier.md's tables and plot from the CSVs

Writes ``benchmarks/results/frontier_<dataset>.csv`` (one row per point, release and epsilon)
and prints a markdown table (``--md FILE`` also writes it); ``--plot FILE`` draws accuracy
against AGT time.  The numbers are the researcher's report (seeded noise), not a release.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import time
from pathlib import Path

import pandas as pd

EPSILONS = [1, 2, 5, 10, 20, 50]
COMMON = ["device=cpu", f"privacy.epsilons=[{','.join(map(str, EPSILONS))}]", "ags.baselines=[]"]
IBP_TAU = ["certificate=ibp", "certificate.aggregation=tau"]


def dense(m: int, *, n: bool = True) -> list[str]:
    return ["staircase.kind=range", "staircase.k_min=1", f"staircase.k_max={m}", f"staircase.include_n={str(n).lower()}"]


def geometric(k_max: int, *, until: int = 1, ratio: float = 2.0, n: bool = True) -> list[str]:
    return ["staircase.kind=geometric", "staircase.k_min=1", f"staircase.k_max={k_max}", f"staircase.ratio={ratio}",
            f"staircase.dense_until={until}", f"staircase.include_n={str(n).lower()}"]


def steps(t: int, b: int | None = None) -> list[str]:
    return [f"train.steps={t}", f"train.batch_size={'null' if b is None else b}"]


# name -> overrides (after COMMON); the engine, the radii, the training.  mnist5: N = 28,596, P = 45,
# lr 2, gamma 0.02, lambda 0.6 (the preset); the cover is P * 2 gamma lr / (1 - lambda) = 9.
MNIST5 = {
    # dense radii 1..m and N, IBP tau, full batch: m and steps (lambda = 0.6: the envelopes and the
    # model converge geometrically, 0.6^40 ~ 1e-9, so a few dozen steps reach the 1,000-step boxes)
    **{f"d{m}-t40": IBP_TAU + dense(m) + steps(40) for m in (4096, 2048, 1024, 512)},
    "d4096-t60": IBP_TAU + dense(4096) + steps(60),
    "d256-t60": IBP_TAU + dense(256) + steps(60),
    **{f"d{m}-t150": IBP_TAU + dense(m) + steps(150) for m in (16, 32, 64, 128, 256)},
    **{f"d128-t{t}": IBP_TAU + dense(128) + steps(t) for t in (30, 60)},
    "d4096-t20": IBP_TAU + dense(4096) + steps(20),
    # the last piece: the global cover instead of N
    "d1024-t40-global": IBP_TAU + dense(1024, n=False) + steps(40),
    # geometric and dense-then-geometric layouts (as many radii as d16 / d256)
    "g4096-t60": IBP_TAU + geometric(4096) + steps(60),
    "d256g4096-t60": IBP_TAU + geometric(4096, until=256) + steps(60),
    "d16g4096-t60": IBP_TAU + geometric(4096, until=16) + steps(60),
    # other engines: exact top-k, CROWN (the former CPU default: 17 radii)
    "topk-d256-t60": ["certificate=ibp", "certificate.aggregation=topk"] + dense(256) + steps(60),
    "crown-d16-t30": ["certificate=crown"] + dense(16) + steps(30),
    # mini-batches: the per-epoch ledger (IBP tau), as many records seen as 40 full steps
    "ledger-b2860-d1024-t400": IBP_TAU + dense(1024) + steps(400, 2860),
    "ledger-b7149-d1024-t160": IBP_TAU + dense(1024) + steps(160, 7149),
}
# blobs: N = 200, P = 9, hinge.  The paper's training (the first block: batch 20, 200 steps, lr 0.5,
# gamma 0.05, lambda 1) has the cover P * 2 gamma lr * T = 90; the second block adds a contraction
# (lambda < 1: the envelopes converge instead of growing with T), full batch or batch 20.
PAPER_BLOBS = ["train.steps=200", "train.batch_size=20", "train.contraction=1.0"]
BLOBS = {
    "list1248": ["certificate=ibp", "staircase.kind=list", "staircase.values=[1,2,4,8]", "staircase.include_n=false"]
    + PAPER_BLOBS,
    **{f"d{m}": IBP_TAU + dense(m) + PAPER_BLOBS for m in (8, 16, 64, 199)},
    "d64-topk": ["certificate=ibp", "certificate.aggregation=topk"] + dense(64) + PAPER_BLOBS,
    "g199": IBP_TAU + geometric(199) + PAPER_BLOBS,
    "d32g199": IBP_TAU + geometric(199, until=32, ratio=1.25) + PAPER_BLOBS,
    "d199-global": IBP_TAU + dense(199, n=False) + PAPER_BLOBS,
    "d199-crown": ["certificate=crown"] + dense(199) + PAPER_BLOBS,
    "d64-full": IBP_TAU + dense(64) + ["train.steps=200", "train.batch_size=null", "train.contraction=1.0"],
    **{f"lam{lam}-b20-t{t}-d64": IBP_TAU + dense(64) + [f"train.steps={t}", "train.batch_size=20",
                                                          f"train.contraction={lam}"]
       for lam, t in ((0.9, 200), (0.9, 100), (0.8, 200), (0.95, 200))},
    **{f"lam{lam}-full-t{t}-d64": IBP_TAU + dense(64) + [f"train.steps={t}", "train.batch_size=null",
                                                           f"train.contraction={lam}"]
       for lam, t in ((0.9, 100), (0.9, 50), (0.8, 100), (0.95, 100))},
    "lam0.9-full-t100-d16": IBP_TAU + dense(16) + ["train.steps=100", "train.batch_size=null", "train.contraction=0.9"],
    "lam0.9-full-t100-d199": IBP_TAU + dense(199) + ["train.steps=100", "train.batch_size=null",
                                                      "train.contraction=0.9"],
    "lam0.9-full-t100-g199": IBP_TAU + geometric(199) + ["train.steps=100", "train.batch_size=null",
                                                          "train.contraction=0.9"],
    "lam0.9-full-t100-crown": ["certificate=crown"] + dense(64) + ["train.steps=100", "train.batch_size=null",
                                                                   "train.contraction=0.9"],
}
QUICK = {"d8": IBP_TAU + dense(8) + steps(5), "g64": IBP_TAU + geometric(64) + steps(5)}
SETS = {"mnist5": MNIST5, "blobs": BLOBS}


@contextlib.contextmanager
def timed_agt(clock: dict):
    """Time :func:`certdp.certify.certify_window` (the AGT pass and its staircase) inside the AGS runner."""
    from certdp.methods import ags
    inner = ags.certify_window

    def wrapper(*a, **kw):
        w, c = time.perf_counter(), time.process_time()
        try:
            return inner(*a, **kw)
        finally:
            clock["wall"] = clock.get("wall", 0.0) + time.perf_counter() - w
            clock["cpu"] = clock.get("cpu", 0.0) + time.process_time() - c
            clock["load"] = os.getloadavg()[0]
    ags.certify_window = wrapper
    try:
        yield clock
    finally:
        ags.certify_window = inner


def settings_of(dataset: str, overrides: list[str]):
    from certdp import results
    from certdp.settings import config_dir
    from certdp.settings.compose import compose_and_parse
    results.register_resolvers()
    (st,) = compose_and_parse("ags", [f"dataset={dataset}", *overrides], multirun=False, config_path=str(config_dir()),
                              config_name="ags")
    return st


def setting_term(cert: pd.DataFrame, beta: float) -> str:
    """Which term sets S = max_j e^{-beta phi_j} a_bar_j: ``r=<radius>`` or ``cover``."""
    b = max(beta - 1e-12, 0.0)
    vals = [math.exp(-b * p) * a for p, a in zip(cert.phi, cert.a_bar)]
    j = max(range(len(vals)), key=vals.__getitem__)
    return "cover" if cert.source.iloc[j] != "computed" else f"r={int(cert.k.iloc[j])}"


def run_point(dataset: str, name: str, overrides: list[str], *, extra: list[str], baselines: bool) -> list[dict]:
    from certdp.methods import ags
    ov = COMMON + overrides + extra + (["ags.baselines=[dpsgd_matched]"] if baselines else [])
    st = settings_of(dataset, ov)
    clock: dict = {}
    with timed_agt(clock):
        frames = ags.run(st, progress=False)
    res, cert = frames["results"], frames["certificate"]
    ks = st.staircase.radii(int(res.n_train.iloc[0]))
    base = {"dataset": dataset, "point": name, "engine": st.certificate.name,
            "aggregation": st.certificate.option("aggregation", "") if st.certificate.name == "ibp" else "",
            "radii": st.staircase.kind if st.staircase.kind != "geometric" or st.staircase.dense_until <= 1
            else "dense+geometric",
            "n_radii": len(ks), "k_max_computed": max(k for k in ks if k < int(res.n_train.iloc[0])) if len(ks) > 1 else ks[0],
            "last": "N" if st.staircase.include_n else "global",
            "steps": st.train.steps, "batch_size": st.train.batch_size or int(res.n_train.iloc[0]),
            "contraction": st.train.contraction,
            "agt_wall_s": round(clock.get("wall", float("nan")), 2), "agt_cpu_s": round(clock.get("cpu", float("nan")), 2),
            "load": round(clock.get("load", float("nan")), 1),
            "nonprivate": float(res.nonprivate_accuracy.iloc[0]), "overrides": " ".join(overrides + extra)}
    rows = []
    for _, r in res.iterrows():
        if r.arm == "AGS":
            rows.append({**base, "arm": r.mechanism, "epsilon": r.epsilon, "accuracy_median": r.accuracy_median,
                         "u": r.u, "beta": r.beta, "sets_S": setting_term(cert, float(r.beta))})
        else:
            rows.append({**base, "arm": r.arm + f" ({r.regime})", "epsilon": r.epsilon,
                         "accuracy_median": r.accuracy_median, "u": float("nan"), "beta": float("nan"), "sets_S": ""})
    return rows


def preset_contraction(dataset: str) -> float | None:
    """The contraction of ``configs/preset/ags/<dataset>.yaml`` (what a point without a
    ``train.contraction`` override trained with; rows written before the CSV had the column)."""
    import yaml
    f = Path(__file__).resolve().parent.parent / "configs" / "preset" / "ags" / f"{dataset}.yaml"
    lam = (yaml.safe_load(f.read_text()) or {}).get("train", {}).get("contraction") if f.exists() else None
    return float(lam) if lam is not None else None


def _training(df: pd.DataFrame) -> pd.Series:
    """(steps, batch size, contraction) of each row: what matched DP-SGD depends on."""
    lam = df.overrides.str.extract(r"train\.contraction=([\d.]+)")[0].astype(float)
    if "contraction" in df:
        lam = df.contraction.astype(float).fillna(lam)
    if lam.isna().any() and (pre := preset_contraction(str(df.dataset.iloc[0]))) is not None:
        lam = lam.fillna(pre)
    return (df.steps.astype(str) + ", b " + df.batch_size.astype(str) + ", lambda "
            + lam.map(lambda x: "?" if pd.isna(x) else f"{x:g}")).astype(object)


def table(df: pd.DataFrame, arm: str = "cauchy_p") -> str:
    """One line per point: AGT time, radii, and per epsilon the median accuracy with the term that
    sets S; matched DP-SGD (pure beside ``cauchy_p``, approx beside ``laplace_p``) per epsilon for
    each training setting."""
    df = df.assign(training=_training(df))
    regime = "approx" if arm.startswith("laplace") else "pure"
    dp = df[df.arm == f"DP-SGD matched ({regime})"]
    eps = sorted(df.epsilon.unique())
    head = ("| point | engine | radii (m, layout, last) | training (steps, b, lambda) | AGT s (wall / CPU, load) | "
            + " | ".join(f"eps={e:g}" for e in eps) + " | non-private |")
    lines = [head, "|" + "---|" * (6 + len(eps))]
    for name, g in df[df.arm == arm].groupby("point", sort=False):
        r = g.iloc[0]
        cells = []
        for e in eps:
            x = g[g.epsilon == e]
            cells.append(f"{x.accuracy_median.iloc[0]:.3f} ({x.sets_S.iloc[0]})" if len(x) else "-")
        agg = f" {r.aggregation}" if isinstance(r.aggregation, str) and r.aggregation else ""
        lines.append(f"| {name} | {r.engine}{agg} | {r.n_radii}, {r.radii}, {r['last']} | {r.training} | "
                     f"{r.agt_wall_s:g} / {r.agt_cpu_s:g} ({r.load:g}) | " + " | ".join(cells) + f" | {r.nonprivate:.3f} |")
    for t, g in dp.groupby("training", sort=False):
        cells = [f"{g[g.epsilon == e].accuracy_median.iloc[0]:.3f}" if (g.epsilon == e).any() else "-" for e in eps]
        lines.append(f"| DP-SGD matched ({regime}) | | | {t} | | " + " | ".join(cells) + " | |")
    return "\n".join(lines)


PANELS = [("cauchy_p", 5), ("cauchy_p", 10), ("laplace_p", 2), ("laplace_p", 5)]


def plot(df: pd.DataFrame, path: str, panels=PANELS) -> None:
    """Median accuracy of the proven release against AGT CPU seconds, one panel per (release, eps),
    with matched DP-SGD (the best training setting) and the non-private accuracy as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(arm, e) for arm, e in panels if ((df.arm == arm) & (df.epsilon == e)).any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), sharey=True, squeeze=False)
    for ax, (arm, e) in zip(axes[0], panels):
        g = df[(df.arm == arm) & (df.epsilon == e)]
        for eng, h in g.groupby(g.engine + " " + g.aggregation.fillna("").astype(str)):
            ax.scatter(h.agt_cpu_s, h.accuracy_median, label=eng.strip(), s=16)
        for _, r in g.iterrows():
            ax.annotate(r.point, (r.agt_cpu_s, r.accuracy_median), fontsize=5, alpha=0.7)
        regime = "pure" if arm == "cauchy_p" else "approx"
        dp = df[(df.arm == f"DP-SGD matched ({regime})") & (df.epsilon == e)]
        if len(dp):
            ax.axhline(float(dp.accuracy_median.max()), ls="--", c="gray", lw=0.8, label="DP-SGD matched")
        ax.axhline(float(g.nonprivate.max()), ls=":", c="k", lw=0.8, label="non-private")
        ax.set_xscale("log")
        ax.set_title(f"{df.dataset.iloc[0]}: {arm}, eps = {e:g}", fontsize=9)
        ax.set_xlabel("AGT CPU seconds (one thread)")
    axes[0][0].set_ylabel("median test accuracy (proven)")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# ---------------------------------------------------------------- the docs page, generated from the CSVs
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
PAGE = ROOT / "docs" / "frontier.md"
PLOT = ROOT / "docs" / "img" / "frontier_mnist5.png"
BLOCKS = ("mnist5", "blobs", "remaining")
ASKED = {"mnist5": 12, "blobs": 6}          # the proven points issue 29 asks the frontier to show
BEGIN = "<!-- frontier:{} (generated from benchmarks/results by: python benchmarks/frontier_mnist5.py --tables) -->"
END = "<!-- /frontier:{} -->"


def _remaining(frames: dict[str, pd.DataFrame]) -> str:
    lines = []
    for d, df in frames.items():
        done = set(df.point)
        left = [k for k in SETS[d] if k not in done]
        head = (f"* **{d}**: {len(done & set(SETS[d]))} of the sweep's {len(SETS[d])} points measured "
                f"(the project asks for at least {ASKED[d]})")
        if not left:
            lines.append(head + "; none left.")
            continue
        lines.append(head + f"; {len(left)} left: " + ", ".join(f"`{k}`" for k in left) + ".")
        lines.append(f"  `python benchmarks/frontier_mnist5.py --dataset {d} --threads 1 --append "
                     f"--points {','.join(left)}`")
    return "\n".join(lines)


def page_blocks(results: Path = RESULTS) -> dict[str, str]:
    """The generated regions of docs/frontier.md, from the frontier CSVs alone."""
    frames = {d: pd.read_csv(results / f"frontier_{d}.csv") for d in ("mnist5", "blobs")}
    m = frames["mnist5"]
    return {"mnist5": "`cauchy_p` (pure ε-DP), beside matched DP-SGD (pure):\n\n" + table(m, "cauchy_p")
            + "\n\n`laplace_p` ((ε, 10⁻⁵)-DP), beside matched DP-SGD (approx):\n\n" + table(m, "laplace_p"),
            "blobs": table(frames["blobs"], "cauchy_p"),
            "remaining": _remaining(frames)}


def _span(text: str, name: str) -> tuple[int, int]:
    b, e = BEGIN.format(name), END.format(name)
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i or text.count(b) != 1 or text.count(e) != 1:
        raise ValueError(f"{PAGE.name}: the markers of the generated block {name!r} are missing or repeated")
    return i + len(b), j


def render_page(text: str, blocks: dict[str, str]) -> str:
    """``text`` with every generated region replaced by its block (between its two markers)."""
    for name in BLOCKS:
        i, j = _span(text, name)
        text = text[:i] + "\n" + blocks[name] + "\n" + text[j:]
    return text


def stale_blocks(text: str, blocks: dict[str, str]) -> list[str]:
    """The generated regions of ``text`` that differ from ``blocks`` (empty: the page is current)."""
    return [name for name in BLOCKS if text[slice(*_span(text, name))] != "\n" + blocks[name] + "\n"]


def write_page(check: bool) -> int:
    blocks = page_blocks()
    text = PAGE.read_text()
    if check:
        stale = stale_blocks(text, blocks)
        if stale:
            print(f"{PAGE} is stale in {', '.join(stale)}: python benchmarks/frontier_mnist5.py --tables", file=sys.stderr)
        return 1 if stale else 0
    PAGE.write_text(render_page(text, blocks))
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    plot(pd.read_csv(RESULTS / "frontier_mnist5.csv"), str(PLOT))
    print(f"wrote {PAGE} and {PLOT}")
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="mnist5", choices=sorted(SETS))
    ap.add_argument("--points", default=None, help="comma-separated point names (default: all)")
    ap.add_argument("--draws", type=int, default=None, help="privacy.n_draws (default: the preset's)")
    ap.add_argument("--out", default=None, help="CSV (default benchmarks/results/frontier_<dataset>.csv)")
    ap.add_argument("--md", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--append", action="store_true", help="keep the points already in --out")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, the machine's cores)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--quick", action="store_true", help="two tiny points on the tiny MNIST test fixture, eager, 3 draws")
    ap.add_argument("--tables", action="store_true",
                    help="rewrite the generated tables of docs/frontier.md and its plot from the CSVs (nothing runs)")
    ap.add_argument("--check", action="store_true", help="with --tables: exit 1 if the page differs, write nothing")
    a = ap.parse_args()
    if a.tables:
        sys.exit(write_page(a.check))
    logging.getLogger("certdp").setLevel(logging.WARNING)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    points = QUICK if a.quick else SETS[a.dataset]
    if a.list:
        for k, v in points.items():
            print(f"{k}: {' '.join(v)}")
        return
    names = a.points.split(",") if a.points else list(points)
    extra = [f"privacy.n_draws={a.draws}"] if a.draws else []
    if a.quick:
        os.environ["CERTDP_NO_COMPILE"] = "1"
        tiny = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mnist_tiny.pkl.gz"   # offline
        extra += ["privacy.n_draws=3", f"dataset.path={tiny}", "dataset.n_public=10", "dataset.public_split=[5,5]",
                  "privacy.epsilons=[5,10]", "ags.baseline_draws=1"]
    out = Path(a.out or ("frontier_quick.csv" if a.quick else
                         Path(__file__).parent / "results" / f"frontier_{a.dataset}.csv"))
    old = pd.read_csv(out) if a.append and out.exists() else None
    rows, trained = [], set()
    for name in names:
        if name not in points:
            sys.exit(f"unknown point {name!r}; allowed: {', '.join(points)}")
        ov = points[name]
        key = tuple(o for o in ov + extra if o.startswith("train."))
        rows += run_point(a.dataset, name, ov, extra=extra, baselines=key not in trained)
        trained.add(key)
        done = pd.DataFrame(rows)
        save = done if old is None else pd.concat([old[~old.point.isin(done.point.unique())], done], ignore_index=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        save.to_csv(out, index=False)                      # after every point: a cut sweep keeps its points
        print(f"[{name}] AGT {done.agt_wall_s.iloc[-1]} s wall, {done.agt_cpu_s.iloc[-1]} s CPU, load {done.load.iloc[-1]}",
              file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    if old is not None:
        df = pd.concat([old[~old.point.isin(df.point.unique())], df], ignore_index=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    md = table(df)
    print(md)
    if a.md:
        Path(a.md).write_text(md + "\n")
    if a.plot:
        plot(df, a.plot)


if __name__ == "__main__":
    main()
