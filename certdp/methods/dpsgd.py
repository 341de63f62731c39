"""Private-learning baselines for AGS: DP-SGD matched, DP-SGD optimised, PATE (classification).

DP-SGD *matched* runs the nominal algorithm of AGS (same initialisation, fixed batch plan, steps,
lr, element-wise clipping to [-gamma, gamma], contraction) and adds noise to every batch sum:

    theta <- lam theta - (lr/b) (sum_i clip(g_i) + noise).

Substituting one record changes a batch sum that contains it by at most 2 gamma per coordinate:
l1 sensitivity 2 gamma P, l2 sensitivity 2 gamma sqrt(P); sums of batches without it do not
change.  With the fixed plan a record is in c = max_i #{t: i in B_t} batches (c = T for full
batch), so only c mechanisms compose for any one neighbour pair.
  * pure DP: Laplace(2 gamma P / (eps/c)) per coordinate and step, basic composition over c;
  * approx DP: Gaussian; c exact compositions of a Gaussian mechanism with sensitivity Delta_2 and
    std sigma are (sqrt(c) Delta_2/sigma)-GDP (Dong, Roth & Su), so sigma = sqrt(c) Delta_2 / mu*
    with mu* the GDP parameter that is exactly (eps, delta)-DP (analytic Gaussian, Balle & Wang).
This is the *accounted* matched arm (``dpsgd_matched``, composition ``basic_participations`` /
``gdp_exact``).  The *basic-composition* matched arm (``dpsgd_matched_basic``, arm "DP-SGD
matched (basic)", composition ``basic_steps``) is the one the paper's blobs figure describes:
the same algorithm, every one of the T steps a separate mechanism with budget (eps/T, delta/T),
basic composition over all T steps (no use of the fixed plan's participations):
  * pure DP: Laplace(2 gamma P T / eps) per coordinate and step;
  * approx DP: Gaussian with the analytic sigma of (eps/T, delta/T) for l2 sensitivity 2 gamma sqrt(P).

DP-SGD *optimised* is the usual algorithm (:mod:`certdp.privacy.dpsgd_core`): Poisson sampling at
rate q, per-sample l2 clipping to C, Gaussian noise sigma C on the sum, divided by the expected
batch q N; sigma from Opacus's accountants (``prv`` and ``rdp``).  (lr, C, epochs, batch) are
chosen on the public *selection* set: each grid point is trained on the private data and scored
on the selection set, as in the paper's tables ("baselines tuned on the public sets"); like the
paper we do not charge the selection itself to the budget.  Approx DP only.

PATE: T teachers trained (nominal algorithm, non-private) on disjoint shards of the private data
vote on m points of the public pool; one record changes one teacher's vote: l1 sensitivity 2 and
l2 sensitivity sqrt(2) of the vote histogram.  Pure DP: Laplace(2m/eps) on each count (basic
composition over m queries); approx DP: Gaussian with sigma = sqrt(2m)/mu* (m exact Gaussian
compositions).  The student (nominal algorithm, full batch) trains on the m noisy labels; (T, m)
are chosen on the public selection set.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.errors import ConfigError
from certdp.methods.common import Experiment, build_experiment, generator_for, tensors
from certdp.metrics import accuracy, majority_rate
from certdp.privacy.dpsgd_core import dpsgd_poisson, noise_multiplier, poisson_schedule
from certdp.privacy.mechanisms import analytic_gaussian_sigma
from certdp.training import TrainSettings, batch_plan, train

log = logging.getLogger("certdp")


BASELINES = ("dpsgd_matched", "dpsgd_matched_basic", "dpsgd_optimised", "pate")


# ---------------------------------------------------------------------------- calibration
def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu for which mu-GDP is exactly (epsilon, delta)-DP (1/sigma of the analytic Gaussian)."""
    return 1.0 / analytic_gaussian_sigma(epsilon, delta, 1.0)


def participations(plan: torch.Tensor, n: int) -> int:
    """Largest number of batches any one index is in (the compositions a neighbour pays)."""
    cnt = torch.zeros(n, dtype=torch.long)
    cnt.index_add_(0, plan.reshape(-1), torch.ones(plan.numel(), dtype=torch.long))
    return int(cnt.max())


def matched_noise(*, regime: str, epsilon: float, delta: float, clip: float, n_params: int,
                  compositions: int, basic: bool = False) -> float:
    """Per-coordinate noise scale on the batch sum (Laplace b or Gaussian sigma), see module doc.
    ``basic``: every one of ``compositions`` steps gets (eps/T, delta/T) (basic composition)."""
    if regime == "pure":
        return 2 * clip * n_params * compositions / epsilon
    if regime == "approx":
        if basic:
            return analytic_gaussian_sigma(epsilon / compositions, delta / compositions, 2 * clip * math.sqrt(n_params))
        return math.sqrt(compositions) * 2 * clip * math.sqrt(n_params) / gdp_mu(epsilon, delta)
    raise ConfigError("regime", f"unknown '{regime}'; allowed: pure, approx")


