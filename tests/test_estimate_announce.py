"""When a run says its settings estimate before it starts (certdp.estimate.announce): over
SAY_ABOVE_S, timed first when its optimistic work exceeds CALIBRATE_ABOVE_S, counting the load."""

from __future__ import annotations

from certdp import estimate as E
from test_estimate import Machine, settings


def test_mnist5s_default_says_its_estimate_on_idle_cores_and_on_busy_ones(tmp_path, monkeypatch, caplog):
    """mnist5's CPU default (26 s of optimistic work, 3 min idle, 45 min of AGT at load 10-20)
    timed nothing and said no estimate, busy or idle."""
    import os
    m = Machine().install(monkeypatch, tmp_path)
    s = settings("ags", "dataset=mnist5", "device=cpu")
    assert E.CALIBRATE_ABOVE_S < E.work_of(s).elements() * E.OPTIMISTIC_UNIT["cpu"] < 30
    with caplog.at_level("INFO", logger="certdp"):
        est = E.announce(s)                                         # idle cores: timed, said
    assert m.calls and est.seconds >= E.SAY_ABOVE_S and "estimate from the settings" in caplog.text
    caplog.clear()
    monkeypatch.setattr(E, "_load", lambda: 8.0 * (os.cpu_count() or 1))
    with caplog.at_level("INFO", logger="certdp"):
        busy = E.announce(s)
    assert busy.seconds > est.seconds and "estimate from the settings" in caplog.text


def test_a_run_between_the_two_thresholds_says_its_estimate_without_advice(tmp_path, monkeypatch, caplog):
    Machine().install(monkeypatch, tmp_path)
    s = settings("ags", "dataset=mnist5", "device=cpu")
    monkeypatch.setattr(E, "SAY_ABOVE_S", 1.0)
    monkeypatch.setattr(E, "LONG_RUN_S", 1e9)
    with caplog.at_level("INFO", logger="certdp"):
        E.announce(s)
    line = next(r.getMessage() for r in caplog.records if "estimate from the settings" in r.getMessage())
    assert "faster" not in line and "whole run" in line
    monkeypatch.setattr(E, "SAY_ABOVE_S", 1e9)                      # planted: a threshold nothing reaches
    caplog.clear()
    E.announce(s)
    assert "estimate from the settings" not in caplog.text
