"""The CLI end to end on small data, Hydra features, one-line errors for bad input, and the
surfaces of issue 28: predict's edges, one format for every refusal, the README's commands,
`make clean`, and an import of certdp without side effects."""

import ast
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from certdp import cli
from cli_helpers import labelled_table, main_in_process, one_line, released_doc

SMALL = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=8",
         "privacy.epsilons=[0.5,1]", "privacy.n_draws=20", "train.steps=5"]


def certdp(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _run_dir(root: Path) -> Path:
    dirs = [p.parent for p in root.rglob("results.csv")]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.slow
def test_agtr_small_run_writes_valid_csvs(tmp_path):
    r = certdp("agtr", *SMALL, f"out_root={tmp_path}", "run=a")
    assert r.returncode == 0, r.stderr
    d = _run_dir(tmp_path)
    assert d == tmp_path / "agtr" / "linear" / "a"
    res = pd.read_csv(d / "results.csv")
    need = {"dataset", "arm", "regime", "epsilon", "delta", "beta", "n_test", "n_draws", "mae", "mse",
            "nonprivate_mae", "nonprivate_mse", "ss_mean", "ss_median", "seed"}
    assert need <= set(res.columns)
    assert set(res.arm) == {"agtr", "gs"} and set(res.regime) == {"pure", "approx"}
    assert (res.mae > 0).all() and (res.n_draws == 20).all()
    cert = pd.read_csv(d / "certificate.csv")
    assert {"k", "a_bar_mean", "a_bar_median", "contribution_mean", "beta"} <= set(cert.columns)
    assert (d / "config.yaml").exists() and (d / "log.txt").exists()
    assert not list(d.glob("*.part"))


@pytest.mark.slow
def test_same_config_and_seed_give_the_same_csv(tmp_path):
    for run in ("x", "y"):
        assert certdp("agtr", *SMALL, f"out_root={tmp_path}", f"run={run}").returncode == 0
    a = (tmp_path / "agtr/linear/x/results.csv").read_text()
    b = (tmp_path / "agtr/linear/y/results.csv").read_text()
    assert a == b


@pytest.mark.slow
def test_certify_and_cfg_job(tmp_path):
    r = certdp("certify", *SMALL, "--cfg", "job")
    assert r.returncode == 0 and "staircase:" in r.stdout and "k_max: 8" in r.stdout
    r = certdp("certify", *SMALL, f"out_root={tmp_path}", "run=c")
    assert r.returncode == 0, r.stderr
    env = pd.read_csv(tmp_path / "certify/linear/c/envelopes.csv")
    assert list(env.k) == list(range(1, 9)) + [200]
    assert (env.width_max.diff().dropna() >= -1e-15).all()      # nested envelopes widen with k


@pytest.mark.slow
def test_multirun_sweep(tmp_path):
    r = certdp("agtr", "-m", *SMALL, "privacy.releases=[cauchy]", "train.clip=0.5,1.0", f"out_root={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.rglob("results.csv"))) == 2


@pytest.mark.slow
@pytest.mark.parametrize("override,key", [
    ("dataset=nope", "dataset"),
    ("privacy.epsilons=[0,1]", "privacy.epsilons"),
    ("privacy.epsilons=[-1]", "privacy.epsilons"),
    ("privacy.delta=1.5", "privacy.delta"),
    ("privacy.delta=0", "privacy.delta"),
    ("privacy.beta=0.9", "privacy.beta"),
    ("train.lr=-1", "train.lr"),
    ("privacy.releases=[bogus]", "privacy.releases"),
])
def test_bad_input_is_one_line_naming_the_key(tmp_path, override, key):
    r = certdp("agtr", *SMALL, override, f"out_root={tmp_path}")
    assert r.returncode != 0
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert key in lines[0] and "Traceback" not in r.stderr
    assert not list(tmp_path.rglob("results.csv"))


@pytest.mark.slow
def test_staircase_that_cannot_cover_n_without_gs_is_rejected(tmp_path):
    r = certdp("agtr", *SMALL, "dataset.output_range=null", "privacy.global_sensitivity=none", "staircase.include_n=false",
               "privacy.releases=[cauchy]", f"out_root={tmp_path}")
    assert r.returncode != 0
    assert "staircase" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_list_shows_datasets_releases_and_accountants():
    from certdp.privacy import accounting, mechanisms
    r = certdp("list")
    assert r.returncode == 0
    for word in ("linear", "california", "csv", "ibp", "crown"):
        assert word in r.stdout
    for name, cls in mechanisms.REGISTRY.items():          # every release, with its docstring's help
        line = next(l for l in r.stdout.splitlines() if l.split()[:1] == [name])
        assert cls.kind in line and cls.help()[:40] in line
    for name in ("cauchy_p", "laplace_union_p", "cauchy", "gaussian_gs"):
        assert name in mechanisms.REGISTRY
    for name in accounting.ACCOUNTANTS:
        assert any(l.split()[:1] == [name] for l in r.stdout.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("args,key", [
    (["+privacy.epsilon=1"], "privacy.epsilon"),             # Hydra's own suggestion for a typo
    (["privacy.epsilon=1"], "privacy.epsilon"),
    (["privacy.epsilons=[1,2"], "privacy.epsilons"),
    (["+foo=1"], "foo"),
    (["-m", "train.clip=0.5,abc"], "train.clip"),            # the second job is refused before the first runs
])
def test_unknown_keys_and_bad_sweeps_are_refused_before_any_job(tmp_path, args, key):
    flags = [a for a in args if a == "-m"]
    r = certdp("agtr", *flags, *SMALL, *[a for a in args if a != "-m"], f"out_root={tmp_path}")
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"certdp: error: {key}: "), lines[0]
    assert not list(tmp_path.rglob("*.csv"))


@pytest.mark.slow
def test_help_shows_groups_and_examples():
    r = certdp("agtr", "--help")
    assert r.returncode == 0 and "dataset" in r.stdout and "certdp agtr dataset=california" in r.stdout


@pytest.mark.slow
def test_blobs_crowntt_ags_and_the_basic_composition_arm(tmp_path):
    """certificate=crowntt through `certdp ags` (rows marked unproven), the per-epoch option on the
    command line, and the two matched DP-SGD arms labelled apart in results.csv."""
    base = ["dataset=blobs", "dataset.n_test=200", "train.steps=12", "privacy.epsilons=[20]", "privacy.n_draws=5",
            f"out_root={tmp_path}"]
    r = certdp("ags", *base, "certificate=crowntt", "privacy.smoothness=unproven",
               "ags.baselines=[dpsgd_matched,dpsgd_matched_basic]", "run=tt")
    assert r.returncode == 0, r.stderr
    res = pd.read_csv(tmp_path / "ags/blobs/tt/results.csv")
    assert set(res[res.arm == "AGS"].certificate) == {"crowntt"}
    assert not res[res.arm == "AGS"].smoothness_proof.any()
    comp = dict(zip(zip(res.arm, res.regime), res.composition))
    assert comp[("DP-SGD matched (basic)", "pure")] == "basic_steps"
    assert comp[("DP-SGD matched", "pure")] == "basic_participations"
    r = certdp("ags", *base, "certificate=crowntt", "ags.baselines=[]", "run=refused")
    assert r.returncode == 2 and r.stderr.strip().startswith("certdp: error: certificate.name") \
        and "privacy.smoothness=unproven" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = certdp("ags", *base, "certificate.substitutions=per_batch", "ags.baselines=[]", "run=pb")
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------ certdp predict (issue 28, item 12)
def _released(tmp_path, params=None, classes=(0, 1)) -> Path:
    doc = released_doc(2, classes)
    if params is not None:
        doc["releases"][0]["parameters"] = params
    src = tmp_path / "released.json"
    src.write_text(json.dumps(doc))
    return src


def test_predict_refuses_a_row_whose_score_overflows(tmp_path):
    """2*1e308 + 2*(-1e308) is inf - inf = NaN in float64: no class, so a refusal, not a label."""
    src = _released(tmp_path, params=[2.0, 2.0, 0.0], classes=(-1, 1))
    (tmp_path / "t.csv").write_text("a,b\n1,2\n1e308,-1e308\n")
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
    line = one_line(err)
    assert code == 2 and line.startswith("certdp: error: --input: ") and "data row 2" in line and "; allowed: " in line
    assert not out


def test_predict_needs_one_data_row_and_says_so(tmp_path):
    src = _released(tmp_path)
    (tmp_path / "empty.csv").write_text("")
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "empty.csv"))
    assert code == 2 and one_line(err).startswith("certdp: error: --input: ") and not out
    assert "at least one data row" in err and "3 data rows" not in err
    (tmp_path / "one.csv").write_text("a,b\n1,2\n")
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "one.csv"))
    assert code == 0 and len(pd.read_csv(io.StringIO(out))) == 1, err


