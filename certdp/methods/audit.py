"""``certdp audit``: check a certificate against real retraining on neighbouring datasets.

For every audited radius k and substitution mode, R neighbouring datasets D' with d(D, D') = k
(k records substituted, same size) are trained with the *same* initialisation and batch plan as
the nominal run (all R at once: ``train`` takes x [R, N, d], theta [R, P]).  Per (k, mode):

* ``param_violations``: retrained parameters outside the envelope T_k (tolerance 1e-10);
* ``output_violations``: test predictions f_theta'(x) outside the certified output interval of
  T_k, i.e. |f_theta'(x) - f_theta(x)| above  max(hi_k(x) - f_theta(x), f_theta(x) - lo_k(x));
* ``staircase_violations`` (regression with a staircase): |f_theta'(x) - f_theta(x)| above the
  path bound sum_{j<k} A_bar(x, j) (a chain D = D_0, ..., D_k = D' of neighbours, each link
  bounded by the local sensitivity at distance j: the staircase value where j is a computed radius,
  else the width of the next computed envelope's output interval);
* tightness ratios: the largest observed change over the certified bound, for parameters
  (per coordinate, over max(hi - theta, theta - lo)) and outputs (per test point).  1 is tight;
  above 1 is a violation.

``audit.smoothness=R_s`` (regression, default 0 = off) searches adversarially for violations of
the *beta-smoothness* S(D') <= e^beta S(D) that the smooth releases need
(:func:`certdp.privacy.smoothness.search`): at each size n of ``audit.smoothness_n`` (the first n
training records; default 8, 30 and N when N <= 200) it recertifies R_s neighbouring datasets that
replace one of the most-used records by an extreme record (huge features of every sign pattern,
huge labels of both signs, bias-only records) and refines the worst ones; every two datasets that
differ at the same index are neighbours, so all their pairs are compared, for every test point
and for the betas of the configured smooth releases plus 0.001 and 0.01.  ``smoothness_ratio`` is
the largest max(S'/S, S/S') / e^beta found (<= 1 when smooth), ``worst_pair`` the two records
attaining it.  The proof in ``privacy/sensitivity.py`` covers every engine that declares
``nesting_monotone``; the search is how an engine outside it is shown not to be smooth (it found
the former adaptive-chord CROWN at 1.55 e^beta), not a certificate.

A bound that is not finite (or not computed) counts as a violation: it certifies nothing.

Modes: ``random`` substitutes k uniformly chosen records by random records (features uniform in
the training range, labels uniform in the label range / a random class); ``adversarial``
substitutes the k records that occur in the most batches by records that saturate the clipped
gradient at +gamma or -gamma in every coordinate (large features with a fixed sign pattern and an
extreme label), alternating the sign between retrains.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.certify import (Experiment, build_experiment, check_prediction_radii, envelopes, global_sensitivity,
                            nominal, prediction_staircase, with_provenance)
from certdp.errors import ConfigError
from certdp.privacy.smoothness import SMALL_BETAS, search
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings
from certdp.training import train

log = logging.getLogger("certdp")

TOL = 1e-10


def smoothness_sizes(exp: Experiment) -> list[int]:
    """Dataset sizes the smoothness search runs at (``audit.smoothness_n``; default 8, 30 and
    N when N <= 200): the first n records of the training set, the same training settings."""
    n = exp.n_train
    sizes = exp.settings.audit.smoothness_n
    if sizes is None:
        return sorted({m for m in (8, 30) if m <= n} | ({n} if n <= 200 else set())) or [n]
    if sizes[-1] > n:
        raise ConfigError("audit.smoothness_n", f"got {list(sizes)} (above N={n}); allowed: dataset sizes in 2..{n}")
    return list(sizes)


def smoothness_check(exp: Experiment, xt: torch.Tensor, betas, R: int, sizes, n_classes):
    """Rows of the adversarial beta-smoothness search (see the module docstring)."""
    bt = sorted(set(float(b) for b in betas) | set(SMALL_BETAS))
    rows, bad = [], False
    for n in sizes:
        sub = exp.on_data(exp.x[:n].clone(), exp.y[:n].clone())

        def staircase_of(X, Y, _sub=sub):
            e = _sub.on_data(X, Y)
            return prediction_staircase(e, envelopes(e), xt)[0]

        res = search(staircase_of, sub.x, sub.y, betas=bt, plan=sub.plan, loss=exp.model.loss.name,
                     n_classes=n_classes, budget=R, seed=exp.seed)
        pair = " vs ".join("original" if c is None else f"record {c.index} -> x={c.x.tolist()}, y={float(c.y):.4g}"
                           for c in res.pair)
        for b in bt:
            r = res.worst_ratio[b]
            viol = int(r > 1 + 1e-9)
            bad |= bool(viol)
            rows.append({"dataset": exp.dataset.name, "certificate": exp.certificate_name,
                         "k": 1, "mode": "smoothness-search", "n_audited": n, "repeats": res.evaluations,
                         "beta": b, "smoothness_violations": viol, "smoothness_ratio": r,
                         "worst_pair": pair if b == res.beta else "", "seed": exp.seed})
        log.info("audit smoothness N=%d (%d neighbours): worst max(S'/S, S/S') / e^beta %s; worst pair (beta %.3g, "
                 "test point %d): %s", n, res.evaluations,
                 ", ".join(f"{res.worst_ratio[b]:.4f} (beta {b:.3g})" for b in bt), res.beta, res.test_point, pair)
    return rows, bad


def neighbours(mode: str, k: int, R: int, x: torch.Tensor, y: torch.Tensor, plan: torch.Tensor,
               loss: str, n_classes: int, gen: torch.Generator):
    """R datasets [R, N, d] / [R, N] at substitution distance exactly k from (x, y)."""
    N, d = x.shape
    X = x.unsqueeze(0).repeat(R, 1, 1)
    Y = y.unsqueeze(0).repeat(R, 1)
    if mode == "random":
        idx = torch.argsort(torch.rand(R, N, generator=gen), dim=1)[:, :k]          # [R, k]
        lo, hi = x.min(0).values, x.max(0).values
        newx = lo + (hi - lo) * torch.rand(R, k, d, generator=gen, dtype=DTYPE)
        if loss == "mse":
            newy = y.min() + (y.max() - y.min()) * torch.rand(R, k, generator=gen, dtype=DTYPE)
        elif loss == "hinge":
            newy = torch.where(torch.rand(R, k, generator=gen) < 0.5, -1.0, 1.0).to(y.dtype)
        else:
            newy = torch.randint(0, n_classes, (R, k), generator=gen).to(y.dtype)
    else:
        counts = torch.bincount(plan.reshape(-1), minlength=N).to(DTYPE)
        # most frequent records first, ties broken at random (differently per retrain)
        key = counts.unsqueeze(0) + 0.5 * torch.rand(R, N, generator=gen, dtype=DTYPE)
        idx = torch.argsort(key, dim=1, descending=True)[:, :k]
        scale = 10.0 * (x.abs().max() + 1.0)
        sign = torch.where(torch.arange(R) % 2 == 0, 1.0, -1.0).to(DTYPE).view(R, 1, 1)
        pattern = torch.where(torch.rand(R, 1, d, generator=gen) < 0.5, -1.0, 1.0).to(DTYPE)
        newx = (scale * pattern).expand(R, k, d).clone()
        if loss == "mse":
            # residual f - y of sign `sign` and huge: gradient 2 (f - y) x~ saturates at
            # sign * pattern * gamma in every coordinate
            big = 1e3 * (y.abs().max() + x.abs().sum(-1).max() + 1.0)
            newy = (-sign.view(R, 1) * big).expand(R, k).clone()
        elif loss == "hinge":
            newy = sign.view(R, 1).expand(R, k).to(y.dtype).clone()
            newx = -newx.abs() * sign * pattern.abs()          # margin y f < 1 for small weights
        else:
            newy = (torch.arange(R) % n_classes).view(R, 1).expand(R, k).to(y.dtype).clone()
    rows = torch.arange(R).view(R, 1).expand(R, k)
    X[rows, idx] = newx.to(X.dtype)
    Y[rows, idx] = newy.to(Y.dtype)
    return X, Y


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    a = settings.audit
    exp = build_experiment(settings)
    ds = exp.dataset
    N = exp.n_train
    over = [k for k in a.radii if k > N]
    if over:
        raise ConfigError("audit.radii", f"got {list(a.radii)} ({over} above N={N}); allowed: radii in 1..{N}")
    if a.smoothness:
        try:
            if ds.task != "regression":
                raise ConfigError("dataset", f"{ds.task}, not regression; allowed: a regression dataset")
            check_prediction_radii(exp, global_sensitivity(exp))
        except ConfigError as e:
            raise ConfigError("audit.smoothness", f"needs a regression dataset with a staircase (here {e.key}: "
                                                  f"{e.message.split('; allowed: ')[0]}); allowed: linear, california "
                                                  "or csv with a staircase up to N or an output range, or "
                                                  "audit.smoothness=0") from None
    sizes = smoothness_sizes(exp) if a.smoothness else []
    betas = [float(m.beta) for m in exp.privacy.mechanisms() if m.kind == "smooth"]
    if a.smoothness and not betas:
        raise ConfigError("audit.smoothness", "no smooth release in privacy.releases to take beta from; allowed: "
                                                "privacy.releases with a smooth release, or audit.smoothness=0")
    R, radii, modes = a.repeats, list(a.radii), a.modes
    x, y = exp.x, exp.y
    xt = exp.xt[:a.n_test]
    theta0 = exp.model.init(exp.train.seed)
    nominal(exp, theta0)
    exp = dataclasses.replace(exp, ks=tuple(sorted(set(exp.ks) | set(radii))))
    plan = exp.plan
    t0 = time.perf_counter()
    env = envelopes(exp, progress=progress, check=False)
    t_agt = time.perf_counter() - t0
    kpos = {k: j for j, k in enumerate(env.k_values.tolist())}
    out_box = exp.engine.output_bounds(exp.model, env.box, xt)                  # [K, n, out]
    f_nom = exp.model.forward(env.nominal, xt)                                 # [n, out]
    # staircase path bounds for regression (needs a ceiling: GS or T_N)
    path = None
    if ds.task == "regression":
        try:
            path, _ = prediction_staircase(exp, env, xt, check=False)
        except ConfigError as e:
            if e.key not in ("privacy.global_sensitivity", "staircase"):
                raise
            log.info("audit: no staircase check (%s)", e)
    n_classes = ds.n_classes or 1
    rows, any_violation = [], False
    t1 = time.perf_counter()
    per_chunk = max(1, int(2e7 // max(plan.shape[1] * exp.model.n_params, 1)))
    for k in radii:
        j = kpos[k]
        lo, hi = env.lo[j], env.hi[j]
        # a bound that is not finite certifies nothing: every retrain counts as a violation
        p_unbounded = not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all())
        o_unbounded = not bool(torch.isfinite(out_box.lo[j]).all() and torch.isfinite(out_box.hi[j]).all())
        pb = torch.maximum(hi - env.nominal, env.nominal - lo)                 # [P]
        ob = torch.maximum(out_box.hi[j] - f_nom, f_nom - out_box.lo[j])        # [n, out]
        if path is not None:
            # sum_{i<k} of a bound on A^i: the staircase value where i is a computed radius (or 0),
            # else the width of the next computed envelope T_{r}, r >= i + 1, which contains
            # T_i and T_{i+1}
            cand = path.k.tolist()
            a_bar = path.a_bar                                                 # [n, C]
            kl = env.k_values.tolist()
            q_lo, q_hi = out_box.lo.squeeze(-1), out_box.hi.squeeze(-1)        # [K, n]
            if ds.output_range is not None:
                q_lo, q_hi = q_lo.clamp(*ds.output_range), q_hi.clamp(*ds.output_range)
            total = torch.zeros(a_bar.shape[0], dtype=a_bar.dtype)
            for i in range(k):
                if i in cand and path.source[cand.index(i)] == "computed":
                    total = total + a_bar[:, cand.index(i)]
                else:
                    r = next(jj for jj, kk in enumerate(kl) if kk >= i + 1)
                    total = total + (q_hi[r] - q_lo[r])
        for mode in modes:
            gen = generator_for(exp.seed, "audit", mode, k)
            X, Y = neighbours(mode, k, R, x, y, plan, exp.model.loss.name, n_classes, gen)
            thetas = []
            for s in range(0, R, per_chunk):
                th = train(exp.model, theta0.expand(min(per_chunk, R - s), -1), X[s:s + per_chunk],
                           Y[s:s + per_chunk], exp.train, plan=plan)
                thetas.append(th)
            th = torch.cat(thetas, 0)                                          # [R, P]
            outside = ((th < lo - TOL) | (th > hi + TOL)).any(-1)
            p_viol = R if p_unbounded else int(outside.sum())
            dp = (th - env.nominal).abs()
            p_ratio = float((dp / pb.clamp(min=1e-300)).where(pb > 0, (dp > TOL).to(dp.dtype) * float("inf")).max())
            f_new = exp.model.forward(th, xt)                                  # [R, n, out]
            o_outside = ((f_new < out_box.lo[j] - TOL) | (f_new > out_box.hi[j] + TOL)).flatten(1).any(-1)
            o_viol = R if o_unbounded else int(o_outside.sum())
            do = (f_new - f_nom).abs()
            o_ratio = float((do / ob.clamp(min=1e-300)).max())
            s_viol = None
            if path is not None:
                fc, fn = f_new.squeeze(-1), f_nom.squeeze(-1)
                rng = ds.output_range
                if rng is not None:
                    fc, fn = fc.clamp(*rng), fn.clamp(*rng)
                s_viol = R if not bool(torch.isfinite(total).all()) else int(((fc - fn).abs() > total + TOL).any(-1).sum())
            viol = p_viol + o_viol + (s_viol or 0)
            any_violation |= viol > 0
            rows.append({
                "dataset": ds.name, "certificate": exp.certificate_name, "k": k, "mode": mode, "repeats": R,
                "param_violations": p_viol, "output_violations": o_viol,
                "staircase_violations": s_viol if s_viol is not None else np.nan,
                "param_tightness": p_ratio, "output_tightness": o_ratio,
                "max_param_change": float(dp.max()), "max_output_change": float(do.max()),
                "certified_param_bound_max": float(pb.max()), "certified_output_bound_mean": float(ob.mean()),
                "seed": exp.seed,
            })
            log.info("audit k=%d %-11s violations: params %d, outputs %d%s; tightness params %.3f outputs %.3f",
                     k, mode, p_viol, o_viol, "" if s_viol is None else f", staircase {s_viol}", p_ratio, o_ratio)
    log.info("audit: AGT %.1f s, retraining %.1f s", t_agt, time.perf_counter() - t1)
    if a.smoothness:
        if path is None:
            raise ConfigError("audit.smoothness", "needs a regression dataset with a staircase; allowed: linear, "
                                                  "california or csv, or audit.smoothness=0")
        srows, s_bad = smoothness_check(exp, xt, betas, a.smoothness, sizes, n_classes)
        rows += srows
        any_violation |= s_bad
    out = with_provenance({"audit": pd.DataFrame(rows)}, exp.dataset, device=exp.device)
    if any_violation:
        log.error("audit: the certificate was violated")
        out["_exit_code"] = 1
    return out
