"""End-to-end beta-smoothness: neighbouring datasets are certified through the real AGT-R path
(``run_agt`` + ``prediction_staircase``, as ``certdp audit`` does), and the exact privacy loss of
the released (clipped) noisy prediction between them never exceeds the claimed epsilon.

(a) The cases of the issue: the linear preset's training with small N, an extreme record set to
    x = 0.3, y = 10 in D and x = 3000, y = -100 in D'.
(b) A grid of neighbouring pairs (N in {8, 30, 60, 200}, extreme and random records, full batch and
    mini-batches, with and without an output range), every epsilon from 0.02 to 10, pure (Cauchy)
    and approximate (smooth Laplace, delta = 1e-5) releases.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.bounds.base import Certificate
from certdp.bounds.shared import SharedBoxes
from certdp.certify import build_experiment, prediction_staircase
from certdp.privacy.loss import delta_of, pure_loss, release_for
from certdp.privacy.mechanisms import CauchySmooth, CauchyTight, LaplaceSmooth
from certdp.privacy.sensitivity import staircase
from certdp.privacy.smoothness import coverage, require_covered
from certdp.errors import ConfigError
from certdp.settings import parse
from certdp.training import batch_plan

PRESET_STAIRCASE = {"kind": "geometric", "dense_until": 64, "ratio": 1.1, "k_max": 1024, "include_n": True}


def _cfg(n, *, cert="ibp", stair=None, output_range=None, batch_size=None, n_test=10):
    return {"seed": 0,
            "dataset": {"name": "linear", "n_train": n, "n_test": n_test, "output_range": output_range},
            "model": {"arch": "linear"},
            "train": {"steps": 20, "lr": 0.3, "clip": 1.0, "batch_size": batch_size, "seed": 0},
            "certificate": {"name": cert},
            "staircase": stair or PRESET_STAIRCASE,
            "privacy": {"epsilons": [1.0], "delta": 1e-5, "releases": ["cauchy"],
                        "global_sensitivity": "range" if output_range else "none", "n_draws": 1}}


class Certifier:
    """S and the released prediction of any dataset that differs from the base one in records."""

    def __init__(self, cfg):
        self.exp = build_experiment(parse("agtr", cfg))
        self.x, self.y, self.xt = self.exp.x, self.exp.y, self.exp.xt
        self.cert = self.exp.engine
        self.ks = self.exp.ks
        self.plan = self.exp.plan
        self.theta0 = self.exp.model.init(self.exp.train.seed)

    def envelopes(self, X, Y):
        return run_agt(self.exp.model, self.theta0, X, Y, self.exp.train, self.ks, certificate=self.cert,
                       plan=self.plan, progress=False)

    def staircase(self, X, Y, env, output_range):
        e = self.exp.on_data(X, Y)
        priv = dataclasses.replace(e.privacy, global_sensitivity="range" if output_range else "none")
        e = dataclasses.replace(e, dataset=dataclasses.replace(e.dataset, output_range=output_range),
                                settings=dataclasses.replace(e.settings, privacy=priv))
        return prediction_staircase(e, env, self.xt)

    def with_record(self, i, xv, yv):
        X, Y = self.x.clone(), self.y.clone()
        X[i, 0], Y[i] = xv, yv
        return X, Y


def _worst_loss(mech, s_a, p_a, s_b, p_b, output_range):
    """Exact worst privacy loss over the test points (pure: sup |log ratio|; approx: delta)."""
    a = release_for(mech, center=p_a.numpy(), sensitivity=s_a.numpy(), output_range=output_range)
    b = release_for(mech, center=p_b.numpy(), sensitivity=s_b.numpy(), output_range=output_range)
    if mech.regime == "pure":
        return float(pure_loss(a, b).max())
    return float(delta_of(a, b, mech.epsilon).max())


ISSUE_CASES = [
    # (N, staircase, certificate, epsilon)
    (30, {"kind": "list", "values": [1, 2, 4, 8, 16], "include_n": True}, "crown", 0.02),
    (30, {"kind": "list", "values": [1, 2, 4, 8, 16], "include_n": True}, "crown", 0.05),
    (60, {"kind": "list", "values": [1, 2, 4, 8, 16, 32], "include_n": True}, "crown", 0.02),
    (8, PRESET_STAIRCASE, "crown", 0.1),
    (30, {"kind": "list", "values": [1, 2, 4, 8, 16], "include_n": True}, "ibp", 0.02),
    (30, PRESET_STAIRCASE, "crown", 0.02),
]


@pytest.mark.parametrize("n,stair,cert,eps", ISSUE_CASES,
                         ids=[f"N{c[0]}-{c[1]['kind']}-{c[2]}-eps{c[3]}" for c in ISSUE_CASES])
def test_issue_cases_stay_within_the_claimed_epsilon(n, stair, cert, eps):
    c = Certifier(_cfg(n, cert=cert, stair=stair))
    Xa, Ya = c.with_record(0, 0.3, 10.0)
    Xb, Yb = c.with_record(0, 3000.0, -100.0)
    ea, eb = c.envelopes(Xa, Ya), c.envelopes(Xb, Yb)
    mech = CauchyTight(eps)
    for rng_ in (None, (-6.0, 6.0)):
        (sa, pa), (sb, pb) = c.staircase(Xa, Ya, ea, rng_), c.staircase(Xb, Yb, eb, rng_)
        s_a, s_b = sa.smooth(mech.beta), sb.smooth(mech.beta)
        ratio = float((s_a.log() - s_b.log()).abs().max())
        assert ratio <= mech.beta * (1 + 1e-9), f"S(D)/S(D') = e^{ratio:.5f} > e^beta = e^{mech.beta}"
        loss = _worst_loss(mech, s_a, pa, s_b, pb, rng_)
        assert loss <= eps * (1 + 1e-9), f"exact privacy loss {loss:.6f} > eps = {eps}"


def test_crown_pair_found_by_the_search_is_smooth():
    """A neighbouring pair that :func:`certdp.privacy.smoothness.search` found for CROWN on dense
    radii (N = 30, record 29 replaced).  It holds once CROWN's relaxations are inclusion-monotone
    (the proof's condition (M1)); with the adaptive chord relaxation it exceeds e^beta."""
    c = Certifier(_cfg(30, cert="crown", stair={"kind": "range", "k_min": 1, "k_max": 30, "include_n": True}, n_test=20))
    Xa, Ya = c.with_record(29, 86.97606357529499, 52.55)
    Xb, Yb = c.with_record(29, -2177.813030805816, -4017.0)
    sa, _ = c.staircase(Xa, Ya, c.envelopes(Xa, Ya), None)
    sb, _ = c.staircase(Xb, Yb, c.envelopes(Xb, Yb), None)
    for beta in (0.01, 0.05):
        assert float((sa.smooth(beta).log() - sb.smooth(beta).log()).abs().max()) <= beta * (1 + 1e-9)


def _old_backfill_smooth(lo, hi, nominal, ks, beta):
    """The pre-fix construction (paper Algorithm 1 with back-fill, discount e^{-beta k}; the
    largest radius is N): only (beta * largest gap)-smooth."""
    Lo = torch.cat([nominal.unsqueeze(0), lo], 0)
    Hi = torch.cat([nominal.unsqueeze(0), hi], 0)
    radii = [0] + list(ks)
    cand, vals = [], []
    for j, r in enumerate(radii):
        if j + 1 < len(radii):
            cand.append(r); vals.append(torch.maximum(Hi[j + 1] - Lo[j], Hi[j] - Lo[j + 1]).sum(-1))
            if radii[j + 1] > r + 1:
                cand.append(r + 1); vals.append((Hi[j + 1] - Lo[j + 1]).sum(-1))
        else:
            cand.append(r); vals.append((Hi[j] - Lo[j]).sum(-1))
    a = torch.stack(vals, -1)
    return (a * torch.exp(-beta * torch.tensor(cand, dtype=a.dtype))).amax(-1)


def test_back_fill_with_a_radius_discount_is_not_smooth_but_the_index_discount_is():
    """Envelopes that nest exactly as the proof's (N) says (radii 1, 4, 16 = N, T_16 the common
    ceiling): D' saturates one computed radius earlier than D.  The paper's back-filled staircase
    reads both at the same radius and jumps by e^{3 beta}; the index discount stays within e^beta."""
    box = lambda *iv: (torch.tensor([[[a]] for a, _ in iv], dtype=torch.float64),
                       torch.tensor([[[b]] for _, b in iv], dtype=torch.float64))
    lo_a, hi_a = box((-0.1, 0.1), (-0.2, 0.2), (-10.0, 10.0))       # D: T_1, T_4, T_16
    lo_b, hi_b = box((-0.2, 0.2), (-10.0, 10.0), (-10.0, 10.0))     # D'
    # (N) in both directions: T_r(D) in T_next(r)(D') and T_r(D') in T_next(r)(D)
    for (la, ha), (lb, hb) in (((lo_a, hi_a), (lo_b, hi_b)), ((lo_b, hi_b), (lo_a, hi_a))):
        assert bool((lb[1:] <= la[:-1]).all() and (ha[:-1] <= hb[1:]).all())
    nom = torch.zeros(1, 1, dtype=torch.float64)
    for beta in (0.01, 0.1, 0.5):
        old = [_old_backfill_smooth(lo, hi, nom, [1, 4, 16], beta) for lo, hi in ((lo_a, hi_a), (lo_b, hi_b))]
        new = [staircase(lo, hi, nom, torch.tensor([1, 4, 16]), n_total=16, global_sensitivity=None).smooth(beta)
               for lo, hi in ((lo_a, hi_a), (lo_b, hi_b))]
        assert float(old[1] / old[0]) == pytest.approx(math.exp(3 * beta), rel=1e-9)
        assert float(new[1] / new[0]) <= math.exp(beta) * (1 + 1e-12)


def _grid_records(gen, n_random):
    ext = [(0.3, 10.0), (3000.0, -100.0), (-3000.0, 100.0), (0.0, 1e4), (1e5, 1e5), (-40.0, -7.0),
           (1e-3, -1e3), (250.0, 3.0)]
    rnd = [(float(torch.empty(1).uniform_(-1.5, 1.5, generator=gen)), float(torch.empty(1).uniform_(-4, 6, generator=gen)))
           for _ in range(n_random)]
    return ext + rnd


GRID = [(8, None), (30, None), (60, None), (60, 20), (200, None), (200, 50)]
EPS = (0.02, 0.05, 0.1, 1.0, 10.0)


@pytest.mark.slow
def test_grid_of_neighbouring_pairs_never_exceeds_the_claim():
    """All pairs of datasets that differ in one (most-used) record: >= 500 pairs, IBP (covered by
    the proof), exact loss <= eps for the pure releases, delta(eps) <= delta for the approximate."""
    gen = torch.Generator().manual_seed(5)
    pairs, worst = 0, {}
    for n, bs in GRID:
        c = Certifier(_cfg(n, batch_size=bs))
        idx = int(torch.bincount(c.plan.reshape(-1), minlength=n).argmax())
        recs = _grid_records(gen, 4 if n < 100 else 2)
        datasets = [(c.x, c.y)] + [c.with_record(idx, xv, yv) for xv, yv in recs]
        envs = [c.envelopes(X, Y) for X, Y in datasets]
        ii, jj = np.triu_indices(len(datasets), 1)
        for rng_ in (None, (-6.0, 6.0)):
            st = [c.staircase(X, Y, e, rng_) for (X, Y), e in zip(datasets, envs)]
            P = torch.stack([p for _, p in st]).numpy()                       # [M, n_test]
            for eps in EPS:
                for mech in (CauchyTight(eps), CauchySmooth(eps), LaplaceSmooth(eps, 1e-5)):
                    S = torch.stack([s.smooth(mech.beta) for s, _ in st]).numpy()
                    a = release_for(mech, center=P[ii], sensitivity=S[ii], output_range=rng_)
                    b = release_for(mech, center=P[jj], sensitivity=S[jj], output_range=rng_)
                    v = pure_loss(a, b) if mech.regime == "pure" else delta_of(a, b, eps)
                    claim = eps if mech.regime == "pure" else 1e-5
                    worst[(mech.name, eps)] = max(worst.get((mech.name, eps), 0.0), float(v.max()) / claim)
                    assert (v <= claim * (1 + 1e-9)).all(), (n, bs, rng_, mech.name, eps, float(v.max()))
            pairs += len(ii)
    assert pairs >= 500
    # the releases use their budget: the worst pure loss is a sizeable fraction of eps
    assert max(v for (m, e), v in worst.items() if m == "cauchy") > 0.3


def test_engines_declare_nesting_and_the_rest_are_refused_for_smooth_releases():
    for name, opts in (("ibp", {}), ("ibp", {"aggregation": "tau"}), ("crown", {}), ("gaplp", {})):
        cert = get_certificate(name, **opts)
        assert cert.nesting_monotone and coverage(cert) is None
        require_covered(cert)
    # MILP / LP windows are safe solver bounds, not within a data-independent gap of the optimum
    # (certdp/bounds/milp.py, Nesting): refused for smooth releases in every mode
    for name, opts in (("milp", {"workers": 1}), ("milp", {"workers": 1, "solve": "lp"}), ("exact", {})):
        cert = get_certificate(name, **opts)
        assert not cert.nesting_monotone and coverage(cert) is not None
        with pytest.raises(ConfigError) as e:
            require_covered(cert)
        assert e.value.key == "certificate.name" and "beta-smooth" in str(e.value) and "crown, gaplp, ibp" in str(e.value)
    with pytest.raises(ConfigError) as e:            # the old route to nesting is withdrawn at parse time
        get_certificate("milp", workers=1, on_time_limit="refuse")
    assert e.value.key == "certificate.on_time_limit"
    with pytest.raises(ConfigError) as e:
        require_covered(SharedBoxes(get_certificate("ibp"), 2.0))
    assert e.value.key == "ags.share_ratio"

    class Undeclared(Certificate):                   # an engine that does not declare nesting
        name = "undeclared"

        def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
            raise NotImplementedError

    with pytest.raises(ConfigError) as e:
        require_covered(Undeclared())
    assert e.value.key == "certificate.name" and "crown, gaplp, ibp" in str(e.value)


# ----------------------------------------------------------------------------- nesting
# The proof's condition (N): T_{r_j}(D) inside T_{r_{j+1}}(D') for neighbours, checked on the
# floating-point boxes run_agt returns (no tolerance), for every engine that declares it.

def _nest_data(widths, loss, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, widths[0], generator=g, dtype=torch.float64) * 2 - 1
    if loss == "mse":
        y = x.sum(1) + 0.5 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(x.sum(1) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64) > 0, 1.0, -1.0).double()
    else:
        y = torch.randint(0, widths[-1], (n,), generator=g)
    return x, y


