"""Running one job of a command: its run folder, its signals, its output streams, its one-line
failures.

A job computes into a staging folder beside its final place and is moved there only when every
file is written (:mod:`certdp.results`); SIGINT and SIGTERM are handled alike (nothing
half-written, exit 128 + signum); every refusal is one line ``certdp: error: <key>: ...`` and
exit 2.  :class:`RunGuard` (a Hydra callback, ``configs/base.yaml``) refuses a taken run folder,
a folder inside another run or with a staging name, and an unwritable ``out_root`` before Hydra
creates anything.

Standard output carries only the console log and the closing "wrote ..." line; the run's files
are its product.  A closed or failing standard output (``| head -c 1``, ``> /dev/full``) is
recorded the first time a write fails (:func:`say`, the console handler), later writes go to
``/dev/null``, the run goes on, and one line on stderr says what happened and whether the run
folder is complete (:func:`stdout_warning`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sys
from pathlib import Path

import typer

from certdp import __version__, checkpoint, results
from certdp.commands import Command
from certdp.errors import ConfigError
from certdp.settings import parse as parse_settings
from certdp.signals import (Interrupted, deferred_signals, handle_signals, ignore_signals, interrupt_now,  # noqa: F401
                            interrupted, last_signal)

log = logging.getLogger("certdp")


def fail(message: str, code: int = 2):
    typer.echo(f"certdp: error: {message}", err=True)
    raise SystemExit(code)


# ------------------------------------------------------------------------------- standard output
STDOUT: dict = {"error": None, "reported": False}   # the first OSError writing standard output; said so?


def stdout_failed(e: OSError) -> None:
    """Record a failed write to standard output and send later writes (and the interpreter's
    final flush, which would print "Exception ignored") to ``/dev/null``."""
    if STDOUT["error"] is None:
        STDOUT["error"] = e
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def say(text: str) -> bool:
    """Print a line on standard output; a closed or failing stream is recorded, not raised."""
    if STDOUT["error"] is not None:
        return False
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as e:
        stdout_failed(e)
    return STDOUT["error"] is None         # a guarded stream records the failure without raising


def stdout_problem() -> str | None:
    """What went wrong with standard output (``broken pipe``, ``no space left on device``), or None."""
    e = STDOUT["error"]
    if e is None:
        return None
    return "closed by its reader (broken pipe)" if e.errno == errno.EPIPE else _IO_WHAT.get(e.errno, e.strerror or str(e))


def stdout_warning(landed: list[Path]) -> None:
    """After the runs of a command line landed: one stderr line when their console log could
    not be written (the runs are whole; each log.txt holds its log)."""
    what = stdout_problem()
    if what is None or not landed or STDOUT["reported"]:
        return
    STDOUT["reported"] = True
    where = (f"the run is complete: {landed[0]}" if len(landed) == 1 else
             f"the {len(landed)} runs are complete in {os.path.commonpath([str(p) for p in landed])}")
    typer.echo(f"certdp: warning: standard output: {what}, so the console log was cut short; {where} (log.txt "
               "holds each run's whole log)", err=True)


class GuardedStdout:
    """Standard output for the duration of a command: a write or flush that fails (a closed pipe,
    a full disk) is recorded (:func:`certdp.runs.stdout_failed`) instead of raised, so that no
    writer -- ours, click's, Hydra's ``--cfg job`` -- ends in a traceback."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        if STDOUT["error"] is None:
            try:
                return self._stream.write(text)
            except OSError as e:
                stdout_failed(e)
        return len(text)

    def flush(self):
        if STDOUT["error"] is None:
            try:
                self._stream.flush()
            except OSError as e:
                stdout_failed(e)

    def __getattr__(self, name):
        return getattr(self._stream, name)


class ConsoleHandler(logging.StreamHandler):
    """The console log on standard output; a failing stream is recorded (:func:`stdout_failed`)
    instead of logging's "--- Logging error ---" traceback on stderr."""

    def emit(self, record) -> None:
        # progress records go to log.txt and (off a terminal) to stderr, not to the console log
        if STDOUT["error"] is None and record.name != checkpoint.PROGRESS_LOGGER:
            super().emit(record)

    def handleError(self, record) -> None:
        e = sys.exc_info()[1]
        if isinstance(e, OSError):
            stdout_failed(e)
        else:                                # pragma: no cover - a formatting bug: logging's report
            super().handleError(record)


# ------------------------------------------------------------------------------- logging
LOG_FORMAT, LOG_DATEFMT = "[%(asctime)s] %(message)s", "%H:%M:%S"


