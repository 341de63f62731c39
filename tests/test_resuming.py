"""``certdp rerun`` (certdp.resuming.rerun_config): a rerun refuses edited or incomplete run
records, a billion-laughs config and a changed input, in one line, and leaves every run as it was.
(Resume of interrupted runs from their checkpoints: test_resume.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import results
from cli_helpers import one_line


def certdp(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.mark.slow
def test_rerun_refuses_edited_or_incomplete_records_and_a_changed_input(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (120, 2))
    data = tmp_path / "t.csv"
    pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "y": x @ [2.0, -1.0]}).to_csv(data, index=False)
    args = ["agtr", "dataset=csv", f"dataset.path={data}", "dataset.target=y", "dataset.n_test=20",
            "dataset.output_range=[-5,5]", "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5",
            "progress=false", f"out_root={tmp_path / 'o'}", "run=orig"]
    assert certdp(*args).returncode == 0
    orig = tmp_path / "o" / "agtr" / "csv" / "orig"
    rec = json.loads((orig / "run.json").read_text())
    assert rec["inputs"][0]["key"] == "dataset.path" and rec["inputs"][0]["sha256"] == results.sha256_file(data)

    def variant(name, edit):
        d = tmp_path / "o" / "agtr" / "csv" / name
        import shutil
        shutil.copytree(orig, d)
        edit(d)
        return d

    cases = {
        "noseed": (lambda d: (d / "config.yaml").write_text("\n".join(
            line for line in (d / "config.yaml").read_text().splitlines() if not line.startswith("seed:")) + "\n"),
            "config.yaml: ", "edited"),
        "binary": (lambda d: (d / "config.yaml").write_bytes(b"\x00\xff" * 50), "config.yaml: ", "edited"),
        "nojson": (lambda d: (d / "run.json").unlink(), "RUN_DIR: ", "no run.json"),
        "badjson": (lambda d: (d / "run.json").write_text('{"format": "certdp.run/1", "command": ["agtr"]}'),
                    "run.json.command: ", "allowed"),
        "laughs": (lambda d: _laughs(d), "config.yaml: ", "alias"),
        "incomplete": (lambda d: _rewrite_consistently(d, "seed"), "config.yaml.seed: ", "incomplete"),
    }
    for name, (edit, key, words) in cases.items():
        d = variant(name, edit)
        t0 = time.time()
        r = certdp("rerun", str(d))
        assert r.returncode == 2 and one_line(r.stderr).startswith(f"certdp: error: {key}") and words in r.stderr, \
            (name, r.stderr)
        assert time.time() - t0 < 60
    for name in (f"x{results.INCOMPLETE}1-ab", f"x{results.REPLACED}1-ab"):
        d = variant(name, lambda d: None)
        r = certdp("rerun", str(d))
        assert r.returncode == 2 and one_line(r.stderr).startswith("certdp: error: RUN_DIR: ")
    assert not (tmp_path / "outputs").exists()
    # an input edited since the run: refused in one line (a rerun must repeat the run), nothing written
    before = sorted(p.name for p in (tmp_path / "o" / "agtr" / "csv").iterdir())
    with data.open("a") as f:
        f.write("0.5,0.5,0.5\n")
    r = certdp("rerun", str(orig), cwd=tmp_path)
    assert r.returncode == 2 and one_line(r.stderr).startswith("certdp: error: dataset.path: ") \
        and "changed since the run" in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / "o" / "agtr" / "csv").iterdir()) == before
    assert not (tmp_path / "outputs").exists()


def _laughs(d: Path) -> None:
    """A billion-laughs config.yaml whose checksum run.json records (so only the alias guard stops it)."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    (d / "config.yaml").write_text("\n".join(lines) + "\n")
    _rerecord(d)


def _rewrite_consistently(d: Path, key: str) -> None:
    text = "\n".join(line for line in (d / "config.yaml").read_text().splitlines() if not line.startswith(f"{key}:"))
    (d / "config.yaml").write_text(text + "\n")
    _rerecord(d)


def _rerecord(d: Path) -> None:
    rec = json.loads((d / "run.json").read_text())
    rec["config"]["sha256"] = results.sha256_file(d / "config.yaml")
    (d / "run.json").write_text(json.dumps(rec))
