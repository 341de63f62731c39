"""Private-prediction baselines with shards: PATE-R, PATE-AGT-R and amplified one-shard AGT-R.

Setting.  D = (z_1, ..., z_N) has a fixed size, adjacency is substitution of one record.  For T
shards a permutation drawn from the seed (independent of the data) splits the first T*m indices,
m = floor(N/T), into T disjoint shards pi_1..pi_T; the N - T*m left-over records are not used.
Shard i trains theta_i = M(f, theta_init, D_{pi_i}) with the nominal algorithm (all shards in one
vectorised call of :func:`certdp.training.train`), and predicts f_i(x) = clip(f^{theta_i}(x)) in
the output range.  The aggregate is the mean F(x) = (1/T) sum_i f_i(x).  Every release is one
private prediction per test point, as in AGT-R; its noisy value is clipped to the range
(post-processing).

Arms (``pate.arms``):

* ``pate_r``: F + Laplace(GS/(T eps)) (pure) or the Gaussian mechanism with Delta_2 = GS/T
  (approx), GS the shard model's global sensitivity (the width of the output range).
* ``pate_agtr``: every shard certifies its own staircase d_i(k) with AGT (radii
  ``pate.staircase``, capped at m) and the release adds smooth-sensitivity noise (Cauchy / Laplace,
  :mod:`certdp.privacy.mechanisms`) calibrated to S(D) = (1/T) max_i SS^beta_i.
* ``agtr_wor``: AGT-R on one shard only (a uniformly random m-subset: the partition is a uniform
  permutation and the shard index is uniform), spending the amplified base budget of Lemma 3.1
  with q = m/N (= 1/T when T divides N): eps_b = ln(1 + (e^eps - 1)/q), delta_b = delta/q
  (skipped when delta_b >= 1); the beta rules use (eps_b, delta_b).  As the lemma requires, the
  subset is part of the mechanism's randomness and must stay secret.  So the shard is drawn
  *per noise draw*, with the noise: the reported MAE/MSE average over the shard choice as well as
  the noise (one fixed shard would report one sample of the mechanism, not the mechanism), and
  every shard's staircase is the one :func:`certify_shards` already computes for PATE-AGT-R.
  These draws are seeded: nothing of ``certdp pate`` is published (its files are the researcher's
  report).  A release of this arm meant for publication must draw both the shard index and the
  noise from the OS CSPRNG (:func:`certdp.privacy.noise.release_source`,
  :func:`certdp.privacy.noise.index`) and must not publish the partition seed.
* ``agtr`` and ``gs``: AGT-R and the global-sensitivity Laplace / Gaussian releases on the full
  data (:func:`certdp.methods.agtr.certify`; radii ``pate.staircase`` like the shards, or the
  ``staircase`` group with ``pate.full_staircase=agtr``).  At T = 1 the three shard arms *are*
  these mechanisms, and they reuse the full-data certificate.
* ``pate_mean`` (always): the noise-free mean F, the floor the noisy arms approach.

Why PATE-AGT-R's noise is sound.

1. *One substitution touches one shard.*  The partition is fixed by index, not by content: a
   neighbour D' differs from D at one index t, which lies in at most one shard pi_j, so
   D'_{pi_i} = D_{pi_i} for i != j and d(D_{pi_j}, D'_{pi_j}) <= 1.  Hence
   |F(D) - F(D')| = |f_j(D) - f_j(D')| / T  (for PATE-R: <= GS/T, its global sensitivity).
2. *The local sensitivity of the mean.*  By 1., LS_F(D) = max_j LS_{f_j}(D_{pi_j}) / T, and each
   shard's staircase bound SS^beta_j (privacy/sensitivity.py) is at least LS_{f_j}.
3. *The smooth bound.*  S(D) = (1/T) max_j SS^beta_j(D_{pi_j}) bounds LS_F(D) by 2.  It is
   beta-smooth: for neighbours
   D, D' differing in shard j only, SS^beta_i is unchanged for i != j and
   SS^beta_j(D_{pi_j}) <= e^beta SS^beta_j(D'_{pi_j}) (each shard's bound is beta-smooth on its own
   dataset, under the conditions of privacy/sensitivity.py), so max_i SS^beta_i(D) <= e^beta
   max_i SS^beta_i(D').  A maximum of
   functions each beta-smooth in its own block of records and constant in the others is
   beta-smooth.  So S is a beta-smooth upper bound on the local sensitivity of F and the smooth
   releases (scale S/(eps - beta), 2S/eps, ...) keep their guarantees.

Outputs: ``results`` (every arm x mechanism x epsilon x T, MAE/MSE and the excess over the
full-data non-private model, ``best_T`` marking each arm's best T per budget: MAE under pure DP,
MSE under approximate DP, as in the paper) and ``summary`` (those best-T rows with the full-data
AGT-R and GS arms; ``excess_vs_agtr`` = excess / AGT-R's excess, ``gs_over_arm`` = GS error /
arm error).  The best T is chosen on the test errors of releases made at every T tried, so each
summary row also reports ``candidates`` and ``epsilon_end_to_end`` / ``delta_end_to_end``, the
basic composition over them; every ``results`` row is one release at its own ``epsilon``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from certdp import DTYPE
from certdp.certify import (Experiment, build_experiment, certify_predictions, check_prediction_radii, envelopes,
                            draw_errors, global_sensitivity, nominal, prediction_staircase, release_errors,
                            require_finite, spent, with_provenance)
from certdp.certify.pate import partition, train_teachers
from certdp.errors import ConfigError
from certdp.privacy import noise
from certdp.privacy.accounting import base_budget_wor
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings
from certdp.settings.training import StaircaseSettings

log = logging.getLogger("certdp")


def _clip(pred: torch.Tensor, rng) -> torch.Tensor:
    return pred.clamp(float(rng[0]), float(rng[1])) if rng is not None else pred


def shard_predictions(exp: Experiment, parts: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                      xt: torch.Tensor) -> torch.Tensor:
    """Clipped test predictions [T, n] of the T shard models, trained in one vectorised call
    (x [T, m, d], theta [T, P]); every shard starts from the same data-independent init."""
    theta = train_teachers(exp.model, exp.model.init(exp.train.seed), x, y, parts, exp.train, resumable="pate_shards")
    return _clip(exp.model.predict(theta, xt), exp.dataset.output_range)


@dataclass
class ShardCertificates:
    preds: torch.Tensor                  # [T, n] clipped nominal predictions (AGT's nominal run)
    ss_max: dict[float, torch.Tensor]    # beta -> [n] max over shards of SS^beta_i
    staircases: list                     # every shard's Staircase (agtr_wor: SS at its own beta)
    radii: int


def certify_shards(exp: Experiment, parts: torch.Tensor, radii: StaircaseSettings, betas: list[float],
                   progress: bool) -> ShardCertificates:
    """AGT on every shard (one batched pass over all radii per shard), each shard's staircase
    for its own dataset of m records, and the running max over shards of SS^beta_i."""
    T, m = parts.shape
    bt = torch.tensor(sorted(set(betas)), dtype=DTYPE) if betas else None
    ss_max = None
    preds, stairs, n_radii = [], [], 0
    for i in tqdm(range(T), desc=f"PATE-AGT-R T={T}", disable=not progress, leave=False):
        sub = exp.on_data(exp.x[parts[i]], exp.y[parts[i]], staircase=radii)
        sc, pred = prediction_staircase(sub, envelopes(sub))
        n_radii = len(sub.ks)
        preds.append(pred)
        stairs.append(sc)
        if bt is not None:
            s = sc.smooth(bt)                                   # [n, B]
            ss_max = s if ss_max is None else torch.maximum(ss_max, s)
    ss = {float(b): ss_max[:, j] for j, b in enumerate(bt.tolist())} if bt is not None else {}
    return ShardCertificates(torch.stack(preds), ss, stairs, n_radii)


def wor_errors(preds: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, mech, n_draws: int, source,
               output_range) -> tuple[float, float]:
    """MAE and MSE of the one-shard release clip(f_I(x) + scale_I(x) Z) over ``n_draws`` draws
    per point, the shard I uniform on {0..T-1} drawn afresh with every draw (``preds``/``scale``
    [T, n]; one index per draw, shared by the points of that draw: one release answers them all
    from the same secret shard)."""
    require_finite(scale, what=f"the noise scale of {mech.name} at eps={mech.epsilon:g} is")
    T, n = preds.shape

    def draw(k: int) -> torch.Tensor:
        shard = noise.index(source, T, (k,))               # the secret shard of each draw, then its noise
        return preds[shard] + scale[shard] * mech.sample(source, (k, n))
    return draw_errors(draw, n=n, n_draws=n_draws, target=target, output_range=output_range)


def _row(exp, *, arm, mech, T, m, pred, yt, sens, gen_labels, base=None, extra=None):
    """One noisy release of ``pred`` with noise ``mech.scale(sens)``: a results row."""
    scale = mech.scale(sens)
    gen = generator_for(exp.seed, arm, mech.name, float(mech.epsilon), T, *gen_labels)
    mae, mse = release_errors(pred, yt, scale, mech, exp.privacy.n_draws, gen, exp.dataset.output_range)
    eps, delta = (base or (mech.epsilon, mech.delta_spent))
    row = {"arm": arm, "mechanism": mech.name, "regime": mech.regime, "epsilon": float(eps),
           "delta": float(delta) if mech.regime == "approx" else 0.0,
           "epsilon_base": float(mech.epsilon), "delta_base": mech.delta_spent,
           "beta": float(mech.beta), "shards": T, "shard_size": m, "mae": mae, "mse": mse,
           "sens_mean": float(sens.mean()), "sens_median": float(sens.median()),
           "scale_mean": float(scale.mean())}
    row.update(extra or {})
    return row


def _wor_row(exp, *, mech, T, m, preds, yt, sens, base, extra):
    """The ``agtr_wor`` row: the one-shard release with the shard drawn per noise draw
    (:func:`wor_errors`; seeded: a statistic of the report, never a publication)."""
    scale = mech.scale(sens)                                               # [T, n]
    source = noise.seeded(exp.seed, "agtr_wor", mech.name, float(mech.epsilon), T)
    mae, mse = wor_errors(preds, yt, scale, mech, exp.privacy.n_draws, source, exp.dataset.output_range)
    eps, delta = base
    return {"arm": "agtr_wor", "mechanism": mech.name, "regime": mech.regime, "epsilon": float(eps),
            "delta": float(delta) if mech.regime == "approx" else 0.0,
            "epsilon_base": float(mech.epsilon), "delta_base": mech.delta_spent,
            "beta": float(mech.beta), "shards": T, "shard_size": m, "mae": mae, "mse": mse,
            "sens_mean": float(sens.mean()), "sens_median": float(sens.median()),
            "scale_mean": float(scale.mean()), **extra}


def _early_checks(exp: Experiment, ps, gs, *, smooth, glob, need_agt) -> None:
    """What the data makes impossible, refused before any training: more shards than records,
    global releases without a global sensitivity, radii that stop below a dataset's size
    without one."""
    N = exp.n_train
    too_many = [t for t in ps.shards if t > N]
    if too_many:
        raise ConfigError("pate.shards", f"{too_many} exceed the {N} training records (every shard needs one); "
                                         f"allowed: shard counts of at most {N}")
    if gs is None and glob and ("gs" in ps.arms or "pate_r" in ps.arms):
        raise ConfigError("privacy.global_sensitivity", "the gs and pate_r arms need a global sensitivity; allowed: "
                                                        "range with dataset.output_range, or trajectory (linear model)")
    if gs is None and smooth:
        if "agtr" in ps.arms or (need_agt and 1 in ps.shards):
            full = exp if ps.full_staircase == "agtr" else dataclasses.replace(exp, ks=tuple(ps.staircase.radii(N)))
            check_prediction_radii(full, gs)
        if need_agt:
            for t in ps.shards:
                m = N // t
                if ps.staircase.radii(m)[-1] < m:
                    raise ConfigError("pate.staircase", f"the radii stop below the shard size {m} (T={t}) and the "
                                      "output has no global sensitivity; allowed: pate.staircase.include_n=true or an "
                                      "output range (dataset.output_range)")


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    ps = settings.shards
    mechs = settings.privacy.mechanisms()
    smooth = [mc for mc in mechs if mc.kind == "smooth"]
    glob = [mc for mc in mechs if mc.kind == "global"]
    need_agt = bool(smooth) and any(a in ps.arms for a in ("pate_agtr", "agtr_wor"))
    exp = build_experiment(settings, task="regression",
                           smooth_release=bool(smooth) and (need_agt or "agtr" in ps.arms))
    proof = exp.smoothness_proof
    ds = exp.dataset
    if ps.max_train is not None and ps.max_train < ds.n_train:
        idx = np.random.default_rng(exp.seed + 104729).permutation(ds.n_train)[: ps.max_train]
        exp = exp.on_data(ds.x_train[idx], ds.y_train[idx])
        ds = exp.dataset
    x, y, xt, yt = exp.x, exp.y, exp.xt, exp.yt
    N = ds.n_train
    gs_full = global_sensitivity(exp, xt)
    _early_checks(exp, ps, gs_full, smooth=smooth, glob=glob, need_agt=need_agt)
    nominal(exp)
    log.info("PATE on %s: N=%d train, %d test, model %s, shards %s, arms %s, certificate %s",
             ds.name, N, len(yt), exp.model.widths, list(ps.shards), list(ps.arms), exp.certificate_name)
    rows: list[dict] = []
    timing: dict[int, float] = {}

    # -------------------------------------------------------------- full data (T = 1)
    full = None
    t0 = time.perf_counter()
    if smooth and ("agtr" in ps.arms or (need_agt and 1 in ps.shards)):
        fexp = exp if ps.full_staircase == "agtr" else dataclasses.replace(exp, ks=tuple(ps.staircase.radii(N)))
        env, sc_full, pred_full, tm = certify_predictions(fexp, progress=progress)
        full = (sc_full, pred_full)
        log.info("full-data AGT-R: %d radii (k_max %d) in %.1f s", tm["radii"], tm["k_max"], tm["agt_seconds"])
    else:
        pred_full = shard_predictions(exp, torch.arange(N).view(1, N), x, y, xt)[0]
    t_full = time.perf_counter() - t0
    np_mae = float((pred_full - yt).abs().mean())
    np_mse = float(((pred_full - yt) ** 2).mean())
    log.info("full-data non-private test MAE %.5f  MSE %.5f", np_mae, np_mse)
    if full is not None and "agtr" in ps.arms:
        for mc in smooth:
            rows.append(_row(exp, arm="agtr", mech=mc, T=1, m=N, pred=pred_full, yt=yt,
                             sens=full[0].smooth(mc.beta), gen_labels=("full",),
                             extra={"arm_nonprivate_mae": np_mae, "arm_nonprivate_mse": np_mse,
                                    "seconds": t_full}))
    if "gs" in ps.arms:
        for mc in glob:
            rows.append(_row(exp, arm="gs", mech=mc, T=1, m=N, pred=pred_full, yt=yt, sens=gs_full,
                             gen_labels=("full",), extra={"arm_nonprivate_mae": np_mae,
                                                          "arm_nonprivate_mse": np_mse}))

    # -------------------------------------------------------------- shard sweep
    betas = sorted({float(mc.beta) for mc in smooth})
    for T in tqdm(ps.shards, desc="shards", disable=not progress):
        t0 = time.perf_counter()
        parts = torch.arange(N).view(1, N) if T == 1 else partition(N, T, exp.seed)
        m = parts.shape[1]
        q = m / N
        preds = shard_predictions(exp, parts, x, y, xt)                   # [T, n]
        mean = preds.mean(0)
        own = {"arm_nonprivate_mae": float((mean - yt).abs().mean()),
               "arm_nonprivate_mse": float(((mean - yt) ** 2).mean())}
        rows.append({"arm": "pate_mean", "mechanism": "none", "regime": "none", "epsilon": math.nan,
                     "delta": math.nan, "shards": T, "shard_size": m,
                     "mae": own["arm_nonprivate_mae"], "mse": own["arm_nonprivate_mse"], **own})
        if "pate_r" in ps.arms:
            # a shard model's global sensitivity is the full model's (the range width, or the
            # trajectory ceiling, depend on the training settings only); one substitution moves
            # one shard's clipped prediction by <= GS, so the mean by GS/T
            for mc in glob:
                rows.append(_row(exp, arm="pate_r", mech=mc, T=T, m=m, pred=mean, yt=yt,
                                 sens=gs_full / T, gen_labels=(), extra=own))
        if need_agt:
            if T == 1 and full is not None:
                sc_c = ShardCertificates(full[1].view(1, -1), {b: full[0].smooth(b) for b in betas},
                                         [full[0]], int(full[0].k.numel()))
            else:
                sc_c = certify_shards(exp, parts, ps.staircase, betas, progress)
                drift = float((sc_c.preds - preds).abs().max())
                if drift > 1e-9:
                    log.warning("T=%d: vectorised and AGT nominal shard predictions differ by %.3g", T, drift)
            agt_mean = sc_c.preds.mean(0)
            if "pate_agtr" in ps.arms:
                for mc in smooth:
                    rows.append(_row(exp, arm="pate_agtr", mech=mc, T=T, m=m, pred=agt_mean, yt=yt,
                                     sens=sc_c.ss_max[float(mc.beta)] / T, gen_labels=(), extra=own))
            if "agtr_wor" in ps.arms:
                # the arm's non-private error: one shard's model, the shard uniform (its expectation)
                own_j = {"arm_nonprivate_mae": float((sc_c.preds - yt).abs().mean()),
                         "arm_nonprivate_mse": float(((sc_c.preds - yt) ** 2).mean())}
                for mc in smooth:
                    d = mc.delta_spent
                    try:
                        eb, db = base_budget_wor(epsilon=mc.epsilon, delta=d, q=q)
                    except ValueError as e:
                        log.info("agtr_wor T=%d %s eps=%g skipped: %s", T, mc.name, mc.epsilon, e)
                        continue
                    # the same release at (eps_b, delta_b), with its beta rule there
                    mb = type(mc).create(epsilon=eb, delta=db, beta=exp.privacy.beta)
                    rows.append(_wor_row(exp, mech=mb, T=T, m=m, preds=sc_c.preds, yt=yt,
                                         sens=torch.stack([st.smooth(mb.beta) for st in sc_c.staircases]),
                                         base=(mc.epsilon, d), extra=own_j))
        timing[T] = time.perf_counter() - t0
        log.info("T=%d (m=%d): %.1f s", T, m, timing[T])

    res = pd.DataFrame(rows)
    res.insert(0, "dataset", ds.name)
    res["n_train"], res["n_test"], res["n_draws"], res["seed"] = N, len(yt), exp.privacy.n_draws, exp.seed
    res["certificate"] = exp.certificate_name
    # the smooth arms' guarantee rests on the staircase proof (privacy/sensitivity.py)
    res["smoothness_proof"] = ~res["arm"].isin(["agtr", "pate_agtr", "agtr_wor"]) | bool(proof)
    res["nonprivate_mae"], res["nonprivate_mse"] = np_mae, np_mse
    res["excess_mae"], res["excess_mse"] = res["mae"] - np_mae, res["mse"] - np_mse
    sec = res["shards"].map(timing)
    res["seconds"] = sec if "seconds" not in res else res["seconds"].fillna(sec)
    res["best_T"] = False
    summary = summarise(res)
    for i in summary.get("row", []):
        res.loc[i, "best_T"] = True
    summary = summary.drop(columns=["row"]) if len(summary) else summary
    if len(summary):
        at1 = summary[np.isclose(summary.epsilon, 1.0)]
        if len(at1):
            at1 = at1.assign(spent=[spent(r, ds) for r in at1.to_dict("records")])
            log.info("at eps=1 (best T per arm):\n%s", at1[["arm", "mechanism", "regime", "best_T", "error", "excess",
                                                           "excess_vs_agtr", "gs_over_arm", "spent"]].to_string(index=False))
    return with_provenance({"results": res, "summary": summary}, ds, device=exp.device)


def summarise(res: pd.DataFrame) -> pd.DataFrame:
    """Each arm's best T per (mechanism, epsilon): lowest MAE under pure DP, lowest MSE under
    approximate DP; plus the full-data AGT-R and GS rows, with ratios to AGT-R and from GS."""
    if not len(res):
        return pd.DataFrame()
    noisy = res[res.arm != "pate_mean"].copy()
    noisy["metric"] = np.where(noisy.regime == "pure", "mae", "mse")
    noisy["error"] = np.where(noisy.regime == "pure", noisy.mae, noisy.mse)
    noisy["excess"] = np.where(noisy.regime == "pure", noisy.excess_mae, noisy.excess_mse)
    groups = noisy.groupby(["arm", "mechanism", "regime", "epsilon"], sort=False)
    best = noisy.loc[groups["error"].idxmin()]
    out = best[["arm", "mechanism", "regime", "epsilon", "delta", "metric", "shards", "shard_size",
                "error", "excess", "nonprivate_mae", "nonprivate_mse", "arm_nonprivate_mae",
                "arm_nonprivate_mse"]].rename(columns={"shards": "best_T"})
    # the best T is chosen among releases made at every T tried: what the summary reports is
    # their composition (basic: the sum of the budgets), not one release's budget
    cand = groups["error"].transform("size").loc[best.index].to_numpy()
    out["candidates"] = cand
    out["epsilon_end_to_end"] = cand * best["epsilon"].to_numpy()
    out["delta_end_to_end"] = cand * best["delta"].to_numpy()
    out["row"] = best.index
    ref = {(r.regime, r.epsilon): r for r in out[out.arm == "agtr"].itertuples()}
    gsr = {(r.regime, r.epsilon): r for r in out[out.arm == "gs"].itertuples()}
    out["excess_vs_agtr"] = [
        (r.excess / ref[(r.regime, r.epsilon)].excess) if (r.regime, r.epsilon) in ref
        and ref[(r.regime, r.epsilon)].excess > 0 else math.nan for r in out.itertuples()]
    out["gs_over_arm"] = [
        (gsr[(r.regime, r.epsilon)].error / r.error) if (r.regime, r.epsilon) in gsr else math.nan
        for r in out.itertuples()]
    order = {a: i for i, a in enumerate(("agtr", "pate_r", "pate_agtr", "agtr_wor", "gs"))}
    out = out.sort_values(["regime", "epsilon", "arm"], key=lambda s: s.map(order) if s.name == "arm" else s)
    out.insert(0, "dataset", res["dataset"].iloc[0])
    return out.reset_index(drop=True)
