"""Benchmarks cannot rot: every script in benchmarks/ runs in its ``--quick`` form (small shapes,
seconds) and exits 0 with its report on stdout.  The numbers are not checked here (timing
belongs to the benchmarks, not to tests); the lean path's bit-identity is tests/test_aggregate.py, test_ibp.py and test_crown.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def _run(script, *args, tmp_path, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=timeout)
    assert r.returncode == 0, f"{script} --quick failed:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_every_benchmark_has_a_quick_form():
    scripts = sorted(p.name for p in BENCH.glob("*.py"))
    for name in scripts:
        assert "--quick" in (BENCH / name).read_text(), f"benchmarks/{name} has no --quick form"
    assert set(scripts) <= set(QUICK) | {"epoch_certs.py"}, "a benchmark without a quick test"


QUICK = {
    "pinned_csvs.py": ["--quick"],
    "bench_table.py": ["--quick", "--devices", "cpu"],
    "bench_agt.py": ["--quick"],
    "containment.py": ["--quick", "--models", "linear,softmax"],
    "identity_check.py": ["--quick", "--only", "blobs"],
    "before_after.py": ["--quick"],
    "dpaudit_power.py": ["--quick", "--out", "dpaudit"],
    "gpu_profile_step.py": ["--quick", "--device", "cpu"],
    "estimate_accuracy.py": ["--quick"],
    "roofline.py": ["--quick", "--shapes", "mnist5,blobs"],
    "frontier_mnist5.py": ["--quick"],
    "gaplp_frontier.py": ["--quick"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(QUICK))
def test_quick_benchmark_runs(script, tmp_path):
    out = _run(script, *QUICK[script], tmp_path=tmp_path)
    assert out.strip()


@pytest.mark.slow
def test_bench_table_prints_one_table(tmp_path):
    out = _run("bench_table.py", "--quick", "--devices", "cpu", "--only", "linear,blobs", tmp_path=tmp_path)
    lines = [ln for ln in out.splitlines() if ln.startswith(("linear", "blobs"))]
    assert len(lines) == 2 and all(" cpu " in ln for ln in lines)


@pytest.mark.slow
def test_epoch_certs_quick_runs_every_section(tmp_path):
    out = _run("epoch_certs.py", "--quick", "--out", str(tmp_path / "ec"), tmp_path=tmp_path)
    for section in ("blobs ibp", "blobs crowntt alpha_iters", "linear ablation", "california BS250", "ags blobs"):
        assert section in out


@pytest.mark.slow
def test_frontier_quick_reports_every_epsilon_and_the_term_that_sets_s(tmp_path):
    """The frontier's quick form: one row per (point, release, epsilon) with the AGT time, the
    term that sets S (a radius or the cover) and matched DP-SGD beside it."""
    import pandas as pd
    _run("frontier_mnist5.py", "--quick", tmp_path=tmp_path)
    df = pd.read_csv(tmp_path / "frontier_quick.csv")
    ags = df[df.arm.isin(["cauchy_p", "laplace_p"])]
    assert set(ags.point) == {"d8", "g64"} and set(ags.epsilon) == {5, 10}
    assert ags.sets_S.str.match(r"^(cover|r=\d+)$").all() and (ags.agt_cpu_s > 0).all()
    assert (df.arm == "DP-SGD matched (pure)").any()
