"""The pieces every command's settings share: where the configs live, the run options, and the
strict reading of a section (typed values, absent keys defaulted, unknown keys refused).

Values are typed by the parsers of :mod:`certdp.data.params` (the one numeric helper): an
integer key refuses ``2.7``, a real key refuses ``inf``/``nan``, a list key refuses ``[]`` where
emptiness is meaningless.  Each refusal is a :class:`~certdp.errors.ConfigError` naming the
dotted key, printed by the CLI as ``certdp: error: <key>: <problem>; allowed: <what>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

from certdp.data.params import (NOT_A_SETTING, SEED, Field, Names, boolean, choice, integer, parse_settings, real, section,
                                setting, settings_of, text)
from certdp.results import CONFIG_FORMAT, INCOMPLETE, REPLACED, RESUMABLE
from certdp.errors import ConfigError

# The top-level ``configs/`` and ``experiments/`` folders of the source tree travel inside the wheel as
# ``certdp/_configs`` and ``certdp/_experiments`` (pyproject.toml maps them).  An installed package
# reads its own copy; a source checkout (no ``certdp/_configs``) reads the repository's folder.  The
# packaged copy is looked up first so that a stray top-level ``configs`` in site-packages is never read.
_PACKAGE = Path(__file__).resolve().parent.parent
CONFIG_DIR = _PACKAGE.parent / "configs"


def shipped_dir(name: str, env: str) -> Path:
    """The folder of certdp's shipped ``name`` files (``configs`` or ``experiments``): ``$env`` when
    set (a user's full replacement), else the installed package's copy, else the source checkout's."""
    d = os.environ.get(env)
    if d:
        return Path(d)
    for cand in (_PACKAGE / f"_{name}", _PACKAGE.parent / name):
        if cand.is_dir():
            return cand
    raise RuntimeError(f"certdp cannot find its {name}/ folder (looked for {_PACKAGE / ('_' + name)} and "
                       f"{_PACKAGE.parent / name}): reinstall certdp or set {env}")


# ``device``: where training and AGT compute.  ``auto`` is a CUDA GPU when torch sees one, else the
# CPU; ``cuda`` is the current CUDA device, ``cuda:N`` the N-th.  Resolved here, once, so that a run
# records the device it used and a machine without the device refuses before any work.
DEVICE_REQUESTS = "auto, cpu, cuda, cuda:N"


def device_setting(value: Any, key: str) -> str:
    """The resolved device (``cpu`` or ``cuda:N``) of a ``device`` request (:data:`DEVICE_REQUESTS`).
    A CUDA request on a machine where torch sees no CUDA device, or an index beyond the devices it
    sees, is a one-line refusal."""
    import re

    import torch
    v = text(value, key, what=DEVICE_REQUESTS).strip().lower()
    if v == "auto":
        v = "cuda" if torch.cuda.is_available() else "cpu"
    if v == "cpu":
        return "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", v)
    if m is None:
        raise ConfigError(key, f"unknown device {value!r}; allowed: {DEVICE_REQUESTS}")
    if not torch.cuda.is_available():
        raise ConfigError(key, f"{v}: torch sees no CUDA device on this machine; allowed: auto, cpu")
    count = torch.cuda.device_count()
    idx = int(m.group(1)) if m.group(1) is not None else torch.cuda.current_device()
    if idx >= count:
        raise ConfigError(key, f"cuda:{idx} does not exist (torch sees {count} CUDA device(s)); allowed: auto, cpu, "
                               f"cuda:0..cuda:{count - 1}")
    return f"cuda:{idx}"


# ``selection``: ``grid`` lets the arms that tune (optimised DP-SGD, the PATE classification
# baseline, the hybrid's split / allocation / learning rate) choose among privately trained
# candidates, reporting the composition over them as ``epsilon_end_to_end``; ``fixed`` trains only
# the configured candidate (each such grid must then hold one value), so both epsilons agree.
SELECTION_MODES = ("grid", "fixed")


def config_dir() -> Path:
    """The Hydra config folder: ``$CERTDP_CONFIG_DIR``, the installed ``certdp/_configs`` or the
    repository's ``configs/`` (:func:`shipped_dir`).  A user's own configs: a copy of this folder,
    edited, named by ``$CERTDP_CONFIG_DIR``."""
    return shipped_dir("configs", "CERTDP_CONFIG_DIR")


def strict(cfg: Any, fields: Mapping[str, Field], *, prefix: str) -> dict[str, Any]:
    """Section ``prefix`` of the config read against its table: every key typed, absent keys
    defaulted, unknown keys refused (``<prefix>.<key>: unknown setting; allowed: ...``)."""
    return parse_settings(section(cfg, prefix), fields, prefix=prefix)


@dataclass(frozen=True)
class Subsection:
    """The parser of a nested section (``feasibility.confidence``, ``dpsgd.optimised.grid``):
    its table of fields (walked by :mod:`certdp.settings.schema`) and, where the section is read
    into a value of its own, the function that reads it (``build(value, key)``)."""
    fields: Mapping[str, Field]
    build: Callable[[Any, str], Any] | None = None

    def __call__(self, value: Any, key: str) -> Any:
        if self.build is not None:
            return self.build(value, key)
        return parse_settings(section(value, key), self.fields, prefix=key)

    def describe(self) -> str:
        return "section: " + ", ".join(self.fields)


