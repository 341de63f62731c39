"""The CLI end to end on small data, Hydra features, and one-line errors for bad input."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

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
