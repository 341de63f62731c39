"""Settings of what is trained and certified: ``model``, ``train``, ``staircase``, ``certificate``."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from certdp.data.params import (NOT_A_SETTING, Field, boolean, check_settings, choice, integer, integers, parse_settings, real,
                                section, setting, settings_of, text)
from certdp.errors import ConfigError
from certdp.training import MAX_STEPS, TrainSettings
from certdp.settings.base import strict

ARCHS = ("linear", "mlp", "logistic")
LOSSES = ("mse", "hinge", "ce")


# ------------------------------------------------------------------------------------ model
@dataclass(frozen=True)
class ModelSettings:
    """``model``: ``arch`` linear | mlp | logistic, ReLU ``hidden`` widths (mlp), ``loss`` (None:
    the task's own, mse for regression).  Each field declares its setting as the ``model``
    section reads it (``arch=auto``: the dataset's ``dataset.model``, whose table
    :func:`model_fields` derives); a value holds the resolved model, never ``auto``."""
    arch: str = setting("auto", partial(choice, allowed=("auto",) + ARCHS),
                        help="the model: linear | mlp | logistic (auto: the dataset's dataset.model)")
    hidden: tuple[int, ...] = setting(None, partial(integers, lo=1, hi=1 << 20, min_length=0, none=True),
                                      help="ReLU hidden widths of an mlp")
    loss: str | None = setting(None, partial(choice, allowed=LOSSES, none=True, null_means="the task's loss"),
                               help="the training loss (null: the task's own, mse for regression)")


def model_fields(prefix_auto: bool) -> dict[str, Field]:
    """The ``model`` table (``prefix_auto``) or the datasets' ``dataset.model`` table, whose
    ``arch`` names a model (no auto) and may be null (linear)."""
    fields = settings_of(ModelSettings)
    if not prefix_auto:
        fields["arch"] = dataclasses.replace(fields["arch"], default=None,
                                             parse=partial(choice, allowed=ARCHS, none=True))
    return fields


def model_settings(model: Any, dataset_model: Any) -> ModelSettings:
    """``model`` over the dataset's default model (``dataset.model``): with ``model.arch=auto``
    the dataset's arch, hidden widths and loss apply unless ``model.*`` sets them."""
    read = strict(model, model_fields(True), prefix="model")
    if read["arch"] == "auto":
        own = parse_settings(section(dataset_model, "dataset.model"), model_fields(False), prefix="dataset.model")
        read = {"arch": own["arch"] or "linear",
                "hidden": read["hidden"] if read["hidden"] is not None else own["hidden"],
                "loss": read["loss"] if read["loss"] is not None else own["loss"]}
    hidden = tuple(read["hidden"] or ())
    if read["arch"] == "mlp" and not hidden:
        raise ConfigError("model.hidden", "an mlp needs hidden widths; allowed: a non-empty list of widths >= 1, "
                                          "e.g. model.hidden=[64]")
    return ModelSettings(read["arch"], hidden, read["loss"])


# ------------------------------------------------------------------------------------ train
# declared once, in the fields of TrainSettings (certdp/training.py)
def train_settings(cfg: Any, seed: int) -> TrainSettings:
    """``train``: the nominal algorithm (steps, lr, clip gamma, batch size, contraction lambda,
    seed of the initialisation and batch plan; default the run seed)."""
    values = strict(cfg, settings_of(TrainSettings), prefix="train")
    return TrainSettings(**{**values, "seed": seed if values["seed"] is None else values["seed"]})


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

    kind: str = setting("range", partial(choice, allowed=STAIRCASE_KINDS),
                        help="how the radii K are chosen: range (k_min..k_max by step) | geometric | list (values)")
    k_min: int = setting(1, partial(integer, lo=1), help="smallest radius (range, geometric)")
    k_max: int = setting(28, partial(integer, lo=1), help="largest radius (capped at N)")
    step: int = setting(1, partial(integer, lo=1), help="radius step of kind=range")
    ratio: float = setting(2.0, partial(real, lo=1, lo_open=True), help="growth factor of kind=geometric after dense_until")
    values: tuple[int, ...] = setting((), partial(integers, lo=1, min_length=0, none=True, null_means="no radii"),
                                      help="the radii of kind=list")
    include_n: bool = setting(False, boolean, help="add k = N (covers every radius without a global sensitivity)")
    dense_until: int = setting(1, partial(integer, lo=1, none=True, null_means="1"),
                               help="kind=geometric: every radius up to this one")
    key: str = field(default="staircase", compare=False,
                     metadata={NOT_A_SETTING: "the section read (staircase, pate.staircase)"})

    def __post_init__(self):
        check_settings(self, self.key)

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
            raise ConfigError(self.key, "selects no radius >= 1; allowed: settings that select at least one radius "
                                        f"in 1..N (N={n}), or {self.key}.include_n=true")
        return ks


def staircase_settings(cfg: Any, *, prefix: str = "staircase") -> StaircaseSettings:
    """``staircase`` (or ``pate.staircase``): the radii K, checked (kind=list needs values)."""
    read = strict(cfg, settings_of(StaircaseSettings), prefix=prefix)
    if read["kind"] == "list" and not read["values"]:
        raise ConfigError(f"{prefix}.values", f"kind=list needs a list of radii; allowed: a non-empty list of radii "
                                              f">= 1, e.g. {prefix}.values=[1,2,4,8]")
    if read["kind"] != "list" and read["k_max"] < read["k_min"]:
        raise ConfigError(f"{prefix}.k_max", f"got {read['k_max']}, below {prefix}.k_min={read['k_min']}; allowed: an "
                                             f"integer >= {prefix}.k_min ({read['k_min']})")
    return StaircaseSettings(**{**read, "values": tuple(read["values"] or ()), "dense_until": read["dense_until"] or 1},
                             key=prefix)


# ------------------------------------------------------------------------------------ certificate
def _workers(value: Any, key: str) -> int:
    return integer(value, key, lo=1, hi=max(2, os.cpu_count() or 2))


# Every ``certificate.<opt>`` an engine reads (``Certificate.options``), declared once: its parser
# and help.  The default is each engine's own (its constructor's; ``docs/settings.md`` lists them
# per engine), so it is not repeated here; an absent option is not passed.  Options whose values
# only the engine can judge (its modes) are typed by its constructor, which refuses in one line.
def _engine_name(value: Any, key: str) -> str:
    from certdp.bounds import CERTIFICATES
    return choice(value, key, allowed=tuple(sorted(CERTIFICATES)))


_engine_name.describe = lambda: "a registered engine (certdp list: certificates)"
CERTIFICATE_NAME = Field("ibp", _engine_name,
                         help="the bound-propagation engine (certificate=NAME picks its config; auto: default_certificate)")
def _by_engine(value: Any, key: str) -> Any:
    """A mode the engine's constructor checks (it refuses an unknown one, naming the allowed)."""
    return value


ENGINE_OPTIONS = {
    "substitutions": Field(None, _by_engine,
                           help="per_epoch: k substitutions budgeted per epoch of the batch plan | per_batch: k in every batch"),
    "aggregation": Field(None, text,
                         help="how the k substituted records leave the batch sum: topk (exact) | tau (threshold grid)"),
    "frequency": Field(None, partial(integer, lo=1, hi=MAX_STEPS),
                       help="F: training steps per MILP window (1: exact per step)"),
    "time_limit": Field(None, partial(real, lo=0, lo_open=True, none=True, null_means="none (gaplp: the only value)"),
                        help="seconds per MILP objective (the search stops with the safe bound it has); gaplp refuses any"),
    "run_time_limit": Field(None, partial(real, lo=0, lo_open=True, none=True, null_means="no run budget"),
                            help="seconds for all windows of one AGT pass (null: no run budget)"),
    "solver": Field(None, text, help="the LP solver proposing duals: highs | cbc"),
    "workers": Field(None, _workers, help="processes solving the radii of a window (1 or 2)"),
    "mip_gap": Field(None, partial(real, lo=0),
                     help="relative gap at which the branch and bound stops (its bound is safe either way)"),
    "nodes": Field(None, _by_engine,
                   help="branch-and-bound expansions per objective (0: the LP relaxation's safe bound)"),
    "on_time_limit": Field(None, _by_engine,
                           help="what a solve that ends early gives: bound (a safe bound; the only value)"),
    "solve": Field(None, _by_engine,
                   help="milp: branch and bound with safe LP bounds | lp: the LP relaxation's safe bound only"),
    "horizon": Field(None, _by_engine, help="steps per crowntt window (null: the whole run or the AGS release window)"),
    "branch": Field(None, _by_engine, help="radii split per substituted record (auto: radius 1 when cheap; 0: none)"),
    "alpha_iters": Field(None, _by_engine,
                         help="hinge head: Adam steps on the relaxation lines of the final bounds (0: area rule only)"),
    "gap": Field(None, _by_engine, help="gaplp: certified gap gamma of the final bounds (radius index j adds gamma j)"),
    "gap_intermediate": Field(None, _by_engine, help="gaplp: certified gap of the margin intervals (intermediate bounds)"),
    "tighten": Field(None, _by_engine, help="gaplp: steps whose uncertain margins are tightened: all | none | a period n"),
}


@dataclass(frozen=True)
class CertificateSettings:
    """``certificate``: the engine's name and the options it reads, typed.  The engine itself is
    built from them when the run starts (:meth:`build`), never stored here: an engine holds run
    state (a MILP run budget, compiled kernels, caches) that a frozen settings value must not.
    ``ignored`` names the options a preset set for another engine (``certificate=auto`` picks
    the engine from ``default_certificate``, so a preset may prepare options for an engine it
    does not pick); such an option given on the command line is refused
    (:func:`refuse_explicit_options`)."""
    name: str
    options: tuple[tuple[str, Any], ...]
    ignored: tuple[str, ...] = ()

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)

    def build(self):
        """A fresh engine of these settings (:func:`certdp.bounds.get_certificate`)."""
        from certdp.bounds import get_certificate
        return get_certificate(self.name, **dict(self.options))


