"""The estimates' models of what a run's time depends on beyond its steps: an accountant's
calibration grows with eps, the load slows torch's threads beyond their fair share, and the
timed code's fingerprint covers every file it names (certdp/estimate/work.py, rates.py)."""

from __future__ import annotations

import pytest

from certdp.estimate import rates as R
from certdp.estimate import work


def test_an_accountants_calls_grow_with_eps_beyond_the_timed_budgets():
    """A calibration's time grows with eps (PLD 0.6 s at eps 1, 6.5 s at 100): beyond the highest
    timed budget (1.25 x 40 = 50) the calls grow as sqrt(eps); within it they interpolate."""
    w = work.Work()
    work.accountant_calls(w, "pld", 200.0, 3)
    assert w.other == {"accountant/pld/eps40": [(6.0, 0.0)]}
    w = work.Work()
    work.accountant_calls(w, "pld", 30.0, 1)
    assert w.other == {"accountant/pld/eps8": [(pytest.approx(0.5), 0.0)], "accountant/pld/eps40": [(pytest.approx(0.5), 0.0)]}


def test_the_code_fingerprint_reads_every_timed_file():
    """Every entry of TIMED_CODE exists (the AGT loop moved from agt.py to the agt/ package and the
    fingerprint silently stopped covering it), and a subpackage's files count (bounds/rules)."""
    from pathlib import Path
    root = Path(R.__file__).parent.parent
    assert all((root / name).exists() for name in R.TIMED_CODE), [n for n in R.TIMED_CODE if not (root / n).exists()]
    files = {str(f.relative_to(root)) for f in R.timed_files()}
    assert {"agt/steps.py", "kernels.py", "losses.py"} <= files
    assert any(f.startswith("bounds/rules/") for f in files)


def test_the_load_factor_follows_the_measured_slowdowns(monkeypatch):
    """probe(): ((load - 1 + threads) / cores) ** 1.7, at least 1 (rates.py, The load: measured
    2.3-2.7x, 13-15x and 27-28x with 2, 6 and 12 other processes on 2 cores)."""
    import math
    import torch
    monkeypatch.setattr(R.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert R.probe(load=0.0) == 1.0 and R.probe(load=1.0) == 1.0 and R.probe(load=math.nan) == 1.0
    measured = {2.0: (2.3, 2.7), 6.0: (13.0, 15.0), 12.0: (27.0, 28.0)}
    for others, (lo, hi) in measured.items():
        f = R.probe(load=others)                  # the load average before the run: the others
        assert lo / 3 <= f <= hi * 3 and f == pytest.approx(((others - 1 + 2) / 2) ** 1.7)
    assert R.probe(load=4.0) < R.probe(load=8.0) < R.probe(load=16.0)
