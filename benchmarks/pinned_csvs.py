"""The pinned CSVs of a refactor: six small runs whose CSVs must stay byte-identical when the
code is rearranged (issue 32's acceptance): agtr on linear and on sklearn's diabetes table, pate
on linear, ags on blobs with its baselines, dpsgd on sklearn's wine table, the hybrid on the
tiny offline encoder.  Each runs through the real command line in a fresh folder (its own cache).

    python benchmarks/pinned_csvs.py                  # print  <sha256>  <run>/<csv>  per CSV
    python benchmarks/pinned_csvs.py --save F         # write that listing to F
    python benchmarks/pinned_csvs.py --check F        # exit 1 when any CSV differs from F's
    python benchmarks/pinned_csvs.py --quick          # one small run twice: its CSVs must be identical

Record F on the commit before a refactor and check it on the commit after.  Columns that hold a
wall-clock measurement (``seconds`` and ``*_seconds``: PATE's and the hybrid's timings) are
blanked before hashing: they are the one part of a CSV that the same config and seed do not fix."""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_[0-9a-f]+$")

RUNS = {
    "agtr_linear": ["agtr", "dataset=linear", "train.steps=20", "staircase.k_max=8", "privacy.n_draws=20"],
    "agtr_diabetes": ["agtr", "dataset=csv", "dataset.path={d}/diabetes.csv", "dataset.target=target",
                      "dataset.output_range=10", "train.steps=20", "staircase.k_max=8", "privacy.n_draws=20"],
    "pate_linear": ["pate", "dataset=linear", "pate.shards=[2,4]", "pate.max_train=200", "train.steps=10",
                    "staircase.k_max=4", "privacy.n_draws=10"],
    "ags_blobs": ["ags", "dataset=blobs", "train.steps=10", "staircase.k_max=8", "privacy.n_draws=10"],
    "dpsgd_wine": ["dpsgd", "dataset=csv", "dataset.path={d}/wine.csv", "dataset.target=target",
                   "dataset.task=multiclass", "train.steps=20"],
}


def tables(d: Path) -> None:
    from sklearn.datasets import load_diabetes, load_wine
    load_diabetes(as_frame=True).frame.to_csv(d / "diabetes.csv", index=False)
    load_wine(as_frame=True).frame.to_csv(d / "wine.csv", index=False)


def hybrid(d: Path, env: dict) -> None:
    """The hybrid on the tiny encoder of tests/tiny_encoder.py and the sst2 fixture."""
    enc = d / "tiny_bert"
    subprocess.run([sys.executable, str(ROOT / "tests" / "tiny_encoder.py"), str(enc)], check=True, env=env)
    fx = ROOT / "tests" / "fixtures" / "hybrid" / "sst2"
    argv = ["hybrid", "dataset=sst2", "dataset.encoder=minilm", f"dataset.encoder_path={enc}",
            f"dataset.path={fx}", "dataset.max_seq_length=16", "dataset.n_test=16", "dataset.n_private=24",
            "privacy.epsilons=[2,4]", "lora.rank=2", "lora.alpha=2", "dpsgd.batch_size=8", "dpsgd.epochs=1",
            "head.pca_dim=2", "head.steps=10", "head.k_max=4", "head.n_draws=5", "dpsgd_head.batch_size=8",
            "dpsgd_head.epochs=2", "dpsgd_head.lrs=[1.0]", "dpsgd_head.n_runs=2",
            f"hybrid.work_dir={d / 'hybrid_work'}", "hybrid.size_sweep.n_private=[12]"]
    run("hybrid_tiny", argv, d, env)


def run(name: str, argv: list[str], d: Path, env: dict) -> None:
    argv = [a.replace("{d}", str(d)) for a in argv] + [f"out_root={d / 'out' / name}", "seed=0"]
    p = subprocess.run([sys.executable, "-m", "certdp.cli", *argv], env=env, cwd=d,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{name}: certdp {' '.join(argv)} exited {p.returncode}:\n{p.stderr[-3000:]}")


def timeless(f: Path) -> bytes:
    """The CSV's bytes with its wall-clock columns blanked (the header kept)."""
    import csv
    import io
    text = f.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text.encode()
    clock = [i for i, c in enumerate(rows[0]) if c == "seconds" or c.endswith("_seconds")]
    if not clock:
        return text.encode()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(rows[0])
    for r in rows[1:]:
        w.writerow(["" if i in clock else c for i, c in enumerate(r)])
    return buf.getvalue().encode()


def listing(d: Path) -> list[str]:
    rows = []
    for f in sorted((d / "out").rglob("*.csv")):
        rel = f.relative_to(d / "out")
        # the run's folder name carries a time stamp: keep every other part of the path
        key = "/".join(p for p in rel.parts if not STAMP.match(p))
        rows.append(f"{hashlib.sha256(timeless(f)).hexdigest()}  {key}")
    return sorted(rows, key=lambda r: r.split("  ", 1)[1])


def quick() -> None:
    lists = []
    for _ in range(2):
        with tempfile.TemporaryDirectory(prefix="certdp-pinned-") as t:
            d = Path(t)
            env = {**os.environ, "CERTDP_CACHE": str(d / "cache"),
                   "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            run("agtr_linear", ["agtr", "dataset=linear", "dataset.n_train=200", "train.steps=3",
                                "staircase.k_max=4", "privacy.n_draws=5"], d, env)
            lists.append(listing(d))
    if not lists[0] or lists[0] != lists[1]:
        sys.exit("the same config and seed gave different CSVs:\n" + "\n".join(sorted(set(lists[0]) ^ set(lists[1]))))
    print(f"{len(lists[0])} CSVs identical over two runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save")
    ap.add_argument("--check")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--quick", action="store_true", help="one small agtr run twice; exit 1 unless identical")
    a = ap.parse_args()
    if a.quick:
        quick()
        return
    only = set(a.only.split(",")) if a.only else None
    with tempfile.TemporaryDirectory(prefix="certdp-pinned-") as t:
        d = Path(t)
        env = {**os.environ, "CERTDP_CACHE": str(d / "cache"), "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        tables(d)
        for name, argv in RUNS.items():
            if only is None or name in only:
                print(f"running {name}", file=sys.stderr, flush=True)
                run(name, argv, d, env)
        if only is None or "hybrid_tiny" in only:
            print("running hybrid_tiny", file=sys.stderr, flush=True)
            hybrid(d, env)
        rows = listing(d)
    text = "\n".join(rows) + "\n"
    if not rows:
        sys.exit("no CSV was written")
    if a.save:
        Path(a.save).write_text(text)
    if a.check:
        want = Path(a.check).read_text().splitlines()
        if want != rows:
            diff = sorted(set(want) ^ set(rows), key=lambda r: r.split("  ", 1)[-1])
            print("CSVs differ:\n" + "\n".join(diff))
            sys.exit(1)
        print(f"{len(rows)} CSVs byte-identical")
    if not a.save and not a.check:
        print(text, end="")


if __name__ == "__main__":
    main()
