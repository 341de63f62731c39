"""``certdp dpaudit`` has power (issue 19, item 5): the neighbour search, the interval events chosen
on one half of the draws, and the two planted bugs it must catch -- a Cauchy release with half its
noise scale and a certificate that drops the k*gamma term of a substituted record -- next to the
same releases done right, where its bound stays below the claim."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from certdp.privacy import empirical
from certdp.privacy.empirical import epsilon_lower_bound, sample_release
from certdp.privacy.loss import Release1D, pure_loss
from test_e2e import run, tables

# The linear task of issue 19's MILP case (N = 12, batches of 4, 6 steps) with a narrow output range
# [1.1, 1.2] and a small beta: one extreme record moves a clipped test prediction from one end of
# the range to the other, so the smooth bound (capped by the range width) is nearly attained and the
# Cauchy release's exact loss is 0.69 at eps = 1 -- and 1.59 with half the noise scale.
NARROW = ["dpaudit", "dataset=linear", "dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4",
          "train.steps=6", "train.lr=0.3", "staircase.k_max=12", "dataset.output_range=[1.1,1.2]",
          "privacy.releases=[cauchy]", "privacy.epsilons=[1]", "privacy.beta=0.02", "privacy.n_draws=100000"]
# The same task with the default range [-6, 6] and eps = 4 (beta = 2): the smooth bound is set by
# the radius-1 envelope, so a certificate that forgets the substituted record shows.
WIDE = ["dpaudit", "dataset=linear", "dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4",
        "train.steps=6", "train.lr=0.3", "staircase.k_max=12", "privacy.releases=[cauchy]", "privacy.epsilons=[4]",
        "privacy.n_draws=100000", "certificate.substitutions=per_batch"]


# ---------------------------------------------------------------------------- events
@pytest.mark.slow
def test_interval_events_reach_what_thresholds_cannot():
    """Two Cauchy releases a shift apart: the best event is an interval on one side (the log-ratio
    peaks there and falls back towards 0 in both tails), which no threshold captures.  Both bounds
    stay below the exact loss; the interval's comes within 10% of it."""
    rng = np.random.default_rng(0)
    a, b = Release1D("cauchy", 0.0, 1.0), Release1D("cauchy", 0.5, 1.0)
    exact = float(pure_loss(a, b))
    xa, xb = sample_release(a, 1_000_000, rng), sample_release(b, 1_000_000, rng)
    thr = epsilon_lower_bound(xa, xb, alpha=0.05, events="thresholds")
    itv = epsilon_lower_bound(xa, xb, alpha=0.05, events="intervals")
    assert thr.epsilon < 0.8 * exact and 0.9 * exact < itv.epsilon <= exact
    assert "in [a, b]" in itv.event and np.isfinite(itv.lo) and np.isfinite(itv.hi)
    assert itv.n_a == itv.n_b == 500_000                          # the held-out halves only
    # an atom of a clipped release is an event too (a = b at the end of the range)
    c, d = Release1D("cauchy", 1.0, 0.5, 0.0, 1.0), Release1D("cauchy", 0.0, 0.5, 0.0, 1.0)
    r = epsilon_lower_bound(sample_release(c, 200_000, rng), sample_release(d, 200_000, rng), alpha=0.05)
    atom = float(np.log(0.5 / (0.5 - np.arctan(2.0) / np.pi)))    # P(Y = 1) under c over d
    assert atom < r.epsilon <= float(pure_loss(c, d))


def test_split_bound_covers_the_true_epsilon_and_a_planted_bug_breaks_it(monkeypatch):
    """Validity: over 100 repetitions the bound at alpha = 0.1 exceeds the true epsilon at most 20
    times (expected <= 10: the event is chosen on the first half only), for a Laplace pair 0.3
    apart and for two equal releases (true epsilon 0).  The check has teeth: with Clopper-Pearson
    replaced by the point estimate (a planted bug) the count on the equal pair exceeds 30."""
    shifted = Release1D("laplace", 0.0, 1.0), Release1D("laplace", 0.3, 1.0)
    same = Release1D("laplace", 0.0, 1.0), Release1D("laplace", 0.0, 1.0)

    def exceed(a, b, seed):
        rng = np.random.default_rng(seed)
        true = float(pure_loss(a, b))
        return sum(epsilon_lower_bound(sample_release(a, 1000, rng), sample_release(b, 1000, rng),
                                       alpha=0.1).epsilon > true for _ in range(100))
    assert exceed(*shifted, 1) <= 20 and exceed(*same, 2) <= 20
    monkeypatch.setattr(empirical, "clopper_pearson", lambda k, n, alpha: (np.asarray(k) / np.asarray(n),) * 2)
    assert exceed(*same, 2) > 30


