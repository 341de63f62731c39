"""Pieces shared by the runners: building the experiment from a config, releasing predictions."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np
import torch

from certdp import DTYPE
from certdp.config import (ModelSettings, PrivacySettings, StaircaseSettings, mechanisms_for,
                           model_settings, privacy_settings, staircase_settings, train_settings)
from certdp.bounds import check_supported, get_certificate
from certdp.data import Dataset, load_dataset
from certdp.errors import ConfigError
from certdp.models import ModelSpec, build_model
from certdp.training import TrainSettings, batch_plan

log = logging.getLogger("certdp")


@dataclass(frozen=True)
class Experiment:
    dataset: Dataset
    model: ModelSpec
    model_settings: ModelSettings
    train: TrainSettings
    staircase: StaircaseSettings
    privacy: PrivacySettings
    certificate: dict
    seed: int


def build_experiment(cfg: dict, *, privacy_parser=None) -> Experiment:
    """``privacy_parser`` reads the ``privacy:`` section (default: the prediction releases'
    :func:`privacy_settings`; ``certdp ags`` passes its own for parameter releases)."""
    seed = int(cfg.get("seed", 0))
    dcfg = dict(cfg.get("dataset") or {})
    ms = model_settings(cfg.get("model") or {}, dcfg)
    tr = train_settings(cfg.get("train") or {}, seed)
    sc = staircase_settings(cfg.get("staircase") or {})
    pv = (privacy_parser or privacy_settings)(cfg.get("privacy") or {})
    cert = dict(cfg.get("certificate") or {"name": "ibp"})
    engine = get_certificate(cert.get("name", "ibp"), **{k: v for k, v in cert.items() if k != "name"})
    ds = load_dataset(dcfg, seed)
    n_out = ds.n_classes if ds.task == "multiclass" else 1
    loss = ms.loss if ds.task == "regression" else ("hinge" if ds.task == "binary" and ms.arch != "logistic" else "ce")
    model = build_model(ms.arch, ds.n_features, hidden=ms.hidden, n_out=n_out, loss=loss)
    check_supported(engine, model)
    return Experiment(ds, model, ms, tr, sc, pv, cert, seed)


def tensors(ds: Dataset):
    x = torch.as_tensor(ds.x_train, dtype=DTYPE)
    xt = torch.as_tensor(ds.x_test, dtype=DTYPE)
    if ds.task == "regression":
        y, yt = torch.as_tensor(ds.y_train, dtype=DTYPE), torch.as_tensor(ds.y_test, dtype=DTYPE)
    else:
        y, yt = torch.as_tensor(ds.y_train), torch.as_tensor(ds.y_test)
    return x, y, xt, yt


def generator_for(seed: int, *labels) -> torch.Generator:
    """A generator seeded from the run seed and a label (mechanism, epsilon, ...): the same
    config and seed give the same draws, independently of the order arms run in."""
    h = hashlib.sha256(repr((int(seed),) + tuple(labels)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))


def trajectory_ceiling(n: int, settings: TrainSettings) -> float:
    """Largest change of any parameter coordinate between the runs on two datasets that
    differ in one record, for the nominal algorithm with element-wise clipping.

    Once the substituted record has entered a batch the two trajectories separate, and from
    then on *every* sample's clipped gradient may differ (they are evaluated at different
    parameters), so a step can move a coordinate apart by up to lr * 2*gamma (the mean of b
    differences each in [-2 gamma, 2 gamma]); earlier differences are contracted by lambda:
    c = sum_t lr * 2 gamma * lambda^(T-1-t).  (Counting only the steps that contain the
    substituted record, 2 gamma / b each, would ignore that divergence and is not sound.)"""
    T = settings.steps
    lam = torch.as_tensor(settings.contraction, dtype=DTYPE) ** torch.arange(T - 1, -1, -1, dtype=DTYPE)
    return float((settings.lr * 2 * settings.clip * lam).sum())


def global_sensitivity(exp: Experiment, xt: torch.Tensor) -> torch.Tensor | None:
    """Per-test-point global (l1) sensitivity of the released prediction, or None.

    ``range``: the width of the output range (the released value is the prediction clipped to
    it).  ``trajectory``: for a linear model f = w.x + b, sum_j c |x_j| + c with c the
    trajectory ceiling.  ``min``: the smaller of the available ones.  ``none``: no GS."""
    mode = exp.privacy.global_sensitivity
    rng = exp.dataset.output_range
    n = xt.shape[0]
    cands = []
    if mode in ("range", "min") and rng is not None:
        cands.append(torch.full((n,), float(rng[1] - rng[0]), dtype=DTYPE))
    if mode in ("trajectory", "min"):
        if exp.model.n_layers != 1 or exp.model.widths[-1] != 1:
            if mode == "trajectory":
                raise ConfigError("privacy.global_sensitivity", "trajectory is only defined for a linear model; allowed here: range, none")
        else:
            c = trajectory_ceiling(exp.dataset.n_train, exp.train)
            cands.append(c * (xt.abs().sum(-1) + 1))
    if mode == "range" and rng is None:
        raise ConfigError("privacy.global_sensitivity", "range needs dataset.output_range; allowed here: trajectory (linear model), none")
    if not cands:
        return None
    out = cands[0]
    for c in cands[1:]:
        out = torch.minimum(out, c)
    return out


def release_errors(pred: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, mech,
                   n_draws: int, gen: torch.Generator, output_range) -> tuple[float, float]:
    """MAE and MSE of ``clip(pred + scale * Z)`` over ``n_draws`` draws per point (chunked)."""
    n = pred.shape[0]
    abs_sum, sq_sum = 0.0, 0.0
    chunk = max(1, int(4e6 // max(n, 1)))
    done = 0
    while done < n_draws:
        m = min(chunk, n_draws - done)
        z = mech.sample(gen, (m, n))
        r = pred + scale * z
        if output_range is not None:
            r = r.clamp(float(output_range[0]), float(output_range[1]))
        err = r - target
        abs_sum += float(err.abs().sum())
        sq_sum += float((err ** 2).sum())
        done += m
    tot = n * n_draws
    return abs_sum / tot, sq_sum / tot
