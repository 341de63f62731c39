"""The paper side by side (certdp.reproduction): the paper's values recorded in the experiment
files, compared with the numbers the runs' CSVs hold, in outputs/figures/reproduction.{csv,md},
drawn as markers labelled "paper" and shown in the gallery, all without running anything."""

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from certdp import figures as F
from certdp import reproduction as R
from certdp.errors import ConfigError
from certdp.plots import paper as P

REPO = Path(__file__).resolve().parent.parent

TINY = """
name: tiny_feasibility
label: fig:cond_table
title: Tiny feasibility
plot: cond_table
caption: A tiny version of the feasibility figure.
runs:
  - id: feasibility
    command: feasibility
    overrides: ['feasibility.c=[1,2]', feasibility.confidence.step=0.05]
    expect: [results, peaks]
paper:
  - id: pure_peak
    claim: "Pure DP, c = 1: the peak ratio"
    source: "Sec. 5.1.1: 'rho < 0.117'"
    value: 0.117
    tolerance: {abs: 0.002}
    profiles: [quick, paper]
    proven: {run: feasibility, csv: peaks, where: {regime: pure, c: 1, window: grid}, col: peak_rho}
    point: {panel: "(a)", x: 0.4, y: 0.117}
  - id: below_unity
    claim: "Approx. DP, c = 1: where the ratio drops below 1"
    source: "Sec. 5.1.1: 'past 1 - alpha ~ 0.995'"
    value: 0.9
    tolerance: {abs: 0.01}
    profiles: [quick, paper]
    proven: {first: {lt: [{run: feasibility, where: {regime: approx, c: 1, delta: 1.0e-5}, col: rho, by: confidence}, 1.0]}}
    construction: {label: "delta = 1e-3", where: {delta: 1.0e-3}}
    deviation: deviations.md#the-feasibility-figures-delta
    point: {panel: "(b)", x: 0.9, y: 1.0}
  - id: paper_only
    claim: "A value the quick profile shows the shape of only"
    source: "App. A"
    value: 2
    tolerance: {rel: 0.1}
    proven: {ratio: [{run: feasibility, where: {regime: pure, c: 1, confidence: 0.5}, col: rho}, {run: feasibility, where: {regime: pure, c: 2, confidence: 0.5}, col: rho}]}
  - id: off_grid
    claim: "A value at a confidence the quick grid lacks"
    source: "App. B"
    value: 0.1
    tolerance: {abs: 0.01}
    profiles: [quick, paper]
    proven: {run: feasibility, where: {regime: pure, c: 1, confidence: 0.123}, col: rho}
    needs: "the paper profile"
"""


def _fake_feasibility(run_dir: Path, *, peak: float = 0.117, cross: float = 0.9):
    """A finished feasibility run whose CSVs hold chosen numbers (the plot and the table read only these)."""
    conf = np.round(np.arange(0.05, 1.0, 0.05), 2)
    rows = []
    for c in (1, 2):
        for x in conf:
            rows.append({"regime": "pure", "c": c, "delta": 0.0, "confidence": x, "rho": peak / c * (1 - abs(x - 0.4))})
            for delta in (1e-5, 1e-3):
                knee = cross if delta == 1e-5 else 0.7
                rows.append({"regime": "approx", "c": c, "delta": delta, "confidence": x,
                             "rho": (2.0 if x < knee else 0.5) / c})
    run_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run_dir / "results.csv", index=False)
    pd.DataFrame([{"regime": "pure", "c": c, "delta": 0.0, "window": "grid", "peak_confidence": 0.4,
                   "peak_rho": peak / c} for c in (1, 2)]).to_csv(run_dir / "peaks.csv", index=False)
    (run_dir / "done.json").write_text(json.dumps({"seconds": 1.0}))


@pytest.fixture()
def tiny(tmp_path):
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "tiny_feasibility.yaml").write_text(TINY)
    out = tmp_path / "out"
    exp = F.load_experiments(d)["tiny_feasibility"]
    (r,) = [F.resolve(s, out) for s in exp.specs("quick")]
    _fake_feasibility(r.run_dir)
    return d, out, r


def _table(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "figures" / "reproduction.csv", keep_default_na=False).set_index("id")


