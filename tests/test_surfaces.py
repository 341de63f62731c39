"""The surfaces around the runs (issue 22): run folders that are never replaced or nested wrongly,
``certdp predict`` on untrusted documents, tables and output paths, ``certdp rerun`` on edited
records, sweeps checked as a whole, signals from start-up on, failing output streams, and the
settings edges of dpaudit, feasibility and the accountants."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import cli, results
from certdp.errors import ConfigError
from cli_helpers import digest, fake_run, labelled_table, main_in_process, one_line, released_doc

SMALL = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=4", "privacy.epsilons=[1]",
         "privacy.n_draws=5", "train.steps=3", "progress=false"]


def certdp(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


# ------------------------------------------------------------------------------ run folders
@pytest.mark.slow
def test_overwrite_never_replaces_a_folder_of_runs_or_foreign_files(tmp_path):
    grp = tmp_path / "agtr" / "linear" / "grp"
    fake_run(grp / "a")
    fake_run(grp / "b")
    before = digest(tmp_path)
    with pytest.raises(results.RunExists, match="holds other runs"):
        results.check_free(grp, overwrite=True)
    r = certdp("agtr", *SMALL, f"out_root={tmp_path}", "run=grp", "overwrite=true")
    assert r.returncode == 2 and one_line(r.stderr).startswith("certdp: error: run: ") and "allowed:" in r.stderr
    assert digest(tmp_path) == before                      # both finished runs intact, nothing added
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own file\n")
    with pytest.raises(results.RunExists, match="not a certdp run"):
        results.check_free(mine, overwrite=True)
    # one run folder is replaceable; a run holding another run is not
    results.check_free(grp / "a", overwrite=True)
    fake_run(grp / "a" / "inner")
    with pytest.raises(results.RunExists, match="another run"):
        results.check_free(grp / "a", overwrite=True)


@pytest.mark.slow
def test_no_run_lands_inside_a_run_under_a_staging_name_or_outside_out_root(tmp_path):
    from certdp.settings.base import run_name
    for bad in ("../..", "a/../b", "/abs", "x.incomplete-1-abcd", "y.replaced-2-ef", "a//b", "bad\nname"):
        with pytest.raises(ConfigError) as e:
            run_name(bad, "run")
        assert e.value.key == "run" and "allowed:" in str(e.value)
    assert run_name("grp/a", "run") == "grp/a"
    run = fake_run(tmp_path / "agtr" / "linear" / "grp" / "a")
    with pytest.raises(results.RunPlacement, match="inside the finished run"):
        results.check_placement(run / "nested")
    with pytest.raises(results.RunPlacement, match="staging or replaced"):
        results.check_placement(tmp_path / "x.incomplete-1-ab" / "r")
    before = digest(tmp_path)
    r = certdp("agtr", *SMALL, f"out_root={tmp_path}", "run=grp/a/nested")
    assert r.returncode == 2 and "inside the finished run" in one_line(r.stderr)
    r = certdp("agtr", "-m", *SMALL, f"out_root={tmp_path}", f"hydra.sweep.dir={run}", "train.clip=0.5,1.0")
    assert r.returncode == 2 and one_line(r.stderr).startswith("certdp: error: hydra.sweep.dir: ")
    assert digest(tmp_path) == before


# ------------------------------------------------------------------------------ predict
@pytest.mark.parametrize("fmt", [1, 2])
@pytest.mark.parametrize("classes,labels", [((0, 1), ("0", "1")), ((0, 1), ("00", "01")), ((0, 1), ("0.0", "1.0")),
                                            ((0, 1), ("0", "1e0")), (("00", "01"), ("00", "01")),
                                            (("0.0", "1.0"), ("0.0", "1.0"))])
def test_predict_reports_the_true_accuracy_whatever_way_labels_are_written(tmp_path, fmt, classes, labels):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(fmt, classes)))
    want = labelled_table(tmp_path / "t.csv", labels)
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
    assert code == 0, err
    assert f"accuracy {want:.4f}" in err and 0.7 < want < 0.9
    pred = pd.read_csv(io.StringIO(out), dtype=str)
    assert list(pred.columns) == ["mechanism", "epsilon", "row", "prediction"] and len(pred) == 50
    assert set(pred.prediction) <= {str(c) for c in classes}


def test_predict_finds_the_publish_folder_and_the_old_top_level_file(tmp_path):
    run = fake_run(tmp_path / "ags" / "csv" / "r", "ags")
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    (run / "released.json").write_text(json.dumps(released_doc(1)))
    assert main_in_process("predict", str(run), "--input", str(tmp_path / "t.csv"))[0] == 0
    (run / "publish").mkdir()
    (run / "publish" / "released.json").write_text(json.dumps(released_doc(2)) + "x")   # format 2 first, and broken
    code, _, err = main_in_process("predict", str(run), "--input", str(tmp_path / "t.csv"))
    assert code == 2 and one_line(err).startswith("certdp: error: released.json: ") and "publish" in err


def _set(doc, path, value):
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value


BAD_DOCS = [
    (("model",), KeyError, "released.json.model"),
    (("releases",), KeyError, "released.json.releases"),
    (("releases", 0, "mechanism"), KeyError, "released.json.releases[0].mechanism"),
    (("releases", 0, "mechanism"), "cauchy", "released.json.releases[0].mechanism"),
    (("releases", 0, "parameters", 1), "x", "released.json.releases[0].parameters[1]"),
    (("releases", 0, "parameters", 2), float("nan"), "released.json.releases[0].parameters[2]"),
    (("releases", 0, "parameters", 0), float("inf"), "released.json.releases[0].parameters[0]"),
    (("releases", 0, "parameters"), [1.0, 2.0], "released.json.releases[0].parameters"),
    (("releases", 0, "epsilon"), -1, "released.json.releases[0].epsilon"),
    (("releases", 0, "epsilon"), True, "released.json.releases[0].epsilon"),
    (("releases",), [], "released.json.releases"),
    (("model", "n_params"), 4, "released.json.model.n_params"),
    (("model", "widths"), [2, "x"], "released.json.model.widths[1]"),
    (("model", "widths"), [2, 10 ** 9], "released.json.model.widths"),
    (("model", "loss"), "mse", "released.json.model.loss"),
    (("preprocessing", "shift"), ["a", 0], "released.json.preprocessing"),
    (("preprocessing", "scale"), [0, 1], "released.json.preprocessing"),
    (("preprocessing", "columns"), ["a"], "released.json.preprocessing"),
    (("preprocessing",), None, "released.json.preprocessing"),
    (("preprocessing", "label_coding"), "index", "released.json.preprocessing"),
    (("format",), "certdp.released/9", "released.json.format"),
    (("bogus",), 1, "released.json.bogus"),
    (("task",), "regression", "released.json.task"),
]


@pytest.mark.parametrize("fmt", [1, 2])
@pytest.mark.parametrize("path,value,key", BAD_DOCS)
def test_released_json_is_checked_field_by_field(tmp_path, fmt, path, value, key):
    doc = released_doc(fmt)
    _set(doc, path, value)
    src = tmp_path / "released.json"
    src.write_text(json.dumps(doc))
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    code, out, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
    assert code == 2 and one_line(err).startswith(f"certdp: error: {key}") and "allowed:" in err, err
    assert str(src) in err and not out


def test_released_json_that_would_stall_or_crash_a_parser_is_refused(tmp_path):
    labelled_table(tmp_path / "t.csv", ("0", "1"))
    for name, data in (("deep", b"[" * 200_000 + b"]" * 200_000), ("binary", b"\x00\xff" * 100),
                       ("text", b"not json"), ("list", b"[1, 2]")):
        src = tmp_path / f"{name}.json"
        src.write_bytes(data)
        t0 = time.time()
        code, _, err = main_in_process("predict", str(src), "--input", str(tmp_path / "t.csv"))
        assert code == 2 and one_line(err).startswith("certdp: error: released.json") and time.time() - t0 < 10, err


def test_predict_output_never_replaces_its_input_a_fifo_a_device_or_a_foreign_file(tmp_path):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(2)))
    table = tmp_path / "t.csv"
    labelled_table(table, ("0", "1"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    mine = tmp_path / "mine.csv"
    mine.write_text("precious,data\n1,2\n")
    run = fake_run(tmp_path / "ags" / "csv" / "r", "ags")
    before = digest(tmp_path)
    for target, extra, words in ((table, [], "input"), (table, ["--overwrite"], "input"), (src, ["--overwrite"], "input"),
                                 (fifo, [], "FIFO"), (Path(os.devnull), [], "device"), (tmp_path, [], "folder"),
                                 (mine, [], "already exists"), (mine, ["--overwrite"], "not an earlier output"),
                                 (run / "p.csv", [], "inside the finished run")):
        code, out, err = main_in_process("predict", str(src), "--input", str(table), "--output", str(target), *extra)
        assert code == 2 and one_line(err).startswith("certdp: error: --output: ") and words in err, (target, err)
    assert digest(tmp_path) == before and fifo.is_fifo()
    out = tmp_path / "p.csv"
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out))[0] == 0
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out))[0] == 2
    assert main_in_process("predict", str(src), "--input", str(table), "--output", str(out), "--overwrite")[0] == 0
    assert len(pd.read_csv(out)) == 50


def test_predict_refuses_header_only_duplicate_columns_and_unfinished_runs(tmp_path):
    src = tmp_path / "released.json"
    src.write_text(json.dumps(released_doc(1)))
    (tmp_path / "header.csv").write_text("a,b,y\n")
    (tmp_path / "dup.csv").write_text("a,b,a,y\n1,2,3,0\n")
    (tmp_path / "badlabel.csv").write_text("a,b,y\n1,2,0\n1,2,1.5\n")
    for name, words in (("header.csv", "no data rows"), ("dup.csv", "names 2 columns"),
                        ("badlabel.csv", "outside the run's classes")):
        code, _, err = main_in_process("predict", str(src), "--input", str(tmp_path / name))
        assert code == 2 and one_line(err).startswith("certdp: error: --input: ") and words in err, err
    staging = tmp_path / f"r{results.INCOMPLETE}1-ab"
    staging.mkdir()
    (staging / "released.json").write_text(json.dumps(released_doc(1)))
    for source in (staging, staging / "released.json"):
        code, _, err = main_in_process("predict", str(source), "--input", str(tmp_path / "header.csv"))
        assert code == 2 and one_line(err).startswith("certdp: error: RUN_DIR: ") and "unfinished" in err


# ------------------------------------------------------------------------------ rerun
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


# ------------------------------------------------------------------------------ sweeps
@pytest.mark.slow
def test_a_sweep_is_checked_as_a_whole_before_its_first_job(tmp_path):
    good = tmp_path / "good.csv"
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (60, 2))
    pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "y": x @ [1.0, 1.0]}).to_csv(good, index=False)
    pd.DataFrame({"x1": x[:, 0], "y": x[:, 0]}).to_csv(tmp_path / "onecol.csv", index=False)
    base = ["agtr", "-m", "dataset=csv", "dataset.target=y", "dataset.features=[x1,x2]", "dataset.n_test=10",
            "dataset.output_range=[-5,5]", "train.steps=2", "staircase.k_max=2", "privacy.n_draws=3",
            f"out_root={tmp_path / 'o'}"]
    for paths, key, words in (((good, tmp_path / "nope.csv"), "dataset.path", "sweep job 1 of 2"),
                              ((good, tmp_path / "onecol.csv"), "dataset.features", "sweep job 1 of 2")):
        r = certdp(*base, "dataset.path=" + ",".join(map(str, paths)))
        assert r.returncode == 2 and one_line(r.stderr).startswith(f"certdp: error: {key}: ") and words in r.stderr
    for extra, key in ((["train.clip=interval(0,1)"], "train.clip"), (["train.lr=${nope}"], "train.lr")):
        r = certdp(*base, f"dataset.path={good}", *extra)
        assert r.returncode == 2 and one_line(r.stderr).startswith(f"certdp: error: {key}: ") and "allowed:" in r.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------ signals and streams
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


# ------------------------------------------------------------------------------ settings edges
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
    base = SMALL if args[0] in ("agtr", "dpaudit") else []
    code, _, err = main_in_process(*args[:1], *base, *args[1:], f"out_root={tmp_path}")
    assert code == 2 and one_line(err).startswith(f"certdp: error: {key}") and "allowed:" in err, err
    allowed = err.split("allowed:", 1)[1].strip()
    assert allowed and not allowed.startswith(";")
    assert not list(tmp_path.rglob("*"))


def test_overrides_may_follow_hydra_flags():
    assert cli.split_command_line("agtr", ["a=1", "-m", "b=1,2"]) == (["--multirun"], ["a=1", "b=1,2"])
    assert cli.split_command_line("agtr", ["a=1", "--cfg", "job", "b=2"]) == (["--cfg", "job"], ["a=1", "b=2"])


def test_accountants_at_huge_epsilon_fall_back_to_a_valid_split():
    from certdp.privacy.accounting import accountant_names, compose_advanced, per_release_budget, pld_epsilon
    for name in accountant_names("compose"):
        e0, d0 = per_release_budget(name, epsilon=1e6, delta=1e-5, n=2)
        assert np.isfinite(e0) and e0 >= 5e5 * (1 - 1e-12) and 0 <= d0 <= 1e-5, name
    assert pld_epsilon(epsilon0=800.0, delta0=0.0, n=2, delta=1e-5) == np.inf
    assert compose_advanced(epsilon=800.0, n=2, delta_prime=1e-5)[0] == np.inf


def test_experiment_files_are_checked_field_by_field(tmp_path):
    from certdp import figures as F
    head = "name: a\ncaption: c\nplot: cond_table\n"
    for body, field in (("runs: 5\n", "runs"), ("runs: [5]\n", "runs[0]"),
                        ("runs:\n  - {id: f, command: feasibility, profiles: [quick]}\n", "runs[0].profiles"),
                        ("runs:\n  - {id: f, command: feasibility, overrides: x=1}\n", "runs[0].overrides"),
                        ("runs:\n  - {id: f, command: nope}\n", "runs[0].command"),
                        ("runs:\n  - {id: f, command: feasibility, sweep: {a: 3}}\n", "runs[0].sweep"),
                        ("runs:\n  - {id: f, command: feasibility, profiles: {quick: {overrides: 3}}}\n",
                         "runs[0].profiles.quick.overrides")):
        p = tmp_path / "a.yaml"
        p.write_text(head + body)
        with pytest.raises(ConfigError) as e:
            F.load_experiment(p)
        assert e.value.key == f"a.yaml:{field}" and "allowed:" in str(e.value)
    p.write_text(head + "runs:\n  - {id: f, command: feasibility, overrides: ['feasibility.c=[1,2']}\n")
    spec = F.load_experiment(p).specs("quick")[0]
    with pytest.raises(ConfigError) as e:
        F.resolve(spec, tmp_path)
    assert e.value.key == "runs[f].overrides" and e.value.message.startswith("feasibility.c: ")
