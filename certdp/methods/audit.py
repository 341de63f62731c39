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

Modes: ``random`` substitutes k uniformly chosen records by random records (features uniform in
the training range, labels uniform in the label range / a random class); ``adversarial``
substitutes the k records that occur in the most batches by records that saturate the clipped
gradient at +gamma or -gamma in every coordinate (large features with a fixed sign pattern and an
extreme label), alternating the sign between retrains.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.agt import run_agt
from certdp.bounds import get_certificate
from certdp.config import parse_choices
from certdp.errors import ConfigError
from certdp.methods.common import build_experiment, generator_for, tensors
from certdp.training import batch_plan, train

log = logging.getLogger("certdp")

MODES = ("random", "adversarial")
TOL = 1e-10


def smoothness_repeats(cfg: dict) -> int:
    v = (cfg.get("audit") or {}).get("smoothness", 0)
    try:
        r = int(v or 0)
    except (TypeError, ValueError):
        r = -1
    if r < 0:
        raise ConfigError("audit.smoothness", f"must be an integer >= 0 (neighbours to recertify; got {v!r})")
    return r


def smoothness_sizes(cfg: dict, n: int) -> list[int]:
    """Dataset sizes the smoothness search runs at (``audit.smoothness_n``; default 8, 30 and
    N when N <= 200): the first n records of the training set, the same training settings."""
    v = (cfg.get("audit") or {}).get("smoothness_n")
    if v is None:
        sizes = {m for m in (8, 30) if m <= n} | ({n} if n <= 200 else set())
        return sorted(sizes) or [n]
    vals = v if isinstance(v, (list, tuple)) else [v]
    try:
        sizes = sorted({int(m) for m in vals})
    except (TypeError, ValueError):
        sizes = []
    if not sizes or sizes[0] < 2 or sizes[-1] > n:
        raise ConfigError("audit.smoothness_n", f"must be dataset sizes in 2..N={n} (got {v!r})")
    return sizes


def smoothness_check(exp, x, y, xt, cert, betas, R: int, sizes, n_classes, progress=False):
    """Rows of the adversarial beta-smoothness search (see the module docstring)."""
    import dataclasses
    from certdp.methods.agtr import prediction_staircase
    from certdp.privacy.smoothness import SMALL_BETAS, search
    theta0 = exp.model.init(exp.train.seed)
    bt = sorted(set(float(b) for b in betas) | set(SMALL_BETAS))
    rows, bad = [], False
    for n in sizes:
        xn, yn = x[:n].clone(), y[:n].clone()
        plan = batch_plan(n, exp.train)
        ks = exp.staircase.radii(n)

        def staircase_of(X, Y, _plan=plan, _ks=ks):
            env = run_agt(exp.model, theta0, X, Y, exp.train, _ks, certificate=cert, plan=_plan, progress=False)
            e = dataclasses.replace(exp, dataset=dataclasses.replace(exp.dataset, x_train=X.numpy(), y_train=Y.numpy()))
            return prediction_staircase(e, env, xt, cert)[0]

        res = search(staircase_of, xn, yn, betas=bt, plan=plan, loss=exp.model.loss.name, n_classes=n_classes,
                     budget=R, seed=exp.seed)
        pair = " vs ".join("original" if c is None else f"record {c.index} -> x={c.x.tolist()}, y={float(c.y):.4g}"
                           for c in res.pair)
        for b in bt:
            r = res.worst_ratio[b]
            viol = int(r > 1 + 1e-9)
            bad |= bool(viol)
            rows.append({"dataset": exp.dataset.name, "certificate": exp.certificate.get("name", "ibp"),
                         "k": 1, "mode": "smoothness-search", "n_audited": n, "repeats": res.evaluations,
                         "beta": b, "smoothness_violations": viol, "smoothness_ratio": r,
                         "worst_pair": pair if b == res.beta else "", "seed": exp.seed})
        log.info("audit smoothness N=%d (%d neighbours): worst max(S'/S, S/S') / e^beta %s; worst pair (beta %.3g, "
                 "test point %d): %s", n, res.evaluations,
                 ", ".join(f"{res.worst_ratio[b]:.4f} (beta {b:.3g})" for b in bt), res.beta, res.test_point, pair)
    return rows, bad


