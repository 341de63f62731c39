"""Every setting of every command, as declared: one :class:`~certdp.data.params.Field` per key
(default, parser, help) in the table of the section that reads it.

This module only gathers the tables the parsers already use (it declares nothing itself), so
what it lists is what the parsers read: ``tools/settings_doc.py`` writes the settings reference
``docs/settings.md`` from it, ``certdp list settings`` prints it, and
``tests/test_settings_schema.py`` checks the YAML defaults of ``configs/`` against it.  Which
commands read a key follows from the section its table serves (``SECTIONS`` of
:mod:`certdp.settings.experiment`; feasibility and hybrid read their own).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from certdp.data.params import NOT_A_SETTING, SETTING, Field, describe, settings_of
from certdp.errors import ConfigError

FEASIBILITY = "feasibility"
HYBRID = "hybrid"


@dataclass(frozen=True)
class Declaration:
    """One declared key: its dotted name, its field, the commands that read it and, where the
    key belongs to one option of a config group, that option (``dataset=linear``,
    ``certificate=milp|exact``)."""
    key: str
    field: Field
    commands: tuple[str, ...]
    where: str = ""

    @property
    def allowed(self) -> str:
        """The type and allowed values, in words (from the parser)."""
        return describe(self.field.parse)

    @property
    def default_text(self) -> str:
        """The default as a config would write it: ``required`` where the configs must supply
        the value, ``(section)`` for a nested section, each engine's own for an engine option."""
        f = self.field
        if getattr(f.parse, "fields", None) is not None and f.default is None:
            return "(section)"
        if self.where.startswith("certificate="):
            return "; ".join(f"{e}: {show(engine_default(e, self.key.split('.', 1)[1]))}"
                             for e in self.where[len("certificate="):].split("|"))
        if f.default is None:
            try:
                f.parse(None, self.key)
            except ConfigError:
                return "required"
        return show(f.default)


