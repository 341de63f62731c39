"""PATE baselines on tiny data: partition, vectorised shard training, PATE-R noise scale and
aggregation, and PATE-AGT-R's bound against retrained neighbours that change one shard."""

import dataclasses
import math

import pytest
import torch

from certdp import DTYPE
from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.errors import ConfigError
from certdp.certify import build_experiment, prediction_staircase
from certdp.certify.pate import certify_shards, partition, shard_predictions
from certdp.methods.pate import run
from certdp.privacy.mechanisms import GaussianGlobal
from certdp.settings import parse
from certdp.settings.training import staircase_settings
from certdp.training import train


def experiment(cfg):
    exp = build_experiment(parse("pate", cfg))
    return exp, exp.x, exp.y, exp.xt, exp.yt


def _cfg(n_train=48, n_test=40, shards=(1, 4), arms=None, releases=("laplace_gs", "gaussian_gs"),
         eps=(0.5, 2.0), cert="crown", **pate):
    return {
        "seed": 3,
        "dataset": {"name": "linear", "n_train": n_train, "n_test": n_test, "output_range": [-6.0, 6.0],
                    "model": {"arch": "linear"}},
        "model": {"arch": "auto"},
        "train": {"steps": 20, "lr": 0.3, "clip": 1.0},
        "certificate": {"name": cert},
        "staircase": {"kind": "range", "k_min": 1, "k_max": 1024, "include_n": True},
        "privacy": {"epsilons": list(eps), "delta": 1e-5, "releases": list(releases), "n_draws": 50},
        "pate": {"shards": list(shards), "arms": list(arms or ["pate_r", "gs"]),
                 "staircase": {"kind": "range", "k_min": 1, "k_max": 1024, "include_n": True}, **pate},
    }


def test_partition_disjoint_deterministic():
    p = partition(50, 7, 0)
    assert p.shape == (7, 7)
    assert len(set(p.flatten().tolist())) == 49
    assert torch.equal(p, partition(50, 7, 0))
    assert not torch.equal(p, partition(50, 7, 1))
    with pytest.raises(ValueError):
        partition(5, 6, 0)


def test_vectorised_shards_equal_one_by_one():
    exp, x, y, xt, _ = experiment(_cfg())
    parts = partition(48, 4, 0)
    got = shard_predictions(exp, parts, x, y, xt)
    theta0 = exp.model.init(exp.train.seed)
    for i in range(4):
        th = train(exp.model, theta0, x[parts[i]], y[parts[i]], exp.train)
        want = exp.model.predict(th, xt).clamp(-6, 6)
        assert torch.allclose(got[i], want, atol=1e-12)


def test_pate_r_noise_scale_and_aggregation():
    out = run(parse("pate", _cfg()), progress=False)
    res = out["results"]
    exp, x, y, xt, yt = experiment(_cfg())
    # the noise-free mean: average of the clipped shard predictions
    mean = shard_predictions(exp, partition(48, 4, exp.seed), x, y, xt).mean(0)
    row = res[(res.arm == "pate_mean") & (res.shards == 4)].iloc[0]
    assert row.mae == pytest.approx(float((mean - yt).abs().mean()), rel=1e-12)
    W = 12.0
    for T in (1, 4):
        for eps in (0.5, 2.0):
            lap = res[(res.arm == "pate_r") & (res.shards == T) & (res.mechanism == "laplace_gs") & (res.epsilon == eps)].iloc[0]
            assert lap.scale_mean == pytest.approx(W / (T * eps))          # Laplace(GS/(T eps))
            assert lap.sens_mean == pytest.approx(W / T)
            gau = res[(res.arm == "pate_r") & (res.shards == T) & (res.mechanism == "gaussian_gs") & (res.epsilon == eps)].iloc[0]
            assert gau.scale_mean == pytest.approx(GaussianGlobal(eps, 1e-5).scale(W / T))
    # T = 1 PATE-R is the global-sensitivity release on the full data
    gs = res[(res.arm == "gs") & (res.mechanism == "laplace_gs") & (res.epsilon == 0.5)].iloc[0]
    assert gs.scale_mean == pytest.approx(W / 0.5)
    summ = out["summary"]
    assert set(summ.arm) == {"pate_r", "gs"}
    assert res.best_T.sum() == len(summ)


def test_config_errors():
    with pytest.raises(ConfigError, match="pate.arms"):
        run(parse("pate", _cfg(arms=["nope"])), progress=False)
    with pytest.raises(ConfigError, match="pate.shards"):
        run(parse("pate", _cfg(shards=[100])), progress=False)
    with pytest.raises(ConfigError, match="pate.max_train"):
        run(parse("pate", _cfg(max_train=0)), progress=False)


