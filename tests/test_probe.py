"""tools/probe.py, the surface prober: its judge on planted outcomes, and a fast subset of its
probes green."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest


def _prober():
    import importlib.util
    tools = Path(__file__).resolve().parent.parent / "tools"
    spec = importlib.util.spec_from_file_location("probe", tools / "probe.py")
    mod = sys.modules.get("probe") or importlib.util.module_from_spec(spec)
    if "probe" not in sys.modules:
        sys.modules["probe"] = mod
        spec.loader.exec_module(mod)
    return mod


def test_the_prober_flags_what_the_issue_counts_as_failures(tmp_path):
    """The prober's judge on planted outcomes: a refusal without its allowed part, a refusal
    naming another key, a multi-line usage error, a traceback, outputs/ left in the cwd."""
    P = _prober()
    p = P.Probe("x", ["agtr", "train.lr=abc"], "refuse", ("train.lr",))
    judge = lambda se, rc=2, out=tmp_path: P.judge(p, rc, "", se, False, out, p.argv, 1.0)["behaviour"]  # noqa: E731
    assert judge("certdp: error: train.lr: not a number; allowed: a finite number > 0\n") == "refused-ok"
    assert judge("certdp: error: train.lr: not a number\n") == "no-allowed-part"
    assert judge("certdp: error: train.lr: not a number; allowed: \n") == "no-allowed-part"
    assert judge("certdp: error: config: not a number; allowed: x\n") == "wrong-key"
    assert judge("Traceback (most recent call last):\nValueError: x\n", rc=1) == "traceback"
    (tmp_path / "outputs").mkdir()
    assert judge("certdp: error: train.lr: not a number; allowed: x\n") == "unclean-refusal"
    u = P.Probe("u", ["--bogus"], "usage", extra={"token": "--bogus"})
    assert P.judge(u, 2, "", "Usage: certdp\nError: no such option --bogus\n", False, tmp_path, [], 1.0)["behaviour"] \
        == "unclean-refusal"


# the probes of the surfaces that run in seconds (no finished run needed)
PROBER_SUBSET = (r"^(predict:(format 1|deep|binary|header|dup|staging|output is)|figures:experiment file "
                 r"(runs-scalar|run-scalar|profiles-list|laughs)|agtr:run=|feasibility:feasibility\.confidence\.values)")


@pytest.mark.slow
def test_a_fast_subset_of_the_prober_is_green(tmp_path):
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "tools" / "probe.py"), "--root", str(root), "--surfaces",
                        "--only", PROBER_SUBSET, "--jobs", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    (csv,) = tmp_path.glob("pass-*/probes.csv")
    rows = pd.read_csv(csv, keep_default_na=False)
    assert len(rows) >= 40
    bad = rows[~rows.got.isin(["refused-ok", "ran-ok", "skipped"])]
    assert bad.empty, bad[["id", "got", "note", "stderr_first"]].to_string()