# ---------------------------------------------------------------------------- the search
def _settings(*overrides):
    from certdp import results
    from certdp.settings.compose import compose_and_parse
    results.register_resolvers()
    return compose_and_parse("dpaudit", list(overrides), multirun=False, config_path="configs", config_name="dpaudit")[0]


def test_placements_come_from_the_batch_plan():
    """The configured record first, then the most used index (over every epoch), one of the final
    batch and of the last batch of epoch 1: read from the batch plan, never from the data."""
    from certdp.methods import dpaudit
    s = _settings(*NARROW[1:8], "dpaudit.record=3", "dpaudit.placements=3")
    exp = dpaudit._experiment(s)
    got = dpaudit.search.placements(exp, record=3, n=3)
    idx = [i for i, _ in got]
    assert idx[0] == 3 and len(idx) == 4 and len(set(idx)) == 4
    uses = torch.bincount(exp.plan.reshape(-1), minlength=exp.n_train)
    assert uses[idx[1]] == uses.max() and "most used" in got[1][1]
    assert idx[2] in exp.plan[-1].tolist() and "final batch" in got[2][1]
    assert idx[3] in exp.plan[exp.n_train // 4 - 1].tolist() and "epoch 1" in got[3][1]


def test_candidate_records_cover_both_signs_magnitudes_and_label_flips():
    from certdp.methods import dpaudit
    s = _settings(*NARROW[1:8], "dpaudit.magnitudes=[100,1000000]")
    exp = dpaudit._experiment(s)
    recs = dpaudit.search.records_at(exp, 5, "here", z=np.array([0.3]), y0=0.7, magnitudes=(1e2, 1e6),
                              patterns=[("1", np.ones(1))], configured_shift=10.0)
    xy = {(float(c.x[0]), float(c.y)) for c in recs}
    assert (-1e6, 0.0) in xy and (1e6, -1e6) in xy and (0.0, 1e2) in xy and (-1e2, -1e2) in xy
    assert (-3.0, 10.7) in {(round(float(c.x[0]), 9), round(float(c.y), 9)) for c in recs if c.search == "configured"}
    assert len(recs) == 1 + 2 * 8 and all(c.index == 5 for c in recs)
    sb = _settings("dataset=blobs", "dpaudit.query=parameter", "dataset.n_test=50", "train.steps=3")
    eb = dpaudit._experiment(sb)
    recs = dpaudit.search.records_at(eb, 0, "here", z=np.zeros(8) + 0.1, y0=1, magnitudes=(1e4,),
                              patterns=[("1", np.ones(8))], configured_shift=None)
    flips = [c for c in recs if c.search == "label"]
    assert len(flips) == 1 and flips[0].x is None and flips[0].y == -1
    assert {(float(c.x[0]), c.y) for c in recs if c.x is not None and c.x[0] != 0} == {(s_ * 1e4, c) for s_ in (-1, 1)
                                                                                        for c in (-1, 1)}


# ---------------------------------------------------------------------------- planted bugs
def _real(res):
    """The rows of the real pairs of datasets (not the admissible pair, not a refusal)."""
    return res[~res.search.isin(["admissible", "refusal"])]


@pytest.mark.slow
def test_dpaudit_catches_a_halved_cauchy_scale(tmp_path, monkeypatch):
    """A Cauchy release whose noise scale is halved (a planted bug in the mechanism) has exact loss
    1.59 > 1 on the pair the search finds; the audit's lower bound is above the claim (exit 1)."""
    from certdp.privacy.mechanisms.prediction import CauchyTight
    full = CauchyTight.scale
    monkeypatch.setattr(CauchyTight, "scale", lambda self, s: full(self, s) / 2)
    code, err = run(NARROW, tmp_path / "o")
    res = _real(tables(tmp_path / "o")["results"])
    assert code == 1 and res.violation.all(), err
    assert (res.epsilon_lower_bound > 1.1).all() and (res.statistic_epsilon > 1.5).all()
    assert (res.epsilon_lower_bound <= res.statistic_epsilon).all()


@pytest.mark.slow
def test_dpaudit_stays_below_the_claim_on_the_correct_release(tmp_path):
    """No false alarm: the same release with its true scale, on the same exact-loss-guided pair, has
    exact loss 0.69; the bound comes close (> 0.55 from 10^5 draws) but stays below it and the claim."""
    code, err = run(NARROW, tmp_path / "o")
    res = tables(tmp_path / "o")["results"]
    assert code == 0 and not res.violation.any(), err
    assert (res.n_a == 50_000).all()
    res = _real(res)
    assert (0.55 < res.epsilon_lower_bound).all() and (res.epsilon_lower_bound <= res.statistic_epsilon).all()
    assert (res.statistic_epsilon < 1).all()


def _engine_without_the_substitution_term():
    from certdp.bounds.ibp import IBP
    from certdp.bounds.interval import Interval

    class DropsSubstitutionTerm(IBP):
        """IBP whose batch sums forget the k*gamma of the k substituted records (a planted bug):
        T_r covers the records that leave a batch but not the ones that replace them."""

        name = "test_drops_kgamma"

        def batch_sum_bounds(self, model, boxes, x, y, *, subs, src=None, clip):
            s = super().batch_sum_bounds(model, boxes, x, y, subs=subs, src=src, clip=clip)
            kg = (subs.clamp(max=x.shape[0]).to(s.lo.dtype) * clip).unsqueeze(-1)
            return Interval(s.lo + kg, s.hi - kg)
    return DropsSubstitutionTerm


@pytest.mark.slow
@pytest.mark.parametrize("engine,violated", [("test_drops_kgamma", True), ("ibp", False)])
def test_dpaudit_catches_a_certificate_without_the_substitution_term(tmp_path, monkeypatch, engine, violated):
    """A reintroduced soundness bug: an engine registered under a test name that drops the k*gamma
    term.  Its envelopes miss the neighbours, the smooth bound is too small, and the audit reports
    a bound above the claimed eps = 4 (exit 1); the sound engine (ibp) on the same settings passes."""
    from certdp.bounds import CERTIFICATES
    monkeypatch.setitem(CERTIFICATES, "test_drops_kgamma", _engine_without_the_substitution_term())
    # as in a run: the debug check of crossed intervals (on in tests) would stop the broken engine
    # before any release; the audit must catch it from the releases alone
    monkeypatch.setattr("certdp.bounds.interval.CHECK", False)
    # and AGT's crossing guard (agt.check_boxes) refuses a box that excludes the nominal run; it
    # catches this engine too, so it is switched off: here the audit alone must see the bug
    monkeypatch.setattr("certdp.agt.check_boxes", lambda *a, **k: None)
    code, err = run([*WIDE, f"certificate.name={engine}"], tmp_path / "o")
    res = _real(tables(tmp_path / "o")["results"])
    assert code == (1 if violated else 0), err
    assert bool(res.violation.all()) is violated
    if violated:
        assert (res.epsilon_lower_bound > 4.5).all() and (res.statistic_epsilon > 5).all()
    else:
        assert (res.epsilon_lower_bound <= res.statistic_epsilon).all() and (res.statistic_epsilon < 1).all()


# ---------------------------------------------------------------------------- the command
@pytest.mark.slow
def test_dpaudit_search_beats_the_configured_neighbour_and_splits_alpha(tmp_path):
    """The search's best pair has a larger exact loss than the configured record's shift; auditing
    the three best pairs splits alpha over them (Bonferroni) and reports each pair with its search,
    placement and records, and the release's bound (their maximum)."""
    base = [*WIDE[:-3], "privacy.epsilons=[1]", "privacy.n_draws=20000"]
    code, err = run([*base, "dpaudit.search=false"], tmp_path / "fixed")
    fixed = _real(tables(tmp_path / "fixed")["results"])
    assert code == 0 and len(fixed) == 1 and (fixed.search == "configured").all(), err
    assert fixed.candidates.iloc[0] == 2
    code, err = run([*base, "dpaudit.pairs=3"], tmp_path / "search")
    res = _real(tables(tmp_path / "search")["results"])
    assert code == 0 and len(res) == 3, err
    # alpha over the three pairs, the worst admissible neighbour and the noise check (one release)
    assert list(res.pair_rank) == [1, 2, 3] and np.allclose(res.alpha_pair, 0.05 / 5)
    assert (res.release_lower_bound == res.epsilon_lower_bound.max()).all()
    assert res.statistic_epsilon.iloc[0] == res.statistic_epsilon.max() > 1.5 * fixed.statistic_epsilon.iloc[0]
    assert res.candidates.iloc[0] > 40 and res.pairs_scored.iloc[0] > res.candidates.iloc[0]
    for col in ("search", "placement", "record_D", "record_D_prime", "event", "k_a", "n_a", "k_b", "n_b"):
        assert res[col].notna().all(), col


@pytest.mark.parametrize("arg,key", [("dpaudit.magnitudes=[0]", "dpaudit.magnitudes"),
                                     ("dpaudit.pairs=0", "dpaudit.pairs"),
                                     ("dpaudit.placements=-1", "dpaudit.placements"),
                                     ("dpaudit.queries=0", "dpaudit.queries"),
                                     ("dpaudit.search=1", "dpaudit.search"),
                                     ("dpaudit.max_datasets=5", "dpaudit.max_datasets")])
def test_dpaudit_search_settings_are_refused_in_one_line(tmp_path, arg, key):
    code, err = run([*WIDE, arg], tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"certdp: error: {key}: "), err
    assert "allowed" in err
    assert not list((tmp_path / "o").rglob("*.csv"))


def test_the_exact_epsilon_grid_stops_before_exp_overflows():
    """The exact eps(delta) bracket walks a grid claim * steps; at claim 700 (the largest epsilon
    dpaudit accepts) the grid passes 709.78, where e^eps overflows float64: it must stop there
    (result: beyond the grid, inf) instead of raising OverflowError (the prober found the
    traceback).  A pair whose loss is small still gets its finite bracket."""
    import math

    from certdp.methods.dpaudit.exact import _epsilon_at_delta
    from certdp.privacy.loss import Release1D
    far = (Release1D("laplace", np.array([0.0]), np.array([1e-3]), -math.inf, math.inf),
           Release1D("laplace", np.array([1.0]), np.array([1e-3]), -math.inf, math.inf))      # loss 1000
    near = (Release1D("laplace", np.array([0.0]), np.array([1.0]), -math.inf, math.inf),
            Release1D("laplace", np.array([0.5]), np.array([1.0]), -math.inf, math.inf))      # loss 0.5
    assert np.isinf(_epsilon_at_delta(*far, 1e-5, 700.0)).all()
    e = _epsilon_at_delta(*near, 1e-5, 700.0)
    assert np.isfinite(e).all() and (e <= 700).all()


# ---------------------------------------------------------------------------- the published code
TINY = ["dpaudit", "dataset=linear", "dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4", "train.steps=6",
        "train.lr=0.3", "staircase.k_max=12", "privacy.releases=[laplace]", "privacy.epsilons=[1]",
        "privacy.n_draws=20000"]


def _halve_the_published_scale(monkeypatch):
    """The planted bug of issue 28 (item 3): the function that writes publish/ adds noise of half
    the scale (scale is linear in the sensitivity, so halving that halves the scale)."""
    from certdp.certify import publish
    original = publish.release

    def halved(center, sensitivity, mech, source, **kw):
        return original(center, torch.as_tensor(sensitivity, dtype=torch.float64) / 2, mech, source, **kw)
    monkeypatch.setattr(publish, "release", halved)


def test_dpaudit_draws_from_the_code_that_writes_publish(tmp_path, monkeypatch):
    """A planted bug in the publishing function (half the noise scale) changes what `agtr
    queries=` publishes and turns dpaudit's verdict (exit 1: the published noise is narrower than
    the proof's scale); the shipped code passes.  (Before issue 28 the audit rebuilt each release
    from the certified centre and scale, so its output stayed bit-identical under this bug.)"""
    (tmp_path / "q.csv").write_text("x\n0.1\n-0.3\n0.7\n")
    agtr = ["agtr", *TINY[1:-1], "privacy.n_draws=5", f"queries={tmp_path / 'q.csv'}",
            "privacy.reproducible_release=true"]
    code, err = run([*TINY, "dpaudit.search=false"], tmp_path / "ok")
    ok = tables(tmp_path / "ok")["results"]
    assert code == 0 and not ok.violation.any(), err
    adm = ok[ok.search == "admissible"]
    assert len(adm) == 1 and 0.9 < adm.noise_ratio.iloc[0] < 1.1 and not adm.noise_below_claim.iloc[0]
    code, err = run(agtr, tmp_path / "a_ok")
    assert code == 0, err
    _halve_the_published_scale(monkeypatch)
    code, err = run(agtr, tmp_path / "a_bad")
    assert code == 0, err
    shipped, planted = (pd.read_csv(next((tmp_path / d).rglob("publish/answers.csv"))) for d in ("a_ok", "a_bad"))
    assert not np.allclose(shipped.answer, planted.answer)           # the plant is on the published path
    code, err = run([*TINY, "dpaudit.search=false"], tmp_path / "bad")
    bad = tables(tmp_path / "bad")["results"]
    assert code == 1, err
    adm = bad[bad.search == "admissible"]
    assert adm.violation.all() and adm.noise_below_claim.all() and (adm.noise_ratio_upper < 0.6).all()
    assert "narrower than the proof" in adm.finding.iloc[0]


def test_dpaudit_reports_a_run_refused_on_one_side_as_a_violation(tmp_path, monkeypatch):
    """Issue 28 item 4, planted: a run refuses whenever a training feature exceeds 50.  Every
    candidate with features of 100 is refused while D releases -- an outcome that depends on one
    record, an infinite privacy loss: a violation row per release, exit 1, naming the candidate
    and the refusal's key, never the refusal's message (it may quote records)."""
    from certdp.certify import core
    from certdp.errors import ConfigError
    envelopes = core.envelopes

    def refusing(exp, **kw):
        if float(exp.x.abs().max()) > 50:
            raise ConfigError("train.lr", "planted refusal: a feature above 50")
        return envelopes(exp, **kw)
    monkeypatch.setattr(core, "envelopes", refusing)
    code, err = run([*TINY, "dpaudit.placements=0", "dpaudit.magnitudes=[100]", "privacy.n_draws=2000"],
                    tmp_path / "o")
    res = tables(tmp_path / "o")["results"]
    assert code == 1, err
    ref = res[res.search == "refusal"]
    assert len(ref) == 1 and ref.violation.all() and ref.epsilon_lower_bound.isna().all()
    assert ref.candidates_refused.iloc[0] == 6 and ref.record.iloc[0] == 0          # x = +-100 with y in {-100, 0, 100}
    assert ref.refusal.iloc[0] == "ConfigError (train.lr)" and "100" in ref.record_D_prime.iloc[0]
    assert "infinite privacy loss" in ref.finding.iloc[0]
    assert not res[res.search != "refusal"].violation.any()      # the released candidates are fine
    assert "planted refusal" not in next((tmp_path / "o").rglob("results.csv")).read_text()


# ---------------------------------------------------------------------------- the admissible pair
class _Halved:
    """A release whose scale is half its own (the planted bug), everything else delegated."""

    def __init__(self, mech):
        self.mech = mech

    def __getattr__(self, name):
        return getattr(self.mech, name)

    def scale(self, s):
        return self.mech.scale(s) / 2


def _mechanism(name, eps, P=9):
    from certdp.privacy.mechanisms import make_mechanism
    q = "parameter" if name.endswith("_p") else "prediction"
    return make_mechanism(name, query=q, epsilon=eps, delta=1e-5, beta=None, **({"n_params": P} if q == "parameter" else {}))


def _worst(name, eps, *, halved=False, P=9):
    """The worst admissible neighbour of one prediction, or of P parameters, with bound 1."""
    from certdp.methods.dpaudit.admissible import worst_admissible
    m = _mechanism(name, eps, P)
    q = "parameter" if name.endswith("_p") else "prediction"
    ss = np.ones(P if q == "parameter" else 1)
    side = {"query": q, "center": np.zeros(len(ss)), "ss": {float(m.beta): ss}, "rng": None, "cap": None}
    return worst_admissible(side, _Halved(m) if halved else m, name.split("_")[0])


@pytest.mark.parametrize("name", ["cauchy", "laplace", "cauchy_p", "laplace_p"])
def test_the_worst_admissible_neighbour_stays_below_the_claim_and_a_halved_scale_does_not(name):
    """The exact loss of the worst pair a certificate admits (shift min(S, S'), S' = S e^{+-beta})
    is below the claim for every shipped release (0.5 <= eps <= 4, default beta), and above it
    with half the noise scale -- except the 1-D Cauchy at eps >= 1, which stays eps-DP with half
    its scale (0.90 at eps = 1: its bound a + beta is loose), so no audit may flag it there."""
    for eps in (0.5, 1, 2, 4) if name.startswith("cauchy") else (0.5, 2):
        w = _worst(name, eps)
        whole = w["release_epsilon"] if not np.isnan(w["release_epsilon"]) else w["epsilon"]
        assert 0.2 * eps < w["epsilon"] <= whole <= eps, (eps, w)
        h = _worst(name, eps, halved=True)
        hw = h["release_epsilon"] if not np.isnan(h["release_epsilon"]) else h["epsilon"]
        assert hw > w["epsilon"]
        if name != "cauchy":
            assert hw > 1.05 * eps, (eps, h)
        elif eps >= 1:
            assert hw < eps
    # the neighbour is admissible: its bound within e^{+-beta}, its centre within min(S, S')
    beta = float(_mechanism(name, 1).beta)
    w = _worst(name, 1)
    assert abs(np.log(w["ss"])) <= beta * (1 + 1e-12) and abs(w["center"]) <= min(1.0, w["ss"]) * (1 + 1e-12)


def test_noise_check_holds_its_level_and_catches_a_narrower_noise():
    """The noise check's false-alarm rate stays at its level (at most 10 of 100 repetitions at
    alpha = 0.05 on the documented noise, also clipped), and it flags noise of 0.8 times the scale
    in every repetition -- a check that can fail."""
    from certdp.methods.dpaudit.admissible import noise_check
    from certdp.privacy import noise
    for fam, lo, hi in (("cauchy", -np.inf, np.inf), ("laplace", -1.5, 0.5)):
        sampler = noise.SAMPLERS[fam]
        z = sampler(noise.seeded(0, "nc", fam), (100, 4000)).numpy()
        for k, most in ((1.0, 10), (0.8, 100)):
            flags = [noise_check(np.clip(0.2 + k * 1.0 * row, lo, hi), center=0.2, scale=1.0, lo=lo, hi=hi, fam=fam,
                                 alpha=0.05)["below"] for row in z]
            assert (sum(flags) <= most) if k == 1 else all(flags), (fam, k, sum(flags))


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["linear", "blobs"])
def test_dpaudit_flags_a_halved_scale_on_the_default_settings(dataset, monkeypatch):
    """Issue 28 item 4: on the default linear and blobs settings (the configured neighbour only,
    for time: the flags below come from the worst admissible neighbour, whatever the search) the
    shipped releases stay below their claims; half the noise scale in the publishing function is
    flagged for every release (the noise check), and half the scale in the mechanisms themselves
    for every release whose proof it breaks (its exact loss on the worst admissible pair)."""
    from certdp.certify import publish
    from certdp.methods import dpaudit
    from certdp.privacy.mechanisms import REGISTRY
    over = ["dataset=linear"] if dataset == "linear" else ["dataset=blobs", "dpaudit.query=parameter"]
    au = dpaudit.prepare(_settings(*over, "dpaudit.search=false", "privacy.n_draws=50000"))
    rows = pd.DataFrame(dpaudit.audit(au))
    assert not rows.violation.any() and (rows.epsilon_lower_bound < rows.epsilon).all()
    release = publish.release
    with monkeypatch.context() as m:
        m.setattr(publish, "release", lambda c, s, mech, src, **kw: release(c, s / 2, mech, src, **kw))
        bad = pd.DataFrame(dpaudit.audit(au))
    adm = bad[bad.search == "admissible"]
    assert len(adm) == 6 and adm.noise_below_claim.all() and adm.violation.all()
    assert np.allclose(adm.noise_ratio, 0.5, atol=0.05)
    for name in ("cauchy", "laplace", "cauchy_p", "laplace_p"):
        scale = REGISTRY[name].scale
        monkeypatch.setattr(REGISTRY[name], "scale", (lambda f: lambda self, s: f(self, s) / 2)(scale))
    bad = pd.DataFrame(dpaudit.audit(au))
    flagged = {(r.mechanism, r.epsilon) for r in bad[bad.violation].itertuples()}
    assert (bad[bad.violation].finding.str.contains("exact loss above the claim")).all()
    if dataset == "linear":
        # every Laplace release; the 1-D Cauchy (beta = eps/2) stays eps-DP with half its scale at eps >= 1
        assert {("laplace", e) for e in (0.5, 1.0, 2.0)} <= flagged and not {("cauchy", 1.0), ("cauchy", 2.0)} & flagged
    else:
        assert flagged == {(m, e) for m in ("cauchy_p", "laplace_p") for e in (0.5, 1.0, 2.0)}
