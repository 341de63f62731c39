"""AGT-R: private prediction for regression from AGT envelopes (paper Section 3, Algorithm 1).

1. Train nominally and certify envelopes T_k for every radius in the staircase (``agt``).
2. Bound each test prediction over every T_k, clip to the output range (the released query is
   the clipped prediction, whose global sensitivity is the range width), and build the
   index-discounted staircase with the GS cap (``privacy.sensitivity``: a beta-smooth upper
   bound on the local sensitivity when the engine's envelopes nest, ``privacy.smoothness``).
3. For each release and epsilon: beta from the mechanism's rule, SS^beta per test point, noise
   scale, ``n_draws`` noisy releases per point (clipped), MAE and MSE.  The global-sensitivity
   arms (Laplace / Gaussian) use the same clipped query.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.agt import Envelopes, run_agt
from certdp.bounds import get_certificate
from certdp.bounds.base import Certificate
from certdp.bounds.interval import Interval
from certdp.config import mechanisms_for
from certdp.methods.common import (Experiment, build_experiment, generator_for, global_sensitivity,
                                   release_errors, tensors)
from certdp.privacy.sensitivity import DISCOUNT_SLACK, Staircase, staircase

log = logging.getLogger("certdp")

REFERENCE_BETA = 0.5   # the beta of the certificate figures (pure DP release at eps = 1)


def certify(exp: Experiment, progress: bool = True):
    """Nominal parameters, envelopes, and the per-test-point staircase."""
    x, y, xt, yt = tensors(exp.dataset)
    cert_cfg = {k: v for k, v in exp.certificate.items() if k != "name"}
    cert = get_certificate(exp.certificate.get("name", "ibp"), **cert_cfg)
    ks = exp.staircase.radii(exp.dataset.n_train)
    theta0 = exp.model.init(exp.train.seed)
    t0 = time.perf_counter()
    env = run_agt(exp.model, theta0, x, y, exp.train, ks, certificate=cert, progress=progress)
    t_agt = time.perf_counter() - t0
    sc, pred = prediction_staircase(exp, env, xt, cert)
    return env, sc, pred, {"agt_seconds": t_agt, "radii": len(ks), "k_max": ks[-1]}


def prediction_staircase(exp: Experiment, env: Envelopes, xt: torch.Tensor, cert: Certificate):
    bound = cert.output_bounds
    out = bound(exp.model, env.box, xt)                      # [K, n, 1]
    # The released prediction is the bound of the same (inclusion-monotone) forward pass over the
    # nominal point box, so that it lies in the query bounds of every box containing the nominal
    # (the smoothness proof's T_0, privacy/sensitivity.py); it equals model.forward up to rounding.
    p0 = bound(exp.model, Interval(env.nominal.unsqueeze(0), env.nominal.unsqueeze(0)), xt)
    p_lo, p_hi = p0.lo[0], p0.hi[0]                          # [n, 1]
    rng = exp.dataset.output_range
    lo, hi = out.lo, out.hi
    if rng is not None:
        lo, hi, p_lo, p_hi = lo.clamp(*rng), hi.clamp(*rng), p_lo.clamp(*rng), p_hi.clamp(*rng)
    gs = global_sensitivity(exp, xt)
    sc = staircase(lo, hi, (p_lo, p_hi), env.k_values, n_total=exp.dataset.n_train, global_sensitivity=gs)
    return sc, p_lo.squeeze(-1)


def certificate_frame(exp: Experiment, sc: Staircase, betas) -> pd.DataFrame:
    a = sc.a_bar
    rows = []
    for beta in betas:
        # the discount of Staircase.smooth: e^{-beta phi_j}, phi_j the index of the radius
        w = torch.exp(-max(beta - DISCOUNT_SLACK, 0.0) * sc.phi.to(DTYPE))
        contrib = a * w
        arg = contrib.mean(0).argmax().item()
        ss = contrib.amax(-1)
        for j, k in enumerate(sc.k.tolist()):
            col = a[:, j]
            rows.append({
                "dataset": exp.dataset.name, "certificate": exp.certificate.get("name", "ibp"),
                "k": k, "phi": int(sc.phi[j]), "source": sc.source[j], "a_bar_mean": float(col.mean()),
                "a_bar_median": float(col.median()), "a_bar_max": float(col.max()), "beta": beta,
                "contribution_mean": float(contrib[:, j].mean()),
                "contribution_median": float(contrib[:, j].median()),
                "is_max": j == arg, "ss_mean": float(ss.mean()),
            })
    return pd.DataFrame(rows)


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    exp = build_experiment(cfg)
    ds = exp.dataset
    proof = True
    if any(m.name in ("cauchy", "cauchy6", "laplace") for m in mechanisms_for(exp.privacy)):
        from certdp.privacy.smoothness import release_proof, smoothness_policy
        cert_cfg = {k: v for k, v in exp.certificate.items() if k != "name"}
        proof = release_proof(get_certificate(exp.certificate.get("name", "ibp"), **cert_cfg), smoothness_policy(cfg))
    log.info("AGT-R on %s: N=%d train, %d test, model %s (P=%d), %d steps, certificate %s",
             ds.name, ds.n_train, len(ds.y_test), exp.model.widths, exp.model.n_params,
             exp.train.steps, exp.certificate.get("name", "ibp"))
    env, sc, pred, timing = certify(exp, progress=progress)
    _, _, xt, yt = tensors(ds)
    np_mae = float((pred - yt).abs().mean())
    np_mse = float(((pred - yt) ** 2).mean())
    log.info("non-private test MAE %.5f  MSE %.5f  (AGT %.1f s over %d radii)", np_mae, np_mse,
             timing["agt_seconds"], timing["radii"])
    gs = global_sensitivity(exp, xt)
    rows, betas = [], {REFERENCE_BETA}
    for mech in mechanisms_for(exp.privacy):
        smooth = mech.name in ("cauchy", "cauchy6", "laplace")
        if smooth:
            ss = sc.smooth(mech.beta)
            betas.add(float(mech.beta))
        else:
            if gs is None:
                log.warning("skipping %s: no global sensitivity", mech.name)
                continue
            ss = gs
        scale = mech.scale(ss)
        gen = generator_for(exp.seed, mech.name, mech.epsilon)
        mae, mse = release_errors(pred, yt, scale, mech, exp.privacy.n_draws, gen, ds.output_range)
        rows.append({
            "dataset": ds.name, "arm": "agtr" if smooth else "gs", "mechanism": mech.name,
            "regime": mech.regime, "epsilon": mech.epsilon,
            "delta": getattr(mech, "delta", 0.0) if mech.regime == "approx" else 0.0,
            "beta": float(mech.beta), "n_train": ds.n_train, "n_test": len(yt),
            "n_draws": exp.privacy.n_draws, "mae": mae, "mse": mse,
            "nonprivate_mae": np_mae, "nonprivate_mse": np_mse,
            "ss_mean": float(ss.mean()), "ss_median": float(ss.median()),
            "scale_mean": float(scale.mean()), "certificate": exp.certificate.get("name", "ibp"),
            "frequency": exp.certificate.get("frequency"), "batch_size": exp.train.batch_size or ds.n_train,
            "k_max": timing["k_max"], "seed": exp.seed,
            "smoothness_proof": bool(proof) if smooth else True,
        })
    results = pd.DataFrame(rows)
    cert = certificate_frame(exp, sc, sorted(betas))
    summary = results[results.epsilon == 1.0][["arm", "mechanism", "regime", "mae", "mse", "ss_mean"]] if len(results) else results
    if len(summary):
        log.info("at eps=1:\n%s", summary.to_string(index=False))
    return {"results": results, "certificate": cert}


def run_certify(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Envelopes and staircase only (``certdp certify``)."""
    exp = build_experiment(cfg)
    env, sc, pred, timing = certify(exp, progress=progress)
    ks = env.k_values.tolist()
    w = env.widths()
    env_rows = [{"dataset": exp.dataset.name, "k": k, "width_max": float(w[j].max()),
                 "width_mean": float(w[j].mean()), "width_l1": float(w[j].sum())} for j, k in enumerate(ks)]
    log.info("certified %d radii in %.1f s", len(ks), timing["agt_seconds"])
    betas = sorted({REFERENCE_BETA} | ({exp.privacy.beta} if exp.privacy.beta else set()))
    return {"certificate": certificate_frame(exp, sc, betas), "envelopes": pd.DataFrame(env_rows)}
