"""Time estimates from the settings (certdp/estimate/): the work of a run in closed form, the
rates timed on the run's own model and refused when implausible, the cache, the load, the band,
what is not modelled, a resumed run, and `certdp figures --list`.  The fast tests time nothing:
a planted timer stands in for the real code (`rates.real_timer`); one slow test times for real.
Timing accuracy lives in benchmarks/estimate_accuracy.py."""

from __future__ import annotations

import json
import re

import pytest

from certdp import checkpoint, results
from certdp import estimate as E
from certdp.data import dataset_size, entries, load_dataset
from certdp.estimate import rates as R
from certdp.estimate import work
from certdp.settings import config_dir
from certdp.settings.compose import compose_and_parse


def settings(command: str, *overrides: str):
    results.register_resolvers()
    return compose_and_parse(command, list(overrides), multirun=False, config_path=str(config_dir()),
                             config_name=command)[0]


class Machine:
    """A planted machine: a pass of ``steps`` steps of ``e`` elements takes ``load * (setup +
    steps * (overhead + unit * e))`` seconds, and its first pass at a size also ``compile_s``;
    ``flat_first``: the first timing sees steps that do not grow with their size (a burst of load
    that the small steps met); ``probe``: what :func:`rates.probe` reads."""

    def __init__(self, overhead=0.003, unit=2.5e-8, setup=0.02, compile_s=0.0, load=1.0, flat_first=0, probe=0.01):
        self.overhead, self.unit, self.setup, self.compile_s, self.load = overhead, unit, setup, compile_s, load
        self.flat, self.probe, self.calls, self.seen = flat_first, probe, [], set()

    def timer_of(self, spec, device):
        def timer(b, k, steps):
            e = spec.elements(b, k)
            self.calls.append((spec.key, b, k, steps))
            first = (spec.key, b, k) not in self.seen
            self.seen.add((spec.key, b, k))
            per = self.overhead + (self.unit * 64 if self.flat > 0 else self.unit * e)
            return self.load * (self.setup + steps * per + (self.compile_s if first else 0.0))
        return timer

    def install(self, monkeypatch, tmp_path):
        monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
        monkeypatch.setattr(R, "real_timer", self.timer_of)
        monkeypatch.setattr(R, "probe", lambda **kw: self.probe)
        monkeypatch.setattr(E, "_load", lambda: 0.0)
        original = R._measure

        def measured(spec, timer):
            out = original(spec, timer)
            self.flat -= 1
            return out
        monkeypatch.setattr(R, "_measure", measured)
        return self


# ---------------------------------------------------------------------------- the work
def test_agtr_work_is_steps_times_computed_radii_times_batch_times_parameters():
    s = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8",
                 "train.batch_size=250")
    w = E.work_of(s)
    n, d, n_out = dataset_size(dict(s.dataset))
    P = R.Spec((d, n_out), "mse").n_params
    K = sum(1 for k in s.staircase.radii(n) if k < 250 * (n // 250))     # the per-epoch ledger's rows
    assert n == 1000 and w.train == [(30, 250 * P)] and w.unmodelled == []
    (key, loops), = w.agt.items()
    assert loops == [(30.0, float(K * 250 * P))] and key.startswith(s.certificate.name)
    s2 = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=60", "staircase.k_max=16",
                  "train.batch_size=250")
    K2 = sum(1 for k in s2.staircase.radii(n) if k < 1000)
    assert K2 > K and list(E.work_of(s2).agt.values())[0] == [(60.0, float(K2 * 250 * P))]   # more steps, more radii
    s3 = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=300",
                  "train.batch_size=250", "certificate.substitutions=per_batch")
    K3 = sum(1 for k in s3.staircase.radii(n) if k < 250)                  # per step: radii below the batch
    assert list(E.work_of(s3).agt.values())[0] == [(30.0, float(K3 * 250 * P))]


def test_pate_shards_are_one_agt_pass_each():
    s = settings("pate", "dataset=linear", "dataset.n_train=4000", "pate.shards=[1,8]", "train.steps=20")
    w = E.work_of(s)
    P = 2
    loops = [lp for v in w.agt.values() for lp in v]
    m = 4000 // 8
    K8 = sum(1 for k in s.shards.staircase.radii(m) if k < m)
    assert (20.0 * 8, float(K8 * m * P)) in loops                         # 8 shards, in turn
    assert w.train.count((20, 4000 * P)) == 3                             # nominal + the T=1 and T=8 shard models