def _replacements(x, y, loss, n_classes, gen):
    """Records substituted at the most-used index: random, extreme of both signs, a label flip."""
    d = x.shape[1]
    out = [(torch.rand(d, generator=gen, dtype=torch.float64) * 4 - 2, None)]
    for sgn in (1.0, -1.0):
        out.append((torch.full((d,), 30.0 * sgn, dtype=torch.float64), None if loss != "mse" else -100.0 * sgn))
    out.append((None, "flip"))
    recs = []
    for xv, yv in out:
        if loss == "mse":
            yv = float(torch.randn(1, generator=gen) * 3) if yv in (None, "flip") else yv
        elif loss == "hinge":
            yv = "flip" if yv == "flip" else (1.0 if bool(torch.rand(1, generator=gen) < 0.5) else -1.0)
        else:
            yv = "flip" if yv == "flip" else int(torch.randint(0, n_classes, (1,), generator=gen))
        recs.append((xv, yv))
    return recs


def _substituted(x, y, i, xv, yv, loss, n_classes):
    X, Y = x.clone(), y.clone()
    if xv is not None:
        X[i] = xv
    if yv == "flip":
        Y[i] = -Y[i] if loss == "hinge" else (Y[i] + 1) % n_classes if loss == "ce" else Y[i] + 5.0
    else:
        Y[i] = yv
    return X, Y


