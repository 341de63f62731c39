"""Compose a command line with Hydra and parse every job's settings, before any job runs.

``certdp <command> ARGS`` is composed here exactly as Hydra will compose it (sweeps expanded
job by job, ``glob()`` against the config groups), so that a bad value anywhere in a sweep, and
Hydra's own errors (an unreadable override, a key that does not exist, an interpolation that
does not resolve, a sweep type the basic sweeper cannot run), are refused in one line before
anything is written.  A sweep is also checked against its data where that is cheap
(:func:`check_sweep_data`): ``-m dataset.path=good.csv,nope.csv`` is refused before job 0 runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from certdp.errors import ConfigError
from certdp.settings import config_dir, parse
from certdp.settings.training import refuse_explicit_options

MAX_SWEEP_JOBS = 10_000          # each job is composed and checked before the first runs
MAX_CHECKED_TABLE_BYTES = 32 << 20   # a sweep's csv tables up to this size are read and checked in full

# ------------------------------------------------------------------ the command line
def _group_options(group: str) -> list[str] | None:
    d = config_dir() / group
    if not d.is_dir():
        return None
    return sorted(p.stem for p in d.glob("*.yaml"))


def _group_allowed(group: str, opts: list[str]) -> str:
    """The options of a config group, or for a folder of groups (``preset``) its subgroups."""
    if opts:
        return ", ".join(opts)
    subs = sorted(p.name for p in (config_dir() / group).iterdir() if p.is_dir())
    return "; ".join(f"+{group}/{s}=" + "|".join(_group_options(f"{group}/{s}") or ["..."]) for s in subs) or "none"


def validate_overrides(args: list[str]) -> None:
    """Unknown config-group options (``dataset=nope``, ``+preset=nope``) as a :class:`ConfigError`
    naming the options, before Hydra prints its own several lines."""
    for a in args:
        if a.startswith("-") or "=" not in a:
            continue
        key, val = a.split("=", 1)
        key = key.lstrip("+~")
        if "." in key:
            continue
        opts = _group_options(key)
        if opts is None:
            continue
        vals = val.strip()
        if vals.startswith(("choice(", "range(", "glob(", "interval(")):
            continue
        for v in vals.split(","):
            v = v.strip()
            if v and v not in opts and v != "null":
                _refuse(f"{key}={v}: unknown {key}; allowed: {_group_allowed(key, opts)}")


# Hydra's own flags (its argument parser, hydra._internal.utils.get_args_parser) that certdp passes
# on, by their argparse names; the others (--run, --config-path, --config-name, --hydra-help,
# --version, --shell-completion, --experimental-rerun) are certdp's to decide, not Hydra's
PASSED_ON = ("multirun", "cfg", "package", "resolve", "info", "config_dir")
FLAGS_ALLOWED = ("-m/--multirun, --cfg job|hydra|all, --package PKG, --resolve, --info [TOPIC], --config-dir DIR, "
                 "--help")


def _refuse(message: str) -> None:
    key, _, rest = message.partition(": ")
    raise ConfigError(key, rest)


def split_command_line(command: str, args: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra flags, overrides) of a command line, read by Hydra's own argument parser (flags
    anywhere: ``certdp agtr a=1 -m b=1,2`` is ``--multirun a=1 b=1,2``); each flag is returned by
    its long name.  A flag certdp does not pass on, Hydra's parser's refusal (a missing or unknown
    value), a ``--config-dir`` that is not a folder and a mix of modes are refused in one line."""
    import re

    from hydra._internal.utils import get_args_parser
    parser = get_args_parser()
    actions = [a for a in parser._actions if a.dest in PASSED_ON]
    names = {o for a in actions for o in a.option_strings}
    for a in args:
        if a.startswith("-") and a.partition("=")[0] not in names:
            _refuse(f"{a.partition('=')[0]}: unknown option of certdp {command}; allowed: {FLAGS_ALLOWED}")

    def error(message: str):
        m = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        _refuse(f"{m.group(1)}: {m.group(2)}; allowed: {FLAGS_ALLOWED}" if m else f"{args[0]}: {message}; allowed: "
                f"{FLAGS_ALLOWED}")
    parser.error = error
    ns = parser.parse_intermixed_args(args)
    given = {max(a.option_strings, key=len): getattr(ns, a.dest) for a in actions
             if getattr(ns, a.dest) not in (None, False)}
    flags = [x for flag, v in given.items() for x in ([flag] if v is True else [flag, str(v)])]
    if "--config-dir" in given and not Path(given["--config-dir"]).expanduser().is_dir():
        _refuse(f"--config-dir: {given['--config-dir']} is not a folder; allowed: an existing folder of extra config files")
    modes = [f for f in ("--cfg", "--info", "--multirun") if f in given]
    if len(modes) > 1:
        modes = [{"--multirun": "-m"}.get(m, m) for m in modes]
        _refuse(f"{modes[1]}: cannot be combined with {modes[0]}; allowed: one of -m (run a sweep), --cfg (print the "
                "config), --info (print Hydra's information)")
    printing = [f for f in ("--package", "--resolve") if f in given]
    if printing and not any(m in modes for m in ("--cfg", "--info")):
        _refuse(f"{printing[0]}: only with --cfg or --info (it changes what they print); allowed: --cfg job "
                f"{printing[0]}{' PKG' if printing[0] != '--resolve' else ''}")
    return flags, list(ns.overrides or ())


