"""The run boundary as objects: a :class:`CommandLine` (one ``certdp <command> ...``: its
command's registry entry, the settings of every job parsed before Hydra runs any, the runs it
landed, its signals) and a :class:`Job` (one run of it: its settings, its folder, its checkpoint
session).  Nothing here is kept in a module global: Hydra runs each job through the task
function the command line hands it (:meth:`CommandLine.execute`), and the checkpoint session
is the runner's for its duration only (:func:`certdp.checkpoint.active`).

A job computes into a staging folder beside its final place and is moved there only when every
file is written (:mod:`certdp.results`); every refusal is one line and exit 2; SIGINT and
SIGTERM exit 128 + signum with nothing half-written (:mod:`certdp.signals`)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from certdp import __version__, checkpoint, results
from certdp.commands import Command
from certdp.errors import ConfigError
from certdp.runs import (_overwrite_flag, _refuse_long_names, _refuse_taken, _run_paths, fail, file_log,
                         io_error_message, say)
from certdp.signals import Signals, ignore_signals, interrupt_now

log = logging.getLogger("certdp")


@dataclass
class Job:
    """One run of a command line: its number in Hydra's job order, its folder (staging and
    final), and once known its settings and its checkpoint session."""
    line: "CommandLine"
    number: int
    paths: results.RunPaths
    settings: Any = None
    session: checkpoint.Session | None = None


@dataclass
class CommandLine:
    """One ``certdp <command> ...``: ``command`` (its registry entry), ``signals`` (SIGINT and
    SIGTERM while it runs), ``parsed`` (the composed config and the settings of every job, in
    Hydra's job order, parsed before Hydra runs any:
    :func:`certdp.settings.compose.compose_and_parse`) and ``landed`` (the run folders it
    completed)."""
    command: Command
    signals: Signals = field(default_factory=Signals)
    parsed: list[tuple[dict, Any]] = field(default_factory=list)
    landed: list[Path] = field(default_factory=list)

    def settings_of(self, d: dict, number: int) -> Any:
        """The settings of job ``number`` (its resolved config ``d``): the command line's parse of
        it when the config it composed for that job is this one, so a job is parsed once; parsed
        here otherwise (a job launched in another process by a launcher plugin, which composes it
        again).  ``run`` differs between two compositions (a timestamp and a random suffix), so it
        is the one key read again."""
        import dataclasses
        if 0 <= number < len(self.parsed):
            composed, settings = self.parsed[number]
            if {k: v for k, v in composed.items() if k != "run"} == {k: v for k, v in d.items() if k != "run"}:
                if composed.get("run") == d.get("run"):
                    return settings
                from certdp.settings.base import run_fields
                run = dataclasses.replace(settings.run, run=run_fields()["run"].parse(d.get("run"), "run"))
                return dataclasses.replace(settings, run=run)
        return self.command.parse(d)

    def discard_unstarted(self) -> None:
        """After an interruption outside every job (Hydra starting or ending one): the staging
        folder Hydra made for a job whose :meth:`execute` had not begun, if any, is removed
        (Hydra records it as ``hydra.runtime.output_dir`` before it creates it)."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf
        cfg = HydraConfig.instance().cfg
        out = OmegaConf.select(cfg, "hydra.runtime.output_dir", default=None, throw_on_missing=False) \
            if cfg is not None else None
        if not out:
            return
        try:
            paths = results.RunPaths.from_output_dir(out)
        except ValueError:                  # not a staging folder's name: nothing of ours
            return
        if paths.staging.exists():
            results.discard(paths)


    def execute(self, cfg, out_dir: Path, *, number: int = -1) -> None:
        """Run job ``number`` of the command line (called inside Hydra with its config and its
        output folder, the run's staging folder): compute, write every file into the staging
        folder, then move it into place.

        Every refusal is one line and exit 2 (bad settings, missing data, a taken run folder, a
        write error such as a full disk); SIGINT/SIGTERM exit 130/143.  In each of these cases the
        staging folder is deleted, so no partial results remain."""
        from omegaconf import OmegaConf

        from certdp.data.sources import DataUnavailable
        entry, landed_before = self.command, self.landed
        command = entry.name
        job = Job(self, number, _run_paths(out_dir, "hydra.run.dir (or hydra.sweep.subdir)"))
        out_root = cfg.get("out_root", None)
        landed: Path | None = None
        with contextlib.ExitStack() as logs:     # log.txt is closed however the run ends
            try:
                logs.enter_context(file_log(job.paths.staging / "log.txt"))
                overwrite = _overwrite_flag(cfg.get("overwrite", False))
                _refuse_long_names(job.paths.final, out_root)
                d = OmegaConf.to_container(cfg, resolve=True)
                job.settings = settings = self.settings_of(d, number)
                from certdp import resuming
                if settings.run.resume and resuming.holds_this_run(job.paths.final, command, d) \
                        and not results.resumable_dir(job.paths.final).exists():
                    results.discard(job.paths)           # a resumed sweep keeps the jobs it finished
                    landed_before.append(job.paths.final)
                    say(f"certdp {command}: {job.paths.final} already holds this run (same settings and inputs), kept")
                    return
                _refuse_taken(job.paths, overwrite, resume=settings.run.resume)
                try:
                    runner = entry.load_runner()
                except ModuleNotFoundError:
                    fail(f"{command}: not available in this build; allowed: the commands `certdp --help` lists")
                inputs = results.input_records(d)        # the files as this run reads them (run.json)
                results.write_config(job.paths.staging / results.CONFIG_FILE, d)
                job.session, resumed = resuming.resume_session(command, d, settings.run, job.paths, inputs=inputs,
                                                               interrupt=interrupt_now,
                                                               log_file=job.paths.staging / "log.txt")
                if resumed != job.paths:             # the newest checkpoint of these settings names the run
                    job.paths = resumed
                    _refuse_taken(job.paths, overwrite, resume=True)
                with checkpoint.active(job.session):
                    frames = runner(settings, progress=settings.run.progress and sys.stderr.isatty())
                # A runner may ask for a non-zero exit after its files are written (audit violations).
                code = int(frames.pop("_exit_code", 0)) if "_exit_code" in frames else 0
                if not code:
                    check_frames(frames)
                written = results.write_outputs(job.paths.staging, frames)
                results.write_run_record(job.paths.staging, command=command, version=__version__, inputs=inputs)
                with self.signals.deferred():
                    try:
                        landed = results.commit(job.paths, overwrite=overwrite)
                    except results.RunExists as e:
                        landed = results.commit_elsewhere(job.paths)
                        typer.echo(f"certdp: warning: run: {e.path} {e.reason}; this run was written to {landed}", err=True)
                if job.session is not None and job.session.own_folder() is not None:
                    shutil.rmtree(job.session.own_folder(), ignore_errors=True)    # the run landed: its checkpoint is spent
                for name, rows in written:
                    log.info("wrote %s (%d rows)", landed / name, rows)
                landed_before.append(landed)
                say(f"certdp {command}: wrote " + ", ".join(str(landed / name) for name, _ in written))
                if code:
                    raise SystemExit(code)
            except SystemExit:
                if landed is None:
                    results.discard(job.paths)
                raise
            except (ConfigError, DataUnavailable) as e:
                results.discard(job.paths)
                data = isinstance(e, DataUnavailable) or isinstance(e.__context__, DataUnavailable)
                if job.session is not None and not job.session.resumed and job.session.own_folder() is not None \
                        and not data:
                    # a checkpoint this very process began, of settings that cannot complete; one it
                    # resumed is the user's and stays, whatever the refusal
                    shutil.rmtree(job.session.own_folder(), ignore_errors=True)
                fail(data_refusal(e) if data else str(e))
            except OSError as e:
                if landed is None:
                    results.discard(job.paths)
                    fail(io_error_message(e, out_root))
                problem, _, allowed = io_error_message(e).partition("; allowed: ")
                fail(f"{problem}; the run itself is complete: {landed}; allowed: {allowed}")
            except KeyboardInterrupt as e:
                ignore_signals()
                if landed is not None:
                    self.signals.interrupted(e, f"the run had finished: {landed}")
                from certdp.resuming import interrupted_checkpoint
                what = f"({job.paths.final} " + ("is unchanged)" if job.paths.final.exists() else "does not exist)")
                what += interrupted_checkpoint(job.session, e, log_file=job.paths.staging / "log.txt")
                results.discard(job.paths)
                n = len(landed_before)
                self.signals.interrupted(e, f"this run was not written {what}; the {n} runs before it are complete"
                                         if n else f"nothing was written {what}")