@pytest.mark.slow
def test_all_arms_tiny_run():
    cfg = _cfg(n_train=64, shards=(1, 2, 8), arms=["pate_r", "pate_agtr", "agtr_wor", "agtr", "gs"],
               releases=("cauchy", "laplace", "laplace_gs", "gaussian_gs"), eps=(1.0,))
    # an engine outside the smoothness proof (MILP windows: safe solver bounds, not nesting) is
    # refused before any work; CROWN is covered, so every row carries the proof
    bad = {**cfg, "certificate": {"name": "milp", "workers": 1}}
    with pytest.raises(ConfigError) as e:
        run(parse("pate", bad), progress=False)
    assert e.value.key == "certificate.name"
    out = run(parse("pate", cfg), progress=False)
    res, summ = out["results"], out["summary"]
    assert {"pate_r", "pate_agtr", "agtr_wor", "agtr", "gs", "pate_mean"} <= set(res.arm)
    assert res.smoothness_proof.all()
    wor = res[(res.arm == "agtr_wor") & (res.shards == 8) & (res.mechanism == "laplace")].iloc[0]
    q = 8 / 64
    assert wor.epsilon_base == pytest.approx(math.log(1 + math.expm1(1.0) / q))
    assert wor.delta_base == pytest.approx(1e-5 / q)
    assert wor.beta == pytest.approx(wor.epsilon_base / (2 * math.log(2 / wor.delta_base)))
    cau = res[(res.arm == "agtr_wor") & (res.shards == 8) & (res.mechanism == "cauchy")].iloc[0]
    assert cau.beta == pytest.approx(cau.epsilon_base / 2) and cau.delta_base == 0
    # T = 1: PATE-AGT-R and the WOR arm are AGT-R on the full data (same sensitivity)
    a1 = res[(res.arm == "agtr") & (res.mechanism == "cauchy")].iloc[0]
    for arm in ("pate_agtr", "agtr_wor"):
        r = res[(res.arm == arm) & (res.shards == 1) & (res.mechanism == "cauchy")].iloc[0]
        assert r.sens_mean == pytest.approx(a1.sens_mean)
    # every smooth bound is capped by the (shard) global sensitivity over T
    p = res[res.arm == "pate_agtr"]
    assert (p.sens_mean <= 12.0 / p.shards + 1e-12).all()
    assert summ.best_T.isin([1, 2, 8]).all()


def _shard_stair(exp, xs, ys, xt, ks, cert):
    theta0 = exp.model.init(exp.train.seed)
    env = run_agt(exp.model, theta0, (xs, ys), exp.train, ks, AGTOptions(certificate=cert, progress=False))
    sc, pred = prediction_staircase(exp.on_data(xs, ys), env, xt)
    return sc, pred


@pytest.mark.parametrize("cert_name", ["crown", "ibp"])
def test_pate_agtr_bound_contains_retrained_neighbours(cert_name):
    """Neighbours that substitute records in one shard: the change of the shard mean is within
    (1/T) d_j(k) (radius k of that shard's staircase), hence within (1/T) max_i SS^beta_i."""
    T, N = 3, 30
    cfg = _cfg(n_train=N, n_test=25, cert=cert_name)
    exp, x, y, xt, _ = experiment(cfg)
    parts = partition(N, T, exp.seed)
    m = parts.shape[1]
    radii = staircase_settings({"kind": "range", "k_min": 1, "k_max": m, "include_n": True})
    cert = get_certificate(cert_name)
    betas = [0.05, 0.5]
    sc_all = certify_shards(exp, parts, radii, betas, progress=False)
    stairs = [_shard_stair(exp, x[parts[j]], y[parts[j]], xt, radii.radii(m), cert)[0] for j in range(T)]
    for b in betas:   # the max over shards that certify_shards keeps
        want = torch.stack([s.smooth(b) for s in stairs]).amax(0)
        assert torch.allclose(sc_all.ss_max[b], want)
    if cert_name == "crown":   # tighter than IBP's, and not just the cap
        ibp_exp = dataclasses.replace(exp, engine=get_certificate("ibp"))
        ibp_ss = certify_shards(ibp_exp, parts, radii, betas, progress=False).ss_max[0.5]
        assert float(sc_all.ss_max[0.5].mean()) < float(ibp_ss.mean()) < 12.0
    base = sc_all.preds.mean(0)
    theta0 = exp.model.init(exp.train.seed)
    g = torch.Generator().manual_seed(11)
    R = 24
    for k in (0, 1, 3):
        for j in range(T):
            # D~: k substitutions in shard j; D~': one more.  Retrain shard j for both, R at once.
            xs = x[parts[j]].expand(R, m, 1).clone()
            ys = y[parts[j]].expand(R, m).clone()
            idx = torch.stack([torch.randperm(m, generator=g)[: k + 1] for _ in range(R)])   # [R, k+1]
            newx = (torch.rand(R, k + 1, 1, generator=g, dtype=DTYPE) * 2 - 1) * 1.5
            newy = (torch.rand(R, k + 1, generator=g, dtype=DTYPE) * 2 - 1) * 8
            r_ix = torch.arange(R).unsqueeze(1)
            xk, yk = xs.clone(), ys.clone()
            xk[r_ix[:, :k], idx[:, :k]] = newx[:, :k]
            yk[r_ix[:, :k], idx[:, :k]] = newy[:, :k]
            xk1, yk1 = xk.clone(), yk.clone()
            xk1[r_ix[:, 0], idx[:, k]] = newx[:, k]
            yk1[r_ix[:, 0], idx[:, k]] = newy[:, k]
            f = lambda xx, yy: exp.model.predict(train(exp.model, theta0.expand(R, -1), xx, yy, exp.train), xt).clamp(-6, 6)
            # the mean over shards changes only through shard j
            change = (f(xk, yk) - f(xk1, yk1)).abs() / T                               # [R, n]
            col = int((stairs[j].k == k).nonzero()[0])
            bound = stairs[j].a_bar[:, col] / T                                        # (1/T) d_j(k)
            assert (change <= bound + 1e-9).all(), (k, j, float((change - bound).max()))
            if k == 0:
                for b in betas:
                    assert (change <= sc_all.ss_max[b] / T + 1e-9).all()
                # and the released mean of the actual neighbour
                mean_nb = base + (f(xk1, yk1) - sc_all.preds[j]) / T
                assert ((mean_nb - base).abs() <= sc_all.ss_max[0.5] / T + 1e-9).all()