# ------------------------------------------------------------------ composing every job
def _hydra_error(e: Exception, overrides: list[str]) -> tuple[str, str]:
    """(key, problem) for Hydra's or OmegaConf's composition error ``e``: the key is the first
    override (or its config group) that Hydra's message names in quotes, else OmegaConf's
    ``full_key``; the problem is Hydra's own message (its config search path left out)."""
    import re
    text = " ".join(str(e).split())
    keys = [a.split("=", 1)[0].lstrip("+~") for a in overrides]
    quoted = re.findall(r"'([^']+)'", text)
    key = next((k for q in quoted for k in (q, q.rsplit("/", 1)[0]) if k in keys), None)
    key = key or (str(getattr(e, "full_key", "") or "") or "config")
    what = text.split(" full_key:")[0].split(" Config search path:")[0][:300].rstrip(".")
    cause = " ".join(str(e.__cause__ or e.__context__ or "").split()).split(" full_key:")[0][:160]
    if cause and cause not in what:
        what += f" ({cause})"
    allowed = ("a plain value, or an interpolation of an existing key such as ${train.steps}"
               if "nterpolation" in type(e).__name__ or "nterpolation" in text else
               "overrides of the keys `certdp COMMAND --cfg job` shows (KEY=VALUE sets one, ~KEY removes one) and the "
               "config group options `certdp list` shows")
    return key, f"{what}; allowed: {allowed}"