def _assert_nested(ea, eb, b):
    """(N) from D (ea) to D' (eb): consecutive radii, the nominal into the first radius, and the
    same trivial cover for radii >= b (the per-epoch ledger: b = the slots of an epoch, b * E)."""
    ks = ea.k_values.tolist()
    assert bool(((eb.lo[0] <= ea.nominal) & (ea.nominal <= eb.hi[0])).all()), "nominal(D) outside T_r1(D')"
    for j in range(len(ks) - 1):
        inside = (eb.lo[j + 1] <= ea.lo[j]) & (ea.hi[j] <= eb.hi[j + 1])
        assert bool(inside.all()), f"T_{ks[j]}(D) not inside T_{ks[j + 1]}(D'): {int((~inside).sum())} coordinates"
    for j, k in enumerate(ks):
        if k >= b:
            assert torch.equal(ea.lo[j], eb.lo[j]) and torch.equal(ea.hi[j], eb.hi[j])


NEST = [
    # id, widths, loss, certificate, options, batch size, lr, clip, contraction
    ("ibp-linear-full", (1, 1), "mse", "ibp", {}, None, 0.3, 1.0, 1.0),
    ("ibp-tau-mlp-sgd", (2, 5, 1), "mse", "ibp", {"aggregation": "tau"}, 6, 0.2, 0.3, 1.0),
    ("ibp-ce-mlp", (2, 4, 3), "ce", "ibp", {}, None, 0.5, 0.2, 0.9),
    ("crown-linear-full", (1, 1), "mse", "crown", {}, None, 0.3, 1.0, 1.0),
    ("crown-linear2d-sgd", (2, 1), "mse", "crown", {}, 6, 0.3, 0.5, 1.0),
    ("crown-hinge-sgd", (3, 1), "hinge", "crown", {}, 6, 0.5, 0.3, 1.0),
    ("crown-ce-coupled", (2, 3), "ce", "crown", {}, None, 0.5, 0.3, 0.8),
    ("crown-ce-flat", (4, 3), "ce", "crown", {}, None, 0.5, 0.3, 0.8),
    ("crown-mlp1", (2, 4, 1), "mse", "crown", {}, 6, 0.2, 0.3, 1.0),
    ("gaplp-hinge-sgd", (3, 1), "hinge", "gaplp", {}, 6, 0.5, 0.3, 1.0),
    ("gaplp-hinge-contracting", (2, 1), "hinge", "gaplp", {"tighten": 2}, 6, 0.5, 0.3, 0.9),
    # (no milp rows: its safe solver bounds do not declare nesting; certdp/bounds/milp.py)
]


