"""The time each paper figure takes on this machine, for ``certdp figures --list``.

A figure's time is the sum over its runs (shared runs once): a run ``certdp figures`` completed
here counts its measured wall-clock seconds (its ``done.json``: this machine, its device, the
chosen profile); a run not done yet counts the estimate from its settings
(:mod:`certdp.estimate`: the work of its loops times this machine's rates, with a band), what is
left of it when an interrupted run left a checkpoint, or, when its settings give none (a csv's
size is known once read, the hybrid is not modelled), the mean of the figure's measured runs.
The line says which: ``measured``, ``estimated``, or ``k of n runs measured``; a part of a run
the model does not count (a solver's time, a sentence encoder) makes it ``>=`` and is named.
Timing this machine's rates (the first time, or when they are stale) says so on standard error
before it starts, one line a rate.  A run under way reports its progress in log.txt
(docs/resume-and-progress.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from certdp.checkpoint import duration


@dataclass
class FigureTime:
    """``seconds`` (None: no estimate) within [``low``, ``high``] (measured runs count exactly);
    ``done`` of ``runs`` measured; ``unmodelled``: what the estimates leave out; ``why``: why a
    run has no estimate."""
    seconds: float | None
    low: float
    high: float
    done: int
    runs: int
    unmodelled: tuple[str, ...] = ()
    why: tuple[str, ...] = ()


def figure_estimate(resolved: list, estimate=None) -> FigureTime:
    """The :class:`FigureTime` of one figure's resolved runs (:class:`certdp.figures.Resolved`);
    shared runs count once.  ``estimate(r)``: an :class:`certdp.estimate.Estimate` of a run not
    done (or None)."""
    uniq = {r.key: r for r in resolved}
    measured = [float(r.done().get("seconds", 0.0)) for r in uniq.values() if r.is_done()]
    total = low = high = sum(measured)
    missing, unmodelled, why = 0, [], []
    for r in uniq.values():
        if r.is_done():
            continue
        e = estimate(r) if estimate is not None else None
        if e is None or not getattr(e, "known", True):
            missing += 1
            if e is not None:
                why += [u for u in e.unmodelled if u not in why]
            continue
        total += e.seconds
        low += e.seconds if getattr(e, "low", None) is None else e.low
        high += e.seconds if getattr(e, "high", None) is None else e.high
        unmodelled += [u for u in e.unmodelled if u not in unmodelled]
    if missing:
        if not measured:
            return FigureTime(None, 0.0, 0.0, 0, len(uniq), tuple(unmodelled), tuple(why))
        mean = sum(measured) / len(measured)
        total, low, high = total + missing * mean, low + missing * mean, high + missing * mean
    return FigureTime(total, low, high, len(measured), len(uniq), tuple(unmodelled), tuple(why))


def figure_time(resolved: list, estimate=None) -> tuple[float | None, int, int, tuple[str, ...]]:
    """(seconds or None, runs measured, runs, what the estimate leaves out): :func:`figure_estimate`."""
    t = figure_estimate(resolved, estimate)
    return t.seconds, t.done, t.runs, t.unmodelled


def _progress(line: str) -> None:
    """A line on standard error, at once (the listing itself is on standard output)."""
    try:
        sys.stderr.write(f"certdp: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def run_estimate(r, *, calibrate: bool = True, say=None):
    """The settings estimate of one resolved run on its own device (None: none); a run an
    interruption left a checkpoint of (``<run>.resumable``) is estimated for what is left."""
    from certdp import checkpoint, results
    from certdp.estimate import estimate
    from certdp.settings import parse
    entries = None
    folder = results.resumable_dir(r.run_dir)
    if folder.is_dir():
        try:
            entries = checkpoint.load(folder)[1]
        except ValueError:
            entries = None
    try:
        return estimate(parse(r.spec.command, dict(r.config)), calibrate=calibrate, entries=entries,
                        say=say or _progress)
    except Exception:                                  # settings a run would refuse: no estimate
        return None


def list_figures(profile: str, experiments: Path | None = None, echo=print, out_root: str = "outputs", *,
                 load, resolve, estimate=run_estimate) -> None:
    """One line per figure, as soon as it is known: its runs, its time on this machine
    (measured, estimated from the settings with its band, or both, labelled), its title.
    ``load(experiments)`` and ``resolve(spec, out_root)``: :mod:`certdp.figures`' (which calls this)."""
    for n, e in load(experiments).items():
        specs = e.specs(profile)
        try:
            t = figure_estimate([resolve(s, Path(out_root)) for s in specs], estimate)
        except Exception:                     # a figure whose runs cannot be composed: listed without a time
            t = FigureTime(None, 0.0, 0.0, 0, len(specs))
        from certdp.estimate import duration_span
        left = t.unmodelled
        if t.seconds is None:
            when = (f"no estimate (not modelled: {'; '.join(t.why)})" if t.why
                    else "no estimate (its size is known once its data is read)")
        else:
            how = "measured" if t.done == t.runs else ("estimated" if not t.done else f"{t.done} of {t.runs} runs measured")
            span = "" if t.done == t.runs or t.high <= t.low else f" ({duration_span(t.low, t.high)})"
            when = f"{'>= ' if left else ''}{duration(t.seconds, minute_digits=0)}{span} here ({how})"
        echo(f"{n:<22} {len(specs):>3} run(s) [{profile}]  {when:<34} {e.title}"
             + (f"  [not counted: {'; '.join(left)}]" if left else ""))
