"""What every run of a command shares: its run folder's checks, its output streams, its logs,
its one-line failures (running a job: :mod:`certdp.job`).

Every refusal is one line ``certdp: error: <key>: ...`` and exit 2.  :class:`RunGuard` (a Hydra
callback, ``configs/base.yaml``) refuses a taken run folder, a folder inside another run or with
a staging name, and an unwritable ``out_root`` before Hydra creates anything.

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
import sys
from pathlib import Path

import typer

from certdp import checkpoint, results

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
        # Hydra creates the staging folder itself (recording it first: CommandLine.discard_unstarted)
        self._writable(paths.staging.parent, config)

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
        """``folder`` exists (made now if need be) and a folder can be made in it."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
        except OSError as e:
            fail(io_error_message(e, str(config.get("out_root", folder))))