def test_the_table_reads_the_runs_csvs_and_follows_them(tiny):
    d, out, run = tiny
    log: list[str] = []
    F.figures(None, profile="quick", out_root=out, experiments=d, plot_only=True, echo=log.append)
    t = _table(out)
    assert set(R.COLUMNS) - {"id"} <= set(t.columns)
    assert t.loc["pure_peak", "certdp_proven"] == "0.117" and t.loc["pure_peak", "verdict"] == "reproduced"
    assert t.loc["pure_peak", "runs"] == str(run.run_dir.relative_to(out)) and t.loc["pure_peak", "profile"] == "quick"
    assert t.loc["below_unity", "certdp_proven"] == "0.9" and t.loc["below_unity", "verdict"] == "reproduced"
    assert t.loc["below_unity", "certdp_paper_construction"] == "0.7"           # the delta = 1e-3 curve
    assert t.loc["paper_only", "verdict"] == "shape only (quick profile)"
    assert t.loc["off_grid", "verdict"] == "not run" and "no rows" in t.loc["off_grid", "reason"]
    assert all(v in R.VERDICTS for v in t.verdict)
    assert any("reproduction table" in m and "4 paper value(s)" in m for m in log), log

    # the table follows the CSV: change a run's numbers, compare again (nothing runs)
    _fake_feasibility(run.run_dir, peak=0.3, cross=0.6)
    log.clear()
    F.figures(None, profile="quick", out_root=out, experiments=d, plot_only=True, echo=log.append)
    assert not any(m.startswith("[figures] run ") for m in log)
    t = _table(out)
    assert t.loc["pure_peak", "certdp_proven"] == "0.3" and t.loc["pure_peak", "verdict"] == "differs"
    assert t.loc["pure_peak", "reason"] == "no documented reason (not declared)"
    assert t.loc["below_unity", "certdp_proven"] == "0.6" and t.loc["below_unity", "verdict"] == "differs"
    assert t.loc["below_unity", "deviation"] == "deviations.md#the-feasibility-figures-delta"
    md = (out / "figures" / "reproduction.md").read_text()
    assert "0.3" in md and "the-feasibility-figures-delta" in md and "load" in md


def test_the_gallery_shows_the_table_under_the_figure_and_on_its_own_page(tiny):
    d, out, _ = tiny
    F.figures(None, profile="quick", out_root=out, experiments=d, plot_only=True, echo=lambda m: None)
    figs = out / "figures"
    index, whole = (figs / "index.html").read_text(), (figs / "reproduction.html").read_text()
    section = index[index.index("<figure id='tiny_feasibility'>"):]
    assert "table class='paper'" in section and "Pure DP, c = 1: the peak ratio" in section
    assert "href='reproduction.html'" in index
    assert whole.count("<tr class=") == 4 and "shape only (quick profile)" in whole
    for link in re.findall(r"(?:href|src)='([^'#]+)(?:#[^']*)?'", index + whole):
        assert (figs / link).exists(), link


def test_markers_labelled_paper_land_on_their_panels(tiny):
    d, out, run = tiny
    exp = F.load_experiments(d)["tiny_feasibility"]
    runs = F.Runs({"feasibility": [F.RunResult("feasibility", run.run_dir, {}, ok=True)]})
    from certdp.plots import PLOTS
    fig, _ = PLOTS["cond_table"](runs)
    before = {id(ax): len(ax.get_lines()) for ax in fig.axes}
    assert P.mark(fig, exp.paper) == []
    a, b = fig.axes[:2]
    assert len(a.get_lines()) == before[id(a)] + 1 and len(b.get_lines()) == before[id(b)] + 1
    star = a.get_lines()[-1]
    assert star.get_marker() == "*" and list(star.get_xdata()) == [0.4] and list(star.get_ydata()) == [0.117]
    assert "paper" in [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    # a panel the figure lacks is reported, not drawn somewhere else
    assert P.mark(fig, [{"id": "x", "value": 1.0, "point": {"panel": "no such panel", "x": 1, "y": 1}}]) == ["x"]
    plt.close(fig)


def test_twin_axis_and_vertical_line_points():
    fig, ax = plt.subplots()
    ax.set_title("Linear: concretisation frequency")
    ax2 = ax.twinx()
    P.mark(fig, [{"id": "ss", "value": 0.25, "point": {"panel": "Linear", "axis": "right", "x": 1, "y": 0.25}},
                 {"id": "eps", "value": 0.2, "tolerance": {"abs": 0}, "point": {"panel": "Linear", "x": 0.2}},
                 {"id": "bound", "value": 0.06, "tolerance": {"at_most": True},
                  "point": {"panel": "Linear", "x": 2, "y": 0.06}}])
    assert [ln.get_ydata()[0] for ln in ax2.get_lines()] == [0.25]
    assert ax.get_lines()[-1].get_marker() == "v"
    vertical = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0.2, 0.2]]
    assert len(vertical) == 1
    plt.close(fig)