def dpsgd_matched(model, theta0, x, y, settings: TrainSettings, plan, *, regime: str, epsilon: float,
                  delta: float, n_draws: int, gen: torch.Generator, basic: bool = False) -> torch.Tensor:
    """n_draws independent matched DP-SGD runs (vectorised over draws): [n_draws, P].
    ``basic``: basic composition over all T steps instead of the accounted participations."""
    n = x.shape[0]
    b = plan.shape[1]
    c = settings.steps if basic else participations(plan, n)
    scale = matched_noise(regime=regime, epsilon=epsilon, delta=delta, clip=settings.clip,
                          n_params=model.n_params, compositions=c, basic=basic)
    theta = theta0.to(DTYPE).expand(n_draws, -1).clone()
    full = b == n
    for t in range(settings.steps):
        xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
        g = model.per_sample_grads(theta, xb, yb).clamp(-settings.clip, settings.clip).sum(-2)
        if regime == "pure":
            u = torch.rand(theta.shape, generator=gen, dtype=DTYPE) - 0.5
            z = -torch.sign(u) * torch.log1p(-2 * u.abs())
        else:
            z = torch.randn(theta.shape, generator=gen, dtype=DTYPE)
        theta = settings.contraction * theta - (settings.lr / b) * (g + scale * z)
    return theta


def _public(exp: Experiment):
    """(pool x, pool y, selection x, selection y) from the dataset's public set (first / second part)."""
    ds = exp.dataset
    if ds.x_public is None or len(ds.x_public) < 4:
        return None
    xp = torch.as_tensor(ds.x_public, dtype=DTYPE)
    yp = torch.as_tensor(ds.y_public, dtype=DTYPE) if ds.task == "binary" and exp.model.loss.name == "hinge" else torch.as_tensor(ds.y_public)
    split = (ds.info or {}).get("public_split")
    if isinstance(split, dict) and "pate_pool" in split:
        h = int(split["pate_pool"][1])
    elif isinstance(split, (list, tuple)):
        h = int(split[0])
    else:
        h = len(xp) // 2
    return xp[:h], yp[:h], xp[h:], yp[h:]


def dpsgd_optimised(exp: Experiment, cfg: dict, *, epsilon: float, delta: float, accountant: str,
                    x, y, xt, yt, xs, ys, fixed: dict | None = None) -> dict:
    """Grid over (lr, clip, epochs, batch); chosen by accuracy on the selection set (xs, ys).
    ``fixed`` (lr, clip, epochs, batch_size) skips the search (other accountants re-use the choice)."""
    grid = dict(cfg.get("grid") or {})
    lrs = grid.get("lr", [0.1, 0.5, 2.0])
    clips = grid.get("clip", [0.1, 1.0])
    epochs = grid.get("epochs", [5, 20])
    bss = grid.get("batch_size", [64, 256])
    if fixed:
        lrs, clips, epochs, bss = [fixed["lr"]], [fixed["clip"]], [fixed["epochs"]], [fixed["batch_size"]]
    model = exp.model
    n = x.shape[0]
    theta0 = model.init(exp.train.seed)
    best = None
    for bs in bss:
        for ep in epochs:
            _, q, steps = poisson_schedule(batch_size=bs, epochs=ep, n=n)
            sigma = noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=q, steps=steps, accountant=accountant)
            for lr in lrs:
                for c in clips:
                    gen = generator_for(exp.seed, "dpsgd_opt", accountant, epsilon, bs, ep, lr, c)
                    th = dpsgd_poisson(model, theta0, x, y, lr=float(lr), clip=float(c), sigma=sigma,
                                       sample_rate=q, steps=steps, gen=gen)
                    sel = float(accuracy(model, th, xs, ys))
                    if best is None or sel > best["selection_accuracy"]:
                        best = {"selection_accuracy": sel, "accuracy": float(accuracy(model, th, xt, yt)), "sigma": sigma,
                                "hp": f"lr={lr} clip={c} epochs={ep} batch={bs}",
                                "fixed": {"lr": lr, "clip": c, "epochs": ep, "batch_size": bs}}
    return best


# ---------------------------------------------------------------------------- PATE
_VOTES: dict = {}     # teacher votes on the pool, per (dataset, seed, N, T, training): independent of eps