def test_predict_output_into_a_folder_it_cannot_write_names_the_output(tmp_path):
    src = _released(tmp_path)
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    (tmp_path / "afile").write_text("a regular file\n")
    targets = [tmp_path / "no-such-folder" / "p.csv", tmp_path / "afile" / "p.csv"]     # below a file: was a traceback
    if Path("/proc").is_dir():
        targets.append(Path("/proc/p.csv"))                   # exists, writes fail even as root
    if os.geteuid() != 0:                                     # root writes into a read-only folder
        (tmp_path / "ro").mkdir(mode=0o555)
        targets.append(tmp_path / "ro" / "p.csv")
    for target in targets:
        code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"), "--output", str(target))
        line = one_line(err)
        assert code == 2 and line.startswith("certdp: error: --output: ") and "; allowed: " in line, err
        assert str(target.parent) in line and ".part" not in line and not out
        assert not target.exists() if target.parent.is_dir() or not target.parent.exists() else target.parent.is_file()


def test_predict_writes_the_same_csv_to_a_file_and_to_standard_output(tmp_path, monkeypatch):
    src = _released(tmp_path)
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    monkeypatch.chdir(tmp_path)
    code, via_dash, err = main_in_process("predict", str(src), "--input", "t.csv", "--output", "-")
    assert code == 0 and not (tmp_path / "-").exists(), err           # "-" is standard output, not a file
    code, plain, _ = main_in_process("predict", str(src), "--input", "t.csv")
    assert code == 0 and main_in_process("predict", str(src), "--input", "t.csv", "--output", "p.csv")[0] == 0
    assert via_dash == plain == (tmp_path / "p.csv").read_text()
    assert plain.splitlines()[1].startswith("laplace_p,1,0,")          # epsilon written alike: 1, not 1.0