def test_ags_baselines_count_every_trained_model_and_noise_calibration():
    s = settings("ags", "dataset=blobs", "train.steps=10", "privacy.epsilons=[1,2]", "ags.baselines=[dpsgd_matched]")
    w = E.work_of(s)
    n, d, _ = dataset_size(dict(s.dataset))
    draws = s.ags.baseline_draws or s.privacy.n_draws
    B = min(s.train.batch_size or n, n)
    (key, loops), = w.other.items()
    assert key == f"dpsgd/{d}-1-hinge/b{B}" and loops == [(10 * 2 * 2, draws * B * (d + 1))]   # 2 budgets x 2 regimes
    s = settings("ags", "dataset=blobs", "privacy.epsilons=[1,2,5]", "ags.baselines=[dpsgd_optimised]",
                 "dpsgd.optimised.accountants=[pld,rdp]", "dpsgd.optimised.grid.batch_size=[64]",
                 "dpsgd.optimised.grid.epochs=[5,20]",
                 "dpsgd.optimised.grid.lr=[0.5,2.0]", "dpsgd.optimised.grid.clip=[0.1]")
    w = E.work_of(s)
    # a calibration per (batch, epochs) and budget for the first accountant, one per budget for the
    # second; each split between the rates timed around its eps (linear in eps; eps 1 at the lowest)
    at = {f"eps{a:g}": 1.25 * a for a in work.ACCOUNTANT_EPS}
    assert all(c >= 0 and e == 0.0 for v in w.other.values() for c, e in v)
    for name, per in (("pld", 2), ("rdp", 1)):
        loops = {k.split("/")[-1]: v for k, v in w.other.items() if k.startswith(f"accountant/{name}/")}
        assert sum(c for v in loops.values() for c, _ in v) == pytest.approx(3 * per)
        assert sum(c * at[k] for k, v in loops.items() for c, _ in v) == pytest.approx(per * (1.25 + 2 + 5))
    steps = [round(ep * n / 64) for ep in (5, 20)]                          # Poisson steps of each candidate
    assert (3 * steps[0] * 2, 64 * (d + 1)) in w.train and (3 * steps[1] * 2, 64 * (d + 1)) in w.train


def test_what_the_model_cannot_count_is_named_and_an_unknown_size_gives_none(tmp_path):
    w = E.work_of(settings("agtr", "dataset=linear", "certificate=milp"))
    assert w.agt == {} and any("milp" in u for u in w.unmodelled)          # the nominal track only, flagged
    csv = tmp_path / "t.csv"
    csv.write_text("a,y\n1,2\n3,4\n5,6\n")
    assert E.work_of(settings("agtr", "dataset=csv", f"dataset.path={csv}", "dataset.target=y")) is None
    assert E.estimate(settings("agtr", "dataset=csv", f"dataset.path={csv}", "dataset.target=y")) is None
    assert E.Estimate(10.0, ("the milp solver's time",)).text().startswith(">= ")


def test_a_run_the_model_does_not_count_at_all_has_no_estimate_not_the_start_up_time():
    """The defect: `hybrid_sst2` showed ">= 5 s" (the run's start-up alone, for hours of fine-tunes)."""
    est = E.estimate(settings("hybrid"))
    assert est is not None and not est.known
    assert est.text().startswith("no estimate (not modelled: the hybrid's"), est.text()
    assert "5 s" not in est.text()


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
        cfg = {"name": name, **({"profile": "paper"} if name == "imdb" else {})}   # imdb's CPU default: a subset
        assert dataset_size(cfg)[0] == documented, name