def _source(tmp_path, frames: dict) -> R.Source:
    tmp_path.mkdir(parents=True, exist_ok=True)
    runs = {}
    for i, (rid, items) in enumerate(frames.items()):
        for j, (params, df) in enumerate(items):
            d = tmp_path / f"r{i}_{j}"
            d.mkdir()
            df.to_csv(d / "results.csv", index=False)
            runs.setdefault(rid, []).append(R.RunView(rid, params, d, ok=True))
    return R.Source("fig", runs, tmp_path / "figures")


def test_measures_select_combine_and_compare(tmp_path):
    eps = [0.1, 1.0, 10.0]
    mk = lambda scale: pd.DataFrame({"epsilon": eps * 2, "arm": ["a"] * 3 + ["gs"] * 3,  # noqa: E731
                                     "mae": [scale / e for e in eps] + [5.0 / e for e in eps], "beta": [0.25, 0.5, 1] * 2})
    src = _source(tmp_path, {"sweep": [({"F": 1}, mk(1.0)), ({"F": 16}, mk(0.1))]})
    sel = {"run": "sweep", "where": {"arm": "a", "F": 16, "epsilon": 1}, "col": "mae"}
    assert R.evaluate(sel, src) == pytest.approx(0.1)
    assert R.evaluate({"ratio": [{**sel, "where": {"arm": "gs", "F": 16, "epsilon": 1}}, sel]}, src) == pytest.approx(50)
    series = {"run": "sweep", "where": {"arm": "a"}, "col": "mae", "by": ["epsilon", "F"]}
    assert R.evaluate({"argmin": series, "over": "F"}, src).to_dict() == {0.1: 16, 1.0: 16, 10.0: 16}
    cross = {"first": {"lt": [{"run": "sweep", "where": {"arm": "a", "F": 1}, "col": "mae", "by": "epsilon"}, 0.5]}}
    assert R.evaluate(cross, src) == 10.0
    assert R.evaluate({"last": cross["first"]}, src) == 10.0
    never = {"first": {"lt": [{"run": "sweep", "where": {"arm": "a", "F": 1}, "col": "mae", "by": "epsilon"}, 0.01]}}
    assert R.evaluate(never, src) == "none (up to 10)"
    assert R.evaluate({"run": "sweep", "where": {"arm": "a", "F": 1, "beta": {"nearest": 0.45}}, "col": "mae"}, src) == 1.0
    assert R.evaluate({"max": {"run": "sweep", "where": {"arm": ["a", "gs"], "F": 1}, "col": "mae", "by": "epsilon",
                               "agg": "max"}}, src) == pytest.approx(50)
    # several rows where one is meant is an error, not a silent pick
    with pytest.raises(ValueError, match="one expected"):
        R.evaluate({"run": "sweep", "where": {"arm": "a"}, "col": "mae"}, src)
    with pytest.raises(R.Missing, match="no rows"):
        R.evaluate({"run": "sweep", "where": {"arm": "b"}, "col": "mae"}, src)
    with pytest.raises(R.Missing, match="no run"):
        R.evaluate({"run": "other", "col": "mae"}, src)


@pytest.mark.parametrize("value,paper,tol,ok", [
    (58.6, 57, {"rel": 0.25}, True), (42.7, 57, {"rel": 0.25}, False), (0.377, 0.4, {"abs": 0.05}, True),
    (4e4, 1e5, {"log10": 0.5}, True), (13.4, 1e5, {"log10": 0.5}, False), (5.2, 5, {"range": [4, 6]}, True),
    (31, 30, {"at_least": True}, True), (1.2, 30, {"at_least": True}, False), (0.07, 0.06, {"at_most": True}, False),
    ("pate_r", "pate_r", None, True), ("agtr_wor", "pate_r", None, False), (True, True, None, True),
    ("none (up to 0.999)", 0.995, {"abs": 0.003}, False), (float("nan"), 1.0, {"abs": 1.0}, False)])
def test_tolerances(value, paper, tol, ok):
    assert R.within(value, paper, tol) is ok


def test_a_series_is_reproduced_only_if_every_point_is():
    assert R.within(pd.Series([4.5, 5.5]), 5, {"range": [4, 6]})
    assert not R.within(pd.Series([4.5, 1.0]), 5, {"range": [4, 6]})


