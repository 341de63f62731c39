"""The one home of PATE (Papernot et al. 2017): disjoint shards of the private records, the
"teachers" trained on them, and the noisy aggregation of their classification votes.

Two uses: ``certdp pate`` (:mod:`certdp.methods.pate`: PATE-R / PATE-AGT-R, the mean of the
shards' clipped predictions released with global- or smooth-sensitivity noise: the regression
aggregation, :func:`shard_predictions`, :func:`certify_shards`, :func:`wor_errors`, lives here) and the PATE
classification baseline of ``certdp ags`` / ``certdp dpsgd`` (:func:`pate_classification`, noisy
argmax of the teachers' votes on public points; the guarantee in certdp/baselines.py).

The shards are cut from a permutation drawn from the seed before any record is read, so they are
data-independent: one substituted record lies in exactly one shard and changes one teacher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from certdp import DTYPE
from certdp.certify.core import draw_errors, envelopes, prediction_staircase
from certdp.certify.experiment import Experiment, require_finite
from certdp.metrics import accuracy
from certdp.models import ModelSpec
from certdp.privacy import noise
from certdp.privacy.mechanisms import gdp_mu
from certdp.privacy.sensitivity import clip_to_range
from certdp.seeding import generator_for
from certdp.settings.training import StaircaseSettings
from certdp.training import TrainSettings, train


def blocks(perm: torch.Tensor, shards: int) -> torch.Tensor:
    """Index shards [T, m], m = len(perm) // T: the first T*m entries of ``perm`` cut into T blocks
    (the rest are left out)."""
    m = len(perm) // shards
    return perm[: shards * m].view(shards, m)


def partition(n: int, shards: int, seed: int) -> torch.Tensor:
    """Index shards [T, m], m = n // T: a permutation drawn from the seed, cut into T blocks
    (records n - T*m onwards in that order are left out).  Data-independent by construction."""
    if not 1 <= shards <= n:
        raise ValueError(f"shards must be in [1, {n}] (got {shards})")
    return blocks(torch.randperm(n, generator=generator_for(seed, "pate-partition", shards)), shards)


def train_teachers(model: ModelSpec, theta0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, parts: torch.Tensor,
                   settings: TrainSettings, *, resumable: str | None = None) -> torch.Tensor:
    """The T shard models [T, P] ("teachers"), trained non-privately by the nominal algorithm in one
    vectorised call (x [T, m, d]), every one from the same data-independent ``theta0`` [P];
    ``resumable`` names the checkpointed loop (:mod:`certdp.checkpoint`)."""
    return train(model, theta0.expand(parts.shape[0], -1), x[parts], y[parts], settings, resumable=resumable)


def pate_labels(votes: torch.Tensor, *, regime: str, epsilon: float, delta: float, gen) -> torch.Tensor:
    """Noisy argmax of vote histograms [m, C] answered with total budget (epsilon, delta)."""
    m = votes.shape[0]
    if regime == "pure":
        eta = (2 * m / epsilon) * noise.laplace(gen, votes.shape)
    else:
        sigma = math.sqrt(2 * m) / gdp_mu(epsilon, delta)
        eta = sigma * noise.gaussian(gen, votes.shape)
    return (votes + eta).argmax(-1)


def pate_classification(exp: Experiment, *, regime: str, epsilon: float, delta: float, x, y, xt, yt,
                        pool, selection, votes_cache: dict, n_draws: int = 5) -> dict | None:
    """The PATE classification baseline at (epsilon, delta): for every (teachers T, queries m)
    of the ``pate`` section, ``n_draws`` noisy labellings train students; the (T, m) with the
    best median selection accuracy is kept.  ``votes_cache`` holds the teachers' votes per T
    (they do not depend on the budget)."""
    cfg = exp.settings.baselines
    model = exp.model
    xq, _ = pool
    xs, ys = selection
    n = x.shape[0]
    binary = model.loss.name == "hinge"
    C = 2 if binary else model.widths[-1]
    best, released = None, 0
    perm = torch.as_tensor(np.random.default_rng(exp.seed + 17).permutation(n))
    teacher_train = TrainSettings(steps=exp.train.steps, lr=exp.train.lr, clip=exp.train.clip, batch_size=None,
                       contraction=exp.train.contraction, seed=exp.train.seed)
    st_student = TrainSettings(steps=min(exp.train.steps, cfg.student_steps), lr=exp.train.lr,
                               clip=exp.train.clip, batch_size=None, contraction=exp.train.contraction,
                               seed=exp.train.seed)
    for T in cfg.teachers:
        if n // T < 2:
            continue
        if T not in votes_cache:
            teachers = train_teachers(model, model.init(exp.train.seed), x, y, blocks(perm, T), teacher_train,
                                      resumable="pate_teachers")                          # non-private
            pred = model.classify(teachers, xq)                          # [T, m_pool]
            cls = ((pred + 1) // 2).long() if binary else pred.long()
            votes_cache[T] = torch.nn.functional.one_hot(cls, C).sum(0).to(DTYPE)   # [m_pool, C]
        votes = votes_cache[T]
        for m in cfg.queries:
            m = min(m, votes.shape[0])
            accs_s, accs_t = [], []
            for d in range(n_draws):
                gen = generator_for(exp.seed, "pate", regime, epsilon, T, m, d)
                lab = pate_labels(votes[:m], regime=regime, epsilon=epsilon, delta=delta, gen=gen)
                released += 1
                yl = (2 * lab - 1).to(DTYPE) if binary else lab
                stu = train(model, model.init(exp.train.seed), xq[:m], yl, st_student)
                accs_s.append(float(accuracy(model, stu, xs, ys)))
                accs_t.append(float(accuracy(model, stu, xt, yt)))
            s = float(np.median(accs_s))
            if best is None or s > best["selection_accuracy"]:
                best = {"selection_accuracy": s, "accuracy": float(np.median(accs_t)), "hp": f"teachers={T} queries={m}",
                        "accuracy_mean": float(np.mean(accs_t)), "draws": n_draws}
    if best is not None:
        best["trained"] = released
    return best


def shard_predictions(exp: Experiment, parts: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                      xt: torch.Tensor) -> torch.Tensor:
    """Clipped test predictions [T, n] of the T shard models, trained in one vectorised call
    (x [T, m, d], theta [T, P]); every shard starts from the same data-independent init."""
    theta = train_teachers(exp.model, exp.model.init(exp.train.seed), x, y, parts, exp.train, resumable="pate_shards")
    return clip_to_range(exp.model.predict(theta, xt), exp.dataset.output_range)


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
