"""The settings of the commands that train and certify a model on a dataset
(``agtr``, ``certify``, ``audit``, ``pate``, ``ags``, ``dpsgd``, ``dpaudit``): one frozen value each.
``dpaudit`` reads prediction or parameter releases (``dpaudit.query``); ``agtr`` also reads
``queries`` (a table of query points)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from functools import partial
from typing import Any, Mapping

from certdp.data import dataset_settings
from certdp.data.params import Field, choices, text
from certdp.errors import ConfigError
from certdp.settings.base import RunOptions, top_level
from certdp.settings.commands import (DPAUDIT_RELEASES, AGSSettings, AuditSettings, DPAuditSettings, dpaudit_settings, BaselineSettings, ShardSettings, ags_settings,
                                      audit_settings, baseline_settings, check_fixed_selection, shard_settings)
from certdp.settings.privacy import PrivacySettings, privacy_settings
from certdp.settings.training import (CertificateSettings, ModelSettings, StaircaseSettings, TrainSettings,
                                      certificate_settings, model_settings, staircase_settings, train_settings)

MODEL_SECTIONS = ("dataset", "model", "train", "certificate", "staircase", "privacy")
SECTIONS = {"agtr": MODEL_SECTIONS + ("queries",), "certify": MODEL_SECTIONS, "audit": MODEL_SECTIONS + ("audit",),
            "pate": MODEL_SECTIONS + ("pate",), "ags": MODEL_SECTIONS + ("ags", "dpsgd", "pate"),
            "dpsgd": MODEL_SECTIONS + ("dpsgd", "pate", "ags"), "dpaudit": MODEL_SECTIONS + ("dpaudit",)}
PARAMETER_COMMANDS = ("ags", "dpsgd")
DPAUDIT_DRAWS = 200_000      # certdp dpaudit's privacy.n_draws: outputs drawn per dataset
# certdp dpaudit: privacy.releases null audits every release of dpaudit.query (DPAUDIT_RELEASES)
DPAUDIT_PRIVACY_RELEASES = Field(None, partial(choices, allowed=tuple(r for rs in DPAUDIT_RELEASES.values() for r in rs),
                                               none=True, null_means="every release dpaudit.query audits"),
                                 help="the audited releases")
QUERIES = Field(None, partial(text, none=True, null_means="the dataset's test queries only"),
                help="a table (.csv/.tsv/.parquet) of query points in the dataset's raw columns, answered privately (answers.csv)")


@dataclass(frozen=True)
class ExperimentSettings:
    """Everything a training-and-certifying command needs, parsed and checked.  ``dataset`` is
    the dataset section read by the dataset's own table (typed, defaults filled, read-only), the
    form its loader takes; the command's own section is in ``audit``, ``shards``, ``ags`` or
    ``baselines``."""
    run: RunOptions
    dataset: Mapping[str, Any]
    model: ModelSettings
    train: TrainSettings
    staircase: StaircaseSettings
    certificate: CertificateSettings
    privacy: PrivacySettings
    audit: AuditSettings | None = None
    shards: ShardSettings | None = None
    ags: AGSSettings | None = None
    baselines: BaselineSettings | None = None
    dpaudit: DPAuditSettings | None = None
    queries: str | None = None            # agtr: a table of query points answered privately (answers.csv)

    @property
    def command(self) -> str:
        return self.run.command

    @property
    def seed(self) -> int:
        return self.run.seed


def experiment_settings(command: str, cfg: Mapping[str, Any] | None) -> ExperimentSettings:
    """Parse the composed config of ``command`` (no data is read)."""
    run, sec = top_level(cfg, command=command, sections=SECTIONS[command])
    dcfg = sec["dataset"]
    if not isinstance(dcfg, Mapping):
        raise ConfigError("dataset", f"got {dcfg!r} (not a dataset section); allowed: dataset=NAME (certdp list)")
    dataset = dataset_settings(dict(dcfg))
    model = model_settings(sec["model"], dataset.get("model"))
    train = train_settings(sec["train"], run.seed)
    query = "parameter" if command in PARAMETER_COMMANDS else "prediction"
    extra: dict[str, Any] = {}
    privacy_cfg = sec["privacy"]
    if command == "agtr":
        extra["queries"] = QUERIES.parse(sec["queries"], "queries")
    if command == "dpaudit":
        extra["dpaudit"] = dpaudit_settings(sec["dpaudit"])
        query = extra["dpaudit"].query
        audited = DPAUDIT_RELEASES[query]
        privacy_cfg = dict(privacy_cfg or {})
        if privacy_cfg.get("releases") is None:              # null: every audited release of the query
            privacy_cfg["releases"] = list(audited)
        for r in privacy_cfg["releases"] or ():
            if r not in audited:
                raise ConfigError("privacy.releases", f"certdp dpaudit does not audit '{r}' for dpaudit.query={query}; "
                                                      f"allowed: {', '.join(audited)}")
        DPAUDIT_PRIVACY_RELEASES.parse(privacy_cfg["releases"], "privacy.releases")
    if command == "audit":
        extra["audit"] = audit_settings(sec["audit"])
    elif command == "pate":
        extra["shards"] = shard_settings(sec["pate"])
    elif command in PARAMETER_COMMANDS:
        # certdp dpsgd composes the dataset's ags preset too (its training settings): of its ags
        # section it uses ags.baseline_draws, the matched DP-SGD draws
        extra["ags"] = ags_settings(sec["ags"], steps=train.steps)
        extra["baselines"] = baseline_settings(sec["dpsgd"], sec["pate"], with_arms=command == "dpsgd")
        if run.selection == "fixed":
            arms = extra["ags"].baselines if command == "ags" else extra["baselines"].arms
            check_fixed_selection(extra["baselines"], arms)
    privacy = privacy_settings(privacy_cfg, query=query, n_draws=DPAUDIT_DRAWS if command == "dpaudit" else None)
    if command == "dpaudit":
        check_dpaudit_privacy(privacy)
    certificate = certificate_settings(sec["certificate"])
    from certdp.bounds import CERTIFICATES, check_device
    check_device(CERTIFICATES[certificate.name], run.device)     # an engine that cannot run there: refused now
    return ExperimentSettings(
        run=run, dataset=MappingProxyType(dataset), model=model, train=train,
        staircase=staircase_settings(sec["staircase"]), certificate=certificate,
        privacy=privacy, **extra)


# The audit's exact delta multiplies by e^epsilon (certdp.privacy.loss), finite in float64 only
# below epsilon ~ 709.78; its lower bound compares two samples of outputs.
DPAUDIT_MAX_EPSILON = 700.0
DPAUDIT_MIN_DRAWS = 2


def check_dpaudit_privacy(p: PrivacySettings) -> None:
    """The privacy settings ``certdp dpaudit`` can audit (refused here, before any data is read)."""
    if p.n_draws < DPAUDIT_MIN_DRAWS:
        raise ConfigError("privacy.n_draws", f"got {p.n_draws} (certdp dpaudit compares two samples of outputs); "
                                             f"allowed: an integer >= {DPAUDIT_MIN_DRAWS} (thousands for a tight bound)")
    big = [e for e in p.epsilons if e > DPAUDIT_MAX_EPSILON]
    if big:
        raise ConfigError("privacy.epsilons", f"got {big[0]:g} (the audit's exact delta needs e^epsilon, which "
                                              f"overflows float64 above ~709); allowed: epsilons of at most "
                                              f"{DPAUDIT_MAX_EPSILON:g} for certdp dpaudit")