def certificate_settings(cfg: Any, *, key: str = "certificate") -> CertificateSettings:
    """``certificate.name`` and the options the engines declare (``certdp list settings``): an
    option no engine reads is refused; one that only another engine reads is set aside
    (``ignored``).  The engine is built once here to check its options (its constructor refuses
    a bad value in one line, before any data is read) and dropped."""
    from certdp.bounds import CERTIFICATES
    d = section(cfg, key)
    name = CERTIFICATE_NAME.parse(d.pop("name", CERTIFICATE_NAME.default), f"{key}.name")
    own = CERTIFICATES[name].options
    options, ignored = {}, []
    for opt, value in d.items():
        f = ENGINE_OPTIONS.get(opt)
        if f is None or not any(opt in c.options for c in CERTIFICATES.values()):
            raise ConfigError(f"{key}.{opt}", f"unknown option of the certificate '{name}'; allowed: "
                                                  f"{', '.join(own) or 'none'} (the options of {name})")
        parsed = f.parse(value, f"{key}.{opt}")      # a preset's bad value is refused whichever engine runs
        if opt in own:
            options[opt] = parsed
        else:
            ignored.append(opt)
    out = CertificateSettings(name, tuple(options.items()), tuple(ignored))
    out.build()
    return out


def refuse_explicit_options(cert: CertificateSettings, keys: Any, *, key: str = "certificate") -> None:
    """Refuse a ``certificate.<opt>`` of ``keys`` (the command line's overrides) that the chosen
    engine does not read: an explicit value is never silently dropped."""
    from certdp.bounds import CERTIFICATES
    for k in keys:
        opt = k[len(key) + 1:] if k.startswith(key + ".") else None
        if opt in cert.ignored:
            owners = [n for n, c in sorted(CERTIFICATES.items()) if opt in c.options]
            raise ConfigError(f"{key}.{opt}", f"not an option of the certificate '{cert.name}' (it is read by "
                                              f"{', '.join(owners)}); allowed: "
                                              f"{', '.join(CERTIFICATES[cert.name].options) or 'none'} (the options "
                                              f"of {cert.name})")


# The tables of the sections declared in dataclass fields, under the names they had as tables:
# read from the dataclass on every access, so they cannot drift from it (no second copy).
_TABLES = {"TRAIN_FIELDS": TrainSettings, "STAIRCASE_FIELDS": StaircaseSettings}


def __getattr__(name: str) -> dict[str, Field]:
    if name in _TABLES:
        return settings_of(_TABLES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