def show(v: Any) -> str:
    """A value as YAML writes it (null, true, [a, b], {k: v})."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(show(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {show(x)}" for k, x in v.items()) + "}"
    return repr(v) if isinstance(v, float) else str(v)


def _commands_reading(section: str) -> tuple[str, ...]:
    from certdp.settings.experiment import SECTIONS
    return tuple(c for c, secs in SECTIONS.items() if section in secs)


def tables() -> list[tuple[str, Mapping[str, Field], tuple[str, ...], str]]:
    """(section prefix, table, commands, group option) of every table the parsers read."""
    from certdp.bounds import CERTIFICATES
    from certdp.data import entries
    from certdp.settings import commands as C
    from certdp.settings import hybrid as H
    from certdp.settings import training as T
    from certdp.settings.base import run_fields
    from certdp.settings.experiment import DPAUDIT_DRAWS, DPAUDIT_PRIVACY_RELEASES, PARAMETER_COMMANDS, QUERIES, SECTIONS
    from certdp.settings.privacy import privacy_fields
    from certdp.training import TrainSettings
    experiment = tuple(SECTIONS)
    out: list = [("", run_fields(), experiment + (FEASIBILITY, HYBRID), ""),
                 ("", {"queries": QUERIES}, ("agtr",), "")]
    # certdp hybrid reads sst2's table with its own defaults and ranges for some keys (derived from it)
    hybrid_own = {"n_test_eval": H.N_TEST_EVAL, **H.hybrid_dataset_fields()}
    out.append(("dataset", hybrid_own, (HYBRID,), "dataset=sst2"))
    for name, e in entries().items():
        if name != "sst2":
            out.append(("dataset", e.fields, experiment, f"dataset={name}"))
            continue
        out.append(("dataset", {k: f for k, f in e.fields.items() if k not in hybrid_own}, experiment + (HYBRID,),
                    f"dataset={name}"))
        out.append(("dataset", {k: f for k, f in e.fields.items() if k in hybrid_own}, experiment, f"dataset={name}"))
    out += [("dataset", C.FEASIBILITY_DATASET_FIELDS, (FEASIBILITY,), ""),
            ("dataset.model", T.model_fields(False), experiment, ""),
            ("model", T.model_fields(True), experiment, ""),
            ("train", settings_of(TrainSettings), experiment, ""),
            ("staircase", settings_of(T.StaircaseSettings), experiment, ""),
            ("certificate", {"name": T.CERTIFICATE_NAME}, experiment, "")]
    for opt, f in T.ENGINE_OPTIONS.items():
        engines = "|".join(n for n, c in sorted(CERTIFICATES.items()) if opt in c.options)
        out.append(("certificate", {opt: f}, experiment, f"certificate={engines}"))
    prediction = tuple(c for c in experiment if c not in PARAMETER_COMMANDS + ("dpaudit",))
    out += [("privacy", privacy_fields("prediction"), prediction, ""),
            ("privacy", {**privacy_fields("prediction", n_draws=DPAUDIT_DRAWS), "releases": DPAUDIT_PRIVACY_RELEASES},
             ("dpaudit",), ""),
            ("privacy", privacy_fields("parameter"), PARAMETER_COMMANDS, ""),
            ("audit", settings_of(C.AuditSettings), _commands_reading("audit"), ""),
            ("dpaudit", settings_of(C.DPAuditSettings), _commands_reading("dpaudit"), ""),
            ("pate", settings_of(C.ShardSettings), ("pate",), ""),
            ("pate", C._baseline_table("pate"), PARAMETER_COMMANDS, ""),
            ("ags", C.ags_fields(), _commands_reading("ags"), ""),
            ("dpsgd", {"arms": C.dpsgd_fields(with_arms=True)["arms"]}, ("dpsgd",), ""),
            ("dpsgd", C.dpsgd_fields(with_arms=False), PARAMETER_COMMANDS, ""),
            ("feasibility", settings_of(C.FeasibilitySettings), (FEASIBILITY,), "")]
    out += [(prefix, settings_of(cls), (HYBRID,), "") for prefix, cls in (
        ("privacy", H.HybridPrivacySettings), ("split", H.SplitSettings), ("lora", H.LoraSettings),
        ("dpsgd", H.DPLoraSettings), ("head", H.HeadSettings), ("dpsgd_head", H.DPSGDHeadSettings),
        ("hybrid", H.HybridOptions))]
    return out


def _walk(prefix: str, fields: Mapping[str, Field]) -> Iterator[tuple[str, Field]]:
    for k, f in fields.items():
        key = f"{prefix}.{k}" if prefix else k
        yield key, f
        sub = getattr(f.parse, "fields", None)       # a Subsection: its keys are declared too
        if sub is not None:
            yield from _walk(key, sub)


def declarations() -> list[Declaration]:
    """Every declared key, nested sections included, in the parsers' order."""
    return [Declaration(key, f, cmds, where) for prefix, fields, cmds, where in tables()
            for key, f in _walk(prefix, fields)]


def declared_for(command: str, cfg: Mapping[str, Any]) -> dict[str, Field]:
    """The fields ``command`` reads under a composed config ``cfg`` (its dataset and engine
    picked by ``cfg``): dotted key -> field."""
    dataset = f"dataset={(cfg.get('dataset') or {}).get('name')}"
    engine = (cfg.get("certificate") or {}).get("name")
    out: dict[str, Field] = {}
    for d in declarations():
        if command not in d.commands:
            continue
        if d.where.startswith("dataset=") and d.where != dataset:
            continue
        if d.where.startswith("certificate=") and engine not in d.where[len("certificate="):].split("|"):
            continue
        out.setdefault(d.key, d.field)
    return out


# ------------------------------------------------------------------ the YAML defaults against the declarations
def engine_default(engine: str, opt: str) -> Any:
    """The default of engine option ``opt`` of ``engine``: its constructor's (the one place it is
    declared; a subclass that passes ``**opts`` on inherits its base's)."""
    import inspect

    from certdp.bounds import CERTIFICATES
    for cls in CERTIFICATES[engine].__mro__:
        p = inspect.signature(cls.__init__).parameters.get(opt) if "__init__" in vars(cls) else None
        if p is not None and p.default is not inspect.Parameter.empty:
            return p.default
    return None


