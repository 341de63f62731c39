"""Every command's settings (certdp.settings, the one entrance): bad input is refused in one line
naming the key, before any result is written.

Every case runs the real command line in-process (``certdp.cli.main`` with ``sys.argv``
patched; Hydra's ``main`` composes afresh on every call) and asserts: exit status 2, exactly one
stderr line ``certdp: error: <key>: <problem>; allowed: <what>`` naming the key, no traceback, no CSV under the
run's ``out_root``.  Settings are small, so a case whose bad value is (wrongly) accepted still
finishes in about a second.  The few inputs that could allocate without bound if accepted run in
a subprocess under an address-space limit instead.  Property-based tests (hypothesis) feed random
numbers and strings to numeric keys: each must be refused naming the key or run with finite
results.  A handful of valid inputs that must run closes the file.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import math
import os
import re
import resource
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from certdp import cli
from cli_helpers import restored_root_logging
from tools.prober.bases import BASE, BLOBS, CSV, DPSGD_OPT, LIN, PATE
from tools.prober.model import merge
from tools.prober.tables import write_tables

REPO = Path(__file__).resolve().parent.parent

# The settings of each case: the prober's small settings of its command (tools/prober/bases.py,
# shared, not copied) with one thing changed.  Their hybrid settings name a tiny encoder under
# {fx}/enc, which these tests never build: a bad hybrid setting that is wrongly accepted fails
# fast at loading it instead of fine-tuning a real one.
CASES: list = []
# The fast tier (`make test`) keeps the first case of each command; every other case is marked
# slow (`make test-all`): each in-process CLI run costs a Hydra composition (~0.3 s, measured).
FAST_GROUPS: set = set()


def case(command, extra, key, *, base=None):
    """A bad-input case: ``certdp <command> <base with extra>`` must be refused naming ``key``
    (a string, or a tuple of acceptable keys)."""
    flags = [a for a in extra if a in ("-m", "--multirun")]      # Hydra takes -m before the overrides
    rest = [a for a in extra if a not in flags]
    argv = [command] + flags + merge(BASE.get(command, []) if base is None else base, rest)
    group = command
    marks = () if group not in FAST_GROUPS else (pytest.mark.slow,)
    FAST_GROUPS.add(group)
    CASES.append(pytest.param(argv, key if isinstance(key, tuple) else (key,), marks=marks,
                              id=f"{command}:{' '.join(extra)}".replace("{fx}/", "")))


def bad(command, key, values, *, base=None):
    for v in values:
        case(command, [f"{key}={v}"], key, base=base)


# ---- agtr / certify: train, seed, staircase, privacy, dataset, model, certificate ----------------
bad("agtr", "train.steps", ["abc", "2.7", "0", "-1", "inf"])
bad("agtr", "train.lr", ["abc", "0", "-1", "inf", "nan"])
bad("agtr", "train.clip", ["abc", "0", "inf", "nan"])
bad("agtr", "train.batch_size", ["abc", "2.7", "0"])
bad("agtr", "train.contraction", ["abc", "-0.5", "nan"])
bad("agtr", "seed", ["abc", "2.7", "nan"])
bad("agtr", "staircase.k_min", ["abc", "0"])
bad("agtr", "staircase.k_max", ["many", "2.7", "0"])
bad("agtr", "staircase.step", ["abc", "0"], base=merge(LIN, ["staircase.kind=range"]))
bad("agtr", "staircase.ratio", ["abc", "1", "nan"], base=merge(LIN, ["staircase.kind=geometric"]))
bad("agtr", "staircase.kind", ["foo"])
bad("agtr", "staircase.include_n", ["maybe"])
bad("agtr", "staircase.values", ["[]", "[abc]", "[-1,2]", "[2.5]"], base=merge(LIN, ["staircase.kind=list"]))
bad("agtr", "privacy.epsilons", ["[]", "[abc]", "[0]", "[-1]", "[inf]", "[nan]"])
bad("agtr", "privacy.delta", ["abc", "0", "1", "1.5", "nan"])
bad("agtr", "privacy.beta", ["abc", "0", "-1", "nan", "inf", "100"])
bad("agtr", "privacy.n_draws", ["abc", "2.7", "0", "-1"])
bad("agtr", "privacy.releases", ["[]", "[bogus]", "[cauchy_p]"])
bad("agtr", "privacy.global_sensitivity", ["foo"])
bad("agtr", "dataset.n_train", ["abc", "2.7", "0", "-1"])
bad("agtr", "dataset.n_test", ["abc", "0"])
bad("agtr", "dataset.noise", ["abc", "-1"])
bad("agtr", "dataset.output_range", ["[6,-6]", "[6]", "[a,b]", "[-inf,inf]", "[nan,1]"])
case("agtr", ["dataset.x_low=2", "dataset.x_high=1"], ("dataset.x_low", "dataset.x_high"))
bad("agtr", "model", ["foo"])
bad("agtr", "model.hidden", ["[]", "[0]", "[abc]"], base=merge(LIN, ["model=mlp"]))
bad("agtr", "certificate", ["foo"])
bad("agtr", "certificate.name", ["foo"])
bad("agtr", "certificate.aggregation", ["foo"], base=merge(LIN, ["certificate=ibp", "certificate.name=ibp"]))
bad("agtr", "certificate.substitutions", ["foo", "per_step"], base=merge(LIN, ["certificate=ibp", "certificate.name=ibp"]))
bad("agtr", "certificate.branch", ["-1", "abc"], base=merge(LIN, ["certificate=crowntt", "certificate.name=crowntt"]))
bad("agtr", "certificate.alpha_iters", ["-1", "abc", "2.5"],
    base=merge(LIN, ["certificate=crowntt", "certificate.name=crowntt"]))
# the slope optimisation is for the hinge head; LIN is an mse head
case("agtr", ["certificate.alpha_iters=5", "privacy.smoothness=unproven"], "certificate.alpha_iters",
     base=merge(LIN, ["certificate=crowntt", "certificate.name=crowntt"]))
MILP = merge(LIN, ["certificate=milp", "certificate.name=milp", "dataset.n_train=40", "train.steps=2",
                      "staircase.k_max=2", "certificate.time_limit=5", "certificate.workers=1"])
bad("agtr", "certificate.frequency", ["abc", "0", "2.7"], base=MILP)
bad("agtr", "certificate.solver", ["foo"], base=MILP)
bad("agtr", "certificate.run_time_limit", ["0", "-5", "abc", "nan", "true"], base=MILP)
bad("agtr", "certificate.solve", ["foo"], base=MILP)
# on_time_limit=refuse (a data-dependent stop) is withdrawn: refused at parse time, with or without a budget
case("agtr", ["certificate.run_time_limit=60", "certificate.on_time_limit=refuse"], "certificate.on_time_limit",
     base=MILP)
bad("agtr", "certificate.nodes", ["-1", "abc", "2.5"], base=MILP)
# MILP windows do not nest (safe solver bounds): a smooth release refuses them; an MLP is out of their scope
case("agtr", ["privacy.smoothness=proven"], "certificate.name", base=MILP)
case("agtr", ["model=mlp", "privacy.smoothness=unproven"], "certificate.name", base=MILP)
bad("agtr", "certificate.substitutions", ["per_step"], base=MILP)
case("agtr", ["dataset.output_range=null"], ("dataset.output_range", "privacy.global_sensitivity"))
bad("certify", "staircase.k_max", ["many"])
bad("certify", "train.steps", ["2.7"])
bad("certify", "privacy.beta", ["nan"])
# unknown keys: `+key=v` (the spelling Hydra itself suggests) must not be silently ignored
case("agtr", ["+privacy.epsilon=1"], "privacy.epsilon")
case("agtr", ["+train.step=3"], "train.step")
case("agtr", ["privacy.epsilon=1"], "privacy.epsilon")
case("agtr", ["privacy.epsilons=[1,2"], "privacy.epsilons")
case("agtr", ["-m", "train.clip=0.5,abc"], "train.clip")
case("agtr", ["out_root={fx}/afile/sub"], "out_root")
# ---- csv tables ------------------------------------------------------------------------------
TABLE = ("dataset.path", "dataset.features", "dataset.target")
# (inf10/nan10: a bad cell in every tenth row, public and test rows among them; a bad cell in a
# private row is imputed or clipped, not refused: tests/test_certify.py)
for name, keys in (("dir", "dataset.path"), ("empty.csv", "dataset.path"), ("header.csv", TABLE),
                   ("binary.csv", "dataset.path"), ("inf10.csv", TABLE), ("nan10.csv", TABLE + ("dataset.dropna",)),
                   ("const.csv", TABLE), ("big.csv", TABLE), ("dup.csv", TABLE), ("ragged.csv", "dataset.path"),
                   ("missing.csv", "dataset.path")):
    case("agtr", [f"dataset.path={{fx}}/csv/{name}"], keys, base=CSV)
bad("agtr", "dataset.n_test", ["abc", "0", "2.7", "1000"], base=CSV)
bad("agtr", "dataset.target", ["nope"], base=CSV)
bad("agtr", "dataset.output_range", ["[5,-5]"], base=CSV)
# ---- audit -----------------------------------------------------------------------------------
bad("audit", "audit.repeats", ["abc", "0", "2.7"])
bad("audit", "audit.radii", ["[]", "[abc]", "[0]", "[2.5]", "[1000]"])
bad("audit", "audit.modes", ["[]", "[foo]"])
bad("audit", "audit.n_test", ["abc", "0", "2.7"])
bad("audit", "audit.smoothness", ["abc", "-1", "2.7"])
bad("audit", "train.clip", ["inf"])
bad("audit", "train.lr", ["inf"])
# ---- pate ------------------------------------------------------------------------------------
bad("pate", "pate.shards", ["[]", "[abc]", "[0]", "[2.5]", "[1000]"])
bad("pate", "pate.arms", ["[]", "[foo]"])
bad("pate", "pate.max_train", ["abc", "0", "2.7"])
bad("pate", "pate.full_staircase", ["foo"])
bad("pate", "pate.staircase.k_max", ["abc"])
bad("pate", "pate.staircase.values", ["[]", "[-1,2]"], base=merge(PATE, ["pate.staircase.kind=list"]))
# ---- feasibility -----------------------------------------------------------------------------
bad("feasibility", "feasibility.confidence.step", ["0", "-0.01", "abc", "nan"])
bad("feasibility", "feasibility.confidence.start", ["abc", "0", "1.5"])
bad("feasibility", "feasibility.confidence.stop", ["abc", "1"])
bad("feasibility", "feasibility.confidence.values", ["[0.5,abc]", "[0]", "[1]"])
bad("feasibility", "feasibility.c", ["[]", "[abc]", "[0]", "[inf]"])
bad("feasibility", "feasibility.delta", ["[]", "0", "1", "abc"])
bad("feasibility", "feasibility.cauchy_factor", ["abc", "0", "inf", "[6,2]"])
bad("feasibility", "feasibility.approx_window", ["[1.0,0.8]", "[0.8]", "[]", "[abc,1]"])
case("feasibility", ["+feasibility.cee=[1]"], "feasibility.cee")
# ---- ags -------------------------------------------------------------------------------------
bad("ags", "ags.releases_n", ["two", "2.7", "0", "100"])
bad("ags", "ags.sampling_steps", ["[3,2,5]", "[2,2,5]", "[1,3]", "[abc]", "[2.5,5]"])
bad("ags", "ags.composition", ["foo"])
bad("ags", "ags.share_ratio", ["abc", "1", "nan"])
bad("ags", "ags.ablation_n", ["[0]", "[abc]", "[100]"])
bad("ags", "ags.ablation_draws", ["0", "abc", "2.7"], base=merge(BLOBS, ["ags.ablation_n=[1]"]))
bad("ags", "ags.baselines", ["[foo]"])
bad("ags", "ags.baseline_draws", ["0", "abc"], base=merge(BLOBS, ["ags.baselines=[dpsgd_matched]"]))
bad("ags", "privacy.epsilons", ["[]", "[0]", "[nan]"])
bad("ags", "privacy.delta", ["0", "abc"])
bad("ags", "privacy.releases", ["[cauchy]", "[]"])
bad("ags", "privacy.beta", ["nan", "abc", "1e6"])
bad("ags", "privacy.n_draws", ["0", "2.7"])
bad("ags", "train.lr", ["inf", "nan"])
bad("ags", "dataset.n_features", ["0", "abc"])
bad("ags", "dataset.cluster_std", ["0", "nan"])
bad("ags", "staircase.values", ["[]", "[-1,2]"], base=merge(BASE["ags"], ["staircase.kind=list"]))   # blobs runs kind=range
case("ags", ["dataset=linear"], "dataset", base=[a for a in BLOBS if not a.startswith("dataset")])
# ---- dpsgd -----------------------------------------------------------------------------------
bad("dpsgd", "dpsgd.arms", ["[foo]", "[]"])
bad("dpsgd", "dpsgd.optimised.accountants", ["[foo]"], base=DPSGD_OPT)
bad("dpsgd", "dpsgd.optimised.grid.lr", ["[abc]", "[-1]", "[]"], base=DPSGD_OPT)
bad("dpsgd", "dpsgd.optimised.grid.batch_size", ["[0]", "[2.5]"], base=DPSGD_OPT)
bad("dpsgd", "privacy.epsilons", ["[]", "[0]"])
bad("dpsgd", "train.clip", ["0", "nan"])
# ---- hybrid (parsed before any data or encoder is loaded) ------------------------------------
bad("hybrid", "dataset.encoder", ["foo"])
bad("hybrid", "dataset.max_seq_length", ["abc", "2.7"])
bad("hybrid", "dataset.n_private", ["1", "2.7"])
bad("hybrid", "privacy.epsilons", ["[]", "[0]", "[nan]"])
bad("hybrid", "privacy.delta", ["0", "2"])
bad("hybrid", "split.fractions", ["[]", "[1.5]"])
bad("hybrid", "lora.rank", ["0", "2.7"])
bad("hybrid", "lora.dropout", ["1", "nan"])
bad("hybrid", "dpsgd.lr", ["abc", "inf", "nan"])
bad("hybrid", "dpsgd.accountant", ["foo"])
bad("hybrid", "head.steps", ["0", "2.7"])
bad("hybrid", "head.lr", ["inf", "nan"])
bad("hybrid", "head.clip", ["nan"])
bad("hybrid", "head.contraction", ["1.5", "nan"])
bad("hybrid", "head.releases", ["[foo]", "[]"])
bad("hybrid", "head.beta", ["nan", "-1", "100"])
case("hybrid", ["dataset=linear"], "dataset")
bad("hybrid", "dpsgd_head.lrs", ["[]", "[-1]"])
bad("hybrid", "hybrid.arms", ["[foo]", "[]"])
bad("hybrid", "hybrid.threshold", ["foo"])
bad("hybrid", "hybrid.size_sweep.n_private", ["[1]", "[2.5]"])
bad("hybrid", "hybrid.work_dir", ["{fx}/afile/work"])
bad("hybrid", "profile", ["foo"])
# ---- figures (not a Hydra command: figure names and key=value settings) ----------------------
for extra, key in ((["profile=foo"], "profile"), (["jobs=abc"], "jobs"), (["jobs=0"], "jobs"),
                   (["jobs=2.5"], "jobs"), (["launcher=foo"], "launcher"), (["--list", "profile=foo"], "profile")):
    CASES.append(pytest.param(["figures", "cond_table", *extra, "out_root={out}/o"], (key,),
                              id=f"figures:{' '.join(extra)}"))
CASES.append(pytest.param(["figures", "nosuchfig", "out_root={out}/o"], ("figures", "nosuchfig"),
                          id="figures:unknown figure"))


# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """The prober's csv tables below ``csv/``, good and bad, and a regular file ``afile`` where a
    folder is expected (tools/prober/tables.py)."""
    return write_tables(tmp_path_factory.mktemp("bad_tables"))


def invoke(argv: list[str], *, fx: Path, out: Path) -> tuple[int, str, str]:
    """Run ``certdp <argv>`` in this process; returns (exit status, stdout, stderr).  A crash
    that escapes ``main`` is printed as the interpreter would (a traceback, status 1)."""
    argv = [a.replace("{fx}", str(fx)).replace("{out}", str(out)).replace("{repo}", str(REPO)) for a in argv]
    if argv and argv[0] not in ("figures", "list") and not any(a.startswith("out_root=") for a in argv):
        argv.append(f"out_root={out / 'o'}")
    env, cwd, old_argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.update({"CERTDP_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "CERTDP_CACHE": str(out / "cache")})
    os.environ.pop("CERTDP_DATA_DIR", None)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)                    # anything written relative to the working folder lands here
    so, se = io.StringIO(), io.StringIO()
    old_out, old_err = sys.stdout, sys.stderr
    sys.argv = ["certdp", *argv]
    with restored_root_logging():
        try:
            with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
                try:
                    cli.main()
                    code = 0
                except SystemExit as e:
                    code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
                    if isinstance(e.code, str):
                        print(e.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
                    code = 1
        finally:
            sys.stdout, sys.stderr = old_out, old_err     # whatever the command did to them
            sys.argv = old_argv
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
    return code, so.getvalue(), se.getvalue()


def assert_refused(code: int, err: str, keys: tuple, out: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "Error executing job" not in err, err[-2000:]
    assert code == 2, f"exit {code}: {err[-800:]}"
    assert len(lines) == 1, f"{len(lines)} stderr lines:\n{err[-1500:]}"
    named = re.match(r"^certdp: error: ([^\s:]+): .*?; allowed: \S", lines[0])      # the one format of a refusal
    assert named, lines[0]
    assert any(named.group(1) == k or named.group(1).startswith(k + "=") for k in keys), \
        f"named {named.group(1)!r}, expected {' or '.join(keys)}: {lines[0]}"
    left = sorted(f for f in (out / "o").rglob("*.csv")          # a staging folder is no result
                  if not any(".incomplete-" in part or ".replaced-" in part for part in f.parts)) \
        if (out / "o").exists() else []
    assert not left, f"results left behind: {left[:3]}"


@pytest.mark.parametrize("argv,keys", CASES)
def test_bad_input_is_refused_in_one_line_naming_the_key(argv, keys, tables, tmp_path):
    code, _, err = invoke(argv, fx=tables, out=tmp_path)
    assert_refused(code, err, keys, tmp_path)


def test_there_are_enough_cases():
    assert len(CASES) >= 120


# --------------------------------------------------------------------------------------------
# Inputs that would allocate without bound if accepted: run in a subprocess with a memory limit.
CAPPED = [
    pytest.param(["feasibility", "feasibility.confidence.step=1e-9"],
                 ("feasibility.confidence.step", "feasibility.confidence"), id="feasibility:tiny step"),
    pytest.param(["feasibility", "feasibility.confidence.values=null", "feasibility.confidence.start=1e-12",
                  "feasibility.confidence.step=1e-12"],
                 ("feasibility.confidence.step", "feasibility.confidence"), id="feasibility:tiny step from 1e-12"),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,keys", CAPPED)
def test_huge_grids_are_refused_with_a_cap(argv, keys, tmp_path):
    limit = 6 << 30

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    env = {**os.environ, "CERTDP_OFFLINE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "certdp.cli", *argv, f"out_root={tmp_path / 'o'}"], capture_output=True,
                       text=True, env=env, preexec_fn=cap, timeout=300, cwd=tmp_path)
    assert "MemoryError" not in r.stderr
    assert_refused(r.returncode, r.stderr, keys, tmp_path)


# --------------------------------------------------------------------------------------------
# Property-based: numeric keys get random numbers and strings; each value is refused naming the
# key or the run completes with finite, filled-in results.
# words (which include inf, nan, true, null ...): the typed parsing is under test, not Hydra's grammar
TEXT = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,7}", fullmatch=True)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
# No shrinking: every example is a whole CLI run, and the first failing value is informative as it is.
PROPS = settings(max_examples=15, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                 report_multiple_bugs=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return str(v)


_EXAMPLE = itertools.count()


def refused_or_finite(command: str, base: list[str], key: str, value, files: tuple[str, ...], tmp: Path) -> None:
    out = tmp / f"example{next(_EXAMPLE)}"
    argv = [command] + merge(base, [f"{key}={_fmt(value)}"])
    code, _, err = invoke(argv, fx=tmp, out=out)
    if code == 0:
        runs = {p.parent for p in (out / "o").rglob("config.yaml") if ".hydra" not in p.parts}
        assert len(runs) == 1, runs
        run = runs.pop()
        for name in files:
            text = (run / f"{name}.csv").read_text()
            try:
                df = pd.read_csv(run / f"{name}.csv")
            except (ValueError, pd.errors.ParserError) as e:
                pytest.fail(f"{key}={_fmt(value)}: exit 0 but {name}.csv is unreadable ({e})")
            assert len(df) > 0, f"{key}={_fmt(value)}: exit 0 but {name}.csv has no rows"
            cells = {c.strip().lower() for line in text.splitlines()[1:] for c in line.split(",")}
            assert not cells & {"nan", "inf", "-inf"}, f"{key}={_fmt(value)}: non-finite cells in {name}.csv"
            num = df.select_dtypes("number")
            assert np.isfinite(num.to_numpy(dtype=float)[~num.isna().to_numpy()]).all()
    else:
        assert_refused(code, err, (key,), out)


@pytest.mark.slow
@PROPS
@given(value=st.one_of(FLOATS, TEXT, st.integers(-10, 10**6)))
def test_train_lr_refused_or_finite(value, tmp_path):
    refused_or_finite("agtr", LIN, "train.lr", value, ("results", "certificate"), tmp_path)


@pytest.mark.slow
@PROPS
@given(value=st.one_of(st.lists(st.one_of(FLOATS, TEXT), min_size=0, max_size=3), FLOATS))
def test_privacy_epsilons_refused_or_finite(value, tmp_path):
    refused_or_finite("agtr", LIN, "privacy.epsilons", value, ("results", "certificate"), tmp_path)


@pytest.mark.slow
@PROPS
@given(value=st.one_of(st.integers(-10, 100_000), FLOATS, TEXT))
def test_staircase_k_max_refused_or_finite(value, tmp_path):
    refused_or_finite("certify", LIN, "staircase.k_max", value, ("certificate", "envelopes"), tmp_path)


@pytest.mark.slow
@PROPS
@given(value=st.one_of(st.floats(min_value=1e-3, max_value=2.0), st.floats(max_value=0), TEXT))
def test_feasibility_step_refused_or_finite(value, tmp_path):
    refused_or_finite("feasibility", [], "feasibility.confidence.step", value, ("results", "peaks"), tmp_path)


@pytest.mark.slow
@PROPS
@given(value=st.one_of(st.integers(-5, 60), FLOATS, TEXT))
def test_ags_releases_n_refused_or_finite(value, tmp_path):
    refused_or_finite("ags", BLOBS, "ags.releases_n", value, ("results",), tmp_path)


# --------------------------------------------------------------------------------------------
# Valid input that must run (some are refused or crash today).
VALID = [
    pytest.param(["feasibility", "feasibility.confidence.step=0.01"], ("results", "peaks"), id="feasibility step 0.01"),
    pytest.param(["feasibility", "feasibility.confidence.step=0.05"], ("results", "peaks"), id="feasibility step 0.05"),
    pytest.param(["agtr", "dataset=csv", "dataset.path={fx}/csv/good.csv", "dataset.target=y", "dataset.output_range=[-5,5]",
                  "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5"], ("results", "certificate"),
                 id="README csv example without n_test"),
    pytest.param(["agtr", *merge(LIN, ["staircase.kind=range", "staircase.k_max=1000000000"])],
                 ("results", "certificate"), id="k_max far above N is capped at N"),
    pytest.param(["agtr", *LIN, "privacy.epsilons=1"], ("results", "certificate"), id="a scalar epsilon"),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,files", VALID)
def test_valid_input_runs_with_finite_results(argv, files, tables, tmp_path):
    if "staircase.k_max=1000000000" in argv:
        # guarded like the capped cases: list(range(1, 1e9)) must not be what caps the radii
        env = {**os.environ, "CERTDP_OFFLINE": "1", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        r = subprocess.run([sys.executable, "-m", "certdp.cli", *argv, f"out_root={tmp_path / 'o'}"], capture_output=True,
                           text=True, env=env, timeout=300, cwd=tmp_path,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)))
        code, err = r.returncode, r.stderr
    else:
        code, _, err = invoke(argv, fx=tables, out=tmp_path)
    assert code == 0 and "Traceback" not in err, err[-1500:]
    runs = {p.parent for p in (tmp_path / "o").rglob("config.yaml") if ".hydra" not in p.parts}
    assert len(runs) == 1
    run = runs.pop()
    for name in files:
        df = pd.read_csv(run / f"{name}.csv")
        num = df.select_dtypes("number").to_numpy(dtype=float)
        assert len(df) > 0 and np.isfinite(num[~np.isnan(num)]).all() and not np.isnan(num).all()


def test_an_in_process_run_closes_no_handler_or_stream_it_did_not_open(tables, tmp_path):
    """A run inside a host process (these tests, a notebook) leaves the host's logging alone:
    a handler the run did not create stays open with its stream (Hydra's own logging setup
    closes every handler in the process, and absl's handler then closes the stream it writes
    to, pytest's captured stderr among them), and the run's own handlers are gone afterwards.
    A root handler on stderr (opacus installs one when imported) does not receive the run's
    log, so that stderr holds only errors."""
    foreign = logging.FileHandler(tmp_path / "host.log")        # registered, attached to no logger
    class OnStderr(logging.Handler):                  # as opacus' logging.basicConfig, on the stderr of the moment
        def emit(self, record):
            sys.stderr.write(self.format(record) + "\n")
    on_stderr = OnStderr()
    logging.getLogger().addHandler(on_stderr)
    before = {name: (lg.handlers[:], lg.level, lg.propagate)
              for name, lg in (("root", logging.getLogger()), ("certdp", logging.getLogger("certdp")))}
    try:
        code, out, err = invoke(["agtr", *LIN], fx=tables, out=tmp_path / "run")
        assert code == 0, err[-1500:]
        assert not foreign.stream.closed
        assert {name: (lg.handlers[:], lg.level, lg.propagate)
                for name, lg in (("root", logging.getLogger()), ("certdp", logging.getLogger("certdp")))} == before
        assert "AGT-R on linear" in out                                              # the log is on stdout
        assert err.strip() == "", err
        assert list((tmp_path / "run" / "o").rglob("log.txt")), "the run wrote no log.txt"
    finally:
        logging.getLogger().removeHandler(on_stderr)
        foreign.close()

