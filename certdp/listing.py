"""What ``certdp list`` prints: the names a command line may use (datasets, models,
certificates, releases, accountants, commands) and ``certdp list settings [COMMAND]``, every
setting a command reads, from the declarations (as docs/settings.md).  Interface layer: it prints
on standard output and refuses in one line; :mod:`certdp.cli` passes the command table."""

from __future__ import annotations

from typing import Mapping, Sequence

from certdp.runs import fail, say

# the key=value settings of `certdp figures` (not a Hydra command): key -> (default, what it takes)
FIGURES_SETTINGS: dict[str, tuple[str, str]] = {
    "profile": ("paper", "quick | paper: the grid each figure runs"),
    "jobs": ("1", "an integer >= 1: runs at once"),
    "launcher": ("basic", "basic | joblib | submitit_local | submitit_slurm: each run a one-job Hydra multirun "
                          "(hydra.launcher.*=... are passed on)"),
    "out_root": ("outputs", "a folder: the runs, and the figures in <out_root>/figures"),
}


def list_settings(command: str | None, *, commands: Sequence[str], run_commands: Sequence[str]) -> None:
    """Every declared setting (of ``command``, or of every command): key, default, type /
    allowed, help -- from the declarations, as docs/settings.md (tools/settings_doc.py).
    ``commands``: every command ``certdp list`` names; ``run_commands``: the Hydra commands.
    ``rerun`` and ``resume`` list the run options they may be given, ``figures`` its own
    settings; a command without key=value settings says so."""
    from certdp.resuming import RERUN_SETTINGS, RESUME_SETTINGS
    from certdp.settings.schema import declarations
    if command is not None and command not in commands:
        fail(f"{command}: no such command; allowed: {', '.join(commands)}")
    if command == "figures":
        for key, (default, what) in FIGURES_SETTINGS.items():
            say(f"  {key} = {default}: {what}")
        return
    only = {"rerun": RERUN_SETTINGS, "resume": RESUME_SETTINGS}.get(command or "")
    if command is not None and command not in run_commands and only is None:
        say(f"  certdp {command} takes no key=value settings; `certdp {command} --help` lists its options")
        return
    seen: set = set()
    for d in declarations():
        if only is not None:
            if d.key not in only or d.key in seen:       # the top-level run options, once each
                continue
            seen.add(d.key)
        elif command is not None and command not in d.commands:
            continue
        where = f" [{d.where}]" if d.where else ""
        say(f"  {d.key}{where} = {d.default_text}: {d.allowed}\n      {d.field.help}")


def list_names(commands: Sequence[str], config_dir, model_options: Mapping | Sequence) -> None:
    """Datasets (where each is loaded from, whether it is present), models, certificates,
    releases, accountants and ``commands``."""
    import yaml

    from certdp.bounds import CERTIFICATES
    from certdp.data import entries
    from certdp.data.sources import where_from
    from certdp.privacy import mechanisms
    from certdp.privacy.accounting import ACCOUNTANTS

    say("datasets:")
    for name, e in entries().items():
        cfg_path = config_dir / "dataset" / f"{name}.yaml"
        dcfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else {}
        where, present = where_from(name, e.files(dcfg or {}), (dcfg or {}).get("path"))
        say(f"  {name:<12} {e.task:<10} {'present' if present else 'absent ':<8} {e.summary}\n"
            f"  {'':<12} from: {where}")
    say("models: " + ", ".join(model_options or []))
    say("certificates (certificate=NAME; its certificate.<option>s):")
    for name, cls in sorted(CERTIFICATES.items()):
        say(f"  {name:<16} {', '.join(cls.options) or 'no options'}")
    for query, used_by in (("prediction", "agtr, certify, audit, pate"), ("parameter", "ags, hybrid head")):
        say(f"releases of a {query} (privacy.releases of {used_by}):")
        for name in mechanisms.names(query):
            cls = mechanisms.REGISTRY[name]
            say(f"  {name:<16} {cls.kind}, {cls.regime} DP: {cls.help()}")
    say("accountants (compose: ags.composition; dpsgd: dpsgd.optimised.accountants, dpsgd.accountant):")
    for name, cls in ACCOUNTANTS.items():
        say(f"  {name:<16} {'+'.join(cls.uses):<14} {' '.join((cls.__doc__ or '').split())}")
    say("commands: " + ", ".join(commands))
