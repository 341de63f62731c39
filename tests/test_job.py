"""One parse per job: the CLI composes and parses every job of a command line before Hydra runs
any (refusal before heavy work), and each job then runs on that parse instead of parsing again
(certdp.runs.job_settings) -- for a single run and for every job of a -m sweep."""

from __future__ import annotations

import contextlib
import io
import os
import sys

import pytest

import certdp.settings as S
from certdp import cli
from cli_helpers import restored_root_logging

SMALL = ["dataset=linear", "dataset.n_train=40", "dataset.n_test=10", "staircase.k_max=2", "progress=false"]


def _run(argv: list[str], tmp_path) -> tuple[int, str]:
    old_argv, cwd, err = sys.argv, os.getcwd(), io.StringIO()
    sys.argv = ["certdp", *argv, f"out_root={tmp_path / 'o'}"]
    os.chdir(tmp_path)
    try:
        with restored_root_logging(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                cli.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = old_argv
        os.chdir(cwd)
    return code, err.getvalue()


@pytest.fixture
def parses(monkeypatch):
    """Every call of the experiment settings parser, counted."""
    calls = []
    real = S.experiment_settings

    def counting(command, cfg):
        calls.append(command)
        return real(command, cfg)
    monkeypatch.setattr(S, "experiment_settings", counting)
    return calls


@pytest.mark.parametrize("extra,jobs", [(["train.steps=2"], 1), (["-m", "train.steps=1,2"], 2)])
def test_each_job_is_parsed_once(extra, jobs, parses, tmp_path):
    code, err = _run(["certify", *SMALL, *extra], tmp_path)
    assert code == 0, err[-1500:]
    assert len(list((tmp_path / "o").rglob("envelopes.csv"))) == jobs
    assert parses == ["certify"] * jobs, f"{len(parses)} parses for {jobs} job(s)"


def test_a_bad_job_of_a_sweep_is_refused_before_any_runs(parses, tmp_path):
    code, err = _run(["certify", *SMALL, "-m", "train.steps=2,0"], tmp_path)
    assert code == 2 and err.strip().startswith("certdp: error: train.steps:"), err
    assert not list((tmp_path / "o").rglob("*.csv"))
    assert parses == ["certify"] * 2             # both composed and checked, none run


def test_a_job_whose_config_differs_from_the_cli_parse_is_parsed_again(parses):
    from certdp.runs import PARSED, job_settings
    from certdp.settings.compose import compose_and_parse
    cli.results.register_resolvers()
    configs: list = []
    (st,) = compose_and_parse("certify", SMALL + ["train.steps=2"], multirun=False, config_path=str(S.config_dir()),
                              config_name="certify", configs=configs)
    PARSED[:] = [(configs[0], st)]
    try:
        same = job_settings("certify", {**configs[0], "run": "elsewhere"}, 0)
        assert same.train == st.train and same.run.run == "elsewhere" and len(parses) == 1
        changed = {**configs[0], "train": {**configs[0]["train"], "steps": 3}}
        assert job_settings("certify", changed, 0).train.steps == 3 and len(parses) == 2
    finally:
        PARSED.clear()