def test_a_rate_is_timed_on_the_runs_own_model_engine_and_batch(tmp_path, monkeypatch):
    """The defect: `certdp agtr dataset=linear` (a 1-1 regression, CROWN, 40,000 records a
    step) was timed on an 8-3 softmax head at other sizes and announced 23 min for 133 s."""
    m = Machine().install(monkeypatch, tmp_path)
    s = settings("agtr", "dataset=linear")
    w = E.work_of(s)
    (spec,) = w.specs.values()
    assert spec.widths == (1, 1) and spec.loss == "mse" and spec.batch == 40_000
    assert spec.engine == ("crown", tuple(s.certificate.options))
    assert w.train_spec.widths == (1, 1) and w.train_spec.loss == "mse"
    E.estimate(s)
    assert {(b, k < 40_000) for key, b, k, _ in m.calls if key == spec.key} == {(40_000, True)}
    # blobs' default trains full batch; the paper's training (batch 20) is timed on mini-batches
    blobs = E.work_of(settings("ags", "dataset=blobs"))
    assert blobs.train_spec.loss == "hinge" and not any(sp.minibatch for sp in blobs.specs.values() if sp.kind == "agt")
    paper = E.work_of(settings("ags", "dataset=blobs", "train.batch_size=20", "train.steps=200"))
    assert all(sp.minibatch for sp in paper.specs.values() if sp.kind == "agt")


# ---------------------------------------------------------------------------- the rates
def test_calibrate_recovers_a_planted_overhead_unit_and_compile(monkeypatch):
    m = Machine(overhead=0.003, unit=2.5e-8, setup=0.0, compile_s=1.5)
    monkeypatch.setattr(R, "probe", lambda **kw: m.probe)
    spec = R.Spec((8, 32, 1), "mse", ("ibp", ()), batch=512, kind="agt", hint=512 * 321 * 64)
    assert spec.n_params == 321
    rate = R.calibrate(spec, "cpu", timer=m.timer_of(spec, "cpu"))
    assert rate.overhead == pytest.approx(0.003, rel=1e-6) and rate.unit == pytest.approx(2.5e-8, rel=1e-6)
    assert rate.setup == pytest.approx(1.5, rel=1e-6) and rate.spread == pytest.approx(0.0, abs=1e-9)
    sizes = sorted({k for _, _, k, _ in m.calls})
    assert sizes[0] == 1 and sizes[-1] * 512 * 321 <= spec.hint // 4 + 512 * 321    # up to a quarter of the run's step


def test_a_step_that_eats_the_budget_still_gets_a_second_size(monkeypatch):
    """On a loaded machine a one-radius step of California took ~6 s, mostly overhead: timed at
    one size only, the rate ran through the origin and the run was over-estimated 3x."""
    m = Machine(overhead=20.0, unit=1e-7, setup=0.0)
    monkeypatch.setattr(R, "probe", lambda **kw: m.probe)
    spec = R.Spec((8, 64, 1), "mse", ("ibp", ()), batch=16_512, kind="agt", hint=28 * 16_512 * 641)
    rate = R.calibrate(spec, "cpu", timer=m.timer_of(spec, "cpu"))
    assert len({k for _, _, k, _ in m.calls}) == 2
    assert rate.overhead == pytest.approx(20.0, rel=1e-6) and rate.unit == pytest.approx(1e-7, rel=1e-6)


def test_a_rate_at_the_floor_is_refused_and_timed_again(tmp_path, monkeypatch):
    """The defect: noise on a loaded machine made the large steps look no dearer than the
    small ones and the rate was cached at the 1e-15 floor (`ibp-tau/mlp`, `train/mlp`)."""
    m = Machine(flat_first=1).install(monkeypatch, tmp_path)
    spec = R.Spec((8, 32, 1), "mse", ("ibp", ()), batch=512, kind="agt", hint=512 * 321 * 64)
    rate = R.rates([spec], "cpu")[spec.key]
    assert rate.unit == pytest.approx(m.unit, rel=1e-6) and not rate.provisional     # the second timing's
    assert R.cached("cpu", spec.key)[0].unit == pytest.approx(m.unit, rel=1e-6)
    flat = Machine(flat_first=99).install(monkeypatch, tmp_path / "flat")
    rate = R.rates([spec], "cpu")[spec.key]                                # refused twice: conservative
    assert rate.provisional and rate.unit >= R.unit_floor("cpu") and flat.flat < 98
    assert R.cached("cpu", spec.key) == (None, "not timed yet")             # never cached


