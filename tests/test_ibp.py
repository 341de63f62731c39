"""Interval passes contain the outputs and clipped gradients of parameters sampled in the box."""

import pytest
import torch

from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval, output_bounds
from certdp.models import ModelSpec


@pytest.mark.slow
@pytest.mark.parametrize("widths,loss", [((2, 1), "mse"), ((3, 8, 1), "mse"), ((3, 6, 4, 1), "mse"),
                                         ((3, 1), "hinge"), ((3, 4), "ce"), ((3, 5, 3), "ce")])
def test_bounds_contain_sampled_parameters(widths, loss):
    g = torch.Generator().manual_seed(0)
    m = ModelSpec(widths, loss)
    n = 12
    x = torch.randn(n, widths[0], generator=g, dtype=torch.float64)
    if loss == "mse":
        y = torch.randn(n, generator=g, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    else:
        y = torch.randint(0, widths[-1], (n,), generator=g)
    c = m.init(1)
    rad = torch.stack([torch.full_like(c, 0.02), torch.full_like(c, 0.3)])      # two radii at once
    box = Interval(c - rad, c + rad)
    out = output_bounds(m, box, x)
    gb = gradient_bounds(m, box, x, y, clip=0.5)                                # [K, P, n]
    for j in range(2):
        for _ in range(200):
            th = c + (torch.rand(c.shape, generator=g, dtype=torch.float64) * 2 - 1) * rad[j]
            f = m.forward(th, x)
            assert ((f >= out.lo[j] - 1e-12) & (f <= out.hi[j] + 1e-12)).all()
            gr = m.per_sample_grads(th, x, y).clamp(-0.5, 0.5).T
            assert ((gr >= gb.lo[j] - 1e-12) & (gr <= gb.hi[j] + 1e-12)).all()
        # a box's corners are inside too
        for corner in (box.lo[j], box.hi[j]):
            gr = m.per_sample_grads(corner, x, y).clamp(-0.5, 0.5).T
            assert ((gr >= gb.lo[j] - 1e-12) & (gr <= gb.hi[j] + 1e-12)).all()


def test_point_box_is_exact_for_linear_model():
    m = ModelSpec((3, 1), "mse")
    x = torch.randn(5, 3, dtype=torch.float64)
    y = torch.randn(5, dtype=torch.float64)
    th = m.init(0)
    gb = gradient_bounds(m, Interval(th[None], th[None]), x, y, clip=10.0)
    ref = m.per_sample_grads(th, x, y).T
    assert torch.allclose(gb.lo[0], ref) and torch.allclose(gb.hi[0], ref)
