"""MILP windows: sound against retrained neighbours, never looser than IBP at F = 1, only safe
bounds on time-out, CBC agrees with HiGHS; golden bounds for a small fixed case (the safe bounds
of the branch and bound reach the MIP optima the goldens were taken from).  Safe bounds on any
input: tests/test_milp_safe.py."""


import pytest
import torch

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.errors import ConfigError
from certdp.methods.audit import neighbours
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train

D = torch.float64


def _problem(loss: str, N: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    d = 1 if loss == "mse" else 2
    x = torch.rand(N, d, generator=g, dtype=D) * 2 - 1
    if loss == "mse":
        y = 2 * x[:, 0] + 1 + 0.1 * torch.randn(N, generator=g, dtype=D)
    else:
        y = torch.where(x.sum(-1) + 0.2 * torch.randn(N, generator=g, dtype=D) > 0, 1.0, -1.0).to(D)
    m = ModelSpec((d, 1), loss)
    st = TrainSettings(steps=6, lr=0.3, clip=0.1, batch_size=5, seed=0)
    return m, x, y, st


@pytest.mark.parametrize("loss", ["mse", "hinge"])
def test_f1_never_looser_than_ibp_or_crown(loss):
    """F = 1 solves each step exactly under the same budget as the per-batch step engines (k
    substitutions in every batch); the per-epoch ledger's budget is a different one."""
    m, x, y, st = _problem(loss)
    th0 = m.init(0)
    ks = [1, 2, 5]
    envs = {name: run_agt(m, th0, (x, y), st, ks,
                          AGTOptions(certificate=get_certificate(name, **opt), progress=False))
            for name, opt in (("ibp", {"substitutions": "per_batch"}), ("crown", {"substitutions": "per_batch"}),
                              ("milp", {"frequency": 1, "workers": 1}))}
    for ref, tol in (("ibp", 1e-12), ("crown", 1e-9)):
        assert (envs["milp"].lo >= envs[ref].lo - tol).all() and (envs["milp"].hi <= envs[ref].hi + tol).all()
    assert (envs["milp"].widths().sum() <= envs["ibp"].widths().sum())


@pytest.mark.parametrize("loss,F", [("mse", 2), ("mse", 6), ("hinge", 3)])
def test_windows_contain_retrained_neighbours(loss, F):
    m, x, y, st = _problem(loss)
    th0 = m.init(0)
    plan = batch_plan(x.shape[0], st)
    ks = [1, 2, 3]
    cert = get_certificate("milp", frequency=F, workers=1)
    env = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=cert, plan=plan, progress=False))
    assert all(s["fallback"] == 0 for s in cert.stats)
    ibp = run_agt(m, th0, (x, y), st, ks,
                  AGTOptions(certificate=get_certificate("ibp", substitutions="per_batch"), plan=plan, progress=False))
    assert (env.widths() <= ibp.widths() + 1e-12).all()
    for j, k in enumerate(ks):
        for mode in ("random", "adversarial"):
            X, Y = neighbours(mode, k, 60, x, y, plan, loss, 1, torch.Generator().manual_seed(10 * k))
            th = train(m, th0.expand(60, -1), X, Y, st, plan=plan)
            assert ((th >= env.lo[j] - 1e-10) & (th <= env.hi[j] + 1e-10)).all(), (mode, k)


def test_larger_windows_are_tighter_on_recurring_records():
    m, x, y, st = _problem("mse")
    th0 = m.init(0)
    w = {F: run_agt(m, th0, (x, y), st, [1],
                    AGTOptions(certificate=get_certificate("milp", frequency=F, workers=1),
                               progress=False)).widths().sum() for F in (1, 6)}
    assert w[6] < w[1]


def test_time_limit_uses_only_proven_bounds():
    """A time limit far too short for the MIP: HiGHS's dual bound (or the propagated box) is used,
    which still contains every neighbour."""
    m, x, y, st = _problem("mse")
    th0 = m.init(0)
    plan = batch_plan(x.shape[0], st)
    cert = get_certificate("milp", frequency=6, workers=1, time_limit=1e-4)
    env = run_agt(m, th0, (x, y), st, [2], AGTOptions(certificate=cert, plan=plan, progress=False))
    X, Y = neighbours("adversarial", 2, 60, x, y, plan, "mse", 1, torch.Generator().manual_seed(1))
    th = train(m, th0.expand(60, -1), X, Y, st, plan=plan)
    assert ((th >= env.lo[0] - 1e-10) & (th <= env.hi[0] + 1e-10)).all()


def test_cbc_agrees_with_highs():
    m, x, y, st = _problem("mse", N=10)
    st = TrainSettings(steps=2, lr=0.3, clip=0.1, batch_size=5, seed=0)
    th0 = m.init(0)
    e = {s: run_agt(m, th0, (x, y), st, [1, 2],
                    AGTOptions(certificate=get_certificate("milp", frequency=2, solver=s, workers=1),
                               progress=False)) for s in ("highs", "cbc")}
    assert torch.allclose(e["highs"].lo, e["cbc"].lo, atol=1e-5) and torch.allclose(e["highs"].hi, e["cbc"].hi, atol=1e-5)