@contextlib.contextmanager
def log_handler(handler: logging.Handler, loggers: tuple[str, ...] = ("certdp",)):
    """Log ``loggers`` at INFO through ``handler`` alone for the duration of the block, then
    remove and close exactly that handler and restore each logger's level and propagation.

    certdp installs its own handlers instead of letting Hydra configure logging: Hydra's
    configuration (``logging.config.dictConfig``) closes every handler in the process, and a
    handler of another library (absl's, for one) closes the stream it writes to, which may be
    a caller's stream that outlives the command (a test capturing stderr).  The messages do
    not propagate to the root logger during the block, so a root handler that a library
    installed on import (opacus calls ``logging.basicConfig`` on stderr) does not repeat them
    on stderr, where a refusal must stay one line."""
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    saved = []
    for name in loggers:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level, lg.propagate))
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield handler
    finally:
        for lg, level, propagate in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
        handler.close()


def console_log():
    """The console log of a command: certdp's messages and Hydra's (a sweep's "Launching 2
    jobs") on standard output, as ``sys.stdout`` is now (a :class:`logging.StreamHandler`
    never closes its stream)."""
    return log_handler(ConsoleHandler(sys.stdout), ("certdp", "hydra"))


def file_log(path: Path):
    """A run's ``log.txt`` (opened now, closed when the run ends): certdp's messages."""
    return log_handler(logging.FileHandler(path, encoding="utf-8"))


STAGED: dict = {"paths": None}      # the staging folder of the run in progress (run mode)
LANDED: list = []                   # the run folders this command line completed


# ------------------------------------------------------------------------------- run folders
_IO_WHAT = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.ENOTDIR: "a part of the path is a file, not a folder", errno.EEXIST: "a file is in the way",
            errno.ENAMETOOLONG: "file name too long"}


def io_error_message(e: OSError, out_root: str | os.PathLike | None = None) -> str:
    """One line for an OSError: which key (out_root when the path lies below it), what went
    wrong, what to do."""
    what = _IO_WHAT.get(e.errno, e.strerror or str(e))
    path = e.filename or ""
    below = False
    if out_root is not None and path:
        root = os.path.abspath(out_root)
        p = os.path.abspath(path)
        below = p == root or p.startswith(root.rstrip(os.sep) + os.sep) or root.startswith(p.rstrip(os.sep) + os.sep)
    if below or (out_root is not None and not path):
        return (f"out_root: cannot write into {out_root} ({what}); nothing was written; "
                "allowed: a writable folder with free space (free some space or set out_root=DIR)")
    shown = str(path) if str(path).isprintable() else repr(str(path))
    return f"{shown or 'file'}: {what}; allowed: a writable path (check it and its permissions)"


def _overwrite_flag(value) -> bool:
    if isinstance(value, bool):
        return value
    fail(f"overwrite: got {value!r}; allowed: true (replace a finished run in the same folder) or false")


def _run_paths(output_dir, key: str) -> "results.RunPaths":
    try:
        return results.RunPaths.from_output_dir(output_dir)
    except ValueError as e:
        fail(f"{key}: {e}; allowed: certdp's default, or a folder name of its own without "
             f"{results.INCOMPLETE!r} and {results.REPLACED!r}")


# A staged, replaced or checkpointed run folder's name gets an ending: the longest is
# ".incomplete-<pid, up to 7 digits>-<4 hex digits>" (".replaced-..." and ".resumable" are shorter).
NAME_ENDING = len(results.INCOMPLETE) + 7 + 1 + 4


