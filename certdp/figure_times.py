"""The time each paper figure takes on this machine, for ``certdp figures --list``.

A per-figure cost model built from measurements, not a guess: every run that ``certdp figures``
completed records its wall-clock seconds in its ``done.json`` (this machine, its device, the
chosen profile).  A figure's time is the sum over its runs: measured where the run was done
here, and, for a run not done yet, the mean of the figure's measured runs (the runs of one
figure are points of one sweep: the same command, model and profile).  A figure with no run
measured says so; its first run's AGT logs its own estimate after two steps
(:class:`certdp.checkpoint.Calibration`), and a run under way reports its progress in log.txt
(docs/resume-and-progress.md)."""

from __future__ import annotations

from pathlib import Path

from certdp.checkpoint import duration


def figure_time(resolved: list) -> tuple[float | None, int, int]:
    """(estimated seconds or None, runs measured, runs) of one figure's resolved runs
    (:class:`certdp.figures.Resolved`); shared runs count once."""
    uniq = {r.key: r for r in resolved}
    measured = [float(r.done().get("seconds", 0.0)) for r in uniq.values() if r.is_done()]
    if not measured:
        return None, 0, len(uniq)
    mean = sum(measured) / len(measured)
    return sum(measured) + mean * (len(uniq) - len(measured)), len(measured), len(uniq)


def list_figures(profile: str, experiments: Path | None = None, echo=print, out_root: str = "outputs", *,
                 load, resolve) -> None:
    """One line per figure: its runs, its estimated time on this machine (measured or
    extrapolated from its measured runs, labelled), its title.  ``load(experiments)`` and
    ``resolve(spec, out_root)``: :mod:`certdp.figures`' (which calls this)."""
    for n, e in load(experiments).items():
        specs = e.specs(profile)
        try:
            t, done, total = figure_time([resolve(s, Path(out_root)) for s in specs])
        except Exception:                     # a figure whose runs cannot be composed: listed without a time
            t, done, total = None, 0, len(specs)
        when = ("not measured on this machine yet" if t is None else
                f"{duration(t, minute_digits=0)} here ({'measured' if done == total else f'{done} of {total} runs measured'})")
        echo(f"{n:<22} {len(specs):>3} run(s) [{profile}]  {when:<40} {e.title}")