@pytest.mark.parametrize("opts,key", [({"solver": "gurobi"}, "certificate.solver"), ({"frequency": 0}, "certificate.frequency"),
                                      ({"time_limit": -1}, "certificate.time_limit"), ({"workers": 8}, "certificate.workers"),
                                      ({"nodes": -1}, "certificate.nodes"), ({"nodes": 2.5}, "certificate.nodes"),
                                      ({"on_time_limit": "refuse"}, "certificate.on_time_limit")])
def test_bad_options(opts, key):
    with pytest.raises(ConfigError) as e:
        get_certificate("milp", **opts)
    assert e.value.key == key


def test_unsupported_model_is_a_config_error():
    m = ModelSpec((2, 4, 1), "mse")
    x = torch.randn(6, 2, dtype=D); y = torch.randn(6, dtype=D)
    with pytest.raises(ConfigError):
        run_agt(m, m.init(0), (x, y), TrainSettings(steps=1, lr=0.1, clip=0.1), [1],
                AGTOptions(certificate=get_certificate("milp", workers=1), progress=False))


@pytest.mark.parametrize("loss", ["mse", "hinge"])
def test_golden_window(loss, check_golden):
    m, x, y, st = _problem(loss)
    # the per-batch variable bounds: the golden values predate the per-epoch ledger's (tighter ones)
    env = run_agt(m, m.init(0), (x, y), st, [1, 2],
                  AGTOptions(certificate=get_certificate("milp", frequency=3, workers=1, substitutions="per_batch"),
                             progress=False))
    # solver bounds: a tolerance above the MIP gap, far below the widths (~1e-2)
    check_golden(f"milp_F3_{loss}.json", env.lo.to(D), env.hi.to(D), atol=1e-5)


@pytest.mark.parametrize("loss", ["mse", "hinge"])
def test_radii_from_the_batch_size_on_stay_informative_and_sound(loss):
    """The window MILP budgets k records over the window itself, so a radius k >= b (a batch may be
    entirely substituted) is not the trivial cover: it is computed, narrower than T_N, and still
    contains retrained neighbours at that distance."""
    m, x, y, st = _problem(loss)
    th0 = m.init(0)
    plan = batch_plan(x.shape[0], st)
    b = plan.shape[1]
    ks = [b, b + 1, x.shape[0]]
    env = run_agt(m, th0, (x, y), st, ks,
                  AGTOptions(certificate=get_certificate("milp", frequency=6, workers=1), plan=plan, progress=False))
    w = env.widths().sum(-1)
    assert w[0] < w[2] and w[1] < w[2]
    for j, k in enumerate(ks[:2]):
        for mode in ("random", "adversarial"):
            X, Y = neighbours(mode, k, 60, x, y, plan, loss, 1, torch.Generator().manual_seed(7 * k))
            th = train(m, th0.expand(60, -1), X, Y, st, plan=plan)
            assert ((th >= env.lo[j] - 1e-10) & (th <= env.hi[j] + 1e-10)).all(), (mode, k)


@pytest.mark.parametrize("loss", ["mse", "hinge"])
def test_ledger_bounded_windows_stay_informative_up_to_an_epochs_slots(loss):
    """With variable bounds from the per-epoch ledger (the default), radii from F b up to the
    slots of an epoch are computed (the ledger is informative there) and contain retrained
    neighbours; with per-batch variable bounds they are the trivial cover."""
    m, x, y, st = _problem(loss, N=20)
    th0 = m.init(0)
    plan = batch_plan(x.shape[0], st)
    ks = [5, 8, 20]                                   # b = 5, E = 4: F b = 5, b E = 20 = N
    env = run_agt(m, th0, (x, y), st, ks,
                  AGTOptions(certificate=get_certificate("milp", frequency=1, workers=1), plan=plan, progress=False))
    pb = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=get_certificate("milp", frequency=1, workers=1,
                                                                    substitutions="per_batch"), plan=plan, progress=False))
    w, wpb = env.widths().sum(-1), pb.widths().sum(-1)
    assert w[0] < w[2] and w[1] < w[2]
    assert torch.allclose(wpb[0], wpb[2]) and torch.allclose(wpb[1], wpb[2])
    for j, k in enumerate(ks[:2]):
        for mode in ("random", "adversarial"):
            X, Y = neighbours(mode, k, 60, x, y, plan, loss, 1, torch.Generator().manual_seed(11 * k))
            th = train(m, th0.expand(60, -1), X, Y, st, plan=plan)
            assert ((th >= env.lo[j] - 1e-10) & (th <= env.hi[j] + 1e-10)).all(), (mode, k)