def _refuse_long_names(final: Path, out_root) -> None:
    """A folder name longer than the file system takes (255 bytes on most), the run's own name
    with room for :data:`NAME_ENDING`: one line naming ``out_root`` or ``run``, not an OSError."""
    final = Path(os.path.abspath(final))
    here = next((str(p) for p in final.parents if os.path.isdir(p)), os.sep)
    try:
        name_max = int(os.pathconf(here, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        name_max = 255
    root = Path(os.path.abspath(str(out_root))).parts if out_root is not None else ()
    last = len(final.parts) - 1
    for i, part in enumerate(final.parts):
        limit = name_max - (NAME_ENDING if i == last else 0)
        if len(os.fsencode(part)) > limit:
            key = "out_root" if i < len(root) and root[i] == part else "run"
            shown = part if len(part) <= 40 else f"{part[:20]}...{part[-12:]}"
            fail(f"{key}: the folder name {shown!r} is {len(os.fsencode(part))} bytes, more than the {limit} this file "
                 f"system allows" + (f" (a run folder's name keeps {NAME_ENDING} bytes for the ending it gets while "
                                     "it is staged)" if i == last else "")
                 + f"; allowed: a shorter {'out_root=DIR' if key == 'out_root' else 'run=NAME (a/b nests folders)'}")


def _refuse_misplaced(paths: "results.RunPaths") -> None:
    """A run folder inside another run or with a staging name: one line."""
    try:
        results.check_placement(paths.final)
    except results.RunPlacement as e:
        fail(f"run: {e.path} {e.reason}; allowed: a run folder of its own, outside every other run "
             "(choose another run=NAME or out_root=DIR)")


def _refuse_taken(paths: "results.RunPaths", overwrite: bool, *, resume: bool = False) -> None:
    """A run folder inside another run or with a staging name, or a taken one: one line.
    ``resume``: the run continues the checkpoint beside its folder, so the hint is what a resume
    accepts."""
    _refuse_misplaced(paths)
    try:
        results.check_free(paths.final, overwrite=overwrite)
    except results.RunExists as e:
        ck = results.resumable_dir(paths.final)
        if resume and ck.is_dir():
            hint = (f"overwrite=true to replace it with the resumed run (`certdp resume {ck} overwrite=true`), or move "
                    f"{e.path} elsewhere first" if e.reason == "already holds a finished run" else
                    f"move {e.path} elsewhere first (the checkpoint {ck} lands there)")
        else:
            hint = ("pass overwrite=true to replace it, or choose another run=NAME"
                    if e.reason == "already holds a finished run" else "choose another run=NAME or out_root=DIR")
        fail(f"run: {e.path} {e.reason}; allowed: {hint}")


try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:                          # pragma: no cover - hydra is a dependency
    _HydraCallback = object


class RunGuard(_HydraCallback):
    """Hydra callback (``hydra.callbacks.run_guard`` in ``configs/base.yaml``): before Hydra
    creates the output folder, refuse a taken run folder and an unwritable ``out_root`` with a
    one-line error (exit 2) instead of Hydra's traceback."""

    def on_run_start(self, config, **kwargs) -> None:
        paths = _run_paths(str(config.hydra.run.dir), "hydra.run.dir")
        _refuse_long_names(paths.final, config.get("out_root", None))
        overwrite = _overwrite_flag(config.get("overwrite", False))
        if config.get("resume", False) is True:   # a taken folder may hold this very run: execute decides
            _refuse_misplaced(paths)
        else:
            _refuse_taken(paths, overwrite)
        self._writable(paths.staging, config)
        STAGED["paths"] = paths         # removed by dispatch if interrupted before the job starts

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep = Path(os.path.abspath(str(config.hydra.sweep.dir)))
        _refuse_long_names(sweep / "0", config.get("out_root", None))
        try:
            results.check_placement(sweep / "job")          # the sweep folder and every folder above it
        except results.RunPlacement as e:
            fail(f"hydra.sweep.dir: {sweep} {e.reason.replace('lies inside', 'is or lies inside')}; allowed: a "
                 "folder outside every finished run (leave hydra.sweep.dir to certdp's default)")
        self._writable(sweep, config)

    @staticmethod
    def _writable(folder: Path, config) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            fail(io_error_message(e, str(config.get("out_root", folder))))


# The jobs of the command line being run, parsed once by the CLI before Hydra runs any
# (certdp.settings.compose.compose_and_parse): (composed config, settings) in Hydra's job order.
PARSED: list[tuple[dict, object]] = []


def job_settings(command: "str | Command", d: dict, job: int):
    """The settings of job ``job`` (its resolved config ``d``): the CLI's parse of it when the
    config it composed for that job is this one, so a job is parsed once; parsed here otherwise
    (a job launched in another process, or ``execute`` called without the CLI).  ``run`` differs
    between two compositions (a timestamp and a random suffix), so it is the one key read again."""
    import dataclasses
    if 0 <= job < len(PARSED):
        composed, settings = PARSED[job]
        if {k: v for k, v in composed.items() if k != "run"} == {k: v for k, v in d.items() if k != "run"}:
            if composed.get("run") == d.get("run"):
                return settings
            from certdp.settings.base import run_fields
            run = dataclasses.replace(settings.run, run=run_fields()["run"].parse(d.get("run"), "run"))
            return dataclasses.replace(settings, run=run)
    return command.parse(d) if isinstance(command, Command) else parse_settings(command, d)


def execute(entry: Command, cfg, out_dir: Path, *, job: int = -1) -> None:
    """Run one job (called inside Hydra with its output folder, the run's staging folder):
    compute, write every file into the staging folder, then move it into place.

    Every refusal is one line and exit 2 (bad settings, missing data, a taken run folder, a
    write error such as a full disk); SIGINT/SIGTERM exit 130/143.  In each of these cases the
    staging folder is deleted, so no partial results remain.  ``entry``: the command (its
    registry entry: settings parser, runner); ``job``: the job's number in the command line
    (:func:`job_settings`)."""
    from omegaconf import OmegaConf

    from certdp.data.sources import DataUnavailable
    command = entry.name
    paths = _run_paths(out_dir, "hydra.run.dir (or hydra.sweep.subdir)")
    STAGED["paths"] = None              # from here on execute cleans up after itself
    session: checkpoint.Session | None = None
    out_root = cfg.get("out_root", None)
    landed: Path | None = None
    with contextlib.ExitStack() as logs:     # log.txt is closed however the run ends
        try:
            logs.enter_context(file_log(paths.staging / "log.txt"))
            overwrite = _overwrite_flag(cfg.get("overwrite", False))
            _refuse_long_names(paths.final, out_root)
            d = OmegaConf.to_container(cfg, resolve=True)
            settings = job_settings(entry, d, job)
            from certdp import resuming
            if settings.run.resume and resuming.holds_this_run(paths.final, command, d) \
                    and not results.resumable_dir(paths.final).exists():
                results.discard(paths)           # a resumed sweep keeps the jobs it finished
                LANDED.append(paths.final)
                say(f"certdp {command}: {paths.final} already holds this run (same settings and inputs), kept")
                return
            _refuse_taken(paths, overwrite, resume=settings.run.resume)
            try:
                runner = entry.load_runner()
            except ModuleNotFoundError:
                fail(f"{command}: not available in this build; allowed: the commands `certdp --help` lists")
            inputs = results.input_records(d)        # the files as this run reads them (run.json)
            results.write_config(paths.staging / results.CONFIG_FILE, d)
            session, resumed = resuming.resume_session(command, d, settings.run, paths, inputs=inputs,
                                                       interrupt=interrupt_now, log_file=paths.staging / "log.txt")
            if resumed != paths:                 # the newest checkpoint of these settings names the run
                paths = resumed
                _refuse_taken(paths, overwrite, resume=True)
            checkpoint.activate(session)
            frames = runner(settings, progress=settings.run.progress and sys.stderr.isatty())
            checkpoint.activate(None)
            # A runner may ask for a non-zero exit after its files are written (audit violations).
            code = int(frames.pop("_exit_code", 0)) if "_exit_code" in frames else 0
            if not code:
                check_frames(frames)
            written = results.write_outputs(paths.staging, frames)
            results.write_run_record(paths.staging, command=command, version=__version__, inputs=inputs)
            with deferred_signals():
                try:
                    landed = results.commit(paths, overwrite=overwrite)
                except results.RunExists as e:
                    landed = results.commit_elsewhere(paths)
                    typer.echo(f"certdp: warning: run: {e.path} {e.reason}; this run was written to {landed}", err=True)
            if session is not None and session.own_folder() is not None:
                shutil.rmtree(session.own_folder(), ignore_errors=True)    # the run landed: its checkpoint is spent
            for name, rows in written:
                log.info("wrote %s (%d rows)", landed / name, rows)
            LANDED.append(landed)
            say(f"certdp {command}: wrote " + ", ".join(str(landed / name) for name, _ in written))
            if code:
                raise SystemExit(code)
        except SystemExit:
            if landed is None:
                results.discard(paths)
            raise
        except (ConfigError, DataUnavailable) as e:
            results.discard(paths)
            data = isinstance(e, DataUnavailable) or isinstance(e.__context__, DataUnavailable)
            if session is not None and not session.resumed and session.own_folder() is not None and not data:
                # a checkpoint this very process began, of settings that cannot complete; one it
                # resumed is the user's and stays, whatever the refusal
                shutil.rmtree(session.own_folder(), ignore_errors=True)
            fail(data_refusal(e) if data else str(e))
        except OSError as e:
            if landed is None:
                results.discard(paths)
                fail(io_error_message(e, out_root))
            problem, _, allowed = io_error_message(e).partition("; allowed: ")
            fail(f"{problem}; the run itself is complete: {landed}; allowed: {allowed}")
        except KeyboardInterrupt as e:
            ignore_signals()
            if landed is not None:
                interrupted(e, f"the run had finished: {landed}")
            from certdp.resuming import interrupted_checkpoint
            what = f"({paths.final} " + ("is unchanged)" if paths.final.exists() else "does not exist)")
            what += interrupted_checkpoint(session, e, log_file=paths.staging / "log.txt")
            results.discard(paths)
            interrupted(e, f"this run was not written {what}; the {len(LANDED)} runs before it are complete"
                        if LANDED else f"nothing was written {what}")
        finally:
            checkpoint.activate(None)


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
