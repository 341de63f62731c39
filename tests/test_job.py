"""The run boundary as objects (certdp/job.py, certdp/signals.py, certdp.checkpoint.active): the
state of a command line lives in its CommandLine and Signals objects and the checkpoint session
is its runner's only -- nothing is left in a module global between two command lines."""

from __future__ import annotations

import signal

import pytest
from omegaconf import OmegaConf

from certdp import checkpoint, results
from certdp.commands import get
from certdp.job import CommandLine
from certdp.signals import Interrupted, Signals


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