# ------------------------------------------------------------------------------ one format for every refusal (item 13)
REFUSAL = re.compile(r"^certdp: error: (\S.*?): (.+?); allowed: (\S.*)$")
ROOT = Path(__file__).resolve().parent.parent
# what raises or prints a refusal, and which argument is its message
REFUSERS = {"ConfigError": -1, "fail": 0, "OutputRefused": 0, "_refuse": 0}


def _literal(node) -> str | None:
    """The text of a message expression with each interpolated value as {}; None when no part is literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _literal(node.left), _literal(node.right)
        return None if a is None and b is None else (a or "{}") + (b or "{}")
    if isinstance(node, ast.IfExp):                           # each branch must say what is allowed
        a, b = _literal(node.body), _literal(node.orelse)
        return None if a is None or b is None else a if "; allowed: " not in a else b
    return None


def test_every_refusal_in_the_source_has_an_allowed_part():
    """A sweep of every refusal site (ConfigError, fail, OutputRefused, _refuse) whose message is
    written out: it says what is allowed, after '; allowed: '.  A message that only prefixes a
    key to another refusal (``f"--output: {e}"``) passes that one's format on."""
    bad, n = [], 0
    for path in sorted((ROOT / "certdp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in REFUSERS or (name == "ConfigError" and len(node.args) < 2):
                continue
            text = _literal(node.args[REFUSERS[name]])
            if text is None:
                continue
            n += 1
            if "; allowed: " not in text and not re.fullmatch(r"[\w.\-\[\]{}]*(: )?(\{\})+", text):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:100]}")
    assert n > 250 and not bad, "\n".join(bad)


