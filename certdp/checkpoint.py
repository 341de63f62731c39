"""Checkpoints of a run's long loops, and the run's progress records.

A run's long loops (nominal training, AGT's box loop and its per-epoch ledger, the DP-SGD and
PATE trajectories) open a :class:`Loop` on the run's :class:`Session` and call
:meth:`Loop.tick` after every step with a function that returns the loop's carried state (the
tensors and numbers that the rest of the loop reads).  The session

* saves every loop's latest state **atomically** (one ``state.pt``, written to a temporary file,
  flushed and renamed) every ``checkpoint_minutes`` and when a SIGINT/SIGTERM arrived during the
  step (:meth:`Session.signal`: the signal is held until the step ends, then the state is saved
  and the interruption raised);
* on resume, hands each loop the state it had at the last save, together with the global random
  generators (torch, CUDA, numpy, ``random``) as they were then, so that the resumed run draws
  exactly what the uninterrupted run drew: the CSVs are byte-identical;
* writes one-line progress records (phase, step/total, what the loop computes, elapsed time,
  estimated remaining) at most every ``progress_seconds``.

Loop keys.  A loop is named by its phase and its occurrence among the loops of that phase opened
within the same enclosing step (``agt#2``; a loop opened inside step 7 of an outer loop is
``nominal#0@7/agt#0``).  A run is deterministic, so the resumed run opens the same loops in the
same order and meets the same keys; a loop whose enclosing loop resumes past it is never opened
again.  A finished loop keeps its final state (it is skipped on resume); its result is rebuilt
from that state by the loop itself.

The checkpoint folder (``<run>.resumable``, :data:`certdp.results.RESUMABLE`) holds
``checkpoint.json`` (the command, the resolved config and its SHA-256, the input files'
checksums, the certdp version, where it was written, and its id) and ``state.pt``; it never holds
``config.yaml`` or ``run.json`` at its top and its name is not a run name
(:func:`certdp.results.is_run_dir_name`), so it is never taken for a finished run.  It is
deleted when the run lands.  ``state.pt`` is the researcher's file: it holds parameters trained
on the private records and is never publishable.

Identity.  A checkpoint's id (:data:`ID_KEY`, random, drawn when the run starts) is written in
both files; :func:`load` refuses a ``state.pt`` whose id is not its ``checkpoint.json``'s (one
copied from another checkpoint, or written by another run of the same name), and a session
claims its folder before its first save (:meth:`Session.save`): a folder that another run's
checkpoint already holds is left alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import os
import random
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from certdp import results
from certdp.errors import ConfigError

log = logging.getLogger("certdp")
PROGRESS_LOGGER = "certdp.progress"      # the progress records: log.txt and stderr, not the console log
plog = logging.getLogger(PROGRESS_LOGGER)

STATE_FILE = "state.pt"
RECORD_FILE = "checkpoint.json"
STATE_FORMAT = "certdp.checkpoint/2"       # /2: the id in both files, the inputs' checksums
ID_KEY = "checkpoint_id"
# Test hook: after this many steps of all loops together, the process sends itself SIGTERM
# (tests interrupt a run at a chosen step; the signal takes the path a scheduler's would).
TEST_SIGNAL_ENV = "CERTDP_TEST_SIGTERM_AT_STEP"

# The session of the run in progress, for the loops deep in a runner (agt.py, training.py, the
# baselines) that save through it: a context variable that a job sets for its runner's duration
# (:func:`active`) and that is reset when the runner returns -- never left set between runs.
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("certdp_checkpoint_session", default=None)


def current() -> "Session":
    """The session of the run in progress, or an inert one (no checkpoints, no records)."""
    s = _CURRENT.get()
    return s if s is not None else _INERT


def rng_state() -> dict:
    """The global random generators' states (what a loop's draws may read besides its own)."""
    st = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st: dict) -> None:
    torch.set_rng_state(st["torch"])
    np.random.set_state(st["numpy"])
    random.setstate(st["random"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def _detach(obj):
    """A copy of a state on the CPU (tensors cloned: the loop goes on updating its own)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, torch.Generator):
        return {"__generator__": obj.get_state(), "device": str(obj.device)}
    if isinstance(obj, dict):
        return {k: _detach(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detach(v) for v in obj)
    return obj


def duration(sec: float, *, minute_digits: int = 1) -> str:
    """A time in s (< 2 min), min (< 2 h) or h, for estimates and progress records."""
    if sec < 120:
        return f"{sec:.0f} s"
    if sec < 7200:
        return f"{sec / 60:.{minute_digits}f} min"
    return f"{sec / 3600:.1f} h"


class Calibration:
    """The time estimate of one AGT pass, logged once after its first steps when the pass will
    take longer than :attr:`min_seconds` (a request for the paper's radii on a CPU says what it
    costs before the hours start).  The rate is the second step's (the first compiles and
    allocates what later steps reuse; a pass of two steps or fewer takes the first's); every step
    reads a number of the boxes back (the margins), so the times are the device's, not queued
    work."""

    min_seconds = 120.0

    def __init__(self, *, steps: int, radii: int, engine: str, device):
        self.steps, self.radii, self.engine, self.device = steps, radii, engine, torch.device(device)
        self.skip = 1 if steps > 2 else 0          # steps left out of the rate
        self.done = 0
        self.t0 = self._start = time.perf_counter()
        self.base = 0
        self.estimate: float | None = None        # seconds for the whole pass, once known

    def tick(self, n: int = 1) -> None:
        """``n`` more steps done."""
        self.done += n
        if self.estimate is not None:
            return
        now = time.perf_counter()
        if self.done <= self.skip:
            self.t0, self.base = now, self.done
            return
        base = self.base if self.skip else 0
        rate = (now - self.t0) / (self.done - base)
        self.estimate = (now - self._start) + rate * (self.steps - self.done)     # elapsed + the rest
        if self.estimate >= self.min_seconds:
            log.info("AGT[%s] estimate: %d radii x %d steps on %s, %.3g s per step: about %s in all%s",
                     self.engine, self.radii, self.steps, self.device, rate, duration(self.estimate),
                     self.hints() if self.estimate >= self.hint_seconds else "")

    hint_seconds = 600.0       # a pass estimated longer than this also says what would make it faster

    def hints(self) -> str:
        """What would make a long pass faster, and that it can be interrupted and resumed."""
        ways = ([] if self.device.type == "cuda" else ["a GPU (device=cuda)"]) + [
            f"fewer radii (staircase.k_max below the {self.radii} computed now)",
            "a smaller profile (a preset's quick profile, fewer train.steps)"]
        return (f"; faster: {', '.join(ways)}; the run saves a checkpoint every checkpoint_minutes and on "
                "SIGINT/SIGTERM (certdp resume RUN_DIR continues it)")


class Loop:
    """One loop of a run: ``state`` (the restored state, None when starting afresh) and ``step``
    (the steps already done).  Call :meth:`tick` after each step and :meth:`finish` at the end."""

    def __init__(self, session: "Session", key: str, phase: str, total: int, detail: str, entry: dict | None):
        self.session, self.key, self.phase, self.total, self.detail = session, key, phase, int(total), detail
        self.state = entry["state"] if entry is not None else None
        self.step = int(entry["step"]) if entry is not None else 0
        self.finished = bool(entry and entry.get("done"))
        self.start_step = self.step
        self.t0 = self.t_second = time.perf_counter()

    def generator(self, gen: torch.Generator, name: str = "gen") -> torch.Generator:
        """``gen`` with the state it had at the checkpoint (a loop's own generator)."""
        if self.state is not None and name in self.state:
            gen.set_state(self.state[name]["__generator__"])
        return gen

    def tick(self, step: int, state: Callable[[], dict]) -> None:
        """``step`` steps of ``total`` are done; ``state()`` is the loop's carried state now."""
        self.step = int(step)
        self.session._tick(self, state)

    def finish(self, state: Callable[[], dict]) -> None:
        self.session._finish(self, state)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.session._close(self, act=exc_type is None)
        return False


class Session:
    """The checkpoints and progress records of one run.

    ``folder``: the checkpoint folder (None: no checkpoints, progress records only);
    ``interval_s``: seconds between saves (0: after every step; None: only on a signal);
    ``progress_s``: seconds between progress records (None: none); ``restored``: the entries of
    the checkpoint being resumed; ``record``: ``checkpoint.json``'s content; ``interrupt(signum)``
    raises the interruption once the state is saved; ``stderr``: also write progress records to
    standard error."""

    def __init__(self, *, folder: Path | None, interval_s: float | None, progress_s: float | None,
                 restored: dict | None = None, record: dict | None = None,
                 interrupt: Callable[[int], None] | None = None, stderr: bool = False, restore_rng: bool = True):
        self.folder = Path(folder) if folder is not None else None
        self.interval_s, self.progress_s = interval_s, progress_s
        self.entries: dict = dict(restored or {})
        self.resumed = restored is not None     # the folder held this checkpoint before the process began
        self.record, self.interrupt, self.stderr = record, interrupt, stderr
        self.ident = (record or {}).get(ID_KEY)
        self.claimed = False        # the folder is this checkpoint's (checked at the first save)
        self.displaced: Path | None = None     # the folder another run's checkpoint held: none kept
        self.restore_rng = restore_rng
        self.stack: list[Loop] = []
        self.cut: list[Loop] = []   # the loops an exception closed (innermost first)
        self.counts: dict = {}
        self.pending: int | None = None
        self.t_start = self.last_save = self.last_record = time.perf_counter()
        self.dirty = False          # entries changed since the last save
        self.ticks = 0
        at = os.environ.get(TEST_SIGNAL_ENV, "")
        self.signal_at = int(at) if at.strip().isdigit() else None

    # ------------------------------------------------------------------ loops
    def loop(self, phase: str, *, total: int, detail: str = "") -> Loop:
        prefix = "/".join(f"{lp.key}@{lp.step}" for lp in self.stack)
        n = self.counts.get((prefix, phase), 0)
        self.counts[(prefix, phase)] = n + 1
        key = f"{prefix}/{phase}#{n}" if prefix else f"{phase}#{n}"
        entry = self.entries.get(key)
        if entry is not None:
            if int(entry.get("total", total)) != int(total) or int(entry["step"]) > int(total):
                raise ConfigError("resume", f"the checkpoint's {key} holds step {int(entry['step'])} of "
                                            f"{int(entry.get('total', -1))}, these settings run {int(total)} steps; "
                                            "allowed: the checkpoint of these settings, or resume=false to start afresh")
            if self.restore_rng:
                set_rng_state(entry["rng"])
            log.info("resume: %s continues at step %d of %d", key, int(entry["step"]), int(total))
        lp = Loop(self, key, phase, total, detail, entry)
        self.stack.append(lp)
        return lp

    def _close(self, lp: Loop, act: bool = True) -> None:
        if self.stack and self.stack[-1] is lp:
            self.stack.pop()
        if not act:
            self.cut.append(lp)
        if act and not self.stack and self.pending is not None:     # a signal held past the last step
            signum, self.pending = self.pending, None
            self.save()
            if self.interrupt is not None:
                self.interrupt(signum)

    def in_loop(self) -> bool:
        return bool(self.stack)

    def _snapshot(self, lp: Loop, state: Callable[[], dict], done: bool) -> None:
        self.entries[lp.key] = {"step": lp.step, "total": lp.total, "state": _detach(state()), "rng": rng_state(),
                                "done": done}
        self.dirty = True
        # the loops opened inside an earlier step of this one are never opened again
        inner = f"{lp.key}@"
        for k in [k for k in self.entries if k.startswith(inner)]:
            step = k[len(inner):].split("/", 1)[0]
            if step.isdigit() and int(step) < lp.step:
                del self.entries[k]

    def _tick(self, lp: Loop, state: Callable[[], dict]) -> None:
        self.ticks += 1
        now = time.perf_counter()
        if self.signal_at is not None and self.ticks == self.signal_at:
            import signal
            os.kill(os.getpid(), signal.SIGTERM)
        if self.progress_s is not None and now - self.last_record >= self.progress_s:
            self.progress(lp, now)
        done = lp.step - lp.start_step
        if done == 2 and lp.phase != "agt" and lp.total > lp.step:        # AGT has its own (Calibration)
            left = (now - lp.t_second) * (lp.total - lp.step)
            if left >= Calibration.hint_seconds:
                log.info("%s estimate: %d steps, %.3g s per step: about %s to go (%s); the run saves a checkpoint "
                         "every checkpoint_minutes (certdp resume RUN_DIR continues it)", lp.phase, lp.total,
                         now - lp.t_second, duration(left), lp.detail or "this phase")
        elif done == 1:
            lp.t_second = now                   # the first step compiles and allocates: timed from the second
        if self.pending is not None:
            signum, self.pending = self.pending, None
            if self.folder is not None:
                self._snapshot(lp, state, done=False)
                self.save()
            if self.interrupt is not None:
                self.interrupt(signum)
            return
        if self.folder is not None and self.interval_s is not None and now - self.last_save >= self.interval_s:
            self._snapshot(lp, state, done=False)
            self.save()

    def _finish(self, lp: Loop, state: Callable[[], dict]) -> None:
        if self.folder is not None and not lp.finished:
            self._snapshot(lp, state, done=True)     # kept in memory, written with the next save

    # ------------------------------------------------------------------ saving
    def save(self) -> None:
        """Write the checkpoint folder atomically (``checkpoint.json`` once, ``state.pt`` each time)."""
        if self.folder is None or not self._claim():
            return
        buf = io.BytesIO()
        torch.save({"format": STATE_FORMAT, ID_KEY: self.ident, "entries": self.entries}, buf)
        results.atomic_write_bytes(self.folder / STATE_FILE, buf.getvalue())
        self.last_save = time.perf_counter()
        self.dirty = False
        where = ", ".join(f"{k} at {int(e['step'])}" + (" (done)" if e.get("done") else "")
                          for k, e in self.entries.items() if not e.get("done"))
        plog.info("checkpoint: saved %s%s", self.folder, f" ({where})" if where else "")

    def own_folder(self) -> Path | None:
        """The checkpoint folder when it is this session's (resumed from, or created by its first
        save), else None: a folder that another run created in the meantime is never touched."""
        return self.folder if self.folder is not None and (self.claimed or self.resumed) else None

    def _claim(self) -> bool:
        """Make the folder this checkpoint's before its first save: created now (with
        ``checkpoint.json``), or already holding this checkpoint's ``checkpoint.json`` (a resumed
        run).  A folder holding another run's checkpoint (two runs started with the same name) is
        left as it is and this session keeps none (said once in the log)."""
        if self.claimed:
            return True
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            self.folder.mkdir()
        except FileExistsError:
            theirs = read_record(self.folder, quiet=True)
            if self.ident is None or theirs is None or theirs.get(ID_KEY) != self.ident:
                self.displaced, self.folder = self.folder, None
                log.warning("checkpoint: %s holds the checkpoint of another run started with the same name; this "
                            "run keeps none (it goes on, and lands where it can)", self.displaced)
                return False
        if self.record is not None and not (self.folder / RECORD_FILE).exists():
            results.write_json(self.folder / RECORD_FILE, self.record)
        self.claimed = True
        return True

    def kept_at(self, *, late: bool = False) -> str:
        """Where the saved state stands, for the interruption's message: each unfinished loop's
        saved step, and the steps done since that save that are lost (``late``: the step in
        progress outlasted the signal's grace)."""
        open_ = [f"{k} step {int(e['step'])} of {int(e.get('total', e['step']))}"
                 for k, e in self.entries.items() if not e.get("done")]
        done = sum(1 for e in self.entries.values() if e.get("done"))
        where = ("saved at " + ", ".join(open_)) if open_ else f"saved after {done} finished loop(s)"
        lost = [(lp.key, lp.step - int(self.entries.get(lp.key, {}).get("step", 0))) for lp in reversed(self.cut)]
        lost = [(k, n) for k, n in lost if n > 0]
        if lost:
            why = " because the step in progress outlasted the signal's grace" if late else ""
            where += "; lost" + why + ": " + ", ".join(f"{n} step(s) of {k} done since that save" for k, n in lost)
        return where

    def signal(self, signum: int) -> bool:
        """A SIGINT/SIGTERM: True when it is held until the current step ends (a loop is open
        and nothing is pending), False when the caller must act on it now."""
        if not self.stack or self.pending is not None:
            return False
        self.pending = signum
        return True

    # ------------------------------------------------------------------ progress
    def progress(self, lp: Loop, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        self.last_record = now
        done = lp.step - lp.start_step
        # from the second step on (the first compiles and allocates: a rate from it alone misleads)
        left = (now - lp.t_second) / (done - 1) * (lp.total - lp.step) if done > 1 else None
        line = (f"progress: {lp.phase} step {lp.step}/{lp.total}" + (f" {lp.detail}" if lp.detail else "")
                + f"; elapsed {duration(now - self.t_start)}"
                + (f"; remaining {duration(left)} (this phase)" if left is not None else ""))
        plog.info(line)
        if self.stderr:
            import sys
            try:
                sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] certdp {line}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass


_INERT = Session(folder=None, interval_s=None, progress_s=None)


@contextlib.contextmanager
def active(session: Session | None):
    """``session`` is the run's session for the block (None: the inert one), the one before it
    afterwards."""
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)