def test_a_cached_rate_at_the_floor_is_refused_and_the_estimate_grows_with_the_radii(tmp_path, monkeypatch):
    """The defect: with `ibp-tau/mlp` cached at 1e-15 s per element, k_max=8 and k_max=2048
    were both estimated at 75 s."""
    m = Machine(unit=1e-6).install(monkeypatch, tmp_path)
    small = settings("agtr", "dataset=linear", "dataset.n_train=4000", "train.steps=30", "staircase.k_max=8")
    big = settings("agtr", "dataset=linear", "dataset.n_train=4000", "train.steps=30", "staircase.k_max=2048")
    keys = {*E.keys_of(small, E.work_of(small)), *E.keys_of(big, E.work_of(big))}
    floor = {"overhead": 0.07, "unit": 1e-15, "setup": 0.0, "probe": m.probe, "spread": 0.0, "at": __import__("time").time(),
             "load": 0.1, "format": R.FORMAT}
    R.cache_file("cpu").parent.mkdir(parents=True)
    R.cache_file("cpu").write_text(json.dumps({k: floor for k in keys}))
    assert all(R.cached("cpu", k)[0] is None and "refused" in R.cached("cpu", k)[1] for k in keys)
    a, b = E.estimate(small).seconds, E.estimate(big).seconds
    assert {c[0] for c in m.calls} == keys                                  # timed again
    assert b > 20 * a                                                       # 2,048 radii against 8


def test_an_old_entry_or_other_code_is_timed_again(tmp_path, monkeypatch):
    m = Machine().install(monkeypatch, tmp_path)
    spec = R.Spec((1, 1), "mse")
    R.rates([spec], "cpu")
    n = len(m.calls)
    R.rates([spec], "cpu")
    assert len(m.calls) == n                                                # cached
    rate, why = R.cached("cpu", spec.key, now=R.cached("cpu", spec.key)[0].at + R.MAX_AGE_S + 1)
    assert rate is None and "days ago" in why
    monkeypatch.setitem(R._FINGERPRINT, "value", "0123456789ab")           # the timed code changed
    assert "code0123456789ab" in R.cache_file("cpu").name and R.cached("cpu", spec.key)[0] is None
    R.rates([spec], "cpu")
    assert len(m.calls) > n


def test_the_cache_lives_under_certdp_cache_per_machine_threads_torch_certdp_and_code(tmp_path, monkeypatch):
    import torch
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    name = R.cache_file("cpu").name
    assert R.cache_file("cpu").parent == tmp_path / "timing"
    assert f"{torch.get_num_threads()}threads" in name and f"torch{torch.__version__}" in name
    assert f"code{R.fingerprint()}" in name
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")                       # spinning threads or not: other rates
    assert R.cache_file("cpu").name != name


def test_the_load_at_the_timing_does_not_move_the_estimate(tmp_path, monkeypatch):
    """The defect: `figures --list` estimates moved 6-20x between two timings (the rates were
    timed once under whatever load there was).  Timed under a 5x load, the rates are scaled by
    the load now: the estimate now is the one an idle timing gives."""
    s = settings("agtr", "dataset=linear", "dataset.n_train=4000", "train.steps=30", "staircase.k_max=64")
    idle = Machine(probe=0.01).install(monkeypatch, tmp_path / "idle")
    e_idle = E.estimate(s)
    loaded = Machine(load=5.0, probe=0.05).install(monkeypatch, tmp_path / "loaded")
    monkeypatch.setattr(R, "probe", lambda **kw: loaded.probe)
    R.rates([*E.work_of(s).specs.values(), E.work_of(s).train_spec], "cpu")   # timed under load
    monkeypatch.setattr(R, "probe", lambda **kw: idle.probe)                # ... used on an idle machine
    e_then = E.estimate(s, calibrate=False)
    assert e_then.seconds == pytest.approx(e_idle.seconds, rel=1e-6)
    assert e_then.high / e_then.seconds > e_idle.high / e_idle.seconds      # the move widens the band
    n = len(loaded.calls)
    E.estimate(s, retime_moved=3.0)                                         # a run about to start times again
    assert len(loaded.calls) > n


