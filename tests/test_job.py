"""The run boundary as objects (certdp/job.py, certdp/signals.py, certdp.checkpoint.active): the
state of a command line lives in its CommandLine and Signals objects and the checkpoint session
is its runner's only -- nothing is left in a module global between two command lines.

One parse per job: the CLI composes and parses every job of a command line before Hydra runs
any (refusal before heavy work), and each job then runs on that parse instead of parsing again
(certdp.job.CommandLine.settings_of) -- for a single run and for every job of a -m sweep."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys

import pytest
from omegaconf import OmegaConf

import certdp.settings as S
from certdp import checkpoint, cli, results
from certdp.commands import get
from certdp.job import CommandLine
from certdp.signals import Interrupted, Signals
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
    """Every parse of a command's settings (its registry entry's parser, the CLI's one entrance), counted."""
    from certdp.commands import Command
    calls = []
    real = Command.parse

    def counting(self, cfg):
        calls.append(self.name)
        return real(self, cfg)
    monkeypatch.setattr(Command, "parse", counting)
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
    from certdp.job import CommandLine
    from certdp.settings.compose import compose_and_parse
    cli.results.register_resolvers()
    configs: list = []
    certify = cli.COMMANDS["certify"]
    (st,) = compose_and_parse(certify, SMALL + ["train.steps=2"], multirun=False, config_path=str(S.config_dir()),
                              config_name="certify", configs=configs)
    line = CommandLine(certify, parsed=[(configs[0], st)])
    same = line.settings_of({**configs[0], "run": "elsewhere"}, 0)
    assert same.train == st.train and same.run.run == "elsewhere" and len(parses) == 1
    changed = {**configs[0], "train": {**configs[0]["train"], "steps": 3}}
    assert line.settings_of(changed, 0).train.steps == 3 and len(parses) == 2
    assert CommandLine(certify).settings_of(configs[0], 0).train == st.train and len(parses) == 3


def _hydra_recorded(monkeypatch, output_dir):
    """Hydra's record of the folder it made for a job (``hydra.runtime.output_dir``)."""
    from hydra.core.hydra_config import HydraConfig
    monkeypatch.setattr(HydraConfig.instance(), "cfg",
                        OmegaConf.create({"hydra": {"runtime": {"output_dir": str(output_dir)}}}))


def test_an_interruption_before_the_job_starts_removes_only_its_staging_folder(tmp_path, monkeypatch):
    line = CommandLine(get("certify"))
    staging = tmp_path / f"run{results.incomplete_suffix()}"
    staging.mkdir()
    _hydra_recorded(monkeypatch, staging)
    line.discard_unstarted()
    assert not staging.exists()
    finished = tmp_path / "finished"                  # a folder without the staging ending: never removed
    (finished / "x").mkdir(parents=True)
    _hydra_recorded(monkeypatch, finished)
    line.discard_unstarted()
    assert (finished / "x").is_dir()


def test_two_command_lines_share_no_state():
    a, b = CommandLine(get("agtr")), CommandLine(get("agtr"))
    a.landed.append("x")
    a.parsed.append(({}, None))
    assert b.landed == [] and b.parsed == [] and a.signals is not b.signals


def test_the_checkpoint_session_is_the_runner_s_only():
    run = checkpoint.Session(folder=None, interval_s=None, progress_s=None)
    inner = checkpoint.Session(folder=None, interval_s=None, progress_s=None)
    before = checkpoint.current()
    with pytest.raises(RuntimeError):
        with checkpoint.active(run):
            assert checkpoint.current() is run
            with checkpoint.active(inner):
                assert checkpoint.current() is inner
            assert checkpoint.current() is run
            raise RuntimeError("the runner failed")
    assert checkpoint.current() is before and before is not run      # reset however the runner ends


def test_a_signal_during_the_final_renames_waits_for_them():
    sig = Signals()
    with pytest.raises(Interrupted) as e:
        with sig.deferred():
            sig._on_signal(signal.SIGTERM, None)         # held, not raised, while the renames run
            done = True
    assert done and e.value.signum == signal.SIGTERM and sig.last == signal.SIGTERM
    assert Signals().last is None                       # another command line's signals are its own
    with pytest.raises(Interrupted):
        sig._on_signal(signal.SIGINT, None)            # outside the renames: at once