def _parse_overrides(overrides: list[str], *, multirun: bool) -> None:
    """Refuse an unreadable override, a sweep without ``-m``, a sweep type the basic sweeper cannot run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    parser = OverridesParser.create()
    for a in overrides:
        key = a.split("=", 1)[0].lstrip("+~") or a
        try:
            (o,) = parser.parse_overrides([a])
        except HydraException as e:
            what = "a key=value setting is expected" if "=" not in a else f"cannot read the value of '{a}'"
            raise ConfigError(key, f"{what} (Hydra: {' '.join(str(e).split())[:160]}); allowed: values such as "
                                   f"5, 0.1, true, null, [1,2] or a quoted 'text'") from None
        if not o.is_sweep_override():
            continue
        if not multirun:
            raise ConfigError(key, f"'{a}' is a sweep, which runs only with -m; allowed: one value (a list is "
                                   f"written [a,b], a text with commas is quoted 'a,b'), or -m to run every point")
        if not o.is_discrete_sweep():
            kind = o.value_type.name.lower().replace("_sweep", "")
            raise ConfigError(key, f"'{a}': certdp's sweeper runs lists of points, not {kind}() "
                                   f"ranges (a sweeper plugin such as Optuna would); allowed: a comma list (a,b), "
                                   f"range(start,stop,step), choice(a,b) or glob(pattern)")


def compose_and_parse(command, overrides: list[str], *, multirun: bool, config_path: str,
                      config_name: str, configs: list | None = None) -> list:
    """Compose every job of the command line and parse its settings before Hydra runs any:
    a bad value in the third job of a sweep refuses the whole sweep before the first job
    writes anything, and Hydra's own errors (syntax, unknown keys, interpolations) become one
    line.  Returns the settings of every job, in Hydra's job order (each job runs on these, not on
    a second parse: :meth:`certdp.job.CommandLine.settings_of`); ``configs``, when given, receives the
    composed config of every job.  ``command``: the command's registry entry (its settings
    parser, :class:`certdp.commands.Command`) or its name (:func:`certdp.settings.parse`).  Raises :class:`ConfigError` naming the key of the first
    problem."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _parse_overrides(overrides, multirun=multirun)
    parse_job = command.parse if hasattr(command, "parse") else (lambda d: parse(command, d))
    out = []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=os.path.abspath(config_path), version_base=None):
            jobs = [overrides]
            if multirun:
                # with the config loader, glob(...) of a config group is expanded as Hydra's sweeper does
                parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
                try:
                    jobs = [job for batch in BasicSweeper.split_arguments(parser.parse_overrides(overrides), None)
                            for job in batch]
                except HydraException as e:
                    key, what = _hydra_error(e, overrides)
                    raise ConfigError(key, what) from None
                if len(jobs) > MAX_SWEEP_JOBS:
                    raise ConfigError("-m", f"the sweep holds {len(jobs):,} jobs; allowed: at most {MAX_SWEEP_JOBS:,} "
                                            "(split it into several sweeps)")
            for job in jobs:
                try:
                    d = OmegaConf.to_container(compose(config_name=config_name, overrides=job), resolve=True)
                except (HydraException, OmegaConfBaseException) as e:
                    key, what = _hydra_error(e, job)
                    raise ConfigError(key, what) from None
                out.append(parse_job(d))
                if configs is not None:
                    configs.append(d)
                cert = getattr(out[-1], "certificate", None)
                if cert is not None:      # an explicit engine option the chosen engine does not read
                    refuse_explicit_options(cert, [a.split("=", 1)[0].lstrip("+") for a in job
                                                   if not a.startswith("~")])
    finally:
        GlobalHydra.instance().clear()
    if len(jobs) > 1:
        check_sweep_data(out, jobs)
    return out


def check_sweep_data(settings: list, jobs: list[list[str]]) -> None:
    """The data checks that are cheap, for every job of a sweep before the first runs: each
    ``dataset.path`` and ``queries`` file exists, and each csv table of at most
    :data:`MAX_CHECKED_TABLE_BYTES` passes every check of its loader (columns, cells, rows).
    A bigger table is checked when its job starts."""
    from collections.abc import Mapping
    done: set = set()
    for i, st in enumerate(settings):
        ds = getattr(st, "dataset", None)
        if not isinstance(ds, Mapping):
            continue
        where = f"(sweep job {i} of {len(jobs)}: {' '.join(jobs[i])[:120]})"
        for key, value in (("dataset.path", ds.get("path")), ("queries", getattr(st, "queries", None))):
            if isinstance(value, str) and value and not Path(value).expanduser().exists():
                raise ConfigError(key, f"{value} does not exist {where}; allowed: an existing file for every job "
                                       "of the sweep")
        path = ds.get("path")
        if ds.get("name") != "csv" or not isinstance(path, str):
            continue
        ident = (path, ds.get("target"), tuple(ds.get("features") or ()), ds.get("dropna"), ds.get("task"))
        p = Path(path).expanduser()
        if ident in done or not p.is_file() or p.stat().st_size > MAX_CHECKED_TABLE_BYTES:
            continue
        done.add(ident)
        from certdp.data.tables import load_table
        try:
            load_table(p, target=ds.get("target"), features=ds.get("features"), dropna=bool(ds.get("dropna")),
                       labels=ds.get("task", "regression") != "regression")
        except ConfigError as e:
            raise ConfigError(e.key, _with_where(e.message, where)) from None


def _with_where(message: str, where: str) -> str:
    """``message`` with ``where`` put before its ``; allowed:`` part."""
    head, sep, tail = message.partition("; allowed:")
    return f"{head} {where}{sep}{tail}"
