"""The per-epoch substitution ledger (certdp/agt.py, ``certificate.substitutions=per_epoch``).

Containment against real retraining with adversarial placements (records used most, in the last
batch of an epoch, spread over epochs, at an epoch boundary) and replacements (wide records,
label flips, clip-saturating records), on multi-epoch plans with a dropped tail, for linear
regression, a ReLU MLP, a hinge classifier and a softmax head; envelope nesting between
neighbours (the smoothness proof's condition (N)); full batch unchanged.  The >= 1,000-neighbour
runs are in benchmarks/containment.py."""

import pytest
import torch

from certdp.agt import AGTOptions, epoch_length, run_agt
from certdp.bounds import get_certificate
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train
from neighbourhoods import assert_contains_neighbours, neighbours, toy_data, toy_problem


CASES = [
    # name, widths, loss, engine, N, b, steps, lr, clip, radii
    ("linear-ibp", (3, 1), "mse", "ibp", 42, 5, 40, 0.1, 0.1, [1, 2, 4, 8, 12]),
    ("linear-crown", (3, 1), "mse", "crown", 42, 5, 40, 0.1, 0.1, [1, 2, 4, 8, 12]),
    ("mlp-ibp", (3, 6, 1), "mse", "ibp", 44, 8, 24, 0.05, 0.2, [1, 2, 4, 9]),
    ("mlp-crown", (3, 6, 1), "mse", "crown", 44, 8, 24, 0.05, 0.2, [1, 2, 4, 9]),
    ("hinge-ibp", (2, 1), "hinge", "ibp", 63, 10, 30, 0.5, 0.05, [1, 2, 4, 11]),
    ("hinge-crown", (2, 1), "hinge", "crown", 63, 10, 30, 0.5, 0.05, [1, 2, 4, 11]),
    ("softmax-ibp", (2, 3), "ce", "ibp", 50, 8, 24, 0.3, 0.1, [1, 2, 5]),
    ("softmax-crown", (2, 3), "ce", "crown", 50, 8, 24, 0.3, 0.1, [1, 2, 5]),
]


# the softmax heads take most of the time (measured): slow tier; the other cases stay in `make test`
@pytest.mark.parametrize("name,widths,loss,engine,n,b,steps,lr,clip,ks",
                         [pytest.param(*c, id=c[0], marks=(pytest.mark.slow,) if c[0].startswith("softmax") else ())
                          for c in CASES])
def test_ledger_contains_retrained_neighbours(name, widths, loss, engine, n, b, steps, lr, clip, ks):
    m, x, y, s, plan, gen = toy_problem(widths, loss, n, b, steps, lr, clip, data_seed=5, train_seed=2)
    assert epoch_length(plan, n) == n // b and steps > 2 * (n // b)          # several epochs, tail dropped
    th0 = m.init(1)
    env = run_agt(m, th0, (x, y), s, ks,
                  AGTOptions(certificate=get_certificate(engine, substitutions="per_epoch"), progress=False))
    assert torch.allclose(env.nominal, train(m, th0, x, y, s))
    per_batch = run_agt(m, th0, (x, y), s, ks,
                        AGTOptions(certificate=get_certificate(engine, substitutions="per_batch"), progress=False))
    # the budget must pay off somewhere on a multi-epoch plan (else the mode is dead code)
    assert float(env.widths()[0].sum()) < float(per_batch.widths()[0].sum())
    assert_contains_neighbours(env, m, th0, x, y, s, ks=ks, R=10, plan=plan, loss=loss, gen=gen,
                               n_classes=widths[-1])


def test_ledger_window_starting_mid_epoch_contains_neighbours():
    """AGS certifies windows of the plan that start anywhere in an epoch, from a public point."""
    m, x, y, s, plan, gen = toy_problem((3, 1), "mse", 42, 5, 40, 0.1, 0.1, data_seed=8, train_seed=1)
    start = m.init(3) + 0.1
    window = range(13, 31)                    # epochs of 8 steps: starts mid-epoch, crosses two boundaries
    ks = [1, 3, 6]
    env = run_agt(m, start, (x, y), s, ks,
                  AGTOptions(certificate=get_certificate("ibp"), plan=plan, steps=window, progress=False))
    assert_contains_neighbours(env, m, start, x, y, s, ks=ks, R=12, plan=plan, loss="mse", gen=gen, steps=window)


def test_ledger_envelopes_nest_between_neighbours():
    """Condition (N) of the smoothness proof: T_k(D) inside T_{k+1}(D') for neighbours, with the
    substituted record placed where it matters (most used, last batch of an epoch, boundary)."""
    gen = torch.Generator().manual_seed(3)
    m = ModelSpec((2, 1), "mse")
    x, y = toy_data("mse", 33, 2, gen)
    s = TrainSettings(steps=20, lr=0.2, clip=0.1, batch_size=4, seed=4)
    plan = batch_plan(33, s)
    ks = [1, 2, 3, 4, 5, 8]
    cert = get_certificate("ibp")
    env = run_agt(m, m.init(0), (x, y), s, ks, AGTOptions(certificate=cert, progress=False))
    for placement in ("frequent", "last", "boundary"):
        X, Y = neighbours(x, y, k=1, R=3, plan=plan, loss="mse", placement=placement, gen=gen)
        for r in range(3):
            env2 = run_agt(m, m.init(0), (X[r], Y[r]), s, ks, AGTOptions(certificate=cert, progress=False))
            for a, bnd in ((env, env2), (env2, env)):
                for j in range(len(ks) - 1):
                    scale = 1e-9 * (1 + bnd.hi[j + 1].abs().max())
                    assert bool((a.lo[j] >= bnd.lo[j + 1] - scale).all() and (a.hi[j] <= bnd.hi[j + 1] + scale).all())


def test_full_batch_is_unchanged_and_plans_without_epochs_go_per_batch():
    gen = torch.Generator().manual_seed(1)
    m = ModelSpec((3, 1), "mse")
    x, y = toy_data("mse", 30, 3, gen)
    full = TrainSettings(steps=10, lr=0.1, clip=0.1, batch_size=None)
    a = run_agt(m, m.init(0), (x, y), full, [1, 2, 5],
                AGTOptions(certificate=get_certificate("ibp", substitutions="per_epoch"), progress=False))
    b = run_agt(m, m.init(0), (x, y), full, [1, 2, 5],
                AGTOptions(certificate=get_certificate("ibp", substitutions="per_batch"), progress=False))
    assert torch.equal(a.lo, b.lo) and torch.equal(a.hi, b.hi)
    sgd = TrainSettings(steps=12, lr=0.1, clip=0.1, batch_size=5)
    plan = batch_plan(30, sgd)
    assert epoch_length(plan, 30) == 6
    repeated = plan.clone()
    repeated[1] = plan[0]                     # an index twice in one epoch: no per-epoch budget
    assert epoch_length(repeated, 30) is None
    c = run_agt(m, m.init(0), (x, y), sgd, [1, 2],
                AGTOptions(certificate=get_certificate("ibp"), plan=repeated, progress=False))
    d = run_agt(m, m.init(0), (x, y), sgd, [1, 2],
                AGTOptions(certificate=get_certificate("ibp", substitutions="per_batch"), plan=repeated, progress=False))
    assert torch.equal(c.lo, d.lo) and torch.equal(c.hi, d.hi)


def test_substitutions_option_is_validated():
    from certdp.errors import ConfigError
    with pytest.raises(ConfigError, match="certificate.substitutions"):
        get_certificate("ibp", substitutions="per_step")