# ---------------------------------------------------------------------------- the folder
def read_record(folder: Path, *, quiet: bool = False) -> dict | None:
    """``checkpoint.json`` of a checkpoint folder (not ``state.pt``); ValueError when it is not
    one (``quiet``: None instead)."""
    import json
    rec_path = Path(folder) / RECORD_FILE
    try:
        if not rec_path.is_file():
            raise ValueError(f"{folder} holds no {RECORD_FILE} (not a certdp checkpoint)")
        try:
            record = json.loads(rec_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{rec_path} cannot be read ({e})") from None
        if not isinstance(record, dict) or record.get("format") != STATE_FORMAT:
            old = record.get("format") if isinstance(record, dict) else None
            raise ValueError(f"{rec_path} is not of the format {STATE_FORMAT}" + (
                f" (it is {old}, written by an earlier certdp without input checksums: resume it with that certdp)"
                if isinstance(old, str) and old.startswith("certdp.checkpoint/") else ""))
        if not isinstance(record.get(ID_KEY), str) or not record[ID_KEY]:
            raise ValueError(f"{rec_path} has no {ID_KEY} (not a checkpoint that certdp wrote)")
    except ValueError:
        if quiet:
            return None
        raise
    return record


def load(folder: Path) -> tuple[dict, dict]:
    """(``checkpoint.json``, the entries of ``state.pt``) of a checkpoint folder; ValueError
    when it is not one, is damaged, or its ``state.pt`` is not its own (another checkpoint's id)."""
    folder = Path(folder)
    record = read_record(folder)
    st_path = folder / STATE_FILE
    entries: dict = {}
    if st_path.is_file():
        try:
            doc = torch.load(st_path, map_location="cpu", weights_only=False)
        except Exception as e:            # a damaged file: say so in one line
            raise ValueError(f"{st_path} cannot be read ({type(e).__name__})") from None
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT or not isinstance(doc.get("entries"), dict):
            raise ValueError(f"{st_path} is not of the format {STATE_FORMAT}")
        if doc.get(ID_KEY) != record[ID_KEY]:
            raise ValueError(f"{st_path} is not this checkpoint's (its {ID_KEY} differs from {RECORD_FILE}'s: copied "
                             "from another checkpoint or written by another run of the same name), so its state does "
                             "not belong to these settings")
        entries = doc["entries"]
    return record, entries
