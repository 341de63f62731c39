"""Private end to end (issue 14): every command on small real tables bundled with scikit-learn
(written to CSV in the test's folder), the provenance columns of every row, and the honest
accounting of selection among privately trained candidates."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import cli
from cli_helpers import restored_root_logging


def sklearn_csv(folder: Path, name: str) -> Path:
    """One of scikit-learn's bundled tables as a CSV with a ``target`` column (class names as
    strings for iris and wine, integers 0/1 for breast cancer, a number for diabetes)."""
    from sklearn import datasets
    load = {"iris": datasets.load_iris, "wine": datasets.load_wine, "breast_cancer": datasets.load_breast_cancer,
            "diabetes": datasets.load_diabetes}[name]
    b = load(as_frame=True)
    df = b.frame.copy()
    if name in ("iris", "wine"):
        df["target"] = [str(b.target_names[i]) for i in b.target]
    path = folder / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


class _Sink(io.StringIO):
    """Captured stderr that survives ``close()``."""

    def close(self):
        pass


def run(argv: list[str], out: Path) -> tuple[int, str]:
    """``certdp <argv> out_root=<out>`` in this process: (exit status, stderr).

    Hydra reconfigures logging, which closes every live handler; absl's handler (imported with
    dp-accounting by earlier tests) then closes its stream unless it is the current sys.stderr,
    i.e. pytest's capture file while stderr is redirected here.  So handlers writing to the
    current stderr write to the redirect for the duration of the run."""
    old, se = sys.argv, _Sink()
    live = [r() for r in list(logging._handlerList)]
    swapped = [(h, h.stream) for h in live if h is not None and getattr(h, "stream", None) is sys.stderr
               and not isinstance(getattr(type(h), "stream", None), property)]     # logging.lastResort follows sys.stderr
    for h, _ in swapped:
        h.stream = se
    sys.argv = ["certdp", *argv, f"out_root={out}", "progress=false"]
    try:
        with restored_root_logging(), contextlib.redirect_stderr(se), contextlib.redirect_stdout(io.StringIO()):
            try:
                cli.main()
                code = 0
            except SystemExit as e:
                code = 0 if e.code is None else int(e.code)
    finally:
        sys.argv = old
        for h, stream in swapped:
            h.stream = stream
    return code, se.getvalue()


def tables(out: Path) -> dict[str, pd.DataFrame]:
    dirs = {p.parent for p in out.rglob("config.yaml") if p.parent.name != ".hydra"}
    assert len(dirs) == 1, dirs
    return {p.stem: pd.read_csv(p) for p in next(iter(dirs)).glob("*.csv")}


REG = ["dataset.output_range=[0,400]", "train.steps=5", "staircase.k_max=4", "privacy.n_draws=5", "privacy.epsilons=[1]"]
CLS = ["train.steps=5", "staircase.k_max=4", "privacy.n_draws=5", "privacy.epsilons=[1]"]
TINY_BASELINES = ["dpsgd.optimised.accountants=[rdp]", "dpsgd.optimised.grid.lr=[0.5]",
                  "dpsgd.optimised.grid.clip=[1.0]", "dpsgd.optimised.grid.epochs=[1]",
                  "dpsgd.optimised.grid.batch_size=[32]", "pate.teachers=[2]", "pate.queries=[10]",
                  "+pate.student_steps=5"]

CASES = {
    "agtr": ("diabetes", REG),
    "certify": ("diabetes", REG),
    "audit": ("diabetes", REG + ["audit.repeats=3", "audit.radii=[1]", "audit.n_test=10"]),
    "pate": ("diabetes", ["pate.shards=[1,2]", "pate.staircase.k_max=4"] + REG),
    "ags": ("iris", ["dataset.task=multiclass"] + CLS + TINY_BASELINES),
    "dpsgd": ("wine", ["dataset.task=multiclass"] + CLS + TINY_BASELINES),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(CASES))
def test_every_command_runs_on_a_real_table_and_every_row_says_dp_end_to_end(tmp_path, command):
    name, extra = CASES[command]
    path = sklearn_csv(tmp_path, name)
    code, err = run([command, "dataset=csv", f"dataset.path={path}", "dataset.target=target", *extra],
                    tmp_path / "out")
    assert code == 0, err
    frames = tables(tmp_path / "out")
    assert frames
    for fname, df in frames.items():
        assert len(df) and "dp_end_to_end" in df.columns, fname
        assert df.dp_end_to_end.astype(bool).all() and (df.scaling == "public").all(), fname
    if command == "pate":
        # the best T per arm is chosen among releases at T = 1 and T = 2: the summary charges both
        summ = frames["summary"]
        shard_arms = summ[summ.arm.isin(["pate_r", "pate_agtr", "agtr_wor"])]
        assert len(shard_arms) and (shard_arms.candidates == 2).all()
        assert np.allclose(summ.epsilon_end_to_end, summ.candidates * summ.epsilon)
    if command in ("ags", "dpsgd"):
        res = frames["results"]
        # three classes: no class holds most test rows, and the model learnt more than the majority class
        assert 0 < res.majority_rate.iloc[0] <= 0.5 and res.nonprivate_accuracy.iloc[0] > res.majority_rate.iloc[0]
        assert res.accuracy_median.between(0, 1).all()


def test_private_statistics_scaling_is_labelled_not_dp_end_to_end(tmp_path):
    path = sklearn_csv(tmp_path, "diabetes")
    code, err = run(["agtr", "dataset=csv", f"dataset.path={path}", "dataset.target=target",
                     "dataset.scaling=private_stats_not_dp", *REG], tmp_path / "out")
    assert code == 0, err
    for fname, df in tables(tmp_path / "out").items():
        assert not df.dp_end_to_end.astype(bool).any() and (df.scaling == "private_stats_not_dp").all(), fname


def test_binary_table_with_integer_labels_runs_ags(tmp_path):
    path = sklearn_csv(tmp_path, "breast_cancer")
    code, err = run(["ags", "dataset=csv", f"dataset.path={path}", "dataset.target=target", "dataset.task=binary",
                     *CLS, "ags.baselines=[]"], tmp_path / "out")
    assert code == 0, err
    res = tables(tmp_path / "out")["results"]
    assert res.dp_end_to_end.all() and res.nonprivate_accuracy.iloc[0] > 0.8


# ---------------------------------------------------------------------------- selection
GRID2 = ["dataset=blobs", "dataset.n_test=200", "train.steps=5", "privacy.n_draws=3", "privacy.epsilons=[1]",
         "dpsgd.arms=[dpsgd_optimised,pate]", "dpsgd.optimised.accountants=[pld,rdp]",
         "dpsgd.optimised.grid.clip=[1.0]", "dpsgd.optimised.grid.epochs=[1]", "dpsgd.optimised.grid.batch_size=[64]",
         "pate.queries=[20]", "+pate.student_steps=5"]


@pytest.mark.slow
def test_selection_is_charged_and_fixed_selection_trains_one_candidate(tmp_path):
    code, err = run(["dpsgd", *GRID2, "dpsgd.optimised.grid.lr=[0.1,0.5,2.0]", "pate.teachers=[2,4]"],
                    tmp_path / "grid")
    assert code == 0, err
    res = tables(tmp_path / "grid")["results"]
    opt = res[res.arm == "DP-SGD optimised"].set_index("composition")
    # three candidates trained for the first accountant; the second re-uses its choice and trains once more
    assert opt.loc["pld", "candidates"] == 3 and opt.loc["rdp", "candidates"] == 4
    for acc, g in (("pld", 3), ("rdp", 4)):
        assert opt.loc[acc, "epsilon_end_to_end"] == pytest.approx(g * opt.loc[acc, "epsilon"])
        assert opt.loc[acc, "delta_end_to_end"] == pytest.approx(g * opt.loc[acc, "delta"])
    pate = res[res.arm == "PATE"]
    # two (teachers, queries) candidates, five noisy labellings each, every one read by the choice
    assert (pate.candidates == 10).all()
    assert np.allclose(pate.epsilon_end_to_end, 10 * pate.epsilon)
    assert (res.selection == "grid").all()

    code, err = run(["dpsgd", *GRID2, "selection=fixed", "dpsgd.optimised.grid.lr=[0.5]", "pate.teachers=[2]"],
                    tmp_path / "fixed")
    assert code == 0, err
    res = tables(tmp_path / "fixed")["results"]
    assert (res.candidates == 1).all() and np.allclose(res.epsilon_end_to_end, res.epsilon)
    assert np.allclose(res.delta_end_to_end, res.delta) and (res.selection == "fixed").all()


def test_fixed_selection_refuses_a_grid(tmp_path):
    code, err = run(["dpsgd", *GRID2, "selection=fixed", "dpsgd.optimised.grid.lr=[0.1,0.5]", "pate.teachers=[2]"],
                    tmp_path / "o")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("certdp: error: dpsgd.optimised.grid.lr: selection=fixed") and "allowed:" in err
    assert not list((tmp_path / "o").rglob("*.csv"))


# ---------------------------------------------------------------------------- dpaudit
DPA_LIN = ["dpaudit", "dataset=linear", "dataset.n_train=200", "dataset.n_test=20", "train.steps=5",
           "staircase.k_max=8", "privacy.n_draws=40000", "privacy.epsilons=[0.5,2]"]
DPA_BLOBS = ["dpaudit", "dataset=blobs", "dataset.n_test=100", "dpaudit.query=parameter", "train.steps=5",
             "privacy.n_draws=40000", "privacy.epsilons=[0.5,2]"]


DPA_IRIS = ["dpaudit", "dataset=csv", "dataset.path={iris}", "dataset.target=target", "dataset.task=multiclass",
            "dpaudit.query=parameter", "train.steps=5", "privacy.n_draws=40000", "privacy.epsilons=[0.5,2]"]


@pytest.mark.slow
@pytest.mark.parametrize("argv,releases", [(DPA_LIN, {"cauchy", "laplace"}), (DPA_BLOBS, {"cauchy_p", "laplace_p"}),
                                           (DPA_IRIS, {"cauchy_p", "laplace_p"})])
def test_dpaudit_lower_bound_stays_below_the_claim(tmp_path, argv, releases):
    iris = sklearn_csv(tmp_path, "iris")
    code, err = run([a.replace("{iris}", str(iris)) for a in argv], tmp_path / "o")
    assert code == 0, err
    res = tables(tmp_path / "o")["results"]
    # one audited pair and the worst neighbour the certificate admits per release
    assert set(res.mechanism) == releases and len(res) == 8 and (res.search == "admissible").sum() == 4
    assert (res.epsilon_lower_bound <= res.epsilon).all() and not res.violation.any()
    assert (res.n_draws == 40000).all() and np.allclose(res.confidence, 0.95)
    assert ((res.n_a == 20000) & (res.n_b == 20000)).all()      # the second half of each sample
    # the certificates were recomputed on the neighbour: the noise scales differ between the two
    assert (res.center_D != res.center_D_prime).all()
    assert res.dp_end_to_end.all()
    assert (res.neighbour == ("raw table" if "dataset=csv" in argv else "prepared data")).all()


@pytest.mark.slow
def test_dpaudit_detects_a_release_with_too_little_noise(tmp_path, monkeypatch):
    """The audit has power: with the noise scale cut 10^5-fold (a broken release) the lower
    bound exceeds the claim and the command exits 1, its results written."""
    from certdp.certify import publish
    release = publish.release
    monkeypatch.setattr(publish, "release", lambda c, s, m, src, **kw: release(c, s / 1e5, m, src, **kw))
    code, err = run([*DPA_LIN[:-1], "privacy.epsilons=[0.5]", "privacy.releases=[cauchy]"], tmp_path / "o")
    res = tables(tmp_path / "o")["results"]
    assert code == 1 and res.violation.all() and (res.epsilon_lower_bound > 0.5).all(), err


@pytest.mark.parametrize("arg,key", [("dpaudit.alpha=1.5", "dpaudit.alpha"), ("privacy.releases=[laplace_gs]",
                                                                               "privacy.releases"),
                                     ("dpaudit.query=weights", "dpaudit.query"), ("dpaudit.record=5000", "dpaudit.record")])
def test_dpaudit_refuses_bad_input_in_one_line(tmp_path, arg, key):
    code, err = run([*DPA_LIN, arg], tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"certdp: error: {key}: "), err
    assert not list((tmp_path / "o").rglob("*.csv"))


# ---------------------------------------------------------------------------- released models
@pytest.mark.slow
def test_predict_reproduces_the_accuracy_of_the_published_release(tmp_path):
    """AGS publishes one parameter vector per (release, epsilon) with its public-only
    preprocessing (publish/released.json); ``certdp predict`` on the run's raw test rows gives
    exactly the accuracy that the run's log (the private report) gives for that release, with no
    private statistic at prediction time."""
    import json
    import re

    from certdp.data.tabular import split_rows
    path = sklearn_csv(tmp_path, "iris")
    code, err = run(["ags", "dataset=csv", f"dataset.path={path}", "dataset.target=target", "dataset.task=multiclass",
                     "train.steps=20", "privacy.epsilons=[1,100]", "privacy.n_draws=5", "ags.baselines=[]", "run=r"],
                    tmp_path / "out")
    assert code == 0, err
    run_dir = tmp_path / "out" / "ags" / "csv" / "r"
    doc = json.loads((run_dir / "publish" / "released.json").read_text())
    assert doc["model"]["widths"] == [4, 3] and doc["dp_end_to_end"] and len(doc["releases"]) == 4
    assert doc["publishable"] and doc["format"] == "certdp.released/2"
    logged = {(m, float(e)): float(a) for m, e, a in re.findall(
        r"published release (\S+) eps=(\S+): test accuracy (\S+)", (run_dir / "log.txt").read_text())}
    assert len(logged) == 4
    assert doc["preprocessing"]["feature_source"] == "public" and doc["preprocessing"]["classes"] == [
        "setosa", "versicolor", "virginica"]
    res = tables(tmp_path / "out")["results"].set_index(["mechanism", "epsilon"])
    table = pd.read_csv(path)
    _, _, test = split_rows(len(table), n_test=30, n_public=15, seed=0)     # csv defaults: 20% test, 10% public
    assert len(test) == res.n_test.iloc[0]
    table.iloc[test].to_csv(tmp_path / "test_rows.csv", index=False)
    old, so, se = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = ["certdp", "predict", str(run_dir), "--input", str(tmp_path / "test_rows.csv"),
                "--output", str(tmp_path / "pred.csv")]
    try:                        # predict is a plain Typer command: no Hydra, no logging reconfiguration
        with contextlib.redirect_stderr(se), contextlib.redirect_stdout(so):
            cli.main()
    except SystemExit as e:
        assert not e.code, se.getvalue()
    finally:
        sys.argv = old
    pred = pd.read_csv(tmp_path / "pred.csv")
    truth = table.iloc[test].target.to_numpy()
    for (mech, eps), g in pred.groupby(["mechanism", "epsilon"]):
        acc = float(np.mean(g.sort_values("row").prediction.to_numpy() == truth))
        assert acc == pytest.approx(logged[(mech, eps)], abs=1e-9), (mech, eps)   # log: 10 digits
        assert (mech, eps) in set(zip(res.index.get_level_values(0), res.index.get_level_values(1)))
        assert f"{mech} eps={eps:g}: 30 rows, accuracy {acc:.4f}" in se.getvalue()


@pytest.mark.slow
def test_agtr_answers_a_file_of_queries_with_the_epsilon_each_spends(tmp_path):
    path = sklearn_csv(tmp_path, "diabetes")
    table = pd.read_csv(path)
    table.drop(columns="target").iloc[:7].to_csv(tmp_path / "q.csv", index=False)
    code, err = run(["agtr", "dataset=csv", f"dataset.path={path}", "dataset.target=target", f"queries={tmp_path / 'q.csv'}",
                     "privacy.releases=[cauchy,laplace]", *REG], tmp_path / "out")
    assert code == 0, err
    t = tables(tmp_path / "out")
    run_dir = next((tmp_path / "out").rglob("answers_report.csv")).parent
    ans = pd.read_csv(run_dir / "publish" / "answers.csv")
    assert "answers" not in t and len(t["answers_report"]) == 14     # the published table is in publish/ only
    assert len(ans) == 14 and set(ans.row) == set(range(7)) and set(ans.mechanism) == {"cauchy", "laplace"}
    assert ans.answer.between(0, 400).all()                   # raw units, clipped to the declared range
    assert (t["answers_report"].scale > 0).all() and ans.epsilon.eq(1).all()
    assert not {"scale", "sensitivity", "seed"} & set(ans.columns)
    assert ans.epsilon_total.eq(14).all() and np.allclose(ans.delta_total, 7e-5)
    assert ans.dp_end_to_end.all() and ans.publishable.all()
    # a query table without the model's columns is refused in one line, nothing written
    code, err = run(["agtr", "dataset=csv", f"dataset.path={path}", "dataset.target=target",
                     f"queries={sklearn_csv(tmp_path, 'iris')}", *REG], tmp_path / "bad")
    assert code == 2 and err.count("\n") == 1 and err.startswith("certdp: error: queries: missing columns")
    assert not list((tmp_path / "bad").rglob("*.csv"))


def test_hybrid_end_to_end_columns_count_every_release_the_choice_read():
    """Basic composition over a cell's candidates: each adapter once, each released head draw of
    every (split, allocation), each DP-SGD head run of every lr; one candidate chooses nothing."""
    from types import SimpleNamespace

    from certdp.methods.hybrid.runner import end_to_end_columns
    s = SimpleNamespace(dpsgd_head=SimpleNamespace(lrs=(0.5, 2.0), n_runs=3))
    eps, d1, d2 = 2.0, 5e-6, 5e-6
    rows = [{"arm": "dplora", "head_release": None, "eps1": eps, "delta1": d1, "eps2": 0.0, "delta2": 0.0, "n_draws": 1}]
    for e1 in (1.0, 1.5):                      # two splits x two allocations, 5 draws each
        for alloc in ("l1", "anisotropic"):
            rows.append({"arm": "hybrid", "head_release": "laplace_p", "allocation": alloc, "eps1": e1, "delta1": d1,
                         "eps2": eps - e1, "delta2": d2, "n_draws": 5})
    rows.append({"arm": "frozen_ags", "head_release": "cauchy_p", "allocation": "l1", "eps1": 0.0, "delta1": 0.0,
                 "eps2": eps, "delta2": 0.0, "n_draws": 5})
    rows.append({"arm": "frozen_dpsgd", "head_release": None, "eps1": 0.0, "delta1": 0.0, "eps2": eps,
                 "delta2": 1e-5, "n_draws": 3})
    out = end_to_end_columns(s, pd.DataFrame(rows)).set_index("arm")
    assert out.loc["dplora", "epsilon_end_to_end"] == eps and out.loc["dplora", "candidates"] == 1
    hyb = out.loc["hybrid"]
    assert (hyb.epsilon_end_to_end == 1.0 + 1.5 + 5 * 2 * (1.0 + 0.5)).all() and (hyb.candidates == 4).all()
    assert np.allclose(hyb.delta_end_to_end, 2 * d1 + 4 * 5 * d2)
    assert out.loc["frozen_ags", "epsilon_end_to_end"] == eps            # one allocation: no choice
    assert out.loc["frozen_dpsgd", "epsilon_end_to_end"] == 2 * 3 * eps  # two lrs, three runs each


@pytest.mark.slow
def test_dpaudit_on_a_raw_table_catches_private_statistics_scaling(tmp_path):
    """On a csv table the neighbour is built in the raw table and both go through the whole
    preparation: with the public scaling the bound stays below the claim; with the paper's
    private-statistics scaling (dp_end_to_end=false) an outlier target moves the width-form output
    range, and the audit reports a lower bound far above the claim (exit 1)."""
    path = sklearn_csv(tmp_path, "diabetes")
    base = ["dpaudit", "dataset=csv", f"dataset.path={path}", "dataset.target=target", "dataset.output_range=10",
            "privacy.epsilons=[1]", "privacy.releases=[cauchy]", "privacy.n_draws=20000", "dpaudit.shift=50",
            "dpaudit.search=false"]     # the configured outlier through the raw preparation (tests/test_dpaudit.py: the search)
    code, err = run([*base, "dataset.scaling=public"], tmp_path / "pub")
    res = tables(tmp_path / "pub")["results"]
    assert code == 0 and not res.violation.any() and (res.neighbour == "raw table").all(), err
    assert res.dp_end_to_end.all()
    code, err = run([*base, "dataset.scaling=private_stats_not_dp"], tmp_path / "priv")
    res = tables(tmp_path / "priv")["results"]
    res = res[res.search != "admissible"]               # the real pair (the admissible one tests the mechanism)
    assert code == 1 and res.violation.all() and (res.epsilon_lower_bound > 3).all()
    assert not res.dp_end_to_end.any()


@pytest.mark.parametrize("args,key", [([], "RUN_DIR"), (["{run}"], "--input"), (["{run}", "--input", "{csv}", "--epsilon", "x"], "--epsilon"),
                                      (["{run}", "--input", "{csv}", "extra"], "extra"),
                                      (["{tmp}", "--input", "{csv}"], "RUN_DIR"),
                                      (["{run}", "--input", "{tmp}/none.csv"], "--input")])
def test_predict_refuses_bad_input_in_one_line(tmp_path, args, key):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "released.json").write_text('{"format": "certdp.released/1", "preprocessing": null}')
    csv = sklearn_csv(tmp_path, "iris")
    argv = [a.replace("{run}", str(run_dir)).replace("{csv}", str(csv)).replace("{tmp}", str(tmp_path)) for a in args]
    old, se = sys.argv, io.StringIO()
    sys.argv = ["certdp", "predict", *argv]
    try:
        with contextlib.redirect_stderr(se), contextlib.redirect_stdout(io.StringIO()):
            with pytest.raises(SystemExit) as e:
                cli.main()
    finally:
        sys.argv = old
    err = se.getvalue()
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(f"certdp: error: {key}: "), err