def pate_labels(votes: torch.Tensor, *, regime: str, epsilon: float, delta: float, gen) -> torch.Tensor:
    """Noisy argmax of vote histograms [m, C] answered with total budget (epsilon, delta)."""
    m = votes.shape[0]
    if regime == "pure":
        u = torch.rand(votes.shape, generator=gen, dtype=DTYPE) - 0.5
        noise = (2 * m / epsilon) * (-torch.sign(u) * torch.log1p(-2 * u.abs()))
    else:
        sigma = math.sqrt(2 * m) / gdp_mu(epsilon, delta)
        noise = sigma * torch.randn(votes.shape, generator=gen, dtype=DTYPE)
    return (votes + noise).argmax(-1)


def pate(exp: Experiment, cfg: dict, *, regime: str, epsilon: float, delta: float, x, y, xt, yt,
         pool, selection, n_draws: int = 5) -> dict:
    model = exp.model
    xq, _ = pool
    xs, ys = selection
    n = x.shape[0]
    binary = model.loss.name == "hinge"
    C = 2 if binary else model.widths[-1]
    best = None
    perm = torch.as_tensor(np.random.default_rng(exp.seed + 17).permutation(n))
    st = TrainSettings(steps=exp.train.steps, lr=exp.train.lr, clip=exp.train.clip, batch_size=None,
                       contraction=exp.train.contraction, seed=exp.train.seed)
    st_student = TrainSettings(steps=min(exp.train.steps, int(cfg.get("student_steps", 300))), lr=exp.train.lr,
                               clip=exp.train.clip, batch_size=None, contraction=exp.train.contraction,
                               seed=exp.train.seed)
    for T in cfg.get("teachers", [5, 10, 25, 50]):
        T = int(T)
        if T < 1 or n // T < 2:
            continue
        key = (exp.dataset.name, exp.seed, n, T, exp.train)
        if key not in _VOTES:
            size = n // T
            shards = perm[: T * size].view(T, size)
            th0 = model.init(exp.train.seed).expand(T, -1)
            teachers = train(model, th0, x[shards], y[shards], st)      # [T, P], non-private
            pred = model.classify(teachers, xq)                          # [T, m_pool]
            cls = ((pred + 1) // 2).long() if binary else pred.long()
            _VOTES[key] = torch.nn.functional.one_hot(cls, C).sum(0).to(DTYPE)   # [m_pool, C]
        votes = _VOTES[key]
        for m in cfg.get("queries", [50, 200, 1000]):
            m = min(int(m), votes.shape[0])
            accs_s, accs_t = [], []
            for d in range(n_draws):
                gen = generator_for(exp.seed, "pate", regime, epsilon, T, m, d)
                lab = pate_labels(votes[:m], regime=regime, epsilon=epsilon, delta=delta, gen=gen)
                yl = (2 * lab - 1).to(DTYPE) if binary else lab
                stu = train(model, model.init(exp.train.seed), xq[:m], yl, st_student)
                accs_s.append(float(accuracy(model, stu, xs, ys)))
                accs_t.append(float(accuracy(model, stu, xt, yt)))
            s = float(np.median(accs_s))
            if best is None or s > best["selection_accuracy"]:
                best = {"selection_accuracy": s, "accuracy": float(np.median(accs_t)), "hp": f"teachers={T} queries={m}",
                        "accuracy_mean": float(np.mean(accs_t))}
    return best


# ---------------------------------------------------------------------------- rows
def baseline_rows(exp: Experiment, arms, pv, *, theta_np=None, plan=None) -> list[dict]:
    """Rows (arm x regime x epsilon) of the baselines, for ``certdp ags`` and ``certdp dpsgd``."""
    ds, model = exp.dataset, exp.model
    x, y, xt, yt = tensors(ds)
    if model.loss.name == "hinge":
        y, yt = y.to(DTYPE), yt.to(DTYPE)
    plan = batch_plan(ds.n_train, exp.train) if plan is None else plan
    theta0 = model.init(exp.train.seed)
    pub = _public(exp)
    raw = getattr(exp, "_raw", None) or {}
    rows = []
    regimes = ("pure", "approx")
    for eps in pv.epsilons:
        for regime in regimes:
            delta = pv.delta if regime == "approx" else 0.0
            base = {"epsilon": eps, "delta": delta, "regime": regime, "n_releases": 1}
            for key, arm, basic in (("dpsgd_matched", "DP-SGD matched", False),
                                    ("dpsgd_matched_basic", "DP-SGD matched (basic)", True)):
                if key not in arms:
                    continue
                gen = generator_for(exp.seed, key, regime, eps)
                th = dpsgd_matched(model, theta0, x, y, exp.train, plan, regime=regime, epsilon=eps, delta=delta,
                                   n_draws=pv.n_draws, gen=gen, basic=basic)
                acc = accuracy(model, th, xt, yt).numpy()
                comp = "basic_steps" if basic else ("basic_participations" if regime == "pure" else "gdp_exact")
                c = exp.train.steps if basic else participations(plan, ds.n_train)
                rows.append({**base, "arm": arm, "mechanism": "laplace" if regime == "pure" else "gaussian",
                             "composition": comp,
                             "accuracy_median": float(np.median(acc)), "accuracy_mean": float(acc.mean()),
                             "accuracy_q25": float(np.quantile(acc, 0.25)), "accuracy_q75": float(np.quantile(acc, 0.75)),
                             "n_draws": pv.n_draws,
                             "scale": matched_noise(regime=regime, epsilon=eps, delta=delta, clip=exp.train.clip,
                                                    n_params=model.n_params, compositions=c, basic=basic)})
            if "dpsgd_optimised" in arms and regime == "approx":
                if pub is None:
                    log.warning("DP-SGD optimised needs a public selection set; skipped for %s", ds.name)
                else:
                    ocfg = (exp_cfg(exp).get("dpsgd") or {}).get("optimised") or {}
                    chosen = None
                    for acc_name in ocfg.get("accountants", ["prv", "rdp"]):
                        r = dpsgd_optimised(exp, ocfg, epsilon=eps, delta=delta, accountant=acc_name, x=x, y=y,
                                            xt=xt, yt=yt, xs=pub[2], ys=pub[3], fixed=chosen)
                        chosen = chosen or r["fixed"]
                        rows.append({**base, "arm": "DP-SGD optimised", "mechanism": "gaussian",
                                     "composition": acc_name, "accuracy_median": r["accuracy"],
                                     "accuracy_mean": r["accuracy"], "n_draws": 1, "scale": r["sigma"],
                                     "selection_accuracy": r["selection_accuracy"], "hyperparameters": r["hp"]})
            if "pate" in arms:
                if pub is None:
                    log.warning("PATE needs a public pool; skipped for %s", ds.name)
                else:
                    pcfg = exp_cfg(exp).get("pate") or {}
                    r = pate(exp, pcfg, regime=regime, epsilon=eps, delta=delta, x=x, y=y, xt=xt, yt=yt,
                             pool=(pub[0], pub[1]), selection=(pub[2], pub[3]))
                    if r is not None:
                        rows.append({**base, "arm": "PATE", "mechanism": "laplace" if regime == "pure" else "gaussian",
                                     "composition": "basic" if regime == "pure" else "gdp_exact",
                                     "accuracy_median": r["accuracy"], "accuracy_mean": r["accuracy_mean"], "n_draws": 5,
                                     "selection_accuracy": r["selection_accuracy"], "hyperparameters": r["hp"]})
            log.info("baselines eps=%g %s: %s", eps, regime,
                     ", ".join(f"{r['arm']}({r.get('composition')})={r['accuracy_median']:.3f}"
                               for r in rows if r["epsilon"] == eps and r["regime"] == regime))
    return rows


_RAW_CFG: dict = {}


def exp_cfg(exp: Experiment) -> dict:
    """The raw config sections (dpsgd, pate) of the running command."""
    return _RAW_CFG


def set_raw_config(cfg: dict) -> None:
    _RAW_CFG.clear()
    _RAW_CFG.update(cfg or {})


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    """``certdp dpsgd``: the baselines alone (DP-SGD matched and optimised, PATE)."""
    from certdp.methods.ags import ags_privacy_settings
    set_raw_config(cfg)
    exp = build_experiment(cfg, privacy_parser=ags_privacy_settings)
    if exp.dataset.task == "regression":
        raise ConfigError("dataset", f"certdp dpsgd evaluates classification accuracy; '{exp.dataset.name}' is a regression task")
    arms = tuple((cfg.get("dpsgd") or {}).get("arms") or ("dpsgd_matched", "dpsgd_optimised", "pate"))
    for a in arms:
        if a not in BASELINES:
            raise ConfigError("dpsgd.arms", f"unknown '{a}'; allowed: {', '.join(BASELINES)}")
    x, y, xt, yt = tensors(exp.dataset)
    if exp.model.loss.name == "hinge":
        y, yt = y.to(DTYPE), yt.to(DTYPE)
    th = train(exp.model, exp.model.init(exp.train.seed), x, y, exp.train)
    common = {"dataset": exp.dataset.name, "nonprivate_accuracy": float(accuracy(exp.model, th, xt, yt)),
              "majority_rate": majority_rate(yt), "seed": exp.seed}
    rows = [{**common, **r} for r in baseline_rows(exp, arms, exp.privacy)]
    return {"results": pd.DataFrame(rows)}
