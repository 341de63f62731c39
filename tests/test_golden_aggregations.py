"""Golden files for IBP envelopes on a small MLP under both aggregations (top-k and tau) and the
staircase built on them (tests/test_golden.py has the per-loss IBP envelopes and the prediction and
parameter staircases; CROWN and MILP theirs in test_crown.py and test_milp.py): a change of the
numbers shows up as a reviewed diff of tests/golden/ (``CERTDP_REGEN_GOLDEN=1`` rewrites them), not
as a silent drift that soundness tests still pass."""

from __future__ import annotations

import pytest
import torch

from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.bounds.interval import output_bounds
from certdp.models import ModelSpec
from certdp.privacy.sensitivity import staircase
from certdp.training import TrainSettings

D = torch.float64
BETAS = torch.tensor([0.05, 0.5, 2.0], dtype=D)


def _ibp_case(aggregation: str):
    gen = torch.Generator().manual_seed(21)
    m = ModelSpec((3, 5, 1), "mse")
    x = torch.rand(24, 3, generator=gen, dtype=D) * 2 - 1
    y = x.sum(1) - 0.3 + 0.1 * torch.randn(24, generator=gen, dtype=D)
    s = TrainSettings(steps=6, lr=0.1, clip=0.2, batch_size=8, seed=2)
    env = run_agt(m, m.init(5), x, y, s, [1, 2, 4, 8], certificate=get_certificate("ibp", aggregation=aggregation),
                  progress=False)
    xtest = torch.rand(6, 3, generator=gen, dtype=D) * 2 - 1
    return m, env, xtest


def _head_case(loss: str, batch_size, *, radii=(1, 2, 4, 8, 30)):
    """A single-layer head (softmax or hinge: the AGS heads) under tau: IBP's head pass
    (certdp/bounds/ibp.py, head_sum_stats), full batch and the per-epoch ledger."""
    gen = torch.Generator().manual_seed(22)
    widths = (4, 3) if loss == "ce" else (4, 1)
    m = ModelSpec(widths, loss)
    x = torch.randn(30, 4, generator=gen, dtype=D) * 2
    x[0] = 1e3                                                  # one extreme record
    y = (torch.randint(0, 3, (30,), generator=gen) if loss == "ce"
         else torch.where(x[:, 0] + 0.5 * torch.randn(30, generator=gen, dtype=D) > 0, 1.0, -1.0).to(D))
    s = TrainSettings(steps=8, lr=0.5, clip=0.1, batch_size=batch_size, contraction=0.8, seed=3)
    return run_agt(m, m.init(4), x, y, s, list(radii), certificate=get_certificate("ibp", aggregation="tau"),
                   progress=False)


HEADS = [("ce", None), ("ce", 10), ("hinge", 10)]


@pytest.mark.parametrize("loss,batch_size", HEADS, ids=[f"{a}-{b or 'full'}" for a, b in HEADS])
def test_golden_tau_head_envelopes(loss, batch_size, check_golden):
    """The head pass's envelopes are the former fused pass's (recorded from it, commit 25f5ad7)
    up to rounding: a speed change must not move a bound."""
    env = _head_case(loss, batch_size)
    check_golden(f"ibp_envelopes_tau_head_{loss}_{batch_size or 'full'}.json", env.lo, env.hi, atol=1e-10)


@pytest.mark.parametrize("aggregation", ["topk", "tau"])
def test_golden_ibp_envelopes(aggregation, check_golden):
    _, env, _ = _ibp_case(aggregation)
    check_golden(f"ibp_envelopes_{aggregation}.json", env.lo, env.hi, atol=1e-10)


def test_golden_staircase(check_golden):
    m, env, xtest = _ibp_case("topk")
    out = output_bounds(m, env.box, xtest)
    sc = staircase(out.lo, out.hi, m.forward(env.nominal, xtest), env.k_values, n_total=24,
                   global_sensitivity=torch.full((6,), 3.0, dtype=D))
    ss = torch.stack([sc.smooth(float(b)) for b in BETAS])          # [B, n_test]
    check_golden("staircase_ibp_topk.json", sc.a_bar.to(D), ss.to(D), atol=1e-10)


def test_a_golden_check_catches_a_shifted_bound(check_golden, monkeypatch):
    """Planted: the same envelopes with one lower bound moved by 1e-6 fail the comparison."""
    monkeypatch.setenv("CERTDP_REGEN_GOLDEN", "0")      # never write the planted values
    _, env, _ = _ibp_case("tau")
    lo = env.lo.clone()
    lo.view(-1)[3] -= 1e-6
    with pytest.raises(AssertionError):
        check_golden("ibp_envelopes_tau.json", lo, env.hi, atol=1e-10)
