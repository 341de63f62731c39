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
