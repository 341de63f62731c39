"""Helpers for running the ``certdp`` command line inside the test process, and the small
inputs its tests share (a finished run's folder, a hand-made released.json, a labelled table)."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from certdp import cli, results
from certdp.data.preprocessing import Preprocessing


@contextlib.contextmanager
def restored_root_logging() -> Iterator[None]:
    """Put the root logger back as it was once the block ends: Hydra adds its log.txt and console
    handlers to the root logger on every run (closed and removed here, so that files are not left
    open and later runs do not log twice) and may remove the handlers that were there (re-added),
    and it sets the root level (restored)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def main_in_process(*argv) -> tuple[int, str, str]:
    """``certdp ARGV`` in this process (for commands that do not start Hydra's job)."""
    old, so, se = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = ["certdp", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            cli.main()
    except SystemExit as e:
        code = e.code or 0
    finally:
        sys.argv = old
    return code, so.getvalue(), se.getvalue()


def fake_run(folder: Path, command: str = "agtr") -> Path:
    """A finished run's folder as certdp leaves it (config.yaml, a CSV, run.json last)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"command: {command}\n")
    (folder / "results.csv").write_text(f"a\n{folder.name}\n")
    results.write_run_record(folder, command=command, version="test", inputs=[])
    return folder


def digest(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def released_doc(fmt: int = 1, classes=(0, 1)) -> dict:
    """A hand-made released.json: a linear hinge model predicting sign(a - b) on two columns."""
    prep = Preprocessing(("a", "b"), np.zeros(2), np.ones(2), feature_source="public", task="binary", target="y",
                         classes=tuple(classes), label_coding="sign")
    rel = {"mechanism": "laplace_p", "epsilon": 1.0, "delta": 1e-5, "n_releases": 1, "composition": "basic",
           "parameters": [1.0, -1.0, 0.0]}
    doc = {"format": f"certdp.released/{fmt}", "command": "ags", "dataset": "csv", "task": "binary",
           "dp_end_to_end": True, "model": {"widths": [2, 1], "loss": "hinge", "n_params": 3},
           "preprocessing": prep.to_dict(), "releases": [rel]}
    if fmt == 1:
        doc.update(seed=0)
        rel.update(draw=0, test_accuracy=0.5)
    else:
        doc.update(publishable=True, note="DP values and data-independent metadata only")
        rel.update(regime="approx")
    return doc


def labelled_table(path: Path, labels, n: int = 50, seed: int = 0) -> float:
    """Rows (a, b, y) with y = [a > b] except every fifth row, written with ``labels`` (the text
    of class 0 and of class 1); returns the true accuracy of sign(a - b)."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    truth = (a > b).astype(int)
    y = truth.copy()
    y[::5] = 1 - y[::5]
    pd.DataFrame({"a": a, "b": b, "y": [labels[int(v)] for v in y]}).to_csv(path, index=False)
    return float(np.mean(truth == y))


# <key>: <what is wrong>; allowed: <what is allowed>  (cli prints it as "certdp: error: ...")
ONE_LINE_DATASET = re.compile(r"^dataset(\.[a-z_]+)?: [^\n]+; allowed: [^\n]+$")


def refused_dataset(cfg: dict, key: str, *needles: str) -> str:
    """``load_dataset(cfg)`` refuses with a one-line ConfigError naming ``key`` and holding every
    needle; returns the message."""
    import pytest
    from certdp.data import load_dataset
    from certdp.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        load_dataset(cfg, 0)
    msg = str(e.value)
    assert e.value.key == key, msg
    assert ONE_LINE_DATASET.match(msg), msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg
