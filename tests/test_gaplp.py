"""``certificate=gaplp``: the whole trajectory's relaxation solved to a certified gap with a ramp in
the radius index.  Containment against retrained neighbours (random and adversarial placements,
extreme records), direct nesting T_j(D) inside T_{j+1}(D') over neighbour pairs with extreme
records (no tolerance), and the lemma's planted failures caught: the ramp dropped, an uncertified
gap accepted, an intermediate bound loosened for one dataset only."""

from __future__ import annotations

import pytest
import torch

from certdp.agt import run_agt
from certdp.bounds import check_supported, get_certificate
from certdp.bounds.safe_lp import _down
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.privacy.smoothness import release_proof
from tests.neighbourhoods import assert_contains_neighbours, neighbours, toy_problem

KS = [1, 2, 3]


def _problem(steps=6, n=16, b=4, seed=3):
    return toy_problem((2, 1), "hinge", n=n, b=b, steps=steps, lr=0.5, clip=0.2, data_seed=seed, train_seed=0)


def _env(x, y, m, s, plan, ks=KS, **opts):
    plant = opts.pop("_plant", None)
    cert = get_certificate("gaplp", **opts)
    if plant:
        cert._plant = plant
    return run_agt(m, m.init(0), x, y, s, ks, certificate=cert, plan=plan, progress=False)


def _nests(env_d, env_e) -> bool:
    """T_{k_j}(D) inside T_{k_{j+1}}(D') for j = 0 .. K-1 (T_0: the released nominal point), exactly."""
    lo_d = torch.cat([env_d.nominal[None], env_d.lo]); hi_d = torch.cat([env_d.nominal[None], env_d.hi])
    for j in range(len(env_d.k_values)):
        if bool((env_e.lo[j] > lo_d[j]).any()) or bool((hi_d[j] > env_e.hi[j]).any()):
            return False
    return True


def _pairs(x, y, plan, gen, R=4):
    """Neighbour pairs (D, D') with one substituted record, extreme ones among them (1e6 features,
    flipped labels, clip-saturating records)."""
    out = []
    for placement in ("frequent", "last"):
        X, Y = neighbours(x, y, k=1, R=R, plan=plan, loss="hinge", placement=placement, gen=gen)
        out += [(X[r], Y[r]) for r in range(R)]
    big = x.clone(); big[0] = torch.tensor([1e6, -1e6], dtype=x.dtype)
    out.append((big, y.clone()))
    return out


def test_gaplp_contains_retrained_neighbours():
    m, x, y, s, plan, gen = _problem(steps=8)
    env = _env(x, y, m, s, plan)
    assert_contains_neighbours(env, m, m.init(0), x, y, s, ks=KS, R=12, plan=plan, loss="hinge", gen=gen, tol=0.0)
    # tighter than the per-epoch IBP ledger it starts from
    ibp = run_agt(m, m.init(0), x, y, s, KS, certificate=get_certificate("ibp"), plan=plan, progress=False)
    assert bool((env.widths().sum(-1) < ibp.widths().sum(-1)).all())


@pytest.mark.slow
def test_gaplp_nests_over_neighbour_pairs_with_extreme_records():
    m, x, y, s, plan, gen = _problem()
    env = _env(x, y, m, s, plan)
    ctt = run_agt(m, m.init(0), x, y, s, KS, certificate=get_certificate("crowntt"), plan=plan, progress=False)
    ctt_fails = 0
    for x2, y2 in _pairs(x, y, plan, gen, R=3):
        env2 = _env(x2, y2, m, s, plan)
        assert _nests(env, env2) and _nests(env2, env)
        ctt2 = run_agt(m, m.init(0), x2, y2, s, KS, certificate=get_certificate("crowntt"), plan=plan, progress=False)
        ctt_fails += (not _nests(ctt, ctt2)) + (not _nests(ctt2, ctt))
    # the check has teeth: CROWN-TT (sound, not nesting) fails it on these pairs
    assert ctt_fails > 0


