"""The command registry (certdp/commands/): one entry per command owns its name, help, settings
sections and parser, runner and cost model; the command line, its help, `certdp list`, rerun and
the estimate read the registry.  A toy command added as one module and one config, nothing else
edited, runs end to end through the real command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from certdp import commands
from certdp.settings import config_dir

ROOT = Path(__file__).resolve().parent.parent

TOY_MODULE = '''
"""A toy command: the squares of 0..toy.n-1 (tests/test_commands.py)."""
from dataclasses import dataclass
from functools import partial
from typing import Any

from certdp.commands import Command
from certdp.data.params import Field, integer
from certdp.estimate.work import Work
from certdp.settings.base import strict, top_level

FIELDS = {"n": Field(3, partial(integer, lo=1, hi=100), help="how many squares")}


@dataclass(frozen=True)
class ToySettings:
    run: Any
    toy: dict
    command: str = "toy"


def settings(cfg):
    run, sec = top_level(cfg, command="toy", sections=("dataset", "toy"))
    return ToySettings(run, strict(sec["toy"], FIELDS, prefix="toy"))


def run(settings, *, progress):
    import pandas as pd
    n = settings.toy["n"]
    return {"squares": pd.DataFrame({"i": range(n), "square": [i * i for i in range(n)], "dp_end_to_end": False})}


COMMANDS = (Command("toy", "Squares of 0..n-1 (a toy).", ("certdp toy", "certdp toy toy.n=5"), ("dataset", "toy"),
                    settings, "certdp.commands.toy:run", lambda settings: Work(unmodelled=["the toy's squares"])),)
'''

TOY_CONFIG = """\
defaults:
  - base
  - _self_

command: toy
dataset:
  name: none
toy:
  n: 3
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A tree beside the checkout with one module (certdp/commands/toy.py, found on the package's
    path) and a config folder (the shipped configs plus toy.yaml, named by $CERTDP_CONFIG_DIR)."""
    tmp = tmp_path_factory.mktemp("toy")
    (tmp / "plugin" / "certdp" / "commands").mkdir(parents=True)
    (tmp / "plugin" / "certdp" / "commands" / "toy.py").write_text(textwrap.dedent(TOY_MODULE))
    shutil.copytree(config_dir(), tmp / "configs")
    (tmp / "configs" / "toy.yaml").write_text(TOY_CONFIG)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp / "plugin")]),
           "CERTDP_CONFIG_DIR": str(tmp / "configs")}
    return tmp, env


def certdp(env, *args, cwd):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_every_command_has_its_config_and_its_sections():
    reg = commands.registry()
    assert list(reg)[:9] == ["agtr", "certify", "pate", "feasibility", "audit", "ags", "dpsgd", "dpaudit", "hybrid"]
    for name, c in reg.items():
        assert c.name == name and (config_dir() / f"{name}.yaml").is_file()
        assert c.sections and all(isinstance(s, str) for s in c.sections)
        assert c.runner.startswith("certdp.methods.") and ":" in c.runner


def test_a_second_command_of_a_name_is_refused(monkeypatch):
    from certdp.registry import Registry
    reg = Registry("command", commands.registry().items())
    with pytest.raises(ValueError, match="duplicate command name 'agtr'"):
        reg["agtr"] = commands.Command("agtr", "other", ("a", "b"), (), lambda cfg: cfg, "x:y")


def test_the_estimate_reads_each_command_s_cost_model(monkeypatch):
    """work_of asks the command's entry: a planted cost model is what the estimate counts."""
    from dataclasses import replace

    from certdp import estimate as E
    from certdp.estimate.work import Work
    from certdp.settings.compose import compose_and_parse
    from certdp import results
    results.register_resolvers()
    (s,) = compose_and_parse("feasibility", [], multirun=False, config_path=str(config_dir()), config_name="feasibility")
    assert E.work_of(s) == Work()
    planted = replace(commands.get("feasibility"), cost=lambda settings: Work(train=[(7.0, 3.0)]))
    real = commands.get
    monkeypatch.setattr(commands, "get", lambda name: planted if name == "feasibility" else real(name))
    assert E.work_of(s).train == [(7.0, 3.0)]


@pytest.mark.slow
def test_a_toy_command_is_one_module_and_one_config(toy, tmp_path):
    tmp, env = toy
    top = certdp(env, "--help", cwd=tmp_path)
    assert top.returncode == 0 and "toy" in top.stdout and "Squares of 0..n-1" in top.stdout
    h = certdp(env, "toy", "--help", cwd=tmp_path)
    assert h.returncode == 0 and "the sections dataset, toy;" in " ".join(h.stdout.split()), h.stdout
    assert "certdp toy toy.n=5" in h.stdout
    lst = certdp(env, "list", cwd=tmp_path)
    assert "commands: agtr, certify, pate, feasibility, audit, ags, dpsgd, dpaudit, hybrid, toy," in lst.stdout

    out = tmp_path / "o"
    r = certdp(env, "toy", "toy.n=4", f"out_root={out}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (out / "toy" / "none").iterdir()
    assert (run_dir / "squares.csv").read_text().splitlines()[1:] == ["0,0,False", "1,1,False", "2,4,False",
                                                                      "3,9,False"]
    assert (run_dir / "run.json").is_file()

    bad = certdp(env, "toy", "toy.n=0", f"out_root={out}", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("certdp: error: toy.n: got 0"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    unknown = certdp(env, "toy", "+toy.m=1", f"out_root={out}", cwd=tmp_path)
    assert unknown.returncode == 2 and "toy.m: unknown setting" in unknown.stderr, unknown.stderr

    again = certdp(env, "rerun", str(run_dir), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    runs = sorted(p for p in (out / "toy" / "none").iterdir() if p != run_dir)
    assert len(runs) == 1 and (runs[0] / "squares.csv").read_bytes() == (run_dir / "squares.csv").read_bytes()

    est = subprocess.run([sys.executable, "-c", "from certdp import commands; from types import SimpleNamespace as N; "
                          "print(commands.get('toy').work(N(command='toy')).unmodelled)"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert est.stdout.strip() == "[\"the toy's squares\"]", est.stderr

    # the checkout itself was not edited: the toy lives in tmp only
    assert not (ROOT / "certdp" / "commands" / "toy.py").exists() and not (ROOT / "configs" / "toy.yaml").exists()