def _finished_csv_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished agtr run on a csv, as certdp records it (config.yaml, run.json with the input's
    checksum), made by hand: a rerun reads only these two files before it replays the run."""
    from certdp import __version__, results
    data = tmp_path / "d.csv"
    data.write_text("x,y\n" + "".join(f"{i / 10},{i / 5}\n" for i in range(30)))
    run = tmp_path / "o" / "agtr" / "csv" / "r"
    run.mkdir(parents=True)
    cfg = {"command": "agtr", "seed": 0, "default_certificate": "crown", "progress": False, "out_root": str(tmp_path / "o"),
           "run": "r", "overwrite": False, "selection": "fixed", "config_format": results.CONFIG_FORMAT,
           "dataset": {"name": "csv", "path": str(data), "target": "y"}}
    results.write_config(run / results.CONFIG_FILE, cfg)
    (run / "results.csv").write_text("a\n1\n")
    results.write_run_record(run, command="agtr", version=__version__, inputs=results.input_records(cfg))
    return run, data


def test_the_refusals_of_issue_28_follow_the_format(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, data = _finished_csv_run(tmp_path)
    data.unlink()                                             # the run's input is gone: one line, not two
    cases = [(["certify", "dataset=linear", "staircase.k_min=10", "staircase.k_max=8"], "staircase.k_max"),
             (["figures", "--list", "no_such_figure"], "figures"),
             (["rerun", str(run)], "dataset.path"),
             ([], "COMMAND")]                                 # bare `certdp`: one line, not the help
    for argv, key in cases:
        code, out, err = main_in_process(*argv)
        m = REFUSAL.match(one_line(err))
        assert code == 2 and m and m.group(1) == key, (argv, err)
    assert "no_such_figure" in err_of(["figures", "--list", "no_such_figure"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]           # nothing written, the run kept
    assert (run / "results.csv").exists()


def err_of(argv) -> str:
    return main_in_process(*argv)[2]


def test_list_settings_knows_every_command_that_list_names():
    from certdp.cli import COMMANDS, EXTRA_COMMANDS
    from certdp.resuming import RESUME_SETTINGS
    for command in list(COMMANDS) + list(EXTRA_COMMANDS):
        code, out, err = main_in_process("list", "settings", command)
        assert code == 0 and out.strip() and not err, (command, err)
    out = main_in_process("list", "settings", "resume")[1]
    assert sorted(line.split()[0] for line in out.splitlines() if not line.startswith("      ")) == sorted(RESUME_SETTINGS)
    assert "profile = paper" in main_in_process("list", "settings", "figures")[1]
    code, _, err = main_in_process("list", "settings", "nope")
    assert code == 2 and REFUSAL.match(one_line(err)) and "resume" in err


# ------------------------------------------------------------------------------ README and Makefile (items 14, 15)
def _readme_first_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## The two first commands\n.*?```bash\n(.*?)```", text, re.S | re.M).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def _make_variables() -> dict:
    return dict(re.findall(r"^(\w+) \?= *(\S+)", (ROOT / "Makefile").read_text(), re.M))


def test_the_readme_first_commands_are_what_make_provides():
    """Each of the README's two first commands runs, exactly as written, in a fresh clone after
    `make install`: a `make` target, or a program that `make install` puts in its venv (the
    project's script), with a command line that the settings accept.  A bare `certdp` is not on
    the PATH after `make install`.  (.ci/run runs the first one in a fresh clone.)"""
    import tomllib

    from certdp.cli import COMMANDS
    from certdp.settings import config_dir
    from certdp.settings.compose import compose_and_parse
    commands = _readme_first_commands()
    assert len(commands) == 2
    makefile = (ROOT / "Makefile").read_text()
    venv_bin = f"{_make_variables()['VENV']}/bin/"
    install = re.search(r"^install:.*?\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "-m venv $(VENV)" in install and "pip install -q -e '.[$(EXTRAS)]'" in install
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for command in commands:
        prog, *args = command.split()
        if prog == "make":
            assert len(args) == 1 and re.search(rf"^{re.escape(args[0])}:", makefile, re.M), command
            continue
        assert prog.startswith(venv_bin) and prog[len(venv_bin):] in scripts, \
            f"{command!r}: {prog} is not what `make install` provides (it installs {venv_bin}<script>)"
        assert scripts[prog[len(venv_bin):]] == "certdp.cli:main" and args[0] in COMMANDS
        assert compose_and_parse(args[0], args[1:], multirun=False, config_path=str(config_dir()),
                                 config_name=args[0])                    # the settings are accepted


def _make(target: str, cwd: Path) -> subprocess.CompletedProcess:
    import shutil
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", "-f", str(ROOT / "Makefile"), target], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_make_clean_removes_build_artefacts_and_keeps_every_run(tmp_path):
    runs = [tmp_path / "outputs" / "agtr" / "linear" / "r1" / "results.csv",
            tmp_path / "outputs" / "figures" / "agtr_gs.png", tmp_path / "outputs" / "README.md"]
    built = [tmp_path / "build" / "site" / "index.html", tmp_path / ".pytest_cache" / "v" / "x",
             tmp_path / "dist" / "certdp-0.1.0-py3-none-any.whl"]
    for f in runs + built:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x\n")
    r = _make("clean", tmp_path)
    assert r.returncode == 0, r.stderr
    assert all(f.exists() for f in runs) and not any(f.exists() for f in built)
    dry = _make("-n", tmp_path)                             # the default target must not delete either
    assert "outputs" not in dry.stdout
    r = _make("delete-outputs", tmp_path)                   # the separately named target does
    assert r.returncode == 0 and not (tmp_path / "outputs" / "agtr").exists()
    assert (tmp_path / "outputs" / "README.md").exists()


# ------------------------------------------------------------------------------ import without side effects (item 16)
PROBE = r"""
import ctypes, json, signal, sys
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

def heap_served():
    # whether a fresh 64 MiB malloc comes from the heap (the CLI's mallopt: no mmap) or its own mapping
    p = libc.malloc(64 << 20)
    line = next(l for l in open("/proc/self/maps")
                if int(l.split("-")[0], 16) <= p < int(l.split()[0].split("-")[1], 16))
    libc.free(p)
    return "[heap]" in line

def handlers():
    return [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)]