@pytest.mark.slow
def test_dropping_the_ramp_breaks_nesting_and_the_ramp_restores_it():
    """Any U in [U, L + gap] is what a certified solve may return: one dataset's solves return the
    top of that range, the other's the bottom.  Without the ramp gamma j the envelopes of the two
    neighbours stop nesting; with it they nest."""
    m, x, y, s, plan, gen = _problem()
    x2, y2 = _pairs(x, y, plan, gen, R=1)[0]
    top = {"slop": lambda U, L, gap: max(U, float(_down(L + gap)))}
    for ramp, expect in ((False, False), (True, True)):
        extra = {} if ramp else {"no_ramp": True}
        ok = True
        for (xa, ya), (xb, yb) in (((x, y), (x2, y2)), ((x2, y2), (x, y))):
            ea = _env(xa, ya, m, s, plan, gap=0.05, gap_intermediate=0.05, _plant={**top, **extra})
            eb = _env(xb, yb, m, s, plan, gap=0.05, gap_intermediate=0.05, _plant=dict(extra))
            ok &= _nests(ea, eb)
        assert ok is expect


def test_an_uncertified_gap_is_refused_and_accepting_it_breaks_nesting():
    """A solver whose duals are useless (all zero: the bound of the variable box) leaves the gap
    open.  The engine refuses (internal error) instead of using it; accepting it anyway (the planted
    bug) makes D's envelope the loose box while D''s is tight, and the pair stops nesting."""
    m, x, y, s, plan, gen = _problem()
    x2, y2 = _pairs(x, y, plan, gen, R=1)[0]
    zero = {"dual": lambda yy: 0.0 * yy}
    with pytest.raises(ConfigError, match="certified gap stayed open"):
        _env(x, y, m, s, plan, _plant=dict(zero))
    loose = _env(x, y, m, s, plan, _plant={**zero, "accept_gap": True})
    assert not _nests(loose, _env(x2, y2, m, s, plan))


def test_loosening_one_intermediate_bound_on_one_side_breaks_nesting():
    """The margin intervals of D widened (a sound relaxation: every envelope still contains D's
    neighbours) while D''s stay tight: D's polytope is no longer inside D''s."""
    m, x, y, s, plan, gen = _problem()
    x2, y2 = _pairs(x, y, plan, gen, R=1)[0]

    def loosen(t, j, lo, hi):
        return (lo - 50.0, hi + 50.0) if t >= 1 else (lo, hi)

    loose = _env(x, y, m, s, plan, _plant={"loosen": loosen})
    assert_contains_neighbours(loose, m, m.init(0), x, y, s, ks=KS, R=3, plan=plan, loss="hinge", gen=gen, tol=0.0)
    assert not _nests(loose, _env(x2, y2, m, s, plan))


def test_gaplp_refusals_scope_and_smoothness():
    with pytest.raises(ConfigError, match="certificate.time_limit"):
        get_certificate("gaplp", time_limit=5)
    for key, bad in (("gap", 0), ("gap", "x"), ("gap_intermediate", -1), ("tighten", "often"), ("tighten", 0)):
        with pytest.raises(ConfigError, match=f"certificate.{key}"):
            get_certificate("gaplp", **{key: bad})
    with pytest.raises(ConfigError, match="certificate.name"):
        check_supported(get_certificate("gaplp"), ModelSpec((2, 1), "mse"))
    # declared nesting: smooth releases accept it under privacy.smoothness=proven
    assert release_proof(get_certificate("gaplp"), "proven") is True


def test_two_workers_give_the_same_envelopes_and_pass_refusals_on():
    m, x, y, s, plan, gen = _problem(steps=4)
    one = _env(x, y, m, s, plan)
    two = _env(x, y, m, s, plan, workers=2)
    assert torch.equal(one.lo, two.lo) and torch.equal(one.hi, two.hi)
    with pytest.raises(ConfigError, match="certified gap stayed open"):
        _env(x, y, m, s, plan, workers=2, _plant={"dual": lambda yy: 0.0 * yy})
    with pytest.raises(ConfigError, match="certificate.workers"):
        get_certificate("gaplp", workers=3)