def _presets(config_dir: Path, command: str) -> list[str]:
    """The optional preset groups of ``command``'s primary config (``~preset/agtr`` removes one)."""
    import yaml
    entries = (yaml.safe_load((config_dir / f"{command}.yaml").read_text()) or {}).get("defaults", [])
    return [k.split()[-1] for e in entries if isinstance(e, dict) for k in e if k.split()[-1].startswith("preset/")]


def _compose(config_dir: Path, jobs: list[tuple[str, list[str]]]) -> Iterator[tuple[str, list[str], dict, dict]]:
    """(command, overrides, resolved config, unresolved config) of each job, composed by Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from certdp.results import register_resolvers
    register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).absolute()), version_base=None):
            for command, overrides in jobs:
                cfg = compose(config_name=command, overrides=overrides)
                yield (command, overrides, OmegaConf.to_container(cfg, resolve=True),
                       OmegaConf.to_container(cfg, resolve=False))
    finally:
        GlobalHydra.instance().clear()


def _leaves(cfg: Mapping[str, Any], raw: Mapping[str, Any], decl: Mapping[str, Field], prefix: str = "",
            into_built: bool = False):
    """(dotted key, value, unresolved value, field or None) of every key of a composed config,
    descending into sections that are not values of their own (``into_built``: into those too)."""
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else k
        r = raw.get(k) if isinstance(raw, Mapping) else None
        f = decl.get(key)
        yield key, v, r, f
        nested = f is None or getattr(f.parse, "fields", None) is not None
        if isinstance(v, Mapping) and nested and (into_built or not (f is not None and getattr(f.parse, "build", None))):
            yield from _leaves(v, r if isinstance(r, Mapping) else {}, decl, key, into_built)


# keys whose value names what the config chose (the command, the dataset group option and its model)
SET_BY_CONFIG = ("command", "dataset.name", "dataset.model")


def yaml_disagreements(config_dir: Path, commands: tuple[str, ...]) -> list[str]:
    """Where a command's composed default config (its presets left out: they are the datasets'
    deliberate choices) holds a value other than the declared default: ``<command>: <key>: YAML
    <v>, declared <d>``.  Interpolations (``${seed}``) and keys without a default of their own
    (declared required: the YAML supplies them) are not compared; an engine option is compared
    with the chosen engine's constructor default."""
    out = []
    jobs = [(c, [f"~{p}" for p in _presets(Path(config_dir), c)]) for c in commands]
    for command, _, cfg, raw in _compose(Path(config_dir), jobs):
        decl = declared_for(command, cfg)
        engine = (cfg.get("certificate") or {}).get("name")
        for key, v, r, f in _leaves(cfg, raw, decl):
            if f is None or key in SET_BY_CONFIG or (isinstance(r, str) and "${" in r) or getattr(f.parse, "fields", None) and \
                    not getattr(f.parse, "build", None):
                continue
            default = f.default
            if key.startswith("certificate.") and key != "certificate.name":
                default = engine_default(engine, key.split(".", 1)[1])
            try:
                d = f.parse(default, key)
            except Exception:              # no default of its own: the YAML supplies it
                continue
            y = f.parse(v, key)
            if y != d:
                out.append(f"{command}: {key}: YAML {y!r}, declared {d!r}")
    return out


def undeclared_yaml_keys(config_dir: Path, jobs: list[tuple[str, list[str]]]) -> list[str]:
    """Every key of the composed configs of ``jobs`` that no declaration of its command covers
    (``<command> <overrides>: <key>``): a key no command reads."""
    out = []
    for command, overrides, cfg, raw in _compose(Path(config_dir), jobs):
        decl = {d.key: d.field for d in declarations() if command in d.commands and
                (not d.where.startswith("dataset=") or d.where == f"dataset={(cfg.get('dataset') or {}).get('name')}")}
        for key, v, r, f in _leaves(cfg, raw, decl, into_built=True):
            if f is None and not isinstance(v, Mapping):
                out.append(f"{command} {' '.join(overrides)}: {key}")
            elif f is None and isinstance(v, Mapping) and not any(k.startswith(key + ".") for k in decl):
                out.append(f"{command} {' '.join(overrides)}: {key}")
    return out


