"""A finished run's record, read back for ``certdp rerun``: ``config.yaml`` (the resolved config)
and ``run.json`` (:data:`certdp.results.RUN_FORMAT`), both checked before anything is replayed.

A rerun repeats exactly what was run or refuses: a folder that is not a finished run (missing,
a staging or replaced folder, no ``run.json``), a ``run.json`` that does not follow its schema,
a ``config.yaml`` whose SHA-256 differs from the one ``run.json`` recorded (edited after the run:
a removed ``seed`` would otherwise silently become the default 0), a ``config.yaml`` of another
layout (``config_format``) or without the keys every run writes.  Input files (``dataset.path``,
``queries``) whose checksum changed since the run are reported (:attr:`RunRecord.warnings`,
:attr:`RunRecord.changes`); ``certdp rerun`` refuses them (its point is the same CSVs).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from certdp import results
from certdp.errors import ConfigError
from certdp.settings.files import MAX_YAML_BYTES, read_document_bytes, read_json_document, read_yaml_document, shown

RUN_DIR_WHAT = "the folder of a finished certdp run (it holds config.yaml and run.json), e.g. outputs/agtr/linear/<run>"
# the keys every run's config.yaml holds (configs/base.yaml); a config without one is incomplete
REQUIRED_KEYS = ("command", "seed", "default_certificate", "progress", "out_root", "run", "overwrite", "selection",
                 "config_format", "dataset")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class RunRecord:
    """What ``certdp rerun`` replays: the command, the config as the run wrote it, and the
    warnings about inputs that changed since (``changes``: their :func:`input_changes` tuples)."""
    run_dir: Path
    command: str
    config: dict
    version: str
    warnings: tuple[str, ...] = ()
    changes: tuple[tuple[str, str, str, str | None], ...] = ()


def _field(doc: Any, name: str, kinds, path: Path, prefix: str = "run.json") -> Any:
    value = doc.get(name) if isinstance(doc, dict) else None
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise ConfigError(f"{prefix}.{name}", f"{'missing' if value is None else f'got {value!r:.60}'} in {shown(path)}; "
                                              "allowed: the run.json that certdp wrote")
    return value


def _check_record(doc: Any, path: Path, commands: Sequence[str]) -> dict:
    if not isinstance(doc, dict):
        raise ConfigError("run.json", f"{shown(path)} is not a JSON object; allowed: the run.json that certdp wrote")
    if doc.get("format") != results.RUN_FORMAT:
        raise ConfigError("run.json.format", f"got {doc.get('format')!r:.60} in {shown(path)}; allowed: "
                                             f"{results.RUN_FORMAT}")
    command = _field(doc, "command", str, path)
    if command not in commands:
        raise ConfigError("run.json.command", f"got {command!r:.60} in {shown(path)}; allowed: {', '.join(commands)}")
    _field(doc, "certdp_version", str, path)
    cfg = _field(doc, "config", dict, path)
    if cfg.get("file") != results.CONFIG_FILE or not _HEX64.match(str(cfg.get("sha256", ""))):
        raise ConfigError("run.json.config", f"got {cfg!r:.100} in {shown(path)}; allowed: the file config.yaml "
                                             "and its SHA-256 (64 hex digits)")
    inputs = _field(doc, "inputs", list, path)
    for i, r in enumerate(inputs):
        ok = (isinstance(r, dict) and isinstance(r.get("key"), str) and isinstance(r.get("path"), str)
              and r.get("kind") in ("file", "folder")
              and (r.get("sha256") is None or _HEX64.match(str(r.get("sha256")))))
        if not ok:
            raise ConfigError(f"run.json.inputs[{i}]", f"got {r!r:.100} in {shown(path)}; allowed: "
                                                       "{key, path, kind: file|folder, sha256, bytes}")
    return doc


def load_run_record(run_dir: str | Path, *, commands: Sequence[str]) -> RunRecord:
    """The record of the finished run in ``run_dir`` (see the module docstring); a
    :class:`ConfigError` naming ``RUN_DIR`` or the file and field otherwise."""
    src = Path(run_dir).expanduser()
    if not results.is_run_dir_name(src.name):
        what = "the staging folder of an unfinished run" if results.INCOMPLETE in src.name else \
            "a finished run being replaced (overwrite=true)"
        raise ConfigError("RUN_DIR", f"{shown(src)} is {what}; allowed: {RUN_DIR_WHAT}")
    if not src.exists():
        raise ConfigError("RUN_DIR", f"{shown(src)} does not exist; allowed: {RUN_DIR_WHAT}")
    if not src.is_dir():
        raise ConfigError("RUN_DIR", f"{shown(src)} is not a folder; allowed: {RUN_DIR_WHAT}")
    cfg_path, rec_path = src / results.CONFIG_FILE, src / results.RUN_MARKER
    if not cfg_path.exists():
        raise ConfigError("RUN_DIR", f"{shown(src)} has no config.yaml (not a certdp run folder); allowed: {RUN_DIR_WHAT}")
    if not rec_path.exists():
        legacy = results.run_kind(src) == "legacy"
        raise ConfigError("RUN_DIR", f"{shown(src)} has no run.json" + (
            " (made by a certdp before run.json, so its config.yaml cannot be checked for edits); allowed: a run "
            f"made by this certdp, or run the command again with the overrides in {shown(src / '.hydra' / 'overrides.yaml')}"
            if legacy else f" (not a finished certdp run); allowed: {RUN_DIR_WHAT}"))
    rec = _check_record(read_json_document(rec_path, key="run.json", what="the run.json that certdp wrote",
                                           limit=MAX_YAML_BYTES), rec_path, commands)
    data = read_document_bytes(cfg_path, key="config.yaml", limit=MAX_YAML_BYTES, what="the config.yaml that certdp wrote")
    if hashlib.sha256(data).hexdigest() != rec["config"]["sha256"]:
        raise ConfigError("config.yaml", f"{shown(cfg_path)} was edited after the run (its SHA-256 differs from the one "
                                         "in run.json), so it is not what was run; allowed: the config.yaml the run "
                                         f"wrote (to change a setting, run `certdp {rec['command']} ...` with it)")
    cfg = read_yaml_document(cfg_path, key="config.yaml", what="the config.yaml that certdp wrote")
    if not isinstance(cfg, dict):
        raise ConfigError("config.yaml", f"{shown(cfg_path)} is not a mapping of settings; allowed: the config.yaml "
                                         "that certdp wrote")
    if cfg.get("config_format") != results.CONFIG_FORMAT:
        raise ConfigError("config.yaml.config_format", f"got {cfg.get('config_format')!r:.40} in {shown(cfg_path)}; "
                                                       f"allowed: {results.CONFIG_FORMAT}, the layout this certdp reads")
    missing = [k for k in REQUIRED_KEYS if k not in cfg]
    if missing or not isinstance(cfg.get("dataset"), dict) or "name" not in cfg["dataset"]:
        raise ConfigError(f"config.yaml.{(missing or ['dataset.name'])[0]}",
                          f"missing in {shown(cfg_path)} (an incomplete config is not replayed with defaults); "
                          "allowed: the config.yaml that certdp wrote")
    if cfg.get("command") != rec["command"]:
        raise ConfigError("config.yaml.command", f"got {cfg.get('command')!r:.40} in {shown(cfg_path)}, run.json says "
                                                 f"{rec['command']!r}; allowed: the files of one run")
    return RunRecord(src, rec["command"], cfg, rec["certdp_version"], tuple(input_warnings(rec["inputs"], cfg)),
                     tuple(input_changes(rec["inputs"], cfg)))


def input_changes(recorded: list[dict], cfg: dict) -> list[tuple[str, str, str, str | None]]:
    """``(key, how, recorded path, path now)`` for each input file a run or checkpoint recorded
    (:func:`certdp.results.input_records`) that is not what ``cfg`` reads now; ``how``: ``gone``
    (missing or unreadable), ``moved`` (another path) or ``changed`` (another SHA-256).  The one
    comparison behind ``certdp rerun``'s warnings and the refusal of a resume whose inputs
    changed (:mod:`certdp.resuming`)."""
    now = {r["key"]: r for r in results.input_records(cfg)}
    out = []
    for r in recorded:
        cur = now.get(r["key"])
        if cur is None:
            out.append((r["key"], "gone", r["path"], None))
        elif cur["path"] != r["path"]:
            out.append((r["key"], "moved", r["path"], cur["path"]))
        elif cur["sha256"] != r["sha256"]:
            out.append((r["key"], "changed", r["path"], cur["path"]))
    return out


def input_warnings(recorded: list[dict], cfg: dict) -> list[str]:
    """One line per input whose file is not what the run read (changed, moved or gone)."""
    said = {"gone": "{was} is gone or unreadable since the run", "moved": "now reads {now}, the run read {was}",
            "changed": "{was} changed since the run (its SHA-256 differs from run.json's); the rerun reads it as it "
                       "is now, so its results may differ"}
    return [f"{key}: " + said[how].format(was=was, now=now) for key, how, was, now in input_changes(recorded, cfg)]