state = {"start": handlers()}      # as inherited (a background job starts with SIGINT ignored)
import certdp
state["import certdp"] = handlers() + ["torch" in sys.modules, heap_served()]
import certdp.cli
state["import certdp.cli"] = handlers() + [heap_served()]
sys.argv = ["certdp", "--version"]
try:
    certdp.cli.main()
except SystemExit:
    pass
state["certdp.cli.main"] = handlers() + [heap_served()]
print(json.dumps(state))
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists() or sys.platform != "linux", reason="glibc and /proc only")
def test_importing_certdp_has_no_side_effects_and_the_cli_tunes_malloc():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout.strip().splitlines()[-1])
    start = state["start"]
    assert state["import certdp"] == start + [False, False]              # no handler, no torch, malloc untouched
    assert state["import certdp.cli"] == start + [False]                  # as a library: still none
    assert state["certdp.cli.main"] == start + [True]                     # the CLI: handlers restored, malloc tuned


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_the_certdp_scripts_start_up_is_one_line(tmp_path, sig, code):
    """The `certdp` console script (as pip writes it) imports certdp.cli before calling main."""
    script = tmp_path / "bin" / "certdp"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom certdp.cli import main\nif __name__ == '__main__':\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    p = subprocess.Popen([str(script), "agtr", *SMALL, f"out_root={tmp_path}"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)                     # importing torch, typer, Hydra: seconds
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == code and "during start-up" in one_line(err) and "nothing was written" in err
    assert not list(tmp_path.rglob("*.csv"))


# ------------------------------------------------------------------------------ settings edges
EDGE_RUN = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=4", "privacy.epsilons=[1]",
            "privacy.n_draws=5", "train.steps=3", "progress=false"]


@pytest.mark.parametrize("args,key", [
    (["dpaudit", "privacy.n_draws=1"], "privacy.n_draws"),
    (["dpaudit", "privacy.epsilons=[1e6]"], "privacy.epsilons"),
    (["agtr", "privacy.epsilons=[5e-324]"], "privacy.epsilons"),
    (["feasibility", "feasibility.confidence.values=[1e-300,0.5]"], "feasibility.confidence.values"),
    (["agtr", "+preset=nope"], "preset=nope"),
    (["agtr", "train.lr=${nope}"], "train.lr"),
    (["agtr", "train.clip=0.5,1.0"], "train.clip"),
    (["agtr", "--cfg", "bogus"], "--cfg"),
    (["agtr", "--config-dir", "/nonexistent"], "--config-dir"),
    (["agtr", "-m", "--cfg", "job"], "-m"),
    (["nosuchcmd"], "nosuchcmd"),
    (["list", "extra"], "extra"),
])
def test_edges_are_refused_in_one_line_with_key_and_allowed_part(tmp_path, args, key):
    base = EDGE_RUN if args[0] in ("agtr", "dpaudit") else []
    code, _, err = main_in_process(*args[:1], *base, *args[1:], f"out_root={tmp_path}")
    assert code == 2 and one_line(err).startswith(f"certdp: error: {key}") and "allowed:" in err, err
    allowed = err.split("allowed:", 1)[1].strip()
    assert allowed and not allowed.startswith(";")
    assert not list(tmp_path.rglob("*"))


def test_overrides_may_follow_hydra_flags():
    assert cli.split_command_line("agtr", ["a=1", "-m", "b=1,2"]) == (["--multirun"], ["a=1", "b=1,2"])
    assert cli.split_command_line("agtr", ["a=1", "--cfg", "job", "b=2"]) == (["--cfg", "job"], ["a=1", "b=2"])