def data_refusal(e: Exception) -> str:
    """The one line of a dataset that cannot be had (missing, or failing its checksum): the
    loaders' message names the remedies; the allowed part says what would be accepted."""
    msg = str(e) if str(e).startswith("dataset: ") else f"dataset: {e}"
    if "; allowed" not in msg:
        msg += ("; allowed: the dataset's file present and intact (dataset.path=FILE, $CERTDP_DATA_DIR, or a "
                "download when not offline)")
    return msg


def check_frames(frames: dict) -> None:
    """The last guard before anything is written: every table has rows and no infinite number
    (a NaN is an intentionally empty cell, e.g. the epsilon of a noise-free arm)."""
    import numpy as np
    for name, df in frames.items():
        if Path(name).stem in (Path(results.CONFIG_FILE).stem, Path(results.RUN_MARKER).stem):
            raise RuntimeError(f"{name}: a runner returned a frame named like the run's own record")
        if isinstance(df, (dict, str)):             # a JSON document (released models) or a text, not a table
            continue
        if df is None or len(df) == 0:
            raise ConfigError(name, "the run produced no rows; allowed: settings that select at least one arm")
        if "dp_end_to_end" not in df.columns:       # every row says whether its epsilon holds end to end
            raise RuntimeError(f"{name}: a runner returned rows without the dp_end_to_end column "
                               "(certdp.certify.with_provenance)")
        num = df.select_dtypes("number")
        inf = np.isinf(num.to_numpy(dtype=float))
        if inf.any():
            col = num.columns[inf.any(0).argmax()]
            raise ConfigError(f"{name}.{col}", f"{int(inf[:, list(num.columns).index(col)].sum())} value(s) are not "
                                               "finite (a bound or a metric overflowed float64); allowed: settings "
                                               "with finite results (e.g. a smaller train.lr)")
