"""Private end to end (issue 14): every command on small real tables bundled with scikit-learn
(written to CSV in the test's folder), the provenance columns of every row, and the honest
accounting of selection among privately trained candidates."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import cli


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


def run(argv: list[str], out: Path) -> tuple[int, str]:
    """``certdp <argv> out_root=<out>`` in this process: (exit status, stderr)."""
    old, se = sys.argv, io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    sys.argv = ["certdp", *argv, f"out_root={out}", "progress=false"]
    try:
        with contextlib.redirect_stderr(se), contextlib.redirect_stdout(io.StringIO()):
            try:
                cli.main()
                code = 0
            except SystemExit as e:
                code = 0 if e.code is None else int(e.code)
    finally:
        sys.argv = old
        root.handlers[:], root.level = handlers, level
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
