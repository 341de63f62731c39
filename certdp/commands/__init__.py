"""The commands of ``certdp`` that run one job each (``certdp agtr``, ``certdp ags``, ...): one
registry entry per command, and everything about the command in it.

A :class:`Command` owns its name, its one-line summary and two examples (its ``--help``), the
settings sections it reads and the parser of its composed config (``configs/<name>.yaml``), its
runner (``"module:function"``, imported only when the command runs), and its cost model (the
loops of a run, counted from the settings: :mod:`certdp.estimate`).

**Adding a command** is one module in this package that defines ``COMMANDS = (Command(...),)``
and one primary config ``configs/<name>.yaml``; nothing else changes.  The command line, its
help, ``certdp list``, ``certdp rerun``/``resume`` and the estimate read this registry
(:func:`registry`).  Modules are found on the package's path (a folder ``certdp/commands/``
under another ``sys.path`` entry adds its modules too, as :func:`pkgutil.extend_path` would); a
module whose name starts with ``_`` is not read.

Layer: with the estimate, between the settings and the runners: an entry imports its settings
parser and the estimate's vocabulary (:mod:`certdp.estimate.work`), never a runner.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from certdp.registry import Registry

# a folder certdp/commands/ under any sys.path entry adds its modules (as pkgutil.extend_path does
# for a top-level package; certdp itself is one folder)
__path__ = list(__path__) + [d for d in dict.fromkeys(os.path.join(os.path.abspath(p), "certdp", "commands")
                                                      for p in sys.path if p)
                             if os.path.isdir(d) and not any(os.path.samefile(d, q) for q in __path__)]


@dataclass(frozen=True)
class Command:
    """One command: ``name`` (``certdp <name>``, primary config ``configs/<name>.yaml``);
    ``summary`` and ``examples`` (its help); ``sections`` (the config sections it reads beside
    the top-level run options); ``settings`` (composed config -> the frozen settings: a dataclass
    whose ``run`` field holds the top-level :class:`~certdp.settings.base.RunOptions`; a
    :class:`~certdp.errors.ConfigError` on the first bad value); ``runner`` (``"module:function"``:
    ``run(settings, *, progress) -> {name: DataFrame}``); ``cost`` (settings -> the run's
    :class:`~certdp.estimate.work.Work`, or None when its size is known only from its data; None:
    not modelled); ``order`` (where it stands in listings)."""
    name: str
    summary: str
    examples: tuple[str, str]
    sections: tuple[str, ...]
    settings: Callable[[Mapping[str, Any] | None], Any]
    runner: str
    cost: Callable[[Any], Any] | None = None
    order: float = 1000.0

    def parse(self, cfg: Mapping[str, Any] | None) -> Any:
        """The settings of a composed config of this command."""
        return self.settings(cfg)

    def load_runner(self) -> Callable:
        """The runner (imported now); ModuleNotFoundError when this build lacks it."""
        mod, fn = self.runner.split(":")
        return getattr(importlib.import_module(mod), fn)

    def work(self, settings) -> Any:
        """The loops of a run of ``settings`` (:class:`~certdp.estimate.work.Work`), or None when
        they are known only once the data is read."""
        if self.cost is None:
            from certdp.estimate.work import Work
            return Work(unmodelled=[f"certdp {self.name}"])
        return self.cost(settings)


@functools.cache
def registry() -> Registry[Command]:
    """Every command, in listing order (read once: the modules of this package)."""
    found: list[Command] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(getattr(mod, "COMMANDS", ()))
    table: Registry[Command] = Registry("command")
    for c in sorted(found, key=lambda c: (c.order, c.name)):
        table[c.name] = c
    return table


def get(name: str) -> Command | None:
    """The command ``name``, or None."""
    return registry().get(name)


def names() -> tuple[str, ...]:
    return tuple(registry())
