"""CROWN through time (``certificate=crowntt``): containment against retrained neighbours with
adversarial placements for the hinge, MSE and softmax heads, per-epoch and per-batch budgets,
record branches, AGS-style windows; its refusals and its smoothness label."""

import pytest
import torch

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import check_supported, get_certificate
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.privacy.smoothness import coverage, require_covered
from certdp.training import TrainSettings, batch_plan, train
from neighbourhoods import assert_contains_neighbours, toy_problem


CASES = [
    # name, widths, loss, N, b, steps, lr, clip, radii, options
    ("hinge", (3, 1), "hinge", 43, 6, 28, 0.5, 0.05, [1, 2, 4, 7], {}),
    ("hinge-per-batch", (3, 1), "hinge", 43, 6, 28, 0.5, 0.05, [1, 2, 7], {"substitutions": "per_batch"}),
    ("hinge-no-branch", (3, 1), "hinge", 43, 6, 28, 0.5, 0.05, [1, 3], {"branch": 0}),
    ("hinge-alpha", (3, 1), "hinge", 43, 6, 28, 0.5, 0.05, [1, 2, 7], {"alpha_iters": 8}),
    ("mse", (2, 1), "mse", 42, 5, 24, 0.1, 0.1, [1, 2, 5, 9], {}),
    ("softmax", (2, 3), "ce", 34, 6, 15, 0.3, 0.1, [1, 2], {"branch": 0}),
]


# hinge-alpha and softmax take most of the time (measured): slow tier; the other heads stay in `make test`
SLOW_CASES = ("hinge-alpha", "softmax")


@pytest.mark.parametrize("name,widths,loss,n,b,steps,lr,clip,ks,opts",
                         [pytest.param(*c, id=c[0], marks=(pytest.mark.slow,) if c[0] in SLOW_CASES else ())
                          for c in CASES])
def test_crowntt_contains_retrained_neighbours(name, widths, loss, n, b, steps, lr, clip, ks, opts):
    m, x, y, s, plan, gen = toy_problem(widths, loss, n, b, steps, lr, clip, data_seed=6, train_seed=1)
    th0 = m.init(2)
    cert = get_certificate("crowntt", **opts)
    env = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=cert, progress=False))
    assert torch.allclose(env.nominal, train(m, th0, x, y, s))
    ibp = run_agt(m, th0, (x, y), s, ks,
                  AGTOptions(certificate=get_certificate("ibp", substitutions=cert.substitutions), progress=False))
    # never looser than the interval boxes it is intersected with (up to AGT's outward rounding)
    slack = 1e-9 * (1 + ibp.hi.abs().max())
    assert bool((env.lo >= ibp.lo - slack).all() and (env.hi <= ibp.hi + slack).all())
    assert_contains_neighbours(env, m, th0, x, y, s, ks=ks, R=8, plan=plan, loss=loss, gen=gen,
                               n_classes=widths[-1])


@pytest.mark.slow
def test_crowntt_is_much_tighter_than_boxes_on_hinge_sgd():
    """The reason for the engine: on hinge SGD the boxes grow at the maximal rate once margins
    become uncertain, while trajectories only differ through the substituted records."""
    from certdp.data import load_dataset
    ds = load_dataset({"name": "blobs", "n_features": 4, "n_train": 60, "n_test": 10, "n_public": 10,
                       "separation": 2.563, "cluster_std": 1.0}, 0)
    x, y = torch.as_tensor(ds.x_train, dtype=torch.float64), torch.as_tensor(ds.y_train)
    m = ModelSpec((4, 1), "hinge")
    s = TrainSettings(steps=80, lr=0.5, clip=0.05, batch_size=10, seed=0)
    tt = run_agt(m, m.init(0), (x, y), s, [1, 2],
                 AGTOptions(certificate=get_certificate("crowntt", branch=0), progress=False))
    ibp = run_agt(m, m.init(0), (x, y), s, [1, 2], AGTOptions(certificate=get_certificate("ibp"), progress=False))
    assert float(tt.widths()[0].sum()) < 0.5 * float(ibp.widths()[0].sum())


@pytest.mark.slow
def test_crowntt_slope_optimisation_tightens_and_contains_neighbours():
    """certificate.alpha_iters: per-objective mixtures of the two valid lines of every uncertain
    neuron; each iterate is a sound bound, so the result lies inside the area-rule envelope, is
    narrower where neurons are uncertain (a blobs-like plan of eight epochs), and contains random
    and adversarially placed retrained neighbours."""
    from certdp.data import load_dataset
    ds = load_dataset({"name": "blobs", "n_features": 4, "n_train": 40, "n_test": 10, "n_public": 10,
                       "separation": 2.563, "cluster_std": 1.0}, 0)
    x, y = torch.as_tensor(ds.x_train, dtype=torch.float64), torch.as_tensor(ds.y_train)
    m = ModelSpec((4, 1), "hinge")
    s = TrainSettings(steps=40, lr=0.5, clip=0.05, batch_size=8, seed=0)
    plan = batch_plan(40, s)
    th0 = m.init(0)
    ks = [1, 2]
    base = run_agt(m, th0, (x, y), s, ks,
                   AGTOptions(certificate=get_certificate("crowntt"), plan=plan, progress=False))
    cert = get_certificate("crowntt", alpha_iters=10)
    opt = run_agt(m, th0, (x, y), s, ks, AGTOptions(certificate=cert, plan=plan, progress=False))
    slack = 1e-9 * (1 + base.hi.abs().max())
    assert bool((opt.lo >= base.lo - slack).all() and (opt.hi <= base.hi + slack).all())
    assert bool((opt.widths().sum(-1) < 0.995 * base.widths().sum(-1)).all())
    assert cert.stats[-1]["alpha_iters"] == 10
    gen = torch.Generator().manual_seed(9)
    assert_contains_neighbours(opt, m, th0, x, y, s, ks=ks, R=12, plan=plan, loss="hinge", gen=gen)


def test_crowntt_window_from_a_released_point_contains_neighbours():
    m, x, y, s, plan, gen = toy_problem((2, 1), "hinge", 40, 5, 30, 0.5, 0.05, data_seed=4, train_seed=3)
    start = m.init(0) + 0.05
    window = range(11, 23)
    env = run_agt(m, start, (x, y), s, [1, 3],
                  AGTOptions(certificate=get_certificate("crowntt"), plan=plan, steps=window, progress=False))
    assert_contains_neighbours(env, m, start, x, y, s, ks=[1, 3], R=8, plan=plan, loss="hinge", gen=gen,
                               steps=window)


def test_crowntt_refusals_and_smoothness_label():
    with pytest.raises(ConfigError, match="certificate.name"):
        check_supported(get_certificate("crowntt"), ModelSpec((2, 4, 1), "mse"))
    with pytest.raises(ConfigError, match="certificate.substitutions"):
        get_certificate("crowntt", substitutions="per_step")
    with pytest.raises(ConfigError, match="certificate.horizon"):
        get_certificate("crowntt", horizon=0)
    for bad in (-1, "abc", 2.5):
        with pytest.raises(ConfigError, match="certificate.alpha_iters"):
            get_certificate("crowntt", alpha_iters=bad)
    cert = get_certificate("crowntt")
    assert cert.nesting_monotone is False and coverage(cert) is not None
    with pytest.raises(ConfigError, match="privacy.smoothness=unproven"):
        require_covered(cert)
