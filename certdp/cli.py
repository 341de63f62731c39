"""The ``certdp`` command line: Typer parses, Hydra composes, one runner computes.

Every experiment command is routed through a real ``hydra.main`` so that overrides
(``key=value``, ``+key=value``, ``~key``), sweeps (``-m``), launchers and ``--cfg job`` work as in
any Hydra app.  This module only parses and dispatches.
"""

from __future__ import annotations

import os
import signal
import sys


def _startup_signal(signum, frame) -> None:
    """SIGINT/SIGTERM while the command line starts (imports take seconds; nothing is written
    yet): one line and exit 128 + signum, not a KeyboardInterrupt traceback or a silent end.
    :func:`main` replaces this handler once it runs."""
    os.write(2, f"certdp: interrupted by {signal.Signals(signum).name} during start-up; nothing was written\n".encode())
    os._exit(128 + signum)


def _catch_startup_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, _startup_signal)
        except ValueError:        # not the main thread
            pass


# The command line starts here: ``python -m certdp.cli`` runs this module as __main__, and the
# ``certdp`` script (argv[0]) imports it to call main().  Before the imports below (torch, pandas,
# Hydra: seconds), so that a signal during them is one line too.  A program importing certdp or
# certdp.cli as a library keeps its own handlers (`import certdp` has no side effects).
if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "certdp":
    _catch_startup_signals()

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from certdp import commands, results, tune_malloc
from certdp.errors import ConfigError
from certdp.job import CommandLine
from certdp.runs import (STDOUT, GuardedStdout, console_log, fail, io_error_message, say, stdout_problem,
                         stdout_warning)
from certdp.signals import Signals, ignore_signals
from certdp.settings import config_dir
from certdp.settings.compose import _group_options, compose_and_parse, split_command_line, validate_overrides

log = logging.getLogger("certdp")
results.register_resolvers()      # ${certdp.uid:} and ${certdp.incomplete:} of configs/base.yaml

# the commands that run one job each: one registry entry per command (certdp/commands/)
COMMANDS = commands.registry()

# the commands that are not one runner each (certdp list and usage errors name them all)
EXTRA_COMMANDS = ("rerun", "resume", "predict", "figures", "list")

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

def _print_version(value: bool) -> None:
    if value:
        from certdp import __version__
        typer.echo(f"certdp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the certdp version and exit.")) -> None:
    pass


CTX = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help", "-h"]}


def _stage_override(arg: str) -> str:
    """A user's ``hydra.run.dir=D`` / ``hydra.sweep.subdir=S`` keeps the staging suffix."""
    key, _, val = arg.partition("=")
    if key not in ("hydra.run.dir", "hydra.sweep.subdir") or "certdp.incomplete" in val:
        return arg
    if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
        return f"{key}={val[:-1]}${{certdp.incomplete:}}{val[-1]}"
    return f"{key}={val}${{certdp.incomplete:}}"


def dispatch(command: str, args: list[str], *, signals: Signals | None = None, config_path: str | None = None,
             config_name: str | None = None) -> None:
    """Run ``command`` through ``hydra.main`` with ``args`` as Hydra's command line (the
    primary config ``configs/<command>.yaml`` unless ``config_path``/``config_name`` say
    otherwise), as one :class:`~certdp.job.CommandLine`.  Every job of the command line is
    composed and checked first (:func:`certdp.settings.compose.compose_and_parse`); a command
    line that only prints (``--cfg``, ``--info``) goes to Hydra as it is."""
    import hydra
    from hydra.core.hydra_config import HydraConfig

    cdir = config_path or str(config_dir())
    line = CommandLine(COMMANDS[command], signals or Signals())
    try:
        flags, overrides = split_command_line(command, args)
        validate_overrides(overrides)
        if not any(f in flags for f in ("--cfg", "--info", "--config-dir")):     # (split_command_line: long names)
            configs: list = []
            jobs = compose_and_parse(line.command, overrides, multirun="--multirun" in flags,
                                     config_path=cdir, config_name=config_name or command, configs=configs)
            line.parsed = list(zip(configs, jobs))      # each job runs on these settings (parsed once)
    except ConfigError as e:
        fail(str(e))

    @hydra.main(version_base=None, config_path=cdir, config_name=config_name or command)
    def _job(cfg) -> None:
        tune_malloc()                 # a launcher's worker process runs only this function
        hc = HydraConfig.get()
        line.execute(cfg, Path(hc.runtime.output_dir), number=int(hc.job.get("num", 0) or 0))

    old = sys.argv
    sys.argv = ["certdp"] + flags + [_stage_override(a) for a in overrides]
    HydraConfig.instance().cfg = None            # the folder Hydra records from here on is this command line's
    try:
        with line.signals.handled(), console_log():
            try:
                _job()
            except KeyboardInterrupt as e:   # before or after a job (composition, launcher)
                ignore_signals()
                line.discard_unstarted()
                n = len(line.landed)
                line.signals.interrupted(e, f"the {n} runs before it are complete" if n else "no run was completed")
            except SystemExit as e:
                if e.code in (0, 1, None):   # the runs landed (1: a finding such as an audit violation)
                    stdout_warning(line.landed)
                raise
        stdout_warning(line.landed)
    finally:
        sys.argv = old


