"""Time estimates from the settings (certdp/estimate.py): the work of a run in closed form, the
rates solved from timed passes, the cache, what is not modelled, and `certdp figures --list`.
No test times anything (timings live in benchmarks/estimate_accuracy.py)."""

from __future__ import annotations

import json
import re

import pytest

from certdp import estimate as E
from certdp import results
from certdp.data import dataset_size, entries, load_dataset
from certdp.models import n_params_of
from certdp.settings import config_dir
from certdp.settings.compose import compose_and_parse


def settings(command: str, *overrides: str):
    results.register_resolvers()
    return compose_and_parse(command, list(overrides), multirun=False, config_path=str(config_dir()),
                             config_name=command)[0]


def test_agtr_work_is_steps_times_radii_times_batch_times_parameters():
    s = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8",
                 "train.batch_size=250")
    w = E.work_of(s)
    n, d, n_out = dataset_size(dict(s.dataset))
    P = n_params_of((d, *s.model.hidden, n_out) if s.model.arch == "mlp" else (d, n_out))
    K = len(s.staircase.radii(n))
    assert n == 1000 and w.train == [(30, 250 * P)] and w.unmodelled == []
    (key, loops), = w.agt.items()
    assert loops == [(30.0, float(K * 250 * P))] and key.startswith(s.certificate.name)
    s2 = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=60", "staircase.k_max=16",
                  "train.batch_size=250")
    K2 = len(s2.staircase.radii(n))
    assert K2 > K and list(E.work_of(s2).agt.values())[0] == [(60.0, float(K2 * 250 * P))]   # more steps, more radii


def test_pate_shards_are_one_agt_pass_each():
    s = settings("pate", "dataset=linear", "dataset.n_train=4000", "pate.shards=[1,8]", "train.steps=20")
    w = E.work_of(s)
    P = 2
    loops = list(w.agt.values())[0]
    m = 4000 // 8
    K8 = len(s.shards.staircase.radii(m))
    assert (20.0 * 8, float(K8 * m * P)) in loops                         # 8 shards, in turn
    assert w.train.count((20, 4000 * P)) == 3                             # nominal + the T=1 and T=8 shard models


def test_ags_baselines_count_every_trained_model():
    s = settings("ags", "dataset=blobs", "train.steps=10", "privacy.epsilons=[1,2]", "ags.baselines=[dpsgd_matched]")
    w = E.work_of(s)
    n, d, _ = dataset_size(dict(s.dataset))
    draws = s.ags.baseline_draws or s.privacy.n_draws
    B = min(s.train.batch_size or n, n)
    assert (10 * 2 * 2, draws * B * (d + 1)) in w.train                   # 2 budgets x 2 regimes, every draw


def test_what_the_model_cannot_count_is_named_and_an_unknown_size_gives_none(tmp_path):
    w = E.work_of(settings("agtr", "dataset=linear", "certificate=milp"))
    assert w.agt == {} and any("milp" in u for u in w.unmodelled)          # the nominal track only, flagged
    csv = tmp_path / "t.csv"
    csv.write_text("a,y\n1,2\n3,4\n5,6\n")
    assert E.work_of(settings("agtr", "dataset=csv", f"dataset.path={csv}", "dataset.target=y")) is None
    assert E.estimate(settings("agtr", "dataset=csv", f"dataset.path={csv}", "dataset.target=y")) is None
    assert E.Estimate(10.0, ("the milp solver's time",)).text().startswith(">= ")


@pytest.mark.parametrize("name", ["linear", "blobs"])
def test_declared_sizes_agree_with_the_loaded_synthetic_data(name):
    from certdp.data import dataset_settings
    cfg = dataset_settings({"name": name, "n_train": 321})
    ds = load_dataset(dict(cfg), 0)
    n, d, _ = dataset_size(dict(cfg))
    assert (n, d) == (ds.n_train, ds.n_features)


def test_declared_sizes_agree_with_each_real_datasets_documented_split():
    """Every real dataset's declared private size is the one its summary documents."""
    for name in ("california", "adult", "mnist5", "imdb", "sst2"):
        summary = entries()[name].summary
        documented = int(re.search(r"([\d,]+) private", summary).group(1).replace(",", ""))
        assert dataset_size({"name": name})[0] == documented, name


def test_solve_rate_recovers_planted_overhead_and_unit():
    """Passes timed as setup + steps * (overhead + unit * elements) give back overhead and unit;
    a solver that forgot the setup (a planted bug) would not."""
    setup, overhead, unit = 0.7, 0.003, 2.5e-9

    def timer(n, k, steps):
        el = n * k * 100
        return setup + steps * (overhead + unit * el), el
    r = E.solve_rate(timer, ((256, 2), (4096, 8)))
    assert r.overhead == pytest.approx(overhead) and r.unit == pytest.approx(unit)
    t, el = timer(4096, 8, 4)
    forgot = (t / 4 - overhead) / el                                       # the planted bug: setup left in
    assert abs(forgot - unit) / unit > 0.5


def test_estimate_is_the_work_times_the_cached_rates_and_calibrates_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    s = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8")
    w = E.work_of(s)
    keys = E.keys_of(s, w)
    assert E.estimate(s, calibrate=False) is None                          # nothing cached, none calibrated
    calls = []

    def fake(key, device):
        calls.append(key)
        return E.Rate(0.01, 1e-8 if key.startswith("train") else 3e-8)
    monkeypatch.setattr(E, "calibrate_key", fake)
    est = E.estimate(s)
    want = E.RUN_OVERHEAD_S + sum(30 * (0.01 + 1e-8 * e) for _, e in w.train) + \
        sum(st * (0.01 + 3e-8 * e) for loops in w.agt.values() for st, e in loops)
    assert est.seconds == pytest.approx(want) and sorted(calls) == sorted(keys)
    cached = json.loads(next((tmp_path / "timing").glob("*.json")).read_text())
    assert set(cached) == set(keys)
    monkeypatch.setattr(E, "calibrate_key", lambda key, device: pytest.fail("calibrated twice"))
    assert E.estimate(s).seconds == pytest.approx(want)                    # from the cache


def test_figures_list_estimates_a_figure_not_run_here_and_measures_it_once_run(tmp_path, monkeypatch):
    from certdp import figures as F
    from test_figures import TINY
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    exps = tmp_path / "experiments"
    exps.mkdir()
    (exps / "tiny_feasibility.yaml").write_text(TINY)
    lines: list[str] = []
    F.list_figures("quick", exps, echo=lines.append, out_root=str(tmp_path / "out"))
    assert len(lines) == 1 and "here (estimated)" in lines[0], lines


def test_a_long_run_says_its_estimate_before_it_starts_and_a_small_one_times_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    small = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8")
    monkeypatch.setattr(E, "calibrate_key", lambda key, device: pytest.fail("a small run timed the machine"))
    with caplog.at_level("INFO", logger="certdp"):
        E.announce(small)
    assert "estimate from the settings" not in caplog.text
    big = settings("agtr", "dataset=california", "staircase.k_max=28")     # 330 steps x 28 radii x 16,512 x P
    monkeypatch.setattr(E, "calibrate_key", lambda key, device: E.Rate(0.001, 1e-8))
    with caplog.at_level("INFO", logger="certdp"):
        est = E.announce(big)
    assert est.seconds >= E.LONG_RUN_S
    line = next(r.getMessage() for r in caplog.records if "estimate from the settings" in r.getMessage())
    assert "whole run" in line and "device=cuda" in line and "certdp resume" in line
