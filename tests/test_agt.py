"""The AGT loop's shape (certdp/agt): run_agt and every engine hook take at most six parameters,
engines declare their schedule (which loop, which radii) instead of flags AGT combines, and the
loop's pieces keep what they promise."""

import inspect

import pytest
import torch

from certdp.agt import AGTOptions, run_agt
from certdp.agt.state import even_chunks, intersect_down
from certdp.bounds import CERTIFICATES, get_certificate
from certdp.bounds.base import Certificate, Schedule, epoch_length
from certdp.bounds.shared import SharedBoxes
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan

HOOKS = ("per_sample_gradient_bounds", "batch_sum_bounds", "step_bounds", "ledger_step_bounds", "window_bounds",
         "output_bounds", "nesting_slack", "ledger_slack", "schedule", "start_run")


def _count(fn) -> int:
    return len([p for p in inspect.signature(fn).parameters.values() if p.name != "self"])


def test_run_agt_and_every_engine_entry_point_take_at_most_six_parameters():
    assert _count(run_agt) <= 6
    for cls in [Certificate, SharedBoxes, *CERTIFICATES.values()]:
        for hook in HOOKS:
            assert _count(getattr(cls, hook)) <= 6, f"{cls.__name__}.{hook}"


@pytest.mark.parametrize("name,opts,bs,expect", [
    ("ibp", {}, 6, ("ledger", "slots")),                          # per-epoch ledger: radii below b E
    ("ibp", {"substitutions": "per_batch"}, 6, (None, "b")),      # per batch: radii below b
    ("ibp", {}, None, (None, "b")),                               # full batch: one batch an epoch
    ("milp", {"frequency": 3, "workers": 1, "substitutions": "per_batch"}, 6, (None, "window")),  # F b records
    ("milp", {"frequency": 3, "workers": 1}, 6, (None, "slots")),  # ledger variable bounds: an epoch's slots
    ("gaplp", {}, 6, (None, "n")),                                # one budget over the whole pass
])
def test_the_schedule_says_which_loop_and_which_radii(name, opts, bs, expect):
    n = 24
    st = TrainSettings(steps=8, lr=0.1, clip=0.5, batch_size=bs, seed=0)
    plan = batch_plan(n, st)
    b = plan.shape[1]
    sc = get_certificate(name, **opts).schedule(plan, n)
    assert isinstance(sc, Schedule)
    E = epoch_length(plan, n)
    loop, limit = expect
    assert sc.epoch == (E if loop == "ledger" else None)
    want = {"slots": b * (E or 1), "b": b, "window": min(3 * b, n), "n": n}[limit]
    assert sc.limit == want


def test_the_radii_beyond_the_schedule_are_the_data_independent_cover():
    """Rows at or beyond Schedule.limit are the trivial cover: the same box for two datasets."""
    m = ModelSpec((2, 1), "mse")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 2, generator=g, dtype=torch.float64)
    y = torch.randn(24, generator=g, dtype=torch.float64)
    st = TrainSettings(steps=6, lr=0.1, clip=0.5, batch_size=6, seed=0)
    cert = get_certificate("ibp")
    limit = cert.schedule(batch_plan(24, st), 24).limit
    ks = [1, limit - 1, limit, 24]
    a = run_agt(m, m.init(0), (x, y), st, ks, AGTOptions(certificate=cert, progress=False))
    b = run_agt(m, m.init(0), (x * 3, -y), st, ks, AGTOptions(certificate=cert, progress=False))
    assert torch.equal(a.lo[2:], b.lo[2:]) and torch.equal(a.hi[2:], b.hi[2:])
    assert not torch.equal(a.lo[0], b.lo[0])


def test_intersect_down_and_even_chunks():
    lo = torch.tensor([[5.0], [0.0], [2.0], [1.0]])         # row 0 (radius 0) apart
    hi = torch.tensor([[6.0], [9.0], [3.0], [8.0]])
    a, b = intersect_down(lo, hi)
    assert a[:, 0].tolist() == [5.0, 2.0, 2.0, 1.0] and b[:, 0].tolist() == [6.0, 3.0, 3.0, 8.0]
    parts = even_chunks(10, 4)
    assert len({z - a_ for a_, z in parts}) == 1 and parts[-1][1] == 10 and parts[0][0] == 0