def _settings_help(entry: "commands.Command") -> str:
    """The sections the command reads (its registry entry's)."""
    return (f"Settings: the top-level run options and the sections {', '.join(entry.sections)}; `certdp list settings "
            f"{entry.name}` lists every key with its default, allowed values and help (docs/settings.md).")


def _make_command(entry: "commands.Command"):
    ex1, ex2 = entry.examples

    def _cmd(ctx: typer.Context):
        dispatch(entry.name, list(ctx.args), signals=ctx.obj)

    _cmd.__name__ = entry.name
    _cmd.__doc__ = f"{entry.summary}\n\n{GROUPS_HELP}\n\n{_settings_help(entry)}\n\nExamples:\n\n  {ex1}\n\n  {ex2}"
    app.command(name=entry.name, context_settings=CTX)(_cmd)


for _entry in COMMANDS.values():
    _make_command(_entry)


def _replay(command: str, primary: dict, args: list[str], *, label: str, signals: Signals | None = None) -> None:
    """Run ``command`` with ``primary`` (a recorded config) as Hydra's primary config, written to a
    temporary folder for the run's duration: what ``certdp rerun`` and ``certdp resume`` do."""
    import tempfile

    from omegaconf import OmegaConf
    try:
        tmp_ctx = tempfile.TemporaryDirectory(prefix=f"certdp-{label}-")
        (Path(tmp_ctx.name) / f"{label}.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(primary)))
    except OSError as e:
        fail(f"TMPDIR: cannot write a temporary config ({e.strerror or e}); allowed: a writable TMPDIR")
    with tmp_ctx:
        dispatch(command, list(args), signals=signals, config_path=tmp_ctx.name, config_name=label)


def rerun(run_dir: str, args: list[str], signals: Signals | None = None) -> None:
    """Repeat a run from its ``config.yaml`` in a new run folder (:func:`certdp.resuming.rerun_config`
    says what is checked and replayed).  Same config and seed, so the same CSVs."""
    from certdp.resuming import rerun_config
    try:
        command, src, primary, warnings = rerun_config(run_dir, args, commands=tuple(COMMANDS))
    except ConfigError as e:
        fail(str(e))
    for w in warnings:
        typer.echo(f"certdp: warning: {w}", err=True)
    say(f"certdp rerun: {command} from {src}")
    _replay(command, primary, args, label="rerun", signals=signals)


@app.command("rerun", context_settings=CTX)
def rerun_cmd(ctx: typer.Context, run_dir: str = typer.Argument(..., metavar="RUN_DIR",
                                                                 help="A finished run's folder (it holds config.yaml).")):
    """Repeat a finished run from its config.yaml in a NEW run folder beside it (same
    out_root, a fresh timestamped name): same config and seed, so byte-identical CSVs.  Only
    out_root=DIR, run=NAME, overwrite=true and progress=false may be given.  Refused: a
    config.yaml edited since the run (run.json holds its SHA-256), and an input file
    (dataset.path, queries) that is gone or changed since the run.

    Examples:

      certdp rerun outputs/agtr/linear/2026-01-31_12-00-00_3fa9

      certdp rerun outputs/agtr/linear/2026-01-31_12-00-00_3fa9 out_root=/tmp/check
    """
    rerun(run_dir, list(ctx.args), ctx.obj)


def resume(run_dir: str, args: list[str], signals: Signals | None = None) -> None:
    """Continue an interrupted run from its checkpoint (``<run>.resumable``, written by
    :mod:`certdp.checkpoint`): the recorded config is replayed with ``resume=true`` and the run's
    own name and out_root, so it lands where the interrupted run would have landed, with the CSVs
    the uninterrupted run would have written."""
    from certdp.resuming import out_root_of, replay_config
    try:
        command, ck, primary, args = replay_config(run_dir, args, commands=tuple(COMMANDS), out_root_of=out_root_of)
    except ConfigError as e:
        fail(str(e))
    say(f"certdp resume: {command} from {ck}")
    _replay(command, primary, args, label="resume", signals=signals)


@app.command("resume", context_settings=CTX)
def resume_cmd(ctx: typer.Context, run_dir: str = typer.Argument(..., metavar="RUN_DIR",
                                                                   help="An interrupted run: its final path or its "
                                                                        "<run>.resumable checkpoint folder.")):
    """Continue an interrupted run from its last checkpoint (<run>.resumable, saved every
    checkpoint_minutes and on SIGINT/SIGTERM): same settings (the checkpoint records them),
    same run folder, and the CSVs an uninterrupted run writes.  Only progress=,
    checkpoint_minutes=, progress_seconds= and overwrite= may be given.  Refused, the
    checkpoint kept: an input file changed since the checkpoint, a state.pt not its own.  The
    same command line with resume=true continues the newest checkpoint of its settings as well.

    Examples:

      certdp resume outputs/agtr/california/2026-01-31_12-00-00_3fa9

      certdp resume outputs/agtr/california/2026-01-31_12-00-00_3fa9.resumable checkpoint_minutes=2
    """
    resume(run_dir, list(ctx.args), ctx.obj)


PREDICT_USAGE = "SOURCE --input TABLE [--output FILE [--overwrite]] [--mechanism NAME] [--epsilon EPS]"


@app.command("predict", context_settings=CTX)
def predict_cmd(ctx: typer.Context,
                run_dir: str = typer.Argument(None, metavar="SOURCE", help="A finished certdp ags run's folder, or its "
                                              "released.json (publish/released.json)."),
                input: str = typer.Option(None, "--input", help="A table (.csv, .tsv, .parquet) with the run's feature columns."),
                output: str = typer.Option(None, "--output", help="Write the predictions here (csv); default or -: standard output."),
                overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier predictions file at --output."),
                mechanism: str = typer.Option(None, "--mechanism", help="Only this release (e.g. cauchy_p)."),
                epsilon: str = typer.Option(None, "--epsilon", help="Only the release at this epsilon.")):
    """Apply the models an AGS run released (released.json: one seeded draw per release and
    epsilon, with its public-only preprocessing) to the raw rows of a table: predicted labels
    per release, and the accuracy when the table holds the run's target column (labels compared
    as the run coded them).  SOURCE is the run folder (its publish/released.json, or the
    released.json of a run made before) or a released.json file.  --output never replaces the
    input, a folder, a FIFO or a device, and an existing file only with --overwrite.

    Examples:

      certdp predict outputs/ags/csv/2026-01-31_12-00-00_3fa9 --input new_rows.csv

      certdp predict released.json --input test.csv --mechanism cauchy_p --epsilon 1 --output p.csv
    """
    import math
    from certdp.certify.released import PREDICTION_COLUMNS, load_released, predict, read_input, released_path
    if ctx.args:
        fail(f"{ctx.args[0]}: unexpected argument; allowed: {PREDICT_USAGE}")
    if run_dir is None:
        fail(f"RUN_DIR: missing; allowed: {PREDICT_USAGE} (SOURCE: a certdp ags run folder or its released.json)")
    if input is None:
        fail("--input: missing; allowed: --input TABLE (a .csv, .tsv or .parquet with the run's feature columns)")
    if epsilon is not None:
        try:
            epsilon = float(epsilon)
        except ValueError:
            epsilon = math.nan
        if not (math.isfinite(epsilon) and epsilon > 0):
            fail("--epsilon: not a finite number > 0; allowed: one of the run's epsilons")
    try:
        source = released_path(run_dir)
        out = None
        if output is not None and output != "-":          # "-": standard output, as leaving --output out
            try:
                out = results.check_output_path(output, protect=(input, source), overwrite=overwrite,
                                                header=",".join(PREDICTION_COLUMNS))
            except results.OutputRefused as e:
                fail(f"--output: {e}")
        header, data = read_input(input)
        rel = load_released(source)
        preds, summary = predict(rel, header, data, mechanism=mechanism, epsilon=epsilon, where=Path(input).name)
    except ConfigError as e:
        fail(str(e))
    if not rel.dp_end_to_end:
        typer.echo("certdp: warning: this release is not DP end to end (dp_end_to_end: false in released.json: a "
                   "labelled non-private shortcut shaped it)", err=True)
    if rel.publishable is False:
        typer.echo(f"certdp: warning: released.json is marked not publishable ({rel.note[:160]})", err=True)
    text = preds.to_csv(index=False, float_format=results.CSV_FLOAT_FORMAT)     # the same text in a file and on stdout
    if out is not None:
        try:
            results.atomic_write_text(out, text)
        except OSError as e:                              # e.filename: the temporary file beside out
            fail(f"--output: cannot write {out} ({e.strerror or e}); nothing was written; allowed: a file in a "
                 "writable folder with free space")
    elif not say(text.rstrip("\n")):
        fail(f"stdout: the predictions could not be written ({stdout_problem()}); nothing else was written; allowed: "
             "a standard output that takes every row, or --output FILE", code=1)
    for r in summary.itertuples():
        acc = f", accuracy {r.accuracy:.4f}" if "accuracy" in summary.columns else ""
        typer.echo(f"certdp predict: {r.mechanism} eps={r.epsilon:g}: {r.n_rows} rows{acc}"
                   + (f" -> {out}" if out is not None else ""), err=True)


@app.command("list")
def list_cmd(what: Annotated[Optional[str], typer.Argument(
                 metavar="settings", help="every setting (of COMMAND) with its default, allowed values and help.")]
             = None,
             command: Annotated[Optional[str], typer.Argument(metavar="COMMAND", show_default=False)] = None):
    """List datasets (with where each is loaded from and whether it is present), models,
    certificates, releases (mechanisms), accountants and commands; `certdp list settings
    [COMMAND]` lists every setting (of COMMAND) from its declaration (docs/settings.md)."""
    from certdp.listing import list_names, list_settings
    names = list(COMMANDS) + list(EXTRA_COMMANDS)
    if what is not None:
        if what != "settings":
            fail(f"{what}: nothing to list; allowed: settings [COMMAND], or nothing")
        list_settings(command, commands=names, run_commands=tuple(COMMANDS))
        return
    if command is not None:
        fail(f"{command}: unexpected argument; allowed: certdp list settings [COMMAND]")
    list_names(names, config_dir(), _group_options("model"))


@app.command("figures", context_settings=CTX)
def figures_cmd(ctx: typer.Context,
                list_: bool = typer.Option(False, "--list", help="List the figures (those named, or all) and their runs, then exit."),
                plot_only: bool = typer.Option(False, "--plot-only", help="Draw from existing runs only."),
                compare: bool = typer.Option(False, "--compare", help="Redraw and rewrite the paper-vs-certdp table "
                                             "(figures/reproduction.{csv,md}) from existing runs; runs nothing.")):
    """Every paper figure: run what is missing (resume), draw outputs/figures/<name>.{png,pdf,csv},
    the gallery outputs/figures/index.html and the paper's values beside certdp's in
    outputs/figures/reproduction.{csv,md} (--compare: from existing runs).  Not a Hydra command;
    arguments are figure names and key=value settings: profile=quick|paper (default paper), jobs=N (runs at once),
    launcher=basic|joblib|submitit_local|submitit_slurm (each run a one-job Hydra multirun;
    hydra.launcher.*=... are passed on), out_root=DIR.

    Examples:

      certdp figures profile=quick

      certdp figures agtr_pate agtr_gs profile=paper jobs=2
    """
    from certdp import figures as F
    from certdp.listing import FIGURES_SETTINGS
    opts = {k: default for k, (default, _) in FIGURES_SETTINGS.items()}
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
            fail(f"figures: unknown option '{a}'; allowed: --list, --plot-only, --compare, figure names and key=value settings")
        else:
            names.append(a)
    from certdp.data.params import choice, integer
    try:
        profile = choice(opts["profile"], "profile", allowed=F.PROFILES)
        jobs = integer(int(opts["jobs"]) if opts["jobs"].lstrip("-").isdigit() else opts["jobs"], "jobs", lo=1)
        if list_:                                         # the named figures (an unknown name refused), or all
            from certdp.figure_times import list_figures
            exps = F.load_experiments()
            if any(n not in exps for n in names):
                fail(f"figures: unknown {', '.join(n for n in names if n not in exps)}; allowed: {', '.join(exps)}")
            list_figures(profile, echo=say, out_root=opts["out_root"], resolve=F.resolve,
                         load=lambda _: {n: e for n, e in exps.items() if not names or n in names})
            return
        signals = ctx.obj or Signals()
        with signals.handled():
            try:
                entries = F.figures(names, profile=profile, out_root=opts["out_root"], jobs=jobs,
                                    launcher=opts["launcher"], launcher_args=tuple(launcher_args),
                                    plot_only=plot_only or compare, echo=say)
            except KeyboardInterrupt as e:
                ignore_signals()
                signals.interrupted(e, "finished runs are kept; run the same command again to resume")
    except ValueError as e:
        fail(str(e))
    except OSError as e:
        fail(io_error_message(e, opts["out_root"]))
    if any(e["missing"] for e in entries):
        raise SystemExit(1)


def usage_line(e) -> str:
    """One line for a usage error of the command line (click's are several lines)."""
    import re
    msg = " ".join(str(e.format_message()).split())
    ctx = getattr(e, "ctx", None)
    sub = ctx.info_name if ctx is not None and ctx.parent is not None else None
    where = f"certdp {sub}" if sub else "certdp"
    m = re.search(r"No such command '([^']+)'", msg)
    if m:
        names = list(COMMANDS) + list(EXTRA_COMMANDS)
        return f"{m.group(1)}: no such command; allowed: {', '.join(names)}"
    m = re.search(r"No such option: (\S+)", msg)
    if m:
        return f"{m.group(1).rstrip('.')}: no such option of {where}; allowed: the options `{where} --help` lists"
    m = re.search(r"unexpected extra argument(?:s|\(s\))? \(([^)]*)\)", msg)
    if m:
        return f"{m.group(1).split()[0]}: unexpected argument of {where}; allowed: the arguments `{where} --help` lists"
    return f"usage: {msg[:200]}; allowed: the usage `{where} --help` shows"


def main() -> None:
    """The console entry point: every failure one line on stderr with its exit code (2 refusal,
    1 a failed output stream or a finding, 128 + signum a signal), whatever happens to the
    output streams and whenever a signal comes."""
    try:
        from typer._click import exceptions as cx        # the click that typer runs (typer >= 0.2x vendors it)
    except ImportError:                                   # pragma: no cover - an older typer uses click itself
        from click import exceptions as cx
    tune_malloc()                   # process-wide: the command line's own process only (certdp/__init__.py)
    STDOUT.update(error=None, reported=False)       # a fresh command (main may run several times in one process)
    old = sys.stdout
    sys.stdout = GuardedStdout(old)
    signals = Signals()                             # this command line's SIGINT and SIGTERM
    try:
        with signals.handled():
            try:
                rv = app(standalone_mode=False, prog_name="certdp", obj=signals)
                code = rv if isinstance(rv, int) else 0
            except cx.NoArgsIsHelpError:                  # bare `certdp`: one line, as every refusal
                fail(f"COMMAND: missing; allowed: {', '.join(list(COMMANDS) + list(EXTRA_COMMANDS))} (`certdp "
                     "--help` says what each does)")
            except cx.UsageError as e:
                fail(usage_line(e), code=2)
            except cx.ClickException as e:
                fail(f"usage: {' '.join(e.format_message().split())[:200]}; allowed: see certdp --help", code=e.exit_code)
            except typer.Abort:
                code = 1
            except KeyboardInterrupt as e:
                ignore_signals()
                signals.interrupted(e, "nothing was written")
            except ConfigError as e:
                fail(str(e))
            if code == 130 and signals.last is not None:      # typer turned an interrupt into exit 130
                ignore_signals()
                signals.interrupted(KeyboardInterrupt(), "nothing was written")
            sys.stdout.flush()
            if STDOUT["error"] is not None and not STDOUT["reported"] and code == 0:
                fail(f"stdout: the output could not be written ({stdout_problem()}); allowed: a standard output "
                     "that takes the whole output", code=1)
    finally:
        sys.stdout = old
    raise SystemExit(code)


if __name__ == "__main__":
    main()