def test_the_estimate_says_how_uncertain_it_is(tmp_path, monkeypatch):
    Machine().install(monkeypatch, tmp_path)
    est = E.estimate(settings("agtr", "dataset=linear", "dataset.n_train=4000", "train.steps=30"))
    assert est.low < est.seconds < est.high and est.high / est.seconds >= E.BAND
    assert re.fullmatch(r"about \d+ (s|min|h) \(\d+(\.\d)?( s| min| h)?-\d+(\.\d)? (s|min|h)\)", est.text()), est.text()
    assert E.Estimate(180.0, low=90.0, high=360.0).text() == "about 3 min (90 s-6 min)"


# ---------------------------------------------------------------------------- progress, resume, figures
def test_a_resumed_run_estimates_what_is_left(tmp_path, monkeypatch):
    """The defect: a resumed run announced the whole run again."""
    Machine(unit=1e-6).install(monkeypatch, tmp_path)
    monkeypatch.setattr(E, "LONG_RUN_S", 0.0)
    s = settings("agtr", "dataset=linear", "dataset.n_train=4000", "train.steps=40", "staircase.k_max=64")
    whole = E.estimate(s)
    saved = {"nominal#0": {"step": 40, "done": True}, "agt#0": {"step": 30, "done": False}}
    with checkpoint.active(checkpoint.Session(folder=None, interval_s=None, progress_s=None, restored=saved)):
        est = E.announce(s)
    w = E.work_of(s)
    table = R.rates([w.train_spec, *w.specs.values()], "cpu")
    (key, ((steps, el),)), = w.agt.items()
    rate = table[key]
    want = E.overhead_s() + rate.setup + rate.seconds(steps - 30, el, 0.01)
    assert est.whole == pytest.approx(whole.seconds) and est.seconds == pytest.approx(want)
    assert est.seconds - E.overhead_s() < (whole.seconds - E.overhead_s()) / 2 and " left (" in est.text() and "the whole run about" in est.text()


AGTR_FIGURE = """name: tiny_estimate
title: tiny
caption: one small AGT-R run
plot: cond_table
runs:
  - id: lin
    command: agtr
    overrides: [dataset=linear, dataset.n_train=2000, dataset.n_test=200, train.steps=40, staircase.k_max=8,
                privacy.n_draws=5]
"""


def test_figures_list_says_it_is_timing_before_it_times_and_estimates_what_a_checkpoint_left(tmp_path, monkeypatch,
                                                                                                capsys):
    """The defect: the first `certdp figures --list` printed nothing for 240 s."""
    from certdp import figures as F
    m = Machine(unit=1e-5).install(monkeypatch, tmp_path / "cache")
    exps = tmp_path / "experiments"
    exps.mkdir()
    (exps / "tiny_estimate.yaml").write_text(AGTR_FIGURE)
    timer_of = m.timer_of

    def said_first(spec, device):
        assert f"estimate: timing {spec.key}" in capsys.readouterr().err    # the line came before the timing
        return timer_of(spec, device)
    monkeypatch.setattr(R, "real_timer", said_first)
    lines: list[str] = []
    F.list_figures("quick", exps, echo=lines.append, out_root=str(tmp_path / "out"))
    assert len(lines) == 1 and re.search(r"\d+ s \(\d+( s| min)?-\d+ (s|min)\) here \(estimated\)", lines[0]), lines
    whole = float(re.search(r"\[quick\]\s+(\d+) s", lines[0]).group(1))
    (r,) = [F.resolve(sp, tmp_path / "out") for sp in F.load_experiments(exps)["tiny_estimate"].specs("quick")]
    ck = checkpoint.Session(folder=results.resumable_dir(r.run_dir), interval_s=None, progress_s=None,
                            restored={"nominal#0": {"step": 40, "done": True}, "agt#0": {"step": 39, "done": False}},
                            record={"format": checkpoint.STATE_FORMAT, checkpoint.ID_KEY: "test-checkpoint"})
    ck.save()
    from certdp.figure_times import run_estimate
    left = run_estimate(r)
    assert left.whole == pytest.approx(run_estimate(r, calibrate=False).whole) and left.seconds < left.whole
    lines.clear()
    F.list_figures("quick", exps, echo=lines.append, out_root=str(tmp_path / "out"))
    assert float(re.search(r"\[quick\]\s+(\d+) s", lines[0]).group(1)) < whole


