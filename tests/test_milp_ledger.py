"""MILP windows with per-epoch ledger variable bounds (``certificate=milp``, ``substitutions=per_epoch``)
and the run budget (``run_time_limit``).

Containment against real retraining (random and adversarial placements of tests/neighbourhoods.py:
most-used records, the last batch of an epoch, several epochs, the epoch boundary; wide, label-
flipped and clip-saturating replacements) on small hinge and linear-regression plans with several
batches per epoch, windows that cross an epoch boundary, and an AGS-style pass that starts mid-epoch;
the ledger bounds never loosen the per-batch ones and pay off; the run budget's per-objective limit
is the budget share; the LP relaxation alone (``solve=lp``) is sound and no tighter than the MIP."""

import pytest

import certdp.bounds.milp as milp
from certdp.agt import AGTOptions, epoch_length, run_agt
from certdp.bounds import get_certificate
from neighbourhoods import assert_contains_neighbours, toy_problem

# name, widths, loss, N, b, steps, lr, clip, F, radii: epochs of 4 batches (tail dropped), windows of
# F = 3 steps cross the boundaries at steps 4 and 8
CASES = [
    ("hinge", (2, 1), "hinge", 21, 5, 10, 0.5, 0.05, 3, [1, 2, 4]),
    ("linear", (2, 1), "mse", 21, 5, 10, 0.1, 0.1, 3, [1, 2, 4]),
]


def _setup(widths, loss, n, b, steps, lr, clip, seed=5):
    return toy_problem(widths, loss, n, b, steps, lr, clip, data_seed=seed, train_seed=2)


@pytest.mark.parametrize("name,widths,loss,n,b,steps,lr,clip,F,ks", CASES, ids=[c[0] for c in CASES])
def test_ledger_bounds_contain_retrained_neighbours(name, widths, loss, n, b, steps, lr, clip, F, ks):
    m, x, y, s, plan, gen = _setup(widths, loss, n, b, steps, lr, clip)
    E = epoch_length(plan, n)
    assert E == n // b and steps > 2 * E and any((t0 // E) != ((t0 + F - 1) // E) for t0 in range(0, steps, F))
    th0 = m.init(1)
    cert = get_certificate("milp", frequency=F, workers=1)
    env = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=cert, plan=plan, progress=False))
    assert all(st["fallback"] == 0 and st["time_limited"] == 0 for st in cert.stats)
    per_batch = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=get_certificate("milp", frequency=F, workers=1,
                                                                         substitutions="per_batch"), plan=plan, progress=False))
    # intersected with the per-batch boxes: never looser (up to the solver margin), and the epoch
    # budget pays off on a multi-epoch plan
    assert (env.widths() <= per_batch.widths() + 1e-6).all()
    assert float(env.widths()[0].sum()) < 0.99 * float(per_batch.widths()[0].sum())
    # never looser than the per-epoch ledger (IBP) over the whole run, which it is intersected with
    ledger = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=get_certificate("ibp"), plan=plan, progress=False))
    assert (env.lo >= ledger.lo - 1e-9).all() and (env.hi <= ledger.hi + 1e-9).all()
    assert_contains_neighbours(env, m, th0, x, y, s, ks=ks, R=20, plan=plan, loss=loss, gen=gen)


def test_pass_starting_mid_epoch_contains_neighbours():
    """An AGS release window: a pass over steps 6..13 of the plan (epochs of 4 steps) from a public
    point, windows of 3 steps across the boundaries at 8 and 12."""
    m, x, y, s, plan, gen = _setup((2, 1), "hinge", 21, 5, 16, 0.5, 0.05, seed=7)
    start = m.init(3) + 0.05
    window = range(6, 14)
    ks = [1, 3]
    env = run_agt(m, start, (x, y), s, ks,
                  AGTOptions(certificate=get_certificate("milp", frequency=3, workers=1),
                             plan=plan, steps=window, progress=False))
    assert_contains_neighbours(env, m, start, x, y, s, ks=ks, R=10, plan=plan, loss="hinge", gen=gen, steps=window)


def test_objective_time_limit_is_the_budget_share():
    f = milp.objective_time_limit
    assert f(time_limit=60, remaining_s=100, remaining_objectives=10) == 10
    assert f(time_limit=5, remaining_s=100, remaining_objectives=10) == 5
    assert f(time_limit=60, remaining_s=-3, remaining_objectives=10) == 1e-3      # budget spent: 1 ms
    assert f(time_limit=60, remaining_s=30, remaining_objectives=0) == 30


def test_run_budget_is_shared_over_the_windows_left(monkeypatch):
    """Three windows of one AGT pass, 2 radii on 1 worker, P = 3: 12 objectives a window.  A
    fake clock reads 0 at the pass's start and 10, 40, 100 s at the windows: the limits passed to
    the solver are (120 - 10) / 36, (120 - 40) / 24 and (120 - 100) / 12."""
    m, x, y, s, plan, _ = _setup((2, 1), "hinge", 21, 5, 6, 0.5, 0.05)
    reads = iter([0.0, 10.0, 40.0, 100.0])
    monkeypatch.setattr(milp, "_clock", lambda: next(reads))
    cert = get_certificate("milp", frequency=2, workers=1, time_limit=60, run_time_limit=120)
    run_agt(m, m.init(1), (x, y), s, [1, 2], AGTOptions(certificate=cert, plan=plan, progress=False))
    got = sorted({(st["window_start"], st["time_limit"]) for st in cert.stats})
    assert got == [(0, pytest.approx(110 / 36)), (2, pytest.approx(80 / 24)), (4, pytest.approx(20 / 12))]
    # time_limit still caps the share
    reads2 = iter([0.0, 0.0, 0.0, 0.0])
    monkeypatch.setattr(milp, "_clock", lambda: next(reads2))
    cert = get_certificate("milp", frequency=2, workers=1, time_limit=0.5, run_time_limit=1e6)
    run_agt(m, m.init(1), (x, y), s, [1, 2], AGTOptions(certificate=cert, plan=plan, progress=False))
    assert {st["time_limit"] for st in cert.stats} == {0.5}


@pytest.mark.parametrize("opts,key", [({"run_time_limit": 0}, "certificate.run_time_limit"),
                                      ({"run_time_limit": -1}, "certificate.run_time_limit"),
                                      ({"run_time_limit": "abc"}, "certificate.run_time_limit"),
                                      ({"run_time_limit": float("inf")}, "certificate.run_time_limit"),
                                      ({"solve": "exact"}, "certificate.solve"),
                                      ({"substitutions": "per_step"}, "certificate.substitutions")])
def test_bad_options(opts, key):
    from certdp.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        get_certificate("milp", **opts)
    assert e.value.key == key


@pytest.mark.parametrize("loss", ["hinge", "mse"])
def test_lp_relaxation_is_sound_and_no_tighter_than_the_mip(loss):
    m, x, y, s, plan, gen = _setup((2, 1), loss, 21, 5, 8, 0.5 if loss == "hinge" else 0.1,
                                   0.05 if loss == "hinge" else 0.1, seed=11)
    ks = [1, 2]
    env = {v: run_agt(m, m.init(1), (x, y), s, ks,
                      AGTOptions(certificate=get_certificate("milp", frequency=4, workers=1, solve=v),
                                 plan=plan, progress=False)) for v in ("milp", "lp")}
    assert (env["lp"].widths() >= env["milp"].widths() - 1e-6).all()
    assert_contains_neighbours(env["lp"], m, m.init(1), x, y, s, ks=ks, R=8, plan=plan, loss=loss, gen=gen)
