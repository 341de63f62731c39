"""Nominal passes against torch.autograd."""

import pytest
import torch

from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train

D = torch.float64


def _autograd_per_sample(model, theta, x, y):
    rows = []
    for i in range(x.shape[0]):
        t = theta.clone().requires_grad_(True)
        loss = model.per_sample_loss(t, x[i:i + 1], y[i:i + 1]).sum()
        (g,) = torch.autograd.grad(loss, t)
        rows.append(g)
    return torch.stack(rows)


@pytest.mark.parametrize("widths,loss", [((3, 1), "mse"), ((4, 7, 5, 1), "mse"), ((3, 1), "hinge"),
                                         ((4, 3), "ce"), ((4, 6, 3), "ce")])
def test_per_sample_grads_match_autograd(widths, loss):
    m = ModelSpec(widths, loss)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, widths[0], generator=g, dtype=torch.float64)
    if loss == "mse":
        y = torch.randn(9, generator=g, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(torch.rand(9, generator=g) < 0.5, -1.0, 1.0).double()
    else:
        y = torch.randint(0, widths[-1], (9,), generator=g)
    theta = m.init(3)
    ours = m.per_sample_grads(theta, x, y)
    ref = _autograd_per_sample(m, theta, x, y)
    assert torch.allclose(ours, ref, atol=1e-12, rtol=1e-10)


def test_batched_training_equals_individual_runs():
    m = ModelSpec((2, 5, 1), "mse")
    x = torch.randn(3, 20, 2, dtype=torch.float64)
    y = torch.randn(3, 20, dtype=torch.float64)
    train_settings = TrainSettings(steps=7, lr=0.1, clip=0.3, batch_size=4, seed=2)
    th = m.init(0)
    batched = train(m, th.expand(3, -1), x, y, train_settings)
    for r in range(3):
        assert torch.allclose(batched[r], train(m, th, x[r], y[r], train_settings), atol=1e-13)


def test_batch_plan_is_fixed_by_seed_and_data_independent():
    train_settings = TrainSettings(steps=30, lr=0.1, clip=1.0, batch_size=7, seed=5)
    a, b = batch_plan(50, train_settings), batch_plan(50, train_settings)
    assert torch.equal(a, b) and a.shape == (30, 7)
    # within an epoch no index repeats
    assert len(set(a[0:7].flatten().tolist())) == 49


def test_training_update_is_clipped_contracted_gd():
    m = ModelSpec((1, 1), "mse")
    x = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([10.0, -3.0], dtype=torch.float64)
    train_settings = TrainSettings(steps=1, lr=0.5, clip=1.0, contraction=0.9)
    th = torch.tensor([0.2, -0.1], dtype=torch.float64)
    g = m.per_sample_grads(th, x, y).clamp(-1, 1)
    assert torch.allclose(train(m, th, x, y, train_settings), 0.9 * th - 0.5 * g.mean(0))


def test_loss_objects_key_caches_like_their_names():
    from certdp.losses import MSE, SoftmaxCE
    a, b = ModelSpec((3, 1), "mse"), ModelSpec((3, 1), MSE())
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert ModelSpec((3, 2), "ce").loss == SoftmaxCE() and str(ModelSpec((3, 2), "ce").loss) == "ce"
    assert ModelSpec((3, 1), "hinge") != a
    with pytest.raises(ValueError, match="allowed: mse, hinge, ce"):
        ModelSpec((3, 1), "huber")
    with pytest.raises(ValueError, match="needs one output"):
        ModelSpec((3, 2), "hinge")


@pytest.mark.parametrize("loss,C", [("mse", 1), ("hinge", 1), ("ce", 3)])
def test_loss_gradient_bounds_contain_sampled_outputs(loss, C):
    """grad_bounds and grad_linear_bounds over an output box contain phi(z) for z in the box."""
    m = ModelSpec((2, C), loss)
    g = torch.Generator().manual_seed(4)
    n = 16
    if loss == "mse":
        y = torch.randn(n, generator=g, dtype=torch.float64)
    elif loss == "hinge":
        y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    else:
        y = torch.randint(0, C, (n,), generator=g)
    c = torch.randn(2, n, C, generator=g, dtype=torch.float64) * 2
    r = torch.tensor([0.05, 1.5], dtype=torch.float64).view(2, 1, 1)
    zl, zu = c - r, c + r                                                   # two boxes [2, n, C]
    lo, hi = m.loss.grad_bounds(zl, zu, y)
    al, au, bl, bu, rl, ru = m.loss.grad_linear_bounds(zl, zu, y)
    for _ in range(200):
        z = zl + torch.rand(zl.shape, generator=g, dtype=torch.float64) * (zu - zl)
        phi = m.loss.grad(z, y)
        assert bool(((phi >= lo - 1e-12) & (phi <= hi + 1e-12)).all())
        lin_lo = (al * z.unsqueeze(-2)).sum(-1) + bl                        # alpha [.., C, C'] . z, C' in {1, C}
        lin_hi = (au * z.unsqueeze(-2)).sum(-1) + bu
        assert bool((phi >= lin_lo - 1e-12).all() and (phi <= lin_hi + 1e-12).all())
        assert bool((lin_lo >= rl - 1e-12).all() and (lin_hi <= ru + 1e-12).all())     # the range bounds


# ---------------------------------------------------------------------------------------------
# The a-priori magnitude bound behind "no private record can make the numbers overflow"

MAG = [((3, 1), "mse"), ((4, 3), "ce"), ((4, 8, 3), "ce"), ((2, 6, 5, 1), "mse"), ((3, 4, 1), "hinge")]


@pytest.mark.parametrize("widths,loss", MAG, ids=[f"{'x'.join(map(str, w))}-{l}" for w, l in MAG])
def test_the_magnitude_bound_dominates_every_number_of_the_passes(widths, loss):
    """Inputs at the clip range (corners and random), parameters anywhere within R, targets at
    the target bound: activations, per-sample gradients (before clipping) and the interval
    forward pass over boxes inside [-R, R] stay below ModelSpec.magnitude_bound."""
    from certdp.bounds.ibp import gradient_bounds
    from certdp.bounds.interval import Interval, forward_bounds
    gen = torch.Generator().manual_seed(4)
    m = ModelSpec(widths, loss)
    B, R, Y = 50.0, 3.0, 20.0
    bound = m.magnitude_bound(input_bound=B, param_bound=R, target_bound=Y)
    x = torch.where(torch.rand(64, widths[0], generator=gen) < 0.5, -B, B).to(D)
    x[32:] *= torch.rand(32, widths[0], generator=gen, dtype=D)
    y = {"mse": torch.where(torch.rand(64, generator=gen) < 0.5, -Y, Y).to(D),
         "hinge": torch.where(torch.rand(64, generator=gen) < 0.5, -1, 1),
         "ce": torch.randint(0, widths[-1], (64,), generator=gen)}[loss]
    theta = torch.where(torch.rand(16, m.n_params, generator=gen) < 0.5, -R, R).to(D)
    _, acts, pres = m.forward(theta, x, return_cache=True)
    seen = max(float(t.abs().max()) for t in [*acts, *pres])
    seen = max(seen, float(m.per_sample_grads(theta, x, m.loss.labels(y)).abs().max()))
    lo = theta.clamp(max=0) * torch.rand(theta.shape, generator=gen, dtype=D)
    box = Interval(torch.minimum(lo, theta), torch.maximum(lo, theta))      # boxes inside [-R, R]
    out, iacts, ipres = forward_bounds(m, box, x)
    seen = max(seen, *(float(torch.maximum(t.lo.abs(), t.hi.abs()).max()) for t in [out, *iacts[1:], *ipres]))
    g = gradient_bounds(m, box, x, m.loss.labels(y), clip=1e300)           # no clipping: the raw bounds
    seen = max(seen, float(torch.maximum(g.lo.abs(), g.hi.abs()).max()))
    assert seen <= bound, (seen, bound)
    # planted bug: the same recursion without the fan-in factor is exceeded (the check has teeth)
    a = B
    for _ in widths[:-1]:
        a = R * a + R
    assert seen > a, (seen, a)