def audit_settings(cfg: dict) -> tuple[int, list[int], tuple[str, ...], int]:
    a = dict(cfg.get("audit") or {})
    try:
        R = int(a.get("repeats", 200))
    except (TypeError, ValueError):
        raise ConfigError("audit.repeats", f"must be an integer >= 1 (got {a.get('repeats')!r})")
    if R < 1:
        raise ConfigError("audit.repeats", f"must be an integer >= 1 (got {R})")
    radii = a.get("radii") or [1, 2, 4, 8]
    if not isinstance(radii, (list, tuple)):
        radii = [radii]
    try:
        radii = sorted({int(k) for k in radii})
    except (TypeError, ValueError):
        raise ConfigError("audit.radii", f"must be a list of integers >= 1 (got {a.get('radii')!r})")
    if radii[0] < 1:
        raise ConfigError("audit.radii", f"must be integers >= 1 (got {radii})")
    modes = list(parse_choices(a, "audit.modes", MODES, MODES, what="mode"))
    n_test = int(a.get("n_test", 200))
    if n_test < 1:
        raise ConfigError("audit.n_test", f"must be >= 1 (got {n_test})")
    return R, radii, tuple(modes), n_test


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


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    exp = build_experiment(cfg)
    R, radii, modes, n_test = audit_settings(cfg)
    ds = exp.dataset
    x, y, xt, _ = tensors(ds)
    N = ds.n_train
    radii = [k for k in radii if k <= N]
    if not radii:
        raise ConfigError("audit.radii", f"every radius exceeds N={N}")
    xt = xt[:n_test]
    cert_cfg = {k: v for k, v in exp.certificate.items() if k != "name"}
    cert_name = exp.certificate.get("name", "ibp")
    cert = get_certificate(cert_name, **cert_cfg)
    try:
        stair_ks = exp.staircase.radii(N)
    except ConfigError:
        stair_ks = []
    ks = sorted(set(stair_ks) | set(radii))
    theta0 = exp.model.init(exp.train.seed)
    plan = batch_plan(N, exp.train)
    t0 = time.perf_counter()
    env = run_agt(exp.model, theta0, x, y, exp.train, ks, certificate=cert, plan=plan, progress=progress)
    t_agt = time.perf_counter() - t0
    kpos = {k: j for j, k in enumerate(env.k_values.tolist())}
    out_box = cert.output_bounds(exp.model, env.box, xt)                                   # [K, n, out]
    f_nom = exp.model.forward(env.nominal, xt)                                 # [n, out]
    # staircase path bounds for regression (needs a ceiling: GS or T_N)
    path = None
    if ds.task == "regression":
        try:
            from certdp.methods.agtr import prediction_staircase
            sc, _ = prediction_staircase(exp, env, xt, cert)
            path = sc
        except ConfigError as e:
            log.info("audit: no staircase check (%s)", e)
    n_classes = ds.n_classes or 1
    rows, any_violation = [], False
    t1 = time.perf_counter()
    per_chunk = max(1, int(2e7 // max(plan.shape[1] * exp.model.n_params, 1)))
    for k in radii:
        j = kpos[k]
        lo, hi = env.lo[j], env.hi[j]
        pb = torch.maximum(hi - env.nominal, env.nominal - lo)                 # [P]
        ob = torch.maximum(out_box.hi[j] - f_nom, f_nom - out_box.lo[j])        # [n, out]
        if path is not None:
            # sum_{i<k} of a bound on A^i: the staircase value where i is a computed radius (or 0),
            # else the width of the next computed envelope T_{r}, r >= i + 1, which contains
            # T_i and T_{i+1}
            cand = path.k.tolist()
            a = path.a_bar                                                     # [n, C]
            kl = env.k_values.tolist()
            q_lo, q_hi = out_box.lo.squeeze(-1), out_box.hi.squeeze(-1)        # [K, n]
            if ds.output_range is not None:
                q_lo, q_hi = q_lo.clamp(*ds.output_range), q_hi.clamp(*ds.output_range)
            total = torch.zeros(a.shape[0], dtype=a.dtype)
            for i in range(k):
                if i in cand and path.source[cand.index(i)] == "computed":
                    total = total + a[:, cand.index(i)]
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
            p_viol = int(((th < lo - TOL) | (th > hi + TOL)).any(-1).sum())
            dp = (th - env.nominal).abs()
            p_ratio = float((dp / pb.clamp(min=1e-300)).where(pb > 0, (dp > TOL).to(dp.dtype) * float("inf")).max())
            f_new = exp.model.forward(th, xt)                                  # [R, n, out]
            o_viol = int(((f_new < out_box.lo[j] - TOL) | (f_new > out_box.hi[j] + TOL)).flatten(1).any(-1).sum())
            do = (f_new - f_nom).abs()
            o_ratio = float((do / ob.clamp(min=1e-300)).max())
            s_viol = None
            if path is not None:
                fc, fn = f_new.squeeze(-1), f_nom.squeeze(-1)
                rng = ds.output_range
                if rng is not None:
                    fc, fn = fc.clamp(*rng), fn.clamp(*rng)
                s_viol = int(((fc - fn).abs() > total + TOL).any(-1).sum())
            viol = p_viol + o_viol + (s_viol or 0)
            any_violation |= viol > 0
            rows.append({
                "dataset": ds.name, "certificate": cert_name, "k": k, "mode": mode, "repeats": R,
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
    R_s = smoothness_repeats(cfg)
    if R_s:
        if path is None:
            raise ConfigError("audit.smoothness", "needs a regression dataset with a staircase (linear, california, csv)")
        from certdp.config import mechanisms_for
        betas = [float(m.beta) for m in mechanisms_for(exp.privacy) if getattr(m, "beta", None)]
        if not betas:
            raise ConfigError("audit.smoothness", "no smooth release in privacy.releases to take beta from")
        srows, s_bad = smoothness_check(exp, x, y, xt, cert, betas, R_s, smoothness_sizes(cfg, N), n_classes)
        rows += srows
        any_violation |= s_bad
    out = {"audit": pd.DataFrame(rows)}
    if any_violation:
        log.error("audit: the certificate was violated")
        out["_exit_code"] = 1
    return out
