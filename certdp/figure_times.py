"""The time each paper figure takes on this machine, for ``certdp figures --list``.

A figure's time is the sum over its runs (shared runs once): a run ``certdp figures`` completed
here counts its measured wall-clock seconds (its ``done.json``: this machine, its device, the
chosen profile); a run not done yet counts the estimate from its settings
(:mod:`certdp.estimate`: the work of its loops times this machine's calibrated rates), or, when
its settings give none (a csv's size is known once read), the mean of the figure's measured
runs.  The line says which: ``measured``, ``estimated``, or ``k of n runs measured``; a part of
a run the model does not count (a solver's time, a sentence encoder) makes it ``>=`` and is
named.  A run under way reports its progress in log.txt (docs/resume-and-progress.md)."""

from __future__ import annotations

from pathlib import Path

from certdp.checkpoint import duration


def figure_time(resolved: list, estimate=None) -> tuple[float | None, int, int, tuple[str, ...]]:
    """(seconds or None, runs measured, runs, what the estimate leaves out) of one figure's
    resolved runs (:class:`certdp.figures.Resolved`); shared runs count once.  ``estimate(r)``:
    an :class:`certdp.estimate.Estimate` of a run not done (or None)."""
    uniq = {r.key: r for r in resolved}
    measured = [float(r.done().get("seconds", 0.0)) for r in uniq.values() if r.is_done()]
    total, missing, unmodelled = sum(measured), 0, []
    for r in uniq.values():
        if r.is_done():
            continue
        e = estimate(r) if estimate is not None else None
        if e is None:
            missing += 1
            continue
        total += e.seconds
        unmodelled += [u for u in e.unmodelled if u not in unmodelled]
    if missing:
        if not measured:
            return None, 0, len(uniq), tuple(unmodelled)
        total += missing * sum(measured) / len(measured)
    return total, len(measured), len(uniq), tuple(unmodelled)


def run_estimate(r, *, calibrate: bool = True):
    """The settings estimate of one resolved run on its own device (None: none)."""
    from certdp.estimate import estimate
    from certdp.settings import parse
    try:
        return estimate(parse(r.spec.command, dict(r.config)), calibrate=calibrate)
    except Exception:                                  # settings a run would refuse: no estimate
        return None


def list_figures(profile: str, experiments: Path | None = None, echo=print, out_root: str = "outputs", *,
                 load, resolve, estimate=run_estimate) -> None:
    """One line per figure: its runs, its time on this machine (measured, estimated from the
    settings, or both, labelled), its title.  ``load(experiments)`` and ``resolve(spec,
    out_root)``: :mod:`certdp.figures`' (which calls this)."""
    for n, e in load(experiments).items():
        specs = e.specs(profile)
        try:
            t, done, total, left = figure_time([resolve(s, Path(out_root)) for s in specs], estimate)
        except Exception:                     # a figure whose runs cannot be composed: listed without a time
            t, done, total, left = None, 0, len(specs), ()
        if t is None:
            when = "no estimate (its size is known once its data is read)"
        else:
            how = "measured" if done == total else ("estimated" if not done else f"{done} of {total} runs measured")
            when = f"{'>= ' if left else ''}{duration(t, minute_digits=0)} here ({how})"
        echo(f"{n:<22} {len(specs):>3} run(s) [{profile}]  {when:<34} {e.title}"
             + (f"  [not counted: {'; '.join(left)}]" if left else ""))
