"""Private-learning baselines of AGS: DP-SGD matched, DP-SGD optimised, PATE classification.

Used by ``certdp ags`` (beside its releases) and ``certdp dpsgd`` (alone); settings in
:class:`certdp.settings.commands.BaselineSettings`.

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
matched (basic)", composition ``basic_steps``) is the one the paper's blobs figure describes: the
same algorithm, every one of the T steps a separate mechanism with budget (eps/T, delta/T), basic
composition over all T steps (no use of the fixed plan's participations):
  * pure DP: Laplace(2 gamma P T / eps) per coordinate and step;
  * approx DP: Gaussian with the analytic sigma of (eps/T, delta/T) for l2 sensitivity 2 gamma sqrt(P).

DP-SGD *optimised* is the usual algorithm (:mod:`certdp.privacy.dpsgd_core`): Poisson sampling at
rate q, per-sample l2 clipping to C, Gaussian noise sigma C on the sum, divided by the expected
batch q N; sigma from a substitution-adjacent accountant (``dpsgd.optimised.accountants``: ``pld``,
``prv``, ``rdp``, see :mod:`certdp.privacy.dpsgd_core`).  (lr, C, epochs, batch)
(``dpsgd.optimised.grid``) are chosen on the public *selection* set: each grid point is trained on
the private data and scored on the selection set, as in the paper's tables ("baselines tuned on
the public sets").  Approx DP only.

Selection is charged.  The choice is a function of every candidate's private training, so what
is released is the composition of all candidates trained: ``epsilon`` is the paper's
per-candidate budget and ``epsilon_end_to_end`` / ``delta_end_to_end`` the basic composition
over the G candidates (G eps, G delta); an accountant after the first re-uses the first one's
choice and trains once more ((G + 1) eps).  ``selection=fixed`` trains the one configured
candidate (one value per grid key), and then both agree.  The same holds for the PATE baseline
below, whose candidates are every (teachers, queries) and each of its noisy labellings.

PATE classification (``pate`` section; the one PATE home, :mod:`certdp.certify.pate`, which the
``certdp pate`` command's prediction release shares):
T teachers trained (nominal algorithm, non-private) on disjoint shards of the private data
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
import torch

from certdp import DTYPE, checkpoint
from certdp.certify import Experiment, spent
from certdp.certify.pate import pate_classification
from certdp.metrics import accuracy
from certdp.privacy import noise
from certdp.privacy.dpsgd_core import noise_multiplier, poisson_schedule, train_dpsgd
from certdp.privacy.mechanisms import analytic_gaussian_sigma, gdp_mu
from certdp.seeding import generator_for
from certdp.training import TrainSettings, clipped_step

log = logging.getLogger("certdp")


# ---------------------------------------------------------------------------- calibration
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
    raise ValueError(f"unknown regime {regime!r}; allowed: pure, approx")


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
    with checkpoint.current().loop("dpsgd", total=settings.steps, detail=f"draws={n_draws}") as lp:
        if lp.state is not None:                  # resumed: the trajectories and the generator as saved
            theta = lp.state["theta"].to(theta.device)
            lp.generator(gen)

        def state():
            return {"theta": theta, "gen": gen}

        for t in range(lp.step, settings.steps):
            xb, yb = (x, y) if full else (x[plan[t]], y[plan[t]])
            z = (noise.laplace if regime == "pure" else noise.gaussian)(gen, theta.shape)
            theta = clipped_step(model, theta, xb, yb, settings, noise=scale * z)
            lp.tick(t + 1, state)
        lp.finish(state)
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


def dpsgd_optimised(exp: Experiment, *, epsilon: float, delta: float, accountant: str,
                    x, y, xt, yt, xs, ys, fixed: dict | None = None) -> dict:
    """Grid over (lr, clip, epochs, batch) of ``dpsgd.optimised.grid``; chosen by accuracy on
    the selection set (xs, ys).  ``fixed`` (lr, clip, epochs, batch_size) skips the search
    (other accountants re-use the choice)."""
    grid = exp.settings.baselines.grid
    lrs, clips, epochs, bss = list(grid.lr), list(grid.clip), list(grid.epochs), list(grid.batch_size)
    if fixed:
        lrs, clips, epochs, bss = [fixed["lr"]], [fixed["clip"]], [fixed["epochs"]], [fixed["batch_size"]]
    model = exp.model
    n = x.shape[0]
    theta0 = model.init(exp.train.seed)
    best, trained = None, 0
    for bs in bss:
        for ep in epochs:
            _, q, steps = poisson_schedule(batch_size=bs, epochs=ep, n=n)
            sigma = noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=q, steps=steps, accountant=accountant)
            for lr in lrs:
                for c in clips:
                    gen = generator_for(exp.seed, "dpsgd_opt", accountant, epsilon, bs, ep, lr, c)
                    th = train_dpsgd(model, theta0, x, y, lr=float(lr), clip=float(c), sigma=sigma,
                                     sample_rate=q, steps=steps, gen=gen)
                    trained += 1
                    sel = float(accuracy(model, th, xs, ys))
                    if best is None or sel > best["selection_accuracy"]:
                        best = {"selection_accuracy": sel, "accuracy": float(accuracy(model, th, xt, yt)), "sigma": sigma,
                                "hp": f"lr={lr} clip={c} epochs={ep} batch={bs}",
                                "fixed": {"lr": lr, "clip": c, "epochs": ep, "batch_size": bs}}
    best["trained"] = trained
    return best


# ---------------------------------------------------------------------------- rows
def end_to_end(*, epsilon: float, delta: float, candidates: int) -> dict:
    """The columns of a row's end-to-end guarantee: basic composition over the ``candidates``
    private releases that what the row reports depends on (1: no selection)."""
    return {"epsilon_end_to_end": candidates * epsilon, "delta_end_to_end": candidates * delta,
            "candidates": candidates}


def baseline_rows(exp: Experiment, arms, pv, *, plan=None) -> list[dict]:
    """Rows (arm x regime x epsilon) of the baselines ``arms`` at the budgets of ``pv``
    (``privacy``; its ``n_draws`` matched DP-SGD runs per budget)."""
    ds, model = exp.dataset, exp.model
    x, y, xt, yt = exp.x, exp.y, exp.xt, exp.yt
    if model.loss.name == "hinge":
        y, yt = y.to(DTYPE), yt.to(DTYPE)
    plan = exp.plan if plan is None else plan
    theta0 = model.init(exp.train.seed)
    pub = _public(exp)
    votes: dict = {}
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
                             "n_draws": pv.n_draws, **end_to_end(epsilon=eps, delta=delta, candidates=1),
                             "scale": matched_noise(regime=regime, epsilon=eps, delta=delta, clip=exp.train.clip,
                                                    n_params=model.n_params, compositions=c, basic=basic)})
            if "dpsgd_optimised" in arms and regime == "approx":
                if pub is None:
                    log.warning("DP-SGD optimised needs a public selection set; skipped for %s", ds.name)
                else:
                    chosen, searched = None, 0
                    for acc_name in exp.settings.baselines.accountants:
                        r = dpsgd_optimised(exp, epsilon=eps, delta=delta, accountant=acc_name, x=x, y=y,
                                            xt=xt, yt=yt, xs=pub[2], ys=pub[3], fixed=chosen)
                        # a re-used choice carries the cost of the search that made it (none for one candidate)
                        cost = r["trained"] + (searched if searched > 1 else 0)
                        if chosen is None:
                            chosen, searched = r["fixed"], r["trained"]
                        rows.append({**base, "arm": "DP-SGD optimised", "mechanism": "gaussian",
                                     "composition": acc_name, "accuracy_median": r["accuracy"],
                                     "accuracy_mean": r["accuracy"], "n_draws": 1, "scale": r["sigma"],
                                     "selection_accuracy": r["selection_accuracy"], "hyperparameters": r["hp"],
                                     **end_to_end(epsilon=eps, delta=delta, candidates=cost)})
            if "pate" in arms:
                if pub is None:
                    log.warning("PATE needs a public pool; skipped for %s", ds.name)
                else:
                    r = pate_classification(exp, regime=regime, epsilon=eps, delta=delta, x=x, y=y, xt=xt, yt=yt,
                                            pool=(pub[0], pub[1]), selection=(pub[2], pub[3]), votes_cache=votes)
                    if r is not None:
                        rows.append({**base, "arm": "PATE", "mechanism": "laplace" if regime == "pure" else "gaussian",
                                     "composition": "basic" if regime == "pure" else "gdp_exact",
                                     "accuracy_median": r["accuracy"], "accuracy_mean": r["accuracy_mean"], "n_draws": 5,
                                     "selection_accuracy": r["selection_accuracy"], "hyperparameters": r["hp"],
                                     **end_to_end(epsilon=eps, delta=delta,
                                                  candidates=r["trained"] if r["trained"] > r["draws"] else 1)})
            log.info("baselines eps=%g %s: %s", eps, regime,
                     ", ".join(f"{r['arm']}({r.get('composition')})={r['accuracy_median']:.3f} {spent(r, ds)}"
                               for r in rows if r["epsilon"] == eps and r["regime"] == regime))
    return rows
