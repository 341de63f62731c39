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
    "kernel_race.py": ["--quick"],
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


def _frontier():
    import importlib.util
    spec = importlib.util.spec_from_file_location("frontier_mnist5", BENCH / "frontier_mnist5.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_frontier_page_holds_the_tables_generated_from_the_csvs():
    """docs/frontier.md has no placeholder left and its generated regions are exactly what
    ``frontier_mnist5.py --tables`` makes of benchmarks/results/frontier_*.csv (a hand edit of a
    cell, or a CSV changed without regenerating the page, fails); its plot exists."""
    import re

    import pandas as pd
    f = _frontier()
    text = f.PAGE.read_text()
    assert not re.search(r"^\s*(MNIST5_TABLES|BLOBS_TABLES|REMAINING|[A-Z][A-Z0-9]*_[A-Z0-9_]+)\s*$", text, re.M)
    blocks = f.page_blocks()
    assert f.stale_blocks(text, blocks) == [], "docs/frontier.md is stale: python benchmarks/frontier_mnist5.py --tables"
    assert f.render_page(text, blocks) == text
    assert "](img/frontier_mnist5.png)" in text and f.PLOT.is_file() and f.PLOT.stat().st_size > 0
    # every point of each CSV has its row, with the accuracy of each epsilon as the CSV has it
    for d in ("mnist5", "blobs"):
        df = pd.read_csv(f.RESULTS / f"frontier_{d}.csv")
        row = df[(df.arm == "cauchy_p")].iloc[-1]
        assert f"| {row.point} |" in blocks[d] and f"{row.accuracy_median:.3f} ({row.sets_S})" in blocks[d]


def test_frontier_page_check_catches_a_planted_edit():
    """The check fails when one table cell of the page is edited by hand (the planted bug), and
    when the page's markers are gone; rendering restores the generated page."""
    f = _frontier()
    text = f.PAGE.read_text()
    blocks = f.page_blocks()
    i = text.index("| d1024-t40 |")
    cell = text.index("0.877", i)
    planted = text[:cell] + "0.878" + text[cell + 5:]
    assert f.stale_blocks(planted, blocks) == ["mnist5"]
    assert f.render_page(planted, blocks) == text
    with pytest.raises(ValueError, match="markers"):
        f.stale_blocks(text.replace(f.END.format("blobs"), ""), blocks)
