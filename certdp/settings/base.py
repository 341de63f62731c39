"""The pieces every command's settings share: where the configs live, the run options, and the
strict reading of a section (typed values, absent keys defaulted, unknown keys refused).

Values are typed by the parsers of :mod:`certdp.data.params` (the one numeric helper): an
integer key refuses ``2.7``, a real key refuses ``inf``/``nan``, a list key refuses ``[]`` where
emptiness is meaningless.  Each refusal is a :class:`~certdp.errors.ConfigError` naming the
dotted key, printed by the CLI as ``certdp: error: <key>: <problem>; allowed: <what>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

from certdp.data.params import Field, boolean, choice, integer, parse_settings, section, text
from certdp.results import CONFIG_FORMAT, INCOMPLETE, REPLACED
from certdp.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent.parent / "configs"

# Seeds seed numpy's and torch's generators (both need a non-negative integer below 2^63).
SEED = partial(integer, lo=0, hi=2 ** 53)

# ``selection``: ``grid`` lets the arms that tune (optimised DP-SGD, the PATE classification
# baseline, the hybrid's split / allocation / learning rate) choose among privately trained
# candidates, reporting the composition over them as ``epsilon_end_to_end``; ``fixed`` trains only
# the configured candidate (each such grid must then hold one value), so both epsilons agree.
SELECTION_MODES = ("grid", "fixed")


def config_dir() -> Path:
    """The Hydra config folder: ``$CERTDP_CONFIG_DIR`` or the repository's ``configs/``."""
    d = os.environ.get("CERTDP_CONFIG_DIR")
    if d:
        return Path(d)
    if CONFIG_DIR.is_dir():
        return CONFIG_DIR
    raise RuntimeError("certdp cannot find its configs/ folder: install with `pip install -e .` from the "
                       "repository or set CERTDP_CONFIG_DIR")


def strict(cfg: Any, fields: Mapping[str, Field], *, prefix: str) -> dict[str, Any]:
    """Section ``prefix`` of the config read against its table: every key typed, absent keys
    defaulted, unknown keys refused (``<prefix>.<key>: unknown setting; allowed: ...``)."""
    return parse_settings(section(cfg, prefix), fields, prefix=prefix)


def subsection(fields: Mapping[str, Field]) -> Callable[[Any, str], dict]:
    """A parser for a nested section (``feasibility.confidence``, ``dpsgd.optimised.grid``)."""
    return lambda value, key: parse_settings(section(value, key), fields, prefix=key)


def run_name(value: Any, key: str) -> str:
    """``run``: the run folder's path below ``<out_root>/<command>/<dataset>/`` -- one or more
    plain names joined by ``/`` (``grp/a``).  Refused: an absolute path, an empty, ``.`` or ``..``
    part (``run=../..`` would leave ``out_root``), a part holding the staging or replaced markers
    (``.incomplete-``, ``.replaced-``: a finished run would carry an unfinished folder's name),
    characters that are not printable.  To write elsewhere set ``out_root`` (an absolute path is
    taken as given)."""
    name = text(value, key)
    allowed = ("a relative name below <out_root>/<command>/<dataset>/ such as run=grp/a (plain names joined by /); "
               "to write elsewhere set out_root=DIR")
    if not name.isprintable():
        raise ConfigError(key, f"got {name!r} (holds control characters); allowed: {allowed}")
    if name.startswith(("/", "~")):
        raise ConfigError(key, f"got {name!r} (an absolute path); allowed: {allowed}")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise ConfigError(key, f"got {name!r} (a part is {part!r}, so the run would not be a folder of its own "
                                   f"below out_root); allowed: {allowed}")
        if INCOMPLETE in part or REPLACED in part:
            raise ConfigError(key, f"got {name!r} ({INCOMPLETE!r} and {REPLACED!r} mark unfinished folders); "
                                   f"allowed: {allowed}")
    return name


@dataclass(frozen=True)
class RunOptions:
    """The top-level keys of every command (``configs/base.yaml``): what was run, its seed, and
    where and how its folder is written (read by the CLI, not by the computation)."""
    command: str
    seed: int
    default_certificate: str
    progress: bool
    out_root: str
    run: str
    overwrite: bool
    selection: str = "grid"      # grid: arms that tune choose among private candidates | fixed: one candidate
    config_format: int = 2       # the layout of config.yaml (certdp rerun refuses another)


def _run_fields() -> dict[str, Field]:
    from certdp.bounds import CERTIFICATES
    return {
        "command": Field(None, partial(text, none=True)),
        "seed": Field(0, SEED),
        "default_certificate": Field("ibp", partial(choice, allowed=tuple(sorted(CERTIFICATES)))),
        "progress": Field(True, boolean),
        "out_root": Field("outputs", text),
        "run": Field("run", run_name),
        "overwrite": Field(False, boolean),
        "selection": Field("grid", partial(choice, allowed=SELECTION_MODES)),
        "config_format": Field(CONFIG_FORMAT, _config_format),
    }


def _config_format(value: Any, key: str) -> int:
    """Only this certdp's layout of config.yaml (a config written by another is not read as this one)."""
    v = integer(value, key)
    if v != CONFIG_FORMAT:
        raise ConfigError(key, f"got {v} (a config.yaml of another layout); allowed: {CONFIG_FORMAT}, the layout of "
                               "this certdp (leave config_format out)")
    return v


def top_level(cfg: Mapping[str, Any] | None, *, command: str, sections: tuple[str, ...]) -> tuple[RunOptions, dict]:
    """The run options and the raw sections of a composed config; a top-level key that is
    neither is refused (``+foo=1`` is a typo, not a setting to ignore)."""
    cfg = dict(cfg or {})
    fields = _run_fields()
    unknown = [k for k in cfg if k not in fields and k not in sections]
    if unknown:
        raise ConfigError(str(unknown[0]), f"unknown setting of certdp {command}; allowed: "
                                           f"{', '.join(list(sections) + list(fields))}")
    run = {k: f.parse(cfg.get(k, f.default), k) for k, f in fields.items()}
    run["command"] = run["command"] or command
    return RunOptions(**run), {s: cfg.get(s) for s in sections}
