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
from typing import Any, Iterator, Mapping

from certdp.data.params import Field, describe

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
    from certdp.settings.experiment import PARAMETER_COMMANDS, QUERIES, SECTIONS
    from certdp.settings.privacy import privacy_fields
    experiment = tuple(SECTIONS)
    out: list = [("", run_fields(), experiment + (FEASIBILITY, HYBRID), ""),
                 ("", {"queries": QUERIES}, ("agtr",), "")]
    # certdp hybrid reads its own table over sst2's (its defaults first, so listed first)
    out.append(("dataset", {"n_test_eval": H.N_TEST_EVAL, **H.HYBRID_DATASET_FIELDS}, (HYBRID,), "dataset=sst2"))
    for name, e in entries().items():
        cmds = experiment + ((HYBRID,) if name == "sst2" else ())
        out.append(("dataset", e.fields, cmds, f"dataset={name}"))
    out += [("dataset", C.FEASIBILITY_DATASET_FIELDS, (FEASIBILITY,), ""),
            ("dataset.model", T.model_fields(False), experiment, ""),
            ("model", T.model_fields(True), experiment, ""),
            ("train", T.TRAIN_FIELDS, experiment, ""),
            ("staircase", T.STAIRCASE_FIELDS, experiment, ""),
            ("certificate", {"name": T.CERTIFICATE_NAME}, experiment, "")]
    for opt, f in T.ENGINE_OPTIONS.items():
        engines = "|".join(n for n, c in sorted(CERTIFICATES.items()) if opt in c.options)
        out.append(("certificate", {opt: f}, experiment, f"certificate={engines}"))
    prediction = tuple(c for c in experiment if c not in PARAMETER_COMMANDS)
    out += [("privacy", privacy_fields("prediction"), prediction, ""),
            ("privacy", privacy_fields("parameter"), PARAMETER_COMMANDS, ""),
            ("audit", C.AUDIT_FIELDS, _commands_reading("audit"), ""),
            ("dpaudit", C.DPAUDIT_FIELDS, _commands_reading("dpaudit"), ""),
            ("pate", C.SHARD_FIELDS, ("pate",), ""),
            ("pate", C.PATE_BASELINE_FIELDS, PARAMETER_COMMANDS, ""),
            ("ags", C.ags_fields(), ("ags",), ""),
            ("dpsgd", {"arms": C.dpsgd_fields(with_arms=True)["arms"]}, ("dpsgd",), ""),
            ("dpsgd", C.dpsgd_fields(with_arms=False), PARAMETER_COMMANDS, ""),
            ("feasibility", C.FEASIBILITY_FIELDS, (FEASIBILITY,), "")]
    out += [(prefix, fields, (HYBRID,), "") for prefix, fields in (
        ("privacy", H.HYBRID_PRIVACY_FIELDS), ("split", H.SPLIT_FIELDS), ("lora", H.LORA_FIELDS),
        ("dpsgd", H.DPLORA_FIELDS), ("head", H.head_fields()), ("dpsgd_head", H.DPSGD_HEAD_FIELDS),
        ("hybrid", H.HYBRID_FIELDS))]
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


__all__ = ["Declaration", "declarations", "declared_for", "tables"]
