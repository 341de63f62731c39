"""SIGINT and SIGTERM while a command runs: both raise :class:`Interrupted` (nothing
half-written), a checkpointed loop first saves its state at the end of its step (at most
:data:`SIGNAL_GRACE_S` later), a run's final renames finish first (:meth:`Signals.deferred`), and
the command exits 128 + signum with one line (:meth:`Signals.interrupted`).  The state of a
command line's signals (the last received, one held back) is its :class:`Signals` object."""

from __future__ import annotations

import contextlib
import signal

import typer

from certdp import checkpoint


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM inside a command: handled alike (nothing half-written), exit 128 + signum."""

    def __init__(self, signum: int, *, late: bool = False):
        self.signum = signum
        self.late = late        # the step in progress outlasted SIGNAL_GRACE_S: steps since the last save are lost
        super().__init__(signal.Signals(signum).name)


# Seconds a signal may wait for the current step to end (and its state to be saved) before it is
# acted on regardless: schedulers send SIGKILL some time after SIGTERM (Slurm and Kubernetes: 30 s).
SIGNAL_GRACE_S = 20.0


def _arm_grace(signum: int) -> None:
    def expired(_s, _f):
        raise Interrupted(signum, late=True)
    try:
        signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, SIGNAL_GRACE_S)
    except (ValueError, OSError, AttributeError):     # not the main thread, or no SIGALRM: act at the step's end
        pass


def interrupt_now(signum: int) -> None:
    """Raise the held signal (its state saved): the grace timer is cancelled first."""
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
    except (ValueError, OSError, AttributeError):
        pass
    raise Interrupted(signum)


def ignore_signals() -> None:
    """During cleanup after an interruption a second signal must not cut the cleanup short."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:
            pass


class Signals:
    """SIGINT and SIGTERM during one command line: ``last`` (the last one received), and the one
    ``pending`` while a run's final renames finish (:meth:`deferred`).  One object per command
    line, made by :func:`certdp.cli.main` (or by whoever runs a command without it) and handed
    to every job; the handler it installs (:meth:`handled`) is bound to it."""

    def __init__(self):
        self.defer = False
        self.pending: int | None = None
        self.last: int | None = None

    def _on_signal(self, signum, frame) -> None:
        self.last = signum
        if self.defer:
            self.pending = signum               # raised once the run directory is in place
            return
        if checkpoint.current().signal(signum):  # a checkpointed loop saves at the end of its step, then raises
            _arm_grace(signum)
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def handled(self):
        """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread for the block."""
        old = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, self._on_signal)
        except ValueError:                      # not the main thread: leave signals alone
            pass
        try:
            yield self
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

    @contextlib.contextmanager
    def deferred(self):
        """Let a run's final renames finish before a signal is acted on."""
        self.defer, self.pending = True, None
        try:
            yield
        finally:
            self.defer = False
            pending, self.pending = self.pending, None
            if pending is not None:
                raise Interrupted(pending)

    def interrupted(self, e: KeyboardInterrupt, what: str) -> None:
        """One line (which signal; ``what`` was or was not written) and exit 128 + signum."""
        signum = getattr(e, "signum", None) or self.last or signal.SIGINT
        typer.echo(f"certdp: interrupted by {signal.Signals(signum).name}; {what}", err=True)
        raise SystemExit(128 + signum)