def test_the_schema_refuses_a_bad_paper_section(tmp_path):
    base = TINY.split("paper:")[0] + "paper:\n"
    good = ("  - {id: a, claim: c, source: s, value: 1, tolerance: {abs: 0.1},"
            " proven: {run: feasibility, col: rho, agg: max}}\n")
    bad = {
        "unknown run": good.replace("run: feasibility", "run: nope"),
        "missing for a number": good.replace(" tolerance: {abs: 0.1},", ""),
        "exactly one of": good.replace("proven: {run: feasibility, col: rho, agg: max}", "proven: {average: 1}"),
        "deviations.md#": good.replace("value: 1,", "value: 1, deviation: figures.md,"),
        "given twice": good + good,
        "unknown field": good.replace("value: 1,", "value: 1, colour: red,"),
    }
    p = tmp_path / "x.yaml"
    p.write_text(base + good)
    F.load_experiment(p)                                   # the good one loads
    for what, text in bad.items():
        p.write_text(base + text)
        with pytest.raises(ConfigError, match=re.escape(what)) as e:
            F.load_experiment(p)
        assert str(e.value).startswith("x.yaml:paper[")


def _anchors(md: str) -> set[str]:
    """The heading anchors mkdocs gives a page."""
    return {R.slug(h) for h in R.headings(md)}


def test_the_repository_records_the_papers_values():
    """>= 30 values over >= 8 of the 10 figures, each with its source; every deviation named is a
    section of docs/deviations.md; every figure has points for its markers."""
    exps = F.load_experiments()
    values = [(n, e) for n, x in exps.items() for e in x.paper]
    assert len(values) >= 30 and len({n for n, _ in values}) >= 8
    assert all(e["source"].strip() and e["claim"].strip() for _, e in values)
    anchors = _anchors((REPO / "docs" / "deviations.md").read_text())
    named = {e["deviation"].partition("#")[2] for _, e in values if e.get("deviation")}
    assert named and named <= anchors, sorted(named - anchors)
    assert all(any(e.get("point") for e in x.paper) for x in exps.values())


def test_the_anchor_check_catches_a_missing_section():
    assert "the-feasibility-figures-delta" in _anchors("### The feasibility figure's delta\n")
    assert "california-scaling" not in _anchors("## California's scaling, public\n")


def test_verdict_reads_the_construction_where_no_proven_run_exists(tmp_path):
    df = pd.DataFrame({"epsilon": [1.0], "acc": [0.86]})
    src = _source(tmp_path, {"milp": [({}, df)]})
    entry = {"id": "x", "claim": "c", "source": "s", "value": 0.86, "tolerance": {"abs": 0.05},
             "proven": {"not_run": "no proven MILP"},
             "construction": {"label": "MILP", "measure": {"run": "milp", "col": "acc"}}}
    r = R.row(entry, src, figure="f", label="fig:f", profile="paper", out_root=tmp_path)
    assert r["verdict"] == "reproduced" and r["basis"] == "paper's construction"
    assert r["reason"] == "proven: no proven MILP" and r["certdp_proven"] == "not run"
    r = R.row({**entry, "value": 0.59}, src, figure="f", label="fig:f", profile="paper", out_root=tmp_path)
    assert r["verdict"] == "differs"
    r = R.row({**entry, "construction": {"label": "MILP", "measure": {"run": "milp", "where": {"epsilon": 30},
                                                                     "col": "acc"}}},
              src, figure="f", label="fig:f", profile="paper", out_root=tmp_path)
    assert r["verdict"] == "not run" and "no rows" in r["reason"]
    # a measure that does not fit its CSVs (two rows where one is meant) is a visible row, not a crash
    two = _source(tmp_path / "two", {"milp": [({}, pd.DataFrame({"acc": [0.8, 0.9]}))]})
    r = R.row({**entry, "proven": {"run": "milp", "col": "acc"}}, two, figure="f", label="fig:f", profile="paper",
              out_root=tmp_path)
    assert r["verdict"] == "not run" and r["reason"].startswith("measure error:") and "one expected" in r["reason"]


@pytest.mark.slow
def test_cli_compare_rewrites_the_table_without_running(tiny):
    d, out, run = tiny
    import os
    env = {**os.environ, "CERTDP_EXPERIMENTS_DIR": str(d)}
    r = subprocess.run([sys.executable, "-m", "certdp.cli", "figures", "--compare", "profile=quick", f"out_root={out}"],
                       capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "0 to run (plot only: skipped)" in r.stdout and "[figures] run " not in r.stdout
    assert (out / "figures" / "reproduction.md").exists() and _table(out).loc["pure_peak", "verdict"] == "reproduced"


def test_a_runs_unknown_profile_is_refused(tmp_path):
    """The experiment file's run profiles are checked against certdp's profiles (the check had
    compared a run's profiles with themselves, so a misspelt profile was silently never used)."""
    p = tmp_path / "x.yaml"
    p.write_text(TINY.split("paper:")[0].replace("expect: [results, peaks]", "expect: [results, peaks]\n    profiles: {fast: {}}"))
    with pytest.raises(ConfigError, match="unknown 'fast'; allowed: quick, paper"):
        F.load_experiment(p)
