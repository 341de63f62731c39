"""`certdp figures` end to end on a tiny experiment file: runs, resume, PNG, gallery links."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from certdp import figures as F
from certdp.errors import ConfigError

TINY = """
name: tiny_feasibility
label: fig:cond_table
title: Tiny feasibility
plot: cond_table
caption: A tiny version of the feasibility figure.
runs:
  - id: feasibility
    command: feasibility
    overrides: ['feasibility.c=[1,2]', feasibility.confidence.step=0.05]
    expect: [results, peaks]
    profiles:
      quick: {overrides: [feasibility.confidence.stop=0.95]}
      paper: {}
"""


@pytest.fixture()
def tiny(tmp_path):
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "tiny_feasibility.yaml").write_text(TINY)
    return d


@pytest.mark.slow
def test_tiny_experiment_runs_resumes_and_draws(tiny, tmp_path):
    out = tmp_path / "out"
    log1: list[str] = []
    e1 = F.figures(None, profile="quick", out_root=out, experiments=tiny, echo=log1.append)
    assert not e1[0]["missing"], log1
    assert any("1 to run" in m for m in log1)
    run_dirs = list((out / "feasibility" / "none").glob("fig-*"))
    assert len(run_dirs) == 1 and (run_dirs[0] / "done.json").exists()
    assert (run_dirs[0] / "results.csv").exists() and (run_dirs[0] / "config.yaml").exists()

    # second invocation: nothing runs, the figure is redrawn from the same run directory
    log2: list[str] = []
    e2 = F.figures(["tiny_feasibility"], profile="quick", out_root=out, experiments=tiny, echo=log2.append)
    assert any("1 already done, 0 to run" in m for m in log2), log2
    assert not any(m.startswith("[figures] run ") for m in log2)
    assert e2[0]["runs"][0]["cached"] and e2[0]["fresh_seconds"] == 0

    figs = out / "figures"
    png = figs / "tiny_feasibility.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image as mpimg
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert (figs / "tiny_feasibility.pdf").read_bytes()[:4] == b"%PDF"
    assert "rho" in (figs / "tiny_feasibility.csv").read_text().splitlines()[0]

    # every link and image of the gallery resolves to an existing file
    html = (figs / "index.html").read_text()
    links = re.findall(r"(?:href|src)='([^'#]+)'", html)
    assert {"tiny_feasibility.png", "tiny_feasibility.pdf", "tiny_feasibility.csv"} <= set(links)
    for link in links:
        assert (figs / link).exists(), link
    assert "A tiny version of the feasibility figure." in html
    assert "certdp feasibility" in html


@pytest.mark.slow
def test_interrupted_run_is_rerun_and_other_profile_gets_its_own_dir(tiny, tmp_path):
    out = tmp_path / "out"
    exp = F.load_experiments(tiny)["tiny_feasibility"]
    quick, paper = (F.resolve(exp.specs(p)[0], out) for p in ("quick", "paper"))
    assert quick.run_dir != paper.run_dir                      # different resolved configs
    assert F.resolve(exp.specs("quick")[0], out).run_dir == quick.run_dir   # stable digest
    # a run directory with CSVs but no done.json (interrupted) is not done
    quick.run_dir.mkdir(parents=True)
    (quick.run_dir / "results.csv").write_text("regime\n")
    (quick.run_dir / "peaks.csv").write_text("regime\n")
    assert not quick.is_done()
    # ... and is redone: the new run replaces the directory as a whole (no refusal, no mix)
    log: list[str] = []
    (entry,) = F.figures(None, profile="quick", out_root=out, experiments=tiny, echo=log.append)
    assert not entry["missing"], log
    assert quick.is_done() and len((quick.run_dir / "results.csv").read_text().splitlines()) > 2
    assert {p.name for p in quick.run_dir.iterdir()} >= {"config.yaml", "results.csv", "peaks.csv", "log.txt",
                                                         "stdout.txt", "done.json"}
    assert sorted(p.name for p in quick.run_dir.parent.iterdir()) == [quick.run_dir.name]


@pytest.mark.slow
def test_cli_list_and_bad_names(tiny):
    env = {"CERTDP_EXPERIMENTS_DIR": str(tiny)}
    import os
    env = {**os.environ, **env}
    r = subprocess.run([sys.executable, "-m", "certdp.cli", "figures", "--list", "profile=quick"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "tiny_feasibility" in r.stdout
    r = subprocess.run([sys.executable, "-m", "certdp.cli", "figures", "nope", "profile=quick"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "unknown nope" in r.stderr


def test_repository_experiments_cover_every_paper_figure():
    exps = F.load_experiments()
    from certdp.plots import PLOTS
    labels = {e.label for e in exps.values()}
    assert {"fig:cond_table", "fig:agtr_pate", "fig:agtr_ablation", "fig:agtr_certificates",
            "fig:pate_shard_ablation_linear", "fig:agtr_gs", "fig:blobs_ags", "fig:combined_mnist_imdb",
            "fig:hybrid_ags_dpsgd", "fig:samplig_abl_adult"} <= labels
    for e in exps.values():
        assert e.plot in PLOTS
        assert e.specs("quick") and e.specs("paper")


SLOW = """
name: slow_certify
title: Slow
plot: cond_table
caption: A run that takes minutes.
runs:
  - id: slow
    command: certify
    overrides: [dataset=linear, dataset.n_train=2000, dataset.n_test=40, staircase.k_max=64, train.steps=400]
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see processes")
def test_sigterm_reaches_the_running_child_and_leaves_no_orphan(tmp_path):
    exps = tmp_path / "experiments"
    exps.mkdir()
    (exps / "slow_certify.yaml").write_text(SLOW)
    out = tmp_path / "out"
    env = {**os.environ, "CERTDP_EXPERIMENTS_DIR": str(exps)}
    p = subprocess.Popen([sys.executable, "-m", "certdp.cli", "figures", "profile=quick", f"out_root={out}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    parent = out / "certify" / "linear"
    t0 = time.time()
    staging = []
    while not staging and time.time() - t0 < 180:      # the child is inside its run (its staging folder)
        staging = [d for d in parent.glob("fig-*.incomplete-*") if (d / "config.yaml").exists()] if parent.is_dir() else []
        time.sleep(0.05)
    assert staging, "the child never started its run"
    child = int(staging[0].name.split(".incomplete-")[1].split("-")[0])
    assert _alive(child)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "Traceback" not in err
    assert not _alive(child)                               # passed on, waited for: no orphan
    assert not list(parent.glob("fig-*/done.json"))
    # nothing half-written: at most the child's checkpoint (never a run; the next `certdp figures` resumes it)
    left = [d for d in parent.iterdir() if d.is_dir()]
    assert all(d.name.endswith(".resumable") and not (d / "config.yaml").exists() for d in left), left


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
