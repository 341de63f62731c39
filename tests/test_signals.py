"""Signals and streams at the edges of a run (certdp.signals and the CLI's start-up handlers): a
signal while the CLI still imports is one line and writes nothing; a failing standard output is
one line that tells whether the run completed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from certdp import results
from cli_helpers import one_line

SMALL = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=4", "privacy.epsilons=[1]",
         "privacy.n_draws=5", "train.steps=3", "progress=false"]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_start_up_is_one_line(tmp_path, sig, code):
    p = subprocess.Popen([sys.executable, "-m", "certdp.cli", "agtr", *SMALL, f"out_root={tmp_path}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)                     # importing torch, typer, Hydra: seconds
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code
    assert f"interrupted by {signal.Signals(sig).name}" in one_line(err) and "nothing was written" in err
    assert not list(tmp_path.rglob("*.csv"))


@pytest.mark.slow
def test_a_failing_stdout_is_one_line_and_tells_the_truth(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "certdp.cli", "agtr", *SMALL, f"out_root={tmp_path}", "run=r"],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert r.returncode == 0
        line = one_line(r.stderr)
        assert "standard output: no space left on device" in line and f"the run is complete: {tmp_path}" in line
        assert results.run_kind(tmp_path / "agtr" / "linear" / "r") == "run"
        r = subprocess.run([sys.executable, "-m", "certdp.cli", "list"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        assert r.returncode == 1 and one_line(r.stderr).startswith("certdp: error: stdout: ")