@pytest.mark.slow
@pytest.mark.parametrize("name,widths,loss,cert,opts,bs,lr,clip,lam", NEST, ids=[c[0] for c in NEST])
def test_envelopes_of_neighbours_nest_in_floating_point(name, widths, loss, cert, opts, bs, lr, clip, lam):
    """run_agt on D and on neighbours D' (random, extreme and label-flipped records at the most-used
    index): every computed box nests into the next radius's box of the other dataset, exactly."""
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings
    n, C = 24, widths[-1]
    m = ModelSpec(widths, loss)
    x, y = _nest_data(widths, loss, n, 3)
    st = TrainSettings(steps=6, lr=lr, clip=clip, batch_size=bs, contraction=lam, seed=1)
    plan = batch_plan(n, st)
    b = plan.shape[1]
    ks = [1, 2, 3, 5, 8, n]
    engine = get_certificate(cert, **opts)
    from certdp.agt import epoch_length
    E = epoch_length(plan, n)
    if E is not None and getattr(engine, "substitutions", "per_batch") == "per_epoch" and not engine.window_steps:
        b = b * E                   # the ledger keeps data-dependent boxes up to the slots of an epoch
    if engine.window_budget:
        b = n                       # one budget over the window's records (gaplp): data-dependent below N
    assert engine.nesting_monotone
    th0 = m.init(2)
    run = lambda X, Y: run_agt(m, th0, X, Y, st, ks, certificate=engine, plan=plan, progress=False)
    base = run(x, y)
    assert bool(base.contains(base.nominal).all())             # the released point is in every T_k
    idx = int(torch.bincount(plan.reshape(-1), minlength=n).argmax())
    for xv, yv in _replacements(x, y, loss, C, torch.Generator().manual_seed(7)):
        other = run(*_substituted(x, y, idx, xv, yv, loss, C))
        _assert_nested(base, other, b)
        _assert_nested(other, base, b)


