"""Compose a command line with Hydra and parse every job's settings, before any job runs.

``certdp <command> ARGS`` is composed here exactly as Hydra will compose it (sweeps expanded
job by job), so that a bad value anywhere in a sweep, and Hydra's own errors (an unreadable
override, a key that does not exist), are refused in one line before anything is written.
"""

from __future__ import annotations

import os

from certdp.errors import ConfigError
from certdp.settings import parse

_HYDRA_ERRORS = (
    (r"Could not override '([^']+)'", "unknown setting; to add it use +{key}=..., but certdp reads only known keys"),
    (r"Could not append to config\. An item is already at '([^']+)'", "already set; drop the + to change it"),
    (r"Could not delete from config\. '([^']+)' does not exist", "not set, so it cannot be removed"),
    (r"Could not delete from config\. The value of '([^']+)'", "holds another value than the one given"),
    (r"Could not find '([^']+)'", "no such config group option; allowed: the files in configs/"),
)


def _hydra_error(e: Exception) -> tuple[str, str]:
    """(key, problem) for Hydra's composition error ``e``."""
    import re
    text = " ".join(str(e).split())
    for pattern, what in _HYDRA_ERRORS:
        m = re.search(pattern, text)
        if m:
            key = m.group(1).rsplit("/", 1)[0] if "Could not find" in pattern else m.group(1)
            cause = e.__cause__ or e.__context__
            detail = f" (Hydra: {' '.join(str(cause).split())[:160]})" if cause is not None else ""
            return key, f"{what.format(key=key)}{detail}"
    return "config", text[:300]


def compose_and_parse(command: str, args: list[str], *, config_path: str, config_name: str) -> list:
    """Compose every job of the command line and parse its settings before Hydra runs any:
    a bad value in the third job of a sweep refuses the whole sweep before the first job
    writes anything, and Hydra's own errors (syntax, unknown keys) become one line.  Command
    lines with other Hydra flags (``--cfg``, ``--help``, ...) are left to Hydra.  Returns the
    settings of every job; raises :class:`ConfigError` naming the key of the first problem."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    flags = [a for a in args if a.startswith("-")]
    if any(a not in ("-m", "--multirun") for a in flags):
        return []
    overrides = [a for a in args if not a.startswith("-")]
    parser = OverridesParser.create()
    for a in overrides:
        try:
            parser.parse_overrides([a])
        except HydraException as e:
            key = a.split("=", 1)[0].lstrip("+~") or a
            what = "a key=value setting is expected" if "=" not in a else f"cannot read the value of '{a}'"
            raise ConfigError(key, f"{what} (Hydra: {' '.join(str(e).split())[:160]}); allowed: values such as "
                                   f"5, 0.1, true, null, [1,2] or a quoted 'text'") from None
    if flags:
        jobs = [job for batch in BasicSweeper.split_arguments(parser.parse_overrides(overrides), None) for job in batch]
    else:
        jobs = [overrides]
    out = []
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.abspath(config_path), version_base=None):
        for job in jobs:
            try:
                d = OmegaConf.to_container(compose(config_name=config_name, overrides=job), resolve=True)
            except (HydraException, OmegaConfBaseException) as e:
                key, what = _hydra_error(e)
                raise ConfigError(key, what) from None
            out.append(parse(command, d))
    GlobalHydra.instance().clear()
    return out