# ------------------------------------------------------------------ one declaration per setting
SETTINGS_MODULES = ("certdp.training", "certdp.settings.base", "certdp.settings.training", "certdp.settings.privacy",
                    "certdp.settings.commands", "certdp.settings.experiment", "certdp.settings.hybrid")


def settings_classes() -> list[type]:
    """The dataclasses that declare settings in their fields (:func:`certdp.data.params.setting`)."""
    import dataclasses
    import importlib
    out = []
    for name in SETTINGS_MODULES:
        for obj in vars(importlib.import_module(name)).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj not in out and \
                    any(SETTING in f.metadata for f in dataclasses.fields(obj)):
                out.append(obj)
    return out


def second_declarations(classes: list[type] | None = None) -> list[str]:
    """Where a setting is declared a second time: a key that two tables the parsers read declare
    for one command (and one dataset or engine option), or a field of a settings dataclass whose
    default is not its declaration (a plain default beside the declared ones, or one that is not
    the parsed declared default)."""
    import dataclasses
    out, seen = [], set()
    for d in declarations():
        for c in d.commands:
            if (c, d.key, d.where) in seen:
                out.append(f"{c}: {d.key}{f' ({d.where})' if d.where else ''}: declared twice")
            seen.add((c, d.key, d.where))
    for cls in settings_classes() if classes is None else classes:
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            decl = f.metadata.get(SETTING)
            if decl is None and has_default and NOT_A_SETTING not in f.metadata:
                out.append(f"{cls.__name__}.{f.name}: a default that is not declared as a setting")
            elif decl is not None and f.default is not dataclasses.MISSING:
                try:
                    declared = decl.parse(decl.default, f.name)
                except ConfigError:
                    declared = dataclasses.MISSING
                if declared != f.default:
                    out.append(f"{cls.__name__}.{f.name}: default {f.default!r}, declared {declared!r}")
    return out


# Sections whose keys are declared by a table rather than by a settings dataclass's fields, and why:
# a dataset's keys by its loader's table (certdp/data/*.py; certdp hybrid's and certdp
# feasibility's dataset keys are derived from or sit beside them), an engine option by the engines
# that read it (its default is each engine's constructor's).
TABLE_SECTIONS = {"dataset": "a dataset loader's table (certdp/data/*.py)",
                  "certificate": "the engines' options (certdp/settings/training.py, defaults in each engine)"}


def separate_tables() -> list[str]:
    """The keys declared by a separate table: a declaration the parsers read (outside
    :data:`TABLE_SECTIONS`) that is not a settings dataclass field's own (nor derived from one,
    with ``dataclasses.replace``: same name and help), as ``<key>: <help>``.  A nested section
    read as a plain mapping (``dpsgd.optimised``) holds no value of its own: its keys are checked."""
    import dataclasses
    own = {(f.name, f.metadata[SETTING].help) for cls in settings_classes() for f in dataclasses.fields(cls)
           if SETTING in f.metadata}
    return [f"{d.key}: {d.field.help}" for d in declarations()
            if d.key.split(".", 1)[0] not in TABLE_SECTIONS and (d.key.rsplit(".", 1)[-1], d.field.help) not in own
            and not (getattr(d.field.parse, "fields", None) is not None and getattr(d.field.parse, "build", None) is None)]


def group_options(config_dir: Path, group: str) -> list[str]:
    return sorted(p.stem for p in (Path(config_dir) / group).glob("*.yaml"))


__all__ = ["Declaration", "declarations", "declared_for", "tables", "yaml_disagreements", "undeclared_yaml_keys",
           "engine_default", "settings_classes", "second_declarations", "separate_tables"]