STEP_CASES = [("ibp-mlp", (2, 5, 1), "mse", "ibp", {}), ("ibp-tau-mlp", (2, 5, 1), "mse", "ibp", {"aggregation": "tau"}),
              ("crown-linear", (2, 1), "mse", "crown", {}), ("crown-ce", (2, 3), "ce", "crown", {}),
              ("crown-ce-flat", (4, 3), "ce", "crown", {}), ("crown-mlp1", (2, 4, 1), "mse", "crown", {}),
              ("crown-hinge", (3, 1), "hinge", "crown", {})]


@pytest.mark.slow
@pytest.mark.parametrize("name,widths,loss,cert,opts", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_one_step_nests_for_nested_boxes_and_a_substituted_record(name, widths, loss, cert, opts):
    """(M1)-(M3) at the step: for boxes B inside B' (shifted centres), the batch of D' with one
    record substituted and r' = r + 1, step(B, D, r) lies inside step(B', D', r'), exactly in
    floating point up to the graded widening E that AGT adds per radius index."""
    from certdp.bounds.interval import Interval
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings
    m = ModelSpec(widths, loss)
    engine = get_certificate(cert, **opts)
    gen = torch.Generator().manual_seed(11)
    n, C = 10, widths[-1]
    st = TrainSettings(steps=1, lr=0.4, clip=0.3, contraction=0.9)
    slack = engine.nesting_slack(m, settings=st, b=n, k_max=4, magnitude=4.0)
    worst = -math.inf
    for trial in range(24 if loss == "ce" else 60):
        x, y = _nest_data(widths, loss, n, 100 + trial)
        c = m.init(trial)
        r1 = torch.rand(3, m.n_params, generator=gen, dtype=torch.float64) * 0.3 * (trial % 4 + 1) ** 2 / 4
        r2 = r1 + torch.rand(3, m.n_params, generator=gen, dtype=torch.float64) * 0.3
        shift = (torch.rand(3, m.n_params, generator=gen, dtype=torch.float64) * 2 - 1) * (r2 - r1)
        B = Interval(c - r1, c + r1)
        B2 = Interval(c + shift - r2, c + shift + r2)
        assert bool((B2.lo <= B.lo).all() and (B.hi <= B2.hi).all())
        xv, yv = _replacements(x, y, loss, C, gen)[trial % 4]
        X2, Y2 = _substituted(x, y, trial % n, xv, yv, loss, C)
        ks = torch.tensor([0, 1, 3])
        a = engine.step_bounds(m, B, x, y, subs=ks, settings=st)
        b2 = engine.step_bounds(m, B2, X2, m.loss.labels(Y2), subs=ks + 1, settings=st)
        worst = max(worst, float(torch.maximum(b2.lo - a.lo, a.hi - b2.hi).max()))
    assert worst <= slack, f"step bound of the smaller box sticks out by {worst:.3g} > slack {slack:.3g}"