def test_estimate_is_the_work_times_the_cached_rates_and_times_once(tmp_path, monkeypatch):
    m = Machine().install(monkeypatch, tmp_path)
    s = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8")
    w = E.work_of(s)
    assert E.estimate(s, calibrate=False) is None                          # nothing cached, none timed
    est = E.estimate(s)
    table = R.rates([w.train_spec, *w.specs.values()], "cpu", calibrate_missing=False)
    g = table[w.train_spec.key]
    want = E.overhead_s() + sum(g.seconds(st, e, m.probe) for st, e in w.train)
    want += sum(table[k].setup + sum(table[k].seconds(st, e, m.probe) for st, e in loops) for k, loops in w.agt.items())
    assert est.seconds == pytest.approx(want) and {c[0] for c in m.calls} == set(E.keys_of(s, w))
    cached = json.loads(R.cache_file("cpu").read_text())
    assert set(cached) == set(E.keys_of(s, w)) and all(v["load"] >= 0 and v["at"] > 0 for v in cached.values())
    n = len(m.calls)
    assert E.estimate(s).seconds == pytest.approx(want) and len(m.calls) == n     # from the cache


def test_a_long_run_says_its_estimate_before_it_starts_and_a_small_one_times_nothing(tmp_path, monkeypatch, caplog):
    m = Machine(unit=1e-6).install(monkeypatch, tmp_path)
    small = settings("agtr", "dataset=linear", "dataset.n_train=1000", "train.steps=30", "staircase.k_max=8")
    with caplog.at_level("INFO", logger="certdp"):
        E.announce(small)
    assert "estimate from the settings" not in caplog.text and m.calls == []
    big = settings("agtr", "dataset=california", "staircase.k_max=28")     # 330 steps x 28 radii x 16,512 x P
    with caplog.at_level("INFO", logger="certdp"):
        est = E.announce(big)
    assert est.seconds >= E.LONG_RUN_S
    line = next(r.getMessage() for r in caplog.records if "estimate from the settings" in r.getMessage())
    assert "whole run" in line and "device=cuda" in line and "certdp resume" in line and f"({E.duration_span(est.low, est.high)})" in line


@pytest.mark.slow           # a real timing: 2-40 s on 2 cores, with the load
def test_a_real_timing_is_plausible_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path))
    spec = R.Spec((4, 8, 1), "mse", ("ibp", ()), batch=256, kind="agt", hint=256 * 49 * 32)
    rate = R.rates([spec], "cpu")[spec.key]
    assert rate.refused(__import__("torch").device("cpu")) is None and not rate.provisional
    assert R.cached("cpu", spec.key)[0] == rate


def test_timing_inside_a_run_leaves_the_runs_checkpoint_alone(tmp_path):
    """A timing runs during a run (announce): a loop the timed code opens must not enter that
    run's checkpoint (its loop keys would shift and a resume would refuse)."""
    from certdp.estimate.timers import apart, timer_of
    run = checkpoint.Session(folder=tmp_path / "r.resumable", interval_s=0, progress_s=None,
                             record={"format": checkpoint.STATE_FORMAT, checkpoint.ID_KEY: "test-checkpoint"})
    with checkpoint.active(run):
        with apart():
            with checkpoint.current().loop("dpsgd", total=1) as lp:
                lp.tick(1, dict)
        timer_of(R.Spec((2, 1), "hinge", batch=8, kind="dpsgd"), "cpu")(8, 2, 2)
        assert checkpoint.current() is run
    assert checkpoint.current() is not run
    assert run.entries == {} and run.counts == {} and not (tmp_path / "r.resumable").exists()


# ---------------------------------------------------------------------------- a text dataset's embeddings
def _imdb(*more: str):
    from pathlib import Path
    fix = Path(__file__).parent / "fixtures" / "imdb"
    return settings("ags", "dataset=imdb", "device=cpu", f"dataset.path={fix}", "dataset.n_private=30",
                    "dataset.n_public=10", "dataset.n_test=12", "train.steps=5", "staircase.k_max=4", *more)


