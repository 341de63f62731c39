"""The classification heads on PCA features of an (adapted or frozen) encoder.

* **AGS head** (:func:`certify_head`, :func:`ags_release`): a logistic head (P = 2 (k + 1)
  parameters on PCA-k features) trained by contractive clipped full-batch GD (the nominal
  algorithm of :mod:`certdp.training`), certified by AGT for k = 1..``head.k_max`` (and N), and
  released once with a P-parameter smooth-sensitivity mechanism of
  :mod:`certdp.privacy.mechanisms` at (eps_2, delta_2).  Allocation ``l1``: noise calibrated to the
  l1 smooth sensitivity of theta.  ``anisotropic``: the release of theta' = theta / w for weights
  w fixed before seeing the private data (the k = 1 envelope widths of the same head certified
  on the *public* set), so the l1 sensitivity of theta' is bounded by the staircase of the
  rescaled envelopes and theta = w * theta' is post-processing; coordinates that move little get
  little noise.
* **DP-SGD head** (:func:`dpsgd_head`): the same logistic head trained by the project's DP-SGD
  (:func:`certdp.privacy.dpsgd_core.train_dpsgd`) at the whole (eps, delta).

Nothing here is published.  The hybrid writes no released head or adapter for publication:
its ``results.csv`` / ``accounting.csv`` are the statistics of ``head.n_draws`` seeded draws
(:func:`certdp.seeding.generator_for` through :mod:`certdp.privacy.noise`), and
``hybrid.work_dir`` (adapters trained with seeded DP-SGD noise, the heads' non-private
envelopes) is a private cache.  All of it is the researcher's report, so seeded draws are right
here; a head meant for publication would take its noise from
:func:`certdp.privacy.noise.release_source` (docs/privacy-as-published.md).

PCA is fitted on the public embeddings only.  Accuracies threshold the logit margin at a value
chosen on the public set (``hybrid.threshold=public``) or at 0: post-processing of the released
model with public data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from certdp import DTYPE
from certdp.agt import Envelopes
from certdp.data.features import fit_public_pca
from certdp.data.text import TextPart
from certdp.certify import build_engine, model_envelopes, parameter_staircase, publish, trivial_cover
from certdp.privacy.smoothness import release_proof
from certdp.seeding import generator_for
from certdp.settings.hybrid import HybridSettings
from certdp.methods.hybrid.store import digest, load_torch, save_torch
from certdp.models import build_model
from certdp.privacy.dpsgd_core import calibrated_noise, train_dpsgd, poisson_schedule
from certdp.privacy.mechanisms import make_mechanism
from certdp.settings.training import staircase_settings
from certdp.training import TrainSettings

log = logging.getLogger("certdp")


@dataclass(frozen=True)
class Features:
    """PCA-k features (fitted on the public part) of one encoder, float64, and labels {0, 1}."""
    x_priv: torch.Tensor
    y_priv: torch.Tensor
    x_pub: torch.Tensor
    y_pub: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    explained: float            # fraction of the public variance the k components keep


def pca_features(hybrid: HybridSettings, emb: dict[str, np.ndarray], parts: dict[str, TextPart]) -> Features:
    pca = fit_public_pca(emb["public"], hybrid.head.pca_dim, key="head.pca_dim")
    x = {k: torch.as_tensor(pca.transform(emb[k]), dtype=DTYPE) for k in ("private", "public", "test")}
    y = {k: torch.as_tensor(parts[k].y01) for k in ("private", "public", "test")}
    return Features(x["private"], y["private"], x["public"], y["public"], x["test"], y["test"], float(pca.explained))


def best_threshold(m_pub: torch.Tensor, y_pub: torch.Tensor) -> torch.Tensor:
    """Per row of margins [D, n], the threshold t maximising the public accuracy of 1[m > t]."""
    D, n = m_pub.shape
    ms, order = torch.sort(m_pub, dim=-1)
    ys = y_pub[order].to(DTYPE)                         # labels in sorted order
    # threshold below position i (0..n): predict 0 for the first i, 1 for the rest
    neg_below = torch.cat([torch.zeros(D, 1, dtype=DTYPE), (1 - ys).cumsum(-1)], -1)
    pos_above = ys.sum(-1, keepdim=True) - torch.cat([torch.zeros(D, 1, dtype=DTYPE), ys.cumsum(-1)], -1)
    i = (neg_below + pos_above).argmax(-1)
    lo = torch.where(i > 0, ms.gather(-1, (i - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1), ms[:, 0] - 1)
    hi = torch.where(i < n, ms.gather(-1, i.clamp(max=n - 1).unsqueeze(-1)).squeeze(-1), ms[:, -1] + 1)
    return (lo + hi) / 2


def margin_accuracy(m_pub: torch.Tensor, y_pub: torch.Tensor, m_test: torch.Tensor, y_test: torch.Tensor,
                    threshold: str) -> tuple[np.ndarray, np.ndarray]:
    """(public, test) accuracies [D] of margins [D, n] with the public-chosen threshold (or 0)."""
    t = best_threshold(m_pub, y_pub) if threshold == "public" else torch.zeros(m_pub.shape[0], dtype=m_pub.dtype)
    acc = lambda m, y: ((m > t.unsqueeze(-1)).long() == y).to(DTYPE).mean(-1).numpy()
    return acc(m_pub, y_pub), acc(m_test, y_test)


def head_model(d: int):
    """The logistic head on d features (2 classes)."""
    return build_model("logistic", d, n_out=2)


def _margins(model, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    z = model.forward(thetas, x)                       # [D, n, 2]
    return z[..., 1] - z[..., 0]


def heads_accuracy(hybrid: HybridSettings, model, thetas: torch.Tensor, f: Features) -> tuple[np.ndarray, np.ndarray]:
    """(public, test) accuracies [D] of the heads ``thetas`` [D, P]."""
    return margin_accuracy(_margins(model, thetas, f.x_pub), f.y_pub, _margins(model, thetas, f.x_test), f.y_test,
                           hybrid.threshold)


def head_train_settings(hybrid: HybridSettings) -> TrainSettings:
    h = hybrid.head
    return TrainSettings(steps=h.steps, lr=h.lr, clip=h.clip, batch_size=None, contraction=h.contraction,
                         seed=hybrid.seed)


def certify_head(hybrid: HybridSettings, f: Features, key: str, *, progress: bool) -> dict:
    """The head's envelopes: nominal head and its AGT envelopes (``head.certificate``,
    k = 1..k_max and N) on the private features, plus the anisotropic weights from the same
    engine on the public features; a dict of tensors cached in the work folder under ``key``
    and the head settings."""
    path = hybrid.work_dir / "ags" / f"{digest('ags', key, hybrid.head, hybrid.seed, f.x_priv.shape)}.pt"
    if path.exists():
        return load_torch(path)
    d = f.x_priv.shape[1]
    model = head_model(d)
    ts = head_train_settings(hybrid)
    n = f.x_priv.shape[0]
    ks = staircase_settings({"kind": "range", "k_max": hybrid.head.k_max, "include_n": hybrid.head.include_n},
                            prefix="head").radii(n)
    engine = build_engine(hybrid.head.certificate, model=model)
    theta0 = model.init(hybrid.seed)
    t0 = time.perf_counter()
    env = model_envelopes(model, theta0, f.x_priv, f.y_priv, ts, ks, engine=engine, progress=progress,
                          resumable="agt")
    secs = time.perf_counter() - t0
    env_pub = model_envelopes(model, theta0, f.x_pub, f.y_pub, ts, [1], engine=engine)
    w = (env_pub.hi[0] - env_pub.lo[0]).clamp(min=0)
    w = (w / w.mean().clamp(min=1e-300)).clamp(min=1e-3)
    out = {"k": env.k_values, "lo": env.lo, "hi": env.hi, "nominal": env.nominal, "weights": w,
           "seconds": secs, "n": n, "d": d}
    save_torch(out, path)
    log.info("AGS head certified: N=%d, |K|=%d, %.1f s", n, len(ks), secs)
    return out


def ags_release(hybrid: HybridSettings, env: dict, f: Features, *, epsilon: float, delta: float, release: str,
                allocation: str, label) -> dict:
    """``head.n_draws`` released heads at (epsilon, delta) and their (public, test) accuracies;
    ``smoothness_proof``: whether the head's staircase is provably beta-smooth (the release-proof
    policy ``privacy.smoothness``, certdp/privacy/smoothness.py; a refusal otherwise)."""
    proof = release_proof(build_engine(hybrid.head.certificate), hybrid.smoothness)
    model = head_model(env["d"])
    P = model.n_params
    w = env["weights"] if allocation == "anisotropic" else torch.ones(P, dtype=DTYPE)
    per_coord = trivial_cover(head_train_settings(hybrid), P, (0, hybrid.head.steps)) / P
    cover = float((per_coord / w).sum())
    sc = parameter_staircase(Envelopes(env["k"], env["lo"], env["hi"], env["nominal"]), n_total=env["n"], cover=cover,
                             weights=w, key="head.lr", allowed="a smaller head.lr or head.clip")
    mech = make_mechanism(release, query="parameter", epsilon=epsilon, n_params=P, delta=delta, beta=hybrid.head.beta)
    u = float(sc.smooth(mech.beta))
    gen = generator_for(hybrid.seed, "hybrid-ags", label, release, allocation, epsilon)
    heads = publish.release(env["nominal"], u, mech, gen, draws=hybrid.head.n_draws, weights=w)
    acc_pub, acc_test = heads_accuracy(hybrid, model, heads, f)
    _, nom_test = heads_accuracy(hybrid, model, env["nominal"].unsqueeze(0), f)
    return {"u": u, "beta": float(mech.beta), "scale": float(mech.scale(u)), "regime": mech.regime,
            "acc_pub": acc_pub, "acc_test": acc_test, "nonprivate_head_accuracy": float(nom_test[0]),
            "smoothness_proof": proof}


def dpsgd_head(hybrid: HybridSettings, f: Features, *, epsilon: float, delta: float, label) -> dict:
    """DP-SGD logistic heads (``dpsgd_head.n_runs`` runs per learning rate) at (epsilon, delta);
    the learning rate with the best median public accuracy is kept."""
    g = hybrid.dpsgd_head
    model = head_model(f.x_priv.shape[1])
    _, q, T = poisson_schedule(batch_size=g.batch_size, epochs=g.epochs, n=f.x_priv.shape[0])
    sigma, eps_cert = calibrated_noise(epsilon=epsilon, delta=delta, sample_rate=q, steps=T,
                                       accountant=hybrid.dpsgd.accountant)
    best = None
    for lr in g.lrs:
        gen = generator_for(hybrid.seed, "hybrid-dpsgd-head", label, epsilon, lr)
        thetas = torch.stack([train_dpsgd(model, model.init(hybrid.seed), f.x_priv, f.y_priv, lr=lr, clip=g.clip,
                                          sigma=sigma, sample_rate=q, steps=T, gen=gen) for _ in range(g.n_runs)])
        acc_pub, acc_test = heads_accuracy(hybrid, model, thetas, f)
        if best is None or np.median(acc_pub) > np.median(best["acc_pub"]):
            best = {"lr": lr, "acc_pub": acc_pub, "acc_test": acc_test}
    return {**best, "sigma": sigma, "eps_certified": eps_cert, "steps": T, "sample_rate": q}
