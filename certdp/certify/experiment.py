"""The experiment: the dataset, model, engine, tensors, batch plan and radii of one run, built
once from the settings, with every check that needs the data done before any training."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from certdp import DTYPE
from certdp.bounds import check_supported
from certdp.bounds.base import Certificate
from certdp.bounds.shared import SharedBoxes
from certdp.data import Dataset, load_dataset
from certdp.errors import ConfigError
from certdp.models import ModelSpec, build_model
from certdp.privacy.smoothness import release_proof
from certdp.settings import ExperimentSettings
from certdp.settings.training import StaircaseSettings
from certdp.training import TrainSettings, batch_plan, check_magnitudes

log = logging.getLogger("certdp")

TASKS = {"regression": ("regression",), "classification": ("binary", "multiclass"),
         "any": ("regression", "binary", "multiclass")}


@dataclass(frozen=True)
class Experiment:
    """What every certification step takes: the settings, the loaded dataset, the model, the
    certificate engine (built once), the training and test tensors, the fixed batch plan and the
    radii K for this training set, and whether the smooth releases carry the smoothness proof.

    ``x, y`` are the private training records ([N, d], [N]); ``xt, yt`` the test queries.  Labels
    are float64 targets (regression) or the dataset's class labels (classification)."""
    settings: ExperimentSettings
    dataset: Dataset
    model: ModelSpec
    engine: Certificate
    x: torch.Tensor
    y: torch.Tensor
    xt: torch.Tensor
    yt: torch.Tensor
    plan: torch.Tensor
    ks: tuple[int, ...]
    smoothness_proof: bool = True

    @property
    def train(self) -> TrainSettings:
        return self.settings.train

    @property
    def privacy(self):
        return self.settings.privacy

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def n_train(self) -> int:
        return int(self.x.shape[0])

    @property
    def device(self) -> torch.device:
        """Where nominal training and AGT compute: the resolved ``device`` setting.  The
        experiment's own tensors stay on the CPU (runners, staircases and releases read them
        there, so that a release draws the same noise on every device); :attr:`on_device` holds
        the copies the computation reads."""
        return torch.device(self.settings.run.device)

    @cached_property
    def on_device(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x, y, plan) on :attr:`device`, moved once per experiment (the same tensors on the CPU)."""
        d = self.device
        return self.x.to(d), self.y.to(d), self.plan.to(d)

    @property
    def certificate_name(self) -> str:
        """The configured engine's name (results' ``certificate`` column)."""
        return self.settings.certificate.name

    def on_data(self, x, y, *, staircase: StaircaseSettings | None = None) -> "Experiment":
        """The same experiment trained on another dataset of the same kind (a shard, a subset,
        a neighbour): its batch plan and radii (``staircase``, default the run's) follow the new
        size N, and so does everything that reads ``dataset.n_train``."""
        xn = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        yn = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        ds = dataclasses.replace(self.dataset, x_train=xn, y_train=yn)
        xt_, yt_ = _tensors(ds)[:2]
        n = int(xn.shape[0])
        sc = staircase or self.settings.staircase
        return dataclasses.replace(self, dataset=ds, x=xt_, y=yt_, plan=batch_plan(n, self.train),
                                   ks=tuple(sc.radii(n)))


def _tensors(ds: Dataset):
    x = torch.as_tensor(ds.x_train, dtype=DTYPE)
    xt = torch.as_tensor(ds.x_test, dtype=DTYPE)
    if ds.task == "regression":
        y, yt = torch.as_tensor(ds.y_train, dtype=DTYPE), torch.as_tensor(ds.y_test, dtype=DTYPE)
    else:
        y, yt = torch.as_tensor(ds.y_train), torch.as_tensor(ds.y_test)
    return x, y, xt, yt


def _model(settings: ExperimentSettings, ds: Dataset) -> ModelSpec:
    """The model of ``model``/``dataset.model`` for the dataset's task: regression trains the
    configured loss (mse); binary labels train the hinge (the logistic model: softmax CE), several
    classes the softmax CE.  An explicit ``model.loss`` that the task cannot use is refused."""
    ms = settings.model
    n_out = ds.n_classes if ds.task == "multiclass" else 1
    if ds.task == "regression":
        loss = ms.loss or "mse"
        allowed = ("mse",)
    else:
        loss = "hinge" if ds.task == "binary" and ms.arch != "logistic" else "ce"
        allowed = (loss,)
    if ms.loss is not None and ms.loss not in allowed:
        raise ConfigError("model.loss", f"got '{ms.loss}' (not a loss for the {ds.task} task of '{ds.name}' with "
                                        f"model {ms.arch}); allowed: {', '.join(allowed)}, or null")
    return build_model(ms.arch, ds.n_features, hidden=ms.hidden, n_out=n_out or 1, loss=loss)


def build_experiment(settings: ExperimentSettings, *, task: str = "any", smooth_release: bool = False,
                     share_ratio: float | None = None) -> Experiment:
    """Load the dataset and build the experiment; refuse, before any training, a dataset of the
    wrong ``task`` (regression | classification | any), a model the engine cannot bound, and a
    smooth release (``smooth_release``) whose staircase the smoothness proof does not cover
    (unless ``privacy.smoothness=unproven``).  ``share_ratio`` wraps the engine in
    :class:`~certdp.bounds.shared.SharedBoxes` (``ags.share_ratio``)."""
    from certdp.data.encoders import before_embedding
    from certdp.estimate import Announcer
    said = Announcer(settings)         # a text dataset says the estimate before it embeds
    with before_embedding(said.embedding):
        ds = load_dataset(dict(settings.dataset), settings.seed)
    if ds.task not in TASKS[task]:
        cmd = settings.command
        other = "certdp agtr" if ds.task == "regression" else "certdp ags"
        raise ConfigError("dataset", f"certdp {cmd} needs a {task} dataset; '{ds.name}' is a {ds.task} task "
                                     f"(use {other}); allowed: a {task} dataset (`certdp list` shows each task)")
    model = _model(settings, ds)
    engine = settings.certificate.build()              # built when the run starts, from the settings
    check_supported(engine, model)
    prep = ds.preprocessing
    if prep is not None:     # from the settings and the public rows only: data-independent (training.py)
        check_magnitudes(model, settings.train, input_bound=prep.input_bound, target_bound=prep.target_bound)
    if share_ratio:
        engine = SharedBoxes(engine, share_ratio)
    proof = release_proof(engine, settings.privacy.smoothness) if smooth_release else True
    x, y, xt, yt = _tensors(ds)
    n = ds.n_train
    # every refusal of the settings and the data is behind us: a long run says how long it will
    # take before the work starts (certdp/estimate.py; advisory, silent on any failure)
    said.after_data()
    return Experiment(settings, ds, model, engine, x, y, xt, yt, batch_plan(n, settings.train),
                      tuple(settings.staircase.radii(n)), proof)


# --------------------------------------------------------------------------- finite checks
def diverged_at(exp: Experiment, theta0: torch.Tensor) -> int:
    """The first step (1-based) after which nominal training from ``theta0`` has a non-finite
    parameter (replayed step by step; called only once a run has diverged)."""
    from certdp.training import train
    theta = theta0
    x, y, plan = exp.on_device
    for t in range(exp.train.steps):
        theta = train(exp.model, theta, x, y, exp.train, plan=plan, steps=range(t, t + 1), device=exp.device)
        if not torch.isfinite(theta).all():
            return t + 1
    return exp.train.steps


def require_finite(value: torch.Tensor, *, what: str, key: str = "train.lr",
                   allowed: str = "a smaller train.lr or train.clip (the bounds overflowed float64)") -> None:
    """A one-line refusal naming ``key`` when ``value`` holds a NaN or an infinity."""
    t = torch.as_tensor(value)
    if not torch.isfinite(t).all():
        raise ConfigError(key, f"{what} not finite; allowed: {allowed}")


# --------------------------------------------------------------------------- provenance
NO_DATA = {"dp_end_to_end": True, "scaling": "none"}     # a command that reads no records (feasibility)


def with_provenance(frames: dict, provenance, *, device: str | torch.device) -> dict:
    """``frames`` with the provenance columns on every row of every table: ``scaling`` (where
    the data's scaling came from), ``dp_end_to_end`` (bool) and ``device`` (where training and
    AGT computed: the resolved ``device`` setting, e.g. ``cpu`` or ``cuda:0``; runners pass
    ``exp.device`` or ``settings.run.device``), and the dataset's own labels where it has some
    (imdb: ``data_profile``, ``encoder``, ``subset``: what the features were computed from).

    ``provenance`` is a :class:`~certdp.data.Dataset` (its :func:`~certdp.data.provenance`) or
    the dict itself.  A row's ``dp_end_to_end`` is the dataset's (false under
    ``dataset.scaling=private_stats_not_dp``) and, where the row has a ``smoothness_proof``
    column, that too: a smooth release whose staircase carries no proof
    (``privacy.smoothness=unproven``) is a labelled shortcut, not a proven guarantee.  A row's
    epsilon is the guarantee of what it reports only when ``dp_end_to_end`` is true (and, for
    an arm that selects among privately trained candidates, only its ``epsilon_end_to_end``)."""
    import pandas as pd

    from certdp.data import Dataset, provenance as _prov
    prov = _prov(provenance) if isinstance(provenance, Dataset) else dict(provenance)
    out = {}
    for name, df in frames.items():
        if not isinstance(df, pd.DataFrame):
            out[name] = df
            continue
        df = df.copy()
        flag = pd.Series(bool(prov["dp_end_to_end"]), index=df.index, dtype=bool)
        if "smoothness_proof" in df.columns:
            flag &= df["smoothness_proof"].fillna(True).astype(bool)
        for k, v in prov.items():        # the dataset's labels (imdb: data_profile, encoder, subset)
            if k not in ("dp_end_to_end", "scaling"):
                df[k] = v
        df["scaling"] = prov["scaling"]
        df["dp_end_to_end"] = flag
        df["device"] = str(torch.device(device))
        out[name] = df
    return out


def spent(row, provenance) -> str:
    """What a terminal summary shows beside a row's number: the epsilon the row really spent
    (``epsilon_end_to_end``, shown where it differs from ``epsilon``: an arm that tuned among
    privately trained candidates) and ``dp_end_to_end`` as :func:`with_provenance` sets it (the
    dataset's flag, and the row's ``smoothness_proof`` where it has one).  ``row``: a mapping or
    a namedtuple of the row's columns; ``provenance``: as for :func:`with_provenance`."""
    import math

    from certdp.data import Dataset, provenance as _prov
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    prov = _prov(provenance) if isinstance(provenance, Dataset) else dict(provenance)
    proof = get("smoothness_proof", True)
    dp = bool(prov["dp_end_to_end"]) and (proof is None or (isinstance(proof, float) and math.isnan(proof))
                                          or bool(proof))
    eps, e2e = get("epsilon"), get("epsilon_end_to_end")
    parts = []
    if e2e is not None and eps is not None and math.isfinite(float(e2e)) and not math.isclose(float(e2e), float(eps)):
        parts.append(f"eps_end_to_end={float(e2e):g}")
    parts.append(f"dp_end_to_end={'true' if dp else 'false'}")
    return "[" + ", ".join(parts) + "]"