class CountingEncoder:
    """Unit-length 'embeddings' from a hash; notes whether the run had said its estimate when
    the first text was embedded."""
    tag, name, dim, device, max_seq_length = "count", "minilm", 8, "cpu", 128

    def __init__(self, said=None):
        self.said, self.seen = said, []

    def encode(self, texts):
        import hashlib

        import numpy as np
        self.seen.append(self.said.said if self.said is not None else None)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            v = np.frombuffer(hashlib.sha256(t.encode()).digest()[: self.dim], np.uint8).astype(np.float32) - 127.5
            out[i] = v / np.linalg.norm(v)
        return out


def test_a_text_runs_estimate_counts_the_encoder_and_drops_once_its_embeddings_are_cached(tmp_path, monkeypatch,
                                                                                          caplog):
    from certdp.data import encoders
    from certdp.data.encoders import cpu_seconds
    Machine().install(monkeypatch, tmp_path)
    s = _imdb()
    w = E.work_of(s)                                        # from the settings: every text, nothing cached
    emb = w.embedding
    assert (emb.texts, emb.device, emb.exact) == (52, "cpu", False) and not w.unmodelled
    assert emb.seconds == pytest.approx(52 * cpu_seconds("minilm", 1300.0, 128) / 2)
    without = E.estimate(s, work=E.Work(**{**w.__dict__, "embedding": None}))
    assert E.estimate(s, work=w).seconds == pytest.approx(without.seconds + E.embedding_seconds(emb)) and emb.seconds > 0
    # a run counts what its cache lacks and says the estimate before it embeds anything
    said = E.Announcer(s)
    enc = CountingEncoder(said)
    monkeypatch.setattr(encoders, "load_encoder", lambda cfg: enc)
    with caplog.at_level("INFO", logger="certdp"), encoders.before_embedding(said.embedding):
        load_dataset(dict(s.dataset), s.seed)
    assert enc.seen and all(enc.seen) and said.pending.texts == said.pending.total == 52 and said.pending.exact
    line = next(r.getMessage() for r in caplog.records if "estimate from the settings" in r.getMessage())
    assert "embeddings: about" in line and "52 of 52 texts to embed" in line
    first = E.estimate(s, work=E.Work(**{**w.__dict__, "embedding": said.pending}))
    # the same run again: every chunk cached, nothing to embed, the estimate drops by the encoder's cost
    caplog.clear()
    again = E.Announcer(s)
    enc.seen, enc.said = [], again
    with caplog.at_level("INFO", logger="certdp"), encoders.before_embedding(again.embedding):
        load_dataset(dict(s.dataset), s.seed)
        assert enc.seen == [] and again.pending.texts == 0 and not again.said  # said after the data's checks
        again.after_data()
    line = next(r.getMessage() for r in caplog.records if "estimate from the settings" in r.getMessage())
    assert "all 52 cached" in line
    cached = E.estimate(s, work=E.Work(**{**w.__dict__, "embedding": again.pending}))
    assert first.seconds - cached.seconds == pytest.approx(E.embedding_seconds(said.pending)) and \
        E.embedding_seconds(said.pending) > 0


def test_the_embeddings_scale_with_the_load_and_are_named_where_not_modelled(tmp_path, monkeypatch):
    import os
    Machine().install(monkeypatch, tmp_path)
    emb = E.Embedding(1000, 1000, "minilm-len128", "cpu", 40.0)
    cores = os.cpu_count() or 1
    threads = min(__import__("torch").get_num_threads(), cores)
    monkeypatch.setattr(E, "_load", lambda: 4.0 * cores)             # 4 other runnable threads per core
    assert E.embedding_seconds(emb) == pytest.approx(40.0 * (4.0 * cores + threads) / cores)
    monkeypatch.setattr(E, "_load", lambda: 0.0)                     # idle: the measured two-core cost
    assert E.embedding_seconds(emb) == pytest.approx(40.0 * max(1.0, threads / cores)) and E.embedding_seconds(E.Embedding(0, 9, "m", "cpu", 0.0)) == 0.0
    s = _imdb()
    w = E.work_of(s)                # a run on a GPU embeds there: its time is not modelled, and said so
    w.embedding = E.settings_embedding({**dict(s.dataset), "device": "cuda"})
    assert w.embedding.seconds is None and w.embedding.device == "cuda" and w.embedding.texts == 52
    est = E.estimate(s, work=w, device="cpu")
    assert any("embeddings on cuda" in u for u in est.unmodelled) and est.text().startswith(">= ")
