"""Settings of what is trained and certified: ``model``, ``train``, ``staircase``, ``certificate``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from certdp.data.params import Field, boolean, choice, integer, integers, parse_settings, real, section, text
from certdp.errors import ConfigError
from certdp.training import TrainSettings
from certdp.settings.base import SEED, strict

MAX_STEPS = 10 ** 7          # a fixed batch plan of more steps would not fit in memory
ARCHS = ("linear", "mlp", "logistic")
LOSSES = ("mse", "hinge", "ce")


# ------------------------------------------------------------------------------------ model
@dataclass(frozen=True)
class ModelSettings:
    """``model``: ``arch`` linear | mlp | logistic, ReLU ``hidden`` widths (mlp), ``loss`` (None:
    the task's own, mse for regression)."""
    arch: str
    hidden: tuple[int, ...]
    loss: str | None


def _model_fields(prefix_auto: bool) -> dict[str, Field]:
    arch = ("auto",) + ARCHS if prefix_auto else ARCHS
    return {"arch": Field("auto" if prefix_auto else None, partial(choice, allowed=arch, none=not prefix_auto)),
            "hidden": Field(None, partial(integers, lo=1, hi=1 << 20, min_length=0, none=True)),
            "loss": Field(None, partial(choice, allowed=LOSSES, none=True, null_means="the task's loss"))}


def model_settings(model: Any, dataset_model: Any) -> ModelSettings:
    """``model`` over the dataset's default model (``dataset.model``): with ``model.arch=auto``
    the dataset's arch, hidden widths and loss apply unless ``model.*`` sets them."""
    m = strict(model, _model_fields(True), prefix="model")
    if m["arch"] == "auto":
        d = parse_settings(section(dataset_model, "dataset.model"), _model_fields(False), prefix="dataset.model")
        m = {"arch": d["arch"] or "linear",
             "hidden": m["hidden"] if m["hidden"] is not None else d["hidden"],
             "loss": m["loss"] if m["loss"] is not None else d["loss"]}
    hidden = tuple(m["hidden"] or ())
    if m["arch"] == "mlp" and not hidden:
        raise ConfigError("model.hidden", "an mlp needs hidden widths; allowed: a non-empty list of widths >= 1, "
                                          "e.g. model.hidden=[64]")
    return ModelSettings(m["arch"], hidden, m["loss"])


# ------------------------------------------------------------------------------------ train
def _batch_size(value: Any, key: str) -> int | None:
    if value == "full":
        return None
    return integer(value, key, lo=1, none=True, null_means="full batch")


TRAIN_FIELDS = {
    "steps": Field(None, partial(integer, lo=1, hi=MAX_STEPS)),
    "lr": Field(None, partial(real, lo=0, lo_open=True)),
    "clip": Field(None, partial(real, lo=0, lo_open=True)),
    "batch_size": Field(None, _batch_size),
    "contraction": Field(1.0, partial(real, lo=0, lo_open=True, hi=1)),
    "seed": Field(None, partial(SEED.func, **SEED.keywords, none=True, null_means="the run seed")),
}


def train_settings(cfg: Any, seed: int) -> TrainSettings:
    """``train``: the nominal algorithm (steps, lr, clip gamma, batch size, contraction lambda,
    seed of the initialisation and batch plan; default the run seed)."""
    t = strict(cfg, TRAIN_FIELDS, prefix="train")
    return TrainSettings(steps=t["steps"], lr=t["lr"], clip=t["clip"], batch_size=t["batch_size"],
                         contraction=t["contraction"], seed=seed if t["seed"] is None else t["seed"])


# ------------------------------------------------------------------------------------ staircase
STAIRCASE_KINDS = ("range", "geometric", "list")


@dataclass(frozen=True)
class StaircaseSettings:
    """Radii K at which envelopes are computed.

    ``kind``: ``range`` (k_min..k_max step ``step``), ``geometric`` (every radius up to
    ``dense_until``, then growing by ``ratio`` up to k_max, k_max included), or ``list``
    (``values``).  Radii left out are back-filled by the next computed one (sound, slightly
    looser).  ``k_max`` may exceed N; radii are capped at N.  ``include_n`` adds N itself,
    which covers every radius without a global sensitivity."""

    kind: str = "range"
    k_min: int = 1
    k_max: int = 28
    step: int = 1
    ratio: float = 2.0
    values: tuple[int, ...] = ()
    include_n: bool = False
    dense_until: int = 1
    key: str = field(default="staircase", compare=False)

    def radii(self, n: int) -> list[int]:
        """The sorted radii for a dataset of n records (each capped at n)."""
        if self.kind == "range":
            top = min(self.k_max, n)
            ks = list(range(self.k_min, top + 1, self.step))
            last = self.k_min + self.step * ((self.k_max - self.k_min) // self.step)
            if last > top:                      # a radius above n is capped at n
                ks.append(n)
        elif self.kind == "geometric":
            dense = min(self.dense_until, self.k_max)
            ks = list(range(self.k_min, min(dense, n) + 1)) + ([n] if dense > n >= self.k_min else [])
            k = float(dense if dense >= self.k_min else self.k_min)
            while k <= self.k_max:
                ks.append(int(round(k)))
                if k > n:                       # every later radius is capped at n
                    break
                k = max(k * self.ratio, k + 1)
            ks.append(self.k_max)
        else:
            ks = list(self.values)
        ks = sorted({min(int(k), n) for k in ks if k >= 1})
        if self.include_n and (not ks or ks[-1] < n):
            ks.append(n)
        if not ks:
            raise ConfigError(self.key, "no radius >= 1 selected")
        return ks


STAIRCASE_FIELDS = {
    "kind": Field("range", partial(choice, allowed=STAIRCASE_KINDS)),
    "k_min": Field(1, partial(integer, lo=1)),
    "k_max": Field(28, partial(integer, lo=1)),
    "step": Field(1, partial(integer, lo=1)),
    "ratio": Field(2.0, partial(real, lo=1, lo_open=True)),
    "values": Field((), partial(integers, lo=1, min_length=0, none=True, null_means="no radii")),
    "include_n": Field(False, boolean),
    "dense_until": Field(1, partial(integer, lo=1, none=True, null_means="1")),
}


def staircase_settings(cfg: Any, *, prefix: str = "staircase") -> StaircaseSettings:
    """``staircase`` (or ``pate.staircase``): the radii K, checked (kind=list needs values)."""
    s = strict(cfg, STAIRCASE_FIELDS, prefix=prefix)
    if s["kind"] == "list" and not s["values"]:
        raise ConfigError(f"{prefix}.values", f"kind=list needs a list of radii; allowed: a non-empty list of radii "
                                              f">= 1, e.g. {prefix}.values=[1,2,4,8]")
    if s["kind"] != "list" and s["k_max"] < s["k_min"]:
        raise ConfigError(f"{prefix}.k_max", f"must be >= {prefix}.k_min (got {s['k_max']})")
    return StaircaseSettings(kind=s["kind"], k_min=s["k_min"], k_max=s["k_max"], step=s["step"], ratio=s["ratio"],
                             values=tuple(s["values"] or ()), include_n=s["include_n"],
                             dense_until=s["dense_until"] or 1, key=prefix)


# ------------------------------------------------------------------------------------ certificate
def _workers(value: Any, key: str) -> int:
    return integer(value, key, lo=1, hi=max(2, os.cpu_count() or 2))


# The typed form of the built-in engines' options; each engine's constructor checks its own
# values as well (an option of an engine added later reaches its constructor as given).
OPTION_PARSERS = {
    "frequency": partial(integer, lo=1, hi=MAX_STEPS),
    "time_limit": partial(real, lo=0, lo_open=True),
    "run_time_limit": partial(real, lo=0, lo_open=True, none=True, null_means="no run budget"),
    "solver": text,
    "workers": _workers,
    "mip_gap": partial(real, lo=0),
    "aggregation": text,
}


@dataclass(frozen=True)
class CertificateSettings:
    """``certificate``: the engine's name, its options, and the engine built from them (once)."""
    name: str
    options: tuple[tuple[str, Any], ...]
    engine: Any = field(compare=False, repr=False)

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)


def certificate_settings(cfg: Any, *, key: str = "certificate") -> CertificateSettings:
    """``certificate.name`` and the options the engines declare (``certdp list``)."""
    from certdp.bounds import CERTIFICATES, get_certificate
    d = section(cfg, key)
    name = choice(d.pop("name", "ibp"), f"{key}.name", allowed=tuple(sorted(CERTIFICATES)))
    options = {}
    for opt, value in d.items():
        parse = OPTION_PARSERS.get(opt)
        options[opt] = parse(value, f"{key}.{opt}") if parse is not None else value
    return CertificateSettings(name, tuple(options.items()), get_certificate(name, **options))