def subsection(fields: Mapping[str, Field]) -> Subsection:
    """A parser for a nested section (``feasibility.confidence``, ``dpsgd.optimised.grid``)."""
    return Subsection(fields)


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
        if INCOMPLETE in part or REPLACED in part or RESUMABLE in part:
            raise ConfigError(key, f"got {name!r} ({INCOMPLETE!r}, {REPLACED!r} and {RESUMABLE!r} mark unfinished "
                                   "folders); "
                                   f"allowed: {allowed}")
    return name


# the type / allowed column of the settings reference for the parsers above (params.describe)
device_setting.describe = lambda: DEVICE_REQUESTS.replace(", ", " | ")
run_name.describe = lambda: "a relative folder name (plain names joined by /)"


def _config_format(value: Any, key: str) -> int:
    """Only this certdp's layout of config.yaml (a config written by another is not read as this one)."""
    v = integer(value, key)
    if v != CONFIG_FORMAT:
        raise ConfigError(key, f"got {v} (a config.yaml of another layout); allowed: {CONFIG_FORMAT}, the layout of "
                               "this certdp (leave config_format out)")
    return v


_config_format.describe = lambda: f"{CONFIG_FORMAT} (this certdp's layout)"


def _certificate_names() -> tuple[str, ...]:
    from certdp.bounds import CERTIFICATES
    return tuple(sorted(CERTIFICATES))


@dataclass(frozen=True)
class RunOptions:
    """The top-level keys of every command (``configs/base.yaml``): what was run, its seed, and
    where and how its folder is written (read by the CLI, not by the computation).  Each field
    but ``device_request`` declares its setting; ``device`` holds the resolved device of the
    ``device`` request (resolved when a value is built, never when certdp is imported)."""
    command: str | None = setting(None, partial(text, none=True),
                                  help="the command that made the run (set by each command's config; recorded in config.yaml)")
    seed: int = setting(0, SEED, help="seed of data generation, splits, initialisation, batch plan and noise")
    default_certificate: str = setting("ibp", partial(choice, allowed=Names(_certificate_names)),
                                       help="the engine certificate=auto resolves to (presets change it)")
    progress: bool = setting(True, boolean, help="progress bars on a terminal")
    out_root: str = setting("outputs", text,
                            help="folder holding <command>/<dataset>/<run>/ (an absolute path is taken as given)")
    run: str = setting("run", run_name, help="the run folder below <out_root>/<command>/<dataset>/ (default: time + suffix)")
    overwrite: bool = setting(False, boolean, help="replace a finished run that holds the same folder")
    selection: str = setting("grid", partial(choice, allowed=SELECTION_MODES),
                             help="grid: tuned arms choose among private candidates | fixed: one candidate each")
    config_format: int = setting(CONFIG_FORMAT, _config_format,
                                 help="the layout of config.yaml (certdp rerun reads back only this one; leave it out)")
    device: str = setting("auto", device_setting, help="where training and AGT compute: auto (a GPU if seen) | cpu | cuda | cuda:N",
                          resolve_on_use=True)
    # checkpoints and progress (docs/resume-and-progress.md): how a run is carried out, not what it computes
    resume: bool = setting(False, boolean, help="continue the checkpoint of a run with the same settings (certdp resume RUN_DIR)")
    checkpoint_minutes: float | None = setting(5.0, partial(real, lo=0, none=True,
                                                            null_means="checkpoints only on SIGINT/SIGTERM"),
                                               help="minutes between checkpoints of the long loops (0: every step)")
    progress_seconds: float | None = setting(60.0, partial(real, lo=0, none=True, null_means="no progress records"),
                                             help="seconds between one-line progress records in log.txt (and stderr without a tty)")
    device_request: str = field(default="auto", metadata={NOT_A_SETTING: "the device request as given (auto | cpu | cuda | cuda:N)"})

    def require_cpu(self, what: str) -> None:
        """Refuse an explicit CUDA request for a command that computes on the CPU only (``auto``
        is not a request for a GPU: it runs there on the CPU)."""
        if self.device_request not in ("auto", "cpu"):
            raise ConfigError("device", f"{what} computes on the CPU only; allowed: auto, cpu")


def run_fields() -> dict[str, Field]:
    """The top-level settings: the declaration of :class:`RunOptions`."""
    return settings_of(RunOptions)


def top_level(cfg: Mapping[str, Any] | None, *, command: str, sections: tuple[str, ...]) -> tuple[RunOptions, dict]:
    """The run options and the raw sections of a composed config; a top-level key that is
    neither is refused (``+foo=1`` is a typo, not a setting to ignore)."""
    cfg = dict(cfg or {})
    fields = run_fields()
    unknown = [k for k in cfg if k not in fields and k not in sections]
    if unknown:
        raise ConfigError(str(unknown[0]), f"unknown setting of certdp {command}; allowed: "
                                           f"{', '.join(list(sections) + list(fields))}")
    run = {k: f.parse(cfg.get(k, f.default), k) for k, f in fields.items()}
    run["command"] = run["command"] or command
    run["device_request"] = str(cfg.get("device", fields["device"].default)).strip().lower()
    return RunOptions(**run), {s: cfg.get(s) for s in sections}
