"""One settings entrance: every command's composed config is parsed once, here, into frozen
dataclasses, before any data is read or any training starts.

:func:`parse` maps a command and its composed config (a plain dict from Hydra) to the command's
settings: :class:`ExperimentSettings` for the commands that train and certify (``agtr``,
``certify``, ``audit``, ``pate``, ``ags``, ``dpsgd``, ``dpaudit``), :class:`FeasibilitySettings` and
:class:`HybridSettings`.  Every value is typed and range-checked by the parsers of
:mod:`certdp.data.params`; absent keys take their documented defaults; a key no command reads is
refused (``+privacy.epsilon=1`` is a typo, not a setting to ignore); releases are instantiated so
that a beta above a mechanism's limit fails here; the certificate engine is checked here and built when
the run starts (:meth:`CertificateSettings.build`).
Runners receive these values only, never the raw config.

Modules: :mod:`.base` (run options, strict sections), :mod:`.training` (model, train, staircase,
certificate), :mod:`.privacy`, :mod:`.commands` (audit, pate shards, ags, baselines,
feasibility), :mod:`.experiment`, :mod:`.hybrid`.
"""

from __future__ import annotations

from typing import Any, Mapping

from certdp.errors import ConfigError
from certdp.settings.base import RunOptions, config_dir, top_level
from certdp.settings.commands import FeasibilitySettings, feasibility_settings
from certdp.settings.experiment import SECTIONS, ExperimentSettings, experiment_settings
from certdp.settings.hybrid import HybridSettings, hybrid_settings


def _feasibility(cfg: Mapping[str, Any] | None) -> FeasibilitySettings:
    from certdp.data.params import section
    from certdp.settings.commands import FEASIBILITY_DATASET_FIELDS
    run, sec = top_level(cfg, command="feasibility", sections=("dataset", "feasibility"))
    run.require_cpu("certdp feasibility")
    d = section(sec["dataset"], "dataset")
    for k, v in d.items():               # the run folder's dataset part: no data is read
        if k != "name":
            raise ConfigError(f"dataset.{k}", "unknown setting (certdp feasibility reads no data); allowed: "
                                              "dataset.name only")
    name = FEASIBILITY_DATASET_FIELDS["name"]
    name.parse(d.get("name", name.default), "dataset.name")
    return feasibility_settings(sec["feasibility"], run)


def parse(command: str, cfg: Mapping[str, Any] | None) -> Any:
    """The settings of ``command`` from its composed config (a :class:`ConfigError` naming the
    key on the first bad value)."""
    if command in SECTIONS:
        return experiment_settings(command, cfg)
    if command == "feasibility":
        return _feasibility(cfg)
    if command == "hybrid":
        return hybrid_settings(dict(cfg or {}))
    raise ValueError(f"no settings for command {command!r}")

__all__ = ["parse", "config_dir", "RunOptions", "ExperimentSettings", "FeasibilitySettings", "HybridSettings"]
